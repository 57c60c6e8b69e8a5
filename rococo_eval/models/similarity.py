"""How a model's embeddings are scored: each similarity turns what a model's encoders return into rows, and scores
rows block by block as the model's own code scores them, so that everything downstream (the embedding cache, the
metric, the embeddings file, the Space) serves every model.

- ``cosine`` (the default, and most built-in dual encoders): rows L2-normalised (:func:`normalised`), scored by
  their float32 dot product, the metric's one block rule (:func:`rococo_recall.embedding_score_blocks`).
- ``dot``: the rows as the model gives them, scored by their dot product in **float64**, as VSE infinity's official
  evaluation scores its embeddings (``encode_data`` keeps them in float64 arrays, then ``compute_sim``).
- ``csd``: probabilistic embeddings scored by the closed-form sampled distance of PCME++ (Chun, "Improved
  Probabilistic Image-Text Representations", ICLR 2024; ``pcmepp/evaluation.py::compute_csd_sims``),
  ``csd(i, t) = -(2 - 2 mu_i . mu_t + sum(exp(sigma_i)) + sum(exp(sigma_t)))``. Each encoder returns a pair
  ``(means, log_sigmas)`` of ``(items, dim)`` arrays (PCME++'s ``mean`` and ``std`` outputs: ``std`` is the log of
  sigma, which the official code exponentiates). An item's row is its mean, then its uncertainty ``sum(exp(sigma))``
  (``dim + 1`` floats), and a block of scores is computed in the official order and precision: the means' float32
  matrix product ``m`` (images by captions, as the official code multiplies them), ``2 - 2 m``, plus the images'
  uncertainties, plus the captions', negated. The uncertainties are float32 sums of float32 exponentials (of torch's,
  when the model gives tensors), as there.

:data:`SIMILARITIES` names them; a model says which through its ``similarity`` attribute (default ``cosine``), and
an embeddings file records it (:mod:`rococo_eval.scoring.embeddingsfile`).

Example:
    >>> score_vectors("cosine", "text", [[3.0, 4.0]], "m").astype(float).round(6).tolist()
    [[0.6, 0.8]]
    >>> means, log_sigmas = np.array([[0.6, 0.8]]), np.log(np.array([[0.5, 0.25]]))
    >>> image, text = (score_vectors("csd", side, (means, log_sigmas), "m") for side in ("image", "text"))
    >>> image.tolist()  # the mean, then sum(exp(log_sigma))
    [[0.6000000238418579, 0.800000011920929, 0.75]]
    >>> [(start, block.round(6).tolist()) for start, block in score_blocks("csd", image, text, queries_are_images=True)]
    [(0, [[-1.5]])]
"""

from __future__ import annotations

import reprlib
from typing import Iterator, Sequence

import numpy as np

SIMILARITIES = ("cosine", "dot", "csd")
DEFAULT_SIMILARITY = "cosine"
SIDES = ("image", "text")
SCORE_DTYPES = {"cosine": np.float32, "dot": np.float64, "csd": np.float32}  # what each similarity's scores are in


def similarity_of(model) -> str:
    """How ``model`` is scored: its ``similarity`` when that is a string (checked), else :data:`DEFAULT_SIMILARITY`
    (a model whose ``similarity`` is a method, as sentence-transformers' are, says nothing about it).

    Example:
        >>> class Probabilistic:
        ...     similarity = "csd"
        >>> class WithAMethod:
        ...     def similarity(self, a, b): return a @ b.T
        >>> similarity_of(Probabilistic()), similarity_of(WithAMethod()), similarity_of(object())
        ('csd', 'cosine', 'cosine')
    """
    value = getattr(model, "similarity", None)
    if not isinstance(value, str):
        return DEFAULT_SIMILARITY
    return check_similarity(value, getattr(model, "name", None) or type(model).__name__)


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
    log_sigmas = output[1]
    if hasattr(log_sigmas, "detach"):  # torch's exponential, as the official code takes it
        import torch

        sigmas = torch.exp(log_sigmas.detach().float()).cpu().numpy()
    else:
        sigmas = np.exp(finite_rows(log_sigmas, model_name, f"{method} (log_sigmas)"))
    sigmas = finite_rows(sigmas, model_name, f"{method} (log_sigmas)")
    if means.shape != sigmas.shape:
        raise ValueError(f"model {model_name!r}: {method} returned means of shape {means.shape} and log_sigmas of "
                         f"shape {sigmas.shape}; they must have one shape")
    uncertainty = sigmas.sum(axis=-1).reshape(-1, 1)  # float32, summed as the official code sums it
    if not np.isfinite(uncertainty).all():
        raise ValueError(f"model {model_name!r}: {method} returned log_sigmas whose exp overflows")
    return np.hstack([means, uncertainty]).astype(np.float32)


def score_blocks(similarity: str, queries: np.ndarray, gallery: np.ndarray, queries_are_images: bool,
                 chunk_size=None) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(first row, scores)``: the score matrix of ``queries`` against ``gallery`` (rows of
    :func:`score_vectors`), block by block, as ``similarity`` scores them (module docstring).

    Args:
        queries_are_images: whether the queries are the images (image-to-text); ``csd`` multiplies and adds in the
            official order, images first.
        chunk_size: query rows per block (default: the metric's, :func:`rococo_recall.score_block_rows`). BLAS
            rounds a product by its shape, so blocks may differ in their last bit from a matrix made whole, as the
            metric's own blocks may (``csd``'s means' products are float32, as the official code's are).

    Example:
        >>> rows = np.array([[3.0, 4.0], [1.0, 0.0]], dtype=np.float32)
        >>> [(start, block.dtype.name) for start, block in score_blocks("dot", rows, rows, True)]
        [(0, 'float64')]
    """
    from rococo_recall import embedding_score_blocks, score_block_rows  # the metric's block rule

    check_similarity(similarity)
    if similarity == "cosine":
        yield from embedding_score_blocks(queries, gallery, chunk_size=chunk_size)
        return
    if similarity == "dot":
        yield from embedding_score_blocks(np.asarray(queries, dtype=np.float64), np.asarray(gallery, dtype=np.float64),
                                          chunk_size=chunk_size)
        return
    queries, gallery = np.asarray(queries, dtype=np.float32), np.asarray(gallery, dtype=np.float32)
    gallery_means, gallery_uncertainty = np.ascontiguousarray(gallery[:, :-1]), gallery[:, -1]
    rows = chunk_size or score_block_rows(len(gallery))
    for start in range(0, len(queries), rows):  # contiguous means, as the official code multiplies them
        block_means = np.ascontiguousarray(queries[start:start + rows, :-1])
        block_uncertainty = queries[start:start + rows, -1]
        if queries_are_images:
            distance = 2 - 2 * (block_means @ gallery_means.T)
            distance = distance + block_uncertainty[:, None]
            distance = distance + gallery_uncertainty[None, :]
        else:  # the official code scores images by captions, and ranks images by its transpose
            distance = 2 - 2 * (gallery_means @ block_means.T)
            distance = distance + gallery_uncertainty[:, None]
            distance = distance + block_uncertainty[None, :]
            distance = distance.T
        yield start, np.ascontiguousarray(-distance)


def dense_numbers(value, what: str):
    """``value`` as a dense array of real numbers (bools, ints or floats), or refused with a ``ValueError`` naming
    ``what``: strings, None, dicts, ragged or object arrays, ints beyond 64 bits, and sparse, nested or meta-device
    torch tensors. A torch tensor is returned as it is, on its device; anything else as a NumPy array.

    Example:
        >>> dense_numbers([[1, 2]], "`rows`").dtype
        dtype('int64')
        >>> dense_numbers([[1.0], [2.0, 3.0]], "`rows`")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `rows` must be an array of real numbers (...), got [[1.0], [2.0, 3.0]]
    """
    if hasattr(value, "layout") and hasattr(value, "device"):  # a torch tensor (torch is not needed here)
        nested = "nested " if value.is_nested else ""  # a nested tensor's layout may read strided
        if str(value.layout) != "torch.strided" or nested or value.device.type == "meta" or value.is_complex():
            raise ValueError(f"{what} must be a dense tensor of real numbers on a device that holds data, got a "
                             f"{nested}{value.dtype} tensor of layout {value.layout} on {value.device}")
        return value
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError, RuntimeError):  # ragged, or a type NumPy cannot take
        array = None
    if array is None or array.dtype.kind not in "biuf":
        raise ValueError(f"{what} must be an array of real numbers (no strings, None, ragged lists or ints beyond "
                         f"64 bits), got {reprlib.repr(value)}")
    return array


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
    vectors = dense_numbers(vectors, f"model {model_name!r}: {method}'s output")
    if hasattr(vectors, "detach"):  # a torch tensor
        vectors = vectors.detach().float().cpu().numpy()
    vectors = vectors.astype(np.float32, copy=False)
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
