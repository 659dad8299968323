"""Ingest of change files into base tables: Debezium events and whole rows, one MERGE commit each."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from idivm import cli
from idivm.errors import DataError
from idivm.ingest import IngestResult
from idivm.storage import delta
from idivm.warehouse import Warehouse

BASE = [
    {"id": 1, "name": "ann", "tags": [1, 2], "hours": [{"day": "mon", "open": 9}]},
    {"id": 2, "name": "bob", "tags": [], "hours": [{"day": "tue", "open": 10}, {"day": "wed", "open": 11}]},
    {"id": 3, "name": "cy", "tags": [3], "hours": []},
]


@pytest.fixture
def wh(tmp_path):
    w = Warehouse(tmp_path / "wh")
    w.create_table("users", "id", BASE)
    return w


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def event(op, before=None, after=None):
    return {"before": before, "after": after, "op": op, "source": {"table": "users"}, "ts_ms": 1700000000000}


def envelope(payload):
    return {"schema": {"type": "struct", "fields": [], "name": "users.Envelope"}, "payload": payload}


def content(wh, table="users"):
    return sorted(delta.read_arrow(wh.table_path(table)).to_pylist(), key=lambda r: r["id"])


def changes(wh, version, table="users"):
    rows = delta.read_changes(wh.table_path(table), version, version).to_pylist()
    return sorted((r["_change_type"], r["id"], r["name"]) for r in rows)


def version(wh, table="users"):
    return delta.version(wh.table_path(table))


def test_debezium_bare_and_envelope_events_of_every_op(wh, tmp_path):
    d = {"id": 4, "name": "dee", "tags": [4, 4], "hours": [{"day": "fri", "open": None}]}
    e = {"id": 5, "name": "eve", "tags": None, "hours": []}
    ann2 = {"id": 1, "name": "ann", "tags": [1, 2, 7], "hours": [{"day": "mon", "open": 8}, {"day": "sat", "open": 12}]}
    bob2 = {"id": 2, "name": "bobby", "tags": [], "hours": []}
    path = write(tmp_path, "batch-0001.jsonl", [
        event("c", after=d),
        envelope(event("r", after=e)),
        event("u", before=BASE[0], after=ann2),
        "null",
        envelope(event("u", before=BASE[1], after=bob2)),
        envelope(None),
        "",
        event("d", before=BASE[2]),
    ])
    result = wh.ingest("users", path)
    assert result == IngestResult(changes=5, inserted=2, updated=2, deleted=1, skipped=3, version=1)
    assert content(wh) == [ann2, bob2, d, e]
    assert changes(wh, 1) == [
        ("delete", 3, "cy"), ("insert", 4, "dee"), ("insert", 5, "eve"),
        ("update_postimage", 1, "ann"), ("update_postimage", 2, "bobby"),
        ("update_preimage", 1, "ann"), ("update_preimage", 2, "bob"),
    ]
    commit = delta.history(wh.table_path("users"), 1)[0]
    assert (commit["version"], commit["operation"]) == (1, "MERGE")
    assert {k: commit[k] for k in ("idivm.operation", "idivm.source", "idivm.changes")} == {
        "idivm.operation": "ingest", "idivm.source": "batch-0001.jsonl", "idivm.changes": 5}
    assert wh._spark is None  # ingest never starts Spark


def test_one_commit_per_ingest(wh, tmp_path):
    for n in range(1, 4):
        path = write(tmp_path, f"b{n}.jsonl", [event("u", after={**BASE[0], "name": f"ann{n}"})])
        assert wh.ingest("users", path).version == n
        assert version(wh) == n
    assert content(wh)[0]["name"] == "ann3"


def test_condensation_per_key(wh, tmp_path):
    path = write(tmp_path, "c.jsonl", [
        event("u", after={**BASE[0], "name": "a1"}),            # several updates of one key: the last wins
        event("u", after={**BASE[0], "name": "a2", "tags": [9]}),
        event("c", after={"id": 7, "name": "tmp"}),               # insert then delete of a new key: nothing
        event("d", before={"id": 7}),
        event("d", before=BASE[1]),                               # delete then reinsert: an update
        event("c", after={"id": 2, "name": "bob again", "tags": [5], "hours": [{"day": "sun", "open": 1}]}),
        event("u", after={**BASE[2], "name": "c1"}),              # update then delete: a delete
        event("d", before={"id": 3}),
    ])
    result = wh.ingest("users", path)
    assert result == IngestResult(changes=8, inserted=0, updated=2, deleted=1, skipped=0, version=1)
    assert content(wh) == [
        {"id": 1, "name": "a2", "tags": [9], "hours": [{"day": "mon", "open": 9}]},
        {"id": 2, "name": "bob again", "tags": [5], "hours": [{"day": "sun", "open": 1}]},
    ]
    assert changes(wh, 1) == [
        ("delete", 3, "cy"),
        ("update_postimage", 1, "a2"), ("update_postimage", 2, "bob again"),
        ("update_preimage", 1, "ann"), ("update_preimage", 2, "bob"),
    ]


def test_changes_without_net_effect_still_make_one_commit(wh, tmp_path):
    path = write(tmp_path, "noop.jsonl", [event("c", after={"id": 9, "name": "x"}), event("d", before={"id": 9})])
    result = wh.ingest("users", path)
    assert result == IngestResult(changes=2, inserted=0, updated=0, deleted=0, skipped=0, version=1)
    assert content(wh) == BASE and changes(wh, 1) == []
    assert delta.history(wh.table_path("users"), 1)[0]["idivm.source"] == "noop.jsonl"


@pytest.mark.parametrize("lines", [[], [""], ["null", envelope(None), ""]])
def test_empty_change_set_commits_nothing(wh, tmp_path, lines):
    result = wh.ingest("users", write(tmp_path, "empty.jsonl", lines))
    assert result == IngestResult(changes=0, inserted=0, updated=0, deleted=0, skipped=len(lines), version=0)
    assert version(wh) == 0


def test_key_change_in_an_update_deletes_the_old_key(wh, tmp_path):
    path = write(tmp_path, "k.jsonl", [event("u", before=BASE[2], after={**BASE[2], "id": 30})])
    assert wh.ingest("users", path) == IngestResult(1, 1, 0, 1, 0, 1)
    assert [r["id"] for r in content(wh)] == [1, 2, 30]


def test_envelope_schema_gives_the_unit_of_integer_timestamps(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    wh.create_table("events", "id", [{"id": 1, "at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
                                      "on": dt.date(2024, 1, 1)}])
    schema = {"type": "struct", "fields": [
        {"type": "struct", "field": "after", "fields": [
            {"type": "int64", "field": "at", "name": "io.debezium.time.MicroTimestamp"}]}]}
    path = write(tmp_path, "t.jsonl", [
        {"schema": schema, "payload": event("c", after={"id": 2, "at": 1_700_000_000_000_000, "on": 19723})},
        event("c", after={"id": 3, "at": "2024-05-06T07:08:09+02:00", "on": "2024-05-06"}),
    ])
    wh.ingest("events", path)
    rows = sorted(delta.read_arrow(wh.table_path("events")).to_pylist(), key=lambda r: r["id"])
    utc = dt.timezone.utc
    assert rows[1:] == [
        {"id": 2, "at": dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=utc), "on": dt.date(2024, 1, 1)},
        {"id": 3, "at": dt.datetime(2024, 5, 6, 5, 8, 9, tzinfo=utc), "on": dt.date(2024, 5, 6)},
    ]
    bare = write(tmp_path, "bare.jsonl", [event("c", after={"id": 4, "at": 1_700_000_000_000})])
    with pytest.raises(DataError, match=r"^bare.jsonl:1: after: column 'at' .*an integer needs a Debezium schema"):
        wh.ingest("events", bare, strict=True)


GOOD = event("c", after={"id": 8, "name": "ok"})


@pytest.mark.parametrize("bad, line, problem", [
    ('{"op": "c", "after": {"id": 9', 2, "invalid JSON"),
    (event("x", after={"id": 9}), 2, "unknown op 'x'"),
    (event("t"), 2, "unknown op 't'"),
    ({"before": None, "after": {"id": 9}}, 2, "no 'op' field"),
    ([1, 2], 2, "expected a Debezium event (a JSON object), got an array"),
    (envelope([1]), 2, "payload is an array"),
    (event("c"), 2, "create event (op 'c') without 'after'"),
    (event("r"), 2, "snapshot read event (op 'r') without 'after'"),
    (event("u", before=BASE[0]), 2, "update event (op 'u') without 'after'"),
    (event("d", after=BASE[0]), 2, "delete event (op 'd') without 'before'"),
    (event("c", after=[1, 2]), 2, "after is an array, not an object"),
    (event("d", before="x"), 2, "before is a string, not an object"),
    (event("c", after={"name": "no key"}), 2, "after lacks key column 'id'"),
    (event("c", after={"id": None, "name": "null key"}), 2, "after has null in key column 'id'"),
    (event("d", before={"name": "bob"}), 2, "before lacks key column 'id'"),
    (event("c", after={"id": 9, "email": "x@y"}), 2, "after has column 'email', which table columns"),
    (event("c", after={"id": "9"}), 2, "column 'id' (int64) expects an integer, got a string \"9\""),
    (event("c", after={"id": 9, "name": 5}), 2, "column 'name' (string) expects a string, got an integer 5"),
    (event("c", after={"id": 9, "tags": [1, "two"]}), 2, "column 'tags[]' (int64) expects an integer, got a string"),
    (event("c", after={"id": 9, "tags": 1}), 2, "column 'tags' (list<element: int64>) expects an array"),
    (event("c", after={"id": 9, "hours": [{"day": 1}]}), 2, "column 'hours[].day' (string) expects a string"),
    (event("c", after={"id": 9, "hours": [{"dy": "mon"}]}), 2, "column 'hours[]' has no field 'dy'"),
    (event("c", after={"id": 2 ** 70}), 2, "expects an integer in"),
])
def test_bad_record_names_file_and_line_and_applies_nothing(wh, tmp_path, bad, line, problem):
    path = write(tmp_path, "bad.jsonl", [GOOD, bad, GOOD])
    with pytest.raises(DataError) as info:
        wh.ingest("users", path, strict=True)
    message = str(info.value)
    assert message.startswith(f"bad.jsonl:{line}: ") and problem in message and "\n" not in message
    assert version(wh) == 0 and content(wh) == BASE
    assert wh.quarantined("users").num_rows == 0
    if "which table columns" in problem:  # schema drift: the whole file, strict or not
        with pytest.raises(DataError, match=r"^bad.jsonl: column 'email' \(line 2\) not in the table"):
            wh.ingest("users", path)
        assert version(wh) == 0 and wh.quarantined("users").num_rows == 0
        return
    # by default the bad record is quarantined, with its position, reason and text, and the rest applied
    result = wh.ingest("users", path)
    assert (result.quarantined, result.inserted, result.version) == (1, 1, 1)
    (q,) = wh.quarantined("users").to_pylist()
    text = bad if isinstance(bad, str) else json.dumps(bad)
    assert (q["source"], q["line"], q["format"], q["record"]) == ("bad.jsonl", line, "debezium", text)
    assert problem in q["reason"] and q["origin"].startswith("sha256:")
    assert content(wh) == sorted([*BASE, {"id": 8, "name": "ok", "tags": None, "hours": None}], key=lambda r: r["id"])


def test_bad_record_after_many_good_ones(wh, tmp_path):
    lines = [event("c", after={"id": 100 + i, "name": "n"}) for i in range(40)] + ["null", "[]"]
    with pytest.raises(DataError, match=r"^bad.jsonl:42: expected a Debezium event"):
        wh.ingest("users", write(tmp_path, "bad.jsonl", lines), strict=True)
    assert version(wh) == 0


def test_rows_format_upserts_and_deletes_by_key(wh, tmp_path):
    path = write(tmp_path, "rows.jsonl", [
        {"id": 1, "name": "ann2"},                                  # absent columns become null
        {"id": 4, "name": "dan", "tags": [4], "hours": [{"day": "mon", "open": 1}]},
        {"__delete": {"id": 2}},
        "",
        {"__delete": {"id": 99}},                                   # no such key: nothing
    ])
    result = wh.ingest("users", path, format="rows")
    assert result == IngestResult(changes=4, inserted=1, updated=1, deleted=1, skipped=0, version=1)
    assert content(wh) == [
        {"id": 1, "name": "ann2", "tags": None, "hours": None},
        BASE[2],
        {"id": 4, "name": "dan", "tags": [4], "hours": [{"day": "mon", "open": 1}]},
    ]


@pytest.mark.parametrize("bad, problem", [
    ({"__delete": {"id": 2}, "name": "x"}, "a '__delete' line holds nothing else"),
    ({"__delete": {"name": "bob"}}, "__delete lacks key column 'id'"),
    ({"__delete": 2}, "__delete is an integer, not an object"),
    ({"name": "no key"}, "row lacks key column 'id'"),
    ("null", "expected a row (a JSON object), got null"),
])
def test_rows_format_bad_lines(wh, tmp_path, bad, problem):
    with pytest.raises(DataError) as info:
        wh.ingest("users", write(tmp_path, "r.jsonl", [{"id": 5}, bad]), format="rows", strict=True)
    assert str(info.value).startswith("r.jsonl:2: ") and problem in str(info.value)
    assert version(wh) == 0


def test_unknown_format_and_table(wh, tmp_path):
    path = write(tmp_path, "x.jsonl", [GOOD])
    with pytest.raises(DataError, match="unknown ingest format 'csv'"):
        wh.ingest("users", path, format="csv")
    with pytest.raises(Exception, match="unknown table 'nope'"):
        wh.ingest("nope", path)
    with pytest.raises(DataError, match="no such file"):
        wh.ingest("users", tmp_path / "missing.jsonl")


def run(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_ingest(capsys, wh, tmp_path):
    home = str(wh.path)
    path = write(tmp_path, "batch.jsonl", [GOOD, event("u", after={**BASE[0], "name": "a"}),
                                           event("d", before={"id": 3}), "null"])
    assert run(capsys, "--warehouse", home, "ingest", "users", str(path)) == (
        0, "ingested 3 changes from batch.jsonl into users: 1 inserted, 1 updated, 1 deleted, 1 skipped; "
           "version 1\n", "")
    rows = write(tmp_path, "rows.jsonl", [{"__delete": {"id": 8}}])
    assert run(capsys, "--warehouse", home, "ingest", "users", str(rows), "--format", "rows") == (
        0, "ingested 1 change from rows.jsonl into users: 0 inserted, 0 updated, 1 deleted; version 2\n", "")
    empty = write(tmp_path, "empty.jsonl", [])
    assert run(capsys, "--warehouse", home, "ingest", "users", str(empty)) == (
        0, "ingested 0 changes from empty.jsonl into users: nothing to commit, version 2\n", "")


def test_cli_ingest_errors(capsys, wh, tmp_path):
    home = str(wh.path)
    bad = write(tmp_path, "bad.jsonl", [GOOD, event("c", after={"id": 9, "name": 5})])
    code, out, err = run(capsys, "--warehouse", home, "ingest", "users", str(bad), "--strict")
    assert (code, out) == (1, "")
    assert err == ("error: bad.jsonl:2: after: column 'name' (string) expects a string, got an integer 5\n")
    code, out, err = run(capsys, "--warehouse", home, "ingest", "users", str(bad), "--format", "xml")
    assert code == 2 and "Invalid value for '--format'" in err
    code, _, err = run(capsys, "--warehouse", home, "ingest", "nope", str(bad))
    assert code == 1 and err.startswith("error: unknown table 'nope'")
    assert version(wh) == 0


def test_scalar_types(tmp_path):
    import decimal

    import pyarrow as pa

    wh = Warehouse(tmp_path / "wh")
    wh.create_table("p", "k", pa.table({
        "k": pa.array([1], pa.int32()), "price": pa.array([decimal.Decimal("1.50")], pa.decimal128(5, 2)),
        "blob": pa.array([b"x"], pa.binary()), "ok": [True], "score": [0.5], "day": [dt.date(2024, 1, 1)]}))
    path = write(tmp_path, "p.jsonl", [
        {"k": 2, "price": "12.30", "blob": "aGk=", "ok": False, "score": 3, "day": "2024-02-29"},
        {"k": 3, "price": 7, "blob": None, "ok": None, "score": 1.25, "day": 0},
    ])
    assert wh.ingest("p", path, format="rows").inserted == 2
    rows = sorted(delta.read_arrow(wh.table_path("p")).to_pylist(), key=lambda r: r["k"])
    assert rows[1:] == [
        {"k": 2, "price": decimal.Decimal("12.30"), "blob": b"hi", "ok": False, "score": 3.0, "day": dt.date(2024, 2, 29)},
        {"k": 3, "price": decimal.Decimal("7.00"), "blob": None, "ok": None, "score": 1.25, "day": dt.date(1970, 1, 1)},
    ]
    for bad, problem in [({"k": 4, "price": "1.234"}, "column 'price' (decimal128(5, 2)) expects a decimal"),
                         ({"k": 4, "ok": 1}, "column 'ok' (bool) expects a boolean"),
                         ({"k": 2 ** 40}, "column 'k' (int32) expects an integer in"),
                         ({"k": 4, "blob": "not base64!"}, "column 'blob' (binary) expects base64 text"),
                         ({"k": 4, "day": "29.02.2024"}, "column 'day' (date32[day]) expects a date")]:
        with pytest.raises(DataError) as info:
            wh.ingest("p", write(tmp_path, "bad.jsonl", [bad]), format="rows", strict=True)
        assert str(info.value).startswith("bad.jsonl:1: row: ") and problem in str(info.value)
    assert delta.version(wh.table_path("p")) == 1


def test_debezium_logical_types_of_decimals_and_times(tmp_path):
    """Kafka Connect ``Decimal`` in precise mode (base64 of the unscaled value, its scale in the
    envelope's schema), ``VariableScaleDecimal``, the string and double modes, ``ZonedTimestamp``
    and ``Date``; the encodings below are worked out by hand (1230 = 0x04CE, -1230 = 0xFB32)."""
    import decimal

    import pyarrow as pa

    wh = Warehouse(tmp_path / "wh")
    wh.create_table("m", "id", pa.table({
        "id": pa.array([0], pa.int64()), "price": pa.array([decimal.Decimal("0.00")], pa.decimal128(8, 2)),
        "ratio": pa.array([0.0], pa.float64()), "at": pa.array([dt.datetime(2020, 1, 1)], pa.timestamp("us", "UTC")),
        "on": pa.array([dt.date(2020, 1, 1)], pa.date32())}))
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "8"}},
        {"field": "ratio", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "3"}},
        {"field": "at", "type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        {"field": "on", "type": "int32", "name": "io.debezium.time.Date"}]}]}
    path = write(tmp_path, "m.jsonl", [
        {"schema": schema, "payload": event("c", after={"id": 1, "price": "BM4=", "ratio": "+zI=",
                                                        "at": "2024-05-06T07:08:09+02:00", "on": 19000})},
        event("c", after={"id": 2, "price": {"scale": 1, "value": "BM4="}, "ratio": {"scale": 4, "value": "+zI="}}),
        event("c", after={"id": 3, "price": "BM4=", "ratio": 2.5}),       # no schema: the column's scale
        event("c", after={"id": 4, "price": "7.25", "ratio": "1.5"}),     # string mode; a double column takes no string
    ])
    r = wh.ingest("m", path)
    assert (r.inserted, r.quarantined) == (3, 1)
    rows = {row["id"]: row for row in delta.read_arrow(wh.table_path("m")).to_pylist()}
    d = decimal.Decimal
    assert rows[1]["price"] == d("12.30") and rows[1]["ratio"] == -1.23
    assert rows[1]["at"] == dt.datetime(2024, 5, 6, 5, 8, 9, tzinfo=dt.timezone.utc) and rows[1]["on"] == dt.date(2022, 1, 8)
    assert rows[2]["price"] == d("123.00") and rows[2]["ratio"] == -0.123
    assert rows[3]["price"] == d("12.30") and rows[3]["ratio"] == 2.5
    (q,) = wh.quarantined("m").to_pylist()
    assert q["line"] == 4 and "column 'ratio' (double) expects a number" in q["reason"]


# --- schema evolution (ingest --evolve) ----------------------------------------------------------

DRIFT = [event("c", after={"id": 4, "name": "dee", "email": "d@x", "age": 40}),
         event("u", before={"id": 1}, after={**BASE[0], "email": "a@x"}),
         event("c", after={"id": 5, "name": "eve", "age": 7})]


def test_drift_is_an_error_naming_the_columns_and_evolve_adds_them_in_one_commit(wh, tmp_path):
    path = write(tmp_path, "drift.jsonl", DRIFT)
    with pytest.raises(DataError, match=r"^drift.jsonl: columns 'email' \(line 1\), 'age' \(line 1\) not in the "
                                        r"table .*ingest --evolve adds them"):
        wh.ingest("users", path)
    assert version(wh) == 0
    result = wh.ingest("users", path, evolve=True)
    assert (result.inserted, result.updated, result.version, result.added) == (2, 1, 1, ("email", "age"))
    schema = delta.schema(wh.table_path("users"))
    # after the columns there were (delta-rs adds them in an order of its own)
    assert sorted((f.name, str(f.type), f.nullable) for f in list(schema)[4:]) == [("age", "int64", True),
                                                                             ("email", "string", True)]
    info = wh.table_info("users")
    assert info.schema.names[:4] == ("id", "name", "tags", "hours")
    assert set(info.schema.names[4:]) == {"email", "age"} and len(info.schema.names) == 6
    assert str(info.schema.field("age")) == str(wh.table_info("users").schema.field("id"))  # both integers
    got = {r["id"]: (r["email"], r["age"]) for r in content(wh)}
    assert got == {1: ("a@x", None), 2: (None, None), 3: (None, None), 4: ("d@x", 40), 5: (None, 7)}
    # the evolved table takes the new columns like any other, with or without --evolve
    again = write(tmp_path, "more.jsonl", [event("u", before={"id": 2}, after={"id": 2, "name": "bob", "age": 9})])
    assert wh.ingest("users", again).updated == 1
    assert {r["id"]: r["age"] for r in content(wh)}[2] == 9


@pytest.mark.parametrize("after, problem", [
    ({"id": 9, "nothing": None}, "new column 'nothing' is null in every record"),
    ({"id": 9, "__idivm_x": 1}, "column name '__idivm_x' is not allowed: names starting with '__' are reserved"),
    ({"id": 9, "bad\tname": 1}, "control characters"),
])
def test_evolve_refuses_columns_it_cannot_type_or_name(wh, tmp_path, after, problem):
    path = write(tmp_path, "drift.jsonl", [event("c", after=after)])
    with pytest.raises(DataError) as info:
        wh.ingest("users", path, evolve=True)
    assert problem in info.value.one_line() and "\n" not in info.value.one_line()
    assert version(wh) == 0 and wh.table_info("users").schema.names == ("id", "name", "tags", "hours")


def test_evolve_types_values_of_different_types_as_a_union(wh, tmp_path):
    from idivm import types as T

    path = write(tmp_path, "drift.jsonl", [event("c", after={"id": 8, "x": 1}), event("c", after={"id": 9, "x": "a"})])
    wh.ingest("users", path, evolve=True)
    assert wh.table_info("users").schema.field("x") == T.UnionType((T.INT, T.STRING))
    wh.define("CREATE VIEW xs AS SELECT u.id, u.x FROM users u WHERE u.x IS NOT UNKNOWN")
    assert sorted(wh.rows("xs"), key=lambda r: r["id"]) == [{"id": 8, "x": 1}, {"id": 9, "x": "a"}]


def test_cli_ingest_evolve(capsys, wh, tmp_path):
    path = write(tmp_path, "drift.jsonl", DRIFT)
    code, out, err = run(capsys, "--warehouse", str(wh.path), "ingest", "users", str(path))
    assert code == 1 and "ingest --evolve adds them" in err
    code, out, err = run(capsys, "--warehouse", str(wh.path), "ingest", "users", str(path), "--evolve")
    assert (code, err) == (0, "")
    assert out == ("ingested 3 changes from drift.jsonl into users: 2 inserted, 1 updated, 0 deleted; "
                   "added columns 'email', 'age'; version 1\n")


def test_views_over_an_evolved_table_stay_equal_to_their_recomputation(make_warehouse, tmp_path):
    wh = make_warehouse()
    wh.create_table("users", "id", BASE, element_keys={"hours": "day"})
    wh.define("CREATE VIEW days AS SELECT u.id, u.name, (SELECT h.day FROM u.hours AS h WHERE h.open > 9) AS late "
              "FROM users AS u", strategy="id")
    wh.define("CREATE VIEW names AS SELECT u.id, u.name FROM users AS u WHERE u.id > 1", strategy="tuple")
    wh.ingest("users", write(tmp_path, "drift.jsonl", [
        *DRIFT, event("u", before={"id": 2}, after={**BASE[1], "hours": [{"day": "tue", "open": 12}], "age": 3})]),
        evolve=True)
    for result in wh.maintain():
        assert result.version is not None
    for name in ("days", "names"):
        assert wh.verify(name).ok
    assert sorted((r["id"], r["name"], sorted(e["day"] for e in r["late"])) for r in wh.rows("days")) == [
        (1, "ann", []), (2, "bob", ["tue"]), (3, "cy", []), (4, "dee", []), (5, "eve", [])]
    # a view defined after the evolving ingest reads the new columns
    wh.define("CREATE VIEW ages AS SELECT u.id, u.age, u.email FROM users AS u WHERE u.age IS NOT NULL",
              strategy="id")
    assert sorted((r["id"], r["age"], r["email"]) for r in wh.rows("ages")) == [(2, 3, None), (4, 40, "d@x"),
                                                                                  (5, 7, None)]
    wh.ingest("users", write(tmp_path, "more.jsonl", [event("u", before={"id": 1}, after={**BASE[0], "age": 1}),
                                                      event("d", before={"id": 4})]))
    wh.maintain()
    for name in ("days", "names", "ages"):
        assert wh.verify(name).ok, wh.verify(name).summary()
    assert sorted((r["id"], r["age"]) for r in wh.rows("ages")) == [(1, 1), (2, 3), (5, 7)]


def test_evolve_refuses_a_column_a_view_reads_as_missing(make_warehouse, tmp_path):
    """A view defined while the table lacked ``age`` reads it as MISSING: adding the column would
    leave that view answering for a table it no longer describes, so the batch is refused
    (nothing applied) naming the view; without that view the same batch evolves the table."""
    wh = make_warehouse()
    wh.create_table("users", "id", BASE, element_keys={"hours": "day"})
    wh.define("CREATE VIEW adults AS SELECT u.id FROM users AS u WHERE u.age >= 18")
    wh.define("CREATE VIEW named AS SELECT u.id, u.name FROM users AS u")
    assert wh.rows("adults") == []
    path = write(tmp_path, "drift.jsonl", DRIFT)
    with pytest.raises(DataError, match=r"^drift.jsonl: ingest --evolve would add column 'age', which view adults "
                                        r"reads as MISSING .*nothing was ingested"):
        wh.ingest("users", path, evolve=True)
    assert version(wh) == 0 and wh.table_info("users").schema.names == ("id", "name", "tags", "hours")
    wh.drop_view("adults")
    assert wh.ingest("users", path, evolve=True).added == ("email", "age")
    wh.maintain()
    assert wh.verify("named").ok
    wh.define("CREATE VIEW adults AS SELECT u.id FROM users AS u WHERE u.age >= 18")
    assert wh.rows("adults") == [{"id": 4}]
