"""The suite's report: one markdown table and one plot per workload, view and axis.

Input: the summary rows of ``benchmarks/suite.py``, one per measured (workload, view, point,
strategy), ``strategy`` being a maintenance strategy or ``duckdb``; each has ``median_s`` or
``not_measured`` (why, in a few words).  A point is a dict of the workload's parameters; the
points of an axis are the default point with that one parameter changed.

No idivm, Spark or DuckDB here: plain functions over dicts, and matplotlib when it is installed.
"""

from __future__ import annotations

import importlib

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MATPLOTLIB_MISSING = "matplotlib is not installed: no plots (pip install -e \".[bench]\")"

#: the strategies ``auto`` is judged against: the fastest of them measured at a point is the best
ALTERNATIVES = ("id", "id_noindex", "tuple", "recompute", "maps")
#: ``auto`` should cost at most this much more than the best strategy at every point (issue target)
AUTO_TOLERANCE = 1.1


def point_key(point: Mapping[str, Any]) -> tuple:
    """A hashable, order-independent form of a point."""
    return tuple(sorted(point.items()))


def axis_points(default: Mapping[str, Any], axis: str, values: Sequence[Any]) -> list[dict[str, Any]]:
    """The points of an axis: ``default`` with parameter ``axis`` set to each of ``values``."""
    if axis not in default:
        raise ValueError(f"axis {axis!r} is not a parameter of the default point {dict(default)}")
    return [{**default, axis: v} for v in values]


def find(summary: Sequence[Mapping[str, Any]], workload: str, view: str, point: Mapping[str, Any],
         strategy: str) -> Mapping[str, Any] | None:
    key = point_key(point)
    for row in summary:
        if (row["workload"], row["view"], row["strategy"]) == (workload, view, strategy) \
                and point_key(row["point"]) == key:
            return row
    return None


def cell(row: Mapping[str, Any] | None) -> str:
    """Median seconds, with the strategy that ran when it is not the one defined (``auto``, a
    fallback); ``—`` when not measured at that point."""
    if row is None:
        return "—"
    if row.get("not_measured"):
        return row["not_measured"]
    text = f"{row['median_s']:.3f}" if row["median_s"] < 1 else f"{row['median_s']:.2f}"
    ran = [s for s in row.get("maintained_as") or () if s != row["strategy"]]
    if ran:
        text += f" (as {', '.join(row.get('maintained_as'))})"
    return text


def median(summary: Sequence[Mapping[str, Any]], workload: str, view: str, point: Mapping[str, Any],
           strategy: str) -> float | None:
    row = find(summary, workload, view, point, strategy)
    return None if row is None or row.get("not_measured") else row["median_s"]


def ratio(summary: Sequence[Mapping[str, Any]], workload: str, view: str, point: Mapping[str, Any],
          numerator: str = "recompute", denominator: str = "id") -> float | None:
    """Median of ``numerator`` over median of ``denominator`` at a point (None: one is missing)."""
    top, bottom = (median(summary, workload, view, point, s) for s in (numerator, denominator))
    return None if top is None or not bottom else top / bottom


def best(summary: Sequence[Mapping[str, Any]], workload: str, view: str, point: Mapping[str, Any]
         ) -> tuple[float, str] | None:
    """The fastest of :data:`ALTERNATIVES` measured at a point: (median seconds, strategy)."""
    measured = [(m, s) for s in ALTERNATIVES if (m := median(summary, workload, view, point, s)) is not None]
    return min(measured) if measured else None


def auto_against_best(summary: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per point where ``auto`` and another strategy were measured: ``auto``'s median over the
    best strategy's, with the strategies ``auto``'s runs used and the fastest and slowest of the
    best strategy's own timed runs (how much one run of it varies)."""
    out = []
    for row in summary:
        if row["strategy"] != "auto" or row.get("not_measured"):
            continue
        top = best(summary, row["workload"], row["view"], row["point"])
        if top is None:
            continue
        spread = find(summary, row["workload"], row["view"], row["point"], top[1])
        out.append({"workload": row["workload"], "view": row["view"], "point": row["point"],
                    "auto_s": row["median_s"], "maintained_as": row.get("maintained_as") or [],
                    "best": top[1], "best_s": top[0], "ratio": row["median_s"] / top[0],
                    "best_min_s": spread.get("min_s", top[0]), "best_max_s": spread.get("max_s", top[0])})
    return out


def axis_table(summary: Sequence[Mapping[str, Any]], workload: str, view: str, axis: str, values: Sequence[Any],
               default: Mapping[str, Any], columns: Sequence[str]) -> str:
    """Markdown: a row per value of ``axis`` (the default point's marked ``*``), a column per
    strategy of ``columns`` (``duckdb`` included), median seconds, then ``recompute/id`` and, when
    ``auto`` is a column, ``auto/best`` (its median over the fastest other strategy's)."""
    judged = "auto" in columns
    header = (axis, *columns, "recompute/id", *(("auto/best",) if judged else ()))
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for point in axis_points(default, axis, values):
        value = point[axis]
        label = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        if value == default[axis]:
            label += " *"
        r = ratio(summary, workload, view, point)
        cells = (label, *(cell(find(summary, workload, view, point, s)) for s in columns),
                 "—" if r is None else f"{r:.2f}x")
        if judged:
            a, top = median(summary, workload, view, point, "auto"), best(summary, workload, view, point)
            cells += ("—" if a is None or top is None else f"{a / top[0]:.2f}x ({top[1]})",)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets(summary: Sequence[Mapping[str, Any]], defaults: Mapping[str, Mapping[str, Any]]
            ) -> list[tuple[str, str, str, bool]]:
    """The performance targets that the measured points decide, as (target, view, measured,
    met): ratios at the sizes the targets name (devices_parts 1M and 10M at d = 200), ``id``
    across the extra joins and the sizes, a one-row change, the Yelp-like views at their largest
    size, and at the largest size of every workload the fastest strategy against DuckDB.
    ``defaults``: workload -> the default point of the run; a target whose points were not
    measured is left out."""
    out: list[tuple[str, str, str, bool]] = []

    def at(workload: str, view: str, strategy: str, **change: Any) -> float | None:
        return median(summary, workload, view, {**defaults[workload], **change}, strategy)

    def views(workload: str) -> list[str]:
        return list(dict.fromkeys(r["view"] for r in summary if r["workload"] == workload))

    def over(top: float | None, bottom: float | None) -> float | None:
        return None if top is None or not bottom else top / bottom

    if "devices" in defaults:
        base = {"d": 200, "j": 0, "s": 0.2, "f": 10}
        sizes = sorted({r["point"]["size"] for r in summary if r["workload"] == "devices"
                        and {k: r["point"][k] for k in base} == base})
        for view in views("devices"):
            for size, floors in ((1_000_000, {"recompute": 3, "tuple": 3}), (10_000_000, {"recompute": 20, "tuple": 5})):
                for other, floor in floors.items():
                    r = over(at("devices", view, other, **base, size=size), at("devices", view, "id", **base, size=size))
                    if r is not None:
                        out.append((f"devices_parts {size:,}, d = 200: `id` at least {floor}x faster than `{other}`",
                                    view, f"{r:.2f}x", r >= floor))
            r = over(at("devices", view, "id", j=4), at("devices", view, "id", j=0))
            if r is not None:
                out.append(("`id` within 1.3x from thesis j = 2 to j = 6 (extra joins 0 to 4)", view, f"{r:.2f}x", r <= 1.3))
            for small, large in zip(sizes, sizes[1:]):
                r = over(at("devices", view, "id", **base, size=large), at("devices", view, "id", **base, size=small))
                if large == 10 * small and r is not None:
                    out.append((f"`id` grows less than 2x from devices_parts {small:,} to {large:,}", view,
                                f"{r:.2f}x", r < 2))
            one = at("devices", view, "id", d=1)
            if one is not None:
                out.append(("a 1-row change maintained by `id` in under 1 s (warm session)", view, f"{one:.2f} s", one < 1))
    if "yelp" in defaults:
        largest = max((r["point"]["businesses"] for r in summary if r["workload"] == "yelp"), default=None)
        for view in views("yelp"):
            r = over(at("yelp", view, "recompute", batch=100, businesses=largest),
                     at("yelp", view, "id", batch=100, businesses=largest))
            if r is not None:
                out.append((f"Yelp-like, {largest:,} businesses, 100 changes: `id` at least 20x faster than `recompute`",
                            view, f"{r:.2f}x", r >= 20))
    for workload, default in defaults.items():
        rows = [r for r in summary if r["workload"] == workload]
        size = next((k for k in ("size", "businesses", "sf", "users", "book") if k in default), None)
        if size is None or not rows:
            continue
        largest = max(r["point"][size] for r in rows)
        point = {**default, size: largest}
        for view in views(workload):
            top, duck = best(summary, workload, view, point), median(summary, workload, view, point, "duckdb")
            if top is not None and duck is not None:
                out.append((f"{workload} at its largest {size} ({largest:,}), default batch: faster than DuckDB's "
                            f"recomputation", view, f"{top[1]} {top[0]:.3f} s, DuckDB {duck:.3f} s", top[0] < duck))
    return out


def have_matplotlib() -> bool:
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return False
    return True


def plot_axis(path: Path, title: str, xlabel: str, values: Sequence[Any],
              series: Mapping[str, Sequence[float | None]], log_x: bool = False) -> None:
    """Seconds against the values of one axis, one line per strategy (``series``: name -> one
    median or None per value), log y axis, written as a PNG to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, ys in series.items():
        points = [(x, y) for x, y in zip(values, ys) if y is not None and y > 0]
        if points:
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o",
                    linestyle="--" if name == "duckdb" else "-", label=name)
    ax.set_yscale("log")
    if log_x:
        ax.set_xscale("log")
    ax.set_xticks(list(values), [f"{v:,}" if isinstance(v, int) else f"{v:g}" for v in values])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds per run (median)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
