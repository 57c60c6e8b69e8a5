"""The ``rococo-eval`` command end to end, on the real annotation files and a generated COCO-like folder.

Models are real architectures with random weights (see ``test_models.py``). The reports are checked against
the metric applied to score matrices computed here, directly, from the embeddings the run used, with the
gallery in the dataset's order (a layout the command does not use).
"""

import json
import math
import subprocess
import sys
import types

import numpy as np
import pytest

import rococo_recall
from rococo_eval import models
from rococo_eval.cli import main
from rococo_eval.embeddings import (
    EmbeddingCache,
    adversarial_captions,
    altered_images,
    ground_truth_captions,
    original_images,
)
from rococo_eval.layout import CLEAN, IMAGE_TO_TEXT, TEXT_TO_IMAGE


@pytest.fixture
def encode_calls(monkeypatch):
    """Count the models' encode calls; ``calls["fail_after"] = n`` makes call n + 1 raise KeyboardInterrupt."""
    calls = {"texts": 0, "images": 0, "fail_after": None}
    load = models.load_model

    def counting_load(*args, **kwargs):
        model = load(*args, **kwargs)
        for kind in ("texts", "images"):
            encode = getattr(model, f"encode_{kind}")

            def counted(batch, encode=encode, kind=kind):
                if calls["fail_after"] is not None and calls["texts"] + calls["images"] >= calls["fail_after"]:
                    raise KeyboardInterrupt
                calls[kind] += 1
                return encode(batch)

            setattr(model, f"encode_{kind}", counted)
        return model

    monkeypatch.setattr(models, "load_model", counting_load)
    return calls


def run(*args):
    return main(["run", *map(str, args), "--device", "cpu", "--workers", "2"])


def cached_embeddings(cache_dir, name, source, attacks):
    """The run's embeddings, read through the cache by a stand-in that cannot encode, and the model itself."""
    model = models.load_model(name, device="cpu")
    reader = types.SimpleNamespace(name=model.name, fingerprint=model.fingerprint)
    cache = EmbeddingCache(cache_dir / "embeddings")
    sets = {"images": original_images(source), "captions": ground_truth_captions(source)}
    for attack in attacks:
        text_attack = source.gallery(attack).direction == IMAGE_TO_TEXT
        sets[attack] = adversarial_captions(source, attack) if text_attack else altered_images(source, attack)
    return model, sets, {key: cache.embeddings(reader, items) for key, items in sets.items()}


def direct_results(source, embeddings, attacks):
    """The metric on full score matrices, gallery in the dataset's order (originals, then altered items)."""
    images, captions = embeddings["images"], embeddings["captions"]
    galleries = {(CLEAN, IMAGE_TO_TEXT): images @ captions.T, (CLEAN, TEXT_TO_IMAGE): captions @ images.T}
    for attack in attacks:
        if source.gallery(attack).direction == IMAGE_TO_TEXT:
            galleries[attack, IMAGE_TO_TEXT] = images @ np.concatenate([captions, embeddings[attack]]).T
        else:
            galleries[attack, TEXT_TO_IMAGE] = captions @ np.concatenate([images, embeddings[attack]]).T
    return {f"{attack}/{direction}": rococo_recall.rococo_recall(
                scores, **source.gallery(attack, direction, order="dataset").metric_inputs())
            for (attack, direction), scores in galleries.items()}


def assert_report_equals(report_dir, expected):
    results = json.loads((report_dir / "report.json").read_text())["results"]
    assert set(results) == set(expected)
    for key, output in expected.items():
        for name, value in output.items():
            value = None if isinstance(value, float) and math.isnan(value) else value
            assert results[key][name] == value, (key, name)


def assert_embeddings_are_the_models(model, sets, embeddings, rows):
    for key, items in sets.items():
        picked = [row for row in rows if row < len(items)]
        batch = [items.items[row] for row in picked]
        direct = model.encode_texts(batch) if items.kind == "text" else model.encode_images(batch)
        np.testing.assert_allclose(embeddings[key][picked], direct, atol=1e-5, err_msg=key)


@pytest.mark.slow
def test_run_open_clip_writes_the_report_and_reuses_the_cache(open_clip_name, source, coco_root, tmp_path,
                                                                encode_calls, capsys):
    attacks = ["rand_voca"]
    args = ("--model", open_clip_name, "--attacks", "rand_voca", "--images-dir", coco_root,
            "--cache-dir", tmp_path / "cache", "--batch-size", 512)
    assert run(*args, "--out", tmp_path / "first") == 0
    table = capsys.readouterr().out
    assert "rand_voca" in table and "false rate" in table
    assert encode_calls["images"] == 10 and encode_calls["texts"] == 2 * 49

    model, sets, embeddings = cached_embeddings(tmp_path / "cache", open_clip_name, source, attacks)
    assert_embeddings_are_the_models(model, sets, embeddings, rows=[0, 511, 512, 4999, 25009])
    assert_report_equals(tmp_path / "first", direct_results(source, embeddings, attacks))
    report = json.loads((tmp_path / "first" / "report.json").read_text())
    assert report["meta"]["model"] == open_clip_name and report["meta"]["model_fingerprint"] == model.fingerprint
    assert "| rand_voca | image_to_text |" in (tmp_path / "first" / "report.md").read_text()
    assert (tmp_path / "first" / "recall.png").read_bytes()[:4] == b"\x89PNG"

    encode_calls.update(texts=0, images=0)
    assert run(*args, "--out", tmp_path / "second") == 0
    assert encode_calls["texts"] == encode_calls["images"] == 0
    again = json.loads((tmp_path / "second" / "report.json").read_text())
    assert again["results"] == report["results"]


@pytest.mark.slow
def test_run_hf_interrupted_then_resumed(hf_name, source, coco_root, tmp_path, encode_calls, capsys):
    args = ("--model", hf_name, "--attacks", "mix_seed1", "--images-dir", coco_root, "--cache-dir", tmp_path / "cache",
            "--out", tmp_path / "report", "--batch-size", 1000)
    encode_calls["fail_after"] = 5 + 12  # the 5 image batches, then 12 of the 26 ground-truth caption batches
    assert run(*args) == 130
    assert "run the same command again to resume" in capsys.readouterr().err
    assert not (tmp_path / "report" / "report.json").exists()
    shards = list((tmp_path / "cache" / "embeddings").glob("*/captions-ground_truth-*/rows-*.npy"))
    assert len(shards) == 12

    encode_calls.update(texts=0, images=0, fail_after=None)
    assert run(*args) == 0
    assert encode_calls["texts"] == 26 - 12 and encode_calls["images"] == 5  # the rest, then the altered images
    model, sets, embeddings = cached_embeddings(tmp_path / "cache", hf_name, source, ["mix_seed1"])
    assert_embeddings_are_the_models(model, sets, embeddings, rows=[0, 11999, 12000, 24999, 25009])
    assert_report_equals(tmp_path / "report", direct_results(source, embeddings, ["mix_seed1"]))
    assert "| mix_seed1 | text_to_image |" in (tmp_path / "report" / "report.md").read_text()
    assert not list((tmp_path / "cache" / "embeddings").glob("*/*/rows-*.npy"))


@pytest.mark.slow
def test_score_files(source, tmp_path, capsys):
    rng = np.random.default_rng(0)
    images = rng.standard_normal((5000, 8)).astype(np.float32)
    captions = rng.standard_normal((25010, 8)).astype(np.float32)
    i2t = (images @ captions.T).astype(np.float16)
    np.save(tmp_path / "blip_clean.npy", i2t)
    np.save(tmp_path / "t2i.npy", i2t.T)
    out = tmp_path / "report"
    assert main(["score", str(tmp_path / "blip_clean.npy"), f"clean:text_to_image={tmp_path / 't2i.npy'}",
                 "--out", str(out), "--quiet"]) == 0
    assert "clean" in capsys.readouterr().out
    expected = {f"clean/{direction}": rococo_recall.rococo_recall(
        scores, **source.gallery(CLEAN, direction).metric_inputs())
                for direction, scores in ((IMAGE_TO_TEXT, i2t), (TEXT_TO_IMAGE, i2t.T))}
    assert_report_equals(out, expected)
    report = json.loads((out / "report.json").read_text())
    assert report["meta"]["files"]["clean/text_to_image"]["path"] == str(tmp_path / "t2i.npy")


def test_score_rejects_a_matrix_of_no_rococo_shape(tmp_path, capsys):
    np.save(tmp_path / "scores.npy", np.zeros((3, 4), dtype=np.float32))
    assert main(["score", str(tmp_path / "scores.npy"), "--out", str(tmp_path / "report")]) == 1
    assert "fits no RoCOCO layout" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["clip", "open_clip:ViT-B-32", "timm:vit_base"])
def test_unknown_model_name_lists_the_accepted_forms(model, tmp_path, capsys):
    assert main(["run", "--model", model, "--out", str(tmp_path / "report")]) == 1
    error = capsys.readouterr().err
    assert f"unknown model name {model!r}" in error
    assert "open_clip:ARCH/PRETRAINED" in error and "hf:REPO_OR_PATH" in error
    assert not (tmp_path / "report").exists()


def test_missing_extra_names_the_install_command(coco_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "open_clip", None)
    assert run("--model", "open_clip:ViT-B-32/openai", "--images-dir", coco_root, "--out", tmp_path / "report",
               "--cache-dir", tmp_path / "cache") == 1
    assert "pip install 'rococo-eval[models]'" in capsys.readouterr().err


def test_unwritable_out_is_refused_before_any_model_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(models, "load_model", pytest.fail)
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "report"
    assert run("--model", "open_clip:ViT-B-32/openai", "--out", out) == 1
    assert f"cannot write the report to --out folder {str(out)!r}" in capsys.readouterr().err


def test_run_without_images_says_how_to_get_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(models, "load_model", pytest.fail)
    assert run("--model", "hf:openai/clip-vit-base-patch32", "--cache-dir", tmp_path, "--out", tmp_path / "report") == 1
    error = capsys.readouterr().err
    assert "--images-dir COCO_ROOT" in error and "--download-images" in error


def test_unknown_attack(tmp_path, capsys):
    assert run("--model", "hf:x", "--attacks", "rand_voca,mixup", "--out", tmp_path) == 1
    assert "unknown attack 'mixup'" in capsys.readouterr().err


def test_python_dash_m_shows_the_subcommands():
    done = subprocess.run([sys.executable, "-m", "rococo_eval", "--help"], capture_output=True, text=True, check=True)
    assert "run" in done.stdout and "score" in done.stdout


class Lengths:
    """A stand-in model for the cache: a caption's embedding is (length, 1); it records each batch."""

    name, fingerprint = "lengths", "f" * 64

    def __init__(self):
        self.batches = []

    def encode_texts(self, texts):
        self.batches.append(len(texts))
        return np.array([[len(text), 1.0] for text in texts], dtype=np.float32)


def test_cache_resumes_with_another_batch_size_and_drops_broken_shards(tmp_path):
    texts = ground_truth_captions_of(["a" * n for n in range(10)])
    folder = EmbeddingCache(tmp_path).folder(Lengths(), texts)
    model = Lengths()
    model.encode_texts = interrupt_after(model.encode_texts, calls=2)
    with pytest.raises(KeyboardInterrupt):
        EmbeddingCache(tmp_path, batch_size=3).embeddings(model, texts)
    assert sorted(path.name for path in folder.glob("rows-*")) == ["rows-000000-000003.npy", "rows-000003-000006.npy"]
    (folder / "rows-000003-000006.npy").write_bytes(b"torn")
    model = Lengths()
    vectors = EmbeddingCache(tmp_path, batch_size=4).embeddings(model, texts)
    assert vectors[:, 0].tolist() == list(range(10)) and model.batches == [4, 3]
    assert sorted(path.name for path in folder.iterdir()) == ["embeddings.npy", "manifest.json"]


def test_cache_keys_on_content(tmp_path):
    model, cache = Lengths(), EmbeddingCache(tmp_path)
    cache.embeddings(model, ground_truth_captions_of(["a", "bb"]))
    assert cache.embeddings(model, ground_truth_captions_of(["a", "bbb"]))[:, 0].tolist() == [1.0, 3.0]
    assert model.batches == [2, 2]
    cache.embeddings(model, ground_truth_captions_of(["a", "bb"]))
    assert model.batches == [2, 2]


def ground_truth_captions_of(captions):
    return ground_truth_captions(types.SimpleNamespace(ground_truth_captions=lambda: captions))


def interrupt_after(encode, calls):
    count = iter(range(calls + 1))

    def interrupted(batch):
        if next(count) == calls:
            raise KeyboardInterrupt
        return encode(batch)

    return interrupted
