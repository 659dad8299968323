"""Maintenance on a real Spark cluster: a standalone master and two workers started from the
installed pyspark on the loopback address, executors in their own JVMs, the warehouse on a path
they all share.  The console script runs ``table create``, ``define``, ``ingest``, ``maintain``
and ``verify`` against ``spark://...`` with the delta-spark engine (deletion vectors), and the
views it leaves must hold the rows the same commands leave in a local run."""

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


def _session(env: dict, warehouse: Path, tmp_path: Path, master: str | None) -> dict[str, list]:
    """Create the sample devices tables, define the thesis' two views, ingest two batches and
    maintain after each; the views' rows (as sorted JSON lines) at the end."""
    for table, key in (("devices", "did"), ("parts", "pid"), ("devices_parts", "did,pid")):
        _idivm(env, warehouse, "table", "create", table, "--key", key, "--from", str(SAMPLES / "devices" / f"{table}.jsonl"),
               master=master)
    for view in ("devices_v", "devices_cost"):
        _idivm(env, warehouse, "define", str(view_path(view)), "--strategy", "id", master=master)
    parts = [json.loads(line) for line in (SAMPLES / "devices" / "parts.jsonl").read_text().splitlines() if line]
    for batch in range(2):
        changes = tmp_path / f"parts-{batch}.jsonl"
        changes.write_text("".join(json.dumps({**p, "price": (p["price"] or 0) * (2 + batch)}) + "\n"
                                   for p in parts[batch::3]))
        _idivm(env, warehouse, "ingest", "parts", str(changes), "--format", "rows", master=master)
        _idivm(env, warehouse, "maintain", "--all", master=master)
    out = {}
    for view in ("phone_parts", "phone_cost"):
        assert "matches its recomputation" in _idivm(env, warehouse, "verify", view, master=master)
        rows = _idivm(env, warehouse, "show", view, "--format", "jsonl", master=master)
        out[view] = sorted(rows.splitlines())
    return out


def test_maintenance_on_a_standalone_cluster_matches_the_local_run(cluster, tmp_path):
    url, env, work = cluster
    shared = tmp_path / "shared"
    on_cluster = _session(env, shared / "warehouse", tmp_path, url)
    local = _session(env, tmp_path / "local" / "warehouse", tmp_path, None)
    assert on_cluster == local
    assert all(on_cluster.values())
    # the executors ran in JVMs the workers launched: one directory per executor of an application
    apps = sorted(work.glob("app-*"))
    assert apps, "no application ran on the cluster"
    assert any(len(list(app.iterdir())) >= WORKERS for app in apps), \
        "no application had an executor on each worker"
