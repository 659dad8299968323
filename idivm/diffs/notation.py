"""The thesis' notation for i-diffs and signatures: parser and printer.

Input of the parsers: text as the examples of thesis §2.9, §2.12 and §2.14.2 write it.
Output: :mod:`idivm.diffs.instances` / :mod:`idivm.diffs.signatures` values.  The
printers write the same notation back, so ``parse_idiff(format_idiff(d)) == d``.

Grammar (``grammars/idiff.lark``, LALR, contextual lexer).  Instances (§2.12.1)::

    document   := '<' name ':' idiff '>'          a named i-diff (a base table, Example 2.14.2)
                | bag_diff                        the i-diff of a view (Δ^V of §2.9)
                | idiff
    idiff      := provenance? '{' field (',' field)* '}'
                | provenance '<' field (',' field)* '>'   the thesis also typesets #() < ... >
    field      := 'type' ':' (insert | delete | update)
                | 'pre' ':' value | 'post' ':' value
                | 'diff' ':' (bag_diff | tuple_diff)
    bag_diff   := '{{' (idiff (',' idiff)*)? '}}'       every element has its provenance
    tuple_diff := '{' (name ':' idiff (',' name ':' idiff)*)? '}'   no provenance there
    provenance := '#(' (name '=' atom (',' name '=' atom)*)? ')'

Values (Fig. 2.13 without arrays, MISSING and enriched values): ``null``, ``true``,
``false``, JSON numbers, strings in ``'...'`` or ``"..."`` (JSON escapes), tuples
``{name: value, ...}`` and bags ``{{value, ...}}``.  Names are identifiers or quoted
strings.  A provenance value may also be a bare word (``#(uid=Ha3i)``): a bare word that
reads as a JSON number is a number, ``true``/``false``/``null`` are those, anything else
is a string.

Signatures (§2.12.2)::

    document   := '<' name ':' root '>' | root
    root       := key_names body                   key names of the root bag's elements
    body       := '{' (item (',' item)*)? '}'
    item       := 'type' ':' name | 'pre' | 'post'
                | 'diff' ':' key_names? body
                | key_names? name ':' body           an attribute
    key_names  := '#(' (name (',' name)*)? ')'

A body lists either parts (type, pre, post, diff) or attributes; attributes alone are
short for ``{type: update, diff: {attributes}}``, and a missing type means update
(Example 2.12.1 writes ``{ post }`` and ``{ user_id: { post } }``).  ``#(uid)
full_reviews: {type: update, diff: E}`` marks ``full_reviews`` as a bag whose elements
have provenance keys ``uid`` and follow ``E``; ``diff: #(uid) E`` says the same where
there is no attribute to prefix.

Errors: text that does not follow the grammar raises
:class:`~idivm.errors.SqlppSyntaxError` (the notation is SQL++'s value syntax, Fig. 2.13);
well-formed text that describes an invalid i-diff (an insert with a pre, a duplicate
part, an unknown type) raises :class:`~idivm.errors.DataError`.  Both carry the line and
column and the source text; ``one_line()`` is ``line:col: message``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from idivm.diffs.instances import (
    ABSENT, BagDiff, DiffType, IDiff, IDiffDocument, NamedDiff, Provenance, TupleDiff, format_idiff, format_provenance,
)
from idivm.diffs.signatures import BagSignature, RootSignature, SignatureNode, TupleSignature, format_signature
from idivm.diffs.values import JSON_NUMBER, FrozenBag, FrozenTuple, format_value
from idivm.errors import DataError, Span, SqlppSyntaxError
from idivm.grammars import acceptable, parse_text, read_grammar

__all__ = [
    "GRAMMAR",
    "format_idiff",
    "format_provenance",
    "format_signature",
    "format_value",
    "parse_idiff",
    "parse_signature",
    "parse_value",
]

#: the grammar of the notation (``grammars/idiff.lark``)
GRAMMAR = read_grammar("idiff", __file__)


_TERMINAL_NAMES = {
    "NAME": "a name", "STRING": "a string", "NUMBER": "a number", "ATOM": "a provenance value",
    "LBRACE": "'{'", "RBRACE": "'}'", "LESSTHAN": "'<'", "MORETHAN": "'>'", "COMMA": "','",
    "COLON": "':'", "EQUAL": "'='", "HASH": "'#'", "LPAR": "'('", "RPAR": "')'",
    "TYPE": "'type'", "PRE": "'pre'", "POST": "'post'", "DIFF": "'diff'",
    "TRUE": "'true'", "FALSE": "'false'", "NULL": "'null'",
}


# ----------------------------------------------------------------------------- public API


def parse_idiff(text: str, filename: str | None = None) -> IDiffDocument:
    """Parse an i-diff instance document: ``<name: {...}>``, ``{{ ... }}`` or ``#(p) {...}``."""
    return _parse(text, "idiff_document", filename)


def parse_signature(text: str, filename: str | None = None) -> RootSignature:
    """Parse a signature tree: ``#(keys) {...}`` or ``<name: #(keys) {...}>``."""
    return _parse(text, "signature_document", filename)


def parse_value(text: str, filename: str | None = None) -> Any:
    """Parse one value (``'x'``, ``2014``, ``{a: 1}``, ``{{1, 2}}``) into its frozen form."""
    return _parse(text, "value_document", filename)


# ----------------------------------------------------------------------------- parsing


@functools.cache
def _lark() -> Lark:
    return Lark(GRAMMAR, parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=False,
                start=["idiff_document", "signature_document", "value_document"])


def _parse(text: str, start: str, filename: str | None) -> Any:
    return parse_text(text, filename, lambda t: _lark().parse(t, start=start),
                      lambda e: _syntax_error(e, text), _ToModel().transform)


def _syntax_error(e: UnexpectedInput, text: str) -> SqlppSyntaxError:
    if isinstance(e, UnexpectedCharacters):
        char = text[e.pos_in_stream] if e.pos_in_stream is not None else "?"
        expected = _describe_expected(acceptable(e, getattr(e, "allowed", None) or set()))
        more = f"; expected {expected}" if expected else ""
        return SqlppSyntaxError(f"unexpected character {char!r}{more}", Span(e.line, e.column, e.line, e.column + 1))
    if isinstance(e, UnexpectedEOF):
        line, col = _end_position(text)
        return SqlppSyntaxError(f"unexpected end of input; expected {_describe_expected(acceptable(e, e.expected))}",
                                Span(line, col, line, col))
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = _describe_expected(acceptable(e, e.expected))
        if tok.type == "$END":
            line, col = _end_position(text)
            return SqlppSyntaxError(f"unexpected end of input; expected {expected}", Span(line, col, line, col))
        return SqlppSyntaxError(f"unexpected {_describe_token(tok)}; expected {expected}", _token_span(tok))
    return SqlppSyntaxError(f"syntax error: {str(e).splitlines()[0]}")  # pragma: no cover - lark's other cases


def _end_position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def _describe_expected(terminals: set[str] | frozenset[str]) -> str:
    names = sorted({_TERMINAL_NAMES.get(t, t) for t in terminals if not t.startswith("__")})
    if not names:
        return "something else"
    if len(names) == 1:
        return names[0]
    return "one of " + ", ".join(names)


def _describe_token(tok: Token) -> str:
    text = tok.value if len(tok.value) <= 30 else tok.value[:29] + "…"
    if tok.type == "STRING":
        return f"string {text}"
    if tok.type == "NUMBER":
        return f"number {text}"
    return repr(text)


def _token_span(tok: Token) -> Span:
    return Span(tok.line, tok.column, tok.end_line, tok.end_column)


def _meta_span(meta: Any) -> Span | None:
    if getattr(meta, "empty", True):
        return None
    return Span(meta.line, meta.column, meta.end_line, meta.end_column)


def _unquote(tok: Token) -> str:
    body = tok.value[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = body[i + 1]
        simple = {"\\": "\\", "'": "'", '"': '"', "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
        if esc in simple:
            out.append(simple[esc])
            i += 2
        elif esc == "u":
            digits = body[i + 2:i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise SqlppSyntaxError(r"bad escape sequence: \u needs 4 hex digits", _token_span(tok))
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            raise SqlppSyntaxError(f"unknown escape sequence '\\{esc}'", _token_span(tok))
    return "".join(out)


def _number(tok: Token) -> int | float:
    text = tok.value
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", text):
        return int(text)
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise DataError(f"number {text} is out of range", _token_span(tok))
    return value


@dataclass(frozen=True, slots=True)
class _Located:
    """A parsed piece and where it was."""

    value: Any
    span: Span | None


@dataclass(frozen=True, slots=True)
class _KeyNames:
    """``#(k1, ..., km)`` of a signature and where it was."""

    names: tuple[str, ...]
    span: Span | None


@dataclass(frozen=True, slots=True)
class _Part:
    """One ``type``/``pre``/``post``/``diff`` part of an i-diff or signature body, or an attribute."""

    kind: str
    value: Any
    span: Span | None
    names: tuple[str, ...] | None = None   # signatures: #(keys) before a diff or attribute
    name: str | None = None                # signatures: the attribute name


def _located(build: Callable[[], Any], span: Span | None) -> Any:
    """Run a model constructor, giving its :class:`DataError` the position of the text."""
    try:
        return build()
    except DataError as e:
        if e.span is None:
            raise DataError(e.message, span) from None
        raise


class _ToModel(Transformer):
    """Parse tree → model values.  Rules with ``meta`` report positions in their errors."""

    # -- names, scalars, values ------------------------------------------------------------

    def bare_name(self, children: list[Token]) -> str:
        return str(children[0])

    def quoted_name(self, children: list[Token]) -> str:
        return _unquote(children[0])

    def string(self, children: list[Token]) -> str:
        return _unquote(children[0])

    def number(self, children: list[Token]) -> int | float:
        return _number(children[0])

    def true(self, _: list[Any]) -> bool:
        return True

    def false(self, _: list[Any]) -> bool:
        return False

    def null(self, _: list[Any]) -> None:
        return None

    @v_args(meta=True)
    def value_field(self, meta: Any, children: list[Any]) -> _Part:
        return _Part("field", children[1], _meta_span(meta), name=children[0])

    @v_args(meta=True)
    def tuple_value(self, meta: Any, children: list[_Part]) -> FrozenTuple:
        seen: set[str] = set()
        for part in children:
            if part.name in seen:
                raise DataError(f"duplicate attribute {part.name!r} in a tuple", part.span)
            seen.add(part.name)  # type: ignore[arg-type]
        return FrozenTuple(tuple((p.name, p.value) for p in children))  # type: ignore[misc]

    def bag_value(self, children: list[Any]) -> FrozenBag:
        return FrozenBag(children)

    def value_document(self, children: list[Any]) -> Any:
        return children[0]

    # -- provenance ------------------------------------------------------------------------

    def quoted_atom(self, children: list[Token]) -> str:
        return _unquote(children[0])

    def bare_atom(self, children: list[Token]) -> Any:
        text = str(children[0])
        if JSON_NUMBER.match(text):
            return _number(children[0])
        return {"true": True, "false": False, "null": None}.get(text, text)

    @v_args(meta=True)
    def provenance_pair(self, meta: Any, children: list[Any]) -> _Part:
        return _Part("pair", children[1], _meta_span(meta), name=children[0])

    @v_args(meta=True)
    def provenance(self, meta: Any, children: list[_Part]) -> _Located:
        seen: set[str] = set()
        for part in children:
            if part.name in seen:
                raise DataError(f"duplicate provenance key {part.name!r}", part.span)
            seen.add(part.name)  # type: ignore[arg-type]
        span = _meta_span(meta)
        return _Located(_located(lambda: Provenance(tuple((p.name, p.value) for p in children)), span), span)

    # -- i-diff instances ------------------------------------------------------------------

    @v_args(meta=True)
    def type_field(self, meta: Any, children: list[Any]) -> _Part:
        span = _meta_span(meta)
        return _Part("type", _located(lambda: DiffType.of(children[0], "type"), span), span)

    @v_args(meta=True)
    def pre_field(self, meta: Any, children: list[Any]) -> _Part:
        return _Part("pre", children[0], _meta_span(meta))

    @v_args(meta=True)
    def post_field(self, meta: Any, children: list[Any]) -> _Part:
        return _Part("post", children[0], _meta_span(meta))

    @v_args(meta=True)
    def diff_field(self, meta: Any, children: list[Any]) -> _Part:
        return _Part("diff", children[0], _meta_span(meta))

    @v_args(meta=True)
    def idiff(self, meta: Any, children: list[Any]) -> _Located:
        span = _meta_span(meta)
        provenance = None
        if children and isinstance(children[0], _Located):
            provenance = children[0].value
            children = children[1:]
        parts: dict[str, _Part] = {}
        for part in children:
            if part.kind in parts:
                raise DataError(f"duplicate {part.kind!r} in an i-diff", part.span)
            parts[part.kind] = part
        if "type" not in parts:
            raise DataError("an i-diff needs a type (insert, delete or update)", span)
        return _Located(_located(lambda: IDiff(
            parts["type"].value,
            provenance,
            pre=parts["pre"].value if "pre" in parts else ABSENT,
            post=parts["post"].value if "post" in parts else ABSENT,
            diff=parts["diff"].value if "diff" in parts else None,
        ), span), span)

    def bag_diff(self, children: list[_Located]) -> BagDiff:
        for element in children:
            if element.value.provenance is None:
                raise DataError("an element of a bag diff needs its provenance #(...) (§2.12.1)", element.span)
        return BagDiff(tuple(e.value for e in children))

    @v_args(meta=True)
    def attribute_diff(self, meta: Any, children: list[Any]) -> _Part:
        name, node = children
        if node.value.provenance is not None:
            raise DataError(f"the i-diff of attribute {name!r} has no provenance: its name identifies it (§2.12.1)",
                            node.span)
        return _Part("attribute", node.value, _meta_span(meta), name=name)

    def tuple_diff(self, children: list[_Part]) -> TupleDiff:
        seen: set[str] = set()
        for part in children:
            if part.name in seen:
                raise DataError(f"duplicate attribute {part.name!r} in a tuple diff", part.span)
            seen.add(part.name)  # type: ignore[arg-type]
        return TupleDiff(tuple((p.name, p.value) for p in children))  # type: ignore[misc]

    @v_args(meta=True)
    def named_idiff(self, meta: Any, children: list[Any]) -> NamedDiff:
        name, node = children
        if node.value.provenance is not None:
            raise DataError(f"the i-diff of {name!r} has no provenance: its name identifies it", node.span)
        return NamedDiff(name, node.value)

    def idiff_document(self, children: list[Any]) -> IDiffDocument:
        child = children[0]
        return child.value if isinstance(child, _Located) else child

    # -- signatures ------------------------------------------------------------------------

    @v_args(meta=True)
    def key_names(self, meta: Any, children: list[str]) -> _KeyNames:
        span = _meta_span(meta)
        if len(set(children)) != len(children):
            raise DataError("duplicate provenance key name", span)
        return _KeyNames(tuple(children), span)

    @v_args(meta=True)
    def signature_type(self, meta: Any, children: list[Any]) -> _Part:
        span = _meta_span(meta)
        return _Part("type", _located(lambda: DiffType.of(children[0], "type"), span), span)

    @v_args(meta=True)
    def signature_pre(self, meta: Any, _: list[Any]) -> _Part:
        return _Part("pre", True, _meta_span(meta))

    @v_args(meta=True)
    def signature_post(self, meta: Any, _: list[Any]) -> _Part:
        return _Part("post", True, _meta_span(meta))

    @v_args(meta=True)
    def signature_diff(self, meta: Any, children: list[Any]) -> _Part:
        names = children[0].names if isinstance(children[0], _KeyNames) else None
        return _Part("diff", children[-1], _meta_span(meta), names=names)

    @v_args(meta=True)
    def signature_attribute(self, meta: Any, children: list[Any]) -> _Part:
        names = children[0].names if isinstance(children[0], _KeyNames) else None
        return _Part("attribute", children[-1], _meta_span(meta), names=names, name=children[-2])

    @v_args(meta=True)
    def signature_body(self, meta: Any, children: list[_Part]) -> _Located:
        return _Located(tuple(children), _meta_span(meta))

    @v_args(meta=True)
    def root_signature(self, meta: Any, children: list[Any]) -> RootSignature:
        names, body = children
        element = _signature_node(body)
        return _located(lambda: RootSignature(names.names, element), _meta_span(meta))

    @v_args(meta=True)
    def named_signature(self, meta: Any, children: list[Any]) -> RootSignature:
        name, root = children
        return RootSignature(root.provenance, root.element, name)

    def signature_document(self, children: list[Any]) -> RootSignature:
        return children[0]


def _signature_node(body: _Located, element_keys: _Part | None = None) -> SignatureNode:
    """Build the signature of a body.  ``element_keys``: the attribute carrying this body was
    written ``#(keys) name: {...}``, so the body is a bag whose ``diff`` is the element signature."""
    parts: dict[str, _Part] = {}
    attributes: list[_Part] = []
    for part in body.value:
        if part.kind == "attribute":
            attributes.append(part)
        elif part.kind in parts:
            raise DataError(f"duplicate {part.kind!r} in a signature", part.span)
        else:
            parts[part.kind] = part
    if attributes and parts:
        raise DataError("a signature lists either its parts (type, pre, post, diff) or, short for an update of a "
                        f"tuple, attributes; not both (found {attributes[0].name!r} next to "
                        f"{next(iter(parts))!r})", attributes[0].span)
    if not attributes and not parts:
        raise DataError("an empty signature: give at least its type", body.span)
    if attributes:
        if element_keys is not None:
            raise DataError(f"{element_keys.name!r} is a bag (its elements have provenance keys "
                            f"{_keys_text(element_keys.names)}): describe its elements with 'diff: {{...}}'",
                            element_keys.span)
        return SignatureNode(DiffType.UPDATE, diff=_tuple_signature(attributes, body.span))
    diff: TupleSignature | BagSignature | None = None
    if "diff" in parts:
        diff_part = parts["diff"]
        keys = diff_part.names
        if keys is not None and element_keys is not None:
            raise DataError(f"the provenance keys of the elements of {element_keys.name!r} are given twice",
                            diff_part.span)
        if element_keys is not None:
            keys = element_keys.names
        if keys is not None:
            element = _signature_node(diff_part.value)
            diff = _located(lambda: BagSignature(keys, element), diff_part.span)
        else:
            inner = diff_part.value
            stray = [p for p in inner.value if p.kind != "attribute"]
            if stray:
                raise DataError(f"this diff describes a tuple, so it lists attributes, not {stray[0].kind!r}; "
                                "if the value is a bag, write its elements' provenance keys before its name, "
                                "#(keys) name: {...}", stray[0].span)
            if not inner.value:
                raise DataError("an empty tuple signature: name at least one attribute", inner.span)
            diff = _tuple_signature(list(inner.value), inner.span)
    elif element_keys is not None:
        raise DataError(f"#{_keys_text(element_keys.names)} names the provenance keys of the elements of "
                        f"{element_keys.name!r}, but its signature has no diff describing them", element_keys.span)
    kind = parts["type"].value if "type" in parts else DiffType.UPDATE
    span = parts["type"].span if "type" in parts else body.span
    return _located(lambda: SignatureNode(kind, pre="pre" in parts, post="post" in parts, diff=diff), span)


def _tuple_signature(attributes: list[_Part], span: Span | None) -> TupleSignature:
    seen: set[str] = set()
    built: list[tuple[str, SignatureNode]] = []
    for part in attributes:
        if part.name in seen:
            raise DataError(f"duplicate attribute {part.name!r} in a tuple signature", part.span)
        seen.add(part.name)  # type: ignore[arg-type]
        built.append((part.name, _signature_node(part.value, part if part.names is not None else None)))  # type: ignore[arg-type]
    return _located(lambda: TupleSignature(tuple(built)), span)


def _keys_text(names: tuple[str, ...] | None) -> str:
    return "(" + ", ".join(names or ()) + ")"

