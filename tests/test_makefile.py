"""What the Makefile's two commands do, read from ``make -n`` (what make would run, run in a copy of the Makefile and
pyproject.toml beside stand-in install stamps): ``make run`` installs the app extra on a fresh machine, and nothing
after ``make test``, whose test extra holds it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP_INSTALL = 'pip install --quiet -e ".[app]"'


@pytest.fixture
def checkout(tmp_path):
    """The Makefile and pyproject.toml in a folder of their own, with ``.venv/bin/python`` there (a stand-in)."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()
    return tmp_path


def make_n_run(folder: Path) -> str:
    return subprocess.run(["make", "-n", "-C", str(folder), "run"], capture_output=True, text=True, check=True).stdout


def stamp(folder: Path, name: str, newer_than_pyproject: bool) -> None:
    path = folder / ".venv" / name
    path.touch()
    pyproject = (folder / "pyproject.toml").stat().st_mtime
    when = pyproject + 10 if newer_than_pyproject else pyproject - 10
    os.utime(path, (when, when))


def test_the_test_extra_holds_the_app_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "rococo-eval[app]" in extras["test"]


def test_make_run_after_make_test_installs_nothing(checkout):
    stamp(checkout, ".installed-test", newer_than_pyproject=True)
    commands = make_n_run(checkout)
    assert "pip install" not in commands and "python app.py" in commands


def test_make_run_on_a_fresh_machine_installs_the_app_extra(checkout):
    shutil.rmtree(checkout / ".venv")
    commands = make_n_run(checkout)
    assert "-m venv .venv" in commands and APP_INSTALL in commands and "python app.py" in commands


def test_make_run_after_pyproject_changed_installs_the_app_extra_only(checkout):
    stamp(checkout, ".installed-test", newer_than_pyproject=False)
    commands = make_n_run(checkout)
    assert APP_INSTALL in commands and ".[test]" not in commands
