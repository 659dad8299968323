"""ID / provenance inference with key retouching (thesis §2.4 pass 1, Tables 2.1 and 2.6,
Appendix B, Appendix D.3).

Input: a plan (from :mod:`idivm.algebra.builder`) and the primary keys of the
base tables.  Output: :class:`ProvenanceResult` — the *retouched* plan, which
computes every ID the view needs, and the IDs of every operator's output.

IDs are kept as *key groups* (App. B.3.1): a group is a set of equivalent
terms over the operator's output variables, any one of which identifies the
same component of the key (e.g. ``parts.pid`` and ``devices_parts.pid`` after
the join of Fig. 2.5a).  A group is named after its column (``pid``); when two
groups of one operator share a name they are qualified with their variable
(``parts.pid``), the thesis' name-conflict renaming.

Rules, bottom-up (Table 2.1 for the relational operators, Table 2.6 / D.3 for
SQL++): Ground is a singleton (no IDs); ScanCollection adds the key of the
scanned table, or the provenance of the scanned collection's elements (the
value itself for a bag of scalars, the declared element key for a nested
collection of tuples of a base table, the position for ``AT``).  A bag of
scalars may repeat a value: scanned at the view's top level, its elements are
named by their value and occurrence (the hidden ``occurrence`` variable of the
scan: 1 + the equal elements before it), so that every element has a row of
its own ID; nested queries keep the value alone (their bags are rebuilt
whole).  Select, Assign,
FunctionCall, Construct*, NavTuple and ApplyPlan keep their input's IDs;
joins and correlates concatenate both sides, and an inner equi-join makes
the two sides' equal key terms one group; Semi/AntiJoin keep the left IDs;
UnionAll adds the branch attribute; GroupBy's IDs are its grouping keys
(none for a global aggregate: a singleton); Distinct's IDs are all its
variables.  Nested collections carry the provenance of their elements: an
ApplyPlan's bag gets the IDs of the nested query's result, a GROUP AS bag
the IDs of the group's members.

Retouching: a Project that would drop every term of a key group keeps one as
a hidden variable (App. B.4.5); UnionAll branches get the branch attribute
and each other's hidden key columns padded with NULL (B.4.10); every Return
of tuples gets its provenance as hidden fields, so the stored view carries
its IDs (top level: one hidden column per key group; nested tuple elements:
one hidden ``__idivm_prov`` field).  An ID that cannot be inferred is
tolerated until it reaches the view's output, where it is an error naming the
operator that lost it (App. B.2.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import (
    Call, Const, Field, TableRef, Term, TupleExpr, Var, conjuncts,
)
from idivm.algebra.rewrite import substitute
from idivm.errors import UnknownIdsError, UnsupportedError

HIDDEN = "__idivm_"  # prefix of hidden (provenance) columns and fields of stored views
ELEMENT = Var("@")  # placeholder for "the element" in provenance of collection elements
BRANCH = f"{HIDDEN}branch"
PROV_FIELD = f"{HIDDEN}prov"


@dataclass(frozen=True, slots=True)
class KeyGroup:
    """One ID attribute: equivalent terms (first is canonical) and its display name."""

    name: str
    terms: tuple[Term, ...]

    @property
    def term(self) -> Term:
        return self.terms[0]

    def to_json(self) -> dict:
        return {"name": self.name, "terms": [str(t) for t in self.terms]}


@dataclass(frozen=True, slots=True)
class Ids:
    """The IDs of a bag: key groups, or ``unknown`` (with the reason) if none can be inferred."""

    groups: tuple[KeyGroup, ...] = ()
    unknown: str | None = None

    @property
    def known(self) -> bool:
        return self.unknown is None

    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.groups)

    def __str__(self) -> str:
        if not self.known:
            return "IDs unknown"
        return "IDs {" + ", ".join(self.names()) + "}" if self.groups else "IDs {} (singleton)"

    def to_json(self) -> dict:
        if not self.known:
            return {"unknown": self.unknown}
        return {"groups": [g.to_json() for g in self.groups]}


UNKNOWN_SCALAR = "elements are not tuples"


@dataclass(frozen=True, slots=True)
class ProvenanceResult:
    plan: O.Operator  # the retouched plan (computes and returns the hidden IDs)
    ids: Mapping[O.Operator, Ids]  # IDs of each operator of the ORIGINAL plan
    view_ids: tuple[tuple[str, str], ...]  # (hidden column, ID name) of the view's top level
    #: IDs of each operator of the RETOUCHED plan (what maintenance plans are built on)
    plan_ids: Mapping[O.Operator, Ids] = field(default_factory=dict, compare=False)
    #: why the view's IDs cannot be inferred (:func:`without_ids`); None when they are known
    unknown: UnknownIdsError | None = field(default=None, compare=False)

    def annotate(self, op: O.Operator) -> str:
        ids = self.ids.get(op)
        return "" if ids is None else f"[{ids}]"


@dataclass
class _Info:
    """What inference knows about an operator's output."""

    ids: Ids
    # provenance of the elements of collection-valued terms (paths over output variables)
    elements: dict[Term, Ids] = field(default_factory=dict)


def infer_provenance(plan: O.Operator, table_keys: Mapping[str, tuple[str, ...]],
                     table_types: Mapping[str, T.TupleType] | None = None,
                     element_keys: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None) -> ProvenanceResult:
    """Infer the IDs of every operator of ``plan`` and retouch it to carry them (see module doc).

    ``element_keys``: table -> path of a nested collection of tuples (``hours``,
    ``address.phones``; a step into a collection goes to its elements) -> the
    columns of its elements' key."""
    inf = _Inference(table_keys, table_types or {}, element_keys or {})
    if not isinstance(plan, O.ReturnBag):
        raise ValueError("a view plan ends in ReturnBag")
    new_input, info = inf.infer(plan.input, {})
    inf.record(plan, info.ids)
    if not info.ids.known:
        raise UnknownIdsError(f"the view has no inferable key: {info.ids.unknown}", plan.span)
    element, hidden = _top_level_element(plan.element, info.ids)
    new_plan = replace(plan, input=new_input, element=element)
    inf.retouched[new_plan] = info.ids
    return ProvenanceResult(new_plan, inf.ids, hidden, inf.retouched)


def without_ids(plan: O.Operator, reason: UnknownIdsError) -> ProvenanceResult:
    """The provenance of a view whose IDs cannot be inferred (``reason``): its plan as it
    is, with no hidden ID columns.  Such a view can be recomputed, not maintained by ID."""
    return ProvenanceResult(plan, {}, (), {}, unknown=reason)


def _top_level_element(element: Term, ids: Ids) -> tuple[Term, tuple[tuple[str, str], ...]]:
    taken: set[str] = set()
    extra = tuple((_unique(f"{HIDDEN}id_{_column(g.name)}", taken), g) for g in ids.groups)
    hidden = tuple((c, g.name) for c, g in extra)
    fields_ = tuple((c, g.term) for c, g in extra)
    if not isinstance(element, TupleExpr):
        raise ValueError("the top-level element of a view plan is a tuple constructor")
    return TupleExpr(element.fields + fields_), hidden


def _column(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


def _unique(column: str, taken: set[str]) -> str:
    """``column``, or with a numbered suffix when another ID column took it (names that
    :func:`_column` maps alike: ``a b`` and ``a_b``)."""
    name, n = column, 1
    while name in taken:
        n += 1
        name = f"{column}_{n}"
    taken.add(name)
    return name


class _Inference:
    def __init__(self, table_keys: Mapping[str, tuple[str, ...]], table_types: Mapping[str, T.TupleType],
                 element_keys: Mapping[str, Mapping[str, tuple[str, ...]]]):
        self.table_keys = table_keys
        self.table_types = table_types
        self.element_keys = element_keys
        self.ids: dict[O.Operator, Ids] = {}
        self.retouched: dict[O.Operator, Ids] = {}
        self.counter = 0
        self.depth = 0  # nesting depth of the query being inferred (0: the view's top level)

    def record(self, op: O.Operator, ids: Ids) -> None:
        self.ids.setdefault(op, ids)

    def hidden_var(self, name: str) -> str:
        self.counter += 1
        return f"{HIDDEN}{_column(name)}_{self.counter}"

    # ------------------------------------------------------------------ per operator

    def infer(self, op: O.Operator, env: dict[Term, Ids]) -> tuple[O.Operator, _Info]:
        """(retouched operator, info).  ``env``: element provenance of the environment's
        collection-valued terms (for nested plans)."""
        method = getattr(self, f"_{type(op).__name__}", None)
        if method is None:
            raise UnsupportedError(f"no provenance rule for {op.name}", op.span)
        new, info = method(op, env)
        info.ids = _named(info.ids)
        self.record(op, info.ids)
        self.retouched.setdefault(new, info.ids)
        return new, info

    def _Ground(self, op: O.Ground, env):
        return op, _Info(Ids(()), dict(env))

    def _ScanCollection(self, op: O.ScanCollection, env):
        inp, info = self.infer(op.input, env)
        x = Var(op.var)
        elements = dict(info.elements)
        if isinstance(op.source, TableRef):
            keys = self.table_keys[op.source.name]
            own = Ids(tuple(KeyGroup(k, (Field(x, k),)) for k in keys))
            ttype = self.table_types.get(op.source.name)
            if ttype is not None:
                elements.update(_nested_collections(x, ttype, self.element_keys.get(op.source.name, {})))
        else:
            el = info.elements.get(op.source)
            if op.position:
                own = Ids((KeyGroup(op.position, (Var(op.position),)),))
            elif el is None:
                own = Ids(unknown=f"ScanCollection over {op.source}: the provenance of its elements is unknown")
            elif not el.known:
                own = Ids(unknown=f"ScanCollection over {op.source}: {el.unknown}")
            elif len(el.groups) == 1 and el.groups[0].term == ELEMENT and self.depth == 0:
                # a top-level row per scalar element: its value and occurrence name it, so that
                # a bag repeating a value gives rows of distinct IDs
                name = el.groups[0].name
                occurrence = self.hidden_var(f"{name}_occurrence")
                op = replace(op, occurrence=occurrence)
                own = Ids((KeyGroup(name, (x,)), KeyGroup(f"{name}_occurrence", (Var(occurrence),))))
            else:
                own = _subst_ids(el, ELEMENT, x)
            for path, ids in info.elements.items():
                rel = _relative(path, op.source)
                if rel is not None:
                    elements[substitute(rel, {ELEMENT: x})] = ids
        return replace(op, input=inp), _Info(_concat(info.ids, own), elements)

    def _NavTuple(self, op: O.NavTuple, env):
        inp, info = self.infer(op.input, env)
        info = _Info(_copy_of_key(info.ids, Field(op.base, op.field_name), Var(op.var)), info.elements)
        elements = dict(info.elements)
        nav = Field(op.base, op.field_name)
        for path, ids in info.elements.items():
            rel = _relative_path(path, nav)
            if rel is not None:
                elements[substitute(rel, {ELEMENT: Var(op.var)})] = ids
        return replace(op, input=inp), _Info(info.ids, elements)

    def _Select(self, op: O.Select, env):
        inp, info = self.infer(op.input, env)
        return replace(op, input=inp), _Info(_merge_equalities(info.ids, op.condition), info.elements)

    def _Project(self, op: O.Project, env):
        inp, info = self.infer(op.input, env)
        outputs = list(op.outputs)
        groups = []
        if info.ids.known:
            for g in info.ids.groups:
                kept = tuple(t2 for t in g.terms for t2 in _through(t, outputs))
                if not kept:  # retouch: keep one copy of the key (App. B.4.5)
                    v = self.hidden_var(g.name)
                    outputs.append((v, g.term))
                    kept = (Var(v),)
                groups.append(KeyGroup(g.name, kept))
            ids = Ids(tuple(groups))
        else:
            ids = info.ids
        elements = {}
        for path, el in info.elements.items():
            for t in _through(path, outputs):
                elements[t] = el
        for path, el in env.items():
            elements.setdefault(path, el)
        return replace(op, input=inp, outputs=tuple(outputs)), _Info(ids, elements)

    def _Assign(self, op: O.Assign, env):
        inp, info = self.infer(op.input, env)
        ids = _copy_of_key(info.ids, op.term, Var(op.var))
        return replace(op, input=inp), _Info(ids, _alias_elements(info.elements, op.term, Var(op.var)))

    def _OrderBy(self, op: O.OrderBy, env):
        inp, info = self.infer(op.input, env)  # positions name no tuple: the IDs stay
        return replace(op, input=inp), _Info(info.ids, info.elements)

    def _FunctionCall(self, op: O.FunctionCall, env):
        inp, info = self.infer(op.input, env)
        return replace(op, input=inp), _Info(info.ids, info.elements)

    def _ConstructTuple(self, op: O.ConstructTuple, env):
        inp, info = self.infer(op.input, env)
        elements = dict(info.elements)
        for name, t in op.fields:
            elements.update(_alias_elements(info.elements, t, Field(Var(op.var), name)))
        return replace(op, input=inp), _Info(info.ids, elements)

    def _ConstructBag(self, op, env):
        inp, info = self.infer(op.input, env)
        elements = dict(info.elements)
        elements[Var(op.var)] = Ids(unknown=f"{op.name} {op.var}: constructed collections have no provenance")
        return replace(op, input=inp), _Info(info.ids, elements)

    _ConstructArray = _ConstructBag

    def _ApplyPlan(self, op: O.ApplyPlan, env):
        inp, info = self.infer(op.input, env)
        plan, el_ids = self.nested_query(op.plan, info.elements)
        elements = dict(info.elements)
        elements[Var(op.var)] = el_ids
        return replace(op, input=inp, plan=plan), _Info(info.ids, elements)

    def nested_query(self, plan: O.Operator, env: dict[Term, Ids]) -> tuple[O.Operator, Ids]:
        """A nested query (ReturnBag): retouched plan and the provenance of its elements."""
        assert isinstance(plan, O.ReturnBag)
        self.depth += 1
        try:
            inp, info = self.infer(plan.input, env)
        finally:
            self.depth -= 1
        self.record(plan, info.ids)
        el = plan.element
        if not info.ids.known or not info.ids.groups:
            # unknown, or a singleton (e.g. a global aggregate): no provenance field to add
            # (Parquet cannot store the empty struct it would be)
            return replace(plan, input=inp), info.ids
        if isinstance(el, TupleExpr):
            prov = TupleExpr(tuple((g.name, g.term) for g in info.ids.groups))
            new_el = TupleExpr(el.fields + ((PROV_FIELD, prov),))
            ids = Ids(tuple(KeyGroup(g.name, (Field(Field(ELEMENT, PROV_FIELD), g.name),)) for g in info.ids.groups))
            return replace(plan, input=inp, element=new_el), ids
        # SELECT VALUE: the element is its own provenance when the IDs are carried by it
        exprs = [t2 for g in info.ids.groups for t2 in _through_value(g.terms, el)]
        if len(exprs) == len(info.ids.groups):
            return replace(plan, input=inp), Ids(tuple(KeyGroup(g.name, (t,)) for g, t in zip(info.ids.groups, exprs)))
        return replace(plan, input=inp), Ids(unknown="SELECT VALUE of a non-tuple value: its elements "
                                                     "cannot carry their provenance")

    def _correlate(self, op, env):
        inp, info = self.infer(op.input, env)
        plan, pinfo = self.infer(op.plan, info.elements)
        elements = {**info.elements, **pinfo.elements}
        return replace(op, input=inp, plan=plan), _Info(_concat(info.ids, pinfo.ids), elements)

    _InnerCorrelate = _correlate
    _LeftCorrelate = _correlate

    def _join(self, op, env):
        left, linfo = self.infer(op.left, env)
        right, rinfo = self.infer(op.right, env)
        ids = _concat(linfo.ids, rinfo.ids)
        if isinstance(op, O.InnerJoin):
            ids = _merge_equalities(ids, op.condition)
        return replace(op, left=left, right=right), _Info(ids, {**linfo.elements, **rinfo.elements})

    _InnerJoin = _join
    _LeftJoin = _join

    def _semi(self, op, env):
        left, linfo = self.infer(op.left, env)
        right, _ = self.infer(op.right, env)
        return replace(op, left=left, right=right), linfo

    _SemiJoin = _semi
    _AntiJoin = _semi

    def _UnionAll(self, op: O.UnionAll, env):
        left, linfo = self.infer(op.left, env)
        right, rinfo = self.infer(op.right, env)
        if not (linfo.ids.known and rinfo.ids.known):
            reason = linfo.ids.unknown or rinfo.ids.unknown
            return replace(op, left=left, right=right), _Info(Ids(unknown=reason))
        # outer union with the branch attribute (App. B.4.10)
        branch = Var(BRANCH + f"_{self._next()}")
        lcols = [(self.hidden_var(g.name), g) for g in linfo.ids.groups]
        rcols = [(self.hidden_var(g.name), g) for g in rinfo.ids.groups]
        null = Const(None, T.NULL)
        lextra = ((branch.name, Const(0, T.INT)),) + tuple((v, g.term) for v, g in lcols) + tuple((v, null) for v, _ in rcols)
        rextra = ((branch.name, Const(1, T.INT)),) + tuple((v, null) for v, _ in lcols) + tuple((v, g.term) for v, g in rcols)
        keep = set(op.output_variables())
        left2 = _extend_project(left, lextra, keep)
        right2 = _extend_project(right, rextra, keep)
        named = [("branch", branch)] + [(g.name, Var(v)) for v, g in lcols + rcols]
        taken: set[str] = set()
        groups = []
        for name, t in named:  # a union of unions has IDs of one name from each: number them apart
            unique, n = name, 1
            while unique in taken:
                n += 1
                unique = f"{name}_{n}"
            taken.add(unique)
            groups.append(KeyGroup(unique, (t,)))
        return O.UnionAll(left2, right2, span=op.span), _Info(Ids(tuple(groups)))

    def _next(self) -> int:
        self.counter += 1
        return self.counter

    def _GroupBy(self, op: O.GroupBy, env):
        inp, info = self.infer(op.input, env)
        ids = Ids(tuple(KeyGroup(k, (Var(k),)) for k, _ in op.keys))
        elements = {}
        new = replace(op, input=inp)
        if op.group_var:
            if info.ids.known and info.ids.groups:
                prov = TupleExpr(tuple((g.name, g.term) for g in info.ids.groups))
                new = replace(new, group_fields=op.group_fields + ((PROV_FIELD, prov),))
                elements[Var(op.group_var)] = Ids(tuple(
                    KeyGroup(g.name, (Field(Field(ELEMENT, PROV_FIELD), g.name),)) for g in info.ids.groups))
            else:
                elements[Var(op.group_var)] = info.ids
            for name, t in op.group_fields:
                for path, el in info.elements.items():
                    rel = _relative_path(path, t)
                    if rel is not None:
                        elements[substitute(rel, {ELEMENT: Field(Field(Var(op.group_var), "@"), name)})] = el
        return new, _Info(ids, elements)

    def _Distinct(self, op: O.Distinct, env):
        # no retouching below a Distinct: extra columns would change which tuples are equal
        # (App. B.4.9); its IDs are all its variables
        self.infer(op.input, env)
        vars_ = op.output_variables()
        return op, _Info(Ids(tuple(KeyGroup(v, (Var(v),)) for v in vars_)))

    def _ReturnBag(self, op: O.ReturnBag, env):
        new, ids = self.nested_query(op, env)
        return new, _Info(ids)


# ----------------------------------------------------------------------------- helpers


def _nested_collections(base: Term, t: T.TupleType, declared: Mapping[str, tuple[str, ...]],
                        prefix: str = "") -> dict[Term, Ids]:
    """Element provenance of the collections nested in a tuple of type ``t`` at ``base``: paths
    through tuple attributes and into collection elements (``Field(coll, "@")``)."""
    out: dict[Term, Ids] = {}
    for f, ft in t.fields:
        path, term = prefix + f, Field(base, f)
        if isinstance(ft, T.CollectionType):
            out[term] = _element_ids(ft.element, f, path, declared.get(path))
            if isinstance(ft.element, T.TupleType):
                out.update(_nested_collections(Field(term, "@"), ft.element, declared, path + "."))
        elif isinstance(ft, T.TupleType):
            out.update(_nested_collections(term, ft, declared, path + "."))
    return out


def _element_ids(el: T.Type, name: str, path: str | None = None, key: tuple[str, ...] | None = None) -> Ids:
    if isinstance(el, T.ScalarType):
        return Ids((KeyGroup(name, (ELEMENT,)),))  # a bag of scalars: the value is its provenance
    if key and isinstance(el, T.TupleType):
        return Ids(tuple(KeyGroup(k, (Field(ELEMENT, k),)) for k in key))  # the declared element key
    return Ids(unknown=f"nested collection '{path or name}' has no declared element key")


def _concat(a: Ids, b: Ids) -> Ids:
    if not a.known:
        return a
    if not b.known:
        return b
    return Ids(a.groups + b.groups)


def _named(ids: Ids) -> Ids:
    """Qualify groups whose names collide (the thesis' name-conflict renaming)."""
    if not ids.known:
        return ids
    counts: dict[str, int] = {}
    for g in ids.groups:
        counts[g.name] = counts.get(g.name, 0) + 1
    out: list[KeyGroup] = []
    for g in ids.groups:
        name = g.name
        if counts[name] > 1:
            base = g.term
            while isinstance(base, Field):
                base = base.base
            qual = base.name if isinstance(base, Var) and not base.name.startswith(HIDDEN) else None
            if qual is None:  # a hidden variable: number the copies instead
                taken = {o.name for o in out}
                n = 1
                while name in taken:
                    n += 1
                    name = f"{g.name}_{n}"
            elif not name.startswith(f"{qual}."):
                name = f"{qual}.{name}"
        out.append(KeyGroup(name, g.terms))
    return Ids(tuple(out))


def _copy_of_key(ids: Ids, term: Term, var: Var) -> Ids:
    """A variable bound to a key term joins that key's group (App. B.4.4, Navigate)."""
    if not ids.known:
        return ids
    return Ids(tuple(KeyGroup(g.name, g.terms + (var,)) if term in g.terms else g for g in ids.groups))


def _merge_equalities(ids: Ids, condition: Term) -> Ids:
    """Equalities between key terms make their groups one (the join of Fig. 2.5a)."""
    if not ids.known:
        return ids
    groups = list(ids.groups)
    for c in conjuncts(condition):
        if not (isinstance(c, Call) and c.function == "eq"):
            continue
        a, b = c.args
        ia = next((i for i, g in enumerate(groups) if a in g.terms), None)
        ib = next((i for i, g in enumerate(groups) if b in g.terms), None)
        if (ia is None) != (ib is None):  # the other side is an equal copy of the key term
            i, other = (ia, b) if ia is not None else (ib, a)
            if isinstance(other, (Var, Field)):
                groups[i] = KeyGroup(groups[i].name, groups[i].terms + (other,))
        elif ia is not None and ib is not None and ia != ib:
            ga, gb = groups[ia], groups[ib]
            groups[ia] = KeyGroup(_short(ga.name) if _short(ga.name) == _short(gb.name) else ga.name,
                                  ga.terms + tuple(t for t in gb.terms if t not in ga.terms))
            del groups[ib]
    return Ids(tuple(groups))


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _subst_ids(ids: Ids, old: Term, new: Term) -> Ids:
    if not ids.known:
        return ids
    return Ids(tuple(KeyGroup(g.name, tuple(substitute(t, {old: new}) for t in g.terms)) for g in ids.groups))


def _relative(path: Term, source: Term) -> Term | None:
    """``path`` below the elements of collection ``source`` (as a path over ELEMENT)."""
    if isinstance(path, Field) and isinstance(path.base, Field) and path.base.name == "@":
        if path.base.base == source:
            return Field(ELEMENT, path.name)
        inner = _relative(path.base, source)
        return Field(inner, path.name) if inner is not None else None
    if isinstance(path, Field):
        inner = _relative(path.base, source)
        return Field(inner, path.name) if inner is not None else None
    return None


def _relative_path(path: Term, prefix: Term) -> Term | None:
    """``path`` with ``prefix`` replaced by ELEMENT, if ``path`` extends ``prefix``."""
    if path == prefix:
        return ELEMENT
    if isinstance(path, Field):
        inner = _relative_path(path.base, prefix)
        return Field(inner, path.name) if inner is not None else None
    return None


def _through(t: Term, outputs: list[tuple[str, Term]]) -> list[Term]:
    """How a term over a Project's input is expressed over its output variables."""
    out = []
    for v, e in outputs:
        rel = _relative_path(t, e)
        if rel is not None and not isinstance(e, Const):
            out.append(substitute(rel, {ELEMENT: Var(v)}))
    return out


def _through_value(terms: tuple[Term, ...], element: Term) -> list[Term]:
    for t in terms:
        rel = _relative_path(t, element)
        if rel is not None:
            return [rel]
    return []


def _alias_elements(elements: dict[Term, Ids], source: Term, target: Term) -> dict[Term, Ids]:
    out = dict(elements)
    for path, ids in elements.items():
        rel = _relative_path(path, source)
        if rel is not None:
            out[substitute(rel, {ELEMENT: target})] = ids
    return out


def _extend_project(op: O.Operator, extra: tuple[tuple[str, Term], ...], keep: set[str]) -> O.Operator:
    """A union branch projecting exactly the variables ``keep`` plus ``extra`` (whose terms may
    name variables the branch's own Project defines: they are inlined)."""
    if isinstance(op, O.Project):
        defs = dict(op.outputs)
        inlined = []
        for v, t in extra:
            for dv, dt in defs.items():
                t = substitute(t, {Var(dv): dt})
            inlined.append((v, t))
        return replace(op, outputs=tuple((v, t) for v, t in op.outputs if v in keep) + tuple(inlined))
    return O.Project(op, tuple((v, Var(v)) for v in op.output_variables() if v in keep) + extra)
