"""Evaluate view plans on Spark and turn stored rows into plain Python values.

Stored views may carry hidden columns (provenance, IDs) whose names start
with :data:`HIDDEN_PREFIX`; readers of user data (``rows``, ``read``,
``show``) drop them, recursively inside nested tuples too.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as ST

from idivm import types as T
from idivm.algebra.builder import VALUE_COLUMN, VALUE_NAME
from idivm.algebra.expressions import ABSENT
from idivm.algebra.operators import Operator
from idivm.errors import DataError, IdivmError, InternalError, UnsupportedError
from idivm.exec.compiler import PlanCompiler
from idivm.exec.terms import SCALAR_SUBQUERY_ERROR
from idivm.provenance.ids import HIDDEN as HIDDEN_PREFIX
from idivm.storage.delta import quoted


@contextmanager
def spark_errors(name: str, kind: str = "view") -> Iterator[None]:
    """Turn an error Spark raises while view (or ``kind``) ``name`` is evaluated, written or read
    into one of ours (:func:`spark_error`), with the Spark error as its cause."""
    try:
        yield
    except IdivmError:
        raise
    except Exception as e:
        error = spark_error(f"{kind} {name}", e)
        if error is None:
            raise
        raise error from e


def spark_error(subject: str, e: BaseException) -> IdivmError | None:
    """Our error for an error of Spark's (None for any other), in one line naming its ``subject``
    (``view v``):

    * an error of the data (SQLSTATE class 22: a value that cannot be cast, a division by zero,
      an overflow; a subquery used as a scalar that returned several values,
      :data:`~idivm.exec.terms.SCALAR_SUBQUERY_ERROR`) is a :class:`DataError`;
    * a plan Spark cannot analyse (class 42, :data:`UNANALYSABLE`: types the builder let
      through) is an :class:`UnsupportedError`;
    * anything else is an :class:`InternalError`.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if SCALAR_SUBQUERY_ERROR in str(e):
        return DataError(f"{subject}: {SCALAR_SUBQUERY_ERROR}")
    if isinstance(e, PySparkException):
        state, text = e.getSqlState(), str(e)
    elif isinstance(e, Py4JJavaError):
        java = e.java_exception
        try:
            state = java.getSqlState() if hasattr(java, "getSqlState") else None
        except Exception:  # not a SparkThrowable
            state = None
        text = f"{java.getClass().getSimpleName()}: {java.getMessage()}"
    else:
        return None
    text = _first_sentence(text)
    if state and state.startswith("22"):
        return DataError(f"{subject}: a value of its data cannot be computed: {text}")
    if state and state.startswith("42") and text.startswith(UNANALYSABLE):
        return UnsupportedError(f"{subject}: Spark cannot evaluate it: {text}")
    return InternalError(f"{subject}: Spark failed: {text}")


#: the error conditions of a plan Spark cannot analyse: types or fields it does not accept
UNANALYSABLE = ("[DATATYPE_MISMATCH", "[FIELD_NOT_FOUND", "[INVALID_EXTRACT", "[UNRESOLVED_", "[CAST_WITHOUT_SUGGESTION",
                "[INCOMPATIBLE_")


def _first_sentence(message: str) -> str:
    """The first line of a Spark message up to its first sentence's end (Spark goes on with advice
    for Spark SQL's users, the SQLSTATE and the plan)."""
    line = (message or "").strip().split("\n", 1)[0]
    line = re.split(r"(?<=[.;])\s+(?=[A-Z])|\s*SQLSTATE: ", line, maxsplit=1)[0]
    return line.strip().rstrip(";")


def evaluate_plan(spark: SparkSession, plan: Operator, read_table: Callable[[str], DataFrame]) -> DataFrame:
    """The view's rows as a DataFrame (one column per field of the view's tuples)."""
    return PlanCompiler(spark, read_table).evaluate(plan)


def _visible(c: Column, dtype: ST.DataType, absent: bool = False) -> Column:
    if isinstance(dtype, ST.StructType):
        if not any(_hidden(f.name, absent) or _has_hidden(f.dataType, absent) for f in dtype.fields):
            return c
        return F.struct(*[_visible(c.getField(f.name), f.dataType, absent).alias(f.name)
                          for f in dtype.fields if not _hidden(f.name, absent)])
    if isinstance(dtype, ST.ArrayType) and _has_hidden(dtype.elementType, absent):
        return F.transform(c, lambda x: _visible(x, dtype.elementType, absent))
    return c


def _hidden(name: str, absent: bool) -> bool:
    return name.startswith(HIDDEN_PREFIX) and not (absent and name == ABSENT)


def _has_hidden(dtype: ST.DataType, absent: bool = False) -> bool:
    if isinstance(dtype, ST.StructType):
        return any(_hidden(f.name, absent) or _has_hidden(f.dataType, absent) for f in dtype.fields)
    if isinstance(dtype, ST.ArrayType):
        return _has_hidden(dtype.elementType, absent)
    return False


def user_visible(df: DataFrame, keep: Sequence[str] = (), absent: bool = False) -> DataFrame:
    """Drop hidden columns (but those named in ``keep``, first) and hidden fields of nested tuples;
    with ``absent``, keep the lists of MISSING fields (:data:`~idivm.algebra.expressions.ABSENT`,
    which :func:`to_python` applies).  The values of a view of scalars (its hidden
    :data:`~idivm.algebra.builder.VALUE_COLUMN`) are the column
    :data:`~idivm.algebra.builder.VALUE_NAME`."""
    shown = {VALUE_COLUMN: VALUE_NAME}
    return df.select(*[F.col(quoted(c)) for c in keep],
                     *[_visible(F.col(quoted(f.name)), f.dataType, absent).alias(shown.get(f.name, f.name))
                       for f in df.schema.fields if not _hidden(f.name, absent) or f.name in shown])


def to_python(value: Any, scalars: bool = True) -> Any:
    """Spark Row values -> plain Python (dicts, lists, numbers, strings, None; a tuple without
    its MISSING fields, those its :data:`~idivm.algebra.expressions.ABSENT` list names; a tagged
    union, :class:`~idivm.types.UnionType`, as its alternative's value); with ``scalars``
    false, decimals and dates stay as they are (exact)."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=False)
    if isinstance(value, dict) and value and all(k.startswith(T.UNION_PREFIX) for k in value):
        return to_python(T.union_value(value), scalars)  # a tagged union: the value of its alternative
    if isinstance(value, dict):
        gone = set(value.get(ABSENT) or ()) | {ABSENT}  # MISSING fields are left out
        return {k: to_python(v, scalars) for k, v in value.items() if k not in gone}
    if isinstance(value, (list, tuple)):
        return [to_python(v, scalars) for v in value]
    if not scalars:
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return value


def collect_rows(df: DataFrame, limit: int | None = None, scalars: bool = True) -> list[dict]:
    """The rows of ``df`` (at most ``limit``) as plain Python values (:func:`to_python`)."""
    if limit is not None:
        df = df.limit(limit)
    return [to_python(r, scalars) for r in df.collect()]


def tables_read(plan: Operator) -> list[str]:
    """The base tables a plan scans, in plan order."""
    from idivm.algebra.expressions import TableRef
    from idivm.algebra.operators import ScanCollection, walk

    names = [op.source.name for op in walk(plan)
             if isinstance(op, ScanCollection) and isinstance(op.source, TableRef)]
    return list(dict.fromkeys(names))


#: significant digits doubles are compared to (sums maintained incrementally and sums
#: recomputed round differently in the last bits)
DIGITS = 12
#: rows on each side of a comparison that may be paired up in the driver after the exact match
PAIRED_MAX = 10_000


def canonical(c: Column, dtype: ST.DataType) -> Column:
    """A value with every bag (array) sorted, recursively, so that equal bags compare equal;
    floating-point numbers rounded to :data:`DIGITS` significant digits."""
    if isinstance(dtype, (ST.DoubleType, ST.FloatType)):
        return F.when(c.isNotNull(), F.format_string(f"%.{DIGITS - 1}e", c).cast(ST.DoubleType()))
    if isinstance(dtype, ST.StructType):
        return F.struct(*[canonical(c.getField(f.name), f.dataType).alias(f.name) for f in dtype.fields])
    if isinstance(dtype, ST.ArrayType):
        el = dtype.elementType
        inner = F.transform(c, lambda x: canonical(x, el)) if isinstance(el, (ST.StructType, ST.ArrayType)) else c
        return F.array_sort(inner)
    return c


@dataclass(frozen=True)
class FrameDiff:
    rows: int
    missing: int  # in ``expected`` but not in ``actual``
    extra: int  # in ``actual`` but not in ``expected``
    missing_examples: tuple
    extra_examples: tuple


#: the columns :func:`compare_frames` adds to the rows it compares: the side a row is on (1 for
#: the actual rows, -1 for the expected ones), and per distinct row the difference of its
#: multiplicities (actual minus expected) and its multiplicity on the actual side
_SIDE, _DIFFERENCE, _ACTUAL = "__idivm_compare_side", "__idivm_compare_difference", "__idivm_compare_actual"


def compare_frames(actual: DataFrame, expected: DataFrame, limit: int = 5) -> FrameDiff:
    """Compare two DataFrames with the same columns as bags of rows (nested bags unordered),
    doubles to :data:`DIGITS` significant digits.  Rounding alone would tell apart two sums a
    few units in the 16th digit apart that fall on either side of a rounding boundary; so the
    rows left over on each side (when at most :data:`PAIRED_MAX`) are paired in the driver,
    a pair being equal but for doubles that round to neighbouring values (:func:`_near`).

    The two sides are compared by one aggregation of their union by distinct row (one Spark
    job when they are equal); the rows that differ are read only when some do."""
    columns = [f.name for f in expected.schema.fields]
    missing_cols = set(columns) ^ {f.name for f in actual.schema.fields}
    if missing_cols:
        raise ValueError(f"different columns: {sorted(missing_cols)}")

    def canon(df: DataFrame, side: int) -> DataFrame:
        types = {f.name: f.dataType for f in df.schema.fields}
        return df.select(*[canonical(F.col(quoted(n)), types[n]).alias(n) for n in columns],
                         F.lit(side).alias(_SIDE))

    side = F.col(_SIDE)
    groups = canon(actual, 1).unionByName(canon(expected, -1)) \
        .groupBy(*[F.col(quoted(n)) for n in columns]) \
        .agg(F.sum(side).alias(_DIFFERENCE), F.sum(F.when(side > 0, 1).otherwise(0)).alias(_ACTUAL))
    difference = F.col(_DIFFERENCE)
    totals = groups.agg(F.sum(_ACTUAL), F.sum(F.when(difference < 0, -difference).otherwise(0)),
                        F.sum(F.when(difference > 0, difference).otherwise(0))).first()
    rows, n_missing, n_extra = (int(v or 0) for v in totals)
    if not (n_missing or n_extra):
        return FrameDiff(rows, 0, 0, (), ())

    def differing(sign: int, at_most: int | None) -> list:
        """The rows on one side only (``sign`` -1: expected, 1: actual), each as often as it is
        missing or extra, at most ``at_most`` (None: all)."""
        found = groups.filter(difference * sign > 0)
        if at_most is not None:
            found = found.limit(at_most)
        out = []
        for r in found.collect():
            out += [tuple(r[:len(columns)])] * abs(int(r[_DIFFERENCE]))
        return out[:at_most] if at_most is not None else out

    def as_rows(values: list) -> list:
        return [{n: to_python(v, False) for n, v in zip(columns, row)} for row in values]

    if n_missing and n_extra and max(n_missing, n_extra) <= PAIRED_MAX:
        left, right = _unpaired(as_rows(differing(-1, None)), as_rows(differing(1, None)))
        return FrameDiff(rows, len(left), len(right), tuple(to_python(r) for r in left[:limit]),
                         tuple(to_python(r) for r in right[:limit]))
    return FrameDiff(rows, n_missing, n_extra,
                     tuple(to_python(r) for r in as_rows(differing(-1, limit))) if n_missing else (),
                     tuple(to_python(r) for r in as_rows(differing(1, limit))) if n_extra else ())


def _unpaired(missing: list, extra: list) -> tuple[list, list]:
    """The rows of ``missing`` and ``extra`` left when each row of one is paired with a row of the
    other that is :func:`_near` it."""
    buckets: dict[str, list] = {}
    for row in extra:
        buckets.setdefault(_shape(row), []).append(row)
    left = []
    for row in missing:
        bucket = buckets.get(_shape(row), [])
        match = next((i for i, other in enumerate(bucket) if _near(row, other)), None)
        if match is None:
            left.append(row)
        else:
            bucket.pop(match)
    return left, [r for bucket in buckets.values() for r in bucket]


def _shape(value: Any) -> str:
    """``value`` with its doubles blanked: rows that may be near each other have the same shape."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_shape(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_shape(v) for v in value) + "]"
    return "~" if isinstance(value, float) else repr(value)


def _near(a: Any, b: Any) -> bool:
    """Equal, but for doubles (rounded to :data:`DIGITS` digits) that are at most one unit of
    their last digit apart: the originals differ by less than two such units."""
    if isinstance(a, float) and isinstance(b, float):
        if not (math.isfinite(a) and math.isfinite(b)):
            return a == b or (math.isnan(a) and math.isnan(b))
        unit = 10.0 ** (math.floor(math.log10(max(abs(a), abs(b)))) - (DIGITS - 1)) if a or b else 0.0
        return abs(a - b) <= 1.5 * unit
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_near(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_near(x, y) for x, y in zip(a, b))
    return a == b
