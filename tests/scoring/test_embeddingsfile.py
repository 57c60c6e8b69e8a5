"""rococo_eval.scoring.embeddingsfile: `run --save-embeddings` writes one file, `score FILE` scores every gallery
from it as `run` does, a partial file is scored for what it holds, and bad files are refused by name."""

import json
import logging

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from rococo_eval.cli import main
from rococo_eval.data.source import RococoSource
from rococo_eval.scoring.embeddingsfile import read_embeddings_file, write_embeddings_file


@pytest.fixture(scope="module")
def saved(hf_name, benchmark, tmp_path_factory):
    """A tiny CLIP's run with every attack, its report and its embeddings file."""
    folder = tmp_path_factory.mktemp("embeddings")
    assert main(["run", "--model", hf_name, "--benchmark", str(benchmark), "--cache-dir", str(folder / "cache"),
                 "--out", str(folder / "run"), "--save-embeddings", str(folder / "model.safetensors"),
                 "--quiet"]) == 0
    return folder


def report(folder):
    return json.loads((folder / "report.json").read_text())


def score(path, benchmark, out):
    return main(["score", str(path), "--benchmark", str(benchmark), "--out", str(out), "--quiet"])


def metadata_of(path):
    from safetensors import safe_open

    with safe_open(str(path), "np") as handle:
        return handle.metadata()


def test_scoring_the_file_gives_the_report_of_run(saved, benchmark, tmp_path):
    assert score(saved / "model.safetensors", benchmark, tmp_path) == 0
    ran, scored = report(saved / "run"), report(tmp_path)
    assert scored["results"] == ran["results"] and scored["summary"] == ran["summary"]
    assert scored["analysis"] == ran["analysis"] and len(scored["results"]) == 10
    assert scored["meta"]["model"] == ran["meta"]["model"] and ran["meta"]["embeddings_file"].endswith(".safetensors")
    vectors = load_file(str(saved / "model.safetensors"))
    assert sorted(vectors) == sorted(["images/original", "captions/ground_truth", "captions/same_concept",
                                      "captions/diff_concept", "captions/rand_voca", "captions/danger",
                                      "images/mix_seed1", "images/mix_seed7", "images/patch_seed1",
                                      "images/patch_seed7"])
    assert metadata_of(saved / "model.safetensors")["normalized"] == "true"


def partial(saved, tmp_path, keep, change=None):
    """A file of some of the saved item sets (``change`` may alter the vectors first)."""
    vectors = load_file(str(saved / "model.safetensors"))
    fingerprints = json.loads(metadata_of(saved / "model.safetensors")["fingerprints"])
    vectors = {name: rows for name, rows in vectors.items() if name in keep}
    if change:
        change(vectors)
    return write_embeddings_file(tmp_path / "part.safetensors", vectors, fingerprints, "tiny")


def test_a_partial_file_is_scored_for_what_it_holds(saved, benchmark, tmp_path):
    path = partial(saved, tmp_path, {"images/original", "captions/ground_truth", "captions/rand_voca"})
    assert score(path, benchmark, tmp_path / "out") == 0
    results = report(tmp_path / "out")["results"]
    assert sorted(results) == ["clean/image_to_text", "clean/text_to_image", "rand_voca/image_to_text"]
    assert all(results[key] == report(saved / "run")["results"][key] for key in results)


def test_unnormalised_rows_are_normalised_with_a_warning(saved, benchmark, tmp_path, caplog):
    def double(vectors):
        vectors["captions/ground_truth"] = vectors["captions/ground_truth"] * 2

    path = partial(saved, tmp_path, {"images/original", "captions/ground_truth"}, double)
    caplog.set_level(logging.WARNING, logger="rococo_eval")  # the command sets its level (-q: errors only)
    source = RococoSource(benchmark=benchmark)
    vectors, _, attacks = read_embeddings_file(path, source)
    assert attacks == () and "rows not of unit length" in caplog.text
    assert np.allclose(np.linalg.norm(vectors["captions/ground_truth"], axis=1), 1)


def broken(saved, tmp_path, how):
    vectors = load_file(str(saved / "model.safetensors"))
    metadata = metadata_of(saved / "model.safetensors")
    if how == "rows":
        vectors["captions/rand_voca"] = vectors["captions/rand_voca"][:-1]
    elif how == "nan":
        vectors["images/mix_seed1"][3, 0] = np.nan
    elif how == "dimension":
        vectors["captions/danger"] = np.ones((len(vectors["captions/danger"]), 3), dtype=np.float32)
    elif how == "unknown":
        vectors["captions/upside_down"] = vectors["captions/danger"]
    elif how == "fingerprint":
        fingerprints = json.loads(metadata["fingerprints"])
        fingerprints["captions/ground_truth"] = "0" * 64
        metadata["fingerprints"] = json.dumps(fingerprints)
    elif how == "no clean":
        del vectors["images/original"]
    path = tmp_path / "broken.safetensors"
    save_file(vectors, str(path), metadata=metadata)
    return path


@pytest.mark.parametrize("how, problem", [
    ("rows", "'captions/rand_voca' has shape (47, 16), not (48, 16)"),
    ("nan", "'images/mix_seed1' holds non-finite values"),
    ("dimension", "'captions/danger' has shape (48, 3), not (48, 16)"),
    ("unknown", "holds the unknown item set 'captions/upside_down'"),
    ("fingerprint", "'captions/ground_truth' was made for other data"),
    ("no clean", "lacks 'images/original'"),
])
def test_a_bad_file_is_refused_by_name_and_nothing_is_written(saved, benchmark, tmp_path, capsys, how, problem):
    path = broken(saved, tmp_path, how)
    assert score(path, benchmark, tmp_path / "out") == 1
    error = capsys.readouterr().err
    assert problem in error and str(path) in error and not (tmp_path / "out" / "report.json").exists()


def test_the_space_scores_the_file_as_run_does(saved, benchmark, tmp_path):
    """The Space served for real, the file uploaded through gradio_client: its report.json has run's results."""
    import app
    from gradio_client import Client, handle_file

    from helpers.space_app import serve
    from rococo_eval.space import source_and_problem

    source, _ = source_and_problem(benchmark=benchmark)
    demo = app.build_app(source=source, output_dir=tmp_path / "outputs")
    try:
        client = Client(serve(demo), verbose=False)
        message, _, _, download = client.predict([handle_file(saved / "model.safetensors")],
                                                 {"headers": app.LAYOUT_HEADERS, "data": []}, api_name="/evaluate")
    finally:
        demo.close()
    scored, ran = json.loads(open(download).read()), report(saved / "run")
    assert "Scored the embeddings file `model.safetensors`" in message and len(scored["results"]) == 10
    assert scored["results"] == ran["results"] and scored["summary"] == ran["summary"]


def test_a_space_without_images_refuses_the_file(saved):
    from rococo_eval.space import evaluate_files

    with pytest.raises(ValueError, match="this Space has no images, so it cannot check an embeddings file"):
        evaluate_files([saved / "model.safetensors"], source=None)


def test_run_writes_the_results_as_model_card_metadata(saved):
    """model-card.md reads back through huggingface_hub as the model's eval results: one R@1 per gallery and seed
    mean, and the false rate of each attacked one."""
    from huggingface_hub import ModelCard

    card = ModelCard.load(saved / "run" / "model-card.md")
    summary = report(saved / "run")["summary"]
    results = {(result.dataset_config, result.metric_name): result.metric_value for result in card.data.eval_results}
    assert card.data.model_name == report(saved / "run")["meta"]["model"]
    assert len(results) == len(summary) + sum(row["attack"] != "clean" for row in summary)
    rand_voca = next(row for row in summary if row["attack"] == "rand_voca")
    assert results[("rand_voca", "rand_voca image-to-text R@1")] == round(rand_voca["recall@1"], 2)
    assert results[("rand_voca", "rand_voca image-to-text false rate")] == round(rand_voca["false_rate"], 2)
    assert ("mix", "mix (mean of seeds) text-to-image R@1") in results


def test_scoring_a_file_without_images_is_refused_and_a_two_stage_model_saves_none(saved, blip_name, benchmark,
                                                                                   tmp_path, capsys):
    assert main(["score", str(saved / "model.safetensors"), "--out", str(tmp_path / "out")]) == 1
    assert "its image sets are checked against the images: give the COCO test images" in capsys.readouterr().err
    assert main(["run", "--model", blip_name, "--benchmark", str(benchmark), "--cache-dir", str(tmp_path / "c"),
                 "--out", str(tmp_path / "r"), "--save-embeddings", str(tmp_path / "b.safetensors"), "-q"]) == 1
    assert "is scored in two stages" in capsys.readouterr().err and not (tmp_path / "b.safetensors").exists()
