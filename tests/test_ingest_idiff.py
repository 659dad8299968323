"""``ingest --format idiff``: i-diffs of base-table rows (the package's i-diff JSON Schema),
inserts, deletes and whole-row updates by key, and updates by path of fields, structs and the
elements of nested collections named by their element keys.

The expected tables and quarantines are worked out by hand from the files; a nested view over
the table is maintained after updates by path and compared with its recomputation (verify) and
with rows written by hand."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from idivm import cli
from idivm.errors import DataError
from idivm.warehouse import Warehouse

ROWS = [
    {"business_id": "b1", "name": "Cafe", "stars": 4,
     "hours": [{"day": "Mon", "open": 9}, {"day": "Tue", "open": 10}],
     "address": {"city": "SF", "phones": [{"kind": "home", "n": "111"}, {"kind": "work", "n": "222"}]}},
    {"business_id": "b2", "name": "Deli", "stars": 3, "hours": [{"day": "Mon", "open": 8}],
     "address": {"city": "LA", "phones": []}},
]
ELEMENT_KEYS = {"hours": "day", "address.phones": "kind"}


def row(business_id, name, stars, hours, city, phones):
    return {"business_id": business_id, "name": name, "stars": stars,
            "hours": [{"day": d, "open": o} for d, o in hours],
            "address": {"city": city, "phones": [{"kind": k, "n": n} for k, n in phones]}}


def upd(post=None, diff=None, **provenance):
    node = {"type": "update"}
    if provenance:
        node = {"provenance": provenance, **node}
    if post is not None:
        node["post"] = post
    if diff is not None:
        node["diff"] = diff
    return node


def ins(post, **provenance):
    return {"provenance": provenance, "type": "insert", "post": post}


def dele(**provenance):
    return {"provenance": provenance, "type": "delete"}


def lines(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


@pytest.fixture
def wh(tmp_path):
    w = Warehouse(tmp_path / "wh")
    w.create_table("businesses", "business_id", ROWS, element_keys=ELEMENT_KEYS)
    return w


def table(wh):
    from idivm.storage import delta

    return sorted(delta.read_arrow(wh.table_path("businesses")).to_pylist(), key=lambda r: r["business_id"])


GOOD = [
    # 1: b1's name, a nested update of Mon's opening hour, a new Sun element, Tue deleted
    upd(business_id="b1", diff={
        "name": upd("Cafe Nord"),
        "hours": upd(diff=[upd(day="Mon", diff={"open": upd(8)}),
                           ins({"open": 11}, day="Sun"),
                           dele(day="Tue")])}),
    # 2: a path through a struct into its collection: b1's work phone changes, home is deleted
    upd(business_id="b1", diff={"address": upd(diff={"phones": upd(diff=[
        upd(kind="work", diff={"n": upd("333")}), dele(kind="home")])})}),
    # 3: an insert (its key taken from the provenance) and, on the same line, an update by path of it
    [ins({"name": "Bar", "stars": 5, "hours": [], "address": {"city": "SF", "phones": []}}, business_id="b3"),
     upd(business_id="b3", diff={"hours": upd(diff=[ins({"day": "Fri", "open": 17}, day="Fri")]),
                                 "stars": {"type": "delete"}})],
    # 4: b2 deleted
    dele(business_id="b2"),
    # 5: an update by path sees the earlier changes of the file: Mon of b1 is now 8, becomes 7
    upd(business_id="b1", diff={"hours": upd(diff=[upd(day="Mon", diff={"open": upd(7)})])}),
    # 6: a whole-row update (post) of a new key is an upsert
    upd(row("b4", "Shop", 2, [("Sat", 12)], "NY", [("fax", "9")]), business_id="b4"),
]

AFTER_GOOD = [
    row("b1", "Cafe Nord", 4, [("Mon", 7), ("Sun", 11)], "SF", [("work", "333")]),
    row("b3", "Bar", None, [("Fri", 17)], "SF", []),
    row("b4", "Shop", 2, [("Sat", 12)], "NY", [("fax", "9")]),
]


def test_inserts_deletes_and_updates_by_path_give_the_table_worked_out_by_hand(wh, tmp_path):
    r = wh.ingest("businesses", lines(tmp_path / "good.jsonl", GOOD), format="idiff")
    assert (r.changes, r.quarantined) == (6, 0)
    assert (r.inserted, r.updated, r.deleted) == (2, 1, 1)
    assert table(wh) == AFTER_GOOD
    assert wh.ingest("businesses", tmp_path / "good.jsonl", format="idiff").replayed == r.version


BAD = [
    ("{not json", "invalid JSON"),
    (upd(business_id="b1", diff={"name": {"type": "upsert", "post": "x"}}),
     "not an i-diff: $.diff.name.type: 'upsert' is not one of ['insert', 'delete', 'update']"),
    ({"provenance": {"business_id": "b1"}, "type": "insert", "pre": {}, "post": {}},
     "not an i-diff: $.pre: an insert i-diff has no pre: the value did not exist before"),
    ({"type": "delete"}, "$: the i-diff of a row needs the row's key as its provenance"),
    (dele(name="Cafe"), "$.provenance: 'name' is not a key column (key: business_id)"),
    (dele(business_id=None), "$.provenance has null in key column 'business_id'"),
    (upd(business_id="b1", diff={"hours": upd(diff=[upd(day="Mon", diff={"open": upd("nine")})])}),
     "$.diff.hours.diff[0].diff.open.post: column 'hours.open' (int64) expects an integer, got a string"),
    (upd(business_id="b9", diff={"name": upd("x")}), 'no row with business_id="b9" to update'),
    (upd(business_id="b1", diff={"hours": upd(diff=[dele(day="Wed")])}), 'hours: no element #(day="Wed") to delete'),
    (upd(business_id="b1", diff={"hours": upd(diff=[ins({"open": 1}, day="Mon")])}),
     'hours: insert of element #(day="Mon"), which is already there'),
    (upd(business_id="b1", diff={"business_id": upd("b7")}), "$.diff.business_id: business_id is a key"),
    (upd(business_id="b1", diff={"hours": upd(diff=[upd(open=9, diff={"day": upd("Wed")})])}),
     "hours: element #(open=9) is named by open, not by its element key (day)"),
    (upd(business_id="b1", diff={"address": upd(diff={"zip": upd("9")})}),
     "$.diff.address.diff.zip: no attribute 'zip' (attributes: city, phones)"),
    (upd(business_id="b1", diff={"hours": upd([{"day": "Mon", "open": 1}, {"day": "Mon", "open": 2}])}),
     'duplicate element key day="Mon" in hours at line 14'),
    (ins({"business_id": "b5", "name": "x"}, business_id="b6"),
     '$.post: business_id is "b5" but the provenance says "b6"'),
]


def test_bad_records_are_quarantined_with_line_and_reason_and_the_valid_ones_applied(wh, tmp_path):
    records = [r for r, _ in BAD] + [dele(business_id="b2")]
    feed = lines(tmp_path / "mixed.jsonl", records)
    r = wh.ingest("businesses", feed, format="idiff")
    assert (r.changes, r.deleted, r.quarantined) == (1, 1, len(BAD))
    assert [x["business_id"] for x in table(wh)] == ["b1"]
    assert table(wh)[0] == ROWS[0]  # no rejected record changed b1
    q = wh.quarantined("businesses").to_pylist()
    assert [x["line"] for x in q] == list(range(1, len(BAD) + 1))
    for x, (record, reason) in zip(q, BAD):
        assert reason in x["reason"], (x["line"], x["reason"])
        assert x["record"] == (record if isinstance(record, str) else json.dumps(record))
        assert x["format"] == "idiff"


def test_strict_names_file_and_line_and_applies_nothing(wh, tmp_path):
    feed = lines(tmp_path / "s.jsonl", [dele(business_id="b2"),
                                        upd(business_id="b1", diff={"hours": upd(diff=[dele(day="Sun")])})])
    with pytest.raises(DataError, match=r's\.jsonl:2: hours: no element #\(day="Sun"\) to delete'):
        wh.ingest("businesses", feed, format="idiff", strict=True)
    assert table(wh) == sorted(ROWS, key=lambda r: r["business_id"])


def test_an_unknown_column_is_schema_drift(wh, tmp_path):
    with pytest.raises(DataError, match=r"column 'rating' \(line 1\) not in the table"):
        wh.ingest("businesses", lines(tmp_path / "d.jsonl", [upd(business_id="b1", diff={"rating": upd(1)})]),
                  format="idiff")


def test_a_quarantined_update_by_path_is_replayed_once_its_row_exists(wh, tmp_path):
    patch = upd(business_id="b5", diff={"hours": upd(diff=[ins({"open": 6}, day="Sun")])})
    r = wh.ingest("businesses", lines(tmp_path / "early.jsonl", [patch]), format="idiff")
    assert r.quarantined == 1 and "no row with" in wh.quarantined("businesses").to_pylist()[0]["reason"]
    wh.ingest("businesses", lines(tmp_path / "row.jsonl", [ins(row("b5", "Late", 1, [], "SF", []), business_id="b5")]),
              format="idiff")
    r = wh.retry_quarantined("businesses")
    assert (r.updated, r.quarantined) == (1, 0)
    assert table(wh)[-1] == row("b5", "Late", 1, [("Sun", 6)], "SF", [])
    assert wh.quarantined("businesses").num_rows == 0


def test_the_command_line_takes_the_idiff_format(wh, tmp_path):
    feed = lines(tmp_path / "c.jsonl", [upd(business_id="b2", diff={"stars": upd(1)}), dele(business_id="b9x") | {
        "type": "oops"}])
    r = CliRunner().invoke(cli.cli, ["--warehouse", str(wh.path), "ingest", "businesses", str(feed),
                                     "--format", "idiff"], obj=cli.CliState())
    assert r.exit_code == 3, r.output
    assert "ingested 1 change from c.jsonl into businesses: 0 inserted, 1 updated, 0 deleted, 1 quarantined" in r.output
    assert table(wh)[1]["stars"] == 1


EARLY = ("CREATE VIEW early AS SELECT b.business_id, b.name, "
         "(SELECT h.day, h.open FROM b.hours AS h WHERE h.open < 10) AS days FROM businesses b")


def test_a_nested_view_follows_updates_by_path_and_equals_its_recomputation(make_warehouse, tmp_path):
    wh = make_warehouse()
    wh.create_table("businesses", "business_id", ROWS, element_keys=ELEMENT_KEYS)
    wh.define(EARLY, strategy="id")
    wh.ingest("businesses", lines(tmp_path / "good.jsonl", GOOD), format="idiff")
    (result,) = wh.maintain()
    assert result.strategy == "id", result.summary()
    assert wh.verify("early").ok
    early = {r["business_id"]: (r["name"], sorted((d["day"], d["open"]) for d in r["days"]))
             for r in wh.rows("early")}
    assert early == {"b1": ("Cafe Nord", [("Mon", 7)]), "b3": ("Bar", []), "b4": ("Shop", [])}


def test_an_update_by_path_is_applied_to_the_row_as_committed_when_another_writer_commits_first(wh, tmp_path,
                                                                                               monkeypatch):
    """Another writer changes b1's stars after this ingest read b1 to apply its update of the name,
    before it commits: the commit is refused, the ingest reads b1 again and keeps both changes."""
    import idivm.ingest as ingest

    real = ingest.apply_changes
    others = iter([lines(tmp_path / "other.jsonl", [upd(business_id="b1", diff={"stars": upd(5)})])])

    def overtaken(*args, **kwargs):
        other = next(others, None)
        if other is not None:  # the other writer's commit lands between this ingest's read and commit
            monkeypatch.setattr(ingest, "apply_changes", real)
            wh.ingest("businesses", other, format="idiff")
            monkeypatch.setattr(ingest, "apply_changes", overtaken)
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest, "apply_changes", overtaken)
    r = wh.ingest("businesses", lines(tmp_path / "mine.jsonl", [upd(business_id="b1", diff={"name": upd("Bar")})]),
                  format="idiff")
    assert r.updated == 1
    b1 = table(wh)[0]
    assert (b1["name"], b1["stars"]) == ("Bar", 5)


def test_a_file_ingested_by_two_writers_at_once_is_applied_once(wh, tmp_path, monkeypatch):
    """Both writers find the file not taken yet; the one that commits second is refused, reads the
    table again, finds the file taken and skips it."""
    import idivm.ingest as ingest

    feed = lines(tmp_path / "inc.jsonl", [upd(business_id="b2", diff={"stars": upd(1)}),
                                          ins(row("b3", "New", 2, [], "SF", []), business_id="b3")])
    real = ingest.apply_changes
    first = [True]

    def twice(*args, **kwargs):
        if first[0]:  # the other writer ingests the same file between this one's check and commit
            first[0] = False
            monkeypatch.setattr(ingest, "apply_changes", real)
            wh.ingest("businesses", feed, format="idiff")
            monkeypatch.setattr(ingest, "apply_changes", twice)
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest, "apply_changes", twice)
    r = wh.ingest("businesses", feed, format="idiff")
    assert r.replayed is not None and r.updated == 0
    assert [(b["business_id"], b["stars"]) for b in table(wh)] == [("b1", 4), ("b2", 1), ("b3", 2)]
    from idivm.storage import delta
    ingests = [c for c in delta.history(wh.table_path("businesses")) if c.get("idivm.operation") == "ingest"]
    assert len(ingests) == 1
