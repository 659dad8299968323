"""A view's program (:class:`idivm.program.Program`) from its text to its folder and back.

:func:`compile_program` parses, plans and infers the provenance of a ``CREATE VIEW`` text
(:func:`plan_view`), generates its Δ-script (:func:`generate_script`) and selects its global
provenance indexes; ``define`` stores the result beside the view
(``views/<name>.program/program.json``, :func:`write_program`), and every run loads it
(:func:`load_program`): a program stored by another version of idivm is compiled again from
the view's text, once, and stored again.  Nothing here starts Spark.

A view reads base tables and views defined before it (:func:`input_relations`): a view it
reads is an input relation like a base table, with the rows of its Delta table, keyed by its
hidden ID columns.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from idivm import types as T
from idivm.catalog import BaseTables, Catalog, ViewEntry
from idivm.errors import CatalogError
from idivm.algebra.builder import VALUE_COLUMN
from idivm.provenance.ids import HIDDEN
from idivm.storage import delta

if TYPE_CHECKING:
    from idivm.program import Program

#: the directory beside a view's table holding its compiled program (:mod:`idivm.program`)
PROGRAM_DIR = "program"
PROGRAM_FILE = "program.json"


def program_folder(rel: str) -> str:
    """The folder of the program of the view stored at ``rel`` (relative to the warehouse)."""
    return f"{rel}.{PROGRAM_DIR}"


#: programs loaded by this process, by their file's path and identity (a program stored again is
#: a new file: ``write_program`` replaces it) and the format read, so that runs in one process
#: load each once
_LOADED: dict[tuple, "Program"] = {}
_LOADED_MAX = 256


def load_program(catalog: Catalog, entry: ViewEntry) -> "Program":
    """The compiled program of a view: the one ``define`` stored, or, for a view defined by
    another version of idivm, compiled again from its text and stored for the next runs."""
    from idivm import program as programs

    folder = catalog.root / program_folder(entry.path)
    file = folder / PROGRAM_FILE
    try:
        found = os.stat(file)
        key = (str(file.resolve()), found.st_ino, found.st_mtime_ns, found.st_size, programs.FORMAT)
        if key in _LOADED:
            return _LOADED[key]
        stored = programs.from_json(json.loads(file.read_text(encoding="utf-8")))
    except FileNotFoundError:
        stored = None
    except ValueError as e:
        raise CatalogError(f"the stored program of view {entry.name} is unreadable ({e}); define it again")
    if stored is not None:
        delta.remember(_LOADED, key, stored, _LOADED_MAX)
        return stored
    program = compile_program(catalog, entry.text, f"<view {entry.name}>", entry.extra.get("strategy", "recompute"),
                              strict=False, caches=bool(entry.extra.get("caches")), maps=bool(entry.extra.get("maps")))
    write_program(folder, program)
    return program


def write_program(folder: Path, program: "Program") -> None:
    """Store ``program`` in ``folder`` (replacing one stored there, atomically)."""
    from idivm import program as programs

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{PROGRAM_FILE}.{uuid.uuid4().hex[:12]}"
    temporary.write_text(json.dumps(programs.to_json(program), separators=(",", ":")), encoding="utf-8")
    os.replace(temporary, folder / PROGRAM_FILE)


def compile_program(catalog: Catalog, text: str, filename: str | None, strategy: str, strict: bool,
                    caches: bool = True, maps: bool = True) -> "Program":
    """Parse, plan and generate the maintenance of a view of ``strategy`` (:class:`Program`).
    ``strict``: a view ``id`` or ``tuple`` cannot maintain is an error (else it is recomputed);
    ``caches``: whether the script may use intermediate caches; ``maps``: whether an ``auto``
    view that ``id`` cannot maintain may be maintained by maps (one defined without them is
    recomputed)."""
    from idivm.errors import UnsupportedError
    from idivm.program import Program
    from idivm.provenance.indexes import select_indexes

    view, prov = plan_view(catalog, text, filename)
    script, note = None, ""
    if strategy in ("id", "tuple", "auto"):
        script, note = generate_script(catalog, view, prov, text, filename, "id" if strategy == "auto" else strategy,
                                       strict=strict and strategy != "auto", caches=caches)
    selection = select_indexes(view.plan, prov, base_signatures(catalog, view)) \
        if script is not None and script.strategy == "id" else None
    mp = None
    if strategy == "maps":
        try:
            mp = plan_maps(catalog, prov, text, filename)
        except UnsupportedError as whole:
            # the view reads more than one GROUP BY: maps caches of its GROUP BYs, the rest by ID
            script = maps_caches_script(catalog, view, prov, text, filename, whole)
            note = "the rest of the view by ID over maps caches of its GROUP BYs"
            selection = select_indexes(view.plan, prov, base_signatures(catalog, view))
    if strategy == "auto" and (script is None or not script.id_columns) and maps and prov.unknown is None:
        # what id cannot maintain (or only by recomputing: a view of one tuple, without IDs),
        # maps may: auto then chooses between them and recomputation
        why = note.removeprefix("recompute: ") if script is None else "a view without IDs (a single tuple)"
        try:
            mp, script, note = plan_maps(catalog, prov, text, filename), None, f"maps ({why})"
        except UnsupportedError as e:
            note = f"{note or 'recompute: ' + why}; {e.message}"
    elif strategy == "auto" and script is not None and maps and prov.unknown is None and groups(view.plan):
        # an aggregate view id maintains: auto may also try maps, built by the run that first
        # does (a failure to plan them only leaves it without)
        from idivm.agca.gmr import AgcaError

        try:
            mp = plan_maps(catalog, prov, text, filename)
        except (UnsupportedError, AgcaError):
            mp = None
    return Program(view.name, view.type, view.plan, prov, script, note, selection, mp, view.absent_columns,
                   view.warnings)


def groups(plan) -> bool:
    """Whether a view plan groups (has a GROUP BY or aggregates)."""
    from idivm.algebra import operators as O

    return any(isinstance(op, O.GroupBy) for op in O.walk(plan))


def maps_caches_script(catalog: Catalog, view, prov, text: str, filename: str | None, whole):
    """The ID-based Δ-script of a view whose GROUP BYs are maintained by maps caches
    (:mod:`idivm.generator.maps_caches`); ``whole``: why the maps cannot maintain the whole
    view, the error when no GROUP BY gets a maps cache either."""
    from idivm.errors import IdivmError, UnsupportedError
    from idivm.exec.maps import plan_maps as plan
    from idivm.generator.caches import generate_view

    if prov.unknown is not None:
        raise prov.unknown.with_source(text, filename)
    base = input_relations(catalog)
    columns = {t: [n for n, _ in ty.fields] for t, ty in base.types.items()}
    try:
        script = generate_view(view.name, view.plan, prov, base.keys, base.types, base.element_keys, "id",
                               caches=True, maps_of=lambda cache_plan: plan(cache_plan, columns, static_tables(catalog)))
    except IdivmError as e:
        raise UnsupportedError(f"the maps strategy cannot maintain this view: {e.message}").with_source(text, filename)
    if script is None:  # no GROUP BY of it has maps either
        raise whole
    return script


def plan_maps(catalog: Catalog, prov, text: str, filename: str | None):
    """The higher-order delta maps of the view (:func:`idivm.exec.maps.plan_maps`); a view
    they cannot maintain is an error carrying the view text."""
    from idivm.errors import UnsupportedError
    from idivm.exec.maps import Untranslatable, plan_maps as plan

    if prov.unknown is not None:
        raise prov.unknown.with_source(text, filename)
    columns = {t: [n for n, _ in ty.fields] for t, ty in input_relations(catalog).types.items()}
    try:
        return plan(prov.plan, columns, static_tables(catalog))
    except Untranslatable as e:
        raise UnsupportedError(f"the maps strategy cannot maintain this view: {e}").with_source(text, filename)


def static_tables(catalog: Catalog) -> frozenset[str]:
    """The base tables declared never to change (``create_table(static=True)``)."""
    return frozenset(n for n, t in catalog.tables.items() if t.static)


def plan_view(catalog: Catalog, text: str, filename: str | None):
    """Parse, plan and infer provenance: (view plan, provenance); errors carry the view text."""
    from idivm.algebra.builder import build_view
    from idivm.errors import IdivmError, UnknownIdsError
    from idivm.provenance.ids import infer_provenance, without_ids
    from idivm.sqlpp import parse_view

    base = input_relations(catalog)
    try:
        view = build_view(parse_view(text, filename), base.types)
        check_views_read(catalog, view.plan)
        try:
            return view, infer_provenance(view.plan, base.keys, base.types, base.element_keys)
        except UnknownIdsError as e:  # recomputed (auto, recompute); id and tuple refuse it
            return view, without_ids(view.plan, _about_views_read(catalog, view.plan, e).with_source(text, filename))
    except IdivmError as e:
        raise e.with_source(text, filename)


def generate_script(catalog: Catalog, view, prov, text: str, filename: str | None,
                    strategy: str, strict: bool, caches: bool = True):
    """(Δ-script, "") or, when the view has constructs without rules and not ``strict``,
    (None, the reason); ``strict`` raises the error (with the view text) instead.
    ``caches``: whether the script may use intermediate caches (a view defined without
    them is maintained without them)."""
    from idivm.errors import UnsupportedError
    from idivm.generator.caches import generate_view

    if prov.unknown is not None:
        if strict:
            raise prov.unknown
        return None, f"recompute: {prov.unknown.message}"
    base = input_relations(catalog)
    try:
        return generate_view(view.name, view.plan, prov, base.keys, base.types, base.element_keys,
                             strategy, caches=caches), ""
    except UnsupportedError as e:
        if strict:
            raise e.with_source(text, filename)
        return None, f"recompute: {e.message}"


def base_signatures(catalog: Catalog, view):
    """The view's base-table i-diff signatures (§2.5, §2.14.1)."""
    from idivm.diffs.base_signatures import generate_base_signatures

    base = input_relations(catalog)
    return generate_base_signatures(view.plan, base.keys, base.types, base.element_keys)


def stored_indexes(program: "Program", path: Path) -> list:
    """The view's global provenance indexes that are stored as tables (§2.15): those the
    statements of its script read, laid out over the schema of the view stored at ``path``."""
    from idivm.exec import indexes

    if program.indexes is None or program.script is None:
        return []
    return indexes.resolve(program.indexes, delta.schema(path), program.prov.view_ids, program.script.statements)


def declared_records(schema: T.TupleType, declared: dict[str, str]) -> T.TupleType:
    """``schema`` with the records its declared schema (as the catalog keeps it) leaves open
    marked open (a view reads a field they do not declare as MISSING) and the others closed
    (reading such a field is an error)."""
    from idivm.declared_schema import parse_schema

    parsed = parse_schema(declared["text"], language=declared["language"])
    return T.declared(schema, parsed.open_records)  # type: ignore[return-value]


def input_relations(catalog: Catalog) -> BaseTables:
    """What planning needs to know of the relations a view may read: the base tables (their
    types, primary keys and declared element keys) and the views of the catalog.

    A view is read as the rows of its Delta table: its user-visible columns and its hidden ID
    columns (``__idivm_id_*``), which are its key; the hidden columns keep their names.  The
    elements of its nested collections of tuples carry their provenance as a hidden field
    (``__idivm_prov``), a tuple, which is not (yet) usable as an element key: they have none,
    so a view that needs their IDs (one that returns a row per element) is recomputed, and
    ``id`` or ``tuple`` refuse it (:func:`_about_views_read`)."""
    base = catalog.base_tables()
    types, keys, element_keys = dict(base.types), dict(base.keys), dict(base.element_keys)
    for name, table in catalog.tables.items():  # the open records of declared schemas
        if table.declared_schema is not None:
            types[name] = declared_records(table.schema, table.declared_schema)
    for name, entry in catalog.views.items():
        stored = T.from_arrow(delta.schema(catalog.path_of(entry)))
        relation = _with_hidden(entry.schema, stored)
        assert isinstance(relation, T.TupleType)
        types[name] = relation
        keys[name] = tuple(i["column"] for i in entry.extra.get("ids") or ())
        element_keys[name] = {}  # nested elements of views have no key to read them by (see above)
    return BaseTables(types, keys, element_keys)


def _views_read(catalog: Catalog, plan) -> list:
    """(scan, view entry) of each view ``plan`` reads."""
    from idivm.algebra import operators as O
    from idivm.algebra.expressions import TableRef

    return [(op, catalog.views[op.source.name]) for op in O.walk(plan)
            if isinstance(op, O.ScanCollection) and isinstance(op.source, TableRef)
            and op.source.name in catalog.views]


def _about_views_read(catalog: Catalog, plan, error):
    """``error`` (IDs that cannot be inferred), saying which views read have nested collections
    of tuples, whose elements have no key another view can use yet."""
    from idivm.errors import UnknownIdsError

    nested = sorted({entry.name for _, entry in _views_read(catalog, plan) if _has_tuple_collections(entry.schema)})
    if not nested:
        return error
    return UnknownIdsError(f"{error.message} (the elements of the nested collections of view "
                           f"{', '.join(nested)} have no key that a view reading it can use yet)", error.span)


def check_views_read(catalog: Catalog, plan) -> None:
    """An :class:`UnsupportedError` (at the name in the view's text) for a view read by
    ``plan`` that cannot be an input relation: one without IDs, whose rows have no key."""
    from idivm.errors import UnsupportedError

    from idivm.algebra.builder import scalar_type

    for op, entry in _views_read(catalog, plan):
        if scalar_type(entry.schema) is not None:
            raise UnsupportedError(f"view {entry.name} cannot be read by another view: it is a view of values, "
                                   "not of tuples (SELECT VALUE of a tuple, or SELECT ... AS name, can be)",
                                   op.source.span)
        if not entry.extra.get("ids"):
            why = entry.extra.get("strategy_note") or "it has a single row or its IDs are unknown"
            raise UnsupportedError(f"view {entry.name} cannot be read by another view: its rows have no IDs "
                                   f"to key them by ({why})", op.source.span)


def visible_type(t: T.Type, top: bool = True) -> T.Type:
    """``t`` without hidden columns and fields (those of the views a view reads that it copies):
    the user-visible type of a view's rows (a view of values keeps its one column
    ``VALUE_COLUMN``, which holds them)."""
    if isinstance(t, T.TupleType):
        return T.TupleType(tuple((n, visible_type(ft, False)) for n, ft in t.fields
                                 if not n.startswith(HIDDEN) or (top and n == VALUE_COLUMN)))
    if isinstance(t, T.CollectionType):
        return T.CollectionType(visible_type(t.element, False), t.ordered)
    return t


def _with_hidden(visible: T.Type, stored: T.Type) -> T.Type:
    """The user-visible type ``visible`` with the hidden columns and fields of the stored type
    ``stored`` (the type of a view's Delta table, which knows no arrays from bags) added."""
    if isinstance(visible, T.TupleType) and isinstance(stored, T.TupleType):
        fields = [(n, _with_hidden(t, stored.field(n) or t)) for n, t in visible.fields]
        fields += [(n, t) for n, t in stored.fields if n.startswith(HIDDEN) and visible.field(n) is None]
        return T.TupleType(tuple(fields))
    if isinstance(visible, T.CollectionType) and isinstance(stored, T.CollectionType):
        return T.CollectionType(_with_hidden(visible.element, stored.element), visible.ordered)
    return visible


def _has_tuple_collections(t: T.Type) -> bool:
    """Whether type ``t`` holds a collection of tuples, at any depth."""
    if isinstance(t, T.TupleType):
        return any(_has_tuple_collections(ft) for _, ft in t.fields)
    if isinstance(t, T.CollectionType):
        return isinstance(t.element, T.TupleType) or _has_tuple_collections(t.element)
    return False
