"""The cost-based choice of ``auto``: each run of an ``auto`` view is recorded (strategy,
seconds, change rows read, rows of the base tables), and a run chooses the strategy whose
estimated time, from those records, is the smallest: recomputation, or one of the view's
incremental strategies.  Those are ``id`` (the Δ-script, with its caches) where the view has
one, and ``maps`` (DBToaster's higher-order delta maps) for aggregate views: the only one of
those ``id`` cannot maintain (subqueries in WHERE, nested aggregates, one tuple), and a second
one of those it can, whose maps a run builds when it first tries them (rent or buy: once the
runs since ``define`` have cost what building them is estimated to).

* ``recompute`` costs what reading the base tables costs: its estimate is the median time per
  base-table row of the recorded recomputations (the view's materialization at ``define``
  counts as one until a run has recomputed) times the base tables' rows now.
* the incremental strategy costs a fixed part and a part per change row: its estimate is a
  least-squares line through its recorded runs (seconds against change rows, neither part
  negative); with runs of one size only, which cannot tell the two parts apart, their median
  time (the fixed part: a run's cost at small batches is mostly fixed, and a run of another
  size, once recorded, gives the line).  A batch the rule of thumb calls large (below) is
  given to an incremental strategy only when its records hold a batch within :data:`SPAN`
  times its size.

A run that recomputes recomputes the view only, and a run of one incremental strategy writes
only its own tables: the intermediate caches of the ``id`` program, or the maps, stay where they
were (keeping them all up to date would make ``auto`` dearer than its cheapest strategy), and
the next run of their strategy first catches them up to the view, incrementally (see
:meth:`idivm.exec.runtime.Runtime.maintain`).  While they lag, that strategy's estimate adds the
catch-up, a run of it over the change rows the other runs skipped; so that one large batch does
not keep it away for ever, a run also goes back to it when the batch alone favours it and the
runs since the lag began have cost more than it would have by at least the catch-up (the
rent-or-buy rule: never more than twice the better of the two).

A line through the runs of small batches says little of a batch many times larger: a batch
more than twice the largest an incremental strategy has run is given to it when what that
largest run is estimated to cost is below the best estimate, and its record then extends the
line.

Estimates go stale: the materialization at ``define`` is a recomputation done once (with the
caches, in a cold session), and the records of a strategy ``auto`` stopped choosing are never
renewed.  So a strategy that no run among the last :data:`REFRESH` has checked is tried once
when its estimate is within :data:`EXPLORE` times the best one; its run's record then decides.

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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

#: the file of a view's run records, in its program folder
HISTORY_FILE = "runs.jsonl"
#: the runs kept
KEEP = 50
#: without estimates, ``auto`` recomputes when a run reads more change rows than this fraction
#: of the base tables' rows
RECOMPUTE_RATIO = 0.25
#: an incremental strategy's records are trusted for batches up to this many times the largest
#: one they hold
SPAN = 10
#: a strategy whose estimate no run among the last REFRESH has checked is tried when it is
#: estimated at most EXPLORE times the best one (at most one run in REFRESH, at most EXPLORE
#: times dearer, when the estimate was right)
EXPLORE = 1.5
REFRESH = 20


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
    #: the batch is more than :data:`SPAN` times the largest one recorded
    beyond: bool = False


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
    beyond = changes > SPAN * max(max(xs), 1)
    if len(set(xs)) < 2:
        return Estimate(strategy, statistics.median(s for _, s in points), len(points), beyond)
    mx, my = statistics.fmean(xs), statistics.fmean(s for _, s in points)
    slope = sum((x - mx) * (s - my) for x, s in points) / sum((x - mx) ** 2 for x in xs)
    slope = max(slope, 0.0)
    fixed = max(my - slope * mx, 0.0)
    return Estimate(strategy, fixed + slope * changes, len(points), beyond)


def unchecked(runs: Sequence[Record], strategy: str) -> bool:
    """Whether no run of ``strategy`` with changes is among the last :data:`REFRESH` runs: its
    estimate then comes from older runs, or, for ``recompute``, from the materialization at
    ``define`` alone."""
    return not any(r.strategy == strategy and r.changes > 0 for r in runs[-REFRESH:])


#: what an incremental strategy leaves behind while ``auto`` runs another one
_LAGGING = {"id": "caches", "maps": "maps"}


def lagging(runs: Sequence[Record], strategy: str | None = None) -> list[Record]:
    """The runs that left ``strategy``'s tables (its caches or maps) behind since its last run:
    those after it that are ``lagged`` (a recomputation of the view alone, or a run of the other
    incremental strategy).  Without ``strategy``: the last runs, while they are ``lagged``."""
    behind: list[Record] = []
    for run in reversed(runs):
        if run.strategy == strategy or (strategy is None and not run.lagged):
            break
        if run.lagged:
            behind.append(run)
    return behind[::-1]


def choose(runs: Sequence[Record], changes: int, base_rows: int, incremental: str | Sequence[str] = "id",
           stateful: Collection[str] | None = None, unbuilt: Mapping[str, int] | None = None) -> tuple[str, str]:
    """The strategy of an ``auto`` run reading ``changes`` change rows of base tables of
    ``base_rows`` rows, and why: one of the ``incremental`` strategies (``id``, ``maps``: the
    first is the view's own, the rule of thumb's choice) or ``recompute``.

    ``stateful``: the incremental strategies whose tables other runs leave behind (default: all
    of them); each is estimated with the catch-up of its lag.  ``unbuilt``: incremental
    strategies whose tables are not built yet, with the number of tables to build: one is tried
    once the runs since the view was defined have cost more than building them is estimated to
    (a recomputation a table), for a batch that is not large by the rule of thumb (rent or buy:
    the tables are built once the runs without them have cost what building them costs)."""
    incremental = (incremental,) if isinstance(incremental, str) else tuple(incremental)
    stateful = set(incremental if stateful is None else stateful)
    unbuilt = dict(unbuilt or {})
    built = [s for s in incremental if s not in unbuilt]
    again = estimate_recompute(runs, base_rows)
    large = changes > RECOMPUTE_RATIO * max(base_rows, 1)
    # a large batch far beyond a strategy's records: its estimate says nothing
    estimates = {s: e for s in built if (e := estimate_id(runs, changes, s)) is not None
                 and not (large and e.beyond)}
    if again is not None and not large:
        spent = sum(r.seconds for r in runs if r.changes > 0)
        for s, tables in unbuilt.items():
            cost = tables * again.seconds
            if spent >= cost:
                return s, (f"trying {s}: the runs since the view was defined cost {spent:.2f} s, more than building "
                           f"its {tables} tables is estimated to ({cost:.2f} s)")
    if not estimates or again is None:
        if large:
            return "recompute", f"{changes} change rows for {base_rows} base-table rows"
        return (built or incremental)[0], ""
    whys, totals, catch_ups = [], {}, {}
    for s, e in estimates.items():
        behind = lagging(runs, s) if s in stateful else []
        skipped = sum(r.changes for r in behind)
        catch_ups[s] = estimate_id(runs, skipped, s).seconds if skipped else 0.0  # type: ignore[union-attr]
        totals[s] = e.seconds + catch_ups[s]
        whys.append(f"estimated {e.seconds:.2f} s by {s} ({e.runs} runs)"
                    + (f", plus {catch_ups[s]:.2f} s to catch the {_LAGGING[s]} up over {skipped} change rows"
                       if skipped else ""))
    why = f"{changes} change rows: " + "; ".join(whys) + f"; against {again.seconds:.2f} s to recompute ({again.runs} runs)"
    totals["recompute"] = again.seconds
    best = min(totals, key=lambda s: (totals[s], s != incremental[0]))
    # a batch more than twice any an incremental strategy has run: its line is extrapolated, so
    # it is tried when what its largest run cost is below the best estimate (then recorded)
    for s in estimates:
        top = max(r.changes for r in runs if r.strategy == s)
        if s != best and not large and changes > 2 * top and \
                estimate_id(runs, top, s).seconds + catch_ups[s] < totals[best]:  # type: ignore[union-attr]
            return s, why + f"; trying {s}: its runs read at most {top} change rows"
    # an estimate no recent run of its own has checked is tried once when it is close to the best
    for s in sorted(totals, key=lambda s: totals[s]):
        if s != best and totals[s] <= EXPLORE * totals[best] and unchecked(runs, s):
            return s, why + f"; trying {s}: no run of it among the last {REFRESH} checked its estimate"
    if best != "recompute" and catch_ups.get(best, 0.0) == 0.0:
        return best, why
    # rent or buy: a strategy whose catch-up alone makes it dearer goes back to incremental runs
    # once the runs since it was left behind have cost more than it would have, by the catch-up
    for s in sorted(estimates, key=lambda s: estimates[s].seconds):
        others = min(t for o, t in totals.items() if o != s)
        if s == best or estimates[s].seconds > others:
            continue
        behind = lagging(runs, s)
        lost = sum(max(0.0, r.seconds - estimate_id(runs, r.changes, s).seconds)  # type: ignore[union-attr]
                   for r in behind)
        if lost >= catch_ups[s]:
            return s, why + f"; the {len(behind)} runs since cost {lost:.2f} s more than {s}"
    return best, why


def describe(runs: Sequence[Record], incremental: str | Sequence[str] = "id",
             unbuilt: Collection[str] = ()) -> str:
    """What ``explain`` says of an ``auto`` view's records (``incremental``: its incremental
    strategies, the view's own first; ``unbuilt``: those whose tables a run has not built yet)."""
    incremental = (incremental,) if isinstance(incremental, str) else tuple(incremental)
    later = "".join(f"; {s} once the runs have cost what building its tables is estimated to" for s in unbuilt)
    if not runs:
        return "auto: no run recorded yet; a run recomputes when it reads more change rows than " \
               f"{RECOMPUTE_RATIO:.0%} of the base tables' rows, " \
               f"else maintains by {incremental[0]}{later}"
    last = runs[-1]
    counts = {s: sum(1 for r in runs if r.strategy == s) for s in (*incremental, "recompute")}
    line = "auto: " + " and ".join(f"{counts[s]} {s} runs" for s in incremental) + \
        f" and {counts['recompute']} recomputations recorded"
    again = estimate_recompute(runs, last.base_rows)
    known = [(s, e) for s in incremental if (e := estimate_id(runs, last.changes, s)) is not None]
    if known and again is not None:
        line += f"; for the last run's {last.changes} change rows: " + \
            ", ".join(f"{e.seconds:.2f} s by {s}" for s, e in known) + f", {again.seconds:.2f} s to recompute"
    return line + later
