"""The dataset cards come from the templates in ``rococo_eval/data/templates/``: each card renders for a small
input with every ``$name`` placeholder filled by a value the code computed, and the templates ship inside the
package (the wheel's package data)."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from importlib.resources import files
from pathlib import Path
from string import Template

import pytest
import yaml
from PIL import Image

from rococo_eval.data.annotations import ANNOTATION_FILES
from rococo_eval.data.benchmark import _card, _Plan, make_benchmark
from rococo_eval.data.export import DATASET_CITATION, _dataset_card, fill_template
from rococo_eval.data.manifest import MANIFEST, read_benchmark
from rococo_eval.data.source import BenchmarkSource, RococoSource

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ["dataset_card.md", "benchmark_card.md", "coco_citation.bib"]
DANGER_SPLITS = {"danger": {"original": ["data/captions_original-00000-of-00001.parquet"],
                            "adversarial": ["data/danger_adversarial-00000-of-00001.parquet"]}}


def _front(card: str) -> dict:
    match = re.match(r"---\n(.*?)\n---\n", card, re.DOTALL)
    assert match, "the card has no YAML header"
    return yaml.safe_load(match.group(1))


@pytest.fixture(scope="module")
def mix_benchmark(tmp_path_factory):
    """A benchmark of two 32 x 32 images with one caption each, attacked by ``mix`` with seed 3 only."""
    root = tmp_path_factory.mktemp("set")
    for name, colour in [("a.png", "red"), ("b.png", "blue")]:
        Image.new("RGB", (32, 32), colour).save(root / name)
    (root / "set.csv").write_text("image,caption\na.png,a red square\nb.png,a blue square\n")
    return make_benchmark(root / "set.csv", root / "bench", strategies=["mix"], seeds=[3])


def test_the_export_card_fills_its_template(annotations_dir):
    card = _dataset_card(DANGER_SPLITS, RococoSource(annotations_dir))
    assert "$" not in card
    assert _front(card)["configs"] == [{"config_name": "danger", "data_files": [
        {"split": split, "path": paths} for split, paths in DANGER_SPLITS["danger"].items()]}]
    for computed in ("| `danger` | `original` (25,010), `adversarial` (25,000) |",
                     "the 5,000 images of `images`", "the 25,010 captions of\n`captions`",
                     "Adversarial row `5 * i + j` was made from caption `j` of image `i`.",
                     "its captions then its 5 adversarial ones", "image, 0..4999, in the order",
                     f"| `{ANNOTATION_FILES['danger'].file_name}` | `{ANNOTATION_FILES['danger'].sha256}` |",
                     '"danger", split="adversarial"', "seeds 1, 10 and 100", "0.9 * image + 0.1 * partner"):
        assert computed in card, computed
    assert card.endswith(f"```bibtex\n{DATASET_CITATION}```\n")


def test_the_benchmark_card_fills_its_template(mix_benchmark):
    card = (mix_benchmark / "README.md").read_text(encoding="utf-8")
    assert "$" not in card
    assert [entry["config_name"] for entry in _front(card)["configs"]] == ["mix_seed3", "captions", "images"]
    for computed in ("| `mix_seed3` | `original` (2), `adversarial` (2) |", "| `captions` | `test` (2) |",
                     "Input: 2 images with 2 captions; 0 empty caption(s) skipped. The benchmark holds\n  2 images.",
                     "No text attack. Image attacks: `mix_seed3`.", "Adversarial captions per image: none",
                     "seeds 3.", f"`{MANIFEST}` lists"):
        assert computed in card, computed
    for path, digest in read_benchmark(mix_benchmark).files.items():
        assert f"| `{path}` | `{digest}` |" in card


def test_the_benchmark_card_lists_the_first_dropped_images(mix_benchmark):
    source = BenchmarkSource(mix_benchmark)
    splits = {"mix_seed3": {"original": ["data/o.parquet"], "adversarial": ["data/a.parquet"]}}
    drops = [{"image": f"img/{i}.jpg", "reason": "no caption"} for i in range(23)]
    plan = _Plan((), (), 4, {}, {"images": 2, "images_in": 25, "captions_in": 120, "empty_captions": 3,
                                 "captions_without_candidate": 7, "ground_truth_collisions": {"rand_voca": 2},
                                 "dropped_images": drops})
    card = _card(splits, source, {"a.json": "0" * 64}, plan, ["rand_voca"], ["mix_seed3"], ["rand_voca", "mix"],
                 5, [3], "an/encoder", "sets/$HOME.json")
    assert "$" not in card.replace("$HOME", "")
    for computed in ("# RoCOCO-style attacks of `sets/$HOME.json`", "Input: 25 images with 120 captions; 3 empty",
                     "Adversarial captions per image: 4.", "7 caption(s) had no candidate word",
                     "are dropped: 23.\n- `img/0.jpg`: no caption", "- `img/19.jpg`: no caption\n- ... and 3 more",
                     "(rand_voca: 2)", "`an/encoder`", "text seed 5", "Text attacks: `rand_voca`."):
        assert computed in card, computed
    assert "img/20.jpg" not in card


@pytest.mark.parametrize("name", TEMPLATES)
def test_fill_template_wants_exactly_the_placeholders(name):
    placeholders = Template(files("rococo_eval.data").joinpath("templates", name).read_text()).get_identifiers()
    filled = fill_template(name, {key: f"<{key}>" for key in placeholders})
    assert "$" not in filled and all(f"<{key}>" in filled for key in placeholders)
    if placeholders:
        first = min(placeholders)
        with pytest.raises(ValueError, match=rf"missing \['{first}'\], extra \[\]"):
            fill_template(name, {key: "" for key in placeholders if key != first})
    with pytest.raises(ValueError, match=r"missing \[\], extra \['unknown'\]"):
        fill_template(name, {**{key: "" for key in placeholders}, "unknown": ""})


@pytest.mark.parametrize("name", TEMPLATES)
def test_the_templates_ship_in_the_package(name):
    assert files("rococo_eval.data").joinpath("templates", name).is_file()
    package_data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"]["rococo_eval"]
    assert any(fnmatch.fnmatch(f"data/templates/{name}", pattern) for pattern in package_data), package_data
