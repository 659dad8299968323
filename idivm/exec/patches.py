"""Nested updates and nested replaces applied to stored view rows in the driver, where a run
rewrites the files that hold the rows it changes (:func:`idivm.storage.delta.rewrite_clustered`).

An :class:`ElementPatch` is the driver's form of a nested update (thesis §2.12.3, §2.14.2: the
elements a partial provenance names get new values at field paths, found by path navigation)
or of a nested replace (Tables E.3, E.4 on the nested side: the elements named are deleted and
the post-state elements inserted into the rows their outer IDs name).  It changes exactly what
the Spark forms of the same statements change (:func:`idivm.exec.delta_script._rewrite_elements`,
``_replace_elements``): an updated bag keeps its order; a replaced bag is sorted as bags are
built (Spark's ``sort_array`` order: NULL first, tuples field by field, NaN last).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import pyarrow as pa

from idivm.provenance.ids import PROV_FIELD
from idivm.storage.delta import replaced

#: the column of an element patch's rows holding the elements to insert into the row
NEW = "__idivm_new_elements"


@dataclass(frozen=True)
class ElementPatch:
    """A change of the bag in column ``path`` of the stored rows whose columns ``on`` equal
    those of a row of ``rows``.

    ``nested_update``: each element whose provenance fields ``match`` equal those of a row of
    ``names`` gets, for each ``(field path, column)`` of ``set``, that row's value of the column
    at the field path.  ``nested_replace``: the elements whose provenance fields equal those of a
    row of ``names`` are deleted, and the elements in column :data:`NEW` of the row of ``rows``
    (if it has that column) are inserted.  ``names`` has the provenance fields as columns."""

    kind: Literal["nested_update", "nested_replace"]
    on: tuple[str, ...]
    rows: pa.Table
    path: str
    match: tuple[str, ...]
    names: pa.Table
    set: tuple[tuple[tuple[str, ...], str], ...] = ()

    def prepared(self, schema: pa.Schema) -> "_Prepared":
        """The i-diff in the types of the stored bag (of ``schema``): the provenance each row of
        ``names`` names, and for an update the new values of each."""
        element = schema.field(self.path).type.value_type
        prov = element.field(PROV_FIELD).type
        keys = [tuple(r) for r in zip(*[_values(self.names.column(p), prov.field(p).type) for p in self.match])] \
            if self.names.num_rows else []
        columns = [_values(self.names.column(c), _field_type(element, path)) for path, c in self.set]
        new = {k: [v[i] for v in columns] for i, k in enumerate(keys)}
        return _Prepared(self, element, new)


@dataclass(frozen=True)
class _Prepared:
    """An :class:`ElementPatch` made ready for a table: its bag's ``element`` type and, for
    each provenance it names, the new values of its fields (none for a replace)."""

    patch: ElementPatch
    element: pa.StructType
    new: dict[tuple, list]

    @property
    def on(self) -> tuple[str, ...]:
        return self.patch.on

    @property
    def rows(self) -> pa.Table:
        return self.patch.rows

    def prepared(self, schema: pa.Schema) -> "_Prepared":
        return self

    def changed(self, stored: pa.Table, hits: Sequence[int], at: Sequence[int]) -> pa.Table:
        p = self.patch
        bags = stored.column(p.path).take(list(hits)).to_pylist()
        if p.kind == "nested_update":
            paths = [path for path, _ in p.set]
            bags = [None if bag is None else [_updated(e, p.match, self.new, paths) for e in bag] for bag in bags]
        else:
            inserts = _values(p.rows.column(NEW).take(list(at)), pa.list_(self.element)) \
                if NEW in p.rows.column_names else [None] * len(bags)
            bags = [_replaced(bag, p.match, self.new.keys(), new) for bag, new in zip(bags, inserts)]
        return replaced(stored, p.path, hits, bags)


def _key(e: dict, match: Sequence[str]) -> tuple:
    prov = e.get(PROV_FIELD) or {}
    return tuple(prov.get(p) for p in match)


def _updated(e: dict | None, match: Sequence[str], new: dict[tuple, list], paths: Sequence[tuple[str, ...]]):
    if e is None:
        return e
    values = new.get(_key(e, match))
    if values is None:
        return e
    for path, value in zip(paths, values):
        e = _with_path(e, path, value)
    return e


def _with_path(e: dict | None, path: tuple[str, ...], value: Any):
    """Tuple ``e`` with the field at ``path`` set to ``value``; a NULL tuple on the way stays NULL."""
    if e is None:
        return None
    head, rest = path[0], path[1:]
    return {**e, head: _with_path(e.get(head), rest, value) if rest else value}


def _replaced(bag: list | None, match: Sequence[str], dropped, new: list | None) -> list | None:
    if bag is None and new is None:
        return None
    kept = [e for e in bag or [] if e is None or _key(e, match) not in dropped]
    return sorted(kept + (new or []), key=order_key)


def order_key(value) -> tuple:
    """The sort key of a value in Spark's ascending order (``sort_array``): NULL first, tuples
    and arrays compared member by member, NaN after every other number."""
    if value is None:
        return (0,)
    if isinstance(value, dict):
        return (1, tuple(order_key(v) for v in value.values()))
    if isinstance(value, (list, tuple)):
        return (1, tuple(order_key(v) for v in value))
    if isinstance(value, float) and math.isnan(value):
        return (2,)
    return (1, value)


def _field_type(element: pa.StructType, path: tuple[str, ...]) -> pa.DataType:
    t: pa.DataType = element
    for name in path:
        t = t.field(name).type
    return t


def _values(column: pa.ChunkedArray | pa.Array, to: pa.DataType) -> list:
    """The values of ``column`` as Python values of type ``to``: cast as Spark casts, a tuple
    by the position of its fields."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return _positional(array, to).to_pylist()


def _positional(array: pa.Array, to: pa.DataType) -> pa.Array:
    if array.type == to:
        return array
    if pa.types.is_struct(to) and pa.types.is_struct(array.type):
        fields = [_positional(array.field(i), to.field(i).type) for i in range(to.num_fields)]
        return pa.StructArray.from_arrays(fields, fields=list(to), mask=array.is_null())
    if pa.types.is_list(to) and (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        if array.offset:
            array = pa.concat_arrays([array])  # a copy that starts at its first offset
        values = _positional(array.values, to.value_type)  # the offsets index the whole child
        return pa.ListArray.from_arrays(array.offsets.cast(pa.int32()), values, type=to, mask=array.is_null())
    return array.cast(to)


__all__ = ["NEW", "ElementPatch", "order_key"]
