"""Caches of aggregate cores maintained by higher-order delta maps (DBToaster's maps for one
γ, idivm's i-diffs for the rest of the view).

The ``maps`` strategy maintains a view that is one γ with, above it, operators that read no
table (:mod:`idivm.exec.maps`).  A view that reads more — a γ in a ``FROM`` subquery joined
with other tables, two γs, a γ below another — is maintained by splitting it at its γs: the
rows of each eligible γ (its group keys and aggregates, one row per group) are stored in a
*maps cache*, a table keyed by the group keys whose maps are the γ's (its own
:class:`~idivm.exec.maps.MapsPlan`); the rest of the view reads the cache like a base table,
and is maintained by its ID-based Δ-script, the cache's change data feed of the run being the
i-diff it starts from (an update of the changed groups' aggregates, an insert of a new group,
a delete of a group whose count reached 0: issue item "the maps' changes back into i-diffs of
the core's output").  This is :mod:`idivm.generator.operator_caches`' construction with maps
instead of a Δ-script below the cache:

    … γ_{k; a := f(x)}(E) …   =   … π_{k := c.k, a := c.a}(scan C AS c) …
    C = γ_{k; a := f(x)}(E)     (maintained by the maps of γ)

:func:`split_at_maps` chooses the γs and rewrites the plan:

input
    a view plan as built (not retouched), the types of the tables it reads, and a function
    that gives the maps of a cache plan (raising when the maps cannot maintain it).
output
    one :class:`MapsCachePlan` per eligible γ and the plan with each such γ replaced by the
    projection over a scan of its cache.

A γ is eligible when it has grouping keys (a cache keyed by nothing is one tuple, which
gives the view no IDs), no group variable, is not inside a nested plan (a correlated γ has
no cache of its own), and its maps exist (:func:`idivm.agca.translate.translate_group_by`:
selections, inner joins, semi- and antijoins and scalar subqueries over base tables).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Mapping

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.expressions import Field, TableRef, TupleExpr, Var
from idivm.algebra.rewrite import fresh_name, replace_nodes
from idivm.errors import IdivmError
from idivm.generator.operator_caches import scan_types, static_type


@dataclass(frozen=True)
class MapsCachePlan:
    """The maps cache of one γ: table ``name`` holding the rows of ``plan`` (one per group: the
    keys ``key``, then the aggregates), of type ``type``, maintained by the maps ``maps`` gives
    (what :func:`split_at_maps`' ``maps_of`` returned for ``plan``)."""

    name: str
    plan: O.ReturnBag
    type: T.TupleType
    key: tuple[str, ...]
    maps: Any


@dataclass(frozen=True)
class MapsSplit:
    caches: tuple[MapsCachePlan, ...]
    upper: O.ReturnBag  # the plan reading the maps caches


def split_at_maps(plan: O.ReturnBag, table_types: Mapping[str, T.TupleType], names: Callable[[], str],
                  maps_of: Callable[[O.ReturnBag], Any]) -> MapsSplit | None:
    """The maps caches of the eligible γs of ``plan`` and the plan reading them; None when no
    γ is eligible.  ``names()`` gives the table name of the next cache; ``maps_of(plan)`` the
    maps of a cache's plan, raising :class:`IdivmError` when they cannot maintain it."""
    taken = {v for op in O.walk(plan) for v in op.output_variables()}
    caches: list[MapsCachePlan] = []
    replaced: dict[int, O.Operator] = {}
    for op in O.walk(plan, into_nested=False):
        if id(op) in replaced or not isinstance(op, O.GroupBy) or not op.keys or op.group_var:
            continue
        if any(id(inner) in replaced for inner in O.walk(op.input)):
            continue  # a γ over a cached γ: the upper Δ-script maintains it
        types = scan_types(op.input, table_types)
        key = tuple(k for k, _ in op.keys)
        fields = tuple((k, Var(k)) for k in key) + tuple((v, Var(v)) for v, _ in op.aggregates)
        cache_plan = O.ReturnBag(op, TupleExpr(fields), span=op.span)
        try:
            maps = maps_of(cache_plan)
        except IdivmError:
            continue
        row_type = T.TupleType(tuple((k, static_type(t, types)) for k, t in op.keys)
                               + tuple((v, _aggregate_type(a, types)) for v, a in op.aggregates))
        name = names()
        caches.append(MapsCachePlan(name, cache_plan, row_type, key, maps))
        var = fresh_name("agg", taken)
        taken.add(var)
        scan = O.ScanCollection(O.Ground(), TableRef(name), var, span=op.span)
        replaced[id(op)] = O.Project(scan, tuple((n, Field(Var(var), n)) for n, _ in fields), span=op.span)
    if not caches:
        return None
    return MapsSplit(tuple(caches), replace_nodes(plan, replaced))  # type: ignore[arg-type]


def _aggregate_type(a: O.Aggregate, types: Mapping[str, T.TupleType]) -> T.Type:
    """The type of an aggregate's value: COUNT an int, AVG a double, SUM, MIN and MAX their
    argument's (ANY when not known)."""
    if a.function == "count":
        return T.INT
    if a.function in O.DOUBLE_AGGREGATES:
        return T.DOUBLE
    return static_type(a.arg, types)
