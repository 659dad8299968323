"""The net change of each key of a batch of changes (thesis §2.2, §2.5: "combines multiple
modifications to the same tuple to a single modification").

A batch may change one row several times: an ingest file may upsert a key and delete it, a
run reads every commit of a base table since the view's watermark.  :func:`condense` is the
one fold of such a sequence, used by ingest (:func:`idivm.ingest.apply.condense`, whose
MERGE takes one source row per key) and by maintenance (:func:`condense_feed`, the effective
changes a run turns into base i-diffs): per key, the row before its first change and the
row after its last, None where there is no row.  So an insert then an update is an insert of
the updated row, an insert then a delete is (None, None): nothing, a delete then an insert
an update, and updates fold into one with the first pre and the last post.

:func:`idivm.diffs.model.effective.condense` is the same fold over the i-diff value model of
§2.12 (nested i-diffs, provenance), the reference the tests check the thesis' examples with.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

Before = TypeVar("Before")
After = TypeVar("After")

#: the order of the change types within one commit of a change data feed: an update's row
#: before first, its row after last
_CHANGE_ORDER = {"update_preimage": 0, "delete": 1, "insert": 2, "update_postimage": 3}


def condense(changes: Iterable[tuple[Hashable, Before, After]]) -> dict[Hashable, tuple[Before, After]]:
    """Key -> (what was there before the key's first change, what its last change leaves),
    in the order keys first appear; ``changes`` are (key, before, after) in the order they
    happened."""
    net: dict[Hashable, tuple[Any, Any]] = {}
    for key, before, after in changes:
        first = net.get(key)
        net[key] = (before if first is None else first[0], after)
    return net


def condense_feed(feed: Any, key: Sequence[str]) -> dict[tuple, tuple[Mapping | None, Mapping | None]]:
    """:func:`condense` of a Delta change data feed (an Arrow table of the table's columns and
    ``_change_type``, ``_commit_version``, ...): key values -> (the row at the start, the row
    at the end), None where the row does not exist."""
    rows = feed.to_pylist()
    rows.sort(key=lambda r: (r["_commit_version"], _CHANGE_ORDER.get(r["_change_type"], len(_CHANGE_ORDER))))
    return condense(_feed_change(r, key) for r in rows)


def _feed_change(row: dict, key: Sequence[str]) -> tuple[tuple, dict | None, dict | None]:
    """(key, before, after) of one row of a change data feed.  An update's row before is the
    row as it is until its row after (the next change of the key) replaces it."""
    kind = row["_change_type"]
    data = {n: v for n, v in row.items() if not n.startswith("_change_type") and not n.startswith("_commit_")}
    before = data if kind in ("delete", "update_preimage") else None
    after = data if kind in ("insert", "update_preimage", "update_postimage") else None
    return tuple(row[c] for c in key), before, after
