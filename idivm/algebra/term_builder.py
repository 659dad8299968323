"""SQL++ expressions -> algebra terms: the expression half of the plan builder
(:mod:`idivm.algebra.builder`, which translates the clauses).

Input: an AST expression, the scope it is in (:class:`Scope`: the FROM/LET variables of its
block and of the enclosing blocks, the columns a NATURAL JOIN merged, after GROUP BY the
grouping keys and aggregates) and the plan built so far (:class:`_Ctx`).  Output: a scalar
:class:`~idivm.algebra.expressions.Term`.  Subqueries, aggregates, collection functions and
constructors are lifted out of terms into operators (ApplyPlan, FunctionCall, Construct*)
stacked on the plan, so terms stay scalar; a subquery's own plan comes from the clause
translation (:meth:`TermBuilder.query_plan`).  The name rules are the builder's.
"""

from __future__ import annotations

import json

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import (
    ABSENT, FALSE, FUNCTION_ALIASES, MISSING, SCALAR_FUNCTIONS, TRUE, ArrayExpr, BagExpr, Call, Case,
    Const, Field, Index, Term, TupleExpr, Var, _anything,
)
from idivm.errors import SemanticError, Span, UnsupportedError
from idivm.sqlpp import ast as A

_BINARY = {
    "+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod", "||": "concat",
    "=": "eq", "==": "eq", "!=": "ne", "<>": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge",
    "AND": "and", "OR": "or",
}
# the collection aggregates: ARRAY_* skip NULL elements, STRICT_* (COLL_* in older AsterixDB) do not
_COLLECTION_FUNCTIONS = {
    "ARRAY_COUNT": "array_count", "ARRAY_SUM": "array_sum", "ARRAY_AVG": "array_avg",
    "ARRAY_MIN": "array_min", "ARRAY_MAX": "array_max",
    "STRICT_COUNT": "strict_count", "STRICT_SUM": "strict_sum", "STRICT_AVG": "strict_avg",
    "STRICT_MIN": "strict_min", "STRICT_MAX": "strict_max",
    "COLL_COUNT": "strict_count", "COLL_SUM": "strict_sum", "COLL_AVG": "strict_avg",
    "COLL_MIN": "strict_min", "COLL_MAX": "strict_max",
    **{f"{kind}_{name}": f"{to}_{A.STATISTICS_ALIASES.get(name, name).lower()}"
       for kind, to in (("ARRAY", "array"), ("STRICT", "strict"), ("COLL", "strict"))
       for name in (*A.STATISTICS, *A.STATISTICS_ALIASES)},
}


#: the comparison functions: of values of incompatible types they are NULL, not an error
_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})

#: why values of different types in one place (the results of a CASE, ...) are refused
ONE_TYPE = "the records of one place (a column, a field, a collection's elements) must have the same fields"


@dataclass
class Binding:
    name: str  # what the query text calls it
    var: str  # the plan variable
    type: T.Type


@dataclass
class GroupContext:
    pre_scope: "Scope"
    keys: list[tuple[Term, str]]  # (key term in the pre-group scope, key variable)
    aggregates: dict[A.FunctionCall, str]  # aggregate call -> variable
    unset: frozenset[str] = frozenset()  # key variables of the other grouping sets (NULL here)


@dataclass
class Scope:
    parent: "Scope | None"
    bindings: list[Binding] = field(default_factory=list)
    natural: dict[str, Term] = field(default_factory=dict)
    group: GroupContext | None = None

    def lookup(self, name: str) -> Binding | None:
        for b in reversed(self.bindings):
            if b.name == name:
                return b
        return None

    def add(self, b: Binding, span: Span | None) -> None:
        if any(x.name == b.name for x in self.bindings):
            raise SemanticError(f"duplicate alias '{b.name}' in FROM", span)
        self.bindings.append(b)

    def columns(self) -> dict[str, Term]:
        """Unqualified column names visible in this block and the terms they denote
        (ambiguous names map to None)."""
        cols: dict[str, Term | None] = {}
        for b in self.bindings:
            if isinstance(b.type, T.TupleType):
                for f in b.type.names:
                    if f != ABSENT:
                        cols[f] = None if f in cols else Field(Var(b.var), f)
        cols.update(self.natural)
        return cols


class _Ctx:
    """The plan being extended while terms are built (lifted operators stack on it)."""

    def __init__(self, plan: O.Operator):
        self.plan = plan


class TermBuilder(ABC):
    """Terms of expressions, and the plan variables they name: every variable gets a name
    unique in the whole query (:meth:`fresh`), so nested plans never shadow the environment
    they run in."""

    def __init__(self, tables: Mapping[str, T.TupleType]):
        self.tables = dict(tables)
        self.used: set[str] = set()
        self.var_types: dict[str, T.Type] = {}
        # the MISSING predicate of a variable that may be MISSING (the right side of a LEFT
        # JOIN, a LET of a term that may be), over the variables in scope where it is bound
        self.var_missing: dict[str, Term] = {}
        #: (table, column) of each column a base table lacks that the query reads (as MISSING)
        self.absent_columns: set[tuple[str, str]] = set()
        self.warnings: list[str] = []  # about the query, each with its position

    # ------------------------------------------------------------------ naming

    def fresh(self, base: str, ty: T.Type = T.ANY) -> str:
        base = re.sub(r"\W", "_", base) or "v"
        if not (base[0].isalpha() or base[0] == "_") or base.startswith("__"):
            base = "v_" + base.lstrip("_")
        name, n = base, 1
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        self.var_types[name] = ty
        return name

    def type_of(self, t: Term) -> T.Type:
        match t:
            case Var(name=n):
                return self.var_types.get(n, T.ANY)
            case Const(type=ty):
                return ty
            case Field(base=b, name=n):
                bt = self.type_of(b)
                if isinstance(bt, T.UnionType) and n.startswith(T.UNION_PREFIX):
                    return bt.alternative(n[len(T.UNION_PREFIX):]) or T.ANY
                return (bt.field(n) or T.ANY) if isinstance(bt, T.TupleType) else T.ANY
            case Index(base=b):
                bt = self.type_of(b)
                return bt.element if isinstance(bt, T.CollectionType) else T.ANY
            case Call(function=f, args=args):
                return SCALAR_FUNCTIONS[f].result([self.type_of(a) for a in args])
            case Case(whens=whens, otherwise=o):
                ty: T.Type = T.NULL
                for r in [r for _, r in whens] + ([o] if o is not None else []):
                    ty = T.common_type(ty, self.type_of(r))
                return T.ANY if ty == T.NULL and o is None else ty
            case TupleExpr(fields=fs):
                return T.TupleType(tuple((n, self.type_of(v)) for n, v in fs))
            case BagExpr(items=items) | ArrayExpr(items=items):
                el = self.type_of(items[0]) if items else T.ANY
                return T.CollectionType(el, ordered=isinstance(t, ArrayExpr))
        return T.ANY

    # ------------------------------------------------------------------ queries

    @abstractmethod
    def query_plan(self, q: A.Query, parent: Scope | None = None,
                   sub: A.Subquery | None = None) -> tuple[O.Operator, T.Type]:
        """The plan of a (sub)query in scope ``parent``, rooted at ReturnBag, and its element type;
        ``sub``: the subquery ``q`` is the query of (its ORDER BY, LIMIT and OFFSET)."""

    # ------------------------------------------------------------------ expressions

    def expr(self, e: A.Expr, sc: Scope, ctx: _Ctx) -> Term:
        """Build the term of ``e`` in scope ``sc``; lifted operators are stacked on ``ctx.plan``."""
        if sc.group is not None and not (isinstance(e, A.FunctionCall) and e.name in A.AGGREGATES):
            key = self.grouping_key(e, sc)
            if key is not None:
                return key
        match e:
            case A.Literal(value=v, kind=k):
                ty = {"number": T.INT if isinstance(v, int) and not isinstance(v, bool) else T.DOUBLE,
                      "string": T.STRING, "bool": T.BOOL}.get(k, T.NULL)
                if k == "missing":
                    return MISSING
                return Const(None if k == "null" else v, ty, span=e.span)
            case A.Identifier(name=n):
                if e.table:
                    self.hidden_table(e, sc)
                term = None if e.table else self.resolve(n, sc, e.span)
                if term is None:  # a table as a value: the bag of its rows
                    alias = f"${n}"
                    rows = A.SelectQuery(False, A.Identifier(alias, span=e.span), (),
                                         (A.FromExpr(A.Identifier(n, e.table, span=e.span), alias, span=e.span),),
                                         span=e.span)
                    return self.expr(A.Subquery(rows, span=e.span), sc, ctx)
                return term
            case A.FieldAccess(base=b, name=n):
                try:
                    base = self.expr(b, sc, ctx)
                except SemanticError as err:
                    if sc.group is not None and "neither a grouping key" in err.message:
                        raise SemanticError(f"'{_path_text(e)}' is neither a grouping key nor inside "
                                            "an aggregate", e.span) from None
                    raise
                bt = self.type_of(base)
                if isinstance(bt, T.UnionType):  # a field of the value if it is a record, else MISSING
                    if bt.alternative("record") is None:
                        return MISSING
                    base, bt = _alternative(base, bt, "record"), bt.alternative("record")
                if isinstance(bt, T.TupleType) and bt.field(n) is None:
                    return self.absent_field(base, bt, n, e.span)
                if isinstance(bt, T.CollectionType):
                    self.warn(f"{base} is a collection, not a tuple: its field '{n}' is MISSING (iterate it in "
                              "FROM to read the field of each element)", e.span)
                    return MISSING
                if isinstance(bt, T.ScalarType):
                    self.warn(f"{base} is {bt}, not a tuple: its field '{n}' is MISSING", e.span)
                    return MISSING
                return Field(base, n, span=e.span)
            case A.ArrayStar():
                raise UnsupportedError("x[*] is supported only before a field name: x[*].f, the f of each element "
                                       "of x", e.span)
            case A.IndexAccess(base=b, index=i):
                base = self.expr(b, sc, ctx)
                bt = self.type_of(base)
                if isinstance(bt, T.UnionType):  # an item of the value if it is an array, else MISSING
                    if bt.alternative("array") is None:
                        return MISSING
                    array = _alternative(base, bt, "array")
                    other = _and(_not(Call("is_null", (base,))), Call("is_null", (array,)))
                    return _unless_missing(other, Index(array, self.scalar_arg(i, sc, ctx), span=e.span))
                return Index(base, self.scalar_arg(i, sc, ctx), span=e.span)
            case A.UnaryOp(op=op, operand=x):
                arg = self.scalar_arg(x, sc, ctx)
                if op == "+":
                    return arg
                return self.call("neg" if op == "-" else "not", (arg,), span=e.span)
            case A.BinaryOp(op=op, left=l, right=r):
                fn = _BINARY.get(op.upper())
                if fn is None:
                    raise SemanticError(f"unknown operator {op}", e.span)
                return self.call(fn, (self.scalar_arg(l, sc, ctx), self.scalar_arg(r, sc, ctx)), span=e.span)
            case A.FunctionCall(name="GROUPING"):
                return self.grouping(e, sc)
            case A.FunctionCall():
                return self.function(e, sc, ctx)
            case A.CaseWhen(operand=op, whens=whens, else_=other):
                opt = self.scalar_arg(op, sc, ctx) if op is not None else None
                ws = []
                for c, r in whens:
                    ct = self.scalar_arg(c, sc, ctx)
                    ws.append((self.call("eq", (opt, ct), span=c.span) if opt is not None else ct, self.expr(r, sc, ctx)))
                o = self.expr(other, sc, ctx) if other is not None else None
                ty = self.unified("CASE", [r for _, r in ws] + ([o] if o is not None else []), e.span)
                return Case(tuple((c, self.coerce(r, ty)) for c, r in ws),
                            self.coerce(o, ty) if o is not None else None, span=e.span)
            case A.IsTest(operand=x, what=what, negated=neg):
                arg = self.scalar_arg(x, sc, ctx)
                m = self.missing(arg)
                if what == "MISSING":
                    t = m
                elif what == "UNKNOWN":
                    t = self.call("is_null", (arg,), span=e.span)
                else:  # IS NULL of MISSING is MISSING (NULL here, and MISSING by missing())
                    t = _unless_missing(m, self.call("is_null", (arg,), span=e.span))
                return self.call("not", (t,), span=e.span) if neg else t
            case A.Like(operand=x, pattern=p, negated=neg):
                t = self.call("like", (self.scalar_arg(x, sc, ctx), self.scalar_arg(p, sc, ctx)), span=e.span)
                return self.call("not", (t,), span=e.span) if neg else t
            case A.Between(operand=x, low=lo, high=hi, negated=neg):
                xt = self.scalar_arg(x, sc, ctx)
                t = self.call("and", (self.call("ge", (xt, self.scalar_arg(lo, sc, ctx)), span=e.span),
                                      self.call("le", (xt, self.scalar_arg(hi, sc, ctx)), span=e.span)), span=e.span)
                return self.call("not", (t,), span=e.span) if neg else t
            case A.InList(operand=x, items=items, negated=neg):
                args = (self.scalar_arg(x, sc, ctx),) + tuple(self.scalar_arg(i, sc, ctx) for i in items)
                t = self.call("in", args, span=e.span)
                return self.call("not", (t,), span=e.span) if neg else t
            case A.Exists(query=q, negated=neg):
                var = self.apply(q, sc, ctx, e.span)
                t = self.call("exists", (Var(var),), span=e.span)
                return self.call("not", (t,), span=e.span) if neg else t
            case A.InSubquery(operand=x, query=q, negated=neg):
                xt = self.scalar_arg(x, sc, ctx)
                var = self.apply(q, sc, ctx, e.span)
                coll = Var(var)
                ct = self.var_types[var]
                if isinstance(ct, T.CollectionType) and isinstance(ct.element, T.TupleType):
                    if len(ct.element.fields) != 1:
                        raise SemanticError("the subquery of IN must return one column", q.span)
                    raise UnsupportedError(
                        "IN over a subquery that returns tuples is supported only as a WHERE conjunct; "
                        "write SELECT VALUE in the subquery", q.span)
                t = self.call("contains", (coll, xt), span=e.span)
                return self.call("not", (t,), span=e.span) if neg else t
            case A.Subquery(query=q):
                return Var(self.apply(q, sc, ctx, e.span, e), span=e.span)
            case A.TupleConstructor(fields=fs):
                names = [n for n, _ in fs]
                if len(set(names)) != len(names):
                    raise SemanticError("duplicate field name in tuple constructor", e.span)
                terms = self.with_absent(tuple((n, self.expr(v, sc, ctx)) for n, v in fs))
                ty = T.TupleType(tuple((n, self.type_of(v)) for n, v in terms))
                var = self.fresh("tuple", ty)
                ctx.plan = O.ConstructTuple(ctx.plan, terms, var, span=e.span)
                return Var(var, span=e.span)
            case A.BagConstructor(items=items) | A.ArrayConstructor(items=items):
                terms = tuple(self.expr(i, sc, ctx) for i in items)
                ordered = isinstance(e, A.ArrayConstructor)
                el = self.unified(f"the {'array' if ordered else 'bag'} constructor", terms, e.span) \
                    if terms else T.ANY
                terms = tuple(self.coerce(t, el) for t in terms)
                var = self.fresh("array" if ordered else "bag", T.CollectionType(el, ordered))
                cls = O.ConstructArray if ordered else O.ConstructBag
                ctx.plan = cls(ctx.plan, terms, var, span=e.span)
                return Var(var, span=e.span)
        raise SemanticError(f"unsupported expression {type(e).__name__}", e.span)

    def call(self, function: str, args: tuple[Term, ...], span: Span | None = None) -> Term:
        """``function(args)``, refused when its arguments' types do not fit it (a string where
        a number is needed: Spark would fail on them, or cast them silently):
        :attr:`~idivm.algebra.expressions.FunctionSpec.check`; but a comparison of values of
        incompatible types (a string with a number) is NULL, as AsterixDB defines it."""
        t = Call(function, args, span=span)
        types = [self.type_of(a) for a in args]
        if any(isinstance(x, T.UnionType) for x in types) and function not in _WHOLE_UNIONS:
            return self.narrowed(t, types)
        if function in _COMPARISONS and any(isinstance(x, T.CollectionType) for x in types):
            return self.collections_compared(t, types)
        why = SCALAR_FUNCTIONS[function].check(types)
        if why is not None and function in _COMPARISONS:
            # as in AsterixDB: a comparison of values of incompatible types is NULL (MISSING where
            # an operand is)
            return _unless_missing(_or(*(self.missing(a) for a in args)), Const(None, T.BOOL, span=span))
        if why is not None:
            raise SemanticError(f"type mismatch in {t}: {why}", span)
        if function in ("eq", "ne") and all(isinstance(x, T.TupleType) for x in types):
            same = _tuples_equal(args[0], args[1], types[0], types[1], span)  # type: ignore[arg-type]
            return same if function == "eq" else _not(same)  # type: ignore[return-value]
        return t

    def collections_compared(self, t: Call, types: list[T.Type]) -> Term:
        """A comparison ``t`` with a collection operand, as AsterixDB compares collections:
        ``=`` and ``!=`` item by item (``array_eq``: items of different types are unequal, a
        NULL item makes the result NULL unless another position differs), a collection unequal
        to a value of another type; the orderings (``<``, ...) not at all (NULL).  MISSING
        where an operand is."""
        (a, b), (ta, tb) = t.args, types
        span = t.span
        if t.function not in ("eq", "ne") or T.NULL in (ta, tb):
            return Call("unordered", t.args, span=span)
        if isinstance(ta, T.CollectionType) and isinstance(tb, T.CollectionType):
            same: Term = Call("array_eq", (a, b, _type_const(ta.element), _type_const(tb.element)), span=span)
        elif T.ANY in (ta, tb):
            same = Call("array_eq", t.args, span=span)
        else:  # a collection and a value of another type
            same = _unless_missing(_or(self.missing(a), self.missing(b)), Case(
                ((_and(_not(Call("is_null", (a,))), _not(Call("is_null", (b,)))), FALSE),), span=span))
        return same if t.function == "eq" else _not(same)

    def narrowed(self, t: Call, types: list[T.Type]) -> Term:
        """``t``, a call with an argument of mixed types (a :class:`~idivm.types.UnionType`), on the
        alternatives of that argument that fit it, as AsterixDB evaluates it: NULL where the value
        is of a type that does not fit.  A comparison (``=``, ``<``, ...) is the first non-NULL
        comparison of the pairs of alternatives that compare (a pair of another type is NULL), a
        function of numbers takes the number (an integer as a double where both occur), one of
        strings the string; other functions of such a value are refused."""
        spec = SCALAR_FUNCTIONS[t.function]
        options = [_alternatives(a, ty) for a, ty in zip(t.args, types)]
        if t.function in _COMPARISONS:
            left, right = options
            pairs = [(x, y) for x in left for y in right
                     if T.comparable(self.type_of(x), self.type_of(y))
                     or _collection(self.type_of(x)) or _collection(self.type_of(y))]
            parts = tuple(self.call(t.function, pair, span=t.span) for pair in pairs)
            one = Const(None, T.BOOL, span=t.span) if not parts else parts[0] if len(parts) == 1 \
                else Call("coalesce", parts, span=t.span)
            return _unless_missing(_or(*(self.missing(a) for a in t.args)), one)
        if spec.check is _anything:
            mixed = next(x for x in types if isinstance(x, T.UnionType))
            raise UnsupportedError(f"{t} of a value of mixed types ({mixed}) is not supported", t.span)
        args = list(t.args)
        for i, (a, ty) in enumerate(zip(t.args, types)):
            if not isinstance(ty, T.UnionType):
                continue
            numbers = [x for x in options[i] if T.is_numeric(self.type_of(x))]
            candidates = ([Call("coalesce", tuple(numbers))] if len(numbers) > 1 else []) + options[i]
            fits = [c for c in candidates
                    if spec.check([self.type_of(c) if j == i else self.type_of(x) for j, x in enumerate(args)]) is None]
            if not fits:
                raise SemanticError(f"type mismatch in {t}: no type of {a} ({ty}) fits it", t.span)
            args[i] = fits[0]
        return self.call(t.function, tuple(args), span=t.span)

    def unified(self, what: str, terms: Sequence[Term], span: Span | None) -> T.Type:
        """The one type of ``terms``, values of one place (the results of a CASE, the items of a
        constructor, a column of UNION ALL); values of different types there (a number and a
        string, tuples of other fields) are refused: a stored column has one type."""
        ty: T.Type = T.NULL
        for t in terms:
            u = T.widen(ty, self.type_of(t))
            if u is None:
                other = T.brief(self.type_of(t))
                raise SemanticError(f"{what} mixes values of types {T.brief(ty)} and {other} ({t} is {other}); "
                                    f"{ONE_TYPE}", span)
            ty = u
        return ty

    def coerce(self, t: Term, to: T.Type) -> Term:
        """``t`` as a value of type ``to``, a type :func:`~idivm.types.widen` gave for it and
        others: a value wrapped in its alternative of a union (a NULL one a NULL union), a union
        spread over a wider one, a record's fields put in the order of ``to``, those it lacks
        MISSING.  Numbers widen in Spark itself."""
        frm = self.type_of(t)
        if frm == to or frm in (T.NULL, T.ANY):
            return t
        null = ((Call("is_null", (t,)), Const(None, to)),)
        if isinstance(to, T.UnionType):
            if isinstance(frm, T.UnionType):
                parts = [self.coerce(_alternative(t, frm, tag), alt) if frm.alternative(tag) is not None
                         else Const(None, alt) for tag, alt in zip(to.tags, to.alternatives)]
            else:
                own = T.union_tag(frm)
                parts = [self.coerce(t, alt) if tag == own else Const(None, alt)
                         for tag, alt in zip(to.tags, to.alternatives)]
            return Case(null, TupleExpr(tuple((T.UNION_PREFIX + tag, p) for tag, p in zip(to.tags, parts))),
                        span=t.span)
        if isinstance(to, T.TupleType) and isinstance(frm, T.TupleType) and frm != to:
            fields = tuple((n, self.coerce(Field(t, n), ft) if frm.field(n) is not None else MISSING)
                           for n, ft in to.fields if n != ABSENT)
            if frm.names == to.names and all(v == Field(t, n) for n, v in fields):
                return t
            fields = self.with_absent(fields)
            if to.field(ABSENT) is not None and fields[-1][0] != ABSENT:
                fields += ((ABSENT, Const(None, to.field(ABSENT))),)
            return Case(null, TupleExpr(fields), span=t.span)
        if isinstance(to, T.CollectionType) and isinstance(frm, T.CollectionType) \
                and T.unify(frm.element, to.element) is None:
            raise UnsupportedError(f"{t} is a collection of {frm.element}, which would have to become one of "
                                   f"{to.element}: not supported", t.span)
        return t

    def scalar_arg(self, e: A.Expr, sc: Scope, ctx: _Ctx) -> Term:
        """An operand of a scalar operator: a subquery here is used as a scalar (its single
        element; a one-column tuple is unwrapped)."""
        t = self.expr(e, sc, ctx)
        if isinstance(e, A.Subquery):
            ct = self.type_of(t)
            single = self.call("singleton", (t,), span=e.span)
            if isinstance(ct, T.CollectionType) and isinstance(ct.element, T.TupleType) \
                    and len(ct.element.fields) == 1:
                return Field(single, ct.element.fields[0][0], span=e.span)
            return single
        return t

    def apply(self, q: A.Query, sc: Scope, ctx: _Ctx, span: Span | None, sub: A.Subquery | None = None) -> str:
        """``q``'s value, a bag (an array when ``sub``, the subquery ``q`` is the query of, has ORDER
        BY, LIMIT or OFFSET), assigned to a new variable of ``ctx``'s plan."""
        plan, ty = self.query_plan(q, sc, sub)
        var = self.fresh("subquery", T.CollectionType(ty, sub is not None and sub.sequenced))
        ctx.plan = O.ApplyPlan(ctx.plan, plan, var, span=span)
        return var

    def function(self, e: A.FunctionCall, sc: Scope, ctx: _Ctx) -> Term:
        if e.name in A.AGGREGATES:
            g = sc.group
            if g is not None and e in g.aggregates:
                return Var(g.aggregates[e], span=e.span)
            raise SemanticError(f"aggregate {e.name} is not allowed here "
                                "(only in SELECT and HAVING of its query)", e.span)
        if e.star:
            raise SemanticError(f"{e.name}(*) is not a function", e.span)
        if e.name in _COLLECTION_FUNCTIONS:
            if len(e.args) != 1:
                raise SemanticError(f"{e.name} takes one collection argument", e.span)
            arg = self.expr(e.args[0], sc, ctx)
            at = self.type_of(arg)
            if not isinstance(at, (T.CollectionType, T.AnyType)):
                # as in AsterixDB: NULL of a value that is not a collection (MISSING of MISSING)
                return _unless_missing(self.missing(arg), Const(None, T.NULL, span=e.span))
            fn = _COLLECTION_FUNCTIONS[e.name]
            el = at.element if isinstance(at, T.CollectionType) else T.ANY
            what = fn.split("_", 1)[1]
            if isinstance(el, T.TupleType) and len(el.fields) == 1 and what != "count":
                el = el.fields[0][1]
            ty = T.INT if what == "count" else T.DOUBLE if what in O.DOUBLE_AGGREGATES else el
            var = self.fresh(what, ty)
            ctx.plan = O.FunctionCall(ctx.plan, fn, (arg,), var, span=e.span)
            return Var(var, span=e.span)
        if e.name in _UNKNOWN_FUNCTIONS:
            return self.unknown_function(e, sc, ctx)
        if e.name in _IS_FUNCTIONS:  # AsterixDB's spelling of x IS NULL, x IS MISSING, x IS UNKNOWN
            if len(e.args) != 1:
                raise SemanticError(f"{e.name} takes 1 argument, got {len(e.args)}", e.span)
            return self.expr(A.IsTest(e.args[0], _IS_FUNCTIONS[e.name], span=e.span), sc, ctx)
        if e.name in _BUILT_FUNCTIONS:
            return getattr(self, _BUILT_FUNCTIONS[e.name])(e, sc, ctx)
        name = FUNCTION_ALIASES.get(e.name)
        if name is None:
            raise SemanticError(f"unknown function {e.name}", e.span)
        spec = SCALAR_FUNCTIONS[name]
        if not spec.accepts(len(e.args)):
            raise SemanticError(f"{e.name} takes {spec.arity_text()} arguments, got {len(e.args)}", e.span)
        return self.call(name, tuple(self.scalar_arg(a, sc, ctx) for a in e.args), span=e.span)

    def unknown_function(self, e: A.FunctionCall, sc: Scope, ctx: _Ctx) -> Term:
        """The functions of MISSING and NULL, as AsterixDB defines them: ``IF_MISSING(a, b, ...)``
        the first argument that is not MISSING, ``IF_NULL`` the first that is not NULL (a MISSING
        one is returned), ``IF_MISSING_OR_NULL``/``COALESCE`` the first that is neither (NULL if
        none is), ``MISSING_IF(a, b)`` MISSING and ``NULL_IF(a, b)`` NULL when ``a = b``."""
        kind = _UNKNOWN_FUNCTIONS[e.name]
        args = tuple(self.scalar_arg(a, sc, ctx) for a in e.args)
        if kind in ("null_if", "missing_if"):
            if len(args) != 2:
                raise SemanticError(f"{e.name} takes 2 arguments, got {len(args)}", e.span)
            t = self.call("null_if", args, span=e.span)
            if kind == "null_if":
                return t
            return Case(((self.call("eq", args, span=e.span), MISSING),), args[0], span=e.span)
        if not args:
            raise SemanticError(f"{e.name} takes at least 1 argument, got 0", e.span)
        ty = self.unified(e.name, args, e.span)
        args = tuple(self.coerce(a, ty) for a in args)
        if kind == "coalesce" or all(self.missing(a) == FALSE for a in args):
            return self.call("coalesce", args, span=e.span) if len(args) > 1 else args[0]
        # the first argument that is not MISSING (IF_MISSING) or not NULL (IF_NULL)
        whens = []
        for a in args[:-1]:
            m = self.missing(a)
            known = _not(m) if kind == "if_missing" else \
                _or(m, Call("not", (Call("is_null", (a,)),)))
            whens.append((known, self.coerce(a, ty)))
        return Case(tuple(whens), self.coerce(args[-1], ty), span=e.span)

    def missing(self, t: Term) -> Term:
        """The MISSING predicate of term ``t``: a boolean term that holds where ``t`` is MISSING
        (``t`` is NULL there); :data:`FALSE` when it never is.

        MISSING comes from the literal, from a variable that may be MISSING
        (:attr:`var_missing`: a LEFT JOIN's unmatched right side) and from the fields a tuple's
        :data:`ABSENT` list names.  A field of MISSING and a function or comparison with a
        MISSING argument are MISSING; AND and OR are MISSING where their value is unknown and
        an operand is MISSING (``MISSING AND FALSE`` is FALSE); COALESCE, IS tests, EXISTS, IN
        over a subquery and collections are never MISSING."""
        match t:
            case Call(function="missing"):
                return TRUE
            case Var(name=n):
                return self.var_missing.get(n, FALSE)
            case Field(base=b, name=n):
                bt = self.type_of(b)
                own = Call("absent_in", (Field(b, ABSENT), Const(n, T.STRING))) \
                    if isinstance(bt, T.TupleType) and bt.field(ABSENT) is not None else FALSE
                return _or(self.missing(b), own)
            case Index(base=b, index=i):  # a position out of the array is MISSING
                beyond = Call("index_beyond", (b, i)) if isinstance(self.type_of(b), T.CollectionType) else FALSE
                return _or(self.missing(b), self.missing(i), beyond)
            case Call(function="and" | "or", args=args):
                m = _or(*(self.missing(a) for a in args))
                return m if m == FALSE else _and(Call("is_null", (t,)), m)
            case Call(function="coalesce" | "is_null" | "exists" | "contains" | "absent_in" | "absent_fields"):
                return FALSE
            case Call(args=args):
                return _or(*(self.missing(a) for a in args))
            case Case(whens=whens, otherwise=o):
                ms = [self.missing(r) for _, r in whens]
                mo = self.missing(o) if o is not None else FALSE
                if all(m == FALSE for m in ms) and mo == FALSE:
                    return FALSE
                return Case(tuple((c, m) for (c, _), m in zip(whens, ms)), mo)
        return FALSE

    def with_absent(self, fields: tuple[tuple[str, Term], ...]) -> tuple[tuple[str, Term], ...]:
        """The fields of a tuple, and, when some may be MISSING, the hidden field :data:`ABSENT`
        that lists those that are (readers leave them out)."""
        conditions = [(self.missing(t), n) for n, t in fields if n != ABSENT]
        conditions = [(m, n) for m, n in conditions if m != FALSE]
        if not conditions:
            return fields
        args = tuple(x for m, n in conditions for x in (m, Const(n, T.STRING)))
        return fields + ((ABSENT, Call("absent_fields", args)),)

    def field_value(self, e: A.FunctionCall, sc: Scope, ctx: _Ctx) -> Term:
        """``GET_OBJECT_FIELD_VALUE(t, 'name')``: the field access ``t.name`` (the name must be
        a string literal: the fields of a tuple are known when the view is defined)."""
        if len(e.args) != 2:
            raise SemanticError(f"{e.name} takes 2 arguments, got {len(e.args)}", e.span)
        name = e.args[1]
        if not (isinstance(name, A.Literal) and name.kind == "string"):
            raise UnsupportedError(f"{e.name} needs a string literal as the field name", name.span)
        return self.expr(A.FieldAccess(e.args[0], name.value, span=e.span), sc, ctx)

    def switch_case(self, e: A.FunctionCall, sc: Scope, ctx: _Ctx) -> Term:
        """``SWITCH_CASE(x, v1, r1, ..., [default])``: ``CASE x WHEN v1 THEN r1 ... ELSE default END``."""
        if len(e.args) < 3:
            raise SemanticError(f"{e.name} takes at least 3 arguments, got {len(e.args)}", e.span)
        rest = e.args[1:]
        default = rest[-1] if len(rest) % 2 else None
        return self.expr(A.CaseWhen(e.args[0], tuple(zip(rest[0::2], rest[1::2])), default, span=e.span), sc, ctx)

    def object_unwrap(self, e: A.FunctionCall, sc: Scope, ctx: _Ctx) -> Term:
        """``OBJECT_UNWRAP(t)``: the value of tuple ``t``'s one field."""
        base, bt = self.record_arg(e, 1, sc, ctx)
        names = [n for n in bt.names if n != ABSENT]
        if len(names) != 1:
            raise UnsupportedError(f"{e.name} needs a tuple of one field, got {T.brief(bt)}", e.args[0].span)
        return Field(base, names[0], span=e.span)

    def object_pairs(self, e: A.FunctionCall, sc: Scope, ctx: _Ctx) -> Term:
        """``OBJECT_PAIRS(t)``: the array of ``{name, value}`` of each field tuple ``t`` has."""
        base, bt = self.record_arg(e, 1, sc, ctx)
        values = [(n, Field(base, n, span=e.span)) for n in bt.names if n != ABSENT]
        if not values:
            raise UnsupportedError(f"{e.name} of a tuple without fields", e.args[0].span)
        ty = self.unified(e.name, [v for _, v in values], e.span)
        pairs = tuple(x for n, v in values for x in (
            _not(self.missing(v)), TupleExpr((("name", Const(n, T.STRING)), ("value", self.coerce(v, ty))))))
        return _unless_missing(self.missing(base), Case(
            ((Call("is_null", (base,)), Const(None, T.NULL)),), Call("kept_items", pairs), span=e.span))

    def record_arg(self, e: A.FunctionCall, arity: int, sc: Scope, ctx: _Ctx) -> tuple[Term, T.TupleType]:
        """The first argument of ``e``, a function of a tuple and ``arity - 1`` more, and its type."""
        if len(e.args) != arity:
            raise SemanticError(f"{e.name} takes {arity} argument{'s' if arity > 1 else ''}, got {len(e.args)}",
                                e.span)
        base = self.expr(e.args[0], sc, ctx)
        bt = self.type_of(base)
        if not isinstance(bt, T.TupleType):
            raise SemanticError(f"{e.name} needs a tuple, got {T.brief(bt)}", e.args[0].span)
        return base, bt

    def name_arg(self, e: A.FunctionCall) -> str:
        """The field name ``e`` takes second: a string literal (the fields of a tuple are known
        when the view is defined)."""
        name = e.args[1]
        if not (isinstance(name, A.Literal) and name.kind == "string"):
            raise UnsupportedError(f"{e.name} needs a string literal as the field name", name.span)
        return name.value

    def constructed(self, fields: Sequence[tuple[str, Term]], open_: bool, ctx: _Ctx, span: Span | None) -> Term:
        """A new tuple of ``fields`` (those MISSING left out)."""
        terms = self.with_absent(tuple(fields))
        ty = T.TupleType(tuple((n, self.type_of(v)) for n, v in terms), open_)
        var = self.fresh("tuple", ty)
        ctx.plan = O.ConstructTuple(ctx.plan, terms, var, span=span)
        return Var(var, span=span)

    def object_remove(self, e: A.FunctionCall, sc: Scope, ctx: _Ctx) -> Term:
        """``OBJECT_REMOVE(t, 'name')``: tuple ``t`` without its field ``name``, as a new tuple of
        the others."""
        base, bt = self.record_arg(e, 2, sc, ctx)
        name = self.name_arg(e)
        kept = [(n, Field(base, n, span=e.span)) for n in bt.names if n not in (name, ABSENT)]
        return self.constructed(kept, bt.open, ctx, e.span)

    def object_put(self, e: A.FunctionCall, sc: Scope, ctx: _Ctx) -> Term:
        """``OBJECT_PUT(t, 'name', v)``: tuple ``t`` with field ``name`` set to ``v`` (added when
        ``t`` has none; left out where ``v`` is MISSING); ``OBJECT_ADD(t, 'name', v)`` adds the
        field only where ``t`` has none, and is ``t`` where it has one."""
        base, bt = self.record_arg(e, 3, sc, ctx)
        name = self.name_arg(e)
        value = self.scalar_arg(e.args[2], sc, ctx)
        fields = [(n, Field(base, n, span=e.span)) for n in bt.names if n != ABSENT]
        if bt.field(name) is None:
            return self.constructed(fields + [(name, value)], bt.open, ctx, e.span)
        if e.name == "OBJECT_ADD":
            old = Field(base, name, span=e.span)
            absent = self.missing(old)
            if absent == FALSE:
                return base
            ty = self.unified(e.name, [old, value], e.span)
            value = Case(((absent, self.coerce(value, ty)),), self.coerce(old, ty), span=e.span)
        return self.constructed([(n, value if n == name else v) for n, v in fields], bt.open, ctx, e.span)

    def object_concat(self, e: A.FunctionCall, sc: Scope, ctx: _Ctx) -> Term:
        """``OBJECT_CONCAT(a, b, ...)``: one tuple of the fields of tuples ``a``, ``b``, ... (a
        field of several from the last that has it), as AsterixDB defines it: with one argument,
        an array of tuples is concatenated item by item and a tuple is itself; NULL where an
        argument (an item) is not a tuple, MISSING where an argument is MISSING."""
        if not e.args:
            raise SemanticError(f"{e.name} takes at least 1 argument, got 0", e.span)
        args = [self.expr(a, sc, ctx) for a in e.args]
        options: list[tuple[Term, Term]] = []  # (holds, the tuple) for each kind the arguments may be
        if len(args) == 1:
            (a,) = args
            for alt in _alternatives(a, self.type_of(a)):
                at = self.type_of(alt)
                if isinstance(at, T.TupleType):
                    options.append((_not(Call("is_null", (alt,))), alt))
                elif isinstance(at, T.CollectionType) and T.record_of(at.element) is not None:
                    options.append(self.items_concatenated(alt, at.element))
        else:
            records = [_record_alternative(a, self.type_of(a)) for a in args]
            if all(r is not None for r in records):
                held = _and(*(_not(Call("is_null", (r,))) for r in records))  # type: ignore[arg-type]
                options.append((held, self.records_concatenated(records)))  # type: ignore[arg-type]
        whole: Term = Const(None, T.NULL, span=e.span)
        if options:
            ty = self.unified(e.name, [t for _, t in options], e.span)
            whole = Case(tuple((c, self.coerce(t, ty)) for c, t in options), span=e.span)
        return _unless_missing(_or(*(self.missing(a) for a in args)), whole)

    def records_concatenated(self, records: Sequence[Term]) -> Term:
        """The tuple of the fields of ``records``, a field of several from the last that has it."""
        fields: dict[str, list[Term]] = {}
        for r in records:
            for n in self.type_of(r).names:  # type: ignore[attr-defined]
                if n != ABSENT:
                    fields.setdefault(n, []).append(Field(r, n))
        out = []
        for n, values in fields.items():
            ty = self.unified("OBJECT_CONCAT", values, None)
            whens = tuple((_not(self.missing(v)), self.coerce(v, ty)) for v in reversed(values))
            out.append((n, whens[0][1] if whens[0][0] == TRUE else Case(whens, MISSING)))
        return TupleExpr(self.with_absent(tuple(out)))

    def items_concatenated(self, array: Term, element: T.Type) -> tuple[Term, Term]:
        """(the array's items are all tuples, the tuple of their fields, a field of several items
        from the last that has it) of ``array``, whose items are of type ``element``."""
        record = T.record_of(element)
        kind = _type_const(element)
        out = []
        for n, _ in record.fields:  # type: ignore[union-attr]
            if n != ABSENT:
                last = Call("last_with", (array, Const(n, T.STRING), kind))
                out.append((n, Case(((Call("is_null", (last,)), MISSING),), Field(last, n))))
        holds = _and(_not(Call("is_null", (array,))), _not(Call("some_not_tuples", (array, kind))))
        return holds, TupleExpr(self.with_absent(tuple(out)))

    # ------------------------------------------------------------------ names

    def resolve(self, name: str, sc: Scope, span: Span | None) -> Term | None:
        """What ``name`` names in scope ``sc``: a variable, a column of one, or (None) a table."""
        s: Scope | None = sc
        while s is not None:
            b = s.lookup(name)
            if b is not None:
                return Var(b.var, span=span)
            if name in s.natural:
                return s.natural[name]
            hits = [b for b in s.bindings if isinstance(b.type, T.TupleType) and b.type.field(name)]
            if len(hits) > 1:
                raise SemanticError(
                    f"ambiguous column '{name}': it could be "
                    + " or ".join(f"{h.name}.{name}" for h in hits), span)
            if hits:
                return Field(Var(hits[0].var), name, span=span)
            only = s.bindings[0].type if len(s.bindings) == 1 else None
            if isinstance(only, T.TupleType) and only.open:  # a field the only variable's open record lacks
                return MISSING
            pre = s.group.pre_scope if s.group is not None else None  # the grouped block; parent s.parent
            if pre is not None and (pre.lookup(name) is not None or name in pre.natural or any(
                    isinstance(b.type, T.TupleType) and b.type.field(name) for b in pre.bindings)):
                raise SemanticError(f"'{name}' is neither a grouping key nor inside an aggregate", span)
            s = s.parent
        if name in self.tables:
            return None
        raise SemanticError(f"unknown name '{name}'", span)

    def hidden_table(self, e: A.Identifier, sc: Scope) -> None:
        """Check that ``e``, a name an inlined WITH/LET definition uses where a variable of the
        query hides it (``e.table``), names a table: that the name is a table's and that the
        scopes around (a grouped block's FROM variables included) give it no other meaning than
        the hiding variable's, so no enclosing query's variable was meant."""
        n = e.name
        meanings = 0
        s: Scope | None = sc
        while s is not None:
            for x in (s, s.group.pre_scope) if s.group is not None else (s,):
                meanings += (x.lookup(n) is not None) + (n in x.natural) + sum(
                    1 for b in x.bindings if isinstance(b.type, T.TupleType) and b.type.field(n) is not None)
            s = s.parent
        if n not in self.tables or meanings > 1:
            raise SemanticError(f"'{n}' of a WITH definition cannot be inlined here: a variable of the query "
                                "hides it; rename that variable", e.span)

    def absent_field(self, base: Term, bt: T.TupleType, name: str, span: Span | None) -> Term:
        """The field ``name`` of ``base``, a record of type ``bt`` without it: MISSING, as SQL++
        reads a field a record lacks, unless ``bt`` is a closed record of a declared schema
        (then an error).  A record inferred from data or built by the query never has it (it is
        not in its type), so the view says so (:meth:`warn`); a column a base table lacks is
        remembered (:attr:`absent_columns`: the table may gain it by ``ingest --evolve``,
        which then refuses, as the view reads it as MISSING)."""
        if bt.closed:
            raise SemanticError(f"unknown field '{name}' of {base}: its declared record type is closed "
                                f"(fields: {', '.join(bt.names)})", span)
        if not bt.open:
            table = next((t for t, ty in self.tables.items() if ty is bt), None)
            if table is not None:
                self.absent_columns.add((table, name))
            self.warn(f"{base} has no field '{name}' (fields: {', '.join(n for n in bt.names if n != ABSENT)}): "
                      "it is MISSING", span)
        return MISSING

    def warn(self, message: str, span: Span | None) -> None:
        """A warning about the view (reported by ``define``), with its position."""
        where = f"{span.line}:{span.column}: " if span is not None else ""
        if where + message not in self.warnings:
            self.warnings.append(where + message)

    def grouping(self, e: A.FunctionCall, sc: Scope) -> Term:
        """``GROUPING(k1, …, kn)`` after GROUP BY: a bit per key, the first the highest, 1 where
        the key is not one this block's grouping set groups by (ROLLUP, CUBE, GROUPING SETS)."""
        g = sc.group
        if g is None or not e.args:
            raise SemanticError("GROUPING needs grouping keys as its arguments, after GROUP BY", e.span)
        bits = 0
        for a in e.args:
            b = sc.lookup(a.name) if isinstance(a, A.Identifier) else None  # a key's name
            key = Var(b.var) if b is not None else self.grouping_key(a, sc)  # or its expression
            if not isinstance(key, Var) or key.name not in {v for _, v in g.keys}:
                raise SemanticError(f"GROUPING: {a} is not a grouping key", a.span)
            bits = bits * 2 + (key.name in g.unset)
        return Const(bits, T.INT, span=e.span)

    def grouping_key(self, e: A.Expr, sc: Scope) -> Term | None:
        """After GROUP BY: the key variable if ``e`` denotes a grouping key (SQL-92 style), i.e.
        ``e`` is the key's expression written again (``GROUP BY LOWER(e.dept)`` ...
        ``SELECT LOWER(e.dept)``).  Only scalar expressions are compared: ones with aggregates,
        subqueries or constructors would lift operators, and literals are never keys."""
        if isinstance(e, A.Literal) or any(_lifts_operators(n) for n in e.walk()):
            return None
        g = sc.group
        assert g is not None
        if isinstance(e, A.Identifier) and sc.lookup(e.name) is not None:
            return None  # a key alias or the group variable: ordinary resolution
        try:
            probe = _Ctx(O.Ground())
            t = self.expr(e, g.pre_scope, probe)
        except SemanticError:
            return None
        for kt, var in g.keys:
            if kt == t:
                return Var(var, span=e.span)
        return None


def _lifts_operators(e: A.Node) -> bool:
    """Whether building ``e`` itself stacks an operator on the plan (rather than giving a term)."""
    if isinstance(e, A.FunctionCall):
        return e.name in A.AGGREGATES or e.name in _COLLECTION_FUNCTIONS
    return isinstance(e, (A.Subquery, A.Exists, A.InSubquery, A.TupleConstructor, A.BagConstructor,
                          A.ArrayConstructor))


def _path_text(e: A.Expr) -> str:
    if isinstance(e, A.FieldAccess):
        return f"{_path_text(e.base)}.{e.name}"
    if isinstance(e, A.Identifier):
        return e.name
    return "…"


# the functions of MISSING and NULL (:meth:`TermBuilder.unknown_function`)
_UNKNOWN_FUNCTIONS = {
    "IF_MISSING": "if_missing", "IFMISSING": "if_missing", "IF_NULL": "if_null", "IFNULL": "if_null",
    "IF_MISSING_OR_NULL": "coalesce", "IFMISSINGORNULL": "coalesce", "COALESCE": "coalesce",
    "NULL_IF": "null_if", "NULLIF": "null_if", "MISSING_IF": "missing_if", "MISSINGIF": "missing_if",
}
#: functions built from other terms (a tuple's fields, a CASE), by the builder's method of each
_BUILT_FUNCTIONS = {
    "GET_OBJECT_FIELD_VALUE": "field_value", "OBJECT_REMOVE": "object_remove", "OBJECT_PUT": "object_put",
    "OBJECT_ADD": "object_put", "OBJECT_UNWRAP": "object_unwrap", "OBJECT_CONCAT": "object_concat",
    "OBJECT_PAIRS": "object_pairs", "SWITCH_CASE": "switch_case",
}
#: the tests of MISSING and NULL as functions (``IS_NULL(x)`` is ``x IS NULL``)
_IS_FUNCTIONS = {"IS_NULL": "NULL", "ISNULL": "NULL", "IS_MISSING": "MISSING", "ISMISSING": "MISSING",
                 "IS_UNKNOWN": "UNKNOWN", "ISUNKNOWN": "UNKNOWN"}


#: functions that take a value of mixed types as it is (a :class:`~idivm.types.UnionType`: its
#: NULL-ness, or the value itself, compared field by field with one of the same type)
_WHOLE_UNIONS = frozenset({"is_null", "same", "coalesce", "missing", "absent_fields", "absent_in"})
_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def _alternative(t: Term, ty: T.UnionType, tag: str) -> Term:
    """The value of ``t`` if it is of ``ty``'s alternative ``tag``, else NULL."""
    return Field(t, T.UNION_PREFIX + tag, span=t.span)


def _alternatives(t: Term, ty: T.Type) -> list[Term]:
    """The alternatives of a value of mixed types (each NULL where the value is another), or the value."""
    return [_alternative(t, ty, tag) for tag in ty.tags] if isinstance(ty, T.UnionType) else [t]


def _record_alternative(t: Term, ty: T.Type) -> Term | None:
    """``t`` where it is a tuple (NULL elsewhere), or None when it never is."""
    if isinstance(ty, T.TupleType):
        return t
    if isinstance(ty, T.UnionType) and ty.alternative("record") is not None:
        return _alternative(t, ty, "record")
    return None


def _collection(t: T.Type) -> bool:
    return isinstance(t, T.CollectionType)


def _type_const(t: T.Type) -> Const:
    """Type ``t`` as a constant argument (its JSON text) of a function whose Spark form depends on it."""
    return Const(json.dumps(t.to_json()), T.STRING)


def _tuples_equal(a: Term, b: Term, ta: T.TupleType, tb: T.TupleType, span: Span | None) -> Term:
    """``a = b`` of two tuples as SQL++ compares records: field by field, the conjunction of the
    fields' comparisons (so NULL where a field is NULL in either and none differs), a field
    MISSING in one (named in its :data:`ABSENT` list, or not in its type) equal only to a field
    MISSING in the other; nested tuples likewise.  (Spark's ``=`` of structs would find two
    structs with a NULL field equal.)"""
    def absent(x: Term, tx: T.TupleType, n: str) -> Term:
        if tx.field(n) is None:
            return TRUE
        return Call("absent_in", (Field(x, ABSENT), Const(n, T.STRING))) if tx.field(ABSENT) is not None else FALSE

    parts = []
    for n in dict.fromkeys(x for x in ta.names + tb.names if x != ABSENT):
        fa, fb = ta.field(n), tb.field(n)
        ma, mb = absent(a, ta, n), absent(b, tb, n)
        if fa is None or fb is None:
            parts.append(_and(ma, mb))
            continue
        if isinstance(fa, T.TupleType) and isinstance(fb, T.TupleType):
            value = _tuples_equal(Field(a, n), Field(b, n), fa, fb, span)
        else:
            value = Call("eq", (Field(a, n), Field(b, n)), span=span)
        either = _or(ma, mb)
        parts.append(value if either == FALSE else Case(((either, _and(ma, mb)),), value))
    return _and(*parts) if parts else Call("eq", (a, b), span=span)


def _or(*parts: Term) -> Term:
    parts = tuple(dict.fromkeys(p for p in parts if p != FALSE))
    if TRUE in parts:
        return TRUE
    return FALSE if not parts else parts[0] if len(parts) == 1 else Call("or", parts)


def _and(*parts: Term) -> Term:
    parts = tuple(dict.fromkeys(p for p in parts if p != TRUE))
    if FALSE in parts:
        return FALSE
    return TRUE if not parts else parts[0] if len(parts) == 1 else Call("and", parts)


def _not(t: Term) -> Term:
    return FALSE if t == TRUE else TRUE if t == FALSE else Call("not", (t,))


def _unless_missing(m: Term, t: Term) -> Term:
    """``t``, but NULL (MISSING, by :meth:`TermBuilder.missing` of the same operand) where ``m``
    holds."""
    return t if m == FALSE else MISSING if m == TRUE else Case(((m, MISSING),), t)
