"""AGCA terms (DBToaster, ``../shared/seeds/004_…`` §3.2) and their binding patterns (§3.3).

The abstract syntax of the paper,

    q ::= q * q | q + q | -q | c | x | R(x⃗) | Sum_A⃗(q) | x θ 0 | x := q

becomes one frozen dataclass per case: :class:`Const`, :class:`Var`, :class:`Rel` (a base
relation, the update ``ΔR`` of one (``delta=True``), or a materialized map: :class:`MapRef`),
:class:`Add`, :class:`Mul`, :class:`Sum`, :class:`Cmp` (``x θ y``, the paper's sugar for
``(x − y) θ 0``, with variables or constants on either side) and :class:`Assign`; and
:class:`Lift`, a scalar function of bound variables lifted into a term (DBToaster's external
functions, §3.2 and §7: a condition such as a disjunction, or a CASE value); and
:class:`Exists`, the support of a term (the domain of a nested aggregate's delta, §5.3's
revised delta rule for nested queries).  ``-q`` is
``Mul((Const(-1), q))``.  ``Add`` and ``Mul`` hold their operands in order: the product passes
the bindings of its left factors to its right ones (sideways information passing).

Terms print in the paper's notation (``Sum[A](R(A, B) * (B < z))``).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from fractions import Fraction
from collections.abc import Iterator, Sequence
from typing import Union

from idivm.algebra import expressions as E
from idivm.algebra.rewrite import substitute

Number = Union[int, Fraction]

#: below this magnitude a multiplicity held as a double is 0
EPSILON = 1e-9

#: the relative difference below which the tolerant comparisons (``~<`` …) take two numbers as
#: equal: sums kept by adding increments differ from their recomputation by rounding
ROUNDING = 1e-9


def within_rounding(a: float, b: float) -> bool:
    """Whether ``a`` and ``b`` differ by rounding only (:data:`ROUNDING`, relative)."""
    return abs(a - b) <= ROUNDING * max(abs(a), abs(b), 1.0)


#: the comparison operators θ of AGCA conditions, and what each computes; those after ``~``
#: compare up to rounding, for values computed from maps (a sum times a count against a sum,
#: say), which would otherwise flip where the two sides are equal
COMPARISONS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
               ">": operator.gt, ">=": operator.ge,
               "~=": within_rounding, "~!=": lambda a, b: not within_rounding(a, b),
               "~<": lambda a, b: a < b and not within_rounding(a, b),
               "~>": lambda a, b: a > b and not within_rounding(a, b),
               "~<=": lambda a, b: a <= b or within_rounding(a, b),
               "~>=": lambda a, b: a >= b or within_rounding(a, b)}
#: ``a θ b`` as ``b θ' a``, for the comparisons of SQL
FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True, slots=True)
class Term:
    """An AGCA expression."""

    def __str__(self) -> str:
        return show(self)

    def __add__(self, other: "Term") -> "Term":
        return Add((self, other))

    def __mul__(self, other: "Term") -> "Term":
        return Mul((self, other))

    def __neg__(self) -> "Term":
        return Mul((Const(-1), self))

    def __sub__(self, other: "Term") -> "Term":
        return Add((self, -other))


@dataclass(frozen=True, slots=True)
class Const(Term):
    """A constant c of ℚ: the GMR ``⟨⟩ ↦ c``."""

    value: Number


@dataclass(frozen=True, slots=True)
class Var(Term):
    """A variable's value ``⟨⟩ ↦ b(x)``; evaluating it unbound fails."""

    name: str


#: what a comparison compares: a variable or a constant (of any value type)
Operand = Union[Var, "Value"]


@dataclass(frozen=True, slots=True)
class Value:
    """A constant operand of a comparison or an assignment's right side that is not a
    number (a string, a date): AGCA conditions range over the values of columns."""

    value: object

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True)
class Rel(Term):
    """The relation atom ``R(x1, …, xk)``: the tuples of relation ``name`` with its columns
    renamed to ``variables`` in order; ``delta``: the update ``ΔR`` of the relation instead."""

    name: str
    variables: tuple[str, ...]
    delta: bool = False


@dataclass(frozen=True, slots=True)
class MapRef(Term):
    """A materialized map ``M[in⃗][out⃗]`` (§4): a GMR over its key variables stored by the
    engine, read as ``inputs + outputs`` (after ``renames``); the inputs must be bound where it
    is read."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    #: (the map's key variable, its name here) where they differ: a map shared by definitions
    #: equal up to the names of their variables
    renames: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Add(Term):
    """Bag union ``q1 + q2 + …`` (also the update of a GMR by another)."""

    terms: tuple[Term, ...]


@dataclass(frozen=True, slots=True)
class Mul(Term):
    """Natural join ``q1 * q2 * …``, passing bindings left to right."""

    terms: tuple[Term, ...]


@dataclass(frozen=True, slots=True)
class Sum(Term):
    """``Sum_A⃗(q)``: the multiplicity-preserving projection on the group-by variables A⃗."""

    group: tuple[str, ...]
    term: Term


@dataclass(frozen=True, slots=True)
class Cmp(Term):
    """The condition ``left θ right``: ``⟨⟩ ↦ 1`` where it holds, else the empty GMR."""

    op: str
    left: "Var | Value | Const"
    right: "Var | Value | Const"

    def __post_init__(self) -> None:
        if self.op not in COMPARISONS:
            raise ValueError(f"unknown comparison {self.op!r}: use one of {', '.join(COMPARISONS)}")


@dataclass(frozen=True, slots=True)
class Assign(Term):
    """``x := q``: the singleton ``⟨x: v⟩ ↦ 1`` where ``v`` is the multiplicity of ``⟨⟩`` in
    ``q`` (a non-grouping aggregate or a constant), or the value ``q`` names (a :class:`Value`,
    or a :class:`Var`'s value of any type)."""

    var: str
    term: "Term | Value"


@dataclass(frozen=True, slots=True)
class Lift(Term):
    """A scalar expression ``expr`` of our algebra (:mod:`idivm.algebra.expressions`) over
    variables (``Var("x.c")``), of the functions :data:`LIFTED_FUNCTIONS` and CASE, lifted into
    AGCA: with ``condition``, ``⟨⟩ ↦ 1`` where it is TRUE (not FALSE, not NULL), else the empty
    GMR (a condition AGCA's comparisons do not spell, such as a disjunction); without, ``⟨⟩ ↦ v``
    for its value ``v``, the empty GMR where it is NULL (an aggregate's argument such as a
    CASE).  It reads its variables and binds none; its delta is 0."""

    expr: object  # idivm.algebra.expressions.Term
    condition: bool = True


@dataclass(frozen=True, slots=True)
class Exists(Term):
    """``Exists(q)``: ``t ↦ 1`` for every tuple ``t`` whose multiplicity in ``q`` is not 0, the
    empty GMR elsewhere (DBToaster's later ``Exists``).  Its binding pattern is ``q``'s.  The
    delta rule of a nested aggregate correlated on equalities (:func:`idivm.agca.delta.delta`)
    multiplies the difference it computes by ``Exists`` of the nested delta summed by the
    correlation variables: the outer tuples whose nested value changes (§5.3, "we extract all
    range restrictions and prepend them to the delta"), so that a trigger evaluates the nested
    value again only for them, not for every tuple of the outer query."""

    term: Term


#: the scalar functions a :class:`Lift` may apply: those the reference interpreter evaluates
#: (:func:`idivm.agca.gmr.lifted`) as Spark does
LIFTED_FUNCTIONS = frozenset({"add", "sub", "mul", "div", "neg", "eq", "ne", "lt", "le", "gt", "ge", "and", "or",
                              "not", "is_null", "like", "in"})


def lift_variables(expr: object) -> frozenset[str]:
    """The variables a lifted expression reads."""
    return expr.variables()  # type: ignore[attr-defined]


def _renamed_expr(expr: object, names: dict[str, str]) -> object:
    return substitute(expr, {E.Var(x): E.Var(y) for x, y in names.items()})  # type: ignore[arg-type]


ZERO = Const(0)
ONE = Const(1)


# ----------------------------------------------------------------------------- binding patterns


def inputs(q: Term) -> frozenset[str]:
    """The input variables (parameters) of ``q`` (§3.3): those it reads without binding them
    itself; ``q`` can be evaluated only where they are bound."""
    return _pattern(q)[0]


def outputs(q: Term) -> frozenset[str]:
    """The output variables of ``q`` (§3.3): the schema of its result."""
    return _pattern(q)[1]


def _pattern(q: Term) -> tuple[frozenset[str], frozenset[str]]:
    match q:
        case Const() | Value():
            return frozenset(), frozenset()
        case Var(name=x):
            return frozenset({x}), frozenset()
        case Cmp(left=l, right=r):
            return frozenset(v.name for v in (l, r) if isinstance(v, Var)), frozenset()
        case Lift(expr=e):
            return lift_variables(e), frozenset()
        case Assign(var=x, term=t):
            return (_pattern(t)[0] if isinstance(t, Term) else frozenset()), frozenset({x})
        case Rel(variables=vs):
            return frozenset(), frozenset(vs)
        case MapRef(inputs=i, outputs=o):
            return frozenset(i), frozenset(o)
        case Add(terms=ts):
            pats = [_pattern(t) for t in ts]
            return frozenset().union(*(p[0] for p in pats)), frozenset().union(*(p[1] for p in pats))
        case Mul(terms=ts):
            ins: frozenset[str] = frozenset()
            outs: frozenset[str] = frozenset()
            for t in ts:  # a factor's inputs bound by the factors left of it are not the product's
                i, o = _pattern(t)
                ins |= i - outs
                outs |= o
            return ins, outs
        case Sum(group=g, term=t):
            i, o = _pattern(t)
            return i | (frozenset(g) - o), frozenset(g) & o
        case Exists(term=t):
            return _pattern(t)
    raise TypeError(f"not an AGCA term: {q!r}")


def bindings(factors: Sequence[Term], trigger: frozenset[str]) -> tuple[set[str], list[Term], list[Term]]:
    """The variables bound where ``trigger`` are (a trigger's values, or an update's atoms'
    variables): those, those assigned them, and those equal to them (unification, §6); the factors that bind
    them, in an order where each reads only variables bound before it; and the other factors.
    An equality ``x = y`` with one side bound becomes the assignment of the other side."""
    bound = set(trigger)
    order: list[Term] = []
    left = list(factors)
    changed = True
    while changed:
        changed = False
        for f in list(left):
            binding = None
            if isinstance(f, Assign) and f.var not in bound and (
                    isinstance(f.term, Value) or (isinstance(f.term, Var) and f.term.name in bound)):
                binding = f
            elif isinstance(f, Cmp) and f.op == "=" and isinstance(f.left, Var) and isinstance(f.right, Var):
                ends = [f.left.name in bound, f.right.name in bound]
                if ends == [True, False]:
                    binding = Assign(f.right.name, f.left)
                elif ends == [False, True]:
                    binding = Assign(f.left.name, f.right)
            if binding is not None:
                bound.add(binding.var)
                order.append(binding)
                left.remove(f)
                changed = True
    return bound, order, left


def subterms(q: Term) -> Iterator[Term]:
    """``q`` and every term inside it (nested aggregates included)."""
    yield q
    match q:
        case Add(terms=ts) | Mul(terms=ts):
            for t in ts:
                yield from subterms(t)
        case Sum(term=t) | Exists(term=t):
            yield from subterms(t)
        case Assign(term=t) if isinstance(t, Term):
            yield from subterms(t)


def atoms(q: Term) -> Iterator[Rel]:
    """The relation atoms of ``q`` (delta atoms and those of nested aggregates included)."""
    return (t for t in subterms(q) if isinstance(t, Rel))


def map_refs(q: Term) -> Iterator[MapRef]:
    """The map references of ``q`` (those of nested aggregates included)."""
    return (t for t in subterms(q) if isinstance(t, MapRef))


def relations(q: Term) -> frozenset[str]:
    """The names of the relations ``q`` reads (delta atoms included)."""
    return frozenset(a.name for a in atoms(q))


def degree(q: Term) -> int:
    """The degree of ``q`` (§4): the most relation atoms a union-free part of it joins."""
    match q:
        case Rel(delta=False):
            return 1
        case Add(terms=ts):
            return max((degree(t) for t in ts), default=0)
        case Mul(terms=ts):
            return sum(degree(t) for t in ts)
        case Sum(term=t) | Exists(term=t):
            return degree(t)
        case Assign(term=t) if isinstance(t, Term):
            return degree(t)
    return 0


# ----------------------------------------------------------------------------- notation


def show(q: "Term | Value") -> str:
    """``q`` in the paper's notation."""
    match q:
        case Value(value=None):
            return "⊥"
        case Const(value=v) | Value(value=v) if not isinstance(v, str):
            return str(v)
        case Value(value=v):
            return repr(v)
        case Var(name=x):
            return x
        case Rel(name=n, variables=vs, delta=d):
            return f"{'Δ' if d else ''}{n}({', '.join(vs)})"
        case MapRef(name=n, inputs=i, outputs=o):
            return f"{n}[{', '.join(i)}][{', '.join(o)}]"
        case Add(terms=ts):
            return "(" + " + ".join(show(t) for t in ts) + ")" if ts else "0"
        case Mul(terms=ts):
            return " * ".join(_factor(t) for t in ts) if ts else "1"
        case Sum(group=g, term=t):
            return f"Sum[{', '.join(g)}]({show(t)})"
        case Cmp(op=op, left=l, right=r):
            return f"({show(l)} {op} {show(r)})"
        case Lift(expr=e, condition=c):
            return f"{{{e}}}" if c else f"[{e}]"
        case Assign(var=x, term=t):
            return f"({x} := {show(t)})"
        case Exists(term=t):
            return f"Exists({show(t)})"
    raise TypeError(f"not an AGCA term: {q!r}")


def _factor(t: Term) -> str:
    text = show(t)
    return f"({text})" if isinstance(t, Mul) and len(t.terms) > 1 else text


def rename(q: "Term | Value", names: dict[str, str]) -> "Term | Value":
    """``q`` with its variables renamed by ``names`` (others kept)."""
    def r(x: str) -> str:
        return names.get(x, x)

    match q:
        case Const() | Value():
            return q
        case Var(name=x):
            return Var(r(x))
        case Rel(name=n, variables=vs, delta=d):
            return Rel(n, tuple(r(x) for x in vs), d)
        case MapRef(name=n, inputs=i, outputs=o, renames=rs):
            return MapRef(n, tuple(r(x) for x in i), tuple(r(x) for x in o), tuple((k, r(x)) for k, x in rs))
        case Add(terms=ts):
            return Add(tuple(rename(t, names) for t in ts))  # type: ignore[misc]
        case Mul(terms=ts):
            return Mul(tuple(rename(t, names) for t in ts))  # type: ignore[misc]
        case Sum(group=g, term=t):
            return Sum(tuple(dict.fromkeys(r(x) for x in g)), rename(t, names))  # type: ignore[arg-type]
        case Cmp(op=op, left=left, right=right):
            return Cmp(op, rename(left, names), rename(right, names))  # type: ignore[arg-type]
        case Lift(expr=e, condition=c):
            return Lift(_renamed_expr(e, names), c)
        case Assign(var=x, term=t):
            return Assign(r(x), rename(t, names))
        case Exists(term=t):
            return Exists(rename(t, names))  # type: ignore[arg-type]
    raise TypeError(f"not an AGCA term: {q!r}")


def canonical(q: Term) -> tuple[Term, dict[str, str]]:
    """``q`` with its variables renamed ``$1``, ``$2``, … in the order they first appear, and
    that renaming: two terms equal up to the names of their variables, and up to the order of
    the relation atoms a product starts with, have one canonical form."""
    q = _reordered(q, atoms=True)  # type: ignore[assignment]
    order: dict[str, str] = {}

    def visit(t: "Term | Value") -> None:
        match t:
            case Var(name=x):
                order.setdefault(x, f"${len(order) + 1}")
            case Rel(variables=vs):
                for x in vs:
                    order.setdefault(x, f"${len(order) + 1}")
            case MapRef(inputs=i, outputs=o):
                for x in (*i, *o):
                    order.setdefault(x, f"${len(order) + 1}")
            case Add(terms=ts) | Mul(terms=ts):
                for x in ts:
                    visit(x)
            case Sum(group=g, term=x):
                visit(x)
                for v in g:
                    order.setdefault(v, f"${len(order) + 1}")
            case Cmp(left=left, right=right):
                visit(left)
                visit(right)
            case Lift(expr=e):
                for x in e.walk():  # type: ignore[attr-defined]
                    if isinstance(x, E.Var):
                        order.setdefault(x.name, f"${len(order) + 1}")
            case Assign(var=x, term=body):
                visit(body)
                order.setdefault(x, f"${len(order) + 1}")
            case Exists(term=body):
                visit(body)

    visit(q)
    return _reordered(rename(q, order), atoms=False), order  # type: ignore[return-value,arg-type]


def _reordered(q: "Term | Value", *, atoms: bool) -> "Term | Value":
    """``q`` with, throughout, the relation atoms a product starts with sorted by relation (a
    stable sort; ``atoms``), or else the group-by variables of every Sum sorted (a Sum groups by
    a set).  Atoms read no variable bound elsewhere, so the atoms before a product's first other
    factor can be permuted without changing what any factor is evaluated with."""
    match q:
        case Mul(terms=ts):
            ts = tuple(_reordered(t, atoms=atoms) for t in ts)  # type: ignore[misc]
            if atoms:
                lead = next((i for i, t in enumerate(ts) if not isinstance(t, Rel)), len(ts))
                ts = tuple(sorted(ts[:lead], key=lambda a: (a.name, a.delta, len(a.variables)))) + ts[lead:]  # type: ignore[attr-defined]
            return Mul(ts)
        case Add(terms=ts):
            return Add(tuple(_reordered(t, atoms=atoms) for t in ts))  # type: ignore[misc]
        case Sum(group=g, term=t):
            return Sum(g if atoms else tuple(sorted(g)), _reordered(t, atoms=atoms))  # type: ignore[arg-type]
        case Assign(var=x, term=t) if isinstance(t, Term):
            return Assign(x, _reordered(t, atoms=atoms))
        case Exists(term=t):
            return Exists(_reordered(t, atoms=atoms))  # type: ignore[arg-type]
    return q
