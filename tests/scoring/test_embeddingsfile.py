"""rococo_eval.scoring.embeddingsfile: `run --save-embeddings` writes one file, `score FILE` scores every gallery
from it as `run` does, a partial file is scored for what it holds, and bad files are refused by name."""

import json
import logging

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from rococo_eval.cli import main
from rococo_eval.data.source import BenchmarkSource
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
    source = BenchmarkSource(benchmark)
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
    from rococo_eval.data.source import open_source

    demo = app.build_app(source=open_source(benchmark=benchmark), output_dir=tmp_path / "outputs")
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
    from rococo_eval.data.facts import NO_SOURCE
    from rococo_eval.space.logic import evaluate_files

    with pytest.raises(ValueError, match="this Space has no images, so it cannot check an embeddings file"):
        evaluate_files([saved / "model.safetensors"], facts=NO_SOURCE)


def test_run_writes_the_results_as_model_card_metadata(saved):
    """model-card.md reads back through huggingface_hub as the model's eval results: one R@1 per gallery and seed
    mean, and the false rate of each attacked one."""
    from huggingface_hub import ModelCard

    card = ModelCard.load(saved / "run" / "model-card.md")
    summary = report(saved / "run")["summary"]
    assert {(result.dataset_type, result.dataset_name) for result in card.data.eval_results} == {
        ("rococo-generated", "RoCOCO-style benchmark: bench")}  # a generated benchmark, not RoCOCO
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


class RowsModel:
    """A deterministic model whose embeddings depend only on an item's content (pixels, text): each test image and
    its captions (ground-truth and adversarial) share a direction, plus noise of their own; an image it does not
    know (an altered copy) gets noise alone. Any reordering of rows would move the per-query results."""

    name, fingerprint, dimension = "rows-model", "rows-model-1", 32

    def __init__(self, source, attacks):
        self.base = np.random.default_rng(0).standard_normal((source.num_images, self.dimension))
        self.vectors = {}  # by content: run's path and the dataset's rows embed the same items
        self.image_of_pixels = {self._key(source.original_image(i)): i for i in range(source.num_images)}
        counts = source.captions_per_image
        self.image_of_text = {text: i for i, text in zip(np.repeat(np.arange(len(counts)), counts),
                                                         source.ground_truth_captions())}
        for attack in attacks:
            if attack in source.text_attacks:
                per_image = source.adversarial_per_image
                self.image_of_text.update((text, row // per_image)
                                          for row, text in enumerate(source.adversarial_captions(attack)))

    @staticmethod
    def _key(image) -> bytes:
        import hashlib

        return hashlib.sha256(np.asarray(image.convert("RGB")).tobytes()).digest()

    def _vector(self, seed: bytes, index):
        if seed not in self.vectors:
            noise = np.random.default_rng(list(seed[:16])).standard_normal(self.dimension)
            self.vectors[seed] = noise if index is None else self.base[index] + 0.9 * noise
        return self.vectors[seed]

    def encode_images(self, images):
        return np.stack([self._vector(key, self.image_of_pixels.get(key)) for key in map(self._key, images)])

    def encode_texts(self, texts):
        import hashlib

        return np.stack([self._vector(hashlib.sha256(text.encode()).digest(), self.image_of_text.get(text))
                         for text in texts])


@pytest.mark.slow
def test_a_file_from_the_load_dataset_rows_scores_as_run(export_folder, source, tmp_path):
    """Item 2's helper: a model's embeddings of the exported dataset's rows, taken split by split through
    load_dataset in their order, written by write_embeddings_from_rows and scored, give run's every per-query
    result for the clean galleries, a text attack and an image attack."""
    import datasets

    from rococo_eval.models.cache import EmbeddingCache
    from rococo_eval.models.custom import as_image_text_model
    from rococo_eval.scoring.embeddingsfile import score_embeddings, write_embeddings_from_rows
    from rococo_eval.scoring.galleries import score_model
    from helpers.metric_cases import assert_same_results

    attacks = ["rand_voca", "patch_seed10"]
    model = RowsModel(source, attacks)
    ran = score_model(as_image_text_model(model), source, attacks, EmbeddingCache(tmp_path / "cache"))
    assert ran["rand_voca/image_to_text"].metrics["recall@1"] > 10
    assert ran["rand_voca/image_to_text"].metrics["false_rate"] > 10

    splits = [("images", "test"), ("captions", "test"), ("rand_voca", "adversarial"), ("patch_seed10", "adversarial")]
    rows = {}
    for config, split in splits:
        table = datasets.load_dataset(str(export_folder), config, split=split, cache_dir=str(tmp_path / "hf"))
        column = "image" if config in ("images", "patch_seed10") else "caption"
        items = table[column][:]  # the whole column at once (row by row, datasets formats each row alone)
        rows[(config, split)] = model.encode_images(items) if column == "image" else model.encode_texts(items)
    path = write_embeddings_from_rows(tmp_path / "rows.safetensors", rows, source, model.name)
    vectors, metadata, covered = read_embeddings_file(path, source)
    assert covered == tuple(attacks) and metadata["normalized"] == "true"  # normalised as run normalises
    assert_same_results(score_embeddings(vectors, source, covered, metadata["similarity"]), ran)

    shuffled = dict(rows)
    shuffled[("captions", "test")] = rows[("captions", "test")][::-1]  # another order: other results
    vectors, _, _ = read_embeddings_file(write_embeddings_from_rows(tmp_path / "bad.safetensors", shuffled, source,
                                                                    model.name), source)
    rescored = score_embeddings(vectors, source, (), metadata["similarity"])  # the clean galleries: the one it reads
    assert rescored["clean/image_to_text"].metrics["recall@1"] < ran["clean/image_to_text"].metrics["recall@1"]


@pytest.mark.parametrize("change, problem", [
    (lambda rows: rows.pop(("images", "test")), r"`vectors` lacks \('images', 'test'\)"),
    (lambda rows: rows.update({("rand_voca", "test"): rows[("captions", "test")]}), r"is not a split of the dataset"),
    (lambda rows: rows.update({("rand_voca", "original"): rows[("captions", "test")]}),
     r"keys \('captions', 'test'\) and \('rand_voca', 'original'\) both hold 'captions/ground_truth'"),
    (lambda rows: rows.update({("captions", "test"): rows[("captions", "test")][:-1]}),
     r"`vectors\[\('captions', 'test'\)\]` must be 25010 rows of numbers, one per row of load_dataset\(\.\.\., "
     r"'captions', split='test'\)"),
    (lambda rows: rows[("images", "test")].__setitem__((0, 0), np.nan), r"holds non-finite values"),
    (lambda rows: rows.update({"images": rows[("images", "test")]}), r"keys are \(config, split\) pairs"),
])
def test_the_rows_helper_refuses_bad_rows_by_name_and_writes_nothing(source, tmp_path, change, problem):
    from rococo_eval.scoring.embeddingsfile import write_embeddings_from_rows

    rows = {("images", "test"): np.ones((source.num_images, 4)),
            ("captions", "test"): np.ones((len(source.ground_truth_captions()), 4))}
    change(rows)
    with pytest.raises(ValueError, match=problem):
        write_embeddings_from_rows(tmp_path / "f.safetensors", rows, source, "m")
    assert not list(tmp_path.iterdir())


def test_the_rows_helper_takes_torch_tensors(source, tmp_path):
    """Model outputs as they come: a bfloat16 tensor and one that requires grad."""
    import torch

    from rococo_eval.scoring.embeddingsfile import write_embeddings_from_rows

    images = torch.randn(source.num_images, 4, requires_grad=True)
    captions = torch.randn(len(source.ground_truth_captions()), 4).to(torch.bfloat16)
    path = write_embeddings_from_rows(tmp_path / "t.safetensors", {("images", "test"): images,
                                                                    ("captions", "test"): captions}, source, "m")
    vectors, metadata, covered = read_embeddings_file(path, source)
    assert covered == () and metadata["normalized"] == "true"
    expected = images.detach().numpy() / np.linalg.norm(images.detach().numpy(), axis=1, keepdims=True)
    np.testing.assert_allclose(vectors["images/original"], expected, rtol=1e-6)
