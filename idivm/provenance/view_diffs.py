"""The view i-diff signatures a view's base-table changes produce (thesis §2.15): each base
i-diff signature propagated through the plan, operator by operator, to the provenance
attributes it names at each level of the view.  :mod:`idivm.provenance.indexes` selects the
global provenance indexes from them.

**View i-diff signatures.**  §2.15.2 runs "the IVM algorithm with base table diff signatures
to get i-diff signatures to the view".  Index selection only needs, of each view i-diff, the
collection whose elements it targets (the view's root bag, or a nested bag such as
``full_reviews``) and the provenance attributes it names at each level from the root down to
it; an attribute it does not name is a wildcard (``#()`` for a level that names none).  So
this pass propagates each base-table signature bottom-up through the plan keeping exactly
that: an i-diff is its type, the IDs of the operator's output it names (a subset of the
operator's IDs, Table 2.1 / 2.6), the base attributes it changes (to decide where an update is
*conditional*, §2.5), the nested collections on its path with the provenance it names in
each, and, inside a nested plan, the provenance it names of each enclosing level.  The rules
follow Appendices C and E as §2.15.4 summarises them:

* Most operators keep the provenance of their input i-diffs, renamed to their output's IDs
  (σ, π, LET, navigation, functions, constructors, ApplyPlan, the left side of ⋉/▷, ⊎ with its
  branch attribute: Tables C.2, C.5, E.2, E.5–E.7, E.10).  Deletes keep it everywhere: a
  deleted element is deleted wherever it is (C.1, C.7, E.3–E.5, E.8, E.9).
* An insert carries its post-state, so an operator that combines it with other data names the
  full provenance of its output: joins (Δ⁺ ⋈ Input, C.1 / C.7 / E.8 / E.9), correlates (E.4),
  scans of a collection inside it (E.1), DISTINCT.
* σ, joins and ⋉/▷ emit, for an update of attributes their condition reads, the update (for
  the data that stays) plus inserts and deletes named by the full provenance of their output
  (C.3, C.7, E.3).  Changes on the right of ⋉/▷ become inserts and deletes of left tuples.
* γ emits i-diffs on its grouping attributes (C.4, C.6, C.8, E.11): the groups' own i-diffs
  (aggregates, group creation and deletion) are named by the grouping attributes, since the
  aggregate rules join an i-diff with the input to find its group; an i-diff of the members
  of a ``GROUP AS`` bag names its group only when it determines it (an insert, a change of a
  grouping attribute, or provenance that contains the grouping key), and otherwise applies
  to every group (E.11's note; Example 2.13.1: a ``users`` update reaches V1 as ``#()``).
  Member provenance that is a grouping key is implied by the group, so it is not named again
  at the member level.  DISTINCT is γ over all its variables.
* i-diffs from inside a nested plan (an ApplyPlan subquery; a ``GROUP AS`` group, above)
  become i-diffs of elements of the nested collection under an outer element whose
  provenance is ``#()`` — the nested i-diff query does not depend on the outer input, and is
  run once over Ground (E.5) — unless the change was evaluated against a correlation: an
  operator whose condition reads a variable of an enclosing level names that level's full
  provenance in the i-diffs it filters or creates (E.5's "P_diff depends on data from B").
  Updates of the outer tuples trigger the nested plan (§2.13, E.4 / E.5): they enter it at
  its Ground as updates naming the outer tuples they update.

**Decisions** where the thesis is not explicit (each reproduces Example 2.15.3, and V and V1 of
§2.9 give the same five indexes):

* A delete passes a correlated σ as it is (E.3's second branch), so it is not correlated;
  inserts, and the inserts and deletes a conditional update creates, are filtered by the
  correlation and are (Fig. 2.16 / 2.17: the inserts of σ₂ run under α's input).
* A conditional update at a join creates deletes named by the full provenance of the join's
  output (as σ does, §2.15.4 (a)), not by the input's IDs only (C.7's π_{I,A'}): that gives
  ``full_reviews #(review_id, user_id)`` of Example 2.15.3 for a change of ``user_id``.
* An i-diff that names nothing below some level targets every element of the collections
  under the elements it names there, so it uses the index of that level (§2.15.3: the
  elements are reached from their parent); an i-diff naming nothing at all uses no index.
* Provenance that an operator cannot relate to its output (a position ``AT`` instead of a
  declared element key) is replaced by the output's full provenance of that level: the
  i-diff is resolved against the data, as §2.12.1 adds a missing post-state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from idivm.algebra import operators as O
from idivm.algebra.expressions import Field, TableRef, Term, TupleExpr, Var
from idivm.diffs.base_signatures import BaseSignatures, Collection, condition_attributes
from idivm.diffs.signatures import RootSignature, TupleSignature
from idivm.algebra.rewrite import substitute
from idivm.provenance.ids import ELEMENT, Ids, ProvenanceResult, _relative_path, _through


INSERT, DELETE, UPDATE = "insert", "delete", "update"
MEMBERSHIP = "*"  # the "attribute" an insert or delete of a collection's elements changes

Attr = tuple[Collection, str]  # a base attribute: (collection, attribute name)




@dataclass(frozen=True, slots=True)
class ViewDiffSignature:
    """A view i-diff signature as §2.15 sees it.

    ``levels`` are the provenance attributes it names at each level, the view's root bag
    first; ``path`` the attribute path of the nested bag at each level below the root (so
    ``len(path) == len(levels) - 1``); ``kind`` the type of its i-diff at the deepest level;
    ``source`` the base-table signature it propagates.
    """

    kind: str
    levels: tuple[tuple[str, ...], ...]
    path: tuple[str, ...]
    source: str

    @property
    def target(self) -> int | None:
        """The level whose elements the i-diff targets: the deepest one naming an attribute
        (None if it names none: it applies to every element)."""
        named = [i for i, names in enumerate(self.levels) if names]
        return named[-1] if named else None

    def __str__(self) -> str:
        return f"{self.source} -> {format_levels(self.path, self.levels)} {self.kind}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "levels": [list(n) for n in self.levels], "path": list(self.path),
                "source": self.source}


def format_levels(path: tuple[str, ...], levels: tuple[tuple[str, ...], ...]) -> str:
    where = ".".join(path) if path else "root"
    return f"{where} " + " / ".join(f"#({', '.join(names)})" for names in levels)


# ----------------------------------------------------------------------------- the pass


def view_diffs(plan: O.Operator, provenance: ProvenanceResult,
               signatures: BaseSignatures) -> tuple[ViewDiffSignature, ...]:
    """The view i-diff signatures of ``plan`` (as built, the operators ``provenance.ids``
    annotates) for the base signatures ``signatures``, each once."""
    propagation = _Propagation(provenance.ids, signatures, condition_attributes(plan))
    return tuple(dict.fromkeys(v for d in propagation.run(plan, _Scope()) if (v := _view_diff(d)) is not None))


# ----------------------------------------------------------------------------- i-diffs in the plan


@dataclass(frozen=True, slots=True)
class _Step:
    """A nested collection on an i-diff's path: the term holding it (over the operator's
    variables for the first step, over the previous step's element ``@`` after), the
    provenance of its elements the i-diff names, and what changes in them."""

    term: Term
    ids: frozenset[str]
    changed: frozenset[Attr]


@dataclass(frozen=True, slots=True)
class _Diff:
    """An i-diff signature of an operator's output binding tuples, as §2.15 needs it."""

    kind: str  # its type at the deepest level it reaches
    ids: frozenset[str]  # the operator's IDs it names
    changed: frozenset[Attr]  # what an update of the binding tuples changes
    nested: tuple[_Step, ...] = ()
    context: tuple[frozenset[str], ...] = ()  # the IDs it names of each enclosing level, outermost first
    source: str = ""

    @property
    def top(self) -> str:
        """Its type at the binding-tuple level (an i-diff of nested data updates the tuple)."""
        return UPDATE if self.nested else self.kind


@dataclass(frozen=True, slots=True)
class _Scope:
    """Where a (nested) plan runs: its nesting depth, the level that binds each environment
    variable, the IDs of each enclosing level, and the updates of the environment."""

    levels: Mapping[str, int] = field(default_factory=dict)
    outer: tuple[frozenset[str], ...] = ()
    triggers: tuple[_Diff, ...] = ()

    @property
    def depth(self) -> int:
        return len(self.outer)


def _dedup(diffs: Iterable[_Diff]) -> list[_Diff]:
    return list(dict.fromkeys(diffs))


def _touches(changed: frozenset[Attr], attrs: frozenset[Attr]) -> bool:
    """Whether an update changing ``changed`` is conditional for a condition reading ``attrs``."""
    collections = {c for c, _ in attrs}
    return any(a in attrs or (a[1] == MEMBERSHIP and a[0] in collections) for a in changed)


def _membership(coll: Collection) -> frozenset[Attr]:
    table, path = coll
    out = {(coll, MEMBERSHIP)}
    if path:
        out.add(((table, path[:-1]), path[-1]))
    return frozenset(out)


class _Propagation:
    def __init__(self, ids: Mapping[O.Operator, Ids], signatures: BaseSignatures,
                 conditions: Mapping[O.Operator, frozenset[Attr]]):
        self._ids = ids
        self.signatures = signatures
        self.conditions = conditions

    # ------------------------------------------------------------------ IDs and their names

    def ids(self, op: O.Operator) -> Ids:
        return self._ids.get(op) or Ids()

    def names(self, op: O.Operator) -> frozenset[str]:
        return frozenset(self.ids(op).names())

    def by_terms(self, src: O.Operator, dst: O.Operator) -> dict[str, str]:
        """Input ID name -> output ID name, for operators that keep the terms of their input's
        key groups (renamed, merged by equalities, or extended with copies)."""
        out: dict[str, str] = {}
        for g in self.ids(src).groups:
            for h in self.ids(dst).groups:
                if any(t in h.terms for t in g.terms):
                    out[g.name] = h.name
                    break
        return out

    def by_position(self, src: O.Operator, dst: O.Operator, offset: int = 0) -> dict[str, str]:
        """Input ID name -> output ID name for operators that keep their input's groups in order."""
        dst_names = self.ids(dst).names()[offset:]
        return dict(zip(self.ids(src).names(), dst_names))

    def own(self, op: O.Operator, mapping: Mapping[str, str]) -> frozenset[str]:
        """The IDs an operator adds to those of its input."""
        return self.names(op) - set(mapping.values())

    @staticmethod
    def carry(d: _Diff, mapping: Mapping[str, str], **changes) -> _Diff:
        return replace(d, ids=frozenset(mapping[n] for n in d.ids if n in mapping), **changes)

    def created(self, d: _Diff, refs: frozenset[int], scope: _Scope) -> tuple[frozenset[str], ...]:
        """The context of an i-diff an operator filters or creates with a condition that reads
        variables of the enclosing levels ``refs``: those levels are named in full."""
        return tuple(scope.outer[j] if j in refs else c for j, c in enumerate(d.context))

    def refs(self, terms: Iterable[Term], bound: Iterable[str], scope: _Scope) -> frozenset[int]:
        """The enclosing levels whose variables ``terms`` read (correlation)."""
        levels, inner = scope.levels, set(bound)
        return frozenset(levels[v] for t in terms for v in t.variables() if v in levels and v not in inner)

    # ------------------------------------------------------------------ traversal

    def run(self, op: O.Operator, scope: _Scope) -> list[_Diff]:
        method = getattr(self, f"_{type(op).__name__}", None)
        if method is None:
            raise TypeError(f"no index-selection rule for {op.name}")
        return _dedup(method(op, scope))

    def _Ground(self, op: O.Ground, scope: _Scope) -> list[_Diff]:
        # updates of the environment trigger the nested plan (§2.13, E.4 / E.5): every binding
        # tuple of the environment they update, named by the outer IDs they name
        return [_Diff(t.kind, frozenset(), t.changed, t.nested, t.context + (t.ids,), t.source)
                for t in scope.triggers]

    def _ScanCollection(self, op: O.ScanCollection, scope: _Scope) -> list[_Diff]:
        ins = self.run(op.input, scope)
        m = self.by_terms(op.input, op)
        own = self.own(op, m)
        full = self.names(op)
        out = []
        for d in ins:
            if d.nested and d.nested[0].term == op.source:
                # E.1: the i-diffs of the scanned collection's elements become i-diffs of the
                # output binding tuples, named by the outer IDs and the elements' own
                step = d.nested[0]
                elements = self.element_names(step.ids, own)
                rest = tuple(replace(s, term=substitute(s.term, {ELEMENT: Var(op.var)})) if i == 0 else s
                             for i, s in enumerate(d.nested[1:]))
                outer_ids = self.carry(d, m).ids
                out.append(replace(d, ids=outer_ids | elements, changed=step.changed, nested=rest))
            elif d.top == INSERT:
                out.append(replace(d, ids=full))  # every element of an inserted tuple is scanned
            else:
                out.append(self.carry(d, m))
        if isinstance(op.source, TableRef):
            out.extend(self.base_diffs(op, own, full, scope))
        return out

    @staticmethod
    def element_names(names: frozenset[str], own: frozenset[str]) -> frozenset[str]:
        """The scan's own IDs for the element provenance ``names`` an i-diff gives (equal names,
        or qualified ones after name-conflict renaming); all of them when they cannot be
        related (e.g. positions ``AT``)."""
        found = set()
        for n in names:
            match = [o for o in own if o == n or o.rsplit(".", 1)[-1] == n]
            if not match:
                return own
            found.update(match)
        return frozenset(found)

    def base_diffs(self, op: O.ScanCollection, own: frozenset[str], full: frozenset[str],
                   scope: _Scope) -> list[_Diff]:
        """The base-table i-diff signatures (§2.5, §2.14.1) of the scanned table and of its
        nested collections the view iterates, as i-diffs of the scan's output."""
        table = op.source.name
        context = tuple(frozenset() for _ in range(scope.depth))
        out = []
        collections = {c.collection for c in self.signatures.collections}
        for c in self.signatures.collections:
            t, path = c.collection
            if t != table:
                continue
            updates = [names for names, _ in c.conditional_updates]
            if c.nonconditional_update is not None:
                updates.append(_updated_attributes(c.nonconditional_update, len(path)))
            name = ".".join((table,) + path)
            kinds = [(INSERT, _membership(c.collection), f"{name} insert"),
                     (DELETE, _membership(c.collection), f"{name} delete")]
            kinds += [(UPDATE, frozenset((c.collection, a) for a in names),
                       f"{name} update({', '.join(sorted(names))})") for names in updates]
            if not path:
                for kind, changed, source in kinds:
                    out.append(_Diff(kind, full if kind == INSERT else own, changed, (), context, source))
                continue
            # a nested collection: an update of the table's tuples whose diff reaches its
            # elements through the collections on its path (a step per collection)
            bounds = [i for i in range(1, len(path) + 1) if (table, path[:i]) in collections]
            for kind, changed, source in kinds:
                steps, start = [], 0
                for k, b in enumerate(bounds):
                    base = Var(op.var) if k == 0 else ELEMENT
                    term = base
                    for a in path[start:b]:
                        term = Field(term, a)
                    last = b == len(path)
                    key = self.signatures.of(table, path[:b]).key
                    step_changed = changed if last else frozenset({((table, path[:b]), path[b])})
                    steps.append(_Step(term, frozenset(key), step_changed))
                    start = b
                out.append(_Diff(kind, own, frozenset({((table, ()), path[0])}), tuple(steps), context, source))
        return out

    def _NavTuple(self, op: O.NavTuple, scope: _Scope) -> list[_Diff]:
        return self.aliased(op, scope, [(Field(op.base, op.field_name), Var(op.var))])

    def _Assign(self, op: O.Assign, scope: _Scope) -> list[_Diff]:
        return self.aliased(op, scope, [(op.term, Var(op.var))])

    def _ConstructTuple(self, op: O.ConstructTuple, scope: _Scope) -> list[_Diff]:
        return self.aliased(op, scope, [(t, Field(Var(op.var), n)) for n, t in op.fields])

    def _ConstructBag(self, op, scope: _Scope) -> list[_Diff]:
        return self.aliased(op, scope, [])

    _ConstructArray = _ConstructBag

    def aliased(self, op: O.Operator, scope: _Scope, aliases: list[tuple[Term, Term]]) -> list[_Diff]:
        """Operators that keep their input's i-diffs (E.2, E.10, Assign) and bind new names to
        values that may hold nested collections on an i-diff's path."""
        m = self.by_terms(op.inputs()[0], op)
        out = []
        for d in self.run(op.inputs()[0], scope):
            d = self.carry(d, m)
            out.append(d)
            if d.nested:
                for source, target in aliases:
                    rel = _relative_path(d.nested[0].term, source)
                    if rel is not None:
                        step = replace(d.nested[0], term=substitute(rel, {ELEMENT: target}))
                        out.append(replace(d, nested=(step,) + d.nested[1:]))
        return out

    def _FunctionCall(self, op: O.FunctionCall, scope: _Scope) -> list[_Diff]:
        m = self.by_terms(op.input, op)
        out = []
        for d in self.run(op.input, scope):
            d = self.carry(d, m)
            out.append(d)
            if d.nested and any(_relative_path(d.nested[0].term, a) is not None for a in op.args):
                # E.12-E.14: a change of the collection's elements updates the function's value
                # in the binding tuples the i-diff names
                out.append(replace(d, kind=UPDATE, changed=d.changed | d.nested[0].changed, nested=()))
        return out

    def _Select(self, op: O.Select, scope: _Scope) -> list[_Diff]:
        m = self.by_terms(op.input, op)
        refs = self.refs([op.condition], op.input.output_variables(), scope)
        return [e for d in self.run(op.input, scope)
                for e in self.conditioned(self.carry(d, m), op, refs, self.names(op), scope)]

    def conditioned(self, d: _Diff, op: O.Operator, refs: frozenset[int], full: frozenset[str],
                    scope: _Scope) -> list[_Diff]:
        """An i-diff through an operator with a condition (σ, C.3 / E.3; joins, C.7): an update
        of attributes it reads also makes data enter and leave (inserts and deletes named by
        the full provenance of the output); inserts are filtered by it."""
        if d.top == INSERT:
            return [replace(d, context=self.created(d, refs, scope))]
        if d.top == UPDATE and _touches(d.changed, self.conditions.get(op, frozenset())):
            context = self.created(d, refs, scope)
            return [d] + [replace(d, kind=k, ids=full, nested=(), context=context) for k in (INSERT, DELETE)]
        return [d]

    def _Project(self, op: O.Project, scope: _Scope) -> list[_Diff]:
        m = self.by_position(op.input, op)
        outputs = list(op.outputs)
        out = []
        for d in self.run(op.input, scope):
            d = self.carry(d, m)
            if not d.nested:
                out.append(d)
                continue
            for t in _through(d.nested[0].term, outputs):  # E.7: the collection must be projected
                out.append(replace(d, nested=(replace(d.nested[0], term=t),) + d.nested[1:]))
        return out

    def _join(self, op: O._Join, scope: _Scope) -> list[_Diff]:
        full = self.names(op)
        bound = op.left.output_variables() + op.right.output_variables()
        refs = self.refs([op.condition], bound, scope)
        out = []
        for side in (op.left, op.right):
            m = self.by_terms(side, op)
            for d in self.run(side, scope):
                d = self.carry(d, m)
                if d.top == INSERT:  # Δ⁺ ⋈ Input (C.1, C.7, E.8, E.9)
                    d = replace(d, ids=full)
                out.extend(self.conditioned(d, op, refs, full, scope))
        return out

    _InnerJoin = _join
    _LeftJoin = _join

    def _semi(self, op: O._Join, scope: _Scope) -> list[_Diff]:
        full = self.names(op)
        bound = op.left.output_variables() + op.right.output_variables()
        refs = self.refs([op.condition], bound, scope)
        m = self.by_terms(op.left, op)
        out = [e for d in self.run(op.left, scope)
               for e in self.conditioned(self.carry(d, m), op, refs, full, scope)]
        # the right input only decides which left tuples qualify (C.10, C.11)
        cond = self.conditions.get(op, frozenset())
        for d in self.run(op.right, scope):
            if d.top in (INSERT, DELETE) or _touches(d.changed, cond):
                context = self.created(d, refs, scope)
                out += [_Diff(k, full, d.changed, (), context, d.source) for k in (INSERT, DELETE)]
        return out

    _SemiJoin = _semi
    _AntiJoin = _semi

    def _UnionAll(self, op: O.UnionAll, scope: _Scope) -> list[_Diff]:
        # C.2: each branch's i-diffs get the branch attribute (the first ID)
        names = self.ids(op).names()
        branch = frozenset(names[:1])
        nl = len(self.ids(op.left).groups)
        out = []
        for side, offset in ((op.left, 1), (op.right, 1 + nl)):
            m = self.by_position(side, op, offset)
            for d in self.run(side, scope):
                d = self.carry(d, m)
                out.append(replace(d, ids=d.ids | branch))
        return out

    def _ApplyPlan(self, op: O.ApplyPlan, scope: _Scope) -> list[_Diff]:
        outer = self.run(op.input, scope)
        m = self.by_terms(op.input, op)
        out = [self.carry(d, m) for d in outer]
        # E.5: the nested plan's i-diffs become i-diffs of the elements of op.var
        for e in self.nested_plan(op.plan, op.input, outer, scope):
            names = frozenset(m[n] for n in e.context[-1] if n in m)
            step = _Step(Var(op.var), e.ids, e.changed)
            out.append(_Diff(e.kind, names, e.changed, (step,) + e.nested, e.context[:-1], e.source))
        return out

    def nested_plan(self, plan: O.Operator, outer_op: O.Operator, outer: list[_Diff],
                    scope: _Scope) -> list[_Diff]:
        levels = dict(scope.levels)
        levels.update({v: scope.depth for v in outer_op.output_variables()})
        inner = _Scope(levels, scope.outer + (self.names(outer_op),),
                       tuple(d for d in outer if d.top == UPDATE))
        return self.run(plan, inner)

    def _correlate(self, op: O._Correlate, scope: _Scope) -> list[_Diff]:
        outer = self.run(op.input, scope)
        m = self.by_terms(op.input, op)
        mp = self.by_terms(op.plan, op)
        full = self.names(op)
        out = [replace(self.carry(d, m), ids=full) if d.top == INSERT else self.carry(d, m) for d in outer]
        # E.4: the nested plan's i-diffs joined with the input tuples they depend on
        for e in self.nested_plan(op.plan, op.input, outer, scope):
            names = frozenset(m[n] for n in e.context[-1] if n in m)
            e = self.carry(e, mp)
            out.append(replace(e, ids=e.ids | names, context=e.context[:-1]))
        return out

    _InnerCorrelate = _correlate
    _LeftCorrelate = _correlate

    def _GroupBy(self, op: O.GroupBy, scope: _Scope) -> list[_Diff]:
        keys = self.names(op)
        in_ids = self.ids(op.input)
        full_in = frozenset(in_ids.names())
        implied = frozenset(g.name for g in in_ids.groups if any(t in g.terms for _, t in op.keys))
        keyed = all(any(t in g.terms for g in in_ids.groups) for _, t in op.keys)
        grouping = self.conditions.get(op, frozenset())
        out = []
        for d in self.run(op.input, scope):
            moved = d.top == UPDATE and _touches(d.changed, grouping)  # a grouping attribute changes
            named = d.top == INSERT or moved or full_in <= d.ids or (keyed and implied <= d.ids)
            # the groups' own i-diffs (aggregates, creation, deletion: C.4, C.6, C.8)
            kinds = ([UPDATE] if op.aggregates else []) + [k for k in (INSERT, DELETE) if d.top == k or moved]
            out += [_Diff(k, keys, d.changed, (), d.context, d.source) for k in kinds]
            if op.group_var is None:
                continue
            # E.11: i-diffs of the members of the GROUP AS bag, under their group when known
            group = keys if named else frozenset()
            if moved:
                members = [(k, full_in - implied, ()) for k in (INSERT, DELETE)]
            else:
                rest = self.member_path(d.nested, op.group_fields)
                if rest is None:
                    continue
                members = [(d.kind, d.ids - implied if named else d.ids, rest)]
            for kind, ids, rest in members:
                step = _Step(Var(op.group_var), ids, d.changed)
                out.append(_Diff(kind, group, d.changed, (step,) + rest, d.context, d.source))
        return out

    @staticmethod
    def member_path(nested: tuple[_Step, ...], fields: tuple[tuple[str, Term], ...]) -> tuple[_Step, ...] | None:
        """The nested path of a member's i-diff, relative to the member (a tuple of the group's
        fields); None if the collection is not kept in the members."""
        if not nested:
            return ()
        for name, t in fields:
            rel = _relative_path(nested[0].term, t)
            if rel is not None:
                return (replace(nested[0], term=substitute(rel, {ELEMENT: Field(ELEMENT, name)})),) + nested[1:]
        return None

    def _Distinct(self, op: O.Distinct, scope: _Scope) -> list[_Diff]:
        # γ over all its variables: every change may make a distinct tuple appear or disappear
        full = self.names(op)
        return [replace(d, kind=k, ids=full, nested=()) for d in self.run(op.input, scope) for k in (INSERT, DELETE)]

    def _OrderBy(self, op: O.OrderBy, scope: _Scope) -> list[_Diff]:
        # every change may move the positions of the tuples of its environment (and what LIMIT keeps)
        full = self.names(op)
        return [replace(d, kind=k, ids=full, nested=()) for d in self.run(op.input, scope) for k in (INSERT, DELETE)]

    def _ReturnBag(self, op: O.ReturnBag, scope: _Scope) -> list[_Diff]:
        """i-diffs of the returned elements: the element's provenance is its input's IDs
        (same names, ids.py's nested query); nested paths become paths below the element."""
        out = []
        for d in self.run(op.input, scope):
            if not d.nested:
                out.append(d)
                continue
            el = op.element
            targets = [(t, Field(ELEMENT, n)) for n, t in el.fields] if isinstance(el, TupleExpr) else [(el, ELEMENT)]
            for source, target in targets:
                rel = _relative_path(d.nested[0].term, source)
                if rel is not None:
                    out.append(replace(d, nested=(replace(d.nested[0], term=substitute(rel, {ELEMENT: target})),)
                                       + d.nested[1:]))
        return out


def _updated_attributes(signature: RootSignature, depth: int) -> frozenset[str]:
    """The attributes an update signature of a collection ``depth`` levels deep changes."""
    node = signature.element
    for _ in range(depth):
        node = node.diff.attributes[0][1].diff.element  # the holder's one attribute, a bag
    assert isinstance(node.diff, TupleSignature)
    return frozenset(n for n, _ in node.diff.attributes)


def _view_diff(d: _Diff) -> ViewDiffSignature | None:
    """A view i-diff from an i-diff of the view's returned elements."""
    if d.context:
        raise AssertionError("a top-level i-diff has no enclosing level")
    levels, path = [tuple(sorted(d.ids))], []
    for step in d.nested:
        names = _element_path(step.term)
        if names is None:
            return None
        path.append(".".join(names))
        levels.append(tuple(sorted(step.ids)))
    return ViewDiffSignature(d.kind, tuple(levels), tuple(path), d.source)


def _element_path(t: Term) -> tuple[str, ...] | None:
    """The attribute path of a term over the element ``@`` (None if it is not one)."""
    names: list[str] = []
    while isinstance(t, Field):
        names.append(t.name)
        t = t.base
    return tuple(reversed(names)) if t == ELEMENT and names else None
