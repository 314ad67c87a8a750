"""The shape of the house (issue 21): no import circles between library modules, no
function-level imports of our own modules, `catalog` imports nothing of `mappers`/`samplers`,
`mappers` nothing of `samplers`, and the library stays within its size budget."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("catalog", "mappers", "samplers")
#: Lines of the library (all .py files of the three packages, blank lines and docstrings too):
#: at most 20,000 without shard streaming (modules named ``*shard*``), 22,000 with it.
LINE_BUDGET = 20_000
LINE_BUDGET_WITH_SHARDS = 22_000


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """Import edges between library modules, at module or function level (``if TYPE_CHECKING``
    excluded), and every import of a library module made inside a function."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    nested: list[str] = []

    def targets(module: str, node: ast.AST) -> set[str]:
        found = set()
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, modules[module].name == "__init__.py", node)
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            # ``from . import sibling`` imports the sibling, not the package being initialized
            names = submodules if node.module is None and node.level else [base, *submodules]
        else:
            return found
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
        return found

    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    found = targets(module, child)
                    if in_function and found:
                        nested.append(f"{path.relative_to(ROOT)}:{child.lineno}")
                    edges[module] |= found
                visit(child, in_function or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(tree, False)
    return edges, nested


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in edges:
        if node not in index:
            connect(node)
    return found


def test_no_import_circles_between_library_modules():
    edges, _ = _imports(_modules())
    assert _cycles(edges) == []


def test_no_function_level_imports_of_our_own_modules():
    _, nested = _imports(_modules())
    assert nested == []


def test_packages_import_one_way():
    edges, _ = _imports(_modules())
    rank = {package: i for i, package in enumerate(PACKAGES)}
    backwards = sorted(f"{source} -> {target}" for source, targets in edges.items()
                       for target in targets
                       if rank[target.split(".")[0]] > rank[source.split(".")[0]])
    assert backwards == []


def test_library_within_its_line_budget():
    counts = {path: len(path.read_text().splitlines()) for path in _modules().values()}
    lines = sum(n for path, n in counts.items() if "shard" not in path.name)
    assert lines <= LINE_BUDGET, f"{lines} library lines without shards, budget {LINE_BUDGET}"
    total = sum(counts.values())
    assert total <= LINE_BUDGET_WITH_SHARDS, f"{total} library lines, budget {LINE_BUDGET_WITH_SHARDS}"
