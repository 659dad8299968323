"""The Python entry point: a warehouse directory with its catalog, base tables and views.

``Warehouse`` opens the catalog eagerly and the SparkSession lazily: listing
tables, describing them and creating them from files or Arrow data use
delta-rs only, so they never start a JVM.  Anything that computes with Spark
goes through ``self.spark``, which creates the session on first use (or
returns the session given as ``spark=``).

Base tables are loaded (:mod:`idivm.ingest.load`) from JSON Lines, JSON arrays,
Parquet and CSV files, lists of dicts, Arrow tables or Spark DataFrames.
Everything is validated before anything is written (column names, types, key
present, non-null and unique), and a failed ``create_table`` leaves the
warehouse as it was.  Views are planned, materialized at one snapshot of their
base tables (their watermark), maintained, verified and explained here.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any


from idivm import types as T
from idivm.catalog import Catalog, TableEntry, ViewEntry
from idivm.errors import CatalogError, DataError
from idivm.ingest.load import (
    _spark_delta_schema, check_columns, check_element_key, check_element_key_type,
    check_key, check_spark_element_key, check_spark_key, idivm_schema, is_spark_dataframe, load_source,
    parse_element_keys, parse_key,
)
from idivm.storage import delta
from idivm.storage import layout as layouts
from idivm.storage import schema as schemas
from idivm.storage.layout import ACTION

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from idivm.ingest import IngestResult
    from idivm.program import Program
    from idivm.storage.compaction import Compaction

DEFAULT_WAREHOUSE = "./idivm-warehouse"
WAREHOUSE_ENV = "IDIVM_WAREHOUSE"




@dataclass(frozen=True, slots=True)
class TableInfo:
    """What ``tables()``/``table_info()`` report about a base table."""

    name: str
    key: tuple[str, ...]
    rows: int
    version: int
    schema: T.TupleType
    path: Path
    created: str
    #: declared keys of nested collections of tuples: path -> key columns
    element_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)


def view_watermark(path: Path, entry: ViewEntry | None = None) -> dict[str, int]:
    """The base-table versions the stored view (or cache) reflects: from the metadata of its
    latest commit that carries one (it lands atomically with the data), else the catalog's."""
    found = _commit_json(path, "idivm.watermark")
    if found is not None:
        return found
    return {t: int(v) for t, v in ((entry.extra.get("watermark") if entry else None) or {}).items()}


def _commit_json(path: Path, key: str) -> dict[str, int] | None:
    """The table -> version map ``key`` of the latest commit of ``path`` that carries it."""
    for commit in delta.history(path):
        if key in commit:
            return {t: int(v) for t, v in json.loads(commit[key]).items()}
    return None


def _read_changes(paths: Mapping[str, Path], old: Mapping[str, int], new: Mapping[str, int]) -> dict:
    """Each table's change data feed from ``old`` (exclusive) to ``new`` (where it moved)."""
    return {t: delta.read_changes(paths[t], old[t] + 1, v) for t, v in new.items() if v > old[t]}


def _cache_paths(catalog: Catalog, entry: ViewEntry) -> dict[str, Path]:
    """Cache name -> the path of the view's intermediate cache table."""
    return {c: catalog.root / rel for c, rel in entry.extra.get("caches", {}).items()}


def _versions(watermark: Mapping[str, int]) -> str:
    return ", ".join(f"{t}@{v}" for t, v in sorted(watermark.items()))


@dataclass(frozen=True, slots=True)
class MaintenanceResult:
    """One view's maintenance run: the strategy used, base-table change rows read, i-diff
    rows (base i-diffs after condensation and routing), view rows inserted / updated /
    deleted and rows written (Delta rewrites whole files), the view version committed (None:
    already up to date, nothing committed), old and new watermark, seconds."""

    name: str
    strategy: str
    changes: int
    version: int | None
    old_watermark: dict
    new_watermark: dict
    seconds: float
    diff_rows: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    rows_written: int = 0
    note: str = ""
    #: the comparison with the recomputation, when the run was checked (``verify_every``)
    verification: "Verification | None" = None
    #: the version that repaired the view, when the check found it differed
    repaired_version: int | None = None
    #: the tables the run compacted after its commits (:mod:`idivm.storage.compaction`)
    compacted: tuple["Compaction", ...] = ()

    @property
    def diverged(self) -> bool:
        return self.verification is not None and not self.verification.ok

    def summary(self) -> str:
        if self.version is None:
            return f"{self.name}: up to date at {_versions(self.new_watermark)} ({self.seconds:.1f} s)"
        note = f" ({self.note})" if self.note else ""
        line = (f"{self.name}: {self.strategy}{note}, {self.changes} change rows read, {self.diff_rows} i-diff rows, "
                f"+{self.inserted} ~{self.updated} -{self.deleted} rows ({self.rows_written} written), "
                f"now at {_versions(self.new_watermark)}, view version {self.version} ({self.seconds:.1f} s)")
        for c in self.compacted:
            line += f"; {c.summary()}"
        if self.diverged:
            v = self.verification
            line += (f"; DIVERGED from its recomputation ({v.missing} row(s) missing, {v.extra} unexpected), "
                     f"repaired by recomputation in version {self.repaired_version}")
        elif self.verification is not None:
            line += "; verified"
        return line


@dataclass(frozen=True, slots=True)
class Verification:
    """The result of :meth:`Warehouse.verify`: rows of the view missing from the stored view
    and stored rows the view does not have (as multisets), with a few examples of each."""

    name: str
    watermark: dict
    rows: int
    missing: int
    extra: int
    missing_examples: tuple
    extra_examples: tuple
    #: the same comparison for each intermediate cache of the view
    caches: tuple["Verification", ...] = ()

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.extra == 0 and all(c.ok for c in self.caches)

    def summary(self, what: str = "view") -> str:
        at = _versions(self.watermark)
        if self.missing == 0 and self.extra == 0:
            lines = [f"{what} {self.name} matches its recomputation at {at}: {self.rows} rows"]
        else:
            lines = [f"{what} {self.name} differs from its recomputation at {at}: "
                     f"{self.missing} row(s) missing, {self.extra} unexpected"]
        lines += [f"  missing:    {json.dumps(r, default=str, ensure_ascii=False)}" for r in self.missing_examples]
        lines += [f"  unexpected: {json.dumps(r, default=str, ensure_ascii=False)}" for r in self.extra_examples]
        lines += [c.summary("cache") for c in self.caches]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ViewInfo:
    """What ``views()``/``view_info()``/``define()`` report about a view."""

    name: str
    rows: int
    version: int
    schema: T.TupleType
    path: Path
    created: str
    strategy: str = "recompute"
    #: why ``auto`` recomputes, when the view has constructs without i-diff rules
    strategy_note: str = ""


#: maintenance strategies ``define`` accepts (see :meth:`Warehouse.define`)
STRATEGIES = ("id", "tuple", "recompute", "auto")
#: ``auto`` recomputes when a run reads more change rows than this fraction of the view's rows
AUTO_RECOMPUTE_RATIO = 0.25


class Warehouse:
    """A warehouse directory: ``catalog.json``, ``tables/<name>/``, ``views/<name>/``.

    ``path`` defaults to ``$IDIVM_WAREHOUSE`` or ``./idivm-warehouse``; the
    directory is created on the first write.  ``spark`` is an existing
    SparkSession to use as it is; otherwise one is created on first need with
    ``idivm.storage.spark.get_session(spark_master)``.  ``storage`` is the engine that writes
    what Spark computes (``delta-rs``, ``delta-spark``, ``delta-spark-dv``; default
    ``$IDIVM_STORAGE``, else ``delta-rs``; see :mod:`idivm.storage.delta`).
    """

    def __init__(self, path: str | os.PathLike | None = None, *, spark: "SparkSession | None" = None,
                 spark_master: str | None = None, storage: str | None = None):
        self.path = Path(path if path is not None else os.environ.get(WAREHOUSE_ENV) or DEFAULT_WAREHOUSE).absolute()
        #: the storage engine of what Spark computes (:func:`idivm.storage.delta.engine`)
        self.storage = delta.engine(storage)
        self._spark = spark
        self._spark_master = spark_master
        Catalog.load(self.path)  # fail early on a corrupt catalog or a path that is a file

    def __repr__(self) -> str:
        return f"Warehouse({str(self.path)!r})"

    @property
    def spark(self) -> "SparkSession":
        """The SparkSession, created on first use unless one was given."""
        if self._spark is None:
            from idivm.storage.spark import get_session

            self._spark = get_session(self._spark_master)
        return self._spark

    @property
    def catalog(self) -> Catalog:
        """The catalog as it is on disk now (re-read on every access)."""
        return Catalog.load(self.path)

    # --- base tables -----------------------------------------------------------------------------

    def create_table(self, name: str, key: str | Sequence[str], source: Any, *,
                     format: str | None = None,
                     element_keys: Mapping[str, str | Sequence[str]] | None = None) -> TableInfo:
        """Create base table ``name`` with primary key ``key`` from ``source``.

        ``source`` is a file path (format from ``format`` or the extension:
        ``.jsonl``/``.ndjson``, ``.json``, ``.parquet``/``.pq`` (file or
        directory), ``.csv``), a list of dicts, a pyarrow Table or a Spark
        DataFrame.  ``key`` is a column name, a comma-separated list or a list
        of names.  ``element_keys`` maps the path of a nested collection of
        tuples (``hours``, ``address.phones``) to its element key columns (as
        ``key``), which must be non-null and unique within each collection
        value.  Raises :class:`CatalogError` for a bad or taken name and
        :class:`DataError` for bad data; in both cases nothing is written.
        """
        catalog = self.catalog
        catalog.check_new_name(name, "table")
        key_columns = parse_key(key)
        declared = parse_element_keys(element_keys)
        rel = catalog.new_table_path(name)
        if (self.path / rel).exists():
            raise CatalogError(f"{self.path / rel} exists but table {name!r} is not in the catalog "
                               "(left over from an interrupted run?): remove it or choose another name")
        metadata = {"idivm.operation": "create table", "idivm.table": name}
        if is_spark_dataframe(source):
            df = source
            target = _spark_delta_schema(df)
            check_columns(target, "DataFrame")
            check_spark_key(df, key_columns, origin="DataFrame")
            schema = idivm_schema(target, "DataFrame")
            for path, columns in declared.items():
                check_element_key_type(schema, path, columns, "DataFrame")
                check_spark_element_key(df, key_columns, path, columns, "DataFrame")

            def write(p: Path) -> None:
                delta.write_spark(df, p, mode="error", commit_metadata=metadata, row_group_rows=delta.BASE_ROW_GROUP,
                                  engine=self.storage)
        else:
            rows = load_source(source, format=format)
            target = schemas.delta_schema(rows.table.schema)
            check_columns(target, rows.origin)
            check_key(rows, key_columns)
            schema = idivm_schema(target, rows.origin)
            for path, columns in declared.items():
                check_element_key_type(schema, path, columns, rows.origin)
                check_element_key(rows, path, columns)

            def write(p: Path) -> None:
                delta.create_table(p, rows.table, schema=target, commit_metadata=metadata,
                                   row_group_rows=delta.BASE_ROW_GROUP)
        entry = TableEntry(name=name, key=key_columns, schema=schema, path=rel, element_keys=declared)
        self._install([(rel, write)], lambda cat: cat.add_table(entry))
        return self.table_info(name)

    def tables(self) -> list[TableInfo]:
        """All base tables, sorted by name."""
        catalog = self.catalog
        return [self._info(catalog, catalog.tables[n]) for n in sorted(catalog.tables)]

    def table_info(self, name: str) -> TableInfo:
        """Key, row count, version and schema of base table ``name``."""
        catalog = self.catalog
        return self._info(catalog, catalog.table(name))

    def table_path(self, name: str) -> Path:
        """The Delta table directory of base table ``name``."""
        catalog = self.catalog
        return catalog.path_of(catalog.table(name))

    def read_table(self, name: str, version: int | None = None) -> "DataFrame":
        """Base table ``name`` (at Delta ``version``, default latest) as a Spark DataFrame."""
        path = self.table_path(name)  # an unknown name fails before Spark starts
        return delta.read_spark(self.spark, path, version, engine=self.storage)

    def ingest(self, table: str, path: str | os.PathLike, format: str = "debezium") -> "IngestResult":
        """Apply the changes in file ``path`` to base table ``table`` in one Delta commit.

        ``format`` is ``debezium`` (Debezium change events, bare or in the
        Kafka Connect envelope) or ``rows`` (whole rows are upserts, a line
        ``{"__delete": {<key columns>}}`` deletes); see :mod:`idivm.ingest`.
        Every record is checked against the table's schema and key first: a
        bad one raises :class:`DataError` naming ``file:line`` and nothing is
        applied.  A file without changes commits nothing.  Needs no Spark.
        """
        from idivm.ingest import ingest_file

        catalog = self.catalog
        entry = catalog.table(table)
        return ingest_file(catalog.path_of(entry), path, tuple(entry.key), format=format,
                           element_keys=entry.element_keys)

    # --- views -----------------------------------------------------------------------------------

    def define(self, text_or_path: str | os.PathLike, strategy: str = "auto") -> "ViewInfo":
        """Plan and materialize the view of a ``CREATE VIEW`` text (or a ``.sqlpp`` file).

        ``strategy`` is how :meth:`maintain` keeps it fresh: ``id`` (ID-based i-diffs,
        thesis ch. 2), ``tuple`` (classical tuple-based IVM with t-diffs, §2.1),
        ``recompute``, or ``auto``: ``id`` unless the view has constructs without i-diff
        rules or a run's change set is large relative to the view, then ``recompute``.
        Syntax errors, unknown names, views ``id``/``tuple`` cannot maintain and bad data
        raise before anything is written; the view's Delta table and its catalog entry
        land together.
        """
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
        text, filename = sqlpp_source(text_or_path)
        catalog = self.catalog
        program = self._compile(catalog, text, filename, strategy, strict=True)
        view_name, prov, script, note = program.name, program.prov, program.script, program.note
        catalog.check_new_name(view_name, "view")
        # one snapshot: every base table at the version it has now (the view's watermark)
        watermark = self._current_versions(catalog, prov.plan)
        df = self._evaluate_at(catalog, prov.plan, watermark)
        rel = catalog.new_view_path(view_name)
        metadata = {"idivm.operation": "define view", "idivm.view": view_name,
                    "idivm.watermark": json.dumps(watermark, sort_keys=True)}
        extra = {"ids": [{"column": c, "name": n} for c, n in prov.view_ids], "watermark": watermark, "strategy": strategy}
        if note:
            extra["strategy_note"] = note
        writes = [(f"{rel}.{PROGRAM_DIR}", lambda p: _write_program(p, program))]
        if script is not None:
            # intermediate caches: materialized at the same snapshot, committed with the view
            caches = {}
            for i, cache in enumerate(script.caches, 1):
                crel = f"{rel}.caches/{i}"
                cdf = self._evaluate_at(catalog, cache.plan, watermark)
                cmeta = {**metadata, "idivm.operation": "define cache", "idivm.cache": cache.name}
                if caches:  # the versions of the caches before it (which it may read)
                    cmeta["idivm.caches"] = json.dumps({c: 0 for c in caches}, sort_keys=True)
                writes.append((crel, lambda p, d=cdf, m=cmeta: delta.write_spark(
                    d, p, mode="error", commit_metadata=m, engine=self.storage, deletion_vectors=True)))
                caches[cache.name] = crel
            if caches:
                extra["caches"] = caches
                metadata["idivm.caches"] = json.dumps({c: 0 for c in caches}, sort_keys=True)
        entry = ViewEntry(name=view_name, text=text, schema=program.type, path=rel, extra=extra)
        from idivm.exec.materialize import data_errors

        strategy = script.strategy if script is not None else None
        ids = [c for c, _ in prov.view_ids]
        writes.insert(0, (rel, lambda p: layouts.write_view(df, p, "error", metadata, ids, strategy, self.storage)))
        with data_errors(view_name):
            self._install(writes, lambda cat: cat.add_view(entry))
            if script is not None and script.strategy == "id":
                # the global provenance indexes (§2.15), from the view just written; a crash
                # before they land leaves them to the next maintenance run, which builds them
                from idivm.exec import indexes

                path = self.catalog.path_of(self.catalog.view(view_name))
                for index in _stored_indexes(program, path):
                    indexes.build(index, path, delta.version(path), metadata, self.storage)
        return self.view_info(view_name)

    def maintain(self, name: str | None = None, *, progress: Callable[[str], None] | None = None,
                 use_indexes: bool = True, verify_every: int | None = None) -> list["MaintenanceResult"]:
        """Bring view ``name`` (default: every view) up to date with its base tables.

        The current version of every base table the view reads is pinned (the new
        watermark); if none moved since the view's watermark nothing is committed.
        Otherwise the view's strategy computes its changes — the Δ-script's i-diffs
        (``id``, ``tuple``) or a recomputation — and they land in ONE Delta commit
        (a MERGE, or an overwrite) whose metadata carries the new watermark, so readers
        see the old or the new view, never a mix, and a crash leaves the old one.

        ID-based runs find the top-level rows that hold the nested elements an i-diff names
        through the view's global provenance indexes (§2.15.3), and maintain them in the same
        run, each in its own commit after the view's.  ``use_indexes=False`` finds them by
        scanning the view instead and leaves the indexes alone (the next run that uses them
        rebuilds them first).

        ``verify_every=N`` checks every N-th run of a view (a run that commits a view version
        divisible by N) against the view's recomputation (:meth:`verify`); a view that differs
        is reported (``MaintenanceResult.verification``, and a warning through ``progress``)
        and repaired by overwriting it with the recomputation (``repaired_version``).
        """
        if verify_every is not None and verify_every < 1:
            raise ValueError(f"verify_every must be a positive number of runs, not {verify_every}")
        catalog = self.catalog
        names = [name] if name is not None else sorted(catalog.views)
        results = []
        for n in names:
            result = self._maintain_one(catalog, n, progress, use_indexes)
            if verify_every and result.version is not None and result.version % verify_every == 0:
                check = self.verify(n)
                result = replace(result, verification=check)
                if not check.ok:
                    if progress:
                        progress(f"WARNING: {check.summary()}\n{n}: repairing by recomputation")
                    result = replace(result, repaired_version=self._repair(self.catalog, n))
            results.append(result)
        return results

    def _maintain_one(self, catalog: Catalog, view_name: str, progress, use_indexes: bool = True
                      ) -> "MaintenanceResult":
        import time

        from idivm.exec.materialize import data_errors

        started = time.monotonic()
        entry = catalog.view(view_name)
        path = catalog.path_of(entry)
        program = self._program(catalog, entry)
        prov = program.prov
        strategy = entry.extra.get("strategy", "recompute")
        old = view_watermark(path, entry)
        new = self._current_versions(catalog, prov.plan)
        if new == old:
            return MaintenanceResult(view_name, strategy, 0, None, old, new, time.monotonic() - started)
        missing = sorted(set(new) - set(old))
        if missing:
            raise CatalogError(f"view {view_name} records no version of {', '.join(missing)}; define it again")
        tables = {t: catalog.path_of(catalog.table(t)) for t in new}
        changes = _read_changes(tables, old, new)
        n_changes = sum(c.num_rows for c in changes.values())
        metadata = {"idivm.operation": "maintain", "idivm.view": view_name,
                    "idivm.watermark": json.dumps(new, sort_keys=True)}
        note, script, planned = "", None, None
        if strategy in ("id", "tuple", "auto"):
            script, note = program.script, program.note
            planned = script
            if script is not None and not script.id_columns:
                script, note = None, "a view without IDs (a single tuple) is recomputed"
            if strategy == "auto" and script is not None:
                rows = delta.row_count(path)
                if n_changes > AUTO_RECOMPUTE_RATIO * max(rows, 1):
                    script, note = None, f"{n_changes} change rows for {rows} view rows"
        cache_paths = _cache_paths(catalog, entry)
        if script is None:
            if progress:
                progress(f"{view_name}: recomputing at {_versions(new)}")
            version, rows, written = self._recompute(catalog, view_name, prov, planned, new, metadata, cache_paths)
            return MaintenanceResult(view_name, "recompute", n_changes, version, old, new,
                                     time.monotonic() - started, inserted=rows, rows_written=rows + written,
                                     note=note)
        metadata["idivm.strategy"] = script.strategy
        diff_rows = written = 0
        with data_errors(view_name):
            # caches first (§2.4 pass 3), in order: each from the versions of the base tables and
            # of the earlier caches it reflects (after a crash between a cache's commit and the
            # next one's, the committed caches are already there and are not redone)
            cache_new: dict[str, int] = {}
            for cache in script.caches:
                cpath = cache_paths[cache.name]
                c_old = view_watermark(cpath)
                if c_old != new:
                    cmeta = {**metadata, "idivm.operation": "maintain cache", "idivm.cache": cache.name}
                    cchanges = changes if c_old == old else _read_changes(tables, c_old, new)
                    if cache_new:
                        cmeta["idivm.caches"] = json.dumps(cache_new, sort_keys=True)
                    stats = self._apply_script(cache.script, cpath, tables, c_old, new, cchanges, cmeta, progress,
                                               cache_paths, cache_new)
                    diff_rows += stats["diff_rows"]
                    written += stats["rows_written"]
                cache_new[cache.name] = delta.version(cpath)
            if cache_new:
                metadata["idivm.caches"] = json.dumps(cache_new, sort_keys=True)
            stored = _stored_indexes(program, path) if use_indexes and script.strategy == "id" else []
            layout = layouts.view_layout(delta.schema(path).names, [c for c, _ in prov.view_ids], script.strategy)
            stats = self._apply_script(script, path, tables, old, new, changes, metadata, progress,
                                       cache_paths, cache_new, stored, layout)
            compacted = self._compact(view_name, path, layout, [cache_paths[c.name] for c in script.caches],
                                      stored, progress)
        return MaintenanceResult(view_name, script.strategy, n_changes, stats["version"], old, new,
                                 time.monotonic() - started, diff_rows=diff_rows + stats["diff_rows"],
                                 inserted=stats["inserted"], updated=stats["updated"], deleted=stats["deleted"],
                                 rows_written=written + stats["rows_written"], note=note, compacted=compacted)

    def _compact(self, view_name: str, path: Path, layout: "layouts.Layout | None", caches: Sequence[Path],
                 stored_indexes: Sequence, progress) -> tuple["Compaction", ...]:
        """Compact the tables an ID- or tuple-based run wrote that have drifted past the
        compaction policy (:mod:`idivm.storage.compaction`): the view in its layout, its
        caches, its index tables in their order."""
        from idivm.exec import indexes
        from idivm.storage.compaction import compact_if_needed

        tables = [(view_name, path, layout.keys if layout else (), layout.file_bytes if layout else layouts.FILE_BYTES,
                   layout.row_group_rows if layout else None)]
        tables += [(f"{view_name} cache {p.name}", p, (), layouts.FILE_BYTES, None) for p in caches]
        tables += [(f"{view_name} index {i.path(path).name}", i.path(path), i.order, indexes.INDEX_FILE_BYTES,
                    None) for i in stored_indexes]
        done = []
        for name, table, order, file_bytes, row_group_rows in tables:
            compaction = compact_if_needed(self.spark, table, name, order=order, target_file_bytes=file_bytes,
                                           row_group_rows=row_group_rows, engine=self.storage)
            if compaction is not None:
                if progress:
                    progress(f"{view_name}: {compaction.summary()}")
                done.append(compaction)
        return tuple(done)

    def _recompute(self, catalog: Catalog, view_name: str, prov, planned, at: Mapping[str, int],
                   metadata: dict, cache_paths: Mapping[str, Path]) -> tuple[int, int, int]:
        """Recompute view ``view_name`` (and its caches, so that the next ID-based run starts
        from them) at base-table versions ``at`` and overwrite it in one commit carrying
        ``metadata``: (view version, view rows, cache rows written)."""
        from idivm.exec.materialize import data_errors

        entry = catalog.view(view_name)
        path = catalog.path_of(entry)
        metadata = dict(metadata)
        written = 0
        if planned is not None and cache_paths:
            versions = {}
            for cache in planned.caches:
                cdf = self._evaluate_at(catalog, cache.plan, at)
                cmeta = {**metadata, "idivm.cache": cache.name, "idivm.strategy": "recompute"}
                if versions:
                    cmeta["idivm.caches"] = json.dumps(versions, sort_keys=True)
                with data_errors(view_name):
                    versions[cache.name] = delta.write_spark(cdf, cache_paths[cache.name], mode="overwrite",
                                                             commit_metadata=cmeta, engine=self.storage,
                                                             deletion_vectors=True)
                written += delta.row_count(cache_paths[cache.name])
            metadata["idivm.caches"] = json.dumps(versions, sort_keys=True)
        df = self._evaluate_at(catalog, prov.plan, at)
        metadata["idivm.strategy"] = "recompute"
        with data_errors(view_name):
            version = layouts.write_view(df, path, "overwrite", metadata, [c for c, _ in prov.view_ids],
                                         planned.strategy if planned is not None else None, self.storage)
        return version, delta.row_count(path), written

    def _repair(self, catalog: Catalog, view_name: str) -> int:
        """Overwrite view ``view_name`` with its recomputation at its watermark (after
        :meth:`verify` found it differs): the new view version."""
        entry = catalog.view(view_name)
        program = self._program(catalog, entry)
        prov = program.prov
        watermark = view_watermark(catalog.path_of(entry), entry)
        planned = program.script if entry.extra.get("strategy") in ("id", "tuple", "auto") else None
        metadata = {"idivm.operation": "repair", "idivm.view": view_name,
                    "idivm.watermark": json.dumps(watermark, sort_keys=True)}
        version, _, _ = self._recompute(catalog, view_name, prov, planned, watermark, metadata,
                                        _cache_paths(catalog, entry))
        return version

    def _program(self, catalog: Catalog, entry: ViewEntry) -> "Program":
        """The compiled program of a view: the one ``define`` stored, or, for a view defined by
        another version of idivm, compiled again from its text and stored for the next runs."""
        from idivm import program as programs

        folder = self.path / f"{entry.path}.{PROGRAM_DIR}"
        try:
            stored = programs.from_json(json.loads((folder / PROGRAM_FILE).read_text(encoding="utf-8")))
        except FileNotFoundError:
            stored = None
        except ValueError as e:
            raise CatalogError(f"the stored program of view {entry.name} is unreadable ({e}); define it again")
        if stored is not None:
            return stored
        program = self._compile(catalog, entry.text, f"<view {entry.name}>", entry.extra.get("strategy", "recompute"),
                                strict=False, caches=bool(entry.extra.get("caches")))
        folder.mkdir(parents=True, exist_ok=True)
        _write_program(folder, program)
        return program

    def _compile(self, catalog: Catalog, text: str, filename: str | None, strategy: str, strict: bool,
                 caches: bool = True) -> "Program":
        """Parse, plan and generate the maintenance of a view of ``strategy`` (:class:`Program`).
        ``strict``: a view ``id`` or ``tuple`` cannot maintain is an error (else it is recomputed);
        ``caches``: whether the script may use intermediate caches."""
        from idivm.program import Program
        from idivm.provenance.indexes import select_indexes

        view, prov = self._plan(text, filename, catalog)
        script, note = None, ""
        if strategy in ("id", "tuple", "auto"):
            script, note = self._script(catalog, view, prov, text, filename, "id" if strategy == "auto" else strategy,
                                        strict=strict and strategy != "auto", caches=caches)
        selection = select_indexes(view.plan, prov, self._signatures(catalog, view)) \
            if script is not None and script.strategy == "id" else None
        return Program(view.name, view.type, view.plan, prov, script, note, selection)

    def _script(self, catalog: Catalog, view, prov, text: str, filename: str | None,
                strategy: str, strict: bool, caches: bool = True):
        """(Δ-script, "") or, when the view has constructs without rules and not ``strict``,
        (None, the reason); ``strict`` raises the error (with the view text) instead.
        ``caches``: whether the script may use intermediate caches (a view defined without
        them is maintained without them)."""
        from idivm.errors import UnsupportedError
        from idivm.generator.caches import generate_view

        if prov.unknown is not None:
            if strict:
                raise prov.unknown
            return None, f"recompute: {prov.unknown.message}"
        base = catalog.base_tables()
        try:
            return generate_view(view.name, view.plan, prov, base.keys, base.types, base.element_keys,
                                 strategy, caches=caches), ""
        except UnsupportedError as e:
            if strict:
                raise e.with_source(text, filename)
            return None, f"recompute: {e.message}"

    @staticmethod
    def _signatures(catalog: Catalog, view):
        """The view's base-table i-diff signatures (§2.5, §2.14.1)."""
        from idivm.diffs.base_signatures import generate_base_signatures

        base = catalog.base_tables()
        return generate_base_signatures(view.plan, base.keys, base.types, base.element_keys)

    def _apply_script(self, script, path: Path, tables: Mapping[str, Path], old: Mapping[str, int],
                      new: Mapping[str, int], changes, metadata, progress,
                      cache_paths: Mapping[str, Path] | None = None,
                      cache_versions: Mapping[str, int] | None = None,
                      stored_indexes: Sequence = (), layout: layouts.Layout | None = None) -> dict:
        """Run ``script`` on the changes since ``old`` and MERGE them into the table at ``path``
        (the view or a cache), one commit; ``tables``: the base tables, ``changes`` their change
        data feeds from ``old`` to ``new``.  The caches the script reads (of ``cache_paths``) are
        read from the versions the table at ``path`` reflects (its last commit's
        ``idivm.caches``) to ``cache_versions``.  ``stored_indexes``: the view's index tables,
        brought to the view's version first if they lag, read to find the rows of nested
        updates and maintained after the view's commit.  ``layout``: the view's, which a run
        reads and rewrites only the files of (None: the changes are MERGEd)."""
        import pyarrow as pa
        from pyspark.sql import functions as F

        from idivm.exec import indexes
        from idivm.exec.delta_script import base_diffs, evaluate
        from idivm.storage.spark import IN_MEMORY_MAX_ROWS

        read = [t.table for t in script.tables if t.table in (cache_paths or {})]
        if read:
            reflected = _commit_json(path, "idivm.caches") or {}
            missing = [c for c in read if c not in reflected or c not in (cache_versions or {})]
            if missing:
                raise CatalogError(f"{script.view} records no version of its caches {', '.join(missing)}; "
                                   "define the view again")
            paths = {c: cache_paths[c] for c in read}  # type: ignore[index]
            tables = {**tables, **paths}
            old = {**old, **{c: reflected[c] for c in read}}
            new = {**new, **{c: cache_versions[c] for c in read}}  # type: ignore[index]
            changes = {**changes, **_read_changes(paths, old, {c: new[c] for c in read})}

        schemas = {t: delta.schema(tables[t], new[t]) for t in new}
        diffs = base_diffs(script, changes, schemas)
        if progress:
            progress(f"{script.view}: {diffs.change_rows} change rows -> {diffs.rows()} i-diff rows "
                     f"({diffs.dropped} dropped: attributes the view does not read)")

        def read_state(table: str, state: str):
            version = old[table] if state == "@pre" else new[table]
            return delta.read_spark(self.spark, tables[table], version, engine=self.storage)

        index_rows = indexes.refresh(stored_indexes, path, metadata, progress, script.view, self.storage)

        def locate(statement, keys):
            """The IDs of the view rows holding the elements a nested update names, by index."""
            named = keys.select(*[F.col(f"`{c}`").alias(p) for p, c in statement.match]).toArrow()
            found = indexes.locate(stored_indexes, path, statement, named, progress, script.view)
            if found is None or found.num_rows:
                return found if found is None else self.spark.createDataFrame(found)
            return self.spark.createDataFrame([], view.select(*found.column_names).schema)

        version = delta.version(path)
        view = delta.read_spark(self.spark, path, version, engine=self.storage)

        def read_view(column: str, values: Sequence) -> "DataFrame":
            """The view's rows in the files that may hold these values of ``column``."""
            return delta.read_spark(self.spark, path, version, holding=(column, values), engine=self.storage)

        by_spark = self.storage.spark or delta.needs_delta_spark(path)
        result = evaluate(self.spark, script, diffs, read_state, view, progress,
                          locate if stored_indexes else None,
                          read_view if layout is not None else None,
                          in_memory_max_rows=IN_MEMORY_MAX_ROWS if by_spark else None)
        if by_spark:
            try:
                stats = self._merge_by_spark(script, path, view, result, metadata, progress, stored_indexes)
            finally:
                result.release()
            stats["diff_rows"] = diffs.rows()
            stats["rows_written"] += index_rows
            return stats
        try:
            if result.direct is not None:
                statement, query = result.direct
                rows = query.toArrow()
            else:
                upserts = result.upserts.toArrow()
                deletes = result.deletes(upserts)
        finally:
            result.release()
        target = delta.schema(path, version)
        columns = [f.name for f in target]
        rewrite = None
        if result.direct is not None:
            # the i-diff's rows, matched to the view rows by its (partial) IDs: one per row
            if progress:
                progress(f"{script.view}: merging {rows.num_rows} i-diff rows ({statement.kind})")
            metrics = delta.merge_arrow(path, rows, *_direct_merge(statement), commit_metadata=metadata)
        elif layout is not None:
            if progress:
                progress(f"{script.view}: rewriting the files of {upserts.num_rows} upserts and "
                         f"{deletes.num_rows} deletes")
            rewrite = delta.rewrite_clustered(path, upserts, deletes, script.id_columns, commit_metadata=metadata,
                                              row_group_rows=layout.row_group_rows, file_bytes=layout.file_bytes)
            metrics = rewrite.metrics
        else:
            ups = upserts.append_column(ACTION, pa.array(["upsert"] * upserts.num_rows, pa.string()))
            dels = pa.table({f.name: (deletes.column(f.name) if f.name in deletes.column_names
                                      else pa.nulls(deletes.num_rows, f.type)) for f in target})
            dels = dels.append_column(ACTION, pa.array(["delete"] * dels.num_rows, pa.string()))
            source = pa.concat_tables([ups.select(dels.column_names).cast(dels.schema), dels])
            if progress:
                progress(f"{script.view}: merging {ups.num_rows} upserts and {dels.num_rows} deletes")
            metrics = delta.merge_arrow(path, source, *_upsert_merge(script.id_columns, columns),
                                        commit_metadata=metadata)
        stats = _landed(metrics, stored_indexes, path, metadata, upserts if rewrite is not None else None,
                        rewrite.removed if rewrite is not None else None, self.storage)
        stats["diff_rows"] = diffs.rows()
        stats["rows_written"] += index_rows
        return stats

    def _merge_by_spark(self, script, path: Path, view: "DataFrame", result, metadata, progress,
                        stored_indexes: Sequence) -> dict:
        """Land a run's changes ``result`` in the table at ``path`` (whose rows at the run's
        start are ``view``) with one delta-spark MERGE executed by Spark: the rows are not
        collected.  The view's index tables, kept by delta-rs, are brought along from the rows
        the MERGE replaced or deleted (read from ``view``) and its upserts, which are collected
        (as many as the run changes) only when there are indexes."""
        from pyspark.sql import functions as F

        if result.direct is not None:
            # the i-diff's rows, matched to the view rows by its (partial) IDs: one per row
            statement, query = result.direct
            if progress:
                progress(f"{script.view}: merging the i-diff rows ({statement.kind}) by delta-spark")
            metrics = delta.merge_spark(path, query, *_direct_merge(statement), commit_metadata=metadata)
            upserts = removed = None
        else:
            ids = list(script.id_columns)
            columns = [f.name for f in view.schema.fields]
            upserts_df = result.upserts.select(*[F.col(f"`{c}`") for c in columns])
            deleted = result.deleted
            on = [deleted[f"`{c}`"].eqNullSafe(upserts_df[f"`{c}`"]) for c in ids]
            deletes = deleted.join(upserts_df, on, "left_anti") if on else deleted
            source = upserts_df.withColumn(ACTION, F.lit("upsert")).unionByName(
                deletes.withColumn(ACTION, F.lit("delete")), allowMissingColumns=True)
            if stored_indexes:  # the rows the MERGE replaces or deletes, as they were
                named = source.select(*[F.col(f"`{c}`") for c in ids])
                removed = view.join(named, [view[f"`{c}`"].eqNullSafe(named[f"`{c}`"]) for c in ids],
                                    "left_semi").toArrow()
                upserts = upserts_df.toArrow()
            else:
                upserts = removed = None
            if progress:
                progress(f"{script.view}: merging the upserts and deletes by delta-spark")
            metrics = delta.merge_spark(path, source, *_upsert_merge(ids, columns), commit_metadata=metadata)
        return _landed(metrics, stored_indexes, path, metadata, upserts, removed, self.storage)

    def verify(self, name: str, limit: int = 5) -> "Verification":
        """Recompute view ``name`` from scratch at its watermark (the base-table versions it
        reflects) and compare it with the stored view, hidden IDs included, as bags."""
        from idivm.exec.materialize import tables_read

        catalog = self.catalog
        entry = catalog.view(name)
        program = self._program(catalog, entry)  # what maintain executes
        prov = program.prov
        watermark = view_watermark(catalog.path_of(entry), entry)
        missing = sorted(set(tables_read(prov.plan)) - set(watermark))
        if missing:
            raise CatalogError(f"view {name} records no version of {', '.join(missing)}; define it again")
        caches = []
        if entry.extra.get("caches"):
            for cache in program.script.caches if program.script is not None else ():
                cpath = catalog.root / entry.extra["caches"][cache.name]
                caches.append(self._compare(cache.name, cache.plan, cpath, view_watermark(cpath), limit))
        own = self._compare(name, prov.plan, catalog.path_of(entry), watermark, limit)
        return replace(own, caches=tuple(caches))

    def _compare(self, name: str, plan, path: Path, watermark: Mapping[str, int], limit: int) -> "Verification":
        """The stored table at ``path`` compared with ``plan`` recomputed at ``watermark``."""
        from idivm.exec.materialize import compare_frames, data_errors

        expected = self._evaluate_at(self.catalog, plan, watermark)
        stored = delta.read_spark(self.spark, path, engine=self.storage)
        with data_errors(name):
            diff = compare_frames(stored, expected, limit)
        return Verification(name, dict(watermark), diff.rows, diff.missing, diff.extra,
                            diff.missing_examples, diff.extra_examples)

    def views(self) -> list["ViewInfo"]:
        """All views, sorted by name."""
        catalog = self.catalog
        return [self._view_info(catalog, catalog.views[n]) for n in sorted(catalog.views)]

    def view_info(self, name: str) -> "ViewInfo":
        catalog = self.catalog
        return self._view_info(catalog, catalog.view(name))

    def read(self, name: str) -> "DataFrame":
        """View ``name`` as a Spark DataFrame of its user-visible columns."""
        from idivm.exec.materialize import user_visible

        catalog = self.catalog
        path = catalog.path_of(catalog.view(name))  # an unknown name fails before Spark starts
        return user_visible(delta.read_spark(self.spark, path, engine=self.storage))

    def rows(self, name: str, limit: int | None = None) -> list[dict]:
        """View ``name`` as plain Python values (user-visible columns only)."""
        from idivm.exec.materialize import collect_rows

        return collect_rows(self.read(name), limit)

    def explain(self, name_or_text: str | os.PathLike, format: str = "text") -> str:
        """What idivm knows about a defined view (by name) or a ``CREATE VIEW`` text or file:
        plan, IDs, base-table signatures, global provenance indexes and Δ-script, as text or JSON
        (``format="json"``)."""
        catalog = self.catalog
        if isinstance(name_or_text, str) and name_or_text in catalog.views:
            text, filename = catalog.view(name_or_text).text, f"<view {name_or_text}>"
        else:
            text, filename = sqlpp_source(name_or_text)
        view, prov = self._plan(text, filename, catalog)
        from idivm.exec.indexes import describe, resolve
        from idivm.explain import Explanation
        from idivm.provenance.indexes import select_indexes

        signatures = self._signatures(catalog, view)
        indexes = select_indexes(view.plan, prov, signatures)
        script, note = self._script(catalog, view, prov, text, filename, "id", strict=False)
        stored = None
        if isinstance(name_or_text, str) and name_or_text in catalog.views \
                and catalog.view(name_or_text).extra.get("strategy") in ("id", "auto"):
            path = catalog.path_of(catalog.view(name_or_text))
            stored = resolve(indexes, delta.schema(path), prov.view_ids,
                             script.statements if script is not None else ())
        notes = describe(indexes, stored, script.statements if script is not None else ())
        return Explanation(view, prov, signatures, script, note, indexes, notes).render(format)

    def _plan(self, text: str, filename: str | None, catalog: Catalog):
        """Parse, plan and infer provenance; errors carry the view text."""
        from idivm.algebra.builder import build_view
        from idivm.errors import IdivmError, UnknownIdsError
        from idivm.provenance.ids import infer_provenance, without_ids
        from idivm.sqlpp import parse_view

        base = catalog.base_tables()
        try:
            view = build_view(parse_view(text, filename), base.types)
            try:
                return view, infer_provenance(view.plan, base.keys, base.types, base.element_keys)
            except UnknownIdsError as e:  # recomputed (auto, recompute); id and tuple refuse it
                return view, without_ids(view.plan, e.with_source(text, filename))
        except IdivmError as e:
            raise e.with_source(text, filename)

    def _current_versions(self, catalog: Catalog, plan) -> dict[str, int]:
        """The current version of every base table ``plan`` reads."""
        from idivm.exec.materialize import tables_read

        return {t: delta.version(catalog.path_of(catalog.table(t))) for t in tables_read(plan)}

    def _evaluate_at(self, catalog: Catalog, plan, versions: Mapping[str, int]) -> "DataFrame":
        """``plan`` evaluated with every base table read at its version in ``versions``."""
        from idivm.exec.materialize import evaluate_plan

        return evaluate_plan(self.spark, plan,
                             lambda t: delta.read_spark(self.spark, catalog.path_of(catalog.table(t)), versions[t],
                                                         engine=self.storage))

    def _view_info(self, catalog: Catalog, entry: ViewEntry) -> "ViewInfo":
        path = catalog.path_of(entry)
        return ViewInfo(name=entry.name, rows=delta.row_count(path), version=delta.version(path),
                        schema=entry.schema, path=path, created=entry.created,
                        strategy=entry.extra.get("strategy", "recompute"),
                        strategy_note=entry.extra.get("strategy_note", ""))

    # --- shared machinery ------------------------------------------------------------------------

    def _info(self, catalog: Catalog, entry: TableEntry) -> TableInfo:
        path = catalog.path_of(entry)
        return TableInfo(name=entry.name, key=tuple(entry.key), rows=delta.row_count(path),
                         version=delta.version(path), schema=entry.schema, path=path, created=entry.created,
                         element_keys={p: tuple(k) for p, k in entry.element_keys.items()})

    def _install(self, writes: Sequence[tuple[str, Callable[[Path], Any]]],
                 register: Callable[[Catalog], None]) -> None:
        """Write new Delta tables at ``<warehouse>/<rel>`` and register them in the catalog, all
        or nothing.

        Each ``write(staging_dir)`` writes its table into a hidden staging directory
        next to its final place; once all are written they are renamed into place and
        ``register(catalog)`` records them; the catalog is saved last.  On any
        failure the staging/final directories and any directories this call
        created are removed and the catalog file is left untouched.
        """
        finals = [self.path / rel for rel, _ in writes]
        stagings = [f.parent / f".{f.name}.creating-{uuid.uuid4().hex[:12]}" for f in finals]
        created_dirs: list[Path] = []
        for f in finals:
            created_dirs += [d for d in (f.parent, *f.parent.parents) if not d.exists() and d not in created_dirs]
        placed: list[Path] = []
        try:
            for (_, write), final, staging in zip(writes, finals, stagings):
                final.parent.mkdir(parents=True, exist_ok=True)
                write(staging)
            for final, staging in zip(finals, stagings):
                os.rename(staging, final)
                placed.append(final)
            catalog = self.catalog
            register(catalog)
            catalog.save()
        except BaseException:
            for d in stagings + placed:
                shutil.rmtree(d, ignore_errors=True)
            for d in sorted(created_dirs, key=lambda d: len(d.parts), reverse=True):  # deepest first
                try:
                    d.rmdir()
                except OSError:
                    pass
            raise


#: the directory beside a view's table holding its compiled program (:mod:`idivm.program`)
PROGRAM_DIR = "program"
PROGRAM_FILE = "program.json"


def _write_program(folder: Path, program) -> None:
    """Store ``program`` in ``folder`` (replacing one stored there, atomically)."""
    from idivm import program as programs

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{PROGRAM_FILE}.{uuid.uuid4().hex[:12]}"
    temporary.write_text(json.dumps(programs.to_json(program), separators=(",", ":")), encoding="utf-8")
    os.replace(temporary, folder / PROGRAM_FILE)


def _stored_indexes(program, path: Path) -> list:
    """The view's global provenance indexes that are stored as tables (§2.15): those the
    statements of its script read, laid out over the stored view's schema."""
    from idivm.exec import indexes

    if program.indexes is None or program.script is None:
        return []
    return indexes.resolve(program.indexes, delta.schema(path), program.prov.view_ids, program.script.statements)


def _direct_merge(statement) -> tuple[str, list]:
    """(predicate, clauses) of the MERGE of an update or increment ``statement``'s i-diff rows
    (``s``) into the view (``t``), matched by the statement's (partial) IDs."""
    q = delta.quoted
    sets = {q(c): (q(v, "s") if statement.kind == "update" else f"{q(c, 't')} + {q(v, 's')}")
            for c, v in statement.set}
    return _same(statement.on), [delta.MatchedUpdate(sets)]


def _upsert_merge(ids: Sequence[str], columns: Sequence[str]) -> tuple[str, list]:
    """(predicate, clauses) of the MERGE of upserts and deletes (rows ``s`` whose ACTION column
    says which) into the table (``t``) by its ID columns ``ids``."""
    assign = {delta.quoted(c): delta.quoted(c, "s") for c in columns}
    action = delta.quoted(ACTION, "s")
    return _same(ids), [delta.MatchedDelete(f"{action} = 'delete'"), delta.MatchedUpdate(assign),
                        delta.NotMatchedInsert(assign, f"{action} = 'upsert'")]


def _same(columns: Sequence[str]) -> str:
    return " AND ".join(f"({delta.quoted(c, 't')} IS NOT DISTINCT FROM {delta.quoted(c, 's')})" for c in columns)


def _landed(metrics: Mapping[str, Any], stored_indexes: Sequence, path: Path, metadata,
            upserts, removed, engine: "delta.Engine" = delta.DELTA_RS) -> dict:
    """A run's statistics from its commit's ``metrics``, after bringing the view's index tables to
    that commit: from the rows it ``removed`` (as they were) and its ``upserts``, or, when they
    are not known (None), rebuilt from the view."""
    from idivm.exec import indexes

    index_rows = 0
    for index in stored_indexes:
        if removed is not None:
            index_rows += indexes.apply(index, path, metrics["version"], metadata, upserts, removed)
        else:
            index_rows += indexes.build(index, path, metrics["version"], metadata, engine)
    return {"version": metrics["version"],
            "inserted": int(metrics.get("num_target_rows_inserted") or 0),
            "updated": int(metrics.get("num_target_rows_updated") or 0),
            "deleted": int(metrics.get("num_target_rows_deleted") or 0),
            "rows_written": int(metrics.get("num_output_rows") or 0) + index_rows}


def sqlpp_source(text_or_path: str | os.PathLike) -> tuple[str, str | None]:
    """(text, file name) of a view given as SQL++ text or as a path to a file holding it."""
    if isinstance(text_or_path, os.PathLike) or (
            isinstance(text_or_path, str) and "\n" not in text_or_path
            and (text_or_path.endswith(".sqlpp") or os.path.isfile(text_or_path))):
        path = os.fspath(text_or_path)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), path
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"cannot read {path}: {e.strerror if isinstance(e, OSError) else e}") from None
    return str(text_or_path), None


