"""Global provenance indexes stored as Delta tables (thesis §2.15.1–§2.15.3).

§2.15.2 selects, at define time, the indexes the view's i-diffs need
(:func:`idivm.provenance.indexes.select_indexes`).  An index of a nested collection, such as
``full_reviews #() / #(user_id)`` of view V, maps the provenance an i-diff names of the
collection's elements (and of the levels above them) to the top-level rows that hold them: an
i-diff ``#(user_id)`` under ``#()`` (Example 2.13.1) reaches the businesses whose
``full_reviews`` hold a review of that user through the index, instead of by looking into the
bag of every view row.  The index of the view's root bag (``root #(business_id)``) is the view
table itself, keyed by its ID columns, so only nested collections get tables.

**Layout.**  One Delta table per index, ``<view path>.indexes/<n>``, with one row per distinct
(provenance values it names, ID columns of the top-level row): the columns
``l<level>_<attribute>`` (level 0 is the view's root bag, whose attributes are its IDs; level
*k* the *k*-th collection of the path, read from its elements' ``__idivm_prov``), then the
view's ID columns.  The commit that writes an index records the index (``idivm.index``) and
the view version it reflects (``idivm.view_version``).

**Order.**  An index table is ordered by the provenance a lookup names (the attributes of the
collection's elements, :attr:`StoredIndex.order`), then by the view's ID columns, in small
files of narrow ranges (:data:`INDEX_FILE_BYTES`): a lookup of a few dozen elements reads the
few files whose statistics admit them, not the whole index; on any order the read is exact.

**Maintenance.**  A maintenance run commits the view first, then each index.  The view's
commit names the rows it removed as they were (those it upserted or deleted); the entries of
those rows that its upserts no longer have are deleted, and the entries of its upserts that
the rows did not have are inserted, rewriting only the index files that may hold them
(:func:`idivm.storage.delta.rewrite_clustered`).  So a run that changes the attributes of
elements, but no element's place, rewrites no index file.  When Spark writes the view (a
delta-spark engine, or a view with deletion vectors) Spark computes those entries and one
delta-spark MERGE per index applies them (:func:`apply_spark`), and a lookup is a Spark join
of the index with the i-diff's keys (:meth:`StoredIndex.spark_lookup`): no index entries pass
through the driver.  The index tables of ``delta-spark-dv`` have deletion vectors.
Before a run reads an index, it checks that the index reflects the view's current version; an
index that does not (a crash between the two commits, a run that recomputed the view, or one
run with ``--no-index``) is rebuilt from the view.  So an index never gives a wrong answer,
only a late one that is repaired before use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from idivm.script import NESTED_KINDS
from idivm.provenance.ids import PROV_FIELD
from idivm.provenance.indexes import GlobalProvenanceIndex, IndexSelection
from idivm.storage import delta
from idivm.storage import layout as layouts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

INDEXES = "indexes"  # the directory of a view's index tables: <view path>.indexes
#: the Arrow memory of a file of an index table (see :func:`apply`)
INDEX_FILE_BYTES = 64 * 1024
# the columns of a collection and of its elements while Spark computes an index's entries
_BAG, _ELEMENT = "__idivm_index_bag", "__idivm_index_element"
# the column of a MERGE source row of an index table: -1 an entry to delete, 1 one to insert
_SIDE = "__idivm_index_side"
# reads of an index table by Spark go through delta-spark (whichever engine wrote it)
_SPARK = delta.Engine("delta-spark")


@dataclass(frozen=True)
class StoredIndex:
    """A nested-collection index of ``index`` laid out over a view whose ID columns are
    ``id_columns``: ``columns`` are (level, attribute, column name) of the provenance it names."""

    index: GlobalProvenanceIndex
    name: str  # the directory under ``<view path>.indexes``
    id_columns: tuple[str, ...]
    columns: tuple[tuple[int, str, str], ...]
    schema: pa.Schema
    root_columns: tuple[str, ...]  # the view ID column of each level-0 attribute

    def path(self, view_path: Path) -> Path:
        return view_path.parent / f"{view_path.name}.{INDEXES}" / self.name

    # --------------------------------------------------------------------- entries

    def entries(self, rows: pa.Table | pa.RecordBatch) -> pa.Table:
        """The distinct index rows of view ``rows`` (which have the view's columns)."""
        batches = rows.to_batches() if isinstance(rows, pa.Table) else [rows]
        tables = [self._batch_entries(b) for b in batches if b.num_rows]
        if not tables:
            return self.schema.empty_table()
        # the entries of one top-level row are in one batch: distinct per batch is distinct
        return pa.concat_tables(tables)

    def _batch_entries(self, batch: pa.RecordBatch) -> pa.Table:
        carried: dict[str, pa.Array] = {c: batch.column(c) for c in self.id_columns}
        for attr, column in zip(self.index.levels[0], self.root_columns):
            carried[self._column(0, attr)] = batch.column(column)
        current: pa.Array | None = None  # the elements of the current level
        for depth, name in enumerate(self.index.collection, 1):
            bag = batch.column(name) if depth == 1 else pc.struct_field(current, name)
            if isinstance(bag, pa.ChunkedArray):
                bag = bag.combine_chunks()
            parents = pc.list_parent_indices(bag)
            elements = pc.list_flatten(bag)
            present = pc.is_valid(elements)
            parents, elements = parents.filter(present), elements.filter(present)
            carried = {c: a.take(parents) for c, a in carried.items()}
            prov = pc.struct_field(elements, PROV_FIELD)
            for attr in self.index.levels[depth]:
                carried[self._column(depth, attr)] = pc.struct_field(prov, attr)
            current = elements
        table = pa.table({f.name: carried[f.name].cast(f.type) for f in self.schema}, schema=self.schema)
        return table.group_by(list(table.column_names), use_threads=False).aggregate([])\
            .select(self.schema.names).cast(self.schema)

    def spark_entries(self, view: "DataFrame") -> "DataFrame":
        """:meth:`entries` computed by Spark from the view's rows ``view`` (nothing collected)."""
        return self._spark_elements(view).distinct()

    def _spark_elements(self, view: "DataFrame") -> "DataFrame":
        """The index rows of the elements of ``view``'s rows, one per element (not distinct)."""
        from pyspark.sql import functions as F

        def col(name: str):
            return F.col(delta.quoted(name))

        names = list(self.id_columns) + [self._column(0, a) for a in self.index.levels[0]]
        df = view.select(*[col(c) for c in self.id_columns],
                         *[col(c).alias(self._column(0, a)) for a, c in zip(self.index.levels[0], self.root_columns)],
                         col(self.index.collection[0]).alias(_BAG))
        for depth, step in enumerate(self.index.collection, 1):
            if depth > 1:
                df = df.select(*[col(n) for n in names], F.col(_ELEMENT).getField(step).alias(_BAG))
            # explode skips NULL and empty collections, the filter NULL elements (as entries does)
            df = df.select(*[col(n) for n in names], F.explode(F.col(_BAG)).alias(_ELEMENT)) \
                .where(F.col(_ELEMENT).isNotNull())
            for attr in self.index.levels[depth]:
                name = self._column(depth, attr)
                df = df.withColumn(name, F.col(_ELEMENT).getField(PROV_FIELD).getField(attr))
                names.append(name)
        return df.select(*[col(n) for n in self.schema.names])

    def _column(self, level: int, attr: str) -> str:
        return next(c for lv, a, c in self.columns if lv == level and a == attr)

    @property
    def order(self) -> tuple[str, ...]:
        """The columns the table is ordered by: the provenance of the last level (what a lookup
        names), then the other columns."""
        last = len(self.index.levels) - 1
        first = [c for lv, _, c in self.columns if lv == last]
        return (*first, *[n for n in self.schema.names if n not in first])

    # --------------------------------------------------------------------- lookups

    def lookup(self, path: Path, keys: pa.Table) -> pa.Table:
        """The ID columns of the top-level rows holding an element named by a row of ``keys``
        (its columns: the attributes of the index's last level), read from the index files
        that may hold them."""
        last = len(self.index.levels) - 1
        keys = keys.rename_columns([self._column(last, a) for a in keys.column_names])
        if keys.num_rows == 0:
            return self.schema.empty_table().select(list(self.id_columns))
        first = self.order[0]
        holding = (first, keys.column(first).cast(self.schema.field(first).type).to_pylist()) \
            if first in keys.column_names else None
        table = delta.read_arrow(path, holding=holding).select(self.schema.names).cast(self.schema)
        found = _matching(table, self.schema, keys.column_names, keys)
        return delta.distinct_rows(found.select(list(self.id_columns)))

    def spark_lookup(self, path: Path, keys: "DataFrame") -> "DataFrame":
        """:meth:`lookup` by Spark: the index table (at its latest version) joined with ``keys``,
        a DataFrame, NULL-safely; nothing of the index passes through the driver.  When the
        keys give few values of the column the table is ordered by (a run's i-diff keys; at
        most :data:`~idivm.exec.compiler.RESTRICT_MAX_VALUES`, collected: run-sized), the read
        is restricted to the files whose statistics admit them."""
        from pyspark.sql import functions as F

        from idivm.exec.compiler import RESTRICT_MAX_VALUES

        last = len(self.index.levels) - 1
        keys = keys.select(*[F.col(delta.quoted(a)).alias(self._column(last, a)) for a in keys.columns])
        first = self.order[0]
        holding = None
        if first in keys.columns:
            values = keys.select(F.col(delta.quoted(first))).distinct().limit(RESTRICT_MAX_VALUES + 1) \
                .toArrow().column(0).to_pylist()
            if len(values) <= RESTRICT_MAX_VALUES:
                holding = (first, values)
        table = delta.read_spark(keys.sparkSession, path, holding=holding, engine=_SPARK)
        keys = keys.select(*[F.col(delta.quoted(c)).cast(table.schema[c].dataType).alias(c) for c in keys.columns])
        on = [table[delta.quoted(c)].eqNullSafe(keys[delta.quoted(c)]) for c in keys.columns]
        return table.join(keys, on, "left_semi").select(*[F.col(delta.quoted(c)) for c in self.id_columns]) \
            .distinct()


def read_by(index: GlobalProvenanceIndex, statements: Sequence) -> list[int]:
    """The Δ-script statements (numbered from 1) that find their rows through ``index``: the
    nested updates and replaces naming the elements of its collection by its attributes (and
    not their rows by ID)."""
    return [i for i, s in enumerate(statements, 1)
            if s.kind in NESTED_KINDS and not s.names_rows_by_id() and index.serves((s.path,), dict(s.match))]


def resolve(selection: IndexSelection, view_schema: pa.Schema, view_ids: Sequence[tuple[str, str]],
            statements: Sequence) -> list[StoredIndex]:
    """The selected indexes of nested collections that a statement of the Δ-script reads, laid
    out over the stored view's schema.

    The others get no table: an index no statement reads would only cost its maintenance
    (replace statements find their rows with their restricted queries), and an index whose
    collection or attributes the stored rows do not carry (a bag of scalars has no element
    provenance) cannot be built.  :func:`describe` says which is which."""
    id_columns = tuple(c for c, _ in view_ids)
    column_of = {n: c for c, n in view_ids}
    out = []
    for n, index in enumerate(selection.indexes):
        if not index.collection or not read_by(index, statements):
            continue
        stored = _layout(index, f"{n}", view_schema, id_columns, column_of)
        if stored is not None:
            out.append(stored)
    return out


def _layout(index: GlobalProvenanceIndex, name: str, view_schema: pa.Schema, id_columns: tuple[str, ...],
            column_of: Mapping[str, str]) -> StoredIndex | None:
    if any(a not in column_of for a in index.levels[0]):
        return None
    fields = [view_schema.field(c) for c in id_columns]
    columns = [(0, a, f"l0_{a}") for a in index.levels[0]]
    types: list[pa.DataType] = [view_schema.field(column_of[a]).type for a in index.levels[0]]
    struct: pa.DataType | None = None
    for depth, step in enumerate(index.collection, 1):
        if depth == 1:
            if step not in view_schema.names:
                return None
            bag = view_schema.field(step).type
        else:
            if struct is None or struct.get_field_index(step) < 0:
                return None
            bag = struct.field(step).type
        if not pa.types.is_list(bag) and not pa.types.is_large_list(bag):
            return None
        struct = bag.value_type
        if not pa.types.is_struct(struct) or struct.get_field_index(PROV_FIELD) < 0:
            return None
        prov = struct.field(PROV_FIELD).type
        for a in index.levels[depth]:
            if prov.get_field_index(a) < 0:
                return None
            columns.append((depth, a, f"l{depth}_{a}"))
            types.append(prov.field(a).type)
    schema = pa.schema([pa.field(c, t, True) for (_, _, c), t in zip(columns, types)]
                       + [pa.field(f.name, f.type, True) for f in fields])
    return StoredIndex(index, name, id_columns, tuple(columns), schema,
                       tuple(column_of[a] for a in index.levels[0]))


def describe(selection: IndexSelection, stored: Sequence[StoredIndex] | None,
             statements: Sequence) -> dict[GlobalProvenanceIndex, str]:
    """How each selected index exists (the view table itself, a table, or none; ``stored``
    None: not known, the view is not defined) and the Δ-script statements (numbered from 1)
    that find their rows through it."""
    tables = None if stored is None else {s.index: s for s in stored}
    out = {}
    for index in selection.indexes:
        users = [f"Δ{i}" for i in read_by(index, statements)]
        if not index.collection:
            notes = ["the view's ID columns"]
        elif not users:
            notes = ["no table: no statement reads it"]
        elif tables is None:
            notes = []
        elif index in tables:
            notes = [f"table {INDEXES}/{tables[index].name}"]
        else:
            notes = ["no table: the stored elements carry no such provenance (nested updates scan the view)"]
        if users:
            notes.append(f"finds the rows of {', '.join(users)}")
        out[index] = "; ".join(notes)
    return out


# ------------------------------------------------------------------------- the tables


def reflected_version(path: Path, index: StoredIndex) -> int | None:
    """The view version the index table at ``path`` reflects (None: no table, or a table of
    another index)."""
    if not delta.exists(path):
        return None
    last = delta.history(path, 1)[0]
    if last.get("idivm.index") != str(index.index):
        return None
    v = last.get("idivm.view_version")
    return int(v) if v is not None else None


def build(index: StoredIndex, view_path: Path, view_version: int, metadata: Mapping[str, str],
          engine: delta.Engine = delta.DELTA_RS) -> int:
    """(Re)write the index table from the view at ``view_version``; return the rows written.
    With a delta-spark ``engine`` (or a view with deletion vectors) Spark computes, orders and
    writes the entries; otherwise they are gathered and sorted in the driver's memory (two or
    three narrow columns per element) and written by delta-rs in small files."""
    commit_metadata = _metadata(index, view_version, metadata, "build index")
    if engine.spark or delta.needs_delta_spark(view_path):
        from pyspark.sql import SparkSession

        view = delta.read_spark(SparkSession.active(), view_path, view_version, engine=engine)
        entries = index.spark_entries(view)
        delta.write_spark(entries, index.path(view_path), mode="overwrite", commit_metadata=commit_metadata,
                          engine=engine, deletion_vectors=True, order=index.order,
                          cluster_by=layouts.clustering_columns(entries.schema, index.order, engine))
        return delta.row_count(index.path(view_path))
    needed = list(dict.fromkeys([*index.id_columns, index.index.collection[0]]))
    parts = [index.entries(batch) for batch in delta.scan_ordered(view_path, view_version, index.id_columns[0], needed)]
    entries = delta.ordered(pa.concat_tables([index.schema.empty_table(), *parts]), index.order)
    reader = pa.RecordBatchReader.from_batches(index.schema, entries.to_batches())
    delta.write_clustered(index.path(view_path), reader, "overwrite", INDEX_FILE_BYTES,
                          commit_metadata=commit_metadata)
    return entries.num_rows


def apply(index: StoredIndex, view_path: Path, view_version: int, metadata: Mapping[str, str],
          upserts: pa.Table, removed: pa.Table) -> int:
    """Bring the index from the view version before a run to ``view_version``, which upserted
    the rows ``upserts`` and removed the rows ``removed`` (as they were: the rows it replaced
    or deleted): the entries of ``removed`` that ``upserts`` do not have are deleted and those
    of ``upserts`` that ``removed`` did not have inserted, rewriting only the index files that
    may hold them.  Returns the rows written."""
    old, new = index.entries(removed), index.entries(upserts)
    rewrite = delta.rewrite_clustered(index.path(view_path), _minus(new, old), _minus(old, new), index.order,
                                      commit_metadata=_metadata(index, view_version, metadata, "maintain index"),
                                      file_bytes=INDEX_FILE_BYTES)
    return int(rewrite.metrics["num_output_rows"])


def apply_spark(index: StoredIndex, view_path: Path, view_version: int, metadata: Mapping[str, str],
                upserts: "DataFrame", removed: "DataFrame") -> int:
    """:func:`apply` executed by Spark, in one delta-spark MERGE into the index table (nothing
    collected): ``upserts`` and ``removed`` are DataFrames of view rows.  The MERGE source holds
    each entry of ``removed`` or of ``upserts`` that the other side does not have, once, with
    the side it comes from (grouping both sides' entries by every column, NULL equal to NULL);
    the entries of ``removed`` are deleted from the table (with deletion vectors, marked in the
    files holding them), those of ``upserts`` inserted.  The inserted entries land in new files
    outside the table's order, which compaction restores (``OPTIMIZE ... ZORDER BY`` the
    order); lookups are exact on any order.  Returns the rows written."""
    from pyspark.sql import functions as F

    columns = index.schema.names
    side = F.col(_SIDE)
    both = index._spark_elements(removed).withColumn(_SIDE, F.lit(-1)).unionByName(
        index._spark_elements(upserts).withColumn(_SIDE, F.lit(1)))
    # an entry one side has and the other not: its sides' minimum and maximum agree
    low = f"{_SIDE}_low"
    source = both.groupBy(*[F.col(delta.quoted(c)) for c in columns]) \
        .agg(F.min(side).alias(low), F.max(side).alias(_SIDE)).where(F.col(low) == side).drop(low)
    same = " AND ".join(f"({delta.quoted(c, 't')} <=> {delta.quoted(c, 's')})" for c in columns)
    values = {delta.quoted(c): delta.quoted(c, "s") for c in columns}
    metrics = delta.merge_spark(index.path(view_path), source, same,
                                [delta.MatchedDelete(f"{delta.quoted(_SIDE, 's')} = -1"),
                                 delta.NotMatchedInsert(values, f"{delta.quoted(_SIDE, 's')} = 1")],
                                commit_metadata=_metadata(index, view_version, metadata, "maintain index"))
    return int(metrics.get("num_output_rows") or 0)


def refresh(stored: Sequence[StoredIndex], view_path: Path, metadata: Mapping[str, str],
            progress: Callable[[str], None] | None = None, label: str = "",
            engine: delta.Engine = delta.DELTA_RS) -> int:
    """Rebuild the indexes that do not reflect the view's current version (a crash between the
    view's commit and theirs, a recompute, a run without indexes); the rows written.  A view
    compacted since an index was written has the same rows: the index still reflects it."""
    if not stored:
        return 0
    version = delta.data_version(view_path)
    written = 0
    for index in stored:
        if reflected_version(index.path(view_path), index) != version:
            if progress:
                progress(f"{label}: building index {index.index}")
            written += build(index, view_path, version, metadata, engine)
    return written


def locate(stored: Sequence[StoredIndex], view_path: Path, statement, keys: "pa.Table | DataFrame",
           progress: Callable[[str], None] | None = None, label: str = "") -> "pa.Table | DataFrame | None":
    """The ID columns of the view rows holding the elements the nested update ``statement``
    names, its i-diff rows being ``keys`` (columns: the attributes of ``statement.match``),
    by the index that serves it; None when none does.  Keys in a Spark DataFrame are looked up
    by Spark (:meth:`StoredIndex.spark_lookup`) and give a DataFrame; keys in an Arrow table
    are looked up in the driver and give an Arrow table."""
    index = next((i for i in stored if i.index.serves((statement.path,), dict(statement.match))), None)
    if index is None:
        return None
    if not isinstance(keys, pa.Table):
        if progress:
            progress(f"{label}: index {index.index}: joined with the i-diff's keys by Spark")
        return index.spark_lookup(index.path(view_path), keys)
    found = index.lookup(index.path(view_path), keys)
    if progress:
        progress(f"{label}: index {index.index}: {keys.num_rows} keys -> {found.num_rows} rows")
    return found


def _metadata(index: StoredIndex, view_version: int, metadata: Mapping[str, str], operation: str) -> dict:
    out = {k: v for k, v in metadata.items() if k in ("idivm.view", "idivm.watermark")}
    return {**out, "idivm.operation": operation, "idivm.index": str(index.index),
            "idivm.view_version": str(view_version)}


def _matching(table: pa.Table, schema: pa.Schema, columns: Sequence[str], keys: pa.Table) -> pa.Table:
    """The rows of ``table`` (of ``schema``) whose ``columns`` equal (NULL-safely) those of a row
    of ``keys``."""
    wanted = keys.select(list(columns)).cast(pa.schema([schema.field(c) for c in columns]))
    return table.filter(delta.key_mask(table, columns, wanted))


def _minus(table: pa.Table, other: pa.Table) -> pa.Table:
    """The rows of ``table`` that are not rows of ``other`` (NULL equal to NULL)."""
    return table.filter(pc.invert(delta.key_mask(table, table.column_names, other)))


__all__ = ["StoredIndex", "apply", "apply_spark", "build", "describe", "locate", "read_by", "reflected_version",
           "refresh", "resolve"]
