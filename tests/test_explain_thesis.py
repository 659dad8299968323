"""``explain`` of the thesis' example views shipped in ``idivm/datasets/views``.

Each view is planned over the shipped sample of its dataset; its printout is
compared with ``tests/goldens/explain_thesis/<view>.txt`` (``pytest
--update-goldens`` rewrites them).  The JSON form is checked against the text:
same view IDs, every operator of the plan annotated, same base tables, same indexes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from idivm.datasets import DATASETS, sample_path, view_names, view_path

GOLDENS = Path(__file__).parent / "goldens" / "explain_thesis"

# view file -> dataset whose sample it reads
VIEWS = {
    "devices_v": "devices",
    "devices_cost": "devices",
    "devices_price_range": "devices",
    "devices_dearest": "devices",
    "sf_reviews": "yelp",
    "sf_reviews_flat": "yelp",
    "sf_reviews_grouped": "yelp",
}


def test_every_shipped_view_is_covered():
    assert sorted(VIEWS) == view_names()


@pytest.fixture(scope="module")
def warehouses(spark, tmp_path_factory):
    """One warehouse per dataset, holding its shipped sample."""
    from idivm.warehouse import Warehouse

    out = {}
    for dataset in sorted(set(VIEWS.values())):
        wh = Warehouse(tmp_path_factory.mktemp(dataset) / "wh", spark=spark)
        for table, key in DATASETS[dataset].KEYS.items():
            wh.create_table(table, key, sample_path(dataset, table))
        out[dataset] = wh
    return out


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_explain_golden(warehouses, update_goldens, view):
    text = warehouses[VIEWS[view]].explain(view_path(view)) + "\n"
    path = GOLDENS / f"{view}.txt"
    if update_goldens:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}: run pytest --update-goldens and review it"
    assert text == path.read_text()


def operators(node: dict):
    """Every operator of a JSON plan, nested plans included."""
    yield node
    for child in node.get("inputs", []) + node.get("nested", []):
        yield from operators(child)


def id_names(ids: dict | None) -> list[str]:
    return [g["name"] for g in ids["groups"]] if ids and "groups" in ids else []


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_explain_json_agrees_with_text(warehouses, view):
    wh = warehouses[VIEWS[view]]
    text = wh.explain(view_path(view))
    data = json.loads(wh.explain(view_path(view), "json"))
    lines = text.splitlines()

    assert lines[0].startswith(f"view {data['view']}: ")
    ids_line = re.fullmatch(r"IDs: \{(.*)\}", lines[1])
    assert ids_line, lines[1]
    assert [i["name"] for i in data["ids"]] == ids_line.group(1).split(", ")
    assert all(i["column"] for i in data["ids"])

    plan_start = lines.index("plan (IDs of each operator, thesis Table 2.1 / 2.6):") + 1
    sig_start = lines.index("base-table i-diff signatures (§2.5, §2.14.1):")
    plan_lines = [line for line in lines[plan_start:sig_start - 1] if line.strip() != "plan:"]  # nested plans
    ops = list(operators(data["plan"]))
    assert len(ops) == len(plan_lines)
    assert all(op["ids"] is not None for op in ops)
    assert data["plan"]["ids"].get("groups"), "the view's top operator has IDs"
    assert id_names(data["plan"]["ids"]) == [i["name"] for i in data["ids"]]
    plan_text = "\n".join(plan_lines)
    for op in ops:
        assert op["operator"] and op["text"]
        for name in id_names(op["ids"]):
            assert name in plan_text

    script_start = next(i for i, line in enumerate(lines) if line.startswith(("Δ-script of", "no Δ-script")))
    index_start = lines.index("global provenance indexes (§2.15.2):")
    signature_lines = lines[sig_start + 1:index_start - 1]
    index_lines = lines[index_start + 1:lines.index("", index_start)]
    selected = data["indexes"]["selected"]
    assert index_lines[0].startswith(f"{len(selected)} index")
    assert f"upper bound (§2.15.4) {data['indexes']['bound']['value']} = " in index_lines[0]
    assert len(selected) <= data["indexes"]["bound"]["value"]
    heads = [line for line in index_lines[1:] if not line.startswith("    ")]
    assert [line.split("  <- ")[0].strip() for line in heads] == [
        (".".join(i["collection"]) or "root") + " " + " / ".join(f"#({', '.join(n)})" for n in i["levels"])
        for i in selected]
    # below each index, how it is stored and the statements that read it, as the JSON says
    notes = [line.strip() for line in index_lines[1:] if line.startswith("    ")]
    assert notes == [n for n in data["indexes"]["notes"] if n]
    script = data["delta_script"]
    if "statements" in script:  # one "Δi from ..." line per statement: each cache's, then the view's
        statements = [st for c in script.get("caches", []) for st in c["script"]["statements"]]
        statements += script["statements"]
        # up to the maps, whose section renders the Δ-script over maps caches
        maps_start = next((i for i, line in enumerate(lines) if line.startswith(
            ("higher-order delta maps", "no higher-order delta maps"))), len(lines))
        heads = [line for line in lines[script_start:maps_start] if re.match(r"Δ\d+ from ", line)]
        assert len(heads) == len(statements)
        for head, st in zip(heads, statements):
            assert head.split(" from ")[1].startswith(st["origin"])
    else:
        assert lines[script_start] == f"no Δ-script: {script['none']}"
    headers = [line for line in signature_lines if not line.startswith(" ")]
    collections = [".".join([s["table"], *s["collection"]]) for s in data["base_signatures"]]
    assert [h.split(" (key ")[0] for h in headers] == collections
    assert {s["table"] for s in data["base_signatures"]} == set(DATASETS[VIEWS[view]].KEYS)  # each reads all
    for s, header in zip(data["base_signatures"], headers):
        assert header.split(" (key ")[1].startswith(", ".join(s["key"]) or "the value")
        assert ("[wildcard" in header) == s["wildcard"]
        for signature in [s["insert"], s["delete"], *(c["signature"] for c in s["conditional_updates"]),
                          *([s["nonconditional_update"]] if s["nonconditional_update"] else [])]:
            assert signature.splitlines()[0] in "\n".join(signature_lines)
