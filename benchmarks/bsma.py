"""The social-media workload of the suite, after the thesis' BSMA experiment (§2.8.1, Fig. 2.9):
users, their friend lists, microblogs, retweets, mentions and events, the thesis' update of
users' ``tweetsnum`` and ``favornum``, and views in the spirit of BSMA's Q7, Q10, Q11, Q15 and
Q18 and the thesis' Q*1-Q*3 (``benchmarks/views/bsma_*.sqlpp``).

Tables (keys first), with the proportions of Fig. 2.9a scaled by the number of users *u*::

    users(uid, name, city, tweetsnum, favornum)      u rows, 100 cities
    friendlist(uid, friendid)                        FRIENDS (10) distinct friends per user
    microblog(mid, uid, day)                         TWEETS (20) per user, day 1..365
    retweets(mid, origmid)                           a tenth of the microblogs retweeted twice:
                                                     the retweets are other microblogs
    mentions(mid, uid)                               a fifth of the microblogs mention 2 users
    rel_event_microblog(eid, mid)                    two fifths of the microblogs, 2 events each
    events(eid, topic)                               u / 100 events over 50 topics

Every table is a pure function of (users, seed), drawn with numpy.  As in the thesis the
changes are updates of ``users``: a batch of n changes gives n distinct users new
``tweetsnum`` and ``favornum`` (Debezium ``u`` events, the whole row before and after), which
every view reads: as a group key (``bsma_q7``, ``bsma_q10``, ``bsma_q11``, ``bsma_q18``), as a
column of a select-project-join view (``bsma_q15``) or inside the aggregate (``bsma_s1``-
``bsma_s3``, the thesis' Q*1-Q*3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import common
from common import BenchmarkError, EventBatch

VIEWS = ("bsma_q7", "bsma_q10", "bsma_q11", "bsma_q15", "bsma_q18", "bsma_s1", "bsma_s2", "bsma_s3")

KEYS: dict[str, tuple[str, ...]] = {
    "users": ("uid",),
    "friendlist": ("uid", "friendid"),
    "microblog": ("mid",),
    "retweets": ("mid",),
    "mentions": ("mid", "uid"),
    "rel_event_microblog": ("eid", "mid"),
    "events": ("eid",),
}
FRIENDS = 10
TWEETS = 20
CITIES = 100
TOPICS = 50
DAYS = 365


def view_text(view: str) -> str:
    return common.view_text(view, VIEWS, "BSMA")


# --- data ------------------------------------------------------------------------------------------

def _distinct_per_row(rng: np.random.Generator, rows: int, k: int, n: int) -> np.ndarray:
    """``rows`` x ``k`` values of 0..n-1, distinct within a row (redrawn until they are)."""
    out = rng.integers(0, n, size=(rows, k))
    while True:
        s = np.sort(out, axis=1)
        bad = (s[:, 1:] == s[:, :-1]).any(axis=1)
        if not bad.any():
            return out
        out[bad] = rng.integers(0, n, size=(int(bad.sum()), k))


def tables(users: int, seed: int = 0) -> dict[str, pa.Table]:
    """Every table for ``users`` users (see the module docstring)."""
    if users < FRIENDS + 1:
        raise BenchmarkError(f"the BSMA workload needs more than {FRIENDS} users, got {users}")
    rng = np.random.default_rng(seed)
    uid = np.arange(1, users + 1, dtype=np.int64)
    out = {"users": pa.table({
        "uid": uid,
        "name": pa.array([f"user{u}" for u in uid]),
        "city": pa.array([f"city{c}" for c in rng.integers(0, CITIES, users)]),
        "tweetsnum": rng.integers(0, 1000, users),
        "favornum": rng.integers(0, 1000, users),
    })}
    friends = _distinct_per_row(rng, users, FRIENDS, users - 1)
    friends += (friends >= np.arange(users)[:, None])  # nobody is their own friend
    out["friendlist"] = pa.table({"uid": np.repeat(uid, FRIENDS), "friendid": (friends + 1).ravel().astype(np.int64)})
    n_mb = users * TWEETS
    mid = np.arange(1, n_mb + 1, dtype=np.int64)
    out["microblog"] = pa.table({"mid": mid, "uid": rng.integers(1, users + 1, n_mb), "day": rng.integers(1, DAYS + 1, n_mb)})
    order = rng.permutation(mid)
    originals = order[: n_mb // 10]
    retweeting = order[n_mb // 10: n_mb // 10 * 3]
    out["retweets"] = pa.table({"mid": retweeting, "origmid": np.repeat(originals, 2)})
    mentioning = rng.choice(mid, n_mb // 5, replace=False)
    mentioned = _distinct_per_row(rng, len(mentioning), 2, users) + 1
    out["mentions"] = pa.table({"mid": np.repeat(mentioning, 2), "uid": mentioned.ravel().astype(np.int64)})
    n_events = max(2, users // 100)
    about = rng.choice(mid, n_mb * 2 // 5, replace=False)
    events = _distinct_per_row(rng, len(about), 2, n_events) + 1
    out["rel_event_microblog"] = pa.table({"eid": events.ravel().astype(np.int64), "mid": np.repeat(about, 2)})
    out["events"] = pa.table({"eid": np.arange(1, n_events + 1, dtype=np.int64),
                              "topic": pa.array([f"topic{t}" for t in rng.integers(0, TOPICS, n_events)])})
    return out


def generate_data(users: int, out: Path, seed: int = 0) -> Path:
    """The tables as ``OUT/data/<table>.parquet``; reused when a previous invocation left the same
    users and seed."""
    wanted = {"users": users, "seed": seed, "friends": FRIENDS, "tweets": TWEETS}
    return common.generated(out / "data", wanted, KEYS, "BSMA", f"BSMA {users:,} users", lambda: tables(users, seed))


# --- changes ---------------------------------------------------------------------------------------

class Updates:
    """The stream of user updates: ``next_batch(n)`` gives n distinct users new ``tweetsnum``
    and ``favornum`` (each grown by 1..50: counters of a social network) and returns their
    Debezium events."""

    def __init__(self, data: Path, seed: int = 0):
        self.users = pq.read_table(data / "users.parquet").to_pylist()
        self.rng = np.random.default_rng(seed + 1)
        self.number = 0

    def next_batch(self, n: int) -> EventBatch:
        if n > len(self.users):
            raise BenchmarkError(f"a batch of {n} user updates needs that many users ({len(self.users):,})")
        events = []
        for i in self.rng.choice(len(self.users), n, replace=False):
            before = self.users[i]
            after = dict(before)
            for column in ("tweetsnum", "favornum"):
                after[column] = before[column] + int(self.rng.integers(1, 51))
            self.users[i] = after
            events.append({"op": "u", "before": before, "after": after})
        self.number += 1
        return EventBatch(self.number, {"users": events})
