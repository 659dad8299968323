"""``explain --format dot|svg|png``: the plan and the Δ-script as a graph (no Spark: the view is
given as a file over tables created by delta-rs)."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from idivm import cli
from idivm.algebra import operators as O
from idivm.datasets import DATASETS, sample_path, view_path
from idivm.errors import SetupError
from idivm.warehouse import Warehouse

NODE = re.compile(r'^\s*(n\d+) \[label="((?:[^"\\]|\\.)*)"(?:, \w+="[^"]*")*\];$')
EDGE = re.compile(r'^\s*(n\d+) -> (n\d+)(?: \[(?:\w+="[^"]*"(?:, )?)+\])?;$')


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    path = tmp_path_factory.mktemp("pictures")
    wh = Warehouse(path)
    for dataset, module in DATASETS.items():
        for table, key in module.KEYS.items():
            wh.create_table(table, key, sample_path(dataset, table))
    return path


def explain(warehouse, *args):
    result = CliRunner().invoke(cli.cli, ["--warehouse", str(warehouse), "explain", *map(str, args)],
                                obj=cli.CliState())
    return result


def parse_dot(text: str) -> tuple[dict[str, str], list[tuple[str, str]], list[str]]:
    """(nodes by name with their labels, edges, cluster labels); fails on any other line."""
    lines = text.splitlines()
    assert lines[0].startswith("digraph ") and lines[0].endswith("{") and lines[-1] == "}"
    nodes, edges, clusters, depth = {}, [], [], 1
    for line in lines[1:-1]:
        if m := NODE.match(line):
            nodes[m.group(1)] = m.group(2)
        elif m := EDGE.match(line):
            edges.append((m.group(1), m.group(2)))
        elif line.strip().startswith("subgraph cluster_") and line.endswith("{"):
            depth += 1
        elif line.strip() == "}":
            depth -= 1
        elif m := re.match(r'^\s*label="(.*)";$', line):
            clusters.append(m.group(1))
        else:
            assert re.match(r"^\s*(rankdir=\w+|node \[.*\]|edge \[.*\]);$", line), line
    assert depth == 1
    assert all(t in nodes and h in nodes for t, h in edges)
    return nodes, edges, clusters


def test_dot_has_every_operator_with_its_ids_and_every_statement(warehouse):
    from idivm.exec import programs

    result = explain(warehouse, view_path("sf_reviews"), "--format", "dot")
    assert result.exit_code == 0, result.output
    nodes, edges, clusters = parse_dot(result.output)
    # the plan, compared with the planner's own operators (not with our output)
    text = view_path("sf_reviews").read_text(encoding="utf-8")
    view, prov = programs.plan_view(Warehouse(warehouse).catalog, text, None)
    operators = {id(op): op for op in O.walk(view.plan) if not isinstance(op, O.Ground)}
    for op in O.walk(view.plan):
        for nested in op.nested():
            operators |= {id(o): o for o in O.walk(nested) if not isinstance(o, O.Ground)}
    ops = [label for label in nodes.values() if label.split()[0] in {type(o).__name__ for o in operators.values()}]
    assert len(ops) == len(operators)
    assert all(re.search(r"\\nIDs \{", label) for label in ops)
    # each Δ-script statement, and what reads feed it
    statements = {n: label for n, label in nodes.items() if re.match(r"Δ\d+ from ", label)}
    script = programs.generate_script(Warehouse(warehouse).catalog, view, prov, text, None, "id", strict=False)[0]
    assert len(statements) == len(script.statements) >= 1
    for n in statements:
        assert any(h == n for _, h in edges)  # it reads something
    assert any(label.startswith("index ") for label in nodes.values())  # the nested updates' indexes
    assert clusters[0].startswith("plan") and clusters[1].startswith("Δ-script")
    if shutil.which("dot"):
        assert subprocess.run(["dot", "-Tcanon"], input=result.output, text=True, capture_output=True).returncode == 0


needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


@needs_dot
def test_svg_is_an_svg_document(warehouse, tmp_path):
    target = tmp_path / "v.svg"
    result = explain(warehouse, view_path("devices_cost"), "--format", "svg", "--output", target)
    assert result.exit_code == 0, result.output
    root = ET.fromstring(target.read_bytes())
    assert root.tag.endswith("svg")
    assert "GroupBy" in target.read_text(encoding="utf-8")


@needs_dot
def test_png_is_a_png_image(warehouse, tmp_path):
    target = tmp_path / "v.png"
    result = explain(warehouse, view_path("devices_v"), "--format", "png", "-o", target)
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_graphviz_a_one_line_error(warehouse, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SetupError, match="install Graphviz"):
        from idivm.explain import draw

        draw("digraph x {}", "svg")
    code = cli.main(["--warehouse", str(warehouse), "explain", str(view_path("devices_v")), "--format", "svg"])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and len(err.splitlines()) == 1 and "install Graphviz" in err
