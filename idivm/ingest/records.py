"""Changes to a base table, read from a file, checked against the table's schema.

Input: JSON values decoded from one line of a change file.  Output:
:class:`Change` values (an upsert of a whole row, or a delete by key) whose
rows hold Python values that ``pyarrow`` converts to the table's Arrow types
without loss.  Every problem of a record is a one-line :class:`RecordError`
that starts with ``file:line:``.  :func:`read_records` reads a whole file
before anything is applied: its bad records come out as :class:`Rejected`
(which ingest quarantines), or, read strictly, the first one is raised; a
column the table does not have (schema drift) is always an error of the
whole file, naming every such column (:class:`SchemaDriftError`, which also carries
the values of those columns, so that ``ingest --evolve`` can infer their types).

Value rules (JSON value → column type): ``null`` fits every type; booleans
only ``bool``; integers fit integer columns of their width, floating point
and decimal columns; other numbers fit floating point and decimal columns
(decimals also accept numeric strings); strings fit ``string``, ``binary``
(base64, as Debezium sends bytes), ``date`` (ISO ``YYYY-MM-DD``) and
``timestamp`` (ISO-8601; without an offset a ``timestamp`` with a zone reads
it as UTC); ``date`` also takes an integer number of days since 1970-01-01
(Debezium's ``io.debezium.time.Date``); arrays fit lists (each element
checked); objects fit structs (each field checked, absent fields are null,
unknown fields are errors) and maps.

A table with a declared schema (:mod:`idivm.declared_schema`) is checked the same way, except
for fields the schema does not declare: a record that has one in a closed record is bad
(rejected, never schema drift), while those of open records are left out of the row and
counted (:attr:`ChangeSet.undeclared`).  A JSON Schema is also checked as a whole against each
whole row (``required``, ``enum``, ``minimum``, ...).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from idivm.algebra.expressions import ABSENT
from idivm.errors import DataError
from idivm.types import UNION_PREFIX

if TYPE_CHECKING:
    from idivm.declared_schema import DeclaredSchema

UPSERT = "upsert"
DELETE = "delete"
#: a change of some attributes of a row (an i-diff's update by path), made an upsert of the whole
#: row once the row is read (:func:`idivm.ingest.idiff.resolve_patches`)
PATCH = "patch"

_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class Change:
    """One change of a base table, from line ``line`` of its file.

    An upsert carries the whole new row (every table column; absent ones are
    null); a delete carries only the key columns, and so does a patch, whose
    ``patch`` says what changes in the row.  ``key`` is the row's key as a
    hashable tuple, in the order of the table's key columns.
    """

    op: Literal["upsert", "delete", "patch"]
    key: tuple
    row: Mapping[str, Any]
    line: int
    patch: Any = None

    def __post_init__(self):
        if self.op not in (UPSERT, DELETE, PATCH):
            raise ValueError(f"unknown change op {self.op!r}")
        if (self.op == PATCH) != (self.patch is not None):
            raise ValueError("a patch, and only a patch, carries what it changes")


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record that could not be read: its line, why, and its text as it was."""

    line: int
    problem: str
    text: str


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """The changes of one file, in file order; how many change records they came from
    (a Debezium update that changes the key gives two changes); how many records
    were skipped (tombstones); the records rejected, in file order; the fields of open
    records a declared schema does not declare, which were not stored: (path, how many
    records had it), in order of first appearance."""

    source: str
    changes: tuple[Change, ...]
    records: int
    skipped: int = 0
    rejected: tuple[Rejected, ...] = ()
    undeclared: tuple[tuple[str, int], ...] = ()


class RecordError(DataError):
    """A bad record: ``source:line: problem``."""

    def __init__(self, source: str, line: int, problem: str):
        super().__init__(f"{source}:{line}: {problem}")
        self.line, self.problem = line, problem


class SchemaDrift(RecordError):
    """A record with columns the table does not have, and their values in it."""

    def __init__(self, source: str, line: int, problem: str, values: Mapping[str, Any]):
        super().__init__(source, line, problem)
        self.columns = list(values)
        self.values = values


class SchemaDriftError(DataError):
    """The records of a file have columns the table does not have: each with the line it first
    appears on (``columns``) and its values in the file's records (``values``)."""

    def __init__(self, message: str, columns: Mapping[str, int], values: Mapping[str, list]):
        super().__init__(message)
        self.columns, self.values = dict(columns), dict(values)


#: what a reader makes of one record (a JSON value, never a blank line): its changes, or None
#: for a tombstone; bad records raise :class:`RecordError` (via ``checker.error``)
RecordReader = Callable[[Any, int, "RowChecker"], "list[Change] | None"]


def read_records(text: str, source: str, schema: pa.Schema, key: tuple[str, ...], record: RecordReader,
                 blank_is_tombstone: bool = False, strict: bool = False,
                 declared: "DeclaredSchema | None" = None) -> ChangeSet:
    """The changes of the JSON Lines ``text`` of file ``source``, each record read by ``record``.

    A malformed line or a bad record is :class:`Rejected` (``strict``: raised, the first one);
    columns the table does not have are a :class:`DataError` naming each of them with the line
    it first appears on (for a table with a ``declared`` schema: see the module docstring).
    Blank lines are ignored, or counted as tombstones.
    """
    checker = RowChecker(schema, key, source, declared)
    changes: list[Change] = []
    rejected: list[Rejected] = []
    drift: dict[str, int] = {}
    drift_values: dict[str, list] = {}
    records = skipped = 0
    for n, line, value in json_lines(text, source):
        if line is None:
            skipped += blank_is_tombstone
            continue
        try:
            if isinstance(value, BadJson):
                raise checker.error(n, value.problem)
            out = record(value, n, checker)
        except SchemaDrift as e:
            if strict:
                raise
            for c, v in e.values.items():
                drift.setdefault(c, n)
                drift_values.setdefault(c, []).append(v)
            continue
        except RecordError as e:
            if strict:
                raise
            rejected.append(Rejected(n, e.problem, line))
            continue
        if out is None:
            skipped += 1
        else:
            changes.extend(out)
            records += 1
    if drift:
        named = ", ".join(f"{c!r} (line {n})" for c, n in drift.items())
        raise SchemaDriftError(f"{source}: column{'s' if len(drift) > 1 else ''} {named} not in the table "
                               f"(columns: {', '.join(schema.names)}); nothing was applied "
                               "(ingest --evolve adds them)", drift, drift_values)
    return ChangeSet(source, tuple(changes), records, skipped, tuple(rejected), checker.undeclared_counts())


class RowChecker:
    """Checks rows of one file against a table's Arrow schema and key, and its ``declared``
    schema if it has one; errors name ``file:line``.  Counts the undeclared fields of the rows
    it accepts (:meth:`undeclared_counts`)."""

    def __init__(self, schema: pa.Schema, key: tuple[str, ...], source: str,
                 declared: "DeclaredSchema | None" = None):
        missing = [k for k in key if k not in schema.names]
        if missing:
            raise DataError(f"key column(s) {', '.join(missing)} not in the table's schema")
        self.schema = schema
        self.key = tuple(key)
        self.source = source
        #: paths of the records that accept undeclared fields; None: no declared schema
        self.open_records = declared.open_records if declared is not None else None
        self._record_problem = declared.record_problem() if declared is not None else None
        self._undeclared: dict[str, int] = {}

    def undeclared_counts(self) -> tuple[tuple[str, int], ...]:
        """(field path, rows) of the undeclared fields of open records in the rows accepted so far."""
        return tuple(self._undeclared.items())

    def error(self, line: int, problem: str) -> RecordError:
        return RecordError(self.source, line, problem)

    def row(self, value: Any, line: int, what: str = "row", timestamp_units: Mapping[str, str] | None = None
            ) -> tuple[tuple, dict[str, Any]]:
        """(key, row) of a whole row: every column of the table, absent ones null (and, in a
        table that lists the fields its rows lack, :data:`~idivm.algebra.expressions.ABSENT`,
        listed there: MISSING)."""
        fields = self._fields(value, line, what)
        if self._record_problem is not None:
            problem = self._record_problem(fields)
            if problem:
                raise self.error(line, f"{what} {problem}")
        undeclared = [k for k in fields if k not in self.schema.names]
        converted = {f.name: self.value(fields.get(f.name), f.type, f.name, line, what,
                                        (timestamp_units or {}).get(f.name), undeclared) for f in self.schema}
        if ABSENT in converted:  # a table whose rows may lack fields: those this one lacks are MISSING
            converted[ABSENT] = [n for n in self.schema.names if n not in fields and n != ABSENT] or None
        key = self._key(fields, converted, line, what)
        for path in dict.fromkeys(undeclared):
            self._undeclared[path] = self._undeclared.get(path, 0) + 1
        return key, converted

    def key_of(self, value: Any, line: int, what: str = "row", timestamp_units: Mapping[str, str] | None = None
               ) -> tuple[tuple, dict[str, Any]]:
        """(key, key columns) of a row that only has to identify one: non-key columns
        must be table columns but are otherwise ignored."""
        fields = self._fields(value, line, what)
        converted = {k: self.value(fields.get(k), self.schema.field(k).type, k, line, what,
                                    (timestamp_units or {}).get(k)) for k in self.key}
        return self._key(fields, converted, line, what), converted

    def _fields(self, value: Any, line: int, what: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(line, f"{what} is {json_kind(value)}, not an object")
        unknown = {k: v for k, v in value.items() if k not in self.schema.names}
        if unknown and self.open_records is not None:
            if "" in self.open_records:
                return value
            raise self.error(line, f"{what} has field {next(iter(unknown))!r}, which the closed schema does not "
                                   f"declare (fields: {', '.join(self.schema.names)})")
        if unknown:
            raise SchemaDrift(self.source, line, f"{what} has column {next(iter(unknown))!r}, which table columns "
                                                 f"({', '.join(self.schema.names)}) do not include", unknown)
        return value

    def _key(self, given: Mapping[str, Any], row: Mapping[str, Any], line: int, what: str) -> tuple:
        for k in self.key:
            if row.get(k) is None:
                absent = "lacks key column" if k not in given else "has null in key column"
                raise self.error(line, f"{what} {absent} {k!r}")
        try:
            return tuple(_hashable(row[k]) for k in self.key)
        except TypeError:
            raise self.error(line, f"{what}: key columns must hold scalar values") from None

    def value(self, v: Any, t: pa.DataType, path: str, line: int, what: str, unit: str | None = None,
              undeclared: list[str] | None = None) -> Any:
        """JSON value ``v`` converted to type ``t`` of column ``path`` (:func:`convert`); a bad one is
        an error of ``line`` whose message starts with ``what``.  The undeclared fields of open
        records of a declared schema are appended to ``undeclared``."""
        try:
            return convert(v, t, path, unit, self.open_records, undeclared)
        except _Mismatch as e:
            raise self.error(line, f"{what}: {e}") from None


class _Mismatch(Exception):
    """A JSON value that does not fit a column type (message names the column path)."""


def convert(v: Any, t: pa.DataType, path: str, unit: str | None = None,
            open_records: frozenset[str] | None = None, undeclared: list[str] | None = None) -> Any:
    """The Python value for JSON value ``v`` in a column of Arrow type ``t`` (see the module docstring).

    ``open_records``: the paths of the records of a declared schema that accept undeclared
    fields (None: no declared schema, every struct is closed); the paths of the undeclared
    fields met in them are appended to ``undeclared``.

    ``unit`` is what the Debezium envelope's schema says of the column: ``ms``/``us``/``ns``
    allow an integer for a timestamp, counted in that unit since the epoch (Debezium's
    ``Timestamp``/``MicroTimestamp``/``NanoTimestamp``); ``decimal:S`` reads a string as
    Kafka Connect's ``Decimal`` of scale S (the unscaled value, base64 of its big-endian two's
    complement).  Decimal and floating point columns also take Debezium's
    ``VariableScaleDecimal`` (``{"scale": S, "value": <base64>}``), and decimal columns a
    base64 string that is not a number as a ``Decimal`` of the column's own scale.
    """
    if v is None:
        return None

    def bad(expected: str) -> _Mismatch:
        return _Mismatch(f"column '{path}' ({t}) expects {expected}, got {json_kind(v)} {_short(v)}")

    if (pa.types.is_decimal(t) or pa.types.is_floating(t)) and not isinstance(v, (bool, int, float)):
        encoded = _encoded_decimal(v, unit, t, bad)
        if encoded is not None:
            v = float(encoded) if pa.types.is_floating(t) else str(encoded)

    if pa.types.is_boolean(t):
        if isinstance(v, bool):
            return v
        raise bad("a boolean")
    if pa.types.is_integer(t):
        if isinstance(v, int) and not isinstance(v, bool):
            bits = t.bit_width
            lo, hi = (0, 2 ** bits - 1) if pa.types.is_unsigned_integer(t) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            if lo <= v <= hi:
                return v
            raise bad(f"an integer in {lo}..{hi}")
        if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
            return int(v)
        raise bad("an integer")
    if pa.types.is_floating(t):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        raise bad("a number")
    if pa.types.is_decimal(t):
        if isinstance(v, (int, float, str)) and not isinstance(v, bool):
            try:
                d = decimal.Decimal(str(v))
            except decimal.InvalidOperation:
                raise bad("a decimal number") from None
            if not d.is_finite():
                raise bad("a finite decimal number")
            q = d.quantize(decimal.Decimal(1).scaleb(-t.scale), rounding=decimal.ROUND_HALF_EVEN)
            if q != d or len(q.as_tuple().digits) > t.precision:
                raise bad(f"a decimal with at most {t.precision} digits, {t.scale} after the point")
            return q
        raise bad("a decimal number")
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        if isinstance(v, str):
            return v
        raise bad("a string")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        if isinstance(v, str):
            try:
                return base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError):
                raise bad("base64 text") from None
        raise bad("base64 text")
    if pa.types.is_date(t):
        if isinstance(v, int) and not isinstance(v, bool):
            try:
                return _EPOCH + dt.timedelta(days=v)
            except OverflowError:
                raise bad("a date") from None
        if isinstance(v, str):
            try:
                return dt.date.fromisoformat(v)
            except ValueError:
                raise bad("a date YYYY-MM-DD") from None
        raise bad("a date YYYY-MM-DD")
    if pa.types.is_timestamp(t):
        return _timestamp(v, t, unit, bad)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) \
            or pa.types.is_fixed_size_list(t):
        if isinstance(v, list):
            return [convert(e, t.value_type, f"{path}[]", None, open_records, undeclared) for e in v]
        raise bad("an array")
    tags = [t.field(i).name for i in range(t.num_fields)] if pa.types.is_struct(t) else []
    if tags and all(n.startswith(UNION_PREFIX) for n in tags):  # a tagged union (types.UnionType)
        kind = union_kind(v)
        if kind == "int" and UNION_PREFIX + "int" not in tags:
            kind = "double"  # as an integer goes into a column of doubles
        if kind is None or UNION_PREFIX + kind not in tags:
            held = ", ".join(n[len(UNION_PREFIX):] for n in tags)
            raise _Mismatch(f"column '{path}' holds values of the types {held} only, got {json_kind(v)} {_short(v)}")
        return {n: convert(v, t.field(n).type, path, unit, open_records, undeclared) if n == UNION_PREFIX + kind
                else None for n in tags}
    if pa.types.is_struct(t):
        if not isinstance(v, Mapping):
            raise bad("an object")
        names = [t.field(i).name for i in range(t.num_fields)]
        unknown = [k for k in v if k not in names]
        if unknown and open_records is not None and path in open_records:
            if undeclared is not None:
                undeclared.extend(f"{path}.{k}" for k in unknown)
        elif unknown and open_records is not None:
            raise _Mismatch(f"closed record '{path}' has field {unknown[0]!r}, which the schema does not declare "
                            f"(fields: {', '.join(names)})")
        elif unknown:
            raise _Mismatch(f"column '{path}' has no field {unknown[0]!r} (fields: {', '.join(names)})")
        out = {t.field(i).name: convert(v.get(t.field(i).name), t.field(i).type, f"{path}.{t.field(i).name}",
                                        None, open_records, undeclared)
               for i in range(t.num_fields) if t.field(i).name != ABSENT}
        if ABSENT in names:  # a record type whose records may lack fields: those this one lacks are MISSING
            listed = set(v.get(ABSENT) or ())  # a stored record's own list
            out[ABSENT] = [n for n in names if n != ABSENT and (n not in v or n in listed)] or None
        return out
    if pa.types.is_map(t):
        if not isinstance(v, Mapping):
            raise bad("an object")
        return [(convert(k, t.key_type, f"{path}.key"), convert(x, t.item_type, f"{path}.value"))
                for k, x in v.items()]
    raise _Mismatch(f"column '{path}' has type {t}, which ingest does not support")


def _encoded_decimal(v: Any, unit: str | None, t: pa.DataType, bad) -> decimal.Decimal | None:
    """The value of a Debezium-encoded decimal (see :func:`convert`), or None when ``v`` is not one."""
    if isinstance(v, Mapping) and set(v) == {"scale", "value"}:  # VariableScaleDecimal
        scale, raw = v["scale"], v["value"]
        if not isinstance(scale, int) or isinstance(scale, bool) or not isinstance(raw, str):
            raise bad("a VariableScaleDecimal {\"scale\": <integer>, \"value\": <base64>}")
    elif isinstance(v, str) and unit is not None and unit.startswith("decimal:"):
        scale, raw = int(unit.split(":", 1)[1]), v
    elif isinstance(v, str) and pa.types.is_decimal(t):
        try:
            decimal.Decimal(v)
            return None  # a number in a string: Debezium's string mode
        except decimal.InvalidOperation:
            scale, raw = t.scale, v
    else:
        return None
    try:
        unscaled = int.from_bytes(base64.b64decode(raw, validate=True), "big", signed=True)
    except (binascii.Error, ValueError):
        raise bad("a decimal (a number, or Debezium's base64 encoding)") from None
    return decimal.Decimal(unscaled).scaleb(-scale)


def _timestamp(v: Any, t: pa.DataType, unit: str | None, bad) -> dt.datetime:
    zone = dt.timezone.utc if t.tz is not None else None
    if isinstance(v, int) and not isinstance(v, bool):
        if unit is None:
            raise bad("an ISO-8601 timestamp (an integer needs a Debezium schema naming its unit)")
        micros = {"ms": v * 1000, "us": v, "ns": v // 1000}[unit]
        try:
            value = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
        except OverflowError:
            raise bad("a timestamp") from None
        return value.replace(tzinfo=zone)
    if isinstance(v, str):
        try:
            value = dt.datetime.fromisoformat(v)
        except ValueError:
            raise bad("an ISO-8601 timestamp") from None
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
            return value if zone is not None else value.replace(tzinfo=None)
        return value.replace(tzinfo=zone)
    raise bad("an ISO-8601 timestamp")


def _hashable(v: Any) -> Any:
    if isinstance(v, (list, dict)):
        raise TypeError("unhashable")
    return v


def _short(v: Any, width: int = 40) -> str:
    text = json.dumps(v, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def union_kind(v: Any) -> str | None:
    """The tag of the alternative of a tagged union (:class:`~idivm.types.UnionType`) that holds
    JSON value ``v``, or None for a value of no JSON type."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, Mapping):
        return "record"
    if isinstance(v, (list, tuple)):
        return "array"
    return None


#: how messages name a JSON value of each tag (:func:`union_kind`)
_KINDS = {"bool": "a boolean", "int": "an integer", "double": "a number", "string": "a string",
          "record": "an object", "array": "an array"}


def json_kind(v: Any) -> str:
    """``an integer``, ``a string``, ... for messages."""
    kind = union_kind(v)
    if kind is not None:
        return _KINDS[kind]
    return "null" if v is None else f"a {type(v).__name__}"


def read_text(path: str | Path, source: str | None = None) -> str:
    """The UTF-8 text of a file; a missing/unreadable file, a directory or non-UTF-8 bytes are a
    one-line :class:`DataError` (``source`` names the file in decoding errors)."""
    p = Path(path)
    if p.is_dir():
        raise DataError(f"cannot read {str(path)!r}: it is a directory")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"cannot read {str(path)!r}: no such file") from None
    except OSError as e:
        raise DataError(f"cannot read {str(path)!r}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{source or path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


@dataclass(frozen=True, slots=True)
class BadJson:
    """A line that is not JSON: why."""

    problem: str


def json_lines(text: str, source: str) -> Iterator[tuple[int, str | None, Any]]:
    """Yield ``(line number, text, value)`` for every line of JSON Lines ``text``; blank lines
    give ``(n, None, None)``, malformed ones a :class:`BadJson` value."""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            yield n, None, None
            continue
        try:
            yield n, line, json.loads(line)
        except json.JSONDecodeError as e:
            yield n, line, BadJson(f"invalid JSON: {e.msg} (column {e.colno})")
        except RecursionError:
            yield n, line, BadJson("invalid JSON: nested too deeply")
