"""Modification logs into base tables: change files are read and checked against the
table's schema and key (:mod:`~idivm.ingest.debezium`, :mod:`~idivm.ingest.rows`),
then applied as one Delta MERGE commit (:mod:`~idivm.ingest.apply`).  Uses
delta-rs and pyarrow only (no Spark).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from idivm.errors import DataError
from idivm.ingest.apply import IngestResult, apply_changes, condense
from idivm.ingest.debezium import read_debezium
from idivm.ingest.records import Change, ChangeSet
from idivm.ingest.rows import read_rows
from idivm.storage import delta

READERS = {"debezium": read_debezium, "rows": read_rows}
INGEST_FORMATS = tuple(READERS)

__all__ = ["INGEST_FORMATS", "Change", "ChangeSet", "IngestResult", "apply_changes", "condense",
           "ingest_file", "read_debezium", "read_rows"]


def ingest_file(table_path: str | Path, file: str | Path, key: tuple[str, ...] | list[str],
                format: str = "debezium", element_keys: Mapping[str, Sequence[str]] | None = None
                ) -> IngestResult:
    """Read every change of ``file`` (in ``format``), then apply them all in one commit.

    A bad record raises :class:`DataError` before anything is written, including a row
    whose nested collections break their declared element keys (``element_keys``).
    """
    if format not in READERS:
        raise DataError(f"unknown ingest format {format!r}; known formats: {', '.join(INGEST_FORMATS)}")
    schema = delta.schema(table_path)
    change_set = READERS[format](file, schema, tuple(key))
    if element_keys:
        _check_element_keys(change_set, schema, element_keys)
    return apply_changes(table_path, change_set, tuple(key))


def _check_element_keys(change_set: ChangeSet, schema, element_keys: Mapping[str, Sequence[str]]) -> None:
    import pyarrow as pa

    from idivm.ingest.load import Rows, check_element_key

    upserts = [c for c in change_set.changes if c.op == "upsert"]
    if not upserts:
        return
    rows = Rows(pa.Table.from_pylist([dict(c.row) for c in upserts], schema=schema),
                change_set.source, "line", [c.line for c in upserts])
    for path, cols in element_keys.items():
        check_element_key(rows, path, tuple(cols))
