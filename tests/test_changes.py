"""The one condensation of a batch of changes per key (:mod:`idivm.changes`), which ingest and
maintenance share: its folding table, its reading of a change data feed, the ingest adapter,
and its agreement with the reference fold over the i-diff value model
(:func:`idivm.diffs.model.effective.condense`)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from idivm.changes import condense, condense_feed
from idivm.diffs import IDiff, Provenance
from idivm.diffs.model import condense as condense_idiffs
from idivm.ingest.apply import condense as condense_ingest
from idivm.ingest.records import Change

A, B, C = {"k": 1, "v": "a"}, {"k": 1, "v": "b"}, {"k": 1, "v": "c"}


@pytest.mark.parametrize("sequence, net", [
    ([(None, A), (A, B)], (None, B)),        # insert, update: insert of the updated row
    ([(None, A), (A, None)], (None, None)),  # insert, delete: nothing
    ([(A, None), (None, B)], (A, B)),        # delete, insert: an update
    ([(A, B), (B, C)], (A, C)),              # update, update: first pre, last post
    ([(A, B), (B, None)], (A, None)),        # update, delete: delete of the first row
    ([(A, B), (B, A)], (A, A)),              # an update undone: the same row before and after
])
def test_condense_folding_table(sequence, net):
    assert condense((1, before, after) for before, after in sequence) == {1: net}


def test_condense_keeps_the_order_keys_first_appear_in():
    out = condense([(2, None, "x"), (1, None, "y"), (2, "x", "z")])
    assert list(out.items()) == [(2, (None, "z")), (1, (None, "y"))]


def _feed(rows: list[tuple[str, int, int, str]]) -> pa.Table:
    """A change data feed of a table (k, v): (change type, commit version, k, v) per row."""
    return pa.table({"k": [r[2] for r in rows], "v": [r[3] for r in rows],
                     "_change_type": [r[0] for r in rows], "_commit_version": [r[1] for r in rows],
                     "_commit_timestamp": pa.array([0] * len(rows), pa.timestamp("us", tz="UTC"))})


def test_condense_feed_reads_commits_in_version_order_and_pairs_update_images():
    feed = _feed([
        ("update_postimage", 3, 1, "c"), ("update_preimage", 3, 1, "b"),  # commit 3, out of order
        ("insert", 2, 1, "b"), ("delete", 2, 1, "a"),                     # commit 2: delete, insert again
        ("insert", 2, 2, "x"), ("delete", 4, 2, "x"),                     # inserted, then deleted
        ("update_preimage", 2, 3, "p"), ("update_postimage", 2, 3, "q"),
        ("delete", 3, 4, "d"),
    ])
    assert condense_feed(feed, ("k",)) == {
        (1,): ({"k": 1, "v": "a"}, {"k": 1, "v": "c"}),
        (2,): (None, None),
        (3,): ({"k": 3, "v": "p"}, {"k": 3, "v": "q"}),
        (4,): ({"k": 4, "v": "d"}, None),
    }


def test_condense_ingest_changes_keeps_the_last_change_of_each_key():
    changes = [Change("upsert", (1,), {"k": 1, "v": "a"}, 1), Change("upsert", (2,), {"k": 2, "v": "b"}, 2),
               Change("delete", (1,), {"k": 1}, 3), Change("upsert", (2,), {"k": 2, "v": "c"}, 4)]
    assert condense_ingest(changes) == [changes[2], changes[3]]


def _random_log(rng: random.Random, keys: int, length: int) -> list[tuple[int, dict | None, dict | None]]:
    """A consistent sequence of changes of rows (k, v) of a keyed table: (key, before, after)."""
    state: dict[int, dict] = {}
    log = []
    for _ in range(length):
        key = rng.randrange(keys)
        before = state.get(key)
        after = None if before is not None and rng.random() < 0.3 else {"k": key, "v": rng.randrange(3)}
        log.append((key, before, after))
        if after is None:
            state.pop(key)
        else:
            state[key] = after
    return log


def _idiff(key: int, before: dict | None, after: dict | None) -> IDiff:
    provenance = Provenance.of(k=key)
    if before is None:
        return IDiff.insert(after, provenance)
    if after is None:
        return IDiff.delete(provenance, pre=before)
    return IDiff.update(provenance, pre=before, post=after)


@pytest.mark.parametrize("seed", range(40))
def test_condense_agrees_with_the_i_diff_fold_on_rows_of_a_keyed_table(seed):
    rng = random.Random(seed)
    log = _random_log(rng, keys=4, length=rng.randrange(1, 12))
    rows = {k: _idiff(k, before, after) for k, (before, after) in condense(log).items()
            if before is not None or after is not None}
    assert list(condense_idiffs(_idiff(*change) for change in log)) == list(rows.values())
