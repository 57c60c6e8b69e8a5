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

:data:`REGISTRY` holds one :class:`Similarity` of each kind, by name (:data:`SIMILARITIES`); a name becomes one at the
edges (:func:`similarity_named`: a model's ``similarity`` attribute, default ``cosine``, an embeddings file's metadata,
:mod:`rococo_eval.scoring.embeddingsfile`, the torchmetrics metric's argument), and everything past them holds the
object.

Example:
    >>> COSINE.rows("text", [[3.0, 4.0]], "m").astype(float).round(6).tolist()
    [[0.6, 0.8]]
    >>> means, log_sigmas = np.array([[0.6, 0.8]]), np.log(np.array([[0.5, 0.25]]))
    >>> image, text = (CSD.rows(side, (means, log_sigmas), "m") for side in ("image", "text"))
    >>> image.tolist()  # the mean, then sum(exp(log_sigma))
    [[0.6000000238418579, 0.800000011920929, 0.75]]
    >>> [(start, block.round(6).tolist()) for start, block in CSD.blocks(image, text, queries_are_images=True)]
    [(0, [[-1.5]])]
"""

from __future__ import annotations

import reprlib
from typing import Iterator, Sequence

import numpy as np

SIDES = ("image", "text")


class Similarity:
    """How one kind of embeddings is scored: the rows that an encoder's output becomes (:meth:`rows`), the blocks of
    scores of two sets of rows (:meth:`blocks`), the dtype of those scores (``score_dtype``) and the parts an
    encoder returns (``parts``: one array, or PCME++'s ``(means, log_sigmas)``), which give the width of its
    embeddings (:meth:`embedding_width`). :data:`REGISTRY` holds one of each kind, by ``name``.

    Example:
        >>> similarity_named("csd").parts, similarity_named("dot").score_dtype.__name__
        (('means', 'log_sigmas'), 'float64')
    """

    name: str = ""
    score_dtype: type = np.float32
    parts: tuple[str, ...] = ("embeddings",)
    metric_scores_rows = False  # whether the metric scores the rows itself (rococo_recall(query_embeddings=...))
    unit_rows = False  # whether every row is of unit length (a file's rows that are not are normalised when read)

    def __repr__(self) -> str:
        return f"<similarity {self.name}>"

    def rows(self, side: str, output, model_name: str, method: str = "") -> np.ndarray:
        """The float32 rows that score ``output`` (an encoder's output for ``side``), by dot product.

        Args:
            side: ``"image"`` or ``"text"`` (which row of the pair a ``csd`` item becomes).
            output: ``(items, dim)`` numbers (a NumPy array, a list, a torch tensor), or a tuple of them, one per
                part (``csd``: ``(means, log_sigmas)``).
            model_name, method: how errors name the model and the method that returned ``output``.

        Raises:
            ValueError: rows that are not 2-D and finite, an all-zero row under ``cosine``, or a ``csd`` output that
                is not a pair of arrays of one shape (each names the model and the method).
        """
        if side not in SIDES:
            raise ValueError(f"`side` must be one of {SIDES}, got {side!r}")
        return self._rows(output, model_name, method or f"encode_{side}s")

    def _rows(self, output, model_name: str, method: str) -> np.ndarray:
        return finite_rows(output, model_name, method)

    def blocks(self, queries: np.ndarray, gallery: np.ndarray, queries_are_images: bool,
               chunk_size=None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first row, scores)``: the score matrix of ``queries`` against ``gallery`` (rows of :meth:`rows`),
        block by block, as this similarity scores them (module docstring).

        Args:
            queries_are_images: whether the queries are the images (image-to-text); ``csd`` multiplies and adds in
                the official order, images first.
            chunk_size: query rows per block (default: the metric's, :func:`rococo_recall.score_block_rows`). BLAS
                rounds a product by its shape, so blocks may differ in their last bit from a matrix made whole, as
                the metric's own blocks may (``csd``'s means' products are float32, as the official code's are).
        """
        from rococo_recall import embedding_score_blocks  # the metric's block rule

        dtype = self.score_dtype
        yield from embedding_score_blocks(np.asarray(queries, dtype=dtype), np.asarray(gallery, dtype=dtype),
                                          chunk_size=chunk_size)

    def split(self, output, what: str, must: str = "must be") -> tuple:
        """``output`` as a tuple of its :data:`parts`, or a ``ValueError`` naming ``what`` when a many-part output is
        not a sequence (a tuple, a list) of that many.

        Example:
            >>> similarity_named("csd").split(np.zeros((2, 3)), "`x`")
            Traceback (most recent call last):
            ...
            ValueError: `x` must be a pair (means, log_sigmas) for the csd similarity, got ndarray
        """
        if len(self.parts) == 1:
            return (output,)
        if not (isinstance(output, Sequence) and not isinstance(output, str) and len(output) == len(self.parts)):
            raise ValueError(f"{what} {must} a {_counted(self.parts)} ({', '.join(self.parts)}) for the {self.name} "
                             f"similarity, got {type(output).__name__}")
        return tuple(output)

    def joined(self, parts: Sequence):
        """An encoder's output made of its ``parts`` (the inverse of :meth:`split`): the one array, or the tuple."""
        return parts[0] if len(self.parts) == 1 else tuple(parts)

    def embedding_width(self, row_width: int) -> int:
        """The width of the embeddings whose parts, side by side, are ``row_width`` wide.

        Example:
            >>> similarity_named("csd").embedding_width(8), similarity_named("cosine").embedding_width(8)
            (4, 8)
        """
        return row_width // len(self.parts)


class Cosine(Similarity):
    """Rows L2-normalised (:func:`normalised`), scored by their float32 dot product, the metric's block rule."""

    name = "cosine"
    metric_scores_rows = True
    unit_rows = True

    def _rows(self, output, model_name: str, method: str) -> np.ndarray:
        return normalised(output, model_name, method)


class Dot(Similarity):
    """The rows as the model gives them, scored by their dot product in float64 (VSE infinity's ``compute_sim``).

    Example:
        >>> rows = np.array([[3.0, 4.0], [1.0, 0.0]], dtype=np.float32)
        >>> [(start, block.dtype.name) for start, block in DOT.blocks(rows, rows, True)]
        [(0, 'float64')]
    """

    name = "dot"
    score_dtype = np.float64


class Csd(Similarity):
    """PCME++'s closed-form sampled distance of ``(means, log_sigmas)`` pairs (module docstring)."""

    name = "csd"
    parts = ("means", "log_sigmas")

    def _rows(self, output, model_name: str, method: str) -> np.ndarray:
        means, log_sigmas = self.split(output, f"model {model_name!r}: {method}", "must return")
        means = finite_rows(means, model_name, f"{method} (means)")
        if hasattr(log_sigmas, "detach"):  # torch's exponential, as the official code takes it
            import torch

            sigmas = torch.exp(log_sigmas.detach().float()).cpu().numpy()
        else:
            sigmas = np.exp(finite_rows(log_sigmas, model_name, f"{method} (log_sigmas)"))
        sigmas = finite_rows(sigmas, model_name, f"{method} (log_sigmas)")
        if means.shape != sigmas.shape:
            raise ValueError(f"model {model_name!r}: {method} returned means of shape {means.shape} and log_sigmas "
                             f"of shape {sigmas.shape}; they must have one shape")
        uncertainty = sigmas.sum(axis=-1).reshape(-1, 1)  # float32, summed as the official code sums it
        if not np.isfinite(uncertainty).all():
            raise ValueError(f"model {model_name!r}: {method} returned log_sigmas whose exp overflows")
        return np.hstack([means, uncertainty]).astype(np.float32)

    def blocks(self, queries: np.ndarray, gallery: np.ndarray, queries_are_images: bool,
               chunk_size=None) -> Iterator[tuple[int, np.ndarray]]:
        from rococo_recall import score_block_rows  # the metric's block rule

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


COSINE, DOT, CSD = Cosine(), Dot(), Csd()
REGISTRY = {similarity.name: similarity for similarity in (COSINE, DOT, CSD)}  # the one list of similarities
SIMILARITIES = tuple(REGISTRY)
DEFAULT_SIMILARITY = COSINE.name


def _counted(parts) -> str:
    return "pair" if len(parts) == 2 else f"tuple of {len(parts)}"


def similarity_of(model) -> Similarity:
    """How ``model`` is scored: its ``similarity`` when that is a name or a :class:`Similarity` (checked), else
    cosine (a model whose ``similarity`` is a method, as sentence-transformers' are, says nothing about it).

    Example:
        >>> class Probabilistic:
        ...     similarity = "csd"
        >>> class WithAMethod:
        ...     def similarity(self, a, b): return a @ b.T
        >>> [similarity_of(model).name for model in (Probabilistic(), WithAMethod(), object())]
        ['csd', 'cosine', 'cosine']
    """
    value = getattr(model, "similarity", None)
    if not isinstance(value, (str, Similarity)):
        return COSINE
    return similarity_named(value, getattr(model, "name", None) or type(model).__name__)


def similarity_named(similarity, owner: str = "model") -> Similarity:
    """The :class:`Similarity` that ``similarity`` names (one of :data:`SIMILARITIES`, or one itself), else a
    ``ValueError`` naming ``owner``'s attribute: where a name comes in (a file, the command line, a model's
    attribute, MTEB).

    Example:
        >>> similarity_named("csd")
        <similarity csd>
        >>> similarity_named("euclidean", "MyModel")
        Traceback (most recent call last):
        ...
        ValueError: `similarity` of MyModel must be one of ('cosine', 'dot', 'csd'), got 'euclidean'
    """
    if isinstance(similarity, Similarity):
        return similarity
    if not isinstance(similarity, str) or similarity not in REGISTRY:
        raise ValueError(f"`similarity` of {owner} must be one of {SIMILARITIES}, got {similarity!r}")
    return REGISTRY[similarity]


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
