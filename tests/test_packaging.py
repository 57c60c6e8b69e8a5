"""The declared requirements agree: pyproject.toml (the package), requirements.txt and the README's YAML header (the
Space), and the code needs no newer Python than it declares. The package builds (an sdist, and the wheel from it, as
the README's install lines say) and its wheel works in a clean virtual environment, outside the checkout."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from rococo_eval.version import __version__

REPO_ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
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


# --- the built package, installed in a clean virtual environment ---

BUILD = "python -m build"  # the README's lines (test_the_readme_install_lines_are_the_ones_tested)
INSTALL_WHEEL = "pip install dist/rococo_eval-*-py3-none-any.whl"
PACKAGE_DATA = ["data/mix_tables.npz", "data/templates/benchmark_card.md", "data/templates/coco_citation.bib",
                "data/templates/dataset_card.md"]


def _tree_files() -> list[str]:
    """The files git sees in the checkout (tracked, and untracked ones not ignored; not deleted ones), as a fresh
    clone of this tree would hold them once committed: no .venv, build/, *.egg-info or other ignored output."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, check=True).stdout.decode("utf-8").split("\0")
    return sorted(name for name in set(listed) if name and (REPO_ROOT / name).is_file())


def _text_of(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # a binary file (mix_tables.npz)
        return ""


def _readme_install_lines() -> list[str]:
    """The commands of the first ``bash`` block of README.md's "Install" section, without their comments."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Install\n(.*?)^## ", readme, re.DOTALL | re.MULTILINE).group(1)
    block = re.search(r"^```bash\n(.*?)^```", section, re.DOTALL | re.MULTILINE).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def _run(command, *, with_stderr: bool = False, **kwargs) -> str:
    """Run ``command``; its output (stdout, or both), or a failure that shows it."""
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, **kwargs)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{output[-6000:]}"
    return output if with_stderr else result.stdout


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _template_lines(name: str) -> list[str]:
    """The first three long lines of the card template ``name`` with no placeholder (a card shows them as they are)."""
    text = (REPO_ROOT / "rococo_eval" / "data" / "templates" / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if "$" not in line and len(line) > 40][:3]


def test_the_readme_install_lines_are_the_ones_tested():
    """README.md's install block holds what the tests below run, in the same form: ``pip install .`` and
    ``pip install '.[EXTRA]'`` (a declared extra) from a checkout, ``python -m build``, and the wheel installed
    from ``dist/``. The package-index name appears only as what it will be once published."""
    lines = _readme_install_lines()
    assert lines[-2:] == [BUILD, INSTALL_WHEEL]
    from_checkout = [shlex.split(line) for line in lines[:-2]]
    assert from_checkout[0] == ["pip", "install", "."]
    for words in from_checkout:
        assert words[:2] == ["pip", "install"] and len(words) == 3, words
        extras = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", words[2])
        assert extras, words
        assert set(filter(None, (extras.group(1) or "").split(","))) <= set(PROJECT["optional-dependencies"])
    install = re.search(r"^## Install\n(.*?)^## ", (REPO_ROOT / "README.md").read_text(encoding="utf-8"),
                        re.DOTALL | re.MULTILINE).group(1)
    assert "not on PyPI yet" in install and "once published on PyPI" in install


def test_the_version_is_written_in_one_place():
    """``rococo_eval/version.py`` holds the version; pyproject.toml reads it, and no other file of the tree writes it
    (the changelog's headings are history; ``==X.Y.Z`` pins of other packages may share its digits)."""
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rococo_eval.version.__version__"}
    written = re.compile(rf"(?<![\w.=<>~!]){re.escape(__version__)}(?![\w.])")
    history = {"CHANGELOG.md", "rococo_eval/version.py"}
    found = [f"{name}:{number}" for name in _tree_files() if name not in history
             for number, line in enumerate(_text_of(REPO_ROOT / name).splitlines(), 1) if written.search(line)]
    assert found == []


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The README's ``python -m build`` in a copy of the tree (``_tree_files``): the sdist, then the wheel built
    from the sdist, as pip builds one. Nothing is written into the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "tree"
    for name in _tree_files():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, tree / name)
    started = time.perf_counter()
    log = _run([sys.executable, *shlex.split(BUILD)[1:]], cwd=tree, with_stderr=True)
    print(f"python -m build: {time.perf_counter() - started:.1f} s")
    sdist, = (tree / "dist").glob("*.tar.gz")
    wheel, = (tree / "dist").glob("*.whl")
    return {"root": root, "tree": tree, "sdist": sdist, "wheel": wheel, "log": log}


@pytest.fixture(scope="module")
def venv(built, tmp_path_factory):
    """A virtual environment of its own (no system or user site-packages) where the README's pip lines run: the
    checkout's ``pip install .`` lines resolved (``--dry-run --no-deps``, so nothing lands), then the wheel
    installed for real with its dependencies. Its commands run from a folder outside the checkout, with no
    PYTHONPATH."""
    root = tmp_path_factory.mktemp("venv")
    path = root / "venv"
    python = path / "bin" / "python"
    work = root / "work"
    work.mkdir()
    env = {name: value for name, value in os.environ.items() if name not in
           {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONSAFEPATH", "VIRTUAL_ENV"}}
    checkout = str(REPO_ROOT)
    env["PATH"] = os.pathsep.join([str(path / "bin")] + [entry for entry in env.get("PATH", "").split(os.pathsep)
                                                         if entry and not entry.startswith(checkout)])
    env.update(PYTHONNOUSERSITE="1", HF_HOME=str(root / "hf"), HF_HUB_OFFLINE="1",
               ROCOCO_CACHE_DIR=str(root / "rococo-cache"))
    started = time.perf_counter()
    _run([sys.executable, "-m", "venv", path], cwd=work, env=env)
    # one pip call for all the lines (``.`` and ``'.[EXTRA]'``): one build environment, one metadata build
    lines = _readme_install_lines()[:-2]
    requirements = [word for line in lines for word in shlex.split(line)[2:]]
    out = _run([python, "-m", "pip", "install", "--dry-run", "--no-deps", *requirements], cwd=built["tree"], env=env)
    assert f"Would install rococo-eval-{__version__}" in out, (lines, out)
    created = time.perf_counter()
    wheel_pattern = shlex.split(INSTALL_WHEEL)[2]
    wheels = glob.glob(wheel_pattern, root_dir=built["tree"])
    assert wheels == [f"dist/{built['wheel'].name}"]
    # --no-compile: the modules a test imports are compiled when imported; the rest (pandas, pyarrow ...) need not be
    _run([python, "-m", "pip", "install", "--no-compile", *wheels], cwd=built["tree"], env=env)
    print(f"venv and README dry runs: {created - started:.1f} s; pip install of the wheel and its dependencies: "
          f"{time.perf_counter() - created:.1f} s")
    yield {"python": python, "bin": path / "bin", "env": env, "work": work, "root": root}
    shutil.rmtree(root, ignore_errors=True)  # some 450 MB, which pytest's last three temporary folders would keep


def _in_venv(venv, *command, **kwargs) -> str:
    return _run(command, cwd=kwargs.pop("cwd", venv["work"]), env=venv["env"], **kwargs)


def _python_in_venv(venv, code: str, *args):
    """Run ``code`` in the virtual environment; what it prints last, as JSON."""
    return json.loads(_in_venv(venv, venv["python"], "-c", code, *args).strip().splitlines()[-1])


@pytest.mark.slow
def test_build_makes_an_sdist_and_a_wheel_that_twine_passes(built):
    assert "Building wheel from sdist" in built["log"]
    assert built["sdist"].name == f"rococo_eval-{__version__}.tar.gz"
    assert built["wheel"].name == f"rococo_eval-{__version__}-py3-none-any.whl"
    out = _run([sys.executable, "-m", "twine", "check", "--strict", built["sdist"], built["wheel"]])
    assert out.count("PASSED") == 2, out


@pytest.mark.slow
def test_the_wheel_holds_every_file_of_the_package_and_the_sdist_what_a_build_needs(built):
    """Every file under rococo_eval/ in the tree (the package data too) is in the wheel, with the two top-level
    modules and nothing else; the sdist has all that and what building the wheel from it reads."""
    tree = built["tree"]
    package = {path.relative_to(tree).as_posix() for path in (tree / "rococo_eval").rglob("*") if path.is_file()}
    assert {f"rococo_eval/{name}" for name in PACKAGE_DATA} <= package
    expected = package | {"rococo_recall.py", "rococo_dataset.py"}
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = wheel.namelist()
        assert {name for name in names if ".dist-info/" not in name} == expected
        for name in expected:
            assert _sha256(wheel.read(name)) == _sha256((tree / name).read_bytes()), name
        metadata = HeaderParser().parsestr(wheel.read(f"rococo_eval-{__version__}.dist-info/METADATA").decode())
        entry_points = wheel.read(f"rococo_eval-{__version__}.dist-info/entry_points.txt").decode()
        assert wheel.read(f"rococo_eval-{__version__}.dist-info/licenses/LICENSE") == (tree / "LICENSE").read_bytes()
    assert (metadata["Name"], metadata["Version"]) == ("rococo-eval", __version__)
    assert metadata["Requires-Python"] == PROJECT["requires-python"]
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert "rococo-eval = rococo_eval.cli:main" in entry_points
    prefix = f"rococo_eval-{__version__}/"
    with tarfile.open(built["sdist"]) as sdist:
        members = {member.name.removeprefix(prefix) for member in sdist.getmembers() if member.isfile()}
    assert expected | {"README.md", "LICENSE", "pyproject.toml", "PKG-INFO"} <= members


@pytest.mark.slow
def test_the_installed_command_prints_its_help_and_the_one_version(venv):
    command = venv["bin"] / "rococo-eval"
    assert _in_venv(venv, command, "--version").strip() == f"rococo-eval {__version__}"
    assert "{run,score,attack,table,compare,from-mteb,leaderboard,worker}" in _in_venv(venv, command, "--help")
    assert _in_venv(venv, venv["python"], "-m", "rococo_eval", "--version").strip() == f"rococo-eval {__version__}"


@pytest.mark.slow
def test_the_installed_package_is_the_wheel_in_the_venv_with_its_data(venv):
    """The modules import from the environment's site-packages, nothing of the checkout is on the path, and the
    package data (dataset card templates, the published partner tables) are the tree's, read as the code reads
    them."""
    found = _python_in_venv(venv, """if True:
        import hashlib, importlib.metadata, json, sys, sysconfig
        from importlib.resources import files
        import rococo_dataset, rococo_eval, rococo_recall
        from rococo_eval.attacks.images import load_mix_table
        data = files("rococo_eval")
        table = load_mix_table("patch", 1)
        print(json.dumps({
            "purelib": sysconfig.get_path("purelib"), "path": sys.path, "prefix": sys.prefix,
            "files": [module.__file__ for module in (rococo_eval, rococo_recall, rococo_dataset)],
            "version": rococo_eval.__version__, "metadata": importlib.metadata.version("rococo-eval"),
            "data": {name: hashlib.sha256(data.joinpath(name).read_bytes()).hexdigest() for name in sys.argv[1:]},
            "templates": sorted(entry.name for entry in data.joinpath("data", "templates").iterdir()),
            "table": [list(table.partner.shape), list(table.box.shape)]}))
        """, *PACKAGE_DATA)
    purelib = Path(found["purelib"])
    assert Path(found["prefix"]).resolve() == (venv["root"] / "venv").resolve()
    assert [Path(file).parent for file in found["files"]] == [purelib / "rococo_eval", purelib, purelib]
    checkout = REPO_ROOT.resolve()
    assert not venv["work"].resolve().is_relative_to(checkout)  # the '' on sys.path
    assert [entry for entry in found["path"] if entry and Path(entry).resolve().is_relative_to(checkout)] == []
    assert found["version"] == found["metadata"] == __version__
    assert found["data"] == {name: _sha256((REPO_ROOT / "rococo_eval" / name).read_bytes()) for name in PACKAGE_DATA}
    assert found["templates"] == sorted(Path(name).name for name in PACKAGE_DATA if "templates/" in name)
    assert found["table"] == [[5000], [5000, 4]]


@pytest.mark.slow
def test_evaluate_loads_the_installed_metric_file(venv):
    result = _python_in_venv(venv, """if True:
        import json, evaluate, rococo_recall
        metric = evaluate.load(rococo_recall.__file__)
        result = metric.compute(predictions=[[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], references=[0, 1], adversarial=[2],
                                k=(1, 2))
        print(json.dumps({name: result[name] for name in
                          ("clean_recall@1", "recall@1", "recall@2", "false_rate", "attack_success_rate")}))
        """)
    assert result == {"clean_recall@1": 100.0, "recall@1": 50.0, "recall@2": 100.0, "false_rate": 50.0,
                      "attack_success_rate": 50.0}


@pytest.mark.slow
def test_the_installed_dataset_command_exports_what_load_dataset_reads(venv, annotations_dir):
    """``python -m rococo_dataset export`` (the installed module; the file itself runs as well) writes a Parquet
    folder with its card from the installed template."""
    installed = _python_in_venv(venv, "import json, rococo_dataset; print(json.dumps(rococo_dataset.__file__))")
    assert "usage: rococo_dataset.py" in _in_venv(venv, venv["python"], installed, "--help")
    out = venv["root"] / "danger"
    printed = _in_venv(venv, venv["python"], "-m", "rococo_dataset", "export", "--out", out, "--configs", "danger",
                       "--no-queries", "--annotations-dir", annotations_dir)
    assert printed.strip() == str(out)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\n") and "config_name: danger" in card
    assert set(_template_lines("dataset_card.md") + _template_lines("coco_citation.bib")) <= set(card.splitlines())
    rows = _python_in_venv(venv, """if True:
        import json, sys, datasets
        split = datasets.load_dataset(sys.argv[1], "danger", split="adversarial", cache_dir=sys.argv[2])
        print(json.dumps([split.num_rows, split[0]["is_adversarial"], split[0]["source_caption_index"]]))
        """, out, venv["root"] / "datasets-cache")
    assert rows == [25000, True, 0]


@pytest.mark.slow
def test_the_installed_attack_command_makes_a_benchmark_load_dataset_reads(venv, image_set):
    """A generated benchmark (the image attacks need no extra) from the installed ``rococo-eval attack``: its card
    comes from the installed template, and ``load_dataset`` reads it."""
    out = venv["root"] / "bench"
    _in_venv(venv, venv["bin"] / "rococo-eval", "attack", image_set / "set.json", "--out", out, "--strategies", "image",
             "--seeds", "1", "--quiet")
    card = (out / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\n") and "config_name: patch_seed1" in card
    assert set(_template_lines("benchmark_card.md")) <= set(card.splitlines())
    rows = _python_in_venv(venv, """if True:
        import json, sys, datasets
        split = datasets.load_dataset(sys.argv[1], "patch_seed1", split="adversarial", cache_dir=sys.argv[2])
        print(json.dumps([split.num_rows, split.column_names]))
        """, out, venv["root"] / "datasets-cache")
    assert rows[0] == 12 and {"image", "partner_index", "box"} <= set(rows[1])


@pytest.mark.slow
def test_an_installed_rococo_eval_takes_its_extras_by_name(venv):
    """What the README and the commands' hints say (``pip install 'rococo-eval[models]'``) works once the package is
    installed, though the package index has no rococo-eval: the installed one satisfies it, and only the extra's
    packages would be added (``docs``, the lightest extra, resolved without installing)."""
    out = _in_venv(venv, venv["python"], "-m", "pip", "install", "--dry-run", "rococo-eval[docs]")
    would = re.search(r"^Would install (.*)$", out, re.MULTILINE).group(1).split()
    assert "mkdocs-1.6.1" in would and not any(name.startswith("rococo") for name in would)
