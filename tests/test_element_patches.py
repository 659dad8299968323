"""Nested updates and replaces applied in the driver (:class:`idivm.exec.patches.ElementPatch`)
change the stored rows exactly as their Spark forms do (``_rewrite_elements``,
``_replace_elements`` of :mod:`idivm.exec.delta_script`): the same bags, in the same order, over
random rows and random i-diffs."""

from __future__ import annotations

import random

import pyarrow as pa

from idivm.exec import delta_script as ds
from idivm.exec.patches import NEW, ElementPatch
from idivm.provenance.ids import PROV_FIELD
from idivm.script import ELEMENT, Statement

INNER = pa.struct([("e", pa.int64()), ("f", pa.string())])
PROV = pa.struct([("a", pa.int64())])
ELEM = pa.struct([("a", pa.int64()), ("b", pa.string()), ("u", INNER), (PROV_FIELD, PROV)])
ROWS = pa.schema([("id", pa.int64()), ("rs", pa.list_(ELEM)), ("n", pa.int64())])


def _element(rng: random.Random, a: int) -> dict:
    inner = None if rng.random() < 0.2 else {"e": rng.choice([None, 1, 2]), "f": rng.choice([None, "x", "y"])}
    return {"a": a, "b": rng.choice([None, "p", "q", "r"]), "u": inner, PROV_FIELD: {"a": a}}


def _rows(rng: random.Random) -> list[dict]:
    rows = []
    for i in range(12):
        if rng.random() < 0.15:
            bag = None
        else:
            bag = sorted((_element(rng, rng.randrange(30)) for _ in range(rng.randrange(5))),
                         key=lambda e: (e["a"], e["b"] or "", str(e["u"])))
        rows.append({"id": i, "rs": bag, "n": i})
    return rows


def _by_spark(spark, rows: list[dict], rewrite) -> dict:
    df = spark.createDataFrame(pa.Table.from_pylist(rows, schema=ROWS))
    return {r["id"]: r["rs"] for r in ds.to_arrow(rewrite(df)).to_pylist()}


def _in_driver(rows: list[dict], patches) -> dict:
    stored = pa.Table.from_pylist(rows, schema=ROWS)
    for p in patches:
        at = {tuple(r.values()): i for i, r in enumerate(p.rows.select(list(p.on)).to_pylist())}
        named = [at.get((r["id"],)) for r in rows]
        hits = [i for i, n in enumerate(named) if n is not None]
        stored = p.prepared(stored.schema).changed(stored, hits, [named[i] for i in hits])
    return {r["id"]: r["rs"] for r in stored.to_pylist()}


def test_a_nested_update_in_the_driver_changes_what_spark_changes(spark):
    rng = random.Random(3)
    for _ in range(6):
        rows = _rows(rng)
        paths = rng.choice([(("b",),), (("u", "f"),), (("b",), ("u", "e"))])
        named = rng.sample(range(30), 8)
        q = [{"k": a, **{f"v{i}": (rng.choice([None, "s", "t"]) if p[-1] in ("b", "f") else rng.choice([None, 7]))
                         for i, p in enumerate(paths)}} for a in named]
        types = {f"v{i}": pa.string() if p[-1] in ("b", "f") else pa.int64() for i, p in enumerate(paths)}
        q_table = pa.Table.from_pylist(q, schema=pa.schema([("k", pa.int64()), *types.items()]))
        s = Statement("nested_update", (), path="rs", match=(("a", "k"),),
                      set=tuple((p, f"v{i}") for i, p in enumerate(paths)))
        view = spark.createDataFrame(pa.Table.from_pylist(rows, schema=ROWS))
        element_map = ds._element_map(s, spark.createDataFrame(q_table), view)
        expected = _by_spark(spark, rows, lambda df: ds._rewrite_elements(df, s, element_map))
        names = pa.table([q_table.column("k")] + [q_table.column(f"v{i}") for i in range(len(paths))],
                         names=["a"] + [f"__s{i}" for i in range(len(paths))])
        patch = ElementPatch("nested_update", ("id",), pa.table({"id": pa.array(range(12), pa.int64())}), "rs",
                             ("a",), names, tuple((p, f"__s{i}") for i, p in enumerate(paths)))
        assert _in_driver(rows, [patch]) == expected


def test_a_nested_replace_in_the_driver_changes_what_spark_changes(spark):
    rng = random.Random(5)
    for _ in range(6):
        rows = _rows(rng)
        keys = pa.table({"k": pa.array(rng.sample(range(30), 6), pa.int64())})
        elements = [{"id": rng.randrange(14), ELEMENT: _element(rng, rng.randrange(30))} for _ in range(6)]
        el_table = pa.Table.from_pylist(elements, schema=pa.schema([("id", pa.int64()), (ELEMENT, ELEM)]))
        s = Statement("nested_replace", (), on=("id",), path="rs", match=(("a", "k"),))
        view = spark.createDataFrame(pa.Table.from_pylist(rows, schema=ROWS))
        key_set = ds._element_keys(s, spark.createDataFrame(keys), view)
        located = sorted(rng.sample(range(12), 5))  # the rows an index names, holding named elements

        def spark_form(df):
            from pyspark.sql import functions as F
            named = set(located) | {e["id"] for e in elements}
            part = df.where(F.col("id").isin(sorted(named)))
            return ds._replace_elements(part, s, (key_set, spark.createDataFrame(el_table))).unionByName(
                df.where(~F.col("id").isin(sorted(named))))
        expected = _by_spark(spark, rows, spark_form)
        names = keys.rename_columns(["a"])
        patches = [ElementPatch("nested_replace", ("id",), pa.table({"id": pa.array(located, pa.int64())}), "rs",
                                ("a",), names),
                   ElementPatch("nested_replace", ("id",), ds._grouped(el_table, ("id",), None), "rs",
                                ("a",), names)]
        assert NEW in patches[1].rows.column_names
        assert _in_driver(rows, patches) == expected
