"""The ``maps`` strategy (:mod:`idivm.exec.maps`): an aggregate view maintained by higher-order
delta maps stored beside it, on the thesis' sample devices/parts data.  Expected rows are worked
out by hand from the sample files; every run is also verified against the recomputation.  The
random change streams of the differential corpus are in ``test_differential``."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

from idivm.datasets import sample_path
from idivm.errors import CatalogError, UnsupportedError
from idivm.exec import commit
from idivm.exec.programs import load_program
from idivm.storage import delta

STATS = """CREATE VIEW stats AS
SELECT did, SUM(price) AS cost, COUNT(*) AS n, COUNT(price) AS priced, AVG(price) AS mean,
       MIN(price) AS lo, MAX(price) AS hi
FROM parts NATURAL JOIN devices_parts NATURAL JOIN devices
WHERE category = "phone"
GROUP BY did"""


#: fewer maps, for the tests of what happens around a run
COST = """CREATE VIEW stats AS
SELECT did, SUM(price) AS cost, COUNT(*) AS n FROM parts NATURAL JOIN devices_parts NATURAL JOIN devices
WHERE category = "phone" GROUP BY did"""


@pytest.fixture
def tables(make_warehouse):
    wh = make_warehouse("maps")
    for table, key in (("parts", ["pid"]), ("devices", ["did"]), ("devices_parts", ["did", "pid"])):
        rows = [json.loads(line) for line in sample_path("devices", table).read_text().splitlines() if line.strip()]
        wh.create_table(table, key, rows)
    return wh


@pytest.fixture
def wh(tables):
    tables.define(STATS, strategy="maps")
    return tables


@pytest.fixture
def cost(tables):
    tables.define(COST, strategy="maps")
    return tables


def _ingest(wh, tmp_path, table: str, *lines: dict) -> None:
    path = tmp_path / f"{table}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    wh.ingest(table, path, format="rows")


def _rows(wh) -> dict[int, tuple]:
    return {r["did"]: (r["cost"], r["n"], r["priced"], r["mean"], r["lo"], r["hi"]) for r in wh.rows("stats")}


def _costs(wh) -> dict[int, tuple]:
    return {r["did"]: (r["cost"], r["n"]) for r in wh.rows("stats")}


def _maintained(wh) -> None:
    (result,) = wh.maintain("stats")
    assert result.strategy == "maps" and result.version is not None
    verification = wh.verify("stats")  # the view, and every map against its definition
    assert verification.ok and len(verification.caches) == len(wh.catalog.view("stats").extra["maps"])


@pytest.mark.slow  # the default run has the differential corpus' maps views (NULL prices included)
def test_a_maps_view_follows_changes_of_every_table(wh, tmp_path):
    # the phones 1, 2, 4, 8 and their parts' prices (sample files)
    assert _rows(wh)[1] == pytest.approx((48.02 + 9.69 + 65.92, 3, 3, (48.02 + 9.69 + 65.92) / 3, 9.69, 65.92))
    # part 10 loses its price, part 9 (the dearest of phones 2, 4 and 8) goes
    _ingest(wh, tmp_path, "parts", {"pid": 10, "price": None}, {"__delete": {"pid": 9}})
    _maintained(wh)
    rows = _rows(wh)
    assert rows[1] == pytest.approx((57.71, 3, 2, 28.855, 9.69, 48.02))  # SUM, AVG, MIN, MAX ignore the NULL
    assert rows[8] == pytest.approx((9.69, 2, 1, 9.69, 9.69, 9.69))
    assert rows[4] == pytest.approx((109.54, 2, 2, 54.77, 9.69, 99.85))
    # phone 8 keeps only part 10, whose price is NULL
    _ingest(wh, tmp_path, "devices_parts", {"__delete": {"did": 8, "pid": 7}})
    _maintained(wh)
    assert _rows(wh)[8] == (None, 1, 0, None, None, None)
    # phone 2 becomes a tablet, camera 3 a phone (parts 6 and 7; part 9 is gone)
    _ingest(wh, tmp_path, "devices", {"did": 2, "category": "tablet"}, {"did": 3, "category": "phone"})
    _maintained(wh)
    rows = _rows(wh)
    assert set(rows) == {1, 3, 4, 8}
    assert rows[3] == pytest.approx((20.95, 2, 2, 10.475, 9.69, 11.26))
    # the last part of phone 8 goes: its group goes
    _ingest(wh, tmp_path, "devices_parts", {"__delete": {"did": 8, "pid": 10}})
    _maintained(wh)
    assert set(_rows(wh)) == {1, 3, 4}


def test_a_small_maps_run_is_evaluated_in_the_driver_without_a_spark_job(wh, tmp_path):
    """On delta-rs, a batch and maps this small are evaluated over Arrow tables in the driver:
    the run starts no Spark job, and its groups are those worked out by hand."""
    _ingest(wh, tmp_path, "parts", {"pid": 10, "price": None}, {"__delete": {"pid": 9}})
    (result,) = wh.maintain("stats")
    assert result.strategy == "maps" and result.version is not None
    assert (result.cost.total_jobs == 0) == (not wh.storage.spark), result.cost.summary()
    rows = _rows(wh)
    assert rows[1] == pytest.approx((57.71, 3, 2, 28.855, 9.69, 48.02))  # SUM, AVG, MIN, MAX ignore the NULL
    assert rows[8] == pytest.approx((9.69, 2, 1, 9.69, 9.69, 9.69))
    assert rows[4] == pytest.approx((109.54, 2, 2, 54.77, 9.69, 99.85))
    assert wh.verify("stats").ok


@pytest.mark.slow  # about 30 s: a maps view's define and four verifies of its 14 maps
def test_verify_finds_a_map_that_differs_from_its_definition_and_a_checked_run_repairs_it(cost, tmp_path):
    """A map corrupted behind idivm's back, in a version the view's last commit names."""
    from idivm.storage import delta

    wh = cost
    path = wh.catalog.root / wh.catalog.view("stats").extra["maps"]["V___count"]
    rows = delta.read_arrow(path).to_pylist()
    rows[0]["__m"] += 1
    delta.write_arrow(path, pa.Table.from_pylist(rows, schema=delta.schema(path)), mode="overwrite")
    verification = wh.verify("stats")
    assert verification.ok  # the view names the map's version before
    assert len(verification.caches) == len(wh.catalog.view("stats").extra["maps"]) > 3  # every map compared
    view_path = wh.catalog.path_of(wh.catalog.view("stats"))
    metadata = {k: v for k, v in delta.history(view_path, 1)[0].items() if k.startswith("idivm.")}
    metadata["idivm.maps"] = json.dumps({**json.loads(metadata["idivm.maps"]), "V___count": delta.version(path)})
    delta.write_arrow(view_path, delta.read_arrow(view_path), mode="overwrite", commit_metadata=metadata)
    verification = wh.verify("stats")
    assert not verification.ok and (verification.missing, verification.extra) == (0, 0)
    assert "map stats.V___count differs from its recomputation at devices@0, devices_parts@0, parts@0: " \
           "1 row(s) missing, 1 unexpected" in verification.summary()
    # a checked run finds it and repairs the maps with the view
    _ingest(wh, tmp_path, "parts", {"pid": 7, "price": 10.0})
    (result,) = wh.maintain("stats", verify_every=1)
    assert result.diverged and result.repaired_version is not None
    assert wh.verify("stats").ok
    assert _costs(wh)[1] == pytest.approx((48.02 + 10.0 + 65.92, 3))


def test_maps_ahead_of_the_view_after_a_crash_are_rebuilt_before_the_run(cost, tmp_path, monkeypatch):
    wh = cost
    _ingest(wh, tmp_path, "parts", {"pid": 7, "price": 1.5})

    def crash(*args, **kwargs):
        raise OSError("disk gone")

    # the maps' increments are committed, the view's commit fails
    monkeypatch.setattr(commit, "land", crash)
    monkeypatch.setattr(commit, "merge_by_spark", crash)
    with pytest.raises(OSError, match="disk gone"):
        wh.maintain("stats")
    monkeypatch.undo()
    assert wh.verify("stats").ok  # the view is as it was
    _ingest(wh, tmp_path, "parts", {"pid": 1, "price": 40.0})
    messages: list[str] = []
    (result,) = wh.maintain("stats", progress=messages.append)
    assert any("the maps are ahead of the view; rebuilding them" in m for m in messages), messages
    assert result.version is not None and wh.verify("stats").ok
    assert _costs(wh)[1] == pytest.approx((40.0 + 1.5 + 65.92, 3))


def test_a_view_the_maps_cannot_maintain_is_refused_with_the_reason(tables):
    wh = tables
    with pytest.raises(UnsupportedError, match="the maps strategy cannot maintain this view: it needs exactly one "
                                               "GROUP BY"):
        wh.define("CREATE VIEW links AS SELECT did, pid FROM devices_parts", strategy="maps")
    with pytest.raises(UnsupportedError, match="LeftJoin"):
        wh.define("CREATE VIEW c AS SELECT dp.did, COUNT(*) AS n FROM devices_parts dp LEFT JOIN parts p "
                  "ON dp.pid = p.pid GROUP BY dp.did", strategy="maps")
    assert wh.views() == []
    text = wh.explain(COST)
    assert "higher-order delta maps (strategy maps" in text and "on Δparts:" in text
    assert "no higher-order delta maps: the maps strategy cannot maintain this view: LeftJoin" in wh.explain(
        "CREATE VIEW c AS SELECT dp.did, COUNT(*) AS n FROM devices_parts dp LEFT JOIN parts p ON dp.pid = p.pid "
        "GROUP BY dp.did")
    assert "higher-order delta maps" not in wh.explain("CREATE VIEW links AS SELECT did, pid FROM devices_parts")


#: TPC-H Q17's shape: the parts dearer than the average part of their device, per category
ABOVE_AVERAGE = """CREATE VIEW above AS
SELECT d.category, SUM(p.price) AS total, COUNT(*) AS n
FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
WHERE p.price > (SELECT VALUE AVG(p2.price) FROM devices_parts dp2 JOIN parts p2 ON p2.pid = dp2.pid
                 WHERE dp2.did = d.did)[0]
GROUP BY d.category"""


def _above_average(parts: dict, devices: dict, links: set) -> dict[str, tuple]:
    """The view ``above`` computed here from the rows: {category: (total, n)}."""
    out: dict[str, list] = {}
    for did, category in devices.items():
        prices = [parts[pid] for d, pid in links if d == did and parts.get(pid) is not None]
        if not prices:
            continue
        average = sum(prices) / len(prices)
        for d, pid in sorted(links):
            if d == did and parts.get(pid) is not None and parts[pid] > average:
                entry = out.setdefault(category, [0.0, 0])
                entry[0] += parts[pid]
                entry[1] += 1
    return {c: tuple(v) for c, v in out.items()}


@pytest.mark.slow  # nested aggregates: a run re-reads every device's subquery maps
def test_a_scalar_subquery_compared_with_is_maintained_by_maps(tables, tmp_path):
    """``x > (SELECT VALUE AVG(...) ... correlated)``: nested aggregates of the maps (DBToaster
    §5.3), through changes of every table, against the view computed here from the rows."""
    wh = tables
    wh.define(ABOVE_AVERAGE, strategy="maps")
    rows = {t: [json.loads(line) for line in sample_path("devices", t).read_text().splitlines() if line.strip()]
            for t in ("parts", "devices", "devices_parts")}
    parts = {r["pid"]: r["price"] for r in rows["parts"]}
    devices = {r["did"]: r["category"] for r in rows["devices"]}
    links = {(r["did"], r["pid"]) for r in rows["devices_parts"]}

    def check() -> None:
        got = {r["category"]: (r["total"], r["n"]) for r in wh.rows("above")}
        expected = _above_average(parts, devices, links)
        assert got.keys() == expected.keys()
        for c in expected:
            assert got[c] == pytest.approx(expected[c]), c

    check()
    # part 7 (in phones 1, 4, 8) gets dear, part 9 goes; device 1 loses a part and gains one
    _ingest(wh, tmp_path, "parts", {"pid": 7, "price": 95.0}, {"__delete": {"pid": 9}})
    parts[7] = 95.0
    del parts[9]
    gone = sorted(link for link in links if link[0] == 1)[0]
    _ingest(wh, tmp_path, "devices_parts", {"__delete": {"did": gone[0], "pid": gone[1]}}, {"did": 1, "pid": 3})
    links = (links - {gone}) | {(1, 3)}
    (result,) = wh.maintain("above")
    assert result.strategy == "maps" and result.version is not None
    check()
    # a device changes category: its groups move
    _ingest(wh, tmp_path, "devices", {"did": 4, "category": "watch"})
    devices[4] = "watch"
    wh.maintain("above")
    check()
    assert wh.verify("above").ok


def test_a_view_of_one_row_is_maintained_by_maps_down_to_no_rows_and_back(tables, tmp_path):
    """A GROUP BY without keys: its one row from the maps after each run; when no row qualifies,
    SQL's row of an empty aggregate (COUNT 0, SUM and MAX NULL)."""
    wh = tables
    wh.define("CREATE VIEW dear AS SELECT COUNT(*) AS n, SUM(p.price) AS total, MAX(p.price) AS hi "
              "FROM parts p WHERE p.price > 50", strategy="maps")
    prices = {r["pid"]: r["price"] for r in (json.loads(line) for line in
                                             sample_path("devices", "parts").read_text().splitlines() if line.strip())}

    def check() -> None:
        dear = [p for p in prices.values() if p is not None and p > 50]
        (row,) = wh.rows("dear")
        assert row["n"] == len(dear)
        assert (row["total"], row["hi"]) == ((pytest.approx(sum(dear)), max(dear)) if dear else (None, None))

    check()
    cheap = {pid: 10.0 for pid, p in prices.items() if p is not None and p > 50}
    _ingest(wh, tmp_path, "parts", *({"pid": pid, "price": p} for pid, p in cheap.items()))
    prices.update(cheap)
    (result,) = wh.maintain("dear")
    assert result.strategy == "maps" and result.version is not None
    check()
    _ingest(wh, tmp_path, "parts", {"pid": 3, "price": 77.5}, {"pid": 1000, "price": 99.0})
    prices.update({3: 77.5, 1000: 99.0})
    wh.maintain("dear")
    check()
    assert wh.verify("dear").ok


def test_auto_maintains_a_view_of_one_tuple_by_maps_or_recomputation_and_catches_its_maps_up(
        tables, tmp_path, monkeypatch):
    """A view of one tuple has no IDs, so ``id`` could only recompute it: defined with ``auto``
    it gets maps, and each run is maintained by them or recomputed (the maps then stay behind,
    and the next maps run first catches them up over the changes they missed).  With the
    choice drawn at random and some runs stopped at a random map commit (the maps are then
    ahead of the view, and rebuilt), the view equals the rows computed here after every batch,
    and every map its definition at the versions the view's last maps run names."""
    import random

    from idivm.exec import history
    from idivm.exec.maps import StoredMaps

    wh = tables
    info = wh.define("CREATE VIEW dear AS SELECT COUNT(*) AS n, SUM(p.price) AS total, MAX(p.price) AS hi "
                     "FROM parts p WHERE p.price > 50", strategy="auto")
    assert info.strategy == "auto" and set(wh.catalog.view("dear").extra["maps"])
    prices = {r["pid"]: r["price"] for r in (json.loads(line) for line in
                                             sample_path("devices", "parts").read_text().splitlines() if line.strip())}

    def check(what: str) -> None:
        dear = [p for p in prices.values() if p is not None and p > 50]
        (row,) = wh.rows("dear")
        assert row["n"] == len(dear), what
        assert (row["total"], row["hi"]) == ((pytest.approx(sum(dear)), max(dear)) if dear else (None, None)), what
        verified = wh.verify("dear")
        assert verified.ok and len(verified.caches) == len(wh.catalog.view("dear").extra["maps"]), \
            f"{what}: {verified.summary()}"

    # no run recorded: a small change set is maintained by the maps (the rule of thumb)
    _ingest(wh, tmp_path, "parts", {"pid": 1, "price": 60.0})
    prices[1] = 60.0
    (r,) = wh.maintain("dear")
    assert r.strategy == "maps"
    check("first run")
    assert "maps runs" in wh.explain("dear")

    rng = random.Random(1)
    choices: list[str] = []
    monkeypatch.setattr(history, "choose", lambda *a, **k: (choices[-1], "drawn"))
    real_store = StoredMaps.store
    merges, crash_at = [0], [None]

    def store(self, *args, **kwargs):
        merges[0] += 1
        if merges[0] == crash_at[0]:
            raise KeyboardInterrupt(f"stopped before map commit {merges[0]}")
        return real_store(self, *args, **kwargs)

    monkeypatch.setattr(StoredMaps, "store", store)
    seen, said = set(), []
    for batch in range(8):
        changed = {pid: round(rng.uniform(1, 99), 2) for pid in rng.sample(sorted(prices), rng.randint(1, 4))}
        gone = rng.choice(sorted(prices)) if rng.random() < 0.3 else None
        lines = [{"pid": pid, "price": p} for pid, p in changed.items() if pid != gone]
        lines += [{"__delete": {"pid": gone}}] if gone is not None else []
        new = 1000 + batch if rng.random() < 0.3 else None
        lines += [{"pid": new, "price": 77.0}] if new is not None else []
        _ingest(wh, tmp_path, "parts", *lines)
        prices.update({pid: p for pid, p in changed.items() if pid != gone})
        prices.pop(gone, None)
        if new is not None:
            prices[new] = 77.0
        choices.append(rng.choice(["maps", "recompute"]))
        # stopped after one or more map commits: the maps are ahead of the view
        merges[0], crash_at[0] = 0, (rng.randint(2, 4) if rng.random() < 0.3 else None)
        try:
            (r,) = wh.maintain("dear", progress=said.append)
            seen.add(r.strategy)
        except KeyboardInterrupt:
            seen.add("crash")
            crash_at[0] = None
            (r,) = wh.maintain("dear", progress=said.append)  # the next run converges
        check(f"batch {batch} ({r.strategy})")
    assert seen == {"maps", "recompute", "crash"}
    assert any("catching the maps up" in s for s in said) and any("rebuilding them" in s for s in said)


#: a GROUP BY whose WHERE has EXISTS (which id has no rule for), joined with a table outside it
CHEAP_COUNTS = """CREATE VIEW cheap_counts AS
SELECT d.did, d.category, g.n
FROM devices d JOIN (SELECT dp.did AS did, COUNT(*) AS n FROM devices_parts dp
                     WHERE EXISTS (SELECT VALUE p FROM parts p WHERE p.pid = dp.pid AND p.price < 40)
                     GROUP BY dp.did) AS g ON g.did = d.did"""


@pytest.mark.slow  # the default run has maps caches in the differential corpus (MAPS_DEFAULT)
def test_a_group_by_joined_with_a_table_is_kept_by_a_maps_cache_and_the_rest_by_id(tables, tmp_path):
    """The maps cannot maintain the whole view (it reads ``devices`` outside its GROUP BY): the
    GROUP BY's groups are a maps cache, and the join with ``devices`` is maintained by ID over
    the cache's changes; the cache's maps move with the changes."""
    wh = tables
    wh.define(CHEAP_COUNTS, strategy="maps")
    program = load_program(wh.catalog, wh.catalog.view("cheap_counts"))
    assert program.maps is None and [c.maps is not None for c in program.script.caches] == [True]
    cache = wh.catalog.root / wh.catalog.view("cheap_counts").extra["caches"]["cheap_counts$cache1"]
    maps = cache.parent / f"{cache.name}.maps"
    maps_before = {m.name: delta.version(m) for m in maps.iterdir()}
    assert set(maps_before) == set(program.script.caches[0].maps.program.maps)
    before = {r["did"]: r["n"] for r in wh.rows("cheap_counts")}
    # part 9 becomes cheap, part 6 dear; a device gets a new link to a cheap part; a device goes
    _ingest(wh, tmp_path, "parts", {"pid": 9, "price": 5.0}, {"pid": 6, "price": 95.0})
    _ingest(wh, tmp_path, "devices_parts", {"did": 5, "pid": 9})
    _ingest(wh, tmp_path, "devices", {"__delete": {"did": 1}})
    (result,) = wh.maintain("cheap_counts")
    assert result.strategy == "maps" and result.version is not None, result
    check = wh.verify("cheap_counts")  # the view, the cache and its maps against their recomputations
    assert check.ok and len(check.caches) == 1 + len(maps_before), check.summary()
    after = {r["did"]: r["n"] for r in wh.rows("cheap_counts")}
    assert after != before and 1 not in after
    assert any(delta.version(maps / m) > v for m, v in maps_before.items())


def test_a_static_table_gets_no_trigger_and_no_map_of_its_changes_and_refuses_ingest(make_warehouse, tmp_path):
    """DBToaster §5.1: a relation that never changes needs no map for its deltas.  With
    ``devices`` declared static, the maps of ``COST`` keep nothing for a change of a device
    (the sums per device of its parts, which only a device's change reads), the view is still
    maintained through changes of the other tables, and ingest refuses the static table."""
    from idivm.exec.maps import plan_maps

    wh = make_warehouse("maps_static")
    for table, key in (("parts", ["pid"]), ("devices", ["did"]), ("devices_parts", ["did", "pid"])):
        rows = [json.loads(line) for line in sample_path("devices", table).read_text().splitlines() if line.strip()]
        assert wh.create_table(table, key, rows, static=table == "devices").static == (table == "devices")
    wh.define(COST, strategy="maps")
    compiled = load_program(wh.catalog, wh.catalog.view("stats"))
    program = compiled.maps.program
    assert not any(rel == "devices" for rel, _ in program.triggers)
    assert program.static == ("devices",) and "static (no trigger, no map of their changes): devices" in str(program)
    assert "static (no trigger" in wh.explain("stats")
    columns = {t: [n for n, _ in e.schema.fields] for t, e in wh.catalog.tables.items()}
    every = plan_maps(compiled.prov.plan, columns).program  # the same view, devices not static
    assert any(rel == "devices" for rel, _ in every.triggers) and len(program.maps) < len(every.maps)
    _ingest(wh, tmp_path, "parts", {"pid": 1, "price": 12.5})
    _ingest(wh, tmp_path, "devices_parts", {"__delete": {"did": 1, "pid": 2}})
    (r,) = wh.maintain("stats")
    assert r.strategy == "maps"
    verified = wh.verify("stats")
    assert verified.ok and len(verified.caches) == len(program.maps), verified.summary()
    version = wh.table_info("devices").version
    (tmp_path / "d.jsonl").write_text(json.dumps({"did": 1, "category": "tablet"}) + "\n")
    with pytest.raises(CatalogError, match="table devices is static"):
        wh.ingest("devices", tmp_path / "d.jsonl", format="rows")
    assert wh.table_info("devices").version == version
    assert wh.tables()[0].as_json()["static"] is True  # devices, first by name


def test_auto_records_its_definition_as_the_views_own_write_without_building_its_maps(tables, monkeypatch):
    """``auto``'s first estimate of a recomputation is the materialization at ``define``: the
    view's write alone, which is what a recomputation by ``auto`` does; building the maps, made
    slow here, does not count in it."""
    from idivm.exec import history
    from idivm.exec.programs import program_folder
    from idivm.storage import delta

    slow, write = 2.0, delta.write_spark

    def slow_maps(df, path, **kwargs):
        if ".maps" in str(path):
            time.sleep(slow)
        return write(df, path, **kwargs)

    monkeypatch.setattr(delta, "write_spark", slow_maps)
    wh = tables
    text = "CREATE VIEW dear AS SELECT COUNT(*) AS n, SUM(p.price) AS total, MAX(p.price) AS hi FROM parts p " \
           "WHERE p.price > 50"
    wh.define(text.replace("VIEW dear", "VIEW warm"), strategy="recompute")  # Spark warmed up: a quick write
    wh.define(text, strategy="auto")
    maps = len(wh.catalog.view("dear").extra["maps"])
    (defined,) = history.read(wh.catalog.root / program_folder(wh.catalog.view("dear").path))
    assert maps >= 2 and defined.strategy == "recompute"
    assert 0 < defined.seconds < maps * slow  # the maps' writes are not in it


def _consolidated_often(wh, monkeypatch) -> dict:
    """The paths of view ``stats``'s maps, which runs write consolidated after a few appends."""
    from idivm.exec import maps as mapping

    monkeypatch.setattr(mapping, "CONSOLIDATE_ROWS", 6)
    monkeypatch.setattr(mapping, "MAX_APPENDS", 3)
    return {m: wh.catalog.root / rel for m, rel in wh.catalog.view("stats").extra["maps"].items()}


@pytest.mark.parametrize("spark_terms", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["arrow", "spark"])
def test_maps_take_increments_appended_and_are_consolidated_now_and_then(cost, tmp_path, monkeypatch, spark_terms):
    """A run appends each changed map's increments (a map then holds a key in several rows, which
    its readers sum); once the appended rows pass the policy's bound the map is written
    consolidated again.  Through appends and consolidations, statements evaluated in the
    driver or by Spark, the view equals its recomputation and every map its definition."""
    import random

    from idivm.exec import maps as mapping
    from idivm.exec import runtime

    if spark_terms:
        monkeypatch.setattr(runtime, "LOCAL_MAPS_MAX_ROWS", 0)
    wh = cost
    paths = _consolidated_often(wh, monkeypatch)
    rng = random.Random(7)
    appended = consolidated = 0
    duplicated = False
    for batch in range(4):
        _ingest(wh, tmp_path, "parts", *[{"pid": pid, "price": round(rng.uniform(1, 99), 2)}
                                         for pid in rng.sample(range(1, 11), 3)])
        before = {m: delta.version(p) for m, p in paths.items()}
        _maintained(wh)
        for m, p in paths.items():
            for v in range(before[m] + 1, delta.version(p) + 1):
                base = delta.commit_at(p, v).get(mapping.APPENDED_TO)
                appended += base is not None
                consolidated += base is None
            keys = [c for c in delta.schema(p).names if c != mapping.M]
            stored = delta.read_arrow(p)
            entries = mapping.read_map_arrow(p, delta.version(p), keys)
            duplicated |= stored.num_rows > entries.num_rows
            assert entries.num_rows == entries.group_by(keys).aggregate([]).num_rows, m  # each key once
    assert appended and consolidated and duplicated, (appended, consolidated, duplicated)


def test_a_process_reads_each_map_once_and_holds_its_later_versions(cost, tmp_path, monkeypatch):
    """Runs in one process read a map's table in one run at most: later versions are the held
    value plus the increments a run appended (or the value it wrote consolidated).  What is held
    equals what the table holds (read back afresh), run after run, through appends and
    consolidations of the tables and of the values held."""
    import random

    from idivm.exec import maps as mapping

    monkeypatch.setattr(mapping, "HELD_INCREMENT_ROWS", 4)
    wh = cost
    paths = _consolidated_often(wh, monkeypatch)
    rng = random.Random(3)

    def batch() -> None:
        _ingest(wh, tmp_path, "parts", *[{"pid": pid, "price": round(rng.uniform(1, 99), 2)}
                                         for pid in rng.sample(range(1, 11), 3)])

    reads: list[tuple[int, str]] = []  # (run, map)
    real = mapping.read_map_arrow
    monkeypatch.setattr(mapping, "read_map_arrow", lambda *a, **k: reads.append((run, str(a[0]))) or real(*a, **k))
    for run in range(4):
        batch()
        (result,) = wh.maintain("stats")
        assert result.strategy == "maps"
        for m, p in paths.items():
            keys = [c for c in delta.schema(p).names if c != mapping.M]
            key = delta.version_key(p, delta.version(p))
            value = mapping._HELD.get(key)
            if value is not None:
                value, expected = value.value, real(p, delta.version(p), keys)
                order = [(k, "ascending") for k in keys]
                assert value.sort_by(order).equals(expected.sort_by(order)), m
    again = sorted({m for r, m in reads if any(q == m and s < r for s, q in reads)})
    assert reads and not again, f"maps read again from their tables: {reads}"
    assert wh.verify("stats").ok


def test_the_rows_above_the_group_by_are_computed_in_the_driver_where_arrow_evaluates_them(tables, tmp_path,
                                                                                           monkeypatch):
    """In a run evaluated in the driver, the operators above γ (a HAVING, arithmetic on the
    aggregates, the returned tuple) are evaluated over γ's rows there, without a Spark plan;
    a function Arrow might evaluate otherwise than Spark (LOWER) sends them to the plan
    compiler.  Both views equal their recomputation batch after batch."""
    import random

    from idivm.exec import compiler

    wh = tables
    wh.define("""CREATE VIEW doubled AS
                 SELECT did, SUM(price) * 2 AS twice, COUNT(*) AS n, SUM(price) / COUNT(*) AS mean
                 FROM parts NATURAL JOIN devices_parts GROUP BY did HAVING SUM(price) > 120""", strategy="maps")
    wh.define("""CREATE VIEW lowered AS SELECT category, LOWER(category) AS low, COUNT(*) AS n FROM devices
                 GROUP BY category""", strategy="maps")
    planned = []
    real = compiler.PlanCompiler.evaluate
    monkeypatch.setattr(compiler.PlanCompiler, "evaluate",
                        lambda self, *a, **k: planned.append(1) or real(self, *a, **k))
    rng = random.Random(11)
    for _ in range(3):
        _ingest(wh, tmp_path, "parts", *[{"pid": pid, "price": round(rng.uniform(1, 99), 2)}
                                         for pid in rng.sample(range(1, 11), 3)])
        _ingest(wh, tmp_path, "devices", {"did": rng.randint(1, 8), "category": rng.choice(["phone", "Tablet", "TV"])})
        counts = {}
        for view in ("doubled", "lowered"):
            planned.clear()
            (result,) = wh.maintain(view)
            assert result.strategy == "maps" and result.cost.total_jobs == 0, result.cost.summary()
            counts[view] = len(planned)
            assert wh.verify(view).ok, view
        assert counts["doubled"] == 0 and counts["lowered"] > 0, counts


def test_a_maps_view_is_clustered_by_its_groups_and_a_run_rewrites_only_the_files_of_the_groups_it_changes(
        make_warehouse, tmp_path):
    """A maps view is stored ordered by its group keys in small files (4 KiB in tests), and a
    run replaces the rows of the groups it changes by rewriting the one file holding them
    (:func:`~idivm.storage.delta.rewrite_clustered`), not by a MERGE over the view."""
    wh = make_warehouse("maps")
    wh.create_table("t", ["k"], [{"k": i, "g": i % 300, "x": i} for i in range(900)])
    wh.define("CREATE VIEW v AS SELECT t.g, SUM(t.x) AS s, COUNT(*) AS n FROM t GROUP BY t.g", strategy="maps")
    path = wh.catalog.path_of(wh.catalog.view("v"))
    assert len(delta.open_table(path).file_uris()) > 2
    _ingest(wh, tmp_path, "t", {"k": 5, "g": 5, "x": 1000})  # group 5: rows 5, 305, 605
    (result,) = wh.maintain("v")
    assert result.strategy == "maps"
    rewrite = json.loads(delta.commit_at(path, result.version)["idivm.rewrite"])
    assert rewrite["num_target_files_removed"] == 1 and rewrite["num_target_rows_updated"] == 1
    assert {r["g"]: (r["s"], r["n"]) for r in wh.rows("v")}[5] == (1000 + 305 + 605, 3)
    assert wh.verify("v").ok


@pytest.mark.slow  # a maps view's define (about 20 s); the default run is near its limit
def test_a_maps_run_knows_the_rows_of_the_versions_it_appended_as_a_count_of_them_would(cost, tmp_path):
    """The row count a run records for a map version it appended (the version before plus the
    rows appended, without opening it) equals the rows read from that version."""
    from idivm.storage.delta import table as tables

    _ingest(cost, tmp_path, "parts", {"pid": 10, "price": 1.5}, {"__delete": {"pid": 9}})
    _maintained(cost)
    root, maps = cost.catalog.root, cost.catalog.view("stats").extra["maps"]
    checked = 0
    for rel in maps.values():
        path = root / rel
        key = tables.version_key(path, delta.version(path))
        if key in delta._COUNTED:
            assert delta._COUNTED[key] == delta.read_arrow(path).num_rows
            checked += 1
    assert checked
