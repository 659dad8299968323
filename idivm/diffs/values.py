"""JSON-like values carried by i-diffs (thesis §2.10.1, Fig. 2.13).

The SQL++ data model restricted as in §2.10.1 "Scope": scalars (null, booleans,
numbers, strings), tuples ``{n1: v1, ...}`` and bags ``{{v1, ...}}``; no arrays,
MISSING or enriched values.  A JSON array stands for a bag.

Input: plain Python values (``None``, ``bool``, ``int``, ``float``, ``str``,
``dict`` with ``str`` keys, ``list``/``tuple``).  Output of :func:`freeze`:
immutable, hashable equivalents — scalars stay as they are, dicts become
:class:`FrozenTuple`, lists become :class:`FrozenBag`.  Both compare equal to
the plain values they came from (``FrozenTuple({'a': 1}) == {'a': 1}``) and
:func:`thaw` turns them back into plain values.

Equality is the data model's, not Python's: ``true`` and ``1`` are different
values, and bags compare as multisets (their order is not part of the value).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any, Union

from idivm.errors import DataError

__all__ = [
    "FrozenBag",
    "FrozenTuple",
    "Scalar",
    "Value",
    "canonical",
    "freeze",
    "freeze_scalar",
    "is_scalar",
    "same_value",
    "thaw",
]

Scalar = Union[None, bool, int, float, str]
"""A primitive SQL++ value (Fig. 2.13 rows 8–11) or null."""

Value = Union[Scalar, "FrozenTuple", "FrozenBag"]
"""A frozen JSON-like value."""


def is_scalar(value: object) -> bool:
    """Whether ``value`` is a scalar of the data model (null, boolean, finite number, string)."""
    if value is None or isinstance(value, (bool, str, int)):
        return True
    return isinstance(value, float) and math.isfinite(value)


def freeze_scalar(value: object, where: str = "value") -> Scalar:
    """``value`` if it is a scalar, else :class:`DataError` naming ``where``."""
    if isinstance(value, float) and not math.isfinite(value):
        raise DataError(f"{where}: {value!r} is not a finite number")
    if not is_scalar(value):
        raise DataError(f"{where}: expected a scalar (null, boolean, number or string), got {_kind(value)}")
    return value  # type: ignore[return-value]


def freeze(value: object, where: str = "value") -> Any:
    """The immutable form of a JSON-like value; :class:`DataError` naming ``where`` if it is not one.

    Values that are already frozen are returned unchanged, so freezing is idempotent.
    Other frozen value classes (e.g. :class:`idivm.diffs.model.data.KeyedBag`) may take part by
    defining ``__frozen_value__ = True``.
    """
    if isinstance(value, (FrozenTuple, FrozenBag)) or getattr(value, "__frozen_value__", False):
        return value
    if isinstance(value, Mapping):
        return FrozenTuple._from_mapping(value, where)
    if isinstance(value, (list, tuple)):
        return FrozenBag(tuple(freeze(v, f"{where}[{i}]") for i, v in enumerate(value)))
    return freeze_scalar(value, where)


def thaw(value: object) -> Any:
    """The plain Python form (dicts, lists, scalars) of a frozen value."""
    thaw_hook = getattr(value, "__thaw__", None)
    if thaw_hook is not None:
        return thaw_hook()
    if isinstance(value, FrozenTuple):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (FrozenBag, list, tuple)):
        return [thaw(v) for v in value]
    return value


def canonical(value: object) -> Any:
    """A hashable key such that two values have equal keys iff they are the same value.

    Booleans differ from numbers, ``1`` equals ``1.0``, tuples are compared as sets of
    fields and bags as multisets.
    """
    if value is None:
        return (0,)
    if isinstance(value, bool):
        return (1, value)
    if isinstance(value, (int, float)):
        return (2, value)
    if isinstance(value, str):
        return (3, value)
    key = getattr(value, "__canonical__", None)
    if key is not None:
        return key()
    if isinstance(value, Mapping):
        return (4, frozenset((k, canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (5, frozenset(Counter(canonical(v) for v in value).items()))
    raise DataError(f"expected a JSON-like value, got {_kind(value)}")


def same_value(a: object, b: object) -> bool:
    """Equality of the data model (see :func:`canonical`)."""
    return canonical(a) == canonical(b)


class _FrozenValue:
    """Shared behaviour of frozen tuples and bags: immutable, equal and hashed by their
    :func:`canonical` form, printed in the thesis notation."""

    __slots__ = ()
    _comparable: tuple[type, ...] = ()  # other types an equal value may have

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (type(self), *self._comparable)):
            try:
                return canonical(self) == canonical(other)
            except DataError:
                return False
        return NotImplemented

    def __hash__(self) -> int:
        return hash(canonical(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({thaw(self)!r})"

    def __str__(self) -> str:

        return format_value(self)


class FrozenTuple(_FrozenValue, Mapping[str, Any]):
    """An immutable SQL++ tuple ``{n1: v1, ..., nk: vk}``: attribute names map to frozen values.

    Attribute order is kept for printing; equality and hashing ignore it.
    """

    __slots__ = ("_fields", "_key")
    _comparable = (Mapping,)

    def __init__(self, fields: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()):
        pairs = fields.items() if isinstance(fields, Mapping) else fields
        built: dict[str, Any] = {}
        for name, v in pairs:
            if not isinstance(name, str):
                raise DataError(f"tuple attribute names are strings, got {_kind(name)}")
            if name in built:
                raise DataError(f"duplicate attribute {name!r} in a tuple")
            built[name] = freeze(v, name)
        object.__setattr__(self, "_fields", built)
        object.__setattr__(self, "_key", None)

    @classmethod
    def _from_mapping(cls, mapping: Mapping[Any, Any], where: str) -> "FrozenTuple":
        for name in mapping:
            if not isinstance(name, str):
                raise DataError(f"{where}: tuple attribute names are strings, got {_kind(name)}")
        out = cls.__new__(cls)
        object.__setattr__(out, "_fields", {k: freeze(v, f"{where}.{k}") for k, v in mapping.items()})
        object.__setattr__(out, "_key", None)
        return out

    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __canonical__(self) -> Any:
        if self._key is None:
            object.__setattr__(self, "_key", (4, frozenset((k, canonical(v)) for k, v in self._fields.items())))
        return self._key



class FrozenBag(_FrozenValue, Collection[Any]):
    """An immutable SQL++ bag ``{{v1, ..., vk}}`` whose elements carry no provenance.

    Element order is kept for printing and JSON; equality and hashing treat the bag as a
    multiset.
    """

    __slots__ = ("_elements", "_key")
    _comparable = (list, tuple)

    def __init__(self, elements: Iterable[Any] = ()):
        object.__setattr__(self, "_elements", tuple(freeze(v, f"[{i}]") for i, v in enumerate(elements)))
        object.__setattr__(self, "_key", None)

    @property
    def elements(self) -> tuple[Any, ...]:
        return self._elements

    def __iter__(self) -> Iterator[Any]:
        return iter(self._elements)

    def __len__(self) -> int:
        return len(self._elements)

    def __contains__(self, value: object) -> bool:
        try:
            key = canonical(value)
        except DataError:
            return False
        return any(canonical(v) == key for v in self._elements)

    def __canonical__(self) -> Any:
        if self._key is None:
            object.__setattr__(self, "_key", (5, frozenset(Counter(canonical(v) for v in self._elements).items())))
        return self._key



def _kind(value: object) -> str:
    if isinstance(value, float):
        return repr(value)
    return type(value).__name__


# ----------------------------------------------------------------------------- the thesis' notation

#: names the notation reserves (quoted when they name an attribute)
NOTATION_KEYWORDS = frozenset({"type", "pre", "post", "diff", "true", "false", "null"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_BARE_ATOM = re.compile(r"[A-Za-z0-9_.+\-]+\Z")
#: the text of a JSON number (an atom that reads as a number is quoted to stay a string)
JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?\Z")


def format_value(value: Any) -> str:
    """A value on one line: ``'San Francisco'``, ``2014``, ``{ a: 1 }``, ``{{ 1, 2 }}``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, FrozenTuple) or (hasattr(value, "items") and not hasattr(value, "__frozen_value__")):
        fields = ", ".join(f"{format_name(k)}: {format_value(v)}" for k, v in value.items())
        return f"{{ {fields} }}" if fields else "{ }"
    if isinstance(value, (FrozenBag, list, tuple)):
        elements = ", ".join(format_value(v) for v in value)
        return f"{{{{ {elements} }}}}" if elements else "{{ }}"
    if getattr(value, "__frozen_value__", False):
        return str(value)
    raise DataError(f"not a JSON-like value: {type(value).__name__}")


def format_name(name: str) -> str:
    """A name bare when it is an identifier that is not a keyword, else quoted."""
    return name if _IDENTIFIER.match(name) and name not in NOTATION_KEYWORDS else _quote(name)


def format_atom(value: Any) -> str:
    if isinstance(value, str) and _BARE_ATOM.match(value) and not JSON_NUMBER.match(value) \
            and value not in ("true", "false", "null"):
        return value
    return format_value(value)


def _quote(text: str) -> str:
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"
