"""Left outer join ⟕ (thesis Table C.9, completed): changes of the left side behave as in
⋈; a change of the right side changes which left tuples are padded, so it names the left
tuples it matches before or after the change (Input_pre and Input_post) and replaces them —
padded rows appear and disappear with their matches."""

from idivm.rules.common import (
    Rule, by_id_rows, do_pass, do_to_matching_left, do_to_replace, when_always, when_touches_terms,
)

RULES = by_id_rows("LeftJoin", "left", ("Table C.9 rows 1-2", "Table C.9 row 3", "Table C.9 row 4",
                                        "join over an aggregate"),
                   replace_reads=("Input_post",), increment_replaces=True) + (
    Rule("LeftJoin", "right", "replace", when_always, do_to_matching_left, "replace",
         reads=("Input_pre", "Input_post"), source="Table C.9 completed: padded rows"),
    Rule("LeftJoin", "right", "update", when_touches_terms, do_to_replace, "replace",
         reads=("Input_pre", "Input_post"), source="Table C.9 completed: join attribute"),
    Rule("LeftJoin", "right", "update", when_always, do_pass, "update",
         source="Table C.9 row 4 (padded rows have NULL right IDs and are not named)"),
    Rule("LeftJoin", "right", "increment", when_always, do_to_replace, "replace",
         reads=("Input_pre", "Input_post"), source="join over an aggregate"),
)
