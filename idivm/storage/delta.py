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

Reading into Spark goes by the list of a version's active Parquet files and
the table's own schema (``DeltaTable(path, version=v).file_uris()`` →
``spark.read.schema(...).parquet(*uris)``), so Spark needs no Delta jars.
Writing from Spark goes through a Parquet staging directory whose files are
streamed as Arrow batches into delta-rs (:func:`write_spark`); nothing is
collected into the driver.

Commit metadata (``commit_metadata=``) is a flat ``dict`` of JSON values that
lands in the commit's ``commitInfo`` (delta-rs: as keys of it; delta-spark: as the JSON object
of its ``userMetadata``) and comes back from :func:`history` as keys of the commit;
keys should be prefixed (``"idivm.watermark"``) so they do not collide with
Delta's own commitInfo fields, and keys that do collide are rejected.

Paths are local directories (``str`` or ``Path``).
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from idivm.errors import CatalogError, DataError
from idivm.storage import schema as schemas

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

TABLE_CONFIGURATION = {"delta.enableChangeDataFeed": "true"}

#: the rows of a Parquet row group of a base table (at create and at every ingest): narrow
#: enough that a read restricted to a few values of a column the rows are ordered or grouped
#: by (a key, or ``reviews.business_id`` when reviews come business by business) skips most
#: row groups by their statistics, wide enough that a full scan does not slow down
BASE_ROW_GROUP = 16_384

#: Columns that :func:`read_changes` adds to the table's own columns.
CHANGE_COLUMNS = pa.schema([
    pa.field("_change_type", pa.string()),       # insert | update_preimage | update_postimage | delete
    pa.field("_commit_version", pa.int64()),
    pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC")),
])

_RESERVED_COMMIT_KEYS = frozenset({
    "timestamp", "operation", "operationParameters", "operationMetrics", "readVersion", "version",
    "isolationLevel", "isBlindAppend", "engineInfo", "clientVersion", "userMetadata", "userId",
    "userName", "job", "notebook", "clusterId", "txnId", "inCommitTimestamp",
})

PathLike = str | os.PathLike

#: the storage engines of the tables Spark computes (see the module doc)
ENGINES = ("delta-rs", "delta-spark", "delta-spark-dv")
#: the environment variable naming the engine when none is given
ENGINE_ENV = "IDIVM_STORAGE"


@dataclass(frozen=True, slots=True)
class Engine:
    """The storage engine of the tables Spark computes (one of :data:`ENGINES`)."""

    name: str = "delta-rs"

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise ValueError(f"unknown storage engine {self.name!r}: use one of {', '.join(ENGINES)}")

    @property
    def spark(self) -> bool:
        """Whether Spark writes (and reads) the tables, through delta-spark."""
        return self.name != "delta-rs"

    @property
    def deletion_vectors(self) -> bool:
        """Whether views and caches get deletion vectors (merge-on-read)."""
        return self.name == "delta-spark-dv"


DELTA_RS = Engine()


def engine(name: str | None = None) -> Engine:
    """The engine named (default: ``$IDIVM_STORAGE``, else ``delta-rs``)."""
    return Engine(name or os.environ.get(ENGINE_ENV) or DELTA_RS.name)


# --- opening -------------------------------------------------------------------------------------

def exists(path: PathLike) -> bool:
    """Whether ``path`` holds a Delta table."""
    from deltalake import DeltaTable

    return Path(path).is_dir() and DeltaTable.is_deltatable(str(path))


#: tables opened at a given version, which a maintenance run reads many times (opening replays
#: the log: about 15 ms for a table of a few hundred commits); by path, version and the
#: identity of that version's commit file, so a table deleted and created again is not mistaken
#: for the old one.  Only reads go through them.
_OPENED: dict[tuple, "DeltaTable"] = {}
_OPENED_MAX = 64


def open_table(path: PathLike, version: int | None = None) -> "DeltaTable":
    """The ``DeltaTable`` at ``path`` (at ``version``, default latest).  A table opened at a
    given version may be one opened before: callers only read it.

    Raises :class:`CatalogError` if there is no table there or no such version.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    key = None
    if version is not None:
        try:
            commit = os.stat(Path(path, "_delta_log", f"{version:020d}.json"))
            key = (os.path.abspath(path), version, commit.st_ino, commit.st_mtime_ns, commit.st_size)
        except OSError:
            key = None
        if key in _OPENED:
            return _OPENED[key]
    if not exists(path):
        raise CatalogError(f"no Delta table at {path}")
    try:
        dt = DeltaTable(str(path), version=version)
        if key is not None:
            if len(_OPENED) >= _OPENED_MAX:
                _OPENED.pop(next(iter(_OPENED)))
            _OPENED[key] = dt
        return dt
    except TableNotFoundError as e:
        raise CatalogError(f"no Delta table at {path}") from e
    except DeltaError as e:
        if version is not None:
            latest = DeltaTable(str(path)).version()
            raise CatalogError(f"{path} has no version {version} (versions 0..{latest}, "
                               "unless older ones were vacuumed)") from e
        raise


# --- writing -------------------------------------------------------------------------------------

def create_table(path: PathLike, data: pa.Table | pa.RecordBatchReader, *,
                 schema: pa.Schema | None = None,
                 commit_metadata: Mapping[str, Any] | None = None, row_group_rows: int | None = None) -> int:
    """Create a Delta table at ``path`` holding ``data``; return its version (0).

    ``data`` is a pyarrow Table or RecordBatchReader (streamed, never fully
    materialized).  It is conformed to ``schema`` if given, else to
    :func:`idivm.storage.schema.delta_schema` of its own schema.  The table gets
    ``delta.enableChangeDataFeed=true``.  Fails if a table exists at ``path``.
    ``row_group_rows`` caps the rows of a Parquet row group (see :func:`merge_arrow`).
    """
    from deltalake import write_deltalake

    if exists(path):
        raise CatalogError(f"a Delta table already exists at {path}")
    target = schemas.delta_schema(schema if schema is not None else data.schema)
    write_deltalake(str(path), schemas.conform(data, target), mode="error",
                    configuration=TABLE_CONFIGURATION, writer_properties=_writer_properties(row_group_rows),
                    commit_properties=_commit_properties(commit_metadata))
    return version(path)


def write_arrow(path: PathLike, data: pa.Table | pa.RecordBatchReader, *,
                mode: Literal["error", "append", "overwrite"] = "append",
                commit_metadata: Mapping[str, Any] | None = None) -> int:
    """Write Arrow data to a table (creating it with the change data feed on if
    needed); ``overwrite`` may also replace the schema.  Returns the new version."""
    from deltalake import write_deltalake

    _check_mode(mode, ("error", "append", "overwrite"))
    if mode == "append" and exists(path):
        target = schemas.delta_schema(schemas.as_arrow_schema(open_table(path).schema().to_arrow()))
    else:
        target = schemas.delta_schema(data.schema)
    write_deltalake(str(path), schemas.conform(data, target), mode=mode,
                    configuration=TABLE_CONFIGURATION,
                    schema_mode="overwrite" if mode == "overwrite" else None,
                    commit_properties=_commit_properties(commit_metadata))
    return version(path)


def write_spark(df: "DataFrame", path: PathLike, *, mode: Literal["error", "overwrite"] = "error",
                commit_metadata: Mapping[str, Any] | None = None, row_group_rows: int | None = None,
                file_bytes: int | None = None, engine: Engine = DELTA_RS, deletion_vectors: bool = False) -> int:
    """Write a Spark DataFrame to the Delta table at ``path``; return the new version.

    ``mode="error"`` creates the table (failing if one exists);
    ``mode="overwrite"`` replaces its contents (and schema) in one commit, or
    creates it.  Spark writes Parquet into a staging directory next to the
    table (``<parent>/.<name>.staging-<id>``); its files are then streamed as
    Arrow batches into delta-rs, so the data never passes through the driver's
    memory as a whole.  The staging directory is removed afterwards, also on
    failure.  Every column becomes nullable.  With a cluster master, the
    staging directory must be on storage that the executors and the driver share.
    ``row_group_rows`` caps the rows of a Parquet row group (see :func:`merge_arrow`);
    ``file_bytes`` cuts the rows, in the DataFrame's order, into files of about that much
    Arrow memory (default: delta-rs's files, about 100 MB): a DataFrame ordered by a key then
    fills files of narrow key ranges, the layout :func:`rewrite_clustered` maintains.

    With a delta-spark ``engine`` (or onto a table with deletion vectors) the executors write
    the table with ``format("delta")`` instead, in the DataFrame's partitions, and nothing
    passes through the driver; ``deletion_vectors`` then gives a table it creates deletion
    vectors when the engine has them (views and caches; ``row_group_rows`` and ``file_bytes``
    do not apply).
    """
    import pyarrow.dataset as ds
    from deltalake import write_deltalake

    _check_mode(mode, ("error", "overwrite"))
    target = Path(path)
    existing = exists(target)
    if mode == "error" and existing:
        raise CatalogError(f"a Delta table already exists at {target}")
    df = _without_void_columns(df)
    if engine.spark or (existing and needs_delta_spark(target)):
        writer = df.write.format("delta").mode("overwrite" if mode == "overwrite" else "errorifexists")
        if commit_metadata:
            writer = writer.option("userMetadata", _user_metadata(commit_metadata))
        if mode == "overwrite":
            writer = writer.option("overwriteSchema", "true")
        if not existing:
            for key, value in TABLE_CONFIGURATION.items():
                writer = writer.option(key, value)
            if deletion_vectors and engine.deletion_vectors:
                writer = writer.option("delta.enableDeletionVectors", "true")
        target.parent.mkdir(parents=True, exist_ok=True)
        writer.save(str(target.absolute()))
        return version(target)
    arrow = schemas.delta_schema(schemas.arrow_schema(df.schema, nullable=True))
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:12]}"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        df.write.mode("error").parquet(str(staging))
        files = sorted(str(p) for p in staging.glob("*.parquet"))
        if files:
            reader = schemas.conform(ds.dataset(files, format="parquet").scanner().to_reader(), arrow)
        else:
            reader = pa.RecordBatchReader.from_batches(arrow, iter(()))
        if file_bytes is not None:
            write_clustered(target, reader, mode, file_bytes, row_group_rows=row_group_rows,
                            commit_metadata=commit_metadata)
        else:
            write_deltalake(str(target), reader, mode=mode, configuration=TABLE_CONFIGURATION,
                            schema_mode="overwrite" if mode == "overwrite" else None,
                            writer_properties=_writer_properties(row_group_rows),
                            commit_properties=_commit_properties(commit_metadata))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return version(target)


def _without_void_columns(df: "DataFrame") -> "DataFrame":
    """Cast top-level NULL-typed columns (e.g. ``lit(None)``) to string: Parquet cannot hold them."""
    from pyspark.sql.types import NullType

    void = [f.name for f in df.schema.fields if isinstance(f.dataType, NullType)]
    if not void:
        return df
    return df.withColumns({name: df[name].cast("string") for name in void})


@dataclass(frozen=True, slots=True)
class MatchedUpdate:
    """``WHEN MATCHED [AND predicate] THEN UPDATE SET col = expr, ...``; ``set=None`` updates all columns."""

    set: Mapping[str, str] | None = None
    predicate: str | None = None


@dataclass(frozen=True, slots=True)
class MatchedDelete:
    """``WHEN MATCHED [AND predicate] THEN DELETE``."""

    predicate: str | None = None


@dataclass(frozen=True, slots=True)
class NotMatchedInsert:
    """``WHEN NOT MATCHED [AND predicate] THEN INSERT``; ``values=None`` inserts all columns."""

    values: Mapping[str, str] | None = None
    predicate: str | None = None


@dataclass(frozen=True, slots=True)
class NotMatchedBySourceDelete:
    """``WHEN NOT MATCHED BY SOURCE [AND predicate] THEN DELETE``."""

    predicate: str | None = None


@dataclass(frozen=True, slots=True)
class NotMatchedBySourceUpdate:
    """``WHEN NOT MATCHED BY SOURCE [AND predicate] THEN UPDATE SET col = expr, ...``."""

    set: Mapping[str, str] = field(default_factory=dict)
    predicate: str | None = None


MergeClause = MatchedUpdate | MatchedDelete | NotMatchedInsert | NotMatchedBySourceDelete | NotMatchedBySourceUpdate


def quoted(name: str, alias: str | None = None) -> str:
    """Column ``name`` (of table ``alias``) in a MERGE predicate or assignment, for delta-rs and
    Spark SQL alike: backquoted, so case, reserved words and odd characters are kept."""
    name = "`" + name.replace("`", "``") + "`"
    return f"{alias}.{name}" if alias else name


def _clause_calls(clauses: Sequence[MergeClause]) -> Iterator[tuple[str, dict | None, str | None]]:
    """(delta-rs's merge builder method, its assignments or None, the predicate) of each clause."""
    for clause in clauses:
        match clause:
            case MatchedUpdate(set=None, predicate=p):
                yield "when_matched_update_all", None, p
            case MatchedUpdate(set=updates, predicate=p):
                yield "when_matched_update", dict(updates), p
            case MatchedDelete(predicate=p):
                yield "when_matched_delete", None, p
            case NotMatchedInsert(values=None, predicate=p):
                yield "when_not_matched_insert_all", None, p
            case NotMatchedInsert(values=values, predicate=p):
                yield "when_not_matched_insert", dict(values), p
            case NotMatchedBySourceDelete(predicate=p):
                yield "when_not_matched_by_source_delete", None, p
            case NotMatchedBySourceUpdate(set=updates, predicate=p):
                yield "when_not_matched_by_source_update", dict(updates), p
            case _:
                raise TypeError(f"not a merge clause: {clause!r}")


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


def merge_arrow(path: PathLike, source: pa.Table, predicate: str, clauses: Sequence[MergeClause], *,
                source_alias: str = "s", target_alias: str = "t",
                commit_metadata: Mapping[str, Any] | None = None,
                streamed_exec: bool = False, row_group_rows: int | None = None) -> dict[str, Any]:
    """MERGE ``source`` into the table at ``path`` in one commit; return delta-rs's metrics.

    ``predicate`` and the clause predicates/expressions are delta-rs SQL over
    ``source_alias``/``target_alias`` columns.  ``clauses`` apply in order
    (the first clause whose predicate holds wins), e.g.::

        merge_arrow(p, batch, "t.id = s.id",
                    [MatchedDelete("s._op = 'delete'"), MatchedUpdate(), NotMatchedInsert("s._op <> 'delete'")])

    Source rows are conformed to the table's schema by column name (extra
    source columns stay usable in predicates).  Metrics include
    ``num_target_rows_inserted/updated/deleted/copied`` and
    ``num_target_files_added/removed``, plus ``version``: the table version
    after the merge.  A merge that changes no file makes no commit, unless
    ``commit_metadata`` is given: then an empty commit carries it, so the
    metadata always lands.  The source is
    held in memory (``streamed_exec=False``) so delta-rs can prune target files
    by the source's key ranges; pass ``streamed_exec=True`` for very large sources.

    ``row_group_rows`` caps the rows of each Parquet row group the merge writes (default:
    delta-rs's, about a million): a table whose rows are ordered by a key and read by a few
    of its values then has row groups narrow enough for the reader to skip the others by
    their statistics.
    """
    if not clauses:
        raise ValueError("merge_arrow needs at least one clause")
    dt = open_table(path)
    merger = dt.merge(_conform_source(dt, source), predicate, source_alias=source_alias,
                      target_alias=target_alias, streamed_exec=streamed_exec,
                      writer_properties=_writer_properties(row_group_rows),
                      commit_properties=_commit_properties(commit_metadata))
    for method, argument, p in _clause_calls(clauses):
        merger = getattr(merger, method)(*([argument] if argument is not None else []), predicate=p)
    metrics = dict(merger.execute())
    if commit_metadata and not (metrics.get("num_target_files_added") or metrics.get("num_target_files_removed")):
        # delta-rs does not commit a merge that changes no file; commit an empty append so the
        # metadata (e.g. a watermark) still lands.
        from deltalake import write_deltalake

        empty = schemas.as_arrow_schema(dt.schema().to_arrow()).empty_table()
        write_deltalake(dt, empty, mode="append", commit_properties=_commit_properties(commit_metadata))
    metrics["version"] = dt.version()
    return metrics


#: delta-spark's MERGE metrics, by the names :func:`merge_arrow` gives them
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
    are :func:`merge_arrow`'s (predicates in Spark SQL), and so is the commit of
    ``commit_metadata`` when the MERGE changes nothing.  A table with deletion vectors marks
    the rows it replaces or deletes instead of rewriting their files."""
    from delta.tables import DeltaTable

    if not clauses:
        raise ValueError("merge_spark needs at least one clause")
    spark = source.sparkSession
    before = version(path)
    merger = DeltaTable.forPath(spark, str(Path(path).absolute())).alias(target_alias) \
        .merge(source.alias(source_alias), predicate)
    for method, argument, p in _clause_calls(clauses):
        name, keyword = _SPARK_CLAUSES[method]
        merger = getattr(merger, name)(condition=p, **({keyword: argument} if argument is not None else {}))
    with spark_settings(spark, {}, commit_metadata):
        merger.execute()
    after = version(path)
    metrics: dict[str, Any] = {}
    if after > before:
        last = open_table(path, after).history(1)[0]
        metrics = {ours: int(v) for theirs, ours in _SPARK_MERGE_METRICS.items()
                   if (v := (last.get("operationMetrics") or {}).get(theirs)) is not None}
    elif commit_metadata:
        # nothing changed and nothing was committed: an empty commit carries the metadata
        dt = open_table(path)
        dt.create_write_transaction([], mode="append", schema=dt.schema(),
                                    commit_properties=_commit_properties(commit_metadata))
        after = version(path)
    metrics["version"] = after
    return metrics


def _conform_source(dt: "DeltaTable", source: pa.Table) -> pa.Table:
    """Cast the source's table columns to the table's types; keep extra columns as they are."""
    table_schema = schemas.as_arrow_schema(dt.schema().to_arrow())
    columns, fields = [], []
    for f in source.schema:
        col = source.column(f.name)
        target = table_schema.field(f.name).type if f.name in table_schema.names else schemas.delta_schema(
            pa.schema([f])).field(0).type
        if col.type != target:
            try:
                col = col.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise DataError(f"merge source column '{f.name}' ({f.type}) does not fit the table's "
                                f"type {target}: {str(e).splitlines()[0]}") from e
        columns.append(col)
        fields.append(pa.field(f.name, target, True))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


@dataclass(frozen=True, slots=True)
class _File:
    """An active file of a table and the statistics of one column (None: not recorded)."""

    path: str
    size: int
    rows: int | None
    low: Any
    high: Any
    nulls: int | None

    def may_hold(self, values: Sequence[Any], null: bool) -> bool:
        """Whether the file may hold a row whose column is one of the sorted non-NULL
        ``values``, or NULL when ``null``."""
        if null and (self.nulls is None or self.nulls > 0):
            return True
        if self.low is None or self.high is None:
            # no bounds: the column is NULL in every row, or the file has no statistics
            return bool(values) and not (self.nulls is not None and self.nulls == self.rows)
        try:
            i = bisect.bisect_left(values, self.low)
            return i < len(values) and values[i] <= self.high
        except TypeError:  # values of a type the statistics do not compare with
            return True


def _files(dt: "DeltaTable", column: str) -> list[_File]:
    """The active files of ``dt`` with the statistics of ``column``."""
    actions = pa.table(dt.get_add_actions(flatten=True))

    def col(name: str) -> list:
        return actions.column(name).to_pylist() if name in actions.column_names else [None] * actions.num_rows

    return [_File(*f) for f in zip(col("path"), col("size_bytes"), col("num_records"), col(f"min.{column}"),
                                   col(f"max.{column}"), col(f"null_count.{column}"))]


def _files_holding(dt: "DeltaTable", holding: tuple[str, Iterable[Any]]) -> list[_File]:
    """The active files of ``dt`` whose statistics admit a row with ``column`` among ``values``
    (NULL included), ``holding`` being (column, values)."""
    column, named = holding
    values, null = _sorted_values(named)
    return [f for f in _files(dt, column) if f.may_hold(values, null)]


def _by_low(files: list[_File]) -> list[_File]:
    """``files`` by their lower bound, those without one first."""
    return sorted(files, key=lambda f: (f.low is not None, f.low if f.low is not None else 0))


def _name(path: str) -> str:
    """The file name of a path or URI of a table's file (an unpartitioned table's files lie at
    its root)."""
    return unquote(path.rsplit("/", 1)[-1])


def _sorted_values(values: Iterable[Any]) -> tuple[list, bool]:
    """(the distinct non-NULL ``values`` sorted, whether NULL is among them)."""
    distinct = set(values)
    return sorted(v for v in distinct if v is not None), None in distinct


def _read_file(path: PathLike, file: _File, schema: pa.Schema, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of an active file of the table at ``path``, in the table's ``schema``."""
    import pyarrow.parquet as pq

    return pq.read_table(str(Path(path) / unquote(file.path)), schema=schema,
                         columns=list(columns) if columns is not None else None)


def key_mask(table: pa.Table, keys: Sequence[str], wanted: pa.Table) -> pa.Array:
    """Which rows of ``table`` have the key (``keys``, NULL-safe) of a row of ``wanted``: a
    first filter by the first key's values, then the exact match of the few rows it keeps."""
    first = wanted.column(keys[0])
    mask = pc.is_in(table.column(keys[0]), value_set=pc.unique(first), skip_nulls=False)
    if len(keys) == 1 or not pc.any(mask).as_py():
        return mask
    named = {tuple(r.values()) for r in wanted.select(list(keys)).to_pylist()}
    hits = pc.indices_nonzero(mask).to_pylist()
    exact = [tuple(r.values()) in named for r in table.select(list(keys)).take(hits).to_pylist()]
    out = [False] * table.num_rows
    for i, hit in zip(hits, exact):
        out[i] = hit
    return pa.array(out, pa.bool_())


def ordered(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``table`` sorted by ``keys`` (NULLs first): the order of a clustered table's rows."""
    return table.sort_by([(k, "ascending", "at_start") for k in keys])


def _file_stats(table: pa.Table) -> str:
    """Delta statistics of a file's rows: the count, and the bounds and NULLs of the
    top-level integer and string columns (the others have none, which readers allow)."""
    low, high, nulls = {}, {}, {}
    for f in table.schema:
        if pa.types.is_integer(f.type) or pa.types.is_string(f.type):
            column = table.column(f.name)
            bounds = pc.min_max(column)
            nulls[f.name] = column.null_count
            if bounds["min"].is_valid:
                low[f.name], high[f.name] = bounds["min"].as_py(), bounds["max"].as_py()
    return json.dumps({"numRecords": table.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls})


class _NewFiles:
    """Parquet files written into a table's directory, and their add actions."""

    def __init__(self, root: Path, row_group_rows: int | None):
        self.root, self.row_group_rows = root, row_group_rows
        self.actions: list = []
        self.rows = 0
        self.now = int(time.time() * 1000)

    def write(self, rows: pa.Table, limit: int, slack: int = 1) -> None:
        """Write ``rows`` as one file, or, past ``slack`` times ``limit`` rows, as files of at
        most ``limit`` rows."""
        import pyarrow.parquet as pq
        from deltalake.transaction import AddAction

        parts = -(-rows.num_rows // limit) if rows.num_rows > slack * limit else 1
        step = max(1, -(-rows.num_rows // parts))
        for start in range(0, rows.num_rows, step):
            part = rows.slice(start, step)
            name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
            pq.write_table(part, str(self.root / name), row_group_size=self.row_group_rows, compression="snappy")
            self.actions.append(AddAction(name, (self.root / name).stat().st_size, {}, self.now, True,
                                          _file_stats(part)))
            self.rows += part.num_rows


def _rows_per_file(rows: pa.Table, file_bytes: int) -> int:
    """The rows of a file of about ``file_bytes`` (of Arrow memory) at the density of ``rows``."""
    return max(1, int(file_bytes * rows.num_rows / max(rows.nbytes, 1)))


def write_clustered(path: PathLike, reader: pa.RecordBatchReader, mode: Literal["error", "overwrite"],
                    file_bytes: int, *, row_group_rows: int | None = None,
                    commit_metadata: Mapping[str, Any] | None = None) -> None:
    """Create (``mode="error"``) or overwrite the table at ``path`` with the rows of ``reader``,
    in their order, cut into files of about ``file_bytes`` of Arrow memory, in one commit: for
    rows ordered by a key, the layout of :func:`rewrite_clustered`."""
    from deltalake import Schema
    from deltalake.transaction import create_table_with_add_actions

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    files = _NewFiles(path, row_group_rows)
    buffered: list[pa.RecordBatch] = []
    held = 0
    limit = None
    for batch in reader:
        if batch.num_rows == 0:
            continue
        if limit is None:
            limit = _rows_per_file(pa.Table.from_batches([batch]), file_bytes)
        buffered.append(batch)
        held += batch.num_rows
        if held >= limit:
            table = pa.Table.from_batches(buffered, reader.schema)
            whole = (held // limit) * limit
            files.write(table.slice(0, whole), limit)
            rest = table.slice(whole)
            buffered, held = rest.to_batches(), rest.num_rows
    if held:
        files.write(pa.Table.from_batches(buffered, reader.schema), limit or held)
    create_table_with_add_actions(str(path), Schema.from_arrow(reader.schema), files.actions, mode=mode,
                                  configuration=TABLE_CONFIGURATION,
                                  commit_properties=_commit_properties(commit_metadata))


@dataclass(frozen=True)
class Rewrite:
    """What :func:`rewrite_clustered` did: its metrics (named as :func:`merge_arrow`'s, with
    the new ``version``) and the rows it removed (those whose key an upsert or a delete named,
    as they were before)."""

    metrics: dict[str, Any]
    removed: pa.Table


def rewrite_clustered(path: PathLike, upserts: pa.Table, deletes: pa.Table, keys: Sequence[str], *,
                      commit_metadata: Mapping[str, Any] | None = None,
                      row_group_rows: int | None = None, file_bytes: int) -> Rewrite:
    """Upsert ``upserts`` (whole rows) into the table at ``path`` and delete the rows whose
    ``keys`` equal (NULL-safely) those of a row of ``deletes``, in one commit that rewrites only
    the files that may hold those keys.

    The rows with the key of a row of ``upserts`` or ``deletes`` are removed, and the rows of
    ``upserts`` inserted: with unique keys, an upsert replaces the row with its key or is
    inserted (``num_target_rows_updated`` counts the rows replaced, ``..._inserted`` the
    upserts whose key was not there).

    The files to rewrite are those whose statistics of the first key column admit a named
    value (all of them when they have none), so the rewrite is exact on any layout.  It is
    cheap on the layout :func:`write_clustered` gives rows ordered by ``keys`` (and
    :func:`write_spark` a DataFrame, with ``file_bytes``): files of narrow, disjoint key ranges.
    The rewrite keeps that layout.  An inserted row goes to the file whose range starts last at
    or below its key (the first file for a key below all of them or NULL), each rewritten file
    is written ordered by ``keys``, and one that grows past twice ``file_bytes`` is split.

    The commit removes the rewritten files and adds the new ones; the metrics also land in its
    metadata (``idivm.rewrite``).  Its change data feed, which has no change files, is read as
    a delete of the rewritten files' rows and an insert of the new ones.  ``row_group_rows``
    caps the rows of a row group, as in :func:`merge_arrow`.
    """
    from deltalake.transaction import RemoveAction

    if not keys:
        raise ValueError("rewrite_clustered needs at least one key column")
    dt = open_table(path)
    _check_driver_readable(dt, path)
    table_schema = schemas.as_arrow_schema(dt.schema().to_arrow())
    upserts = schemas.conform(upserts.select(table_schema.names), table_schema)
    upsert_keys = upserts.select(list(keys))
    named = pa.concat_tables([upsert_keys, deletes.select(list(keys)).cast(upsert_keys.schema)])
    values, null = _sorted_values(pc.unique(named.column(keys[0])).to_pylist())
    files = _by_low(_files(dt, keys[0]))
    touched = {f.path for f in files if f.may_hold(values, null)}
    homes = _homes(files, upserts.column(keys[0]).to_pylist())
    touched.update(h for h in homes if h is not None)

    root = Path(path)
    new = _NewFiles(root, row_group_rows)
    removed: list = []
    updated = deleted = copied = 0
    found: list[pa.Table] = [table_schema.empty_table()]  # the rows removed
    for f in files:
        if f.path not in touched:
            continue
        old = _read_file(root, f, table_schema)
        hit = key_mask(old, keys, named)
        matched = old.filter(hit)
        n = int(pc.sum(key_mask(matched, keys, upsert_keys)).as_py() or 0) if matched.num_rows else 0
        updated, deleted = updated + n, deleted + matched.num_rows - n
        found.append(matched)
        kept = old.filter(pc.invert(hit))
        copied += kept.num_rows
        mine = homes.pop(f.path, [])
        rows = pa.concat_tables([kept, upserts.take(mine)]) if mine else kept
        removed.append(RemoveAction(f.path, True, new.now, f.size, {}))
        if rows.num_rows:
            rows = ordered(rows, keys) if mine else rows
            new.write(rows, _rows_per_file(old, file_bytes) if old.num_rows else _rows_per_file(rows, file_bytes),
                      slack=2)
    for rest in homes.values():  # the table had no file
        rows = ordered(upserts.take(rest), keys)
        new.write(rows, _rows_per_file(rows, file_bytes))
    removed_rows = pa.concat_tables(found)
    replaced = key_mask(upsert_keys, keys, removed_rows) if removed_rows.num_rows and upserts.num_rows else None
    inserted = upserts.num_rows - (int(pc.sum(replaced).as_py() or 0) if replaced is not None else 0)
    stats = {"num_source_rows": named.num_rows, "num_target_rows_inserted": inserted,
             "num_target_rows_updated": updated, "num_target_rows_deleted": deleted,
             "num_target_rows_copied": copied, "num_output_rows": new.rows,
             "num_target_files_added": len(new.actions), "num_target_files_removed": len(removed)}
    if new.actions or removed or commit_metadata:
        metadata = {**(commit_metadata or {}), "idivm.rewrite": json.dumps(stats, sort_keys=True)}
        dt.create_write_transaction([*removed, *new.actions], mode="append", schema=dt.schema(),
                                    commit_properties=_commit_properties(metadata))
    stats["version"] = open_table(path).version()
    return Rewrite(stats, removed_rows)


def _homes(files: Sequence[_File], keys: Sequence[Any]) -> dict[str | None, list[int]]:
    """The file each of the rows with first key ``keys`` is inserted into (by the rows'
    positions): the last of the ``files`` (sorted by lower bound) whose range starts at or below
    the key; the first file for a key below every range, for NULL, or when the bounds do not
    compare with the key; None when there is no file."""
    bounded = [f for f in files if f.low is not None]
    starts = [f.low for f in bounded]
    homes: dict[str | None, list[int]] = {}
    for i, key in enumerate(keys):
        try:
            at = bisect.bisect_right(starts, key) - 1 if key is not None else -1
        except TypeError:
            at = -1
        home = bounded[at].path if at >= 0 else (files[0].path if files else None)
        homes.setdefault(home, []).append(i)
    return homes


# --- reading -------------------------------------------------------------------------------------

def read_arrow(path: PathLike, version: int | None = None, *, columns: Sequence[str] | None = None,
               holding: tuple[str, Iterable[Any]] | None = None) -> pa.Table:
    """The rows of a table version as a pyarrow Table (with the table's schema).
    ``holding=(column, values)``: only the rows of the files whose statistics admit a row with
    ``column`` among ``values`` (NULL included), as :func:`read_spark`'s."""
    dt = open_table(path, version)
    _check_driver_readable(dt, path)
    if holding is None:
        return dt.to_pyarrow_dataset().to_table(columns=list(columns) if columns is not None else None)
    table_schema = schemas.as_arrow_schema(dt.schema().to_arrow())
    tables = [_read_file(path, f, table_schema, columns) for f in _files_holding(dt, holding)]
    empty = table_schema if columns is None else pa.schema([table_schema.field(c) for c in columns])
    return pa.concat_tables([empty.empty_table(), *tables])


def scan_ordered(path: PathLike, version: int | None, column: str,
                 columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of a table version file by file, the files in the order of their lower bound of
    ``column`` (files without one first): a table of :func:`rewrite_clustered`'s layout in the
    order of its key."""
    dt = open_table(path, version)
    if needs_delta_spark(path, dt):  # read by delta-spark, in the order of the column
        from pyspark.sql import SparkSession, functions as F

        df = read_spark(SparkSession.active(), path, version).orderBy(F.col(f"`{column}`"))
        if columns is not None:
            df = df.select(*[F.col(f"`{c}`") for c in columns])
        schema = schemas.as_arrow_schema(dt.schema().to_arrow())
        target = schema if columns is None else pa.schema([schema.field(c) for c in columns])
        yield from schemas.conform(df.toArrow(), target).to_batches()
        return
    table_schema = schemas.as_arrow_schema(dt.schema().to_arrow())
    for f in _by_low(_files(dt, column)):
        yield from _read_file(path, f, table_schema, columns).to_batches()


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
        from pyspark.sql import functions as F

        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        df = reader.load(str(Path(path).absolute()))
        if holding is not None:
            column, named = holding
            values, null = _sorted_values(named)
            col = F.col(f"`{column}`")
            df = df.filter((col.isin(values) if values else F.lit(False)) | (col.isNull() if null else F.lit(False)))
        return df
    struct = schemas.spark_schema(dt.schema().to_arrow())
    uris = dt.file_uris()
    if holding is not None:
        kept = {_name(f.path) for f in _files_holding(dt, holding)}
        uris = [u for u in uris if _name(u) in kept]
    if not uris:
        return spark.createDataFrame([], struct)
    return spark.read.schema(struct).parquet(*uris)


def active_files(path: PathLike) -> pa.Table:
    """The active files of the latest version of a table: ``path``, ``size_bytes`` and
    ``num_records`` (the rows in the file, deleted by vector or not; 0 when not recorded)."""
    actions = pa.table(open_table(path).get_add_actions(flatten=True))
    rows = actions.column("num_records").fill_null(0) if "num_records" in actions.column_names \
        else pa.array([0] * actions.num_rows, pa.int64())
    return pa.table({"path": actions.column("path"), "size_bytes": actions.column("size_bytes"),
                     "num_records": rows})


def optimize(spark: "SparkSession", path: PathLike, order: Sequence[str] = (), *, target_file_bytes: int,
             row_group_rows: int | None = None, commit_metadata: Mapping[str, Any] | None = None,
             engine: Engine = DELTA_RS) -> int:
    """Compact the table at ``path`` in one ``OPTIMIZE`` commit (no data change, nothing in the
    change data feed) carrying ``commit_metadata``; the new version.  With ``order`` the
    whole table is rewritten Z-ordered by those columns (one column: sorted by it), else its
    small files and its files with deleted rows are, into files of about
    ``target_file_bytes``; the rewritten files have no deletion vectors.  A delta-spark
    ``engine`` (or a table with deletion vectors) runs delta-spark's ``OPTIMIZE``, else
    delta-rs's (with ``row_group_rows``)."""
    if engine.spark or needs_delta_spark(path):
        table = "delta.`" + str(Path(path).absolute()).replace("`", "``") + "`"
        settings = {"spark.databricks.delta.optimize.maxFileSize": str(target_file_bytes),
                    # a view's ID columns come last and may have no statistics: Z-ordering by
                    # them still clusters the files
                    "spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled": "false"}
        zorder = f" ZORDER BY ({', '.join(quoted(c) for c in order)})" if order else ""
        with spark_settings(spark, settings, commit_metadata):
            spark.sql(f"OPTIMIZE {table}{zorder}").collect()
    else:
        options = {"target_size": target_file_bytes, "writer_properties": _writer_properties(row_group_rows),
                   "commit_properties": _commit_properties(commit_metadata)}
        dt = open_table(path)
        if order:
            dt.optimize.z_order(list(order), **options)
        else:
            dt.optimize.compact(**options)
    return version(path)


def needs_delta_spark(path: PathLike, dt: "DeltaTable | None" = None) -> bool:
    """Whether the table at ``path`` must be read (and written) through delta-spark: it has
    deletion vectors, partitions or column mapping, which a reader of its Parquet files (and
    the driver-side rewrite of :func:`rewrite_clustered`) would get wrong."""
    dt = dt if dt is not None else open_table(path)
    meta = dt.metadata()
    return bool(meta.partition_columns) \
        or meta.configuration.get("delta.columnMapping.mode", "none") != "none" \
        or "deletionVectors" in (dt.protocol().reader_features or ())


def _check_driver_readable(dt: "DeltaTable", path: PathLike) -> None:
    if needs_delta_spark(path, dt):
        raise DataError(f"{path}: a Delta table with deletion vectors, partitions or column mapping "
                        "is read and written through delta-spark only")


def schema(path: PathLike, version: int | None = None) -> pa.Schema:
    """The Arrow schema of a table version (default: the latest)."""
    at = version if version is not None else _latest(path)
    return schemas.as_arrow_schema(open_table(path, at).schema().to_arrow())


def version(path: PathLike) -> int:
    """The latest version of a table."""
    return _latest(path)


def data_version(path: PathLike) -> int:
    """The latest version of a table that changed its data: its latest version, less the
    ``OPTIMIZE`` commits after it (which rewrite files, not rows)."""
    dt = open_table(path)
    for limit in (1, None):  # the last commit, which is nearly always a data change, then all
        for commit in dt.history(limit):
            if commit.get("operation") != "OPTIMIZE":
                return int(commit["version"])
    return dt.version()


def _latest(path: PathLike) -> int:
    """The latest version of a table: its last commit file (every version has one)."""
    try:
        names = os.listdir(Path(path, "_delta_log"))
    except OSError:
        names = []
    versions = [int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()]
    return max(versions) if versions else open_table(path).version()


def row_count(path: PathLike, version: int | None = None) -> int:
    """Rows in a table version: from the add actions' statistics when every
    file has them, otherwise by counting rows of the files (by delta-spark, in the active
    session, for a table with deletion vectors)."""
    dt = open_table(path, version)
    if needs_delta_spark(path, dt):  # the files' row counts include the rows deleted by vector
        from pyspark.sql import SparkSession

        return read_spark(SparkSession.active(), path, version).count()
    actions = pa.table(dt.get_add_actions(flatten=True))
    if "num_records" in actions.column_names:
        counts = actions.column("num_records")
        if counts.null_count == 0:
            return int(pc.sum(counts).as_py() or 0)
    return dt.to_pyarrow_dataset().count_rows()


def history(path: PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """Commits of a table, newest first: dicts with ``version``, ``timestamp``
    (ms since the epoch), ``operation``, ``operationMetrics``, ... and the
    keys of the commit's custom metadata (delta-rs's keys, or the keys of the JSON object of
    delta-spark's ``userMetadata``)."""
    commits = open_table(path).history(limit)
    for commit in commits:
        user = commit.get("userMetadata")
        if isinstance(user, str) and user.startswith("{"):
            try:
                keys = json.loads(user)
            except ValueError:
                continue
            if isinstance(keys, dict):
                for k, v in keys.items():
                    commit.setdefault(k, v)
    return commits


def read_changes(path: PathLike, start_version: int, end_version: int | None = None) -> pa.Table:
    """The change data feed of versions ``start_version..end_version`` (inclusive;
    default: up to the latest) as a pyarrow Table.

    Columns: the table's columns plus :data:`CHANGE_COLUMNS` (``_change_type``
    is ``insert``, ``delete``, ``update_preimage`` or ``update_postimage``).
    An empty range (``start_version`` past the end) gives an empty table.
    """
    dt = open_table(path)
    latest = dt.version()
    end = latest if end_version is None else min(end_version, latest)
    table_schema = schemas.as_arrow_schema(dt.schema().to_arrow())
    target = pa.schema(list(table_schema) + list(CHANGE_COLUMNS))
    if start_version < 0:
        raise ValueError(f"start_version must be >= 0, got {start_version}")
    if start_version > end:
        return target.empty_table()
    reader = pa.RecordBatchReader.from_stream(dt.load_cdf(starting_version=start_version, ending_version=end))
    changes = reader.read_all()
    columns = [changes.column(f.name).cast(f.type) if f.name in changes.column_names
               else pa.nulls(changes.num_rows, f.type) for f in target]
    return pa.Table.from_arrays(columns, schema=target)


# --- helpers -------------------------------------------------------------------------------------

def _check_mode(mode: str, allowed: tuple[str, ...]) -> None:
    if mode not in allowed:
        raise ValueError(f"mode must be one of {', '.join(allowed)}, got {mode!r}")


def _writer_properties(row_group_rows: int | None):
    from deltalake import WriterProperties

    return None if row_group_rows is None else WriterProperties(max_row_group_size=row_group_rows)


def _commit_properties(commit_metadata: Mapping[str, Any] | None):
    from deltalake import CommitProperties

    if not commit_metadata:
        return None
    return CommitProperties(custom_metadata=_checked(commit_metadata))


def _user_metadata(commit_metadata: Mapping[str, Any]) -> str:
    """Commit metadata as delta-spark's ``userMetadata``: a JSON object (see :func:`history`)."""
    return json.dumps(_checked(commit_metadata), sort_keys=True)


def _checked(commit_metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The commit metadata, after checking that no key collides with Delta's commitInfo fields."""
    clash = sorted(set(commit_metadata) & _RESERVED_COMMIT_KEYS)
    if clash:
        raise ValueError(f"commit metadata keys collide with Delta commitInfo fields: {', '.join(clash)}")
    return dict(commit_metadata)
