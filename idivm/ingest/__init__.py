"""Modification logs into base tables: change files are read and checked against the
table's schema and key (:mod:`~idivm.ingest.debezium`, :mod:`~idivm.ingest.rows`),
then applied as one Delta MERGE commit (:mod:`~idivm.ingest.apply`).  Uses
delta-rs and pyarrow only (no Spark).
"""

from __future__ import annotations

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
                format: str = "debezium") -> IngestResult:
    """Read every change of ``file`` (in ``format``), then apply them all in one commit.

    A bad record raises :class:`DataError` before anything is written.
    """
    if format not in READERS:
        raise DataError(f"unknown ingest format {format!r}; known formats: {', '.join(INGEST_FORMATS)}")
    change_set = READERS[format](file, delta.schema(table_path), tuple(key))
    return apply_changes(table_path, change_set, tuple(key))
