"""The package's modules import each other without a cycle (deciding, measuring and decoding each sit below the
entry point, and nothing calls back up), and the modules that decide the draft length stay small."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hf_specdec"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: modules of the package it imports}, from every import statement (in functions too: a lazy import
    still ties the two). `from pkg import name` counts as importing pkg.name where that is a module."""
    files = {_module_name(path, root): path for path in root.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    edges.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base)
        graph[name] = {edge for edge in edges if edge in files and edge != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph(PACKAGE)) == []


def test_the_cycle_check_finds_a_planted_cycle(tmp_path):
    package = tmp_path / "hf_specdec"
    for source in PACKAGE.rglob("*.py"):
        target = package / source.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.read_text())
    costs = package / "costs.py"
    costs.write_text(costs.read_text() + "\n\ndef _planted():\n    from hf_specdec.loop import speculative_decode\n")
    found = cycles(import_graph(package))
    assert any({"hf_specdec.costs", "hf_specdec.loop"} <= set(component) for component in found), found


@pytest.mark.parametrize("modules, most", [(("policy.py", "costs.py"), 600)])
def test_deciding_the_draft_length_stays_small(modules, most):
    lines = sum(len((PACKAGE / module).read_text().splitlines()) for module in modules)
    assert lines <= most, lines
