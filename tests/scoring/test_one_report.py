"""One path from score files to a report: ``rococo-eval score`` and the Space write the same ``report.json``.

Both go through :mod:`rococo_eval.scoring.plan` and :func:`rococo_eval.reporting.report.write_report`. The files
are scored on a small generated benchmark (a text attack and an image attack, made here by ``make_benchmark``),
with their layouts read from their names and shapes, as a user would upload them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from rococo_eval.cli import main
from rococo_eval.data.benchmark import make_benchmark
from rococo_eval.data.source import BenchmarkSource
from rococo_eval.io.savedscores import score_file_name
from rococo_eval.scoring.plan import (GalleryFacts, PlanError, ScoreRequest,
                                      plan_score_files)
from rococo_eval.space.logic import evaluate_files, write_outputs

NOUNS = ("dog", "cat", "horse", "bird", "car", "boat", "train", "cow")


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory):
    root = tmp_path_factory.mktemp("image_set")
    (root / "images").mkdir()
    records = []
    for i, noun in enumerate(NOUNS):
        pixels = np.random.default_rng(i).integers(0, 256, (48, 64, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "images" / f"{i:03d}.png")
        records.append({"image": f"images/{i:03d}.png",
                        "caption": [f"A {noun} standing near the {place} in the morning." for place in
                                    ("street", "river", "house", "field", "tree")[: 3 + i % 3]]})
    (root / "set.json").write_text(json.dumps(records))
    return make_benchmark(root / "set.json", tmp_path_factory.mktemp("bench") / "bench",
                          strategies=["rand_voca", "mix"], seeds=[1], cache_dir=tmp_path_factory.mktemp("cache"))


def _score_files(source, folder) -> list:
    """Seeded scores with signal for the benchmark's galleries, named so that their layout reads off the name."""
    rng = np.random.default_rng(7)
    paths = []
    for attack, direction in (("clean", "image_to_text"), ("rand_voca", "image_to_text"),
                              ("clean", "text_to_image"), ("mix_seed1", "text_to_image")):
        layout = source.gallery(attack, direction, "official")
        scores = rng.standard_normal((layout.num_queries, layout.num_gallery)).astype(np.float32)
        for query, correct in enumerate(layout.references):
            scores[query, list(correct)] += 1.5
        path = folder / score_file_name(attack, direction)  # as `run --save-scores` names it
        np.save(path, scores)
        paths.append(path)
    return paths


def test_the_command_and_the_space_write_the_same_report(benchmark, tmp_path, monkeypatch):
    source = BenchmarkSource(benchmark)
    paths = _score_files(source, tmp_path)
    monkeypatch.chdir(tmp_path)  # the command names each file as given: here by its name, as the Space does
    assert main(["score", "--benchmark", str(benchmark), "--out", "cli", "-q", *[path.name for path in paths]]) == 0
    evaluation = evaluate_files([str(path) for path in paths], facts=GalleryFacts.of(source))
    (tmp_path / "space").mkdir()
    json_path, _ = write_outputs(evaluation, tmp_path / "space")

    from_the_command = json.loads((tmp_path / "cli" / "report.json").read_text())
    from_the_space = json.loads(json_path.read_text())
    assert json_path.name == "report.json"
    assert set(from_the_command) == {"meta", "results", "summary", "analysis"}
    assert sorted(from_the_command["results"]) == sorted(
        ["clean/image_to_text", "rand_voca/image_to_text", "clean/text_to_image", "mix_seed1/text_to_image"])
    assert from_the_command["meta"]["files"]["rand_voca/image_to_text"]["order"] == "official"
    assert from_the_space == from_the_command


def test_the_command_and_the_space_refuse_alike(benchmark, tmp_path):
    source = BenchmarkSource(benchmark)
    paths = _score_files(source, tmp_path)
    np.save(tmp_path / "odd.npy", np.zeros((3, 3), np.float32))
    requests = [ScoreRequest(path, path.name) for path in (paths[1], paths[1], tmp_path / "odd.npy")]
    with pytest.raises(PlanError) as raised:
        plan_score_files(requests, GalleryFacts.of(source))
    assert raised.value.problems[0].startswith("odd.npy: shape (3, 3) fits no RoCOCO layout")
    name = "rand_voca_image_to_text_official_order.npy"
    assert raised.value.problems[1] == f"{name}: gallery rand_voca/image_to_text was already given by {name}"
    with pytest.raises(ValueError) as from_the_space:
        evaluate_files([str(tmp_path / "odd.npy")], facts=GalleryFacts.of(source))
    assert str(from_the_space.value).startswith("odd.npy: shape (3, 3) fits no RoCOCO layout")
