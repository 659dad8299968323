"""The cost-based choice of ``auto`` (:mod:`idivm.exec.history`).

* The estimates, on made-up records whose answers are worked out by hand: a least-squares line
  through ``id`` runs, the median time per base-table row of recomputations, runs of one size
  taken as the fixed part, and the rule of thumb when a strategy has no record or the batch is
  large and far beyond its records.
* The records: written and read back, the last :data:`~idivm.exec.history.KEEP` kept, an
  unreadable file read as none.
* On the thesis' sample tables: ``define`` records the materialization as a recomputation; a run
  records itself; a run whose records make ``recompute`` cheaper recomputes and says why, and
  the view still equals its recomputation; ``explain`` names the strategy and the records.
"""

from __future__ import annotations

import json

import pytest

from idivm.datasets import devices, view_path
from idivm.demo import sample_path
from idivm.exec import history
from idivm.exec.history import Record
from idivm.exec.programs import program_folder


def test_id_is_estimated_by_a_line_through_its_runs():
    runs = [Record("id", 1.0, 100, 10), Record("id", 1.5, 200, 10), Record("id", 2.5, 400, 10),
            Record("recompute", 9.0, 0, 10)]
    est = history.estimate_id(runs, 1000)
    assert est.runs == 3 and est.seconds == pytest.approx(0.5 + 0.005 * 1000)


def test_a_falling_line_is_flat_and_runs_of_one_size_are_their_fixed_part():
    falling = [Record("id", 2.0, 100, 1), Record("id", 1.0, 300, 1)]
    assert history.estimate_id(falling, 10_000).seconds == pytest.approx(1.5)  # slope 0: their mean
    same = [Record("id", 0.4, 200, 1), Record("id", 0.6, 200, 1), Record("id", 0.5, 200, 1)]
    assert history.estimate_id(same, 50) == history.Estimate("id", pytest.approx(0.5), 3, False)
    assert history.estimate_id(same, 800) == history.Estimate("id", pytest.approx(0.5), 3, False)
    assert history.estimate_id(same, 2001).beyond  # more than 10x the largest batch recorded
    assert history.estimate_id([Record("recompute", 1.0, 0, 5)], 10) is None


def test_runs_of_small_batches_do_not_keep_a_larger_batch_from_id():
    # id measured on 2-row batches only (0.1 s); recompute 0.5 s: a 200-row batch is tried by id
    # (whose fixed part dominates), and a batch the rule of thumb calls large, far beyond the
    # records, is recomputed
    runs = [Record("recompute", 0.5, 0, 100_000), *[Record("id", 0.1, 2, 100_000)] * 3]
    assert history.choose(runs, 200, 100_000)[0] == "id"
    assert history.choose(runs, 30_000, 100_000) == ("recompute", "30000 change rows for 100000 base-table rows")
    # once a large batch has been recorded, the line decides
    ran = [*runs, Record("id", 1.0, 20_000, 100_000)]
    assert history.choose(ran, 30_000, 100_000)[0] == "recompute"   # 1.45 s against 0.5 s
    cheap = [*runs, Record("id", 0.2, 20_000, 100_000)]
    assert history.choose(cheap, 30_000, 100_000)[0] == "id"


def test_recompute_is_estimated_per_base_row():
    runs = [Record("recompute", 2.0, 0, 1_000_000), Record("recompute", 3.0, 0, 1_000_000),
            Record("recompute", 30.0, 0, 1_000_000), Record("id", 0.1, 5, 1_000_000)]
    est = history.estimate_recompute(runs, 2_000_000)
    assert est.runs == 3 and est.seconds == pytest.approx(6.0)  # median 3e-6 s a row
    assert history.estimate_recompute([Record("id", 1.0, 1, 1)], 10) is None
    defined = [Record("recompute", 0.5, 0, 1_000_000)]  # the materialization at define
    assert history.estimate_recompute(defined, 1_000_000).seconds == pytest.approx(0.5)
    ran = [*defined, Record("recompute", 1.2, 40, 1_000_000)]  # a run's recomputation replaces it
    assert history.estimate_recompute(ran, 1_000_000) == history.Estimate("recompute", pytest.approx(1.2), 1)


def test_auto_takes_the_cheaper_estimate_else_the_rule_of_thumb():
    runs = [Record("recompute", 1.0, 0, 1000), Record("id", 0.2, 10, 1000), Record("id", 0.4, 30, 1000),
            Record("id", 1.1, 100, 1000)]
    # id: 0.1 + 0.01 a row; recompute: 1.0 s
    assert history.choose(runs, 50, 1000)[0] == "id"  # 0.6 s against 1.0 s
    strategy, why = history.choose(runs, 200, 1000)  # 2.1 s against 1.0 s
    assert strategy == "recompute" and "2.10 s by id" in why and "1.00 s to recompute" in why
    only_define = [Record("recompute", 1.0, 0, 1000)]
    assert history.choose(only_define, 100, 1000) == ("id", "")
    assert history.choose(only_define, 300, 1000)[0] == "recompute"  # more than 25% of the base tables' rows
    assert history.choose([], 300, 1000)[0] == "recompute"


def test_maps_are_estimated_from_their_own_runs_and_their_rule_of_thumb_counts_base_rows():
    # maps: 0.5 + 0.01 a change row; id runs (of another definition) do not count
    runs = [Record("recompute", 2.0, 5, 1000), Record("maps", 0.6, 10, 1000), Record("maps", 0.8, 30, 1000),
            Record("maps", 1.5, 100, 1000), Record("id", 0.01, 10, 1000)]
    assert history.estimate_id(runs, 100, "maps").seconds == pytest.approx(1.5)
    strategy, why = history.choose(runs, 100, 1000, incremental="maps")
    assert strategy == "maps" and "1.50 s by maps (3 runs)" in why
    assert history.choose(runs, 200, 1000, incremental="maps")[0] == "recompute"  # 2.5 s against 2.0 s
    # maps left behind by a recomputation: 0.6 s plus 1.5 s of catch-up against 2.0 s; with a
    # smaller lag 0.6 s plus 1.0 s
    lagged = [*runs, Record("recompute", 2.0, 100, 1000, lagged=True)]
    strategy, why = history.choose(lagged, 10, 1000, incremental="maps")
    assert strategy == "recompute" and "plus 1.50 s to catch the maps up over 100 change rows" in why
    assert history.choose([*runs, Record("recompute", 2.0, 50, 1000, lagged=True)], 10, 1000,
                          incremental="maps")[0] == "maps"
    # without maps runs: the change rows against the base tables' rows (not the view's few groups)
    defined = [Record("recompute", 2.0, 0, 1000)]
    assert history.choose(defined, 200, 1000, incremental="maps") == ("maps", "")
    assert history.choose(defined, 300, 1000, incremental="maps") == \
        ("recompute", "300 change rows for 1000 base-table rows")


def test_a_batch_far_larger_than_an_incremental_strategys_runs_is_tried_by_it_when_its_largest_run_was_cheap():
    # id: 0.2 s at 20 rows, 0.3 s at 200 (a line of 0.19 + 0.00056 a row: 1.3 s at 2,000); recompute 0.5 s
    runs = [Record("recompute", 0.5, 10, 100_000), *[Record("id", 0.2, 20, 100_000), Record("id", 0.3, 200, 100_000)] * 2]
    strategy, why = history.choose(runs, 2000, 100_000)
    assert strategy == "id" and "trying id: its runs read at most 200 change rows" in why
    # once it has run at that size, the line decides: 0.25 s at 2,000 rows keeps id, 2 s does not
    assert history.choose([*runs, Record("id", 0.25, 2000, 100_000)], 2000, 100_000)[0] == "id"
    assert history.choose([*runs, Record("id", 2.0, 2000, 100_000)], 2000, 100_000)[0] == "recompute"
    # not when its largest run already cost more than recomputing
    dear = [Record("recompute", 0.5, 10, 100_000), Record("id", 0.6, 20, 100_000), Record("id", 0.7, 200, 100_000)]
    assert history.choose(dear, 2000, 100_000)[0] == "recompute"


def test_an_estimate_no_recent_run_checked_is_tried_once_when_it_is_close_to_the_best():
    # recompute known from define's materialization only (0.6 s), id 0.45 s: recompute is tried
    defined = [Record("recompute", 0.6, 0, 1000), *[Record("id", 0.45, 10, 1000)] * 3]
    strategy, why = history.choose(defined, 10, 1000)
    assert strategy == "recompute" and "trying recompute: no run of it among the last 20" in why
    # its run (0.25 s) replaces the estimate: recompute is chosen on its own merits
    ran = [*defined, Record("recompute", 0.25, 10, 1000, lagged=True)]
    strategy, why = history.choose(ran, 10, 1000)
    assert strategy == "recompute" and "trying" not in why
    # not tried when far from the best (0.6 s against 0.2 s)
    assert history.choose([Record("recompute", 0.6, 0, 1000), *[Record("id", 0.2, 10, 1000)] * 3], 10, 1000) == \
        ("id", "10 change rows: estimated 0.20 s by id (3 runs); against 0.60 s to recompute (1 runs)")
    # a checked run older than the last 20 runs is stale again: id, last run 25 runs back, is tried
    old = [Record("recompute", 0.5, 0, 1000), Record("id", 0.5, 10, 1000),
           *[Record("recompute", 0.45, 10, 1000)] * 25]
    strategy, why = history.choose(old, 10, 1000)
    assert strategy == "id" and "trying id" in why
    assert history.choose([*old[:-5], Record("id", 0.5, 10, 1000), *old[-5:]], 10, 1000)[0] == "recompute"


def test_the_base_rows_follow_the_last_record_and_the_changes():
    import pyarrow as pa

    from idivm.exec.runtime import base_rows_after

    runs = [Record("recompute", 1.0, 0, 100), Record("id", 0.1, 5, 103)]
    changes = {"a": pa.table({"_change_type": ["insert", "insert", "delete", "update_preimage", "update_postimage"]}),
               "b": pa.table({"_change_type": ["delete"]})}
    assert base_rows_after(None, {}, runs, changes) == 103  # + 2 inserts - 2 deletes; updates keep the count


def test_records_are_kept_and_an_unreadable_file_is_none(tmp_path):
    assert history.read(tmp_path) == []
    for i in range(history.KEEP + 5):
        history.record(tmp_path, Record("id", float(i), i, 7))
    runs = history.read(tmp_path)
    assert len(runs) == history.KEEP and runs[0].seconds == 5.0 and runs[-1] == Record("id", 54.0, 54, 7)
    (tmp_path / history.HISTORY_FILE).write_text("{not json\n")
    assert history.read(tmp_path) == []


def test_an_auto_view_records_its_runs_and_recomputes_when_the_records_say_it_is_cheaper(make_warehouse, tmp_path):
    wh = make_warehouse()
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    wh.define(view_path("devices_v").read_text(), strategy="auto")  # no maps: id or recompute
    folder = wh.catalog.root / program_folder(wh.catalog.view("phone_parts").path)
    base_rows = sum(wh.table_info(t).rows for t in devices.KEYS)
    (defined,) = history.read(folder)
    assert defined.strategy == "recompute" and defined.base_rows == base_rows and defined.seconds > 0

    parts = [json.loads(line) for line in sample_path("devices", "parts").read_text().splitlines() if line.strip()]

    def change(i: int) -> None:
        (tmp_path / f"p{i}.jsonl").write_text(json.dumps({**parts[i], "price": parts[i]["price"] + 1}) + "\n")
        wh.ingest("parts", tmp_path / f"p{i}.jsonl", format="rows")

    history.record(folder, Record("id", 0.01, 2, base_rows))  # id far cheaper than the materialization
    change(0)
    (r,) = wh.maintain("phone_parts")
    assert r.strategy == "id" and "0.01 s by id (1 runs)" in r.note
    assert history.read(folder)[-1] == Record("id", pytest.approx(r.cost.total_seconds), 2, base_rows)

    # records in which id costs far more than recomputing
    history.record(folder, Record("id", 100.0, 2, base_rows))
    history.record(folder, Record("id", 100.0, 2, base_rows))
    change(1)
    (r,) = wh.maintain("phone_parts")
    assert r.strategy == "recompute" and "s by id" in r.note and "to recompute" in r.note
    assert "s by id" in r.summary()
    assert history.read(folder)[-1].strategy == "recompute"
    assert wh.verify("phone_parts").ok
    explained = wh.explain("phone_parts")
    assert "strategy: auto (auto: 4 id runs and 2 recomputations recorded" in explained


def test_lagging_caches_add_their_catch_up_to_id_until_the_recomputations_have_cost_more():
    # id: 0.1 + 0.01 a change row; recompute: 1.0 s
    runs = [Record("recompute", 1.0, 0, 1000), Record("id", 0.2, 10, 1000), Record("id", 0.4, 30, 1000)]
    big = Record("recompute", 1.0, 200, 1000, lagged=True)
    assert history.lagging([*runs, big]) == [big] and history.lagging(runs) == []
    # 10 rows: 0.2 s by id, plus 2.1 s to catch up over 200 rows: recompute
    strategy, why = history.choose([*runs, big], 10, 1000)
    assert strategy == "recompute" and "plus 2.10 s to catch the caches up over 200 change rows" in why
    # each small batch recomputed costs 0.8 s more than id would have, and adds 0.1 s to the
    # catch-up: after two, 1.6 s lost against 2.3 s; after four, 3.2 s against 2.5 s
    small = Record("recompute", 1.0, 10, 1000, lagged=True)
    assert history.choose([*runs, big, small, small], 10, 1000)[0] == "recompute"
    strategy, why = history.choose([*runs, big, *[small] * 4], 10, 1000)
    assert strategy == "id" and "the 5 runs since cost 3.20 s more than id" in why
    # a batch that favours recompute by itself stays recomputed, whatever was lost
    assert history.choose([*runs, big, *[small] * 10], 200, 1000)[0] == "recompute"
    # a small lag is caught up at once when id with it is still cheaper
    assert history.choose([*runs, Record("recompute", 1.0, 20, 1000, lagged=True)], 10, 1000)[0] == "id"
    # an id run ends the lag
    assert history.lagging([*runs, big, Record("id", 2.3, 210, 1000)]) == []


def test_auto_tries_maps_once_the_runs_have_cost_what_building_them_would_and_then_takes_the_cheapest():
    # recompute: 0.5 s (a run's); building 3 maps: about 1.5 s; the runs so far 1.25 s, then 1.55 s
    runs = [Record("recompute", 1.0, 0, 1000), Record("recompute", 0.5, 10, 1000), Record("id", 0.3, 10, 1000),
            Record("id", 0.45, 20, 1000)]
    assert history.choose(runs, 10, 1000, ("id", "maps"), unbuilt={"maps": 3})[0] == "id"
    runs.append(Record("id", 0.3, 10, 1000))
    strategy, why = history.choose(runs, 10, 1000, ("id", "maps"), unbuilt={"maps": 3})
    assert strategy == "maps" and "cost 1.55 s, more than building its 3 tables is estimated to (1.50 s)" in why
    assert history.choose(runs, 300, 1000, ("id", "maps"), unbuilt={"maps": 3})[0] == "recompute"  # a large batch
    # both built: the cheaper estimate, each with the catch-up of what the other's runs left behind
    runs.append(Record("maps", 0.2, 10, 1000, lagged=True))  # it left the caches 10 rows behind
    strategy, why = history.choose(runs, 10, 1000, ("id", "maps"))
    assert strategy == "maps" and "0.20 s by maps (1 runs)" in why and "plus 0.30 s to catch the caches up" in why
    assert history.lagging(runs, "id") == [runs[-1]] and history.lagging(runs, "maps") == []
    # id cheaper by its records even with the catch-up: it catches its caches up; the maps then lag
    cheap = [runs[0], *[Record("id", 0.01, 10, 1000)] * 3, runs[-1]]
    strategy, why = history.choose(cheap, 10, 1000, ("id", "maps"))
    assert strategy == "id" and "0.01 s by id (3 runs), plus 0.01 s to catch the caches up over 10" in why
    # a strategy whose tables no run leaves behind (id without caches) has no catch-up
    assert "catch" not in history.choose(runs, 10, 1000, ("id", "maps"), stateful={"maps"})[1]


def test_an_aggregate_auto_view_moves_between_id_maps_and_recompute_and_stays_equal_to_its_recomputation(
        make_warehouse, tmp_path):
    wh = make_warehouse()
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    wh.define(view_path("devices_cost").read_text(), strategy="auto")
    entry = wh.catalog.view("phone_cost")
    folder = wh.catalog.root / program_folder(entry.path)
    base_rows = sum(wh.table_info(t).rows for t in devices.KEYS)
    assert not entry.extra.get("maps") and not (wh.catalog.root / f"{entry.path}.maps").exists()
    assert "maps once the runs have cost what building its tables is estimated to" in wh.explain("phone_cost")
    parts = [json.loads(line) for line in sample_path("devices", "parts").read_text().splitlines() if line.strip()]

    def run(i: int, *records: Record) -> str:
        for record in records:
            history.record(folder, record)
        (tmp_path / f"p{i}.jsonl").write_text(json.dumps({**parts[i % len(parts)], "price": 100 + i}) + "\n")
        wh.ingest("parts", tmp_path / f"p{i}.jsonl", format="rows")
        (r,) = wh.maintain("phone_cost")
        verified = wh.verify("phone_cost")
        assert verified.ok, verified.summary()
        return r.strategy, r.note, verified

    strategy, note, verified = run(0)
    assert strategy == "id" and len(verified.caches) == 1  # its cache; no maps yet
    # id runs that cost more than building the maps: the next run builds and runs them
    strategy, note, verified = run(1, Record("id", 500.0, 2, base_rows))
    assert strategy == "maps" and "trying maps" in note
    assert len(verified.caches) == 1 + len(wh.catalog.view("phone_cost").extra.get("maps") or
                                            list((wh.catalog.root / f"{entry.path}.maps").iterdir()))
    # then whichever the records make cheapest (blocks of records filling the kept window): each
    # strategy catches its tables up over the runs of the others when it next runs
    def block(by_id: float, by_maps: float) -> list[Record]:
        return [*[Record("recompute", 1.0, 2, base_rows)] * 10, *[Record("id", by_id, 2, base_rows)] * 20,
                *[Record("maps", by_maps, 2, base_rows)] * 20]

    for i, (by_id, by_maps, expected) in enumerate([(0.001, 5.0, "id"), (5.0, 5.0, "recompute"),
                                                    (5.0, 0.001, "maps")], 2):
        strategy, note, _ = run(i, *block(by_id, by_maps))
        assert strategy == expected, note
    assert "maps runs" in wh.explain("phone_cost")
