"""Dataset generators: determinism, knobs, keys, shipped samples and views (no Spark)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from idivm import datasets
from idivm.datasets import devices, yelp
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
        "devices_cost", "devices_v", "sf_reviews", "sf_reviews_flat", "sf_reviews_grouped",
    ]
    names = {
        "devices_v": "phone_parts", "devices_cost": "phone_cost", "sf_reviews": "sf_reviews",
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
