"""The TPC-H workload of the suite: TPC-H data, the refresh functions as the change stream, and
views after TPC-H queries (``benchmarks/views/tpch_*.sqlpp``).

Data: ``tpchgen-cli parquet -s SF`` (the ``bench`` extra installs it), converted to the types
idivm and DuckDB read alike: ``DECIMAL(15,2)`` money and quantity columns become DOUBLE (so that
every strategy, the higher-order maps included, can maintain the aggregates over them), 32-bit
integers 64-bit, and strings plain strings; dates stay dates.  A seeded tenth of the orders,
with their lines, is held out of the loaded tables as the pool the inserts draw from.

Changes: a batch of size n is TPC-H's refresh pair, as Debezium events: RF1 inserts n orders
of the pool with their lines, RF2 deletes n present orders with their lines (which go back to
the pool, so that the stream does not run dry).  Orders are drawn by a seeded generator; the
events of a table are written to ``OUT/changes/batch-NNNN/<table>.jsonl`` and ingested with
``format="debezium"`` (``common.ingest_events``); DuckDB applies the same events (``duck.DuckRecompute.apply_events``).

Views (their texts are SQL once their string literals are quoted as SQL's, which is how
DuckDB gets them): ``tpch_q1`` (Q1, one table, 4 groups, every aggregate but MIN/MAX),
``tpch_q3`` (Q3, three tables, a group per order), ``tpch_q5`` (Q5, six tables, a group per
nation of a region), ``tpch_q17`` (Q17, a global aggregate of the lines whose quantity is below
a fifth of their part's average: a correlated scalar subquery), ``tpch_q20`` (Q20's suppliers
with parts in excess of half a year's shipments: a nested aggregate correlated on two
equalities) and ``tpch_urgent`` (the lines of urgent open orders with their customer:
select-project-join, no aggregate).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import common
from common import BenchmarkError, EventBatch, progress

VIEWS = ("tpch_q1", "tpch_q3", "tpch_q5", "tpch_q6", "tpch_q10", "tpch_q11", "tpch_q12", "tpch_q14", "tpch_q17",
         "tpch_q18", "tpch_q19", "tpch_q20", "tpch_q22", "tpch_urgent")

#: the tables the views read, with their keys
KEYS: dict[str, tuple[str, ...]] = {
    "lineitem": ("l_orderkey", "l_linenumber"),
    "orders": ("o_orderkey",),
    "customer": ("c_custkey",),
    "supplier": ("s_suppkey",),
    "nation": ("n_nationkey",),
    "region": ("r_regionkey",),
    "part": ("p_partkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
}
#: the tables the refresh functions change
CHANGED = ("orders", "lineitem")
POOL_SHARE = 0.1


def view_text(view: str) -> str:
    return common.view_text(view, VIEWS, "TPC-H")


# --- data ------------------------------------------------------------------------------------------

def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(t):
        return pa.float64()
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_string_view(t) or pa.types.is_large_string(t) or pa.types.is_string(t):
        return pa.string()
    return t


def plain(table: pa.Table) -> pa.Table:
    """``table`` with the types idivm and DuckDB read alike (see the module docstring)."""
    return table.cast(pa.schema([pa.field(f.name, _plain(f.type), nullable=False) for f in table.schema]))


def generate_data(sf: float, out: Path, seed: int = 0) -> tuple[Path, Path]:
    """The tables at scale factor ``sf``: ``OUT/data/<table>.parquet`` (what is loaded) and
    ``OUT/pool/{orders,lineitem}.parquet`` (held out for the inserts); reused when a previous
    invocation left the same scale factor and seed."""
    data, pool = out / "data", out / "pool"
    wanted = {"sf": sf, "seed": seed, "pool_share": POOL_SHARE}
    if common.reusable(data, wanted, KEYS, "TPC-H") and common.reusable(pool, wanted, CHANGED, "TPC-H pool"):
        return data, pool
    tpchgen = shutil.which("tpchgen-cli")
    if tpchgen is None:
        raise BenchmarkError("the TPC-H workload needs tpchgen-cli: pip install -e \".[bench]\"")
    raw = out / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    started = time.perf_counter()
    command = [tpchgen, "parquet", "-s", f"{sf:g}", "--output-dir", str(raw),
               "--tables", ",".join(KEYS)]
    progress("data: " + " ".join(command[1:]))
    subprocess.run(command, check=True, capture_output=True)
    for d in (data, pool):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    orders = plain(pq.read_table(raw / "orders.parquet"))
    rng = np.random.default_rng(seed)
    held = rng.random(orders.num_rows) < POOL_SHARE
    held_keys = orders.column("o_orderkey").filter(pa.array(held))
    lines = plain(pq.read_table(raw / "lineitem.parquet"))
    in_pool = pc.is_in(lines.column("l_orderkey"), value_set=held_keys)
    pq.write_table(orders.filter(pa.array(~held)), data / "orders.parquet")
    pq.write_table(orders.filter(pa.array(held)), pool / "orders.parquet")
    pq.write_table(lines.filter(pc.invert(in_pool)), data / "lineitem.parquet")
    pq.write_table(lines.filter(in_pool), pool / "lineitem.parquet")
    for table in KEYS:
        if table not in CHANGED:
            pq.write_table(plain(pq.read_table(raw / f"{table}.parquet")), data / f"{table}.parquet")
    shutil.rmtree(raw, ignore_errors=True)
    common.stamp(data, wanted)
    common.stamp(pool, wanted)
    progress(f"data: TPC-H sf {sf:g}: {orders.num_rows:,} orders ({int(held.sum()):,} held out), "
             f"{lines.num_rows:,} lines, in {time.perf_counter() - started:.1f} s")
    return data, pool


# --- changes ---------------------------------------------------------------------------------------

class Refresh:
    """The refresh stream over one database: every order and line there is (loaded and held
    out), and which orders are present.  ``next_batch(n)`` draws RF1 (n orders of the pool
    inserted) and RF2 (n present orders deleted), both with their lines."""

    def __init__(self, data: Path, pool: Path, seed: int = 0):
        self.orders = pa.concat_tables([pq.read_table(data / "orders.parquet"), pq.read_table(pool / "orders.parquet")])
        self.lines = pa.concat_tables([pq.read_table(data / "lineitem.parquet"),
                                       pq.read_table(pool / "lineitem.parquet")])
        loaded = pq.read_metadata(data / "orders.parquet").num_rows
        self.present = np.zeros(self.orders.num_rows, dtype=bool)
        self.present[:loaded] = True
        self.rng = np.random.default_rng(seed + 1)
        self.number = 0

    def next_batch(self, n: int) -> EventBatch:
        present, pooled = np.flatnonzero(self.present), np.flatnonzero(~self.present)
        if n > len(pooled) or n > len(present):
            raise BenchmarkError(f"a refresh of {n} orders needs that many present and held-out orders "
                                 f"({len(present):,} and {len(pooled):,})")
        inserted = self.rng.choice(pooled, n, replace=False)
        deleted = self.rng.choice(present, n, replace=False)
        self.present[inserted] = True
        self.present[deleted] = False
        self.number += 1
        events: dict[str, list[dict[str, Any]]] = {}
        for rows, op in ((self.orders.take(pa.array(deleted)), "d"), (self.orders.take(pa.array(inserted)), "c")):
            keys = rows.column("o_orderkey")
            lines = self.lines.filter(pc.is_in(self.lines.column("l_orderkey"), value_set=keys))
            # lines go before their order when it is deleted, after it when it is inserted
            for table, changed in (("lineitem", lines), ("orders", rows)):
                side = "before" if op == "d" else "after"
                events.setdefault(table, []).extend(
                    {"op": op, "before": None, "after": None, side: row} for row in changed.to_pylist())
        return EventBatch(self.number, events)
