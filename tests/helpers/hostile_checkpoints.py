"""Hostile checkpoints and side files, generated in a test's folder (issue 40): each is a tiny file that declares a
huge or impossible architecture, or a settings file, config or vocabulary that is a 2 GiB hole. Each generator
returns the model name (or path) to load; none writes more than a tiny checkpoint's bytes."""

import argparse
import json

from helpers.sparse_files import sparse_file
from helpers.tiny_models import (
    TINY_OPEN_CLIP_CONFIG,
    TINY_PCMEPP,
    make_tiny_hf_clip,
    make_tiny_pcmepp,
    save_vse_checkpoint,
)


def vse_with_text_weights(folder, states, **weights) -> str:
    """A VSE infinity checkpoint whose text encoder's state has ``weights`` (key: tensor) added or replaced."""
    opt, image_state, text_state = states
    return save_vse_checkpoint(folder / "model_best.pth", opt, image_state, {**text_state, **weights})


def vse_with_options(folder, states, **options) -> str:
    """A VSE infinity checkpoint whose ``opt`` has ``options`` changed."""
    opt, image_state, text_state = states
    return save_vse_checkpoint(folder / "model_best.pth", argparse.Namespace(**{**vars(opt), **options}), image_state,
                               text_state)


def vse_with_settings(folder, states, settings: dict) -> str:
    """A VSE infinity checkpoint whose settings file beside it holds ``settings`` over the usual ones."""
    opt, image_state, text_state = states
    return save_vse_checkpoint(folder / "model_best.pth", opt, image_state, text_state, settings)


def vse_with_settings_text(folder, states, text: str) -> str:
    """A VSE infinity checkpoint whose settings file beside it is ``text``."""
    name = vse_with_settings(folder, states, {})
    (folder / "model_best.json").write_text(text)
    return name


def vse_with_sparse_settings(folder, states) -> str:
    """A VSE infinity checkpoint whose settings file is a 2 GiB hole."""
    name = vse_with_settings(folder, states, {})
    sparse_file(folder / "model_best.json")
    return name


def vse_with_sparse_vocabulary(folder, states) -> str:
    """A VSE infinity checkpoint whose vocabulary (``tokenizer`` in its settings) is a 2 GiB hole."""
    folder.mkdir(parents=True, exist_ok=True)
    return vse_with_settings(folder, states, {"tokenizer": str(sparse_file(folder / "vocab.txt"))})


def pcmepp_with_config(folder, vision=None, text=None, **top) -> str:
    """A tiny PCME++ checkpoint whose ``config.json`` has ``vision`` and ``text`` fields and ``top`` fields changed
    (its weights are the tiny config's)."""
    name = make_tiny_pcmepp(folder)
    config = {**TINY_PCMEPP, "vision_cfg": {**TINY_PCMEPP["vision_cfg"], **(vision or {})},
              "text_cfg": {**TINY_PCMEPP["text_cfg"], **(text or {})}, **top}
    (folder / "config.json").write_text(json.dumps(config))
    return name


def pcmepp_with_config_text(folder, text: str) -> str:
    """A tiny PCME++ checkpoint whose ``config.json`` is ``text``."""
    name = make_tiny_pcmepp(folder)
    (folder / "config.json").write_text(text)
    return name


def pcmepp_with_sparse_config(folder) -> str:
    """A tiny PCME++ checkpoint whose ``config.json`` is a 2 GiB hole."""
    name = make_tiny_pcmepp(folder)
    sparse_file(folder / "config.json")
    return name


def region_features_with_sparse_ids(folder, image_files, dimension: int) -> str:
    """A region features folder whose ``original`` set has the right array and a 2 GiB hole for its ids file."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "original_ims.npy", np.zeros((len(image_files), 2, dimension), dtype=np.float32))
    sparse_file(folder / "original_ids.txt")
    return str(folder)


def nested_json(depth: int) -> str:
    """A JSON object nesting ``depth`` lists deep: ``{"tokenizer": [[[...]]]}``."""
    return '{"tokenizer": ' + "[" * depth + "]" * depth + "}"


def hf_with_config(folder, **changes) -> str:
    """A tiny ``hf:`` CLIP folder whose ``config.json`` has ``changes`` (``"text_config.num_hidden_layers": N``, a
    dotted path to a field) made."""
    name = make_tiny_hf_clip(folder)
    path = folder / "tiny-clip" / "config.json"
    config = json.loads(path.read_text())
    for field, value in changes.items():
        *parents, last = field.split(".")
        holder = config
        for key in parents:
            holder = holder[key]
        holder[last] = value
    path.write_text(json.dumps(config))
    return name


def hf_with_file_text(folder, file_name: str, text: str) -> str:
    """A tiny ``hf:`` CLIP folder whose file ``file_name`` is ``text``."""
    name = make_tiny_hf_clip(folder)
    (folder / "tiny-clip" / file_name).write_text(text)
    return name


def hf_with_sparse_file(folder, file_name: str) -> str:
    """A tiny ``hf:`` CLIP folder whose file ``file_name`` (its config, a vocabulary) is a 2 GiB hole."""
    name = make_tiny_hf_clip(folder)
    sparse_file(folder / "tiny-clip" / file_name)
    return name


def open_clip_with_config(folder, text: str) -> str:
    """An ``open_clip:local-dir:`` folder whose ``open_clip_config.json`` is ``text`` (and no weights: the config is
    checked before they are read)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "open_clip_config.json").write_text(text)
    return f"open_clip:local-dir:{folder}"


def open_clip_with_model_config(folder, vision=None, text=None) -> str:
    """An ``open_clip:local-dir:`` folder of the tiny architecture with ``vision`` and ``text`` fields changed."""
    config = {**TINY_OPEN_CLIP_CONFIG, "vision_cfg": {**TINY_OPEN_CLIP_CONFIG["vision_cfg"], **(vision or {})},
              "text_cfg": {**TINY_OPEN_CLIP_CONFIG["text_cfg"], **(text or {})}}
    return open_clip_with_config(folder, json.dumps({"model_cfg": config}))


def open_clip_with_sparse_config(folder) -> str:
    """An ``open_clip:local-dir:`` folder whose ``open_clip_config.json`` is a 2 GiB hole."""
    folder.mkdir(parents=True, exist_ok=True)
    sparse_file(folder / "open_clip_config.json")
    return f"open_clip:local-dir:{folder}"
