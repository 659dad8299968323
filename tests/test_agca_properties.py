"""Properties of AGCA's delta rules and trigger programs over random queries and random data
(hypothesis), DBToaster §3.4 and §4: for a query ``Q`` built from relation atoms, products,
unions, Sum with group-by variables, comparisons, value factors and nested aggregates (:=),

* ``Q(D + ΔD) = Q(D) + ΔQ(D, ΔD)`` for batch updates of any relations (deletions and negative
  multiplicities included), and for single-tuple updates bound as trigger variables;
* ``simplify`` keeps the meaning of ``Q`` and of its delta;
* a batch trigger program (the viewlet transform) keeps every map equal to its definition
  through a sequence of updates.

The reference is the GMR interpreter, evaluated on the database before and after."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idivm.agca import GMR, Assign, Cmp, Const, Database, Rel, Relation, Sum, Var, delta, delta_tuple, evaluate, simplify
from idivm.agca.viewlet import apply_batch, compile_program, initial_maps

COLUMNS = {"R": ("A", "B"), "S": ("C", "D")}
VARIABLES = ("a", "b", "c", "d")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def monomials(draw, depth: int = 0):
    """A product of 1-3 relation atoms over shared variables, then conditions and value factors
    over the atoms' variables, and (not inside another) a nested aggregate compared with a
    constant; returns (term, its variables)."""
    atoms = [Rel(r, tuple(draw(st.sampled_from(VARIABLES)) for _ in range(2)))
             for r in draw(st.lists(st.sampled_from(("R", "S")), min_size=1, max_size=3))]
    bound = sorted({x for a in atoms for x in a.variables})
    factors = list(atoms)
    for _ in range(draw(st.integers(0, 2))):
        left = Var(draw(st.sampled_from(bound)))
        right = draw(st.one_of(st.builds(Const, st.integers(0, 4)), st.sampled_from(bound).map(Var)))
        factors.append(Cmp(draw(st.sampled_from(("=", "!=", "<", "<=", ">", ">="))), left, right))
    if draw(st.booleans()):
        factors.append(Var(draw(st.sampled_from(bound))))
    if draw(st.booleans()):
        factors.append(Const(draw(st.sampled_from((-2, 3)))))
    if depth == 0 and draw(st.booleans()):
        # n := Sum(S(u, w) * u = x [* w]) compared with a constant: a nested aggregate correlated on x
        x = draw(st.sampled_from(bound))
        inner = Rel("S", ("u", "w")) * Cmp("=", Var("u"), Var(x))
        if draw(st.booleans()):
            inner = inner * Var("w")
        factors.append(Assign("n", Sum((), inner)))
        factors.append(Cmp(draw(st.sampled_from((">", "<=", "="))), Var("n"), Const(draw(st.integers(0, 3)))))
    term = factors[0]
    for f in factors[1:]:
        term = term * f
    return term, bound


@st.composite
def queries(draw):
    """``Sum_G(m1) [+ Sum_G(m2)]``: group-by variables G common to the monomials."""
    first, bound = draw(monomials())
    group = tuple(draw(st.lists(st.sampled_from(bound), unique=True, max_size=2)))
    q = Sum(group, first)
    if draw(st.booleans()):
        second, other = draw(monomials())
        if set(group) <= set(other):
            q = q + Sum(group, second)
    return q


def relations(negative: bool = False, max_size: int = 6):
    multiplicity = st.sampled_from((-2, -1, 1, 2, 3) if negative else (1, 1, 2))
    rows = st.dictionaries(st.tuples(st.integers(0, 3), st.integers(0, 3)), multiplicity, max_size=max_size)
    return rows


def database(draw, negative_deltas: bool = True) -> Database:
    rels = {r: Relation(c, draw(relations())) for r, c in COLUMNS.items()}
    deltas = {r: Relation(c, draw(relations(negative_deltas, 3))) for r, c in COLUMNS.items()
              if draw(st.booleans())}
    return Database(rels, deltas)


@SETTINGS
@given(queries(), st.data())
def test_the_delta_is_the_change_of_the_query_under_a_batch_update(q, data):
    db = database(data.draw)
    change = GMR(evaluate(q, db.updated())) - GMR(evaluate(q, db))
    assert evaluate(delta(q), db) == change
    assert evaluate(simplify(delta(q)), db) == change
    assert evaluate(simplify(q), db) == evaluate(q, db)


@SETTINGS
@given(queries(), st.data())
def test_a_single_tuple_delta_bound_as_trigger_variables_is_the_change(q, data):
    base = {r: Relation(c, data.draw(relations())) for r, c in COLUMNS.items()}
    relation = data.draw(st.sampled_from(sorted(COLUMNS)))
    row = data.draw(st.tuples(st.integers(0, 3), st.integers(0, 3)))
    sign = data.draw(st.sampled_from((1, -1)))
    after = dict(base)
    after[relation] = base[relation].plus(Relation(COLUMNS[relation], {row: sign}))
    change = GMR(evaluate(q, Database(after))) - GMR(evaluate(q, Database(base)))
    trigger = delta_tuple(q, relation, (Var("t1"), Var("t2")), sign)
    assert evaluate(trigger, Database(base), {"t1": row[0], "t2": row[1]}) == change


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queries(), st.data())
def test_batch_triggers_keep_every_map_equal_to_its_definition(q, data):
    program = compile_program(q, batch=True)
    rels = {r: Relation(c, data.draw(relations())) for r, c in COLUMNS.items()}
    maps = initial_maps(program, Database(rels))
    for _ in range(data.draw(st.integers(1, 3))):
        updates = {r: Relation(c, data.draw(relations(True, 3))) for r, c in COLUMNS.items() if data.draw(st.booleans())}
        apply_batch(program, maps, updates)
        rels = {r: rels[r].plus(updates[r]) if r in updates else rels[r] for r in rels}
        for m in program.maps.values():
            assert maps[m.name] == evaluate(m.definition, Database(rels)), m.name
