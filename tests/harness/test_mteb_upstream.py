"""RoCOCO's tasks in MTEB's own form (``rococo_eval/harness/mteb_upstream``): the task file is what MTEB's pull request
template asks, MTEB's own task tests (``../shared/reference/mteb-official``) pass on a copy of the installed ``mteb``
that holds the task file and statistics, the data goes to the Hub in MTEB's retrieval format, and MTEB's standard
loader on that data gives the numbers of the project's tasks (which give ``rococo-eval run``'s:
``test_mteb_tasks.py``). Real MTEB, a real (fake-Hub) upload, MTEB's random baseline encoder."""

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import mteb
import pytest

import rococo_dataset
from helpers import REPO_ROOT
from rococo_eval.catalog import CLEAN, IMAGE_ATTACKS, IMAGE_TO_TEXT, TEXT_ATTACKS, TEXT_TO_IMAGE
from rococo_eval.harness.mteb_tasks import MAIN_SCORE, mteb_tasks
from rococo_eval.harness.mteb_results import task_name
from rococo_eval.harness.mteb_upload import pin_revisions, push_tasks
from rococo_eval.harness.mteb_upstream import KNOWN_ISSUES, STATISTICS_FOLDER, TASK_FILE, UPSTREAM_TASKS

MTEB_TESTS = Path("tests") / "test_tasks"
RANDOM_ENCODER = "mteb/baseline-random-encoder"


def mteb_reference() -> Path:
    """MTEB's selected files (``../shared/reference/mteb-official``, beside the checkout or beside the folder of
    worktrees that holds it)."""
    for shared in (REPO_ROOT.parent / "shared", REPO_ROOT.parents[1] / "shared"):
        if (shared / "reference" / "mteb-official" / MTEB_TESTS).is_dir():
            return shared / "reference" / "mteb-official"
    raise AssertionError(f"MTEB's reference files are missing: expected ../shared/reference/mteb-official beside "
                         f"{REPO_ROOT}")


def test_the_task_file_is_mtebs_form_one_static_class_per_gallery():
    """Module-level ``AbsTaskRetrieval`` classes with nothing but static metadata (MTEB's standard loader reads the
    data; their base adds RoCOCO's false rate through MTEB's public ``task_specific_scores``), importing only
    ``mteb``; one per RoCOCO gallery, each seed of an image attack its own gallery."""
    tree = ast.parse(TASK_FILE.read_text())
    imported = {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    assert imported == {"mteb"}
    base, *classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert [item.name for item in base.body if isinstance(item, ast.FunctionDef)] == ["task_specific_scores"]
    assert all([type(item) for item in node.body] == [ast.Assign] for node in classes)  # metadata only
    assert all(node.bases[0].id == base.name for node in classes)
    expected = ([task_name(attack, IMAGE_TO_TEXT) for attack in (CLEAN, *TEXT_ATTACKS)]
                + [task_name(attack, TEXT_TO_IMAGE) for attack in (CLEAN, *IMAGE_ATTACKS)])
    assert list(UPSTREAM_TASKS) == expected and len(classes) == 12
    assert expected[:2] == ["RoCOCOCleanI2TRetrieval", "RoCOCOSameConceptI2TRetrieval"]
    for name, task in UPSTREAM_TASKS.items():
        # MTEB's style: the task's name is its class's, with no '-' or '_', ending in Retrieval
        assert name == task.__name__ and name.endswith("Retrieval") and not {"-", "_"} & set(name)
        metadata = task.metadata
        metadata._validate_metadata()
        assert metadata.is_filled(), name
        assert (metadata.type, metadata.main_score, metadata.category) == (
            "Any2AnyRetrieval", MAIN_SCORE, "i2t" if name.endswith("I2TRetrieval") else "t2i")
        assert metadata.dataset["path"].endswith("/" + name) and "2304.10727" in metadata.bibtex_citation
        assert set(metadata.prompt) == {"query"}


def test_the_projects_tasks_are_built_on_the_upstream_metadata(benchmark, tmp_path):
    """One source: the project's task of a RoCOCO gallery holds the upstream metadata but for its data; a gallery
    RoCOCO lacks (a generated seed 7) takes its method's, with its own name."""
    tasks = {task.metadata.name: task for task in mteb_tasks(str(benchmark), load_kwargs={"cache_dir": str(tmp_path)})}
    for name, task in tasks.items():
        upstream = UPSTREAM_TASKS.get(name, UPSTREAM_TASKS[name.replace("Seed7", "Seed1")]).metadata
        ours = task.metadata
        assert ours.dataset["path"] == str(benchmark)
        same = {"dataset", "description", "name"} if name not in UPSTREAM_TASKS else {"dataset"}
        assert {field: value for field, value in dict(ours).items() if field not in same | {"statistics_folder"}} == \
            {field: value for field, value in dict(upstream).items() if field not in same}, name
        assert ours.descriptive_stat_path == STATISTICS_FOLDER / f"{name}.json"
    seed7 = tasks["RoCOCOMixSeed7T2IRetrieval"].metadata.description
    assert "'mix_seed7'" in seed7 and seed7 != UPSTREAM_TASKS["RoCOCOMixSeed1T2IRetrieval"].metadata.description


def load_reference_module(path: Path):
    """The module of MTEB's file ``path``, read in place: no bytecode is written beside it."""
    spec = importlib.util.spec_from_file_location(f"mteb_reference_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
    return module


def test_the_statistics_are_mtebs_and_its_quality_checks_flag_only_known_issues():
    """The kept statistics (``mteb-stats`` on RoCOCO's export) are there for every task; MTEB's quality checks flag
    exactly what :data:`KNOWN_ISSUES` lists: nothing. RoCOCO's duplicates are real (COCO repeats 173 of its 25,010
    captions; danger's adversarial captions repeat more) but stay under MTEB's tolerance of 1%."""
    quality = load_reference_module(mteb_reference() / MTEB_TESTS / "test_task_quality.py")
    flagged, repeated = {}, {}
    for name in UPSTREAM_TASKS:
        statistics = json.loads((STATISTICS_FOLDER / f"{name}.json").read_text())
        split = statistics["test"]
        assert (split["num_queries"], split["num_documents"]) == (
            (5000, 25010 if "Clean" in name else 50010) if name.endswith("I2TRetrieval") else
            (25010, 5000 if "Clean" in name else 10000)), name
        texts = split["documents_text_statistics" if name.endswith("I2TRetrieval") else "queries_text_statistics"]
        repeated[name] = (split["num_documents"] if name.endswith("I2TRetrieval") else split["num_queries"]) - \
            texts["unique_texts"]
        for check, _ in _findings(quality, name, statistics):
            flagged.setdefault(check.split(":")[0], []).append(name)
    assert flagged == KNOWN_ISSUES == {}
    assert repeated["RoCOCOCleanI2TRetrieval"] == 173 and repeated["RoCOCODangerI2TRetrieval"] == 364
    assert all(0 < count < 0.01 * 50010 for count in repeated.values()), repeated


def _findings(quality, name, statistics):
    """MTEB's quality findings of one task's statistics (its ``_split_quality``, as ``_task_quality`` runs it)."""
    return [finding for split, split_statistics in statistics.items()
            for finding in quality._split_quality(name, split, split_statistics)
            if finding[0].split(":")[0] not in quality._WARNING_CHECK_KINDS]


def test_mtebs_own_task_tests_pass_on_a_copy_of_mteb_holding_the_files(tmp_path):
    """MTEB's ``test_metadata.py`` and ``test_task_quality.py`` from its repository, run by pytest on a copy of the
    installed ``mteb`` with the task file in ``mteb/tasks/retrieval/eng/`` (imported by its ``__init__``), the
    statistics in ``mteb/descriptive_stats/`` and :data:`KNOWN_ISSUES` added to the quality test's, as the pull
    request adds them; ``get_tasks`` restricted to RoCOCO's tasks (a ``conftest.py``)."""
    copy = tmp_path / "mteb"
    shutil.copytree(Path(mteb.__file__).parent, copy)  # with its compiled files (their sources' times kept)
    shutil.copy(TASK_FILE, copy / "tasks" / "retrieval" / "eng" / TASK_FILE.name)
    names = [task.__name__ for task in UPSTREAM_TASKS.values()]
    with open(copy / "tasks" / "retrieval" / "eng" / "__init__.py", "a") as init:
        init.write(f"\nfrom .rococo_retrieval import {', '.join(names)}\n__all__ += {names!r}\n")
    for name in UPSTREAM_TASKS:
        shutil.copy(STATISTICS_FOLDER / f"{name}.json", copy / "descriptive_stats" / "Image" / "Any2AnyRetrieval")
    tests = tmp_path / MTEB_TESTS
    tests.mkdir(parents=True)
    for file in ("__init__.py", "test_metadata.py", "test_task_quality.py"):
        shutil.copy(mteb_reference() / MTEB_TESTS / file, tests / file)
    with open(tests / "test_task_quality.py", "a") as quality:
        quality.write(f"\nfor _kind, _names in {KNOWN_ISSUES!r}.items():\n"
                      "    KNOWN_ISSUES.setdefault(_kind, []).extend(_names)\n")
    (tests / "conftest.py").write_text(
        "import importlib\n"
        "import mteb\n"
        f"assert mteb.__file__ == {str(copy / '__init__.py')!r}, mteb.__file__\n"
        "module = importlib.import_module('mteb.get_tasks')\n"
        "every_task = module.get_tasks\n"
        "def rococo_tasks(*args, **kwargs):\n"
        "    return [task for task in every_task(*args, **kwargs) if task.metadata.name.startswith('RoCOCO')]\n"
        "module.get_tasks = rococo_tasks\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-W", "ignore::DeprecationWarning", str(MTEB_TESTS)],
                          cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1"))  # read in place
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "13 passed" in done.stdout, done.stdout[-2000:]  # 12 tasks' metadata, and the quality of all 12


def test_mteb_push_writes_mtebs_format_and_mtebs_loader_scores_as_the_projects_tasks(benchmark, fake_hub,
                                                                                     tmp_path, capsys, monkeypatch):
    """``rococo_dataset.py mteb-push``: each task's queries, corpus and qrels in MTEB's layout, one commit per task
    repository, adversarial items (``decoy-``) in the corpus and in no relevance judgement, the same bytes on a second
    run; the upstream class (MTEB's standard loader, no ``load_data``) on those
    files gives every retrieval score and RoCOCO's false rate that the project's task gives (random baseline
    encoder); ``--pin``'s rewrite names them."""
    argv = ["mteb-push", str(benchmark), "--owner", "org", "--token", "hf_test", "--endpoint", fake_hub.url]
    assert rococo_dataset.main([*argv, "--out", str(tmp_path / "first")]) == 0
    printed = capsys.readouterr().out.split()
    project_tasks = mteb_tasks(str(benchmark), load_kwargs={"cache_dir": str(tmp_path / "hf")})
    names = [task.metadata.name for task in project_tasks]
    assert printed[0::2] == names and all(repo.startswith(f"org/{name}@") for name, repo in
                                         zip(names, printed[1::2]))
    assert sorted(fake_hub.files) == sorted(f"org/{name}" for name in names)
    parts = ["README.md"] + [f"{config}/test-00000-of-00001.parquet" for config in ("queries", "corpus", "qrels")]
    for name in names:
        files = fake_hub.files[f"org/{name}"]
        assert sorted(files) == sorted(parts)
        assert all(files[part] == (tmp_path / "first" / name / part).read_bytes() for part in parts)
        folder = tmp_path / "first" / name
        corpus, qrels = (datasets.Dataset.from_parquet(str(folder / config / "test-00000-of-00001.parquet"))
                         for config in ("corpus", "qrels"))
        adversarial = {item for item in corpus["id"] if item.startswith("decoy-")}
        assert bool(adversarial) == ("Clean" not in name) and set(qrels["corpus-id"]) <= set(corpus["id"]) - adversarial
    assert rococo_dataset.main([*argv, "--out", str(tmp_path / "second")]) == 0
    assert all((tmp_path / "first" / name / part).read_bytes() == (tmp_path / "second" / name / part).read_bytes()
               for name in names for part in parts)

    # MTEB's loader caches in datasets' default folder, which served another folder of the same name and card the
    # cached rows of this one (seen on RoCOCO's export after this test)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    chosen = [task for task in project_tasks if task.metadata.name in ("RoCOCORandVocaI2TRetrieval",
                                                                         "RoCOCOMixSeed1T2IRetrieval")]
    upstream = []
    for task in chosen:
        upstream_class = UPSTREAM_TASKS[task.metadata.name]
        assert "load_data" not in vars(upstream_class)
        metadata = upstream_class.metadata.model_copy(
            update={"dataset": {"path": str(tmp_path / "first" / task.metadata.name), "revision": "main"}})
        upstream.append(type(upstream_class.__name__, (upstream_class,), {"metadata": metadata})())
    model = mteb.get_model(RANDOM_ENCODER)
    ours, theirs = (mteb.evaluate(model, tasks, cache=None, show_progress_bar=False).task_results
                    for tasks in (chosen, upstream))
    for our, their in zip(ours, theirs):
        # the upstream task has MTEB's default cut-offs (more than the project's); MTEB's nAUC scores sort queries
        # of equal confidence stably, by the order of its qrels, which its loader builds in another order than the
        # rows': every retrieval score is the same
        their_scores = their.scores["test"][0]
        assert their_scores["rococo_false_rate"] == our.scores["test"][0]["rococo_false_rate"] > 0
        scores = {name: value for name, value in our.scores["test"][0].items() if not name.startswith("rococo_")}
        assert scores.keys() <= their_scores.keys()
        retrieval = [name for name in scores if not name.startswith("nauc_")]
        assert {name: scores[name] for name in retrieval} == {name: their.scores["test"][0][name]
                                                              for name in retrieval}, our.task_name
        assert 0 < scores[MAIN_SCORE] < 1 or our.task_name.endswith("I2TRetrieval")

    pinned = {name: {"path": f"org/{name}", "revision": "a" * 40} for name in names if name in UPSTREAM_TASKS}
    task_file = pin_revisions(pinned, shutil.copy(TASK_FILE, tmp_path / TASK_FILE.name))
    text = task_file.read_text()
    assert all(f'dataset={{"path": "org/{name}", "revision": "{"a" * 40}"}}' in text for name in pinned)
    with pytest.raises(ValueError, match="`pinned` names 'RoCOCOMixSeed7T2IRetrieval', which is no upstream task"):
        pin_revisions({"RoCOCOMixSeed7T2IRetrieval": pinned["RoCOCOCleanI2TRetrieval"]}, task_file)


def test_mteb_stats_writes_mtebs_statistics_of_each_task(benchmark, tmp_path, capsys):
    """``rococo_dataset.py mteb-stats`` writes what MTEB's ``calculate_descriptive_statistics()`` returns, in MTEB's
    file form, one file per task."""
    assert rococo_dataset.main(["mteb-stats", str(benchmark), "--out", str(tmp_path / "stats")]) == 0
    written = [Path(line) for line in capsys.readouterr().out.split()]
    tasks = mteb_tasks(str(benchmark), load_kwargs={"cache_dir": str(tmp_path / "hf")})
    assert [path.name for path in written] == [f"{task.metadata.name}.json" for task in tasks]
    task = tasks[1]
    task.metadata.statistics_folder = tmp_path / "again"
    assert json.loads(written[1].read_text()) == task.calculate_descriptive_statistics(overwrite_results=True)
    assert written[1].read_text() == (tmp_path / "again" / written[1].name).read_text()
    task.load_data()
    statistics = json.loads(written[1].read_text())["test"]
    assert (statistics["num_queries"], statistics["num_documents"]) == (task.counts["num_queries"],
                                                                      task.counts["num_gallery"])
    with pytest.raises(ValueError, match="`owner` must be a Hub user or organisation name without '/'"):
        push_tasks(str(benchmark), "org/name", tmp_path / "out")


def test_the_pull_requests_description_fits_mtebs_limit_and_states_the_random_baselines_table():
    """docs/mteb.md holds the description with the checklist MTEB's template asks for in the pull request (at most
    2,000 characters together, MTEB's limit) and a table with one row of the random baseline's scores per task; the
    ranges the description states are the table's. The table's numbers
    themselves come from a run of ``examples/mteb_rococo.py`` (10 minutes), which no test repeats."""
    page = (REPO_ROOT / "docs" / "mteb.md").read_text()
    description = page.split("<!-- pr-description -->\n")[1].split("<!-- /pr-description -->")[0]
    assert 1000 < len(description) <= 2000, len(description)
    assert "RANDOM_SCORES" not in description and RANDOM_ENCODER in description
    assert description.count("\n- [x] ") + description.count("\n- [ ] ") == 7  # MTEB's checklist, its items
    rows = {cells[0].strip("`"): cells[1:] for line in page.splitlines() if line.startswith("| `RoCOCO")
            for cells in [[cell.strip() for cell in line.strip("|").split("|")]]}
    assert list(rows) == list(UPSTREAM_TASKS)
    hit_rates = [row[0] for row in rows.values()]
    assert f"from {min(hit_rates)} to {max(hit_rates)}" in description, hit_rates
    attacked = [float(row[2]) for name, row in rows.items() if "Clean" not in name]
    assert f"{int(min(attacked))} to {round(max(attacked))}%" in description, attacked
