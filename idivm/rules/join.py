"""Inner join ⋈ (thesis Table C.5): a delete or an update names output tuples by the IDs
of one side (partial IDs); an insert joins with the other side's post state; an update of a
join attribute becomes delete+insert."""

from idivm.rules.common import by_id_rows

RULES = tuple(
    rule
    for side in ("left", "right")
    for rule in by_id_rows("InnerJoin", side, (
        "Table C.5 rows 1-2 (insert: Δ ⋈ other side's post state)", "Table C.5 row 3 (join attribute)",
        "Table C.5 row 4", "join over an aggregate"), replace_reads=("Input_post",), increment_replaces=True)
)
