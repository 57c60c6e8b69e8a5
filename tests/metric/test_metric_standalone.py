"""The metric file alone loads through ``evaluate.load``: a folder that holds nothing else of the project (a Space).

Each case copies ``rococo_recall.py`` alone into a fresh folder and loads it there in a child process that
cannot import the project (no repository on its path, none of ``rococo_eval`` or ``rococo_recall``): once with
this interpreter, once with the oldest environment the metric supports, Python 3.9 with NumPy 1.24 (the
Makefile's NumPy-1 environment, which ``make test`` builds first and then requires: ROCOCO_REQUIRE_PY39=1).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
OLD_ENV = REPO_ROOT / ".venv-numpy1"  # the Makefile's NUMPY1_VENV: Python 3.9, NumPy 1.24, no torch

# The child: the project's editable install (pip install -e) would make it importable from anywhere, so its
# finder goes first; what is left is what a Space has, the libraries without the project.
CHILD = r"""
import importlib
import json
import os
import sys

sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path_importer_cache.clear()
importable = []
for name in ("rococo_eval", "rococo_recall"):
    try:
        importlib.import_module(name)
    except ImportError:
        continue
    importable.append(name)

import evaluate
import numpy as np

folder = sys.argv[1]
scores = np.array([[7, 1, 3, 8, 2], [2, 6, 5, 1, 0], [4, 5, 3, 5, 1]], dtype=np.float32) / 8
references, adversarial, k = [0, [1, 2], 2], [3, 4], (1, 3)


def plain(result):
    return {key: value.tolist() if isinstance(value, np.ndarray) else value for key, value in result.items()}


metric = evaluate.load(folder)
module = sys.modules[type(metric).__module__]
whole = metric.compute(predictions=scores, references=references, adversarial=adversarial, k=k, per_query=True)
metric.add_batch(predictions=scores[2:], references=references[2:], adversarial=adversarial, query_index=[2])
metric.add_batch(predictions=scores[:2], references=references[:2], adversarial=adversarial, query_index=[0, 1])
batches = metric.compute(k=k, per_query=True)
embeddings = metric.compute(query_embeddings=scores, gallery_embeddings=np.eye(5, dtype=np.float32),
                            references=references, adversarial=adversarial, k=k, per_query=True)
optimistic = metric.compute(predictions=scores, references=references, adversarial=adversarial, k=k,
                            ties="optimistic", per_query=True)
print(json.dumps({
    "importable": importable,
    "path": [entry for entry in sys.path if entry],
    "python": list(sys.version_info[:2]),
    "numpy": np.__version__,
    "bitwise_count": hasattr(np, "bitwise_count"),
    "module": module.__name__,
    "module_folder": sorted(os.listdir(os.path.dirname(module.__file__))),
    "class": type(metric).__name__,
    "whole": plain(whole),
    "batches": plain(batches),
    "embeddings": plain(embeddings),
    "optimistic": plain(optimistic),
}))
"""

# q0: its caption 0 (7/8) is beaten by the adversarial item 3 (8/8) alone: flipped by the attack.
# q1: its best caption 1 (6/8) is first.  q2: its caption 2 (3/8) is beaten by items 0 and 1 and by the adversarial
# item 3; items 1 and 3 tie at the top (5/8): pessimistic, the adversarial one is first; optimistic, the clean one.
EXPECTED = {
    "recall@1": 100 / 3,
    "recall@3": 200 / 3,
    "r_mean": (100 / 3 + 200 / 3) / 2,
    "false_rate": 200 / 3,
    "clean_recall@1": 200 / 3,
    "clean_recall@3": 100.0,
    "clean_r_mean": (200 / 3 + 100.0) / 2,
    "attack_success_rate": 50.0,
    "num_queries": 3,
    "num_gallery": 5,
    "num_adversarial": 2,
    "rank": [1, 0, 3],
    "clean_rank": [0, 0, 2],
    "top1_adversarial": [True, False, True],
    "top_index": [3, 1, 3],
    "top_score": [1.0, 0.75, 0.625],
    "best_correct_index": [0, 1, 2],
    "best_correct_score": [0.875, 0.75, 0.375],
}


def load_alone(python, tmp_path):
    """Run the child with ``python`` on a copy of the metric file alone; its JSON report."""
    folder = tmp_path / "space" / "rococo_recall"
    folder.mkdir(parents=True)
    shutil.copyfile(REPO_ROOT / "rococo_recall.py", folder / "rococo_recall.py")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME") and not key.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1",
               HF_EVALUATE_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    child = subprocess.run([str(python), "-I", "-c", CHILD, str(folder)], cwd=elsewhere, env=env,
                           capture_output=True, text=True, timeout=300, check=False)
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def check(report):
    assert report["importable"] == []  # neither the package nor the metric as a module: only evaluate's copy
    assert not any(Path(entry).resolve() == REPO_ROOT for entry in report["path"])
    assert report["class"] == "RococoRecall"
    assert report["module"].startswith("evaluate_modules.metrics.rococo_recall.")
    assert [name for name in report["module_folder"] if name.endswith(".py")] == ["__init__.py", "rococo_recall.py"]
    assert report["whole"] == EXPECTED
    for name in ("batches", "embeddings"):
        assert report[name] == EXPECTED, name
    assert report["optimistic"]["top_index"] == [3, 1, 1]
    assert report["optimistic"]["false_rate"] == 100 / 3
    assert report["optimistic"]["rank"] == [1, 0, 3]


def test_the_metric_file_alone_loads_here(tmp_path):
    check(load_alone(sys.executable, tmp_path))


def test_the_metric_file_alone_loads_with_python_3_9_and_numpy_1_24(tmp_path):
    if Path(sys.prefix).resolve() == OLD_ENV.resolve():
        pytest.skip("this is that environment: the test above ran in it")
    python = OLD_ENV / "bin" / "python"
    if not python.exists():
        message = f"{python} is missing: `make test-numpy1` builds it (Python 3.9, NumPy 1.24)"
        if os.environ.get("ROCOCO_REQUIRE_PY39") == "1":
            pytest.fail(message)
        pytest.skip(message)
    report = load_alone(python, tmp_path)
    assert report["python"] == [3, 9]
    assert report["numpy"].startswith("1.24.")
    assert not report["bitwise_count"]  # the byte-table count of NumPy 1.x ranked these
    check(report)
