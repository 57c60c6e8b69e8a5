"""VSE infinity (Chen et al., "Learning the Best Pooling Strategy for Visual Semantic Embedding", CVPR 2021) from its
released checkpoints, scored as its official evaluation scores them.

``--model vse:PATH/model_best.pth`` reads a checkpoint of woodfrog/vse_infty (BERT branch): ``coco_wsl_grid_bert``
(the variant of RoCOCO's headline number), ``coco_butd_grid_bert``, ``coco_butd_region_bert`` and their ``f30k_*``
twins. Such a file holds ``{'epoch', 'model': [image encoder state, text encoder state], 'best_rsum', 'opt',
'Eiters'}``, ``opt`` being the ``argparse.Namespace`` of its training options.

**Reading it.** The file is unpickled through an allowlist (:func:`rococo_eval.models.checkpoints.load_torch_file`):
tensors, plain containers, ``argparse.Namespace``, and NumPy scalars and dtypes (numbers such as ``best_rsum``); a
file that needs any other type is refused, naming it. DataParallel's ``module.`` prefixes are removed. The model is
built from ``opt`` (:class:`VseOptions`) and the state dicts' shapes, and both state dicts are loaded **strictly**
(the official ``load_state_dict`` passes ``strict=False``; here every key must fill the model, and a missing or an
unexpected one is refused by name). Only ``bert.embeddings.position_ids``, a buffer that older transformers saved
and that holds ``0, 1, 2, ...``, is dropped, after that is checked.

**The variants** (``lib/encoders.py``, ``lib/modules/resnet.py``):

- grid (``precomp_enc_type`` ``backbone``): ``EncoderImageFull``, a CNN's last feature map pooled by GPO. The CNN is
  built here without torchvision or the network (:mod:`rococo_eval.models.resnet`): ``backbone_source`` ``wsl`` is
  ``torch.hub``'s WSL ResNeXt-101 32x8d (torchvision's layout), ``detector`` the BUTD ResNet-101 of
  ``lib/modules/resnet.py`` (Caffe's layout); their weights are the checkpoint's. Other sources (``imagenet*``,
  never released) are refused.
- region (``precomp_enc_type`` ``basic``): ``EncoderImageAggr`` over precomputed BUTD region features, read for every
  image set from the folder named ``region_features`` in the settings file beside the checkpoint
  (:mod:`rococo_eval.models.region_features`).
- The BiGRU branch's checkpoints (a text encoder without ``bert.*``) are refused.

**Inputs, as the official evaluation path makes them** (``lib/datasets/image_caption.py``, ``train=False``):

- images are decoded as its ``imageio.imread`` (imageio 2.9.0, the pinned version) decodes them: grayscale as one
  channel (then stacked to three), CMYK converted to RGB, and a JPEG's EXIF orientation applied as imageio applies it
  (:func:`imageio_pixels`); then ``RawImageDataset._process_image``: BGR for the detector, float32, OpenCV's
  ``INTER_LINEAR`` resize to ``256 * input_scale_factor`` square, and the ImageNet normalisation (or the detector's
  pixel means) (:func:`process_image`);
- captions go through ``tokenizer.basic_tokenizer.tokenize`` and ``process_caption(train=False)``: BERT's basic
  tokeniser, word pieces, ``[CLS]`` and ``[SEP]`` (:meth:`VseInftyModel.token_ids`), batches padded with 0 (the
  official ``collate_fn``).

**Scores** are the dot products of the encoders' outputs (``compute_sim``), which the encoders L2-normalise as the
official ``l2norm`` does unless ``no_imgnorm``/``no_txtnorm``: the model's similarity is ``dot``
(:mod:`rococo_eval.models.similarity`), its rows the official embeddings themselves.

**Settings** beside the checkpoint, in ``PATH.json`` for ``PATH.pth`` (:data:`SETTINGS`): ``tokenizer`` (BERT's
vocabulary: a ``vocab.txt``, a folder holding one, or a Hub id; default ``bert-base-uncased``, as the official
``BertTokenizer.from_pretrained('bert-base-uncased')``), ``text_num_attention_heads`` (default: BERT's width over
64, 12 for BERT-base), ``region_features`` (the region variant's folder). Relative paths are relative to the file.

Example:
    >>> options = read_options(argparse.Namespace(precomp_enc_type="backbone", backbone_source="wsl", img_dim=2048,
    ...                                           embed_size=1024, input_scale_factor=2.0), "`model` 'vse:m.pth'")
    >>> options.variant, options.image_size, options.backbone_style
    ('wsl_grid', 512, 'torchvision')
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from rococo_eval.models.checkpoints import (
    MAX_IMAGE_SIZE,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_VOCABULARY_BYTES,
    MAX_WIDTH,
    MIN_IMAGE_SIZE,
    CheckpointError,
    attention_heads,
    bounded_int,
    bounded_number,
    build_strictly,
    check_state,
    load_torch_file,
    read_sidecar,
    read_text_file,
    strip_module_prefix,
)
from rococo_eval.models.region_features import (
    RegionFeatureError,
    RegionFeatures,
    read_region_features,
    set_of_item_set,
)
from rococo_eval.models.resnet import resnet_shape
from rococo_eval.models.similarity import DOT

logger = logging.getLogger(__name__)

SETTINGS = ("tokenizer", "text_num_attention_heads", "region_features")
DEFAULT_TOKENIZER = "bert-base-uncased"  # lib/evaluation.py evalrank: BertTokenizer.from_pretrained('bert-base-uncased')
BASE_TARGET_SIZE = 256  # RawImageDataset: 256, times input_scale_factor when that is not 1
IMAGENET_MEAN = [0.485, 0.456, 0.406]  # RawImageDataset.imagenet_mean, imagenet_std
IMAGENET_STD = [0.229, 0.224, 0.225]
DETECTOR_PIXEL_MEANS = np.array([[[102.9801, 115.9465, 122.7717]]])  # RawImageDataset.pixel_means (BGR), float64
IMAGEIO_VERSION = "2.9.0"  # vse_infty's requirements.txt: the imread whose decoding imageio_pixels reproduces
TEXT_HEAD_WIDTH = 64  # BERT-base: 768 / 12
BERT_LAYER_NORM_EPS = 1e-12  # bert-base-uncased's config
BERT_SETTINGS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size", "hidden_act", "layer_norm_eps")
_POSITION_IDS = "bert.embeddings.position_ids"
_BERT_LAYER = re.compile(r"bert\.encoder\.layer\.(\d{1,9})\.")
_BERT_SHAPES = {"vocab_size": ("bert.embeddings.word_embeddings.weight", 0),
                "hidden_size": ("bert.embeddings.word_embeddings.weight", 1),
                "intermediate_size": ("bert.encoder.layer.0.intermediate.dense.weight", 0),
                "max_position_embeddings": ("bert.embeddings.position_embeddings.weight", 0),
                "type_vocab_size": ("bert.embeddings.token_type_embeddings.weight", 0)}


class VseCheckpointError(CheckpointError):
    """A file that is not a VSE infinity checkpoint, a variant this package does not score, or wrong settings."""


@dataclass(frozen=True)
class VseOptions:
    """What a checkpoint's ``opt`` says of the model.

    Attributes:
        variant: ``wsl_grid``, ``butd_grid`` or ``butd_region``.
        precomp_enc_type: ``backbone`` (grid) or ``basic`` (region).
        backbone_source: as in ``opt`` (``wsl``, ``detector``); None for the region variant.
        backbone_style: the ResNet layout (:data:`rococo_eval.models.resnet.STYLES`); None for the region variant.
        image_size: the square side images are resized to (``256 * input_scale_factor``); None for regions.
        img_dim, embed_size: the image features' width and the joint space's.
        no_imgnorm, no_txtnorm: whether an encoder leaves its output unnormalised.
    """

    variant: str
    precomp_enc_type: str
    backbone_source: Optional[str]
    backbone_style: Optional[str]
    image_size: Optional[int]
    img_dim: int
    embed_size: int
    no_imgnorm: bool = False
    no_txtnorm: bool = False

    @property
    def is_region(self) -> bool:
        return self.precomp_enc_type == "basic"


def read_options(opt, what: str) -> VseOptions:
    """The :class:`VseOptions` of a checkpoint's ``opt``, as ``VSEModel`` and ``RawImageDataset`` read it.

    Raises:
        VseCheckpointError: ``opt`` is not a Namespace of VSE infinity's options, or names a variant this package does
            not score (an ImageNet backbone, an unknown encoder type).
    """
    if not isinstance(opt, argparse.Namespace):
        raise VseCheckpointError(f"{what} is not a VSE infinity checkpoint: its 'opt' is a {type(opt).__name__}, "
                                 "not the argparse.Namespace of the training options")
    missing = [name for name in ("precomp_enc_type", "img_dim", "embed_size") if not hasattr(opt, name)]
    if missing:
        raise VseCheckpointError(f"{what} is not a VSE infinity checkpoint: its options lack {', '.join(missing)}")
    kind = opt.precomp_enc_type
    common = dict(img_dim=bounded_int(opt.img_dim, "opt.img_dim", 1, MAX_WIDTH, what),
                  embed_size=bounded_int(opt.embed_size, "opt.embed_size", 1, MAX_WIDTH, what),
                  no_imgnorm=bool(getattr(opt, "no_imgnorm", False)), no_txtnorm=bool(getattr(opt, "no_txtnorm", False)))
    if kind == "basic":
        return VseOptions("butd_region", kind, None, None, None, **common)
    if kind != "backbone":
        raise VseCheckpointError(f"{what}: precomp_enc_type {kind!r} is not one VSE infinity builds ('basic' for "
                                 "region features, 'backbone' for a grid)")
    source = str(getattr(opt, "backbone_source", "detector"))
    if "detector" in source:  # lib/modules/resnet.py ResnetFeatureExtractor: this test first, as there
        variant, style = "butd_grid", "caffe"
    elif source.startswith("imagenet"):
        raise VseCheckpointError(f"{what}: backbone_source {source!r} (an ImageNet backbone, from torch.hub) is not "
                                 "supported: VSE infinity released grid models with the 'wsl' and 'detector' "
                                 "backbones only, and those are the ones checked against the official code")
    elif "wsl" in source:
        variant, style = "wsl_grid", "torchvision"
    else:
        raise VseCheckpointError(f"{what}: unknown backbone_source {source!r} (VSE infinity knows detector, wsl and "
                                 "imagenet*)")
    factor = bounded_number(getattr(opt, "input_scale_factor", 1), "opt.input_scale_factor", 0,
                            MAX_IMAGE_SIZE / BASE_TARGET_SIZE, what)
    size = int(BASE_TARGET_SIZE * factor) if factor != 1 else BASE_TARGET_SIZE
    if size < MIN_IMAGE_SIZE:
        raise VseCheckpointError(f"{what}: opt.input_scale_factor = {factor} resizes images to {size} pixels, under "
                                 f"the {MIN_IMAGE_SIZE} of one cell of the ResNet's grid")
    return VseOptions(variant, kind, source, style, size, **common)


def read_checkpoint(path, what: str) -> tuple[VseOptions, dict, dict]:
    """The options and the two state dicts (image encoder, text encoder; ``module.`` removed) of a checkpoint.

    Raises:
        VseCheckpointError: the file is missing, holds a type outside the allowlist (named), is not laid out as
            VSE infinity saves its checkpoints, or is a BiGRU-branch checkpoint.
    """
    try:
        checkpoint = load_torch_file(path, what, allowed=_allowed_types())
    except CheckpointError as error:
        raise VseCheckpointError(str(error)) from error
    model = checkpoint.get("model") if isinstance(checkpoint, dict) else None
    if not (isinstance(model, (list, tuple)) and len(model) == 2 and all(isinstance(part, dict) for part in model)):
        held = f"keys {sorted(checkpoint)[:6]}" if isinstance(checkpoint, dict) else f"a {type(checkpoint).__name__}"
        raise VseCheckpointError(f"{what} is not a VSE infinity checkpoint: it saves {{'model': [image encoder state, "
                                 f"text encoder state], 'opt': Namespace, ...}}, this file holds {held}")
    options = read_options(checkpoint.get("opt"), what)
    image_state, text_state = (strip_module_prefix(part) for part in model)
    if "bert.embeddings.word_embeddings.weight" not in text_state:
        raise VseCheckpointError(f"{what}: its text encoder has no BERT (keys {sorted(text_state)[:4]}): a checkpoint of "
                                 "the BiGRU branch, which this package does not score")
    return options, image_state, _without_position_ids(text_state, what)


def _allowed_types() -> list:
    """The types a checkpoint may hold beside tensors and containers: its options, and NumPy numbers (a score kept as
    a NumPy scalar is pickled as ``numpy.core.multiarray.scalar``, under NumPy 2 ``numpy._core.multiarray.scalar``,
    with its dtype): both names are allowed, as the released checkpoints were written with NumPy 1."""
    try:
        from numpy._core.multiarray import scalar
    except ImportError:  # NumPy 1
        from numpy.core.multiarray import scalar
    allowed = [argparse.Namespace, np.dtype] + [(scalar, f"{module}.scalar") for module in
                                                ("numpy.core.multiarray", "numpy._core.multiarray")]
    allowed += [type(np.dtype(kind)) for kind in ("float64", "float32", "int64", "int32", "bool")]
    return list(dict.fromkeys(allowed))


def _without_position_ids(state: dict, what: str) -> dict:
    ids = state.get(_POSITION_IDS)
    if ids is None:
        return state
    import torch

    check_state({_POSITION_IDS: ids}, what)  # a tensor, backed by what it declares, before it is compared
    if not torch.equal(ids.reshape(-1).long(), torch.arange(ids.numel())):
        raise VseCheckpointError(f"{what}: its {_POSITION_IDS} is not 0, 1, 2, ...: refused rather than dropped")
    return {key: value for key, value in state.items() if key != _POSITION_IDS}


def build_encoders(options: VseOptions, image_state: dict, text_state: dict, text_heads: Optional[int] = None,
                   what: str = "the checkpoint"):
    """The official image and text encoders of ``options`` (:mod:`rococo_eval.models.nets.vse_infty`), shaped by the
    state dicts (random weights); ``what`` names the checkpoint in errors.

    Returns ``(image_encoder, text_encoder)``: ``image_encoder(pixels)`` for a grid, ``image_encoder(features,
    lengths)`` for regions; ``text_encoder(ids, lengths)``. Module names are the official ones.

    Raises:
        CheckpointError: the state dicts give no BERT or ResNet, or one out of bounds (:func:`bert_config`,
            :func:`~rococo_eval.models.resnet.resnet_shape`).
    """
    from rococo_eval.models.nets.vse_infty import EncoderImageAggr, EncoderImageFull, EncoderText

    config = bert_config(text_state, text_heads, what)
    if options.is_region:
        image_encoder = EncoderImageAggr(options.img_dim, options.embed_size, True, options.no_imgnorm)
    else:
        try:
            shape = resnet_shape(image_state, options.backbone_style, prefix="backbone.resnet.")
        except ValueError as error:
            raise VseCheckpointError(f"{what}: its image encoder: {error}") from error
        image_encoder = EncoderImageFull(shape, options.img_dim, options.embed_size, options.no_imgnorm)
    return image_encoder, EncoderText(config, options.embed_size, options.no_txtnorm)


def bert_config(text_state: dict, heads: Optional[int] = None, what: str = "the checkpoint"):
    """bert-base-uncased's configuration at the sizes of the text encoder's state dict (the official EncoderText loads
    that model, then the checkpoint's weights over it), each size within its bound; ``what`` names the checkpoint.

    Raises:
        CheckpointError: a tensor the sizes are read from is missing or not 2-D, a size or the number of layers is
            out of bounds, or the width does not split into ``heads``.
    """
    import transformers

    sizes = {}
    for name, (key, axis) in _BERT_SHAPES.items():
        tensor = text_state.get(key)
        if tensor is None or tensor.dim() != 2:
            raise VseCheckpointError(f"{what}: its text encoder's {key} is "
                                     f"{'missing' if tensor is None else f'of shape {tuple(tensor.shape)}'}, "
                                     "not a matrix")
        sizes[name] = int(tensor.shape[axis])
    for name, high in (("hidden_size", MAX_WIDTH), ("intermediate_size", MAX_WIDTH),
                       ("max_position_embeddings", MAX_POSITIONS), ("type_vocab_size", MAX_POSITIONS)):
        bounded_int(sizes[name], f"BERT's {name} ({_BERT_SHAPES[name][0]})", 1, high, what)
    last = max((int(match[1]) for match in map(_BERT_LAYER.match, text_state) if match), default=-1)
    layers = bounded_int(last + 1, f"BERT's layers (bert.encoder.layer.{last}.*)", 1, MAX_LAYERS, what)
    hidden = sizes["hidden_size"]
    heads = attention_heads(hidden // TEXT_HEAD_WIDTH if heads is None else heads, hidden, "BERT",
                            "text_num_attention_heads in the settings file beside the checkpoint", what)
    return transformers.BertConfig(num_hidden_layers=layers, num_attention_heads=heads, hidden_act="gelu",
                                   layer_norm_eps=BERT_LAYER_NORM_EPS, pad_token_id=0, **sizes)


def imageio_pixels(image) -> np.ndarray:
    """The array ``imageio.imread`` (version :data:`IMAGEIO_VERSION`) gives for the file ``image`` was decoded from.

    imageio reads through Pillow: ``1`` becomes ``L``, ``CMYK`` becomes ``RGB``, a palette of grays becomes ``L``; a
    grayscale image is one 2-D array; a JPEG's EXIF orientation (2 to 8) is applied with imageio's own rotations and
    flips (Pillow calls a JPEG holding several pictures ``MPO``; imageio reads it as the JPEG it is). Other modes
    (colour palettes and alpha, which imageio makes four channels; 16-bit and float images) give arrays that
    ``RawImageDataset._process_image`` cannot take, and are refused.

    Example:
        >>> from PIL import Image
        >>> imageio_pixels(Image.new("CMYK", (3, 2))).shape, imageio_pixels(Image.new("L", (3, 2))).shape
        ((2, 3, 3), (2, 3))
    """
    if image.mode in ("L", "RGB"):
        frame = image
    elif image.mode in ("1", "CMYK") or (image.mode == "P" and _palette_is_grayscale(image)):
        frame = image.convert("RGB" if image.mode == "CMYK" else "L")
    else:
        name = getattr(image, "filename", "") or "an image"
        raise ValueError(f"{name} of mode {image.mode!r}: VSE infinity's loader (imageio, then _process_image) reads "
                         "grayscale, RGB and CMYK images only (imageio gives palettes of colours and alpha four "
                         "channels)")
    pixels = np.array(frame)
    if image.format in ("JPEG", "MPO") and "exif" in image.info:
        orientation = image.getexif().get(0x0112)
        if orientation in (3, 4):
            pixels = np.rot90(pixels, 2)
        if orientation in (5, 6):
            pixels = np.rot90(pixels, 3)
        if orientation in (7, 8):
            pixels = np.rot90(pixels)
        if orientation in (2, 4, 5, 7):
            pixels = np.fliplr(pixels)
    return pixels


def _palette_is_grayscale(image) -> bool:
    """imageio 2.9.0's test (``plugins/pillow.py``): no transparency, and every colour the image uses is a gray (of a
    palette of 256 colours, which is all that version reads)."""
    palette = image.getpalette()
    if image.info.get("transparency", None) or palette is None or len(palette) != 768:
        return False
    palette = np.asarray(palette).reshape((256, 3))
    start, stop = image.getextrema()
    return bool(np.allclose(np.diff(palette[start:stop + 1]), 0))


def process_image(im_in: np.ndarray, options: VseOptions) -> np.ndarray:
    """``RawImageDataset._process_image`` with ``train=False``, then the loader's ``permute(2, 0, 1)``: the float32
    ``(3, size, size)`` input of one :func:`imageio_pixels` array.

    Example:
        >>> options = read_options(argparse.Namespace(precomp_enc_type="backbone", backbone_source="detector",
        ...                                           img_dim=2048, embed_size=1024), "m")
        >>> pixels = process_image(np.full((30, 40, 3), 200, dtype=np.uint8), options)
        >>> pixels.shape, pixels.dtype.name, pixels[:, 0, 0].astype(float).round(4).tolist()  # BGR, minus the means
        ((3, 256, 256), 'float32', [97.0199, 84.0535, 77.2283])
    """
    cv2 = _cv2()
    if len(im_in.shape) == 2:
        im_in = im_in[:, :, np.newaxis]
        im_in = np.concatenate((im_in, im_in, im_in), axis=2)
    detector = "detector" in options.backbone_source
    if detector:
        im_in = im_in[:, :, ::-1]
    im = im_in.astype(np.float32, copy=True)
    target_size = options.image_size
    im_scale_x = float(target_size) / im.shape[1]
    im_scale_y = float(target_size) / im.shape[0]
    im = cv2.resize(im, None, None, fx=im_scale_x, fy=im_scale_y, interpolation=cv2.INTER_LINEAR)
    im = im.astype(np.float32)
    if detector:
        im -= DETECTOR_PIXEL_MEANS
    else:
        im = im / 255
        for channel in range(im.shape[-1]):
            im[:, :, channel] = (im[:, :, channel] - IMAGENET_MEAN[channel]) / IMAGENET_STD[channel]
    return np.ascontiguousarray(im.transpose(2, 0, 1))


def read_vocabulary(name_or_path: str, what: str) -> dict:
    """BERT's vocabulary (token -> id, the line number) from a ``vocab.txt``, a folder holding one, or a Hub id (the
    Hugging Face cache offline).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "vocab.txt").write_text("[PAD]\\n[UNK]\\n[CLS]\\n[SEP]\\ndog\\n")
        >>> read_vocabulary(str(folder), "m")["dog"]
        4
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        path = path / "vocab.txt"
    if not path.is_file():
        try:
            import huggingface_hub

            path = Path(huggingface_hub.hf_hub_download(name_or_path, "vocab.txt"))
        except Exception as error:  # offline without a cached copy, not found, no connection
            raise VseCheckpointError(f"{what}: cannot read BERT's vocabulary {name_or_path!r} ({type(error).__name__}: "
                                     f"{error}); name a vocab.txt as \"tokenizer\" in the settings file beside the "
                                     "checkpoint") from error
    lines = read_text_file(path, f"{what}: BERT's vocabulary", MAX_VOCABULARY_BYTES).split("\n")
    return {token: index for index, token in enumerate(lines[:-1] if lines[-1] == "" else lines)}


class VseInftyModel:
    """``vse:PATH.pth``: an official VSE infinity checkpoint as a dual encoder (module docstring).

    Args:
        name: the model name as given.
        path: the checkpoint file.
        base: the device, dtype and fingerprint helper (:class:`~rococo_eval.models.adapters.TorchModel`).
    """

    similarity = DOT  # compute_sim: the dot product of the encoders' outputs (normalised by them, as there)

    def __init__(self, name: str, path: str, base):
        import transformers

        what = f"`model` {name!r}"
        self.options, image_state, text_state = read_checkpoint(path, what)
        settings = read_sidecar(path, what, SETTINGS, paths=("tokenizer",), folders=("region_features",))
        self.region_folder = settings.get("region_features")
        if self.options.is_region and not self.region_folder:
            raise VseCheckpointError(f"{what}: a region model (precomp_enc_type 'basic') reads precomputed BUTD region "
                                     f"features: name their folder as \"region_features\" in "
                                     f"{str(Path(path).with_suffix('.json'))!r}")
        image_encoder, text_encoder = build_strictly(
            lambda: build_encoders(self.options, image_state, text_state, settings.get("text_num_attention_heads"),
                                   what),
            [image_state, text_state], [f"{what}: the {part} encoder's weights do not fill the {part} encoder of its "
                                        "options" for part in ("image", "text")])
        tokenizer = settings.get("tokenizer", DEFAULT_TOKENIZER)
        self.vocabulary = read_vocabulary(tokenizer, what)
        if len(self.vocabulary) != text_encoder.bert.config.vocab_size:
            raise VseCheckpointError(f"{what}: the vocabulary {tokenizer!r} has {len(self.vocabulary)} tokens, the "
                                     f"checkpoint's BERT {text_encoder.bert.config.vocab_size}")
        bert = transformers.models.bert
        self.basic_tokenizer = bert.BasicTokenizer(do_lower_case=True)
        self.wordpiece_tokenizer = bert.WordpieceTokenizer(vocab=self.vocabulary, unk_token="[UNK]")
        self.name, self.base = name, base
        self.device, self.precision = base.device, base.precision
        self._region_sets: dict = {}
        vocabulary_digest = hashlib.sha256(json.dumps(self.vocabulary, sort_keys=True).encode()).hexdigest()
        bert = text_encoder.bert.config
        self.fingerprint = base.weights_fingerprint(
            _Pair(image_encoder, text_encoder), family="vse_infty", options=self.options.__dict__,
            bert={key: getattr(bert, key) for key in BERT_SETTINGS}, vocabulary=vocabulary_digest,
            decoding=f"imageio {IMAGEIO_VERSION}", opencv=_cv2().__version__)
        self.image_encoder, self.text_encoder = base.place(image_encoder), base.place(text_encoder)
        logger.info("loaded %s (%s) on %s (%s)", name, self.options.variant, self.device, self.precision)

    def token_ids(self, caption: str) -> list[int]:
        """The official ``process_caption(tokenizer, tokenizer.basic_tokenizer.tokenize(caption), train=False)``."""
        tokens = [piece for word in self.basic_tokenizer.tokenize(caption)
                  for piece in self.wordpiece_tokenizer.tokenize(word)]
        return [self.vocabulary[token] for token in ["[CLS]"] + tokens + ["[SEP]"]]

    def tokenize_texts(self, texts: Sequence[str]):
        """The official ``collate_fn`` of the captions' ids: ``(ids padded with 0, lengths)``."""
        torch = self.base.torch
        captions = [self.token_ids(text) for text in texts]
        lengths = [len(ids) for ids in captions]
        targets = torch.zeros(len(captions), max(lengths), dtype=torch.long)
        for row, ids in enumerate(captions):
            targets[row, :len(ids)] = torch.tensor(ids)
        return targets, lengths

    def encode_tokenized(self, tokens) -> np.ndarray:
        """The text encoder's output (``forward_emb``'s ``cap_emb``) of one :meth:`tokenize_texts` output."""
        torch = self.base.torch
        targets, lengths = tokens
        with torch.inference_mode():
            embeddings = self.text_encoder(targets.to(self.device), torch.Tensor(lengths).to(self.device))
        return embeddings.float().cpu().numpy()

    def encode_texts(self, texts) -> np.ndarray:
        """The official embeddings of captions."""
        return self.encode_tokenized(self.tokenize_texts(texts))

    def preprocess_image(self, item) -> np.ndarray:
        """A grid model's input of one image (:func:`imageio_pixels`, :func:`process_image`); a region model's item is
        already its ``(regions, img_dim)`` features (:meth:`item_inputs`)."""
        if self.options.is_region:
            return np.asarray(item, dtype=np.float32)
        return process_image(imageio_pixels(item), self.options)

    def encode_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        """The image encoder's output (``forward_emb``'s ``img_emb``) of a batch of :meth:`preprocess_image` outputs."""
        torch = self.base.torch
        with torch.inference_mode():
            inputs = self.base.as_input(batch)
            if self.options.is_region:
                lengths = torch.Tensor([batch.shape[1]] * batch.shape[0]).to(self.device)
                embeddings = self.image_encoder(inputs, lengths)
            else:
                embeddings = self.image_encoder(inputs)
        return embeddings.float().cpu().numpy()

    def encode_images(self, images) -> np.ndarray:
        """The official embeddings of images (or, for a region model, of their features)."""
        return self.encode_preprocessed(np.stack([self.preprocess_image(image) for image in images]))

    def item_inputs(self, items):
        """What this model embeds for item set ``items``: for a region model, an image set's region features (checked,
        in the benchmark's order; the set's fingerprint then covers their bytes); else ``items`` itself."""
        if not (self.options.is_region and items.kind == "image") or isinstance(items.items, RegionFeatures):
            return items
        from rococo_eval.models.cache import ItemSet

        key = (items.name, items.fingerprint)
        if key not in self._region_sets:
            image_files = getattr(items.items, "image_files", None)
            if image_files is None:
                raise VseCheckpointError(f"`model` {self.name!r}: the image set {items.name!r} does not say which "
                                         "images it holds, so its region features cannot be checked")
            try:
                features = read_region_features(self.region_folder, set_of_item_set(items.name), image_files,
                                                 self.options.img_dim, f"`model` {self.name!r}")
            except RegionFeatureError as error:
                raise VseCheckpointError(str(error)) from error
            digest = hashlib.sha256(f"{items.fingerprint}:{features.digest}".encode()).hexdigest()
            self._region_sets[key] = ItemSet(items.name, items.kind, features, digest)
        return self._region_sets[key]


def load_vse_infty(name: str, path: str, base) -> VseInftyModel:
    """``--model vse:PATH.pth`` (:class:`VseInftyModel`)."""
    return VseInftyModel(name, path, base)


class _Pair:
    """Both encoders as one object with a ``state_dict`` (what the fingerprint digests)."""

    def __init__(self, image_encoder, text_encoder):
        self.image_encoder, self.text_encoder = image_encoder, text_encoder

    def state_dict(self) -> dict:
        return {**{f"image.{key}": value for key, value in self.image_encoder.state_dict().items()},
                **{f"text.{key}": value for key, value in self.text_encoder.state_dict().items()}}


def _cv2():
    """OpenCV, which the official loader resizes with (the ``models`` extra installs it)."""
    try:
        import cv2
    except ImportError as error:
        raise VseCheckpointError("VSE infinity resizes its images with OpenCV, which is not installed: "
                                 "pip install 'rococo-eval[models]' (opencv-python-headless)") from error
    return cv2
