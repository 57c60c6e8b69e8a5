"""The ``rococo-eval`` command end to end, on the real annotation files and a generated COCO-like folder.

Models are real architectures with random weights (see ``helpers/tiny_models.py``). The reports are checked against
the metric applied to score matrices computed here, directly, from the embeddings the run used, with the
gallery in the dataset's order (a layout the command does not use).
"""

import csv
import json
import math
import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import rococo_recall
from rococo_eval.models import adapters as models
from rococo_eval.cli import (
    CommandError,
    as_flags,
    build_parser,
    main,
    option_flags,
    parse_layout_spec,
    split_file_argument,
)
from rococo_eval.models.cache import EmbeddingCache
from rococo_eval.scoring.galleries import (
    adversarial_captions,
    altered_images,
    ground_truth_captions,
    original_images,
)
from rococo_eval.catalog import CLEAN, IMAGE_TO_TEXT, TEXT_TO_IMAGE, attack_direction
from rococo_eval.data.benchmark import make_benchmark
from rococo_eval.data.dataset import metric_inputs_for
from rococo_eval.layout import gallery_layout
from rococo_eval.data.source import BenchmarkSource, RococoSource
from helpers import REPO_ROOT
from helpers.http_server import UNREACHABLE
from helpers.sparse_files import sparse_npy


@pytest.fixture
def encode_calls(monkeypatch):
    """Count the models' encode calls; ``calls["fail_after"] = n`` makes call n + 1 raise KeyboardInterrupt."""
    calls = {"texts": 0, "images": 0, "fail_after": None}
    load = models.load_model

    def counting_load(*args, **kwargs):
        model = load(*args, **kwargs)
        image_method = "encode_preprocessed" if hasattr(model, "encode_preprocessed") else "encode_images"
        text_method = "encode_tokenized" if hasattr(model, "encode_tokenized") else "encode_texts"
        for kind, method in (("texts", text_method), ("images", image_method)):
            encode = getattr(model, method)

            def counted(batch, encode=encode, kind=kind):
                if calls["fail_after"] is not None and calls["texts"] + calls["images"] >= calls["fail_after"]:
                    raise KeyboardInterrupt
                calls[kind] += 1
                return encode(batch)

            setattr(model, method, counted)
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
        text_attack = attack_direction(attack) == IMAGE_TO_TEXT
        sets[attack] = adversarial_captions(source, attack) if text_attack else altered_images(source, attack)
    return model, sets, {key: cache.embeddings(reader, items) for key, items in sets.items()}


def direct_results(source, embeddings, attacks):
    """The metric on full score matrices, gallery in the dataset's order (originals, then altered items)."""
    images, captions = embeddings["images"], embeddings["captions"]
    galleries = {(CLEAN, IMAGE_TO_TEXT): images @ captions.T, (CLEAN, TEXT_TO_IMAGE): captions @ images.T}
    for attack in attacks:
        if attack_direction(attack) == IMAGE_TO_TEXT:
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
        if hasattr(items.items, "stop"):  # altered images read at random: make the groups read, not all 5,000 ahead
            items.items.stop()
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
    assert "| rand_voca | image-to-text |" in (tmp_path / "first" / "report.md").read_text()
    assert (tmp_path / "first" / "recall.png").read_bytes()[:4] == b"\x89PNG"

    encode_calls.update(texts=0, images=0)
    assert run(*args, "--out", tmp_path / "second") == 0
    assert encode_calls["texts"] == encode_calls["images"] == 0
    again = json.loads((tmp_path / "second" / "report.json").read_text())
    assert again["results"] == report["results"]


def rococo_eval_notes(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name.startswith("rococo_eval")]


@pytest.mark.slow
def test_run_hf_interrupted_then_resumed_logs_its_progress_and_reads_each_original_twice(
        hf_name, source, coco_root, tmp_path, encode_calls, reads, caplog, capsys):
    args = ("--model", hf_name, "--attacks", "mix_seed1", "--images-dir", coco_root, "--cache-dir", tmp_path / "cache",
            "--out", tmp_path / "report", "--batch-size", 1000)
    encode_calls["fail_after"] = 5 + 12  # the 5 image batches, then 12 of the 26 ground-truth caption batches
    assert run(*args) == 130
    assert "run the same command again to resume" in capsys.readouterr().err
    assert not (tmp_path / "report" / "report.json").exists()
    shards = list((tmp_path / "cache" / "embeddings").glob("*/captions-ground_truth-*/rows-*.npy"))
    assert len(shards) == 12
    notes = rococo_eval_notes(caplog)
    caplog.clear()

    encode_calls.update(texts=0, images=0, fail_after=None)
    assert run(*args) == 0
    assert encode_calls["texts"] == 26 - 12 and encode_calls["images"] == 5  # the rest, then the altered images
    # each original read twice over the two runs: once to embed it, once to make the altered images
    assert len(reads) == 5000 and set(reads.values()) == {2}
    model, sets, embeddings = cached_embeddings(tmp_path / "cache", hf_name, source, ["mix_seed1"])
    assert_embeddings_are_the_models(model, sets, embeddings, rows=[0, 11999, 12000, 24999, 25009])
    assert_report_equals(tmp_path / "report", direct_results(source, embeddings, ["mix_seed1"]))
    assert "| mix_seed1 | text-to-image |" in (tmp_path / "report" / "report.md").read_text()
    assert not list((tmp_path / "cache" / "embeddings").glob("*/*/rows-*.npy"))

    resumed = rococo_eval_notes(caplog)
    for seen, line, rate in ((notes, "images/original: 5000 images embedded in", "/s"),
                             (resumed, "captions/ground_truth: 13010 of 25010 embeddings to encode", ""),
                             (resumed, "captions/ground_truth: 13010 texts embedded in", "/s"),
                             (resumed, "mix_seed1: 5000 altered images made in", "/s"),
                             (resumed, "images/mix_seed1: 5000 images embedded in", "/s")):
        assert any(note.startswith(line) and rate in note for note in seen), line


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


def dataset_order_rand_voca(path, captions_per_image, seed=8):
    """A rand_voca-like (5000, 50010) float16 matrix in the dataset order: all ground-truth captions, then all
    adversarial ones (as ``load_queries_and_gallery`` gives them). Embeddings: a caption is its image plus noise,
    an adversarial caption its image plus less noise, so a model with signal that the attack often fools."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((len(captions_per_image), 32)).astype(np.float32)
    ground_truth = np.repeat(images, captions_per_image, axis=0)
    adversarial = np.repeat(images, 5, axis=0)
    captions = np.concatenate([ground_truth + 0.8 * rng.standard_normal(ground_truth.shape, np.float32),
                               adversarial + 0.5 * rng.standard_normal(adversarial.shape, np.float32)])
    scores = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(len(images), len(captions)))
    for start in range(0, len(images), 500):
        scores[start:start + 500] = images[start:start + 500] @ captions.T
    scores.flush()
    return np.load(path, mmap_mode="r")


@pytest.mark.slow
def test_score_reads_a_dataset_order_matrix_in_the_dataset_order(captions_per_image, tmp_path, caplog, capsys):
    """The case that gave R@1 0.0: a dataset-order rand_voca matrix, no order given, was scored as official."""
    path = tmp_path / "mymodel_rand_voca.npy"
    scores = dataset_order_rand_voca(path, captions_per_image)
    layouts = {order: gallery_layout("rand_voca", IMAGE_TO_TEXT, captions_per_image, order)
               for order in ("dataset", "official")}
    expected = rococo_recall.rococo_recall(scores, **layouts["dataset"].metric_inputs())
    assert expected["recall@1"] > 60 and expected["false_rate"] > 10

    assert main(["score", str(path), "--out", str(tmp_path / "detected")]) == 0
    assert_report_equals(tmp_path / "detected", {"rand_voca/image_to_text": expected})
    meta = json.loads((tmp_path / "detected" / "report.json").read_text())["meta"]["files"]["rand_voca/image_to_text"]
    assert meta["order"] == "dataset"
    assert "the scores decide the dataset order (of 512 sampled queries, 0 score their official-order ground " \
           "truth higher and 511 their dataset-order ground truth)" in meta["note"]
    assert meta["note"] in caplog.text  # said on the terminal, as a warning
    # the failure analysis maps the dataset-order columns back to the dataset's rows and captions
    per_query = rococo_recall.rococo_recall(scores, **layouts["dataset"].metric_inputs(), per_query=True)
    exported = pq.read_table(tmp_path / "detected" / "per_query.parquet").to_pydict()
    assert exported["top_row"] == per_query["top_index"].tolist()  # the dataset order is the dataset's rows
    flipped = np.flatnonzero((per_query["clean_rank"] == 0) & (per_query["rank"] > 0))
    margins = per_query["top_score"][flipped] - per_query["best_correct_score"][flipped]
    with open(tmp_path / "detected" / "flipped.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(flipped) and int(rows[0]["query"]) == flipped[np.argmax(margins)]
    adversarial = RococoSource().adversarial_captions("rand_voca")
    assert rows[0]["winner_caption"] == adversarial[int(rows[0]["winner_row"]) - sum(captions_per_image)]

    assert main(["score", f"rand_voca:dataset={path}", "--out", str(tmp_path / "given"), "--quiet"]) == 0
    assert_report_equals(tmp_path / "given", {"rand_voca/image_to_text": expected})
    caplog.clear()
    assert main(["score", f"rand_voca:image_to_text:official={path}", "--out", str(tmp_path / "refused")]) == 1
    assert ("the official order is given, but the scores decide the dataset order: 511 of 512 sampled queries score "
            "their dataset-order ground truth higher, 0 their official-order one") in capsys.readouterr().err
    assert main(["score", f"rand_voca:image_to_text:official={path}", "--trust-order",
                 "--out", str(tmp_path / "official")]) == 0
    official = rococo_recall.rococo_recall(scores, **layouts["official"].metric_inputs())
    assert_report_equals(tmp_path / "official", {"rand_voca/image_to_text": official})  # used as given, on request
    assert official["recall@1"] < 1
    assert "in the official order (shape (5000, 50010); attack named in the file name, direction read from the " \
        "shape, order given); but the scores decide the dataset order" in caplog.text  # a warning
    capsys.readouterr()


@pytest.mark.parametrize("spec", ["", "rand_voca=", "rand_voca:image_to_text="])
def test_score_refuses_an_attacked_image_to_text_matrix_whose_order_is_unclear(spec, tmp_path, capsys):
    """Zeros say nothing about the order: the command names the file and the form that gives the order."""
    path = sparse_npy(tmp_path / "mymodel_rand_voca.npy", (5000, 50010))
    assert main(["score", spec + str(path), "--out", str(tmp_path / "report")]) == 1
    error = capsys.readouterr().err
    assert f"rococo-eval: error: {path}: rand_voca image-to-text gallery" in error
    assert "the scores do not decide the order (of 512 sampled queries, 0 score" in error
    assert (f"give it as ATTACK:DIRECTION:ORDER=PATH, here rand_voca:image_to_text:official={path} or "
            f"rand_voca:image_to_text:dataset={path}") in error
    assert not (tmp_path / "report" / "report.json").exists()


@pytest.mark.slow
def test_score_refuses_a_stated_order_that_the_scores_contradict_unless_trusted(captions_per_image, tmp_path, capsys,
                                                                               caplog):
    """Issue 31: `score rand_voca:dataset=FILE` on an official-order matrix printed R@1 0.02 in silence. Only the
    entries of the ground truth (official order) hold a score: enough for the scores to decide the order."""
    path = sparse_npy(tmp_path / "mymodel_rand_voca.npy", (5000, 50010))
    scores = np.load(path, mmap_mode="r+")
    for query, references in enumerate(gallery_layout("rand_voca", IMAGE_TO_TEXT, captions_per_image,
                                                      "official").references):
        scores[query, list(references)] = 1.0
    scores.flush()
    del scores
    assert main(["score", f"rand_voca:dataset={path}", "--out", str(tmp_path / "refused")]) == 1
    error = capsys.readouterr().err
    assert (f"rococo-eval: error: {path}: rand_voca image-to-text gallery: the dataset order is given, but the scores "
            "decide the official order: 511 of 512 sampled queries score their official-order ground truth higher, "
            "0 their dataset-order one.") in error
    assert (f"give it as rand_voca:image_to_text:official={path}, or add --trust-order to score it in the dataset "
            "order all the same") in error
    assert not (tmp_path / "refused" / "report.json").exists()

    assert main(["score", f"rand_voca:dataset={path}", "--trust-order", "--out", str(tmp_path / "trusted")]) == 0
    note = json.loads((tmp_path / "trusted" / "report.json").read_text())["meta"]["files"]["rand_voca/image_to_text"]
    assert note["order"] == "dataset"
    assert ("but the scores decide the official order (of 512 sampled queries, 511 score their official-order ground "
            "truth higher and 0 their dataset-order ground truth): check the order; scored in the dataset order all "
            "the same, as asked") in note["note"]
    assert note["note"] in caplog.text  # said on the terminal too, as a warning
    assert "rococo-eval: 1 gallery scored in " in capsys.readouterr().err


def benchmark_files(folder, source, seeds=None, dtype=np.float32):
    """Score files of one model (``seeds[attack]``: another model's) for the benchmark's clean galleries, rand_voca
    and mix_seed7, named for their galleries (rand_voca's order in its name, as `run --save-scores` names it)."""
    from helpers.one_model import one_model_scores

    folder.mkdir(exist_ok=True)
    paths = []
    for attack, direction in ((CLEAN, IMAGE_TO_TEXT), ("rand_voca", IMAGE_TO_TEXT), (CLEAN, TEXT_TO_IMAGE),
                              ("mix_seed7", TEXT_TO_IMAGE)):
        layout = source.gallery(attack, direction, "official" if attack == "rand_voca" else None)
        path = folder / f"{attack}_{direction}_official_order.npy"
        np.save(path, one_model_scores(layout, source.captions_per_image, attack, (seeds or {}).get(attack, 0), dtype))
        paths.append(str(path))
    return paths


def test_score_says_when_the_files_disagree(benchmark, tmp_path, capsys, caplog):
    """Issue 31: files of one evaluation whose clean numbers differ are named with their numbers, on the terminal, in
    report.json's meta and in report.md; files of one model leave the report as it was."""
    source = BenchmarkSource(benchmark)
    agreeing = benchmark_files(tmp_path / "one", source)
    assert main(["score", "--benchmark", str(benchmark), "--out", str(tmp_path / "agree"), *agreeing]) == 0
    assert "disagree" not in caplog.text
    assert "consistency" not in json.loads((tmp_path / "agree" / "report.json").read_text())["meta"]
    assert "disagree" not in (tmp_path / "agree" / "report.md").read_text()

    mixed = benchmark_files(tmp_path / "mixed", source, seeds={"mix_seed7": 1})
    assert main(["score", "--benchmark", str(benchmark), "--out", str(tmp_path / "disagree"), *mixed]) == 0
    report = json.loads((tmp_path / "disagree" / "report.json").read_text())
    [found] = report["meta"]["consistency"]
    clean = report["results"]["clean/text_to_image"]["recall@1"]
    attacked = report["results"]["mix_seed7/text_to_image"]["clean_recall@1"]
    assert clean != attacked and found["direction"] == TEXT_TO_IMAGE and found["cutoffs"][0] == 1
    assert found["galleries"]["mix_seed7/text_to_image"] == {
        "file": mixed[3], "dtype": "float32",
        **{f"clean_recall@{k}": report["results"]["mix_seed7/text_to_image"][f"clean_recall@{k}"] for k in (1, 5, 10)
           if f"clean_recall@{k}" in found["galleries"]["mix_seed7/text_to_image"]}}
    assert f"{clean:.2f} ({round(clean * 59 / 100)} of 59 queries) from {mixed[2]} (the clean gallery)" in \
        found["message"]
    assert f"from {mixed[3]} (the clean part of mix_seed7)" in found["message"]
    warned = [record for record in caplog.records if record.getMessage() == f"the files disagree: {found['message']}"]
    assert [record.levelname for record in warned] == ["WARNING"]
    assert f"## Warnings\n\n- the files disagree: {found['message']}\n" in \
        (tmp_path / "disagree" / "report.md").read_text()


def test_score_names_the_model_and_says_how_long_it_took(benchmark, tmp_path, capsys):
    files = benchmark_files(tmp_path / "files", BenchmarkSource(benchmark))
    out = tmp_path / "named"
    assert main(["score", "--benchmark", str(benchmark), "--out", str(out), "--model-name", "my model", *files]) == 0
    error = capsys.readouterr().err
    assert re.search(rf"rococo-eval: 4 galleries scored in \d+\.\d\d s; report written to {re.escape(str(out))}\n",
                     error), error
    assert json.loads((out / "report.json").read_text())["meta"]["model"] == "my model"
    assert (out / "report.md").read_text().startswith("# RoCOCO report: my model\n")
    assert "- name: my model" in (out / "model-card.md").read_text()
    assert main(["table", str(out), "--out", str(tmp_path / "table"), "-q"]) == 0
    assert "| my model |" in capsys.readouterr().out
    assert main(["score", "--benchmark", str(benchmark), "--out", str(tmp_path / "quiet"), "-q", *files]) == 0
    assert capsys.readouterr().err == ""  # quiet: no time, no notes
    unnamed = json.loads((tmp_path / "quiet" / "report.json").read_text())["meta"]
    assert "model" not in unnamed  # without --model-name the report is as before
    assert main(["score", "--benchmark", str(benchmark), "--out", str(tmp_path / "blank"), "--model-name", " ",
                 *files]) == 1
    assert "rococo-eval: error: --model-name ' ' is blank: give the model's name" in capsys.readouterr().err


def test_score_prints_and_writes_the_numbers_with_their_legend(benchmark, tmp_path, capsys):
    """Issue 39: the terminal table and report.md spell the directions as the Space does, show n/a (not 0.00) for what
    a clean gallery does not have, two decimals, and one legend of what the numbers are; report.json is unchanged."""
    from rococo_eval.reporting.report import legend

    files = benchmark_files(tmp_path / "files", BenchmarkSource(benchmark))
    assert main(["score", "--benchmark", str(benchmark), "--out", str(tmp_path / "out"), "-q", *files]) == 0
    table = capsys.readouterr().out
    summary = json.loads((tmp_path / "out" / "report.json").read_text())["summary"]
    assert [row["false_rate"] for row in summary if row["attack"] == CLEAN] == [0.0, 0.0]  # the numbers as they were
    for text in (table, (tmp_path / "out" / "report.md").read_text()):
        assert legend(summary) in text and "Numbers are percentages" in text
        assert "image_to_text" not in text and "image-to-text" in text and "text-to-image" in text
        clean_lines = [line for line in text.splitlines() if line.lstrip("| ").startswith("clean ")]
        assert len(clean_lines) == 2 and all(line.count("n/a") == 2 for line in clean_lines), clean_lines
        assert " 0.00 " not in text and not re.search(r"\d\.\d(?!\d)", text)  # two decimals, every number


@pytest.mark.parametrize("name, shape, problem", [
    ("clip_mix_seed1.npy", (25010, 5000), "names the attack mix_seed1, but shape (25010, 5000) is that of the clean "
                                          "text_to_image gallery (a mix_seed1 gallery is (25010, 10000))"),
    ("rand_voca.npy", (5000, 25010), "names the attack rand_voca, but shape (5000, 25010) is that of the clean "
                                     "image_to_text gallery (a rand_voca gallery is (5000, 50010))"),
])
def test_score_refuses_an_attack_name_on_a_clean_matrix(name, shape, problem, tmp_path, capsys):
    path = sparse_npy(tmp_path / name, shape)
    assert main(["score", str(path), "--out", str(tmp_path / "report")]) == 1
    assert problem in capsys.readouterr().err
    assert not (tmp_path / "report" / "report.json").exists()


@pytest.mark.parametrize("spec, expected", [
    ("", ("", "", "")),
    ("rand_voca", ("rand_voca", "", "")),
    ("rand_voca:image_to_text:dataset", ("rand_voca", "image_to_text", "dataset")),
    ("rand_voca:dataset", ("rand_voca", "", "dataset")),
    ("rand_voca::official", ("rand_voca", "", "official")),
    ("dataset", ("", "", "dataset")),
    ("clean:text_to_image", ("clean", "text_to_image", "")),
    ("mix_seed10:text_to_image", ("mix_seed10", "text_to_image", "")),
])
def test_layout_specs(spec, expected):
    assert parse_layout_spec(spec) == expected


@pytest.mark.parametrize("spec, problem", [
    ("rand_voca:i2t", "'i2t' in 'rand_voca:i2t' is not an attack, a direction or an order; write "
                      "ATTACK:DIRECTION:ORDER=PATH with ATTACK one of clean, same_concept"),
    ("rand_voca:dataset:official", "'official' in 'rand_voca:dataset:official' gives a second order"),
    ("rand_voca:danger", "'danger' in 'rand_voca:danger' gives a second attack"),
    ("mix_seed2", "'mix_seed2' in 'mix_seed2' is not an attack"),
])
def test_layout_specs_refused(spec, problem):
    with pytest.raises(CommandError, match=problem):
        parse_layout_spec(spec)


def test_file_arguments_with_digits_in_any_part_are_specs():
    assert split_file_argument("clean:mix_seed1=x.npy") == ("clean:mix_seed1", Path("x.npy"))


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
    assert f"cannot write to --out folder {str(out)!r}: {str(tmp_path / 'a-file')!r} is a file" in \
        capsys.readouterr().err


@pytest.mark.parametrize("name, problem", [
    ("vse:missing.pth", "no such file 'missing.pth': expected vse:PATH.pth (an official VSE infinity checkpoint"),
    ("blip:nowhere/model.pth", "no such file 'nowhere/model.pth': expected blip:PATH.pth (an official BLIP"),
    ("vse:hf-hub:org/repo", "'hf-hub:org/repo' names no file of a Hub repository: expected hf-hub:ORG/REPO/PATH"),
    ("pcmepp:nowhere", "no such folder, and not a Hub repository id (ORG/NAME): expected pcmepp:REPO_OR_FOLDER ("),
    ("hf:./no/such/folder", "no such folder, and not a Hub repository id: expected hf:REPO_OR_PATH ("),
    ("open_clip:local-dir:/no/such/folder", "no such folder '/no/such/folder': expected open_clip:local-dir:PATH ("),
    ("open_clip:ViT-B-32/no/such/weights.pt", "no such checkpoint file 'no/such/weights.pt': expected "
                                              "open_clip:ARCH/PRETRAINED ("),
])
def test_run_checks_every_model_before_the_images_and_any_work(name, problem, hf_name, tmp_path, monkeypatch,
                                                               capsys):
    """Without images, a missing checkpoint is said first (not the 800 MB of COCO images), for any of the models."""
    monkeypatch.setattr(models, "load_model", pytest.fail)
    assert run("--model", hf_name, "--model", name, "--cache-dir", tmp_path / "cache", "--out",
               tmp_path / "report") == 1
    error = capsys.readouterr().err
    assert f"rococo-eval: error: --model {name!r}: {problem}" in error
    assert "images" not in error.replace("encode_images", "") and not (tmp_path / "report").exists()


def test_run_help_lists_every_model_form_and_so_does_the_unknown_name_error(capsys):
    """The forms of --model come from one list (rococo_eval.models.families.MODEL_FORMS): in run --help, in the error
    of a name of none of them, and in docs/cli.md's list of models."""
    from rococo_eval.models.families import MODEL_FORMS

    shown = subprocess.run([sys.executable, "-m", "rococo_eval", "run", "--help"], capture_output=True, text=True,
                           check=True, env={**os.environ, "COLUMNS": "10000"}).stdout
    assert main(["run", "--model", "clip"]) == 1
    error = capsys.readouterr().err
    models_section = (REPO_ROOT / "docs" / "cli.md").read_text().split("## Models")[1].split("\n#")[0]
    assert {"open_clip", "hf", "blip", "vse", "pcmepp", "python"} == {form.library for form in MODEL_FORMS}
    for form in MODEL_FORMS:
        assert str(form) in shown and str(form) in error
        assert f"`{form.syntax}`" in models_section


def test_run_without_images_says_how_to_get_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(models, "load_model", pytest.fail)
    assert run("--model", "hf:openai/clip-vit-base-patch32", "--cache-dir", tmp_path, "--out", tmp_path / "report") == 1
    error = capsys.readouterr().err
    assert "--images-dir COCO_ROOT" in error and "--download-images" in error


def test_the_advice_for_missing_images_works(annotations_dir, coco_root, coco_copy, tmp_path, monkeypatch):
    """The command and the Python call that a COCO root lacking images is told to use, each run: they fetch the
    missing images (here from a mirror, the generated COCO root)."""
    from rococo_eval.data.source import ImageFolderError

    monkeypatch.setenv("ROCOCO_IMAGE_BASE_URL", str(coco_root))
    monkeypatch.setenv("ROCOCO_ANNOTATIONS_DIR", str(annotations_dir))
    monkeypatch.chdir(tmp_path)
    images = sorted((coco_copy / "val2014").iterdir())
    for advice in ("python", "command"):
        for image in images[:2]:
            image.unlink()
        with pytest.raises(ImageFolderError) as refused:
            RococoSource(annotations_dir, images_dir=coco_copy)
        message = str(refused.value)
        if advice == "python":
            call = re.search(r"rococo_eval\.data\.source\.fetch_images\([^)]*\)", message)[0]
            exec(call, {"rococo_eval": __import__("rococo_eval.data.source")})
        else:
            command = re.search(r"add --download-images to `rococo-eval run ([^`]*)`", message)[1]
            (tmp_path / "failing_model.py").write_text("def load():\n    raise ValueError('loaded after the images')\n")
            assert main(["run", "--model", "failing_model:load", *command.split(), "--download-images", "--cache-dir",
                         str(tmp_path / "cache"), "--out", str(tmp_path / "report"), "-q"]) == 1
        assert RococoSource(annotations_dir, images_dir=coco_copy).num_images == len(images)
    source = RococoSource(annotations_dir, images_dir=coco_copy)  # an image gone after the folder was checked
    (coco_copy / source.image_files[3]).unlink()
    with pytest.raises(FileNotFoundError, match="COCO test image .* is missing; fetch it again: add "
                                                "--download-images to `rococo-eval run --images-dir ") as refused:
        source.original_image(3)
    exec(re.search(r"rococo_eval\.data\.source\.fetch_images\([^)]*\)", str(refused.value))[0],
         {"rococo_eval": __import__("rococo_eval.data.source")})
    assert source.original_image(3).size


def test_unknown_attack(tmp_path, capsys):
    assert run("--model", "hf:x", "--attacks", "rand_voca,mixup", "--out", tmp_path) == 1
    error = capsys.readouterr().err  # the library's check, in the command's words
    assert "rococo-eval: error: --attacks must be among ('same_concept'" in error and "got 'mixup'" in error
    assert "('all', 'text', 'image')" in error



@pytest.mark.parametrize("argv, expected, positionals", [
    (["run", "--model", "m"], {"compact_scores": "--compact-scores", "rerank_k": "--rerank-k", "quiet": "--quiet",
                               "images_dir": "--images-dir", "annotations_dir": "--annotations-dir"}, []),
    (["score", "f.npy"], {"model_name": "--model-name", "trust_order": "--trust-order", "out": "--out"}, ["files"]),
    (["attack", "set.csv", "--out", "o"], {"per_image": "--per-image", "seeds": "--seeds", "verbose": "--verbose"},
     ["input"]),
    (["from-mteb", "results"], {"model_name": "--model-name", "out": "--out"}, ["results"]),
    (["compare", "a", "b"], {"quiet": "--quiet"}, ["report_a", "report_b"]),
])
def test_the_flag_of_each_argument_is_the_parsers_own(argv, expected, positionals):
    """Issue 42: `as_flags` wrote every backticked word that was an attribute of the parsed arguments as `--word`, by
    spelling, so a positional (`input`, `results`) became an option that does not exist. The table is now read from
    the parser: each option of the command by its argument's name, in the long spelling that --help shows."""
    parser = build_parser()
    args = parser.parse_args(argv)
    flags = option_flags(parser, args)
    assert expected.items() <= flags.items()
    assert not {"command", "handler", "help", "version", *positionals} & set(flags)
    subcommand = next(action for action in parser._actions if action.dest == "command").choices[argv[0]]
    assert set(flags) == {action.dest for action in subcommand._actions if action.option_strings} - {"help"}
    assert all(flag in subcommand.format_help() for flag in flags.values())
    assert as_flags("`quiet` or `verbose`; `k`", flags) == "--quiet or --verbose; `k`"
    for name in positionals:
        assert as_flags(f"`{name}` is refused", flags) == f"`{name}` is refused"


def test_a_subcommand_of_a_subcommand_gives_its_flags():
    parser = build_parser()
    args = parser.parse_args(["leaderboard", "migrate", "--repo", "org/board"])
    flags = option_flags(parser, args)
    assert {"repo": "--repo", "skip_existing": "--skip-existing", "dry_run": "--dry-run"}.items() <= flags.items()
    assert "action" not in flags

def test_errors_of_checks_below_the_command_name_its_options(tmp_path, capsys):
    """The saving options are checked once, below the command (rococo_eval.scoring.galleries.check_saving), and the
    command names them as its options."""
    assert run("--model", "hf:x", "--compact-scores", "--out", tmp_path) == 1
    assert "--compact-scores says how --save-scores writes the score matrices: give --save-scores too" in \
        capsys.readouterr().err
    assert run("--model", "hf:x", "--save-embeddings", tmp_path / "e.npz", "--out", tmp_path) == 1
    assert f"--save-embeddings {str(tmp_path / 'e.npz')!r}: give a file ending in .safetensors" in \
        capsys.readouterr().err


def test_python_dash_m_shows_the_subcommands():
    done = subprocess.run([sys.executable, "-m", "rococo_eval", "--help"], capture_output=True, text=True, check=True)
    assert "run" in done.stdout and "score" in done.stdout


@pytest.mark.slow
def test_run_notes_show_in_a_terminal_and_quiet_silences_them_and_the_libraries(hf_name, benchmark, tmp_path):
    """What a user sees in a terminal, loud and quiet (on a small benchmark; the notes at RoCOCO's scale:
    ``test_run_hf_interrupted_then_resumed_...``)."""
    command = [sys.executable, "-m", "rococo_eval", "run", "--model", hf_name, "--attacks", "mix_seed1", "--cache-dir",
               str(tmp_path / "cache"), "--device", "cpu", "--workers", "2", "--batch-size", "500", "--benchmark",
               str(benchmark)]
    loud = subprocess.run(command + ["--out", str(tmp_path / "loud")], capture_output=True, text=True)
    quiet = subprocess.run(command + ["--out", str(tmp_path / "quiet"), "-q"], capture_output=True, text=True)
    assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
    assert "rococo-eval: images/original: 12 images embedded in" in loud.stderr
    assert "Loading weights" in loud.stderr  # transformers' progress bar
    assert quiet.stderr == "" and "mix_seed1" in quiet.stdout


@pytest.mark.parametrize("kind", UNREACHABLE)
def test_run_download_images_stops_at_once(annotations_dir, tmp_path, real_retry_delays, monkeypatch, capsys, kind):
    make_url, reason = UNREACHABLE[kind]
    monkeypatch.setenv("ROCOCO_IMAGE_BASE_URL", make_url())
    cache = tmp_path / "cache"
    started = time.monotonic()
    status = main(["run", "--model", "hf:openai/clip-vit-base-patch32", "--attacks", "rand_voca",
                       "--download-images", "--cache-dir", str(cache), "--annotations-dir", str(annotations_dir),
                       "--out", str(tmp_path / "report"), "--quiet"])
    assert time.monotonic() - started < 20
    assert status == 1
    error = capsys.readouterr().err
    assert reason in error and "--images-dir" in error and repr(str(cache / "coco")) in error
    assert not (cache / "coco").exists()


def test_run_evaluates_a_model_on_the_benchmark(benchmark, hf_name, tmp_path, capsys):
    assert main(["run", "--model", hf_name, "--benchmark", str(benchmark), "--attacks", "rand_voca,mix_seed7",
                 "--out", str(tmp_path / "report"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu",
                 "--workers", "1", "-q"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())["results"]
    assert report["rand_voca/image_to_text"]["num_gallery"] == 59 + 48
    assert report["mix_seed7/text_to_image"]["num_queries"] == 59
    capsys.readouterr()


def test_run_scores_galleries_smaller_than_ten_at_the_cutoffs_they_allow(image_set, hf_name, tmp_path, caplog,
                                                                         capsys):
    """`run`, `score` and the Space score a gallery of fewer than ten items at the cut-offs it allows."""
    from rococo_eval.data.facts import GalleryFacts
    from rococo_eval.space.logic import evaluate_files

    records = json.loads((image_set / "set.json").read_text())[5:11]  # six images, all captions attackable
    (tmp_path / "six.json").write_text(json.dumps(records))
    bench = make_benchmark(tmp_path / "six.json", tmp_path / "bench", strategies=["rand_voca", "mix"], seeds=[1],
                           image_root=image_set, cache_dir=tmp_path / "encodings")
    assert main(["run", "--model", hf_name, "--benchmark", str(bench), "--attacks", "rand_voca,mix_seed1",
                 "--out", str(tmp_path / "report"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu",
                 "--workers", "1"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())["results"]
    clean = report["clean/text_to_image"]  # six images: R@10 is not defined
    assert clean["num_gallery"] == 6 and "recall@5" in clean and "recall@10" not in clean
    assert clean["r_mean"] == pytest.approx((clean["recall@1"] + clean["recall@5"]) / 2)
    assert "recall@10" in report["mix_seed1/text_to_image"]  # twelve images
    assert "recall@10" in report["rand_voca/image_to_text"]
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert "clean/text_to_image has 6 items: Recall@K for K in 1, 5 only (its r_mean is their mean)" in warnings

    scores = np.random.default_rng(0).standard_normal((30, 6)).astype(np.float32)  # clean text-to-image
    np.save(tmp_path / "clean_text_to_image.npy", scores)
    assert main(["score", "--benchmark", str(bench), "--out", str(tmp_path / "scored"), "-q",
                 str(tmp_path / "clean_text_to_image.npy")]) == 0
    scored = json.loads((tmp_path / "scored" / "report.json").read_text())["results"]["clean/text_to_image"]
    expected = rococo_recall.rococo_recall(scores, **metric_inputs_for("clean", "text_to_image", benchmark=bench),
                                           k=(1, 5))
    assert {name: scored[name] for name in expected} == expected and "recall@10" not in scored
    source = BenchmarkSource(bench)
    space = evaluate_files([str(tmp_path / "clean_text_to_image.npy")], facts=GalleryFacts.of(source))
    assert space.results["clean/text_to_image"].metrics["recall@5"] == expected["recall@5"]
    assert "recall@10" not in space.results["clean/text_to_image"].metrics
    assert "Scored at R@1 and R@5 only: the gallery has 6 items." in space.message


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_output_is_written_with_the_mode_of_the_umask(umask, benchmark, image_set, hf_name, tmp_path, capsys):
    """One rule for every file the commands write: ``0o666`` less the umask, and ``0o777`` less it for their folders
    (docs/cli.md, "What it writes"); the score files were 0600 and a benchmark folder 0700 whatever the umask."""
    from rococo_eval.io.savedscores import score_file_name, write_top_k

    previous = os.umask(umask)
    try:
        assert main(["run", "--model", hf_name, "--benchmark", str(benchmark), "--attacks", "rand_voca", "--out",
                     str(tmp_path / "report"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--workers",
                     "1", "--save-scores", str(tmp_path / "scores"), "--save-embeddings",
                     str(tmp_path / "embeddings.safetensors"), "-q"]) == 0
        assert main(["table", str(tmp_path / "report"), "--out", str(tmp_path / "table"), "-q"]) == 0
        assert main(["attack", str(image_set / "set.json"), "--strategies", "mix", "--seeds", "1", "--out",
                     str(tmp_path / "benchmark"), "--cache-dir", str(tmp_path / "encodings"), "-q"]) == 0
        compact = write_top_k(tmp_path / "compact" / score_file_name(CLEAN, TEXT_TO_IMAGE, 1), [[0]],
                              np.ones((1, 1), dtype=np.float32), -100.0, 2)  # as run --compact-scores writes them
    finally:
        os.umask(previous)
    capsys.readouterr()
    written = {path.relative_to(tmp_path).as_posix(): path.stat().st_mode & 0o777
               for folder in ("report", "scores", "table") for path in (tmp_path / folder).iterdir()}
    written.update({"embeddings.safetensors": (tmp_path / "embeddings.safetensors").stat().st_mode & 0o777,
                    "compact": compact.stat().st_mode & 0o777})
    assert {"report/report.json", "report/report.md", "report/recall.png", "table/table.csv", "table/table.md",
            "table/table.png", f"scores/{score_file_name(CLEAN, TEXT_TO_IMAGE)}",
            f"scores/{score_file_name('rand_voca', IMAGE_TO_TEXT)}"} <= set(written)
    assert written == dict.fromkeys(written, 0o666 & ~umask)
    made = [tmp_path / "benchmark", *(tmp_path / "benchmark").rglob("*")]
    assert {path.stat().st_mode & 0o777 for path in made if path.is_file()} == {0o666 & ~umask}
    assert {path.stat().st_mode & 0o777 for path in made if path.is_dir()} == {0o777 & ~umask}


REFUSED = {  # a command refused before any output, by name: its arguments, OUT its output folders
    "score": lambda tmp, hf_name: ["score", str(tmp / "bad.npy"), "--out", "OUT"],
    "run without images": lambda tmp, hf_name: ["run", "--model", hf_name, "--cache-dir", str(tmp / "cache"),
                                                "--out", "OUT", "--save-scores", "OUT/scores"],
    "run with a missing model": lambda tmp, hf_name: ["run", "--model", "vse:missing.pth", "--out", "OUT",
                                                      "--save-scores", "OUT/scores", "--save-embeddings",
                                                      "OUT/embeddings/e.safetensors"],
    "table": lambda tmp, hf_name: ["table", str(tmp / "no-report"), "--out", "OUT"],
    "from-mteb": lambda tmp, hf_name: ["from-mteb", str(tmp), "--out", "OUT"],
    "attack": lambda tmp, hf_name: ["attack", str(tmp / "no-such-set.json"), "--out", "OUT/benchmark"],
}


@pytest.mark.parametrize("command", REFUSED)
def test_a_refused_command_leaves_no_new_folder_and_an_existing_one_untouched(command, hf_name, tmp_path, capsys):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    np.save(inputs / "bad.npy", np.zeros((3, 4), dtype=np.float32))
    arguments = REFUSED[command](inputs, hf_name)
    new = tmp_path / "new" / "deep"
    assert main([argument.replace("OUT", str(new)) for argument in arguments]) == 1
    assert "rococo-eval: error: " in capsys.readouterr().err
    assert not (tmp_path / "new").exists()

    existing = tmp_path / "existing"
    (existing / "scores").mkdir(parents=True)
    (existing / "notes.txt").write_text("mine")
    before = {path: path.stat().st_mtime_ns for path in [existing, *existing.rglob("*")]}
    assert main([argument.replace("OUT", str(existing)) for argument in arguments]) == 1
    assert {path: path.stat().st_mtime_ns for path in [existing, *existing.rglob("*")]} == before
    assert (existing / "notes.txt").read_text() == "mine"


def test_run_interrupted_while_saving_scores_leaves_no_empty_folder(benchmark, hf_name, tmp_path, monkeypatch,
                                                                      capsys):
    """Ctrl-C while the first score matrix is written: its temporary file is removed, and the folders the command
    made for it and for the report, now empty, with it; an existing folder and its files stay."""
    from rococo_eval.io.savedscores import ScoreMatrixWriter

    def interrupted(self, start, rows):
        raise KeyboardInterrupt

    monkeypatch.setattr(ScoreMatrixWriter, "write", interrupted)
    (tmp_path / "existing").mkdir()
    (tmp_path / "existing" / "notes.txt").write_text("mine")
    assert main(["run", "--model", hf_name, "--benchmark", str(benchmark), "--attacks", "rand_voca", "--out",
                 str(tmp_path / "new" / "report"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu",
                 "--workers", "1", "--save-scores", str(tmp_path / "existing" / "scores"), "-q"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cache", "existing"]
    assert [path.name for path in (tmp_path / "existing").iterdir()] == ["notes.txt"]


def _subcommands() -> dict:
    """The parser of each subcommand of `rococo-eval`, by name (a group's, such as `leaderboard migrate`, by both)."""
    import argparse

    from rococo_eval.cli import build_parser

    def commands_of(parser, prefix: str = "") -> dict:
        groups = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        if not groups:
            return {prefix.strip(): parser}
        return {name: command for group in groups for choice, child in group.choices.items()
                for name, command in commands_of(child, f"{prefix} {choice}").items()}

    return commands_of(build_parser())


def test_every_quiet_says_it_keeps_each_kind_of_warning_about_the_numbers():
    """Issue 39, item 2: `--quiet` documents exactly what it drops and keeps. Each command's help of it named the
    warnings it keeps, but not from-mteb's own (ties that MTEB's order decided), and table's said "no notes"
    although it now passes its reports' warnings on."""
    for name, command in _subcommands().items():
        [quiet] = [action for action in command._actions if "--quiet" in action.option_strings]
        for kind in ("files that disagree", "an order scored against its scores", "files whose agreement could not "
                     "be checked", "ties that MTEB's order decided", "damaged cache files", "the warnings of the "
                     "reports compared"):
            assert kind in quiet.help, (name, kind)


def test_trust_orders_help_gives_the_level_that_the_refusal_names():
    """Issue 39, items 1 and 9: --trust-order's help wrote the sign test's level by hand ("1e-6") and the refusal
    from the constant ("below the 1e-06 level"): one level, written alike."""
    from rococo_eval.detection import ORDER_CONTRADICTION_LEVEL, OrderDecision

    help_text = " ".join(_subcommands()["score"].format_help().split())
    level = f"{ORDER_CONTRADICTION_LEVEL:g}"
    assert f"below the {level} level" in OrderDecision("", 452, 59, 512).contradiction
    assert f"a one-sided sign test below {level}," in help_text


def _score_in_a_terminal(*arguments):
    """``rococo-eval ARGUMENTS`` in its own process: what a user sees on stdout and stderr (in-process, pytest's log
    capture replaces the command's stderr handler)."""
    return subprocess.run([sys.executable, "-m", "rococo_eval", *map(str, arguments)], capture_output=True, text=True)


@pytest.mark.slow
def test_score_refuses_a_stated_order_that_the_evidence_is_significantly_against(captions_per_image, tmp_path, capsys):
    """Issue 39: an official-order rand_voca matrix whose model is right on 452 of the 511 informative sampled
    queries (88%: below the 90% that decides) was scored as stated, in the dataset order, to R@1 0.02. The sign test
    refuses it; at the boundary, 310 of 511 against the stated order are refused (p = 8.1e-7) and 309 are not
    (p = 1.3e-6); the other order is taken; --trust-order scores a refused order with a warning that --quiet keeps.
    Only the last run scores a matrix: the others are settled when the files are planned."""
    from rococo_eval.scoring.plan import GalleryFacts, ScoreRequest, plan_score_files
    from helpers.order_votes import plant_votes

    paths = {}
    for official, dataset in ((452, 59), (310, 201), (309, 202)):
        paths[official] = sparse_npy(tmp_path / f"m{official}_rand_voca.npy", (5000, 50010))
        scores = np.load(paths[official], mmap_mode="r+")
        plant_votes(scores, captions_per_image, official, dataset)
        scores.flush()
        del scores
    for official, dataset, p_value in ((452, 59, "2.4e-76"), (310, 201, "8.1e-07")):
        path = paths[official]
        assert main(["score", f"rand_voca:image_to_text:dataset={path}", "--out", str(tmp_path / "refused")]) == 1
        error = capsys.readouterr().err
        assert (f"rococo-eval: error: {path}: rand_voca image-to-text gallery: the dataset order is given, but the "
                f"scores are against the dataset order (one-sided sign test: p = {p_value}, below the 1e-06 level): "
                f"{official} of 512 sampled queries score their official-order ground truth higher, {dataset} their "
                "dataset-order one.") in error
        assert (f"give it as rand_voca:image_to_text:official={path}, or add --trust-order to score it in the dataset "
                "order all the same") in error
    assert not (tmp_path / "refused" / "report.json").exists()

    # Taken, as score plans them (scoring the 1 GB matrices would test the metric again, not the order rule): 309
    # against the stated order, and the order that the votes favour.
    plans = [plan_score_files([ScoreRequest(paths[official], attack="rand_voca", order=order)],
                              GalleryFacts(captions_per_image))[0]
             for official, order in ((309, "dataset"), (310, "official"))]
    assert [planned.choice.order for planned in plans] == ["dataset", "official"]
    assert ("the scores do not decide the order (of 512 sampled queries, 309 score their official-order ground truth "
            "higher and 202 their dataset-order ground truth;") in plans[0].choice.note

    trusted = _score_in_a_terminal("score", f"rand_voca:dataset={paths[310]}", "--trust-order", "--quiet",
                                   "--out", tmp_path / "trusted")
    assert trusted.returncode == 0, trusted.stderr
    warning = (f"{paths[310]}: scored in the dataset order all the same, as asked, although the scores are against "
               "the dataset order (one-sided sign test: p = 8.1e-07, below the 1e-06 level): 310 of 512 sampled "
               "queries score their official-order ground truth higher, 201 their dataset-order one")
    assert trusted.stderr == f"rococo-eval: warning: {warning}\n"  # --quiet: no note, but the warning
    assert json.loads((tmp_path / "trusted" / "report.json").read_text())["meta"]["warnings"] == [warning]
    assert f"## Warnings\n\n- {warning}\n" in (tmp_path / "trusted" / "report.md").read_text()


def test_quiet_keeps_the_warning_that_the_files_disagree(benchmark, tmp_path):
    """Issue 39: `score --quiet` on files that disagree printed the table and nothing else. Quiet drops the notes
    (how long it took, where the report is), never the warning, which report.json and report.md record too."""
    mixed = benchmark_files(tmp_path / "mixed", BenchmarkSource(benchmark), seeds={"mix_seed7": 1})
    loud = _score_in_a_terminal("score", "--benchmark", benchmark, "--out", tmp_path / "loud", *mixed)
    quiet = _score_in_a_terminal("score", "--benchmark", benchmark, "--out", tmp_path / "quiet", "--quiet", *mixed)
    assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
    [found] = json.loads((tmp_path / "quiet" / "report.json").read_text())["meta"]["consistency"]
    warning = f"the files disagree: {found['message']}"
    assert "galleries scored in" in loud.stderr and f"rococo-eval: warning: {warning}\n" in loud.stderr
    assert quiet.stderr == f"rococo-eval: warning: {warning}\n" and quiet.stdout == loud.stdout
    assert json.loads((tmp_path / "quiet" / "report.json").read_text())["meta"]["warnings"] == [warning]
    report = (tmp_path / "quiet" / "report.md").read_text()
    assert report.startswith(f"# RoCOCO report\n\n## Warnings\n\n- {warning}\n\n|")


def test_score_says_that_compact_files_were_not_compared(benchmark, tmp_path):
    """Issue 39: two compact files (a re-ranker's) whose clean R@1 differ were scored without a word of the check
    that did not run; it is said on stderr, --quiet or not, and in the report."""
    source = BenchmarkSource(benchmark)
    paths = []
    for seed, attack in ((2, CLEAN), (0, "mix_seed7")):  # two draws whose clean R@1 differ: 11.86 and 6.78
        layout = source.gallery(attack, TEXT_TO_IMAGE)
        scores = np.random.default_rng(seed).standard_normal((layout.num_queries, layout.num_gallery))
        top = np.argsort(-scores, axis=1)[:, :4]
        paths.append(tmp_path / f"blip_{attack}_text_to_image.npz")
        np.savez(paths[-1], top_columns=top, top_scores=np.take_along_axis(scores, top, axis=1).astype(np.float32),
                 fill=np.float32(-100), num_gallery=layout.num_gallery)
    done = _score_in_a_terminal("score", "--benchmark", benchmark, "--out", tmp_path / "report", "-q", *paths)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    clean = [report["results"][key]["recall@1" if key.startswith(CLEAN) else "clean_recall@1"]
             for key in ("clean/text_to_image", "mix_seed7/text_to_image")]
    assert clean[0] != clean[1]  # they differ, and nothing compares them
    warning = (f"the clean numbers of {paths[0]}, {paths[1]} were not checked against the other files of their "
               "direction: a re-ranker's scores (compact files, or a fill block), whose attacked galleries re-rank "
               "other candidates than the clean one, so their clean parts may differ by right")
    assert done.stderr == f"rococo-eval: warning: {warning}\n"
    assert report["meta"]["warnings"] == [warning] and "consistency" not in report["meta"]
    assert f"## Warnings\n\n- {warning}\n" in (tmp_path / "report" / "report.md").read_text()


def test_from_mteb_warns_of_ties_that_mteb_decided_even_when_quiet(tmp_path):
    """Issue 39: the ranks that MTEB's order of tied items decided are a warning about the numbers: on stderr with
    --quiet, in report.json's meta and in report.md."""
    layout = gallery_layout(CLEAN, IMAGE_TO_TEXT, [5, 5, 5, 5])
    scores = np.random.default_rng(0).standard_normal((layout.num_queries, layout.num_gallery))
    numbers = rococo_recall.rococo_recall(scores, **layout.metric_inputs())
    task = {"task_name": "RoCOCOCleanI2TRetrieval", "scores": {"test": [
        {**{f"rococo_{name}": value for name, value in numbers.items()}, "rococo_tied_queries": 2}]}}
    folder = tmp_path / "mteb" / "org__model" / "revision"
    folder.mkdir(parents=True)
    (folder / "RoCOCOCleanI2TRetrieval.json").write_text(json.dumps(task))
    done = _score_in_a_terminal("from-mteb", tmp_path / "mteb", "--out", tmp_path / "report", "--quiet")
    assert done.returncode == 0, done.stderr
    warning = ("MTEB ordered tied items by id for 2 queries of clean/image_to_text: run's pessimistic ties may give "
               "lower numbers there")
    assert done.stderr == f"rococo-eval: warning: {warning}\n"
    meta = json.loads((tmp_path / "report" / "report.json").read_text())["meta"]
    assert meta["warnings"] == [warning] and meta["tied_queries"] == {"clean/image_to_text": 2}
    assert f"## Warnings\n\n- {warning}\n" in (tmp_path / "report" / "report.md").read_text()


def test_run_precision_choices_and_model_prefixes_come_from_the_families_registry(capsys):
    """--precision's choices are rococo_eval.models.families.PRECISIONS; every family's record names a checker and a
    loader of rococo_eval.models.adapters, and its prefix parses to it."""
    from rococo_eval.cli import build_parser
    from rococo_eval.models.adapters import parse_model_name
    from rococo_eval.models.families import FAMILIES, PRECISIONS

    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--model", "hf:m", "--precision", "fp8"])
    assert f"choose from {', '.join(map(repr, PRECISIONS))}" in capsys.readouterr().err
    assert build_parser().parse_args(["run", "--model", "hf:m"]).precision == PRECISIONS[0]
    for family in FAMILIES.values():
        assert callable(getattr(models, family.checker)) and callable(getattr(models, family.loader))
        if family.prefix:
            assert parse_model_name(f"{family.prefix}some/where.pth").library == family.library
