"""Whole rows (JSON Lines) → :class:`~idivm.ingest.records.ChangeSet`.

Every line is a JSON object.  A row of the table is an upsert: it replaces
the row with the same key, or is inserted (columns it leaves out are null).
A line ``{"__delete": {<key columns>}}`` deletes the row with that key.
Empty lines are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from idivm.ingest.records import DELETE, UPSERT, Change, ChangeSet, RowChecker, json_kind, read_records

if TYPE_CHECKING:
    from idivm.declared_schema import DeclaredSchema

DELETE_FIELD = "__delete"


def read_rows(text: str, source: str, schema: pa.Schema, key: tuple[str, ...], strict: bool = False,
              declared: "DeclaredSchema | None" = None) -> ChangeSet:
    """The changes of a file of rows and ``{"__delete": {...}}`` lines (its ``text``), checked
    against the table's ``schema`` and ``key``, and its ``declared`` schema if it has one; bad
    lines are rejected with ``file:line`` (:func:`~idivm.ingest.records.read_records`)."""
    return read_records(text, source, schema, key, _row, strict=strict, declared=declared)


def _row(value, line: int, checker: RowChecker) -> list[Change]:
    if not isinstance(value, Mapping):
        raise checker.error(line, f"expected a row (a JSON object), got {json_kind(value)}")
    if DELETE_FIELD in value:
        if len(value) != 1:
            raise checker.error(line, f"a {DELETE_FIELD!r} line holds nothing else: "
                                      f'{{"{DELETE_FIELD}": {{<key columns>}}}}')
        k, row = checker.key_of(value[DELETE_FIELD], line, DELETE_FIELD)
        return [Change(DELETE, k, row, line)]
    k, row = checker.row(value, line)
    return [Change(UPSERT, k, row, line)]
