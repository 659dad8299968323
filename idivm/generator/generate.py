"""The Δ-script generator (thesis §2.4): rule instantiation and composition.

Pass 1 (IDs of every intermediate result) is :func:`idivm.provenance.ids.infer_provenance`;
its retouched plan and per-operator IDs are the input here.  Pass 2 starts,
for every scan of a base table (one path per alias of a self-joined table),
from the base-table i-diffs (§2.5) and instantiates, operator by operator up
to the view, the first rule of :mod:`idivm.rules` whose guard holds.  Pass 3
composes the instantiated rules into algebra plans — each i-diff is a plan
over the base-table i-diffs and states — and ends in the statements of a
:class:`~idivm.generator.script.DeltaScript`.  Pass 4's simplifications are
built in: a restriction to the IDs an i-diff names is pushed down to the
deepest operator that binds them (a semijoin on the scan of the changed
table, so the post state is only read where it joins the change), and
updates that no operator looks at never read a state at all.

A replace i-diff carries a *restriction*: the operator of the view plan at
which the rows it names are selected (semijoin with its keys), plus the
union branches it came through.  The insert half of the i-diff is the view
plan evaluated on the post state with that restriction; the delete half names
the view rows by ID.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import reduce
from typing import Iterable, Mapping

from idivm.algebra import operators as O
from idivm.algebra.expressions import (
    NULL, TRUE, Call, Case, Const, Field, TableRef, Term, TupleExpr, Var, conjunction, field_paths,
)
from idivm.algebra.rewrite import substitute
from idivm.errors import InternalError, UnsupportedError
from idivm.generator.minimize import minimize_script
from idivm.generator.script import (
    ELEMENT, POST, PRE, PRE_FIELD, DeltaScript, ElementDiffs, Statement, TableDiffs, delta_keys, delta_updates,
)
from idivm.provenance.ids import BRANCH, HIDDEN, PROV_FIELD, Ids, ProvenanceResult
from idivm.rules import SIDES, Rule, rules_for
from idivm import types as T

STRATEGIES = ("id", "tuple")


@dataclass(frozen=True)
class Restriction:
    """Rows of ``at``'s output whose ``terms`` equal the variables ``key_vars`` of a
    binding tuple of ``keys``; ``branches``: UnionAll operators and the side taken."""

    at: O.Operator
    terms: tuple[Term, ...]
    keys: O.Operator
    key_vars: tuple[str, ...]
    branches: tuple[tuple[O.Operator, str], ...] = ()


@dataclass(frozen=True)
class _Navigation:
    """A nested update: the top-level ``container`` (an ApplyPlan, or a GroupBy with a GROUP AS
    variable) whose bag is view column ``column``; its elements are named by provenance fields
    ``match`` (field, term over the updated tuple), and the fields at the paths of ``sets``
    (path of field names inside the element, post-value term) change."""

    container: O.Operator
    column: str
    match: tuple[tuple[str, Term], ...]
    sets: tuple[tuple[tuple[str, ...], Term], ...]
    #: the view ID columns of the row holding the named elements, and the term (over the
    #: i-diff's plan) of each (empty: the rows are found by the elements' provenance)
    on: tuple[str, ...] = ()
    located: tuple[Term, ...] = ()


@dataclass(frozen=True)
class _Stored:
    """A view column holding γ's GROUP AS bag element by element (:meth:`_Generator._group_forms`):
    for each member of a group (a tuple of γ's input) for which ``condition`` holds (None: for
    every member), the element ``fields`` (terms over γ's input, the provenance field included):
    the bag itself (the members' own fields), or a subquery over it that filters and reshapes
    its members one by one."""

    column: str
    fields: tuple[tuple[str, Term], ...]
    condition: Term | None = None


@dataclass(frozen=True)
class _ElementReplace:
    """A nested replace: the elements of view column ``column`` whose provenance fields
    ``match`` hold the changed keys are replaced by ``rows`` (the view ID columns ``on`` of the
    row each post-state element belongs to, and the element in column :data:`ELEMENT`)."""

    match: tuple[str, ...]
    column: str
    on: tuple[str, ...]
    rows: O.Operator
    #: the key variable of the i-diff holding each ID column of ``on`` of the row that holds
    #: the named elements (empty: the rows are found by the elements' provenance)
    located: tuple[str, ...] = ()


@dataclass(frozen=True)
class Diff:
    """An i-diff of the output of ``op`` (see :mod:`idivm.rules` for the kinds).

    ``ids`` are terms over ``op``'s output naming the tuples.  replace: ``keys`` binds
    ``key_vars`` (aligned with ``ids``; ``keys`` None with no ids: every tuple), and
    ``restriction`` selects the post-state rows (None: all).  update/increment:
    ``plan`` binds the changed part of the tuples; ``changed`` pairs each changed term
    (over ``op``'s output) with its pre value (update) or its delta (increment),
    both over ``plan``'s variables."""

    kind: str
    op: O.Operator
    ids: tuple[Term, ...]
    origin: str
    keys: O.Operator | None = None
    key_vars: tuple[str, ...] = ()
    restriction: Restriction | None = None
    plan: O.Operator | None = None
    changed: tuple[tuple[Term, Term], ...] = ()
    trail: tuple[str, ...] = ()
    #: a replace naming the tuples of a right-side change of this LeftJoin by (left IDs, right
    #: IDs) pairs, the padded tuples by (left IDs, NULLs) (:meth:`_Generator.do_to_matching_left`)
    pairs_of: O.LeftJoin | None = None


def generate(view_name: str, prov: ProvenanceResult, table_keys: Mapping[str, tuple[str, ...]],
             table_types: Mapping[str, T.TupleType], strategy: str = "id") -> DeltaScript:
    """The Δ-script of a view (``strategy`` "id": ID-based, "tuple": classical t-diffs).

    Raises :class:`UnsupportedError` naming the first operator no rule covers."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown incremental strategy {strategy!r}")
    return minimize_script(_Generator(view_name, prov, table_keys, table_types, strategy).run(), table_types)


def check_supported(plan: O.Operator) -> None:
    """Raise :class:`UnsupportedError` for the first operator without i-diff rules."""
    for op in O.walk(plan):
        if op.name not in SIDES and not isinstance(op, O.Ground):
            raise UnsupportedError(f"no i-diff rules for {op.name} yet", op.span)


class _Generator:
    def __init__(self, view_name, prov: ProvenanceResult, table_keys, table_types, strategy):
        self.view_name = view_name
        self.plan: O.ReturnBag = prov.plan  # type: ignore[assignment]
        self.ids = prov.plan_ids
        self.table_keys = table_keys
        self.table_types = table_types
        self.strategy = strategy
        self.counter = 0
        self.parents: dict[int, tuple[O.Operator, str]] = {}
        #: root of a nested plan -> the operator (ApplyPlan, InnerCorrelate, ...) nesting it
        self.enclosing: dict[int, O.Operator] = {}
        for op in O.walk(self.plan):
            for side, child in zip(_sides(op), op.inputs()):
                self.parents[id(child)] = (op, side)
            for nested in op.nested():
                self.enclosing[id(nested)] = op
        self.top_level = {id(op) for op in O.walk(self.plan, into_nested=False)}
        #: replace statements that name view rows by a restriction: id(statement) -> its diff
        #: what :meth:`_once` found for an i-diff: (what, id(diff)) -> (the diff, the result)
        self._found: dict[tuple, tuple[Diff, object]] = {}
        self.restricted_replaces: dict[int, Diff] = {}
        #: γ with increments to make -> (γ, [(kind "members" or "update", i-diff, rule)])
        self._deferred: dict[int, tuple[O.GroupBy, list[tuple[str, Diff, Rule]]]] = {}
        check_supported(self.plan)
        self.element_columns = self._element_columns()

    # ------------------------------------------------------------------ driver

    def run(self) -> DeltaScript:
        scans = [op for op in O.walk(self.plan)
                 if isinstance(op, O.ScanCollection) and isinstance(op.source, TableRef)]
        tables = {}
        unnests = []  # (unnest, table variable, TableDiffs, ElementDiffs) of element i-diffs
        for scan in scans:
            t = scan.source.name
            if t not in tables:
                tables[t], found = self._table_diffs(t, [s for s in scans if s.source.name == t])
                unnests += [(u, var, tables[t], e) for u, var, e in found]
        statements: list[Statement] = []
        for scan in scans:
            td = tables[scan.source.name]
            for diff in self._base_diffs(scan, td):
                statements.extend(self.propagate(diff) if self._top_level(scan) else self.to_outer(diff))
        for unnest, var, td, elements in unnests:
            statements.extend(self.propagate(self._element_diff(unnest, var, td, elements)))
        statements.extend(self._emit_increments())
        statements = self.merge_replaces(statements)
        return DeltaScript(self.view_name, self.strategy, tuple(tables.values()), tuple(statements),
                           tuple(c for c, _ in self.element_columns.values()))

    def _table_diffs(self, table: str, scans: list[O.ScanCollection]
                     ) -> tuple[TableDiffs, list[tuple[O.ScanCollection, str, ElementDiffs]]]:
        """How ``table``'s changes become i-diffs, and the unnests whose element i-diffs its
        nested collections' changes start (see :meth:`_unnested`)."""
        key = tuple(self.table_keys[table])
        columns = [n for n, _ in self.table_types[table].fields] if table in self.table_types else []
        read, conditional, paths = _attributes_read(self.plan, {s.var for s in scans}, columns)
        nonkey = [c for c in columns if c not in key]
        elements = self._unnested(table, scans) if self.strategy == "id" else {}
        read_t = tuple(c for c in nonkey if c in read and c not in elements)
        cond_t = tuple(c for c in read_t if c in conditional or self.strategy == "tuple")
        unnests = [u for found in elements.values() for u in found]
        partial = tuple((a, tuple(sorted(paths[a]))) for a in read_t if paths.get(a))
        td = TableDiffs(table, key, read_t, cond_t, tuple(dict.fromkeys(e for _, _, e in unnests)), partial)
        return td, unnests

    def _unnested(self, table: str, scans: list[O.ScanCollection]
                  ) -> dict[str, list[tuple[O.ScanCollection, str, ElementDiffs]]]:
        """The nested collection attributes of ``table`` the view reads only by unnesting them
        in top-level FROM clauses (``FROM users u, u.elite AS y``), with those unnests: attribute
        -> (unnest, the table's variable, how the unnest names the elements).  A change of such
        a collection is the replace i-diff of the elements it inserts, deletes or changes
        (§2.14.2), not of every element of the row."""
        ttype = self.table_types.get(table)
        xs = {s.var for s in scans if self._top_level(s)}
        if ttype is None or len(xs) < len(scans):
            return {}
        out: dict[str, list] = {}
        others: set[str] = set()  # attributes read another way too
        for op in O.walk(self.plan):
            for t in op.terms():
                if isinstance(op, O.ScanCollection) and t is op.source and isinstance(t, Field) \
                        and isinstance(t.base, Var) and t.base.name in xs:
                    elements = self._element_identity(op, ttype.field(t.name))
                    if elements is None or not self._top_level(op):
                        others.add(t.name)
                    else:
                        out.setdefault(t.name, []).append((op, t.base.name, elements))
                    continue
                for _, path in field_paths(t, xs):
                    if not path:
                        return {}  # the whole tuple is read
                    others.add(path[0])
        return {a: found for a, found in out.items() if a not in others}

    def _element_identity(self, unnest: O.ScanCollection, ftype) -> ElementDiffs | None:
        """How ``unnest``'s IDs name the elements of the collection it scans (None: they do not)."""
        own = self._own_ids(unnest)
        if not isinstance(ftype, T.CollectionType) or own is None:
            return None
        terms = tuple(g.term for g in own)
        attribute = unnest.source.name
        if unnest.position:
            return ElementDiffs(attribute, "position") if terms == (Var(unnest.position),) else None
        if isinstance(ftype.element, T.ScalarType):
            # the value and its occurrence among equal values; Δ(T.a) names all occurrences
            return ElementDiffs(attribute, "value") if terms == (Var(unnest.var), Var(unnest.occurrence)) else None
        if own and all(g.term == Field(Var(unnest.var), g.name) for g in own):
            return ElementDiffs(attribute, "key", tuple(g.name for g in own))
        return None

    def _own_ids(self, unnest: O.ScanCollection) -> tuple | None:
        """The key groups an unnest adds to its input's IDs (its elements' identity)."""
        ids, above = self.ids.get(unnest), self.ids.get(unnest.input)
        if ids is None or above is None or not ids.known or not above.known:
            return None
        return ids.groups[len(above.groups):]

    def _element_diff(self, unnest: O.ScanCollection, var: str, td: TableDiffs, elements: ElementDiffs) -> Diff:
        """The replace i-diff of the elements of ``var``'s collection that ``Δ(T.attribute)``
        names (the table's key, the elements' identity: the first of the unnest's own IDs, all
        occurrences of a value) at ``unnest`` (§2.14.2)."""
        own = tuple(g.term for g in self._own_ids(unnest))[:len(elements.columns())]
        ids = tuple(Field(Var(var), k) for k in td.key) + own
        source = delta_keys(elements.source(td.table))
        keys, kv = self._key_scan(source, td.key + elements.columns())
        return Diff("replace", unnest, ids, f"{source} AS {unnest.var}", keys=keys, key_vars=kv,
                    restriction=Restriction(unnest, ids, keys, kv),
                    trail=(_rule(_base_rule("replace", "base_elements")),))

    def _key_scan(self, source: str, columns: tuple[str, ...]) -> tuple[O.Operator, tuple[str, ...]]:
        """The keys a base i-diff ``source`` names, bound to fresh variables (columns in order)."""
        kv = self.fresh_vars(len(columns))
        dk = self.fresh("dk")
        keys = O.Project(O.ScanCollection(O.Ground(), TableRef(source), dk),
                         tuple((v, Field(Var(dk), c)) for v, c in zip(kv, columns)))
        return keys, kv

    def _base_diffs(self, scan: O.ScanCollection, td: TableDiffs) -> list[Diff]:
        x = Var(scan.var)
        ids = tuple(Field(x, k) for k in td.key)
        keys, kv = self._key_scan(delta_keys(td.table), td.key)
        origin = f"{delta_keys(td.table)} AS {scan.var}"
        rule = _rule(_base_rule("replace"))
        out = [Diff("replace", scan, ids, origin, keys=keys, key_vars=kv,
                    restriction=Restriction(scan, ids, keys, kv), trail=(rule,))]
        updated = [a for a in td.read if a not in td.conditional]
        if updated:
            # the post tuple under the scan's variable, the pre values under their own
            du, pre = self.fresh("du"), f"{HIDDEN}pre_{scan.var}"
            columns = [n for n, _ in self.table_types[td.table].fields]
            post = TupleExpr(tuple((c, Field(Var(du), c)) for c in columns))
            plan = O.Project(O.ScanCollection(O.Ground(), TableRef(delta_updates(td.table)), du),
                             ((scan.var, post), (pre, Field(Var(du), PRE_FIELD))))
            changed = tuple((Field(x, a), Field(Var(pre), a)) for a in updated)
            rule = _rule(_base_rule("update"))
            out.append(Diff("update", scan, ids, f"{delta_updates(td.table)} AS {scan.var}",
                            plan=plan, changed=changed, trail=(rule,)))
        return out

    def _top_level(self, op: O.Operator) -> bool:
        return id(op) in self.top_level

    def propagate(self, diff: Diff) -> list[Statement]:
        """Instantiate rules from ``diff`` up to the view; the statements it ends in."""
        if diff.op is self.plan:
            raise InternalError("an i-diff of the view itself has no parent operator")
        parent, side = self.parents[id(diff.op)]
        for rule in rules_for(parent.name, side, diff.kind):
            if getattr(self, f"when_{rule.when}")(parent, side, diff):
                return getattr(self, f"do_{rule.action}")(parent, side, diff, rule)
        raise InternalError(f"no rule of {parent.name}[{side}] applies to a {diff.kind} i-diff")

    def next(self, parent: O.Operator, diff: Diff, rule: Rule, **changes) -> list[Statement]:
        """Continue from ``parent`` with ``diff`` transformed by ``rule``."""
        new = replace(diff, op=parent, trail=diff.trail + (_rule(rule),), **changes)
        if parent is self.plan:
            return []
        return self.propagate(new)

    # ------------------------------------------------------------------ guards

    def when_always(self, op, side, diff) -> bool:
        return True

    def when_touches_terms(self, op, side, diff) -> bool:
        return any(_mentions(t, diff.changed) for t in _condition_terms(op))

    def when_over_path(self, op: O.ScanCollection, side, diff) -> bool:
        return not isinstance(op.source, TableRef)

    def when_over_path_touched(self, op: O.ScanCollection, side, diff) -> bool:
        return self.when_over_path(op, side, diff) and self.when_touches_terms(op, side, diff)

    def when_computable(self, op, side, diff) -> bool:
        avail = set(diff.plan.output_variables())
        outs = op.outputs if isinstance(op, O.Project) else self._element_fields()
        return all(t.variables() <= avail for _, t in outs if _mentions(t, diff.changed)) and \
            all(i.variables() <= avail for i in diff.ids)

    def when_renames_only(self, op, side, diff) -> bool:
        outs = op.outputs if isinstance(op, O.Project) else self._element_fields()
        changed = {c for c, _ in diff.changed}
        return all(t in changed for _, t in outs if _mentions(t, diff.changed))

    def when_increments_apply(self, op: O.GroupBy, side, diff) -> bool:
        if op.group_var:  # the group holds whole tuples: the groups are recomputed
            return False
        if any(_mentions(t, diff.changed) for _, t in op.keys):
            return False
        touched = [a for _, a in op.aggregates if a.arg is not None and _mentions(a.arg, diff.changed)]
        return bool(touched) and all(a.function in ("sum", "count") and not a.distinct for a in touched)

    # ------------------------------------------------------------------ actions

    def do_base_replace(self, op, side, diff, rule):  # pragma: no cover - base i-diffs start at scans
        raise InternalError("base i-diffs are created, not propagated")

    do_base_update = do_base_elements = do_base_replace

    def do_absorb(self, op, side, diff, rule) -> list[Statement]:
        return []

    def do_pass(self, op, side, diff, rule) -> list[Statement]:
        if isinstance(op, O.Project):
            if diff.kind != "replace":
                return self.do_project_update(op, side, diff, rule)
            ids = self.through_project(op, diff.ids)
            if ids is None:  # a projection below DISTINCT drops the IDs: name rows by value
                return self.do_regroup(op, side, diff, rule)
            return self.next(op, diff, rule, ids=ids)
        return self.next(op, diff, rule)

    def do_project_update(self, op: O.Project, side, diff, rule) -> list[Statement]:
        ids = self.through_project(op, diff.ids)
        if ids is None:
            return self.do_to_replace(op, side, diff, rule)
        avail = set(diff.plan.output_variables())
        outputs = [(i.name, t) for i, t in zip(ids, diff.ids)]
        changed = []
        pre = dict(diff.changed)
        for v, t in op.outputs:
            if not _mentions(t, diff.changed):
                continue
            if diff.kind == "increment":
                dv = self.fresh("d")
                outputs.append((dv, pre[t]))
                changed.append((Var(v), Var(dv)))
            elif t.variables() <= avail:
                pv = self.fresh("pre")
                outputs.append((v, t))
                outputs.append((pv, substitute(t, pre)))
                changed.append((Var(v), Var(pv)))
        plan = O.Project(diff.plan, tuple(dict(outputs).items()))
        return self.next(op, diff, rule, ids=ids, plan=plan, changed=tuple(changed))

    def do_to_replace(self, op, side, diff, rule) -> list[Statement]:
        """An update/increment the operator cannot pass: the tuples it names are replaced."""
        kv = self.fresh_vars(len(diff.ids))
        keys = O.Project(diff.plan, tuple(zip(kv, diff.ids)))
        child = diff.op
        rep = Diff("replace", child, diff.ids, diff.origin, keys=keys, key_vars=kv,
                   restriction=self.restriction(child, diff.ids, keys, kv),
                   trail=diff.trail + (f"{rule.operator}[{rule.side}]: the {diff.kind} becomes delete+insert",))
        return self.propagate(rep)

    def do_union_branch(self, op: O.UnionAll, side, diff, rule) -> list[Statement]:
        branch_var, value = _branch_of(diff.op)
        ids = diff.ids + (Var(branch_var),)
        if diff.kind == "replace":
            kb = self.fresh("k")
            base = diff.keys if diff.keys is not None else O.Ground()  # None: every tuple of the branch
            keys = O.Project(base, tuple((v, Var(v)) for v in diff.key_vars) + ((kb, Const(value, T.INT)),))
            r = diff.restriction
            if r is not None:
                r = replace(r, branches=r.branches + ((op, side),))
            return self.next(op, diff, rule, ids=ids, keys=keys, key_vars=diff.key_vars + (kb,), restriction=r)
        plan = O.Project(diff.plan, tuple((v, Var(v)) for v in diff.plan.output_variables())
                         + ((branch_var, Const(value, T.INT)),))
        return self.next(op, diff, rule, ids=ids, plan=plan)

    def do_to_matching_left(self, op: O._Join, side, diff, rule) -> list[Statement]:
        """A right-side change names the left tuples it matches in the pre or the post state.

        Of a left join maintained by ID (Table C.9 completed), only the output tuples that
        change are named: those holding a changed right tuple, by (left IDs, right IDs) pairs
        -- the pairs a changed right tuple forms with the left tuples it matches before or
        after -- and the padded tuples of those left tuples, whose matches may appear or
        disappear, by (left IDs, NULLs) (NULL-safely).  The post state under those keys holds
        the new pairs, and the padded tuple of a left tuple left without matches.  The left
        tuples themselves stay: a GROUP AS over them (Table E.11) replaces the members named,
        not the groups (:meth:`_find_member_replace`)."""
        pairs = isinstance(op, O.LeftJoin) and self.strategy == "id" and bool(diff.ids) and diff.keys is not None
        left_ids, right_ids = self.canonical_ids(op.left), (diff.ids if pairs else ())
        kl, kr = self.fresh_vars(len(left_ids)), self.fresh_vars(len(right_ids))
        matches = O.Project(O.InnerJoin(op.left, self.restricted(op.right, diff.restriction), op.condition),
                            tuple(zip(kl, left_ids)) + tuple(zip(kr, right_ids)))

        def matched() -> O.Operator:  # new scan objects on every call: each read is restricted on its own
            return O.UnionAll(at_state(matches, PRE), at_state(matches, POST))

        keys = matched()
        if pairs:
            keys = O.UnionAll(keys, O.Project(matched(), tuple((v, Var(v)) for v in kl) + tuple((v, NULL) for v in kr)))
        ids, kv = left_ids + right_ids, kl + kr
        new = Diff("replace", op, ids, diff.origin, keys=keys, key_vars=kv,
                   restriction=self.restriction(op, ids, keys, kv), trail=diff.trail + (_rule(rule),),
                   pairs_of=op if pairs else None)
        return self.propagate(new) if op is not self.plan else []

    def to_outer(self, diff: Diff) -> list[Statement]:
        """A change inside a nested plan, as the replace i-diff of the top-level outer tuples
        whose nested results hold a changed tuple before or after (§2.13, recursive
        instantiation; :mod:`idivm.rules.nested`).

        The nested plan is followed up from the restriction of ``diff`` (the changed scan,
        semijoined with the changed keys) through the operators that keep tuples apart; at
        the nested plan's root the enclosing apply evaluates that probe for every outer
        tuple in its environment, and the outer tuples with a non-empty probe are the
        changed tuples of the next level, up to the top-level plan.

        Before that, an update is tried as a nested update (:meth:`_navigation`), and the
        replace as a nested replace of the elements it names (:meth:`_element_replace`)."""
        if diff.kind == "update":
            nav = self._navigation(None, diff)
            if nav is not None:
                apply = nav[0].container
                for rule in rules_for(apply.name, "nested", "update"):
                    if getattr(self, f"when_{rule.when}")(apply, "nested", diff):
                        return getattr(self, f"do_{rule.action}")(apply, "nested", diff, rule)
        kind = diff.kind
        if diff.kind != "replace":
            kv = self.fresh_vars(len(diff.ids))
            keys = O.Project(diff.plan, tuple(zip(kv, diff.ids)))
            diff = replace(diff, kind="replace", keys=keys, key_vars=kv,
                           restriction=Restriction(diff.op, diff.ids, keys, kv))
        apply = self._enclosing(diff.op)
        for rule in rules_for(apply.name, "nested", "replace"):
            if rule.action != "to_matching_outer" and getattr(self, f"when_{rule.when}")(apply, "nested", diff):
                if kind != "replace":
                    diff = replace(diff, trail=diff.trail + (f"{apply.name}[nested]: the {kind} becomes delete+insert",))
                return getattr(self, f"do_{rule.action}")(apply, "nested", diff, rule)
        r = diff.restriction
        if r is None:
            raise InternalError(f"a change inside a nested plan at {diff.op.name} names no tuples")
        cond = conjunction([_same(t, Var(k)) for t, k in zip(r.terms, r.key_vars)])
        node, probe = r.at, O.SemiJoin(r.at, r.keys, cond)
        trail = diff.trail
        while True:
            up = self.parents.get(id(node))
            while up is not None and _keeps_tuples(up[0]):
                probe = _with_input(up[0], up[1], probe)
                node = up[0]
                up = self.parents.get(id(node))
            while up is not None:  # above a γ, δ or ∪: every tuple of the nested input may change
                node = up[0]
                up = self.parents.get(id(node))
            outer = self.enclosing[id(node)]
            rule = next(r for r in rules_for(outer.name, "nested", kind) if r.action == "to_matching_outer")
            trail += (_rule(rule),)
            kind = "replace"
            m = self.fresh("m")
            hit = O.Select(O.ApplyPlan(outer.input, O.ReturnBag(probe, Const(True, T.BOOL)), m),
                           Call("exists", (Var(m),)))
            if id(outer) in self.top_level:
                break
            node, probe = outer, outer.with_inputs(hit)
        ids = self.canonical_ids(outer.input)
        kv = self.fresh_vars(len(ids))
        matches = O.Project(hit, tuple(zip(kv, ids)))
        keys = O.UnionAll(at_state(matches, PRE), at_state(matches, POST))
        new = Diff("replace", outer, ids, diff.origin, keys=keys, key_vars=kv,
                   restriction=self.restriction(outer.input, ids, keys, kv), trail=trail)
        return self.propagate(new)

    def when_navigable(self, op, side, diff) -> bool:
        return self.strategy == "id" and self._navigation(op if side == "input" else None, diff) is not None

    def do_nested_update(self, op: O.ApplyPlan | O.GroupBy, side, diff, rule) -> list[Statement]:
        """The nested update i-diff of :meth:`_navigation`: the elements of column ``path``
        whose provenance fields ``match`` take the i-diff's values get the post values at the
        paths ``set``, in the rows holding them: found by those elements (through a global
        index or by searching the bags), or named by ID when the i-diff holds the view ID
        columns ``on`` of each (the members of a group: its ID is the group key)."""
        out = []
        for nav in self._navigation(op if side == "input" else None, diff):
            if not nav.sets:  # the elements carry none of the updated attributes
                continue
            keys = tuple((f"{HIDDEN}key_{p}", t) for p, t in nav.match)
            rows = tuple(zip(nav.on, nav.located))
            news, taken = [], {c for c, _ in keys + rows}
            for path, t in nav.sets:
                column = f"{HIDDEN}new_{'_'.join(path)}"
                while column in taken:  # ("a_b",) and ("a", "b")
                    column += "_"
                taken.add(column)
                news.append((column, t))
            query = O.ReturnBag(diff.plan, TupleExpr(keys + rows + tuple(news)))
            out.append(Statement("nested_update", diff.origin, on=nav.on, query=query, path=nav.column,
                                 match=tuple((p, c) for (p, _), (c, _) in zip(nav.match, keys)),
                                 set=tuple((path, c) for (path, _), (c, _) in zip(nav.sets, news)),
                                 rules=diff.trail + (_rule(rule),)))
        return out

    def when_elements_navigable(self, op, side, diff) -> bool:
        return self.strategy == "id" and self._element_replace(diff) is not None

    def do_nested_replace(self, op: O.ApplyPlan | O.GroupBy, side, diff, rule) -> list[Statement]:
        """The nested replace i-diff of :meth:`_element_replace` (of :meth:`_member_replace`
        for γ): ``keys`` names the replaced elements by their provenance fields ``match`` (in
        every view row holding one, found by the global index of the bag or by searching the
        bags; or, when the keys also hold the view ID columns ``on``, in the row they name);
        ``rows`` gives the post-state elements with the view ID columns ``on`` of the row each
        belongs to."""
        found = (self._element_replace(diff),) if side == "nested" else self._member_replace(op, diff)
        out = []
        for e in found:
            columns = tuple(f"{HIDDEN}key_{p}" for p in e.match)
            keys = O.ReturnBag(diff.keys, TupleExpr(tuple((c, Var(k)) for c, k in zip(columns, diff.key_vars))
                                                    + tuple((c, Var(k)) for c, k in zip(e.on, e.located))))
            out.append(Statement("nested_replace", diff.origin, on=e.on, keys=keys, rows=e.rows, path=e.column,
                                 match=tuple(zip(e.match, columns)), rules=diff.trail + (_rule(rule),)))
        if isinstance(op, O.GroupBy) and op.aggregates:
            self._defer(op, "members", diff, rule)  # Tables E.12, E.13: :meth:`_member_increments`
        return out

    def when_members_navigable(self, op: O.GroupBy, side, diff) -> bool:
        return self.strategy == "id" and not op.aggregates and self._member_replace(op, diff) is not None

    def when_members_counted(self, op: O.GroupBy, side, diff) -> bool:
        return self.strategy == "id" and bool(op.aggregates) and self._member_replace(op, diff) is not None

    def _member_replace(self, op: O.GroupBy, diff: Diff) -> "tuple[_ElementReplace, ...] | None":
        return self._once(("members", id(op)), diff, lambda d: self._find_member_replace(op, d))

    def _find_member_replace(self, op: O.GroupBy, diff: Diff) -> "tuple[_ElementReplace, ...] | None":
        """Table E.11 for a replace i-diff of γ's input: a replace of group members, with the
        group keys that name each member's group.  It holds when no group appears or
        disappears: the groups are the preserved tuples of a left join (γ's keys are its left
        side's IDs, and between them only σ reading the left side), and the change is of the
        right side, named by pairs (:meth:`do_to_matching_left`).  γ is a top-level operator with a
        GROUP AS variable whose bag the view stores element by element (:meth:`_group_forms`: as
        it is, or through subqueries that filter and reshape its members one by one), and whose
        other aggregates are COUNTs and SUMs of values never NULL (:meth:`_member_increments`).
        In each such column the elements of the members named are deleted from their groups'
        bags and those of the post-state members under the same keys inserted (the padded
        member of a group left without matches included)."""
        join = diff.pairs_of
        if join is None or not op.group_var or not all(_member_incremental(a) for _, a in op.aggregates) \
                or id(op) not in self.top_level or diff.keys is None:
            return None
        left = set(join.left.output_variables())
        node = op.input
        while node is not join:
            if not isinstance(node, O.Select) or not node.condition.variables() <= left:
                return None
            node = node.input
        key_terms = dict((Var(k), t) for k, t in op.keys)
        group_ids = self.canonical_ids(op)
        n = len(self.canonical_ids(join.left))  # the pairs' first IDs are the left side's
        named = self._naming_groups(op, diff, n)
        if named is None or any(g not in named for g in group_ids):
            return None
        where = {g: (key_terms[g], named[g]) for g in group_ids}
        if len(op.keys) != n or len({k for _, k in where.values()}) != n:
            return None
        forms = self._group_forms(op, group_ids)
        if forms is None:
            return None
        stored, on = forms
        out = []
        for form in stored:
            match = self._provenance_fields(form.fields, op.input, diff.ids)
            if match is None:
                return None
            members = self.restricted(op.input, diff.restriction)
            if form.condition is not None:
                members = O.Select(members, form.condition)
            rows = O.ReturnBag(members, TupleExpr(tuple((c, where[g][0]) for c, g in zip(on, group_ids))
                                                  + ((ELEMENT, TupleExpr(form.fields)),)))
            out.append(_ElementReplace(match, form.column, on, at_state(rows, POST),
                                       tuple(where[g][1] for g in group_ids)))
        return tuple(out)

    def _naming_groups(self, op: O.GroupBy, diff: Diff, n: int | None = None) -> dict[Var, str] | None:
        """For each key of γ, the key variable of the replace i-diff ``diff`` of its input whose
        value is the key's (:meth:`_group_key_ids`, among the first ``n`` IDs); None if a key
        has none."""
        found = self._group_key_ids(op, diff.ids[:n])
        return None if found is None else {g: diff.key_vars[j] for g, j in found.items()}

    def _group_key_ids(self, op: O.GroupBy, ids: tuple[Term, ...]) -> dict[Var, int] | None:
        """For each key of γ, the position in ``ids`` (terms over γ's input) of the key term or
        of a term equal to it in γ's input; None if a key has none."""
        out = {}
        for k, t in op.keys:
            same = self.equivalents(op.input, t) + (t,)
            j = next((j for j, i in enumerate(ids) if i in same), None)
            if j is None:
                return None
            out[Var(k)] = j
        return out

    def _element_replace(self, diff: Diff) -> "_ElementReplace | None":
        """How a replace i-diff inside a nested plan reaches the elements of a stored bag
        without recomputing the outer tuples (:meth:`_find_element_replace`), or None."""
        return self._once("element replace", diff, self._find_element_replace)

    def _find_element_replace(self, diff: Diff) -> "_ElementReplace | None":
        """Tables E.3, E.4 on the nested side (§2.14.2).  From the changed operator up to the
        nested plan's root only σ, inner joins and π (:meth:`_nested_root`): each element comes
        from one changed tuple or none, and the element's provenance holds the changed tuple's
        IDs (partial provenance: ``#(review_id)`` under ``#()``); the apply's bag reaches one
        column of the view unchanged.  The post-state elements are the nested plan restricted
        to the changed tuples, evaluated for the outer tuples in the post state and unnested
        next to the outer IDs (one flat join when :func:`_flattened` can write it)."""
        r = diff.restriction
        found = None if r is None or diff.keys is None else self._nested_root(diff)
        if found is None:
            return None
        root, apply, node, ids, _ = found
        match = self._provenance_fields(root.element.fields, node, ids)
        outer = self.canonical_ids(apply.input)
        stored = self._stored_column(Var(apply.var), apply, outer)
        if match is None or stored is None:
            return None
        column, on = stored
        cond = conjunction([_same(t, Var(k)) for t, k in zip(r.terms, r.key_vars)])
        probe, at = O.SemiJoin(r.at, r.keys, cond), r.at
        while (up := self.parents[id(at)])[0] is not root:
            probe, at = _with_input(up[0], up[1], probe), up[0]
        flat = _flattened(probe, apply.input)
        if flat is not None:
            rows = O.ReturnBag(flat, TupleExpr(tuple(zip(on, outer)) + ((ELEMENT, root.element),)))
        else:
            m, e = self.fresh("m"), self.fresh("e")
            elements = O.ScanCollection(O.ApplyPlan(apply.input, O.ReturnBag(probe, root.element), m), Var(m), e)
            rows = O.ReturnBag(elements, TupleExpr(tuple(zip(on, outer)) + ((ELEMENT, Var(e)),)))
        return _ElementReplace(match, column, on, at_state(rows, POST))

    def _enclosing(self, op: O.Operator) -> O.Operator:
        """The operator (ApplyPlan, InnerCorrelate, ...) whose nested plan holds ``op``."""
        while id(op) in self.parents:
            op = self.parents[id(op)][0]
        return self.enclosing[id(op)]

    def _navigation(self, group: O.GroupBy | None, diff: Diff) -> "tuple[_Navigation, ...] | None":
        """How an update i-diff reaches the elements of the stored nested bags without changing
        anything else (§2.12.3, §2.13), one nested update per view column: for a change inside a
        nested plan (``group`` None), :meth:`_find_navigation`; for a change reaching a γ with a
        GROUP AS variable (``group``), :meth:`_group_navigation`.  None when it does not hold
        (the outer tuples, or the groups, are replaced instead)."""
        if group is None:
            return self._once("navigation", diff, self._find_navigation)
        return self._once(("group navigation", id(group)), diff, lambda d: self._group_navigation(group, d))

    def _once(self, what, diff: Diff, find):
        """``find(diff)``, computed once per i-diff (a rule's guard and its action both ask)."""
        key = (what, id(diff))
        hit = self._found.get(key)
        if hit is None or hit[0] is not diff:  # the ids of dropped diffs are reused
            hit = self._found[key] = (diff, find(diff))
        return hit[1]

    def _find_navigation(self, diff: Diff) -> "tuple[_Navigation, ...] | None":
        """From the changed scan inside a nested plan up to the nested plan's root only σ,
        joins and π whose predicates do not read the updated attributes; every element field
        that reads them is computable from the updated tuple, and so are the element's
        provenance fields that name it (the table's key); the nested plan is the plan of a
        top-level ApplyPlan whose variable reaches one column of the view unchanged."""
        def passes(op: O.Operator, env: dict[Term, Term]) -> bool:
            return not any(_mentions(substitute(t, env), diff.changed) for t in _condition_terms(op))

        found = self._nested_root(diff, passes)
        if found is None:
            return None
        root, apply, node, ids, env = found
        fields = tuple((n, t if n == PROV_FIELD else substitute(t, env)) for n, t in root.element.fields)
        stored = self._stored_column(Var(apply.var), apply)
        nav = None if stored is None else \
            self._element_navigation(apply, stored[0], node, fields, ids, diff.ids, diff)
        return None if nav is None else (nav,)

    def _nested_root(self, diff: Diff, passes=lambda op, env: True) -> tuple | None:
        """From the changed operator of ``diff`` up to the root of its nested plan through σ,
        inner joins (where ``passes(op, env)`` holds) and π only, the nested plan being the plan
        of a top-level ApplyPlan and ending in a tuple: (its ReturnBag, the ApplyPlan, the
        operator below the ReturnBag, the changed tuple's IDs there, the variables there as
        terms over the changed operator's); None otherwise."""
        env: dict[Term, Term] = {}
        ids, node = diff.ids, diff.op
        while True:
            up = self.parents.get(id(node))
            if up is None:
                return None
            op = up[0]
            if isinstance(op, O.ReturnBag):
                break
            if isinstance(op, (O.Select, O.InnerJoin)):
                if not passes(op, env):
                    return None
            elif isinstance(op, O.Project):
                env = {Var(v): substitute(t, env) for v, t in op.outputs}
                ids = self.through_project(op, ids)
                if ids is None:
                    return None
            else:
                return None
            node = op
        apply = self.enclosing.get(id(op))
        if not isinstance(apply, O.ApplyPlan) or id(apply) not in self.top_level \
                or not isinstance(op.element, TupleExpr):
            return None
        return op, apply, node, ids, env

    def _provenance_fields(self, fields: tuple[tuple[str, Term], ...], node: O.Operator,
                           ids: tuple[Term, ...]) -> tuple[str, ...] | None:
        """The provenance field of the element ``fields`` holding each ID of ``ids`` (terms over
        ``node``'s output), or None when one has none."""
        prov = dict(fields).get(PROV_FIELD)
        if not isinstance(prov, TupleExpr):
            return None
        out = []
        for i in ids:
            same = self.equivalents(node, i) + (i,)
            out += [p for p, pt in prov.fields if pt in same][:1]
        return tuple(out) if len(out) == len(ids) else None

    def _group_navigation(self, op: O.GroupBy, diff: Diff) -> "tuple[_Navigation, ...] | None":
        """Table E.11 for an update the group members only carry: the update i-diff of γ's
        input becomes the nested update of the group bag, named by the members' provenance
        (partial: ``#(user_id)`` under the wildcard ``#()`` when the update does not hold the
        grouping attributes, Example 2.13.1), in every column storing the bag element by element
        (:meth:`_group_forms`).  Holds when γ is a top-level operator with a GROUP AS variable
        whose bag the view stores so, and no grouping key, no aggregate and no condition of such
        a column reads the updated attributes (the predicates and join conditions below were
        checked by the rules that passed the update up to γ)."""
        if not op.group_var or id(op) not in self.top_level:
            return None
        if any(_mentions(t, diff.changed) for _, t in op.keys) or \
                any(a.arg is not None and _mentions(a.arg, diff.changed) for _, a in op.aggregates):
            return None
        forms = self._group_forms(op)
        if forms is None or any(f.condition is not None and _mentions(_null_tests_dropped(f.condition), diff.changed)
                                for f in forms[0]):
            return None
        out = []
        for form in forms[0]:
            nav = self._element_navigation(op, form.column, op.input, form.fields, diff.ids, diff.ids, diff)
            if nav is None:
                return None
            if nav.sets:  # the elements carry none of the updated attributes otherwise
                out.append(self._in_named_groups(op, diff, nav))
        return tuple(out)

    def _in_named_groups(self, op: O.GroupBy, diff: Diff, nav: "_Navigation") -> "_Navigation":
        """``nav`` in the rows named by ID when the update i-diff holds every key of γ (one of
        its IDs is the key term, or a term equal to it in γ's input): an update never changes
        its IDs, so each member it names is in the group of those keys, whose view row has
        them as its IDs (``update businesses`` in ``GROUP BY business_id``).  Otherwise
        ``nav`` as it is: the rows are found by the members' provenance."""
        group_ids = self.canonical_ids(op)
        found = self._group_key_ids(op, diff.ids)
        if not group_ids or found is None or any(g not in found for g in group_ids):
            return nav
        forms = self._group_forms(op, group_ids)
        if forms is None:
            return nav
        return replace(nav, on=forms[1], located=tuple(diff.ids[found[g]] for g in group_ids))

    def _element_navigation(self, container: O.Operator, column: str, node: O.Operator,
                            fields: tuple[tuple[str, Term], ...], ids: tuple[Term, ...],
                            values: tuple[Term, ...], diff: Diff) -> "_Navigation | None":
        """The nested update of the bag of ``container`` stored in view column ``column``, whose elements are the tuples
        ``fields`` (terms over the i-diff's variables, but the provenance field's over ``node``'s
        output): each ID of ``ids`` (over ``node``'s output) is matched by the provenance field
        holding it, with the value of the term of ``values`` (over the i-diff's plan) it
        corresponds to; the sets are the element fields reading the updated attributes
        (:func:`_element_sets`)."""
        avail = set(diff.plan.output_variables())
        names = self._provenance_fields(fields, node, ids)
        if names is None or len(names) != len(diff.ids) or not all(v.variables() <= avail for v in values):
            return None
        match = tuple(zip(names, values))
        sets = _element_sets(tuple((n, t) for n, t in fields if n != PROV_FIELD), diff.changed, avail)
        return None if sets is None else _Navigation(container, column, match, sets)

    def _group_forms(self, op: O.GroupBy, ids: tuple[Term, ...] = ()
                     ) -> "tuple[tuple[_Stored, ...], tuple[str, ...]] | None":
        """The view columns holding the GROUP AS bag of γ ``op`` element by element, and the
        view's ID columns holding ``ids`` (terms over γ's output); None if the view reads the bag
        otherwise, or stores it nowhere.  From γ up to the view only σ that do not read the bag,
        renaming π, and applies of subqueries that read it through :func:`_element_wise`; each
        view column that is the bag or such a subquery's value is one form."""
        forms: dict[str, tuple[tuple[tuple[str, Term], ...], Term | None]] = {
            op.group_var: (op.group_fields, None)}
        outer = {Var(k): t for k, t in op.keys}  # γ's keys as terms over its input
        node = op
        while True:
            parent, side = self.parents[id(node)]
            if parent is self.plan:
                out = []
                for name, t in parent.element.fields:
                    if isinstance(t, Var) and t.name in forms:
                        out.append(_Stored(name, *forms[t.name]))
                    elif t.variables() & forms.keys():
                        return None
                return (tuple(out), tuple(self.view_column(node, t) for t in ids)) if out else None
            if isinstance(parent, O.Select):
                if parent.condition.variables() & forms.keys():
                    return None
            elif isinstance(parent, O.ApplyPlan) and side == "input":
                if O.free_variables(parent.plan) & forms.keys():
                    form = _element_wise(parent.plan, forms, outer, set(op.input.output_variables()))
                    if form is None:
                        return None
                    forms[parent.var] = form
            elif isinstance(parent, O.Project):
                renamed = {}
                for v, t in parent.outputs:
                    if isinstance(t, Var) and t.name in forms:
                        renamed[v] = forms[t.name]
                    elif t.variables() & forms.keys():
                        return None
                forms = renamed
                outer = {Var(v): outer[t] for v, t in parent.outputs if t in outer}
                ids = self.through_project(parent, ids)
                if ids is None:
                    return None
            else:
                return None
            node = parent

    def _stored_column(self, var: Var, node: O.Operator, ids: tuple[Term, ...] = ()
                       ) -> tuple[str, tuple[str, ...]] | None:
        """The view column holding the bag of variable ``var`` bound by ``node`` as it is
        (through σ and renaming π that do not read it otherwise), and the view's ID columns
        holding ``ids`` (terms over ``node``'s output); None if there is no such column."""
        while True:
            op, _ = self.parents[id(node)]
            if op is self.plan:
                named = [n for n, t in op.element.fields if t == var]
                others = [t for _, t in op.element.fields if t != var and var.variables() & t.variables()]
                if len(named) != 1 or others:
                    return None
                return named[0], tuple(self.view_column(node, t) for t in ids)
            if isinstance(op, O.Select):
                if var.variables() & op.condition.variables():
                    return None
            elif isinstance(op, O.Project):
                named = [v for v, t in op.outputs if t == var]
                if len(named) != 1 or any(t != var and var.variables() & t.variables() for _, t in op.outputs):
                    return None
                var = Var(named[0])
                ids = self.through_project(op, ids)
                if ids is None:
                    return None
            else:
                return None
            node = op

    def do_regroup(self, op: O.GroupBy | O.Distinct, side, diff, rule) -> list[Statement]:
        """Recompute the groups (distinct values) the change touches before or after."""
        if diff.kind != "replace":
            return self.do_to_replace(op, side, diff, rule)
        if isinstance(op, O.GroupBy):
            pairs = tuple((Var(k), t) for k, t in op.keys)
        elif isinstance(op, O.Project):
            pairs = tuple((Var(v), t) for v, t in op.outputs)
        else:
            pairs = tuple((Var(v), Var(v)) for v in op.output_variables())
        trail = diff.trail + (_rule(rule),)
        if not pairs:  # a global aggregate: its single tuple is recomputed
            return self.next(op, diff, rule, ids=(), keys=None, key_vars=(), restriction=None)
        kv = self.fresh_vars(len(pairs))
        named = self._naming_groups(op, diff) if isinstance(op, O.GroupBy) and diff.keys is not None else None
        if named is not None:
            # the i-diff's keys give the groups' keys: a tuple it names belongs, before and
            # after, to the group of its own key values (a key naming no tuple names a group
            # whose recomputation finds it as it is, or absent); no state is read for them
            keys = O.Project(diff.keys, tuple((v, Var(named[g])) for v, (g, _) in zip(kv, pairs)))
            trail = diff.trail + (_rule(rule) + ": the groups are named by the i-diff's own keys",)
        else:
            touched = O.Project(self.restricted(op.input, diff.restriction),
                                tuple((v, t) for v, (_, t) in zip(kv, pairs)))
            keys = O.UnionAll(at_state(touched, PRE), at_state(touched, POST))
        at, terms = (op, tuple(o for o, _ in pairs)) if isinstance(op, O.Project) else \
            (op.input, tuple(t for _, t in pairs))
        new = Diff("replace", op, tuple(o for o, _ in pairs), diff.origin, keys=keys, key_vars=kv,
                   restriction=self.restriction(at, terms, keys, kv), trail=trail)
        return self.propagate(new) if op is not self.plan else []

    def do_aggregate_increment(self, op: O.GroupBy, side, diff, rule) -> list[Statement]:
        """SUM/COUNT increments per group (Tables C.8, C.10), made once every i-diff of the
        run has reached γ (:meth:`_emit_increments`)."""
        self._defer(op, "update", diff, rule)
        return []

    # ------------------------------------------------------------------ increments

    def _defer(self, op: O.GroupBy, kind: str, diff: Diff, rule: Rule) -> None:
        self._deferred.setdefault(id(op), (op, []))[1].append((kind, diff, rule))

    def _emit_increments(self) -> list[Statement]:
        """The increments of every γ that i-diffs reached with additive changes, γ by γ from
        the deepest up (an increment of one γ may reach another above it).

        Replaces may name one tuple several times in a run (each deletes what it names and
        writes its post state), but increments add up: two i-diffs of one run that name the
        same tuple of γ's input -- the two inputs of a join both changed, or one table read
        under two variables -- must not both add its change.  Δ(R ⋈ S) is ΔR ⋈ S_pre +
        R_post ⋈ ΔS, not ΔR ⋈ S_post + R_post ⋈ ΔS, which counts ΔR ⋈ ΔS twice (DBToaster
        §3.4).  So where the increments of several i-diffs could meet on one aggregate, they
        are made by one statement over the tuples any of them names, each once
        (:meth:`_named_once`): its post contribution minus its pre contribution."""
        out = []
        while self._deferred:
            key = max(self._deferred, key=lambda k: self._depth(self._deferred[k][0]))
            op, entries = self._deferred.pop(key)
            members = [(d, r) for kind, d, r in entries if kind == "members"]
            updates = [(d, r) for kind, d, r in entries if kind == "update"]
            if members:
                out += self._member_increments(op, members)
            if not updates:
                continue
            shared = any(sum(_mentions(a.arg, d.changed) for d, _ in updates) > 1
                         for _, a in op.aggregates if a.arg is not None)
            if not shared:  # each aggregate reads the changes of one i-diff at most
                for d, r in updates:
                    out += self._update_increment(op, d, r)
            elif self._known_ids(op.input) is None:
                for d, r in updates:
                    out += self.do_to_replace(op, "input", d, r)
            else:
                out += self._joint_update_increment(op, updates)
        return out

    def _depth(self, op: O.Operator) -> int:
        n = 0
        while (up := self.parents.get(id(op))) is not None or id(op) in self.enclosing:
            op = up[0] if up is not None else self.enclosing[id(op)]
            n += 1
        return n

    def _known_ids(self, op: O.Operator) -> tuple[Term, ...] | None:
        ids = self.ids.get(op)
        return tuple(g.term for g in ids.groups) if ids is not None and ids.known else None

    def _named_once(self, op: O.GroupBy, restrictions: list[Restriction], state: str,
                    columns: tuple[tuple[str, Term], ...]) -> O.Operator:
        """The tuples of γ's input at ``state`` that any of ``restrictions`` names, as
        ``columns``; a tuple several restrictions name is there once (distinct by its IDs)."""
        if len(restrictions) == 1:
            return O.Project(at_state(self.restricted(op.input, restrictions[0]), state), columns)
        ids = self.canonical_ids(op.input)
        iv = tuple(zip(self.fresh_vars(len(ids)), ids))
        named = O.Distinct(reduce(O.UnionAll, [
            O.Project(at_state(self.restricted(op.input, r), state), iv + columns) for r in restrictions]))
        return O.Project(named, tuple((v, Var(v)) for v, _ in columns))

    def _increment_of(self, op: O.GroupBy, named, aggregates: list[tuple[str, O.Aggregate]],
                      nullable: list[Term]) -> tuple[O.Operator, tuple[tuple[Term, Term], ...], str | None]:
        """Per group, the sum of the post minus the pre contributions of the tuples ``named(state,
        columns)`` gives to each of ``aggregates`` (:func:`_contribution`), and, if ``nullable``,
        the number of those tuples where one of its terms is NULL before or after (a flag
        column): (plan, (aggregate, its increment) pairs, flag column or None)."""
        kv, cv, dv = (self.fresh_vars(len(xs)) for xs in (op.keys, aggregates, aggregates))
        flag = self.fresh("n") if nullable else None

        def contributions(state: str, sign: int) -> O.Operator:
            columns = tuple(zip(kv, (t for _, t in op.keys))) + tuple(zip(cv, (_contribution(a) for _, a in aggregates)))
            if flag is not None:
                null = Call("or", tuple(_is_null(t) for t in nullable)) if len(nullable) > 1 else _is_null(nullable[0])
                columns += ((flag, _indicator(null)),)
            rows = named(state, columns)
            signed = tuple((v, Var(v) if sign > 0 else Call("neg", (Var(v),))) for v in cv)
            return O.Project(rows, tuple((v, Var(v)) for v in kv) + signed
                             + (((flag, Var(flag)),) if flag is not None else ()))

        sums = tuple((d, O.Aggregate("sum", Var(c))) for d, c in zip(dv, cv))
        if flag is not None:
            sums += ((flag, O.Aggregate("sum", Var(flag))),)
        grouped = O.GroupBy(O.UnionAll(contributions(POST, 1), contributions(PRE, -1)),
                            tuple((k, Var(v)) for (k, _), v in zip(op.keys, kv)), sums)
        return grouped, tuple((Var(a), Var(d)) for (a, _), d in zip(aggregates, dv)), flag

    def _combined(self, diffs: list[Diff]) -> Diff:
        """The first of ``diffs``, standing for all of them in the statements they make together."""
        if len(diffs) == 1:
            return diffs[0]
        origin, trail = _together([(d.origin, d.trail) for d in diffs])
        return replace(diffs[0], origin=origin, trail=trail)

    def _member_increments(self, op: O.GroupBy, members: list[tuple[Diff, Rule]]) -> list[Statement]:
        """Tables E.12 (SUM) and E.13 (COUNT) composed with the member replaces of γ's group
        bag (:meth:`_find_member_replace`): each aggregate of a group the replaces name
        changes by what the named members contribute in the post state minus what they
        contributed in the pre state (a COUNT's member contributes 1 when its argument is not
        NULL, a SUM's its value), read restricted to the replaces' keys in both states, each
        member once however many replaces name it.  The groups stay (no group appears or
        disappears), so the sums are increments of their rows."""
        diffs = [d for d, _ in members]
        restrictions = [d.restriction for d in diffs]
        grouped, changed, _ = self._increment_of(
            op, lambda state, columns: self._named_once(op, restrictions, state, columns), list(op.aggregates), [])
        return self.next(op, self._combined(diffs), members[0][1], kind="increment",
                         ids=tuple(Var(k) for k, _ in op.keys), plan=grouped, changed=changed, keys=None,
                         key_vars=(), restriction=None, pairs_of=None)

    def _joint_update_increment(self, op: O.GroupBy, updates: list[tuple[Diff, Rule]]) -> list[Statement]:
        """Tables C.8 and C.10 for several update i-diffs whose changes one aggregate reads
        (``SUM(e.salary * m.salary)`` with ``salary`` updated under both variables): the
        tuples of γ's input any of them names, each once, contribute their post minus their
        pre value.  An update changes no group's tuples (a change that does replaces the
        group), so the same tuples are read before and after.  Groups where a SUM's argument
        is NULL before or after are recomputed instead."""
        diffs = [d for d, _ in updates]
        touched = [(v, a) for v, a in op.aggregates
                   if a.arg is not None and any(_mentions(a.arg, d.changed) for d in diffs)]
        nullable = [a.arg for _, a in touched if a.function == "sum" and not _never_null(a.arg)]
        restrictions = []
        for d in diffs:
            kv = self.fresh_vars(len(d.ids))
            keys = O.Project(d.plan, tuple(zip(kv, d.ids)))
            restrictions.append(self.restriction(op.input, d.ids, keys, kv))
        grouped, changed, flag = self._increment_of(
            op, lambda state, columns: self._named_once(op, restrictions, state, columns), touched, nullable)
        return self._increments_or_recompute(op, self._combined(diffs), updates[0][1], grouped, changed, flag,
                                             recompute=flag is not None)

    def _increments_or_recompute(self, op: O.GroupBy, diff: Diff, rule: Rule, grouped: O.Operator,
                                 changed, flag: str | None, recompute: bool) -> list[Statement]:
        """The increments of ``grouped``'s groups whose ``flag`` is 0; the others are replaced
        (if ``recompute``: a flag may count nothing)."""
        group_ids = tuple(Var(k) for k, _ in op.keys)
        exact = grouped if flag is None else O.Select(grouped, Call("eq", (Var(flag), Const(0, T.INT))))
        out = self.next(op, diff, rule, kind="increment", ids=group_ids, plan=exact, changed=tuple(changed),
                        keys=None, key_vars=(), restriction=None, pairs_of=None)
        if recompute:
            flagged = O.Select(grouped, Call("gt", (Var(flag), Const(0, T.INT))))
            gk = self.fresh_vars(len(op.keys))
            keys = O.Project(flagged, tuple((g, Var(k)) for g, (k, _) in zip(gk, op.keys)))
            rep = Diff("replace", op, group_ids, diff.origin, keys=keys, key_vars=gk,
                       restriction=self.restriction(op.input, tuple(t for _, t in op.keys), keys, gk),
                       trail=diff.trail + (_rule(rule) + ": groups with NULL values are recomputed",))
            out += self.propagate(rep) if op is not self.plan else []
        return out

    def _update_increment(self, op: O.GroupBy, diff: Diff, rule: Rule) -> list[Statement]:
        """Tables C.8 (SUM) and C.10 (COUNT) for one update i-diff: each tuple of γ's input it
        names, read in the post state, adds its post minus its pre value, the pre value the
        post term with the i-diff's pre values put in (no state is read for it); groups where
        a pre or post value of a SUM is NULL are recomputed instead (not checked for a SUM
        whose argument is never NULL)."""
        kv = self.fresh_vars(len(diff.ids))
        pre = dict(diff.changed)
        pv = {t: self.fresh("p") for t in pre}
        delta = O.Project(diff.plan, tuple(zip(kv, diff.ids)) + tuple((pv[t], p) for t, p in pre.items()))
        restriction = self.restriction(op.input, diff.ids, delta, kv)
        post_input = at_state(self.restricted(op.input, restriction), POST)
        joined = O.InnerJoin(post_input, delta, conjunction([_same(i, Var(k)) for i, k in zip(diff.ids, kv)]))
        to_pre = {t: Var(pv[t]) for t in pre}
        aggs, changed = [], []
        nulls = []
        for v, a in op.aggregates:
            if a.arg is None or not _mentions(a.arg, diff.changed):
                continue
            post_arg, pre_arg = a.arg, substitute(a.arg, to_pre)
            dv = self.fresh("d")
            if a.function == "sum":
                d = Call("sub", (post_arg, pre_arg))
                if not _never_null(a.arg):
                    nulls.append(Call("or", (_is_null(post_arg), _is_null(pre_arg))))
            else:  # count
                d = Call("sub", (_counted(post_arg), _counted(pre_arg)))
            aggs.append((dv, O.Aggregate("sum", d)))
            changed.append((Var(v), Var(dv)))
        flag = self.fresh("n")
        null_test = Call("or", tuple(nulls)) if len(nulls) > 1 else (nulls[0] if nulls else Const(False, T.BOOL))
        aggs.append((flag, O.Aggregate("sum", _indicator(null_test))))
        grouped = O.GroupBy(joined, op.keys, tuple(aggs))
        return self._increments_or_recompute(op, diff, rule, grouped, changed, flag, recompute=bool(nulls))

    def do_to_view(self, op: O.ReturnBag, side, diff, rule) -> list[Statement]:
        trail = diff.trail + (_rule(rule),)
        on = tuple(self.view_column(diff.op, t) for t in diff.ids)
        if diff.kind == "replace":
            rows = self.restricted(self.plan, diff.restriction)
            pre_rows, rows = at_state(rows, PRE), at_state(rows, POST)
            keys = None
            if diff.keys is not None:
                cols = dict(zip(on, diff.key_vars))
                on = tuple(cols)
                keys = O.ReturnBag(diff.keys, TupleExpr(tuple((c, Var(v)) for c, v in cols.items())))
            if self.strategy == "tuple":
                return [Statement("replace", diff.origin, on=on, rows=rows, pre_rows=pre_rows, rules=trail)]
            out = Statement("replace", diff.origin, on=on, keys=keys, rows=rows, rules=trail)
            if keys is not None and diff.restriction is not None:
                self.restricted_replaces[id(out)] = replace(diff, trail=trail)
            return [out]
        changed = dict(diff.changed)
        fields = list(dict(zip(on, diff.ids)).items())
        on = tuple(dict.fromkeys(on))
        sets = []
        for name, t in self._element_fields():
            if not _mentions(t, diff.changed):
                continue
            if diff.kind == "increment":
                fields.append((f"{HIDDEN}delta_{name}", changed[t]))
            else:
                fields.append((f"{HIDDEN}new_{name}", t))
            sets.append((name, fields[-1][0]))
        if not sets:
            return []
        query = O.ReturnBag(diff.plan, TupleExpr(tuple(fields)))
        return [Statement(diff.kind, diff.origin, on=on, query=query, set=tuple(sets), rules=trail)]

    def merge_replaces(self, statements: list[Statement]) -> list[Statement]:
        """Replace statements that restrict the view plan at the same operator, on the same
        terms and union branches, and name the view rows by the same columns, become one: its
        keys are the union of theirs, so the view plan is evaluated once for all of them (a
        nested view has one such restriction point, its outer tuples, for changes of every
        table).  Equivalent to the statements apart: each deletes the rows its keys name and
        inserts their post state."""
        groups: dict[tuple, list[Statement]] = {}
        for s in statements:
            d = self.restricted_replaces.get(id(s))
            if d is not None:
                r = d.restriction
                group = (s.on, id(r.at), r.terms, tuple((id(u), side) for u, side in r.branches))
                groups.setdefault(group, []).append(s)
        out = []
        for s in statements:
            d = self.restricted_replaces.get(id(s))
            if d is None:
                out.append(s)
                continue
            r = d.restriction
            members = groups.pop((s.on, id(r.at), r.terms, tuple((id(u), side) for u, side in r.branches)), None)
            if members is None:  # merged into an earlier statement
                continue
            if len(members) == 1:
                out.append(s)
                continue
            diffs = [self.restricted_replaces[id(m)] for m in members]
            rv = self.fresh_vars(len(r.terms))
            restricted = _union_renamed([(d.restriction.keys, d.restriction.key_vars) for d in diffs], rv)
            if all(d.keys is d.restriction.keys and d.key_vars == d.restriction.key_vars for d in diffs):
                keys, kv = restricted, rv  # one key set: the executor computes it once
            else:
                kv = self.fresh_vars(len(s.on))
                keys = _union_renamed([(d.keys, d.key_vars) for d in diffs], kv)
            rows = self.restricted(self.plan, Restriction(r.at, r.terms, restricted, rv, r.branches))
            origin, rules = _together([(m.origin, m.rules) for m in members])
            out.append(Statement("replace", origin, on=s.on,
                                 keys=O.ReturnBag(keys, TupleExpr(tuple((c, Var(v)) for c, v in zip(s.on, kv)))),
                                 rows=at_state(rows, POST), rules=rules))
        return out

    # ------------------------------------------------------------------ helpers

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{HIDDEN}{prefix}{self.counter}"

    def fresh_vars(self, n: int) -> tuple[str, ...]:
        return tuple(self.fresh("k") for _ in range(n))

    def canonical_ids(self, op: O.Operator) -> tuple[Term, ...]:
        ids = self._known_ids(op)
        if ids is None:
            raise UnsupportedError(f"the IDs of {op.name} are unknown, so its changes cannot be named", op.span)
        return ids

    def equivalents(self, op: O.Operator, t: Term) -> tuple[Term, ...]:
        ids: Ids | None = self.ids.get(op)
        if ids is not None and ids.known:
            for g in ids.groups:
                if t in g.terms:
                    return g.terms
        return (t,)

    def through_project(self, op: O.Project, ids: tuple[Term, ...]) -> tuple[Term, ...] | None:
        """The IDs as output variables of ``op``; None if it drops one (only below DISTINCT,
        where retouching must not add columns)."""
        own = self.ids.get(op)
        id_terms = {t for g in own.groups for t in g.terms} if own is not None and own.known else set()
        out = []
        for t in ids:
            found = [r for e in self.equivalents(op.input, t) for v, t2 in op.outputs
                     if (r := _relative_to(e, t2, Var(v))) is not None]
            if not found:
                return None
            # several outputs copy the ID (a union branch keeps a hidden copy): take the one
            # that is an ID of the projection, else the hidden copy
            found.sort(key=lambda r: (r not in id_terms, not _root(r).name.startswith(HIDDEN)))
            out.append(found[0])
        return tuple(out)

    def _element_fields(self) -> tuple[tuple[str, Term], ...]:
        hidden = {c for c, _ in self.element_columns.values()}
        return tuple((n, t) for n, t in self.plan.element.fields if n not in hidden)

    def _element_columns(self) -> dict[str, tuple[str, tuple[Term, ...]]]:
        """ID name -> (hidden view column, equivalent terms at the view's input)."""
        el = self.plan.element
        ids = self.ids.get(self.plan.input)
        if not isinstance(el, TupleExpr) or ids is None or not ids.known:
            raise InternalError("the view plan ends in a tuple with its IDs")
        by_term = {t: n for n, t in el.fields if n.startswith(HIDDEN)}
        out = {}
        for g in ids.groups:
            col = by_term.get(g.term)
            if col is None:
                raise InternalError(f"the view does not store its ID {g.name}")
            out[g.name] = (col, g.terms)
        return out

    def view_column(self, op: O.Operator, t: Term) -> str:
        for col, terms in self.element_columns.values():
            if t in terms:
                return col
        raise InternalError(f"ID {t} of {op.name} is not an ID of the view")

    def restriction(self, at: O.Operator, terms: tuple[Term, ...], keys, key_vars) -> Restriction:
        at, terms = _push_down(at, terms)
        return Restriction(at, terms, keys, key_vars)

    def restricted(self, plan: O.Operator, r: Restriction | None) -> O.Operator:
        """``plan`` with the rows of ``r`` only: a semijoin at ``r.at``, the union branches taken."""
        if r is None:
            return plan
        target, branches = r.at, dict((id(u), s) for u, s in r.branches)
        cond = conjunction([_same(t, Var(k)) for t, k in zip(r.terms, r.key_vars)])

        def fn(op: O.Operator) -> O.Operator:
            if op == target:
                return O.SemiJoin(op, r.keys, cond)
            return op

        out = _transform(plan, fn, target, branches)
        return out


# ---------------------------------------------------------------------- plan helpers


def at_state(plan: O.Operator, suffix: str) -> O.Operator:
    """``plan`` reading at the state named by ``suffix`` (``@pre``, ``@post``) every base
    table it reads without a state yet (key sets already computed keep theirs)."""
    def fn(op: O.Operator) -> O.Operator:
        if isinstance(op, O.ScanCollection) and isinstance(op.source, TableRef) \
                and not op.source.name.startswith("Δ") and "@" not in op.source.name:
            return replace(op, source=TableRef(op.source.name + suffix))
        return op
    return O.transform_up(plan, fn)


def _transform(plan: O.Operator, fn, target: O.Operator, branches: dict[int, str]) -> O.Operator:
    """Rebuild ``plan`` bottom-up applying ``fn``; a UnionAll in ``branches`` keeps one side."""
    def go(op: O.Operator) -> O.Operator:
        if isinstance(op, O.UnionAll) and id(op) in branches:
            return go(op.left if branches[id(op)] == "left" else op.right)
        if op is target or op == target:
            return fn(op)
        ins = tuple(go(i) for i in op.inputs())
        new = op.with_inputs(*ins) if any(a is not b for a, b in zip(ins, op.inputs())) else op
        return fn(new)
    return go(plan)


def _push_down(at: O.Operator, terms: tuple[Term, ...]) -> tuple[O.Operator, tuple[Term, ...]]:
    """The deepest operator below ``at`` a restriction on ``terms`` can move to unchanged
    in meaning (through σ, π (renaming), γ keys, δ and into one side of a join)."""
    while True:
        used = set().union(*(t.variables() for t in terms)) if terms else set()
        nxt = None
        match at:
            case O.Select() | O.Assign() | O.Distinct():
                if used <= set(at.input.output_variables()):
                    nxt = (at.input, terms)
            case O.Project(outputs=outs):
                m = {Var(v): t for v, t in outs}
                if all(isinstance(t, Var) and t in m for t in terms):
                    nxt = (at.input, tuple(m[t] for t in terms))
            case O.GroupBy(keys=keys) if not at.group_var:
                m = {Var(k): t for k, t in keys}
                if terms and all(isinstance(t, Var) and t in m for t in terms):
                    nxt = (at.input, tuple(m[t] for t in terms))
            case O.InnerJoin():
                for side in (at.left, at.right):
                    if used <= set(side.output_variables()):
                        nxt = (side, terms)
                        break
            case O.LeftJoin() | O.SemiJoin() | O.AntiJoin():
                if used <= set(at.left.output_variables()):
                    nxt = (at.left, terms)
        if nxt is None or not terms:
            return at, terms
        at, terms = nxt


class _Correlated(Exception):
    """Raised by :func:`_flattened` for a nested plan it cannot join with its outer tuples."""


def _flattened(body: O.Operator, outer: O.Operator) -> O.Operator | None:
    """The nested plan ``body`` evaluated for every tuple of ``outer`` and unnested, as one
    flat plan (the classic unnesting of a correlated subquery): the σ reading ``outer``'s
    variables becomes a join of its input with ``outer`` on its condition, and the σ, ⋈ and π
    above it carry ``outer``'s variables up; an uncorrelated body is joined with every outer
    tuple.  None when ``outer`` is read elsewhere than in σ, or above anything but σ, inner
    joins and π (the result is then computed with an apply)."""
    xs = set(outer.output_variables())

    def go(op: O.Operator) -> tuple[O.Operator, bool]:
        if any(O.free_variables(n) & xs for n in op.nested()):
            raise _Correlated
        ins = [go(i) for i in op.inputs()]
        carried = any(c for _, c in ins)
        reads = set().union(*(t.variables() for t in op.terms())) & xs
        if not carried and not reads:
            return op, False
        new = op.with_inputs(*(n for n, _ in ins))
        if isinstance(new, O.Select) and not carried:
            return O.InnerJoin(new.input, outer, new.condition), True
        if isinstance(new, O.Project):
            if {v for v, _ in new.outputs} & xs:
                raise _Correlated
            return O.Project(new.input, new.outputs + tuple((v, Var(v)) for v in sorted(xs))), True
        if carried and isinstance(new, (O.Select, O.InnerJoin)):
            return new, True
        raise _Correlated

    try:
        flat, carried = go(body)
    except _Correlated:
        return None
    return flat if carried else O.InnerJoin(flat, outer, TRUE)


def _together(parts: list[tuple[str, tuple[str, ...]]]) -> tuple[str, tuple[str, ...]]:
    """The origin and the rules of a statement made from several i-diffs' (origin, rules): the
    origins listed once each, every rule marked with the origin it was instantiated from."""
    origins = tuple(dict.fromkeys(o for o, _ in parts))
    return "; ".join(origins), tuple(f"{o}: {r}" for o, rules in parts for r in rules)


def _union_renamed(parts: list[tuple[O.Operator, tuple[str, ...]]], names: tuple[str, ...]) -> O.Operator:
    """The union of key sets, each binding its own variables, as sets binding ``names``."""
    out = None
    for plan, variables in parts:
        renamed = O.Project(plan, tuple((n, Var(v)) for n, v in zip(names, variables)))
        out = renamed if out is None else O.UnionAll(out, renamed)
    return out


def _base_rule(kind: str, action: str | None = None) -> Rule:
    """The rule where base i-diffs of ``kind`` enter (the first, or the one of ``action``)."""
    return next(r for r in rules_for("ScanCollection", "input", kind)
                if r.action == action or action is None and r.action.startswith("base_"))


def _sides(op: O.Operator) -> tuple[str, ...]:
    return ("left", "right") if len(op.inputs()) == 2 else ("input",)


def _branch_of(branch: O.Operator) -> tuple[str, int]:
    if isinstance(branch, O.Project):
        for v, t in branch.outputs:
            if v.startswith(BRANCH) and isinstance(t, Const):
                return v, t.value
    raise InternalError("a union branch without its branch attribute")


def _condition_terms(op: O.Operator) -> tuple[Term, ...]:
    """The terms whose value an update of the terms they read changes beyond renaming."""
    match op:
        case O.Select(condition=c) | O._Join(condition=c):
            return (c,)
        case O.Assign(term=t):
            return (t,)
        case O.ScanCollection(source=src) if not isinstance(src, TableRef):
            return (src,)
        case O.NavTuple() | O.FunctionCall() | O.ConstructTuple() | O.ConstructBag() | O.ConstructArray():
            return op.terms()
        case O.ApplyPlan() | O.InnerCorrelate() | O.LeftCorrelate():
            return tuple(t for o in O.walk(op.plan) for t in o.terms())
    return ()


#: operators that keep the tuples of their input apart (each output tuple comes from one
#: tuple of the input it is followed up from): a nested plan's probe climbs through them
_TUPLE_KEEPING = (O.Select, O.Project, O.Assign, O.NavTuple, O.FunctionCall, O.ConstructTuple,
                  O.ConstructBag, O.ConstructArray, O.ScanCollection, O._Join, O.ApplyPlan,
                  O.InnerCorrelate, O.LeftCorrelate)


def _keeps_tuples(op: O.Operator) -> bool:
    return isinstance(op, _TUPLE_KEEPING)


def _with_input(op: O.Operator, side: str, child: O.Operator) -> O.Operator:
    """``op`` reading ``child`` on ``side``; a change on the right of ⟕, ⋉ or ▷ is followed to
    the left tuples it joins (an inner join)."""
    if side == "left":
        return op.with_inputs(child, op.right)
    if side == "right":
        if isinstance(op, O.InnerJoin):
            return op.with_inputs(op.left, child)
        return O.InnerJoin(op.left, child, op.condition)
    return op.with_inputs(child)


def _mentions(term: Term, changed: Iterable[tuple[Term, Term]]) -> bool:
    """Whether ``term`` reads one of the changed terms (or the whole tuple holding one)."""
    keys = [c for c, _ in changed]
    if not keys:
        return False
    sub = set(term.walk())
    for c in keys:
        if c in sub:
            return True
        # a tuple variable used whole (not only through fields) reads every field
        for t in sub:
            if isinstance(t, Var) and isinstance(c, Field) and _root(c) == t and not _only_under_fields(term, t):
                return True
    return False


def _relative_to(t: Term, prefix: Term, new: Term) -> Term | None:
    """``t`` with its prefix ``prefix`` replaced by ``new`` (``b.id`` under ``b_2 := b`` is
    ``b_2.id``); None if ``prefix`` is not a prefix of ``t``."""
    if t == prefix:
        return new
    if isinstance(t, Field):
        base = _relative_to(t.base, prefix, new)
        return None if base is None else Field(base, t.name)
    return None


def _element_sets(fields: tuple[tuple[str, Term], ...], changed: Iterable[tuple[Term, Term]],
                  avail: set[str]) -> tuple[tuple[tuple[str, ...], Term], ...] | None:
    """The fields of a nested element an update changes, as (path inside the element, post
    value over the i-diff's variables ``avail``): a field holding a tuple the update changes
    (``users`` of a GROUP AS member, ``u`` of a ``SELECT *`` element) is navigated down to the
    updated attributes (``users.elite``); a field computed from them is set whole.  None if a
    changed value is not computable from the i-diff."""
    changed = tuple(changed)
    sets: list[tuple[tuple[str, ...], Term]] = []
    for name, t in fields:
        if not _mentions(t, changed):
            continue
        below = [(rest, c) for c, _ in changed if (rest := _path_below(c, t))]
        for rest, c in below if below else [((), t)]:
            if not c.variables() <= avail:
                return None
            sets.append(((name,) + rest, c))
    return tuple(sets)


def _path_below(t: Term, prefix: Term) -> tuple[str, ...]:
    """The field names leading from ``prefix`` down to ``t`` (``users.elite`` below ``users``
    is ``("elite",)``); empty if ``prefix`` is not a proper prefix of ``t``."""
    names: list[str] = []
    while isinstance(t, Field):
        names.append(t.name)
        t = t.base
        if t == prefix:
            return tuple(reversed(names))
    return ()


def _root(t: Term) -> Term:
    while isinstance(t, Field):
        t = t.base
    return t


def _only_under_fields(term: Term, var: Var) -> bool:
    """Every occurrence of ``var`` in ``term`` is the base of a field access."""
    def go(t: Term, under_field: bool) -> bool:
        if t == var:
            return under_field
        if isinstance(t, Field):
            return go(t.base, True)
        return all(go(c, False) for c in t.children())
    return go(term, False)


def _same(a: Term, b: Term) -> Term:
    return Call("same", (a, b))


def _is_null(t: Term) -> Term:
    return Call("is_null", (t,))


def _never_null(t: Term) -> bool:
    """Whether ``t`` is NULL for no binding: a non-NULL literal, or a COALESCE ending in one
    (the SUM of the operator cache of AVG, :mod:`idivm.generator.operator_caches`)."""
    match t:
        case Const(value=v):
            return v is not None
        case Call(function="coalesce", args=args):
            return _never_null(args[-1])
    return False


def _element_wise(plan: O.Operator, forms: Mapping[str, tuple], outer: Mapping[Term, Term],
                  avail: set[str]) -> tuple[tuple[tuple[str, Term], ...], Term | None] | None:
    """The form of a subquery that filters and reshapes the members of a stored form of a group
    bag one by one (``SELECT x.a.b, ... FROM g AS x WHERE ...``: σ and π over a scan of the
    bag, ending in a tuple): its element and its condition as terms over γ's input, the
    member ``x`` read as its fields and the ``outer`` variables (γ's keys) as their terms;
    None for any other plan, or one reading other variables than γ's input's ``avail``."""
    if not isinstance(plan, O.ReturnBag) or not isinstance(plan.element, TupleExpr):
        return None
    chain, node = [], plan.input
    while isinstance(node, (O.Select, O.Project)):
        chain.append(node)
        node = node.input
    if not (isinstance(node, O.ScanCollection) and isinstance(node.input, O.Ground)
            and isinstance(node.source, Var) and node.source.name in forms
            and node.position is None and node.occurrence is None):
        return None
    fields, condition = forms[node.source.name]
    env = {**outer, Var(node.var): TupleExpr(fields)}
    conditions = [] if condition is None else [condition]
    for op in reversed(chain):
        if isinstance(op, O.Select):
            conditions.append(_navigated(substitute(op.condition, env)))
        else:
            env = {**outer, **{Var(v): _navigated(substitute(t, env)) for v, t in op.outputs}}
    element = tuple((n, _navigated(substitute(t, env))) for n, t in plan.element.fields)
    terms = [t for _, t in element] + conditions
    if not all(t.variables() <= avail for t in terms):
        return None
    return element, (conjunction(conditions) if conditions else None)


def _null_tests_dropped(term: Term) -> Term:
    """``term`` with its tests of whether a tuple variable is NULL taken as true: an update
    changes attributes of tuples, never whether a tuple is there (a left join's padded
    member has none), so such a test does not read the updated attributes."""
    tests = {t: TRUE for t in term.walk()
             if isinstance(t, Call) and t.function == "is_null" and isinstance(t.args[0], Var)}
    return substitute(term, tests) if tests else term


def _navigated(term: Term) -> Term:
    """``term`` with each field of a tuple constructor read as the field's term
    (``{"a": t}.a`` is ``t``)."""
    if isinstance(term, Field):
        base = _navigated(term.base)
        if isinstance(base, TupleExpr):
            found = dict(base.fields)
            if term.name in found:
                return found[term.name]
        return term if base is term.base else Field(base, term.name, span=term.span)
    mapping = {k: n for k in term.children() if (n := _navigated(k)) is not k}
    return substitute(term, mapping) if mapping else term


def _member_incremental(a: O.Aggregate) -> bool:
    """Whether the aggregate of a group changes by the sum of its members' contributions
    (:func:`_contribution`) whatever the members: COUNT, and SUM of a value never NULL (a
    SUM of NULLs only is NULL, not 0)."""
    return not a.distinct and (a.function == "count" or (a.function == "sum" and _never_null(a.arg)))


def _contribution(a: O.Aggregate) -> Term:
    """What one member adds to the COUNT or SUM ``a`` of its group."""
    if a.function == "sum":
        return a.arg
    return Const(1, T.INT) if a.arg is None else _counted(a.arg)


def _counted(t: Term) -> Term:
    """1 where COUNT(t) counts the tuple (``t`` is not NULL), else 0."""
    return _indicator(Call("not", (_is_null(t),)))


def _indicator(cond: Term) -> Term:
    return Case(((cond, Const(1, T.INT)),), Const(0, T.INT))


def _rule(rule: Rule) -> str:
    return rule.describe()


def _attributes_read(plan: O.Operator, xs: set[str], columns: list[str]
                     ) -> tuple[set[str], set[str], dict[str, set[tuple[str, ...]] | None]]:
    """For the scan variables ``xs`` of one table: the attributes the plan reads, those read by
    a condition, a grouping key, a DISTINCT or a join (whose updates change which tuples
    exist), and per attribute the paths below it the plan reads (``address`` -> ``{("city",)}``
    for ``p.address.city``; None where it reads the whole attribute; no entries if it reads
    a whole tuple): a change of a tuple attribute at paths the view neither reads nor
    projects does not reach it (§2.12.3, §2.14.2)."""
    read: set[str] = set()
    conditional: set[str] = set()
    paths: dict[str, set[tuple[str, ...]] | None] = {}
    whole = False

    def fields_of(t: Term) -> set[str]:
        nonlocal whole
        out: set[str] = set()
        for _, path in field_paths(t, xs):
            if not path:
                whole = True
                return set(columns)
            a, sub = path[0], path[1:]
            out.add(a)
            if not sub or "@" in sub or paths.get(a, set()) is None:
                paths[a] = None
            else:
                paths.setdefault(a, set()).add(sub)  # type: ignore[union-attr]
        return out

    under_distinct = set()
    for op in O.walk(plan):
        if isinstance(op, O.Distinct):
            under_distinct |= {id(o) for o in O.walk(op)}
    for op in O.walk(plan):
        for t in op.terms():
            f = fields_of(t)
            read |= f
            if id(op) in under_distinct:
                conditional |= f
        match op:
            case O.Select(condition=c) | O._Join(condition=c):
                conditional |= fields_of(c)
            case O.GroupBy(keys=keys):
                for _, k in keys:
                    conditional |= fields_of(k)
    return read, conditional, {} if whole else paths
