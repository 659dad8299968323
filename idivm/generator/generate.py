"""The Δ-script generator (thesis §2.4): rule instantiation and composition.

Pass 1 (IDs of every intermediate result) is :func:`idivm.provenance.ids.infer_provenance`;
its retouched plan and per-operator IDs are the input here.  Pass 2 starts,
for every scan of a base table (one path per alias of a self-joined table),
from the base-table i-diffs (§2.5) and instantiates, operator by operator up
to the view, the first rule of :mod:`idivm.rules` whose guard holds.  Pass 3
composes the instantiated rules into algebra plans — each i-diff is a plan
over the base-table i-diffs and states — and ends in the statements of a
:class:`~idivm.script.DeltaScript`.  Pass 4's simplifications are
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

from dataclasses import replace
from typing import Mapping

from idivm.algebra import operators as O
from idivm.algebra.expressions import Field, TableRef, Term, TupleExpr, Var, field_paths
from idivm.errors import InternalError, UnsupportedError
from idivm.generator.minimize import minimize_script
from idivm.provenance.ids import HIDDEN, ProvenanceResult
from idivm.rules import SIDES, Rule, group_by, nested, rules_for
from idivm.rules.common import do_to_replace
from idivm.rules.context import Context, Diff, Restriction, at_state, mentions, restricted, together
from idivm.rules.scan import BASE_ELEMENTS, BASE_REPLACE, BASE_UPDATE
from idivm.script import (
    KEYS, POST, PRE_FIELD, UPDATES, DeltaScript, DiffRef, ElementDiffs, Origin, Statement, TableDiffs,
)
from idivm import types as T

STRATEGIES = ("id", "tuple")


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


class _Generator(Context):
    """Pass 2 and 3 for one view: the base i-diffs, the rules instantiated from them (the
    guards and transformations of :mod:`idivm.rules`), the increments of γ composed once
    every i-diff has reached it, and the replaces merged."""

    def __init__(self, view_name, prov: ProvenanceResult, table_keys, table_types, strategy):
        check_supported(prov.plan)
        super().__init__(view_name, prov, table_keys, table_types, strategy)
        #: γ with increments to make -> (γ, [(kind "members" or "update", i-diff, rule)])
        self._deferred: dict[int, tuple[O.GroupBy, list[tuple[str, Diff, Rule]]]] = {}

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
                statements.extend(self.propagate(diff) if self._top_level(scan) else nested.to_outer(self, diff))
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
        source = DiffRef(td.table, KEYS, elements)
        keys, kv = self._key_scan(source, td.key + elements.columns())
        return Diff("replace", unnest, ids, (Origin(source, unnest.var),), keys=keys, key_vars=kv,
                    restriction=Restriction(unnest, ids, keys, kv),
                    trail=(BASE_ELEMENTS.describe(),))

    def _key_scan(self, source: DiffRef, columns: tuple[str, ...]) -> tuple[O.Operator, tuple[str, ...]]:
        """The keys a base i-diff ``source`` names, bound to fresh variables (columns in order)."""
        kv = self.fresh_vars(len(columns))
        dk = self.fresh("dk")
        keys = O.Project(O.ScanCollection(O.Ground(), TableRef(source), dk),
                         tuple((v, Field(Var(dk), c)) for v, c in zip(kv, columns)))
        return keys, kv

    def _base_diffs(self, scan: O.ScanCollection, td: TableDiffs) -> list[Diff]:
        x = Var(scan.var)
        ids = tuple(Field(x, k) for k in td.key)
        keys, kv = self._key_scan(DiffRef(td.table, KEYS), td.key)
        rule = BASE_REPLACE.describe()
        out = [Diff("replace", scan, ids, (Origin(DiffRef(td.table, KEYS), scan.var),), keys=keys, key_vars=kv,
                    restriction=Restriction(scan, ids, keys, kv), trail=(rule,))]
        updated = [a for a in td.read if a not in td.conditional]
        if updated:
            # the post tuple under the scan's variable, the pre values under their own
            du, pre = self.fresh("du"), f"{HIDDEN}pre_{scan.var}"
            columns = [n for n, _ in self.table_types[td.table].fields]
            post = TupleExpr(tuple((c, Field(Var(du), c)) for c in columns))
            updates = DiffRef(td.table, UPDATES)
            plan = O.Project(O.ScanCollection(O.Ground(), TableRef(updates), du),
                             ((scan.var, post), (pre, Field(Var(du), PRE_FIELD))))
            changed = tuple((Field(x, a), Field(Var(pre), a)) for a in updated)
            rule = BASE_UPDATE.describe()
            out.append(Diff("update", scan, ids, (Origin(updates, scan.var),),
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
            if rule.when(self, parent, side, diff):
                return rule.action(self, parent, side, diff, rule)
        raise InternalError(f"no rule of {parent.name}[{side}] applies to a {diff.kind} i-diff")

    def next(self, parent: O.Operator, diff: Diff, rule: Rule, **changes) -> list[Statement]:
        """Continue from ``parent`` with ``diff`` transformed by ``rule``."""
        new = replace(diff, op=parent, trail=diff.trail + (rule.describe(),), **changes)
        if parent is self.plan:
            return []
        return self.propagate(new)

    def defer(self, op: O.GroupBy, kind: str, diff: Diff, rule: Rule) -> None:
        self._deferred.setdefault(id(op), (op, []))[1].append((kind, diff, rule))

    # ------------------------------------------------------------------ increments

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
        (:func:`idivm.rules.group_by.joint_update_increment`): its post contribution minus its pre contribution."""
        out = []
        while self._deferred:
            key = max(self._deferred, key=lambda k: self._depth(self._deferred[k][0]))
            op, entries = self._deferred.pop(key)
            members = [(d, r) for kind, d, r in entries if kind == "members"]
            updates = [(d, r) for kind, d, r in entries if kind == "update"]
            if members:
                out += group_by.member_increments(self, op, members)
            if not updates:
                continue
            shared = any(sum(mentions(a.arg, d.changed) for d, _ in updates) > 1
                         for _, a in op.aggregates if a.arg is not None)
            if not shared:  # each aggregate reads the changes of one i-diff at most
                for d, r in updates:
                    out += group_by.update_increment(self, op, d, r)
            elif self.known_ids(op.input) is None:
                for d, r in updates:
                    out += do_to_replace(self, op, "input", d, r)
            else:
                out += group_by.joint_update_increment(self, op, updates)
        return out

    def _depth(self, op: O.Operator) -> int:
        n = 0
        while (up := self.parents.get(id(op))) is not None or id(op) in self.enclosing:
            op = up[0] if up is not None else self.enclosing[id(op)]
            n += 1
        return n

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
            named = _union_renamed([(d.restriction.keys, d.restriction.key_vars) for d in diffs], rv)
            if all(d.keys is d.restriction.keys and d.key_vars == d.restriction.key_vars for d in diffs):
                keys, kv = named, rv  # one key set: the executor computes it once
            else:
                kv = self.fresh_vars(len(s.on))
                keys = _union_renamed([(d.keys, d.key_vars) for d in diffs], kv)
            rows = restricted(self.plan, Restriction(r.at, r.terms, named, rv, r.branches))
            starts, rules = together([(m.starts, m.rules) for m in members])
            out.append(Statement("replace", starts, on=s.on,
                                 keys=O.ReturnBag(keys, TupleExpr(tuple((c, Var(v)) for c, v in zip(s.on, kv)))),
                                 rows=at_state(rows, POST), rules=rules))
        return out


def _union_renamed(parts: list[tuple[O.Operator, tuple[str, ...]]], names: tuple[str, ...]) -> O.Operator:
    """The union of key sets, each binding its own variables, as sets binding ``names``."""
    out = None
    for plan, variables in parts:
        renamed = O.Project(plan, tuple((n, Var(v)) for n, v in zip(names, variables)))
        out = renamed if out is None else O.UnionAll(out, renamed)
    return out


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
