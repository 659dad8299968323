"""The import graph of ``idivm/`` has no cycles: every import a module makes, at its top or
inside a function, goes to a module that does not import it back, directly or through
others.  (A package's ``__init__`` importing its own submodules is an edge like any other.)
And the compile pipeline's stages import only stages before them (:data:`STAGES`): the rules
build statements of the Δ-script (``idivm.script``) but never import the generator driving them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "idivm"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path, node: ast.Import | ast.ImportFrom, modules) -> list[str]:
    """The modules of ``idivm`` an import statement of ``module`` (at ``path``) loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    out = []
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.append(name)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module].update(_imported(module, path, node, modules))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


#: the stages of the compile pipeline in order (a stage's modules may import those of its own
#: stage and of earlier ones); ``idivm.<name>`` is a package or a module
STAGES = (("types", "errors", "tree", "grammars"), ("sqlpp",), ("algebra",), ("diffs",), ("provenance",), ("script",),
          ("rules",), ("generator",), ("exec",))


def _stage(module: str) -> int | None:
    parts = module.split(".")
    return next((i for i, names in enumerate(STAGES) if len(parts) > 1 and parts[1] in names), None)


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports of a module of one stage of :data:`STAGES` that go to a later stage."""
    return sorted((m, d) for m, ds in graph.items() for d in ds
                  if _stage(m) is not None and _stage(d) is not None and _stage(d) > _stage(m))  # type: ignore


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_idivm_has_no_import_cycles():
    graph = import_graph()
    assert "idivm.warehouse" in graph and "idivm.storage.delta" in graph["idivm.warehouse"]
    assert cycles(graph) == []


def test_the_stage_check_finds_an_upward_import():
    graph = {"idivm.rules.scan": {"idivm.generator.generate", "idivm.script"}, "idivm.generator.generate": set(),
             "idivm.script": {"idivm.algebra.operators"}, "idivm.algebra.operators": set()}
    assert upward_imports(graph) == [("idivm.rules.scan", "idivm.generator.generate")]


def test_the_compile_pipeline_imports_only_earlier_stages():
    assert upward_imports(import_graph()) == []
