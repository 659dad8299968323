"""The Python entry point: a warehouse directory with its catalog, base tables and views.

``Warehouse`` opens the catalog eagerly and the SparkSession lazily: listing
tables, describing them and creating them from files or Arrow data use
delta-rs only, so they never start a JVM.  Anything that computes with Spark
goes through ``self.spark``, which creates the session on first use (or
returns the session given as ``spark=``).

Base tables are loaded (:mod:`idivm.ingest.load`) from JSON Lines, JSON arrays,
Parquet and CSV files, lists of dicts, Arrow tables or Spark DataFrames.
Everything is validated before anything is written (column names, types, key
present, non-null and unique), and a failed ``create_table`` leaves the
warehouse as it was.  Views are planned, materialized at one snapshot of their
base tables (their watermark), maintained, verified and explained through it.

This module is the public API: it checks arguments, looks names up in the catalog and
builds the result objects.  A view's program is compiled, stored and loaded by
:mod:`idivm.exec.programs`; the view is materialized, maintained and repaired by
:mod:`idivm.exec.runtime`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idivm import types as T
from idivm.algebra.builder import VALUE_NAME, scalar_type
from idivm.catalog import Catalog, TableEntry, ViewEntry
from idivm.errors import CatalogError, DataError, IdivmError
from idivm.exec import programs
from idivm.exec.runtime import (Run, Runtime, cache_maps, latest_commit_with, maps_built, maps_paths,
                                versions_text, view_watermark)
from idivm.ingest.load import (
    _spark_delta_schema, check_columns, check_declared_key, check_element_key, check_element_key_type,
    check_key, check_spark_element_key, check_spark_key, declared_dataframe, idivm_schema, is_spark_dataframe,
    load_declared, load_source, parse_element_keys, parse_key,
)
from idivm.storage import delta
from idivm.storage import schema as schemas
from idivm.storage.spark import resolve_master

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    import pyarrow as pa

    from idivm.declared_schema import DeclaredSchema
    from idivm.describe import Description
    from idivm.ingest import IngestResult, Quarantine

DEFAULT_WAREHOUSE = "./idivm-warehouse"
WAREHOUSE_ENV = "IDIVM_WAREHOUSE"


@dataclass(frozen=True, slots=True)
class TableInfo:
    """What ``tables()``/``table_info()`` report about a base table."""

    name: str
    key: tuple[str, ...]
    rows: int
    version: int
    schema: T.TupleType
    path: Path
    created: str
    #: declared keys of nested collections of tuples: path -> key columns
    element_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    #: the schema the table was declared with (None: its types were inferred from its data)
    declared_schema: "DeclaredSchema | None" = None
    #: what ``create_table`` left out of the data: the fields of open records the declared
    #: schema does not declare, and in how many rows each was
    undeclared: tuple[tuple[str, int], ...] = ()
    #: declared never to change (``create_table(static=True)``)
    static: bool = False

    def as_json(self) -> dict[str, Any]:
        """The table as a JSON object for programs (``table list --format json``)."""
        return {"name": self.name, "key": list(self.key),
                "element_keys": {p: list(k) for p, k in self.element_keys.items()},
                "declared_schema": self.declared_schema.to_json() if self.declared_schema is not None else None,
                "rows": self.rows, "version": self.version, "created": self.created, "path": str(self.path),
                "static": self.static}


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceResult(Run):
    """One view's maintenance run: what the run did (:class:`~idivm.exec.runtime.Run`: the
    strategy used, base-table change rows read, i-diff rows (base i-diffs after condensation
    and routing), view rows inserted / updated / deleted and rows written, the view version
    committed (None: already up to date, nothing committed), old and new watermark, the
    tables compacted), with the view's name and the seconds it took."""

    name: str
    seconds: float
    #: the comparison with the recomputation, when the run was checked (``verify_every``)
    verification: "Verification | None" = None
    #: the version that repaired the view, when the check found it differed
    repaired_version: int | None = None

    @classmethod
    def of(cls, name: str, run: Run, started: float) -> "MaintenanceResult":
        """The result of ``run`` of view ``name``, begun at ``started`` (``time.monotonic()``)."""
        return cls(name=name, seconds=time.monotonic() - started, **{f.name: getattr(run, f.name) for f in fields(run)})

    @property
    def diverged(self) -> bool:
        return self.verification is not None and not self.verification.ok

    def as_json(self) -> dict[str, Any]:
        """The run as a JSON object for programs (``maintain --format json``)."""
        cost = self.cost
        return {"view": self.name, "strategy": self.strategy, "version": self.version,
                "up_to_date": self.version is None, "changes": self.changes, "diff_rows": self.diff_rows,
                "inserted": self.inserted, "updated": self.updated, "deleted": self.deleted,
                "rows_written": self.rows_written, "seconds": round(self.seconds, 6),
                "old_watermark": self.old_watermark, "new_watermark": self.new_watermark, "note": self.note,
                "spark_jobs": cost.total_jobs if cost is not None else None,
                "commits": cost.commits if cost is not None else None,
                "phases": {k: round(v, 6) for k, v in cost.seconds.items()} if cost is not None else {},
                "compacted": [c.summary() for c in self.compacted],
                "verified": None if self.verification is None else self.verification.ok,
                "repaired_version": self.repaired_version}

    def summary(self) -> str:
        if self.version is None:
            return f"{self.name}: up to date at {versions_text(self.new_watermark)} ({self.seconds:.1f} s)"
        note = f" ({self.note})" if self.note else ""
        line = (f"{self.name}: {self.strategy}{note}, {self.changes} change rows read, {self.diff_rows} i-diff rows, "
                f"+{self.inserted} ~{self.updated} -{self.deleted} rows ({self.rows_written} written), "
                f"now at {versions_text(self.new_watermark)}, view version {self.version} ({self.seconds:.1f} s)")
        if self.cost is not None:
            line += f"; {self.cost.summary()}"
        for c in self.compacted:
            line += f"; {c.summary()}"
        if self.diverged:
            v = self.verification
            line += (f"; DIVERGED from its recomputation ({v.missing} row(s) missing, {v.extra} unexpected), "
                     f"repaired by recomputation in version {self.repaired_version}")
        elif self.verification is not None:
            line += "; verified"
        return line


@dataclass(frozen=True, slots=True)
class Verification:
    """The result of :meth:`Warehouse.verify`: rows of the view missing from the stored view
    and stored rows the view does not have (as multisets), with a few examples of each."""

    name: str
    watermark: dict
    rows: int
    missing: int
    extra: int
    missing_examples: tuple
    extra_examples: tuple
    #: the same comparison for each intermediate cache and each map of the view
    caches: tuple["Verification", ...] = ()
    #: what was compared: ``view``, ``cache`` or ``map`` (with its definition)
    kind: str = "view"

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.extra == 0 and all(c.ok for c in self.caches)

    def as_json(self) -> dict[str, Any]:
        """The comparison as a JSON object for programs (``verify --format json``)."""
        return {"name": self.name, "kind": self.kind, "ok": self.ok, "watermark": dict(self.watermark),
                "rows": self.rows, "missing": self.missing, "extra": self.extra,
                "missing_examples": list(self.missing_examples), "extra_examples": list(self.extra_examples),
                "caches": [c.as_json() for c in self.caches]}

    def summary(self, what: str | None = None) -> str:
        what = what or self.kind
        at = versions_text(self.watermark)
        if self.missing == 0 and self.extra == 0:
            lines = [f"{what} {self.name} matches its recomputation at {at}: {self.rows} rows"]
        else:
            lines = [f"{what} {self.name} differs from its recomputation at {at}: "
                     f"{self.missing} row(s) missing, {self.extra} unexpected"]
        lines += [f"  missing:    {json.dumps(r, default=str, ensure_ascii=False)}" for r in self.missing_examples]
        lines += [f"  unexpected: {json.dumps(r, default=str, ensure_ascii=False)}" for r in self.extra_examples]
        lines += [c.summary() for c in self.caches]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ViewInfo:
    """What ``views()``/``view_info()``/``define()`` report about a view."""

    name: str
    rows: int
    version: int
    schema: T.TupleType
    path: Path
    created: str
    strategy: str = "recompute"
    #: why ``auto`` recomputes, when the view has constructs without i-diff rules
    strategy_note: str = ""
    #: the tables (and views) it reads
    inputs: tuple[str, ...] = ()
    #: the versions of its inputs it reflects
    watermark: Mapping[str, int] = field(default_factory=dict, hash=False)
    #: when it was last brought up to date (the time of its latest commit carrying a watermark)
    maintained: str = ""
    #: how many versions of its inputs are committed past its watermark (0: up to date)
    lag: int = 0
    #: about its text (a field no record of a table has, read as MISSING), each with its position
    warnings: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The view as a JSON object for programs (``view list --format json``)."""
        return {"name": self.name, "strategy": self.strategy, "strategy_note": self.strategy_note,
                "rows": self.rows, "version": self.version, "inputs": list(self.inputs),
                "watermark": dict(self.watermark), "maintained": self.maintained, "lag": self.lag,
                "created": self.created, "path": str(self.path), "warnings": list(self.warnings)}


#: maintenance strategies ``define`` accepts (see :meth:`Warehouse.define`)
STRATEGIES = ("id", "tuple", "recompute", "auto", "maps")


class Warehouse:
    """A warehouse directory: ``catalog.json``, ``tables/<name>/``, ``views/<name>/``.

    ``path`` defaults to ``$IDIVM_WAREHOUSE`` or ``./idivm-warehouse``; the
    directory is created on the first write.  ``spark`` is an existing
    SparkSession to use as it is; otherwise one is created on first need with
    ``idivm.storage.spark.get_session(spark_master)``.  ``storage`` is the engine that writes
    what Spark computes (``delta-rs``, ``delta-spark``, ``delta-spark-dv``; default
    ``$IDIVM_STORAGE``, else ``delta-rs`` on a local master and ``delta-spark-dv`` on a cluster;
    see :func:`idivm.storage.delta.engine`).  ``spark_log``: a file the Java driver's standard
    error (Spark's log) goes to when this warehouse starts the session, instead of this
    process's standard error.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, spark: "SparkSession | None" = None,
                 spark_master: str | None = None, storage: str | None = None,
                 spark_log: str | os.PathLike | None = None):
        self.path = Path(path if path is not None else os.environ.get(WAREHOUSE_ENV) or DEFAULT_WAREHOUSE).absolute()
        #: the storage engine of what Spark computes (:func:`idivm.storage.delta.engine`)
        self.storage = delta.engine(storage, spark.sparkContext.master if spark is not None else
                                    resolve_master(spark_master))
        self._spark = spark
        self._spark_master = spark_master
        self._spark_log = Path(spark_log) if spark_log is not None else None
        Catalog.load(self.path)  # fail early on a corrupt catalog or a path that is a file

    def __repr__(self) -> str:
        return f"Warehouse({str(self.path)!r})"

    @property
    def spark(self) -> "SparkSession":
        """The SparkSession, created on first use unless one was given."""
        if self._spark is None:
            from idivm.storage.spark import get_session

            self._spark = get_session(self._spark_master, jvm_log=self._spark_log)
        return self._spark

    @property
    def _runtime(self) -> Runtime:
        """What materializes and maintains the views (:mod:`idivm.exec.runtime`), with this
        warehouse's session and storage engine."""
        return Runtime(lambda: self.spark, self.storage)

    @property
    def catalog(self) -> Catalog:
        """The catalog as it is on disk now (re-read on every access)."""
        return Catalog.load(self.path)

    # --- base tables -----------------------------------------------------------------------------

    def create_table(self, name: str, key: str | Sequence[str], source: Any = None, *,
                     format: str | None = None,
                     element_keys: Mapping[str, str | Sequence[str]] | None = None,
                     schema: "str | os.PathLike | DeclaredSchema | None" = None,
                     static: bool = False) -> TableInfo:
        """Create base table ``name`` with primary key ``key`` from ``source``, or with the
        declared ``schema``, or both.

        ``source`` is a file path (format from ``format`` or the extension:
        ``.jsonl``/``.ndjson``, ``.json``, ``.parquet``/``.pq`` (file or
        directory), ``.csv``), a list of dicts, a pyarrow Table or a Spark
        DataFrame.  ``key`` is a column name, a comma-separated list or a list
        of names.  ``element_keys`` maps the path of a nested collection of
        tuples (``hours``, ``address.phones``) to its element key columns (as
        ``key``), which must be non-null and unique within each collection
        value.  Raises :class:`CatalogError` for a bad or taken name and
        :class:`DataError` for bad data; in both cases nothing is written.

        ``schema`` declares the table's columns (:mod:`idivm.declared_schema`): SQL++ DDL-like
        text (``id BIGINT, name STRING, tags ARRAY<STRING>, address {city STRING}``), a JSON
        Schema, or a file holding either.  Without ``source`` the table is created empty;
        with it, its rows are checked against and converted to the declared types (absent
        fields are null; a value of the wrong type is a :class:`DataError` naming the row and
        the field).  Fields an open record does not declare are not stored, and are reported
        (:attr:`TableInfo.undeclared`); a closed record allows none.  Ingest checks records
        against the declared schema too, and the catalog keeps it as written.

        ``static``: the table never changes (a dimension loaded once, like TPC-H's nation and
        region): ingest refuses it, and the maps of the views over it keep nothing for its
        changes (DBToaster §5.1), which makes them fewer and cheaper to maintain.
        """
        catalog = self.catalog
        catalog.check_new_name(name, "table")
        key_columns = parse_key(key)
        nested_keys = parse_element_keys(element_keys)
        if schema is None and source is None:
            raise DataError(f"table {name}: give the data to create it from, or declare its schema "
                            "(schema=... or --schema) to create it empty")
        from idivm.declared_schema import read_schema

        declared = read_schema(schema) if schema is not None else None
        if declared is not None:
            check_columns(declared.arrow, "schema")
            check_declared_key(declared.arrow, key_columns)
        undeclared: tuple[tuple[str, int], ...] = ()
        rel = catalog.new_table_path(name)
        if (self.path / rel).exists():
            raise CatalogError(f"{self.path / rel} exists but table {name!r} is not in the catalog "
                               "(left over from an interrupted run?): remove it or choose another name")
        metadata = {"idivm.operation": "create table", "idivm.table": name}
        if is_spark_dataframe(source):
            df = source
            if declared is not None:
                df, undeclared = declared_dataframe(df, declared)
            target = _spark_delta_schema(df) if declared is None else declared.arrow
            check_columns(target, "DataFrame")
            check_spark_key(df, key_columns, origin="DataFrame")
            row_type = idivm_schema(target, "DataFrame")
            for path, columns in nested_keys.items():
                check_element_key_type(row_type, path, columns, "DataFrame")
                check_spark_element_key(df, key_columns, path, columns, "DataFrame")

            def write(p: Path) -> None:
                delta.write_spark(df, p, mode="error", commit_metadata=metadata, row_group_rows=delta.BASE_ROW_GROUP,
                                  engine=self.storage)
        else:
            if declared is not None:
                rows, undeclared = load_declared(source, declared, key_columns, format=format)
            else:
                rows = load_source(source, format=format)
            target = schemas.delta_schema(rows.table.schema)
            check_columns(target, rows.origin)
            check_key(rows, key_columns)
            row_type = idivm_schema(target, rows.origin)
            for path, columns in nested_keys.items():
                check_element_key_type(row_type, path, columns, rows.origin)
                check_element_key(rows, path, columns)

            def write(p: Path) -> None:
                delta.create_table(p, rows.table, schema=target, commit_metadata=metadata,
                                   row_group_rows=delta.BASE_ROW_GROUP)
        entry = TableEntry(name=name, key=key_columns, schema=row_type, path=rel, element_keys=nested_keys,
                           declared_schema=declared.to_json() if declared is not None else None, static=static)
        self._install([(rel, write)], lambda cat: cat.add_table(entry))
        return replace(self.table_info(name), undeclared=undeclared)

    def tables(self) -> list[TableInfo]:
        """All base tables, sorted by name."""
        catalog = self.catalog
        return [self._info(catalog, catalog.tables[n]) for n in sorted(catalog.tables)]

    def table_info(self, name: str) -> TableInfo:
        """Key, row count, version and schema of base table ``name``."""
        catalog = self.catalog
        return self._info(catalog, catalog.table(name))

    def table_path(self, name: str) -> Path:
        """The Delta table directory of base table ``name``."""
        catalog = self.catalog
        return catalog.path_of(catalog.table(name))

    def read_table(self, name: str, version: int | None = None) -> "DataFrame":
        """Base table ``name`` (at Delta ``version``, default latest) as a Spark DataFrame."""
        path = self.table_path(name)  # an unknown name fails before Spark starts
        return delta.read_spark(self.spark, path, version, engine=self.storage)

    def ingest(self, table: str, source: str | os.PathLike, format: str = "debezium",
               strict: bool = False, evolve: bool = False,
               progress: Callable[[str], None] | None = None) -> "IngestResult":
        """Apply the changes of ``source`` to base table ``table``: a file (JSON Lines), a
        directory (its files in name order), ``-`` (standard input) or a Kafka topic
        (``kafka://HOST:PORT/TOPIC``, read by the consumer group ``idivm.<table>``); each file,
        or each partition's new messages, one commit.

        ``format`` is ``debezium`` (Debezium change events, bare or in the
        Kafka Connect envelope), ``rows`` (whole rows are upserts, a line
        ``{"__delete": {<key columns>}}`` deletes) or ``idiff`` (i-diffs of rows in
        the package's JSON encoding, updates by path of nested elements included);
        see :mod:`idivm.ingest`.
        A file already ingested (the same bytes) is skipped.  Bad records go
        to the table's quarantine (:meth:`quarantined`, :meth:`retry_quarantined`)
        with their ``file:line`` and reason, and the valid ones are applied;
        ``strict``: a bad record raises :class:`DataError` naming ``file:line``
        and nothing of its file is applied.  Columns the table does not have
        (schema drift) raise in either case, unless ``evolve``: then the batch's commit adds
        them to the table, nullable (the rows before it have nulls there), each typed from its
        values in the batch as ``create_table`` types a file's columns, and the catalog's
        schema of the table follows; views defined before do not read them, views defined
        after may.  A view that reads a column the table lacked when it was defined reads it as
        MISSING: a batch that would add that column is refused, naming the view.  A file without changes commits nothing.  Needs no Spark.
        ``progress`` is told of each batch applied.
        """
        from idivm.ingest import ingest_feed

        catalog = self.catalog
        entry = self._changeable(table)
        read_as_missing: dict[str, list[str]] = {}  # column -> the views that read it as MISSING
        for view in catalog.views.values():
            for column in (view.extra.get("absent_columns") or {}).get(table, ()):
                read_as_missing.setdefault(column, []).append(view.name)
        try:
            return ingest_feed(catalog.path_of(entry), self._quarantine(table), source, tuple(entry.key),
                               format=format, element_keys=entry.element_keys, strict=strict, table=table,
                               evolve=evolve, progress=progress, declared=declared_schema(entry),
                               read_as_missing=read_as_missing)
        finally:
            self._follow_table_schema(table)

    def _changeable(self, table: str) -> TableEntry:
        """The catalog entry of base table ``table``, which must not be static."""
        entry = self.catalog.table(table)
        if entry.static:
            raise CatalogError(f"table {table} is static (created with --static): its rows never change, and the "
                               "maps of the views over it keep nothing for its changes; nothing was ingested")
        return entry

    def _follow_table_schema(self, table: str) -> None:
        """Add to the catalog's schema of base table ``table`` the columns its Delta table has
        and the catalog lacks (added by ``ingest --evolve``; also after a crash between the
        commit that added them and the catalog's save)."""
        import pyarrow as pa

        catalog = self.catalog
        entry = catalog.table(table)
        stored = delta.schema(catalog.path_of(entry))
        added = [f for f in stored if f.name not in entry.schema.names]
        if not added:
            return
        schema = T.TupleType((*entry.schema.fields, *idivm_schema(pa.schema(added), table).fields))
        catalog.update_table(replace(entry, schema=schema))
        catalog.save()

    def _quarantine(self, table: str) -> "Quarantine":
        from idivm.ingest import Quarantine

        catalog = self.catalog
        return Quarantine(catalog.quarantine_path(catalog.table(table)))

    def quarantined(self, table: str) -> "pa.Table":
        """The records of base table ``table`` that ingest quarantined: ``origin`` (the batch's
        SHA-256), ``source`` and ``line`` (where the record was), ``format``, ``reason``,
        ``record`` (its text as it was) and ``quarantined_at``, oldest first."""
        return self._quarantine(table).rows()

    def retry_quarantined(self, table: str, fixed: str | os.PathLike | None = None,
                          format: str | None = None) -> "IngestResult":
        """Replay the quarantined records of ``table`` (or, given ``fixed``, a feed of corrected
        records in their place, read in ``format``): those valid now are applied in one commit,
        the others stay quarantined with their new reason.  Replayed records are applied after
        every change ingested since they were quarantined."""
        from idivm.ingest import retry_quarantined

        entry = self._changeable(table)
        return retry_quarantined(self.catalog.path_of(entry), self._quarantine(table), tuple(entry.key),
                                 entry.element_keys, fixed, format, declared_schema(entry))

    # --- views -----------------------------------------------------------------------------------

    def define(self, text_or_path: str | os.PathLike, strategy: str = "auto", *, replace: bool = False,
               progress: Callable[[str], None] | None = None) -> "ViewInfo":
        """Plan and materialize the view of a ``CREATE VIEW`` text (or a ``.sqlpp`` file).

        ``strategy`` is how :meth:`maintain` keeps it fresh: ``id`` (ID-based i-diffs,
        thesis ch. 2), ``tuple`` (classical tuple-based IVM with t-diffs, §2.1),
        ``recompute``, ``maps`` (DBToaster's higher-order delta maps, for aggregate views), or
        ``auto``: per run, ``id``, ``maps`` or ``recompute``, whichever the view's recorded runs
        estimate cheapest (:mod:`idivm.exec.history`; before there are any, ``id`` unless the
        change set is large relative to the base tables; the maps of a view ``id`` maintains
        are built by the run that first tries them), and ``recompute`` for a view with
        constructs that neither has rules for.
        Syntax errors, unknown names, views ``id``/``tuple`` cannot maintain and bad data
        raise before anything is written; the view's Delta table and its catalog entry
        land together.

        ``replace`` (or ``CREATE OR REPLACE VIEW`` in the text): the definition replaces the
        view of that name, if there is one.  The new view (its table, program, caches, maps)
        is materialized beside the old one (``views/<name>.<generation>``), and the catalog
        switched to it in one atomic save; only then are the old one's files removed.  Until
        the switch the old view stays whole and readable (a crash leaves it, and the new
        files, which no entry points to, are removed by the next drop or replace of the view).  ``progress`` is told of each step.
        """
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
        from idivm.sqlpp import parse_view

        text, filename = sqlpp_source(text_or_path)
        replace = replace or parse_view(text, filename).replace
        catalog = self.catalog
        if progress:
            progress(f"{filename or 'view'}: planning")
        program = programs.compile_program(catalog, text, filename, strategy, strict=True)
        view_name, script = program.name, program.script
        replaced = catalog.views.get(view_name) if replace else None
        if replaced is None:
            catalog.check_new_name(view_name, "view")
            rel = catalog.new_view_path(view_name)
        else:
            readers = catalog.readers(view_name)
            if readers:  # their watermarks name versions of the table being replaced
                raise CatalogError(f"cannot replace view {view_name}: read by view{'s' if len(readers) > 1 else ''} "
                                   f"{', '.join(readers)} (drop {'them' if len(readers) > 1 else 'it'} first)")
            rel = catalog.new_view_path(view_name, generation=uuid.uuid4().hex[:12])
        if progress:
            progress(f"{view_name}: materializing")
        from idivm.exec.materialize import spark_errors

        with spark_errors(view_name):
            writes, extra, metadata = self._runtime.materialize(catalog, program, rel, strategy)
        entry = ViewEntry(name=view_name, text=text, schema=programs.visible_type(program.type), path=rel, extra=extra)

        def register(cat: Catalog) -> None:
            if replaced is None:
                cat.add_view(entry)
            else:  # the commit point of a replace
                cat.replace_view(entry, replacing=replaced.path)

        with spark_errors(view_name):
            self._install(writes, register)
            if replaced is not None:  # the old definition's files, and those of replaces a crash interrupted
                new = Path(rel).name
                for f in self.catalog.view_files(view_name):
                    if f.name != new and not f.name.startswith(f"{new}."):
                        shutil.rmtree(f, ignore_errors=True)
            if strategy == "auto":  # the cost of a recomputation, for auto's first choices
                self._runtime.record_definition(self.catalog, view_name)
            if script is not None and script.strategy == "id":
                # the global provenance indexes (§2.15), from the view just written; a crash
                # before they land leaves them to the next maintenance run, which builds them
                self._runtime.build_indexes(program, self.catalog.path_of(self.catalog.view(view_name)), metadata,
                                            progress)
        return self.view_info(view_name)

    def maintain(self, name: str | None = None, *, progress: Callable[[str], None] | None = None,
                 use_indexes: bool = True, verify_every: int | None = None,
                 max_changes: int | None = None) -> list["MaintenanceResult"]:
        """Bring view ``name`` (default: every view) up to date with its base tables.

        A view that reads other views reads them like base tables, at their last committed
        versions: ``maintain(name)`` does not maintain the views ``name`` reads (maintain them
        first, or use ``maintain()``); ``maintain()`` runs every view after the views it reads
        (:meth:`~idivm.catalog.Catalog.dependency_order`), so each sees its inputs up to date.

        The current version of every base table the view reads is pinned (the new
        watermark); if none moved since the view's watermark nothing is committed.
        Otherwise the view's strategy computes its changes — the Δ-script's i-diffs
        (``id``, ``tuple``) or a recomputation — and they land in ONE Delta commit
        (a MERGE, or an overwrite) whose metadata carries the new watermark, so readers
        see the old or the new view, never a mix, and a crash leaves the old one.

        ID-based runs find the top-level rows that hold the nested elements an i-diff names
        through the view's global provenance indexes (§2.15.3), and maintain them in the same
        run, each in its own commit after the view's.  ``use_indexes=False`` finds them by
        scanning the view instead and leaves the indexes alone (the next run that uses them
        rebuilds them first).

        ``max_changes=N`` caps a run: it takes the base-table commits in the order they were
        made while they change at most about N rows in all (always at least one commit), and
        leaves the rest to the next run (its note says how many versions wait).

        ``verify_every=N`` checks every N-th run of a view (a run that commits a view version
        divisible by N) against the view's recomputation (:meth:`verify`); a view that differs
        is reported (``MaintenanceResult.verification``, and a warning through ``progress``)
        and repaired by overwriting it with the recomputation (``repaired_version``).
        """
        if verify_every is not None and verify_every < 1:
            raise ValueError(f"verify_every must be a positive number of runs, not {verify_every}")
        if max_changes is not None and max_changes < 1:
            raise ValueError(f"max_changes must be a positive number of rows, not {max_changes}")
        catalog = self.catalog
        names = [name] if name is not None else catalog.dependency_order()
        results = []
        from idivm.exec.materialize import spark_errors

        for n in names:
            started = time.monotonic()
            with spark_errors(n):
                run = self._runtime.maintain(catalog, n, progress, use_indexes, max_changes)
            result = MaintenanceResult.of(n, run, started)
            if verify_every and result.version is not None and result.version % verify_every == 0:
                check = self.verify(n)
                result = replace(result, verification=check)
                if not check.ok:
                    if progress:
                        progress(f"WARNING: {check.summary()}\n{n}: repairing by recomputation")
                    with spark_errors(n):
                        result = replace(result, repaired_version=self._runtime.repair(self.catalog, n))
            results.append(result)
        return results

    def refresh(self, name: str) -> "MaintenanceResult":
        """Rebuild view ``name`` from scratch at the current versions of its base tables (its
        caches and maps too), in one commit: for a view whose changes can no longer be read
        (``maintain`` says so when the versions it needs were vacuumed)."""
        from idivm.exec.materialize import spark_errors

        started = time.monotonic()
        with spark_errors(name):
            run = self._runtime.refresh(self.catalog, name)
        return MaintenanceResult.of(name, run, started)

    def verify(self, name: str, limit: int = 5, progress: Callable[[str], None] | None = None) -> "Verification":
        """Recompute view ``name`` from scratch at its watermark (the versions of the base tables
        and views it reads that it reflects) and compare it with the stored view, hidden IDs
        included, as bags.  ``progress`` is told of each comparison."""
        from idivm.exec.materialize import spark_errors

        with spark_errors(name):
            return self._verify(name, limit, progress)

    def _verify(self, name: str, limit: int, progress: Callable[[str], None] | None) -> "Verification":
        def step(message: str) -> None:
            if progress:
                progress(message)

        from idivm.exec.materialize import tables_read

        catalog = self.catalog
        entry = catalog.view(name)
        program = programs.load_program(catalog, entry)  # what maintain executes
        prov = program.prov
        watermark = view_watermark(catalog.path_of(entry), entry)
        missing = sorted(set(tables_read(prov.plan)) - set(watermark))
        if missing:
            raise CatalogError(f"view {name} records no version of {', '.join(missing)}; define it again")
        caches = []
        if entry.extra.get("caches"):
            for cache in program.script.caches if program.script is not None else ():
                cpath = catalog.root / entry.extra["caches"][cache.name]
                at = view_watermark(cpath)
                step(f"{name}: comparing cache {cache.name} with its recomputation")
                caches.append(self._compare(cache.name, self._runtime.evaluate_at(catalog, cache.plan, at), cpath, None,
                                            at, limit, "cache"))
                if cache.maps is not None:  # its maps, as the cache's last commit naming them names them
                    caches += self._compare_maps(f"{name}.{cache.name}", cache.maps, cpath,
                                                 cache_maps(cpath, cache), at, limit, step)
        paths = maps_paths(catalog, entry, program)
        if maps_built(entry, paths):
            caches += self._compare_maps(name, program.maps, catalog.path_of(entry), paths, watermark, limit, step)
        step(f"{name}: comparing the view with its recomputation")
        own = self._compare(name, self._runtime.evaluate_at(catalog, prov.plan, watermark), catalog.path_of(entry),
                            None, watermark, limit)
        return replace(own, caches=tuple(caches))

    def _compare_maps(self, name: str, mp, path: Path, paths: Mapping[str, Path], watermark: Mapping[str, int],
                      limit: int, step) -> list["Verification"]:
        """Each map of ``mp`` (stored at ``paths``) of the table at ``path`` compared with its
        definition at the watermark of the table's last commit naming map versions (an auto view
        recomputed since leaves its maps behind; ``watermark`` when none does), at the versions
        that commit names."""
        from idivm.exec.maps import initial_maps, read_map_spark
        from idivm.exec.runtime import maps_state

        reflected, at = maps_state(path)
        at = watermark if at is None else at
        expected = initial_maps(self.spark, mp, self._runtime.reader(self.catalog, at))
        found = []
        for m, mpath in sorted(paths.items()):
            step(f"{name}: comparing map {m} with its recomputation")
            version = reflected.get(m, delta.version(mpath))
            stored = read_map_spark(self.spark, mpath, version, mp.program.maps[m].keys, self.storage)
            found.append(self._compare(f"{name}.{m}", expected[m], mpath, version, at, limit, "map", stored))
        return found

    def recomputed(self, name: str) -> "DataFrame":
        """View ``name`` computed from scratch from its base tables at the versions it reflects
        (its watermark), hidden IDs included: what :meth:`verify` compares the view with."""
        catalog = self.catalog
        entry = catalog.view(name)
        program = programs.load_program(catalog, entry)
        return self._runtime.evaluate_at(catalog, program.prov.plan, view_watermark(catalog.path_of(entry), entry))

    def _compare(self, name: str, expected: "DataFrame", path: Path, version: int | None,
                 watermark: Mapping[str, int], limit: int, kind: str = "view",
                 stored: "DataFrame | None" = None) -> "Verification":
        """The stored table at ``path`` (at ``version``; default the latest; ``stored``: its rows
        as read for comparing, when they are not the table's rows as they are) compared with
        ``expected``, recomputed at ``watermark``."""
        from idivm.exec.materialize import compare_frames, spark_errors

        if stored is None:
            stored = delta.read_spark(self.spark, path, version, engine=self.storage)
        with spark_errors(name):
            diff = compare_frames(stored, expected, limit)
        return Verification(name, dict(watermark), diff.rows, diff.missing, diff.extra,
                            diff.missing_examples, diff.extra_examples, kind=kind)

    def views(self) -> list["ViewInfo"]:
        """All views, sorted by name."""
        catalog = self.catalog
        return [self._view_info(catalog, catalog.views[n]) for n in sorted(catalog.views)]

    def view_info(self, name: str) -> "ViewInfo":
        catalog = self.catalog
        return self._view_info(catalog, catalog.view(name))

    def read(self, name: str, absent: bool = False) -> "DataFrame":
        """View ``name`` as a Spark DataFrame of its user-visible columns (a view of scalars,
        ``SELECT VALUE x.price``: one column ``value``); a field that is MISSING in a row is NULL
        there, unless ``absent`` keeps the lists of such fields (hidden, for :meth:`rows`)."""
        from idivm.exec.materialize import user_visible

        catalog = self.catalog
        path = catalog.path_of(catalog.view(name))  # an unknown name fails before Spark starts
        return user_visible(delta.read_spark(self.spark, path, engine=self.storage), absent=absent)

    def rows(self, name: str, limit: int | None = None) -> list:
        """View ``name`` as plain Python values: a dict of its user-visible columns per row (without
        the fields that are MISSING in it), or, for a view of scalars (``SELECT VALUE
        x.price``), the values themselves."""
        from idivm.exec.materialize import collect_rows, spark_errors

        with spark_errors(name):
            rows = collect_rows(self.read(name, absent=True), limit)
        if scalar_type(self.catalog.view(name).schema) is not None:
            return [r[VALUE_NAME] for r in rows]
        return rows

    def explain(self, name_or_text: str | os.PathLike, format: str = "text") -> str:
        """What idivm knows about a defined view (by name) or a ``CREATE VIEW`` text or file:
        the declared schemas of the base tables it reads, plan, IDs, base-table signatures, global provenance indexes and Δ-script, as text or JSON
        (``format="json"``)."""
        catalog = self.catalog
        if isinstance(name_or_text, str) and name_or_text in catalog.views:
            text, filename = catalog.view(name_or_text).text, f"<view {name_or_text}>"
        else:
            text, filename = sqlpp_source(name_or_text)
        view, prov = programs.plan_view(catalog, text, filename)
        from idivm.exec.indexes import describe, resolve
        from idivm.explain import Explanation
        from idivm.provenance.indexes import select_indexes

        signatures = programs.base_signatures(catalog, view)
        indexes = select_indexes(view.plan, prov, signatures)
        script, note = programs.generate_script(catalog, view, prov, text, filename, "id", strict=False)
        stored = None
        if isinstance(name_or_text, str) and name_or_text in catalog.views \
                and catalog.view(name_or_text).extra.get("strategy") in ("id", "auto"):
            path = catalog.path_of(catalog.view(name_or_text))
            stored = resolve(indexes, delta.schema(path), prov.view_ids,
                             script.statements if script is not None else ())
        notes = describe(indexes, stored, script.statements if script is not None else ())
        strategy = ""
        if isinstance(name_or_text, str) and name_or_text in catalog.views:
            entry = catalog.view(name_or_text)
            strategy = entry.extra.get("strategy", "recompute")
            if strategy == "auto":
                from idivm.exec import history

                from idivm.exec.runtime import auto_choices

                runs = history.read(catalog.root / programs.program_folder(entry.path))
                choices = auto_choices(catalog, programs.load_program(catalog, entry), entry, runs)
                strategy += " (" + history.describe(runs, choices.incremental or ("id",), choices.unbuilt) + ")"
        maps, no_maps = "", ""
        if programs.groups(view.plan):  # an aggregate view: maps, or why not
            try:
                maps = str(programs.plan_maps(catalog, prov, text, filename).program)
            except IdivmError as e:
                no_maps = e.message
                try:  # maps caches of its GROUP BYs, the rest by ID
                    over = programs.maps_caches_script(catalog, view, prov, text, filename, e)
                    maps = "\n\n".join([*(f"maps of cache {c.name} (its rows: the GROUP BY's groups):\n{c.maps.program}"
                                           for c in over.caches if c.maps is not None), over.render()])
                    no_maps = ""
                except IdivmError:
                    pass
        from idivm.exec.materialize import tables_read

        declared = {t: declared_schema(catalog.tables[t]) for t in tables_read(view.plan)
                    if t in catalog.tables and catalog.tables[t].declared_schema is not None}
        return Explanation(view, prov, signatures, script, note, indexes, notes, strategy, maps,
                           no_maps, declared).render(format)

    def _view_info(self, catalog: Catalog, entry: ViewEntry) -> "ViewInfo":
        from idivm.describe import commit_time

        path = catalog.path_of(entry)
        last = latest_commit_with(path, "idivm.watermark")
        watermark = view_watermark(path, entry)
        return ViewInfo(name=entry.name, rows=delta.row_count(path), version=delta.version(path),
                        schema=entry.schema, path=path, created=entry.created,
                        strategy=entry.extra.get("strategy", "recompute"),
                        strategy_note=entry.extra.get("strategy_note", ""), inputs=entry.inputs(),
                        watermark=watermark, maintained=commit_time(last.get("timestamp")) if last else "",
                        lag=lag(catalog, watermark), warnings=tuple(entry.extra.get("warnings") or ()))

    # --- describing and dropping -----------------------------------------------------------------

    def describe_table(self, name: str, history: int | None = None) -> "Description":
        """Base table ``name``: schema (and the schema it was declared with, as written), key and
        element keys, storage features, the views that read it, and its latest ``history`` commits (default :data:`idivm.describe.HISTORY`;
        each with its idivm metadata, e.g. the ``origin`` of an ingested batch).  Needs no Spark."""
        from idivm.describe import Description

        catalog = self.catalog
        entry = catalog.table(name)
        path = catalog.path_of(entry)
        return Description("table", name, path, entry.schema, delta.row_count(path), delta.version(path),
                           entry.created, tuple(entry.key), delta.features(path), tuple(catalog.readers(name)),
                           _history(path, history), {p: tuple(k) for p, k in entry.element_keys.items()},
                           declared_schema=declared_schema(entry))

    def describe_view(self, name: str, history: int | None = None) -> "Description":
        """View ``name``: schema, IDs, strategy, what it reads and the versions it reflects, its
        lag, storage features (with the columns its files are ordered by, for a view maintained
        by ID), its caches, maps and indexes, the views that read it, its definition and its
        latest ``history`` commits (with idivm's metadata: operation, watermark, run, ...).
        Needs no Spark."""
        from idivm.describe import Description
        from idivm.exec.indexes import INDEXES
        from idivm.storage.layout import view_layout

        catalog = self.catalog
        entry = catalog.view(name)
        info = self._view_info(catalog, entry)
        ids = tuple(i["column"] for i in entry.extra.get("ids", ()))
        program = programs.load_program(catalog, entry)
        features = delta.features(info.path)
        layout = view_layout(delta.schema(info.path).names, ids,
                             program.script.strategy if program.script is not None else None)
        features["clustered_by"] = list(layout.keys) if layout is not None else []
        parts = {f"cache {c}": rel for c, rel in entry.extra.get("caches", {}).items()}
        paths = maps_paths(catalog, entry, program)
        if maps_built(entry, paths):
            parts |= {f"map {m}": str(p.relative_to(catalog.root)) for m, p in paths.items()}
        indexes = catalog.root / f"{entry.path}.{INDEXES}"
        if indexes.is_dir():
            parts |= {f"index {p.name}": f"{entry.path}.{INDEXES}/{p.name}" for p in sorted(indexes.iterdir())
                      if not p.name.startswith(".")}
        return Description("view", name, info.path, entry.schema, info.rows, info.version, entry.created, ids,
                           features, tuple(catalog.readers(name)), _history(info.path, history), text=entry.text,
                           strategy=info.strategy, inputs=info.inputs, watermark=info.watermark, lag=info.lag,
                           maintained=info.maintained, parts=parts)

    def drop_view(self, name: str, *, cascade: bool = False) -> list[str]:
        """Drop view ``name``: its catalog entry, then its tables (the view, its caches, maps and
        indexes) and program.  A view other views read is refused (:class:`CatalogError` naming
        them) unless ``cascade``, which drops those first.  Returns the views dropped, in order."""
        catalog = self.catalog
        catalog.view(name)
        return self._drop(catalog, name, cascade)

    def drop_table(self, name: str, *, cascade: bool = False) -> list[str]:
        """Drop base table ``name``: its catalog entry, then its Delta table and quarantine.  A
        table views read is refused (:class:`CatalogError` naming them) unless ``cascade``,
        which drops those views first.  Returns what was dropped (the views, then the table)."""
        catalog = self.catalog
        catalog.table(name)
        return self._drop(catalog, name, cascade)

    def _drop(self, catalog: Catalog, name: str, cascade: bool) -> list[str]:
        """Drop table or view ``name`` and, with ``cascade``, the views that read it: all their
        catalog entries in one save of the catalog, then their files.  A crash between the two
        leaves files no entry points to (which a later ``define`` of that name replaces), never
        an entry pointing to removed files."""
        kind = "table" if name in catalog.tables else "view"
        dependents = catalog.dependents(name)
        if dependents and not cascade:
            several = len(dependents) > 1
            raise CatalogError(f"cannot drop {kind} {name}: read by view{'s' if several else ''} "
                               f"{', '.join(dependents)} (drop {'them' if several else 'it'} first, or drop with "
                               "--cascade)")
        files: list[Path] = []
        for view in dependents:
            catalog.drop_view(view)
            files += catalog.view_files(view)
        if kind == "view":
            catalog.drop_view(name)
            files += catalog.view_files(name)
        else:
            quarantine = catalog.quarantine_path(catalog.table(name))
            files += [catalog.path_of(catalog.drop_table(name)), quarantine]
        catalog.save()
        for f in files:
            shutil.rmtree(f, ignore_errors=True)
        return [*dependents, name]

    # --- shared machinery ------------------------------------------------------------------------

    def _info(self, catalog: Catalog, entry: TableEntry) -> TableInfo:
        path = catalog.path_of(entry)
        return TableInfo(name=entry.name, key=tuple(entry.key), rows=delta.row_count(path),
                         version=delta.version(path), schema=entry.schema, path=path, created=entry.created,
                         element_keys={p: tuple(k) for p, k in entry.element_keys.items()},
                         declared_schema=declared_schema(entry), static=entry.static)

    def _install(self, writes: Sequence[tuple[str, Callable[[Path], Any]]],
                 register: Callable[[Catalog], None]) -> None:
        """Write new Delta tables at ``<warehouse>/<rel>`` and register them in the catalog, all
        or nothing.

        Each ``write(staging_dir)`` writes its table into a hidden staging directory
        next to its final place; once all are written they are renamed into place and
        ``register(catalog)`` records them; the catalog is saved last.  On any
        failure the staging/final directories and any directories this call
        created are removed and the catalog file is left untouched.
        """
        finals = [self.path / rel for rel, _ in writes]
        stagings = [f.parent / f".{f.name}.creating-{uuid.uuid4().hex[:12]}" for f in finals]
        created_dirs: list[Path] = []
        for f in finals:
            created_dirs += [d for d in (f.parent, *f.parent.parents) if not d.exists() and d not in created_dirs]
        placed: list[Path] = []
        try:
            for (_, write), final, staging in zip(writes, finals, stagings):
                final.parent.mkdir(parents=True, exist_ok=True)
                write(staging)
            for final, staging in zip(finals, stagings):
                os.rename(staging, final)
                placed.append(final)
            catalog = self.catalog
            register(catalog)
            catalog.save()
        except BaseException:
            for d in stagings + placed:
                shutil.rmtree(d, ignore_errors=True)
            for d in sorted(created_dirs, key=lambda d: len(d.parts), reverse=True):  # deepest first
                try:
                    d.rmdir()
                except OSError:
                    pass
            raise


def declared_schema(entry: TableEntry) -> "DeclaredSchema | None":
    """The schema base table ``entry`` was declared with, parsed again from the text the
    catalog keeps (None: its types were inferred from its data)."""
    if entry.declared_schema is None:
        return None
    from idivm.declared_schema import DeclaredSchema

    return DeclaredSchema.from_json(entry.declared_schema)


def lag(catalog: Catalog, watermark: Mapping[str, int]) -> int:
    """How many versions of the tables (and views) ``watermark`` names are committed past it."""
    return sum(max(0, delta.version(catalog.path_of(catalog.entry(t))) - v) for t, v in watermark.items()
               if catalog.has(t))


def _history(path: Path, limit: int | None) -> tuple:
    from idivm.describe import HISTORY, Commit

    return tuple(Commit.of(c) for c in delta.history(path, HISTORY if limit is None else limit))


def sqlpp_source(text_or_path: str | os.PathLike) -> tuple[str, str | None]:
    """(text, file name) of a view given as SQL++ text or as a path to a file holding it."""
    if isinstance(text_or_path, os.PathLike) or (
            isinstance(text_or_path, str) and "\n" not in text_or_path
            and (text_or_path.endswith(".sqlpp") or os.path.isfile(text_or_path))):
        path = os.fspath(text_or_path)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), path
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"cannot read {path}: {e.strerror if isinstance(e, OSError) else e}") from None
    return str(text_or_path), None


