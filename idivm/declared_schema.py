"""Declared schemas of base tables: SQL++ DDL-like text or a JSON Schema → Arrow schema.

Input: the text a user declares a table's schema with (``table create --schema``,
``Warehouse.create_table(schema=...)``), in one of two languages:

* **DDL** (grammar ``grammars/schema.lark``), after AsterixDB's ``CREATE TYPE``::

      id BIGINT, name STRING, tags ARRAY<STRING>, address {city STRING, zip STRING}
      CLOSED {id BIGINT, price DECIMAL(10,2), parts [CLOSED {pid INT, qty INT}]}

  Fields are ``name [:] type [?]`` (``?``, AsterixDB's optional marker, is accepted and changes
  nothing: every declared field may be absent or null, except the key).  Types: BOOLEAN,
  TINYINT, SMALLINT, INT/INTEGER, BIGINT, FLOAT, DOUBLE, DECIMAL(p,s) (DECIMAL alone is
  DECIMAL(10,0)), STRING/VARCHAR, DATE, TIMESTAMP/DATETIME, BINARY; ``ARRAY<T>`` or ``[T]``
  and ``MULTISET<T>`` or ``{{T}}`` (both stored as Delta arrays); records ``{...}``,
  ``OPEN {...}`` or ``CLOSED {...}``.  The whole schema may be one record (``CLOSED {...}``).
* **JSON Schema** (a file ending ``.json``, or text starting with ``{"``): an object with
  ``properties``; ``integer`` → BIGINT, ``number`` → DOUBLE, ``string`` (``format`` ``date`` →
  DATE, ``date-time`` → TIMESTAMP, ``contentEncoding`` ``base64`` → BINARY), ``boolean``,
  ``array`` with ``items``, ``object`` with ``properties``; ``"type": [T, "null"]`` is T.
  ``additionalProperties: false`` makes an object closed.  Every record is also validated
  against the JSON Schema as a whole (``required``, ``enum``, ``minimum``, ``pattern``, ...).

Output: a :class:`DeclaredSchema`: the text as written, its language, the Delta-ready Arrow
schema and the paths of its open records.

Open and closed records (as in AsterixDB): a closed record allows no other fields — a
record that has one is bad (ingest quarantines it, ``create_table`` refuses its data).  An
open record (the default) accepts other fields, which are *not stored* (no column holds
them) and are reported: ``create_table``'s and ingest's results count them per field path,
and the ingest commit records them in its metadata (``idivm.undeclared``).

Errors are one line with a position: ``schema:1:17: unknown type STRNG; did you mean
STRING?`` (:class:`~idivm.errors.SqlppSyntaxError` for malformed DDL,
:class:`~idivm.errors.SemanticError` for unknown types and other misuse,
:class:`~idivm.errors.DataError` for an unreadable file or invalid JSON).
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from idivm import types as T
from idivm.errors import DataError, SemanticError, Span, SqlppSyntaxError
from idivm.grammars import acceptable, parse_text, read_grammar
from idivm.catalog import name_problem

__all__ = ["LANGUAGES", "DeclaredSchema", "parse_schema", "read_schema", "path_text"]

LANGUAGES = ("ddl", "json-schema")
#: the file name errors in schema text given inline print
INLINE = "schema"

TIMESTAMP = pa.timestamp("us", tz="UTC")
#: DDL type names (upper case) and their Arrow types
SCALAR_TYPES: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(), "BOOL": pa.bool_(),
    "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(), "INTEGER": pa.int32(), "BIGINT": pa.int64(),
    "FLOAT": pa.float32(), "DOUBLE": pa.float64(),
    "STRING": pa.string(), "VARCHAR": pa.string(),
    "DATE": pa.date32(), "TIMESTAMP": TIMESTAMP, "DATETIME": TIMESTAMP,
    "BINARY": pa.binary(),
}
DECIMAL_TYPES = ("DECIMAL", "NUMERIC")
COLLECTION_TYPES = ("ARRAY", "MULTISET")
DEFAULT_DECIMAL = (10, 0)


@dataclass(frozen=True, slots=True)
class DeclaredSchema:
    """A table's declared schema: ``text`` as written, its ``language`` (``ddl`` or
    ``json-schema``), the Delta-ready Arrow schema and the paths of its open records
    (:func:`path_text`: ``""`` the row itself, ``address``, ``parts[]`` the records in
    array ``parts``).  ``document`` is the parsed JSON Schema (None for DDL)."""

    text: str
    language: str
    arrow: pa.Schema = field(compare=False)
    open_records: frozenset[str]
    document: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.language not in LANGUAGES:
            raise ValueError(f"unknown schema language {self.language!r}")

    @property
    def type(self) -> T.TupleType:
        """The idivm type of the declared rows."""
        result = T.from_arrow(self.arrow)
        assert isinstance(result, T.TupleType)
        return result

    @property
    def open(self) -> bool:
        """Whether rows may carry fields the schema does not declare."""
        return "" in self.open_records

    def to_json(self) -> dict[str, str]:
        """What the catalog stores: the language and the text as written."""
        return {"language": self.language, "text": self.text}

    @classmethod
    def from_json(cls, obj: dict[str, str]) -> "DeclaredSchema":
        return parse_schema(obj["text"], language=obj["language"])

    def record_problem(self) -> Callable[[Any], str | None] | None:
        """For a JSON Schema: a function giving why a record (a JSON object) breaks it, or None
        when it does not; None for DDL (whose types say all)."""
        if self.document is None:
            return None
        return _record_validator(self.text)

    def summary(self) -> str:
        """``DDL, open`` / ``JSON Schema, closed; open records inside: address``: the language
        and which records accept undeclared fields."""
        language = "DDL" if self.language == "ddl" else "JSON Schema"
        nested = sorted(p for p in self.open_records if p)
        top = "open" if self.open else "closed"
        return f"{language}, {top}" + (f"; open records inside: {', '.join(nested)}" if nested else "")


def path_text(steps: tuple[str, ...]) -> str:
    """``("address", "phones", "[]")`` → ``address.phones[]``: names joined by ``.``, ``[]``
    (the elements of an array) appended, as ingest names nested columns."""
    out = ""
    for step in steps:
        out += step if step == "[]" or not out else f".{step}"
    return out


def read_schema(schema: "str | os.PathLike | DeclaredSchema") -> DeclaredSchema:
    """A declared schema given as text, as the path of a file holding it (a
    :class:`os.PathLike`, or a one-line string naming an existing file, or without spaces and
    with a ``/`` or a file extension: ``orders.json``, ``schemas/orders.ddl``), or already
    parsed."""
    if isinstance(schema, DeclaredSchema):
        return schema
    if isinstance(schema, os.PathLike) or (isinstance(schema, str) and _names_a_file(schema.strip())):
        path = os.fspath(schema).strip()
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"cannot read schema {path}: {e.strerror if isinstance(e, OSError) else e}") from None
        return parse_schema(text, path, "json-schema" if path.lower().endswith(".json") else None)
    if not isinstance(schema, str):
        raise DataError(f"a schema is text or a file path, not a {type(schema).__name__}")
    return parse_schema(schema)


def _names_a_file(text: str) -> bool:
    if not text or "\n" in text:
        return False
    return os.path.isfile(text) or (not re.search(r"\s", text) and ("/" in text or re.search(r"\.\w+$", text)))


def parse_schema(text: str, filename: str | None = None, language: str | None = None) -> DeclaredSchema:
    """Parse schema ``text`` (of file ``filename``; errors name ``schema`` when None) in
    ``language``, by default DDL unless the text starts with ``{"`` (a JSON object)."""
    if language is None:
        stripped = text.lstrip()
        language = "json-schema" if stripped.startswith("{") and stripped[1:].lstrip().startswith('"') else "ddl"
    filename = filename or INLINE
    if language == "ddl":
        arrow, open_records = parse_text(text, filename, lambda t: _lark().parse(t), lambda e: _syntax_error(e, text),
                                         _ToSchema().transform)
        return DeclaredSchema(text, "ddl", arrow, open_records)
    if language == "json-schema":
        document, arrow, open_records = _json_schema(text, filename)
        return DeclaredSchema(text, "json-schema", arrow, open_records, document)
    raise ValueError(f"unknown schema language {language!r}")


# ----------------------------------------------------------------------------- DDL


@functools.cache
def _lark() -> Lark:
    return Lark(read_grammar("schema", __file__), parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=False)


_TERMINALS = {
    "NAME": "a name", "QUOTED_NAME": "a `quoted name`", "INT": "a number", "OPEN": "OPEN", "CLOSED": "CLOSED",
    "OPTIONAL": "'?'", "COMMA": "','", "COLON": "':'", "LPAR": "'('", "RPAR": "')'", "LESSTHAN": "'<'",
    "MORETHAN": "'>'", "LSQB": "'['", "RSQB": "']'", "LBRACE": "'{'", "RBRACE": "'}'", "$END": "the end",
}


def _syntax_error(e: UnexpectedInput, text: str) -> SqlppSyntaxError:
    expected = sorted(_terminal_text(t) for t in acceptable(e))
    wanted = f"; expected {', '.join(expected)}" if expected else ""
    if isinstance(e, UnexpectedCharacters):
        char = text[e.pos_in_stream] if e.pos_in_stream is not None else "?"
        return SqlppSyntaxError(f"unexpected character {char!r}{wanted}", Span(e.line, e.column))
    tok = getattr(e, "token", None)
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and tok is not None and tok.type == "$END"):
        lines = text.split("\n")
        return SqlppSyntaxError(f"unexpected end of the schema{wanted}", Span(len(lines), len(lines[-1]) + 1))
    if isinstance(e, UnexpectedToken) and tok is not None:
        return SqlppSyntaxError(f"unexpected {tok.value!r}{wanted}", _span(tok))
    return SqlppSyntaxError(f"syntax error: {str(e).splitlines()[0]}")  # pragma: no cover - lark's other cases


def _terminal_text(name: str) -> str:
    if name in _TERMINALS:
        return _TERMINALS[name]
    try:
        return repr(_lark().get_terminal(name).pattern.value)
    except KeyError:  # pragma: no cover - every terminal is a name above or a literal
        return name


def _span(tok: Token) -> Span:
    return Span(tok.line, tok.column, tok.end_line, tok.end_column)


@dataclass(frozen=True, slots=True)
class _Declared:
    """A declared type while parsing: its Arrow type and the open records in it (paths as
    steps, relative to it; ``()`` is the type itself)."""

    arrow: pa.DataType
    open_records: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    declared: _Declared
    span: Span


class _ToSchema(Transformer):
    """Parse tree → (Arrow schema, open record paths)."""

    def top_fields(self, items):
        return _top(_record_type(items[0], open=True))

    def top_record(self, items):
        return _top(items[0])

    def fields(self, items):
        seen: dict[str, str] = {}
        for f in items:
            low = f.name.lower()
            if low in seen:
                same = "twice" if seen[low] == f.name else f"twice (as {seen[low]!r}; names differ only in case)"
                raise SemanticError(f"field {f.name!r} declared {same}", f.span)
            seen[low] = f.name
        return list(items)

    def field(self, items):
        (name, span), declared = items[0], items[1]
        return _Field(name, declared, span)

    def bare_name(self, items):
        (tok,) = items
        return _checked_name(str(tok), _span(tok)), _span(tok)

    def quoted_name(self, items):
        (tok,) = items
        name = str(tok)[1:-1].replace("\\`", "`").replace("\\\\", "\\")
        return _checked_name(name, _span(tok)), _span(tok)

    def named_type(self, items):
        (tok,) = items
        name = str(tok).upper()
        if name in SCALAR_TYPES:
            return _Declared(SCALAR_TYPES[name])
        if name in DECIMAL_TYPES:
            return _Declared(pa.decimal128(*DEFAULT_DECIMAL))
        if name in COLLECTION_TYPES:
            raise SemanticError(f"{name} needs its element type, e.g. {name}<STRING>", _span(tok))
        raise SemanticError(_unknown_type(str(tok)), _span(tok))

    def sized_type(self, items):
        tok, *sizes = items
        name = str(tok).upper()
        if name not in DECIMAL_TYPES:
            known = name in SCALAR_TYPES or name in COLLECTION_TYPES
            raise SemanticError(f"type {name} takes no size" if known else _unknown_type(str(tok)), _span(tok))
        precision = int(sizes[0])
        scale = int(sizes[1]) if len(sizes) > 1 else 0
        if not 1 <= precision <= 38:
            raise SemanticError(f"{name}({precision}): the precision must be 1 to 38 digits", _span(sizes[0]))
        if scale > precision:
            raise SemanticError(f"{name}({precision},{scale}): the scale must not exceed the precision",
                                _span(sizes[1]))
        return _Declared(pa.decimal128(precision, scale))

    def generic_type(self, items):
        tok, element = items
        if str(tok).upper() not in COLLECTION_TYPES:
            raise SemanticError(f"{tok}<...> is not a type; collections are ARRAY<T> and MULTISET<T>", _span(tok))
        return _collection(element)

    def array_type(self, items):
        return _collection(items[0])

    multiset_type = array_type

    @v_args(meta=True)
    def record(self, meta, items):
        kind = items[0] if items and isinstance(items[0], str) else "OPEN"
        fields = items[-1] if items and isinstance(items[-1], list) else []
        if not fields:
            raise SemanticError("a record needs at least one field (Delta Lake cannot store an empty one)",
                                Span(meta.line, meta.column, meta.end_line, meta.end_column))
        return _record_type(fields, open=kind == "OPEN")

    def record_kind(self, items):
        return str(items[0]).upper()


def _top(declared: _Declared) -> tuple[pa.Schema, frozenset[str]]:
    """The Arrow schema of the top-level record ``declared``, and its open records' paths."""
    struct = declared.arrow
    return (pa.schema([struct.field(i) for i in range(struct.num_fields)]),
            frozenset(path_text(p) for p in declared.open_records))


def _record_type(fields: list[_Field], open: bool) -> _Declared:
    struct = pa.struct([pa.field(f.name, f.declared.arrow) for f in fields])
    paths = [()] if open else []
    for f in fields:
        paths += [(f.name, *p) for p in f.declared.open_records]
    return _Declared(struct, tuple(paths))


def _collection(element: _Declared) -> _Declared:
    return _Declared(pa.list_(element.arrow), tuple(("[]", *p) for p in element.open_records))


def _checked_name(name: str, span: Span) -> str:
    problem = name_problem(name, path_safe=False)
    if problem is not None:
        raise SemanticError(f"field name {name!r} is not allowed: {problem}", span)
    return name


def _unknown_type(name: str) -> str:
    known = [*SCALAR_TYPES, *DECIMAL_TYPES, *COLLECTION_TYPES]
    close = difflib.get_close_matches(name.upper(), known, n=1)
    return f"unknown type {name}" + (f"; did you mean {close[0]}?" if close else
                                      f" (types: {', '.join(known)}, records {{...}})")


# ----------------------------------------------------------------------------- JSON Schema


def _json_schema(text: str, filename: str) -> tuple[Any, pa.Schema, frozenset[str]]:
    import jsonschema

    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"invalid JSON: {e.msg}", Span(e.lineno, e.colno)).with_source(text, filename) from None
    try:
        jsonschema.validators.validator_for(document).check_schema(document)
    except jsonschema.SchemaError as e:
        where = "/" + "/".join(map(str, e.path)) if e.path else "the top"
        raise SemanticError(f"{filename}: not a valid JSON Schema: {e.message} (at {where})") from None
    declared = _json_type(document, (), filename)
    if not pa.types.is_struct(declared.arrow):
        raise SemanticError(f"{filename}: a table's JSON Schema describes objects (\"type\": \"object\" with "
                            "\"properties\")")
    return (document, *_top(declared))


def _json_type(node: Any, pointer: tuple[str, ...], filename: str) -> _Declared:
    where = "/" + "/".join(pointer) if pointer else "the top"

    def fail(problem: str) -> SemanticError:
        return SemanticError(f"{filename}: {where}: {problem}")

    if not isinstance(node, dict):
        raise fail("idivm needs a schema object with a \"type\" here")
    if "$ref" in node:
        raise fail("\"$ref\" is not supported: write the referenced schema in place")
    kind = node.get("type")
    if kind is None:
        kind = "object" if "properties" in node else "array" if "items" in node else None
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise fail(f"\"type\": {json.dumps(kind)}: a column has one type (and may be null)")
        kind = kinds[0]
    if kind is None:
        raise fail("no \"type\": idivm needs one type per field")
    if kind == "integer":
        return _Declared(pa.int64())
    if kind == "number":
        return _Declared(pa.float64())
    if kind == "boolean":
        return _Declared(pa.bool_())
    if kind == "string":
        if node.get("contentEncoding") == "base64":
            return _Declared(pa.binary())
        return _Declared({"date": pa.date32(), "date-time": TIMESTAMP}.get(node.get("format"), pa.string()))
    if kind == "array":
        items = node.get("items")
        if not isinstance(items, dict):
            raise fail("an array needs \"items\": the schema of its elements")
        return _collection(_json_type(items, (*pointer, "items"), filename))
    if kind == "object":
        properties = node.get("properties")
        if not properties:
            raise fail("an object needs \"properties\" (Delta Lake cannot store an object without fields)")
        fields = []
        for name, sub in properties.items():
            _checked_name(name, None)
            fields.append(_Field(name, _json_type(sub, (*pointer, "properties", name), filename), None))
        return _record_type(fields, node.get("additionalProperties", True) is not False)
    raise fail(f"type {kind!r} cannot be stored")


@functools.lru_cache(maxsize=16)
def _record_validator(text: str) -> Callable[[Any], str | None]:
    import jsonschema

    document = json.loads(text)
    validator = jsonschema.validators.validator_for(document)(document)

    def problem(record: Any) -> str | None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(record))
        if error is None:
            return None
        where = "/" + "/".join(map(str, error.absolute_path)) if error.absolute_path else "the record"
        return f"breaks the JSON Schema at {where}: {error.message}"

    return problem
