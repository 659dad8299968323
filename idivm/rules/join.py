"""Inner join ⋈ (thesis Table C.5): a delete or an update names output tuples by the IDs
of one side (partial IDs); an insert joins with the other side's post state; an update of a
join attribute becomes delete+insert."""

from idivm.rules.common import Rule, do_pass, do_to_replace, when_always, when_touches_terms

RULES = tuple(
    rule
    for side in ("left", "right")
    for rule in (
        Rule("InnerJoin", side, "replace", when_always, do_pass, "replace", reads=("Input_post",),
             source="Table C.5 rows 1-2 (insert: Δ ⋈ other side's post state)"),
        Rule("InnerJoin", side, "update", when_touches_terms, do_to_replace, "replace", reads=("Input_post",),
             source="Table C.5 row 3 (join attribute)"),
        Rule("InnerJoin", side, "update", when_always, do_pass, "update", source="Table C.5 row 4"),
        Rule("InnerJoin", side, "increment", when_always, do_to_replace, "replace", reads=("Input_post",),
             source="join over an aggregate"),
    )
)
