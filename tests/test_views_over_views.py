"""Views defined over other views: chains of views maintained by ``maintain()`` in dependency
order, checked against their recomputation (``verify``) and, for the relational chain, against
DuckDB running the equivalent SQL directly over the test's own copy of the base tables.

The relational chain over devices/parts/devices_parts (:data:`CHAIN`)::

    phone_parts (id: a filtered 3-way join)
      +-- cheap_parts (tuple: a selection)  +-- cheap_count (id: an aggregate, 3 levels deep)
      +-- phone_cost_<strategy> (an aggregate; id, tuple, recompute, auto, maps)
      +-- part_prices (id: the view joined with a base table that changes in the same run)
    phone_parts_rc (recompute: each run overwrites it)
      +-- dear_parts (id: a selection over a view that is overwritten)

Random batches of inserts, updates and deletes of the base tables are ingested, then
``maintain()`` runs, after each batch.  A nested upstream (a view with a nested query) is read by
views that copy its collection, unnest it under an aggregate, and unnest it (which needs element
IDs nested views do not give yet: recomputed by ``auto``, refused by ``id``).
"""

from __future__ import annotations

import json
import random

import pytest

from idivm.catalog import Catalog, ViewEntry
from idivm.errors import CatalogError, IdivmError, UnknownIdsError, UnsupportedError
from idivm.types import TupleType
from idivm.warehouse import Warehouse
from test_relational_views import bag, duckdb_rows

duckdb = pytest.importorskip("duckdb")

KEYS = {"devices": ["did"], "parts": ["pid"], "devices_parts": ["did", "pid"]}
CATEGORIES = ("phone", "tablet", "laptop")

PHONE_PARTS = ("SELECT did, pid, price FROM parts NATURAL JOIN devices_parts NATURAL JOIN devices "
               "WHERE category = 'phone'")
PHONE_PARTS_SQL = ("SELECT did, pid, price FROM parts JOIN devices_parts USING (pid) JOIN devices USING (did) "
                   "WHERE category = 'phone'")
COST_STRATEGIES = ("id", "tuple", "recompute", "auto", "maps")

#: (view, SQL++ text, strategy, DuckDB SQL over the base tables), in an order where each view
#: comes after the views it reads
CHAIN = [
    ("phone_parts", PHONE_PARTS, "id", PHONE_PARTS_SQL),
    ("phone_parts_rc", PHONE_PARTS, "recompute", PHONE_PARTS_SQL),
    ("cheap_parts", "SELECT did, pid, price FROM phone_parts WHERE price < 50", "tuple",
     f"SELECT did, pid, price FROM ({PHONE_PARTS_SQL}) WHERE price < 50"),
    ("cheap_count", "SELECT did, count(*) AS n FROM cheap_parts GROUP BY did", "id",
     f"SELECT did, count(*) AS n FROM ({PHONE_PARTS_SQL}) WHERE price < 50 GROUP BY did"),
    *[(f"phone_cost_{s}", "SELECT did, sum(price) AS cost, count(*) AS n FROM phone_parts GROUP BY did", s,
       f"SELECT did, sum(price) AS cost, count(*) AS n FROM ({PHONE_PARTS_SQL}) GROUP BY did")
      for s in COST_STRATEGIES],
    ("part_prices", "SELECT pp.did, pp.pid, p.price * 2 AS doubled FROM phone_parts AS pp, parts AS p "
                    "WHERE pp.pid = p.pid", "id",
     f"SELECT pp.did, pp.pid, p.price * 2 AS doubled FROM ({PHONE_PARTS_SQL}) pp JOIN parts p ON pp.pid = p.pid"),
    ("dear_parts", "SELECT did, pid FROM phone_parts_rc WHERE price >= 50", "id",
     f"SELECT did, pid FROM ({PHONE_PARTS_SQL}) WHERE price >= 50"),
]

#: the views of the default run: every strategy once, each shape of the chain
#: (the maps view, the dearest to define, maintain and verify, runs in the slow test)
QUICK = ("phone_parts", "phone_parts_rc", "cheap_parts", "cheap_count", "phone_cost_auto", "part_prices",
         "dear_parts")


# --- the test's own copy of the base tables and random batches of changes ------------------------------

class Changes:
    """The base tables as the test knows them (table -> key -> row) and random batches of changes
    to them, each written as one ``rows`` feed per table."""

    def __init__(self, rng: random.Random, devices: int, parts: int, links: int):
        self.rng = rng
        self.rows: dict[str, dict[tuple, dict]] = {t: {} for t in KEYS}
        for did in range(1, devices + 1):
            self._put("devices", {"did": did, "category": rng.choice(CATEGORIES)})
        for pid in range(1, parts + 1):
            self._put("parts", {"pid": pid, "price": self.price()})
        while len(self.rows["devices_parts"]) < links:
            self._put("devices_parts", {"did": rng.randint(1, devices), "pid": rng.randint(1, parts)})
        self.next = {"devices": devices + 1, "parts": parts + 1}

    def price(self) -> float:
        return float(self.rng.randint(1, 100)) + self.rng.choice((0.0, 0.25, 0.5))

    def _put(self, table: str, row: dict) -> None:
        self.rows[table][tuple(row[k] for k in KEYS[table])] = row

    def table(self, table: str) -> list[dict]:
        return list(self.rows[table].values())

    def batch(self, changes: int) -> dict[str, list[dict]]:
        """``changes`` random changes (applied to the test's copy): table -> feed lines."""
        rng, feed = self.rng, {t: [] for t in KEYS}

        def upsert(table: str, row: dict) -> None:
            self._put(table, row)
            feed[table].append(row)

        def delete(table: str) -> None:
            if self.rows[table]:
                key = rng.choice(sorted(self.rows[table]))
                del self.rows[table][key]
                feed[table].append({"__delete": dict(zip(KEYS[table], key))})

        for _ in range(changes):
            kind = rng.choice(("new device", "new part", "new link", "category", "price", "price",
                               "delete device", "delete part", "delete link", "delete link"))
            dids = sorted(k[0] for k in self.rows["devices"])
            pids = sorted(k[0] for k in self.rows["parts"])
            if kind == "new device":
                upsert("devices", {"did": self.next["devices"], "category": rng.choice(CATEGORIES)})
                self.next["devices"] += 1
            elif kind == "new part":
                upsert("parts", {"pid": self.next["parts"], "price": self.price()})
                self.next["parts"] += 1
            elif kind == "new link" and dids and pids:
                upsert("devices_parts", {"did": rng.choice(dids), "pid": rng.choice(pids)})
            elif kind == "category" and dids:
                upsert("devices", {"did": rng.choice(dids), "category": rng.choice(CATEGORIES)})
            elif kind == "price" and pids:
                upsert("parts", {"pid": rng.choice(pids), "price": self.price()})
            elif kind.startswith("delete"):
                delete({"device": "devices", "part": "parts", "link": "devices_parts"}[kind.split()[1]])
        return feed

    def ingest(self, wh: Warehouse, feed: dict[str, list[dict]], folder, batch: int) -> None:
        for table, lines in feed.items():
            if lines:
                path = folder / f"{table}-{batch}.jsonl"
                path.write_text("".join(json.dumps(line) + "\n" for line in lines))
                wh.ingest(table, path, format="rows")

    def duckdb(self):
        con = duckdb.connect()
        con.execute("CREATE TABLE devices (did BIGINT, category VARCHAR)")
        con.execute("CREATE TABLE parts (pid BIGINT, price DOUBLE)")
        con.execute("CREATE TABLE devices_parts (did BIGINT, pid BIGINT)")
        for table, columns in (("devices", ("did", "category")), ("parts", ("pid", "price")),
                               ("devices_parts", ("did", "pid"))):
            rows = [tuple(r[c] for c in columns) for r in self.table(table)]
            if rows:
                con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' for _ in columns)})", rows)
        return con


def chain_warehouse(make_warehouse, rng: random.Random, devices: int, parts: int, links: int,
                    views: tuple[str, ...] | None = None):
    wh = make_warehouse("vov")
    changes = Changes(rng, devices, parts, links)
    for table, key in KEYS.items():
        wh.create_table(table, key, changes.table(table))
    for name, text, strategy, _ in CHAIN:
        if views is None or name in views:
            wh.define(f"CREATE VIEW {name} AS {text}", strategy=strategy)
    return wh, changes


def check_chain(wh: Warehouse, changes: Changes, when: str) -> list[str]:
    """Every view against its recomputation and DuckDB's answer over the base tables' rows."""
    problems = []
    con = changes.duckdb()
    for name, _, _, sql in CHAIN:
        if name not in wh.catalog.views:
            continue
        check = wh.verify(name)
        if not check.ok:
            problems.append(f"{when}: {check.summary()}")
        columns, expected = duckdb_rows(con, sql)
        stored = bag(columns, wh.rows(name))
        if stored != bag(columns, expected):
            problems.append(f"{when}: {name} differs from DuckDB: missing "
                            f"{bag(columns, expected) - stored}, unexpected {stored - bag(columns, expected)}")
    return problems


def run_batches(wh: Warehouse, changes: Changes, folder, batches: int, size: int, check_every: int = 1) -> None:
    problems = check_chain(wh, changes, "after define") if check_every == 1 else []
    for b in range(batches):
        changes.ingest(wh, changes.batch(size), folder, b)
        results = wh.maintain()
        order = [r.name for r in results]
        assert order.index("phone_parts") < order.index("cheap_parts") < order.index("cheap_count")
        for r in results:  # each view read its inputs at their versions of this round
            inputs = wh.catalog.view_inputs(r.name)
            for upstream in wh.catalog.upstream_views(r.name):
                assert r.new_watermark[upstream] == wh.view_info(upstream).version, (r.name, upstream)
            assert set(r.new_watermark) == set(inputs)
        if (b + 1) % check_every == 0 or b == batches - 1:
            problems += check_chain(wh, changes, f"batch {b}")
    assert not problems, "\n".join(problems)


def test_relational_chain_random_batches(make_warehouse, tmp_path):
    """Every strategy over a view, a view over a view over a view, a view joined with a base
    table that changes in the same run, a view over a view that is recomputed: a random batch
    of changes (a commit per table), ``maintain()``, every view checked."""
    wh, changes = chain_warehouse(make_warehouse, random.Random(29), devices=12, parts=15, links=30, views=QUICK)
    assert wh.catalog.upstream_views("cheap_count") == ["cheap_parts"]
    assert wh.catalog.view_inputs("part_prices") == ["phone_parts", "parts"]
    run_batches(wh, changes, tmp_path, batches=1, size=15, check_every=2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_relational_chain_many_random_batches(make_warehouse, tmp_path, seed):
    """Every view of :data:`CHAIN`, larger tables, four batches, all checked after each."""
    wh, changes = chain_warehouse(make_warehouse, random.Random(seed), devices=60, parts=80, links=250)
    run_batches(wh, changes, tmp_path, batches=4, size=40)


# --- dependency order ------------------------------------------------------------------------------------

def catalog_of(tmp_path, inputs: dict[str, list[str]]) -> Catalog:
    views = {n: ViewEntry(n, "", TupleType(()), f"views/{n}", extra={"inputs": i}) for n, i in inputs.items()}
    return Catalog(tmp_path, views=views)


def test_dependency_order(tmp_path):
    catalog = catalog_of(tmp_path, {"a_top": ["m_mid", "t"], "m_mid": ["z_base"], "z_base": ["t"],
                                    "b_other": ["t"], "c_two": ["z_base", "a_top"]})
    order = catalog.dependency_order()
    assert sorted(order) == sorted(catalog.views)
    for name in catalog.views:
        for upstream in catalog.upstream_views(name):
            assert order.index(upstream) < order.index(name)
    assert order == ["z_base", "m_mid", "a_top", "b_other", "c_two"]  # by name where free
    assert catalog.dependency_order(["c_two", "m_mid"]) == ["m_mid", "c_two"]
    assert catalog.upstream_views("a_top") == ["m_mid"]  # t is a base table


def test_dependency_cycle_is_an_error(tmp_path):
    catalog = catalog_of(tmp_path, {"a": ["b"], "b": ["c"], "c": ["a"], "d": []})
    with pytest.raises(CatalogError, match=r"cycle \(a -> b -> c -> a\)"):
        catalog.dependency_order()


def test_maintain_all_runs_upstream_first_and_maintain_one_reads_committed_state(make_warehouse, tmp_path):
    """``maintain()`` runs a view after the views it reads even where names sort the other way;
    ``maintain(name)`` of a downstream view alone reads its upstream as last committed."""
    wh = make_warehouse("order")
    wh.create_table("t", "k", [{"k": i, "v": i * 10} for i in range(1, 6)])
    wh.define("CREATE VIEW z_up AS SELECT k, v FROM t WHERE v > 10", strategy="id")
    wh.define("CREATE VIEW a_down AS SELECT k, v + 1 AS w FROM z_up", strategy="id")
    wh.define("CREATE VIEW m_sum AS SELECT count(*) AS n, sum(w) AS total FROM a_down", strategy="recompute")
    (tmp_path / "c.jsonl").write_text('{"k": 6, "v": 60}\n{"__delete": {"k": 3}}\n')
    wh.ingest("t", tmp_path / "c.jsonl", format="rows")

    alone = wh.maintain("a_down")  # z_up has not moved: nothing to do
    assert alone[0].version is None and wh.view_info("z_up").version == 0

    results = wh.maintain()
    assert [r.name for r in results] == ["z_up", "a_down", "m_sum"]
    assert all(r.version == 1 for r in results)
    assert sorted(r["k"] for r in wh.rows("a_down")) == [2, 4, 5, 6]
    assert wh.rows("m_sum") == [{"n": 4, "total": 20 + 40 + 50 + 60 + 4}]
    for name in ("z_up", "a_down", "m_sum"):
        assert wh.verify(name).ok
    assert all(r.version is None for r in wh.maintain())

    # a view others read is neither replaced (their watermarks name its table's versions) nor
    # dropped alone; --cascade drops its readers first
    with pytest.raises(CatalogError, match="cannot replace view z_up: read by view a_down"):
        wh.define("CREATE OR REPLACE VIEW z_up AS SELECT k, v FROM t", strategy="id")
    with pytest.raises(CatalogError, match="cannot drop view z_up: read by views m_sum, a_down"):
        wh.drop_view("z_up")
    assert wh.drop_view("z_up", cascade=True) == ["m_sum", "a_down", "z_up"]
    assert not wh.catalog.views


def test_a_view_without_ids_cannot_be_read(make_warehouse):
    wh = make_warehouse("noids")
    wh.create_table("t", "k", [{"k": 1, "v": 1}])
    wh.define("CREATE VIEW total AS SELECT count(*) AS n FROM t")
    with pytest.raises(UnsupportedError, match="view total cannot be read by another view: its rows have no IDs") as e:
        wh.define("CREATE VIEW again AS SELECT n FROM total")
    assert e.value.span is not None and "\n" not in e.value.one_line()
    assert "again" not in wh.catalog.views


# --- a nested upstream -----------------------------------------------------------------------------------

NEST = ("CREATE VIEW nest AS SELECT did, category, (SELECT pid, price FROM devices_parts NATURAL JOIN parts "
        "WHERE devices_parts.did = devices.did) AS ps FROM devices")


def test_nested_upstream(make_warehouse, tmp_path):
    """A view with a nested query read by views that copy its collection (id), unnest it under
    a GROUP BY (id: the group keys are its IDs) and unnest it row per element (auto recomputes:
    the nested elements of a view have no element key yet; id refuses it naming the view)."""
    rng = random.Random(7)
    changes = Changes(rng, devices=8, parts=10, links=20)
    wh = make_warehouse("nested")
    for table, key in KEYS.items():
        wh.create_table(table, key, changes.table(table))
    wh.define(NEST, strategy="id")
    wh.define("CREATE VIEW phones AS SELECT did, ps FROM nest WHERE category = 'phone'", strategy="id")
    wh.define("CREATE VIEW totals AS SELECT n.did, count(*) AS k, sum(p.price) AS total "
              "FROM nest AS n, n.ps AS p GROUP BY n.did", strategy="id")
    flat = "CREATE VIEW flat AS SELECT n.did, p.pid, p.price FROM nest AS n, n.ps AS p"
    with pytest.raises(IdivmError, match="nested collections of view nest have no key") as e:
        wh.define(flat, strategy="id")
    assert isinstance(e.value, UnknownIdsError)
    wh.define(flat, strategy="auto")
    assert wh.view_info("flat").strategy_note.startswith("recompute")
    assert "__idivm_prov" not in str(wh.view_info("phones").schema)

    def expected() -> dict[str, object]:
        price = {r["pid"]: r["price"] for r in changes.table("parts")}
        category = {r["did"]: r["category"] for r in changes.table("devices")}
        members: dict[int, list] = {d: [] for d in category}
        for link in changes.table("devices_parts"):
            if link["did"] in category and link["pid"] in price:
                members[link["did"]].append((link["pid"], price[link["pid"]]))
        return {
            "phones": sorted((d, sorted(m)) for d, m in members.items() if category[d] == "phone"),
            "totals": sorted((d, len(m), round(sum(p for _, p in m), 6)) for d, m in members.items() if m),
            "flat": sorted((d, pid, p) for d, m in members.items() for pid, p in m),
        }

    def stored() -> dict[str, object]:
        return {
            "phones": sorted((r["did"], sorted((e["pid"], e["price"]) for e in r["ps"])) for r in wh.rows("phones")),
            "totals": sorted((r["did"], r["k"], round(r["total"], 6)) for r in wh.rows("totals")),
            "flat": sorted((r["did"], r["pid"], r["price"]) for r in wh.rows("flat")),
        }

    assert stored() == expected()
    for b in range(1):  # one batch: the many-batch runs are the relational chain's
        changes.ingest(wh, changes.batch(10), tmp_path, b)
        results = {r.name: r for r in wh.maintain()}
        assert results["phones"].strategy == "id" and results["totals"].strategy == "id"
        assert stored() == expected()
        for name in ("nest", "phones", "totals", "flat"):
            check = wh.verify(name)
            assert check.ok, check.summary()


def test_a_view_of_values_cannot_be_read(make_warehouse):
    wh = make_warehouse("values")
    wh.create_table("t", "k", [{"k": 1, "v": 1.5}, {"k": 2, "v": 2.5}])
    wh.define("CREATE VIEW prices AS SELECT VALUE t.v FROM t", strategy="id")
    with pytest.raises(UnsupportedError, match="view prices cannot be read by another view: it is a view of values"):
        wh.define("CREATE VIEW again AS SELECT p FROM prices AS p")
    assert "again" not in wh.catalog.views
