"""rococo_eval.scoring.run: a model's scoring as a run does it, into its report."""

import pytest

from helpers.metric_cases import assert_same_results
from rococo_eval.evaluation import evaluate_model
from rococo_eval.models.adapters import load_model
from rococo_eval.models.cache import EmbeddingCache
from rococo_eval.scoring.galleries import score_model
from rococo_eval.scoring.run import score_run


def test_score_run_gives_score_models_results_in_a_report_with_its_meta(hf_name, tiny_source, tmp_path):
    model = load_model(hf_name, device="cpu")
    (tmp_path / "scores").mkdir()
    report = score_run(model, tiny_source, "rand_voca", tmp_path / "cache", batch_size=16,
                       save_scores=tmp_path / "scores", meta={"precision": "fp32", "note": "given"})
    alone = score_model(model, tiny_source, ["rand_voca"], EmbeddingCache(tmp_path / "alone", batch_size=16))
    assert list(report.results) == list(alone) == ["clean/image_to_text", "clean/text_to_image",
                                                   "rand_voca/image_to_text"]
    assert_same_results(report.results, alone)
    assert [row.attack for row in report.summary] == ["clean", "rand_voca", "clean"]
    meta = {name: value for name, value in report.meta.items() if name not in ("rococo_eval", "python")}
    assert meta == {"model": hf_name, "model_fingerprint": model.fingerprint, "similarity": "cosine",
                    "precision": "fp32", "device": "cpu", "attacks": ["rand_voca"],
                    "images_dir": str(tiny_source.images_dir), "note": "given",
                    "scores_dir": str(tmp_path / "scores")}  # no warnings, a dual encoder
    assert (tmp_path / "cache" / "embeddings").is_dir()  # the cache is the run's cache folder's embeddings/
    assert (tmp_path / "scores" / "rand_voca_image_to_text_official_order.npy").is_file()


def test_score_run_checks_what_it_saves_before_any_work(hf_name, tiny_source, tmp_path):
    model = load_model(hf_name, device="cpu")
    with pytest.raises(ValueError, match="`compact_scores`: .* is a dual encoder"):
        score_run(model, tiny_source, ["rand_voca"], tmp_path / "cache", save_scores=tmp_path, compact_scores=True)
    with pytest.raises(ValueError, match="give a file ending in .safetensors"):
        score_run(model, tiny_source, ["rand_voca"], tmp_path / "cache", save_embeddings=tmp_path / "e.npz")
    assert not (tmp_path / "cache").exists()  # nothing embedded, nothing cached


def test_evaluate_model_refuses_a_model_before_it_opens_the_source():
    """An object that is no model is refused before any source is opened: its TypeError, not the source's complaint
    of missing images (nor a download of the annotations), as evaluate_model's docstring says."""
    with pytest.raises(TypeError, match=r"`model` \(object\) has no encode_images and no encode_texts"):
        evaluate_model(object())
