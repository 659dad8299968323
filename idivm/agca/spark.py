"""AGCA statements executed by Spark: a GMR is a DataFrame with one column per variable and the
multiplicity in :data:`M`; a batch trigger's statement is a chain of joins of the update with
the maps (DBToaster §4's trigger statements, run on a batch as issue item 4 asks).

:func:`compile_term` follows the reference semantics of :mod:`idivm.agca.gmr` case by case,
over a DataFrame of *contexts* instead of one context: the binding tuples the term is
evaluated in, with their multiplicity.  A product passes each factor the contexts the factors
left of it produced (sideways information passing); an atom or a map is a natural join on the
variables it shares with the context; a condition a filter; ``Sum`` a group-by that adds
multiplicities; a nested aggregate ``x := Q`` is evaluated once per distinct value of its
input variables and joined back (0 where it has no tuple).

:func:`apply_batch` runs a program's batch triggers like :func:`idivm.agca.viewlet.apply_batch`,
with the maps held as DataFrames: each statement's increments are summed per key, and entries
whose multiplicity reaches 0 are dropped (multiplicities are doubles: below :data:`EPSILON` is 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from idivm.agca.gmr import GMR, AgcaError
from idivm.agca.terms import (
    COMPARISONS, EPSILON, ROUNDING, Add, Assign, Cmp, Const, Exists, Lift, MapRef, Mul, Rel, Sum, Term, Value, Var,
    atoms, inputs, map_refs,
)
from idivm.agca.viewlet import Program
from idivm.storage.delta.merge import quoted

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: the multiplicity column of a GMR DataFrame
M = "__m"


def exists_columns(columns: Sequence[str]) -> tuple[str, str]:
    """The columns with which :class:`~idivm.agca.terms.Exists` tells apart the contexts it is
    evaluated in (``columns``: theirs) and keeps their multiplicities, named apart from those
    of an enclosing ``Exists``."""
    depth = sum(c.startswith("__exists_row") for c in columns)
    return f"__exists_row{depth}", f"__exists_m{depth}"


def col(name: str) -> "Column":
    """The column of a variable (any name: backquoted)."""
    from pyspark.sql import functions as F

    return F.col(quoted(name))


def summed(parts: Sequence["DataFrame"], keys: Sequence[str] | None = None) -> "DataFrame":
    """The union of GMR DataFrames (by column name; a column one lacks is NULL there), the
    multiplicities summed per ``keys`` (default: every other column; a NULL product counts 0),
    the entries that reach 0 dropped."""
    from functools import reduce

    from pyspark.sql import functions as F

    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    keys = [c for c in union.columns if c != M] if keys is None else list(keys)
    total = union.groupBy(*[col(k) for k in keys]).agg(F.sum(col(M)).alias(M)) if keys else \
        union.agg(F.sum(col(M)).alias(M))
    return total.where(F.abs(col(M)) > EPSILON)


def _variables(df: "DataFrame") -> list[str]:
    return [c for c in df.columns if c != M]


def unit(spark: "SparkSession") -> "DataFrame":
    """The GMR ``⟨⟩ ↦ 1``: the context of a top-level term."""
    from pyspark.sql import functions as F

    return spark.range(1).select(F.lit(1).cast("double").alias(M))


def compile_term(q: Term, contexts: "DataFrame", relations: Mapping[str, "DataFrame"],
                 maps: Mapping[str, "DataFrame"], constants: dict | None = None) -> "DataFrame":
    """``q`` evaluated in every context of ``contexts`` (columns: bound variables and
    :data:`M`): the contexts extended by ``q``'s output variables, multiplicities multiplied.
    ``relations``: the GMR DataFrames of the relation atoms read (a batch's ``ΔR`` under
    ``Δ<name>``), ``maps``: those of the maps, each with its key variables as columns.
    ``constants``: the nested aggregates without inputs computed so far (:func:`_nested`); one
    dict passed to the statements of a run computes each once."""
    from pyspark.sql import functions as F

    constants = {} if constants is None else constants

    match q:
        case Const(value=c):
            return contexts.withColumn(M, col(M) * F.lit(c))
        case Var(name=x):
            _need(contexts, x)
            return contexts.withColumn(M, col(M) * col(x))
        case Cmp(op="=" | "!=" as op, left=left, right=Value(value=None)):  # (un)defined: x = ⊥, x ≠ ⊥
            value = _operand(left, contexts)
            return contexts.filter(value.isNull() if op == "=" else value.isNotNull())
        case Cmp(op=op, left=left, right=right):
            return contexts.filter(_compared(op, _operand(left, contexts), _operand(right, contexts)))
        case Lift(expr=e, condition=condition):
            from idivm.exec.terms import compile_term as scalar_column

            for x in sorted(inputs(q)):
                _need(contexts, x)
            value = scalar_column(e)  # type: ignore[arg-type]
            # a condition holds where TRUE (filter drops FALSE and NULL); a value of NULL is 0
            return contexts.filter(value) if condition else \
                contexts.filter(value.isNotNull()).withColumn(M, col(M) * value)
        case Assign(var=x, term=t) if isinstance(t, (Var, Value)):
            value = _operand(t, contexts)
            return contexts.filter(col(x) == value) if x in contexts.columns else contexts.withColumn(x, value)
        case Assign(var=x, term=t) if _arithmetic(t) is not None:  # a value computed from bound variables
            value = _arithmetic(t)
            return contexts.filter(col(x) == value) if x in contexts.columns else contexts.withColumn(x, value)
        case Assign(var=x, term=t):
            return _nested(x, t, contexts, relations, maps, constants)
        case Rel(name=name, variables=vs, delta=delta):
            key = f"Δ{name}" if delta else name
            if key not in relations:
                raise AgcaError(f"no rows given for {key}")
            return _join(contexts, _atom(relations[key], vs))
        case MapRef(name=name, renames=renames):
            if name not in maps:
                raise AgcaError(f"no map {name}")
            stored = maps[name]
            here = dict(renames)
            named = stored.select(*[col(c).alias(here.get(c, c)) for c in _variables(stored)], col(M))
            return _join(contexts, named)
        case Add(terms=ts):
            parts = [compile_term(t, contexts, relations, maps, constants) for t in ts]
            out = parts[0]
            for p in parts[1:]:
                out = out.unionByName(p, allowMissingColumns=True)
            return out
        case Mul(terms=ts):
            for t in ts:
                contexts = compile_term(t, contexts, relations, maps, constants)
            return contexts
        case Sum(group=g, term=t):
            keep = list(dict.fromkeys([*_variables(contexts), *g]))
            out = compile_term(t, contexts, relations, maps, constants)
            missing = [x for x in keep if x not in out.columns]
            if missing:
                raise AgcaError(f"group-by variable {', '.join(missing)} of {q} is not bound")
            return out.groupBy(*[col(x) for x in keep]).agg(F.sum(col(M)).alias(M))
        case Exists(term=t):
            # per context (told apart by a row id), the tuples of t whose multiplicity is not 0
            row, kept = exists_columns(contexts.columns)
            ids = contexts.withColumn(row, F.monotonically_increasing_id()).withColumn(kept, col(M))
            out = compile_term(t, ids.withColumn(M, F.lit(1.0)), relations, maps, constants)
            keys = [c for c in out.columns if c != M]
            support = out.groupBy(*[col(c) for c in keys]).agg(F.sum(col(M)).alias(M)).filter(col(M) != 0)
            return support.withColumn(M, col(kept)).drop(row, kept)
    raise AgcaError(f"not an AGCA term: {q!r}")


def _compared(op: str, a: "Column", b: "Column") -> "Column":
    """Spark's form of the comparison ``a op b`` (:data:`~idivm.agca.terms.COMPARISONS`)."""
    from pyspark.sql import functions as F

    if not op.startswith("~"):
        return COMPARISONS[op](a, b)
    near = F.abs(a - b) <= F.lit(ROUNDING) * F.greatest(F.abs(a), F.abs(b), F.lit(1.0))
    return {"~=": near, "~!=": ~near, "~<": (a < b) & ~near, "~>": (a > b) & ~near,
            "~<=": (a <= b) | near, "~>=": (a >= b) | near}[op]


def _arithmetic(t: "Term | Value") -> "Column | None":
    """``t`` as a column when it is arithmetic on constants and variables (no relation, map or
    aggregate: the value of ``x := t`` in a context is ``t``'s), else None."""
    from functools import reduce

    from pyspark.sql import functions as F

    match t:
        case Const(value=c):
            return F.lit(c)
        case Var(name=x):
            return col(x)
        case Mul(terms=ts) | Add(terms=ts):
            parts = [_arithmetic(x) for x in ts]
            if any(p is None for p in parts):
                return None
            return reduce((lambda a, b: a * b) if isinstance(t, Mul) else (lambda a, b: a + b), parts)
    return None


def _need(df: "DataFrame", x: str) -> None:
    if x not in df.columns:
        raise AgcaError(f"variable {x} is not bound here")


def _operand(o: "Var | Value | Const", df: "DataFrame") -> "Column":
    from pyspark.sql import functions as F

    if isinstance(o, Var):
        _need(df, o.name)
        return col(o.name)
    return F.lit(o.value)


def _atom(rows: "DataFrame", variables: Sequence[str]) -> "DataFrame":
    """A relation's GMR DataFrame (its columns in order, then :data:`M`) with its columns
    renamed to the atom's variables; a variable named twice selects the rows that agree."""
    columns = _variables(rows)
    if len(columns) != len(variables):
        raise AgcaError(f"a relation of {len(columns)} columns read as an atom of {len(variables)}")
    out = rows
    first: dict[str, str] = {}
    for c, x in zip(columns, variables):
        if x in first:
            out = out.filter(col(first[x]) == col(c))
        else:
            first[x] = c
    return out.select(*[col(c).alias(x) for x, c in first.items()], col(M))


def _join(contexts: "DataFrame", gmr: "DataFrame") -> "DataFrame":
    """The natural join of contexts and a GMR on their shared variables, multiplicities
    multiplied."""
    shared = [x for x in _variables(gmr) if x in contexts.columns]
    right = gmr.withColumnRenamed(M, "__m2")
    joined = contexts.join(right, shared, "inner") if shared else contexts.crossJoin(right)
    return joined.withColumn(M, col(M) * col("__m2")).drop("__m2")


def _nested(x: str, q: Term, contexts: "DataFrame", relations, maps, constants: dict) -> "DataFrame":
    """``x := q`` per context: ``q`` evaluated once per distinct value of its inputs.  Without
    inputs, ``q`` is one value for every context, computed now (once for ``q`` over the same
    DataFrames: ``constants``) and given as a constant.  Left in the plan, Spark runs it as a
    scalar subquery; a statement with many of them (PSP's) can take every thread of Spark's
    subquery pool while they wait for broadcasts that wait for subqueries, and never finish."""
    from pyspark.sql import functions as F

    params = sorted(inputs(q))
    for p in params:
        _need(contexts, p)
    if not params:
        key, read = constant_key(q, relations, maps)
        if key not in constants:
            value = compile_term(q, unit(contexts.sparkSession), relations, maps, constants)
            _single(x, value, params)
            total = value.agg(F.sum(col(M))).first()[0]
            constants[key] = (float(total) if total is not None else 0.0, read)
        constant = F.lit(constants[key][0])
        return contexts.filter(col(x) == constant) if x in contexts.columns else contexts.withColumn(x, constant)
    envs = contexts.select(*[col(p) for p in params]).distinct().withColumn(M, F.lit(1.0))
    value = compile_term(q, envs, relations, maps, constants)
    _single(x, value, params)
    value = value.groupBy(*[col(p) for p in params]).agg(F.sum(col(M)).alias("__v"))
    joined = contexts.join(value, params, "left")
    joined = joined.withColumn("__v", F.coalesce(col("__v"), F.lit(0.0)))
    if x in contexts.columns:
        return joined.filter(col(x) == col("__v")).drop("__v")
    return joined.withColumnRenamed("__v", x)


def constant_key(q: Term, relations: Mapping, maps: Mapping) -> tuple[tuple, tuple]:
    """What names the value of the nested aggregate ``q`` without inputs over the relations and
    maps given (whatever holds their rows: DataFrames, Arrow tables): ``q`` and the identities
    of those it reads; and those it reads, to hold beside the value so that their identities
    stay theirs."""
    read = tuple(maps[r.name] for r in map_refs(q) if r.name in maps) + \
        tuple(relations[k] for a in atoms(q) if (k := f"Δ{a.name}" if a.delta else a.name) in relations)
    return (q, tuple(map(id, read))), read


def _single(x: str, value: "DataFrame", params: Sequence[str]) -> None:
    extra = [c for c in _variables(value) if c not in params]
    if extra:
        raise AgcaError(f"the right side of {x} := … groups by {', '.join(extra)}: it must be a single value")


def apply_batch(spark: "SparkSession", program: Program, maps: dict[str, "DataFrame"],
                updates: Mapping[str, "DataFrame"], order: Sequence[str] | None = None) -> None:
    """Run the batch triggers of ``program`` on ``maps`` (name -> GMR DataFrame over the map's
    keys) for ``updates`` (relation -> GMR DataFrame of its signed rows), one relation after
    the other (default: by name), each reading the maps the earlier ones left; entries that
    reach multiplicity 0 are dropped.  The maps are replaced by new DataFrames, computed
    (``localCheckpoint``)."""
    constants: dict = {}
    for rel in (order if order is not None else sorted(updates)):
        trigger = program.triggers.get((rel, 0))
        if trigger is None or rel not in updates:
            continue
        increments = []
        for s in trigger.increments:
            keys = list(program.maps[s.target].keys)
            inc = compile_term(s.rhs, unit(spark), {f"Δ{rel}": updates[rel]}, maps, constants)
            increments.append((s.target, keys, inc.select(*[col(k) for k in keys], col(M))))
        for target, keys, inc in increments:
            # computed now, without its lineage: the next batch's plans start from it
            maps[target] = summed([maps[target].select(*[col(k) for k in keys], col(M)), inc], keys).localCheckpoint()
        # re-evaluations read the maps after the increments
        values = [(s.target, compile_term(s.rhs, unit(spark), {}, maps, constants)) for s in trigger.reevaluations]
        for target, value in values:
            keys = list(program.maps[target].keys)
            maps[target] = summed([value.select(*[col(k) for k in keys], col(M))], keys).localCheckpoint()


def to_gmr(df: "DataFrame") -> GMR:
    """A GMR DataFrame collected into the driver (tests, small maps)."""
    out = GMR()
    for row in df.collect():
        d = row.asDict()
        m = d.pop(M)
        out.add(tuple(sorted(d.items())), m)
    return out


def from_gmr(spark: "SparkSession", gmr: GMR, variables: Sequence[str]) -> "DataFrame":
    """A GMR as a DataFrame with columns ``variables`` and :data:`M` (multiplicities as doubles)."""
    import pyarrow as pa

    rows = [{**dict(t), M: float(m)} for t, m in gmr.items()]
    if not rows:
        return spark.createDataFrame([], f"{''.join(f'{quoted(v)} bigint, ' for v in variables)}{quoted(M)} double")
    return spark.createDataFrame(pa.Table.from_pylist(rows)).select(*[col(v) for v in variables], col(M))
