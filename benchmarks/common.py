"""What every benchmark of ``benchmarks/`` shares: the setup of a warehouse from a generated
dataset, timing ``Warehouse.maintain`` and reading the rows it wrote from the view's Delta log,
verification, the summary (medians over the timed runs), ratios, the markdown table and the
environment recorded with the results.

Importing this module puts the checkout it belongs to first on ``sys.path``, so that the idivm
measured is the checkout's, installed or not.  A benchmark script imports it before idivm.

No timing policy lives here beyond the wall clock around one ``maintain`` call: which runs are
timed, the order of the strategies and what a run ingests are the scripts' choices.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: the checkout this file belongs to: its idivm is the one measured, installed or not
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from idivm import Warehouse  # noqa: E402
from idivm.errors import IdivmError  # noqa: E402
from idivm.storage import delta  # noqa: E402

#: measured strategies: the define-time strategies, and ``id_noindex``: a view defined with ``id``
#: maintained with ``use_indexes=False`` (nested elements found by scanning the view, §2.15);
#: ``auto`` is ``id`` unless the view or a run's change set calls for recomputation
STRATEGIES = ("id", "id_noindex", "tuple", "recompute", "auto", "maps")
#: the strategy each measured one is defined with
DEFINED_AS = {"id_noindex": "id"}

#: the fields of ``MaintenanceResult`` reported when the running idivm has them
RESULT_COUNTS = ("diff_rows", "inserted", "updated", "deleted", "rows_written")

CREATE_VIEW = re.compile(r"\bCREATE\s+VIEW\s+(\w+)\s+AS\b", re.IGNORECASE)


class BenchmarkError(Exception):
    """A configuration the benchmark cannot run; printed as one line."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """One ``maintain`` call of one view in one run (run 0 is the warm-up)."""

    run: int
    view: str
    strategy: str          # as requested at define time
    maintained_as: str     # as the maintenance result reports it (a fallback shows here)
    seconds: float         # wall clock around Warehouse.maintain
    reported_seconds: float
    changes: int
    version: int | None
    view_rows_written: int | None
    view_files_added: int | None
    view_files_removed: int | None
    diff_rows: int | None = None
    spark_jobs: int | None = None  # the Spark jobs the run started
    commits: int | None = None     # the commits of the run (view, caches, index tables)
    inserted: int | None = None
    updated: int | None = None
    deleted: int | None = None
    rows_written: int | None = None
    note: str = ""
    batch_size: int | None = None  # changes per batch, for benchmarks that vary it
    #: "batch" (a timed run of the benchmark), "one_row" (a run after a one-row change) or
    #: "noop" (a run with nothing to do): see :func:`probe_fixed_cost`
    kind: str = "batch"
    phases: dict[str, float] | None = None  # seconds by phase, as the run reports them


def progress(message: str) -> None:
    """One line about the work under way, on standard error (tables go to standard output)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- setup -----------------------------------------------------------------------------------------

def define_accepts_strategy() -> bool:
    """Whether this idivm's ``Warehouse.define`` takes ``strategy=``."""
    return "strategy" in inspect.signature(Warehouse.define).parameters


def maintain_accepts_indexes() -> bool:
    """Whether this idivm's ``Warehouse.maintain`` takes ``use_indexes=``."""
    return "use_indexes" in inspect.signature(Warehouse.maintain).parameters


def check_strategies(strategies: Sequence[str]) -> None:
    """Fail before any work when a requested strategy cannot be chosen at define time."""
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise BenchmarkError(f"unknown strategy {', '.join(unknown)}; known: {', '.join(STRATEGIES)}")
    if "id_noindex" in strategies and not maintain_accepts_indexes():
        raise BenchmarkError("this idivm's Warehouse.maintain takes no use_indexes= argument: "
                             "leave id_noindex out of --strategies")
    if not define_accepts_strategy() and set(strategies) != {"recompute"}:
        raise BenchmarkError(
            "this idivm's Warehouse.define takes no strategy= argument, so views can only be "
            "maintained by recomputation: run with --strategies recompute")


def generate_dataset(dataset: str, options: Sequence[str], spec: Mapping[str, Any], tables: Iterable[str],
                     data: Path) -> Path:
    """The tables of a dataset as Parquet files in ``data``, written by ``python -m idivm.datasets
    <dataset> <options> --out data --format parquet`` unless a previous invocation left the same
    ``spec`` (a dict, stamped into ``data/spec.json``) there."""
    wanted = dict(spec)
    if reusable(data, wanted, tables, dataset):
        return data
    command = [sys.executable, "-m", "idivm.datasets", dataset, *options, "--out", str(data),
               "--format", "parquet"]
    progress("data: " + " ".join(command[1:]))
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    subprocess.run(command, check=True, env=env, stdout=sys.stderr)  # its report is progress
    stamp(data, wanted)
    progress(f"data: written in {time.perf_counter() - started:.1f} s")
    return data


def reusable(data: Path, wanted: Mapping[str, Any], tables: Iterable[str], dataset: str) -> bool:
    """Whether ``data`` holds the tables a previous invocation generated for the same knobs
    (``data/spec.json``); if not, its stamp is removed before the data is written again."""
    path = data / "spec.json"
    if path.is_file() and json.loads(path.read_text()) == dict(wanted) and all(
            (data / f"{t}.parquet").is_file() for t in tables):
        progress(f"data: reusing {data} ({dataset} {dict(wanted)})")
        return True
    path.unlink(missing_ok=True)
    return False


def stamp(data: Path, wanted: Mapping[str, Any]) -> None:
    """Record the knobs of the data just written (see :func:`reusable`)."""
    (data / "spec.json").write_text(json.dumps(dict(wanted), sort_keys=True) + "\n")


def generated(data: Path, wanted: Mapping[str, Any], tables: Iterable[str], dataset: str, what: str,
              make: Callable[[], Mapping[str, Any]]) -> Path:
    """``data/<table>.parquet`` for each of the Arrow tables ``make()`` returns, reused when a
    previous invocation left them for the same knobs ``wanted`` (:func:`reusable`); ``what``
    says what was written, in the progress line."""
    import pyarrow.parquet as pq

    if reusable(data, wanted, tables, dataset):
        return data
    started = time.perf_counter()
    data.mkdir(parents=True, exist_ok=True)
    for name, table in make().items():
        pq.write_table(table, data / f"{name}.parquet")
    stamp(data, wanted)
    progress(f"data: {what} in {time.perf_counter() - started:.1f} s")
    return data


@dataclass(frozen=True, slots=True)
class EventBatch:
    """A batch of a change stream: its number (from 1) and each table's Debezium events, in order
    (``{"op", "before", "after"}``, rows as dicts; dates as ``datetime.date``)."""

    number: int
    events: dict[str, list[dict[str, Any]]]

    @property
    def changes(self) -> int:
        return sum(len(e) for e in self.events.values())


def _json_value(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def write_events(batch: EventBatch, directory: Path) -> dict[str, Path]:
    """``directory/batch-NNNN/<table>.jsonl`` per table of ``batch`` (dates as ISO strings)."""
    out = directory / f"batch-{batch.number:04d}"
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for table, events in batch.events.items():
        path = paths[table] = out / f"{table}.jsonl"
        path.write_text("".join(json.dumps(e, default=_json_value) + "\n" for e in events), encoding="utf-8")
    return paths


def ingest_events(wh: Warehouse, batch: EventBatch, directory: Path) -> dict[str, Any]:
    """Write ``batch`` (:func:`write_events`) and ingest it table by table: what was ingested."""
    started = time.perf_counter()
    record: dict[str, Any] = {"batch": batch.number, "changes": batch.changes, "tables": {}}
    for table, path in write_events(batch, directory).items():
        done = wh.ingest(table, path, format="debezium")
        record["tables"][table] = {"events": len(batch.events[table]), "inserted": done.inserted,
                                   "updated": done.updated, "deleted": done.deleted, "version": done.version}
    record["seconds"] = time.perf_counter() - started
    return record


#: the view texts of the TPC-H and BSMA workloads
VIEWS_DIR = Path(__file__).resolve().parent / "views"


def view_text(view: str, known: Sequence[str], workload: str) -> str:
    """The text of ``benchmarks/views/<view>.sqlpp``, one of ``known``."""
    if view not in known:
        raise BenchmarkError(f"no {workload} view {view!r}; known: {', '.join(known)}")
    return (VIEWS_DIR / f"{view}.sqlpp").read_text(encoding="utf-8")


def fresh_warehouse(out: Path, storage: str | None = None) -> Warehouse:
    """An empty warehouse at ``out/warehouse`` whose tables the ``storage`` engine writes (None:
    the running idivm's default), replacing the one a previous invocation left."""
    path = out / "warehouse"
    if path.exists():
        if not (path / "catalog.json").is_file() and any(path.iterdir()):
            raise BenchmarkError(f"{path} exists and is not an idivm warehouse; remove it or choose another --out")
        shutil.rmtree(path)
    if storage is None:
        return Warehouse(path)
    if "storage" not in inspect.signature(Warehouse).parameters:
        raise BenchmarkError(f"this idivm has no storage engines: leave out --storage {storage}")
    return Warehouse(path, storage=storage)


def add_storage_argument(parser: argparse.ArgumentParser) -> None:
    """``--storage``: the engine that writes the tables Spark computes."""
    parser.add_argument("--storage", default=None,
                        help="storage engine: delta-rs, delta-spark or delta-spark-dv (default: idivm's, "
                             "$IDIVM_STORAGE or delta-rs)")


def load_tables(wh: Warehouse, data: Path, keys: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Create every base table of ``keys`` (name -> key columns) from ``data/<name>.parquet``;
    returns rows per table."""
    rows = {}
    for table, key in keys.items():
        started = time.perf_counter()
        info = wh.create_table(table, key=list(key), source=data / f"{table}.parquet", format="parquet")
        rows[table] = info.rows
        progress(f"load: {table}: {info.rows:,} rows in {time.perf_counter() - started:.1f} s")
    return rows


def renamed(text: str, view: str, name: str, origin: str) -> str:
    """The ``CREATE VIEW view AS ...`` text ``text`` with the view called ``name``."""
    match = CREATE_VIEW.search(text)
    if match is None or match.group(1) != view:
        raise BenchmarkError(f"{origin} does not define view {view}")
    return text[:match.start(1)] + name + text[match.end(1):]


def define_view(wh: Warehouse, name: str, text: str, view: str, strategy: str) -> dict[str, Any]:
    """Define ``text`` (view ``name``) with ``strategy``: {view, strategy, rows, seconds}.
    An idivm error (or a strategy it does not know) is raised as :class:`BenchmarkError`."""
    started = time.perf_counter()
    try:
        info = wh.define(text, strategy=DEFINED_AS.get(strategy, strategy)) if define_accepts_strategy() \
            else wh.define(text)
    except (IdivmError, ValueError) as e:
        raise BenchmarkError(f"cannot define {name} with strategy {strategy!r}: {type(e).__name__}: {e}") from e
    seconds = time.perf_counter() - started
    progress(f"define: {name}: {info.rows:,} rows in {seconds:.1f} s")
    return {"view": view, "strategy": strategy, "rows": info.rows, "seconds": seconds}


def start_spark(wh: Warehouse) -> float:
    """Start the warehouse's Spark session (so that no define or maintain pays for it); seconds."""
    started = time.perf_counter()
    wh.spark
    seconds = time.perf_counter() - started
    progress(f"spark: session started in {seconds:.1f} s")
    return seconds


# --- runs ------------------------------------------------------------------------------------------

def rotated(strategies: Sequence[str], run: int) -> tuple[str, ...]:
    """``strategies`` rotated by ``run``, so that none is always first after an ingest."""
    shift = run % len(strategies)
    return tuple(strategies[shift:]) + tuple(strategies[:shift])


def commit_metrics(wh: Warehouse, name: str, version: int | None) -> tuple[int | None, int | None, int | None]:
    """(rows, files added, files removed) of the view's commit ``version``, from its Delta log.

    Rows are the rows in the files the commit added: for a MERGE or a rewrite of a view's files
    (``delta.rewrite_clustered``, whose metrics are in its metadata) ``num_output_rows`` (rows
    copied from rewritten files plus rows updated and inserted), for an overwrite
    ``num_added_rows``."""
    if version is None:
        return None, None, None
    for commit in delta.history(wh.view_info(name).path):
        if commit.get("version") == version:
            m = commit.get("operationMetrics") or {}
            if "idivm.rewrite" in commit:
                m = json.loads(commit["idivm.rewrite"])
            # delta-rs's names, then delta-spark's (MERGE, then WRITE)
            rows = _first(m, "num_output_rows", "num_added_rows", "numOutputRows")
            files_added = _first(m, "num_target_files_added", "num_added_files", "numTargetFilesAdded", "numFiles")
            files_removed = _first(m, "num_target_files_removed", "num_removed_files", "numTargetFilesRemoved",
                                   "numRemovedFiles")
            return (None if rows is None else int(rows), None if files_added is None else int(files_added),
                    None if files_removed is None else int(files_removed))
    return None, None, None


def _first(metrics: Mapping[str, Any], *names: str) -> Any:
    return next((metrics[n] for n in names if metrics.get(n) is not None), None)


def maintain_once(wh: Warehouse, run: int, name: str, view: str, strategy: str,
                  batch_size: int | None = None, kind: str = "batch") -> Measurement:
    """Maintain view ``name`` once, timed by a wall clock around ``Warehouse.maintain``."""
    versions, jobs = table_versions(wh, name), spark_jobs(wh)
    started = time.perf_counter()
    results = wh.maintain(name, use_indexes=False) if strategy == "id_noindex" else wh.maintain(name)
    seconds = time.perf_counter() - started
    jobs_after = spark_jobs(wh)
    after = table_versions(wh, name)
    commits = sum(v - versions.get(t, -1) for t, v in after.items())
    (r,) = results
    rows, added, removed = commit_metrics(wh, name, r.version)
    counts = {f: getattr(r, f, None) for f in RESULT_COUNTS}
    maintained_as = strategy if r.strategy == DEFINED_AS.get(strategy, strategy) else r.strategy
    return Measurement(run=run, view=view, strategy=strategy, maintained_as=maintained_as, seconds=seconds,
                       reported_seconds=r.seconds, changes=r.changes, version=r.version,
                       view_rows_written=rows, view_files_added=added, view_files_removed=removed,
                       note=getattr(r, "note", "") or "", batch_size=batch_size, commits=commits, kind=kind,
                       phases=dict(r.cost.seconds) if getattr(r, "cost", None) is not None else None,
                       spark_jobs=None if jobs is None or jobs_after is None else jobs_after - jobs, **counts)


def maintain_round(wh: Warehouse, views: Sequence[str], strategies: Sequence[str], run: int, label: str,
                   batch_size: int | None = None, live: Callable[[str], bool] = lambda name: True,
                   failed: dict[str, dict[str, Any]] | None = None) -> list[Measurement]:
    """One run's maintenance: every live copy ``<view>_<strategy>`` once, strategies rotated by
    ``run``.  A ``maintain`` that raises propagates, or, given ``failed``, is recorded there
    (name -> {view, strategy, batch_size, run, error}) and the round goes on."""
    out = []
    for view in views:
        for strategy in rotated(strategies, run):
            name = f"{view}_{strategy}"
            if not live(name):
                continue
            try:
                m = maintain_once(wh, run, name, view, strategy, batch_size=batch_size)
            except Exception as e:  # noqa: BLE001 -- recorded when asked to; the other copies go on
                if failed is None:
                    raise
                failed[name] = {"view": view, "strategy": strategy, "batch_size": batch_size, "run": run,
                                "error": f"{type(e).__name__}: {e}"}
                progress(f"{label}: {name}: maintain raised {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''} (not maintained again)")
                continue
            out.append(m)
            progress(describe(label, name, m))
    return out


def spark_jobs(wh: Warehouse) -> int | None:
    """The number of Spark jobs the warehouse's session has started (None: not known)."""
    try:
        return int(wh.spark.sparkContext._jsc.sc().dagScheduler().nextJobId())
    except Exception:  # noqa: BLE001 -- an internal of Spark's, reported as unknown when absent
        return None


def table_versions(wh: Warehouse, name: str) -> dict[str, int]:
    """The latest version of every Delta table of view ``name``: the view, its caches and its
    index tables (``<view>.caches/*``, ``<view>.indexes/*``)."""
    path = wh.view_info(name).path
    tables = [path, *(d for kind in ("caches", "indexes") for d in sorted(path.parent.glob(f"{path.name}.{kind}/*")))]
    return {str(t): delta.version(t) for t in tables if (t / "_delta_log").is_dir()}


def describe(label: str, name: str, m: Measurement) -> str:
    """The progress line of one measurement."""
    why = f": {m.note}" if m.note else ""
    fallback = "" if m.maintained_as == m.strategy else f" (maintained as {m.maintained_as}{why})"
    written = "" if m.rows_written is None else f", {m.rows_written:,} rows written"
    return (f"{label}: {name}: {m.seconds:.2f} s, {m.changes} change rows{written}, "
            f"view commit wrote {fmt_count(m.view_rows_written)} rows{fallback}")


def verify_all(wh: Warehouse, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``Warehouse.verify`` of every view of ``names``: name -> {ok, rows, missing, extra, seconds}."""
    out = {}
    for name in names:
        started = time.perf_counter()
        v = wh.verify(name)
        out[name] = {"ok": v.ok, "rows": v.rows, "missing": v.missing, "extra": v.extra,
                     "seconds": time.perf_counter() - started}
        progress(f"verify: {v.summary().splitlines()[0]}")
    return out


# --- report ----------------------------------------------------------------------------------------

def summary_row(view: str, strategy: str, timed: Sequence[Measurement], verified: bool | None,
                batch_size: int | None = None) -> dict[str, Any]:
    """Median/min/max seconds and median rows written of one view and strategy over ``timed``."""
    seconds = [m.seconds for m in timed]
    row: dict[str, Any] = {"view": view}
    if batch_size is not None:
        row["batch_size"] = batch_size
    row.update({
        "strategy": strategy,
        "maintained_as": sorted({m.maintained_as for m in timed}),
        "runs": len(timed),
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "changes": median_or_none([m.changes for m in timed]),
        "rows_written": median_or_none([m.rows_written for m in timed]),
        "view_rows_written": median_or_none([m.view_rows_written for m in timed]),
        "view_files_added": median_or_none([m.view_files_added for m in timed]),
        "spark_jobs": median_or_none([m.spark_jobs for m in timed]),
        "commits": median_or_none([m.commits for m in timed]),
        "verified": verified,
    })
    return row


def summarize(measurements: Sequence[Measurement], views: Sequence[str], strategies: Sequence[str],
              verified: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per view and strategy over the timed runs (run > 0): see :func:`summary_row`."""
    rows = []
    for view in views:
        for strategy in strategies:
            timed = [m for m in measurements
                     if m.run > 0 and m.kind == "batch" and m.view == view and m.strategy == strategy]
            rows.append(summary_row(view, strategy, timed, verified[f"{view}_{strategy}"]["ok"]))
    return rows


def probe_fixed_cost(wh: Warehouse, names: Mapping[str, tuple[str, str]], ingest_one: Callable[[int], Any],
                     probes: int) -> list[Measurement]:
    """What a run costs when it has almost nothing to do: ``probes`` times, ingest a one-row
    change (``ingest_one(i)``) and maintain every view (``names``: name -> (view, strategy)),
    then maintain every view again, with nothing to do.  Probe 0 is a warm-up."""
    out = []
    for i in range(probes + 1):
        ingest_one(i)
        for kind in ("one_row", "noop"):
            for name, (view, strategy) in names.items():
                m = maintain_once(wh, i, name, view, strategy, kind=kind)
                out.append(m)
                progress(describe(f"probe {i}/{probes} ({kind.replace('_', '-')})", name, m))
    return out


#: the phases of a run, as :mod:`idivm.exec.meter` names them
PHASES = ("plan", "changes", "evaluate", "write", "indexes", "compact")


def fixed_cost_summary(measurements: Sequence[Measurement]) -> list[dict[str, Any]]:
    """Per view and strategy over the timed probes (:func:`probe_fixed_cost`): median seconds,
    Spark jobs, commits and phase seconds of a one-row run, and median seconds of a no-op run."""
    rows = []
    for view, strategy in dict.fromkeys((m.view, m.strategy) for m in measurements if m.kind == "one_row"):
        def of(kind: str) -> list[Measurement]:
            return [m for m in measurements if m.run > 0 and m.kind == kind and m.view == view
                    and m.strategy == strategy]
        one, noop = of("one_row"), of("noop")
        if not one:
            continue
        rows.append({
            "view": view, "strategy": strategy, "probes": len(one),
            "one_row_median_s": statistics.median(m.seconds for m in one),
            "spark_jobs": median_or_none([m.spark_jobs for m in one]),
            "commits": median_or_none([m.commits for m in one]),
            "phases": {ph: statistics.median((m.phases or {}).get(ph, 0.0) for m in one) for ph in PHASES
                       if any(ph in (m.phases or {}) for m in one)},
            "noop_median_s": statistics.median(m.seconds for m in noop) if noop else None,
        })
    return rows


def fixed_cost_table(rows: Sequence[Mapping[str, Any]]) -> str:
    header = ("view", "strategy", "1-row run s", "Spark jobs", "commits", *(f"{p} s" for p in PHASES), "no-op run s")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        cells = (r["view"], r["strategy"], f"{r['one_row_median_s']:.2f}", fmt_count(r["spark_jobs"]),
                 fmt_count(r["commits"]),
                 *(f"{r['phases'][p]:.2f}" if p in r["phases"] else "—" for p in PHASES),
                 f"{r['noop_median_s']:.3f}" if r["noop_median_s"] is not None else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def group_label(row: Mapping[str, Any]) -> str:
    """What a row of the summary is about besides its strategy: the view, and the batch size if any."""
    if row.get("batch_size") is None:
        return row["view"]
    return f"{row['view']}, batch {row['batch_size']:,}"


def ratios(summary: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Median seconds of recompute and tuple over id, per view (and batch size): speedups of id."""
    out: dict[str, dict[str, float]] = {}
    for group in dict.fromkeys(group_label(r) for r in summary):
        median = {r["strategy"]: r["median_s"] for r in summary
                  if group_label(r) == group and r.get("median_s") is not None}
        if "id" in median and median["id"] > 0:
            out[group] = {f"{s}/id": median[s] / median["id"] for s in ("recompute", "tuple", "id_noindex")
                          if s in median}
    return out


def ratio_lines(speedups: Mapping[str, Mapping[str, float]]) -> list[str]:
    return [f"{group}: " + ", ".join(f"{k} = {v:.2f}x" for k, v in rs.items())
            for group, rs in speedups.items() if rs]


def median_or_none(values: Sequence[int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt_count(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def markdown_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """One line per row of the summary.  A row with ``"not_measured"`` (why, in a few words) has no
    times; a column ``batch`` appears when the rows have a ``batch_size``."""
    batches = any(r.get("batch_size") is not None for r in summary)
    header = ("view", *(("batch",) if batches else ()), "strategy", "median s", "min s", "max s",
              "rows written/run", "view commit rows/run", "view files added/run", "Spark jobs/run",
              "commits/run", "verify")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in summary:
        first = (r["view"], *((fmt_count(r.get("batch_size")),) if batches else ()))
        strategy = r["strategy"]
        if r.get("not_measured"):
            cells = (*first, strategy, *("—" for _ in range(8)), r["not_measured"])
        else:
            if r["maintained_as"] != [strategy]:
                strategy += f" (as {', '.join(r['maintained_as'])})"
            verify = {True: "ok", False: "DIFFERS", None: "not verified"}[r["verified"]]
            cells = (*first, strategy, f"{r['median_s']:.2f}", f"{r['min_s']:.2f}", f"{r['max_s']:.2f}",
                     fmt_count(r["rows_written"]), fmt_count(r["view_rows_written"]),
                     fmt_count(r.get("view_files_added")), fmt_count(r.get("spark_jobs")),
                     fmt_count(r.get("commits")), verify)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    """Versions, the idivm git commit and modified tracked files, CPUs and load average now."""
    import deltalake
    import pyspark

    import idivm

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                                  text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None

    status = git("status", "--porcelain", "--untracked-files=no")
    commit = git("rev-parse", "HEAD")
    modified = None if status is None else [line[3:] for line in status.splitlines() if line.strip()]
    return {"python": platform.python_version(), "pyspark": pyspark.__version__,
            "deltalake": deltalake.__version__, "idivm": idivm.__version__,
            "git_commit": None if commit is None else commit.strip(), "git_modified_files": modified,
            "cpus": os.cpu_count(), "load_average": os.getloadavg(), "platform": platform.platform(),
            "define_accepts_strategy": define_accepts_strategy()}


def warn_if_busy(env: Mapping[str, Any]) -> None:
    if env["load_average"][0] > (env["cpus"] or 1):
        progress(f"warning: load average {env['load_average'][0]:.1f} on {env['cpus']} CPUs: "
                 "other processes will distort the times")


def write_results(out: Path, results: dict[str, Any], title: str, table: str, lines: Sequence[str]) -> None:
    """``out/results.json`` (``results`` plus the load average now) and ``out/results.md`` (title,
    table, ratio lines); the same on standard output."""
    results["load_average_end"] = os.getloadavg()
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(f"{title}\n\n{table}\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"\n{title}\n\n{table}\n", flush=True)
    for line in lines:
        print(line, flush=True)
    print(f"\nresults: {out / 'results.json'}, {out / 'results.md'}", flush=True)


def as_json(measurements: Sequence[Measurement]) -> list[dict[str, Any]]:
    return [asdict(m) for m in measurements]


def run_main(benchmark: Callable[[Any], Any], config: Any) -> int:
    """Run ``benchmark(config)``: exit status 0, or 1 after printing a :class:`BenchmarkError`."""
    try:
        benchmark(config)
    except BenchmarkError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def parse_list(text: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    """A comma-separated list of names of ``known``, without repeats; for ``argparse`` ``type=``."""
    items = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not items:
        raise argparse.ArgumentTypeError(f"no {what} given")
    unknown = [s for s in items if s not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    return items
