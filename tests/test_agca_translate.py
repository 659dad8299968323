"""Aggregate cores of SQL++ views translated into AGCA (:mod:`idivm.agca.translate`): the
terms evaluated over the thesis' sample devices/parts data equal DuckDB running the view's SQL,
and their trigger programs keep them equal to their definitions through random change streams."""

from __future__ import annotations

import json
import random

import pytest

from idivm import types as T
from idivm.agca import GMR, Database, Relation, evaluate
from idivm.agca.translate import COUNT, Untranslatable, translate_group_by
from idivm.agca.viewlet import apply_update, compile_program, initial_maps
from idivm.algebra import operators as O
from idivm.algebra.builder import build_view
from idivm.datasets import sample_path, view_path
from idivm.sqlpp import parse_view

TYPES = {
    "parts": T.TupleType((("pid", T.INT), ("price", T.DOUBLE))),
    "devices": T.TupleType((("did", T.INT), ("category", T.STRING))),
    "devices_parts": T.TupleType((("did", T.INT), ("pid", T.INT))),
}
COLUMNS = {t: tuple(n for n, _ in ty.fields) for t, ty in TYPES.items()}

VIEWS = {
    "phone_cost": (view_path("devices_cost").read_text(),
                   "SELECT did, SUM(price) FROM parts NATURAL JOIN devices_parts NATURAL JOIN devices "
                   "WHERE category = 'phone' GROUP BY did"),
    "parts per category": ("CREATE VIEW v AS SELECT d.category, COUNT(*) AS n, AVG(p.price) AS mean "
                           "FROM devices d, devices_parts dp, parts p WHERE d.did = dp.did AND dp.pid = p.pid "
                           "GROUP BY d.category",
                           "SELECT d.category, COUNT(*), AVG(p.price) FROM devices d, devices_parts dp, parts p "
                           "WHERE d.did = dp.did AND dp.pid = p.pid GROUP BY d.category"),
    "weighted expensive parts": ("CREATE VIEW w AS SELECT dp.did, SUM(2 * p.price - p.pid) AS s FROM devices_parts dp, "
                                 "parts p WHERE dp.pid = p.pid AND p.price > 40 GROUP BY dp.did",
                                 "SELECT dp.did, SUM(2 * p.price - p.pid) FROM devices_parts dp, parts p "
                                 "WHERE dp.pid = p.pid AND p.price > 40 GROUP BY dp.did"),
}


def _core(text: str) -> O.GroupBy:
    plan = build_view(parse_view(text), TYPES).plan
    return next(op for op in O.walk(plan) if isinstance(op, O.GroupBy))


def _sample() -> dict[str, list[dict]]:
    return {t: [json.loads(line) for line in sample_path("devices", t).read_text().splitlines() if line.strip()]
            for t in TYPES}


def _database(rows: dict[str, list[dict]]) -> Database:
    return Database({t: Relation(COLUMNS[t], {tuple(r[c] for c in COLUMNS[t]): 1 for r in rs})
                     for t, rs in rows.items()})


@pytest.mark.parametrize("name", VIEWS)
def test_a_translated_core_equals_duckdb_on_the_sample_data(name):
    duckdb = pytest.importorskip("duckdb")
    text, sql = VIEWS[name]
    core = translate_group_by(_core(text), COLUMNS)
    db = _database(_sample())
    values = {n: evaluate(t, db) for n, t in core.terms.items()}
    con = duckdb.connect()
    for t in TYPES:
        con.execute(f"CREATE TABLE {t} AS SELECT * FROM read_json_auto('{sample_path('devices', t)}')")
    expected = {row[0]: row[1:] for row in con.execute(sql).fetchall()}
    (key_name, key_var), = core.keys
    groups = {dict(k)[key_var] for k in values[COUNT]}
    assert groups == set(expected)
    outputs = [n for n, _ in _core(text).aggregates]
    for g, row in expected.items():
        k = ((key_var, g),)
        for out, want in zip(outputs, row):
            if out in core.averages:
                got = values[f"{out}$sum"].get(k, 0) / values[f"{out}$count"][k]
            else:
                got = values[out].get(k, 0)
            assert got == pytest.approx(want), (g, out)


def test_a_trigger_program_maintains_phone_cost_through_a_random_stream():
    """Price changes (a delete and an insert of the part), new and removed device parts and
    devices changing category, one tuple at a time: every map stays equal to its definition
    (sums of prices are floating point: a group whose sum returns to 0 may keep a residue of
    rounding, which is why a core's groups are those of its COUNT)."""
    core = translate_group_by(_core(VIEWS["phone_cost"][0]), COLUMNS)
    program = compile_program(core.terms["sum"], "cost")
    rows = _sample()
    rels = _database(rows).relations
    maps = initial_maps(program, Database(rels))
    rnd = random.Random(3)

    def change(table: str, row: tuple, sign: int) -> None:
        apply_update(program, maps, table, row, sign)
        rels[table] = rels[table].plus(Relation(COLUMNS[table], {row: sign}))

    for _ in range(30):
        kind = rnd.choice(["price", "link", "unlink", "category"])
        if kind == "price":
            old = rnd.choice(sorted(rels["parts"].rows))
            change("parts", old, -1)
            change("parts", (old[0], round(old[1] + rnd.uniform(-5, 5), 2)), 1)
        elif kind == "link":
            pair = (rnd.choice(sorted(rels["devices"].rows))[0], rnd.choice(sorted(rels["parts"].rows))[0])
            if pair not in rels["devices_parts"].rows:
                change("devices_parts", pair, 1)
        elif kind == "unlink" and rels["devices_parts"].rows:
            change("devices_parts", rnd.choice(sorted(rels["devices_parts"].rows)), -1)
        elif kind == "category":
            old = rnd.choice(sorted(rels["devices"].rows))
            change("devices", old, -1)
            change("devices", (old[0], "phone" if old[1] != "phone" else "tablet"), 1)
        db = Database(rels)
        for m in program.maps.values():
            want = GMR(evaluate(m.definition, db))
            for k in set(maps[m.name]) | set(want):
                assert maps[m.name].get(k, 0) == pytest.approx(want.get(k, 0), abs=1e-6), (m.name, k)


@pytest.mark.parametrize("text, what", [
    ("CREATE VIEW v AS SELECT d.did, MAX(p.price) AS m FROM devices_parts d, parts p WHERE d.pid = p.pid "
     "GROUP BY d.did", "MAX"),
    ("CREATE VIEW v AS SELECT p.pid, COUNT(DISTINCT p.price) AS m FROM parts p GROUP BY p.pid", "DISTINCT"),
    ("CREATE VIEW v AS SELECT d.did, SUM(p.price) AS m FROM devices_parts d LEFT JOIN parts p ON d.pid = p.pid "
     "GROUP BY d.did", "LeftJoin"),
])
def test_what_has_no_agca_form_is_named(text, what):
    with pytest.raises(Untranslatable, match=what):
        translate_group_by(_core(text), COLUMNS)


def test_on_a_price_change_phone_cost_reads_one_map_of_phone_uses_by_part():
    """The thesis' aggregate view under DBToaster's compilation: an inserted part (pid, price)
    adds ``price * M[pid][did]`` to every device's cost, M counting the phone devices' uses of
    the part (joined atoms are one map, not a cross product)."""
    core = translate_group_by(_core(VIEWS["phone_cost"][0]), COLUMNS)
    program = compile_program(core.terms["sum"], "cost")
    (stmt,) = [s for s in program.triggers[("parts", 1)].statements if s.target == "cost"]
    from idivm.agca import MapRef, relations
    (ref,) = [t for t in stmt.rhs.term.terms if isinstance(t, MapRef)]
    assert len(ref.inputs) == 1 and len(ref.outputs) == 1
    assert relations(program.maps[ref.name].definition) == {"devices", "devices_parts"}


@pytest.mark.parametrize("name", VIEWS)
def test_no_two_maps_are_equal_up_to_the_names_of_their_variables(name):
    from idivm.agca.terms import canonical
    core = translate_group_by(_core(VIEWS[name][0]), COLUMNS)
    for term in core.terms.values():
        program = compile_program(term)
        forms = [canonical(m.definition)[0] for m in program.maps.values()]
        assert len(set(forms)) == len(forms)
