"""Generalized multiset relations and the semantics of AGCA (DBToaster §3.1–3.2): the reference
interpreter the compiled maps are checked against.

A tuple is a partial function from variables to values, held as a sorted tuple of
``(variable, value)`` pairs (:data:`Tup`); a GMR maps finitely many tuples to non-zero
rational multiplicities (:class:`GMR`: a dict without zero entries).  :func:`evaluate` is
the paper's ``⟦Q⟧(D, b⃗)`` case by case: a product evaluates its right factor once per tuple
of its left one, in the context extended by that tuple (sideways information passing), and
joins the two where they are consistent.  One extension: a group-by variable that the
context binds but the summed tuples do not (an input variable of the Sum, §3.3) takes its
value from the context, where the paper's definition would give 0.
"""

from __future__ import annotations

import datetime as _dt
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from idivm.agca.terms import (
    COMPARISONS, Add, Assign, Cmp, Const, Exists, Lift, MapRef, Mul, Number, Rel, Sum, Term, Value, Var, show,
)

#: a tuple: its (variable, value) pairs sorted by variable
Tup = tuple[tuple[str, object], ...]

EMPTY: Tup = ()


class AgcaError(ValueError):
    """An AGCA term that cannot be evaluated where it stands (an unbound variable, a relation
    atom of the wrong arity, a nested aggregate that groups)."""


def tup(**values: object) -> Tup:
    """The tuple ``⟨x: v, …⟩``."""
    return tuple(sorted(values.items()))


class GMR(dict):
    """A generalized multiset relation: tuple -> non-zero multiplicity."""

    def add(self, t: Tup, m: Number) -> None:
        """Add ``m`` to the multiplicity of ``t`` (dropping it when it becomes zero)."""
        if m == 0:
            return
        total = self.get(t, 0) + m
        if total == 0:
            self.pop(t, None)
        else:
            self[t] = total

    def __add__(self, other: "GMR") -> "GMR":
        out = GMR(self)
        for t, m in other.items():
            out.add(t, m)
        return out

    def __neg__(self) -> "GMR":
        return GMR({t: -m for t, m in self.items()})

    def __sub__(self, other: "GMR") -> "GMR":
        return self + (-other)

    def scalar(self) -> Number:
        """The multiplicity of the empty tuple (a non-grouping aggregate's value)."""
        return self.get(EMPTY, 0)


@dataclass
class Relation:
    """A stored relation: its columns and a GMR of value tuples (in column order) to
    multiplicities."""

    columns: tuple[str, ...]
    rows: dict[tuple, Number] = field(default_factory=dict)

    def plus(self, other: "Relation") -> "Relation":
        """This relation updated by ``other`` (``D + ΔD``)."""
        if other.columns != self.columns:
            raise AgcaError(f"an update of columns {other.columns} for a relation of columns {self.columns}")
        out = GMR(self.rows)
        for row, m in other.rows.items():
            out.add(row, m)
        return Relation(self.columns, dict(out))


@dataclass
class Database:
    """The relations of ``D``, the update ``ΔD`` of some of them, and the materialized maps."""

    relations: Mapping[str, Relation]
    deltas: Mapping[str, Relation] = field(default_factory=dict)
    maps: Mapping[str, GMR] = field(default_factory=dict)

    def updated(self) -> "Database":
        """``D + ΔD``, without an update."""
        rels = dict(self.relations)
        for name, d in self.deltas.items():
            rels[name] = rels[name].plus(d) if name in rels else d
        return Database(rels, {}, self.maps)


def evaluate(q: Term, db: Database, context: Mapping[str, object] | None = None) -> GMR:
    """``⟦q⟧(db, context)``: the GMR ``q`` denotes over ``db`` where the variables of
    ``context`` are bound."""
    return _eval(q, db, dict(context or {}))


def _consistent(b: Mapping[str, object], t: Iterable[tuple[str, object]]) -> bool:
    return all(b.get(x, v) == v for x, v in t)


def _join(r: Tup, s: Tup) -> Tup | None:
    """The consistent concatenation ``r⃗s⃗``, None when they disagree on a variable."""
    merged = dict(r)
    for x, v in s:
        if merged.get(x, v) != v:
            return None
        merged[x] = v
    return tuple(sorted(merged.items()))


def _value(o: "Var | Value | Const", b: Mapping[str, object]) -> object:
    if isinstance(o, Var):
        if o.name not in b:
            raise AgcaError(f"variable {o.name} is not bound here")
        return b[o.name]
    return o.value


def _eval(q: Term, db: Database, b: dict[str, object]) -> GMR:
    match q:
        case Const(value=c):
            return GMR({EMPTY: c} if c != 0 else {})
        case Var():
            v = _value(q, b)
            if not isinstance(v, (int, Fraction, float)) or isinstance(v, bool):
                raise AgcaError(f"variable {q.name} holds {v!r}, not a number: it cannot be a multiplicity")
            return GMR({EMPTY: v} if v != 0 else {})
        case Cmp(op=op, left=l, right=r):
            return GMR({EMPTY: 1}) if COMPARISONS[op](_value(l, b), _value(r, b)) else GMR()
        case Lift(expr=e, condition=True):
            return GMR({EMPTY: 1}) if lifted(e, b) is True else GMR()
        case Lift(expr=e):
            v = lifted(e, b)
            if v is not None and (not isinstance(v, (int, Fraction, float)) or isinstance(v, bool)):
                raise AgcaError(f"{show(q)} is {v!r}, not a number: it cannot be a multiplicity")
            return GMR({EMPTY: v} if v else {})
        case Assign(var=x, term=t):
            if isinstance(t, (Value, Var)):  # a value, or a variable's value of any type
                v: object = _value(t, b)
            else:
                inner = _eval(t, db, b)
                if any(k != EMPTY for k in inner):
                    raise AgcaError(f"the right side of {x} := … groups: it must be a single value")
                v = inner.scalar()
            return GMR({((x, v),): 1}) if _consistent(b, ((x, v),)) else GMR()
        case Rel(name=name, variables=vs, delta=delta):
            source = db.deltas if delta else db.relations
            rel = source.get(name)
            if rel is None:
                if delta:
                    return GMR()  # no update of that relation
                raise AgcaError(f"unknown relation {name}")
            if len(vs) != len(rel.columns):
                raise AgcaError(f"{name} has {len(rel.columns)} columns, the atom names {len(vs)}")
            out = GMR()
            for row, m in rel.rows.items():
                t = _join((), tuple(sorted(zip(vs, row))))  # a variable named twice selects
                if t is not None and _consistent(b, t):
                    out.add(t, m)
            return out
        case MapRef(name=name, inputs=ins, outputs=outs, renames=renames):
            missing = [x for x in ins if x not in b]
            if missing:
                raise AgcaError(f"map {name} is read with its input {', '.join(missing)} unbound")
            here = dict(renames)
            out = GMR()
            for stored, m in db.maps.get(name, GMR()).items():
                t = tuple((here.get(x, x), v) for x, v in stored)
                if _consistent(b, t):
                    out.add(tuple((x, v) for x, v in t if x in outs), m)
            return out
        case Add(terms=ts):
            out = GMR()
            for t in ts:
                for k, m in _eval(t, db, b).items():
                    out.add(k, m)
            return out
        case Mul(terms=ts):
            acc = GMR({EMPTY: 1})
            for factor in ts:
                nxt = GMR()
                for r, m1 in acc.items():
                    for s, m2 in _eval(factor, db, {**b, **dict(r)}).items():
                        t = _join(r, s)
                        if t is not None:
                            nxt.add(t, m1 * m2)
                acc = nxt
                if not acc:
                    break
            return acc
        case Sum(group=g, term=t):
            out = GMR()
            for s, m in _eval(t, db, b).items():
                full = {**b, **dict(s)}
                missing = [x for x in g if x not in full]
                if missing:
                    raise AgcaError(f"group-by variable {', '.join(missing)} of {q} is not bound")
                out.add(tuple(sorted((x, full[x]) for x in set(g))), m)
            return out
        case Exists(term=t):
            return GMR({k: 1 for k in _eval(t, db, b)})  # a GMR holds no tuple of multiplicity 0
    raise AgcaError(f"not an AGCA term: {q!r}")


def lifted(expr: object, b: Mapping[str, object]) -> object:
    """The value of a lifted scalar expression (:class:`~idivm.agca.terms.Lift`) where the
    variables of ``b`` are bound, with SQL's NULL: comparisons and arithmetic of NULL are NULL,
    AND/OR/NOT three-valued, a division by zero NULL (Spark's ``try_divide``), a string compared
    with a date read as a date."""
    from idivm.algebra import expressions as E

    match expr:
        case E.Const(value=v):
            return v
        case E.Var(name=x):
            if x not in b:
                raise AgcaError(f"variable {x} is not bound here")
            return b[x]
        case E.Case(whens=whens, otherwise=o):
            for c, r in whens:
                if lifted(c, b) is True:
                    return lifted(r, b)
            return None if o is None else lifted(o, b)
        case E.Call(function="and", args=args):
            values = [lifted(a, b) for a in args]
            return False if False in values else None if None in values else True
        case E.Call(function="or", args=args):
            values = [lifted(a, b) for a in args]
            return True if True in values else None if None in values else False
        case E.Call(function=f, args=args):
            values = [lifted(a, b) for a in args]
            if f == "is_null":
                return values[0] is None
            if f == "in":
                if values[0] is None:
                    return None
                return True if values[0] in values[1:] else None if None in values[1:] else False
            if any(v is None for v in values):
                return None
            return _LIFTED[f](*_dates(values))
    raise AgcaError(f"not a lifted expression: {expr!r}")


def _dates(values: list) -> list:
    """A string compared with a date is the date it spells (as Spark casts it)."""
    if any(isinstance(v, _dt.date) for v in values):
        return [_dt.date.fromisoformat(v) if isinstance(v, str) else v for v in values]
    return values


def _like(value: str, pattern: str) -> bool:
    """SQL's LIKE: ``%`` any characters, ``_`` one, ``\\`` escapes the next."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.fullmatch("".join(out), value, re.DOTALL) is not None


_LIFTED = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "neg": operator.neg,
    "div": lambda a, b: None if b == 0 else a / b,
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "not": operator.not_, "like": _like,
}
