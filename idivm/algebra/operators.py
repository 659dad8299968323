"""SQL++ plan operators (thesis Table 2.5, semantics in Appendix D).

Operators consume and produce bags of *binding tuples* (one value per
variable).  A plan is a tree of operators whose only leaf is ``Ground``; the
Return operators turn binding tuples into a value (a bag for a query).
Operators with a *nested* plan (ApplyPlan, InnerCorrelate, LeftCorrelate)
evaluate it once per input binding tuple, in an environment extended with
that tuple (App. D, items 11, 13, 14): the nested plan's ``Ground`` produces
that environment.

Nodes are immutable and hashable; ``inputs()`` are the operators they consume,
``nested()`` the nested plans.  ``output_variables()`` are the variables an
operator adds to or keeps in its binding tuples (environment variables are
always kept and are not listed).  Facts that passes infer (types, IDs,
provenance) live in maps keyed by node, not in fields.

The one traversal is :func:`transform_up` (bottom-up, memoized, so shared
subplans are visited once); :func:`walk` visits every node, nested plans
included.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, ClassVar, Iterator

from idivm.algebra.expressions import Term, TRUE
from idivm.errors import Span
from idivm.tree import span_field


@dataclass(frozen=True, slots=True)
class Operator:
    span: Span | None = span_field()

    # names of fields holding input operators / nested plans, in order (set by @_ops)
    _inputs: ClassVar[tuple[str, ...]] = ()
    _nested: ClassVar[tuple[str, ...]] = ()

    def inputs(self) -> tuple["Operator", ...]:
        return tuple(getattr(self, n) for n in self._inputs)

    def nested(self) -> tuple["Operator", ...]:
        return tuple(getattr(self, n) for n in self._nested)

    def with_inputs(self, *new: "Operator") -> "Operator":
        return replace(self, **dict(zip(self._inputs, new)))

    def with_nested(self, *new: "Operator") -> "Operator":
        return replace(self, **dict(zip(self._nested, new)))

    def terms(self) -> tuple[Term, ...]:
        """Every term the operator evaluates (for free-variable analysis)."""
        out: list[Term] = []
        for f in fields(self):
            v = getattr(self, f.name)
            _collect_terms(v, out)
        return tuple(out)

    def output_variables(self) -> tuple[str, ...]:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return type(self).__name__


def _collect_terms(v: Any, out: list) -> None:
    if isinstance(v, Term):
        out.append(v)
    elif isinstance(v, Aggregate):
        if v.arg is not None:
            out.append(v.arg)
    elif isinstance(v, tuple):
        for x in v:
            _collect_terms(x, out)


def _ops(*inputs: str, nested: tuple[str, ...] = ()):
    """Class decorator: declare which fields are inputs / nested plans."""

    def deco(cls):
        validate = cls.__dict__.get("_validate")
        if validate is not None:
            cls.__post_init__ = validate
        cls = dataclass(frozen=True, slots=True)(cls)
        cls._inputs = inputs
        cls._nested = nested
        return cls

    return deco


# ----------------------------------------------------------------------------- leaves and scans


@_ops()
class Ground(Operator):
    """The only leaf: one binding tuple, the environment Γ (App. D item 3)."""

    def output_variables(self) -> tuple[str, ...]:
        return ()


@_ops("input")
class ScanCollection(Operator):
    """``FROM source AS var [AT position]`` (App. D item 1).

    For each input binding tuple, one output tuple per element of ``source``
    (a base table of Γ or a collection-valued term over the input).  ``occurrence``
    (set by ID inference, never written by users) binds the number of the element
    among the equal elements before it, from 1: the value of a scalar element and
    its occurrence name it in a bag that repeats values.
    """

    input: Operator
    source: Term
    var: str
    position: str | None = None
    occurrence: str | None = None

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + (self.var,) + tuple(v for v in (self.position, self.occurrence) if v)


@_ops("input")
class NavTuple(Operator):
    """``base.name`` bound to ``var`` (App. D item 5)."""

    input: Operator
    base: Term
    field_name: str
    var: str

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + (self.var,)


# ----------------------------------------------------------------------------- per-tuple operators


@_ops("input")
class Select(Operator):
    """σ: keep binding tuples whose condition is true (App. D item 18)."""

    input: Operator
    condition: Term

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables()


@_ops("input")
class Project(Operator):
    """Generalized π: output exactly the variables ``outputs`` (name := term), App. D item 19."""

    input: Operator
    outputs: tuple[tuple[str, Term], ...]

    def _validate(self):
        names = [n for n, _ in self.outputs]
        if len(set(names)) != len(names):
            raise ValueError(f"Project outputs repeat a variable: {names}")

    def output_variables(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.outputs)


@_ops("input")
class Assign(Operator):
    """``LET var = term`` (App. D item 12)."""

    input: Operator
    term: Term
    var: str

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + (self.var,)


@_ops("input")
class FunctionCall(Operator):
    """λ: ``var := function(args)`` for a collection function (App. D item 6).

    ``function`` is one of COLLECTION_FUNCTIONS: aggregates over a
    collection-valued term (ARRAY_COUNT & co., and SQL aggregates applied to a
    collection such as a GROUP AS variable or a subquery).
    """

    input: Operator
    function: str
    args: tuple[Term, ...]
    var: str

    def _validate(self):
        if self.function not in COLLECTION_FUNCTIONS:
            raise ValueError(f"unknown collection function {self.function!r}")

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + (self.var,)


#: the statistics aggregates (of the central moments of the values: AsterixDB's)
STATISTICS = ("stddev_samp", "stddev_pop", "var_samp", "var_pop", "skewness", "kurtosis")
#: the aggregates whose value is a double, whatever their argument's numbers
#: the aggregate functions, of a group's members or of a collection's items
AGGREGATE_FUNCTIONS = ("count", "sum", "avg", "min", "max", *STATISTICS)
DOUBLE_AGGREGATES = frozenset({"avg", *STATISTICS})
COLLECTION_FUNCTIONS = frozenset({f"{kind}_{name}" for kind in ("array", "strict") for name in AGGREGATE_FUNCTIONS})


@_ops("input")
class ConstructTuple(Operator):
    """``var := {name: term, ...}`` (App. D item 17)."""

    input: Operator
    fields: tuple[tuple[str, Term], ...]
    var: str

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + (self.var,)


@_ops("input")
class ConstructBag(Operator):
    """``var := {{term, ...}}`` (App. D item 16)."""

    input: Operator
    items: tuple[Term, ...]
    var: str

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + (self.var,)


@_ops("input")
class ConstructArray(Operator):
    """``var := [term, ...]`` (App. D item 15)."""

    input: Operator
    items: tuple[Term, ...]
    var: str

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + (self.var,)


# ----------------------------------------------------------------------------- nested plans


@_ops("input", nested=("plan",))
class ApplyPlan(Operator):
    """α: ``var := value of plan`` evaluated per input tuple (App. D item 11).

    ``plan`` ends in a Return operator; a subquery's value is a bag.
    """

    input: Operator
    plan: Operator
    var: str

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + (self.var,)


@dataclass(frozen=True, slots=True)
class _Correlate(Operator):
    input: Operator
    plan: Operator

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + self.plan.output_variables()


@_ops("input", nested=("plan",))
class InnerCorrelate(_Correlate):
    """``FROM l INNER CORRELATE r``: each input tuple joined with the binding tuples of ``plan``
    evaluated in its environment (App. D item 13)."""


@_ops("input", nested=("plan",))
class LeftCorrelate(_Correlate):
    """As InnerCorrelate, but an input tuple whose nested result is empty is kept with the
    nested variables padded with NULL (App. D item 14)."""


# ----------------------------------------------------------------------------- binary operators


@dataclass(frozen=True, slots=True)
class _Join(Operator):
    left: Operator
    right: Operator
    condition: Term = TRUE

    def output_variables(self) -> tuple[str, ...]:
        return self.left.output_variables() + self.right.output_variables()


@_ops("left", "right")
class InnerJoin(_Join):
    """⋈ with a condition (App. D item 20); TRUE gives the cross product."""


@_ops("left", "right")
class LeftJoin(_Join):
    """Left outer join; unmatched left tuples get NULL right variables (App. D item 21)."""


@_ops("left", "right")
class SemiJoin(_Join):
    """⋉: left tuples for which some right tuple satisfies the condition (EXISTS, IN)."""

    def output_variables(self) -> tuple[str, ...]:
        return self.left.output_variables()


@_ops("left", "right")
class AntiJoin(_Join):
    """▷: left tuples for which no right tuple satisfies the condition (NOT EXISTS, NOT IN)."""

    def output_variables(self) -> tuple[str, ...]:
        return self.left.output_variables()


@_ops("left", "right")
class UnionAll(Operator):
    """⊎ of two inputs with the same variables (positional SQL UNION ALL is renamed by the builder)."""

    left: Operator
    right: Operator

    def _validate(self):
        if self.left.output_variables() != self.right.output_variables():
            raise ValueError("UnionAll inputs must have the same variables: "
                             f"{self.left.output_variables()} vs {self.right.output_variables()}")

    def output_variables(self) -> tuple[str, ...]:
        return self.left.output_variables()


# ----------------------------------------------------------------------------- grouping


@dataclass(frozen=True, slots=True)
class Aggregate:
    """An SQL aggregate over the members of a group: COUNT(*) has ``arg`` None."""

    function: str  # one of AGGREGATE_FUNCTIONS
    arg: Term | None
    distinct: bool = False

    def __post_init__(self):
        if self.function not in AGGREGATE_FUNCTIONS:
            raise ValueError(f"unknown aggregate {self.function!r}")
        if self.arg is None and self.function != "count":
            raise ValueError(f"{self.function}(*) is not an aggregate")

    def __str__(self) -> str:
        arg = "*" if self.arg is None else str(self.arg)
        return f"{self.function.upper()}({'DISTINCT ' if self.distinct else ''}{arg})"


@_ops("input")
class GroupBy(Operator):
    """γ (App. D item 23): ``GROUP BY term AS key, ... [GROUP AS group]`` with aggregates.

    Output: one binding tuple per group with the key variables, one variable
    per aggregate, and (if ``group_var``) the bag of the group's binding
    tuples as tuples: ``group_fields`` lists (field name, term) pairs.  With no keys there is
    exactly one group, also for empty input (SQL's global aggregate).
    """

    input: Operator
    keys: tuple[tuple[str, Term], ...]
    aggregates: tuple[tuple[str, Aggregate], ...] = ()
    group_var: str | None = None
    group_fields: tuple[tuple[str, Term], ...] = ()

    def output_variables(self) -> tuple[str, ...]:
        return (tuple(k for k, _ in self.keys) + tuple(a for a, _ in self.aggregates)
                + ((self.group_var,) if self.group_var else ()))


@_ops("input")
class OrderBy(Operator):
    """The ``ORDER BY`` of a subquery: binds ``var`` to the position (from 1) of each binding
    tuple among those of its environment, in the order of ``keys`` ((term, descending) pairs;
    NULL and MISSING first when ascending, last when descending).  Tuples that tie on the keys
    are ordered by their values, so that the positions are a function of the bag of tuples
    (and LIMIT without ORDER BY, no keys, keeps the tuples of smallest values)."""

    input: Operator
    keys: tuple[tuple[Term, bool], ...]
    var: str

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables() + (self.var,)


@_ops("input")
class Distinct(Operator):
    """δ: remove duplicate binding tuples."""

    input: Operator

    def output_variables(self) -> tuple[str, ...]:
        return self.input.output_variables()


# ----------------------------------------------------------------------------- returns


@_ops("input")
class ReturnBag(Operator):
    """``SELECT VALUE element``: the bag of ``element`` over the input tuples (App. D item 8);
    with ``order`` (a subquery's ORDER BY, the position an :class:`OrderBy` binds), the array of
    them in the order of ``order``."""

    input: Operator
    element: Term
    order: Term | None = None

    def output_variables(self) -> tuple[str, ...]:
        return ()


# ----------------------------------------------------------------------------- traversal


def walk(plan: Operator, *, into_nested: bool = True) -> Iterator[Operator]:
    """Every operator of the plan (pre-order), nested plans included unless not ``into_nested``."""
    seen: set[int] = set()
    stack = [plan]
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        yield op
        if into_nested:
            stack.extend(reversed(op.nested()))
        stack.extend(reversed(op.inputs()))


def transform_up(plan: Operator, fn: Callable[[Operator], Operator], *, into_nested: bool = True,
                 memo: dict[int, Operator] | None = None) -> Operator:
    """Rebuild the plan bottom-up, applying ``fn`` to each operator after its inputs
    (and nested plans) were transformed.  Shared subplans are transformed once; passing
    the same ``memo`` to several calls extends that to subplans the plans share (the
    caller keeps the plans alive meanwhile: the memo is keyed by object identity)."""
    memo = {} if memo is None else memo

    def go(op: Operator) -> Operator:
        key = id(op)
        if key in memo:
            return memo[key]
        new = op
        ins = tuple(go(i) for i in op.inputs())
        if ins != op.inputs() or any(a is not b for a, b in zip(ins, op.inputs())):
            new = new.with_inputs(*ins)
        if into_nested and op.nested():
            nest = tuple(go(n) for n in op.nested())
            new = new.with_nested(*nest)
        out = fn(new)
        memo[key] = out
        return out

    return go(plan)


def free_variables(plan: Operator) -> frozenset[str]:
    """Variables a plan reads from its environment (not bound inside it)."""
    bound: set[str] = set()
    used: set[str] = set()
    for op in walk(plan):
        for t in op.terms():
            used |= t.variables()
        bound |= set(op.output_variables())
        match op:
            case GroupBy(keys=keys, aggregates=aggs, group_var=g):
                bound |= {k for k, _ in keys} | {a for a, _ in aggs} | ({g} if g else set())
    return frozenset(used - bound)


OPERATORS: tuple[type[Operator], ...] = (
    Ground, ScanCollection, NavTuple, Select, Project, Assign, FunctionCall, ConstructTuple,
    ConstructBag, ConstructArray, ApplyPlan, InnerCorrelate, LeftCorrelate, InnerJoin, LeftJoin,
    SemiJoin, AntiJoin, UnionAll, GroupBy, Distinct, ReturnBag,
)
