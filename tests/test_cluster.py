"""Maintenance on a real Spark cluster: a standalone master and two workers started from the
installed pyspark on the loopback address, executors in their own JVMs, the warehouse on a path
they all share.  The console script runs ``table create``, ``define``, ``ingest``, ``maintain``
and ``verify`` against ``spark://...`` with the delta-spark engine (deletion vectors), and the
views it leaves must hold the rows the same steps leave in a local run (the Python API in the
test's own local session)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from idivm.datasets import view_path

pytestmark = pytest.mark.slow

SAMPLES = Path(__file__).resolve().parents[1] / "idivm" / "datasets" / "samples"
WORKERS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(master URL, environment for the driver, worker directory) of a running standalone cluster."""
    root = tmp_path_factory.mktemp("cluster")
    home = _spark_home()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1",
           "SPARK_LOG_DIR": str(root / "logs"), "SPARK_PID_DIR": str(root / "pids"),
           "SPARK_WORKER_DIR": str(root / "work"), "PYSPARK_PYTHON": sys.executable,
           "SPARK_IDENT_STRING": f"idivm-test-{os.getpid()}"}
    port, ui = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    daemon = ["bash", str(home / "sbin" / "spark-daemon.sh")]
    started = []

    def start(cls: str, instance: int, *args: str) -> None:
        subprocess.run([*daemon, "start", cls, str(instance), *args], env=env, check=True, capture_output=True)
        started.append((cls, instance))

    try:
        start("org.apache.spark.deploy.master.Master", 1, "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui))
        for i in range(1, WORKERS + 1):
            start("org.apache.spark.deploy.worker.Worker", i, "--host", "127.0.0.1", "--cores", "1",
                  "--memory", "2g", "--webui-port", str(_free_port()), url)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            logs = "".join(p.read_text(errors="replace") for p in (root / "logs").glob("*Worker*.out"))
            if logs.count("Successfully registered with master") >= WORKERS:
                break
            time.sleep(1)
        else:
            pytest.fail("the standalone workers did not register with the master:\n" + "\n".join(
                p.read_text(errors="replace")[-2000:] for p in (root / "logs").glob("*.out")))
        yield url, env, root / "work"
    finally:
        for cls, instance in reversed(started):
            subprocess.run([*daemon, "stop", cls, str(instance)], env=env, capture_output=True)


def _idivm(env: dict, warehouse: Path, *args: str, master: str | None = None) -> str:
    command = [sys.executable, "-m", "idivm.cli", "--warehouse", str(warehouse), "--storage", "delta-spark-dv"]
    if master:
        command += ["--spark-master", master]
    done = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"idivm {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


TABLES = (("devices", "did"), ("parts", "pid"), ("devices_parts", "did,pid"))
VIEWS = {"devices_v": "phone_parts", "devices_cost": "phone_cost"}


def _batches(tmp_path: Path) -> list[Path]:
    """Two batches of price changes of the sample parts, as whole rows."""
    parts = [json.loads(line) for line in (SAMPLES / "devices" / "parts.jsonl").read_text().splitlines() if line]
    out = []
    for batch in range(2):
        changes = tmp_path / f"parts-{batch}.jsonl"
        changes.write_text("".join(json.dumps({**p, "price": (p["price"] or 0) * (2 + batch)}) + "\n"
                                   for p in parts[batch::3]))
        out.append(changes)
    return out


def _on_cluster(env: dict, warehouse: Path, batches: list[Path], master: str) -> None:
    """Through the console script on the cluster: create the sample devices tables, define the
    thesis' two views, ingest the batches and maintain after each, and verify the views."""
    for table, key in TABLES:
        _idivm(env, warehouse, "table", "create", table, "--key", key, "--from",
               str(SAMPLES / "devices" / f"{table}.jsonl"), master=master)
    for view in VIEWS:
        _idivm(env, warehouse, "define", str(view_path(view)), "--strategy", "id", master=master)
    for changes in batches:
        _idivm(env, warehouse, "ingest", "parts", str(changes), "--format", "rows", master=master)
        _idivm(env, warehouse, "maintain", "--all", master=master)
    for view in VIEWS.values():
        assert "matches its recomputation" in _idivm(env, warehouse, "verify", view, master=master)


def _locally(wh, batches: list[Path]) -> None:
    """The same commands through the Python API, in this process's local session."""
    for table, key in TABLES:
        wh.create_table(table, key.split(","), SAMPLES / "devices" / f"{table}.jsonl")
    for view in VIEWS:
        wh.define(view_path(view), strategy="id")
    for changes in batches:
        wh.ingest("parts", changes, format="rows")
        wh.maintain()


def _rows(wh) -> dict[str, list]:
    return {view: sorted(json.dumps(r, sort_keys=True, default=str) for r in wh.rows(view)) for view in VIEWS.values()}


def test_maintenance_on_a_standalone_cluster_matches_the_local_run(cluster, make_warehouse, tmp_path):
    url, env, work = cluster
    from idivm.warehouse import Warehouse

    batches = _batches(tmp_path)
    shared = tmp_path / "shared" / "warehouse"
    _on_cluster(env, shared, batches, url)
    local = make_warehouse("local", storage="delta-spark-dv")
    _locally(local, batches)
    on_cluster = _rows(Warehouse(shared, spark=local.spark))
    assert on_cluster == _rows(local)
    assert all(on_cluster.values())
    # the executors ran in JVMs the workers launched: one directory per executor of an application
    apps = sorted(work.glob("app-*"))
    assert apps, "no application ran on the cluster"
    assert any(len(list(app.iterdir())) >= WORKERS for app in apps), \
        "no application had an executor on each worker"
