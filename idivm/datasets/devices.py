"""The devices/parts workload of the thesis (Fig. 2.1a, knobs of Fig. 2.11).

Tables, keys underlined in the thesis::

    devices(did int, category string)          key did
    parts(pid int, price float)                key pid
    devices_parts(did int, pid int)            key (did, pid)
    devices_parts_<i>(did int, pid int, attr_<i> int)   key (did, pid), i = 1..extra_joins

Knobs (Fig. 2.11b; the thesis' defaults in parentheses):

* ``devices``, ``parts`` -- table sizes (5M each in Fig. 2.11a; ``at_scale(n)`` sets both to n);
* ``fanout`` -- *f*, parts per device, i.e. ``devices_parts`` rows per device (10);
* ``selectivity`` -- *s*, fraction of devices whose category is ``"phone"`` (20%); the number
  of phones is exactly ``round(selectivity * devices)``;
* ``extra_joins`` -- *j* minus 2: the number of additional tables joined 1-to-1 with
  ``devices_parts`` on (did, pid) (0, i.e. j = 2);
* *d*, the number of price updates, is the argument of :func:`price_updates`.

Everything is a pure function of the spec: each table has its own ``random.Random`` seeded
from ``(seed, table name)``, so a table can be streamed alone, in bounded memory, and comes out
the same on every run and every machine.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, replace

PHONE = "phone"
OTHER_CATEGORIES = ("tablet", "laptop", "watch", "camera", "speaker")
CATEGORIES = (PHONE, *OTHER_CATEGORIES)
MIN_PRICE = 1.0
MAX_PRICE = 100.0

THESIS_DEVICES = 5_000_000
THESIS_PARTS = 5_000_000


@dataclass(frozen=True, slots=True)
class DevicesSpec:
    """Sizes and knobs of one devices/parts database; see the module docstring."""

    devices: int = 1_000
    parts: int = 1_000
    fanout: int = 10
    selectivity: float = 0.2
    extra_joins: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.devices < 0 or self.parts < 0:
            raise ValueError("devices and parts must be >= 0")
        if not 0 <= self.fanout <= self.parts:
            raise ValueError(f"fanout must be between 0 and parts ({self.parts}), got {self.fanout}")
        if not 0.0 <= self.selectivity <= 1.0:
            raise ValueError(f"selectivity must be between 0 and 1, got {self.selectivity}")
        if self.extra_joins < 0:
            raise ValueError("extra_joins must be >= 0")

    @classmethod
    def at_scale(cls, scale: int, **knobs: object) -> DevicesSpec:
        """``scale`` devices and ``scale`` parts (equal sizes, as in Fig. 2.11a), other knobs as given."""
        return cls(devices=scale, parts=scale, **knobs)  # type: ignore[arg-type]

    @property
    def phones(self) -> int:
        return round(self.selectivity * self.devices)

    @property
    def table_names(self) -> tuple[str, ...]:
        return ("devices", "parts", "devices_parts") + tuple(
            extra_table_name(i) for i in range(1, self.extra_joins + 1)
        )

    def with_(self, **changes: object) -> DevicesSpec:
        return replace(self, **changes)  # type: ignore[arg-type]


def extra_table_name(i: int) -> str:
    return f"devices_parts_{i}"


KEYS: dict[str, tuple[str, ...]] = {
    "devices": ("did",),
    "parts": ("pid",),
    "devices_parts": ("did", "pid"),
}

SCHEMAS: dict[str, dict[str, str]] = {
    "devices": {"did": "int64", "category": "string"},
    "parts": {"pid": "int64", "price": "float64"},
    "devices_parts": {"did": "int64", "pid": "int64"},
}


def keys(spec: DevicesSpec) -> dict[str, tuple[str, ...]]:
    """Primary key of every table of ``spec`` (including the extra join tables)."""
    out = dict(KEYS)
    for i in range(1, spec.extra_joins + 1):
        out[extra_table_name(i)] = ("did", "pid")
    return out


def schemas(spec: DevicesSpec) -> dict[str, dict[str, str]]:
    """Field name -> type name of every table of ``spec``, in column order."""
    out = dict(SCHEMAS)
    for i in range(1, spec.extra_joins + 1):
        out[extra_table_name(i)] = {"did": "int64", "pid": "int64", f"attr_{i}": "int64"}
    return out


def _rng(spec: DevicesSpec, stream: str) -> random.Random:
    return random.Random(f"idivm.datasets.devices:{spec.seed}:{stream}")


def _price(rng: random.Random) -> float:
    return round(rng.uniform(MIN_PRICE, MAX_PRICE), 2)


def devices_rows(spec: DevicesSpec) -> Iterator[dict]:
    """``{"did", "category"}`` for did = 1..devices; exactly ``spec.phones`` phones, spread at random."""
    rng = _rng(spec, "devices")
    remaining_phones, remaining = spec.phones, spec.devices
    for did in range(1, spec.devices + 1):
        # selection sampling (Knuth's algorithm S): exact count, one pass, O(1) memory
        if rng.random() * remaining < remaining_phones:
            category = PHONE
            remaining_phones -= 1
        else:
            category = rng.choice(OTHER_CATEGORIES)
        remaining -= 1
        yield {"did": did, "category": category}


def parts_rows(spec: DevicesSpec) -> Iterator[dict]:
    """``{"pid", "price"}`` for pid = 1..parts; prices uniform in [1, 100] with 2 decimals."""
    rng = _rng(spec, "parts")
    for pid in range(1, spec.parts + 1):
        yield {"pid": pid, "price": _price(rng)}


def devices_parts_rows(spec: DevicesSpec) -> Iterator[dict]:
    """``{"did", "pid"}``: ``fanout`` distinct parts per device, uniformly chosen, sorted by (did, pid)."""
    rng = _rng(spec, "devices_parts")
    parts = range(1, spec.parts + 1)
    for did in range(1, spec.devices + 1):
        for pid in sorted(rng.sample(parts, spec.fanout)):
            yield {"did": did, "pid": pid}


def extra_join_rows(spec: DevicesSpec, i: int) -> Iterator[dict]:
    """``{"did", "pid", "attr_<i>"}``: one row per ``devices_parts`` row (a 1-to-1 join on (did, pid)),
    the vertically decomposed tables R_1..R_j of the joins experiment (§2.8.2)."""
    if not 1 <= i <= spec.extra_joins:
        raise ValueError(f"extra join table {i} is not in 1..{spec.extra_joins}")
    rng = _rng(spec, extra_table_name(i))
    attr = f"attr_{i}"
    for row in devices_parts_rows(spec):
        yield {"did": row["did"], "pid": row["pid"], attr: rng.randrange(1000)}


def tables(spec: DevicesSpec) -> dict[str, Iterator[dict]]:
    """Every table of ``spec``, by name, as a fresh lazy row iterator."""
    out: dict[str, Iterator[dict]] = {
        "devices": devices_rows(spec),
        "parts": parts_rows(spec),
        "devices_parts": devices_parts_rows(spec),
    }
    for i in range(1, spec.extra_joins + 1):
        out[extra_table_name(i)] = extra_join_rows(spec, i)
    return out


def price_updates(spec: DevicesSpec, d: int, seed: int | None = None) -> list[tuple[int, float, float]]:
    """``d`` price updates of distinct parts, as ``(pid, price_pre, price_post)`` sorted by pid.

    The base-table diff of Fig. 2.11c, relative to the ``parts`` table generated for ``spec``.
    Each new price is the old one times a factor in [0.5, 1.5], rounded to cents and never equal
    to the old one.  ``seed`` (default ``spec.seed``) chooses the batch; the same arguments give
    the same batch.  Reads the parts stream up to the largest chosen pid, so memory is O(d).
    """
    if not 0 <= d <= spec.parts:
        raise ValueError(f"d must be between 0 and parts ({spec.parts}), got {d}")
    batch = spec.seed if seed is None else seed
    rng = random.Random(f"idivm.datasets.devices:{spec.seed}:price_updates:{batch}")
    chosen = sorted(rng.sample(range(1, spec.parts + 1), d))
    wanted = set(chosen)
    old: dict[int, float] = {}
    if chosen:
        for row in parts_rows(spec):
            if row["pid"] in wanted:
                old[row["pid"]] = row["price"]
            if row["pid"] == chosen[-1]:
                break
    updates = []
    for pid in chosen:
        pre = old[pid]
        post = max(0.01, round(pre * rng.uniform(0.5, 1.5), 2))
        if post == pre:
            post = round(pre + 0.01, 2)
        updates.append((pid, pre, post))
    return updates


SAMPLE = DevicesSpec(devices=8, parts=10, fanout=3, selectivity=0.5, seed=3503)
"""The spec of the sample shipped in ``idivm/datasets/samples/devices/``."""
