"""i-diff instances: the nested format of thesis §2.12.1.

An i-diff instance describes a change to a value ``x`` and reads, in the thesis'
notation, ``#(p) {type: ..., pre: ..., post: ..., diff: ...}``:

* ``p`` — the :class:`Provenance` ``#(k1=u1, ...)`` of §2.11.1 that the values the
  i-diff applies to must match (a subset of their key/value pairs, so ``#()``
  matches every value);
* ``type`` — :class:`DiffType` insert, delete or update;
* ``pre`` / ``post`` — (part of) the pre-state / the post-state of ``x``;
* ``diff`` — the nested i-diffs of an update of a bag (:class:`BagDiff`, a bag of
  i-diffs each with its provenance) or of a tuple (:class:`TupleDiff`, attribute
  name → i-diff, no provenance: the name identifies the attribute).

Which parts each type has (§2.12.1, and §2.2 for the relational case):

========  ================  ==============================  =========================
type      pre               post                            diff
========  ================  ==============================  =========================
insert    never             required                        never
delete    optional          never                           never
update    optional          required unless ``diff`` given   bag or tuple values only
========  ================  ==============================  =========================

Top-level documents (:data:`IDiffDocument`) are a single :class:`IDiff`, a
:class:`BagDiff` (the i-diff of a view, e.g. Δ^V of §2.9: ``{{ #() {...} }}``), or a
:class:`NamedDiff` (the i-diff of a named base table, ``<users: {...}>``, §2.9 and
Example 2.14.2).

All classes are immutable and hashable, validate themselves on construction
(:class:`~idivm.errors.DataError`), print in the thesis' notation
(:mod:`idivm.diffs.notation`) and convert to JSON (:mod:`idivm.diffs.model.codec`).
``pre``/``post`` hold plain JSON-like values frozen by :func:`idivm.diffs.values.freeze`.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Union

from idivm.diffs.values import Scalar, canonical, format_atom, format_name, format_value, freeze, freeze_scalar, is_scalar
from idivm.errors import DataError

__all__ = [
    "ABSENT",
    "Absent",
    "BagDiff",
    "DiffType",
    "IDiff",
    "IDiffDocument",
    "NamedDiff",
    "Provenance",
    "TupleDiff",
    "Violation",
    "attribute_path",
    "element_path",
]


class DiffType(str, enum.Enum):
    """The type ``t ∈ {+, -, u}`` of an i-diff (§2.2), spelled as in §2.12.1."""

    INSERT = "insert"
    DELETE = "delete"
    UPDATE = "update"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, value: "DiffType | str", where: str = "type") -> "DiffType":
        if isinstance(value, DiffType):
            return value
        try:
            return cls(value)
        except ValueError:
            raise DataError(f"{where}: {value!r} is not one of ['insert', 'delete', 'update']") from None


class Absent:
    """The type of :data:`ABSENT`: an optional ``pre``/``post`` that is not there (``None`` is null)."""

    __slots__ = ()
    _instance: "Absent | None" = None

    def __new__(cls) -> "Absent":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT = Absent()
"""Marks a missing ``pre`` or ``post`` part of an i-diff."""


@dataclass(frozen=True, slots=True, eq=False)
class Provenance(Mapping[str, Scalar]):
    """The provenance ``#(k1=u1, ..., km=um)`` of a value (§2.11.1, Fig. 2.13 row 5).

    An immutable mapping from provenance keys to scalars.  The key order is kept for
    printing; equality and hashing ignore it (provenance is a *set* of key/value pairs).
    ``Provenance.of(uid='Ha3i')`` or ``Provenance.of({'uid': 'Ha3i'})`` build one.
    """

    pairs: tuple[tuple[str, Scalar], ...] = ()

    def __post_init__(self) -> None:
        pairs = self.pairs
        if isinstance(pairs, Mapping):
            pairs = tuple(pairs.items())
        checked: list[tuple[str, Scalar]] = []
        seen: set[str] = set()
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise DataError(f"provenance pairs are (key, value), got {pair!r}")
            key, value = pair
            if not isinstance(key, str) or not key:
                raise DataError(f"provenance keys are non-empty strings, got {key!r}")
            if key in seen:
                raise DataError(f"duplicate provenance key {key!r}")
            seen.add(key)
            checked.append((key, freeze_scalar(value, f"provenance key {key!r}")))
        object.__setattr__(self, "pairs", tuple(checked))

    @classmethod
    def of(cls, mapping: "Mapping[str, Scalar] | Iterable[tuple[str, Scalar]] | None" = None,
           /, **pairs: Scalar) -> "Provenance":
        """Build from a mapping, an iterable of pairs and/or keyword arguments."""
        if isinstance(mapping, Provenance) and not pairs:
            return mapping
        items: list[tuple[str, Scalar]] = []
        if mapping is not None:
            items.extend(mapping.items() if isinstance(mapping, Mapping) else mapping)
        items.extend(pairs.items())
        return cls(tuple(items))

    def __getitem__(self, key: str) -> Scalar:
        for k, v in self.pairs:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def key_names(self) -> tuple[str, ...]:
        """The provenance keys in order (what a signature declares, §2.12.2)."""
        return tuple(k for k, _ in self.pairs)

    def matches(self, other: "Provenance") -> bool:
        """``PROVENANCE_MATCH`` (§2.11.3, §2.12.1): every pair of ``self`` occurs in ``other``.

        An i-diff with provenance ``self`` applies to every value whose provenance
        ``other`` it matches; ``#()`` matches everything.
        """
        if len(self.pairs) > len(other.pairs):
            return False
        theirs = {k: canonical(v) for k, v in other.pairs}
        return all(k in theirs and theirs[k] == canonical(v) for k, v in self.pairs)

    def __canonical__(self) -> Any:
        return (7, frozenset((k, canonical(v)) for k, v in self.pairs))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Provenance):
            return self.__canonical__() == other.__canonical__()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.__canonical__())

    def __repr__(self) -> str:
        return f"Provenance.of({dict(self.pairs)!r})"

    def __str__(self) -> str:

        return format_provenance(self)


@dataclass(frozen=True, slots=True)
class Violation:
    """A problem found in an i-diff: where (a JSON path into its JSON encoding) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def attribute_path(path: str, name: str) -> str:
    """``path`` extended by a tuple attribute, JSON-path style (``$.diff.city``)."""
    return f"{path}.{name}" if _IDENTIFIER.match(name) else f"{path}[{name!r}]"


def element_path(path: str, index: int) -> str:
    """``path`` extended by the position of an element in a JSON array (``$.diff[0]``)."""
    return f"{path}[{index}]"


@dataclass(frozen=True, slots=True, eq=False)
class IDiff:
    """One i-diff instance ``#(p) {type, pre, post, diff}`` (§2.12.1).

    ``provenance`` is ``None`` where the position identifies the value (an attribute of
    a tuple diff, the root of a :class:`NamedDiff`); elements of a :class:`BagDiff`
    always carry one.  ``pre``/``post`` are :data:`ABSENT` when not given (``None``
    is the null value).
    """

    type: DiffType
    provenance: Provenance | None = None
    pre: Any = ABSENT
    post: Any = ABSENT
    diff: "TupleDiff | BagDiff | None" = None

    def __post_init__(self) -> None:
        kind = DiffType.of(self.type)
        object.__setattr__(self, "type", kind)
        if self.provenance is not None and not isinstance(self.provenance, Provenance):
            if not isinstance(self.provenance, Mapping):
                raise DataError(f"provenance must be a mapping of keys to scalars, got {self.provenance!r}")
            object.__setattr__(self, "provenance", Provenance.of(self.provenance))
        for part in ("pre", "post"):
            value = getattr(self, part)
            if value is not ABSENT:
                frozen = freeze(value, part)
                _reject_provenanced(frozen, part)
                object.__setattr__(self, part, frozen)
        if self.diff is not None and not isinstance(self.diff, (TupleDiff, BagDiff)):
            raise DataError(f"diff must be a TupleDiff or a BagDiff, got {type(self.diff).__name__}")
        if kind is DiffType.INSERT:
            if self.pre is not ABSENT:
                raise DataError("an insert i-diff has no pre: the value did not exist before (§2.12.1)")
            if self.diff is not None:
                raise DataError("an insert i-diff has no nested diff: the whole value is inserted (§2.12.1)")
            if self.post is ABSENT:
                raise DataError("an insert i-diff needs the post-state of the inserted value (§2.12.1)")
        elif kind is DiffType.DELETE:
            if self.post is not ABSENT:
                raise DataError("a delete i-diff has no post: the value does not exist after (§2.12.1)")
            if self.diff is not None:
                raise DataError("a delete i-diff has no nested diff: the whole value is deleted (§2.12.1)")
        elif self.post is ABSENT and self.diff is None:
            raise DataError("an update i-diff needs a post-state or a nested diff (§2.12.1)")

    # -- construction helpers ------------------------------------------------------

    @classmethod
    def insert(cls, post: Any, provenance: "Provenance | Mapping[str, Scalar] | None" = None) -> "IDiff":
        """``#(p) {type: insert, post: v}``."""
        return cls(DiffType.INSERT, _provenance(provenance), post=post)

    @classmethod
    def delete(cls, provenance: "Provenance | Mapping[str, Scalar] | None" = None, *, pre: Any = ABSENT) -> "IDiff":
        """``#(p) {type: delete[, pre: v]}``."""
        return cls(DiffType.DELETE, _provenance(provenance), pre=pre)

    @classmethod
    def update(cls, provenance: "Provenance | Mapping[str, Scalar] | None" = None, *, pre: Any = ABSENT,
               post: Any = ABSENT, diff: "TupleDiff | BagDiff | None" = None) -> "IDiff":
        """``#(p) {type: update[, pre: v][, post: v][, diff: ...]}``."""
        return cls(DiffType.UPDATE, _provenance(provenance), pre=pre, post=post, diff=diff)

    def with_provenance(self, provenance: "Provenance | Mapping[str, Scalar] | None") -> "IDiff":
        """The same i-diff under another provenance (``None``: none)."""
        return replace(self, provenance=_provenance(provenance))

    # -- inspection ----------------------------------------------------------------

    @property
    def has_pre(self) -> bool:
        return self.pre is not ABSENT

    @property
    def has_post(self) -> bool:
        return self.post is not ABSENT

    def children(self) -> tuple["IDiff", ...]:
        """The nested i-diffs, in order."""
        if self.diff is None:
            return ()
        return self.diff.children()

    def _key(self) -> Any:
        return (self.type, self.provenance,
                None if self.pre is ABSENT else ("v", canonical(self.pre)),
                None if self.post is ABSENT else ("v", canonical(self.post)),
                self.diff)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IDiff):
            return self._key() == other._key()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:

        return format_idiff(self)


class AttributeMap(Mapping):
    """A name → node map kept as ordered ``attributes`` pairs (order is kept for printing;
    equality ignores it).  Shared by tuple diffs and tuple signatures."""

    __slots__ = ()

    def __getitem__(self, name: str):
        for n, node in self.attributes:
            if n == name:
                return node
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (n for n, _ in self.attributes)

    def __len__(self) -> int:
        return len(self.attributes)

    def children(self) -> tuple:
        return tuple(node for _, node in self.attributes)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)):
            return dict(self.attributes) == dict(other.attributes)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self.attributes))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.attributes)!r})"


def attribute_pairs(attributes: Any, what: str, node_type: type, node_name: str) -> tuple[tuple[str, Any], ...]:
    """Checked ``(name, node)`` pairs from a mapping or from pairs: names are unique non-empty
    strings, nodes are ``node_type``."""
    pairs = attributes.items() if isinstance(attributes, Mapping) else attributes
    checked: list[tuple[str, Any]] = []
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise DataError(f"{what} entries are (attribute, {node_name}), got {pair!r}")
        name, node = pair
        if not isinstance(name, str) or not name:
            raise DataError(f"attribute names are non-empty strings, got {name!r}")
        if any(name == n for n, _ in checked):
            raise DataError(f"duplicate attribute {name!r} in a {what}")
        if not isinstance(node, node_type):
            raise DataError(f"the {node_name} of attribute {name!r} must be a {node_type.__name__}, "
                            f"got {type(node).__name__}")
        checked.append((name, node))
    return tuple(checked)


@dataclass(frozen=True, slots=True, eq=False)
class TupleDiff(AttributeMap):
    """The nested diff of an update of a tuple: attribute name → i-diff of that attribute (§2.12.1).

    The attribute i-diffs carry no provenance.  Build from a mapping or from pairs.
    Attribute order is kept for printing; equality ignores it.
    """

    attributes: tuple[tuple[str, IDiff], ...] = ()

    def __post_init__(self) -> None:
        checked = attribute_pairs(self.attributes, "tuple diff", IDiff, "i-diff")
        for name, node in checked:
            if node.provenance is not None:
                raise DataError(f"the i-diff of attribute {name!r} has no provenance: "
                                "its attribute name identifies it (§2.12.1)")
        object.__setattr__(self, "attributes", checked)

    def __str__(self) -> str:

        return format_idiff(self)


@dataclass(frozen=True, slots=True, eq=False)
class BagDiff:
    """A bag of i-diffs ``{{ #(p1) {...}, ... }}``: the nested diff of an update of a bag (§2.12.1),
    or the i-diff of a whole view (Δ^V of §2.9).

    Every element carries its provenance.  Element order is kept (printing, JSON, and
    the order :func:`~idivm.diffs.model.effective.condense` folds a sequence in); equality
    treats the bag as a multiset.
    """

    elements: tuple[IDiff, ...] = ()

    def __post_init__(self) -> None:
        elements = tuple(self.elements)
        for i, node in enumerate(elements):
            if not isinstance(node, IDiff):
                raise DataError(f"element {i} of a bag diff must be an IDiff, got {type(node).__name__}")
            if node.provenance is None:
                raise DataError(f"element {i} of a bag diff needs its provenance #(...) (§2.12.1)")
        object.__setattr__(self, "elements", elements)

    def __iter__(self) -> Iterator[IDiff]:
        return iter(self.elements)

    def __len__(self) -> int:
        return len(self.elements)

    def __getitem__(self, index: int) -> IDiff:
        return self.elements[index]

    def children(self) -> tuple[IDiff, ...]:
        return self.elements

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BagDiff):
            return Counter(self.elements) == Counter(other.elements)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(Counter(self.elements).items()))

    def __repr__(self) -> str:
        return f"BagDiff({list(self.elements)!r})"

    def __str__(self) -> str:

        return format_idiff(self)


@dataclass(frozen=True, slots=True)
class NamedDiff:
    """The i-diff of a named top-level value, e.g. a base table: ``<users: {type: update, ...}>``
    (§2.9, Example 2.14.2).  The root i-diff carries no provenance: the name identifies it."""

    name: str
    idiff: IDiff

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DataError(f"the name of a named i-diff is a non-empty string, got {self.name!r}")
        if not isinstance(self.idiff, IDiff):
            raise DataError(f"a named i-diff holds an IDiff, got {type(self.idiff).__name__}")
        if self.idiff.provenance is not None:
            raise DataError(f"the i-diff of {self.name!r} has no provenance: its name identifies it")

    def children(self) -> tuple[IDiff, ...]:
        return (self.idiff,)

    def __str__(self) -> str:

        return format_idiff(self)


IDiffDocument = Union[IDiff, BagDiff, NamedDiff]
"""What an i-diff text or JSON document holds."""


def _provenance(value: "Provenance | Mapping[str, Scalar] | None") -> Provenance | None:
    if value is None or isinstance(value, Provenance):
        return value
    return Provenance.of(value)


def _reject_provenanced(value: Any, where: str) -> None:
    """i-diff values are plain JSON-like values: no bag in them carries provenance."""
    if getattr(value, "__frozen_value__", False):
        raise DataError(f"{where}: i-diff values are plain JSON-like values; "
                        f"a bag with provenance ({type(value).__name__}) cannot appear in them")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _reject_provenanced(v, f"{where}.{k}")
    elif not is_scalar(value):
        for i, v in enumerate(value):
            _reject_provenanced(v, f"{where}[{i}]")


# ----------------------------------------------------------------------------- the thesis' notation

def format_idiff(document: "IDiffDocument | TupleDiff") -> str:
    """The thesis' notation for an i-diff document, indented like the thesis' examples."""
    if isinstance(document, NamedDiff):
        return f"<{format_name(document.name)}: {_format_node(document.idiff, 0)}>"
    if isinstance(document, (BagDiff, TupleDiff)):
        return _format_diff(document, 0)
    if isinstance(document, IDiff):
        return _format_node(document, 0)
    raise DataError(f"not an i-diff document: {type(document).__name__}")


def format_provenance(provenance: Provenance) -> str:
    """``#(k1=u1, ..., km=um)``, values bare where they read back as the same string."""
    return "#(" + ", ".join(f"{format_name(k)}={format_atom(v)}" for k, v in provenance.pairs) + ")"


def format_key_names(names: tuple[str, ...]) -> str:
    """``#(k1, ..., km)``: the provenance keys a signature declares."""
    return "#(" + ", ".join(format_name(n) for n in names) + ")"


def _format_node(node: IDiff, level: int) -> str:
    head = f"{format_provenance(node.provenance)} " if node.provenance is not None else ""
    parts = [f"type: {node.type}"]
    if node.has_pre:
        parts.append(f"pre: {format_value(node.pre)}")
    if node.has_post:
        parts.append(f"post: {format_value(node.post)}")
    if node.diff is None:
        return f"{head}{{ {', '.join(parts)} }}"
    pad = "  " * (level + 1)
    lines = [f"{head}{{"] + [f"{pad}{p}," for p in parts]
    lines.append(f"{pad}diff: {_format_diff(node.diff, level + 1)}")
    lines.append(f"{'  ' * level}}}")
    return "\n".join(lines)


def _format_diff(diff: "BagDiff | TupleDiff", level: int) -> str:
    pad = "  " * (level + 1)
    if isinstance(diff, BagDiff):
        if not len(diff):
            return "{{ }}"
        inner = ",\n".join(f"{pad}{_format_node(e, level + 1)}" for e in diff)
        return f"{{{{\n{inner}\n{'  ' * level}}}}}"
    if not len(diff):
        return "{ }"
    inner = ",\n".join(f"{pad}{format_name(n)}: {_format_node(c, level + 1)}" for n, c in diff.attributes)
    return f"{{\n{inner}\n{'  ' * level}}}"
