"""Parity with the official VSE infinity evaluation (issue 28): the official code and the project score the same model
alike, for the three released shapes (WSL grid, BUTD detector grid, BUTD regions).

The official code (``../shared/reference/vse-infty-official``) runs in the reference environment ``.venv-reference``
(the Makefile builds it; ``make test`` requires it) through ``tests/helpers/vse_infty_official_run.py``: it builds
small seeded ``VSEModel``s of the official classes, saves them as the official training does, and embeds the set of
:func:`helpers.official_set.make_official_set` (real RoCOCO captions, generated JPEGs and their ``mix`` copies) with the
official loaders and ``encode_data``. The project loads each saved checkpoint through ``--model vse:PATH``, runs
``rococo-eval run`` on the same set, and must give:

- the official ``forward_emb`` embeddings of every image and caption within :data:`EMBEDDING_TOLERANCE`;
- the official ``i2t``/``t2i`` R@1, R@5 and R@10 of the clean gallery (five captions per image, which those
  functions assume), from the project's metric on the project's embeddings;
- the official RoCOCO ``itm_eval`` numbers (``eval_blip_i2t.py``/``eval_blip_t2i.py``) of both attacked galleries,
  and score matrices within the tolerance of the official ``compute_sim``'s;
- the official loader's input of every image (originals, altered copies, EXIF-rotated, CMYK and PNG files) bit for
  bit, under both backbones and three input sizes;
- the official token ids of every caption of the five annotation files, with BERT-base's real vocabulary.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rococo_recall import rococo_recall
from rococo_eval.catalog import TEXT_ATTACKS
from rococo_eval.cli import main
from rococo_eval.io.download import read_image_file
from rococo_eval.io.savedscores import score_file_name
from rococo_eval.models.adapters import load_model
from rococo_eval.models.region_features import image_key
from rococo_eval.models.vse_infty import imageio_pixels, process_image, read_options
from helpers.tiny_models import bert_vocabulary
from helpers.official_set import (
    ATTACK,
    IMAGE_ATTACK,
    make_official_set,
    official_itm_eval,
    require_reference_env,
    run_reference,
    SHARED_REFERENCE,
    TORCHVISION,
)

pytestmark = pytest.mark.slow

EMBEDDING_TOLERANCE = 1e-5  # float32 embeddings of unit length; the two sides batch (and pad) captions differently
SCALE_FACTORS = [None, 0.5, 2.0]  # no input_scale_factor (256), and the options' 128 and 512 (the released grids')
REGIONS = 36  # per image, as in SCAN's precomputed features
MODELS = [  # the released shapes, small: one block per ResNet stage, two BERT layers
    {"name": "wsl_grid", "variant": "wsl", "seed": 1, "input_scale_factor": 0.5},
    {"name": "butd_grid", "variant": "detector", "seed": 2, "input_scale_factor": None},
    {"name": "butd_region", "variant": "region", "seed": 3, "input_scale_factor": None},
]
COMMON = {"embed_size": 64, "batch_size": 8, "resnet_blocks": [1, 1, 1, 1], "wsl_groups": 32, "wsl_width_per_group": 8,
          "bert": {"num_hidden_layers": 2, "intermediate_size": 256}}


def _special_images(folder: Path) -> list[str]:
    """Files the official loader decodes in its own ways: EXIF orientations 2 to 8 (one of them in a JPEG that holds
    two pictures, which Pillow calls MPO), CMYK, a one-bit image, PNGs, a palette of grays."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(5)
    names = []
    for orientation in range(2, 9):
        image = Image.fromarray(rng.integers(0, 256, (30, 52, 3), dtype=np.uint8))
        exif = Image.Exif()
        exif[0x0112] = orientation
        image.save(folder / f"exif{orientation}.jpg", exif=exif.tobytes(), quality=90)
        names.append(f"exif{orientation}.jpg")
    two = [Image.fromarray(rng.integers(0, 256, (30, 52, 3), dtype=np.uint8)) for _ in range(2)]
    exif = Image.Exif()
    exif[0x0112] = 6
    two[0].save(folder / "mpo6.jpg", format="MPO", save_all=True, append_images=two[1:], exif=exif.tobytes())
    base = Image.fromarray(rng.integers(0, 256, (41, 37, 3), dtype=np.uint8))
    base.convert("CMYK").save(folder / "cmyk.jpg")
    base.save(folder / "rgb.png")
    base.convert("L").save(folder / "gray.png")
    base.convert("1").save(folder / "bilevel.png")
    base.convert("L").convert("P").save(folder / "palette.png")
    return names + ["mpo6.jpg", "cmyk.jpg", "rgb.png", "gray.png", "bilevel.png", "palette.png"]


def _write_split(precomp: Path, split: str, captions: list[str], ids: list[int], features=None) -> None:
    (precomp / f"{split}_caps.txt").write_text("".join(caption.replace("\n", " ") + "\n" for caption in captions))
    (precomp / f"{split}_ids.txt").write_text("".join(f"{value}\n" for value in ids))
    if features is not None:
        np.save(precomp / f"{split}_ims.npy", features)


@pytest.fixture(scope="module")
def case(tmp_path_factory, annotations_dir):
    """The set on both sides, the official data folder, the checkpoints, and the official run's outputs."""
    require_reference_env("vse-infty-official")
    root = tmp_path_factory.mktemp("vse-official")
    official_set = make_official_set(root, annotations_dir)
    source = official_set.source
    count = source.num_images
    specials = _special_images(official_set.images_dir / "special")

    # The official data folder: id_mapping.json (image id -> file under images/), and precomp/ splits: "images" (the
    # originals, then their altered copies), "gt" and "adv" (each caption with its image), "pixels" (every file).
    data = root / "data"
    (data / "precomp").mkdir(parents=True)
    (data / "images").symlink_to(official_set.images_dir)
    files = list(source.image_files) + [f"{IMAGE_ATTACK}/{source.file_name(i)}" for i in range(count)]
    files += [f"special/{name}" for name in specials]
    (data / "id_mapping.json").write_text(json.dumps({str(number): path for number, path in enumerate(files)}))
    rng = np.random.default_rng(7)
    regions = rng.normal(size=(2 * count, REGIONS, 2048)).astype(np.float32) * rng.uniform(0.2, 2, (2 * count, 1, 1))
    regions = regions.astype(np.float32)
    ground_truth = source.ground_truth_captions()
    adversarial = source.adversarial_captions(ATTACK)
    gt_images = [image for image, per_image in enumerate(source.captions_per_image) for _ in range(per_image)]
    adv_images = [index // 5 for index in range(len(adversarial))]
    _write_split(data / "precomp", "images", ["an image"] * 2 * count, list(range(2 * count)), regions)
    _write_split(data / "precomp", "gt", ground_truth, gt_images, regions[gt_images])
    _write_split(data / "precomp", "adv", adversarial, adv_images, regions[adv_images])
    _write_split(data / "precomp", "pixels", ["an image"] * len(files), list(range(len(files))))

    # The project's region features: SCAN's layout, ids = COCO ids, rows shuffled (they are put back in order).
    region_folder = root / "region_features"
    region_folder.mkdir()
    keys = [image_key(file) for file in source.image_files]
    for name, rows in (("original", regions[:count]), (IMAGE_ATTACK, regions[count:])):
        order = rng.permutation(count)
        np.save(region_folder / f"{name}_ims.npy", rows[order])
        (region_folder / f"{name}_ids.txt").write_text("".join(keys[index] + "\n" for index in order))

    vocabulary = bert_vocabulary()
    offsets = np.cumsum([0] + source.captions_per_image)
    models = []
    for spec in MODELS:
        checkpoint = root / "checkpoints" / spec["name"] / "model_best.pth"
        models.append({**COMMON, **spec, "checkpoint": str(checkpoint)})
    work = root / "reference"
    task = {"reference": str(SHARED_REFERENCE / "vse-infty-official"), "out": str(work / "out"),
            "data_path": str(data), "vocab": str(vocabulary), "models": models, "num_images": count,
            "five_captions": [int(offsets[i] + j) for i in range(count) for j in range(5)],
            "scale_factors": SCALE_FACTORS,
            "caption_files": [str(Path(annotations_dir) / f"{name}.json") for name in
                              ("coco_karpathy_test",) + TEXT_ATTACKS]}
    run_reference("vse_infty_official_run.py", "evaluate", task, work, path=[TORCHVISION])
    for spec in models:  # the settings file beside each checkpoint: the vocabulary, and the region features' folder
        settings = {"tokenizer": str(vocabulary)}
        if spec["variant"] == "region":
            settings["region_features"] = str(region_folder)
        Path(spec["checkpoint"]).with_suffix(".json").write_text(json.dumps(settings))
    with np.load(work / "out" / "reference.npz") as npz:
        arrays = {key: npz[key] for key in npz.files}
    summary = json.loads((work / "out" / "reference.json").read_text())
    return {"root": root, "set": official_set, "source": source, "models": models, "arrays": arrays,
            "summary": summary, "files": files, "region_folder": region_folder, "five": task["five_captions"]}


@pytest.fixture(scope="module")
def project(case):
    """``rococo-eval run --model vse:PATH`` of each model: its embeddings file, score matrices and report."""
    runs = {}
    for spec in case["models"]:
        folder = case["root"] / "project" / spec["name"]
        status = main(["run", "--model", f"vse:{spec['checkpoint']}", "--benchmark", str(case["set"].benchmark),
                       "--attacks", f"{ATTACK},{IMAGE_ATTACK}", "--device", "cpu", "--workers", "0",
                       "--cache-dir", str(folder / "cache"), "--save-scores", str(folder / "scores"),
                       "--save-embeddings", str(folder / "embeddings.safetensors"), "--out", str(folder / "report"),
                       "--quiet"])
        assert status == 0
        from safetensors.numpy import load_file

        runs[spec["name"]] = {"vectors": load_file(str(folder / "embeddings.safetensors")),
                              "report": json.loads((folder / "report" / "report.json").read_text()),
                              "scores": {key: np.load(folder / "scores" / score_file_name(attack, direction))
                                         for key, attack, direction in (("i2t", ATTACK, "image_to_text"),
                                                                        ("t2i", IMAGE_ATTACK, "text_to_image"))}}
    return runs


def _official_matrices(case, name: str) -> dict:
    """The official embeddings' ``compute_sim`` of both attacked galleries, in the official order: float64, as
    ``encode_data`` keeps the embeddings."""
    arrays, source = case["arrays"], case["source"]
    images, ground_truth, adversarial = (arrays[f"{name}/{part}"] for part in ("images", "gt", "adv"))
    layout = source.gallery(ATTACK, "image_to_text", "official")
    pool = np.concatenate([ground_truth, adversarial])
    i2t = images[:source.num_images] @ pool[np.asarray(layout.gallery_rows)].T
    t2i = ground_truth @ images.T  # its gallery: the originals, then their altered copies
    assert i2t.dtype == t2i.dtype == np.float64
    return {"i2t": i2t, "t2i": t2i}


@pytest.mark.parametrize("name", [spec["name"] for spec in MODELS])
def test_embeddings_equal_the_official_forward_emb(case, project, name):
    arrays, vectors, count = case["arrays"], project[name]["vectors"], case["source"].num_images
    expected = {"images/original": arrays[f"{name}/images"][:count],
                f"images/{IMAGE_ATTACK}": arrays[f"{name}/images"][count:],
                "captions/ground_truth": arrays[f"{name}/gt"], f"captions/{ATTACK}": arrays[f"{name}/adv"]}
    assert sorted(vectors) == sorted(expected)
    for key, official in expected.items():
        assert np.abs(official).max() > 0.05  # not degenerate
        np.testing.assert_allclose(vectors[key], official, rtol=0, atol=EMBEDDING_TOLERANCE, err_msg=f"{name} {key}")


@pytest.mark.parametrize("name", [spec["name"] for spec in MODELS])
def test_official_i2t_and_t2i_of_the_clean_gallery_are_the_project_metric(case, project, name):
    """The official ``i2t``/``t2i`` (five captions per image, caption 5i + j of image i) of the official embeddings,
    against the project's metric of the project's embeddings on that gallery."""
    official = case["summary"]["models"][name]
    vectors, count = project[name]["vectors"], case["source"].num_images
    images, captions = vectors["images/original"], vectors["captions/ground_truth"][case["five"]]
    i2t = rococo_recall(query_embeddings=images, gallery_embeddings=captions,
                        references=[list(range(5 * i, 5 * i + 5)) for i in range(count)], k=[1, 5, 10])
    t2i = rococo_recall(query_embeddings=captions, gallery_embeddings=images,
                        references=[i // 5 for i in range(5 * count)], k=[1, 5, 10])
    assert [i2t[f"recall@{k}"] for k in (1, 5, 10)] == pytest.approx(official["i2t"][:3], abs=1e-9)
    assert [t2i[f"recall@{k}"] for k in (1, 5, 10)] == pytest.approx(official["t2i"][:3], abs=1e-9)
    assert 0 < official["i2t"][0] < 100 or 0 < official["t2i"][0] < 100  # the ranks are not all trivially alike


@pytest.fixture(scope="module")
def itm_eval(case, project):
    """The official RoCOCO ``itm_eval`` of the official embeddings' matrices and of the project's saved ones."""
    matrices = {}
    for spec in case["models"]:
        name = spec["name"]
        for key, matrix in _official_matrices(case, name).items():
            matrices[f"{key}@official@{name}"] = matrix
            matrices[f"{key}@project@{name}"] = project[name]["scores"][key]
    return official_itm_eval(case["set"], matrices, case["root"] / "itm-eval")


@pytest.mark.parametrize("name", [spec["name"] for spec in MODELS])
def test_attacked_galleries_give_the_official_itm_eval_numbers(case, project, itm_eval, name):
    """R@1, R@5, R@10 and the false rate of both attacked galleries: the project's report equals the official
    ``itm_eval`` of the official embeddings' matrices, and so does that ``itm_eval`` of the project's own matrices."""
    results = project[name]["report"]["results"]
    for key, gallery in (("i2t", f"{ATTACK}/image_to_text"), ("t2i", f"{IMAGE_ATTACK}/text_to_image")):
        official = itm_eval[f"{key}@official@{name}"]
        assert itm_eval[f"{key}@project@{name}"] == official
        prefix = "txt" if key == "i2t" else "img"
        for k in (1, 5, 10):
            assert results[gallery][f"recall@{k}"] == pytest.approx(official[f"{prefix}_r{k}"], abs=1e-9), (name, key)
        assert results[gallery]["false_rate"] == pytest.approx(official["false_rate"], abs=1e-9), (name, key)


@pytest.mark.parametrize("name", [spec["name"] for spec in MODELS])
def test_score_matrices_are_the_official_compute_sim(case, project, name):
    """The saved matrices (official order) equal ``compute_sim`` of the official embeddings, and rank every row's
    items in the official order: identical itm_eval numbers follow from the scores, not from how ties fall."""
    for key, official in _official_matrices(case, name).items():
        mine = project[name]["scores"][key]
        assert mine.shape == official.shape and mine.dtype == np.float64
        np.testing.assert_allclose(mine, official, rtol=0, atol=2 * EMBEDDING_TOLERANCE, err_msg=f"{name} {key}")
        np.testing.assert_array_equal(np.argsort(-mine, axis=1, kind="stable"),
                                      np.argsort(-official, axis=1, kind="stable"), err_msg=f"{name} {key}")


def test_image_inputs_are_the_official_loaders_bit_for_bit(case):
    """Every file the official ``RawImageDataset`` read (``imageio.imread``, ``_process_image``, ``permute``), under
    the WSL and detector backbones and every input size, against the project's preprocessing of the same bytes."""
    images_dir = case["set"].images_dir
    decoded = [read_image_file(images_dir / file)[1] for file in case["files"]]
    assert {image.mode for image in decoded} >= {"RGB", "L", "CMYK", "1", "P"} and "MPO" in {image.format for image in
                                                                                   decoded}
    for source_name in ("wsl", "detector"):
        for factor in SCALE_FACTORS:
            official = case["arrays"][f"pixels/{source_name}/{factor}"]
            opt = {"precomp_enc_type": "backbone", "backbone_source": source_name, "img_dim": 2048, "embed_size": 8}
            if factor is not None:
                opt["input_scale_factor"] = factor
            options = read_options(argparse.Namespace(**opt), "test")
            mine = np.stack([process_image(imageio_pixels(image), options) for image in decoded])
            assert mine.dtype == official.dtype == np.float32 and mine.shape == official.shape
            for file, ours, theirs in zip(case["files"], mine, official):
                np.testing.assert_array_equal(ours, theirs, err_msg=f"{file} {source_name} {factor}")


def test_token_ids_are_the_official_ones_on_every_real_caption(case):
    """``process_caption(tokenizer, tokenizer.basic_tokenizer.tokenize(caption), train=False)`` of every caption of
    the five annotation files, with BERT-base-uncased's vocabulary."""
    official = case["summary"]["token_ids"]
    assert len(official) > 120_000
    model = load_model(f"vse:{case['models'][0]['checkpoint']}", device="cpu")
    assert [caption for caption, ids in official.items() if model.token_ids(caption) != ids] == []
    pieces = {number for number, token in enumerate(bert_vocabulary().read_text().splitlines()) if token.startswith("##")}
    assert sum(bool(pieces.intersection(ids)) for ids in official.values()) > 1000  # word pieces are exercised


def test_the_checkpoints_were_written_the_official_way(case):
    """Each checkpoint holds what the official training saves: DataParallel's ``module.`` keys and an
    ``argparse.Namespace`` of options (which only the allowlist lets through)."""
    import torch

    with torch.serialization.safe_globals([argparse.Namespace]):
        checkpoint = torch.load(case["models"][0]["checkpoint"], weights_only=True)
    assert sorted(checkpoint) == ["Eiters", "best_rsum", "epoch", "model", "opt"]
    assert isinstance(checkpoint["opt"], argparse.Namespace)
    assert all(key.startswith("module.") for part in checkpoint["model"] for key in part)
