"""σ (thesis Table C.3) and the assignment of a computed variable (LET, like a π that keeps
its input, Table C.4): inserts are filtered, deletes and updates pass by ID; an update of an
attribute the condition (or the assigned term) reads turns into delete+insert of the named
tuples (the pre-state filter of the thesis is not needed: deleting an absent ID is a no-op)."""

from idivm.rules.common import Rule, do_pass, do_to_replace, when_always, when_touches_terms

RULES = tuple(
    rule
    for op, table in (("Select", "Table C.3"), ("Assign", "Table C.4"))
    for rule in (
        Rule(op, "input", "replace", when_always, do_pass, "replace", source=f"{table} rows 1-2"),
        Rule(op, "input", "update", when_touches_terms, do_to_replace, "replace",
             reads=("Input_post",), source=f"{table} row 3 (conditional update)"),
        Rule(op, "input", "update", when_always, do_pass, "update", source=f"{table} row 4"),
        Rule(op, "input", "increment", when_touches_terms, do_to_replace, "replace",
             reads=("Input_post",), source="a condition over a changed aggregate (HAVING)"),
        Rule(op, "input", "increment", when_always, do_pass, "increment", source=f"{table} row 4"),
    )
)
