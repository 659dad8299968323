"""Feeds (a file, a directory, standard input), exactly-once ingestion and the quarantine.

* A batch (a file) is taken once: ingesting the same bytes again, under any name, is skipped
  and names the version that took it; a directory is ingested file by file in name order,
  and ingesting it again takes only the files added since.
* A hand-written corpus of Debezium events (every op, bad records of each kind, duplicates,
  several operations on one key) gives the table and the quarantine written out below.
* Crashes between the quarantine's commit and the table's, and in a retry, neither lose nor
  double a record.
* A retry replays the quarantined records as they are or a corrected feed in their place.
* The command line: exit code 3 when anything was quarantined, ``quarantine list|show|retry``.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from idivm import cli
from idivm.errors import DataError
from idivm.storage import delta
from idivm.warehouse import Warehouse

BASE = [{"id": 1, "name": "ann", "score": 10}, {"id": 2, "name": "bob", "score": 20}]


@pytest.fixture
def wh(tmp_path):
    w = Warehouse(tmp_path / "wh")
    w.create_table("users", "id", BASE)
    return w


def ev(op, before=None, after=None):
    return json.dumps({"before": before, "after": after, "op": op, "ts_ms": 1})


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def content(wh):
    return sorted(delta.read_arrow(wh.table_path("users")).to_pylist(), key=lambda r: r["id"])


def version(wh):
    return delta.version(wh.table_path("users"))


def test_the_same_file_is_taken_once_under_any_name(wh, tmp_path):
    a = write(tmp_path / "a.jsonl", [ev("c", after={"id": 3, "name": "cy", "score": 1}),
                                     ev("u", after={"id": 1, "name": "ann", "score": 11})])
    first = wh.ingest("users", a)
    assert (first.inserted, first.updated, first.version, first.replayed) == (1, 1, 1, None)
    again = wh.ingest("users", a)
    assert (again.replayed, again.changes, again.version) == (1, 0, 1)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(a.read_bytes())
    assert wh.ingest("users", copy).replayed == 1
    assert version(wh) == 1 and content(wh)[0]["score"] == 11
    # the same changes in other bytes are another batch
    write(tmp_path / "b.jsonl", [ev("u", after={"id": 1, "name": "ann", "score": 11})])
    assert wh.ingest("users", tmp_path / "b.jsonl").version == 2


def test_a_directory_is_taken_file_by_file_in_name_order_and_again_only_its_new_files(wh, tmp_path):
    feed = tmp_path / "feed"
    feed.mkdir()
    write(feed / "0002.jsonl", [ev("u", after={"id": 1, "name": "ann", "score": 12})])
    write(feed / "0001.jsonl", [ev("u", after={"id": 1, "name": "ann", "score": 11}),
                                ev("c", after={"id": 3, "name": "cy", "score": 30})])
    write(feed / ".0003.jsonl.tmp", ["not even JSON"])  # a file still being written: hidden, left alone
    r = wh.ingest("users", feed)
    assert [b.source for b in r.batches] == ["0001.jsonl", "0002.jsonl"] and [b.version for b in r.batches] == [1, 2]
    assert (r.changes, r.inserted, r.updated, r.version) == (3, 1, 2, 2)
    assert content(wh)[0]["score"] == 12
    write(feed / "0003.jsonl", [ev("d", before={"id": 2})])
    r = wh.ingest("users", feed)
    assert [b.replayed for b in r.batches] == [1, 2, None] and r.deleted == 1 and version(wh) == 3
    assert [row["id"] for row in content(wh)] == [1, 3]


CORPUS = [
    ev("c", after={"id": 3, "name": "cy", "score": 30}),                        # 1 insert
    ev("u", before={"id": 3}, after={"id": 3, "name": "cy", "score": 31}),      # 2 update of it
    ev("u", before={"id": 1}, after={"id": 4, "name": "ann", "score": 10}),     # 3 key change: delete 1, insert 4
    "",                                                                         # 4 blank: a tombstone
    "null",                                                                     # 5 tombstone
    '{"op": "c", "after": {"id": 9',                                            # 6 malformed JSON
    ev("c", after={"id": 5, "name": "eve", "score": "high"}),                   # 7 wrong type
    ev("c", after={"name": "no key", "score": 1}),                              # 8 missing key
    ev("d", before={"id": None}),                                               # 9 null key
    ev("x", after={"id": 6}),                                                   # 10 unknown op
    json.dumps({"schema": {}, "payload": None}),                                # 11 tombstone in an envelope
    json.dumps({"schema": {}, "payload": json.loads(ev("r", after={"id": 7, "name": "gus", "score": 70}))}),  # 12
    ev("d", before={"id": 2}),                                                  # 13 delete
    ev("c", after={"id": 2, "name": "bob", "score": 21}),                       # 14 ... and back
    ev("c", after={"id": 3, "name": "cy", "score": 32}),                        # 15 duplicate create: last wins
    ev("d", before={"id": 8}),                                                  # 16 delete of nothing
    ev("u", after={"id": 7, "name": "gus", "score": 71}),                       # 17 update without before
]


def test_a_corpus_of_good_and_bad_events_gives_the_table_and_quarantine_worked_out_by_hand(wh, tmp_path):
    r = wh.ingest("users", write(tmp_path / "corpus.jsonl", CORPUS))
    assert content(wh) == [{"id": 2, "name": "bob", "score": 21}, {"id": 3, "name": "cy", "score": 32},
                           {"id": 4, "name": "ann", "score": 10}, {"id": 7, "name": "gus", "score": 71}]
    assert (r.quarantined, r.skipped, r.version) == (5, 3, 1)
    q = wh.quarantined("users").to_pylist()
    assert [(x["source"], x["line"]) for x in q] == [("corpus.jsonl", n) for n in (6, 7, 8, 9, 10)]
    reasons = [x["reason"] for x in q]
    assert reasons[0].startswith("invalid JSON")
    assert "column 'score' (int64) expects an integer, got a string \"high\"" in reasons[1]
    assert reasons[2] == "after lacks key column 'id'" and reasons[3] == "before has null in key column 'id'"
    assert reasons[4].startswith("unknown op 'x'")
    assert [x["record"] for x in q] == CORPUS[5:10]
    # replayed: nothing more, neither in the table nor in the quarantine
    assert wh.ingest("users", tmp_path / "corpus.jsonl").replayed == 1
    assert wh.quarantined("users").num_rows == 5 and version(wh) == 1


def test_a_file_of_bad_records_only_is_taken_by_its_quarantine(wh, tmp_path):
    bad = write(tmp_path / "bad.jsonl", ["[]", ev("c", after={"id": "x"})])
    r = wh.ingest("users", bad)
    assert (r.quarantined, r.changes, r.version) == (2, 0, 0)
    assert wh.ingest("users", bad).replayed is not None
    assert wh.quarantined("users").num_rows == 2 and version(wh) == 0


def test_a_crash_between_the_quarantine_and_the_table_commit_loses_and_doubles_nothing(wh, tmp_path, monkeypatch):
    import idivm.ingest as ingest

    feed = write(tmp_path / "f.jsonl", [ev("c", after={"id": 3, "name": "cy", "score": 3}), "[1]"])
    real = ingest.apply_changes
    monkeypatch.setattr(ingest, "apply_changes", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        wh.ingest("users", feed)
    assert version(wh) == 0 and wh.quarantined("users").num_rows == 1
    monkeypatch.setattr(ingest, "apply_changes", real)
    r = wh.ingest("users", feed)
    assert (r.inserted, r.quarantined, r.version) == (1, 1, 1)
    assert wh.quarantined("users").num_rows == 1  # not quarantined twice
    assert wh.ingest("users", feed).replayed == 1


def test_retry_replays_as_is_or_a_corrected_feed(wh, tmp_path):
    wh.ingest("users", write(tmp_path / "f.jsonl", [ev("c", after={"id": 5, "name": "eve", "score": "9"}),
                                                    ev("u", after={"id": 1, "name": "ann", "score": 1}),
                                                    ev("c", after={"id": 6, "score": 6})]))
    assert version(wh) == 1 and wh.quarantined("users").num_rows == 1
    r = wh.retry_quarantined("users")  # still bad as it is
    assert (r.quarantined, r.changes) == (1, 0) and version(wh) == 1
    (q,) = wh.quarantined("users").to_pylist()
    assert (q["source"], q["line"]) == ("f.jsonl", 1) and "expects an integer" in q["reason"]
    fixed = write(tmp_path / "fixed.jsonl", [q["record"].replace('"9"', "9"), ev("c", after={"id": "bad"})])
    r = wh.retry_quarantined("users", fixed, "debezium")
    assert (r.inserted, r.quarantined, r.version) == (1, 1, 2)
    (q,) = wh.quarantined("users").to_pylist()
    assert (q["source"], q["line"]) == ("fixed.jsonl", 2)
    assert content(wh)[-1] == {"id": 6, "name": None, "score": 6} and content(wh)[-2]["score"] == 9


def test_a_crash_in_a_retry_between_its_two_commits_is_finished_by_the_next(wh, tmp_path, monkeypatch):
    from idivm.ingest.feeds import Quarantine

    wh.ingest("users", write(tmp_path / "f.jsonl", [ev("c", after={"id": 5, "name": "eve", "score": "9"})]))
    fixed = write(tmp_path / "fixed.jsonl", [ev("c", after={"id": 5, "name": "eve", "score": 9})])
    real = Quarantine.replace
    monkeypatch.setattr(Quarantine, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        wh.retry_quarantined("users", fixed, "debezium")
    assert version(wh) == 1 and wh.quarantined("users").num_rows == 1
    monkeypatch.setattr(Quarantine, "replace", real)
    r = wh.retry_quarantined("users", fixed, "debezium")
    assert r.replayed == 1 and version(wh) == 1 and wh.quarantined("users").num_rows == 0


def test_strict_and_schema_drift_apply_nothing(wh, tmp_path):
    f = write(tmp_path / "f.jsonl", [ev("c", after={"id": 3, "name": "c", "score": 1}), "[]"])
    with pytest.raises(DataError, match=r"^f.jsonl:2: expected a Debezium event"):
        wh.ingest("users", f, strict=True)
    drift = write(tmp_path / "d.jsonl", [ev("c", after={"id": 3, "email": "e"}), ev("c", after={"id": 4, "age": 1}),
                                         ev("c", after={"id": 5, "email": "f"})])
    with pytest.raises(DataError, match=r"^d.jsonl: columns 'email' \(line 1\), 'age' \(line 2\) not in the table"):
        wh.ingest("users", drift)
    assert version(wh) == 0 and wh.quarantined("users").num_rows == 0


def test_the_command_line_exits_3_and_lists_shows_and_retries(wh, tmp_path):
    home = str(wh.path)
    runner = CliRunner()

    def idivm(*args, input=None):
        return runner.invoke(cli.cli, ["--warehouse", home, *args], obj=cli.CliState(), input=input)

    feed = write(tmp_path / "f.jsonl", [ev("c", after={"id": 3, "name": "cy", "score": 3}),
                                        ev("c", after={"id": 4, "name": "dee", "score": "four"})])
    r = idivm("ingest", "users", str(feed))
    assert r.exit_code == 3
    assert "ingested 1 change from f.jsonl into users: 1 inserted, 0 updated, 0 deleted, 1 quarantined" in r.output
    assert "1 record quarantined: see 'idivm quarantine show users'" in r.output
    r = idivm("ingest", "users", str(feed))
    assert r.exit_code == 0 and "f.jsonl: already ingested into users (version 1), skipped" in r.output
    r = idivm("ingest", "users", "-", "--format", "rows", input='{"id": 5, "name": "eve", "score": 5}\n')
    assert r.exit_code == 0 and "from <stdin> into users: 1 inserted" in r.output
    r = idivm("quarantine", "list")
    assert r.exit_code == 0 and "users" in r.output and "1" in r.output
    r = idivm("quarantine", "list", "users")
    assert r.exit_code == 0 and "f.jsonl" in r.output
    r = idivm("quarantine", "show", "users")
    assert r.exit_code == 0 and r.output.startswith("f.jsonl:2: after: column 'score' (int64) expects an integer")
    r = idivm("quarantine", "show", "users", "--format", "jsonl")
    fixed = write(tmp_path / "fixed.jsonl", [r.output.strip().replace('"four"', "4")])
    r = idivm("quarantine", "retry", "users", "--from", str(fixed))
    assert r.exit_code == 0 and "1 inserted" in r.output
    assert idivm("quarantine", "show", "users").output == ""
    assert [row["id"] for row in content(wh)] == [1, 2, 3, 4, 5]


def test_views_see_what_was_applied_and_nothing_quarantined(make_warehouse, tmp_path):
    w = make_warehouse()
    w.create_table("users", "id", BASE)
    w.define("CREATE VIEW good AS SELECT u.id, u.score FROM users AS u WHERE u.score > 5", strategy="id")
    w.ingest("users", write(tmp_path / "f.jsonl", [ev("u", after={"id": 1, "name": "ann", "score": 1}),
                                                   ev("c", after={"id": 3, "score": "x"}),
                                                   ev("c", after={"id": 4, "name": "d", "score": 40})]))
    (r,) = w.maintain("good")
    assert r.strategy == "id" and (r.inserted, r.deleted) == (1, 1)
    assert w.verify("good").ok


def test_ingest_follow_takes_new_files_of_a_directory_until_sigterm(wh, tmp_path):
    """A real process: ``ingest users DIR --follow`` takes each file as it arrives (written
    under a hidden name, then renamed, as a spooler would) and ends cleanly on SIGTERM."""
    import os
    import signal
    import subprocess
    import sys
    import time

    feed = tmp_path / "spool"
    feed.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "idivm.cli", "--warehouse", str(wh.path), "ingest", "users",
                             str(feed), "--follow", "--interval", "0.2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def arrive(name: str, lines: list[str]) -> None:
        write(feed / f".{name}", lines).rename(feed / name)

    def until(v: int) -> None:
        deadline = time.monotonic() + 60
        while version(wh) < v:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else v
            time.sleep(0.1)

    try:
        arrive("0001.jsonl", [ev("c", after={"id": 3, "name": "cy", "score": 3})])
        until(1)
        arrive("0002.jsonl", [ev("d", before={"id": 1}), "[]"])
        until(2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 3, err  # a record was quarantined on the way
    assert out.splitlines() == [
        "ingested 1 change from 0001.jsonl into users: 1 inserted, 0 updated, 0 deleted; version 1",
        "ingested 1 change from 0002.jsonl into users: 0 inserted, 0 updated, 1 deleted, 1 quarantined; version 2"]
    assert "stopped by SIGTERM" in err
    assert [row["id"] for row in content(wh)] == [2, 3] and wh.quarantined("users").num_rows == 1
