"""The warehouse directory and its catalog.

Layout of a warehouse directory ``<wh>``::

    <wh>/catalog.json        the catalog: base tables, views (indented JSON)
    <wh>/tables/<dir>/       one Delta table per base table
    <wh>/views/<dir>/        one Delta table per view (``<dir>.<generation>`` once redefined), with
                             its program, caches, maps and indexes beside it (``<dir>.program``, ...)
    <wh>/quarantine/<dir>/   the records ingest rejected, per base table (the table's <dir>)

``catalog.json`` is rewritten atomically (temporary file in the same
directory, fsync, ``os.replace``), so a reader sees the old catalog or the
new one, never a mix.  Entry paths are relative to the warehouse, so a
warehouse can be moved or copied as a whole.

Tables and views share one namespace: a view may not take a table's name.
A name is any text of at most :data:`MAX_NAME` characters (spaces, quotes, dots and non-ASCII
letters included; SQL++ backquotes such names) except: empty or blank, leading or trailing
white space, control characters, ``/`` or ``\\``, ``.`` and ``..``, and the prefix
:data:`RESERVED_PREFIX` that idivm keeps for its own columns (:func:`check_name`).  A name never
becomes a path as it is: the directory ``<dir>`` of a name that is a plain identifier is the
name itself, any other's is a slug of its letters and digits and a hash of the whole name
(:func:`directory_name`), so no name reaches outside its warehouse directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from idivm.errors import CatalogError, ConcurrentWriteError
from idivm.types import TupleType, from_json

CATALOG_FILE = "catalog.json"
TABLES_DIR = "tables"
VIEWS_DIR = "views"
QUARANTINE_DIR = "quarantine"
FORMAT_VERSION = 1

#: the longest table, view or column name, in characters
MAX_NAME = 200
#: the prefix of the names idivm gives its own columns and tables (hidden ID columns
#: ``__idivm_…``, the working columns of its Spark plans ``__…``, the ``__delete`` lines of
#: the ``rows`` ingest format): no table, view or column name may start with it
RESERVED_PREFIX = "__"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def name_problem(name: object, *, path_safe: bool = True) -> str | None:
    """Why ``name`` cannot name a table, a view (``path_safe``) or a column, or None if it can."""
    if not isinstance(name, str) or not name.strip():
        return "a name cannot be empty"
    if name != name.strip():
        return "a name cannot start or end with white space"
    if len(name) > MAX_NAME:
        return f"a name has at most {MAX_NAME} characters, this one {len(name)}"
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
        return "a name cannot contain control characters (tab, newline, ...)"
    if name.startswith(RESERVED_PREFIX):
        return f"names starting with {RESERVED_PREFIX!r} are reserved for idivm's own columns and tables"
    if path_safe and ("/" in name or "\\" in name or name in (".", "..")):
        return "a name cannot contain '/' or '\\' or be '.' or '..'"
    return None


def check_name(name: str, what: str = "name") -> str:
    """Return ``name`` if it can name a table or a view (:func:`name_problem`), else raise
    :class:`CatalogError`."""
    problem = name_problem(name)
    if problem is not None:
        shown = repr(name) if not isinstance(name, str) or len(name) <= 60 else repr(name[:57]) + "..."
        raise CatalogError(f"invalid {what} {shown}: {problem}")
    return name


def directory_name(name: str) -> str:
    """The directory of table or view ``name`` under ``tables/`` or ``views/``: the name itself
    when it is an identifier of at most 64 characters (as warehouses have always had), else its ASCII letters, digits,
    ``_`` and ``-`` (at most 40), ``-`` and 12 hex digits of the SHA-256 of the whole name, so
    that two names never share a directory and no name escapes its parent."""
    check_name(name)
    if _IDENTIFIER.match(name) and len(name) <= 64:
        return name
    ascii_text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", ascii_text).strip("_-")[:40]
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]
    return f"{slug}-{digest}" if slug else digest


def now_utc() -> str:
    """The current time as an ISO-8601 UTC timestamp with seconds, e.g. ``2026-11-22T04:40:00Z``."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(slots=True)
class TableEntry:
    """A base table: its primary key, schema and Delta table directory (relative to the warehouse).

    ``element_keys`` maps the path of a nested collection of tuples (attribute
    names joined by ``.``, e.g. ``hours`` or ``address.phones``; a step into a
    collection goes to its elements' attributes) to the columns of its
    elements' key, unique within each collection value.

    ``declared_schema`` is the schema the table was declared with, as written
    (``{"language": "ddl" | "json-schema", "text": ...}``; see
    :mod:`idivm.declared_schema`), or None for a table whose types were inferred from data.

    ``static``: the table was declared never to change (ingest refuses it), so the views over
    it need no maps for its changes (DBToaster §5.1, static tables).
    """

    name: str
    key: list[str]
    schema: TupleType
    path: str
    created: str = field(default_factory=now_utc)
    element_keys: dict[str, list[str]] = field(default_factory=dict)
    declared_schema: dict[str, str] | None = None
    static: bool = False

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "key": list(self.key),
               "element_keys": {p: list(k) for p, k in self.element_keys.items()},
               "schema": self.schema.to_json(), "path": self.path, "created": self.created}
        if self.declared_schema is not None:
            out["declared_schema"] = dict(self.declared_schema)
        if self.static:
            out["static"] = True
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "TableEntry":
        element_keys = {str(p): [str(c) for c in k] for p, k in (obj.get("element_keys") or {}).items()}
        declared = obj.get("declared_schema")
        if declared is not None and not (isinstance(declared, dict) and {"language", "text"} <= set(declared)):
            raise ValueError(f"declared_schema of table {obj['name']!r} needs 'language' and 'text'")
        return cls(name=obj["name"], key=list(obj["key"]), schema=_tuple_type(obj["schema"]),
                   path=obj["path"], created=obj.get("created", ""), element_keys=element_keys,
                   declared_schema={"language": str(declared["language"]), "text": str(declared["text"])}
                   if declared is not None else None, static=obj.get("static") is True)


@dataclass(slots=True)
class ViewEntry:
    """A view: its SQL++ text, schema (user-visible), Delta table directory, and ``extra``:
    an open JSON object for what later stages store (plans, Δ-scripts, watermarks, ...)."""

    name: str
    text: str
    schema: TupleType
    path: str
    created: str = field(default_factory=now_utc)
    extra: dict[str, Any] = field(default_factory=dict)

    def inputs(self) -> tuple[str, ...]:
        """The names of the tables (and views) the view reads, as recorded when it was defined
        (for a view defined before they were recorded: those its watermark names)."""
        recorded = self.extra.get("inputs")
        return tuple(recorded if recorded is not None else sorted(self.extra.get("watermark") or {}))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "text": self.text, "schema": self.schema.to_json(),
                "path": self.path, "created": self.created, "extra": self.extra}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "ViewEntry":
        return cls(name=obj["name"], text=obj["text"], schema=_tuple_type(obj["schema"]),
                   path=obj["path"], created=obj.get("created", ""), extra=dict(obj.get("extra") or {}))


def _tuple_type(obj: Any) -> TupleType:
    t = from_json(obj)
    if not isinstance(t, TupleType):
        raise ValueError(f"a schema must be a tuple type, got {t}")
    return t


@dataclass(frozen=True)
class BaseTables:
    """What planning needs to know of the base tables: types, primary keys and the declared
    element keys of nested collections (table -> collection path -> key columns)."""

    types: dict[str, TupleType]
    keys: dict[str, tuple[str, ...]]
    element_keys: dict[str, dict[str, tuple[str, ...]]]


class Catalog:
    """The catalog of one warehouse directory.

    ``Catalog.load(root)`` reads ``<root>/catalog.json`` (an empty catalog if
    the file does not exist yet; nothing is created until :meth:`save`).
    Changes are made in memory (``add_*``, ``update_*``, ``drop_*``) and
    written by :meth:`save`.  Lookups of unknown names raise
    :class:`CatalogError` naming the known ones.
    """

    def __init__(self, root: str | os.PathLike, tables: dict[str, TableEntry] | None = None,
                 views: dict[str, ViewEntry] | None = None):
        self.root = Path(root)
        self.tables: dict[str, TableEntry] = dict(tables or {})
        self.views: dict[str, ViewEntry] = dict(views or {})

    # --- files -----------------------------------------------------------------------------------

    @property
    def file(self) -> Path:
        return self.root / CATALOG_FILE

    @classmethod
    def load(cls, root: str | os.PathLike) -> "Catalog":
        root = Path(root)
        file = root / CATALOG_FILE
        if root.exists() and not root.is_dir():
            raise CatalogError(f"warehouse {root} is not a directory")
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(root)
        except OSError as e:
            raise CatalogError(f"cannot read {file}: {e.strerror or e}") from e
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise CatalogError(f"{file}:{e.lineno}: corrupt catalog: {e.msg}") from e
        return cls.from_json(root, obj, file)

    @classmethod
    def from_json(cls, root: str | os.PathLike, obj: Any, file: Any = CATALOG_FILE) -> "Catalog":
        if not isinstance(obj, dict) or not isinstance(obj.get("tables", {}), dict):
            raise CatalogError(f"{file}: corrupt catalog: expected an object with 'tables' and 'views'")
        version = obj.get("format", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise CatalogError(f"{file}: catalog format {version} is not supported (expected {FORMAT_VERSION})")
        try:
            tables = {n: TableEntry.from_json(e) for n, e in obj.get("tables", {}).items()}
            views = {n: ViewEntry.from_json(e) for n, e in obj.get("views", {}).items()}
        except (KeyError, TypeError, ValueError) as e:
            raise CatalogError(f"{file}: corrupt catalog entry: {e}") from e
        return cls(root, tables, views)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT_VERSION,
                "tables": {n: e.to_json() for n, e in self.tables.items()},
                "views": {n: e.to_json() for n, e in self.views.items()}}

    def save(self) -> None:
        """Write ``catalog.json`` atomically (creating the warehouse directory if needed)."""
        self.root.mkdir(parents=True, exist_ok=True)
        text = dumps(self.to_json()) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=f".{CATALOG_FILE}.", suffix=".tmp", dir=self.root)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(self.root)

    # --- names and paths -------------------------------------------------------------------------

    def names(self) -> list[str]:
        """All table and view names."""
        return [*self.tables, *self.views]

    def has(self, name: str) -> bool:
        return name in self.tables or name in self.views

    def path_of(self, entry: TableEntry | ViewEntry) -> Path:
        """The absolute directory of an entry's Delta table."""
        return self.root / entry.path

    def new_table_path(self, name: str) -> str:
        check_name(name, "table name")
        return f"{TABLES_DIR}/{directory_name(name)}"

    def new_view_path(self, name: str, generation: str | None = None) -> str:
        """Where view ``name`` is stored: ``views/<dir>`` (:func:`directory_name`), or for a
        definition that replaces one, ``views/<dir>.<generation>`` (beside the one it replaces)."""
        check_name(name, "view name")
        d = directory_name(name)
        return f"{VIEWS_DIR}/{d}" if generation is None else f"{VIEWS_DIR}/{d}.{generation}"

    def view_files(self, name: str) -> list[Path]:
        """Every directory of view ``name`` under ``views/``, of any of its definitions: its
        table ``<path>`` and the folders beside it (``<path>.program``, ``.caches``, ``.maps``,
        ``.indexes``), and the staging directories (``.<dir>...``) of writes a crash
        interrupted.  (A view's path is ``views/<dir>`` or ``views/<dir>.<generation>``, and
        directory names have no dots, so these are the names ``<dir>``, ``<dir>.*`` and ``.<dir>.*``.)"""
        d = directory_name(name)
        try:
            found = list((self.root / VIEWS_DIR).iterdir())
        except FileNotFoundError:
            return []
        return sorted(p for p in found if p.name == d or p.name.startswith((f"{d}.", f".{d}.")))

    def quarantine_path(self, entry: TableEntry) -> Path:
        """The absolute directory of the quarantine of a base table: ``quarantine/`` and the
        last part of the table's own directory."""
        return self.root / QUARANTINE_DIR / Path(entry.path).name

    # --- lookups ---------------------------------------------------------------------------------

    def table(self, name: str) -> TableEntry:
        try:
            return self.tables[name]
        except KeyError:
            hint = " (it is a view)" if name in self.views else ""
            raise CatalogError(f"unknown table {name!r}{hint}; {_known('tables', self.tables)}") from None

    def entry(self, name: str) -> TableEntry | ViewEntry:
        """The table or view ``name``."""
        if name in self.views:
            return self.views[name]
        if name in self.tables:
            return self.tables[name]
        raise CatalogError(f"no table or view named {name!r}")

    def view(self, name: str) -> ViewEntry:
        try:
            return self.views[name]
        except KeyError:
            hint = " (it is a table)" if name in self.tables else ""
            raise CatalogError(f"unknown view {name!r}{hint}; {_known('views', self.views)}") from None

    # --- changes ---------------------------------------------------------------------------------

    def add_table(self, entry: TableEntry) -> None:
        self.check_new_name(entry.name, "table")
        if not entry.key:
            raise CatalogError(f"table {entry.name!r} needs a key")
        self.tables[entry.name] = entry

    def add_view(self, entry: ViewEntry) -> None:
        self.check_new_name(entry.name, "view")
        self.views[entry.name] = entry

    def update_table(self, entry: TableEntry) -> None:
        self.table(entry.name)
        self.tables[entry.name] = entry

    def update_view(self, entry: ViewEntry) -> None:
        self.view(entry.name)
        self.views[entry.name] = entry

    def drop_table(self, name: str) -> TableEntry:
        self.table(name)
        return self.tables.pop(name)

    def replace_view(self, entry: ViewEntry, replacing: str) -> None:
        """Make ``entry`` the definition of its view, in place of the one stored at
        ``replacing``: if another writer has redefined the view since, it is a
        :class:`ConcurrentWriteError` and nothing changes."""
        current = self.view(entry.name)
        if current.path != replacing:
            raise ConcurrentWriteError(f"view {entry.name!r} was redefined by another writer while this definition "
                                       "was materialized; nothing was changed")
        self.views[entry.name] = entry

    def drop_view(self, name: str) -> ViewEntry:
        self.view(name)
        return self.views.pop(name)

    def readers(self, name: str) -> list[str]:
        """The views that read table or view ``name`` themselves (by their recorded
        :meth:`ViewEntry.inputs`), sorted."""
        return sorted(v for v, e in self.views.items() if name in e.inputs())

    def dependents(self, name: str) -> list[str]:
        """The views that read table or view ``name``, themselves or through other views, in an
        order they can be dropped in: each before the views it reads."""
        out: list[str] = []

        def visit(n: str) -> None:
            for reader in self.readers(n):
                if reader not in out and reader != name:
                    visit(reader)
                    if reader not in out:
                        out.append(reader)

        visit(name)
        return out

    def input_path(self, name: str) -> Path:
        """The absolute directory of the Delta table of input relation ``name`` of a view: a
        base table, or a view that another view reads."""
        if name in self.views:
            return self.path_of(self.views[name])
        return self.path_of(self.table(name))

    def view_inputs(self, name: str) -> list[str]:
        """The base tables and views view ``name`` reads, as its definition recorded them."""
        return list(self.view(name).inputs())

    def upstream_views(self, name: str) -> list[str]:
        """The views view ``name`` reads (each an input relation of it)."""
        return [n for n in self.view_inputs(name) if n in self.views]

    def dependency_order(self, names: Sequence[str] | None = None) -> list[str]:
        """Views ``names`` (default: all) in an order where every view comes after the views it
        reads (by name where the order is free): what ``maintain --all`` runs.  A view only
        reads views defined before it, so there is no cycle; a catalog edited into one is a
        :class:`CatalogError` naming the views on it."""
        wanted = sorted(self.views if names is None else names)
        order: list[str] = []
        state: dict[str, str] = {}  # "visiting" while on the current path, "done" after

        def visit(name: str, path: tuple[str, ...]) -> None:
            if state.get(name) == "done":
                return
            if state.get(name) == "visiting":
                cycle = " -> ".join(path[path.index(name):] + (name,))
                raise CatalogError(f"views read each other in a cycle ({cycle}); define them again")
            state[name] = "visiting"
            for upstream in sorted(self.upstream_views(name)):
                visit(upstream, path + (name,))
            state[name] = "done"
            order.append(name)

        for name in wanted:
            visit(name, ())
        chosen = set(wanted)
        return [n for n in order if n in chosen]

    def base_tables(self) -> BaseTables:
        return BaseTables(
            types={n: e.schema for n, e in self.tables.items()},
            keys={n: tuple(e.key) for n, e in self.tables.items()},
            element_keys={n: {p: tuple(k) for p, k in e.element_keys.items()} for n, e in self.tables.items()})

    def check_new_name(self, name: str, what: str = "table") -> None:
        """Raise :class:`CatalogError` unless ``name`` is a valid name (:func:`check_name`) that no
        table or view has."""
        check_name(name, f"{what} name")
        if name in self.tables:
            raise CatalogError(f"a table named {name!r} already exists")
        if name in self.views:
            raise CatalogError(f"a view named {name!r} already exists")


def dumps(value: Any, indent: int = 0, width: int = 100) -> str:
    """Indented JSON that keeps a value on one line when it fits in ``width`` columns."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(flat) + indent <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 2, width)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 2, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def _known(what: str, entries: dict[str, Any]) -> str:
    return f"known {what}: {', '.join(sorted(entries))}" if entries else f"there are no {what}"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
