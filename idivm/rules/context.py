"""What the rules of :mod:`idivm.rules` work on: the i-diffs (:class:`Diff`) with their
restrictions, and the state of the view being generated that a rule reads (:class:`Context`).

A rule's guard is called as ``when(g, op, side, diff)`` and its transformation as
``action(g, op, side, diff, rule)``: ``g`` is the :class:`Context` of the view (the driver of
:mod:`idivm.generator.generate` is one), ``op`` the operator that the i-diff ``diff`` of its
input ``side`` reaches, ``rule`` the row instantiated.  An action returns the statements
the i-diff ends in, continuing up the plan through :meth:`Context.next` (the transformed
i-diff at ``op``) or :meth:`Context.propagate` (an i-diff of another operator).  The plan
and term helpers several rules share are here too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Iterable

from idivm.algebra import operators as O
from idivm.algebra.expressions import Call, Const, Field, TableRef, Term, TupleExpr, Var, conjunction
from idivm.errors import InternalError, UnsupportedError
from idivm.provenance.ids import HIDDEN, Ids, ProvenanceResult
from idivm.script import Origin, StateRef, Statement


@dataclass(frozen=True)
class Restriction:
    """Rows of ``at``'s output whose ``terms`` equal the variables ``key_vars`` of a
    binding tuple of ``keys``; ``branches``: UnionAll operators and the side taken."""

    at: O.Operator
    terms: tuple[Term, ...]
    keys: O.Operator
    key_vars: tuple[str, ...]
    branches: tuple[tuple[O.Operator, str], ...] = ()


@dataclass(frozen=True)
class Diff:
    """An i-diff of the output of ``op`` (see :mod:`idivm.rules` for the kinds).

    ``ids`` are terms over ``op``'s output naming the tuples.  replace: ``keys`` binds
    ``key_vars`` (aligned with ``ids``; ``keys`` None with no ids: every tuple), and
    ``restriction`` selects the post-state rows (None: all).  update/increment:
    ``plan`` binds the changed part of the tuples; ``changed`` pairs each changed term
    (over ``op``'s output) with its pre value (update) or its delta (increment),
    both over ``plan``'s variables."""

    kind: str
    op: O.Operator
    ids: tuple[Term, ...]
    starts: tuple[Origin, ...]  # the base-table i-diffs it comes from
    keys: O.Operator | None = None
    key_vars: tuple[str, ...] = ()
    restriction: Restriction | None = None
    plan: O.Operator | None = None
    changed: tuple[tuple[Term, Term], ...] = ()
    trail: tuple[str, ...] = ()
    #: a replace naming the tuples of a right-side change of this LeftJoin by (left IDs, right
    #: IDs) pairs, the padded tuples by (left IDs, NULLs) (:func:`idivm.rules.common.do_to_matching_left`)
    pairs_of: O.LeftJoin | None = None


class Context(ABC):
    """The view plan being generated, its operators' IDs and parents, and the services rules
    call: fresh variables, the IDs of an operator, the view column holding an ID; the
    driver continues the propagation (:meth:`propagate`, :meth:`next`) and makes the
    increments of γ once every i-diff has reached it (:meth:`defer`)."""

    def __init__(self, view_name: str, prov: ProvenanceResult, table_keys, table_types, strategy: str):
        self.view_name = view_name
        self.plan: O.ReturnBag = prov.plan  # type: ignore[assignment]
        self.ids = prov.plan_ids
        self.table_keys = table_keys
        self.table_types = table_types
        self.strategy = strategy
        self.counter = 0
        self.parents: dict[int, tuple[O.Operator, str]] = {}
        #: root of a nested plan -> the operator (ApplyPlan, InnerCorrelate, ...) nesting it
        self.enclosing: dict[int, O.Operator] = {}
        for op in O.walk(self.plan):
            for side, child in zip(sides(op), op.inputs()):
                self.parents[id(child)] = (op, side)
            for nested in op.nested():
                self.enclosing[id(nested)] = op
        self.top_level = {id(op) for op in O.walk(self.plan, into_nested=False)}
        #: what :meth:`once` found for an i-diff: (what, id(diff)) -> (the diff, the result)
        self._found: dict[tuple, tuple[Diff, object]] = {}
        #: replace statements that name view rows by a restriction: id(statement) -> its diff
        self.restricted_replaces: dict[int, Diff] = {}
        self.element_columns = self._element_columns()

    @abstractmethod
    def propagate(self, diff: Diff) -> list[Statement]:
        """Instantiate rules from ``diff`` up to the view; the statements it ends in."""

    @abstractmethod
    def next(self, parent: O.Operator, diff: Diff, rule, **changes) -> list[Statement]:
        """Continue from ``parent`` with ``diff`` transformed by ``rule`` (its fields ``changes``)."""

    @abstractmethod
    def defer(self, op: O.GroupBy, kind: str, diff: Diff, rule) -> None:
        """Make the increments of γ ``op`` for ``diff`` (``kind`` "members" or "update") once
        every i-diff of the run has reached it."""

    def once(self, what, diff: Diff, find):
        """``find(diff)``, computed once per i-diff (a rule's guard and its action both ask)."""
        key = (what, id(diff))
        hit = self._found.get(key)
        if hit is None or hit[0] is not diff:  # the ids of dropped diffs are reused
            hit = self._found[key] = (diff, find(diff))
        return hit[1]

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{HIDDEN}{prefix}{self.counter}"

    def fresh_vars(self, n: int) -> tuple[str, ...]:
        return tuple(self.fresh("k") for _ in range(n))

    def known_ids(self, op: O.Operator) -> tuple[Term, ...] | None:
        ids = self.ids.get(op)
        return tuple(g.term for g in ids.groups) if ids is not None and ids.known else None

    def canonical_ids(self, op: O.Operator) -> tuple[Term, ...]:
        ids = self.known_ids(op)
        if ids is None:
            raise UnsupportedError(f"the IDs of {op.name} are unknown, so its changes cannot be named", op.span)
        return ids

    def equivalents(self, op: O.Operator, t: Term) -> tuple[Term, ...]:
        ids: Ids | None = self.ids.get(op)
        if ids is not None and ids.known:
            for g in ids.groups:
                if t in g.terms:
                    return g.terms
        return (t,)

    def through_project(self, op: O.Project, ids: tuple[Term, ...]) -> tuple[Term, ...] | None:
        """The IDs as output variables of ``op``; None if it drops one (only below DISTINCT,
        where retouching must not add columns)."""
        own = self.ids.get(op)
        id_terms = {t for g in own.groups for t in g.terms} if own is not None and own.known else set()
        out = []
        for t in ids:
            found = [r for e in self.equivalents(op.input, t) for v, t2 in op.outputs
                     if (r := relative_to(e, t2, Var(v))) is not None]
            if not found:
                return None
            # several outputs copy the ID (a union branch keeps a hidden copy): take the one
            # that is an ID of the projection, else the hidden copy
            found.sort(key=lambda r: (r not in id_terms, not root(r).name.startswith(HIDDEN)))
            out.append(found[0])
        return tuple(out)

    def element_fields(self) -> tuple[tuple[str, Term], ...]:
        hidden = {c for c, _ in self.element_columns.values()}
        return tuple((n, t) for n, t in self.plan.element.fields if n not in hidden)

    def _element_columns(self) -> dict[str, tuple[str, tuple[Term, ...]]]:
        """ID name -> (hidden view column, equivalent terms at the view's input)."""
        el = self.plan.element
        ids = self.ids.get(self.plan.input)
        if not isinstance(el, TupleExpr) or ids is None or not ids.known:
            raise InternalError("the view plan ends in a tuple with its IDs")
        by_term = {t: n for n, t in el.fields if n.startswith(HIDDEN)}
        out = {}
        for g in ids.groups:
            col = by_term.get(g.term)
            if col is None:
                raise InternalError(f"the view does not store its ID {g.name}")
            out[g.name] = (col, g.terms)
        return out

    def view_column(self, op: O.Operator, t: Term) -> str:
        for col, terms in self.element_columns.values():
            if t in terms:
                return col
        raise InternalError(f"ID {t} of {op.name} is not an ID of the view")


def restriction(at: O.Operator, terms: tuple[Term, ...], keys: O.Operator, key_vars: tuple[str, ...]) -> Restriction:
    """The rows of ``at`` whose ``terms`` take the values of ``keys``, restricted at the
    deepest operator below ``at`` that binds them (:func:`_push_down`)."""
    at, terms = _push_down(at, terms)
    return Restriction(at, terms, keys, key_vars)


def restricted(plan: O.Operator, r: Restriction | None) -> O.Operator:
    """``plan`` with the rows of ``r`` only: a semijoin at ``r.at``, the union branches taken."""
    if r is None:
        return plan
    target, branches = r.at, dict((id(u), s) for u, s in r.branches)
    cond = conjunction([same(t, Var(k)) for t, k in zip(r.terms, r.key_vars)])

    def fn(op: O.Operator) -> O.Operator:
        if op == target:
            return O.SemiJoin(op, r.keys, cond)
        return op

    out = _transform(plan, fn, target, branches)
    return out


def at_state(plan: O.Operator, state: str) -> O.Operator:
    """``plan`` reading at ``state`` (``PRE``, ``POST``) every base table it reads without a
    state yet (i-diffs, and key sets already computed, keep theirs)."""
    def fn(op: O.Operator) -> O.Operator:
        if isinstance(op, O.ScanCollection) and isinstance(op.source, TableRef) and isinstance(op.source.name, str):
            return replace(op, source=TableRef(StateRef(op.source.name, state)))
        return op
    return O.transform_up(plan, fn)


def _transform(plan: O.Operator, fn, target: O.Operator, branches: dict[int, str]) -> O.Operator:
    """Rebuild ``plan`` bottom-up applying ``fn``; a UnionAll in ``branches`` keeps one side."""
    def go(op: O.Operator) -> O.Operator:
        if isinstance(op, O.UnionAll) and id(op) in branches:
            return go(op.left if branches[id(op)] == "left" else op.right)
        if op is target or op == target:
            return fn(op)
        ins = tuple(go(i) for i in op.inputs())
        new = op.with_inputs(*ins) if any(a is not b for a, b in zip(ins, op.inputs())) else op
        return fn(new)
    return go(plan)


def _push_down(at: O.Operator, terms: tuple[Term, ...]) -> tuple[O.Operator, tuple[Term, ...]]:
    """The deepest operator below ``at`` a restriction on ``terms`` can move to unchanged
    in meaning (through σ, π (renaming), γ keys, δ and into one side of a join)."""
    while True:
        used = set().union(*(t.variables() for t in terms)) if terms else set()
        nxt = None
        match at:
            case O.Select() | O.Assign() | O.Distinct():
                if used <= set(at.input.output_variables()):
                    nxt = (at.input, terms)
            case O.Project(outputs=outs):
                m = {Var(v): t for v, t in outs}
                if all(isinstance(t, Var) and t in m for t in terms):
                    nxt = (at.input, tuple(m[t] for t in terms))
            case O.GroupBy(keys=keys) if not at.group_var:
                m = {Var(k): t for k, t in keys}
                if terms and all(isinstance(t, Var) and t in m for t in terms):
                    nxt = (at.input, tuple(m[t] for t in terms))
            case O.InnerJoin():
                for side in (at.left, at.right):
                    if used <= set(side.output_variables()):
                        nxt = (side, terms)
                        break
            case O.LeftJoin() | O.SemiJoin() | O.AntiJoin():
                if used <= set(at.left.output_variables()):
                    nxt = (at.left, terms)
        if nxt is None or not terms:
            return at, terms
        at, terms = nxt


def sides(op: O.Operator) -> tuple[str, ...]:
    return ("left", "right") if len(op.inputs()) == 2 else ("input",)


def condition_terms(op: O.Operator) -> tuple[Term, ...]:
    """The terms whose value an update of the terms they read changes beyond renaming."""
    match op:
        case O.Select(condition=c) | O._Join(condition=c):
            return (c,)
        case O.Assign(term=t):
            return (t,)
        case O.ScanCollection(source=src) if not isinstance(src, TableRef):
            return (src,)
        case O.NavTuple() | O.FunctionCall() | O.ConstructTuple() | O.ConstructBag() | O.ConstructArray():
            return op.terms()
        case O.ApplyPlan() | O.InnerCorrelate() | O.LeftCorrelate():
            return tuple(t for o in O.walk(op.plan) for t in o.terms())
    return ()


def mentions(term: Term, changed: Iterable[tuple[Term, Term]]) -> bool:
    """Whether ``term`` reads one of the changed terms (or the whole tuple holding one)."""
    keys = [c for c, _ in changed]
    if not keys:
        return False
    sub = set(term.walk())
    for c in keys:
        if c in sub:
            return True
        # a tuple variable used whole (not only through fields) reads every field
        for t in sub:
            if isinstance(t, Var) and isinstance(c, Field) and root(c) == t and not _only_under_fields(term, t):
                return True
    return False


def relative_to(t: Term, prefix: Term, new: Term) -> Term | None:
    """``t`` with its prefix ``prefix`` replaced by ``new`` (``b.id`` under ``b_2 := b`` is
    ``b_2.id``); None if ``prefix`` is not a prefix of ``t``."""
    if t == prefix:
        return new
    if isinstance(t, Field):
        base = relative_to(t.base, prefix, new)
        return None if base is None else Field(base, t.name)
    return None


def root(t: Term) -> Term:
    while isinstance(t, Field):
        t = t.base
    return t


def _only_under_fields(term: Term, var: Var) -> bool:
    """Every occurrence of ``var`` in ``term`` is the base of a field access."""
    def go(t: Term, under_field: bool) -> bool:
        if t == var:
            return under_field
        if isinstance(t, Field):
            return go(t.base, True)
        return all(go(c, False) for c in t.children())
    return go(term, False)


def same(a: Term, b: Term) -> Term:
    return Call("same", (a, b))


def is_null(t: Term) -> Term:
    return Call("is_null", (t,))


def never_null(t: Term) -> bool:
    """Whether ``t`` is NULL for no binding: a non-NULL literal, or a COALESCE ending in one
    (the SUM of the operator cache of AVG, :mod:`idivm.generator.operator_caches`)."""
    match t:
        case Const(value=v):
            return v is not None
        case Call(function="coalesce", args=args):
            return never_null(args[-1])
    return False


def together(parts: list[tuple[tuple[Origin, ...], tuple[str, ...]]]) -> tuple[tuple[Origin, ...], tuple[str, ...]]:
    """The origins and the rules of a statement made from several i-diffs' (origins, rules):
    the origins listed once each, every rule marked with the origins it was instantiated from."""
    starts = tuple(o for origins in dict.fromkeys(o for o, _ in parts) for o in origins)
    return starts, tuple(f"{'; '.join(map(str, o))}: {r}" for o, rules in parts for r in rules)


def combined(diffs: list[Diff]) -> Diff:
    """The first of ``diffs``, standing for all of them in the statements they make together."""
    if len(diffs) == 1:
        return diffs[0]
    starts, trail = together([(d.starts, d.trail) for d in diffs])
    return replace(diffs[0], starts=starts, trail=trail)
