"""Loading base tables: files (JSON Lines, JSON arrays, Parquet, CSV), lists of dicts, Arrow
tables and Spark DataFrames into Arrow, with the checks made before anything is written —
column names and types, the primary key (present, non-null, unique) and declared element keys
of nested collections (non-null, unique within each collection).  Errors are one-line
:class:`~idivm.errors.DataError` messages naming the first offending rows (line numbers for
files, indexes for lists, row numbers for Arrow/Parquet).
"""

from __future__ import annotations

import bisect
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from idivm import types as T
from idivm.algebra.expressions import ABSENT
from idivm.errors import DataError
from idivm.ingest.records import json_kind, read_text, union_kind
from idivm.storage import schema as schemas
from idivm.storage.delta import quoted

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from idivm.declared_schema import DeclaredSchema

FORMATS = ("jsonl", "json", "parquet", "csv")
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
               ".pq": "parquet", ".csv": "csv"}

#: How many offending rows/keys an error message names.
SHOWN = 3


# --- sources ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Rows:
    """Arrow data loaded from a source, and how to point at its rows in messages.

    ``unit`` is ``line`` (files: ``locators`` holds each row's line number),
    ``index`` (lists of dicts) or ``row`` (Arrow/Parquet: the 0-based row number).
    """

    table: pa.Table
    origin: str
    unit: str = "row"
    locators: Sequence[int] | None = None

    def locate(self, i: int) -> int:
        return self.locators[i] if self.locators is not None else i

    def where(self, indices: Sequence[int]) -> str:
        """``line 3`` / ``lines 3, 8`` for row indices."""
        plural = {"line": "lines", "index": "indexes", "row": "rows"}[self.unit]
        where = ", ".join(str(self.locate(i)) for i in indices)
        return f"{self.unit if len(indices) == 1 else plural} {where}"


def parse_key(key: str | Sequence[str]) -> list[str]:
    """Key columns from ``"a"``, ``"a,b"`` or ``["a", "b"]``; empty or repeated keys are DataErrors."""
    if isinstance(key, str):
        columns = [c.strip() for c in key.split(",")] if key.strip() else []
    else:
        columns = [str(c).strip() for c in key]
    if not columns or any(not c for c in columns):
        raise DataError("a table needs a key: one or more column names, e.g. key=['user_id'] or --key user_id")
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise DataError(f"key column(s) listed twice: {', '.join(repeated)}")
    return columns


def parse_element_keys(element_keys: Mapping[str, str | Sequence[str]] | None) -> dict[str, list[str]]:
    """Element keys as ``{path: [columns]}``; each key is given like ``key`` (``"day"``, ``"a,b"``, a list)."""
    out: dict[str, list[str]] = {}
    for path, key in (element_keys or {}).items():
        path = str(path).strip()
        if not path or any(not step.strip() for step in path.split(".")):
            raise DataError(f"invalid element key path {path!r}: use attribute names joined by '.', "
                            "e.g. hours or address.phones")
        path = ".".join(step.strip() for step in path.split("."))
        if path in out:
            raise DataError(f"element key of {path} declared twice")
        try:
            out[path] = parse_key(key)
        except DataError:
            raise DataError(f"element key of {path} needs one or more column names, e.g. {path}=id") from None
    return out


def is_spark_dataframe(obj: Any) -> bool:
    """Whether ``obj`` is a (classic or Connect) Spark DataFrame, without importing pyspark."""
    return type(obj).__module__.startswith("pyspark.sql") and hasattr(obj, "schema") and hasattr(obj, "write")


def infer_format(path: str | os.PathLike) -> str:
    suffix = Path(path).suffix.lower()
    try:
        return _EXTENSIONS[suffix]
    except KeyError:
        raise DataError(f"cannot infer the format of {str(path)!r} from its extension; "
                        f"specify one of {', '.join(FORMATS)}") from None


def load_source(source: Any, *, format: str | None = None) -> Rows:
    """Load a file path, list of dicts or pyarrow Table as :class:`Rows`."""
    if isinstance(source, (str, os.PathLike)):
        fmt = format or infer_format(source)
        if fmt not in FORMATS:
            raise DataError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
        return {"jsonl": read_json_lines, "json": read_json, "parquet": read_parquet, "csv": read_csv}[fmt](source)
    if isinstance(source, pa.RecordBatch):
        source = pa.Table.from_batches([source])
    if isinstance(source, pa.Table):
        return Rows(source, "table", "row")
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        for i, r in enumerate(source):
            if not isinstance(r, Mapping):
                raise DataError(f"rows[{i}] is {type(r).__name__}, not a dict")
        return Rows(table_from_records(source, "rows", lambda i: f"index {i}"), "rows", "index")
    raise DataError(f"cannot load a table from a {type(source).__name__}: give a file path, a list of dicts, "
                    "a pyarrow Table or a Spark DataFrame")


def read_json_lines(path: str | os.PathLike) -> Rows:
    """One JSON object per line (blank lines are skipped)."""
    return _records_rows(*json_records(path, "jsonl"), str(path))


def read_json(path: str | os.PathLike) -> Rows:
    """A top-level JSON array of objects, or objects one after the other (JSON Lines)."""
    return _records_rows(*json_records(path, "json"), str(path))


def json_records(path: str | os.PathLike, fmt: str) -> tuple[list[dict], list[int]]:
    """The objects of a JSON Lines (``jsonl``) or JSON (``json``) file and the line each starts on."""
    text = read_text(path)
    records, lines = [], []
    if fmt == "jsonl":
        values = []
        for n, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                values.append((n, json.loads(line)))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{n}: invalid JSON: {e.msg} (column {e.colno})") from None
    else:
        values = _json_values(text, str(path))
    for n, value in values:
        _check_object(value, path, n)
        records.append(value)
        lines.append(n)
    return records, lines


def _records_rows(records: list[dict], lines: list[int], origin: str) -> Rows:
    if not records:
        raise DataError(f"{origin}: no rows, so no columns to create the table with")
    table = table_from_records(records, origin, lambda i: f"line {lines[i]}")
    return Rows(table, origin, "line", lines)


def _check_object(value: Any, path: Any, line: int) -> None:
    if not isinstance(value, dict):
        raise DataError(f"{path}:{line}: expected a JSON object, got {json_kind(value)}")


_WS = re.compile(r"[ \t\n\r]*")


def _json_values(text: str, origin: str):
    """Yield ``(line, value)`` for the elements of a top-level array, or for
    whitespace-separated top-level values."""
    decoder = json.JSONDecoder()
    starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(pos: int) -> int:
        return bisect.bisect_right(starts, pos)

    def fail(pos: int, msg: str):
        raise DataError(f"{origin}:{line_of(pos)}: invalid JSON: {msg} (column {pos - starts[line_of(pos) - 1] + 1})")

    def decode(pos: int):
        try:
            return decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise DataError(f"{origin}:{e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from None

    i = _WS.match(text, 0).end()
    if text.startswith("[", i):
        i = _WS.match(text, i + 1).end()
        if text.startswith("]", i):
            i = i + 1
        else:
            while True:
                value, end = decode(i)
                yield line_of(i), value
                i = _WS.match(text, end).end()
                if text.startswith(",", i):
                    i = _WS.match(text, i + 1).end()
                elif text.startswith("]", i):
                    i += 1
                    break
                else:
                    fail(i, "expected ',' or ']' after an array element")
        i = _WS.match(text, i).end()
        if i < len(text):
            fail(i, "extra data after the top-level array")
        return
    while i < len(text):
        value, end = decode(i)
        yield line_of(i), value
        i = _WS.match(text, end).end()


def _read_file(path: str | os.PathLike, read, invalid: str) -> pa.Table:
    """``read(path)`` of an existing file; a missing or unreadable file, or one ``read``
    refuses (``invalid``: what it then is not), is a one-line DataError."""
    if not Path(path).exists():
        raise DataError(f"cannot read {str(path)!r}: no such file")
    try:
        return read(str(path))
    except OSError as e:
        raise DataError(f"cannot read {str(path)!r}: {e.strerror or _first_line(e)}") from None
    except (pa.ArrowException, ValueError) as e:
        raise DataError(f"{path}: {invalid}: {_first_line(e)}") from None


def read_parquet(path: str | os.PathLike) -> Rows:
    """A Parquet file or a directory of Parquet files."""
    import pyarrow.parquet as pq

    table = _read_file(path, pq.read_table, "not a readable Parquet file")
    if table.num_columns == 0:
        raise DataError(f"{path}: no columns (no Parquet files?)")
    return Rows(table, str(path), "row")


def read_csv(path: str | os.PathLike, column_types: Mapping[str, pa.DataType] | None = None) -> Rows:
    """A CSV file with a header line; column types are inferred by pyarrow, except those given."""
    import pyarrow.csv as pacsv

    if Path(path).is_dir():
        raise DataError(f"cannot read {str(path)!r}: it is a directory")
    options = pacsv.ConvertOptions(column_types=dict(column_types or {}))
    table = _read_file(path, lambda p: pacsv.read_csv(p, convert_options=options), "invalid CSV")
    # Line numbers assume no quoted line breaks: the header is line 1.
    return Rows(table, str(path), "line", range(2, table.num_rows + 2))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# --- sources with a declared schema ----------------------------------------------------------------

#: the fields of open records a declared schema does not declare, which are not stored: (path, rows)
Undeclared = tuple[tuple[str, int], ...]


def load_declared(source: Any, declared: "DeclaredSchema", key: Sequence[str], *,
                  format: str | None = None) -> tuple[Rows, Undeclared]:
    """The rows of ``source`` (as :func:`load_source` takes it; None: no rows) checked against and
    converted to the ``declared`` schema: absent fields are null, fields of the wrong type
    are a :class:`DataError` naming the row (or line) and the field, the undeclared fields of
    open records are left out and counted, those of closed records are errors.

    Records (JSON files, lists of dicts) are checked as ingest checks records
    (:class:`~idivm.ingest.records.RowChecker`); Arrow data (Parquet, CSV, Arrow tables) is
    cast column by column to the declared types, losslessly."""
    if source is None:
        return Rows(declared.arrow.empty_table(), "schema", "row"), ()
    if isinstance(source, (str, os.PathLike)):
        fmt = format or infer_format(source)
        if fmt not in FORMATS:
            raise DataError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
        if fmt in ("jsonl", "json"):
            records, lines = json_records(source, fmt)
            return _declared_records(records, Rows(declared.arrow.empty_table(), str(source), "line", lines), declared,
                                     key)
        if fmt == "csv":
            scalars = {f.name: f.type for f in declared.arrow
                       if not pa.types.is_nested(f.type) and not pa.types.is_timestamp(f.type)}
            return _declared_table(read_csv(source, scalars), declared)
        return _declared_table(read_parquet(source), declared)
    if isinstance(source, (pa.Table, pa.RecordBatch)):
        return _declared_table(load_source(source), declared)
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        for i, r in enumerate(source):
            if not isinstance(r, Mapping):
                raise DataError(f"rows[{i}] is {type(r).__name__}, not a dict")
        return _declared_records(list(source), Rows(declared.arrow.empty_table(), "rows", "index"), declared, key)
    return load_source(source), ()  # raises: not a source


def _declared_records(records: Sequence[Mapping[str, Any]], where: Rows, declared: "DeclaredSchema",
                      key: Sequence[str]) -> tuple[Rows, Undeclared]:
    from idivm.ingest.records import RecordError, RowChecker

    checker = RowChecker(declared.arrow, tuple(key), where.origin, declared)
    converted = []
    for i, record in enumerate(records):
        try:
            converted.append(checker.row(record, where.locate(i))[1])
        except RecordError as e:
            if where.unit == "line":
                raise
            raise DataError(f"{where.origin}: {where.where([i])}: {e.problem}") from None
    table = pa.Table.from_pylist(converted, schema=declared.arrow)
    return Rows(table, where.origin, where.unit, where.locators), checker.undeclared_counts()


def _declared_table(rows: Rows, declared: "DeclaredSchema") -> tuple[Rows, Undeclared]:
    table, schema = rows.table, declared.arrow
    extra = [n for n in table.column_names if n not in schema.names]
    if extra and not declared.open:
        raise DataError(f"{rows.origin}: column {extra[0]!r} is not declared by the closed schema "
                        f"(fields: {', '.join(schema.names)})")
    columns = []
    for f in schema:
        if f.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        column = table.column(f.name)
        lossy = pa.types.is_timestamp(column.type) and pa.types.is_timestamp(f.type)
        try:
            columns.append(column if column.type == f.type else column.cast(f.type, safe=not lossy))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            bad = _first_uncastable(column, f.type, lossy)
            at = f"{rows.where([bad])}: " if bad is not None else ""
            raise DataError(f"{rows.origin}: {at}column '{f.name}' ({column.type}) cannot be stored as the declared "
                            f"{f.type}: {_first_line(e)}") from None
    undeclared = tuple((n, table.num_rows - table.column(n).null_count) for n in extra)
    return Rows(pa.Table.from_arrays(columns, schema=schema), rows.origin, rows.unit, rows.locators), \
        tuple(u for u in undeclared if u[1])


def _first_uncastable(column: pa.ChunkedArray, t: pa.DataType, lossy: bool) -> int | None:
    """The index of the first value of ``column`` that cannot be cast to ``t`` (None: the whole
    column cannot be, whatever its values)."""
    values = column.combine_chunks()
    for i in range(len(values)):
        try:
            values.slice(i, 1).cast(t, safe=not lossy)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None if values[i].as_py() is None else i
    return None


def declared_dataframe(df: "DataFrame", declared: "DeclaredSchema") -> tuple["DataFrame", Undeclared]:
    """A Spark DataFrame with the columns of the ``declared`` schema: its own columns, which must
    have the declared types, and nulls for those it lacks; its other columns are left out and
    counted (an open schema) or an error (a closed one)."""
    from pyspark.sql import functions as F

    actual = _spark_delta_schema(df)
    schema = declared.arrow
    extra = [n for n in actual.names if n not in schema.names]
    if extra and not declared.open:
        raise DataError(f"DataFrame: column {extra[0]!r} is not declared by the closed schema "
                        f"(fields: {', '.join(schema.names)})")
    spark_types = {f.name: f.dataType for f in schemas.spark_schema(schema).fields}
    columns = []
    for f in schema:
        if f.name not in actual.names:
            columns.append(F.lit(None).cast(spark_types[f.name]).alias(f.name))
            continue
        if actual.field(f.name).type != f.type:
            raise DataError(f"DataFrame: column '{f.name}' is {actual.field(f.name).type} but the schema declares "
                            f"{f.type}; cast it first")
        columns.append(F.col(quoted(f.name)))
    undeclared: Undeclared = ()
    if extra:
        counts = df.agg(*[F.count(F.col(quoted(n))).alias(f"n{i}") for i, n in enumerate(extra)]).first()
        undeclared = tuple((n, counts[f"n{i}"]) for i, n in enumerate(extra) if counts[f"n{i}"])
    return df.select(*columns), undeclared


# --- JSON values to Arrow ---------------------------------------------------------------------------

_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def table_from_records(records: Sequence[Mapping[str, Any]], origin: str,
                       where: Callable[[int], str]) -> pa.Table:
    """An Arrow table from dicts: one column per key seen in any record (in
    order of first appearance), types inferred by ``pyarrow.array`` over all
    values, so nested objects become structs, arrays lists, and integers mixed
    with floats doubles.  A key a record lacks is MISSING in its row: null, and
    named in the row's hidden list :data:`~idivm.algebra.expressions.ABSENT`
    (a last column, there only when some record lacks a key); so is a key a
    nested object lacks, in that object's own list (:func:`_absent_marked`).

    Values of one column that cannot share a type raise :class:`DataError`
    naming the column (``a.b``, ``a[]`` for nested ones) and the rows
    (``where(i)``) of the first conflicting values.
    """
    names: dict[str, None] = {}
    for r in records:
        for k in r:
            names.setdefault(k, None)
    names.pop(ABSENT, None)
    arrays = []
    for name in names:
        values = _absent_marked([r.get(name) for r in records])
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as e:
            conflict = _type_conflict(name, list(enumerate(values)), where)
            detail = conflict or f"column '{name}' cannot be converted: {_first_line(e)}"
            raise DataError(f"{origin}: {detail}") from None
    absent = [[n for n in names if n not in r] or None for r in records]
    if not any(absent):
        return pa.Table.from_arrays(arrays, names=list(names))
    return pa.Table.from_arrays(arrays + [pa.array(absent, pa.list_(pa.string()))], names=[*names, ABSENT])


def _absent_marked(values: list) -> list:
    """The values of one column (or of one place inside it), each object that lacks a key another
    object of this place has given those keys as null and the hidden list
    :data:`~idivm.algebra.expressions.ABSENT` naming them (null when it lacks none), and the
    keys of all of them in one order; recursively, through objects and arrays."""
    kinds = {union_kind(v) for v in values if v is not None}
    if None not in kinds and len(kinds - {"double"} if "int" in kinds else kinds) > 1:
        tags = sorted(kinds, key=T.UNION_TAGS.index)  # a place of mixed types: a tagged union (types.UnionType)
        alternatives = {tag: iter(_absent_marked([v for v in values if v is not None and union_kind(v) == tag]))
                        for tag in tags}

        def tagged(v: Any) -> dict:
            kind = union_kind(v)
            return {T.UNION_PREFIX + tag: next(alternatives[tag]) if tag == kind else None for tag in tags}

        return [None if v is None else tagged(v) for v in values]
    dicts = [v for v in values if isinstance(v, dict)]
    lists = [v for v in values if isinstance(v, list)]
    out = values
    if dicts:
        keys = list(dict.fromkeys(k for d in dicts for k in d))
        marked = {k: iter(_absent_marked([d[k] for d in dicts if k in d])) for k in keys}
        lacking = ABSENT not in keys and any(any(k not in d for k in keys) for d in dicts)

        def rebuilt(d: dict) -> dict:
            new = {k: next(marked[k]) if k in d else None for k in keys}
            if lacking:
                new[ABSENT] = [k for k in keys if k not in d] or None
            return new

        out = [rebuilt(v) if isinstance(v, dict) else v for v in out]
    if lists:
        items = iter(_absent_marked([x for v in lists for x in v]))
        out = [[next(items) for _ in v] if isinstance(v, list) else v for v in out]
    return out


def _type_group(kind: str) -> str:
    return "a number" if kind in ("an integer", "a number") else kind


def _type_conflict(path: str, items: list[tuple[int, Any]], where: Callable[[int], str]) -> str | None:
    """Describe the first pair of values at ``path`` that cannot share an Arrow type, or None."""
    first: tuple[str, int] | None = None
    for i, v in items:
        if v is None:
            continue
        kind = json_kind(v)
        if kind == "an integer" and not _INT64[0] <= v <= _INT64[1]:
            return f"column '{path}' has an integer outside the 64-bit range at {where(i)}"
        if first is None:
            first = (kind, i)
        elif _type_group(kind) != _type_group(first[0]):
            return f"column '{path}' is {first[0]} at {where(first[1])} but {kind} at {where(i)}"
    if first is None:
        return None
    if first[0] == "an object":
        fields: dict[str, list[tuple[int, Any]]] = {}
        for i, v in items:
            if isinstance(v, Mapping):
                for k, sub in v.items():
                    fields.setdefault(k, []).append((i, sub))
        for k, sub_items in fields.items():
            found = _type_conflict(f"{path}.{k}", sub_items, where)
            if found:
                return found
    if first[0] == "an array":
        return _type_conflict(f"{path}[]", [(i, e) for i, v in items if isinstance(v, (list, tuple)) for e in v],
                              where)
    return None


# --- validation --------------------------------------------------------------------------------------

def check_columns(schema: pa.Schema, origin: str) -> None:
    """Column and field names must be valid names (:func:`idivm.catalog.name_problem`: not
    empty, no control characters, not the reserved prefix ``__``, ...; spaces, quotes, dots and
    non-ASCII letters are fine) and distinct ignoring case (Spark resolves names
    case-insensitively)."""
    from idivm.catalog import name_problem

    def check(fields: Sequence[pa.Field], where: str) -> None:
        seen: dict[str, str] = {}
        for f in fields:
            if f.name == ABSENT and f.type == pa.list_(pa.string()):
                continue  # the hidden list of the fields a row or object lacks (:func:`table_from_records`)
            full = f"{where}{f.name}"
            problem = name_problem(f.name, path_safe=False)
            if problem is not None:
                raise DataError(f"{origin}: column name {full!r} is not allowed: {problem}")
            low = f.name.lower()
            if seen.get(low) == f.name:
                raise DataError(f"{origin}: column {full!r} appears twice")
            if low in seen:
                raise DataError(f"{origin}: columns {where}{seen[low]!r} and {full!r} differ only in case")
            seen[low] = f.name
            t = f.type
            while pa.types.is_list(t) or pa.types.is_large_list(t):
                t = t.value_type
            alternatives = [t.field(i) for i in range(t.num_fields)] if pa.types.is_struct(t) else []
            if alternatives and all(a.name.startswith(T.UNION_PREFIX) for a in alternatives):
                for a in alternatives:  # a tagged union (types.UnionType): its alternatives' own fields
                    check([pa.field(f.name, a.type)], where)
                continue
            if pa.types.is_struct(t):
                if t.num_fields == 0:
                    raise DataError(f"{origin}: column {full!r} is an object without fields in every row; "
                                    "its type cannot be stored")
                check([t.field(i) for i in range(t.num_fields)], f"{full}.")
    check(list(schema), "")


def added_columns(values: Mapping[str, Sequence[Any]], origin: str) -> pa.Schema:
    """The Delta schema of new columns given their JSON ``values`` in a batch (``ingest
    --evolve``): each column's type inferred as ``table create`` infers it from a file
    (:func:`table_from_records`, :func:`idivm.storage.schema.delta_schema`), nullable, its
    name checked (:func:`check_columns`); a column null in every record has no type to infer."""
    empty = [c for c, vs in values.items() if all(v is None for v in vs)]
    if empty:
        raise DataError(f"{origin}: new column {empty[0]!r} is null in every record; its type cannot be inferred "
                        "(add it with a value, or to the table by hand)")
    columns = list(values)
    records = [{c: v} for c in columns for v in values[c]]
    table = table_from_records(records, origin, lambda i: "one of its records")
    if ABSENT in table.column_names:  # each record here holds one column: none lacks anything
        table = table.drop_columns([ABSENT])
    schema = schemas.delta_schema(table.schema)
    check_columns(schema, origin)
    idivm_schema(schema, origin)
    return schema


def idivm_schema(schema: pa.Schema, origin: str) -> T.TupleType:
    """The idivm static type of a (Delta-ready) Arrow schema; DataError for unsupported types."""
    for f in schema:
        try:
            T.from_arrow(f.type)
        except ValueError:
            raise DataError(f"{origin}: column '{f.name}' has type {f.type}, which idivm does not support") from None
    result = T.from_arrow(schema)
    assert isinstance(result, T.TupleType)
    return result


def _check_key_columns(names: Sequence[str], types: Mapping[str, Any], key: Sequence[str], origin: str,
                       nested: Callable[[Any], bool]) -> None:
    missing = [k for k in key if k not in names]
    if missing:
        available = ", ".join(names) if names else "none"
        raise DataError(f"{origin}: key column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                        f"not found; columns: {available}")
    for k in key:
        if nested(types[k]):
            raise DataError(f"{origin}: key column {k} has a nested type ({types[k]}); key columns must be scalars")


def check_declared_key(schema: pa.Schema, key: Sequence[str]) -> None:
    """The key columns are declared by ``schema``, as scalars."""
    _check_key_columns(schema.names, {f.name: f.type for f in schema}, key, "schema", pa.types.is_nested)


def check_key(rows: Rows, key: Sequence[str]) -> None:
    """Key columns exist, are scalars, and are non-null and unique in every row."""
    table = rows.table
    types = {f.name: f.type for f in table.schema}
    _check_key_columns(table.column_names, types, key, rows.origin, pa.types.is_nested)

    for k in key:
        nulls = pc.is_null(table.column(k), nan_is_null=True)
        if table.num_rows and pc.any(nulls).as_py():
            bad = pc.indices_nonzero(nulls).to_pylist()
            more = f" (and {len(bad) - SHOWN} more)" if len(bad) > SHOWN else ""
            raise DataError(f"{rows.origin}: key column {k} is null at {rows.where(bad[:SHOWN])}{more}")

    if table.num_rows < 2:
        return
    indexed = table.select(list(key)).append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    groups = indexed.group_by(list(key), use_threads=False).aggregate([("__row", "list"), ("__row", "min")])
    sizes = pc.list_value_length(groups.column("__row_list"))
    dups = groups.filter(pc.greater(sizes, 1))
    if dups.num_rows == 0:
        return
    dups = dups.sort_by([("__row_min", "ascending")])
    parts = []
    for r in dups.slice(0, SHOWN).to_pylist():
        values = ", ".join(f"{k}={_show_value(r[k])}" for k in key)
        shown = sorted(r["__row_list"])[:SHOWN + 2]
        parts.append(f"{values if len(key) == 1 else '(' + values + ')'} at {rows.where(shown)}")
    more = f" ({dups.num_rows} duplicated keys in all)" if dups.num_rows > SHOWN else ""
    raise DataError(f"{rows.origin}: duplicate key {'; '.join(parts)}{more}")


def _show_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def _spark_delta_schema(df: "DataFrame") -> pa.Schema:
    try:
        return schemas.delta_schema(schemas.arrow_schema(df.schema, nullable=True))
    except DataError:
        raise
    except Exception as e:  # pyspark raises its own errors for types Arrow cannot hold
        raise DataError(f"DataFrame: cannot store its schema: {_first_line(e)}") from None


def check_spark_key(df: "DataFrame", key: Sequence[str], origin: str = "DataFrame") -> None:
    """The checks of :func:`check_key` for a Spark DataFrame, as Spark aggregations
    (only counts and the first few duplicated keys reach the driver)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    types = {f.name: f.dataType for f in df.schema.fields}
    _check_key_columns(df.columns, {k: v.simpleString() for k, v in types.items()}, key, origin,
                       lambda s: s.startswith(("struct", "array", "map")))
    assert not any(isinstance(types[k], (ArrayType, MapType, StructType)) for k in key)
    cols = [F.col(quoted(k)) for k in key]

    counts = df.select([F.sum(F.col(quoted(k)).isNull().cast("long")).alias(f"n{i}")
                        for i, k in enumerate(key)]).first()
    for i, k in enumerate(key):
        nulls = counts[f"n{i}"] or 0
        if nulls:
            raise DataError(f"{origin}: key column {k} is null in {nulls} row{'s' if nulls > 1 else ''}")

    dup = df.groupBy(*cols).count().filter(F.col("count") > 1)
    first = dup.orderBy(F.col("count").desc(), *cols).limit(SHOWN).collect()
    if not first:
        return
    total = dup.count() if len(first) == SHOWN else len(first)
    parts = []
    for r in first:
        values = ", ".join(f"{k}={_show_value(r[k])}" for k in key)
        parts.append(f"{values if len(key) == 1 else '(' + values + ')'} ({r['count']} rows)")
    more = f" ({total} duplicated keys in all)" if total > SHOWN else ""
    raise DataError(f"{origin}: duplicate key {'; '.join(parts)}{more}")


def check_element_key_type(schema: T.TupleType, path: str, key: Sequence[str], origin: str) -> T.TupleType:
    """The element type of the collection at ``path`` (a step into a collection goes to its
    elements' attributes); DataError unless it is a collection of tuples with scalar ``key`` columns."""
    steps = path.split(".")
    t: T.Type = schema
    for i, name in enumerate(steps):
        if isinstance(t, T.CollectionType):
            t = t.element
        outer = ".".join(steps[:i])
        if not isinstance(t, T.TupleType):
            raise DataError(f"{origin}: element key path {path}: {outer} has type {t}, which has no attribute {name}")
        found = t.field(name)
        if found is None:
            where = f"in {outer} " if outer else ""
            raise DataError(f"{origin}: element key path {path}: no attribute {name} {where}"
                            f"(attributes: {', '.join(t.names) or 'none'})")
        t = found
    if isinstance(t, T.CollectionType) and isinstance(t.element, T.ScalarType):
        raise DataError(f"{origin}: {path} is a collection of scalars ({t}), which needs no element key: "
                        "each value is its own provenance")
    if not (isinstance(t, T.CollectionType) and isinstance(t.element, T.TupleType)):
        raise DataError(f"{origin}: element key path {path} has type {t}, not a collection of tuples")
    element = t.element
    missing = [k for k in key if element.field(k) is None]
    if missing:
        raise DataError(f"{origin}: element key column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                        f"not found in the elements of {path} (attributes: {', '.join(element.names)})")
    for k in key:
        kt = element.field(k)
        if isinstance(kt, (T.TupleType, T.CollectionType)):
            raise DataError(f"{origin}: element key column {k} of {path} has a nested type ({kt}); "
                            "key columns must be scalars")
    return element


def check_element_key(rows: Rows, path: str, key: Sequence[str]) -> None:
    """The element key of the collection at ``path`` is non-null and unique within each collection
    value (the same key in different rows, or in different collections of one row, is fine).
    Assumes :func:`check_element_key_type` passed."""
    table = rows.table
    steps = path.split(".")
    values = table.column(steps[0]).combine_chunks()
    row = pa.array(range(table.num_rows), pa.int64())  # the table row each value belongs to
    for name in steps[1:]:
        if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
            row = row.take(pc.list_parent_indices(values))
            values = pc.list_flatten(values)
        values = pc.struct_field(values, name)
    container = pc.list_parent_indices(values)  # which collection value each element is in
    row = row.take(container)
    elements = pc.list_flatten(values)
    columns = [pc.struct_field(elements, k) for k in key]

    for k, column in zip(key, columns):
        nulls = pc.is_null(column, nan_is_null=True)
        if len(column) and pc.any(nulls).as_py():
            first = pc.indices_nonzero(nulls)[0].as_py()
            raise DataError(f"{rows.origin}: element key column {k} of {path} is null at "
                            f"{rows.where([row[first].as_py()])}")

    if len(elements) < 2:
        return
    names = [f"k{i}" for i in range(len(key))]
    indexed = pa.table([container, row, *columns], names=["container", "row", *names])
    groups = indexed.group_by(["container", *names], use_threads=False).aggregate([("row", "min"), ("row", "count")])
    dups = groups.filter(pc.greater(groups.column("row_count"), 1))
    if dups.num_rows == 0:
        return
    first = dups.sort_by([("row_min", "ascending")]).slice(0, 1).to_pylist()[0]
    values_ = ", ".join(f"{k}={_show_value(first[n])}" for k, n in zip(key, names))
    shown = values_ if len(key) == 1 else f"({values_})"
    raise DataError(f"{rows.origin}: duplicate element key {shown} in {path} at {rows.where([first['row_min']])}")


def check_spark_element_key(df: "DataFrame", table_key: Sequence[str], path: str, key: Sequence[str],
                            origin: str = "DataFrame") -> None:
    """The checks of :func:`check_element_key` for a Spark DataFrame, as Spark jobs (only the first
    offending row reaches the driver, named by its primary key).  Assumes the primary key is valid."""
    from functools import reduce

    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    steps = path.split(".")
    ids = [f"__key{i}" for i in range(len(table_key))]
    cur = df.select(*[F.col(quoted(k)).alias(n) for k, n in zip(table_key, ids)], F.col(quoted(steps[0])).alias("__v"))
    for j, name in enumerate(steps[1:]):
        if isinstance(cur.schema["__v"].dataType, ArrayType):
            cur = cur.select(*ids, F.posexplode("__v").alias(f"__pos{j}", "__v"))
            ids.append(f"__pos{j}")
        cur = cur.select(*ids, F.col("__v").getField(name).alias("__v"))
    names = [f"__el{i}" for i in range(len(key))]
    elements = cur.select(*ids, F.explode("__v").alias("__e")).select(
        *ids, *[F.col("__e").getField(k).alias(n) for k, n in zip(key, names)])

    def the_row(r) -> str:
        values = ", ".join(f"{k}={_show_value(r[f'__key{i}'])}" for i, k in enumerate(table_key))
        return f"the row with {values if len(table_key) == 1 else '(' + values + ')'}"

    null = reduce(lambda a, b: a | b, [F.col(n).isNull() for n in names])
    bad = elements.filter(null).limit(1).collect()
    if bad:
        k = next(k for k, n in zip(key, names) if bad[0][n] is None)
        raise DataError(f"{origin}: element key column {k} of {path} is null in {the_row(bad[0])}")
    dup = elements.groupBy(*ids, *names).count().filter(F.col("count") > 1).limit(1).collect()
    if dup:
        values = ", ".join(f"{k}={_show_value(dup[0][n])}" for k, n in zip(key, names))
        shown = values if len(key) == 1 else f"({values})"
        raise DataError(f"{origin}: duplicate element key {shown} in {path} in {the_row(dup[0])}")
