"""The catalog commands: ``view list``, ``table describe``/``view describe``, ``drop view``/``drop
table`` (``--cascade``), redefinition (``define --replace``, ``CREATE OR REPLACE VIEW``) and the
JSON output of ``table list``, ``view list``, ``verify``, ``ingest`` and ``describe``.

Commands run in-process through ``idivm.cli.main`` (reusing the test run's SparkSession), as in
tests/test_cli_views.py; one test runs ``python -m idivm`` in a subprocess on commands that need
no Spark.  Expected values are written by hand from the data below (versions: a table is at
version 0 when created and moves by one per ingested file), or come from recomputation
(``verify``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli_views import canonical, write_jsonl
from idivm.catalog import Catalog

BUSINESSES = [
    {"business_id": "b1", "city": "SF", "hours": [{"day": "mon", "open": 9}]},
    {"business_id": "b2", "city": "LA", "hours": []},
    {"business_id": "b3", "city": "SF", "hours": [{"day": "tue", "open": 8}, {"day": "wed", "open": 10}]},
]
REVIEWS = [
    {"review_id": "r1", "business_id": "b1", "stars": 5},
    {"review_id": "r2", "business_id": "b1", "stars": 3},
    {"review_id": "r3", "business_id": "b2", "stars": 4},
]

# nested, maintained by ID: it has global provenance indexes beside it
SF_REVIEWS = """\
CREATE VIEW sf_reviews AS
SELECT b.business_id,
       (SELECT r.review_id, r.stars FROM reviews r WHERE r.business_id = b.business_id) AS reviews
FROM businesses b
WHERE b.city = "SF"
"""
CITIES = """\
CREATE VIEW cities AS
SELECT b.city, COUNT(*) AS n FROM businesses b GROUP BY b.city
"""
GOOD_REVIEWS = """\
CREATE VIEW good_reviews AS
SELECT r.review_id, r.business_id FROM reviews r WHERE r.stars >= 4
"""


def view_file(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def wh(tmp_path, run):
    """A warehouse with businesses (element key hours(day)) and reviews."""
    data = tmp_path / "data"
    data.mkdir()
    path = tmp_path / "wh"
    for args in (["businesses", "--key", "business_id", "--element-key", "hours=day", "--from",
                  write_jsonl(data / "businesses.jsonl", BUSINESSES)],
                 ["reviews", "--key", "review_id", "--from", write_jsonl(data / "reviews.jsonl", REVIEWS)]):
        code, out, err = run("--warehouse", path, "table", "create", *args)
        assert (code, err) == (0, ""), err
    return path


def ok(result) -> str:
    code, out, err = result
    assert (code, err) == (0, ""), err
    return out


def assert_one_line_error(result, expected: str):
    code, out, err = result
    assert code == 1 and out == "", (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert expected in err, err


def snapshot(wh: Path):
    """What a refused command must not change: the catalog's bytes and every path under the warehouse."""
    return (wh / "catalog.json").read_bytes(), sorted(str(p.relative_to(wh)) for p in wh.rglob("*"))


def view_dirs(wh: Path, name: str) -> list[str]:
    """The directories of view ``name`` under views/ (its table, program, caches, maps, indexes)."""
    return sorted(p.name for p in (wh / "views").iterdir() if p.name == name or p.name.startswith(f"{name}."))


# --- view list, describe, JSON ---------------------------------------------------------------------

def test_view_list_and_describe_follow_ingest_and_maintain(run, wh, tmp_path):
    W = ("--warehouse", wh)
    ok(run(*W, "define", view_file(tmp_path, SF_REVIEWS, "sf.sqlpp"), "--strategy", "id"))
    ok(run(*W, "define", view_file(tmp_path, CITIES, "cities.sqlpp"), "--strategy", "recompute"))

    listed = json.loads(ok(run(*W, "view", "list", "--format", "json")))
    assert [(v["name"], v["strategy"], v["rows"], v["inputs"], v["watermark"], v["lag"]) for v in listed] == [
        ("cities", "recompute", 2, ["businesses"], {"businesses": 0}, 0),
        ("sf_reviews", "id", 2, ["businesses", "reviews"], {"businesses": 0, "reviews": 0}, 0)]
    assert all(v["maintained"].endswith("Z") for v in listed)

    # two files ingested into reviews: two versions past sf_reviews's watermark; cities reads no reviews
    spool = tmp_path / "spool"
    spool.mkdir()
    write_jsonl(spool / "0001.jsonl", [{"review_id": "r4", "business_id": "b3", "stars": 2}])
    write_jsonl(spool / "0002.jsonl", [{"review_id": "r5", "business_id": "b3", "stars": 4},
                                       {"__delete": {"review_id": "r2"}}])
    lines = ok(run(*W, "ingest", "reviews", spool, "--format", "rows", "--output", "json")).splitlines()
    batches = [json.loads(line) for line in lines]
    assert [(b["table"], Path(b["source"]).name, b["changes"], b["inserted"], b["deleted"], b["version"])
            for b in batches] == [("reviews", "0001.jsonl", 1, 1, 0, 1), ("reviews", "0002.jsonl", 2, 1, 1, 2)]

    text = ok(run(*W, "view", "list")).splitlines()
    assert text[0].split() == ["name", "strategy", "rows", "watermark", "maintained", "lag"]
    cells = {line.split()[0]: line.split() for line in text[1:]}
    assert cells["sf_reviews"][-1] == "2" and cells["cities"][-1] == "0"
    assert cells["sf_reviews"][3:5] == ["businesses@0,", "reviews@0"]

    assert run(*W, "maintain", "sf_reviews")[0] == 0  # (progress on stderr)
    listed = {v["name"]: v for v in json.loads(ok(run(*W, "view", "list", "--format", "json")))}
    assert listed["sf_reviews"]["watermark"] == {"businesses": 0, "reviews": 2}
    assert listed["sf_reviews"]["lag"] == 0

    described = json.loads(ok(run(*W, "view", "describe", "sf_reviews", "--format", "json")))
    assert described["kind"] == "view" and described["strategy"] == "id"
    assert [c["name"] for c in described["schema"]] == ["business_id", "reviews"]
    assert described["key"] and all(c.startswith("__idivm") for c in described["key"])
    assert described["features"]["change_data_feed"] is True
    assert described["features"]["clustered_by"] == described["key"]  # an id view is ordered by its IDs
    assert any(p.startswith("index ") for p in described["parts"])
    assert described["readers"] == [] and described["text"] == SF_REVIEWS
    ops = [(c["version"], c["metadata"].get("operation")) for c in described["history"]]
    assert ops[-1] == (0, "define view") and ops[0][0] == described["version"] >= 1
    assert described["history"][0]["metadata"]["watermark"] == {"businesses": 0, "reviews": 2}
    assert (described["history"][0]["metadata"]["operation"], described["history"][0]["metadata"]["strategy"]) \
        == ("maintain", "id")

    text = ok(run(*W, "view", "describe", "sf_reviews"))
    assert text.startswith("view sf_reviews\n  strategy:    id\n  reads:       businesses, reviews\n"
                           "  watermark:   businesses@0, reviews@2\n  lag:         0 (up to date)\n")
    assert "\nschema:\n  business_id: string\n  reviews: {{{review_id: string, stars: " in text
    assert "define view" in text and "history (newest first):" in text

    table = json.loads(ok(run(*W, "table", "describe", "reviews", "--format", "json", "--history", "2")))
    assert (table["kind"], table["key"], table["rows"], table["version"]) == ("table", ["review_id"], 4, 2)
    assert table["readers"] == ["sf_reviews"]
    assert [(c["version"], c["operation"], c["metadata"]["operation"]) for c in table["history"]] == [
        (2, "MERGE", "ingest"), (1, "MERGE", "ingest")]
    assert table["history"][0]["metadata"]["origin"].startswith("sha256:")
    table = json.loads(ok(run(*W, "table", "describe", "businesses", "--format", "json")))
    assert table["element_keys"] == {"hours": ["day"]} and table["readers"] == ["cities", "sf_reviews"]
    text = ok(run(*W, "table", "describe", "businesses"))
    assert "  key:         business_id\n  element key: hours(day)\n" in text
    assert "  read by:     cities, sf_reviews\n" in text

    tables = json.loads(ok(run(*W, "table", "list", "--format", "json")))
    assert [(t["name"], t["key"], t["element_keys"], t["rows"], t["version"]) for t in tables] == [
        ("businesses", ["business_id"], {"hours": ["day"]}, 3, 0), ("reviews", ["review_id"], {}, 4, 2)]

    verified = json.loads(ok(run(*W, "verify", "sf_reviews", "--format", "json")))
    assert verified["ok"] is True and verified["missing"] == verified["extra"] == 0
    assert verified["watermark"] == {"businesses": 0, "reviews": 2}


def test_verify_json_of_a_view_that_differs_exits_1(run, wh, tmp_path, spark):
    W = ("--warehouse", wh)
    ok(run(*W, "define", view_file(tmp_path, GOOD_REVIEWS, "good.sqlpp"), "--strategy", "recompute"))
    # a row changed behind idivm's back: written into the view's Delta table directly (by
    # Spark, which reads and writes the tables of every storage engine)
    path = str(Catalog.load(wh).path_of(Catalog.load(wh).view("good_reviews")))
    spark.read.format("delta").load(path).limit(1).write.format("delta").mode("append").save(path)
    code, out, err = run(*W, "verify", "good_reviews", "--format", "json")
    assert code == 1 and err == ""
    result = json.loads(out)
    assert (result["ok"], result["missing"], result["extra"]) == (False, 0, 1)


# --- drop ------------------------------------------------------------------------------------------

def test_drop_table_is_refused_while_views_read_it_then_cascades(run, wh, tmp_path):
    W = ("--warehouse", wh)
    for text, name in ((SF_REVIEWS, "sf.sqlpp"), (CITIES, "cities.sqlpp"), (GOOD_REVIEWS, "good.sqlpp")):
        ok(run(*W, "define", view_file(tmp_path, text, name), "--strategy", "recompute"))
    before = snapshot(wh)
    assert_one_line_error(run(*W, "drop", "table", "businesses"),
                          "cannot drop table businesses: read by views cities, sf_reviews")
    assert_one_line_error(run(*W, "drop", "table", "reviews"), "read by views good_reviews, sf_reviews")
    assert snapshot(wh) == before

    out = ok(run(*W, "drop", "table", "businesses", "--cascade"))
    assert out.splitlines() == ["dropped view cities", "dropped view sf_reviews", "dropped table businesses"]
    catalog = Catalog.load(wh)
    assert sorted(catalog.tables) == ["reviews"] and sorted(catalog.views) == ["good_reviews"]
    assert not (wh / "tables" / "businesses").exists()
    assert view_dirs(wh, "cities") == view_dirs(wh, "sf_reviews") == []
    # what was not dropped is whole
    assert json.loads(ok(run(*W, "verify", "good_reviews", "--format", "json")))["ok"] is True
    assert canonical([json.loads(x) for x in ok(run(*W, "show", "good_reviews", "--format", "jsonl")).splitlines()]) \
        == canonical([{"review_id": "r1", "business_id": "b1"}, {"review_id": "r3", "business_id": "b2"}])


def test_drop_view_removes_its_tables_and_the_name_can_be_used_again(run, wh, tmp_path):
    W = ("--warehouse", wh)
    path = view_file(tmp_path, SF_REVIEWS, "sf.sqlpp")
    ok(run(*W, "define", path, "--strategy", "id"))
    assert {"sf_reviews", "sf_reviews.program", "sf_reviews.indexes"} <= set(view_dirs(wh, "sf_reviews"))
    assert ok(run(*W, "drop", "view", "sf_reviews")) == "dropped view sf_reviews\n"
    assert view_dirs(wh, "sf_reviews") == [] and "sf_reviews" not in Catalog.load(wh).views
    assert json.loads(ok(run(*W, "table", "describe", "reviews", "--format", "json")))["readers"] == []
    ok(run(*W, "drop", "table", "reviews"))  # nothing reads it any more
    assert "reviews" not in Catalog.load(wh).tables and not (wh / "tables" / "reviews").exists()


def test_dropping_what_is_not_there_is_a_one_line_error(run, wh):
    W = ("--warehouse", wh)
    before = snapshot(wh)
    assert_one_line_error(run(*W, "drop", "view", "nosuch"), "unknown view 'nosuch'")
    assert_one_line_error(run(*W, "drop", "view", "reviews"), "unknown view 'reviews' (it is a table)")
    assert_one_line_error(run(*W, "drop", "table", "nosuch"), "unknown table 'nosuch'")
    assert_one_line_error(run(*W, "view", "describe", "nosuch"), "unknown view 'nosuch'")
    assert_one_line_error(run(*W, "table", "describe", "nosuch"), "unknown table 'nosuch'")
    assert snapshot(wh) == before


def test_dependents_follow_recorded_inputs_through_views():
    """The views that read a name, through views that read views (as a view over views records
    them among its inputs), each before the views it reads."""
    from idivm.catalog import ViewEntry
    from idivm.types import TupleType

    def view(name, inputs):
        return ViewEntry(name, "", TupleType(()), f"views/{name}", extra={"inputs": inputs})

    catalog = Catalog("/nonexistent", views={v.name: v for v in (
        view("a", ["t"]), view("b", ["a", "t"]), view("c", ["b"]), view("d", ["u"]))})
    assert catalog.readers("t") == ["a", "b"]
    order = catalog.dependents("t")
    assert sorted(order) == ["a", "b", "c"]
    assert order.index("c") < order.index("b") < order.index("a")
    assert catalog.dependents("c") == [] and catalog.dependents("u") == ["d"]
    # a view defined before inputs were recorded: the tables its watermark names
    assert ViewEntry("old", "", TupleType(()), "views/old", extra={"watermark": {"y": 1, "x": 0}}).inputs() \
        == ("x", "y")


def test_replace_view_refuses_a_view_redefined_since():
    from idivm.catalog import ViewEntry
    from idivm.errors import ConcurrentWriteError
    from idivm.types import TupleType

    catalog = Catalog("/nonexistent", views={"v": ViewEntry("v", "", TupleType(()), "views/v.aaa")})
    new = ViewEntry("v", "new", TupleType(()), "views/v.ccc")
    with pytest.raises(ConcurrentWriteError, match="redefined by another writer"):
        catalog.replace_view(new, replacing="views/v.bbb")
    assert catalog.view("v").path == "views/v.aaa"
    catalog.replace_view(new, replacing="views/v.aaa")
    assert catalog.view("v") is new


# --- redefinition ----------------------------------------------------------------------------------

SF_REVIEWS_5 = SF_REVIEWS.replace("WHERE r.business_id = b.business_id",
                                  "WHERE r.business_id = b.business_id AND r.stars = 5")


def test_define_replace_and_create_or_replace_swap_the_view(run, wh, tmp_path, make_warehouse):
    W = ("--warehouse", wh)
    ok(run(*W, "define", view_file(tmp_path, SF_REVIEWS, "sf.sqlpp"), "--strategy", "id"))
    # without --replace a second definition is refused and changes nothing
    before = snapshot(wh)
    assert_one_line_error(run(*W, "define", view_file(tmp_path, SF_REVIEWS_5, "sf5.sqlpp")),
                          "a view named 'sf_reviews' already exists")
    assert snapshot(wh) == before

    out = ok(run(*W, "define", "--replace", tmp_path / "sf5.sqlpp", "--strategy", "id"))
    assert out.startswith("defined view sf_reviews: 2 rows")
    rows = [json.loads(x) for x in ok(run(*W, "show", "sf_reviews", "--format", "jsonl")).splitlines()]
    assert canonical(rows) == canonical([{"business_id": "b1", "reviews": [{"review_id": "r1", "stars": 5}]},
                                         {"business_id": "b3", "reviews": []}])
    assert json.loads(ok(run(*W, "verify", "sf_reviews", "--format", "json")))["ok"] is True
    entry = Catalog.load(wh).view("sf_reviews")
    assert entry.text == SF_REVIEWS_5 and entry.path.startswith("views/sf_reviews.")
    generation = Path(entry.path).name  # only the new definition's files are left
    assert view_dirs(wh, "sf_reviews") and all(d == generation or d.startswith(generation + ".")
                                               for d in view_dirs(wh, "sf_reviews"))

    # CREATE OR REPLACE in the text, through the Python API, with another strategy; then maintained
    from idivm.warehouse import Warehouse

    api = Warehouse(wh, spark=make_warehouse().spark)
    info = api.define("CREATE OR REPLACE " + SF_REVIEWS[len("CREATE "):], strategy="recompute")
    assert (info.name, info.strategy, info.rows) == ("sf_reviews", "recompute", 2)
    assert [v.name for v in api.views()] == ["sf_reviews"]
    api.ingest("reviews", write_jsonl(tmp_path / "more.jsonl", [{"review_id": "r6", "business_id": "b3", "stars": 1}]),
               format="rows")
    assert api.views()[0].lag == 1
    api.maintain("sf_reviews")
    assert api.verify("sf_reviews").ok and api.views()[0].lag == 0
    reviews = {r["business_id"]: {x["review_id"] for x in r["reviews"]} for r in api.rows("sf_reviews")}
    assert reviews == {"b1": {"r1", "r2"}, "b3": {"r6"}}
    # CREATE OR REPLACE of a view that does not exist creates it, where a new view goes
    api.define("CREATE OR REPLACE " + GOOD_REVIEWS[len("CREATE "):], strategy="recompute")
    assert api.catalog.view("good_reviews").path == "views/good_reviews"


def test_a_crash_before_the_catalog_switch_leaves_the_old_view(run, wh, tmp_path, make_warehouse, monkeypatch):
    from idivm import warehouse as warehouse_module
    from idivm.warehouse import Warehouse

    api = Warehouse(wh, spark=make_warehouse().spark)
    api.define(SF_REVIEWS, strategy="id")
    old_rows = api.rows("sf_reviews")
    catalog_bytes = (wh / "catalog.json").read_bytes()
    old_dirs = view_dirs(wh, "sf_reviews")

    def crash(self):
        raise OSError("simulated crash before the catalog switch")

    # the process dies at the commit point: the catalog is not written, and nothing is cleaned up
    with monkeypatch.context() as m:
        m.setattr(Catalog, "save", crash)
        m.setattr(warehouse_module.shutil, "rmtree", lambda *a, **k: None)
        with pytest.raises(OSError, match="simulated crash"):
            api.define(SF_REVIEWS_5, replace=True, strategy="id")
    assert (wh / "catalog.json").read_bytes() == catalog_bytes
    leftovers = sorted(set(view_dirs(wh, "sf_reviews")) - set(old_dirs))
    assert leftovers, "the aborted replace left its directories, as a crash would"
    # the old view is intact, readable, maintained and listed alone
    assert canonical(api.rows("sf_reviews")) == canonical(old_rows)
    assert api.catalog.view("sf_reviews").text == SF_REVIEWS and api.verify("sf_reviews").ok
    assert [v.name for v in api.views()] == ["sf_reviews"]
    api.ingest("reviews", write_jsonl(tmp_path / "r.jsonl", [{"review_id": "r7", "business_id": "b3", "stars": 5}]),
               format="rows")
    assert api.maintain("sf_reviews")[0].version is not None and api.verify("sf_reviews").ok

    # the next replace succeeds and removes the old view's files and the leftovers
    api.define(SF_REVIEWS_5, replace=True, strategy="id")
    generation = Path(api.catalog.view("sf_reviews").path).name
    assert all(d == generation or d.startswith(generation + ".") for d in view_dirs(wh, "sf_reviews"))
    assert api.verify("sf_reviews").ok
    assert canonical(api.rows("sf_reviews")) == canonical([
        {"business_id": "b1", "reviews": [{"review_id": "r1", "stars": 5}]},
        {"business_id": "b3", "reviews": [{"review_id": "r7", "stars": 5}]}])


def test_or_must_be_followed_by_replace():
    from idivm.errors import SqlppSyntaxError
    from idivm.sqlpp import parse_view

    assert parse_view("create or replace view v as select value 1").replace is True
    assert parse_view("CREATE VIEW v AS SELECT VALUE 1").replace is False
    assert parse_view("CREATE VIEW replace AS SELECT VALUE 1").name == "replace"  # REPLACE is not reserved
    with pytest.raises(SqlppSyntaxError, match=r"1:11: unexpected 'REPLCE' after CREATE OR: expected REPLACE"):
        parse_view("CREATE OR REPLCE VIEW v AS SELECT VALUE 1")


# --- a real process ----------------------------------------------------------------------------------

def test_python_m_idivm_lists_and_drops_without_spark(run, wh, tmp_path):
    ok(run("--warehouse", wh, "define", view_file(tmp_path, CITIES, "cities.sqlpp"), "--strategy", "recompute"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}

    def idivm(*args):
        return subprocess.run([sys.executable, "-m", "idivm", "--warehouse", str(wh), *args],
                              capture_output=True, text=True, timeout=120, env=env)

    done = idivm("view", "list", "--format", "json")
    assert (done.returncode, done.stderr) == (0, "")
    assert [(v["name"], v["rows"], v["lag"]) for v in json.loads(done.stdout)] == [("cities", 2, 0)]
    done = idivm("drop", "table", "businesses")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("error: cannot drop table businesses: read by view cities "
                           "(drop it first, or drop with --cascade)\n")
    done = idivm("drop", "view", "cities")
    assert (done.returncode, done.stdout, done.stderr) == (0, "dropped view cities\n", "")
    done = idivm("table", "list", "--format", "json")
    assert [t["name"] for t in json.loads(done.stdout)] == ["businesses", "reviews"]
