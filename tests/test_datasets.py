"""Dataset generators: determinism, knobs, keys, shipped samples and views (no Spark)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from idivm import datasets
from idivm.datasets import devices, yelp, yelp_changes
from idivm.datasets.__main__ import main


def _materialize(tables):
    return {name: list(rows) for name, rows in tables.items()}


def _assert_keys_unique(tables, keys):
    for name, rows in tables.items():
        values = [tuple(row[k] for k in keys[name]) for row in rows]
        assert len(values) == len(set(values)), f"duplicate keys in {name}"


def _assert_schema(tables, schemas):
    for name, rows in tables.items():
        for row in rows:
            assert list(row) == list(schemas[name]), name


# ----------------------------------------------------------------------------- devices


def test_devices_deterministic_and_seed_sensitive():
    spec = devices.DevicesSpec(devices=300, parts=200, fanout=4, selectivity=0.3, extra_joins=1, seed=7)
    first = _materialize(devices.tables(spec))
    assert first == _materialize(devices.tables(spec))
    assert devices.price_updates(spec, 20) == devices.price_updates(spec, 20)
    other = _materialize(devices.tables(spec.with_(seed=8)))
    assert other["devices_parts"] != first["devices_parts"]
    assert other["parts"] != first["parts"]


def test_devices_sizes_keys_and_knobs():
    spec = devices.DevicesSpec(devices=2000, parts=500, fanout=7, selectivity=0.15, extra_joins=2, seed=1)
    tables = _materialize(devices.tables(spec))
    assert set(tables) == {"devices", "parts", "devices_parts", "devices_parts_1", "devices_parts_2"}
    assert len(tables["devices"]) == 2000
    assert len(tables["parts"]) == 500
    assert len(tables["devices_parts"]) == 2000 * 7
    _assert_keys_unique(tables, devices.keys(spec))
    _assert_schema(tables, devices.schemas(spec))

    categories = Counter(row["category"] for row in tables["devices"])
    assert categories["phone"] == round(0.15 * 2000)
    assert set(categories) <= set(devices.CATEGORIES)

    fanout = Counter(row["did"] for row in tables["devices_parts"])
    assert set(fanout.values()) == {7}
    pids = {row["pid"] for row in tables["parts"]}
    dids = {row["did"] for row in tables["devices"]}
    assert all(row["pid"] in pids and row["did"] in dids for row in tables["devices_parts"])
    # extra join tables are 1-to-1 with devices_parts on (did, pid)
    pairs = [(row["did"], row["pid"]) for row in tables["devices_parts"]]
    for i in (1, 2):
        assert [(row["did"], row["pid"]) for row in tables[f"devices_parts_{i}"]] == pairs

    prices = [row["price"] for row in tables["parts"]]
    assert all(devices.MIN_PRICE <= p <= devices.MAX_PRICE and round(p, 2) == p for p in prices)


@pytest.mark.parametrize("selectivity", [0.0, 0.06, 0.5, 1.0])
def test_devices_selectivity_exact(selectivity):
    spec = devices.DevicesSpec(devices=500, parts=50, fanout=1, selectivity=selectivity)
    phones = sum(row["category"] == "phone" for row in devices.devices_rows(spec))
    assert phones == round(selectivity * 500)


def test_devices_at_scale():
    spec = devices.DevicesSpec.at_scale(40, fanout=3, seed=2)
    assert (spec.devices, spec.parts, spec.fanout, spec.seed) == (40, 40, 3, 2)


@pytest.mark.parametrize(
    "knobs",
    [dict(fanout=11, parts=10), dict(selectivity=1.5), dict(devices=-1), dict(extra_joins=-1)],
)
def test_devices_rejects_bad_knobs(knobs):
    with pytest.raises(ValueError):
        devices.DevicesSpec(**knobs)


def test_price_updates():
    spec = devices.DevicesSpec(devices=100, parts=300, fanout=5, seed=3)
    prices = {row["pid"]: row["price"] for row in devices.parts_rows(spec)}
    updates = devices.price_updates(spec, 50)
    assert len(updates) == 50
    assert [pid for pid, _, _ in updates] == sorted({pid for pid, _, _ in updates})
    for pid, pre, post in updates:
        assert prices[pid] == pre
        assert post != pre and post > 0 and round(post, 2) == post
    assert devices.price_updates(spec, 50, seed=4) != updates
    assert devices.price_updates(spec, 0) == []
    with pytest.raises(ValueError):
        devices.price_updates(spec, 301)


# ----------------------------------------------------------------------------- yelp


def test_yelp_deterministic_and_seed_sensitive():
    spec = yelp.YelpSpec(businesses=200, seed=5)
    first = _materialize(yelp.tables(spec))
    assert first == _materialize(yelp.tables(spec))
    assert _materialize(yelp.tables(spec.with_(seed=6)))["reviews"] != first["reviews"]


def test_yelp_sizes_keys_and_knobs():
    spec = yelp.YelpSpec(businesses=2000, reviews_per_business=4.0, users_per_business=1.5,
                         sf_fraction=0.25, unreviewed_fraction=0.1, seed=1)
    tables = _materialize(yelp.tables(spec))
    assert len(tables["businesses"]) == 2000
    assert len(tables["users"]) == 3000
    assert 0.9 * 8000 <= len(tables["reviews"]) <= 1.1 * 8000
    _assert_keys_unique(tables, yelp.keys(spec))
    _assert_schema(tables, yelp.schemas(spec))

    businesses = tables["businesses"]
    assert sum(b["city"] == "San Francisco" for b in businesses) == 500
    reviewed = {r["business_id"] for r in tables["reviews"]}
    assert 0.06 * 2000 <= 2000 - len(reviewed) <= 0.14 * 2000

    business_ids = {b["business_id"] for b in businesses}
    user_ids = {u["user_id"] for u in tables["users"]}
    for r in tables["reviews"]:
        assert r["business_id"] in business_ids and r["user_id"] in user_ids
        assert r["stars"] in range(1, 6)
        assert len(r["date"]) == 10 and r["date"][4] == r["date"][7] == "-"
    for u in tables["users"]:
        assert len(set(u["friends"])) == len(u["friends"]) and u["user_id"] not in u["friends"]
        assert set(u["friends"]) <= user_ids
        assert u["elite"] == sorted(set(u["elite"]))
        assert u["fans"] >= 0
    assert any(not u["friends"] for u in tables["users"]) and any(u["friends"] for u in tables["users"])
    assert any(not u["elite"] for u in tables["users"]) and any(u["elite"] for u in tables["users"])
    for b in businesses:
        assert b["categories"] and len(set(b["categories"])) == len(b["categories"])
    repeats = Counter((r["user_id"], r["business_id"]) for r in tables["reviews"])
    assert max(repeats.values()) >= 2


def test_yelp_natural_join_columns():
    fields = {name: set(schema) for name, schema in yelp.SCHEMAS.items()}
    assert fields["businesses"] & fields["reviews"] == {"business_id"}
    assert fields["reviews"] & fields["users"] == {"user_id"}
    assert fields["businesses"] & fields["users"] == set()


def test_yelp_scale_knobs():
    small = _materialize(yelp.tables(yelp.YelpSpec.at_scale(100, seed=2)))
    large = _materialize(yelp.tables(yelp.YelpSpec.at_scale(400, seed=2)))
    assert len(large["businesses"]) == 4 * len(small["businesses"])
    assert len(large["users"]) == 4 * len(small["users"])
    assert len(large["reviews"]) > 2 * len(small["reviews"])
    none = _materialize(yelp.tables(yelp.YelpSpec(businesses=50, reviews_per_business=0)))
    assert none["reviews"] == []


@pytest.mark.parametrize(
    "knobs",
    [dict(sf_fraction=1.5), dict(reviews_per_business=0.5, unreviewed_fraction=0.1),
     dict(businesses=10, users_per_business=0.0), dict(friends_per_user=-1)],
)
def test_yelp_rejects_bad_knobs(knobs):
    with pytest.raises(ValueError):
        yelp.YelpSpec(**knobs)


# ----------------------------------------------------------------------------- samples


@pytest.mark.parametrize("dataset", ["devices", "yelp"])
def test_samples_equal_generator_output(dataset):
    module = datasets.DATASETS[dataset]
    expected = _materialize(module.tables(module.SAMPLE))
    for table, rows in expected.items():
        path = datasets.sample_path(dataset, table)
        lines = path.read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == rows, f"{path} is stale; run write_sample({dataset!r})"
    assert datasets.sample_tables(dataset) == expected


def test_devices_sample_follows_figure_2_2():
    tables = datasets.sample_tables("devices")
    assert (len(tables["devices"]), len(tables["parts"]), len(tables["devices_parts"])) == (8, 10, 24)
    category = {d["did"]: d["category"] for d in tables["devices"]}
    users_of_p1 = sorted(r["did"] for r in tables["devices_parts"] if r["pid"] == 1)
    assert users_of_p1 == [1, 2] and category[1] == category[2] == "phone"
    used = {r["pid"] for r in tables["devices_parts"]}
    assert 2 not in used  # a part no view row mentions
    used_by_phones = {r["pid"] for r in tables["devices_parts"] if category[r["did"]] == "phone"}
    assert used - used_by_phones  # parts used only by non-phones


def test_yelp_sample_has_edge_cases():
    tables = datasets.sample_tables("yelp")
    assert (len(tables["businesses"]), len(tables["users"])) == (6, 8)
    assert 15 <= len(tables["reviews"]) <= 25
    reviewed = {r["business_id"] for r in tables["reviews"]}
    sf = [b["business_id"] for b in tables["businesses"] if b["city"] == "San Francisco"]
    assert "b000005" in sf and "b000005" not in reviewed
    assert any(b in reviewed for b in sf)
    repeats = Counter((r["user_id"], r["business_id"]) for r in tables["reviews"])
    assert repeats[("u000003", "b000001")] == 2
    assert any(u["friends"] == [] and u["elite"] == [] for u in tables["users"])
    assert any(u["friends"] for u in tables["users"]) and any(u["elite"] for u in tables["users"])


# ----------------------------------------------------------------------------- views


def test_views_shipped():
    assert datasets.view_names() == [
        "devices_cost", "devices_dearest", "devices_price_range", "devices_v", "sf_reviews", "sf_reviews_flat",
        "sf_reviews_grouped",
    ]
    names = {
        "devices_v": "phone_parts", "devices_cost": "phone_cost", "devices_price_range": "phone_price_range",
        "devices_dearest": "phone_dearest_part", "sf_reviews": "sf_reviews",
        "sf_reviews_grouped": "sf_reviews_grouped", "sf_reviews_flat": "sf_reviews_flat",
    }
    for file, view in names.items():
        text = datasets.view_path(file).read_text(encoding="utf-8")
        assert text.startswith("-- Thesis ")
        assert f"CREATE VIEW {view} AS" in text
    with pytest.raises(ValueError):
        datasets.view_path("nope")


def test_devices_views_on_sample_with_duckdb():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    for table in ("devices", "parts", "devices_parts"):
        path = datasets.sample_path("devices", table)
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_json_auto('{path}')")

    def query(name):
        text = datasets.view_path(name).read_text(encoding="utf-8")
        body = text.split(" AS\n", 1)[1].replace('"phone"', "'phone'")
        return con.execute(body).fetchall()

    assert sorted(row for row in query("devices_v") if row[1] == 1) == [(1, 1, 48.02), (2, 1, 48.02)]
    costs = dict(query("devices_cost"))
    assert set(costs) == {1, 2, 4, 8}
    assert costs[1] == pytest.approx(48.02 + 9.69 + 65.92)
    ranges = {did: rest for did, *rest in query("devices_price_range")}
    assert ranges[1] == [9.69, 65.92, 3]  # device 1's parts cost 48.02, 9.69 and 65.92


# ----------------------------------------------------------------------------- writing


def test_write_jsonl_and_parquet_roundtrip(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    spec = yelp.YelpSpec(businesses=30, seed=4)
    expected = _materialize(yelp.tables(spec))
    datasets.write_dataset(yelp.tables(spec), yelp.schemas(spec), tmp_path / "j", "jsonl")
    written = datasets.write_dataset(yelp.tables(spec), yelp.schemas(spec), tmp_path / "p", "parquet",
                                     chunk_rows=7)
    for table, rows in expected.items():
        assert list(datasets.read_jsonl(tmp_path / "j" / f"{table}.jsonl")) == rows
        path, count = written[table]
        assert count == len(rows)
        parquet = pq.ParquetFile(path)
        assert parquet.metadata.num_row_groups == -(-len(rows) // 7)
        assert parquet.read().to_pylist() == rows


def test_write_parquet_types_fixed_for_empty_tables(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "users.parquet"
    assert datasets.write_parquet([], path, yelp.SCHEMAS["users"]) == 0
    schema = pq.read_schema(path)
    assert str(schema.field("friends").type) == "list<element: string>"
    assert str(schema.field("elite").type) == "list<element: int64>"


def test_cli_devices_and_sample(tmp_path, capsys):
    out = tmp_path / "dev"
    assert main(["devices", "--scale", "50", "--parts", "20", "-f", "3", "-s", "0.4", "-d", "5",
                 "--seed", "9", "--out", str(out)]) == 0
    spec = devices.DevicesSpec(devices=50, parts=20, fanout=3, selectivity=0.4, seed=9)
    assert list(datasets.read_jsonl(out / "devices_parts.jsonl")) == list(devices.devices_parts_rows(spec))
    assert [tuple(r.values()) for r in datasets.read_jsonl(out / "price_updates.jsonl")] == \
        devices.price_updates(spec, 5)
    assert main(["yelp", "--sample", "--out", str(tmp_path / "y")]) == 0
    for table in yelp.SCHEMAS:
        assert (tmp_path / "y" / f"{table}.jsonl").read_bytes() == \
            datasets.sample_path("yelp", table).read_bytes()
    with pytest.raises(SystemExit):
        main(["devices", "--scale", "5", "--fanout", "9", "--out", str(tmp_path / "bad")])
    capsys.readouterr()


# ----------------------------------------------------------------------------- yelp change streams

CHANGES_SPEC = yelp.YelpSpec(businesses=40, reviews_per_business=4.0, users_per_business=1.5,
                             friends_per_user=2.0, elite_fraction=0.4, seed=11)


def _batches(spec, batches, n, **kwargs):
    return list(yelp_changes.change_batches(spec, batches, n, **kwargs))


def _keyed(tables):
    """table -> {key: row} of rows as the generator gives them."""
    return {name: {tuple(row[k] for k in yelp.KEYS[name]): row for row in rows}
            for name, rows in tables.items()}


def _apply(current, table, event):
    """Apply one Debezium event to ``current`` (table -> {key: row}) in plain Python, checking
    that it is well-formed and that its ``before`` is the current row."""
    assert set(event) == {"before", "after", "op"}
    op, before, after = event["op"], event["before"], event["after"]
    rows = current[table]
    key = yelp.KEYS[table]
    if op == "c":
        assert before is None and list(after) == list(yelp.SCHEMAS[table])
        k = tuple(after[c] for c in key)
        assert k not in rows, f"insert of an existing {table} row {k}"
        rows[k] = after
    elif op == "u":
        assert list(before) == list(after) == list(yelp.SCHEMAS[table])
        k = tuple(before[c] for c in key)
        assert tuple(after[c] for c in key) == k, "an update changes the key"
        assert rows.get(k) == before, f"update's before is not the current {table} row {k}"
        assert after != before, "an update that changes nothing"
        rows[k] = after
    else:
        assert op == "d" and after is None
        k = tuple(before[c] for c in key)
        assert rows.get(k) == before, f"delete's before is not the current {table} row {k}"
        del rows[k]


def _assert_yelp_invariants(current):
    businesses, reviews, users = current["businesses"], current["reviews"], current["users"]
    for (b,), row in businesses.items():
        assert row["categories"] and len(set(row["categories"])) == len(row["categories"])
        assert set(row["categories"]) <= set(yelp.CATEGORIES)
        assert (row["city"], row["state"]) in (yelp.SAN_FRANCISCO, *yelp.OTHER_CITIES)
    for row in reviews.values():
        assert (row["business_id"],) in businesses, f"{row['review_id']} names a missing business"
        assert (row["user_id"],) in users, f"{row['review_id']} names a missing user"
        assert row["stars"] in range(1, 6)
    for (u,), row in users.items():
        assert row["friends"] == sorted(set(row["friends"])) and u not in row["friends"]
        assert all((f,) in users for f in row["friends"])
        assert row["elite"] == sorted(set(row["elite"]))
        assert set(row["elite"]) <= set(yelp_changes.ELITE_YEARS)
        assert row["fans"] >= 0


def test_yelp_changes_deterministic_and_seed_sensitive():
    first = _batches(CHANGES_SPEC, 3, 60)
    assert first == _batches(CHANGES_SPEC, 3, 60)
    assert [b.number for b in first] == [1, 2, 3]
    assert _batches(CHANGES_SPEC, 3, 60, seed=12) != first
    assert _batches(CHANGES_SPEC.with_(seed=12), 3, 60) != first
    # a state loaded from the written rows gives the same stream as one generated from the spec
    state = yelp_changes.YelpState.of(_materialize(yelp.tables(CHANGES_SPEC)))
    assert _batches(CHANGES_SPEC, 3, 60, state=state) == first
    # events are plain JSON
    for batch in first:
        for events in batch.events.values():
            assert [json.loads(json.dumps(e)) for e in events] == events


def test_yelp_changes_keep_the_tables_consistent():
    tables = _materialize(yelp.tables(CHANGES_SPEC))
    current = _keyed(tables)
    seen = {name: set(rows) for name, rows in current.items()}  # every key ever used
    stream = yelp_changes.YelpChanges(CHANGES_SPEC)
    for _ in range(12):
        batch = stream.next_batch(80)
        assert batch.changes == 80 and set(batch.events) == set(yelp.SCHEMAS)
        for table, events in batch.events.items():
            for event in events:
                if event["op"] == "c":
                    k = tuple(event["after"][c] for c in yelp.KEYS[table])
                    assert k not in seen[table], f"{table} key {k} reused"
                    seen[table].add(k)
                _apply(current, table, event)
        _assert_yelp_invariants(current)
        # the stream's own state is the plain-Python application of its events
        assert stream.state.tables() == {name: [rows[k] for k in sorted(rows)]
                                         for name, rows in current.items()}
    assert len(current["businesses"]) > 0 and len(current["reviews"]) > 0


def _changed_fields(event):
    return {f for f in event["before"] if event["before"][f] != event["after"][f]}


@pytest.mark.parametrize("kind", yelp_changes.KINDS)
def test_yelp_changes_each_kind(kind):
    stream = yelp_changes.YelpChanges(CHANGES_SPEC, mix={kind: 1})
    before = _keyed(stream.state.tables())
    batch = stream.next_batch(15)
    assert batch.kinds == {k: 15 if k == kind else 0 for k in yelp_changes.KINDS}
    events = batch.events
    table = {"review": "reviews", "user": "users", "business": "businesses"}[kind.split("_")[0]]
    others = {t: e for t, e in events.items() if t != table}
    if kind == "business_delete":
        # each business delete comes with the deletes of all its reviews
        gone = {e["before"]["business_id"] for e in events["businesses"]}
        assert len(gone) == 15 and all(e["op"] == "d" for e in events["businesses"])
        assert sorted(e["before"]["review_id"] for e in events["reviews"]) == sorted(
            r for (r,), row in before["reviews"].items() if row["business_id"] in gone)
        assert all(e["op"] == "d" for e in events["reviews"]) and events["users"] == []
        return
    assert all(e == [] for e in others.values())
    assert len(events[table]) == 15
    for e in events[table]:
        if kind.endswith("_insert"):
            assert e["op"] == "c"
        elif kind.endswith("_delete"):
            assert e["op"] == "d"
        else:
            assert e["op"] == "u"
            changed = _changed_fields(e)
            b, a = e["before"], e["after"]
            if kind == "review_stars":
                assert changed == {"stars"}
            elif kind == "user_fans":
                assert changed == {"fans"} and 1 <= abs(a["fans"] - b["fans"]) <= 5
            elif kind == "user_name":
                assert changed == {"user_name"}
            elif kind in ("user_friends", "user_elite", "business_categories"):
                name = {"user_friends": "friends", "user_elite": "elite",
                        "business_categories": "categories"}[kind]
                assert changed == {name}
                assert len(set(a[name]) ^ set(b[name])) == 1  # one element added or removed
            elif kind == "business_city":
                assert "city" in changed and changed <= {"city", "state"}
    if kind == "business_insert":
        assert all(e["after"]["business_id"] > max(before["businesses"])[0] for e in events["businesses"])
    if kind == "review_insert":
        ids = [e["after"]["review_id"] for e in events["reviews"]]
        assert ids == sorted(ids) and ids[0] > max(before["reviews"])[0]


def test_yelp_changes_default_mix_covers_every_kind():
    assert set(yelp_changes.DEFAULT_MIX) == set(yelp_changes.KINDS)
    assert all(w > 0 for w in yelp_changes.DEFAULT_MIX.values())
    totals = Counter()
    for batch in _batches(CHANGES_SPEC, 4, 100):
        totals.update(batch.kinds)
    assert all(totals[k] > 0 for k in yelp_changes.KINDS), totals
    # an empty batch is a batch
    assert _batches(CHANGES_SPEC, 1, 0)[0].events == {t: [] for t in yelp_changes.TABLES}


def test_yelp_changes_generate_the_database_once(monkeypatch):
    calls = []
    generate = yelp.tables
    monkeypatch.setattr(yelp, "tables", lambda spec: calls.append(spec) or generate(spec))
    stream = yelp_changes.YelpChanges(CHANGES_SPEC)
    for _ in range(5):
        stream.next_batch(50)
    assert calls == [CHANGES_SPEC]


def test_yelp_changes_stop_loudly_when_the_mix_no_longer_applies():
    spec = yelp.YelpSpec(businesses=3, reviews_per_business=2.0, unreviewed_fraction=0.0, seed=1)
    stream = yelp_changes.YelpChanges(spec, mix={"review_delete": 1})
    with pytest.raises(ValueError, match="no kind of the mix applies"):
        stream.next_batch(100)
    with pytest.raises(ValueError, match="stopped"):
        stream.next_batch(1)
    # kinds that cannot apply are left out of the draw while others can
    stream = yelp_changes.YelpChanges(spec, mix={"review_delete": 1, "user_fans": 1})
    reviews = yelp_changes.YelpState.of_spec(spec).count("reviews")
    assert stream.next_batch(100).kinds["review_delete"] == reviews


@pytest.mark.parametrize(
    "mix",
    [{}, {"review_stars": 0}, {"nope": 1}, {"review_stars": -1}, {"review_stars": float("nan")},
     {"review_stars": "1"}],
)
def test_yelp_changes_reject_bad_mixes(mix):
    with pytest.raises(ValueError):
        yelp_changes.check_mix(mix)


def test_yelp_changes_parse_mix():
    assert yelp_changes.parse_mix("review_stars=2, user_elite=0.5") == {
        k: {"review_stars": 2.0, "user_elite": 0.5}.get(k, 0) for k in yelp_changes.KINDS}
    for bad in ("review_stars", "review_stars=x", "nope=1"):
        with pytest.raises(ValueError):
            yelp_changes.parse_mix(bad)


def test_yelp_state_refuses_dangling_or_empty_changes():
    state = yelp_changes.YelpState.of(datasets.sample_tables("yelp"))
    with pytest.raises(ValueError, match="missing business"):
        state.insert_review(1, 99, 5, "2020-01-01", "x")
    with pytest.raises(ValueError, match="missing user"):
        state.insert_review(99, 1, 5, "2020-01-01", "x")
    with pytest.raises(ValueError):
        state.update_user(1, friends=[1])  # oneself
    with pytest.raises(ValueError):
        state.update_user(1, friends=[2, 2])
    with pytest.raises(ValueError):
        state.update_user(1, friends=[99])
    with pytest.raises(ValueError, match="changes nothing"):
        state.update_user(1, fans=state.user(1)[1])
    with pytest.raises(ValueError):
        state.update_business(1, categories=[])
    with pytest.raises(ValueError):
        state.delete_review(9_999)
    dangling = datasets.sample_tables("yelp")
    dangling["businesses"] = dangling["businesses"][1:]
    with pytest.raises(ValueError, match="missing business"):
        yelp_changes.YelpState.of(dangling)
    # a deleted id is never handed out again
    _, event = state.delete_business(6)
    assert event["op"] == "d"
    assert state.insert_business("X", "Oakland", "CA", ["Thai"])["after"]["business_id"] == "b000007"


def test_yelp_changes_ingest_into_a_warehouse(tmp_path):
    """Batches written as files ingest cleanly (no Spark) and leave the tables equal to the
    plain-Python application of their events."""
    from idivm.storage import delta
    from idivm.warehouse import Warehouse

    pa = pytest.importorskip("pyarrow")
    spec = yelp.YelpSpec(businesses=25, users_per_business=1.5, seed=21)
    tables = _materialize(yelp.tables(spec))
    wh = Warehouse(tmp_path / "wh")
    for name, rows in tables.items():
        schema = datasets.arrow_schema(yelp.SCHEMAS[name])
        wh.create_table(name, yelp.KEYS[name], pa.Table.from_pylist(rows, schema=schema))
    current = _keyed(tables)
    for batch in yelp_changes.change_batches(spec, 3, 40):
        written = yelp_changes.write_batch(batch, tmp_path / "changes")
        for name, (path, count) in written.items():
            assert path == tmp_path / "changes" / f"batch-{batch.number:04d}" / f"{name}.jsonl"
            assert count == len(batch.events[name])
            result = wh.ingest(name, path, format="debezium")
            assert result.changes == count
            for event in batch.events[name]:
                _apply(current, name, event)
        for name, rows in current.items():
            key = yelp.KEYS[name]
            stored = sorted(delta.read_arrow(wh.table_path(name)).to_pylist(),
                            key=lambda r: tuple(r[k] for k in key))
            assert stored == [rows[k] for k in sorted(rows)], f"{name} after batch {batch.number}"


def test_cli_yelp_changes(tmp_path, capsys):
    out = tmp_path / "y"
    assert main(["yelp", "--scale", "30", "--seed", "4", "--changes", "2", "--batch-size", "25",
                 "--mix", "review_stars=1,user_elite=1,business_delete=1", "--changes-seed", "8",
                 "--out", str(out)]) == 0
    spec = yelp.YelpSpec(businesses=30, seed=4)
    for table, rows in _materialize(yelp.tables(spec)).items():
        assert list(datasets.read_jsonl(out / f"{table}.jsonl")) == rows
    mix = {"review_stars": 1, "user_elite": 1, "business_delete": 1}
    for batch in yelp_changes.change_batches(spec, 2, 25, mix=mix, seed=8):
        for table, events in batch.events.items():
            path = out / "changes" / f"batch-{batch.number:04d}" / f"{table}.jsonl"
            assert list(datasets.read_jsonl(path)) == events
    assert not (out / "changes" / "batch-0003").exists()
    assert "2 batches of 25 changes" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # refuses to mix batches of two runs
        main(["yelp", "--scale", "30", "--changes", "1", "--out", str(out)])
    with pytest.raises(SystemExit):
        main(["yelp", "--scale", "30", "--changes", "1", "--mix", "nope=1", "--out", str(tmp_path / "z")])
    capsys.readouterr()
