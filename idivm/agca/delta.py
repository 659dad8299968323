"""Delta queries of AGCA terms (DBToaster §3.4) and the algebraic simplification they need
(§6, "Partial Evaluation and Algebraic Identities").

:func:`delta` is ``Δ_u Q`` for a batch update ``u`` of some relations, by the rules

    Δ(Q1 + Q2) = ΔQ1 + ΔQ2
    Δ(Q1 * Q2) = ΔQ1 * Q2 + Q1 * ΔQ2 + ΔQ1 * ΔQ2
    Δc = Δx = Δ(x θ 0) = 0
    Δ(x := Q) = (ΔQ)_rr * ((x := Q + ΔQ) − (x := Q))
    ΔExists(Q) = Exists(Q + ΔQ) − Exists(Q)
    Δ(Sum_A Q) = Sum_A(ΔQ)
    ΔR(x⃗) = the update's atom ΔR(x⃗) where R is updated, else 0

so that ``⟦ΔQ⟧(D, ΔD) = ⟦Q⟧(D + ΔD) − ⟦Q⟧(D)`` (the GMRs with + and * form a ring).
:func:`delta_tuple` is the single-tuple case, ``Δ±R(t⃗) R(x⃗) = ±Π (x_i := t_i)``.
:func:`simplify` flattens sums and products, folds constants and comparisons of constants,
applies ``Q + 0 = Q``, ``Q * 1 = Q``, ``Q * 0 = 0`` and cancels monomials that differ only by
their constant factor (the ``Q − Q`` the rule for ``:=`` leaves where ``ΔQ`` is 0), to a fixed
point.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from fractions import Fraction

from idivm.agca.terms import (
    COMPARISONS, ONE, ZERO, Add, Assign, Cmp, Const, Exists, Lift, MapRef, Mul, Number, Rel, Sum, Term, Value, Var,
    atoms, bindings, inputs, map_refs,
)


def delta(q: Term, updated: Collection[str] | None = None) -> Term:
    """``Δ_u q`` for an update ``u`` of the relations ``updated`` (default: all of them): a
    term over the relations and their update atoms ``ΔR`` (:class:`Rel` with ``delta``),
    simplified.  Maps (:class:`MapRef`) are maintained by the statements that write them: a
    map read here is constant under ``u``."""
    return simplify(_delta(q, None if updated is None else frozenset(updated)))


def _delta(q: Term, updated: frozenset[str] | None) -> Term:
    match q:
        case Const() | Var() | Cmp() | Lift() | MapRef():
            return ZERO
        case Rel(name=n, variables=vs, delta=False) if updated is None or n in updated:
            return Rel(n, vs, delta=True)
        case Rel():
            return ZERO
        case Add(terms=ts):
            return Add(tuple(_delta(t, updated) for t in ts))
        case Mul(terms=ts):
            if not ts:
                return ZERO
            left, d_left = ts[0], _delta(ts[0], updated)
            for right in ts[1:]:
                d_right = _delta(right, updated)
                left, d_left = Mul((left, right)), Add((Mul((d_left, right)), Mul((left, d_right)),
                                                        Mul((d_left, d_right))))
            return d_left
        case Sum(group=g, term=t):
            return Sum(g, _delta(t, updated))
        case Assign(var=x, term=t):
            if isinstance(t, (Value, Var)):
                return ZERO
            d = _delta(t, updated)
            change = Add((Assign(x, Add((t, d))), -Assign(x, t)))
            domain = _domain(simplify(d), inputs(t))
            return change if domain is None else Mul((domain, change))
        case Exists(term=t):
            return Add((Exists(Add((t, _delta(t, updated)))), -Exists(t)))
    raise TypeError(f"not an AGCA term: {q!r}")


def _domain(d: Term, correlated: frozenset[str]) -> Term | None:
    """The range restriction of a nested aggregate's delta ``d`` (DBToaster §5.3, the revised
    delta rule for nested queries: ``Δ(x := Q) = (ΔQ)_rr * ((x := Q + ΔQ) − (x := Q))``), in
    its batch form: the values of the ``correlated`` variables (the nested query's inputs) that
    the update's tuples bind through the equalities of ``d``'s monomials,
    ``Exists(Sum[correlated](Exists(ΔR(…) * (c := v))) + …)``; where it is 0 no tuple of the
    update reaches ``Q``'s value, and the difference is 0.  It reads the update atoms and the
    equalities only (not their values or other conditions: a superset of the values that
    change), so the nested aggregates of one subquery (a sum and a count) share it.  None (no
    restriction) unless every monomial binds every correlated variable so, from update atoms
    alone: a nested aggregate correlated on an inequality, or over a join with a stored
    relation, evaluates the difference for every tuple of the outer query (or is re-evaluated,
    §5.1)."""
    if not correlated or d == ZERO:
        return None
    parts = []
    for t in _sums(d):
        if t is None:
            return None
        factors = list(t.term.terms) if isinstance(t.term, Mul) else [t.term]
        if any(not (isinstance(f, Rel) and f.delta) and (any(atoms(f)) or any(map_refs(f))) for f in factors):
            return None
        update = [f for f in factors if isinstance(f, Rel)]
        binding = bindings([f for f in factors if not isinstance(f, Rel)],
                           frozenset(x for a in update for x in a.variables))[1]
        parts.append(Sum(tuple(sorted(correlated)), Exists(Mul(tuple(update + binding)))))
    domain = simplify(Exists(Add(tuple(parts))))
    return domain if not inputs(domain) else None


def _sums(t: Term) -> list[Sum | None]:
    """The Sums whose (signed, scaled) total ``t`` is; None for a part that is not one."""
    match t:
        case Add(terms=ts):
            return [s for x in ts for s in _sums(x)]
        case Mul(terms=ts) if sum(isinstance(x, Sum) for x in ts) == 1 and \
                all(isinstance(x, (Sum, Const)) for x in ts):
            return [x for x in ts if isinstance(x, Sum)]
        case Sum():
            return [t]
    return [None]


def delta_tuple(q: Term, relation: str, values: Sequence[object], sign: int = 1) -> Term:
    """``Δ_{±R(t⃗)} q``: the delta of ``q`` for the insertion (``sign`` 1) or deletion (-1) of
    the one tuple ``values`` of ``relation`` (§3.4): each atom ``R(x⃗)`` of it becomes
    ``±Π (x_i := t_i)``, the update's values bound to its variables.  A value that is a
    :class:`Var` is a trigger variable: the delta then has it as an input (§3.3), to be bound
    to each update's value where the delta is evaluated."""
    if sign not in (1, -1):
        raise ValueError("sign must be 1 (insert) or -1 (delete)")
    return simplify(_bind_update(_delta(q, frozenset({relation})), relation, tuple(values), sign))


def _bind_update(q: Term, relation: str, values: tuple, sign: int) -> Term:
    match q:
        case Rel(name=n, variables=vs, delta=True) if n == relation:
            if len(vs) != len(values):
                raise ValueError(f"{relation} has {len(vs)} columns in {q}, the tuple {len(values)} values")
            return Mul((Const(sign), *(Assign(x, v if isinstance(v, Var) else Value(v)) for x, v in zip(vs, values))))
        case Add(terms=ts):
            return Add(tuple(_bind_update(t, relation, values, sign) for t in ts))
        case Mul(terms=ts):
            return Mul(tuple(_bind_update(t, relation, values, sign) for t in ts))
        case Sum(group=g, term=t):
            return Sum(g, _bind_update(t, relation, values, sign))
        case Assign(var=x, term=t) if isinstance(t, Term):
            return Assign(x, _bind_update(t, relation, values, sign))
        case Exists(term=t):
            return Exists(_bind_update(t, relation, values, sign))
    return q


# ----------------------------------------------------------------------------- simplification


def simplify(q: Term) -> Term:
    """``q`` with its sums and products flattened, constants folded and the identities
    ``Q + 0 = Q``, ``Q * 1 = Q``, ``Q * 0 = 0`` applied, to a fixed point; equal in meaning.

    A term may hold one subterm object in many places (the product rule of :func:`delta`
    refers to ``Δ(A * B)`` in each of the terms of ``Δ(A * B * C)``, so a product of ``k``
    factors has a delta tree of ``2^k`` leaves made of ``k`` shared parts): each object is
    simplified once per pass."""
    while True:
        out = _simplify(q, {})
        if out == q:
            return out
        q = out


def _constant(q: Term) -> Number | None:
    return q.value if isinstance(q, Const) else None


def _simplify(q: Term, done: dict[int, tuple[Term, Term]]) -> Term:
    """One pass of :func:`simplify` over ``q``; ``done``: the subterm objects simplified in this
    pass, by identity (with the object, which keeps its identity from being reused)."""
    seen = done.get(id(q))
    if seen is not None:
        return seen[1]
    match q:
        case Add(terms=ts):
            out = _sum([_simplify(t, done) for t in ts])
        case Mul(terms=ts):
            out = _product([_simplify(t, done) for t in ts])
        case Sum(group=g, term=t):
            inner = _simplify(t, done)
            out = ZERO if inner == ZERO else inner if isinstance(inner, Const) and not g else Sum(g, inner)
        case Assign(var=x, term=t) if isinstance(t, Term):
            out = Assign(x, _simplify(t, done))
        case Exists(term=t):
            inner = _simplify(t, done)
            out = ZERO if inner == ZERO else ONE if isinstance(inner, Const) else Exists(inner)
        case Cmp(op=op, left=l, right=r) if not isinstance(l, Var) and not isinstance(r, Var):
            out = ONE if COMPARISONS[op](l.value, r.value) else ZERO
        case _:
            out = q
    done[id(q)] = (q, out)
    return out


def _product(factors: list[Term]) -> Term:
    flat: list[Term] = []
    for f in factors:
        flat.extend(f.terms if isinstance(f, Mul) else (f,))
    coefficient: Number = 1
    rest: list[Term] = []
    for f in flat:
        c = _constant(f)
        if c is not None:
            coefficient *= c
        elif not (isinstance(f, Exists) and f in rest):  # Exists(q) * Exists(q) = Exists(q)
            rest.append(f)
    if coefficient == 0:
        return ZERO
    if not rest:
        return Const(_normal(coefficient))
    if coefficient != 1:
        rest.insert(0, Const(_normal(coefficient)))
    return rest[0] if len(rest) == 1 else Mul(tuple(rest))


def _sum(terms: list[Term]) -> Term:
    """The sum of ``terms``: flattened, monomials equal but for their constant factor merged
    (in the order they first appear), zeros dropped."""
    flat: list[Term] = []
    for t in terms:
        flat.extend(t.terms if isinstance(t, Add) else (t,))
    merged: dict[Term, Number] = {}
    for t in flat:
        c, monomial = _split(t)
        merged[monomial] = merged.get(monomial, 0) + c
    out = [_product([Const(c), m]) for m, c in merged.items() if c != 0]
    if not out:
        return ZERO
    return out[0] if len(out) == 1 else Add(tuple(out))


def _split(t: Term) -> tuple[Number, Term]:
    """(constant factor, the rest) of a term: ``2 * R(x)`` -> (2, R(x)); ``3`` -> (3, 1)."""
    if isinstance(t, Const):
        return t.value, ONE
    if isinstance(t, Mul) and t.terms and isinstance(t.terms[0], Const):
        rest = t.terms[1:]
        return t.terms[0].value, rest[0] if len(rest) == 1 else Mul(rest)
    return 1, t


def _normal(c: Number) -> Number:
    """A whole Fraction as an int."""
    return int(c) if isinstance(c, Fraction) and c.denominator == 1 else c
