"""What ``explain`` prints: every define-time fact about a view, as text or JSON.

Sections: the view's type and IDs; the declared schemas of the base tables it reads (when one
has one); the plan annotated with the IDs of every
operator (thesis Fig. 2.5a, Table 2.1 / 2.6); the base-table i-diff signatures
(§2.5, §2.14.1); the global provenance indexes selected for the view's i-diffs
(§2.15.2) with the upper bound of §2.15.4; the Δ-script; for an aggregate view, the trigger
program of its higher-order delta maps, or why it has none.  Each section is
printed from the immutable values the pipeline stages produce; nothing is
computed here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

from idivm.algebra import operators as O
from idivm.algebra.builder import ViewPlan
from idivm.algebra.printer import describe, format_plan
from idivm.declared_schema import DeclaredSchema
from idivm.diffs.base_signatures import BaseSignatures
from idivm.script import DeltaScript
from idivm.provenance.ids import ProvenanceResult
from idivm.provenance.indexes import GlobalProvenanceIndex, IndexSelection


@dataclass(frozen=True)
class Explanation:
    view: ViewPlan
    provenance: ProvenanceResult
    signatures: BaseSignatures
    #: the ID-based Δ-script, or why there is none (constructs without i-diff rules)
    script: DeltaScript | None = None
    no_script: str = ""
    indexes: IndexSelection | None = None
    #: per selected index: how it is stored and which statements use it
    index_notes: Mapping[GlobalProvenanceIndex, str] = field(default_factory=dict)
    #: for a defined view: its strategy, and for ``auto`` what its recorded runs estimate
    strategy: str = ""
    #: the maps strategy's trigger program (:mod:`idivm.exec.maps`), or why it has none
    maps: str = ""
    no_maps: str = ""
    #: the base tables the view reads that have a declared schema, and that schema
    declared_schemas: Mapping[str, DeclaredSchema] = field(default_factory=dict)

    def to_text(self) -> str:
        unknown = self.provenance.unknown
        ids = f"unknown ({unknown.message}): the view is recomputed" if unknown is not None else \
            "{" + ", ".join(n for _, n in self.provenance.view_ids) + "}"
        script = self.script.render() if self.script is not None else f"no Δ-script: {self.no_script}"
        return "\n".join([
            f"view {self.view.name}: {self.view.type}",
            f"IDs: {ids}",
            *([f"strategy: {self.strategy}"] if self.strategy else []),
            *(["", "declared schemas of the base tables:", self._declared()] if self.declared_schemas else []),
            "",
            "plan (IDs of each operator, thesis Table 2.1 / 2.6):",
            format_plan(self.view.plan, self.provenance.annotate),
            "",
            "base-table i-diff signatures (§2.5, §2.14.1):",
            str(self.signatures),
            "",
            *(["global provenance indexes (§2.15.2):", self._indexes(), ""] if self.indexes is not None else []),
            script,
            *(["", "higher-order delta maps (strategy maps; DBToaster §4-§6):", self.maps] if self.maps else
              ["", f"no higher-order delta maps: {self.no_maps}"] if self.no_maps else []),
        ])

    def _declared(self) -> str:
        lines = []
        for table, declared in self.declared_schemas.items():
            text = declared.text.strip().splitlines()
            lines.append(f"  {table} ({declared.summary()}): {text[0] if text else ''}")
            lines += [f"    {line}" for line in text[1:]]
        return "\n".join(lines)

    def _indexes(self) -> str:
        lines = [self.indexes.summary]
        for index in self.indexes.indexes:
            lines.append(f"  {index}  <- {', '.join(index.sources)}")
            if self.index_notes.get(index):
                lines.append(f"    {self.index_notes[index]}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        def node(op: O.Operator) -> dict:
            ids = self.provenance.ids.get(op)
            out = {"operator": op.name, "text": describe(op), "ids": ids.to_json() if ids else None}
            ins = [node(i) for i in op.inputs() if not isinstance(i, O.Ground)]
            if ins:
                out["inputs"] = ins
            if op.nested():
                out["nested"] = [node(n) for n in op.nested()]
            return out

        return {
            "view": self.view.name,
            "type": self.view.type.to_json(),
            "ids": [{"column": c, "name": n} for c, n in self.provenance.view_ids],
            **({"strategy": self.strategy} if self.strategy else {}),
            **({"declared_schemas": {t: {**d.to_json(), "open_records": sorted(d.open_records)}
                                     for t, d in self.declared_schemas.items()}} if self.declared_schemas else {}),
            "plan": node(self.view.plan),
            "base_signatures": self.signatures.to_json(),
            **({"indexes": {**self.indexes.to_json(),
                            "notes": [self.index_notes.get(i, "") for i in self.indexes.indexes]}}
               if self.indexes is not None else {}),
            "delta_script": self.script.to_json() if self.script is not None else {"none": self.no_script},
            **({"maps": self.maps.splitlines() if self.maps else {"none": self.no_maps}}
               if self.maps or self.no_maps else {}),
        }

    def render(self, format: str = "text") -> str:
        if format == "json":
            return json.dumps(self.to_json(), indent=2, ensure_ascii=False)
        if format != "text":
            raise ValueError(f"unknown explain format {format!r}")
        return self.to_text()
