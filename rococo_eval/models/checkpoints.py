"""Reading the official checkpoints of model families (BLIP, VSE infinity, PCME++): torch files unpickled through
an allowlist only, the settings file beside a checkpoint, DataParallel's ``module.`` prefix, and the bounds a
checkpoint must keep, checked before anything of its size is built or read.

A ``.pth`` file is a pickle, and unpickling runs whatever the file names. :func:`load_torch_file` reads one with
``torch.load(weights_only=True)``, which rebuilds tensors and plain containers only, plus the types a family names
(VSE infinity's checkpoints pickle their options as an ``argparse.Namespace``); a file that needs any other type is
refused, naming it, and nothing of it runs.

Example:
    >>> import tempfile, pathlib, torch
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.pth"
    >>> torch.save({"model": {"fc.weight": torch.zeros(1)}, "opt": pathlib.PurePosixPath("/data")}, path)
    >>> load_torch_file(path, "`model` 'vse:model.pth'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rococo_eval.models.checkpoints.CheckpointError: `model` 'vse:model.pth' needs pathlib.PurePosixPath to be read, ...

**Bounds.** A checkpoint declares its architecture: options and a config give layer counts and widths, a state
dict's shapes the rest, and a settings file, a vocabulary or an ids file beside it is read whole. Each is checked
against the released checkpoints' sizes with a wide margin (the constants below say where each comes from), so that
a forged or broken file is refused in one line naming the file and the field, in milliseconds, instead of building
gigabytes of layers or reading a sparse file into memory (:func:`bounded_int`, :func:`bounded_number`,
:func:`read_json_file`). :func:`check_state` checks that every tensor of a state dict is backed by storage of its
declared size (an expanded, stride-0 tensor declares a shape it does not hold), and :func:`build_strictly` builds a
model on the meta device first, to check that the state dict fills it, before allocating it.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from rococo_eval.io.scorefiles import check_size, parse_json

MODULE_PREFIX = "module."  # torch.nn.DataParallel's, in the state dicts of models saved while wrapped in it
_UNSAFE_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")

# Layers of one stack (a transformer's blocks, a ResNet stage's blocks): BERT-base and ViT-B/16 have 12, ViT-L/14
# (BLIP large) 24, ResNeXt-101's third stage 23; four times the largest.
MAX_LAYERS = 96
# The width of any layer (hidden size, MLP hidden size, feature and embedding size): BERT-base 768 (MLP 3072),
# ViT-L 1024 (MLP 4096), the ResNets' features 2048, VSE infinity's embed_size 1024 and PCME++'s embed_dim 512 to
# 1024; four times the widest.
MAX_WIDTH = 16384
# Any one dimension of a tensor, and a vocabulary's tokens: BERT's vocabulary has 30,522 tokens (BLIP's 30,524),
# CLIP's 49,408; over five times CLIP's.
MAX_DIMENSION = 1 << 18
# Positions of a text encoder: BERT's position embeddings 512, CLIP's context 77; eight times BERT's.
MAX_POSITIONS = 4096
# The square side of an image input: PCME++ 224, BLIP 384, VSE infinity's WSL grid 512 (256 x input_scale_factor 2);
# four times the largest. The smallest: one cell of a ResNet's grid (it downsamples 32 times).
MAX_IMAGE_SIZE = 2048
MIN_IMAGE_SIZE = 32
# The MLP's hidden width over the transformer's width: 4.0 in every released ViT and text transformer.
MAX_MLP_RATIO = 16.0
# Parameters of a whole model: BLIP's ViT-L retrieval model has 0.47 billion, VSE infinity's WSL grid model
# (ResNeXt-101 32x8d and BERT-base) 0.2 billion, PCME++ ViT-B/16 0.15 billion; four times the largest.
MAX_PARAMETERS = 2_000_000_000
# Files beside a checkpoint, read whole: a settings file or PCME++'s config.json holds a few hundred bytes, BERT's
# vocab.txt 226 kB, the region features' ids of RoCOCO's 5,000 images 33 kB (under 1 MB as image paths).
MAX_SETTINGS_BYTES = 1 << 20
MAX_VOCABULARY_BYTES = 16 << 20
MAX_REGION_IDS_BYTES = 16 << 20
# How deep a settings file nests ({"key": value}), and PCME++'s config.json ({"vision_cfg": {"image_size": [...]}})
MAX_SETTINGS_DEPTH = 1
MAX_CONFIG_DEPTH = 3
# A model folder's config: transformers' config.json (``hf:``) nests 3 deep (``text_config.id2label``), open_clip's
# open_clip_config.json (``open_clip:local-dir:``) 4 (``model_cfg.vision_cfg.image_size``); a bit more is allowed.
# A transformers folder's other settings files are read within MAX_SETTINGS_BYTES, its tokenizer's files within
# MAX_TOKENIZER_BYTES (XLM-R's tokenizer.json, among the largest, is 17 MB).
MAX_MODEL_CONFIG_DEPTH = 6
MAX_TOKENIZER_BYTES = 64 << 20
TRANSFORMERS_FILES = {"preprocessor_config.json": MAX_SETTINGS_BYTES,
                      "tokenizer_config.json": MAX_SETTINGS_BYTES, "special_tokens_map.json": MAX_SETTINGS_BYTES,
                      "tokenizer.json": MAX_TOKENIZER_BYTES, "vocab.json": MAX_TOKENIZER_BYTES,
                      "vocab.txt": MAX_TOKENIZER_BYTES, "merges.txt": MAX_TOKENIZER_BYTES,
                      "spiece.model": MAX_TOKENIZER_BYTES, "sentencepiece.bpe.model": MAX_TOKENIZER_BYTES}
# The fields of a transformers config (at any level: text_config, vision_config, ...) that size what it builds.
TRANSFORMERS_SIZES = {"num_hidden_layers": MAX_LAYERS, "hidden_size": MAX_WIDTH, "intermediate_size": MAX_WIDTH,
                      "projection_dim": MAX_WIDTH, "num_attention_heads": MAX_WIDTH, "vocab_size": MAX_DIMENSION,
                      "max_position_embeddings": MAX_POSITIONS, "image_size": MAX_IMAGE_SIZE,
                      "patch_size": MAX_IMAGE_SIZE}
# The architectures (in a transformers config's ``architectures``) of the BLIP and BLIP-2 image-text retrieval
# checkpoints, which are scored in two stages (rococo_eval.models.blip), not as dual encoders.
RERANKING_ARCHITECTURES = ("BlipForImageTextRetrieval", "Blip2ForImageTextRetrieval")
# The same for open_clip's model_cfg (vision_cfg, text_cfg); ``layers`` is a list for a ResNet's stages.
OPEN_CLIP_CONFIG = "open_clip_config.json"
OPEN_CLIP_SIZES = {"layers": MAX_LAYERS, "width": MAX_WIDTH, "heads": MAX_WIDTH, "head_width": MAX_WIDTH,
                   "embed_dim": MAX_WIDTH, "context_length": MAX_POSITIONS, "vocab_size": MAX_DIMENSION,
                   "image_size": MAX_IMAGE_SIZE, "patch_size": MAX_IMAGE_SIZE}


class CheckpointError(ValueError):
    """A file that is not an official checkpoint of its family, or a settings file beside it that is wrong."""


def load_torch_file(path, what: str, allowed: Iterable[type] = ()):
    """The content of torch file ``path``, unpickled with ``torch.load(weights_only=True)`` and ``allowed`` types.

    Args:
        path: the file.
        what: how errors name it: the argument and its value.
        allowed: types the file may hold beside tensors and plain containers (e.g. ``argparse.Namespace``), or
            ``(type, "module.name")`` pairs for a type pickled under another name.

    Raises:
        CheckpointError: no such file; a file that needs a type outside the allowlist (named); or one torch cannot
            read at all.
    """
    import torch

    path = Path(path).expanduser()
    if not path.is_file():
        raise CheckpointError(f"{what}: no such file")
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for what it cannot read
        unsafe = _UNSAFE_GLOBAL.search(str(error))
        if unsafe:
            raise CheckpointError(f"{what} needs {unsafe[1]} to be read, which is not on the allowlist of types it "
                                  f"may hold ({', '.join(_names(allowed)) or 'tensors and plain containers only'}): "
                                  "refused, nothing of it was run") from error
        reason = str(error).splitlines()[0] if str(error) else ""
        raise CheckpointError(f"{what}: torch.load(weights_only=True) cannot read it ({type(error).__name__}: "
                              f"{reason})") from error


def local_folder(name_or_path: str, what: str, expected: str) -> Optional[Path]:
    """The folder ``name_or_path`` names, or None for a Hub repository id (``ORG/NAME``), read from the name alone
    (a checkpoint given as a folder or a repository: ``--model pcmepp:...`` is checked before any work).

    Raises:
        CheckpointError: neither; ``what`` names the argument and its value, ``expected`` what it should name.

    Example:
        >>> local_folder("SanghyukChun/PCMEPP-ViT-B-16-CC3M-12M-RedCaps-256M", "m", ""), local_folder(".", "m", "")
        (None, PosixPath('.'))
        >>> local_folder("nowhere", "`model` 'pcmepp:nowhere'", "a PCME++ folder")
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'pcmepp:nowhere': no such folder, and not a Hub repository id (ORG/NAME): expected a PCME++ folder
    """
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        return folder
    if folder.exists() or name_or_path.count("/") != 1:
        raise CheckpointError(f"{what}: no such folder, and not a Hub repository id (ORG/NAME): expected {expected}")
    return None


def load_strictly(module, state: dict, what: str) -> None:
    """``module.load_state_dict(state, strict=True)``; keys that are missing or left over, or a shape that does not
    fit, are refused as :class:`CheckpointError` ``"{what}: missing [...], unexpected [...]"`` (five of each).

    Example:
        >>> import torch
        >>> load_strictly(torch.nn.Linear(2, 2), {"weight": torch.zeros(2, 2)}, "`model` 'm' does not fill a Linear")
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'm' does not fill a Linear: missing ['bias'], unexpected nothing
    """
    _check_keys(set(module.state_dict()), state, what)
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as error:  # a shape that the configuration and the other weights do not give
        raise CheckpointError(f"{what}: {str(error).splitlines()[-1].strip()}") from error


def strip_module_prefix(state: dict) -> dict:
    """``state`` without DataParallel's ``module.`` prefix: removed when every key has it, else kept as it is.

    Example:
        >>> strip_module_prefix({"module.fc.weight": 1, "module.fc.bias": 2})
        {'fc.weight': 1, 'fc.bias': 2}
        >>> strip_module_prefix({"fc.weight": 1})
        {'fc.weight': 1}
    """
    if state and all(key.startswith(MODULE_PREFIX) for key in state):
        return {key[len(MODULE_PREFIX):]: value for key, value in state.items()}
    return dict(state)


def read_sidecar(path, what: str, keys: Sequence[str], paths: Sequence[str] = ("tokenizer",),
                 folders: Sequence[str] = ()) -> dict:
    """The settings in ``PATH.json`` beside checkpoint ``PATH.pth`` (``{}`` when there is none), read within
    :data:`MAX_SETTINGS_BYTES` (:func:`read_json_file`). The values of ``paths`` must be strings: those that name
    existing files or folders relative to the JSON file are made relative to its folder (others, such as a Hub id, are
    kept); the values of ``folders`` are always relative to it, unless absolute. The other keys are counts (of
    attention heads): ints from 1 to :data:`MAX_WIDTH`.

    Raises:
        CheckpointError: the file is too large, or is not a JSON object of ``keys`` with values of those types.

    Example:
        >>> read_sidecar("no-such-folder/model_best.pth", "`model` 'vse:model_best.pth'", ["tokenizer"])
        {}
    """
    sidecar = Path(path).expanduser().with_suffix(".json")
    if not sidecar.is_file():
        return {}
    settings = read_json_file(sidecar, f"{what}: its settings file", MAX_SETTINGS_BYTES, MAX_SETTINGS_DEPTH)
    unknown = sorted(set(settings) - set(keys)) if isinstance(settings, dict) else None
    if unknown is None or unknown:
        raise CheckpointError(f"{what}: its settings file {str(sidecar)!r} must be a JSON object with any of "
                              f"{', '.join(keys)}; got {unknown or type(settings).__name__}")
    for key, value in settings.items():
        if key in paths or key in folders:
            if not isinstance(value, str):
                kind = "a folder's path" if key in folders else "a path or a Hub id"
                raise CheckpointError(f"{what}: its settings file {str(sidecar)!r}: {key} must be {kind}, got "
                                      f"{_shown(value)}")
        else:
            bounded_int(value, key, 1, MAX_WIDTH, f"{what}: its settings file {str(sidecar)!r}")
    for key in paths:
        value = settings.get(key)
        if value is not None and (sidecar.parent / value).exists():
            settings[key] = str(sidecar.parent / value)
    for key in folders:
        value = settings.get(key)
        if value is not None:
            settings[key] = str(sidecar.parent / Path(value).expanduser())
    return settings


def read_json_file(path, what: str, max_bytes: int, max_depth: int):
    """The JSON document in ``path``, read only when it has at most ``max_bytes`` bytes, and parsed only when it nests
    at most ``max_depth`` deep (the upload path's bounded parser,
    :func:`rococo_eval.io.scorefiles.parse_json`).

    Raises:
        CheckpointError: ``"{what} 'PATH': ..."``: too large, too deep, not UTF-8 JSON, or unreadable.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "config.json"
        >>> _ = path.write_text('{"a": [[1]]}')
        >>> read_json_file(path, "`model` 'pcmepp:m': its config", 1024, 3)
        {'a': [[1]]}
        >>> read_json_file(path, "`model` 'pcmepp:m': its config", 1024, 2)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'pcmepp:m': its config '...config.json': the config JSON nests 3 deep, deeper than its 2
    """
    path = Path(path)
    try:
        check_size(path, max_bytes)
        return parse_json(path.read_bytes(), path.stem, max_depth)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{what} {str(path)!r}: {error}") from error


def read_text_file(path, what: str, max_bytes: int) -> str:
    """The UTF-8 text of ``path``, read only when it has at most ``max_bytes`` bytes.

    Raises:
        CheckpointError: ``"{what} 'PATH': ..."``: too large, not UTF-8, or unreadable.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "vocab.txt"
        >>> _ = path.write_text("[PAD]\\n" * 100)
        >>> read_text_file(path, "`model` 'vse:m': its vocabulary", 64)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'vse:m': its vocabulary '...vocab.txt': vocab.txt: the file is 600 bytes, over the limit of 64 bytes
    """
    path = Path(path)
    try:
        check_size(path, max_bytes)
        return path.read_text(encoding="utf-8")
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{what} {str(path)!r}: {error}") from error


def bounded_int(value, field: str, low: int, high: int, what: str) -> int:
    """``value`` as an int, if it is one (not a bool) from ``low`` to ``high``; ``field`` and ``what`` name it.

    Raises:
        CheckpointError: ``"{what}: {field} = {value} is out of bounds: an int from {low} to {high}"``.

    Example:
        >>> bounded_int(12, "vision_cfg.layers", 1, MAX_LAYERS, "`model` 'pcmepp:m'")
        12
        >>> bounded_int(100_000, "vision_cfg.layers", 1, MAX_LAYERS, "`model` 'pcmepp:m'")
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'pcmepp:m': vision_cfg.layers = 100000 is out of bounds: an int from 1 to 96
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and low <= value <= high:
        return int(value)
    raise CheckpointError(f"{what}: {field} = {_shown(value)} is out of bounds: an int from {low} to {high}")


def bounded_number(value, field: str, low: float, high: float, what: str) -> float:
    """``value`` as a float, if it is a finite number (not a bool) above ``low`` and at most ``high``.

    Example:
        >>> bounded_number(0, "opt.input_scale_factor", 0, 8, "m")
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: m: opt.input_scale_factor = 0 is out of bounds: a number above 0 and at most 8
    """
    if (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            and low < value <= high):
        return float(value)
    raise CheckpointError(f"{what}: {field} = {_shown(value)} is out of bounds: a number above {low} and at most "
                          f"{high}")


def attention_heads(heads, width: int, part: str, setting: str, what: str) -> int:
    """``heads`` as the number of attention heads of ``part``'s layers, ``width`` wide: an int from 1 to ``width`` that
    splits it (``transformers`` divides by it). ``setting`` names where it comes from, ``what`` the checkpoint.

    Raises:
        CheckpointError: ``heads`` out of bounds (0 for a width under the default head width), or not a divisor.

    Example:
        >>> attention_heads(12, 768, "its BERT", "text_num_attention_heads", "m")
        12
        >>> attention_heads(5, 768, "its BERT", "text_num_attention_heads", "m")
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: m: its BERT's width 768 does not split into 5 attention heads (text_num_attention_heads)
    """
    heads = bounded_int(heads, f"{part}'s attention heads ({setting})", 1, width, what)
    if width % heads:
        raise CheckpointError(f"{what}: {part}'s width {width} does not split into {heads} attention heads ({setting})")
    return heads


@dataclass(frozen=True)
class TransformersFolder:
    """What :func:`check_transformers_folder` read of a ``transformers`` model folder.

    Attributes:
        architectures: the model classes its ``config.json`` names (none when it has no config, or names none).
        reranking: whether one of them is a BLIP or BLIP-2 retrieval checkpoint's (:data:`RERANKING_ARCHITECTURES`),
            scored in two stages rather than as a dual encoder.
    """

    architectures: tuple[str, ...]
    reranking: bool


def check_transformers_folder(folder, what: str) -> TransformersFolder:
    """Check a ``transformers`` model folder before ``from_pretrained`` reads it: its other settings and tokenizer
    files (:data:`TRANSFORMERS_FILES`) within their sizes, and its ``config.json`` within :data:`MAX_SETTINGS_BYTES` and
    :data:`MAX_MODEL_CONFIG_DEPTH`, with every size field (:data:`TRANSFORMERS_SIZES`) an int within its
    bound, attention heads that split their width and patches no larger than the image; and say what the config
    names (the folder is read once, for both).

    Raises:
        CheckpointError: naming the file and the field.

    Example:
        >>> import json, tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "config.json").write_text(json.dumps({"architectures": ["BlipForImageTextRetrieval"]}))
        >>> check_transformers_folder(folder, "`model` 'hf:m'")
        TransformersFolder(architectures=('BlipForImageTextRetrieval',), reranking=True)
        >>> _ = (folder / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 10**6}}))
        >>> check_transformers_folder(folder, "`model` 'hf:m'")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'hf:m': its config '...config.json': text_config.num_hidden_layers = 1000000 is out of bounds: an int from 1 to 96
    """
    folder = Path(folder)
    for name, limit in TRANSFORMERS_FILES.items():
        path = folder / name
        if path.exists():
            try:
                check_size(path, limit)
            except (OSError, ValueError) as error:
                raise CheckpointError(f"{what}: its file {str(path)!r}: {error}") from error
    config = _check_model_config(folder / "config.json", TRANSFORMERS_SIZES, what)
    named = config.get("architectures") if isinstance(config, dict) else None
    architectures = tuple(name for name in named if isinstance(name, str)) if isinstance(named, list) else ()
    return TransformersFolder(architectures, any(name in RERANKING_ARCHITECTURES for name in architectures))


def check_open_clip_folder(folder, what: str) -> None:
    """Check an open_clip ``local-dir:`` folder before open_clip reads it: its :data:`OPEN_CLIP_CONFIG` within
    :data:`MAX_SETTINGS_BYTES` and :data:`MAX_MODEL_CONFIG_DEPTH`, every size field (:data:`OPEN_CLIP_SIZES`) an int
    within its bound, ``mlp_ratio`` at most :data:`MAX_MLP_RATIO`, attention heads that split their width and patches
    no larger than the image.

    Raises:
        CheckpointError: naming the file and the field.

    Example:
        >>> import json, tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> config = {"model_cfg": {"vision_cfg": {"width": 32, "head_width": 64}}}
        >>> _ = (folder / OPEN_CLIP_CONFIG).write_text(json.dumps(config))
        >>> check_open_clip_folder(folder, "`model` 'open_clip:local-dir:m'")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'open_clip:local-dir:m': its config '...open_clip_config.json': model_cfg.vision_cfg.head_width = 64 is out of bounds: an int from 1 to 32
    """
    _check_model_config(Path(folder) / OPEN_CLIP_CONFIG, OPEN_CLIP_SIZES, what)


def _check_model_config(path: Path, sizes: dict, what: str):
    """The model config ``path``, when there is one (else None), read within bounds and its ``sizes`` checked."""
    if not path.is_file():
        return None
    config = read_json_file(path, f"{what}: its config", MAX_SETTINGS_BYTES, MAX_MODEL_CONFIG_DEPTH)
    _check_sizes(config, sizes, "", f"{what}: its config {str(path)!r}")
    return config


def _check_sizes(config, sizes: dict, prefix: str, what: str) -> None:
    """The size fields (``sizes``: field, bound) of ``config`` (an object of a config file at ``prefix``) and of the
    objects in it; attention heads (given, or by their width) that split their layer's width; patches that fit."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{what}: {prefix or 'the file'} must be a JSON object, got {_shown(config)}")
    for key, value in config.items():
        if isinstance(value, dict):
            _check_sizes(value, sizes, f"{prefix}{key}.", what)
        elif key == "mlp_ratio" and value is not None:
            bounded_number(value, f"{prefix}{key}", 0, MAX_MLP_RATIO, what)
        elif key in sizes and value is not None:
            for size in value if isinstance(value, list) else [value]:
                bounded_int(size, f"{prefix}{key}", 1, sizes[key], what)
    part = prefix.rstrip(".") or "the model"
    for width_key, heads_key in (("hidden_size", "num_attention_heads"), ("width", "heads")):
        width, heads = config.get(width_key), config.get(heads_key)
        if isinstance(width, int) and isinstance(heads, int):
            attention_heads(heads, width, part, f"{prefix}{heads_key}", what)
    width, head_width = config.get("width"), config.get("head_width")
    if isinstance(width, int) and isinstance(head_width, int):  # open_clip's ViT: width // head_width heads
        bounded_int(head_width, f"{prefix}head_width", 1, width, what)
        attention_heads(width // head_width, width, part, f"{prefix}width // {prefix}head_width", what)
    image, patch = config.get("image_size"), config.get("patch_size")
    if image is not None and isinstance(patch, int):
        bounded_int(patch, f"{prefix}patch_size", 1, min(image if isinstance(image, list) else [image]), what)


def check_state(state: dict, what: str) -> None:
    """Check a state dict's tensors before a model is built for them: each is a tensor whose dimensions are at most
    :data:`MAX_DIMENSION` and whose storage holds its declared shape, and all of them together hold at most
    :data:`MAX_PARAMETERS` values.

    Raises:
        CheckpointError: naming the first tensor out of bounds, or the total.

    Example:
        >>> import torch
        >>> check_state({"word_embeddings.weight": torch.zeros(1).expand(30522, 768)}, "m")
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: m: word_embeddings.weight declares shape (30522, 768) but its storage holds 4 bytes, not the 93763584 that shape needs
    """
    import torch

    total = 0
    for key, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{what}: {key} is a {type(tensor).__name__}, not a tensor")
        shape = tuple(tensor.shape)
        if any(size > MAX_DIMENSION for size in shape):
            raise CheckpointError(f"{what}: {key} declares shape {shape}, over the bound of {MAX_DIMENSION} per "
                                  "dimension")
        needed = tensor.numel() * tensor.element_size()
        held = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
        if held < needed:
            raise CheckpointError(f"{what}: {key} declares shape {shape} but its storage holds {max(held, 0)} bytes, "
                                  f"not the {needed} that shape needs")
        total += tensor.numel()
    if total > MAX_PARAMETERS:
        raise CheckpointError(f"{what}: its tensors declare {total} values, over the bound of {MAX_PARAMETERS}")


def build_strictly(build: Callable[[], tuple], states: Sequence[dict], whats: Sequence[str]) -> tuple:
    """The modules ``build()`` returns, with ``states`` loaded into them strictly, each checked before it is allocated:
    the states by :func:`check_state`, then ``build()`` runs on the meta device (nothing allocated) and each module's
    keys and shapes must be its state's, then it runs for real. ``whats`` name the modules in errors.

    Raises:
        CheckpointError: a state out of bounds, or one that does not fill its module (``"{what}: missing [...],
            unexpected [...]"``, or the first key whose shape differs).

    Example:
        >>> import torch
        >>> build_strictly(lambda: (torch.nn.Linear(2, 3),), [{"weight": torch.zeros(3, 2), "bias": torch.zeros(2)}],
        ...                ["`model` 'm': its weights"])
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'm': its weights: bias has shape (2,), the model's is (3,)
    """
    import torch

    for state, what in zip(states, whats):
        check_state(state, what)
    with torch.device("meta"):
        skeletons = build()
    for skeleton, state, what in zip(skeletons, states, whats):
        expected = skeleton.state_dict()
        _check_keys(set(expected), state, what)
        for key, tensor in expected.items():
            if tuple(tensor.shape) != tuple(state[key].shape):
                raise CheckpointError(f"{what}: {key} has shape {tuple(state[key].shape)}, the model's is "
                                      f"{tuple(tensor.shape)}")
    del skeletons
    modules = build()
    for module, state, what in zip(modules, states, whats):
        load_strictly(module, state, what)
    return modules


def _check_keys(expected: set, state: dict, what: str) -> None:
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise CheckpointError(f"{what}: missing {missing[:5] or 'nothing'}, unexpected {unexpected[:5] or 'nothing'}")


def _shown(value) -> str:
    """A value as an error message shows it: its repr, cut at 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _names(types: Iterable) -> list[str]:
    """The names of allowed types: a type's module and name, or the name given beside it as ``(type, name)``."""
    return [kind[1] if isinstance(kind, tuple) else f"{kind.__module__}.{kind.__qualname__}" for kind in types]
