"""Aggregates of rows the driver holds are computed in the driver (no Spark job), equal to
Spark's own evaluation of the same plan over the same rows read from a Delta table."""

from __future__ import annotations

import decimal
import math
import random

import pyarrow as pa
import pytest

from idivm.algebra import operators as O
from idivm.algebra.expressions import Call, Field, TableRef, TupleExpr, Var
from idivm.exec import compiler as C
from idivm.exec.compiler import PlanCompiler
from idivm.storage import delta

SCHEMA = pa.schema([("k", pa.string()), ("g", pa.int64()), ("x", pa.int64()), ("d", pa.decimal128(7, 2)),
                    ("f", pa.float64()), ("s", pa.string()), ("on", pa.bool_())])


def rows(seed: int, n: int) -> pa.Table:
    rng = random.Random(seed)

    def maybe(v):
        return None if rng.random() < 0.2 else v

    return pa.Table.from_pylist([
        {"k": maybe(rng.choice("abc")), "g": maybe(rng.randint(0, 2)), "x": maybe(rng.randint(-50, 50)),
         "d": maybe(decimal.Decimal(rng.randint(-99999, 99999)).scaleb(-2)), "f": maybe(rng.uniform(-1e3, 1e3)),
         "s": maybe(rng.choice(["x", "yy", "", "zz"])), "on": maybe(rng.random() < 0.5)}
        for _ in range(n)], schema=SCHEMA)


def t(name: str) -> Field:
    return Field(Var("t"), name)


AGGREGATES = (
    ("n", O.Aggregate("count", None)), ("nx", O.Aggregate("count", t("x"))), ("n2", O.Aggregate("count", None)),
    ("nd", O.Aggregate("count", t("s"), distinct=True)), ("sx", O.Aggregate("sum", t("x"))),
    ("sd", O.Aggregate("sum", t("d"))), ("sf", O.Aggregate("sum", t("f"))), ("ax", O.Aggregate("avg", t("x"))),
    ("lo", O.Aggregate("min", t("s"))), ("hi", O.Aggregate("max", t("d"))), ("hb", O.Aggregate("max", t("on"))),
    ("diff", O.Aggregate("sum", Call("sub", (t("x"), t("g"))))),
)


def plan(keys: tuple[str, ...], aggregates=AGGREGATES) -> O.ReturnBag:
    grouped = O.GroupBy(O.ScanCollection(O.Ground(), TableRef("t"), "t"), tuple((k, t(k)) for k in keys), aggregates)
    names = keys + tuple(v for v, _ in aggregates)
    return O.ReturnBag(grouped, TupleExpr(tuple((n, Var(n)) for n in names)))


def evaluated(spark, source, query: O.ReturnBag) -> tuple[list[dict], int]:
    """The rows of ``query`` over table ``t`` = ``source``, and the Spark jobs evaluating it took."""
    scheduler = spark.sparkContext._jsc.sc().dagScheduler()
    before = int(scheduler.nextJobId())
    df = PlanCompiler(spark, {"t": source}.__getitem__).evaluate(query)
    result = [r.asDict() for r in (df.collect() if C.is_local(df) else df.toLocalIterator())]
    return result, int(scheduler.nextJobId()) - before


def same(a: list[dict], b: list[dict], keys: tuple[str, ...]) -> bool:
    def order(r):
        return tuple((r[k] is None, r[k]) for k in keys)

    def equal(x, y):
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
        return x == y and type(x) is type(y)

    a, b = sorted(a, key=order), sorted(b, key=order)
    return len(a) == len(b) and all(r.keys() == s.keys() and all(equal(r[c], s[c]) for c in r) for r, s in zip(a, b))


@pytest.mark.parametrize("keys", [("k",), ("k", "g"), ("on",), ("d", "s")])
@pytest.mark.parametrize("seed", [0])
def test_an_aggregate_of_rows_in_memory_is_computed_in_the_driver_as_spark_computes_it(spark, tmp_path, keys, seed):
    table = rows(seed, 300)
    delta.create_table(tmp_path / "t", table)
    expected, _ = evaluated(spark, delta.read_spark(spark, tmp_path / "t"), plan(keys))
    got, jobs = evaluated(spark, spark.createDataFrame(table), plan(keys))
    assert jobs == 0
    assert same(got, expected, keys), (got[:3], expected[:3])


def test_no_rows_give_no_groups_and_the_types_spark_gives(spark, tmp_path):
    table = rows(0, 0)
    delta.create_table(tmp_path / "t", table)
    query = plan(("k",))
    in_spark = PlanCompiler(spark, {"t": delta.read_spark(spark, tmp_path / "t")}.__getitem__).evaluate(query)
    in_driver = PlanCompiler(spark, {"t": spark.createDataFrame(table)}.__getitem__).evaluate(query)
    assert in_driver.schema == in_spark.schema
    assert in_driver.collect() == in_spark.collect() == []


@pytest.mark.parametrize("keys, aggregates", [
    (("f",), AGGREGATES[:2]),                                    # floating point keys: Spark normalizes NaN, -0.0
    (("k",), (("sd", O.Aggregate("sum", t("d"), distinct=True)),)),  # no driver form
    (("k",), (("ad", O.Aggregate("avg", t("d"))),)),              # decimal averages round as Spark does
])
def test_what_the_driver_does_not_compute_exactly_is_left_to_spark(spark, keys, aggregates):
    table = rows(2, 50)
    _, jobs = evaluated(spark, spark.createDataFrame(table), plan(keys, aggregates))
    assert jobs > 0


def test_a_large_input_is_left_to_spark(spark, monkeypatch):
    monkeypatch.setattr(C, "IN_DRIVER_MAX_BYTES", 100)
    _, jobs = evaluated(spark, spark.createDataFrame(rows(3, 50)), plan(("k",)))
    assert jobs > 0
