"""The Δ-script: what maintenance of one view runs (thesis §2.4 pass 3, Fig. 2.7).

A :class:`DeltaScript` is an immutable value: per base table, which
attributes the view reads and which of them are conditional (so that the
executor routes each change to the right i-diff); and a list of
:class:`Statement` s, each an i-diff query of the view, written as algebra
plans over the base-table i-diffs (:class:`DiffRef`) and states (:class:`StateRef`),
the names of their scans (``TableRef(DiffRef("parts", UPDATES))``).  They print as:

``Δ(T)`` (kind :data:`KEYS`)
    the keys of T's rows inserted, deleted or updated in a conditional
    attribute (a replace i-diff: ``#(k) {type: delete}`` + ``#(k) {type:
    insert, post}``);
``Δu(T)`` (:data:`UPDATES`)
    T's rows whose non-conditional attributes were updated: post values, and
    the pre values in the field ``__idivm_pre``;
``Δ(T.a)`` (:data:`KEYS` of an :class:`ElementDiffs`)
    the elements of nested collection ``a`` of T that updates of T inserted, deleted or
    changed, for a collection the view only unnests (§2.14.2): T's key and the elements'
    identity (value, position — ``Δ(T.a AT)`` — or declared element key);
``Δpost(T)`` / ``Δpre(T)`` (:data:`POST_ROWS` / :data:`PRE_ROWS`)
    the rows of ``Δ(T)``'s keys in the post state (those that exist after the
    change) / in the pre state (those that existed before): the insert and the
    delete halves of the replace i-diff with all their values, which semantic
    minimization (:mod:`idivm.generator.minimize`) reads instead of ``T@post`` /
    ``T@pre`` semijoined with ``Δ(T)``;
``T@post`` / ``T@pre`` (:data:`POST` / :data:`PRE`)
    the post state (the versions maintenance pins) / the pre state (the view's
    watermark) of T.

Statements are applied together, as one MERGE into the view (see
:mod:`idivm.exec.delta_script`).  ``render()`` prints the script for
``explain``; ``to_json()`` is what ``explain``'s JSON holds of it.  The rules of
:mod:`idivm.rules` build statements, the driver of :mod:`idivm.generator` composes and
minimizes them, :mod:`idivm.exec` runs them: all import this module, which imports none
of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from idivm.algebra import operators as O, restrict
from idivm.algebra.expressions import TableRef, TupleExpr
from idivm.algebra.printer import format_plan
from idivm.provenance.ids import HIDDEN, PROV_FIELD as PROV
from idivm.types import TupleType

#: the kinds of base-table i-diffs a Δ-script reads, as they print: the keys of a replace,
#: the rows of an update, the rows of a replace's keys before and after the change
KEYS, UPDATES, PRE_ROWS, POST_ROWS = "Δ", "Δu", "Δpre", "Δpost"
DIFF_KINDS = (KEYS, UPDATES, PRE_ROWS, POST_ROWS)
#: the states of a base table a Δ-script reads: at the view's watermark, at the pinned versions
PRE, POST = "pre", "post"
STATES = (PRE, POST)
#: the field of a ``Δu(T)`` row holding the pre values of T's non-key attributes (a tuple)
PRE_FIELD = f"{HIDDEN}pre"
#: statement kinds that name the elements of a stored bag by their provenance (found through a
#: global provenance index, or by searching the bags)
NESTED_KINDS = ("nested_update", "nested_replace")
#: the column of a nested replace's ``rows`` holding the post-state element
ELEMENT = f"{HIDDEN}element"


#: how the elements of a nested collection are named: by their value (a bag of scalars), by
#: their position (``AT``), or by the declared element key of a collection of tuples
IDENTITIES = ("value", "position", "key")


@dataclass(frozen=True)
class ElementDiffs:
    """A nested collection attribute of a base table whose changes become element i-diffs
    (thesis §2.14.2): an update of the row that inserts, deletes or changes elements of
    ``attribute`` is the replace i-diff of those elements only, named by the row's key and
    the elements' ``identity`` (``key``: the fields ``element_key``), in ``Δ(<source>)``."""

    attribute: str
    identity: str
    element_key: tuple[str, ...] = ()

    def source(self, table: str) -> str:
        return f"{table}.{self.attribute}" + (" AT" if self.identity == "position" else "")

    def columns(self) -> tuple[str, ...]:
        """The columns of ``Δ(<source>)`` naming an element (after the table's key columns)."""
        if self.identity == "key":
            return tuple(f"{HIDDEN}element_{k}" for k in self.element_key)
        return (f"{HIDDEN}{'position' if self.identity == 'position' else 'element'}",)

    def describe(self) -> str:
        how = {"value": "by value", "position": "by position",
               "key": f"by key {', '.join(self.element_key)}"}[self.identity]
        return f"elements of {self.attribute} {how}"

    def to_json(self) -> dict:
        return {"attribute": self.attribute, "identity": self.identity, "element_key": list(self.element_key)}


@dataclass(frozen=True, slots=True)
class DiffRef:
    """A base-table i-diff a Δ-script reads: the i-diff of ``kind`` (one of
    :data:`DIFF_KINDS`) of ``table``, or with ``elements``, the element i-diff (kind
    :data:`KEYS`) of that nested collection of ``table``.  Prints as ``Δu(parts)``."""

    table: str
    kind: str
    elements: ElementDiffs | None = None

    def __post_init__(self):
        if self.kind not in DIFF_KINDS:
            raise ValueError(f"not a kind of base i-diff: {self.kind!r}")
        if self.elements is not None and self.kind != KEYS:
            raise ValueError(f"element i-diffs are of kind {KEYS}, not {self.kind}")

    @property
    def source(self) -> str:
        """What the i-diff's rows are changes of: the table, or its collection ``T.a`` (``T.a AT``)."""
        return self.table if self.elements is None else self.elements.source(self.table)

    def __str__(self) -> str:
        return f"{self.kind}({self.source})"


@dataclass(frozen=True, slots=True)
class StateRef:
    """A state of a base table (or cache) a Δ-script reads: ``state`` one of :data:`STATES`.
    Prints as ``parts@post``."""

    table: str
    state: str

    def __post_init__(self):
        if self.state not in STATES:
            raise ValueError(f"not a state of a base table: {self.state!r}")

    def __str__(self) -> str:
        return f"{self.table}@{self.state}"


@dataclass(frozen=True, slots=True)
class Origin:
    """A base-table i-diff a statement starts from, with the variable its scan binds.
    Prints as ``Δu(parts) AS parts``."""

    diff: DiffRef
    var: str

    def __str__(self) -> str:
        return f"{self.diff} AS {self.var}"


@dataclass(frozen=True)
class TableDiffs:
    """How the executor turns a base table's change data feed into i-diffs."""

    table: str
    key: tuple[str, ...]
    read: tuple[str, ...]  # non-key attributes the view reads (changes of others are dropped)
    conditional: tuple[str, ...]  # updates of these become replace i-diffs; others update i-diffs
    #: nested collections the view only unnests: their changes become element i-diffs
    elements: tuple[ElementDiffs, ...] = ()
    #: tuple attributes the view reads only in part: (attribute, the paths below it it reads);
    #: a change elsewhere in them is dropped
    partial: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = ()

    def reads(self) -> list[str]:
        """What the view reads, for ``explain``: attributes, paths in tuple attributes, elements."""
        partial = dict(self.partial)
        return [p for a in self.read for p in ([".".join((a,) + s) for s in partial[a]] if a in partial else [a])] \
            + [f"{e.describe()} ({DiffRef(self.table, KEYS, e)})" for e in self.elements]

    def to_json(self) -> dict:
        out = {"table": self.table, "key": list(self.key), "read": list(self.read),
               "conditional": list(self.conditional)}
        if self.elements:
            out["elements"] = [e.to_json() for e in self.elements]
        if self.partial:
            out["paths"] = {a: [".".join(s) for s in subs] for a, subs in self.partial}
        return out


@dataclass(frozen=True)
class Statement:
    """One i-diff query of the view.

    kind ``replace``: delete the view rows whose ID columns ``on`` take the values
    of ``keys`` (all rows if ``keys`` is None), and insert ``rows`` (the post state of
    the view under those IDs).  ``pre_rows`` (tuple-based maintenance) computes the
    deleted rows from the pre state instead of naming them by ID.
    kind ``update``: ``query`` has the columns ``on`` and, for each ``(column,
    value)`` of ``set``, the new value of the view column.
    kind ``increment``: like update, the values are added to the view columns.
    kind ``nested_update``: in every view row, the elements of the bag in column ``path``
    whose provenance fields ``match`` equal a row of ``query`` get, for each ``(field path,
    value)`` of ``set``, the new value of the field the path names inside the element: one
    name for a field of the element (``("elite",)``), more for a field of a tuple the element
    holds (``("users", "elite")`` in a GROUP AS member) (thesis §2.12.3, §2.13, §2.14.2).
    With ID columns ``on`` (also columns of ``query``), the elements a row of ``query`` names
    are in the view row with those IDs.
    kind ``nested_replace``: in every view row, the elements of the bag in column ``path``
    whose provenance fields ``match`` equal a row of ``keys`` (its columns: the second of each
    pair) are deleted, and each row of ``rows`` -- the view ID columns ``on`` and the element in
    column :data:`ELEMENT` -- is inserted into the bag of the view row it names, if that row
    exists (thesis Tables E.3, E.4 on the nested side, §2.14.2).
    """

    kind: str
    #: the base-table i-diffs it starts from (several for merged replaces)
    starts: tuple[Origin, ...]
    on: tuple[str, ...] = ()
    keys: O.Operator | None = None
    rows: O.Operator | None = None
    pre_rows: O.Operator | None = None
    query: O.Operator | None = None
    #: (view column, query column); nested_update: (field path inside the element, query column)
    set: tuple[tuple[str | tuple[str, ...], str], ...] = ()
    rules: tuple[str, ...] = ()
    #: nested_update, nested_replace: the view column holding the bag, and (provenance field,
    #: query column (nested_replace: column of ``keys``))
    path: str = ""
    match: tuple[tuple[str, str], ...] = ()

    def names_rows_by_id(self) -> bool:
        """Whether a nested update's query, or a nested replace's keys, also hold the view ID
        columns ``on`` of the row holding each element they name (the members of a group: its
        ID is the group key), so that the rows are found by ID rather than by the elements'
        provenance."""
        if self.kind == "nested_update":
            return bool(self.on)
        element = self.keys.element if isinstance(self.keys, O.ReturnBag) else None
        return self.kind == "nested_replace" and isinstance(element, TupleExpr) and \
            set(self.on) <= {n for n, _ in element.fields}

    @property
    def origin(self) -> str:
        """The i-diffs it starts from, as ``explain`` prints them: ``Δu(parts) AS parts``
        (``; `` between)."""
        return "; ".join(self.origins())

    def origins(self) -> tuple[str, ...]:
        return tuple(str(o) for o in self.starts)

    def plans(self) -> tuple[tuple[str, O.Operator], ...]:
        named = (("keys", self.keys), ("rows", self.rows), ("pre rows", self.pre_rows), ("query", self.query))
        return tuple((n, p) for n, p in named if p is not None)

    def reads(self) -> tuple[str, ...]:
        """The i-diffs and base-table states the statement reads (``parts@pre``, ``Δ(parts)``)."""
        names = {str(op.source.name) for _, p in self.plans() for op in O.walk(p)
                 if isinstance(op, O.ScanCollection) and isinstance(op.source, TableRef)}
        return tuple(sorted(names))

    def restrictions(self) -> tuple[str, ...]:
        """The reads of base-table states its plans may restrict to the keys their i-diffs
        name (:mod:`idivm.algebra.restrict`), for ``explain``: ``reviews@post by business_id from
        Δpost(businesses)`` (the tables whose values give the keys; the run applies it when
        the column's type is a key type and the values are few enough)."""
        out = set()
        for _, plan in self.plans():
            once = restrict.scanned_once(plan)
            for c in restrict.candidates(plan):
                name = c.scan.source.name  # type: ignore[attr-defined]
                if id(c.scan) in once and not isinstance(name, DiffRef):
                    sources = sorted({str(x.source.name) for x in restrict.table_scans(c.source)})  # type: ignore
                    out.add(f"{name} by {c.column} from {', '.join(sources) or 'no table'}")
        return tuple(sorted(out))

    def describe(self) -> str:
        on = ", ".join(self.on) or "every row"
        match self.kind:
            case "replace":
                how = "by tuple (pre state)" if self.pre_rows is not None else f"by ID ({on})"
                return f"replace: delete {how}, insert the post state"
            case "update":
                return f"update by ID ({on}): set " + ", ".join(f"{c} := {v}" for c, v in self.set)
            case "nested_update":
                named = ", ".join(f"{PROV}.{p} = {c}" for p, c in self.match)
                found = f"in the rows named by ID ({on})" if self.names_rows_by_id() else "found by path navigation"
                return (f"update the elements of {self.path} named by partial provenance ({named}), "
                        f"{found}: set " + ", ".join(f"{'.'.join(f)} := {v}" for f, v in self.set))
            case "nested_replace":
                named = ", ".join(f"{PROV}.{p} = {c}" for p, c in self.match)
                found = f"in the rows named by ID ({on})" if self.names_rows_by_id() else "found by path navigation"
                return (f"replace the elements of {self.path} named by partial provenance ({named}), {found}: "
                        f"delete them, insert the post-state elements into the rows named by ID ({on})")
            case _:
                return f"increment by ID ({on}): " + ", ".join(f"{c} += {v}" for c, v in self.set)

    def to_json(self) -> dict:
        out = {"kind": self.kind, "origin": self.origin, "on": list(self.on),
               "set": [[list(f) if isinstance(f, tuple) else f, v] for f, v in self.set],
               "rules": list(self.rules), "reads": list(self.reads()),
               "restricted_reads": list(self.restrictions()),
               "plans": {n: format_plan(p) for n, p in self.plans()}}
        if self.kind in NESTED_KINDS:
            out |= {"path": self.path, "match": [list(p) for p in self.match]}
        return out


@dataclass(frozen=True)
class Cache:
    """An intermediate cache (§2.4 pass 3) or an operator cache of AVG: table ``name`` holding
    the rows of ``plan`` (a plan over base tables, with its hidden ID columns), maintained by its
    own ``script`` (which may read earlier caches) before the view, whose statements read it
    like a base table keyed by ``key`` (the hidden ID columns; for an operator cache, the group
    keys they copy) — see :mod:`idivm.generator.caches`, :mod:`idivm.generator.operator_caches`."""

    name: str
    plan: O.ReturnBag
    key: tuple[str, ...]
    type: TupleType
    script: "DeltaScript | None"
    #: the maps that maintain the cache instead of a script (:mod:`idivm.generator.maps_caches`)
    maps: Any = None

    def to_json(self) -> dict:
        out = {"name": self.name, "key": list(self.key), "type": self.type.to_json(), "plan": format_plan(self.plan)}
        if self.script is not None:
            out["script"] = self.script.to_json()
        if self.maps is not None:
            out["maps"] = sorted(self.maps.program.maps)
        return out


@dataclass(frozen=True)
class DeltaScript:
    view: str
    strategy: str  # "id" or "tuple"
    tables: tuple[TableDiffs, ...]
    statements: tuple[Statement, ...]
    id_columns: tuple[str, ...] = field(default=())
    #: intermediate caches, maintained in this order before the view's statements run
    caches: tuple[Cache, ...] = field(default=())

    def table(self, name: str) -> TableDiffs | None:
        return next((t for t in self.tables if t.table == name), None)

    def render(self) -> str:
        lines = []
        for c in self.caches:
            lines.append(f"cache {c.name} (IDs {', '.join(c.key)}), the rows of:")
            lines.append(_indent(format_plan(c.plan), 2))
            if c.maps is not None:
                lines.append(_indent(f"maintained by the maps {', '.join(sorted(c.maps.program.maps))} "
                                     "(their trigger program under 'maps of cache')", 2))
            else:
                lines.append(c.script.render())
            lines.append("")
        lines.append(f"Δ-script of {self.view} ({self.strategy}-based, thesis §2.4 / Fig. 2.7):")
        for t in self.tables:
            lines.append(f"  {t.table} (key {', '.join(t.key)}): reads {', '.join(t.reads()) or 'no attribute'}; "
                         f"conditional: {', '.join(t.conditional) or 'none'}")
        for i, s in enumerate(self.statements, 1):
            lines.append(f"Δ{i} from {s.origin}: {s.describe()}")
            lines.append(f"  reads: {', '.join(s.reads())}")
            if restricted := s.restrictions():
                lines.append(f"  restricted reads: {'; '.join(restricted)}")
            for r in s.rules:
                lines.append(f"  rule: {r}")
            for name, plan in s.plans():
                lines.append(f"  {name}:")
                lines.append(_indent(format_plan(plan), 4))
        return "\n".join(lines)

    def to_json(self) -> dict:
        out = {"view": self.view, "strategy": self.strategy, "id_columns": list(self.id_columns),
               "tables": [t.to_json() for t in self.tables],
               "statements": [s.to_json() for s in self.statements]}
        if self.caches:
            out["caches"] = [c.to_json() for c in self.caches]
        return out


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())
