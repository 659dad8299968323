"""σ (thesis Table C.3): inserts are filtered, deletes and updates pass by ID; an update of
an attribute of the condition turns into delete+insert of the named tuples (the pre-state
filter of the thesis is not needed: deleting an absent ID is a no-op)."""

from idivm.rules import Rule

RULES = (
    Rule("Select", "input", "replace", "always", "pass", "replace", source="Table C.3 rows 1-2"),
    Rule("Select", "input", "update", "touches_terms", "to_replace", "replace",
         reads=("Input_post",), source="Table C.3 row 3 (conditional update)"),
    Rule("Select", "input", "update", "always", "pass", "update", source="Table C.3 row 4"),
    Rule("Select", "input", "increment", "touches_terms", "to_replace", "replace",
         reads=("Input_post",), source="HAVING over a changed aggregate"),
    Rule("Select", "input", "increment", "always", "pass", "increment", source="Table C.3 row 4"),
    Rule("Assign", "input", "replace", "always", "pass", "replace", source="Table C.4 (π keeps IDs)"),
    Rule("Assign", "input", "update", "touches_terms", "to_replace", "replace",
         reads=("Input_post",), source="Table C.4"),
    Rule("Assign", "input", "update", "always", "pass", "update", source="Table C.4"),
    Rule("Assign", "input", "increment", "touches_terms", "to_replace", "replace",
         reads=("Input_post",), source="Table C.4"),
    Rule("Assign", "input", "increment", "always", "pass", "increment", source="Table C.4"),
)
