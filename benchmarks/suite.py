"""One benchmark suite: every maintenance strategy and a DuckDB recomputation, on the same data
and the same batches, over grids of workload parameters (``python -m benchmarks run``).

Input: the workloads (devices, Yelp-like, TPC-H, BSMA, order book), a grid (``quick`` or ``full``), a scale factor for
its data sizes, the timed runs per point and the axes to run.  A grid has a default point and
axes; each axis varies one parameter from the default point:

* devices (thesis §2.8.2, Fig. 2.11): ``d`` price updates per batch, ``j`` extra 1-to-1 joins
  with ``devices_parts`` (``DevicesSpec.extra_joins``, the thesis' j minus 2; the views with
  extra joins are derived from the shipped ones by ``devices.with_extra_joins``), ``s`` the
  share of phones, ``f`` parts per device and ``size`` the ``devices_parts`` rows at the
  default fanout (devices = parts = size / default f; the ``f`` axis keeps that number of
  devices, so its ``devices_parts`` grows with f, as in Fig. 2.11);
* Yelp-like (thesis §2.9): ``batch`` changes per batch and ``businesses``;
* TPC-H (``tpch.py``): ``orders`` refreshed per batch (RF1 inserts and RF2 deletes that many
  orders with their lines) and ``sf`` the scale factor;
* social media after BSMA (``bsma.py``, thesis §2.8.1): ``updates`` of users' tweetsnum and
  favornum per batch and ``users``;
* an order book after DBToaster's finance queries (``orderbook.py``): ``changes`` per batch
  (orders placed, removed and partially filled) and ``book``, the orders on each side.

Points that share their data (all parameters but the batch size) run in one group: the data
is generated (``OUT/work/<group>/data``, kept for later invocations), loaded into a fresh
warehouse, every view is defined once per strategy, and the same tables are built in DuckDB
from the same Parquet files.  Then, for each batch size of the group, in ascending order: a
warm-up run and ``runs`` timed runs.  A run ingests the next batch into idivm and applies it
to DuckDB's tables, maintains every copy of every view (``common.maintain_round``, strategies
rotated), and recomputes every view in DuckDB (timed: the recomputation only).  After the last
run of a point, the suite compares each copy with DuckDB's result (row count and sums,
``duck.Checksum``) and stops with an error if one differs.  After the group, ``Warehouse.verify``
checks every copy against idivm's own recomputation, and the group's warehouse is deleted.

Output: ``OUT/results.json`` (configuration, environment, every measurement and DuckDB timing,
the checks, the summary), ``OUT/results.md`` (a table per workload, view and axis: median
seconds per strategy and DuckDB, and recompute/id) and ``OUT/<workload>-<view>-<axis>.png``
(when matplotlib is installed).  Both files are rewritten after every group, so an interrupted
suite leaves what it measured.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import bsma as bsma_bench
import orderbook as orderbook_bench
import devices as devices_bench
import duck
import pyarrow.parquet as pq
import report
import tpch as tpch_bench
import yelp as yelp_bench
from common import (  # puts this checkout first on sys.path: import it before idivm
    BenchmarkError,
    Measurement,
    as_json,
    environment,
    fresh_warehouse,
    ingest_events,
    load_tables,
    maintain_round,
    define_view,
    progress,
    renamed,
    start_spark,
    summary_row,
    verify_all,
    warn_if_busy,
)

from idivm.datasets import arrow_schema, devices, yelp


@dataclass(frozen=True, slots=True)
class Axis:
    """One parameter varied from the default point."""

    name: str
    label: str                 # the x label of its plot
    values: tuple[Any, ...]
    log_x: bool = False
    scaled: bool = False       # a data size: multiplied by --scale


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    title: str
    views: tuple[str, ...]
    strategies: tuple[str, ...]
    batch: str                 # the parameter that does not change the data
    grids: Mapping[str, tuple[dict[str, Any], tuple[Axis, ...]]]


def devices_axes(d: tuple[int, ...], j: tuple[int, ...], s: tuple[float, ...], f: tuple[int, ...],
                 size: tuple[int, ...]) -> tuple[Axis, ...]:
    return (Axis("d", "d: price updates per batch", d, log_x=True),
            Axis("j", "j: extra 1-to-1 joins (thesis j - 2)", j),
            Axis("s", "s: share of devices that are phones", s),
            Axis("f", "f: parts per device", f),
            Axis("size", "devices_parts rows (at the default f)", size, log_x=True, scaled=True))


DEVICES = Workload(
    name="devices", title="devices/parts (thesis §2.8.2, Fig. 2.11)",
    views=tuple(devices_bench.VIEW_FILES),
    # relational views have no provenance indexes: id_noindex would measure id again
    strategies=("id", "tuple", "recompute", "auto"),
    batch="d",
    grids={
        "quick": ({"d": 200, "j": 0, "s": 0.2, "f": 10, "size": 100_000},
                  devices_axes(d=(1, 100, 200, 1000), j=(0, 2, 4), s=(0.06, 0.2, 1.0), f=(5, 10, 25),
                               size=(10_000, 100_000, 1_000_000, 10_000_000))),
        "full": ({"d": 200, "j": 0, "s": 0.2, "f": 10, "size": 1_000_000},
                 devices_axes(d=(1, 100, 200, 1000, 5000, 15000), j=(0, 1, 2, 3, 4), s=(0.06, 0.1, 0.2, 0.5, 1.0),
                              f=(5, 10, 15, 20, 25), size=(100_000, 1_000_000, 10_000_000))),
    })

YELP_VIEWS = ("sf_reviews", "sf_reviews_grouped")


def batch_and_size(batch: str, batch_label: str, size: str, size_label: str,
                   quick: tuple[Any, tuple, Any, tuple], full: tuple[Any, tuple, Any, tuple]
                   ) -> dict[str, tuple[dict[str, Any], tuple[Axis, ...]]]:
    """The grids of a workload with two axes, a batch size and a data size: each grid as
    (default batch, batch values, default size, size values)."""
    return {grid: ({batch: b, size: z}, (Axis(batch, batch_label, bs, log_x=True),
                                         Axis(size, size_label, zs, log_x=True, scaled=True)))
            for grid, (b, bs, z, zs) in (("quick", quick), ("full", full))}


YELP = Workload(
    name="yelp", title="Yelp-like nested views (thesis §2.9)",
    views=YELP_VIEWS,
    strategies=("id", "id_noindex", "tuple", "recompute", "auto"),
    batch="batch",
    grids=batch_and_size("batch", "changes per batch", "businesses", "businesses",
                         quick=(100, (10, 100, 1000), 12_000, (3_000, 12_000, 48_000)),
                         full=(100, (10, 100, 1000, 10000), 120_000, (12_000, 120_000, 1_200_000))))

TPCH = Workload(
    name="tpch", title="TPC-H views under the refresh functions",
    views=tpch_bench.VIEWS,
    # maps: with --strategies (tpch_q5 has 42 maps; its define takes some 40 s at sf 0.01)
    strategies=("id", "tuple", "recompute", "auto"),
    batch="orders",
    grids=batch_and_size("orders", "orders inserted and deleted per batch (RF1 + RF2)", "sf", "TPC-H scale factor",
                         quick=(100, (10, 100, 1000), 0.1, (0.01, 0.1, 1.0)),
                         full=(100, (10, 100, 1000, 10000), 1.0, (0.1, 1.0, 10.0))))

BSMA = Workload(
    name="bsma", title="social-media views after BSMA (thesis §2.8.1, Fig. 2.9)",
    views=bsma_bench.VIEWS,
    strategies=("id", "tuple", "recompute", "auto"),
    batch="updates",
    grids=batch_and_size("updates", "users updated per batch (tweetsnum, favornum)", "users", "users",
                         quick=(100, (10, 100, 1000), 30_000, (10_000, 30_000, 100_000)),
                         full=(100, (10, 100, 1000, 10000), 300_000, (100_000, 300_000, 1_000_000))))

ORDERBOOK = Workload(
    name="orderbook", title="an order book after DBToaster's finance queries (VWAP, PSP, MST, AXF, BSP, BSV)",
    views=orderbook_bench.VIEWS,
    # maps: with --strategies (the views DBToaster maintains by maps)
    strategies=("id", "tuple", "recompute", "auto"),
    batch="changes",
    grids=batch_and_size("changes", "orders placed, removed or filled per batch", "book", "orders per side of the book",
                         # MST's nested aggregate is correlated on an inequality: its recomputation grows
                         # with the square of the book (60 s at 10,000 orders a side)
                         quick=(100, (10, 100, 1000), 1_000, (300, 1_000, 3_000)),
                         full=(100, (10, 100, 1000, 10000), 3_000, (1_000, 3_000, 10_000))))

# in the order `--workload all` runs them: the longest (TPC-H up to sf 1) last, so an interrupted
# run has the most workloads complete
WORKLOADS = {w.name: w for w in (DEVICES, YELP, BSMA, ORDERBOOK, TPCH)}


@dataclass(frozen=True, slots=True)
class SuiteConfig:
    workloads: tuple[str, ...]
    grid: str
    scale: float
    runs: int
    out: Path
    #: axis name -> values given on the command line (None: the grid's); empty: every axis
    axes: Mapping[str, tuple[Any, ...] | None] = field(default_factory=dict)
    strategies: tuple[str, ...] | None = None
    threads: int = duck.DEFAULT_THREADS
    seed: int = 0
    storage: str | None = None
    #: the views to maintain (None: every view of a workload)
    views: tuple[str, ...] | None = None


def workload(name: str, config: SuiteConfig) -> Workload:
    """The workload ``name`` with the views ``config`` chooses."""
    w = WORKLOADS[name]
    return replace(w, views=tuple(v for v in w.views if config.views is None or v in config.views))


# --- the grid --------------------------------------------------------------------------------------

def scaled(value: Any, axis: Axis, scale: float) -> Any:
    """A data size of the grid times ``scale``: whole sizes stay whole (at least 1), a scale
    factor (a float) is multiplied."""
    if not axis.scaled:
        return value
    return value * scale if isinstance(value, float) else max(1, round(value * scale))


def plan(workload: Workload, config: SuiteConfig) -> tuple[dict[str, Any], list[Axis]]:
    """The default point and the axes to run, sizes scaled; values given on the command line are
    taken as they are."""
    default, axes = workload.grids[config.grid]
    by_name = {a.name: a for a in axes}
    default = {k: scaled(v, by_name[k], config.scale) for k, v in default.items()}
    chosen = []
    for axis in axes:
        if config.axes and axis.name not in config.axes:
            continue
        given = config.axes.get(axis.name)
        values = given if given else tuple(scaled(v, axis, config.scale) for v in axis.values)
        chosen.append(Axis(axis.name, axis.label, tuple(values), axis.log_x, axis.scaled))
    return default, chosen


def groups(workload: Workload, default: Mapping[str, Any], axes: Sequence[Axis]) -> dict[tuple, list[int]]:
    """The points of ``axes``, grouped by their data (every parameter but the batch size):
    data key (sorted items) -> batch sizes, ascending."""
    out: dict[tuple, set] = {}
    for axis in axes:
        for point in report.axis_points(default, axis.name, axis.values):
            data = tuple(sorted((k, v) for k, v in point.items() if k != workload.batch))
            out.setdefault(data, set()).add(point[workload.batch])
    return {k: sorted(v) for k, v in out.items()}


# --- one group -------------------------------------------------------------------------------------

@dataclass(slots=True)
class State:
    """Everything measured so far, as results.json holds it."""

    measurements: list[dict[str, Any]] = field(default_factory=list)
    duckdb: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Group:
    """What a group of points runs on: its warehouse, its DuckDB twin and its view copies."""

    workload: Workload
    data: dict[str, Any]
    strategies: tuple[str, ...]
    wh: Any
    twin: duck.DuckRecompute
    sql: dict[str, str]
    checksums: dict[str, duck.Checksum]
    live: set[str]
    unsupported: dict[str, dict[str, str]] = field(default_factory=dict)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)


def run_point(group: Group, batch_size: int, runs: int, ingest: Callable[[int], dict[str, Any]],
              state: State) -> None:
    """Warm-up run 0 and runs 1..``runs`` at one batch size: ``ingest(batch_size)`` (into idivm
    and DuckDB), maintain every live copy, recompute every view in DuckDB; then the check."""
    w = group.workload
    point = {**group.data, w.batch: batch_size}
    measured: list[Measurement] = []
    seconds: dict[str, list[float]] = {v: [] for v in w.views}
    for run in range(runs + 1):
        label = f"{w.name} {point_label(point)}, " + ("warm-up" if run == 0 else f"run {run}/{runs}")
        record = ingest(batch_size)
        state.groups[-1]["ingests"].append({"batch_size": batch_size, "run": run, **record})
        progress(f"{label}: ingested {record.get('summary', '')}")
        measured += maintain_round(group.wh, w.views, group.strategies, run, label, batch_size=batch_size,
                                   live=lambda name: name in group.live and name not in group.failed,
                                   failed=group.failed)
        for view in w.views:
            if view not in group.sql:
                continue
            s = group.twin.recompute(duck_table(view), group.sql[view])
            state.duckdb.append({"workload": w.name, "view": view, "point": point, "run": run, "seconds": s})
            progress(f"{label}: duckdb {view}: {s:.3f} s")
            if run > 0:
                seconds[view].append(s)
    state.measurements += [{"workload": w.name, "point": point, **m} for m in as_json(measured)]
    for view in w.views:
        for strategy in group.strategies:
            name = f"{view}_{strategy}"
            timed = [m for m in measured if m.run > 0 and m.view == view and m.strategy == strategy]
            if timed:
                row = summary_row(view, strategy, timed, None, batch_size)
            else:
                why = "unsupported" if name in group.unsupported else "maintain failed"
                row = {"view": view, "strategy": strategy, "not_measured": why}
            state.summary.append({"workload": w.name, "point": point, **row})
        if view in group.sql:
            s = seconds[view]
            state.summary.append({"workload": w.name, "point": point, "view": view, "strategy": "duckdb",
                                  "runs": len(s), "median_s": statistics.median(s), "min_s": min(s),
                                  "max_s": max(s)})
        else:
            state.summary.append({"workload": w.name, "point": point, "view": view, "strategy": "duckdb",
                                  "not_measured": "no DuckDB query"})
    check(group, point, state)


def check(group: Group, point: Mapping[str, Any], state: State) -> None:
    """Every live copy of every view against DuckDB's recomputation after the same batches:
    row count and sums must agree, else :class:`BenchmarkError`."""
    w = group.workload
    for view in w.views:
        if view not in group.sql:
            continue
        expected = group.checksums[view].duckdb(group.twin.con, duck_table(view))
        for strategy in group.strategies:
            name = f"{view}_{strategy}"
            if name not in group.live or name in group.failed:
                continue
            actual = group.checksums[view].spark(group.wh.read(name))
            differences = duck.compare(expected, actual)
            state.checks.append({"workload": w.name, "point": point, "view": view, "strategy": strategy,
                                 "duckdb": expected, "idivm": actual, "ok": not differences,
                                 **map_sizes(group.wh, name)})
            if differences:
                raise BenchmarkError(
                    f"{w.name} {point_label(point)}: view {name} differs from DuckDB's recomputation of "
                    f"{view} after the same batches: " + "; ".join(differences))
        progress(f"check: {w.name} {point_label(point)}: {view}: every copy agrees with DuckDB "
                 f"({', '.join(f'{k} {fmt(v)}' for k, v in expected.items())})")


def map_sizes(wh, name: str) -> dict[str, int]:
    """The count and total entries of the higher-order delta maps of view copy ``name`` (none: {}):
    each key once, whatever increments were appended to a map since it was last consolidated."""
    from idivm.exec.maps import M, read_map_arrow
    from idivm.storage import delta

    entry = wh.catalog.view(name)
    maps = entry.extra.get("maps") or {}
    if not maps:
        return {}
    paths = [wh.catalog.root / rel for rel in maps.values()]
    return {"maps": len(maps), "map_rows": sum(
        read_map_arrow(p, delta.version(p), [c for c in delta.schema(p).names if c != M]).num_rows for p in paths)}


def duck_table(view: str) -> str:
    return f"duckdb_{view}"


def point_label(point: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={fmt(v)}" for k, v in point.items())


def fmt(value: Any) -> str:
    """A parameter or an aggregate as it is printed: ints with thousands separators, floats
    as given up to a thousand, to the cent above."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}" if abs(value) < 1000 else f"{value:,.2f}"


def finish_group(group: Group, state: State, out: Path, verify: bool = True) -> None:
    """``Warehouse.verify`` of every live copy (unless the group stopped on an error); then the
    group's DuckDB and warehouse go."""
    names = [n for n in group.live if n not in group.failed] if verify else []
    verified = {}
    for name in sorted(names):
        try:
            verified.update(verify_all(group.wh, [name]))
        except Exception as e:  # noqa: BLE001 -- reported with the others
            verified[name] = {"ok": None, "error": f"{type(e).__name__}: {e}"}
    state.groups[-1]["verified"] = verified
    state.groups[-1]["unsupported"] = group.unsupported
    state.groups[-1]["failed"] = group.failed
    label = f"{group.workload.name} {point_label(group.data)}"
    for name, u in group.unsupported.items():
        state.notes.append(f"{label}: {name}: unsupported: {u['error']}")
    for name, f in group.failed.items():
        state.notes.append(f"{label}: {name}: maintain raised at batch {f['batch_size']} run {f['run']}: "
                           f"{f['error'].splitlines()[0]}")
    for name, v in verified.items():
        if not v.get("ok"):
            state.notes.append(f"{label}: {name}: Warehouse.verify: " +
                               (v.get("error") or f"{v['missing']} rows missing, {v['extra']} extra"))
        for row in state.summary:
            if row["workload"] == group.workload.name and f"{row['view']}_{row['strategy']}" == name \
                    and all(row["point"].get(k) == v2 for k, v2 in group.data.items()):
                row["verified"] = v.get("ok")
    group.twin.close()
    shutil.rmtree(out / "warehouse", ignore_errors=True)


def devices_group(data: Mapping[str, Any], batches: Sequence[int], default: Mapping[str, Any], config: SuiteConfig,
                  strategies: tuple[str, ...], state: State) -> None:
    """One devices data point: its d values in ascending order."""
    n_devices = max(1, round(data["size"] / default["f"]))
    out = config.out / "work" / f"devices-n{n_devices}-f{data['f']}-s{data['s']:g}-j{data['j']}"
    dconfig = devices_bench.Config(scale=n_devices, fanout=data["f"], updates=batches[0], runs=config.runs, out=out,
                                   strategies=strategies, views=workload("devices", config).views, selectivity=data["s"],
                                   seed=config.seed, storage=config.storage, probes=0, extra_joins=data["j"])
    if data["f"] > n_devices:
        state.notes.append(f"devices {point_label(data)}: skipped: fanout {data['f']} > {n_devices} parts")
        return
    spec = dconfig.spec
    out.mkdir(parents=True, exist_ok=True)
    data_dir = devices_bench.generate_data(dconfig)
    wh = fresh_warehouse(out, config.storage)
    keys = devices.keys(spec)
    tables = load_tables(wh, data_dir, {t: keys[t] for t in spec.table_names})
    start_spark(wh)
    defined = devices_bench.define_views(wh, dconfig)
    twin = duck.DuckRecompute(config.threads)
    loaded = twin.load(data_dir, spec.table_names)
    progress(f"duckdb: loaded {', '.join(spec.table_names)} in {sum(loaded.values()):.1f} s")
    sql = {v: duck.relational_sql(devices_bench.view_text(v, "duckdb", data["j"])[1]) for v in workload("devices", config).views}
    checksums = {}
    for v in workload("devices", config).views:
        twin.recompute(duck_table(v), sql[v])
        checksums[v] = duck.column_checksum(twin.columns(duck_table(v)))
    state.groups.append({"workload": "devices", "data": dict(data), "spec": asdict(spec), "tables": tables,
                         "defined": defined, "duckdb_load_s": loaded, "duckdb_sql": sql, "ingests": []})
    group = Group(workload("devices", config), dict(data), strategies, wh, twin, sql, checksums, set(defined))
    counter = iter(range(1_000_000))

    def ingest(d: int) -> dict[str, Any]:
        k = next(counter)  # every batch of the group its own seed
        path = devices_bench.write_updates(spec, d, k, out / "updates" / f"d-{d}")
        started = time.perf_counter()
        ingested = wh.ingest("parts", path, format="rows")
        seconds = time.perf_counter() - started
        rows = twin.apply_price_updates(path)
        return {"file": str(path.relative_to(out)), "seconds": seconds, "changes": ingested.changes,
                "version": ingested.version, "duckdb_rows_updated": rows,
                "summary": f"{ingested.changes} price updates into parts (version {ingested.version})"}

    try:
        for d in batches:
            if d > spec.parts:
                state.notes.append(f"devices {point_label(data)}: d={d} skipped: more than the {spec.parts} parts")
                continue
            run_point(group, d, config.runs, ingest, state)
    except BaseException:
        finish_group(group, state, out, verify=False)
        raise
    finish_group(group, state, out)


def yelp_group(data: Mapping[str, Any], batches: Sequence[int], default: Mapping[str, Any], config: SuiteConfig,
               strategies: tuple[str, ...], state: State) -> None:
    """One Yelp-like data point: its batch sizes in ascending order, from one change stream."""
    d = yelp.YelpSpec()
    out = config.out / "work" / f"yelp-b{data['businesses']}"
    yconfig = yelp_bench.Config(
        businesses=data["businesses"], reviews_per_business=d.reviews_per_business,
        users_per_business=d.users_per_business, sf_fraction=d.sf_fraction, elite_fraction=d.elite_fraction,
        friends_per_user=d.friends_per_user, seed=config.seed, changes_seed=None, batches=tuple(batches),
        runs=config.runs, out=out, strategies=strategies, views=workload("yelp", config).views, storage=config.storage, probes=0)
    spec = yconfig.spec
    out.mkdir(parents=True, exist_ok=True)
    data_dir = yelp_bench.generate_data(yconfig)
    wh = fresh_warehouse(out, config.storage)
    tables = load_tables(wh, data_dir, yelp.keys(spec))
    start_spark(wh)
    views = yelp_bench.define_views(wh, yconfig)
    stream = yelp_bench.change_stream(yconfig)
    twin = duck.DuckRecompute(config.threads)
    loaded = twin.load(data_dir, yelp.KEYS)
    progress(f"duckdb: loaded {', '.join(yelp.KEYS)} in {sum(loaded.values()):.1f} s")
    sql = {v: duck.YELP_SQL[v] for v in workload("yelp", config).views if v in duck.YELP_SQL}
    state.groups.append({"workload": "yelp", "data": dict(data), "spec": asdict(spec), "tables": tables,
                         "defined": views.defined, "duckdb_load_s": loaded, "duckdb_sql": sql, "ingests": []})
    group = Group(workload("yelp", config), dict(data), strategies, wh, twin, sql, dict(duck.YELP_CHECKSUMS), set(views.defined),
                  unsupported=views.unsupported, failed=views.failed)
    run_batches(group, batches, config, state, out, stream.next_batch, yelp_bench.ingest_drawn, yelp.KEYS,
                {t: arrow_schema(yelp.SCHEMAS[t]) for t in yelp.KEYS})


def run_batches(group: Group, batches: Sequence[int], config: SuiteConfig, state: State, out: Path,
                draw: Callable[[int], Any], ingest_batch: Callable[[Any, Any, Path], dict[str, Any]],
                keys: Mapping[str, Sequence[str]], schemas: Mapping[str, Any]) -> None:
    """The points of ``group``, batch size by batch size: each batch drawn (``draw(n)``, with the
    ``number`` and each table's Debezium ``events``), ingested into idivm (``ingest_batch``) and
    replayed in DuckDB; then the group's verification."""

    def ingest(n: int) -> dict[str, Any]:
        batch = draw(n)
        record = ingest_batch(group.wh, batch, out / "changes")
        record["duckdb_keys"] = {t: group.twin.apply_events(t, keys[t], schemas[t], events)
                                 for t, events in batch.events.items()}
        events = ", ".join(f"{t} {len(e)}" for t, e in batch.events.items())
        record["summary"] = f"batch {batch.number} ({events} events) in {record['seconds']:.1f} s"
        return record

    try:
        for n in batches:
            run_point(group, n, config.runs, ingest, state)
    except BaseException:
        finish_group(group, state, out, verify=False)
        raise
    finish_group(group, state, out)


def stream_group(w: Workload, data: Mapping[str, Any], batches: Sequence[int], config: SuiteConfig,
                 strategies: tuple[str, ...], state: State, out: Path, data_dir: Path, bench: Any, stream: Any,
                 spec: Mapping[str, Any]) -> None:
    """One data point of a workload whose batches are Debezium events drawn from a stream
    (``stream.next_batch(n)``, a ``common.EventBatch``; TPC-H, BSMA): its batch sizes in
    ascending order.  ``bench`` is the workload's module: its ``KEYS`` and ``view_text``."""
    wh = fresh_warehouse(out, config.storage)
    tables = load_tables(wh, data_dir, bench.KEYS)
    start_spark(wh)
    defined, unsupported = {}, {}
    for view in w.views:
        for strategy in strategies:
            name = f"{view}_{strategy}"
            try:
                defined[name] = define_view(wh, name, renamed(bench.view_text(view), view, name, view), view, strategy)
            except BenchmarkError as e:
                unsupported[name] = {"view": view, "strategy": strategy, "error": str(e)}
                progress(f"define: {name}: unsupported: {e}")
    twin = duck.DuckRecompute(config.threads)
    loaded = twin.load(data_dir, bench.KEYS)
    progress(f"duckdb: loaded {', '.join(bench.KEYS)} in {sum(loaded.values()):.1f} s")
    sql = {v: duck.relational_sql(bench.view_text(v)) for v in w.views}
    checksums = {}
    for v in w.views:
        twin.recompute(duck_table(v), sql[v])
        checksums[v] = duck.column_checksum(twin.columns(duck_table(v)))
    state.groups.append({"workload": w.name, "data": dict(data), "spec": dict(spec), "tables": tables,
                         "defined": defined, "duckdb_load_s": loaded, "duckdb_sql": sql, "ingests": []})
    group = Group(w, dict(data), strategies, wh, twin, sql, checksums, set(defined), unsupported=unsupported)
    run_batches(group, batches, config, state, out, stream.next_batch, ingest_events, bench.KEYS,
                {t: pq.read_schema(data_dir / f"{t}.parquet") for t in bench.KEYS})


def tpch_group(data: Mapping[str, Any], batches: Sequence[int], default: Mapping[str, Any], config: SuiteConfig,
               strategies: tuple[str, ...], state: State) -> None:
    """One TPC-H scale factor, from one refresh stream."""
    out = config.out / "work" / f"tpch-sf{data['sf']:g}"
    out.mkdir(parents=True, exist_ok=True)
    data_dir, pool = tpch_bench.generate_data(data["sf"], out, config.seed)
    stream_group(workload("tpch", config), data, batches, config, strategies, state, out, data_dir, tpch_bench,
                 tpch_bench.Refresh(data_dir, pool, config.seed), {"sf": data["sf"], "seed": config.seed})


def bsma_group(data: Mapping[str, Any], batches: Sequence[int], default: Mapping[str, Any], config: SuiteConfig,
               strategies: tuple[str, ...], state: State) -> None:
    """One BSMA-like database, from one stream of user updates."""
    out = config.out / "work" / f"bsma-u{data['users']}"
    out.mkdir(parents=True, exist_ok=True)
    data_dir = bsma_bench.generate_data(data["users"], out, config.seed)
    stream_group(workload("bsma", config), data, batches, config, strategies, state, out, data_dir, bsma_bench,
                 bsma_bench.Updates(data_dir, config.seed), {"users": data["users"], "seed": config.seed})


def orderbook_group(data: Mapping[str, Any], batches: Sequence[int], default: Mapping[str, Any],
                    config: SuiteConfig, strategies: tuple[str, ...], state: State) -> None:
    """One order book, from one stream of its changes."""
    out = config.out / "work" / f"orderbook-o{data['book']}"
    out.mkdir(parents=True, exist_ok=True)
    data_dir = orderbook_bench.generate_data(data["book"], out, config.seed)
    stream_group(workload("orderbook", config), data, batches, config, strategies, state, out, data_dir,
                 orderbook_bench, orderbook_bench.Stream(data_dir, config.seed),
                 {"book": data["book"], "seed": config.seed})


GROUP_RUNNERS = {"devices": devices_group, "yelp": yelp_group, "tpch": tpch_group, "bsma": bsma_group,
                 "orderbook": orderbook_group}


# --- driver ----------------------------------------------------------------------------------------

def run(config: SuiteConfig) -> dict[str, Any]:
    """Every chosen workload's groups, then the report; results are rewritten after each group."""
    config.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    env.update({"duckdb": duck_version(), "duckdb_threads": config.threads,
                "matplotlib": matplotlib_version()})
    warn_if_busy(env)
    state = State()
    plans = {}
    for name in config.workloads:
        w = workload(name, config)
        default, axes = plan(w, config)
        if not axes:
            progress(f"{name}: no axis chosen, skipped")
            continue
        plans[name] = (default, axes)
    started = time.perf_counter()
    results: dict[str, Any] = {}
    try:
        for name, (default, axes) in plans.items():
            w = workload(name, config)
            strategies = config.strategies or w.strategies
            todo = groups(w, default, axes)
            for i, (data, batches) in enumerate(todo.items(), 1):
                progress(f"{name}: group {i}/{len(todo)}: {point_label(dict(data))}, "
                         f"{w.batch} = {', '.join(map(fmt, batches))}")
                GROUP_RUNNERS[name](dict(data), batches, default, config, strategies, state)
                results = write(config, env, plans, state, time.perf_counter() - started, plots=False)
        unverified = [f"{g['workload']} {point_label(g['data'])}: {n}" for g in state.groups
                      for n, v in g.get("verified", {}).items() if not v.get("ok")]
        if unverified:
            raise BenchmarkError("views differ from idivm's recomputation (Warehouse.verify): "
                                 + "; ".join(unverified))
    finally:
        results = write(config, env, plans, state, time.perf_counter() - started, plots=True)
    return results


def write(config: SuiteConfig, env: Mapping[str, Any], plans: Mapping[str, tuple[dict, list[Axis]]], state: State,
          seconds: float, plots: bool) -> dict[str, Any]:
    """``OUT/results.json``, ``OUT/results.md`` and (``plots``) the PNGs."""
    import json
    import os

    method = duck.METHOD.format(threads=config.threads)
    results = {
        "suite": "python -m benchmarks run",
        "config": {**asdict(config), "out": str(config.out),
                   "axes": {k: list(v) if v else None for k, v in config.axes.items()}},
        "environment": dict(env),
        "load_average_end": os.getloadavg(),
        "duckdb_method": method,
        "plans": {name: {"default": default, "axes": [asdict(a) for a in axes]}
                  for name, (default, axes) in plans.items()},
        "groups": state.groups,
        "measurements": state.measurements,
        "duckdb": state.duckdb,
        "checks": state.checks,
        "summary": state.summary,
        "notes": state.notes,
        "total_seconds": seconds,
    }
    (config.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    pictures = draw(results, config.out) if plots else []
    (config.out / "results.md").write_text(markdown(config, env, plans, state, method, pictures), encoding="utf-8")
    return results


def columns(workload: Workload, config: SuiteConfig) -> list[str]:
    return [*(config.strategies or workload.strategies), "duckdb"]


def markdown(config: SuiteConfig, env: Mapping[str, Any], plans: Mapping[str, tuple[dict, list[Axis]]],
             state: State, method: str, pictures: Sequence[Path]) -> str:
    lines = ["# idivm benchmark suite", "",
             f"`python -m benchmarks run`, grid `{config.grid}`, scale {config.scale:g}, "
             f"{config.runs} timed runs per point after a warm-up run. idivm {(env.get('git_commit') or '?')[:12]}"
             + (" (modified files)" if env.get("git_modified_files") else "")
             + f", {env.get('cpus')} CPUs, load average {env['load_average'][0]:.2f} at the start, "
               f"Python {env.get('python')}, pyspark {env.get('pyspark')}, DuckDB {env.get('duckdb')}.", "",
             "Median seconds of one maintenance run (idivm strategies: `Warehouse.maintain`, planning, change "
             "data and commit included) and of one DuckDB recomputation. " + method + ". `*` marks the default "
             "point; `(as ...)` is the strategy a run actually used; recompute/id above 1 means `id` was faster.",
             ""]
    for name, (default, axes) in plans.items():
        w = workload(name, config)
        lines += [f"## {w.title}", "", "Default point: " + point_label(default) + ".", ""]
        for view in w.views:
            for axis in axes:
                lines += [f"### `{view}`, {axis.label}", "",
                          report.axis_table(state.summary, name, view, axis.name, axis.values, default,
                                            columns(w, config)), ""]
    sized = [c for c in state.checks if "maps" in c]
    if sized:
        lines += ["## Higher-order delta maps", "", "After the last run of each point.", "",
                  "| workload | point | view | strategy | maps | map rows |", "|---|---|---|---|---:|---:|",
                  *(f"| {c['workload']} | {point_label(c['point'])} | `{c['view']}` | {c['strategy']} | {c['maps']} | "
                    f"{c['map_rows']:,} |" for c in sized), ""]
    lines += judged_markdown(state.summary, {name: default for name, (default, _) in plans.items()})
    agreed = sum(c["ok"] for c in state.checks)
    lines += [f"Checks against DuckDB (row count and sums of each maintained copy after the last run of "
              f"every point): {agreed} of {len(state.checks)} agree.", ""]
    if state.notes:
        lines += ["## Notes", "", *(f"- {n}" for n in state.notes), ""]
    if pictures:
        lines += ["## Plots", "", *(f"- `{p.name}`" for p in pictures), ""]
    return "\n".join(lines)


def judged_markdown(summary: Sequence[Mapping[str, Any]], defaults: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Markdown: ``auto`` against the best strategy at every point, and the targets the points
    decide (:func:`report.auto_against_best`, :func:`report.targets`); ``defaults``: workload ->
    its default point."""
    lines: list[str] = []
    judged = report.auto_against_best(summary)
    if judged:
        within = [j for j in judged if j["ratio"] <= report.AUTO_TOLERANCE]
        beyond = sorted((j for j in judged if j["ratio"] > report.AUTO_TOLERANCE), key=lambda j: -j["ratio"])
        spread = [j for j in beyond if j["auto_s"] <= j["best_max_s"]]
        lines += ["## `auto` against the best strategy", "",
                  f"`auto`'s median within {report.AUTO_TOLERANCE:g}x of the fastest other strategy measured at "
                  f"the same point: {len(within)} of {len(judged)} points; at {len(spread)} more, within the "
                  f"spread of that strategy's own runs (its slowest run slower than `auto`'s median).", ""]
        if beyond:
            lines += ["| workload | point | view | auto (as) | best | best's runs | auto/best |",
                      "|---|---|---|---:|---:|---:|---:|",
                      *(f"| {j['workload']} | {point_label(j['point'])} | `{j['view']}` | {j['auto_s']:.3f} "
                        f"({', '.join(j['maintained_as'])}) | {j['best']} {j['best_s']:.3f} | "
                        f"{j['best_min_s']:.3f}-{j['best_max_s']:.3f} | {j['ratio']:.2f}x |" for j in beyond), ""]
    goals = report.targets(summary, defaults)
    if goals:
        lines += ["## Targets", "", "| target | view | measured | met |", "|---|---|---:|---|",
                  *(f"| {t} | `{v}` | {m} | {'yes' if ok else '**no**'} |" for t, v, m, ok in goals), ""]
    return lines


def draw(results: Mapping[str, Any], out: Path) -> list[Path]:
    """The plots of a suite's ``results`` (``results.json`` as :func:`write` wrote it): for each
    workload, view and axis, the median seconds of each strategy (and DuckDB) against the axis's
    values, as ``out/<workload>-<view>-<axis>.png``; the files written (none without matplotlib)."""
    if not report.have_matplotlib():
        print(report.MATPLOTLIB_MISSING, flush=True)
        return []
    summary = results["summary"]
    pictures = []
    for name, plan in results["plans"].items():
        default = plan["default"]
        rows = [r for r in summary if r["workload"] == name]
        views = list(dict.fromkeys(r["view"] for r in rows))
        strategies = list(dict.fromkeys(r["strategy"] for r in rows if r["strategy"] != "duckdb")) + ["duckdb"]
        title = WORKLOADS[name].title if name in WORKLOADS else name
        for view in views:
            for axis in plan["axes"]:
                points = report.axis_points(default, axis["name"], axis["values"])
                series = {s: [report.median(summary, name, view, p, s) for p in points] for s in strategies}
                if not any(y is not None for ys in series.values() for y in ys):
                    continue
                path = out / f"{name}-{view}-{axis['name']}.png"
                others = point_label({k: v for k, v in default.items() if k != axis["name"]})
                report.plot_axis(path, f"{title}: {view}, {others}", axis["label"], axis["values"], series,
                                 axis.get("log_x", False))
                pictures.append(path)
    return pictures


def duck_version() -> str | None:
    try:
        import duckdb
    except ImportError:
        return None
    return duckdb.__version__


def matplotlib_version() -> str | None:
    try:
        import matplotlib
    except ImportError:
        return None
    return matplotlib.__version__
