"""The declared requirements agree: pyproject.toml (the package), requirements.txt and the README's YAML header (the
Space), and the code needs no newer Python than it declares."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
SHIPPED_CODE = ["rococo_eval", "rococo_recall.py", "rococo_dataset.py", "app.py"]


def _requirements(lines) -> dict[str, SpecifierSet]:
    parsed = [Requirement(line) for line in lines]
    return {canonicalize_name(requirement.name): requirement.specifier for requirement in parsed}


def _space_header() -> dict:
    match = re.match(r"---\n(.*?)\n---\n", (REPO_ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    assert match, "README.md has no YAML header"
    return yaml.safe_load(match.group(1))


def _minimum_python() -> str:
    """The lowest ``X.Y`` that ``requires-python`` allows (it must be a single ``>=X.Y``)."""
    specifier, = SpecifierSet(PROJECT["requires-python"])
    assert specifier.operator == ">=", PROJECT["requires-python"]
    return specifier.version


def test_the_space_runs_the_python_the_package_declares():
    header = _space_header()
    assert isinstance(header.get("python_version"), str), "quote python_version, or YAML reads 3.10 as 3.1"
    assert header["python_version"] == _minimum_python()
    assert Version(f"{sys.version_info.major}.{sys.version_info.minor}") in SpecifierSet(PROJECT["requires-python"])


def test_requirements_txt_matches_pyproject():
    declared = _requirements(PROJECT["dependencies"] + PROJECT["optional-dependencies"]["app"])
    space = _requirements(line.split("#")[0].strip() for line in
                          (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
                          if line.split("#")[0].strip())
    assert sorted(set(space) - set(declared)) == [], "the Space installs packages the package does not declare"
    assert {name: str(spec) for name, spec in space.items() if spec != declared[name]} == {}
    assert "numpy" in space and "gradio" in space


def test_the_code_needs_no_newer_python_than_declared():
    """vermin (a static checker, from the test extra) finds the newest language feature and standard-library name
    the shipped code uses. It cannot see methods called on instances (``error.add_note``): tests on the
    declared version cover those."""
    vermin = Path(sysconfig.get_path("scripts")) / "vermin"
    result = subprocess.run([str(vermin), "--no-tips", "--no-parse-comments", "--violations",
                             f"--target={_minimum_python()}-", *SHIPPED_CODE],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_metric_module_alone_needs_no_newer_python_than_3_9():
    """evaluate copies rococo_recall.py alone into environments as old as Python 3.9 (NumPy 1.x: see `make test`)."""
    vermin = Path(sysconfig.get_path("scripts")) / "vermin"
    result = subprocess.run([str(vermin), "--no-tips", "--no-parse-comments", "--violations", "--target=3.9-",
                             "rococo_recall.py"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
