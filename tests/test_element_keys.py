"""Declared element keys of nested collections of tuples: validation on create, the catalog,
the CLI, and their use as provenance (view IDs) and as nested keys of base signatures."""

from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pytest

from idivm import cli
from idivm.catalog import Catalog
from idivm.errors import DataError, UnsupportedError
from idivm.warehouse import Warehouse

BUSINESSES = [
    {"business_id": "b1", "name": "Cafe", "hours": [{"day": "Mon", "open": 9}, {"day": "Tue", "open": 10}]},
    {"business_id": "b2", "name": "Deli", "hours": [{"day": "Mon", "open": 8}]},
    {"business_id": "b3", "name": "Shut", "hours": []},
]

HOURS_VIEW = "CREATE VIEW business_hours AS SELECT b.business_id, h.day, h.open FROM businesses b, b.hours AS h"


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def businesses(tmp_path) -> Path:
    return write_jsonl(tmp_path / "businesses.jsonl", BUSINESSES)


def test_create_with_element_key_from_jsonl(tmp_path, businesses):
    wh = Warehouse(tmp_path / "wh")
    info = wh.create_table("businesses", "business_id", businesses, element_keys={"hours": "day"})
    assert info.element_keys == {"hours": ("day",)}
    assert info.rows == 3
    assert wh.tables()[0].element_keys == {"hours": ("day",)}


def test_element_key_nested_in_collection_is_unique_per_containing_element(tmp_path):
    rows = [{"id": 1, "weeks": [{"w": 1, "hours": [{"day": "Mon"}, {"day": "Tue"}]},
                                {"w": 2, "hours": [{"day": "Mon"}]}]},
            {"id": 2, "weeks": [{"w": 1, "hours": [{"day": "Mon"}]}]}]
    wh = Warehouse(tmp_path / "wh")
    info = wh.create_table("t", "id", rows, element_keys={"weeks": "w", "weeks.hours": ["day"]})
    assert info.element_keys == {"weeks": ("w",), "weeks.hours": ("day",)}
    rows[1]["weeks"][0]["hours"].append({"day": "Mon"})
    with pytest.raises(DataError, match=r'^rows: duplicate element key day="Mon" in weeks.hours at index 1$'):
        wh.create_table("u", "id", rows, element_keys={"weeks.hours": "day"})


def test_element_key_under_a_tuple_attribute(tmp_path):
    rows = [{"id": 1, "address": {"city": "SF", "phones": [{"kind": "home", "n": "1"}, {"kind": "work", "n": "2"}]}}]
    info = Warehouse(tmp_path / "wh").create_table("p", "id", rows, element_keys={"address.phones": "kind"})
    assert info.element_keys == {"address.phones": ("kind",)}


@pytest.mark.parametrize("element_keys, rows, message", [
    ({"hourz": "day"}, BUSINESSES, "element key path hourz: no attribute hourz (attributes: business_id, name, hours)"),
    ({"hours.day.x": "y"}, BUSINESSES, "element key path hours.day.x: hours.day has type string, which has no attribute x"),
    ({"name": "x"}, BUSINESSES, "element key path name has type string, not a collection of tuples"),
    ({"tags": "x"}, [{"business_id": "b1", "tags": ["a", "b"]}],
     "tags is a collection of scalars ({{string}}), which needs no element key: each value is its own provenance"),
    ({"hours": "dax"}, BUSINESSES, "element key column dax not found in the elements of hours (attributes: day, open)"),
    ({"hours": "day"}, [BUSINESSES[0], {"business_id": "b2", "hours": [{"day": "Mon"}, {"day": None}]}],
     "element key column day of hours is null at line 2"),
    ({"hours": "day"}, [BUSINESSES[0], BUSINESSES[1], {"business_id": "b4", "hours": [{"day": "Sun"}, {"day": "Sun"}]}],
     'duplicate element key day="Sun" in hours at line 3'),
])
def test_bad_element_keys_are_one_line_errors_and_write_nothing(tmp_path, element_keys, rows, message):
    path = write_jsonl(tmp_path / "b.jsonl", rows)
    wh = Warehouse(tmp_path / "wh")
    with pytest.raises(DataError) as e:
        wh.create_table("businesses", "business_id", path, element_keys=element_keys)
    assert str(e.value) == f"{path}: {message}"
    assert "\n" not in str(e.value)
    assert not (tmp_path / "wh").exists()


def test_same_element_key_in_different_rows_is_fine(tmp_path):
    rows = [{"id": i, "hours": [{"day": "Mon"}, {"day": "Tue"}]} for i in range(3)]
    assert Warehouse(tmp_path / "wh").create_table("t", "id", rows, element_keys={"hours": "day"}).rows == 3


def test_composite_element_key(tmp_path):
    rows = [{"id": 1, "slots": [{"day": "Mon", "h": 9}, {"day": "Mon", "h": 10}]}]
    wh = Warehouse(tmp_path / "wh")
    assert wh.create_table("t", "id", rows, element_keys={"slots": "day,h"}).element_keys == {"slots": ("day", "h")}
    rows[0]["slots"].append({"day": "Mon", "h": 9})
    with pytest.raises(DataError, match=r'duplicate element key \(day="Mon", h=9\) in slots at index 0'):
        wh.create_table("u", "id", rows, element_keys={"slots": "day,h"})


def test_spark_dataframe_source(spark, tmp_path):
    schema = "business_id string, hours array<struct<day:string,open:long>>"
    wh = Warehouse(tmp_path / "wh", spark=spark)
    dup = spark.createDataFrame([("b1", [("Mon", 9)]), ("b2", [("Mon", 9), ("Mon", 10)])], schema)
    with pytest.raises(DataError, match=r'^DataFrame: duplicate element key day="Mon" in hours in the row with '
                                        r'business_id="b2"$'):
        wh.create_table("d", "business_id", dup, element_keys={"hours": "day"})
    null = spark.createDataFrame([("b1", [("Mon", 9), (None, 10)])], schema)
    with pytest.raises(DataError, match=r'^DataFrame: element key column day of hours is null in the row with '
                                        r'business_id="b1"$'):
        wh.create_table("d", "business_id", null, element_keys={"hours": "day"})
    good = spark.createDataFrame([("b1", [("Mon", 9)]), ("b2", [("Mon", 9)])], schema)
    assert wh.create_table("d", "business_id", good, element_keys={"hours": "day"}).element_keys == {"hours": ("day",)}


def test_catalog_round_trip(tmp_path, businesses):
    wh = Warehouse(tmp_path / "wh")
    wh.create_table("businesses", "business_id", businesses, element_keys={"hours": "day"})
    stored = json.loads((tmp_path / "wh" / "catalog.json").read_text())
    assert stored["tables"]["businesses"]["element_keys"] == {"hours": ["day"]}
    assert Catalog.load(tmp_path / "wh").table("businesses").element_keys == {"hours": ["day"]}
    del stored["tables"]["businesses"]["element_keys"]  # a catalog written before element keys
    assert Catalog.from_json(tmp_path / "wh", stored).table("businesses").element_keys == {}


def test_cli_element_key(capsys, tmp_path, businesses):
    wh = str(tmp_path / "wh")
    code = cli.main(["--warehouse", wh, "table", "create", "businesses", "--key", "business_id",
                     "--from", str(businesses), "--element-key", "hours=day"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == "created table businesses (key business_id; hours(day)): 3 rows, version 0\n"
    assert cli.main(["--warehouse", wh, "table", "list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "name        key                      rows  version",
        "businesses  business_id; hours(day)     3        0",
    ]
    code = cli.main(["--warehouse", wh, "table", "create", "b2", "--key", "business_id",
                     "--from", str(businesses), "--element-key", "hours=nope"])
    out, err = capsys.readouterr()
    assert code == 1
    assert err == f"error: {businesses}: element key column nope not found in the elements of hours (attributes: day, open)\n"
    code = cli.main(["--warehouse", wh, "table", "create", "b2", "--key", "business_id",
                     "--from", str(businesses), "--element-key", "hours"])
    assert code == 2
    assert "expected PATH=COL[,COL]" in capsys.readouterr().err


def test_view_over_nested_collection(make_warehouse, businesses):
    wh = make_warehouse()
    wh.create_table("businesses", "business_id", businesses, element_keys={"hours": "day"})
    info = wh.define(HOURS_VIEW)
    expected = [{"business_id": "b1", "day": "Mon", "open": 9},
                {"business_id": "b1", "day": "Tue", "open": 10},
                {"business_id": "b2", "day": "Mon", "open": 8}]
    key = lambda r: (r["business_id"], r["day"])  # noqa: E731
    assert sorted(wh.rows("business_hours"), key=key) == expected
    names = [f.name for f in deltalake.DeltaTable(str(info.path)).schema().fields]
    assert names == ["business_id", "day", "open", "__idivm_id_business_id", "__idivm_id_day"]


def test_nested_subquery_over_nested_collection_carries_provenance(make_warehouse, businesses):
    wh = make_warehouse()
    wh.create_table("businesses", "business_id", businesses, element_keys={"hours": "day"})
    info = wh.define("CREATE VIEW early AS SELECT b.business_id, "
                     "(SELECT h.day FROM b.hours AS h WHERE h.open < 10) AS days FROM businesses b")
    # read by delta-spark: the table may have deletion vectors (IDIVM_STORAGE=delta-spark-dv)
    stored = wh.spark.read.format("delta").load(str(info.path)).toArrow().to_pylist()
    days = {r["business_id"]: r["days"] for r in stored}
    assert days == {"b1": [{"day": "Mon", "__idivm_prov": {"day": "Mon"}}],
                    "b2": [{"day": "Mon", "__idivm_prov": {"day": "Mon"}}],
                    "b3": []}


def test_explain_ids_and_signatures(tmp_path, businesses):
    wh = Warehouse(tmp_path / "wh")
    wh.create_table("businesses", "business_id", businesses, element_keys={"hours": "day"})
    text = wh.explain(HOURS_VIEW)
    assert "IDs: {business_id, day}" in text
    assert "businesses.hours (key day)" in text
    assert "#(day) hours" in text
    data = json.loads(wh.explain(HOURS_VIEW, format="json"))
    nested = next(s for s in data["base_signatures"] if s["collection"] == ["hours"])
    assert nested["key"] == ["day"]


def test_without_element_key_the_view_has_no_key(tmp_path, businesses):
    wh = Warehouse(tmp_path / "wh")
    wh.create_table("businesses", "business_id", businesses)
    text = wh.explain(HOURS_VIEW)
    assert "IDs: unknown (the view has no inferable key: " in text
    assert "nested collection 'hours' has no declared element key): the view is recomputed" in text


ITEMS_VIEW = "CREATE VIEW items_flat AS SELECT d.id, it.sku, it.qty FROM docs d, d.items AS it WHERE it.qty >= 2"


def test_a_view_without_ids_is_recomputed_by_auto_and_recompute(spark, tmp_path):
    """Equal objects repeat in ``items``, so no element key can be declared: ``id`` and
    ``tuple`` refuse the view, ``auto`` and ``recompute`` recompute it (duplicates kept)."""
    wh = Warehouse(tmp_path / "wh", spark=spark)
    wh.create_table("docs", "id", [{"id": 1, "items": [{"sku": "a", "qty": 2}, {"sku": "a", "qty": 2},
                                                       {"sku": "b", "qty": 1}]},
                                   {"id": 2, "items": [{"sku": "c", "qty": 5}]}])
    for strategy in ("id", "tuple"):
        with pytest.raises(UnsupportedError, match="1:27: the view has no inferable key: .*'items' has no "
                                                   "declared element key"):
            wh.define(ITEMS_VIEW, strategy=strategy)
    assert wh.views() == []
    info = wh.define(ITEMS_VIEW)
    assert info.strategy == "auto" and "no inferable key" in info.strategy_note
    wh.define(ITEMS_VIEW.replace("items_flat", "items_again"), strategy="recompute")
    expected = [(1, "a", 2), (1, "a", 2), (2, "c", 5)]
    for name in ("items_flat", "items_again"):
        assert sorted((r["id"], r["sku"], r["qty"]) for r in wh.rows(name)) == expected
    wh.ingest("docs", write_jsonl(tmp_path / "c.jsonl", [
        {"id": 2, "items": [{"sku": "c", "qty": 5}, {"sku": "c", "qty": 5}]}]), format="rows")
    for result in wh.maintain():
        assert result.strategy == "recompute" and result.version == 1
    for name in ("items_flat", "items_again"):
        assert sorted((r["id"], r["sku"], r["qty"]) for r in wh.rows(name)) == expected[:2] + [(2, "c", 5)] * 2
        assert wh.verify(name).ok


def test_ingest_checks_element_keys(tmp_path):
    from idivm.errors import DataError
    from idivm.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh")
    wh.create_table("b", "id", [{"id": 1, "hours": [{"day": "mon", "open": 9}]}], element_keys={"hours": "day"})
    batch = tmp_path / "batch.jsonl"
    batch.write_text('{"id": 2, "hours": [{"day": "tue", "open": 8}]}\n'
                     '{"id": 3, "hours": [{"day": "wed", "open": 8}, {"day": "wed", "open": 10}]}\n')
    version = wh.table_info("b").version
    with pytest.raises(DataError, match=r"batch.jsonl.*line 2"):
        wh.ingest("b", batch, format="rows", strict=True)
    assert wh.table_info("b").version == version
    # by default the row breaking the key is quarantined and the other applied
    r = wh.ingest("b", batch, format="rows")
    assert (r.inserted, r.quarantined) == (1, 1)
    (q,) = wh.quarantined("b").to_pylist()
    assert q["line"] == 2 and 'duplicate element key day="wed" in hours' in q["reason"]
    assert q["record"] == batch.read_text().splitlines()[1]
    batch.write_text('{"id": 3, "hours": [{"day": "wed", "open": 8}, {"day": "thu", "open": 10}]}\n')
    assert wh.ingest("b", batch, format="rows").inserted == 1
