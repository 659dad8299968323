"""The cost-based choice of ``auto``: each run of an ``auto`` view is recorded (strategy,
seconds, change rows read, rows of the base tables), and a run chooses the strategy whose
estimated time, from those records, is the smaller.

* ``recompute`` costs what reading the base tables costs: its estimate is the median time per
  base-table row of the recorded recomputations (the view's materialization at ``define``
  counts as one until a run has recomputed) times the base tables' rows now.
* ``id`` costs a fixed part and a part per change row: its estimate is a least-squares line
  through the recorded ``id`` runs (seconds against change rows, neither part negative); with
  runs of one size only, their median time scaled up (never down) by the change rows.

A run that recomputes recomputes the view only: the intermediate caches of the ``id`` program
stay where they were (recomputing them would make ``auto`` dearer than ``recompute``), and the
next ``id`` run first catches them up to the view, incrementally (see
:meth:`idivm.exec.runtime.Runtime.maintain`).  While the caches lag, ``id``'s estimate adds the
catch-up, an ``id`` run over the change rows the recomputations skipped; so that one large batch
does not leave the view recomputed for ever, a run also goes back to ``id`` when the batch alone
favours it and the recomputations since the caches lag have cost more than ``id`` would have by
at least the catch-up (the rent-or-buy rule: never more than twice the better of the two).

Without a recorded ``id`` run, or without a recomputation to compare with, the choice falls
back to the rule of thumb :data:`RECOMPUTE_RATIO`: recompute when a run reads more change rows
than that fraction of the view's rows.  The records live beside the view's program
(``views/<name>.program/runs.jsonl``, the last :data:`KEEP` runs); they are statistics, not
state: a lost or unreadable file only means the choice starts again from the rule of thumb.
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
#: of the view's rows
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


def estimate_id(runs: Sequence[Record], changes: int) -> Estimate | None:
    """``id`` for ``changes`` change rows (None: no recorded ``id`` run)."""
    points = [(r.changes, r.seconds) for r in runs if r.strategy == "id"]
    if not points:
        return None
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        seconds = statistics.median(s for _, s in points)
        return Estimate("id", seconds * max(1.0, changes / max(xs[0], 1)), len(points))
    mx, my = statistics.fmean(xs), statistics.fmean(s for _, s in points)
    slope = sum((x - mx) * (s - my) for x, s in points) / sum((x - mx) ** 2 for x in xs)
    slope = max(slope, 0.0)
    fixed = max(my - slope * mx, 0.0)
    return Estimate("id", fixed + slope * changes, len(points))


def lagging(runs: Sequence[Record]) -> list[Record]:
    """The recomputations since the caches were last brought up to date (the last runs, while
    they are ``lagged``)."""
    behind: list[Record] = []
    for run in reversed(runs):
        if not run.lagged:
            break
        behind.append(run)
    return behind[::-1]


def choose(runs: Sequence[Record], changes: int, base_rows: int, view_rows: int) -> tuple[str, str]:
    """The strategy of an ``auto`` run reading ``changes`` change rows, and why."""
    by_id, again = estimate_id(runs, changes), estimate_recompute(runs, base_rows)
    if by_id is not None and again is not None:
        why = (f"{changes} change rows: estimated {by_id.seconds:.2f} s by id ({by_id.runs} runs) "
               f"against {again.seconds:.2f} s to recompute ({again.runs} runs)")
        behind = lagging(runs)
        if not behind:
            return ("id" if by_id.seconds <= again.seconds else "recompute"), why
        skipped = sum(r.changes for r in behind)
        catch_up = estimate_id(runs, skipped).seconds  # type: ignore[union-attr]
        why += f", plus {catch_up:.2f} s to catch the caches up over {skipped} change rows"
        if by_id.seconds + catch_up <= again.seconds:
            return "id", why
        lost = sum(max(0.0, r.seconds - estimate_id(runs, r.changes).seconds) for r in behind)  # type: ignore[union-attr]
        if by_id.seconds <= again.seconds and lost >= catch_up:
            return "id", why + f"; the {len(behind)} recomputations since cost {lost:.2f} s more than id"
        return "recompute", why
    if changes > RECOMPUTE_RATIO * max(view_rows, 1):
        return "recompute", f"{changes} change rows for {view_rows} view rows"
    return "id", ""


def describe(runs: Sequence[Record]) -> str:
    """What ``explain`` says of an ``auto`` view's records."""
    if not runs:
        return "auto: no run recorded yet; a run recomputes when it reads more change rows than " \
               f"{RECOMPUTE_RATIO:.0%} of the view's rows, else maintains by id"
    last = runs[-1]
    by_id = estimate_id(runs, last.changes)
    again = estimate_recompute(runs, last.base_rows)
    counts = {s: sum(1 for r in runs if r.strategy == s) for s in ("id", "recompute")}
    line = f"auto: {counts['id']} id runs and {counts['recompute']} recomputations recorded"
    if by_id is not None and again is not None:
        line += (f"; for the last run's {last.changes} change rows: {by_id.seconds:.2f} s by id, "
                 f"{again.seconds:.2f} s to recompute")
    return line
