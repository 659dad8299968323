"""AsterixDB's spellings of SQL++ queries, planned: each has the plan of its plain spelling, and
the ones idivm refuses say why, with the position.  (The parser's desugaring is tested in
tests/test_parser.py; these views are computed and maintained in tests/test_differential.py.)"""

from __future__ import annotations

import pytest

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.builder import build_view
from idivm.algebra.expressions import Var, format_term
from idivm.errors import SemanticError, UnsupportedError
from idivm.sqlpp import parse_view

TABLES = {
    "t": T.TupleType((("id", T.INT), ("k", T.STRING), ("v", T.INT), ("l", T.CollectionType(T.INT)))),
    "u": T.TupleType((("id", T.INT), ("tid", T.INT), ("w", T.DOUBLE))),
}


def plan(query: str) -> O.Operator:
    return build_view(parse_view(f"CREATE VIEW v AS {query}"), TABLES).plan


@pytest.mark.parametrize("spelling, plain", [
    ("FROM t CROSS JOIN u WHERE t.id = u.tid SELECT t.k, u.w",
     "SELECT t.k, u.w FROM t, u WHERE t.id = u.tid"),
    ("FROM t WHERE t.v IN [1, 2] AND t.k NOT IN ['a'] SELECT VALUE {'id': t.id}",
     "SELECT VALUE {'id': t.id} FROM t WHERE t.v IN (1, 2) AND t.k NOT IN ('a')"),
    ("WITH big AS (FROM u WHERE u.w > 10 SELECT VALUE u) FROM t JOIN big ON big.tid = t.id SELECT t.id, big.w",
     "SELECT t.id, big.w FROM t JOIN (SELECT VALUE u FROM u WHERE u.w > 10) AS big ON big.tid = t.id"),
    ("FROM t JOIN (SELECT VALUE u FROM u ORDER BY u.w DESC) AS x ON x.tid = t.id SELECT t.id, x.w",
     "SELECT t.id, x.w FROM t JOIN (SELECT VALUE u FROM u) AS x ON x.tid = t.id"),
    ("FROM t WHERE t.id IN (SELECT VALUE u.tid FROM u ORDER BY u.w) SELECT t.id",
     "SELECT t.id FROM t WHERE t.id IN (SELECT VALUE u.tid FROM u)"),
    ("FROM t WHERE 3 IN t.l SELECT t.id",
     "SELECT t.id FROM t WHERE 3 IN (SELECT VALUE `$in` FROM t.l AS `$in`)"),
    # a query that is an expression: its one value
    ("{'n': ARRAY_COUNT((SELECT VALUE u.w FROM u)), 'k': 1}",
     "SELECT VALUE {'n': ARRAY_COUNT((SELECT VALUE u.w FROM u)), 'k': 1}"),
    ("STRICT_SUM((FROM t SELECT VALUE t.v))", "SELECT VALUE STRICT_SUM((FROM t SELECT VALUE t.v))"),
    # quantified expressions, as AsterixDB translates them
    ("SELECT t.id FROM t WHERE SOME x IN t.l SATISFIES x > t.v END",
     "SELECT t.id FROM t WHERE EXISTS (SELECT VALUE 1 FROM t.l AS x WHERE x > t.v)"),
    # a column of an enclosing variable in FROM (here, in the quantifier's own FROM)
    ("SELECT t.id FROM t WHERE SOME x IN l SATISFIES x > 1",
     "SELECT t.id FROM t WHERE EXISTS (SELECT VALUE 1 FROM t.l AS x WHERE x > 1)"),
    ("SELECT t.id, EVERY x IN t.l, u IN u SATISFIES x > u.w AS above FROM t",
     "SELECT t.id, NOT EXISTS (SELECT VALUE 1 FROM t.l AS x, u AS u WHERE NOT (x > u.w)) AS above FROM t"),
])
def test_a_spelling_has_the_plan_of_its_plain_form(spelling, plain):
    assert plan(spelling) == plan(plain)


@pytest.mark.parametrize("unnamed, named", [
    # AsterixDB numbers the projections that have no name ``$1``, ``$2``, … with one counter per
    # query: a variable or a field keeps its own name
    ("SELECT COUNT(*), MAX(t.v) FROM t", "SELECT COUNT(*) AS `$1`, MAX(t.v) AS `$2` FROM t"),
    ("SELECT t.id, t.v + 1, t.k FROM t", "SELECT t.id, t.v + 1 AS `$1`, t.k FROM t"),
    # a block's SELECT clause first, a projection before the subqueries inside it, then the
    # blocks of its WHERE clause
    ("SELECT t.v * 2, (SELECT u.w + 1 FROM u WHERE u.tid = t.id), t.v - 1 FROM t "
     "WHERE EXISTS (SELECT u.w * 3 FROM u WHERE u.tid = t.id)",
     "SELECT t.v * 2 AS `$1`, (SELECT u.w + 1 AS `$3` FROM u WHERE u.tid = t.id) AS `$2`, t.v - 1 AS `$4` FROM t "
     "WHERE EXISTS (SELECT u.w * 3 AS `$5` FROM u WHERE u.tid = t.id)"),
    # a grouping key without a name takes a number after the SELECT clause's
    ("SELECT COUNT(*), (SELECT VALUE 1 FROM u) FROM t GROUP BY t.v % 2 "
     "HAVING EXISTS (SELECT u.w + 1 FROM u)",
     "SELECT COUNT(*) AS `$1`, (SELECT VALUE 1 FROM u) AS `$2` FROM t GROUP BY t.v % 2 "
     "HAVING EXISTS (SELECT u.w + 1 AS `$4` FROM u)"),
    # the blocks of a WITH clause before the query's, whether or where the query uses them
    ("WITH m AS (SELECT MAX(u.w) FROM u), n AS (SELECT VALUE u.w + 1 FROM u) "
     "SELECT COUNT(*), m[0], (SELECT u.w * 2 FROM u) FROM t",
     "SELECT COUNT(*) AS `$2`, (SELECT MAX(u.w) AS `$1` FROM u)[0] AS `$3`, "
     "(SELECT u.w * 2 AS `$5` FROM u) AS `$4` FROM t"),
])
def test_unnamed_projections_get_asterixdbs_generated_names(unnamed, named):
    assert plan(unnamed) == plan(named)


def test_a_view_with_generated_names_is_maintained_by_id(make_warehouse, tmp_path):
    import json

    from idivm.datasets import devices
    from idivm.demo import sample_path

    wh = make_warehouse()
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    wh.define("CREATE VIEW named AS SELECT d.category, COUNT(*), MAX(p.price), SUM(p.price) / 2 FROM devices d "
              "JOIN devices_parts dp ON dp.did = d.did JOIN parts p ON p.pid = dp.pid GROUP BY d.category",
              strategy="id")
    assert all(list(row) == ["category", "$1", "$2", "$3"] for row in wh.rows("named"))
    parts = [json.loads(line) for line in sample_path("devices", "parts").read_text().splitlines() if line.strip()]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({**p, "price": p["price"] * 3}) + "\n" for p in parts[:3]))
    wh.ingest("parts", tmp_path / "p.jsonl", format="rows")
    (r,) = wh.maintain("named")
    assert r.strategy == "id"
    assert wh.verify("named").ok


def test_let_after_group_by_is_assigned_per_group_and_its_aggregates_computed_by_the_grouping():
    p = plan("FROM t GROUP BY t.k LET n = COUNT(*), m = n * 2 HAVING m > 2 SELECT t.k, m")
    ops = [type(op).__name__ for op in O.walk(p)]
    assert ops == ["ReturnBag", "Project", "Select", "Assign", "Assign", "GroupBy", "ScanCollection", "Ground"]
    group = next(op for op in O.walk(p) if isinstance(op, O.GroupBy))
    assert [a.function for _, a in group.aggregates] == ["count"]


def test_in_over_a_let_variable_that_holds_a_collection():
    p = plan("FROM t LET vals = t.l WHERE t.v IN vals SELECT t.id")
    # the IN scans the variable's collection: a ScanCollection whose source is a variable
    assert any(isinstance(op, O.ScanCollection) and op.source.variables() for op in O.walk(p))


def test_an_ordered_subquery_is_an_array_numbered_by_order_by():
    p = plan("SELECT t.id, (SELECT VALUE u.w FROM u WHERE u.tid = t.id ORDER BY u.w DESC LIMIT 2) AS ws FROM t")
    ret = next(op for op in O.walk(p) if isinstance(op, O.ReturnBag) and op.order is not None)
    order = next(op for op in O.walk(p) if isinstance(op, O.OrderBy))
    assert ret.order == Var(order.var) and [d for _, d in order.keys] == [True]
    limit = next(op for op in O.walk(p) if isinstance(op, O.Select) and op.input is order)
    assert format_term(limit.condition) == f"{order.var} <= 2"


def test_an_order_by_key_naming_a_select_alias_orders_by_its_expression():
    # the alias ``id`` hides the column u.id: the key is u.w
    p = plan("SELECT t.id, (SELECT u.w AS id FROM u ORDER BY id DESC) AS ws FROM t")
    assign = next(op for op in O.walk(p) if isinstance(op, O.Assign))
    assert format_term(assign.term) == "u.w"
    with pytest.raises(SemanticError, match="an ORDER BY key must be a scalar, not"):
        plan("SELECT t.id, (SELECT VALUE {'w': u.w} FROM u ORDER BY {'w': u.w}) AS ws FROM t")


@pytest.mark.parametrize("query, line, column, message", [
    ("SELECT x.id, p FROM (SELECT VALUE u FROM u) AS x AT p", 1, 38,
     "AT needs an ordered collection; the result of a subquery without ORDER BY is a bag"),
    ("SELECT x.id FROM (SELECT VALUE u FROM u ORDER BY u.w LIMIT -1) AS x", 1, 77,
     "LIMIT needs a non-negative integer literal"),
    ("SELECT x.id FROM (SELECT VALUE u FROM u ORDER BY u.w LIMIT 1 OFFSET u.w) AS x", 1, 86,
     "OFFSET needs a non-negative integer literal"),
])
def test_order_that_would_be_lost_is_refused(query, line, column, message):
    with pytest.raises(UnsupportedError) as info:
        plan(query)
    assert info.value.message.startswith(message)
    assert (info.value.span.line, info.value.span.column) == (line, column)


# --- grouping sets ----------------------------------------------------------------------------------

GROUPING_ROWS = [{"id": 1, "a": "x", "b": 1, "v": 1}, {"id": 2, "a": "x", "b": 2, "v": 2},
                 {"id": 3, "a": "y", "b": 1, "v": 4}]


@pytest.mark.parametrize("grouping, expected", [
    ("ROLLUP(t.a, t.b)",  # (a, b), (a), ()
     [("x", 1, 0, 1), ("x", 2, 0, 2), ("y", 1, 0, 4), ("x", None, 1, 3), ("y", None, 1, 4), (None, None, 3, 7)]),
    ("CUBE(t.a, t.b)",  # and (b)
     [("x", 1, 0, 1), ("x", 2, 0, 2), ("y", 1, 0, 4), ("x", None, 1, 3), ("y", None, 1, 4),
      (None, 1, 2, 5), (None, 2, 2, 2), (None, None, 3, 7)]),
    ("GROUPING SETS ((t.a), (t.b))", [("x", None, 1, 3), ("y", None, 1, 4), (None, 1, 2, 5), (None, 2, 2, 2)]),
    ("t.a, ROLLUP(t.b)", [("x", 1, 0, 1), ("x", 2, 0, 2), ("y", 1, 0, 4), ("x", None, 1, 3), ("y", None, 1, 4)]),
    ("()", [(None, None, None, 7)]),
])
def test_grouping_sets_are_a_union_of_groupings(make_warehouse, grouping, expected):
    """ROLLUP, CUBE and GROUPING SETS group by each of their sets in turn, the keys outside a set
    NULL; GROUPING(a, b) has a bit per key, set where the key is not grouped by (the first the
    highest).  Expectations written out by hand for three rows."""
    wh = make_warehouse()
    wh.create_table("t", ["id"], GROUPING_ROWS)
    if grouping == "()":
        wh.define("CREATE VIEW g AS SELECT SUM(t.v) AS s FROM t GROUP BY ()")
        got = [(None, None, None, r["s"]) for r in wh.rows("g")]
    else:
        wh.define(f"CREATE VIEW g AS SELECT a, b, GROUPING(a, b) AS bits, SUM(t.v) AS s FROM t GROUP BY {grouping}")
        got = [(r["a"], r["b"], r["bits"], r["s"]) for r in wh.rows("g")]
    assert sorted(got, key=str) == sorted(expected, key=str)


def test_a_with_definition_reads_the_table_that_a_variable_hides_where_it_is_used(make_warehouse, tmp_path):
    """``WITH total AS (… FROM t)[0] … FROM t``: the definition reads table t, though the
    query's variable t hides that name where ``total`` is inlined; computed and maintained."""
    wh = make_warehouse()
    wh.create_table("t", ["id"], GROUPING_ROWS)
    wh.define("CREATE VIEW w AS WITH total AS (SELECT VALUE SUM(v) FROM t)[0] "
              "SELECT t.a, SUM(t.v) AS s, total FROM t GROUP BY t.a")
    assert sorted((r["a"], r["s"], r["total"]) for r in wh.rows("w")) == [("x", 3, 7), ("y", 4, 7)]
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"id": 4, "a": "y", "b": 2, "v": 10}\n')
    wh.ingest("t", batch, format="rows")
    wh.maintain("w")
    assert wh.verify("w").ok
    assert sorted((r["a"], r["s"], r["total"]) for r in wh.rows("w")) == [("x", 3, 17), ("y", 14, 17)]


def test_a_with_definition_is_refused_where_its_names_could_mean_an_enclosing_variable():
    with pytest.raises(SemanticError, match="'t' of a WITH definition cannot be inlined here"):
        plan("SELECT VALUE (WITH c AS (SELECT VALUE COUNT(*) FROM t)[0] SELECT VALUE c FROM [1] AS t) FROM t")


def test_grouping_needs_grouping_keys(make_warehouse):
    wh = make_warehouse()
    wh.create_table("t", ["id"], GROUPING_ROWS)
    with pytest.raises(SemanticError, match=r"GROUPING: .* is not a grouping key"):
        wh.define("CREATE VIEW g AS SELECT t.a, GROUPING(t.v) AS bits FROM t GROUP BY ROLLUP(t.a)")


# --- statistics aggregates ----------------------------------------------------------------------------

#: group a: 2, 4, 4, 4, 5, 5, 7, 9 (mean 5; m2 = Σ(x - 5)² = 32, m3 = 42, m4 = 356), NULL ignored;
#: group b: one value; group c: three equal values (m2 = 0)
STATISTICS_ROWS = [{"id": i, "g": "a", "x": x} for i, x in enumerate([2, 4, 4, 4, 5, 5, 7, 9, None])] + \
    [{"id": 20, "g": "b", "x": 3}] + [{"id": 30 + i, "g": "c", "x": 1} for i in range(3)]
STATISTICS_EXPECTED = {  # worked out by hand from the moments above (AsterixDB's formulas)
    "a": {"ss": (32 / 7) ** 0.5, "sp": 2.0, "vs": 32 / 7, "vp": 4.0, "sk": 8 ** 0.5 * 42 / 32 ** 1.5,
          "ku": 356 * 8 / 32 ** 2 - 3},
    "b": {"ss": None, "sp": 0.0, "vs": None, "vp": 0.0, "sk": None, "ku": None},
    "c": {"ss": 0.0, "sp": 0.0, "vs": 0.0, "vp": 0.0, "sk": None, "ku": None},
}


def _approx(row: dict) -> dict:
    return {k: (pytest.approx(v) if v is not None else None) for k, v in row.items()}


@pytest.mark.parametrize("form", ["group", pytest.param("array", marks=pytest.mark.slow), "distinct"])
def test_statistics_aggregates_are_asterixdbs_and_maintained(make_warehouse, tmp_path, form):
    """STDDEV_SAMP, STDDEV_POP, VAR_SAMP (VARIANCE), VAR_POP, SKEWNESS and KURTOSIS, as SQL
    aggregates of a group, as ARRAY_* functions of a subquery's values, and DISTINCT (of
    values made distinct here by adding the id), computed and then maintained by id through a
    batch; expectations worked out by hand."""
    import json

    wh = make_warehouse()
    rows = [{**r, "x": None if r["x"] is None else r["x"] * 100 + r["id"]} for r in STATISTICS_ROWS] \
        if form == "distinct" else STATISTICS_ROWS
    wh.create_table("t", ["id"], rows)
    names = {"ss": "STDDEV_SAMP", "sp": "STDDEV_POP", "vs": "VARIANCE", "vp": "VAR_POP", "sk": "SKEWNESS",
             "ku": "KURTOSIS"}
    if form == "group":
        items = ", ".join(f"{f}(t.x) AS {k}" for k, f in names.items())
        wh.define(f"CREATE VIEW s AS SELECT t.g, {items} FROM t GROUP BY t.g", strategy="id")
    elif form == "array":
        items = ", ".join(f"ARRAY_{f}(xs) AS {k}" for k, f in names.items())
        wh.define(f"CREATE VIEW s AS SELECT DISTINCT o.g AS g, {items} FROM t AS o "
                  "LET xs = (SELECT VALUE u.x FROM t AS u WHERE u.g = o.g)", strategy="id")
    else:  # the same values after x * 100 + id, made distinct again by dividing by 100 and rounding down
        items = ", ".join(f"{f}(DISTINCT FLOOR(t.x / 100)) AS {k}" for k, f in names.items())
        wh.define(f"CREATE VIEW s AS SELECT t.g, {items} FROM t GROUP BY t.g", strategy="id")
    expected = dict(STATISTICS_EXPECTED)
    if form == "distinct":  # the distinct values of a: 2, 4, 5, 7, 9 (mean 5.4); b and c one value each
        d = [x - 5.4 for x in (2, 4, 5, 7, 9)]
        m2, m3, m4 = (sum(v ** k for v in d) for k in (2, 3, 4))
        expected = {"a": {"ss": (m2 / 4) ** 0.5, "sp": (m2 / 5) ** 0.5, "vs": m2 / 4, "vp": m2 / 5,
                          "sk": 5 ** 0.5 * m3 / m2 ** 1.5, "ku": m4 * 5 / m2 ** 2 - 3},
                    "b": STATISTICS_EXPECTED["b"], "c": STATISTICS_EXPECTED["b"]}
    got = {r["g"]: {k: r[k] for k in names} for r in wh.rows("s")}
    assert got == {g: _approx(v) for g, v in expected.items()}
    # group b gets a second value (3 and 5: mean 4, m2 = 2), group c loses one of its equal values
    path = tmp_path / "t.jsonl"
    second = {"id": 21, "g": "b", "x": 5 if form != "distinct" else 521}
    path.write_text(json.dumps(second) + "\n" + json.dumps({"__delete": {"id": 30}}) + "\n")
    wh.ingest("t", path, format="rows")
    wh.maintain("s")
    got = {r["g"]: {k: r[k] for k in names} for r in wh.rows("s")}
    assert got["b"] == _approx({"ss": 2 ** 0.5, "sp": 1.0, "vs": 2.0, "vp": 1.0, "sk": None, "ku": None})
    assert got["c"] == _approx(expected["c"] if form != "distinct" else STATISTICS_EXPECTED["b"])
    assert wh.verify("s").ok
