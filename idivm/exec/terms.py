"""Algebra terms -> Spark columns: the scalar half of the plan compiler
(:mod:`idivm.exec.compiler`, which compiles operators).

A term is compiled over a DataFrame holding one column per variable of the binding tuples
(tuples are struct columns, collections array columns); :func:`compile_term` needs nothing
else, so the column of a term is the same wherever the operator that holds it runs.  The
scalar functions of :data:`~idivm.algebra.expressions.SCALAR_FUNCTIONS` and the collection
functions (``ARRAY_COUNT`` & co.) keep SQL++'s NULL semantics.
"""

from __future__ import annotations

import json
import math

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as ST

from idivm.algebra.expressions import (
    ArrayExpr, BagExpr, Call, Case, Const, Field, Index, TableRef, Term, TupleExpr, Var,
)
from idivm.algebra import operators as O
from idivm import types as T
from idivm.errors import InternalError
from idivm.provenance.ids import HIDDEN as HIDDEN_PREFIX
from idivm.storage.delta.merge import quoted

#: the run-time error of a scalar subquery with several values (raised inside Spark)
SCALAR_SUBQUERY_ERROR = "a subquery used as a scalar returned more than one value"
#: the digits of FROM_BASE's bases, in the order of their values
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def col(name: str) -> Column:
    """The column of variable ``name`` (any name: quoted)."""
    return F.col(quoted(name))


def compile_term(t: Term) -> Column:
    """The Spark column of term ``t`` over a frame with one column per variable."""
    match t:
        case Const(value=None, type=ty) if ty == T.BOOL:  # a condition: Spark needs a typed NULL
            return F.lit(None).cast("boolean")
        case Const(value=v):
            return F.lit(v)
        case Var(name=n):
            return col(n)
        case Field(base=b, name=n):
            return compile_term(b).getField(n)
        case Index(base=b, index=i):  # 0-based; a negative position counts from the end (-1: the last)
            arr, pos = compile_term(b), compile_term(i)
            return F.get(arr, F.when(pos < 0, pos + F.size(arr)).otherwise(pos))
        case Call(function=f, args=args):
            return _call(f, args)
        case Case(whens=whens, otherwise=o):
            out = None
            for c, r in whens:
                cond = compile_term(c)
                out = F.when(cond, compile_term(r)) if out is None else out.when(cond, compile_term(r))
            if o is not None:
                out = out.otherwise(compile_term(o))
            return out
        case TupleExpr(fields=fs):
            return F.struct(*[compile_term(v).alias(n) for n, v in fs])
        case BagExpr(items=items) | ArrayExpr(items=items):
            return F.array(*[compile_term(i) for i in items])
        case TableRef(name=n):
            raise InternalError(f"table {n} used as a value")
    raise InternalError(f"no Spark compilation for term {t!r}")


def all_true(parts: list[Column]) -> Column:
    """The conjunction of ``parts`` (at least one)."""
    out = parts[0]
    for p in parts[1:]:
        out = out & p
    return out


# ----------------------------------------------------------------------------- scalar functions


def _call(f: str, args: tuple[Term, ...]) -> Column:
    a = [compile_term(x) for x in args]
    match f:
        case "add":
            return a[0] + a[1]
        case "sub":
            return a[0] - a[1]
        case "mul":
            return a[0] * a[1]
        case "div":
            return F.try_divide(a[0], a[1])
        case "mod":
            return F.when(a[1] == 0, F.lit(None)).otherwise(a[0] % a[1])
        case "neg":
            return -a[0]
        case "concat":
            return F.concat(*a)
        case "eq":
            return a[0] == a[1]
        case "ne":
            return a[0] != a[1]
        case "same":
            return a[0].eqNullSafe(a[1])
        case "array_eq":
            types = [T.from_json(json.loads(c.value)) for c in args[2:]] or [T.ANY, T.ANY]  # type: ignore[union-attr]
            return arrays_equal(a[0], types[0], a[1], types[1])
        case "last_with" | "some_not_tuples":  # the items of an array as tuples (OBJECT_CONCAT)
            element = T.from_json(json.loads(args[-1].value))  # type: ignore[union-attr]
            record = T.record_of(element)

            def tuple_of(item: Column) -> Column:
                return item.getField(T.UNION_PREFIX + "record") if isinstance(element, T.UnionType) else item

            if f == "some_not_tuples":
                return F.exists(a[0], lambda item: item.isNotNull() & tuple_of(item).isNull())
            name = args[1].value  # type: ignore[union-attr]

            def has(item: Column) -> Column:
                held = tuple_of(item).isNotNull()
                if record.field(T.ABSENT_FIELD) is None:  # type: ignore[union-attr]
                    return held
                return held & ~F.coalesce(F.array_contains(tuple_of(item).getField(T.ABSENT_FIELD), name), F.lit(False))

            having = F.transform(F.filter(a[0], has), tuple_of)
            return F.get(having, F.size(having) - 1)
        case "index_beyond":  # a position out of an array (MISSING there)
            return F.coalesce((a[1] >= F.size(a[0])) | (a[1] < -F.size(a[0])), F.lit(False)) & a[0].isNotNull()
        case "unordered":
            return F.lit(None).cast("boolean")
        case "lt":
            return a[0] < a[1]
        case "le":
            return a[0] <= a[1]
        case "gt":
            return a[0] > a[1]
        case "ge":
            return a[0] >= a[1]
        case "and":
            return all_true(a)
        case "or":
            out = a[0]
            for x in a[1:]:
                out = out | x
            return out
        case "not":
            return ~a[0]
        case "is_null":
            return a[0].isNull()
        case "missing":
            return F.lit(None)
        case "kept_items":  # (condition, item, ...) -> the items whose condition holds
            return _kept(a)
        case "absent_fields":  # (condition, name, ...) -> the names whose condition holds (NULL: none)
            names = _kept(a)
            return F.when(F.size(names) > 0, names)
        case "absent_in":  # a tuple's ABSENT list names the field (FALSE when it has no list)
            return F.coalesce(F.array_contains(a[0], a[1]), F.lit(False))
        case "like":
            return F.like(a[0], a[1])
        case "in":
            return a[0].isin(*a[1:])
        case "coalesce":
            return F.coalesce(*a)
        case "lower":
            return F.lower(a[0])
        case "upper":
            return F.upper(a[0])
        case "trim":
            return F.trim(a[0])
        case "length":
            return F.length(a[0])
        case "substr":
            start = a[1] + F.lit(1)  # SQL++ positions are 0-based
            return F.substr(a[0], start, a[2]) if len(a) == 3 else F.substr(a[0], start)
        case "abs":
            return F.abs(a[0])
        case "round":
            if len(args) == 2:
                if not isinstance(args[1], Const) or not isinstance(args[1].value, int):
                    raise InternalError("ROUND's scale must be an integer constant")
                return F.round(a[0], args[1].value)
            return F.round(a[0])
        case "floor":
            return F.floor(a[0])
        case "ceil":
            return F.ceil(a[0])
        case "to_string":
            return a[0].cast("string")
        case "to_int8" | "to_int16" | "to_int32" | "to_bigint":  # out of range or not a number: NULL
            width = {"to_int8": "tinyint", "to_int16": "smallint", "to_int32": "int", "to_bigint": "bigint"}[f]
            return a[0].try_cast(width).cast("bigint")
        case "to_double":
            return a[0].try_cast("double")
        case "to_boolean":
            return a[0].try_cast("boolean")
        case "to_date":
            return a[0].try_cast("date")
        case "null_if":
            return F.when(a[0] == a[1], F.lit(None)).otherwise(a[0])
        case "ltrim":
            return F.ltrim(a[0])
        case "rtrim":
            return F.rtrim(a[0])
        case "string_contains":
            return F.contains(a[0], a[1])
        case "starts_with":
            return F.startswith(a[0], a[1])
        case "ends_with":
            return F.endswith(a[0], a[1])
        case "position":  # 0-based; -1 when absent
            return F.position(a[1], a[0]) - 1
        case "replace":
            return F.replace(a[0], a[1], a[2])
        case "reverse":
            return F.reverse(a[0])
        case "repeat":
            return F.repeat(a[0], a[1])
        case "initcap":
            return F.initcap(a[0])
        case "regexp_contains":  # a match anywhere in the string
            return F.regexp(a[0], a[1])
        case "regexp_like":  # the whole string matches
            return F.regexp(a[0], F.concat(F.lit("^(?:"), a[1], F.lit(")$")))
        case "sqrt":
            return F.sqrt(a[0])
        case "exp":
            return F.exp(a[0])
        case "ln":
            return F.ln(a[0])
        case "log10":
            return F.log10(a[0])
        case "power":
            return F.pow(a[0], a[1])
        case "from_base":  # the integer the digits a[0] are in base a[1] (2 to 36); else NULL, also past 64 bits
            base = a[1].cast("int")
            digits = F.transform(F.split(F.regexp_replace(F.upper(a[0]), "^0+(?=.)", ""), ""),
                                 lambda c: F.position(c, F.lit(_DIGITS)) - 1)
            at_most = F.floor(F.lit(63 * math.log(2)) / F.ln(base.cast("double")) + F.lit(1e-9)) + 1  # 2^63's
            valid = ((base >= 2) & (base <= 36) & (F.length(a[0]) > 0) & (F.size(digits) <= at_most)
                     & F.forall(digits, lambda d: (d >= 0) & (d < base)))
            value = F.aggregate(digits, F.lit(0).cast("decimal(38,0)"),
                                lambda acc, d: (acc * base + d).cast("decimal(38,0)"))
            return F.when(valid, value.try_cast("bigint"))
        case "sign":
            return F.signum(a[0]).cast("bigint")
        case "get_year":
            return F.year(a[0])
        case "get_month":
            return F.month(a[0])
        case "get_day":
            return F.dayofmonth(a[0])
        case "range":  # the integers from a[0] to a[1]; empty when a[0] > a[1]
            lo, hi = a[0].cast("bigint"), a[1].cast("bigint")
            return F.when(lo <= hi, F.sequence(lo, hi)).otherwise(
                F.when(lo.isNotNull() & hi.isNotNull(), F.array().cast("array<bigint>")))
        case "array_slice":  # AsterixDB's bounds: NULL out of them, or when not whole numbers
            n = F.size(a[0])
            ends = [p.try_cast("double") for p in a[1:]] + ([n.cast("double")] if len(a) == 2 else [])
            s, e = (F.when(p < 0, p + n).otherwise(p) for p in ends)
            valid = (s >= 0) & (s <= n - 1) & (e <= n) & (s <= e) & (s == F.floor(s)) & (e == F.floor(e))
            return F.when(valid, F.slice(a[0], s.cast("int") + 1, (e - s).cast("int")))
        case "collection_length":
            return F.when(a[0].isNotNull(), F.size(a[0]))
        case "exists":
            return F.coalesce(F.size(a[0]) > 0, F.lit(False))
        case "contains":  # x IN bag: FALSE for an empty bag even when x is NULL (SQL's x IN (empty))
            return F.when(F.size(a[0]) == 0, F.lit(False)).otherwise(F.array_contains(a[0], a[1]))
        case "singleton":
            return F.when(F.size(a[0]) > 1,
                          F.raise_error(F.lit(SCALAR_SUBQUERY_ERROR))
                          ).otherwise(F.get(a[0], 0))
    raise InternalError(f"no Spark compilation for function {f}")


def _kept(a: list[Column]) -> Column:
    """The array of the items ``a[i + 1]`` whose condition ``a[i]`` holds (a NULL item kept too)."""
    kept = [F.when(a[i], F.struct(F.lit(True).alias("kept"), a[i + 1].alias("item"))) for i in range(0, len(a), 2)]
    return F.transform(F.filter(F.array(*kept), lambda k: k.isNotNull()), lambda k: k.getField("item"))


def arrays_equal(a: Column, ta: T.Type, b: Column, tb: T.Type) -> Column:
    """``a = b`` of two arrays of items of types ``ta`` and ``tb``, as AsterixDB compares them:
    FALSE when their lengths differ or the items at one position do (:func:`items_equal`), else
    NULL when some pair is NULL, else TRUE."""
    pairs = F.zip_with(a, b, lambda x, y: items_equal(x, ta, y, tb))
    return F.when(a.isNull() | b.isNull(), F.lit(None)).when(
        F.size(a) != F.size(b), F.lit(False)).otherwise(F.forall(pairs, lambda v: v))


def items_equal(x: Column, tx: T.Type, y: Column, ty: T.Type) -> Column:
    """``x = y`` of two items of arrays (of types ``tx`` and ``ty``): NULL when either is NULL,
    FALSE when they are of different kinds (a number and a string, an array and a number),
    arrays item by item, alternatives of mixed-type items (:class:`~idivm.types.UnionType`) by
    the alternative each holds."""
    if isinstance(tx, T.UnionType) or isinstance(ty, T.UnionType):
        xs, ys = _alternative_columns(x, tx), _alternative_columns(y, ty)
        matched = [(cx.isNotNull() & cy.isNotNull(), items_equal(cx, ax, cy, ay))
                   for cx, ax in xs for cy, ay in ys if _kind(ax) == _kind(ay)]
        out = F.when(x.isNull() | y.isNull(), F.lit(None))
        for both, same in matched:
            out = out.when(both, same)
        return out.otherwise(F.lit(False))
    if isinstance(tx, T.CollectionType) and isinstance(ty, T.CollectionType):
        return arrays_equal(x, tx.element, y, ty.element)
    if T.ANY in (tx, ty) or _kind(tx) == _kind(ty):
        return x == y
    return F.when(x.isNotNull() & y.isNotNull(), F.lit(False))


def _alternative_columns(x: Column, t: T.Type) -> list[tuple[Column, T.Type]]:
    if isinstance(t, T.UnionType):
        return [(x.getField(T.UNION_PREFIX + tag), alt) for tag, alt in zip(t.tags, t.alternatives)]
    return [(x, t)]


def _kind(t: T.Type) -> str:
    """What values of type ``t`` compare with: numbers with numbers, arrays with arrays, ..."""
    if T.is_numeric(t):
        return "number"
    try:
        return T.union_tag(t)
    except ValueError:
        return str(t)


def array_statistic(what: str, values: Column) -> Column:
    """The statistics aggregate ``what`` (one of :data:`~idivm.algebra.operators.STATISTICS`) of
    an array of numbers without NULLs, as AsterixDB computes it from their central moments
    ``m2``, ``m3``, ``m4`` (sums of the powers of their distances from their mean): NULL for
    fewer than 2 values (1 for the population's), and the skewness and kurtosis NULL for fewer
    than 3 or when every value is the same."""
    v = F.transform(values, lambda x: x.cast("double"))
    n = F.size(v)
    mean = F.aggregate(v, F.lit(0.0), lambda acc, x: acc + x) / n

    def moment(k: int) -> Column:
        return F.aggregate(v, F.lit(0.0), lambda acc, x: acc + F.pow(x - mean, k))

    m2 = moment(2)
    match what:
        case "stddev_samp" | "var_samp":
            out = F.when(n > 1, m2 / (n - 1))
        case "stddev_pop" | "var_pop":
            out = F.when(n > 0, m2 / n)
        case "skewness":
            return F.when((n > 2) & (m2 != 0), F.sqrt(n.cast("double")) * moment(3) / F.pow(m2, 1.5))
        case "kurtosis":
            return F.when((n > 2) & (m2 != 0), moment(4) * n / (m2 * m2) - 3)
        case _:
            raise InternalError(f"no Spark compilation for statistics aggregate {what}")
    return F.sqrt(out) if what.startswith("stddev") else out


def statistic(what: str, x: Column) -> Column:
    """The statistics aggregate ``what`` of the values of ``x`` in a group (Spark's aggregates,
    which compute the same central moments), NULL where :func:`array_statistic` is."""
    x = x.cast("double")
    n = F.count(x)
    spark = {"stddev_samp": F.stddev_samp, "stddev_pop": F.stddev_pop, "var_samp": F.var_samp,
             "var_pop": F.var_pop, "skewness": F.skewness, "kurtosis": F.kurtosis}[what](x)
    if what in ("skewness", "kurtosis"):
        return F.when((n > 2) & (F.var_pop(x) != 0), spark)
    return F.when(n > (1 if what.endswith("_samp") else 0), spark)


def collection_function(fn: str, c: Column, dtype: ST.DataType) -> Column:
    """ARRAY_COUNT & co. over an array column: NULL elements are ignored, as SQL aggregates do;
    STRICT_COUNT counts them and the other STRICT_* functions are NULL when there is one.  The
    count of a NULL collection is 0, the other aggregates of it NULL."""
    el = dtype.elementType if isinstance(dtype, ST.ArrayType) else None
    visible = [f for f in el.fields if not f.name.startswith(HIDDEN_PREFIX)] if isinstance(el, ST.StructType) else []
    kind, _, what = fn.partition("_")
    if len(visible) == 1 and what != "count":  # a one-column subquery: its values
        name = visible[0].name
        c = F.transform(c, lambda x: x.getField(name))
        el = visible[0].dataType
    values = F.filter(c, lambda x: x.isNotNull())
    n = F.size(values)
    if what == "count":
        return F.when(c.isNull(), F.lit(0)).otherwise(F.size(c) if kind == "strict" else n)
    if what == "min":
        out = F.array_min(values)
    elif what == "max":
        out = F.array_max(values)
    elif what in O.STATISTICS:
        out = array_statistic(what, values)
    else:
        zero = F.lit(0).cast(el if isinstance(el, ST.NumericType) else ST.DoubleType())
        total = F.aggregate(values, zero, lambda acc, x: acc + x)
        if what == "sum":
            out = F.when(n > 0, total)
        elif what == "avg":
            out = F.when(n > 0, total.cast("double") / n)
        else:
            raise InternalError(f"no Spark compilation for collection function {fn}")
    if kind == "strict":
        return F.when(n == F.size(c), out)
    return out
