"""γ (thesis Tables C.7–C.10): an update of aggregated attributes becomes increments of
SUM and COUNT per group, the groups found through Input_post (C.8, C.10); any other change
recomputes the groups it touches before or after (C.7 "γ general"), which also creates and
deletes groups (beyond the thesis, which leaves them out).  MIN, MAX and DISTINCT
aggregates recompute their groups; an increment whose pre or post value is NULL does too
(SUM of all NULLs is NULL).  AVG is maintained through its operator cache (Appendix C,
Cache_sum and Cache_count): ID-based scripts rewrite γ with AVG into a projection over a
γ of SUM and COUNT (:mod:`idivm.generator.operator_caches`), whose increments these rules
make; where no operator cache applies, AVG recomputes its groups.  An update the members of a
stored GROUP AS bag only carry is a nested update of those members (Table E.11; its rule is
with the other nested updates in :mod:`idivm.rules.nested`, tried before these).

The increments are made once every i-diff of a run has reached γ (the driver composes them,
:meth:`idivm.rules.context.Context.defer`): :func:`update_increment` for one update,
:func:`joint_update_increment` for several whose changes one aggregate reads,
:func:`member_increments` for the member replaces of a group bag (Tables E.12, E.13)."""

from __future__ import annotations

from functools import reduce

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import Call, Case, Const, Term, Var, conjunction
from idivm.algebra.rewrite import substitute
from idivm.rules.common import Rule, do_regroup, do_to_replace, when_always
from idivm.rules.context import (
    Context, Diff, Restriction, at_state, combined, is_null, mentions, never_null, restricted, restriction, same,
)
from idivm.script import POST, PRE, Statement


def when_increments_apply(g: Context, op: O.GroupBy, side, diff) -> bool:
    """Tables C.8, C.10: the update changes the argument of an aggregate, every aggregate whose
    argument it changes is a SUM or a COUNT (not DISTINCT), it changes no grouping key, and γ
    has no GROUP AS bag (which holds whole tuples)."""
    if op.group_var:  # the group holds whole tuples: the groups are recomputed
        return False
    if any(mentions(t, diff.changed) for _, t in op.keys):
        return False
    touched = [a for _, a in op.aggregates if a.arg is not None and mentions(a.arg, diff.changed)]
    return bool(touched) and all(a.function in ("sum", "count") and not a.distinct for a in touched)


def do_aggregate_increment(g: Context, op: O.GroupBy, side, diff, rule) -> list[Statement]:
    """Tables C.8 (SUM), C.10 (COUNT): per group, ΔSUM(a) = Σ(a_post − a_pre) and
    ΔCOUNT(a) = Σ([a_post not NULL] − [a_pre not NULL]) over the tuples the update names,
    made once every i-diff of the run has reached γ (:func:`update_increment`,
    :func:`joint_update_increment`)."""
    g.defer(op, "update", diff, rule)
    return []


# ---------------------------------------------------------------------- the increments

def update_increment(g: Context, op: O.GroupBy, diff: Diff, rule: Rule) -> list[Statement]:
    """Tables C.8 (SUM) and C.10 (COUNT) for one update i-diff: each tuple of γ's input it
    names, read in the post state, adds its post minus its pre value, the pre value the
    post term with the i-diff's pre values put in (no state is read for it); groups where
    a pre or post value of a SUM is NULL are recomputed instead (not checked for a SUM
    whose argument is never NULL)."""
    kv = g.fresh_vars(len(diff.ids))
    pre = dict(diff.changed)
    pv = {t: g.fresh("p") for t in pre}
    delta = O.Project(diff.plan, tuple(zip(kv, diff.ids)) + tuple((pv[t], p) for t, p in pre.items()))
    named = restriction(op.input, diff.ids, delta, kv)
    post_input = at_state(restricted(op.input, named), POST)
    joined = O.InnerJoin(post_input, delta, conjunction([same(i, Var(k)) for i, k in zip(diff.ids, kv)]))
    to_pre = {t: Var(pv[t]) for t in pre}
    aggs, changed = [], []
    nulls = []
    for v, a in op.aggregates:
        if a.arg is None or not mentions(a.arg, diff.changed):
            continue
        post_arg, pre_arg = a.arg, substitute(a.arg, to_pre)
        dv = g.fresh("d")
        if a.function == "sum":
            d = Call("sub", (post_arg, pre_arg))
            if not never_null(a.arg):
                nulls.append(Call("or", (is_null(post_arg), is_null(pre_arg))))
        else:  # count
            d = Call("sub", (counted(post_arg), counted(pre_arg)))
        aggs.append((dv, O.Aggregate("sum", d)))
        changed.append((Var(v), Var(dv)))
    flag = g.fresh("n")
    null_test = Call("or", tuple(nulls)) if len(nulls) > 1 else (nulls[0] if nulls else Const(False, T.BOOL))
    aggs.append((flag, O.Aggregate("sum", indicator(null_test))))
    grouped = O.GroupBy(joined, op.keys, tuple(aggs))
    return _increments_or_recompute(g, op, diff, rule, grouped, changed, flag, recompute=bool(nulls))


def joint_update_increment(g: Context, op: O.GroupBy, updates: list[tuple[Diff, Rule]]) -> list[Statement]:
    """Tables C.8 and C.10 for several update i-diffs whose changes one aggregate reads
    (``SUM(e.salary * m.salary)`` with ``salary`` updated under both variables): the
    tuples of γ's input any of them names, each once, contribute their post minus their
    pre value.  An update changes no group's tuples (a change that does replaces the
    group), so the same tuples are read before and after.  Groups where a SUM's argument
    is NULL before or after are recomputed instead."""
    diffs = [d for d, _ in updates]
    touched = [(v, a) for v, a in op.aggregates
               if a.arg is not None and any(mentions(a.arg, d.changed) for d in diffs)]
    nullable = [a.arg for _, a in touched if a.function == "sum" and not never_null(a.arg)]
    restrictions = []
    for d in diffs:
        kv = g.fresh_vars(len(d.ids))
        keys = O.Project(d.plan, tuple(zip(kv, d.ids)))
        restrictions.append(restriction(op.input, d.ids, keys, kv))
    grouped, changed, flag = _increment_of(
        g, op, lambda state, columns: _named_once(g, op, restrictions, state, columns), touched, nullable)
    return _increments_or_recompute(g, op, combined(diffs), updates[0][1], grouped, changed, flag,
                                    recompute=flag is not None)


def member_increments(g: Context, op: O.GroupBy, members: list[tuple[Diff, Rule]]) -> list[Statement]:
    """Tables E.12 (SUM) and E.13 (COUNT) composed with the member replaces of γ's group
    bag (:func:`idivm.rules.navigation.member_replace`): each aggregate of a group the replaces name
    changes by what the named members contribute in the post state minus what they
    contributed in the pre state (a COUNT's member contributes 1 when its argument is not
    NULL, a SUM's its value), read restricted to the replaces' keys in both states, each
    member once however many replaces name it.  The groups stay (no group appears or
    disappears), so the sums are increments of their rows."""
    diffs = [d for d, _ in members]
    restrictions = [d.restriction for d in diffs]
    grouped, changed, _ = _increment_of(
        g, op, lambda state, columns: _named_once(g, op, restrictions, state, columns), list(op.aggregates), [])
    return g.next(op, combined(diffs), members[0][1], kind="increment",
                  ids=tuple(Var(k) for k, _ in op.keys), plan=grouped, changed=changed, keys=None,
                  key_vars=(), restriction=None, pairs_of=None)


def _increments_or_recompute(g: Context, op: O.GroupBy, diff: Diff, rule: Rule, grouped: O.Operator,
                             changed, flag: str | None, recompute: bool) -> list[Statement]:
    """The increments of ``grouped``'s groups whose ``flag`` is 0; the others are replaced
    (if ``recompute``: a flag may count nothing)."""
    group_ids = tuple(Var(k) for k, _ in op.keys)
    exact = grouped if flag is None else O.Select(grouped, Call("eq", (Var(flag), Const(0, T.INT))))
    out = g.next(op, diff, rule, kind="increment", ids=group_ids, plan=exact, changed=tuple(changed),
                 keys=None, key_vars=(), restriction=None, pairs_of=None)
    if recompute:
        flagged = O.Select(grouped, Call("gt", (Var(flag), Const(0, T.INT))))
        gk = g.fresh_vars(len(op.keys))
        keys = O.Project(flagged, tuple((g, Var(k)) for g, (k, _) in zip(gk, op.keys)))
        rep = Diff("replace", op, group_ids, diff.starts, keys=keys, key_vars=gk,
                   restriction=restriction(op.input, tuple(t for _, t in op.keys), keys, gk),
                   trail=diff.trail + (rule.describe() + ": groups with NULL values are recomputed",))
        out += g.propagate(rep) if op is not g.plan else []
    return out


def _increment_of(g: Context, op: O.GroupBy, named, aggregates: list[tuple[str, O.Aggregate]],
                  nullable: list[Term]) -> tuple[O.Operator, tuple[tuple[Term, Term], ...], str | None]:
    """Per group, the sum of the post minus the pre contributions of the tuples ``named(state,
    columns)`` gives to each of ``aggregates`` (:func:`contribution`), and, if ``nullable``,
    the number of those tuples where one of its terms is NULL before or after (a flag
    column): (plan, (aggregate, its increment) pairs, flag column or None)."""
    kv, cv, dv = (g.fresh_vars(len(xs)) for xs in (op.keys, aggregates, aggregates))
    flag = g.fresh("n") if nullable else None

    def contributions(state: str, sign: int) -> O.Operator:
        columns = tuple(zip(kv, (t for _, t in op.keys))) + tuple(zip(cv, (contribution(a) for _, a in aggregates)))
        if flag is not None:
            null = Call("or", tuple(is_null(t) for t in nullable)) if len(nullable) > 1 else is_null(nullable[0])
            columns += ((flag, indicator(null)),)
        rows = named(state, columns)
        signed = tuple((v, Var(v) if sign > 0 else Call("neg", (Var(v),))) for v in cv)
        return O.Project(rows, tuple((v, Var(v)) for v in kv) + signed
                         + (((flag, Var(flag)),) if flag is not None else ()))

    sums = tuple((d, O.Aggregate("sum", Var(c))) for d, c in zip(dv, cv))
    if flag is not None:
        sums += ((flag, O.Aggregate("sum", Var(flag))),)
    grouped = O.GroupBy(O.UnionAll(contributions(POST, 1), contributions(PRE, -1)),
                        tuple((k, Var(v)) for (k, _), v in zip(op.keys, kv)), sums)
    return grouped, tuple((Var(a), Var(d)) for (a, _), d in zip(aggregates, dv)), flag


def _named_once(g: Context, op: O.GroupBy, restrictions: list[Restriction], state: str,
                columns: tuple[tuple[str, Term], ...]) -> O.Operator:
    """The tuples of γ's input at ``state`` that any of ``restrictions`` names, as
    ``columns``; a tuple several restrictions name is there once (distinct by its IDs)."""
    if len(restrictions) == 1:
        return O.Project(at_state(restricted(op.input, restrictions[0]), state), columns)
    ids = g.canonical_ids(op.input)
    iv = tuple(zip(g.fresh_vars(len(ids)), ids))
    named = O.Distinct(reduce(O.UnionAll, [
        O.Project(at_state(restricted(op.input, r), state), iv + columns) for r in restrictions]))
    return O.Project(named, tuple((v, Var(v)) for v, _ in columns))


def member_incremental(a: O.Aggregate) -> bool:
    """Whether the aggregate of a group changes by the sum of its members' contributions
    (:func:`contribution`) whatever the members: COUNT, and SUM of a value never NULL (a
    SUM of NULLs only is NULL, not 0)."""
    return not a.distinct and (a.function == "count" or (a.function == "sum" and never_null(a.arg)))


def contribution(a: O.Aggregate) -> Term:
    """What one member adds to the COUNT or SUM ``a`` of its group."""
    if a.function == "sum":
        return a.arg
    return Const(1, T.INT) if a.arg is None else counted(a.arg)


def counted(t: Term) -> Term:
    """1 where COUNT(t) counts the tuple (``t`` is not NULL), else 0."""
    return indicator(Call("not", (is_null(t),)))


def indicator(cond: Term) -> Term:
    return Case(((cond, Const(1, T.INT)),), Const(0, T.INT))


RULES = (
    Rule("GroupBy", "input", "replace", when_always, do_regroup, "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="Table C.7 (γ general)"),
    Rule("GroupBy", "input", "update", when_increments_apply, do_aggregate_increment, "increment+replace",
         reads=("Input_post",), blocking=True, source="Tables C.8 (SUM), C.10 (COUNT)"),
    Rule("GroupBy", "input", "update", when_always, do_to_replace, "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="Table C.7 (γ general)"),
    Rule("GroupBy", "input", "increment", when_always, do_to_replace, "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="aggregate of aggregates, Table C.7"),
)
