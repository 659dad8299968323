"""The ``liquid`` layout of the ``delta-spark-dv`` engine (:mod:`idivm.storage.layout`,
``$IDIVM_DV_LAYOUT``): a view maintained by ID is a Delta table with liquid clustering by its ID
columns, maintained by MERGE with deletion vectors and compacted by a plain ``OPTIMIZE`` that
clusters its files.  The clustering is read from the table's own log, not through idivm."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from idivm.errors import SetupError
from idivm.storage import compaction, delta, layout
from idivm.storage.compaction import Policy


def _log_actions(path) -> list[tuple[int, dict]]:
    """(version, action) of every action in the JSON commits of the table at ``path``."""
    actions = []
    for commit in sorted((path / "_delta_log").glob("*.json")):
        actions += [(int(commit.stem), json.loads(line)) for line in commit.read_text().splitlines() if line]
    return actions


def _clustering_in_log(path) -> list[str]:
    """The clustering columns of the last ``delta.clustering`` domain in the table's log."""
    domains = [a["domainMetadata"] for _, a in _log_actions(path)
               if a.get("domainMetadata", {}).get("domain") == "delta.clustering"]
    return [".".join(c) for c in json.loads(domains[-1]["configuration"])["clusteringColumns"]] if domains else []


def _ingest(wh, tmp_path, name, rows):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wh.ingest("emp", path, format="rows")


def _staff(make_warehouse, monkeypatch):
    """A warehouse on delta-spark-dv in the liquid layout with view ``staff`` maintained by ID."""
    monkeypatch.setenv(layout.LAYOUT_ENV, "liquid")
    wh = make_warehouse(storage="delta-spark-dv")
    wh.create_table("emp", "eid", pa.table({"eid": list(range(40)), "dept": [i % 4 for i in range(40)],
                                            "salary": [10 * i for i in range(40)]}))
    wh.define("CREATE VIEW staff AS SELECT e.eid, e.dept, e.salary FROM emp e WHERE e.salary >= 0", strategy="id")
    entry = wh.catalog.view("staff")
    return wh, wh.catalog.path_of(entry), [i["column"] for i in entry.extra["ids"]]


def test_a_view_in_the_liquid_layout_is_clustered_by_its_ids_and_maintained(make_warehouse, tmp_path, monkeypatch):
    wh, view, ids = _staff(make_warehouse, monkeypatch)
    assert ids and _clustering_in_log(view) == ids
    assert {"clustering", "deletionVectors", "changeDataFeed"} <= set(delta.features(view)["writer_features"])

    # a batch that updates, inserts and filters out rows, MERGEd with deletion vectors
    _ingest(wh, tmp_path, "b1", [{"eid": 3, "dept": 9, "salary": 5}, {"eid": 50, "dept": 1, "salary": 7},
                                 {"eid": 7, "dept": 7, "salary": -1}])
    (r,) = wh.maintain("staff")
    assert r.strategy == "id" and wh.verify("staff").ok, r.summary()
    assert _clustering_in_log(view) == ids
    assert json.loads(delta.history(view, 1)[0]["idivm.watermark"]) == r.new_watermark
    changes = delta.read_changes(view, r.version, r.version)
    assert sorted(changes.column("_change_type").to_pylist()) == [
        "delete", "insert", "update_postimage", "update_preimage"]

    # another reader of the clustered table with deletion vectors: delta-rs's query engine
    from deltalake import DeltaTable, QueryBuilder

    read = QueryBuilder().register("v", DeltaTable(str(view))).execute("SELECT eid, salary FROM v").read_all()
    expected = {r["eid"]: r["salary"] for r in wh.rows("staff")}
    assert dict(zip(read.column("eid").to_pylist(), read.column("salary").to_pylist())) == expected
    assert expected[3] == 5 and expected[50] == 7 and 7 not in expected and len(expected) == 40


def test_a_merge_into_a_clustered_table_that_changes_nothing_still_commits_its_metadata(spark, tmp_path):
    """delta-rs cannot commit to a clustered table: the empty commit is delta-spark's."""
    path = tmp_path / "t"
    rows = spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string")
    delta.write_spark(rows, path, engine=delta.Engine("delta-spark-dv"), deletion_vectors=True,
                      cluster_by=["id"])
    assert _clustering_in_log(path) == ["id"]
    source = spark.createDataFrame([(7,)], "id long")
    metrics = delta.merge_spark(path, source, "t.id = s.id", [delta.MatchedDelete()],
                                commit_metadata={"idivm.watermark": '{"t": 5}'})
    assert metrics["version"] == 1 == delta.version(path)
    assert delta.history(path, 1)[0]["idivm.watermark"] == '{"t": 5}'
    assert sorted(r.id for r in delta.read_spark(spark, path, engine=delta.Engine("delta-spark-dv")).collect()) == [1, 2]


@pytest.mark.slow
def test_a_view_in_the_liquid_layout_is_compacted_by_clustering(make_warehouse, tmp_path, monkeypatch):
    monkeypatch.setattr(compaction, "DEFAULT_POLICY", Policy(max_deleted_ratio=0.0, max_small_files=10**6,
                                                             check_every=1))
    wh, view, ids = _staff(make_warehouse, monkeypatch)
    _ingest(wh, tmp_path, "b1", [{"eid": 3, "dept": 9, "salary": 5}, {"eid": 50, "dept": 1, "salary": 7}])
    (r,) = wh.maintain("staff")
    assert r.strategy == "id" and wh.verify("staff").ok, r.summary()
    (c,) = r.compacted
    assert c.before.deleted_rows > 0 and c.after.deleted_rows == 0
    optimize = [a for v, a in _log_actions(view) if v == c.version]
    assert [a["commitInfo"]["operation"] for a in optimize if "commitInfo" in a] == ["OPTIMIZE"]
    assert {a["add"].get("clusteringProvider") for a in optimize if "add" in a} == {"liquid"}
    assert _clustering_in_log(view) == ids
    assert delta.read_changes(view, c.version, c.version).num_rows == 0


def test_the_layout_is_chosen_by_the_environment(monkeypatch, spark):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("name", StringType()), StructField("id", LongType()),
                         StructField("flag", StructType([StructField("x", LongType())]))])
    dv, plain = delta.Engine("delta-spark-dv"), delta.Engine("delta-spark")
    monkeypatch.setenv(layout.LAYOUT_ENV, "zorder")
    assert layout.clustering_columns(schema, ["id"], dv) == ()
    monkeypatch.delenv(layout.LAYOUT_ENV, raising=False)
    assert layout.dv_layout() == "liquid"
    assert layout.clustering_columns(schema, ["id", "name"], dv) == ("id", "name")
    assert layout.clustering_columns(schema, ["id"], plain) == ()
    assert layout.clustering_columns(schema, ["flag", "id"], dv) == ()  # a struct has no statistics
    monkeypatch.setenv(layout.LAYOUT_ENV, "hilbert")
    with pytest.raises(SetupError, match="IDIVM_DV_LAYOUT"):
        layout.dv_layout()
