"""Operands of the wrong type are refused at define time with a one-line SemanticError naming the
expression and its position (values of different types in one place make a union of them:
tests/test_mixed_types.py); errors Spark raises
while a view is defined, maintained, verified or shown reach the user as our errors, never raw.

Each refused view below reached Spark before the type check and failed there with a raw
``AnalysisException`` (``DATATYPE_MISMATCH.DATA_DIFF_TYPES``, ``FIELD_NOT_FOUND``) or a
``NumberFormatException`` (``CAST_INVALID_INPUT``: Spark cast the string to a number).  The
views that mix types Spark and SQL++ both accept (an int and a double, a NULL and anything, a date
and a string compared) are still defined, and their values checked by hand.
"""

from __future__ import annotations

import json

import pytest

from idivm import cli
from idivm import types as T
from idivm.algebra.builder import build_view
from idivm.algebra.expressions import ABSENT
from idivm.errors import DataError, SemanticError, UnsupportedError
from idivm.sqlpp import parse_view

TABLES = {
    "parts": T.TupleType((("pid", T.INT), ("price", T.DOUBLE), ("kind", T.STRING), ("n", T.INT),
                          ("sold", T.ScalarType("date")), ("dims", T.TupleType((("w", T.INT),))),
                          ("label", T.TupleType((("text", T.STRING),))),
                          ("tags", T.CollectionType(T.STRING)))),
    "other": T.TupleType((("oid", T.INT), ("name", T.STRING))),
    "labels": T.TupleType((("pid", T.STRING), ("text", T.STRING))),
}

# (id, query after "CREATE VIEW v AS\n", line and column of the offending expression, message part)
MIXED = [
    ("in_list", "SELECT p.pid FROM parts p WHERE p.n IN (1, 'two')", 1, 33,
     "it compares int with string"),
    ("arithmetic_on_string", "SELECT p.pid, p.price + p.kind AS x FROM parts p", 1, 15,
     "type mismatch in p.price + p.kind: argument 2 is string, not a number"),
    ("negated_string", "SELECT p.pid, -p.kind AS x FROM parts p", 1, 15, "its argument is string, not a number"),
    ("and_of_numbers", "SELECT p.pid, p.n AND p.pid AS b FROM parts p", 1, 15, "argument 1 is int, not a boolean"),
    ("where_number", "SELECT p.pid FROM parts p WHERE p.n > 1 AND p.pid", 1, 45,
     "type mismatch: the condition p.pid is int, not a boolean"),
    ("sum_of_strings", "SELECT p.n, SUM(p.kind) AS s FROM parts p GROUP BY p.n", 1, 13,
     "type mismatch in SUM(p.kind): its argument is string, not a number"),
    ("upper_of_number", "SELECT VALUE UPPER(p.n) FROM parts p", 1, 14, "its argument is int, not a string"),
]


@pytest.mark.parametrize("case_id, query, line, column, message", MIXED, ids=[m[0] for m in MIXED])
def test_mixed_types_are_refused_at_their_position(case_id, query, line, column, message):
    text = f"CREATE VIEW v AS\n{query}"
    with pytest.raises(SemanticError) as info:
        build_view(parse_view(text, "v.sqlpp"), TABLES)
    err = info.value.with_source(text, "v.sqlpp")
    assert message in err.message
    assert (err.span.line, err.span.column) == (line + 1, column), str(err)
    head, source_line, caret = str(err).split("\n")
    assert head == f"v.sqlpp:{line + 1}:{column}: {err.message}"
    assert source_line == "  " + text.splitlines()[line]
    assert caret == "  " + " " * (column - 1) + "^"


ACCEPTED = [
    ("SELECT VALUE CASE WHEN p.n > 2 THEN p.n ELSE p.price END FROM parts p", T.DOUBLE),
    ("SELECT VALUE CASE WHEN p.n > 2 THEN p.kind ELSE NULL END FROM parts p", T.STRING),
    ("SELECT VALUE [p.n, p.price, NULL] FROM parts p", T.CollectionType(T.DOUBLE, ordered=True)),
    ("SELECT VALUE COALESCE(p.n, 0.5) FROM parts p", T.DOUBLE),
    ("SELECT VALUE p.pid FROM parts p WHERE p.sold > '2020-01-01'", T.INT),
    ("SELECT VALUE p.n FROM parts p UNION ALL SELECT VALUE p.price FROM parts p", T.DOUBLE),
    ("SELECT VALUE [p.tags, {{'x'}}] FROM parts p",
     T.CollectionType(T.CollectionType(T.STRING), ordered=True)),
    ("SELECT VALUE p.kind || p.n FROM parts p", T.STRING),
    # values of different types in one place: a union of them (tests/test_mixed_types.py)
    ("SELECT VALUE CASE WHEN p.n > 2 THEN p.price ELSE p.kind END FROM parts p", T.UnionType((T.DOUBLE, T.STRING))),
    ("SELECT VALUE [p.price, p.kind] FROM parts p", T.CollectionType(T.UnionType((T.DOUBLE, T.STRING)), ordered=True)),
    ("SELECT VALUE COALESCE(p.price, p.kind) FROM parts p", T.UnionType((T.DOUBLE, T.STRING))),
    ("SELECT VALUE p.pid FROM parts p UNION ALL SELECT VALUE o.name FROM other o", T.UnionType((T.INT, T.STRING))),
    # records of other fields: one record of all their fields, each MISSING where a value lacks it
    ("SELECT VALUE [CASE WHEN p.n > 2 THEN p.dims ELSE p.label END] FROM parts p",
     T.CollectionType(T.TupleType((("w", T.INT), ("text", T.STRING), (ABSENT, T.CollectionType(T.STRING)))), True)),
    ("SELECT VALUE [{'a': p.n}, {'a': p.kind}] FROM parts p",
     T.CollectionType(T.TupleType((("a", T.UnionType((T.INT, T.STRING))),)), ordered=True)),
]


@pytest.mark.parametrize("query, values", ACCEPTED, ids=[str(i) for i in range(len(ACCEPTED))])
def test_types_that_unify_are_accepted(query, values):
    view = build_view(parse_view(f"CREATE VIEW v AS {query}"), TABLES)
    assert view.type.fields[0][1] == values


def test_unify_and_comparable():
    assert T.unify(T.INT, T.DOUBLE) == T.DOUBLE and T.unify(T.NULL, T.STRING) == T.STRING
    assert T.unify(T.INT, T.STRING) is None
    assert T.unify(T.TupleType((("a", T.INT),)), T.TupleType((("b", T.INT),))) is None
    assert T.unify(T.TupleType((("a", T.INT),)), T.TupleType((("a", T.STRING),))) is None
    assert T.unify(T.CollectionType(T.INT, True), T.CollectionType(T.DOUBLE)) == T.CollectionType(T.DOUBLE)
    assert T.unify(T.CollectionType(T.INT), T.INT) is None
    assert T.comparable(T.ScalarType("date"), T.STRING) and not T.comparable(T.BOOL, T.STRING)
    ab, ba = T.TupleType((("a", T.INT), ("b", T.STRING))), T.TupleType((("b", T.STRING), ("a", T.DOUBLE)))
    assert T.widen(T.INT, T.STRING) == T.UnionType((T.INT, T.STRING))
    assert T.widen(T.UnionType((T.INT, T.STRING)), T.DOUBLE) == T.UnionType((T.INT, T.DOUBLE, T.STRING))
    assert T.widen(ab, ba) == T.TupleType((("a", T.DOUBLE), ("b", T.STRING)))
    assert T.widen(T.TupleType((("a", T.INT),)), T.TupleType((("b", T.INT),))) == \
        T.TupleType((("a", T.INT), ("b", T.INT), (ABSENT, T.CollectionType(T.STRING))))


# --- through the warehouse and the command line --------------------------------------------------------

@pytest.fixture
def wh(make_warehouse):
    w = make_warehouse()
    w.create_table("parts", "pid", [{"pid": 1, "price": 2.5, "kind": "a", "n": 1, "big": 3},
                                    {"pid": 2, "price": 7.0, "kind": "b", "n": 5, "big": 4}])
    return w


def test_comparisons_of_incompatible_types_are_null(wh, tmp_path):
    """As AsterixDB defines them: ``p.kind = 1`` (a string and a number) is NULL, so a CASE of
    that operand takes its ELSE, a WHERE of it keeps no row and NOT of it is NULL too; maintained
    through an insert, and equal to its recomputation."""
    wh.define("""CREATE VIEW cmp AS SELECT p.pid, p.kind = 1 AS eq, p.kind < p.n AS lt, NOT (p.kind != 2) AS ne,
                 CASE p.kind WHEN 1 THEN 'one' ELSE 'other' END AS c FROM parts p""", strategy="id")
    wh.define("CREATE VIEW none_kept AS SELECT VALUE p.pid FROM parts p WHERE p.kind = 1 OR p.n = 5",
              strategy="id")
    row = {"eq": None, "lt": None, "ne": None, "c": "other"}
    assert sorted(wh.rows("cmp"), key=lambda r: r["pid"]) == [{"pid": 1, **row}, {"pid": 2, **row}]
    assert wh.rows("none_kept") == [2]  # NULL OR TRUE is TRUE
    batch = tmp_path / "b.jsonl"
    batch.write_text(json.dumps({"pid": 3, "price": 1.0, "kind": "c", "n": 5, "big": 1}) + "\n")
    wh.ingest("parts", batch, format="rows")
    for v in ("cmp", "none_kept"):
        wh.maintain(v)
        assert wh.verify(v).ok
    assert sorted(wh.rows("cmp"), key=lambda r: r["pid"]) == [{"pid": i, **row} for i in (1, 2, 3)]
    assert sorted(wh.rows("none_kept")) == [2, 3]


def test_a_refused_view_leaves_nothing_behind(wh):
    with pytest.raises(SemanticError, match=r"^3:3: type mismatch in p.price \+ p.kind: argument 2 is string"):
        wh.define("CREATE VIEW v AS\nSELECT VALUE\n  p.price + p.kind FROM parts p")
    assert wh.views() == []
    assert not (wh.path / "views").exists() or not any((wh.path / "views").iterdir())


def test_the_cli_prints_one_line_and_the_excerpt(wh, tmp_path, capsys, spark):
    text = "CREATE VIEW v AS\nSELECT p.pid, p.price + p.kind AS a\nFROM parts p\n"
    path = tmp_path / "v.sqlpp"
    path.write_text(text)
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        code = cli.main(["--warehouse", str(wh.path), "define", str(path)])
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"error: {path}:2:15: type mismatch in p.price + p.kind: argument 2 is string, not a number",
        "  SELECT p.pid, p.price + p.kind AS a",
        "  " + " " * 14 + "^"]


def test_errors_of_spark_while_defining_and_maintaining_are_ours(wh, tmp_path, capsys, spark):
    """An overflow of the data fails inside Spark, at define and at maintain: a DataError in one
    line naming the view, with Spark's error as its cause (not an ArithmeticException)."""
    with pytest.raises(DataError) as info:
        wh.define("CREATE VIEW boom AS SELECT p.pid, p.big * 4611686018427387904 AS x FROM parts p")
    assert str(info.value) == "view boom: a value of its data cannot be computed: [ARITHMETIC_OVERFLOW] overflow."
    assert type(info.value.__cause__).__module__.startswith("pyspark")
    assert wh.views() == []
    wh.define("CREATE VIEW scaled AS SELECT p.pid, p.big * 1000000000000000000 AS x FROM parts p", strategy="id")
    batch = tmp_path / "b.jsonl"
    batch.write_text(json.dumps({"pid": 3, "price": 1.0, "kind": "c", "n": 2, "big": 100}) + "\n")
    wh.ingest("parts", batch, format="rows")
    with pytest.raises(DataError, match=r"^view scaled: a value of its data cannot be computed: \[ARITHMETIC_OVERFLOW\]"):
        wh.maintain("scaled")
    assert wh.verify("scaled").ok  # the failed run committed nothing: the view is as it was
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        code = cli.main(["--warehouse", str(wh.path), "maintain", "scaled"])
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    out, err = capsys.readouterr()
    assert code == 1 and err.splitlines()[-1] == (
        "error: view scaled: a value of its data cannot be computed: [ARITHMETIC_OVERFLOW] overflow.")


def test_spark_errors_are_mapped_by_their_class(spark):
    """The mapping itself, on errors Spark raises: a cast of a malformed string (SQLSTATE 22) is
    a DataError, an expression Spark cannot resolve (42) an UnsupportedError."""
    from pyspark.sql import functions as F

    from idivm.exec.materialize import spark_errors

    df = spark.range(1)
    with pytest.raises(DataError, match=r"^view v: a value of its data cannot be computed: \[CAST_INVALID_INPUT\] "
                                        r"The value 'x' of the type \"STRING\" cannot be cast to \"BIGINT\""):
        with spark_errors("v"):
            df.select(F.lit("x").cast("bigint")).collect()
    with pytest.raises(UnsupportedError, match=r"^table t: Spark cannot evaluate it: \[DATATYPE_MISMATCH"):
        with spark_errors("t", "table"):
            df.select(F.array(F.struct(F.lit(1).alias("a")), F.struct(F.lit("s").alias("b")))).collect()
    with pytest.raises(ZeroDivisionError):  # not Spark's: left alone
        with spark_errors("v"):
            1 / 0
