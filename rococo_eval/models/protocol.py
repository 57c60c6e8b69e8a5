"""What the scorers read of a model: :class:`ImageTextModel`, and :class:`TwoStageModel` for one re-ranked by its
ITM head; the optional halves of the embedding loop (:class:`PreprocessingModel`, :class:`TokenizingModel`).

Every model of :func:`~rococo_eval.models.adapters.load_model` is one; any other object comes in through
:func:`~rococo_eval.models.custom.as_image_text_model`, which checks it once and wraps it.

Example:
    >>> from rococo_eval.models.custom import as_image_text_model
    >>> class Letters:
    ...     def encode_texts(self, texts): return np.array([[len(text), 1.0] for text in texts])
    ...     def encode_images(self, images): return np.array([[image.width, 1.0] for image in images])
    >>> model = as_image_text_model(Letters())
    >>> isinstance(model, ImageTextModel), isinstance(model, TwoStageModel), model.similarity
    (True, False, <similarity cosine>)
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence, runtime_checkable

import numpy as np
from PIL import Image

from rococo_eval.models.similarity import Similarity


@runtime_checkable
class ImageTextModel(Protocol):
    """What the embedding loop and the scorers need of a model.

    Attributes:
        name: the model name as given (``"open_clip:ViT-B-32/openai"``).
        fingerprint: hex digest of everything that shapes the embeddings.
        similarity: how its rows are scored (:mod:`rococo_eval.models.similarity`): ``cosine`` rows are
            L2-normalised, ``dot`` rows are the model's own, a ``csd`` row is a mean and its uncertainty.
        device: the torch device it runs on (``"cuda:0"``, ``"cpu"``), or None when not known (a custom model).
        precision: ``"fp32"``, ``"fp16"`` or ``"bf16"``, or None when not known (a custom model).
    """

    name: str
    fingerprint: str
    similarity: Similarity
    device: Optional[str]
    precision: Optional[str]

    def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """Return float32 rows, one per image, as ``similarity`` scores them."""

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Return float32 rows, one per text, as ``similarity`` scores them."""


@runtime_checkable
class TwoStageModel(ImageTextModel, Protocol):
    """A model scored in two stages (BLIP, BLIP-2; :class:`~rococo_eval.scoring.rerank.Reranker`): its ITC scores
    rank every gallery, then its ITM head (:meth:`match`) re-scores each query's top candidates."""

    def itc_scores(self, image_rows: np.ndarray, text_rows: np.ndarray) -> np.ndarray:
        """Return the float32 ITC scores of image rows (by row) against text rows (by column)."""

    def tokenize(self, texts: Sequence[str]) -> np.ndarray:
        """Return the token ids of ``texts``, one row per text, as :meth:`match` takes them."""

    def image_features(self, images: Sequence[Image.Image]) -> object:
        """Return the vision encoder's output for ``images``, as :meth:`match` takes it."""

    def match(self, features, image_positions, tokens: np.ndarray) -> np.ndarray:
        """Return the float32 ITM logit of each pair: image ``features[image_positions[i]]`` with text ``tokens[i]``."""


class PreprocessingModel(ImageTextModel, Protocol):
    """A model whose image preprocessing can run apart from the model, in the embedding loop's workers.

    ``encode_preprocessed(np.stack([preprocess_image(image) for image in images]))`` equals
    ``encode_images(images)`` bit for bit. The embedding loop (:mod:`rococo_eval.models.cache`) calls
    ``preprocess_image`` in its worker threads, writing each result into a preallocated batch, and
    ``encode_preprocessed`` on the batch; models without the pair are given the images (``encode_images``).
    """

    def preprocess_image(self, image: Image.Image) -> np.ndarray:
        """Return the model input of one image (float32, e.g. ``(3, 224, 224)``); safe to call from threads."""

    def encode_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        """Return float32 rows (as ``similarity`` scores them) of a batch of :meth:`preprocess_image` outputs."""


class TokenizingModel(ImageTextModel, Protocol):
    """A model whose tokenizer can run apart from the model, in a thread ahead of it.

    ``encode_tokenized(tokenize_texts(texts))`` equals ``encode_texts(texts)`` bit for bit. The embedding loop
    (:mod:`rococo_eval.models.cache`) tokenizes the next batches of captions in a thread while the model encodes
    this one.
    """

    def tokenize_texts(self, texts: Sequence[str]) -> object:
        """Return the model input of a batch of texts (token ids and masks, on the CPU)."""

    def encode_tokenized(self, tokens) -> np.ndarray:
        """Return float32 rows (as ``similarity`` scores them) of one :meth:`tokenize_texts` output."""


PREPROCESSING_HOOKS = ("preprocess_image", "encode_preprocessed")  # PreprocessingModel's pair
TOKENIZING_HOOKS = ("tokenize_texts", "encode_tokenized")  # TokenizingModel's pair


def offers(model, hooks: Sequence[str]) -> bool:
    """Whether ``model`` has every method of ``hooks`` (:data:`PREPROCESSING_HOOKS` or :data:`TOKENIZING_HOOKS`): the
    embedding loop then runs that half apart.

    Example:
        >>> class Tokenizing:
        ...     def tokenize_texts(self, texts): return texts
        ...     def encode_tokenized(self, tokens): return tokens
        >>> offers(Tokenizing(), TOKENIZING_HOOKS), offers(Tokenizing(), PREPROCESSING_HOOKS)
        (True, False)
    """
    return all(callable(getattr(model, hook, None)) for hook in hooks)


def missing_members(model) -> list[str]:
    """The members of :class:`ImageTextModel` (:data:`MEMBERS`) that ``model`` lacks; a ``similarity`` that is no
    :class:`~rococo_eval.models.similarity.Similarity` counts as lacking.

    Example:
        >>> missing_members(object())
        ['name', 'fingerprint', 'similarity', 'device', 'precision', 'encode_images', 'encode_texts']
    """
    present = {member: getattr(model, member, _ABSENT) for member in MEMBERS}
    if not isinstance(present["similarity"], Similarity):
        present["similarity"] = _ABSENT
    return [member for member, value in present.items() if value is _ABSENT]


MEMBERS = ("name", "fingerprint", "similarity", "device", "precision", "encode_images", "encode_texts")
_ABSENT = object()
