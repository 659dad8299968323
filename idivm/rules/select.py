"""σ (thesis Table C.3) and the assignment of a computed variable (LET, like a π that keeps
its input, Table C.4): inserts are filtered, deletes and updates pass by ID; an update of an
attribute the condition (or the assigned term) reads turns into delete+insert of the named
tuples (the pre-state filter of the thesis is not needed: deleting an absent ID is a no-op)."""

from idivm.rules.common import by_id_rows

RULES = tuple(
    rule
    for op, table in (("Select", "Table C.3"), ("Assign", "Table C.4"))
    for rule in by_id_rows(op, "input", (
        f"{table} rows 1-2", f"{table} row 3 (conditional update)", f"{table} row 4",
        "a condition over a changed aggregate (HAVING)", f"{table} row 4"))
)
