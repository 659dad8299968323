"""Commit metadata and the history of a table.

Commit metadata (``commit_metadata=``) is a flat ``dict`` of JSON values that
lands in the commit's ``commitInfo`` (delta-rs: as keys of it; delta-spark: as the JSON object
of its ``userMetadata``) and comes back from :func:`history` as keys of the commit;
keys should be prefixed (``"idivm.watermark"``) so they do not collide with
Delta's own commitInfo fields, and keys that do collide are rejected.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from idivm.storage.delta.table import PathLike, open_table, pin_of

_RESERVED_COMMIT_KEYS = frozenset({
    "timestamp", "operation", "operationParameters", "operationMetrics", "readVersion", "version",
    "isolationLevel", "isBlindAppend", "engineInfo", "clientVersion", "userMetadata", "userId",
    "userName", "job", "notebook", "clusterId", "txnId", "inCommitTimestamp",
})


#: the commits this process has made to Delta tables (see :func:`made`), and its lock (tables are
#: written from several threads at once)
_made = [0]
_MADE_LOCK = threading.Lock()


def made() -> int:
    """The commits this process has made to Delta tables so far, through any engine: what a
    maintenance run committed is the difference over the run (:mod:`idivm.exec.meter`)."""
    return _made[0]


def count(commits: int = 1) -> None:
    """Record ``commits`` commits just made (by the functions of this package that commit)."""
    with _MADE_LOCK:
        _made[0] += commits


def history(path: PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """Commits of a table, newest first: dicts with ``version``, ``timestamp``
    (ms since the epoch), ``operation``, ``operationMetrics``, ... and the
    keys of the commit's custom metadata (delta-rs's keys, or the keys of the JSON object of
    delta-spark's ``userMetadata``)."""
    return [_with_user_metadata(commit) for commit in open_table(path).history(limit)]


def commit_at(path: PathLike, version: int) -> dict[str, Any] | None:
    """The commit of ``version`` of the table at ``path`` as :func:`history` gives it (its
    ``commitInfo`` with the keys of its metadata), read from its log file alone; None when the
    log no longer holds that file (log cleanup) or it records no ``commitInfo``."""
    try:
        with open(Path(path, "_delta_log", f"{version:020d}.json"), encoding="utf-8") as f:
            for line in f:
                action = json.loads(line)
                if "commitInfo" in action:
                    return _with_user_metadata({**action["commitInfo"], "version": version})
    except (OSError, ValueError):
        return None
    return None


def _with_user_metadata(commit: dict[str, Any]) -> dict[str, Any]:
    """``commit`` with the keys of its ``userMetadata`` when that is a JSON object (delta-spark's
    form of commit metadata), those it has itself kept."""
    user = commit.get("userMetadata")
    if isinstance(user, str) and user.startswith("{"):
        try:
            keys = json.loads(user)
        except ValueError:
            return commit
        if isinstance(keys, dict):
            for k, v in keys.items():
                commit.setdefault(k, v)
    return commit


def data_version(path: PathLike) -> int:
    """The latest version of a table that changed its data: its latest version, less the
    ``OPTIMIZE`` commits after it (which rewrite files, not rows)."""
    dt = open_table(path)
    for limit in (1, None):  # the last commit, which is nearly always a data change, then all
        for commit in dt.history(limit):
            if commit.get("operation") != "OPTIMIZE":
                return int(commit["version"])
    return dt.version()


def _commit_properties(commit_metadata: Mapping[str, Any] | None, path: PathLike | None = None):
    """delta-rs's commit properties: the metadata, and no retry for a pinned table (see
    :func:`~idivm.storage.delta.table.pinned`)."""
    from deltalake import CommitProperties

    once = path is not None and pin_of(path) is not None
    if not commit_metadata and not once:
        return None
    return CommitProperties(custom_metadata=_checked(commit_metadata) if commit_metadata else None,
                            max_commit_retries=0 if once else None)


def _user_metadata(commit_metadata: Mapping[str, Any]) -> str:
    """Commit metadata as delta-spark's ``userMetadata``: a JSON object (see :func:`history`)."""
    return json.dumps(_checked(commit_metadata), sort_keys=True)


def _checked(commit_metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The commit metadata, after checking that no key collides with Delta's commitInfo fields."""
    clash = sorted(set(commit_metadata) & _RESERVED_COMMIT_KEYS)
    if clash:
        raise ValueError(f"commit metadata keys collide with Delta commitInfo fields: {', '.join(clash)}")
    return dict(commit_metadata)
