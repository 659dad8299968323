"""Apply a :class:`~idivm.ingest.records.ChangeSet` to a base table in one Delta commit.

Input: the changes of one file, in order; the table's key columns.  Output:
one MERGE commit (so the changes show up in the table's change data feed)
tagged ``{"idivm.operation": "ingest", "idivm.source": <file name>,
"idivm.changes": <n>}``, and an :class:`IngestResult`.

Delta MERGE rejects several source rows for one target row, so the changes
are first condensed per key (:func:`condense`): the last change of a key
wins.  That is the net effect of the sequence — upserts then a delete delete
(a key inserted then deleted in the same file was never in the table, so the
delete matches nothing), a delete then an upsert upserts the final row.  An
empty change set commits nothing; any other, even one whose net effect is
nothing, makes exactly one commit, so every ingested file is in the history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from idivm.changes import condense as condense_by_key
from idivm.ingest.records import DELETE, Change, ChangeSet
from idivm.storage import delta
from idivm.storage.layout import ACTION

@dataclass(frozen=True, slots=True)
class IngestResult:
    """What one ingest did: changes read (tombstones excluded), rows the commit
    inserted/updated/deleted, tombstones skipped, and the table version after it;
    records quarantined; for one batch, its name and whether it had been taken before
    (``replayed``: the version that took it); for a whole feed, its ``batches``; the columns
    the commit added to the table (``ingest --evolve``); the fields of open records that the
    table's declared schema does not declare, which were not stored (``undeclared``: field
    path and how many rows had it)."""

    changes: int
    inserted: int
    updated: int
    deleted: int
    skipped: int
    version: int
    quarantined: int = 0
    source: str = field(default="", compare=False)
    replayed: int | None = None
    batches: tuple["IngestResult", ...] = field(default=(), compare=False)
    added: tuple[str, ...] = ()
    undeclared: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    def as_json(self, table: str) -> dict:
        """This batch (or feed) of an ingest into ``table`` as a JSON object for programs
        (``ingest --output json``)."""
        return {"table": table, "source": self.source, "changes": self.changes, "inserted": self.inserted,
                "updated": self.updated, "deleted": self.deleted, "skipped": self.skipped,
                "quarantined": self.quarantined, "version": self.version, "replayed": self.replayed,
                "added": list(self.added), "undeclared": dict(self.undeclared)}

    @staticmethod
    def total(source: str, results: Sequence["IngestResult"], version: int) -> "IngestResult":
        """The sum of the batches ``results`` of feed ``source``."""
        def sum_of(field: str) -> int:
            return sum(getattr(r, field) for r in results)
        undeclared: dict[str, int] = {}
        for r in results:
            for path, rows in r.undeclared:
                undeclared[path] = undeclared.get(path, 0) + rows
        return IngestResult(sum_of("changes"), sum_of("inserted"), sum_of("updated"), sum_of("deleted"),
                            sum_of("skipped"), results[-1].version if results else version,
                            sum_of("quarantined"), source, None, tuple(results),
                            tuple(c for r in results for c in r.added), tuple(undeclared.items()))


def condense(changes: Iterable[Change]) -> list[Change]:
    """One change per key, the last one of each key (in the order keys first appeared): the
    change's net effect (:func:`idivm.changes.condense`), as an upsert leaves its row and a
    delete no row, whatever was there before."""
    return [last for _, last in condense_by_key((c.key, None, c) for c in changes).values()]


def apply_changes(table_path: str | Path, change_set: ChangeSet, key: Sequence[str],
                  metadata: Mapping[str, object] | None = None, schema: pa.Schema | None = None) -> IngestResult:
    """MERGE the condensed changes into the Delta table at ``table_path`` in one commit, which
    carries ``metadata`` too (the batch's origin).  ``schema``: the table's schema with new
    columns at its end (``ingest --evolve``), which the same commit adds to the table."""
    if not change_set.changes:
        return IngestResult(0, 0, 0, 0, change_set.skipped, delta.version(table_path),
                            len(change_set.rejected), change_set.source, undeclared=change_set.undeclared)
    evolve = schema is not None
    schema = schema if evolve else delta.schema(table_path)
    net = condense(change_set.changes)
    source = pa.Table.from_pylist(
        [{**c.row, ACTION: c.op} for c in net],
        schema=pa.schema([*schema, pa.field(ACTION, pa.string())]))
    columns = {delta.quoted(f.name): delta.quoted(f.name, "s") for f in schema}
    is_delete = f"{delta.quoted(ACTION, 's')} = '{DELETE}'"
    metrics = delta.merge_arrow(
        table_path, source, " AND ".join(f"{delta.quoted(k, 't')} = {delta.quoted(k, 's')}" for k in key),
        [delta.MatchedDelete(is_delete),
         delta.MatchedUpdate(set=columns),
         delta.NotMatchedInsert(values=columns, predicate=f"NOT ({is_delete})")],
        commit_metadata={"idivm.operation": "ingest", "idivm.source": change_set.source,
                         "idivm.changes": change_set.records,
                         **({"idivm.undeclared": json.dumps(dict(change_set.undeclared))}
                            if change_set.undeclared else {}),
                         **(metadata or {})},
        row_group_rows=delta.BASE_ROW_GROUP, merge_schema=evolve)
    return IngestResult(changes=change_set.records,
                        inserted=int(metrics.get("num_target_rows_inserted") or 0),
                        updated=int(metrics.get("num_target_rows_updated") or 0),
                        deleted=int(metrics.get("num_target_rows_deleted") or 0),
                        skipped=change_set.skipped, version=int(metrics["version"]),
                        quarantined=len(change_set.rejected), source=change_set.source,
                        undeclared=change_set.undeclared)

