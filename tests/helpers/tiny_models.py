"""Tiny real model architectures with random weights, for tests (no weights can be downloaded here).

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

import pytest

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
