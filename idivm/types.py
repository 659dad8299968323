"""The SQL++ data model's static types, as far as a view definition can infer them.

Base tables are typed (their Delta/Arrow schema); the builder propagates these
types through the plan so it can resolve unqualified column names, expand
``x.*`` and reject unknown fields at define time.  Bags and arrays share
:class:`CollectionType` (``ordered`` tells them apart).  ``ANY`` stands for a
type the definition cannot know.

Types serialize to plain JSON (``to_json``/``from_json``) for the catalog and
convert to and from Arrow schemas (``from_arrow``/``to_arrow``).

A place whose values have different types across rows (a field that is an integer in one record
and a string in another: open, mixed-type data) has a :class:`UnionType`.  Its values are stored
as a tagged union: a struct with one field per alternative, named :data:`UNION_PREFIX` + the
alternative's tag (``__one_of_int``, ``__one_of_string``, ...), of which a value sets exactly one
(a null value is a null struct).  This needs nothing of Spark, Delta Lake or Arrow beyond
structs, so every engine stores and reads it; Spark groups and joins such values by struct
equality, and a reader turns one back into its alternative's value (:func:`union_value`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

SCALAR_KINDS = ("bool", "int", "double", "decimal", "string", "date", "timestamp", "binary", "null")


@dataclass(frozen=True, slots=True)
class Type:
    """Base class of static types."""

    def to_json(self) -> Any:
        raise NotImplementedError

    def __str__(self) -> str:  # pragma: no cover - overridden
        return type(self).__name__


@dataclass(frozen=True, slots=True)
class AnyType(Type):
    def to_json(self) -> Any:
        return "any"

    def __str__(self) -> str:
        return "any"


@dataclass(frozen=True, slots=True)
class ScalarType(Type):
    kind: str  # one of SCALAR_KINDS
    # decimal precision/scale when kind == "decimal"
    precision: int | None = None
    scale: int | None = None

    def __post_init__(self):
        if self.kind not in SCALAR_KINDS:
            raise ValueError(f"unknown scalar kind {self.kind!r}")

    def to_json(self) -> Any:
        if self.kind == "decimal":
            return {"decimal": [self.precision, self.scale]}
        return self.kind

    def __str__(self) -> str:
        if self.kind == "decimal":
            return f"decimal({self.precision},{self.scale})"
        return self.kind


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    fields: tuple[tuple[str, Type], ...]
    #: an open record of a declared schema: a field it does not declare is MISSING (not stored);
    #: not part of the type's identity
    open: bool = field(default=False, compare=False)
    #: a closed record of a declared schema: reading a field it does not declare is an error (of
    #: other records, those inferred from data and those a query builds, it reads MISSING)
    closed: bool = field(default=False, compare=False)

    def field(self, name: str) -> Type | None:
        for n, t in self.fields:
            if n == name:
                return t
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.fields)

    def to_json(self) -> Any:
        return {"tuple": [[n, t.to_json()] for n, t in self.fields]}

    def __str__(self) -> str:
        return "{" + ", ".join(f"{n}: {t}" for n, t in self.fields) + "}"


@dataclass(frozen=True, slots=True)
class CollectionType(Type):
    element: Type
    ordered: bool = False  # False: bag, True: array

    def to_json(self) -> Any:
        return {"array" if self.ordered else "bag": self.element.to_json()}

    def __str__(self) -> str:
        return f"[{self.element}]" if self.ordered else f"{{{{{self.element}}}}}"


#: the hidden field of a record that lists the names of its fields that are MISSING
#: (:data:`idivm.algebra.expressions.ABSENT`)
ABSENT_FIELD = "__idivm_absent"
#: prefix of the fields of a tagged union's struct (:class:`UnionType`); the reserved prefix ``__``
#: keeps them apart from users' names
UNION_PREFIX = "__one_of_"
#: the alternatives of a union in the order of their tags (AsterixDB's order of types)
UNION_TAGS = ("bool", "int", "double", "decimal", "string", "date", "timestamp", "binary", "array", "record")


def union_tag(t: Type) -> str:
    """The tag of the alternative of a :class:`UnionType` that holds values of type ``t``."""
    if isinstance(t, TupleType):
        return "record"
    if isinstance(t, CollectionType):
        return "array"
    if isinstance(t, ScalarType) and t.kind in UNION_TAGS:
        return t.kind
    raise ValueError(f"a value of type {t} cannot be an alternative of a union")


@dataclass(frozen=True, slots=True)
class UnionType(Type):
    """Values of any of the types ``alternatives`` (at most one per tag, in :data:`UNION_TAGS`
    order): a field of open data that holds an integer in one row and a string in another."""

    alternatives: tuple[Type, ...]

    def __post_init__(self):
        tags = [union_tag(t) for t in self.alternatives]
        if len(tags) < 2 or tags != sorted(set(tags), key=UNION_TAGS.index):
            raise ValueError(f"a union needs two or more alternatives of distinct tags in order, got {tags}")

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(union_tag(t) for t in self.alternatives)

    def alternative(self, tag: str) -> Type | None:
        for t in self.alternatives:
            if union_tag(t) == tag:
                return t
        return None

    def to_json(self) -> Any:
        return {"union": [t.to_json() for t in self.alternatives]}

    def __str__(self) -> str:
        return " | ".join(str(t) for t in self.alternatives)


def record_of(t: Type) -> "TupleType | None":
    """The tuple type of values of type ``t`` that are tuples: ``t`` itself, or its tuple
    alternative if it is a :class:`UnionType`; None when none is."""
    if isinstance(t, UnionType):
        t = t.alternative("record") or ANY
    return t if isinstance(t, TupleType) else None


def union_value(value: Any) -> Any:
    """The value a stored tagged union (a dict of ``__one_of_*`` fields, see :class:`UnionType`)
    holds: its one non-null field; other values as they are."""
    if isinstance(value, dict) and value and all(k.startswith(UNION_PREFIX) for k in value):
        return next((v for v in value.values() if v is not None), None)
    return value


ANY = AnyType()
BOOL = ScalarType("bool")
INT = ScalarType("int")
DOUBLE = ScalarType("double")
STRING = ScalarType("string")
NULL = ScalarType("null")


def from_json(obj: Any) -> Type:
    if obj == "any":
        return ANY
    if isinstance(obj, str):
        return ScalarType(obj)
    if isinstance(obj, dict) and len(obj) == 1:
        (tag, val), = obj.items()
        if tag == "decimal":
            return ScalarType("decimal", val[0], val[1])
        if tag == "tuple":
            return TupleType(tuple((n, from_json(t)) for n, t in val))
        if tag in ("bag", "array"):
            return CollectionType(from_json(val), ordered=(tag == "array"))
        if tag == "union":
            return UnionType(tuple(from_json(t) for t in val))
    raise ValueError(f"not a type: {obj!r}")


def is_numeric(t: Type) -> bool:
    return isinstance(t, ScalarType) and t.kind in ("int", "double", "decimal")


def brief(t: Type, width: int = 60) -> str:
    """``str(t)``, cut to about ``width`` characters (a record type of many fields in a message)."""
    text = str(t)
    return text if len(text) <= width else text[: width - 2] + "…" + text[-1]


def unify(a: Type, b: Type) -> Type | None:
    """The type of a value that has type ``a`` or type ``b`` (a UNION ALL column, the branches
    of CASE, the items of an array constructor, the arguments of COALESCE, the operands of a
    comparison), or None when no one type holds both: a string and a number, tuples of other
    fields, a tuple and a scalar.

    Numbers widen as in arithmetic (int and double give double), tuples with the same field
    names field by field, collections element by element (a bag and an array give a bag);
    NULL and unknown (ANY) give way to the other type.
    """
    if a in (NULL, ANY):
        return b
    if b in (NULL, ANY) or a == b:
        return a
    if is_numeric(a) and is_numeric(b):
        kinds = {a.kind, b.kind}  # type: ignore[union-attr]
        if "double" in kinds:
            return DOUBLE
        return ScalarType("decimal", 38, 18) if "decimal" in kinds else INT
    if isinstance(a, TupleType) and isinstance(b, TupleType) and a.names == b.names:
        fields = [(n, unify(x, y)) for (n, x), (_, y) in zip(a.fields, b.fields)]
        return None if any(t is None for _, t in fields) else TupleType(tuple(fields))  # type: ignore[arg-type]
    if isinstance(a, CollectionType) and isinstance(b, CollectionType):
        element = unify(a.element, b.element)
        return None if element is None else CollectionType(element, a.ordered and b.ordered)
    return None


def widen(a: Type, b: Type) -> Type | None:
    """The type of a place holding values of type ``a`` and of type ``b`` (the branches of a CASE,
    the columns of a UNION ALL): :func:`unify` where that holds both, else a :class:`UnionType`
    of their alternatives, one per tag: records are one record of all their fields (those one
    lacks are MISSING in its values: the hidden list :data:`ABSENT_FIELD`), collections whose
    elements widen one collection; None for a type that cannot be an alternative."""
    u = unify(a, b)
    if u is not None:
        return u
    merged: dict[str, Type] = {}
    for t in _alternatives(a) + _alternatives(b):
        if t in (NULL, ANY):
            continue
        try:
            tag = union_tag(t)
        except ValueError:
            return None
        if tag in merged:
            m = _merge(merged[tag], t)
            if m is None:
                return None
            t = m
        merged[tag] = t
    if len(merged) < 2:
        return next(iter(merged.values()), None)
    return UnionType(tuple(merged[tag] for tag in UNION_TAGS if tag in merged))


def _alternatives(t: Type) -> list[Type]:
    return list(t.alternatives) if isinstance(t, UnionType) else [t]


def _merge(a: Type, b: Type) -> Type | None:
    """One type for two of one union tag (see :func:`widen`)."""
    u = unify(a, b)
    if u is not None:
        return u
    if isinstance(a, TupleType) and isinstance(b, TupleType) and sorted(a.names) == sorted(b.names):
        fields = [(n, widen(t, b.field(n))) for n, t in a.fields]  # type: ignore[arg-type]
        return None if any(t is None for _, t in fields) else TupleType(tuple(fields))  # type: ignore[arg-type]
    if isinstance(a, TupleType) and isinstance(b, TupleType):  # records of other fields: each may be MISSING
        names = [n for n in dict.fromkeys(a.names + b.names) if n != ABSENT_FIELD]
        fields = [(n, widen(a.field(n) or NULL, b.field(n) or NULL)) for n in names]
        if any(t is None for _, t in fields):
            return None
        return TupleType(tuple(fields) + ((ABSENT_FIELD, CollectionType(STRING)),))  # type: ignore[arg-type]
    if isinstance(a, CollectionType) and isinstance(b, CollectionType):
        element = widen(a.element, b.element)
        return None if element is None else CollectionType(element, a.ordered and b.ordered)
    return None


def common_type(a: Type, b: Type) -> Type:
    """:func:`unify`, or ``a`` for types that do not unify (where the builder has already
    refused such a mixture, or a plan of ours only needs a type for ``a``'s values)."""
    u = unify(a, b)
    return a if u is None else u


def comparable(a: Type, b: Type) -> bool:
    """Whether values of types ``a`` and ``b`` can be compared (``=``, ``<``, ``IN``): types
    that :func:`unify`, and dates and timestamps with strings (the string is read as a date)."""
    if unify(a, b) is not None:
        return True
    temporal = {"date", "timestamp"}
    kinds = {t.kind for t in (a, b) if isinstance(t, ScalarType)}
    return len(kinds) == 2 and "string" in kinds and bool(kinds & temporal)


def from_arrow(arrow_type) -> Type:
    """Convert a pyarrow DataType (or Schema, giving a TupleType) to a Type."""
    import pyarrow as pa

    if isinstance(arrow_type, pa.Schema):
        return TupleType(tuple((f.name, from_arrow(f.type)) for f in arrow_type))
    t = arrow_type
    if pa.types.is_boolean(t):
        return BOOL
    if pa.types.is_integer(t):
        return INT
    if pa.types.is_floating(t):
        return DOUBLE
    if pa.types.is_decimal(t):
        return ScalarType("decimal", t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return STRING
    if pa.types.is_date(t):
        return ScalarType("date")
    if pa.types.is_timestamp(t):
        return ScalarType("timestamp")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return ScalarType("binary")
    if pa.types.is_null(t):
        return NULL
    if pa.types.is_struct(t) and t.num_fields and all(t.field(i).name.startswith(UNION_PREFIX)
                                                        for i in range(t.num_fields)):
        return UnionType(tuple(from_arrow(t.field(i).type) for i in range(t.num_fields)))
    if pa.types.is_struct(t):
        return TupleType(tuple((t.field(i).name, from_arrow(t.field(i).type)) for i in range(t.num_fields)))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return CollectionType(from_arrow(t.value_type), ordered=False)
    raise ValueError(f"unsupported Arrow type {t}")


def declared(t: Type, open_paths: Iterable[str]) -> Type:
    """``t``, the type of a declared schema, with its records at ``open_paths`` open and the
    others closed (paths as a declared schema names them: ``""`` the row, ``address``,
    ``parts[]`` the elements of an array, ``parts[].spec``)."""
    def walk(t: Type, here: str) -> Type:
        if isinstance(t, TupleType):
            inner = tuple((n, walk(ft, f"{here}.{n}" if here else n)) for n, ft in t.fields)
            return TupleType(inner, open=here in wanted, closed=here not in wanted)
        if isinstance(t, CollectionType):
            return CollectionType(walk(t.element, f"{here}[]"), t.ordered)
        return t

    wanted = frozenset(open_paths)
    return walk(t, "")


def to_arrow(t: Type):
    """Convert a Type to a pyarrow DataType (TupleType -> struct)."""
    import pyarrow as pa

    if isinstance(t, ScalarType):
        return {
            "bool": pa.bool_(), "int": pa.int64(), "double": pa.float64(),
            "string": pa.string(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
            "binary": pa.binary(), "null": pa.null(),
        }.get(t.kind) or pa.decimal128(t.precision, t.scale)
    if isinstance(t, TupleType):
        return pa.struct([pa.field(n, to_arrow(ft)) for n, ft in t.fields])
    if isinstance(t, CollectionType):
        return pa.list_(to_arrow(t.element))
    if isinstance(t, UnionType):
        return pa.struct([pa.field(UNION_PREFIX + union_tag(a), to_arrow(a)) for a in t.alternatives])
    raise ValueError(f"type {t} has no Arrow equivalent")


def arrow_schema(t: TupleType):
    import pyarrow as pa

    return pa.schema([pa.field(n, to_arrow(ft)) for n, ft in t.fields])
