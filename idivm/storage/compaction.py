"""Compaction of the tables maintenance writes, by policy.

Every maintenance run adds files to the tables it writes: a delta-rs run rewrites the files
holding the rows an i-diff names into new ones, and a run on tables with deletion vectors
(merge-on-read) marks the rows it replaces as deleted in the files that keep holding them.
Over many runs a table so collects small files and dead rows, which every later read pays
for.  After a run, :func:`compact_if_needed` checks each table the run wrote against a
:class:`Policy` and, when the table has drifted past it, rewrites it in one commit:

* a table with an order (a view maintained by ID, an index table: files of narrow ID
  ranges, which restricted reads prune by their statistics) is rewritten whole, ordered by
  those columns (delta-spark: ``OPTIMIZE ... ZORDER BY``; delta-rs: ``optimize.z_order``),
  or clustered by them when it has liquid clustering (``OPTIMIZE``; :mod:`idivm.storage.layout`);
* any other table has its small files and the files with deleted rows rewritten
  (``OPTIMIZE``; delta-rs: ``optimize.compact``).

Either way deletion vectors are purged from the files rewritten.  The commit is Delta's
``OPTIMIZE``: it changes no data (``dataChange=false``), so change data feed readers see no
change in it, and it carries the ``idivm.*`` metadata given with ``idivm.operation =
compact`` and the rest of the table's last commit's metadata: what the table reflects (a
watermark, cache or view versions) is unchanged, and readers of a table's data version
(:func:`idivm.storage.delta.data_version`) skip it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from idivm.storage import delta

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: files smaller than this fraction of the table's target file size count as small
SMALL_FILE_FRACTION = 0.1


@dataclass(frozen=True, slots=True)
class Policy:
    """When a table is compacted: more than ``max_deleted_ratio`` of the rows in its files
    deleted by vector, or more than ``max_small_files`` small files.  A table is checked when
    its version is a multiple of ``check_every`` (the check of a table with deletion vectors
    counts its rows: a Spark job or three, not worth paying on every run)."""

    max_deleted_ratio: float = 0.2
    max_small_files: int = 64
    check_every: int = 10

    def reason(self, health: "Health") -> str | None:
        """Why a table in ``health`` needs compaction, or None."""
        if health.deleted_ratio > self.max_deleted_ratio:
            return (f"{health.deleted_rows} of {health.file_rows} rows deleted "
                    f"({health.deleted_ratio:.0%} > {self.max_deleted_ratio:.0%})")
        if health.small_files > self.max_small_files:
            return f"{health.small_files} small files (> {self.max_small_files})"
        return None


DEFAULT_POLICY = Policy()


@dataclass(frozen=True, slots=True)
class Health:
    """A table's active files, how many of them are small, the rows in them and how many of
    those rows deletion vectors remove."""

    files: int
    small_files: int
    file_rows: int
    deleted_rows: int

    @property
    def deleted_ratio(self) -> float:
        return self.deleted_rows / self.file_rows if self.file_rows else 0.0


@dataclass(frozen=True, slots=True)
class Compaction:
    """One compaction: the table (its name for people), why, its health before and after, the
    version committed and the seconds taken."""

    table: str
    reason: str
    before: Health
    after: Health
    version: int
    seconds: float

    def summary(self) -> str:
        purged = self.before.deleted_rows - self.after.deleted_rows
        return (f"compacted {self.table} ({self.reason}): {self.before.files} files -> {self.after.files}"
                + (f", {purged} deleted rows purged" if purged else "") + f", {self.seconds:.2f}s")


def health(path: Path, target_file_bytes: int, spark: "SparkSession | None" = None) -> Health:
    """The health of the table at ``path`` whose files should be about ``target_file_bytes``.
    Deleted rows are the rows of its files (their statistics) less the rows it has (counted
    by delta-spark when the table has deletion vectors; otherwise none are deleted)."""
    files = delta.active_files(path)
    small = int(pc.sum(pc.less(files.column("size_bytes"), int(target_file_bytes * SMALL_FILE_FRACTION))).as_py() or 0)
    file_rows = int(pc.sum(files.column("num_records")).as_py() or 0)
    deleted = 0
    if file_rows and delta.needs_delta_spark(path):
        deleted = max(file_rows - delta.read_spark(spark, path).count(), 0)
    return Health(files.num_rows, small, file_rows, deleted)


def compact_if_needed(spark: "SparkSession", path: Path, name: str, *, order: Sequence[str] = (),
                      target_file_bytes: int, row_group_rows: int | None = None,
                      engine: delta.Engine = delta.DELTA_RS, policy: Policy | None = None) -> Compaction | None:
    """Compact the table at ``path`` (called ``name`` in the report) when ``policy`` says so:
    ordered by ``order`` when given, in files of about ``target_file_bytes`` (and row groups
    of ``row_group_rows`` on delta-rs), in one commit that carries the ``idivm.*`` metadata of
    the table's last commit (what the table reflects is unchanged); None when it is healthy
    (by ``policy``, default :data:`DEFAULT_POLICY`)."""
    policy = policy or DEFAULT_POLICY
    if delta.version(path) % policy.check_every:
        return None
    started = time.monotonic()
    before = health(path, target_file_bytes, spark)
    reason = policy.reason(before)
    if reason is None:
        return None
    last = delta.history(path, 1)[0]
    metadata = {**{k: v for k, v in last.items() if k.startswith("idivm.")}, "idivm.operation": "compact"}
    delta.optimize(spark, path, order, target_file_bytes=target_file_bytes, row_group_rows=row_group_rows,
                   commit_metadata=metadata, engine=engine)
    return Compaction(name, reason, before, health(path, target_file_bytes, spark), delta.version(path),
                      time.monotonic() - started)
