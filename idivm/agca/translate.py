"""Aggregate cores of our algebra as AGCA terms (the first step of maintaining them by maps).

An aggregate core is a γ (:class:`~idivm.algebra.operators.GroupBy`) over selections and inner
joins of base-table scans.  Its input becomes the product of one relation atom per scan (the
scanned tuple's field ``x.c`` is the variable ``x.c``) and one condition per comparison of its
join and selection predicates (DBToaster §3.2: selection is a product with a condition); each
aggregate becomes a ``Sum`` over the group-by variables:

* ``SUM(e)`` -> ``Sum[k⃗](input * e)``, ``e`` built from fields and numbers by + − * (which
  AGCA has on multiplicities), and ``<name>$n`` ``Sum[k⃗](input * (x ≠ ⊥) * ...)``, how many
  members have every field ``x`` of ``e`` defined: SQL's SUM ignores NULLs and is NULL where
  the group has no value (a NULL ``x`` makes its member's product NULL, which Spark's sums
  ignore; the reference interpreter is not given NULLs);
* ``COUNT(*)`` -> ``Sum[k⃗](input)``, ``COUNT(e)`` the same with ``x ≠ ⊥`` for every field
  ``x`` of ``e``; ``AVG(e)`` -> ``<name>$sum`` and ``<name>$count``, the
  sum and the count of defined values (the division is done on the maps' values);
* ``MIN(x)``, ``MAX(x)`` and the DISTINCT aggregates of a field ``x`` -> the per-group
  value-multiplicity map ``Sum[k⃗, x](input)`` (how many members have each value): the
  aggregate is read off the values whose multiplicity is not 0 (:func:`aggregate_values`),
  so a deletion of the extreme value finds the next one without reading the input;
* and every core gets ``COUNT(*)`` as well: a group exists while its count is not 0.

``[NOT] EXISTS`` and ``IN`` (semi- and antijoins) become a nested aggregate, the number of
the subquery's tuples that match the outer one (``z := Sum[](subquery * correlation)``),
compared with 0 (DBToaster §3.2 and §5.3: its maps get the outer tuple's variables as inputs).

What has no such form (outer joins, nested plans, an extremum or
DISTINCT aggregate of an expression, functions other than arithmetic) raises
:class:`Untranslatable` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from idivm.agca.gmr import GMR
from idivm.agca.terms import (
    EPSILON, FLIPPED, LIFTED_FUNCTIONS, ONE, Add, Assign, Cmp, Const, Lift, Mul, Rel, Sum, Term, Value, Var,
)
from idivm.algebra import expressions as E
from idivm.algebra import operators as O
from idivm.errors import IdivmError

#: the comparison of each of our scalar functions
_COMPARISONS = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
#: the name of the count every core gets
COUNT = "__count"
#: the value of a NULL field (``x ≠ ⊥``: the field is defined)
NULL = Value(None)


class Untranslatable(IdivmError):
    """A plan or term with no AGCA form here."""


@dataclass(frozen=True, slots=True)
class AggregateCore:
    """A γ as AGCA: ``keys`` (output name, the variable it is) and one term per aggregate
    output (for AVG two: ``<name>$sum`` and ``<name>$count``), plus :data:`COUNT`."""

    keys: tuple[tuple[str, str], ...]
    terms: dict[str, Term]
    averages: tuple[str, ...] = ()
    #: (output, function, distinct, value variable) of the aggregates read off a value map
    #: ``<output>$values``
    by_value: tuple[tuple[str, str, bool, str], ...] = ()


def translate_group_by(op: O.GroupBy, columns: Mapping[str, Sequence[str]]) -> AggregateCore:
    """The AGCA terms of γ ``op``; ``columns``: each base table's columns in order."""
    if op.group_var:
        raise Untranslatable("a GROUP AS bag has no AGCA form")
    body = _body(op.input, columns)
    keys = tuple((name, _variable(t)) for name, t in op.keys)
    group = tuple(dict.fromkeys(v for _, v in keys))
    terms: dict[str, Term] = {}
    averages = []
    by_value = []
    for name, a in op.aggregates:
        if a.distinct or a.function in ("min", "max"):
            if not isinstance(a.arg, E.Field):
                raise Untranslatable(f"{a}: a value map needs a field, not an expression")
            x = _variable(a.arg)
            terms[f"{name}$values"] = Sum(tuple(dict.fromkeys((*group, x))), body)
            by_value.append((name, a.function, a.distinct, x))
            continue
        if a.function not in ("sum", "avg", "count"):
            raise Untranslatable(f"{a} has no AGCA form here")
        if a.function in ("sum", "avg"):
            value = _value(a.arg)
            terms[name if a.function == "sum" else f"{name}$sum"] = Sum(group, Mul((body, value)))
            terms[f"{name}$n" if a.function == "sum" else f"{name}$count"] = Sum(group, Mul((body, *_defined(value))))
        if a.function == "count":  # COUNT(*), or COUNT(e): the members with every field of e defined
            terms[name] = Sum(group, body if a.arg is None else Mul((body, *_defined(_value(a.arg)))))
        if a.function == "avg":
            averages.append(name)
    terms[COUNT] = Sum(group, body)
    return AggregateCore(keys, terms, tuple(averages), tuple(by_value))


def _body(op: O.Operator, columns: Mapping[str, Sequence[str]], joins: list | None = None,
          scalars: dict[str, "_Scalar"] | None = None) -> Term:
    """``op``'s tuples as a product of atoms and conditions; ``joins``: the semi- and antijoins
    and subqueries met so far (each one's values are variables of their own); ``scalars``: the
    scalar subqueries of the plan below (by the variable the plan binds), which a selection
    compares with."""
    joins = [] if joins is None else joins
    scalars = {} if scalars is None else scalars
    match op:
        case O.ScanCollection(input=O.Ground(), source=E.TableRef(name=str() as table), var=x,
                              position=None, occurrence=None):
            if table not in columns:
                raise Untranslatable(f"no columns known for table {table}")
            return Rel(table, tuple(field_variable(x, c) for c in columns[table]))
        case O.InnerJoin(left=left, right=right, condition=c):
            return Mul((_body(left, columns, joins, scalars), _body(right, columns, joins, scalars), _condition(c)))
        case O.Select(input=inner, condition=c):
            body = _body(inner, columns, joins, scalars)
            return Mul((body, *(_compared(t, scalars) if _reads(t, scalars) else _condition(t) for t in E.conjuncts(c))))
        case O.ApplyPlan(input=inner, plan=sub, var=v):
            # a scalar subquery: its aggregates become nested aggregates where a selection
            # compares with it (above); nothing here
            scalars[v] = _scalar(sub, columns, joins, scalars)
            return _body(inner, columns, joins, scalars)
        case O.SemiJoin(left=left, right=right, condition=c) | O.AntiJoin(left=left, right=right, condition=c):
            clash = set(left.output_variables()) & set(right.output_variables())
            if clash:
                raise Untranslatable(f"the subquery names {', '.join(sorted(clash))} as the query does")
            # EXISTS / IN: how many right tuples match the left one, a nested aggregate
            # correlated on the left's variables (§3.2's :=); some (⋉) or none (▷)
            matches = Var(f"{op.name}#{len(joins)}")
            joins.append(op)
            nested = Sum((), Mul((_body(right, columns, joins, scalars), _condition(c))))
            return Mul((_body(left, columns, joins, scalars), Assign(matches.name, nested),
                        Cmp("!=" if isinstance(op, O.SemiJoin) else "=", matches, Const(0))))
    raise Untranslatable(f"{op.name} has no AGCA form here")


@dataclass(frozen=True, slots=True)
class _Scalar:
    """A scalar subquery ``SELECT VALUE k * AGG(e) FROM … WHERE …`` as AGCA: the nested
    aggregates that compute it (``assignments``), and its value as ``numerator / denominator``
    (variables; the denominator None for SUM and COUNT, the count of defined values for AVG),
    defined where ``defined`` (a variable, the count of defined values: SUM and AVG of no
    value are NULL) is not 0."""

    assignments: tuple[Term, ...]
    numerator: str
    denominator: str | None
    defined: str | None


def _scalar(sub: O.Operator, columns: Mapping[str, Sequence[str]], joins: list,
            scalars: dict[str, "_Scalar"]) -> _Scalar:
    refused = Untranslatable("a subquery compared with must return one aggregate (times a number), without GROUP BY")
    if not isinstance(sub, O.ReturnBag):
        raise refused
    element, below = sub.element, sub.input
    match element:  # SELECT VALUE e, or SQL's SELECT e (a tuple of one field)
        case E.TupleExpr(fields=((_, value),)):
            element = value
    if isinstance(below, O.Project) and isinstance(element, E.Var):
        element = dict(below.outputs).get(element.name, element)
        below = below.input
    match below:
        case O.GroupBy(input=inner, keys=(), aggregates=((name, a),), group_var=None):
            pass
        case _:
            raise refused
    factor = 1
    match element:
        case E.Var(name=x) if x == name:
            pass
        case E.Call(function="mul", args=(E.Const(value=k), E.Var(name=x))) | \
                E.Call(function="mul", args=(E.Var(name=x), E.Const(value=k))) if x == name and \
                isinstance(k, (int, float)) and not isinstance(k, bool):
            factor = k
        case _:
            raise Untranslatable(f"the subquery's value {element} is not an aggregate times a number")
    if a.distinct or a.function not in ("sum", "count", "avg"):
        raise Untranslatable(f"{a} in a subquery has no AGCA form here")
    body = _body(inner, columns, joins, scalars)
    serial = len(joins)
    joins.append(sub)
    total, count = f"subquery#{serial}$sum", f"subquery#{serial}$count"
    if a.function == "count":
        term = body if a.arg is None else Mul((body, *_defined(_value(a.arg))))
        assignments: list[Term] = [Assign(total, Sum((), term))]
        defined = None
    else:
        value = _value(a.arg)
        assignments = [Assign(total, Sum((), Mul((body, value)))), Assign(count, Sum((), Mul((body, *_defined(value)))))]
        defined = count
    numerator = total
    if factor != 1:
        numerator = f"subquery#{serial}$value"
        assignments.append(Assign(numerator, Mul((Const(factor), Var(total)))))
    return _Scalar(tuple(assignments), numerator, count if a.function == "avg" else None, defined)


def _subquery(t: E.Term, scalars: Mapping[str, _Scalar]) -> str | None:
    """The variable of the scalar subquery ``t`` reads (``subquery[0]``), if it is one."""
    match t:
        case E.Index(base=E.Var(name=v), index=E.Const(value=0)) if v in scalars:  # (SELECT VALUE …)[0]
            return v
        case E.Field(base=E.Call(function="singleton", args=(E.Var(name=v),))) if v in scalars:  # SQL's (SELECT …)
            return v
    return None


def _reads(t: E.Term, scalars: Mapping[str, _Scalar]) -> bool:
    return bool(scalars) and isinstance(t, E.Call) and any(_subquery(x, scalars) for x in t.args)


def _compared(t: E.Term, scalars: Mapping[str, _Scalar]) -> Term:
    """A comparison with a scalar subquery, of a field or number or of another subquery (VWAP's
    shape: a quarter of the total volume against the volume above a price): the subqueries'
    nested aggregates, then their values compared, each ``n`` (SUM, COUNT) or ``n / d`` (AVG,
    ``d`` > 0), as ``a * d2 op n2`` (``a * d1 * d2 op n2 * d1`` for two averages), where every
    subquery's value is defined (and ``x`` is)."""
    match t:
        case E.Call(function=f, args=(left, right)) if f in _COMPARISONS:
            pass
        case _:
            raise Untranslatable(f"condition {t} has no AGCA form here")
    op = _COMPARISONS[f]
    v = _subquery(right, scalars)
    other = left
    if v is None:
        v, other, op = _subquery(left, scalars), right, FLIPPED[op]
    if v is None:
        raise Untranslatable(f"condition {t} has no AGCA form here")
    sq = scalars[v]
    w = _subquery(other, scalars)
    factors: list[Term] = list(sq.assignments)
    if w is not None:  # a subquery on both sides: the other's value is (numerator, denominator)
        osq = scalars[w]
        factors += [a for a in osq.assignments if a not in factors]
        if osq.defined is not None:
            factors.append(Cmp("!=", Var(osq.defined), Const(0)))
        x: Var | Value | Const = Var(osq.numerator)
        others = [osq.denominator] if osq.denominator is not None else []
    else:
        x = _operand(other)
        others = []
        if isinstance(x, Var):
            factors.append(Cmp("!=", x, NULL))
    if sq.defined is not None:
        factors.append(Cmp("!=", Var(sq.defined), Const(0)))
    # compared up to rounding: the subquery's sums are kept by adding increments, and would
    # otherwise decide a tie (a part priced at its device's average) by their rounding
    left_side, right_side = x, Var(sq.numerator)
    if sq.denominator is not None:
        scaled = f"{sq.numerator}$times${x}"
        factors.append(Assign(scaled, Mul((x, Var(sq.denominator)))))  # type: ignore[arg-type]
        left_side = Var(scaled)
    for d in others:
        scaled = f"{right_side.name}$times${d}"
        factors.append(Assign(scaled, Mul((right_side, Var(d)))))
        right_side = Var(scaled)
    factors.append(Cmp("~" + op, left_side, right_side))
    return Mul(tuple(factors))


def _condition(t: E.Term) -> Term:
    """A conjunct of a join or selection predicate: a comparison of fields and constants is a
    condition of AGCA's (which unification and binding reason about), any other predicate of
    the lifted functions a :class:`Lift`."""
    if t == E.TRUE:
        return ONE
    match t:
        case E.Call(function="and", args=parts):
            return Mul(tuple(_condition(p) for p in parts))
        case E.Call(function=f, args=(left, right)) if f in _COMPARISONS and _compares(left) and _compares(right):
            return Cmp(_COMPARISONS[f], _operand(left), _operand(right))
    return _lifted(t, condition=True)


def field_variable(x: str, c: str) -> str:
    """The AGCA variable of field ``c`` of the tuples a plan binds to ``x``: ``x.c``, with every
    backquote written ``%60`` (and ``%`` as ``%25``), since the variables name the columns of
    the map tables and delta-spark cannot MERGE a column named with a backquote."""
    return f"{x}.{c}".replace("%", "%25").replace("`", "%60")


def _compares(t: E.Term) -> bool:
    """Whether ``t`` is an operand of an AGCA comparison (:func:`_operand`)."""
    return isinstance(t, E.Field) and isinstance(t.base, E.Var) or isinstance(t, E.Const) and t.value is not None


def _lifted(t: E.Term, condition: bool) -> Lift:
    """``t`` lifted into AGCA (DBToaster's external functions): fields of the scanned tuples
    (the variables ``x.c``), constants, CASE and the functions of :data:`LIFTED_FUNCTIONS`."""
    def lift(x: E.Term) -> E.Term:
        match x:
            case E.Field(base=E.Var(name=v), name=c):
                return E.Var(field_variable(v, c))
            case E.Const():
                return x
            case E.Call(function=f, args=args) if f in LIFTED_FUNCTIONS:
                return E.Call(f, tuple(lift(a) for a in args))
            case E.Case(whens=whens, otherwise=o):
                return E.Case(tuple((lift(c), lift(r)) for c, r in whens), None if o is None else lift(o))
        raise Untranslatable(f"{'condition' if condition else 'aggregate argument'} {t} has no AGCA form here")

    return Lift(lift(t), condition)


def _operand(t: E.Term) -> Var | Value | Const:
    match t:
        case E.Field(base=E.Var(name=x), name=c):
            return Var(field_variable(x, c))
        case E.Const(value=v) if v is not None:
            return Const(v) if isinstance(v, int) and not isinstance(v, bool) else Value(v)
    raise Untranslatable(f"{t} has no AGCA form in a comparison")


def _variable(t: E.Term) -> str:
    operand = _operand(t)
    if not isinstance(operand, Var):
        raise Untranslatable(f"group-by key {t} is not a field")
    return operand.name


def _value(t: E.Term | None) -> Term:
    """An aggregate's argument ``t`` as an AGCA value: arithmetic over the fields of more than
    one scanned tuple as sums and products of their variables (polynomial expansion, §5.1:
    each factor goes to the map of its relation), arithmetic over one tuple's fields as one
    lifted value (as DBToaster keeps ``L_EXTENDEDPRICE * (1 + -1 * L_DISCOUNT)`` a single
    factor: expanding it would give a map per monomial, all over the same relation)."""
    if isinstance(t, E.Call) and t.function in _ARITHMETIC and len(t.variables()) == 1:
        return _lifted(t, condition=False)
    match t:
        case E.Field(base=E.Var()):
            return _operand(t)  # type: ignore[return-value]
        case E.Const(value=v) if isinstance(v, (int, float)) and not isinstance(v, bool):
            return Const(v)
        case E.Call(function="add", args=(a, b)):
            return Add((_value(a), _value(b)))
        case E.Call(function="sub", args=(a, b)):
            return Add((_value(a), Mul((Const(-1), _value(b)))))
        case E.Call(function="mul", args=(a, b)):
            return Mul((_value(a), _value(b)))
        case E.Call(function="neg", args=(a,)):
            return Mul((Const(-1), _value(a)))
    if t is None:
        raise Untranslatable("an aggregate without an argument has no value")
    return _lifted(t, condition=False)


#: the arithmetic :func:`_value` spells as AGCA sums and products
_ARITHMETIC = frozenset({"add", "sub", "mul", "neg"})


def _defined(value: Term) -> tuple[Term, ...]:
    """Where an aggregate's argument ``value`` is defined: ``x ≠ ⊥`` for every field ``x`` of
    its arithmetic, and for each lifted part (a CASE, say, defined where its fields are not)
    that the part is not NULL."""
    fields: set[str] = set()
    lifts: list[Lift] = []

    def visit(t: Term) -> None:
        match t:
            case Var(name=x):
                fields.add(x)
            case Lift():
                lifts.append(t)
            case Add(terms=ts) | Mul(terms=ts):
                for x in ts:
                    visit(x)

    visit(value)
    return (*(Cmp("!=", Var(x), NULL) for x in sorted(fields)),
            *(Lift(E.Call("not", (E.Call("is_null", (part.expr,)),)), True) for part in dict.fromkeys(lifts)))


def aggregate_values(core: AggregateCore, output: str, values: GMR) -> dict[tuple, object]:
    """The aggregate ``output`` of each group, read off its value map's contents ``values``
    (a GMR over the group variables and the value variable): MIN/MAX of the values present,
    COUNT/SUM/AVG of the distinct ones; keyed by the group variables' values in key order."""
    (_, function, distinct, x), = [b for b in core.by_value if b[0] == output]
    group = [v for _, v in core.keys]
    present: dict[tuple, list] = {}
    for t, m in values.items():
        if abs(m) > EPSILON:
            d = dict(t)
            present.setdefault(tuple(d[g] for g in group), []).append(d[x])
    reduce = {"min": min, "max": max, "count": len, "sum": sum,
              "avg": lambda vs: sum(vs) / len(vs)}[function]
    return {g: reduce(vs) for g, vs in present.items()}
