"""What a maintenance run reports it cost (:mod:`idivm.exec.meter`): seconds and Spark jobs by
phase, and commits.

* The meter on its own: phases are exclusive (a nested phase pauses the outer one) and add up
  to the metered time.
* On the thesis' sample tables, for a view with an intermediate cache (Fig. 2.5b) and one
  without (Fig. 2.1b), under ``id`` and ``recompute``: the commits a run reports are the
  versions its view and caches gained (read from the tables afterwards), its jobs are all the
  Spark jobs started while it ran (counted around it), its phases add up to its time, and a
  run with nothing to do commits nothing and starts no Spark job.
"""

from __future__ import annotations

import json
import time

import pytest

from idivm.datasets import devices, view_path
from idivm.demo import sample_path
from idivm.exec import meter
from idivm.exec.runtime import cache_paths
from idivm.storage import delta


class _Clock:
    """A clock that moves only when told: the meter's phases measured exactly."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_phases_are_exclusive_and_add_up_to_the_metered_time(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(meter, "time", clock)
    with meter.metered() as m:
        with meter.phase("plan"):
            clock.sleep(0.05)
            with meter.phase("evaluate"):
                clock.sleep(0.1)
                with meter.phase("write"):
                    clock.sleep(0.05)
            clock.sleep(0.05)
    cost = m.cost()
    assert set(cost.seconds) == {"plan", "evaluate", "write"}
    assert cost.seconds["plan"] == pytest.approx(0.1)
    assert cost.seconds["evaluate"] == pytest.approx(0.1)
    assert cost.seconds["write"] == pytest.approx(0.05)
    assert sum(cost.seconds.values()) == pytest.approx(0.25)
    assert (cost.commits, cost.total_jobs) == (0, 0)
    with pytest.raises(ValueError, match="unknown phase 'parse'"):
        with m.phase("parse"):
            pass


def test_a_phase_outside_a_metered_run_does_nothing():
    with meter.phase("write"):
        pass


def _jobs(spark) -> int:
    return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())


def _versions(wh, view: str) -> dict:
    entry = wh.catalog.view(view)
    paths = [wh.catalog.path_of(entry), *cache_paths(wh.catalog, entry).values()]
    return {str(p): delta.version(p) for p in paths}


@pytest.mark.parametrize("strategy", ["id", "recompute"])
def test_a_run_reports_the_jobs_and_commits_it_made(make_warehouse, spark, tmp_path, strategy):
    wh = make_warehouse()
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    for view in ("devices_v", "devices_cost"):
        wh.define(view_path(view).read_text(), strategy=strategy)
    parts = [json.loads(line) for line in sample_path("devices", "parts").read_text().splitlines() if line.strip()]
    change = tmp_path / "price.jsonl"
    change.write_text(json.dumps({**parts[0], "price": parts[0]["price"] + 1}) + "\n")
    wh.ingest("parts", change, format="rows")
    for view in ("phone_parts", "phone_cost"):
        before, jobs = _versions(wh, view), _jobs(spark)
        started = time.perf_counter()
        (r,) = wh.maintain(view)
        elapsed = time.perf_counter() - started
        after = _versions(wh, view)
        cost = r.cost
        assert cost is not None and r.version is not None
        assert cost.commits == sum(after[p] - before[p] for p in before) >= 1
        assert cost.total_jobs == _jobs(spark) - jobs
        # a price update under id is a patch the rewrite of the view's files applies in the
        # driver, and phone_cost's increments are sums of the cache's i-diff, which the driver
        # holds: no Spark job (with delta-rs; delta-spark's MERGE runs jobs); a recomputation
        # reads the tables with Spark
        assert (cost.total_jobs == 0) == (strategy == "id" and not wh.storage.spark)
        assert set(cost.seconds) <= set(meter.PHASES) and "plan" in cost.seconds
        assert sum(cost.seconds.values()) <= elapsed
        assert f"{cost.total_jobs} Spark jobs" in r.summary() and "commit" in r.summary()
        if strategy == "id":
            assert {"changes", "write"} <= set(cost.seconds)
        # nothing moved since: the run commits nothing and starts no Spark job
        jobs = _jobs(spark)
        (again,) = wh.maintain(view)
        assert again.version is None and again.cost is not None
        assert (again.cost.commits, again.cost.total_jobs, _jobs(spark) - jobs) == (0, 0, 0)
