"""The cost-based choice of ``auto``: each run of an ``auto`` view is recorded (strategy,
seconds, change rows read, rows of the base tables), and a run chooses the strategy whose
estimated time, from those records, is the smaller: recomputation, or the view's incremental
strategy.  That is ``id`` (the Δ-script, with its caches) where the view has one, else
``maps`` (DBToaster's higher-order delta maps, for aggregate views ``id`` cannot maintain:
subqueries in WHERE, nested aggregates).

* ``recompute`` costs what reading the base tables costs: its estimate is the median time per
  base-table row of the recorded recomputations (the view's materialization at ``define``
  counts as one until a run has recomputed) times the base tables' rows now.
* the incremental strategy costs a fixed part and a part per change row: its estimate is a
  least-squares line through its recorded runs (seconds against change rows, neither part
  negative); with runs of one size only, their median time scaled up (never down) by the
  change rows.

A run that recomputes recomputes the view only: the intermediate caches of the ``id`` program,
or the maps, stay where they were (recomputing them would make ``auto`` dearer than
``recompute``), and the next incremental run first catches them up to the view, incrementally
(see :meth:`idivm.exec.runtime.Runtime.maintain`).  While they lag, the incremental estimate adds
the catch-up, an incremental run over the change rows the recomputations skipped; so that one
large batch does not leave the view recomputed for ever, a run also goes back to the incremental
strategy when the batch alone favours it and the recomputations since the lag began have cost
more than it would have by at least the catch-up (the rent-or-buy rule: never more than twice
the better of the two).

Without a recorded incremental run, or without a recomputation to compare with, the choice
falls back to the rule of thumb :data:`RECOMPUTE_RATIO`: recompute when a run reads more change
rows than that fraction of the base tables' rows (what a recomputation reads).  The records live beside the
view's program (``views/<name>.program/runs.jsonl``, the last :data:`KEEP` runs); they are
statistics, not state: a lost or unreadable file only means the choice starts again from the
rule of thumb.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

#: the file of a view's run records, in its program folder
HISTORY_FILE = "runs.jsonl"
#: the runs kept
KEEP = 50
#: without estimates, ``auto`` recomputes when a run reads more change rows than this fraction
#: of the base tables' rows
RECOMPUTE_RATIO = 0.25


@dataclass(frozen=True)
class Record:
    """One run: its strategy (``define`` records a ``recompute``), its seconds, the change rows
    it read and the rows of the base tables it reflects; ``lagged``: a recomputation of the
    view alone, which left the caches behind."""

    strategy: str
    seconds: float
    changes: int
    base_rows: int
    lagged: bool = False


def read(folder: Path) -> list[Record]:
    """The runs recorded in ``folder``, oldest first (none when the file is missing or a line
    is unreadable: the records are statistics)."""
    try:
        lines = (Path(folder) / HISTORY_FILE).read_text(encoding="utf-8").splitlines()
        return [Record(**json.loads(line)) for line in lines if line.strip()]
    except (OSError, ValueError, TypeError):
        return []


def record(folder: Path, run: Record) -> None:
    """Add ``run`` to the records in ``folder``, keeping the last :data:`KEEP`."""
    runs = [*read(folder), run][-KEEP:]
    folder = Path(folder)
    temporary = folder / f".{HISTORY_FILE}.{os.getpid()}"
    try:
        temporary.write_text("".join(json.dumps(asdict(r)) + "\n" for r in runs), encoding="utf-8")
        os.replace(temporary, folder / HISTORY_FILE)
    except OSError:
        pass


@dataclass(frozen=True)
class Estimate:
    """The estimated seconds of a strategy and the recorded runs it comes from."""

    strategy: str
    seconds: float
    runs: int


def estimate_recompute(runs: Sequence[Record], base_rows: int) -> Estimate | None:
    """``recompute`` over ``base_rows`` base-table rows (None: no recorded recomputation)."""
    done = [r for r in runs if r.strategy == "recompute"]
    # a run's recomputation also reads the changes and rewrites what the view's layout asks
    # for: once there is one, the materialization at define (no changes) no longer counts
    done = [r for r in done if r.changes > 0] or done
    rates = [r.seconds / max(r.base_rows, 1) for r in done]
    if not rates:
        return None
    return Estimate("recompute", statistics.median(rates) * max(base_rows, 1), len(rates))


def estimate_id(runs: Sequence[Record], changes: int, strategy: str = "id") -> Estimate | None:
    """The incremental ``strategy`` (``id`` or ``maps``) for ``changes`` change rows (None: no
    recorded run of it)."""
    points = [(r.changes, r.seconds) for r in runs if r.strategy == strategy]
    if not points:
        return None
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        seconds = statistics.median(s for _, s in points)
        return Estimate(strategy, seconds * max(1.0, changes / max(xs[0], 1)), len(points))
    mx, my = statistics.fmean(xs), statistics.fmean(s for _, s in points)
    slope = sum((x - mx) * (s - my) for x, s in points) / sum((x - mx) ** 2 for x in xs)
    slope = max(slope, 0.0)
    fixed = max(my - slope * mx, 0.0)
    return Estimate(strategy, fixed + slope * changes, len(points))


def lagging(runs: Sequence[Record]) -> list[Record]:
    """The recomputations since the caches were last brought up to date (the last runs, while
    they are ``lagged``)."""
    behind: list[Record] = []
    for run in reversed(runs):
        if not run.lagged:
            break
        behind.append(run)
    return behind[::-1]


def choose(runs: Sequence[Record], changes: int, base_rows: int, incremental: str = "id") -> tuple[str, str]:
    """The strategy of an ``auto`` run reading ``changes`` change rows of base tables of
    ``base_rows`` rows, and why: ``incremental`` (``id`` or ``maps``) or ``recompute``."""
    by_inc, again = estimate_id(runs, changes, incremental), estimate_recompute(runs, base_rows)
    if by_inc is not None and again is not None:
        why = (f"{changes} change rows: estimated {by_inc.seconds:.2f} s by {incremental} ({by_inc.runs} runs) "
               f"against {again.seconds:.2f} s to recompute ({again.runs} runs)")
        behind = lagging(runs)
        if not behind:
            return (incremental if by_inc.seconds <= again.seconds else "recompute"), why
        skipped = sum(r.changes for r in behind)
        catch_up = estimate_id(runs, skipped, incremental).seconds  # type: ignore[union-attr]
        why += f", plus {catch_up:.2f} s to catch the {_LAGGING[incremental]} up over {skipped} change rows"
        if by_inc.seconds + catch_up <= again.seconds:
            return incremental, why
        lost = sum(max(0.0, r.seconds - estimate_id(runs, r.changes, incremental).seconds)  # type: ignore[union-attr]
                   for r in behind)
        if by_inc.seconds <= again.seconds and lost >= catch_up:
            return incremental, why + f"; the {len(behind)} recomputations since cost {lost:.2f} s more than {incremental}"
        return "recompute", why
    if changes > RECOMPUTE_RATIO * max(base_rows, 1):
        return "recompute", f"{changes} change rows for {base_rows} base-table rows"
    return incremental, ""


#: what an incremental strategy leaves behind while ``auto`` recomputes the view alone
_LAGGING = {"id": "caches", "maps": "maps"}


def describe(runs: Sequence[Record], incremental: str = "id") -> str:
    """What ``explain`` says of an ``auto`` view's records (``incremental``: its incremental
    strategy)."""
    if not runs:
        return "auto: no run recorded yet; a run recomputes when it reads more change rows than " \
               f"{RECOMPUTE_RATIO:.0%} of the base tables' rows, " \
               f"else maintains by {incremental}"
    last = runs[-1]
    by_inc = estimate_id(runs, last.changes, incremental)
    again = estimate_recompute(runs, last.base_rows)
    counts = {s: sum(1 for r in runs if r.strategy == s) for s in (incremental, "recompute")}
    line = f"auto: {counts[incremental]} {incremental} runs and {counts['recompute']} recomputations recorded"
    if by_inc is not None and again is not None:
        line += (f"; for the last run's {last.changes} change rows: {by_inc.seconds:.2f} s by {incremental}, "
                 f"{again.seconds:.2f} s to recompute")
    return line
