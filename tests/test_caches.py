"""Intermediate caches below aggregates (thesis §2.4 pass 3, Examples 2.4.6–2.4.7, footnote 6).

* Which aggregates get a cache: the select-project-join below γ of Fig. 2.5b does (its
  joins are lookups: devices_parts ⋈ parts on pid, ⋈ devices on did); a many-to-many join
  (multi-valued dependency), a single table, and tuple-based maintenance do not.
* The Δ-script of Fig. 2.5b with its cache (the shape of Fig. 2.7): a price update is an
  update of the cache rows holding the part, then an increment of their devices' cost
  that reads the cache's i-diff and no base table.
* Runs keep view and cache equal to their recomputations (``verify`` checks both), also
  after a crash between the cache's commit and the view's.
* A run that ``auto`` recomputes leaves the cache where it was; the next ``id`` run first
  catches it up to the view's watermark (a commit of its own), also after several such runs,
  in a random mix of the two and after crashes between any of the commits.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from idivm.datasets import devices, view_path
from idivm.demo import sample_path
from idivm.warehouse import Warehouse


def _rows(table: str) -> list[dict]:
    return [json.loads(line) for line in sample_path("devices", table).read_text().splitlines() if line.strip()]


@pytest.fixture
def thesis(make_warehouse) -> Warehouse:
    wh = make_warehouse()
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    return wh


def _table_read(name: str) -> str:
    """The table behind a state or i-diff a statement reads: ``Δu(t)``, ``t@post`` -> ``t``."""
    return name.split("(")[-1].rstrip(")").split("@")[0]


def _script(wh: Warehouse, text) -> dict:
    return json.loads(wh.explain(text, "json"))["delta_script"]


def test_the_input_of_the_aggregate_of_fig_2_5b_is_cached(thesis):
    script = _script(thesis, view_path("devices_cost"))
    (cache,) = script["caches"]
    assert cache["name"] == "phone_cost$cache1"
    # the SPJ below γ, with the columns γ reads and the IDs of the join (did, pid)
    assert sorted(cache["key"]) == ["__idivm_id_did", "__idivm_id_pid"]
    assert [n for n, _ in cache["type"]["tuple"]][:2] == ["devices_parts_did", "parts_price"]
    assert "GroupBy" not in cache["plan"] and "InnerJoin" in cache["plan"]
    # the view's statements read the cache (its states and i-diffs), never a base table
    for s in script["statements"]:
        assert {_table_read(r) for r in s["reads"]} == {"phone_cost$cache1"}, s["reads"]
    # a price update: an update of the cache rows by their partial ID pid (no state read) ...
    (upd,) = [s for s in cache["script"]["statements"] if s["origin"] == "Δu(parts) AS parts"]
    assert upd["kind"] == "update" and upd["on"] == ["__idivm_id_pid"] and upd["reads"] == ["Δu(parts)"]
    # ... then an increment of cost, from the cache's non-conditional update i-diff
    (inc,) = [s for s in script["statements"] if s["kind"] == "increment"]
    assert inc["origin"] == "Δu(phone_cost$cache1) AS cache" and [c for c, _ in inc["set"]] == ["cost"]
    assert {t["table"]: t["conditional"] for t in script["tables"]} == {"phone_cost$cache1": ["devices_parts_did"]}


def test_no_cache_over_many_to_many_joins_single_tables_or_tuple_based(make_warehouse):
    wh = make_warehouse()
    wh.create_table("r", "rid", pa.table({"rid": [1, 2], "g": [1, 1], "y": [5, 6]}))
    wh.create_table("s", "sid", pa.table({"sid": [1, 2], "y": [5, 5], "v": [1.0, 2.0]}))
    many = "CREATE VIEW m AS SELECT r.g, SUM(s.v) AS t FROM r JOIN s ON r.y = s.y GROUP BY r.g"
    assert "caches" not in _script(wh, many)  # r ⋈ s on a non-key: each r row meets many s rows
    lookup = "CREATE VIEW l AS SELECT r.g, SUM(s.v) AS t FROM r JOIN s ON r.y = s.sid GROUP BY r.g"
    assert len(_script(wh, lookup)["caches"]) == 1  # s's key is determined: a lookup
    single = "CREATE VIEW one AS SELECT r.g, COUNT(*) AS n FROM r WHERE r.y > 5 GROUP BY r.g"
    assert "caches" not in _script(wh, single)
    wh.define(lookup, strategy="tuple")
    assert not (wh.path / "views" / "l.caches").exists()


def _price_changes(path, factor: float, parts: list[dict]) -> None:
    path.write_text("".join(json.dumps({**p, "price": round(p["price"] * factor, 2)}) + "\n" for p in parts))


def test_runs_keep_view_and_cache_equal_to_their_recomputations(thesis, tmp_path):
    info = thesis.define(view_path("devices_cost"), strategy="id")
    assert (thesis.path / "views" / "phone_cost.caches" / "1" / "_delta_log").is_dir()
    parts, dps = _rows("parts"), _rows("devices_parts")
    _price_changes(tmp_path / "p.jsonl", 1.5, parts[:2])
    thesis.ingest("parts", tmp_path / "p.jsonl", format="rows")
    (r,) = thesis.maintain("phone_cost")
    assert r.strategy == "id" and r.version == info.version + 1 and r.inserted == 0 and r.deleted == 0
    check = thesis.verify("phone_cost")
    assert check.ok and len(check.caches) == 1, check.summary()
    # a link deleted, another inserted, a device's category changed (conditional: replace)
    d0 = dps[0]
    (tmp_path / "dp.jsonl").write_text(json.dumps({"__delete": {"did": d0["did"], "pid": d0["pid"]}}) + "\n"
                                       + json.dumps({"did": d0["did"], "pid": parts[-1]["pid"]}) + "\n")
    thesis.ingest("devices_parts", tmp_path / "dp.jsonl", format="rows")
    dev = _rows("devices")[0]
    other = "laptop" if dev["category"] == "phone" else "phone"
    (tmp_path / "d.jsonl").write_text(json.dumps({**dev, "category": other}) + "\n")
    thesis.ingest("devices", tmp_path / "d.jsonl", format="rows")
    (r,) = thesis.maintain("phone_cost")
    assert r.strategy == "id"
    check = thesis.verify("phone_cost")
    assert check.ok, check.summary()


def test_verify_catches_a_corrupted_cache(thesis):
    from idivm.storage import delta

    thesis.define(view_path("devices_cost"), strategy="id")
    cache = thesis.path / "views" / "phone_cost.caches" / "1"
    table = delta.read_spark(thesis.spark, cache, engine=thesis.storage).toArrow()
    i = table.schema.get_field_index("parts_price")
    bad = table.set_column(i, "parts_price", pa.array([v + 1 for v in table.column(i).to_pylist()], pa.float64()))
    delta.write_spark(thesis.spark.createDataFrame(bad), cache, mode="overwrite", engine=thesis.storage)
    check = thesis.verify("phone_cost")
    assert not check.ok and "cache phone_cost$cache1 differs" in check.summary()
    assert "view phone_cost matches" in check.summary()


def _small_world(wh: Warehouse) -> list[dict]:
    parts = [{"pid": p, "price": float(p)} for p in range(20)]
    wh.create_table("parts", ["pid"], pa.Table.from_pylist(parts))
    wh.create_table("devices", ["did"], pa.Table.from_pylist(
        [{"did": d, "category": "phone" if d % 4 else "tv"} for d in range(40)]))
    wh.create_table("devices_parts", ["did", "pid"], pa.Table.from_pylist(
        [{"did": d, "pid": (d * 7 + i) % 20} for d in range(40) for i in range(3)]))
    return parts


def _watermarks(wh: Warehouse) -> tuple[dict, dict]:
    from idivm.exec.runtime import view_watermark

    return (view_watermark(wh.path / "views" / "phone_cost"),
            view_watermark(wh.path / "views" / "phone_cost.caches" / "1"))


def test_auto_recomputes_the_view_alone_and_the_next_id_run_catches_the_cache_up(make_warehouse, tmp_path):
    from idivm.storage import delta

    wh = make_warehouse()
    parts = _small_world(wh)
    wh.define(view_path("devices_cost"))  # auto: 30 phones
    cache = wh.path / "views" / "phone_cost.caches" / "1"
    cache_version = delta.version(cache)
    # every price changed twice: 80 change rows, large against the 180 rows of the base tables: recomputed
    for factor in (2.0, 2.5):
        _price_changes(tmp_path / "all.jsonl", factor, parts)
        wh.ingest("parts", tmp_path / "all.jsonl", format="rows")
    (r,) = wh.maintain("phone_cost")
    assert r.strategy == "recompute"
    view_at, cache_at = _watermarks(wh)
    assert delta.version(cache) == cache_version and cache_at["parts"] == view_at["parts"] - 2  # left behind
    assert wh.verify("phone_cost").ok
    _price_changes(tmp_path / "one.jsonl", 3.0, parts[1:2])  # small: ID-based, from the cache
    wh.ingest("parts", tmp_path / "one.jsonl", format="rows")
    (r,) = wh.maintain("phone_cost")
    assert r.strategy == "id" and r.updated > 0
    assert delta.version(cache) == cache_version + 2  # caught up to the view's watermark, then moved on
    view_at, cache_at = _watermarks(wh)
    assert view_at == cache_at
    check = wh.verify("phone_cost")
    assert check.ok, check.summary()


@pytest.mark.parametrize("crash_before", [1, 2, 3])
def test_a_crash_in_any_commit_of_a_catching_up_run_is_recovered(make_warehouse, tmp_path, monkeypatch, crash_before):
    """The id run after a recomputation commits the cache at the view's watermark (1), the
    cache at the new one (2), then the view (3); a crash before any of them is recovered."""
    from idivm.exec import history
    from idivm.exec.runtime import Runtime

    wh = make_warehouse()
    parts = _small_world(wh)
    wh.define(view_path("devices_cost"))
    choice = ["recompute"]
    monkeypatch.setattr(history, "choose", lambda *a: (choice[0], "forced"))
    _price_changes(tmp_path / "a.jsonl", 2.0, parts[:5])
    wh.ingest("parts", tmp_path / "a.jsonl", format="rows")
    assert wh.maintain("phone_cost")[0].strategy == "recompute"
    _price_changes(tmp_path / "b.jsonl", 3.0, parts[3:8])
    wh.ingest("parts", tmp_path / "b.jsonl", format="rows")
    choice[0] = "id"
    real, calls = Runtime.apply_script, [0]

    def crashing(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == crash_before:
            raise KeyboardInterrupt(f"crash before commit {crash_before}")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Runtime, "apply_script", crashing)
    with pytest.raises(KeyboardInterrupt):
        wh.maintain("phone_cost")
    monkeypatch.setattr(Runtime, "apply_script", real)
    (r,) = wh.maintain("phone_cost")
    assert r.strategy == "id" and r.version is not None
    view_at, cache_at = _watermarks(wh)
    assert view_at == cache_at
    check = wh.verify("phone_cost")
    assert check.ok, check.summary()


def test_random_mixes_of_auto_choices_and_crashes_keep_view_and_cache_equal_to_their_recomputations(
        make_warehouse, tmp_path, monkeypatch):
    """Each batch changes random prices, device categories and devices' parts; ``auto``'s
    choice is drawn at random (so the cache lags by one or more recomputations, or not at
    all), and some runs crash at a random commit; after every batch the view and its cache
    equal their recomputations."""
    import random

    from idivm.exec import history
    from idivm.exec.runtime import Runtime

    rng = random.Random(7)
    wh = make_warehouse()
    parts = _small_world(wh)
    wh.define(view_path("devices_cost"))
    choices = []
    monkeypatch.setattr(history, "choose", lambda *a: (choices[-1], "drawn"))
    real_apply, real_recompute = Runtime.apply_script, Runtime.recompute
    crash_at = [None]  # the commit (counted from 1) of the run that raises instead
    commits = [0]

    def counted(real):
        def call(self, *args, **kwargs):
            commits[0] += 1
            if commits[0] == crash_at[0]:
                raise KeyboardInterrupt(f"crash before commit {commits[0]}")
            return real(self, *args, **kwargs)
        return call

    monkeypatch.setattr(Runtime, "apply_script", counted(real_apply))
    monkeypatch.setattr(Runtime, "recompute", counted(real_recompute))
    seen = set()
    for batch in range(10):
        rows = [{**p, "price": round(rng.uniform(1, 50), 2)} for p in rng.sample(parts, rng.randint(1, 6))]
        (tmp_path / f"p{batch}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        wh.ingest("parts", tmp_path / f"p{batch}.jsonl", format="rows")
        if rng.random() < 0.4:
            d = rng.randrange(40)
            (tmp_path / f"d{batch}.jsonl").write_text(json.dumps({"did": d, "category": rng.choice(["phone", "tv"])}))
            wh.ingest("devices", tmp_path / f"d{batch}.jsonl", format="rows")
        choices.append(rng.choice(["id", "recompute", "recompute"]))
        commits[0], crash_at[0] = 0, (rng.randint(1, 3) if rng.random() < 0.3 else None)
        try:
            (r,) = wh.maintain("phone_cost")
            seen.add(r.strategy)
        except KeyboardInterrupt:
            seen.add("crash")
            crash_at[0] = None
            (r,) = wh.maintain("phone_cost")  # the next run converges
        view_at, cache_at = _watermarks(wh)
        if r.strategy == "id":
            assert cache_at == view_at
        check = wh.verify("phone_cost")
        assert check.ok, f"batch {batch} ({r.strategy}): {check.summary()}"
    assert seen == {"id", "recompute", "crash"}


def test_a_crash_between_the_cache_commit_and_the_view_commit_is_recovered(thesis, tmp_path, monkeypatch):
    thesis.define(view_path("devices_cost"), strategy="id")
    _price_changes(tmp_path / "p.jsonl", 1.25, _rows("parts")[:3])
    thesis.ingest("parts", tmp_path / "p.jsonl", format="rows")
    from idivm.exec.runtime import Runtime, view_watermark

    real = Runtime.apply_script

    def crash_on_the_view(self, script, path, *args, **kwargs):
        if script.view == "phone_cost":
            raise KeyboardInterrupt("crash after the cache committed")
        return real(self, script, path, *args, **kwargs)

    monkeypatch.setattr(Runtime, "apply_script", crash_on_the_view)
    with pytest.raises(KeyboardInterrupt):
        thesis.maintain("phone_cost")
    monkeypatch.setattr(Runtime, "apply_script", real)

    cache = thesis.path / "views" / "phone_cost.caches" / "1"
    view = thesis.path / "views" / "phone_cost"
    assert view_watermark(cache)["parts"] == view_watermark(view)["parts"] + 1  # only the cache moved
    (r,) = thesis.maintain("phone_cost")
    assert r.strategy == "id" and r.version is not None
    check = thesis.verify("phone_cost")
    assert check.ok, check.summary()


# --- operator caches of AVG (Appendix C: Cache_sum and Cache_count per group) ------------------------

_EMP = pa.schema([("eid", pa.int64()), ("dept", pa.string()), ("salary", pa.int64()), ("bonus", pa.float64())])
_AVG = ("CREATE VIEW mean_pay AS SELECT e.dept, AVG(e.salary) AS salary, AVG(e.bonus) AS bonus, COUNT(*) AS n "
        "FROM emp e GROUP BY e.dept")
# over a lookup join: the operator cache reads the intermediate cache of the join (a cache of a cache)
_AVG_JOIN = ("CREATE VIEW mean_price AS SELECT dp.did, AVG(p.price) AS price, SUM(p.price) AS total, "
             "COUNT(p.price) AS priced FROM devices_parts dp JOIN parts p ON dp.pid = p.pid GROUP BY dp.did")


def _emp(eid, dept, salary, bonus=1.5) -> dict:
    return {"eid": eid, "dept": dept, "salary": salary, "bonus": bonus}


def test_an_update_of_an_averaged_attribute_increments_the_operator_cache_and_updates_the_view(make_warehouse):
    wh = make_warehouse()
    wh.create_table("emp", "eid", pa.Table.from_pylist([_emp(1, "a", 10)], _EMP))
    script = _script(wh, _AVG)
    (cache,) = script["caches"]
    assert cache["key"] == ["dept"] and "AVG" not in cache["plan"]
    assert "SUM(coalesce(e.salary, 0))" in cache["plan"] and "COUNT(e.salary)" in cache["plan"]
    # the cache's SUM/COUNT: increments by group, no group recomputed (COALESCE keeps the sum
    # exact where a value is or becomes NULL), no pre state read; the post rows of the changed
    # tuples are Δu(emp)'s own, which semantic minimization (Fig. 2.8, C3) reads instead
    (inc,) = [s for s in cache["script"]["statements"] if s["origin"] == "Δu(emp) AS e"]
    assert inc["kind"] == "increment" and set(inc["reads"]) <= {"Δu(emp)", "emp@post"}
    assert sorted(c for c, _ in inc["set"]) == ["avg_2_count", "avg_2_sum", "avg_count", "avg_sum"]
    # the view: the cache's update i-diff passes the projection sum / count as an update
    (upd,) = [s for s in script["statements"] if s["kind"] != "replace"]
    assert upd["kind"] == "update" and upd["reads"] == ["Δu(mean_pay$cache1)"]
    assert sorted(c for c, _ in upd["set"]) == ["bonus", "n", "salary"]
    assert {t["table"]: t["conditional"] for t in script["tables"]} == {"mean_pay$cache1": []}
    # MIN beside AVG (recomputed on any change anyway), DISTINCT and global aggregates keep no operator cache
    for text in ("SELECT e.dept, AVG(e.salary) AS m, MIN(e.salary) AS lo FROM emp e GROUP BY e.dept",
                 "SELECT e.dept, AVG(DISTINCT e.salary) AS m FROM emp e GROUP BY e.dept",
                 "SELECT AVG(e.salary) AS m FROM emp e"):
        assert "caches" not in _script(wh, f"CREATE VIEW x AS {text}"), text


def test_runs_keep_averages_equal_to_their_recomputations(make_warehouse, tmp_path):
    wh = make_warehouse()
    emp = [_emp(1, "a", 10), _emp(2, "a", None, None), _emp(3, "b", 7, 2.0), _emp(4, "b", 8),
           _emp(5, None, 3), _emp(6, "c", None)]
    wh.create_table("emp", "eid", pa.Table.from_pylist(emp, _EMP))
    wh.create_table("parts", "pid", pa.Table.from_pylist([{"pid": p, "price": float(p) if p % 3 else None}
                                                          for p in range(6)]))
    wh.create_table("devices_parts", ["did", "pid"], pa.Table.from_pylist(
        [{"did": d, "pid": (d + i) % 6} for d in range(4) for i in range(2)]))
    wh.define(_AVG, strategy="id")
    wh.define(_AVG_JOIN, strategy="id")
    caches = _script(wh, _AVG_JOIN)["caches"]
    assert [len(c["script"]["tables"]) for c in caches] == [2, 1]  # join cache, then the AVG's cache over it

    def run(changes: dict[str, list[dict]]) -> None:
        for table, rows in changes.items():
            (tmp_path / f"{table}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            wh.ingest(table, tmp_path / f"{table}.jsonl", format="rows")
        for r in wh.maintain():
            assert r.strategy == "id", r
            check = wh.verify(r.name)
            assert check.ok, check.summary()

    def means() -> dict:
        return {r["dept"]: (r["salary"], r["n"]) for r in wh.rows("mean_pay")}

    # averaged values updated, to and from NULL; group c keeps only NULLs, group a gets one back
    run({"emp": [_emp(1, "a", None), _emp(2, "a", 4, 3.0), _emp(3, "b", 9, None), _emp(6, "c", None, None)],
         "parts": [{"pid": 0, "price": 2.5}, {"pid": 1, "price": None}, {"pid": 4, "price": 40.0}]})
    assert means()["c"] == (None, 1) and means()["a"] == (4.0, 2) and means()["b"] == (8.5, 2)
    # a group appears, one disappears, the NULL group grows; a row moves between groups
    run({"emp": [_emp(7, "d", 1), _emp(8, "d", 2), {"__delete": {"eid": 6}}, _emp(9, None, 6), _emp(4, "a", 8)],
         "devices_parts": [{"__delete": {"did": 0, "pid": 0}}, {"__delete": {"did": 0, "pid": 1}},
                           {"did": 5, "pid": 2}]})
    assert "c" not in means() and means()["d"] == (1.5, 2) and means()[None] == (4.5, 2)
