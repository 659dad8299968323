"""Compaction of the tables maintenance writes (:mod:`idivm.storage.compaction`): the policy,
and compactions after maintenance runs on both kinds of tables — deletion vectors purged on a
delta-spark table, small files merged on a delta-rs one — that keep the view's rows, its
watermark, its change data feed and its index tables as they were."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from idivm.storage import compaction, delta
from idivm.storage.compaction import Health, Policy


def test_the_policy_names_why_a_table_needs_compaction():
    policy = Policy(max_deleted_ratio=0.2, max_small_files=3)
    assert policy.reason(Health(files=3, small_files=3, file_rows=100, deleted_rows=20)) is None
    assert "21 of 100 rows deleted" in policy.reason(Health(3, 0, 100, 21))
    assert "4 small files" in policy.reason(Health(4, 4, 100, 0))
    assert policy.reason(Health(0, 0, 0, 0)) is None


def test_a_table_is_checked_only_at_versions_divisible_by_check_every(spark, tmp_path):
    path = tmp_path / "t"
    delta.write_arrow(path, pa.table({"k": [1]}))  # version 0
    delta.write_arrow(path, pa.table({"k": [2]}), mode="append")  # version 1: two small files
    eager = Policy(max_small_files=0, check_every=2)
    assert compaction.compact_if_needed(spark, path, "t", target_file_bytes=1 << 20, policy=eager) is None
    delta.write_arrow(path, pa.table({"k": [3]}), mode="append")  # version 2
    done = compaction.compact_if_needed(spark, path, "t", target_file_bytes=1 << 20, policy=eager)
    assert done is not None and (done.before.files, done.after.files, done.version) == (3, 1, 3)
    assert sorted(delta.read_arrow(path).column("k").to_pylist()) == [1, 2, 3]


def _ingest(wh, tmp_path, name, rows):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wh.ingest("emp", path, format="rows")


def _rows(wh, view):
    return sorted(tuple(sorted(r.items())) for r in wh.rows(view))


# delta-rs's compaction runs by default in the index test below
@pytest.mark.parametrize("storage", ["delta-spark-dv", pytest.param("delta-rs", marks=pytest.mark.slow)])
def test_a_run_compacts_the_tables_that_drifted_past_the_policy(make_warehouse, tmp_path, monkeypatch, storage):
    wh = make_warehouse(storage=storage)
    wh.create_table("emp", "eid", pa.table({"eid": list(range(400)), "dept": [i % 4 for i in range(400)],
                                            "salary": [10 * i for i in range(400)]}))
    wh.define("CREATE VIEW staff AS SELECT e.eid, e.dept, e.salary FROM emp e WHERE e.salary >= 0", strategy="id")
    view = wh.catalog.path_of(wh.catalog.view("staff"))
    if storage == "delta-spark-dv":  # the runs mark rows deleted: more than 1% of 400 after two runs
        monkeypatch.setattr(compaction, "DEFAULT_POLICY", Policy(max_deleted_ratio=0.01, max_small_files=10**6, check_every=1))
    else:  # the runs rewrite files: every file counts as small, more than one is too many
        monkeypatch.setattr(compaction, "SMALL_FILE_FRACTION", 1000.0)
        monkeypatch.setattr(compaction, "DEFAULT_POLICY", Policy(max_deleted_ratio=1.0, max_small_files=1, check_every=1))
    messages = []
    for run in range(4):
        _ingest(wh, tmp_path, f"r{run}", [{"eid": 3 * run + k, "dept": 9, "salary": 1000 + run}
                                          for k in range(3)])
        (r,) = wh.maintain("staff", progress=messages.append)
        assert wh.verify("staff").ok, r.summary()
        if r.compacted:
            break
    assert r.compacted, messages
    (c,) = r.compacted
    assert c.table == "staff" and "compacted staff" in r.summary()
    last = delta.history(view, 1)[0]
    assert last["operation"] == "OPTIMIZE" and last["idivm.operation"] == "compact"
    assert delta.data_version(view) == r.version and delta.version(view) == c.version == r.version + 1
    if storage == "delta-spark-dv":
        assert c.before.deleted_rows > 0 and c.after.deleted_rows == 0
    else:
        assert c.after.files < c.before.files
    # the compaction changed no row: no change in the feed, the same watermark, the same rows
    assert delta.read_changes(view, c.version, c.version).num_rows == 0
    assert json.loads(last["idivm.watermark"]) == r.new_watermark
    before = _rows(wh, "staff")
    (again,) = wh.maintain("staff")
    assert again.version is None and _rows(wh, "staff") == before
    _ingest(wh, tmp_path, "after", [{"eid": 399, "dept": 1, "salary": 5}, {"eid": 400, "dept": 2, "salary": 6}])
    (r,) = wh.maintain("staff")
    assert r.strategy == "id" and wh.verify("staff").ok, r.summary()


def test_an_index_table_is_not_rebuilt_after_its_view_is_compacted(make_warehouse, tmp_path, monkeypatch):
    wh = make_warehouse()
    wh.create_table("emp", "eid", pa.table({"eid": list(range(12)), "boss": [None] + [i % 3 for i in range(11)],
                                            "salary": list(range(12))}))
    wh.define("CREATE VIEW teams AS SELECT b.eid, (SELECT s.eid, s.salary FROM emp s WHERE s.boss = b.eid) "
              "AS team FROM emp b", strategy="id")
    monkeypatch.setattr(compaction, "SMALL_FILE_FRACTION", 1000.0)
    monkeypatch.setattr(compaction, "DEFAULT_POLICY", Policy(max_deleted_ratio=1.0, max_small_files=0, check_every=1))
    _ingest(wh, tmp_path, "raise", [{"eid": 4, "boss": 1, "salary": 400}])
    messages = []
    (r,) = wh.maintain("teams", progress=messages.append)
    assert r.compacted and wh.verify("teams").ok, r.summary()
    _ingest(wh, tmp_path, "raise2", [{"eid": 5, "boss": 2, "salary": 500}])
    messages.clear()
    (r,) = wh.maintain("teams", progress=messages.append)
    assert wh.verify("teams").ok, r.summary()
    assert not [m for m in messages if "building index" in m], messages
