"""SQL++ parser: accepted constructs and their AST, precedence, lexical rules, errors."""

from __future__ import annotations

import pytest

from idivm.errors import Span, SqlppSyntaxError
from idivm.sqlpp import ast as A
from idivm.sqlpp import parse_query, parse_view
from idivm.sqlpp.parser import KEYWORDS, grammar_conflicts

# ----------------------------------------------------------------------------- builders


def I(name: str) -> A.Identifier:
    return A.Identifier(name)


def path(base: str, *names: str) -> A.Expr:
    e: A.Expr = I(base)
    for n in names:
        e = A.FieldAccess(e, n)
    return e


def num(v) -> A.Literal:
    return A.Literal(v, "number")


def s(v: str) -> A.Literal:
    return A.Literal(v, "string")


def op(o: str, left: A.Expr, right: A.Expr) -> A.BinaryOp:
    return A.BinaryOp(o, left, right)


def item(e: A.Expr, alias: str | None = None) -> A.ExprItem:
    return A.ExprItem(e, alias)


def table(name: str, alias: str | None = None, at: str | None = None) -> A.FromExpr:
    return A.FromExpr(I(name), alias, at)


def natural(left: A.FromItem, right: A.FromItem, kind: str = "INNER") -> A.Join:
    return A.Join(kind, left, right, None, natural=True)


def select(*items: A.SelectItem, from_: tuple = (), **kw) -> A.SelectQuery:
    return A.SelectQuery(distinct=kw.pop("distinct", False), value=kw.pop("value", None),
                         items=items, from_items=from_, **kw)


def expr(text: str) -> A.Expr:
    """The AST of one expression, read as ``SELECT VALUE <text>``."""
    q = parse_query(f"SELECT VALUE {text}")
    assert isinstance(q, A.SelectQuery) and q.value is not None
    return q.value


def syntax_error(text: str, *, view: bool = False, filename: str | None = None) -> SqlppSyntaxError:
    with pytest.raises(SqlppSyntaxError) as info:
        (parse_view if view else parse_query)(text, filename)
    return info.value


# ----------------------------------------------------------------------------- the grammar


def test_grammar_is_lalr1_without_conflicts():
    assert grammar_conflicts() == []


# ----------------------------------------------------------------------------- thesis views


def test_thesis_devices_view():
    v = parse_view('CREATE VIEW V AS SELECT did, pid, price FROM parts NATURAL JOIN devices_parts '
                   'NATURAL JOIN devices WHERE category = "phone"')
    assert v == A.CreateView("V", select(
        item(I("did")), item(I("pid")), item(I("price")),
        from_=(natural(natural(table("parts"), table("devices_parts")), table("devices")),),
        where=op("=", I("category"), s("phone"))))


def test_thesis_nested_reviews_view():
    v = parse_view('CREATE VIEW V AS SELECT business_id, ( SELECT * FROM reviews NATURAL JOIN users '
                   'WHERE business_id=businesses.business_id ) AS full_reviews FROM businesses '
                   'WHERE city = "San Francisco"')
    inner = select(A.StarItem(), from_=(natural(table("reviews"), table("users")),),
                   where=op("=", I("business_id"), path("businesses", "business_id")))
    assert v == A.CreateView("V", select(
        item(I("business_id")), item(A.Subquery(inner), "full_reviews"),
        from_=(table("businesses"),),
        where=op("=", I("city"), s("San Francisco"))))


def test_thesis_group_into_view():
    v = parse_view('CREATE VIEW V1 AS SELECT business_id, full_reviews FROM businesses NATURAL LEFT '
                   'OUTER JOIN ( reviews NATURAL JOIN users ) WHERE city = "San Francisco" '
                   'GROUP BY business_id INTO full_reviews')
    assert v == A.CreateView("V1", select(
        item(I("business_id")), item(I("full_reviews")),
        from_=(natural(table("businesses"), natural(table("reviews"), table("users")), "LEFT"),),
        where=op("=", I("city"), s("San Francisco")),
        group_by=(A.GroupKey(I("business_id")),), group_as="full_reviews"))


def test_view_accepts_trailing_semicolon_and_backquoted_name():
    assert parse_view("create view `my view` as select value 1;") == \
        A.CreateView("my view", select(value=num(1)))


def test_parse_view_requires_create_view():
    e = syntax_error("SELECT a FROM t", view=True)
    assert e.message == "unexpected 'SELECT'; expected 'CREATE'"


# ----------------------------------------------------------------------------- SELECT clause


@pytest.mark.parametrize("kw", ["VALUE", "ELEMENT", "RAW", "value"])
def test_select_value_element_raw(kw):
    assert parse_query(f"SELECT {kw} u.name FROM users u") == select(
        value=path("u", "name"), from_=(table("users", "u"),))


def test_select_distinct():
    assert parse_query("SELECT DISTINCT a FROM t") == select(item(I("a")), from_=(table("t"),), distinct=True)
    assert parse_query("SELECT DISTINCT VALUE a FROM t") == select(
        value=I("a"), from_=(table("t"),), distinct=True)


def test_select_aliases_explicit_and_implicit():
    q = parse_query("SELECT a AS x, b y, c + 1 AS z, d FROM t")
    assert q.items == (item(I("a"), "x"), item(I("b"), "y"),
                       item(op("+", I("c"), num(1)), "z"), item(I("d")))


def test_select_stars():
    q = parse_query("SELECT *, r.*, u.address.*, (SELECT VALUE 1)[0].* FROM t")
    assert q.items == (
        A.StarItem(),
        A.StarItem(I("r")),
        A.StarItem(path("u", "address")),
        A.StarItem(A.IndexAccess(A.Subquery(select(value=num(1))), num(0))),
    )


def test_select_without_from():
    assert parse_query("SELECT 1 AS one") == select(item(num(1), "one"))


# ----------------------------------------------------------------------------- FROM clause


def test_from_aliases_at_and_correlated_paths():
    q = parse_query("SELECT * FROM users AS u AT i, u.elite AS y, u.friends f AT j, orders")
    assert q.from_items == (
        table("users", "u", "i"),
        A.FromExpr(path("u", "elite"), "y"),
        A.FromExpr(path("u", "friends"), "f", "j"),
        table("orders"),
    )


def test_from_subquery_with_and_without_as():
    q = parse_query("SELECT * FROM (SELECT a FROM t) AS s, (SELECT VALUE b FROM u) v")
    assert q.from_items == (
        A.FromExpr(A.Subquery(select(item(I("a")), from_=(table("t"),))), "s"),
        A.FromExpr(A.Subquery(select(value=I("b"), from_=(table("u"),))), "v"),
    )


def test_unnest_after_a_term_and_after_a_comma():
    q = parse_query("SELECT * FROM users u UNNEST u.tags AS t AT p UNNEST t.parts x, UNNEST u.more m")
    assert q.from_items == (
        table("users", "u"),
        A.FromExpr(path("u", "tags"), "t", "p", unnest=True),
        A.FromExpr(path("t", "parts"), "x", unnest=True),
        A.FromExpr(path("u", "more"), "m", unnest=True),
    )


@pytest.mark.parametrize("spelling, kind, is_natural", [
    ("JOIN", "INNER", False),
    ("INNER JOIN", "INNER", False),
    ("LEFT JOIN", "LEFT", False),
    ("LEFT OUTER JOIN", "LEFT", False),
    ("NATURAL JOIN", "INNER", True),
    ("NATURAL INNER JOIN", "INNER", True),
    ("NATURAL LEFT JOIN", "LEFT", True),
    ("natural left outer join", "LEFT", True),
])
def test_join_kinds(spelling, kind, is_natural):
    on = "" if is_natural else " ON a.k = b.k"
    q = parse_query(f"SELECT * FROM ta a {spelling} tb b{on}")
    cond = None if is_natural else op("=", path("a", "k"), path("b", "k"))
    assert q.from_items == (A.Join(kind, table("ta", "a"), table("tb", "b"), cond, natural=is_natural),)


def test_joins_are_left_associative_and_mix_with_commas():
    q = parse_query("SELECT * FROM a JOIN b ON x LEFT JOIN c ON y NATURAL JOIN d, e")
    ab = A.Join("INNER", table("a"), table("b"), I("x"))
    abc = A.Join("LEFT", ab, table("c"), I("y"))
    assert q.from_items == (natural(abc, table("d")), table("e"))


def test_parenthesized_join_trees():
    q = parse_query("SELECT * FROM (a JOIN (b NATURAL JOIN c) ON x) LEFT JOIN ((d)) AS dd ON y")
    bc = natural(table("b"), table("c"))
    assert q.from_items == (
        A.Join("LEFT", A.Join("INNER", table("a"), bc, I("x")), A.FromExpr(I("d"), "dd"), I("y")),)


# ----------------------------------------------------------------------------- other clauses


def test_let_where_group_having():
    q = parse_query("SELECT k, COUNT(*) AS n FROM t LET x = t.a + 1, y = x * 2 WHERE y > 3 "
                    "GROUP BY t.k AS k, x GROUP AS g HAVING COUNT(*) > 1")
    assert q == select(
        item(I("k")), item(A.FunctionCall("COUNT", (), star=True), "n"),
        from_=(table("t"),),
        lets=(A.LetBinding("x", op("+", path("t", "a"), num(1))),
              A.LetBinding("y", op("*", I("x"), num(2)))),
        where=op(">", I("y"), num(3)),
        group_by=(A.GroupKey(path("t", "k"), "k"), A.GroupKey(I("x"))),
        group_as="g",
        having=op(">", A.FunctionCall("COUNT", (), star=True), num(1)))


def test_a_grouping_key_alias_may_omit_as():
    assert parse_query("SELECT k, j FROM t GROUP BY t.a k, t.b AS j") == \
        parse_query("SELECT k, j FROM t GROUP BY t.a AS k, t.b AS j")


def test_group_as_and_into_mean_the_same():
    a = parse_query("SELECT VALUE g FROM t GROUP BY t.k GROUP AS g")
    b = parse_query("SELECT VALUE g FROM t GROUP BY t.k INTO g")
    assert a == b and a.group_as == "g"


def test_union_all_is_left_associative():
    q = parse_query("SELECT VALUE 1 UNION ALL SELECT VALUE 2 union all SELECT VALUE 3")
    one, two, three = (select(value=num(i)) for i in (1, 2, 3))
    assert q == A.UnionAll(A.UnionAll(one, two), three)


def test_union_all_inside_a_subquery():
    q = parse_query("SELECT * FROM (SELECT VALUE a FROM t UNION ALL SELECT VALUE b FROM u) AS x")
    left = select(value=I("a"), from_=(table("t"),))
    right = select(value=I("b"), from_=(table("u"),))
    assert q.from_items == (A.FromExpr(A.Subquery(A.UnionAll(left, right)), "x"),)


# ----------------------------------------------------------------------------- AsterixDB's clause orders


@pytest.mark.parametrize("from_first, select_first", [
    ("FROM t SELECT t.a", "SELECT t.a FROM t"),
    ("from t AS x where x.a > 1 select distinct x.a, x.b AS bee",
     "SELECT DISTINCT x.a, x.b AS bee FROM t AS x WHERE x.a > 1"),
    ("FROM t x JOIN u y ON x.id = y.id LEFT JOIN w z ON z.k = y.k SELECT VALUE {'a': x.a, 'c': z.c}",
     "SELECT VALUE {'a': x.a, 'c': z.c} FROM t x JOIN u y ON x.id = y.id LEFT JOIN w z ON z.k = y.k"),
    ("FROM t x, x.items i LET n = i.qty * 2 WHERE n > 3 GROUP BY x.id GROUP AS g "
     "HAVING COUNT(*) > 1 SELECT x.id, COUNT(*) AS c",
     "SELECT x.id, COUNT(*) AS c FROM t x, x.items i LET n = i.qty * 2 WHERE n > 3 GROUP BY x.id "
     "GROUP AS g HAVING COUNT(*) > 1"),
    ("FROM t UNNEST t.tags AS tag SELECT *", "SELECT * FROM t UNNEST t.tags AS tag"),
    # inside subqueries, IN, EXISTS and UNION ALL branches
    ("SELECT t.a, (FROM u WHERE u.k = t.k SELECT VALUE u.b) AS bs FROM t",
     "SELECT t.a, (SELECT VALUE u.b FROM u WHERE u.k = t.k) AS bs FROM t"),
    ("FROM (FROM u SELECT u.k, u.b) AS s SELECT s.k",
     "SELECT s.k FROM (SELECT u.k, u.b FROM u) AS s"),
    ("FROM t WHERE t.k IN (FROM u SELECT VALUE u.k) AND EXISTS (FROM w SELECT 1) SELECT t.a",
     "SELECT t.a FROM t WHERE t.k IN (SELECT VALUE u.k FROM u) AND EXISTS (SELECT 1 FROM w)"),
    ("FROM t SELECT VALUE t.a UNION ALL SELECT VALUE u.b FROM u UNION ALL FROM w SELECT VALUE w.c",
     "SELECT VALUE t.a FROM t UNION ALL SELECT VALUE u.b FROM u UNION ALL SELECT VALUE w.c FROM w"),
])
def test_from_first_blocks_mean_their_select_first_spelling(from_first, select_first):
    assert parse_query(from_first) == parse_query(select_first)


@pytest.mark.parametrize("filtered, plain", [
    ("SELECT COUNT(*) FILTER (WHERE t.a > 1) AS n FROM t", "SELECT COUNT(CASE WHEN t.a > 1 THEN 1 END) AS n FROM t"),
    ("SELECT sum(DISTINCT t.b) filter(where t.c) AS s FROM t", "SELECT SUM(DISTINCT CASE WHEN t.c THEN t.b END) AS s FROM t"),
    ("SELECT t.filter, filter(t.a) AS filter FROM t", "SELECT t.filter, filter(t.a) AS filter FROM t"),  # not reserved
])
def test_an_aggregates_filter_is_a_case_of_its_argument(filtered, plain):
    assert parse_query(filtered) == parse_query(plain)


def test_any_is_some_before_a_variable_and_in():
    assert parse_query("SELECT VALUE t FROM t WHERE ANY x IN t.xs SATISFIES x > 1 END") == \
        parse_query("SELECT VALUE t FROM t WHERE SOME x IN t.xs SATISFIES x > 1")
    assert parse_query("SELECT t.any, any AS a FROM t") == parse_query("SELECT t.`any`, `any` AS a FROM t")


def test_filter_applies_to_aggregates_only():
    e = syntax_error("SELECT UPPER(t.a) FILTER (WHERE t.b) AS u FROM t")
    assert (e.span.line, e.span.column) == (1, 8)
    assert e.message == "FILTER (WHERE …) applies to an aggregate of one argument, not UPPER"


def test_from_first_view_and_positions():
    v = parse_view("CREATE VIEW v AS\nFROM t\nWHERE t.a > 1\nSELECT t.a;")
    assert v.query == select(item(path("t", "a")), from_=(table("t"),), where=op(">", path("t", "a"), num(1)))
    assert (v.query.span.line, v.query.span.column, v.query.span.end_line) == (2, 1, 4)
    assert (v.query.items[0].span.line, v.query.items[0].span.column) == (4, 8)


def test_from_first_block_must_end_with_select():
    e = syntax_error("FROM t WHERE t.a > 1")
    assert (e.span.line, e.span.column) == (1, 21)
    assert e.message.startswith("unexpected end of input; expected ")
    assert "'SELECT'" in e.message and "'GROUP'" in e.message


def test_let_clauses_after_from_and_after_group_by():
    q = parse_query("FROM t LET a = t.x, b = a + 1 LET c = b * 2 WHERE c > 0 "
                    "GROUP BY t.k AS k GROUP AS g LET n = COUNT(*) LET m = n + 1 HAVING m > 2 "
                    "SELECT k, n, m")
    count = A.FunctionCall("COUNT", (), star=True)
    assert q == select(
        item(I("k")), item(I("n")), item(I("m")),
        from_=(table("t"),),
        lets=(A.LetBinding("a", path("t", "x")), A.LetBinding("b", op("+", I("a"), num(1))),
              A.LetBinding("c", op("*", I("b"), num(2)))),
        where=op(">", I("c"), num(0)),
        group_by=(A.GroupKey(path("t", "k"), "k"),), group_as="g",
        group_lets=(A.LetBinding("n", count), A.LetBinding("m", op("+", I("n"), num(1)))),
        having=op(">", I("m"), num(2)))
    assert parse_query("SELECT k, n FROM t GROUP BY t.k AS k LET n = COUNT(*)") == select(
        item(I("k")), item(I("n")), from_=(table("t"),), group_by=(A.GroupKey(path("t", "k"), "k"),),
        group_lets=(A.LetBinding("n", count),))


def test_with_in_a_block_is_let():
    assert parse_query("FROM t WITH a AS t.x, b AS a + 1 SELECT b") == \
        parse_query("FROM t LET a = t.x, b = a + 1 SELECT b")


def test_cross_join_is_an_inner_join_without_condition():
    q = parse_query("SELECT * FROM a CROSS JOIN b AS bb cross join c")
    inner = A.Join("INNER", table("a"), table("b", "bb"), None)
    assert q.from_items == (A.Join("INNER", inner, table("c"), None),)
    q = parse_query("FROM (SELECT VALUE x FROM t x) AS s CROSS JOIN (SELECT VALUE y FROM u y) AS r SELECT *")
    (join,) = q.from_items
    assert isinstance(join.left.expr, A.Subquery) and join.right.alias == "r" and join.condition is None


# ----------------------------------------------------------------------------- IN over collections


def test_in_over_an_array_or_bag_constructor_is_an_in_list():
    assert expr("x IN [1, 2, 3]") == expr("x IN (1, 2, 3)")
    assert expr("x NOT IN {{'a', y}}") == A.InList(I("x"), (s("a"), I("y")), negated=True)


def in_scan(operand: A.Expr, collection: A.Expr, negated: bool = False) -> A.InSubquery:
    """``operand [NOT] IN (SELECT VALUE v FROM collection AS v)``: what ``IN collection`` means."""
    v = A.Identifier("$in")
    return A.InSubquery(operand, select(value=v, from_=(A.FromExpr(collection, "$in"),)), negated)


@pytest.mark.parametrize("text, expected", [
    ("x IN coll", in_scan(I("x"), I("coll"))),
    ("i.pid NOT IN dup", in_scan(path("i", "pid"), I("dup"), negated=True)),
    ("x IN u.lists[0]", in_scan(I("x"), A.IndexAccess(path("u", "lists"), num(0)))),
    ("x IN array_distinct(u.l)", in_scan(I("x"), A.FunctionCall("ARRAY_DISTINCT", (path("u", "l"),)))),
    ("x IN []", in_scan(I("x"), A.ArrayConstructor(()))),
    ("x + 1 IN coll AND y", op("AND", in_scan(op("+", I("x"), num(1)), I("coll")), I("y"))),
])
def test_in_over_a_collection_scans_it(text, expected):
    assert expr(text) == expected


def test_in_over_a_collection_keeps_positions():
    e = expr("x IN\n  u.l")
    assert (e.span.line, e.span.column, e.span.end_line, e.span.end_column) == (1, 14, 2, 6)
    assert [n for n in e.walk() if n.span is None] == []
    scan = e.query.from_items[0]
    assert (scan.span.line, scan.span.column) == (2, 3)


# ----------------------------------------------------------------------------- LET / WITH before a query


def test_with_is_inlined_into_from_where_and_select():
    q = parse_query("WITH cheap AS (SELECT VALUE p FROM parts p WHERE p.price < 10), lim AS 5 "
                    "FROM cheap JOIN devices d ON d.pid = cheap.pid WHERE cheap.price < lim SELECT d.did, lim")
    assert q == parse_query(
        "FROM (SELECT VALUE p FROM parts p WHERE p.price < 10) AS cheap JOIN devices d ON d.pid = cheap.pid "
        "WHERE cheap.price < 5 SELECT d.did, 5 AS lim")


def test_with_bindings_see_earlier_ones_and_apply_to_every_union_branch():
    q = parse_query("LET a = 1, b = a + 1 SELECT VALUE b UNION ALL SELECT VALUE a FROM t")
    assert q == parse_query("SELECT VALUE 1 + 1 UNION ALL SELECT VALUE 1 FROM t")
    assert parse_query("WITH a AS 1 WITH b AS a SELECT b") == parse_query("SELECT 1 AS b")


def test_with_is_not_inlined_where_a_variable_hides_it():
    q = parse_query("WITH x AS [1, 2] SELECT x, y.x FROM t AS x, x.l AS y GROUP BY x.k AS k LET x2 = k")
    assert q == parse_query("SELECT x, y.x FROM t AS x, x.l AS y GROUP BY x.k AS k LET x2 = k")
    # a FROM item without alias binds its name; a LET, a grouping key and GROUP AS hide it too
    assert parse_query("WITH t AS [1] SELECT VALUE t FROM t") == parse_query(
        "SELECT VALUE t FROM [1] AS t")
    assert parse_query("WITH n AS 7 FROM u LET n = u.a SELECT VALUE n") == parse_query(
        "FROM u LET n = u.a SELECT VALUE n")
    assert parse_query("WITH g AS 7 FROM u GROUP BY u.a AS g SELECT VALUE g") == parse_query(
        "FROM u GROUP BY u.a AS g SELECT VALUE g")
    # inside a subquery that does not rebind it, it is inlined
    assert parse_query("WITH n AS 7 SELECT VALUE (SELECT VALUE n + u.a FROM u) FROM t") == parse_query(
        "SELECT VALUE (SELECT VALUE 7 + u.a FROM u) FROM t")


def test_with_keeps_the_names_it_gave_to_projections_and_keys():
    assert parse_query("WITH k AS 1 FROM t GROUP BY k SELECT k") == parse_query(
        "FROM t GROUP BY 1 AS k SELECT k")


def test_with_inside_a_subquery():
    q = parse_query("SELECT t.a FROM t WHERE t.b IN (WITH lo AS 3 FROM u WHERE u.c > lo SELECT VALUE u.b)")
    assert q == parse_query("SELECT t.a FROM t WHERE t.b IN (FROM u WHERE u.c > 3 SELECT VALUE u.b)")


def test_with_marks_the_names_a_variable_hides_where_it_is_inlined_as_tables():
    q = parse_query("WITH c AS (SELECT VALUE p FROM parts p) FROM devices AS parts, c SELECT *")
    inlined = q.from_items[1]
    assert inlined.alias == "c" and inlined.expr.query.from_items[0].expr == A.Identifier("parts", table=True)
    assert q.from_items[0].expr == I("devices")


def test_with_inlined_nodes_keep_their_positions():
    q = parse_query("WITH lo AS 3\nFROM u WHERE u.c > lo SELECT u.a")
    three = q.where.right
    assert three == num(3) and (three.span.line, three.span.column) == (1, 12)
    assert [n for n in q.walk() if n.span is None] == []


# ----------------------------------------------------------------------------- ORDER BY in subqueries


def test_order_by_in_a_subquery_is_recorded_on_the_subquery():
    q = parse_query("SELECT s.a FROM (SELECT VALUE x FROM t x ORDER BY x.a DESC, x.b asc) AS s")
    sub = q.from_items[0].expr
    keys = (A.OrderKey(path("x", "a"), True), A.OrderKey(path("x", "b"), False))
    assert sub == A.Subquery(select(value=I("x"), from_=(table("t", "x"),)), keys)
    assert sub.ordered and sub.sequenced
    plain = parse_query("SELECT VALUE (SELECT VALUE 1 FROM t)").value
    assert plain.ordered is False and plain.sequenced is False


@pytest.mark.parametrize("tail, order, limit, offset", [
    ("ORDER BY x LIMIT 3", ("x",), 3, None),
    ("ORDER BY x LIMIT 3 OFFSET 2", ("x",), 3, 2),
    ("LIMIT 1", (), 1, None),
    ("OFFSET 4", (), None, 4),
])
def test_limit_and_offset_end_a_subquery(tail, order, limit, offset):
    sub = parse_query(f"SELECT VALUE (FROM t SELECT VALUE x {tail})").value
    assert [k.expr for k in sub.order] == [I(n) for n in order]
    assert (sub.limit, sub.offset) == (num(limit) if limit is not None else None,
                                       num(offset) if offset is not None else None)
    assert sub.sequenced and sub.ordered == bool(order)


def test_in_and_exists_ignore_the_order_of_their_subquery():
    assert parse_query("SELECT 1 FROM t WHERE t.a IN (SELECT VALUE u.a FROM u ORDER BY u.a) "
                       "AND EXISTS (SELECT 1 FROM w ORDER BY w.z DESC)") == \
        parse_query("SELECT 1 FROM t WHERE t.a IN (SELECT VALUE u.a FROM u) AND EXISTS (SELECT 1 FROM w)")


@pytest.mark.parametrize("text, column, message", [
    ("SELECT 1 FROM t WHERE t.a IN (SELECT VALUE a FROM u LIMIT 3)", 53, "LIMIT is not supported here"),
    ("SELECT 1 FROM t WHERE EXISTS (SELECT a FROM u ORDER BY a OFFSET 3)", 58, "OFFSET is not supported here"),
    ("SELECT * FROM (SELECT a FROM t LIMIT 3 ORDER BY a) AS s", 40, "unexpected 'ORDER'"),
    ("SELECT * FROM (SELECT a FROM t ORDER BY a upward) AS s", 43,
     "unexpected 'upward' after an ORDER BY key; expected ASC, DESC, ',' or ')'"),
])
def test_limit_in_in_and_exists_and_bad_order_directions_are_refused(text, column, message):
    e = syntax_error(text)
    assert e.message.startswith(message)
    assert (e.span.line, e.span.column) == (1, column)


# ----------------------------------------------------------------------------- subqueries


def test_subqueries_in_where():
    q = parse_query("SELECT * FROM t WHERE EXISTS (SELECT 1 FROM u) AND NOT EXISTS (SELECT 2) "
                    "AND t.a IN (SELECT VALUE b FROM u) AND t.c NOT IN (SELECT VALUE d FROM v)")
    e1 = A.Exists(select(item(num(1)), from_=(table("u"),)))
    e2 = A.Exists(select(item(num(2))), negated=True)
    in1 = A.InSubquery(path("t", "a"), select(value=I("b"), from_=(table("u"),)))
    in2 = A.InSubquery(path("t", "c"), select(value=I("d"), from_=(table("v"),)), negated=True)
    assert q.where == op("AND", op("AND", op("AND", e1, e2), in1), in2)


def test_not_over_exists_folds_but_other_nots_stay():
    assert expr("NOT (EXISTS (SELECT 1))") == A.Exists(select(item(num(1))), negated=True)
    assert expr("NOT NOT EXISTS (SELECT 1)") == A.Exists(select(item(num(1))))
    assert expr("NOT a") == A.UnaryOp("NOT", I("a"))


def test_scalar_subquery_in_expression():
    assert expr("1 + (SELECT VALUE COUNT(*) FROM t)[0]") == op(
        "+", num(1), A.IndexAccess(A.Subquery(select(
            value=A.FunctionCall("COUNT", (), star=True), from_=(table("t"),))), num(0)))


# ----------------------------------------------------------------------------- functions, paths, constructors


def test_function_calls():
    assert expr("lower(u.name)") == A.FunctionCall("LOWER", (path("u", "name"),))
    assert expr("Count(*)") == A.FunctionCall("COUNT", (), star=True)
    assert expr("count(DISTINCT x)") == A.FunctionCall("COUNT", (I("x"),), distinct=True)
    assert expr("now()") == A.FunctionCall("NOW", ())
    assert expr("coalesce(a, b, 1)") == A.FunctionCall("COALESCE", (I("a"), I("b"), num(1)))


@pytest.mark.parametrize("name", sorted(A.AGGREGATES | A.COLLECTION_AGGREGATES))
def test_aggregates_are_ordinary_function_calls(name):
    assert expr(f"{name.lower()}(g.x)") == A.FunctionCall(name, (path("g", "x"),))


def test_paths_and_indexes():
    assert expr("a.b.c") == path("a", "b", "c")
    assert expr("a[1].b[i + 1]") == A.IndexAccess(
        A.FieldAccess(A.IndexAccess(I("a"), num(1)), "b"), op("+", I("i"), num(1)))


def test_keywords_are_field_names_after_a_dot_and_before_a_colon():
    assert expr("u.value.Select") == path("u", "value", "Select")
    assert expr("{value: 1, end: 2}") == A.TupleConstructor((("value", num(1)), ("end", num(2))))


def test_constructors():
    assert expr('{"k": 1, k2: a, `k 3`: [1, 2]}') == A.TupleConstructor((
        ("k", num(1)), ("k2", I("a")), ("k 3", A.ArrayConstructor((num(1), num(2)))),))
    assert expr("{{ 1, 'x' }}") == A.BagConstructor((num(1), s("x")))
    assert expr('{{{"a": 1}}}') == A.BagConstructor((A.TupleConstructor((("a", num(1)),)),))
    assert expr("{{ {{1}} }}") == A.BagConstructor((A.BagConstructor((num(1),)),))
    assert expr("{}") == A.TupleConstructor(())
    assert expr("{{}}") == A.BagConstructor(())
    assert expr("[]") == A.ArrayConstructor(())


def test_case_expressions():
    assert expr("CASE WHEN a > 1 THEN 'big' WHEN a > 0 THEN 'small' ELSE 'none' END") == A.CaseWhen(
        None, ((op(">", I("a"), num(1)), s("big")), (op(">", I("a"), num(0)), s("small"))), s("none"))
    assert expr("case x when 1 then 'one' end") == A.CaseWhen(I("x"), ((num(1), s("one")),), None)


# ----------------------------------------------------------------------------- literals


@pytest.mark.parametrize("text, value, kind", [
    ("42", 42, "number"),
    ("4.5", 4.5, "number"),
    ("1e3", 1000.0, "number"),
    ("2.5E-1", 0.25, "number"),
    (".5", 0.5, "number"),
    ("-3", -3, "number"),
    ("'a'", "a", "string"),
    ('"a"', "a", "string"),
    ("'it''s'", "it's", "string"),
    ('"say ""hi"""', 'say "hi"', "string"),
    (r"'a\nb\t\\\'\"'", "a\nb\t\\'\"", "string"),
    (r"'\u00e9'", "é", "string"),
    ("'--not a comment'", "--not a comment", "string"),
    ("'/* nor this */'", "/* nor this */", "string"),
    ("''", "", "string"),
    ("true", True, "bool"),
    ("FALSE", False, "bool"),
    ("null", None, "null"),
    ("MISSING", None, "missing"),
])
def test_literals(text, value, kind):
    lit = expr(text)
    assert lit == A.Literal(value, kind)
    assert type(lit.value) is type(value)


# ----------------------------------------------------------------------------- precedence


@pytest.mark.parametrize("text, expected", [
    ("a OR b AND c", op("OR", I("a"), op("AND", I("b"), I("c")))),
    ("a AND b OR c", op("OR", op("AND", I("a"), I("b")), I("c"))),
    ("NOT a AND b", op("AND", A.UnaryOp("NOT", I("a")), I("b"))),
    ("NOT a = b", A.UnaryOp("NOT", op("=", I("a"), I("b")))),
    ("a = b AND c < d", op("AND", op("=", I("a"), I("b")), op("<", I("c"), I("d")))),
    ("a || b = c", op("=", op("||", I("a"), I("b")), I("c"))),
    ("a + b || c", op("||", op("+", I("a"), I("b")), I("c"))),
    ("a + b * c", op("+", I("a"), op("*", I("b"), I("c")))),
    ("a - b - c", op("-", op("-", I("a"), I("b")), I("c"))),
    ("a / b % c", op("%", op("/", I("a"), I("b")), I("c"))),
    ("-a * b", op("*", A.UnaryOp("-", I("a")), I("b"))),
    ("-a.b[0]", A.UnaryOp("-", A.IndexAccess(path("a", "b"), num(0)))),
    ("+a", A.UnaryOp("+", I("a"))),
    ("(a OR b) AND c", op("AND", op("OR", I("a"), I("b")), I("c"))),
    ("(a + b) * c", op("*", op("+", I("a"), I("b")), I("c"))),
    ("a BETWEEN 1 AND 2 AND b", op("AND", A.Between(I("a"), num(1), num(2)), I("b"))),
    ("a NOT BETWEEN b + 1 AND c * 2 OR d",
     op("OR", A.Between(I("a"), op("+", I("b"), num(1)), op("*", I("c"), num(2)), negated=True), I("d"))),
    ("x AND a BETWEEN 1 AND 2", op("AND", I("x"), A.Between(I("a"), num(1), num(2)))),
    ("NOT a BETWEEN 1 AND 2", A.UnaryOp("NOT", A.Between(I("a"), num(1), num(2)))),
    ("a IS NOT NULL AND b IS MISSING OR c IS unknown",
     op("OR", op("AND", A.IsTest(I("a"), "NULL", negated=True), A.IsTest(I("b"), "MISSING")),
        A.IsTest(I("c"), "UNKNOWN"))),
    ("a + 1 IS NULL", A.IsTest(op("+", I("a"), num(1)), "NULL")),
    # IS [NOT] KNOWN is IS NOT UNKNOWN (IS UNKNOWN); KNOWN is not reserved
    ("a IS KNOWN AND b IS NOT known OR known", op("OR", op("AND", A.IsTest(I("a"), "UNKNOWN", negated=True),
                                                          A.IsTest(I("b"), "UNKNOWN")), I("known"))),
    ("a LIKE 'x%' AND b NOT LIKE 'y'",
     op("AND", A.Like(I("a"), s("x%")), A.Like(I("b"), s("y"), negated=True))),
    ("a IN (1, 2) OR a NOT IN (3)",
     op("OR", A.InList(I("a"), (num(1), num(2))), A.InList(I("a"), (num(3),), negated=True))),
    ("a || 'x' IN ('ax')", A.InList(op("||", I("a"), s("x")), (s("ax"),))),
    ("a == b", op("=", I("a"), I("b"))),
    ("a <> b", op("!=", I("a"), I("b"))),
    ("a != b", op("!=", I("a"), I("b"))),
    ("a <= b", op("<=", I("a"), I("b"))),
    ("a >= b", op(">=", I("a"), I("b"))),
])
def test_precedence(text, expected):
    assert expr(text) == expected


def test_is_needs_a_test_it_knows():
    e = syntax_error("SELECT VALUE a IS NOTHING")
    assert (e.span.line, e.span.column) == (1, 19)
    assert e.message == "unexpected 'NOTHING' after IS: expected NULL, MISSING, UNKNOWN or KNOWN"


def test_comparisons_do_not_chain():
    e = syntax_error("SELECT VALUE a = b = c")
    assert (e.span.line, e.span.column) == (1, 20)
    assert e.message.startswith("unexpected '='; expected ")


def test_long_boolean_chains_do_not_hit_the_recursion_limit():
    q = parse_query("SELECT * FROM t WHERE " + " OR ".join(f"x = {i}" for i in range(1500)))
    assert isinstance(q.where, A.BinaryOp) and q.where.right == op("=", I("x"), num(1499))


# ----------------------------------------------------------------------------- lexical rules


def test_comments_are_ignored():
    text = """
        -- a view
        CREATE VIEW v AS /* block
        comment */ SELECT a -- trailing
        FROM t /**/ WHERE a > 1 // to the end of the line
        /* last */
    """
    assert parse_view(text) == parse_view("CREATE VIEW v AS SELECT a FROM t WHERE a > 1")


def test_left_outer_unnest():
    outer = parse_query("SELECT * FROM a LEFT OUTER UNNEST a.l AS x LEFT UNNEST x.m y UNNEST y.n AS z")
    assert [(f.alias, f.unnest, f.outer) for f in outer.from_items] == [
        (None, False, False), ("x", True, True), ("y", True, True), ("z", True, False)]


def test_a_slash_alone_is_division():
    q = parse_query("SELECT a / b AS r FROM t")
    assert q.items[0].expr == op("/", I("a"), I("b"))


def test_backquoted_identifiers():
    q = parse_query("SELECT `weird name`.`x``y` AS `the select`, `SELECT` FROM `my table` `weird name`")
    assert q == select(item(A.FieldAccess(I("weird name"), "x`y"), "the select"), item(I("SELECT")),
                       from_=(table("my table", "weird name"),))


def test_keywords_are_case_insensitive():
    lower = parse_query("select distinct a as x from t natural left outer join u "
                        "where a is not null and b between 1 and 2 group by a group as g having count(*) > 0")
    upper = parse_query("SELECT DISTINCT a AS x FROM t NATURAL LEFT OUTER JOIN u "
                        "WHERE a IS NOT NULL AND b BETWEEN 1 AND 2 GROUP BY a GROUP AS g HAVING COUNT(*) > 0")
    assert lower == upper


def test_identifiers_are_case_sensitive():
    q = parse_query("SELECT Users.Name, users.name FROM Users, users")
    assert q.items == (item(path("Users", "Name")), item(path("users", "name")))
    assert q.from_items == (table("Users"), table("users"))
    assert parse_query("SELECT a FROM T") != parse_query("SELECT a FROM t")


def test_every_keyword_is_reserved_but_usable_backquoted():
    for kw in sorted(KEYWORDS):
        with pytest.raises(SqlppSyntaxError):
            parse_query(f"SELECT a AS {kw.lower()}")
        assert parse_query(f"SELECT VALUE `{kw.lower()}`") == select(value=I(kw.lower())), kw


# ----------------------------------------------------------------------------- spans


def test_every_node_has_a_span():
    v = parse_view("CREATE VIEW v AS SELECT DISTINCT u.a.*, {'k': [1]}, CASE WHEN x THEN 1 END AS c "
                   "FROM users u AT i JOIN (SELECT * FROM w) AS s ON u.id = s.id UNNEST u.t tt "
                   "LET z = -u.q WHERE z NOT IN (1) AND NOT EXISTS (SELECT 1) GROUP BY u.g AS g INTO grp "
                   "HAVING COUNT(DISTINCT u.b) > 1 UNION ALL SELECT VALUE {{1}}")
    missing = [n for n in v.walk() if n.span is None]
    assert missing == []


def test_spans_point_at_the_source():
    q = parse_query("SELECT a\nFROM t\nWHERE x.y >= 10")
    assert q.span == Span(1, 1, 3, 16)
    cond = q.where
    assert (cond.span.line, cond.span.column, cond.span.end_line, cond.span.end_column) == (3, 7, 3, 16)
    assert (cond.left.span.line, cond.left.span.column) == (3, 7)
    assert (cond.right.span.line, cond.right.span.column, cond.right.span.end_column) == (3, 14, 16)
    assert (q.from_items[0].span.line, q.from_items[0].span.column) == (2, 6)


def test_spans_do_not_affect_equality():
    assert parse_query("SELECT a FROM t") == parse_query("SELECT\n   a\n\nFROM    t  ")


# ----------------------------------------------------------------------------- syntax errors


@pytest.mark.parametrize("text, line, column, message", [
    ("SELECT FROM t", 1, 8, "unexpected 'FROM'; expected an expression or '*'"),
    ("SELECT a, FROM t", 1, 11, "unexpected 'FROM'; expected an expression or '*'"),
    ("SELECT a\nFROM t\nWHERE a = = 1", 3, 11, "unexpected '='; expected an expression"),
    ("SELECT a FROM", 1, 14, "unexpected end of input; expected an expression"),
    ("SELECT a FROM t GROUP a", 1, 23, "unexpected 'a'; expected 'BY'"),
    ("SELECT a FROM t WHERE x IN ()", 1, 29, "unexpected ')'; expected a query or an expression"),
    ("SELECT a FROM t; SELECT b", 1, 18, "unexpected 'SELECT'; expected end of input"),
    ("SELECT f(a,", 1, 12, "unexpected end of input; expected an expression"),
    ("SELECT a FROM t WHERE x y", 1, 25,
     "unexpected 'y'; expected an operator, 'GROUP', 'HAVING', 'UNION', ';', end of input or '('"),
    ("SELECT a AS value FROM t", 1, 13,
     "unexpected 'value'; expected a name (VALUE is a reserved word; write `value` to use it as a name)"),
    ("SELECT a FROM t WHERE value = 1", 1, 23,
     "unexpected 'value'; expected an expression (VALUE is a reserved word; write `value` to use it as a name)"),
    ("SELECT 'abc", 1, 8, "unterminated string: no closing '"),
    ('SELECT a FROM t WHERE b = "x', 1, 27, 'unterminated string: no closing "'),
    ("SELECT `abc FROM t", 1, 8, "unterminated quoted identifier: no closing `"),
    ("SELECT a /* no end\nFROM t", 1, 10, "unterminated comment: '/*' has no closing '*/'"),
    ("SELECT a\n  # b", 2, 3, "unexpected character '#'"),
    ("", 1, 1, "unexpected end of input; expected a query or an expression"),
    ("SELECT SUM(*) FROM t", 1, 8, "'*' is only allowed as the argument of COUNT, not SUM"),
    (r"SELECT 'a\qb'", 1, 8, "unknown escape sequence '\\q'"),
    (r"SELECT '\u00'", 1, 8, r"bad escape sequence: \u needs 4 hex digits"),
    ('SELECT {"a": 1, a: 2}', 1, 17, "duplicate field name 'a' in tuple constructor"),
    ("SELECT `` FROM t", 1, 8, "empty quoted identifier"),
    ("SELECT * FROM a RIGHT JOIN b ON x", 1, 17,
     "unexpected 'RIGHT': RIGHT JOIN is not supported; use [INNER] JOIN, LEFT [OUTER] JOIN or CROSS JOIN"),
    ("SELECT * FROM a full outer JOIN b ON x", 1, 17,
     "unexpected 'full': FULL JOIN is not supported; use [INNER] JOIN, LEFT [OUTER] JOIN or CROSS JOIN"),
    ("SELECT * FROM a LEFT OUTER UNNEST", 1, 34, "unexpected end of input; expected an expression"),
    ("SELECT a FROM t UNION SELECT b FROM u", 1, 17,
     "UNION without ALL is not supported; only UNION ALL is (wrap it in SELECT DISTINCT to remove duplicates)"),
    ("SELECT a FROM t INTERSECT SELECT b FROM u", 1, 17, "INTERSECT is not supported; only UNION ALL is"),
    ("SELECT a FROM t\nEXCEPT ALL SELECT b FROM u", 2, 1, "EXCEPT is not supported; only UNION ALL is"),
    ("SELECT a FROM t ORDER BY a", 1, 17,
     "ORDER BY is not supported in an idivm query: results are unordered bags; order when reading it"),
])
def test_syntax_errors(text, line, column, message):
    e = syntax_error(text)
    assert e.message == message
    assert (e.span.line, e.span.column) == (line, column)
    assert e.source == text


def test_error_renders_file_line_column_and_caret():
    e = syntax_error("SELECT a\nFROM t\nWHERE a = = 1", filename="views/v.sqlpp")
    assert e.filename == "views/v.sqlpp"
    assert str(e) == ("views/v.sqlpp:3:11: unexpected '='; expected an expression\n"
                      "  WHERE a = = 1\n"
                      "            ^")


@pytest.mark.parametrize("text, keyword, column", [
    ("CREATE VIEW v AS SELECT a FROM t ORDER BY a DESC", "ORDER BY", 34),
    ("CREATE VIEW v AS SELECT a FROM t WHERE a > 1 order by a", "ORDER BY", 46),
    ("CREATE VIEW v AS SELECT a FROM t LIMIT 10", "LIMIT", 34),
    ("CREATE VIEW v AS SELECT a FROM t OFFSET 10", "OFFSET", 34),
    ("CREATE VIEW v AS SELECT VALUE 1 UNION ALL SELECT VALUE 2 ORDER BY 1", "ORDER BY", 58),
    ("CREATE VIEW v AS FROM t SELECT a ORDER BY a", "ORDER BY", 34),
])
def test_order_by_and_limit_are_rejected_in_views(text, keyword, column):
    e = syntax_error(text, view=True)
    assert e.message.startswith(f"{keyword} is not allowed in a view definition: a view is an unordered bag;")
    assert (e.span.line, e.span.column) == (1, column)


def test_order_by_message_in_full():
    e = syntax_error("CREATE VIEW v AS\nSELECT a FROM t\n  ORDER BY a", view=True)
    assert str(e) == ("3:3: ORDER BY is not allowed in a view definition: a view is an unordered bag; "
                      "order when reading it\n"
                      "    ORDER BY a\n"
                      "    ^")


def test_order_as_a_misplaced_word_gets_the_generic_message():
    e = syntax_error("SELECT order FROM t")
    assert e.message.startswith("unexpected 'order'; expected an expression")


def test_conflict_check_would_notice_a_conflict(tmp_path, monkeypatch):
    from idivm.sqlpp import parser

    bad = tmp_path / "bad.lark"
    bad.write_text('start_view: e\nstart_query: e\ne: e "+" e | NAME\nNAME: /[a-z]+/\n'
                   'UNTERMINATED_STRING: "\'"\nUNTERMINATED_COMMENT: "/*"\n')
    monkeypatch.setattr(parser, "read_grammar", lambda name, beside: bad.read_text())
    assert any("Shift/Reduce" in c for c in grammar_conflicts())
