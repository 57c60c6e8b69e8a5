"""PCME++ (Chun, "Improved Probabilistic Image-Text Representations", ICLR 2024): probabilistic embeddings scored by
the closed-form sampled distance, as the official code scores them.

``--model pcmepp:REPO_OR_FOLDER`` loads a checkpoint of the official ``HfPCMEPPModel`` (``hf_models/hf_clip.py`` of
naver-ai/pcmepp), saved with its ``PyTorchModelHubMixin``: a folder (or a Hub repository, such as
``SanghyukChun/PCMEPP-ViT-B-16-CC3M-12M-RedCaps-256M``) holding ``config.json`` (the ``__init__`` arguments:
``embed_dim``, ``vision_cfg``, ``text_cfg``, ``quick_gelu``, ``cast_dtype``, ``output_dict``) and the weights
(``model.safetensors``, or ``pytorch_model.bin`` read with ``torch.load(weights_only=True)``), loaded strictly.

The model is built here from the config, module for module as the official class builds it (a CLIP ViT and text
transformer whose last ``unc_layers`` blocks have an uncertainty branch of their own), so that its state-dict keys are
the official ones. The official forward returns L2-normalised means and the log sigmas (``std``):

- **images** are preprocessed as the official example does, by ``CLIPProcessor`` of ``openai/clip-vit-base-patch16``
  (:data:`CLIP_PROCESSOR_CONFIG`, that repository's ``preprocessor_config.json``): shortest side to 224 (bicubic),
  centre crop, /255, CLIP's mean and std; reproduced without the Hub by
  :class:`~rococo_eval.models.adapters.ProcessorReplica` over ``transformers``' own processor built from that
  config, bit for bit;
- **captions** go through the official ``tokenize``, which is open_clip's (the same BPE vocabulary,
  ``bpe_simple_vocab_16e6.txt.gz``, sha256 :data:`BPE_SHA256`, cleaning and truncation): its module is read from
  the installed ``open_clip_torch`` without importing the rest of open_clip (which needs torchvision);
- **scores** are CSD, computed as ``pcmepp/evaluation.py::compute_csd_sims`` computes them
  (:mod:`rococo_eval.models.similarity`, ``csd``: each item's row is its mean and its ``sum(exp(std))``, the
  exponential torch's, as there): everything ``run`` gives a dual encoder (cache, embeddings file, report,
  processes) works on them.

Config fields that change the official forward but are not built here (``input_patchnorm``, ``attentional_pool``,
``output_tokens``, ``embed_cls``, a ``cast_dtype``) are refused by name; so are fields the official dataclasses do
not have. Fields the official class reads but never uses (``timm_*``, ``hf_*``, ``patch_dropout``, ...) are ignored, as
there.

Example:
    >>> read_config({"embed_dim": 32, "vision_cfg": {"layers": 2, "width": 64, "input_patchnorm": True},
    ...              "text_cfg": {"layers": 2, "unc_layers": 1}}, "`model` 'pcmepp:m'")
    Traceback (most recent call last):
    ...
    rococo_eval.models.pcmepp.PcmeppError: `model` 'pcmepp:m': vision_cfg.input_patchnorm = True is not supported (...
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from rococo_eval.models.checkpoints import (
    MAX_CONFIG_DEPTH,
    MAX_DIMENSION,
    MAX_IMAGE_SIZE,
    MAX_LAYERS,
    MAX_MLP_RATIO,
    MAX_POSITIONS,
    MAX_SETTINGS_BYTES,
    MAX_WIDTH,
    CheckpointError,
    bounded_int,
    bounded_number,
    build_strictly,
    local_folder,
    read_json_file,
)
from rococo_eval.models.similarity import CSD

logger = logging.getLogger(__name__)

# openai/clip-vit-base-patch16's preprocessor_config.json, which hf_example.py's CLIPProcessor reads
CLIP_PROCESSOR_CONFIG = {"crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
                         "image_mean": [0.48145466, 0.4578275, 0.40821073],
                         "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 224}
BPE_SHA256 = "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a"  # pcmepp/modules/clip/, open_clip/
CONFIG_FILE, SAFETENSORS_FILE, PICKLE_FILE = "config.json", "model.safetensors", "pytorch_model.bin"
# The official dataclasses' fields (hf_clip.py CLIPVisionCfg, CLIPTextCfg): default, and whether it is built here.
_VISION_FIELDS = {"layers": 12, "unc_layers": 2, "width": 768, "head_width": 64, "mlp_ratio": 4.0, "patch_size": 16,
                  "image_size": 224, "ls_init_value": None, "patch_dropout": 0.0, "input_patchnorm": False,
                  "global_average_pool": False, "attentional_pool": False, "n_queries": 256, "attn_pooler_heads": 8,
                  "output_tokens": False, "timm_model_name": None, "timm_model_pretrained": False, "timm_pool": "avg",
                  "timm_proj": "linear", "timm_proj_bias": False, "timm_drop": 0.0, "timm_drop_path": None}
_TEXT_FIELDS = {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8, "layers": 12, "unc_layers": 2,
                "ls_init_value": None, "hf_model_name": None, "hf_tokenizer_name": None, "hf_model_pretrained": True,
                "proj": "mlp", "pooler_type": "mean_pooler", "embed_cls": False, "pad_id": 0, "output_tokens": False}
_UNSUPPORTED = {"vision_cfg": ("input_patchnorm", "attentional_pool", "output_tokens"),
                "text_cfg": ("embed_cls", "output_tokens")}
_TOP_LEVEL = ("embed_dim", "vision_cfg", "text_cfg", "quick_gelu", "cast_dtype", "output_dict")


class PcmeppError(CheckpointError):
    """A folder that is not a PCME++ checkpoint, or one with a configuration this package does not build."""


@dataclass(frozen=True)
class PcmeppConfig:
    """The architecture of an ``HfPCMEPPModel``, read from its ``config.json`` (module docstring)."""

    embed_dim: int
    vision: dict = field(default_factory=dict)
    text: dict = field(default_factory=dict)
    quick_gelu: bool = False


def read_config(config: dict, what: str) -> PcmeppConfig:
    """The :class:`PcmeppConfig` of a ``config.json``'s content; ``what`` names it in errors.

    Raises:
        PcmeppError: a missing ``embed_dim``, an unknown field, or one this package does not build.

    Example:
        >>> config = read_config({"embed_dim": 32, "vision_cfg": {"layers": 2}, "text_cfg": {"unc_layers": 1}}, "m")
        >>> config.vision["unc_layers"], config.text["unc_layers"]  # the vision one by its dataclass's default
        (2, 1)
    """
    if not isinstance(config, dict) or "embed_dim" not in config:
        raise PcmeppError(f"{what}: its {CONFIG_FILE} is not an HfPCMEPPModel config (no embed_dim)")
    unknown = sorted(set(config) - set(_TOP_LEVEL))
    if unknown:
        raise PcmeppError(f"{what}: its {CONFIG_FILE} has fields HfPCMEPPModel does not take: {', '.join(unknown)}")
    if config.get("cast_dtype") is not None:
        raise PcmeppError(f"{what}: cast_dtype = {config['cast_dtype']!r} is not supported (choose the precision with "
                          "--precision instead)")
    parts = {}
    for key, defaults in (("vision_cfg", _VISION_FIELDS), ("text_cfg", _TEXT_FIELDS)):
        given = config.get(key) or {}
        if not isinstance(given, dict):
            raise PcmeppError(f"{what}: {key} must be an object, got {type(given).__name__}")
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise PcmeppError(f"{what}: {key} has fields the official dataclass does not have: {', '.join(unknown)}")
        if key == "text_cfg" and "unc_layers" not in given:  # HfPCMEPPModel reads text_cfg["unc_layers"] itself
            raise PcmeppError(f"{what}: text_cfg has no unc_layers, which HfPCMEPPModel.__init__ reads (text_cfg["
                              "\"unc_layers\"] raises KeyError in the official code)")
        merged = {**defaults, **given}
        for name in _UNSUPPORTED[key]:
            if merged[name]:
                raise PcmeppError(f"{what}: {key}.{name} = {merged[name]!r} is not supported (this package builds the "
                                  f"official forward without it; it cannot be checked against the official code)")
        parts[key] = merged
    _check_bounds(parts["vision_cfg"], parts["text_cfg"], what)
    return PcmeppConfig(bounded_int(config["embed_dim"], "embed_dim", 1, MAX_WIDTH, what), parts["vision_cfg"],
                        parts["text_cfg"], bool(config.get("quick_gelu")))


def _check_bounds(vision: dict, text: dict, what: str) -> None:
    """The sizes of the vision and text towers, each an int (a number for ``mlp_ratio`` and ``ls_init_value``) within
    its bound, checked against each other: heads split the width, patches fit the image, ``unc_layers`` are among
    the ``layers``."""
    for key, tower in (("vision_cfg", vision), ("text_cfg", text)):
        width = bounded_int(tower["width"], f"{key}.width", 1, MAX_WIDTH, what)
        layers = bounded_int(tower["layers"], f"{key}.layers", 1, MAX_LAYERS, what)
        bounded_int(tower["unc_layers"], f"{key}.unc_layers", 0, layers, what)
        if tower["ls_init_value"] is not None:
            bounded_number(tower["ls_init_value"], f"{key}.ls_init_value", 0, 1, what)
        field = "head_width" if key == "vision_cfg" else "heads"
        given = bounded_int(tower[field], f"{key}.{field}", 1, width, what)
        heads = width // given if key == "vision_cfg" else given  # VisionTransformer: width // head_width heads
        if width % heads:
            raise PcmeppError(f"{what}: {key}.{field} = {given} gives {heads} attention heads, which do not split "
                              f"{key}.width = {width}")
    bounded_number(vision["mlp_ratio"], "vision_cfg.mlp_ratio", 0, MAX_MLP_RATIO, what)
    size = vision["image_size"]
    sides = size if isinstance(size, list) and len(size) == 2 else [size]
    smallest = min(bounded_int(side, "vision_cfg.image_size", 1, MAX_IMAGE_SIZE, what) for side in sides)
    bounded_int(vision["patch_size"], "vision_cfg.patch_size", 1, smallest, what)
    bounded_int(text["context_length"], "text_cfg.context_length", 1, MAX_POSITIONS, what)
    bounded_int(text["vocab_size"], "text_cfg.vocab_size", 1, MAX_DIMENSION, what)


def checkpoint_files(name_or_path: str, what: str) -> tuple[Path, Path]:
    """The ``config.json`` and the weights of a PCME++ checkpoint: a local folder, else a Hub repository (downloaded
    into the Hugging Face cache by ``huggingface_hub``, or read from it offline).

    Raises:
        PcmeppError: neither a folder with the files nor a repository that has them.
    """
    expected = f"a folder saved by HfPCMEPPModel.save_pretrained ({CONFIG_FILE} and {SAFETENSORS_FILE})"
    folder = local_folder(name_or_path, what, expected) or _download(name_or_path, what)
    config = folder / CONFIG_FILE
    weights = next((folder / name for name in (SAFETENSORS_FILE, PICKLE_FILE) if (folder / name).is_file()), None)
    if not config.is_file() or weights is None:
        raise PcmeppError(f"{what}: {str(folder)!r} lacks {CONFIG_FILE if not config.is_file() else SAFETENSORS_FILE}: "
                          "expected a folder saved by HfPCMEPPModel.save_pretrained")
    return config, weights


def _download(repo_id: str, what: str) -> Path:
    import huggingface_hub

    try:
        return Path(huggingface_hub.snapshot_download(repo_id, allow_patterns=[CONFIG_FILE, SAFETENSORS_FILE,
                                                                                PICKLE_FILE]))
    except Exception as error:  # huggingface_hub raises many kinds (offline, not found, connection)
        raise PcmeppError(f"{what}: cannot get the Hub repository {repo_id!r} ({type(error).__name__}: {error})") \
            from error


def read_weights(path: Path, what: str) -> dict:
    """The state dict in ``path``: a ``.safetensors`` file, or a torch file read with ``weights_only=True``."""
    import torch

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # safetensors and torch raise many kinds for what they cannot read
        raise PcmeppError(f"{what}: cannot read the weights {str(path)!r} ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''})") from error
    if not isinstance(state, dict):
        raise PcmeppError(f"{what}: the weights {str(path)!r} hold a {type(state).__name__}, not a state dict")
    return state


def build_model(config: PcmeppConfig):
    """The ``HfPCMEPPModel`` architecture of ``config`` (random weights), module names as the official class's
    (:class:`rococo_eval.models.nets.pcmepp.HfPcmeppModules`)."""
    from rococo_eval.models.nets.pcmepp import HfPcmeppModules

    return HfPcmeppModules(config.vision, config.text, config.embed_dim, config.quick_gelu)


def clip_tokenizer_module():
    """open_clip's ``tokenizer`` module, read from the installed ``open_clip_torch`` without running open_clip's
    ``__init__`` (which imports torchvision); its BPE vocabulary is checked against :data:`BPE_SHA256`."""
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("open_clip_torch is not installed; PCME++ tokenises with its CLIP tokenizer: "
                          "pip install 'rococo-eval[models]'")
    folder = Path(list(spec.submodule_search_locations)[0])
    vocabulary = folder / "bpe_simple_vocab_16e6.txt.gz"
    if not vocabulary.is_file() or hashlib.sha256(vocabulary.read_bytes()).hexdigest() != BPE_SHA256:
        raise ImportError(f"{vocabulary} is not the CLIP BPE vocabulary PCME++ uses (sha256 {BPE_SHA256[:12]}...)")
    module_spec = importlib.util.spec_from_file_location("rococo_eval.models._clip_tokenizer", folder / "tokenizer.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def clip_image_processor():
    """``transformers``' CLIP image processor (its PIL backend where it has one) built from
    :data:`CLIP_PROCESSOR_CONFIG`: what ``CLIPProcessor.from_pretrained("openai/clip-vit-base-patch16")`` holds."""
    import transformers

    settings = dict(CLIP_PROCESSOR_CONFIG)
    size, crop = settings.pop("size"), settings.pop("crop_size")
    processor_class = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    return processor_class(size={"shortest_edge": size}, crop_size={"height": crop, "width": crop},
                           do_rescale=True, rescale_factor=1 / 255, do_convert_rgb=True, **settings)


class PcmeppModel:
    """``pcmepp:REPO_OR_FOLDER``: an official PCME++ checkpoint as a dual encoder scored by CSD.

    Args:
        name: the model name as given.
        path: the folder or Hub repository.
        base: the device, dtype and fingerprint helper (:class:`~rococo_eval.models.adapters.TorchModel`).
    """

    similarity = CSD

    def __init__(self, name: str, path: str, base):
        from rococo_eval.models.adapters import ProcessorReplica

        what = f"`model` {name!r}"
        config_path, weights_path = checkpoint_files(path, what)
        config = read_config(read_json_file(config_path, f"{what}: its config", MAX_SETTINGS_BYTES, MAX_CONFIG_DEPTH),
                             what)
        if config.vision["image_size"] != CLIP_PROCESSOR_CONFIG["crop_size"]:
            raise PcmeppError(f"{what}: vision_cfg.image_size = {config.vision['image_size']!r}; the official example "
                              f"preprocesses with openai/clip-vit-base-patch16's processor, "
                              f"{CLIP_PROCESSOR_CONFIG['crop_size']} x {CLIP_PROCESSOR_CONFIG['crop_size']}")
        model, = build_strictly(lambda: (build_model(config),), [read_weights(weights_path, what)],
                                [f"{what}: the weights do not fill an HfPCMEPPModel of its config"])
        self.name, self.base = name, base
        self.device, self.precision = base.device, base.precision
        self.context_length = config.text["context_length"]
        self.tokenizer = clip_tokenizer_module().SimpleTokenizer(context_length=self.context_length)
        self.processor = clip_image_processor()
        self.preprocessing = ProcessorReplica.of(self.processor)
        self.fingerprint = base.weights_fingerprint(model, family="pcmepp", processor=CLIP_PROCESSOR_CONFIG,
                                                    bpe=BPE_SHA256, context_length=self.context_length,
                                                    similarity=self.similarity.name)
        self.model = base.place(model)
        logger.info("loaded %s on %s (%s)", name, self.device, self.precision)

    def preprocess_image(self, image) -> np.ndarray:
        """The official example's ``pixel_values`` of one image (CLIPProcessor of openai/clip-vit-base-patch16)."""
        image = image if image.mode == "RGB" else image.convert("RGB")
        if self.preprocessing is not None:
            return self.preprocessing(image)
        return np.asarray(self.processor(images=[image], return_tensors="np")["pixel_values"][0])

    def encode_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        """CSD image rows (:meth:`~rococo_eval.models.similarity.Similarity.rows`) of a batch of pixels."""
        return self.similarity.rows("image", self._image_outputs(batch), self.name, "encode_preprocessed")

    def encode_pixels(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The official forward's ``(image_features, image_stds)`` of a batch of pixels, as float32 arrays."""
        return tuple(output.float().cpu().numpy() for output in self._image_outputs(batch))

    def tokenize_texts(self, texts: Sequence[str]):
        """The official ``tokenize`` of ``texts``: ``(texts, context_length)`` token ids."""
        return self.tokenizer(list(texts), context_length=self.context_length)

    def encode_tokenized(self, tokens) -> np.ndarray:
        """CSD text rows of one :meth:`tokenize_texts` output."""
        return self.similarity.rows("text", self._text_outputs(tokens), self.name, "encode_tokenized")

    def encode_tokens(self, tokens) -> tuple[np.ndarray, np.ndarray]:
        """The official forward's ``(text_features, text_stds)`` of token ids, as float32 arrays."""
        return tuple(output.float().cpu().numpy() for output in self._text_outputs(tokens))

    def _image_outputs(self, batch: np.ndarray):
        with self.base.torch.inference_mode():
            return self.model.encode_image(self.base.as_input(batch))

    def _text_outputs(self, tokens):
        with self.base.torch.inference_mode():
            return self.model.encode_text(tokens.to(self.device))

    def encode_images(self, images) -> np.ndarray:
        """CSD image rows of PIL images."""
        return self.encode_preprocessed(np.stack([self.preprocess_image(image) for image in images]))

    def encode_texts(self, texts) -> np.ndarray:
        """CSD text rows of captions."""
        return self.encode_tokenized(self.tokenize_texts(texts))


def load_pcmepp(name: str, path: str, base) -> PcmeppModel:
    """``--model pcmepp:REPO_OR_FOLDER`` (:class:`PcmeppModel`)."""
    return PcmeppModel(name, path, base)
