"""i-diffs of base-table rows (JSON Lines) → :class:`~idivm.ingest.records.ChangeSet`.

Every line is an element of the table's bag diff in the package's i-diff JSON encoding
(``idivm/diffs/model/idiff.schema.json``, thesis §2.12.1): an i-diff whose provenance is the
row's key, or an array of them (applied in order)::

    {"provenance": {"business_id": "b1"}, "type": "insert", "post": {<row>}}
    {"provenance": {"business_id": "b1"}, "type": "delete"}
    {"provenance": {"business_id": "b1"}, "type": "update", "post": {<row>}}
    {"provenance": {"business_id": "b1"}, "type": "update", "diff": {
        "name":  {"type": "update", "post": "Cafe Nord"},
        "hours": {"type": "update", "diff": [
            {"provenance": {"day": "Mon"}, "type": "update", "diff": {"open": {"type": "update", "post": 8}}},
            {"provenance": {"day": "Sun"}, "type": "insert", "post": {"day": "Sun", "open": 11}},
            {"provenance": {"day": "Tue"}, "type": "delete"}]}}}

An insert, or an update with a ``post`` and no ``diff``, upserts the whole row ``post`` (its key
columns may be left out; given, they must be the provenance's); a delete deletes the key (its
``pre`` is not used).  An update with a ``diff`` (a tuple diff: attribute → i-diff) is an update
by path of the row as it is when the batch is read, after the batch's earlier changes: an
attribute's ``update`` with a ``post`` or an ``insert`` sets it, a ``delete`` makes it null, an
``update`` with a tuple diff changes fields of a struct, and one with a bag diff changes the
elements of a collection of tuples whose element key is declared (``--element-key``): each
element i-diff's provenance is that element key, an ``insert`` adds an element (the key must be
free), a ``delete`` removes one and an ``update`` changes one (by ``post`` or, recursively, by
``diff``).  Key columns and element key attributes never change by path (delete and insert
instead).

A bad record (``file:line: problem``): malformed JSON, a value the schema rejects (the JSON path
and the schema's reason), a line without provenance, a provenance that is not the key, a
missing or null key, a value of the wrong type, an attribute the row or element does not have;
when the patches are applied: a row or element that is not there, an element key that is taken.
The patches are resolved by :func:`resolve_patches`, which reads the rows they change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Union

import pyarrow as pa

from idivm.diffs.model.codec import validate_idiff_json
from idivm.errors import DataError
from idivm.ingest.records import (
    DELETE,
    PATCH,
    UPSERT,
    Change,
    ChangeSet,
    RecordError,
    Rejected,
    RowChecker,
    SchemaDrift,
    json_kind,
    read_records,
)

if TYPE_CHECKING:
    from idivm.declared_schema import DeclaredSchema


@dataclass(frozen=True, slots=True)
class SetTo:
    """The attribute (or element) takes ``value`` (converted to its type; None: null)."""

    value: Any


@dataclass(frozen=True, slots=True)
class EditFields:
    """A tuple diff: each named attribute changes by its edit."""

    fields: tuple[tuple[str, "Edit"], ...]


@dataclass(frozen=True, slots=True)
class ElementEdit:
    """An element i-diff of a collection of tuples: the element with ``key`` (its element key's
    columns and values) is inserted (``edit`` the :class:`SetTo` of it), deleted, or updated."""

    type: str
    key: tuple[tuple[str, Any], ...]
    edit: Union[SetTo, EditFields, None]

    def __str__(self) -> str:
        return "#(" + ", ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False)}" for k, v in self.key) + ")"


@dataclass(frozen=True, slots=True)
class EditElements:
    """A bag diff of the collection of tuples at ``path`` (attribute names joined by ``.``, as
    element keys are declared)."""

    path: str
    elements: tuple[ElementEdit, ...]


Edit = Union[SetTo, EditFields, EditElements]


class _Bad(Exception):
    """A problem of a record found while reading its i-diff (the message names its JSON path)."""


def read_idiff(text: str, source: str, schema: pa.Schema, key: tuple[str, ...], strict: bool = False,
               declared: "DeclaredSchema | None" = None) -> ChangeSet:
    """The changes of the row i-diffs of file ``source`` (its ``text``), checked against the
    package's i-diff schema, the table's ``schema`` and ``key``, and its ``declared`` schema if
    it has one (:func:`~idivm.ingest.records.read_records`); updates by path are :data:`PATCH`
    changes."""
    return read_records(text, source, schema, key, _record, strict=strict, declared=declared)


def _record(value: Any, line: int, checker: RowChecker) -> list[Change]:
    try:
        validate_idiff_json(value)
    except DataError as e:
        raise checker.error(line, f"not an i-diff: {e.message}") from None
    if isinstance(value, list):
        return [c for i, element in enumerate(value) for c in _row_change(element, f"$[{i}]", line, checker)]
    if "name" in value:
        raise checker.error(line, "a line holds the i-diff of a row (with its key as provenance) or an array "
                                  "of them, not a named i-diff")
    if "provenance" not in value:
        raise checker.error(line, "$: the i-diff of a row needs the row's key as its provenance, e.g. "
                                  f'{{"provenance": {{"{checker.key[0]}": ...}}, ...}}')
    return _row_change(value, "$", line, checker)


def _row_change(node: Mapping[str, Any], at: str, line: int, checker: RowChecker) -> list[Change]:
    provenance = node["provenance"]
    others = [k for k in provenance if k not in checker.key]
    if others:
        raise checker.error(line, f"{at}.provenance: {others[0]!r} is not a key column (key: "
                                  f"{', '.join(checker.key)})")
    k, key_row = checker.key_of(provenance, line, f"{at}.provenance")
    if node["type"] == "delete":
        return [Change(DELETE, k, key_row, line)]
    if node["type"] == "update" and "diff" in node:
        if not isinstance(node["diff"], Mapping):
            raise checker.error(line, f"{at}.diff: a row's diff is a tuple diff (attribute → i-diff), "
                                      "not a bag diff")
        unknown = {a: d.get("post") if isinstance(d, Mapping) else None  # their values, for --evolve
                   for a, d in node["diff"].items() if a not in checker.schema.names}
        if unknown:
            raise SchemaDrift(checker.source, line, f"{at}.diff has column {next(iter(unknown))!r}, which table "
                                                    f"columns ({', '.join(checker.schema.names)}) do not include",
                              unknown)
        try:
            edit = _fields(node["diff"], {f.name: f.type for f in checker.schema}, "", f"{at}.diff",
                           line, checker, frozen=checker.key)
        except _Bad as e:
            raise checker.error(line, str(e)) from None
        return [Change(PATCH, k, key_row, line, edit)]
    post = node["post"]
    if not isinstance(post, Mapping):
        raise checker.error(line, f"{at}.post is {json_kind(post)}, not a row (an object)")
    _same_key(post, provenance, f"{at}.post", line, checker)
    k, row = checker.row({**provenance, **post}, line, f"{at}.post")
    return [Change(UPSERT, k, row, line)]


def _same_key(post: Mapping[str, Any], provenance: Mapping[str, Any], at: str, line: int, checker) -> None:
    for name, v in provenance.items():
        if name in post and post[name] != v:
            problem = (f"{at}: {name} is {json.dumps(post[name], default=str)} but the provenance says "
                       f"{json.dumps(v, default=str)}; a key changes by a delete and an insert")
            raise checker.error(line, problem) if checker is not None else _Bad(problem)


def _fields(diff: Mapping[str, Any], types: Mapping[str, pa.DataType], path: str, at: str, line: int,
            checker: RowChecker, frozen: Sequence[str] = ()) -> EditFields:
    out = []
    for name, node in diff.items():
        here = f"{at}.{name}"
        if name not in types:
            raise _Bad(f"{here}: no attribute {name!r} (attributes: {', '.join(types)})")
        if name in frozen:
            raise _Bad(f"{here}: {name} is a key; a key changes by a delete and an insert")
        out.append((name, _edit(node, types[name], f"{path}.{name}" if path else name, here, line, checker)))
    return EditFields(tuple(out))


def _convert(v: Any, t: pa.DataType, path: str, at: str, line: int, checker: RowChecker) -> Any:
    try:
        return checker.value(v, t, path, line, at)
    except RecordError as e:
        raise _Bad(e.problem) from None


def _edit(node: Mapping[str, Any], t: pa.DataType, path: str, at: str, line: int, checker: RowChecker) -> Edit:
    if node["type"] == "delete":
        return SetTo(None)
    if node["type"] == "insert" or "diff" not in node:
        return SetTo(_convert(node["post"], t, path, f"{at}.post", line, checker))
    diff = node["diff"]
    if isinstance(diff, Mapping):
        if not pa.types.is_struct(t):
            raise _Bad(f"{at}.diff: a tuple diff changes a struct; {path} is {t}")
        return _fields(diff, _struct_fields(t), path, f"{at}.diff", line, checker)
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        raise _Bad(f"{at}.diff: a bag diff changes a collection of tuples; {path} is {t} "
                   "(give its new value as post)")
    return EditElements(path, tuple(_element(e, t.value_type, path, f"{at}.diff[{i}]", line, checker)
                                    for i, e in enumerate(diff)))


def _struct_fields(t: pa.DataType) -> dict[str, pa.DataType]:
    return {t.field(i).name: t.field(i).type for i in range(t.num_fields)}


def _element(node: Mapping[str, Any], t: pa.DataType, path: str, at: str, line: int,
             checker: RowChecker) -> ElementEdit:
    types = _struct_fields(t)
    provenance = node["provenance"]
    key = []
    for name, v in provenance.items():
        if name not in types:
            raise _Bad(f"{at}.provenance: the elements of {path} have no attribute {name!r} "
                       f"(attributes: {', '.join(types)})")
        if v is None:
            raise _Bad(f"{at}.provenance: element key {name!r} is null")
        key.append((name, _convert(v, types[name], f"{path}[].{name}", f"{at}.provenance", line, checker)))
    if node["type"] == "delete":
        return ElementEdit("delete", tuple(key), None)
    if node["type"] == "insert" or "diff" not in node:
        post = node["post"]
        if not isinstance(post, Mapping):
            raise _Bad(f"{at}.post is {json_kind(post)}, not an element (an object)")
        _same_key(post, provenance, f"{at}.post", line, None)
        value = _convert({**provenance, **post}, t, f"{path}[]", f"{at}.post", line, checker)
        return ElementEdit(node["type"], tuple(key), SetTo(value))
    if not isinstance(node["diff"], Mapping):
        raise _Bad(f"{at}.diff: an element's diff is a tuple diff (attribute → i-diff)")
    return ElementEdit("update", tuple(key),
                       _fields(node["diff"], types, path, f"{at}.diff", line, checker, frozen=list(provenance)))


# --- applying the patches to the rows --------------------------------------------------------------------

def resolve_patches(change_set: ChangeSet, rows_of: Callable[[Sequence[tuple]], Mapping[tuple, Mapping]],
                    element_keys: Mapping[str, Sequence[str]] | None, strict: bool,
                    check_row: Callable[[Change], None], text: str) -> ChangeSet:
    """``change_set`` with every :data:`PATCH` made the upsert of the row it gives: the row as
    the table holds it (``rows_of(keys)``: key → row, for the rows the table has) after the
    changes before it, changed by the patch, and checked by ``check_row`` (a :class:`DataError`
    rejects it).  A record whose patch names a row or element that is not there, an element key
    that is taken, or a collection without that element key declared is rejected whole (``strict``:
    raised); the rows the later records see are those of the records taken.  ``text``: the
    file's text, whose lines rejected records keep."""
    if not any(c.op == PATCH for c in change_set.changes):
        return change_set
    state: dict[tuple, Mapping | None] = dict(rows_of(list(dict.fromkeys(
        c.key for c in change_set.changes if c.op == PATCH))))
    texts = dict(enumerate(text.splitlines(), 1))
    changes: list[Change] = []
    rejected: list[Rejected] = []
    for line, record in _by_record(change_set.changes):
        mine = dict(state)
        try:
            resolved = [_resolved(c, mine, element_keys, check_row) for c in record]
        except _Bad as e:
            if strict:
                raise RecordError(change_set.source, line, str(e)) from None
            rejected.append(Rejected(line, str(e), texts.get(line, "")))
            continue
        state = mine
        changes.extend(resolved)
    if rejected:
        return _with_rejected(change_set, changes, rejected)
    return replace(change_set, changes=tuple(changes))


def _by_record(changes: Iterable[Change]) -> list[tuple[int, list[Change]]]:
    out: list[tuple[int, list[Change]]] = []
    for c in changes:
        if out and out[-1][0] == c.line:
            out[-1][1].append(c)
        else:
            out.append((c.line, [c]))
    return out


def _with_rejected(change_set: ChangeSet, changes: list[Change], rejected: list[Rejected]) -> ChangeSet:
    return replace(change_set, changes=tuple(changes), records=change_set.records - len(rejected),
                   rejected=tuple(sorted([*change_set.rejected, *rejected], key=lambda r: r.line)))


def _resolved(change: Change, state: dict[tuple, Mapping | None], element_keys, check_row) -> Change:
    if change.op != PATCH:
        state[change.key] = change.row if change.op == UPSERT else None
        return change
    row = state.get(change.key)
    if row is None:
        shown = ", ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False)}" for k, v in change.row.items())
        raise _Bad(f"no row with {shown} to update")
    new = Change(UPSERT, change.key, _apply(row, change.patch, element_keys or {}), change.line)
    try:
        check_row(new)
    except DataError as e:
        raise _Bad(str(e).split(": ", 1)[-1]) from None
    state[change.key] = new.row
    return new


def _apply(value: Any, edit: Edit, element_keys: Mapping[str, Sequence[str]]) -> Any:
    if isinstance(edit, SetTo):
        return edit.value
    if isinstance(edit, EditFields):
        if value is None:
            raise _Bad(f"{', '.join(n for n, _ in edit.fields)}: the value holding them is null")
        out = dict(value)
        for name, e in edit.fields:
            out[name] = _apply(out.get(name), e, element_keys)
        return out
    declared = element_keys.get(edit.path)
    elements = list(value or ())
    for e in edit.elements:
        names = [k for k, _ in e.key]
        if declared is None or sorted(names) != sorted(declared):
            wanted = f"its element key ({', '.join(declared)})" if declared else \
                "a declared element key (none is declared: see --element-key)"
            raise _Bad(f"{edit.path}: element {e} is named by {', '.join(names)}, not by {wanted}")
        at = next((i for i, x in enumerate(elements) if all(x.get(k) == v for k, v in e.key)), None)
        if e.type == "insert":
            if at is not None:
                raise _Bad(f"{edit.path}: insert of element {e}, which is already there")
            elements.append(e.edit.value)
        elif at is None:
            raise _Bad(f"{edit.path}: no element {e} to {e.type}")
        elif e.type == "delete":
            del elements[at]
        else:
            elements[at] = _apply(elements[at], e.edit, element_keys)
    return elements
