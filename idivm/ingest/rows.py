"""Whole rows (JSON Lines) → :class:`~idivm.ingest.records.ChangeSet`.

Every line is a JSON object.  A row of the table is an upsert: it replaces
the row with the same key, or is inserted (columns it leaves out are null).
A line ``{"__delete": {<key columns>}}`` deletes the row with that key.
Empty lines are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

from idivm.ingest.records import DELETE, UPSERT, Change, ChangeSet, RowChecker, json_kind, json_lines

DELETE_FIELD = "__delete"


def read_rows(path: str | Path, schema: pa.Schema, key: tuple[str, ...]) -> ChangeSet:
    """The changes of a file of rows and ``{"__delete": {...}}`` lines; bad lines are
    :class:`~idivm.errors.DataError` with ``file:line``."""
    source = Path(path).name
    checker = RowChecker(schema, key, source)
    changes: list[Change] = []
    for line, text, value in json_lines(path, source):
        if text is None:
            continue
        if not isinstance(value, Mapping):
            raise checker.error(line, f"expected a row (a JSON object), got {json_kind(value)}")
        if DELETE_FIELD in value:
            if len(value) != 1:
                raise checker.error(line, f"a {DELETE_FIELD!r} line holds nothing else: "
                                          f'{{"{DELETE_FIELD}": {{<key columns>}}}}')
            k, row = checker.key_of(value[DELETE_FIELD], line, DELETE_FIELD)
            changes.append(Change(DELETE, k, row, line))
        else:
            k, row = checker.row(value, line)
            changes.append(Change(UPSERT, k, row, line))
    return ChangeSet(source, tuple(changes), len(changes))
