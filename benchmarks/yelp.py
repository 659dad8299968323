"""Nested views over the Yelp-like database (thesis §2.9): ID-based vs tuple-based maintenance vs
recomputation, on the same data, the same change batches and the same machine.

Input: the size of the database (``--businesses``, and the knobs of
:class:`idivm.datasets.yelp.YelpSpec`), the batch sizes, the number of timed runs per batch size,
the strategies and the views.  The data is written by ``python -m idivm.datasets yelp`` and
loaded into a fresh warehouse.  Every strategy gets its own copy of every view
(``sf_reviews_id``, ``sf_reviews_tuple``, ...):

* ``sf_reviews`` -- thesis §2.9, Example 2.9.1, view V: every San Francisco business with the
  bag of its reviews joined with their authors, built by a correlated subquery;
* ``sf_reviews_into`` -- view V1 as the thesis writes it: the same bags built by ``businesses
  NATURAL LEFT OUTER JOIN (reviews NATURAL JOIN users)`` and ``GROUP BY business_id INTO
  full_reviews``;
* ``sf_reviews_grouped`` -- V1 with more over the group, ``GROUP BY business_id GROUP AS g``:
  ``g`` itself, a subquery over ``g`` and a ``COUNT``.

The change batches come from one seeded stream, :class:`idivm.datasets.yelp_changes.YelpChanges`
with its default mix: review inserts, deletes and star changes; users' fans, name, friends and
elite years; businesses moving in and out of San Francisco, category edits, business inserts and
business deletes (with their reviews).  For each batch size *n*, in the order given: a warm-up
run, then ``--runs`` timed runs.  A run draws the next batch of *n* changes, ingests it (one
Debezium file per table, one commit per table that has events) and maintains every view once,
timing each ``Warehouse.maintain`` call: all views see the same batch.  The order of the
strategies rotates from run to run.  At the end every view is checked with ``Warehouse.verify``.

A strategy whose ``define`` raises for a view is reported as unsupported for that view and
left out; a view whose ``maintain`` raises is reported with the error and not maintained
again.  Neither stops the benchmark.

Output: a progress line per step, a markdown table of the median/min/max seconds and rows
written per run for every view, batch size and strategy, the ratios recompute/id and tuple/id,
``OUT/results.json`` (configuration, environment, every batch and measurement, summary) and
``OUT/results.md`` (the table).  ``OUT/data`` keeps the generated dataset for later runs with the
same knobs; ``OUT/warehouse`` and ``OUT/changes`` are recreated on every invocation.

Rows written are reported as in ``benchmarks/devices.py``: ``rows_written`` as the maintenance
result states it (every table the strategy writes, intermediate caches included) and the rows
in the files the view's own commit added, from its Delta log.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
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
    environment,
    fixed_cost_summary,
    fixed_cost_table,
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
    summary_row,
    verify_all,
    warn_if_busy,
    write_results,
)

from idivm import Warehouse
from idivm.datasets import view_path, yelp
from idivm.datasets.yelp_changes import ChangeBatch, YelpChanges, write_batch

#: benchmark view name -> its text; the views of the thesis as the nested-maintenance tests
#: define them (tests/test_nested_maintain.py, ``VIEWS``)
VIEWS: dict[str, str] = {
    # §2.9, Example 2.9.1, view V: the shipped idivm/datasets/views/sf_reviews.sqlpp
    "sf_reviews": view_path("sf_reviews").read_text(encoding="utf-8"),
    # §2.9, view V1 as the thesis writes it (GROUP BY ... INTO): the shipped sf_reviews_grouped.sqlpp
    "sf_reviews_into": renamed(view_path("sf_reviews_grouped").read_text(encoding="utf-8"), "sf_reviews_grouped",
                               "sf_reviews_into", "idivm/datasets/views/sf_reviews_grouped.sqlpp"),
    # §2.9, view V1: GROUP AS g, with g itself as V1's INTO, a subquery over g and a COUNT
    "sf_reviews_grouped": """CREATE VIEW sf_reviews_grouped AS
SELECT business_id, g AS members,
       (SELECT x.reviews.review_id, x.reviews.stars, x.users.user_name, x.users.elite
        FROM g AS x WHERE x.reviews IS NOT NULL) AS full_reviews,
       COUNT(review_id) AS n_reviews
FROM businesses NATURAL LEFT OUTER JOIN (
    reviews NATURAL JOIN
    users
)
WHERE city = "San Francisco"
GROUP BY business_id GROUP AS g
""",
}

DEFAULT_BUSINESSES = 12_000
DEFAULT_BATCHES = (100, 1000)
#: the strategies measured unless --strategies says otherwise (``auto`` is left out: on these views
#: it maintains as ``id`` unless a batch is large relative to the view)
DEFAULT_STRATEGIES = ("id", "id_noindex", "tuple", "recompute")


@dataclass(frozen=True, slots=True)
class Config:
    businesses: int
    reviews_per_business: float
    users_per_business: float
    sf_fraction: float
    elite_fraction: float
    friends_per_user: float
    seed: int
    changes_seed: int | None
    batches: tuple[int, ...]
    runs: int
    out: Path
    strategies: tuple[str, ...]
    views: tuple[str, ...]
    storage: str | None = None
    probes: int = 3

    @property
    def spec(self) -> yelp.YelpSpec:
        return yelp.YelpSpec.at_scale(self.businesses, reviews_per_business=self.reviews_per_business,
                                      users_per_business=self.users_per_business, sf_fraction=self.sf_fraction,
                                      elite_fraction=self.elite_fraction, friends_per_user=self.friends_per_user,
                                      seed=self.seed)


@dataclass(slots=True)
class Views:
    """The (view, strategy) copies: defined ones, those ``define`` refused, those ``maintain`` failed."""

    defined: dict[str, dict[str, Any]]
    unsupported: dict[str, dict[str, str]]
    failed: dict[str, dict[str, Any]]

    def live(self, name: str) -> bool:
        return name in self.defined and name not in self.failed


# --- setup -----------------------------------------------------------------------------------------

def generate_data(config: Config) -> Path:
    """The dataset of ``config.spec`` as Parquet files in ``OUT/data``, written by
    ``python -m idivm.datasets yelp`` unless a previous invocation left the same spec there."""
    spec = config.spec
    options = ["--scale", str(spec.businesses), "--reviews-per-business", repr(spec.reviews_per_business),
               "--users-per-business", repr(spec.users_per_business), "--sf-fraction", repr(spec.sf_fraction),
               "--unreviewed-fraction", repr(spec.unreviewed_fraction),
               "--repeat-fraction", repr(spec.repeat_fraction),
               "--friends-per-user", repr(spec.friends_per_user), "--elite-fraction", repr(spec.elite_fraction),
               "--seed", str(spec.seed)]
    return generate_dataset("yelp", options, asdict(spec), yelp.KEYS, config.out / "data")


def define_views(wh: Warehouse, config: Config) -> Views:
    """Define every (view, strategy) pair; a pair whose ``define`` raises is kept as unsupported."""
    views = Views({}, {}, {})
    for view in config.views:
        for strategy in config.strategies:
            name = f"{view}_{strategy}"
            text = renamed(VIEWS[view], view, name, f"view {view}")
            try:
                views.defined[name] = define_view(wh, name, text, view, strategy)
            except BenchmarkError as e:
                views.unsupported[name] = {"view": view, "strategy": strategy, "error": str(e)}
                progress(f"define: {name}: unsupported: {e}")
    return views


# --- runs ------------------------------------------------------------------------------------------

def ingest_batch(wh: Warehouse, stream: YelpChanges, n: int, directory: Path) -> dict[str, Any]:
    """Draw the stream's next batch of ``n`` changes, write it and ingest it, table by table."""
    return ingest_drawn(wh, stream.next_batch(n), directory)


def ingest_drawn(wh: Warehouse, batch: ChangeBatch, directory: Path) -> dict[str, Any]:
    """Write ``batch`` to ``directory`` and ingest it, table by table: what was ingested."""
    record: dict[str, Any] = {"batch": batch.number, "changes": batch.changes,
                              "kinds": {k: c for k, c in batch.kinds.items() if c}, "tables": {}}
    started = time.perf_counter()
    for table, (path, events) in write_batch(batch, directory).items():
        ingested = wh.ingest(table, path, format="debezium")
        record["tables"][table] = {"events": events, "inserted": ingested.inserted, "updated": ingested.updated,
                                   "deleted": ingested.deleted, "version": ingested.version}
    record["seconds"] = time.perf_counter() - started
    return record


def change_stream(config: Config) -> YelpChanges:
    """The seeded change stream every batch is drawn from; its files go to ``OUT/changes``."""
    started = time.perf_counter()
    stream = YelpChanges(config.spec, seed=config.changes_seed)
    progress(f"changes: stream state of {stream.state.counts()} built in {time.perf_counter() - started:.1f} s")
    shutil.rmtree(config.out / "changes", ignore_errors=True)
    return stream


def run_all(wh: Warehouse, config: Config, views: Views, stream: YelpChanges
            ) -> tuple[list[Measurement], list[dict[str, Any]]]:
    """For each batch size: warm-up run 0, then runs 1..``config.runs``: ingest the next batch of
    the change stream, maintain every view."""
    changes_dir = config.out / "changes"
    measurements: list[Measurement] = []
    ingests: list[dict[str, Any]] = []
    for n in config.batches:
        for run in range(config.runs + 1):
            label = f"batch {n:,}, " + ("warm-up" if run == 0 else f"run {run}/{config.runs}")
            record = ingest_batch(wh, stream, n, changes_dir)
            ingests.append({"batch_size": n, "run": run, **record})
            events = ", ".join(f"{t} {r['events']}" for t, r in record["tables"].items())
            progress(f"{label}: ingested batch {record['batch']} ({events} events) in {record['seconds']:.1f} s")
            measurements += maintain_round(wh, config.views, config.strategies, run, label, batch_size=n,
                                           live=views.live, failed=views.failed)
    return measurements, ingests


def verify_views(wh: Warehouse, views: Views) -> dict[str, dict[str, Any]]:
    """``Warehouse.verify`` of every defined view; one that raises is reported, not fatal."""
    verified = {}
    for name in views.defined:
        try:
            verified.update(verify_all(wh, [name]))
        except Exception as e:  # noqa: BLE001 -- reported with the others
            verified[name] = {"ok": None, "error": f"{type(e).__name__}: {e}"}
            progress(f"verify: {name}: raised {type(e).__name__}")
    return verified


# --- report ----------------------------------------------------------------------------------------

def summarize(measurements: Sequence[Measurement], config: Config, views: Views,
              verified: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per view, batch size and strategy over the timed runs; a row without timed runs says why."""
    rows = []
    for view in config.views:
        for n in config.batches:
            for strategy in config.strategies:
                name = f"{view}_{strategy}"
                timed = [m for m in measurements
                         if m.run > 0 and m.view == view and m.strategy == strategy and m.batch_size == n]
                if timed:
                    rows.append(summary_row(view, strategy, timed, verified.get(name, {}).get("ok"), n))
                    continue
                why = "unsupported" if name in views.unsupported else "maintain failed"
                rows.append({"view": view, "batch_size": n, "strategy": strategy, "not_measured": why})
    return rows


def notes(views: Views, verified: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per view copy that was not defined, failed or did not verify."""
    lines = [f"{name}: unsupported: {u['error']}" for name, u in views.unsupported.items()]
    lines += [f"{name}: maintain raised at batch {f['batch_size']:,} run {f['run']}: {f['error'].splitlines()[0]}"
              for name, f in views.failed.items()]
    for name, v in verified.items():
        if v.get("error"):
            lines.append(f"{name}: verify raised {v['error'].splitlines()[0]}")
        elif not v["ok"]:
            lines.append(f"{name}: the stored view differs from its recomputation "
                         f"({v['missing']} rows missing, {v['extra']} extra)")
    return lines


# --- driver ----------------------------------------------------------------------------------------

def benchmark(config: Config) -> dict[str, Any]:
    check_strategies(config.strategies)
    config.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    env = environment()  # before the runs: the code measured is the code at this commit
    warn_if_busy(env)
    data = generate_data(config)
    wh = fresh_warehouse(config.out, config.storage)
    tables = load_tables(wh, data, yelp.keys(config.spec))
    start_spark(wh)
    views = define_views(wh, config)
    stream = change_stream(config)
    measurements, ingests = run_all(wh, config, views, stream)
    if config.probes:
        names = {n: (d["view"], d["strategy"]) for n, d in views.defined.items() if views.live(n)}
        measurements += probe_fixed_cost(wh, names, lambda i: ingest_batch(wh, stream, 1, config.out / "changes"),
                                         config.probes)
    fixed = fixed_cost_summary(measurements)
    verified = verify_views(wh, views)
    summary = summarize(measurements, config, views, verified)
    table = markdown_table(summary)
    speedups = ratios(summary)
    problems = notes(views, verified)
    results = {
        "benchmark": "yelp (thesis §2.9, nested views V and V1)",
        "config": {**asdict(config), "out": str(config.out), "spec": asdict(config.spec)},
        "environment": env,
        "tables": tables,
        "views": {view: VIEWS[view] for view in config.views},
        "defined": views.defined,
        "unsupported": views.unsupported,
        "failed": views.failed,
        "ingests": ingests,
        "measurements": as_json(measurements),
        "verified": verified,
        "summary": summary,
        "ratios": speedups,
        "notes": problems,
        "fixed_cost": fixed,
        "total_seconds": time.perf_counter() - started,
    }
    spec = config.spec
    title = (f"Yelp-like, {spec.businesses:,} businesses ({spec.sf_businesses:,} in San Francisco), "
             f"{tables.get('reviews', 0):,} reviews, {tables.get('users', 0):,} users; "
             f"batches of {', '.join(f'{n:,}' for n in config.batches)} changes, {config.runs} timed runs each"
             + (f", storage {config.storage}" if config.storage else ""))
    lines = ratio_lines(speedups) + problems
    if fixed:
        lines += ["", f"Fixed cost: a run after a one-change batch and a run with nothing to do, medians of "
                      f"{config.probes} probes", "", fixed_cost_table(fixed)]
    write_results(config.out, results, title, table, lines)
    return results


def parse_batches(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(dict.fromkeys(int(s) for s in text.split(",") if s.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch sizes are integers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("give at least one batch size, each >= 1")
    return sizes


def parse_args(argv: Sequence[str] | None = None) -> Config:
    d = yelp.YelpSpec()
    parser = argparse.ArgumentParser(
        prog="python benchmarks/yelp.py",
        description="Thesis §2.9: maintain the nested views V and V1 over a Yelp-like database with every "
                    "strategy after batches of changes and report median times and rows written.")
    parser.add_argument("--businesses", type=int, default=DEFAULT_BUSINESSES,
                        help=f"number of businesses (default {DEFAULT_BUSINESSES})")
    parser.add_argument("--reviews-per-business", type=float, default=d.reviews_per_business,
                        help=f"mean reviews per business (default {d.reviews_per_business:g})")
    parser.add_argument("--users-per-business", type=float, default=d.users_per_business,
                        help=f"users per business (default {d.users_per_business:g})")
    parser.add_argument("--sf-fraction", type=float, default=d.sf_fraction,
                        help=f"fraction of businesses in San Francisco (default {d.sf_fraction:g})")
    parser.add_argument("--elite-fraction", type=float, default=d.elite_fraction,
                        help=f"fraction of users with elite years (default {d.elite_fraction:g})")
    parser.add_argument("--friends-per-user", type=float, default=d.friends_per_user,
                        help=f"mean friends per user (default {d.friends_per_user:g})")
    parser.add_argument("--seed", type=int, default=0, help="dataset seed (default 0)")
    parser.add_argument("--changes-seed", type=int, default=None,
                        help="seed of the change stream (default: the dataset seed)")
    parser.add_argument("--batches", type=parse_batches, default=DEFAULT_BATCHES,
                        help="comma-separated changes per batch, measured in this order "
                             f"(default {','.join(map(str, DEFAULT_BATCHES))})")
    parser.add_argument("--runs", type=int, default=3,
                        help="timed runs per batch size, after one warm-up run (default 3)")
    parser.add_argument("--out", type=Path, default=Path("bench-yelp"),
                        help="output directory: data/, warehouse/, changes/, results.json (default bench-yelp)")
    parser.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES),
                        type=lambda s: parse_list(s, STRATEGIES, "strategy"),
                        help=f"comma-separated, of {', '.join(STRATEGIES)} "
                             f"(default {','.join(DEFAULT_STRATEGIES)})")
    parser.add_argument("--views", default=",".join(VIEWS), type=lambda s: parse_list(s, tuple(VIEWS), "view"),
                        help=f"comma-separated, of {', '.join(VIEWS)} (default all)")
    parser.add_argument("--probes", type=int, default=3,
                        help="after the timed runs, runs after a one-change batch and runs with nothing to do "
                             "(the fixed cost of a run), each view and strategy, after a warm-up (default 3; 0: none)")
    add_storage_argument(parser)
    args = parser.parse_args(argv)
    if args.businesses < 1 or args.runs < 1:
        parser.error("--businesses and --runs must be >= 1")
    config = Config(businesses=args.businesses, reviews_per_business=args.reviews_per_business,
                    users_per_business=args.users_per_business, sf_fraction=args.sf_fraction,
                    elite_fraction=args.elite_fraction, friends_per_user=args.friends_per_user, seed=args.seed,
                    changes_seed=args.changes_seed, batches=args.batches, runs=args.runs,
                    out=args.out.absolute(), strategies=args.strategies, views=args.views,
                    storage=args.storage, probes=args.probes)
    try:
        config.spec
    except ValueError as e:
        parser.error(str(e))
    return config


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(benchmark, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
