"""Delta Lake access through delta-rs, Spark reads/writes of Delta tables, schema conversion."""

from __future__ import annotations

import datetime as dt
import os
import shutil

import pyarrow as pa
import pytest

from idivm.errors import CatalogError, DataError, SetupError
from idivm.storage import delta
from idivm.storage import schema as schemas
from idivm.storage import spark as spark_setup

NESTED = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("name", pa.string()),
    pa.field("addr", pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int64())])),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("reviews", pa.list_(pa.struct([pa.field("r", pa.int64()), pa.field("stars", pa.float64())]))),
])

ROWS = [
    {"id": 1, "name": "ann", "addr": {"city": "SF", "zip": 94110}, "tags": ["a", "b"],
     "reviews": [{"r": 10, "stars": 4.5}]},
    {"id": 2, "name": "bob", "addr": None, "tags": [], "reviews": []},
    {"id": 3, "name": None, "addr": {"city": "LA", "zip": None}, "tags": None, "reviews": None},
]


def by_id(rows):
    return sorted(rows, key=lambda r: r["id"])


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "t"
    delta.create_table(path, pa.Table.from_pylist(ROWS, schema=NESTED), commit_metadata={"idivm.op": "create"})
    return path


# --- delta-rs -----------------------------------------------------------------------------------

def test_create_enables_change_feed_and_keeps_nested_types(table):
    assert delta.version(table) == 0
    assert delta.open_table(table).metadata().configuration["delta.enableChangeDataFeed"] == "true"
    got = delta.schema(table)
    assert got.field("addr").type == NESTED.field("addr").type
    assert got.field("reviews").type.value_type == NESTED.field("reviews").type.value_type
    assert by_id(delta.read_arrow(table).to_pylist()) == ROWS
    assert delta.row_count(table) == 3


def test_create_from_reader_with_schema(tmp_path):
    data = pa.Table.from_pylist(ROWS, schema=NESTED)
    reader = pa.RecordBatchReader.from_batches(NESTED, data.to_batches(max_chunksize=1))
    delta.create_table(tmp_path / "r", reader, schema=NESTED)
    assert by_id(delta.read_arrow(tmp_path / "r").to_pylist()) == ROWS


def test_create_refuses_existing_table(table):
    with pytest.raises(CatalogError, match="already exists"):
        delta.create_table(table, pa.table({"id": [1]}))
    assert delta.version(table) == 0


def test_merge_returns_metrics_and_versions_are_readable(table):
    source = pa.table({"id": [1, 2, 4], "name": ["ANN", None, "dan"], "op": ["update", "delete", "insert"]})
    metrics = delta.merge_arrow(
        table, source, "t.id = s.id",
        [delta.MatchedDelete("s.op = 'delete'"), delta.MatchedUpdate({"name": "s.name"}),
         delta.NotMatchedInsert({"id": "s.id", "name": "s.name"}, predicate="s.op = 'insert'")],
        commit_metadata={"idivm.run": "r1", "idivm.watermark": 7})
    assert metrics["num_target_rows_updated"] == 1
    assert metrics["num_target_rows_deleted"] == 1
    assert metrics["num_target_rows_inserted"] == 1
    assert metrics["version"] == 1 == delta.version(table)
    now = {r["id"]: r for r in delta.read_arrow(table).to_pylist()}
    assert sorted(now) == [1, 3, 4]
    assert now[1]["name"] == "ANN" and now[1]["addr"] == ROWS[0]["addr"]
    assert now[4] == {"id": 4, "name": "dan", "addr": None, "tags": None, "reviews": None}
    assert by_id(delta.read_arrow(table, version=0).to_pylist()) == ROWS
    assert delta.row_count(table) == 3 and delta.row_count(table, version=0) == 3


def test_merge_update_all_and_insert_all(table):
    source = pa.Table.from_pylist([{**ROWS[1], "name": "BOB"}, {**ROWS[0], "id": 9}], schema=NESTED)
    delta.merge_arrow(table, source, "t.id = s.id", [delta.MatchedUpdate(), delta.NotMatchedInsert()])
    now = {r["id"]: r for r in delta.read_arrow(table).to_pylist()}
    assert now[2]["name"] == "BOB" and now[9]["reviews"] == ROWS[0]["reviews"]


def test_merge_without_changes_still_commits_metadata(table):
    metrics = delta.merge_arrow(table, pa.table({"id": [99]}), "t.id = s.id", [delta.MatchedDelete()],
                                commit_metadata={"idivm.watermark": 3})
    assert metrics["version"] == 1 == delta.version(table)
    assert delta.history(table, 1)[0]["idivm.watermark"] == 3
    unchanged = delta.merge_arrow(table, pa.table({"id": [99]}), "t.id = s.id", [delta.MatchedDelete()])
    assert unchanged["version"] == 1


def test_merge_needs_a_clause_and_rejects_reserved_metadata(table):
    with pytest.raises(ValueError):
        delta.merge_arrow(table, pa.table({"id": [1]}), "t.id = s.id", [])
    with pytest.raises(ValueError, match="operation"):
        delta.merge_arrow(table, pa.table({"id": [1]}), "t.id = s.id", [delta.MatchedDelete()],
                          commit_metadata={"operation": "x"})


def test_history_carries_custom_metadata(table):
    delta.merge_arrow(table, pa.table({"id": [1]}), "t.id = s.id", [delta.MatchedDelete()],
                      commit_metadata={"idivm.run": "r2", "idivm.info": {"tables": ["t"]}})
    commits = delta.history(table)
    assert [c["version"] for c in commits] == [1, 0]
    assert commits[0]["idivm.run"] == "r2" and commits[0]["idivm.info"] == {"tables": ["t"]}
    assert commits[0]["operation"] == "MERGE"
    assert commits[1]["idivm.op"] == "create"


def test_change_data_feed_rows(table):
    source = pa.table({"id": [1, 2, 5], "name": ["ANN", None, "eve"], "op": ["u", "d", "i"]})
    delta.merge_arrow(table, source, "t.id = s.id",
                      [delta.MatchedDelete("s.op = 'd'"), delta.MatchedUpdate({"name": "s.name"}),
                       delta.NotMatchedInsert({"id": "s.id", "name": "s.name"})])
    changes = delta.read_changes(table, 1)
    assert changes.schema.names[-3:] == ["_change_type", "_commit_version", "_commit_timestamp"]
    got = sorted((r["_change_type"], r["id"], r["name"], r["_commit_version"]) for r in changes.to_pylist())
    assert got == [("delete", 2, "bob", 1), ("insert", 5, "eve", 1),
                   ("update_postimage", 1, "ANN", 1), ("update_preimage", 1, "ann", 1)]
    assert delta.read_changes(table, 0, 0).column("_change_type").to_pylist() == ["insert"] * 3
    empty = delta.read_changes(table, 2)
    assert empty.num_rows == 0 and empty.schema == changes.schema


def test_missing_table_and_version(tmp_path, table):
    with pytest.raises(CatalogError, match="no Delta table"):
        delta.version(tmp_path / "nope")
    with pytest.raises(CatalogError, match="no version 5"):
        delta.read_arrow(table, version=5)


def test_write_arrow_append_and_overwrite(table):
    v = delta.write_arrow(table, pa.Table.from_pylist([{**ROWS[0], "id": 7}], schema=NESTED))
    assert v == 1 and delta.row_count(table) == 4
    v = delta.write_arrow(table, pa.table({"x": ["only"]}), mode="overwrite", commit_metadata={"idivm.k": 1})
    assert v == 2 and delta.read_arrow(table).to_pylist() == [{"x": "only"}]


def test_a_writer_kept_after_a_commit_is_not_reused_once_another_writer_committed(table, monkeypatch):
    """Commits through delta-rs start from the writer of this process's last commit to the table
    (no log replay), but only while that commit is the table's version to write on: after
    another writer's commit the table is opened afresh (an unpinned append lands on it), and a
    run pinned at the older version is refused rather than overwriting it."""
    import deltalake

    from idivm.errors import ConcurrentWriteError
    from idivm.storage.delta import table as tables

    row = pa.Table.from_pylist([{**ROWS[0], "id": 7}], schema=NESTED)
    v = delta.write_arrow(table, row)
    opened = []
    monkeypatch.setattr(deltalake, "DeltaTable", _counting(deltalake.DeltaTable, opened))
    assert delta.write_arrow(table, row) == v + 1 and opened == []  # the kept writer
    deltalake.write_deltalake(str(table), pa.Table.from_pylist([{**ROWS[1], "id": 8}], schema=NESTED),
                              mode="append")  # another writer: version v + 2
    assert tables._writer(table, None, take=False) is None  # the kept one is at v + 1, now not the latest
    delta.write_arrow(table, row)
    kept = tables._WRITERS[os.path.abspath(table)][1]
    assert kept.version() == v + 3 and delta.row_count(table) == len(ROWS) + 4
    deltalake.write_deltalake(str(table), row, mode="append")  # v + 4
    with pytest.raises(ConcurrentWriteError), delta.pinned(table, v + 3):
        delta.write_arrow(table, row)
    assert delta.row_count(table) == len(ROWS) + 5


def _counting(cls, opened: list):
    class Counting(cls):
        def __init__(self, *args, **kwargs):
            opened.append(args)
            super().__init__(*args, **kwargs)
    return Counting


# --- schemas ------------------------------------------------------------------------------------

def test_delta_schema_normalizes_what_delta_cannot_store():
    s = pa.schema([
        pa.field("n", pa.null()), pa.field("u", pa.uint32()), pa.field("ts", pa.timestamp("ns", tz="Europe/Paris")),
        pa.field("ntz", pa.timestamp("ms")), pa.field("v", pa.string_view()),
        pa.field("l", pa.large_list(pa.field("x", pa.null()))),
        pa.field("d", pa.dictionary(pa.int8(), pa.string())),
        pa.field("req", pa.int64(), nullable=False),
    ])
    out = schemas.delta_schema(s)
    assert out.field("n").type == pa.string()
    assert out.field("u").type == pa.int64()
    assert out.field("ts").type == pa.timestamp("us", tz="UTC")
    assert out.field("ntz").type == pa.timestamp("us")
    assert out.field("v").type == pa.string()
    assert out.field("l").type == pa.list_(pa.field("element", pa.string()))
    assert out.field("d").type == pa.string()
    assert all(f.nullable for f in out)


def test_delta_schema_rejects_unstorable_types():
    with pytest.raises(DataError, match="'t'"):
        schemas.delta_schema(pa.schema([pa.field("t", pa.time64("us"))]))


def test_spark_schema_round_trip():
    from pyspark.sql.types import ArrayType, LongType, StringType, StructType, TimestampNTZType, TimestampType

    s = schemas.spark_schema(pa.schema([*NESTED, pa.field("ts", pa.timestamp("us", tz="UTC")),
                                        pa.field("ntz", pa.timestamp("us")), pa.field("sv", pa.string_view())]))
    assert isinstance(s["id"].dataType, LongType)
    assert isinstance(s["addr"].dataType, StructType)
    assert isinstance(s["reviews"].dataType, ArrayType)
    assert isinstance(s["reviews"].dataType.elementType, StructType)
    assert isinstance(s["ts"].dataType, TimestampType)
    assert isinstance(s["ntz"].dataType, TimestampNTZType)
    assert isinstance(s["sv"].dataType, StringType)
    back = schemas.arrow_schema(schemas.spark_schema(NESTED), nullable=True)
    assert schemas.delta_schema(back) == schemas.delta_schema(NESTED)


# --- Spark --------------------------------------------------------------------------------------

def test_check_java_reports_missing_java_in_one_line(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SetupError) as e:
        spark_setup.check_java()
    assert "\n" not in e.value.one_line() and "install Java 17 or 21" in e.value.one_line()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(SetupError, match="JAVA_HOME"):
        spark_setup.check_java()


def test_master_resolution(monkeypatch):
    monkeypatch.delenv("IDIVM_SPARK_MASTER", raising=False)
    assert spark_setup.resolve_master() == "local[*]"
    monkeypatch.setenv("IDIVM_SPARK_MASTER", "spark://h:7077")
    assert spark_setup.resolve_master() == "spark://h:7077"
    assert spark_setup.resolve_master("local[1]") == "local[1]"


def test_session_settings(spark):
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "TIMESTAMP_MICROS"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert spark.sparkContext.getConf().get("spark.ui.enabled") == "false"


def test_caches_are_their_owners_own(spark):
    """Two owners caching equal plans (two views' runs in two threads) keep their own entries:
    one releasing its caches leaves the other's cached and readable.  Equal plans of one owner
    share an entry.  A plain ``cache()`` of an equal plan shares the first one's entry, which
    the first owner's unpersist removes."""
    def frame():
        return spark.range(100).selectExpr("id", "id % 7 AS m").filter("m < 3")

    def reads_cache(df) -> bool:  # (a new frame: a frame's plan is made once, on first use)
        return "InMemoryRelation" in df.select("*")._jdf.queryExecution().optimizedPlan().toString()

    first, second = spark_setup.Caches(), spark_setup.Caches()
    a, b, b_again = first.add(frame()), second.add(frame()), second.add(frame())
    assert a.collect() == b.collect() and len(a.collect()) == 44
    assert b.columns == ["id", "m"] and reads_cache(a) and reads_cache(b)
    first.release()
    assert not reads_cache(a) and reads_cache(b) and reads_cache(b_again)
    assert b.count() == 44 and b_again.count() == 44
    second.release()
    assert not reads_cache(b) and not reads_cache(b_again)

    shared_a, shared_b = frame().cache(), frame().cache()  # what the caches are kept from
    shared_a.count()
    shared_a.unpersist(blocking=True)
    assert not shared_b.storageLevel.useMemory


def test_read_spark_versions(spark, table):
    delta.merge_arrow(table, pa.table({"id": [2]}), "t.id = s.id", [delta.MatchedDelete()])
    v0 = delta.read_spark(spark, table, version=0)
    latest = delta.read_spark(spark, table)
    assert sorted(r["id"] for r in v0.collect()) == [1, 2, 3]
    assert sorted(r["id"] for r in latest.collect()) == [1, 3]
    assert by_id(v0.toArrow().to_pylist()) == ROWS


def test_read_spark_of_empty_table_has_the_schema(spark, tmp_path):
    delta.create_table(tmp_path / "e", NESTED.empty_table())
    df = delta.read_spark(spark, tmp_path / "e")
    assert df.count() == 0
    assert df.schema == schemas.spark_schema(delta.schema(tmp_path / "e"))


def test_write_spark_nested_round_trip(spark, tmp_path):
    source = spark.createDataFrame(pa.Table.from_pylist(ROWS, schema=NESTED)) \
        .selectExpr("*", "timestamp'2026-01-02 03:04:05.123456' AS ts")
    path = tmp_path / "w"
    assert delta.write_spark(source, path, commit_metadata={"idivm.op": "materialize"}) == 0
    got = by_id(delta.read_arrow(path).to_pylist())
    assert [{k: v for k, v in r.items() if k != "ts"} for r in got] == ROWS
    assert got[0]["ts"] == dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)
    assert delta.schema(path).field("reviews").type.value_type == NESTED.field("reviews").type.value_type
    assert delta.history(path)[0]["idivm.op"] == "materialize"
    assert delta.open_table(path).metadata().configuration["delta.enableChangeDataFeed"] == "true"
    back = delta.read_spark(spark, path)
    assert back.schema == schemas.spark_schema(delta.schema(path))
    assert not [p for p in os.listdir(tmp_path) if p != "w"], "staging directory left behind"


def test_write_spark_empty_dataframe(spark, tmp_path):
    source = spark.createDataFrame(NESTED.empty_table()).selectExpr("*", "CAST(NULL AS STRING) AS v")
    path = tmp_path / "e"
    delta.write_spark(source.limit(0), path)
    assert delta.row_count(path) == 0
    assert delta.schema(path).names == [*NESTED.names, "v"]
    assert delta.read_spark(spark, path).count() == 0


def test_write_spark_overwrite_and_error_modes(spark, tmp_path):
    path = tmp_path / "o"
    delta.write_spark(spark.range(5), path)
    with pytest.raises(CatalogError, match="already exists"):
        delta.write_spark(spark.range(1), path)
    assert delta.write_spark(spark.range(2).selectExpr("id", "'x' AS s"), path, mode="overwrite") == 1
    assert sorted(r["id"] for r in delta.read_spark(spark, path).collect()) == [0, 1]
    assert sorted(r["id"] for r in delta.read_spark(spark, path, version=0).collect()) == [0, 1, 2, 3, 4]
    assert delta.read_changes(path, 1).num_rows >= 2


def test_write_spark_failure_removes_staging(spark, tmp_path):
    bad = spark.range(3).selectExpr("raise_error('boom') AS x")
    with pytest.raises(Exception):
        delta.write_spark(bad, tmp_path / "f")
    assert os.listdir(tmp_path) == []


def _clustered_table(path, rows, file_bytes, schema=None):
    """A table of ``rows`` (of ``schema``, default :data:`CLUSTER_SCHEMA`) written ordered by
    (k, j) in files of about ``file_bytes``."""
    data = pa.Table.from_pylist(rows, schema=schema or CLUSTER_SCHEMA).sort_by([("k", "ascending", "at_start"),
                                                                      ("j", "ascending", "at_start")])
    delta.write_clustered(path, data.to_reader(max_chunksize=50), "error", file_bytes)


CLUSTER_SCHEMA = pa.schema([("k", pa.int64()), ("j", pa.string()), ("v", pa.float64()),
                            ("bag", pa.list_(pa.struct([("x", pa.int64())])))])


def _as_bag(table):
    return sorted((r["k"] if r["k"] is not None else -1, r["j"] or "", r["v"], repr(r["bag"]))
                  for r in table.to_pylist())


def test_rewrite_clustered_equals_an_upsert_by_key_and_rewrites_only_the_files_holding_the_keys(tmp_path):
    import random

    rng = random.Random(7)
    key = lambda: (rng.choice([None] + list(range(400))), rng.choice([None, "a", "b"]))  # noqa: E731
    state = {}
    for _ in range(600):
        k, j = key()
        state[(k, j)] = {"k": k, "j": j, "v": rng.random(), "bag": [{"x": rng.randrange(9)}]}
    path = tmp_path / "t"
    _clustered_table(path, list(state.values()), 512)
    files = len(delta.open_table(path).file_uris())
    assert files > 20
    for run in range(6):
        before = set(delta.open_table(path).file_uris())
        ups, dels = {}, {}
        for _ in range(rng.choice([0, 1, 5, 30])):
            k, j = key() if rng.random() < 0.5 else rng.choice(list(state) or [key()])
            if rng.random() < 0.3:
                dels[(k, j)] = {"k": k, "j": j, "v": None, "bag": None}
            else:
                ups[(k, j)] = {"k": k, "j": j, "v": float(run), "bag": [{"x": run}, {"x": -run}]}
        for kj in ups:
            dels.pop(kj, None)
        expected = {kj: r for kj, r in state.items() if kj not in dels}
        expected.update(ups)
        rewrite = delta.rewrite_clustered(path, pa.Table.from_pylist(list(ups.values()), schema=CLUSTER_SCHEMA),
                                          pa.Table.from_pylist(list(dels.values()), schema=CLUSTER_SCHEMA),
                                          ["k", "j"], commit_metadata={"idivm.run": str(run)}, file_bytes=512)
        metrics = rewrite.metrics
        after = delta.read_arrow(path)
        # the rows removed are the named rows as they were
        was = [state[kj] for kj in list(ups) + list(dels) if kj in state]
        assert _as_bag(rewrite.removed) == _as_bag(pa.Table.from_pylist(was, schema=CLUSTER_SCHEMA))
        assert _as_bag(after) == _as_bag(pa.Table.from_pylist(list(expected.values()), schema=CLUSTER_SCHEMA))
        assert metrics["num_target_rows_updated"] == len([kj for kj in ups if kj in state])
        assert metrics["num_target_rows_inserted"] == len([kj for kj in ups if kj not in state])
        assert metrics["num_target_rows_deleted"] == len([kj for kj in dels if kj in state])
        assert delta.history(path, 1)[0]["idivm.run"] == str(run)
        # the files kept are those whose key range holds no named key
        now = set(delta.open_table(path).file_uris())
        named = {k for k, _ in list(ups) + list(dels)}
        for uri in before & now:
            ks = set(pa.parquet.read_table(uri).column("k").to_pylist())
            assert not ks & named
        assert len(before - now) == metrics["num_target_files_removed"]
        assert len(before - now) < max(3 * len(named), 1) and (named or before == now)
        state = expected


def test_rewrite_clustered_patches_the_rows_updates_and_increments_name_by_partial_keys(tmp_path):
    """Patches (updates and increments naming rows by the second key column, by both, or by
    the first) beside upserts and deletes, against the same changes applied to a dict: a
    patch changes only the stored rows it names that are not upserted or deleted, in order;
    a file none of whose rows changes is kept."""
    import random

    rng = random.Random(11)
    state = {}
    for k in range(300):
        for j in rng.sample([None, "a", "b", "c"], rng.randint(1, 3)):
            state[(k, j)] = {"k": k, "j": j, "v": float(rng.randrange(100)), "bag": [{"x": k}]}
    path = tmp_path / "t"
    _clustered_table(path, list(state.values()), 1024)
    for run in range(8):
        before = set(delta.open_table(path).file_uris())
        ups = {}
        for _ in range(rng.choice([0, 2, 10])):
            kj = rng.choice(list(state))
            ups[kj] = {"k": kj[0], "j": kj[1], "v": -1.0, "bag": []}
        dels = {kj: {"k": kj[0], "j": kj[1], "v": None, "bag": None}
                for kj in rng.sample(list(state), rng.choice([0, 3])) if kj not in ups}
        patches, expected = [], {kj: dict(r) for kj, r in state.items() if kj not in dels}
        patched = set()
        expected.update(ups)
        for _ in range(rng.choice([1, 2])):
            on = rng.choice([("j",), ("k", "j"), ("k",)])
            kind = rng.choice(["update", "increment"])
            named = {tuple(kj[("k", "j").index(c)] for c in on) for kj in rng.sample(list(state), 6)}
            rows = [{**dict(zip(on, n)), "d": float(rng.randrange(1, 9))} for n in named]
            patches.append(delta.Patch(kind, on, (("v", "d"),), pa.Table.from_pylist(rows)))
            by = {tuple(r[c] for c in on): r["d"] for r in rows}
            for kj, r in expected.items():
                key = tuple(kj[("k", "j").index(c)] for c in on)
                if kj in state and kj not in ups and key in by:
                    r["v"] = by[key] if kind == "update" else r["v"] + by[key]
                    patched.add(kj)
        rewrite = delta.rewrite_clustered(path, pa.Table.from_pylist(list(ups.values()), schema=CLUSTER_SCHEMA),
                                          pa.Table.from_pylist(list(dels.values()), schema=CLUSTER_SCHEMA),
                                          ["k", "j"], patches=patches, file_bytes=1024)
        assert _as_bag(delta.read_arrow(path)) == _as_bag(pa.Table.from_pylist(list(expected.values()),
                                                                              schema=CLUSTER_SCHEMA))
        assert _as_bag(rewrite.patched) == _as_bag(pa.Table.from_pylist([expected[kj] for kj in patched],
                                                                        schema=CLUSTER_SCHEMA))
        was = [state[kj] for kj in [*ups, *dels, *patched] if kj in state]
        assert _as_bag(rewrite.removed) == _as_bag(pa.Table.from_pylist(was, schema=CLUSTER_SCHEMA))
        assert rewrite.metrics["num_target_rows_updated"] == len(patched) + len([kj for kj in ups if kj in state])
        now = set(delta.open_table(path).file_uris())
        for uri in before & now:  # a file kept holds no row that changed
            kept = {(r["k"], r["j"]) for r in pa.parquet.read_table(uri).to_pylist()}
            assert not kept & ({kj for kj in expected if expected[kj] != state.get(kj)} | set(dels))
        state = expected


def test_rewrite_clustered_splits_a_growing_file_and_fills_an_empty_table(tmp_path):
    path = tmp_path / "t"
    delta.create_table(path, CLUSTER_SCHEMA.empty_table())
    rows = [{"k": i, "j": "a", "v": 1.0, "bag": []} for i in range(300)]
    delta.rewrite_clustered(path, pa.Table.from_pylist(rows, schema=CLUSTER_SCHEMA), CLUSTER_SCHEMA.empty_table(),
                            ["k"], file_bytes=1024)
    assert len(delta.open_table(path).file_uris()) > 3
    assert sorted(delta.read_arrow(path).column("k").to_pylist()) == list(range(300))
    one = len(delta.open_table(path).file_uris())
    more = [{"k": 10_000 + i, "j": "b", "v": 2.0, "bag": []} for i in range(300)]
    delta.rewrite_clustered(path, pa.Table.from_pylist(more, schema=CLUSTER_SCHEMA), CLUSTER_SCHEMA.empty_table(),
                            ["k"], file_bytes=1024)
    assert len(delta.open_table(path).file_uris()) > one + 3  # the last file grew and was split
    assert delta.row_count(path) == 600


FLAT_SCHEMA = pa.schema([("k", pa.int64()), ("j", pa.string()), ("v", pa.float64())])


def test_the_change_feed_of_a_rewrite_holds_the_rows_it_changed_not_the_files_it_rewrote(tmp_path):
    path = tmp_path / "t"
    _clustered_table(path, [{"k": i, "j": "a", "v": float(i)} for i in range(400)], 1024, FLAT_SCHEMA)
    assert len(delta.open_table(path).file_uris()) > 3
    start = delta.version(path)
    delta.rewrite_clustered(path, pa.Table.from_pylist([{"k": 7, "j": "a", "v": -1.0}, {"k": 1000, "j": "z", "v": 0.5}],
                                                       schema=FLAT_SCHEMA),
                            pa.Table.from_pylist([{"k": 300, "j": None, "v": None}], schema=FLAT_SCHEMA),
                            ["k"], file_bytes=1024)
    feed = delta.read_changes(path, start + 1)
    got = sorted((r["_change_type"], r["k"], r["j"], r["v"]) for r in feed.to_pylist())
    assert got == [("delete", 7, "a", 7.0), ("delete", 300, "a", 300.0), ("insert", 7, "a", -1.0),
                   ("insert", 1000, "z", 0.5)]
    assert set(feed.column("_commit_version").to_pylist()) == {start + 1}


def test_net_changes_cancel_equal_rows_per_commit_as_bags():
    from idivm.storage.delta.delta_rs import net_changes

    ts = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    schema = pa.schema([*FLAT_SCHEMA, *delta.CHANGE_COLUMNS])

    def row(kind, k, v, version):
        return {"k": k, "j": "a", "v": v, "_change_type": kind, "_commit_version": version, "_commit_timestamp": ts}

    feed = pa.Table.from_pylist([
        row("delete", 1, 1.0, 3), row("delete", 1, 1.0, 3), row("insert", 1, 1.0, 3),  # a duplicate removed once
        row("delete", 2, 2.0, 3), row("insert", 2, 2.0, 3),  # rewritten unchanged
        row("insert", 2, 2.0, 4), row("delete", 3, None, 4),  # another commit: kept
        row("update_preimage", 5, 5.0, 4), row("update_postimage", 5, 5.0, 4),  # updates are kept as they are
    ], schema=schema)
    got = sorted((r["_change_type"], r["k"], r["v"], r["_commit_version"]) for r in net_changes(feed, FLAT_SCHEMA.names)
                 .to_pylist())
    assert got == [("delete", 1, 1.0, 3), ("delete", 3, None, 4), ("insert", 2, 2.0, 4),
                   ("update_postimage", 5, 5.0, 4), ("update_preimage", 5, 5.0, 4)]


def test_read_spark_holding_reads_the_files_that_may_hold_the_values(spark, tmp_path):
    path = tmp_path / "t"
    _clustered_table(path, [{"k": i, "j": "a", "v": 0.0, "bag": []} for i in range(500)] +
                     [{"k": None, "j": "n", "v": 0.0, "bag": []}], 2048)
    every = len(delta.open_table(path).file_uris())
    some = delta.read_spark(spark, path, holding=("k", [3, 250]))
    assert 2 <= len(some.inputFiles()) < every
    assert {3, 250} <= {r.k for r in some.collect()}
    with_null = delta.read_spark(spark, path, holding=("k", [None]))
    assert None in {r.k for r in with_null.collect()} and len(with_null.inputFiles()) < every


def test_read_arrow_holding_reads_the_files_that_may_hold_the_values(tmp_path):
    path = tmp_path / "t"
    _clustered_table(path, [{"k": i, "j": "a", "v": 0.0, "bag": []} for i in range(500)] +
                     [{"k": None, "j": "n", "v": 0.0, "bag": []}], 2048)
    every = delta.read_arrow(path)
    some = delta.read_arrow(path, holding=("k", [3, 250, 10_000]))
    assert {3, 250} <= set(some.column("k").to_pylist()) and 2 <= some.num_rows < every.num_rows // 2
    assert some.schema == every.schema
    assert delta.read_arrow(path, holding=("k", [None]), columns=["k"]).column("k").null_count == 1
    nothing = delta.read_arrow(path, holding=("k", [-5]), columns=["j"])
    assert nothing.num_rows == 0 and nothing.column_names == ["j"]


def test_a_table_created_again_at_the_same_path_is_not_read_as_the_old_one(tmp_path):
    path = tmp_path / "t"
    delta.create_table(path, pa.table({"x": ["old"]}))
    delta.write_arrow(path, pa.table({"x": ["older"]}), mode="append")
    assert delta.read_arrow(path, 0).column("x").to_pylist() == ["old"]
    assert delta.version(path) == 1
    shutil.rmtree(path)
    delta.create_table(path, pa.table({"x": ["new", "rows"]}))
    assert delta.read_arrow(path, 0).column("x").to_pylist() == ["new", "rows"]
    assert delta.version(path) == 0 and delta.row_count(path, 0) == 2
