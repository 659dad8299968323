"""AGCA (DBToaster §3): the interpreter against the paper's examples and direct Python
computations of the equivalent SQL, and the delta rules against the definition
``ΔQ(D, ΔD) = Q(D + ΔD) − Q(D)`` over random databases and updates (deletions and negative
multiplicities included)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from idivm.agca import (
    GMR, ONE, ZERO, AgcaError, Assign, Cmp, Const, Database, Exists, MapRef, Mul, Rel, Relation, Sum, Value, Var,
    degree, delta, delta_tuple, evaluate, inputs, outputs, relations, simplify, tup,
)

Q1, Q2, Q3 = 3, 7, 11  # the multiplicities q1, q2, q3 of Example 3's GMR R
PAPER_R = Relation(("A", "B"), {(1, 2): Q1, (3, 5): Q2, (4, 2): Q3})


def v(name: str) -> Var:
    return Var(name)


def test_example_3_an_atom_renames_and_selects_on_bound_variables():
    db = Database({"R": PAPER_R})
    assert evaluate(Rel("R", ("x", "y")), db, {"x": 3}) == {tup(x=3, y=5): Q2}
    # σ_{A<B}(R) as R(x, y) * (x < y)
    assert evaluate(Rel("R", ("x", "y")) * Cmp("<", v("x"), v("y")), db) == {tup(x=1, y=2): Q1, tup(x=3, y=5): Q2}


def test_example_4_sum_generalizes_group_by_sum():
    db = Database({"R": PAPER_R})
    q = Sum(("y",), Rel("R", ("x", "y")) * Const(2) * v("x"))
    assert evaluate(q, db) == {tup(y=2): 2 * Q1 + 8 * Q3, tup(y=5): 2 * 3 * Q2}


def _random_relation(rnd: random.Random, columns: tuple[str, ...], rows: int, negative: bool = False) -> Relation:
    out = GMR()
    for _ in range(rows):
        m = rnd.choice([-2, -1, 1, 2, 3]) if negative else rnd.choice([1, 1, 2])
        out.add(tuple(rnd.randint(0, 4) for _ in columns), m)
    return Relation(columns, dict(out))


def _expand(rel: Relation) -> list[tuple]:
    """The rows of a relation with positive multiplicities, each repeated as often."""
    return [row for row, m in rel.rows.items() for _ in range(m)]


# Example 5: SELECT * FROM R WHERE B < (SELECT SUM(D) FROM S WHERE A > C)
NESTED_INNER = Sum((), Rel("S", ("C", "D")) * Cmp(">", v("A"), v("C")) * v("D"))
NESTED = Sum(("A", "B"), Rel("R", ("A", "B")) * Assign("z", NESTED_INNER) * Cmp("<", v("B"), v("z")))
# Example 6: SELECT SUM(A * D) FROM R, S WHERE B = C
JOIN_SUM = Sum((), Rel("R", ("A", "B")) * Rel("S", ("C", "D")) * Cmp("=", v("B"), v("C")) * v("A") * v("D"))


@pytest.mark.parametrize("seed", range(5))
def test_examples_5_and_6_equal_their_sql_computed_directly(seed):
    rnd = random.Random(seed)
    r, s = _random_relation(rnd, ("A", "B"), 8), _random_relation(rnd, ("C", "D"), 8)
    db = Database({"R": r, "S": s})
    expected = Counter()
    for a, b in _expand(r):
        if b < sum(d for c, d in _expand(s) if a > c):
            expected[tup(A=a, B=b)] += 1
    assert evaluate(NESTED, db) == dict(expected)
    total = sum(a * d for a, b in _expand(r) for c, d in _expand(s) if b == c)
    assert evaluate(JOIN_SUM, db) == ({(): total} if total else {})


def test_binding_patterns_of_example_5():
    assert inputs(NESTED_INNER) == {"A"} and outputs(NESTED_INNER) == frozenset()
    assert inputs(NESTED) == frozenset() and outputs(NESTED) == {"A", "B"}
    assert inputs(Rel("R", ("x", "y")) * Cmp("<", v("x"), v("w"))) == {"w"}
    assert inputs(MapRef("M", ("x",), ("y",))) == {"x"} and outputs(MapRef("M", ("x",), ("y",))) == {"y"}
    assert relations(NESTED) == {"R", "S"} and degree(JOIN_SUM) == 2 and degree(NESTED) == 2


QUERIES = {
    "ex4": Sum(("y",), Rel("R", ("x", "y")) * Const(2) * v("x")),
    "ex5 nested aggregate": NESTED,
    "ex6 join sum": JOIN_SUM,
    "self join": Sum(("B",), Rel("R", ("A", "B")) * Rel("R", ("B", "C")) * v("C")),
    "union of groupings": Sum(("A",), Rel("R", ("A", "B"))) + Sum(("A",), Rel("S", ("A", "D")) * Const(-3)),
    "count per group over a comparison": Sum(("C",), Rel("S", ("C", "D")) * Cmp("<=", v("D"), Const(2))),
    "nested count compared": Sum(("A",), Rel("R", ("A", "B")) * Assign("n", Sum((), Rel("S", ("C", "D"))
                                                                                 * Cmp("=", v("C"), v("B"))))
                                 * Cmp(">", v("n"), Const(1))),
}


@pytest.mark.parametrize("name", QUERIES)
@pytest.mark.parametrize("seed", range(8))
def test_the_delta_of_a_query_is_its_change_under_a_batch_update(name, seed):
    rnd = random.Random(seed)
    q = QUERIES[name]
    db = Database({"R": _random_relation(rnd, ("A", "B"), 6), "S": _random_relation(rnd, ("C", "D"), 6)},
                  deltas={"R": _random_relation(rnd, ("A", "B"), 3, negative=True),
                          "S": _random_relation(rnd, ("C", "D"), 3, negative=True)})
    change = GMR(evaluate(q, db.updated())) - GMR(evaluate(q, db))
    assert evaluate(delta(q), db) == change
    # the delta for an update of R alone
    only_r = Database(db.relations, {"R": db.deltas["R"]})
    assert evaluate(delta(q, {"R"}), only_r) == GMR(evaluate(q, only_r.updated())) - GMR(evaluate(q, only_r))


@pytest.mark.parametrize("name", QUERIES)
@pytest.mark.parametrize("seed", range(4))
def test_single_tuple_deltas_with_constants_and_with_trigger_variables(name, seed):
    rnd = random.Random(100 + seed)
    q = QUERIES[name]
    base = {"R": _random_relation(rnd, ("A", "B"), 6), "S": _random_relation(rnd, ("C", "D"), 6)}
    for relation in ("R", "S"):
        row = (rnd.randint(0, 4), rnd.randint(0, 4))
        for sign in (1, -1):
            after = dict(base)
            after[relation] = base[relation].plus(Relation(base[relation].columns, {row: sign}))
            change = GMR(evaluate(q, Database(after))) - GMR(evaluate(q, Database(base)))
            assert evaluate(delta_tuple(q, relation, row, sign), Database(base)) == change
            trigger = delta_tuple(q, relation, (v("t1"), v("t2")), sign)
            assert inputs(trigger) <= {"t1", "t2"}
            assert evaluate(trigger, Database(base), {"t1": row[0], "t2": row[1]}) == change


def test_example_7_the_delta_of_the_nested_aggregate():
    # Δ_{+S(x,y)} Q_n = (A > x) * y for a bound A
    d = delta_tuple(NESTED_INNER, "S", (v("x"), v("y")))
    assert inputs(d) == {"A", "x", "y"}
    db = Database({"R": PAPER_R, "S": Relation(("C", "D"), {})})
    for a, x, y in [(5, 3, 4), (3, 3, 4), (1, 2, 9)]:
        assert evaluate(d, db, {"A": a, "x": x, "y": y}) == ({(): y} if a > x else {})
    # the delta of a query over R only, for an update of S, is 0
    assert delta_tuple(Sum(("A",), Rel("R", ("A", "B"))), "S", (1, 2)) == ZERO


def test_example_13_a_nested_delta_is_range_restricted_to_the_values_it_changes():
    """§5.3, Example 13: ``Δ_{+R(x)}(B := R(A)) = (A := x) * ((B := R(A) + 1) − (B := R(A)))``.
    Correlated on an equality, the delta is prefixed by the domain of the nested delta (for a
    batch, the correlation values its update atoms bind): it names only the tuples
    the update reaches, with the same value as the unrestricted rule everywhere."""
    nested = Sum((), Rel("R", ("A1",)) * Cmp("=", v("A1"), v("A")))
    single = delta_tuple(Assign("B", nested), "R", (v("x"),))
    assert isinstance(single, Mul) and isinstance(single.terms[0], Exists)
    db = Database({"R": Relation(("A1",), {(1,): 1, (2,): 2})})
    assert evaluate(single, db, {"x": 2, "A": 2}) == {(("A", 2), ("B", 3)): 1, (("A", 2), ("B", 2)): -1}
    assert evaluate(single, db, {"x": 2, "A": 1}) == {}  # A is not the updated value: restricted out
    batch = delta(Assign("B", nested), {"R"})
    assert batch.terms[0] == Exists(Sum(("A",), Exists(Rel("R", ("A1",), delta=True) * Assign("A", v("A1")))))
    update = Database({"R": Relation(("A1",), {(1,): 1, (2,): 2})}, {"R": Relation(("A1",), {(2,): 1, (3,): -1})})
    assert evaluate(batch.terms[0], update) == {(("A", 2),): 1, (("A", 3),): 1}
    # correlated on an inequality the delta keeps its whole range (no restriction)
    unequal = Sum((), Rel("R", ("A1",)) * Cmp("<", v("A1"), v("A")))
    assert not any(isinstance(t, Exists) for t in subterms(delta(Assign("B", unequal), {"R"})))


def test_simplify_applies_the_identities_and_cancels_q_minus_q():
    r = Rel("R", ("A", "B"))
    assert simplify(r + ZERO) == r
    assert simplify(r * ONE) == r
    assert simplify(r * ZERO) == ZERO
    assert simplify(r - r) == ZERO
    assert simplify(Const(2) * r * Const(3)) == Const(6) * r
    assert simplify(r + r) == Const(2) * r
    assert simplify(Sum(("A",), ZERO)) == ZERO
    assert simplify(Cmp("<", Const(1), Const(2))) == ONE and simplify(Cmp("=", Value("a"), Value("b"))) == ZERO
    # the rule for := leaves (x := Q + ΔQ) − (x := Q); where ΔQ is 0 it is 0
    assert delta(Sum(("A",), r * Assign("z", Sum((), Rel("S", ("C", "D"))))), {"R"}) == \
        Sum(("A",), Rel("R", ("A", "B"), delta=True) * Assign("z", Sum((), Rel("S", ("C", "D")))))


@pytest.mark.parametrize("name", QUERIES)
def test_simplify_keeps_the_meaning(name):
    rnd = random.Random(7)
    q = QUERIES[name]
    noisy = (q * ONE + ZERO) * Const(2) - q + Sum(("A",), ZERO)
    db = Database({"R": _random_relation(rnd, ("A", "B"), 6), "S": _random_relation(rnd, ("C", "D"), 6)})
    assert evaluate(simplify(noisy), db) == evaluate(q, db)


def test_errors_name_the_variable_or_relation():
    db = Database({"R": PAPER_R})
    with pytest.raises(AgcaError, match="variable w is not bound"):
        evaluate(Rel("R", ("x", "y")) * Cmp("<", v("x"), v("w")), db)
    with pytest.raises(AgcaError, match="R has 2 columns, the atom names 3"):
        evaluate(Rel("R", ("x", "y", "z")), db)
    with pytest.raises(AgcaError, match="groups"):
        evaluate(Assign("z", Sum(("x",), Rel("R", ("x", "y")))), db)
    with pytest.raises(AgcaError, match="unknown relation T"):
        evaluate(Rel("T", ("x",)), db)
    with pytest.raises(AgcaError, match="input x unbound"):
        evaluate(MapRef("M", ("x",), ("y",)), db)


def test_a_map_is_read_at_its_bound_inputs():
    m = GMR({tup(x=1, y=2): 5, tup(x=1, y=3): -1, tup(x=2, y=2): 4})
    db = Database({}, maps={"M": m})
    assert evaluate(MapRef("M", ("x",), ("y",)), db, {"x": 1}) == {tup(y=2): 5, tup(y=3): -1}


def test_a_group_by_variable_the_context_binds_is_an_input_of_the_sum():
    q = Sum(("A", "y"), Rel("R", ("x", "y")) * Cmp("<", v("x"), v("A")))
    db = Database({"R": PAPER_R})
    assert inputs(q) == {"A"} and outputs(q) == {"y"}
    assert evaluate(q, db, {"A": 4}) == {tup(A=4, y=2): Q1, tup(A=4, y=5): Q2}
    with pytest.raises(AgcaError, match="group-by variable A"):
        evaluate(Sum(("A",), Rel("R", ("x", "y"))), db)


# ----------------------------------------------------------------------------- trigger programs

from idivm.agca.terms import canonical, subterms  # noqa: E402
from idivm.agca.viewlet import apply_batch, apply_update, compile_program, initial_maps  # noqa: E402

CHAIN = Sum((), Rel("R", ("A", "B")) * Rel("S", ("B", "C")) * Rel("T", ("C", "D")))
PROGRAMS = {
    "ex4 group sum": QUERIES["ex4"],
    "ex6 join sum": JOIN_SUM,
    "ex10 chain of three": CHAIN,
    "self join": QUERIES["self join"],
    "group-by join with a local condition": Sum(("A",), Rel("R", ("A", "B")) * Rel("S", ("B", "C"))
                                                 * Cmp("<", v("C"), Const(3)) * v("C")),
    "comparison across relations": Sum((), Rel("R", ("A", "B")) * Rel("S", ("B", "D")) * Cmp("<", v("A"), v("D"))),
    "union of groupings": QUERIES["union of groupings"],
    "ex5 nested aggregate correlated on an inequality": NESTED,
    "nested count correlated on an equality": QUERIES["nested count compared"],
    "nested sum correlated on an equality": Sum(("A",), Rel("R", ("A", "B")) * Assign("z", Sum((), Rel("S", ("C", "D"))
                                                                                           * Cmp("=", v("C"), v("A")) * v("D")))
                                                * Cmp("<", v("B"), v("z")) * v("B")),
    "uncorrelated nested aggregates (PSP's shape)": Sum((), Rel("R", ("A", "B")) * Rel("S", ("C", "D"))
                                                       * Assign("z1", Sum((), Rel("R", ("A1", "B1")) * v("B1") * Const(0.5)))
                                                       * Cmp(">", v("B"), v("z1"))
                                                       * Assign("z2", Sum((), Rel("S", ("C1", "D1")) * v("D1") * Const(0.5)))
                                                       * Cmp(">", v("D"), v("z2"))
                                                       * (v("A") - v("C"))),
    "independent factors, each with a nested aggregate on an inequality (MST's shape)":
        Sum((), Rel("R", ("A", "B")) * Rel("S", ("C", "D"))
            * Assign("z1", Sum((), Rel("R", ("A1", "B1")) * Cmp(">", v("A1"), v("A")) * v("B1")))
            * Cmp("<", v("z1"), Const(4))
            * Assign("z2", Sum((), Rel("S", ("C1", "D1")) * Cmp("<=", v("C"), v("C1")) * v("D1")))
            * Cmp(">", v("z2"), Const(1))
            * (v("B") + v("D"))),
}
COLUMNS = {"R": ("A", "B"), "S": ("C", "D"), "T": ("E", "F")}


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("seed", range(3))
def test_a_trigger_program_keeps_every_map_equal_to_its_definition(name, seed):
    """A random stream of single-tuple inserts and deletes (of tuples present, and of absent
    ones: negative multiplicities), from a random start: after every update every map equals
    its definition evaluated over the updated database."""
    rnd = random.Random(seed)
    query = PROGRAMS[name]
    program = compile_program(query)
    rels = {r: _random_relation(rnd, COLUMNS[r], 5) for r in relations(query)}
    maps = initial_maps(program, Database(rels))
    for _ in range(25):
        r = rnd.choice(sorted(rels))
        present = [row for row, m in rels[r].rows.items() if m > 0]
        if present and rnd.random() < 0.4:
            row, sign = rnd.choice(present), -1
        else:
            row, sign = (rnd.randint(0, 3), rnd.randint(0, 3)), rnd.choice([1, 1, 1, -1])
        apply_update(program, maps, r, row, sign)
        rels[r] = rels[r].plus(Relation(COLUMNS[r], {row: sign}))
        db = Database(rels)
        for m in program.maps.values():
            assert maps[m.name] == evaluate(m.definition, db), f"{m.name} after {'+-'[sign < 0]}{r}{row}"
    assert maps["Q"] == evaluate(query, Database(rels))


def test_example_10_the_insert_trigger_of_s_reads_two_first_order_maps():
    program = compile_program(CHAIN)
    (q_stmt,) = [s for s in program.triggers[("S", 1)].statements if s.target == "Q"]
    refs = {program.maps[t.name].definition for t in q_stmt.rhs.term.terms if isinstance(t, MapRef)}
    assert refs == {Sum(("B",), Rel("R", ("A", "B"))), Sum(("C",), Rel("T", ("C", "D")))}
    # the auxiliary maps have a lower degree than the query (Theorem 1), and each is maintained
    assert all(degree(m.definition) < degree(CHAIN) for m in program.maps.values() if m.name != "Q")
    targets = {s.target for t in program.triggers.values() for s in t.statements}
    assert targets == set(program.maps)


def test_example_11_a_nested_aggregate_is_evaluated_over_maps_of_its_own():
    """The maps of Example 11: M_Q,1 = R(A, B) and M_Q,2 = Sum[C](S(C, D) * D); an update of S
    evaluates the outer query over them with the new and the old value of the nested sum."""
    program = compile_program(NESTED)
    definitions = {m.definition for m in program.maps.values() if m.name != "Q"}
    assert Sum(("A", "B"), Rel("R", ("A", "B"))) in definitions
    assert Sum(("C",), Rel("S", ("C", "D")) * v("D")) in definitions
    assert all(not any(isinstance(t, Assign) and relations(t) for t in _factors(m.definition))
               for m in program.maps.values() if m.name != "Q")


#: DBToaster §6.2's PSP over the condensed schema B(BP, BV), A(AP, AV): the price spread of the
#: bids and asks whose volume exceeds a ten-thousandth of their side's total volume
PSP = Sum((), Rel("B", ("BP", "BV")) * Rel("A", ("AP", "AV")) * (v("AP") - v("BP"))
          * Assign("v1", Sum((), Rel("B", ("BP1", "BV1")) * v("BV1") * Const(0.0001))) * Cmp(">", v("BV"), v("v1"))
          * Assign("v2", Sum((), Rel("A", ("AP1", "AV1")) * v("AV1") * Const(0.0001))) * Cmp(">", v("AV"), v("v2")))


def test_section_6_2_psp_is_evaluated_again_over_maps_of_each_side():
    """Fig. 4: an insert into B adds to the price sum and the count of its volume and to B's
    total volume, then evaluates Q again (``Q :=``) over those maps and A's: no map joins B
    with A (no cross product), and Q is not maintained by a delta that evaluates it twice."""
    program = compile_program(PSP)
    definitions = {m.definition for m in program.maps.values() if m.name != "Q"}
    assert Sum(("BV",), Rel("B", ("BP", "BV"))) in definitions  # Q_B3[BV]: the count per volume
    assert Sum(("BV",), Rel("B", ("BP", "BV")) * v("BP")) in definitions  # Q_B1[BV]: the price sum per volume
    assert Sum(("AV",), Rel("A", ("AP", "AV"))) in definitions
    assert Sum(("AV",), Rel("A", ("AP", "AV")) * v("AP")) in definitions
    assert all(len(relations(d)) == 1 for d in definitions)
    for rel in ("A", "B"):
        for sign in (1, -1):
            statements = program.triggers[(rel, sign)].statements
            (q,) = [s for s in statements if s.target == "Q"]
            assert q.replace and str(q).startswith("Q := ")
            assert all(not s.replace for s in statements if s.target != "Q")  # the maps' own: increments
            assert "A" not in relations(q.rhs) and "B" not in relations(q.rhs)  # read off the maps only


def test_section_6_1_q18a_keeps_its_delta_where_the_nested_sum_is_correlated_on_an_equality():
    """Fig. 3: the nested sum of the order's quantities is correlated on the order key, which
    an update of LI binds, so Q is maintained by deltas (``+=``) over the maps Q_O1[CK] = C,
    Q_O2[OK] = Sum(LI * QTY) and Q_LI[CK, OK] = C * O."""
    q18 = Sum(("CK",), Rel("C", ("CK",)) * Rel("O", ("CK", "OK")) * Rel("LI", ("OK", "QTY")) * v("QTY")
              * Assign("x", Sum((), Rel("LI", ("OK1", "QTY1")) * Cmp("=", v("OK"), v("OK1")) * v("QTY1")))
              * Cmp("<", Const(100), v("x")))
    program = compile_program(q18)
    assert not any(s.replace for t in program.triggers.values() for s in t.statements)
    forms = {canonical(m.definition)[0] for m in program.maps.values() if m.name != "Q"}
    assert canonical(Sum(("OK",), Rel("LI", ("OK", "QTY")) * v("QTY")))[0] in forms
    assert canonical(Sum(("CK", "OK"), Rel("C", ("CK",)) * Rel("O", ("CK", "OK"))))[0] in forms
    assert canonical(Sum(("CK",), Rel("C", ("CK",))))[0] in forms


def _factors(t):
    return t.term.terms if isinstance(t, Sum) and hasattr(t.term, "terms") else ()


def test_a_query_with_input_variables_is_refused_by_the_transform():
    with pytest.raises(AgcaError, match="no input variables"):
        compile_program(NESTED_INNER)


def test_a_local_condition_and_factor_go_into_the_map_of_their_component():
    program = compile_program(PROGRAMS["group-by join with a local condition"])
    (q_stmt,) = [s for s in program.triggers[("R", 1)].statements if s.target == "Q"]
    (ref,) = [t for t in q_stmt.rhs.term.terms if isinstance(t, MapRef)]
    assert ref.inputs == ("B",) and ref.outputs == ()
    definition = program.maps[ref.name].definition
    assert definition.group == ("B",)
    assert set(definition.term.terms) == {Rel("S", ("B", "C")), Cmp("<", v("C"), Const(3)), v("C")}


def test_example_2_the_triggers_of_a_weighted_join_sum():
    """DBToaster Example 2: Q = SUM(LI.PRICE * O.XCH) over Orders ⋈ Lineitem on ORDK; on an
    insert into O, ``Q += xch * Q_O[ordk]`` and ``Q_LI[ordk] += xch``, with
    ``Q_O[ordk] = Sum(price)`` over Lineitem and ``Q_LI[ordk] = Sum(xch)`` over Orders."""
    q = Sum((), Rel("O", ("ok", "ck", "xch")) * Rel("LI", ("lk", "pk", "price")) * Cmp("=", v("ok"), v("lk"))
            * v("price") * v("xch"))
    program = compile_program(q)
    on_o = {s.target: s.rhs for s in program.triggers[("O", 1)].statements}
    assert len(on_o) == 2 and "Q" in on_o
    (ref,) = [t for t in on_o["Q"].term.terms if isinstance(t, MapRef)]
    assert ref.inputs == ("lk",) and ref.outputs == ()  # Q_O read at the order's key: no loop
    assert program.maps[ref.name].definition == Sum(("lk",), Rel("LI", ("lk", "pk", "price")) * v("price"))
    (q_li,) = [m for m in program.maps.values() if m.name != "Q" and "O" in relations(m.definition)]
    assert q_li.keys == ("ok",) and q_li.definition == Sum(("ok",), Rel("O", ("ok", "ck", "xch")) * v("xch"))
    # the first-order maps' own triggers add the update's value: their deltas are constant
    (inc,) = [s.rhs for s in program.triggers[("O", 1)].statements if s.target == q_li.name]
    assert degree(inc) == 0 and not any(isinstance(t, MapRef) for t in inc.term.terms)


# ----------------------------------------------------------------------------- DuckDB as the oracle

#: the queries of QUERIES as SQL over tables r(a, b) and s(c, d) whose rows repeat as often as
#: their multiplicity: the group-by columns and the summed value of each group (non-zero ones)
SQL = {
    "ex4": "SELECT b, SUM(2 * a) FROM r GROUP BY b",
    "ex5 nested aggregate": "SELECT a, b, COUNT(*) FROM r WHERE b < (SELECT COALESCE(SUM(d), 0) FROM s WHERE r.a > s.c) "
                            "GROUP BY a, b",
    "ex6 join sum": "SELECT SUM(a * d) FROM r, s WHERE b = c",
    "self join": "SELECT r1.b, SUM(r2.b) FROM r r1, r r2 WHERE r1.b = r2.a GROUP BY r1.b",
    "union of groupings": "SELECT a, SUM(n) FROM (SELECT a, 1 AS n FROM r UNION ALL SELECT c, -3 FROM s) GROUP BY a",
    "count per group over a comparison": "SELECT c, COUNT(*) FROM s WHERE d <= 2 GROUP BY c",
    "nested count compared": "SELECT a, COUNT(*) FROM r WHERE (SELECT COUNT(*) FROM s WHERE s.c = r.b) > 1 GROUP BY a",
}


@pytest.mark.parametrize("name", SQL)
@pytest.mark.parametrize("seed", range(3))
def test_the_interpreter_agrees_with_duckdb(name, seed):
    duckdb = pytest.importorskip("duckdb")
    rnd = random.Random(500 + seed)
    r, s = _random_relation(rnd, ("A", "B"), 10), _random_relation(rnd, ("C", "D"), 10)
    con = duckdb.connect()
    con.execute("CREATE TABLE r (a INTEGER, b INTEGER)")
    con.execute("CREATE TABLE s (c INTEGER, d INTEGER)")
    con.executemany("INSERT INTO r VALUES (?, ?)", _expand(r))
    con.executemany("INSERT INTO s VALUES (?, ?)", _expand(s))
    rows = con.execute(SQL[name]).fetchall()
    q = QUERIES[name]
    names = sorted(outputs(q))
    expected = {tuple(zip(names, row[:-1])): row[-1] for row in rows if row[-1]}
    assert evaluate(q, Database({"R": r, "S": s})) == expected


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("seed", range(3))
def test_batch_triggers_keep_every_map_equal_to_its_definition(name, seed):
    """Batches that change several relations at once (signed rows, a relation joined with
    itself included), applied one relation after the other: every map equals its definition
    after every batch."""
    query = PROGRAMS[name]
    program = compile_program(query, batch=True)
    assert all(sign == 0 for _, sign in program.triggers)
    _random_batches(random.Random(900 + seed), program, {r: COLUMNS[r] for r in relations(query)}, 6, 0.7)


def _random_batches(rnd: random.Random, program, columns: dict[str, tuple[str, ...]], rows: int,
                    share: float) -> None:
    """Random relations of ``columns`` (``rows`` rows each), then six batches of signed rows,
    each changing a relation with probability ``share``, run through ``program``'s batch
    triggers: after each, every map equals its definition over the changed relations."""
    rels = {r: _random_relation(rnd, cols, rows) for r, cols in columns.items()}
    maps = initial_maps(program, Database(rels))
    for _ in range(6):
        updates = {r: _random_relation(rnd, columns[r], rnd.randint(1, 4), negative=True) for r in rels
                   if rnd.random() < share}
        apply_batch(program, maps, updates)
        for r, d in updates.items():
            rels[r] = rels[r].plus(d)
        db = Database(rels)
        for m in program.maps.values():
            assert maps[m.name] == evaluate(m.definition, db), m.name


def test_a_static_relation_gets_no_trigger_and_no_maps_of_its_deltas():
    full = compile_program(CHAIN)
    program = compile_program(CHAIN, static={"R"})
    assert {rel for rel, _ in program.triggers} == {"S", "T"}
    assert len(program.maps) < len(full.maps)
    rnd = random.Random(5)
    rels = {r: _random_relation(rnd, COLUMNS[r], 5) for r in ("R", "S", "T")}
    maps = initial_maps(program, Database(rels))
    for r, row, sign in [("S", (1, 2), 1), ("T", (2, 0), 1), ("S", (0, 1), -1)]:
        apply_update(program, maps, r, row, sign)
        rels[r] = rels[r].plus(Relation(COLUMNS[r], {row: sign}))
    assert maps["Q"] == evaluate(CHAIN, Database(rels))


# ----------------------------------------------------------------------------- factorization

#: TPC-H Q5's join (DBToaster §6.1): customers and suppliers of one nation, joined through orders
#: and lineitems, revenue per nation of a region; the joins as shared variables (``Q5_EQ``: as
#: equalities, which unification turns into the same; the interpreter evaluates ``Q5`` faster)
Q5_COLUMNS = {"C": ("ck", "cn"), "O": ("ok", "ock"), "L": ("lok", "lsk", "rev"), "S": ("sk", "sn"),
              "N": ("nk", "name", "nrk"), "R": ("rk",)}
Q5 = Sum(("name",), Rel("C", ("ck", "cn")) * Rel("O", ("ok", "ck")) * Rel("L", ("ok", "sk", "rev"))
         * Rel("S", ("sk", "cn")) * Rel("N", ("cn", "name", "rk")) * Rel("R", ("rk",)) * v("rev"))
Q5_EQ = Sum(("name",), Rel("C", ("ck", "cn")) * Rel("O", ("ok", "ock")) * Rel("L", ("lok", "lsk", "rev"))
            * Rel("S", ("sk", "sn")) * Rel("N", ("nk", "name", "nrk")) * Rel("R", ("rk",))
            * Cmp("=", v("ck"), v("ock")) * Cmp("=", v("ok"), v("lok")) * Cmp("=", v("lsk"), v("sk"))
            * Cmp("=", v("cn"), v("sn")) * Cmp("=", v("sn"), v("nk")) * Cmp("=", v("nrk"), v("rk")) * v("rev"))


@pytest.mark.parametrize("query", [Q5, Q5_EQ], ids=["joins", "equalities"])
@pytest.mark.parametrize("batch", [False, True])
def test_q5_maps_are_factorized_at_the_nation(batch, query):
    """On an update of an order, DBToaster's Q5 maps customers by (custkey, nationkey) and
    lineitems with their suppliers by (orderkey, nationkey), summed over the nation: no map
    joins customers with suppliers except through orders and lineitems (such a map holds every
    pair of a customer and a supplier of one nation), and maps equal up to the names of their
    variables and the order of their atoms are one map."""
    program = compile_program(query, batch=batch)
    for m in program.maps.values():
        rels = relations(m.definition)
        if {"C", "S"} <= rels:
            assert {"O", "L"} <= rels, str(m.definition)
        if {"O", "N"} <= rels or {"L", "N"} <= rels:
            assert {"C", "S"} <= rels, str(m.definition)
    definitions = {m.definition for m in program.maps.values()}
    assert Sum(("ck", "cn"), Rel("C", ("ck", "cn"))) in definitions or any(
        relations(m.definition) == {"C"} and len(m.keys) == 2 for m in program.maps.values())
    forms = [canonical(m.definition)[0] for m in program.maps.values()]
    assert len(forms) == len(set(forms)) and len(program.maps) <= 16


@pytest.mark.parametrize("seed", range(3))
def test_factorized_q5_maps_equal_their_definitions_through_batches(seed):
    """Batches changing several of Q5's relations at once: after each, every map (the view's
    map ``Q`` among them) equals its definition."""
    _random_batches(random.Random(1300 + seed), compile_program(Q5, batch=True), Q5_COLUMNS, 10, 0.6)


@pytest.mark.parametrize("seed", range(3))
def test_factorized_q5_single_tuple_triggers(seed):
    rnd = random.Random(1400 + seed)
    program = compile_program(Q5)
    rels = {r: _random_relation(rnd, cols, 10) for r, cols in Q5_COLUMNS.items()}
    maps = initial_maps(program, Database(rels))
    for _ in range(20):
        r = rnd.choice(sorted(rels))
        row, sign = tuple(rnd.randint(0, 4) for _ in Q5_COLUMNS[r]), rnd.choice([1, 1, -1])
        apply_update(program, maps, r, row, sign)
        rels[r] = rels[r].plus(Relation(Q5_COLUMNS[r], {row: sign}))
    db = Database(rels)
    for m in program.maps.values():
        assert maps[m.name] == evaluate(m.definition, db), m.name
