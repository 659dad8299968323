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
  the view Fig. 2.12 measures;
* ``phone_price_range`` -- the same joins under ``MIN(price)``, ``MAX(price)`` and ``COUNT(*)``
  (not measured by default): extremum aggregates, which the ``maps`` strategy maintains;
* ``phone_dearest_part`` -- a ``MAX`` and ``COUNT(*)`` per device in a ``FROM`` subquery joined with
  ``devices`` (not measured by default): the ``maps`` strategy keeps the subquery's groups in a
  maps cache and the join by ID.

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
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import (  # puts this checkout first on sys.path: import it before idivm
    STRATEGIES,
    BenchmarkError,
    Measurement,
    add_storage_argument,
    as_json,
    check_strategies,
    define_view,
    fixed_cost_summary,
    fixed_cost_table,
    environment,
    fresh_warehouse,
    generate_dataset,
    load_tables,
    maintain_round,
    markdown_table,
    parse_list,
    probe_fixed_cost,
    progress,
    ratio_lines,
    ratios,
    renamed,
    run_main,
    start_spark,
    summarize,
    verify_all,
    warn_if_busy,
    write_results,
)

from idivm import Warehouse
from idivm.datasets import devices, view_path

#: benchmark view name -> shipped view file (``idivm/datasets/views/<file>.sqlpp``)
VIEW_FILES: dict[str, str] = {
    "phone_parts": "devices_v",   # Fig. 2.1b
    "phone_cost": "devices_cost",  # Fig. 2.5b
    "phone_price_range": "devices_price_range",  # Fig. 2.5b's joins under MIN and MAX
    "phone_dearest_part": "devices_dearest",  # a GROUP BY joined with a table (maps: a maps cache)
}


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
    storage: str | None = None
    probes: int = 3
    extra_joins: int = 0

    @property
    def spec(self) -> devices.DevicesSpec:
        return devices.DevicesSpec.at_scale(self.scale, fanout=self.fanout, selectivity=self.selectivity,
                                            extra_joins=self.extra_joins, seed=self.seed)


# --- setup -----------------------------------------------------------------------------------------

def generate_data(config: Config) -> Path:
    """The dataset of ``config.spec`` as Parquet files in ``OUT/data``, written by
    ``python -m idivm.datasets devices`` unless a previous invocation left the same spec there."""
    options = ["--scale", str(config.scale), "--fanout", str(config.fanout),
               "--selectivity", str(config.selectivity), "--extra-joins", str(config.extra_joins),
               "--seed", str(config.seed)]
    return generate_dataset("devices", options, asdict(config.spec), config.spec.table_names,
                            config.out / "data")


def view_text(view: str, strategy: str, extra_joins: int = 0) -> tuple[str, str]:
    """(name, text) of the shipped ``view`` renamed ``<view>_<strategy>``, with ``extra_joins``
    more tables joined (:func:`with_extra_joins`)."""
    path = view_path(VIEW_FILES[view])
    name = f"{view}_{strategy}"
    text = with_extra_joins(path.read_text(encoding="utf-8"), extra_joins, str(path))
    return name, renamed(text, view, name, str(path))


#: where the joins of the shipped views are, and the select list of ``phone_parts``
JOIN_ANCHOR = "devices_parts NATURAL JOIN"
SELECT_ANCHOR = "SELECT did, pid, price\n"


def with_extra_joins(text: str, extra_joins: int, origin: str) -> str:
    """A shipped devices view with ``devices_parts_1`` .. ``devices_parts_<extra_joins>`` joined
    1-to-1 with ``devices_parts`` on (did, pid), the joins experiment of §2.8.2 (j = 2 +
    ``extra_joins`` in the thesis' terms).  ``SELECT did, pid, price`` also returns their
    ``attr_<i>``, so that no join can be dropped as unused; an aggregate keeps its select list.
    No view file with extra joins is shipped: the text is derived from the shipped one here."""
    if extra_joins == 0:
        return text
    if text.count(JOIN_ANCHOR) != 1:
        raise BenchmarkError(f"{origin}: cannot add joins, {JOIN_ANCHOR!r} does not occur exactly once")
    tables = [devices.extra_table_name(i) for i in range(1, extra_joins + 1)]
    text = text.replace(JOIN_ANCHOR, " ".join(f"{t} NATURAL JOIN" for t in ["devices_parts", *tables]))
    if SELECT_ANCHOR in text:
        attrs = ", ".join(f"attr_{i}" for i in range(1, extra_joins + 1))
        text = text.replace(SELECT_ANCHOR, f"SELECT did, pid, price, {attrs}\n")
    return text


def define_views(wh: Warehouse, config: Config) -> dict[str, dict[str, Any]]:
    """Define every (view, strategy) pair; returns name -> {view, strategy, rows, seconds}."""
    defined = {}
    for view in config.views:
        for strategy in config.strategies:
            name, text = view_text(view, strategy, config.extra_joins)
            defined[name] = define_view(wh, name, text, view, strategy)
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
        measurements += maintain_round(wh, config.views, config.strategies, run, label)
    return measurements, ingests


# --- driver ----------------------------------------------------------------------------------------

def benchmark(config: Config) -> dict[str, Any]:
    check_strategies(config.strategies)
    config.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    env = environment()  # before the runs: the code measured is the code at this commit
    warn_if_busy(env)
    data = generate_data(config)
    wh = fresh_warehouse(config.out, config.storage)
    keys = devices.keys(config.spec)
    tables = load_tables(wh, data, {t: keys[t] for t in config.spec.table_names})
    start_spark(wh)
    defined = define_views(wh, config)
    measurements, ingests = run_all(wh, config)
    if config.probes:
        def ingest_one(i: int) -> None:
            wh.ingest("parts", write_updates(config.spec, 1, 10_000 + i, config.out / "updates"), format="rows")

        names = {f"{v}_{s}": (v, s) for v in config.views for s in config.strategies}
        measurements += probe_fixed_cost(wh, names, ingest_one, config.probes)
    fixed = fixed_cost_summary(measurements)
    verified = verify_all(wh, defined)
    summary = summarize(measurements, config.views, config.strategies, verified)
    table = markdown_table(summary)
    speedups = ratios(summary)
    results = {
        "benchmark": "devices (thesis §2.8.2, Fig. 2.11)",
        "config": {**asdict(config), "out": str(config.out), "spec": asdict(config.spec)},
        "environment": env,
        "tables": tables,
        "defined": defined,
        "ingests": ingests,
        "measurements": as_json(measurements),
        "verified": verified,
        "summary": summary,
        "ratios": speedups,
        "fixed_cost": fixed,
        "total_seconds": time.perf_counter() - started,
    }
    title = (f"devices/parts, scale {config.scale:,} (devices_parts {tables.get('devices_parts', 0):,}), "
             f"f={config.fanout}, s={config.selectivity:g}, d={config.updates}, "
             + (f"{config.extra_joins} extra joins, " if config.extra_joins else "")
             + f"{config.runs} timed runs"
             + (f", storage {config.storage}" if config.storage else ""))
    lines = ratio_lines(speedups)
    if fixed:
        lines += ["", f"Fixed cost: a run after a one-row change and a run with nothing to do, medians of "
                      f"{config.probes} probes", "", fixed_cost_table(fixed)]
    write_results(config.out, results, title, table, lines)
    return results


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
    parser.add_argument("--strategies", default="id,tuple,recompute",
                        type=lambda s: parse_list(s, STRATEGIES, "strategy"),
                        help=f"comma-separated, of {', '.join(STRATEGIES)} (default id,tuple,recompute: "
                             "relational views have no provenance indexes)")
    parser.add_argument("--views", default="phone_parts,phone_cost",
                        type=lambda s: parse_list(s, tuple(VIEW_FILES), "view"),
                        help=f"comma-separated, of {', '.join(VIEW_FILES)} (default phone_parts,phone_cost: "
                             "the thesis' views)")
    parser.add_argument("--probes", type=int, default=3,
                        help="after the timed runs, runs after a one-row change and runs with nothing to do "
                             "(the fixed cost of a run), each view and strategy, after a warm-up (default 3; 0: none)")
    parser.add_argument("--extra-joins", "-j", type=int, default=0,
                        help="tables joined 1-to-1 with devices_parts in every view (the thesis' j minus 2; "
                             "default 0)")
    add_storage_argument(parser)
    args = parser.parse_args(argv)
    if args.extra_joins < 0:
        parser.error("--extra-joins must be >= 0")
    if args.scale < 1 or args.runs < 1 or args.updates < 1:
        parser.error("--scale, --runs and --updates must be >= 1")
    if not 1 <= args.fanout <= args.scale:
        parser.error("--fanout must be between 1 and --scale")
    if args.updates > args.scale:
        parser.error("--updates cannot exceed --scale (the number of parts)")
    return Config(scale=args.scale, fanout=args.fanout, updates=args.updates, runs=args.runs,
                  out=args.out.absolute(), strategies=args.strategies, views=args.views,
                  selectivity=args.selectivity, seed=args.seed, storage=args.storage, probes=args.probes,
                  extra_joins=args.extra_joins)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(benchmark, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
