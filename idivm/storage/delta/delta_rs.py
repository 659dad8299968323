"""The delta-rs paths: tables written and read in the driver through delta-rs (the
``deltalake`` package), and read into Spark by their Parquet files.

Reading into Spark goes by the list of a version's active Parquet files and
the table's own schema (``DeltaTable(path, version=v).file_uris()`` →
``spark.read.schema(...).parquet(*uris)``), so Spark needs no Delta jars.
Writing from Spark goes through a Parquet staging directory whose files are
streamed as Arrow batches into delta-rs (:func:`write_staged`); nothing is
collected into the driver.  None of this applies to a table that needs delta-spark
(:func:`~idivm.storage.delta.table.needs_delta_spark`).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from idivm.errors import CatalogError, DataError
from idivm.storage import schema as schemas
from idivm.storage.delta.clustered import ordered, write_clustered
from idivm.storage.delta.commits import _commit_properties, count
from idivm.storage.delta.merge import MergeClause, _clause_calls
from idivm.storage.delta.table import (
    CHANGE_COLUMNS,
    TABLE_CONFIGURATION,
    PathLike,
    _by_low,
    _check_driver_readable,
    _check_mode,
    _files,
    _files_holding,
    _name,
    _read_file,
    exists,
    committing,
    keep_writer,
    repin,
    open_table,
    version,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession


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
    count()
    return version(path)


def write_arrow(path: PathLike, data: pa.Table | pa.RecordBatchReader, *,
                mode: Literal["error", "append", "overwrite"] = "append",
                commit_metadata: Mapping[str, Any] | None = None) -> int:
    """Write Arrow data to a table (creating it with the change data feed on if
    needed); ``overwrite`` may also replace the schema.  Returns the new version."""
    from deltalake import write_deltalake

    _check_mode(mode, ("error", "append", "overwrite"))
    if mode != "error" and exists(path):
        # based on the version the table is pinned at, if it is (:func:`pinned`)
        dt = open_table(path, to_write=True)
        target = schemas.delta_schema(schemas.as_arrow_schema(dt.schema().to_arrow()) if mode == "append"
                                      else data.schema)
        with committing(path):
            write_deltalake(dt, schemas.conform(data, target), mode=mode,
                            schema_mode="overwrite" if mode == "overwrite" else None,
                            commit_properties=_commit_properties(commit_metadata, path))
        count()
        repin(path, dt.version())
        keep_writer(path, dt)
        return dt.version()
    write_deltalake(str(path), schemas.conform(data, schemas.delta_schema(data.schema)), mode=mode,
                    configuration=TABLE_CONFIGURATION,
                    schema_mode="overwrite" if mode == "overwrite" else None,
                    commit_properties=_commit_properties(commit_metadata))
    count()
    return version(path)


#: a DataFrame whose plan reads at most this many bytes (its input files and rows) is written from
#: the driver (:func:`write_staged`)
SMALL_INPUT_BYTES = 16 * 1024 * 1024


def write_staged(df: "DataFrame", target: Path, mode: Literal["error", "overwrite"], *,
                 commit_metadata: Mapping[str, Any] | None, row_group_rows: int | None,
                 file_bytes: int | None, order: Sequence[str] = ()) -> None:
    """Write a Spark DataFrame to the table at ``target`` through a Parquet staging directory
    whose files are streamed into delta-rs, or, with ``file_bytes``, into
    :func:`~idivm.storage.delta.clustered.write_clustered` (see
    :func:`idivm.storage.delta.write_spark`), its rows ordered by the columns ``order`` if any.
    The result of small inputs (:data:`SMALL_INPUT_BYTES`: a view, cache, index or map of small
    tables) is collected into the driver instead, and ordered there: one Spark job, no sort in
    Spark, no staging files."""
    import pyarrow.dataset as ds

    from idivm.storage.spark import by_name, small_result

    arrow = schemas.delta_schema(schemas.arrow_schema(df.schema, nullable=True))
    small = small_result(df, SMALL_INPUT_BYTES)
    if small is not None:
        small = schemas.conform(small, arrow)
        _write_reader((ordered(small, order) if order else small).to_reader(), target, mode,
                      commit_metadata=commit_metadata, row_group_rows=row_group_rows, file_bytes=file_bytes)
        return
    if order:
        df = df.orderBy(*by_name(order))
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:12]}"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        df.write.mode("error").parquet(str(staging))
        files = sorted(str(p) for p in staging.glob("*.parquet"))
        if files:
            reader = schemas.conform(ds.dataset(files, format="parquet").scanner().to_reader(), arrow)
        else:
            reader = pa.RecordBatchReader.from_batches(arrow, iter(()))
        _write_reader(reader, target, mode, commit_metadata=commit_metadata, row_group_rows=row_group_rows,
                      file_bytes=file_bytes)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_reader(reader: pa.RecordBatchReader, target: Path, mode: Literal["error", "overwrite"], *,
                  commit_metadata: Mapping[str, Any] | None, row_group_rows: int | None,
                  file_bytes: int | None) -> None:
    """Write the rows of ``reader`` to the table at ``target`` by delta-rs (see :func:`write_staged`)."""
    from deltalake import write_deltalake

    if file_bytes is not None:
        write_clustered(target, reader, mode, file_bytes, row_group_rows=row_group_rows,
                        commit_metadata=commit_metadata)
        return
    write_deltalake(str(target), reader, mode=mode, configuration=TABLE_CONFIGURATION,
                    schema_mode="overwrite" if mode == "overwrite" else None,
                    writer_properties=_writer_properties(row_group_rows),
                    commit_properties=_commit_properties(commit_metadata))
    count()


def merge_arrow(path: PathLike, source: pa.Table, predicate: str, clauses: Sequence[MergeClause], *,
                source_alias: str = "s", target_alias: str = "t",
                commit_metadata: Mapping[str, Any] | None = None,
                streamed_exec: bool = False, row_group_rows: int | None = None,
                merge_schema: bool = False) -> dict[str, Any]:
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

    ``merge_schema``: the columns of ``source`` that the clauses assign and the table lacks are
    added to the table (nullable) by the same commit.
    """
    if not clauses:
        raise ValueError("merge_arrow needs at least one clause")
    dt = open_table(path, to_write=True)
    before = dt.version()
    merger = dt.merge(_conform_source(dt, source), predicate, source_alias=source_alias,
                      target_alias=target_alias, streamed_exec=streamed_exec, merge_schema=merge_schema,
                      writer_properties=_writer_properties(row_group_rows),
                      commit_properties=_commit_properties(commit_metadata, path))
    for method, argument, p in _clause_calls(clauses):
        merger = getattr(merger, method)(*([argument] if argument is not None else []), predicate=p)
    with committing(path):
        metrics = dict(merger.execute())
        if commit_metadata and not (metrics.get("num_target_files_added") or metrics.get("num_target_files_removed")):
            # delta-rs does not commit a merge that changes no file; commit an empty append so the
            # metadata (e.g. a watermark) still lands.
            from deltalake import write_deltalake

            empty = schemas.as_arrow_schema(dt.schema().to_arrow()).empty_table()
            write_deltalake(dt, empty, mode="append", commit_properties=_commit_properties(commit_metadata, path))
    metrics["version"] = dt.version()
    count(metrics["version"] - before)
    repin(path, metrics["version"])
    keep_writer(path, dt)
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


# --- reading -------------------------------------------------------------------------------------

def read_arrow(path: PathLike, version: int | None = None, *, columns: Sequence[str] | None = None,
               holding: tuple[str, Iterable[Any]] | None = None) -> pa.Table:
    """The rows of a table version as a pyarrow Table (with the table's schema).
    ``holding=(column, values)``: only the rows of the files whose statistics admit a row with
    ``column`` among ``values`` (NULL included), as :func:`read_files`'s."""
    dt = open_table(path, version)
    _check_driver_readable(dt, path)
    if holding is None:
        return dt.to_pyarrow_dataset().to_table(columns=list(columns) if columns is not None else None)
    table_schema = schemas.as_arrow_schema(dt.schema().to_arrow())
    tables = [_read_file(path, f, table_schema, columns) for f in _files_holding(dt, holding)]
    empty = table_schema if columns is None else pa.schema([table_schema.field(c) for c in columns])
    return pa.concat_tables([empty.empty_table(), *tables])


def read_added(path: PathLike, version: int, since: int) -> tuple[pa.Table, pa.Table] | None:
    """The rows of version ``version`` of the table at ``path`` in two parts: those of the
    files already active at version ``since``, and those of the files added after it; None
    when a file active at ``since`` is not at ``version`` (the versions between them did more
    than append)."""
    now, then = open_table(path, version), open_table(path, since)
    _check_driver_readable(now, path)
    before = {f.path for f in _files(then, "")}
    files = _files(now, "")
    if not before <= {f.path for f in files}:
        return None
    table_schema = schemas.as_arrow_schema(now.schema().to_arrow())
    kept = then.to_pyarrow_dataset().to_table()
    added = [_read_file(path, f, table_schema) for f in files if f.path not in before]
    return kept, pa.concat_tables([table_schema.empty_table(), *added])


def scan_ordered(dt: "DeltaTable", path: PathLike, column: str,
                 columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of ``dt`` (the table at ``path``) file by file, the files in the order of their
    lower bound of ``column`` (files without one first)."""
    table_schema = schemas.as_arrow_schema(dt.schema().to_arrow())
    for f in _by_low(_files(dt, column)):
        yield from _read_file(path, f, table_schema, columns).to_batches()


def read_files(spark: "SparkSession", dt: "DeltaTable",
             holding: tuple[str, Sequence[Any]] | None = None) -> "DataFrame":
    """A Spark DataFrame over the active Parquet files of ``dt`` (only those whose statistics
    admit a row with ``column`` among ``values``, NULL included, for ``holding=(column,
    values)``), with the Spark schema converted from the table's Arrow schema (no Spark job);
    no file gives an empty DataFrame with that schema."""
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


def optimize(path: PathLike, order: Sequence[str], *, target_file_bytes: int, row_group_rows: int | None,
             commit_metadata: Mapping[str, Any] | None) -> None:
    """delta-rs's ``OPTIMIZE`` of the table at ``path``: Z-ordered by ``order``, else a compaction."""
    options = {"target_size": target_file_bytes, "writer_properties": _writer_properties(row_group_rows),
               "commit_properties": _commit_properties(commit_metadata)}
    dt = open_table(path, to_write=True)
    before = dt.version()
    if order:
        dt.optimize.z_order(list(order), **options)
    else:
        dt.optimize.compact(**options)
    count(open_table(path).version() - before)


def row_count(dt: "DeltaTable") -> int:
    """The rows of ``dt``: from the add actions' statistics when every file has them,
    otherwise by counting rows of the files."""
    counted = counted_rows(dt)
    return dt.to_pyarrow_dataset().count_rows() if counted is None else counted


def counted_rows(dt: "DeltaTable") -> int | None:
    """The rows of ``dt`` from its log alone, without reading a data file: the add actions'
    row counts less the rows their deletion vectors delete (None: a file has no statistics).
    Reads tables with deletion vectors too, which delta-rs cannot scan."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    if "num_records" not in actions.column_names or actions.column("num_records").null_count:
        return None
    rows = int(pc.sum(actions.column("num_records")).as_py() or 0)
    if "deletionVectors" in (dt.protocol().reader_features or ()):
        kept = pa.table(dt.deletion_vectors()).column("selection_vector")
        if len(kept):
            rows -= int(pc.sum(pc.invert(pc.list_flatten(kept))).as_py() or 0)
    return rows


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
    return net_changes(pa.Table.from_arrays(columns, schema=target), table_schema.names)


#: the change types of rows removed and added by a commit without change files
_REMOVED, _ADDED = "delete", "insert"


def net_changes(changes: pa.Table, columns: Sequence[str]) -> pa.Table:
    """A change data feed (``columns`` and :data:`CHANGE_COLUMNS`) without the rows a commit
    deletes and inserts again unchanged.

    A commit that rewrites whole files without change files (a copy-on-write rewrite,
    :func:`~idivm.storage.delta.rewrite_clustered`) reads back as a delete of every row of the
    files it removed and an insert of every row of the files it added, most of them the same
    rows.  Per commit, equal deleted and inserted rows cancel (as bags: a row deleted twice and
    inserted once stays deleted once), so the feed holds the rows that changed, whatever the
    size of the files; updates' pre- and post-images are kept as they are.  A table with a
    column Arrow cannot group by (nested) keeps its feed whole."""
    if changes.num_rows == 0 or any(pa.types.is_nested(changes.schema.field(c).type) for c in columns):
        return changes
    kinds = changes.column("_change_type")
    if not (pc.any(pc.equal(kinds, _REMOVED)).as_py() and pc.any(pc.equal(kinds, _ADDED)).as_py()):
        return changes  # nothing deleted and inserted again (an append, a MERGE's updates): as it is
    plain = pc.is_in(kinds, pa.array([_REMOVED, _ADDED]))
    rows = changes.filter(plain)
    keys = [*columns, "_commit_version", "_commit_timestamp"]
    sign = pc.if_else(pc.equal(rows.column("_change_type"), _ADDED), 1, -1)
    try:
        net = rows.select(keys).append_column("__idivm_sign", sign).group_by(keys, use_threads=False) \
            .aggregate([("__idivm_sign", "sum")])
    except pa.ArrowNotImplementedError:  # a column type Arrow does not group by
        return changes
    net = net.filter(pc.not_equal(net.column("__idivm_sign_sum"), 0))
    counts = pc.abs(net.column("__idivm_sign_sum"))
    repeated = net.take(pa.array([i for i, n in enumerate(counts.to_pylist()) for _ in range(n)], pa.int64()))
    kind = pc.if_else(pc.greater(repeated.column("__idivm_sign_sum"), 0), _ADDED, _REMOVED)
    kept = repeated.select(keys).append_column("_change_type", kind).select(changes.column_names)
    return pa.concat_tables([changes.filter(pc.invert(plain)), kept.cast(changes.schema)])


def _writer_properties(row_group_rows: int | None):
    from deltalake import WriterProperties

    return None if row_group_rows is None else WriterProperties(max_row_group_size=row_group_rows)
