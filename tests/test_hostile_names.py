"""Hostile names through every command: table, view and column names with spaces, quotes,
backquotes, dots, semicolons, ``--``, non-ASCII letters work end to end when backquoted in
SQL++ (each view checked against its recomputation by ``verify``); names that try to leave the
warehouse, take idivm's reserved prefix, are empty, blank or too long fail with one line and
exit code 1, creating nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from idivm.catalog import MAX_NAME, Catalog, check_name, directory_name
from idivm.errors import CatalogError
from idivm.storage.delta import engine

#: a table whose name and columns hold every kind of character a name may hold
ORDERS = "order lines ü'\"`;--.x"
PRODUCTS = "9 products"
LINE, PRICE, QTY, PRODUCT, TAGS, TAG, WEIGHT, LABEL = (
    "line id", "unit price", "qty.n", "prod`uct", "tags ☃", "tag name", "w;t", "label -- x")

ORDER_ROWS = [
    {LINE: 1, PRICE: 2.5, QTY: 2, PRODUCT: "p1", TAGS: [{TAG: "a", WEIGHT: 1}]},
    {LINE: 2, PRICE: 1.0, QTY: 5, PRODUCT: "p2", TAGS: []},
    {LINE: 3, PRICE: 4.0, QTY: 1, PRODUCT: "p1", TAGS: [{TAG: "b'", WEIGHT: 2}, {TAG: "c", WEIGHT: 3}]},
]
#: the name a view gives ``PRODUCT`` where delta-spark writes it (which refuses its backquote)
PRODUCT_AS = "prod uct"
PRODUCT_ROWS = [{PRODUCT: "p1", LABEL: "apple"}, {PRODUCT: "p2", LABEL: "pear"}]


def q(name: str) -> str:
    """``name`` as a SQL++ quoted identifier (backquotes doubled, backslashes escaped)."""
    return "`" + name.replace("\\", "\\\\").replace("`", "``") + "`"


#: views named with quotes, semicolons, ``--`` and non-ASCII letters, one per strategy
VIEWS = {
    "Ünïcode view": ("id", f"""
CREATE VIEW `Ünïcode view` AS
SELECT o.{q(LINE)} AS {q("line id")}, o.{q(PRICE)} * o.{q(QTY)} AS {q("total; --")}, p.{q(LABEL)},
       (SELECT t.{q(TAG)}, t.{q(WEIGHT)} FROM o.{q(TAGS)} AS t WHERE t.{q(WEIGHT)} > 1) AS {q("heavy tags")}
FROM {q(ORDERS)} AS o JOIN {q(PRODUCTS)} AS p ON o.{q(PRODUCT)} = p.{q(PRODUCT)}
WHERE o.{q(PRICE)} > 0
"""),
    "totals'; DROP TABLE x --": ("maps", f"""
CREATE VIEW {q("totals'; DROP TABLE x --")} AS
SELECT o.{q(PRODUCT)}, SUM(o.{q(QTY)}) AS {q("sum.qty")}, COUNT(*) AS n
FROM {q(ORDERS)} AS o
GROUP BY o.{q(PRODUCT)}
"""),
    'tuple "view" `x`': ("tuple", f"""
CREATE VIEW {q('tuple "view" `x`')} AS
SELECT o.{q(LINE)}, o.{q(QTY)} FROM {q(ORDERS)} AS o WHERE o.{q(QTY)} >= 2
"""),
    "recomputed.view": ("recompute", f"""
CREATE VIEW `recomputed.view` AS
SELECT VALUE {{"line": o.{q(LINE)}, "tag": t.{q(TAG)}}} FROM {q(ORDERS)} AS o, o.{q(TAGS)} AS t
"""),
}


def jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def event(op, before=None, after=None):
    return {"before": before, "after": after, "op": op, "source": {"table": ORDERS}, "ts_ms": 1700000000000}


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_an_exotic_table_and_view_through_every_command(tmp_path, run):
    """The quick version of the test below: one table, one view by ID, an evolving ingest."""
    wh = tmp_path / "wh"
    src = jsonl(tmp_path / "orders.jsonl", ORDER_ROWS)
    code, out, err = run("--warehouse", wh, "table", "create", ORDERS, "--key", LINE, "--from", src)
    assert (code, err) == (0, ""), err
    view = tmp_path / "v.sqlpp"
    view.write_text(f"CREATE VIEW `Ünïcode view; --` AS SELECT o.{q(LINE)}, o.{q(PRICE)} * o.{q(QTY)} AS `a.b`, "
                    f"(SELECT t.{q(TAG)} FROM o.{q(TAGS)} AS t WHERE t.{q(WEIGHT)} > 1) AS {q(TAGS)} "
                    f"FROM {q(ORDERS)} AS o", encoding="utf-8")
    assert run("--warehouse", wh, "define", view, "--strategy", "id")[0] == 0
    new = "new col.ü`"
    changes = jsonl(tmp_path / "c.jsonl", [
        event("u", before={LINE: 1}, after={**ORDER_ROWS[0], QTY: 4, new: "n'1"}),
        event("d", before={LINE: 2}), event("c", after={LINE: 7, QTY: None, TAGS: [{TAG: "x", WEIGHT: 2}]}),
        "[]"])
    code, out, err = run("--warehouse", wh, "ingest", ORDERS, changes, "--evolve")
    assert code == 3 and f"added column {new!r}" in out, (out, err)
    code, out, err = run("--warehouse", wh, "quarantine", "show", ORDERS)
    assert code == 0 and "c.jsonl:4:" in out
    code, out, err = run("--warehouse", wh, "maintain", "Ünïcode view; --")
    assert code == 0 and "Traceback" not in err, err
    code, out, err = run("--warehouse", wh, "verify", "Ünïcode view; --")
    assert (code, err) == (0, "") and "matches its recomputation" in out
    rows = [json.loads(line) for line in
            run("--warehouse", wh, "show", "Ünïcode view; --", "--format", "jsonl")[1].splitlines()]
    assert sorted((r[LINE], r["a.b"], sorted(t[TAG] for t in r[TAGS])) for r in rows) == [
        (1, 10.0, []), (3, 4.0, ["b'", "c"]), (7, None, ["x"])]
    code, out, err = run("--warehouse", wh, "explain", "Ünïcode view; --")
    assert code == 0 and "Ünïcode view; --" in out
    code, out, err = run("--warehouse", wh, "view", "list", "--format", "json")
    assert code == 0 and [v["name"] for v in json.loads(out)] == ["Ünïcode view; --"]
    code, out, err = run("--warehouse", wh, "table", "describe", ORDERS)
    assert code == 0 and "Ünïcode view; --" in out  # the view that reads it
    assert run("--warehouse", wh, "drop", "table", ORDERS)[0] == 1  # read by the view
    code, out, err = run("--warehouse", wh, "drop", "table", ORDERS, "--cascade")
    assert (code, err) == (0, ""), err
    assert set(tmp_path.iterdir()) == {wh, src, view, changes}
    assert not [p for d in ("tables", "views", "quarantine") for p in (wh / d).glob("*")]


@pytest.mark.slow
def test_exotic_names_work_end_to_end(tmp_path, run):
    data = tmp_path / "data"
    data.mkdir()
    wh = tmp_path / "wh"
    code, out, err = run("--warehouse", wh, "table", "create", ORDERS, "--key", LINE,
                         "--from", jsonl(data / "orders.jsonl", ORDER_ROWS), "--element-key", f"{TAGS}={TAG}")
    assert (code, err) == (0, ""), err
    assert out.startswith(f"created table {ORDERS} (key {LINE}; {TAGS}({TAG})): 3 rows")
    code, out, err = run("--warehouse", wh, "table", "create", PRODUCTS, "--key", PRODUCT,
                         "--from", jsonl(data / "products.jsonl", PRODUCT_ROWS))
    assert (code, err) == (0, ""), err
    # every directory is a safe slug inside the warehouse
    for entry in [*Catalog.load(wh).tables.values()]:
        assert (wh / entry.path).resolve().parent == (wh / "tables").resolve()

    views = dict(VIEWS)
    if engine().spark:
        # delta-spark cannot MERGE a column named with a backquote: refused at define, in one line
        name, (strategy, text) = "totals'; DROP TABLE x --", VIEWS["totals'; DROP TABLE x --"]
        file = data / "refused.sqlpp"
        file.write_text(text, encoding="utf-8")
        code, out, err = run("--warehouse", wh, "define", file, "--strategy", strategy)
        assert code == 1 and err == ("error: column 'prod`uct' holds a backquote, which delta-spark cannot MERGE "
                                     "into a table with a change data feed: name it without one (AS ...) or use "
                                     "the delta-rs storage engine\n"), err
        views[name] = (strategy, text.replace(f"SELECT o.{q(PRODUCT)},", f"SELECT o.{q(PRODUCT)} AS {q(PRODUCT_AS)},"))
    for name, (strategy, text) in views.items():
        file = data / f"{directory_name(name)}.sqlpp"
        file.write_text(text, encoding="utf-8")
        code, out, err = run("--warehouse", wh, "define", file, "--strategy", strategy)
        assert (code, err) == (0, ""), err
        assert out.startswith(f"defined view {name}: ")
        code, out, err = run("--warehouse", wh, "explain", name)
        assert (code, err) == (0, "") and out, err

    changes = jsonl(data / "changes.jsonl", [
        event("c", after={LINE: 4, PRICE: 3.0, QTY: 7, PRODUCT: "p2", TAGS: [{TAG: "d;", WEIGHT: 9}]}),
        event("u", before={LINE: 1}, after={**ORDER_ROWS[0], QTY: 3, TAGS: [{TAG: "a", WEIGHT: 5}]}),
        event("d", before={LINE: 2}),
        "{not json",
    ])
    code, out, err = run("--warehouse", wh, "ingest", ORDERS, changes)
    assert code == 3 and "3 changes" in out and "1 record quarantined" in err, (out, err)
    code, out, err = run("--warehouse", wh, "quarantine", "list")
    assert code == 0 and ORDERS in out
    code, out, err = run("--warehouse", wh, "quarantine", "show", ORDERS)
    assert code == 0 and "changes.jsonl:4: invalid JSON" in out
    fixed = jsonl(data / "fixed.jsonl", [{LINE: 5, PRICE: 1.5, QTY: 4, PRODUCT: "p1", TAGS: None}])
    code, out, err = run("--warehouse", wh, "quarantine", "retry", ORDERS, "--from", fixed, "--format", "rows")
    assert code == 0 and "1 inserted" in out, (out, err)
    code, out, err = run("--warehouse", wh, "ingest", PRODUCTS, jsonl(data / "p.jsonl", [
        {PRODUCT: "p2", LABEL: "pear 'conference'"}, {"__delete": {PRODUCT: "p9"}}]), "--format", "rows")
    assert code == 0, err

    code, out, err = run("--warehouse", wh, "maintain", "--all")
    assert code == 0 and "Traceback" not in err, err
    assert all(f"{name}: " in out for name in VIEWS)
    for name in VIEWS:
        code, out, err = run("--warehouse", wh, "verify", name)
        assert (code, err) == (0, ""), err
        assert f"view {name} matches its recomputation" in out
        code, out, err = run("--warehouse", wh, "show", name, "--format", "jsonl")
        assert code == 0, err
    rows = [json.loads(line) for line in run("--warehouse", wh, "show", "Ünïcode view", "--format", "jsonl")[1]
            .splitlines()]
    # hand-computed: lines 1 (qty 3), 3, 4, 5 joined with their products; line 2 deleted
    assert sorted((r["line id"], r["total; --"], r[LABEL], sorted(t[TAG] for t in r["heavy tags"])) for r in rows) \
        == [(1, 7.5, "apple", ["a"]), (3, 4.0, "apple", ["b'", "c"]),
            (4, 21.0, "pear 'conference'", ["d;"]), (5, 6.0, "apple", [])]
    totals = [json.loads(line) for line in
              run("--warehouse", wh, "show", "totals'; DROP TABLE x --", "--format", "jsonl")[1].splitlines()]
    product = PRODUCT_AS if engine().spark else PRODUCT
    assert sorted((r[product], r["sum.qty"], r["n"]) for r in totals) == [("p1", 8, 3), ("p2", 7, 1)]
    code, out, err = run("--warehouse", wh, "show", ORDERS)
    assert code == 0 and "(4 rows)" in out
    code, out, err = run("--warehouse", wh, "table", "list")
    assert code == 0 and ORDERS in out and PRODUCTS in out
    assert all(p.resolve().is_relative_to(wh.resolve()) for p in wh.rglob("*"))
    assert set(tmp_path.iterdir()) == {data, wh}


LONG = "x" * (MAX_NAME + 1)
#: (name, what the one-line error says)
BAD_NAMES = [
    ("../x", "'/'"),
    ("..", "'..'"),
    (".", "'.'"),
    ("/tmp/evil", "'/'"),
    ("a\\b", "'/'"),
    ("__idivm_id", "reserved"),
    ("__cache", "reserved"),
    ("", "empty"),
    ("   ", "empty"),
    (" lead", "white space"),
    ("tab\there", "control characters"),
    ("new\nline", "control characters"),
    (LONG, f"at most {MAX_NAME} characters"),
]


@pytest.mark.parametrize("name, message", BAD_NAMES)
def test_invalid_table_names_fail_with_one_line_and_create_nothing(tmp_path, run, name, message):
    src = jsonl(tmp_path / "rows.jsonl", [{"k": 1}])
    before = tree(tmp_path)
    code, out, err = run("--warehouse", tmp_path / "wh", "table", "create", name, "--key", "k", "--from", src)
    assert (code, out) == (1, "")
    assert err.startswith("error: invalid table name ") and err.count("\n") == 1 and message in err, err
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name, message", BAD_NAMES[:8])
def test_invalid_view_names_fail_with_one_line_and_create_nothing(tmp_path, run, name, message):
    wh = tmp_path / "wh"
    assert run("--warehouse", wh, "table", "create", "t", "--key", "k",
               "--from", jsonl(tmp_path / "rows.jsonl", [{"k": 1}]))[0] == 0
    file = tmp_path / "v.sqlpp"
    file.write_text(f"CREATE VIEW {q(name)} AS SELECT t.k FROM t AS t", encoding="utf-8")
    before = tree(tmp_path)
    code, out, err = run("--warehouse", wh, "define", file)
    assert (code, out) == (1, "")
    first, *excerpt = err.splitlines()  # a syntax error adds the line and a caret
    assert first.startswith("error: ") and message in first and len(excerpt) in (0, 2), err
    assert "invalid view name" in first or "empty quoted identifier" in first
    assert tree(tmp_path) == before


@pytest.mark.parametrize("column, message", [
    ("__idivm_id", "reserved"), ("__delete", "reserved"), ("", "empty"), ("a\nb", "control characters"),
    (" x", "white space"),
])
def test_invalid_column_names_fail_with_one_line(tmp_path, run, column, message):
    src = jsonl(tmp_path / "rows.jsonl", [{"k": 1, column: 2}])
    code, out, err = run("--warehouse", tmp_path / "wh", "table", "create", "t", "--key", "k", "--from", src)
    assert (code, out) == (1, "") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "wh").exists()


@pytest.mark.parametrize("args", [
    ["ingest", "{name}", "{file}"], ["quarantine", "show", "{name}"], ["quarantine", "retry", "{name}"],
    ["quarantine", "list", "{name}"], ["show", "{name}"], ["verify", "{name}"], ["maintain", "{name}"],
    ["refresh", "{name}", "--full"], ["explain", "{name}"], ["table", "describe", "{name}"],
    ["view", "describe", "{name}"], ["drop", "table", "{name}"], ["drop", "view", "{name}"],
])
@pytest.mark.parametrize("name", ["../t", "t'; DROP TABLE t; --", "`t`", "t.k"])
def test_unknown_hostile_names_in_every_command(tmp_path, run, args, name):
    wh = tmp_path / "wh"
    src = jsonl(tmp_path / "rows.jsonl", [{"k": 1}])
    assert run("--warehouse", wh, "table", "create", "t", "--key", "k", "--from", src)[0] == 0
    before = tree(tmp_path)
    code, out, err = run("--warehouse", wh, *[a.format(name=name, file=src) for a in args])
    assert (code, out) == (1, "")
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert tree(tmp_path) == before


def test_directory_names_are_safe_and_distinct():
    names = ["a", "A", "a b", "a_b", "../a", "..", ".", "/", "a/../../b", "Ünïcode", "Unicode", "ü", "日本",
             "x" * MAX_NAME, "x" * (MAX_NAME - 1) + "y", "'", '"', "`", ";", "--", "a.b", "a-b"]
    dirs = {}
    for n in names:
        try:
            check_name(n)
        except CatalogError:
            continue
        d = directory_name(n)
        assert d not in dirs.values()
        assert d and len(d) <= 60 and all(c.isascii() and (c.isalnum() or c in "_-") for c in d), d
        dirs[n] = d
    assert dirs["a"] == "a" and dirs["a_b"] == "a_b"  # identifiers keep their directory
    assert set(dirs) == set(names) - {"..", ".", "/", "../a", "a/../../b"}


def test_key_columns_alike_once_sanitised_get_distinct_id_columns(make_warehouse):
    """Key columns ``a b`` and ``a_b`` would both be ID column ``..._a_b``: each gets its own,
    and the view is maintained by ID like any other (checked against its recomputation)."""
    wh = make_warehouse()
    wh.create_table("pairs", ["a b", "a_b"], [{"a b": 1, "a_b": 1, "v": 10}, {"a b": 1, "a_b": 2, "v": 20},
                                              {"a b": 2, "a_b": 1, "v": 30}])
    info = wh.define("CREATE VIEW pair_values AS SELECT p.`a b` AS x, p.a_b AS y, p.v FROM pairs AS p",
                     strategy="id")
    assert info.strategy == "id"
    change = Path(wh.path) / "change.jsonl"
    jsonl(change, [{"a b": 1, "a_b": 2, "v": 21}, {"__delete": {"a b": 2, "a_b": 1}}, {"a b": 2, "a_b": 2, "v": 40}])
    wh.ingest("pairs", change, format="rows")
    wh.maintain("pair_values")
    assert wh.verify("pair_values").ok
    assert sorted((r["x"], r["y"], r["v"]) for r in wh.rows("pair_values")) == [(1, 1, 10), (1, 2, 21), (2, 2, 40)]
