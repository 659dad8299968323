"""A Kafka topic as a feed: ``kafka://HOST:PORT/TOPIC`` (several brokers: ``HOST:PORT,HOST:PORT``).

Each message's value is one record (a Debezium event, bare or in its schema/payload envelope,
or a row); a message without a value (``null`` or empty) is a tombstone.  What is available
when ingest starts is read, partition by partition, and each partition's new messages are one
:class:`~idivm.ingest.feeds.Batch` (of at most :data:`MAX_MESSAGES`): one line per message,
named ``TOPIC[P]@FIRST-LAST``, of origin ``kafka:TOPIC:P:FIRST-LAST``.  A bad message is
quarantined with its position ``TOPIC[P]`` and offset; a value that is not one line of UTF-8
text is made one (``json.dumps`` of its JSON value) or, if it is not JSON, quarantined.

Exactly once, with the Delta log as the source of truth: where a partition is read from is
found in the history of the base table (the last offset of every ``kafka:TOPIC:P:A-B``
origin it took) and of its quarantine (batches taken by their quarantine commit alone, with
no valid record), never in the broker's committed offsets.  The consumer group
``idivm.<table>`` commits a batch's offsets only after the batch's Delta commit, so the
broker's offsets show the group's progress (lag) but are only a copy: a crash between the
two commits leaves them behind, and the next ingest reads on from the Delta log and sets them.
A batch whose records were quarantined but whose valid records were not applied (a crash
between the quarantine's commit and the table's) is read again over exactly the same offsets,
so that it keeps its origin and nothing is quarantined twice.

The topic is read with the pure-Python client ``kafka-python``, with partitions assigned (not
subscribed: no group rebalancing) and ``read_committed`` isolation.  A partition is read up to
its end offset noted at the start, or until no message arrives for :data:`IDLE_SECONDS`.
"""

from __future__ import annotations

import json
import re
import time
import warnings
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from idivm.errors import DataError
from idivm.ingest.feeds import KAFKA, Batch, origins
from idivm.ingest.records import Rejected

SCHEME = KAFKA
DEFAULT_PORT = 9092
#: at most this many messages in one batch (a partition with more new messages gives several)
MAX_MESSAGES = 100_000
#: stop reading a partition when no message arrives for this long before its end offset
IDLE_SECONDS = 5.0
#: how long to try to reach the brokers
CONNECT_MS = 10_000
#: the line of a message that cannot be one line of JSON: invalid JSON to every reader, it
#: is quarantined with the message's own reason and text (:attr:`Batch.rejected`)
PLACEHOLDER = "\x00"

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic and the brokers to ask for it."""

    servers: tuple[str, ...]
    name: str

    def partition(self, p: int) -> str:
        """``topic[0]``: how positions and batch names name partition ``p``."""
        return f"{self.name}[{p}]"


def is_kafka(source: Any) -> bool:
    return isinstance(source, str) and source.startswith(SCHEME)


def parse(source: str) -> Topic:
    """The topic of ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC`` (the port defaults to 9092)."""
    servers, slash, name = source[len(SCHEME):].partition("/")
    usage = f"{source}: expected kafka://HOST:PORT/TOPIC"
    if not slash or not servers:
        raise DataError(usage)
    if not _TOPIC.fullmatch(name):
        raise DataError(f"{usage} (a topic name is 1 to 249 letters, digits, '.', '_' and '-'), got {name!r}")
    out = []
    for server in servers.split(","):
        host, colon, port = server.rpartition(":") if not server.endswith("]") else (server, "", "")
        if not colon:
            host, port = server, str(DEFAULT_PORT)
        if not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
            raise DataError(f"{usage}: {server!r} is not HOST:PORT")
        out.append(f"{host}:{int(port)}")
    return Topic(tuple(out), name)


def origin(topic: str, partition: int, first: int, last: int) -> str:
    """The origin of the batch of offsets ``first``..``last`` (both included) of a partition."""
    return f"kafka:{topic}:{partition}:{first}-{last}"


def parse_origin(value: Any) -> tuple[str, int, int, int] | None:
    """(topic, partition, first, last) of a Kafka batch's origin, None for any other origin."""
    if not isinstance(value, str) or not value.startswith("kafka:"):
        return None
    try:
        topic, partition, offsets = value[len("kafka:"):].rsplit(":", 2)
        first, last = offsets.split("-")
        return topic, int(partition), int(first), int(last)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Taken:
    """What the Delta log says of a topic: per partition, the offset to read next (after
    the last one taken), and the ranges ``first: last`` whose records were quarantined but
    whose valid records were not applied (yet)."""

    next: dict[int, int]
    pending: dict[int, dict[int, int]]


def taken(topic: str, table_path: Path, quarantine_path: Path | None = None) -> Taken:
    """What of ``topic`` the base table at ``table_path`` took, with its quarantine's batches
    that had no valid record (see :func:`idivm.ingest.ingest_batch`)."""
    nexts: dict[int, int] = {}
    pending: dict[int, dict[int, int]] = {}

    def took(p: int, last: int) -> None:
        nexts[p] = max(nexts.get(p, 0), last + 1)

    for value in origins(table_path):
        o = parse_origin(value)
        if o is not None and o[0] == topic:
            took(o[1], o[3])
    for value, (_, valid) in origins(quarantine_path).items():
        o = parse_origin(value)
        if o is None or o[0] != topic:
            continue
        if valid == 0:
            took(o[1], o[3])
        else:
            pending.setdefault(o[1], {})[o[2]] = o[3]
    return Taken(nexts, pending)


def batches(source: str, table: str, table_path: Path, quarantine_path: Path | None = None) -> Iterator[Batch]:
    """The batches of the messages of topic ``source`` not yet taken into ``table`` (at
    ``table_path``, its quarantine at ``quarantine_path``), read by consumer group
    ``idivm.<table>``.  Each batch's :attr:`~Batch.done` commits its offsets to the group:
    call it after the batch's Delta commit."""
    topic = parse(source)
    consumer = _consumer(source, topic, f"idivm.{table}")
    from kafka.errors import KafkaError

    try:
        try:
            partitions = _partitions(source, consumer, topic)
            tps = [_partition(topic.name, p) for p in partitions]
            begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        except KafkaError as e:
            raise DataError(f"{source}: {e}") from None
        known = taken(topic.name, Path(table_path), quarantine_path and Path(quarantine_path))
        for tp in tps:
            start = known.next.get(tp.partition, 0)
            if start < begin[tp]:
                if tp.partition in known.next:
                    warnings.warn(f"{source}: messages {start}..{begin[tp] - 1} of {topic.partition(tp.partition)} "
                                  f"were deleted from the topic before they were ingested into {table}",
                                  stacklevel=2)
                start = begin[tp]
            stop = end[tp]
            if start >= stop:
                _catch_up(source, consumer, tp, start)
                continue
            again = known.pending.get(tp.partition, {}).get(start)
            if again is not None:  # quarantined, not applied: the same offsets again, then the rest
                start = 1 + (yield from _read(source, consumer, topic, tp, start, min(stop, again + 1)))
            if start < stop:
                yield from _read(source, consumer, topic, tp, start, stop)
    finally:
        consumer.close(autocommit=False)


def commit_offset(consumer, tp, offset: int) -> None:
    """Commit ``offset`` (the next one to read) of partition ``tp`` for the consumer's group."""
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    extra = (-1,) if len(OffsetAndMetadata._fields) > 2 else ()  # leader_epoch, since kafka-python 2.1
    try:
        consumer.commit({tp: OffsetAndMetadata(offset, "", *extra)})
    except KafkaError as e:
        raise DataError(f"{tp.topic}[{tp.partition}]: offsets up to {offset - 1} were ingested, but committing "
                        f"them for consumer group {consumer.config['group_id']} failed ({e}); the next "
                        "ingest commits them") from None


def _catch_up(source: str, consumer, tp, offset: int) -> None:
    """Set the group's offset of ``tp`` to ``offset`` (all before it taken) if it is elsewhere,
    as after a crash between a Delta commit and the offsets' commit."""
    from kafka.errors import KafkaError

    try:
        committed = consumer.committed(tp)
    except KafkaError as e:
        raise DataError(f"{source}: {e}") from None
    if committed != offset and (committed is not None or offset > 0):
        commit_offset(consumer, tp, offset)


def _consumer(source: str, topic: Topic, group: str):
    try:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError
    except ImportError:
        raise DataError(f"{source}: reading Kafka needs the package kafka-python (pip install kafka-python)") from None
    config: dict[str, Any] = {"bootstrap_servers": list(topic.servers), "group_id": group, "client_id": group,
                              "enable_auto_commit": False, "auto_offset_reset": "earliest"}
    optional = {"isolation_level": "read_committed", "allow_auto_create_topics": False,
                "bootstrap_timeout_ms": CONNECT_MS, "api_version_auto_timeout_ms": CONNECT_MS}
    config.update({k: v for k, v in optional.items() if k in KafkaConsumer.DEFAULT_CONFIG})
    try:
        return KafkaConsumer(**config)
    except KafkaError as e:
        raise DataError(f"{source}: cannot reach Kafka at {','.join(topic.servers)} ({e})") from None


def _partitions(source: str, consumer, topic: Topic) -> list[int]:
    partitions = consumer.partitions_for_topic(topic.name)
    if not partitions:
        raise DataError(f"{source}: no topic {topic.name!r} on {','.join(topic.servers)}")
    return sorted(partitions)


def _partition(topic: str, p: int):
    from kafka import TopicPartition

    return TopicPartition(topic, p)


def _read(source: str, consumer, topic: Topic, tp, start: int, stop: int) -> Generator[Batch, None, int]:
    """The batches of offsets ``start``.. of ``tp``, up to ``stop`` (excluded) or until no
    message arrives for :data:`IDLE_SECONDS`; returns the last offset read."""
    from kafka.errors import KafkaError

    consumer.assign([tp])
    consumer.seek(tp, start)
    lines: list[str] = []
    offsets: list[int] = []
    rejected: list[Rejected] = []
    first, last = start, start - 1
    heard = time.monotonic()
    while True:
        try:
            position = consumer.position(tp)
            if position >= stop:
                last = stop - 1  # offsets without a message (compaction, transaction markers) are taken too
                break
            records = consumer.poll(timeout_ms=500, max_records=MAX_MESSAGES - len(lines)).get(tp, [])
        except KafkaError as e:
            raise DataError(f"{source}: {e}") from None
        if not records:
            if time.monotonic() - heard > IDLE_SECONDS:
                break
            continue
        heard = time.monotonic()
        for m in records:
            if m.offset >= stop:
                break
            line, bad = _line(m.value)
            lines.append(line)
            offsets.append(m.offset)
            if bad is not None:
                rejected.append(Rejected(len(lines), *bad))
            last = m.offset
        if len(lines) >= MAX_MESSAGES:
            yield _batch(consumer, topic, tp, first, last, lines, offsets, rejected)
            first, lines, offsets, rejected = last + 1, [], [], []
            consumer.seek(tp, first)
    if last >= first:
        yield _batch(consumer, topic, tp, first, last, lines, offsets, rejected)
    return last


def _batch(consumer, topic: Topic, tp, first: int, last: int, lines: list[str], offsets: list[int],
           rejected: list[Rejected]) -> Batch:
    return Batch(f"{topic.partition(tp.partition)}@{first}-{last}", "".join(f"{line}\n" for line in lines),
                 origin(topic.name, tp.partition, first, last), place=topic.partition(tp.partition),
                 offsets=tuple(offsets), rejected=tuple(rejected),
                 done=lambda: commit_offset(consumer, tp, last + 1))


def _line(value: bytes | None) -> tuple[str, tuple[str, str] | None]:
    """A message's value as one line of text (empty: a tombstone), or the placeholder line and
    (reason, text) when it cannot be one."""
    if not value:
        return "", None
    try:
        text = value.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        return PLACEHOLDER, (f"not UTF-8 text ({e.reason} at byte {e.start})", value.decode("utf-8", "backslashreplace"))
    if not text.strip():
        return "", None
    if text.splitlines() == [text]:
        return text, None
    try:
        return json.dumps(json.loads(text)), None  # ASCII, control characters escaped: one line
    except json.JSONDecodeError as e:
        return PLACEHOLDER, (f"invalid JSON: {e.msg} (line {e.lineno} column {e.colno} of the message)", text)
    except RecursionError:
        return PLACEHOLDER, ("invalid JSON: nested too deeply", text)
