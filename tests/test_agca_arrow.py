"""AGCA statements evaluated in the driver over Arrow tables (:mod:`idivm.agca.arrow`):
batch triggers against the reference executor and the maps' definitions over random
multi-relation batches (no Spark), and the scalar expressions Arrow evaluates itself against
Spark's evaluation of the same terms."""

from __future__ import annotations

import datetime
import random

import pyarrow as pa
import pytest

from idivm.agca import Database, evaluate, relations
from idivm.agca import arrow
from idivm.agca.gmr import GMR
from idivm.agca.spark import M
from idivm.agca.viewlet import apply_batch, compile_program, initial_maps
from idivm.algebra.expressions import Call, Const, Var

from test_agca import COLUMNS, PROGRAMS, _random_relation


def _table(gmr_rows: dict, columns) -> pa.Table:
    rows = [{**dict(zip(columns, row)), M: float(m)} for row, m in gmr_rows.items()]
    schema = pa.schema([*[(c, pa.int64()) for c in columns], (M, pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def _map_table(gmr: GMR, keys) -> pa.Table:
    rows = [{**dict(t), M: float(m)} for t, m in gmr.items()]
    schema = pa.schema([*[(k, pa.int64()) for k in keys], (M, pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def _gmr(table: pa.Table) -> dict:
    out: dict = {}
    for row in table.to_pylist():
        m = row.pop(M)
        key = tuple(sorted(row.items()))
        out[key] = out.get(key, 0.0) + m
    return {k: v for k, v in out.items() if abs(v) > 1e-9}


def _no_lift(contexts, q):
    raise AssertionError(f"no lifted expression expected: {q}")


def _apply_batch(program, maps: dict, updates: dict) -> None:
    """The batch triggers of ``program`` over Arrow maps, one relation after the other (by
    name), as :func:`idivm.agca.spark.apply_batch` runs them over DataFrames."""
    constants: dict = {}
    top = arrow.unit()  # one start for every statement, as maps.increments has it
    for rel in sorted(updates):
        trigger = program.triggers.get((rel, 0))
        if trigger is None:
            continue
        increments = [(s.target, list(program.maps[s.target].keys),
                       arrow.compile_term(s.rhs, top, {f"Δ{rel}": updates[rel]}, maps, constants, _no_lift))
                      for s in trigger.increments]
        for target, keys, inc in increments:
            if isinstance(maps[target], arrow.Lookup):  # on the same consolidated rows and indexes
                maps[target] = maps[target].added(inc.select([*keys, M]))
            else:
                maps[target] = arrow.summed([maps[target], inc.select([*keys, M])], keys)
        values = [(s.target, arrow.compile_term(s.rhs, top, {}, maps, constants, _no_lift))
                  for s in trigger.reevaluations]
        for target, value in values:
            keys = list(program.maps[target].keys)
            value = arrow.summed([value.select([*keys, M])], keys)
            maps[target] = arrow.Lookup(value, keys) if isinstance(maps[target], arrow.Lookup) else value


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("narrow,lookups", [(arrow.NARROW_RATIO, False), (1, False), (1, True)],
                         ids=["narrowed-when-large", "narrowed-always", "looked-up"])
def test_arrow_batch_triggers_equal_the_reference_and_the_definitions(name, seed, narrow, lookups, monkeypatch):
    # narrowed always: every join first keeps the larger side's rows whose keys the other holds;
    # looked up: the maps are held as consolidated rows plus increments, joins look their rows up
    monkeypatch.setattr(arrow, "NARROW_RATIO", narrow)
    rnd = random.Random(1000 + seed)
    query = PROGRAMS[name]
    program = compile_program(query, batch=True)
    rels = {r: _random_relation(rnd, COLUMNS[r], 6) for r in relations(query)}
    reference = initial_maps(program, Database(rels))
    maps = {n: _map_table(g, program.maps[n].keys) for n, g in reference.items()}
    if lookups:
        maps = {n: arrow.Lookup(t, program.maps[n].keys) for n, t in maps.items()}
    for _ in range(3):
        updates = {r: _random_relation(rnd, COLUMNS[r], rnd.randint(1, 4), negative=True) for r in rels}
        _apply_batch(program, maps, {r: _table(d.rows, d.columns) for r, d in updates.items()})
        apply_batch(program, reference, updates)
        for r, d in updates.items():
            rels[r] = rels[r].plus(d)
        db = Database(rels)
        for m in program.maps.values():
            want = evaluate(m.definition, db)
            assert reference[m.name] == want
            got = _gmr(maps[m.name].value if lookups else maps[m.name])
            want = {tuple(sorted(k)): float(v) for k, v in want.items()}
            assert set(got) == set(want), m.name
            assert all(got[k] == pytest.approx(v) for k, v in want.items()), m.name


def test_products_that_begin_alike_join_their_first_factors_once(monkeypatch):
    """Two statements of a trigger, ``Δr * s * M1`` and ``Δr * s * M2``, evaluated over the same
    tables with the same memo: the join of the batch with ``s`` is made once; both equal their
    products evaluated apart.  After ``s`` changes, the join is made again."""
    from idivm.agca.terms import MapRef, Mul, Rel, Sum

    def table(columns, rows):
        return pa.table({**{c: [r[i] for r in rows] for i, c in enumerate(columns)},
                         M: [1.0] * len(rows)})

    relations = {"Δr": table(["a", "b"], [(1, 10), (2, 20), (3, 30)]), "s": table(["b", "c"], [(10, 5), (20, 6)])}
    maps = {"M1": table(["c"], [(5,), (6,)]), "M2": table(["c"], [(6,)])}
    first = (Rel("r", ("a", "b"), delta=True), Rel("s", ("b", "c")))
    q1, q2 = (Sum(("a",), Mul((*first, MapRef(m, ("c",), ())))) for m in ("M1", "M2"))
    joins = []
    counted = arrow._join
    monkeypatch.setattr(arrow, "_join", lambda *a, **k: joins.append(1) or counted(*a, **k))
    top, memo = arrow.unit(), {}
    got = [arrow.compile_term(q, top, relations, maps, memo, _no_lift) for q in (q1, q2)]
    assert len(joins) == 4  # Δr, s, M1; then M2 alone
    apart = [arrow.compile_term(q, arrow.unit(), relations, maps, {}, _no_lift) for q in (q1, q2)]
    assert [_gmr(t) for t in got] == [_gmr(t) for t in apart] == [{(("a", 1),): 1.0, (("a", 2),): 1.0},
                                                                   {(("a", 2),): 1.0}]
    relations["s"] = table(["b", "c"], [(30, 6)])
    joins.clear()
    assert _gmr(arrow.compile_term(q2, top, relations, maps, memo, _no_lift)) == {(("a", 3),): 1.0}
    assert len(joins) == 2  # s and M2 again (Δr alone is remembered)


def test_null_safe_matching_pairs_null_with_null_only():
    left = pa.table({"g": [1, None, 2, 0], "x": ["a", "b", "c", "d"]})
    right = pa.table({"g": [None, 2, 0], "y": [10, 20, 30]})
    semi = arrow.matched(left, right, ["g"], "left semi")
    assert sorted(semi.column("x").to_pylist()) == ["b", "c", "d"]
    outer = {r["x"]: r["y"] for r in arrow.matched(left, right, ["g"], "left outer").to_pylist()}
    assert outer == {"a": None, "b": 10, "c": 20, "d": 30}


# --- scalar expressions: Arrow's value against Spark's ---------------------------------------------

ROWS = pa.table({
    "i": pa.array([3, -2, None, 0, 7, 2**40], pa.int64()),
    "j": pa.array([0, 4, 1, None, -7, 3], pa.int64()),
    "f": pa.array([1.5, None, -0.25, 2.0, 0.0, 1e10], pa.float64()),
    "s": pa.array(["PROMO tin", "promo", None, "%x", "PROMO", "STANDARD"], pa.string()),
    "b": pa.array([True, None, False, True, None, False], pa.bool_()),
    "d": pa.array([datetime.date(1995, 3, 14), datetime.date(1995, 3, 15), None, datetime.date(1996, 1, 1),
                   datetime.date(1994, 12, 31), datetime.date(1995, 3, 16)], pa.date32()),
})


def _c(f, *args):
    return Call(f, tuple(args))


TERMS = {
    "sum of integers": _c("add", Var("i"), Var("j")),
    "difference with a float": _c("sub", Var("f"), Var("i")),
    "product": _c("mul", Var("i"), _c("sub", Const(1), Var("f"))),
    "quotient, NULL by zero": _c("div", Var("i"), Var("j")),
    "negation": _c("neg", Var("f")),
    "integer against float": _c("lt", Var("i"), Var("f")),
    "equality with a constant": _c("eq", Var("j"), Const(3)),
    "strings compared": _c("ge", Var("s"), Const("PROMO")),
    "LIKE": _c("like", Var("s"), Const("PROMO%")),
    "LIKE with one character": _c("like", Var("s"), Const("_romo")),
    "date against a date string": _c("lt", Var("d"), Const("1995-03-15")),
    "three-valued AND": _c("and", Var("b"), _c("gt", Var("i"), Const(0))),
    "three-valued OR": _c("or", Var("b"), _c("is_null", Var("j"))),
    "NOT": _c("not", Var("b")),
    "IS NULL": _c("is_null", Var("s")),
}


@pytest.mark.parametrize("name", TERMS)
def test_arrow_scalar_expressions_equal_sparks(spark, name):
    from idivm.exec.terms import compile_term
    from idivm.storage.spark import to_arrow

    term = TERMS[name]
    got = arrow._scalar(term, ROWS)
    got = got.to_pylist() if not isinstance(got, pa.Scalar) else [got.as_py()] * ROWS.num_rows
    want = to_arrow(spark.createDataFrame(ROWS).select(compile_term(term).alias("v"))).column("v").to_pylist()
    assert got == pytest.approx(want, nan_ok=True) if all(isinstance(x, float) for x in want if x is not None) \
        else got == want


def test_expressions_arrow_might_evaluate_otherwise_are_left_to_spark():
    for term in (_c("concat", Var("s"), Const("x")), _c("add", Var("s"), Const(1)), Const(datetime.date(1995, 1, 1)),
                 _c("lt", Var("d"), Const("not a date"))):
        with pytest.raises(arrow._BySpark):
            arrow._scalar(term, ROWS)


def test_plus_adds_increments_to_a_consolidated_map_as_a_sum_per_key_would():
    """``arrow.plus`` (a map's stored entries plus a run's increments) equals the sum per key of
    both, NULL keys included, entries reaching 0 dropped, on random maps and increments."""
    import random

    from idivm.agca import arrow

    rng = random.Random(3)
    for _ in range(40):
        keys = ["a", "b"][: rng.randint(1, 2)]

        def value():
            return None if rng.random() < 0.1 else rng.randint(0, 5)

        entries = {tuple(value() for _ in keys): float(rng.choice([-2, -1, 1, 2, 3]))
                   for _ in range(rng.randint(0, 12))}
        base = pa.table({**{k: pa.array([e[i] for e in entries], pa.int64()) for i, k in enumerate(keys)},
                         "__m": pa.array(list(entries.values()), pa.float64())})
        incs = [(tuple(value() for _ in keys), float(rng.choice([-3, -2, -1, 1, 2]))) for _ in range(rng.randint(0, 8))]
        increments = pa.table({**{k: pa.array([e[i] for e, _ in incs], pa.int64()) for i, k in enumerate(keys)},
                               "__m": pa.array([m for _, m in incs], pa.float64())})
        expected = dict(entries)
        for e, m in incs:
            expected[e] = expected.get(e, 0.0) + m
        got = arrow.plus(base, increments, keys)
        assert got.column_names == base.column_names
        rows = [(tuple(r[k] for k in keys), r["__m"]) for r in got.to_pylist()]
        assert len({e for e, _ in rows}) == len(rows)  # each key once
        assert dict(rows) == {e: m for e, m in expected.items() if abs(m) > 1e-9}


@pytest.mark.parametrize("kind", ["int", "string", "date"])
def test_a_lookup_finds_the_entries_of_the_values_asked_as_a_filter_of_its_value_would(kind):
    """``Lookup.matching`` (binary search in a sorted index of the consolidated rows, the
    increments since added) equals the filter of the map's value on the values asked, on random
    maps with NULL keys, repeated values and increments that cancel entries."""
    rng = random.Random(5)
    make = {"int": (pa.int64(), lambda v: v), "string": (pa.string(), lambda v: f"s{v}"),
            "date": (pa.date32(), lambda v: datetime.date(2020, 1, 1) + datetime.timedelta(days=v))}
    typ, of = make[kind]
    for _ in range(30):
        def value():
            return None if rng.random() < 0.1 else of(rng.randint(0, 9))

        entries = {(value(), rng.randint(0, 3)): float(rng.choice([-1, 1, 2])) for _ in range(rng.randint(0, 40))}
        base = pa.table({"a": pa.array([e[0] for e in entries], typ),
                         "b": pa.array([e[1] for e in entries], pa.int64()),
                         M: pa.array(list(entries.values()), pa.float64())})
        lookup = arrow.Lookup(base, ["a", "b"])
        for _ in range(rng.randint(0, 3)):
            incs = [((value(), rng.randint(0, 3)), float(rng.choice([-2, -1, 1]))) for _ in range(rng.randint(0, 6))]
            lookup = lookup.added(pa.table({"a": pa.array([e[0] for e, _ in incs], typ),
                                            "b": pa.array([e[1] for e, _ in incs], pa.int64()),
                                            M: pa.array([m for _, m in incs], pa.float64())}))
        for column in ("a", "b"):
            asked = list({lookup.value.column(column)[i].as_py() for i in range(lookup.value.num_rows)
                          if rng.random() < 0.5} - {None}) + ([of(11)] if column == "a" else [7])
            values = pa.array(asked, lookup.schema.field(column).type)
            got = lookup.matching(column, values)
            assert got is not None
            want = [r for r in lookup.value.to_pylist() if r[column] in asked]
            key = lambda r: (str(r["a"]), r["b"], r[M])  # noqa: E731
            assert sorted(got.to_pylist(), key=key) == sorted(want, key=key)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">="])
@pytest.mark.parametrize("flipped", [False, True], ids=["k-op-p", "p-op-k"])
@pytest.mark.parametrize("kinds", [("int", "int"), ("int", "float"), ("float", "int")], ids="-".join)
@pytest.mark.parametrize("lookups", [False, True], ids=["table", "lookup"])
def test_nested_sums_correlated_on_an_inequality_equal_the_join_they_stand_for(op, flipped, kinds, lookups,
                                                                                monkeypatch):
    """``z := Sum[](m[][k] * (k θ p))`` per context, by running sums and binary search
    (``arrow._range_sums``), against the same term joined and summed: NULL keys and values, keys
    equal to values, values past either end, entries of negative multiplicity."""
    from idivm.agca.terms import Assign, Cmp, MapRef, Mul, Sum, Var

    rnd = random.Random(f"{op}{flipped}{kinds}{lookups}")
    typed = {"int": (pa.int64(), lambda: rnd.randint(-3, 12)), "float": (pa.float64(), lambda: rnd.randint(-6, 24) / 2)}
    (kt, key), (pt, value) = typed[kinds[0]], typed[kinds[1]]
    entries = pa.table({"k": pa.array([key() if rnd.random() > 0.1 else None for _ in range(40)], kt),
                        M: pa.array([float(rnd.choice([-2, -1, 1, 1, 2, 3])) for _ in range(40)], pa.float64())})
    entries = arrow.summed([entries], ["k"])
    values = [None, -100, 100, *(value() if rnd.random() > 0.1 else None for _ in range(27))]
    contexts = pa.table({"p": pa.array(values, pt), M: pa.array([1.0] * 30, pa.float64())})
    cmp = Cmp(op, Var("p"), Var("k")) if flipped else Cmp(op, Var("k"), Var("p"))
    term = Assign("z", Sum((), Mul((MapRef("m", (), ("k",)), cmp))))
    maps = {"m": arrow.Lookup(entries, ["k"]) if lookups else entries}

    def rows(t: pa.Table) -> list:
        return sorted(((r["p"] is None, r["p"] or 0, r["z"]) for r in t.to_pylist()), key=repr)

    fast = arrow.compile_term(term, contexts, {}, maps, {}, _no_lift)
    monkeypatch.setattr(arrow, "_range_sums", lambda *a: None)
    joined = arrow.compile_term(term, contexts, {}, maps, {}, _no_lift)
    assert rows(fast) == rows(joined) and len(rows(fast)) == 30
    assert any(r[2] != 0 for r in rows(fast)) and any(r[2] == 0 for r in rows(fast))
