"""AsterixDB's spellings of SQL++ queries, planned: each has the plan of its plain spelling, and
the ones idivm refuses say why, with the position.  (The parser's desugaring is tested in
tests/test_parser.py; these views are computed and maintained in tests/test_differential.py.)"""

from __future__ import annotations

import pytest

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.builder import build_view
from idivm.errors import UnsupportedError
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
])
def test_a_spelling_has_the_plan_of_its_plain_form(spelling, plain):
    assert plan(spelling) == plan(plain)


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


@pytest.mark.parametrize("query, line, column, message", [
    ("SELECT t.id, (SELECT VALUE u.w FROM u WHERE u.tid = t.id ORDER BY u.w) AS ws FROM t", 1, 31,
     "ORDER BY in a subquery used as a value is not supported"),
    ("FROM t LET first = (FROM u SELECT VALUE u.w ORDER BY u.w)[0] SELECT t.id, first", 1, 37,
     "ORDER BY in a subquery used as a value is not supported"),
    ("SELECT x.id, p FROM (SELECT VALUE u FROM u ORDER BY u.w) AS x AT p", 1, 38,
     "AT needs an ordered collection; the result of a subquery is a bag (its ORDER BY is not kept)"),
    ("SELECT x.id, p FROM (SELECT VALUE u FROM u) AS x AT p", 1, 38,
     "AT needs an ordered collection; the result of a subquery is a bag"),
])
def test_order_that_would_be_lost_is_refused(query, line, column, message):
    with pytest.raises(UnsupportedError) as info:
        plan(query)
    assert info.value.message.startswith(message)
    assert (info.value.span.line, info.value.span.column) == (line, column)
