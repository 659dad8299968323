"""The clustered layout of a table written by delta-rs: rows ordered by a key in files of
narrow, disjoint key ranges (:func:`write_clustered`), kept by a rewrite in the driver of the
files an upsert, a delete or a patch names (:func:`rewrite_clustered`, copy-on-write)."""

from __future__ import annotations

import bisect
import json
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from idivm.storage import schema as schemas
from idivm.storage.delta.commits import _commit_properties, count
from idivm.storage.delta.table import (
    TABLE_CONFIGURATION,
    PathLike,
    _by_low,
    _check_driver_readable,
    _File,
    _files,
    _read_file,
    _sorted_values,
    open_table,
    committing,
    keep_writer,
    repin,
)


def key_mask(table: pa.Table, keys: Sequence[str], wanted: pa.Table) -> pa.Array:
    """Which rows of ``table`` have the key (``keys``, NULL-safe) of a row of ``wanted``: a
    first filter by the first key's values, then the exact match of the few rows it keeps.
    Keys that are lists or structs (which Arrow cannot look up) match by their JSON text."""
    if any(pa.types.is_nested(table.schema.field(k).type) for k in keys):
        def text(t: pa.Table) -> list[str]:
            return [_json_text(list(r.values())) for r in t.select(list(keys)).to_pylist()]
        named = set(text(wanted))
        return pa.array([t in named for t in text(table)], pa.bool_())
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


def _json_text(value: Any) -> str:
    """A value's canonical JSON text: how keys Arrow cannot sort, group or look up (lists,
    structs) are ordered, told apart and matched."""
    return json.dumps(value, sort_keys=True, default=str)


def distinct_rows(table: pa.Table) -> pa.Table:
    """The distinct rows of ``table`` (NULL equal to NULL), in no order.  Arrow groups by no
    lists or structs: rows with such columns are told apart by their JSON text."""
    if not table.num_rows:
        return table
    if not any(pa.types.is_nested(f.type) for f in table.schema):
        return table.group_by(table.column_names).aggregate([]).select(table.column_names)
    seen: dict[str, int] = {}
    for i, row in enumerate(table.to_pylist()):
        seen.setdefault(_json_text(row), i)
    return table.take(pa.array(list(seen.values()), pa.int64()))


def ordered(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``table`` sorted by ``keys`` (NULLs first): the order of a clustered table's rows.  Arrow
    sorts no lists or structs (a view grouped by an array has such IDs): those keys sort by their
    JSON text, an order as deterministic, which is all a clustered table needs of keys without
    file statistics."""
    if not any(pa.types.is_nested(table.schema.field(k).type) for k in keys):
        return table.sort_by([(k, "ascending", "at_start") for k in keys])
    columns = {}
    for i, k in enumerate(keys):
        column = table.column(k)
        if pa.types.is_nested(column.type):
            column = pa.array([None if v is None else _json_text(v) for v in column.to_pylist()], pa.string())
        columns[f"k{i}"] = column
    order = pc.sort_indices(pa.table(columns), sort_keys=[(c, "ascending", "at_start") for c in columns])
    return table.take(order)


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

    def __init__(self, root: Path, row_group_rows: int | None, now: int | None = None):
        self.root, self.row_group_rows = root, row_group_rows
        self.actions: list = []
        self.rows = 0
        self.now = int(time.time() * 1000) if now is None else now

    def take(self, other: "_NewFiles") -> None:
        """Count the files ``other`` wrote as written here, after those written so far."""
        self.actions += other.actions
        self.rows += other.rows

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
    count()


class Patching(Protocol):
    """A change of the stored rows a rewrite names by columns ``on``: those whose ``on``
    equal (NULL-safely) the ``on`` of a row of ``rows`` (at most one row per value of
    ``on``).  :meth:`changed` gives the rows as they become."""

    on: tuple[str, ...]
    rows: pa.Table

    def prepared(self, schema: pa.Schema) -> "Patching":
        """This patch made ready, once per rewrite, for the rows of a table of ``schema``."""
        ...

    def changed(self, stored: pa.Table, hits: Sequence[int], at: Sequence[int]) -> pa.Table:
        """``stored`` (rows of the table, in its types) with the rows at positions ``hits``
        changed, each by the row of ``rows`` at the same place of ``at``."""
        ...


@dataclass(frozen=True)
class Patch:
    """An update or an increment of the stored rows whose columns ``on`` equal (NULL-safely)
    those of a row of ``rows``: for each ``(column, value)`` of ``set``, the row's ``column``
    becomes (``update``) or grows by (``increment``) that row's ``value``.  ``rows`` holds at
    most one row per value of ``on`` (an effective i-diff, thesis §2.2)."""

    kind: Literal["update", "increment"]
    on: tuple[str, ...]
    set: tuple[tuple[str, str], ...]
    rows: pa.Table

    def prepared(self, schema: pa.Schema) -> "Patch":
        return self

    def changed(self, stored: pa.Table, hits: Sequence[int], at: Sequence[int]) -> pa.Table:
        values = self.rows.take(list(at))
        for column, value in self.set:
            old = stored.column(column)
            new = pc.cast(values.column(value), old.type)
            if self.kind == "increment":
                new = pc.cast(pc.add(old.take(list(hits)), new), old.type)
            stored = replaced(stored, column, hits, new.to_pylist())
        return stored


def replaced(table: pa.Table, column: str, at: Sequence[int], values: Sequence) -> pa.Table:
    """``table`` with ``column`` holding ``values`` (Python values) at the rows ``at``."""
    old = table.column(column)
    merged = old.to_pylist()
    for i, v in zip(at, values):
        merged[i] = v
    return table.set_column(table.schema.get_field_index(column), table.schema.field(column),
                            pa.array(merged, old.type))


@dataclass(frozen=True)
class _Ready:
    """A patch made ready for a table once, for every file it is applied to: its ``on``
    columns cast to the table's types (``keys``) and the row of each of their values (``at``)."""

    patch: Patching
    keys: pa.Table
    at: dict[tuple, int]

    @classmethod
    def of(cls, patch: Patching, schema: pa.Schema) -> "_Ready":
        on = list(patch.on)
        keys = patch.rows.select(on).cast(pa.schema([schema.field(c) for c in on]))
        return cls(patch.prepared(schema), keys, {tuple(r.values()): i for i, r in enumerate(keys.to_pylist())})


def _patched(table: pa.Table, patches: Sequence[_Ready]) -> pa.Array | None:
    """Which rows of ``table`` a patch names (None: none)."""
    mask = None
    for p in patches:
        hit = key_mask(table, p.patch.on, p.keys)
        mask = hit if mask is None else pc.or_(mask, hit)
    return mask if mask is not None and pc.any(mask).as_py() else None


def _apply_patches(rows: pa.Table, patches: Sequence[_Ready]) -> pa.Table:
    """``rows`` with ``patches`` applied in order, each to the rows it names."""
    for p in patches:
        named = [p.at.get(tuple(r.values())) for r in rows.select(list(p.patch.on)).to_pylist()]
        hits = [i for i, n in enumerate(named) if n is not None]
        if hits:
            rows = p.patch.changed(rows, hits, [named[i] for i in hits])
    return rows


@dataclass(frozen=True)
class Rewrite:
    """What :func:`rewrite_clustered` did: its metrics (named as :func:`merge_arrow`'s, with
    the new ``version``) and the rows it removed (those whose key an upsert or a delete named,
    as they were before)."""

    metrics: dict[str, Any]
    removed: pa.Table
    #: the rows a patch changed, as they became (as they were, they are among ``removed``)
    patched: pa.Table


def rewrite_clustered(path: PathLike, upserts: pa.Table, deletes: pa.Table, keys: Sequence[str], *,
                      patches: Sequence[Patching] = (), commit_metadata: Mapping[str, Any] | None = None,
                      row_group_rows: int | None = None, file_bytes: int) -> Rewrite:
    """Upsert ``upserts`` (whole rows) into the table at ``path`` and delete the rows whose
    ``keys`` equal (NULL-safely) those of a row of ``deletes``, and apply ``patches`` to the
    other rows they name, in one commit that rewrites only the files that may hold those rows.

    The rows with the key of a row of ``upserts`` or ``deletes`` are removed, and the rows of
    ``upserts`` inserted: with unique keys, an upsert replaces the row with its key or is
    inserted (``num_target_rows_updated`` counts the rows replaced, ``..._inserted`` the
    upserts whose key was not there).

    The files to rewrite are those whose statistics of the first key column admit a named
    value (all of them when they have none), so the rewrite is exact on any layout.  It is
    cheap on the layout :func:`write_clustered` gives rows ordered by ``keys`` (and
    :func:`~idivm.storage.delta.write_spark` a DataFrame, with ``file_bytes``): files of
    narrow, disjoint key ranges.  The rewrite keeps that layout.  An inserted row goes to the file whose range starts last at
    or below its key (the first file for a key below all of them or NULL), each rewritten file
    is written ordered by ``keys``, and one that grows past twice ``file_bytes`` is split.

    The commit removes the rewritten files and adds the new ones; the metrics also land in its
    metadata (``idivm.rewrite``).  Its change data feed, which has no change files, is read as
    a delete of the rewritten files' rows and an insert of the new ones.  ``row_group_rows``
    caps the rows of a row group, as in :func:`merge_arrow`.

    A patch names rows by its columns ``on``: the files that may hold them are those whose
    statistics admit its values of the first key column when ``on`` has that column, else
    every file; a file none of whose rows changes is not rewritten.  The rows patched count
    as updated.
    """
    from deltalake.transaction import RemoveAction

    if not keys:
        raise ValueError("rewrite_clustered needs at least one key column")
    dt = open_table(path, to_write=True)
    _check_driver_readable(dt, path)
    table_schema = schemas.as_arrow_schema(dt.schema().to_arrow())
    upserts = schemas.conform(upserts.select(table_schema.names), table_schema)
    upsert_keys = upserts.select(list(keys))
    named = pa.concat_tables([upsert_keys, deletes.select(list(keys)).cast(upsert_keys.schema)])
    files = _by_low(_files(dt, keys[0]))
    nested = pa.types.is_nested(table_schema.field(keys[0]).type)
    if nested:  # a list or struct key: no statistics, no range to place a row by
        touched = {f.path for f in files}
        homes = {(files[0].path if files else None): list(range(upserts.num_rows))} if upserts.num_rows else {}
    else:
        values, null = _sorted_values(pc.unique(named.column(keys[0])).to_pylist())
        touched = {f.path for f in files if f.may_hold(values, null)}
        homes = _homes(files, upserts.column(keys[0]).to_pylist())
        touched.update(h for h in homes if h is not None)
    ready = [_Ready.of(p, table_schema) for p in patches if p.rows.num_rows]
    for r in ready:
        if keys[0] in r.patch.on and not nested:
            p_values, p_null = _sorted_values(pc.unique(r.keys.column(keys[0])).to_pylist())
            touched.update(f.path for f in files if f.may_hold(p_values, p_null))
        else:
            touched.update(f.path for f in files)

    root = Path(path)
    new = _NewFiles(root, row_group_rows)

    def rewritten(f: _File) -> _Rewritten | None:
        """The file ``f`` rewritten into new files of its own (None: no row of it changes)."""
        old = _read_file(root, f, table_schema)
        hit = key_mask(old, keys, named) if named.num_rows else pa.repeat(False, old.num_rows)
        mine = homes.get(f.path, [])
        kept = old.filter(pc.invert(hit))
        changing = _patched(kept, ready) if ready else None
        if not mine and changing is None and not pc.any(hit).as_py():
            return None
        matched = old.filter(hit)
        n = int(pc.sum(key_mask(matched, keys, upsert_keys)).as_py() or 0) if matched.num_rows else 0
        done = _Rewritten(f, _NewFiles(root, row_group_rows, new.now), [matched], [], n, matched.num_rows - n)
        if changing is not None:
            before = kept.filter(changing)
            after = _apply_patches(before, ready)
            done.found.append(before)
            done.patched.append(after)
            done.updated += after.num_rows
            kept = pa.concat_tables([kept.filter(pc.invert(changing)), after])
        done.copied = kept.num_rows - (0 if changing is None else int(pc.sum(changing).as_py()))
        rows = pa.concat_tables([kept, upserts.take(mine)]) if mine else kept
        if rows.num_rows:
            rows = ordered(rows, keys) if mine or changing is not None else rows
            done.files.write(rows, _rows_per_file(old, file_bytes) if old.num_rows else _rows_per_file(rows, file_bytes),
                             slack=2)
        return done

    removed: list = []
    updated = deleted = copied = 0
    found: list[pa.Table] = [table_schema.empty_table()]  # the rows removed
    patched: list[pa.Table] = [table_schema.empty_table()]  # the rows patched, as they became
    for done in _each_in_threads(rewritten, [f for f in files if f.path in touched]):
        if done is None:
            continue  # no row of the file changes
        updated, deleted, copied = updated + done.updated, deleted + done.deleted, copied + done.copied
        found += done.found
        patched += done.patched
        removed.append(RemoveAction(done.file.path, True, new.now, done.file.size, {}))
        new.take(done.files)
    if None in homes:  # the table had no file (every other home is a file rewritten above)
        rows = ordered(upserts.take(homes[None]), keys)
        new.write(rows, _rows_per_file(rows, file_bytes))
    removed_rows = pa.concat_tables(found)
    patched_rows = pa.concat_tables(patched)
    replaced = key_mask(upsert_keys, keys, removed_rows) if removed_rows.num_rows and upserts.num_rows else None
    inserted = upserts.num_rows - (int(pc.sum(replaced).as_py() or 0) if replaced is not None else 0)
    stats = {"num_source_rows": named.num_rows, "num_target_rows_inserted": inserted,
             "num_target_rows_updated": updated, "num_target_rows_deleted": deleted,
             "num_target_rows_copied": copied, "num_output_rows": new.rows,
             "num_target_files_added": len(new.actions), "num_target_files_removed": len(removed)}
    if new.actions or removed or commit_metadata:
        metadata = {**(commit_metadata or {}), "idivm.rewrite": json.dumps(stats, sort_keys=True)}
        with committing(path):
            dt.create_write_transaction([*removed, *new.actions], mode="append", schema=dt.schema(),
                                        commit_properties=_commit_properties(metadata, path))
        count()
    dt.update_incremental()
    stats["version"] = dt.version()
    repin(path, stats["version"])
    keep_writer(path, dt)
    return Rewrite(stats, removed_rows, patched_rows)


@dataclass
class _Rewritten:
    """One file of a rewrite: the new files its rows went to, the rows it removed (``found``)
    and patched (as they became), and its counts."""

    file: _File
    files: _NewFiles
    found: list[pa.Table]
    patched: list[pa.Table]
    updated: int
    deleted: int
    copied: int = 0


def _each_in_threads(work: Callable[[_File], _Rewritten | None], files: Sequence[_File]) -> list[_Rewritten | None]:
    """``work`` of each of ``files``, in their order, on as many threads as the machine has
    cores: decoding, filtering, encoding and writing Parquet release the GIL, so the files of a
    rewrite are rewritten side by side."""
    threads = min(len(files), os.cpu_count() or 1)
    if threads <= 1:
        return [work(f) for f in files]
    with ThreadPoolExecutor(threads, thread_name_prefix="idivm-rewrite") as pool:
        return list(pool.map(work, files))


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

