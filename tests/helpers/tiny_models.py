"""Tiny real model architectures with random weights, for tests (no weights can be downloaded here): open_clip,
CLIP and BLIP / BLIP-2 (``transformers``), each saved or registered under a name ``load_model`` reads.

open_clip imports torchvision at module level (for transforms the adapters never call). PyPI's torchvision
cannot load beside the CPU build of torch these tests run on, so where ``import torchvision`` fails,
:func:`torchvision_stand_in` puts a stand-in in ``sys.modules`` for the duration of a test module: it has
the names open_clip imports, and each of them raises if it is ever used.
"""

import contextlib
import enum
import importlib
import json
import string
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


# the vocabulary of the tiny BLIP tokenizer, and the words of helpers.tiny_coco's captions
WORDS = ["a", "an", "the", "man", "woman", "dog", "cat", "on", "in", "of", "with", "riding", "sitting", "table",
         "street", "red", "blue", "two", "is", "and", "bus", "kite", "pizza", "horse", "beach"]


def _blip_tokenizer(folder):
    """A BERT word-piece tokenizer with BLIP's extra token: ``[DEC]`` added as bos (``[ENC]`` follows it)."""
    import transformers

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + list(string.ascii_lowercase)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
    tokenizer = transformers.BertTokenizer(str(folder / "vocab.txt"))
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    return tokenizer


def _spread(model):
    """Random weights large enough that images and captions differ (the default init makes them nearly equal)."""
    import torch

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim >= 2 or name == "query_tokens":
                parameter.normal_(0, 0.3)


def make_tiny_blip(folder, blip2=False, text_layers=1, cross_attention_frequency=1) -> str:
    """Save a tiny random BLIP (or BLIP-2) retrieval model with its tokenizer and processor; return its name.

    ``text_layers`` is the layers of BLIP's text encoder (BLIP-2's Q-Former), ``cross_attention_frequency`` how often
    BLIP-2's Q-Former layers cross-attend (1: every layer, 2: layers 0, 2, ...)."""
    import torch
    import transformers

    tokenizer = _blip_tokenizer(folder)
    layers = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2)
    vision = dict(layers, num_hidden_layers=1, image_size=32, patch_size=8)
    text = dict(layers, num_hidden_layers=text_layers, max_position_embeddings=40, pad_token_id=0,
                encoder_hidden_size=32)
    if blip2:
        config = transformers.Blip2Config(
            vision_config=vision, num_query_tokens=4, image_text_hidden_size=16,
            qformer_config=dict(text, vocab_size=len(tokenizer), cross_attention_frequency=cross_attention_frequency,
                                use_qformer_text_input=True))
        architecture = transformers.Blip2ForImageTextRetrieval
    else:
        config = transformers.BlipConfig(
            vision_config=vision, image_text_hidden_size=16,
            text_config=dict(text, vocab_size=len(tokenizer) + 1, bos_token_id=tokenizer.bos_token_id, sep_token_id=3))
        architecture = transformers.BlipForImageTextRetrieval
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = architecture(config)
        _spread(model)
    model_dir = folder / ("tiny-blip2" if blip2 else "tiny-blip")
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    transformers.BlipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(model_dir)
    return f"hf:{model_dir}"
