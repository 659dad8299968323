"""Trigger programs of higher-order delta maps (DBToaster §4–§5): the viewlet transform with
the materialization decision of Higher-Order IVM.

:func:`compile_program` turns a query ``Q`` (no input variables) into maps and triggers.  For
every map ``M`` (at first ``Q`` itself) and every relation ``R`` it reads, the insert and the
delete trigger of ``R`` get the statement ``M[x⃗] += Δ±R(t⃗) M`` (Algorithm 1), its trigger
variables ``t⃗`` bound to the update's values.  The delta is not materialized whole (it has
the trigger variables as inputs and no finite support); as in Algorithm 2 its monomials are
split (polynomial expansion, §5.1): the relation atoms of a monomial fall into components
joined by variables the trigger does not bind (query decomposition), and each component is
materialized as a map ``Sum[k⃗](atoms * its local conditions and factors)`` keyed by the
variables the rest of the monomial needs; the statement reads those maps (:class:`MapRef`),
and the transform recurs on each new map.  Maps whose definitions are equal up to the names
of their variables are one map (read through renames).  The recursion ends because a delta
has a lower degree than its query (Theorem 1).

:func:`apply_update` runs a trigger over maps held as GMRs (the reference executor): every
statement reads the maps as they were before the update, then all increments are added;
:func:`apply_batch` runs the batch triggers of several relations' updates, one relation after
the other.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product

from idivm.agca.delta import delta, delta_tuple, simplify
from idivm.agca.gmr import GMR, AgcaError, Database, Relation, evaluate
from idivm.agca.terms import (
    ZERO, Add, Assign, Cmp, Exists, MapRef, Mul, Rel, Sum, Term, Var, atoms, canonical, inputs, map_refs,
    bindings, outputs, relations, rename, subterms,
)


@dataclass(frozen=True, slots=True)
class MapDef:
    """A materialized map: its name, key variables and the query that defines it."""

    name: str
    keys: tuple[str, ...]
    definition: Term


@dataclass(frozen=True, slots=True)
class Statement:
    """``foreach keys do target[keys] += rhs``: ``rhs`` reads the maps and the trigger variables.
    With ``replace``, ``target := rhs``: the map is evaluated again over the maps (§5.1's
    re-evaluation), and ``rhs`` reads them after the trigger's increments."""

    target: str
    rhs: Term
    replace: bool = False

    def __str__(self) -> str:
        return f"{self.target} {':=' if self.replace else '+='} {self.rhs}"


@dataclass(frozen=True, slots=True)
class Trigger:
    """The statements run on the insertion (``sign`` 1) or deletion (-1) of one tuple of
    ``relation``, whose values bind ``variables``."""

    relation: str
    sign: int
    variables: tuple[str, ...]
    statements: tuple[Statement, ...]

    @property
    def increments(self) -> tuple[Statement, ...]:
        """The statements ``M += …``: each reads the maps before the trigger."""
        return tuple(s for s in self.statements if not s.replace)

    @property
    def reevaluations(self) -> tuple[Statement, ...]:
        """The statements ``M := …``: each reads the maps after the trigger's increments."""
        return tuple(s for s in self.statements if s.replace)


@dataclass
class Program:
    """The maps of a query (``query``: the name of the map of its result) and their triggers."""

    query: str
    maps: dict[str, MapDef] = field(default_factory=dict)
    triggers: dict[tuple[str, int], Trigger] = field(default_factory=dict)
    #: the relations declared never to change, which have no trigger
    static: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [f"map {m.name}[{', '.join(m.keys)}] := {m.definition}" for m in self.maps.values()]
        if self.static:
            lines.append(f"static (no trigger, no map of their changes): {', '.join(self.static)}")
        for (rel, sign), t in sorted(self.triggers.items()):
            lines.append(f"on Δ{rel}:" if sign == 0 else f"on {'+' if sign > 0 else '-'}{rel}({', '.join(t.variables)}):")
            lines.extend(f"  {s}" for s in t.statements)
        return "\n".join(lines)


def compile_program(query: Term | Mapping[str, Term], name: str = "Q", *, batch: bool = False,
                    static: Collection[str] = ()) -> Program:
    """The trigger program that maintains ``query`` as map ``name`` (see the module doc):
    single-tuple triggers (``(relation, ±1)``), or with ``batch`` one trigger per relation
    (``(relation, 0)``) whose statements read the update ``ΔR`` (a GMR of signed rows: the
    batch delta of §3.4, its second-order terms ``ΔR * ΔR`` included).  Relations declared
    ``static`` never change: they get no trigger, and no map is made for their deltas (§5.1).
    ``query`` may also be several queries by map name (``name`` is then the program's name):
    one program maintains them all, sharing the maps their deltas have in common.
    Raises :class:`AgcaError` for a query with input variables."""
    queries = dict(query) if isinstance(query, Mapping) else {name: query}
    for q in queries.values():
        if inputs(q):
            raise AgcaError(f"a maintained query has no input variables; {q} has {', '.join(sorted(inputs(q)))}")
    program = Program(name, static=tuple(sorted(frozenset(static) & frozenset().union(
        *(relations(q) for q in queries.values())))))
    #: the canonical form of each map's definition -> (its name, its variables' canonical names)
    by_definition: dict[Term, tuple[str, dict[str, str]]] = {}
    statements: dict[tuple[str, int], list[Statement]] = {}
    arity: dict[str, int] = {}
    trigger_variables: dict[str, tuple[str, ...]] = {}
    pending = [(n, simplify(q)) for n, q in queries.items()]
    while pending:
        map_name, definition = pending.pop(0)
        keys = tuple(sorted(outputs(definition)))
        program.maps[map_name] = MapDef(map_name, keys, definition)
        form, here = canonical(definition)
        by_definition.setdefault(form, (map_name, here))
        reevaluation: Term | None = None
        for rel in sorted(relations(definition) - frozenset(static)):
            n = _arity(definition, rel, arity)
            variables = trigger_variables[rel] = () if batch else tuple(f"{rel}#{i}" for i in range(1, n + 1))
            for sign in ((0,) if batch else (1, -1)):
                if _reevaluated(definition, rel):
                    if reevaluation is None:
                        reevaluation = _decompose(definition, keys, frozenset(), program, by_definition, pending)
                        if map_name in {r.name for r in map_refs(reevaluation)}:
                            raise AgcaError(f"map {map_name} would be re-evaluated over itself: {definition}")
                    statements.setdefault((rel, sign), []).append(Statement(map_name, reevaluation, replace=True))
                    continue
                d = delta(definition, {rel}) if batch else \
                    delta_tuple(definition, rel, [Var(v) for v in variables], sign)
                if d == ZERO:
                    continue
                rhs = _decompose(d, keys, frozenset(variables), program, by_definition, pending)
                statements.setdefault((rel, sign), []).append(Statement(map_name, rhs))
    for (rel, sign), stmts in statements.items():
        program.triggers[(rel, sign)] = Trigger(rel, sign, trigger_variables[rel], tuple(stmts))
    return program


def _reevaluated(q: Term, rel: str) -> bool:
    """Whether a change of ``rel`` re-evaluates ``q`` over maps instead of adding its delta
    (DBToaster §5.1, deltas of nested aggregates): ``q`` has a nested aggregate over ``rel``
    that is not correlated on an equality.  Its delta ``(x := Q_N + ΔQ_N) − (x := Q_N)``
    evaluates the outer query twice, over every tuple, and is not simpler than ``q``; the delta
    pays off only where an equality with the outer query restricts it to the tuples the
    change names (TPC-H Q17's part key: the ``Exists`` range restriction of
    :func:`~idivm.agca.delta.delta`), which the other nested aggregates (uncorrelated, as in
    PSP; correlated on an inequality, as in VWAP and MST) lack."""
    for t in subterms(q):
        if isinstance(t, Assign) and isinstance(t.term, Term) and rel in relations(t.term):
            outer = inputs(t.term)
            if not any(isinstance(c, Cmp) and c.op == "=" and isinstance(c.left, Var) and isinstance(c.right, Var)
                       and (c.left.name in outer) != (c.right.name in outer) for c in subterms(t.term)):
                return True
    return False


def _arity(q: Term, rel: str, known: dict[str, int]) -> int:
    for a in atoms(q):
        if a.name == rel and known.setdefault(rel, len(a.variables)) != len(a.variables):
            raise AgcaError(f"relation {rel} is read with {known[rel]} and with {len(a.variables)} columns")
    return known[rel]


def _monomials(t: Term) -> list[tuple[tuple[str, ...] | None, list[Term]]]:
    """``t`` as a sum of (group-by variables or None, factors): sums distributed over products
    and pulled out of Sum (polynomial expansion, §5.1)."""
    match t:
        case Add(terms=ts):
            return [m for x in ts for m in _monomials(x)]
        case Sum(group=g, term=body):
            return [(g, f) for f in _expand(body)]
        case Mul(terms=ts):
            # c * Sum_g(q) = Sum_g(c * q) when c reads only g (simplify folds Sum_g(q) + Sum_g(q)
            # into 2 * Sum_g(q))
            sums = [x for x in ts if isinstance(x, Sum) and relations(x)]
            rest = [x for x in ts if not (isinstance(x, Sum) and relations(x))]
            if len(sums) == 1 and all(_variables(x) <= set(sums[0].group) for x in rest):
                inner = sums[0].term
                for x in rest:
                    inner = x * inner
                return _monomials(Sum(sums[0].group, inner))
    return [(None, f) for f in _expand(t)]


def _expand(t: Term) -> list[list[Term]]:
    match t:
        case Add(terms=ts):
            return [f for x in ts for f in _expand(x)]
        case Mul(terms=ts):
            return [[f for part in combo for f in part] for combo in product(*(_expand(x) for x in ts))]
        case Sum() if relations(t):
            raise AgcaError(f"a nested Sum over relations ({t}) is not decomposed here")
    return [[t]]


def _decompose(d: Term, keys: tuple[str, ...], trigger: frozenset[str], program: Program,
               by_definition: dict[Term, str], pending: list) -> Term:
    """The delta ``d`` of a map keyed by ``keys`` rewritten over maps of its relation
    components (new maps are added to ``program`` and queued in ``pending``)."""
    out: list[Term] = []
    for group, factors in _monomials(d):
        # a nested aggregate (x := Q_N over relations) is rewritten over maps of its own (§5.3,
        # the nested-aggregates rule): its correlation variables are inputs there, bound where
        # the statement evaluates it; only expressions without nested aggregates become maps
        factors = [Assign(f.var, _decompose(f.term, (), trigger | inputs(f.term), program, by_definition, pending))
                   if isinstance(f, Assign) and isinstance(f.term, Term) and relations(f.term) else f
                   for f in factors]
        # the update's atoms (a batch's ΔR) and the domains of nested deltas over them are read
        # first: their variables are bound
        updates = [f for f in factors if _update(f)]
        given = trigger | frozenset(x for u in updates for x in outputs(u))
        bound = bindings([f for f in factors if not isinstance(f, Rel) and not _update(f)], given)[0]
        factors = _unify(factors, bound, set(keys if group is None else group))
        updates = [f for f in factors if _update(f)]
        stored = [f for f in factors if isinstance(f, Rel) and not f.delta]
        bound, binding, rest = bindings([f for f in factors if not isinstance(f, Rel) and not _update(f)], given)
        needed = set(keys if group is None else group) | bound
        components = _factorized(_components(stored, bound), rest, bound, needed)
        local, kept, needed = _placed(components, rest, bound, needed)
        refs: list[Term] = []
        for i, comp in enumerate(components):
            map_keys = _map_keys(components, i, needed)
            definition = simplify(Sum(map_keys, Mul(tuple(comp + local[i]))))
            form, here = canonical(definition)
            if form in by_definition:  # one map for definitions equal up to variable names
                name, there = by_definition[form]
            else:
                name, there = f"M{len(program.maps) + len(pending)}", here
                by_definition[form] = (name, here)
                pending.append((name, definition))
            by_form = {c: v for v, c in here.items()}
            renames = tuple((x, by_form[c]) for x, c in there.items() if by_form.get(c, x) != x)
            refs.append(MapRef(name, tuple(k for k in map_keys if k in bound), tuple(k for k in map_keys if k not in bound),
                               renames))
        # the domains first: the update atoms are then joined with the few tuples they name
        updates = sorted(updates, key=lambda f: not isinstance(f, Exists))
        out.append(Sum(keys, Mul(tuple(updates + binding + refs + kept))))
    return simplify(Add(tuple(out)))


def _update(f: Term) -> bool:
    """Whether the factor ``f`` reads the update only: an update atom ``ΔR``, or the domain of a
    nested aggregate's delta (an :class:`Exists` over update atoms, or, in a single-tuple
    trigger, over the trigger's values)."""
    return isinstance(f, Rel) and f.delta or isinstance(f, Exists) and all(a.delta for a in atoms(f)) \
        and not any(True for _ in map_refs(f))


def _unify(factors: list[Term], bound: set[str], outputs: set[str]) -> list[Term]:
    """Unification (§6): an equality ``x = y`` of two variables the trigger does not bind is
    dropped and ``y`` renamed ``x`` in the monomial (``y`` not an output), so that the atoms it
    joins share a variable and are materialized together instead of as a cross product."""
    while True:
        for f in factors:
            if isinstance(f, Cmp) and f.op == "=" and isinstance(f.left, Var) and isinstance(f.right, Var) \
                    and f.left.name not in bound and f.right.name not in bound and f.left != f.right:
                a, b = f.left.name, f.right.name
                if b in outputs:
                    a, b = b, a
                if b in outputs:
                    continue
                rest = [x for x in factors if x is not f]
                factors = [rename(x, {b: a}) for x in rest]  # type: ignore[misc]
                break
        else:
            return factors


def _atom_variables(rels: Sequence[Term]) -> set[str]:
    return {v for a in rels for v in a.variables}  # type: ignore[attr-defined]


def _variables(t: Term) -> set[str]:
    return set(inputs(t) | outputs(t))


def _placed(components: list[list[Rel]], rest: list[Term], bound: set[str], needed: set[str]
            ) -> tuple[list[list[Term]], list[Term], set[str]]:
    """Where the factors ``rest`` go: a condition or factor over one component's variables, some
    of them free, into that component's map (per component; its bound variables are keys of
    the map, as every bound variable is ``needed``), the others stay in the statement (they add
    their variables to ``needed``, the variables the maps must be keyed by)."""
    local: list[list[Term]] = [[] for _ in components]
    kept: list[Term] = []
    needed = set(needed)
    for f in rest:
        vs = _variables(f)
        home = [i for i, c in enumerate(components) if vs - bound and vs <= _atom_variables(c)]
        if home and not isinstance(f, Assign):
            local[home[0]].append(f)
        else:
            kept.append(f)
            needed |= vs
    return local, kept, needed


def _map_keys(components: list[list[Rel]], i: int, needed: set[str]) -> tuple[str, ...]:
    """The key of the map of component ``i``: its variables that the statement needs or that
    another component shares."""
    mine = _atom_variables(components[i])
    elsewhere = set().union(*(_atom_variables(c) for j, c in enumerate(components) if j != i), set())
    return tuple(sorted(mine & (needed | elsewhere)))


def _factorized(components: list[list[Rel]], rest: list[Term], bound: set[str], needed: set[str]
                ) -> list[list[Rel]]:
    """The components cut at free variables where that narrows their maps' keys (factorization,
    DBToaster §5.1 and §6.1's TPC-H Q5 maps): a component whose atoms join only through a
    variable ``v`` (the customers and the suppliers of one nation, on an update of an order)
    would be materialized keyed by the bound variables of both sides, a map as large as their
    product; cut at ``v``, each side is a map keyed by its own variables and ``v``, and the
    statement sums their product over ``v``.  A cut is taken when every part's key is narrower
    than the component's was (the narrowest widest part first, then the most parts), and
    again on the parts."""
    def widths(comps: list[list[Rel]], first: int, count: int) -> list[int]:
        wanted = _placed(comps, rest, bound, needed)[2]
        return [len(_map_keys(comps, j, wanted)) for j in range(first, first + count)]

    i = 0
    while i < len(components):
        comp = components[i]
        width = widths(components, i, 1)[0]
        best: tuple[tuple[int, int], list[list[Rel]]] | None = None
        shared = sorted({v for a in comp for v in a.variables if v not in bound
                         and sum(v in b.variables for b in comp) > 1})
        for v in shared:
            parts = _components(comp, bound | {v})
            if len(parts) < 2:
                continue
            trial = components[:i] + parts + components[i + 1:]
            score = (max(widths(trial, i, len(parts))), -len(parts))
            if score[0] < width and (best is None or score < best[0]):
                best = (score, trial)
        if best is None:
            i += 1
        else:
            components = best[1]  # the parts are looked at again from i
    return components


def _components(rels: list[Rel], bound: set[str]) -> list[list[Rel]]:
    """The atoms grouped by the variables they share that the trigger does not bind."""
    groups: list[list[Rel]] = []
    for a in rels:
        free = set(a.variables) - bound
        joined = [g for g in groups if free & (_atom_variables(g) - bound)]
        merged = [a] + [x for g in joined for x in g]
        groups = [g for g in groups if g not in joined] + [merged]
    return groups


# ----------------------------------------------------------------------------- reference executor


def initial_maps(program: Program, db: Database) -> dict[str, GMR]:
    """Every map of ``program`` computed from its definition over ``db``."""
    return {m.name: GMR(evaluate(m.definition, db)) for m in program.maps.values()}


def apply_update(program: Program, maps: dict[str, GMR], relation: str, values: Sequence[object],
                 sign: int = 1) -> None:
    """Run the trigger of inserting (``sign`` 1) or deleting (-1) tuple ``values`` of
    ``relation`` on ``maps``: all statements read the maps before the update."""
    trigger = program.triggers.get((relation, sign))
    if trigger is None:
        return
    if len(values) != len(trigger.variables):
        raise AgcaError(f"{relation} has {len(trigger.variables)} columns, the update {len(values)} values")
    _run(trigger, maps, {}, dict(zip(trigger.variables, values)))


def _run(trigger: Trigger, maps: dict[str, GMR], updates: Mapping[str, Relation],
         context: Mapping[str, object]) -> None:
    """Every increment of ``trigger`` evaluated over the maps before it (and ``updates``, the
    batch's ``ΔR``), then added; then every re-evaluation over the maps after the increments."""
    old = Database({}, updates, maps=dict(maps))
    increments = [(s.target, evaluate(s.rhs, old, context)) for s in trigger.increments]
    for target, inc in increments:
        maps[target] = maps[target] + GMR(inc)
    new = Database({}, updates, maps=dict(maps))
    for target, value in [(s.target, evaluate(s.rhs, new, context)) for s in trigger.reevaluations]:
        maps[target] = GMR(value)



def apply_batch(program: Program, maps: dict[str, GMR], updates: Mapping[str, Relation],
                order: Sequence[str] | None = None) -> None:
    """Run the batch triggers of ``program`` (compiled with ``batch``) for the updates of
    several relations (``updates``: relation -> its signed rows), one relation after the other
    in ``order`` (default: by name): each trigger reads the maps as the earlier relations'
    statements left them, so the terms of simultaneous changes of two relations are counted
    once."""
    for rel in (order if order is not None else sorted(updates)):
        trigger = program.triggers.get((rel, 0))
        if trigger is None or rel not in updates:
            continue
        _run(trigger, maps, {rel: updates[rel]}, {})
