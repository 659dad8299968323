"""``idivm demo``: the thesis' running examples on the shipped sample data, and a change flowing
into them without recomputation.

:func:`run_demo` loads the devices/parts sample (thesis Fig. 2.1a) and the Yelp-like sample
(§2.9) into the warehouse, defines the views of Fig. 2.1b, Fig. 2.5b and the §2.9 view V and
prints them; then it ingests a small batch of Debezium change events (``samples/demo-batch``:
a part's price changes, a San Francisco business gets its first review, a user who reviewed
another one is deleted), maintains the views and prints, for each view, the rows that changed
(keyed by the view's IDs), what the run read and wrote, and its time beside the time of
recomputing the view from its base tables.  Tables, views and the batch already in the warehouse
are reused, so the demo can be run again (the views are then up to date).

:func:`run_scale_demo` shows the gap between ``id`` and ``recompute`` on generated
devices/parts data of a chosen size: one view defined twice, one price-change batch, both
maintained, both times and their ratio.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from idivm.datasets import DATASETS, SAMPLES_DIR, devices, sample_path, view_path, write_dataset
from idivm.display import json_text

DEMO_VIEWS = ("devices_v", "devices_cost", "sf_reviews")
#: the demo's batch of Debezium change events: one file per base table it changes
BATCH_DIR = SAMPLES_DIR / "demo-batch"
#: the views of the scale demo (thesis Fig. 2.1b and Fig. 2.5b, the views of §2.8.2) and its price
#: changes per batch
SCALE_VIEWS = ("devices_v", "devices_cost")
SCALE_UPDATES = 10
SCALE_ROUNDS = 3  # batches per run of the scale demo; the times printed are their medians

__all__ = ["BATCH_DIR", "DEMO_VIEWS", "DemoReport", "ScaleRun", "ViewChange", "run_demo", "run_scale_demo",
           "sample_path", "scale_report", "view_changes"]


@dataclass(frozen=True, slots=True)
class ViewChange:
    """One row of a view that a maintenance run changed: its ID (``{ID name: value as JSON text}``), and the row
    before and after (None: the row was not there / is gone)."""

    key: Mapping[str, Any]
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None

    def lines(self) -> list[str]:
        """``did=1: cost 123.63 → 126.43``; a nested collection's elements that left (``-``) and
        came (``+``); a row that came (``+ {...}``) or went (``- {...}``)."""
        key = ", ".join(f"{k}={v}" for k, v in self.key.items())
        if self.before is None:
            return [f"{key}: + {json_text(self.after)}"]
        if self.after is None:
            return [f"{key}: - {json_text(self.before)}"]
        lines = []
        for column in self.after:
            old, new = self.before.get(column), self.after[column]
            if old == new:
                continue
            if isinstance(old, list) and isinstance(new, list):
                gone, came = _bag(old) - _bag(new), _bag(new) - _bag(old)
                lines += [f"{key}: {column} - {text}" for text in sorted(gone.elements())]
                lines += [f"{key}: {column} + {text}" for text in sorted(came.elements())]
            else:
                lines.append(f"{key}: {column} {json_text(old)} → {json_text(new)}")
        return lines

    def as_json(self) -> dict[str, Any]:
        """The change for programs: the ID values as values (not as JSON text)."""
        import decimal
        import json

        key = {k: json.loads(v, parse_float=decimal.Decimal) for k, v in self.key.items()}
        return {"key": key, "before": self.before, "after": self.after}


@dataclass(frozen=True, slots=True)
class ViewRun:
    """One view of the demo after the batch: its maintenance run, the rows it changed and the
    seconds a recomputation of the view takes (None: the run found the view up to date)."""

    view: str
    result: Any  # a MaintenanceResult
    changes: tuple[ViewChange, ...]
    recompute_seconds: float | None

    def as_json(self) -> dict[str, Any]:
        return {**self.result.as_json(), "changed_rows": [c.as_json() for c in self.changes],
                "recompute_seconds": None if self.recompute_seconds is None else round(self.recompute_seconds, 6)}


@dataclass(frozen=True, slots=True)
class DemoReport:
    """What :func:`run_demo` did: the sample tables (created or found), the views with their rows
    as defined, the batch's ingests and each view's run."""

    tables: tuple[dict[str, Any], ...]
    views: tuple[dict[str, Any], ...]
    ingests: tuple[dict[str, Any], ...]
    runs: tuple[ViewRun, ...]

    def as_json(self) -> dict[str, Any]:
        """The demo as one JSON object for programs (``demo --format json``)."""
        return {"tables": list(self.tables), "views": list(self.views), "batch": str(BATCH_DIR),
                "ingests": list(self.ingests), "runs": [r.as_json() for r in self.runs]}


def _bag(values: Sequence[Any]) -> Counter:
    return Counter(json_text(v) for v in values)


def view_changes(before: Mapping[tuple, dict], after: Mapping[tuple, dict], id_names: Sequence[str]
                 ) -> list[ViewChange]:
    """The rows that differ between two states of a view, each given as ``{ID values as text:
    row}``, in ID order."""
    changes = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            changes.append(ViewChange(dict(zip(id_names, key)), before.get(key), after.get(key)))
    return changes


def run_demo(wh, echo: Callable[[str], None] = print, progress: Callable[[str], None] | None = None
             ) -> DemoReport:
    """The demo on warehouse ``wh``: prints its story through ``echo`` and returns what it did."""
    tables = load_samples(wh, echo)
    names = define_views(wh, [view_path(f) for f in DEMO_VIEWS], echo, show=True, strategy="id", progress=progress)
    before = {n: rows_by_id(wh, n) for n in names}
    views = tuple({"view": n, "ids": ids, "rows": list(rows.values())} for n, (ids, rows) in before.items())
    echo("")
    echo(f"A batch of Debezium change events arrives ({BATCH_DIR}):")
    ingests = []
    for file in sorted(BATCH_DIR.glob("*.jsonl")):
        table = file.stem
        for line in file.read_text(encoding="utf-8").splitlines():
            echo(f"  {table}: {describe_event(line)}")
        r = wh.ingest(table, file, progress=progress)
        ingests.append(r.as_json(table))
        if r.replayed is not None:
            echo(f"  {table}: this batch was ingested before (version {r.replayed})")
        else:
            echo(f"  {table}: ingested, version {r.version} (+{r.inserted} ~{r.updated} -{r.deleted})")
    echo("")
    echo("Maintaining the views (idivm maintain --all):")
    runs = []
    for name in names:
        [result] = wh.maintain(name, progress=progress)
        ids, after = rows_by_id(wh, name)
        changes = view_changes(before[name][1], after, ids)
        echo("")
        if result.version is None:
            runs.append(ViewRun(name, result, tuple(changes), None))
            echo(f"view {name}: up to date already (the batch was maintained by an earlier run)")
            continue
        echo(f"view {name} (strategy {result.strategy}{', ' + result.note if result.note else ''}): "
             f"{len(changes)} row{'' if len(changes) == 1 else 's'} changed, by {', '.join(ids)}")
        for change in changes:
            for line in change.lines():
                echo(f"  {line}")
        echo(f"  read: {result.changes} base-table change row{'s' if result.changes != 1 else ''} -> "
             f"{result.diff_rows} i-diff row{'s' if result.diff_rows != 1 else ''}")
        echo(f"  wrote: +{result.inserted} ~{result.updated} -{result.deleted} view rows "
             f"({result.rows_written} rows written), view version {result.version}")
        if result.cost is not None:
            echo(f"  cost: {result.cost.summary()}")
        recompute = recompute_seconds(wh, name)
        runs.append(ViewRun(name, result, tuple(changes), recompute))
        echo(f"  time: {result.seconds:.2f} s maintained; recomputing the view from its base tables "
             f"(without writing it): {recompute:.2f} s")
    echo("")
    echo("On data this small a recomputation costs about as much as maintenance; "
         "'idivm demo --scale 1000000' shows the gap on a million devices.")
    echo("")
    echo(try_next(wh))
    return DemoReport(tables, views, tuple(ingests), tuple(runs))


def try_next(wh) -> str:
    at = f"--warehouse {wh.path}"
    return "\n".join([
        "Try next:",
        f"  idivm {at} show sf_reviews",
        f"  idivm {at} explain phone_cost",
        f"  idivm {at} explain phone_cost --format svg > phone_cost.svg",
        f"  idivm {at} ingest parts changes.jsonl     # your own Debezium events",
        f"  idivm {at} maintain --all",
        f"  idivm {at} verify phone_cost",
    ])


def load_samples(wh, echo: Callable[[str], None]) -> tuple[dict[str, Any], ...]:
    """Create the sample tables not in the warehouse yet; each table's name, key, rows and whether
    it was created now."""
    tables = []
    for dataset, module in DATASETS.items():
        for table, key in module.KEYS.items():
            if table in wh.catalog.tables:
                echo(f"table {table}: exists")
                info, created = wh.table_info(table), False
            else:
                info, created = wh.create_table(table, key, sample_path(dataset, table)), True
                echo(f"table {table} (key {', '.join(info.key)}): {info.rows} rows")
            tables.append({"table": table, "key": list(info.key), "rows": info.rows, "created": created})
    return tuple(tables)


def define_views(wh, texts: Sequence[Path | str], echo: Callable[[str], None], show: bool = False,
                 strategy: str = "auto", progress: Callable[[str], None] | None = None) -> list[str]:
    """Define each view of ``texts`` (files or ``CREATE VIEW`` texts) not in the warehouse yet;
    with ``show``, print its text and rows.  The views' names."""
    from idivm.sqlpp import parse_view

    names = []
    for source in texts:
        text = source.read_text(encoding="utf-8") if isinstance(source, Path) else source
        name = parse_view(text, str(source) if isinstance(source, Path) else None).name
        if name not in wh.catalog.views:
            wh.define(source, strategy=strategy, progress=progress)
        names.append(name)
        if show:
            echo("")
            echo(text.strip())
            echo("")
            for row in rows_by_id(wh, name)[1].values():
                echo("  " + json_text(row))
    return names


def _program(wh, name: str):
    from idivm.exec import programs

    catalog = wh.catalog
    return programs.load_program(catalog, catalog.view(name))


def rows_by_id(wh, name: str) -> tuple[list[str], dict[tuple, dict]]:
    """The user-visible rows of view ``name`` by the values of its IDs (its hidden ID columns),
    exact (decimals as they are): (ID names, {ID values as text: row})."""
    from idivm.exec.materialize import to_python, user_visible
    from idivm.storage import delta

    catalog = wh.catalog
    view_ids = _program(wh, name).prov.view_ids
    stored = delta.read_spark(wh.spark, catalog.path_of(catalog.view(name)), engine=wh.storage)
    rows = {}
    for r in user_visible(stored, keep=[c for c, _ in view_ids]).collect():
        row = to_python(r, scalars=False)
        key = tuple(json_text(row.pop(c)) for c, _ in view_ids)
        rows[key] = row
    return [n for _, n in view_ids], rows


def recompute_seconds(wh, name: str) -> float:
    """The seconds it takes to compute view ``name`` from its base tables (all of its rows brought
    to the driver, nothing written)."""
    from idivm.storage.spark import to_arrow

    started = time.monotonic()
    to_arrow(wh.recomputed(name))
    return time.monotonic() - started


def describe_event(line: str) -> str:
    """A Debezium change event in a few words: ``update {"pid": 7, "price": 9.69} → {...}``."""
    import json

    event = json.loads(line)
    event = event.get("payload", event)
    op, before, after = event.get("op"), event.get("before"), event.get("after")
    if op == "d":
        return f"delete {json_text(before)}"
    if op == "u":
        changed = {k: v for k, v in after.items() if (before or {}).get(k) != v}
        return f"update {json_text(before)} → {json_text(changed)}"
    return f"insert {json_text(after)}"


# --- demo --scale N -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ScaleRun:
    """The runs of the scale demo: the median seconds of ``id`` and of ``recompute`` over its
    batches (each batch maintained by both, in alternating order, so neither always runs
    first on a colder JVM)."""

    view: str
    id_seconds: float
    recompute_seconds: float
    results: tuple = field(default=(), compare=False)

    @property
    def ratio(self) -> float:
        return self.recompute_seconds / self.id_seconds if self.id_seconds else float("inf")

    def as_json(self) -> dict[str, Any]:
        return {"view": self.view, "id_seconds": round(self.id_seconds, 6),
                "recompute_seconds": round(self.recompute_seconds, 6),
                "ratio": round(self.ratio, 3) if self.id_seconds else None,
                "runs": [r.as_json() for r in self.results]}


def scale_report(scale: int, runs: Sequence[ScaleRun]) -> dict[str, Any]:
    """The scale demo as one JSON object for programs (``demo --scale N --format json``)."""
    spec = devices.DevicesSpec.at_scale(scale, seed=0)
    return {"scale": scale, "devices_parts": scale * spec.fanout, "updates_per_batch": SCALE_UPDATES,
            "batches": SCALE_ROUNDS, "views": [r.as_json() for r in runs]}


def run_scale_demo(wh, scale: int, echo: Callable[[str], None] = print,
                   progress: Callable[[str], None] | None = None) -> list[ScaleRun]:
    """On warehouse ``wh``: the devices/parts tables generated at ``scale`` devices and parts (10
    parts per device, 20% phones; created once), the views ``phone_parts`` and ``phone_cost``
    each defined twice (``<view>_id``, strategy id, and ``<view>_recompute``), batches of price
    changes ingested, every view maintained after each and the times compared per view."""
    spec = devices.DevicesSpec.at_scale(scale, seed=0)
    keys = devices.keys(spec)
    missing = [t for t in spec.table_names if t not in wh.catalog.tables]
    if missing and len(missing) < len(spec.table_names):
        raise _error(f"the warehouse {wh.path} holds some of the tables {', '.join(spec.table_names)} but not "
                     f"{', '.join(missing)}: give the scale demo a warehouse of its own")
    if missing:
        echo(f"generating devices/parts at scale {scale:,} ({scale * spec.fanout:,} devices_parts rows)")
        with tempfile.TemporaryDirectory(prefix="idivm-demo-") as tmp:
            written = write_dataset(devices.tables(spec), devices.schemas(spec), tmp, "parquet")
            for table, (path, _) in written.items():
                started = time.monotonic()
                if progress:
                    progress(f"creating table {table}")
                info = wh.create_table(table, keys[table], path)
                echo(f"table {table} (key {', '.join(info.key)}): {info.rows:,} rows ({time.monotonic() - started:.1f} s)")
    else:
        rows = wh.table_info("parts").rows
        if rows != spec.parts:
            raise _error(f"the warehouse {wh.path} holds parts of {rows:,} rows, not {scale:,}: "
                         "give each scale a warehouse of its own")
        echo(f"tables {', '.join(spec.table_names)}: exist")
    from idivm.sqlpp import parse_view

    names: dict[tuple[str, str], str] = {}  # (view, strategy) -> the view's name here
    for file in SCALE_VIEWS:
        path = view_path(file)
        text = path.read_text(encoding="utf-8")
        view = parse_view(text, str(path)).name
        for strategy in ("id", "recompute"):
            name = names[view, strategy] = f"{view}_{strategy}"
            if name not in wh.catalog.views:
                started = time.monotonic()
                info = wh.define(_renamed(text, view, name), strategy=strategy, progress=progress)
                echo(f"defined view {name} (strategy {strategy}): {info.rows:,} rows "
                     f"({time.monotonic() - started:.1f} s)")
    times: dict[tuple[str, str], list[float]] = {k: [] for k in names}
    every = []
    for round_ in range(SCALE_ROUNDS):
        batch = wh.table_info("parts").version  # new changes on every batch
        updates = devices.price_updates(spec, SCALE_UPDATES, seed=batch)
        feed = wh.path / "demo-batches" / f"parts-{batch:04d}.jsonl"
        feed.parent.mkdir(parents=True, exist_ok=True)
        feed.write_text("".join(json_text({"pid": pid, "price": post}) + "\n" for pid, _, post in updates),
                        encoding="utf-8")
        r = wh.ingest("parts", feed, format="rows", progress=progress)
        echo(f"batch {round_ + 1}/{SCALE_ROUNDS}: {r.changes} price changes ingested into parts (version {r.version})")
        order = list(names.items()) if round_ % 2 == 0 else list(reversed(names.items()))
        for key, name in order:
            [result] = wh.maintain(name, progress=progress)
            times[key].append(result.seconds)
            every.append(result)
            echo("  " + result.summary())
    runs = [ScaleRun(view, statistics.median(times[view, "id"]), statistics.median(times[view, "recompute"]),
                     tuple(r for r in every if r.name in (names[view, "id"], names[view, "recompute"])))
            for view in dict.fromkeys(v for v, _ in names)]
    echo("")
    echo(f"batches of {SCALE_UPDATES} price changes, {scale:,} devices ({scale * spec.fanout:,} devices_parts rows), "
         f"median of {SCALE_ROUNDS}:")
    for run in runs:
        echo(f"  {run.view}: id {run.id_seconds:.2f} s, recompute {run.recompute_seconds:.2f} s, "
             f"recompute / id = {run.ratio:.1f}")
    return runs


def _renamed(text: str, view: str, name: str) -> str:
    """A shipped view's text with the view called ``name`` (its ``CREATE VIEW`` line only)."""
    head = f"CREATE VIEW {view} AS"
    if text.count(head) != 1:
        raise ValueError(f"view text does not define {view}")
    return text.replace(head, f"CREATE VIEW {name} AS")


def _error(message: str):
    from idivm.errors import CatalogError

    return CatalogError(message)
