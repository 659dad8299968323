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
from idivm.agca.terms import EPSILON, ONE, Add, Assign, Cmp, Const, Mul, Rel, Sum, Term, Value, Var, inputs
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


def _body(op: O.Operator, columns: Mapping[str, Sequence[str]], joins: list | None = None) -> Term:
    """``op``'s tuples as a product of atoms and conditions; ``joins``: the semi- and antijoins
    met so far (each one's match count is a variable of its own)."""
    joins = [] if joins is None else joins
    match op:
        case O.ScanCollection(input=O.Ground(), source=E.TableRef(name=str() as table), var=x,
                              position=None, occurrence=None):
            if table not in columns:
                raise Untranslatable(f"no columns known for table {table}")
            return Rel(table, tuple(f"{x}.{c}" for c in columns[table]))
        case O.InnerJoin(left=left, right=right, condition=c):
            return Mul((_body(left, columns, joins), _body(right, columns, joins), _condition(c)))
        case O.Select(input=inner, condition=c):
            return Mul((_body(inner, columns, joins), _condition(c)))
        case O.SemiJoin(left=left, right=right, condition=c) | O.AntiJoin(left=left, right=right, condition=c):
            clash = set(left.output_variables()) & set(right.output_variables())
            if clash:
                raise Untranslatable(f"the subquery names {', '.join(sorted(clash))} as the query does")
            # EXISTS / IN: how many right tuples match the left one, a nested aggregate
            # correlated on the left's variables (§3.2's :=); some (⋉) or none (▷)
            matches = Var(f"{op.name}#{len(joins)}")
            joins.append(op)
            nested = Sum((), Mul((_body(right, columns, joins), _condition(c))))
            return Mul((_body(left, columns, joins), Assign(matches.name, nested),
                        Cmp("!=" if isinstance(op, O.SemiJoin) else "=", matches, Const(0))))
    raise Untranslatable(f"{op.name} has no AGCA form here")


def _condition(t: E.Term) -> Term:
    if t == E.TRUE:
        return ONE
    match t:
        case E.Call(function="and", args=parts):
            return Mul(tuple(_condition(p) for p in parts))
        case E.Call(function=f, args=(left, right)) if f in _COMPARISONS:
            return Cmp(_COMPARISONS[f], _operand(left), _operand(right))
    raise Untranslatable(f"condition {t} has no AGCA form here")


def _operand(t: E.Term) -> Var | Value | Const:
    match t:
        case E.Field(base=E.Var(name=x), name=c):
            return Var(f"{x}.{c}")
        case E.Const(value=v) if v is not None:
            return Const(v) if isinstance(v, int) and not isinstance(v, bool) else Value(v)
    raise Untranslatable(f"{t} has no AGCA form in a comparison")


def _variable(t: E.Term) -> str:
    operand = _operand(t)
    if not isinstance(operand, Var):
        raise Untranslatable(f"group-by key {t} is not a field")
    return operand.name


def _value(t: E.Term | None) -> Term:
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
    raise Untranslatable(f"aggregate argument {t} has no AGCA form here")


def _defined(value: Term) -> tuple[Cmp, ...]:
    """``x ≠ ⊥`` for every field ``x`` of an aggregate's argument ``value``."""
    return tuple(Cmp("!=", Var(x), NULL) for x in sorted(inputs(value)))


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
