"""Intermediate caches below aggregates (thesis §2.4 pass 3, Examples 2.4.6–2.4.7, footnote 6).

The rules of γ read the pre and post states of the aggregate's input (Table C.7,
C.8: the groups of the changed tuples are found through ``Input_post``).  Without a
cache, those states are the whole select-project-join below the aggregate, recomputed
from the base tables at two versions.  idIVM materializes that input as an
*intermediate cache*, maintained like a view by its own Δ-script, and composes the
rest of the rules — from the cache to the view — as if the cache were a base table:
the cache's change data feed of the run is the i-diff the upper part starts from
(an update of a summed attribute of one base row becomes an update of the cache rows
holding it, then an increment of their groups, and no base table is read).

:func:`split_at_caches` chooses the caches and rewrites the view plan:

input
    the view plan as built (not retouched), the base tables' keys and types.
output
    one cache per eligible γ: its plan (``ReturnBag`` of the γ input's rows as flat
    columns, one per field the γ reads: ``parts.price`` is the column
    ``parts_price``) and row type; and the *upper* plan, where each cached γ reads
    the cache table instead of its input (``SUM(parts.price)`` becomes
    ``SUM(cache.parts_price)``).

A γ is eligible when (footnote 6) its input

- is a select-project-join over base tables (scans, σ, ⋈, ⟕, ⋉, ▷) with at least one
  join — a cache of one table would copy it;
- has no multi-valued dependency: the condition of each inner join equates the IDs of
  one side with terms of the other, of each left join the right side's IDs with terms of
  the left (a lookup, such as ``devices_parts ⋈ parts`` on ``pid``), so each tuple meets
  at most one tuple of that side and the cache holds no more rows than the table it
  follows; a many-to-many join would make the cache larger than recomputing;
- is read by the γ only through fields of its scan variables (the cache's columns), and
  the γ has no group variable (GROUP AS reads whole tuples).

Only ID-based maintenance uses caches; tuple-based IVM cannot benefit from them (§2.6).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Mapping

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import Field, TableRef, Term, TupleExpr, Var
from idivm.errors import InternalError
from idivm.algebra.rewrite import fresh_name, replace_nodes, substitute
from idivm.generator.generate import check_supported, generate
from idivm.generator.maps_caches import split_at_maps
from idivm.generator.operator_caches import split_at_averages
from idivm.provenance.ids import ProvenanceResult, infer_provenance
from idivm.script import Cache, DeltaScript

#: operators a cached subplan may consist of
_SPJ = (O.ScanCollection, O.Select, O.InnerJoin, O.LeftJoin, O.SemiJoin, O.AntiJoin)
_JOINS = (O.InnerJoin, O.LeftJoin)


@dataclass(frozen=True)
class CachePlan:
    """One intermediate cache: table ``name`` holding the rows of ``plan`` (flat columns
    of type ``type``; the hidden ID columns are added by provenance inference)."""

    name: str
    plan: O.ReturnBag
    type: T.TupleType


@dataclass(frozen=True)
class CacheSplit:
    caches: tuple[CachePlan, ...]
    upper: O.ReturnBag  # the view plan reading the caches


def cache_name(view: str, n: int) -> str:
    """The table name of a view's ``n``-th cache (``$`` keeps it apart from user names)."""
    return f"{view}$cache{n}"


def split_at_caches(view: str, plan: O.ReturnBag, prov: ProvenanceResult,
                    table_types: Mapping[str, T.TupleType], names=None) -> CacheSplit | None:
    """The caches of ``plan`` and the plan reading them; None when no γ is eligible.
    ``prov`` is the provenance of ``plan`` (its ``ids`` are keyed by ``plan``'s operators);
    ``names()`` gives the table name of the next cache (default: ``view``'s caches from 1)."""
    taken = {v for op in O.walk(plan) for v in op.output_variables()}
    caches: list[CachePlan] = []
    replaced: dict[int, O.Operator] = {}
    for op in O.walk(plan, into_nested=False):
        if not isinstance(op, O.GroupBy) or op.group_var or id(op) in replaced:
            continue
        columns = _columns(op, table_types)
        if columns is None or not _spj_without_mvd(op.input, prov):
            continue
        name = names() if names is not None else cache_name(view, len(caches) + 1)
        var = fresh_name("cache", taken)
        taken.add(var)
        cols = tuple((c, t) for c, (t, _) in columns.items())
        caches.append(CachePlan(name, O.ReturnBag(op.input, TupleExpr(cols), span=op.span),
                                T.TupleType(tuple((c, ty) for c, (_, ty) in columns.items()))))
        to_column = {t: Field(Var(var), c) for c, (t, _) in columns.items()}
        scan = O.ScanCollection(O.Ground(), TableRef(name), var, span=op.input.span)
        replaced[id(op)] = replace(
            op, input=scan,
            keys=tuple((k, substitute(t, to_column)) for k, t in op.keys),
            aggregates=tuple((a, replace(g, arg=None if g.arg is None else substitute(g.arg, to_column)))
                             for a, g in op.aggregates))
    if not caches:
        return None
    upper = replace_nodes(plan, replaced)
    return CacheSplit(tuple(caches), upper)  # type: ignore[arg-type]


def _columns(op: O.GroupBy, table_types) -> dict[str, tuple[Term, T.Type]] | None:
    """Column name -> (field of a scan variable, its type) for every field the γ reads of
    its input; None if it reads anything else of it (whole tuples, computed variables)."""
    scans = {s.var: s.source.name for s in O.walk(op.input)
             if isinstance(s, O.ScanCollection) and isinstance(s.source, TableRef)}
    terms = [t for _, t in op.keys] + [a.arg for _, a in op.aggregates if a.arg is not None]
    out: dict[str, tuple[Term, T.Type]] = {}
    seen: set[Term] = set()
    for term in terms:
        fields = [s for s in term.walk() if isinstance(s, Field) and isinstance(s.base, Var)]
        covered = {id(f.base) for f in fields}
        for v in (s for s in term.walk() if isinstance(s, Var)):
            if id(v) not in covered:
                return None  # a variable used whole, or not a scan's
        for f in fields:
            table = scans.get(f.base.name)
            ty = table_types[table].field(f.name) if table in table_types else None
            if ty is None:
                return None
            if f not in seen:
                seen.add(f)
                out[fresh_name(f"{f.base.name}_{f.name}", set(out))] = (f, ty)
    return out


def _spj_without_mvd(plan: O.Operator, prov: ProvenanceResult) -> bool:
    ops = list(O.walk(plan))
    if not all(isinstance(o, _SPJ + (O.Ground,)) for o in ops):
        return False
    if not any(isinstance(o, _JOINS) for o in ops):
        return False
    for o in ops:
        if isinstance(o, O.ScanCollection) and not (isinstance(o.source, TableRef) and isinstance(o.input, O.Ground)):
            return False
        if isinstance(o, O.InnerJoin) and not (_determined(o, o.right, o.left, prov)
                                                or _determined(o, o.left, o.right, prov)):
            return False
        if isinstance(o, O.LeftJoin) and not _determined(o, o.right, o.left, prov):
            return False  # each left tuple meets at most one right tuple
    ids = prov.ids.get(plan)
    return ids is not None and ids.known


def _determined(join: O.InnerJoin, side: O.Operator, other: O.Operator, prov: ProvenanceResult) -> bool:
    """Whether the join condition determines ``side``'s IDs from ``other``'s values: every ID
    of ``side`` is equated (in the join's key groups, Appendix B) with a term of ``other``,
    so each tuple of ``other`` meets at most one tuple of ``side`` (no multi-valued dependency)."""
    own, ids = prov.ids.get(join), prov.ids.get(side)
    if own is None or ids is None or not (own.known and ids.known):
        return False
    theirs = set(other.output_variables())
    for g in ids.groups:
        group = next((h for h in own.groups if g.term in h.terms), None)
        if group is None or not any(t.variables() and t.variables() <= theirs for t in group.terms):
            return False
    return True


def generate_view(view: str, plan: O.ReturnBag, prov: ProvenanceResult,
                  table_keys: Mapping[str, tuple[str, ...]], table_types: Mapping[str, T.TupleType],
                  element_keys: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None,
                  strategy: str = "id", caches: bool = True, maps_of=None) -> DeltaScript | None:
    """The Δ-script of the view of ``plan`` (``prov`` its provenance); ID-based scripts
    maintain intermediate caches below the aggregates where they are eligible (module doc)
    and operator caches of AVG (:mod:`idivm.generator.operator_caches`).  The caches are
    chosen first, from the plans and their provenance alone; then each script is generated
    once.  With ``maps_of`` (a function from a cache plan with provenance to its maps, raising
    :class:`~idivm.errors.IdivmError` when they cannot maintain it), every eligible γ gets a
    maps cache first (:mod:`idivm.generator.maps_caches`), and a view that gets none has no
    script (None).

    Raises :class:`UnsupportedError` naming the first operator no rule covers."""
    if maps_of is None:
        check_supported(prov.plan)
    if strategy == "id" and (caches or maps_of is not None):
        for averages in (True, False):  # without operator caches if they would change the view's IDs
            keys, types = dict(table_keys), dict(table_types)
            planned: list[_PlannedCache] = []
            numbers = itertools.count(1)
            top = _plan_caches(view, plan, prov, keys, types, element_keys, planned,
                               lambda: cache_name(view, next(numbers)), averages and caches, maps_of)
            if top is not None:
                made = tuple(Cache(c.name, c.plan, c.key, c.type,
                                   None if c.script is None else _generate(c.script, keys, types), c.maps)
                             for c in planned)
                return replace(_generate(top, keys, types), caches=made)
    if maps_of is not None:
        return None
    return generate(view, prov, table_keys, table_types, strategy)


@dataclass(frozen=True)
class _Script:
    """A Δ-script to generate: of table ``name``, from the provenance ``prov`` of its plan."""

    name: str
    prov: ProvenanceResult


@dataclass(frozen=True)
class _PlannedCache:
    """A cache as :class:`Cache` holds it, with the script that maintains it still to generate
    (None: it is maintained by its ``maps``)."""

    name: str
    plan: O.ReturnBag
    key: tuple[str, ...]
    type: T.TupleType
    script: _Script | None
    maps: object = None


def _generate(script: _Script, keys: Mapping[str, tuple[str, ...]], types: Mapping[str, T.TupleType]) -> DeltaScript:
    return generate(script.name, script.prov, keys, types, "id")


def _plan_caches(name: str, plan: O.ReturnBag, prov: ProvenanceResult, keys: dict, types: dict,
                 element_keys, planned: list[_PlannedCache], names, averages: bool = True,
                 maps_of=None) -> _Script | None:
    """The ID-based Δ-script of ``name`` to generate, reading the caches it creates: with
    ``maps_of``, maps caches of its aggregate cores (:mod:`idivm.generator.maps_caches`); operator
    caches of its AVG aggregates, intermediate caches below its other aggregates (each itself
    maintained by a script that may read caches below it).  The caches are appended to
    ``planned`` in the order they are maintained (a cache after those it reads), with their
    keys and row types added to ``keys`` and ``types``.  None when ``plan`` gets no cache, or
    reading them would change the ID columns the table of ``name`` is stored with (then
    nothing is appended).  ``averages``: whether to make operator caches."""
    before = len(planned)
    stored_ids = prov.view_ids
    upper: O.ReturnBag = plan
    if maps_of is not None:
        def cache_maps(cache_plan: O.ReturnBag):
            cprov = infer_provenance(cache_plan, keys, types, element_keys)
            return cprov, maps_of(cprov.plan)

        split_maps = split_at_maps(plan, types, names, cache_maps)
        if split_maps is None:
            return None
        for c in split_maps.caches:
            cprov, maps = c.maps
            row_type = _with_ids(c.type, cprov)
            planned.append(_PlannedCache(c.name, cprov.plan, c.key, row_type, None, maps))  # type: ignore[arg-type]
            keys[c.name], types[c.name] = c.key, row_type
        upper = split_maps.upper
        plan = upper  # the caches below are chosen in the plan reading the maps caches
        prov = infer_provenance(upper, keys, types, element_keys)
        check_supported(prov.plan)
    split_avg = split_at_averages(plan, types, names) if averages else None
    if split_avg is not None:
        for c in split_avg.caches:
            cprov = infer_provenance(c.plan, keys, types, element_keys)
            script = _plan_caches(c.name, c.plan, cprov, keys, types, element_keys, planned, names) \
                or _Script(c.name, cprov)
            row_type = _with_ids(c.type, cprov)
            planned.append(_PlannedCache(c.name, cprov.plan, c.key, row_type, script))  # type: ignore[arg-type]
            keys[c.name], types[c.name] = c.key, row_type
        upper = split_avg.upper
    uprov = infer_provenance(upper, keys, types, element_keys) if upper is not plan else prov
    split = split_at_caches(name, upper, uprov, types, names)
    if split is not None:
        for c in split.caches:
            cprov = infer_provenance(c.plan, keys, types, element_keys)
            key = tuple(col for col, _ in cprov.view_ids)
            hidden = dict(cprov.plan.element.fields)  # type: ignore[union-attr]
            row_type = T.TupleType(c.type.fields + tuple((col, _type_of(hidden[col], c.plan, types))
                                                         for col in key))
            planned.append(_PlannedCache(c.name, cprov.plan, key, row_type,  # type: ignore[arg-type]
                                         _Script(c.name, cprov)))
            keys[c.name], types[c.name] = key, row_type
        upper = split.upper
        uprov = infer_provenance(upper, keys, types, element_keys)
    if upper is plan and maps_of is None or uprov.view_ids != stored_ids:
        # no cache, or the table would not keep the ID columns it is stored with
        for c in planned[before:]:
            keys.pop(c.name, None)
            types.pop(c.name, None)
        del planned[before:]
        return None
    return _Script(name, uprov)


def _with_ids(row_type: T.TupleType, cprov: ProvenanceResult) -> T.TupleType:
    """The row type of a cache keyed by copies of its visible columns (an operator or maps cache):
    its columns, then its hidden ID columns, each typed as the column it copies."""
    hidden = dict(cprov.plan.element.fields)  # type: ignore[union-attr]
    return T.TupleType(row_type.fields + tuple(
        (col, (row_type.field(hidden[col].name) if isinstance(hidden[col], Var) else None) or T.ANY)
        for col, _ in cprov.view_ids))


def _type_of(term: Term, plan: O.Operator, table_types: Mapping[str, T.TupleType]) -> T.Type:
    """The type of an ID term of a cache (a field of one of its scans)."""
    scans = {s.var: s.source.name for s in O.walk(plan)
             if isinstance(s, O.ScanCollection) and isinstance(s.source, TableRef)}
    if isinstance(term, Field) and isinstance(term.base, Var) and scans.get(term.base.name) in table_types:
        ty = table_types[scans[term.base.name]].field(term.name)
        if ty is not None:
            return ty
    raise InternalError(f"the ID {term} of a cache is not a field of a base table")
