"""AGCA batch triggers executed by Spark (:mod:`idivm.agca.spark`) against the reference
executor and the maps' definitions, over random multi-relation batches."""

from __future__ import annotations

import random

import pytest

from idivm.agca import Database, evaluate, relations
from idivm.agca import spark as agca_spark
from idivm.agca.viewlet import apply_batch, compile_program, initial_maps

from test_agca import COLUMNS, PROGRAMS, _random_relation

QUERIES = ["ex6 join sum", "nested sum correlated on an equality",
           *[pytest.param(q, marks=pytest.mark.slow) for q in (
               "ex10 chain of three", "self join", "ex5 nested aggregate correlated on an inequality",
               "group-by join with a local condition")]]


def _frame(spark, rel):
    from idivm.agca.gmr import GMR
    gmr = GMR({tuple(zip(rel.columns, row)): m for row, m in rel.rows.items()})
    return agca_spark.from_gmr(spark, gmr, rel.columns)


@pytest.mark.parametrize("name", QUERIES)
def test_spark_batch_triggers_equal_the_reference_and_the_definitions(spark, name):
    rnd = random.Random(77)
    query = PROGRAMS[name]
    program = compile_program(query, batch=True)
    rels = {r: _random_relation(rnd, COLUMNS[r], 6) for r in relations(query)}
    reference = initial_maps(program, Database(rels))
    maps = {n: agca_spark.from_gmr(spark, g, program.maps[n].keys) for n, g in reference.items()}
    for _ in range(2):
        updates = {r: _random_relation(rnd, COLUMNS[r], rnd.randint(1, 4), negative=True) for r in rels}
        agca_spark.apply_batch(spark, program, maps, {r: _frame(spark, d) for r, d in updates.items()})
        apply_batch(program, reference, updates)
        for r, d in updates.items():
            rels[r] = rels[r].plus(d)
        db = Database(rels)
        for m in program.maps.values():
            got = agca_spark.to_gmr(maps[m.name])
            want = evaluate(m.definition, db)
            assert reference[m.name] == want
            assert set(got) == set(want), m.name
            assert all(got[k] == pytest.approx(v) for k, v in want.items()), m.name
