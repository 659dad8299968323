"""Key-restricted reads of base-table states: semi-join reduction by literal key sets.

An i-diff query joins a few changed tuples with the states of base tables (thesis §2.4,
§2.13): ``Δpost(reviews) ⋈ users@post``, or the nested plan of a business that enters the
view, which reads ``reviews@post`` correlated on ``business_id``.  Spark evaluates such a
join by reading the state whole.  Here an equality conjunct ``s.a = o.b`` of a σ or join
condition restricts the scan ``s`` of a state to the values ``o.b`` takes, when the plan
binding ``o`` reads only i-diffs (or states restricted already): those values are computed
first — as few as the i-diff names — and the scan reads ``a IN (values)``, which Spark pushes
down to the Parquet reader, so row groups and pages whose statistics exclude every value are
not read.  Restrictions chain: once ``reviews@post`` is restricted to the reviews of the
entering businesses, ``users@post`` is restricted to their authors.

A restriction is sound when every row of ``s`` that the conjunct rejects contributes nothing
to the plan's result: the path from the conjunct's operator down to ``s`` goes only through
operators that pass a row's variables up unchanged or drop the row (σ, inner joins, the
preserved side of a left join, semi/anti joins' left side, unnests, LET, π keeping ``s``,
δ, the input of nested-plan operators); and for the right side of a left, semi or anti join
whose own condition holds the conjunct.  The NULL-padded side of a left join below the
conjunct may be restricted too: a row the restriction drops leaves its left tuple padded,
and the padded row, ``s`` NULL, is rejected by the conjunct like the pairs it replaces --
unless the conjunct is ``<=>`` and a value is NULL, which the compiler checks when the values
are known (:attr:`Candidate.padded`).  The values are taken over the whole operator that
binds ``o`` (a superset of the values that meet ``s``): the other input of a join on the
path, or, for a variable of the environment of a nested plan, the input of the operator
that owns the plan.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from idivm.algebra import operators as O
from idivm.algebra.expressions import Call, Field, TableRef, Term, Var


@dataclass(frozen=True)
class Candidate:
    """``scan`` (of a table) may read only the rows whose ``column`` is among the values of
    ``value`` over the binding tuples of ``source`` (``null_safe``: the conjunct is ``<=>``, so
    a NULL value matches a NULL column)."""

    scan: O.ScanCollection
    column: str
    source: O.Operator
    value: Term
    null_safe: bool
    #: the scan is below the NULL-padded side of a left join the conjunct is above: the rows
    #: the restriction drops may turn into padded rows, which the conjunct rejects, unless it
    #: is ``<=>`` and a value is NULL (then the read is not restricted)
    padded: bool = False


def candidates(plan: O.Operator) -> list[Candidate]:
    """Every restriction the plan's equality conjuncts allow (see module doc), in plan order."""
    out: list[Candidate] = []
    seen: set[int] = set()

    def visit(op: O.Operator, owners: tuple[tuple[O.Operator, O.Operator], ...]) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for conjunct in _conjuncts(getattr(op, "condition", None)):
            equality = _equality(conjunct)
            if equality is None:
                continue
            left, right, null_safe = equality
            for x, y in ((left, right), (right, left)):
                if not (isinstance(x, Field) and isinstance(x.base, Var)):
                    continue
                for region, sibling in _regions(op):
                    c = _candidate(region, sibling, x, y, null_safe, owners)
                    if c is not None:
                        out.append(c)
        for i in op.inputs():
            visit(i, owners)
        for n in op.nested():
            visit(n, ((op, n),) + owners)

    visit(plan, ())
    return out


def scanned_once(plan: O.Operator) -> set[int]:
    """The ids of the table scans that occur once in the plan (a shared scan object may be
    restricted in one context and not in another: it is never restricted)."""
    counts: Counter[int] = Counter()
    stack = [plan]
    while stack:
        op = stack.pop()
        if isinstance(op, O.ScanCollection) and isinstance(op.source, TableRef):
            counts[id(op)] += 1
        stack.extend(op.inputs())
        stack.extend(op.nested())
    return {k for k, n in counts.items() if n == 1}


def table_scans(plan: O.Operator, skip: frozenset[int] = frozenset()) -> list[O.ScanCollection]:
    """The scans of tables in the plan, nested plans included, in pre-order; none below an
    operator whose id is in ``skip``."""
    out: list[O.ScanCollection] = []
    seen: set[int] = set()
    stack = [plan]
    while stack:
        op = stack.pop()
        if id(op) in seen or id(op) in skip:
            continue
        seen.add(id(op))
        if isinstance(op, O.ScanCollection) and isinstance(op.source, TableRef):
            out.append(op)
        stack.extend(reversed(op.nested()))
        stack.extend(reversed(op.inputs()))
    return out


def _conjuncts(t: Term | None) -> list[Term]:
    if t is None:
        return []
    if isinstance(t, Call) and t.function == "and":
        return [c for a in t.args for c in _conjuncts(a)]
    return [t]


def _equality(t: Term) -> tuple[Term, Term, bool] | None:
    if isinstance(t, Call) and t.function in ("eq", "same") and len(t.args) == 2:
        return t.args[0], t.args[1], t.function == "same"
    return None


def _regions(op: O.Operator) -> list[tuple[O.Operator, O.Operator | None]]:
    """(input a conjunct of ``op``'s condition filters, the other input) pairs."""
    match op:
        case O.Select():
            return [(op.input, None)]
        case O.InnerJoin() | O.SemiJoin():
            return [(op.left, op.right), (op.right, op.left)]
        case O.LeftJoin() | O.AntiJoin():
            return [(op.right, op.left)]
    return []


def _candidate(region: O.Operator, sibling: O.Operator | None, x: Field, y: Term, null_safe: bool,
               owners: tuple[tuple[O.Operator, O.Operator], ...]) -> Candidate | None:
    var = x.base.name  # type: ignore[attr-defined]
    found = _find_scan(region, var, ())
    if found is None:
        return None
    scan, branches, padded = found
    needed = y.variables()
    if not needed:
        return None
    for branch in (sibling, *branches):
        if branch is not None and needed <= set(branch.output_variables()):
            return Candidate(scan, x.name, _narrowed(branch, needed), y, null_safe, padded)
    if needed & set(region.output_variables()):
        return None  # bound beside the scan, not by a branch of the path: no source
    if owners:
        owner, nested = owners[0]
        source = owner.inputs()[0]
        if needed <= O.free_variables(nested) and needed <= set(source.output_variables()):
            return Candidate(scan, x.name, _narrowed(source, needed), y, null_safe, padded)
    return None


def _narrowed(source: O.Operator, needed: set[str]) -> O.Operator:
    """The input of the joins at the top of ``source`` that binds the ``needed`` variables: the
    values there are a superset of the values over the join, and cost no join to compute."""
    while isinstance(source, O._Join) and not isinstance(source, (O.SemiJoin, O.AntiJoin)):
        side = next((s for s in source.inputs() if needed <= set(s.output_variables())), None)
        if side is None:
            break
        source = side
    return source


def _find_scan(op: O.Operator, var: str, branches: tuple[O.Operator, ...], padded: bool = False
               ) -> tuple[O.ScanCollection, tuple[O.Operator, ...], bool] | None:
    """The scan of a table binding ``var`` below ``op`` on a path of operators that pass its
    rows up unchanged or drop them, with the other inputs of the joins on the path, and
    whether the path enters the NULL-padded side of a left join.  A row of that side the
    restriction drops leaves its left tuple unmatched, padded with NULLs instead: the conjunct
    above rejects such a row (``var`` is NULL in it), as it rejects the pairs it replaces,
    unless the conjunct is ``<=>`` and a value is NULL (:attr:`Candidate.padded`).  (A left
    join's own condition restricts its right side without padding: :func:`_regions`.)"""
    match op:
        case O.ScanCollection(source=TableRef()) if op.var == var:
            return op, branches, padded
        case O.Project():
            return _find_scan(op.input, var, branches, padded) if (var, Var(var)) in op.outputs else None
        case O.InnerJoin():
            for side, other in ((op.left, op.right), (op.right, op.left)):
                if var in side.output_variables():
                    return _find_scan(side, var, branches + (other,), padded)
            return None
        case O.LeftJoin():
            if var in op.left.output_variables():
                return _find_scan(op.left, var, branches + (op.right,), padded)
            if var in op.right.output_variables():
                return _find_scan(op.right, var, branches + (op.left,), True)
            return None
        case O.SemiJoin() | O.AntiJoin():
            return _find_scan(op.left, var, branches, padded)
        case O.InnerCorrelate() | O.LeftCorrelate():
            if var in op.plan.output_variables():
                return None
            return _find_scan(op.input, var, branches, padded)
        case (O.ScanCollection() | O.Select() | O.NavTuple() | O.Assign() | O.FunctionCall() | O.ConstructTuple()
              | O.ConstructBag() | O.ConstructArray() | O.ApplyPlan() | O.Distinct()):
            binds = {getattr(op, a, None) for a in ("var", "position", "occurrence")}
            if var in binds:
                return None
            return _find_scan(op.input, var, branches, padded)
    return None


__all__ = ["Candidate", "candidates", "scanned_once", "table_scans"]
