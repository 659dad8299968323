"""The delta-spark storage engines (:mod:`idivm.storage.delta`): tables written, read at a version
and MERGEd by Spark, commit metadata in ``userMetadata``, deletion vectors, and the driver-side
paths refusing tables they would read wrongly.  The corpus of views maintained on these engines is
in ``test_differential.py``."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from idivm import Warehouse
from idivm.errors import DataError, UnsupportedError
from idivm.storage import delta
from idivm.storage.delta import MatchedDelete, MatchedUpdate, NotMatchedInsert

DV = delta.Engine("delta-spark-dv")
SOURCE = "id long, name string, op string"


def _names(spark, path, version=None, **kw) -> dict:
    return {r.id: r.name for r in delta.read_spark(spark, path, version, engine=DV, **kw).collect()}


def _upsert_or_delete(spark, path, rows, metadata):
    return delta.merge_spark(path, spark.createDataFrame(rows, SOURCE), "t.id = s.id", [
        MatchedDelete("s.op = 'delete'"), MatchedUpdate({"name": "s.name"}),
        NotMatchedInsert({"id": "s.id", "name": "s.name"}, "s.op = 'upsert'")], commit_metadata=metadata)


def test_a_table_with_deletion_vectors_is_written_read_and_merged_by_spark(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.createDataFrame([(i, f"n{i}") for i in range(10)], "id long, name string")
    watermark = json.dumps({"parts": 3})
    assert delta.write_spark(df, path, commit_metadata={"idivm.watermark": watermark}, engine=DV,
                             deletion_vectors=True) == 0
    assert delta.needs_delta_spark(path)
    assert delta.history(path, 1)[0]["idivm.watermark"] == watermark
    properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert properties["delta.enableChangeDataFeed"] == "true"
    assert properties["delta.enableDeletionVectors"] == "true"

    metrics = _upsert_or_delete(spark, path, [(1, "x", "upsert"), (2, None, "delete"), (20, "new", "upsert")],
                                {"idivm.run": "1"})
    assert metrics["version"] == 1
    assert (metrics["num_target_rows_inserted"], metrics["num_target_rows_updated"],
            metrics["num_target_rows_deleted"]) == (1, 1, 1)
    # merge-on-read: the file holding rows 1 and 2 is not rewritten, its other rows not copied
    assert metrics["num_target_rows_copied"] == 0
    assert metrics["num_target_deletion_vectors_added"] >= 1
    expected = {i: f"n{i}" for i in range(10) if i != 2} | {1: "x", 20: "new"}
    assert _names(spark, path) == expected
    assert _names(spark, path, 0) == {i: f"n{i}" for i in range(10)}
    assert delta.row_count(path) == 10 and delta.row_count(path, 0) == 10
    assert _names(spark, path, holding=("id", [1, 20, 99])) == {1: "x", 20: "new"}
    assert delta.history(path, 1)[0]["idivm.run"] == "1"

    changes = delta.read_changes(path, 1, 1)
    assert sorted(zip(changes.column("_change_type").to_pylist(), changes.column("id").to_pylist())) == [
        ("delete", 2), ("insert", 20), ("update_postimage", 1), ("update_preimage", 1)]


def test_rows_of_a_table_with_deletion_vectors_are_counted_from_its_log_without_spark(spark, tmp_path, monkeypatch):
    """``row_count`` of a table with deletion vectors reads its log only (the files' row
    counts less the rows the vectors delete), so ``view list`` and ``table list`` need no
    Spark session; each version's count equals Spark's."""
    path = tmp_path / "t"
    delta.write_spark(spark.range(0, 300).selectExpr("id", "CAST(id AS STRING) AS name").repartition(3), path,
                      engine=DV, deletion_vectors=True)
    for where in ("id % 7 = 3", "id < 10"):
        spark.sql(f"DELETE FROM delta.`{path}` WHERE {where}")
    expected = [spark.read.format("delta").option("versionAsOf", v).load(str(path)).count() for v in range(3)]
    assert expected == [300, 257, 248]  # 43 ids are 3 modulo 7; 9 of those below 10 are not
    from idivm.storage.delta import delta_spark

    monkeypatch.setattr(delta_spark, "row_count", lambda *a: pytest.fail("counted by Spark"))
    delta._COUNTED.clear()
    assert [delta.row_count(path, v) for v in range(3)] == expected and delta.row_count(path) == 248


def test_a_merge_that_changes_nothing_still_commits_its_metadata(spark, tmp_path):
    path = tmp_path / "t"
    delta.write_spark(spark.createDataFrame([(1, "a")], "id long, name string"), path, engine=DV,
                      deletion_vectors=True)
    metrics = _upsert_or_delete(spark, path, [(7, None, "delete")], {"idivm.watermark": '{"t": 5}'})
    assert metrics["version"] == 1
    assert delta.history(path, 1)[0]["idivm.watermark"] == '{"t": 5}'
    assert _names(spark, path) == {1: "a"}


def test_a_table_with_deletion_vectors_is_read_and_written_through_delta_spark_only(spark, tmp_path):
    path = tmp_path / "t"
    delta.write_spark(spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string"), path, engine=DV,
                      deletion_vectors=True)
    _upsert_or_delete(spark, path, [(1, None, "delete")], None)
    rows = pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]})
    with pytest.raises(DataError, match="deletion vectors"):
        delta.rewrite_clustered(path, rows, rows.select(["id"]).slice(0, 0), ["id"], file_bytes=1024)
    # whatever the engine asked for, a table with deletion vectors is read through delta-spark:
    # its Parquet files still hold the deleted row
    assert {r.id for r in delta.read_spark(spark, path).collect()} == {2}
    assert [b.to_pylist() for b in delta.scan_ordered(path, None, "id")] == [[{"id": 2, "name": "b"}]]
    assert delta.read_arrow(path).to_pylist() == [{"id": 2, "name": "b"}]
    assert delta.read_arrow(path, 0, columns=["name"]).column("name").to_pylist() in (["a", "b"], ["b", "a"])
    # and Arrow data from the driver is written by delta-spark, the table keeping its features
    version = delta.write_arrow(path, rows, commit_metadata={"idivm.x": "appended"})
    assert version == delta.version(path) == 2 and delta.history(path, 1)[0]["idivm.x"] == "appended"
    assert delta.needs_delta_spark(path)
    assert sorted(delta.read_arrow(path).column("id").to_pylist()) == [2, 3]
    delta.write_arrow(path, rows, mode="overwrite")
    assert delta.read_arrow(path).to_pylist() == [{"id": 3, "name": "c"}] and delta.needs_delta_spark(path)


def test_the_delta_spark_engine_without_deletion_vectors_writes_plain_tables(spark, tmp_path):
    path = tmp_path / "t"
    engine = delta.Engine("delta-spark")
    delta.write_spark(spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string"), path, engine=engine,
                      deletion_vectors=True, commit_metadata={"idivm.x": "1"})
    assert not delta.needs_delta_spark(path)
    _upsert_or_delete(spark, path, [(1, None, "delete"), (3, "c", "upsert")], None)
    # delta-rs reads what delta-spark wrote, and delta-spark what delta-rs wrote
    assert sorted(delta.read_arrow(path).column("id").to_pylist()) == [2, 3]
    delta.merge_arrow(path, pa.table({"id": pa.array([4], pa.int64()), "name": ["d"]}), "t.id = s.id",
                      [NotMatchedInsert()])
    assert sorted(r.id for r in delta.read_spark(spark, path, engine=engine).collect()) == [2, 3, 4]


def test_unknown_engines_are_refused(monkeypatch):
    with pytest.raises(ValueError, match="unknown storage engine 'delta-xyz'"):
        delta.engine("delta-xyz")
    monkeypatch.setenv(delta.ENGINE_ENV, "delta-spark-dv")
    assert delta.engine() == DV


def test_the_default_engine_is_delta_rs_on_a_local_master_and_deletion_vectors_on_a_cluster(monkeypatch, tmp_path):
    monkeypatch.delenv(delta.ENGINE_ENV, raising=False)
    assert delta.engine() == delta.DELTA_RS
    for master in ("local", "local[2]", "local[*]"):
        assert delta.engine(None, master) == delta.DELTA_RS
    for master in ("spark://10.0.0.5:7077", "yarn", "k8s://https://example:6443"):
        assert delta.engine(None, master) == DV
    assert delta.engine("delta-rs", "spark://10.0.0.5:7077") == delta.DELTA_RS
    monkeypatch.setenv(delta.ENGINE_ENV, "delta-spark")
    assert delta.engine(None, "spark://10.0.0.5:7077").name == "delta-spark"
    # a warehouse asks for no session to know its engine
    monkeypatch.delenv(delta.ENGINE_ENV)
    monkeypatch.delenv("IDIVM_SPARK_MASTER", raising=False)
    assert Warehouse(tmp_path / "wh", spark_master="spark://10.0.0.5:7077").storage == DV
    assert Warehouse(tmp_path / "wh").storage == delta.DELTA_RS


def _dv_table(spark, path) -> dict:
    """A table with deletion vectors after a MERGE that updated, deleted and inserted rows; the
    rows it holds (id -> name)."""
    delta.write_spark(spark.createDataFrame([(i, f"n{i}") for i in range(6)], "id long, name string"), path,
                      engine=DV, deletion_vectors=True)
    _upsert_or_delete(spark, path, [(1, "x", "upsert"), (2, None, "delete"), (9, "new", "upsert")], None)
    assert delta.history(path, 1)[0]["operationMetrics"]["numTargetDeletionVectorsAdded"] != "0"
    return {0: "n0", 1: "x", 3: "n3", 4: "n4", 5: "n5", 9: "new"}


@pytest.mark.parametrize("reader", ["delta-rs", "duckdb", "polars"])
def test_other_readers_of_a_table_with_deletion_vectors(spark, tmp_path, reader):
    """What the README says of the readers of views with deletion vectors: delta-rs reads them
    through its query engine (not ``to_pyarrow_table``); DuckDB through its ``delta`` extension
    and Polars through ``read_delta``, where they are installed."""
    path = tmp_path / "t"
    expected = _dv_table(spark, path)
    if reader == "delta-rs":
        from deltalake import DeltaTable, QueryBuilder

        table = QueryBuilder().register("t", DeltaTable(str(path))).execute("SELECT id, name FROM t").read_all()
    elif reader == "duckdb":
        duckdb = pytest.importorskip("duckdb")
        con = duckdb.connect()
        try:
            con.execute("LOAD delta")
        except duckdb.Error:
            try:
                con.execute("INSTALL delta; LOAD delta")
            except duckdb.Error as e:
                pytest.skip(f"DuckDB's delta extension is not available here: {str(e).splitlines()[0]}")
        table = con.execute(f"SELECT id, name FROM delta_scan('{path}')").arrow()
    else:
        polars = pytest.importorskip("polars")
        table = polars.read_delta(str(path)).to_arrow()
    assert dict(zip(table.column("id").to_pylist(), table.column("name").to_pylist())) == expected


def test_column_names_delta_refuses_unmapped_get_a_table_mapped_by_name(spark, tmp_path):
    """Spaces, ``;``, ``=`` and the like in column names (at any depth): delta-spark creates the
    table with column mapping by name, and turns it on in an existing table an evolving write
    brings such a name to; the rows, the commit metadata and the change data feed stay; a
    backquote, which delta-spark's MERGE cannot write, is refused in one line."""
    path = tmp_path / "t"
    df = spark.createDataFrame([(1, "a", [(2, "x")])], "`line id` long, `w;t` string, `tags ☃` array<struct<`tag name`: long, n: string>>")
    version = delta.write_spark(df, path, commit_metadata={"idivm.watermark": "7"}, engine=DV, deletion_vectors=True)
    assert delta.features(path) and delta.needs_delta_spark(path)
    config = delta.open_table(path).metadata().configuration
    assert config["delta.columnMapping.mode"] == "name" and config["delta.enableChangeDataFeed"] == "true"
    assert delta.history(path, 1)[0]["idivm.watermark"] == "7"
    rows = delta.read_spark(spark, path, version, engine=DV).collect()
    assert [(r["line id"], r["w;t"], r["tags ☃"][0]["tag name"]) for r in rows] == [(1, "a", 2)]
    delta.merge_spark(path, spark.createDataFrame([(1, "b"), (5, "e")], "`line id` long, `w;t` string"),
                      "t.`line id` = s.`line id`",
                      [MatchedUpdate({"`w;t`": "s.`w;t`"}), NotMatchedInsert({"`line id`": "s.`line id`", "`w;t`": "s.`w;t`"})])
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version + 1) \
        .load(str(path)).collect()
    assert sorted((r["line id"], r["w;t"], r["_change_type"]) for r in feed) == [
        (1, "a", "update_preimage"), (1, "b", "update_postimage"), (5, "e", "insert")]
    assert sorted(delta.read_arrow(path).select(["line id", "w;t"]).to_pylist(), key=str) == [
        {"line id": 1, "w;t": "b"}, {"line id": 5, "w;t": "e"}]

    plain = tmp_path / "plain"
    delta.write_spark(spark.createDataFrame([(1,)], "id long"), plain, engine=DV)
    assert delta.open_table(plain).metadata().configuration.get("delta.columnMapping.mode", "none") == "none"
    delta.write_spark(spark.createDataFrame([(1, "z")], "id long, `new col` string"), plain, mode="overwrite", engine=DV)
    assert delta.open_table(plain).metadata().configuration["delta.columnMapping.mode"] == "name"
    assert delta.read_arrow(plain).to_pylist() == [{"id": 1, "new col": "z"}]

    with pytest.raises(UnsupportedError, match="column 'prod`uct' holds a backquote"):
        delta.write_spark(spark.createDataFrame([(1,)], "`prod``uct` long"), tmp_path / "q", engine=DV)
    assert not (tmp_path / "q").exists()
