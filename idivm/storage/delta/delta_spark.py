"""The delta-spark paths: tables that Spark's executors write with ``format("delta")``, MERGE
into and read at pinned versions (``versionAsOf``), and delta-spark's ``OPTIMIZE``.  These
are the tables of a delta-spark engine and every table that needs delta-spark
(:func:`~idivm.storage.delta.table.needs_delta_spark`); they need the Delta jars in the session.

A delta-spark command takes commit metadata from a setting of the session
(:func:`spark_settings`), so one such command runs at a time.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from idivm.errors import UnsupportedError
from idivm.storage import schema as schemas
from idivm.storage.delta.commits import _commit_properties, _user_metadata, count
from idivm.storage.delta.merge import MergeClause, _clause_calls, quoted
from idivm.storage.delta.table import (
    TABLE_CONFIGURATION,
    PathLike,
    _sorted_values,
    committing,
    open_table,
    overtaken,
    pin_of,
    repin,
    version,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession


def write(df: "DataFrame", target: Path, mode: Literal["error", "append", "overwrite"], *,
          commit_metadata: Mapping[str, Any] | None, create: bool, deletion_vectors: bool,
          cluster_by: Sequence[str] = ()) -> None:
    """Write a Spark DataFrame to the table at ``target`` by the executors, in the DataFrame's
    partitions; a table it creates (``create``) gets the change data feed, and deletion
    vectors when ``deletion_vectors`` (see :func:`idivm.storage.delta.write_spark`).
    ``cluster_by`` (``error`` and ``overwrite`` only): the table is created, or replaced, with
    Delta's liquid clustering by those columns (:func:`write_clustered_by`)."""
    check_writable_names(df.schema)
    if mapped_names(df.schema):
        if create:  # created empty with column mapping, then written (see :func:`create_mapped`)
            create_mapped(df, target, deletion_vectors=deletion_vectors, cluster_by=cluster_by)
            create, cluster_by, mode = False, (), "append" if mode == "error" else mode
        else:
            map_columns(df.sparkSession, target)
    if cluster_by:
        write_clustered_by(df, target, mode, commit_metadata=commit_metadata, deletion_vectors=deletion_vectors,
                           cluster_by=cluster_by)
        return
    writer = df.write.format("delta").mode("errorifexists" if mode == "error" else mode)
    if commit_metadata:
        writer = writer.option("userMetadata", _user_metadata(commit_metadata))
    if mode == "overwrite":
        writer = writer.option("overwriteSchema", "true")
    if create:
        for key, value in _created_with(deletion_vectors).items():
            writer = writer.option(key, value)
    target.parent.mkdir(parents=True, exist_ok=True)
    writer.save(str(target.absolute()))
    count()


def _created_with(deletion_vectors: bool) -> dict[str, str]:
    """The properties of a table delta-spark creates: the change data feed, and deletion vectors
    when ``deletion_vectors``."""
    return {**TABLE_CONFIGURATION, **({"delta.enableDeletionVectors": "true"} if deletion_vectors else {})}


#: characters Delta refuses in column names unless the table maps its columns by name
_UNMAPPED_REFUSED = frozenset(" ,;{}()\n\t=")


def check_writable_names(schema: Any) -> None:
    """Refuse, with one line, a column name (at any depth of the Spark ``schema``) that
    delta-spark cannot write: one holding a backquote, which its
    MERGE into a table with a change data feed (every table here) takes for the end of a quoted
    name."""
    names = [n for n in _field_names(schema) if "`" in n]
    if names:
        raise UnsupportedError(f"column {names[0]!r} holds a backquote, which delta-spark "
                               "cannot MERGE into a table with a change data feed: name it without one (AS ...) "
                               "or use the delta-rs storage engine")


def _field_names(t: Any) -> Iterator[str]:
    """The field names of a Spark type, nested ones too."""
    from pyspark.sql.types import StructType

    from idivm.storage.spark import nested_types

    for s in nested_types(t):
        if isinstance(s, StructType):
            yield from (f.name for f in s.fields)


def mapped_names(schema: Any) -> list[str]:
    """The field names of a Spark schema (nested ones too) that Delta stores only in a table with
    column mapping by name (``delta.columnMapping.mode = name``): those with a space or one of
    ``,;{}()=``, a tab or a newline."""
    return [n for n in _field_names(schema) if _UNMAPPED_REFUSED & set(n)]


def create_mapped(df: "DataFrame", target: Path, *, deletion_vectors: bool, cluster_by: Sequence[str]) -> None:
    """Create the table at ``target`` empty, with ``df``'s schema and column mapping by name (so
    its column names may hold any character), the change data feed and, when
    ``deletion_vectors``, deletion vectors; clustered by ``cluster_by``.  Delta refuses to add
    files in the commit that turns column mapping on in a table with a change data feed, so the
    rows are written by a second commit (the caller's append)."""
    spark = df.sparkSession
    properties = {**_created_with(deletion_vectors), "delta.columnMapping.mode": "name"}
    nullable = schemas.rebuilt_spark_type(df.schema, nullable=True)  # a table's schema holds no NOT NULL
    columns = spark._jsparkSession.parseDataType(nullable.json()).toDDL()
    statement = (f"CREATE TABLE delta.{quoted(str(target.absolute()))} ({columns}) USING delta "
                 + (f"CLUSTER BY ({', '.join(quoted(c) for c in cluster_by)}) " if cluster_by else "")
                 + f"TBLPROPERTIES ({', '.join(f'{_sql_string(k)} = {_sql_string(v)}' for k, v in properties.items())})")
    target.parent.mkdir(parents=True, exist_ok=True)
    spark.sql(statement).collect()
    count()


def map_columns(spark: "SparkSession", target: Path) -> None:
    """Turn on column mapping by name in the existing table at ``target`` (a commit of its
    metadata alone) unless it has it, before a write that brings a column name only such a table
    holds (see :func:`mapped_names`)."""
    if open_table(target).metadata().configuration.get("delta.columnMapping.mode", "none") != "none":
        return
    spark.sql(f"ALTER TABLE delta.{quoted(str(target.absolute()))} "
              "SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')").collect()
    count()


def write_clustered_by(df: "DataFrame", target: Path, mode: Literal["error", "overwrite"], *,
                       commit_metadata: Mapping[str, Any] | None, deletion_vectors: bool,
                       cluster_by: Sequence[str]) -> None:
    """Create (``error``) or replace (``overwrite``: ``CREATE OR REPLACE``, one commit that
    keeps the table's history and shows the old rows deleted and the new inserted in the change
    data feed) the table at ``target`` with the rows of ``df``, clustered by the columns
    ``cluster_by`` (Delta's liquid clustering: the table's ``clustering`` and
    ``domainMetadata`` writer features; ``OPTIMIZE`` then clusters its files incrementally),
    with the change data feed and, when ``deletion_vectors``, deletion vectors.

    Delta's path-based ``DataFrameWriter.save`` ignores ``clusterBy`` and its
    ``DataFrameWriterV2.clusterBy`` is refused as partitioning by expressions, so the table is
    written by ``CREATE [OR REPLACE] TABLE delta.`<path>` USING delta CLUSTER BY (...)
    TBLPROPERTIES (...) AS SELECT`` from a temporary view of ``df``; the path and the column
    names are quoted identifiers, the properties our own constants."""
    if mode not in ("error", "overwrite"):
        raise ValueError(f"a table clustered by columns is created or replaced, not written in mode {mode!r}")
    spark = df.sparkSession
    properties = _created_with(deletion_vectors)
    view = f"idivm_clustered_source_{uuid.uuid4().hex}"
    statement = (f"CREATE {'OR REPLACE ' if mode == 'overwrite' else ''}TABLE "
                 f"delta.{quoted(str(target.absolute()))} USING delta "
                 f"CLUSTER BY ({', '.join(quoted(c) for c in cluster_by)}) "
                 f"TBLPROPERTIES ({', '.join(f'{_sql_string(k)} = {_sql_string(v)}' for k, v in properties.items())}) "
                 f"AS SELECT * FROM {view}")
    target.parent.mkdir(parents=True, exist_ok=True)
    df.createOrReplaceTempView(view)
    try:
        with spark_settings(spark, {}, commit_metadata):
            spark.sql(statement).collect()
    finally:
        spark.catalog.dropTempView(view)
    count()


def _sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


#: writer features of tables delta-rs cannot commit to (liquid clustering)
_NOT_DELTA_RS_WRITABLE = frozenset({"clustering", "domainMetadata"})


def delta_rs_writes(dt: "DeltaTable") -> bool:
    """Whether delta-rs can commit to the table ``dt`` (it cannot to a clustered table)."""
    return not _NOT_DELTA_RS_WRITABLE & set(dt.protocol().writer_features or ())


def clustered(dt: "DeltaTable") -> bool:
    """Whether the table ``dt`` supports liquid clustering (its ``clustering`` writer feature):
    delta-spark's ``OPTIMIZE`` then clusters it and refuses ``ZORDER BY``."""
    return "clustering" in (dt.protocol().writer_features or ())


#: delta-spark's merge builder method for each of delta-rs's, and the keyword of its assignments
_SPARK_CLAUSES = {
    "when_matched_update_all": ("whenMatchedUpdateAll", None),
    "when_matched_update": ("whenMatchedUpdate", "set"),
    "when_matched_delete": ("whenMatchedDelete", None),
    "when_not_matched_insert_all": ("whenNotMatchedInsertAll", None),
    "when_not_matched_insert": ("whenNotMatchedInsert", "values"),
    "when_not_matched_by_source_delete": ("whenNotMatchedBySourceDelete", None),
    "when_not_matched_by_source_update": ("whenNotMatchedBySourceUpdate", "set"),
}

#: delta-spark's MERGE metrics, by the names :func:`~idivm.storage.delta.delta_rs.merge_arrow` gives them
_SPARK_MERGE_METRICS = {
    "numSourceRows": "num_source_rows", "numTargetRowsInserted": "num_target_rows_inserted",
    "numTargetRowsUpdated": "num_target_rows_updated", "numTargetRowsDeleted": "num_target_rows_deleted",
    "numTargetRowsCopied": "num_target_rows_copied", "numOutputRows": "num_output_rows",
    "numTargetFilesAdded": "num_target_files_added", "numTargetFilesRemoved": "num_target_files_removed",
    "numTargetDeletionVectorsAdded": "num_target_deletion_vectors_added",
    "numTargetDeletionVectorsRemoved": "num_target_deletion_vectors_removed",
}

#: the session's commit metadata is a setting of the session: one command at a time sets it
_SESSION_SETTINGS = threading.Lock()
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
#: Delta's idempotent writes: a write of an application's transaction version it has committed
#: already is skipped
TXN_APP = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
#: whether delta-spark skips a commit that adds and removes no file
SKIP_EMPTY_COMMITS = "spark.databricks.delta.skipRecordingEmptyCommits"


@contextmanager
def spark_settings(spark: "SparkSession", settings: Mapping[str, str],
                   commit_metadata: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Run a delta-spark command with session ``settings`` (and ``commit_metadata`` as the
    ``userMetadata`` of the commit it makes), restored afterwards; one command at a time."""
    settings = dict(settings)
    if commit_metadata:
        settings[USER_METADATA] = _user_metadata(commit_metadata)
    with _SESSION_SETTINGS:
        before = {k: spark.conf.get(k, None) for k in settings}
        for k, v in settings.items():
            spark.conf.set(k, v)
        try:
            yield
        finally:
            for k, v in before.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)


def merge_spark(path: PathLike, source: "DataFrame", predicate: str, clauses: Sequence[MergeClause], *,
                source_alias: str = "s", target_alias: str = "t",
                commit_metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """MERGE the Spark DataFrame ``source`` into the table at ``path`` through delta-spark, in
    one commit executed by Spark (nothing is collected); the clauses, predicates and metrics
    are :func:`~idivm.storage.delta.delta_rs.merge_arrow`'s (predicates in Spark SQL), and so
    is the commit of ``commit_metadata`` when the MERGE changes nothing.  A table with deletion vectors marks
    the rows it replaces or deletes instead of rewriting their files."""
    from delta.tables import DeltaTable

    if not clauses:
        raise ValueError("merge_spark needs at least one clause")
    check_writable_names(source.schema)
    spark = source.sparkSession
    before = version(path)
    settings, pin = {}, pin_of(path)
    if pin is not None:  # committed only if no other run of the table has since it read version ``pin``
        if before != pin:
            raise overtaken(path, pin)
        # Delta's idempotent writes: of two runs that read the same version, the second is skipped
        settings = {TXN_APP: f"idivm:{Path(path).resolve()}", TXN_VERSION: str(pin + 1)}
        commit_metadata = {**(commit_metadata or {}), "idivm.run": uuid.uuid4().hex}
    merger = DeltaTable.forPath(spark, str(Path(path).absolute())).alias(target_alias) \
        .merge(source.alias(source_alias), predicate)
    for method, argument, p in _clause_calls(clauses):
        name, keyword = _SPARK_CLAUSES[method]
        merger = getattr(merger, name)(condition=p, **({keyword: argument} if argument is not None else {}))
    try:
        with spark_settings(spark, settings, commit_metadata):
            merger.execute()
    except Exception as e:
        if pin is not None and "Concurrent" in type(e).__name__ + str(e)[:500]:
            raise overtaken(path, pin) from e
        raise
    after = version(path)
    metrics: dict[str, Any] = {}
    if after > before:
        mine = [c for c in open_table(path, after).history(after - before)
                if pin is None or c.get("userMetadata") and commit_metadata["idivm.run"] in c["userMetadata"]]
        if not mine:  # skipped: another run committed this change first
            raise overtaken(path, pin)
        metrics = {ours: int(v) for theirs, ours in _SPARK_MERGE_METRICS.items()
                   if (v := (mine[0].get("operationMetrics") or {}).get(theirs)) is not None}
    elif commit_metadata:
        # nothing changed and nothing was committed: an empty commit carries the metadata (if the
        # table is pinned, only at the version pinned)
        dt = open_table(path, to_write=True)
        if delta_rs_writes(dt):
            with committing(path):
                dt.create_write_transaction([], mode="append", schema=dt.schema(),
                                            commit_properties=_commit_properties(commit_metadata, path))
        else:  # an empty append by delta-spark, recorded although it adds no file
            empty = spark.read.format("delta").load(str(Path(path).absolute())).limit(0)
            with spark_settings(spark, {**settings, SKIP_EMPTY_COMMITS: "false"}, commit_metadata):
                empty.write.format("delta").mode("append").save(str(Path(path).absolute()))
            if pin is not None and version(path) == before:  # skipped: another run committed first
                raise overtaken(path, pin)
        after = version(path)
    metrics["version"] = after
    count(after - before)
    repin(path, after)
    return metrics


def read(spark: "SparkSession", path: PathLike, version: int | None = None,
         holding: tuple[str, Sequence[Any]] | None = None) -> "DataFrame":
    """A Spark DataFrame over one version of the table at ``path`` (default: the latest), read by
    delta-spark; ``holding=(column, values)`` filters the rows to those with ``column`` among
    ``values`` (NULL included), which Delta's data skipping turns into a read of the files
    whose statistics admit them."""
    from pyspark.sql import functions as F

    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    df = reader.load(str(Path(path).absolute()))
    if holding is not None:
        column, named = holding
        values, null = _sorted_values(named)
        col = F.col(quoted(column))
        df = df.filter((col.isin(values) if values else F.lit(False)) | (col.isNull() if null else F.lit(False)))
    return df


def read_arrow(dt: "DeltaTable", path: PathLike, version: int | None = None,
               columns: Sequence[str] | None = None,
               holding: tuple[str, Sequence[Any]] | None = None, order: str | None = None) -> pa.Table:
    """The rows of ``dt`` (the table at ``path``, at ``version``) read by delta-spark in the
    active session into the driver, with the table's Arrow schema: ``columns`` only, with
    ``holding`` the rows :func:`read` keeps, with ``order`` sorted by that column."""
    from pyspark.sql import SparkSession, functions as F

    from idivm.storage.spark import arrow_rows

    df = read(SparkSession.active(), path, version, holding)
    if order is not None:
        df = df.orderBy(F.col(quoted(order)))
    if columns is not None:
        df = df.select(*[F.col(quoted(c)) for c in columns])
    schema = schemas.as_arrow_schema(dt.schema().to_arrow())
    target = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    return schemas.conform(arrow_rows(df), target)


def write_arrow(path: PathLike, data: pa.Table | pa.RecordBatchReader, mode: Literal["append", "overwrite"], *,
                commit_metadata: Mapping[str, Any] | None) -> None:
    """Append or overwrite the existing table at ``path`` with Arrow data from the driver,
    written by delta-spark in the active session (the table keeps its features)."""
    from pyspark.sql import SparkSession

    table = data.read_all() if isinstance(data, pa.RecordBatchReader) else data
    if mode == "append":
        table = schemas.conform(table, schemas.as_arrow_schema(open_table(path).schema().to_arrow()))
    df = SparkSession.active().createDataFrame(table, schemas.spark_schema(table.schema))
    write(df, Path(path), mode, commit_metadata=commit_metadata, create=False, deletion_vectors=False)


def scan_ordered(dt: "DeltaTable", path: PathLike, version: int | None, column: str,
                 columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of ``dt`` (the table at ``path``, at ``version``) read by delta-spark in the active
    session, in the order of ``column``."""
    yield from read_arrow(dt, path, version, columns, order=column).to_batches()


def row_count(path: PathLike, version: int | None = None) -> int:
    """The rows of a table version, counted by delta-spark in the active session (the files'
    row counts include the rows deleted by vector)."""
    from pyspark.sql import SparkSession

    return read(SparkSession.active(), path, version).count()


def optimize(spark: "SparkSession", path: PathLike, order: Sequence[str], *, target_file_bytes: int,
             commit_metadata: Mapping[str, Any] | None) -> None:
    """delta-spark's ``OPTIMIZE`` of the table at ``path``: Z-ordered by ``order``, else a
    compaction of its small files and its files with deleted rows.  A table with liquid
    clustering is clustered by its clustering columns instead, whatever ``order`` (a plain ``OPTIMIZE``, which
    Delta runs by ZCube: files of full ZCubes stay; below Delta's ZCube size, about 100 GB, the
    whole table is rewritten, its deletion vectors purged, as by Z-ordering)."""
    table = "delta." + quoted(str(Path(path).absolute()))
    if order and clustered(open_table(path)):
        order = ()
    settings = {"spark.databricks.delta.optimize.maxFileSize": str(target_file_bytes),
                # a view's ID columns come last and may have no statistics: Z-ordering by
                # them still clusters the files
                "spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled": "false"}
    zorder = f" ZORDER BY ({', '.join(quoted(c) for c in order)})" if order else ""
    before = version(path)
    with spark_settings(spark, settings, commit_metadata):
        spark.sql(f"OPTIMIZE {table}{zorder}").collect()
    count(version(path) - before)
