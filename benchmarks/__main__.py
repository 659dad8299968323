"""``python -m benchmarks run``: the benchmark suite (``suite.py``); ``python -m benchmarks plot``:
its plots drawn again from its results files; see ``benchmarks/README.md``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from collections.abc import Sequence
from pathlib import Path

# benchmarks/__init__.py, run first, put benchmarks/ on sys.path
from common import STRATEGIES, BenchmarkError, parse_list  # before idivm

import duck
import suite


def parse_axis(text: str) -> tuple[str, tuple | None]:
    """``NAME`` or ``NAME=V1,V2,...``: an axis of the suite's workloads, with its values typed as
    the grid's."""
    name, _, values = text.partition("=")
    name = name.strip()
    known = {a.name: a for w in suite.WORKLOADS.values() for a in w.grids["quick"][1]}
    if name not in known:
        raise argparse.ArgumentTypeError(f"unknown axis {name!r}; known: {', '.join(known)}")
    if not values.strip():
        return name, None
    kind = float if isinstance(known[name].values[0], float) else int
    try:
        parsed = tuple(dict.fromkeys(kind(v) for v in values.split(",") if v.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"axis {name}: values are {kind.__name__}s, got {values!r}") from None
    if not parsed:
        raise argparse.ArgumentTypeError(f"axis {name}: no values after '='")
    if name in ("s",) and not all(0 <= v <= 1 for v in parsed):
        raise argparse.ArgumentTypeError("axis s: values between 0 and 1")
    if name == "sf" and min(parsed) <= 0:
        raise argparse.ArgumentTypeError("axis sf: values > 0")
    if name not in ("s", "j", "sf") and min(parsed) < 1:
        raise argparse.ArgumentTypeError(f"axis {name}: values >= 1")
    if name == "j" and min(parsed) < 0:
        raise argparse.ArgumentTypeError("axis j: values >= 0")
    return name, parsed


@dataclass(frozen=True)
class PlotCommand:
    """``plot``: the results files to draw, and where (None: next to each)."""

    results: tuple[Path, ...]
    out: Path | None


def plot(command: PlotCommand) -> int:
    """Draw the plots of each results file; then print, over all of them together, ``auto``
    against the best strategy at every point and the targets they decide."""
    summary, defaults = [], {}
    for path in command.results:
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            print(f"error: cannot read {path}: {e}", file=sys.stderr)
            return 1
        if results.get("suite") != "python -m benchmarks run":
            print(f"error: {path} is not the results of 'python -m benchmarks run'", file=sys.stderr)
            return 1
        out = command.out or path.parent
        out.mkdir(parents=True, exist_ok=True)
        for picture in suite.draw(results, out):
            print(picture)
        summary += results["summary"]
        defaults.update({name: plan["default"] for name, plan in results["plans"].items()})
    print("\n".join(["", *suite.judged_markdown(summary, defaults)]))
    return 0


def parse_args(argv: Sequence[str] | None = None) -> "suite.SuiteConfig | PlotCommand":
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description="idivm's benchmark suite: every maintenance strategy and a "
                                                 "DuckDB recomputation over grids of workload parameters.")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("run", help="run the suite and write results.json, results.md and plots",
                            description="For every point of the chosen axes, on the same data and batches: "
                                        "maintain each view with every strategy and recompute it in DuckDB; "
                                        "check both results agree; report medians.")
    p.add_argument("--workload", choices=("devices", "yelp", "tpch", "bsma", "orderbook", "all"), default="all",
                   help="which workload (default all)")
    p.add_argument("--grid", choices=("quick", "full"), default="quick",
                   help="axis values and default point (default quick; full: the thesis' Fig. 2.11 ranges, "
                        "much longer)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="factor on the grid's data sizes (devices_parts rows, businesses, TPC-H scale factor, users, "
                        "orders per side of the book; "
                        "default 1)")
    p.add_argument("--runs", type=int, default=3, help="timed runs per point after one warm-up run (default 3)")
    p.add_argument("--axis", action="append", type=parse_axis, default=[], metavar="NAME[=V,...]",
                   help="run only this axis (repeatable), with these values instead of the grid's; devices: "
                        "d, j, s, f, size; yelp: batch, businesses; tpch: orders, sf; bsma: updates, users; "
                        "orderbook: changes, book")
    p.add_argument("--strategies", type=lambda s: parse_list(s, STRATEGIES, "strategy"), default=None,
                   help="comma-separated, of " + ", ".join(STRATEGIES) + " (default: devices "
                        + ",".join(suite.DEVICES.strategies) + "; yelp " + ",".join(suite.YELP.strategies)
                        + "; tpch " + ",".join(suite.TPCH.strategies) + "; bsma " + ",".join(suite.BSMA.strategies)
                        + "; orderbook " + ",".join(suite.ORDERBOOK.strategies)
                        + ")")
    p.add_argument("--views", type=lambda s: tuple(v for v in s.split(",") if v), default=None,
                   help="comma-separated, the views to maintain (default: every view of the workload; devices: "
                        + ",".join(suite.DEVICES.views) + "; yelp: " + ",".join(suite.YELP.views)
                        + "; tpch: " + ",".join(suite.TPCH.views) + "; bsma: " + ",".join(suite.BSMA.views)
                        + "; orderbook: " + ",".join(suite.ORDERBOOK.views) + ")")
    p.add_argument("--threads", type=int, default=duck.DEFAULT_THREADS,
                   help=f"threads of the DuckDB connection (default {duck.DEFAULT_THREADS})")
    p.add_argument("--seed", type=int, default=0, help="dataset seed (default 0)")
    p.add_argument("--storage", default=None,
                   help="storage engine: delta-rs, delta-spark or delta-spark-dv (default: idivm's)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"),
                   help="output directory: results.json, results.md, *.png, work/ (data, warehouses); "
                        "default benchmarks/results")
    p = commands.add_parser("plot", help="draw the plots of results.json files again, and judge auto and the "
                                         "targets over all of them",
                            description="For each RESULTS file (results.json of 'run'): one PNG per workload, "
                                        "view and axis, the median seconds of each strategy and DuckDB against "
                                        "the axis's values. Then, over all the files together: auto against the "
                                        "best strategy at every point, and the targets the points decide.")
    p.add_argument("results", type=Path, nargs="+", metavar="RESULTS", help="results.json files")
    p.add_argument("--out", type=Path, default=None,
                   help="directory of the PNGs (default: each results file's own directory)")
    args = parser.parse_args(argv)
    if args.command == "plot":
        return PlotCommand(tuple(args.results), args.out)
    if args.runs < 1 or args.scale <= 0 or args.threads < 1:
        parser.error("--runs and --threads must be >= 1 and --scale > 0")
    workloads = tuple(suite.WORKLOADS) if args.workload == "all" else (args.workload,)
    axes = dict(args.axis)
    known = {v for w in workloads for v in suite.WORKLOADS[w].views}
    if args.views is not None and (not args.views or not set(args.views) <= known):
        parser.error(f"--views: not a view of {', '.join(workloads)}: "
                     f"{', '.join(sorted(set(args.views) - known)) or '(none given)'}")
    if axes and not any(a.name in axes for w in workloads for a in suite.WORKLOADS[w].grids[args.grid][1]):
        parser.error(f"no axis of {', '.join(workloads)} among --axis {', '.join(axes)}")
    return suite.SuiteConfig(workloads=workloads, grid=args.grid, scale=args.scale, runs=args.runs,
                             out=args.out.absolute(), axes=axes, strategies=args.strategies, threads=args.threads,
                             seed=args.seed, storage=args.storage, views=args.views)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    if isinstance(config, PlotCommand):
        return plot(config)
    try:
        suite.run(config)
    except BenchmarkError as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"(what was measured so far: {config.out / 'results.json'})", file=sys.stderr)
        return 1
    print((config.out / "results.md").read_text(encoding="utf-8"), flush=True)
    print(f"results: {config.out / 'results.json'}, {config.out / 'results.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
