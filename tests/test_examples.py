"""The quick start in examples/ runs as a user would run it, and prints the metric's outputs."""

import json
import subprocess
import sys

from helpers import REPO_ROOT


def test_quickstart_prints_the_metric_outputs():
    done = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / "quickstart.py")], capture_output=True,
                          text=True, check=True, cwd=REPO_ROOT)
    result = json.loads(done.stdout)
    assert result["num_queries"] == 4 and result["num_gallery"] == 41 and result["num_adversarial"] == 20
    assert 0 <= result["recall@1"] <= result["clean_recall@1"] <= 100


def test_the_custom_model_example_reports_as_run_does_with_its_callable(benchmark, tmp_path):
    """``examples/custom_model.py`` (evaluate_model) and ``rococo-eval run --model custom_model:load_model`` (from
    examples/, as its docstring says) give the same results for every gallery."""
    example = REPO_ROOT / "examples" / "custom_model.py"
    done = subprocess.run([sys.executable, str(example), "--benchmark", str(benchmark), "--cache-dir",
                           str(tmp_path / "cache"), "--out", str(tmp_path / "example")], capture_output=True,
                          text=True, check=True, cwd=REPO_ROOT)
    printed = json.loads(done.stdout)
    assert printed[0]["gallery"] == "clean/image_to_text" and len(printed) == 12  # 10 galleries, 2 seed means
    subprocess.run([sys.executable, "-m", "rococo_eval", "run", "--model", "custom_model:load_model", "--benchmark",
                    str(benchmark), "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run"), "--quiet"],
                   capture_output=True, text=True, check=True, cwd=REPO_ROOT / "examples")
    example_report, run_report = (json.loads((tmp_path / name / "report.json").read_text()) for name in ("example", "run"))
    assert example_report["results"] == run_report["results"] and example_report["summary"] == run_report["summary"]
    assert example_report["meta"]["model"] == "tiny-colour-model"
    assert run_report["meta"]["model"] == "custom_model:load_model"
    assert [row["R@1"] for row in printed] == [row["recall@1"] for row in example_report["summary"]]
    assert (tmp_path / "example" / "per_query.parquet").is_file()  # the failure analysis, as for `run`


def test_the_probabilistic_example_is_scored_by_csd_as_run_scores_its_callable(benchmark, tmp_path):
    """``examples/probabilistic_model.py`` (a ``csd`` model) and ``rococo-eval run --model
    probabilistic_model:load_model`` report the same results, scored by CSD; the CSD of the model's own outputs
    ranks the clean image-to-text gallery as the report says."""
    import numpy as np

    from rococo_recall import rococo_recall
    from rococo_eval.data.source import BenchmarkSource

    example = REPO_ROOT / "examples" / "probabilistic_model.py"
    done = subprocess.run([sys.executable, str(example), "--benchmark", str(benchmark), "--cache-dir",
                           str(tmp_path / "cache"), "--out", str(tmp_path / "example")], capture_output=True,
                          text=True, check=True, cwd=REPO_ROOT)
    assert json.loads(done.stdout)["similarity"] == "csd"
    subprocess.run([sys.executable, "-m", "rococo_eval", "run", "--model", "probabilistic_model:load_model",
                    "--benchmark", str(benchmark), "--cache-dir", str(tmp_path / "cache"), "--out",
                    str(tmp_path / "run"), "--quiet"], capture_output=True, text=True, check=True,
                   cwd=REPO_ROOT / "examples")
    example_report, run_report = (json.loads((tmp_path / name / "report.json").read_text()) for name in ("example", "run"))
    assert example_report["results"] == run_report["results"] and run_report["meta"]["similarity"] == "csd"
    sys.path.insert(0, str(REPO_ROOT / "examples"))
    try:
        from probabilistic_model import TinyGaussianModel
    finally:
        sys.path.remove(str(REPO_ROOT / "examples"))
    source = BenchmarkSource(benchmark)
    model = TinyGaussianModel()
    (image_means, image_sigmas), (text_means, text_sigmas) = (
        model.encode_images([source.original_image(i) for i in range(source.num_images)]),
        model.encode_texts(source.ground_truth_captions()))
    csd = -(2 - 2 * image_means.astype(np.float64) @ text_means.T + np.exp(image_sigmas).sum(1)[:, None]
            + np.exp(text_sigmas).sum(1))
    expected = rococo_recall(csd, **source.gallery("clean", "image_to_text").metric_inputs())
    assert run_report["results"]["clean/image_to_text"]["recall@1"] == expected["recall@1"]
