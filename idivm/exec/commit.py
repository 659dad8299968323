"""Committing a run's changes (:class:`idivm.exec.delta_script.ViewChanges`) to a view or cache
in one Delta commit carrying the run's metadata (its new watermark), and bringing the view's
index tables to that commit.

With delta-rs the changes are collected into the driver and land as a MERGE of the i-diff rows
of a single update or increment, matched by its (partial) IDs (:func:`direct_merge`); as a
rewrite of the files that hold the rows named, for a view laid out by its IDs
(:func:`idivm.storage.delta.rewrite_clustered`); or as a MERGE of upserts and deletes by the
view's IDs (:func:`upsert_merge`).  With delta-spark, Spark executes the MERGE and nothing is
collected (:func:`merge_by_spark`).  Every name in a MERGE predicate or assignment is quoted by
:func:`idivm.storage.delta.quoted`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idivm.errors import InternalError
from idivm.exec import meter
from idivm.storage.spark import to_arrow
from idivm.storage import delta
from idivm.storage.layout import ACTION, Layout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from idivm.exec.delta_script import ViewChanges
    from idivm.script import DeltaScript, Statement


@dataclass(frozen=True, slots=True)
class Target:
    """What a commit needs of the view it lands in, when no Δ-script names it (a run of its
    maps): its name and its ID columns."""

    view: str
    id_columns: tuple[str, ...]


def land(script: "DeltaScript | Target", path: Path, version: int, result: "ViewChanges", metadata, progress,
         stored_indexes: Sequence, layout: Layout | None, engine: "delta.Engine" = delta.DELTA_RS) -> dict:
    """Collect a run's changes ``result`` (computed against version ``version`` of the table at
    ``path``) and commit them with delta-rs; then release what ``result`` holds in Spark.  The
    run's statistics (:func:`landed`)."""
    import pyarrow as pa

    try:
        with meter.phase("evaluate"):
            if result.direct is not None:
                statement, query = result.direct
                rows = to_arrow(query)
            else:  # rows the driver computed already, or a DataFrame to collect
                upserts = result.upserts if isinstance(result.upserts, pa.Table) else to_arrow(result.upserts)
                deletes = result.deletes(upserts)
    finally:
        result.release()
    target = delta.schema(path, version)
    columns = [f.name for f in target]
    rewrite = None
    if result.direct is not None:
        # the i-diff's rows, matched to the view rows by its (partial) IDs: one per row
        if progress:
            progress(f"{script.view}: merging {rows.num_rows} i-diff rows ({statement.kind})")
        metrics = delta.merge_arrow(path, rows, *direct_merge(statement), commit_metadata=metadata)
    elif layout is not None:
        if progress:
            patched = f" and {sum(p.rows.num_rows for p in result.patches)} i-diff rows of updates" \
                if result.patches else ""
            progress(f"{script.view}: rewriting the files of {upserts.num_rows} upserts, "
                     f"{deletes.num_rows} deletes{patched}")
        rewrite = delta.rewrite_clustered(path, upserts, deletes, script.id_columns, patches=result.patches,
                                          commit_metadata=metadata, row_group_rows=layout.row_group_rows,
                                          file_bytes=layout.file_bytes)
        metrics = rewrite.metrics
    else:
        if result.patches:
            raise InternalError(f"{script.view}: updates to patch, but no layout to rewrite")
        ups = upserts.append_column(ACTION, pa.array(["upsert"] * upserts.num_rows, pa.string()))
        dels = pa.table({f.name: (deletes.column(f.name) if f.name in deletes.column_names
                                  else pa.nulls(deletes.num_rows, f.type)) for f in target})
        dels = dels.append_column(ACTION, pa.array(["delete"] * dels.num_rows, pa.string()))
        source = pa.concat_tables([ups.select(dels.column_names).cast(dels.schema), dels])
        if progress:
            progress(f"{script.view}: merging {ups.num_rows} upserts and {dels.num_rows} deletes")
        metrics = delta.merge_arrow(path, source, *upsert_merge(script.id_columns, columns),
                                    commit_metadata=metadata)
    from idivm.exec import indexes

    def apply(index, version: int) -> int:
        changed = pa.concat_tables([upserts, rewrite.patched.select(upserts.column_names).cast(upserts.schema)])
        return indexes.apply(index, path, version, metadata, changed, rewrite.removed)

    return landed(metrics, stored_indexes, path, metadata, apply if rewrite is not None else None, engine)


def merge_by_spark(script: "DeltaScript | Target", path: Path, view: "DataFrame", result: "ViewChanges", metadata,
                   progress, stored_indexes: Sequence, engine: "delta.Engine" = delta.DELTA_RS) -> dict:
    """Land a run's changes ``result`` in the table at ``path`` (whose rows at the run's
    start are ``view``) with one delta-spark MERGE executed by Spark: the rows are not
    collected; then release what ``result`` holds in Spark.  The view's index tables follow
    by Spark too, one MERGE each (:func:`idivm.exec.indexes.apply_spark`), from the rows the
    view's MERGE replaced or deleted (read from ``view``, the version before it) and its
    upserts, which are cached while the view's MERGE and the indexes' read them, so the run's
    i-diff is computed once."""
    from pyspark.sql import functions as F

    from idivm.exec import indexes

    q = delta.quoted
    try:
        if result.direct is not None:
            # the i-diff's rows, matched to the view rows by its (partial) IDs: one per row
            statement, query = result.direct
            if progress:
                progress(f"{script.view}: merging the i-diff rows ({statement.kind}) by delta-spark")
            metrics = delta.merge_spark(path, query, *direct_merge(statement), commit_metadata=metadata)
            return landed(metrics, stored_indexes, path, metadata, None, engine)
        ids = list(script.id_columns)
        columns = [f.name for f in view.schema.fields]
        upserts = result.upserts.select(*[F.col(q(c)) for c in columns])
        if stored_indexes:  # read by the MERGE and by the indexes' entries: computed once
            upserts = result.cached.add(upserts)
        deleted = result.deleted
        on = [deleted[q(c)].eqNullSafe(upserts[q(c)]) for c in ids]
        deletes = deleted.join(upserts, on, "left_anti") if on else deleted
        source = upserts.withColumn(ACTION, F.lit("upsert")).unionByName(
            deletes.withColumn(ACTION, F.lit("delete")), allowMissingColumns=True)
        if progress:
            progress(f"{script.view}: merging the upserts and deletes by delta-spark")
        metrics = delta.merge_spark(path, source, *upsert_merge(ids, columns), commit_metadata=metadata)

        # the rows the MERGE replaced or deleted, as they were (``view`` is pinned before it),
        # cached when several indexes read them
        named = source.select(*[F.col(q(c)) for c in ids]).alias("named")
        removed = view.alias("view").join(named, [F.col(f"view.{q(c)}").eqNullSafe(F.col(f"named.{q(c)}"))
                                                  for c in ids], "left_semi")
        if len(stored_indexes) > 1:
            removed = result.cached.add(removed)

        def apply(index, version: int) -> int:
            if progress:
                progress(f"{script.view}: merging the changes of index {index.index} by delta-spark")
            return indexes.apply_spark(index, path, version, metadata, upserts, removed)

        return landed(metrics, stored_indexes, path, metadata, apply, engine)
    finally:
        result.release()


def direct_merge(statement: "Statement") -> tuple[str, list]:
    """(predicate, clauses) of the MERGE of an update or increment ``statement``'s i-diff rows
    (``s``) into the view (``t``), matched by the statement's (partial) IDs."""
    q = delta.quoted
    sets = {q(c): (q(v, "s") if statement.kind == "update" else f"{q(c, 't')} + {q(v, 's')}")
            for c, v in statement.set}
    return _same(statement.on), [delta.MatchedUpdate(sets)]


def upsert_merge(ids: Sequence[str], columns: Sequence[str]) -> tuple[str, list]:
    """(predicate, clauses) of the MERGE of upserts and deletes (rows ``s`` whose
    :data:`~idivm.storage.layout.ACTION` column says which) into the table (``t``) by its ID
    columns ``ids``."""
    assign = {delta.quoted(c): delta.quoted(c, "s") for c in columns}
    action = delta.quoted(ACTION, "s")
    return _same(ids), [delta.MatchedDelete(f"{action} = 'delete'"), delta.MatchedUpdate(assign),
                        delta.NotMatchedInsert(assign, f"{action} = 'upsert'")]


def _same(columns: Sequence[str]) -> str:
    return " AND ".join(f"({delta.quoted(c, 't')} IS NOT DISTINCT FROM {delta.quoted(c, 's')})" for c in columns)


def landed(metrics: Mapping[str, Any], stored_indexes: Sequence, path: Path, metadata,
           apply: Callable[[Any, int], int] | None, engine: "delta.Engine" = delta.DELTA_RS) -> dict:
    """A run's statistics from its commit's ``metrics``, after bringing the view's index tables to
    that commit: ``apply(index, version)`` brings one from the run's changes (the rows written),
    or, when they are not known (None), it is rebuilt from the view."""
    from idivm.exec import indexes

    index_rows = 0
    with meter.phase("indexes"):
        for index in stored_indexes:
            if apply is not None:
                index_rows += apply(index, metrics["version"])
            else:
                index_rows += indexes.build(index, path, metrics["version"], metadata, engine)
    return {"version": metrics["version"],
            "inserted": int(metrics.get("num_target_rows_inserted") or 0),
            "updated": int(metrics.get("num_target_rows_updated") or 0),
            "deleted": int(metrics.get("num_target_rows_deleted") or 0),
            "rows_written": int(metrics.get("num_output_rows") or 0) + index_rows}
