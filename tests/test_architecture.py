"""The layering holds: the import graphs of the gateway and of the benchmarks have no cycles,
type-only and lazy imports included.

Why a test: each layer calls only the one below it (DESIGN.md "How data flows"); a module that
imports its caller back, even under ``TYPE_CHECKING`` or inside a function, is where that starts
to break, and nothing else would notice.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gateway"
BENCHMARKS = PACKAGE.parent / "benchmarks"


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Every module of the package at ``root`` and the modules of it that it imports, anywhere in its source."""
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # "from gateway.relay import runner" imports the submodule, "from gateway.x import y" the module.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the list of modules along it, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for child in sorted(graph[node]):
            # A package's __init__ re-exporting its submodules is not a cycle with them.
            if node.startswith(child + "."):
                continue
            if state.get(child) == 1:
                return [*stack[stack.index(child) :], child]
            if child not in state:
                found = visit(child)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_import_graph_has_no_cycles() -> None:
    graph = import_graph()
    assert "gateway.relay.runner" in graph["gateway.relay.dispatch"], "the graph builder found no imports"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_benchmarks_import_graph_has_no_cycles() -> None:
    graph = import_graph(BENCHMARKS)
    assert "benchmarks.figures" in graph["benchmarks.overhead"], "the graph builder found no imports"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_runner_commits_an_attempt() -> None:
    # docs/architecture.md: AttemptRunner is the only place an attempt is admitted, sent, committed or recorded.
    committing = sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "commit"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "log"
    )
    assert committing and set(committing) == {"gateway/relay/runner.py"}, committing


def test_only_the_entry_points_import_the_app() -> None:
    # `gateway serve` (commands/serve.py), the demo, and the entry point of each worker of `gateway serve --workers N`.
    importers = sorted(name for name, imports in import_graph().items() if "gateway.app" in imports)
    assert importers == ["gateway.commands.serve", "gateway.demo", "gateway.worker"]
