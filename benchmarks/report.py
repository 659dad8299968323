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


def axis_table(summary: Sequence[Mapping[str, Any]], workload: str, view: str, axis: str, values: Sequence[Any],
               default: Mapping[str, Any], columns: Sequence[str]) -> str:
    """Markdown: a row per value of ``axis`` (the default point's marked ``*``), a column per
    strategy of ``columns`` (``duckdb`` included), median seconds, then ``recompute/id``."""
    header = (axis, *columns, "recompute/id")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for point in axis_points(default, axis, values):
        value = point[axis]
        label = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        if value == default[axis]:
            label += " *"
        r = ratio(summary, workload, view, point)
        cells = (label, *(cell(find(summary, workload, view, point, s)) for s in columns),
                 "—" if r is None else f"{r:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
