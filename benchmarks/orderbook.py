"""The order-book workload of the suite, after DBToaster's finance queries (``../shared/seeds/004_…``
§8-9): the bids and asks of one stock, and views after VWAP, PSP, MST, AXF, BSP and BSV
(``benchmarks/views/orderbook_*.sqlpp``), which DBToaster maintains by higher-order delta maps.

Tables, each keyed by ``id``, with DBToaster's schema (timestamp, order id, broker, price,
volume)::

    bids(t, id, broker_id, price, volume)     o orders
    asks(t, id, broker_id, price, volume)     o orders

Prices are drawn around 10,000 (bids below, asks above, both spread over 4,000, so that AXF's
condition, prices more than 1,000 apart, holds for some pairs and not for others), volumes
1..1,000, brokers 0..9, and ``t`` numbers the orders as they are placed.  Every table is a
pure function of (orders, seed), drawn with numpy.

Changes: a batch of n changes is what an order book sees: new orders placed (``c``, on a side
and by a broker drawn at random, with the next ``t``), orders filled or withdrawn (``d``) and
partial fills (``u``, a smaller volume), in the proportions 2 : 2 : 1, so that both sides keep
their size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import common
from common import BenchmarkError, EventBatch

VIEWS = ("orderbook_vwap", "orderbook_psp", "orderbook_mst", "orderbook_axf", "orderbook_bsp", "orderbook_bsv")

KEYS: dict[str, tuple[str, ...]] = {"bids": ("id",), "asks": ("id",)}
BROKERS = 10
#: the middle of the prices, and how far a side's prices spread
PRICE, SPREAD = 10_000.0, 4_000.0


def view_text(view: str) -> str:
    return common.view_text(view, VIEWS, "order-book")


# --- data ------------------------------------------------------------------------------------------

def _orders(rng: np.random.Generator, side: str, ids: np.ndarray, t: np.ndarray) -> pa.Table:
    low = PRICE - SPREAD if side == "bids" else PRICE
    return pa.table({
        "t": t.astype(np.int64),
        "id": ids.astype(np.int64),
        "broker_id": rng.integers(0, BROKERS, len(ids)).astype(np.int64),
        "price": np.round(rng.uniform(low, low + SPREAD, len(ids)), 2),
        "volume": rng.integers(1, 1001, len(ids)).astype(np.float64),
    })


def tables(orders: int, seed: int = 0) -> dict[str, pa.Table]:
    """``orders`` bids and as many asks (see the module docstring); ids and times run across
    both sides."""
    if orders < 1:
        raise BenchmarkError(f"the order-book workload needs at least one order per side, got {orders}")
    rng = np.random.default_rng(seed)
    t = rng.permutation(2 * orders) + 1
    return {"bids": _orders(rng, "bids", np.arange(1, orders + 1), t[:orders]),
            "asks": _orders(rng, "asks", np.arange(orders + 1, 2 * orders + 1), t[orders:])}


def generate_data(orders: int, out: Path, seed: int = 0) -> Path:
    """The tables as ``OUT/data/<table>.parquet``; reused when a previous invocation left the same
    orders and seed."""
    wanted = {"orders": orders, "seed": seed, "brokers": BROKERS}
    return common.generated(out / "data", wanted, KEYS, "order book", f"order book of {orders:,} bids and {orders:,} asks",
                            lambda: tables(orders, seed))


# --- changes ---------------------------------------------------------------------------------------

class Stream:
    """The order book's changes: ``next_batch(n)`` places, removes and partially fills orders
    (see the module docstring) and returns their Debezium events; the book it keeps is what
    the tables hold once every batch so far is applied."""

    def __init__(self, data: Path, seed: int = 0):
        self.book = {side: {r["id"]: r for r in pq.read_table(data / f"{side}.parquet").to_pylist()} for side in KEYS}
        self.rng = np.random.default_rng(seed + 1)
        self.next_id = 1 + max(max(rows, default=0) for rows in self.book.values())
        self.next_t = 1 + max(r["t"] for rows in self.book.values() for r in rows.values())
        self.number = 0

    def next_batch(self, n: int) -> EventBatch:
        events: dict[str, list[dict[str, Any]]] = {side: [] for side in KEYS}
        for kind in self.rng.choice(["c", "c", "d", "d", "u"], n):
            side = str(self.rng.choice(list(KEYS)))
            rows = self.book[side]
            if kind == "c" or not rows:
                row = _orders(self.rng, side, np.array([self.next_id]), np.array([self.next_t])).to_pylist()[0]
                self.next_id += 1
                self.next_t += 1
                rows[row["id"]] = row
                events[side].append({"op": "c", "before": None, "after": row})
                continue
            key = int(self.rng.choice(sorted(rows)))
            before = rows[key]
            if kind == "d" or before["volume"] <= 1:
                del rows[key]
                events[side].append({"op": "d", "before": before, "after": None})
            else:
                after = {**before, "volume": float(self.rng.integers(1, int(before["volume"])))}
                rows[key] = after
                events[side].append({"op": "u", "before": before, "after": after})
        self.number += 1
        return EventBatch(self.number, {side: e for side, e in events.items() if e})
