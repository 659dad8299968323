"""JSON output for programs: ``table create --output json``, ``define [--replace] --format json``,
``refresh``, ``drop view``/``drop table [--cascade]``, ``ingest``/``quarantine retry --output
json`` and ``quarantine list|show --format json``.

Commands run through click's test runner (``CliRunner`` on the ``cli`` group); one runs as a
real ``python -m idivm`` process.  What each prints is checked against what the warehouse holds,
read independently through the Python API, Delta and the catalog file, and against values worked
out by hand from the data below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from test_catalog_commands import BUSINESSES, CITIES, REVIEWS, SF_REVIEWS
from test_cli_views import canonical, write_jsonl
from idivm import cli
from idivm.catalog import Catalog
from idivm.storage import delta
from idivm.warehouse import Warehouse



def invoke(warehouse, *args, input=None):
    """The ``click.testing.Result`` of one invocation of the ``cli`` group through ``CliRunner``
    (an idivm error propagates as the exception it is)."""
    return CliRunner().invoke(cli.cli, ["--warehouse", str(warehouse), *map(str, args)], obj=cli.CliState(),
                              input=input, catch_exceptions=False)


@pytest.fixture
def idivm(spark):
    """:func:`invoke` for commands that run Spark: the test run's shuffle partitions, which the
    CLI's session settings change, are put back after each."""
    partitions = spark.conf.get("spark.sql.shuffle.partitions")

    def invoke_with_spark(warehouse, *args, input=None):
        try:
            return invoke(warehouse, *args, input=input)
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", partitions)

    return invoke_with_spark


def json_of(result, exit_code: int = 0):
    """The JSON document ``result`` printed on stdout, after checking its exit code."""
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def view_file(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_create_define_replace_refresh_and_drop_print_what_the_warehouse_holds(idivm, run, spark, tmp_path):
    wh = tmp_path / "wh"
    created = json_of(idivm(wh, "table", "create", "businesses", "--key", "business_id", "--element-key",
                            "hours=day", "--from", write_jsonl(tmp_path / "b.jsonl", BUSINESSES), "--output", "json"))
    assert {k: created[k] for k in ("name", "key", "element_keys", "rows", "version", "undeclared")} == {
        "name": "businesses", "key": ["business_id"], "element_keys": {"hours": ["day"]}, "rows": 3, "version": 0,
        "undeclared": {}}
    api = Warehouse(wh, spark=spark)
    assert created == {**api.table_info("businesses").as_json(), "undeclared": {}}
    # a declared schema that leaves out a field of one row: reported as undeclared
    people = json_of(idivm(wh, "table", "create", "people", "--key", "id", "--schema", "id BIGINT, name STRING",
                           "--from", write_jsonl(tmp_path / "p.jsonl", [{"id": 1, "name": "ann"},
                                                                        {"id": 2, "name": "bob", "note": "x"}]),
                           "--output", "json"))
    assert (people["rows"], people["undeclared"], people["declared_schema"]["text"]) == (
        2, {"note": 1}, "id BIGINT, name STRING")
    json_of(idivm(wh, "table", "create", "reviews", "--key", "review_id", "--from",
                  write_jsonl(tmp_path / "r.jsonl", REVIEWS), "--output", "json"))

    defined = json_of(idivm(wh, "define", view_file(tmp_path, SF_REVIEWS, "sf.sqlpp"), "--strategy", "id",
                            "--format", "json"))
    assert (defined["name"], defined["strategy"], defined["inputs"], defined["watermark"], defined["lag"]) == (
        "sf_reviews", "id", ["businesses", "reviews"], {"businesses": 0, "reviews": 0}, 0)
    assert defined["rows"] == len(api.rows("sf_reviews")) == 2  # b1 and b3 are in SF
    assert defined["version"] == delta.version(Path(defined["path"]))

    replaced = json_of(idivm(wh, "define", "--replace", "--format", "json", view_file(
        tmp_path, SF_REVIEWS.replace('"SF"', '"LA"'), "la.sqlpp")))
    assert replaced["name"] == "sf_reviews" and replaced["path"] != defined["path"]
    assert canonical(api.rows("sf_reviews")) == [{"business_id": "b2", "reviews": [{"review_id": "r3", "stars": 4}]}]
    assert replaced["rows"] == 1 and replaced == api.view_info("sf_reviews").as_json()
    assert '"LA"' in Catalog.load(wh).view("sf_reviews").text

    json_of(idivm(wh, "define", view_file(tmp_path, CITIES, "cities.sqlpp"), "--strategy", "recompute",
                  "--format", "json"))
    refreshed = json_of(idivm(wh, "refresh", "cities", "--full", "--format", "json"))
    assert (refreshed["view"], refreshed["new_watermark"], refreshed["up_to_date"]) == (
        "cities", {"businesses": 0}, False)
    assert refreshed["version"] == api.view_info("cities").version and api.verify("cities").ok

    assert json_of(idivm(wh, "drop", "view", "sf_reviews", "--format", "json")) == {
        "views": ["sf_reviews"], "tables": []}
    assert "sf_reviews" not in Catalog.load(wh).views and not Path(replaced["path"]).exists()
    assert json_of(idivm(wh, "drop", "table", "businesses", "--cascade", "--format", "json")) == {
        "views": ["cities"], "tables": ["businesses"]}
    catalog = Catalog.load(wh)
    assert "businesses" not in catalog.tables and not catalog.views
    assert sorted(catalog.tables) == ["people", "reviews"]

    # errors are as without --format json: one line on stderr, exit code 1, nothing on stdout
    code, out, err = run("--warehouse", wh, "drop", "view", "sf_reviews", "--format", "json")
    assert (code, out) == (1, "") and err.startswith("error: ") and err.count("\n") == 1, err
    code, out, err = run("--warehouse", wh, "define", tmp_path / "missing.sqlpp", "--format", "json")
    assert (code, out) == (1, "") and err.startswith("error: ") and err.count("\n") == 1, err


def ev(op, before=None, after=None) -> str:
    return json.dumps({"before": before, "after": after, "op": op, "ts_ms": 1})


def test_ingest_and_the_quarantine_commands_print_json(tmp_path):
    """No Spark: ingest and the quarantine need none."""
    idivm = invoke
    wh = tmp_path / "wh"
    json_of(idivm(wh, "table", "create", "users", "--key", "id", "--output", "json", "--from",
                  write_jsonl(tmp_path / "u.jsonl", [{"id": 1, "name": "ann", "score": 10}])))
    bad = ev("c", after={"id": 3, "name": "dee", "score": "three"})
    feed = tmp_path / "f.jsonl"
    feed.write_text(ev("c", after={"id": 2, "name": "bob", "score": 2}) + "\n" + bad + "\n", encoding="utf-8")
    ingested = json_of(idivm(wh, "ingest", "users", feed, "--output", "json"), exit_code=3)
    assert {k: ingested[k] for k in ("table", "source", "changes", "inserted", "quarantined", "version", "added")} == {
        "table": "users", "source": "f.jsonl", "changes": 1, "inserted": 1, "quarantined": 1, "version": 1,
        "added": []}

    api = Warehouse(wh)
    (quarantined,) = api.quarantined("users").to_pylist()
    assert json_of(idivm(wh, "quarantine", "list", "--format", "json")) == [{"table": "users", "records": 1}]
    assert json_of(idivm(wh, "quarantine", "list", "users", "--format", "json")) == [
        {"table": "users", "source": "f.jsonl", "origin": quarantined["origin"], "records": 1, "first_line": 2,
         "quarantined_at": quarantined["quarantined_at"].isoformat()}]
    (shown,) = json_of(idivm(wh, "quarantine", "show", "users", "--format", "json"))
    assert (shown["source"], shown["line"], shown["format"], shown["record"]) == ("f.jsonl", 2, "debezium", bad)
    assert "score" in shown["reason"] and shown["origin"] == quarantined["origin"]

    # replayed as it is: still bad, exit code 3, nothing committed
    retried = json_of(idivm(wh, "quarantine", "retry", "users", "--output", "json"), exit_code=3)
    assert (retried["table"], retried["changes"], retried["quarantined"]) == ("users", 0, 1)
    assert retried["version"] == delta.version(api.table_path("users")) == 1
    fixed = tmp_path / "fixed.jsonl"
    fixed.write_text(bad.replace('"three"', "3") + "\n", encoding="utf-8")
    retried = json_of(idivm(wh, "quarantine", "retry", "users", "--from", fixed, "--output", "json"))
    assert (retried["changes"], retried["inserted"], retried["quarantined"]) == (1, 1, 0)
    assert retried["version"] == delta.version(api.table_path("users")) == 2
    assert sorted(r["id"] for r in delta.read_arrow(api.table_path("users")).to_pylist()) == [1, 2, 3]
    assert json_of(idivm(wh, "quarantine", "list", "--format", "json")) == []
    assert json_of(idivm(wh, "quarantine", "show", "users", "--format", "json")) == []

    # a new column taken with --evolve is named in "added"
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": 4, "name": "eve", "score": 4, "city": "SF"}])
    evolved = json_of(idivm(wh, "ingest", "users", rows, "--format", "rows", "--evolve", "--output", "json"))
    assert (evolved["added"], evolved["inserted"]) == (["city"], 1)
    assert "city" in api.table_info("users").schema.names


def test_python_m_idivm_prints_json(tmp_path):
    """A real process (no Spark: creating a table from JSON Lines and dropping it need none)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}

    def idivm(*args):
        return subprocess.run([sys.executable, "-m", "idivm", "--warehouse", str(tmp_path / "wh"), *map(str, args)],
                              capture_output=True, text=True, timeout=120, env=env)

    done = idivm("table", "create", "t", "--key", "id", "--output", "json",
                 "--from", write_jsonl(tmp_path / "t.jsonl", [{"id": 1, "x": "a"}, {"id": 2, "x": "b"}]))
    assert (done.returncode, done.stderr) == (0, "")
    created = json.loads(done.stdout)
    assert (created["name"], created["key"], created["rows"], created["version"]) == ("t", ["id"], 2, 0)
    assert len(delta.read_arrow(Path(created["path"])).to_pylist()) == 2
    done = idivm("drop", "table", "t", "--format", "json")
    assert (done.returncode, done.stderr, json.loads(done.stdout)) == (0, "", {"views": [], "tables": ["t"]})
    assert not Catalog.load(tmp_path / "wh").tables
