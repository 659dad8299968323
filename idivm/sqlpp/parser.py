"""SQL++ text → :mod:`idivm.sqlpp.ast`.

Input: the text of a view definition (``CREATE VIEW name AS query [;]``) or of
a query.  Output: the immutable AST, every node carrying the :class:`Span` of
the text it came from.  Malformed text raises :class:`SqlppSyntaxError` with
the position of the offending token, the source (for the caret excerpt) and a
message saying what was found and what would have been accepted there.

Parsing is two steps: lark's LALR parser (grammar in ``grammars/sqlpp.lark``)
builds a parse tree with positions, then :class:`_ToAst` turns it into AST
nodes.  The grammar accepts a few constructs only to reject them here with a
precise message (UNION without ALL, INTERSECT, EXCEPT); ORDER BY, LIMIT and
OFFSET end only a parenthesized subquery, and are explained when the parser
meets them where a view or an IN/EXISTS subquery could end.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, Iterator

from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.lark import PostLex
from lark.tree import Meta

from idivm.errors import IdivmError, Span, SqlppSyntaxError
from idivm.grammars import parse_text, read_grammar
from idivm.sqlpp import ast
from idivm.sqlpp.desugar import inline_lets, name_blocks

__all__ = ["KEYWORDS", "parse_query", "parse_view"]


KEYWORDS = frozenset("""
    ALL AND AS AT BETWEEN BY CASE CREATE CROSS DISTINCT ELEMENT ELSE END EVERY EXCEPT
    EXISTS FALSE FROM FULL GROUP HAVING IN INNER INTERSECT INTO IS JOIN LEFT LET
    LIKE LIMIT MISSING NATURAL NOT NULL OFFSET ON OR ORDER OUTER RAW RIGHT SATISFIES SELECT
    SOME THEN TRUE UNION UNKNOWN UNNEST VALUE VIEW WHEN WHERE WITH
""".split())
"""Reserved words (case-insensitive).  Backquote one to use it as a name."""


# ----------------------------------------------------------------------------- public API


def parse_view(text: str, filename: str | None = None) -> ast.CreateView:
    """Parse ``CREATE [OR REPLACE] VIEW name AS query [;]``."""
    return _parse(text, "start_view", filename)


def parse_query(text: str, filename: str | None = None) -> ast.Query:
    """Parse a query (SELECT blocks joined by UNION ALL), optionally ended by ``;``."""
    return _parse(text, "start_query", filename)


def _parse(text: str, start: str, filename: str | None) -> Any:
    context = "in a view definition" if start == "start_view" else "in an idivm query"
    return parse_text(text, filename, lambda t: _lark().parse(t, start=start),
                      lambda e: _syntax_error(e, text, start, context), _ToAst(visit_tokens=False).transform)


# ----------------------------------------------------------------------------- lexing


@dataclasses.dataclass(frozen=True)
class _Filter:
    """An aggregate's ``FILTER (WHERE condition)``, while its call is built."""

    condition: ast.Expr


class _Keywords(PostLex):
    """Retypes NAME tokens that spell a keyword, except in field-name position.

    A word right after ``.`` (``u.value``) or right before ``:`` (``{value: 1}``)
    can only be a field name, so it stays a NAME there.  Also turns the
    catch-all tokens for unterminated strings and comments into errors.
    """

    always_accept = ("UNTERMINATED_STRING", "UNTERMINATED_COMMENT")

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        return _quantifier_ends(_any_as_some(self._classified(stream)))

    def _classified(self, stream: Iterator[Token]) -> Iterator[Token]:
        prev: Token | None = None
        pending: Token | None = None
        for tok in stream:
            _check_terminated(tok)
            if pending is not None:
                yield self._classify(pending, prev, tok)
                prev = pending
            pending = tok
        if pending is not None:
            yield self._classify(pending, prev, None)

    @staticmethod
    def _classify(tok: Token, prev: Token | None, nxt: Token | None) -> Token:
        if tok.type != "NAME":
            return tok
        kw = tok.value.upper()
        if kw == "FILTER" and prev is not None and prev.value == ")" and nxt is not None and nxt.value == "(":
            return Token.new_borrow_pos(kw, tok.value, tok)  # an aggregate's FILTER (WHERE ...)
        if kw not in KEYWORDS:
            return tok
        if (prev is not None and prev.type == "DOT") or (nxt is not None and nxt.type == "COLON"):
            return tok
        return Token.new_borrow_pos(kw, tok.value, tok)


def _any_as_some(tokens: Iterator[Token]) -> Iterator[Token]:
    """The tokens with ``ANY x IN`` read as ``SOME x IN`` (AsterixDB's synonym; ANY is not
    reserved, so only a word ANY followed by a name and IN starts a quantifier)."""
    window: list[Token] = []
    for tok in tokens:
        window.append(tok)
        if len(window) == 3:
            first = window.pop(0)
            if first.type == "NAME" and first.value.upper() == "ANY" and window[0].type == "NAME" \
                    and window[1].type == "IN":
                first = Token.new_borrow_pos("SOME", first.value, first)
            yield first
    yield from window


#: tokens that end a quantified expression's condition at its own nesting depth
_QUANTIFIER_STOPS = frozenset({"THEN", "ELSE", "WHEN", "COMMA", "FROM", "WHERE", "GROUP", "HAVING", "SELECT",
                               "LET", "WITH", "ORDER", "UNION", "SEMICOLON", "AS", "ON", "JOIN"})


def _quantifier_ends(tokens: Iterator[Token]) -> Iterator[Token]:
    """The tokens without the optional END of quantified expressions (``SOME x IN c SATISFIES p
    END``).  Open CASEs and quantifiers are tracked with their bracket depth: an END closes the
    innermost one open at its depth, and is dropped when that is a quantifier past SATISFIES, as
    AsterixDB's parser attaches it; such a quantifier ends without END at a closing bracket or
    at a token that cannot continue its condition (THEN, a comma, a clause keyword...)."""
    depth = 0
    open_: list[list] = []  # [kind ("CASE" | "SOME"), bracket depth, past SATISFIES]
    for tok in tokens:
        if tok.type in ("SOME", "EVERY", "CASE"):
            open_.append(["CASE" if tok.type == "CASE" else "SOME", depth, False])
        elif tok.type == "SATISFIES":
            for o in reversed(open_):
                if o[0] == "SOME" and o[1] == depth and not o[2]:
                    o[2] = True
                    break
        elif tok.value in ("(", "[", "{"):
            depth += 1
        elif tok.value in (")", "]", "}"):
            depth -= 1
            while open_ and open_[-1][1] > depth:
                open_.pop()
        elif tok.type == "END":
            while open_ and (open_[-1][1] > depth or open_[-1][0] == "SOME" and not open_[-1][2]):
                open_.pop()
            if open_:
                kind = open_.pop()[0]
                if kind == "SOME":
                    continue  # the quantifier's own END
        elif tok.type in _QUANTIFIER_STOPS:
            while open_ and open_[-1][0] == "SOME" and open_[-1][1] == depth and open_[-1][2]:
                open_.pop()
        yield tok


def _check_terminated(tok: Token) -> None:
    if tok.type == "UNTERMINATED_STRING":
        what = "quoted identifier" if tok.value[0] == "`" else "string"
        raise SqlppSyntaxError(f"unterminated {what}: no closing {tok.value[0]}", _token_span(tok))
    if tok.type == "UNTERMINATED_COMMENT":
        raise SqlppSyntaxError("unterminated comment: '/*' has no closing '*/'", _token_span(tok))


def _build_lark(debug: bool = False) -> Lark:
    return Lark(
        read_grammar("sqlpp", __file__),
        parser="lalr",
        lexer="basic",
        start=["start_view", "start_query"],
        propagate_positions=True,
        maybe_placeholders=False,
        postlex=_Keywords(),
        debug=debug,
    )


@functools.cache
def _lark() -> Lark:
    return _build_lark()


def grammar_conflicts() -> list[str]:
    """Shift/reduce conflicts in the grammar, which lark would resolve silently as
    shifts.  The grammar is meant to have none."""
    records: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "conflict" in record.getMessage().lower():
                records.append(record.getMessage())

    lark_logger = logging.getLogger("lark")
    handler, old_level = _Collect(), lark_logger.level
    lark_logger.addHandler(handler)
    lark_logger.setLevel(logging.DEBUG)
    try:
        _build_lark(debug=True)
    finally:
        lark_logger.removeHandler(handler)
        lark_logger.setLevel(old_level)
    return records


# ----------------------------------------------------------------------------- syntax errors

_EXPR_FIRST = frozenset({
    "NAME", "QUOTED_NAME", "INT", "FLOAT", "STRING", "TRUE", "FALSE", "NULL", "MISSING",
    "LPAR", "LSQB", "LBRACE", "MINUS", "PLUS", "NOT", "CASE", "EXISTS",
})
_OPERATORS = frozenset({
    "EQ", "EQEQ", "NEQ", "LTGT", "LT", "LE", "GT", "GE", "CONCAT", "PLUS", "MINUS",
    "STAR", "SLASH", "PERCENT", "AND", "OR", "IS", "NOT", "IN", "LIKE", "BETWEEN", "DOT", "LSQB",
})
# Display order of the remaining expected terminals: closers first, then keywords
# roughly in clause order.
_ORDER = [
    "RPAR", "RSQB", "RBRACE", "COMMA", "COLON", "STAR",
    "BY", "AS", "SELECT", "FROM", "JOIN", "CROSS", "ON", "AT", "UNNEST", "LET", "WITH", "WHERE", "GROUP", "INTO",
    "HAVING", "UNION", "ALL", "DISTINCT", "VALUE", "ELEMENT", "RAW", "WHEN", "THEN", "ELSE", "END",
    "NULL", "MISSING", "UNKNOWN", "SEMICOLON", "$END",
    "LPAR",  # after a name: the start of a function call, rarely what was meant
]
_MAX_EXPECTED = 7
# Keywords that end or join clauses: when one is unexpected, the user rarely
# meant a name, so the "reserved word" hint is left out.
_STRUCTURAL = frozenset({
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "LET", "WITH", "UNION", "INTERSECT", "EXCEPT",
    "JOIN", "ON", "AND", "OR", "THEN", "ELSE",
})

_NOT_IN_VIEWS = {
    "ORDER": ("ORDER BY", "order when reading it"),
    "LIMIT": ("LIMIT", "limit when reading it"),
    "OFFSET": ("OFFSET", "skip rows when reading it"),
}


def _syntax_error(e: UnexpectedInput, text: str, start: str, context: str) -> SqlppSyntaxError:
    if isinstance(e, UnexpectedCharacters):
        char = text[e.pos_in_stream] if e.pos_in_stream is not None else "?"
        return SqlppSyntaxError(f"unexpected character {char!r}", Span(e.line, e.column, e.line, e.column + 1))
    tok = getattr(e, "token", None)
    if not isinstance(e, UnexpectedToken) or tok is None:
        return SqlppSyntaxError(f"syntax error: {e}", Span(e.line, e.column) if isinstance(e.line, int) else None)
    if tok.type == "$END":
        line, col = (tok.end_line, tok.end_column) if tok.end_line is not None else (1, 1)
        span = Span(line, col, line, col)
        found = "unexpected end of input"
    else:
        span = _token_span(tok)
        found = f"unexpected {_describe_token(tok)}"
    expected = _accepts_before(text, start, tok)
    if tok.type in ("LIMIT", "OFFSET") and _nesting(text, tok) > 0:
        return SqlppSyntaxError(
            f"{tok.type} is not supported here: it may end a subquery used as a value or as a FROM "
            f"source (after its ORDER BY), not an IN or EXISTS subquery", span)
    if tok.type in _NOT_IN_VIEWS and "UNION" in expected:
        clause, advice = _NOT_IN_VIEWS[tok.type]
        if start == "start_view":
            why = f"{clause} is not allowed {context}: a view is an unordered bag; {advice}"
        else:
            why = f"{clause} is not supported {context}: results are unordered bags; {advice}"
        return SqlppSyntaxError(why, span)
    if tok.type in {"RIGHT", "FULL"}:
        return SqlppSyntaxError(
            f"{found}: {tok.value.upper()} JOIN is not supported; use [INNER] JOIN, LEFT [OUTER] JOIN "
            "or CROSS JOIN", span)
    wanted = _describe_expected(expected)
    message = f"{found}; expected {wanted}" if wanted else found
    if tok.type in KEYWORDS and tok.type not in _STRUCTURAL and "NAME" in expected:
        message += f" ({tok.value.upper()} is a reserved word; write `{tok.value}` to use it as a name)"
    return SqlppSyntaxError(message, span)


def _accepts_before(text: str, start: str, bad: Token) -> set[str]:
    """Terminals the parser accepts just before ``bad`` (re-parsed, so LALR
    reductions triggered by the bad token do not hide what was acceptable)."""
    lark = _lark()
    ip = lark.parse_interactive(start=start)
    try:
        if bad.type == "$END" or bad.start_pos is None:
            stop = len(text) + 1
        else:
            stop = bad.start_pos
        for tok in lark.lex(text):
            if tok.start_pos is None or tok.start_pos >= stop:
                break
            ip.feed_token(tok)
        return set(ip.accepts())
    except (UnexpectedInput, IdivmError):
        return set()


def _nesting(text: str, bad: Token) -> int:
    """How many parentheses are open before ``bad``."""
    depth = 0
    try:
        for tok in _lark().lex(text):
            if tok.start_pos is None or bad.start_pos is None or tok.start_pos >= bad.start_pos:
                break
            depth += {"LPAR": 1, "RPAR": -1}.get(tok.type, 0)
    except (UnexpectedInput, IdivmError):
        pass
    return depth


def _describe_token(tok: Token) -> str:
    if tok.type == "STRING":
        return f"string {_shorten(tok.value)}"
    if tok.type in {"INT", "FLOAT"}:
        return f"number {_shorten(tok.value)}"
    return repr(_shorten(tok.value))


def _shorten(s: str, limit: int = 30) -> str:
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _describe_expected(accepts: set[str]) -> str:
    terms = set(accepts) - {"INTERSECT", "EXCEPT"}  # parsed only to be rejected
    words: list[str] = []
    if "INT" in terms and {"SELECT", "FROM"} <= terms:  # where a query starts (or an expression)
        words.append("a query or an expression")
        terms -= _EXPR_FIRST | {"SELECT", "FROM", "LET", "WITH"}
        terms = {t for t in terms if t not in KEYWORDS}
    elif "INT" in terms:
        words.append("an expression")
        terms -= _EXPR_FIRST
        # Keywords that only modify what follows (DISTINCT, VALUE, UNNEST...) are
        # noise next to "an expression"; punctuation is kept.
        terms = {t for t in terms if t not in KEYWORDS}
    elif terms & {"NAME", "QUOTED_NAME"}:
        words.append("a name")
        terms -= {"NAME", "QUOTED_NAME"}
    if len(terms & _OPERATORS) >= 3:
        words.append("an operator")
        terms -= _OPERATORS
    if "STRING" in terms:
        words.append("a string")
        terms.discard("STRING")
    rank = {name: i for i, name in enumerate(_ORDER)}
    rest = sorted(terms, key=lambda t: (rank.get(t, len(rank)), t))
    words += [_display(t) for t in rest]
    if len(words) > _MAX_EXPECTED:
        return ", ".join(words[: _MAX_EXPECTED - 1]) + ", …"
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


@functools.cache
def _terminal_text() -> dict[str, str]:
    out: dict[str, str] = {}
    for t in _lark().terminals:
        if t.pattern.type == "str":
            out[t.name] = t.pattern.value
    return out


def _display(terminal: str) -> str:
    if terminal == "$END":
        return "end of input"
    if terminal in KEYWORDS:
        return f"'{terminal}'"
    if terminal in {"INT", "FLOAT"}:
        return "a number"
    text = _terminal_text().get(terminal)
    return f"'{text}'" if text is not None else terminal


def _token_span(tok: Token) -> Span:
    return Span(tok.line, tok.column, tok.end_line, tok.end_column)


# ----------------------------------------------------------------------------- parse tree → AST


def _span(meta: Meta) -> Span | None:
    if meta.empty:
        return None
    return Span(meta.line, meta.column, meta.end_line, meta.end_column)


def _tokens(children: list) -> list[Token]:
    return [c for c in children if isinstance(c, Token)]


def _types(children: list) -> set[str]:
    return {c.type for c in children if isinstance(c, Token)}


def _nodes(children: list) -> list:
    return [c for c in children if isinstance(c, ast.Node)]


class _Name(str):
    """A name (identifier or alias) after unquoting; kept apart from tokens."""


class _GroupingSets(list):
    """The grouping sets of one GROUP BY item: tuples of keys."""


def _names(children: list) -> list[_Name]:
    return [c for c in children if isinstance(c, _Name)]


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0",
            "\\": "\\", "'": "'", '"': '"', "`": "`", "/": "/"}


def _unquote(tok: Token) -> str:
    """Body of a '…', "…" or `…` token: doubled delimiters and backslash escapes resolved."""
    raw, quote = tok.value, tok.value[0]
    body, out, i = raw[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            e = body[i + 1]
            if e == "u":
                digits = body[i + 2:i + 6]
                if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                    raise SqlppSyntaxError(r"bad escape sequence: \u needs 4 hex digits", _token_span(tok))
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            if e not in _ESCAPES:
                raise SqlppSyntaxError(f"unknown escape sequence '\\{e}'", _token_span(tok))
            out.append(_ESCAPES[e])
            i += 2
        elif c == quote:  # doubled delimiter (the lexer only lets them come in pairs)
            out.append(quote)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


_OP_SPELLING = {"==": "=", "<>": "!="}


#: the variable of the subquery that ``x IN coll`` reads as ``x IN (SELECT VALUE v FROM coll AS v)``;
#: not an identifier a query can spell, so it hides none of the query's names
_IN_ELEMENT = "$in"
_STAR_ELEMENT = "$star"  # the element variable of base[*].f

#: the tags of the (tag, payload) pairs an ORDER BY and a LIMIT/OFFSET clause of a subquery leave
#: in the parse tree
_ORDER_BY = "ORDER BY"
_LIMIT = "LIMIT"

#: what ``CREATE OR REPLACE`` leaves among the children of ``start_view``
_OR_REPLACE = "OR REPLACE"


@v_args(meta=True)
class _ToAst(Transformer_NonRecursive):
    """Parse tree → AST.  Method names are the grammar's rule names/aliases."""

    # ---- statements and queries

    def start_view(self, meta, ch):
        (name,) = _names(ch)
        (query,) = _nodes(ch)
        return ast.CreateView(str(name), _as_query(query), replace=_OR_REPLACE in ch, span=_span(meta))

    def or_replace(self, meta, ch):
        word = ch[-1]
        if word.value.upper() != "REPLACE":
            raise SqlppSyntaxError(f"unexpected {word.value!r} after CREATE OR: expected REPLACE", _token_span(word))
        return _OR_REPLACE

    def start_query(self, meta, ch):
        (query,) = _nodes(ch)
        return _as_query(query)

    def union_all(self, meta, ch):
        left, right = _nodes(ch)
        return ast.UnionAll(left, right, span=_span(meta))

    def unsupported_set_op(self, meta, ch):
        op = _tokens(ch)[0]
        if op.type == "UNION":
            msg = ("UNION without ALL is not supported; only UNION ALL is "
                   "(wrap it in SELECT DISTINCT to remove duplicates)")
        else:
            msg = f"{op.type} is not supported; only UNION ALL is"
        raise SqlppSyntaxError(msg, _token_span(op))

    def let_query(self, meta, ch):
        *lets, query = ch
        counter = [0]  # AsterixDB numbers the WITH clause's projections without a name first
        bindings = tuple(dataclasses.replace(b, expr=name_blocks(b.expr, counter))
                         for _, clause in lets for b in clause)
        return inline_lets(bindings, query)

    def select_block(self, meta, ch):
        # The clauses in the order written; FROM-first and SELECT-first blocks give the
        # same AST.  LET clauses after GROUP BY are the block's group_lets.
        parts: dict[str, Any] = {}
        lets: list[ast.LetBinding] = []
        group_lets: list[ast.LetBinding] = []
        for tag, payload in ch:
            if tag == "let":
                (group_lets if "group" in parts else lets).extend(payload)
            else:
                parts[tag] = payload
        distinct, value, items = parts["select"]
        group_by, group_as, group_fields, grouping = parts.get("group", ((), None, (), None))
        block = functools.partial(
            ast.SelectQuery, distinct=distinct, value=value, items=items,
            from_items=parts.get("from", ()), lets=tuple(lets),
            where=parts.get("where"), group_by=group_by, group_as=group_as, group_fields=group_fields,
            having=parts.get("having"), group_lets=tuple(group_lets), span=_span(meta))
        if grouping is None:
            return block()
        # grouping sets: one block per set, their results unioned
        query: ast.Query = block(grouping_set=grouping[0])
        for s in grouping[1:]:
            query = ast.UnionAll(query, block(grouping_set=s), span=_span(meta))
        return query

    # ---- SELECT

    def select_clause(self, meta, ch):
        distinct = "DISTINCT" in _types(ch)
        kind, payload = ch[-1]
        if kind == "value":
            return ("select", (distinct, payload, ()))
        return ("select", (distinct, None, payload))

    def select_value(self, meta, ch):
        (expr,) = _nodes(ch)
        return ("value", expr)

    def select_list(self, meta, ch):
        return ("items", tuple(ch))

    def expr_item(self, meta, ch):
        (expr,) = _nodes(ch)
        names = _names(ch)
        return ast.ExprItem(expr, str(names[0]) if names else None, span=_span(meta))

    def star_item(self, meta, ch):
        nodes = _nodes(ch)
        return ast.StarItem(nodes[0] if nodes else None, span=_span(meta))

    # ---- FROM

    def from_clause(self, meta, ch):
        return ("from", tuple(item for term in ch if isinstance(term, tuple) for item in term))

    def from_term(self, meta, ch):
        return tuple(_nodes(ch))

    def join(self, meta, ch):
        types = _types(ch)
        nodes = _nodes(ch)
        left, right = nodes[0], nodes[1]
        condition = nodes[2] if len(nodes) > 2 else None
        # CROSS JOIN: neither a condition nor NATURAL
        return ast.Join("LEFT" if "LEFT" in types else "INNER", left, right, condition,
                        natural="NATURAL" in types, span=_span(meta))

    def from_expr(self, meta, ch, unnest=False, outer=False):
        expr = _nodes(ch)[0]
        alias = at = None
        after_at = False
        for c in ch:
            if isinstance(c, Token) and c.type == "AT":
                after_at = True
            elif isinstance(c, _Name):
                if after_at:
                    at = str(c)
                else:
                    alias = str(c)
        return ast.FromExpr(expr, alias, at, unnest, outer, span=_span(meta))

    def unnest(self, meta, ch):
        return self.from_expr(meta, ch, unnest=True)

    def outer_unnest(self, meta, ch):
        return self.from_expr(meta, ch, unnest=True, outer=True)

    # ---- LET, WHERE, GROUP BY, HAVING

    def let_clause(self, meta, ch):
        return ("let", tuple(_nodes(ch)))

    def let_binding(self, meta, ch):
        (name,) = _names(ch)
        (expr,) = _nodes(ch)
        return ast.LetBinding(str(name), expr, span=_span(meta))

    def where_clause(self, meta, ch):
        (expr,) = _nodes(ch)
        return ("where", expr)

    def group_clause(self, meta, ch):
        names = _names(ch)
        fields = next((c[1] for c in ch if isinstance(c, tuple) and c[0] == "group_fields"), ())
        sets: list[tuple[ast.GroupKey, ...]] = [()]
        for c in ch:  # each item's sets, combined with those of the items before it
            if isinstance(c, ast.GroupKey):
                c = _GroupingSets([(c,)])
            if isinstance(c, _GroupingSets):
                sets = [a + tuple(k for k in b if k not in a) for a in sets for b in c]
        keys = tuple(dict.fromkeys(k for s in sets for k in s))
        plain = len(sets) == 1 and len(sets[0]) == len(keys)
        grouping = None if plain else tuple(tuple(keys.index(k) for k in s) for s in sets)
        return ("group", (keys, str(names[0]) if names else None, fields, grouping))

    def grouping_empty(self, meta, ch):
        return _GroupingSets([()])

    def grouping_keys(self, meta, ch):
        return _GroupingSets([tuple(ast.GroupKey(e, None, span=e.span) for e in _nodes(ch))])

    def grouping_composite(self, meta, ch):
        return tuple(_nodes(ch))

    def _parts(self, ch) -> list[tuple[ast.GroupKey, ...]]:
        return [tuple(ast.GroupKey(e, None, span=e.span) for e in (c if isinstance(c, tuple) else (c,)))
                for c in ch if isinstance(c, (tuple, ast.Node))]

    def grouping_rollup(self, meta, ch):
        parts = self._parts(ch)
        return _GroupingSets([tuple(k for p in parts[:n] for k in p) for n in range(len(parts), -1, -1)])

    def grouping_cube(self, meta, ch):
        parts = self._parts(ch)
        return _GroupingSets([tuple(k for i, p in enumerate(parts) if mask >> (len(parts) - 1 - i) & 1 for k in p)
                              for mask in range(2 ** len(parts) - 1, -1, -1)])

    def grouping_sets(self, meta, ch):
        return _GroupingSets([s for c in ch if isinstance(c, (_GroupingSets, ast.GroupKey))
                              for s in (c if isinstance(c, _GroupingSets) else [(c,)])])

    def group_fields(self, meta, ch):
        return ("group_fields", tuple(c for c in ch if isinstance(c, tuple)))

    def group_field(self, meta, ch):
        var, name = _names(ch)
        return (str(var), str(name))

    def group_key(self, meta, ch):
        (expr,) = _nodes(ch)
        names = _names(ch)
        return ast.GroupKey(expr, str(names[0]) if names else None, span=_span(meta))

    def having_clause(self, meta, ch):
        (expr,) = _nodes(ch)
        return ("having", expr)

    # ---- operators

    def binary_op(self, meta, ch):
        left, op, right = ch
        spelled = op.value.upper() if op.type in ("AND", "OR") else op.value
        return ast.BinaryOp(_OP_SPELLING.get(spelled, spelled), left, right, span=_span(meta))

    def not_op(self, meta, ch):
        (operand,) = _nodes(ch)
        if isinstance(operand, ast.Exists):
            # NOT EXISTS (q): EXISTS is two-valued, so negation folds exactly.
            return ast.Exists(operand.query, not operand.negated, span=_span(meta))
        return ast.UnaryOp("NOT", operand, span=_span(meta))

    def unary_op(self, meta, ch):
        op, operand = ch
        if (op.type == "MINUS" and isinstance(operand, ast.Literal) and operand.kind == "number"):
            return ast.Literal(-operand.value, "number", span=_span(meta))
        return ast.UnaryOp(op.value, operand, span=_span(meta))

    def is_test(self, meta, ch):
        (operand,) = _nodes(ch)
        types = _types(ch)
        what = _tokens(ch)[-1].type
        return ast.IsTest(operand, what, "NOT" in types, span=_span(meta))

    def is_known(self, meta, ch):
        """``x IS [NOT] KNOWN`` (KNOWN not reserved): ``x IS NOT UNKNOWN`` (``IS UNKNOWN``)."""
        (operand,) = _nodes(ch)
        word = _tokens(ch)[-1]
        if word.value.upper() != "KNOWN":
            raise SqlppSyntaxError(f"unexpected {word.value!r} after IS: expected NULL, MISSING, UNKNOWN or KNOWN",
                                   _token_span(word))
        return ast.IsTest(operand, "UNKNOWN", "NOT" not in _types(ch), span=_span(meta))

    def like(self, meta, ch):
        operand, pattern = _nodes(ch)
        return ast.Like(operand, pattern, "NOT" in _types(ch), span=_span(meta))

    def between(self, meta, ch):
        operand, low, high = _nodes(ch)
        return ast.Between(operand, low, high, "NOT" in _types(ch), span=_span(meta))

    def in_list(self, meta, ch):
        operand, *items = _nodes(ch)
        return ast.InList(operand, tuple(items), "NOT" in _types(ch), span=_span(meta))

    def in_subquery(self, meta, ch):
        operand, query = _nodes(ch)
        return ast.InSubquery(operand, query, "NOT" in _types(ch), span=_span(meta))

    def in_collection(self, meta, ch):
        """``x IN [e1, …]`` is the IN list ``x IN (e1, …)``; ``x IN coll`` for any other
        collection is ``x IN (SELECT VALUE v FROM coll AS v)``."""
        operand, collection = _nodes(ch)
        negated = "NOT" in _types(ch)
        span = _span(meta)
        if isinstance(collection, (ast.ArrayConstructor, ast.BagConstructor)) and collection.items:
            return ast.InList(operand, collection.items, negated, span=span)
        element = ast.Identifier(_IN_ELEMENT, span=collection.span)
        scan = ast.SelectQuery(distinct=False, value=element, items=(),
                               from_items=(ast.FromExpr(collection, _IN_ELEMENT, span=collection.span),),
                               span=collection.span)
        return ast.InSubquery(operand, scan, negated, span=span)

    # ---- paths and primaries

    def field_access(self, meta, ch):
        base, name = ch
        if isinstance(base, ast.ArrayStar):  # base[*].f: the f of each element, as a collection
            element = ast.Identifier(_STAR_ELEMENT, span=base.span)
            return ast.Subquery(ast.SelectQuery(
                distinct=False, value=ast.FieldAccess(element, str(name), span=_span(meta)), items=(),
                from_items=(ast.FromExpr(base.base, _STAR_ELEMENT, span=base.span),), span=_span(meta)),
                span=_span(meta))
        return ast.FieldAccess(base, str(name), span=_span(meta))

    def array_star(self, meta, ch):
        (base,) = _nodes(ch)
        return ast.ArrayStar(base, span=_span(meta))

    def index_access(self, meta, ch):
        base, index = _nodes(ch)
        return ast.IndexAccess(base, index, span=_span(meta))

    def slice_access(self, meta, ch):
        """``base[start:end]`` (``end`` optional): ARRAY_SLICE."""
        return ast.FunctionCall("ARRAY_SLICE", tuple(_nodes(ch)), span=_span(meta))

    def identifier(self, meta, ch):
        (name,) = ch
        return ast.Identifier(str(name), span=_span(meta))

    def subquery(self, meta, ch):
        (query,) = _nodes(ch)
        return ast.Subquery(query, span=_span(meta))

    def ordered_subquery(self, meta, ch):
        (query,) = _nodes(ch)
        clauses = dict(c for c in ch if isinstance(c, tuple))
        limit, offset = clauses.get(_LIMIT, (None, None))
        return ast.Subquery(query, clauses.get(_ORDER_BY, ()), limit, offset, span=_span(meta))

    def order_clause(self, meta, ch):
        return (_ORDER_BY, tuple(_nodes(ch)))  # IN and EXISTS ignore it (it is no Node)

    def order_key(self, meta, ch):
        words = _tokens(ch)
        if words and words[-1].value.upper() not in ("ASC", "DESC"):
            raise SqlppSyntaxError(f"unexpected {words[-1].value!r} after an ORDER BY key; expected ASC, "
                                   "DESC, ',' or ')'", _token_span(words[-1]))
        (expr,) = _nodes(ch)
        return ast.OrderKey(expr, bool(words) and words[-1].value.upper() == "DESC", span=_span(meta))

    def limit_clause(self, meta, ch):
        limit, *offset = _nodes(ch)
        return (_LIMIT, (limit, offset[0] if offset else None))

    def offset_clause(self, meta, ch):
        (offset,) = _nodes(ch)
        return (_LIMIT, (None, offset))

    def exists(self, meta, ch):
        (query,) = _nodes(ch)
        return ast.Exists(query, span=_span(meta))

    def quantified(self, meta, ch):
        """``SOME x IN c SATISFIES p`` is ``EXISTS (FROM c AS x WHERE p SELECT VALUE 1)``;
        ``EVERY`` is ``NOT EXISTS (… WHERE NOT p …)`` (so an unknown ``p`` does not falsify it)."""
        every = _tokens(ch)[0].type == "EVERY"
        nodes = _nodes(ch)
        bindings, condition = nodes[:-1], nodes[-1]
        if every:
            condition = ast.UnaryOp("NOT", condition, span=condition.span)
        query = ast.SelectQuery(distinct=False, value=ast.Literal(1, "number", span=_span(meta)), items=(),
                                from_items=tuple(bindings), where=condition, span=_span(meta))
        return ast.Exists(query, negated=every, span=_span(meta))

    def quantifier_binding(self, meta, ch):
        (name,) = _names(ch)
        (expr,) = _nodes(ch)
        return ast.FromExpr(expr, str(name), span=_span(meta))

    def function_call(self, meta, ch):
        name_tok = ch[0]
        types = _types(ch[1:])
        args = tuple(_nodes(ch))
        condition = next((n.condition for n in ch if isinstance(n, _Filter)), None)
        # AsterixDB spells its functions with '_' or '-' alike (get_year, `get-year`)
        name = (_unquote(name_tok) if name_tok.type == "QUOTED_NAME" else name_tok.value).upper().replace("-", "_")
        if "STAR" in types and name != "COUNT":
            raise SqlppSyntaxError(f"'*' is only allowed as the argument of COUNT, not {name}", _span(meta))
        if "DISTINCT" in types and not args:
            raise SqlppSyntaxError(f"{name}(DISTINCT …) needs an argument", _span(meta))
        star = "STAR" in types
        if condition is not None:  # agg(x) FILTER (WHERE c): agg(CASE WHEN c THEN x END), NULLs being skipped
            if name not in ast.AGGREGATES or len(args) > 1:
                raise SqlppSyntaxError(f"FILTER (WHERE …) applies to an aggregate of one argument, not {name}",
                                       _span(meta))
            value = args[0] if args else ast.Literal(1, "number", span=_span(meta))
            args, star = (ast.CaseWhen(None, ((condition, value),), None, span=condition.span),), False
        return ast.FunctionCall(name, args, distinct="DISTINCT" in types, star=star, span=_span(meta))

    def filter_clause(self, meta, ch):
        (condition,) = _nodes(ch)
        return _Filter(condition)

    def qualified_call(self, meta, ch):
        """``dataverse.function(...)``: the call; the dataverse name is not checked (a view
        reads the warehouse's tables whatever dataverse the query names)."""
        base, call = _nodes(ch)
        if not isinstance(base, ast.Identifier):
            raise SqlppSyntaxError(f"{call.name}(…) is a function, not a field of a value", _span(meta))
        return call

    def case_expr(self, meta, ch):
        operand = else_ = None
        whens = []
        prev = None
        for c in ch:
            if isinstance(c, tuple):
                whens.append(c)
            elif isinstance(c, ast.Node):
                if isinstance(prev, Token) and prev.type == "ELSE":
                    else_ = c
                else:
                    operand = c
            prev = c
        return ast.CaseWhen(operand, tuple(whens), else_, span=_span(meta))

    def case_when(self, meta, ch):
        cond, result = _nodes(ch)
        return (cond, result)

    def tuple_field(self, meta, ch):
        key, expr = ch
        if isinstance(key, Token):  # a string key
            key = _unquote(key)
        return (str(key), expr, _span(meta))

    def tuple_constructor(self, meta, ch):
        seen: set[str] = set()
        for key, _, span in ch:
            if key in seen:
                raise SqlppSyntaxError(f"duplicate field name {key!r} in tuple constructor", span)
            seen.add(key)
        return ast.TupleConstructor(tuple((k, e) for k, e, _ in ch), span=_span(meta))

    def bag_constructor(self, meta, ch):
        return ast.BagConstructor(tuple(_nodes(ch)), span=_span(meta))

    def array_constructor(self, meta, ch):
        return ast.ArrayConstructor(tuple(_nodes(ch)), span=_span(meta))

    def literal(self, meta, ch):
        (tok,) = ch
        span = _span(meta)
        if tok.type == "INT":
            return ast.Literal(int(tok.value), "number", span=span)
        if tok.type == "FLOAT":
            return ast.Literal(float(tok.value), "number", span=span)
        if tok.type == "STRING":
            return ast.Literal(_unquote(tok), "string", span=span)
        if tok.type in ("TRUE", "FALSE"):
            return ast.Literal(tok.type == "TRUE", "bool", span=span)
        if tok.type == "NULL":
            return ast.Literal(None, "null", span=span)
        return ast.Literal(None, "missing", span=span)

    def name(self, meta, ch):
        (tok,) = ch
        text = _unquote(tok) if tok.type == "QUOTED_NAME" else tok.value
        if not text:
            raise SqlppSyntaxError("empty quoted identifier", _token_span(tok))
        return _Name(text)


def _as_query(node: ast.Node) -> ast.Query:
    """A view's query; an expression (AsterixDB's query of one value) is ``SELECT VALUE`` of it."""
    if isinstance(node, ast.Query):
        return node
    return ast.SelectQuery(distinct=False, value=node, items=(), from_items=(), span=node.span)
