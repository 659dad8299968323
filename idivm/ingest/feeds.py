"""Where changes come from, what was already taken, and where bad records go.

A feed is read as batches (:class:`Batch`): a file is one batch, a directory one batch per
regular file in name order (hidden files left out), ``-`` the whole of standard input, a
Kafka topic ``kafka://HOST:PORT/TOPIC`` one batch per partition of the messages available
now (:mod:`~idivm.ingest.kafka`).  A file's origin is the SHA-256 of its bytes, a Kafka
batch's its topic, partition and offsets (``kafka:TOPIC:P:FIRST-LAST``).  Each commit of a
batch to its base table carries the origin in its metadata (``idivm.origin``), so ingesting
the same bytes again (the same file twice, a directory whose first files were taken before a
crash, a message delivered twice) is found in the table's own history and skipped: the Delta
log, nothing beside it, says what was ingested (and where a topic is to be read from).

Bad records are not dropped and do not stop their batch: they go to the table's quarantine
(:class:`Quarantine`), a Delta table ``<wh>/quarantine/<table>`` of one row per record
(its text as it was, its position ``file:line`` or, for a Kafka message, ``TOPIC[P]`` and
its offset, the reason, the format it was read in, the batch's origin), committed *before*
the batch's valid records, so that a crash between the two commits leaves the records
quarantined and the batch not yet taken (the next ingest of it applies the valid records and
does not quarantine them twice).  A batch with no valid record is taken by its quarantine
commit alone (``idivm.valid`` 0 in its metadata).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from idivm.errors import DataError
from idivm.ingest.records import Rejected
from idivm.storage import delta

STDIN = "-"
#: the scheme of a Kafka topic as a source (:mod:`idivm.ingest.kafka`)
KAFKA = "kafka://"
ORIGIN = "idivm.origin"
VALID = "idivm.valid"


@dataclass(frozen=True, slots=True)
class Batch:
    """The text of one file (or of standard input), its name in messages and its origin.

    A batch of messages (Kafka) has one line per message and says where each came from:
    ``offsets`` (line ``n`` of ``text`` is message ``offsets[n - 1]`` of ``place``, e.g.
    ``topic[0]``), the messages that could not be made a line of JSON (``rejected``: each
    has a placeholder line that no reader takes, and is quarantined with this reason and its
    text as it was), and what to do once the batch is taken (``done``: commit the consumer's
    offsets)."""

    name: str
    text: str
    origin: str
    place: str | None = None
    offsets: tuple[int, ...] | None = None
    rejected: tuple[Rejected, ...] = ()
    done: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def where(self, line: int) -> tuple[str, int]:
        """(source, line) of line ``line`` of the text, as the quarantine records it: the file's
        name and the line, or the topic's partition (``topic[0]``) and the message's offset."""
        if self.offsets is None:
            return self.name, line
        return self.place or self.name, self.offsets[line - 1]

    def position(self, line: int) -> str:
        """Line ``line`` of the text in messages: ``file:line`` or ``topic[0]@offset``."""
        if self.offsets is None:
            return f"{self.name}:{line}"
        source, offset = self.where(line)
        return f"{source}@{offset}"

    def relocated(self, message: str) -> str:
        """``message`` (about this batch's text, naming ``line N`` or ``lines N, M``) naming the
        messages' positions instead, for a batch of messages."""
        if self.offsets is None:
            return message

        def positions(m: re.Match) -> str:
            return ", ".join(self.position(int(n)) for n in m.group(2).split(", "))

        return re.sub(r"\b(lines?) (\d+(?:, \d+)*)", positions, message)


def origin_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def batches(source: str | Path) -> Iterator[Batch]:
    """The batches of ``source``: a file, a directory (its files in name order) or ``-``.
    (A Kafka topic, ``kafka://HOST:PORT/TOPIC``, is read for a table: :func:`idivm.ingest.kafka.batches`.)"""
    if isinstance(source, str) and source.startswith(KAFKA):
        raise DataError(f"{source}: a Kafka topic is read to be ingested into a table (idivm ingest TABLE {source}), "
                        "not as a file")
    if str(source) == STDIN:
        yield _batch("<stdin>", sys.stdin.buffer.read())
        return
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        for f in files:
            yield _batch(f.name, _read(f))
        return
    yield _batch(path.name, _read(path))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"cannot read {str(path)!r}: no such file or directory") from None
    except OSError as e:
        raise DataError(f"cannot read {str(path)!r}: {e.strerror or e}") from None


def _batch(name: str, data: bytes) -> Batch:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{name}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return Batch(name, text, origin_of(data))


#: the origins found in a table's history so far: path -> (the version read up to, origin ->
#: (version, valid records) of the first commit carrying it); each look-up reads only the
#: commits made since the last one
_SEEN: dict[str, tuple[int, dict[str, tuple[int, int | None]]]] = {}


def origins(path: Path | None) -> dict[str, tuple[int, int | None]]:
    """The origins of the commits of the table at ``path`` (none if there is no table): origin
    -> the version of the first commit carrying it and, for a quarantine's commit, how many
    valid records its batch had."""
    if path is None or not delta.exists(path):
        return {}
    key, latest = str(Path(path).resolve()), delta.version(path)
    read, found = _SEEN.get(key, (-1, {}))
    if latest < read:  # the table was made again
        read, found = -1, {}
    if latest > read:
        for c in reversed(delta.history(path, latest - read)):
            if ORIGIN in c and int(c["version"]) > read:
                valid = c.get(VALID)
                found.setdefault(c[ORIGIN], (int(c["version"]), None if valid is None else int(valid)))
        _SEEN[key] = (latest, found)
    return found


def taken_in(path: Path, origin: str) -> dict[str, Any] | None:
    """The commit of the table at ``path`` that took the batch ``origin``, if any: its
    ``version`` and, for a quarantine's commit, how many valid records its batch had."""
    found = origins(path).get(origin)
    if found is None:
        return None
    return {"version": found[0], **({VALID: found[1]} if found[1] is not None else {})}


QUARANTINE_SCHEMA = pa.schema([
    ("origin", pa.string()),
    ("source", pa.string()),
    ("line", pa.int64()),
    ("format", pa.string()),
    ("reason", pa.string()),
    ("record", pa.string()),
    ("quarantined_at", pa.timestamp("us", tz="UTC")),
])


class Quarantine:
    """The quarantined records of one base table (a Delta table, created on first need)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def rows(self) -> pa.Table:
        """Every quarantined record, in the order they were quarantined."""
        if not delta.exists(self.path):
            return QUARANTINE_SCHEMA.empty_table()
        rows = delta.read_arrow(self.path)
        return rows.sort_by([("quarantined_at", "ascending"), ("origin", "ascending"), ("line", "ascending")])

    def version(self) -> int | None:
        return delta.version(self.path) if delta.exists(self.path) else None

    def add(self, batch: Batch, rejected: Sequence[Rejected], format: str, valid: int) -> None:
        """Quarantine the ``rejected`` records of ``batch`` (once: not again when its origin is
        there already), recording how many ``valid`` records the batch has."""
        if taken_in(self.path, batch.origin) is not None:
            return
        now = dt.datetime.now(dt.timezone.utc)
        rows = pa.Table.from_pylist(
            [{"origin": batch.origin, "source": source, "line": line, "format": format, "reason": r.problem,
              "record": r.text, "quarantined_at": now}
             for r in rejected for source, line in [batch.where(r.line)]], schema=QUARANTINE_SCHEMA)
        delta.write_arrow(self.path, rows, mode="append",
                          commit_metadata={"idivm.operation": "quarantine", ORIGIN: batch.origin,
                                           "idivm.source": batch.name, VALID: valid})

    def replace(self, rows: pa.Table, metadata: dict[str, Any]) -> None:
        """Keep only ``rows`` (the records a retry left), in one commit."""
        delta.write_arrow(self.path, rows.cast(QUARANTINE_SCHEMA), mode="overwrite", commit_metadata=metadata)
