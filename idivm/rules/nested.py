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

from idivm.rules.common import Rule

#: operators computing one new variable from their input tuple (like an assignment)
PER_TUPLE = ("NavTuple", "FunctionCall", "ConstructTuple", "ConstructBag", "ConstructArray")
NESTED = ("ApplyPlan", "InnerCorrelate", "LeftCorrelate")

RULES = (
    # ScanCollection over a collection of its input (unnest, Table E.1)
    Rule("ScanCollection", "input", "replace", "over_path", "pass", "replace",
         source="Table E.1 (nested collection): IDs extended by the element's"),
    Rule("ScanCollection", "input", "update", "over_path_touched", "to_replace", "replace",
         reads=("Input_post",), source="Table E.1: the unnested collection changed"),
    Rule("ScanCollection", "input", "update", "over_path", "pass", "update", source="Table E.1"),
    Rule("ScanCollection", "input", "increment", "over_path_touched", "to_replace", "replace",
         reads=("Input_post",), source="Table E.1"),
    Rule("ScanCollection", "input", "increment", "over_path", "pass", "increment", source="Table E.1"),
) + tuple(
    rule
    for op in PER_TUPLE
    for rule in (
        Rule(op, "input", "replace", "always", "pass", "replace", source="Tables E.2, E.5, E.10"),
        Rule(op, "input", "update", "touches_terms", "to_replace", "replace", reads=("Input_post",),
             source="Tables E.2, E.5, E.10: the computed value reads the update"),
        Rule(op, "input", "update", "always", "pass", "update", source="Tables E.2, E.5, E.10"),
        Rule(op, "input", "increment", "touches_terms", "to_replace", "replace", reads=("Input_post",),
             source="Tables E.2, E.5, E.10"),
        Rule(op, "input", "increment", "always", "pass", "increment", source="Tables E.2, E.5, E.10"),
    )
) + tuple(
    rule
    for op in NESTED
    for rule in (
        Rule(op, "input", "replace", "always", "pass", "replace", reads=("Input_post",),
             source="Tables E.3, E.4, E.6: the nested plan is evaluated for the inserted tuples"),
        Rule(op, "input", "update", "touches_terms", "to_replace", "replace", reads=("Input_post",),
             source="Tables E.3, E.4, E.6: the nested plan reads the update"),
        Rule(op, "input", "update", "always", "pass", "update", source="Tables E.3, E.4, E.6"),
        Rule(op, "input", "increment", "touches_terms", "to_replace", "replace", reads=("Input_post",),
             source="Tables E.3, E.4, E.6"),
        Rule(op, "input", "increment", "always", "pass", "increment", source="Tables E.3, E.4, E.6"),
    ) + (
        Rule(op, "nested", "update", "navigable", "nested_update", "update",
             source="§2.12.3, §2.14.2, §2.15.3: the elements the update names by partial provenance are "
                    "updated in place, found by path navigation"),
        Rule(op, "nested", "replace", "elements_navigable", "nested_replace", "replace",
             reads=("Input_post",),
             source="Tables E.3, E.4 (nested side), §2.14.2: the elements the replace names by partial "
                    "provenance are deleted and their post state inserted, found by path navigation"),
    ) + tuple(
        Rule(op, "nested", kind, "always", "to_matching_outer", "replace",
             reads=("Input_pre", "Input_post"),
             source="§2.13 recursive instantiation: the outer tuples whose nested result holds the change")
        for kind in ("replace", "update", "increment")
    )
) + (
    # γ with GROUP AS (Table E.11); tried before the rules of idivm.rules.group_by
    Rule("GroupBy", "input", "update", "navigable", "nested_update", "update",
         source="Table E.11, §2.13 Example 2.13.1: the group members the update names by partial "
                "provenance are updated in place, found by path navigation"),
    Rule("GroupBy", "input", "replace", "members_navigable", "nested_replace", "replace",
         reads=("Input_post",),
         source="Table E.11 (insert/delete): the group members the replace names are deleted from their "
                "groups and the post-state members inserted; the groups of a left join's preserved side stay"),
    Rule("GroupBy", "input", "replace", "members_counted", "nested_replace", "replace+increment",
         reads=("Input_pre", "Input_post"),
         source="Table E.11 (insert/delete) with Tables E.12 (SUM), E.13 (COUNT): the group members the "
                "replace names are replaced as above, and the groups' aggregates incremented by the named "
                "members' post minus pre contributions"),
)
