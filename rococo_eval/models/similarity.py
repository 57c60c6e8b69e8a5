"""How a model's embeddings are scored: each similarity turns what a model's encoders return into rows whose dot
products are the model's own scores, so that everything downstream (the embedding cache, the metric's block rule,
the embeddings file, the Space) scores every model as one matrix product.

- ``cosine`` (the default, and every built-in dual encoder but PCME++): rows L2-normalised, so that their dot product
  is the cosine similarity (:func:`normalised`).
- ``dot``: the rows as the model gives them, scored by their dot product (a model trained with an unnormalised
  inner product).
- ``csd``: probabilistic embeddings scored by the closed-form sampled distance of PCME++ (Chun, "Improved
  Probabilistic Image-Text Representations", ICLR 2024; ``pcmepp/evaluation.py::compute_csd_sims``):
  ``csd(i, t) = -(2 - 2 mu_i . mu_t + sum(exp(sigma_i)) + sum(exp(sigma_t)))``, where each encoder returns a pair
  ``(means, log_sigmas)`` of ``(items, dim)`` arrays (PCME++'s ``mean`` and ``std`` outputs: ``std`` is the
  log of sigma, which the official code exponentiates). The pair becomes one augmented row per item,

      image ``[2 mu_i, -(2 + sum(exp(sigma_i))), 1]``,  text ``[mu_t, 1, -sum(exp(sigma_t))]``,

  whose dot product is ``csd(i, t)``: the same number, so the same ranking, up to the rounding of float32 sums
  (the official code itself gives different last bits in its float32 and float64 modes, ``to_double``). The sums
  of ``exp(sigma)`` are taken in float64.

:data:`SIMILARITIES` names them; a model says which through its ``similarity`` attribute (default ``cosine``), and
an embeddings file records it (:mod:`rococo_eval.scoring.embeddingsfile`).

Example:
    >>> score_vectors("cosine", "text", [[3.0, 4.0]], "m").astype(float).round(6).tolist()
    [[0.6, 0.8]]
    >>> means, log_sigmas = np.array([[0.6, 0.8]]), np.log(np.array([[0.5, 0.25]]))
    >>> image, text = (score_vectors("csd", side, (means, log_sigmas), "m") for side in ("image", "text"))
    >>> round(float((image @ text.T)[0, 0]), 6)  # -(2 - 2 * 1.0 + 0.75 + 0.75)
    -1.5
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

SIMILARITIES = ("cosine", "dot", "csd")
DEFAULT_SIMILARITY = "cosine"
SIDES = ("image", "text")


def check_similarity(similarity, owner: str = "model") -> str:
    """``similarity`` if it is one of :data:`SIMILARITIES`, else a ``ValueError`` naming ``owner``'s attribute.

    Example:
        >>> check_similarity("csd")
        'csd'
        >>> check_similarity("euclidean", "MyModel")
        Traceback (most recent call last):
        ...
        ValueError: `similarity` of MyModel must be one of ('cosine', 'dot', 'csd'), got 'euclidean'
    """
    if not isinstance(similarity, str) or similarity not in SIMILARITIES:
        raise ValueError(f"`similarity` of {owner} must be one of {SIMILARITIES}, got {similarity!r}")
    return similarity


def score_vectors(similarity: str, side: str, output, model_name: str, method: str = "") -> np.ndarray:
    """The float32 rows that score ``output`` (an encoder's output for ``side``) by ``similarity``, by dot product.

    Args:
        similarity: one of :data:`SIMILARITIES`.
        side: ``"image"`` or ``"text"`` (which row of the pair a ``csd`` item becomes).
        output: ``(items, dim)`` numbers (a NumPy array, a list, a torch tensor), or for ``csd`` a pair of them,
            ``(means, log_sigmas)``.
        model_name, method: how errors name the model and the method that returned ``output``.

    Raises:
        ValueError: rows that are not 2-D and finite, an all-zero row under ``cosine``, or a ``csd`` output that is
            not a pair of arrays of one shape (each names the model and the method).
    """
    check_similarity(similarity)
    if side not in SIDES:
        raise ValueError(f"`side` must be one of {SIDES}, got {side!r}")
    method = method or f"encode_{side}s"
    if similarity == "cosine":
        return normalised(output, model_name, method)
    if similarity == "dot":
        return finite_rows(output, model_name, method)
    if not (isinstance(output, Sequence) and not isinstance(output, str) and len(output) == 2):
        raise ValueError(f"model {model_name!r}: {method} must return a pair (means, log_sigmas) for the csd "
                         f"similarity, got {type(output).__name__}")
    means = finite_rows(output[0], model_name, f"{method} (means)")
    log_sigmas = finite_rows(output[1], model_name, f"{method} (log_sigmas)")
    if means.shape != log_sigmas.shape:
        raise ValueError(f"model {model_name!r}: {method} returned means of shape {means.shape} and log_sigmas of "
                         f"shape {log_sigmas.shape}; they must have one shape")
    uncertainty = np.exp(log_sigmas.astype(np.float64)).sum(axis=1, keepdims=True)
    if not np.isfinite(uncertainty).all():
        raise ValueError(f"model {model_name!r}: {method} returned log_sigmas whose exp overflows")
    ones = np.ones_like(uncertainty)
    if side == "image":
        augmented = np.hstack([2 * means.astype(np.float64), -(2 + uncertainty), ones])
    else:
        augmented = np.hstack([means.astype(np.float64), ones, -uncertainty])
    return augmented.astype(np.float32)


def finite_rows(vectors, model_name: str, method: str) -> np.ndarray:
    """``vectors`` as float32 ``(items, dim)`` rows; anything not 2-D and finite is refused, naming ``method``.

    Example:
        >>> finite_rows([[1, 2]], "m", "encode_texts").dtype
        dtype('float32')
        >>> finite_rows([1, 2], "m", "encode_texts")
        Traceback (most recent call last):
        ...
        ValueError: model 'm': encode_texts returned shape (2,), not (items, dimension)
    """
    if hasattr(vectors, "detach"):  # a torch tensor
        vectors = vectors.detach().float().cpu().numpy()
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError(f"model {model_name!r}: {method} returned shape {vectors.shape}, not (items, dimension)")
    if not np.isfinite(vectors).all():
        raise ValueError(f"model {model_name!r}: {method} returned non-finite embeddings")
    return vectors


def normalised(vectors, model_name: str, method: str) -> np.ndarray:
    """``vectors`` as float32 rows of unit length; a model's output that is not a 2-D finite array is refused.

    Example:
        >>> normalised([[3.0, 4.0]], "m", "encode_texts").astype(float).round(6).tolist()
        [[0.6, 0.8]]
    """
    vectors = finite_rows(vectors, model_name, method)
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
    if not (norms > 0).all():
        raise ValueError(f"model {model_name!r}: {method} returned {int((norms == 0).sum())} all-zero embedding(s), "
                         "which have no direction to score")
    return (vectors / norms).astype(np.float32)
