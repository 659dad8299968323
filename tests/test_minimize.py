"""Semantic minimization of Δ-scripts (thesis §2.4 pass 4, Fig. 2.8): ``idivm.generator.minimize``.

* Each rewrite rule on a plan built by hand: the plan it makes, and the plans it must leave
  alone (a partial key, a filtered or foreign i-diff, a key column matched with another).
* The rewrites do not change results: before and after plans evaluated with Spark over
  base i-diffs that ``base_diffs`` condenses from a change feed of small states.
* The driver: shared subplans stay shared, the statements say which rewrites shortened them.
* The view of Fig. 2.1b: an insert into ``devices_parts`` reads the inserted rows, not
  ``devices_parts@post``, and maintenance by that script stays equal to recomputation.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.builder import build_view
from idivm.algebra.expressions import Call, Const, Field, TableRef, TupleExpr, Var
from idivm.datasets import devices, view_path
from idivm.generator.generate import generate
from idivm.generator import minimize as M
from idivm.script import PRE_FIELD, UPDATES, DeltaScript, DiffRef, Origin, StateRef, Statement, TableDiffs
from idivm.provenance.ids import infer_provenance
from idivm.sqlpp import parse_view

TYPES = {
    "devices": T.TupleType((("did", T.INT), ("category", T.STRING))),
    "parts": T.TupleType((("pid", T.INT), ("price", T.DOUBLE))),
    "devices_parts": T.TupleType((("did", T.INT), ("pid", T.INT))),
}
KEYS = {"devices": ("did",), "parts": ("pid",), "devices_parts": ("did", "pid")}
TABLES = M.Tables(KEYS, {t: tuple(n for n, _ in ty.fields) for t, ty in TYPES.items()})


# --- plan helpers ------------------------------------------------------------------------------------

def source(name: str) -> DiffRef | StateRef:
    """The i-diff or state a Δ-script reads, from how it prints (``Δu(parts)``, ``parts@post``)."""
    table, at, state = name.rpartition("@")
    if at:
        return StateRef(table, state)
    kind, _, table = name.removesuffix(")").partition("(")
    return DiffRef(table, kind)


def scan(name: str, var: str) -> O.ScanCollection:
    return O.ScanCollection(O.Ground(), TableRef(source(name)), var)


def f(var: str, *path: str):
    t = Var(var)
    for p in path:
        t = Field(t, p)
    return t


def same(a, b):
    return Call("same", (a, b))


def both(*parts):
    return Call("and", parts)


def project(input: O.Operator, **outputs) -> O.Project:
    return O.Project(input, tuple(outputs.items()))


def keys_of(table: str, dk: str = "dk", **names: str) -> O.Project:
    """``Project k := dk.col ... (ScanCollection Δ(table) AS dk)``; names: variable -> column."""
    return project(scan(f"Δ({table})", dk), **{v: f(dk, c) for v, c in names.items()})


#: the origin of a statement from the update i-diff of ``parts``
FROM_UPDATES = (Origin(DiffRef("parts", UPDATES), "p"),)
PARTS_POST = TupleExpr((("pid", f("du", "pid")), ("price", f("du", "price"))))
PARTS_PRE = TupleExpr((("pid", f("du", "pid")), ("price", f("du", PRE_FIELD, "price"))))


def update_diff() -> O.Project:
    """The update i-diff of ``parts`` as pass 3 composes it below γ SUM (Tables C.8, C.10):
    the key and the pre price of each updated part, over the tuples pass 2 builds."""
    base = project(scan("Δu(parts)", "du"), p=PARTS_POST, pre_p=f("du", PRE_FIELD))
    return project(base, k=f("p", "pid"), q=f("pre_p", "price"))


# --- rows_of_replaced_keys ------------------------------------------------------------------------------

@pytest.mark.parametrize("state, source", [("post", "Δpost(parts)"), ("pre", "Δpre(parts)")])
def test_state_semijoin_replaced_keys_is_their_rows(state, source):
    before = O.SemiJoin(scan(f"parts@{state}", "p"), keys_of("parts", k="pid"), same(f("p", "pid"), Var("k")))
    assert M.rows_of_replaced_keys(before, TABLES) == scan(source, "p")


def test_replaced_keys_of_a_composite_key_in_any_order_and_orientation():
    keys = keys_of("devices_parts", a="pid", b="did")
    before = O.SemiJoin(scan("devices_parts@post", "dp"), keys,
                        both(same(Var("b"), f("dp", "did")), same(f("dp", "pid"), Var("a"))))
    assert M.rows_of_replaced_keys(before, TABLES) == scan("Δpost(devices_parts)", "dp")


@pytest.mark.parametrize("case", ["partial key", "columns swapped", "filtered keys", "other table",
                                  "extra conjunct", "keys of updates", "not a state"])
def test_replaced_keys_rule_leaves_other_semijoins_alone(case):
    dp = scan("devices_parts@post", "dp")
    cond = both(same(f("dp", "did"), Var("a")), same(f("dp", "pid"), Var("b")))
    keys = keys_of("devices_parts", a="did", b="pid")
    match case:
        case "partial key":  # the γ restriction of Fig. 2.5: devices_parts by did only
            plan = O.SemiJoin(dp, keys_of("devices_parts", a="did"), same(f("dp", "did"), Var("a")))
        case "columns swapped":
            plan = O.SemiJoin(dp, keys_of("devices_parts", a="pid", b="did"), cond)
        case "filtered keys":
            plan = O.SemiJoin(dp, O.Select(keys, Call("gt", (Var("a"), Const(3, T.INT)))), cond)
        case "other table":
            plan = O.SemiJoin(scan("parts@post", "p"), keys_of("devices_parts", k="pid"),
                              same(f("p", "pid"), Var("k")))
        case "extra conjunct":
            plan = O.SemiJoin(dp, keys, both(cond, Call("gt", (f("dp", "did"), Const(3, T.INT)))))
        case "keys of updates":
            plan = O.SemiJoin(scan("parts@post", "p"), update_diff(), same(f("p", "pid"), Var("k")))
        case _:
            plan = O.SemiJoin(keys_of("devices_parts", c="did"), keys, same(Var("c"), Var("a")))
    assert M.rows_of_replaced_keys(plan, TABLES) is None


# --- rows_of_updated_keys ------------------------------------------------------------------------------

@pytest.mark.parametrize("state, row", [("post", PARTS_POST), ("pre", PARTS_PRE)])
def test_state_semijoin_updated_keys_is_their_tuples(state, row):
    before = O.SemiJoin(scan(f"parts@{state}", "parts"), update_diff(), same(f("parts", "pid"), Var("k")))
    after = M.rows_of_updated_keys(before, TABLES)
    assert after == project(scan("Δu(parts)", "du"), parts=row)


def test_updated_keys_rule_needs_the_key_of_the_update_rows():
    # q is the pre price, not the key: the semijoin keeps the parts whose pid equals a pre price
    before = O.SemiJoin(scan("parts@post", "p"), update_diff(), same(f("p", "pid"), Var("q")))
    assert M.rows_of_updated_keys(before, TABLES) is None
    no_columns = M.Tables(KEYS, {})
    ok = O.SemiJoin(scan("parts@post", "p"), update_diff(), same(f("p", "pid"), Var("k")))
    assert M.rows_of_updated_keys(ok, no_columns) is None  # the tuple cannot be built


# --- join_with_own_update ------------------------------------------------------------------------------

def restricted_input() -> O.Operator:
    """γ SUM's input restricted to the updated parts (after rows_of_updated_keys)."""
    parts = project(scan("Δu(parts)", "du"), p=PARTS_POST)
    return O.Select(O.InnerJoin(parts, scan("devices_parts@post", "dp"), Call("eq", (f("p", "pid"), f("dp", "pid")))),
                    Call("gt", (f("dp", "did"), Const(0, T.INT))))


def merged_update_diff() -> O.Project:
    return project(scan("Δu(parts)", "du"), k=f("du", "pid"), q=f("du", PRE_FIELD, "price"))


def test_join_of_the_restricted_input_with_its_update_is_the_update():
    before = O.InnerJoin(restricted_input(), merged_update_diff(), same(f("p", "pid"), Var("k")))
    after = M.join_with_own_update(before, TABLES)
    leaf = project(scan("Δu(parts)", "du"), p=PARTS_POST, k=f("du", "pid"), q=f("du", PRE_FIELD, "price"))
    joined = O.Select(O.InnerJoin(leaf, scan("devices_parts@post", "dp"), Call("eq", (f("p", "pid"), f("dp", "pid")))),
                      Call("gt", (f("dp", "did"), Const(0, T.INT))))
    assert after == project(joined, p=Var("p"), dp=Var("dp"), k=Var("k"), q=Var("q"))  # the join's order
    grouped = O.GroupBy(after, (("did", f("dp", "did")),), (("s", O.Aggregate("sum", Var("q"))),))
    assert M.drop_reordering_projection(grouped, TABLES) == O.GroupBy(joined, grouped.keys, grouped.aggregates)


def test_join_rule_renames_the_update_row_to_the_one_the_input_reads():
    other = O.Project(O.ScanCollection(O.Ground(), TableRef(source("Δu(parts)")), "du2"),
                      (("k", f("du2", "pid")),))
    parts = project(scan("Δu(parts)", "du"), p=PARTS_POST)
    after = M.join_with_own_update(O.InnerJoin(parts, other, same(f("p", "pid"), Var("k"))), TABLES)
    assert after == project(scan("Δu(parts)", "du"), p=PARTS_POST, k=f("du", "pid"))


@pytest.mark.parametrize("case", ["post state", "filtered update", "not the key", "null-padded side",
                                  "other table"])
def test_join_rule_leaves_other_joins_alone(case):
    cond = same(f("p", "pid"), Var("k"))
    left, right = restricted_input(), merged_update_diff()
    match case:
        case "post state":  # the restriction could not become the update's rows
            left = O.SemiJoin(scan("parts@post", "p"), right, cond)
        case "filtered update":
            right = O.Select(right, Call("gt", (Var("q"), Const(3, T.INT))))
        case "not the key":
            cond = same(f("p", "price"), Var("k"))
        case "null-padded side":  # padded rows would keep NULL for k and q instead of going
            left = O.LeftJoin(scan("devices_parts@post", "dp"), project(scan("Δu(parts)", "du"), p=PARTS_POST),
                              Call("eq", (f("p", "pid"), f("dp", "pid"))))
        case _:
            right = project(scan("Δu(devices)", "du"), k=f("du", "did"))
    assert M.join_with_own_update(O.InnerJoin(left, right, cond), TABLES) is None


# --- standard simplifications -------------------------------------------------------------------------

def test_projections_merge_and_read_constructed_fields():
    inner = project(scan("Δu(parts)", "du"), p=PARTS_POST, pre_p=f("du", PRE_FIELD))
    outer = project(inner, k=f("p", "pid"), q=f("pre_p", "price"), whole=Var("p"))
    assert M.merge_projections(outer, TABLES) == project(
        scan("Δu(parts)", "du"), k=f("du", "pid"), q=f("du", PRE_FIELD, "price"), whole=PARTS_POST)
    assert M.merge_projections(inner, TABLES) is None


@pytest.mark.parametrize("outputs, applies", [
    ((("b", Var("b")), ("a", Var("a"))), True),
    ((("a", Var("b")), ("b", Var("a"))), False),  # a renaming, not a reordering
    ((("a", Var("a")),), False),  # drops b
])
def test_reordering_projection_below_grouping(outputs, applies):
    p = O.InnerJoin(scan("parts@post", "a"), scan("parts@post", "b"))
    g = O.GroupBy(O.Project(p, outputs), (("x", f("a", "pid")),))
    assert M.drop_reordering_projection(g, TABLES) == (O.GroupBy(p, g.keys) if applies else None)


def test_every_rule_cites_its_identity():
    for rule in M.RULES:
        line = M.describe(rule)
        assert "→" in line and ("(standard: " in line or "(Fig. 2.8; C" in line)


# --- the driver ---------------------------------------------------------------------------------------

def test_minimize_script_keeps_shared_subplans_shared_and_names_its_rewrites():
    diff = update_diff()  # one object, read twice, as pass 3 composes it
    restricted = O.SemiJoin(scan("parts@post", "p"), diff, same(f("p", "pid"), Var("k")))
    grouped = O.GroupBy(O.InnerJoin(restricted, diff, same(f("p", "pid"), Var("k"))),
                        (("pid", f("p", "pid")),), (("d", O.Aggregate("sum", Var("q"))),))
    inc = Statement("increment", FROM_UPDATES, on=("pid",),
                    query=O.ReturnBag(grouped, TupleExpr((("pid", Var("pid")),))))
    keys = O.ReturnBag(O.Project(grouped, (("k2", Var("pid")),)), TupleExpr((("pid", Var("k2")),)))
    rep = Statement("replace", FROM_UPDATES, on=("pid",), keys=keys, rows=keys)
    script = DeltaScript("v", "id", (TableDiffs("parts", ("pid",), ("price",), ()),), (inc, rep))

    out = M.minimize_script(script, TYPES)
    g1 = out.statements[0].query.input
    g2 = out.statements[1].keys.input.input
    assert g1 is g2 and out.statements[1].rows is out.statements[1].keys
    assert g1.input == project(scan("Δu(parts)", "du"), p=PARTS_POST, k=f("du", "pid"),
                               q=f("du", PRE_FIELD, "price"))
    for s in out.statements:  # the subplan was rewritten once, both statements say so
        assert [r for r in s.rules if r.startswith("minimize: ")] == [
            f"minimize: {M.describe(r)}" for r in (M.merge_projections, M.rows_of_updated_keys,
                                                   M.join_with_own_update)]
        assert s.reads() == ("Δu(parts)",)
    assert M.minimize_script(out, TYPES).statements[0].query == out.statements[0].query  # a fixpoint


# --- the rewrites do not change results ---------------------------------------------------------------

PRE_PARTS = [{"pid": 1, "price": 10.0}, {"pid": 2, "price": 20.0}, {"pid": 3, "price": None},
             {"pid": 4, "price": 40.0}, {"pid": 5, "price": 50.0}]
POST_PARTS = [{"pid": 1, "price": 11.0}, {"pid": 2, "price": 20.0}, {"pid": 3, "price": 30.0},
              {"pid": 5, "price": None}, {"pid": 6, "price": 60.0}]  # 4 deleted, 6 inserted
DEVICES_PARTS = [{"did": d, "pid": p} for d in (1, 2, 3) for p in range(1, 7) if (d + p) % 2 or p == 1]
SCHEMAS = {"parts": pa.schema([("pid", pa.int64()), ("price", pa.float64())]),
           "devices_parts": pa.schema([("did", pa.int64()), ("pid", pa.int64())])}


def change_feed(pre: list[dict], post: list[dict], schema: pa.Schema) -> pa.Table:
    """The change data feed of one commit that turns ``pre`` into ``post`` (keyed on pid)."""
    a, b = {r["pid"]: r for r in pre}, {r["pid"]: r for r in post}
    rows = []
    for k in sorted(a.keys() | b.keys()):
        if k not in b:
            rows.append({**a[k], "_change_type": "delete"})
        elif k not in a:
            rows.append({**b[k], "_change_type": "insert"})
        elif a[k] != b[k]:
            rows += [{**a[k], "_change_type": "update_preimage"}, {**b[k], "_change_type": "update_postimage"}]
    fields = list(schema) + [pa.field("_change_type", pa.string()), pa.field("_commit_version", pa.int64())]
    return pa.Table.from_pylist([{**r, "_commit_version": 1} for r in rows], schema=pa.schema(fields))


def run(spark, plan: O.Operator, conditional: tuple[str, ...]) -> Counter:
    from idivm.exec.compiler import PlanCompiler
    from idivm.exec.delta_script import base_diffs
    td = (TableDiffs("parts", ("pid",), ("price",), conditional), TableDiffs("devices_parts", ("did", "pid"), (), ()))
    diffs = base_diffs(DeltaScript("v", "id", td, ()), {"parts": change_feed(PRE_PARTS, POST_PARTS, SCHEMAS["parts"])},
                       SCHEMAS)
    states = {("parts", "pre"): PRE_PARTS, ("parts", "post"): POST_PARTS,
              ("devices_parts", "pre"): DEVICES_PARTS, ("devices_parts", "post"): DEVICES_PARTS}

    def read(name: DiffRef | StateRef):
        if isinstance(name, DiffRef):
            return spark.createDataFrame(diffs.of(name))
        return spark.createDataFrame(pa.Table.from_pylist(states[name.table, name.state], schema=SCHEMAS[name.table]))

    variables = plan.output_variables()
    query = O.ReturnBag(plan, TupleExpr(tuple((v, Var(v)) for v in variables)))
    rows = PlanCompiler(spark, read).evaluate(query).collect()
    return Counter(json.dumps(r.asDict(recursive=True), sort_keys=True) for r in rows)


def test_base_diffs_keep_the_rows_of_replaced_keys():
    from idivm.exec.delta_script import base_diffs

    td = TableDiffs("parts", ("pid",), ("price",), ("price",))
    diffs = base_diffs(DeltaScript("v", "id", (td,), ()),
                       {"parts": change_feed(PRE_PARTS, POST_PARTS, SCHEMAS["parts"])}, {"parts": SCHEMAS["parts"]})
    assert sorted(diffs.keys["parts"].column("pid").to_pylist()) == [1, 3, 4, 5, 6]
    assert sorted(r["pid"] for r in diffs.pre_rows["parts"].to_pylist()) == [1, 3, 4, 5]
    assert sorted(r["pid"] for r in diffs.post_rows["parts"].to_pylist()) == [1, 3, 5, 6]
    assert {r["pid"]: r["price"] for r in diffs.post_rows["parts"].to_pylist()}[5] is None
    assert diffs.pre_rows["parts"].schema == SCHEMAS["parts"] == diffs.post_rows["parts"].schema


@pytest.mark.parametrize("state", ["pre", "post"])
def test_rewrites_keep_results(spark, state):
    replaced = O.InnerJoin(O.SemiJoin(scan(f"parts@{state}", "p"), keys_of("parts", k="pid"), same(f("p", "pid"), Var("k"))),
                           scan("devices_parts@post", "dp"), Call("eq", (f("p", "pid"), f("dp", "pid"))))
    after = M.rows_of_replaced_keys(replaced.left, TABLES)
    assert after is not None
    assert run(spark, replaced, ("price",)) == run(spark, replaced.with_inputs(after, replaced.right), ("price",))

    updated = O.SemiJoin(scan(f"parts@{state}", "p"), update_diff(), same(f("p", "pid"), Var("k")))
    after = M.rows_of_updated_keys(updated, TABLES)
    assert after is not None and run(spark, updated, ()) == run(spark, after, ())


def test_join_rewrite_keeps_results(spark):
    left = O.InnerJoin(O.SemiJoin(scan("parts@post", "p"), update_diff(), same(f("p", "pid"), Var("k"))),
                       scan("devices_parts@post", "dp"), Call("eq", (f("p", "pid"), f("dp", "pid"))))
    before = O.GroupBy(O.InnerJoin(left, update_diff(), same(f("p", "pid"), Var("k"))),
                       (("did", f("dp", "did")),),
                       (("d", O.Aggregate("sum", Call("sub", (f("p", "price"), Var("q"))))),))
    script = DeltaScript("v", "id", (TableDiffs("parts", ("pid",), ("price",), ()),),
                         (Statement("increment", FROM_UPDATES, query=O.ReturnBag(before, Var("d"))),))
    after = M.minimize_script(script, TYPES).statements[0].query.input
    assert not any(isinstance(o, O.InnerJoin) and isinstance(o.right, O.Project) for o in O.walk(after))
    assert not any(isinstance(o, O.SemiJoin) for o in O.walk(after))
    assert run(spark, before, ()) == run(spark, after, ())
    assert len(run(spark, after, ())) == 3  # three devices use an updated part


# --- the view of Fig. 2.1b -------------------------------------------------------------------------------

def script_of(name: str, strategy: str = "id") -> DeltaScript:
    view = build_view(parse_view(view_path(name).read_text(), name), TYPES)
    return generate(view.name, infer_provenance(view.plan, KEYS, TYPES, {}), KEYS, TYPES, strategy)


@pytest.mark.parametrize("strategy", ["id", "tuple"])
def test_inserts_into_devices_parts_read_the_inserted_rows_not_the_table(strategy):
    script = script_of("devices_v", strategy)
    (s,) = [s for s in script.statements if s.origin.startswith("Δ(devices_parts)")]
    assert "devices_parts@post" not in s.reads() and "Δpost(devices_parts)" in s.reads()
    scans = [o for o in O.walk(s.rows) if isinstance(o, O.ScanCollection)]
    assert [str(o.source.name) for o in scans if "devices_parts" in str(o.source.name)] == ["Δpost(devices_parts)"]
    assert any(r.startswith("minimize: ") for r in s.rules)


def test_insert_into_devices_parts_is_maintained_from_the_inserted_rows(make_warehouse, tmp_path):
    from idivm.datasets import sample_path

    wh = make_warehouse()
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    wh.define(view_path("devices_v").read_text(), strategy="id")
    parts = [json.loads(line) for line in sample_path("devices", "parts").read_text().splitlines() if line.strip()]
    phones = [json.loads(line)["did"] for line in sample_path("devices", "devices").read_text().splitlines()
              if line.strip() and json.loads(line)["category"] == "phone"]
    present = {(r["did"], r["pid"]) for r in (json.loads(line) for line in
               sample_path("devices", "devices_parts").read_text().splitlines() if line.strip())}
    new = next({"did": d, "pid": p["pid"]} for d in phones for p in parts if (d, p["pid"]) not in present)
    (tmp_path / "dp.jsonl").write_text(json.dumps(new) + "\n")
    wh.ingest("devices_parts", tmp_path / "dp.jsonl", format="rows")
    before = len(wh.rows("phone_parts"))
    (result,) = wh.maintain("phone_parts")
    assert (result.inserted, result.deleted) == (1, 0)
    assert len(wh.rows("phone_parts")) == before + 1
    assert wh.verify("phone_parts").ok


def test_anti_join_matches_void_ids_of_in_memory_frames(spark):
    """``Δpre``/``Δpost`` are in-memory frames; a view ID that is NULL by construction (the
    other union branch's) has Spark's void type, on which ``<=>`` joins of two in-memory
    relations found no match: the executor compares such keys cast."""
    from pyspark.sql import functions as F

    from idivm.exec.delta_script import _match

    schema = pa.schema([("cid", pa.int64())])

    def ids(rows):
        df = spark.createDataFrame(pa.Table.from_pylist(rows, schema=schema))
        return df.select(F.lit(1).alias("b"), F.lit(None).alias("e"), F.col("cid"))

    deleted, inserted = ids([{"cid": 4}]), ids([{"cid": 4}, {"cid": 16}])
    assert _match(deleted, inserted, ["b", "e", "cid"], "left_anti").collect() == []
    assert _match(inserted, deleted, ["b", "e", "cid"], "left_semi").columns == ["b", "e", "cid"]
