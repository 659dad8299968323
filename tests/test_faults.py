"""Crashes at every commit point of ingest and maintain.

One scenario: two change files ingested (one with a bad record, quarantined), then every view
maintained: ``phone_parts`` by ``id``, ``phone_cost`` by ``id`` (with its intermediate cache),
``stats`` by ``maps`` (its maps tables), ``dearest`` by ``maps`` (a maps cache and the rest by ID)
and ``phone_price_range`` by ``auto``.  A fault-free run
counts the commits the scenario makes; then, for every k, the scenario runs on a copy of the
warehouse and "crashes" right after its k-th commit landed (the process stops there: nothing
after it runs), and the whole scenario is run again.  After it, the base tables equal the
fault-free run's (no change lost or applied twice), the quarantine holds its record once, and
every view equals its recomputation (``verify``, caches and maps included).
"""

from __future__ import annotations

import json
import shutil

import pytest

from idivm.datasets import devices, view_path
from idivm.demo import sample_path
from idivm.storage import delta
from idivm.storage.delta import commits
from idivm.warehouse import Warehouse

STATS = """CREATE VIEW stats AS
SELECT did, SUM(price) AS cost, COUNT(*) AS n FROM parts NATURAL JOIN devices_parts NATURAL JOIN devices
WHERE category = "phone" GROUP BY did"""

#: a view over a GROUP BY joined with a table: a maps cache and the rest by ID
DEAREST = """CREATE VIEW dearest AS
SELECT d.did, d.category, g.hi, g.n
FROM devices d JOIN (SELECT dp.did AS did, MAX(p.price) AS hi, COUNT(*) AS n
                     FROM devices_parts dp JOIN parts p ON p.pid = dp.pid GROUP BY dp.did) AS g ON d.did = g.did"""


class Crash(BaseException):
    """The process stopping (not an error any code would catch)."""


class Tripwire(list):
    """Stands for the counter of commits made (:func:`idivm.storage.delta.commits.count`):
    raises :class:`Crash` once the ``at``-th commit of the scenario has landed."""

    def __init__(self, start: int, at: int | None):
        super().__init__([start])
        self.start, self.at = start, at

    def __setitem__(self, i, value):
        super().__setitem__(i, value)
        if self.at is not None and value - self.start >= self.at:
            self.at = None
            raise Crash(f"crash after commit {value - self.start}")


def _rows(table: str) -> list[dict]:
    return [json.loads(line) for line in sample_path("devices", table).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def prepared(spark, tmp_path_factory):
    """A warehouse with the sample tables and the four views, and the two change files."""
    root = tmp_path_factory.mktemp("faults")
    wh = Warehouse(root / "wh", spark=spark)
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    wh.define(view_path("devices_v").read_text(), strategy="id")
    wh.define(view_path("devices_cost").read_text(), strategy="id")
    wh.define(STATS, strategy="maps")
    wh.define(DEAREST, strategy="maps")
    wh.define(view_path("devices_price_range").read_text(), strategy="auto")
    parts = _rows("parts")
    (root / "parts.jsonl").write_text("".join(json.dumps({**p, "price": p["price"] + 7}) + "\n" for p in parts[:4])
                                      + '{"pid": "not a number", "price": 1}\n')
    dps = _rows("devices_parts")
    (root / "dp.jsonl").write_text(json.dumps({"__delete": {"did": dps[0]["did"], "pid": dps[0]["pid"]}}) + "\n"
                                   + json.dumps({"did": dps[1]["did"], "pid": parts[5]["pid"]}) + "\n")
    return root


def _scenario(wh: Warehouse, root) -> None:
    wh.ingest("parts", root / "parts.jsonl", format="rows")
    wh.ingest("devices_parts", root / "dp.jsonl", format="rows")
    wh.maintain()


def _state(wh: Warehouse) -> dict:
    return {t: sorted(map(json.dumps, delta.read_arrow(wh.table_path(t)).to_pylist()))
            for t in devices.KEYS}


@pytest.fixture(scope="module")
def clean(prepared, spark, tmp_path_factory):
    """The fault-free run: the commits it makes, its base tables and their versions."""
    wh = Warehouse(shutil.copytree(prepared / "wh", tmp_path_factory.mktemp("clean") / "wh"), spark=spark)
    before = commits.made()
    _scenario(wh, prepared)
    total = commits.made() - before
    assert total >= 11, total  # 2 ingests, the quarantine, 2 caches, the maps of 2, 5 views
    return total, _state(wh), _versions(wh)


def _versions(wh: Warehouse) -> dict:
    return {t: delta.version(wh.table_path(t)) for t in devices.KEYS}


def _crash_after(k: int, prepared, clean, spark, tmp_path, monkeypatch) -> None:
    _, expected, versions = clean
    wh = Warehouse(shutil.copytree(prepared / "wh", tmp_path / f"k{k}"), spark=spark)
    monkeypatch.setattr(commits, "_made", Tripwire(commits.made(), k))
    with pytest.raises(Crash):
        _scenario(wh, prepared)
    monkeypatch.setattr(commits, "_made", [commits.made()])
    _scenario(wh, prepared)
    assert _state(wh) == expected, f"crash after commit {k}: base tables differ"
    assert _versions(wh) == versions, f"crash after commit {k}: a batch was applied twice"
    assert wh.quarantined("parts").num_rows == 1, f"crash after commit {k}"
    for name in sorted(wh.catalog.views):
        check = wh.verify(name)
        assert check.ok, f"crash after commit {k}: {check.summary()}"


def test_a_crash_after_a_commit_of_ingest_or_maintain_converges_on_the_next_run(prepared, clean, spark, tmp_path,
                                                                               monkeypatch):
    """The commit in the middle of the scenario (every commit: the slow test below)."""
    _crash_after(max(1, clean[0] // 2), prepared, clean, spark, tmp_path, monkeypatch)


@pytest.mark.slow
def test_a_crash_after_any_commit_of_ingest_or_maintain_converges_on_the_next_run(prepared, clean, spark, tmp_path,
                                                                                monkeypatch):
    for k in range(1, clean[0] + 1):
        _crash_after(k, prepared, clean, spark, tmp_path, monkeypatch)


@pytest.mark.slow
def test_kill_9_at_random_moments_leaves_every_view_whole_and_the_next_run_converges(prepared, spark, tmp_path):
    """A real process ingests a spool directory and maintains every view; it is killed (SIGKILL,
    with its JVM) at a random moment.  Every view is then still equal to its recomputation at
    its own watermark (its old or its new state), and a run in this process brings the base
    tables to the changes of every file, once, and every view up to date."""
    import os
    import random
    import signal
    import subprocess
    import sys

    rng = random.Random(20261127)
    wh = Warehouse(shutil.copytree(prepared / "wh", tmp_path / "wh"), spark=spark)
    spool = tmp_path / "spool"
    spool.mkdir()
    prices = {p["pid"]: p["price"] for p in _rows("parts")}
    script = (f"{sys.executable} -m idivm.cli --warehouse {wh.path} ingest parts {spool} --format rows; "
              f"{sys.executable} -m idivm.cli --warehouse {wh.path} maintain --all")
    killed = 0
    for i in range(4):
        changed = {pid: round(rng.uniform(1, 500), 2) for pid in rng.sample(sorted(prices), 3)}
        prices.update(changed)
        (spool / f"{i:04d}.jsonl").write_text("".join(json.dumps({"pid": pid, "price": price}) + "\n"
                                                      for pid, price in changed.items()))
        proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=rng.uniform(3, 30))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            killed += 1
        for name in sorted(wh.catalog.views):  # whole: its old or its new state
            check = wh.verify(name)
            assert check.ok, f"after kill {i}: {check.summary()}"
        wh.ingest("parts", spool, format="rows")
        wh.maintain()
        assert {r["pid"]: r["price"] for r in delta.read_arrow(wh.table_path("parts")).to_pylist()} == prices
        for name in sorted(wh.catalog.views):
            check = wh.verify(name)
            assert check.ok, f"after run {i}: {check.summary()}"
    assert killed, "no process was killed: the delays are too long"


@pytest.mark.parametrize("strategy, storage", [
    ("id", None), ("tuple", None),
    pytest.param("maps", None, marks=pytest.mark.slow),
    pytest.param("id", "delta-spark-dv", marks=pytest.mark.slow),  # Delta's idempotent MERGE
    pytest.param("tuple", "delta-spark", marks=pytest.mark.slow),
])
def test_a_run_that_another_run_overtakes_commits_nothing_and_starts_again(make_warehouse, tmp_path, monkeypatch,
                                                                           strategy, storage):
    """Two runs of one view at once, interleaved deterministically: run A computes its changes;
    before it commits, run B maintains the view to the same versions.  A's commit is refused
    (the view moved past the version A read), A starts again and finds the view up to date: the
    change is applied once (``phone_cost`` adds increments, which applying twice would show)."""
    from idivm.exec import commit

    wh = make_warehouse(storage=storage)
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    wh.define(view_path("devices_cost").read_text(), strategy=strategy)
    part = _rows("parts")[0]
    (tmp_path / "p.jsonl").write_text(json.dumps({**part, "price": part["price"] + 100}) + "\n")
    wh.ingest("parts", tmp_path / "p.jsonl", format="rows")
    where = "merge_by_spark" if wh.storage.spark else "land"  # the engine given, or $IDIVM_STORAGE's
    real, overtaken, messages = getattr(commit, where), [], []

    def overtaken_once(script, path, *args, **kwargs):
        if not overtaken:
            overtaken.append(script.view)
            monkeypatch.setattr(commit, where, real)
            (b,) = wh.maintain("phone_cost")  # run B, from start to end
            assert b.version is not None
        return real(script, path, *args, **kwargs)

    monkeypatch.setattr(commit, where, overtaken_once)
    (a,) = wh.maintain("phone_cost", progress=messages.append)
    assert overtaken and any("starting again" in m for m in messages), messages
    assert a.version is None or a.changes == 0 or "up to date" in a.summary(), a.summary()
    check = wh.verify("phone_cost")
    assert check.ok, check.summary()


@pytest.mark.slow
def test_two_maintainer_processes_at_once_apply_each_change_once(prepared, spark, tmp_path):
    """Real processes: two ``maintain phone_cost`` started together after each of three price
    changes; both exit 0 and the view equals its recomputation every time."""
    import subprocess
    import sys

    wh = Warehouse(shutil.copytree(prepared / "wh", tmp_path / "wh"), spark=spark)
    parts = _rows("parts")
    for i in range(3):
        (tmp_path / f"p{i}.jsonl").write_text("".join(json.dumps({**p, "price": p["price"] + i + 1}) + "\n"
                                                      for p in parts[:3]))
        wh.ingest("parts", tmp_path / f"p{i}.jsonl", format="rows")
        procs = [subprocess.Popen([sys.executable, "-m", "idivm.cli", "--warehouse", str(wh.path), "maintain",
                                   "phone_cost"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        check = wh.verify("phone_cost")
        assert check.ok, f"after change {i}: {check.summary()}"
