"""Debezium change events (JSON Lines) → :class:`~idivm.ingest.records.ChangeSet`.

One event per line, either bare::

    {"before": null, "after": {"id": 1, ...}, "op": "c", "source": {...}, "ts_ms": 1700000000000}

or in the Kafka Connect JSON envelope (``value.converter.schemas.enable=true``)::

    {"schema": {...}, "payload": {"before": ..., "after": ..., "op": "c", ...}}

Ops: ``c`` (create) and ``r`` (snapshot read) and ``u`` (update) upsert
``after``; ``d`` (delete) deletes the key of ``before``.  An update whose
``before`` has another key than its ``after`` also deletes the old key
(Debezium normally sends a key change as a delete and a create).  Tombstones
(a ``null`` line, an envelope with a ``null`` payload, or an empty line) are
skipped and counted.  ``source`` and ``ts_ms`` are not used: the order of the
lines is the order of the changes.

With the envelope, the schema's Debezium/Kafka Connect timestamp names
(``io.debezium.time.Timestamp``/``MicroTimestamp``/``NanoTimestamp``,
``org.apache.kafka.connect.data.Timestamp``) give the unit of integer
timestamps, and ``org.apache.kafka.connect.data.Decimal`` the scale of
decimals sent in ``decimal.handling.mode=precise`` (base64); other values
follow :mod:`idivm.ingest.records` (``ZonedTimestamp`` is ISO-8601 text
with an offset, ``Date`` an integer of days, the ``string`` and ``double``
decimal modes numbers, ``VariableScaleDecimal`` an object of scale and
base64 value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from idivm.ingest.records import DELETE, UPSERT, Change, ChangeSet, RowChecker, json_kind, read_records

if TYPE_CHECKING:
    from idivm.declared_schema import DeclaredSchema

OPS = {"c": "create", "r": "snapshot read", "u": "update", "d": "delete"}

DECIMAL = "org.apache.kafka.connect.data.Decimal"

_TIMESTAMP_UNITS = {
    "io.debezium.time.Timestamp": "ms",
    "org.apache.kafka.connect.data.Timestamp": "ms",
    "io.debezium.time.MicroTimestamp": "us",
    "io.debezium.time.NanoTimestamp": "ns",
}


def read_debezium(text: str, source: str, schema: pa.Schema, key: tuple[str, ...],
                  strict: bool = False, declared: "DeclaredSchema | None" = None) -> ChangeSet:
    """The changes of the Debezium events of file ``source`` (its ``text``), checked against the
    table's ``schema`` and ``key``, and its ``declared`` schema if it has one
    (:func:`~idivm.ingest.records.read_records`).

    A bad record (``file:line: problem``): malformed JSON, a line that is not an event, an
    unknown op, ``after`` missing for c/r/u or ``before`` for d, a row that is not an object, a
    missing or null key column, a value of the wrong type.
    """
    return read_records(text, source, schema, key, _event, blank_is_tombstone=True, strict=strict,
                        declared=declared)


def _event(value: Any, line: int, checker: RowChecker) -> list[Change] | None:
    units: Mapping[str, str] = {}
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise checker.error(line, f"expected a Debezium event (a JSON object), got {json_kind(value)}")
    if "payload" in value and "op" not in value:
        event = value["payload"]
        if event is None:
            return None
        if not isinstance(event, Mapping):
            raise checker.error(line, f"payload is {json_kind(event)}, not an event object")
        units = timestamp_units(value.get("schema"))
    else:
        event = value
    return _changes(event, line, checker, units)


def _changes(event: Mapping[str, Any], line: int, checker: RowChecker, units: Mapping[str, str]) -> list[Change]:
    if "op" not in event:
        raise checker.error(line, "not a Debezium event: no 'op' field")
    op = event["op"]
    if op not in OPS:
        known = ", ".join(f"{o} ({d})" for o, d in OPS.items())
        raise checker.error(line, f"unknown op {op!r}; known ops: {known}")
    before, after = event.get("before"), event.get("after")
    if op == "d":
        if before is None:
            raise checker.error(line, "delete event (op 'd') without 'before'")
        k, row = checker.key_of(before, line, "before", units)
        return [Change(DELETE, k, row, line)]
    if after is None:
        raise checker.error(line, f"{OPS[op]} event (op {op!r}) without 'after'")
    k, row = checker.row(after, line, "after", units)
    out = []
    if op == "u" and before is not None:
        old, old_row = checker.key_of(before, line, "before", units)
        if old != k:
            out.append(Change(DELETE, old, old_row, line))
    out.append(Change(UPSERT, k, row, line))
    return out


def timestamp_units(schema: Any) -> dict[str, str]:
    """Column → what the envelope schema's ``before``/``after`` fields say of it: the unit of
    its integer timestamps, or ``decimal:S`` for a Kafka Connect ``Decimal`` of scale S
    (:func:`~idivm.ingest.records.convert`)."""
    units: dict[str, str] = {}
    if not isinstance(schema, Mapping):
        return units
    for part in schema.get("fields") or ():
        if not isinstance(part, Mapping) or part.get("field") not in ("before", "after"):
            continue
        for f in part.get("fields") or ():
            if not isinstance(f, Mapping) or not isinstance(f.get("field"), str):
                continue
            if f.get("name") in _TIMESTAMP_UNITS:
                units[f["field"]] = _TIMESTAMP_UNITS[f["name"]]
            elif f.get("name") == DECIMAL:
                scale = (f.get("parameters") or {}).get("scale")
                if isinstance(scale, (int, str)) and str(scale).lstrip("-").isdigit():
                    units[f["field"]] = f"decimal:{int(scale)}"
    return units
