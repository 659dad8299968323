"""Soak: random Debezium change streams through a real Kafka broker into relational and nested
base tables, and eleven views over them maintained and verified after every run.

Base tables: devices/parts/devices_parts (:mod:`idivm.datasets.devices`, relational),
businesses/reviews/users (:mod:`idivm.datasets.yelp`, nested lists) and shops (a collection of
tuples ``hours`` with its declared element key ``day``).  Views: the shipped view files over
them (:data:`VIEWS`) under the strategies id, tuple, auto and maps, and two views over
``shops.hours``.

Each batch: a random change generator (:class:`Feed`) makes Debezium messages for every table
(c/u/d on random keys: fresh keys, deleted keys inserted again, updates of one or two columns to
values drawn from the column), about one in twenty of them broken (a value of the wrong type, a
missing key, truncated JSON), and sends them to the table's topic, partitioned by key.  Then
``idivm ingest`` takes every topic, ``idivm maintain --all`` runs, and ``idivm verify`` checks
every view (zero divergences required).  Oracles besides verify: after every ingest each base
table equals the generator's model of it (the valid changes applied in order), and its
quarantine holds exactly the broken messages sent since the last retry; every few batches the
quarantined records are replaced by their corrected versions (``quarantine retry --from``),
which the model then applies.

``IDIVM_SOAK_BATCHES`` (default :data:`DEFAULT_BATCHES`) sets the number of batches;
``IDIVM_SOAK_MINUTES`` a time after which no further batch is started; ``IDIVM_SOAK_CHANGES`` the
messages per table per batch.  A summary is printed every :data:`SUMMARY_EVERY` batches and at
the end (run with ``-s`` to see it).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
import zlib
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from click.testing import CliRunner

from idivm import cli
from idivm.datasets import arrow_schema, devices, view_path, yelp
from idivm.storage import delta

from test_kafka import broker, url  # noqa: F401  (the broker fixture)

pytestmark = pytest.mark.slow

DEFAULT_BATCHES = 10
BATCHES = int(os.environ.get("IDIVM_SOAK_BATCHES", DEFAULT_BATCHES))
MINUTES = float(os.environ.get("IDIVM_SOAK_MINUTES", "inf"))
CHANGES = int(os.environ.get("IDIVM_SOAK_CHANGES", 12))
SUMMARY_EVERY = 25
RETRY_EVERY = 4  # batches between two replays of the quarantine
BROKEN = 0.05    # the share of broken messages
SEED = int(os.environ.get("IDIVM_SOAK_SEED", 29))

DEVICES = devices.DevicesSpec(devices=60, parts=60, fanout=3, selectivity=0.4, seed=7)
YELP = yelp.YelpSpec(businesses=30, reviews_per_business=4.0, users_per_business=1.25, sf_fraction=0.4,
                     unreviewed_fraction=0.1, repeat_fraction=0.1, friends_per_user=2.0, elite_fraction=0.5, seed=1)
SHOPS_SCHEMA = pa.schema([("shop_id", pa.int64()), ("name", pa.string()), ("city", pa.string()),
                          ("hours", pa.list_(pa.struct([("day", pa.string()), ("open", pa.int64())])))])
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def shops_rows(rng: random.Random, n: int = 30) -> list[dict]:
    return [{"shop_id": i, "name": f"shop {i}", "city": rng.choice(["SF", "LA", "NY"]),
             "hours": [{"day": d, "open": rng.randint(6, 12)} for d in sorted(rng.sample(DAYS, rng.randint(0, 4)))]}
            for i in range(n)]


def renamed(file: str, name: str) -> str:
    text = view_path(file).read_text()
    start = text.index("CREATE VIEW ") + len("CREATE VIEW ")
    return text[:start] + name + text[text.index(" AS", start):]


#: name -> (text, strategy)
VIEWS = {
    "phone_parts": (renamed("devices_v", "phone_parts"), "id"),
    "phone_parts_t": (renamed("devices_v", "phone_parts_t"), "tuple"),
    "phone_cost": (renamed("devices_cost", "phone_cost"), "id"),
    "phone_cost_m": (renamed("devices_cost", "phone_cost_m"), "maps"),
    "phone_price_range": (renamed("devices_price_range", "phone_price_range"), "auto"),
    "phone_price_range_m": (renamed("devices_price_range", "phone_price_range_m"), "maps"),
    "sf_reviews": (renamed("sf_reviews", "sf_reviews"), "id"),
    "sf_reviews_flat": (renamed("sf_reviews_flat", "sf_reviews_flat"), "auto"),
    "sf_reviews_grouped": (renamed("sf_reviews_grouped", "sf_reviews_grouped"), "id"),
    "shop_hours": ("CREATE VIEW shop_hours AS SELECT s.shop_id, s.city, h.day, h.open "
                   "FROM shops s, s.hours AS h WHERE h.open < 10", "id"),
    "shop_days": ("CREATE VIEW shop_days AS SELECT s.shop_id, s.name, "
                  "(SELECT h.day FROM s.hours AS h WHERE h.open >= 8) AS late FROM shops s "
                  "WHERE s.city = \"SF\"", "auto"),
}


# --- the change generator ------------------------------------------------------------------------

@dataclass
class Feed:
    """A table's change generator and its model: the rows the table holds once every valid
    message sent so far is ingested (and every corrected one replayed)."""

    table: str
    key: tuple[str, ...]
    schema: pa.Schema
    rows: dict[tuple, dict]
    rng: random.Random
    topic: str = ""
    pool: dict[str, list] = field(default_factory=dict)
    deleted: list[tuple] = field(default_factory=list)
    fixes: dict[str, str] = field(default_factory=dict)  # broken message -> its corrected version
    fresh: int = 0

    def __post_init__(self):
        for row in self.rows.values():
            for c, v in row.items():
                self.pool.setdefault(c, []).append(v)

    def key_of(self, row: dict) -> tuple:
        return tuple(row[k] for k in self.key)

    def new_key(self) -> tuple:
        if self.deleted and self.rng.random() < 0.3:
            k = self.deleted.pop(self.rng.randrange(len(self.deleted)))
            if k not in self.rows:
                return k
        for _ in range(20):
            if len(self.key) > 1:  # a pair of existing values (devices_parts: a device and a part)
                k = tuple(self.rng.choice(self.pool[c]) for c in self.key)
            else:
                self.fresh += 1
                sample = self.pool[self.key[0]][0]
                k = (10_000 + self.fresh,) if isinstance(sample, int) else (f"{self.table[0]}n{self.fresh:05d}",)
            if k not in self.rows:
                return k
        raise AssertionError(f"{self.table}: no free key")

    def change(self) -> tuple[tuple, dict]:
        """(key, Debezium event) of a random change, applied to the model."""
        values = [c for c in self.schema.names if c not in self.key]
        op = self.rng.choices("cud", weights=(3, 5 if values else 0, 2))[0] if self.rows else "c"
        if op == "c":
            k = self.new_key()
            donor = self.rows[self.rng.choice(list(self.rows))] if self.rows else {}
            after = {c: (k[self.key.index(c)] if c in self.key else
                         self.rng.choice(self.pool[c]) if self.rng.random() < 0.5 else donor.get(c))
                     for c in self.schema.names}
            self.rows[k] = after
            return k, {"before": None, "after": after, "op": "c"}
        k = self.rng.choice(list(self.rows))
        before = self.rows[k]
        if op == "d":
            del self.rows[k]
            self.deleted.append(k)
            return k, {"before": before, "after": None, "op": "d"}
        after = dict(before)
        for c in self.rng.sample(values, min(len(values), self.rng.randint(1, 2))):
            after[c] = self.rng.choice(self.pool[c])
        self.rows[k] = after
        return k, {"before": before, "after": after, "op": "u"}

    def undo(self, k: tuple, event: dict) -> None:
        """Take the change ``event`` of key ``k`` that :meth:`change` just made out of the model."""
        if event["op"] == "c":
            del self.rows[k]
        else:
            self.rows[k] = event["before"]
            if event["op"] == "d":
                self.deleted.remove(k)

    def broken(self, event: dict) -> str:
        """A broken version of ``event``'s message (its change not applied to the model)."""
        good = json.dumps(event)
        row_field = "after" if event["after"] is not None else "before"
        kind = self.rng.choice(["type", "key", "json"])
        values = [c for c in self.schema.names if c not in self.key]
        if kind == "type" and row_field == "after" and values:
            c = self.rng.choice(values)
            wrong = {**event[row_field], c: 12345 if pa.types.is_string(self.schema.field(c).type) else "oops"}
            text = json.dumps({**event, row_field: wrong})
        elif kind in ("type", "key"):
            text = json.dumps({**event, row_field: {c: v for c, v in event[row_field].items() if c != self.key[-1]}})
        else:
            text = good[: len(good) // 2]
        self.fixes[text] = good
        return text

    def apply(self, event: dict) -> None:
        """A corrected message replayed: applied to the model."""
        if event["op"] == "d":
            k = self.key_of(event["before"])
            if self.rows.pop(k, None) is not None:
                self.deleted.append(k)
        else:
            self.rows[self.key_of(event["after"])] = event["after"]


def partition(k: tuple) -> int:
    return zlib.crc32(json.dumps(k).encode()) % 2


# --- the soak --------------------------------------------------------------------------------------

@dataclass
class Tally:
    batches: int = 0
    messages: int = 0
    broken: int = 0
    quarantined: int = 0
    replayed: int = 0
    ingests: int = 0
    maintained: int = 0
    verifies: int = 0
    divergences: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # command -> seconds spent in it

    def timed(self, command: str, started: float) -> None:
        self.seconds[command] = self.seconds.get(command, 0.0) + time.monotonic() - started

    def summary(self, seconds: float) -> str:
        return (f"soak: {self.batches} batches, {self.messages} change messages pushed ({self.broken} broken), "
                f"{self.quarantined} records quarantined, {self.replayed} replayed, {self.ingests} ingest commands, "
                f"{self.maintained} view runs, {self.verifies} verifies, {len(self.divergences)} divergences; "
                f"{seconds:.0f} s (" + ", ".join(f"{c} {s:.0f} s" for c, s in sorted(self.seconds.items())) + ")")


def rows_of(rows, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=schema)


def test_soak(broker, make_warehouse, tmp_path):  # noqa: F811
    from kafka.admin import NewTopic

    started = time.monotonic()
    wh = make_warehouse("soak")
    rng = random.Random(SEED)
    feeds: list[Feed] = []
    sources = [(devices, DEVICES), (yelp, YELP)]
    for module, spec in sources:
        for name, rows in module.tables(spec).items():
            schema = arrow_schema(module.schemas(spec)[name])
            rows = list(rows)
            key = tuple(module.keys(spec)[name])
            wh.create_table(name, list(key), rows_of(rows, schema))
            feeds.append(Feed(name, key, schema, {tuple(r[k] for k in key): r for r in rows}, random.Random(rng.random())))
    shops = shops_rows(rng)
    wh.create_table("shops", "shop_id", rows_of(shops, SHOPS_SCHEMA), element_keys={"hours": "day"})
    feeds.append(Feed("shops", ("shop_id",), SHOPS_SCHEMA, {(r["shop_id"],): r for r in shops},
                      random.Random(rng.random())))
    for view, (text, strategy) in VIEWS.items():
        info = wh.define(text, strategy=strategy)
        assert info.strategy == strategy, (view, info.strategy)
    for f in feeds:
        f.topic = f"soak-{f.table}-{uuid.uuid4().hex[:6]}"
        broker.admin.create_topics([NewTopic(f.topic, 2, 1)], timeout_ms=10_000)

    print(f"\nsoak: set-up (tables, {len(VIEWS)} views, topics) took {time.monotonic() - started:.0f} s")
    runner = CliRunner()
    state = cli.CliState(warehouse_path=str(wh.path), warehouse=wh)

    tally = Tally()

    def idivm(*args, ok=(0,)):
        t0 = time.monotonic()
        r = runner.invoke(cli.cli, ["--warehouse", str(wh.path), *args], obj=state)
        tally.timed(args[0], t0)
        assert r.exit_code in ok, f"idivm {' '.join(args)} exited {r.exit_code}:\n{r.output}"
        return r

    waiting = {f.table: 0 for f in feeds}  # broken messages sent since the last retry
    for batch in range(1, BATCHES + 1):
        last = batch == BATCHES or time.monotonic() - started > MINUTES * 60
        for f in feeds:
            messages = []
            for _ in range(CHANGES):
                k, event = f.change()
                if f.rng.random() < BROKEN:
                    f.undo(k, event)
                    messages.append((partition(k), f.broken(event)))
                    waiting[f.table] += 1
                    tally.broken += 1
                else:
                    messages.append((partition(k), json.dumps(event)))
            broker.send(f.topic, messages)
            tally.messages += len(messages)
        for f in feeds:
            idivm("ingest", f.table, url(broker, f.topic), ok=(0, 3))
            tally.ingests += 1
            quarantined = wh.quarantined(f.table).num_rows
            assert quarantined == waiting[f.table], (batch, f.table, quarantined, waiting[f.table])
            _check_table(wh, f, batch)
        if batch % RETRY_EVERY == 0 or last:
            for f in feeds:
                if not waiting[f.table]:
                    continue
                shown = idivm("quarantine", "show", f.table, "--format", "jsonl").output.splitlines()
                tally.quarantined += len(shown)
                fixed = [f.fixes[text] for text in shown]
                (tmp_path / f"fixed-{f.table}-{batch}.jsonl").write_text("\n".join(fixed) + "\n")
                idivm("quarantine", "retry", f.table, "--from", str(tmp_path / f"fixed-{f.table}-{batch}.jsonl"))
                for text in fixed:
                    f.apply(json.loads(text))
                tally.replayed += len(fixed)
                waiting[f.table] = 0
                assert wh.quarantined(f.table).num_rows == 0
                _check_table(wh, f, batch)
        r = idivm("maintain", "--all", "--format", "json")
        tally.maintained += sum(1 for line in r.stdout.splitlines() if line.startswith("{"))
        for view in VIEWS:
            r = idivm("verify", view, ok=(0, 1))
            tally.verifies += 1
            if r.exit_code != 0:
                tally.divergences.append(f"batch {batch}: {view}: {r.output}")
        tally.batches = batch
        print(f"soak: batch {batch} done at {time.monotonic() - started:.0f} s", flush=True)
        if batch % SUMMARY_EVERY == 0:
            print(tally.summary(time.monotonic() - started), flush=True)
        if tally.divergences or last:
            break
    print("\n" + tally.summary(time.monotonic() - started))
    assert not tally.divergences, "\n".join(tally.divergences)


def _check_table(wh, f: Feed, batch: int) -> None:
    held = {f.key_of(r): r for r in delta.read_arrow(wh.table_path(f.table)).to_pylist()}
    if held != f.rows:
        missing = [k for k in f.rows if k not in held][:3]
        extra = [k for k in held if k not in f.rows][:3]
        changed = [k for k in f.rows if k in held and held[k] != f.rows[k]][:3]
        raise AssertionError(f"batch {batch}: {f.table} differs from its model: missing {missing}, "
                             f"unexpected {extra}, different {[(k, held[k], f.rows[k]) for k in changed]}")
