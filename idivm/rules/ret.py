"""The view itself (ReturnBag): i-diffs become changes of the stored view, named by its
hidden ID columns (thesis §2.4 pass 3: resolve to full view keys, apply to the view)."""

from __future__ import annotations

from dataclasses import replace

from idivm.algebra import operators as O
from idivm.algebra.expressions import TupleExpr, Var
from idivm.provenance.ids import HIDDEN
from idivm.rules.common import Rule, do_to_replace, when_always, when_computable, when_renames_only
from idivm.rules.context import Context, at_state, mentions, restricted
from idivm.script import POST, PRE, Statement


def do_to_view(g: Context, op: O.ReturnBag, side, diff, rule) -> list[Statement]:
    """§2.4 pass 3, apply to the view: ΔV is the i-diff at the view's input, its IDs resolved to
    the view's hidden ID columns.  A replace deletes the rows its keys name and inserts
    V_post ⋉_I keys (tuple-based: the rows of V_pre under them instead of their IDs); an
    update sets, and an increment adds, the new values of the columns it changes."""
    trail = diff.trail + (rule.describe(),)
    on = tuple(g.view_column(diff.op, t) for t in diff.ids)
    if diff.kind == "replace":
        rows = restricted(g.plan, diff.restriction)
        pre_rows, rows = at_state(rows, PRE), at_state(rows, POST)
        keys = None
        if diff.keys is not None:
            cols = dict(zip(on, diff.key_vars))
            on = tuple(cols)
            keys = O.ReturnBag(diff.keys, TupleExpr(tuple((c, Var(v)) for c, v in cols.items())))
        if g.strategy == "tuple":
            return [Statement("replace", diff.starts, on=on, rows=rows, pre_rows=pre_rows, rules=trail)]
        out = Statement("replace", diff.starts, on=on, keys=keys, rows=rows, rules=trail)
        if keys is not None and diff.restriction is not None:
            g.restricted_replaces[id(out)] = replace(diff, trail=trail)
        return [out]
    changed = dict(diff.changed)
    fields = list(dict(zip(on, diff.ids)).items())
    on = tuple(dict.fromkeys(on))
    sets = []
    for name, t in g.element_fields():
        if not mentions(t, diff.changed):
            continue
        if diff.kind == "increment":
            fields.append((f"{HIDDEN}delta_{name}", changed[t]))
        else:
            fields.append((f"{HIDDEN}new_{name}", t))
        sets.append((name, fields[-1][0]))
    if not sets:
        return []
    query = O.ReturnBag(diff.plan, TupleExpr(tuple(fields)))
    return [Statement(diff.kind, diff.starts, on=on, query=query, set=tuple(sets), rules=trail)]


RULES = (
    Rule("ReturnBag", "input", "replace", when_always, do_to_view, "replace", reads=("Output",),
         source="§2.4: apply to the view"),
    Rule("ReturnBag", "input", "update", when_computable, do_to_view, "update", reads=("Output",),
         source="§2.4: apply to the view"),
    Rule("ReturnBag", "input", "update", when_always, do_to_replace, "replace", reads=("Output",),
         source="§2.4: apply to the view"),
    Rule("ReturnBag", "input", "increment", when_renames_only, do_to_view, "increment", reads=("Output",),
         source="§2.4: apply to the view"),
    Rule("ReturnBag", "input", "increment", when_always, do_to_replace, "replace", reads=("Output",),
         source="§2.4: apply to the view"),
)
