"""BLIP's own retrieval checkpoints (salesforce/BLIP's ``.pth`` files, which RoCOCO's scripts load) in ``transformers``.

``--model blip:PATH.pth`` scores such a checkpoint (``model_base_retrieval_coco.pth``,
``model_large_retrieval_coco.pth``) directly: its state dict is converted to ``transformers``'
``BlipForImageTextRetrieval`` in memory and scored as every BLIP checkpoint is
(:class:`rococo_eval.models.blip.BlipReranker`). ``python -m rococo_eval.models.blip_official PATH.pth OUT_DIR`` writes
the same conversion as a ``transformers`` folder (model, tokenizer, image processor) for ``--model hf:OUT_DIR``.

The checkpoint is ``torch.save({"model": state_dict})`` of the official ``BLIP_Retrieval``. Its keys map to
``BlipForImageTextRetrieval``'s as follows; the momentum encoders (``*_m.*``), the queues (``image_queue``,
``text_queue``, ``idx_queue``, ``ptr_queue``), ``temp`` and the text encoder's ``position_ids`` buffer are training
state or rebuilt by ``transformers``, and are left out:

| official (`blip/models/vit.py`, `med.py`) | `transformers` |
|---|---|
| `visual_encoder.cls_token` | `vision_model.embeddings.class_embedding` |
| `visual_encoder.pos_embed` | `vision_model.embeddings.position_embedding` |
| `visual_encoder.patch_embed.proj.*` | `vision_model.embeddings.patch_embedding.*` |
| `visual_encoder.blocks.N.norm1.*`, `norm2.*` | `vision_model.encoder.layers.N.layer_norm1.*`, `layer_norm2.*` |
| `visual_encoder.blocks.N.attn.qkv.*` | `vision_model.encoder.layers.N.self_attn.qkv.*` |
| `visual_encoder.blocks.N.attn.proj.*` | `vision_model.encoder.layers.N.self_attn.projection.*` |
| `visual_encoder.blocks.N.mlp.fc1.*`, `mlp.fc2.*` | `vision_model.encoder.layers.N.mlp.fc1.*`, `mlp.fc2.*` |
| `visual_encoder.norm.*` | `vision_model.post_layernorm.*` |
| `text_encoder.*` | `text_encoder.*` (the same names) |
| `vision_proj.*`, `text_proj.*`, `itm_head.*` | the same names |

**The configuration** is read from the weights' shapes: widths, depths, MLP sizes, the patch size and the image
size (from the number of position embeddings), the vocabulary, the text positions and the cross-attention width.
What shapes do not tell is BLIP's: LayerNorm eps 1e-6 in the ViT (``vit.py``) and 1e-12 in the text encoder
(``med_config.json``), GELU, and the number of attention heads, which is the width over 64 (12 for BLIP base's 768,
16 for BLIP large's 1024-wide ViT) unless a JSON file beside the checkpoint (``PATH.json`` for ``PATH.pth``) says
otherwise. That file may hold:

- ``vision_num_attention_heads``, ``text_num_attention_heads``: the heads, where they are not the width over 64;
- ``tokenizer``: the BERT vocabulary: a ``vocab.txt`` file, a tokenizer folder, or a Hub id (relative paths are
  relative to the JSON file). The default is ``bert-base-uncased``, as BLIP's ``init_tokenizer`` loads it (from the
  Hub, or the Hugging Face cache offline).

**The tokenizer** is ``BertTokenizer`` with BLIP's two tokens added as ``init_tokenizer`` adds them: ``[DEC]`` as the
bos token, then ``[ENC]`` (the last two ids, which the checkpoint's 30,524-row word embeddings hold).
**The image processor** is the official test transform: 384 x 384 (the checkpoint's image size) bicubic, values
divided by 255, BLIP's (CLIP's) mean and std.

Example:
    >>> official_to_transformers_key("visual_encoder.blocks.3.attn.proj.weight")
    'vision_model.encoder.layers.3.self_attn.projection.weight'
    >>> official_to_transformers_key("text_encoder.encoder.layer.0.crossattention.self.key.bias")
    'text_encoder.encoder.layer.0.crossattention.self.key.bias'
    >>> official_to_transformers_key("visual_encoder_m.norm.weight") is None  # a momentum encoder: training state
    True
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from rococo_eval.io.scorefiles import check_size
from rococo_eval.models.checkpoints import (
    MAX_IMAGE_SIZE,
    MAX_LAYERS,
    MAX_VOCABULARY_BYTES,
    CheckpointError,
    attention_heads,
    bounded_int,
    build_strictly,
    load_torch_file,
)
from rococo_eval.models.checkpoints import read_sidecar as read_settings_file

logger = logging.getLogger(__name__)

BLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # blip/data/__init__.py's Normalize (CLIP's mean and std)
BLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HEAD_WIDTH = 64  # BLIP base and large: 768 / 12, 1024 / 16 (ViT), 768 / 12 (BERT)
VISION_LAYER_NORM_EPS = 1e-6  # blip/models/vit.py: partial(nn.LayerNorm, eps=1e-6)
TEXT_LAYER_NORM_EPS = 1e-12  # blip/configs/med_config.json
DEFAULT_TOKENIZER = "bert-base-uncased"  # blip/models/blip.py init_tokenizer
SIDECAR_KEYS = ("vision_num_attention_heads", "text_num_attention_heads", "tokenizer")
_IGNORED = re.compile(r"(visual_encoder_m|vision_proj_m|text_encoder_m|text_proj_m)\..*"
                      r"|image_queue|text_queue|idx_queue|ptr_queue|temp|text_encoder\.embeddings\.position_ids")
_LAYER = r"visual_encoder\.blocks\.(\d+)\."
_VISION_RENAMES = tuple((re.compile(pattern), replacement) for pattern, replacement in (
    (r"visual_encoder\.cls_token", "vision_model.embeddings.class_embedding"),
    (r"visual_encoder\.pos_embed", "vision_model.embeddings.position_embedding"),
    (r"visual_encoder\.patch_embed\.proj\.(weight|bias)", r"vision_model.embeddings.patch_embedding.\1"),
    (_LAYER + r"norm([12])\.(weight|bias)", r"vision_model.encoder.layers.\1.layer_norm\2.\3"),
    (_LAYER + r"attn\.qkv\.(weight|bias)", r"vision_model.encoder.layers.\1.self_attn.qkv.\2"),
    (_LAYER + r"attn\.proj\.(weight|bias)", r"vision_model.encoder.layers.\1.self_attn.projection.\2"),
    (_LAYER + r"mlp\.(fc[12])\.(weight|bias)", r"vision_model.encoder.layers.\1.mlp.\2.\3"),
    (r"visual_encoder\.norm\.(weight|bias)", r"vision_model.post_layernorm.\1"),
))
_REQUIRED = ("visual_encoder.cls_token", "visual_encoder.pos_embed", "visual_encoder.patch_embed.proj.weight",
             "text_encoder.embeddings.word_embeddings.weight", "vision_proj.weight", "text_proj.weight",
             "itm_head.weight")


def official_to_transformers_key(key: str) -> str | None:
    """The ``BlipForImageTextRetrieval`` name of an official ``BLIP_Retrieval`` state-dict key; None for the keys
    left out (training state); the key itself for one it does not know (which then fails the loading, named).

    Example:
        >>> official_to_transformers_key("visual_encoder.pos_embed")
        'vision_model.embeddings.position_embedding'
        >>> official_to_transformers_key("itm_head.bias")
        'itm_head.bias'
    """
    if _IGNORED.fullmatch(key):
        return None
    for pattern, replacement in _VISION_RENAMES:
        if pattern.fullmatch(key):
            return pattern.sub(replacement, key)
    return key


def read_checkpoint(path, what: str | None = None) -> dict:
    """The state dict of an official BLIP retrieval checkpoint (``torch.load(..., weights_only=True)["model"]``).

    Args:
        path: the ``.pth`` file.
        what: how error messages name it: the argument and its value (default ``checkpoint 'PATH'``).

    Raises:
        CheckpointError: the file is missing, is not a torch file, or holds no BLIP retrieval model.

    Example:
        >>> import tempfile, torch
        >>> path = Path(tempfile.mkdtemp()) / "classifier.pth"
        >>> torch.save({"model": {"fc.weight": torch.zeros(2, 2)}}, path)
        >>> read_checkpoint(path, "`model` 'blip:classifier.pth'")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `model` 'blip:classifier.pth' is not a BLIP retrieval ...
    """
    path = Path(path).expanduser()
    what = what or f"`checkpoint` {str(path)!r}"
    if not path.is_file():
        raise CheckpointError(f"{what}: no such file (expected a BLIP retrieval checkpoint such as "
                              "model_base_retrieval_coco.pth)")
    checkpoint = load_torch_file(path, f"{what} is not a BLIP retrieval checkpoint")
    state = checkpoint.get("model") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        held = f"keys {list(checkpoint)[:5]}" if isinstance(checkpoint, dict) else f"a {type(checkpoint).__name__}"
        raise CheckpointError(f"{what} is not a BLIP retrieval checkpoint: BLIP saves {{'model': state_dict}}, this "
                              f"file holds {held}")
    missing = [key for key in _REQUIRED if key not in state]
    if missing:
        raise CheckpointError(f"{what} is not a BLIP retrieval checkpoint: its state dict lacks {', '.join(missing)} "
                              "(BLIP_Retrieval has visual_encoder.*, text_encoder.*, vision_proj, text_proj and "
                              "itm_head)")
    return state


def read_sidecar(path, what: str | None = None) -> dict:
    """The settings in ``PATH.json`` beside checkpoint ``PATH.pth`` (``{}`` when there is none); a ``tokenizer``
    path is made relative to the JSON file's folder.

    Raises:
        CheckpointError: the file is not a JSON object of :data:`SIDECAR_KEYS`.

    Example:
        >>> read_sidecar("no-such-folder/model_base_retrieval_coco.pth")
        {}
    """
    return read_settings_file(path, what or f"`checkpoint` {str(path)!r}", SIDECAR_KEYS)


def blip_config(state: dict, settings: dict | None = None, bos_token_id=None, pad_token_id=0, sep_token_id=None,
                what: str = "the checkpoint"):
    """The ``transformers`` ``BlipConfig`` of an official state dict, read from its shapes (module docstring); the
    numbers of layers are bounded by :data:`~rococo_eval.models.checkpoints.MAX_LAYERS`, and ``what`` names the
    checkpoint in errors.

    Example:
        >>> import torch
        >>> state = {"visual_encoder.cls_token": torch.zeros(1, 1, 768),
        ...          "visual_encoder.pos_embed": torch.zeros(1, 577, 768),
        ...          "visual_encoder.patch_embed.proj.weight": torch.zeros(768, 3, 16, 16),
        ...          "visual_encoder.blocks.0.mlp.fc1.weight": torch.zeros(3072, 768),
        ...          "text_encoder.embeddings.word_embeddings.weight": torch.zeros(30524, 768),
        ...          "text_encoder.embeddings.position_embeddings.weight": torch.zeros(512, 768),
        ...          "text_encoder.encoder.layer.0.intermediate.dense.weight": torch.zeros(3072, 768),
        ...          "text_encoder.encoder.layer.0.crossattention.self.key.weight": torch.zeros(768, 768),
        ...          "vision_proj.weight": torch.zeros(256, 768)}
        >>> config = blip_config(state)
        >>> config.vision_config.image_size, config.vision_config.num_attention_heads, config.image_text_hidden_size
        (384, 12, 256)
    """
    import transformers

    settings = settings or {}
    width = state["visual_encoder.cls_token"].shape[-1]
    patch = bounded_int(state["visual_encoder.patch_embed.proj.weight"].shape[-1],
                        "its ViT's patch size (visual_encoder.patch_embed.proj.weight)", 1, MAX_IMAGE_SIZE, what)
    positions = state["visual_encoder.pos_embed"].shape[1] - 1
    grid = round(positions ** 0.5)
    if grid < 1 or grid * grid != positions:
        raise CheckpointError(f"{what}: its ViT has {positions} patch positions, not a square grid")
    vocab_size, text_width = state["text_encoder.embeddings.word_embeddings.weight"].shape
    vision = dict(hidden_size=width, intermediate_size=state["visual_encoder.blocks.0.mlp.fc1.weight"].shape[0],
                  num_hidden_layers=_count(state, "visual_encoder.blocks", what),
                  num_attention_heads=attention_heads(settings.get("vision_num_attention_heads", width // HEAD_WIDTH),
                                                      width, "its ViT", "vision_num_attention_heads", what),
                  image_size=grid * patch, patch_size=patch, hidden_act="gelu", layer_norm_eps=VISION_LAYER_NORM_EPS)
    text = dict(vocab_size=vocab_size, hidden_size=text_width,
                encoder_hidden_size=state["text_encoder.encoder.layer.0.crossattention.self.key.weight"].shape[1],
                intermediate_size=state["text_encoder.encoder.layer.0.intermediate.dense.weight"].shape[0],
                num_hidden_layers=_count(state, "text_encoder.encoder.layer", what),
                num_attention_heads=attention_heads(settings.get("text_num_attention_heads", text_width // HEAD_WIDTH),
                                                    text_width, "its BERT", "text_num_attention_heads", what),
                max_position_embeddings=state["text_encoder.embeddings.position_embeddings.weight"].shape[0],
                hidden_act="gelu", layer_norm_eps=TEXT_LAYER_NORM_EPS, pad_token_id=pad_token_id)
    text.update({name: value for name, value in (("bos_token_id", bos_token_id), ("sep_token_id", sep_token_id))
                 if value is not None})
    config = transformers.BlipConfig(text_config=text, vision_config=vision,
                                     image_text_hidden_size=state["vision_proj.weight"].shape[0])
    config.architectures = ["BlipForImageTextRetrieval"]
    return config


def blip_tokenizer(name_or_path: str = DEFAULT_TOKENIZER):
    r"""BLIP's tokenizer: ``BertTokenizer`` with ``[DEC]`` (bos), then ``[ENC]`` added, as ``init_tokenizer`` does.

    Args:
        name_or_path: a BERT ``vocab.txt``, a tokenizer folder, or a Hub id.

    Raises:
        ValueError: a ``vocab.txt`` over :data:`~rococo_eval.models.checkpoints.MAX_VOCABULARY_BYTES` (or one
            ``transformers`` cannot read).

    Example:
        >>> import tempfile
        >>> vocab = Path(tempfile.mkdtemp()) / "vocab.txt"
        >>> _ = vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\ndog\n")
        >>> tokenizer = blip_tokenizer(str(vocab))
        >>> tokenizer.convert_tokens_to_ids(["[DEC]", "[ENC]"]), tokenizer.bos_token, len(tokenizer)
        ([7, 8], '[DEC]', 9)
    """
    import transformers

    path = Path(name_or_path).expanduser()
    vocabulary = path / "vocab.txt" if path.is_dir() else path
    if vocabulary.is_file():
        check_size(vocabulary, MAX_VOCABULARY_BYTES)
    if path.is_file():
        tokenizer = transformers.BertTokenizer(str(path))
    else:
        tokenizer = transformers.BertTokenizer.from_pretrained(name_or_path)
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    tokenizer.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    return tokenizer


def blip_image_processor(image_size: int):
    """The official test transform as a ``transformers`` image processor: ``image_size`` square, bicubic, /255,
    BLIP's mean and std, images converted to RGB."""
    import transformers

    processor_class = getattr(transformers, "BlipImageProcessorPil", None) or transformers.BlipImageProcessor
    return processor_class(size={"height": image_size, "width": image_size}, resample=3, do_rescale=True,
                           rescale_factor=1 / 255, do_normalize=True, image_mean=list(BLIP_MEAN),
                           image_std=list(BLIP_STD), do_convert_rgb=True)


def convert_checkpoint(path, what: str | None = None):
    """An official BLIP retrieval checkpoint as ``(BlipForImageTextRetrieval, tokenizer, image processor)``.

    Args:
        path: the ``.pth`` file; ``PATH.json`` beside it may hold settings (module docstring).
        what: how error messages name it: the argument and its value (default ``checkpoint 'PATH'``).

    Raises:
        CheckpointError: ``path`` is not such a checkpoint, its settings are wrong, its tokenizer cannot be loaded or
            does not fit, or its weights do not fill the model (the message names the keys).
    """
    import transformers

    what = what or f"`checkpoint` {str(path)!r}"
    state = read_checkpoint(path, what)
    settings = read_sidecar(path, what)
    tokenizer_name = settings.get("tokenizer", DEFAULT_TOKENIZER)
    try:
        tokenizer = blip_tokenizer(tokenizer_name)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{what}: cannot load the tokenizer {tokenizer_name!r} ({error}); name a BERT vocab.txt "
                              f"as \"tokenizer\" in {str(Path(path).with_suffix('.json'))!r}") from error
    vocab_size = state["text_encoder.embeddings.word_embeddings.weight"].shape[0]
    if len(tokenizer) != vocab_size:
        raise CheckpointError(f"{what}: the tokenizer {tokenizer_name!r} with [DEC] and [ENC] has {len(tokenizer)} "
                              f"tokens, the checkpoint's text embeddings {vocab_size}")
    config = blip_config(state, settings, bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
                         sep_token_id=tokenizer.sep_token_id, what=what)
    converted = {}
    for key, value in state.items():
        name = official_to_transformers_key(key)
        if name is not None:
            converted[name] = value
    model, = build_strictly(lambda: (transformers.BlipForImageTextRetrieval(config),), [converted],
                            [f"{what} does not fill a BlipForImageTextRetrieval"])
    return model.eval(), tokenizer, blip_image_processor(config.vision_config.image_size)


def load_official_checkpoint(name: str, path: str, base):
    """``--model blip:PATH.pth``: the converted checkpoint as a :class:`~rococo_eval.models.blip.BlipReranker`.

    Args:
        name: the model name as given (``"blip:model_base_retrieval_coco.pth"``).
        path: the checkpoint file.
        base: the device, dtype and fingerprint helper of :mod:`rococo_eval.models.adapters`.

    Raises:
        CheckpointError: as :func:`convert_checkpoint`, naming ``model`` and ``name``.
    """
    from rococo_eval.models.blip import BlipReranker

    model, tokenizer, processor = convert_checkpoint(path, f"`model` {name!r}")
    return BlipReranker(name, base, model, tokenizer, processor)


def save_converted(path, out_dir) -> Path:
    """Write the conversion of checkpoint ``path`` as a ``transformers`` folder ``out_dir`` for ``--model hf:OUT_DIR``.

    Example:
        >>> save_converted("no-such.pth", "out")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rococo_eval.models.checkpoints.CheckpointError: `checkpoint` 'no-such.pth': no such file (expected a ...
    """
    model, tokenizer, processor = convert_checkpoint(path)
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    processor.save_pretrained(out)
    logger.info("converted %s to %s (use --model hf:%s)", path, out, out)
    return out


def _count(state: dict, prefix: str, what: str) -> int:
    """The number of layers ``prefix.N.*`` of ``state``, from 1 to :data:`~rococo_eval.models.checkpoints.MAX_LAYERS`."""
    pattern = re.compile(re.escape(prefix) + r"\.(\d{1,9})\.")
    last = max((int(match[1]) for match in map(pattern.match, state) if match), default=-1)
    return bounded_int(last + 1, f"its layers ({prefix}.{last}.*)", 1, MAX_LAYERS, what)


def main(argv=None) -> int:
    """``python -m rococo_eval.models.blip_official CHECKPOINT.pth OUT_DIR``: convert; 0 done, 1 an error."""
    parser = argparse.ArgumentParser(prog="python -m rococo_eval.models.blip_official",
                                     description="Convert an official BLIP retrieval checkpoint (.pth) to a "
                                                 "transformers folder, for rococo-eval run --model hf:OUT_DIR.")
    parser.add_argument("checkpoint", help="the .pth file (PATH.json beside it may name heads and tokenizer)")
    parser.add_argument("out_dir", help="the folder to write")
    args = parser.parse_args(argv)
    logging.basicConfig(format="rococo-eval: %(message)s", level=logging.INFO)
    try:
        save_converted(args.checkpoint, args.out_dir)
    except (CheckpointError, ImportError, OSError) as error:
        logger.error("error: %s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
