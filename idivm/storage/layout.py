"""How views are laid out in their Delta tables, and the hidden column of the MERGEs that
write changes into tables.

A view maintained by ID is stored ordered by its ID columns in small files (:class:`Layout`),
so that a run reads and rewrites only the files holding the rows it names; other views and
caches are written in the default order and file size of their engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from idivm.storage import delta

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: the size of the files of a table without a layout (delta-rs's and delta-spark's default order)
FILE_BYTES = 128 * 1024 * 1024
#: the rows of a Parquet row group of a view maintained by ID (see :class:`Layout`)
CLUSTERED_ROW_GROUP = 1024
#: the Arrow memory of a file of a view maintained by ID (see :class:`Layout`)
CLUSTERED_FILE_BYTES = 512 * 1024

#: the column of a MERGE's source rows that says whether a row is an upsert (``'upsert'``) or
#: the key of a row to delete (``'delete'``); the hidden-column prefix keeps it apart from the
#: table's columns
ACTION = "__idivm_action"


@dataclass(frozen=True)
class Layout:
    """How a view maintained by ID is stored: ordered by its ID columns ``keys`` in files of
    about :data:`CLUSTERED_FILE_BYTES` and row groups of at most :data:`CLUSTERED_ROW_GROUP`
    rows.  A file then holds a narrow range of IDs, so a run reads only the files that may
    hold the rows it names (``delta.read_spark(holding=)``) and rewrites only those
    (:func:`idivm.storage.delta.rewrite_clustered`, which keeps the layout), and a read
    restricted to a few IDs skips the other row groups by their statistics."""

    keys: tuple[str, ...]
    row_group_rows: int
    file_bytes: int

    def write(self, df: "DataFrame", path, mode: str, commit_metadata, engine: "delta.Engine" = delta.DELTA_RS) -> int:
        """Write ``df`` (the view's rows) in this layout; the new version.  A delta-spark engine
        writes the rows ordered by the keys in Spark's partitions of ranges of them."""
        from pyspark.sql import functions as F

        ordered = df.orderBy(*[F.col(delta.quoted(c)) for c in self.keys])
        return delta.write_spark(ordered, path, mode=mode, commit_metadata=commit_metadata,
                                 row_group_rows=self.row_group_rows, file_bytes=self.file_bytes,
                                 engine=engine, deletion_vectors=True)


def view_layout(columns: Sequence[str], id_columns: Sequence[str], strategy: str | None) -> Layout | None:
    """The layout of a view of ``strategy`` with ``columns`` whose ID columns are ``id_columns``
    (None: one write, files of the engine's default size): a view maintained by ID with ID
    columns is clustered by them."""
    ids = tuple(c for c in id_columns if c in columns)
    return Layout(ids, CLUSTERED_ROW_GROUP, CLUSTERED_FILE_BYTES) if strategy == "id" and ids else None


def write_view(df: "DataFrame", path, mode: str, commit_metadata, id_columns: Sequence[str], strategy: str | None,
               engine: "delta.Engine" = delta.DELTA_RS) -> int:
    """Write a view's rows ``df`` in the layout of ``strategy`` with ``engine``; the new version."""
    layout = view_layout(df.columns, id_columns, strategy)
    if layout is not None:
        return layout.write(df, path, mode, commit_metadata, engine)
    return delta.write_spark(df, path, mode=mode, commit_metadata=commit_metadata, engine=engine,
                             deletion_vectors=True)
