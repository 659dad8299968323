"""ScanCollection over a base table: where base-table i-diffs enter (thesis §2.5, Table C.1);
over a nested collection of a base table the view only unnests: where the element i-diffs of
that collection enter (§2.14.2)."""

from idivm.rules.common import Rule

RULES = (
    Rule("ScanCollection", "input", "replace", "always", "base_replace", "replace",
         source="§2.5: insert/delete/conditional-update signatures of the table"),
    Rule("ScanCollection", "input", "update", "always", "base_update", "update",
         source="§2.5: the non-conditional update signature of the table"),
    Rule("ScanCollection", "input", "replace", "always", "base_elements", "replace",
         source="§2.14.2: insert/delete signatures of the elements of a nested collection"),
)
