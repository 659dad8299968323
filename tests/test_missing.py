"""SQL++'s MISSING, as AsterixDB defines it, defined and maintained.

A LEFT JOIN pads its unmatched right side with MISSING, not NULL; a field that is MISSING is
left out of the tuple it would be in (``SELECT b.y`` and ``SELECT *`` leave out the unmatched
side, an object constructor its MISSING fields); IS MISSING holds only for MISSING, IS NULL is
MISSING for it; a function of MISSING is MISSING; IF_MISSING, IF_NULL, IF_MISSING_OR_NULL,
COALESCE and MISSING_IF as AsterixDB's documentation of its functions gives them.  The
expectations are written out by hand from those rules.  Each view is defined by ID (and, under
``--runslow``, recomputed), and maintained through a batch that matches an unmatched row,
unmatches a matched one and sets a matched value to NULL; every copy must give the expected rows
after the batch and ``verify`` against its recomputation.
"""

from __future__ import annotations

import json

import pytest

A_ROWS = [{"id": 1, "x": 10}, {"id": 2, "x": 20}, {"id": 3, "x": 30}]
# a1 matched (y 5), a2 matched with y NULL, a3 unmatched
B_ROWS = [{"bid": 1, "aid": 1, "y": 5}, {"bid": 2, "aid": 2, "y": None}]
# after the batch: a1 unmatched (b1 deleted), a2 matched with y 4, a3 matched (b3, y 7)
BATCH = [{"__delete": {"bid": 1}}, {"bid": 2, "aid": 2, "y": 4}, {"bid": 3, "aid": 3, "y": 7}]

LJ = "FROM a LEFT JOIN b ON a.id = b.aid"

# name: (query, rows before, rows after)
VIEWS = {
    "fields": (
        f"SELECT a.id, b.y {LJ}",
        [{"id": 1, "y": 5}, {"id": 2, "y": None}, {"id": 3}],
        [{"id": 1}, {"id": 2, "y": 4}, {"id": 3, "y": 7}]),
    "is_missing": (
        f"SELECT a.id {LJ} WHERE b.y IS MISSING",
        [{"id": 3}],
        [{"id": 1}]),
    "is_null": (  # IS NULL of MISSING is MISSING: not true
        f"SELECT a.id {LJ} WHERE b.y IS NULL",
        [{"id": 2}],
        []),
    "is_not_null": (  # IS NOT NULL of MISSING is MISSING: not true either
        f"SELECT a.id {LJ} WHERE NOT (b.y IS NULL)",
        [{"id": 1}],
        [{"id": 2}, {"id": 3}]),
    "is_unknown": (
        f"SELECT a.id, b.y IS UNKNOWN AS u, b.y IS NOT MISSING AS there {LJ}",
        [{"id": 1, "u": False, "there": True}, {"id": 2, "u": True, "there": True},
         {"id": 3, "u": True, "there": False}],
        [{"id": 1, "u": True, "there": False}, {"id": 2, "u": False, "there": True},
         {"id": 3, "u": False, "there": True}]),
    "functions": (
        f"""SELECT a.id, b.y IS NULL AS n, IF_MISSING(b.y, -1) AS m, IF_NULL(b.y, -2) AS nn,
                   IF_MISSING_OR_NULL(b.y, -3) AS mn, COALESCE(b.y, -4) AS c, b.y + 1 AS y1,
                   MISSING_IF(a.x, 20) AS mx, NULL_IF(a.x, 20) AS nx {LJ}""",
        [{"id": 1, "n": False, "m": 5, "nn": 5, "mn": 5, "c": 5, "y1": 6, "mx": 10, "nx": 10},
         {"id": 2, "n": True, "m": None, "nn": -2, "mn": -3, "c": -4, "y1": None, "nx": None},
         {"id": 3, "m": -1, "mn": -3, "c": -4, "mx": 30, "nx": 30}],
        [{"id": 1, "m": -1, "mn": -3, "c": -4, "mx": 10, "nx": 10},
         {"id": 2, "n": False, "m": 4, "nn": 4, "mn": 4, "c": 4, "y1": 5, "nx": None},
         {"id": 3, "n": False, "m": 7, "nn": 7, "mn": 7, "c": 7, "y1": 8, "mx": 30, "nx": 30}]),
    "left_unnest": (  # LEFT UNNEST keeps a tuple whose collection is empty, the variable MISSING
        "SELECT a.id, u.y FROM a LEFT OUTER UNNEST (SELECT VALUE b FROM b WHERE b.aid = a.id) AS u",
        [{"id": 1, "y": 5}, {"id": 2, "y": None}, {"id": 3}],
        [{"id": 1}, {"id": 2, "y": 4}, {"id": 3, "y": 7}]),
    "left_unnest_missing": (
        "SELECT a.id FROM a LEFT UNNEST (SELECT VALUE b FROM b WHERE b.aid = a.id) u WHERE u IS MISSING",
        [{"id": 3}],
        [{"id": 1}]),
    "on_subquery": (  # a subquery of ON over the right side's variables only: b2 (y NULL) never matches
        "SELECT l.id, b.y FROM a AS l LEFT JOIN b ON l.id = b.aid AND EXISTS (SELECT 1 FROM a WHERE a.x >= b.y * 4)",
        [{"id": 1, "y": 5}, {"id": 2}, {"id": 3}],
        [{"id": 1}, {"id": 2, "y": 4}, {"id": 3, "y": 7}]),
    "star": (
        f"SELECT * {LJ}",
        [{"a": {"id": 1, "x": 10}, "b": {"bid": 1, "aid": 1, "y": 5}},
         {"a": {"id": 2, "x": 20}, "b": {"bid": 2, "aid": 2, "y": None}},
         {"a": {"id": 3, "x": 30}}],
        [{"a": {"id": 1, "x": 10}},
         {"a": {"id": 2, "x": 20}, "b": {"bid": 2, "aid": 2, "y": 4}},
         {"a": {"id": 3, "x": 30}, "b": {"bid": 3, "aid": 3, "y": 7}}]),
    "constructor": (
        f"SELECT a.id, {{'y': b.y, 'k': 1, 'gone': MISSING}} AS o {LJ}",
        [{"id": 1, "o": {"y": 5, "k": 1}}, {"id": 2, "o": {"y": None, "k": 1}}, {"id": 3, "o": {"k": 1}}],
        [{"id": 1, "o": {"k": 1}}, {"id": 2, "o": {"y": 4, "k": 1}}, {"id": 3, "o": {"y": 7, "k": 1}}]),
    "logic": (  # MISSING AND FALSE is FALSE, MISSING OR TRUE is TRUE, the rest MISSING
        f"SELECT a.id, (b.y > 4) AND a.x > 15 AS conj, (b.y > 4) OR a.x > 15 AS disj {LJ}",
        [{"id": 1, "conj": False, "disj": True}, {"id": 2, "conj": None, "disj": True},
         {"id": 3, "disj": True}],
        [{"id": 1, "conj": False}, {"id": 2, "conj": False, "disj": True},
         {"id": 3, "conj": True, "disj": True}]),
    "subquery": (  # the MISSING fields of a FROM subquery's tuples stay MISSING above it
        f"""SELECT s.id, s.y IS MISSING AS gone, s.y
            FROM (SELECT a.id, b.y {LJ}) AS s""",
        [{"id": 1, "gone": False, "y": 5}, {"id": 2, "gone": False, "y": None}, {"id": 3, "gone": True}],
        [{"id": 1, "gone": True}, {"id": 2, "gone": False, "y": 4}, {"id": 3, "gone": False, "y": 7}]),
    "let": (
        f"SELECT a.id, w {LJ} LET w = b.y * 2",
        [{"id": 1, "w": 10}, {"id": 2, "w": None}, {"id": 3}],
        [{"id": 1}, {"id": 2, "w": 8}, {"id": 3, "w": 14}]),
}


def canonical(rows):
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


#: the strategies each view is defined with: by ID (``verify`` compares it with its recomputation
#: after the batch), and under ``--runslow`` also recomputed
STRATEGIES = ["id", pytest.param("recompute", marks=pytest.mark.slow)]


def define_and_maintain(request, root, tables, views, changed, batch):
    """``tables`` (name: (key, rows)) and ``views`` (name: (query, ...)) defined by ID (and
    recomputed, under ``--runslow``), and ``batch`` ingested into table ``changed``: the
    warehouse, each view's rows as defined and after the batch, and ``verify`` after the batch,
    by (view, strategy)."""
    from idivm.warehouse import Warehouse

    wh = Warehouse(root / "wh", spark=request.getfixturevalue("spark"))
    for name, (key, rows) in tables.items():
        wh.create_table(name, [key], rows)
    strategies = ("id", "recompute") if request.config.getoption("--runslow") else ("id",)
    names = [(v, s) for v in views for s in strategies]
    for v, s in names:
        wh.define(f"CREATE VIEW {v}_{s} AS {views[v][0]}", strategy=s)
    before = {(v, s): wh.rows(f"{v}_{s}") for v, s in names}
    path = root / "batch.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in batch))
    wh.ingest(changed, path, format="rows")
    after, verified = {}, {}
    for v, s in names:
        wh.maintain(f"{v}_{s}")
        verified[(v, s)] = wh.verify(f"{v}_{s}")
        after[(v, s)] = wh.rows(f"{v}_{s}")
    return wh, before, after, verified


def check(maintained, views, view, strategy):
    _, before, after, verified = maintained
    _, expected_before, expected_after = views[view]
    assert canonical(before[(view, strategy)]) == canonical(expected_before)
    assert verified[(view, strategy)].ok, verified[(view, strategy)].summary()
    assert canonical(after[(view, strategy)]) == canonical(expected_after)


@pytest.fixture(scope="module")
def maintained(request, tmp_path_factory):
    return define_and_maintain(request, tmp_path_factory.mktemp("missing"),
                               {"a": ("id", A_ROWS), "b": ("bid", B_ROWS)}, VIEWS, "b", BATCH)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("view", list(VIEWS))
def test_missing_as_asterixdb_defines_it(maintained, view, strategy):
    check(maintained, VIEWS, view, strategy)


def test_a_view_without_missing_has_no_hidden_list(maintained):
    """Only a view whose fields may be MISSING stores the list of its MISSING fields."""
    from idivm.algebra.expressions import ABSENT
    from idivm.storage import delta

    wh = maintained[0]

    def stored(name):
        return delta.read_spark(wh.spark, wh.catalog.path_of(wh.catalog.view(name)), engine=wh.storage).columns

    wh.define("CREATE VIEW plain AS SELECT a.id, a.x FROM a")
    wh.define(f"CREATE VIEW fields_again AS {VIEWS['fields'][0]}", strategy="recompute")
    assert ABSENT not in stored("plain")
    assert ABSENT in stored("fields_id") and ABSENT in stored("fields_again")
    assert ABSENT not in wh.read("fields_id").columns


def test_show_leaves_missing_fields_out(maintained, run):
    wh = maintained[0]
    code, out, _ = run("--warehouse", str(wh.path), "show", "fields_id", "--format", "jsonl")
    assert code == 0
    assert canonical(json.loads(line) for line in out.splitlines()) == canonical(VIEWS["fields"][2])
    code, out, _ = run("--warehouse", str(wh.path), "show", "fields_id")
    assert code == 0  # the table: id 1's y is MISSING, an empty cell (a NULL would print null)
    assert sorted(line.split() for line in out.splitlines()[1:4]) == [["1"], ["2", "4"], ["3", "7"]], out


# --- fields a base table's records lack ---------------------------------------------------------

T_ROWS = [{"id": 0, "rf": {"pid": 4}}, {"id": 1, "mf": None}, {"id": 2, "mf": 5, "rf": None}]
# upserts that lack fields, and an insert of a record with its key alone
T_BATCH = [{"id": 0, "mf": 3}, {"id": 2, "rf": {"pid": 9}}, {"id": 5}]

T_VIEWS = {
    "t_fields": (
        "SELECT t.id, t.mf, t.rf FROM t",
        [{"id": 0, "rf": {"pid": 4}}, {"id": 1, "mf": None}, {"id": 2, "mf": 5, "rf": None}],
        [{"id": 0, "mf": 3}, {"id": 1, "mf": None}, {"id": 2, "rf": {"pid": 9}}, {"id": 5}]),
    "t_is_missing": (
        "SELECT t.id FROM t WHERE t.mf IS MISSING",
        [{"id": 0}],
        [{"id": 2}, {"id": 5}]),
    "t_star": (
        "SELECT * FROM t",
        [{"t": {"id": 0, "rf": {"pid": 4}}}, {"t": {"id": 1, "mf": None}}, {"t": {"id": 2, "mf": 5, "rf": None}}],
        [{"t": {"id": 0, "mf": 3}}, {"t": {"id": 1, "mf": None}}, {"t": {"id": 2, "rf": {"pid": 9}}},
         {"t": {"id": 5}}]),
    "t_fields_star": (
        "SELECT t.* FROM t",
        [{"id": 0, "rf": {"pid": 4}}, {"id": 1, "mf": None}, {"id": 2, "mf": 5, "rf": None}],
        [{"id": 0, "mf": 3}, {"id": 1, "mf": None}, {"id": 2, "rf": {"pid": 9}}, {"id": 5}]),
    "t_path": (  # a field of NULL is NULL, of MISSING MISSING
        "SELECT t.id, t.rf.pid FROM t",
        [{"id": 0, "pid": 4}, {"id": 1}, {"id": 2, "pid": None}],
        [{"id": 0}, {"id": 1}, {"id": 2, "pid": 9}, {"id": 5}]),
}


@pytest.fixture(scope="module")
def lacking(request, tmp_path_factory):
    return define_and_maintain(request, tmp_path_factory.mktemp("lacking"), {"t": ("id", T_ROWS)}, T_VIEWS, "t",
                               T_BATCH)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("view", list(T_VIEWS))
def test_fields_a_record_lacks_are_missing(lacking, view, strategy):
    check(lacking, T_VIEWS, view, strategy)


def test_a_table_whose_records_have_every_field_lists_none():
    from idivm.algebra.expressions import ABSENT
    from idivm.ingest.load import table_from_records

    full = table_from_records([{"id": 1, "x": 2}, {"id": 2, "x": None}], "rows", str)
    assert full.column_names == ["id", "x"]
    lacking = table_from_records([{"id": 1, "x": 2}, {"id": 2}], "rows", str)
    assert lacking.column_names == ["id", "x", ABSENT]
    assert lacking.column(ABSENT).to_pylist() == [None, ["x"]]


# --- fields a nested record lacks -----------------------------------------------------------------

N_ROWS = [{"id": 1, "addr": {"city": "SF", "zip": 1}}, {"id": 2, "addr": {"city": "SF"}},
          {"id": 3, "addr": {"city": "SF", "zip": None}}, {"id": 4, "addr": {"city": "SF"}},
          {"id": 5, "addr": {"city": "LA", "zip": 1}}]
# row 1 loses its zip (now like rows 2 and 4), a row like row 5, and row 4 deleted
N_BATCH = [{"id": 1, "addr": {"city": "SF"}}, {"id": 6, "addr": {"city": "LA", "zip": 1}}, {"__delete": {"id": 4}}]

N_VIEWS = {
    "n_addr": (
        "SELECT n.id, n.addr FROM n",
        [{"id": 1, "addr": {"city": "SF", "zip": 1}}, {"id": 2, "addr": {"city": "SF"}},
         {"id": 3, "addr": {"city": "SF", "zip": None}}, {"id": 4, "addr": {"city": "SF"}},
         {"id": 5, "addr": {"city": "LA", "zip": 1}}],
        [{"id": 1, "addr": {"city": "SF"}}, {"id": 2, "addr": {"city": "SF"}},
         {"id": 3, "addr": {"city": "SF", "zip": None}}, {"id": 5, "addr": {"city": "LA", "zip": 1}},
         {"id": 6, "addr": {"city": "LA", "zip": 1}}]),
    "n_path": (
        "SELECT n.id, n.addr.zip FROM n",
        [{"id": 1, "zip": 1}, {"id": 2}, {"id": 3, "zip": None}, {"id": 4}, {"id": 5, "zip": 1}],
        [{"id": 1}, {"id": 2}, {"id": 3, "zip": None}, {"id": 5, "zip": 1}, {"id": 6, "zip": 1}]),
    "n_zip_missing": (
        "SELECT n.id FROM n WHERE n.addr.zip IS MISSING",
        [{"id": 2}, {"id": 4}],
        [{"id": 1}, {"id": 2}]),
    # records are equal when their fields are: a field NULL in both makes the comparison NULL
    # (row 3 equals no row, itself included), a field both lack is equal
    "n_same": (
        "SELECT x.id AS a, y.id AS b FROM n x JOIN n y ON x.addr = y.addr WHERE x.id <= y.id",
        [{"a": 1, "b": 1}, {"a": 2, "b": 2}, {"a": 2, "b": 4}, {"a": 4, "b": 4}, {"a": 5, "b": 5}],
        [{"a": 1, "b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 2}, {"a": 5, "b": 5}, {"a": 5, "b": 6},
         {"a": 6, "b": 6}]),
}


@pytest.fixture(scope="module")
def nested_lacking(request, tmp_path_factory):
    return define_and_maintain(request, tmp_path_factory.mktemp("nested_lacking"), {"n": ("id", N_ROWS)}, N_VIEWS,
                               "n", N_BATCH)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("view", list(N_VIEWS))
def test_fields_a_nested_record_lacks_are_missing(nested_lacking, view, strategy):
    check(nested_lacking, N_VIEWS, view, strategy)


def test_objects_that_lack_fields_list_them_at_every_depth():
    from idivm.algebra.expressions import ABSENT
    from idivm.ingest.load import table_from_records

    t = table_from_records([{"id": 1, "a": {"x": 1, "y": [{"p": 1}, {"q": 2}]}}, {"id": 2, "a": {"x": 2}}], "rows", str)
    assert t.column_names == ["id", "a"]
    assert t.column("a").to_pylist() == [
        {"x": 1, "y": [{"p": 1, "q": None, ABSENT: ["q"]}, {"p": None, "q": 2, ABSENT: ["p"]}], ABSENT: None},
        {"x": 2, "y": None, ABSENT: ["y"]}]


# --- grouping keys that are MISSING, and arrays compared --------------------------------------------

G_ROWS = [{"id": 1, "k": [1, 2]}, {"id": 2, "k": [1, 2]}, {"id": 3, "k": None}, {"id": 4},
          {"id": 5, "k": [1, None]}, {"id": 6, "k": [1, None]}, {"id": 7}, {"id": 8, "k": []}]
# row 4's k becomes NULL and row 3 goes (the NULL group stays, of row 4 now), row 1's k changes,
# a row lacking k and a row with an empty array arrive
G_BATCH = [{"id": 4, "k": None}, {"__delete": {"id": 3}}, {"id": 1, "k": [2, 1]}, {"id": 9}, {"id": 10, "k": []}]

G_VIEWS = {
    # a MISSING key is a group of its own, apart from the NULL key's, and MISSING in its row
    "g_count": (
        "SELECT g.k, COUNT(*) AS n FROM g GROUP BY g.k",
        [{"k": [1, 2], "n": 2}, {"k": None, "n": 1}, {"n": 2}, {"k": [1, None], "n": 2}, {"k": [], "n": 1}],
        [{"k": [2, 1], "n": 1}, {"k": [1, 2], "n": 1}, {"k": None, "n": 1}, {"n": 2}, {"k": [1, None], "n": 2},
         {"k": [], "n": 2}]),
    "g_alias": (
        "SELECT key, key IS MISSING AS gone, COUNT(*) AS n FROM g GROUP BY g.k AS key HAVING COUNT(*) > 1",
        [{"key": [1, 2], "gone": False, "n": 2}, {"gone": True, "n": 2}, {"key": [1, None], "gone": False, "n": 2}],
        [{"gone": True, "n": 2}, {"key": [1, None], "gone": False, "n": 2}, {"key": [], "gone": False, "n": 2}]),
    # arrays are equal item by item: a NULL item makes = NULL (rows 5 and 6 join nothing)
    "g_join": (
        "SELECT x.id AS a, y.id AS b FROM g x JOIN g y ON x.k = y.k WHERE x.id < y.id",
        [{"a": 1, "b": 2}],
        [{"a": 8, "b": 10}]),
    # = and != item by item, FALSE for other lengths; <, <=, >, >= of arrays NULL; MISSING stays MISSING
    "g_compare": (
        "SELECT g.id, g.k = [1, 2] AS e, g.k != [1, 2] AS ne, g.k < [1, 3] AS lt FROM g",
        [{"id": 1, "e": True, "ne": False, "lt": None}, {"id": 2, "e": True, "ne": False, "lt": None},
         {"id": 3, "e": None, "ne": None, "lt": None}, {"id": 4}, {"id": 5, "e": None, "ne": None, "lt": None},
         {"id": 6, "e": None, "ne": None, "lt": None}, {"id": 7}, {"id": 8, "e": False, "ne": True, "lt": None}],
        [{"id": 1, "e": False, "ne": True, "lt": None}, {"id": 2, "e": True, "ne": False, "lt": None},
         {"id": 4, "e": None, "ne": None, "lt": None}, {"id": 5, "e": None, "ne": None, "lt": None},
         {"id": 6, "e": None, "ne": None, "lt": None}, {"id": 7}, {"id": 8, "e": False, "ne": True, "lt": None},
         {"id": 9}, {"id": 10, "e": False, "ne": True, "lt": None}]),
    # positions from 0, negative ones from the end; a position out of the array is MISSING
    "g_index": (
        "SELECT g.id, g.k[0] AS first, g.k[-1] AS last, g.k[1] IS MISSING AS gone FROM g",
        [{"id": 1, "first": 1, "last": 2, "gone": False}, {"id": 2, "first": 1, "last": 2, "gone": False},
         {"id": 3, "first": None, "last": None, "gone": False}, {"id": 4, "gone": True},
         {"id": 5, "first": 1, "last": None, "gone": False}, {"id": 6, "first": 1, "last": None, "gone": False},
         {"id": 7, "gone": True}, {"id": 8, "gone": True}],
        [{"id": 1, "first": 2, "last": 1, "gone": False}, {"id": 2, "first": 1, "last": 2, "gone": False},
         {"id": 4, "first": None, "last": None, "gone": False},
         {"id": 5, "first": 1, "last": None, "gone": False}, {"id": 6, "first": 1, "last": None, "gone": False},
         {"id": 7, "gone": True}, {"id": 8, "gone": True}, {"id": 9, "gone": True}, {"id": 10, "gone": True}]),
    # SELECT * after GROUP BY: the keys, the group (AsterixDB's generated group variable, $1) and the group LETs
    "g_star": (
        "SELECT * FROM g WHERE g.id <= 2 GROUP BY g.id AS key LET n = key * 10",
        [{"key": 1, "$1": [{"g": {"id": 1, "k": [1, 2]}}], "n": 10},
         {"key": 2, "$1": [{"g": {"id": 2, "k": [1, 2]}}], "n": 20}],
        [{"key": 1, "$1": [{"g": {"id": 1, "k": [2, 1]}}], "n": 10},
         {"key": 2, "$1": [{"g": {"id": 2, "k": [1, 2]}}], "n": 20}]),
}


@pytest.fixture(scope="module")
def grouped(request, tmp_path_factory):
    return define_and_maintain(request, tmp_path_factory.mktemp("grouped"), {"g": ("id", G_ROWS)}, G_VIEWS, "g",
                               G_BATCH)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("view", list(G_VIEWS))
def test_missing_keys_and_arrays_compared(grouped, view, strategy):
    check(grouped, G_VIEWS, view, strategy)
