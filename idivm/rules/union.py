"""Union all ⊎ with the branch attribute (thesis Table C.2, App. B.4.10): every i-diff of a
branch gets the branch's constant as one more ID."""

from __future__ import annotations

from dataclasses import replace

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import Const, Var
from idivm.errors import InternalError
from idivm.provenance.ids import BRANCH
from idivm.rules.common import Rule, when_always
from idivm.rules.context import Context
from idivm.script import Statement


def do_union_branch(g: Context, op: O.UnionAll, side, diff, rule) -> list[Statement]:
    """Table C.2: Δ(R ⊎ S) from ΔR is ΔR with the branch attribute b = 0 (b = 1 for ΔS) as one
    more ID, so the two branches' tuples stay apart; a replace's post state takes that branch
    of the union only."""
    branch_var, value = _branch_of(diff.op)
    ids = diff.ids + (Var(branch_var),)
    if diff.kind == "replace":
        kb = g.fresh("k")
        base = diff.keys if diff.keys is not None else O.Ground()  # None: every tuple of the branch
        keys = O.Project(base, tuple((v, Var(v)) for v in diff.key_vars) + ((kb, Const(value, T.INT)),))
        r = diff.restriction
        if r is not None:
            r = replace(r, branches=r.branches + ((op, side),))
        return g.next(op, diff, rule, ids=ids, keys=keys, key_vars=diff.key_vars + (kb,), restriction=r)
    plan = O.Project(diff.plan, tuple((v, Var(v)) for v in diff.plan.output_variables())
                     + ((branch_var, Const(value, T.INT)),))
    return g.next(op, diff, rule, ids=ids, plan=plan)


def _branch_of(branch: O.Operator) -> tuple[str, int]:
    if isinstance(branch, O.Project):
        for v, t in branch.outputs:
            if v.startswith(BRANCH) and isinstance(t, Const):
                return v, t.value
    raise InternalError("a union branch without its branch attribute")


RULES = tuple(
    Rule("UnionAll", side, kind, when_always, do_union_branch, kind, source="Table C.2")
    for side in ("left", "right") for kind in ("replace", "update", "increment")
)
