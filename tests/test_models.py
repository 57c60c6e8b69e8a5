"""Model adapters on real architectures with random weights (no weights can be downloaded here).

open_clip imports torchvision at module level (for transforms the adapters never call). PyPI's torchvision
cannot load beside the CPU build of torch these tests run on, so where ``import torchvision`` fails,
:func:`torchvision_stand_in` puts a stand-in in ``sys.modules`` for the duration of a test module: it has
the names open_clip imports, and each of them raises if it is ever used.
"""

import contextlib
import enum
import importlib
import json
import sys
import types

import numpy as np
import pytest
from PIL import Image

from rococo_eval import models
from rococo_eval.models import MissingExtraError, ModelError, clip_preprocess, load_model, parse_model_name

TINY_OPEN_CLIP = "rococo-tiny"
TINY_OPEN_CLIP_CONFIG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
_TORCHVISION_NAMES = ("Normalize", "Compose", "RandomResizedCrop", "ToTensor", "Resize", "CenterCrop",
                      "ColorJitter", "Grayscale")


@contextlib.contextmanager
def torchvision_stand_in():
    """Make ``import open_clip`` work where torchvision cannot load; undo it (and forget open_clip) after."""
    import torch  # noqa: F401
    try:
        import torchvision  # noqa: F401
    except Exception:
        pass
    else:
        yield
        return
    for name in ("datasets", "transformers"):  # they look for torchvision when imported: let them find none
        with contextlib.suppress(ImportError):
            importlib.import_module(name)

    with pytest.MonkeyPatch.context() as patch:
        for name, module in _stand_in_modules().items():
            patch.setitem(sys.modules, name, module)
        try:
            yield
        finally:
            for name in [name for name in sys.modules if name == "open_clip" or name.startswith("open_clip.")]:
                del sys.modules[name]


def _stand_in_modules() -> dict:
    def unavailable(name):
        def refuse(*args, **kwargs):
            raise RuntimeError(f"torchvision stand-in: {name} is not available in these tests")
        return type(name, (), {"__init__": refuse})

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"

    modules = {name: types.ModuleType(name) for name in ("torchvision", "torchvision.transforms",
                                                         "torchvision.transforms.functional", "torchvision.ops",
                                                         "torchvision.ops.misc")}
    for name in _TORCHVISION_NAMES:
        setattr(modules["torchvision.transforms"], name, unavailable(name))
    modules["torchvision.transforms"].InterpolationMode = InterpolationMode
    modules["torchvision.ops.misc"].FrozenBatchNorm2d = unavailable("FrozenBatchNorm2d")
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    return modules


def register_tiny_open_clip(folder) -> str:
    """Register a tiny open_clip architecture (width 32, one layer, 32 x 32 images); return its model name."""
    import open_clip

    (folder / f"{TINY_OPEN_CLIP}.json").write_text(json.dumps(TINY_OPEN_CLIP_CONFIG))
    open_clip.add_model_config(folder)
    return f"open_clip:{TINY_OPEN_CLIP}/none"


def make_tiny_hf_clip(folder) -> str:
    """Save a tiny random ``transformers`` CLIPModel with an offline-built tokenizer; return its model name."""
    import transformers
    letters = "abcdefghijklmnopqrstuvwxyz"
    tokens = ["<|startoftext|>", "<|endoftext|>"] + list(letters) + [c + "</w>" for c in letters]
    (folder / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(tokens)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    layers = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    config = transformers.CLIPConfig(
        text_config=dict(layers, vocab_size=len(tokens), max_position_embeddings=32, bos_token_id=0, eos_token_id=1,
                         pad_token_id=1),
        vision_config=dict(layers, image_size=32, patch_size=8), projection_dim=16)
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.CLIPModel(config)
    model_dir = folder / "tiny-clip"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    processor = transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor.save_pretrained(model_dir)
    return f"hf:{model_dir}"


@pytest.fixture(scope="module")
def open_clip_name(tmp_path_factory):
    with torchvision_stand_in():
        import open_clip  # noqa: F401  (installed by `make test`; a missing one must fail, not skip)
        yield register_tiny_open_clip(tmp_path_factory.mktemp("open_clip_configs"))


@pytest.fixture(scope="module")
def hf_name(tmp_path_factory):
    return make_tiny_hf_clip(tmp_path_factory.mktemp("hf"))


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
