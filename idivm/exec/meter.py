"""What a maintenance run costs: its seconds and Spark jobs by phase, and the commits it made.

A run's time is split into exclusive phases (:data:`PHASES`); the code of each phase runs
inside ``with phase(name):``, and a phase entered inside another pauses the outer one, so the
phases add up to the run.  Spark evaluates lazily: a DataFrame is computed by the action that
needs it, and its time counts in the phase of that action.  Hence ``evaluate`` is the actions
that bring the i-diffs (and the keys that restrict the reads) into the driver, and ``write``
the writing and committing of the changes — with delta-spark the MERGE evaluates its source
itself, so the i-diffs' evaluation counts in ``write`` there.

Outside a metered run (:func:`metered`), :func:`phase` does nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from idivm.storage import delta

#: the phases of a run, in the order they happen
PHASES = ("plan", "changes", "evaluate", "write", "indexes", "compact")


@dataclass(frozen=True, slots=True)
class Cost:
    """The cost of one run: ``seconds`` and Spark ``jobs`` by phase (those that took any),
    ``commits`` to Delta tables (view, caches, index tables, compactions)."""

    seconds: dict[str, float] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    commits: int = 0

    @property
    def total_jobs(self) -> int:
        return sum(self.jobs.values())

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    def summary(self) -> str:
        """``12 Spark jobs, 1 commit; plan 0.01 s, changes 0.08 s, evaluate 1.10 s (9 jobs), ...``:
        the phases that took at least 5 ms or ran a job."""
        parts = [f"{name} {self.seconds[name]:.2f} s" + (f" ({self.jobs[name]} jobs)" if self.jobs.get(name) else "")
                 for name in PHASES if self.seconds.get(name, 0.0) >= 0.005 or self.jobs.get(name)]
        commits = f"{self.commits} commit{'s' if self.commits != 1 else ''}"
        return f"{self.total_jobs} Spark jobs, {commits}; " + ", ".join(parts)


class Meter:
    """Accumulates a run's :class:`Cost` while its phases run."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._jobs: dict[str, int] = {}
        self._stack: list[str] = []
        self._scheduler = _scheduler()
        self._since = (time.perf_counter(), self._jobs_now())
        self._commits = delta.commits_made()

    def _charge(self) -> None:
        """Charge the time and jobs since the last switch to the phase running."""
        now = (time.perf_counter(), self._jobs_now())
        if self._stack:
            name = self._stack[-1]
            self._seconds[name] = self._seconds.get(name, 0.0) + now[0] - self._since[0]
            if now[1] > self._since[1]:
                self._jobs[name] = self._jobs.get(name, 0) + now[1] - self._since[1]
        self._since = now

    def _jobs_now(self) -> int:
        """The Spark jobs started so far (0 before Spark starts)."""
        if self._scheduler is None:
            self._scheduler = _scheduler()
        return int(self._scheduler.nextJobId()) if self._scheduler is not None else 0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; phases: {', '.join(PHASES)}")
        self._charge()
        self._stack.append(name)
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    def cost(self) -> Cost:
        self._charge()
        return Cost(dict(self._seconds), dict(self._jobs), delta.commits_made() - self._commits)


_current: ContextVar[Meter | None] = ContextVar("idivm_meter", default=None)


@contextmanager
def metered() -> Iterator[Meter]:
    """Meter the run inside the block: :func:`phase` charges the meter it yields."""
    meter = Meter()
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Charge the block to phase ``name`` of the metered run (nothing outside one)."""
    meter = _current.get()
    if meter is None:
        yield
        return
    with meter.phase(name):
        yield


def _scheduler():
    """The DAG scheduler of this process's SparkContext, which numbers the jobs it starts (None
    before Spark starts)."""
    pyspark = sys.modules.get("pyspark")
    sc = pyspark.SparkContext._active_spark_context if pyspark is not None else None
    return sc._jsc.sc().dagScheduler() if sc is not None else None
