"""Global provenance index selection (thesis §2.15.2) and its upper bound (§2.15.4).

Input: a view plan as the builder makes it (ending in ReturnBag), its
:class:`~idivm.provenance.ids.ProvenanceResult` (the IDs of every operator, Tables 2.1 / 2.6)
and its :class:`~idivm.diffs.base_signatures.BaseSignatures` (§2.5, §2.14.1).  Output:
:class:`IndexSelection` — the view i-diff signatures at the granularity §2.15 needs, the global
provenance indexes §2.15.2 selects from them, and the bound of §2.15.4 as a value.

**View i-diff signatures** come from :mod:`idivm.provenance.view_diffs`, which propagates the
base-table signatures through the plan.

**Upper bound (§2.15.4).**  The provenance components of base-table i-diffs (one per scan of a
base table — a table read twice gives two, differently named — one per nested
collection of a base table the view iterates, and one more per top-level scan of a bag of
scalars, whose elements are named by value and occurrence) + selects + joins (inner, left outer, semi, anti;
a table scanned over a non-Ground input is a cross product) + correlates (inner and left) +
group-bys (DISTINCT included, being γ over its variables).  Tests check the selection never
exceeds it.

Indexes are only selected for collections the view definition shows: base i-diffs of nested
collections the view does not iterate (``elite`` of Example 2.15.3) have no signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from idivm.algebra import operators as O
from idivm.algebra.expressions import TableRef
from idivm.diffs.base_signatures import BaseSignatures
from idivm.provenance.ids import ProvenanceResult
from idivm.provenance.view_diffs import ViewDiffSignature, format_levels, view_diffs

# ----------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class GlobalProvenanceIndex:
    """A global provenance index (§2.15.1) of the elements of ``collection`` (the path of a
    nested bag; ``()`` is the view's root bag) on the provenance attributes ``levels`` names
    at each level from the root down to it (``()``: none, a wildcard)."""

    collection: tuple[str, ...]
    levels: tuple[tuple[str, ...], ...]
    sources: tuple[str, ...] = ()  # the base-table signatures whose view i-diffs use it

    def __post_init__(self) -> None:
        if len(self.levels) != len(self.collection) + 1:
            raise ValueError(f"an index of {self.collection} names one attribute set per level: {self.levels}")
        if not self.levels[-1]:
            raise ValueError("an index names provenance attributes of its collection's elements")

    def serves(self, collection: tuple[str, ...], attributes) -> bool:
        """Whether the index finds the top-level rows holding the elements of ``collection``
        named by ``attributes`` of the elements alone, ``#()`` above them (§2.15.3): the
        rows a nested update i-diff such as Example 2.13.1's ``#(user_id)`` under ``#()``
        rewrites."""
        return (self.collection == collection and not any(self.levels[:-1])
                and set(self.levels[-1]) == set(attributes))

    @property
    def attributes(self) -> tuple[str, ...]:
        """The global provenance attributes of the index, root level first."""
        return tuple(dict.fromkeys(a for names in self.levels for a in names))

    def __str__(self) -> str:
        return format_levels(self.collection, self.levels)

    def to_json(self) -> dict:
        return {"collection": list(self.collection), "levels": [list(n) for n in self.levels],
                "attributes": list(self.attributes), "sources": list(self.sources)}


@dataclass(frozen=True, slots=True)
class IndexBound:
    """The upper bound of §2.15.4 on the number of indexes, by its terms."""

    base_components: int
    selects: int
    joins: int
    correlates: int
    group_bys: int

    @property
    def value(self) -> int:
        return self.base_components + self.selects + self.joins + self.correlates + self.group_bys

    def __str__(self) -> str:
        terms = [(self.base_components, "base-table provenance component"), (self.selects, "select"),
                 (self.joins, "join"), (self.correlates, "inner-correlate"), (self.group_bys, "group-by")]
        return f"{self.value} = " + " + ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in terms)

    def to_json(self) -> dict:
        return {"value": self.value, "base_components": self.base_components, "selects": self.selects,
                "joins": self.joins, "correlates": self.correlates, "group_bys": self.group_bys}


@dataclass(frozen=True, slots=True)
class IndexSelection:
    """The view i-diff signatures, the indexes chosen for them (§2.15.2) and the bound (§2.15.4)."""

    view_diffs: tuple[ViewDiffSignature, ...]
    indexes: tuple[GlobalProvenanceIndex, ...]
    bound: IndexBound

    def of(self, collection: tuple[str, ...] = ()) -> tuple[GlobalProvenanceIndex, ...]:
        return tuple(i for i in self.indexes if i.collection == collection)

    @property
    def summary(self) -> str:
        n = len(self.indexes)
        return f"{n} index{'' if n == 1 else 'es'}; upper bound (§2.15.4) {self.bound}"

    def __str__(self) -> str:
        lines = [self.summary]
        for index in self.indexes:
            lines.append(f"  {index}  <- {', '.join(index.sources)}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"selected": [i.to_json() for i in self.indexes], "bound": self.bound.to_json(),
                "view_diffs": [d.to_json() for d in self.view_diffs]}


def select_indexes(plan: O.Operator, provenance: ProvenanceResult,
                   signatures: BaseSignatures) -> IndexSelection:
    """The global provenance indexes of a view (see module doc).

    ``plan`` is the view's plan as built (the operators ``provenance.ids`` annotates)."""
    if not isinstance(plan, O.ReturnBag):
        raise ValueError("a view plan ends in ReturnBag")
    found = view_diffs(plan, provenance, signatures)
    return IndexSelection(found, _select(found), index_bound(provenance.plan, signatures))


def _select(view_diffs: Iterable[ViewDiffSignature]) -> tuple[GlobalProvenanceIndex, ...]:
    """§2.15.2: for each view i-diff signature, an index of the elements of its target
    collection on its provenance attributes, unless one exists."""
    chosen: dict[tuple, list[str]] = {}
    for d in view_diffs:
        t = d.target
        if t is None:  # names no attribute: every element, no index narrows it
            continue
        chosen.setdefault((d.path[:t], d.levels[:t + 1]), []).append(d.source)
    indexes = [GlobalProvenanceIndex(c, lv, tuple(dict.fromkeys(src))) for (c, lv), src in chosen.items()]
    return tuple(sorted(indexes, key=lambda i: (len(i.collection), i.collection, len(i.attributes),
                                               [len(n) for n in i.levels], i.levels)))


def index_bound(plan: O.Operator, signatures: BaseSignatures) -> IndexBound:
    """The §2.15.4 bound of a view plan, retouched by ID inference (see module doc for what
    each term counts)."""
    ops = list(O.walk(plan))
    scans = [op for op in ops if isinstance(op, O.ScanCollection) and isinstance(op.source, TableRef)]
    cross = sum(1 for op in scans if not isinstance(op.input, O.Ground))
    return IndexBound(
        base_components=len(scans) + sum(1 for c in signatures.collections if c.collection[1])
        + sum(1 for op in ops if isinstance(op, O.ScanCollection) and op.occurrence),
        selects=sum(1 for op in ops if isinstance(op, O.Select)),
        joins=cross + sum(1 for op in ops if isinstance(op, (O.InnerJoin, O.LeftJoin, O.SemiJoin, O.AntiJoin))),
        correlates=sum(1 for op in ops if isinstance(op, (O.InnerCorrelate, O.LeftCorrelate))),
        group_bys=sum(1 for op in ops if isinstance(op, (O.GroupBy, O.Distinct))),
    )
