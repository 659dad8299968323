"""ScanCollection over a base table: where base-table i-diffs enter (thesis §2.5, Table C.1)."""

from idivm.rules import Rule

RULES = (
    Rule("ScanCollection", "input", "replace", "always", "base_replace", "replace",
         source="§2.5: insert/delete/conditional-update signatures of the table"),
    Rule("ScanCollection", "input", "update", "always", "base_update", "update",
         source="§2.5: the non-conditional update signature of the table"),
)
