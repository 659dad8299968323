"""Modification logs into base tables: change files (or the messages of a Kafka topic,
:mod:`~idivm.ingest.kafka`) are read and checked against the table's schema and key
(:mod:`~idivm.ingest.debezium`, :mod:`~idivm.ingest.rows`, :mod:`~idivm.ingest.idiff`; the
updates by path of i-diffs made whole rows from the rows the table holds), then applied as one Delta MERGE
commit (:mod:`~idivm.ingest.apply`).  Uses delta-rs and pyarrow only (no Spark).

A batch is read, checked and committed against one version of its table
(:func:`at_one_version`): when another writer commits to the table in between, the commit is
refused and the batch starts again from the new version, so an update by path is applied to the
row as it stands and a file two writers ingest at once is applied once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from idivm.errors import ConcurrentWriteError, DataError, InternalError
from idivm.ingest import kafka
from idivm.ingest.apply import IngestResult, apply_changes, condense
from idivm.ingest.debezium import read_debezium
from idivm.ingest.feeds import ORIGIN, QUARANTINE_SCHEMA, VALID, Batch, Quarantine, batches, taken_in
from idivm.ingest.idiff import read_idiff, resolve_patches
from idivm.ingest.records import Change, ChangeSet, RecordError, Rejected, SchemaDrift, SchemaDriftError
from idivm.ingest.rows import read_rows
from idivm.storage import delta

if TYPE_CHECKING:
    from idivm.declared_schema import DeclaredSchema

READERS = {"debezium": read_debezium, "rows": read_rows, "idiff": read_idiff}
INGEST_FORMATS = tuple(READERS)

__all__ = ["INGEST_FORMATS", "Change", "ChangeSet", "IngestResult", "Quarantine", "apply_changes", "condense",
           "ingest_feed", "read_debezium", "read_idiff", "read_rows", "retry_quarantined"]


#: how many times a batch starts again because other writers committed to its table between its
#: read and its commit (:func:`at_one_version`)
COMMIT_ATTEMPTS = 5


def at_one_version(table_path: str | Path, attempt: Callable[[], "IngestResult"]) -> "IngestResult":
    """``attempt()`` with the table at ``table_path`` pinned at its version when it starts
    (:func:`idivm.storage.delta.pinned`): the rows it reads of the table and the commit it makes
    are of one version.  A commit refused because another writer committed since starts it
    again, on the new version (at most :data:`COMMIT_ATTEMPTS` times in all)."""
    attempts = 0
    while True:
        attempts += 1
        try:
            with delta.pinned(table_path, delta.version(table_path)):
                return attempt()
        except ConcurrentWriteError:
            if attempts == COMMIT_ATTEMPTS:
                raise


def _reader(format: str):
    if format not in READERS:
        raise DataError(f"unknown ingest format {format!r}; known formats: {', '.join(INGEST_FORMATS)}")
    return READERS[format]


def ingest_feed(table_path: str | Path, quarantine: Quarantine, source: str | Path,
                key: tuple[str, ...] | list[str], format: str = "debezium",
                element_keys: Mapping[str, Sequence[str]] | None = None, strict: bool = False,
                table: str | None = None, evolve: bool = False,
                progress: Callable[[str], None] | None = None,
                declared: "DeclaredSchema | None" = None,
                read_as_missing: Mapping[str, Sequence[str]] | None = None) -> IngestResult:
    """Ingest every batch of ``source`` (a file, a directory, ``-`` or a Kafka topic
    ``kafka://HOST:PORT/TOPIC``; :mod:`~idivm.ingest.feeds`) in order, each in one commit,
    skipping batches already taken.

    Each batch is read whole before anything of it is applied.  Its bad records (including rows
    whose nested collections break their declared ``element_keys``) go to ``quarantine`` and
    its valid ones are applied; ``strict``: a bad record raises :class:`DataError` naming
    ``file:line`` (``topic[partition]@offset``) instead, and nothing of the batch is applied.
    Columns the table does not have raise in either case, unless ``evolve``: then they are
    added to the table (nullable, typed from the batch's values, :func:`added_columns`) in the
    commit that applies the batch, unless one of them is in ``read_as_missing`` (column → the
    views that read it as MISSING, defined when the table lacked it): then the batch is refused.
    A Kafka topic is read by the consumer group
    ``idivm.<table>`` (``table``: by default the name of the quarantine's directory), whose
    offsets are committed after each batch's commit.  ``progress`` is told of each batch applied.
    Records are checked against the table's ``declared`` schema, if it has one
    (:mod:`~idivm.ingest.records`; such a table never drifts, so ``evolve`` changes nothing).
    """
    read = _reader(format)
    if kafka.is_kafka(source):
        feed = kafka.batches(str(source), table or quarantine.path.name, Path(table_path), quarantine.path)
    else:
        feed = batches(source)
    results = []
    try:
        for batch in feed:
            results.append(ingest_batch(table_path, quarantine, batch, tuple(key), format, read, element_keys,
                                        strict, evolve, declared, read_as_missing))
            if batch.done is not None:
                batch.done()
            if progress:
                r = results[-1]
                progress(f"{table or quarantine.path.name}: {r.source or 'batch'} applied ({r.changes} changes), "
                         f"{len(results)} batch{'es' if len(results) > 1 else ''} so far")
    finally:
        feed.close()
    if len(results) == 1:
        return results[0]
    return IngestResult.total(str(source), results, delta.version(table_path))


def ingest_batch(table_path: str | Path, quarantine: Quarantine, batch: Batch, key: tuple[str, ...], format: str,
                 read, element_keys: Mapping[str, Sequence[str]] | None, strict: bool,
                 evolve: bool = False, declared: "DeclaredSchema | None" = None,
                 read_as_missing: Mapping[str, Sequence[str]] | None = None) -> IngestResult:
    """Apply ``batch`` to the table at ``table_path`` in one commit (its rejected records to
    ``quarantine``), unless its origin was applied already (:func:`at_one_version`)."""
    return at_one_version(table_path, lambda: _ingest_batch(table_path, quarantine, batch, key, format, read,
                                                            element_keys, strict, evolve, declared,
                                                            read_as_missing or {}))


def _ingest_batch(table_path: str | Path, quarantine: Quarantine, batch: Batch, key: tuple[str, ...], format: str,
                  read, element_keys: Mapping[str, Sequence[str]] | None, strict: bool,
                  evolve: bool, declared: "DeclaredSchema | None",
                  read_as_missing: Mapping[str, Sequence[str]]) -> IngestResult:
    taken = taken_in(Path(table_path), batch.origin)
    if taken is None:
        q = taken_in(quarantine.path, batch.origin)
        taken = q if q is not None and int(q.get(VALID, 1)) == 0 else None
    if taken is not None:
        return IngestResult(0, 0, 0, 0, 0, delta.version(table_path), source=batch.name,
                            replayed=int(taken["version"]))
    table_schema = delta.schema(table_path)
    try:
        schema, change_set = _read_batch(read, batch, table_path, table_schema, key, element_keys, strict, evolve,
                                         declared)
    except RecordError as e:
        if batch.offsets is None:
            raise
        problem = next((r.problem for r in batch.rejected if r.line == e.line), e.problem)
        raise DataError(f"{batch.position(e.line)}: {problem}") from None
    except DataError as e:
        if batch.offsets is None:
            raise
        raise DataError(batch.relocated(str(e))) from None
    added = schema.names[len(table_schema):]
    for column in (c for c in added if c in read_as_missing):
        views = read_as_missing[column]
        raise DataError(f"{batch.name}: ingest --evolve would add column {column!r}, which view"
                        f"{'s' if len(views) > 1 else ''} {', '.join(views)} read{'' if len(views) > 1 else 's'} "
                        "as MISSING (defined when the table lacked it); nothing was ingested: drop "
                        f"{'them' if len(views) > 1 else 'it'}, ingest, and define {'them' if len(views) > 1 else 'it'} "
                        "again")
    if batch.rejected:
        change_set = _rejected_by_feed(change_set, batch.rejected)
    if change_set.rejected:
        quarantine.add(batch, change_set.rejected, format, len(change_set.changes))
    if schema == table_schema:
        return apply_changes(table_path, change_set, key, {ORIGIN: batch.origin})
    result = apply_changes(table_path, change_set, key, {ORIGIN: batch.origin}, schema=schema)
    return replace(result, added=tuple(added))


def _read_batch(read, batch: Batch, table_path: str | Path, schema: pa.Schema, key: tuple[str, ...],
                element_keys: Mapping[str, Sequence[str]] | None, strict: bool,
                evolve: bool, declared: "DeclaredSchema | None" = None) -> tuple[pa.Schema, ChangeSet]:
    """(the schema the batch is applied with, its changes): the table's ``schema``, or, when
    ``evolve`` and its records have columns the table lacks, ``schema`` with those added at its
    end (nullable, their types inferred from their values: :func:`added_columns`)."""
    try:
        return schema, read_checked(read, batch.text, batch.name, table_path, key, element_keys, strict,
                                    declared=declared)
    except (SchemaDrift, SchemaDriftError):
        if not evolve:
            raise
    from idivm.ingest.load import added_columns

    try:
        read(batch.text, batch.name, schema, key, strict=False)  # every new column and its values
        raise InternalError(f"{batch.name}: schema drift seen reading strictly but not otherwise")
    except SchemaDriftError as e:
        schema = pa.schema([*schema, *added_columns(e.values, batch.name)])
    return schema, read_checked(read, batch.text, batch.name, table_path, key, element_keys, strict, schema,
                                declared)


def _rejected_by_feed(change_set: ChangeSet, rejected: Sequence[Rejected]) -> ChangeSet:
    """``change_set`` with the records that the feed could not give as lines (read as their
    placeholder lines, which no reader takes) rejected for the feed's reason, as they were."""
    mine = {r.line: r for r in rejected}
    return replace(change_set, rejected=tuple(sorted(
        [*(r for r in change_set.rejected if r.line not in mine), *mine.values()], key=lambda r: r.line)))


def retry_quarantined(table_path: str | Path, quarantine: Quarantine, key: tuple[str, ...] | list[str],
                      element_keys: Mapping[str, Sequence[str]] | None = None,
                      fixed: str | Path | None = None, format: str | None = None,
                      declared: "DeclaredSchema | None" = None) -> IngestResult:
    """Replay the records of ``quarantine`` (those of each format in the order they were
    quarantined), or, given ``fixed``, the records of that feed in their place (read in
    ``format``): the ones that are valid now are applied in one commit, the others stay
    quarantined with their new reason.  The retry is one batch whose origin names the
    quarantine's version (and the fixed feed's bytes): after a crash between the table's commit
    and the quarantine's, retrying again only finishes the quarantine's."""
    return at_one_version(table_path, lambda: _retry_quarantined(table_path, quarantine, key, element_keys, fixed,
                                                                 format, declared))


def _retry_quarantined(table_path: str | Path, quarantine: Quarantine, key: tuple[str, ...] | list[str],
                       element_keys: Mapping[str, Sequence[str]] | None, fixed: str | Path | None,
                       format: str | None, declared: "DeclaredSchema | None") -> IngestResult:
    rows = quarantine.rows()
    version = quarantine.version()
    if version is None or (rows.num_rows == 0 and fixed is None):
        return IngestResult(0, 0, 0, 0, 0, delta.version(table_path), source="quarantine")
    key = tuple(key)
    now = dt.datetime.now(dt.timezone.utc)
    if fixed is not None:
        given = list(batches(fixed))
        texts = [(format or "debezium", b.name, b.text,
                  [(b.name, n, now) for n in range(1, len(b.text.splitlines()) + 1)]) for b in given]
        origin = f"quarantine@{version}:" + ",".join(b.origin for b in given)
    else:
        texts = []
        for fmt in dict.fromkeys(rows.column("format").to_pylist()):
            mine = [r for r in rows.to_pylist() if r["format"] == fmt]
            texts.append((fmt, "quarantine", "\n".join(r["record"] for r in mine),
                          [(r["source"], r["line"], r["quarantined_at"]) for r in mine]))
        origin = f"quarantine@{version}"
    results, left = [], []
    done = taken_in(Path(table_path), origin)
    for fmt, name, text, positions in texts:
        change_set = read_checked(_reader(fmt), text, name, table_path, key, element_keys, False, declared=declared)
        for r in change_set.rejected:
            source, line, at = positions[r.line - 1]
            left.append({"origin": origin, "source": source, "line": line, "format": fmt, "reason": r.problem,
                         "record": r.text, "quarantined_at": at})
        if done is None:
            results.append(apply_changes(table_path, change_set, key, {ORIGIN: origin, "idivm.retry": version}))
        else:
            results.append(IngestResult(0, 0, 0, 0, 0, delta.version(table_path), len(change_set.rejected),
                                        name, replayed=int(done["version"])))
    quarantine.replace(pa.Table.from_pylist(left, schema=QUARANTINE_SCHEMA),
                       {"idivm.operation": "quarantine retry", ORIGIN: origin})
    result = IngestResult.total("quarantine", results, delta.version(table_path))
    return result if done is None else replace(result, replayed=int(done["version"]))


def read_checked(read, text: str, name: str, table_path: str | Path, key: tuple[str, ...],
                 element_keys: Mapping[str, Sequence[str]] | None, strict: bool,
                 schema: pa.Schema | None = None, declared: "DeclaredSchema | None" = None) -> ChangeSet:
    """The changes of ``text`` (file ``name``) as ``read`` gives them for the table at
    ``table_path`` (checked against its ``declared`` schema too), the upserts whose nested collections break their ``element_keys`` rejected
    too (``strict``: raised), and the updates by path made upserts of the rows they give
    (:func:`~idivm.ingest.idiff.resolve_patches`, which reads those rows).  ``schema``: the
    table's schema widened by the batch's new columns (``ingest --evolve``)."""
    schema = schema or delta.schema(table_path)
    change_set = read(text, name, schema, key, strict=strict, declared=declared)
    if element_keys:
        change_set = _check_element_keys(change_set, schema, element_keys, strict, text)

    def rows_of(keys: Sequence[tuple]) -> dict[tuple, dict]:
        wanted = set(keys)
        held = delta.read_arrow(table_path, delta.pin_of(table_path), holding=(key[0], list({k[0] for k in keys})))
        return {k: r for r in held.to_pylist() if (k := tuple(r[c] for c in key)) in wanted}

    def check_row(change: Change) -> None:
        if element_keys:
            _check_rows(schema, element_keys, name, [change])

    return resolve_patches(change_set, rows_of, element_keys, strict, check_row, text)


def _check_rows(schema, element_keys: Mapping[str, Sequence[str]], source: str, upserts: Sequence[Change]) -> None:
    """:class:`DataError` unless the nested collections of the rows of ``upserts`` keep their element keys."""
    from idivm.ingest.load import Rows, check_element_key

    rows = Rows(pa.Table.from_pylist([dict(c.row) for c in upserts], schema=schema), source, "line",
                [c.line for c in upserts])
    for path, cols in element_keys.items():
        check_element_key(rows, path, tuple(cols))


def _check_element_keys(change_set: ChangeSet, schema, element_keys: Mapping[str, Sequence[str]],
                        strict: bool, text: str) -> ChangeSet:
    """``change_set`` with the upserts whose nested collections break their element keys
    rejected (``strict``: the first such row raises)."""
    def check(upserts: Sequence[Change]) -> None:
        _check_rows(schema, element_keys, change_set.source, upserts)

    upserts = [c for c in change_set.changes if c.op == "upsert"]
    if not upserts:
        return change_set
    try:
        check(upserts)
        return change_set
    except DataError:
        if strict:
            raise
    bad: dict[int, str] = {}
    for c in upserts:  # the whole set breaks a key: find the rows that do, one by one
        try:
            check([c])
        except DataError as e:
            bad[c.line] = str(e).split(": ", 1)[-1]
    texts = dict(enumerate(text.splitlines(), 1))
    kept = tuple(c for c in change_set.changes if c.line not in bad)
    rejected = tuple(sorted([*change_set.rejected, *(Rejected(n, why, texts.get(n, "")) for n, why in bad.items())],
                            key=lambda r: r.line))
    return replace(change_set, changes=kept, records=change_set.records - len(bad), rejected=rejected)
