"""A Delta table as its log describes it: opening it at a version, its versions and schema,
whether it needs delta-spark, and its active files with their statistics.  Also the settings
every table idivm creates gets, and the storage engines (:class:`Engine`).

Paths are local directories (``str`` or ``Path``).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from idivm.errors import CatalogError, ConcurrentWriteError, DataError
from idivm.storage import schema as schemas

if TYPE_CHECKING:
    from deltalake import DeltaTable

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


#: the default engine on a cluster: delta-rs writes in the driver, which neither scales out nor
#: holds a table of a cluster's size, so Spark's executors write there, with deletion vectors
CLUSTER_ENGINE = "delta-spark-dv"


def engine(name: str | None = None, master: str | None = None) -> Engine:
    """The engine named; by default ``$IDIVM_STORAGE``, else ``delta-rs`` on a local Spark master
    (``local``, ``local[N]``, or none given), where it is the faster (``benchmarks/README.md``,
    Storage engines), and :data:`CLUSTER_ENGINE` on any other master."""
    chosen = name or os.environ.get(ENGINE_ENV)
    if chosen:
        return Engine(chosen)
    if master and not master.startswith("local"):
        return Engine(CLUSTER_ENGINE)
    return DELTA_RS


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


def remember(cache: dict, key: Any, value: Any, limit: int) -> None:
    """Keep ``value`` in the in-process ``cache`` under ``key``, dropping the oldest entry when
    it holds ``limit`` already (tables are written from several threads at once: another may
    have dropped it first)."""
    if len(cache) >= limit:
        try:
            cache.pop(next(iter(cache)), None)
        except (StopIteration, RuntimeError):  # emptied, or changed by another thread meanwhile
            pass
    cache[key] = value


def version_key(path: PathLike, version: int | None) -> tuple | None:
    """What names one version of the table at ``path`` (default: the latest) for as long as it
    exists: the path, the version and the identity of its commit file (None: no such file)."""
    if version is None:
        version = _latest(path)
    try:
        commit = os.stat(Path(path, "_delta_log", f"{version:020d}.json"))
    except OSError:
        return None
    return (os.path.abspath(path), version, commit.st_ino, commit.st_mtime_ns, commit.st_size)


#: the tables a run commits to only if no one else has since it read them: path -> the version
#: read (:func:`pinned`), per thread
_PINS = threading.local()


def _pins() -> dict[str, int]:
    if not hasattr(_PINS, "tables"):
        _PINS.tables = {}
    return _PINS.tables


@contextlib.contextmanager
def pinned(path: PathLike, version: int):
    """Within this context, commits to the table at ``path`` through delta-rs are based on
    ``version`` (then on each commit made within) and are not retried: if another writer has
    committed since, the commit is not made (Delta's log takes one commit of each version) and
    :class:`~idivm.errors.ConcurrentWriteError` is raised.  A maintenance run pins the view (or
    cache) it computed changes against, so that two runs at once never apply one change twice.
    Pins nest: the one this replaces is back on exit."""
    pins, key = _pins(), str(Path(path).resolve())
    before = pins.get(key)
    pins[key] = version
    try:
        yield
    finally:
        if before is None:
            pins.pop(key, None)
        else:
            pins[key] = before


def pin_of(path: PathLike) -> int | None:
    """The version ``path`` is pinned at (:func:`pinned`), if it is."""
    pins = _pins()
    return pins.get(str(Path(path).resolve())) if pins else None


def repin(path: PathLike, version: int) -> None:
    """After a commit to a pinned table: its next commit is based on ``version``."""
    pins, key = _pins(), str(Path(path).resolve())
    if key in pins:
        pins[key] = version


@contextlib.contextmanager
def committing(path: PathLike):
    """Around a commit through delta-rs to the table at ``path``: a commit refused because the
    table moved past its pinned version is a :class:`~idivm.errors.ConcurrentWriteError`."""
    from deltalake.exceptions import CommitFailedError

    try:
        yield
    except CommitFailedError as e:
        version = pin_of(path)
        if version is None:
            raise
        raise overtaken(path, version) from e


def overtaken(path: PathLike, version: int) -> ConcurrentWriteError:
    """The error of a commit to ``path`` refused because another writer committed after the
    run read ``version``."""
    return ConcurrentWriteError(f"{Path(path).name}: another writer committed after this run read version "
                                f"{version}; nothing was committed")


def open_table(path: PathLike, version: int | None = None, *, to_write: bool = False) -> "DeltaTable":
    """The ``DeltaTable`` at ``path`` (at ``version``, default latest).  It may be one opened
    before, which callers only read; ``to_write``: a new one, opened at the latest version (or
    the version it is pinned at, :func:`pinned`), which the caller may commit through.

    Raises :class:`CatalogError` if there is no table there or no such version.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    key = None
    if to_write:
        version = pin_of(path)
        reused = _writer(path, version)
        if reused is not None:
            return reused
    elif version is None and Path(path, "_delta_log").is_dir():
        version = _latest(path)
    if version is not None and not to_write:
        key = version_key(path, version)
        if key in _OPENED:
            return _OPENED[key]
    if not exists(path):
        raise CatalogError(f"no Delta table at {path}")
    try:
        dt = DeltaTable(str(path), version=version)
        if key is not None:
            remember(_OPENED, key, dt, _OPENED_MAX)
        return dt
    except TableNotFoundError as e:
        raise CatalogError(f"no Delta table at {path}") from e
    except DeltaError as e:
        if version is not None:
            latest = DeltaTable(str(path)).version()
            raise CatalogError(f"{path} has no version {version} (versions 0..{latest}, "
                               "unless older ones were vacuumed)") from e
        raise


#: per table, the ``DeltaTable`` this process last committed through, by the version key it
#: committed (its state is that version's): the next commit to the table at that version starts
#: from it instead of replaying the log again.  A writer is taken out while in use.
_WRITERS: dict[str, tuple[tuple, "DeltaTable"]] = {}
_WRITERS_LOCK = threading.Lock()


def keep_writer(path: PathLike, dt: "DeltaTable") -> None:
    """After a commit through ``dt`` (opened by :func:`open_table` ``to_write``): the next
    writer of ``path`` at that version may be ``dt``."""
    key = version_key(path, dt.version())
    if key is not None:
        with _WRITERS_LOCK:
            remember(_WRITERS, key[0], (key, dt), _OPENED_MAX)


def _writer(path: PathLike, version: int | None, *, take: bool = True) -> "DeltaTable | None":
    """The writer :func:`keep_writer` kept for ``path`` at ``version`` (default: the latest), if
    that version's commit is still the one it made; taken out unless not ``take``."""
    with _WRITERS_LOCK:
        kept = (_WRITERS.pop if take else _WRITERS.get)(os.path.abspath(path), None)
    if kept is None:
        return None
    key = version_key(path, version)
    return kept[1] if key is not None and key == kept[0] else None


def needs_delta_spark(path: PathLike, dt: "DeltaTable | None" = None) -> bool:
    """Whether the table at ``path`` must be read (and written) through delta-spark: it has
    deletion vectors, partitions or column mapping, which a reader of its Parquet files (and
    the driver-side rewrite of :func:`rewrite_clustered`) would get wrong."""
    dt = dt if dt is not None else _writer(path, None, take=False) or open_table(path)
    meta = dt.metadata()
    return bool(meta.partition_columns) \
        or meta.configuration.get("delta.columnMapping.mode", "none") != "none" \
        or "deletionVectors" in (dt.protocol().reader_features or ())


def features(path: PathLike) -> dict[str, Any]:
    """The storage features of the table at ``path``, from its log: whether it has a change
    data feed and deletion vectors, its partition columns, its protocol's reader and writer
    features and its configuration."""
    dt = open_table(path)
    meta, protocol = dt.metadata(), dt.protocol()
    configuration = dict(meta.configuration)
    readers, writers = sorted(protocol.reader_features or ()), sorted(protocol.writer_features or ())
    return {"change_data_feed": configuration.get("delta.enableChangeDataFeed") == "true",
            "deletion_vectors": "deletionVectors" in readers
                                or configuration.get("delta.enableDeletionVectors") == "true",
            "partition_columns": list(meta.partition_columns),
            "reader_features": readers, "writer_features": writers, "configuration": configuration}


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


def _latest(path: PathLike) -> int:
    """The latest version of a table: its last commit file (every version has one)."""
    try:
        names = os.listdir(Path(path, "_delta_log"))
    except OSError:
        names = []
    versions = [int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()]
    return max(versions) if versions else open_table(path).version()


def _check_mode(mode: str, allowed: tuple[str, ...]) -> None:
    if mode not in allowed:
        raise ValueError(f"mode must be one of {', '.join(allowed)}, got {mode!r}")


# --- active files --------------------------------------------------------------------------------

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

