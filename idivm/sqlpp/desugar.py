"""Rewrites of the SQL++ AST into the AST the plan builder handles (parser → builder).

:func:`inline_lets`: a LET or WITH clause before a query (``WITH cheap AS (SELECT …)
FROM cheap c …``) binds names for the whole query, including its FROM clauses.  Its bindings
are inlined, as AsterixDB does with WITH: every free reference to a bound name is replaced by
the binding's expression (earlier bindings inlined into later ones), so that ``FROM cheap c``
becomes ``FROM (SELECT …) AS c`` and ``x IN cheap`` an IN over the subquery::

    WITH a AS e1, b AS e2(a)  q(a, b)   ⇒   q(e1, e2(e1))

A reference is free when no FROM/UNNEST variable (explicit or implicit alias, AT position),
LET, grouping key or GROUP AS variable of the blocks around it binds the name (the name rules
of :mod:`idivm.algebra.builder`, variables only).  A binding's expression is inlined only where
the names it uses itself mean the same as where it was written; a name it uses that a variable
hides there is marked as a table's (``Identifier.table``), which the plan builder refuses when
it could mean an enclosing query's variable.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

from idivm.sqlpp import ast as A

__all__ = ["free_names", "generated_names", "inline_lets", "name_blocks", "replace_names"]

# (identifier, names bound around it) -> replacement
_OnName = Callable[[A.Identifier, frozenset[str]], A.Expr]


def inline_lets(bindings: tuple[A.LetBinding, ...], query: A.Query) -> A.Query:
    """``query`` with the LET/WITH ``bindings`` that precede it inlined."""
    env: dict[str, tuple[A.Expr, frozenset[str]]] = {}

    def on_name(ident: A.Identifier, bound: frozenset[str]) -> A.Expr:
        if ident.name in bound or ident.name not in env:
            return ident
        expr, uses = env[ident.name]
        hidden = uses & bound
        if hidden:  # names the definition uses that a variable hides here: tables (the builder checks)
            return _Rewrite(lambda i, b: dataclasses.replace(i, table=True)
                            if i.name in hidden and i.name not in b else i).expr(expr, frozenset())
        return expr

    for b in bindings:
        expr = _Rewrite(on_name).expr(b.expr, frozenset())
        env[b.name] = (expr, free_names(expr))
    return _Rewrite(on_name).query(query, frozenset())


def replace_names(e: A.Expr, by: Callable[[str], A.Expr | None]) -> A.Expr:
    """``e`` with each free name ``n`` for which ``by(n)`` is an expression replaced by it."""
    def on_name(ident: A.Identifier, bound: frozenset[str]) -> A.Expr:
        return ident if ident.name in bound else by(ident.name) or ident

    return _Rewrite(on_name).expr(e, frozenset())


def free_names(e: A.Node) -> frozenset[str]:
    """The identifiers of ``e`` that no variable inside ``e`` binds (tables included)."""
    found: set[str] = set()

    def on_name(ident: A.Identifier, bound: frozenset[str]) -> A.Expr:
        if ident.name not in bound:
            found.add(ident.name)
        return ident

    rw = _Rewrite(on_name)
    if isinstance(e, A.Query):
        rw.query(e, frozenset())
    else:
        rw.expr(e, frozenset())  # type: ignore[arg-type]
    return frozenset(found)


class _Rewrite:
    """Rebuilds an AST, replacing identifiers by ``on_name`` and tracking the names that
    variables bind at each point."""

    def __init__(self, on_name: _OnName):
        self.on_name = on_name

    # ---- queries

    def query(self, q: A.Query, bound: frozenset[str]) -> A.Query:
        if isinstance(q, A.UnionAll):
            return dataclasses.replace(q, left=self.query(q.left, bound), right=self.query(q.right, bound))
        assert isinstance(q, A.SelectQuery), type(q).__name__
        from_items = []
        for item in q.from_items:
            item, bound = self.from_item(item, bound)
            from_items.append(item)
        lets, bound = self.lets(q.lets, bound)
        where = self.opt(q.where, bound)
        keys = []
        after = bound
        for k in q.group_by:
            name = k.alias or A.implicit_name(k.expr)
            expr = self.expr(k.expr, bound)
            keys.append(dataclasses.replace(k, expr=expr, alias=name if expr is not k.expr else k.alias))
            if name is not None:
                after |= {name}
        if q.group_as is not None:
            after |= {q.group_as}
        group_lets, after = self.lets(q.group_lets, after)
        return dataclasses.replace(
            q, from_items=tuple(from_items), lets=lets, where=where, group_by=tuple(keys),
            group_lets=group_lets, having=self.opt(q.having, after), value=self.opt(q.value, after),
            items=tuple(self.select_item(i, after) for i in q.items))

    def lets(self, lets: tuple[A.LetBinding, ...], bound: frozenset[str]
             ) -> tuple[tuple[A.LetBinding, ...], frozenset[str]]:
        out = []
        for let in lets:
            out.append(dataclasses.replace(let, expr=self.expr(let.expr, bound)))
            bound |= {let.name}
        return tuple(out), bound

    def from_item(self, item: A.FromItem, bound: frozenset[str]) -> tuple[A.FromItem, frozenset[str]]:
        if isinstance(item, A.Join):
            left, bound = self.from_item(item.left, bound)
            right, bound = self.from_item(item.right, bound)
            return dataclasses.replace(item, left=left, right=right,
                                       condition=self.opt(item.condition, bound)), bound
        assert isinstance(item, A.FromExpr)
        expr = self.expr(item.expr, bound)
        alias = item.alias or A.implicit_name(item.expr)
        names = {n for n in (alias, item.at) if n is not None}
        # an inlined identifier keeps naming the variable it gave (FROM cheap ⇒ FROM (…) AS cheap)
        item = dataclasses.replace(item, expr=expr, alias=alias if expr is not item.expr else item.alias)
        return item, bound | names

    def select_item(self, item: A.SelectItem, bound: frozenset[str]) -> A.SelectItem:
        if isinstance(item, A.ExprItem):
            alias = item.alias
            expr = self.expr(item.expr, bound)
            if alias is None and expr is not item.expr:
                alias = A.implicit_name(item.expr)  # the output keeps the name it was written with
            return dataclasses.replace(item, expr=expr, alias=alias)
        assert isinstance(item, A.StarItem)
        return dataclasses.replace(item, qualifier=self.opt(item.qualifier, bound))

    # ---- expressions

    def opt(self, e: A.Expr | None, bound: frozenset[str]) -> A.Expr | None:
        return None if e is None else self.expr(e, bound)

    def expr(self, e: A.Expr, bound: frozenset[str]) -> A.Expr:
        if isinstance(e, A.Identifier):
            return self.on_name(e, bound)
        if isinstance(e, (A.Subquery, A.Exists)):
            return dataclasses.replace(e, query=self.query(e.query, bound))
        if isinstance(e, A.InSubquery):
            return dataclasses.replace(e, operand=self.expr(e.operand, bound), query=self.query(e.query, bound))
        return _with_fields(e, lambda v: self.expr(v, bound) if isinstance(v, A.Expr) else v)


def _with_fields(node: A.Node, each: Callable) -> A.Node:
    """``node`` with the value ``v`` of each field (each element of a tuple, of a tuple of
    pairs) replaced by ``each(v)``; ``node`` itself when ``each`` changes none."""
    changes = {}
    for f in dataclasses.fields(node):
        if f.name == "span":
            continue
        v = getattr(node, f.name)
        new = _each_in(v, each)
        if new is not v:
            changes[f.name] = new
    return dataclasses.replace(node, **changes) if changes else node


def _each_in(v, each: Callable):
    if isinstance(v, tuple):
        new = tuple(_each_in(x, each) for x in v)
        return v if all(a is b for a, b in zip(new, v)) else new
    return each(v)


def generated_names(query: A.Query) -> A.Query:
    """``query`` with every projection that has no name, written or implicit (a variable's or
    a field's: :func:`~idivm.sqlpp.ast.implicit_name`), named ``$1``, ``$2``, … in AsterixDB's
    order: one counter for the whole query, taken by each block's SELECT clause first (a
    projection before the subqueries inside it), then by the blocks in its FROM, LET and WHERE
    clauses, its grouping keys without a name (which take a number, as AsterixDB's generated
    grouping variables do, but keep the name the plan builder gives them), and the blocks in
    its group LETs and HAVING; a UNION ALL's left side before its right.  So ``SELECT COUNT(*),
    MAX(x) FROM t`` returns ``$1`` and ``$2``, and ``SELECT t.id, COUNT(*)`` returns ``id`` and
    ``$1``.  A block with GROUP BY and ``SELECT *`` but no GROUP AS takes a number, after its
    grouping keys', for AsterixDB's generated group variable, which ``*`` makes a field of its
    rows (the block gets it as its GROUP AS).  The blocks of a WITH clause come first
    (:func:`name_blocks` names them before they are inlined): the numbers their projections took
    are not taken again."""
    return name_blocks(query, [_numbers_taken(query)])  # type: ignore[return-value]


def name_blocks(root: A.Node, counter: list[int]) -> A.Node:
    """``root`` with its projections without a name named as by :func:`generated_names`,
    ``counter[0]`` holding the last number taken (and updated)."""
    holds = _holding_queries(root)

    def fresh() -> str:
        counter[0] += 1
        return f"${counter[0]}"

    def node(n):
        if isinstance(n, A.Query):
            return block(n)
        if not isinstance(n, A.Node) or id(n) not in holds:
            return n  # no block below: nothing to name (long AND/OR chains are not descended)
        return _with_fields(n, node)

    def block(q: A.Query) -> A.Query:
        if isinstance(q, A.UnionAll):
            left = block(q.left)
            return dataclasses.replace(q, left=left, right=block(q.right))
        assert isinstance(q, A.SelectQuery)
        items = []
        for item in q.items:
            if isinstance(item, A.ExprItem):
                alias = item.alias
                if alias is None and A.implicit_name(item.expr) is None:
                    alias = fresh()
                item = dataclasses.replace(item, alias=alias, expr=node(item.expr))
            else:
                item = node(item)
            items.append(item)
        value = node(q.value) if q.value is not None else None
        from_items = tuple(node(f) for f in q.from_items)
        lets = tuple(node(b) for b in q.lets)
        where = node(q.where) if q.where is not None else None
        keys = []
        for k in q.group_by:
            if k.alias is None and A.implicit_name(k.expr) is None:
                fresh()  # AsterixDB's generated grouping variable takes a number (not a name here)
            keys.append(dataclasses.replace(k, expr=node(k.expr)))
        group_as = q.group_as
        if q.group_by and group_as is None and any(isinstance(i, A.StarItem) and i.qualifier is None
                                                   for i in q.items):
            group_as = fresh()  # SELECT * after GROUP BY: AsterixDB's generated group variable is a field
        group_lets = tuple(node(b) for b in q.group_lets)
        having = node(q.having) if q.having is not None else None
        return dataclasses.replace(q, items=tuple(items), value=value, from_items=from_items, lets=lets, where=where,
                                   group_by=tuple(keys), group_as=group_as, group_lets=group_lets, having=having)

    return node(root)


def _numbers_taken(root: A.Node) -> int:
    """The highest ``N`` of a projection of ``root`` named ``$N`` (0 if none is)."""
    top = 0
    stack: list = [root]
    while stack:
        n = stack.pop()
        if isinstance(n, A.ExprItem) and n.alias is not None:
            m = re.fullmatch(r"\$(\d+)", n.alias)
            if m:
                top = max(top, int(m.group(1)))
        stack.extend(n.children())
    return top


def _holding_queries(root: A.Node) -> set[int]:
    """The ids of the nodes of ``root`` that are or hold a query block (found without
    recursion: a WHERE clause may be a chain of thousands of ANDs)."""
    parent: dict[int, int] = {}
    holds: set[int] = set()
    stack: list = [root]
    while stack:
        n = stack.pop()
        kids = list(n.children())
        for c in kids:
            parent[id(c)] = id(n)
        stack.extend(kids)
        if isinstance(n, A.Query):
            at: int | None = id(n)
            while at is not None and at not in holds:
                holds.add(at)
                at = parent.get(at)
    return holds
