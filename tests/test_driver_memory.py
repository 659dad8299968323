"""No table-sized data through the driver: with the delta-spark engines, a view many times larger
than ``spark.driver.maxResultSize`` is defined, a batch larger than it ingested and the view
maintained and verified, in a session whose driver accepts at most that much from a job (and
broadcasts no join side larger than a quarter of it).  The session is the console script's, in a
subprocess, configured by a ``spark-defaults.conf``.  Two views: ``phone_parts`` (flat, half its
rows updated) and the nested ``sf_reviews`` with its index tables (users' changes reaching most
of its rows through an index, reviews inserted and deleted: the index tables change too)."""

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


def _cli(tmp_path, storage: str):
    """A function running the console script on a warehouse in ``tmp_path`` with the ``storage``
    engine, in a session limited to :data:`MAX_RESULT` per job's result; its stdout and stderr."""
    conf = tmp_path / "conf"
    conf.mkdir()
    # a broadcast join gathers its small side in the driver: below the limit too
    (conf / "spark-defaults.conf").write_text(f"spark.driver.maxResultSize {MAX_RESULT}\n"
                                              f"spark.sql.autoBroadcastJoinThreshold {BROADCAST}\n")
    env = {**os.environ, "SPARK_CONF_DIR": str(conf)}
    warehouse = tmp_path / "warehouse"

    def idivm(*args: str) -> tuple[str, str]:
        done = subprocess.run([sys.executable, "-m", "idivm.cli", "--warehouse", str(warehouse),
                               "--storage", storage, *args], env=env, capture_output=True, text=True,
                              timeout=1200)
        # the Python traceback and the Java exceptions' messages, without their stacks
        said = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("\tat "))
        assert done.returncode == 0, f"idivm {' '.join(args)}:\n{done.stdout[-2000:]}\n{said[-6000:]}"
        return done.stdout, done.stderr

    return idivm


@pytest.mark.parametrize("storage", ["delta-spark", "delta-spark-dv"])
def test_maintenance_never_collects_more_than_max_result_size(tmp_path, storage):
    spec = devices.DevicesSpec.at_scale(40_000, fanout=10, selectivity=0.5, seed=1)
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "idivm.datasets", "devices", "--scale", "40000", "--fanout", "10",
                    "--selectivity", "0.5", "--seed", "1", "--out", str(data), "--format", "parquet"], check=True)
    idivm = _cli(tmp_path, storage)

    for table, key in devices.keys(spec).items():
        idivm("table", "create", table, "--key", ",".join(key), "--from", str(data / f"{table}.parquet"))
    idivm("define", str(view_path("devices_v")), "--strategy", "id")
    # half of the parts change price: about half of the view's rows are updated
    batch = tmp_path / "prices.jsonl"
    batch.write_text("".join(json.dumps({"pid": pid, "price": post}) + "\n"
                             for pid, _, post in devices.price_updates(spec, 20_000, seed=7)))
    idivm("ingest", "parts", str(batch), "--format", "rows")
    out, _ = idivm("maintain", "--all")
    assert re.search(r"phone_parts: id, .* ~(\d+) ", out), out
    updated = int(re.search(r"~(\d+) ", out).group(1))
    verified, _ = idivm("verify", "phone_parts")
    assert "matches its recomputation" in verified, verified
    rows = int(re.search(r": (\d+) rows", verified).group(1))
    # the view, and the rows the run changed, are several times what a job may return to the
    # driver: three 8-byte values a row at least (did, pid, price, and the hidden IDs)
    assert rows * 24 > 4 * 2 ** 20 and updated * 24 > 2 * 2 ** 20, (rows, updated)


@pytest.mark.parametrize("storage", ["delta-spark-dv"])
def test_maintaining_a_nested_view_and_its_indexes_never_collects_more_than_max_result_size(tmp_path, storage):
    """``sf_reviews`` over 4,000 businesses (half in San Francisco, about 3 MB of view rows):
    a batch of about 1.5 MB of user and review changes updates most view rows through the
    ``#(user_id)`` index (more keys than a lookup restricts its read by) and changes index
    entries; the index tables are merged by Spark and reflect the view's new version."""
    from idivm.storage import delta

    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "idivm.datasets", "yelp", "--scale", "4000", "--sf-fraction", "0.5",
                    "--seed", "1", "--out", str(data), "--format", "parquet", "--changes", "1",
                    "--batch-size", "6000", "--mix", "user_fans=4,user_elite=2,review_insert=2,review_delete=1",
                    "--changes-seed", "3"], check=True)
    idivm = _cli(tmp_path, storage)
    for table, key in {"businesses": "business_id", "reviews": "review_id", "users": "user_id"}.items():
        idivm("table", "create", table, "--key", key, "--from", str(data / f"{table}.parquet"))
    idivm("define", str(view_path("sf_reviews")), "--strategy", "id")
    batch = data / "changes" / "batch-0001"
    assert sum(f.stat().st_size for f in batch.glob("*.jsonl")) > 2 ** 20
    for table in ("users", "reviews"):
        idivm("ingest", table, str(batch / f"{table}.jsonl"), "--format", "debezium")
    out, err = idivm("maintain", "--all")
    assert re.search(r"sf_reviews: id, ", out), out
    assert "joined with the i-diff's keys by Spark" in err, err[-4000:]
    assert err.count("merging the changes of index") == 2, err[-4000:]
    verified, _ = idivm("verify", "sf_reviews")
    assert "matches its recomputation" in verified, verified
    view = tmp_path / "warehouse" / "views" / "sf_reviews"
    indexes = sorted((tmp_path / "warehouse" / "views" / "sf_reviews.indexes").iterdir())
    assert len(indexes) == 2
    for index in indexes:
        last = delta.history(index, 1)[0]
        assert last["idivm.operation"] == "maintain index", last
        assert last["idivm.view_version"] == str(delta.data_version(view)), last
