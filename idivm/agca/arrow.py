"""AGCA statements evaluated in the driver over Arrow tables: :mod:`idivm.agca.spark`'s
evaluation, case by case, for a run whose batch and maps are small (DBToaster's triggers are
lookups and small joins; a Spark job per join costs more than the join).

A GMR is a :class:`pyarrow.Table` with one column per variable and the multiplicity in
:data:`M`; contexts, products, nested aggregates and sums are those of
:func:`idivm.agca.spark.compile_term`, with Spark's semantics kept where they show:

* a join matches equal values, never NULL (Spark's equi-join; Acero's hash join);
* a NULL multiplicity (a variable's NULL value multiplied in) counts 0 in a sum, and a sum of
  no rows over no group variables is one row of NULL (Spark's aggregate without keys);
* the scalar expressions of a lifted value or condition (:class:`~idivm.agca.terms.Lift`), and
  comparisons of values Spark casts first (a date with a string), are evaluated by Spark
  itself, over the rows as a local relation (``lift``), so that their functions, NULLs and
  casts are exactly the Spark path's.

A map may be given as a :class:`Lookup` instead of a table: its consolidated rows, sorted
indexes of their columns, and the increments since.  A join with it then reads the rows of the
keys the contexts hold by binary search, as DBToaster's triggers look up its in-memory maps,
rather than a pass over the whole map.

A term Arrow cannot evaluate (a nested value carried through a join: Acero joins scalars only)
raises :class:`pyarrow.ArrowException`; the caller then runs the statements on Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import takewhile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from idivm.agca.gmr import AgcaError
from idivm.agca.terms import (
    EPSILON, FLIPPED, ROUNDING, Add, Assign, Cmp, Const, Exists, Lift, MapRef, Mul, Rel, Sum, Term, Value, Var,
    inputs, outputs,
)
from idivm.agca.spark import M, constant_key, exists_columns

#: ``lift(contexts, term)``: the contexts a :class:`Lift` (or a :class:`Cmp` of operands Spark
#: casts) leaves, evaluated by Spark (see the module's notes)
Lifter = Callable[[pa.Table, Lift], pa.Table]

_M2 = "__m2"
_VALUE = "__v"


def unit() -> pa.Table:
    """The GMR ``⟨⟩ ↦ 1``: the context of a top-level term."""
    return pa.table({M: pa.array([1.0], pa.float64())})


class Lookup:
    """A map's value (a GMR keyed by ``keys``) as its consolidated rows ``base`` (each key once,
    none 0) plus the summed ``increments`` since, with a sorted index of a column of ``base``
    built on the first lookup in it and shared by every later value with the same base:
    :meth:`matching` finds the rows of some values of a key column by binary search.  A value
    is immutable; :meth:`added` gives the next one."""

    __slots__ = ("base", "keys", "increments", "_value", "_indexes", "_matched")

    def __init__(self, base: pa.Table, keys: Sequence[str], increments: pa.Table | None = None,
                 indexes: dict | None = None) -> None:
        if increments is not None and increments.num_rows == 0:
            increments = None
        self.base, self.keys, self.increments = base, tuple(keys), increments
        self._value: pa.Table | None = base if increments is None else None
        self._indexes = {} if indexes is None else indexes
        self._matched: dict[tuple, pa.Table] = {}  # the last lookups: a trigger's monomials repeat them

    @property
    def value(self) -> pa.Table:
        """The map's entries: each key once, none 0."""
        if self._value is None:
            self._value = plus(self.base, self.increments, self.keys, distinct=True)
        return self._value

    @property
    def column_names(self) -> list[str]:
        return self.base.column_names

    @property
    def schema(self) -> pa.Schema:
        return self.base.schema

    @property
    def increment_rows(self) -> int:
        return self.increments.num_rows if self.increments is not None else 0

    def added(self, increments: pa.Table) -> "Lookup":
        """This value plus ``increments`` (a GMR over the same keys), on the same base."""
        parts = [increments] if self.increments is None else [self.increments, increments]
        total = summed([p.select([*self.keys, M]) for p in parts], self.keys)
        return Lookup(self.base, self.keys, total.cast(self.base.select([*self.keys, M]).schema), self._indexes)

    def consolidated(self) -> "Lookup":
        """The same value with the increments summed into a new base."""
        return self if self.increments is None else Lookup(self.value, self.keys)

    def matching(self, column: str, values: pa.Array) -> pa.Table | None:
        """The entries whose key ``column`` holds one of ``values`` (distinct, not NULL); None
        when the index cannot say (a type numpy does not order)."""
        index = self._index(column)
        if index is None:
            return None
        ordered, order = index
        try:
            wanted = pc.cast(values, self.base.schema.field(column).type).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        asked = (column, wanted.dtype.str, wanted.tobytes()) if wanted.dtype != object else None
        if asked in self._matched:
            return self._matched[asked]
        part = self._looked_up(column, values, ordered, order, wanted)
        if asked is not None:
            if len(self._matched) >= 16:
                self._matched.pop(next(iter(self._matched)))
            self._matched[asked] = part
        return part

    def _looked_up(self, column: str, values: pa.Array, ordered, order, wanted) -> pa.Table:
        lo, hi = ordered.searchsorted(wanted, "left"), ordered.searchsorted(wanted, "right")
        lengths = hi - lo
        total = int(lengths.sum())
        ends = lengths.cumsum()
        positions = order[(lo - (ends - lengths)).repeat(lengths) + np.arange(total)] if total else order[:0]
        part = self.base.take(pa.array(positions))
        if self.increments is None:
            return part
        named = self.increments.filter(pc.fill_null(pc.is_in(self.increments.column(column), value_set=values), False))
        return plus(part, named, self.keys, distinct=True) if named.num_rows else part

    def _index(self, column: str):
        """(the column's values but NULL, in order; their rows), built once per base."""
        if column not in self._indexes:
            values = self.base.column(column)
            index = None
            if pa.types.is_integer(values.type) or pa.types.is_floating(values.type) or \
                    pa.types.is_temporal(values.type) or pa.types.is_string(values.type):
                order = pc.sort_indices(values)  # NULLs last
                order = order.slice(0, len(values) - values.null_count)
                index = (values.take(order).to_numpy(zero_copy_only=False), order.to_numpy())
            self._indexes[column] = index
        return self._indexes[column]


class _MapRows:
    """A :class:`Lookup` as a map reference reads it: its columns renamed to the reference's
    variables (``renames``: stored name -> variable)."""

    __slots__ = ("lookup", "column_names", "schema")

    def __init__(self, lookup: Lookup, renames: Mapping[str, str]) -> None:
        self.lookup = lookup
        names = [renames.get(c, c) if c != M else M for c in lookup.column_names]
        self.column_names = names
        self.schema = pa.schema([f.with_name(n) for f, n in zip(lookup.schema, names)])

    def table(self) -> pa.Table:
        return self.lookup.value.rename_columns(self.column_names)

    def matching(self, variable: str, contexts: pa.Table, column: str) -> pa.Table:
        """The rows whose ``variable`` holds a value of the contexts' ``column`` (all of them
        when the index cannot say or the map is small beside the contexts)."""
        stored = next(c for c, n in zip(self.lookup.column_names, self.column_names) if n == variable)
        values = pc.unique(contexts.column(column)).drop_null()
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        rows = None
        if self.lookup.base.num_rows >= NARROW_RATIO * max(len(values), 1):
            rows = self.lookup.matching(stored, values)
        return (rows if rows is not None else self.lookup.value).rename_columns(self.column_names)


def summed(parts: Sequence[pa.Table], keys: Sequence[str] | None = None) -> pa.Table:
    """:func:`idivm.agca.spark.summed` over Arrow tables: the union of the parts (by column
    name, NULL where a part lacks a column), multiplicities summed per ``keys`` (default: every
    other column), entries that reach 0 (or NULL) dropped."""
    union = _union(parts)
    keys = [c for c in union.column_names if c != M] if keys is None else list(keys)
    total = _sum_by(union, keys, M)
    return total.filter(pc.greater(pc.abs(total.column(M)), EPSILON))


def plus(base: pa.Table, increments: pa.Table, keys: Sequence[str], *, distinct: bool = False) -> pa.Table:
    """``base`` + ``increments`` as GMRs keyed by ``keys``, ``base`` holding each key once and no
    entry 0: its rows of keys no increment names as they are (no pass over ``base`` beyond the
    joins that find them), the others summed with the increments; entries reaching 0 dropped.
    ``distinct``: the increments hold each key once already (in ``base``'s types)."""
    keys = list(keys)
    if not distinct:
        increments = summed([increments.select([*keys, M])], keys).cast(base.select([*keys, M]).schema)
    if increments.num_rows == 0:
        return base
    if not keys or any(increments.column(k).null_count for k in keys):  # a join matches no NULL key
        return summed([base, increments], keys).select(base.column_names)
    named = increments.select(keys)
    hit = base.join(named, keys, join_type="left semi", use_threads=False)
    rest = base.join(named, keys, join_type="left anti", use_threads=False)
    return _union([rest, summed([hit, increments], keys)]).select(base.column_names)


def compile_term(q: Term, contexts: pa.Table, relations: Mapping[str, pa.Table], maps: Mapping[str, pa.Table],
                 constants: dict, lift: Lifter) -> pa.Table:
    """``q`` evaluated in every context of ``contexts``: :func:`idivm.agca.spark.compile_term`
    over Arrow tables (``lift`` evaluates the scalar expressions of a :class:`Lift`)."""
    match q:
        case Const(value=c):
            return _times(contexts, pa.scalar(float(c), pa.float64()))
        case Var(name=x):
            _need(contexts, x)
            return _times(contexts, contexts.column(x))
        case Cmp(op="=" | "!=" as op, left=left, right=Value(value=None)):  # (un)defined: x = ⊥, x ≠ ⊥
            value = _operand(left, contexts)
            defined = pc.is_valid(value) if isinstance(value, (pa.Array, pa.ChunkedArray)) else \
                pa.scalar(value.is_valid)
            return _where(contexts, pc.invert(defined) if op == "=" else defined)
        case Cmp(op=op, left=left, right=right):
            a, b = _coerced(_operand(left, contexts), _operand(right, contexts))
            if not _comparable(a, b):  # Spark casts one side first
                return lift(contexts, q)
            return _where(contexts, _compared(op, a, b))
        case Lift(expr=e, condition=condition):
            for x in sorted(inputs(q)):
                _need(contexts, x)
            try:
                value = _scalar(e, contexts)
            except _BySpark:
                return lift(contexts, q)
            if condition and not _boolean(value) or not condition and not _number(value):
                return lift(contexts, q)
            if condition:
                return _where(contexts, value)
            kept = _where(contexts, pc.is_valid(value)) if not isinstance(value, pa.Scalar) else \
                (contexts if value.is_valid else contexts.slice(0, 0))
            if not isinstance(value, pa.Scalar):
                value = value.filter(pc.is_valid(value))
            return _times(kept, value)
        case Assign(var=x, term=t) if isinstance(t, (Var, Value)):
            return _assigned(contexts, x, _operand(t, contexts))
        case Assign(var=x, term=t) if _arithmetic(t, contexts) is not None:
            return _assigned(contexts, x, _arithmetic(t, contexts))
        case Assign(var=x, term=t):
            return _nested(x, t, contexts, relations, maps, constants, lift)
        case Rel() | MapRef():
            return _join(contexts, _gmr_of(q, relations, maps))
        case Add(terms=ts):
            return _union([compile_term(t, contexts, relations, maps, constants, lift) for t in ts])
        case Mul(terms=ts):
            pending = list(ts)
            steps = _Steps(contexts, relations, maps, constants)
            while pending:
                t = pending.pop(0)
                if not isinstance(t, (Rel, MapRef)):
                    contexts = steps.after(t, None, lambda c=contexts, t=t: compile_term(t, c, relations, maps,
                                                                                           constants, lift))
                    continue
                gmr = _gmr_of(t, relations, maps)
                # a relation or map sharing no variable with the contexts: joined on a later
                # factor's equality of one of its variables with one of theirs, or after a
                # relation or map among those that follow it directly that shares one (joins
                # commute; other factors are not passed, as a variable they sum over may bear the
                # same name), rather than crossed with them (Spark's optimizer does the same)
                on = _equated(contexts, gmr, pending)
                if on is None and _variables(contexts) and not _shares(contexts, gmr):
                    joins = len(list(takewhile(lambda u: isinstance(u, (Rel, MapRef)), pending)))
                    k = next((k for k, u in enumerate(pending[:joins])
                              if _shares(contexts, _gmr_of(u, relations, maps))), None)
                    if k is not None:
                        pending[0:0] = [pending.pop(k), t]
                        continue
                contexts = steps.after(t, on, lambda c=contexts, g=gmr, o=on: _join(c, g, o))
            return contexts
        case Sum(group=(), term=Mul(terms=ts)) if not _variables(contexts) and len(parts := _independent(ts)) > 1:
            # factors in groups that share no variable: Σ(A * B) = Σ(A) * Σ(B) (DBToaster §5.1's
            # factorization), each group summed alone instead of over the product of their rows
            value = pc.sum(contexts.column(M)).as_py()
            for part in parts:
                out = compile_term(part[0] if len(part) == 1 else Mul(tuple(part)), unit(), relations, maps,
                                   constants, lift)
                total = pc.sum(out.column(M)).as_py()
                value = None if value is None or total is None else value * total
            return pa.table({M: pa.array([value], pa.float64())})
        case Sum(group=g, term=t):
            keep = list(dict.fromkeys([*_variables(contexts), *g]))
            out = compile_term(t, contexts, relations, maps, constants, lift)
            missing = [x for x in keep if x not in out.column_names]
            if missing:
                raise AgcaError(f"group-by variable {', '.join(missing)} of {q} is not bound")
            return _sum_by(out, keep, M)
        case Exists(term=t):
            # per context (told apart by its row number), the tuples of t whose multiplicity is not 0
            row, kept = exists_columns(contexts.column_names)
            ids = contexts.append_column(row, pa.array(range(contexts.num_rows), pa.int64())) \
                .append_column(kept, contexts.column(M))
            ones = ids.set_column(ids.column_names.index(M), M, pa.array([1.0] * ids.num_rows, pa.float64()))
            out = compile_term(t, ones, relations, maps, constants, lift)
            support = _sum_by(out, [c for c in out.column_names if c != M], M)
            support = _where(support, pc.not_equal(support.column(M), 0.0))
            support = support.set_column(support.column_names.index(M), M, support.column(kept))
            return support.drop_columns([row, kept])
    raise AgcaError(f"not an AGCA term: {q!r}")


# --- helpers ---------------------------------------------------------------------------------------

def _variables(t: pa.Table) -> list[str]:
    return [c for c in t.column_names if c != M]


def _need(t: pa.Table, x: str) -> None:
    if x not in t.column_names:
        raise AgcaError(f"variable {x} is not bound here")


def _times(t: pa.Table, factor) -> pa.Table:
    """``t`` with its multiplicities multiplied by ``factor`` (a column or a scalar; NULL stays NULL)."""
    m = pc.multiply(t.column(M), pc.cast(factor, pa.float64()))
    return t.set_column(t.column_names.index(M), M, m)


def _where(t: pa.Table, mask) -> pa.Table:
    """The rows of ``t`` where ``mask`` is true (NULL: dropped, as Spark's filter)."""
    if isinstance(mask, pa.Scalar):
        return t if mask.is_valid and mask.as_py() else t.slice(0, 0)
    return t.filter(mask, null_selection_behavior="drop")


def _operand(o, t: pa.Table):
    if isinstance(o, Var):
        _need(t, o.name)
        return t.column(o.name)
    return pa.scalar(o.value)


class _BySpark(Exception):
    """A scalar expression :func:`_scalar` leaves to Spark."""


def scalar_column(t, table: pa.Table) -> "pa.Array | pa.ChunkedArray | None":
    """The value of the scalar term ``t`` (:mod:`idivm.algebra.expressions`) in every row of
    ``table`` as a column (a constant repeated), or None when Arrow might give it otherwise
    than Spark (:func:`_scalar`)."""
    try:
        value = _scalar(t, table)
    except _BySpark:
        return None
    return pa.repeat(value, table.num_rows) if isinstance(value, pa.Scalar) else value


#: functions of :mod:`idivm.exec.terms` evaluated here, on numbers (not decimals) and booleans
_ARITHMETIC = {"add": pc.add_checked, "sub": pc.subtract_checked, "mul": pc.multiply_checked}
_COMPARISON = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _scalar(t, table: pa.Table):
    """The value of the scalar term ``t`` (:mod:`idivm.algebra.expressions`) in every row of
    ``table``: a column, or a scalar when it reads no variable; :class:`_BySpark` for anything
    whose value Arrow might give otherwise than :func:`idivm.exec.terms.compile_term`
    (decimals, strings but in comparisons and LIKE, casts, most functions)."""
    from idivm.algebra.expressions import Call, Const as Literal, Var as Variable

    match t:
        case Literal(value=v):
            if v is not None and not isinstance(v, (bool, int, float, str)):
                raise _BySpark
            return pa.scalar(v)
        case Variable(name=n):
            _need(table, n)
            return table.column(n)
        case Call(function=f, args=args):
            a = [_scalar(x, table) for x in args]
            if f in _COMPARISON:
                x, y = _coerced(a[0], a[1])
                if not _comparable(x, y):
                    raise _BySpark
                return _compared(_COMPARISON[f], x, y)
            if f in ("and", "or"):
                if not all(_boolean(x) for x in a):
                    raise _BySpark
                out = a[0]
                for x in a[1:]:
                    out = pc.and_kleene(out, x) if f == "and" else pc.or_kleene(out, x)
                return out
            if f == "not" and _boolean(a[0]):
                return pc.invert(a[0])
            if f == "is_null":
                return pc.is_null(a[0]) if not isinstance(a[0], pa.Scalar) else pa.scalar(not a[0].is_valid)
            if f == "like" and all(pa.types.is_string(x.type) for x in a) and isinstance(a[1], pa.Scalar) \
                    and not isinstance(a[0], pa.Scalar) and a[1].is_valid:
                return pc.match_like(a[0], a[1].as_py())
            if f in _ARITHMETIC and all(_number(x) for x in a):
                return _ARITHMETIC[f](a[0], a[1])
            if f == "neg" and _number(a[0]):
                return pc.negate_checked(a[0])
            if f == "div" and all(_number(x) for x in a):  # a double; NULL where the divisor is 0
                x, y = (pc.cast(v, pa.float64()) for v in a)
                return pc.if_else(pc.equal(y, 0.0), pa.scalar(None, pa.float64()), pc.divide(x, y))
    raise _BySpark


def _number(x) -> bool:
    return pa.types.is_integer(x.type) or pa.types.is_floating(x.type)


def _boolean(x) -> bool:
    return pa.types.is_boolean(x.type) or pa.types.is_null(x.type)


def _coerced(a, b):
    """``a`` and ``b``, a string constant compared with a date read as a date (as Spark casts
    it; a string that is not a date is left to Spark)."""
    import datetime

    for x, y, swap in ((a, b, False), (b, a, True)):
        if pa.types.is_date32(x.type) and isinstance(y, pa.Scalar) and pa.types.is_string(y.type) and y.is_valid:
            try:
                day = pa.scalar(datetime.date.fromisoformat(y.as_py()), pa.date32())
            except ValueError:
                return a, b
            return (day, x) if swap else (x, day)
    return a, b


def _comparable(a, b) -> bool:
    """Whether Arrow compares ``a`` and ``b`` as Spark does: both numbers (not decimals), or of
    one scalar type; otherwise Spark casts one of them first."""
    ta, tb = a.type, b.type
    if pa.types.is_null(ta) or pa.types.is_null(tb):
        return True
    number = (pa.types.is_integer, pa.types.is_floating)
    if any(f(ta) for f in number) and any(f(tb) for f in number):
        return True
    return ta == tb and not pa.types.is_nested(ta) and not pa.types.is_decimal(ta)


def _compared(op: str, a, b):
    """The comparison ``a op b`` (:data:`~idivm.agca.terms.COMPARISONS`; ``~`` within rounding)."""
    plain = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
             ">=": pc.greater_equal}
    if not op.startswith("~"):
        return plain[op](a, b)
    scale = pc.max_element_wise(pc.max_element_wise(pc.abs(a), pc.abs(b)), pa.scalar(1.0))
    near = pc.less_equal(pc.abs(pc.subtract(a, b)), pc.multiply(pa.scalar(ROUNDING), scale))
    return {"~=": near, "~!=": pc.invert(near), "~<": pc.and_kleene(pc.less(a, b), pc.invert(near)),
            "~>": pc.and_kleene(pc.greater(a, b), pc.invert(near)),
            "~<=": pc.or_kleene(pc.less_equal(a, b), near), "~>=": pc.or_kleene(pc.greater_equal(a, b), near)}[op]


def _arithmetic(t, contexts: pa.Table):
    """``t`` as a column (or scalar) when it is arithmetic on constants and bound variables,
    else None."""
    match t:
        case Const(value=c):
            return pa.scalar(c)
        case Var(name=x):
            return contexts.column(x) if x in contexts.column_names else None
        case Mul(terms=ts) | Add(terms=ts):
            parts = [_arithmetic(x, contexts) for x in ts]
            if any(p is None for p in parts):
                return None
            out = parts[0]
            for p in parts[1:]:
                out = pc.multiply(out, p) if isinstance(t, Mul) else pc.add(out, p)
            return out
    return None


def _assigned(t: pa.Table, x: str, value) -> pa.Table:
    """``x := value``: the rows whose ``x`` equals it when ``x`` is bound, else ``x`` bound to it."""
    if x in t.column_names:
        return _where(t, pc.equal(t.column(x), value))
    if isinstance(value, pa.Scalar):
        value = pa.array([value.as_py()] * t.num_rows, value.type)
    return t.append_column(x, value)


def _atom(rows: pa.Table, variables: Sequence[str]) -> pa.Table:
    """A relation's GMR (its columns in order, then :data:`M`) with its columns renamed to the
    atom's variables; a variable named twice selects the rows that agree."""
    columns = _variables(rows)
    if len(columns) != len(variables):
        raise AgcaError(f"a relation of {len(columns)} columns read as an atom of {len(variables)}")
    first: dict[str, str] = {}
    out = rows
    for c, x in zip(columns, variables):
        if x in first:
            out = _where(out, pc.equal(out.column(first[x]), out.column(c)))
        else:
            first[x] = c
    return pa.table([out.column(c) for c in first.values()] + [out.column(M)], names=[*first, M])


def _gmr_of(q: "Rel | MapRef", relations: Mapping[str, pa.Table],
            maps: Mapping[str, "pa.Table | Lookup"]) -> "pa.Table | _MapRows":
    """The GMR a relation atom or a map reference reads, its columns named by its variables
    (a map given as a :class:`Lookup`: its rows to be looked up by the join)."""
    if isinstance(q, Rel):
        key = f"Δ{q.name}" if q.delta else q.name
        if key not in relations:
            raise AgcaError(f"no rows given for {key}")
        return _atom(relations[key], q.variables)
    if q.name not in maps:
        raise AgcaError(f"no map {q.name}")
    stored, here = maps[q.name], dict(q.renames)
    if isinstance(stored, Lookup):  # its rows read by :func:`_join`, looked up when it can
        return _MapRows(stored, here)
    return stored.rename_columns([here.get(c, c) if c != M else M for c in stored.column_names])


def _shares(contexts: pa.Table, gmr: pa.Table) -> bool:
    """Whether ``gmr`` has a variable the contexts bind."""
    return any(x in contexts.column_names for x in _variables(gmr))


def _equated(contexts: pa.Table, gmr: pa.Table, later: Sequence[Term]) -> tuple[str, str] | None:
    """When ``gmr`` shares no variable with ``contexts``: a pair (a variable of the contexts, one
    of ``gmr``) of the same type that a factor of ``later`` equates (``a = b``, or ``a := b``), if
    any."""
    if _shares(contexts, gmr):
        return None
    for t in later:
        if isinstance(t, Cmp) and t.op == "=" and isinstance(t.left, Var) and isinstance(t.right, Var) or \
                isinstance(t, Assign) and isinstance(t.term, Var):  # x := y with both bound tests x = y
            left, right = (t.left.name, t.right.name) if isinstance(t, Cmp) else (t.var, t.term.name)
            for a, b in ((left, right), (right, left)):
                if a in _variables(contexts) and b in _variables(gmr) and \
                        contexts.schema.field(a).type == gmr.schema.field(b).type:
                    return a, b
    return None


def _join(contexts: pa.Table, gmr: "pa.Table | _MapRows", on: tuple[str, str] | None = None) -> pa.Table:
    """The natural join of contexts and a GMR on their shared variables (equal values, never
    NULL), multiplicities multiplied; ``on=(a, b)``: sharing none, joined where the contexts'
    ``a`` equals the GMR's ``b`` (both kept), which a later factor requires."""
    shared = [x for x in _variables(gmr) if x in contexts.column_names]
    if isinstance(gmr, _MapRows):
        gmr = gmr.matching(shared[0], contexts, shared[0]) if shared else \
            gmr.matching(on[1], contexts, on[0]) if on is not None else gmr.table()
    right = gmr.rename_columns([_M2 if c == M else c for c in gmr.column_names])
    if shared:
        right = _conformed(right, contexts, shared)
        left, right = _narrowed(contexts, right, shared, shared)
        joined = left.join(right, shared, join_type="inner", coalesce_keys=True)
    elif on is not None:
        left, right = _narrowed(contexts, right, [on[0]], [on[1]])
        joined = left.join(right, on[0], right_keys=on[1], join_type="inner", coalesce_keys=False)
    else:
        joined = _cross(contexts, right)
    joined = _times(joined, joined.column(_M2))
    return joined.drop_columns([_M2])


#: a side of a join this many times larger than the other is first narrowed to the rows whose
#: keys the other holds (:func:`_narrowed`)
NARROW_RATIO = 8


def _narrowed(left: pa.Table, right: pa.Table, left_keys: Sequence[str],
              right_keys: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """``left`` and ``right``, the larger (by :data:`NARROW_RATIO` at least) kept to the rows
    whose join keys are among the smaller's, one key after the other: a batch joined with a
    large map then hashes the batch's few matches, not the whole map.  NULL keys, which no join
    matches, are dropped as well."""
    if right.num_rows >= NARROW_RATIO * max(left.num_rows, 1):
        return left, _keep_matching(right, right_keys, left, left_keys)
    if left.num_rows >= NARROW_RATIO * max(right.num_rows, 1):
        return _keep_matching(left, left_keys, right, right_keys), right
    return left, right


def _keep_matching(big: pa.Table, big_keys: Sequence[str], small: pa.Table, small_keys: Sequence[str]) -> pa.Table:
    """The rows of ``big`` whose ``big_keys`` hold values of ``small``'s ``small_keys`` (of the
    same types: :func:`_join` conforms them first)."""
    for b, k in zip(big_keys, small_keys):
        values = pc.unique(small.column(k)).drop_null()
        big = big.filter(pc.fill_null(pc.is_in(big.column(b), value_set=values), False))
    return big


def _conformed(right: pa.Table, left: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``right`` with its ``keys`` in ``left``'s types (a hash join matches equal types only)."""
    for k in keys:
        want = left.schema.field(k).type
        if right.schema.field(k).type != want:
            i = right.column_names.index(k)
            right = right.set_column(i, k, pc.cast(right.column(k), want))
    return right


def _cross(left: pa.Table, right: pa.Table) -> pa.Table:
    """Every row of ``left`` with every row of ``right`` (no shared column)."""
    import numpy as np

    n, m = left.num_rows, right.num_rows
    li = pa.array(np.repeat(np.arange(n, dtype=np.int64), m))
    ri = pa.array(np.tile(np.arange(m, dtype=np.int64), n))
    lt, rt = left.take(li), right.take(ri)
    return pa.table([*lt.columns, *rt.columns], names=[*lt.column_names, *rt.column_names])


def _union(parts: Sequence[pa.Table]) -> pa.Table:
    """The rows of every part, by column name (NULL where a part lacks a column)."""
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts, promote_options="permissive")


def _sum_by(t: pa.Table, keys: Sequence[str], column: str) -> pa.Table:
    """The sum of ``column`` per distinct ``keys`` (NULL keys grouped together), named ``column``;
    without keys, one row (NULL when ``t`` has no row), as Spark's aggregate without keys."""
    keys = list(keys)
    if not keys:
        return pa.table({column: pa.array([pc.sum(t.column(column)).as_py()], pa.float64())})
    out = t.select([*keys, column]).group_by(keys, use_threads=False).aggregate([(column, "sum")])
    return out.select([*keys, f"{column}_sum"]).rename_columns([*keys, column])


class _Steps:
    """The contexts after each factor of a product evaluated from ``start``, remembered in
    ``constants`` (the memo of one evaluation of a trigger program's statements) by the factors
    taken so far and the identities of the tables each reads: the statements of a trigger whose
    products begin alike (the same batch, assignments and maps, then each its own map or
    value) evaluate those first factors once."""

    def __init__(self, start: pa.Table, relations, maps, constants: dict) -> None:
        self.start, self.relations, self.maps = start, relations, maps
        self.memo = constants.setdefault(_Steps, {})
        self.done: tuple = ()

    def after(self, t: Term, on, step: Callable[[], pa.Table]) -> pa.Table:
        """The contexts after ``t`` (joined ``on``): remembered, or ``step()``."""
        (_, ids), read = constant_key(t, self.relations, self.maps)
        self.done += ((t, on, ids),)
        key = (id(self.start), self.done)
        if key not in self.memo:
            # the start and the tables read stay held, so that their identities stay theirs
            self.memo[key] = (step(), self.start, read)
        return self.memo[key][0]


def _nested(x: str, q: Term, contexts: pa.Table, relations, maps, constants: dict, lift: Lifter) -> pa.Table:
    """``x := q`` per context (:func:`idivm.agca.spark._nested`): ``q`` evaluated once per
    distinct value of its inputs and joined back, 0 where it has no tuple; without inputs, one
    value computed once for the tables it reads (``constants``)."""
    params = sorted(inputs(q))
    for p in params:
        _need(contexts, p)
    if not params:
        key, read = constant_key(q, relations, maps)
        if key not in constants:
            value = compile_term(q, unit(), relations, maps, constants, lift)
            _single(x, value, params)
            total = pc.sum(value.column(M)).as_py()
            constants[key] = (float(total) if total is not None else 0.0, read)
        return _assigned(contexts, x, pa.scalar(constants[key][0], pa.float64()))
    envs = _distinct(contexts.select(params))
    value = _range_sums(q, params, envs, maps)
    if value is None:
        envs = envs.append_column(M, pa.array([1.0] * envs.num_rows, pa.float64()))
        value = compile_term(q, envs, relations, maps, constants, lift)
        _single(x, value, params)
        value = _sum_by(value, params, M)
    value = value.rename_columns([*params, _VALUE])
    joined = contexts.join(_conformed(value, contexts, params), params, join_type="left outer", coalesce_keys=True)
    v = pc.fill_null(joined.column(_VALUE), 0.0)
    joined = joined.drop_columns([_VALUE])
    if x in joined.column_names:
        return _where(joined, pc.equal(joined.column(x), v))
    return joined.append_column(x, v)


def _independent(factors: Sequence[Term]) -> list[list[Term]]:
    """``factors`` in groups, each in its order, no two groups sharing a variable (one of a
    factor's inputs or outputs)."""
    groups: list[tuple[set[str], list[int]]] = []  # (variables, positions of the factors)
    for i, t in enumerate(factors):
        names, members = set(inputs(t) | outputs(t)), [i]
        for g in [g for g in groups if g[0] & names]:
            groups.remove(g)
            names |= g[0]
            members += g[1]
        groups.append((names, members))
    return [[factors[i] for i in sorted(members)] for _, members in groups]


#: the inequalities, which a sum over a sorted map reads by binary search (:func:`_range_sums`)
_INEQUALITIES = frozenset({"<", "<=", ">", ">="})


def _range_sums(q: Term, params: Sequence[str], envs: pa.Table, maps) -> pa.Table | None:
    """``Sum[](m[][k] * (k θ p))`` for each value of its one input ``p`` in ``envs``, θ an
    inequality and ``m`` a map of one numeric key: the map's entries sorted by ``k`` and their
    running sums, and per value of ``p`` a binary search for where ``k θ p`` starts or ends to
    read the sum there.  This is the nested aggregate correlated on an inequality (VWAP's
    "the volume priced above this price", DBToaster §8): a pass over the map and one over the
    values, where the join it stands for pairs every value with every entry.  (``envs``' ``p``
    with its sum, 0 where no entry qualifies or ``p`` is NULL, as :func:`_nested` reads an
    aggregate without tuples; None for any other term.)"""
    if len(params) != 1 or not isinstance(q, Sum) or q.group or not isinstance(q.term, Mul) \
            or len(q.term.terms) != 2:
        return None
    ref = next((t for t in q.term.terms if isinstance(t, MapRef)), None)
    cmp = next((t for t in q.term.terms if isinstance(t, Cmp)), None)
    if ref is None or cmp is None or ref.inputs or ref.name not in maps or cmp.op not in _INEQUALITIES \
            or not (isinstance(cmp.left, Var) and isinstance(cmp.right, Var)):
        return None
    (p,) = params
    entries = _gmr_of(ref, {}, maps)
    entries = entries.table() if isinstance(entries, _MapRows) else entries
    if len(_variables(entries)) != 1:
        return None
    (k,) = _variables(entries)
    if (cmp.left.name, cmp.right.name) == (k, p):
        op = cmp.op
    elif (cmp.left.name, cmp.right.name) == (p, k):
        op = FLIPPED[cmp.op]
    else:
        return None
    kt, pt = entries.schema.field(k).type, envs.schema.field(p).type
    if not all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in (kt, pt)):
        return None
    common = np.int64 if pa.types.is_integer(kt) and pa.types.is_integer(pt) else np.float64
    entries = entries.filter(pc.is_valid(entries.column(k)))
    order = pc.sort_indices(entries.column(k))
    keys = entries.column(k).take(order).to_numpy().astype(common)
    m = pc.fill_null(entries.column(M).take(order), 0.0).to_numpy()
    values = envs.column(p)
    valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
    at = pc.fill_null(values, 0).to_numpy().astype(common)
    n = len(keys)
    if op in (">", ">="):  # the entries from the first with k θ p on: a sum from the top
        start = np.searchsorted(keys, at, side="right" if op == ">" else "left")
        suffix = np.append(np.cumsum(m[::-1])[::-1], 0.0)
        sums = suffix[start]
    else:  # the entries up to the last with k θ p
        end = np.searchsorted(keys, at, side="left" if op == "<" else "right")
        prefix = np.insert(np.cumsum(m), 0, 0.0)
        sums = prefix[end]
    sums = np.where(valid & (n > 0), sums, 0.0)
    return pa.table({p: values, M: pa.array(sums, pa.float64())})


def _distinct(t: pa.Table) -> pa.Table:
    return t.group_by(t.column_names, use_threads=False).aggregate([]) if t.num_columns else t.slice(0, 1)


def _single(x: str, value: pa.Table, params: Sequence[str]) -> None:
    extra = [c for c in _variables(value) if c not in params]
    if extra:
        raise AgcaError(f"the right side of {x} := … groups by {', '.join(extra)}: it must be a single value")


# --- the increments of a run's maps, packed ------------------------------------------------------

def tagged(t: pa.Table, name: str, keys: Sequence[str], tag: str) -> pa.Table:
    """``t``'s ``keys`` and :data:`M`, with a first column ``tag`` holding ``name``."""
    return pa.table([pa.array([name] * t.num_rows, pa.string()), *[t.column(k) for k in keys], t.column(M)],
                    names=[tag, *keys, M])


def unpacked(packed: pa.Table, name: str, keys: Sequence[str], tag: str) -> pa.Table:
    """The rows of ``packed`` tagged ``name``: its ``keys`` and :data:`M`."""
    rows = packed.filter(pc.equal(packed.column(tag), name))
    return rows.select([*keys, M])


def negated(t: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``t``'s ``keys`` with the multiplicities negated."""
    return pa.table([*[t.column(k) for k in keys], pc.negate(t.column(M))], names=[*keys, M])


# --- NULL-safe matching of group values ------------------------------------------------------------

def matched(left: pa.Table, right: pa.Table, on: Sequence[str], how: str) -> pa.Table:
    """``left`` joined with ``right`` on the columns ``on`` both have, NULL equal to NULL (SQL's
    ``IS NOT DISTINCT FROM``); ``how`` is ``"left semi"`` or ``"left outer"`` (the result has
    ``left``'s columns, then ``right``'s others).  Each key is matched as a pair (is it NULL,
    its value with NULL replaced by a fixed value of its type)."""
    on = list(on)
    if not on:  # nothing to match: every row matches (a GROUP BY without keys)
        if how == "left semi":
            return left if right.num_rows else left.slice(0, 0)
        return _cross(left, right) if right.num_rows else _union([left, right.slice(0, 0)])
    right = _conformed(right, left, on)
    pairs = [(f"__n{i}", f"__v{i}") for i in range(len(on))]

    def paired(t: pa.Table) -> pa.Table:
        for k, (n, v) in zip(on, pairs):
            column = t.column(k)
            t = t.append_column(n, pc.is_null(column)).append_column(v, pc.fill_null(column, _filler(column.type)))
        return t

    keys = [c for p in pairs for c in p]
    helpers = set(keys)
    out = paired(left).join(paired(right).drop_columns(on), keys, join_type=how, coalesce_keys=True)
    return out.drop_columns([c for c in out.column_names if c in helpers])


def _filler(t: pa.DataType) -> pa.Scalar:
    """A fixed value of type ``t`` standing for NULL in :func:`matched`'s pairs."""
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return pa.scalar(0).cast(t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", t)
    if pa.types.is_boolean(t):
        return pa.scalar(False)
    if pa.types.is_date32(t):
        return pa.scalar(0, pa.int32()).cast(t)
    raise pa.ArrowNotImplementedError(f"no NULL-safe matching of {t} values here")
