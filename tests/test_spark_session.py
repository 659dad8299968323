"""The SparkSession: delta-spark's jars are resolved by Spark once and loaded from the list of
the files it resolved to afterwards (:func:`idivm.storage.spark.cached_jars`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from idivm.storage import spark as sessions

_START = textwrap.dedent("""
    import sys
    from idivm.storage.spark import get_session
    spark = get_session("local[1]")
    conf = spark.sparkContext.getConf()
    spark.range(3).write.format("delta").save(sys.argv[1])
    rows = spark.read.format("delta").load(sys.argv[1]).count()
    print("packages=" + (conf.get("spark.jars.packages") or ""), "rows=" + str(rows))
""")


def _start(cache: Path, table: Path) -> str:
    env = {**os.environ, sessions.CACHE_ENV: str(cache)}
    done = subprocess.run([sys.executable, "-c", _START, str(table)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_second_session_loads_the_jars_the_first_resolved(tmp_path):
    cache = tmp_path / "cache"
    first = _start(cache, tmp_path / "t1")
    assert first.startswith("packages=io.delta:delta-spark") and first.endswith("rows=3")
    (listed,) = cache.iterdir()
    jars = listed.read_text().split()
    assert any("delta-spark" in j for j in jars) and all(Path(j.removeprefix("file://")).is_file() for j in jars)
    second = _start(cache, tmp_path / "t2")
    assert second == "packages= rows=3"  # nothing resolved, Delta Lake works


def test_a_list_naming_a_missing_jar_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv(sessions.CACHE_ENV, str(tmp_path))
    jar = tmp_path / "io.delta_delta-spark.jar"
    jar.write_bytes(b"")
    sessions._jar_list().write_text(f"file://{jar}\n")
    assert sessions.cached_jars() == [f"file://{jar}"]
    sessions._jar_list().write_text(f"file://{jar}\nfile://{tmp_path / 'gone.jar'}\n")
    assert sessions.cached_jars() == []
    sessions._jar_list().unlink()
    assert sessions.cached_jars() == []
