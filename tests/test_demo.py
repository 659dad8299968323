"""``idivm demo`` end to end through click's runner: the rows it says changed are those that
differ between the three views computed here, in plain Python, from the sample files before and
after the demo's Debezium batch; and the formatting of values it prints (no Spark for those)."""

from __future__ import annotations

import decimal
import json
import re
from collections import Counter

import pytest
from click.testing import CliRunner

from idivm import cli
from idivm.datasets import sample_tables
from idivm.demo import BATCH_DIR, ViewChange, view_changes
from idivm.display import format_float, format_value, json_text


# --- values as written ---------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (99.85 + 9.69 + 97.07, "206.61"),  # 206.60999999999999 in binary
    (0.1 + 0.2, "0.3"),
    (0.1, "0.1"),
    (3.0, "3.0"),
    (1e-07, "1e-07"),
    (123456789.123, "123456789.123"),
    (2.0 ** 60, "1.15292150460685e+18"),
    (float("inf"), "inf"),
])
def test_floats_print_without_binary_noise(value, text):
    assert format_float(value) == text
    assert float(text) == pytest.approx(value, rel=1e-14)


def test_decimals_print_their_own_string_and_nested_values_are_json():
    assert format_value(decimal.Decimal("1.10")) == "1.10"
    assert format_value("plain") == "plain"
    nested = {"a": [0.1 + 0.2, decimal.Decimal("2.50"), None, True], "b": "x\"y"}
    assert json_text(nested) == '{"a": [0.3, 2.50, null, true], "b": "x\\"y"}'
    assert json.loads(json_text(nested)) == {"a": [0.3, 2.5, None, True], "b": 'x"y'}
    assert cli.format_table(["v"], [[99.85 + 9.69 + 97.07]]) == "v\n206.61"


# --- the demo's story ----------------------------------------------------------------------------

def apply_batch(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The sample tables after the demo's batch of Debezium events, applied here by hand."""
    keys = {"parts": "pid", "reviews": "review_id", "users": "user_id"}
    out = {t: [dict(r) for r in rows] for t, rows in tables.items()}
    for file in BATCH_DIR.glob("*.jsonl"):
        table, key = file.stem, keys[file.stem]
        for line in file.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            image = event["after"] or event["before"]
            rows = [r for r in out[table] if r[key] != image[key]]
            assert event["before"] is None or event["before"] in out[table], "the batch fits the samples"
            out[table] = rows + ([event["after"]] if event["op"] != "d" else [])
    return out


def oracle_views(t: dict[str, list[dict]]) -> dict[str, dict[tuple, dict]]:
    """The demo's three views computed from base rows, by the values of their IDs (as JSON text)."""
    phones = {d["did"] for d in t["devices"] if d["category"] == "phone"}
    price = {p["pid"]: p["price"] for p in t["parts"]}
    parts = {(json_text(dp["pid"]), json_text(dp["did"])): {"did": dp["did"], "pid": dp["pid"], "price": price[dp["pid"]]}
             for dp in t["devices_parts"] if dp["did"] in phones and dp["pid"] in price}
    cost: dict[tuple, dict] = {}
    for r in parts.values():
        entry = cost.setdefault((json_text(r["did"]),), {"did": r["did"], "cost": 0.0})
        entry["cost"] += r["price"]
    users = {u["user_id"]: u for u in t["users"]}
    reviews = {(json_text(b["business_id"]),): {"business_id": b["business_id"], "full_reviews": [
        {**r, **{k: v for k, v in users[r["user_id"]].items() if k != "user_id"}}
        for r in t["reviews"] if r["business_id"] == b["business_id"] and r["user_id"] in users]}
        for b in t["businesses"] if b["city"] == "San Francisco"}
    return {"phone_parts": parts, "phone_cost": cost, "sf_reviews": reviews}


def printed_changes(out: str) -> dict[str, list[str]]:
    """The change lines the demo printed under each ``view NAME (...): N rows changed`` header."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("view ") and re.search(r" rows? changed", line):
            current = sections.setdefault(line.split()[1], [])
        elif current is not None and line.startswith("  ") and not line.startswith(
                ("  read:", "  wrote:", "  cost:", "  time:")):
            current.append(line[2:])
        else:
            current = None
    return sections


def expected_lines(changes: list[ViewChange]) -> list[str]:
    """The lines of ``changes`` with every number rounded as printed, as a bag."""
    return sorted(line for c in changes for line in c.lines())


def test_demo_shows_the_batch_flowing_into_the_views(spark, tmp_path):
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    runner = CliRunner()
    try:
        result = runner.invoke(cli.cli, ["--warehouse", str(tmp_path / "wh"), "demo"], obj=cli.CliState())
        again = runner.invoke(cli.cli, ["--warehouse", str(tmp_path / "wh"), "demo"], obj=cli.CliState())
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "206.60999" not in out and "206.61" in out  # phone_cost of device 4 before the batch

    samples = {**sample_tables("devices"), **sample_tables("yelp")}
    before, after = oracle_views(samples), oracle_views(apply_batch(samples))
    ids = {"phone_parts": ["pid", "did"], "phone_cost": ["did"], "sf_reviews": ["business_id"]}
    printed = printed_changes(out)
    assert set(printed) == set(ids)
    for view, names in ids.items():
        changes = view_changes(before[view], after[view], names)
        assert changes, view
        assert sorted(printed[view]) == expected_lines(changes), view
        assert f"view {view} (strategy id): {len(changes)} row" in out
    # by hand: the price of part 7 (in phones 1, 4 and 8) went from 9.69 to 12.49; Elena's
    # review of b000002 left with her, Carlos's review of b000005 came
    assert Counter(line.split(":")[0] for line in printed["phone_parts"]) == Counter(
        ["pid=7, did=1", "pid=7, did=4", "pid=7, did=8"])
    assert "did=4: cost 206.61 → 209.41" in printed["phone_cost"]
    assert [line[:40] for line in printed["sf_reviews"]] == [
        'business_id="b000002": full_reviews - {"', 'business_id="b000005": full_reviews + {"']
    assert "Elena" in printed["sf_reviews"][0] and "Carlos" in printed["sf_reviews"][1]
    # the views as first defined, printed one row a line
    shown = [json.loads(line) for line in out.split("A batch of")[0].splitlines() if line.startswith("  {")]
    assert sorted(json_text(r) for r in shown) == sorted(json_text(r) for v in before.values() for r in v.values())
    assert "recomputing the view from its base tables" in out and out.rstrip().splitlines()[-1].startswith("  idivm ")

    assert again.exit_code == 0, again.output
    assert "table devices: exists" in again.output and "this batch was ingested before" in again.output
    assert again.output.count("up to date already") == 3


def canonical(value):
    """``value`` as JSON text with object keys and collection elements sorted and numbers as
    :func:`json_text` prints them (so a float sum printed without binary noise equals its oracle)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {canonical(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(sorted(canonical(v) for v in value)) + "]"
    return json_text(value)


def test_demo_json_reports_what_changed(spark, tmp_path):
    """``demo --format json``: one JSON object whose changed rows are those of the views computed
    here from the sample files before and after the batch, whose versions are the warehouse's;
    run again, everything is found done already."""
    from idivm.warehouse import Warehouse

    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    runner = CliRunner()
    args = ["--warehouse", str(tmp_path / "wh"), "demo", "--format", "json"]
    try:
        first = runner.invoke(cli.cli, args, obj=cli.CliState())
        again = runner.invoke(cli.cli, args, obj=cli.CliState())
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    assert first.exit_code == 0, first.output
    [line] = first.output.splitlines()  # nothing but the object on standard output
    report = json.loads(line)

    samples = {**sample_tables("devices"), **sample_tables("yelp")}
    before, after = oracle_views(samples), oracle_views(apply_batch(samples))
    assert {t["table"]: (t["rows"], t["created"]) for t in report["tables"]} == {
        t: (len(rows), True) for t, rows in samples.items()}
    assert {v["view"]: sorted(map(canonical, v["rows"])) for v in report["views"]} == {
        v: sorted(map(canonical, rows.values())) for v, rows in before.items()}
    wh = Warehouse(tmp_path / "wh", spark=spark)
    assert sorted((i["table"], i["version"], i["replayed"]) for i in report["ingests"]) == sorted(
        (f.stem, wh.table_info(f.stem).version, None) for f in BATCH_DIR.glob("*.jsonl"))
    ids = {"phone_parts": ["pid", "did"], "phone_cost": ["did"], "sf_reviews": ["business_id"]}
    assert [r["view"] for r in report["runs"]] == list(ids)
    for run in report["runs"]:
        view = run["view"]
        expected = [{"key": dict(zip(ids[view], map(json.loads, c.key.values()))), "before": c.before,
                     "after": c.after} for c in view_changes(before[view], after[view], ids[view])]
        assert expected and sorted(map(canonical, run["changed_rows"])) == sorted(map(canonical, expected)), view
        assert run["strategy"] == "id" and run["version"] == wh.view_info(view).version
        assert run["up_to_date"] is False and run["recompute_seconds"] > 0

    assert again.exit_code == 0, again.output
    report = json.loads(again.output)
    assert not any(t["created"] for t in report["tables"])
    assert all(i["replayed"] is not None for i in report["ingests"])
    assert [(r["up_to_date"], r["changed_rows"], r["recompute_seconds"]) for r in report["runs"]] == [
        (True, [], None)] * 3


@pytest.mark.slow
def test_scale_demo_compares_id_and_recompute(spark, tmp_path):
    from idivm.warehouse import Warehouse

    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        result = CliRunner().invoke(cli.cli, ["--warehouse", str(tmp_path / "wh"), "demo", "--scale", "200"],
                                    obj=cli.CliState())
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    assert result.exit_code == 0, result.output
    lines = re.findall(r"^  (\w+): id ([\d.]+) s, recompute ([\d.]+) s, recompute / id = ([\d.]+)$",
                       result.output, re.M)
    assert [v for v, *_ in lines] == ["phone_parts", "phone_cost"]
    for _, id_s, recompute_s, ratio in lines:  # times printed to 0.01 s, the ratio to 0.1
        id_s, recompute_s, ratio = float(id_s), float(recompute_s), float(ratio)
        low, high = (recompute_s - 0.005) / (id_s + 0.005), (recompute_s + 0.005) / max(id_s - 0.005, 1e-9)
        assert low - 0.05 <= ratio <= high + 0.05
    wh = Warehouse(tmp_path / "wh", spark=spark)
    assert wh.table_info("devices").rows == 200 and wh.table_info("devices_parts").rows == 2000

    # for programs: the same comparison as one JSON object, over three more batches
    again = CliRunner().invoke(cli.cli, ["--warehouse", str(tmp_path / "wh"), "demo", "--scale", "200",
                                         "--format", "json"], obj=cli.CliState())
    assert again.exit_code == 0, again.output
    report = json.loads(again.output)
    assert (report["scale"], report["devices_parts"]) == (200, 2000)
    assert [v["view"] for v in report["views"]] == ["phone_parts", "phone_cost"]
    for v in report["views"]:
        assert v["ratio"] == pytest.approx(v["recompute_seconds"] / v["id_seconds"], rel=0.01)
        assert sorted(r["view"] for r in v["runs"]) == sorted([f"{v['view']}_id", f"{v['view']}_recompute"] * 3)
        for strategy in ("id", "recompute"):
            seconds = sorted(r["seconds"] for r in v["runs"] if r["view"] == f"{v['view']}_{strategy}")
            assert v[f"{strategy}_seconds"] == pytest.approx(seconds[1], abs=1e-5)  # the median of three
    for view in ("phone_parts", "phone_cost"):
        assert wh.verify(f"{view}_id").ok and wh.verify(f"{view}_recompute").ok
        assert wh.rows(f"{view}_id") and sorted(map(json_text, wh.rows(f"{view}_id"))) == \
            sorted(map(json_text, wh.rows(f"{view}_recompute")))
