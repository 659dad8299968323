"""Typed, immutable AST of SQL++ view definitions.

Produced by :mod:`idivm.sqlpp.parser` from ``grammars/sqlpp.lark``; consumed by
:mod:`idivm.algebra.builder`.  Every node is a frozen dataclass with a ``span``
(source position) that is excluded from equality, so two parses of the same
text compare equal regardless of layout.  Nothing here resolves names: an
``Identifier`` may later turn out to be a table, a variable or a column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from idivm.tree import TreeNode


@dataclass(frozen=True, slots=True)
class Node(TreeNode):
    """A node of the SQL++ syntax tree."""


# ----------------------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Expr(Node):
    pass


@dataclass(frozen=True, slots=True)
class Literal(Expr):
    """A constant.  ``value`` is a Python int/float/str/bool/None; MISSING has kind 'missing'."""

    value: Any
    kind: str  # 'number' | 'string' | 'bool' | 'null' | 'missing'


@dataclass(frozen=True, slots=True)
class Identifier(Expr):
    """A bare name: a variable, a table, or an unqualified column.

    ``table``: a table's name in an inlined WITH/LET definition, used where a variable of the
    query hides that name (:func:`idivm.sqlpp.desugar.inline_lets`): it names the table."""

    name: str
    table: bool = False


@dataclass(frozen=True, slots=True)
class FieldAccess(Expr):
    """``base.name``"""

    base: Expr
    name: str


@dataclass(frozen=True, slots=True)
class IndexAccess(Expr):
    """``base[index]``"""

    base: Expr
    index: Expr


@dataclass(frozen=True, slots=True)
class ArrayStar(Expr):
    """``base[*]``: the parser turns ``base[*].f`` into ``(SELECT VALUE v.f FROM base AS v)``;
    alone it stays this node, which the plan builder refuses."""

    base: Expr


@dataclass(frozen=True, slots=True)
class UnaryOp(Expr):
    op: str  # '-', '+', 'NOT'
    operand: Expr


@dataclass(frozen=True, slots=True)
class BinaryOp(Expr):
    """Arithmetic (+ - * / %), concatenation (||), comparison (= != <> < <= > >=), AND, OR."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class FunctionCall(Expr):
    """``name(args)``; ``name`` is upper-cased.  ``COUNT(*)`` has ``star=True`` and no args."""

    name: str
    args: tuple[Expr, ...]
    distinct: bool = False
    star: bool = False


@dataclass(frozen=True, slots=True)
class CaseWhen(Expr):
    """``CASE [operand] WHEN c THEN r ... [ELSE e] END``"""

    operand: Expr | None
    whens: tuple[tuple[Expr, Expr], ...]
    else_: Expr | None


@dataclass(frozen=True, slots=True)
class IsTest(Expr):
    """``operand IS [NOT] NULL|MISSING|UNKNOWN``"""

    operand: Expr
    what: str  # 'NULL' | 'MISSING' | 'UNKNOWN'
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like(Expr):
    operand: Expr
    pattern: Expr
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Between(Expr):
    operand: Expr
    low: Expr
    high: Expr
    negated: bool = False


@dataclass(frozen=True, slots=True)
class InList(Expr):
    """``operand [NOT] IN (e1, e2, ...)``"""

    operand: Expr
    items: tuple[Expr, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class InSubquery(Expr):
    """``operand [NOT] IN (subquery)``"""

    operand: Expr
    query: "Query"
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Exists(Expr):
    """``[NOT] EXISTS (subquery)``"""

    query: "Query"
    negated: bool = False


@dataclass(frozen=True, slots=True)
class OrderKey(Node):
    """A key of a subquery's ``ORDER BY``: ``expr [ASC|DESC]``."""

    expr: Expr
    descending: bool = False


@dataclass(frozen=True, slots=True)
class Subquery(Expr):
    """A parenthesized query used as a value (scalar, collection or FROM source).

    ``order``: the keys of the ORDER BY that ends it; then its value is an array in that
    order (a FROM source numbers its elements for AT).  ``limit`` / ``offset``: LIMIT n /
    OFFSET m (integer literals) keep the elements m+1 … m+n of that order; without ORDER BY,
    of the order of their values (SQL++ leaves which elements unspecified)."""

    query: "Query"
    order: tuple[OrderKey, ...] = ()
    limit: Expr | None = None
    offset: Expr | None = None

    @property
    def ordered(self) -> bool:
        """Whether the query ends with ORDER BY."""
        return bool(self.order)

    @property
    def sequenced(self) -> bool:
        """Whether the query ends with ORDER BY, LIMIT or OFFSET (its elements are numbered)."""
        return bool(self.order) or self.limit is not None or self.offset is not None


@dataclass(frozen=True, slots=True)
class TupleConstructor(Expr):
    """``{"k": e, ...}``"""

    fields: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True, slots=True)
class BagConstructor(Expr):
    """``{{ e, ... }}``"""

    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class ArrayConstructor(Expr):
    """``[ e, ... ]``"""

    items: tuple[Expr, ...]


# ----------------------------------------------------------------------------- SELECT clause


@dataclass(frozen=True, slots=True)
class SelectItem(Node):
    pass


@dataclass(frozen=True, slots=True)
class ExprItem(SelectItem):
    """``expr [AS alias]``"""

    expr: Expr
    alias: str | None = None


@dataclass(frozen=True, slots=True)
class StarItem(SelectItem):
    """``*`` (qualifier None) or ``alias.*`` / ``expr.*``"""

    qualifier: Expr | None = None


# ----------------------------------------------------------------------------- FROM clause


@dataclass(frozen=True, slots=True)
class FromItem(Node):
    pass


@dataclass(frozen=True, slots=True)
class FromExpr(FromItem):
    """``expr [AS] alias [AT pos]``: a table, a path over earlier variables, or a subquery.

    ``unnest`` is true for the ``UNNEST expr`` spelling (same meaning); ``outer`` for ``LEFT
    [OUTER] UNNEST expr``, which keeps a tuple whose collection is empty (the variable MISSING).
    """

    expr: Expr
    alias: str | None = None
    at: str | None = None
    unnest: bool = False
    outer: bool = False


@dataclass(frozen=True, slots=True)
class Join(FromItem):
    """``left [NATURAL] [INNER|LEFT [OUTER]] JOIN right [ON cond]``.

    ``kind`` is 'INNER' or 'LEFT'; NATURAL joins have ``condition`` None, and so
    does ``CROSS JOIN`` (an INNER join that is not natural).
    A comma between FROM items is represented as separate items of
    :class:`SelectQuery.from_items`, not as a Join.
    """

    kind: str
    left: FromItem
    right: FromItem
    condition: Expr | None = None
    natural: bool = False


# ----------------------------------------------------------------------------- queries


@dataclass(frozen=True, slots=True)
class Query(Node):
    pass


@dataclass(frozen=True, slots=True)
class GroupKey(Node):
    expr: Expr
    alias: str | None = None


@dataclass(frozen=True, slots=True)
class LetBinding(Node):
    name: str
    expr: Expr


@dataclass(frozen=True, slots=True)
class SelectQuery(Query):
    """One SELECT-FROM-WHERE block.

    Exactly one of ``value`` (SELECT VALUE/ELEMENT/RAW expr) and ``items`` is used.
    ``from_items`` is empty for a FROM-less SELECT.  ``lets`` are the LET bindings
    after FROM, ``group_lets`` those after GROUP BY (per group, visible in HAVING and
    SELECT).  ``group_as`` holds the variable of ``GROUP AS g`` (or the thesis'
    ``INTO g``); ``group_fields`` the (variable, field name) pairs of ``GROUP AS g(v AS f, …)``,
    the only variables its members hold (all of them when empty).  A FROM-first block (``FROM … SELECT …``) has the same AST as its
    SELECT-first spelling.
    """

    distinct: bool
    value: Expr | None
    items: tuple[SelectItem, ...]
    from_items: tuple[FromItem, ...]
    lets: tuple[LetBinding, ...] = ()
    where: Expr | None = None
    group_by: tuple[GroupKey, ...] = ()
    group_as: str | None = None
    group_fields: tuple[tuple[str, str], ...] = ()
    #: of GROUP BY ROLLUP/CUBE/GROUPING SETS, expanded into a UNION ALL of one block per set:
    #: the positions in ``group_by`` of the keys this block groups by (the others are NULL in it)
    grouping_set: tuple[int, ...] | None = None
    having: Expr | None = None
    group_lets: tuple[LetBinding, ...] = ()


@dataclass(frozen=True, slots=True)
class UnionAll(Query):
    left: Query
    right: Query


@dataclass(frozen=True, slots=True)
class CreateView(Node):
    name: str
    query: Query
    #: ``CREATE OR REPLACE VIEW``: the definition replaces a view of that name, if there is one
    replace: bool = False


#: SQL++'s statistics aggregates (of the values' central moments, as AsterixDB computes them), and
#: the other names they go by
STATISTICS = ("STDDEV_SAMP", "STDDEV_POP", "VAR_SAMP", "VAR_POP", "SKEWNESS", "KURTOSIS")
STATISTICS_ALIASES = {"STDDEV": "STDDEV_SAMP", "VARIANCE": "VAR_SAMP", "VARIANCE_SAMP": "VAR_SAMP",
                      "VARIANCE_POP": "VAR_POP"}
AGGREGATES = frozenset({"COUNT", "SUM", "AVG", "MIN", "MAX", *STATISTICS, *STATISTICS_ALIASES})
COLLECTION_AGGREGATES = frozenset({f"{kind}_{name}" for kind in ("ARRAY", "STRICT")
                                   for name in ("COUNT", "SUM", "AVG", "MIN", "MAX", *STATISTICS, *STATISTICS_ALIASES)})


Node._root = Node


def implicit_name(e: Expr) -> str | None:
    """The name an unaliased FROM item, grouping key or projection gets: its variable's or its
    field's name (None for any other expression)."""
    if isinstance(e, (Identifier, FieldAccess)):
        return e.name
    return None
