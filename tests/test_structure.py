"""The package's structure: modules of ``rococo_eval`` import only downward, so their imports form no cycle.

Every import counts, also one inside a function (a lazy import hides a cycle from Python, not from a reader).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rococo_eval"


def package_imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """For each module of ``package``, the modules of ``package`` it imports anywhere in its code."""
    modules = {path.stem for path in package.glob("*.py")}
    graph = {}
    for path in sorted(package.glob("*.py")):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name.split(".") for alias in node.names]
                imported.update(parts[1] for parts in names if parts[0] == package.name and len(parts) > 1)
            elif isinstance(node, ast.ImportFrom):
                parts = (node.module or "").split(".") if node.level == 0 else \
                    [package.name] + ((node.module or "").split(".") if node.module else [])
                if parts[0] != package.name:
                    continue
                if len(parts) > 1 and parts[1]:
                    imported.add(parts[1])
                else:  # from . import a, b  /  from rococo_eval import a, b
                    imported.update(alias.name for alias in node.names)
        graph[path.stem] = {name for name in imported if name in modules and name != path.stem}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None when the graph has none."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_package_imports_see_every_kind_of_import(tmp_path):
    package = tmp_path / "rococo_eval"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\nfrom .c import x\n")
    (package / "b.py").write_text("def f():\n    from rococo_eval.c import y\n")
    (package / "c.py").write_text("import rococo_eval.a\nimport os\n")
    assert package_imports(package) == {"__init__": set(), "a": {"b", "c"}, "b": {"c"}, "c": {"a"}}


def test_no_import_cycles_in_the_package():
    graph = package_imports()
    assert {"source", "configs", "download", "annotations", "files"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def readme_graph() -> dict[str, set[str]]:
    """The README's "After" module graph: ``module -> a, b`` entries, several to a line; ``(metric)`` left out."""
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("After (imports point only downward):", 1)[1].split("```")[1]
    graph: dict[str, set[str]] = {}
    for line in block.splitlines():
        if "(import nothing of the package)" in line:
            graph.update((name.strip(), set()) for name in line.split("(")[0].split(","))
            continue
        for module, targets in re.findall(r"(\w+) -> (.+?)(?=\s{2,}\w+ ->|$)", line):
            graph[module] = {name.strip() for name in targets.split(",") if name.strip() != "(metric)"}
    return graph


def test_the_readme_module_graph_is_the_code_graph():
    code = {module: imports for module, imports in package_imports().items()
            if module not in ("__init__", "__main__")}
    assert readme_graph() == code
