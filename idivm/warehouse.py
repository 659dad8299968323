"""The Python entry point: a warehouse directory with its catalog, base tables and views.

``Warehouse`` opens the catalog eagerly and the SparkSession lazily: listing
tables, describing them and creating them from files or Arrow data use
delta-rs only, so they never start a JVM.  Anything that computes with Spark
goes through ``self.spark``, which creates the session on first use (or
returns the session given as ``spark=``).

Base tables are loaded from JSON Lines, JSON arrays, Parquet and CSV files,
lists of dicts, Arrow tables or Spark DataFrames.  Everything is validated
before anything is written (column names, types, key present, non-null and
unique), and a failed ``create_table`` leaves the warehouse as it was.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from idivm import types as T
from idivm.catalog import Catalog, TableEntry, ViewEntry
from idivm.errors import CatalogError, DataError
from idivm.ingest.records import json_kind
from idivm.storage import delta
from idivm.storage import schema as schemas

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from idivm.ingest import IngestResult

DEFAULT_WAREHOUSE = "./idivm-warehouse"
WAREHOUSE_ENV = "IDIVM_WAREHOUSE"

FORMATS = ("jsonl", "json", "parquet", "csv")
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
               ".pq": "parquet", ".csv": "csv"}

#: How many offending rows/keys an error message names.
SHOWN = 3


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


def view_watermark(path: Path, entry: ViewEntry) -> dict[str, int]:
    """The base-table versions the stored view reflects: from the metadata of the view's latest
    commit that carries one (it lands atomically with the data), else the catalog's."""
    for commit in delta.history(path):
        if "idivm.watermark" in commit:
            return {t: int(v) for t, v in json.loads(commit["idivm.watermark"]).items()}
    return {t: int(v) for t, v in (entry.extra.get("watermark") or {}).items()}


def _versions(watermark: Mapping[str, int]) -> str:
    return ", ".join(f"{t}@{v}" for t, v in sorted(watermark.items()))


@dataclass(frozen=True, slots=True)
class MaintenanceResult:
    """One view's maintenance run: base-table change rows read, the view version committed
    (None: already up to date, nothing committed), old and new watermark, seconds."""

    name: str
    strategy: str
    changes: int
    version: int | None
    old_watermark: dict
    new_watermark: dict
    seconds: float

    def summary(self) -> str:
        if self.version is None:
            return f"{self.name}: up to date at {_versions(self.new_watermark)} ({self.seconds:.1f} s)"
        return (f"{self.name}: {self.strategy}, {self.changes} change rows read, "
                f"now at {_versions(self.new_watermark)}, view version {self.version} ({self.seconds:.1f} s)")


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

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.extra == 0

    def summary(self) -> str:
        at = _versions(self.watermark)
        if self.ok:
            return f"view {self.name} matches its recomputation at {at}: {self.rows} rows"
        lines = [f"view {self.name} differs from its recomputation at {at}: "
                 f"{self.missing} row(s) missing, {self.extra} unexpected"]
        lines += [f"  missing:    {json.dumps(r, default=str, ensure_ascii=False)}" for r in self.missing_examples]
        lines += [f"  unexpected: {json.dumps(r, default=str, ensure_ascii=False)}" for r in self.extra_examples]
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


class Warehouse:
    """A warehouse directory: ``catalog.json``, ``tables/<name>/``, ``views/<name>/``.

    ``path`` defaults to ``$IDIVM_WAREHOUSE`` or ``./idivm-warehouse``; the
    directory is created on the first write.  ``spark`` is an existing
    SparkSession to use as it is; otherwise one is created on first need with
    ``idivm.storage.spark.get_session(spark_master)``.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, spark: "SparkSession | None" = None,
                 spark_master: str | None = None):
        self.path = Path(path if path is not None else os.environ.get(WAREHOUSE_ENV) or DEFAULT_WAREHOUSE).absolute()
        self._spark = spark
        self._spark_master = spark_master
        Catalog.load(self.path)  # fail early on a corrupt catalog or a path that is a file

    def __repr__(self) -> str:
        return f"Warehouse({str(self.path)!r})"

    @property
    def spark(self) -> "SparkSession":
        """The SparkSession, created on first use unless one was given."""
        if self._spark is None:
            from idivm.storage.spark import get_session

            self._spark = get_session(self._spark_master)
        return self._spark

    @property
    def catalog(self) -> Catalog:
        """The catalog as it is on disk now (re-read on every access)."""
        return Catalog.load(self.path)

    # --- base tables -----------------------------------------------------------------------------

    def create_table(self, name: str, key: str | Sequence[str], source: Any, *,
                     format: str | None = None,
                     element_keys: Mapping[str, str | Sequence[str]] | None = None) -> TableInfo:
        """Create base table ``name`` with primary key ``key`` from ``source``.

        ``source`` is a file path (format from ``format`` or the extension:
        ``.jsonl``/``.ndjson``, ``.json``, ``.parquet``/``.pq`` (file or
        directory), ``.csv``), a list of dicts, a pyarrow Table or a Spark
        DataFrame.  ``key`` is a column name, a comma-separated list or a list
        of names.  ``element_keys`` maps the path of a nested collection of
        tuples (``hours``, ``address.phones``) to its element key columns (as
        ``key``), which must be non-null and unique within each collection
        value.  Raises :class:`CatalogError` for a bad or taken name and
        :class:`DataError` for bad data; in both cases nothing is written.
        """
        catalog = self.catalog
        catalog.check_new_name(name, "table")
        key_columns = parse_key(key)
        declared = parse_element_keys(element_keys)
        rel = catalog.new_table_path(name)
        if (self.path / rel).exists():
            raise CatalogError(f"{self.path / rel} exists but table {name!r} is not in the catalog "
                               "(left over from an interrupted run?): remove it or choose another name")
        metadata = {"idivm.operation": "create table", "idivm.table": name}
        if is_spark_dataframe(source):
            df = source
            target = _spark_delta_schema(df)
            check_columns(target, "DataFrame")
            check_spark_key(df, key_columns, origin="DataFrame")
            schema = idivm_schema(target, "DataFrame")
            for path, columns in declared.items():
                check_element_key_type(schema, path, columns, "DataFrame")
                check_spark_element_key(df, key_columns, path, columns, "DataFrame")

            def write(p: Path) -> None:
                delta.write_spark(df, p, mode="error", commit_metadata=metadata)
        else:
            rows = load_source(source, format=format)
            target = schemas.delta_schema(rows.table.schema)
            check_columns(target, rows.origin)
            check_key(rows, key_columns)
            schema = idivm_schema(target, rows.origin)
            for path, columns in declared.items():
                check_element_key_type(schema, path, columns, rows.origin)
                check_element_key(rows, path, columns)

            def write(p: Path) -> None:
                delta.create_table(p, rows.table, schema=target, commit_metadata=metadata)
        entry = TableEntry(name=name, key=key_columns, schema=schema, path=rel, element_keys=declared)
        self._install(rel, write, lambda cat: cat.add_table(entry))
        return self.table_info(name)

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
        return delta.read_spark(self.spark, path, version)

    def ingest(self, table: str, path: str | os.PathLike, format: str = "debezium") -> "IngestResult":
        """Apply the changes in file ``path`` to base table ``table`` in one Delta commit.

        ``format`` is ``debezium`` (Debezium change events, bare or in the
        Kafka Connect envelope) or ``rows`` (whole rows are upserts, a line
        ``{"__delete": {<key columns>}}`` deletes); see :mod:`idivm.ingest`.
        Every record is checked against the table's schema and key first: a
        bad one raises :class:`DataError` naming ``file:line`` and nothing is
        applied.  A file without changes commits nothing.  Needs no Spark.
        """
        from idivm.ingest import ingest_file

        catalog = self.catalog
        entry = catalog.table(table)
        return ingest_file(catalog.path_of(entry), path, tuple(entry.key), format=format,
                           element_keys=entry.element_keys)

    # --- views -----------------------------------------------------------------------------------

    def define(self, text_or_path: str | os.PathLike) -> "ViewInfo":
        """Plan and materialize the view of a ``CREATE VIEW`` text (or a ``.sqlpp`` file).

        Syntax errors, unknown names and bad data raise before anything is
        written; the view's Delta table and its catalog entry land together.
        """
        text, filename = sqlpp_source(text_or_path)
        catalog = self.catalog
        view, prov = self._plan(text, filename, catalog)
        catalog.check_new_name(view.name, "view")
        from idivm.exec.materialize import evaluate_plan, tables_read

        # one snapshot: every base table at the version it has now (the view's watermark)
        watermark = {t: delta.version(self.table_path(t)) for t in tables_read(prov.plan)}
        df = evaluate_plan(self.spark, prov.plan, lambda t: self.read_table(t, watermark[t]))
        rel = catalog.new_view_path(view.name)
        metadata = {"idivm.operation": "define view", "idivm.view": view.name,
                    "idivm.watermark": json.dumps(watermark, sort_keys=True)}
        ids = [{"column": c, "name": n} for c, n in prov.view_ids]
        entry = ViewEntry(name=view.name, text=text, schema=view.type, path=rel,
                          extra={"ids": ids, "watermark": watermark})
        from idivm.exec.compiler import SCALAR_SUBQUERY_ERROR

        try:
            self._install(rel, lambda p: delta.write_spark(df, p, mode="error", commit_metadata=metadata),
                          lambda cat: cat.add_view(entry))
        except Exception as e:  # errors raised by the data while Spark evaluates the view
            if SCALAR_SUBQUERY_ERROR in str(e):
                raise DataError(f"view {view.name}: {SCALAR_SUBQUERY_ERROR}") from None
            raise
        return self.view_info(view.name)

    def maintain(self, name: str | None = None, *, progress: Callable[[str], None] | None = None
                 ) -> list["MaintenanceResult"]:
        """Bring view ``name`` (default: every view) up to date with its base tables.

        The current version of every base table the view reads is pinned (the new
        watermark); if none moved since the view's watermark nothing is committed.
        Otherwise the view is recomputed at the pinned versions and replaced in ONE
        Delta commit whose metadata carries the new watermark, so readers see the
        old or the new view, never a mix, and a crash leaves the old one.  (This
        is the ``recompute`` strategy; incremental strategies plug in here.)
        """
        import time

        from idivm.exec.materialize import evaluate_plan, tables_read

        catalog = self.catalog
        names = [name] if name is not None else sorted(catalog.views)
        results = []
        for view_name in names:
            entry = catalog.view(view_name)
            started = time.monotonic()
            path = catalog.path_of(entry)
            _, prov = self._plan(entry.text, f"<view {view_name}>", catalog)
            old = view_watermark(path, entry)
            new = {t: delta.version(self.table_path(t)) for t in tables_read(prov.plan)}
            changes = sum(delta.read_changes(self.table_path(t), old[t] + 1, v).num_rows
                          for t, v in new.items() if v > old.get(t, -1) and t in old)
            if new == old:
                results.append(MaintenanceResult(view_name, "recompute", 0, None, old, new,
                                                 time.monotonic() - started))
                continue
            if progress:
                progress(f"{view_name}: recomputing at {_versions(new)}")
            df = evaluate_plan(self.spark, prov.plan, lambda t: self.read_table(t, new[t]))
            metadata = {"idivm.operation": "maintain", "idivm.view": view_name, "idivm.strategy": "recompute",
                        "idivm.watermark": json.dumps(new, sort_keys=True)}
            version = delta.write_spark(df, path, mode="overwrite", commit_metadata=metadata)
            results.append(MaintenanceResult(view_name, "recompute", changes, version, old, new,
                                             time.monotonic() - started))
        return results

    def verify(self, name: str, limit: int = 5) -> "Verification":
        """Recompute view ``name`` from scratch at its watermark (the base-table versions it
        reflects) and compare it with the stored view, hidden IDs included, as bags."""
        from idivm.exec.materialize import compare_frames, evaluate_plan, tables_read

        catalog = self.catalog
        entry = catalog.view(name)
        _, prov = self._plan(entry.text, f"<view {name}>", catalog)
        watermark = view_watermark(catalog.path_of(entry), entry)
        missing = sorted(set(tables_read(prov.plan)) - set(watermark))
        if missing:
            raise CatalogError(f"view {name} records no version of {', '.join(missing)}; define it again")
        expected = evaluate_plan(self.spark, prov.plan, lambda t: self.read_table(t, watermark[t]))
        stored = delta.read_spark(self.spark, catalog.path_of(entry))
        diff = compare_frames(stored, expected, limit)
        return Verification(name, watermark, diff.rows, diff.missing, diff.extra,
                            diff.missing_examples, diff.extra_examples)

    def views(self) -> list["ViewInfo"]:
        """All views, sorted by name."""
        catalog = self.catalog
        return [self._view_info(catalog, catalog.views[n]) for n in sorted(catalog.views)]

    def view_info(self, name: str) -> "ViewInfo":
        catalog = self.catalog
        return self._view_info(catalog, catalog.view(name))

    def read(self, name: str) -> "DataFrame":
        """View ``name`` as a Spark DataFrame of its user-visible columns."""
        from idivm.exec.materialize import user_visible

        catalog = self.catalog
        path = catalog.path_of(catalog.view(name))  # an unknown name fails before Spark starts
        return user_visible(delta.read_spark(self.spark, path))

    def rows(self, name: str, limit: int | None = None) -> list[dict]:
        """View ``name`` as plain Python values (user-visible columns only)."""
        from idivm.exec.materialize import collect_rows

        return collect_rows(self.read(name), limit)

    def explain(self, name_or_text: str | os.PathLike, format: str = "text") -> str:
        """What idivm knows about a defined view (by name) or a ``CREATE VIEW`` text or file:
        plan, IDs and base-table signatures, as text or JSON (``format="json"``)."""
        catalog = self.catalog
        if isinstance(name_or_text, str) and name_or_text in catalog.views:
            text, filename = catalog.view(name_or_text).text, f"<view {name_or_text}>"
        else:
            text, filename = sqlpp_source(name_or_text)
        view, prov = self._plan(text, filename, catalog)
        from idivm.diffs.base_signatures import generate_base_signatures
        from idivm.explain import Explanation

        keys = {n: tuple(e.key) for n, e in catalog.tables.items()}
        types = {n: e.schema for n, e in catalog.tables.items()}
        signatures = generate_base_signatures(view.plan, keys, types, element_keys_of(catalog))
        return Explanation(view, prov, signatures).render(format)

    def _plan(self, text: str, filename: str | None, catalog: Catalog):
        """Parse, plan and infer provenance; errors carry the view text."""
        from idivm.algebra.builder import build_view
        from idivm.errors import IdivmError
        from idivm.provenance.ids import infer_provenance
        from idivm.sqlpp import parse_view

        try:
            view = build_view(parse_view(text, filename), {n: e.schema for n, e in catalog.tables.items()})
            keys = {n: tuple(e.key) for n, e in catalog.tables.items()}
            return view, infer_provenance(view.plan, keys, {n: e.schema for n, e in catalog.tables.items()},
                                          element_keys_of(catalog))
        except IdivmError as e:
            raise e.with_source(text, filename)

    def _view_info(self, catalog: Catalog, entry: ViewEntry) -> "ViewInfo":
        path = catalog.path_of(entry)
        return ViewInfo(name=entry.name, rows=delta.row_count(path), version=delta.version(path),
                        schema=entry.schema, path=path, created=entry.created)

    # --- shared machinery ------------------------------------------------------------------------

    def _info(self, catalog: Catalog, entry: TableEntry) -> TableInfo:
        path = catalog.path_of(entry)
        return TableInfo(name=entry.name, key=tuple(entry.key), rows=delta.row_count(path),
                         version=delta.version(path), schema=entry.schema, path=path, created=entry.created,
                         element_keys={p: tuple(k) for p, k in entry.element_keys.items()})

    def _install(self, rel: str, write: Callable[[Path], Any], register: Callable[[Catalog], None]) -> Path:
        """Write a new Delta table at ``<warehouse>/<rel>`` and register it in the catalog, all or nothing.

        ``write(staging_dir)`` writes the table into a hidden staging directory
        next to its final place; it is then renamed into place and
        ``register(catalog)`` records it; the catalog is saved last.  On any
        failure the staging/final directory and any directories this call
        created are removed and the catalog file is left untouched.
        """
        final = self.path / rel
        staging = final.parent / f".{final.name}.creating-{uuid.uuid4().hex[:12]}"
        created_dirs = [d for d in (final.parent, *final.parent.parents) if not d.exists()]
        placed = False
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            write(staging)
            os.rename(staging, final)
            placed = True
            catalog = self.catalog
            register(catalog)
            catalog.save()
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            if placed:
                shutil.rmtree(final, ignore_errors=True)
            for d in created_dirs:  # deepest first
                try:
                    d.rmdir()
                except OSError:
                    pass
            raise
        return final


def element_keys_of(catalog: Catalog) -> dict[str, dict[str, tuple[str, ...]]]:
    """The declared element keys of every base table: table -> collection path -> key columns."""
    return {n: {p: tuple(k) for p, k in e.element_keys.items()} for n, e in catalog.tables.items()}


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


# --- sources ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Rows:
    """Arrow data loaded from a source, and how to point at its rows in messages.

    ``unit`` is ``line`` (files: ``locators`` holds each row's line number),
    ``index`` (lists of dicts) or ``row`` (Arrow/Parquet: the 0-based row number).
    """

    table: pa.Table
    origin: str
    unit: str = "row"
    locators: Sequence[int] | None = None

    def locate(self, i: int) -> int:
        return self.locators[i] if self.locators is not None else i

    def where(self, indices: Sequence[int]) -> str:
        """``line 3`` / ``lines 3, 8`` for row indices."""
        plural = {"line": "lines", "index": "indexes", "row": "rows"}[self.unit]
        where = ", ".join(str(self.locate(i)) for i in indices)
        return f"{self.unit if len(indices) == 1 else plural} {where}"


def parse_key(key: str | Sequence[str]) -> list[str]:
    """Key columns from ``"a"``, ``"a,b"`` or ``["a", "b"]``; empty or repeated keys are DataErrors."""
    if isinstance(key, str):
        columns = [c.strip() for c in key.split(",")] if key.strip() else []
    else:
        columns = [str(c).strip() for c in key]
    if not columns or any(not c for c in columns):
        raise DataError("a table needs a key: one or more column names, e.g. key=['user_id'] or --key user_id")
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise DataError(f"key column(s) listed twice: {', '.join(repeated)}")
    return columns


def parse_element_keys(element_keys: Mapping[str, str | Sequence[str]] | None) -> dict[str, list[str]]:
    """Element keys as ``{path: [columns]}``; each key is given like ``key`` (``"day"``, ``"a,b"``, a list)."""
    out: dict[str, list[str]] = {}
    for path, key in (element_keys or {}).items():
        path = str(path).strip()
        if not path or any(not step.strip() for step in path.split(".")):
            raise DataError(f"invalid element key path {path!r}: use attribute names joined by '.', "
                            "e.g. hours or address.phones")
        path = ".".join(step.strip() for step in path.split("."))
        if path in out:
            raise DataError(f"element key of {path} declared twice")
        try:
            out[path] = parse_key(key)
        except DataError:
            raise DataError(f"element key of {path} needs one or more column names, e.g. {path}=id") from None
    return out


def is_spark_dataframe(obj: Any) -> bool:
    """Whether ``obj`` is a (classic or Connect) Spark DataFrame, without importing pyspark."""
    return type(obj).__module__.startswith("pyspark.sql") and hasattr(obj, "schema") and hasattr(obj, "write")


def infer_format(path: str | os.PathLike) -> str:
    suffix = Path(path).suffix.lower()
    try:
        return _EXTENSIONS[suffix]
    except KeyError:
        raise DataError(f"cannot infer the format of {str(path)!r} from its extension; "
                        f"specify one of {', '.join(FORMATS)}") from None


def load_source(source: Any, *, format: str | None = None) -> Rows:
    """Load a file path, list of dicts or pyarrow Table as :class:`Rows`."""
    if isinstance(source, (str, os.PathLike)):
        fmt = format or infer_format(source)
        if fmt not in FORMATS:
            raise DataError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
        return {"jsonl": read_json_lines, "json": read_json, "parquet": read_parquet, "csv": read_csv}[fmt](source)
    if isinstance(source, pa.RecordBatch):
        source = pa.Table.from_batches([source])
    if isinstance(source, pa.Table):
        return Rows(source, "table", "row")
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        for i, r in enumerate(source):
            if not isinstance(r, Mapping):
                raise DataError(f"rows[{i}] is {type(r).__name__}, not a dict")
        return Rows(table_from_records(source, "rows", lambda i: f"index {i}"), "rows", "index")
    raise DataError(f"cannot load a table from a {type(source).__name__}: give a file path, a list of dicts, "
                    "a pyarrow Table or a Spark DataFrame")


def _read_text(path: str | os.PathLike) -> str:
    p = Path(path)
    if p.is_dir():
        raise DataError(f"cannot read {str(path)!r}: it is a directory")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"cannot read {str(path)!r}: no such file") from None
    except OSError as e:
        raise DataError(f"cannot read {str(path)!r}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_json_lines(path: str | os.PathLike) -> Rows:
    """One JSON object per line (blank lines are skipped)."""
    text = _read_text(path)
    records, lines = [], []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{n}: invalid JSON: {e.msg} (column {e.colno})") from None
        _check_object(value, path, n)
        records.append(value)
        lines.append(n)
    return _records_rows(records, lines, str(path))


def read_json(path: str | os.PathLike) -> Rows:
    """A top-level JSON array of objects, or objects one after the other (JSON Lines)."""
    text = _read_text(path)
    records, lines = [], []
    for n, value in _json_values(text, str(path)):
        _check_object(value, path, n)
        records.append(value)
        lines.append(n)
    return _records_rows(records, lines, str(path))


def _records_rows(records: list[dict], lines: list[int], origin: str) -> Rows:
    if not records:
        raise DataError(f"{origin}: no rows, so no columns to create the table with")
    table = table_from_records(records, origin, lambda i: f"line {lines[i]}")
    return Rows(table, origin, "line", lines)


def _check_object(value: Any, path: Any, line: int) -> None:
    if not isinstance(value, dict):
        raise DataError(f"{path}:{line}: expected a JSON object, got {json_kind(value)}")


_WS = re.compile(r"[ \t\n\r]*")


def _json_values(text: str, origin: str):
    """Yield ``(line, value)`` for the elements of a top-level array, or for
    whitespace-separated top-level values."""
    decoder = json.JSONDecoder()
    starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(pos: int) -> int:
        return bisect.bisect_right(starts, pos)

    def fail(pos: int, msg: str):
        raise DataError(f"{origin}:{line_of(pos)}: invalid JSON: {msg} (column {pos - starts[line_of(pos) - 1] + 1})")

    def decode(pos: int):
        try:
            return decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise DataError(f"{origin}:{e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from None

    i = _WS.match(text, 0).end()
    if text.startswith("[", i):
        i = _WS.match(text, i + 1).end()
        if text.startswith("]", i):
            i = i + 1
        else:
            while True:
                value, end = decode(i)
                yield line_of(i), value
                i = _WS.match(text, end).end()
                if text.startswith(",", i):
                    i = _WS.match(text, i + 1).end()
                elif text.startswith("]", i):
                    i += 1
                    break
                else:
                    fail(i, "expected ',' or ']' after an array element")
        i = _WS.match(text, i).end()
        if i < len(text):
            fail(i, "extra data after the top-level array")
        return
    while i < len(text):
        value, end = decode(i)
        yield line_of(i), value
        i = _WS.match(text, end).end()


def read_parquet(path: str | os.PathLike) -> Rows:
    """A Parquet file or a directory of Parquet files."""
    import pyarrow.parquet as pq

    if not Path(path).exists():
        raise DataError(f"cannot read {str(path)!r}: no such file")
    try:
        table = pq.read_table(str(path))
    except OSError as e:
        raise DataError(f"cannot read {str(path)!r}: {e.strerror or _first_line(e)}") from None
    except (pa.ArrowException, ValueError) as e:
        raise DataError(f"{path}: not a readable Parquet file: {_first_line(e)}") from None
    if table.num_columns == 0:
        raise DataError(f"{path}: no columns (no Parquet files?)")
    return Rows(table, str(path), "row")


def read_csv(path: str | os.PathLike) -> Rows:
    """A CSV file with a header line; column types are inferred by pyarrow."""
    import pyarrow.csv as pacsv

    p = Path(path)
    if p.is_dir():
        raise DataError(f"cannot read {str(path)!r}: it is a directory")
    if not p.exists():
        raise DataError(f"cannot read {str(path)!r}: no such file")
    try:
        table = pacsv.read_csv(str(path))
    except OSError as e:
        raise DataError(f"cannot read {str(path)!r}: {e.strerror or _first_line(e)}") from None
    except (pa.ArrowException, ValueError) as e:
        raise DataError(f"{path}: invalid CSV: {_first_line(e)}") from None
    # Line numbers assume no quoted line breaks: the header is line 1.
    return Rows(table, str(path), "line", range(2, table.num_rows + 2))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# --- JSON values to Arrow ---------------------------------------------------------------------------

_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def table_from_records(records: Sequence[Mapping[str, Any]], origin: str,
                       where: Callable[[int], str]) -> pa.Table:
    """An Arrow table from dicts: one column per key seen in any record (in
    order of first appearance; absent keys are null), types inferred by
    ``pyarrow.array`` over all values, so nested objects become structs,
    arrays lists, and integers mixed with floats doubles.

    Values of one column that cannot share a type raise :class:`DataError`
    naming the column (``a.b``, ``a[]`` for nested ones) and the rows
    (``where(i)``) of the first conflicting values.
    """
    names: dict[str, None] = {}
    for r in records:
        for k in r:
            names.setdefault(k, None)
    arrays = []
    for name in names:
        values = [r.get(name) for r in records]
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as e:
            conflict = _type_conflict(name, list(enumerate(values)), where)
            detail = conflict or f"column '{name}' cannot be converted: {_first_line(e)}"
            raise DataError(f"{origin}: {detail}") from None
    return pa.Table.from_arrays(arrays, names=list(names))


def _type_group(kind: str) -> str:
    return "a number" if kind in ("an integer", "a number") else kind


def _type_conflict(path: str, items: list[tuple[int, Any]], where: Callable[[int], str]) -> str | None:
    """Describe the first pair of values at ``path`` that cannot share an Arrow type, or None."""
    first: tuple[str, int] | None = None
    for i, v in items:
        if v is None:
            continue
        kind = json_kind(v)
        if kind == "an integer" and not _INT64[0] <= v <= _INT64[1]:
            return f"column '{path}' has an integer outside the 64-bit range at {where(i)}"
        if first is None:
            first = (kind, i)
        elif _type_group(kind) != _type_group(first[0]):
            return f"column '{path}' is {first[0]} at {where(first[1])} but {kind} at {where(i)}"
    if first is None:
        return None
    if first[0] == "an object":
        fields: dict[str, list[tuple[int, Any]]] = {}
        for i, v in items:
            if isinstance(v, Mapping):
                for k, sub in v.items():
                    fields.setdefault(k, []).append((i, sub))
        for k, sub_items in fields.items():
            found = _type_conflict(f"{path}.{k}", sub_items, where)
            if found:
                return found
    if first[0] == "an array":
        return _type_conflict(f"{path}[]", [(i, e) for i, v in items if isinstance(v, (list, tuple)) for e in v],
                              where)
    return None


# --- validation --------------------------------------------------------------------------------------

# Characters Delta Lake (without column mapping) and Spark's Parquet writer reject in names; '.'
# would make Spark column paths ambiguous.
_BAD_NAME_CHARS = set(" ,;{}()\n\t=.")


def check_columns(schema: pa.Schema, origin: str) -> None:
    """Column and field names must be non-empty, free of `` ,;{}()\\n\\t=.`` and
    distinct ignoring case (Spark resolves names case-insensitively)."""
    def check(fields: Sequence[pa.Field], where: str) -> None:
        seen: dict[str, str] = {}
        for f in fields:
            full = f"{where}{f.name}"
            if not f.name or set(f.name) & _BAD_NAME_CHARS:
                raise DataError(f"{origin}: column name {full!r} is not allowed: names must be non-empty and "
                                "contain none of: space , ; { } ( ) = . tab newline")
            low = f.name.lower()
            if seen.get(low) == f.name:
                raise DataError(f"{origin}: column {full!r} appears twice")
            if low in seen:
                raise DataError(f"{origin}: columns {where}{seen[low]!r} and {full!r} differ only in case")
            seen[low] = f.name
            t = f.type
            while pa.types.is_list(t) or pa.types.is_large_list(t):
                t = t.value_type
            if pa.types.is_struct(t):
                if t.num_fields == 0:
                    raise DataError(f"{origin}: column {full!r} is an object without fields in every row; "
                                    "its type cannot be stored")
                check([t.field(i) for i in range(t.num_fields)], f"{full}.")
    check(list(schema), "")


def idivm_schema(schema: pa.Schema, origin: str) -> T.TupleType:
    """The idivm static type of a (Delta-ready) Arrow schema; DataError for unsupported types."""
    for f in schema:
        try:
            T.from_arrow(f.type)
        except ValueError:
            raise DataError(f"{origin}: column '{f.name}' has type {f.type}, which idivm does not support") from None
    result = T.from_arrow(schema)
    assert isinstance(result, T.TupleType)
    return result


def _check_key_columns(names: Sequence[str], types: Mapping[str, Any], key: Sequence[str], origin: str,
                       nested: Callable[[Any], bool]) -> None:
    missing = [k for k in key if k not in names]
    if missing:
        available = ", ".join(names) if names else "none"
        raise DataError(f"{origin}: key column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                        f"not found; columns: {available}")
    for k in key:
        if nested(types[k]):
            raise DataError(f"{origin}: key column {k} has a nested type ({types[k]}); key columns must be scalars")


def check_key(rows: Rows, key: Sequence[str]) -> None:
    """Key columns exist, are scalars, and are non-null and unique in every row."""
    table = rows.table
    types = {f.name: f.type for f in table.schema}
    _check_key_columns(table.column_names, types, key, rows.origin, pa.types.is_nested)

    for k in key:
        nulls = pc.is_null(table.column(k), nan_is_null=True)
        if table.num_rows and pc.any(nulls).as_py():
            bad = pc.indices_nonzero(nulls).to_pylist()
            more = f" (and {len(bad) - SHOWN} more)" if len(bad) > SHOWN else ""
            raise DataError(f"{rows.origin}: key column {k} is null at {rows.where(bad[:SHOWN])}{more}")

    if table.num_rows < 2:
        return
    indexed = table.select(list(key)).append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    groups = indexed.group_by(list(key), use_threads=False).aggregate([("__row", "list"), ("__row", "min")])
    sizes = pc.list_value_length(groups.column("__row_list"))
    dups = groups.filter(pc.greater(sizes, 1))
    if dups.num_rows == 0:
        return
    dups = dups.sort_by([("__row_min", "ascending")])
    parts = []
    for r in dups.slice(0, SHOWN).to_pylist():
        values = ", ".join(f"{k}={_show_value(r[k])}" for k in key)
        shown = sorted(r["__row_list"])[:SHOWN + 2]
        parts.append(f"{values if len(key) == 1 else '(' + values + ')'} at {rows.where(shown)}")
    more = f" ({dups.num_rows} duplicated keys in all)" if dups.num_rows > SHOWN else ""
    raise DataError(f"{rows.origin}: duplicate key {'; '.join(parts)}{more}")


def _show_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def _spark_delta_schema(df: "DataFrame") -> pa.Schema:
    try:
        return schemas.delta_schema(schemas.arrow_schema(df.schema, nullable=True))
    except DataError:
        raise
    except Exception as e:  # pyspark raises its own errors for types Arrow cannot hold
        raise DataError(f"DataFrame: cannot store its schema: {_first_line(e)}") from None


def check_spark_key(df: "DataFrame", key: Sequence[str], origin: str = "DataFrame") -> None:
    """The checks of :func:`check_key` for a Spark DataFrame, as Spark aggregations
    (only counts and the first few duplicated keys reach the driver)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    types = {f.name: f.dataType for f in df.schema.fields}
    _check_key_columns(df.columns, {k: v.simpleString() for k, v in types.items()}, key, origin,
                       lambda s: s.startswith(("struct", "array", "map")))
    assert not any(isinstance(types[k], (ArrayType, MapType, StructType)) for k in key)
    cols = [F.col(f"`{k}`") for k in key]

    counts = df.select([F.sum(F.col(f"`{k}`").isNull().cast("long")).alias(f"n{i}")
                        for i, k in enumerate(key)]).first()
    for i, k in enumerate(key):
        nulls = counts[f"n{i}"] or 0
        if nulls:
            raise DataError(f"{origin}: key column {k} is null in {nulls} row{'s' if nulls > 1 else ''}")

    dup = df.groupBy(*cols).count().filter(F.col("count") > 1)
    first = dup.orderBy(F.col("count").desc(), *cols).limit(SHOWN).collect()
    if not first:
        return
    total = dup.count() if len(first) == SHOWN else len(first)
    parts = []
    for r in first:
        values = ", ".join(f"{k}={_show_value(r[k])}" for k in key)
        parts.append(f"{values if len(key) == 1 else '(' + values + ')'} ({r['count']} rows)")
    more = f" ({total} duplicated keys in all)" if total > SHOWN else ""
    raise DataError(f"{origin}: duplicate key {'; '.join(parts)}{more}")


def check_element_key_type(schema: T.TupleType, path: str, key: Sequence[str], origin: str) -> T.TupleType:
    """The element type of the collection at ``path`` (a step into a collection goes to its
    elements' attributes); DataError unless it is a collection of tuples with scalar ``key`` columns."""
    steps = path.split(".")
    t: T.Type = schema
    for i, name in enumerate(steps):
        if isinstance(t, T.CollectionType):
            t = t.element
        outer = ".".join(steps[:i])
        if not isinstance(t, T.TupleType):
            raise DataError(f"{origin}: element key path {path}: {outer} has type {t}, which has no attribute {name}")
        found = t.field(name)
        if found is None:
            where = f"in {outer} " if outer else ""
            raise DataError(f"{origin}: element key path {path}: no attribute {name} {where}"
                            f"(attributes: {', '.join(t.names) or 'none'})")
        t = found
    if isinstance(t, T.CollectionType) and isinstance(t.element, T.ScalarType):
        raise DataError(f"{origin}: {path} is a collection of scalars ({t}), which needs no element key: "
                        "each value is its own provenance")
    if not (isinstance(t, T.CollectionType) and isinstance(t.element, T.TupleType)):
        raise DataError(f"{origin}: element key path {path} has type {t}, not a collection of tuples")
    element = t.element
    missing = [k for k in key if element.field(k) is None]
    if missing:
        raise DataError(f"{origin}: element key column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                        f"not found in the elements of {path} (attributes: {', '.join(element.names)})")
    for k in key:
        kt = element.field(k)
        if isinstance(kt, (T.TupleType, T.CollectionType)):
            raise DataError(f"{origin}: element key column {k} of {path} has a nested type ({kt}); "
                            "key columns must be scalars")
    return element


def check_element_key(rows: Rows, path: str, key: Sequence[str]) -> None:
    """The element key of the collection at ``path`` is non-null and unique within each collection
    value (the same key in different rows, or in different collections of one row, is fine).
    Assumes :func:`check_element_key_type` passed."""
    table = rows.table
    steps = path.split(".")
    values = table.column(steps[0]).combine_chunks()
    row = pa.array(range(table.num_rows), pa.int64())  # the table row each value belongs to
    for name in steps[1:]:
        if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
            row = row.take(pc.list_parent_indices(values))
            values = pc.list_flatten(values)
        values = pc.struct_field(values, name)
    container = pc.list_parent_indices(values)  # which collection value each element is in
    row = row.take(container)
    elements = pc.list_flatten(values)
    columns = [pc.struct_field(elements, k) for k in key]

    for k, column in zip(key, columns):
        nulls = pc.is_null(column, nan_is_null=True)
        if len(column) and pc.any(nulls).as_py():
            first = pc.indices_nonzero(nulls)[0].as_py()
            raise DataError(f"{rows.origin}: element key column {k} of {path} is null at "
                            f"{rows.where([row[first].as_py()])}")

    if len(elements) < 2:
        return
    names = [f"k{i}" for i in range(len(key))]
    indexed = pa.table([container, row, *columns], names=["container", "row", *names])
    groups = indexed.group_by(["container", *names], use_threads=False).aggregate([("row", "min"), ("row", "count")])
    dups = groups.filter(pc.greater(groups.column("row_count"), 1))
    if dups.num_rows == 0:
        return
    first = dups.sort_by([("row_min", "ascending")]).slice(0, 1).to_pylist()[0]
    values_ = ", ".join(f"{k}={_show_value(first[n])}" for k, n in zip(key, names))
    shown = values_ if len(key) == 1 else f"({values_})"
    raise DataError(f"{rows.origin}: duplicate element key {shown} in {path} at {rows.where([first['row_min']])}")


def check_spark_element_key(df: "DataFrame", table_key: Sequence[str], path: str, key: Sequence[str],
                            origin: str = "DataFrame") -> None:
    """The checks of :func:`check_element_key` for a Spark DataFrame, as Spark jobs (only the first
    offending row reaches the driver, named by its primary key).  Assumes the primary key is valid."""
    from functools import reduce

    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    steps = path.split(".")
    ids = [f"__key{i}" for i in range(len(table_key))]
    cur = df.select(*[F.col(f"`{k}`").alias(n) for k, n in zip(table_key, ids)], F.col(f"`{steps[0]}`").alias("__v"))
    for j, name in enumerate(steps[1:]):
        if isinstance(cur.schema["__v"].dataType, ArrayType):
            cur = cur.select(*ids, F.posexplode("__v").alias(f"__pos{j}", "__v"))
            ids.append(f"__pos{j}")
        cur = cur.select(*ids, F.col("__v").getField(name).alias("__v"))
    names = [f"__el{i}" for i in range(len(key))]
    elements = cur.select(*ids, F.explode("__v").alias("__e")).select(
        *ids, *[F.col("__e").getField(k).alias(n) for k, n in zip(key, names)])

    def the_row(r) -> str:
        values = ", ".join(f"{k}={_show_value(r[f'__key{i}'])}" for i, k in enumerate(table_key))
        return f"the row with {values if len(table_key) == 1 else '(' + values + ')'}"

    null = reduce(lambda a, b: a | b, [F.col(n).isNull() for n in names])
    bad = elements.filter(null).limit(1).collect()
    if bad:
        k = next(k for k, n in zip(key, names) if bad[0][n] is None)
        raise DataError(f"{origin}: element key column {k} of {path} is null in {the_row(bad[0])}")
    dup = elements.groupBy(*ids, *names).count().filter(F.col("count") > 1).limit(1).collect()
    if dup:
        values = ", ".join(f"{k}={_show_value(dup[0][n])}" for k, n in zip(key, names))
        shown = values if len(key) == 1 else f"({values})"
        raise DataError(f"{origin}: duplicate element key {shown} in {path} in {the_row(dup[0])}")
