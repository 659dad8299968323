"""Operator caches of AVG (thesis §2.3–2.4, Appendix C: AVG keeps ``Cache_sum`` and
``Cache_count`` per group and is maintained through them).

AVG is not incrementally maintainable by itself: a new value of ``x`` changes the mean
of its group by an amount that depends on the group's SUM and COUNT.  idIVM keeps those
two per group in an *operator cache* and derives the mean from them:

    γ_{k; a := AVG(x), t := SUM(y), n := COUNT(*)}(E)
      =  π_{k; a := CASE WHEN c = 0 THEN NULL ELSE s / c END, t, n}(C)
    C = γ_{k; s := SUM(COALESCE(x, 0)), c := COUNT(x), t := SUM(y), n := COUNT(*)}(E)

``C`` is stored as a cache table keyed by the group keys, maintained like a view by its
own Δ-script (an update of ``x`` is an increment of ``s`` and ``c``, Tables C.8 and C.10,
which reads no state: ``COALESCE`` keeps ``s`` a plain sum also where ``x`` is NULL, and
``c`` counts the values AVG averages); the view reads it like a base table, so an
increment of ``C`` reaches the view as an update i-diff of ``s``/``c`` that the
projection passes on as an update of ``a``, computed from the Δu row alone (Table C.4).
The identity holds exactly as SQL defines AVG: NULLs are ignored (neither summed nor
counted), a group without values (``c = 0``) averages to NULL, and ``s / c`` of integers
is a double (``div``).

:func:`split_at_averages` chooses the γs and rewrites the plan:

input
    a view (or cache) plan as built (not retouched) and the types of the tables it reads.
output
    one :class:`OperatorCachePlan` per eligible γ (its plan ``ReturnBag(C)``, row type and
    key columns), and the plan with each such γ replaced by the projection over a scan of
    its cache.

A γ is eligible when it has grouping keys (a global aggregate's view has no IDs and is
recomputed), no group variable, at least one AVG, only non-DISTINCT SUM, COUNT and AVG
aggregates (a MIN, MAX or DISTINCT aggregate recomputes its groups on any change of its
argument anyway), and each AVG argument is known to be an int or a double (a decimal
mean's scale is Spark's ``decimal(p+4, s+4)``, which the projection does not reproduce).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.rewrite import fresh_name, replace_nodes
from idivm.algebra.expressions import (
    SCALAR_FUNCTIONS, Call, Case, Const, Field, TableRef, Term, TupleExpr, Var,
)


@dataclass(frozen=True)
class OperatorCachePlan:
    """The operator cache of one γ: table ``name`` holding the rows of ``plan`` (one per
    group: the keys ``key``, the SUM/COUNT columns), of type ``type``."""

    name: str
    plan: O.ReturnBag
    type: T.TupleType
    key: tuple[str, ...]


@dataclass(frozen=True)
class AverageSplit:
    caches: tuple[OperatorCachePlan, ...]
    upper: O.ReturnBag  # the plan reading the operator caches


def split_at_averages(plan: O.ReturnBag, table_types: Mapping[str, T.TupleType],
                      names) -> AverageSplit | None:
    """The operator caches of the eligible γs of ``plan`` and the plan reading them; None
    when no γ is eligible.  ``names()`` gives the table name of the next cache."""

    taken = {v for op in O.walk(plan) for v in op.output_variables()}
    caches: list[OperatorCachePlan] = []
    replaced: dict[int, O.Operator] = {}
    for op in O.walk(plan, into_nested=False):
        if id(op) in replaced or not isinstance(op, O.GroupBy):
            continue
        types = scan_types(op.input, table_types)
        if not _eligible(op, types):
            continue
        aggs: list[tuple[str, O.Aggregate]] = []
        agg_types: list[T.Type] = []
        outputs: list[tuple[str, Term]] = []
        var = fresh_name("avg", taken)
        taken.add(var)
        row = Var(var)
        columns = {k for k, _ in op.keys} | {v for v, _ in op.aggregates}
        for v, a in op.aggregates:
            if a.function != "avg":
                aggs.append((v, a))
                agg_types.append(T.INT if a.function == "count" else static_type(a.arg, types))
                outputs.append((v, Field(row, v)))
                continue
            ty = static_type(a.arg, types)
            s, c = fresh_name(f"{v}_sum", columns), fresh_name(f"{v}_count", columns | {f"{v}_sum"})
            columns |= {s, c}
            zero = Const(0, T.INT) if ty == T.INT else Const(0.0, T.DOUBLE)
            aggs += [(s, O.Aggregate("sum", Call("coalesce", (a.arg, zero)))), (c, O.Aggregate("count", a.arg))]
            agg_types += [ty, T.INT]
            mean = Case(((Call("eq", (Field(row, c), Const(0, T.INT))), Const(None, T.DOUBLE)),),
                        Call("div", (Field(row, s), Field(row, c))))
            outputs.append((v, mean))
        name = names()
        grouped = O.GroupBy(op.input, op.keys, tuple(aggs), span=op.span)
        key = tuple(k for k, _ in op.keys)
        fields = tuple((k, Var(k)) for k in key) + tuple((v, Var(v)) for v, _ in aggs)
        row_type = T.TupleType(tuple((k, static_type(t, types)) for k, t in op.keys)
                               + tuple((v, ty) for (v, _), ty in zip(aggs, agg_types)))
        caches.append(OperatorCachePlan(name, O.ReturnBag(grouped, TupleExpr(fields), span=op.span), row_type, key))
        scan = O.ScanCollection(O.Ground(), TableRef(name), var, span=op.span)
        replaced[id(op)] = O.Project(scan, tuple((k, Field(row, k)) for k in key) + tuple(outputs), span=op.span)
    if not caches:
        return None
    return AverageSplit(tuple(caches), replace_nodes(plan, replaced))  # type: ignore[arg-type]


def _eligible(op: O.GroupBy, types: Mapping[str, T.TupleType]) -> bool:
    if not op.keys or op.group_var:
        return False
    if not any(a.function == "avg" for _, a in op.aggregates):
        return False
    if any(a.distinct or a.function not in ("sum", "count", "avg") for _, a in op.aggregates):
        return False
    return all(static_type(a.arg, types) in (T.INT, T.DOUBLE) for _, a in op.aggregates if a.function == "avg")


def scan_types(plan: O.Operator, table_types: Mapping[str, T.TupleType]) -> dict[str, T.TupleType]:
    """Scan variable -> the row type of the table it scans."""
    return {s.var: table_types[s.source.name] for s in O.walk(plan)
            if isinstance(s, O.ScanCollection) and isinstance(s.source, TableRef) and s.source.name in table_types}


def static_type(t: Term | None, types: Mapping[str, T.TupleType]) -> T.Type:
    """The static type of ``t`` over scan variables of the given row types (ANY if unknown)."""
    match t:
        case Field(base=Var(name=n), name=f) if n in types:
            return types[n].field(f) or T.ANY
        case Const(type=ty):
            return ty
        case Call(function=f, args=args):
            return SCALAR_FUNCTIONS[f].result([static_type(a, types) for a in args])
        case Case(whens=whens, otherwise=o):
            ty: T.Type = T.NULL
            for r in [r for _, r in whens] + ([o] if o is not None else []):
                ty = T.common_type(ty, static_type(r, types))
            return ty
    return T.ANY
