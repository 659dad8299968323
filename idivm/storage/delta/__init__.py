"""Delta Lake tables, written through delta-rs (the ``deltalake`` package) in the driver or
through delta-spark by Spark's executors.

Every table idivm creates has ``delta.enableChangeDataFeed=true``, so the
changes between two versions can be read back (:func:`read_changes`).

**Engines.**  What Spark computes is written by one of the :data:`ENGINES`
(:class:`Engine`): ``delta-rs`` streams it from Spark through the driver into delta-rs, and
rewrites the files an i-diff names in the driver (copy-on-write); ``delta-spark`` writes with
``format("delta")`` and MERGEs by the executors, reading with ``format("delta")`` at pinned
versions; ``delta-spark-dv`` also gives views and caches deletion vectors, so a MERGE marks
the rows it replaces in the files that hold them instead of rewriting those files
(merge-on-read).  Tables of both engines are plain Delta tables that the other reads and
writes, except that a table with deletion vectors is always read and written through
delta-spark (:func:`needs_delta_spark`): delta-rs and plain Parquet readers would see the
rows its deletion vectors remove.

The module is this package; its parts, by concern:

* :mod:`~idivm.storage.delta.table` — engines, opening a table at a version, its versions,
  schema and active files, and whether it needs delta-spark;
* :mod:`~idivm.storage.delta.commits` — commit metadata and :func:`history`;
* :mod:`~idivm.storage.delta.merge` — the clauses of a MERGE, for both engines;
* :mod:`~idivm.storage.delta.delta_rs` — the delta-rs paths: writes from Arrow and from Spark
  through a staging directory, :func:`merge_arrow`, reads of a version's Parquet files, the
  change data feed;
* :mod:`~idivm.storage.delta.clustered` — the clustered layout delta-rs writes and rewrites
  (:func:`write_clustered`, :func:`rewrite_clustered`);
* :mod:`~idivm.storage.delta.delta_spark` — the delta-spark paths: writes and reads by the
  executors, :func:`merge_spark`, delta-spark's ``OPTIMIZE``.

This module chooses between the two for the reads, writes and compactions that both engines
serve (:func:`read_spark`, :func:`write_spark`, :func:`scan_ordered`, :func:`row_count`,
:func:`optimize`).  No other module of idivm imports either library's write API.

Paths are local directories (``str`` or ``Path``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from idivm.errors import CatalogError
from idivm.storage.delta import delta_rs, delta_spark
from idivm.storage.delta.clustered import Patch, Patching, Rewrite, distinct_rows, replaced, key_mask, ordered, rewrite_clustered, write_clustered
from idivm.storage.delta.commits import commit_at, data_version, history
from idivm.storage.delta.commits import made as commits_made
from idivm.storage.delta.delta_rs import (
    active_files,
    create_table,
    merge_arrow,
    read_added,
    read_changes,
)
from idivm.storage.delta.delta_spark import USER_METADATA, merge_spark, spark_settings
from idivm.storage.delta.merge import (
    MatchedDelete,
    MatchedUpdate,
    MergeClause,
    NotMatchedBySourceDelete,
    NotMatchedBySourceUpdate,
    NotMatchedInsert,
    quoted,
)
from idivm.storage.delta.table import (
    BASE_ROW_GROUP,
    CHANGE_COLUMNS,
    CLUSTER_ENGINE,
    DELTA_RS,
    ENGINE_ENV,
    ENGINES,
    TABLE_CONFIGURATION,
    Engine,
    PathLike,
    _check_mode,
    engine,
    exists,
    features,
    needs_delta_spark,
    open_table,
    pin_of,
    pinned,
    remember,
    schema,
    version,
    version_key,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BASE_ROW_GROUP",
    "CHANGE_COLUMNS",
    "CLUSTER_ENGINE",
    "DELTA_RS",
    "ENGINES",
    "ENGINE_ENV",
    "TABLE_CONFIGURATION",
    "USER_METADATA",
    "Engine",
    "MatchedDelete",
    "MatchedUpdate",
    "MergeClause",
    "NotMatchedBySourceDelete",
    "NotMatchedBySourceUpdate",
    "NotMatchedInsert",
    "PathLike",
    "Rewrite",
    "active_files",
    "appended_rows",
    "commits_made",
    "create_table",
    "data_version",
    "engine",
    "exists",
    "features",
    "history",
    "commit_at",
    "read_added",
    "distinct_rows",
    "key_mask",
    "Patch",
    "Patching",
    "replaced",
    "merge_arrow",
    "merge_spark",
    "needs_delta_spark",
    "open_table",
    "pin_of",
    "pinned",
    "optimize",
    "ordered",
    "quoted",
    "read_arrow",
    "read_changes",
    "read_spark",
    "rewrite_clustered",
    "row_count",
    "scan_ordered",
    "schema",
    "spark_settings",
    "version",
    "write_arrow",
    "write_clustered",
    "write_spark",
]


def write_spark(df: "DataFrame", path: PathLike, *, mode: Literal["error", "overwrite", "append"] = "error",
                commit_metadata: Mapping[str, Any] | None = None, row_group_rows: int | None = None,
                file_bytes: int | None = None, engine: Engine = DELTA_RS, deletion_vectors: bool = False,
                cluster_by: Sequence[str] = (), order: Sequence[str] = ()) -> int:
    """Write a Spark DataFrame to the Delta table at ``path``; return the new version.

    ``mode="error"`` creates the table (failing if one exists);
    ``mode="overwrite"`` replaces its contents (and schema) in one commit, or
    creates it; ``mode="append"`` adds the rows to the existing table (by delta-rs: collected
    into the driver, for run-sized rows, in a commit based on the version the table is pinned at
    if it is).  Spark writes Parquet into a staging directory next to the
    table (``<parent>/.<name>.staging-<id>``); its files are then streamed as
    Arrow batches into delta-rs, so the data never passes through the driver's
    memory as a whole; only the result of small inputs (at most
    :data:`~idivm.storage.delta.delta_rs.SMALL_INPUT_BYTES` read) is collected
    into the driver and written from there, without staging.  The staging
    directory is removed afterwards, also on failure.  Every column becomes nullable.  With a cluster master, the
    staging directory must be on storage that the executors and the driver share.
    ``row_group_rows`` caps the rows of a Parquet row group (see :func:`merge_arrow`);
    ``file_bytes`` cuts the rows, in the DataFrame's order, into files of about that much
    Arrow memory (default: delta-rs's files, about 100 MB): a DataFrame ordered by a key then
    fills files of narrow key ranges, the layout :func:`rewrite_clustered` maintains.

    With a delta-spark ``engine`` (or onto a table with deletion vectors) the executors write
    the table with ``format("delta")`` instead, in the DataFrame's partitions, and nothing
    passes through the driver; ``deletion_vectors`` then gives a table it creates deletion
    vectors when the engine has them (views and caches; ``row_group_rows`` and ``file_bytes``
    do not apply); ``cluster_by`` creates or replaces the table with Delta's liquid
    clustering by those columns (delta-spark engines only; :mod:`idivm.storage.layout`).
    ``order``: top-level columns to write the rows ordered by (NULLs first), by Spark, or, for
    a small result written by delta-rs, in the driver's Arrow table (no Spark sort).
    """
    _check_mode(mode, ("error", "overwrite", "append"))
    target = Path(path)
    existing = exists(target)
    if mode == "append" and not existing:
        raise CatalogError(f"no Delta table at {target} to append to")
    if mode == "error" and existing:
        raise CatalogError(f"a Delta table already exists at {target}")
    df = _without_void_columns(df)
    if engine.spark or (existing and needs_delta_spark(target)):
        if order:
            from idivm.storage.spark import by_name

            df = df.orderBy(*by_name(order))
        delta_spark.write(df, target, mode, commit_metadata=commit_metadata, create=not existing,
                          deletion_vectors=deletion_vectors and engine.deletion_vectors,
                          cluster_by=cluster_by if engine.spark else ())
    elif mode == "append":
        from idivm.storage.spark import to_arrow

        return delta_rs.write_arrow(target, to_arrow(df), mode="append", commit_metadata=commit_metadata)
    else:
        delta_rs.write_staged(df, target, mode, commit_metadata=commit_metadata, row_group_rows=row_group_rows,
                              file_bytes=file_bytes, order=order)
    return version(target)


def _without_void_columns(df: "DataFrame") -> "DataFrame":
    """Cast NULL-typed columns (e.g. ``lit(None)``), and columns with NULL-typed items or fields
    (an array of NULLs), to string in their place: Parquet cannot hold them (nor Spark's Arrow
    writer an array of them)."""
    from pyspark.sql import types as ST

    from idivm.storage.schema import rebuilt_spark_type

    cast = {f.name: rebuilt_spark_type(f.dataType, lambda t: ST.StringType() if isinstance(t, ST.NullType) else t)
            for f in df.schema.fields}
    cast = {n: t for n, t in cast.items() if t != df.schema[n].dataType}
    if not cast:
        return df
    return df.withColumns({n: df[quoted(n)].cast(t) for n, t in cast.items()})


def read_spark(spark: "SparkSession", path: PathLike, version: int | None = None, *,
               holding: tuple[str, Sequence[Any]] | None = None, engine: Engine = DELTA_RS) -> "DataFrame":
    """A Spark DataFrame over one version of a table (default: the latest).

    With the ``delta-rs`` engine, reads exactly that version's active Parquet files with the
    Spark schema converted from the table's Arrow schema (no Spark job); an empty version
    gives an empty DataFrame with that schema.  ``holding=(column, values)`` reads only the
    files whose statistics admit a row with ``column`` among ``values`` (NULL included): a
    superset of those rows, which the caller still filters.

    With a delta-spark engine, and for tables that need a Delta-aware reader (deletion vectors,
    partitions, column mapping), delta-spark reads the version (``format("delta")`` with
    ``versionAsOf``); ``holding`` then filters the rows, which Delta's data skipping turns into
    a read of the files whose statistics admit them.
    """
    dt = open_table(path, version)
    if engine.spark or needs_delta_spark(path, dt):
        return delta_spark.read(spark, path, version, holding)
    return delta_rs.read_files(spark, dt, holding)


def read_arrow(path: PathLike, version: int | None = None, *, columns: Sequence[str] | None = None,
               holding: tuple[str, Sequence[Any]] | None = None) -> pa.Table:
    """The rows of a table version as a pyarrow Table (with the table's schema), read in the
    driver by delta-rs, or by delta-spark in the active session for a table that needs it.
    ``holding=(column, values)``: a superset of the rows with ``column`` among ``values``
    (NULL included), as :func:`read_spark`'s.  For small tables."""
    dt = open_table(path, version)
    if needs_delta_spark(path, dt):
        return delta_spark.read_arrow(dt, path, version, columns, holding)
    return delta_rs.read_arrow(path, version, columns=columns, holding=holding)


def write_arrow(path: PathLike, data: pa.Table | pa.RecordBatchReader, *,
                mode: Literal["error", "append", "overwrite"] = "append",
                commit_metadata: Mapping[str, Any] | None = None) -> int:
    """Write Arrow data from the driver to a table (creating it with the change data feed on
    if needed) in one commit; ``overwrite`` may also replace the schema.  An existing table
    that needs delta-spark is written by delta-spark in the active session and keeps its
    features; otherwise delta-rs writes.  Returns the new version."""
    _check_mode(mode, ("error", "append", "overwrite"))
    if mode != "error" and exists(path) and needs_delta_spark(path):
        delta_spark.write_arrow(path, data, mode, commit_metadata=commit_metadata)
        return version(path)
    return delta_rs.write_arrow(path, data, mode=mode, commit_metadata=commit_metadata)


def scan_ordered(path: PathLike, version: int | None, column: str,
                 columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of a table version file by file, the files in the order of their lower bound of
    ``column`` (files without one first): a table of :func:`rewrite_clustered`'s layout in the
    order of its key."""
    dt = open_table(path, version)
    if needs_delta_spark(path, dt):  # read by delta-spark, in the order of the column
        yield from delta_spark.scan_ordered(dt, path, version, column, columns)
    else:
        yield from delta_rs.scan_ordered(dt, path, column, columns)


def row_count(path: PathLike, version: int | None = None) -> int:
    """Rows in a table version: from its log (the add actions' statistics less the rows of
    deletion vectors) when every file has statistics, otherwise by counting rows of the files
    (by delta-spark, in the active session, for a table delta-rs cannot scan)."""
    key = version_key(path, version)
    if key in _COUNTED:
        return _COUNTED[key]
    dt = open_table(path, version)
    if needs_delta_spark(path, dt):
        rows = delta_rs.counted_rows(dt)
        rows = delta_spark.row_count(path, version) if rows is None else rows
    else:
        rows = delta_rs.row_count(dt)
    if key is not None:
        remember(_COUNTED, key, rows, 256)
    return rows


#: the rows of table versions counted by this process (:func:`version_key`: a version's rows
#: never change)
_COUNTED: dict[tuple, int] = {}


def appended_rows(path: PathLike, version: int, new: int, rows: int) -> None:
    """Version ``new`` of the table at ``path`` is ``version`` plus an append of ``rows`` rows
    (this process's commit): its row count, for :func:`row_count`, without opening it."""
    key = version_key(path, new)
    if key is not None:
        remember(_COUNTED, key, row_count(path, version) + rows, 256)


def optimize(spark: "SparkSession", path: PathLike, order: Sequence[str] = (), *, target_file_bytes: int,
             row_group_rows: int | None = None, commit_metadata: Mapping[str, Any] | None = None,
             engine: Engine = DELTA_RS) -> int:
    """Compact the table at ``path`` in one ``OPTIMIZE`` commit (no data change, nothing in the
    change data feed) carrying ``commit_metadata``; the new version.  With ``order`` the
    whole table is rewritten Z-ordered by those columns (one column: sorted by it; a table
    with liquid clustering is clustered by its clustering columns instead), else its
    small files and its files with deleted rows are, into files of about
    ``target_file_bytes``; the rewritten files have no deletion vectors.  A delta-spark
    ``engine`` (or a table with deletion vectors) runs delta-spark's ``OPTIMIZE``, else
    delta-rs's (with ``row_group_rows``)."""
    if engine.spark or needs_delta_spark(path):
        delta_spark.optimize(spark, path, order, target_file_bytes=target_file_bytes,
                             commit_metadata=commit_metadata)
    else:
        delta_rs.optimize(path, order, target_file_bytes=target_file_bytes, row_group_rows=row_group_rows,
                          commit_metadata=commit_metadata)
    return version(path)
