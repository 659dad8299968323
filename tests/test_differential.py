"""Differential tests: views maintained through seeded random batches of base-table changes.

One warehouse holds the devices/parts tables and the Yelp-like tables, and a corpus of views
over them: relational views over devices/parts (the thesis' phone_parts and phone_cost, a left
join with counts, NOT EXISTS, UNION ALL, HAVING) and nested views over the Yelp tables (the
thesis' V and V1, an unnest of ``users.elite``, a GROUP AS with ARRAY_COUNT).  Every view is
defined once; then, batch after batch, the changes are ingested (one file per table),
``maintain()`` brings every view up to date and every view is checked:

* ``verify(view)`` passes (the stored view equals its recomputation at its watermark);
* a view whose base tables did not move committed nothing, any other exactly one version;
* relational views equal, as bags (numbers rounded), DuckDB's answer to the same query over
  the oracle's own copy of the data: a dict per table, keyed by primary key, to which the
  test applies each batch by itself;
* nested views have the top-level keys (and the members per key) that the oracle's data
  implies, computed in plain Python.

:class:`BatchGenerator` makes the batches: inserts of new keys, updates of attributes no view
filters on, updates of attributes views filter or join on (``devices.category``,
``reviews.stars``, ``businesses.city``), deletes, a delete then a reinsert of one key, several
updates of one key, edits of nested lists (``users.elite``, ``businesses.categories``) and
empty batches, which must commit nothing.  Keys are never updated.

The default run uses a few dozen rows per table and three batches; ``--runslow`` adds more
seeds, larger tables and longer random sequences of batches.
"""

from __future__ import annotations

import copy
import decimal
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from idivm.datasets import devices, yelp
from idivm.storage import delta

duckdb = pytest.importorskip("duckdb")

VIEWS_DIR = Path(devices.__file__).parent / "views"
SF = "San Francisco"

ARROW_TYPES = {"int64": pa.int64(), "float64": pa.float64(), "string": pa.string(),
               "list<string>": pa.list_(pa.string()), "list<int64>": pa.list_(pa.int64())}
SCHEMAS = {name: pa.schema([(c, ARROW_TYPES[t]) for c, t in cols.items()])
           for name, cols in {**devices.SCHEMAS, **yelp.SCHEMAS}.items()}
KEYS = {**devices.KEYS, **yelp.KEYS}


# --- the oracle's data -------------------------------------------------------------------------------

class Oracle:
    """The test's own copy of every base table: table -> {key tuple: row}."""

    def __init__(self, tables: Mapping[str, Iterable[dict]]):
        self.data: dict[str, dict[tuple, dict]] = {}
        for name, rows in tables.items():
            self.data[name] = {}
            for row in rows:
                self.data[name][key_of(name, row)] = copy.deepcopy(row)

    def apply(self, table: str, lines: list[dict]) -> None:
        """Apply one ingest file's lines in order: a row upserts, ``{"__delete": {...}}`` deletes."""
        rows = self.data[table]
        for line in lines:
            if "__delete" in line:
                rows.pop(key_of(table, line["__delete"]), None)
            else:
                rows[key_of(table, line)] = copy.deepcopy(line)

    def rows(self, table: str) -> list[dict]:
        return list(self.data[table].values())

    def arrow(self, table: str) -> pa.Table:
        return pa.Table.from_pylist(self.rows(table), schema=SCHEMAS[table])

    def duckdb(self, tables: Iterable[str]):
        con = duckdb.connect()
        for name in tables:
            con.register(f"{name}_arrow", self.arrow(name))
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
            con.unregister(f"{name}_arrow")
        return con


def key_of(table: str, row: Mapping) -> tuple:
    return tuple(row[k] for k in KEYS[table])


# --- batches ------------------------------------------------------------------------------------------

@dataclass
class Batch:
    """The lines of one ingest file per table, in order, and the kinds of change they hold."""

    lines: dict[str, list[dict]]
    kinds: list[str] = field(default_factory=list)

    @property
    def tables_changed(self) -> set[str]:
        return {t for t, lines in self.lines.items() if lines}

    def write(self, directory: Path) -> dict[str, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        files = {}
        for table, lines in self.lines.items():
            files[table] = directory / f"{table}.jsonl"
            files[table].write_text("".join(json.dumps(line) + "\n" for line in lines))
        return files


class BatchGenerator:
    """Seeded random batches of row changes.

    The generator keeps its own working copy of the tables (it never touches the oracle) so that
    the changes of one batch build on each other: a key deleted earlier in the batch can be
    reinserted, a key can be updated several times.  ``kinds`` maps a kind name to a function
    ``(generator) -> None`` that emits that kind of change through :meth:`upsert`/:meth:`delete`.
    """

    def __init__(self, seed: int, tables: Mapping[str, Mapping[tuple, dict]],
                 kinds: Mapping[str, Callable[["BatchGenerator"], None]]):
        self.rng = random.Random(seed)
        self.state = {t: copy.deepcopy(dict(rows)) for t, rows in tables.items()}
        self.kinds = dict(kinds)
        # new keys number on from the largest id of each table (yelp ids are zero-padded strings)
        self.next_id = {t: 1 + max((int(re.sub(r"\D", "", str(k[0]))) for k in rows), default=0)
                        for t, rows in self.state.items()}
        self._lines: dict[str, list[dict]] = {}

    def batch(self, kinds: Iterable[str] | None = None) -> Batch:
        """A batch with one change of every kind in ``kinds`` (default: every kind), shuffled."""
        chosen = list(self.kinds if kinds is None else kinds)
        self.rng.shuffle(chosen)
        self._lines = {t: [] for t in self.state}
        for kind in chosen:
            self.kinds[kind](self)
        return Batch(self._lines, chosen)

    def random_batch(self, p_empty: float = 0.15) -> Batch:
        """An empty batch with probability ``p_empty``, else a random non-empty subset of the kinds
        (each kind possibly repeated)."""
        if self.rng.random() < p_empty:
            return self.batch([])
        names = list(self.kinds)
        chosen = [k for k in names if self.rng.random() < 0.5] or [self.rng.choice(names)]
        chosen += self.rng.sample(names, self.rng.randrange(0, 3))
        return self.batch(chosen)

    # primitives used by the kinds

    def upsert(self, table: str, row: dict) -> None:
        self.state[table][key_of(table, row)] = copy.deepcopy(row)
        self._lines[table].append(copy.deepcopy(row))

    def delete(self, table: str, row: Mapping) -> None:
        self.state[table].pop(key_of(table, row), None)
        self._lines[table].append({"__delete": {k: row[k] for k in KEYS[table]}})

    def pick(self, table: str, where: Callable[[dict], bool] = lambda r: True) -> dict | None:
        """A copy of a random current row of ``table`` satisfying ``where`` (None if there is none)."""
        rows = [r for _, r in sorted(self.state[table].items()) if where(r)]
        return copy.deepcopy(self.rng.choice(rows)) if rows else None

    def update(self, table: str, row: dict | None, **changes) -> dict | None:
        """Upsert ``row`` with ``changes`` (values or functions of the old value); keys stay."""
        if row is None:
            return None
        assert not set(changes) & set(KEYS[table]), "keys are never updated"
        for column, change in changes.items():
            row[column] = change(row[column]) if callable(change) else change
        self.upsert(table, row)
        return row

    def new_id(self, table: str) -> int:
        n = self.next_id[table]
        self.next_id[table] = n + 1
        return n


# devices/parts changes

def _price(g: BatchGenerator) -> float:
    return round(g.rng.uniform(devices.MIN_PRICE, devices.MAX_PRICE), 2)


def _category(g: BatchGenerator) -> str:
    return devices.PHONE if g.rng.random() < 0.5 else g.rng.choice(devices.OTHER_CATEGORIES)


def dev_insert(g: BatchGenerator) -> None:
    did, pid = g.new_id("devices"), g.new_id("parts")
    g.upsert("devices", {"did": did, "category": _category(g)})
    g.upsert("parts", {"pid": pid, "price": _price(g)})
    existing_parts = sorted(k[0] for k in g.state["parts"])
    for p in {pid, *g.rng.sample(existing_parts, min(2, len(existing_parts)))}:
        g.upsert("devices_parts", {"did": did, "pid": p})
    old = g.pick("devices")  # a new part in an existing device, and a link to a part that does not exist
    if old is not None and (old["did"], pid) not in g.state["devices_parts"]:
        g.upsert("devices_parts", {"did": old["did"], "pid": pid})
    g.upsert("devices_parts", {"did": did, "pid": g.next_id["parts"] + 50})


def dev_update_price(g: BatchGenerator) -> None:
    for _ in range(2):
        g.update("parts", g.pick("parts"), price=lambda _: _price(g))


def dev_update_category(g: BatchGenerator) -> None:
    g.update("devices", g.pick("devices", lambda r: r["category"] == devices.PHONE),
             category=lambda _: g.rng.choice(devices.OTHER_CATEGORIES))
    g.update("devices", g.pick("devices", lambda r: r["category"] != devices.PHONE), category=devices.PHONE)


def dev_delete(g: BatchGenerator) -> None:
    for table in ("devices", "parts", "devices_parts"):
        row = g.pick(table)
        if row is not None:
            g.delete(table, row)


def dev_delete_reinsert(g: BatchGenerator) -> None:
    row = g.pick("devices_parts")
    if row is not None:
        g.delete("devices_parts", row)
        g.upsert("devices_parts", row)
    row = g.pick("parts")
    if row is not None:
        g.delete("parts", row)
        g.update("parts", row, price=lambda _: _price(g))
    row = g.pick("devices")
    if row is not None:
        g.delete("devices", row)
        g.update("devices", row, category=lambda _: _category(g))


def dev_repeated_updates(g: BatchGenerator) -> None:
    part = g.pick("parts")
    for _ in range(3):
        g.update("parts", part, price=lambda _: _price(g))
    device = g.pick("devices")
    flips = [devices.PHONE, g.rng.choice(devices.OTHER_CATEGORIES)]
    g.rng.shuffle(flips)
    for category in flips:
        g.update("devices", device, category=category)


DEVICE_KINDS = {
    "insert": dev_insert,
    "update non-conditional (parts.price)": dev_update_price,
    "update conditional (devices.category)": dev_update_category,
    "delete": dev_delete,
    "delete then reinsert": dev_delete_reinsert,
    "several updates of one key": dev_repeated_updates,
}


# Yelp changes

def _elite(g: BatchGenerator) -> list[int]:
    if g.rng.random() < 0.4:
        return []
    start = g.rng.randint(yelp.FIRST_ELITE_YEAR, yelp.LAST_ELITE_YEAR)
    return list(range(start, min(start + g.rng.randint(1, 4), yelp.LAST_ELITE_YEAR + 1)))


def _city(g: BatchGenerator) -> str:
    return SF if g.rng.random() < 0.5 else g.rng.choice(yelp.OTHER_CITIES)[0]


def _review(g: BatchGenerator, business_id: str, user_id: str) -> dict:
    stars = g.rng.randint(1, 5)
    return {"review_id": yelp.review_id(g.new_id("reviews")), "user_id": user_id, "business_id": business_id,
            "stars": stars, "date": f"20{g.rng.randint(10, 22)}-0{g.rng.randint(1, 9)}-1{g.rng.randint(0, 9)}",
            "text": f"stars {stars}"}


def yelp_insert(g: BatchGenerator) -> None:
    b = yelp.business_id(g.new_id("businesses"))
    u = yelp.user_id(g.new_id("users"))
    g.upsert("businesses", {"business_id": b, "name": "New Place", "city": _city(g), "state": "CA",
                            "categories": g.rng.sample(yelp.CATEGORIES, g.rng.randint(0, 2))})
    g.upsert("users", {"user_id": u, "user_name": g.rng.choice(["Ana", "Bo", "Cy"]), "fans": g.rng.randrange(50),
                       "friends": [], "elite": _elite(g)})
    old_business = g.pick("businesses")
    old_user = g.pick("users")
    g.upsert("reviews", _review(g, b, u))
    if old_user is not None:
        g.upsert("reviews", _review(g, b, old_user["user_id"]))
    if old_business is not None:
        g.upsert("reviews", _review(g, old_business["business_id"], u))
    # a review by a user who does not exist (yet)
    g.upsert("reviews", _review(g, b, yelp.user_id(g.next_id["users"] + 70)))


def yelp_update_plain(g: BatchGenerator) -> None:
    g.update("reviews", g.pick("reviews"), text=lambda t: (t or "") + " Edited.")
    g.update("users", g.pick("users"), fans=lambda f: (f or 0) + 1, user_name="Renamed")
    g.update("businesses", g.pick("businesses"), name=lambda n: (n or "") + " II")


def yelp_update_conditional(g: BatchGenerator) -> None:
    g.update("reviews", g.pick("reviews", lambda r: r["stars"] >= 4), stars=lambda s: g.rng.randint(1, 3))
    g.update("reviews", g.pick("reviews", lambda r: r["stars"] < 4), stars=lambda s: g.rng.randint(4, 5))
    g.update("businesses", g.pick("businesses", lambda r: r["city"] == SF),
             city=lambda _: g.rng.choice(yelp.OTHER_CITIES)[0])
    g.update("businesses", g.pick("businesses", lambda r: r["city"] != SF), city=SF)


def yelp_delete(g: BatchGenerator) -> None:
    for table in ("reviews", "users", "businesses"):
        row = g.pick(table)
        if row is not None:
            g.delete(table, row)


def yelp_delete_reinsert(g: BatchGenerator) -> None:
    row = g.pick("reviews")
    if row is not None:
        g.delete("reviews", row)
        g.update("reviews", row, stars=lambda _: g.rng.randint(1, 5))
    row = g.pick("users", lambda r: bool(r["elite"]))
    if row is not None:
        g.delete("users", row)
        g.upsert("users", row)
    row = g.pick("businesses")
    if row is not None:
        g.delete("businesses", row)
        g.update("businesses", row, city=lambda _: _city(g))


def yelp_repeated_updates(g: BatchGenerator) -> None:
    review = g.pick("reviews")
    for _ in range(3):
        g.update("reviews", review, stars=lambda _: g.rng.randint(1, 5))
    business = g.pick("businesses")
    g.update("businesses", business, city=SF)
    g.update("businesses", business, city=lambda _: _city(g))


def _edit_list(g: BatchGenerator, values: list, pool: list) -> list:
    values = list(values or [])
    action = g.rng.choice(["add", "remove", "replace", "clear"] if values else ["add", "add", "replace"])
    fresh = [v for v in pool if v not in values]
    if action == "add" and fresh:
        values.insert(g.rng.randrange(len(values) + 1), g.rng.choice(fresh))
    elif action == "remove":
        values.pop(g.rng.randrange(len(values)))
    elif action == "replace":
        values = g.rng.sample(pool, g.rng.randint(1, 3))
    elif action == "clear":
        values = []
    return values


def yelp_nested_edits(g: BatchGenerator) -> None:
    years = list(range(yelp.FIRST_ELITE_YEAR, yelp.LAST_ELITE_YEAR + 1))
    for where in (lambda r: bool(r["elite"]), lambda r: not r["elite"]):
        g.update("users", g.pick("users", where), elite=lambda e: _edit_list(g, e, years))
    g.update("businesses", g.pick("businesses"),
             categories=lambda c: _edit_list(g, c, list(yelp.CATEGORIES)))
    # the same user's elite years edited twice in one batch
    user = g.pick("users")
    for _ in range(2):
        g.update("users", user, elite=lambda e: _edit_list(g, e, years))


YELP_KINDS = {
    "insert": yelp_insert,
    "update non-conditional (text, fans, name)": yelp_update_plain,
    "update conditional (reviews.stars, businesses.city)": yelp_update_conditional,
    "delete": yelp_delete,
    "delete then reinsert": yelp_delete_reinsert,
    "several updates of one key": yelp_repeated_updates,
    "nested list edits (users.elite, businesses.categories)": yelp_nested_edits,
}


# --- the corpus -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RelationalView:
    """A view over devices/parts and DuckDB SQL for the same query."""

    name: str
    sqlpp: str  # CREATE VIEW text or the path of a .sqlpp file
    duckdb: str
    tables: frozenset[str]


@dataclass(frozen=True)
class NestedView:
    """A view over the Yelp tables and the bag of its top-level keys (with what each key holds)
    as implied by the oracle's data; ``actual`` extracts the same from the view's rows."""

    name: str
    sqlpp: str
    tables: frozenset[str]
    expected: Callable[[Oracle], Counter]
    actual: Callable[[list[dict]], Counter]


DEVICE_TABLES = frozenset({"devices", "parts", "devices_parts"})

RELATIONAL = [
    RelationalView(
        "phone_parts", str(VIEWS_DIR / "devices_v.sqlpp"),
        "SELECT did, pid, price FROM parts NATURAL JOIN devices_parts NATURAL JOIN devices "
        "WHERE category = 'phone'",
        DEVICE_TABLES),
    RelationalView(
        "phone_cost", str(VIEWS_DIR / "devices_cost.sqlpp"),
        "SELECT did, sum(price) AS cost FROM parts NATURAL JOIN devices_parts NATURAL JOIN devices "
        "WHERE category = 'phone' GROUP BY did",
        DEVICE_TABLES),
    RelationalView(
        "device_part_counts",
        """CREATE VIEW device_part_counts AS
           SELECT d.did, d.category, COUNT(dp.pid) AS n, COUNT(*) AS rows_
           FROM devices d LEFT JOIN devices_parts dp ON dp.did = d.did
           GROUP BY d.did, d.category""",
        """SELECT d.did, d.category, count(dp.pid) AS n, count(*) AS rows_
           FROM devices d LEFT JOIN devices_parts dp ON dp.did = d.did
           GROUP BY d.did, d.category""",
        frozenset({"devices", "devices_parts"})),
    RelationalView(
        "parts_in_no_phone",
        """CREATE VIEW parts_in_no_phone AS
           SELECT p.pid, p.price FROM parts p
           WHERE NOT EXISTS (SELECT dp.did FROM devices_parts dp JOIN devices d ON dp.did = d.did
                             WHERE dp.pid = p.pid AND d.category = "phone")""",
        """SELECT p.pid, p.price FROM parts p
           WHERE NOT EXISTS (SELECT dp.did FROM devices_parts dp JOIN devices d ON dp.did = d.did
                             WHERE dp.pid = p.pid AND d.category = 'phone')""",
        DEVICE_TABLES),
    RelationalView(
        "cheap_parts_and_phone_links",
        """CREATE VIEW cheap_parts_and_phone_links AS
           SELECT p.pid AS id, "cheap part" AS kind FROM parts p WHERE p.price < 40
           UNION ALL
           SELECT dp.did AS id, "phone link" AS kind
           FROM devices_parts dp JOIN devices d ON dp.did = d.did WHERE d.category = "phone\"""",
        """SELECT p.pid AS id, 'cheap part' AS kind FROM parts p WHERE p.price < 40
           UNION ALL
           SELECT dp.did AS id, 'phone link' AS kind
           FROM devices_parts dp JOIN devices d ON dp.did = d.did WHERE d.category = 'phone'""",
        DEVICE_TABLES),
    RelationalView(
        "expensive_devices",
        """CREATE VIEW expensive_devices AS
           SELECT dp.did, COUNT(*) AS n, SUM(p.price) AS total
           FROM devices_parts dp JOIN parts p ON dp.pid = p.pid
           GROUP BY dp.did HAVING SUM(p.price) > 150""",
        """SELECT dp.did, count(*) AS n, sum(p.price) AS total
           FROM devices_parts dp JOIN parts p ON dp.pid = p.pid
           GROUP BY dp.did HAVING sum(p.price) > 150""",
        frozenset({"devices_parts", "parts"})),
]


def _sf_reviews_expected(o: Oracle) -> Counter:
    users = {u["user_id"] for u in o.rows("users")}
    return Counter(
        (b["business_id"], tuple(sorted(r["review_id"] for r in o.rows("reviews")
                                        if r["business_id"] == b["business_id"] and r["user_id"] in users)))
        for b in o.rows("businesses") if b["city"] == SF)


def _sf_reviews_actual(rows: list[dict]) -> Counter:
    return Counter((r["business_id"], tuple(sorted(x["review_id"] for x in r["full_reviews"] or [])))
                   for r in rows)


def _grouped_actual(rows: list[dict]) -> Counter:
    return Counter((r["business_id"], tuple(sorted(x["reviews"]["review_id"] for x in r["full_reviews"]
                                                   if x["reviews"] is not None)))
                   for r in rows)


def _elite_expected(o: Oracle) -> Counter:
    return Counter((u["user_id"], y, u["fans"]) for u in o.rows("users") for y in u["elite"] or [])


def _good_reviews_expected(o: Oracle) -> Counter:
    good = Counter(r["business_id"] for r in o.rows("reviews") if r["stars"] >= 4)
    return Counter({(b, n, n): 1 for b, n in good.items()})


NESTED = [
    NestedView("sf_reviews", str(VIEWS_DIR / "sf_reviews.sqlpp"),
               frozenset({"businesses", "reviews", "users"}), _sf_reviews_expected, _sf_reviews_actual),
    NestedView("sf_reviews_grouped", str(VIEWS_DIR / "sf_reviews_grouped.sqlpp"),
               frozenset({"businesses", "reviews", "users"}), _sf_reviews_expected, _grouped_actual),
    NestedView("elite_years",
               "CREATE VIEW elite_years AS SELECT u.user_id, y AS year, u.fans FROM users u, u.elite AS y",
               frozenset({"users"}), _elite_expected,
               lambda rows: Counter((r["user_id"], r["year"], r["fans"]) for r in rows)),
    NestedView("good_reviews",
               """CREATE VIEW good_reviews AS
                  SELECT r.business_id, ARRAY_COUNT(g) AS n, g AS members
                  FROM reviews r WHERE r.stars >= 4
                  GROUP BY r.business_id GROUP AS g""",
               frozenset({"reviews"}), _good_reviews_expected,
               lambda rows: Counter((r["business_id"], r["n"], len(r["members"])) for r in rows)),
]


# --- comparison ---------------------------------------------------------------------------------------

def norm(v):
    """Numbers as floats rounded to 9 significant digits (ints, doubles and decimals alike)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(f"{float(v):.9g}")
    return v


def duckdb_bag(con, sql: str) -> tuple[list[str], Counter]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return names, Counter(tuple(norm(v) for v in row) for row in cur.fetchall())


def view_bag(rows: list[dict], columns: list[str]) -> Counter:
    return Counter(tuple(norm(r[c]) for c in columns) for r in rows)


def bag_difference(expected: Counter, actual: Counter) -> str:
    return f"missing {dict(expected - actual)}, unexpected {dict(actual - expected)}"


# --- the run --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    devices: devices.DevicesSpec
    yelp: yelp.YelpSpec
    seed: int
    batches: int


SMALL = Scenario(
    devices.DevicesSpec(devices=12, parts=16, fanout=3, selectivity=0.5, seed=7),
    yelp.YelpSpec(businesses=10, reviews_per_business=3.0, users_per_business=1.5, sf_fraction=0.5,
                  elite_fraction=0.5, seed=5),
    seed=0, batches=3)


def build(make_warehouse, scenario: Scenario):
    """A warehouse with both schemas' tables and the whole corpus defined, and the oracle's copy."""
    tables = {**{n: list(rows) for n, rows in devices.tables(scenario.devices).items()},
              **{n: list(rows) for n, rows in yelp.tables(scenario.yelp).items()}}
    wh = make_warehouse("differential")
    for name, rows in tables.items():
        wh.create_table(name, list(KEYS[name]), pa.Table.from_pylist(rows, schema=SCHEMAS[name]))
    for view in [*RELATIONAL, *NESTED]:
        wh.define(view.sqlpp)
    return wh, Oracle(tables)


def check_views(wh, oracle: Oracle, context: str, verify: bool = True) -> None:
    """Every view of the corpus against the oracle and, with ``verify``, against its recomputation.

    The views are read (and verified) concurrently: these calls only read, and most of their time
    is Spark's per-job latency."""
    views = [*RELATIONAL, *NESTED]

    def read(name: str):
        return (wh.verify(name) if verify else None), wh.rows(name)

    with ThreadPoolExecutor(4) as pool:
        stored = dict(zip([v.name for v in views], pool.map(read, [v.name for v in views])))
    for name, (result, _) in stored.items():
        assert result is None or result.ok, f"{context}: {result.summary()}"
    con = oracle.duckdb(DEVICE_TABLES)
    try:
        for view in RELATIONAL:
            columns, expected = duckdb_bag(con, view.duckdb)
            actual = view_bag(stored[view.name][1], columns)
            assert actual == expected, f"{context}: view {view.name} differs from DuckDB: " + \
                bag_difference(expected, actual)
    finally:
        con.close()
    for view in NESTED:
        expected, actual = view.expected(oracle), view.actual(stored[view.name][1])
        assert actual == expected, f"{context}: view {view.name} has the wrong top-level keys: " + \
            bag_difference(expected, actual)


def run_batch(wh, oracle: Oracle, batch: Batch, directory: Path, context: str) -> None:
    """Ingest the batch (one file per table, empty files included), maintain every view, check it."""
    views = [*RELATIONAL, *NESTED]
    before = {v.name: wh.view_info(v.name).version for v in views}
    for table, path in batch.write(directory).items():
        version = wh.table_info(table).version
        result = wh.ingest(table, path, format="rows")
        assert result.version == version + (1 if batch.lines[table] else 0), \
            f"{context}: ingest of {len(batch.lines[table])} lines into {table}"
        oracle.apply(table, batch.lines[table])
    results = {r.name: r for r in wh.maintain()}
    assert set(results) == {v.name for v in views}
    for view in views:
        moved = bool(view.tables & batch.tables_changed)
        version = wh.view_info(view.name).version
        if moved:
            assert results[view.name].version == before[view.name] + 1 == version, \
                f"{context}: {view.name} should have committed exactly one version"
        else:
            assert results[view.name].version is None and version == before[view.name], \
                f"{context}: {view.name} committed although none of its base tables changed"
    check_views(wh, oracle, context)


def generators(oracle: Oracle, seed: int) -> tuple[BatchGenerator, BatchGenerator]:
    dev = BatchGenerator(seed, {t: oracle.data[t] for t in DEVICE_TABLES}, DEVICE_KINDS)
    yel = BatchGenerator(seed + 1, {t: oracle.data[t] for t in yelp.KEYS}, YELP_KINDS)
    return dev, yel


def merged(*batches: Batch) -> Batch:
    return Batch({t: lines for b in batches for t, lines in b.lines.items()},
                 [k for b in batches for k in b.kinds])


# --- tests ----------------------------------------------------------------------------------------------

def test_batch_generator_covers_every_kind_and_never_updates_keys():
    oracle = Oracle({**devices.tables(SMALL.devices), **yelp.tables(SMALL.yelp)})
    dev, yel = generators(oracle, 0)
    batch = merged(dev.batch(), yel.batch())
    assert set(batch.kinds) == set(DEVICE_KINDS) | set(YELP_KINDS)
    assert batch.tables_changed == set(KEYS)
    for table, lines in batch.lines.items():
        keys = [key_of(table, line.get("__delete", line)) for line in lines]
        deleted = {key_of(table, line["__delete"]) for line in lines if "__delete" in line}
        upserted = Counter(key_of(table, line) for line in lines if "__delete" not in line)
        assert deleted & set(upserted), f"{table}: no delete then reinsert"
        assert max(Counter(keys).values()) >= 2, f"{table}: no key changed twice"
        for line in lines:
            if "__delete" not in line:
                assert list(line) == list(SCHEMAS[table].names), f"{table}: not a whole row: {line}"
        new = set(upserted) - set(oracle.data[table])
        assert new, f"{table}: no insert of a new key"
    assert dev.batch([]).tables_changed == set()
    # the generator works on its own copy: the oracle is unchanged until it applies a batch
    assert oracle.data["parts"] == Oracle(devices.tables(SMALL.devices)).data["parts"]


def test_maintained_views_match_recomputation_and_duckdb(make_warehouse, tmp_path):
    wh, oracle = build(make_warehouse, SMALL)
    check_views(wh, oracle, "after define", verify=False)
    dev, yel = generators(oracle, SMALL.seed)
    for i in range(SMALL.batches):
        # every kind of change in the first and last batch, nothing in the middle one
        batch = merged(dev.batch([]), yel.batch([])) if i == 1 else merged(dev.batch(), yel.batch())
        run_batch(wh, oracle, batch, tmp_path / f"batch{i}", f"batch {i} ({', '.join(batch.kinds) or 'empty'})")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_maintained_views_match_over_long_random_sequences(make_warehouse, tmp_path, seed):
    scenario = Scenario(
        devices.DevicesSpec(devices=40, parts=50, fanout=4, selectivity=0.4, seed=seed),
        yelp.YelpSpec(businesses=30, reviews_per_business=3.0, users_per_business=1.5, sf_fraction=0.4,
                      elite_fraction=0.5, seed=seed),
        seed=seed, batches=10)
    wh, oracle = build(make_warehouse, scenario)
    dev, yel = generators(oracle, seed)
    rng = random.Random(seed)
    for i in range(scenario.batches):
        # some batches change one schema only: the other schema's views must commit nothing
        which = rng.choice(["both", "both", "devices", "yelp"])
        batch = merged(dev.random_batch() if which != "yelp" else dev.batch([]),
                       yel.random_batch() if which != "devices" else yel.batch([]))
        kinds = ", ".join(batch.kinds) or "empty"
        run_batch(wh, oracle, batch, tmp_path / f"batch{i}", f"seed {seed}, batch {i} ({kinds})")


def test_verify_catches_a_corrupted_view_after_a_batch(make_warehouse, tmp_path):
    tables = {n: list(rows) for n, rows in devices.tables(SMALL.devices).items()}
    wh = make_warehouse("corrupted")
    for name, rows in tables.items():
        wh.create_table(name, list(KEYS[name]), pa.Table.from_pylist(rows, schema=SCHEMAS[name]))
    view = next(v for v in RELATIONAL if v.name == "phone_cost")
    wh.define(view.sqlpp)
    oracle = Oracle(tables)
    dev = BatchGenerator(SMALL.seed, oracle.data, DEVICE_KINDS)
    batch = dev.batch()
    for table, path in batch.write(tmp_path / "batch").items():
        wh.ingest(table, path, format="rows")
        oracle.apply(table, batch.lines[table])
    wh.maintain()
    assert wh.verify(view.name).ok

    path = wh.catalog.path_of(wh.catalog.view(view.name))
    rows = delta.read_arrow(path).to_pylist()
    assert rows, "phone_cost is empty: nothing to corrupt"
    rows[0]["cost"] = rows[0]["cost"] + 1000.0
    delta.write_arrow(path, pa.Table.from_pylist(rows, schema=delta.schema(path)), mode="overwrite")

    result = wh.verify(view.name)
    assert not result.ok and (result.missing, result.extra) == (1, 1), result.summary()
    assert result.extra_examples[0]["did"] == rows[0]["did"]
    # the DuckDB oracle disagrees with the stored view too
    con = oracle.duckdb(DEVICE_TABLES)
    columns, expected = duckdb_bag(con, view.duckdb)
    con.close()
    assert view_bag(wh.rows(view.name), columns) != expected
