"""i-diff propagation rules (thesis Appendix C, Tables C.1–C.11; Appendix E; §2.3).

A :class:`Rule` says, for one operator, one input side and one kind of
incoming i-diff, which outgoing i-diff the operator emits, under which guard,
which states it reads (``Input_pre``, ``Input_post``, ``Output``) and whether
it is blocking.  The guard (``when``) and the transformation (``action``) are
functions of the rule's module, or of :mod:`idivm.rules.common` when several operators
share them (see :mod:`idivm.rules.context` for their arguments); the generator
(:mod:`idivm.generator`) instantiates rules and holds nothing operator-specific.

The i-diff kinds (thesis §2.2, Table 2.2):

``replace``
    the output tuples named by a set of (possibly partial) IDs: a delete
    i-diff of those IDs paired with the insert i-diff of whatever the post
    state has under them.  Inserts, deletes and conditional updates of a base
    table are replace i-diffs; the delete half never reads a state (it names
    the view rows by ID), the insert half is computed from ``Input_post``.
``update``
    new values of some attributes of the tuples named by (partial) IDs, with
    their pre values: non-conditional updates (``diff: {a: {type: update,
    pre, post}}``).  They pass through every operator that does not look at
    the attributes, which is why an update of ``parts.price`` reaches the view
    of Fig. 2.1b without reading a base table.
``increment``
    additive changes of SUM/COUNT aggregates of the groups named by their
    grouping IDs (Tables C.8–C.10).

Each module lists the rules of one operator; :data:`RULES` collects them and
the import-time check below makes sure every supported operator has a rule
for every input side and i-diff kind, and that every guard and transformation is a
function taking the arguments the generator passes.  The analyses the nested rules
share (which stored elements a change reaches) are in :mod:`idivm.rules.navigation`.
"""

from __future__ import annotations

import inspect

from idivm.rules import (
    distinct, group_by, join, left_join, nested, project, ret, scan, select, semijoin, union,
)
from idivm.rules.common import ACTION_PARAMETERS, GUARD_PARAMETERS, KINDS, STATES, Rule, when_always

__all__ = ["KINDS", "RULES", "SIDES", "STATES", "Rule", "rules_for"]


def _collect() -> dict[tuple[str, str, str], tuple[Rule, ...]]:
    table: dict[tuple[str, str, str], list[Rule]] = {}
    for module in (nested, scan, select, project, join, left_join, semijoin, union, group_by, distinct, ret):
        for rule in module.RULES:
            table.setdefault((rule.operator, rule.side, rule.diff), []).append(rule)
    return {k: tuple(v) for k, v in table.items()}


#: (operator, side, incoming kind) -> rules, tried in order (the first whose guard holds applies)
RULES = _collect()

#: operator -> its input sides; the operators ID-based maintenance supports
SIDES = {
    "ScanCollection": ("input",), "Select": ("input",), "Assign": ("input",), "Project": ("input",),
    "InnerJoin": ("left", "right"), "LeftJoin": ("left", "right"), "SemiJoin": ("left", "right"),
    "AntiJoin": ("left", "right"), "UnionAll": ("left", "right"), "GroupBy": ("input",),
    "Distinct": ("input",), "ReturnBag": ("input",),
    "NavTuple": ("input",), "FunctionCall": ("input",), "ConstructTuple": ("input",),
    "ConstructBag": ("input",), "ConstructArray": ("input",),
    "ApplyPlan": ("input", "nested"), "InnerCorrelate": ("input", "nested"),
    "LeftCorrelate": ("input", "nested"),
}


def rules_for(operator: str, side: str, diff: str) -> tuple[Rule, ...]:
    return RULES.get((operator, side, diff), ())


def _check_complete(table: dict[tuple[str, str, str], tuple[Rule, ...]] = RULES) -> None:
    """Every (operator, side, kind) of ``table`` has a rule that always applies (the scans of
    base tables excepted: base i-diffs start there), every rule is of a side its operator
    has, and every guard and transformation is a function of the arguments the generator
    passes."""
    missing = [f"{op}[{side}] {kind}" for op, sides in SIDES.items() for side in sides for kind in KINDS
               if op != "ScanCollection" and not any(r.when is when_always for r in table.get((op, side, kind), ()))]
    if missing:
        raise ImportError("i-diff kinds without an unconditional rule: " + ", ".join(missing))
    for rules in table.values():
        for r in rules:
            if r.side not in SIDES.get(r.operator, ()):
                raise ImportError(f"rule of an unknown operator or side: {r.operator}[{r.side}]")
            for what, f, prefix, params in (("guard", r.when, "when_", GUARD_PARAMETERS),
                                            ("transformation", r.action, "do_", ACTION_PARAMETERS)):
                if not inspect.isfunction(f) or not f.__name__.startswith(prefix) \
                        or tuple(inspect.signature(f).parameters) != params:
                    raise ImportError(f"the {what} of {r.operator}[{r.side}] {r.diff} is not a function "
                                      f"{prefix}<name>({', '.join(params)}): {f!r}")


_check_complete()
