"""Semijoin ⋉ (EXISTS, IN) and antisemijoin ▷ (NOT EXISTS, NOT IN; thesis Table C.6):
left changes pass by ID; a right change names the left tuples it matches in the pre or the
post state (Input_pre, Input_post) and replaces them; right updates of attributes outside
the condition cannot change the output and are absorbed."""

from idivm.rules.common import Rule

RULES = tuple(
    rule
    for op in ("SemiJoin", "AntiJoin")
    for rule in (
        Rule(op, "left", "replace", "always", "pass", "replace", reads=("Input_post",),
             source="Table C.6 rows 1-2"),
        Rule(op, "left", "update", "touches_terms", "to_replace", "replace", reads=("Input_post",),
             source="Table C.6 row 3"),
        Rule(op, "left", "update", "always", "pass", "update", source="Table C.6 row 4"),
        Rule(op, "left", "increment", "always", "to_replace", "replace", reads=("Input_post",),
             source="semijoin over an aggregate"),
        Rule(op, "right", "replace", "always", "to_matching_left", "replace",
             reads=("Input_pre", "Input_post"), source="Table C.6 rows 5-6"),
        Rule(op, "right", "update", "touches_terms", "to_replace", "replace",
             reads=("Input_pre", "Input_post"), source="Table C.6 row 7"),
        Rule(op, "right", "update", "always", "absorb", "none", source="Table C.6 row 8"),
        Rule(op, "right", "increment", "always", "to_replace", "replace",
             reads=("Input_pre", "Input_post"), source="semijoin over an aggregate"),
    )
)
