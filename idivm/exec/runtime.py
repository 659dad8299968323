"""The maintenance of a view (thesis §2.4 pass 3): a run from the view's watermark to the
current versions of its base tables.

A run pins the current version of every base table the view reads (the new watermark; a view
read by another counts as one of its base tables, at its last committed version), reads each
table's change data feed since the view's watermark, and, by the view's strategy,
evaluates the Δ-script of its stored program (:mod:`idivm.exec.programs`) on the condensed
changes (:mod:`idivm.exec.delta_script`) or recomputes the view.  The intermediate caches are
maintained first, each in its own commit recording what it reflects; then the view's
changes land in one commit with the new watermark (:mod:`idivm.exec.commit`), its index
tables follow (:mod:`idivm.exec.indexes`), and the tables past the compaction policy are
compacted (:mod:`idivm.storage.compaction`).  A watermark is read from the metadata of the
latest commit that carries one, so it lands atomically with the data it describes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from idivm.catalog import Catalog, ViewEntry
from idivm.errors import CatalogError, ConcurrentWriteError
from idivm.exec import commit, history, meter
from idivm.exec.programs import load_program, program_folder, stored_indexes, write_program
from idivm.provenance.ids import HIDDEN
from idivm.script import PRE, StateRef
from idivm.storage import delta
from idivm.storage import layout as layouts
from idivm.storage.spark import by_name, to_arrow

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from idivm.program import Program
    from idivm.storage.compaction import Compaction


def view_watermark(path: Path, entry: ViewEntry | None = None) -> dict[str, int]:
    """The base-table versions the stored view (or cache) reflects: from the metadata of its
    latest commit that carries one (it lands atomically with the data), else the catalog's."""
    found = commit_json(path, "idivm.watermark")
    if found is not None:
        return found
    return {t: int(v) for t, v in ((entry.extra.get("watermark") if entry else None) or {}).items()}


def commit_json(path: Path, key: str) -> dict[str, int] | None:
    """The table -> version map ``key`` of the latest commit of ``path`` that carries it."""
    c = latest_commit_with(path, key)
    return None if c is None else {t: int(v) for t, v in json.loads(c[key]).items()}


def latest_commit_with(path: Path, key: str) -> dict | None:
    """The latest commit of ``path`` whose metadata has ``key`` (:func:`delta.history`'s dict):
    read from the last commit, which nearly always does, else from the whole history (which
    grows by a commit a run)."""
    for limit in (1, None):
        for c in delta.history(path, limit):
            if key in c:
                return c
    return None


def maps_state(path: Path) -> tuple[dict[str, int], dict[str, int] | None]:
    """The map versions the view stored at ``path`` last named (its latest commit carrying
    ``idivm.maps``), and the base-table versions that commit reflects (None: no such commit).
    After an ``auto`` run recomputed the view alone, they are behind the view's watermark."""
    c = latest_commit_with(path, "idivm.maps")
    if c is None:
        return {}, None
    watermark = c.get("idivm.watermark")
    return ({m: int(v) for m, v in json.loads(c["idivm.maps"]).items()},
            None if watermark is None else {t: int(v) for t, v in json.loads(watermark).items()})


def cache_maps(cache_path: Path, cache) -> dict[str, Path]:
    """Where the maps of a maps cache (:mod:`idivm.generator.maps_caches`) stored at
    ``cache_path`` are: ``<cache_path>.maps/<map>``."""
    return {m: cache_path.parent / f"{cache_path.name}.maps" / m for m in cache.maps.program.maps}


def base_rows_at(catalog: Catalog, versions: Mapping[str, int]) -> int:
    """The rows of the base tables at ``versions`` (what a recomputation reads)."""
    return sum(delta.row_count(catalog.input_path(t), v) for t, v in versions.items())


def base_rows_after(catalog: Catalog, versions: Mapping[str, int], runs: Sequence[history.Record],
                    changes: Mapping[str, "pa.Table"]) -> int:
    """The rows of the base tables after a run of an ``auto`` view reading ``changes`` up to
    ``versions``: the last record's rows plus those the changes insert less those they delete
    (a statistic: no table is opened), counted from the tables' logs when there is no record
    and every :data:`~idivm.exec.history.REFRESH` runs."""
    import pyarrow.compute as pc

    if not runs or len(runs) % history.REFRESH == 0:
        return base_rows_at(catalog, versions)
    net = 0
    for c in changes.values():
        kinds = c.column("_change_type")
        net += pc.sum(pc.equal(kinds, "insert")).as_py() or 0
        net -= pc.sum(pc.equal(kinds, "delete")).as_py() or 0
    return max(runs[-1].base_rows + net, 0)


def maps_paths(catalog: Catalog, entry: ViewEntry, program: "Program") -> dict[str, Path]:
    """Where the maps of a view are: the tables ``define`` wrote, or, for an ``auto`` view that
    ``id`` maintains, where a run builds them when ``auto`` first tries them
    (``<view>.maps/<map>``, as ``define`` names them)."""
    if entry.extra.get("maps"):
        return {m: catalog.root / rel for m, rel in entry.extra["maps"].items()}
    if program.maps is None or entry.extra.get("strategy") != "auto":
        return {}
    return {m: catalog.root / f"{entry.path}.maps/{m}" for m in program.maps.program.maps}


def maps_built(entry: ViewEntry, paths: Mapping[str, Path]) -> bool:
    """Whether the maps of a view, at ``paths`` (:func:`maps_paths`), are there: those
    ``define`` wrote, or an ``auto`` view's once a run has built them all."""
    return bool(paths) and (bool(entry.extra.get("maps")) or all(delta.exists(p) for p in paths.values()))


@dataclass(frozen=True)
class AutoChoices:
    """What an ``auto`` view may be maintained by besides recomputation: its incremental
    strategies (the view's own first), those whose tables other runs leave behind, and those
    whose tables are not built yet (with the number of tables)."""

    incremental: tuple[str, ...]
    stateful: frozenset[str]
    unbuilt: dict[str, int]


def auto_choices(catalog: Catalog, program: "Program", entry: ViewEntry,
                 runs: Sequence[history.Record]) -> AutoChoices:
    """The incremental strategies of an ``auto`` view with the recorded ``runs``: ``id`` when
    its program has a Δ-script with IDs, ``maps`` when it has maps (for an aggregate view
    ``id`` also maintains, built by the run that first tries them:
    :func:`idivm.exec.history.choose`; until a maps run is recorded they count as not built,
    even if a run that built them stopped before its commit)."""
    incremental, stateful, unbuilt = [], set(), {}
    script = program.script
    if script is not None and script.id_columns:
        incremental.append("id")
        if script.caches:
            stateful.add("id")
    paths = maps_paths(catalog, entry, program)
    if paths:
        incremental.append("maps")
        stateful.add("maps")
        if not maps_built(entry, paths) or (not entry.extra.get("maps") and
                                            not any(r.strategy == "maps" for r in runs)):
            unbuilt["maps"] = len(paths)
    return AutoChoices(tuple(incremental), frozenset(stateful), unbuilt)


#: how many times a run starts again after another run of its view committed first
CONCURRENT_ATTEMPTS = 3

#: the maps whose increments delta-rs MERGEs at once (:meth:`Runtime._advance_maps`)
MAP_WRITERS = 4

#: the Spark schemas of maps' γ rows, by the identity of their maps plan (and the schemas of the
#: tables they read): :meth:`Runtime.group_schema`
_GROUP_SCHEMAS: dict[int, tuple] = {}

#: the rows of a run's batch and of the maps its statements read up to which the statements run
#: in the driver over Arrow tables (:meth:`Runtime._advance_maps`)
LOCAL_MAPS_MAX_ROWS = 20_000_000


def behind(watermark: Mapping[str, int], other: Mapping[str, int]) -> bool:
    """Whether ``watermark`` reflects no base-table version later than ``other`` does."""
    return all(v <= other.get(t, -1) for t, v in watermark.items())


def unmoved(path: Path, watermark: Mapping[str, int], what: str) -> int:
    """The version of the table at ``path`` (a view or cache), after checking that it still
    reflects ``watermark``, which a run read when it began (else another run has committed since:
    :class:`ConcurrentWriteError`)."""
    version = delta.version(path)
    reflected = commit_json(path, "idivm.watermark")
    if reflected is not None and reflected != dict(watermark):
        raise ConcurrentWriteError(f"{what} moved to {versions_text(reflected)} while this run, from "
                                   f"{versions_text(watermark)}, computed its changes; nothing was committed")
    return version


def version_at(path: Path, watermark: Mapping[str, int], what: str) -> int:
    """The version of the table at ``path`` (a cache) whose commit reflects ``watermark``."""
    for c in delta.history(path):
        if "idivm.watermark" in c and json.loads(c["idivm.watermark"]) == dict(watermark):
            return int(c["version"])
    raise CatalogError(f"{what} has no version at {versions_text(watermark)}; define the view again")


def commit_rows(commit: Mapping) -> int:
    """The rows a commit changed, from its operation metrics (delta-rs's or delta-spark's names)."""
    metrics = commit.get("operationMetrics") or {}
    names = (("num_target_rows_inserted", "num_target_rows_updated", "num_target_rows_deleted"),
             ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted"),
             ("num_added_rows",), ("numOutputRows",))
    for group in names:
        found = [int(metrics[n]) for n in group if metrics.get(n) is not None]
        if found:
            return sum(found)
    return 1


def capped(tables: Mapping[str, Path], old: Mapping[str, int], new: Mapping[str, int], max_changes: int) -> dict:
    """Versions between ``old`` and ``new`` of the base tables ``tables`` such that the commits
    in between change about ``max_changes`` rows at most: commits are taken in the order they
    were made (across tables) while their rows fit, and always the first one."""
    commits = []
    for t, path in tables.items():
        if new[t] > old[t]:
            commits += [(int(c.get("timestamp") or 0), t, int(c["version"]), commit_rows(c))
                        for c in delta.history(path, delta.version(path) - old[t])
                        if old[t] < int(c["version"]) <= new[t]]
    chosen, rows = dict(old), 0
    for _, t, version, n in sorted(commits, key=lambda c: (c[0], c[1], c[2])):
        if rows and rows + n > max_changes:
            break
        rows += n
        chosen[t] = version
    return chosen


def readable_changes(view_name: str, paths: Mapping[str, Path], old: Mapping[str, int],
                     new: Mapping[str, int]) -> dict:
    """:func:`read_changes` for a run of view ``view_name``; changes that cannot be read any
    more (the files or commits of those versions removed by VACUUM or log clean-up) are a
    :class:`CatalogError` saying how to rebuild the view."""
    try:
        return read_changes(paths, old, new)
    except Exception as e:  # noqa: BLE001 - whatever the engine raises for missing versions or files
        tables = ", ".join(f"{t}@{old[t] + 1}..{v}" for t, v in sorted(new.items()) if v > old[t])
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise CatalogError(f"view {view_name} cannot read the changes of {tables} ({detail}); if those versions "
                           f"were vacuumed, rebuild it with 'idivm refresh {view_name} --full'") from e


def read_changes(paths: Mapping[str, Path], old: Mapping[str, int], new: Mapping[str, int]) -> dict:
    """Each table's change data feed from ``old`` (exclusive) to ``new`` (where it moved)."""
    return {t: delta.read_changes(paths[t], old[t] + 1, v) for t, v in new.items() if v > old[t]}


def cache_paths(catalog: Catalog, entry: ViewEntry) -> dict[str, Path]:
    """Cache name -> the path of the view's intermediate cache table."""
    return {c: catalog.root / rel for c, rel in entry.extra.get("caches", {}).items()}


def current_versions(catalog: Catalog, plan) -> dict[str, int]:
    """The current version of every base table and view ``plan`` reads (a view read by another
    is at its last committed version: reading it does not maintain it)."""
    from idivm.exec.materialize import tables_read

    return {t: delta.version(catalog.input_path(t)) for t in tables_read(plan)}


def versions_text(watermark: Mapping[str, int]) -> str:
    return ", ".join(f"{t}@{v}" for t, v in sorted(watermark.items()))


@dataclass(frozen=True, slots=True)
class Run:
    """What one maintenance run of a view did; :class:`idivm.warehouse.MaintenanceResult` adds the
    view's name, the time and the check of the run."""

    strategy: str
    changes: int
    version: int | None
    old_watermark: dict
    new_watermark: dict
    diff_rows: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    rows_written: int = 0
    note: str = ""
    compacted: tuple["Compaction", ...] = ()
    #: what the run cost: seconds and Spark jobs by phase, commits
    cost: "meter.Cost | None" = None
    #: the rows of the base tables at the new watermark, counted for an ``auto`` run's choice
    base_rows: int | None = None
    #: an ``auto`` run that left the tables of its other strategies behind (a recomputation of
    #: the view alone, or a run of one incremental strategy)
    lagged: bool = False
    #: the seconds the run spent building maps that were not there (an ``auto`` view's first
    #: maps run): not counted in the run's record, which estimates the strategy's runs
    built_seconds: float = 0.0


#: the seconds the write of a view being defined took, by the view's path (:func:`_timed`)
_WRITTEN: dict[Path, float] = {}


def _timed(view: Path, write: Callable[[Path], object]) -> Callable[[Path], object]:
    """``write``, recording the seconds it takes as those of the view stored at ``view``
    (:meth:`Runtime.record_definition`): the view's own write, which computes it, and not its
    caches' or maps', which a recomputation by ``auto`` does not write."""
    def timed(path: Path) -> object:
        started = time.perf_counter()
        try:
            return write(path)
        finally:
            _WRITTEN[view] = time.perf_counter() - started
    return timed


class Runtime:
    """Materializes and maintains the views of a warehouse.  ``spark`` is a function giving the
    SparkSession (created on first need), ``storage`` the engine that writes what Spark
    computes."""

    def __init__(self, spark: Callable[[], "SparkSession"], storage: "delta.Engine"):
        self._spark = spark
        self.storage = storage

    @property
    def spark(self) -> "SparkSession":
        return self._spark()

    def evaluate_at(self, catalog: Catalog, plan, versions: Mapping[str, int]) -> "DataFrame":
        """``plan`` evaluated with every base table read at its version in ``versions``."""
        from idivm.exec.materialize import evaluate_plan

        return evaluate_plan(self.spark, plan,
                             lambda t: delta.read_spark(self.spark, catalog.input_path(t), versions[t],
                                                         engine=self.storage))

    def materialize(self, catalog: Catalog, program: "Program", rel: str, strategy: str
                    ) -> tuple[list[tuple[str, Callable[[Path], object]]], dict, dict]:
        """What ``define`` writes for the view of ``program`` of ``strategy``, to be stored at
        ``rel``: the view, its program and its intermediate caches, computed at one snapshot
        (every base table at the version it has now, the view's watermark).  (writes: the
        relative path of each and the function that writes it at a given path; the catalog
        entry's ``extra``; the view commit's metadata.)"""
        prov, script = program.prov, program.script
        _WRITTEN.pop(catalog.root / rel, None)  # of an earlier define that failed
        watermark = current_versions(catalog, prov.plan)
        if program.maps is not None:
            from idivm.agca.translate import Untranslatable
            from idivm.exec import maps as mapping

            try:
                mapping.check_types(program.maps, self.group_schema(program.maps, self.reader(catalog, watermark)))
            except Untranslatable as e:
                if strategy == "maps":
                    raise
                program = replace(program, maps=None, note=f"{program.note}; {e.message}")  # auto recomputes
        for cache in script.caches if script is not None else ():
            if cache.maps is not None:  # a view defined with maps caches (strategy maps)
                from idivm.exec import maps as mapping

                mapping.check_types(cache.maps, self.group_schema(cache.maps, self.reader(catalog, watermark)))
        df = self.evaluate_at(catalog, prov.plan, watermark)
        metadata = {"idivm.operation": "define view", "idivm.view": program.name,
                    "idivm.watermark": json.dumps(watermark, sort_keys=True)}
        extra = {"ids": [{"column": c, "name": n} for c, n in prov.view_ids], "watermark": watermark,
                 "strategy": strategy, "inputs": list(watermark)}
        if program.note:
            extra["strategy_note"] = program.note
        if program.warnings:
            extra["warnings"] = list(program.warnings)
        for table, column in program.absent_columns:  # refused by ingest --evolve (Warehouse.ingest)
            extra.setdefault("absent_columns", {}).setdefault(table, []).append(column)
        writes: list[tuple[str, Callable[[Path], object]]] = [
            (program_folder(rel), lambda p: write_program(p, program))]
        if script is not None:
            # intermediate caches: materialized at the same snapshot, committed with the view
            caches = {}
            for i, cache in enumerate(script.caches, 1):
                crel = f"{rel}.caches/{i}"
                cdf = self.evaluate_at(catalog, cache.plan, watermark)
                cmeta = {**metadata, "idivm.operation": "define cache", "idivm.cache": cache.name}
                if caches:  # the versions of the caches before it (which it may read)
                    cmeta["idivm.caches"] = json.dumps({c: 0 for c in caches}, sort_keys=True)
                if cache.maps is not None:  # its maps, of the same snapshot, committed with it
                    from idivm.exec import maps as mapping

                    located = cache_maps(catalog.root / crel, cache)
                    for m, mdf in mapping.initial_maps(self.spark, cache.maps, self.reader(catalog, watermark),
                                                       reevaluated=True).items():
                        mmeta = {**metadata, "idivm.operation": "define map", "idivm.cache": cache.name,
                                 "idivm.map": m}
                        writes.append((str(located[m].relative_to(catalog.root)),
                                       lambda p, d=mdf, mm=mmeta: delta.write_spark(
                                           d, p, mode="error", commit_metadata=mm, engine=self.storage,
                                           deletion_vectors=True)))
                    cmeta["idivm.maps"] = json.dumps({m: 0 for m in located}, sort_keys=True)
                writes.append((crel, lambda p, d=cdf, m=cmeta: delta.write_spark(
                    d, p, mode="error", commit_metadata=m, engine=self.storage, deletion_vectors=True)))
                caches[cache.name] = crel
            if caches:
                extra["caches"] = caches
                metadata["idivm.caches"] = json.dumps({c: 0 for c in caches}, sort_keys=True)
        if program.maps is not None and not (strategy == "auto" and script is not None):
            # the maps (of the same snapshot), committed with the view (an auto view that id
            # maintains builds them when a run first tries them)
            from idivm.exec import maps as mapping

            read = self.reader(catalog, watermark)
            written = {}
            for name, mdf in mapping.initial_maps(self.spark, program.maps, read, reevaluated=True).items():
                mrel = f"{rel}.maps/{name}"
                mmeta = {**metadata, "idivm.operation": "define map", "idivm.map": name}
                writes.append((mrel, lambda p, d=mdf, m=mmeta: delta.write_spark(
                    d, p, mode="error", commit_metadata=m, engine=self.storage, deletion_vectors=True)))
                written[name] = mrel
            extra["maps"] = written
            metadata["idivm.maps"] = json.dumps({n: 0 for n in written}, sort_keys=True)
        ids = [c for c, _ in prov.view_ids]
        maintained_by = "maps" if "maps" in extra else script.strategy if script is not None else None
        writes.insert(0, (rel, _timed(catalog.root / rel, lambda p: layouts.write_view(df, p, "error", metadata, ids,
                                                                              maintained_by, self.storage))))
        return writes, extra, metadata

    def reader(self, catalog: Catalog, versions: Mapping[str, int]) -> Callable[[str], "DataFrame"]:
        """Base table name -> its rows at its version in ``versions``."""
        return lambda t: delta.read_spark(self.spark, catalog.input_path(t), versions[t],
                                          engine=self.storage)

    def group_schema(self, mp, read: Callable[[str], "DataFrame"], inputs: Mapping[str, Path] | None = None,
                     at: Mapping[str, int] | None = None):
        """The Spark schema of the rows of the γ the maps ``mp`` maintain (planned, not run).
        Given the ``inputs`` (base table -> path) at versions ``at``, it is planned once for
        those tables' schemas (later runs of the same program reuse it)."""
        from idivm.exec.compiler import TOP, PlanCompiler

        if inputs is None or at is None:
            return PlanCompiler(self.spark, read).compile(mp.group, TOP).schema
        tables = tuple((t, delta.schema(inputs[t], at[t])) for t, _ in mp.columns)
        known = _GROUP_SCHEMAS.get(id(mp))
        if known is not None and known[0] is mp and known[1] == tables:
            return known[2]
        schema = PlanCompiler(self.spark, read).compile(mp.group, TOP).schema
        delta.remember(_GROUP_SCHEMAS, id(mp), (mp, tables, schema), 64)
        return schema

    def record_definition(self, catalog: Catalog, view_name: str) -> None:
        """Record the materialization of an ``auto`` view (computing and writing the view, what a
        recomputation by ``auto`` does) as its first recomputation (:mod:`idivm.exec.history`)."""
        entry = catalog.view(view_name)
        seconds = _WRITTEN.pop(catalog.root / entry.path, None)
        if seconds is None:
            return
        watermark = entry.extra.get("watermark", {})
        base_rows = base_rows_at(catalog, watermark)
        history.record(catalog.root / program_folder(entry.path), history.Record("recompute", seconds, 0, base_rows))

    def build_indexes(self, program: "Program", path: Path, metadata: Mapping, progress=None) -> None:
        """Build the global provenance indexes (§2.15) of the view of ``program`` stored at
        ``path`` from its current version."""
        from idivm.exec import indexes

        for index in stored_indexes(program, path):
            if progress:
                progress(f"{program.name}: building index {index.index}")
            indexes.build(index, path, delta.version(path), metadata, self.storage)

    def maintain(self, catalog: Catalog, view_name: str, progress, use_indexes: bool = True,
                 max_changes: int | None = None) -> Run:
        """Bring view ``view_name`` up to date (see :meth:`idivm.warehouse.Warehouse.maintain`),
        or, with ``max_changes``, as far as the base-table commits of about that many changed
        rows take it (:func:`capped`); the run's :class:`~idivm.exec.meter.Cost` is measured,
        its time outside the other phases counted as ``plan``."""
        with meter.metered() as m:
            with meter.phase("plan"):
                for attempt in range(1, CONCURRENT_ATTEMPTS + 1):
                    try:
                        run = self._maintain(catalog, view_name, progress, use_indexes, max_changes)
                        break
                    except ConcurrentWriteError as e:  # another run of the view won: start again from it
                        if attempt == CONCURRENT_ATTEMPTS:
                            raise ConcurrentWriteError(f"view {view_name} was maintained by other runs at the same "
                                                       f"time {attempt} times in a row: {e}") from e
                        if progress:
                            progress(f"{view_name}: {e}; starting again")
        run = replace(run, cost=m.cost())
        if run.base_rows is not None and run.version is not None:  # an auto run: recorded for the next choices
            entry = catalog.view(view_name)
            history.record(catalog.root / program_folder(entry.path),
                           history.Record(run.strategy, max(run.cost.total_seconds - run.built_seconds, 0.0),
                                          run.changes, run.base_rows, run.lagged))
        return run

    def _maintain(self, catalog: Catalog, view_name: str, progress, use_indexes: bool,
                  max_changes: int | None = None) -> Run:
        from idivm.exec.materialize import spark_errors

        entry = catalog.view(view_name)
        path = catalog.path_of(entry)
        program = load_program(catalog, entry)
        prov = program.prov
        strategy = entry.extra.get("strategy", "recompute")
        old = view_watermark(path, entry)
        new = current_versions(catalog, prov.plan)
        if new == old:
            return Run(strategy, 0, None, old, new)
        missing = sorted(set(new) - set(old))
        if missing:
            raise CatalogError(f"view {view_name} records no version of {', '.join(missing)}; define it again")
        tables = {t: catalog.input_path(t) for t in new}
        waiting = ""
        if max_changes is not None:
            latest, new = new, capped(tables, old, new, max_changes)
            later = sum(latest[t] - new[t] for t in new)
            if later:
                waiting = f"capped at {max_changes} change rows: {later} base-table versions wait for the next run"
                if progress:
                    progress(f"{view_name}: {waiting}")
        with meter.phase("changes"):
            changes = readable_changes(view_name, tables, old, new)
        n_changes = sum(c.num_rows for c in changes.values())
        metadata = {"idivm.operation": "maintain", "idivm.view": view_name,
                    "idivm.watermark": json.dumps(new, sort_keys=True)}
        note, script, planned, base_rows, chosen = "", None, None, None, strategy
        runs = history.read(catalog.root / program_folder(entry.path)) if strategy == "auto" else []
        choices = auto_choices(catalog, program, entry, runs) if strategy == "auto" else None
        if choices is not None and choices.incremental:
            base_rows = base_rows_after(catalog, new, runs, changes)
            chosen, note = history.choose(runs, n_changes, base_rows, choices.incremental, choices.stateful,
                                          choices.unbuilt)
        # a run of one incremental strategy of an auto view leaves the other's tables behind
        lagged = choices is not None and bool(choices.stateful - set(choices.unbuilt) - {chosen})
        if program.maps is not None and chosen == "maps":
            if lagged and program.script is not None and program.script.caches:
                # the view's commit reflects no version of the caches, which lag (as after a
                # recomputation of the view alone): the next id run catches them up by watermark
                metadata["idivm.caches"] = json.dumps({})
            with spark_errors(view_name):
                run = self._maintain_maps(catalog, entry, program, tables, old, new, changes, metadata, progress)
            return replace(run, note="; ".join(filter(None, (note, waiting))), base_rows=base_rows, lagged=lagged)
        if strategy in ("id", "tuple", "auto", "maps") and chosen != "recompute":  # maps: over maps caches
            script, note = program.script, note or program.note
            if script is not None and not script.id_columns:
                script, note = None, "a view without IDs (a single tuple) is recomputed"
        if strategy in ("id", "tuple", "auto", "maps"):
            planned = program.script
        note = "; ".join(filter(None, (note, waiting)))
        caches = cache_paths(catalog, entry)
        if script is None:
            if progress:
                progress(f"{view_name}: recomputing at {versions_text(new)}")
            # an auto view recomputes itself alone; its next id run catches its caches up, its
            # next maps run its maps
            with meter.phase("write"):  # evaluated by the write
                version, rows, written = self.recompute(catalog, view_name, prov, planned, new, metadata, caches,
                                                        with_caches=not lagged)
            return Run("recompute", n_changes, version, old, new, inserted=rows, rows_written=rows + written,
                       note=note, base_rows=base_rows, lagged=lagged)
        by = "maps" if strategy == "maps" else script.strategy  # maps: an ID-based script over maps caches
        metadata["idivm.strategy"] = by
        diff_rows = written = 0
        with spark_errors(view_name):
            # caches first (§2.4 pass 3), in order: each from the versions of the base tables and
            # of the earlier caches it reflects (after a crash between a cache's commit and the
            # next one's, the committed caches are already there and are not redone).  The view
            # reads each cache from the version at its own watermark ``old``: the one its last
            # commit records, or, after an auto run recomputed the view alone (its commit records
            # no cache), the cache's commit at ``old``, made first if the cache is behind it.
            reflected = commit_json(path, "idivm.caches") or {}
            cache_old: dict[str, int] = {}
            cache_new: dict[str, int] = {}

            def advance(cache, c_from: Mapping[str, int], c_to: Mapping[str, int], earlier: Mapping[str, int]):
                """One commit of ``cache`` from watermark ``c_from`` to ``c_to``, reading the
                earlier caches at versions ``earlier``."""
                nonlocal diff_rows, written
                cmeta = {**metadata, "idivm.operation": "maintain cache", "idivm.cache": cache.name,
                         "idivm.watermark": json.dumps(c_to, sort_keys=True)}
                if earlier:
                    cmeta["idivm.caches"] = json.dumps(earlier, sort_keys=True)
                with meter.phase("changes"):
                    cchanges = changes if (c_from, c_to) == (old, new) else \
                        readable_changes(view_name, tables, c_from, c_to)
                cpath = caches[cache.name]
                if cache.maps is not None:
                    ids = [c for c, _ in cache.type.fields if c.startswith(HIDDEN)]
                    stats = self._run_maps(catalog, view_name, cache.maps, cache.plan, ids, cpath,
                                           cache_maps(cpath, cache), tables, c_from, c_to, cchanges, cmeta, progress,
                                           f"its cache {cache.name}")
                    stats["diff_rows"] = 0
                else:
                    stats = self.apply_script(cache.script, cpath, tables, c_from, c_to, cchanges, cmeta,
                                              progress, caches, earlier)
                diff_rows += stats["diff_rows"]
                written += stats["rows_written"]

            for cache in script.caches:
                cpath = caches[cache.name]
                c_old = view_watermark(cpath)
                if cache.name not in reflected and c_old != old and behind(c_old, old):
                    if progress:
                        progress(f"{view_name}: catching cache {cache.name} up to {versions_text(old)}")
                    advance(cache, c_old, old, cache_old)
                    c_old = dict(old)
                cache_old[cache.name] = reflected[cache.name] if cache.name in reflected else \
                    version_at(cpath, old, f"cache {cache.name} of view {view_name}")
                if c_old != new:
                    advance(cache, c_old, new, cache_new)
                cache_new[cache.name] = delta.version(cpath)
            if cache_new:
                metadata["idivm.caches"] = json.dumps(cache_new, sort_keys=True)
            stored = stored_indexes(program, path) if use_indexes and script.strategy == "id" else []
            layout = layouts.view_layout(delta.schema(path).names, [c for c, _ in prov.view_ids], script.strategy)
            stats = self.apply_script(script, path, tables, old, new, changes, metadata, progress,
                                      caches, cache_new, stored, layout, cache_old)
            with meter.phase("compact"):
                compacted = self.compact(view_name, path, layout, [caches[c.name] for c in script.caches],
                                         stored, progress)
        return Run(by, n_changes, stats["version"], old, new,
                   diff_rows=diff_rows + stats["diff_rows"], inserted=stats["inserted"], updated=stats["updated"],
                   deleted=stats["deleted"], rows_written=written + stats["rows_written"], note=note,
                   compacted=compacted, base_rows=base_rows, lagged=lagged)

    def _maintain_maps(self, catalog: Catalog, entry: ViewEntry, program: "Program", tables: Mapping[str, Path],
                       old: Mapping[str, int], new: Mapping[str, int], changes: Mapping, metadata: dict,
                       progress) -> Run:
        """A run of a view maintained by maps (:mod:`idivm.exec.maps`): the maps' increments
        MERGEd into their tables, one commit each, then the view's changed groups in one
        commit naming the map versions it reflects."""
        paths = maps_paths(catalog, entry, program)
        stats = self._run_maps(catalog, entry.name, program.maps, program.prov.plan,
                               [c for c, _ in program.prov.view_ids], catalog.path_of(entry), paths, tables,
                               old, new, changes, metadata, progress)
        return Run("maps", sum(c.num_rows for c in changes.values()), stats["version"], dict(old), dict(new),
                   inserted=stats["inserted"], updated=stats["updated"], deleted=stats["deleted"],
                   rows_written=stats["rows_written"], built_seconds=stats["built_seconds"])

    def _run_maps(self, catalog: Catalog, name: str, mp, plan, ids: Sequence[str], path: Path,
                  paths: Mapping[str, Path], tables: Mapping[str, Path], old: Mapping[str, int],
                  new: Mapping[str, int], changes: Mapping, metadata: dict, progress,
                  table: str = "the view") -> dict:
        """The maps ``mp`` (stored at ``paths``) of the table at ``path`` (the view ``name``, or
        ``table``, a maps cache of it: the rows of ``plan``, identified by the columns ``ids``)
        advanced over the base-table ``changes`` from ``old`` to ``new``, one commit per changed
        map, then the table's changed groups in one commit naming the map versions it reflects.
        Maps ahead of the table (a run stopped between their commits) are rebuilt at ``old``
        first; maps behind it (an ``auto`` run recomputed the view alone) catch up first.  The
        commit's statistics (``version``, ``inserted``, ``updated``, ``deleted``,
        ``rows_written``: the maps' rows included)."""
        import pyarrow as pa
        from pyspark.sql import functions as F

        from idivm.exec import maps as mapping
        from idivm.exec.delta_script import ViewChanges
        from idivm.storage.spark import IN_MEMORY_MAX_ROWS, Caches

        spark = self.spark
        missing = sorted(set(mp.program.maps) - set(paths))
        if missing:
            raise CatalogError(f"view {name} has no table for its maps {', '.join(missing)}; define it again")
        view_version = unmoved(path, old, name)
        reflected, at = maps_state(path)
        built = 0.0
        if at is None or any(delta.version(p) != reflected.get(m) for m, p in paths.items()):
            # a run stopped between a map's commit and the table's: the maps are rebuilt at the
            # table's watermark before the run goes on (and built there, for an auto view whose
            # first maps run this is)
            if progress:
                progress(f"{name}: building the maps at {versions_text(old)}" if at is None and not any(
                    delta.exists(p) for p in paths.values()) else
                    f"{name}: the maps are ahead of {table}; rebuilding them at {versions_text(old)}")
            started = time.perf_counter()
            with meter.phase("write"):
                reflected = self.rebuild_maps(catalog, mp, paths, old, metadata)
            built = time.perf_counter() - started
            at = dict(old)
        by_spark = self.storage.spark or delta.needs_delta_spark(path)
        cached = Caches(IN_MEMORY_MAX_ROWS if by_spark else None)
        try:
            stored = mapping.StoredMaps(spark, mp, paths, self.storage)
            if at != dict(old):
                # an auto run recomputed the view alone since the maps' last run: they catch up
                # to the view's watermark first (a crash after this leaves them ahead of the
                # view: the next run rebuilds them)
                if progress:
                    progress(f"{name}: catching the maps up from {versions_text(at)} to {versions_text(old)}")
                if not behind(at, old):
                    raise CatalogError(f"the maps of view {name} reflect {versions_text(at)}, not behind "
                                       f"{table}'s {versions_text(old)}; rebuild it with 'idivm refresh {name} --full'")
                with meter.phase("changes"):
                    lag = readable_changes(name, tables, at, old)
                reflected, _, _, _, caught_up = self._advance_maps(
                    mp, paths, reflected, lag, {**metadata, "idivm.watermark": json.dumps(dict(old), sort_keys=True)},
                    cached, stored, "catch up map")
            else:
                caught_up = 0
            versions, packed, rows, changed, written = self._advance_maps(mp, paths, reflected, changes, metadata,
                                                                          cached, stored)
            written += caught_up
            keys = key_rows = None
            if not ids:  # a GROUP BY without keys: its one row, computed from the maps and written whole
                keys = spark.range(1).select()
                if packed is not None and rows is not None:
                    key_rows = pa.table({"_": [0]}).select([])
            elif packed is not None and (rows is None or any(m.startswith(mapping.TERM_PREFIX) for m in changed)):
                with meter.phase("evaluate"):
                    if rows is None:
                        keys = cached.computed(mapping.changed_groups(mp, packed))[1]
                    else:  # the driver holds the increments: the groups are found there, without a job
                        key_rows = mapping.changed_groups_of(mp, rows)
            metadata = {**metadata, "idivm.strategy": "maps", "idivm.maps": json.dumps(versions, sort_keys=True)}
            unchanged = keys is None and key_rows is None
            view = delta.read_spark(spark, path, engine=self.storage) if unchanged or by_spark else None
            if unchanged:
                upserts, deleted = view.where(F.lit(False)), view.select(*by_name(ids)).where(F.lit(False))
            else:
                schema = self.group_schema(mp, self.reader(catalog, new), tables, new)

                def view_rows(at: Mapping[str, int], columns: Sequence[str]) -> "DataFrame | pa.Table":
                    """The view's rows (their ``columns``) of the changed groups by the term maps
                    at versions ``at``: computed in the driver when it holds the changed groups
                    and the view is written there (Arrow rows, or γ's rows as a local relation
                    when the operators above γ need Spark), else by Spark."""
                    from idivm.exec.compiler import PlanCompiler

                    terms = [m for m in paths if m.startswith(mapping.TERM_PREFIX)]
                    grouped = None
                    if key_rows is not None:
                        try:
                            grouped = mapping.group_rows_of(mp, {m: stored.arrow(m, at[m]) for m in terms}, key_rows,
                                                            schema)
                        except (pa.ArrowException, NotImplementedError):  # e.g. a nested group value
                            grouped = None
                    if grouped is not None and ids and not by_spark:
                        rows_ = mapping.rows_above(plan, mp.group, grouped)
                        if rows_ is not None:
                            return rows_.select(list(columns))
                    grouped = spark.createDataFrame(grouped, schema) if grouped is not None else \
                        mapping.group_rows(mp, {m: stored.frame(m, at[m]) for m in terms},
                                           keys if keys is not None else spark.createDataFrame(key_rows), schema)
                    compiler = PlanCompiler(spark, self.reader(catalog, new))
                    compiler.bind(mp.group, grouped)
                    return compiler.evaluate(plan).select(*by_name(columns))

                upserts = view_rows(versions, delta.schema(path, view_version).names)
                deleted = view_rows(reflected, ids) if ids else None
            if not ids:
                with meter.phase("write"), delta.pinned(path, view_version):
                    version = delta.write_spark(upserts, path, mode="overwrite", commit_metadata=metadata,
                                                engine=self.storage, deletion_vectors=True)
                return {"version": version, "inserted": 0, "updated": 1, "deleted": 0, "rows_written": 1 + written,
                        "built_seconds": built}
            target = commit.Target(name if table == "the view" else f"{name}: {table}", tuple(ids))
            if isinstance(upserts, pa.Table) and isinstance(deleted, pa.Table):  # computed in the driver
                changes_ = ViewChanges(upserts, None, cached, deleted_rows=deleted)
            else:
                upserts, deleted = (spark.createDataFrame(t) if isinstance(t, pa.Table) else t
                                    for t in (upserts, deleted))
                changes_ = ViewChanges(upserts, deleted, cached)
            with meter.phase("write"), delta.pinned(path, view_version):
                if by_spark:
                    stats = commit.merge_by_spark(target, path, view, changes_, metadata, progress, (), self.storage)
                else:
                    layout = layouts.view_layout(delta.schema(path, view_version).names, ids, "maps") \
                        if table == "the view" else None
                    stats = commit.land(target, path, view_version, changes_, metadata, progress, (), layout,
                                        self.storage)
        finally:
            cached.release()
        return {**stats, "rows_written": stats["rows_written"] + written, "built_seconds": built}

    def _advance_maps(self, mp, paths: Mapping[str, Path], reflected: Mapping[str, int], changes: Mapping,
                      metadata: Mapping[str, str], cached, stored, operation: str = "maintain map") -> tuple:
        """The maps ``mp`` (stored at ``paths``, at versions ``reflected``, read through
        ``stored``, a :class:`~idivm.exec.maps.StoredMaps`) advanced over the base-table
        ``changes``: each changed map's increments stored (appended, or the map written
        consolidated), one commit each (tagged ``operation``).  (the maps' new versions, the
        packed increments (None: nothing changed; a DataFrame, or Arrow rows), their rows when
        the driver holds them, the maps changed, the rows written.)

        The statements run in the driver over Arrow tables (:class:`~idivm.exec.maps.ArrowTerms`)
        when the maps are written by delta-rs and the maps they read and the batch have at most
        :data:`LOCAL_MAPS_MAX_ROWS` rows together, else by Spark; a statement Arrow cannot
        evaluate sends the run's statements to Spark."""
        from idivm.exec import maps as mapping

        spark = self.spark
        columns = dict(mp.columns)
        relations = [t for t in changes if t in columns]
        needed = sorted(mapping.maps_read(mp, relations))
        increments = None
        if not self.storage.spark and sum(changes[t].num_rows for t in relations) + \
                sum(delta.row_count(paths[m], reflected[m]) for m in needed) <= LOCAL_MAPS_MAX_ROWS:
            import pyarrow as pa

            try:
                with meter.phase("changes"):
                    updates = {t: mapping.changes_gmr(changes[t], columns[t]) for t in relations}
                    read = {m: stored.lookup(m, reflected[m]) for m in needed}
                with meter.phase("evaluate"):
                    rows = mapping.increments(mp, read, updates, mapping.ArrowTerms(spark))
                increments = (rows, rows)  # the packed increments are the rows the driver holds
            except (pa.ArrowException, NotImplementedError):  # e.g. a nested value joined: by Spark
                increments = None
        if increments is None:
            with meter.phase("changes"):
                updates = {t: mapping.changes_relation(spark, changes[t], columns[t]) for t in relations}
                read = {m: stored.frame(m, reflected[m]) for m in needed}
            with meter.phase("evaluate"):
                packed = mapping.increments(mp, read, updates,
                                            mapping.SparkTerms(spark, lambda df: cached.computed(df)[1]))
                increments = cached.computed(packed) if packed is not None else (None, None)
        rows, packed = increments
        versions, written = dict(reflected), 0
        with meter.phase("write"):
            changed = sorted(mp.program.maps) if rows is None else sorted(set(rows.column(mapping.MAP).to_pylist()))

            def store(m: str) -> tuple[int, int]:
                inc = mapping.unpacked(packed if rows is None else rows, m, mp.program.maps[m].keys)
                return stored.store(m, versions[m], inc, {**metadata, "idivm.operation": operation, "idivm.map": m})

            todo = changed if packed is not None else []
            if rows is not None and not self.storage.spark and len(todo) > 1:
                # increments in the driver, written by delta-rs: the maps' commits at once (each its
                # own table; delta-rs works outside Python's lock)
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=min(MAP_WRITERS, len(todo))) as pool:
                    done = dict(zip(todo, pool.map(store, todo)))
            else:
                done = {m: store(m) for m in todo}
            for m, (version, rows_written) in done.items():
                versions[m] = version
                written += rows_written
        return versions, packed, rows, changed, written

    def rebuild_maps(self, catalog: Catalog, mp, paths: Mapping[str, Path], at: Mapping[str, int],
                     metadata: Mapping[str, str]) -> dict[str, int]:
        """Overwrite every map of ``mp`` (stored at ``paths``) with its definition evaluated at
        base-table versions ``at``, one commit each; the maps' new versions."""
        from idivm.exec import maps as mapping

        for m, mdf in mapping.initial_maps(self.spark, mp, self.reader(catalog, at), reevaluated=True).items():
            delta.write_spark(mdf, paths[m], mode="overwrite", engine=self.storage, deletion_vectors=True,
                              commit_metadata={**metadata, "idivm.operation": "rebuild map", "idivm.map": m,
                                               "idivm.watermark": json.dumps(dict(at), sort_keys=True)})
        return {m: delta.version(p) for m, p in paths.items()}

    def compact(self, view_name: str, path: Path, layout: layouts.Layout | None, caches: Sequence[Path],
                stored: Sequence, progress) -> tuple["Compaction", ...]:
        """Compact the tables an ID- or tuple-based run wrote that have drifted past the
        compaction policy (:mod:`idivm.storage.compaction`): the view in its layout, its
        caches, its index tables (``stored``) in their order."""
        from idivm.exec import indexes
        from idivm.storage.compaction import compact_if_needed

        tables = [(view_name, path, layout.keys if layout else (), layout.file_bytes if layout else layouts.FILE_BYTES,
                   layout.row_group_rows if layout else None)]
        tables += [(f"{view_name} cache {p.name}", p, (), layouts.FILE_BYTES, None) for p in caches]
        tables += [(f"{view_name} index {i.path(path).name}", i.path(path), i.order, indexes.INDEX_FILE_BYTES,
                    None) for i in stored]
        done = []
        for name, table, order, file_bytes, row_group_rows in tables:
            compaction = compact_if_needed(self.spark, table, name, order=order, target_file_bytes=file_bytes,
                                           row_group_rows=row_group_rows, engine=self.storage)
            if compaction is not None:
                if progress:
                    progress(f"{view_name}: {compaction.summary()}")
                done.append(compaction)
        return tuple(done)

    def recompute(self, catalog: Catalog, view_name: str, prov, planned, at: Mapping[str, int],
                  metadata: dict, caches: Mapping[str, Path], with_caches: bool = True) -> tuple[int, int, int]:
        """Recompute view ``view_name`` (and its caches, so that the next ID-based run starts
        from them; unless ``with_caches`` is false: the view's commit then records that it
        reflects no cache version) at base-table versions ``at`` and overwrite it in one commit
        carrying ``metadata``: (view version, view rows, cache rows written)."""
        from idivm.exec.materialize import spark_errors

        entry = catalog.view(view_name)
        path = catalog.path_of(entry)
        metadata = dict(metadata)
        written = 0
        if planned is not None and caches and not with_caches:
            metadata["idivm.caches"] = json.dumps({})
        elif planned is not None and caches:
            versions = {}
            for cache in planned.caches:
                cdf = self.evaluate_at(catalog, cache.plan, at)
                cmeta = {**metadata, "idivm.cache": cache.name, "idivm.strategy": "recompute"}
                if versions:
                    cmeta["idivm.caches"] = json.dumps(versions, sort_keys=True)
                if cache.maps is not None:  # its maps rebuilt with it
                    cmeta["idivm.maps"] = json.dumps(self.rebuild_maps(
                        catalog, cache.maps, cache_maps(caches[cache.name], cache), at, cmeta), sort_keys=True)
                with spark_errors(view_name):
                    versions[cache.name] = delta.write_spark(cdf, caches[cache.name], mode="overwrite",
                                                             commit_metadata=cmeta, engine=self.storage,
                                                             deletion_vectors=True)
                written += delta.row_count(caches[cache.name])
            metadata["idivm.caches"] = json.dumps(versions, sort_keys=True)
        df = self.evaluate_at(catalog, prov.plan, at)
        metadata["idivm.strategy"] = "recompute"
        with spark_errors(view_name):
            version = layouts.write_view(df, path, "overwrite", metadata, [c for c, _ in prov.view_ids],
                                         planned.strategy if planned is not None else None, self.storage)
        return version, delta.row_count(path), written

    def repair(self, catalog: Catalog, view_name: str) -> int:
        """Overwrite view ``view_name`` with its recomputation at its watermark (after a
        verification found it differs): the new view version."""
        entry = catalog.view(view_name)
        version, _, _ = self._rebuild(catalog, entry, view_watermark(catalog.path_of(entry), entry), "repair")
        return version

    def refresh(self, catalog: Catalog, view_name: str) -> Run:
        """Rebuild view ``view_name`` (with its caches and maps; its indexes follow at the next
        run) by recomputing it at the current versions of its base tables, in one commit of
        the view: what a view whose changes cannot be read any more needs."""
        entry = catalog.view(view_name)
        old = view_watermark(catalog.path_of(entry), entry)
        new = current_versions(catalog, load_program(catalog, entry).prov.plan)
        with meter.metered() as m:
            with meter.phase("write"):
                version, rows, written = self._rebuild(catalog, entry, new, "refresh")
        return Run("recompute", 0, version, old, new, inserted=rows, rows_written=rows + written,
                   note="full refresh", cost=m.cost())

    def _rebuild(self, catalog: Catalog, entry: ViewEntry, at: Mapping[str, int],
                 operation: str) -> tuple[int, int, int]:
        """Recompute the view of ``entry`` with its caches and maps at base-table versions ``at``
        (:meth:`recompute`), the commits tagged ``operation``."""
        program = load_program(catalog, entry)
        planned = program.script if entry.extra.get("strategy") in ("id", "tuple", "auto", "maps") else None
        metadata = {"idivm.operation": operation, "idivm.view": entry.name,
                    "idivm.watermark": json.dumps(at, sort_keys=True)}
        paths = maps_paths(catalog, entry, program)
        if maps_built(entry, paths):  # the maps may be what differed: rebuilt too
            metadata["idivm.maps"] = json.dumps(self.rebuild_maps(catalog, program.maps, paths, at, metadata),
                                                sort_keys=True)
        return self.recompute(catalog, entry.name, program.prov, planned, at, metadata, cache_paths(catalog, entry))

    def apply_script(self, script, path: Path, tables: Mapping[str, Path], old: Mapping[str, int],
                     new: Mapping[str, int], changes, metadata, progress,
                     caches: Mapping[str, Path] | None = None,
                     cache_versions: Mapping[str, int] | None = None,
                     stored: Sequence = (), layout: layouts.Layout | None = None,
                     cache_old: Mapping[str, int] | None = None) -> dict:
        """Run ``script`` on the changes since ``old`` and MERGE them into the table at ``path``
        (the view or a cache), one commit; ``tables``: the base tables, ``changes`` their change
        data feeds from ``old`` to ``new``.  The caches the script reads (of ``caches``) are
        read from the versions the table at ``path`` reflects (its last commit's
        ``idivm.caches``, or ``cache_old`` when given) to ``cache_versions``.  ``stored``: the view's index tables,
        brought to the view's version first if they lag, read to find the rows of nested
        updates and maintained after the view's commit.  ``layout``: the view's, which a run
        reads and rewrites only the files of (None: the changes are MERGEd)."""
        import pyarrow as pa
        from pyspark.sql import functions as F

        from idivm.exec import indexes
        from idivm.exec.delta_script import base_diffs, evaluate
        from idivm.storage.spark import IN_MEMORY_MAX_ROWS

        watermark = dict(old)  # what the table at ``path`` reflects, as this run read it
        read = [t.table for t in script.tables if t.table in (caches or {})]
        if read:
            reflected = cache_old if cache_old is not None else commit_json(path, "idivm.caches") or {}
            missing = [c for c in read if c not in reflected or c not in (cache_versions or {})]
            if missing:
                raise CatalogError(f"{script.view} records no version of its caches {', '.join(missing)}; "
                                   "define the view again")
            paths = {c: caches[c] for c in read}  # type: ignore[index]
            tables = {**tables, **paths}
            old = {**old, **{c: reflected[c] for c in read}}
            new = {**new, **{c: cache_versions[c] for c in read}}  # type: ignore[index]
            with meter.phase("changes"):
                changes = {**changes, **read_changes(paths, old, {c: new[c] for c in read})}

        schemas = {t: delta.schema(tables[t], new[t]) for t in new}
        with meter.phase("changes"):
            diffs = base_diffs(script, changes, schemas)
        if progress:
            progress(f"{script.view}: {diffs.change_rows} change rows -> {diffs.rows()} i-diff rows "
                     f"({diffs.dropped} dropped: attributes the view does not read)")

        def read_state(state: StateRef):
            version = (old if state.state == PRE else new)[state.table]
            return delta.read_spark(self.spark, tables[state.table], version, engine=self.storage)

        with meter.phase("indexes"):
            index_rows = indexes.refresh(stored, path, metadata, progress, script.view, self.storage)

        version = unmoved(path, watermark, script.view)
        view = delta.read_spark(self.spark, path, version, engine=self.storage)
        by_spark = self.storage.spark or delta.needs_delta_spark(path)

        def locate(statement, keys):
            """The IDs of the view rows holding the elements a nested update names, by index: by
            a Spark join of the index table with the i-diff's keys when Spark writes the view
            (the evaluation brings them into the driver only when they are few), else read from
            the index in the driver; for keys the driver holds (Arrow), in the driver, as Arrow."""
            if isinstance(keys, pa.Table):
                named = keys.select([c for _, c in statement.match]).rename_columns([p for p, _ in statement.match])
                return indexes.locate(stored, path, statement, named, progress, script.view)
            named = keys.select(*[F.col(delta.quoted(c)).alias(p) for p, c in statement.match])
            if by_spark:
                return indexes.locate(stored, path, statement, named, progress, script.view)
            found = indexes.locate(stored, path, statement, to_arrow(named), progress, script.view)
            if found is None or found.num_rows:
                return found if found is None else self.spark.createDataFrame(found)
            return self.spark.createDataFrame([], view.select(*by_name(found.column_names)).schema)

        def read_view(column: str, values: Sequence) -> "DataFrame":
            """The view's rows in the files that may hold these values of ``column``."""
            return delta.read_spark(self.spark, path, version, holding=(column, values), engine=self.storage)

        with meter.phase("evaluate"):
            result = evaluate(self.spark, script, diffs, read_state, view, progress,
                              locate if stored else None,
                              read_view if layout is not None else None,
                              in_memory_max_rows=IN_MEMORY_MAX_ROWS if by_spark else None,
                              patch=layout is not None and not by_spark)
        with meter.phase("write"), delta.pinned(path, version):  # committed only if no other run did since
            if by_spark:
                stats = commit.merge_by_spark(script, path, view, result, metadata, progress, stored, self.storage)
            else:
                stats = commit.land(script, path, version, result, metadata, progress, stored, layout, self.storage)
        stats["diff_rows"] = diffs.rows()
        stats["rows_written"] += index_rows
        return stats
