"""Aggregate views maintained by higher-order delta maps (the ``maps`` strategy): DBToaster's
viewlet transform (§4–§6 of ``004``) run inside idivm, on Spark, with the maps stored as Delta
tables beside the view.

**Which views.**  A view whose plan has one γ (:class:`~idivm.algebra.operators.GroupBy`) over
selections and inner joins of base tables (its *aggregate core*, translated into AGCA by
:func:`idivm.agca.translate.translate_group_by`), and above it only operators that read no
table (projections, HAVING's selection, the return).  Its IDs are the group keys.

**Define** (:func:`plan_maps`, :func:`initial_maps`).  The core's terms (one per aggregate,
plus the group count) are compiled into one batch trigger program
(:func:`idivm.agca.viewlet.compile_program`): the term maps ``V_<term>``, keyed by the group
variables, and the higher-order maps ``M<n>`` their deltas read.  Every map is evaluated over
the base tables at the view's watermark and written as a Delta table (its key variables and
the multiplicity :data:`~idivm.agca.spark.M`; entries of multiplicity 0 are not stored).

**Maintain** (:func:`increments`, :func:`group_rows`).  The change data feed of each base table
since the watermark is a GMR of signed rows (insert and post-image +1, delete and pre-image
−1).  The relations' batch triggers run one relation after the other, each reading the maps
as the earlier ones left them; a map's increments are summed per key and appended to its
table (:class:`StoredMaps`).  The view's changed groups are the keys the term maps'
increments name: their rows are read off the maps before and after (a group exists while its
count is not 0), the operators above γ are evaluated over both by the plan compiler (γ bound to
those rows; in the driver, :func:`rows_above`, when Arrow evaluates them), and the view gets
the new rows and loses the old ones that are not new, by ID, in one commit whose metadata
names the map versions it reflects (``idivm.maps``).  A run that crashed between a map's
commit and the view's leaves maps ahead of the view; the next run finds their versions differ
from those the view names and rebuilds every map at the view's watermark first.  The
statements and the changed groups are evaluated either by Spark (:class:`SparkTerms`,
:func:`group_rows`) or, for a small run whose maps delta-rs writes, in the driver over Arrow
tables (:class:`ArrowTerms`, :func:`group_rows_of`); the runtime chooses.

**Storage.**  Maps are additive: a map's table holds the rows of its last consolidated write
(each key once, none 0) and the increments appended since, and its value is their sum per key,
which every reader computes (:func:`read_map_arrow`, summing only the entries of the keys the
appended rows name, and :func:`read_map_spark`).  A run thus writes the entries it changed, not
its maps; once the appended rows pass a share of the consolidated ones (or after some appends) the run
writes the map consolidated instead (:func:`appendable`).  An appending commit names the
consolidated write it follows (:data:`APPENDED_TO`).  A process holds the values of the map
versions it read or wrote (:func:`held`), as :class:`~idivm.agca.arrow.Lookup` values whose
joins look entries up in sorted indexes: its later runs read no map table.

Multiplicities are doubles: SUM and AVG of DECIMAL values are refused (:class:`Untranslatable`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from idivm.agca import viewlet
from idivm.agca.spark import M, col as _col, compile_term, summed, unit
from idivm.agca.terms import EPSILON as ZERO, atoms, map_refs
from idivm.agca.translate import COUNT, AggregateCore, Untranslatable, translate_group_by
from idivm.algebra import operators as O
from idivm.storage.delta.merge import quoted

if TYPE_CHECKING:
    import pyarrow as pa

    from idivm.agca.arrow import Lookup
    from pyspark.sql import Column, DataFrame, SparkSession

#: the prefix of the name of a term's map (the others are ``M<n>``)
TERM_PREFIX = "V_"


@dataclass(frozen=True, slots=True)
class MapsPlan:
    """How the maps maintain a view: its γ (as it stands in the view's plan, where the plan
    compiler binds the group rows), the AGCA form of γ, the trigger program of its terms, and
    the columns each base table's relation atoms read, in order."""

    group: O.GroupBy
    core: AggregateCore
    program: viewlet.Program
    columns: tuple[tuple[str, tuple[str, ...]], ...]

    def term_map(self, term: str) -> str:
        return TERM_PREFIX + term

    @property
    def group_variables(self) -> list[str]:
        return list(dict.fromkeys(v for _, v in self.core.keys))


def plan_maps(plan: O.Operator, columns: Mapping[str, Sequence[str]], static: Collection[str] = ()) -> MapsPlan:
    """The maps of the view of ``plan`` (its plan with provenance); ``columns``: each base
    table's columns in order; ``static``: the tables that never change (no trigger, no map
    for their changes: DBToaster §5.1).  Raises :class:`Untranslatable` naming what the maps
    cannot maintain."""
    groups = [op for op in O.walk(plan, into_nested=False) if isinstance(op, O.GroupBy)]
    inside = {id(op) for op in O.walk(groups[0])} if len(groups) == 1 else set()  # its subqueries included
    if len(groups) != 1 or any(isinstance(op, O.GroupBy) and id(op) not in inside for op in O.walk(plan)):
        raise Untranslatable("it needs exactly one GROUP BY, and no nested query")
    group = groups[0]
    above = [op for op in O.walk(plan) if id(op) not in inside and isinstance(op, O.ScanCollection)]
    if above:
        raise Untranslatable("it reads a table outside its GROUP BY")
    core = translate_group_by(group, columns)
    queries = {TERM_PREFIX + name: term for name, term in core.terms.items()}
    program = viewlet.compile_program(queries, "view", batch=True, static=static)
    read = {a.name for m in program.maps.values() for a in atoms(m.definition)}
    return MapsPlan(group, core, program, tuple((t, tuple(columns[t])) for t in sorted(read)))


def check_types(mp: MapsPlan, group_schema) -> None:
    """Refuse SUM and AVG of DECIMAL values (``group_schema``: the Spark schema of γ's rows):
    multiplicities are doubles, which would round them."""
    from pyspark.sql import types as ST

    for name, a in mp.group.aggregates:
        if a.function in ("sum", "avg") and not a.distinct and isinstance(group_schema[name].dataType, ST.DecimalType):
            raise Untranslatable(f"{a.function.upper()} of DECIMAL values ({name}): the maps hold doubles; "
                                 "use the id or recompute strategy")


# --- evaluation ------------------------------------------------------------------------------------

def relation(df: "DataFrame", columns: Sequence[str]) -> "DataFrame":
    """A base table's rows as the GMR its relation atoms read: its ``columns`` in order, each
    row once."""
    from pyspark.sql import functions as F

    return df.select(*[_col(c) for c in columns], F.lit(1.0).alias(M))


def initial_maps(spark: "SparkSession", mp: MapsPlan, read_table: Callable[[str], "DataFrame"], *,
                 reevaluated: bool = False) -> dict[str, "DataFrame"]:
    """Every map of ``mp`` evaluated over the base tables ``read_table(name)`` gives, without
    its entries of multiplicity 0.  With ``reevaluated``, a map that a trigger evaluates again
    (``M := …``) is computed as its trigger computes it, from the other maps: equal to its
    definition by construction, and cheaper (PSP: a product of each side's maps instead of the
    join of the two sides with a nested aggregate per pair).  ``verify`` evaluates every
    definition."""
    relations = {t: relation(read_table(t), cols) for t, cols in mp.columns}
    # a re-evaluation reads maps of no nested aggregate, which are never evaluated again
    again = {s.target: s.rhs for t in mp.program.triggers.values() for s in t.reevaluations} if reevaluated else {}
    constants: dict = {}
    maps = {name: _nonzero(compile_term(m.definition, unit(spark), relations, {}, constants), m.keys)
            for name, m in mp.program.maps.items() if name not in again}
    for name, rhs in again.items():
        keys = mp.program.maps[name].keys  # a sum of monomials: their parts added per key
        maps[name] = _nonzero(summed([compile_term(rhs, unit(spark), {}, maps, constants)], keys), keys)
    return {name: maps[name] for name in mp.program.maps}


def _nonzero(df: "DataFrame", keys: Sequence[str]) -> "DataFrame":
    from pyspark.sql import functions as F

    return df.select(*[_col(k) for k in keys], _col(M)).where(F.abs(_col(M)) > ZERO)


def changes_gmr(changes: "pa.Table", columns: Sequence[str]) -> "pa.Table":
    """A table's change data feed as a GMR of signed rows (Arrow): inserts and post-images +1,
    deletes and pre-images −1."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = changes.column("_change_type")
    minus = pc.is_in(kind, value_set=pa.array(["delete", "update_preimage"]))
    signs = pc.if_else(minus, -1.0, 1.0)
    return changes.select(list(columns)).append_column(M, signs)


def changes_relation(spark: "SparkSession", changes: "pa.Table", columns: Sequence[str]) -> "DataFrame":
    """:func:`changes_gmr` as a Spark DataFrame."""
    return spark.createDataFrame(changes_gmr(changes, columns))


#: the column naming the map of an increment in :func:`increments`' result
MAP = "__map"

#: the rows up to which :class:`ArrowTerms` has Spark evaluate a lifted expression without a job
LIFT_ROWS_WITHOUT_JOB = 20_000


class SparkTerms:
    """How :func:`increments` evaluates statements: by Spark, over DataFrames (the maps as
    stored, the batch in memory); ``keep(df)`` computes a DataFrame that later statements read
    once (run-sized increments)."""

    def __init__(self, spark: "SparkSession", keep: Callable[["DataFrame"], "DataFrame"]) -> None:
        self.spark, self.keep = spark, keep

    def unit(self):
        return unit(self.spark)

    def compile(self, q, contexts, relations, maps, constants):
        return compile_term(q, contexts, relations, maps, constants)

    def summed(self, parts, keys=None):
        return summed(parts, keys)

    def tagged(self, df, name: str, keys: Sequence[str]):
        return _tagged(df, name, keys)

    def unpacked(self, packed, name: str, keys: Sequence[str]):
        return unpacked(packed, name, keys)

    def negated(self, df, keys: Sequence[str]):
        return df.select(*[_col(k) for k in keys], (-_col(M)).alias(M))


class ArrowTerms:
    """How :func:`increments` evaluates statements in the driver, over Arrow tables
    (:mod:`idivm.agca.arrow`): for a batch and maps small enough that a Spark job per join
    costs more than the joins.  Lifted expressions are evaluated by ``spark`` over the rows as
    a local relation, as the Spark path evaluates them."""

    def __init__(self, spark: "SparkSession") -> None:
        self.spark = spark

    def unit(self):
        from idivm.agca import arrow

        return arrow.unit()

    def compile(self, q, contexts, relations, maps, constants):
        from idivm.agca import arrow

        return arrow.compile_term(q, contexts, relations, maps, constants, self.lift)

    def lift(self, contexts: "pa.Table", q) -> "pa.Table":
        """The contexts the :class:`~idivm.agca.terms.Lift` (or :class:`~idivm.agca.terms.Cmp`)
        ``q`` leaves, by Spark."""
        from idivm.storage.spark import collect, to_arrow

        if contexts.num_rows == 0:
            return contexts
        out = compile_term(q, self.spark.createDataFrame(contexts), {}, {})
        # a few rows are collected without a job, row by row; more by one job, in Arrow
        out = to_arrow(out) if contexts.num_rows <= LIFT_ROWS_WITHOUT_JOB else collect(out)
        return out.select(contexts.column_names).cast(contexts.schema)

    def keep(self, t):
        return t

    def summed(self, parts, keys=None):
        from idivm.agca import arrow

        if parts and isinstance(parts[0], arrow.Lookup):  # a map read by a later trigger: on its lookups
            return parts[0].added(arrow.summed(parts[1:], keys)) if len(parts) > 1 else parts[0]
        return arrow.summed(parts, keys)

    def tagged(self, t, name: str, keys: Sequence[str]):
        from idivm.agca import arrow

        return arrow.tagged(t, name, keys, MAP)

    def unpacked(self, packed, name: str, keys: Sequence[str]):
        return unpacked(packed, name, keys)

    def negated(self, t, keys: Sequence[str]):
        from idivm.agca import arrow

        return arrow.negated(t.value if isinstance(t, arrow.Lookup) else t, keys)


def increments(mp: MapsPlan, maps: Mapping[str, "DataFrame"], updates: Mapping[str, "DataFrame"],
               terms: "SparkTerms | ArrowTerms") -> "DataFrame | pa.Table | None":
    """The increments of the maps for the base tables' ``updates`` (GMRs of signed rows), as
    one relation (evaluated by ``terms``: Spark DataFrames or Arrow tables): the map's name
    (:data:`MAP`), every key variable of any map (those not the map's own are NULL) and
    :data:`M`, summed per map and key, none 0; None when no relation with a trigger changed.
    Each relation's batch trigger runs in turn (by name), reading ``maps`` as the earlier
    relations' increments left them; ``terms.keep`` computes one relation's increments once
    when a later relation reads them.  One relation, so that the increments of every map are
    computed together.

    A map a trigger evaluates again (``M := …``, a statement with ``replace``) is evaluated
    over the maps after that trigger's increments; its increment is its new value minus the
    value it had.  Only the last relation's re-evaluation of a map is computed when no trigger
    in between reads the map."""
    program = mp.program
    current = dict(maps)
    done: list = []
    order = [rel for rel in sorted(updates) if (rel, 0) in program.triggers]
    top = terms.unit()
    constants: dict = {}
    for i, rel in enumerate(order):
        trigger = program.triggers[(rel, 0)]
        later = order[i + 1:]
        read_later, replaced_later = _reads(mp, later), _replaced(mp, later)
        # the maps that later statements read, or that a later re-evaluation replaces
        wanted = read_later | replaced_later
        reevaluated = [s for s in trigger.reevaluations
                       if s.target not in replaced_later or s.target in read_later]
        parts = [terms.tagged(terms.compile(s.rhs, top, {f"Δ{rel}": updates[rel]}, current, constants), s.target,
                              program.maps[s.target].keys) for s in trigger.increments]
        if parts:
            here = terms.summed(parts)
            # the maps read after them see these increments
            seen = (wanted | {r.name for s in reevaluated for r in map_refs(s.rhs)}) \
                & {s.target for s in trigger.increments}
            if seen:
                here = terms.keep(here)
                for target in sorted(seen):
                    keys = program.maps[target].keys
                    current[target] = terms.summed([current[target], terms.unpacked(here, target, keys)], keys)
            done.append(here)
        values = {s.target: terms.compile(s.rhs, top, {}, current, constants) for s in reevaluated}
        for target, value in values.items():
            keys = program.maps[target].keys
            change = terms.summed([terms.tagged(value, target, keys),
                                   terms.tagged(terms.negated(current[target], keys), target, keys)])
            if target in wanted:
                change = terms.keep(change)
                current[target] = terms.summed([current[target], terms.unpacked(change, target, keys)], keys)
            done.append(change)
    return terms.summed(done) if done else None


def maps_read(mp: MapsPlan, relations: Iterable[str]) -> set[str]:
    """The maps the batch triggers of ``relations`` read (a map evaluated again included: its
    increment is the change from its old value)."""
    return _reads(mp, relations) | _replaced(mp, relations)


def _triggers(mp: MapsPlan, relations: Iterable[str]) -> list:
    return [mp.program.triggers[(r, 0)] for r in relations if (r, 0) in mp.program.triggers]


def _reads(mp: MapsPlan, relations: Iterable[str]) -> set[str]:
    """The maps the right sides of the batch triggers of ``relations`` read."""
    return {ref.name for t in _triggers(mp, relations) for s in t.statements for ref in map_refs(s.rhs)}


def _replaced(mp: MapsPlan, relations: Iterable[str]) -> set[str]:
    """The maps the batch triggers of ``relations`` evaluate again."""
    return {s.target for t in _triggers(mp, relations) for s in t.reevaluations}


def _tagged(df: "DataFrame", name: str, keys: Sequence[str]) -> "DataFrame":
    from pyspark.sql import functions as F

    return df.select(F.lit(name).alias(MAP), *[_col(k) for k in keys], _col(M))


def unpacked(packed: "DataFrame | pa.Table", name: str, keys: Sequence[str]) -> "DataFrame | pa.Table":
    """The increments of map ``name`` (with ``keys``) in :func:`increments`' result (a
    DataFrame, or Arrow rows)."""
    from pyspark.sql import functions as F

    if not hasattr(packed, "sparkSession"):
        from idivm.agca import arrow

        return arrow.unpacked(packed, name, keys, MAP)
    return packed.where(F.col(MAP) == name).select(*[_col(k) for k in keys], _col(M))


def changed_groups(mp: MapsPlan, packed: "DataFrame") -> "DataFrame":
    """The group variables' values the term maps' increments in ``packed`` (:func:`increments`)
    name."""
    from pyspark.sql import functions as F

    terms = [mp.term_map(t) for t in mp.core.terms]
    return packed.where(F.col(MAP).isin(terms)).select(*[_col(g) for g in mp.group_variables]).distinct()


def changed_groups_of(mp: MapsPlan, packed: "pa.Table") -> "pa.Table":
    """:func:`changed_groups` of increments collected into the driver."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from idivm.storage.delta import distinct_rows

    terms = pa.array([mp.term_map(t) for t in mp.core.terms])
    return distinct_rows(packed.filter(pc.is_in(packed.column(MAP), value_set=terms)).select(mp.group_variables))


def group_rows(mp: MapsPlan, maps: Mapping[str, "DataFrame"], keys: "DataFrame", schema) -> "DataFrame":
    """The rows of γ for the groups ``keys`` (values of the group variables) read off the term
    maps ``maps`` (name -> keys and :data:`M`): the groups whose count is not 0, with every
    aggregate, in the types of γ's ``schema`` (a Spark StructType).  SUM and AVG are NULL where
    no member has a value; MIN, MAX and the DISTINCT aggregates are computed from the values
    their value map holds.  Group values are matched NULL-safely."""
    from pyspark.sql import functions as F

    group = mp.group_variables
    g = [f"__g{j}" for j in range(len(group))]
    wanted = keys.select(*[_col(v).alias(n) for v, n in zip(group, g)])

    def restricted(name: str, *extra: str) -> "DataFrame":
        """Map ``name``'s entries of the wanted groups: group columns ``__g<j>``, ``extra``, M."""
        table = maps[mp.term_map(name)].select(*[_col(v).alias(n) for v, n in zip(group, g)],
                                               *[_col(x) for x in extra], _col(M))
        return _matched(table, wanted, g, "left_semi")

    # the groups whose count is not 0; a GROUP BY without keys has its one row always (SQL's
    # aggregate of no rows: COUNT 0, the others NULL)
    rows = restricted(COUNT).where(F.abs(_col(M)) > ZERO).select(*g) if group else wanted
    columns: dict[str, Column] = {}
    for i, (name, a) in enumerate(mp.group.aggregates):
        alias = f"__a{i}"
        by_value = [b for b in mp.core.by_value if b[0] == name]
        if by_value:
            (_, function, distinct, x), = by_value
            present = restricted(f"{name}$values", x).where(F.abs(_col(M)) > ZERO)
            value = _col(x)
            aggregate = {"min": F.min(value), "max": F.max(value), "count": F.count_distinct(value),
                         "sum": F.sum_distinct(value), "avg": F.sum_distinct(value) / F.count_distinct(value)}[function]
            part = present.groupBy(*[_col(n) for n in g]).agg(aggregate.alias(alias))
            rows = _matched(rows, part, g, "left")
            columns[name] = _col(alias)
        elif a.function == "count":
            rows = _matched(rows, restricted(name).withColumnRenamed(M, alias), g, "left")
            columns[name] = F.coalesce(_col(alias), F.lit(0.0))
        else:
            total, n = (name, f"{name}$n") if a.function == "sum" else (f"{name}$sum", f"{name}$count")
            rows = _matched(rows, restricted(total).withColumnRenamed(M, alias), g, "left")
            rows = _matched(rows, restricted(n).withColumnRenamed(M, f"{alias}n"), g, "left")
            s, c = F.coalesce(_col(alias), F.lit(0.0)), F.coalesce(_col(f"{alias}n"), F.lit(0.0))
            columns[name] = F.when(c > ZERO, s if a.function == "sum" else s / c)
    columns.update({k: _col(g[group.index(v)]) for k, v in mp.core.keys})
    missing = [f.name for f in schema.fields if f.name not in columns]
    if missing:
        raise Untranslatable(f"the rows of the GROUP BY have columns the maps do not give: {', '.join(missing)}")
    return rows.select(*[(F.round(columns[f.name]) if _integral(f.dataType) else columns[f.name])
                         .cast(f.dataType).alias(f.name) for f in schema.fields])


def group_rows_of(mp: MapsPlan, maps: Mapping[str, "pa.Table"], keys: "pa.Table", schema) -> "pa.Table":
    """:func:`group_rows` in the driver, over Arrow tables: the rows of γ for the groups
    ``keys`` (one row without columns for a GROUP BY without keys) read off the term maps
    ``maps``, in the Arrow types of γ's Spark ``schema`` (integers rounded half away from zero,
    as Spark's ``round``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from idivm.agca.arrow import matched
    from idivm.storage.schema import arrow_schema

    group = mp.group_variables
    g = [f"__g{j}" for j in range(len(group))]
    wanted = keys.select(group).rename_columns(g)

    def restricted(name: str, *extra: str) -> "pa.Table":
        table = maps[mp.term_map(name)]
        table = pa.table([*[table.column(v) for v in group], *[table.column(x) for x in extra], table.column(M)],
                         names=[*g, *extra, M])
        return matched(table, wanted, g, "left semi")

    def nonzero(t: "pa.Table") -> "pa.Table":
        return t.filter(pc.greater(pc.abs(t.column(M)), ZERO))

    # the groups whose count is not 0 (a GROUP BY without keys has its one row always), then
    # each aggregate's map entries joined on (a join may reorder the rows: the values are read
    # off the last table, by :func:`_aggregate_value`)
    rows = nonzero(restricted(COUNT)).select(g) if group else wanted
    for i, (name, a) in enumerate(mp.group.aggregates):
        alias = f"__a{i}"
        by_value = [b for b in mp.core.by_value if b[0] == name]
        if by_value:
            (_, function, _, x), = by_value
            present = nonzero(restricted(f"{name}$values", x)).select([*g, x])
            if function in ("sum", "avg", "count"):  # DISTINCT: each value once
                present = present.group_by([*g, x], use_threads=False).aggregate([])
            spec = {"min": [(x, "min")], "max": [(x, "max")], "count": [(x, "count")],
                    "sum": [(x, "sum")], "avg": [(x, "sum"), (x, "count")]}[function]
            part = present.group_by(g, use_threads=False).aggregate(spec)
            if function == "avg":
                total = pc.cast(part.column(f"{x}_sum"), pa.float64())
                value = pc.divide(total, pc.cast(part.column(f"{x}_count"), pa.float64()))
            else:
                value = part.column(f"{x}_{spec[0][1]}")
            rows = matched(rows, pa.table([*[part.column(c) for c in g], value], names=[*g, alias]), g, "left outer")
        elif a.function == "count":
            rows = matched(rows, restricted(name).rename_columns([*g, alias]), g, "left outer")
        else:
            total, n = (name, f"{name}$n") if a.function == "sum" else (f"{name}$sum", f"{name}$count")
            rows = matched(rows, restricted(total).rename_columns([*g, alias]), g, "left outer")
            rows = matched(rows, restricted(n).rename_columns([*g, f"{alias}n"]), g, "left outer")
    out_schema = arrow_schema(schema, nullable=True)
    keys_of, aggregates = dict(mp.core.keys), {name: (i, a) for i, (name, a) in enumerate(mp.group.aggregates)}
    out = []
    for f in out_schema:
        if f.name in keys_of:
            value = rows.column(g[group.index(keys_of[f.name])])
        elif f.name in aggregates:
            i, a = aggregates[f.name]
            value = _aggregate_value(rows, f"__a{i}", a, mp, f.name)
        else:
            raise Untranslatable(f"the rows of the GROUP BY have columns the maps do not give: {f.name}")
        if pa.types.is_integer(f.type) and not pa.types.is_integer(value.type):
            value = pc.round(value, round_mode="half_towards_infinity")
        out.append(pc.cast(value, f.type))
    return pa.table(out, schema=out_schema)


def rows_above(plan: O.Operator, group: O.GroupBy, rows: "pa.Table") -> "pa.Table | None":
    """The rows of ``plan`` with its γ ``group`` bound to ``rows`` (Arrow, γ's rows) in the
    driver: when every operator above γ is a projection, a selection (HAVING) or the return of
    a tuple, over terms the Arrow evaluator computes as Spark does
    (:func:`idivm.agca.arrow.scalar_column`); else None (the plan compiler evaluates them)."""
    import pyarrow as pa

    from idivm.agca.arrow import scalar_column
    from idivm.algebra.expressions import TupleExpr

    chain = []
    op = plan
    while op is not group:
        if isinstance(op, O.ReturnBag):  # the plan's result: a tuple per row
            evaluable = op is plan and isinstance(op.element, TupleExpr)
        else:
            evaluable = isinstance(op, (O.Project, O.Select))
        if not evaluable:
            return None
        chain.append(op)
        op = op.input
    for op in reversed(chain):
        if isinstance(op, O.Select):
            kept = scalar_column(op.condition, rows)
            if kept is None or not (pa.types.is_boolean(kept.type) or pa.types.is_null(kept.type)):
                return None
            rows = rows.filter(kept, null_selection_behavior="drop")
            continue
        outputs = op.outputs if isinstance(op, O.Project) else op.element.fields
        columns = [scalar_column(term, rows) for _, term in outputs]
        if any(c is None for c in columns):
            return None
        rows = pa.table(columns, names=[n for n, _ in outputs]) if outputs else rows.select([])
    return rows


def _aggregate_value(rows: "pa.Table", alias: str, a, mp: MapsPlan, name: str):
    """The value of aggregate ``a`` (named ``name``) in :func:`group_rows_of`'s joined ``rows``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if any(b[0] == name for b in mp.core.by_value):
        return rows.column(alias)
    if a.function == "count":
        return pc.fill_null(rows.column(alias), 0.0)
    s, c = pc.fill_null(rows.column(alias), 0.0), pc.fill_null(rows.column(f"{alias}n"), 0.0)
    value = s if a.function == "sum" else pc.divide(s, c)
    return pc.if_else(pc.greater(c, ZERO), value, pa.scalar(None, pa.float64()))


def _matched(left: "DataFrame", right: "DataFrame", on: Sequence[str], how: str) -> "DataFrame":
    """``left`` joined with ``right`` on the columns ``on`` both have, NULL equal to NULL;
    the result has ``left``'s columns once and ``right``'s others."""
    renamed = right.select(*[_col(c).alias(f"{c}_r") if c in on else _col(c) for c in right.columns])
    condition = None
    for c in on:
        same = left[quoted(c)].eqNullSafe(renamed[quoted(f"{c}_r")])
        condition = same if condition is None else condition & same
    if condition is None:  # no columns to match (a GROUP BY without keys): every row matches
        from pyspark.sql import functions as F

        condition = F.lit(True)
    joined = left.join(renamed, condition, how)
    return joined.drop(*[f"{c}_r" for c in on]) if how != "left_semi" else joined


def _integral(t) -> bool:
    from pyspark.sql import types as ST

    return isinstance(t, (ST.ByteType, ST.ShortType, ST.IntegerType, ST.LongType))


# --- storage: additive map tables --------------------------------------------------------------------

class StoredMaps:
    """The maps of one run as stored (``paths``: map -> table) by the storage ``engine``: each
    version read at most once, consolidated (:func:`held`, :func:`read_map_spark`), and a run's
    increments stored (:meth:`store`)."""

    def __init__(self, spark: "SparkSession", mp: MapsPlan, paths: Mapping, engine) -> None:
        self.spark, self.mp, self.paths, self.engine = spark, mp, paths, engine
        self._held: dict[tuple[str, int], "Lookup"] = {}
        self._spark: dict[tuple[str, int], "DataFrame"] = {}

    def keys(self, m: str) -> Sequence[str]:
        return self.mp.program.maps[m].keys

    def lookup(self, m: str, version: int) -> "Lookup":
        """Version ``version`` of map ``m`` in the driver, for lookups (:class:`~idivm.agca.arrow.Lookup`)."""
        if (m, version) not in self._held:
            self._held[(m, version)] = held(self.paths[m], version, self.keys(m))
        return self._held[(m, version)]

    def arrow(self, m: str, version: int) -> "pa.Table":
        """Version ``version`` of map ``m`` as an Arrow table: each key once, none 0."""
        return self.lookup(m, version).value

    def frame(self, m: str, version: int) -> "DataFrame":
        if (m, version) not in self._spark:
            self._spark[(m, version)] = read_map_spark(self.spark, self.paths[m], version, self.keys(m), self.engine)
        return self._spark[(m, version)]

    def store(self, m: str, version: int, increments: "DataFrame | pa.Table", metadata: Mapping[str, str]) -> tuple:
        """Store the ``increments`` (Arrow rows, or a run-sized DataFrame) of map ``m``, read at
        ``version``, in one commit based on that version: appended (the commit naming the
        consolidated write they follow), or, when :func:`appendable` says no, the map written
        consolidated with them.  (the map's new version, the rows the commit wrote.)"""
        import pyarrow as pa

        from idivm.agca.arrow import Lookup
        from idivm.storage import delta

        path, keys = self.paths[m], self.keys(m)
        local = isinstance(increments, pa.Table)
        base = map_base(path, version)
        with delta.pinned(path, version):  # no other run's increments in between
            if appendable(path, version, base):
                meta = {**metadata, APPENDED_TO: str(base)}
                new = delta.write_arrow(path, increments, mode="append", commit_metadata=meta) if local else \
                    delta.write_spark(increments, path, mode="append", engine=self.engine, commit_metadata=meta)
                if local:
                    hold_appended(path, version, new, increments)
                    delta.appended_rows(path, version, new, increments.num_rows)
                    return new, increments.num_rows
                return new, delta.row_count(path, new) - delta.row_count(path, version)
            if local:
                value = self.lookup(m, version).added(increments).value
                new = delta.write_arrow(path, value, mode="overwrite", commit_metadata=metadata)
                self._held[(m, new)] = Lookup(value, keys)
                hold(path, new, self._held[(m, new)])
            else:
                new = delta.write_spark(summed([self.frame(m, version), increments], keys), path, mode="overwrite",
                                        engine=self.engine, deletion_vectors=True, commit_metadata=metadata)
            return new, delta.row_count(path, new)


# --- the maps a process holds --------------------------------------------------------------------

#: the values of map versions this process read or wrote, by :func:`idivm.storage.delta.version_key`
#: (a version's value never changes), as :class:`~idivm.agca.arrow.Lookup` values: a version a
#: run of this process appended to is the held version before plus the run's increments, on the
#: same consolidated rows and indexes.  A process that maintains a view run after run
#: (``maintain --every``) thus reads each map from its table once and sorts its columns once
#: per consolidation, as DBToaster's maps and their indexes stay in memory.  Per map the two
#: versions held last, up to :data:`HELD_MAX_ROWS` consolidated rows in all, the oldest
#: dropped first.
_HELD: dict[tuple, "Lookup"] = {}
_HELD_LOCK = threading.Lock()
HELD_MAX_ROWS = 20_000_000

#: a held value's increments are summed into new consolidated rows once they pass the larger of
#: these rows and this share of those rows (a lookup filters the increments: a pass over them)
HELD_INCREMENT_ROWS = 10_000
HELD_INCREMENT_SHARE = 1 / 32


def held(path, version: int, keys: Sequence[str]) -> "Lookup":
    """The value of the map stored at ``path`` (keyed by ``keys``) at ``version``: held by this
    process, or read (:func:`read_map_arrow`) and held from then on."""
    from idivm.agca.arrow import Lookup
    from idivm.storage import delta

    key = delta.version_key(path, version)
    with _HELD_LOCK:
        value = _HELD.get(key) if key is not None else None
    if value is None:
        value = Lookup(read_map_arrow(path, version, keys), keys)
        _put(key, value)
    return value


def hold(path, version: int, value: "Lookup") -> None:
    """Hold ``value`` as the map stored at ``path`` at ``version`` (which this process wrote)."""
    from idivm.storage import delta

    _put(delta.version_key(path, version), value)


def _put(key: tuple | None, value: "Lookup") -> None:
    """Hold ``value`` under ``key`` (None: a version no longer named: not held)."""
    if key is not None:
        with _HELD_LOCK:
            _HELD[key] = value
            _evict(key)


def hold_appended(path, version: int, new: int, increments: "pa.Table") -> None:
    """Hold version ``new`` of the map stored at ``path`` as version ``version`` plus the
    ``increments`` appended to it, when this process holds ``version``."""
    from idivm.storage import delta

    before = delta.version_key(path, version)
    with _HELD_LOCK:
        value = _HELD.get(before) if before is not None else None
    if value is None:
        return
    value = value.added(increments)
    if value.increment_rows > max(HELD_INCREMENT_ROWS, HELD_INCREMENT_SHARE * value.base.num_rows):
        value = value.consolidated()
    hold(path, new, value)


def _evict(key: tuple) -> None:
    """Drop what ``_HELD`` holds of the same map as ``key`` at older versions but the latest of
    them (a run reads its maps after its writes as well as before), then the oldest values
    while their consolidated rows pass :data:`HELD_MAX_ROWS` (under ``_HELD_LOCK``)."""
    path, version = key[0], key[1]
    older = sorted((k for k in _HELD if k[0] == path and k[1] < version), key=lambda k: k[1])
    for other in older[:-1]:
        del _HELD[other]
    bases = {id(v.base): v.base.num_rows for v in _HELD.values()}
    rows = sum(bases.values())
    for other in list(_HELD):
        if rows <= HELD_MAX_ROWS:
            break
        if other != key:
            value = _HELD.pop(other)
            if id(value.base) in bases and not any(v.base is value.base for v in _HELD.values()):
                rows -= bases.pop(id(value.base))


#: the commit metadata of a commit that appended increments to a map: the version of the map's
#: consolidated write they follow (a commit without it wrote the map consolidated: each key once,
#: no entry of multiplicity 0)
APPENDED_TO = "idivm.map.base"

#: a map is written consolidated again, instead of appended to, once the rows appended since its
#: last consolidated write pass the larger of these rows and this share of that write's rows, or
#: after this many appends: its readers sum what they read per key (:func:`read_map_arrow`)
CONSOLIDATE_ROWS = 100_000
CONSOLIDATE_SHARE = 0.25
MAX_APPENDS = 50


def map_base(path, version: int) -> int | None:
    """The version of the consolidated write that version ``version`` of the map stored at
    ``path`` follows: ``version`` itself when it is one (a map defined before maps were
    appended to has only those); None when the map's log no longer tells."""
    from idivm.storage import delta

    commit = delta.commit_at(path, version)
    if commit is None:
        return None
    base = commit.get(APPENDED_TO)
    return version if base is None else int(base)


def appendable(path, version: int, base: int | None) -> bool:
    """Whether a run's increments of the map stored at ``path`` (at ``version``, following the
    consolidated write ``base``) are appended, rather than the map written consolidated."""
    from idivm.storage import delta

    if base is None or version - base >= MAX_APPENDS:
        return False
    consolidated = delta.row_count(path, base)
    return delta.row_count(path, version) - consolidated <= max(CONSOLIDATE_ROWS, CONSOLIDATE_SHARE * consolidated)


def read_map_arrow(path, version: int, keys: Sequence[str]) -> "pa.Table":
    """The entries of the map stored at ``path`` (keyed by ``keys``) at ``version``, each key
    once, none 0 (Arrow): the rows of its last consolidated write with the increments appended
    since added to those of the keys they name."""
    from idivm.agca import arrow
    from idivm.storage import delta

    base = map_base(path, version)
    if base == version:
        return delta.read_arrow(path, version)
    split = delta.read_added(path, version, base) if base is not None and not delta.needs_delta_spark(path) else None
    if split is None:
        return arrow.summed([delta.read_arrow(path, version)], keys)
    return arrow.plus(*split, keys)


def read_map_spark(spark: "SparkSession", path, version: int, keys: Sequence[str], engine) -> "DataFrame":
    """:func:`read_map_arrow` as a Spark DataFrame (the stored rows summed per key by Spark when
    increments were appended since the consolidated write)."""
    from idivm.storage import delta

    df = delta.read_spark(spark, path, version, engine=engine)
    return df if map_base(path, version) == version else summed([df], keys)


__all__ = ["MapsPlan", "StoredMaps", "Untranslatable", "changed_groups", "changes_relation", "check_types",
           "group_rows",
           "increments", "initial_maps", "plan_maps", "read_map_arrow", "read_map_spark", "relation"]
