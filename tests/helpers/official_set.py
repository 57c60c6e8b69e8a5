"""The small RoCOCO set the parity tests score on both sides, and the reference environment the official code runs in.

**The set** (:func:`make_official_set`): the ground-truth and ``rand_voca`` captions of ten real test images (0-8
and 83, which has six captions), from the real annotation files; the images are generated JPEGs of COCO-like sizes
(one grayscale), and their altered copies are the ``mix`` attack of the project's own table, written once as files.
The project reads it as a generated benchmark folder (``BenchmarkSource(folder)``); the official code reads
``annotations/`` (its dataset's file names) and ``images/`` (with the altered copies under ``mix_seed1/``).

**The reference environment** (``.venv-reference``, which ``make reference-env`` builds and ``make test`` requires:
``ROCOCO_REQUIRE_REFERENCE=1``) runs the official code of BLIP, VSE infinity and PCME++, read in place from
``../shared/reference``, through the runners in this folder (:func:`run_reference`).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from rococo_eval.attacks.images import make_mix_table
from rococo_eval.catalog import CLEAN
from rococo_eval.data.annotations import read_annotation_file
from rococo_eval.data.manifest import ADVERSARIAL_ROWS, ANNOTATIONS, write_manifest, write_mix_tables
from rococo_eval.data.source import BenchmarkSource
from rococo_eval.io.atomic import write_json
from helpers import REPO_ROOT

SHARED_REFERENCE = REPO_ROOT.parent / "shared" / "reference"
REFERENCE_ENV = REPO_ROOT / ".venv-reference"  # the Makefile's REFERENCE_VENV
HELPERS = REPO_ROOT / "tests" / "helpers"
STAND_INS = HELPERS / "stand_ins"  # torchvision and pycocoevalcap, on the path of BLIP's reference runs only
OLD_HUB = REFERENCE_ENV / "huggingface_hub-0.22.2"  # PCME++'s from_pretrained (see the Makefile)
TORCHVISION = REFERENCE_ENV / "torchvision-0.28.0"  # torch.hub's WSL ResNeXt, for VSE infinity's runs only

IMAGE_INDICES = list(range(9)) + [83]  # test image 83 has six ground-truth captions
ATTACK, IMAGE_ATTACK = "rand_voca", "mix_seed1"
SIZES = [(640, 480), (500, 375), (480, 640), (427, 640), (612, 612), (640, 427), (375, 500), (320, 240), (640, 360),
         (333, 500)]
GRAYSCALE = 4  # this image is saved as a one-channel JPEG


@dataclass
class OfficialSet:
    """The set on disk: ``benchmark`` (the project's), ``ann_root`` and ``images_dir`` (the official code's)."""

    root: Path
    clean: list
    attacked: list
    benchmark: Path
    images_dir: Path
    ann_root: Path
    source: BenchmarkSource

    def itm_eval_task(self, image_size: int = 384) -> dict:
        """What ``blip_official_run.py itm-eval`` needs to build the official datasets of this set."""
        return {"reference": str(SHARED_REFERENCE / "rococo-official"), "image_root": str(self.images_dir),
                "ann_root": str(self.ann_root), "i2t_file": f"{ATTACK}.json", "t2i_file": "coco_karpathy_test.json",
                "miximage": IMAGE_ATTACK, "model": {"image_size": image_size}}


def picture(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A COCO-sized picture: a smooth colour field, a few shapes, a little noise (random but with structure)."""
    width, height = size
    field = Image.fromarray(rng.integers(0, 256, (3, 4, 3), dtype=np.uint8)).resize(size, Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(field)
    for _ in range(6):
        x0, y0 = int(rng.integers(0, width - 20)), int(rng.integers(0, height - 20))
        box = (x0, y0, x0 + int(rng.integers(20, width // 2)), y0 + int(rng.integers(20, height // 2)))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=colour)
    pixels = np.asarray(field, dtype=np.int16) + rng.integers(-12, 13, (height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def make_official_set(root: Path, annotations_dir) -> OfficialSet:
    """Write the set under ``root`` (module docstring)."""
    clean = [read_annotation_file(CLEAN, annotations_dir)[index] for index in IMAGE_INDICES]
    attacked = [read_annotation_file(ATTACK, annotations_dir)[index] for index in IMAGE_INDICES]
    images_dir = root / "images"
    (images_dir / "val2014").mkdir(parents=True)
    rng = np.random.default_rng(21)
    for number, (record, size) in enumerate(zip(clean, SIZES)):
        image = picture(rng, size)
        (image.convert("L") if number == GRAYSCALE else image).save(images_dir / record["image"], quality=90)

    benchmark = root / "benchmark"  # the same captions and images, as a generated benchmark folder
    write_json(clean, benchmark / ANNOTATIONS.format(name=CLEAN), compact=True)
    write_json(attacked, benchmark / ANNOTATIONS.format(name=ATTACK), compact=True)
    offsets = np.cumsum([0] + [len(record["caption"]) for record in clean])
    write_json([{"source_caption_index": int(offsets[n] + j), "candidates": []} for n in range(len(clean))
                for j in range(5)], benchmark / ADVERSARIAL_ROWS.format(name=ATTACK), compact=True)
    write_mix_tables(benchmark, {IMAGE_ATTACK: make_mix_table("mix", 1, len(clean))})
    write_manifest(benchmark, text_attacks=[ATTACK], image_attacks=[IMAGE_ATTACK], adversarial_per_image=5,
                   images_dir=images_dir, details={"made by": __name__})
    source = BenchmarkSource(benchmark)
    (images_dir / IMAGE_ATTACK).mkdir()
    for index in range(source.num_images):  # the altered copies, as files for the official datasets
        altered = source.altered_image_bytes(index, IMAGE_ATTACK)
        (images_dir / IMAGE_ATTACK / source.file_name(index)).write_bytes(altered)

    ann_root = root / "annotations"  # the official dataset's folder: its file names
    write_json(clean, ann_root / "coco_karpathy_test.json", compact=True)
    write_json(attacked, ann_root / f"{ATTACK}.json", compact=True)
    return OfficialSet(root, clean, attacked, benchmark, images_dir, ann_root, source)


def require_reference_env(official_code: str) -> Path:
    """The reference environment's python; a test fails without it under ``make test`` (skips only outside it)."""
    python = REFERENCE_ENV / "bin" / "python"
    if not python.exists():
        message = f"{python} is missing: `make reference-env` builds the official code's environment"
        if os.environ.get("ROCOCO_REQUIRE_REFERENCE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    if not (SHARED_REFERENCE / official_code).is_dir():
        pytest.fail(f"the official code is not at {SHARED_REFERENCE / official_code}")
    return python


def run_reference(runner: str, command: str, task: dict, folder: Path, path=(), timeout: int = 900):
    """Run ``tests/helpers/<runner> COMMAND TASK.json`` in the reference environment from ``folder``, with ``path``
    first on its PYTHONPATH; a failure fails the test with the runner's last output."""
    folder.mkdir(parents=True, exist_ok=True)
    task_path = folder / f"{command}.json"
    task_path.write_text(json.dumps(task, indent=1))
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    environment.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                       PYTHONDONTWRITEBYTECODE="1")  # the official code is read in place: nothing written beside it
    if path:
        environment["PYTHONPATH"] = os.pathsep.join(str(part) for part in path)
    result = subprocess.run([str(REFERENCE_ENV / "bin" / "python"), str(HELPERS / runner), command, str(task_path)],
                            cwd=folder, env=environment, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        pytest.fail(f"the reference run ({runner} {command}) failed:\n{result.stderr[-6000:]}")
    return result


def official_itm_eval(official_set: OfficialSet, matrices: dict, folder: Path) -> dict:
    """The official RoCOCO ``itm_eval`` (``eval_blip_i2t.py``, ``eval_blip_t2i.py``) of score matrices of this set:
    ``{"i2t..." or "t2i...": matrix}`` -> ``{key: its result}``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "matrices.npz"
    np.savez(path, **matrices)
    task = dict(official_set.itm_eval_task(), matrices=str(path), itm_eval_out=str(folder / "itm_eval.json"))
    run_reference("blip_official_run.py", "itm-eval", task, folder, path=[STAND_INS])
    return json.loads((folder / "itm_eval.json").read_text())
