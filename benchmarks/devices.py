"""The parametric devices/parts workload of the thesis (§2.8.2, Fig. 2.11): ID-based vs
tuple-based maintenance vs recomputation, on the same data, the same change sets and the same
machine.

Input: the knobs of Fig. 2.11b that this workload varies here -- the scale (devices = parts),
the fanout *f* and the diff size *d* -- plus the number of timed runs, the strategies and the
views.  The data is written by ``python -m idivm.datasets devices`` (Fig. 2.11a's tables; the
thesis uses 5M devices and parts, our default is 200k of each and 2M ``devices_parts`` rows)
and loaded into a fresh warehouse.  Every strategy gets its own copy of every view
(``phone_parts_id``, ``phone_parts_tuple``, ...):

* ``phone_parts`` -- thesis Fig. 2.1b, the SPJ view of the running example;
* ``phone_cost`` -- thesis Fig. 2.5b, the same joins under ``SUM(price) GROUP BY did``,
  the view Fig. 2.12 measures.

Each run ingests *d* price updates of random parts (Fig. 2.11c, ``D^u_parts(pid, price_pre,
price_post)``, as whole rows upserted into ``parts``) in one commit, then maintains every view
once, timing each ``Warehouse.maintain`` call: all views see the same change set.  The order
of the strategies rotates from run to run so that none is always first after the ingest.  Run
0 is an untimed warm-up (JVM, Spark code generation, file caches).  At the end every view is
checked with ``Warehouse.verify``.

Output: a progress line per step, a markdown table of the median/min/max seconds and rows
written per run for every view and strategy, the ratios recompute/id and tuple/id, and
``OUT/results.json`` (configuration, environment, every measurement, summary) and
``OUT/results.md`` (the table).  ``OUT/data`` keeps the generated dataset for later runs with
the same knobs; ``OUT/warehouse`` is recreated on every invocation.

Rows written are reported twice: ``rows_written`` as the maintenance result states it (every
table the strategy writes; absent from idivm versions that do not report it) and the rows in
the files the view's own maintenance commit added, from its Delta log (MERGE:
``num_output_rows``, i.e. rewritten plus inserted rows; overwrite: ``num_added_rows``).  On
Delta the cost of applying a diff is the files a MERGE rewrites (DESIGN.md, Performance method).
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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: the checkout this file belongs to: its idivm is the one measured, installed or not
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from idivm import Warehouse  # noqa: E402
from idivm.datasets import devices, view_path  # noqa: E402
from idivm.errors import IdivmError  # noqa: E402
from idivm.storage import delta  # noqa: E402

STRATEGIES = ("id", "tuple", "recompute")

#: benchmark view name -> shipped view file (``idivm/datasets/views/<file>.sqlpp``)
VIEW_FILES: dict[str, str] = {
    "phone_parts": "devices_v",   # Fig. 2.1b
    "phone_cost": "devices_cost",  # Fig. 2.5b
}

#: the fields of ``MaintenanceResult`` reported when the running idivm has them
RESULT_COUNTS = ("diff_rows", "inserted", "updated", "deleted", "rows_written")

CREATE_VIEW = re.compile(r"\bCREATE\s+VIEW\s+(\w+)\s+AS\b", re.IGNORECASE)


class BenchmarkError(Exception):
    """A configuration the benchmark cannot run; printed as one line."""


@dataclass(frozen=True, slots=True)
class Config:
    scale: int
    fanout: int
    updates: int
    runs: int
    out: Path
    strategies: tuple[str, ...]
    views: tuple[str, ...]
    selectivity: float
    seed: int

    @property
    def spec(self) -> devices.DevicesSpec:
        return devices.DevicesSpec.at_scale(self.scale, fanout=self.fanout,
                                            selectivity=self.selectivity, seed=self.seed)


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
    inserted: int | None = None
    updated: int | None = None
    deleted: int | None = None
    rows_written: int | None = None
    note: str = ""


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- setup -----------------------------------------------------------------------------------------

def define_accepts_strategy() -> bool:
    """Whether this idivm's ``Warehouse.define`` takes ``strategy=``."""
    return "strategy" in inspect.signature(Warehouse.define).parameters


def check_strategies(strategies: Sequence[str]) -> None:
    """Fail before any work when a requested strategy cannot be chosen at define time."""
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise BenchmarkError(f"unknown strategy {', '.join(unknown)}; known: {', '.join(STRATEGIES)}")
    if not define_accepts_strategy() and set(strategies) != {"recompute"}:
        raise BenchmarkError(
            "this idivm's Warehouse.define takes no strategy= argument, so views can only be "
            "maintained by recomputation: run with --strategies recompute")


def generate_data(config: Config) -> Path:
    """The dataset of ``config.spec`` as Parquet files in ``OUT/data``, written by
    ``python -m idivm.datasets devices`` unless a previous invocation left the same spec there."""
    data = config.out / "data"
    stamp = data / "spec.json"
    wanted = asdict(config.spec)
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted and all(
            (data / f"{t}.parquet").is_file() for t in config.spec.table_names):
        progress(f"data: reusing {data} ({config.spec})")
        return data
    stamp.unlink(missing_ok=True)
    command = [sys.executable, "-m", "idivm.datasets", "devices", "--scale", str(config.scale),
               "--fanout", str(config.fanout), "--selectivity", str(config.selectivity),
               "--seed", str(config.seed), "--out", str(data), "--format", "parquet"]
    progress("data: " + " ".join(command[1:]))
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    subprocess.run(command, check=True, env=env)
    stamp.write_text(json.dumps(wanted, sort_keys=True) + "\n")
    progress(f"data: written in {time.perf_counter() - started:.1f} s")
    return data


def fresh_warehouse(config: Config) -> Warehouse:
    """An empty warehouse at ``OUT/warehouse``, replacing the one a previous invocation left."""
    path = config.out / "warehouse"
    if path.exists():
        if not (path / "catalog.json").is_file() and any(path.iterdir()):
            raise BenchmarkError(f"{path} exists and is not an idivm warehouse; remove it or choose another --out")
        shutil.rmtree(path)
    return Warehouse(path)


def load_tables(wh: Warehouse, data: Path, spec: devices.DevicesSpec) -> dict[str, int]:
    """Create every base table of ``spec`` from its Parquet file; returns rows per table."""
    keys = devices.keys(spec)
    rows = {}
    for table in spec.table_names:
        started = time.perf_counter()
        info = wh.create_table(table, key=list(keys[table]), source=data / f"{table}.parquet", format="parquet")
        rows[table] = info.rows
        progress(f"load: {table}: {info.rows:,} rows in {time.perf_counter() - started:.1f} s")
    return rows


def view_text(view: str, strategy: str) -> tuple[str, str]:
    """(name, text) of the shipped ``view`` renamed ``<view>_<strategy>``."""
    text = view_path(VIEW_FILES[view]).read_text(encoding="utf-8")
    match = CREATE_VIEW.search(text)
    if match is None or match.group(1) != view:
        raise BenchmarkError(f"{view_path(VIEW_FILES[view])} does not define view {view}")
    name = f"{view}_{strategy}"
    return name, text[:match.start(1)] + name + text[match.end(1):]


def define_views(wh: Warehouse, config: Config) -> dict[str, dict[str, Any]]:
    """Define every (view, strategy) pair; returns name -> {view, strategy, rows, seconds}."""
    accepts = define_accepts_strategy()
    defined = {}
    for view in config.views:
        for strategy in config.strategies:
            name, text = view_text(view, strategy)
            started = time.perf_counter()
            try:
                info = wh.define(text, strategy=strategy) if accepts else wh.define(text)
            except (IdivmError, ValueError) as e:
                raise BenchmarkError(f"cannot define {name} with strategy {strategy!r}: {e}") from e
            seconds = time.perf_counter() - started
            defined[name] = {"view": view, "strategy": strategy, "rows": info.rows, "seconds": seconds}
            progress(f"define: {name}: {info.rows:,} rows in {seconds:.1f} s")
    return defined


# --- runs ------------------------------------------------------------------------------------------

def write_updates(spec: devices.DevicesSpec, d: int, run: int, directory: Path) -> Path:
    """``d`` price updates of distinct random parts (Fig. 2.11c) as whole ``parts`` rows.

    The batch of run ``r`` is :func:`devices.price_updates` with seed ``r``: new prices are the
    generated prices times a factor in [0.5, 1.5], so runs differ in the parts they touch.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"run-{run:02d}.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for pid, _pre, post in devices.price_updates(spec, d, seed=run):
            f.write(json.dumps({"pid": pid, "price": post}) + "\n")
    return path


def commit_metrics(wh: Warehouse, name: str, version: int | None) -> tuple[int | None, int | None, int | None]:
    """(rows, files added, files removed) of the view's commit ``version``, from its Delta log."""
    if version is None:
        return None, None, None
    for commit in delta.history(wh.view_info(name).path):
        if commit.get("version") == version:
            m = commit.get("operationMetrics") or {}
            rows = m.get("num_output_rows", m.get("num_added_rows"))
            files_added = m.get("num_target_files_added", m.get("num_added_files"))
            files_removed = m.get("num_target_files_removed", m.get("num_removed_files"))
            return (None if rows is None else int(rows), None if files_added is None else int(files_added),
                    None if files_removed is None else int(files_removed))
    return None, None, None


def maintain_once(wh: Warehouse, run: int, name: str, view: str, strategy: str) -> Measurement:
    started = time.perf_counter()
    results = wh.maintain(name)
    seconds = time.perf_counter() - started
    (r,) = results
    rows, added, removed = commit_metrics(wh, name, r.version)
    counts = {f: getattr(r, f, None) for f in RESULT_COUNTS}
    return Measurement(run=run, view=view, strategy=strategy, maintained_as=r.strategy, seconds=seconds,
                       reported_seconds=r.seconds, changes=r.changes, version=r.version,
                       view_rows_written=rows, view_files_added=added, view_files_removed=removed,
                       note=getattr(r, "note", "") or "", **counts)


def run_all(wh: Warehouse, config: Config) -> tuple[list[Measurement], list[dict[str, Any]]]:
    """Warm-up run 0, then runs 1..``config.runs``: ingest a batch, maintain every view."""
    measurements: list[Measurement] = []
    ingests: list[dict[str, Any]] = []
    updates_dir = config.out / "updates"
    for run in range(config.runs + 1):
        label = "warm-up" if run == 0 else f"run {run}/{config.runs}"
        path = write_updates(config.spec, config.updates, run, updates_dir)
        started = time.perf_counter()
        ingested = wh.ingest("parts", path, format="rows")
        ingests.append({"run": run, "file": path.name, "seconds": time.perf_counter() - started,
                        "changes": ingested.changes, "updated": ingested.updated, "version": ingested.version})
        progress(f"{label}: ingested {ingested.changes} price updates into parts (version {ingested.version})")
        shift = run % len(config.strategies)
        order = config.strategies[shift:] + config.strategies[:shift]
        for view in config.views:
            for strategy in order:
                name = f"{view}_{strategy}"
                m = maintain_once(wh, run, name, view, strategy)
                measurements.append(m)
                fallback = "" if m.maintained_as == strategy else f" (maintained as {m.maintained_as}: {m.note})"
                written = "" if m.rows_written is None else f", {m.rows_written:,} rows written"
                progress(f"{label}: {name}: {m.seconds:.2f} s, {m.changes} change rows{written}, "
                         f"view commit wrote {fmt_count(m.view_rows_written)} rows{fallback}")
    return measurements, ingests


def verify_all(wh: Warehouse, defined: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for name in defined:
        started = time.perf_counter()
        v = wh.verify(name)
        out[name] = {"ok": v.ok, "rows": v.rows, "missing": v.missing, "extra": v.extra,
                     "seconds": time.perf_counter() - started}
        progress(f"verify: {v.summary().splitlines()[0]}")
    return out


# --- report ----------------------------------------------------------------------------------------

def summarize(measurements: Sequence[Measurement], config: Config,
              verified: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per view and strategy over the timed runs: median/min/max seconds, rows written per run."""
    rows = []
    for view in config.views:
        for strategy in config.strategies:
            timed = [m for m in measurements if m.run > 0 and m.view == view and m.strategy == strategy]
            seconds = [m.seconds for m in timed]
            rows.append({
                "view": view,
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
                "verified": verified[f"{view}_{strategy}"]["ok"],
            })
    return rows


def ratios(summary: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Median seconds of recompute and tuple over id, per view (speedups of id)."""
    out: dict[str, dict[str, float]] = {}
    for view in dict.fromkeys(r["view"] for r in summary):
        median = {r["strategy"]: r["median_s"] for r in summary if r["view"] == view}
        if "id" in median and median["id"] > 0:
            out[view] = {f"{s}/id": median[s] / median["id"] for s in ("recompute", "tuple") if s in median}
    return out


def median_or_none(values: Sequence[int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt_count(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def markdown_table(summary: Sequence[Mapping[str, Any]]) -> str:
    header = ("view", "strategy", "median s", "min s", "max s", "rows written/run",
              "view commit rows/run", "verify")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in summary:
        strategy = r["strategy"]
        if r["maintained_as"] != [strategy]:
            strategy += f" (as {', '.join(r['maintained_as'])})"
        cells = (r["view"], strategy, f"{r['median_s']:.2f}", f"{r['min_s']:.2f}", f"{r['max_s']:.2f}",
                 fmt_count(r["rows_written"]), fmt_count(r["view_rows_written"]),
                 "ok" if r["verified"] else "DIFFERS")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment() -> dict[str, Any]:
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


# --- driver ----------------------------------------------------------------------------------------

def benchmark(config: Config) -> dict[str, Any]:
    check_strategies(config.strategies)
    config.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    env = environment()  # before the runs: the code measured is the code at this commit
    if env["load_average"][0] > (env["cpus"] or 1):
        progress(f"warning: load average {env['load_average'][0]:.1f} on {env['cpus']} CPUs: "
                 "other processes will distort the times")
    data = generate_data(config)
    wh = fresh_warehouse(config)
    tables = load_tables(wh, data, config.spec)
    spark_started = time.perf_counter()
    wh.spark  # started here so that no define pays for it
    progress(f"spark: session started in {time.perf_counter() - spark_started:.1f} s")
    defined = define_views(wh, config)
    measurements, ingests = run_all(wh, config)
    verified = verify_all(wh, defined)
    summary = summarize(measurements, config, verified)
    table = markdown_table(summary)
    speedups = ratios(summary)
    results = {
        "benchmark": "devices (thesis §2.8.2, Fig. 2.11)",
        "config": {**asdict(config), "out": str(config.out), "spec": asdict(config.spec)},
        "environment": env,
        "tables": tables,
        "defined": defined,
        "ingests": ingests,
        "measurements": [asdict(m) for m in measurements],
        "verified": verified,
        "summary": summary,
        "ratios": speedups,
        "total_seconds": time.perf_counter() - started,
        "load_average_end": os.getloadavg(),
    }
    (config.out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    title = (f"devices/parts, scale {config.scale:,} (devices_parts {tables.get('devices_parts', 0):,}), "
             f"f={config.fanout}, s={config.selectivity:g}, d={config.updates}, {config.runs} timed runs")
    ratio_lines = [f"{view}: " + ", ".join(f"{k} = {v:.2f}x" for k, v in rs.items())
                   for view, rs in speedups.items()]
    (config.out / "results.md").write_text(f"{title}\n\n{table}\n\n" + "\n".join(ratio_lines) + "\n",
                                           encoding="utf-8")
    print(f"\n{title}\n\n{table}\n", flush=True)
    for line in ratio_lines:
        print(line, flush=True)
    print(f"\nresults: {config.out / 'results.json'}, {config.out / 'results.md'}", flush=True)
    return results


def parse_list(text: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not items:
        raise argparse.ArgumentTypeError(f"no {what} given")
    unknown = [s for s in items if s not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    return items


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/devices.py",
        description="Thesis §2.8.2 (Fig. 2.11): maintain the devices/parts views with every strategy "
                    "after batches of price updates and report median times and rows written.")
    parser.add_argument("--scale", type=int, default=200_000,
                        help="devices and parts (default 200000; devices_parts = scale x fanout)")
    parser.add_argument("--fanout", "-f", type=int, default=10, help="parts per device (default 10)")
    parser.add_argument("--updates", "-d", type=int, default=200, help="price updates per run (default 200)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs after one warm-up run (default 5)")
    parser.add_argument("--selectivity", "-s", type=float, default=0.2,
                        help="fraction of devices that are phones (default 0.2)")
    parser.add_argument("--seed", type=int, default=0, help="dataset seed (default 0)")
    parser.add_argument("--out", type=Path, default=Path("bench-devices"),
                        help="output directory: data/, warehouse/, updates/, results.json (default bench-devices)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        type=lambda s: parse_list(s, STRATEGIES, "strategy"),
                        help=f"comma-separated, of {', '.join(STRATEGIES)} (default all)")
    parser.add_argument("--views", default=",".join(VIEW_FILES),
                        type=lambda s: parse_list(s, tuple(VIEW_FILES), "view"),
                        help=f"comma-separated, of {', '.join(VIEW_FILES)} (default all)")
    args = parser.parse_args(argv)
    if args.scale < 1 or args.runs < 1 or args.updates < 1:
        parser.error("--scale, --runs and --updates must be >= 1")
    if not 1 <= args.fanout <= args.scale:
        parser.error("--fanout must be between 1 and --scale")
    if args.updates > args.scale:
        parser.error("--updates cannot exceed --scale (the number of parts)")
    return Config(scale=args.scale, fanout=args.fanout, updates=args.updates, runs=args.runs,
                  out=args.out.absolute(), strategies=args.strategies, views=args.views,
                  selectivity=args.selectivity, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    try:
        benchmark(config)
    except BenchmarkError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
