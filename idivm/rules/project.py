"""Generalized π with functions (thesis Table C.4): IDs are renamed through the projection;
an update recomputes the outputs whose functions read the updated attributes, from the
i-diff itself when it carries every attribute they read, else it becomes delete+insert."""

from idivm.rules.common import Rule

RULES = (
    Rule("Project", "input", "replace", "always", "pass", "replace", source="Table C.4 rows 1-2"),
    Rule("Project", "input", "update", "computable", "project_update", "update",
         source="Table C.4 row 3"),
    Rule("Project", "input", "update", "always", "to_replace", "replace", reads=("Input_post",),
         source="Table C.4 row 3, functions reading other attributes"),
    Rule("Project", "input", "increment", "renames_only", "project_update", "increment",
         source="Table C.8 (aggregate passed through)"),
    Rule("Project", "input", "increment", "always", "to_replace", "replace", reads=("Input_post",),
         source="a function of an aggregate"),
)
