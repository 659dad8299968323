"""Running a Δ-script (thesis §2.4 pass 3, §2.5): from change data feeds to one MERGE.

1. *Base i-diffs.*  Each base table's change data feed since the view's
   watermark is condensed per key (:func:`idivm.changes.condense_feed`) into its
   effective change (the row at the watermark and the row now: insert+delete is nothing, update+update one
   update with the first pre and the last post, §2.2) and routed: a change of
   attributes the view never reads is dropped; an insert, a delete or an update
   of a conditional attribute goes to ``Δ(T)`` (keys), its row before to
   ``Δpre(T)`` (unless inserted) and its row after to ``Δpost(T)`` (unless
   deleted); an update of non-conditional attributes only goes to ``Δu(T)``
   (post row plus the pre values in ``__idivm_pre``); the elements an update adds to,
   removes from or changes in a collection the view only unnests go to ``Δ(T.a)``
   (§2.14.2, :func:`changed_elements`).  Changes of a tuple attribute count only at the
   paths below it the view reads.
2. *i-diff queries.*  Every statement's plans are evaluated by the Spark plan
   compiler, reading ``T@pre``/``T@post`` at the pinned versions and the
   base i-diffs from memory; statements whose i-diffs are empty are skipped.
3. *One change set of the view.*  Replace statements name view rows by ID
   (resolved to full view IDs against the stored view, ``Output``) or, for
   tuple-based maintenance, by the tuples they had in the pre state; their post
   rows are upserted.  Update and increment statements rewrite the named rows
   that are not replaced; nested updates and nested replaces rewrite the elements of a
   stored bag they name by provenance (a nested replace also inserts its post-state
   elements into the rows its outer IDs name).  The result is a set of full rows to upsert and full
   IDs to delete, which the caller merges into the view in one commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import reduce
from typing import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as ST

from idivm.algebra import operators as O
from idivm.changes import condense_feed
from idivm.exec.compiler import KEY_TYPES, RESTRICT_MAX_VALUES, PlanCompiler, key_filter
from idivm.provenance.ids import HIDDEN, PROV_FIELD
from idivm.exec.patches import NEW, ElementPatch
from idivm.storage.delta import Patch, Patching, distinct_rows, key_mask, quoted
from idivm.storage.schema import arrow_schema
from idivm.storage.spark import Caches, by_name, is_local, local_rows, to_arrow
from idivm.script import (
    ELEMENT, KEYS, NESTED_KINDS, POST_ROWS, PRE_FIELD, PRE_ROWS, UPDATES, DeltaScript, DiffRef, ElementDiffs,
    StateRef, Statement, TableDiffs,
)


@dataclass(frozen=True)
class BaseDiffs:
    """The base i-diffs of one run: per table, the keys of replaced rows, their rows before
    and after the change (those that exist), and the rows of non-conditional updates
    (Arrow); how many change rows were read / dropped."""

    keys: Mapping[str, pa.Table]
    updates: Mapping[str, pa.Table]
    change_rows: int
    dropped: int
    pre_rows: Mapping[str, pa.Table]
    post_rows: Mapping[str, pa.Table]

    def rows(self) -> int:
        return sum(t.num_rows for t in self.keys.values()) + sum(t.num_rows for t in self.updates.values())

    def of(self, diff: DiffRef) -> pa.Table:
        """The rows of one base i-diff."""
        served = {KEYS: self.keys, UPDATES: self.updates, PRE_ROWS: self.pre_rows, POST_ROWS: self.post_rows}
        return served[diff.kind][diff.source]


def base_diffs(script: DeltaScript, changes: Mapping[str, pa.Table], schemas: Mapping[str, pa.Schema]) -> BaseDiffs:
    """Condense and route each table's change data feed (``changes``: table -> CDF rows)."""
    keys, updates, pre_rows, post_rows = {}, {}, {}, {}
    read = dropped = 0
    for td in script.tables:
        cdf = changes.get(td.table)
        schema = schemas[td.table]
        key_schema = pa.schema([schema.field(k) for k in td.key])
        nonkey = [f for f in schema if f.name not in td.key]
        upd_schema = pa.schema(list(schema) + [pa.field(PRE_FIELD, pa.struct(nonkey))])
        replaced, updated, before, after = [], [], [], []
        elements: dict[ElementDiffs, list[dict]] = {}
        if cdf is not None and cdf.num_rows:
            read += cdf.num_rows
            for pre, post in condense_feed(cdf, td.key).values():
                route = _route(td, pre, post)
                moved = [e for e in td.elements if pre[e.attribute] != post[e.attribute]] \
                    if route != "replace" and pre is not None and post is not None else []
                for e in moved:
                    key = {k: post[k] for k in td.key}
                    elements.setdefault(e, []).extend(
                        {**key, **dict(zip(e.columns(), i))}
                        for i in changed_elements(e, pre[e.attribute], post[e.attribute]))
                if route == "replace":
                    row = post if post is not None else pre
                    replaced.append({k: row[k] for k in td.key})
                    if pre is not None:
                        before.append({f.name: pre[f.name] for f in schema})
                    if post is not None:
                        after.append({f.name: post[f.name] for f in schema})
                elif route == "update":
                    updated.append({**{f.name: post[f.name] for f in schema},
                                    PRE_FIELD: {f.name: pre[f.name] for f in nonkey}})
                elif not moved:
                    dropped += 1
        keys[td.table] = pa.Table.from_pylist(replaced, schema=key_schema)
        updates[td.table] = pa.Table.from_pylist(updated, schema=upd_schema)
        pre_rows[td.table] = pa.Table.from_pylist(before, schema=schema)
        post_rows[td.table] = pa.Table.from_pylist(after, schema=schema)
        for e in td.elements:
            element_schema = pa.schema(list(key_schema) + _element_fields(e, schema.field(e.attribute).type))
            keys[DiffRef(td.table, KEYS, e).source] = pa.Table.from_pylist(elements.get(e, []), schema=element_schema)
    return BaseDiffs(keys, updates, read, dropped, pre_rows, post_rows)


def _element_fields(e: ElementDiffs, collection: pa.DataType) -> list[pa.Field]:
    element = collection.value_type
    if e.identity == "position":
        types = [pa.int64()]
    elif e.identity == "value":
        types = [element]
    else:
        types = [element.field(k).type for k in e.element_key]
    return [pa.field(c, t) for c, t in zip(e.columns(), types)]


def changed_elements(e: ElementDiffs, pre: list | None, post: list | None) -> list[tuple]:
    """The identities (see :meth:`ElementDiffs.columns`) of the elements of a nested collection
    that an update inserts, deletes or changes (thesis §2.14.2): by value, the values whose
    number of occurrences differs; by position, the positions (from 1) whose element differs
    or exists on one side only; by element key, the keys whose elements differ."""
    pre, post = pre or [], post or []
    if e.identity == "position":
        return [(i + 1,) for i in range(max(len(pre), len(post)))
                if i >= len(pre) or i >= len(post) or pre[i] != post[i]]
    if e.identity == "value":
        def identity(v):
            return (v,)
    else:
        def identity(v):
            return tuple(None if v is None else v.get(k) for k in e.element_key)
    before: dict[str, list] = {}
    after: dict[str, list] = {}
    ids: dict[str, tuple] = {}
    for side, values in ((before, pre), (after, post)):
        for v in values:
            i = identity(v)
            k = _canonical(i)
            ids[k] = i
            side.setdefault(k, []).append(_canonical(v))
    return [ids[k] for k in ids if sorted(before.get(k, [])) != sorted(after.get(k, []))]


def _canonical(value) -> str:
    """A hashable form of a (nested) value."""
    return json.dumps(value, sort_keys=True, default=str)


def _route(td: TableDiffs, pre: dict | None, post: dict | None) -> str | None:
    if pre is None and post is None:
        return None
    if pre is None or post is None:
        return "replace"
    partial = dict(td.partial)
    changed = {a for a in td.read if pre.get(a) != post.get(a)
               and (a not in partial or any(_at(pre.get(a), p) != _at(post.get(a), p) for p in partial[a]))}
    if not changed:
        return None
    if changed & set(td.conditional):
        return "replace"
    return "update"


def _at(value, path: tuple[str, ...]):
    """The value at ``path`` inside a tuple value (a dict), None where a tuple on it is."""
    for name in path:
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value


@dataclass(frozen=True)
class ViewChanges:
    """What a run does to the view: full rows to upsert, full IDs to delete."""

    #: a DataFrame, or rows the driver computed (with :attr:`deleted_rows`, and no ``deleted``)
    upserts: "DataFrame | pa.Table"
    #: the ID columns of the rows the replaces delete, computed (an upsert may insert a row
    #: again): in memory, or cached by Spark when they are many (:meth:`Caches.computed`)
    deleted: "DataFrame | None"
    cached: Caches = field(default_factory=Caches)  # to release once the changes are collected
    #: instead of rows: the single update/increment statement of the run and its i-diff rows
    direct: tuple[Statement, DataFrame] | None = None
    #: the rows of ``deleted`` when they were computed into the driver (None: they are many)
    deleted_rows: pa.Table | None = None
    #: the run's updates and increments, collected, to apply to the stored rows they name
    #: (those not deleted or upserted) where the files holding them are rewritten
    patches: tuple[Patch, ...] = ()

    def deletes(self, upserts: pa.Table) -> pa.Table:
        """The IDs of the rows to delete that ``upserts`` (the collected upserts) do not
        insert again, collected."""
        deleted = self.deleted_rows if self.deleted_rows is not None else to_arrow(self.deleted)
        if not deleted.num_rows or not upserts.num_rows:
            return deleted
        ids = deleted.column_names
        return deleted.filter(pc.invert(key_mask(deleted, ids, upserts.select(ids))))

    def release(self) -> None:
        self.cached.release()


#: the column of a nested update's element map (see :func:`_element_map`)
ELEMENT_MAP = f"{HIDDEN}element_map"
#: the column of a nested replace's key set (see :func:`_element_keys`)
ELEMENT_KEYS = f"{HIDDEN}element_keys"


def evaluate(spark: SparkSession, script: DeltaScript, diffs: BaseDiffs,
             read_state: Callable[[StateRef], DataFrame], view: DataFrame,
             progress: Callable[[str], None] | None = None,
             locate: Callable[[Statement, DataFrame], DataFrame | None] | None = None,
             read_view: Callable[[str, list], DataFrame] | None = None,
             in_memory_max_rows: int | None = None, patch: bool = False) -> ViewChanges:
    """The view's changes (see module doc).  ``read_state(StateRef(table, PRE|POST))`` reads a
    base table state; ``view`` is the stored view (with its hidden ID columns).  ``locate(s, rows)``,
    if given, finds the view rows a nested update ``s`` with i-diff ``rows`` names through a
    global provenance index (§2.15.3): their ID columns, or None when no index serves ``s``;
    without it, or on None, the view's bags are searched.  ``read_view(column, values)``, for
    a view stored in files of narrow ID ranges, reads the view's rows in the files that may
    hold those values of an ID column; the rows a run rewrites are then read from those files
    only, and an update alone is applied as rewritten rows too, not by ID.
    ``in_memory_max_rows``: the rows of an intermediate result (IDs named, keys of a replace,
    elements) brought into the driver at most; a larger one stays in Spark, cached (None: no
    bound).  ``patch``: the caller rewrites the files holding the rows a run changes in the
    driver (:func:`idivm.storage.delta.rewrite_clustered`); when the run's other statements
    are all updates and increments of whole columns by (partial) IDs, their i-diff rows are
    collected as :attr:`ViewChanges.patches` for that rewrite to apply, and the view is not
    read here."""
    frames: dict[DiffRef | StateRef, DataFrame] = {}

    def in_memory(source: DiffRef | StateRef) -> pa.Table | None:
        """The rows of an i-diff (the driver holds them), None for a base-table state."""
        return diffs.of(source) if isinstance(source, DiffRef) else None

    def read_table(source: DiffRef | StateRef) -> DataFrame:
        if source not in frames:
            rows = in_memory(source)
            frames[source] = spark.createDataFrame(rows) if rows is not None else read_state(source)
        return frames[source]

    # the states of base tables are read restricted to the keys the i-diffs name
    compiler = PlanCompiler(spark, read_table, restrict=lambda name: in_memory(name) is None,
                            progress=progress, in_memory=in_memory, cached=Caches(in_memory_max_rows))
    _share_aggregates(script, diffs, compiler)
    ids = list(script.id_columns)
    columns = view.columns
    deletes: list[DataFrame] = []
    inserts: list[DataFrame] = []
    rewrites: list[Statement] = []
    for i, s in enumerate(script.statements, 1):
        if not _has_input(s, diffs):
            continue
        if progress:
            progress(f"Δ{i} from {s.origin}: {s.kind}")
        if s.kind == "replace":
            if s.pre_rows is not None:
                deletes.append(compiler.evaluate(s.pre_rows).select(*by_name(ids)))
            elif s.keys is None:
                deletes.append(view.select(*by_name(ids)))
            else:
                keys = _bound_keys(spark, compiler, s)
                if keys is None:
                    continue
                # keys of whole IDs name the rows to delete themselves (a key no row has deletes
                # nothing); partial ones name the rows that have them
                deletes.append(keys.select(*by_name(ids)) if set(s.on) == set(ids) else
                               _rows_named(view, read_view, keys, s.on, ids))
            inserts.append(compiler.evaluate(s.rows).select(*by_name(columns)))
        else:
            rewrites.append(s)
    spark_empty = view.select(*by_name(ids)).where(F.lit(False))  # an empty relation: read by no job
    # the IDs of the rows to delete: computed once (in memory when few), for the rewrite and the caller
    deleted_ids, deleted = _distinct_ids(spark, compiler.cached, deletes, spark_empty)
    inserted = _union(inserts, view.where(F.lit(False)))
    if ids:
        inserted = inserted.dropDuplicates(ids)
    if patch and rewrites and all(_patchable(s, locate) for s in rewrites):
        patches = _patches(spark, compiler, rewrites, ids, locate)
        if patches is not None:
            return ViewChanges(inserted, deleted, compiler.cached, deleted_rows=deleted_ids, patches=patches)
    if (read_view is None and not deletes and len(rewrites) == 1 and rewrites[0].kind in ("update", "increment")
            and rewrites[0].on):
        # one update (or increment) alone: the stored view is not read here; the MERGE
        # names its rows by the (partial) IDs of the i-diff
        direct = compiler.evaluate(rewrites[0].query)
        return ViewChanges(inserted, deleted, compiler.cached, direct=(rewrites[0], direct), deleted_rows=deleted_ids)
    rewritten = None
    if rewrites:
        named_by: list[DataFrame] = []
        queries = []
        for s in rewrites:
            if s.kind == "nested_replace":
                q = _bound_keys(spark, compiler, s)
                if q is None:
                    continue
            else:
                q = compiler.evaluate(s.query)
                if read_view is not None and s.kind not in NESTED_KINDS:
                    q = compiler.cached.computed(q)[1]  # its values name the files of the rows it updates
            # the i-diff names its rows by ID, or (nested) by the elements they hold
            by_id = s.kind not in NESTED_KINDS or s.names_rows_by_id()
            found = locate(s, q) if locate is not None and not by_id else None
            if by_id and s.kind != "nested_replace":
                named_by.append(_rows_named(view, read_view, q, s.on, ids))
            if s.kind == "nested_update":
                q = _element_map(s, q, view)
            elif s.kind == "nested_replace":
                elements = compiler.cached.computed(compiler.evaluate(s.rows))[1]
                rows_of = elements.select(*by_name(s.on))
                if by_id:
                    rows_of = rows_of.unionByName(q.select(*by_name(s.on)))
                named_by.append(_rows_named(view, read_view, rows_of, s.on, ids))
                q = (_element_keys(s, q, view), elements)
            queries.append((s, q))
            if not by_id:
                named_by.append((found if found is not None else _named(view, s, q)).select(*by_name(ids)))
        # the IDs of the rows to rewrite are few: computed first, they restrict the read of the
        # view's rows (whole, with their bags) to the pages whose statistics may hold them
        named, only, values = _named_ids(_union(named_by, spark_empty).distinct(), compiler.cached)
        kept = _match(_in_files(view, read_view, ids, values).filter(only), deleted, ids, "left_anti")
        rows = _match(kept, named, ids, "left_semi")
        for s, q in queries:
            rows = _REWRITES[s.kind](rows, s, q)
        rewritten = rows.select(*by_name(columns))
    upserts = inserted if rewritten is None else inserted.unionByName(rewritten)
    return ViewChanges(upserts, deleted, compiler.cached, deleted_rows=deleted_ids)


def _patchable(s: Statement, locate) -> bool:
    """Whether the rewrite ``s`` can be applied in the driver to the stored rows it names: an
    update or increment of whole columns by (partial) IDs, or a nested update or replace whose
    rows are named by ID or found through a provenance index (``locate``)."""
    if s.kind in ("update", "increment"):
        return bool(s.on) and all(isinstance(c, str) for c, _ in s.set)
    return s.kind in NESTED_KINDS and (s.names_rows_by_id() or locate is not None)


def _patches(spark: SparkSession, compiler: PlanCompiler, rewrites: Sequence[Statement], ids: Sequence[str],
             locate) -> tuple[Patching, ...] | None:
    """The rewrites as patches of the stored rows (:func:`_patchable`), their i-diffs collected;
    None when an index does not serve a nested statement after all."""
    out: list[Patching] = []
    for s in rewrites:
        if s.kind in ("update", "increment"):
            out.append(Patch(s.kind, s.on, s.set, to_arrow(compiler.evaluate(s.query))))  # type: ignore[arg-type]
            continue
        if s.kind == "nested_update":
            q = to_arrow(compiler.evaluate(s.query))
            values = [(path, _set_field(i)) for i, (path, _) in enumerate(s.set)]
            names = pa.table([q.column(c) for _, c in s.match] + [q.column(c) for _, c in s.set],
                             names=[p for p, _ in s.match] + [v for _, v in values])
            extra = []
        else:
            keys = _bound_keys(spark, compiler, s)
            if keys is None:
                continue
            q = to_arrow(keys)
            names = pa.table([q.column(c) for _, c in s.match], names=[p for p, _ in s.match])
            values = []
            elements = to_arrow(compiler.evaluate(s.rows))
            extra = [_grouped(elements, s.on, q if s.names_rows_by_id() else None)]
        match = tuple(p for p, _ in s.match)
        if s.names_rows_by_id():
            named = [distinct_rows(q.select(list(s.on)))] if s.kind == "nested_update" else []
            on = s.on
        else:
            found = locate(s, q)
            if found is None:
                return None
            named, on = [found.select(list(ids))], tuple(ids)
        for rows, by in [(r, on) for r in named] + [(r, s.on) for r in extra]:
            if rows.num_rows:
                out.append(ElementPatch(s.kind, by, rows, s.path, match, names, tuple(values)))  # type: ignore[arg-type]
    return tuple(out)


def _grouped(elements: pa.Table, on: Sequence[str], keys: pa.Table | None) -> pa.Table:
    """The rows ``on`` of a nested replace's post-state ``elements`` (and of its ``keys``, when
    they name rows by ID too), each with the list of its elements (column :data:`NEW`)."""
    groups: dict[tuple, list] = {}
    for r, e in zip(elements.select(list(on)).to_pylist(), elements.column(ELEMENT).to_pylist()):
        groups.setdefault(tuple(r.values()), []).append(e)
    if keys is not None:
        for r in keys.select(list(on)).to_pylist():
            groups.setdefault(tuple(r.values()), [])
    schema = pa.schema([elements.schema.field(c) for c in on] +
                       [pa.field(NEW, pa.list_(elements.schema.field(ELEMENT).type))])
    columns = list(zip(*groups)) if groups else [[] for _ in on]
    return pa.table([pa.array(list(c), schema.field(i).type) for i, c in enumerate(columns)] +
                    [pa.array(list(groups.values()), schema.field(NEW).type)], schema=schema)


def _distinct_ids(spark: SparkSession, cached: Caches, frames: Sequence[DataFrame],
                  empty: DataFrame) -> tuple[pa.Table | None, DataFrame]:
    """The distinct rows of the union of ``frames`` (:meth:`Caches.computed`); when the driver
    holds every one of them (keys of i-diffs), united in the driver, without a Spark job."""
    if not frames:
        return arrow_schema(empty.schema, nullable=True).empty_table(), empty
    types = {f.name: f.dataType for f in empty.schema.fields}
    if all(all(isinstance(c.dataType, ST.NullType) or c.dataType == types.get(c.name) for c in f.schema.fields)
           and is_local(f) for f in frames):
        schema = arrow_schema(empty.schema, nullable=True)
        rows = distinct_rows(pa.concat_tables([local_rows(f).select(schema.names).cast(schema) for f in frames]))
        return rows, spark.createDataFrame(rows, empty.schema) if rows.num_rows else empty
    return cached.computed(_union(list(frames), empty).distinct())


def _bound_keys(spark: SparkSession, compiler: PlanCompiler, s: Statement) -> DataFrame | None:
    """The keys of the replace or nested replace ``s``, few (as many as its i-diffs name):
    computed now and bound in the compiler, so that its post-state query, which names the
    changed tuples by them, does not compute them again; None when there are none (``s``
    changes nothing)."""
    named, keys = compiler.cached.computed(compiler.bindings(s.keys.input))
    if named is not None and named.num_rows == 0:
        return None
    compiler.bind(s.keys.input, keys)
    return compiler.evaluate(s.keys)


def _rows_named(view: DataFrame, read_view: Callable[[str, list], DataFrame] | None, names: DataFrame,
                on: Sequence[str], ids: Sequence[str]) -> DataFrame:
    """The ID columns of the view rows whose columns ``on`` take the values of a row of
    ``names`` (read from the files that may hold them, :func:`_holding`)."""
    return _match(_holding(view, read_view, names, on, ids), names, on, "left_semi").select(*by_name(ids))


def _holding(view: DataFrame, read_view: Callable[[str, list], DataFrame] | None, names: DataFrame,
             on: Sequence[str], ids: Sequence[str]) -> DataFrame:
    """The view rows that may match ``names`` on the columns ``on``: the stored view, or, for a
    view stored in files of narrow ID ranges (``read_view``), its rows in the files that may
    hold the values ``names`` give the first ID column (computed now: few), when ``on`` has it."""
    if read_view is None or not ids or ids[0] not in on:
        return view
    return _in_files(view, read_view, ids, to_arrow(names.select(F.col(quoted(ids[0]))).distinct()
                                                    .limit(RESTRICT_MAX_VALUES + 1)).column(0).to_pylist())


def _in_files(view: DataFrame, read_view: Callable[[str, list], DataFrame] | None, ids: Sequence[str],
              values: list | None) -> DataFrame:
    """The view's rows in the files that may hold ``values`` of its first ID column (with
    ``read_view``, for a view stored in files of narrow ID ranges); the stored view without
    it, or when the values are unknown (None) or too many."""
    if read_view is None or values is None or len(values) > RESTRICT_MAX_VALUES:
        return view
    return read_view(ids[0], values)


def _named_ids(ids: DataFrame, cached: Caches) -> tuple[DataFrame, Column, list | None]:
    """The view IDs ``ids`` computed now (in memory, or cached when they are many), a filter of view rows that
    holds for them: each ID column among their values (TRUE when they are too many), and the
    values of the first ID column (None when they are too many)."""
    table, named = cached.computed(ids)
    if table is None or table.num_rows > RESTRICT_MAX_VALUES:
        return named, F.lit(True), None
    values = {f.name: table.column(f.name).to_pylist() for f in ids.schema.fields}
    parts = [key_filter(f.name, values[f.name], None in values[f.name])
             for f in ids.schema.fields if isinstance(f.dataType, KEY_TYPES)]
    return named, reduce(lambda a, b: a & b, parts, F.lit(True)), values[ids.columns[0]]



def _share_aggregates(script: DeltaScript, diffs: BaseDiffs, compiler: PlanCompiler) -> None:
    """Aggregates of i-diffs that several statements read (increments, and the groups they
    recompute instead) are computed once, into the driver (or cached by Spark when they are
    many, :meth:`Caches.computed`), and bound in the compiler."""
    uses: dict[int, tuple[O.Operator, int]] = {}
    for s in script.statements:
        if not _has_input(s, diffs):
            continue
        for _, plan in s.plans():
            for op in {id(o): o for o in O.walk(plan, into_nested=False) if isinstance(o, O.GroupBy)}.values():
                uses[id(op)] = (op, uses.get(id(op), (op, 0))[1] + 1)
    for op, n in uses.values():
        if n > 1:  # computed now: in memory when few, which the statements then read without a job
            compiler.bind(op, compiler.cached.computed(compiler.bindings(op))[1])


def _has_input(s: Statement, diffs: BaseDiffs) -> bool:
    """Whether a base i-diff the statement starts from is non-empty.  (A statement from
    ``Δ(T)`` may read ``Δpre(T)``/``Δpost(T)`` instead: they are empty when ``Δ(T)`` is,
    and one of them may be empty when it is not — inserts only, deletes only.)"""
    return any(diffs.of(o.diff).num_rows > 0 for o in s.starts)


def _named(rows: DataFrame, s: Statement, q) -> DataFrame:
    """The rows holding an element the nested update or replace ``s`` names by its provenance
    (``q``: for a nested update, its element map; for a nested replace, its key set and
    elements)."""
    names = q if s.kind == "nested_update" else q[0]
    hit = F.exists(F.col(quoted(s.path)), lambda e: _names(s, e))
    return rows.crossJoin(names).filter(hit).select(*by_name(rows.columns))


def _names(s: Statement, e) -> Column:
    """Whether the nested update or replace ``s`` names element ``e`` by its provenance: a key
    of the element map, or of the key set."""
    if s.kind == "nested_update":
        return F.map_contains_key(F.col(ELEMENT_MAP), _element_key(s, e))
    return F.array_contains(F.col(ELEMENT_KEYS), _element_key(s, e))


def _element_keys(s: Statement, q: DataFrame, view: DataFrame) -> DataFrame:
    """The keys of a nested replace as one array (a single-row DataFrame, column
    :data:`ELEMENT_KEYS`) of element provenance (the ``match`` fields, in the view's types)."""
    prov = view.schema[s.path].dataType.elementType[PROV_FIELD].dataType
    key = F.struct(*[F.col(quoted(c)).cast(prov[p].dataType).alias(p) for p, c in s.match])
    return q.agg(F.array_distinct(F.collect_list(key)).alias(ELEMENT_KEYS))


def _replace_elements(rows: DataFrame, s: Statement, q: tuple[DataFrame, DataFrame]) -> DataFrame:
    """``rows`` with the nested replace ``s`` applied: in the bag of column ``s.path``, the
    elements whose provenance is in the key set are deleted and the post-state elements of the
    row (by its ID columns ``s.on``) inserted; the bag is kept sorted, as bags are built."""
    keys, elements = q
    bag = rows.schema[s.path].dataType
    new = f"{HIDDEN}new_elements"
    grouped = elements.groupBy(*[F.col(quoted(c)) for c in s.on]).agg(
        F.collect_list(F.col(quoted(ELEMENT)).cast(bag.elementType)).alias(new))
    r = grouped.select(*[F.col(quoted(c)).alias(f"__q_{c}") for c in s.on], new)
    cond = reduce(lambda a, b: a & b, [rows[quoted(c)].eqNullSafe(r[quoted(f"__q_{c}")]) for c in s.on])
    joined = rows.join(r, cond, "left").crossJoin(keys)
    old = F.col(quoted(s.path))
    kept = F.filter(old, lambda e: ~_names(s, e))
    empty = F.array().cast(bag)
    value = F.when(old.isNull() & F.col(new).isNull(), old) \
        .otherwise(F.sort_array(F.concat(F.coalesce(kept, empty), F.coalesce(F.col(new), empty))))
    return joined.select(*[value.alias(c) if c == s.path else F.col(quoted(c)) for c in rows.columns])


def _element_map(s: Statement, q: DataFrame, view: DataFrame) -> DataFrame:
    """The rows of a nested update as one map (a single-row DataFrame, column
    :data:`ELEMENT_MAP`): element provenance (the ``match`` fields, in the view's types) ->
    the new values of the fields the ``set`` paths name (in the view's types, fields
    ``__idivm_set<i>`` in the order of ``set``)."""
    element = view.schema[s.path].dataType.elementType
    prov = element[PROV_FIELD].dataType
    key = F.struct(*[F.col(quoted(c)).cast(prov[p].dataType).alias(p) for p, c in s.match])
    value = F.struct(*[F.col(quoted(c)).cast(_field_type(element, path)).alias(_set_field(i))
                       for i, (path, c) in enumerate(s.set)])
    entries = F.collect_list(F.struct(key.alias("key"), value.alias("value")))
    return q.agg(F.map_from_entries(entries).alias(ELEMENT_MAP))


def _field_type(element: ST.StructType, path: tuple[str, ...]) -> ST.DataType:
    """The type of the field at ``path`` inside an element of type ``element``."""
    t: ST.DataType = element
    for name in path:
        t = t[name].dataType
    return t


def _set_field(i: int) -> str:
    return f"{HIDDEN}set{i}"


def _element_key(s: Statement, e):
    return F.struct(*[e.getField(PROV_FIELD).getField(p).alias(p) for p, _ in s.match])


def _with_paths(e, values: dict[tuple[str, ...], Column]):
    """Tuple ``e`` with the field at each path of ``values`` set to its value; the tuples on
    the way keep their other fields, and each is rebuilt once, from ``e``'s own (a chain of
    updates, each reading the tuple the previous one built, would double the expression at
    every path)."""
    by_head: dict[str, dict[tuple[str, ...], Column]] = {}
    for path, value in values.items():
        by_head.setdefault(path[0], {})[path[1:]] = value
    out = e
    for head, rest in by_head.items():
        inner = {p: v for p, v in rest.items() if p}
        base = rest[()] if () in rest else e.getField(head)
        out = out.withField(head, _with_paths(base, inner) if inner else base)
    return out


def _rewrite_elements(rows: DataFrame, s: Statement, q: DataFrame) -> DataFrame:
    """``rows`` with the nested update ``s`` applied by path navigation: in the bag of column
    ``s.path``, every element whose provenance is a key of the map ``q`` gets its new values at
    the field paths of ``s.set`` (inside a member tuple of a group, ``users.elite``); the other
    elements, the other fields, and the other columns stay as they are."""
    m = F.col(ELEMENT_MAP)

    def element(x):
        e, new = x.getField("e"), x.getField("new")
        updated = _with_paths(e, {path: new.getField(_set_field(i)) for i, (path, _) in enumerate(s.set)})
        return F.when(new.isNull(), e).otherwise(updated)

    def looked_up(c):  # each element with its new values (NULL: not named), one lookup each
        return F.transform(c, lambda e: F.struct(e.alias("e"), F.try_element_at(m, _element_key(s, e)).alias("new")))

    out = [F.transform(looked_up(F.col(quoted(c))), element).alias(c) if c == s.path else F.col(quoted(c))
           for c in rows.columns]
    return rows.crossJoin(q).select(*out)


def _rewrite(rows: DataFrame, s: Statement, q: DataFrame) -> DataFrame:
    """``rows`` with the update/increment ``s`` (query result ``q``) applied where it names them."""
    matched = "__idivm_matched"
    q2 = q.withColumn(matched, F.lit(True))
    renamed = q2.select(*[F.col(quoted(c)).alias(f"__q_{c}") for c in q2.columns])
    cond = reduce(lambda a, b: a & b, [rows[quoted(c)].eqNullSafe(renamed[quoted(f"__q_{c}")]) for c in s.on]) if s.on else F.lit(True)
    joined = rows.join(renamed, cond, "left")
    hit = F.col(f"__q_{matched}").isNotNull()
    out = []
    sets = dict(s.set)
    for c in rows.columns:
        if c in sets:
            v = F.col(quoted(f"__q_{sets[c]}"))
            new = v if s.kind == "update" else F.col(quoted(c)) + v
            out.append(F.when(hit, new).otherwise(F.col(quoted(c))).alias(c))
        else:
            out.append(F.col(quoted(c)))
    return joined.select(*out)


_REWRITES = {"nested_update": _rewrite_elements, "nested_replace": _replace_elements,
             "update": _rewrite, "increment": _rewrite}


def _match(left: DataFrame, right: DataFrame, cols, how: str) -> DataFrame:
    """``left`` (semi/anti) joined with ``right`` on null-safe equality of ``cols``.

    A column that is NULL by construction (an ID of the other union branch) has Spark's
    void type, and Spark's hash join does not match void keys reliably (two in-memory
    relations joined on ``<=>`` of void columns find no match): such keys are compared
    cast to the other side's type (or to string).  ``left`` keeps its columns as they are."""
    cols = list(cols)
    types = {c: _comparable(left.schema[c].dataType, right.schema[c].dataType) for c in cols}
    r = right.select(*[_cast(F.col(quoted(c)), types[c]).alias(f"__r_{c}") for c in cols])
    cond = reduce(lambda a, b: a & b, [_cast(left[quoted(c)], types[c]).eqNullSafe(r[quoted(f"__r_{c}")]) for c in cols]) \
        if cols else F.lit(True)
    return left.join(r, cond, how)


def _comparable(a: ST.DataType, b: ST.DataType) -> ST.DataType | None:
    """The type to compare a void column in (None: compare as they are)."""
    if not isinstance(a, ST.NullType) and not isinstance(b, ST.NullType):
        return None
    return b if isinstance(a, ST.NullType) and not isinstance(b, ST.NullType) else \
        a if not isinstance(a, ST.NullType) else ST.StringType()


def _cast(c, to: ST.DataType | None):
    return c if to is None else c.cast(to)


def _union(frames: list[DataFrame], empty: DataFrame) -> DataFrame:
    return reduce(lambda a, b: a.unionByName(b), frames) if frames else empty


__all__ = ["BaseDiffs", "ViewChanges", "base_diffs", "evaluate"]
