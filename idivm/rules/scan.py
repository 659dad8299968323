"""ScanCollection over a base table: where base-table i-diffs enter (thesis §2.5, Table C.1);
over a nested collection of a base table the view only unnests: where the element i-diffs of
that collection enter (§2.14.2).

These rows are not instantiated by an i-diff reaching the scan: the generator creates the
base i-diffs at the scans and records the row they enter by in their trail."""

from __future__ import annotations

from idivm.errors import InternalError
from idivm.rules.common import Rule, when_always
from idivm.rules.context import Context
from idivm.script import Statement


def do_base_replace(g: Context, op, side, diff, rule) -> list[Statement]:
    """§2.5, Table C.1: the insert, delete and conditional-update signatures of a table are
    the replace i-diff ΔR = delete(I) + insert(R_post ⋉_I ΔR) of the keys they name; created
    at the scan by the generator, never propagated into it."""
    raise InternalError("base i-diffs are created, not propagated")


def do_base_update(g: Context, op, side, diff, rule) -> list[Statement]:
    """§2.5: the non-conditional update signature of a table is the update i-diff
    Δu R = {I, a_pre, a_post} of the attributes the view reads only outside conditions;
    created at the scan by the generator, never propagated into it."""
    raise InternalError("base i-diffs are created, not propagated")


def do_base_elements(g: Context, op, side, diff, rule) -> list[Statement]:
    """§2.14.2: the insert and delete signatures of the elements of a nested collection the
    view only unnests are the replace i-diff Δ(R.a) of the elements they name, by the table's
    key and the elements' identity; created at the unnest by the generator."""
    raise InternalError("base i-diffs are created, not propagated")


BASE_REPLACE = Rule("ScanCollection", "input", "replace", when_always, do_base_replace, "replace",
                    source="§2.5: insert/delete/conditional-update signatures of the table")
BASE_UPDATE = Rule("ScanCollection", "input", "update", when_always, do_base_update, "update",
                   source="§2.5: the non-conditional update signature of the table")
BASE_ELEMENTS = Rule("ScanCollection", "input", "replace", when_always, do_base_elements, "replace",
                     source="§2.14.2: insert/delete signatures of the elements of a nested collection")

RULES = (BASE_REPLACE, BASE_UPDATE, BASE_ELEMENTS)
