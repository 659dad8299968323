"""Plan -> Spark DataFrame, with SQL++ semantics.

Each variable of a binding tuple is a DataFrame column (tuples are struct
columns, collections array columns).  Compilation is keyed by operator class
(:data:`_COMPILERS`) and fails loudly on an operator it does not know; the terms the
operators hold become columns by :func:`idivm.exec.terms.compile_term`.

Nested plans (ApplyPlan, InnerCorrelate, LeftCorrelate) are decorrelated the
magic-set way: the nested plan is evaluated once for every *distinct* value of
its correlation parameters (its free variables, pruned to the fields it
reads); that set of environments is what its ``Ground`` produces, and every
operator of the nested plan carries the environment columns along.  The
results are joined back to the outer binding tuples by null-safe equality on
the parameters.  At top level ``Ground`` is a single empty binding tuple.
The outer tuples are evaluated twice there (for the environments and for the
join back), so every bag is built sorted (:func:`_bag`): a GROUP AS bag or a
subquery's bag used as a parameter has the same value both times, however
Spark partitions the work.
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass
from typing import Callable, Hashable

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as ST

from idivm.algebra import operators as O
from idivm.algebra import restrict
from idivm.algebra.expressions import TRUE, Field, TableRef, TupleExpr, Var, field_paths
from idivm.errors import InternalError
from idivm.exec.terms import all_true, array_statistic, col, collection_function, compile_term, statistic
from idivm.storage.delta import quoted
from idivm.storage.schema import arrow_schema
from idivm.storage.spark import Caches, is_local, local_rows, to_arrow


@dataclass(frozen=True)
class Env:
    """The environment a (nested) plan runs in: ``df`` has one row per distinct environment
    (None at top level: a single empty binding tuple) with columns ``cols``."""

    df: DataFrame | None
    cols: tuple[str, ...]


TOP = Env(None, ())

#: the most keys a restricted read lists (more: the table is read whole)
RESTRICT_MAX_VALUES = 1_000
#: the column types a restricted read compares (not floating point: NaN and -0.0)
KEY_TYPES = (ST.StringType, ST.IntegralType, ST.DateType, ST.BooleanType, ST.DecimalType)


def key_filter(name: str, values: list, nulls: bool) -> Column:
    """Column ``name`` is one of ``values`` (their NULLs aside), or NULL when ``nulls``: the
    filter of a read restricted to a few keys (:mod:`idivm.algebra.restrict`).  Built as one
    SQL expression when every value has a SQL literal (:func:`sql_literal`): one Py4J call,
    where ``isin`` makes one per value (0.74 s for 400 values)."""
    keys = sorted({v for v in values if v is not None})
    if not keys:
        cond = F.lit(False)
    else:
        literals = [sql_literal(v) for v in keys]
        cond = (F.expr(f"{quoted(name)} IN ({', '.join(literals)})") if all(x is not None for x in literals)
                else col(name).isin(keys))
    return cond | col(name).isNull() if nulls else cond


def sql_literal(value) -> str | None:
    """``value`` (a key: a string, an integer, a boolean, a date or a decimal) as a Spark SQL
    literal; None for any other value."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, datetime.datetime):
        return None
    if isinstance(value, datetime.date):
        return f"DATE'{value.isoformat()}'"
    if isinstance(value, decimal.Decimal) and value.is_finite():
        return f"{value:f}BD"
    return None


class PlanCompiler:
    """Compiles plans against base tables given by ``read_table(name) -> DataFrame`` (``name``:
    what a scan's :class:`TableRef` names, a table or a Δ-script's i-diff or state of one)."""

    def __init__(self, spark: SparkSession, read_table: Callable[[Hashable], DataFrame],
                 restrict: Callable[[Hashable], bool] | None = None, progress: Callable[[str], None] | None = None,
                 in_memory: Callable[[Hashable], pa.Table | None] | None = None, cached: Caches | None = None):
        """``restrict(name)``: whether scans of table ``name`` (a base-table state, not an
        i-diff) are read restricted to the keys the query's i-diffs name (see
        :mod:`idivm.algebra.restrict`); ``progress`` hears of each restriction.
        ``in_memory(name)``: the rows of table ``name`` when the driver holds them (an
        i-diff), else None; the values of a restriction that reads such a table alone are
        taken from them, without a Spark job.  ``cached``: the owner of the frames the
        compiler caches (default: its own)."""
        self.spark = spark
        self._read_table = read_table
        self._in_memory = in_memory
        self._tables: dict[Hashable, DataFrame] = {}
        self._bound: list[tuple[O.Operator, DataFrame]] = []
        self._counter = 0
        self._restrict = restrict
        self._progress = progress
        #: id(scan) -> its table's rows restricted to the keys named, while a plan is compiled
        self._restrictions: dict[int, DataFrame] = {}
        #: what the run keeps in memory: restricted reads read again by the restriction of
        #: another scan, and the aggregates several statements read (see delta_script)
        self.cached = cached if cached is not None else Caches()
        #: (table, column, value, null-safe, restrictions of the source's scans), source, values
        self._values: list[tuple[tuple, O.Operator, list | None]] = []
        #: id(scan) -> the restriction of its read as a value, while a plan is compiled
        self._keyed: dict[int, tuple] = {}
        #: the subplans a plan being compiled holds more than once (see :meth:`_repeated`), and
        #: those computed so far: (subplan, restrictions of its reads, result in memory)
        self._repeats: list[tuple[O.Operator, tuple]] = []
        self._computed: list[tuple[O.Operator, tuple, DataFrame]] = []

    def bind(self, op: O.Operator, df: DataFrame) -> None:
        """Use ``df`` as the (top-level) result of ``op`` from now on, and of every equal
        operator (the generator and the minimizer may have copied a subplan several queries
        share): it is computed once."""
        self._bound.append((op, df))

    # ------------------------------------------------------------------ entry points

    def evaluate(self, plan: O.Operator) -> DataFrame:
        """A top-level query plan (rooted at ReturnBag) as a DataFrame of its elements.

        Tuple elements become one column per field; other elements one column ``value``.
        """
        if not isinstance(plan, O.ReturnBag):
            raise InternalError(f"a query plan must end in ReturnBag, not {plan.name}")
        df = self.bindings(plan.input)
        el = plan.element
        if isinstance(el, TupleExpr):
            return df.select(*[compile_term(t).alias(n) for n, t in el.fields])
        out = df.select(compile_term(el).alias("__element"))
        if isinstance(out.schema["__element"].dataType, ST.StructType):
            return out.select("__element.*")
        return out.withColumnRenamed("__element", "value")

    def bindings(self, op: O.Operator) -> DataFrame:
        """The binding tuples of a top-level plan ``op`` (one column per variable), its table
        scans read restricted to the keys its i-diffs name (:meth:`_restricted`)."""
        self._restrictions = self._restricted(op) if self._restrict is not None else {}
        self._repeats = self._repeated(op)
        try:
            return self.compile(op, TOP)
        finally:
            self._restrictions, self._keyed, self._repeats = {}, {}, []

    def compile(self, op: O.Operator, env: Env) -> DataFrame:
        if env is TOP and (df := self._bound_result(op)) is not None:
            return df
        fn = _COMPILERS.get(type(op))
        if fn is None:
            raise InternalError(f"no Spark compilation for operator {op.name}")
        key = self._small(op) if env is TOP and self._repeats else None
        if key is None or _among(self._repeats, op, key) is None:
            return fn(self, op, env)
        done = _among(self._computed, op, key)
        if done is None:
            df = fn(self, op, env)
            done = (op, key, self.cached.computed(df)[1])
            self._computed.append(done)
        return done[2]

    def _small(self, op: O.Operator) -> tuple | None:
        """For a subplan of an i-diff query whose every table scan is an i-diff or a read
        restricted to the keys its i-diffs name: the restrictions of its reads (equal subplans
        under equal restrictions have the same result); None for any other subplan, and for
        a table scan alone (no work to share)."""
        if self._restrict is None or isinstance(op, O.Ground) or \
                (isinstance(op, O.ScanCollection) and isinstance(op.source, TableRef)):
            return None
        scans = restrict.table_scans(op)
        if not scans or any(self._restrict(s.source.name) and id(s) not in self._restrictions  # type: ignore
                            for s in scans):
            return None
        return tuple(self._keyed.get(id(s)) for s in scans)

    def _repeated(self, plan: O.Operator) -> list[tuple[O.Operator, tuple]]:
        """The small subplans (:meth:`_small`) that ``plan`` holds more than once (the pre and
        post state of the pairs a left join's change names, once for the pairs and once for
        their padded tuples): each is computed once, when first compiled, and its result,
        few rows, kept in memory for the others (Spark would compute every copy)."""
        if self._restrict is None:
            return []
        seen: list[tuple[O.Operator, tuple]] = []
        out: list[tuple[O.Operator, tuple]] = []
        for op in O.walk(plan, into_nested=False):
            key = self._small(op)
            if key is None:
                continue
            if _among(seen, op, key) is None:
                seen.append((op, key))
            elif _among(out, op, key) is None:
                out.append((op, key))
        # a repeat inside another is computed with it
        return [(op, key) for op, key in out
                if not any(o is not op and any(x == op for x in O.walk(o, into_nested=False)) for o, _ in out)]

    # ------------------------------------------------------------------ restricted reads

    def _restricted(self, plan: O.Operator) -> dict[int, DataFrame]:
        """The restricted reads of the table scans of ``plan`` that may read only the keys its
        i-diffs name (:mod:`idivm.algebra.restrict`): each candidate whose source reads only
        i-diffs and restricted scans is evaluated (its distinct values, up to
        :data:`RESTRICT_MAX_VALUES`), until no candidate is left; the reads found so far apply
        while a source is evaluated.  A restricted read that the source of another candidate
        reads is kept in memory (:attr:`cached`), so the query reads it once, not twice."""
        # a subplan bound to a computed result (the keys of a replace, which its post-state
        # query reads again) reads no table: neither restricted nor waited for
        bound = frozenset(id(o) for o in O.walk(plan, into_nested=False) if self._bound_result(o) is not None)
        big = {id(s) for s in restrict.table_scans(plan, bound) if self._restrict(s.source.name)}  # type: ignore
        once = big & restrict.scanned_once(plan)
        open_ = [c for c in restrict.candidates(plan) if id(c.scan) in once]
        reads = {id(c): restrict.table_scans(c.source, bound) for c in open_}  # the scans a source reads
        found: dict[int, DataFrame] = {}
        keyed = self._keyed = {}  # id(scan) -> the restriction of its read, as a value
        progressed = True
        while progressed:
            progressed = False
            for c in list(open_):
                if id(c.scan) in found:
                    open_.remove(c)
                    continue
                if O.free_variables(c.source) or any(id(s) in big and id(s) not in found for s in reads[id(c)]):
                    continue
                open_.remove(c)
                self._restrictions = found
                name = c.scan.source.name  # type: ignore[attr-defined]
                # the same values over an equal source read under the same restrictions (another
                # statement of the run, a copy of a subplan) are computed once
                key = (name, c.column, c.value, c.null_safe, tuple(keyed.get(id(s)) for s in reads[id(c)]))
                memo = next((m for m in self._values if m[0] == key and m[1] == c.source), None)
                rows = memo[2] if memo is not None else self._restriction_values(c)
                if memo is None:
                    self._values.append((key, c.source, rows))
                if rows is None or (c.padded and c.null_safe and None in rows):
                    continue  # (a NULL value would let padded rows the restriction makes through)
                read = self.table(name).filter(key_filter(c.column, rows, c.null_safe))
                keyed[id(c.scan)] = (name, c.column, c.null_safe, frozenset(rows))
                if any(s is c.scan for o in open_ if id(o.scan) not in found and o.scan is not c.scan
                       for s in reads[id(o)]):
                    read = self.cached.add(read)
                found[id(c.scan)] = read
                progressed = True
                if self._progress:
                    self._progress(f"{c.scan.source.name}: read where {c.column} is one of "  # type: ignore
                                   f"{sum(v is not None for v in rows)} value(s)")
        return found

    def _bound_result(self, op: O.Operator) -> DataFrame | None:
        """The result bound to ``op`` or an operator equal to it (:meth:`bind`), if any."""
        return next((df for other, df in self._bound if other is op or (type(other) is type(op) and other == op)),
                    None)

    def _restriction_values(self, c: restrict.Candidate) -> list | None:
        """The distinct values of candidate ``c`` (None when it cannot restrict: its column is
        not a key type, the types differ, or there are more than :data:`RESTRICT_MAX_VALUES`)."""
        table = self.table(c.scan.source.name)  # type: ignore[attr-defined]
        column = table.schema[c.column].dataType if c.column in table.columns else None
        if not isinstance(column, KEY_TYPES):
            return None
        held = self._held_column(c)
        if held is not None:  # a column of rows the driver holds: no Spark job
            name, values = held
            kind = self.table(name).schema[c.value.name].dataType  # type: ignore[attr-defined]
        else:
            query = self.compile(c.source, TOP).select(compile_term(c.value).alias("v")).distinct()
            kind = query.schema["v"].dataType
        if kind != column:
            return None
        # the values of reads restricted to a few keys: few, in one job (no adaptive stages)
        rows = values.unique().to_pylist() if held is not None else \
            to_arrow(query.limit(RESTRICT_MAX_VALUES + 1), adaptive=False).column(0).to_pylist()
        return rows if len(rows) <= RESTRICT_MAX_VALUES else None

    def _held_column(self, c: restrict.Candidate) -> tuple[Hashable, pa.ChunkedArray] | None:
        """(table, its column) when the values of candidate ``c`` are a column of a table the
        driver holds: its source scans that table alone and its value is a field of the
        scanned tuple."""
        src, value = c.source, c.value
        if (self._in_memory is None or not isinstance(src, O.ScanCollection) or not isinstance(src.source, TableRef)
                or not isinstance(src.input, O.Ground) or not isinstance(value, Field)
                or value.base != Var(src.var)):
            return None
        rows = self._in_memory(src.source.name)
        return (src.source.name, rows.column(value.name)) if rows is not None and value.name in rows.column_names \
            else None

    # ------------------------------------------------------------------ helpers

    def table(self, name: Hashable) -> DataFrame:
        if name not in self._tables:
            self._tables[name] = self._read_table(name)
        return self._tables[name]

    def fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"__{prefix}{self._counter}"

    def ground(self, env: Env) -> DataFrame:
        if env.df is not None:
            return env.df
        return self.spark.range(1).select()

    def keep(self, env: Env, df: DataFrame, *extra: Column | str) -> DataFrame:
        return df.select(*[col(c) for c in env.cols], *extra)

    # ------------------------------------------------------------------ nested plans

    def nested_env(self, outer: DataFrame, plan: O.Operator) -> tuple[DataFrame, list[str], list[str], Env]:
        """Correlation parameters of ``plan`` over the outer binding tuples.

        Returns the outer frame extended with parameter columns, the parameter column
        names, the Env columns they stand for, and the Env of distinct parameters.

        A collection-valued parameter that the plan only iterates (``FROM g AS i`` over a GROUP
        AS bag ``g``) is named in the Env by a digest of its value, and its value is an extra
        column of the Env's frame that no operator keeps: the iteration's rows do not carry the
        whole collection along, which would make a plan over a bag of n elements n² in size.
        """
        free = sorted(O.free_variables(plan) & set(outer.columns))
        paths = _used_paths(plan, set(free))
        scanned = {v for v in _scanned_only(plan, free) if isinstance(outer.schema[v].dataType, ST.ArrayType)}
        names = [self.fresh("h") if v in scanned else v for v in free]
        params = [self.fresh("p") for _ in free]
        keyed = outer.select("*", *[(_digest(col(v)) if v in scanned else
                                     _pruned(col(v), outer.schema[v].dataType, paths.get(v))).alias(p)
                                    for v, p in zip(free, params)])
        envdf = keyed.select(*[col(p).alias(n) for n, p in zip(names, params)],
                             *[col(v) for v in free if v in scanned]).dropDuplicates(names)
        return keyed, params, names, Env(envdf, tuple(names))

    def join_back(self, keyed: DataFrame, params: list[str], free: list[str], res: DataFrame,
                  how: str) -> DataFrame:
        renamed = res.select(*[col(v).alias(p) for v, p in zip(free, params)],
                             *[col(c) for c in res.columns if c not in free])
        if params:
            cond = all_true([keyed[quoted(p)].eqNullSafe(renamed[quoted(p)]) for p in params])
            joined = keyed.join(renamed, cond, how)
            return joined.select(*[keyed[quoted(c)] for c in keyed.columns if c not in params],
                                 *[renamed[quoted(c)] for c in renamed.columns if c not in params])
        return keyed.crossJoin(renamed) if how == "inner" else keyed.join(renamed, F.lit(True), how)

    # ------------------------------------------------------------------ binary operators

    def join(self, op: O.Operator, env: Env, how: str) -> DataFrame:
        left = self.compile(op.inputs()[0], env)
        # a right side that reads nothing of the environment is evaluated once, not once per
        # environment: the left side carries the environment's columns
        independent = env.df is not None and not (O.free_variables(op.inputs()[1]) & set(env.cols))
        right = self.compile(op.inputs()[1], TOP if independent else env)
        cond = op.condition  # type: ignore[attr-defined]
        renames = {} if independent else {e: self.fresh("r") for e in env.cols}
        if renames:
            right = right.select(*[col(c).alias(renames.get(c, c)) for c in right.columns])
        parts: list[Column] = [left[e].eqNullSafe(right[r]) for e, r in renames.items()]
        if cond != TRUE:
            parts.append(compile_term(cond))
        if not parts:
            if how == "inner":
                return left.crossJoin(right)
            parts = [F.lit(True)]
        out = left.join(right, all_true(parts), how)
        if renames and how not in ("left_semi", "left_anti"):
            out = out.drop(*renames.values())
        return out


def _used_paths(plan: O.Operator, free: set[str]) -> dict[str, set[tuple[str, ...]] | None]:
    """For each free variable, the field paths the plan reads below it (None: the whole value)."""
    paths: dict[str, set[tuple[str, ...]] | None] = {}
    for op in O.walk(plan):
        for t in op.terms():
            for v, path in field_paths(t, free):
                if not path:
                    paths[v] = None
                elif paths.get(v, set()) is not None:
                    paths.setdefault(v, set()).add(path)  # type: ignore[union-attr]
    return paths


def _scanned_only(plan: O.Operator, free: list[str]) -> set[str]:
    """The variables of ``free`` that ``plan`` reads only as the collection of a FROM (not in any
    other term, nor in its nested plans)."""
    scanned: set[str] = set()
    other: set[str] = set()
    for op in O.walk(plan, into_nested=False):
        for n in op.nested():
            other |= O.free_variables(n)
        if isinstance(op, O.ScanCollection) and isinstance(op.source, Var):
            scanned.add(op.source.name)
            terms = [t for t in op.terms() if t is not op.source]
        else:
            terms = op.terms()
        for t in terms:
            other |= t.variables()
    return (scanned - other) & set(free)


def _digest(c: Column) -> Column:
    """A name for a collection value: equal values get equal names, and different values
    different ones (SHA-256 of its JSON text)."""
    return F.sha2(F.to_json(c), 256)


def _pruned(c: Column, dtype: ST.DataType, paths: set[tuple[str, ...]] | None) -> Column:
    """Keep only the fields of struct column ``c`` that ``paths`` reach (all if None)."""
    if paths is None or not isinstance(dtype, ST.StructType) or any(len(p) == 0 for p in paths):
        return c
    heads: dict[str, set[tuple[str, ...]]] = {}
    for p in paths:
        heads.setdefault(p[0], set()).add(p[1:])
    fields = []
    for f in dtype.fields:
        if f.name in heads:
            rest = heads[f.name]
            sub = None if any(len(r) == 0 for r in rest) else rest
            fields.append(_pruned(c.getField(f.name), f.dataType, sub).alias(f.name))
    return F.struct(*fields)


def _among(entries: list, op: O.Operator, key: tuple) -> tuple | None:
    """The entry of ``entries`` (tuples starting with a subplan and the restrictions of its
    reads) for a subplan equal to ``op`` under the restrictions ``key``, if any."""
    return next((e for e in entries if e[1] == key and e[0] == op), None)


# ----------------------------------------------------------------------------- operators


def _ground(pc: PlanCompiler, op: O.Ground, env: Env) -> DataFrame:
    return pc.ground(env)


def _scan(pc: PlanCompiler, op: O.ScanCollection, env: Env) -> DataFrame:
    if isinstance(op.source, TableRef):
        t = pc._restrictions[id(op)] if id(op) in pc._restrictions else pc.table(op.source.name)
        rows = t.select(F.struct(*[col(c) for c in t.columns]).alias(op.var))
        if isinstance(op.input, O.Ground) and env.df is None:
            return rows
        return pc.compile(op.input, env).crossJoin(rows)
    df = pc.compile(op.input, env)
    src = compile_term(op.source)
    if op.position or op.occurrence:
        pos = pc.fresh("pos")
        out = df.select("*", F.posexplode(src).alias(pos, op.var))
        if op.position:
            out = out.withColumn(op.position, col(pos) + F.lit(1))
        if op.occurrence:  # 1 + the number of equal elements before this one
            before = F.slice(src, F.lit(1), col(pos))
            out = out.withColumn(op.occurrence,
                                 F.size(F.filter(before, lambda e: e.eqNullSafe(col(op.var)))) + F.lit(1))
        return out.drop(pos)
    return df.select("*", F.explode(src).alias(op.var))


def _nav(pc: PlanCompiler, op: O.NavTuple, env: Env) -> DataFrame:
    df = pc.compile(op.input, env)
    return df.select("*", compile_term(op.base).getField(op.field_name).alias(op.var))


def _select(pc: PlanCompiler, op: O.Select, env: Env) -> DataFrame:
    return pc.compile(op.input, env).filter(compile_term(op.condition))


def _project(pc: PlanCompiler, op: O.Project, env: Env) -> DataFrame:
    df = pc.compile(op.input, env)
    return pc.keep(env, df, *[compile_term(t).alias(v) for v, t in op.outputs])


def _assign(pc: PlanCompiler, op: O.Assign, env: Env) -> DataFrame:
    return pc.compile(op.input, env).select("*", compile_term(op.term).alias(op.var))


def _function(pc: PlanCompiler, op: O.FunctionCall, env: Env) -> DataFrame:
    df = pc.compile(op.input, env)
    arg = compile_term(op.args[0])
    dtype = df.select(arg).schema.fields[0].dataType
    return df.select("*", collection_function(op.function, arg, dtype).alias(op.var))


def _construct_tuple(pc: PlanCompiler, op: O.ConstructTuple, env: Env) -> DataFrame:
    df = pc.compile(op.input, env)
    return df.select("*", F.struct(*[compile_term(t).alias(n) for n, t in op.fields]).alias(op.var))


def _construct_collection(pc: PlanCompiler, op: O.ConstructBag | O.ConstructArray, env: Env) -> DataFrame:
    df = pc.compile(op.input, env)
    return df.select("*", F.array(*[compile_term(t) for t in op.items]).alias(op.var))


def _apply(pc: PlanCompiler, op: O.ApplyPlan, env: Env) -> DataFrame:
    outer = pc.compile(op.input, env)
    keyed, params, free, inner = pc.nested_env(outer, op.plan)
    res = pc.compile(op.plan, inner)  # env columns + one column "__bag"
    joined = pc.join_back(keyed, params, free, res.withColumnRenamed("__bag", op.var), "left")
    el_type = res.schema["__bag"].dataType
    return joined.withColumn(op.var, F.coalesce(col(op.var), F.array().cast(el_type)))


def _correlate(pc: PlanCompiler, op: O.InnerCorrelate | O.LeftCorrelate, env: Env) -> DataFrame:
    outer = pc.compile(op.input, env)
    keyed, params, free, inner = pc.nested_env(outer, op.plan)
    res = pc.compile(op.plan, inner)
    how = "inner" if isinstance(op, O.InnerCorrelate) else "left"
    return pc.join_back(keyed, params, free, res, how)


def _return_bag(pc: PlanCompiler, op: O.ReturnBag, env: Env) -> DataFrame:
    """A nested query's value: per environment, the bag of its elements (column ``__bag``).

    NULL elements stay in the bag: ``collect_list`` skips nulls, so each element is
    collected inside a one-field struct (never null) and unwrapped afterwards.
    """
    df = pc.compile(op.input, env)
    if op.order is None:
        wrapped = _bag(F.struct(compile_term(op.element).alias("e")))
    else:  # an array in the order of the positions (distinct in each environment)
        wrapped = _bag(F.struct(compile_term(op.order).alias("o"), compile_term(op.element).alias("e")))
    bag = F.transform(wrapped, lambda w: w.getField("e")).alias("__bag")
    if not env.cols:
        return df.agg(bag)
    grouped = df.groupBy(*[col(c) for c in env.cols]).agg(bag)
    return grouped


def _order_by(pc: PlanCompiler, op: O.OrderBy, env: Env) -> DataFrame:
    """The position of each binding tuple in its environment: ``row_number`` over a window
    partitioned by the environment, ordered by the keys and then by the tuple's values (those
    Spark can order), so that tuples that tie get positions that do not depend on how Spark
    partitions the work."""
    df = pc.compile(op.input, env)
    keys = [compile_term(t).desc_nulls_last() if d else compile_term(t).asc_nulls_first() for t, d in op.keys]
    ties = [col(v).asc_nulls_first() for v in dict.fromkeys(op.input.output_variables())
            if v in df.columns and v not in env.cols and _orderable(df.schema[v].dataType)]
    window = Window.partitionBy(*[col(c) for c in env.cols]).orderBy(*keys, *ties)
    return df.select("*", F.row_number().over(window).alias(op.var))


def _orderable(dtype: ST.DataType) -> bool:
    if isinstance(dtype, ST.ArrayType):
        return _orderable(dtype.elementType)
    if isinstance(dtype, ST.StructType):
        return all(_orderable(f.dataType) for f in dtype.fields)
    return not isinstance(dtype, (ST.MapType, ST.VariantType, ST.NullType))


def _bag(element: Column) -> Column:
    """The bag of ``element`` over a group, sorted: its value does not depend on how Spark
    partitions the work, so that two evaluations of one plan give equal bags (a nested plan's
    environments are joined back to the outer tuples by the value of their parameters, which
    may be a GROUP AS bag or a subquery's)."""
    return F.sort_array(F.collect_list(element))


def _group_by(pc: PlanCompiler, op: O.GroupBy, env: Env) -> DataFrame:
    df = pc.compile(op.input, env)
    keys = [compile_term(t).alias(k) for k, t in op.keys]
    aggs = [_aggregate(a).alias(v) for v, a in op.aggregates]
    if op.group_var:
        members = F.struct(*[compile_term(t).alias(n) for n, t in op.group_fields])
        aggs.append(_bag(members).alias(op.group_var))
    if not aggs:
        aggs = [F.count(F.lit(1)).alias(pc.fresh("n"))]
    grouped = df.groupBy(*[col(c) for c in env.cols], *keys).agg(*aggs)
    if op.keys or not env.cols:
        grouped = _in_driver(pc, op, env, df, keys, grouped) or grouped
        return pc.keep(env, grouped, *[col(v) for v in op.output_variables()])
    # a global aggregate per environment: environments without members get one group too
    envdf = pc.ground(env)
    renames = {e: pc.fresh("e") for e in env.cols}
    g2 = grouped.select(*[col(c).alias(renames.get(c, c)) for c in grouped.columns])
    joined = envdf.join(g2, all_true([envdf[e].eqNullSafe(g2[r]) for e, r in renames.items()]), "left")
    outs = []
    for v, a in op.aggregates:
        c = col(v)
        outs.append((F.coalesce(c, F.lit(0)) if a.function == "count" else c).alias(v))
    if op.group_var:
        gt = grouped.schema[op.group_var].dataType
        outs.append(F.coalesce(col(op.group_var), F.array().cast(gt)).alias(op.group_var))
    return joined.select(*[envdf[e] for e in env.cols], *outs)


#: the largest input (bytes, as Spark estimates it) of an aggregate of rows the driver holds that
#: is computed in the driver (:func:`_in_driver`)
IN_DRIVER_MAX_BYTES = 8 << 20

#: aggregate function -> the argument types the driver computes it for exactly as Spark does
#: (sums of floating point values may differ in their last bits, as Spark's own do with the
#: order of partial sums)
_NUMERIC = (ST.IntegralType, ST.DecimalType, ST.DoubleType)
_IN_DRIVER = {
    ("count", False): None, ("count", True): (ST.IntegralType, ST.DecimalType, ST.StringType, ST.DateType,
                                              ST.BooleanType),
    ("sum", False): _NUMERIC, ("avg", False): (ST.IntegralType, ST.DoubleType),
    ("min", False): _NUMERIC + (ST.StringType, ST.DateType, ST.BooleanType),
    ("max", False): _NUMERIC + (ST.StringType, ST.DateType, ST.BooleanType),
}
_ARROW_FUNCTION = {("count", False): "count", ("count", True): "count_distinct", ("sum", False): "sum",
                   ("avg", False): "mean", ("min", False): "min", ("max", False): "max"}


def _in_driver(pc: PlanCompiler, op: O.GroupBy, env: Env, df: DataFrame, keys: list[Column],
               grouped: DataFrame) -> DataFrame | None:
    """``grouped`` (the aggregate ``op`` of ``df``) computed in the driver, as rows it holds, when
    ``df`` is rows the driver holds already (:func:`~idivm.storage.spark.is_local`: an i-diff, or
    an increment's projection of one) and small: Spark would start a job, a tenth of a second or
    more, for what Arrow groups in a millisecond.  The key and argument columns are projected by
    Spark, which folds the projection into the rows without a job; the groups are formed by
    Arrow on keys of exact types only (no floating point or nested keys, whose equality Spark
    normalizes), for the functions of :data:`_IN_DRIVER`.  None otherwise: Spark computes it."""
    if op.group_var or not is_local(df):
        return None
    specs = [(v, a.function, a.distinct, a.arg) for v, a in op.aggregates] or \
        [(grouped.columns[-1], "count", False, None)]
    names = [*env.cols, *(k for k, _ in op.keys)]
    # COUNT(*) counts a column of 1s
    args = {v: pc.fresh("arg") for v, _, _, _ in specs}
    inputs = df.select(*[col(c) for c in env.cols], *keys,
                       *[(F.lit(1) if arg is None else compile_term(arg)).alias(args[v]) for v, _, _, arg in specs])
    types = {f.name: f.dataType for f in inputs.schema.fields}
    exact = (ST.StringType, ST.IntegralType, ST.DateType, ST.BooleanType, ST.DecimalType)
    if not names or not all(isinstance(types[n], exact) for n in names):
        return None
    for v, function, distinct, arg in specs:
        allowed = _IN_DRIVER.get((function, distinct), ())
        if allowed is not None and not isinstance(types[args[v]], allowed):
            return None
    plan = inputs._jdf.queryExecution().optimizedPlan()
    size = plan.stats().sizeInBytes() if plan.nodeName() == "LocalRelation" else None
    if size is None or int(size if isinstance(size, int) else size.toString()) > IN_DRIVER_MAX_BYTES:
        return None
    rows = local_rows(inputs)
    functions = [_ARROW_FUNCTION[function, distinct] for _, function, distinct, _ in specs]
    out = rows.group_by(names, use_threads=False).aggregate(
        [(args[v], f) for (v, *_), f in zip(specs, functions)])
    produced = [f"{args[v]}_{f}" for (v, *_), f in zip(specs, functions)]
    schema = arrow_schema(grouped.schema, nullable=True)
    table = pa.table([out.column(n) for n in names + produced], names=grouped.columns)
    return pc.spark.createDataFrame(table.cast(schema), grouped.schema)


def _aggregate(a: O.Aggregate) -> Column:
    if a.arg is None:
        return F.count(F.lit(1))
    x = compile_term(a.arg)
    match a.function, a.distinct:
        case "count", False:
            return F.count(x)
        case "count", True:
            return F.count_distinct(x)
        case "sum", False:
            return F.sum(x)
        case "sum", True:
            return F.sum_distinct(x)
        case "avg", False:
            return F.avg(x)
        case "avg", True:
            return F.try_divide(F.sum_distinct(x), F.count_distinct(x))
        case "min", _:
            return F.min(x)
        case "max", _:
            return F.max(x)
        case function, False if function in O.STATISTICS:
            return statistic(function, x)
        case function, True if function in O.STATISTICS:
            return array_statistic(function, F.collect_set(x))
    raise InternalError(f"no Spark compilation for aggregate {a}")


def _distinct(pc: PlanCompiler, op: O.Distinct, env: Env) -> DataFrame:
    return pc.compile(op.input, env).distinct()


def _union(pc: PlanCompiler, op: O.UnionAll, env: Env) -> DataFrame:
    left = pc.compile(op.left, env)
    right = pc.compile(op.right, env)
    return left.unionByName(right)


_COMPILERS: dict[type, Callable[[PlanCompiler, O.Operator, Env], DataFrame]] = {
    O.Ground: _ground,
    O.ScanCollection: _scan,
    O.NavTuple: _nav,
    O.Select: _select,
    O.Project: _project,
    O.Assign: _assign,
    O.FunctionCall: _function,
    O.ConstructTuple: _construct_tuple,
    O.ConstructBag: _construct_collection,
    O.ConstructArray: _construct_collection,
    O.ApplyPlan: _apply,
    O.InnerCorrelate: _correlate,
    O.LeftCorrelate: _correlate,
    O.InnerJoin: lambda pc, op, env: pc.join(op, env, "inner"),
    O.LeftJoin: lambda pc, op, env: pc.join(op, env, "left"),
    O.SemiJoin: lambda pc, op, env: pc.join(op, env, "left_semi"),
    O.AntiJoin: lambda pc, op, env: pc.join(op, env, "left_anti"),
    O.UnionAll: _union,
    O.GroupBy: _group_by,
    O.Distinct: _distinct,
    O.ReturnBag: _return_bag,
    O.OrderBy: _order_by,
}

_missing = set(O.OPERATORS) - set(_COMPILERS)
if _missing:  # every operator of the algebra must compile
    raise ImportError(f"operators without Spark compilation: {sorted(c.__name__ for c in _missing)}")
