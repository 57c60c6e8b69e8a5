"""Image-text models loaded by the names that ``--model`` takes, each behind one protocol
(:class:`~rococo_eval.models.protocol.ImageTextModel`) and scored as its ``similarity`` says.

The families, named the way the ``rococo-eval`` command takes them (:data:`MODEL_FORMS`, the one list of the forms
that the error messages, ``run --help`` and the docs show; :func:`load_model` looks the prefix up in one registry,
:mod:`rococo_eval.models.families`):

- ``open_clip:ARCH/PRETRAINED``: an open_clip architecture and pretrained tag (``ViT-B-32/openai``), or a
  checkpoint file after the slash; ``none`` builds the architecture with random weights.
  ``open_clip:hf-hub:ORG/REPO`` and ``open_clip:local-dir:PATH`` use open_clip's own schemas.
- ``hf:REPO_OR_PATH``: a ``transformers`` dual encoder (CLIP, SigLIP, ...) with ``get_image_features``
  and ``get_text_features``, its tokenizer and image processor, from the Hub or a local folder.
- ``blip:PATH.pth``: an official BLIP retrieval checkpoint (``model_base_retrieval_coco.pth``), converted to
  ``transformers`` when loaded (:mod:`rococo_eval.models.blip_official`).
- ``vse:PATH.pth``: an official VSE infinity checkpoint (``model_best.pth``), built from the options saved in it
  (:mod:`rococo_eval.models.vse_infty`).
- ``blip:hf-hub:ORG/REPO[@REVISION]/PATH.pth``, ``vse:hf-hub:...``: the same, a file of a Hub repository, downloaded
  at one commit with what its loader reads beside it (:mod:`rococo_eval.models.hub_files`).
- ``pcmepp:REPO_OR_FOLDER``: an official PCME++ checkpoint, probabilistic embeddings scored by CSD
  (:mod:`rococo_eval.models.pcmepp`).
- ``module:callable``: the user's own model (:mod:`rococo_eval.models.custom`).

Embeddings are L2-normalised (cosine similarity) unless the model's ``similarity`` says otherwise
(:mod:`rococo_eval.models.similarity`: PCME++ is ``csd``). The built-in families need the optional ``models`` extra
(torch, open_clip_torch, transformers; VSE infinity also OpenCV and its backbones' weights from the checkpoint).
Images are preprocessed
here with PIL and NumPy, exactly as open_clip's evaluation transform does for its ``shortest`` and
``squash`` resize modes, so open_clip's torchvision-based transforms are never called; ``hf:`` models use
their own image processor's output, reproduced bit for bit by :class:`ProcessorReplica` where it can. Both
preprocess one image at a time (``preprocess_image``, run in the embedding loop's worker threads) apart from
the forward pass (``encode_preprocessed``): see :class:`~rococo_eval.models.protocol.PreprocessingModel`; and
tokenize a batch of captions (``tokenize_texts``, run in a thread ahead of the model) apart from its forward pass
(``encode_tokenized``): see :class:`~rococo_eval.models.protocol.TokenizingModel`. Every model is an
:class:`~rococo_eval.models.protocol.ImageTextModel`.

Every model has a ``fingerprint``: a digest of its weights, preprocessing, tokenizer and precision, which
names its cached embeddings (``rococo_eval.models.cache``).

Example:
    >>> parse_model_name("open_clip:ViT-B-32/openai")
    ModelName(library='open_clip', name='ViT-B-32', pretrained='openai')
    >>> parse_model_name("hf:openai/clip-vit-base-patch32")
    ModelName(library='hf', name='openai/clip-vit-base-patch32', pretrained=None)
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
from PIL import Image

from rococo_eval.models.cache import weights_digest
from rococo_eval.models.families import (  # noqa: F401 (MODEL_FORMS, ModelForm: public here)
    CALLABLE,
    FAMILIES,
    MODEL_FORMS,
    PRECISIONS,
    TORCH_DTYPES,
    ModelForm,
)
from rococo_eval.models.protocol import ImageTextModel
from rococo_eval.models.similarity import COSINE

logger = logging.getLogger(__name__)


INSTALL_HINT = "pip install 'rococo-eval[models]'"
_RANDOM_WEIGHTS = ("none", "random")
_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")  # an open_clip PRETRAINED that names a file
_HUB_ID = re.compile(r"[A-Za-z0-9_][\w.-]*(/[A-Za-z0-9_][\w.-]*)?")  # a Hugging Face Hub repository id: NAME, ORG/NAME
_OPEN_CLIP_SCHEMAS = ("hf-hub:", "local-dir:")
_RESIZE_MODES = ("shortest", "squash")
_INTERPOLATIONS = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
_PAD_TO_FULL_LENGTH = ("siglip", "siglip2")


class ModelError(ValueError):
    """A model name that names no model, or a model that cannot be used as a dual encoder."""


class MissingExtraError(ImportError):
    """A model library of the optional ``models`` extra is not installed."""


@dataclass(frozen=True)
class ModelName:
    """A parsed model name: ``library`` is a :class:`ModelForm`'s (``"open_clip"``, ``"hf"``, ...; ``"python"`` for
    ``module:callable``); ``pretrained`` is None for none."""

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
        rococo_eval.models.adapters.ModelError: unknown model name 'clip-vit'; accepted forms: ...
    """
    library, _, rest = str(text).partition(":")
    built_in = library in FAMILIES and library != CALLABLE  # module:callable has no prefix
    if library == "open_clip" and rest:
        if rest.startswith(_OPEN_CLIP_SCHEMAS):
            return ModelName("open_clip", rest, None)
        parts = rest.split("/", 1)  # ARCH/PRETRAINED, both named
        if len(parts) == 2 and all(parts):
            arch, pretrained = parts
            return ModelName("open_clip", arch, None if pretrained.lower() in _RANDOM_WEIGHTS else pretrained)
    elif built_in and rest:
        return ModelName(library, rest, None)
    if not built_in:  # a built-in prefix with a wrong rest (open_clip:RN50) is no module:callable
        from rococo_eval.models.custom import names_a_callable

        if names_a_callable(text):
            return ModelName(CALLABLE, str(text), None)
    raise ModelError(f"unknown model name {text!r}; accepted forms: " + "; ".join(map(str, MODEL_FORMS)))


def check_model_name(text: str) -> ModelName:
    """:func:`parse_model_name`, then what can be checked in an instant, without the model's library or its weights:
    the files and folders it names exist, and a Hub repository id has the form of one.

    Raises:
        ModelError: naming ``model`` and ``text``, and the form expected.

    Example:
        >>> check_model_name("vse:no-such-folder/model_best.pth")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.models.adapters.ModelError: `model` 'vse:no-such-folder/model_best.pth': no such file ...
    """
    parsed = parse_model_name(text)
    _family_function(parsed.library, "checker")(str(text), parsed)
    return parsed


def load_model(name: str, device: Optional[str] = None, precision: str = "fp32") -> ImageTextModel:
    """Load a model by its ``--model`` name, on ``device`` (default: CUDA when present, else CPU).

    Args:
        name: see :data:`MODEL_FORMS`.
        device: a torch device string, or None for automatic.
        precision: ``"fp32"``, ``"fp16"`` or ``"bf16"``: the dtype of the weights and inputs; embeddings
            are returned in float32 either way.

    Raises:
        ModelError: for an unknown name, architecture or pretrained tag, or a model that is no dual encoder
            (BLIP and BLIP-2 retrieval checkpoints load as :mod:`rococo_eval.models.blip`), or a checkpoint of a
            family that cannot be read (named).
        MissingExtraError: when torch, open_clip or transformers is not installed.
    """
    parsed = check_model_name(name)
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS}, got {precision!r}")
    return _family_function(parsed.library, "loader")(name, parsed, device, precision)


def _family_function(library: str, role: str) -> Callable:
    """The function of this module that family ``library``'s record names as its ``role`` (``"checker"`` or
    ``"loader"``): :data:`~rococo_eval.models.families.FAMILIES` is the one list of the families."""
    return globals()[getattr(FAMILIES[library], role)]


def _load_open_clip(name: str, parsed: ModelName, device: Optional[str], precision: str):
    return OpenClipModel(name, parsed, device, precision)


def _load_transformers(name: str, parsed: ModelName, device: Optional[str], precision: str):
    """``hf:REPO_OR_PATH``: a dual encoder, or a BLIP / BLIP-2 retrieval checkpoint (scored in two stages), as its
    checked ``config.json`` says (:func:`~rococo_eval.models.checkpoints.check_transformers_folder`)."""
    from rococo_eval.models.checkpoints import CheckpointError, check_transformers_folder

    _import("torch")
    transformers = _import("transformers")
    folder = Path(parsed.name).expanduser()
    try:
        if not folder.is_dir():  # a Hub id: its config.json, downloaded (or found in the cache), is checked first
            folder = Path(transformers.utils.cached_file(parsed.name, "config.json")).parent
        checked = check_transformers_folder(folder, f"`model` {name!r}")
    except CheckpointError as error:
        raise ModelError(str(error)) from error
    except OSError as error:
        raise ModelError(f"cannot load {name!r} with transformers: {error}") from error
    if checked.reranking:  # scored in two stages (scoring.rerank)
        from rococo_eval.models.blip import load_reranking_model

        try:
            return load_reranking_model(name, parsed.name, TorchModel(name, device, precision))
        except (OSError, ValueError) as error:
            raise ModelError(f"cannot load {name!r} with transformers: {error}") from error
    return HFModel(name, parsed, device, precision)


def _checkpoint_family(module: str, loader: str):
    """The loader of a family read from its official checkpoints: ``rococo_eval.models.<module>.<loader>(name, path,
    base)``, its :class:`~rococo_eval.models.checkpoints.CheckpointError` turned into a :class:`ModelError`; a file
    named in a Hub repository (``blip:hf-hub:ORG/REPO/PATH.pth``) is downloaded first, with what its loader reads
    beside it (:func:`~rococo_eval.models.hub_files.download_hub_file`)."""

    def load(name: str, parsed: ModelName, device: Optional[str], precision: str):
        _import("torch")
        _import("transformers")
        from rococo_eval.models.checkpoints import CheckpointError
        from rococo_eval.models.hub_files import download_hub_file, hub_location

        family = importlib.import_module(f"rococo_eval.models.{module}")
        try:
            path = parsed.name
            hub_file = hub_location(parsed.library, path, f"`model` {name!r}")
            if hub_file is not None and hub_file.path is not None:  # a file of a repository (a repository: the loader's)
                path = str(download_hub_file(hub_file, f"`model` {name!r}")[0] / hub_file.path)
            return getattr(family, loader)(name, path, TorchModel(name, device, precision))
        except CheckpointError as error:
            raise ModelError(str(error)) from error

    return load


def _load_callable(name: str, parsed: ModelName, device: Optional[str], precision: str):
    from rococo_eval.models.custom import load_callable

    return load_callable(name, device, precision)


def _check_open_clip(name: str, parsed: ModelName) -> None:
    """``open_clip:``: a ``local-dir:`` folder or a checkpoint file that exists, or an ``hf-hub:`` repository id (the
    architecture and the tag are open_clip's to check, when it is imported to load the model)."""
    location = parsed.name.partition(":")[2]
    if parsed.name.startswith("local-dir:") and not Path(location).expanduser().is_dir():
        raise ModelError(f"`model` {name!r}: no such folder {location!r}: expected {_form_of(name)}")
    if parsed.name.startswith("hf-hub:") and not _HUB_ID.fullmatch(location):
        raise ModelError(f"`model` {name!r}: {location!r} is no Hub repository id: expected {_form_of(name)}")
    pretrained = parsed.pretrained or ""
    if ("/" in pretrained or pretrained.endswith(_CHECKPOINT_SUFFIXES)) and not os.path.exists(pretrained):
        raise ModelError(f"`model` {name!r}: no such checkpoint file {pretrained!r}: expected {_form_of(name)}")


def _check_transformers(name: str, parsed: ModelName) -> None:
    """``hf:``: a folder that exists, or a Hub repository id."""
    path = Path(parsed.name).expanduser()
    if path.is_file() or not (path.is_dir() or _HUB_ID.fullmatch(parsed.name)):
        problem = "a file, not a folder" if path.is_file() else "no such folder, and not a Hub repository id"
        raise ModelError(f"`model` {name!r}: {problem}: expected {_form_of(name)}")


def _check_file(name: str, parsed: ModelName) -> None:
    """``blip:`` and ``vse:``: a checkpoint file that exists, or a file of a Hub repository
    (``hf-hub:ORG/REPO[@REVISION]/PATH``, :func:`~rococo_eval.models.hub_files.parse_hub_file`)."""
    from rococo_eval.models.checkpoints import CheckpointError
    from rococo_eval.models.hub_files import hub_location

    try:
        if hub_location(parsed.library, parsed.name, f"`model` {name!r}") is not None:
            return
    except CheckpointError as error:
        raise ModelError(str(error)) from error
    if not Path(parsed.name).expanduser().is_file():
        raise ModelError(f"`model` {name!r}: no such file {parsed.name!r}: expected {_form_of(name)}")


def _check_pcmepp(name: str, parsed: ModelName) -> None:
    """``pcmepp:``: a folder that exists, or a Hub repository id (:func:`rococo_eval.models.checkpoints.local_folder`)."""
    from rococo_eval.models.checkpoints import CheckpointError, local_folder

    try:
        local_folder(parsed.name, f"`model` {name!r}", str(_form_of(name)))
    except CheckpointError as error:
        raise ModelError(str(error)) from error


def _check_callable(name: str, parsed: ModelName) -> None:
    """``module:callable``: :func:`parse_model_name` has found the module; the callable is looked up when loaded."""


def _form_of(name: str) -> ModelForm:
    """The :class:`ModelForm` that built-in model name ``name`` is written in."""
    library, _, rest = name.partition(":")
    schema = rest.partition(":")[0] + ":" if rest.startswith(_OPEN_CLIP_SCHEMAS) else ""
    return next(form for form in MODEL_FORMS if form.syntax.startswith(f"{library}:{schema}"))


_load_blip = _checkpoint_family("blip_official", "load_official_checkpoint")  # BLIP's .pth
_load_vse = _checkpoint_family("vse_infty", "load_vse_infty")  # VSE infinity's model_best.pth
_load_pcmepp = _checkpoint_family("pcmepp", "load_pcmepp")  # save_pretrained, scored by CSD


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
    table = _normalising_table(np.arange(256, dtype=np.float32) / np.float32(255), mean, std)
    return apply_table(image if image.mode == "RGB" else image.convert("RGB"), table)


def apply_table(image: Image.Image, table: np.ndarray) -> np.ndarray:
    """Look up each byte of an RGB image in its channel's row of ``table``: the ``(3, H, W)`` float32 pixels.

    Any per-value float32 arithmetic (``x / 255``, ``(x - mean) / std``) applied to a whole image gives the same
    bits as applied to the 256 possible values once and looked up, at a fraction of the cost.

    Args:
        image: an RGB PIL image.
        table: ``(3, 256)`` float32, e.g. from :func:`_normalising_table`.

    Example:
        >>> table = np.stack([np.arange(256, dtype=np.float32)] * 3) * np.float32([[1], [-1], [0]])
        >>> apply_table(Image.new("RGB", (2, 1), (5, 6, 7)), table)[:, 0, 0].tolist()
        [5.0, -6.0, 0.0]
    """
    pixels = np.asarray(image)
    out = np.empty((3,) + pixels.shape[:2], dtype=table.dtype)
    for channel in range(3):
        np.take(table[channel], pixels[:, :, channel], out=out[channel])
    return out


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


class TorchModel:
    """The runtime every torch model family shares: the device, the dtype, turning features into normalised float32,
    and the fingerprint of weights and settings. The adapters here subclass it; the families of their own modules
    (BLIP, VSE infinity, PCME++) are given one (``base``)."""

    similarity = COSINE  # rococo_eval.models.similarity: normalised rows, scored by their dot product

    def __init__(self, name: str, device: Optional[str], precision: str):
        self.torch = _import("torch")
        self.name = name
        self.precision = precision
        self.device = resolve_device(device)
        self.dtype = getattr(self.torch, TORCH_DTYPES[precision])

    def place(self, module):
        """``module`` on this device, in this dtype, in eval mode."""
        return module.to(device=self.device, dtype=self.dtype).eval()

    def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """Embed PIL images: :meth:`preprocess_image` of each into one batch, then :meth:`encode_preprocessed`."""
        first = self.preprocess_image(images[0])
        batch = np.empty((len(images),) + first.shape, dtype=first.dtype)
        batch[0] = first
        for row, image in enumerate(images[1:], start=1):
            batch[row] = self.preprocess_image(image)
        return self.encode_preprocessed(batch)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts: :meth:`tokenize_texts` (the subclass's), then :meth:`encode_tokenized`."""
        return self.encode_tokenized(self.tokenize_texts(texts))

    def as_input(self, batch: np.ndarray):
        """A NumPy batch as a tensor on this device, in this dtype."""
        return self.torch.from_numpy(batch).to(device=self.device, dtype=self.dtype)

    def finish(self, features) -> np.ndarray:
        """Features as float32 NumPy rows of unit length (the cosine similarity's rows)."""
        features = features.float()
        features = features / features.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        return features.cpu().numpy()

    def weights_fingerprint(self, module, **settings) -> str:
        """Hex digest of ``module``'s weights, this precision and ``settings`` (anything else that shapes the
        embeddings: preprocessing, tokenizer)."""
        digest = hashlib.sha256(weights_digest(module).encode())
        digest.update(json.dumps({"precision": self.precision, **settings}, sort_keys=True, default=str).encode())
        return digest.hexdigest()


class OpenClipModel(TorchModel):
    """An open_clip model with its tokenizer; images preprocessed by :func:`clip_preprocess`."""

    def __init__(self, name: str, parsed: ModelName, device: Optional[str], precision: str):
        super().__init__(name, device, precision)
        if parsed.name.startswith(_OPEN_CLIP_SCHEMAS):
            _check_open_clip_config(name, parsed)
        open_clip = _import_open_clip()
        _check_open_clip_name(open_clip, parsed)
        torch = self.torch
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # random weights (pretrained none) are the same on every run, so they cache
            model = open_clip.create_model(parsed.name, pretrained=parsed.pretrained)
        self.preprocess_cfg = dict(open_clip.get_model_preprocess_cfg(model))
        self.tokenizer = open_clip.get_tokenizer(parsed.name)
        self.fingerprint = self.weights_fingerprint(model, preprocess=self.preprocess_cfg,
                                             tokenizer=type(self.tokenizer).__name__,
                                             context_length=getattr(self.tokenizer, "context_length", None))
        self.model = self.place(model)
        logger.info("loaded %s on %s (%s)", name, self.device, precision)

    def preprocess_image(self, image: Image.Image) -> np.ndarray:
        """open_clip's evaluation transform of one image (:func:`clip_preprocess`); thread-safe."""
        cfg = self.preprocess_cfg
        return clip_preprocess(image, cfg["size"], cfg["mean"], cfg["std"], cfg.get("interpolation", "bicubic"),
                               cfg.get("resize_mode", "shortest"))

    def encode_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        """Embed a batch of :meth:`preprocess_image` outputs."""
        with self.torch.inference_mode():
            return self.finish(self.model.encode_image(self.as_input(batch)))

    def tokenize_texts(self, texts: Sequence[str]):
        """open_clip's tokens of ``texts`` (a CPU tensor)."""
        return self.tokenizer(list(texts))

    def encode_tokenized(self, tokens) -> np.ndarray:
        """Embed one :meth:`tokenize_texts` output."""
        with self.torch.inference_mode():
            return self.finish(self.model.encode_text(tokens.to(self.device)))


class HFModel(TorchModel):
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
        if not all(callable(getattr(model, method, None)) for method in ("get_image_features", "get_text_features")):
            raise ModelError(f"{name!r} is a {type(model).__name__}, not a dual encoder with "
                             "get_image_features and get_text_features")
        config = model.config
        text_config = getattr(config, "text_config", config)
        self.max_length = min(self.tokenizer.model_max_length,
                              getattr(text_config, "max_position_embeddings", self.tokenizer.model_max_length))
        self.padding = "max_length" if config.model_type in _PAD_TO_FULL_LENGTH else True
        self.fingerprint = self.weights_fingerprint(model, processor=self.processor.to_dict(),
                                             vocabulary=_digest_json(self.tokenizer.get_vocab()),
                                             max_length=self.max_length, padding=self.padding)
        self.model = self.place(model)
        self.fast_preprocessing = ProcessorReplica.of(self.processor)
        logger.info("loaded %s on %s (%s)%s", name, self.device, precision,
                    "" if self.fast_preprocessing else f"; images go through {type(self.processor).__name__} one by one")

    def preprocess_image(self, image: Image.Image) -> np.ndarray:
        """The image processor's ``pixel_values`` of one image, bit for bit; thread-safe.

        Replicated with one resize and a table look-up (:class:`ProcessorReplica`) when the processor is one it
        reproduces, else the processor itself on this one image. Images that are not RGB are converted first.
        """
        image = image if image.mode == "RGB" else image.convert("RGB")
        if self.fast_preprocessing is not None:
            pixels = self.fast_preprocessing(image)
            if pixels is not None:
                return pixels
        return np.asarray(self.processor(images=[image], return_tensors="np")["pixel_values"][0])

    def encode_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        """Embed a batch of :meth:`preprocess_image` outputs."""
        with self.torch.inference_mode():
            return self.finish(_features(self.model.get_image_features(pixel_values=self.as_input(batch))))

    def tokenize_texts(self, texts: Sequence[str]):
        """The tokenizer's output for ``texts`` (CPU tensors), padded and truncated as the model takes them."""
        return self.tokenizer(list(texts), padding=self.padding, truncation=True, max_length=self.max_length,
                              return_tensors="pt")

    def encode_tokenized(self, tokens) -> np.ndarray:
        """Embed one :meth:`tokenize_texts` output."""
        with self.torch.inference_mode():
            return self.finish(_features(self.model.get_text_features(**tokens.to(self.device))))


class ProcessorReplica:
    """The ``pixel_values`` of a transformers PIL-backend image processor (CLIP's and the like), reproduced exactly.

    The processor converts the image to a NumPy array, back to PIL to resize it, to NumPy again, crops the
    centre, rescales in float64, casts to float32 and normalises; four full-size copies per image. The
    replica resizes the PIL image once with the same filter and size, crops, and looks the bytes up in a
    ``(3, 256)`` table holding the rescaled and normalised value of every byte, computed with the processor's own
    steps. :meth:`of` builds it only for a processor whose steps it knows, and only after checking that it gives
    the processor's bits on test images (else the processor is used, image by image).

    Example:
        >>> from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
        >>> processor = CLIPImageProcessorPil(size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8})
        >>> image = Image.linear_gradient("L").convert("RGB").resize((30, 20))
        >>> expected = processor(images=[image], return_tensors="np")["pixel_values"][0]
        >>> bool(np.array_equal(ProcessorReplica.of(processor)(image), expected))
        True
    """

    def __init__(self, size, crop, resample, table: np.ndarray):
        self.size, self.crop, self.resample, self.table = size, crop, resample, table

    @classmethod
    def of(cls, processor) -> Optional["ProcessorReplica"]:
        """The replica of ``processor``, or None when it has steps the replica does not reproduce exactly."""
        try:
            replica = cls._build(processor)
        except (AttributeError, TypeError, ValueError):
            return None
        if replica is None or not replica._agrees_with(processor):
            return None
        return replica

    @classmethod
    def _build(cls, processor):
        backends = [klass.__name__ for klass in type(processor).__mro__]
        if "PilBackend" not in backends or getattr(processor, "do_pad", None):
            return None
        base = type(processor).__mro__[backends.index("PilBackend")]
        steps = ("process_image", "_preprocess", "resize", "center_crop", "rescale", "normalize", "convert_to_rgb")
        if any(getattr(type(processor), step) is not getattr(base, step) for step in steps):
            return None  # a model-specific step: only the processor itself knows it
        if not (processor.do_resize and processor.do_convert_rgb and (processor.do_rescale or processor.do_normalize)):
            return None
        size = processor.size
        if size.shortest_edge and not (size.longest_edge or size.height or size.width or size.max_height):
            target = ("shortest", int(size.shortest_edge))
        elif size.height and size.width and not (size.shortest_edge or size.longest_edge):
            target = ("exact", (int(size.height), int(size.width)))
        else:
            return None
        crop = (int(processor.crop_size.height), int(processor.crop_size.width)) if processor.do_center_crop else None
        values = np.arange(256, dtype=np.uint8)
        values = (values.astype(np.float64) * processor.rescale_factor).astype(np.float32) if processor.do_rescale \
            else values.astype(np.float32)
        if processor.do_normalize:
            table = _normalising_table(values, _per_channel(processor.image_mean), _per_channel(processor.image_std))
        else:
            table = np.stack([values] * 3)
        return cls(target, crop, processor.resample, table)

    def __call__(self, image: Image.Image) -> Optional[np.ndarray]:
        """The ``(3, H, W)`` float32 input of an RGB image, or None where the processor would pad it."""
        width, height = image.size
        kind, side = self.size
        if kind == "shortest":
            short, long = (width, height) if width <= height else (height, width)
            new_long = int(side * long / short)
            new_height, new_width = (new_long, side) if width <= height else (side, new_long)
        else:
            new_height, new_width = side
        image = image.resize((new_width, new_height), resample=self.resample)
        if self.crop is not None:
            crop_height, crop_width = self.crop
            top, left = (new_height - crop_height) // 2, (new_width - crop_width) // 2
            if top < 0 or left < 0:
                return None
            image = image.crop((left, top, left + crop_width, top + crop_height))
        return apply_table(image, self.table)

    def _agrees_with(self, processor) -> bool:
        rng = np.random.default_rng(0)
        for height, width in ((37, 61), (70, 29)):
            image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
            expected = np.asarray(processor(images=[image], return_tensors="np")["pixel_values"][0])
            pixels = self(image)
            if pixels is None or pixels.dtype != expected.dtype or not np.array_equal(pixels, expected):
                return False
        return True


def _features(output):
    """transformers 4 returns the projected features; transformers 5 a model output holding them."""
    return output if hasattr(output, "float") else output.pooler_output


def _normalising_table(values: np.ndarray, mean, std) -> np.ndarray:
    """``(values - mean) / std`` per channel in float32: a ``(3, 256)`` table of every byte's model input."""
    mean = np.broadcast_to(np.asarray(mean, dtype=np.float32), (3,))
    std = np.broadcast_to(np.asarray(std, dtype=np.float32), (3,))
    return np.ascontiguousarray((values[None, :] - mean[:, None]) / std[:, None])


def _per_channel(value):
    return list(value) if isinstance(value, (list, tuple)) else [value] * 3


def _digest_json(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _square_size(size) -> int:
    if isinstance(size, (tuple, list)):
        if len(size) != 2 or size[0] != size[1]:
            raise ModelError(f"only square image sizes are supported, got {size!r}")
        size = size[0]
    return int(size)


def _check_open_clip_config(name: str, parsed: ModelName) -> None:
    """The config of an open_clip ``local-dir:`` folder or ``hf-hub:`` repository (downloaded, or found in the cache,
    first), checked before open_clip reads it (:func:`~rococo_eval.models.checkpoints.check_open_clip_folder`)."""
    import huggingface_hub

    from rococo_eval.models.checkpoints import OPEN_CLIP_CONFIG, CheckpointError, check_open_clip_folder

    schema, _, location = parsed.name.partition(":")
    try:
        if schema == "local-dir":
            folder = Path(location).expanduser()
        else:
            folder = Path(huggingface_hub.hf_hub_download(location, OPEN_CLIP_CONFIG)).parent
        check_open_clip_folder(folder, f"`model` {name!r}")
    except CheckpointError as error:
        raise ModelError(str(error)) from error
    except (OSError, huggingface_hub.errors.EntryNotFoundError) as error:
        raise ModelError(f"cannot load {name!r}: no {OPEN_CLIP_CONFIG} ({error})") from error


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
