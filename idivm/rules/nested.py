"""SQL++ operators (thesis Appendix E, Tables E.1–E.11; §2.13 recursive instantiation).

Per-tuple operators that add one variable computed from their input — NavTuple (E.2),
FunctionCall (E.5, ARRAY_COUNT & co.), ConstructTuple/ConstructBag/ConstructArray (E.10) —
and ScanCollection over a nested collection of its input (E.1, an unnest) keep their input's
IDs (Table 2.6): replace i-diffs pass by those IDs (the unnest's IDs extend them, so they
name the output tuples partially); an update passes unless the operator's term reads an
updated attribute, when the named tuples are replaced (the unnest of a changed collection,
a count over a changed bag).

ApplyPlan and InnerCorrelate/LeftCorrelate (E.3, E.4, E.6): a change of the input passes by
the input's IDs, unless the nested plan reads an updated attribute of the input.  A change of
a base table the *nested* plan reads is propagated by the recursive instantiation of §2.13:
the nested plan's i-diff query is triggered by the base-table change and evaluated in the
environment of every outer tuple; the outer tuples whose nested results contain a changed
tuple in the pre or the post state are named by their IDs and replaced.  (The nested plan is
followed from the changed scan up through the operators that keep tuples apart — σ, π, joins,
unnests, nested applies — so its correlation predicates select the outer tuples; above a γ
or a δ every outer tuple whose nested input holds a changed tuple is named.)  Deeper nesting
composes: the inner apply's named outer tuples are the changed tuples of the next level.

An update of attributes the nested plan only carries into its elements (no predicate, key or
aggregate reads them) is a nested update i-diff instead (§2.12.3, §2.14.2): it names the
elements by the partial provenance the changed tuple gives them — ``#(user_id)`` under
``#()`` for an update of ``users`` in the thesis' V — and sets their fields to the post
values, in every top-level row holding such an element, by path navigation (§2.15.3); the
base tables are not read.  That holds when the apply is a top-level operator whose bag the
view stores as one of its columns unchanged.

Under the same conditions, a replace i-diff inside the nested plan (an insert or a delete of a
tuple it reads, or an update it cannot pass) is a nested replace of the elements it names
(Tables E.3 and E.4 applied to the nested side, §2.14.2): the elements whose provenance holds
a changed key -- ``#(review_id)`` under ``#()`` for a review of the thesis' V -- are deleted
from every top-level row holding them, and the post-state elements of the changed tuples are
inserted into the rows of the outer tuples they belong to.  Only the changed tuples are joined
(with the tables the nested plan reads) and correlated with the outer tuples; the other
elements of the bags stay as they are, and the outer tuples are not recomputed.

The same update reaches the same elements when the bag is built by grouping instead (Table
E.11, Example 2.13.1: the thesis' V1, ``businesses NATURAL LEFT OUTER JOIN (reviews NATURAL JOIN
users) ... GROUP BY business_id INTO full_reviews``, is V written with a join and GROUP AS): the
update passes σ, π and the joins as an update (their conditions do not read it, Tables C.3–C.5,
C.9), and γ turns it into an update of the group bag: its i-diff holds no grouping attribute,
so it is grouped into one wildcard group ``#()`` whose members are named ``#(user_id)`` by the
provenance γ gives them, and the updated attributes lie one level deeper in a member, under
its FROM variable (``full_reviews[*].users.elite``).  That holds when γ is a top-level operator
whose GROUP AS bag the view stores element by element and neither a grouping key nor an
aggregate reads the updated attributes; otherwise the groups are recomputed (Table C.7).  The
view stores the bag element by element in a column that is the bag itself, or the value of a
subquery that filters and reshapes its members one by one (``(SELECT x.reviews.review_id, ...
FROM g AS x WHERE x.reviews IS NOT NULL)``: σ and π over a scan of the bag): each such column
gets its own nested update, its elements named by the members' provenance they keep.

An insert or a delete of the tuples in a group (Table E.11 for insert and delete i-diffs) is a
nested replace of the group's members when it cannot create or delete a group: in V1 the groups
are the businesses, the preserved side of the left join, and a change of reviews or users
reaches γ as the (business, review) pairs it changes, the padded member of a business that
gains its first review or loses its last included (Table C.9 completed).
The members named are deleted from the bag of their group, found by its ID, and the post-state
members inserted (in each column storing the bag element by element, reshaped by its subquery);
the businesses are not regrouped.  The group's COUNTs, and SUMs of values never
NULL, change with it by increments (Tables E.12 and E.13 applied to the group bag's nested
replace): what the named members contribute in the post state minus what they contributed in
the pre state, both read restricted to the replace's keys.
"""

from __future__ import annotations

from dataclasses import replace

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import Call, Const, TableRef, TupleExpr, Var, conjunction
from idivm.errors import InternalError
from idivm.provenance.ids import HIDDEN
from idivm.rules.common import Rule, by_id_rows, do_pass, do_to_replace, when_always, when_touches_terms
from idivm.rules.context import Context, Diff, Restriction, at_state, restriction, same
from idivm.rules.navigation import element_replace, enclosing, keeps_tuples, member_replace, navigation, with_input
from idivm.script import POST, PRE, Statement


# ---------------------------------------------------------------------- guards

def when_over_path(g: Context, op: O.ScanCollection, side, diff) -> bool:
    """Table E.1: the scan is an unnest, over a collection of its input (not a base table)."""
    return not isinstance(op.source, TableRef)


def when_over_path_touched(g: Context, op: O.ScanCollection, side, diff) -> bool:
    """Table E.1: an unnest of a collection the update (increment) changes."""
    return when_over_path(g, op, side, diff) and when_touches_terms(g, op, side, diff)


def when_navigable(g: Context, op, side, diff) -> bool:
    """§2.12.3, §2.14.2, Table E.11: the update reaches the stored elements it changes by
    their partial provenance, nothing else changing (:func:`navigation`)."""
    return g.strategy == "id" and navigation(g, op if side == "input" else None, diff) is not None


def when_elements_navigable(g: Context, op, side, diff) -> bool:
    """Tables E.3, E.4 (nested side), §2.14.2: the replace inside the nested plan reaches the
    stored elements it names without recomputing the outer tuples (:func:`element_replace`)."""
    return g.strategy == "id" and element_replace(g, diff) is not None


def when_members_navigable(g: Context, op: O.GroupBy, side, diff) -> bool:
    """Table E.11 (insert/delete): γ without aggregates, and the replace names group members
    without creating or deleting a group (:func:`member_replace`)."""
    return g.strategy == "id" and not op.aggregates and member_replace(g, op, diff) is not None


def when_members_counted(g: Context, op: O.GroupBy, side, diff) -> bool:
    """Table E.11 with Tables E.12, E.13: as :func:`when_members_navigable`, γ's other
    aggregates being COUNTs and SUMs of values never NULL."""
    return g.strategy == "id" and bool(op.aggregates) and member_replace(g, op, diff) is not None


# ---------------------------------------------------------------------- transformations

def do_nested_update(g: Context, op: O.ApplyPlan | O.GroupBy, side, diff, rule) -> list[Statement]:
    """§2.12.3, §2.14.2, §2.15.3, Table E.11: Δu(V.path[*]) = {#(match) -> set post values} -- the
    nested update i-diff of :func:`navigation`: the elements of column ``path``
    whose provenance fields ``match`` take the i-diff's values get the post values at the
    paths ``set``, in the rows holding them: found by those elements (through a global
    index or by searching the bags), or named by ID when the i-diff holds the view ID
    columns ``on`` of each (the members of a group: its ID is the group key)."""
    out = []
    for nav in navigation(g, op if side == "input" else None, diff):
        if not nav.sets:  # the elements carry none of the updated attributes
            continue
        keys = tuple((f"{HIDDEN}key_{p}", t) for p, t in nav.match)
        rows = tuple(zip(nav.on, nav.located))
        news, taken = [], {c for c, _ in keys + rows}
        for path, t in nav.sets:
            column = f"{HIDDEN}new_{'_'.join(path)}"
            while column in taken:  # ("a_b",) and ("a", "b")
                column += "_"
            taken.add(column)
            news.append((column, t))
        query = O.ReturnBag(diff.plan, TupleExpr(keys + rows + tuple(news)))
        out.append(Statement("nested_update", diff.starts, on=nav.on, query=query, path=nav.column,
                             match=tuple((p, c) for (p, _), (c, _) in zip(nav.match, keys)),
                             set=tuple((path, c) for (path, _), (c, _) in zip(nav.sets, news)),
                             rules=diff.trail + (rule.describe(),)))
    return out


def do_nested_replace(g: Context, op: O.ApplyPlan | O.GroupBy, side, diff, rule) -> list[Statement]:
    """Tables E.3, E.4 (nested side), Table E.11 (insert/delete), §2.14.2: Δ(V.path[*]) =
    delete(#(match) of keys) + insert(rows) -- the nested replace i-diff of
    :func:`element_replace` (of :func:`member_replace` for γ): ``keys`` names the replaced
    elements by their provenance fields ``match`` (in every view row holding one, found by
    the global index of the bag or by searching the bags; or, when the keys also hold the
    view ID columns ``on``, in the row they name); ``rows`` gives the post-state elements
    with the view ID columns ``on`` of the row each belongs to."""
    found = (element_replace(g, diff),) if side == "nested" else member_replace(g, op, diff)
    out = []
    for e in found:
        columns = tuple(f"{HIDDEN}key_{p}" for p in e.match)
        keys = O.ReturnBag(diff.keys, TupleExpr(tuple((c, Var(k)) for c, k in zip(columns, diff.key_vars))
                                                + tuple((c, Var(k)) for c, k in zip(e.on, e.located))))
        out.append(Statement("nested_replace", diff.starts, on=e.on, keys=keys, rows=e.rows, path=e.column,
                             match=tuple(zip(e.match, columns)), rules=diff.trail + (rule.describe(),)))
    if isinstance(op, O.GroupBy) and op.aggregates:
        g.defer(op, "members", diff, rule)  # Tables E.12, E.13: :func:`idivm.rules.group_by.member_increments`
    return out


def to_outer(g: Context, diff: Diff) -> list[Statement]:
    """A change inside a nested plan (§2.13, recursive instantiation), at the operator nesting
    it: an update is tried as a nested update (:func:`navigation`); otherwise the change, as a
    replace, is a nested replace of the elements it names (:func:`element_replace`) or the
    replace of the outer tuples whose nested results hold it (:func:`do_to_matching_outer`)."""
    if diff.kind == "update":
        nav = navigation(g, None, diff)
        if nav is not None:
            apply = nav[0].container
            for rule in _nested_rules(apply.name, "update"):
                if rule.when(g, apply, "nested", diff):
                    return rule.action(g, apply, "nested", diff, rule)
    kind = diff.kind
    if diff.kind != "replace":
        diff = _as_replace(g, diff)
    apply = enclosing(g, diff.op)
    for rule in _nested_rules(apply.name, "replace"):
        if rule.action is not do_to_matching_outer and rule.when(g, apply, "nested", diff):
            if kind != "replace":
                diff = replace(diff, trail=diff.trail + (f"{apply.name}[nested]: the {kind} becomes delete+insert",))
            return rule.action(g, apply, "nested", diff, rule)
    rule = next(r for r in _nested_rules(apply.name, kind) if r.action is do_to_matching_outer)
    return do_to_matching_outer(g, apply, "nested", diff, rule)


def _as_replace(g: Context, diff: Diff) -> Diff:
    """An update or increment inside a nested plan as the replace of the tuples it names."""
    kv = g.fresh_vars(len(diff.ids))
    keys = O.Project(diff.plan, tuple(zip(kv, diff.ids)))
    return replace(diff, kind="replace", keys=keys, key_vars=kv, restriction=Restriction(diff.op, diff.ids, keys, kv))


def _nested_rules(operator: str, kind: str) -> tuple[Rule, ...]:
    """The rows of :data:`RULES` for a ``kind`` i-diff of the nested plan of ``operator``."""
    return tuple(r for r in RULES if r.operator == operator and r.side == "nested" and r.diff == kind)


def do_to_matching_outer(g: Context, op, side, diff, rule) -> list[Statement]:
    """§2.13 recursive instantiation, Tables E.3, E.4, E.6: a change inside the nested plan
    of ``op`` is the replace i-diff of the top-level outer tuples whose nested results hold a
    changed tuple before or after, Δ(R apply P) from ΔP replaces
    R ⋉_I (π_I σ_{exists}(R apply (P ⋉ ΔP))@pre ∪ ...@post).

    The nested plan is followed up from the restriction of ``diff`` (the changed scan,
    semijoined with the changed keys) through the operators that keep tuples apart; at
    the nested plan's root the enclosing apply evaluates that probe for every outer
    tuple in its environment, and the outer tuples with a non-empty probe are the
    changed tuples of the next level, up to the top-level plan."""
    if diff.kind != "replace":
        diff = _as_replace(g, diff)
    r = diff.restriction
    if r is None:
        raise InternalError(f"a change inside a nested plan at {diff.op.name} names no tuples")
    cond = conjunction([same(t, Var(k)) for t, k in zip(r.terms, r.key_vars)])
    node, probe = r.at, O.SemiJoin(r.at, r.keys, cond)
    trail, level = diff.trail, rule
    while True:
        up = g.parents.get(id(node))
        while up is not None and keeps_tuples(up[0]):
            probe = with_input(up[0], up[1], probe)
            node = up[0]
            up = g.parents.get(id(node))
        while up is not None:  # above a γ, δ or ∪: every tuple of the nested input may change
            node = up[0]
            up = g.parents.get(id(node))
        outer = g.enclosing[id(node)]
        if level is None:  # the outer levels above the first
            level = next(r for r in _nested_rules(outer.name, "replace") if r.action is do_to_matching_outer)
        trail += (level.describe(),)
        level = None
        m = g.fresh("m")
        hit = O.Select(O.ApplyPlan(outer.input, O.ReturnBag(probe, Const(True, T.BOOL)), m),
                       Call("exists", (Var(m),)))
        if id(outer) in g.top_level:
            break
        node, probe = outer, outer.with_inputs(hit)
    ids = g.canonical_ids(outer.input)
    kv = g.fresh_vars(len(ids))
    matches = O.Project(hit, tuple(zip(kv, ids)))
    keys = O.UnionAll(at_state(matches, PRE), at_state(matches, POST))
    new = Diff("replace", outer, ids, diff.starts, keys=keys, key_vars=kv,
               restriction=restriction(outer.input, ids, keys, kv), trail=trail)
    return g.propagate(new)


#: operators computing one new variable from their input tuple (like an assignment)
PER_TUPLE = ("NavTuple", "FunctionCall", "ConstructTuple", "ConstructBag", "ConstructArray")
NESTED = ("ApplyPlan", "InnerCorrelate", "LeftCorrelate")

RULES = (
    # ScanCollection over a collection of its input (unnest, Table E.1)
    Rule("ScanCollection", "input", "replace", when_over_path, do_pass, "replace",
         source="Table E.1 (nested collection): IDs extended by the element's"),
    Rule("ScanCollection", "input", "update", when_over_path_touched, do_to_replace, "replace",
         reads=("Input_post",), source="Table E.1: the unnested collection changed"),
    Rule("ScanCollection", "input", "update", when_over_path, do_pass, "update", source="Table E.1"),
    Rule("ScanCollection", "input", "increment", when_over_path_touched, do_to_replace, "replace",
         reads=("Input_post",), source="Table E.1"),
    Rule("ScanCollection", "input", "increment", when_over_path, do_pass, "increment", source="Table E.1"),
) + tuple(
    rule
    for op in PER_TUPLE
    for rule in by_id_rows(op, "input", (
        "Tables E.2, E.5, E.10", "Tables E.2, E.5, E.10: the computed value reads the update",
        *["Tables E.2, E.5, E.10"] * 3))
) + tuple(
    rule
    for op in NESTED
    for rule in by_id_rows(op, "input", (
        "Tables E.3, E.4, E.6: the nested plan is evaluated for the inserted tuples",
        "Tables E.3, E.4, E.6: the nested plan reads the update", *["Tables E.3, E.4, E.6"] * 3),
        replace_reads=("Input_post",)) + (
        Rule(op, "nested", "update", when_navigable, do_nested_update, "update",
             source="§2.12.3, §2.14.2, §2.15.3: the elements the update names by partial provenance are "
                    "updated in place, found by path navigation"),
        Rule(op, "nested", "replace", when_elements_navigable, do_nested_replace, "replace",
             reads=("Input_post",),
             source="Tables E.3, E.4 (nested side), §2.14.2: the elements the replace names by partial "
                    "provenance are deleted and their post state inserted, found by path navigation"),
    ) + tuple(
        Rule(op, "nested", kind, when_always, do_to_matching_outer, "replace",
             reads=("Input_pre", "Input_post"),
             source="§2.13 recursive instantiation: the outer tuples whose nested result holds the change")
        for kind in ("replace", "update", "increment")
    )
) + (
    # γ with GROUP AS (Table E.11); tried before the rules of idivm.rules.group_by
    Rule("GroupBy", "input", "update", when_navigable, do_nested_update, "update",
         source="Table E.11, §2.13 Example 2.13.1: the group members the update names by partial "
                "provenance are updated in place, found by path navigation"),
    Rule("GroupBy", "input", "replace", when_members_navigable, do_nested_replace, "replace",
         reads=("Input_post",),
         source="Table E.11 (insert/delete): the group members the replace names are deleted from their "
                "groups and the post-state members inserted; the groups of a left join's preserved side stay"),
    Rule("GroupBy", "input", "replace", when_members_counted, do_nested_replace, "replace+increment",
         reads=("Input_pre", "Input_post"),
         source="Table E.11 (insert/delete) with Tables E.12 (SUM), E.13 (COUNT): the group members the "
                "replace names are replaced as above, and the groups' aggregates incremented by the named "
                "members' post minus pre contributions"),
)
