"""Data with provenance and the application of i-diffs to it (thesis §2.11.1, §2.12.1).

Input: a value of the data — a :class:`KeyedBag` (a bag whose elements carry their
provenance, like a base table keyed by its key or a view keyed by its IDs), a frozen
tuple or scalar — and an i-diff.  Output: the value after the i-diff, as a new value
(nothing is changed in place).

Application follows the DML semantics of §2.12.1:

* bag update: for every element i-diff ``dc`` and every element ``bc`` of the bag with
  ``PROVENANCE_MATCH(bc, dc)``, apply ``dc`` to ``bc``; an insert adds its ``post`` under its
  provenance (``insertbag``), a delete removes the matched elements;
* tuple update: apply ``diff.a`` to ``t.a`` for each attribute; an insert sets the
  attribute (``inserttuple``), a delete removes it;
* scalar update, or an update without nested diff: the value becomes ``post``.

An update with both ``diff`` and ``post`` applies ``diff`` (the thesis assumes both give
the same result).  Deleting or updating values that are not there does nothing (the
i-diffs of §2.4 may overestimate); inserting a value whose provenance is already taken by
a *different* value is a key violation (:class:`DataError`), inserting the same value
again does nothing (§2.2, the ``NOT IN`` of ``APPLY Δ⁺``).  Elements of an i-diff bag are
applied in their order, so a raw modification log can be replayed with
:func:`apply_bag_diff`; effective i-diffs give the same result in any order (§2.2).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from idivm.diffs.instances import ABSENT, BagDiff, DiffType, IDiff, IDiffDocument, NamedDiff, Provenance, TupleDiff
from idivm.diffs.values import FrozenBag, FrozenTuple, canonical, freeze, thaw
from idivm.errors import DataError

__all__ = ["KeyedBag", "apply_bag_diff", "apply_idiff", "apply_update"]


class KeyedBag(Mapping[Provenance, Any]):
    """An immutable bag whose elements carry their provenance (§2.11.1): provenance → value.

    Provenance is locally unique within a bag, so it keys the elements.  Values are frozen
    (:func:`idivm.diffs.values.freeze`) and may themselves contain keyed bags (nested
    collections whose elements have provenance).  Element order is kept for printing;
    equality and hashing ignore it.
    """

    __slots__ = ("_entries", "_key")
    __frozen_value__ = True

    def __init__(self, entries: "Mapping[Provenance, Any] | Iterable[tuple[Any, Any]]" = ()):
        pairs = entries.items() if isinstance(entries, Mapping) else entries
        built: dict[Provenance, Any] = {}
        for provenance, value in pairs:
            prov = provenance if isinstance(provenance, Provenance) else Provenance.of(provenance)
            if prov in built:
                raise DataError(f"two elements of a bag have provenance {prov}: provenance is locally unique (§2.11.1)")
            built[prov] = freeze(value, str(prov))
        object.__setattr__(self, "_entries", built)
        object.__setattr__(self, "_key", None)

    @classmethod
    def _of_dict(cls, entries: dict[Provenance, Any]) -> "KeyedBag":
        out = cls.__new__(cls)
        object.__setattr__(out, "_entries", entries)
        object.__setattr__(out, "_key", None)
        return out

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("KeyedBag is immutable")

    def __getitem__(self, provenance: Provenance) -> Any:
        return self._entries[provenance]

    def __iter__(self) -> Iterator[Provenance]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def matching(self, provenance: Provenance) -> list[tuple[Provenance, Any]]:
        """The elements whose provenance ``provenance`` matches (``PROVENANCE_MATCH``, §2.11.3)."""
        return [(p, v) for p, v in self._entries.items() if provenance.matches(p)]

    def __canonical__(self) -> Any:
        if self._key is None:
            object.__setattr__(self, "_key", (6, frozenset((p, canonical(v)) for p, v in self._entries.items())))
        return self._key

    def __thaw__(self) -> list[Any]:
        return [thaw(v) for v in self._entries.values()]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeyedBag):
            return self.__canonical__() == other.__canonical__()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.__canonical__())

    def __repr__(self) -> str:
        return f"KeyedBag({ {str(p): thaw(v) for p, v in self._entries.items()}!r})"

    def __str__(self) -> str:
        from idivm.diffs.instances import format_provenance
        from idivm.diffs.values import format_value

        inner = ", ".join(f"{format_provenance(p)} {format_value(v)}" for p, v in self._entries.items())
        return f"{{{{ {inner} }}}}" if inner else "{{ }}"


def apply_bag_diff(bag: KeyedBag, diff: "BagDiff | Iterable[IDiff]") -> KeyedBag:
    """``bag`` after the element i-diffs of ``diff``, applied in order (§2.12.1, "Apply Δᵘ to a bag")."""
    if not isinstance(bag, KeyedBag):
        raise DataError(f"a bag diff applies to a bag whose elements carry provenance, got {_describe(bag)}")
    entries = dict(bag._entries)
    for element in diff:
        provenance = element.provenance
        if provenance is None:
            raise DataError("an element i-diff of a bag needs its provenance (§2.12.1)")
        if element.type is DiffType.INSERT:
            if provenance in entries:
                if canonical(entries[provenance]) != canonical(element.post):
                    raise DataError(f"insert of {provenance}: the bag already holds a different value with this "
                                    "provenance (a key violation)")
                continue
            entries[provenance] = element.post
        else:
            current = KeyedBag._of_dict(entries)
            matched = [p for p, _ in current.matching(provenance)]
            if element.type is DiffType.DELETE:
                for p in matched:
                    del entries[p]
            else:
                for p in matched:
                    entries[p] = apply_update(entries[p], element)
    return KeyedBag._of_dict(entries)


def apply_update(value: Any, update: IDiff) -> Any:
    """``value`` after the update i-diff ``update`` (its nested diff if it has one, else its post)."""
    if update.type is not DiffType.UPDATE:
        raise DataError(f"apply_update takes an update i-diff, got a {update.type}")
    if isinstance(update.diff, TupleDiff):
        if not isinstance(value, FrozenTuple):
            raise DataError(f"a tuple diff applies to a tuple, got {_describe(value)}")
        return _apply_tuple_diff(value, update.diff)
    if isinstance(update.diff, BagDiff):
        if isinstance(value, FrozenBag):
            raise DataError("a bag diff cannot be applied to a bag whose elements carry no provenance")
        return apply_bag_diff(value, update.diff)
    return update.post


def _apply_tuple_diff(value: FrozenTuple, diff: TupleDiff) -> FrozenTuple:
    fields = dict(value.items())
    for name, child in diff.attributes:
        if child.type is DiffType.INSERT:
            fields[name] = child.post
        elif child.type is DiffType.DELETE:
            fields.pop(name, None)
        elif name in fields:
            fields[name] = apply_update(fields[name], child)
    return FrozenTuple(fields)


def apply_idiff(target: Any, document: IDiffDocument) -> Any:
    """Apply any i-diff document to the value it describes.

    * :class:`BagDiff` — ``target`` is a :class:`KeyedBag` (a view or table);
    * :class:`NamedDiff` — ``target`` maps names to values (a database); the named value
      changes and a new mapping is returned;
    * :class:`IDiff` with provenance — one element i-diff of the bag ``target``;
    * :class:`IDiff` without provenance — the value ``target`` itself: an update gives the
      updated value, an insert its ``post``, a delete :data:`~idivm.diffs.instances.ABSENT`.
    """
    if isinstance(document, BagDiff):
        return apply_bag_diff(target, document)
    if isinstance(document, NamedDiff):
        if not isinstance(target, Mapping) or document.name not in target:
            raise DataError(f"no value named {document.name!r} to apply its i-diff to")
        out = dict(target)
        changed = apply_idiff(out[document.name], document.idiff)
        if changed is ABSENT:
            del out[document.name]
        else:
            out[document.name] = changed
        return out
    if isinstance(document, IDiff):
        if document.provenance is not None:
            return apply_bag_diff(target, (document,))
        if document.type is DiffType.INSERT:
            return document.post
        if document.type is DiffType.DELETE:
            return ABSENT
        return apply_update(target, document)
    raise DataError(f"not an i-diff document: {type(document).__name__}")


def _describe(value: Any) -> str:
    if isinstance(value, FrozenTuple):
        return "a tuple"
    if isinstance(value, (FrozenBag, KeyedBag)):
        return "a bag"
    return f"the scalar {value!r}"
