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
from idivm.algebra.builder import VALUE_COLUMN, ViewPlan, scalar_type
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
            f"view {self.view.name}: {self._type()}",
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

    def _type(self) -> str:
        values = scalar_type(self.view.type)
        if values is None:
            return str(self.view.type)
        return f"{{{{{values}}}}} (values, stored in column {VALUE_COLUMN})"

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
            **({"values": values.to_json()} if (values := scalar_type(self.view.type)) is not None else {}),
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

    def to_dot(self) -> str:
        """The plan and the Δ-script as a Graphviz graph: each operator (with its IDs) below the
        operators that read it, nested plans by dashed edges; each statement of the Δ-script
        with the i-diffs, base-table states and caches it reads, the provenance indexes that
        find its rows, and the view it writes; the maps' trigger program as a note."""
        graph = DotGraph(self.view.name)
        view_node = graph.node(f"view {self.view.name}\nIDs: " + ", ".join(n for _, n in self.provenance.view_ids),
                               shape="box", style="bold")
        nodes: dict[int, str] = {}

        def operator(op: O.Operator, cluster: list[str]) -> str:
            if id(op) in nodes:
                return nodes[id(op)]
            ids = self.provenance.ids.get(op)
            label = _wrapped(describe(op)) + (f"\n{ids}" if ids is not None else "")
            name = nodes[id(op)] = graph.node(label, shape="box", into=cluster)
            for child in op.inputs():
                if not isinstance(child, O.Ground):
                    graph.edge(operator(child, cluster), name)
            for plan in op.nested():
                graph.edge(operator(plan, cluster), name, style="dashed", label="nested")
            return name

        plan_nodes: list[str] = []
        graph.edge(operator(self.view.plan, plan_nodes), view_node, label="materializes")
        graph.cluster("plan (IDs of each operator, thesis Table 2.1 / 2.6)", plan_nodes)
        if self.script is not None:
            script_nodes: list[str] = []
            reads: dict[str, str] = {}
            statements = []
            for i, statement in enumerate(self.script.statements, 1):
                node = graph.node(f"Δ{i} from {_wrapped(statement.origin)}\n{_wrapped(statement.describe())}",
                                  shape="note",
                                  into=script_nodes)
                statements.append(node)
                for read in statement.reads():
                    if read not in reads:
                        cache = any(c.name == read.split("@")[0] for c in self.script.caches)
                        reads[read] = graph.node(("cache " if cache else "") + read,
                                                 shape="cylinder" if cache else "ellipse", into=script_nodes)
                    graph.edge(reads[read], node, label="reads")
                graph.edge(node, view_node, label="writes", style="dotted")
            from idivm.exec.indexes import read_by

            for index in self.indexes.indexes if self.indexes is not None else ():
                users = read_by(index, self.script.statements)
                if users:
                    node = graph.node(f"index {index}\n{self.index_notes.get(index, '')}", shape="cylinder",
                                      into=script_nodes)
                    for i in users:
                        graph.edge(node, statements[i - 1], label="finds rows")
            graph.cluster(f"Δ-script ({self.script.strategy}-based, thesis §2.4)", script_nodes)
        else:
            graph.node(f"no Δ-script: {self.no_script}", shape="plaintext")
        if self.maps:
            graph.node("higher-order delta maps:\n" + self.maps, shape="note")
        return graph.text()

    def render(self, format: str = "text") -> str:
        if format == "json":
            return json.dumps(self.to_json(), indent=2, ensure_ascii=False)
        if format == "dot":
            return self.to_dot()
        if format != "text":
            raise ValueError(f"unknown explain format {format!r}")
        return self.to_text()


class DotGraph:
    """A Graphviz digraph being written: nodes ``n0``, ``n1``, ... with quoted labels."""

    def __init__(self, name: str):
        self.name = name
        self._nodes: list[str] = []
        self._edges: list[str] = []
        self._clusters: list[tuple[str, list[str]]] = []

    def node(self, label: str, into: list[str] | None = None, **attributes: str) -> str:
        name = f"n{len(self._nodes)}"
        self._nodes.append(f"  {name} [{_attributes(label=label, **attributes)}];")
        if into is not None:
            into.append(name)
        return name

    def edge(self, tail: str, head: str, **attributes: str) -> None:
        self._edges.append(f"  {tail} -> {head}" + (f" [{_attributes(**attributes)}]" if attributes else "") + ";")

    def cluster(self, label: str, nodes: list[str]) -> None:
        self._clusters.append((label, nodes))

    def text(self) -> str:
        clustered = {n for _, ns in self._clusters for n in ns}
        lines = [f"digraph {_quoted(self.name)} {{", "  rankdir=BT;",
                 '  node [fontname="Helvetica", fontsize=10];', '  edge [fontname="Helvetica", fontsize=9];']
        by_name = {line.split()[0]: line for line in self._nodes}
        for i, (label, names) in enumerate(self._clusters):
            lines.append(f"  subgraph cluster_{i} {{")
            lines.append(f"    {_attributes(label=label)};")
            lines += ["  " + by_name[n] for n in names]
            lines.append("  }")
        lines += [line for line in self._nodes if line.split()[0] not in clustered]
        lines += self._edges
        lines.append("}")
        return "\n".join(lines)


def _wrapped(text: str, width: int = 60) -> str:
    """``text`` in lines of at most about ``width`` characters."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)) or text


def _quoted(text: str) -> str:
    """A DOT string: backslashes and quotes escaped, line breaks as DOT's ``\\n``."""
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{out}"'


def _attributes(**attributes: str) -> str:
    return ", ".join(f"{k}={_quoted(v)}" for k, v in attributes.items())


#: the picture formats Graphviz's ``dot`` draws a DOT graph in
PICTURE_FORMATS = ("svg", "png")

GRAPHVIZ_MISSING = ("drawing needs Graphviz's 'dot' program: install Graphviz (e.g. 'apt-get install graphviz'), "
                    "or print the graph with --format dot")


def draw(dot: str, format: str) -> bytes:
    """The DOT graph ``dot`` drawn by Graphviz's ``dot`` as ``format`` (svg, png).  Raises
    :class:`SetupError` when Graphviz is not installed."""
    import shutil
    import subprocess

    from idivm.errors import InternalError, SetupError

    if format not in PICTURE_FORMATS:
        raise ValueError(f"unknown picture format {format!r}")
    program = shutil.which("dot")
    if program is None:
        raise SetupError(GRAPHVIZ_MISSING)
    done = subprocess.run([program, f"-T{format}"], input=dot.encode("utf-8"), capture_output=True)
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise InternalError(f"Graphviz failed to draw the plan: {reason[0] if reason else done.returncode}")
    return done.stdout
