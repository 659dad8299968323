"""AST -> algebra plan, resolving every name against the catalog and the query's scopes.

Input: a parsed :class:`~idivm.sqlpp.ast.CreateView` (or query) and the typed
schemas of the base tables.  Output: a plan (thesis Table 2.5) whose root is
``ReturnBag`` and whose only leaves are ``Ground``, plus the static type of
the view's tuples.

Name rules (DESIGN.md "SQL++ scope"):

* a FROM item without alias is bound to the table's name (or the last step
  of its path);
* an unqualified name is, innermost scope first, a FROM/LET variable, a
  column merged by a NATURAL JOIN, or the column of exactly one variable in
  scope (SQL-style); two candidates are an ambiguity error;
* an unaliased projection of a path is named after its last step;
* after GROUP BY only grouping keys (by their ``AS`` name, their implicit
  name, or an expression identical to the key, SQL-92 style), the GROUP AS
  variable, aggregates and the LET variables after GROUP BY are visible.

Every variable of the plan gets a name unique in the whole query, so nested
plans never shadow the environment they run in.  Subqueries, aggregates,
collection functions and constructors are lifted out of terms into operators
(ApplyPlan, GroupBy, FunctionCall, Construct*), so terms stay scalar: the translation of
expressions is :mod:`idivm.algebra.term_builder`'s, of queries and their clauses this module's.
EXISTS / IN / NOT EXISTS / NOT IN conjuncts of WHERE become SemiJoin /
AntiJoin when the subquery's FROM does not depend on the outer block.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Mapping

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import (
    ABSENT, FALSE, MISSING, NULL, TRUE, Call, Const, Field, TableRef, Term, TupleExpr, Var, conjunction,
)
from idivm.algebra.term_builder import ONE_TYPE, Binding, GroupContext, Scope, TermBuilder, _Ctx
from idivm.errors import InternalError, SemanticError, UnsupportedError
from idivm.sqlpp import ast as A
from idivm.sqlpp.desugar import free_names, generated_names, replace_names


#: the one column of a view that returns scalars (``SELECT VALUE x.price``): a hidden name (the
#: prefix of hidden columns, :data:`idivm.provenance.ids.HIDDEN`), which readers show as ``value``
VALUE_COLUMN = "__idivm_value"
#: the name readers give the values of a scalar view (``show``, ``Warehouse.read``)
VALUE_NAME = "value"


@dataclass(frozen=True, slots=True)
class ViewPlan:
    """A view's plan and the static type of its stored rows (for a view of scalars, one
    :data:`VALUE_COLUMN` holding them: :func:`scalar_type`)."""

    name: str
    plan: O.Operator
    type: T.TupleType
    #: (table, column) of each column a base table lacks that the view reads (as MISSING)
    absent_columns: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = ()  # about the view text, each with its position


@dataclass
class _Built:
    plan: O.Operator  # binding tuples
    element: Term  # per binding tuple, the element of the query's bag
    type: T.Type  # the element's type
    #: with ORDER BY / LIMIT / OFFSET (:meth:`PlanBuilder.sequence`), the variable of the position
    #: of each element before OFFSET, and OFFSET's count
    position: str | None = None
    offset: int = 0


def build_view(view: A.CreateView, tables: Mapping[str, T.TupleType]) -> ViewPlan:
    """Plan a ``CREATE VIEW``.  A view of tuples stores one column per field; a view of other
    values (scalars, collections: ``SELECT VALUE x.price``, ``SELECT VALUE COUNT(*)``) stores
    them in the one hidden column :data:`VALUE_COLUMN`."""
    b = PlanBuilder(tables)
    plan, ty = b.query_plan(generated_names(view.query))
    if not isinstance(ty, T.TupleType):
        if ty in (T.ANY, T.NULL):
            raise UnsupportedError(
                f"the type of the values of view '{view.name}' cannot be inferred ({ty}); "
                "a view must return values of one known type", view.query.span)
        plan, ty = (O.ReturnBag(plan.input, TupleExpr(((VALUE_COLUMN, plan.element),)), span=plan.span),
                    T.TupleType(((VALUE_COLUMN, ty),)))
    elif not isinstance(plan.element, TupleExpr):  # SELECT VALUE of a tuple: one column per field
        el = plan.element
        plan = O.ReturnBag(plan.input, TupleExpr(tuple((n, Field(el, n)) for n, _ in ty.fields)), span=plan.span)
    return ViewPlan(view.name, plan, ty, tuple(sorted(b.absent_columns)), tuple(b.warnings))


def scalar_type(schema: T.TupleType) -> T.Type | None:
    """The type of the values of a view of scalars (or collections) stored as ``schema``; None
    for a view of tuples."""
    if schema.names == (VALUE_COLUMN,):
        return schema.fields[0][1]
    return None


def build_query(query: A.Query, tables: Mapping[str, T.TupleType]) -> tuple[O.Operator, T.Type]:
    """Plan a query; returns the plan (rooted at ReturnBag) and the element type.  Unnamed
    projections get AsterixDB's generated names (:func:`~idivm.sqlpp.desugar.generated_names`)."""
    return PlanBuilder(tables).query_plan(generated_names(query))


def _enclosing(sc: Scope) -> Iterator[Scope]:
    """``sc`` and the scopes that enclose it, innermost first."""
    s: Scope | None = sc
    while s is not None:
        yield s
        s = s.parent


class PlanBuilder(TermBuilder):
    """Queries and their clauses to operators; the terms of their expressions are
    :class:`~idivm.algebra.term_builder.TermBuilder`'s."""

    # ------------------------------------------------------------------ queries

    def query_plan(self, q: A.Query, parent: Scope | None = None,
                   sub: A.Subquery | None = None) -> tuple[O.Operator, T.Type]:
        """A query's plan, rooted at ReturnBag; with ``sub`` (the subquery ``q`` is the query
        of) its ORDER BY / LIMIT / OFFSET: the value is then an array in that order."""
        built = self.query(q, parent, sub)
        order = None if built.position is None else Var(built.position)
        return O.ReturnBag(built.plan, built.element, order, span=q.span), built.type

    def query(self, q: A.Query, parent: Scope | None, sub: A.Subquery | None = None) -> _Built:
        if sub is not None and not sub.sequenced:
            sub = None
        if isinstance(q, A.UnionAll):
            built = self.union_all(q, parent)
            if sub is not None:  # the keys name the columns of the result
                sc = Scope(parent)
                ctx = _Ctx(built.plan)
                if isinstance(built.element, TupleExpr) and isinstance(built.type, T.TupleType):
                    for (n, v), (_, ty) in zip(built.element.fields, built.type.fields):
                        if isinstance(v, Var):
                            sc.add(Binding(n, v.name, ty), q.span)
                keys = self.order_keys(sub, sc, ctx, lambda e: e)
                built = _Built(ctx.plan, built.element, built.type)
                self.sequence(sub, built, keys)
            return built
        assert isinstance(q, A.SelectQuery)
        sc = Scope(parent)
        ctx = _Ctx(O.Ground())
        if q.from_items:
            ctx.plan = self.from_clause(q.from_items, sc)
        self.lets(q.lets, sc, ctx)
        if q.where is not None:
            self.where(q.where, sc, ctx)
        out_scope = sc
        aggs = self.aggregate_calls(q, sub)
        if q.group_by or aggs or q.group_as:
            out_scope = self.group_by(q, sc, ctx, aggs)
            self.lets(q.group_lets, out_scope, ctx)
            if q.having is not None:
                cond = self.condition(q.having, out_scope, ctx)
                ctx.plan = O.Select(ctx.plan, cond, span=q.having.span)
        elif q.having is not None:
            raise SemanticError("HAVING needs GROUP BY or an aggregate", q.having.span)
        if sub is None:
            return self.select_clause(q, out_scope, ctx)
        keys = self.order_keys(sub, out_scope, ctx, _aliases_replaced(q, lambda n: self.is_variable(n, out_scope)))
        built = self.select_clause(q, out_scope, ctx, keep=tuple(v for v, _ in keys))
        self.sequence(sub, built, keys)
        return built

    def order_keys(self, sub: A.Subquery, sc: Scope, ctx: _Ctx, resolve) -> list[tuple[str, bool]]:
        """The ORDER BY keys of ``sub``, each assigned to a variable (kept by the projection
        that follows): (variable, descending).  ``resolve``: the key's expression with the
        SELECT's aliases it names replaced by their expressions."""
        keys = []
        for k in sub.order:
            t = self.expr(resolve(k.expr), sc, ctx)
            ty = self.type_of(t)
            if isinstance(ty, (T.TupleType, T.CollectionType)):
                raise SemanticError(f"an ORDER BY key must be a scalar, not {T.brief(ty)}", k.span)
            var = self.fresh("order", ty)
            ctx.plan = O.Assign(ctx.plan, t, var, span=k.span)
            keys.append((var, k.descending))
        return keys

    def sequence(self, sub: A.Subquery, built: _Built, keys: list[tuple[str, bool]]) -> None:
        """``built`` numbered in the order of ``keys`` (:class:`~idivm.algebra.operators.OrderBy`),
        and restricted to the positions LIMIT and OFFSET keep."""
        pos = self.fresh("position", T.INT)
        built.plan = O.OrderBy(built.plan, tuple((Var(v), d) for v, d in keys), pos, span=sub.span)
        offset = _count(sub.offset, "OFFSET") if sub.offset is not None else 0
        conds = []
        if offset:
            conds.append(Call("gt", (Var(pos), Const(offset, T.INT))))
        if sub.limit is not None:
            conds.append(Call("le", (Var(pos), Const(offset + _count(sub.limit, "LIMIT"), T.INT))))
        if conds:
            built.plan = O.Select(built.plan, conjunction(conds), span=sub.span)
        built.position, built.offset = pos, offset

    def lets(self, lets: tuple[A.LetBinding, ...], sc: Scope, ctx: _Ctx) -> None:
        """``LET name = e, …``: each value assigned to a new variable of the block, in order."""
        for let in lets:
            t = self.expr(let.expr, sc, ctx)
            var = self.fresh(let.name, self.type_of(t))
            ctx.plan = O.Assign(ctx.plan, t, var, span=let.span)
            m = self.missing(t)
            if m != FALSE:
                self.var_missing[var] = m
            sc.add(Binding(let.name, var, self.var_types[var]), let.span)

    def union_all(self, q: A.UnionAll, parent: Scope | None) -> _Built:
        left = self.query(q.left, parent)
        right = self.query(q.right, parent)
        lt, rt = left.element, right.element
        if isinstance(lt, TupleExpr) and isinstance(rt, TupleExpr):
            if len(lt.fields) != len(rt.fields):
                raise SemanticError(
                    f"UNION ALL branches have {len(lt.fields)} and {len(rt.fields)} columns", q.span)
            names = [n for n, _ in lt.fields]
            vars_ = [self.fresh(n) for n in names]
            ltype, rtype = left.type, right.type
            fields_ = []
            for i, (n, v) in enumerate(zip(names, vars_)):
                ft = _union_type(f"column {n} of UNION ALL",
                                 ltype.fields[i][1] if isinstance(ltype, T.TupleType) else T.ANY,
                                 rtype.fields[i][1] if isinstance(rtype, T.TupleType) else T.ANY, q.span)
                self.var_types[v] = ft
                fields_.append((n, ft))
            lp = O.Project(left.plan, tuple((v, self.coerce(x, ft)) for v, (_, x), (_, ft)
                                            in zip(vars_, lt.fields, fields_)))
            rp = O.Project(right.plan, tuple((v, self.coerce(x, ft)) for v, (_, x), (_, ft)
                                             in zip(vars_, rt.fields, fields_)))
            element = TupleExpr(tuple((n, Var(v)) for n, v in zip(names, vars_)))
            return _Built(O.UnionAll(lp, rp, span=q.span), element, T.TupleType(tuple(fields_)))
        ty = _union_type("UNION ALL", left.type, right.type, q.span)
        var = self.fresh("value", ty)
        lp = O.Project(left.plan, ((var, self.coerce(lt, ty)),))
        rp = O.Project(right.plan, ((var, self.coerce(rt, ty)),))
        return _Built(O.UnionAll(lp, rp, span=q.span), Var(var), ty)

    # ------------------------------------------------------------------ FROM

    def from_clause(self, items: tuple[A.FromItem, ...], sc: Scope) -> O.Operator:
        plan: O.Operator | None = None
        for item in items:
            plan = self.from_item(item, sc, plan)
        assert plan is not None
        return plan

    def from_item(self, item: A.FromItem, sc: Scope, current: O.Operator | None) -> O.Operator:
        block_vars = {b.var for b in sc.bindings}
        if isinstance(item, A.FromExpr) and item.outer and current is not None:
            return self.outer_unnest(item, sc, current)
        if isinstance(item, A.FromExpr) and not isinstance(item.expr, A.Subquery) and block_vars:
            probe = _Ctx(current)
            if not self.is_table(item.expr, sc):
                t = self.expr(item.expr, sc, probe)
                if t.variables() & block_vars or probe.plan is not current:
                    return self.scan(item, t, sc, probe.plan)
        if isinstance(item, A.FromExpr) and isinstance(item.expr, A.Subquery) and block_vars:
            sub = self.subquery_bindings(item, sc)
            if O.free_variables(sub) & block_vars:
                return O.InnerCorrelate(current, sub, span=item.span)
            return O.InnerJoin(current, sub, TRUE, span=item.span)
        part_scope = Scope(sc.parent)
        part = self.standalone(item, part_scope, sc)
        for b in part_scope.bindings:
            sc.add(b, item.span)
        sc.natural.update(part_scope.natural)
        if current is None:
            return part
        return O.InnerJoin(current, part, TRUE, span=item.span)

    def outer_unnest(self, item: A.FromExpr, sc: Scope, current: O.Operator) -> O.Operator:
        """``LEFT [OUTER] UNNEST e AS v``: each tuple so far with each element of ``e`` (evaluated
        in its environment), and once with ``v`` MISSING when ``e`` has none."""
        ctx = _Ctx(O.Ground())
        t = self.expr(item.expr, sc, ctx)
        before = len(sc.bindings)
        nested = self.scan(item, t, sc, ctx.plan)
        self.padded(sc.bindings[before:])
        return O.LeftCorrelate(current, nested, span=item.span)

    def is_variable(self, name: str, sc: Scope) -> bool:
        return any(s.lookup(name) is not None for s in _enclosing(sc))

    def is_column(self, name: str, sc: Scope) -> bool:
        """Whether ``name`` is an unqualified column of a variable in scope (``FROM c, interests
        AS i`` iterates over ``c.interests``, as AsterixDB resolves it)."""
        return any(name in s.columns() for s in _enclosing(sc))

    def is_table(self, e: A.Expr, sc: Scope) -> bool:
        if isinstance(e, A.Identifier) and e.table:
            self.hidden_table(e, sc)
            return True
        return isinstance(e, A.Identifier) and e.name in self.tables and not self.is_variable(e.name, sc)

    def standalone(self, item: A.FromItem, part: Scope, block: Scope) -> O.Operator:
        """A FROM item that does not depend on earlier items of its block, built from Ground.
        Its bindings go into ``part`` (whose parent is the enclosing query's scope)."""
        if isinstance(item, A.Join):
            return self.join(item, part, block)
        assert isinstance(item, A.FromExpr)
        if isinstance(item.expr, A.Subquery):
            sub = self.subquery_bindings(item, part)
            return sub
        if self.is_table(item.expr, block):
            name = item.expr.name  # type: ignore[attr-defined]
            alias = item.alias or name
            ty = self.tables[name]
            var = self.fresh(alias, ty)
            if item.at:
                raise SemanticError(f"AT needs an ordered collection; table '{name}' is a bag", item.span)
            part.add(Binding(alias, var, ty), item.span)
            return O.ScanCollection(O.Ground(), TableRef(name, span=item.expr.span), var, span=item.span)
        if isinstance(item.expr, A.Identifier) and not self.is_variable(item.expr.name, block) \
                and not self.is_column(item.expr.name, block):
            known = ", ".join(sorted(self.tables)) or "none"
            raise SemanticError(f"unknown table '{item.expr.name}' (tables: {known})", item.expr.span)
        ctx = _Ctx(O.Ground())
        t = self.expr(item.expr, block, ctx)
        return self.scan(item, t, part, ctx.plan)

    def scan(self, item: A.FromExpr, source: Term, sc: Scope, plan: O.Operator) -> O.Operator:
        ty = self.type_of(source)
        if isinstance(ty, T.CollectionType):
            el = ty.element
        elif ty == T.ANY:
            el = T.ANY
        else:
            raise SemanticError(f"cannot iterate over {source}: it is {ty}, not a collection", item.span)
        alias = item.alias or A.implicit_name(item.expr) or "x"
        var = self.fresh(alias, el)
        pos = self.fresh(item.at, T.INT) if item.at else None
        sc.add(Binding(alias, var, el), item.span)
        if item.at:
            sc.add(Binding(item.at, pos, T.INT), item.span)
        return O.ScanCollection(plan, source, var, pos, span=item.span)

    def subquery_bindings(self, item: A.FromExpr, sc: Scope) -> O.Operator:
        """``FROM (subquery) AS s [AT p]``: the subquery's binding tuples with ``s`` bound to each
        element (and ``p`` to its position in the subquery's ORDER BY).  Without AT and LIMIT/OFFSET
        the order of the elements is not observable, and an ORDER BY is ignored."""
        sq = item.expr
        assert isinstance(sq, A.Subquery)
        if item.at and not sq.ordered:
            raise UnsupportedError(
                "AT needs an ordered collection; the result of a subquery without ORDER BY is a bag", item.span)
        numbered = item.at or sq.limit is not None or sq.offset is not None
        sub = self.query(sq.query, sc, sq if numbered else None)
        alias = item.alias or "s"
        var = self.fresh(alias, sub.type)
        sc.add(Binding(alias, var, sub.type), item.span)
        outputs: tuple[tuple[str, Term], ...] = ((var, sub.element),)
        if item.at:
            assert sub.position is not None
            at = self.fresh(item.at, T.INT)
            pos: Term = Var(sub.position)
            outputs += ((at, Call("sub", (pos, Const(sub.offset, T.INT))) if sub.offset else pos),)
            sc.add(Binding(item.at, at, T.INT), item.span)
        return O.Project(sub.plan, outputs, span=item.span)

    def join(self, j: A.Join, part: Scope, block: Scope) -> O.Operator:
        left_scope, right_scope = Scope(part.parent), Scope(part.parent)
        left = self.standalone(j.left, left_scope, block)
        right = self.standalone(j.right, right_scope, block)
        cond_scope = Scope(part.parent)
        for b in left_scope.bindings + right_scope.bindings:
            cond_scope.add(b, j.span)
        cond_scope.natural.update(left_scope.natural)
        cond_scope.natural.update(right_scope.natural)
        if j.natural:
            lcols, rcols = left_scope.columns(), right_scope.columns()
            common = [c for c in lcols if c in rcols]
            for c in common:
                if lcols[c] is None or rcols[c] is None:
                    side = "left" if lcols[c] is None else "right"
                    raise SemanticError(f"NATURAL JOIN column '{c}' is ambiguous on the {side} side", j.span)
            cond = conjunction([self.call("eq", (lcols[c], rcols[c]), span=j.span) for c in common])
            for c in common:
                cond_scope.natural[c] = lcols[c]
        elif j.condition is not None:
            right, on = self.right_conjuncts(j.condition, left_scope, right_scope, right)
            ctx = _Ctx(O.Ground())
            cond = self.condition(on, cond_scope, ctx) if on is not None else TRUE
            if not isinstance(ctx.plan, O.Ground):
                raise UnsupportedError("subqueries in JOIN … ON are supported only in conjuncts over the "
                                       "right side's variables; move them to WHERE", on.span)
        else:
            cond = TRUE
        for b in cond_scope.bindings:
            part.add(b, j.span)
        part.natural.update(cond_scope.natural)
        if j.kind == "INNER":
            return O.InnerJoin(left, right, cond, span=j.span)
        self.padded(right_scope.bindings)
        return O.LeftJoin(left, right, cond, span=j.span)

    def right_conjuncts(self, on: A.Expr, left: Scope, right: Scope, plan: O.Operator
                        ) -> tuple[O.Operator, A.Expr | None]:
        """The ON conjuncts with subqueries that use no variable of the join's left side, as
        selections of its right input (for an inner and a left join alike, such a conjunct only
        chooses the right tuples that can match), and the rest of the condition (None: none)."""
        left_names = {b.name for b in left.bindings} | set(left.natural) | set(left.columns())
        rest: list[A.Expr] = []
        for c in _split_and(on):
            if _has_subquery(c) and not (free_names(c) & left_names):
                ctx = _Ctx(plan)
                t = self.condition(c, right, ctx)
                plan = O.Select(ctx.plan, t, span=c.span)
            else:
                rest.append(c)
        if not rest:
            return plan, None
        if len(rest) == len(_split_and(on)):
            return plan, on  # nothing moved: the condition as written
        cond = rest[0]
        for c in rest[1:]:
            cond = A.BinaryOp("AND", cond, c, span=cond.span)
        return plan, cond

    def padded(self, bindings: list[Binding]) -> None:
        """The variables of a LEFT JOIN's right side are MISSING where it has no match: the
        MISSING predicate of each is that a tuple variable of that side (a row, never NULL
        where there is a match) is NULL; a side without one goes by each variable's own NULL."""
        rows = [b.var for b in bindings if isinstance(b.type, T.TupleType)]
        for b in bindings:
            anchor = rows[0] if rows else b.var
            m = Call("is_null", (Var(anchor),))
            own = self.var_missing.get(b.var)
            self.var_missing[b.var] = m if own is None else Call("or", (m, own))

    # ------------------------------------------------------------------ WHERE

    def where(self, cond: A.Expr, sc: Scope, ctx: _Ctx) -> None:
        """WHERE's conjuncts as selections: those without a subquery first, over the FROM
        clause; then those whose subqueries (each an ApplyPlan, evaluated once for every
        distinct value of its correlation parameters) see only the tuples the first kept;
        then EXISTS and IN as semi- and antijoins where they can be."""
        plain: list[Term] = []
        nested: list[A.Expr] = []
        semis: list[A.Expr] = []
        for c in _split_and(cond):
            target = c.operand if isinstance(c, A.UnaryOp) and c.op == "NOT" else c
            if isinstance(target, (A.Exists, A.InSubquery)):
                semis.append(c)
            elif _has_subquery(c):
                nested.append(c)
            else:
                plain.append(self.condition(c, sc, ctx))
        if plain:
            ctx.plan = O.Select(ctx.plan, conjunction(plain), span=cond.span)
        if nested:
            terms = [self.condition(c, sc, ctx) for c in nested]
            ctx.plan = O.Select(ctx.plan, conjunction(terms), span=cond.span)
        for c in semis:
            if not self.semijoin(c, sc, ctx):
                t = self.expr(c, sc, ctx)  # first: it stacks the subquery's ApplyPlan on ctx.plan
                ctx.plan = O.Select(ctx.plan, t, span=c.span)

    def condition(self, c: A.Expr, sc: Scope, ctx: _Ctx) -> Term:
        """The term of a condition (WHERE, HAVING, ON), which must be a boolean."""
        t = self.expr(c, sc, ctx)
        ty = self.type_of(t)
        if ty not in (T.BOOL, T.NULL, T.ANY):
            raise SemanticError(f"type mismatch: the condition {t} is {ty}, not a boolean", c.span)
        return t

    def semijoin(self, c: A.Expr, sc: Scope, ctx: _Ctx) -> bool:
        """Turn ``[NOT] EXISTS (q)`` / ``x [NOT] IN (q)`` into SemiJoin/AntiJoin when q's FROM
        does not depend on the outer block and q neither groups nor aggregates."""
        negated = False
        if isinstance(c, A.UnaryOp):
            negated, c = True, c.operand
        negated ^= c.negated  # type: ignore[attr-defined]
        q = c.query  # type: ignore[attr-defined]
        if (not isinstance(q, A.SelectQuery) or not q.from_items or q.group_by or q.group_as
                or q.having is not None or q.lets or q.group_lets or self.aggregate_calls(q)):
            return False
        block_vars = set(ctx.plan.output_variables())
        sub_scope = Scope(sc)
        sub = self.from_clause(q.from_items, sub_scope)
        if O.free_variables(sub) & block_vars:
            return False
        sub_vars = set(sub.output_variables())
        sub_ctx = _Ctx(sub)
        local: list[Term] = []
        correlated: list[Term] = []
        for w in (_split_and(q.where) if q.where is not None else []):
            t = self.expr(w, sub_scope, sub_ctx)
            (correlated if t.variables() & (block_vars - sub_vars) else local).append(t)
        if isinstance(c, A.InSubquery):
            if q.value is not None:
                el_ast = q.value
            elif len(q.items) == 1 and isinstance(q.items[0], A.ExprItem):
                el_ast = q.items[0].expr
            else:
                raise SemanticError("the subquery of IN must return one column", q.span)
            element = self.expr(el_ast, sub_scope, sub_ctx)
            if sub_ctx.plan is not sub and O.free_variables(sub_ctx.plan) & block_vars:
                return False
            operand = self.expr(c.operand, sc, ctx)
            match = self.call("eq", (operand, element), span=c.span)
            if negated:  # NOT IN: no match, no NULL on either side (SQL three-valued logic)
                match = Call("or", (match, Call("is_null", (operand,)), Call("is_null", (element,))))
            correlated.append(match)
        right = sub_ctx.plan
        if O.free_variables(right) & block_vars:
            return False
        if local:
            right = O.Select(right, conjunction(local), span=q.where.span if q.where else None)
        cls = O.AntiJoin if negated else O.SemiJoin
        ctx.plan = cls(ctx.plan, right, conjunction(correlated), span=c.span)
        return True

    # ------------------------------------------------------------------ GROUP BY

    def aggregate_calls(self, q: A.SelectQuery, sub: A.Subquery | None = None) -> list[A.FunctionCall]:
        """SQL aggregate calls of SELECT, HAVING, the LETs after GROUP BY and the ORDER BY of
        ``sub`` (the subquery ``q`` is the query of), not inside subqueries or other aggregates."""
        found: list[A.FunctionCall] = []

        def visit(n: A.Node) -> None:
            if isinstance(n, (A.Subquery, A.Exists, A.InSubquery)):
                if isinstance(n, A.InSubquery):
                    visit(n.operand)
                return
            if isinstance(n, A.FunctionCall) and n.name in A.AGGREGATES:
                if n not in found:
                    found.append(n)
                return
            for ch in n.children():
                visit(ch)

        roots: list[A.Node] = list(q.items) + [let.expr for let in q.group_lets]
        roots += [k.expr for k in sub.order] if sub is not None else []
        if q.value is not None:
            roots.append(q.value)
        if q.having is not None:
            roots.append(q.having)
        for r in roots:
            visit(r)
        return found

    def group_by(self, q: A.SelectQuery, sc: Scope, ctx: _Ctx, aggs: list[A.FunctionCall]) -> Scope:
        keys: list[tuple[str, Term]] = []
        gctx = GroupContext(sc, [], {})
        out = Scope(sc.parent, group=gctx)
        for i, k in enumerate(q.group_by):
            t = self.expr(k.expr, sc, ctx)
            name = k.alias or A.implicit_name(k.expr) or f"key{i + 1}"
            var = self.fresh(name, self.type_of(t))
            if q.grouping_set is None or i in q.grouping_set:
                keys.append((var, t))
                m = self.missing(t)
                if m != FALSE:  # MISSING and NULL are different groups: the MISSING predicate is a key too
                    mvar = self.fresh(f"{name}_missing", T.BOOL)
                    keys.append((mvar, m))
                    self.var_missing[var] = Var(mvar)
            else:  # a key of the other grouping sets: NULL in this block
                gctx.unset |= {var}
            gctx.keys.append((t, var))
            if out.lookup(name) is None:
                out.bindings.append(Binding(name, var, self.var_types[var]))
        aggregates: list[tuple[str, O.Aggregate]] = []
        for call in aggs:
            if call.star:
                agg, ty = O.Aggregate("count", None), T.INT
            else:
                if len(call.args) != 1:
                    raise SemanticError(f"{call.name} takes one argument", call.span)
                for inner in call.args[0].walk():
                    if isinstance(inner, A.FunctionCall) and inner.name in A.AGGREGATES:
                        raise SemanticError("aggregates cannot be nested", inner.span)
                arg = self.expr(call.args[0], sc, ctx)
                fn = A.STATISTICS_ALIASES.get(call.name, call.name).lower()
                agg = O.Aggregate(fn, arg, call.distinct)
                at = self.type_of(arg)
                if fn in ("sum", *O.DOUBLE_AGGREGATES) and at not in (T.ANY, T.NULL) and not T.is_numeric(at):
                    raise SemanticError(f"type mismatch in {agg}: its argument is {at}, not a number", call.span)
                ty = T.INT if fn == "count" else T.DOUBLE if fn in O.DOUBLE_AGGREGATES else at
                if fn == "sum" and at == T.ANY:
                    ty = T.ANY
            var = self.fresh(call.name.lower(), ty)
            aggregates.append((var, agg))
            gctx.aggregates[call] = var
        group_var = None
        group_fields: tuple[tuple[str, Term], ...] = ()
        if q.group_as:
            members = sc.bindings
            if q.group_fields:
                members = []
                for var, field in q.group_fields:
                    b = sc.lookup(var)
                    if b is None:
                        raise SemanticError(f"GROUP AS {q.group_as}({var} AS {field}): unknown variable '{var}' "
                                            f"(variables: {', '.join(x.name for x in sc.bindings)})",
                                            q.group_by[0].span if q.group_by else q.span)
                    members.append(Binding(field, b.var, b.type))
            group_fields = tuple((b.name, Var(b.var)) for b in members)
            el = T.TupleType(tuple((b.name, b.type) for b in members))
            group_var = self.fresh(q.group_as, T.CollectionType(el))
            out.bindings.append(Binding(q.group_as, group_var, self.var_types[group_var]))
        ctx.plan = O.GroupBy(ctx.plan, tuple(keys), tuple(aggregates), group_var, group_fields,
                             span=q.group_by[0].span if q.group_by else q.span)
        for var in sorted(gctx.unset):
            ctx.plan = O.Assign(ctx.plan, NULL, var, span=q.span)
        return out

    # ------------------------------------------------------------------ SELECT

    def select_clause(self, q: A.SelectQuery, sc: Scope, ctx: _Ctx, keep: tuple[str, ...] = ()) -> _Built:
        """The SELECT clause's element; ``keep``: variables its projection keeps (ORDER BY keys)."""
        kept = tuple((v, Var(v)) for v in keep)
        if q.value is not None:
            t = self.expr(q.value, sc, ctx)
            ty = self.type_of(t)
            if q.distinct:
                var = self.fresh("value", ty)
                ctx.plan = O.Distinct(O.Project(ctx.plan, ((var, t),) + kept, span=q.value.span))
                t = Var(var)
            return _Built(ctx.plan, t, ty)
        fields_: list[tuple[str, Term]] = []
        from_star: set[str] = set()
        for item in q.items:
            if isinstance(item, A.ExprItem):
                t = self.expr(item.expr, sc, ctx)
                name = item.alias or A.implicit_name(item.expr)
                if name is None:
                    raise InternalError("a projection without a name: the query was not passed through generated_names",
                                        item.span)
                self._add_field(fields_, from_star, name, t, item.span, star=False, sc=sc)
            else:
                assert isinstance(item, A.StarItem)
                for name, t in self.star(item, sc, ctx):
                    self._add_field(fields_, from_star, name, t, item.span, star=True, sc=sc)
        outputs = []
        element = []
        tys = []
        for name, t in self.with_absent(tuple(fields_)):
            var = self.fresh(name, self.type_of(t))
            outputs.append((var, t))
            element.append((name, Var(var)))
            tys.append((name, self.var_types[var]))
        ctx.plan = O.Project(ctx.plan, tuple(outputs) + kept, span=q.span)
        if q.distinct:
            ctx.plan = O.Distinct(ctx.plan, span=q.span)
        return _Built(ctx.plan, TupleExpr(tuple(element)), T.TupleType(tuple(tys)))

    def _add_field(self, fields_, from_star, name, t, span, *, star: bool, sc: Scope) -> None:
        for i, (n, old) in enumerate(fields_):
            if n != name:
                continue
            if MISSING in (old, t):  # a field that is always MISSING is never in the tuple: no conflict
                fields_[i] = (name, old if t == MISSING else t)
                return
            if star and (name in _natural_names(sc) or old == t):
                return  # the same (natural-join) column again
            if n in from_star and (name in _natural_names(sc) or old == t):
                fields_[i] = (name, t)
                return
            raise SemanticError(f"duplicate field name '{name}' in SELECT; rename one with AS", span)
        fields_.append((name, t))
        if star:
            from_star.add(name)

    def star(self, item: A.StarItem, sc: Scope, ctx: _Ctx) -> list[tuple[str, Term]]:
        if item.qualifier is None:
            if not sc.bindings:
                raise SemanticError("SELECT * needs FROM variables", item.span)
            return [(b.name, Var(b.var)) for b in sc.bindings]
        t = self.expr(item.qualifier, sc, ctx)
        ty = self.type_of(t)
        if not isinstance(ty, T.TupleType):
            what = "unknown" if ty == T.ANY else f"{ty}, not a tuple"
            raise SemanticError(f"cannot expand {t}.*: its type is {what}", item.span)
        return [(n, Field(t, n)) for n, _ in ty.fields if n != ABSENT]

    # ------------------------------------------------------------------ expressions


def _count(e: A.Expr, clause: str) -> int:
    """The count of a subquery's LIMIT or OFFSET: an integer literal, not negative."""
    if isinstance(e, A.Literal) and isinstance(e.value, int) and not isinstance(e.value, bool) and e.value >= 0:
        return e.value
    raise UnsupportedError(f"{clause} needs a non-negative integer literal", e.span)


def _aliases_replaced(q: A.SelectQuery, is_variable):
    """For an ORDER BY key of ``q``: the key with each name of a SELECT alias that is no variable
    (``SELECT x.a + 1 AS b … ORDER BY b``) replaced by the aliased expression."""
    aliases = {i.alias: i.expr for i in q.items if isinstance(i, A.ExprItem) and i.alias is not None}
    return lambda e: replace_names(e, lambda name: None if is_variable(name) else aliases.get(name))


def _union_type(what: str, left: T.Type, right: T.Type, span) -> T.Type:
    """The type of the values of both branches of a UNION ALL in one place (:func:`~idivm.types.widen`:
    values of different types make a union); records of other fields there are refused."""
    ty = T.widen(left, right)
    if ty is None:
        raise SemanticError(f"{what} mixes values of types {T.brief(left)} and {T.brief(right)}; {ONE_TYPE}", span)
    return ty


def _has_subquery(n: A.Node) -> bool:
    """Whether the expression ``n`` holds a subquery (EXISTS and IN included)."""
    return isinstance(n, (A.Subquery, A.Exists, A.InSubquery)) or any(_has_subquery(c) for c in n.children())


def _split_and(e: A.Expr) -> list[A.Expr]:
    if isinstance(e, A.BinaryOp) and e.op.upper() == "AND":
        return _split_and(e.left) + _split_and(e.right)
    return [e]


def _natural_names(sc: Scope) -> set[str]:
    names: set[str] = set()
    s: Scope | None = sc
    while s is not None:
        names |= set(s.natural)
        if s.group is not None:
            names |= set(s.group.pre_scope.natural)
        s = s.parent
    return names
