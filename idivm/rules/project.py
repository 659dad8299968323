"""Generalized π with functions (thesis Table C.4): IDs are renamed through the projection;
an update recomputes the outputs whose functions read the updated attributes, from the
i-diff itself when it carries every attribute they read, else it becomes delete+insert."""

from __future__ import annotations

from idivm.algebra import operators as O
from idivm.algebra.expressions import Var
from idivm.algebra.rewrite import substitute
from idivm.rules.common import (
    Rule, do_regroup, do_to_replace, when_always, when_computable, when_renames_only,
)
from idivm.rules.context import Context, mentions
from idivm.script import Statement


def do_pass(g: Context, op: O.Project, side, diff, rule) -> list[Statement]:
    """Table C.4 rows 1-2: a replace passes with its IDs renamed to π's outputs,
    Δ(π_f R) = π_f(ΔR) named by f(I).  A projection below DISTINCT that drops an ID names
    its rows by value instead (:func:`idivm.rules.common.do_regroup`)."""
    ids = g.through_project(op, diff.ids)
    if ids is None:  # a projection below DISTINCT drops the IDs: name rows by value
        return do_regroup(g, op, side, diff, rule)
    return g.next(op, diff, rule, ids=ids)


def do_project_update(g: Context, op: O.Project, side, diff, rule) -> list[Statement]:
    """Table C.4 row 3 (update), Table C.8 (increment passed through): the outputs whose
    functions read the changed attributes get their new values from the i-diff,
    Δu(π_f R) = π_{I, f(post), f(pre)}(Δu R), and an increment of a renamed aggregate stays
    the increment, Δ(π_{a'=a} R) = Δa renamed; IDs the projection drops make it a replace."""
    ids = g.through_project(op, diff.ids)
    if ids is None:
        return do_to_replace(g, op, side, diff, rule)
    avail = set(diff.plan.output_variables())
    outputs = [(i.name, t) for i, t in zip(ids, diff.ids)]
    changed = []
    pre = dict(diff.changed)
    for v, t in op.outputs:
        if not mentions(t, diff.changed):
            continue
        if diff.kind == "increment":
            dv = g.fresh("d")
            outputs.append((dv, pre[t]))
            changed.append((Var(v), Var(dv)))
        elif t.variables() <= avail:
            pv = g.fresh("pre")
            outputs.append((v, t))
            outputs.append((pv, substitute(t, pre)))
            changed.append((Var(v), Var(pv)))
    plan = O.Project(diff.plan, tuple(dict(outputs).items()))
    return g.next(op, diff, rule, ids=ids, plan=plan, changed=tuple(changed))


RULES = (
    Rule("Project", "input", "replace", when_always, do_pass, "replace", source="Table C.4 rows 1-2"),
    Rule("Project", "input", "update", when_computable, do_project_update, "update",
         source="Table C.4 row 3"),
    Rule("Project", "input", "update", when_always, do_to_replace, "replace", reads=("Input_post",),
         source="Table C.4 row 3, functions reading other attributes"),
    Rule("Project", "input", "increment", when_renames_only, do_project_update, "increment",
         source="Table C.8 (aggregate passed through)"),
    Rule("Project", "input", "increment", when_always, do_to_replace, "replace", reads=("Input_post",),
         source="a function of an aggregate"),
)
