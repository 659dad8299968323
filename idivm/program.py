"""A view's compiled maintenance program: what ``define`` computes once and every
``maintain`` executes without parsing, planning or generating again.

:class:`Program` holds the view's plan with its provenance (the hidden IDs the view stores),
the Δ-script with its caches (or why the view is recomputed), and the global provenance
indexes selected for it.  The catalog stores it as JSON (:func:`to_json`, :func:`from_json`)
with a format version: a program written by another version of idivm is not loaded
(:func:`from_json` returns None) and the view is compiled again from its text.

The JSON is a faithful encoding of the program's frozen dataclasses (plan operators, terms,
types, statements, signatures): each object is its class name (a class of ``idivm``; no other
is ever instantiated) and its fields; tuples, frozensets, enums and mappings keep their kind.
Source positions are not kept.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
from dataclasses import dataclass
from typing import Any

#: the version of the encoding and of the classes it names; a stored program of another
#: version is compiled again from the view's text
FORMAT = f"6/{importlib.import_module('idivm').__version__}"


@dataclass(frozen=True)
class Program:
    """The compiled maintenance of one view.  ``script`` is None when the view is recomputed
    (``note`` says why); ``prov.plan`` is what a recomputation evaluates."""

    name: str
    type: Any  # the view's user-visible row type
    plan: Any  # O.ReturnBag: the view's plan as built (index selection reads it)
    prov: Any  # ProvenanceResult
    script: Any = None  # DeltaScript | None
    note: str = ""
    indexes: Any = None  # IndexSelection | None: the global provenance indexes (§2.15.2)
    maps: Any = None  # idivm.exec.maps.MapsPlan | None: the view's higher-order delta maps
    #: (table, column) of each column a base table lacked when the view was defined that it reads (as MISSING)
    absent_columns: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = ()  # about the view text, each with its position


def to_json(program: Program) -> dict:
    return {"format": FORMAT, "program": _Encoder(program).encode(program)}


def from_json(data: Any) -> Program | None:
    """The stored program, or None when there is none or it is of another format."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    return _Decoder().decode(data["program"])


# --- the encoding ----------------------------------------------------------------------------------

def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _fields(value: Any) -> list[tuple[str, Any]]:
    return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)
            if f.init and f.name != "span" and not isinstance(getattr(value, f.name), BaseException)]


def _is_object(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


class _Encoder:
    """Encodes a program; an object reached more than once (a subplan two queries share, which
    evaluation computes once) is written once with an ``id`` and then referred to by it, so
    the decoded program shares it too."""

    def __init__(self, root: Any):
        self.seen: dict[int, int] = {}  # by id(): every object stays alive, held by the root
        self._count(root)
        self.shared = {k for k, n in self.seen.items() if n > 1}
        self.ids: dict[int, int] = {}

    def _count(self, value: Any) -> None:
        if _is_object(value):
            self.seen[id(value)] = self.seen.get(id(value), 0) + 1
            if self.seen[id(value)] > 1:
                return
            for _, v in _fields(value):
                self._count(v)
        elif isinstance(value, (tuple, list, frozenset)):
            for v in value:
                self._count(v)
        elif isinstance(value, dict):
            for k, v in value.items():
                self._count(k)
                self._count(v)

    def encode(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return {"float": repr(value)}
        if isinstance(value, enum.Enum):
            return {"enum": _class_name(type(value)), "name": value.name}
        if _is_object(value):
            if id(value) in self.ids:
                return {"ref": self.ids[id(value)]}
            out = {"class": _class_name(type(value)), "fields": {k: self.encode(v) for k, v in _fields(value)}}
            if id(value) in self.shared:
                self.ids[id(value)] = out["id"] = len(self.ids)
            return out
        if isinstance(value, tuple):
            return {"tuple": [self.encode(v) for v in value]}
        if isinstance(value, frozenset):
            return {"frozenset": [self.encode(v) for v in value]}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, dict):
            return {"map": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        raise TypeError(f"a compiled program cannot hold a {type(value).__name__}")


def _class(name: str) -> type:
    module, _, qualname = name.partition(":")
    if module != "idivm" and not module.startswith("idivm."):
        raise ValueError(f"a compiled program names a class outside idivm: {name}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class _Decoder:
    def __init__(self):
        self.objects: dict[int, Any] = {}

    def decode(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if "class" in value:
            obj = _class(value["class"])(**{k: self.decode(v) for k, v in value["fields"].items()})
            if "id" in value:
                self.objects[value["id"]] = obj
            return obj
        if "ref" in value:
            return self.objects[value["ref"]]
        if "tuple" in value:
            return tuple(self.decode(v) for v in value["tuple"])
        if "frozenset" in value:
            return frozenset(self.decode(v) for v in value["frozenset"])
        if "map" in value:
            return {self.decode(k): self.decode(v) for k, v in value["map"]}
        if "enum" in value:
            return _class(value["enum"])[value["name"]]
        if "float" in value:
            return float(value["float"])
        raise ValueError(f"not part of a compiled program: {value!r}")
