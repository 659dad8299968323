"""Readable, indented plan printing for ``explain`` and golden files.

One line per operator: its name and its parameters in SQL++-like syntax;
inputs are indented below it, nested plans under a ``plan:`` line.  Ground
leaves are omitted, as in the thesis' figures.  ``annotate`` adds a suffix to
an operator's line (later stages print IDs/provenance with it).
"""

from __future__ import annotations

from typing import Callable

from idivm.algebra import operators as O
from idivm.algebra.expressions import TRUE, format_term as ft


def describe(op: O.Operator) -> str:
    """The operator's name and parameters on one line."""
    match op:
        case O.Ground():
            return "Ground"
        case O.ScanCollection(source=src, var=v, position=p, occurrence=n):
            at = f" AT {p}" if p else ""
            occ = f" OCCURRENCE {n}" if n else ""
            return f"ScanCollection {ft(src)} AS {v}{at}{occ}"
        case O.NavTuple(base=b, field_name=f, var=v):
            return f"NavTuple {v} := {ft(b)}.{f}"
        case O.Select(condition=c):
            return f"Select {ft(c)}"
        case O.Project(outputs=outs):
            return "Project " + ", ".join(_assign(n, t) for n, t in outs)
        case O.Assign(term=t, var=v):
            return f"Assign {_assign(v, t)}"
        case O.FunctionCall(function=f, args=args, var=v):
            return f"FunctionCall {v} := {f.upper()}({', '.join(ft(a) for a in args)})"
        case O.ConstructTuple(fields=fs, var=v):
            return f"ConstructTuple {v} := {{" + ", ".join(f'"{n}": {ft(t)}' for n, t in fs) + "}"
        case O.ConstructBag(items=items, var=v):
            return f"ConstructBag {v} := {{{{" + ", ".join(ft(i) for i in items) + "}}"
        case O.ConstructArray(items=items, var=v):
            return f"ConstructArray {v} := [" + ", ".join(ft(i) for i in items) + "]"
        case O.ApplyPlan(var=v):
            return f"ApplyPlan {v} :="
        case O.InnerCorrelate():
            return "InnerCorrelate"
        case O.LeftCorrelate():
            return "LeftCorrelate"
        case O.InnerJoin(condition=c) | O.LeftJoin(condition=c) | O.SemiJoin(condition=c) | O.AntiJoin(condition=c):
            return op.name + ("" if c == TRUE else f" {ft(c)}")
        case O.UnionAll():
            return "UnionAll"
        case O.GroupBy(keys=keys, aggregates=aggs, group_var=g, group_fields=gf):
            parts = [", ".join(_assign(k, t) for k, t in keys) or "()"]
            if aggs:
                parts.append("aggregates " + ", ".join(f"{a} := {agg}" for a, agg in aggs))
            if g:
                parts.append(f"GROUP AS {g}({', '.join(_assign(n, v) for n, v in gf)})")
            return "GroupBy " + "; ".join(parts)
        case O.OrderBy(keys=keys, var=v):
            by = ", ".join(ft(t) + (" DESC" if d else "") for t, d in keys)
            return f"OrderBy {v} := POSITION BY {by or 'value'}"
        case O.Distinct():
            return "Distinct"
        case O.ReturnBag(element=e, order=o):
            return f"ReturnBag {ft(e)}" + ("" if o is None else f" ORDER BY {ft(o)}")
    raise TypeError(f"no printer for {type(op).__name__}")


def _assign(name: str, term) -> str:
    s = term if isinstance(term, str) else ft(term)
    return name if s == name else f"{name} := {s}"


def format_plan(plan: O.Operator, annotate: Callable[[O.Operator], str] | None = None,
                indent: str = "  ") -> str:
    lines: list[str] = []

    def go(op: O.Operator, depth: int) -> None:
        if isinstance(op, O.Ground):
            return
        note = annotate(op) if annotate else ""
        lines.append(f"{indent * depth}{describe(op)}{('  ' + note) if note else ''}")
        for n in op.nested():
            lines.append(f"{indent * (depth + 1)}plan:")
            go(n, depth + 2)
        for i in op.inputs():
            go(i, depth + 1)

    go(plan, 0)
    return "\n".join(lines)
