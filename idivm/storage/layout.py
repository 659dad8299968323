"""How views are laid out in their Delta tables, and the hidden column of the MERGEs that
write changes into tables.

A view maintained by ID is stored ordered by its ID columns in small files (:class:`Layout`),
so that a run reads and rewrites only the files holding the rows it names; other views and
caches are written in the default order and file size of their engine.

On the ``delta-spark-dv`` engine the tables ordered by ID (views maintained by ID and index
tables) are laid out one of two ways, chosen by ``$IDIVM_DV_LAYOUT`` (:data:`LAYOUT_ENV`,
read by :func:`dv_layout` only):

* ``liquid`` (the default): written ordered by the ID columns into a table with Delta's liquid
  clustering by them (``CLUSTER BY``, :func:`clustering_columns`); compaction is a plain
  ``OPTIMIZE``, which clusters incrementally by ZCube (below a ZCube's size, about 100 GB, the
  whole table);
* ``zorder``: written ordered by the ID columns; compaction rewrites the table ``OPTIMIZE ...
  ZORDER BY`` those columns.  Also the layout of a table whose ID columns Delta cannot cluster
  by (no statistics: nested, or past the first 32 columns).

Maintenance runs are the same on both (the same MERGEs); liquid clustering compacts faster
(1.2-3x; ``benchmarks/README.md``, Liquid clustering against Z-order).
"""

from __future__ import annotations

import os

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from idivm.errors import SetupError
from idivm.storage import delta

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

#: the environment variable choosing the layout of tables ordered by ID on ``delta-spark-dv``
LAYOUT_ENV = "IDIVM_DV_LAYOUT"
#: the layouts of tables ordered by ID on ``delta-spark-dv`` (see the module doc)
LAYOUTS = ("zorder", "liquid")
DEFAULT_LAYOUT = "liquid"
#: Delta's limit on the clustering columns of a table
MAX_CLUSTERING_COLUMNS = 4
#: the leaf columns Delta collects statistics for by default (``delta.dataSkippingNumIndexedCols``);
#: a clustering column must be one of them
STATS_COLUMNS = 32

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
        writes the rows ordered by the keys in Spark's partitions of ranges of them; delta-rs
        writes a small view sorted in the driver."""
        return delta.write_spark(df, path, mode=mode, commit_metadata=commit_metadata,
                                 row_group_rows=self.row_group_rows, file_bytes=self.file_bytes,
                                 engine=engine, deletion_vectors=True, order=self.keys,
                                 cluster_by=clustering_columns(df.schema, self.keys, engine))


def dv_layout() -> str:
    """The layout of tables ordered by ID on ``delta-spark-dv``: ``$IDIVM_DV_LAYOUT``, else
    :data:`DEFAULT_LAYOUT` (one of :data:`LAYOUTS`)."""
    chosen = os.environ.get(LAYOUT_ENV) or DEFAULT_LAYOUT
    if chosen not in LAYOUTS:
        raise SetupError(f"${LAYOUT_ENV} is {chosen!r}: use one of {', '.join(LAYOUTS)}")
    return chosen


def clustering_columns(schema: "StructType", order: Sequence[str], engine: "delta.Engine") -> tuple[str, ...]:
    """The liquid clustering columns of a table of Spark ``schema`` ordered by the columns
    ``order`` and written by ``engine``: with the ``liquid`` layout on an engine with deletion
    vectors, the longest prefix of ``order`` (at most :data:`MAX_CLUSTERING_COLUMNS`) of
    top-level scalar columns that Delta collects statistics for (among the first
    :data:`STATS_COLUMNS` leaf columns), which Delta requires of clustering columns; none
    otherwise (the table is ordered and Z-ordered instead)."""
    if not engine.deletion_vectors or not order or dv_layout() != "liquid":
        return ()
    from pyspark.sql.types import ArrayType, BinaryType, BooleanType, MapType, StructType

    def leaves(data_type) -> int:
        return sum(leaves(f.dataType) for f in data_type.fields) if isinstance(data_type, StructType) else 1

    position, with_stats = 0, set()
    for field in schema.fields:
        if position < STATS_COLUMNS and not isinstance(field.dataType, (StructType, ArrayType, MapType,
                                                                         BinaryType, BooleanType)):
            with_stats.add(field.name)
        position += leaves(field.dataType)
    columns = []
    for column in order[:MAX_CLUSTERING_COLUMNS]:
        if column not in with_stats:
            break
        columns.append(column)
    return tuple(columns)


def view_layout(columns: Sequence[str], id_columns: Sequence[str], strategy: str | None) -> Layout | None:
    """The layout of a view of ``strategy`` with ``columns`` whose ID columns are ``id_columns``
    (None: one write, files of the engine's default size): a view maintained by ID or by maps
    with ID columns (the maps' group keys) is clustered by them, so that a run rewrites the
    files holding the rows it changes (:func:`idivm.storage.delta.rewrite_clustered`)."""
    ids = tuple(c for c in id_columns if c in columns)
    return Layout(ids, CLUSTERED_ROW_GROUP, CLUSTERED_FILE_BYTES) if strategy in ("id", "maps") and ids else None


def write_view(df: "DataFrame", path, mode: str, commit_metadata, id_columns: Sequence[str], strategy: str | None,
               engine: "delta.Engine" = delta.DELTA_RS) -> int:
    """Write a view's rows ``df`` in the layout of ``strategy`` with ``engine``; the new version."""
    layout = view_layout(df.columns, id_columns, strategy)
    if layout is not None:
        return layout.write(df, path, mode, commit_metadata, engine)
    return delta.write_spark(df, path, mode=mode, commit_metadata=commit_metadata, engine=engine,
                             deletion_vectors=True)
