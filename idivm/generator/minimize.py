"""Pass 4 of the Δ-script generator: semantic minimization (thesis §2.4, Fig. 2.8).

Input: a :class:`~idivm.script.DeltaScript` as pass 3 composes it, and the
columns of the base tables.  Output: the same script, every plan of every statement
rewritten by :data:`RULES`, bottom-up, by one driver (:func:`minimize_script`).  No
rule changes a plan's result on any database and any *effective* base i-diffs (§2.2);
what they exploit is what effectiveness guarantees about the sources a script reads
(:mod:`idivm.script`).  For a base table T with key I, in the thesis'
terms (§2.4 pass 4):

C1  ``Δ+_T ⊆ T_post``: the insert half of the replace i-diff ``Δ(T)`` is the post rows
    of its keys, which the executor serves as ``Δpost(T)``;
C2  ``π_I Δ-_T ∩ π_I T_post = ∅``: a deleted key has no post row.  With C1:
    ``T@post ⋉_I keys(Δ(T)) = Δpost(T)``.  Mirrored in the pre state (the delete
    i-diff carries the pre rows, §2.5; an inserted key had no pre row):
    ``T@pre ⋉_I keys(Δ(T)) = Δpre(T)``;
C3  ``π_{I,A''_post} Δu_T ⋈_I T ⊆ π_{I,A''} T``: ``Δu(T)`` carries the post value of
    *every* attribute (A'' = A) and an updated key exists in both states, so
    ``T@post ⋉_I keys(Δu(T))`` is ``Δu(T)``'s post tuples, and ``T@pre ⋉_I
    keys(Δu(T))`` its pre tuples (key + the ``__idivm_pre`` values).

Preconditions the rules rely on: I is T's primary key (unique, never NULL); a source
holds at most one row per key (``base_diffs`` condenses the change feed per key);
Δ-scripts have no nested plans (:func:`~idivm.generator.generate.check_supported`).

Each rule is a plain function ``rule(op, tables) -> Operator | None`` on one operator
whose inputs are already minimized; it returns the rewritten operator, or None when
its pattern does not match (it never returns an unchanged copy).  The first line of
its docstring is the identity, printed in ``explain`` under the statements it
shortened.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import Call, Field, TableRef, Term, TupleExpr, Var, conjuncts
from idivm.algebra.rewrite import substitute
from idivm.errors import InternalError
from idivm.script import KEYS, POST, POST_ROWS, PRE_FIELD, PRE_ROWS, UPDATES, DeltaScript, DiffRef, StateRef


@dataclass(frozen=True)
class Tables:
    """What the rules know of the base tables: key and columns (in table order)."""

    keys: Mapping[str, tuple[str, ...]]
    columns: Mapping[str, tuple[str, ...]]

    def post_tuple(self, table: str, du: str) -> Term | None:
        """T's post row from a ``Δu(T)`` row bound to ``du`` (as pass 2 builds it)."""
        cols = self.columns.get(table)
        if not cols:
            return None
        return TupleExpr(tuple((c, Field(Var(du), c)) for c in cols))

    def pre_tuple(self, table: str, du: str) -> Term | None:
        """T's pre row from a ``Δu(T)`` row: the key, and the pre values of the other columns."""
        cols, key = self.columns.get(table), self.keys.get(table, ())
        if not cols:
            return None
        pre = Field(Var(du), PRE_FIELD)
        return TupleExpr(tuple((c, Field(Var(du), c) if c in key else Field(pre, c)) for c in cols))


Rule = Callable[[O.Operator, Tables], "O.Operator | None"]


# ----------------------------------------------------------------------------- the rules


def merge_projections(op: O.Operator, tables: Tables) -> O.Operator | None:
    """π_X(π_Y(P)) → π_{X∘Y}(P)  (standard: one projection instead of two)

    Fields of a tuple the inner projection constructs are read directly (``{a: t}.a`` is
    ``t``), so the i-diff projections of pass 3 collapse onto the base i-diff they read.
    """
    if not (isinstance(op, O.Project) and isinstance(op.input, O.Project)):
        return None
    inner = dict(op.input.outputs)
    if not all(t.variables() <= inner.keys() for _, t in op.outputs):
        return None
    return O.Project(op.input.input, tuple((v, _substitute(t, inner)) for v, t in op.outputs), span=op.span)


def rows_of_replaced_keys(op: O.Operator, tables: Tables) -> O.Operator | None:
    """T@post ⋉_{T.I} π(Δ(T)) → Δpost(T), T@pre ⋉_{T.I} π(Δ(T)) → Δpre(T)  (Fig. 2.8; C1, C2)

    Fig. 2.8, semijoin rules ``R ⋉_{R.I} Δ+_R → π_{I, A_post→A} Δ+_R`` (C1) and
    ``R ⋉_{R.I} Δ-_R → ∅`` (C2), for the replace i-diff ``Δ(T)`` (delete + insert of the
    same keys), and their mirror in the pre state.  The semijoin must be on T's full key,
    each key column matched with the same column of the ``Δ(T)`` rows, and the right side
    a projection of ``Δ(T)`` (one row per key: no filter).
    """
    match _state_semijoin(op, tables, KEYS):
        case (table, state, _, x):
            rows = DiffRef(table, POST_ROWS if state == POST else PRE_ROWS)
            return O.ScanCollection(O.Ground(), TableRef(rows), x, span=op.left.span)
    return None


def rows_of_updated_keys(op: O.Operator, tables: Tables) -> O.Operator | None:
    """T@post ⋉_{T.I} π(Δu(T)) → π_{post tuple}(Δu(T)), T@pre: π_{pre tuple}  (Fig. 2.8; C3)

    Fig. 2.8, semijoin rule ``R ⋉_{R.I} Δu_R → π_{I, A''_post→A} Δu_R, if A'' = A`` (C3:
    ``Δu(T)`` holds every column's post value, and the key exists after the update), and its
    mirror in the pre state (the pre values of every non-key column are in ``__idivm_pre``).
    Same conditions on the semijoin as :func:`rows_of_replaced_keys`.
    """
    match _state_semijoin(op, tables, UPDATES):
        case (table, state, scan, x):
            row = (tables.post_tuple if state == POST else tables.pre_tuple)(table, scan.var)
            if row is not None:
                return O.Project(scan, ((x, row),), span=op.left.span)
    return None


def join_with_own_update(op: O.Operator, tables: Tables) -> O.Operator | None:
    """L[x := π_post Δu(T)] ⋈_{x.I = D.I} π_D(Δu(T)) → L[x, D := π Δu(T)]  (Fig. 2.8; C3)

    Fig. 2.8, join rule ``Δu_R ⋈_{R.I} R → Δu_R`` (C3), where it occurs: the increment
    rule of γ SUM/COUNT (Tables C.8, C.10) joins its input, restricted to the updated keys,
    back with the update i-diff D to fetch the pre values.  Once the restriction became
    ``Δu(T)``'s post tuples (:func:`rows_of_updated_keys`), both sides bind one row per
    updated key: D's columns are computed from the same ``Δu(T)`` row where L binds x,
    and the join goes.  L must reach that row through inner joins, selections, projections
    that keep x, and the preserved side of left/semi/anti joins; D must be a projection of
    ``Δu(T)`` (one row per key), and the join condition the full key of T.
    """
    if not isinstance(op, O.InnerJoin):
        return None
    d = _projection_of_source(op.right)
    if d is None:
        return None
    scan, terms = d
    table = _source_table(scan, UPDATES)
    if table is None:
        return None
    on = _key_match(op.condition, op.left.output_variables(), terms, scan.var, tables.keys.get(table, ()))
    if on is None:
        return None
    bound = {v for o in O.walk(op.left) for v in o.output_variables()}
    if bound & set(terms):
        return None
    grafted = _graft(op.left, on, tuple(terms.items()), scan.var, table, tables)
    if grafted is None:
        return None
    if grafted.output_variables() != op.output_variables():  # keep the join's variable order
        grafted = O.Project(grafted, tuple((v, Var(v)) for v in op.output_variables()))
    return grafted


def drop_reordering_projection(op: O.Operator, tables: Tables) -> O.Operator | None:
    """γ(π_{v := v, ...}(P)) → γ(P)  (standard: a projection that only reorders variables)

    Grouping reads its input's variables by name, so a projection that keeps all
    of them (such as the one :func:`join_with_own_update` leaves) is a no-op below it.
    """
    if not (isinstance(op, O.GroupBy) and isinstance(op.input, O.Project)):
        return None
    p = op.input
    if not _reorders_only(p):
        return None
    return replace(op, input=p.input)


#: Applied in this order at each operator (bottom-up, so an operator's inputs are already
#: minimized): the semijoin rules turn state scans into base i-diffs first, which the join
#: rule then needs below it; projection merging may apply at any point and is cheapest to
#: try first; the reordering projection the join rule may leave is dropped at its parent.
RULES: tuple[Rule, ...] = (
    merge_projections,
    rows_of_replaced_keys,
    rows_of_updated_keys,
    join_with_own_update,
    drop_reordering_projection,
)

_MAX_REWRITES_PER_OPERATOR = 20
_PLAN_FIELDS = ("keys", "rows", "pre_rows", "query")


# ----------------------------------------------------------------------------- the driver


def minimize_script(script: DeltaScript, table_types: Mapping[str, T.TupleType]) -> DeltaScript:
    """``script`` with every plan minimized (see module doc).

    One memo serves all the plans of the script, so a subplan that several plans share
    (the keys of a replace, an i-diff aggregate two statements read) stays one object,
    which the executor computes once.  Each statement's ``rules`` gain one line per
    rewrite that shortened its plans."""
    tables = Tables({td.table: td.key for td in script.tables},
                    {t: tuple(n for n, _ in ty.fields) for t, ty in table_types.items()})
    memo: dict[int, O.Operator] = {}
    # output operator -> (the operator, names of the rules applied at or below it); the
    # operator is kept so that its id is not reused while the pass runs
    applied: dict[int, tuple[O.Operator, frozenset[str]]] = {}

    def minimize(op: O.Operator) -> O.Operator:
        below = frozenset().union(*(applied.get(id(i), (None, frozenset()))[1] for i in op.inputs()))
        fired: list[str] = []
        for _ in range(_MAX_REWRITES_PER_OPERATOR):
            for rule in RULES:
                new = rule(op, tables)
                if new is not None:
                    op = new
                    fired.append(rule.__name__)
                    break
            else:
                applied[id(op)] = (op, below | frozenset(fired))
                return op
        raise InternalError(f"semantic minimization does not terminate at {op.name}: {fired}")

    statements = []
    for s in script.statements:
        plans = {f: O.transform_up(getattr(s, f), minimize, memo=memo)
                 for f in _PLAN_FIELDS if getattr(s, f) is not None}
        names = frozenset().union(*(applied.get(id(p), (None, frozenset()))[1] for p in plans.values()))
        notes = tuple(f"minimize: {describe(r)}" for r in RULES if r.__name__ in names)
        statements.append(replace(s, rules=s.rules + notes, **plans))
    return replace(script, statements=tuple(statements))


def describe(rule: Rule) -> str:
    """The identity a rule implements (the first line of its docstring)."""
    return (rule.__doc__ or rule.__name__).strip().splitlines()[0]


# ----------------------------------------------------------------------------- patterns


def _state_scan(op: O.Operator) -> tuple[str, str] | None:
    """(table, ``PRE``/``POST``) if ``op`` scans a state of a base table."""
    if isinstance(op, O.ScanCollection) and isinstance(op.input, O.Ground) and op.position is None \
            and isinstance(op.source, TableRef) and isinstance(op.source.name, StateRef):
        return op.source.name.table, op.source.name.state
    return None


def _source_table(scan: O.ScanCollection, kind: str) -> str | None:
    """The table whose base i-diff of ``kind`` (``KEYS``, ``UPDATES``) ``scan`` reads, if it
    does (not an element i-diff of one of its collections)."""
    ref = scan.source.name if isinstance(scan.source, TableRef) else None
    return ref.table if isinstance(ref, DiffRef) and ref.kind == kind and ref.elements is None else None


def _state_semijoin(op: O.Operator, tables: Tables, kind: str):
    """For ``T@state ⋉_{T.I} π(kind(T))`` on the full key: (table, state, the i-diff scan,
    the variable of the state scan); None for any other operator."""
    if not isinstance(op, O.SemiJoin):
        return None
    state = _state_scan(op.left)
    d = _projection_of_source(op.right)
    if state is None or d is None:
        return None
    table, at = state
    scan, terms = d
    if _source_table(scan, kind) != table:
        return None
    if _key_match(op.condition, (op.left.var,), terms, scan.var, tables.keys.get(table, ())) is None:
        return None
    return table, at, scan, op.left.var


def _projection_of_source(plan: O.Operator) -> tuple[O.ScanCollection, dict[str, Term]] | None:
    """If ``plan`` is projections over a scan of a named source (one output row per source
    row): the scan and each output variable as a term over the scan's variable."""
    if isinstance(plan, O.ScanCollection):
        if isinstance(plan.input, O.Ground) and plan.position is None and isinstance(plan.source, TableRef):
            return plan, {plan.var: Var(plan.var)}
        return None
    if isinstance(plan, O.Project):
        inner = _projection_of_source(plan.input)
        if inner is None:
            return None
        scan, env = inner
        if not all(t.variables() <= env.keys() for _, t in plan.outputs):
            return None
        return scan, {v: _substitute(t, env) for v, t in plan.outputs}
    return None


def _key_match(cond: Term, left_vars, terms: Mapping[str, Term], src: str,
               key: tuple[str, ...]) -> str | None:
    """The variable x if ``cond`` is ``x.k IS NOT DISTINCT FROM v`` for every column k of
    ``key`` (and nothing else), x one of ``left_vars``, and each v a variable of ``terms``
    equal to ``src.k``: the right rows' key, column for column."""
    if not key:
        return None
    seen: dict[str, str] = {}
    xs = set()
    for c in conjuncts(cond):
        if not (isinstance(c, Call) and c.function == "same"):
            return None
        a, b = c.args
        if isinstance(a, Var) and a.name in terms:
            a, b = b, a
        if not (isinstance(b, Var) and b.name in terms and isinstance(a, Field) and isinstance(a.base, Var)
                and a.base.name in left_vars):
            return None
        if a.name not in key or a.name in seen or terms[b.name] != Field(Var(src), a.name):
            return None
        seen[a.name] = b.name
        xs.add(a.base.name)
    if set(seen) != set(key) or len(xs) != 1:
        return None
    return xs.pop()


def _graft(plan: O.Operator, x: str, extra: tuple[tuple[str, Term], ...], src: str, table: str,
           tables: Tables) -> O.Operator | None:
    """``plan`` where the projection binding ``x`` to T's post tuple from a ``Δu(T)`` row also
    binds ``extra`` (terms over the ``Δu(T)`` row ``src``), and the operators above it keep
    those variables; None if x is not bound that way along rows-preserving operators."""
    match plan:
        case O.Project(input=O.ScanCollection() as scan) if _source_table(scan, UPDATES) == table:
            if (x, tables.post_tuple(table, scan.var)) not in plan.outputs:
                return None
            rename = {src: Var(scan.var)}
            return O.Project(scan, plan.outputs + tuple((v, _substitute(t, rename)) for v, t in extra),
                             span=plan.span)
        case O.Project(outputs=outs) if (x, Var(x)) in outs:
            inner = _graft(plan.input, x, extra, src, table, tables)
            return None if inner is None else O.Project(inner, outs + tuple((v, Var(v)) for v, _ in extra),
                                                       span=plan.span)
        case O.Select():
            inner = _graft(plan.input, x, extra, src, table, tables)
            return None if inner is None else plan.with_inputs(inner)
        case O.InnerJoin():
            for i, side in enumerate(plan.inputs()):
                if x in side.output_variables():
                    inner = _graft(side, x, extra, src, table, tables)
                    if inner is None:
                        return None
                    ins = list(plan.inputs())
                    ins[i] = inner
                    return plan.with_inputs(*ins)
        case O.LeftJoin() | O.SemiJoin() | O.AntiJoin() if x in plan.left.output_variables():
            inner = _graft(plan.left, x, extra, src, table, tables)
            return None if inner is None else plan.with_inputs(inner, plan.right)
    return None


def _reorders_only(p: O.Project) -> bool:
    ins = p.input.output_variables()
    return len(p.outputs) == len(ins) and {v for v, _ in p.outputs} == set(ins) \
        and all(t == Var(v) for v, t in p.outputs)


# ----------------------------------------------------------------------------- terms


def _substitute(term: Term, env: Mapping[str, Term]) -> Term:
    """``term`` with each variable of ``env`` replaced by its term, and the fields of a
    constructed tuple read directly (``{a: t}.a`` → ``t``)."""
    return substitute(term, {Var(n): t for n, t in env.items()}, post=_read_constructed_field)


def _read_constructed_field(term: Term) -> Term:
    if isinstance(term, Field) and isinstance(term.base, TupleExpr):
        found = [t for n, t in term.base.fields if n == term.name]
        if found:
            return found[0]
    return term
