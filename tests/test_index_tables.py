"""Global provenance indexes stored as Delta tables (thesis §2.15, :mod:`idivm.exec.indexes`).

The thesis' view V (§2.9) over a small Yelp-like database.  The oracle for an index table is
computed here in plain Python from the stored view's rows: for every top-level row and every
element of its nested bag, the provenance the index names (``__idivm_prov``) with the row's
ID.  Checked: the tables ``define`` builds; that they follow the view through a seeded change
stream, with and without ``use_indexes`` (a run without them leaves them behind, the next run
rebuilds them); that a nested update finds its rows through the index (exactly the businesses
holding the user's reviews); that a crash between the view's commit and the index's leaves an
index that is rebuilt before it is used; ``explain`` and ``maintain --no-index``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from idivm.datasets import yelp
from idivm.datasets.yelp_changes import YelpChanges, write_batch
from idivm.exec import indexes
from idivm.storage import delta

V = (Path(__file__).parents[1] / "idivm" / "datasets" / "views" / "sf_reviews.sqlpp").read_text()
SPEC = yelp.YelpSpec(businesses=30, reviews_per_business=4.0, users_per_business=1.25, sf_fraction=0.5,
                     unreviewed_fraction=0.1, friends_per_user=2.0, elite_fraction=0.5, seed=5)
#: of the nested indexes §2.15.2 selects for V (Example 2.15.3), those its nested updates read
#: (review star/date/text updates, user updates): (element attributes, root attributes)
EXPECTED = {("review_id",): (), ("user_id",): ()}
#: the two that only replace statements' i-diffs call for: explain lists them without a table
UNSTORED = ("full_reviews #() / #(review_id, user_id)", "full_reviews #(business_id) / #(review_id, user_id)")


def read_rows(wh, path: Path) -> list[dict]:
    """The rows of the table at ``path``: through Spark for a warehouse whose engine is
    delta-spark (its tables may have deletion vectors), else read by delta-rs."""
    if wh.storage.spark:
        return delta.read_spark(wh.spark, path, engine=wh.storage).toArrow().to_pylist()
    return delta.read_arrow(path).to_pylist()


def oracle(wh, view_path: Path, index: indexes.StoredIndex) -> set[tuple]:
    """The entries of ``index`` as the stored view implies them (columns in table order)."""
    out = set()
    for row in read_rows(wh, view_path):
        for e in row[index.index.collection[0]] or []:
            if e is None:
                continue
            values = {}
            for level, attr, column in index.columns:
                values[column] = row[f"__idivm_id_{attr}"] if level == 0 else e["__idivm_prov"][attr]
            values.update({c: row[c] for c in index.id_columns})
            out.add(tuple(values[c] for c in index.schema.names))
    return out


def stored(wh, name="sf_reviews"):
    """The view's path and its index tables, as the view's stored program lays them out."""
    from idivm.exec.programs import load_program, stored_indexes

    entry = wh.catalog.view(name)
    path = wh.catalog.path_of(entry)
    return path, stored_indexes(load_program(wh.catalog, entry), path)


def table_rows(wh, path: Path, index) -> set[tuple]:
    rows = read_rows(wh, index.path(path))
    return {tuple(r[c] for c in index.schema.names) for r in rows}


def check_fresh(wh) -> None:
    path, stored_indexes = stored(wh)
    for index in stored_indexes:
        assert indexes.reflected_version(index.path(path), index) == delta.version(path), str(index.index)
        assert table_rows(wh, path, index) == oracle(wh, path, index), str(index.index)
        first = index.order[0]
        assert first == f"l1_{index.index.levels[-1][0]}"
        if delta.history(index.path(path), 1)[0].get("idivm.operation") == "maintain index" and wh.storage.spark:
            continue  # a delta-spark MERGE adds its entries outside the order, until compaction
        # ordered by the element provenance a lookup names: files of disjoint ranges of it
        values = [v for b in delta.scan_ordered(index.path(path), None, first, [first]) for v in b.column(0).to_pylist()]
        assert values == sorted(values), str(index.index)


@pytest.fixture
def warehouse(make_warehouse):
    wh = make_warehouse("indexes")
    for table, rows in yelp.tables(SPEC).items():
        wh.create_table(table, yelp.keys(SPEC)[table], list(rows))
    wh.define(V, strategy="id")
    return wh


def test_define_builds_the_selected_nested_indexes(warehouse):
    path, stored_indexes = stored(warehouse)
    got = {(tuple(sorted(i.index.levels[-1] + i.index.levels[0])), i.index.levels[0]) for i in stored_indexes}
    assert got == {(tuple(sorted(a)), r) for a, r in EXPECTED.items()}
    assert all(i.index.collection == ("full_reviews",) for i in stored_indexes)
    check_fresh(warehouse)
    assert all(table_rows(warehouse, path, i) for i in stored_indexes), "the view has reviews: no index is empty"
    text = warehouse.explain("sf_reviews")
    section = text.split("global provenance indexes (§2.15.2):")[1].split("Δ-script")[0]
    assert "the view's ID columns" in section
    # the users update (Example 2.13.1: #(user_id) under #()) finds its rows through the user_id index
    users = section.split("full_reviews #() / #(user_id)  <-")[1].splitlines()[1]
    assert users.strip().startswith("table indexes/") and "finds the rows of Δ" in users
    for index in UNSTORED:
        assert section.split(f"{index}  <-")[1].splitlines()[1].strip() == "no table: no statement reads it"


def run_batch(wh, stream, tmp_path, n, use_indexes, messages):
    batch = stream.next_batch(n)
    for table, (path, events) in write_batch(batch, tmp_path / f"batch-{batch.number}").items():
        wh.ingest(table, path, format="debezium")
    (result,) = wh.maintain("sf_reviews", progress=messages.append, use_indexes=use_indexes)
    assert result.strategy == "id", result.note
    check = wh.verify("sf_reviews")
    assert check.ok, check.summary()
    return result


def test_indexes_follow_the_view_through_a_change_stream(warehouse, tmp_path):
    stream = YelpChanges(SPEC, seed=11)
    messages: list[str] = []
    for b, use in enumerate([True, False, True]):
        before = len(messages)
        run_batch(warehouse, stream, tmp_path, 20, use, messages)
        this = messages[before:]
        if use:
            check_fresh(warehouse)
        else:
            assert not any("index" in m for m in this), this
            path, stored_indexes = stored(warehouse)
            assert all(indexes.reflected_version(i.path(path), i) == delta.version(path) - 1 for i in stored_indexes)
        if b == 2:  # after the run without indexes, they are rebuilt before they are read
            assert sum("building index" in m for m in this) == len(EXPECTED), this
    assert any("full_reviews #() / #(user_id):" in m for m in messages), "the stream updates users"


def v_stored_by(make_warehouse, storage: str):
    """A warehouse of ``storage`` with the Yelp-like tables and V defined by ``id``, its index
    tables checked fresh: (warehouse, the view's path, its stored indexes)."""
    wh = make_warehouse(f"indexes-{storage}", storage=storage)
    for table, rows in yelp.tables(SPEC).items():
        wh.create_table(table, yelp.keys(SPEC)[table], list(rows))
    wh.define(V, strategy="id")
    check_fresh(wh)
    return (wh, *stored(wh))


@pytest.mark.slow  # the default run builds indexes by Spark in test_differential's delta-spark-dv corpus
def test_the_indexes_of_a_view_stored_by_delta_spark_are_built_by_spark(make_warehouse, tmp_path):
    """With a delta-spark engine Spark computes, orders and writes an index's entries (nothing
    gathered in the driver); the tables are those the oracle expects, in the same order, and
    follow the view through a batch (and a rebuild after a run without them)."""
    wh, path, stored_indexes = v_stored_by(make_warehouse, "delta-spark")
    assert all(delta.history(i.path(path), 1)[0]["engineInfo"].startswith("Apache-Spark") for i in stored_indexes)
    stream = YelpChanges(SPEC, seed=11)
    messages: list[str] = []
    run_batch(wh, stream, tmp_path, 20, False, messages)
    run_batch(wh, stream, tmp_path, 20, True, messages)
    assert any("building index" in m for m in messages), messages
    check_fresh(wh)


@pytest.mark.slow  # as above; test_differential's delta-spark-dv corpus maintains indexes by Spark too
def test_the_indexes_of_a_view_with_deletion_vectors_are_maintained_by_spark(make_warehouse, tmp_path,
                                                                             monkeypatch):
    """With ``delta-spark-dv`` a run merges its index changes by Spark, one MERGE per index
    table (deleted entries marked by deletion vectors), and finds the rows of nested updates
    by a Spark join with the index: the driver-side lookup and rewrite are never called.  Through
    batches of review inserts, deletes and star changes, user changes (nested updates) and
    businesses entering and leaving, every index table equals the entries the view implies
    and the view its recomputation."""
    wh, path, stored_indexes = v_stored_by(make_warehouse, "delta-spark-dv")
    for index in stored_indexes:
        configuration = delta.open_table(index.path(path)).metadata().configuration
        assert configuration.get("delta.enableDeletionVectors") == "true", str(index.index)

    def in_the_driver(*args, **kwargs):
        raise AssertionError("an index read or written in the driver")

    monkeypatch.setattr(indexes, "apply", in_the_driver)
    monkeypatch.setattr(indexes.StoredIndex, "lookup", in_the_driver)
    stream = YelpChanges(SPEC, seed=21)
    messages: list[str] = []
    for _ in range(4):
        before = len(messages)
        result = run_batch(wh, stream, tmp_path, 25, True, messages)
        this = messages[before:]
        assert not any("building index" in m for m in this), this
        assert sum("merging the changes of index" in m for m in this) == len(stored_indexes), this
        check_fresh(wh)
        for index in stored_indexes:
            last = delta.history(index.path(path), 1)[0]
            assert last["idivm.operation"] == "maintain index" and last["engineInfo"].startswith("Apache-Spark")
            assert last["idivm.view_version"] == str(result.version)
    assert any("joined with the i-diff's keys by Spark" in m for m in messages), "the stream updates users"
    deleted = [c for i in stored_indexes for c in delta.history(i.path(path))
               if int((c.get("operationMetrics") or {}).get("numTargetDeletionVectorsAdded") or 0)]
    assert deleted, "entries are deleted by deletion vectors"


def test_a_nested_update_finds_exactly_the_rows_holding_the_user(warehouse, tmp_path):
    path, stored_indexes = stored(warehouse)
    rows = read_rows(warehouse, path)
    # a user with reviews in several San Francisco businesses
    holders: dict[str, set] = {}
    for row in rows:
        for e in row["full_reviews"]:
            holders.setdefault(e["user_id"], set()).add(row["business_id"])
    user_id, businesses = max(holders.items(), key=lambda kv: (len(kv[1]), kv[0]))
    assert len(businesses) >= 2
    user = next(u for u in yelp.tables(SPEC)["users"] if u["user_id"] == user_id)
    event = {"before": user, "after": {**user, "elite": [1999, 2000]}, "op": "u",
             "source": {"table": "users"}, "ts_ms": 1_700_000_000_000}
    (tmp_path / "u.jsonl").write_text(json.dumps(event, default=list) + "\n")
    warehouse.ingest("users", tmp_path / "u.jsonl", format="debezium")
    messages: list[str] = []
    (result,) = warehouse.maintain("sf_reviews", progress=messages.append)
    if warehouse.storage.spark:
        # a delta-spark engine joins the index with the i-diff's keys in Spark, uncounted: the
        # same lookup, run here, finds exactly the rows of those businesses
        assert "sf_reviews: index full_reviews #() / #(user_id): joined with the i-diff's keys by Spark" in messages, \
            messages
        index = next(i for i in stored_indexes if str(i.index) == "full_reviews #() / #(user_id)")
        keys = warehouse.spark.createDataFrame([(user_id,)], "user_id string")
        found = {tuple(r) for r in index.spark_lookup(index.path(path), keys).collect()}
        assert found == {tuple(r[c] for c in index.id_columns) for r in rows if r["business_id"] in businesses}
    else:
        assert f"sf_reviews: index full_reviews #() / #(user_id): 1 keys -> {len(businesses)} rows" in messages, \
            messages
    assert (result.inserted, result.updated, result.deleted) == (0, len(businesses), 0)
    after = {r["business_id"]: r for r in read_rows(warehouse, path)}
    assert all(e["elite"] == [1999, 2000] for b in businesses for e in after[b]["full_reviews"]
               if e["user_id"] == user_id)
    assert warehouse.verify("sf_reviews").ok
    check_fresh(warehouse)


def test_an_index_behind_the_view_after_a_crash_is_rebuilt_before_use(warehouse, tmp_path, monkeypatch):
    stream = YelpChanges(SPEC, seed=12)

    def crash(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(indexes, "apply", crash)
    monkeypatch.setattr(indexes, "apply_spark", crash)  # the indexes' MERGE on a delta-spark engine
    with pytest.raises(OSError, match="disk gone"):
        run_batch(warehouse, stream, tmp_path, 20, True, [])
    monkeypatch.undo()
    path, stored_indexes = stored(warehouse)
    assert warehouse.verify("sf_reviews").ok, "the view's commit landed before the crash"
    assert all(indexes.reflected_version(i.path(path), i) == delta.version(path) - 1 for i in stored_indexes)
    messages: list[str] = []
    run_batch(warehouse, stream, tmp_path, 20, True, messages)
    assert sum("building index" in m for m in messages) == len(EXPECTED), messages
    check_fresh(warehouse)


def test_cli_maintain_no_index_leaves_the_indexes_behind(warehouse, tmp_path):
    from click.testing import CliRunner

    from idivm.cli import cli

    stream = YelpChanges(SPEC, seed=13)
    batch = stream.next_batch(10)
    for table, (p, events) in write_batch(batch, tmp_path / "b").items():
        warehouse.ingest(table, p, format="debezium")
    out = CliRunner().invoke(cli, ["--warehouse", str(warehouse.path), "maintain", "--all", "--no-index"],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert "index" not in out.output.replace("sf_reviews.indexes", "")
    path, stored_indexes = stored(warehouse)
    assert all(indexes.reflected_version(i.path(path), i) == delta.version(path) - 1 for i in stored_indexes)
