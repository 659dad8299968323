"""No table-sized data through the driver: with the delta-spark engines, a view many times larger
than ``spark.driver.maxResultSize`` is defined, a batch larger than it ingested and the view
maintained and verified, in a session whose driver accepts at most that much from a job (and
broadcasts no join side larger than a quarter of it).  The session is the console script's, in a
subprocess, configured by a ``spark-defaults.conf``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from idivm.datasets import devices, view_path

pytestmark = pytest.mark.slow

MAX_RESULT = "1m"
BROADCAST = "256k"


@pytest.mark.parametrize("storage", ["delta-spark", "delta-spark-dv"])
def test_maintenance_never_collects_more_than_max_result_size(tmp_path, storage):
    spec = devices.DevicesSpec.at_scale(40_000, fanout=10, selectivity=0.5, seed=1)
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "idivm.datasets", "devices", "--scale", "40000", "--fanout", "10",
                    "--selectivity", "0.5", "--seed", "1", "--out", str(data), "--format", "parquet"], check=True)
    conf = tmp_path / "conf"
    conf.mkdir()
    # a broadcast join gathers its small side in the driver: below the limit too
    (conf / "spark-defaults.conf").write_text(f"spark.driver.maxResultSize {MAX_RESULT}\n"
                                              f"spark.sql.autoBroadcastJoinThreshold {BROADCAST}\n")
    env = {**os.environ, "SPARK_CONF_DIR": str(conf)}
    warehouse = tmp_path / "warehouse"

    def idivm(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "idivm.cli", "--warehouse", str(warehouse),
                               "--storage", storage, *args], env=env, capture_output=True, text=True,
                              timeout=1200)
        assert done.returncode == 0, f"idivm {' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return done.stdout

    for table, key in devices.keys(spec).items():
        idivm("table", "create", table, "--key", ",".join(key), "--from", str(data / f"{table}.parquet"))
    idivm("define", str(view_path("devices_v")), "--strategy", "id")
    # half of the parts change price: about half of the view's rows are updated
    batch = tmp_path / "prices.jsonl"
    batch.write_text("".join(json.dumps({"pid": pid, "price": post}) + "\n"
                             for pid, _, post in devices.price_updates(spec, 20_000, seed=7)))
    idivm("ingest", "parts", str(batch), "--format", "rows")
    out = idivm("maintain", "--all")
    assert re.search(r"phone_parts: id, .* ~(\d+) ", out), out
    updated = int(re.search(r"~(\d+) ", out).group(1))
    verified = idivm("verify", "phone_parts")
    assert "matches its recomputation" in verified, verified
    rows = int(re.search(r": (\d+) rows", verified).group(1))
    # the view, and the rows the run changed, are several times what a job may return to the
    # driver: three 8-byte values a row at least (did, pid, price, and the hidden IDs)
    assert rows * 24 > 4 * 2 ** 20 and updated * 24 > 2 * 2 ** 20, (rows, updated)
