"""Differential tests: views maintained through seeded random batches of base-table changes.

One warehouse holds the devices/parts tables and the Yelp-like tables, and a corpus of views
over them.  The relational views over devices/parts (:data:`RELATIONAL`) cover, alone and
composed: selections, generalized projections (arithmetic, string functions, FLOOR, COALESCE,
CASE), 2- and 3-way joins (comma + WHERE, JOIN ON, NATURAL JOIN), LEFT JOIN, self-joins
(parts of the same price band, devices sharing a part), SUM/COUNT/AVG/MIN/MAX over joins,
GROUP BY with HAVING, aggregates of aggregates through FROM subqueries, global aggregates,
EXISTS and IN (semijoins), NOT EXISTS (antijoins), UNION ALL and SELECT DISTINCT, and AsterixDB's
spellings: FROM-first blocks, LET after FROM and after GROUP BY, WITH, CROSS JOIN, comma joins of
subqueries, [NOT] IN over arrays, ORDER BY in a FROM subquery, a subquery in LEFT JOIN … ON.  Each is
defined once per maintenance strategy of :data:`STRATEGIES` (``id`` and ``tuple``), under the
names ``<view>_id`` and ``<view>_tuple``.  The nested views over the Yelp tables (the thesis'
V and V1, an unnest of ``users.elite`` (also LEFT OUTER), a GROUP AS with ARRAY_COUNT, [NOT] IN over a
collection-valued variable and field, and :data:`ORDERED`'s subqueries with ORDER BY, LIMIT, OFFSET
and AT, whose nested arrays are compared in order) are defined once, with the default strategy.
Views of scalars (``SELECT VALUE p.price``, ``SELECT VALUE COUNT(*)``,
``SELECT VALUE u.elite``) are among both.  Then, batch after batch, the changes are ingested (one file per
table), every view is maintained and checked:

* ``verify(view)`` passes (the stored view equals its recomputation at its watermark);
* a view whose base tables did not move committed nothing, any other exactly one version,
  made by the strategy it was defined with (views without IDs, the global aggregates, may be
  recomputed);
* relational views equal, as bags (numbers rounded), DuckDB's answer to the same query over
  the oracle's own copy of the data: a dict per table, keyed by primary key, to which the
  test applies each batch by itself;
* nested views have the top-level keys (and the members per key) that the oracle's data
  implies, computed in plain Python.

A batch's problems are collected over every view and reported together (a view whose
``define`` fails is left out of the run and reported with them), so one failure does not hide
the others.

:class:`BatchGenerator` makes the batches: inserts of new keys (and a key inserted then
deleted), new links between existing rows, updates of attributes some views only project
(``parts.price``, which is now and then set to NULL), updates of attributes views filter or
join on (``devices.category``, ``reviews.stars``, ``businesses.city``), deletes, a delete then
a reinsert of one key, several updates of one key, edits of nested lists (``users.elite``,
``businesses.categories``) and empty batches, which must commit nothing.  Keys are never
updated.

The default run uses a few dozen rows per table, one batch with every kind of change and an
empty batch, every relational view maintained by ``id`` and every fourth one by ``tuple`` too;
``--runslow`` adds seeds, larger tables, random sequences of batches and every view both ways.
"""

from __future__ import annotations

import copy
import inspect
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from idivm.datasets import devices, yelp
from test_relational_views import norm
from idivm.storage import delta
from idivm.warehouse import Warehouse

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

def _price(g: BatchGenerator) -> float | None:
    """A random price, now and then NULL (aggregates skip it, comparisons with it are unknown)."""
    if g.rng.random() < 0.08:
        return None
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
    # a device that comes and goes within the batch, with one link that stays (dangling)
    gone = {"did": g.new_id("devices"), "category": devices.PHONE}
    g.upsert("devices", gone)
    g.upsert("devices_parts", {"did": gone["did"], "pid": pid})
    g.delete("devices", gone)


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


def dev_relink(g: BatchGenerator) -> None:
    """Links between existing devices and parts come and go: devices start or stop sharing parts."""
    row = g.pick("devices_parts")
    if row is not None:
        g.delete("devices_parts", row)
    dids, pids = sorted(k[0] for k in g.state["devices"]), sorted(k[0] for k in g.state["parts"])
    for _ in range(2):
        if dids and pids:
            link = {"did": g.rng.choice(dids), "pid": g.rng.choice(pids)}
            if key_of("devices_parts", link) not in g.state["devices_parts"]:
                g.upsert("devices_parts", link)


DEVICE_KINDS = {
    "insert": dev_insert,
    "new links between existing rows": dev_relink,
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
    """A view over devices/parts and DuckDB SQL for the same query.

    ``single_row``: a global aggregate (no GROUP BY), a view without IDs, which every strategy
    may recompute.  ``scalar``: a view of scalars (``SELECT VALUE x.price``), whose rows are the
    values themselves (DuckDB's answer has one column)."""

    name: str
    sqlpp: str  # CREATE VIEW text or the path of a .sqlpp file
    duckdb: str
    tables: frozenset[str]
    single_row: bool = False
    scalar: bool = False

    @property
    def text(self) -> str:
        return Path(self.sqlpp).read_text() if self.sqlpp.endswith(".sqlpp") else self.sqlpp


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
D, P, DP = "devices", "parts", "devices_parts"


def _view(name: str, sqlpp_query: str, duckdb_sql: str, tables: Iterable[str], single_row: bool = False,
          scalar: bool = False) -> RelationalView:
    """A view whose SQL++ query follows ``CREATE VIEW name AS``."""
    return RelationalView(name, f"CREATE VIEW {name} AS\n{sqlpp_query}", duckdb_sql, frozenset(tables), single_row,
                          scalar)


RELATIONAL = [
    # --- the thesis' views (Fig. 2.1b, Fig. 2.5b): 3-way NATURAL JOIN, selection, SUM
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
    # --- selections and generalized projections
    _view("phones_and_tablets",
          'SELECT d.did, d.category FROM devices d WHERE d.category IN ("phone", "tablet")',
          "SELECT d.did, d.category FROM devices d WHERE d.category IN ('phone', 'tablet')",
          {D}),
    _view("part_price_bands",
          """SELECT p.pid, p.price * 1.2 AS gross, FLOOR(p.price / 25) AS band_no,
                    CASE WHEN p.price IS NULL THEN "unknown" WHEN p.price < 25 THEN "cheap"
                         WHEN p.price < 75 THEN "mid" ELSE "premium" END AS band,
                    COALESCE(p.price, 0) AS price_or_zero
             FROM parts p""",
          """SELECT p.pid, p.price * 1.2 AS gross, floor(p.price / 25) AS band_no,
                    CASE WHEN p.price IS NULL THEN 'unknown' WHEN p.price < 25 THEN 'cheap'
                         WHEN p.price < 75 THEN 'mid' ELSE 'premium' END AS band,
                    coalesce(p.price, 0) AS price_or_zero
             FROM parts p""",
          {P}),
    _view("device_labels",
          """SELECT d.did, UPPER(SUBSTR(d.category, 0, 1)) || SUBSTR(d.category, 1) AS label,
                    LENGTH(d.category) AS len, d.did % 3 AS shard
             FROM devices d WHERE d.category <> "phone" OR d.did % 2 = 0""",
          """SELECT d.did, upper(substr(d.category, 1, 1)) || substr(d.category, 2) AS label,
                    length(d.category) AS len, d.did % 3 AS shard
             FROM devices d WHERE d.category <> 'phone' OR d.did % 2 = 0""",
          {D}),
    # --- joins: comma + WHERE, JOIN ON, NATURAL JOIN, LEFT JOIN
    _view("nonphone_part_prices",
          """SELECT d.did, d.category, p.pid, p.price * 2 AS double_price
             FROM devices d, devices_parts dp, parts p
             WHERE d.did = dp.did AND dp.pid = p.pid AND d.category <> "phone" AND p.price > 20""",
          """SELECT d.did, d.category, p.pid, p.price * 2 AS double_price
             FROM devices d, devices_parts dp, parts p
             WHERE d.did = dp.did AND dp.pid = p.pid AND d.category <> 'phone' AND p.price > 20""",
          {D, P, DP}),
    _view("expensive_links",
          "SELECT dp.did, dp.pid, p.price FROM devices_parts dp JOIN parts p ON dp.pid = p.pid WHERE p.price >= 50",
          "SELECT dp.did, dp.pid, p.price FROM devices_parts dp JOIN parts p ON dp.pid = p.pid WHERE p.price >= 50",
          {P, DP}),
    _view("link_categories",  # devices.category is only projected here: its updates are non-conditional
          "SELECT did, pid, category FROM devices_parts NATURAL JOIN devices",
          "SELECT did, pid, category FROM devices_parts NATURAL JOIN devices",
          {D, DP}),
    _view("links_with_prices",  # dangling links keep a NULL price
          "SELECT dp.did, dp.pid, p.price FROM devices_parts dp LEFT JOIN parts p ON p.pid = dp.pid",
          "SELECT dp.did, dp.pid, p.price FROM devices_parts dp LEFT JOIN parts p ON p.pid = dp.pid",
          {P, DP}),
    _view("links_missing_or_cheap",  # MISSING (no part) told apart from a NULL price; DuckDB: p.pid IS NULL
          """SELECT dp.did, dp.pid, p.price IS NULL AS unpriced, IF_MISSING(p.price, -1) AS price_or_none
             FROM devices_parts dp LEFT JOIN parts p ON p.pid = dp.pid
             WHERE p.price IS MISSING OR p.price IS NULL OR p.price < 20""",
          """SELECT dp.did, dp.pid, CASE WHEN p.pid IS NULL THEN NULL ELSE p.price IS NULL END AS unpriced,
                    CASE WHEN p.pid IS NULL THEN -1 ELSE p.price END AS price_or_none
             FROM devices_parts dp LEFT JOIN parts p ON p.pid = dp.pid
             WHERE p.pid IS NULL OR p.price IS NULL OR p.price < 20""",
          {P, DP}),
    _view("links_to_parts_an_even_device_uses",  # a subquery in ON over the right side's variable only
          """SELECT dp.did, dp.pid, p.price FROM devices_parts dp LEFT JOIN parts p
             ON p.pid = dp.pid AND EXISTS (SELECT 1 FROM devices_parts x WHERE x.pid = p.pid AND x.did % 2 = 0)""",
          """SELECT dp.did, dp.pid, p.price FROM devices_parts dp LEFT JOIN parts p
             ON p.pid = dp.pid AND EXISTS (SELECT 1 FROM devices_parts x WHERE x.pid = p.pid AND x.did % 2 = 0)""",
          {P, DP}),
    _view("links_by_price",  # a MISSING price (no part) groups apart from a NULL one; DuckDB: by p.pid IS NULL too
          """SELECT p.price, COUNT(*) AS n FROM devices_parts dp LEFT JOIN parts p ON p.pid = dp.pid
             GROUP BY p.price""",
          """SELECT p.price, count(*) AS n FROM devices_parts dp LEFT JOIN parts p ON p.pid = dp.pid
             GROUP BY p.price, p.pid IS NULL""",
          {P, DP}),
    # --- self-joins
    _view("same_band_part_pairs",
          """SELECT p1.pid AS pid1, p2.pid AS pid2, FLOOR(p1.price / 25) AS band
             FROM parts p1, parts p2
             WHERE p1.pid < p2.pid AND FLOOR(p1.price / 25) = FLOOR(p2.price / 25)""",
          """SELECT p1.pid AS pid1, p2.pid AS pid2, floor(p1.price / 25) AS band
             FROM parts p1, parts p2
             WHERE p1.pid < p2.pid AND floor(p1.price / 25) = floor(p2.price / 25)""",
          {P}),
    _view("phones_sharing_a_part",
          """SELECT DISTINCT a.did AS did1, b.did AS did2
             FROM devices_parts a, devices_parts b, devices x
             WHERE a.pid = b.pid AND a.did < b.did AND x.did = a.did AND x.category = "phone\"""",
          """SELECT DISTINCT a.did AS did1, b.did AS did2
             FROM devices_parts a, devices_parts b, devices x
             WHERE a.pid = b.pid AND a.did < b.did AND x.did = a.did AND x.category = 'phone'""",
          {D, DP}),
    _view("shared_part_counts",
          """SELECT a.did, COUNT(*) AS shared, MAX(b.did) AS last_partner
             FROM devices_parts a JOIN devices_parts b ON a.pid = b.pid
             WHERE a.did <> b.did GROUP BY a.did""",
          """SELECT a.did, count(*) AS shared, max(b.did) AS last_partner
             FROM devices_parts a JOIN devices_parts b ON a.pid = b.pid
             WHERE a.did <> b.did GROUP BY a.did""",
          {DP}),
    # --- aggregates over joins, HAVING, LEFT JOIN with COUNT
    _view("category_price_stats",
          """SELECT d.category, COUNT(*) AS n, COUNT(p.price) AS priced, SUM(p.price) AS total,
                    AVG(p.price) AS mean, MIN(p.price) AS lo, MAX(p.price) AS hi
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             GROUP BY d.category""",
          """SELECT d.category, count(*) AS n, count(p.price) AS priced, sum(p.price) AS total,
                    avg(p.price) AS mean, min(p.price) AS lo, max(p.price) AS hi
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             GROUP BY d.category""",
          {D, P, DP}),
    RelationalView(
        "expensive_devices",
        """CREATE VIEW expensive_devices AS
           SELECT dp.did, COUNT(*) AS n, SUM(p.price) AS total
           FROM devices_parts dp JOIN parts p ON dp.pid = p.pid
           GROUP BY dp.did HAVING SUM(p.price) > 150""",
        """SELECT dp.did, count(*) AS n, sum(p.price) AS total
           FROM devices_parts dp JOIN parts p ON dp.pid = p.pid
           GROUP BY dp.did HAVING sum(p.price) > 150""",
        frozenset({P, DP})),
    _view("shared_parts",
          """SELECT dp.pid, COUNT(*) AS n, MIN(dp.did) AS first_did, MAX(d.category) AS max_category
             FROM devices_parts dp JOIN devices d ON d.did = dp.did
             GROUP BY dp.pid HAVING COUNT(*) >= 2""",
          """SELECT dp.pid, count(*) AS n, min(dp.did) AS first_did, max(d.category) AS max_category
             FROM devices_parts dp JOIN devices d ON d.did = dp.did
             GROUP BY dp.pid HAVING count(*) >= 2""",
          {D, DP}),
    RelationalView(
        "device_part_counts",
        """CREATE VIEW device_part_counts AS
           SELECT d.did, d.category, COUNT(dp.pid) AS n, COUNT(*) AS rows_
           FROM devices d LEFT JOIN devices_parts dp ON dp.did = d.did
           GROUP BY d.did, d.category""",
        """SELECT d.did, d.category, count(dp.pid) AS n, count(*) AS rows_
           FROM devices d LEFT JOIN devices_parts dp ON dp.did = d.did
           GROUP BY d.did, d.category""",
        frozenset({D, DP})),
    _view("part_usage",  # parts.price is a grouping key that is only projected
          """SELECT p.pid, p.price, COUNT(dp.did) AS uses, COUNT(*) AS rows_
             FROM parts p LEFT JOIN devices_parts dp ON dp.pid = p.pid
             GROUP BY p.pid, p.price""",
          """SELECT p.pid, p.price, count(dp.did) AS uses, count(*) AS rows_
             FROM parts p LEFT JOIN devices_parts dp ON dp.pid = p.pid
             GROUP BY p.pid, p.price""",
          {P, DP}),
    # --- aggregates of aggregates (FROM subqueries) and global aggregates
    _view("category_cost_summary",
          """SELECT t.category, COUNT(*) AS devices, AVG(t.cost) AS avg_cost, MAX(t.cost) AS max_cost,
                    MIN(t.n) AS min_parts
             FROM (SELECT d.did, d.category, SUM(p.price) AS cost, COUNT(*) AS n
                   FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
                   GROUP BY d.did, d.category) AS t
             GROUP BY t.category""",
          """SELECT t.category, count(*) AS devices, avg(t.cost) AS avg_cost, max(t.cost) AS max_cost,
                    min(t.n) AS min_parts
             FROM (SELECT d.did, d.category, sum(p.price) AS cost, count(*) AS n
                   FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
                   GROUP BY d.did, d.category) AS t
             GROUP BY t.category""",
          {D, P, DP}),
    _view("part_totals",
          """SELECT COUNT(*) AS n, COUNT(p.price) AS priced, SUM(p.price) AS total, AVG(p.price) AS mean,
                    MIN(p.price) AS lo, MAX(p.price) AS hi
             FROM parts p""",
          """SELECT count(*) AS n, count(p.price) AS priced, sum(p.price) AS total, avg(p.price) AS mean,
                    min(p.price) AS lo, max(p.price) AS hi
             FROM parts p""",
          {P}, single_row=True),
    _view("max_device_cost",
          """SELECT COUNT(*) AS devices, MAX(t.cost) AS max_cost, AVG(t.cost) AS avg_cost
             FROM (SELECT dp.did, SUM(p.price) AS cost
                   FROM devices_parts dp JOIN parts p ON p.pid = dp.pid GROUP BY dp.did) AS t""",
          """SELECT count(*) AS devices, max(t.cost) AS max_cost, avg(t.cost) AS avg_cost
             FROM (SELECT dp.did, sum(p.price) AS cost
                   FROM devices_parts dp JOIN parts p ON p.pid = dp.pid GROUP BY dp.did) AS t""",
          {P, DP}, single_row=True),
    # --- subqueries: EXISTS, IN (semijoins), NOT EXISTS (antijoins)
    _view("parts_in_some_phone",
          """SELECT p.pid, p.price FROM parts p
             WHERE EXISTS (SELECT dp.did FROM devices_parts dp, devices d
                           WHERE dp.did = d.did AND dp.pid = p.pid AND d.category = "phone")""",
          """SELECT p.pid, p.price FROM parts p
             WHERE EXISTS (SELECT dp.did FROM devices_parts dp, devices d
                           WHERE dp.did = d.did AND dp.pid = p.pid AND d.category = 'phone')""",
          {D, P, DP}),
    _view("devices_with_a_cheap_part",
          """SELECT d.did, d.category FROM devices d
             WHERE d.did IN (SELECT VALUE dp.did FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                             WHERE p.price < 30)""",
          """SELECT d.did, d.category FROM devices d
             WHERE d.did IN (SELECT dp.did FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                             WHERE p.price < 30)""",
          {D, P, DP}),
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
    _view("devices_without_expensive_parts",
          """SELECT d.did, d.category FROM devices d
             WHERE NOT EXISTS (SELECT VALUE dp FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                               WHERE dp.did = d.did AND p.price > 80)""",
          """SELECT d.did, d.category FROM devices d
             WHERE NOT EXISTS (SELECT 1 FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                               WHERE dp.did = d.did AND p.price > 80)""",
          {D, P, DP}),
    # --- UNION ALL, SELECT DISTINCT
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
    _view("link_counts_and_premium_parts",
          """SELECT dp.did AS id, COUNT(*) AS n FROM devices_parts dp GROUP BY dp.did
             UNION ALL
             SELECT p.pid AS id, 0 AS n FROM parts p WHERE p.price > 90""",
          """SELECT dp.did AS id, count(*) AS n FROM devices_parts dp GROUP BY dp.did
             UNION ALL
             SELECT p.pid AS id, 0 AS n FROM parts p WHERE p.price > 90""",
          {P, DP}),
    _view("category_bands",
          """SELECT DISTINCT d.category, CASE WHEN p.price >= 50 THEN "high" ELSE "low" END AS band
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid""",
          """SELECT DISTINCT d.category, CASE WHEN p.price >= 50 THEN 'high' ELSE 'low' END AS band
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid""",
          {D, P, DP}),
    _view("four_kinds_of_ids",  # a union of unions: each level's branch attribute is an ID of its own
          """SELECT p.pid AS id, "cheap" AS kind FROM parts p WHERE p.price < 30
             UNION ALL SELECT p.pid AS id, "dear" AS kind FROM parts p WHERE p.price > 70
             UNION ALL SELECT d.did AS id, d.category AS kind FROM devices d
             UNION ALL SELECT dp.did AS id, "link" AS kind FROM devices_parts dp WHERE dp.pid < 5""",
          """SELECT p.pid AS id, 'cheap' AS kind FROM parts p WHERE p.price < 30
             UNION ALL SELECT p.pid AS id, 'dear' AS kind FROM parts p WHERE p.price > 70
             UNION ALL SELECT d.did AS id, d.category AS kind FROM devices d
             UNION ALL SELECT dp.did AS id, 'link' AS kind FROM devices_parts dp WHERE dp.pid < 5""",
          {D, P, DP}),
    _view("category_band_sets",  # GROUPING SETS: a UNION ALL of one grouping per set
          """SELECT d.category, b, GROUPING(d.category, b) AS g, COUNT(*) AS n, SUM(p.price) AS total
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             LET b = CASE WHEN p.price >= 50 THEN "high" ELSE "low" END
             GROUP BY GROUPING SETS ((d.category, b), (b), (d.category))""",
          """SELECT category, b, GROUPING(category, b) AS g, count(*) AS n, sum(price) AS total
             FROM (SELECT d.category, p.price, CASE WHEN p.price >= 50 THEN 'high' ELSE 'low' END AS b
                   FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid)
             GROUP BY GROUPING SETS ((category, b), (b), (category))""",
          {D, P, DP}),
    _view("category_price_spread",  # statistics aggregates: the groups they change recomputed
          """SELECT d.category, STDDEV_SAMP(p.price) AS sd, VAR_POP(p.price) AS vp, COUNT(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             GROUP BY d.category""",
          """SELECT d.category, stddev_samp(p.price) AS sd, var_pop(p.price) AS vp, count(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             GROUP BY d.category""",
          {D, P, DP}),
    _view("parts_dearer_than_most",  # a table used as a value: the bag of its rows
          """SELECT p.pid FROM parts p
             WHERE p.price > ARRAY_AVG((SELECT VALUE q.price FROM parts AS q)) - 10
               AND ARRAY_COUNT(devices) > 0""",
          """SELECT p.pid FROM parts p
             WHERE p.price > (SELECT avg(q.price) FROM parts q) - 10 AND (SELECT count(*) FROM devices) > 0""",
          {D, P}),
    # --- AsterixDB's spellings: FROM-first blocks, LET (after FROM and after GROUP BY), WITH,
    # CROSS JOIN, IN over an array, ORDER BY in a FROM subquery
    _view("phone_part_totals_from_first",
          """FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             LET gross = p.price * 1.2
             WHERE d.category = "phone"
             GROUP BY d.did
             LET n = COUNT(*), total = SUM(gross)
             HAVING n >= 2
             SELECT d.did, n, total""",
          """SELECT d.did, count(*) AS n, sum(p.price * 1.2) AS total
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE d.category = 'phone' GROUP BY d.did HAVING count(*) >= 2""",
          {D, P, DP}),
    # unnamed projections: AsterixDB's generated names $1, $2, ...
    _view("category_generated_names",
          """SELECT d.category, COUNT(*), MAX(p.price), SUM(p.price) / 2
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             GROUP BY d.category""",
          """SELECT d.category, count(*) AS "$1", max(p.price) AS "$2", sum(p.price) / 2 AS "$3"
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             GROUP BY d.category""",
          {D, P, DP}),
    _view("cheap_parts_with",
          """WITH cheap AS (FROM parts p WHERE p.price < 40 SELECT p.pid, p.price)
             FROM cheap JOIN devices_parts dp ON dp.pid = cheap.pid
             SELECT dp.did, cheap.pid, cheap.price""",
          """WITH cheap AS (SELECT pid, price FROM parts WHERE price < 40)
             SELECT dp.did, cheap.pid, cheap.price FROM cheap JOIN devices_parts dp ON dp.pid = cheap.pid""",
          {P, DP}),
    _view("categories_cross_cheap_parts",
          """FROM (SELECT DISTINCT d.category FROM devices d ORDER BY d.category) AS c CROSS JOIN parts p
             WHERE p.price < 20
             SELECT c.category, p.pid""",
          """SELECT c.category, p.pid FROM (SELECT DISTINCT category FROM devices) AS c CROSS JOIN parts p
             WHERE p.price < 20""",
          {D, P}),
    _view("link_pairs_of_subqueries",
          """FROM (FROM devices d WHERE d.category = "phone" SELECT VALUE d) AS ph,
                  (FROM devices_parts dp SELECT dp.did, dp.pid) AS l
             WHERE l.did = ph.did AND l.pid IN [1, 2, 3, 5, 8, 13]
             SELECT ph.did, l.pid""",
          """SELECT ph.did, l.pid FROM (SELECT * FROM devices d WHERE d.category = 'phone') AS ph,
                                        (SELECT did, pid FROM devices_parts) AS l
             WHERE l.did = ph.did AND l.pid IN (1, 2, 3, 5, 8, 13)""",
          {D, DP}),
    _view("parts_not_in_list",
          """FROM parts p LET band = FLOOR(p.price / 25) WHERE band NOT IN [0, 2] AND p.pid % 4 IN [0, 1]
             SELECT p.pid, band""",
          """SELECT p.pid, floor(p.price / 25) AS band FROM parts p
             WHERE floor(p.price / 25) NOT IN (0, 2) AND p.pid % 4 IN (0, 1)""",
          {P}),
    # --- views of scalars (SELECT VALUE of a scalar): a selection, a global count, a sum per
    # group, distinct values
    _view("part_price_values", "SELECT VALUE p.price FROM parts p WHERE p.price > 30 OR p.price IS NULL",
          "SELECT price FROM parts WHERE price > 30 OR price IS NULL", {P}, scalar=True),
    _view("phone_link_count",
          """SELECT VALUE COUNT(*) FROM devices d JOIN devices_parts dp ON d.did = dp.did
             WHERE d.category = 'phone'""",
          "SELECT count(*) FROM devices d JOIN devices_parts dp ON d.did = dp.did WHERE d.category = 'phone'",
          {D, DP}, single_row=True, scalar=True),
    _view("device_cost_values",
          "SELECT VALUE SUM(p.price) FROM devices_parts dp JOIN parts p ON p.pid = dp.pid GROUP BY dp.did",
          "SELECT sum(p.price) FROM devices_parts dp JOIN parts p ON p.pid = dp.pid GROUP BY dp.did",
          {P, DP}, scalar=True),
    _view("linked_categories",
          "SELECT DISTINCT VALUE d.category FROM devices d JOIN devices_parts dp ON d.did = dp.did",
          "SELECT DISTINCT d.category FROM devices d JOIN devices_parts dp ON d.did = dp.did",
          {D, DP}, scalar=True),
    _view("filtered_sums_of_shared_devices",  # FILTER, ANY … SATISFIES, a field no row has (MISSING)
          """SELECT d.category, COUNT(*) FILTER (WHERE p.price > 50) AS pricey,
                    SUM(p.price) FILTER (WHERE p.price <= 50) AS cheap_total, COUNT(COALESCE(p.discount, p.pid)) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE ANY x IN devices_parts SATISFIES x.did = d.did AND x.pid <> p.pid END
             GROUP BY d.category""",
          """SELECT d.category, count(*) FILTER (WHERE p.price > 50) AS pricey,
                    sum(p.price) FILTER (WHERE p.price <= 50) AS cheap_total, count(p.pid) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE EXISTS (SELECT 1 FROM devices_parts x WHERE x.did = d.did AND x.pid <> p.pid)
             GROUP BY d.category""",
          {D, P, DP}),
]
assert len({v.name for v in RELATIONAL}) == len(RELATIONAL)


def _define_supports_strategies() -> bool:
    return "strategy" in inspect.signature(Warehouse.define).parameters


#: the maintenance strategies every relational view is defined with (one view per strategy);
#: (None,): ``Warehouse.define`` has no ``strategy`` yet, the views get its default maintenance
STRATEGIES = ("id", "tuple") if _define_supports_strategies() else (None,)


@dataclass(frozen=True)
class Maintained:
    """One relational view of the corpus defined with one strategy, under its own name."""

    view: RelationalView
    strategy: str | None

    @property
    def name(self) -> str:
        return self.view.name + (f"_{self.strategy}" if self.strategy else "")

    @property
    def tables(self) -> frozenset[str]:
        return self.view.tables

    @property
    def text(self) -> str:
        text, n = re.subn(rf"(CREATE\s+VIEW\s+){self.view.name}\b", rf"\g<1>{self.name}", self.view.text,
                          count=1, flags=re.IGNORECASE)
        assert n == 1, f"no CREATE VIEW {self.view.name} in {self.view.text}"
        return text

    def define(self, wh) -> None:
        if self.strategy is None:
            wh.define(self.text)
        else:
            wh.define(self.text, strategy=self.strategy)


MAINTAINED = [Maintained(v, s) for v in RELATIONAL for s in STRATEGIES]
#: the default run: every relational view by ``id``, every sixteenth one also by ``tuple`` (which
#: recomputes the affected tuples from the pre state, the same machinery for every view);
#: ``--runslow`` maintains all of them both ways
DEFAULT_MAINTAINED = [m for m in MAINTAINED if m.strategy != "tuple" or RELATIONAL.index(m.view) % 16 == 0]


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


def _elite_lists_expected(o: Oracle) -> Counter:
    return Counter(tuple(sorted(u["elite"] or [])) for u in o.rows("users") if u["fans"] >= 10)


def _desc_nulls_last(v) -> tuple:
    return (v is None, -(v or 0))


def _top_reviews_expected(o: Oracle) -> Counter:
    """Per business, its two reviews of most stars (then smallest id), in that order."""
    def top(b):
        mine = [r for r in o.rows("reviews") if r["business_id"] == b]
        mine.sort(key=lambda r: (_desc_nulls_last(r["stars"]), r["review_id"]))
        return tuple((r["review_id"], r["stars"]) for r in mine[:2])
    return Counter((b["business_id"], top(b["business_id"])) for b in o.rows("businesses"))


def _ranked_users_expected(o: Oracle) -> Counter:
    """The users after the first by fans (most first, then by id), with their rank from 1, the
    first three kept."""
    users = sorted(o.rows("users"), key=lambda u: (_desc_nulls_last(u["fans"]), u["user_id"]))
    return Counter((u["user_id"], rank) for rank, u in enumerate(users[1:4], start=1))


def _review_counts_expected(o: Oracle) -> Counter:
    """Per user with reviews, the number of them up to 2 (LIMIT without ORDER BY keeps any 2)."""
    n = Counter(r["user_id"] for r in o.rows("reviews"))
    return Counter({(u, min(k, 2)): 1 for u, k in n.items()})


#: subqueries with ORDER BY, LIMIT and OFFSET: nested arrays in order (compared in order), top-k
#: per parent, AT positions over an ordered FROM subquery, LIMIT without ORDER BY under a count
ORDERED = [
    NestedView("top_reviews",
               """CREATE VIEW top_reviews AS
                  SELECT b.business_id,
                         (FROM reviews r WHERE r.business_id = b.business_id
                          SELECT r.review_id, r.stars ORDER BY r.stars DESC, r.review_id LIMIT 2) AS top
                  FROM businesses b""",
               frozenset({"businesses", "reviews"}), _top_reviews_expected,
               lambda rows: Counter((r["business_id"], tuple((x["review_id"], x["stars"]) for x in r["top"]))
                                    for r in rows)),
    NestedView("ranked_users",
               """CREATE VIEW ranked_users AS
                  FROM (SELECT u.user_id, u.fans FROM users u ORDER BY u.fans DESC, u.user_id LIMIT 3 OFFSET 1)
                       AS x AT rank
                  SELECT x.user_id, rank""",
               frozenset({"users"}), _ranked_users_expected,
               lambda rows: Counter((r["user_id"], r["rank"]) for r in rows)),
    NestedView("review_counts",
               """CREATE VIEW review_counts AS
                  SELECT r.user_id, ARRAY_COUNT((FROM g SELECT VALUE g.r.review_id LIMIT 2)) AS n
                  FROM reviews r GROUP BY r.user_id GROUP AS g""",
               frozenset({"reviews"}), _review_counts_expected,
               lambda rows: Counter((r["user_id"], r["n"]) for r in rows)),
]


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
    NestedView("elite_in_2015",  # IN over a collection-valued LET variable and over a field
               """CREATE VIEW elite_in_2015 AS
                  FROM users u LET years = u.elite
                  WHERE 2015 IN years AND 2010 NOT IN u.elite
                  SELECT u.user_id, u.fans""",
               frozenset({"users"}),
               lambda o: Counter((u["user_id"], u["fans"]) for u in o.rows("users")
                                 if 2015 in (u["elite"] or []) and 2010 not in (u["elite"] or [])),
               lambda rows: Counter((r["user_id"], r["fans"]) for r in rows)),
    NestedView("elite_years_or_none",  # LEFT OUTER UNNEST: a user without elite years once, the year MISSING
               """CREATE VIEW elite_years_or_none AS
                  SELECT u.user_id, y AS year FROM users u LEFT OUTER UNNEST u.elite AS y""",
               frozenset({"users"}),
               lambda o: Counter((u["user_id"], y) for u in o.rows("users") for y in u["elite"] or [None]),
               lambda rows: Counter((r["user_id"], r.get("year")) for r in rows)),
    # views of values: nested scalars unnested, and a nested array column as it is
    NestedView("elite_year_values", "CREATE VIEW elite_year_values AS SELECT VALUE y FROM users u, u.elite AS y",
               frozenset({"users"}), lambda o: Counter(y for u in o.rows("users") for y in u["elite"] or []),
               Counter),
    NestedView("elite_lists", "CREATE VIEW elite_lists AS SELECT VALUE u.elite FROM users u WHERE u.fans >= 10",
               frozenset({"users"}), _elite_lists_expected,
               lambda rows: Counter(tuple(sorted(v or [])) for v in rows)),
    *ORDERED,
]


# --- comparison ---------------------------------------------------------------------------------------

def duckdb_bag(con, sql: str) -> tuple[list[str], Counter]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return names, Counter(tuple(norm(v) for v in row) for row in cur.fetchall())


def view_bag(rows: list, columns: list[str], scalar: bool = False) -> Counter:
    """The view's rows as DuckDB's rows: tuples of the columns, or of the one value of a view of scalars."""
    if scalar:
        return Counter((norm(v),) for v in rows)
    return Counter(tuple(norm(r.get(c)) for c in columns) for r in rows)  # a MISSING field is NULL in DuckDB


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
    seed=0, batches=2)


def _short(text: str, limit: int = 800) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def _error(e: BaseException) -> str:
    """An exception in a line or a few: a JVM error's message and the causes of its stack trace
    (the "Caused by" lines say what failed; the frames between them do not)."""
    text = str(e)
    causes = [line.strip() for line in text.splitlines() if line.startswith("Caused by")]
    head = _short(text.split("\n\tat ")[0], 600)
    return head + "".join(f"\n    {_short(c, 600)}" for c in causes)


@dataclass
class Corpus:
    """A warehouse with both schemas' tables and the corpus defined in it, and the oracle's copy.

    ``views``: the views defined (every relational view once per strategy, the nested views
    once); ``define_errors``: the views whose ``define`` raised, with the error."""

    wh: Warehouse
    oracle: Oracle
    views: list  # Maintained | NestedView
    define_errors: list[str]

    @property
    def relational(self) -> list[Maintained]:
        return [v for v in self.views if isinstance(v, Maintained)]

    @property
    def nested(self) -> list[NestedView]:
        return [v for v in self.views if isinstance(v, NestedView)]


def build(make_warehouse, scenario: Scenario, maintained: list[Maintained] = MAINTAINED,
          nested: list[NestedView] = NESTED, storage: str | None = None) -> Corpus:
    """Create the tables and define the corpus (the relational views ``maintained`` and the
    ``nested`` ones) in a warehouse of the ``storage`` engine; a view whose ``define`` fails is
    left out of the run and its error kept, so that one unsupported view does not hide how the
    others behave."""
    tables = {**{n: list(rows) for n, rows in devices.tables(scenario.devices).items()},
              **{n: list(rows) for n, rows in yelp.tables(scenario.yelp).items()}}
    wh = make_warehouse("differential", storage=storage)
    for name, rows in tables.items():
        wh.create_table(name, list(KEYS[name]), pa.Table.from_pylist(rows, schema=SCHEMAS[name]))
    views, errors = [], []
    for view in [*maintained, *nested]:
        try:
            view.define(wh) if isinstance(view, Maintained) else wh.define(view.sqlpp)
        except Exception as e:  # noqa: BLE001 -- reported with the other problems of the run
            errors.append(f"define {view.name}: {type(e).__name__}: {_error(e)}")
        else:
            views.append(view)
    return Corpus(wh, Oracle(tables), views, errors)


def check_views(corpus: Corpus, context: str, verify: bool | Collection[str] = True) -> list[str]:
    """Every view of the corpus against the oracle and, with ``verify`` (all, or the views named),
    against its recomputation; the problems found, one line per view and check.

    The views are read (and verified) concurrently: these calls only read, and most of their time
    is Spark's per-job latency."""
    wh, oracle = corpus.wh, corpus.oracle
    names = [v.name for v in corpus.views]

    def read(name: str):
        try:
            checked = verify is True or (verify is not False and name in verify)
            return (wh.verify(name) if checked else None), wh.rows(name)
        except Exception as e:  # noqa: BLE001 -- a view that cannot be read is a problem of that view
            return e, None

    with ThreadPoolExecutor(4) as pool:
        stored = dict(zip(names, pool.map(read, names)))
    problems = []
    for name, (result, _) in stored.items():
        if isinstance(result, Exception):
            problems.append(f"{context}: reading/verifying {name} raised {type(result).__name__}: "
                            f"{_error(result)}")
        elif result is not None and not result.ok:
            problems.append(f"{context}: {_short(result.summary(), 1500)}")
    con = oracle.duckdb(DEVICE_TABLES)
    try:
        answers = {m.view.name: duckdb_bag(con, m.view.duckdb) for m in corpus.relational}
    finally:
        con.close()
    for view in corpus.relational:
        if stored[view.name][1] is None:
            continue
        columns, expected = answers[view.view.name]
        actual = view_bag(stored[view.name][1], columns, view.view.scalar)
        if actual != expected:
            problems.append(f"{context}: view {view.name} differs from DuckDB: "
                            + _short(bag_difference(expected, actual)))
    for view in corpus.nested:
        if stored[view.name][1] is None:
            continue
        expected, actual = view.expected(oracle), view.actual(stored[view.name][1])
        if actual != expected:
            problems.append(f"{context}: view {view.name} has the wrong top-level keys: "
                            + _short(bag_difference(expected, actual)))
    return problems


def run_batch(corpus: Corpus, batch: Batch, directory: Path, context: str) -> list[str]:
    """Ingest the batch (one file per table, empty files included), maintain every view, check it;
    the problems found.

    A view whose base tables moved commits exactly one version, with the strategy it was defined
    with (a view without IDs may be recomputed); any other view commits nothing."""
    wh, views = corpus.wh, corpus.views
    before = {v.name: wh.view_info(v.name).version for v in views}
    for table, path in batch.write(directory).items():
        version = wh.table_info(table).version
        result = wh.ingest(table, path, format="rows")
        assert result.version == version + (1 if batch.lines[table] else 0), \
            f"{context}: ingest of {len(batch.lines[table])} lines into {table}"
        corpus.oracle.apply(table, batch.lines[table])

    def maintain(name: str):
        try:
            (result,) = wh.maintain(name)
            return result
        except Exception as e:  # noqa: BLE001 -- one failing view must not hide the others
            return e

    # each view is maintained by itself, concurrently: maintain(name) reads the base tables and
    # writes only that view, and most of its time is Spark's per-job latency
    with ThreadPoolExecutor(4) as pool:
        outcomes = dict(zip([v.name for v in views], pool.map(maintain, [v.name for v in views])))
    problems = [f"{context}: maintain {name} raised {type(e).__name__}: {_error(e)}"
                for name, e in outcomes.items() if isinstance(e, Exception)]
    results = {name: r for name, r in outcomes.items() if not isinstance(r, Exception)}
    for view in views:
        if view.name not in results:
            continue
        result, version = results[view.name], wh.view_info(view.name).version
        if view.tables & batch.tables_changed:
            if not result.version == before[view.name] + 1 == version:
                problems.append(f"{context}: {view.name} should have committed exactly one version "
                                f"(was {before[view.name]}, maintain says {result.version}, now {version})")
            strategy = getattr(view, "strategy", None)
            if strategy is not None and not view.view.single_row and result.strategy != strategy:
                problems.append(f"{context}: {view.name} was maintained by {result.strategy}, not {strategy}"
                                + (f" ({result.note})" if result.note else ""))
        elif result.version is not None or version != before[view.name]:
            problems.append(f"{context}: {view.name} committed although none of its base tables changed")
    # a view none of whose base tables changed committed nothing (checked above): it is the view
    # verified after the batch before, still read and checked against the oracle
    changed = {v.name for v in views if v.tables & batch.tables_changed}
    return problems + check_views(corpus, context, verify=changed)


def no_problems(problems: list[str]) -> None:
    if problems:
        pytest.fail(f"{len(problems)} problem(s):\n" + "\n".join(problems), pytrace=False)


def run_batches(corpus: Corpus, batches: Iterable[Batch], directory: Path, context: str) -> None:
    """Run the batches one after the other; stop after the first batch with problems and report them
    (with the views that could not be defined)."""
    no_problems(check_views(corpus, f"{context}after define", verify=False))
    for i, batch in enumerate(batches):
        kinds = ", ".join(batch.kinds) or "empty"
        problems = run_batch(corpus, batch, directory / f"batch{i}", f"{context}batch {i} ({kinds})")
        if problems:
            no_problems(corpus.define_errors + problems)
    no_problems(corpus.define_errors)


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
    corpus = build(make_warehouse, SMALL, DEFAULT_MAINTAINED)
    dev, yel = generators(corpus.oracle, SMALL.seed)
    # every kind of change in the first batch, nothing in the second one
    batches = (merged(dev.batch(), yel.batch()) if i == 0 else merged(dev.batch([]), yel.batch([]))
               for i in range(SMALL.batches))
    run_batches(corpus, batches, tmp_path, "")


#: the relational views of the default run with each delta-spark engine: the thesis' join and
#: its aggregate (with an intermediate cache, its own table); with the thesis' V1 with GROUP AS
#: (with index tables)
SPARK_STORED = ("phone_parts", "phone_cost")


@pytest.mark.parametrize("storage", ["delta-spark-dv", pytest.param("delta-spark", marks=pytest.mark.slow)])
def test_views_stored_by_delta_spark_match_recomputation_and_duckdb(make_warehouse, tmp_path, storage):
    """The same checks with the tables Spark computes written and MERGEd by delta-spark (views and
    caches with deletion vectors by ``delta-spark-dv``); ``--runslow`` runs the whole corpus."""
    maintained = [m for m in MAINTAINED if m.strategy == "id" and m.view.name in SPARK_STORED]
    nested = [v for v in NESTED if v.name == "sf_reviews_grouped"]
    corpus = build(make_warehouse, SMALL, maintained, nested, storage=storage)
    assert corpus.relational, "no view of SPARK_STORED is in the corpus"
    dev, yel = generators(corpus.oracle, SMALL.seed)
    batches = (merged(dev.batch(), yel.batch()) if i == 0 else merged(dev.batch([]), yel.batch([]))
               for i in range(SMALL.batches))
    run_batches(corpus, batches, tmp_path, f"{storage}: ")
    for view in corpus.views:
        assert delta.needs_delta_spark(corpus.wh.view_info(view.name).path) == (storage == "delta-spark-dv")


#: aggregates over subqueries in WHERE (EXISTS, NOT EXISTS, IN), which the ID-based rules do not
#: maintain: the maps strategy's alone
SUBQUERY_AGGREGATES = [
    _view("categories_with_a_cheap_part",
          """SELECT d.category, COUNT(*) AS n FROM devices d
             WHERE EXISTS (SELECT VALUE dp FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                           WHERE dp.did = d.did AND p.price < 30)
             GROUP BY d.category""",
          """SELECT d.category, count(*) AS n FROM devices d
             WHERE EXISTS (SELECT 1 FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                           WHERE dp.did = d.did AND p.price < 30)
             GROUP BY d.category""",
          {D, P, DP}),
    _view("categories_without_expensive_parts",
          """SELECT d.category, COUNT(*) AS n, MAX(d.did) AS last FROM devices d
             WHERE NOT EXISTS (SELECT VALUE dp FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                               WHERE dp.did = d.did AND p.price > 80)
             GROUP BY d.category""",
          """SELECT d.category, count(*) AS n, max(d.did) AS last FROM devices d
             WHERE NOT EXISTS (SELECT 1 FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                               WHERE dp.did = d.did AND p.price > 80)
             GROUP BY d.category""",
          {D, P, DP}),
    _view("cost_of_phone_parts_per_device",
          """SELECT dp.did, SUM(p.price) AS cost, COUNT(*) AS n
             FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
             WHERE dp.pid IN (SELECT VALUE dp2.pid FROM devices_parts dp2 JOIN devices d ON d.did = dp2.did
                              WHERE d.category = "phone")
             GROUP BY dp.did""",
          """SELECT dp.did, sum(p.price) AS cost, count(*) AS n
             FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
             WHERE dp.pid IN (SELECT dp2.pid FROM devices_parts dp2 JOIN devices d ON d.did = dp2.did
                              WHERE d.category = 'phone')
             GROUP BY dp.did""",
          {D, P, DP}),
    # scalar subqueries compared with (TPC-H Q17's shape): AVG, and a multiple of a SUM
    _view("parts_above_their_device_average",
          """SELECT d.category, SUM(p.price) AS total, COUNT(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE p.price > (SELECT VALUE AVG(p2.price) FROM devices_parts dp2 JOIN parts p2 ON p2.pid = dp2.pid
                              WHERE dp2.did = d.did)[0]
             GROUP BY d.category""",
          """SELECT d.category, sum(p.price) AS total, count(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE p.price > (SELECT avg(p2.price) FROM devices_parts dp2 JOIN parts p2 ON p2.pid = dp2.pid
                              WHERE dp2.did = d.did)
             GROUP BY d.category""",
          {D, P, DP}),
    _view("phone_parts_below_half_their_cost",
          """SELECT d.did, COUNT(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE p.price < (SELECT VALUE 0.5 * SUM(p2.price) FROM devices_parts dp2 JOIN parts p2
                              ON p2.pid = dp2.pid WHERE dp2.did = d.did)[0] AND d.category = "phone"
             GROUP BY d.did""",
          """SELECT d.did, count(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE p.price < (SELECT 0.5 * sum(p2.price) FROM devices_parts dp2 JOIN parts p2
                              ON p2.pid = dp2.pid WHERE dp2.did = d.did) AND d.category = 'phone'
             GROUP BY d.did""",
          {D, P, DP}),
    _view("revenue_below_device_average",
          """SELECT SUM(p.price) AS total, COUNT(*) AS n
             FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
             WHERE p.price < (SELECT AVG(p2.price) FROM devices_parts dp2 JOIN parts p2 ON p2.pid = dp2.pid
                              WHERE dp2.did = dp.did)""",
          """SELECT sum(p.price) AS total, count(*) AS n
             FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
             WHERE p.price < (SELECT avg(p2.price) FROM devices_parts dp2 JOIN parts p2 ON p2.pid = dp2.pid
                              WHERE dp2.did = dp.did)""",
          {P, DP}, single_row=True),
]

#: aggregates whose conditions and arguments AGCA's comparisons and arithmetic do not spell
#: (disjunctions, NOT, IN lists, LIKE, CASE): lifted scalar functions in the maps (TPC-H Q12,
#: Q14 and Q19's shapes)
LIFTED_AGGREGATES = [
    _view("flagged_parts_per_category",
          """SELECT d.category, SUM(CASE WHEN p.price >= 50 THEN p.price ELSE 0.0 END) AS expensive,
                    COUNT(CASE WHEN p.price < 20 OR d.category LIKE "ph%" THEN 1 END) AS flagged, COUNT(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE (p.price < 30 OR p.price > 60 OR d.category IN ("laptop", "tablet")) AND NOT (p.pid = d.did)
             GROUP BY d.category""",
          """SELECT d.category, sum(CASE WHEN p.price >= 50 THEN p.price ELSE 0.0 END) AS expensive,
                    count(CASE WHEN p.price < 20 OR d.category LIKE 'ph%' THEN 1 END) AS flagged, count(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE (p.price < 30 OR p.price > 60 OR d.category IN ('laptop', 'tablet')) AND NOT (p.pid = d.did)
             GROUP BY d.category""",
          {D, P, DP}),
    _view("weighted_revenue_of_mixed_bands",
          """SELECT SUM(CASE WHEN d.category LIKE "%top" THEN p.price * 2 ELSE p.price END) AS weighted,
                    COUNT(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE (d.category = "phone" AND p.price < 50) OR (d.category <> "phone" AND p.price >= 50)""",
          """SELECT sum(CASE WHEN d.category LIKE '%top' THEN p.price * 2 ELSE p.price END) AS weighted,
                    count(*) AS n
             FROM devices d JOIN devices_parts dp ON d.did = dp.did JOIN parts p ON p.pid = dp.pid
             WHERE (d.category = 'phone' AND p.price < 50) OR (d.category <> 'phone' AND p.price >= 50)""",
          {D, P, DP}, single_row=True),
]

#: views that read more than one GROUP BY over joins: maps caches of their GROUP BYs, the rest by
#: ID over them (:mod:`idivm.generator.maps_caches`): a GROUP BY in a FROM subquery joined with a
#: table, two of them, a GROUP BY over another's groups, and a subquery in WHERE below one
MAPS_CACHE_AGGREGATES = [
    _view("devices_with_their_dearest_part",
          """SELECT d.did, d.category, g.hi, g.n
             FROM devices d JOIN (SELECT dp.did AS did, MAX(p.price) AS hi, COUNT(*) AS n
                                  FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                                  GROUP BY dp.did) AS g ON d.did = g.did""",
          """SELECT d.did, d.category, g.hi, g.n
             FROM devices d JOIN (SELECT dp.did AS did, max(p.price) AS hi, count(*) AS n
                                  FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                                  GROUP BY dp.did) AS g ON d.did = g.did""",
          {D, P, DP}),
    _view("cheapest_and_category_sizes",
          """SELECT d.did, lo.cheapest, c.devices
             FROM devices d
             JOIN (SELECT dp.did AS did, MIN(p.price) AS cheapest FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                   GROUP BY dp.did) AS lo ON lo.did = d.did
             JOIN (SELECT d2.category AS category, COUNT(DISTINCT d2.did) AS devices FROM devices d2
                   GROUP BY d2.category) AS c ON c.category = d.category""",
          """SELECT d.did, lo.cheapest, c.devices
             FROM devices d
             JOIN (SELECT dp.did AS did, min(p.price) AS cheapest FROM devices_parts dp JOIN parts p ON p.pid = dp.pid
                   GROUP BY dp.did) AS lo ON lo.did = d.did
             JOIN (SELECT d2.category AS category, count(DISTINCT d2.did) AS devices FROM devices d2
                   GROUP BY d2.category) AS c ON c.category = d.category""",
          {D, P, DP}),
    _view("devices_per_part_count",
          """SELECT g.n, COUNT(*) AS devices, SUM(g.hi) AS his
             FROM (SELECT dp.did AS did, COUNT(*) AS n, MAX(p.price) AS hi
                   FROM devices_parts dp JOIN parts p ON p.pid = dp.pid GROUP BY dp.did) AS g
             GROUP BY g.n""",
          """SELECT g.n, count(*) AS devices, sum(g.hi) AS his
             FROM (SELECT dp.did AS did, count(*) AS n, max(p.price) AS hi
                   FROM devices_parts dp JOIN parts p ON p.pid = dp.pid GROUP BY dp.did) AS g
             GROUP BY g.n""",
          {P, DP}),
    _view("devices_with_cheap_parts_counted",
          """SELECT d.did, d.category, g.n
             FROM devices d JOIN (SELECT dp.did AS did, COUNT(*) AS n FROM devices_parts dp
                                  WHERE EXISTS (SELECT VALUE p FROM parts p WHERE p.pid = dp.pid AND p.price < 40)
                                  GROUP BY dp.did) AS g ON g.did = d.did""",
          """SELECT d.did, d.category, g.n
             FROM devices d JOIN (SELECT dp.did AS did, count(*) AS n FROM devices_parts dp
                                  WHERE EXISTS (SELECT 1 FROM parts p WHERE p.pid = dp.pid AND p.price < 40)
                                  GROUP BY dp.did) AS g ON g.did = d.did""",
          {D, P, DP}),
]

#: the aggregate views of the corpus the maps strategy maintains (one GROUP BY over inner joins of
#: tables): SUM, COUNT(*), COUNT of a column, AVG, MIN and MAX of numbers and of strings, HAVING,
#: a self-join with a condition, and the subqueries in WHERE of :data:`SUBQUERY_AGGREGATES`
#: (EXISTS, NOT EXISTS, IN, a comparison with a scalar subquery; TPC-H Q17's global aggregate),
#: and the lifted conditions and values of :data:`LIFTED_AGGREGATES`
MAPS_VIEWS = ("phone_cost", "shared_part_counts", "category_price_stats", "expensive_devices", "shared_parts",
              "device_cost_values", *(v.name for v in SUBQUERY_AGGREGATES + LIFTED_AGGREGATES + MAPS_CACHE_AGGREGATES))


#: of those, the default run's: every aggregate function among them, a NOT EXISTS, and lifted
#: conditions and values
MAPS_DEFAULT = ("phone_cost", "category_price_stats", "categories_without_expensive_parts",
                "flagged_parts_per_category", "cheapest_and_category_sizes")


def _by_maps(names: Sequence[str] = MAPS_VIEWS) -> list[Maintained]:
    maintained = [Maintained(v, "maps") for v in RELATIONAL + SUBQUERY_AGGREGATES + LIFTED_AGGREGATES
                  + MAPS_CACHE_AGGREGATES if v.name in names]
    assert sorted(m.view.name for m in maintained) == sorted(names)
    return maintained


def test_views_maintained_by_maps_match_recomputation_and_duckdb(make_warehouse, tmp_path):
    """Higher-order delta maps (:mod:`idivm.exec.maps`): every kind of change in the first batch,
    a random one in the second; ``--runslow`` maintains every view of :data:`MAPS_VIEWS` over
    longer random sequences."""
    corpus = build(make_warehouse, SMALL, _by_maps(MAPS_DEFAULT), [])
    dev, _ = generators(corpus.oracle, SMALL.seed)
    run_batches(corpus, (dev.batch() if i == 0 else dev.random_batch(0.0) for i in range(SMALL.batches)),
                tmp_path, "maps: ")
    assert not corpus.define_errors


@pytest.mark.slow
@pytest.mark.parametrize("storage", [None, "delta-spark-dv"])
def test_views_maintained_by_maps_match_over_random_sequences(make_warehouse, tmp_path, storage):
    scenario = Scenario(
        devices.DevicesSpec(devices=30, parts=40, fanout=3, selectivity=0.4, seed=13),
        yelp.YelpSpec(businesses=5, seed=13), seed=13, batches=5)
    corpus = build(make_warehouse, scenario, _by_maps(), [], storage=storage)
    dev, _ = generators(corpus.oracle, scenario.seed)
    run_batches(corpus, (dev.random_batch() for _ in range(scenario.batches)), tmp_path, f"maps {storage}: ")
    assert not corpus.define_errors


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["delta-spark", "delta-spark-dv"])
def test_the_corpus_stored_by_delta_spark_matches_over_random_sequences(make_warehouse, tmp_path, storage):
    scenario = Scenario(
        devices.DevicesSpec(devices=30, parts=40, fanout=3, selectivity=0.4, seed=11),
        yelp.YelpSpec(businesses=20, reviews_per_business=3.0, users_per_business=1.5, sf_fraction=0.4,
                      elite_fraction=0.5, seed=11),
        seed=11, batches=3)
    corpus = build(make_warehouse, scenario, DEFAULT_MAINTAINED, storage=storage)
    dev, yel = generators(corpus.oracle, scenario.seed)
    run_batches(corpus, (merged(dev.random_batch(), yel.random_batch()) for _ in range(scenario.batches)),
                tmp_path, f"{storage}: ")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_maintained_views_match_over_long_random_sequences(make_warehouse, tmp_path, seed):
    scenario = Scenario(
        devices.DevicesSpec(devices=40, parts=50, fanout=4, selectivity=0.4, seed=seed),
        yelp.YelpSpec(businesses=30, reviews_per_business=3.0, users_per_business=1.5, sf_fraction=0.4,
                      elite_fraction=0.5, seed=seed),
        seed=seed, batches=6)
    corpus = build(make_warehouse, scenario)
    dev, yel = generators(corpus.oracle, seed)
    rng = random.Random(seed)

    def batches():
        for _ in range(scenario.batches):
            # some batches change one schema only: the other schema's views must commit nothing
            which = rng.choice(["both", "both", "devices", "yelp"])
            yield merged(dev.random_batch() if which != "yelp" else dev.batch([]),
                         yel.random_batch() if which != "devices" else yel.batch([]))

    run_batches(corpus, batches(), tmp_path, f"seed {seed}, ")


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # seed 1 under --runslow
def test_ordered_subqueries_match_over_random_sequences(make_warehouse, tmp_path, seed):
    """The views of ORDER BY / LIMIT / OFFSET / AT subqueries alone (``auto``: recomputed, as no
    i-diff rules cover them), through random batches of every kind of change."""
    scenario = Scenario(SMALL.devices, SMALL.yelp, seed=seed, batches=4)
    corpus = build(make_warehouse, scenario, [], ORDERED)
    _, yel = generators(corpus.oracle, seed)
    dev_tables = frozenset(DEVICE_TABLES)
    assert not any(v.tables & dev_tables for v in corpus.views)
    batches = (yel.random_batch() if i % 2 == 0 else yel.batch() for i in range(scenario.batches))
    run_batches(corpus, batches, tmp_path, f"seed {seed}, ")


def test_duckdb_answers_are_not_trivial():
    """Over the default run's data, before and after a batch, no relational view of the corpus is
    empty and most differ from one batch to the next, so the comparisons mean something."""
    oracle = Oracle(devices.tables(SMALL.devices))
    dev = BatchGenerator(SMALL.seed, oracle.data, DEVICE_KINDS)
    answers = []
    for batch in (None, dev.batch(), dev.batch()):
        for table, lines in (batch.lines if batch else {}).items():
            oracle.apply(table, lines)
        con = oracle.duckdb(DEVICE_TABLES)
        answers.append({v.name: duckdb_bag(con, v.duckdb)[1] for v in RELATIONAL})
        con.close()
        empty = [name for name, rows in answers[-1].items() if not rows]
        assert not empty, f"empty DuckDB answers: {empty}"
    unchanged = [v.name for v in RELATIONAL if answers[0][v.name] == answers[1][v.name] == answers[2][v.name]]
    assert len(unchanged) <= 2, f"views the batches do not change: {unchanged}"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_verify_and_duckdb_catch_a_corrupted_view_after_a_batch(make_warehouse, tmp_path, strategy):
    tables = {n: list(rows) for n, rows in devices.tables(SMALL.devices).items()}
    wh = make_warehouse("corrupted")
    for name, rows in tables.items():
        wh.create_table(name, list(KEYS[name]), pa.Table.from_pylist(rows, schema=SCHEMAS[name]))
    view = Maintained(next(v for v in RELATIONAL if v.name == "phone_cost"), strategy)
    view.define(wh)
    corpus = Corpus(wh, Oracle(tables), [view], [])
    dev = BatchGenerator(SMALL.seed, corpus.oracle.data, DEVICE_KINDS)
    assert run_batch(corpus, dev.batch(), tmp_path / "batch", "batch") == []

    path = wh.catalog.path_of(wh.catalog.view(view.name))
    rows = delta.read_arrow(path).to_pylist()
    assert rows, "phone_cost is empty: nothing to corrupt"
    rows[0]["cost"] = rows[0]["cost"] + 1000.0
    delta.write_arrow(path, pa.Table.from_pylist(rows, schema=delta.schema(path)), mode="overwrite")

    result = wh.verify(view.name)
    assert not result.ok and (result.missing, result.extra) == (1, 1), result.summary()
    assert result.extra_examples[0]["did"] == rows[0]["did"]
    # the DuckDB oracle disagrees with the stored view too, and the run's checks report both
    problems = check_views(corpus, "corrupted")
    assert len(problems) == 2, problems
    assert "differs from its recomputation" in problems[0] and "differs from DuckDB" in problems[1]
