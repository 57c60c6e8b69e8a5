"""Image-text models behind one small interface: L2-normalised image and caption embeddings.

Two families are supported, named the way the ``rococo-eval`` command takes them:

- ``open_clip:ARCH/PRETRAINED``: an open_clip architecture and pretrained tag (``ViT-B-32/openai``), or a
  checkpoint file after the slash; ``none`` builds the architecture with random weights.
  ``open_clip:hf-hub:ORG/REPO`` and ``open_clip:local-dir:PATH`` use open_clip's own schemas.
- ``hf:REPO_OR_PATH``: a ``transformers`` dual encoder (CLIP, SigLIP, ...) with ``get_image_features``
  and ``get_text_features``, its tokenizer and image processor, from the Hub or a local folder.

Both need the optional ``models`` extra (torch, open_clip_torch, transformers). Images are preprocessed
here with PIL and NumPy, exactly as open_clip's evaluation transform does for its ``shortest`` and
``squash`` resize modes, so open_clip's torchvision-based transforms are never called; ``hf:`` models use
their own image processor.

Every model has a ``fingerprint``: a digest of its weights, preprocessing, tokenizer and precision, which
names its cached embeddings (``rococo_eval.embeddings``).

Example:
    >>> parse_model_name("open_clip:ViT-B-32/openai")
    ModelName(library='open_clip', name='ViT-B-32', pretrained='openai')
    >>> parse_model_name("hf:openai/clip-vit-base-patch32")
    ModelName(library='hf', name='openai/clip-vit-base-patch32', pretrained=None)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

import numpy as np
from PIL import Image

logger = logging.getLogger(__name__)

MODEL_FORMS = (
    "open_clip:ARCH/PRETRAINED (e.g. open_clip:ViT-B-32/openai; PRETRAINED may be a checkpoint file, "
    "or 'none' for random weights)",
    "open_clip:hf-hub:ORG/REPO",
    "open_clip:local-dir:PATH",
    "hf:REPO_OR_PATH (a transformers dual encoder, e.g. hf:openai/clip-vit-base-patch32)",
)
PRECISIONS = ("fp32", "fp16", "bf16")
INSTALL_HINT = "pip install 'rococo-eval[models]'"
_RANDOM_WEIGHTS = ("none", "random")
_OPEN_CLIP_SCHEMAS = ("hf-hub:", "local-dir:")
_RESIZE_MODES = ("shortest", "squash")
_INTERPOLATIONS = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
_PAD_TO_FULL_LENGTH = ("siglip", "siglip2")


class ModelError(ValueError):
    """A model name that names no model, or a model that cannot be used as a dual encoder."""


class MissingExtraError(ImportError):
    """A model library of the optional ``models`` extra is not installed."""


class ImageTextModel(Protocol):
    """What the embedding loop needs of a model.

    Attributes:
        name: the model name as given (``"open_clip:ViT-B-32/openai"``).
        fingerprint: hex digest of everything that shapes the embeddings.
    """

    name: str
    fingerprint: str

    def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """Return float32 L2-normalised embeddings, one row per image."""

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Return float32 L2-normalised embeddings, one row per text."""


@dataclass(frozen=True)
class ModelName:
    """A parsed model name: ``library`` is ``"open_clip"`` or ``"hf"``; ``pretrained`` is None for none."""

    library: str
    name: str
    pretrained: Optional[str]


def parse_model_name(text: str) -> ModelName:
    """Split a ``--model`` value into library, model and pretrained weights.

    Raises:
        ModelError: if ``text`` has none of the accepted forms (the message lists them).

    Example:
        >>> parse_model_name("open_clip:ViT-B-32/none").pretrained is None
        True
        >>> parse_model_name("open_clip:hf-hub:timm/ViT-B-16-SigLIP").name
        'hf-hub:timm/ViT-B-16-SigLIP'
        >>> parse_model_name("clip-vit")
        Traceback (most recent call last):
        ...
        rococo_eval.models.ModelError: unknown model name 'clip-vit'; accepted forms: ...
    """
    library, sep, rest = str(text).partition(":")
    if sep and rest and library == "hf":
        return ModelName("hf", rest, None)
    if sep and rest and library == "open_clip":
        if rest.startswith(_OPEN_CLIP_SCHEMAS):
            return ModelName("open_clip", rest, None)
        arch, slash, pretrained = rest.partition("/")
        if arch and slash and pretrained:
            return ModelName("open_clip", arch, None if pretrained.lower() in _RANDOM_WEIGHTS else pretrained)
    raise ModelError(f"unknown model name {text!r}; accepted forms: " + "; ".join(MODEL_FORMS))


def load_model(name: str, device: Optional[str] = None, precision: str = "fp32") -> ImageTextModel:
    """Load a model by its ``--model`` name, on ``device`` (default: CUDA when present, else CPU).

    Args:
        name: see :data:`MODEL_FORMS`.
        device: a torch device string, or None for automatic.
        precision: ``"fp32"``, ``"fp16"`` or ``"bf16"``: the dtype of the weights and inputs; embeddings
            are returned in float32 either way.

    Raises:
        ModelError: for an unknown name, architecture or pretrained tag, or a model that is no dual encoder.
        MissingExtraError: when torch, open_clip or transformers is not installed.
    """
    parsed = parse_model_name(name)
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS}, got {precision!r}")
    if parsed.library == "open_clip":
        return OpenClipModel(name, parsed, device, precision)
    return HFModel(name, parsed, device, precision)


def clip_preprocess(image: Image.Image, size, mean, std, interpolation: str = "bicubic",
                    resize_mode: str = "shortest") -> np.ndarray:
    """Turn a PIL image into a normalised float32 ``(3, H, W)`` array as open_clip's evaluation transform does.

    ``shortest``: resize the shorter side to ``size`` (the longer one to ``int(size * long / short)``), then
    crop the centre; ``squash``: resize to ``size`` x ``size`` ignoring the aspect ratio. Then RGB, values
    in [0, 1], ``(x - mean) / std``, all in float32 like torchvision's ``ToTensor`` and ``Normalize``.

    Args:
        image: any PIL image.
        size: output side, an int or a square ``(h, w)``.
        mean, std: per-channel normalisation.
        interpolation: ``"bicubic"`` or ``"bilinear"``.
        resize_mode: ``"shortest"`` or ``"squash"``.

    Example:
        >>> pixels = clip_preprocess(Image.new("RGB", (64, 48), (255, 0, 0)), 32, mean=(0.5,) * 3, std=(0.5,) * 3)
        >>> pixels.shape, pixels.dtype, pixels[:, 0, 0].tolist()
        ((3, 32, 32), dtype('float32'), [1.0, -1.0, -1.0])
    """
    side = _square_size(size)
    if resize_mode not in _RESIZE_MODES or interpolation not in _INTERPOLATIONS:
        raise ModelError(f"unsupported preprocessing: resize_mode={resize_mode!r}, interpolation={interpolation!r}; "
                         f"supported: {_RESIZE_MODES} with {tuple(_INTERPOLATIONS)}")
    resample = _INTERPOLATIONS[interpolation]
    width, height = image.size
    if resize_mode == "squash":
        image = image.resize((side, side), resample)
    else:
        short, long = min(width, height), max(width, height)
        new_long = int(side * long / short)
        new_size = (side, new_long) if width <= height else (new_long, side)
        if new_size != (width, height):
            image = image.resize(new_size, resample)
        left = int(round((image.size[0] - side) / 2.0))
        top = int(round((image.size[1] - side) / 2.0))
        image = image.crop((left, top, left + side, top + side))
    pixels = np.asarray(image.convert("RGB"), dtype=np.float32) / np.float32(255)
    pixels = (pixels - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32)
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def resolve_device(device: Optional[str] = None) -> str:
    """Return ``device``, or ``"cuda"`` when torch sees a GPU and ``"cpu"`` otherwise.

    Example:
        >>> resolve_device("cpu")
        'cpu'
    """
    if device:
        return device
    torch = _import("torch")
    return "cuda" if torch.cuda.is_available() else "cpu"


class _TorchModel:
    """What both adapters share: the device, the dtype, and turning features into normalised float32."""

    def __init__(self, name: str, device: Optional[str], precision: str):
        self.torch = _import("torch")
        self.name = name
        self.precision = precision
        self.device = resolve_device(device)
        self.dtype = {"fp32": self.torch.float32, "fp16": self.torch.float16, "bf16": self.torch.bfloat16}[precision]

    def _place(self, module):
        return module.to(device=self.device, dtype=self.dtype).eval()

    def _finish(self, features) -> np.ndarray:
        features = features.float()
        features = features / features.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        return features.cpu().numpy()

    def _fingerprint(self, module, **settings) -> str:
        digest = hashlib.sha256(weights_digest(module).encode())
        digest.update(json.dumps({"precision": self.precision, **settings}, sort_keys=True, default=str).encode())
        return digest.hexdigest()


class OpenClipModel(_TorchModel):
    """An open_clip model with its tokenizer; images preprocessed by :func:`clip_preprocess`."""

    def __init__(self, name: str, parsed: ModelName, device: Optional[str], precision: str):
        super().__init__(name, device, precision)
        open_clip = _import_open_clip()
        _check_open_clip_name(open_clip, parsed)
        torch = self.torch
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # random weights (pretrained none) are the same on every run, so they cache
            model = open_clip.create_model(parsed.name, pretrained=parsed.pretrained)
        self.preprocess_cfg = dict(open_clip.get_model_preprocess_cfg(model))
        self.tokenizer = open_clip.get_tokenizer(parsed.name)
        self.fingerprint = self._fingerprint(model, preprocess=self.preprocess_cfg,
                                             tokenizer=type(self.tokenizer).__name__,
                                             context_length=getattr(self.tokenizer, "context_length", None))
        self.model = self._place(model)
        logger.info("loaded %s on %s (%s)", name, self.device, precision)

    def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        cfg = self.preprocess_cfg
        options = {"interpolation": cfg.get("interpolation", "bicubic"),
                   "resize_mode": cfg.get("resize_mode", "shortest")}
        pixels = np.stack([clip_preprocess(image, cfg["size"], cfg["mean"], cfg["std"], **options) for image in images])
        with self.torch.inference_mode():
            batch = self.torch.from_numpy(pixels).to(device=self.device, dtype=self.dtype)
            return self._finish(self.model.encode_image(batch))

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        with self.torch.inference_mode():
            tokens = self.tokenizer(list(texts)).to(self.device)
            return self._finish(self.model.encode_text(tokens))


class HFModel(_TorchModel):
    """A ``transformers`` dual encoder with its tokenizer and image processor."""

    def __init__(self, name: str, parsed: ModelName, device: Optional[str], precision: str):
        super().__init__(name, device, precision)
        transformers = _import("transformers")
        try:
            model = transformers.AutoModel.from_pretrained(parsed.name)
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(parsed.name)
            self.processor = transformers.AutoImageProcessor.from_pretrained(parsed.name)
        except (OSError, ValueError) as error:
            raise ModelError(f"cannot load {name!r} with transformers: {error}") from error
        if not (hasattr(model, "get_image_features") and hasattr(model, "get_text_features")):
            raise ModelError(f"{name!r} is a {type(model).__name__}, not a dual encoder with "
                             "get_image_features and get_text_features")
        config = model.config
        text_config = getattr(config, "text_config", config)
        self.max_length = min(self.tokenizer.model_max_length,
                              getattr(text_config, "max_position_embeddings", self.tokenizer.model_max_length))
        self.padding = "max_length" if config.model_type in _PAD_TO_FULL_LENGTH else True
        self.fingerprint = self._fingerprint(model, processor=self.processor.to_dict(),
                                             vocabulary=_digest_json(self.tokenizer.get_vocab()),
                                             max_length=self.max_length, padding=self.padding)
        self.model = self._place(model)
        logger.info("loaded %s on %s (%s)", name, self.device, precision)

    def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        pixels = self.processor(images=[image.convert("RGB") for image in images], return_tensors="pt")["pixel_values"]
        with self.torch.inference_mode():
            return self._finish(_features(self.model.get_image_features(
                pixel_values=pixels.to(device=self.device, dtype=self.dtype))))

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        batch = self.tokenizer(list(texts), padding=self.padding, truncation=True, max_length=self.max_length,
                               return_tensors="pt")
        with self.torch.inference_mode():
            return self._finish(_features(self.model.get_text_features(**batch.to(self.device))))


def weights_digest(module) -> str:
    """Hex digest of a torch module's state dict: names, shapes, dtypes and bytes.

    Example:
        >>> import torch
        >>> a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
        >>> _ = b.load_state_dict(a.state_dict())
        >>> weights_digest(a) == weights_digest(b), weights_digest(a) == weights_digest(torch.nn.Linear(2, 2))
        (True, False)
    """
    torch = _import("torch")
    digest = hashlib.blake2b(digest_size=20)
    for key, tensor in sorted(module.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.view(torch.uint8).numpy())
    return digest.hexdigest()


def _features(output):
    """transformers 4 returns the projected features; transformers 5 a model output holding them."""
    return output if hasattr(output, "float") else output.pooler_output


def _digest_json(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _square_size(size) -> int:
    if isinstance(size, (tuple, list)):
        if len(size) != 2 or size[0] != size[1]:
            raise ModelError(f"only square image sizes are supported, got {size!r}")
        size = size[0]
    return int(size)


def _check_open_clip_name(open_clip, parsed: ModelName) -> None:
    if parsed.name.startswith(_OPEN_CLIP_SCHEMAS):
        return
    if parsed.name not in open_clip.list_models():
        raise ModelError(f"unknown open_clip architecture {parsed.name!r}; see open_clip.list_models()")
    pretrained = parsed.pretrained
    if pretrained is None or os.path.exists(pretrained):
        return
    tags = open_clip.list_pretrained_tags_by_model(parsed.name)
    if pretrained not in tags:
        raise ModelError(f"open_clip has no pretrained tag {pretrained!r} for {parsed.name}; "
                         f"known tags: {', '.join(tags) or 'none'} (or a checkpoint file, or 'none')")


def _import(module_name: str):
    try:
        return __import__(module_name)
    except ImportError as error:
        raise MissingExtraError(f"{error.name or module_name} is not installed; model evaluation needs the "
                                f"'models' extra: {INSTALL_HINT}") from error


def _import_open_clip():
    torch = _import("torch")
    try:
        return _import("open_clip")
    except MissingExtraError:
        raise
    except Exception as error:  # open_clip imports torchvision, which fails to load beside a torch it was not built for
        raise MissingExtraError(
            f"open_clip could not be imported ({type(error).__name__}: {error}). This usually means torchvision "
            f"was not built for the installed torch {torch.__version__}: install the torchvision release that "
            f"matches it, then {INSTALL_HINT}") from error
