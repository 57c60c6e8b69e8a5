"""Parity with the official PCME++ code (issue 28): a checkpoint saved the official way scores, through ``--model
pcmepp:FOLDER``, exactly as the official ``compute_csd_sims`` ranks the official model's outputs.

The official code (``../shared/reference/pcmepp-official``) runs in the reference environment ``.venv-reference``
through ``tests/helpers/pcmepp_official_run.py``: the inputs of ``hf_example.py`` (``CLIPProcessor`` of
``openai/clip-vit-base-patch16`` on each image file, the official ``tokenize``), then a small ``HfPCMEPPModel`` with
seeded random weights (two of them: the released layout, and one with the options the official forward also builds:
average pooling, QuickGELU, layer scales), saved with ``save_pretrained`` and read back with ``from_pretrained``,
its ``forward`` and ``compute_csd_sims``, on the set of :func:`helpers.official_set.make_official_set`. The project
must give:

- the processor's pixels bit for bit (originals, altered copies, CMYK, grayscale and RGBA files) and the official
  token ids of every caption of the five annotation files;
- the official means and log sigmas within :data:`OUTPUT_TOLERANCE`;
- score matrices that equal ``compute_csd_sims`` within :data:`SCORE_RTOL` and rank every row in its order;
- the official RoCOCO ``itm_eval`` numbers of both attacked galleries, and the clean gallery's numbers.
"""

import json

import numpy as np
import torch
import pytest
from PIL import Image

from rococo_recall import rococo_recall
from rococo_eval.catalog import TEXT_ATTACKS
from rococo_eval.cli import main
from rococo_eval.io.download import read_image_file
from rococo_eval.io.savedscores import score_file_name
from rococo_eval.models.adapters import load_model
from helpers.official_set import (
    ATTACK,
    IMAGE_ATTACK,
    OLD_HUB,
    SHARED_REFERENCE,
    make_official_set,
    official_itm_eval,
    require_reference_env,
    run_reference,
)

pytestmark = pytest.mark.slow

OUTPUT_TOLERANCE = 1e-5  # means of unit length, log sigmas of order one: the same torch on both sides
SCORE_RTOL = 1e-6  # float32, as compute_csd_sims; the means' products may differ in their last bits (BLAS blocks)
SCORE_ATOL = 1e-5
# openai/clip-vit-base-patch16's preprocessor_config.json, as published (hf_example.py's CLIPProcessor reads it)
CLIP_PREPROCESSOR_CONFIG = {"crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
                            "feature_extractor_type": "CLIPFeatureExtractor",
                            "image_mean": [0.48145466, 0.4578275, 0.40821073],
                            "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 224}
MODELS = [  # the released ones' layout (class token, GELU), and the options the official forward also builds
    {"name": "class_token", "seed": 4, "embed_dim": 32, "uncertainty_scale": 0.15,
     "vision_cfg": {"layers": 2, "unc_layers": 1, "width": 64, "head_width": 32, "patch_size": 16, "image_size": 224,
                    "ls_init_value": 0.5},
     "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 48, "heads": 4, "layers": 3, "unc_layers": 1}},
    {"name": "average_pool", "seed": 5, "embed_dim": 24, "uncertainty_scale": 0.15, "quick_gelu": True,
     "vision_cfg": {"layers": 3, "unc_layers": 2, "width": 48, "head_width": 16, "patch_size": 32, "image_size": 224,
                    "global_average_pool": True, "mlp_ratio": 2.0},
     "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2, "unc_layers": 2,
                  "ls_init_value": 0.3}},
]
NAMES = [spec["name"] for spec in MODELS]


def _special_images(folder) -> list:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(9)
    base = Image.fromarray(rng.integers(0, 256, (180, 260, 3), dtype=np.uint8))
    base.convert("CMYK").save(folder / "cmyk.jpg")
    base.convert("L").save(folder / "gray.jpg")
    rgba = base.convert("RGBA")
    rgba.putalpha(Image.fromarray(rng.integers(0, 256, (180, 260), dtype=np.uint8)))
    rgba.save(folder / "rgba.png")
    return [folder / "cmyk.jpg", folder / "gray.jpg", folder / "rgba.png"]


@pytest.fixture(scope="module")
def case(tmp_path_factory, annotations_dir):
    require_reference_env("pcmepp-official")
    root = tmp_path_factory.mktemp("pcmepp-official")
    official_set = make_official_set(root, annotations_dir)
    source = official_set.source
    images = [official_set.images_dir / file for file in source.image_files]
    images += [official_set.images_dir / IMAGE_ATTACK / source.file_name(i) for i in range(source.num_images)]
    specials = _special_images(root / "special")
    processor = root / "clip-vit-base-patch16"
    processor.mkdir()
    (processor / "preprocessor_config.json").write_text(json.dumps(CLIP_PREPROCESSOR_CONFIG))
    ground_truth = source.ground_truth_captions()
    layout = source.gallery(ATTACK, "image_to_text", "official")
    work = root / "reference"
    models = [{**spec, "checkpoint": str(root / "checkpoints" / spec["name"])} for spec in MODELS]
    task = {"reference": str(SHARED_REFERENCE / "pcmepp-official"), "out": str(work / "out"),
            "processor": str(processor), "images": [str(path) for path in images + specials],
            "captions": ground_truth + source.adversarial_captions(ATTACK),
            "caption_files": [str(annotations_dir / f"{name}.json") for name in ("coco_karpathy_test",) + TEXT_ATTACKS],
            "models": models, "num_images": source.num_images,
            "num_ground_truth": len(ground_truth), "i2t_columns": [int(row) for row in layout.gallery_rows]}
    run_reference("pcmepp_official_run.py", "preprocess", task, work)
    run_reference("pcmepp_official_run.py", "evaluate", task, work, path=[OLD_HUB])
    arrays = {}
    for name in ("inputs.npz", "reference.npz"):
        with np.load(work / "out" / name) as npz:
            arrays.update({key: npz[key] for key in npz.files})
    tokens = json.loads((work / "out" / "tokens.json").read_text())
    return {"root": root, "set": official_set, "source": source, "arrays": arrays, "files": images + specials,
            "token_ids": tokens["token_ids"], "task": task,
            "checkpoints": {spec["name"]: spec["checkpoint"] for spec in models}}


@pytest.fixture(scope="module")
def loaded(case):
    return {name: load_model(f"pcmepp:{checkpoint}", device="cpu") for name, checkpoint in case["checkpoints"].items()}


@pytest.fixture(scope="module")
def model(loaded):
    return loaded[NAMES[0]]


@pytest.fixture(scope="module")
def project(case):
    runs = {}
    for name, checkpoint in case["checkpoints"].items():
        folder = case["root"] / "project" / name
        status = main(["run", "--model", f"pcmepp:{checkpoint}", "--benchmark", str(case["set"].benchmark),
                       "--attacks", f"{ATTACK},{IMAGE_ATTACK}", "--device", "cpu", "--workers", "0", "--cache-dir",
                       str(folder / "cache"), "--save-scores", str(folder / "scores"), "--out",
                       str(folder / "report"), "--quiet"])
        assert status == 0
        scores = {key: np.load(folder / "scores" / score_file_name(attack, direction)) for key, attack, direction in
                  (("clean_i2t", "clean", "image_to_text"), ("i2t", ATTACK, "image_to_text"),
                   ("t2i", IMAGE_ATTACK, "text_to_image"))}
        runs[name] = {"scores": scores, "report": json.loads((folder / "report" / "report.json").read_text())}
    return runs


def test_pixels_are_the_official_processors_bit_for_bit(case, model):
    decoded = [read_image_file(path)[1] for path in case["files"]]
    assert {image.mode for image in decoded} >= {"RGB", "L", "CMYK", "RGBA"}
    mine = np.stack([model.preprocess_image(image) for image in decoded])
    assert mine.dtype == np.float32
    np.testing.assert_array_equal(mine, case["arrays"]["pixels"])


def test_token_ids_are_the_official_tokenize_on_every_real_caption(case, model):
    official = case["token_ids"]
    assert len(official) > 120_000
    rows = model.tokenize_texts(list(official)).numpy()
    mine = {caption: row[:int(np.count_nonzero(row))].tolist() for caption, row in zip(official, rows)}
    assert [caption for caption, ids in official.items() if mine[caption] != ids] == []
    np.testing.assert_array_equal(model.tokenize_texts(case["task"]["captions"]).numpy(), case["arrays"]["tokens"])


@pytest.mark.parametrize("name", NAMES)
def test_means_and_log_sigmas_are_the_official_forward(case, loaded, name):
    arrays, model = case["arrays"], loaded[name]
    image_means, image_stds = model.encode_pixels(arrays["pixels"][:2 * case["source"].num_images])
    text_means, text_stds = model.encode_tokens(torch.from_numpy(arrays["tokens"]))
    count = 2 * case["source"].num_images
    for mine, key in ((image_means, "image_means"), (image_stds, "image_stds"), (text_means, "text_means"),
                      (text_stds, "text_stds")):
        official = arrays[f"{name}/{key}"][:count] if key.startswith("image") else arrays[f"{name}/{key}"]
        np.testing.assert_allclose(mine, official, rtol=0, atol=OUTPUT_TOLERANCE, err_msg=f"{name} {key}")
    for key in ("image_stds", "text_stds"):  # uncertainties that vary, of a trained model's size
        sums = np.exp(arrays[f"{name}/{key}"].astype(np.float64)).sum(axis=1)
        assert 1 < sums.min() and sums.max() < 300 and sums.max() - sums.min() > 0.5, (key, sums.min(), sums.max())


@pytest.mark.parametrize("name", NAMES)
def test_scores_rank_exactly_as_compute_csd_sims(case, project, name):
    """Each saved matrix (official order) equals the official CSD similarities and ranks every row's items in their
    order."""
    for key in ("clean_i2t", "i2t", "t2i"):
        official, mine = case["arrays"][f"{name}/sims/{key}"], project[name]["scores"][key]
        assert mine.shape == official.shape
        np.testing.assert_allclose(mine, official, rtol=SCORE_RTOL, atol=SCORE_ATOL, err_msg=key)
        np.testing.assert_array_equal(np.argsort(-mine, axis=1, kind="stable"),
                                      np.argsort(-official, axis=1, kind="stable"), err_msg=key)


@pytest.fixture(scope="module")
def itm_eval(case, project):
    matrices = {f"{key}@{side}@{name}": case["arrays"][f"{name}/sims/{key}"] if side == "official"
                else project[name]["scores"][key] for name in NAMES for key in ("i2t", "t2i")
                for side in ("official", "project")}
    return official_itm_eval(case["set"], matrices, case["root"] / "itm-eval")


@pytest.mark.parametrize("name", NAMES)
def test_recall_and_false_rate_are_the_official_itm_eval_of_the_csd_sims(case, project, itm_eval, name):
    results = project[name]["report"]["results"]
    for key, gallery, prefix in (("i2t", f"{ATTACK}/image_to_text", "txt"),
                                 ("t2i", f"{IMAGE_ATTACK}/text_to_image", "img")):
        official = itm_eval[f"{key}@official@{name}"]
        assert itm_eval[f"{key}@project@{name}"] == official
        for k in (1, 5, 10):
            assert results[gallery][f"recall@{k}"] == pytest.approx(official[f"{prefix}_r{k}"], abs=1e-9)
        assert results[gallery]["false_rate"] == pytest.approx(official["false_rate"], abs=1e-9)
    layout = case["source"].gallery("clean", "image_to_text")
    clean = rococo_recall(case["arrays"][f"{name}/sims/clean_i2t"], **layout.metric_inputs(), k=[1, 5, 10])
    for k in (1, 5, 10):
        assert results["clean/image_to_text"][f"recall@{k}"] == clean[f"recall@{k}"]
    assert project[name]["report"]["meta"]["similarity"] == "csd"
