"""Any image-text model, one file: an object with ``encode_images`` and ``encode_texts``, made ready for ``run``.

A researcher's model needs two methods:

- ``encode_images(images: list of PIL images) -> array (images, dim)``;
- ``encode_texts(texts: list of str) -> array (texts, dim)``.

Optional hooks make the embedding loop faster (:mod:`rococo_eval.models.cache` uses each pair when both are there):

- ``preprocess_image(image) -> array`` and ``encode_preprocessed(batch array) -> array``: preprocessing in the
  loader's worker threads, ``encode_preprocessed(np.stack([preprocess_image(i) for i in images]))`` being
  ``encode_images(images)``;
- ``tokenize_texts(texts) -> anything`` and ``encode_tokenized(tokens) -> array``: tokenizing in a thread ahead;
- ``fingerprint``: a string that changes whenever the embeddings would (the weights, the preprocessing). The
  embedding cache is keyed by it. Without it: the digest of the weights of a ``torch.nn.Module``, else the digest
  of the model's own embeddings of a fixed probe (two captions and one generated image), so that a changed model
  is never read from another's cache;
- ``name``: how reports name the model (default: the class name, or the ``--model`` spec);
- ``similarity``: how its embeddings are scored (:mod:`rococo_eval.models.similarity`): ``"cosine"`` (the default:
  every embedding L2-normalised, so scores are cosine similarities, as for the built-in models), ``"dot"`` (the
  embeddings as given, scored by their dot product), or ``"csd"`` (probabilistic embeddings: each encoder returns a
  pair ``(means, log_sigmas)``, scored by PCME++'s closed-form sampled distance; ``examples/probabilistic_model.py``).

:func:`as_image_text_model` wraps such an object. ``--model module:callable`` (and :func:`load_callable`) imports
``module`` (from the current folder first) and calls ``callable`` to make the model, with ``device`` and
``precision`` when it takes them.

Example:
    >>> class Letters:
    ...     def encode_texts(self, texts):
    ...         return np.array([[len(text), 1.0] for text in texts])
    ...     def encode_images(self, images):
    ...         return np.array([[image.width, 1.0] for image in images])
    >>> model = as_image_text_model(Letters())
    >>> model.name, len(model.fingerprint), model.encode_texts(["ab"]).astype(float).round(3).tolist()
    ('Letters', 64, [[0.894, 0.447]])
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import re
import sys
from typing import Optional

import numpy as np
from PIL import Image

from rococo_eval.models.cache import weights_digest
from rococo_eval.models.protocol import (
    PREPROCESSING_HOOKS,
    TOKENIZING_HOOKS,
    ImageTextModel,
    missing_members,
)
from rococo_eval.models.similarity import COSINE, similarity_of

logger = logging.getLogger(__name__)

REQUIRED = ("encode_images", "encode_texts")
CALLABLE_SPEC = re.compile(r"(?P<module>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):"
                           r"(?P<callable>[A-Za-z_][A-Za-z0-9_]*)")
_PROBE_TEXTS = ["a man riding a horse on a beach", "two dogs playing with a red frisbee in the park"]


class CustomModel:
    """A user's model as the embedding loop sees it (an :class:`~rococo_eval.models.protocol.ImageTextModel`):
    ``name``, ``fingerprint``, ``similarity``, float32 rows as the similarity scores them, and the user's optional hooks
    (present on this object only when the user's model has them). Its ``device`` and ``precision`` are the user's
    model's business: None.

    Args:
        model: the user's object (see the module docstring).
        name: the report's name for it; default: ``model.name``, else its class name.
    """

    device = None
    precision = None

    def __init__(self, model, name: Optional[str] = None):
        missing = [method for method in REQUIRED if not callable(getattr(model, method, None))]
        if missing:
            raise TypeError(f"`model` ({type(model).__name__}) has no {' and no '.join(missing)}: a model needs "
                            "encode_images(list of PIL images) -> array and encode_texts(list of str) -> array")
        self.model = model
        self.name = str(name or getattr(model, "name", None) or type(model).__name__)
        self.similarity = similarity_of(model)
        for pair in (PREPROCESSING_HOOKS, TOKENIZING_HOOKS):
            present = [hook for hook in pair if callable(getattr(model, hook, None))]
            if len(present) == 1:
                logger.warning("%s has %s but not %s: the hook is not used", self.name, present[0],
                               (set(pair) - set(present)).pop())
            elif present:
                self.__dict__[pair[0]] = getattr(model, pair[0])
                self.__dict__[pair[1]] = self._scored(getattr(model, pair[1]), pair[1])
        self.fingerprint = self._fingerprint()

    def encode_images(self, images) -> np.ndarray:
        return self.similarity.rows("image", self.model.encode_images(list(images)), self.name, "encode_images")

    def encode_texts(self, texts) -> np.ndarray:
        return self.similarity.rows("text", self.model.encode_texts(list(texts)), self.name, "encode_texts")

    def _scored(self, method, method_name: str):
        side = "image" if method_name == "encode_preprocessed" else "text"

        def call(batch):
            return self.similarity.rows(side, method(batch), self.name, method_name)
        return call

    def _fingerprint(self) -> str:
        """The model's own fingerprint, else its weights' digest (a torch module), else its probe's digest."""
        own = getattr(self.model, "fingerprint", None)
        own = own() if callable(own) else own
        digest = hashlib.sha256(f"custom:{type(self.model).__module__}.{type(self.model).__qualname__};".encode())
        if self.similarity is not COSINE:  # cosine models keep the fingerprints (and caches) they had
            digest.update(f"similarity:{self.similarity.name};".encode())
        if own:
            if not isinstance(own, str):
                raise TypeError(f"`fingerprint` of {self.name} must be a str, got {type(own).__name__}")
            digest.update(own.encode())
            return digest.hexdigest()
        if _is_torch_module(self.model):
            digest.update(weights_digest(self.model).encode())
            return digest.hexdigest()
        logger.info("%s has no fingerprint: its cache is keyed by its embeddings of a fixed probe", self.name)
        image = Image.fromarray(np.arange(48 * 64 * 3, dtype=np.uint8).reshape(48, 64, 3))
        texts = (self.encode_tokenized(self.tokenize_texts(_PROBE_TEXTS)) if hasattr(self, "encode_tokenized")
                 else self.encode_texts(_PROBE_TEXTS))  # through the path the cache takes
        images = (self.encode_preprocessed(np.stack([self.preprocess_image(image)]))
                  if hasattr(self, "encode_preprocessed") else self.encode_images([image]))
        for vectors in (texts, images):  # rounded: the last bits change with threads, batch sizes and devices
            digest.update(np.round(np.asarray(vectors, dtype=np.float64), 4).tobytes())
        return digest.hexdigest()


def as_image_text_model(model, name: Optional[str] = None) -> ImageTextModel:
    """The one way in for a model: ``model`` itself when it is one of this package's
    (:func:`~rococo_eval.models.adapters.load_model`'s, whose name is its ``--model`` spec; ``name`` then renames it),
    checked to be a whole :class:`~rococo_eval.models.protocol.ImageTextModel`, else a :class:`CustomModel` of it.

    Raises:
        TypeError: a model of this package that lacks a member of the protocol (named), or an object without
            ``encode_images`` and ``encode_texts``.
    """
    if isinstance(model, CustomModel):
        return _renamed(model, name)
    if _is_adapter(model):
        missing = missing_members(model)
        if missing:
            raise TypeError(f"`model` {model.name!r} ({type(model).__name__}) lacks {', '.join(missing)} of "
                            "rococo_eval.models.protocol.ImageTextModel (a similarity must be a Similarity)")
        return _renamed(model, name)
    return CustomModel(model, name)


def _renamed(model, name: Optional[str]):
    if name is not None:
        model.name = str(name)
    return model


def names_a_callable(spec: str) -> bool:
    """Whether ``spec`` is ``module:callable`` with a module that can be imported (from the current folder first):
    ``timm:vit_base`` without timm installed is no model name at all. (A built-in family's prefix, ``open_clip:``, is
    never asked about: :func:`rococo_eval.models.adapters.parse_model_name` reads those names.)

    Example:
        >>> names_a_callable("rococo_eval.models.custom:load_callable"), names_a_callable("no_such_module:load")
        (True, False)
    """
    match = CALLABLE_SPEC.fullmatch(str(spec))
    if not match:
        return False
    with _current_folder_first():
        try:
            return importlib.util.find_spec(match["module"]) is not None
        except (ImportError, ValueError):  # a parent package that is missing
            return False


def load_callable(spec: str, device: Optional[str] = None, precision: str = "fp32") -> CustomModel:
    """The model that ``module:callable`` makes: ``module`` imported (the current folder first on the path), then
    ``callable()``, given ``device`` and ``precision`` when its signature takes them.

    Raises:
        ValueError: ``spec`` is not ``module:callable``, or the module or the callable is not found (named).
    """
    match = CALLABLE_SPEC.fullmatch(spec)
    if not match:
        raise ValueError(f"`model` {spec!r} is not module:callable (e.g. my_models:load_model)")
    with _current_folder_first():
        try:
            module = importlib.import_module(match["module"])
        except ModuleNotFoundError as error:
            hint = ("run from the folder that holds it, or put it on PYTHONPATH" if error.name == match["module"]
                    else f"the module imports {error.name!r}, which is not installed")
            raise ValueError(f"`model` {spec!r}: cannot import module {match['module']!r} ({error}): {hint}") from None
    factory = getattr(module, match["callable"], None)
    if not callable(factory):
        raise ValueError(f"`model` {spec!r}: module {match['module']!r} has no callable {match['callable']!r}")
    parameters = _parameters(factory)
    options = {key: value for key, value in (("device", device), ("precision", precision))
               if key in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())}
    return CustomModel(factory(**options), name=spec)


@contextlib.contextmanager
def _current_folder_first():
    """The current folder on ``sys.path`` (first) for the duration, as ``python -m`` has it."""
    folder = os.getcwd()
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def _parameters(factory) -> dict:
    try:
        return dict(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        return {}


def _is_torch_module(model) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _is_adapter(model) -> bool:
    """One of this package's models: named and fingerprinted by the package itself."""
    return (type(model).__module__.startswith("rococo_eval.models.") and isinstance(getattr(model, "name", None), str)
            and isinstance(getattr(model, "fingerprint", None), str))
