"""The package's architecture: its layers import only downward, checked by import-linter's contracts.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``); ``make test`` runs them here, through the
real ``lint-imports``, once on the package and once on a copy of it with an upward import added, so that a test
shows the contracts can fail. Every import counts, also one inside a function.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """Run ``lint-imports`` on the package under ``root`` with the project's contracts."""
    return subprocess.run([str(LINT_IMPORTS), str(ROOT / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": ""})


def test_the_layers_import_only_downward():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    names = [contract["name"] for contract in config["contracts"]]
    assert [name for name in names if f"{name} KEPT" not in result.stdout] == []


def test_an_upward_import_breaks_the_layer_contract(tmp_path):
    shutil.copytree(ROOT / "rococo_eval", tmp_path / "rococo_eval", ignore=shutil.ignore_patterns("__pycache__"))
    layout = tmp_path / "rococo_eval" / "layout.py"
    layout.write_text(layout.read_text() + "\n\ndef _upward():\n    from rococo_eval.reporting import report\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1
    assert "rococo_eval's layers import only downward BROKEN" in result.stdout
    assert "rococo_eval.layout -> rococo_eval.reporting.report" in result.stdout


def test_a_cycle_inside_a_layer_breaks_the_acyclic_contract(tmp_path):
    shutil.copytree(ROOT / "rococo_eval", tmp_path / "rococo_eval", ignore=shutil.ignore_patterns("__pycache__"))
    for module, imported in (("atomic", "download"), ("download", "atomic")):
        path = tmp_path / "rococo_eval" / "io" / f"{module}.py"
        path.write_text(path.read_text() + f"\n\ndef _cycle():\n    from rococo_eval.io import {imported}\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1
    assert "no import cycles among the modules of a layer BROKEN" in result.stdout


def test_the_public_api_is_exported_from_the_package():
    code = ("import sys, rococo_eval\n"
            "heavy = [name for name in ('torch', 'transformers', 'open_clip', 'gradio') if name in sys.modules]\n"
            "assert not heavy, heavy\n"
            "for name in rococo_eval.__all__:\n"
            "    value = getattr(rococo_eval, name)\n"
            "    module = rococo_eval._PUBLIC.get(name)\n"
            "    assert module is None or getattr(value, '__module__', module) == module, (name, value)\n"
            "print(len(rococo_eval.__all__))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 20
    import rococo_eval

    assert "__version__" in rococo_eval.__all__ and rococo_eval.score_planned.__name__ == "score_planned"


def test_no_module_imports_the_package_root():
    """The root's lazy ``__all__`` loads modules by name, which import-linter cannot follow: a module that imported
    from ``rococo_eval`` itself could reach any layer unseen. So none does (the version lives in ``version``)."""
    import grimp

    graph = grimp.build_graph("rococo_eval", cache_dir=None)
    assert graph.find_modules_that_directly_import("rococo_eval") == set()
    assert "rococo_eval.version" in graph.find_modules_directly_imported_by("rococo_eval")


def test_no_shipped_function_is_longer_than_80_lines_or_defines_a_class():
    """Issue 42: no function of the shipped code (the package and the top-level faces) runs over 80 lines with its
    decorators and docstring, and none defines a class (network modules and readers live at module level)."""
    import ast

    files = sorted((ROOT / "rococo_eval").rglob("*.py")) + [ROOT / name for name in ("app.py", "rococo_recall.py",
                                                                                     "rococo_dataset.py")]
    long, nested = [], []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                first = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
                if node.end_lineno - first + 1 > 80:
                    long.append(f"{where}: {node.end_lineno - first + 1} lines")
                nested += [f"{where}: class {inner.name}" for inner in ast.walk(node) if isinstance(inner, ast.ClassDef)]
    assert long == [] and nested == []
