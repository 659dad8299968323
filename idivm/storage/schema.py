"""Schemas between Arrow, Spark and Delta Lake.

Three conversions:

* :func:`spark_schema` — an Arrow schema (e.g. a Delta table's) to a Spark
  ``StructType``; this is how Spark obtains the schema of every Delta read, so
  a table's declared schema wins over whatever its Parquet files say.
* :func:`arrow_schema` — a Spark ``StructType`` to Arrow, e.g. to stream the
  Parquet files of a Spark write into delta-rs.
* :func:`delta_schema` / :func:`conform` — an arbitrary Arrow schema to one
  Delta Lake can store and every engine can read: all fields nullable,
  ``null`` columns (no non-null value to infer a type from) become ``string``
  (as in Spark's JSON inference), timestamps become microseconds (UTC if they
  had a zone), view/large/dictionary/unsigned encodings become their plain
  signed equivalents.  Types with no Delta equivalent (time of day,
  durations, unions) raise :class:`DataError` naming the column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

import pyarrow as pa

from idivm.errors import DataError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


def as_arrow_schema(schema: Any) -> pa.Schema:
    """Accept a pyarrow Schema or any object exporting the Arrow C schema interface
    (delta-rs returns arro3 schemas)."""
    return schema if isinstance(schema, pa.Schema) else pa.schema(schema)


def spark_schema(schema: Any) -> "StructType":
    """Spark ``StructType`` for an Arrow schema (as returned by ``DeltaTable.schema().to_arrow()``).

    Timestamps with a zone become ``TimestampType``, those without one
    ``TimestampNTZType`` (Delta's ``timestamp`` and ``timestamp_ntz``).
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    plain = pa.schema([pa.field(f.name, _plain_type(f.type, f.name), f.nullable, f.metadata)
                       for f in as_arrow_schema(schema)])
    return from_arrow_schema(plain, prefer_timestamp_ntz=True)


def arrow_schema(schema: "StructType", *, nullable: bool = False) -> pa.Schema:
    """Arrow schema of a Spark ``StructType``; timestamps are ``timestamp[us, tz=UTC]``.

    With ``nullable=True`` every field (at every depth) is made nullable.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    result = to_arrow_schema(schema, timezone="UTC")
    return relax_nullability(result) if nullable else result


def rebuilt_spark_type(t: Any, leaf: Callable[[Any], Any] = lambda t: t, *, nullable: bool = False) -> Any:
    """The Spark type ``t`` with ``leaf`` applied to each of its types that nest none, and with
    ``nullable`` every field, array element and map value nullable (else as they are)."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    def walk(t: Any) -> Any:
        if isinstance(t, StructType):
            return StructType([StructField(f.name, walk(f.dataType), nullable or f.nullable, f.metadata)
                               for f in t.fields])
        if isinstance(t, ArrayType):
            return ArrayType(walk(t.elementType), nullable or t.containsNull)
        if isinstance(t, MapType):
            return MapType(walk(t.keyType), walk(t.valueType), nullable or t.valueContainsNull)
        return leaf(t)

    return walk(t)


def relax_nullability(schema: pa.Schema) -> pa.Schema:
    """The same schema with every field, list element and struct member nullable."""
    return pa.schema([_nullable_field(f) for f in schema], metadata=schema.metadata)


def delta_schema(schema: Any) -> pa.Schema:
    """The Arrow schema a table with this schema gets when written to Delta Lake.

    Drops schema metadata (e.g. pandas or Spark annotations) and applies the
    rules in the module docstring.
    """
    return pa.schema([pa.field(f.name, _delta_type(f.type, f.name), True) for f in as_arrow_schema(schema)])


def conform(data: pa.Table | pa.RecordBatchReader, schema: pa.Schema | None = None
            ) -> pa.Table | pa.RecordBatchReader:
    """Cast a table, or lazily every batch of a reader, to ``schema``
    (default: :func:`delta_schema` of its own schema).

    Raises :class:`DataError` when a value does not fit (e.g. an unsigned
    64-bit value above the signed range).
    """
    target = schema if schema is not None else delta_schema(data.schema)
    if isinstance(data, pa.Table):
        return data if data.schema == target else _cast_table(data, target)
    if data.schema == target:
        return data
    return pa.RecordBatchReader.from_batches(target, _cast_batches(data, target))


def _cast_batches(reader: pa.RecordBatchReader, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    for batch in reader:
        yield from _cast_table(pa.Table.from_batches([batch]), target).to_batches()


def _cast_table(table: pa.Table, target: pa.Schema) -> pa.Table:
    """Cast column by column; timestamps are truncated to microseconds (all Delta Lake stores),
    every other cast must be lossless."""
    missing = [n for n in target.names if n not in table.column_names]
    if missing:
        raise DataError(f"data lacks column(s) {', '.join(missing)} of the table schema")
    columns = []
    for f in target:
        col = table.column(f.name)
        if col.type == f.type:
            columns.append(col)
            continue
        lossy = pa.types.is_timestamp(col.type) and pa.types.is_timestamp(f.type)
        try:
            columns.append(col.cast(f.type, safe=not lossy))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise DataError(f"column '{f.name}' ({col.type}) cannot be stored as {f.type}: {_first_line(e)}") from e
    return pa.Table.from_arrays(columns, schema=target)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _nullable_field(f: pa.Field) -> pa.Field:
    return pa.field(f.name, _nullable_type(f.type), True, f.metadata)


def _nullable_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([_nullable_field(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(_nullable_type(t.key_type), _nullable_field(t.item_field))
    if pa.types.is_large_list(t):
        return pa.large_list(_nullable_field(t.value_field))
    if pa.types.is_list(t):
        return pa.list_(_nullable_field(t.value_field))
    return t


def _plain_type(t: pa.DataType, where: str) -> pa.DataType:
    """Replace view and large encodings (which Spark's converter does not know) by plain ones."""
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return _plain_type(t.value_type, where)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) \
            or pa.types.is_large_list_view(t) or pa.types.is_fixed_size_list(t):
        vf = t.value_field
        return pa.list_(pa.field(vf.name, _plain_type(vf.type, where), vf.nullable))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _plain_type(t.field(i).type, f"{where}.{t.field(i).name}"),
                                   t.field(i).nullable) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(_plain_type(t.key_type, where),
                       pa.field(t.item_field.name, _plain_type(t.item_type, where), t.item_field.nullable))
    return t


def _delta_type(t: pa.DataType, where: str) -> pa.DataType:
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_dictionary(t):
        return _delta_type(t.value_type, where)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) \
            or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_boolean(t) or pa.types.is_date32(t) or pa.types.is_decimal128(t):
        return t
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise DataError(f"column '{where}' has type {t}; Delta Lake stores decimals of at most 38 digits")
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_signed_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t):
        return t
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_unsigned_integer(t):
        return {8: pa.int16(), 16: pa.int32(), 32: pa.int64(), 64: pa.int64()}[t.bit_width]
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz is not None else None)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _delta_type(t.field(i).type, f"{where}.{t.field(i).name}"), True)
                          for i in range(t.num_fields)])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) \
            or pa.types.is_large_list_view(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(pa.field("element", _delta_type(t.value_type, f"{where}[]"), True))
    if pa.types.is_map(t):
        return pa.map_(_delta_type(t.key_type, f"{where}.key"),
                       pa.field("value", _delta_type(t.item_type, f"{where}.value"), True))
    raise DataError(f"column '{where}' has type {t}, which Delta Lake cannot store")
