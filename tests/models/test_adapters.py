"""rococo_eval.models.adapters: the open_clip and hf adapters on real architectures with random weights (see
``helpers/tiny_models.py``), their preprocessing (and the replica of CLIP's processor), and the names they accept."""

import sys

import numpy as np
import pytest
from PIL import Image

from helpers.photos import photos
from rococo_eval.models import adapters as models
from rococo_eval.models.adapters import (MissingExtraError, ModelError, ProcessorReplica, clip_preprocess, load_model,
                                         parse_model_name)


def _images():
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in [(40, 30), (24, 64), (32, 32)]]


@pytest.mark.parametrize("kind", ["open_clip", "hf"])
def test_embeddings_are_normalised_and_batch_independent(kind, request):
    name = request.getfixturevalue(f"{kind}_name")
    model = load_model(name, device="cpu")
    texts = ["a man riding a wave", "two dogs on a couch", "a red bus"]
    for vectors in (model.encode_texts(texts), model.encode_images(_images())):
        assert vectors.dtype == np.float32 and vectors.shape == (3, 16)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(model.encode_texts(texts[1:2]), model.encode_texts(texts)[1:2], atol=1e-5)
    np.testing.assert_allclose(model.encode_images(_images()[2:]), model.encode_images(_images())[2:], atol=1e-5)
    assert model.name == name and len(model.fingerprint) == 64


@pytest.mark.parametrize("kind", ["open_clip", "hf"])
def test_fingerprint_is_stable_and_follows_precision(kind, request):
    name = request.getfixturevalue(f"{kind}_name")
    first, again, bf16 = (load_model(name, device="cpu", precision=p) for p in ("fp32", "fp32", "bf16"))
    assert first.fingerprint == again.fingerprint != bf16.fingerprint
    vectors = bf16.encode_texts(["a man riding a wave"])
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, first.encode_texts(["a man riding a wave"]), atol=0.05)


def test_open_clip_images_go_through_the_models_preprocessing(open_clip_name):
    import open_clip
    import torch

    model = load_model(open_clip_name, device="cpu")
    assert model.preprocess_cfg["size"] == (32, 32) and model.preprocess_cfg["mean"] == open_clip.OPENAI_DATASET_MEAN
    image = _images()[0]
    pixels = clip_preprocess(image, 32, open_clip.OPENAI_DATASET_MEAN, open_clip.OPENAI_DATASET_STD)
    with torch.inference_mode():
        direct = model.model.encode_image(torch.from_numpy(pixels[None]))
    direct = (direct / direct.norm(dim=-1, keepdim=True)).numpy()
    np.testing.assert_allclose(model.encode_images([image]), direct, atol=1e-6)


def test_clip_preprocess_matches_a_hand_computed_resize_and_crop():
    rng = np.random.default_rng(1)
    image = Image.fromarray(rng.integers(0, 256, (30, 45, 3), dtype=np.uint8))  # 45 wide, 30 high
    pixels = clip_preprocess(image, 20, mean=(0.0,) * 3, std=(1.0,) * 3)
    resized = image.resize((30, 20), Image.Resampling.BICUBIC)  # int(20 * 45 / 30) = 30
    expected = np.asarray(resized.crop((5, 0, 25, 20)), dtype=np.float32) / np.float32(255)
    np.testing.assert_array_equal(pixels, expected.transpose(2, 0, 1))
    squashed = clip_preprocess(image.convert("L"), (16, 16), (0.5,) * 3, (0.5,) * 3, "bilinear", "squash")
    assert squashed.shape == (3, 16, 16) and np.array_equal(squashed[0], squashed[2])


@pytest.mark.parametrize("size, mode, match", [
    ((16, 24), "shortest", "only square image sizes"),
    (16, "longest", "unsupported preprocessing"),
])
def test_clip_preprocess_refuses_what_it_does_not_implement(size, mode, match):
    with pytest.raises(ModelError, match=match):
        clip_preprocess(Image.new("RGB", (8, 8)), size, (0.5,) * 3, (0.5,) * 3, resize_mode=mode)


@pytest.mark.parametrize("name", ["clip", "open_clip:ViT-B-32", "open_clip:/openai", "hf:", "timm:vit", ""])
def test_unknown_model_names_list_the_accepted_forms(name):
    with pytest.raises(ModelError, match="accepted forms: open_clip:ARCH/PRETRAINED.*hf:REPO_OR_PATH"):
        parse_model_name(name)


def test_unknown_architecture_and_tag(open_clip_name):
    with pytest.raises(ModelError, match="unknown open_clip architecture 'ViT-Z-99'"):
        load_model("open_clip:ViT-Z-99/openai", device="cpu")
    with pytest.raises(ModelError, match="no pretrained tag 'nope' for ViT-B-32; known tags: openai"):
        load_model("open_clip:ViT-B-32/nope", device="cpu")


def test_hf_folder_that_is_not_a_model(tmp_path):
    import transformers  # noqa: F401
    with pytest.raises(ModelError, match="cannot load"):
        load_model(f"hf:{tmp_path}", device="cpu")


@pytest.mark.parametrize("name, module", [("open_clip:ViT-B-32/openai", "open_clip"), ("hf:some/model", "transformers"),
                                          ("hf:some/model", "torch")])
def test_missing_extra_names_the_install_command(name, module, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError, match=rf"{module} is not installed.*pip install 'rococo-eval\[models\]'"):
        load_model(name, device="cpu")


def test_open_clip_that_cannot_import_says_why(monkeypatch):
    import torch

    def import_module(name):
        if name == "torch":
            return torch
        raise RuntimeError("operator torchvision::nms does not exist")

    monkeypatch.setattr(models, "_import", import_module)
    with pytest.raises(MissingExtraError, match="torchvision::nms.*torchvision was not built for the installed torch"):
        models._import_open_clip()


def test_the_replica_gives_clips_224_pixel_processor_output_bit_for_bit():
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    processor = CLIPImageProcessorPil()  # OpenAI CLIP's: shortest edge 224, centre crop 224, bicubic
    replica = ProcessorReplica.of(processor)
    for image in photos():
        image = image.convert("RGB")
        expected = processor(images=[image], return_tensors="np")["pixel_values"][0]
        pixels = replica(image)
        assert pixels.shape == (3, 224, 224) and np.array_equal(pixels, expected)


def test_processors_the_replica_does_not_know_are_called_image_by_image(hf_name):
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    padded = CLIPImageProcessorPil(do_pad=True, pad_size={"height": 240, "width": 240})
    assert ProcessorReplica.of(padded) is None
    model = load_model(hf_name, device="cpu")
    replicated = [model.preprocess_image(image) for image in photos()]
    model.fast_preprocessing = None
    assert all(np.array_equal(model.preprocess_image(image), pixels) for image, pixels in zip(photos(), replicated))
