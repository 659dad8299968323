"""Semijoin ⋉ (EXISTS, IN) and antisemijoin ▷ (NOT EXISTS, NOT IN; thesis Table C.6):
left changes pass by ID; a right change names the left tuples it matches in the pre or the
post state (Input_pre, Input_post) and replaces them; right updates of attributes outside
the condition cannot change the output and are absorbed."""

from idivm.rules.common import (
    Rule, by_id_rows, do_absorb, do_to_matching_left, do_to_replace, when_always, when_touches_terms,
)

RULES = tuple(
    rule
    for op in ("SemiJoin", "AntiJoin")
    for rule in by_id_rows(op, "left", ("Table C.6 rows 1-2", "Table C.6 row 3", "Table C.6 row 4",
                                        "semijoin over an aggregate"),
                           replace_reads=("Input_post",), increment_replaces=True) + (
        Rule(op, "right", "replace", when_always, do_to_matching_left, "replace",
             reads=("Input_pre", "Input_post"), source="Table C.6 rows 5-6"),
        Rule(op, "right", "update", when_touches_terms, do_to_replace, "replace",
             reads=("Input_pre", "Input_post"), source="Table C.6 row 7"),
        Rule(op, "right", "update", when_always, do_absorb, "none", source="Table C.6 row 8"),
        Rule(op, "right", "increment", when_always, do_to_replace, "replace",
             reads=("Input_pre", "Input_post"), source="semijoin over an aggregate"),
    )
)
