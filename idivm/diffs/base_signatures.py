"""Base-table i-diff signature generation (thesis §2.5 for relational views, §2.14.1 for SQL++).

Input: a view plan and the base tables' keys, types and declared element keys
of nested collections of tuples.  Output:
:class:`BaseSignatures` — for every base table the view reads, and every nested
collection of it the view iterates, one insert signature (post-state of every
attribute), one delete signature (pre-state), one update signature per set of
*conditional attributes* ``C_op`` (attributes in the condition of one
operator: selections, join/semijoin/antijoin conditions, grouping keys; with
pre- and post-state) and one update signature for the *non-conditional*
attributes the view reads (post-state only).  Keys are immutable and never
updated (§2.5, footnote 7).  Collections read by a wildcard (the whole tuple is
used, e.g. ``SELECT r`` or ``GROUP AS``, or every attribute of it, as
``SELECT r.*`` does) are recorded for log conversion (§2.14.1's optimization):
any change to their elements reaches the view.  :func:`condition_attributes` gives the
``C_op`` of each operator (which base attributes its condition reads), for the passes that
decide where an update is conditional (index selection, §2.15).

The analysis is an abstract interpretation of the plan over *origins*: each
variable is bound to an element of a base collection (table, collection path),
to a record of such origins (a constructed tuple, a GROUP AS member), or to a
bag of records (a subquery's value); a term's maximal field path over a
variable names the base attribute it reads.

Where §2.5 (one update signature per ``C_op``) and the pseudocode of §2.14.1
(one for all conditional attributes of a collection) differ, we follow §2.5:
it is the finer partition, and identical sets are generated once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import Field, TableRef, Term, TupleExpr, Var, split_path
from idivm.diffs.instances import DiffType
from idivm.diffs.signatures import BagSignature, RootSignature, SignatureNode, TupleSignature

Collection = tuple[str, tuple[str, ...]]  # (table, path of nested collection attributes; () = the table)


@dataclass(frozen=True, slots=True)
class Origin:
    """An element of a base collection, seen at ``prefix`` (attribute path) inside it."""

    collection: Collection
    prefix: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Record:
    """A constructed tuple whose fields come from base data."""

    fields: tuple[tuple[str, "Value"], ...]

    def get(self, name: str) -> "Value | None":
        return next((v for n, v in self.fields if n == name), None)


@dataclass(frozen=True, slots=True)
class BagOf:
    """A collection whose elements are ``element`` (a subquery's value, a GROUP AS bag);
    ``deps`` are the base data the query producing it read (its conditions included)."""

    element: "Value | None"
    deps: frozenset[Origin] = frozenset()


@dataclass(frozen=True, slots=True)
class Derived:
    """A computed value (arithmetic, a function, an aggregate) of the base data ``deps``."""

    deps: frozenset[Origin]


Value = Union[Origin, Record, BagOf, Derived]


@dataclass(frozen=True, slots=True)
class CollectionSignatures:
    """The signatures of one base collection, in generation order."""

    collection: Collection
    key: tuple[str, ...]
    insert: RootSignature
    delete: RootSignature
    conditional_updates: tuple[tuple[frozenset[str], RootSignature], ...]
    nonconditional_update: RootSignature | None
    wildcard: bool

    def all(self) -> tuple[RootSignature, ...]:
        ups = tuple(s for _, s in self.conditional_updates)
        tail = (self.nonconditional_update,) if self.nonconditional_update else ()
        return (self.insert, self.delete) + ups + tail

    def to_json(self) -> dict:
        table, path = self.collection
        return {
            "table": table, "collection": list(path), "key": list(self.key), "wildcard": self.wildcard,
            "insert": str(self.insert), "delete": str(self.delete),
            "conditional_updates": [{"attributes": sorted(a), "signature": str(s)}
                                    for a, s in self.conditional_updates],
            "nonconditional_update": str(self.nonconditional_update) if self.nonconditional_update else None,
        }


@dataclass(frozen=True, slots=True)
class BaseSignatures:
    collections: tuple[CollectionSignatures, ...]

    def tables(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.collection[0] for c in self.collections))

    def of(self, table: str, path: tuple[str, ...] = ()) -> CollectionSignatures:
        for c in self.collections:
            if c.collection == (table, path):
                return c
        raise KeyError((table, path))

    @property
    def wildcard(self) -> tuple[Collection, ...]:
        return tuple(c.collection for c in self.collections if c.wildcard)

    def to_json(self) -> list[dict]:
        return [c.to_json() for c in self.collections]

    def __str__(self) -> str:
        lines = []
        for c in self.collections:
            table, path = c.collection
            name = ".".join((table,) + path)
            lines.append(f"{name} (key {', '.join(c.key) or 'the value'})"
                         + ("  [wildcard: every attribute reaches the view]" if c.wildcard else ""))
            for s in c.all():
                lines.extend("  " + line for line in str(s).splitlines())
        return "\n".join(lines)


@dataclass
class _Usage:
    scanned: dict[Collection, None] = field(default_factory=dict)
    read: dict[Collection, set[tuple[str, ...]]] = field(default_factory=dict)
    read_whole: set[Collection] = field(default_factory=set)  # elements used as whole values
    projected: dict[Collection, set[str]] = field(default_factory=dict)  # attributes reaching outputs
    wildcard: set[Collection] = field(default_factory=set)  # elements projected whole
    conditions: list[dict[Collection, set[tuple[str, ...]]]] = field(default_factory=list)
    by_operator: dict[O.Operator, dict[Collection, set[tuple[str, ...]]]] = field(default_factory=dict)


def generate_base_signatures(plan: O.Operator, keys: Mapping[str, tuple[str, ...]],
                             types: Mapping[str, T.TupleType],
                             element_keys: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None
                             ) -> BaseSignatures:
    """The base-table i-diff signatures of a view plan (see module doc).

    ``element_keys``: table -> dot-joined path of a nested collection of tuples -> its element key."""
    usage = _Usage()
    _Analysis(usage).plan(plan, {})
    out = []
    for coll in usage.scanned:
        out.append(_signatures(coll, usage, keys, types, element_keys or {}))
    return BaseSignatures(tuple(out))


def condition_attributes(plan: O.Operator) -> dict[O.Operator, frozenset[tuple[Collection, str]]]:
    """``C_op`` of §2.5 / §2.14.1 for every operator of ``plan`` that has a condition (selection,
    join / semijoin / antijoin condition, grouping keys, DISTINCT's variables), nested plans
    included: the base attributes it reads, as (collection, attribute) pairs.  A condition on
    the elements of a nested collection reads the collection's attribute in its parent (as in
    the conditional update signatures).  Operators are keyed by value, as IDs are."""
    usage = _Usage()
    _Analysis(usage).plan(plan, {})
    return {op: frozenset((coll, p[0]) for coll, paths in attrs.items() for p in paths)
            for op, attrs in usage.by_operator.items()}


# ----------------------------------------------------------------------------- analysis


class _Analysis:
    def __init__(self, usage: _Usage):
        self.u = usage
        self.touched: list[set[Origin]] = []  # open collectors of the base data read

    def plan(self, op: O.Operator, env: dict[str, Value]) -> dict[str, Value]:
        """Bindings of the operator's output variables (plus the environment's)."""
        match op:
            case O.Ground():
                return dict(env)
            case O.ScanCollection(input=i, source=src, var=x):
                b = self.plan(i, env)
                if isinstance(src, TableRef):
                    coll: Collection = (src.name, ())
                    self.u.scanned.setdefault(coll)
                    b[x] = Origin(coll)
                else:
                    v = self.value(src, b, read=False)
                    if isinstance(v, Origin):
                        nested = (v.collection[0], v.collection[1] + v.prefix)
                        self.u.scanned.setdefault(nested)
                        self.read(v)  # the collection attribute itself is read
                        b[x] = Origin(nested)
                    elif isinstance(v, BagOf):
                        b[x] = v.element
                    self.terms(op, b)
                return b
            case O.Select(input=i, condition=c):
                b = self.plan(i, env)
                self.condition(c, b, op)
                return b
            case O.InnerJoin(left=l, right=r, condition=c) | O.LeftJoin(left=l, right=r, condition=c):
                b = {**self.plan(l, env), **self.plan(r, env)}
                self.condition(c, b, op)
                return b
            case O.SemiJoin(left=l, right=r, condition=c) | O.AntiJoin(left=l, right=r, condition=c):
                bl = self.plan(l, env)
                self.condition(c, {**bl, **self.plan(r, env)}, op)
                return bl
            case O.Project(input=i, outputs=outs):
                b = self.plan(i, env)
                out = {k: v for k, v in env.items()}
                for v, t in outs:
                    val = self.value(t, b, projected=True)
                    if val is not None:
                        out[v] = val
                return out
            case O.Assign(input=i, term=t, var=v) | O.NavTuple(input=i, base=t, var=v):
                b = self.plan(i, env)
                if isinstance(op, O.NavTuple):
                    t = Field(t, op.field_name)
                val = self.value(t, b)
                if val is not None:
                    b[v] = val
                return b
            case O.ConstructTuple(input=i, fields=fs, var=v):
                b = self.plan(i, env)
                b[v] = Record(tuple((n, val) for n, t in fs
                                    if (val := self.value(t, b, projected=True)) is not None))
                return b
            case O.FunctionCall(input=i, args=args, var=v) | O.ConstructBag(input=i, items=args, var=v) \
                    | O.ConstructArray(input=i, items=args, var=v):
                b = self.plan(i, env)
                b[v] = Derived(frozenset(o for a in args for o in _origins(self.value(a, b))))
                return b
            case O.ApplyPlan(input=i, plan=p, var=v):
                b = self.plan(i, env)
                self.touched.append(set())
                try:
                    el = self.returned(p, b)
                finally:
                    deps = self.touched.pop()
                if self.touched:
                    self.touched[-1] |= deps
                b[v] = BagOf(el, frozenset(deps))
                return b
            case O.InnerCorrelate(input=i, plan=p) | O.LeftCorrelate(input=i, plan=p):
                b = self.plan(i, env)
                return {**b, **self.plan(p, b)}
            case O.UnionAll(left=l, right=r):
                return {**self.plan(l, env), **self.plan(r, env)}
            case O.GroupBy(input=i, keys=keys, aggregates=aggs, group_var=g, group_fields=gf):
                b = self.plan(i, env)
                self.condition_terms([t for _, t in keys], b, op)  # grouping keys decide group membership
                out = dict(env)
                for v, a in aggs:
                    out[v] = Derived(frozenset(_origins(self.value(a.arg, b))) if a.arg is not None
                                     else frozenset())
                for k, t in keys:
                    val = self.value(t, b, read=False)
                    if val is not None:
                        out[k] = val
                if g:
                    out[g] = BagOf(Record(tuple((n, val) for n, t in gf
                                                if (val := self.value(t, b, projected=True)) is not None)))
                return out
            case O.OrderBy(input=i, keys=keys, var=v):
                # the keys, and on ties every variable, decide each tuple's position (and LIMIT's)
                b = self.plan(i, env)
                terms = [t for t, _ in keys] + [Var(x) for x in i.output_variables()]
                self.condition_terms(terms, b, op)
                b[v] = Derived(frozenset(o for t in terms for o in _origins(self.value(t, b))))
                return b
            case O.Distinct(input=i):
                # δ behaves as γ over all its variables (§2.4): they decide which tuples remain
                b = self.plan(i, env)
                self.condition_terms([Var(v) for v in op.output_variables()], b, op)
                return b
            case O.ReturnBag():
                self.returned(op, env)
                return dict(env)
        raise TypeError(f"no signature analysis for {op.name}")

    def returned(self, op: O.Operator, env: dict[str, Value]) -> Value | None:
        assert isinstance(op, O.ReturnBag)
        b = self.plan(op.input, env)
        return self.value(op.element, b, projected=True)

    # ------------------------------------------------------------------ terms

    def value(self, t: Term, b: Mapping[str, Value], *, read: bool = True,
              projected: bool = False) -> Value | None:
        """The origin of a term's value (Derived for computed values, None for constants);
        marks what it reads (and, if ``projected``, what reaches an output)."""
        base, path = split_path(t)
        if isinstance(base, Var) and base.name in b:
            v: Value | None = b[base.name]
            for name in path:
                if isinstance(v, Origin):
                    v = Origin(v.collection, v.prefix + (name,))
                elif isinstance(v, Record):
                    v = v.get(name)
                else:
                    v = None
                    break
            if read and v is not None:
                self.read(v, projected)
            return v
        if isinstance(t, TupleExpr):
            return Record(tuple((n, val) for n, f in t.fields
                                if (val := self.value(f, b, read=read, projected=projected)) is not None))
        deps = frozenset(o for c in t.children() for o in _origins(self.value(c, b, read=read)))
        return Derived(deps) if deps else None

    def read(self, v: Value | None, projected: bool = False) -> None:
        if isinstance(v, Origin):
            if self.touched:
                self.touched[-1].add(v)
            if v.prefix:
                self.u.read.setdefault(v.collection, set()).add(v.prefix)
                if projected:
                    self.u.projected.setdefault(v.collection, set()).add(v.prefix[0])
            else:
                self.u.read_whole.add(v.collection)
                if projected:
                    self.u.wildcard.add(v.collection)
        elif isinstance(v, Record):
            for _, f in v.fields:
                self.read(f, projected)
        elif isinstance(v, BagOf):
            self.read(v.element, projected)
        elif isinstance(v, Derived) and self.touched:
            self.touched[-1] |= v.deps

    def terms(self, op: O.Operator, b: Mapping[str, Value]) -> None:
        for t in op.terms():
            if not isinstance(t, TableRef):
                self.value(t, b)

    def condition(self, c: Term, b: Mapping[str, Value], op: O.Operator) -> None:
        self.condition_terms([c], b, op)

    def condition_terms(self, terms: list[Term], b: Mapping[str, Value], op: O.Operator) -> None:
        attrs: dict[Collection, set[tuple[str, ...]]] = {}
        for t in terms:
            for sub in _maximal_paths(t):
                for o in _origins(self.value(sub, b)):
                    if o.prefix:
                        attrs.setdefault(o.collection, set()).add(o.prefix)
                    elif o.collection[1]:  # a nested collection's elements: its attribute
                        table, path = o.collection
                        attrs.setdefault((table, path[:-1]), set()).add((path[-1],))
        if attrs:
            self.u.conditions.append(attrs)
            mine = self.u.by_operator.setdefault(op, {})
            for coll, paths in attrs.items():
                mine.setdefault(coll, set()).update(paths)


def _origins(v: Value | None) -> list[Origin]:
    """The base data a value is made of (for a query's value, also what the query read)."""
    if isinstance(v, Origin):
        return [v]
    if isinstance(v, Record):
        return [o for _, f in v.fields for o in _origins(f)]
    if isinstance(v, BagOf):
        return _origins(v.element) + list(v.deps)
    if isinstance(v, Derived):
        return list(v.deps)
    return []


def _maximal_paths(t: Term) -> list[Term]:
    if isinstance(t, (Field, Var)):
        return [t]
    out: list[Term] = []
    for c in t.children():
        out.extend(_maximal_paths(c))
    return out


# ----------------------------------------------------------------------------- signatures


def _collection_type(coll: Collection, types: Mapping[str, T.TupleType]) -> T.Type:
    table, path = coll
    t: T.Type = types.get(table, T.ANY)
    for name in path:
        if isinstance(t, T.CollectionType):
            t = t.element
        t = t.field(name) if isinstance(t, T.TupleType) and t.field(name) else T.ANY
        if isinstance(t, T.CollectionType):
            continue
    return t.element if isinstance(t, T.CollectionType) else t


def _signatures(coll: Collection, u: _Usage, keys: Mapping[str, tuple[str, ...]],
                types: Mapping[str, T.TupleType],
                element_keys: Mapping[str, Mapping[str, tuple[str, ...]]]) -> CollectionSignatures:
    table, path = coll
    element_type = types.get(table) if not path else _collection_type(coll, types)
    declared = element_keys.get(table, {})
    if not path:
        key = tuple(keys.get(table, ()))
    elif isinstance(element_type, T.TupleType):
        key = tuple(declared.get(".".join(path), ()))  # the declared element key, if any
    else:
        key = (path[-1],)  # a bag of scalars: the value is its own provenance
    attrs = element_type.names if isinstance(element_type, T.TupleType) else ()
    top = lambda p: p[0]  # noqa: E731 - attributes are named by their first step
    read = {top(p) for p in u.read.get(coll, set())}
    if coll in u.read_whole:
        read |= set(attrs)
    # wildcard: the whole element reaches an output, or every attribute of it does (``r.*``;
    # the key always does, as provenance)
    wildcard = coll in u.wildcard or bool(attrs) and set(attrs) - set(key) <= u.projected.get(coll, set())
    cond_sets: list[frozenset[str]] = []
    for c in u.conditions:
        names = frozenset(top(p) for p in c.get(coll, set())) - set(key)
        if names and names not in cond_sets:
            cond_sets.append(names)
    conditional = set().union(*cond_sets) if cond_sets else set()
    nonconditional = [a for a in attrs if a in read and a not in conditional and a not in key]

    def root(node: SignatureNode) -> RootSignature:
        """Wrap an element signature of the collection into the table's root signature."""
        if not path:
            return RootSignature(key, node, name=table)
        nested: SignatureNode = node
        bag = BagSignature(key, nested)
        for i in range(len(path) - 1, -1, -1):
            holder = SignatureNode(DiffType.UPDATE, diff=TupleSignature(((path[i], SignatureNode(DiffType.UPDATE, diff=bag)),)))
            if i == 0:
                return RootSignature(tuple(keys.get(table, ())), holder, name=table)
            bag = BagSignature(tuple(declared.get(".".join(path[:i]), ())), holder)
        raise AssertionError

    def update(names, pre: bool) -> RootSignature:
        fields_ = tuple((a, SignatureNode(DiffType.UPDATE, pre=pre, post=True)) for a in sorted(names))
        return root(SignatureNode(DiffType.UPDATE, diff=TupleSignature(fields_)))

    return CollectionSignatures(
        collection=coll, key=key,
        insert=root(SignatureNode(DiffType.INSERT, post=True)),
        delete=root(SignatureNode(DiffType.DELETE, pre=True)),
        conditional_updates=tuple((names, update(names, True)) for names in cond_sets),
        nonconditional_update=update(nonconditional, False) if nonconditional else None,
        wildcard=wildcard,
    )
