"""How a change reaches the elements of the nested bags a view stores (thesis Appendix E,
§2.12.3, §2.13, §2.14.2, §2.15.3): the analyses behind the nested rules of
:mod:`idivm.rules.nested`.

* :func:`navigation`: an update inside a nested plan, or reaching a γ with a GROUP AS
  variable, as nested updates of the stored elements it names by partial provenance;
* :func:`element_replace`: a replace inside a nested plan as a nested replace of the
  elements it names (Tables E.3, E.4 on the nested side);
* :func:`member_replace`: a replace of γ's input as a nested replace of group members
  (Table E.11 for inserts and deletes);
* :func:`group_forms`: the view columns holding a GROUP AS bag element by element.

Each returns None when the change does not reach the elements so; the rule then replaces
the outer tuples (or groups) instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from idivm.algebra import operators as O
from idivm.algebra.expressions import TRUE, Call, Field, Term, TupleExpr, Var, conjunction
from idivm.algebra.rewrite import substitute
from idivm.provenance.ids import PROV_FIELD
from idivm.rules.common import group_key_ids, naming_groups
from idivm.rules.context import Context, Diff, at_state, condition_terms, mentions, restricted, same
from idivm.rules.group_by import member_incremental
from idivm.script import ELEMENT, POST


@dataclass(frozen=True)
class Navigation:
    """A nested update: the top-level ``container`` (an ApplyPlan, or a GroupBy with a GROUP AS
    variable) whose bag is view column ``column``; its elements are named by provenance fields
    ``match`` (field, term over the updated tuple), and the fields at the paths of ``sets``
    (path of field names inside the element, post-value term) change."""

    container: O.Operator
    column: str
    match: tuple[tuple[str, Term], ...]
    sets: tuple[tuple[tuple[str, ...], Term], ...]
    #: the view ID columns of the row holding the named elements, and the term (over the
    #: i-diff's plan) of each (empty: the rows are found by the elements' provenance)
    on: tuple[str, ...] = ()
    located: tuple[Term, ...] = ()


@dataclass(frozen=True)
class Stored:
    """A view column holding γ's GROUP AS bag element by element (:func:`group_forms`):
    for each member of a group (a tuple of γ's input) for which ``condition`` holds (None: for
    every member), the element ``fields`` (terms over γ's input, the provenance field included):
    the bag itself (the members' own fields), or a subquery over it that filters and reshapes
    its members one by one."""

    column: str
    fields: tuple[tuple[str, Term], ...]
    condition: Term | None = None


@dataclass(frozen=True)
class ElementReplace:
    """A nested replace: the elements of view column ``column`` whose provenance fields
    ``match`` hold the changed keys are replaced by ``rows`` (the view ID columns ``on`` of the
    row each post-state element belongs to, and the element in column :data:`ELEMENT`)."""

    match: tuple[str, ...]
    column: str
    on: tuple[str, ...]
    rows: O.Operator
    #: the key variable of the i-diff holding each ID column of ``on`` of the row that holds
    #: the named elements (empty: the rows are found by the elements' provenance)
    located: tuple[str, ...] = ()


def enclosing(g: Context, op: O.Operator) -> O.Operator:
    """The operator (ApplyPlan, InnerCorrelate, ...) whose nested plan holds ``op``."""
    while id(op) in g.parents:
        op = g.parents[id(op)][0]
    return g.enclosing[id(op)]


def navigation(g: Context, group: O.GroupBy | None, diff: Diff) -> "tuple[Navigation, ...] | None":
    """How an update i-diff reaches the elements of the stored nested bags without changing
    anything else (§2.12.3, §2.13), one nested update per view column: for a change inside a
    nested plan (``group`` None), :func:`_find_navigation`; for a change reaching a γ with a
    GROUP AS variable (``group``), :func:`_group_navigation`.  None when it does not hold
    (the outer tuples, or the groups, are replaced instead)."""
    if group is None:
        return g.once("navigation", diff, lambda d: _find_navigation(g, d))
    return g.once(("group navigation", id(group)), diff, lambda d: _group_navigation(g, group, d))


def _find_navigation(g: Context, diff: Diff) -> "tuple[Navigation, ...] | None":
    """From the changed scan inside a nested plan up to the nested plan's root only σ,
    joins and π whose predicates do not read the updated attributes; every element field
    that reads them is computable from the updated tuple, and so are the element's
    provenance fields that name it (the table's key); the nested plan is the plan of a
    top-level ApplyPlan whose variable reaches one column of the view unchanged."""
    def passes(op: O.Operator, env: dict[Term, Term]) -> bool:
        return not any(mentions(substitute(t, env), diff.changed) for t in condition_terms(op))

    found = _nested_root(g, diff, passes)
    if found is None:
        return None
    root, apply, node, ids, env = found
    fields = tuple((n, t if n == PROV_FIELD else substitute(t, env)) for n, t in root.element.fields)
    stored = _stored_column(g, Var(apply.var), apply)
    nav = None if stored is None else \
        _element_navigation(g, apply, stored[0], node, fields, ids, diff.ids, diff)
    return None if nav is None else (nav,)


def _nested_root(g: Context, diff: Diff, passes=lambda op, env: True) -> tuple | None:
    """From the changed operator of ``diff`` up to the root of its nested plan through σ,
    inner joins (where ``passes(op, env)`` holds) and π only, the nested plan being the plan
    of a top-level ApplyPlan and ending in a tuple: (its ReturnBag, the ApplyPlan, the
    operator below the ReturnBag, the changed tuple's IDs there, the variables there as
    terms over the changed operator's); None otherwise."""
    env: dict[Term, Term] = {}
    ids, node = diff.ids, diff.op
    while True:
        up = g.parents.get(id(node))
        if up is None:
            return None
        op = up[0]
        if isinstance(op, O.ReturnBag):
            break
        if isinstance(op, (O.Select, O.InnerJoin)):
            if not passes(op, env):
                return None
        elif isinstance(op, O.Project):
            env = {Var(v): substitute(t, env) for v, t in op.outputs}
            ids = g.through_project(op, ids)
            if ids is None:
                return None
        else:
            return None
        node = op
    apply = g.enclosing.get(id(op))
    if not isinstance(apply, O.ApplyPlan) or id(apply) not in g.top_level \
            or not isinstance(op.element, TupleExpr):
        return None
    return op, apply, node, ids, env


def _provenance_fields(g: Context, fields: tuple[tuple[str, Term], ...], node: O.Operator,
                       ids: tuple[Term, ...]) -> tuple[str, ...] | None:
    """The provenance field of the element ``fields`` holding each ID of ``ids`` (terms over
    ``node``'s output), or None when one has none."""
    prov = dict(fields).get(PROV_FIELD)
    if not isinstance(prov, TupleExpr):
        return None
    out = []
    for i in ids:
        same = g.equivalents(node, i) + (i,)
        out += [p for p, pt in prov.fields if pt in same][:1]
    return tuple(out) if len(out) == len(ids) else None


def _group_navigation(g: Context, op: O.GroupBy, diff: Diff) -> "tuple[Navigation, ...] | None":
    """Table E.11 for an update the group members only carry: the update i-diff of γ's
    input becomes the nested update of the group bag, named by the members' provenance
    (partial: ``#(user_id)`` under the wildcard ``#()`` when the update does not hold the
    grouping attributes, Example 2.13.1), in every column storing the bag element by element
    (:func:`group_forms`).  Holds when γ is a top-level operator with a GROUP AS variable
    whose bag the view stores so, and no grouping key, no aggregate and no condition of such
    a column reads the updated attributes (the predicates and join conditions below were
    checked by the rules that passed the update up to γ)."""
    if not op.group_var or id(op) not in g.top_level:
        return None
    if any(mentions(t, diff.changed) for _, t in op.keys) or \
            any(a.arg is not None and mentions(a.arg, diff.changed) for _, a in op.aggregates):
        return None
    forms = group_forms(g, op)
    if forms is None or any(f.condition is not None and mentions(_null_tests_dropped(f.condition), diff.changed)
                            for f in forms[0]):
        return None
    out = []
    for form in forms[0]:
        nav = _element_navigation(g, op, form.column, op.input, form.fields, diff.ids, diff.ids, diff)
        if nav is None:
            return None
        if nav.sets:  # the elements carry none of the updated attributes otherwise
            out.append(_in_named_groups(g, op, diff, nav))
    return tuple(out)


def _in_named_groups(g: Context, op: O.GroupBy, diff: Diff, nav: "Navigation") -> "Navigation":
    """``nav`` in the rows named by ID when the update i-diff holds every key of γ (one of
    its IDs is the key term, or a term equal to it in γ's input): an update never changes
    its IDs, so each member it names is in the group of those keys, whose view row has
    them as its IDs (``update businesses`` in ``GROUP BY business_id``).  Otherwise
    ``nav`` as it is: the rows are found by the members' provenance."""
    group_ids = g.canonical_ids(op)
    found = group_key_ids(g, op, diff.ids)
    if not group_ids or found is None or any(k not in found for k in group_ids):
        return nav
    forms = group_forms(g, op, group_ids)
    if forms is None:
        return nav
    return replace(nav, on=forms[1], located=tuple(diff.ids[found[k]] for k in group_ids))


def _element_navigation(g: Context, container: O.Operator, column: str, node: O.Operator,
                        fields: tuple[tuple[str, Term], ...], ids: tuple[Term, ...],
                        values: tuple[Term, ...], diff: Diff) -> "Navigation | None":
    """The nested update of the bag of ``container`` stored in view column ``column``, whose elements are the tuples
    ``fields`` (terms over the i-diff's variables, but the provenance field's over ``node``'s
    output): each ID of ``ids`` (over ``node``'s output) is matched by the provenance field
    holding it, with the value of the term of ``values`` (over the i-diff's plan) it
    corresponds to; the sets are the element fields reading the updated attributes
    (:func:`_element_sets`)."""
    avail = set(diff.plan.output_variables())
    names = _provenance_fields(g, fields, node, ids)
    if names is None or len(names) != len(diff.ids) or not all(v.variables() <= avail for v in values):
        return None
    match = tuple(zip(names, values))
    sets = _element_sets(tuple((n, t) for n, t in fields if n != PROV_FIELD), diff.changed, avail)
    return None if sets is None else Navigation(container, column, match, sets)


def element_replace(g: Context, diff: Diff) -> "ElementReplace | None":
    """How a replace i-diff inside a nested plan reaches the elements of a stored bag
    without recomputing the outer tuples (:func:`_find_element_replace`), or None."""
    return g.once("element replace", diff, lambda d: _find_element_replace(g, d))


def _find_element_replace(g: Context, diff: Diff) -> "ElementReplace | None":
    """Tables E.3, E.4 on the nested side (§2.14.2).  From the changed operator up to the
    nested plan's root only σ, inner joins and π (:func:`_nested_root`): each element comes
    from one changed tuple or none, and the element's provenance holds the changed tuple's
    IDs (partial provenance: ``#(review_id)`` under ``#()``); the apply's bag reaches one
    column of the view unchanged.  The post-state elements are the nested plan restricted
    to the changed tuples, evaluated for the outer tuples in the post state and unnested
    next to the outer IDs (one flat join when :func:`_flattened` can write it)."""
    r = diff.restriction
    found = None if r is None or diff.keys is None else _nested_root(g, diff)
    if found is None:
        return None
    root, apply, node, ids, _ = found
    match = _provenance_fields(g, root.element.fields, node, ids)
    outer = g.canonical_ids(apply.input)
    stored = _stored_column(g, Var(apply.var), apply, outer)
    if match is None or stored is None:
        return None
    column, on = stored
    cond = conjunction([same(t, Var(k)) for t, k in zip(r.terms, r.key_vars)])
    probe, at = O.SemiJoin(r.at, r.keys, cond), r.at
    while (up := g.parents[id(at)])[0] is not root:
        probe, at = with_input(up[0], up[1], probe), up[0]
    flat = _flattened(probe, apply.input)
    if flat is not None:
        rows = O.ReturnBag(flat, TupleExpr(tuple(zip(on, outer)) + ((ELEMENT, root.element),)))
    else:
        m, e = g.fresh("m"), g.fresh("e")
        elements = O.ScanCollection(O.ApplyPlan(apply.input, O.ReturnBag(probe, root.element), m), Var(m), e)
        rows = O.ReturnBag(elements, TupleExpr(tuple(zip(on, outer)) + ((ELEMENT, Var(e)),)))
    return ElementReplace(match, column, on, at_state(rows, POST))


def member_replace(g: Context, op: O.GroupBy, diff: Diff) -> "tuple[ElementReplace, ...] | None":
    return g.once(("members", id(op)), diff, lambda d: _find_member_replace(g, op, d))


def _find_member_replace(g: Context, op: O.GroupBy, diff: Diff) -> "tuple[ElementReplace, ...] | None":
    """Table E.11 for a replace i-diff of γ's input: a replace of group members, with the
    group keys that name each member's group.  It holds when no group appears or
    disappears: the groups are the preserved tuples of a left join (γ's keys are its left
    side's IDs, and between them only σ reading the left side), and the change is of the
    right side, named by pairs (:func:`idivm.rules.common.do_to_matching_left`).  γ is a top-level operator with a
    GROUP AS variable whose bag the view stores element by element (:func:`group_forms`: as
    it is, or through subqueries that filter and reshape its members one by one), and whose
    other aggregates are COUNTs and SUMs of values never NULL (:func:`idivm.rules.group_by.member_increments`).
    In each such column the elements of the members named are deleted from their groups'
    bags and those of the post-state members under the same keys inserted (the padded
    member of a group left without matches included)."""
    join = diff.pairs_of
    if join is None or not op.group_var or not all(member_incremental(a) for _, a in op.aggregates) \
            or id(op) not in g.top_level or diff.keys is None:
        return None
    left = set(join.left.output_variables())
    node = op.input
    while node is not join:
        if not isinstance(node, O.Select) or not node.condition.variables() <= left:
            return None
        node = node.input
    key_terms = dict((Var(k), t) for k, t in op.keys)
    group_ids = g.canonical_ids(op)
    n = len(g.canonical_ids(join.left))  # the pairs' first IDs are the left side's
    named = naming_groups(g, op, diff, n)
    if named is None or any(k not in named for k in group_ids):
        return None
    where = {k: (key_terms[k], named[k]) for k in group_ids}
    if len(op.keys) != n or len({k for _, k in where.values()}) != n:
        return None
    forms = group_forms(g, op, group_ids)
    if forms is None:
        return None
    stored, on = forms
    out = []
    for form in stored:
        match = _provenance_fields(g, form.fields, op.input, diff.ids)
        if match is None:
            return None
        members = restricted(op.input, diff.restriction)
        if form.condition is not None:
            members = O.Select(members, form.condition)
        rows = O.ReturnBag(members, TupleExpr(tuple((c, where[k][0]) for c, k in zip(on, group_ids))
                                              + ((ELEMENT, TupleExpr(form.fields)),)))
        out.append(ElementReplace(match, form.column, on, at_state(rows, POST),
                                  tuple(where[k][1] for k in group_ids)))
    return tuple(out)


def group_forms(g: Context, op: O.GroupBy, ids: tuple[Term, ...] = ()
                ) -> "tuple[tuple[Stored, ...], tuple[str, ...]] | None":
    """The view columns holding the GROUP AS bag of γ ``op`` element by element, and the
    view's ID columns holding ``ids`` (terms over γ's output); None if the view reads the bag
    otherwise, or stores it nowhere.  From γ up to the view only σ that do not read the bag,
    renaming π, and applies of subqueries that read it through :func:`_element_wise`; each
    view column that is the bag or such a subquery's value is one form."""
    inputs = set(op.input.output_variables())
    found = _climb_to_view(g, op, {op.group_var: (op.group_fields, None)}, ids,
                           carried={Var(k): t for k, t in op.keys},  # γ's keys as terms over its input
                           subquery=lambda plan, forms, outer: _element_wise(plan, forms, outer, inputs))
    if found is None or not found[0]:
        return None
    columns, on = found
    return tuple(Stored(name, *form) for name, form in columns), on


def _stored_column(g: Context, var: Var, node: O.Operator, ids: tuple[Term, ...] = ()
                   ) -> tuple[str, tuple[str, ...]] | None:
    """The view column holding the bag of variable ``var`` bound by ``node`` as it is
    (through σ and renaming π that do not read it otherwise), and the view's ID columns
    holding ``ids`` (terms over ``node``'s output); None if there is no such column."""
    found = _climb_to_view(g, node, {var.name: None}, ids)
    if found is None or len(found[0]) != 1:
        return None
    ((column, _),), on = found
    return column, on


def _climb_to_view(g: Context, node: O.Operator, forms: dict, ids: tuple[Term, ...],
                   carried: dict[Term, Term] | None = None, subquery=None) -> tuple[list, tuple[str, ...]] | None:
    """The view columns that hold a variable of ``forms`` (variable -> its form) bound by
    ``node`` as it is, each with its form, and the view's ID columns holding ``ids`` (terms
    over ``node``'s output).  The walk goes up to the view through σ that do not read those
    variables and π that rename them (``carried``: terms kept under their variables' new
    names too); with ``subquery``, through applies whose subquery reads them too, when
    ``subquery(plan, forms, carried)`` gives the form of the apply's variable.  None when it
    meets another operator, or another use of the variables."""
    carried = dict(carried or {})
    while True:
        parent, side = g.parents[id(node)]
        if parent is g.plan:
            out = []
            for name, t in parent.element.fields:
                if isinstance(t, Var) and t.name in forms:
                    out.append((name, forms[t.name]))
                elif t.variables() & forms.keys():
                    return None
            return out, tuple(g.view_column(node, t) for t in ids)
        if isinstance(parent, O.Select):
            if parent.condition.variables() & forms.keys():
                return None
        elif isinstance(parent, O.ApplyPlan) and side == "input" and subquery is not None:
            if O.free_variables(parent.plan) & forms.keys():
                form = subquery(parent.plan, forms, carried)
                if form is None:
                    return None
                forms = {**forms, parent.var: form}
        elif isinstance(parent, O.Project):
            renamed = {}
            for v, t in parent.outputs:
                if isinstance(t, Var) and t.name in forms:
                    renamed[v] = forms[t.name]
                elif t.variables() & forms.keys():
                    return None
            forms = renamed
            carried = {Var(v): carried[t] for v, t in parent.outputs if t in carried}
            ids = g.through_project(parent, ids)
            if ids is None:
                return None
        else:
            return None
        node = parent


#: operators that keep the tuples of their input apart (each output tuple comes from one
#: tuple of the input it is followed up from): a nested plan's probe climbs through them
_TUPLE_KEEPING = (O.Select, O.Project, O.Assign, O.NavTuple, O.FunctionCall, O.ConstructTuple,
                  O.ConstructBag, O.ConstructArray, O.ScanCollection, O._Join, O.ApplyPlan,
                  O.InnerCorrelate, O.LeftCorrelate)


def keeps_tuples(op: O.Operator) -> bool:
    return isinstance(op, _TUPLE_KEEPING)


def with_input(op: O.Operator, side: str, child: O.Operator) -> O.Operator:
    """``op`` reading ``child`` on ``side``; a change on the right of ⟕, ⋉ or ▷ is followed to
    the left tuples it joins (an inner join)."""
    if side == "left":
        return op.with_inputs(child, op.right)
    if side == "right":
        if isinstance(op, O.InnerJoin):
            return op.with_inputs(op.left, child)
        return O.InnerJoin(op.left, child, op.condition)
    return op.with_inputs(child)


class _Correlated(Exception):
    """Raised by :func:`_flattened` for a nested plan it cannot join with its outer tuples."""


def _flattened(body: O.Operator, outer: O.Operator) -> O.Operator | None:
    """The nested plan ``body`` evaluated for every tuple of ``outer`` and unnested, as one
    flat plan (the classic unnesting of a correlated subquery): the σ reading ``outer``'s
    variables becomes a join of its input with ``outer`` on its condition, and the σ, ⋈ and π
    above it carry ``outer``'s variables up; an uncorrelated body is joined with every outer
    tuple.  None when ``outer`` is read elsewhere than in σ, or above anything but σ, inner
    joins and π (the result is then computed with an apply)."""
    xs = set(outer.output_variables())

    def go(op: O.Operator) -> tuple[O.Operator, bool]:
        if any(O.free_variables(n) & xs for n in op.nested()):
            raise _Correlated
        ins = [go(i) for i in op.inputs()]
        carried = any(c for _, c in ins)
        reads = set().union(*(t.variables() for t in op.terms())) & xs
        if not carried and not reads:
            return op, False
        new = op.with_inputs(*(n for n, _ in ins))
        if isinstance(new, O.Select) and not carried:
            return O.InnerJoin(new.input, outer, new.condition), True
        if isinstance(new, O.Project):
            if {v for v, _ in new.outputs} & xs:
                raise _Correlated
            return O.Project(new.input, new.outputs + tuple((v, Var(v)) for v in sorted(xs))), True
        if carried and isinstance(new, (O.Select, O.InnerJoin)):
            return new, True
        raise _Correlated

    try:
        flat, carried = go(body)
    except _Correlated:
        return None
    return flat if carried else O.InnerJoin(flat, outer, TRUE)


def _element_sets(fields: tuple[tuple[str, Term], ...], changed: Iterable[tuple[Term, Term]],
                  avail: set[str]) -> tuple[tuple[tuple[str, ...], Term], ...] | None:
    """The fields of a nested element an update changes, as (path inside the element, post
    value over the i-diff's variables ``avail``): a field holding a tuple the update changes
    (``users`` of a GROUP AS member, ``u`` of a ``SELECT *`` element) is navigated down to the
    updated attributes (``users.elite``); a field computed from them is set whole.  None if a
    changed value is not computable from the i-diff."""
    changed = tuple(changed)
    sets: list[tuple[tuple[str, ...], Term]] = []
    for name, t in fields:
        if not mentions(t, changed):
            continue
        below = [(rest, c) for c, _ in changed if (rest := _path_below(c, t))]
        for rest, c in below if below else [((), t)]:
            if not c.variables() <= avail:
                return None
            sets.append(((name,) + rest, c))
    return tuple(sets)


def _path_below(t: Term, prefix: Term) -> tuple[str, ...]:
    """The field names leading from ``prefix`` down to ``t`` (``users.elite`` below ``users``
    is ``("elite",)``); empty if ``prefix`` is not a proper prefix of ``t``."""
    names: list[str] = []
    while isinstance(t, Field):
        names.append(t.name)
        t = t.base
        if t == prefix:
            return tuple(reversed(names))
    return ()


def _element_wise(plan: O.Operator, forms: Mapping[str, tuple], outer: Mapping[Term, Term],
                  avail: set[str]) -> tuple[tuple[tuple[str, Term], ...], Term | None] | None:
    """The form of a subquery that filters and reshapes the members of a stored form of a group
    bag one by one (``SELECT x.a.b, ... FROM g AS x WHERE ...``: σ and π over a scan of the
    bag, ending in a tuple): its element and its condition as terms over γ's input, the
    member ``x`` read as its fields and the ``outer`` variables (γ's keys) as their terms;
    None for any other plan, or one reading other variables than γ's input's ``avail``."""
    if not isinstance(plan, O.ReturnBag) or not isinstance(plan.element, TupleExpr):
        return None
    chain, node = [], plan.input
    while isinstance(node, (O.Select, O.Project)):
        chain.append(node)
        node = node.input
    if not (isinstance(node, O.ScanCollection) and isinstance(node.input, O.Ground)
            and isinstance(node.source, Var) and node.source.name in forms
            and node.position is None and node.occurrence is None):
        return None
    fields, condition = forms[node.source.name]
    env = {**outer, Var(node.var): TupleExpr(fields)}
    conditions = [] if condition is None else [condition]
    for op in reversed(chain):
        if isinstance(op, O.Select):
            conditions.append(_navigated(substitute(op.condition, env)))
        else:
            env = {**outer, **{Var(v): _navigated(substitute(t, env)) for v, t in op.outputs}}
    element = tuple((n, _navigated(substitute(t, env))) for n, t in plan.element.fields)
    terms = [t for _, t in element] + conditions
    if not all(t.variables() <= avail for t in terms):
        return None
    return element, (conjunction(conditions) if conditions else None)


def _null_tests_dropped(term: Term) -> Term:
    """``term`` with its tests of whether a tuple variable is NULL taken as true: an update
    changes attributes of tuples, never whether a tuple is there (a left join's padded
    member has none), so such a test does not read the updated attributes."""
    tests = {t: TRUE for t in term.walk()
             if isinstance(t, Call) and t.function == "is_null" and isinstance(t.args[0], Var)}
    return substitute(term, tests) if tests else term


def _navigated(term: Term) -> Term:
    """``term`` with each field of a tuple constructor read as the field's term
    (``{"a": t}.a`` is ``t``)."""
    if isinstance(term, Field):
        base = _navigated(term.base)
        if isinstance(base, TupleExpr):
            found = dict(base.fields)
            if term.name in found:
                return found[term.name]
        return term if base is term.base else Field(base, term.name, span=term.span)
    mapping = {k: n for k in term.children() if (n := _navigated(k)) is not k}
    return substitute(term, mapping) if mapping else term
