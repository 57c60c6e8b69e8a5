"""RoCOCO Recall (arXiv:2304.10727) as a Hugging Face ``evaluate`` metric in one file (``evaluate.load`` copies it
alone): each block of query rows is reduced, in cache, to a few numbers per query by counting, never sorted."""

from __future__ import annotations

import logging
import os
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["CITATION", "DEFAULT_K", "PER_QUERY_KEYS", "TIE_POLICIES", "QueryRanks", "RankAccumulator",
           "embedding_score_blocks", "rococo_recall", "score_block_rows", "summarize"]

CITATION = """\
@inproceedings{park2024rococo,
  title     = {RoCOCO: Robustness Benchmark of MS-COCO to Stress-test Image-Text Matching Models},
  author    = {Park, Seulki and Um, Daeho and Yoon, Hajung and Chun, Sanghyuk and Yun, Sangdoo},
  booktitle = {ECCV 2024 Workshop on Synthetic Data for Computer Vision},
  year      = {2024},
  eprint    = {2304.10727},
  archivePrefix = {arXiv},
}
"""

_DESCRIPTION = """\
RoCOCO Recall scores an image-text matching model on a retrieval gallery that contains adversarial items (captions
with one word replaced, or images mixed with or patched from another image). It reports, in percent, Recall@K on the
whole gallery and on the clean gallery (the same gallery without its adversarial items), the false rate (how often the
top-1 item is adversarial) and the attack success rate (how often a query that was right at rank 1 on the clean
gallery is no longer right once the adversarial items are in). On score matrices without ties the numbers equal the
official RoCOCO ``itm_eval`` to the last digit.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: scores, queries x gallery, higher = more similar: a numpy array, a torch tensor on any device
        (ranked there) or nested lists of float16, bfloat16, float32, float64 or long double (ints up to 2**53 and
        ml_dtypes' bfloat16/float8 are converted exactly; anything else is refused). Or leave out and give
        `query_embeddings` and `gallery_embeddings` to score by dot product, block by block.
    references: for each query, the gallery indices that count as correct: an int or a list of ints.
    adversarial: the adversarial gallery items: a boolean mask over the gallery or a list of indices (default none).
    k: an int or a sequence of ints, the cut-offs of Recall@K. Default (1, 5, 10).
    ties: "pessimistic" (default: a wrong item scoring as high as the best correct one ranks above it, so a
        constant-score model gets no credit) or "optimistic" (it ranks below).
    per_query: add per-query arrays: `rank` and `clean_rank` (int64: wrong items above the query's best correct
        item, on the whole and on the clean gallery; 0 = correct at rank 1), `top1_adversarial` (bool), `top_index`
        and `top_score` (int64, float64: column and score of the top-1 item; among equal scores, the one `ties` ranks
        first, pessimistic: adversarial, clean wrong, correct, optimistic: the reverse; then the lowest column),
        `best_correct_index` and `best_correct_score` (the same for the best correct item; among equals, the lowest
        column). A query the attack flipped lost to the adversarial item `top_index`.
    top_columns, top_scores, fill, num_gallery: a compact score matrix instead of `predictions`, as a re-ranker
        (BLIP) makes it: each query's listed gallery columns (ints, queries x k, no column twice in a row) and their
        scores (floats, queries x k); every other of the `num_gallery` items scores `fill` (BLIP: -100) and ties
        with listed items at `fill`. Ranked as the full matrix. Where the order of the items tied at `fill` decides
        a number, the output also holds `<name>_bounds` = (lowest, highest) over every such order; the number
        itself follows `ties`.
    query_index: one int per query numbering the queries 0..N-1 (in `add_batch`, on every batch or on none; or in
        `compute` with `predictions`): per-query outputs come in that order, whichever batch or process added them.
        Required when the metric is loaded with `num_process > 1`.
    bootstrap, seed: the number of bootstrap resamples of the queries for 95% confidence intervals (0 = none), and
        their seed.
    chunk_size: query rows processed at a time (default: about 2.5 MB of scores; from embeddings, 32 MB of scores
        are made at a time, 16 MB on a GPU).
Returns:
    recall@K (each K), r_mean (their mean), false_rate, clean_recall@K, clean_r_mean, attack_success_rate, all in
    percent; num_queries, num_gallery, num_adversarial; with bootstrap, `<name>_ci` = (low, high) for every
    percentage; with per_query, the arrays above; from a compact matrix, `<name>_bounds` (see `top_columns`).
Examples:
    >>> import evaluate
    >>> # in a checkout; from the Hub: evaluate.load("<org>/rococo_recall")
    >>> rococo = evaluate.load("rococo_recall")
    >>> scores = [[0.9, 0.1, 0.95],  # query 0: adversarial item 2 beats caption 0
    ...           [0.2, 0.8, 0.1]]   # query 1: its caption 1 is first
    >>> result = rococo.compute(predictions=scores, references=[0, 1],
    ...                         adversarial=[2], k=(1, 2))
    >>> (result["clean_recall@1"], result["recall@1"], result["false_rate"],
    ...  result["attack_success_rate"])
    (100.0, 50.0, 50.0, 50.0)
"""

# --- Public API: rococo_recall, RankAccumulator, the per-query results and their summary, scores of embeddings

TIE_POLICIES = ("pessimistic", "optimistic")
DEFAULT_K = (1, 5, 10)
Array = Any  # a NumPy array, a torch tensor, or nested lists of numbers


def rococo_recall(predictions: Array = None, references: Array = None, adversarial: Array = None, *,
                  k: int | Sequence[int] = DEFAULT_K, ties: str = "pessimistic", per_query: bool = False,
                  bootstrap: int = 0, seed: int | None = 0, chunk_size: int | None = None,
                  query_embeddings: Array = None, gallery_embeddings: Array = None, top_columns: Array = None,
                  top_scores: Array = None, fill: float | None = None, num_gallery: int | None = None) -> dict:
    """Compute RoCOCO Recall from a score matrix, embeddings or a compact score matrix (see ``_KWARGS_DESCRIPTION``).

    Example:
        >>> out = rococo_recall([[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], references=[0, 1], adversarial=[2], k=(1, 2))
        >>> out["recall@2"], out["r_mean"], out["num_adversarial"]
        (100.0, 75.0, 1)
        >>> out == rococo_recall(top_columns=[[2, 0], [1, 0]], top_scores=[[0.95, 0.9], [0.8, 0.2]], fill=-100,
        ...                      num_gallery=3, references=[0, 1], adversarial=[2], k=(1, 2))  # the same, compact
        True
    """
    inputs = {"predictions": predictions, "query_embeddings": query_embeddings,
              "gallery_embeddings": gallery_embeddings, "top_columns": top_columns, "top_scores": top_scores,
              "fill": fill, "num_gallery": num_gallery}
    mode = _input_mode(**inputs)
    accumulator = RankAccumulator(adversarial, ties=ties, chunk_size=chunk_size, top_items=per_query)
    _update(accumulator, mode, references, inputs)
    return accumulator.compute(k=k, per_query=per_query, bootstrap=bootstrap, seed=seed)


def _input_mode(predictions: Array = None, query_embeddings: Array = None, gallery_embeddings: Array = None,
                top_columns: Array = None, top_scores: Array = None, fill: float | None = None,
                num_gallery: int | None = None) -> str:
    """How the scores are given (``"predictions"``, ``"embeddings"`` or ``"top_k"``): the one check of the inputs."""
    given = [name for name, value in (("predictions", predictions), ("query_embeddings", query_embeddings),
                                      ("top_columns", top_columns)) if value is not None]
    if gallery_embeddings is not None and "query_embeddings" not in given:
        given.append("gallery_embeddings")
    if len(given) > 1:
        raise ValueError(f"give one of `predictions`, `query_embeddings` and `gallery_embeddings`, or `top_columns` "
                         f"and `top_scores`, not several: got {', '.join(given)}")
    if top_columns is None and top_scores is None and (fill is not None or num_gallery is not None):
        raise ValueError("`fill` and `num_gallery` describe a compact score matrix: give them with `top_columns` "
                         "and `top_scores`")
    if predictions is not None:
        return "predictions"
    if query_embeddings is not None and gallery_embeddings is not None:
        return "embeddings"
    if top_columns is not None or top_scores is not None:
        return "top_k"
    raise ValueError("`predictions` is required (or both `query_embeddings` and `gallery_embeddings`, or "
                     "`top_columns` and `top_scores`)")


def _update(accumulator: RankAccumulator, mode: str, references: Array, inputs: dict) -> None:
    """Rank a block of queries whose scores come as ``mode`` (:func:`_input_mode`) says, from ``inputs`` (its arguments
    by name), into ``accumulator``: the one path of :func:`rococo_recall` and of the evaluate class's ``add_batch``."""
    if mode == "predictions":
        accumulator.update(inputs["predictions"], references)
    elif mode == "embeddings":
        accumulator.update_embeddings(inputs["query_embeddings"], inputs["gallery_embeddings"], references)
    else:
        accumulator.update_top_k(inputs["top_columns"], inputs["top_scores"], references, fill=inputs["fill"],
                                 num_gallery=inputs["num_gallery"])


class RankAccumulator:
    """Turn blocks of query rows into per-query ranks, keeping nothing of the scores: the result equals
    :func:`rococo_recall` on the whole matrix; a ``ValueError`` keeps nothing; ``top_items=False``: no ``per_query``.

    Example:
        >>> acc = RankAccumulator(adversarial=[2])
        >>> acc.update([[0.9, 0.1, 0.95]], references=[0])
        >>> acc.update([[0.2, 0.8, 0.1]], references=[1])
        >>> acc.compute(k=1)["recall@1"]
        50.0
    """

    def __init__(self, adversarial: Array = None, *, ties: str = "pessimistic", chunk_size: int | None = None,
                 top_items: bool = True):
        if ties not in TIE_POLICIES:
            raise ValueError(f"`ties` must be one of {TIE_POLICIES}, got {ties!r}")
        if chunk_size is not None and (not _is_integer(chunk_size) or chunk_size < 1):
            raise ValueError(f"`chunk_size` must be a positive int, got {chunk_size!r}")
        self.ties, self.chunk_size, self.top_items, self._adversarial_arg = ties, chunk_size, top_items, adversarial
        self.adversarial: np.ndarray | None = None  # the mask and the gallery size, from the first block kept
        self.num_gallery: int | None = None
        self.num_queries = 0
        self._blocks: list[QueryRanks] = []

    def update(self, scores: Array, references: Array) -> None:
        """Add the rows of ``scores`` (queries x gallery) and their ``references``."""
        scores = _as_matrix(scores)
        self._add("predictions", references, *scores.shape, [(0, scores)], chunk_size=self.chunk_size)

    def update_embeddings(self, query_embeddings: Array, gallery_embeddings: Array, references: Array) -> None:
        """Add queries given as embeddings; scores are their dot products with ``gallery_embeddings``."""
        self._add("embeddings", references, *_embedding_blocks(query_embeddings, gallery_embeddings, self.chunk_size))

    def update_top_k(self, top_columns: Array, top_scores: Array, references: Array, *, fill: float,
                     num_gallery: int) -> None:
        """Add queries given as a compact score matrix (see ``top_columns``), made whole and ranked block by block."""
        columns, scores, fill = _top_k_arrays(top_columns, top_scores, fill, num_gallery)
        rows = self.chunk_size or score_block_rows(num_gallery)

        def whole(start: int) -> tuple[int, np.ndarray]:
            block = np.full((len(columns[start:start + rows]), num_gallery), fill, dtype=scores.dtype)
            np.put_along_axis(block, columns[start:start + rows], scores[start:start + rows], axis=1)
            return start, block
        self._add("top_scores", references, len(columns), num_gallery, map(whole, range(0, len(columns), rows)),
                  fill=fill, unlisted=columns.shape[1] < num_gallery)

    def compute(self, *, k: int | Sequence[int] = DEFAULT_K, per_query: bool = False, bootstrap: int = 0,
                seed: int | None = 0) -> dict:
        """Return the metric's outputs for every query added so far."""
        if not self._blocks:
            raise ValueError("no queries were added: pass `predictions` (or embeddings) and `references`")
        if per_query and not self.top_items:
            raise ValueError("`per_query` needs each query's top-1 item: create the RankAccumulator with "
                             "top_items=True")
        return summarize(QueryRanks.concatenate(self._blocks), self.num_gallery, int(self.adversarial.sum()), k=k,
                         per_query=per_query, bootstrap=bootstrap, seed=seed)

    def _add(self, source: str, references: Array, num_queries: int, num_gallery: int,
             blocks: Iterable[tuple[int, Array]], chunk_size: int | None = None, fill: np.generic | None = None,
             unlisted: bool = False) -> None:
        """Check a call's references against the blocks kept, then rank its ``blocks`` of score rows (``(first row,
        scores)`` of the argument ``source``) and keep them; with ``fill``, rows of a compact matrix."""
        if self.num_gallery is None:
            adversarial = _adversarial_mask(self._adversarial_arg, num_gallery)
        elif num_gallery != self.num_gallery:
            raise ValueError(f"every block must score the same gallery: got {num_gallery} gallery items after "
                             f"{self.num_gallery}")
        else:
            adversarial = self.adversarial
        refs, valid = _reference_table(references, num_queries, len(adversarial), adversarial)
        compact = fill is not None
        if self._blocks and (self._blocks[0].rank_low is not None) != compact:  # only compact rows have bounds
            raise ValueError("this accumulator holds full score rows: add compact rows to another one" if compact else
                             "this accumulator holds compact (top-k) rows: add full score rows to another one")
        ranked = []
        for start, scores in blocks:
            part = slice(start, start + scores.shape[0])
            ranks = _rank_rows(scores, refs[part], valid[part], adversarial, self.ties, chunk_size,
                               (source, self.num_queries, start), self.top_items)
            ranked.append(_with_fill_bounds(ranks, scores, fill, refs[part], adversarial, unlisted) if compact
                          else ranks)
        self.num_gallery, self.adversarial = len(adversarial), adversarial
        self._blocks.extend(ranked)
        self.num_queries += num_queries


@dataclass(frozen=True)
class QueryRanks:
    """Per-query results of a block of rows: the arrays of ``per_query`` (``top_*`` and ``best_correct_*`` only with
    ``top_items``), and from a compact matrix their bounds over the orders of its ties at ``fill``."""

    rank: np.ndarray
    clean_rank: np.ndarray
    top1_adversarial: np.ndarray
    top_index: np.ndarray | None
    top_score: np.ndarray | None
    best_correct_index: np.ndarray | None
    best_correct_score: np.ndarray | None
    rank_low: np.ndarray | None = None
    rank_high: np.ndarray | None = None
    clean_rank_low: np.ndarray | None = None
    clean_rank_high: np.ndarray | None = None
    top1_settled: np.ndarray | None = None

    @classmethod
    def concatenate(cls, blocks: Sequence[QueryRanks]) -> QueryRanks:
        """The results of ``blocks`` of consecutive queries, one after the other."""
        return cls(*(None if getattr(blocks[0], field.name) is None
                     else np.concatenate([getattr(block, field.name) for block in blocks]) for field in fields(cls)))


# The per-query outputs (the fields of QueryRanks) and their dtypes.
_RANK_FIELDS = (("rank", "int64"), ("clean_rank", "int64"), ("top1_adversarial", "bool"), ("top_index", "int64"),
                ("top_score", "float64"), ("best_correct_index", "int64"), ("best_correct_score", "float64"))
PER_QUERY_KEYS = tuple(name for name, _ in _RANK_FIELDS)  # the names of the per-query outputs, in their order


def summarize(ranks: QueryRanks, num_gallery: int, num_adversarial: int, *, k: int | Sequence[int] = DEFAULT_K,
              per_query: bool = False, bootstrap: int = 0, seed: int | None = 0) -> dict:
    """Turn per-query ranks into the metric's outputs (percentages as the official code computes them).

    Example:
        >>> ranks = QueryRanks(np.array([1, 0]), np.array([0, 0]), np.array([True, False]), np.array([2, 1]),
        ...                    np.array([0.95, 0.8]), np.array([0, 1]), np.array([0.9, 0.8]))
        >>> summarize(ranks, num_gallery=3, num_adversarial=1, k=1)["attack_success_rate"]
        50.0
    """
    ks = _check_options(k, bootstrap, seed, num_gallery)
    names, indicators = _indicators(ranks, ks)
    num_queries = len(ranks.rank)
    result = percentages(names, indicators.sum(axis=0, dtype=np.int64), num_queries, ks)
    bounds = _fill_tie_bounds(ranks, ks, names, indicators)
    result.update(num_queries=num_queries, num_gallery=int(num_gallery), num_adversarial=int(num_adversarial))
    if bootstrap:
        rng, weights = np.random.default_rng(seed), indicators.astype(np.int64)
        draws = [percentages(names, np.bincount(rng.integers(0, num_queries, num_queries), minlength=num_queries)
                              @ weights, num_queries, ks) for _ in range(bootstrap)]
        for key in [key for key in result if not key.startswith("num_") and key not in bounds]:
            low, high = np.nanpercentile(np.array([draw[key] for draw in draws], dtype=np.float64), [2.5, 97.5])
            result[f"{key}_ci"] = (float(low), float(high))
    result.update((f"{key}_bounds", interval) for key, interval in bounds.items())
    if per_query:
        result.update((name, getattr(ranks, name)) for name, _ in _RANK_FIELDS)
    return result


def _indicators(ranks: QueryRanks, ks: tuple[int, ...]) -> tuple[list[str], np.ndarray]:
    """Per query (rows), whether it counts for each recall, the false rate, a clean top-1 and an attack success."""
    columns = {f"recall@{kk}": ranks.rank < kk for kk in ks}
    columns.update((f"clean_recall@{kk}", ranks.clean_rank < kk) for kk in ks)
    columns.update(false_rate=ranks.top1_adversarial, clean_top1=ranks.clean_rank == 0,
                   attacked=(ranks.clean_rank == 0) & (ranks.rank > 0))
    return list(columns), np.stack(list(columns.values()), axis=1)


def percentages(names: list[str], counts: Sequence[int], num_queries: int, ks: tuple[int, ...]) -> dict:
    """The percentages, in output order, from the queries counted by each indicator: ``names`` holds ``recall@K`` and
    ``clean_recall@K`` for each K in ``ks``, ``false_rate``, ``clean_top1`` and ``attacked`` (see ``_indicators``)."""
    count = dict(zip(names, (int(c) for c in counts)))
    out = {}
    for prefix in ("", "clean_"):
        recalls = [100.0 * count[f"{prefix}recall@{kk}"] / num_queries for kk in ks]
        out.update({f"{prefix}recall@{kk}": r for kk, r in zip(ks, recalls)})
        out[f"{prefix}r_mean"] = sum(recalls) / len(recalls)
        if not prefix:
            out["false_rate"] = 100.0 * count["false_rate"] / num_queries
    hits = count["clean_top1"]
    out["attack_success_rate"] = 100.0 * count["attacked"] / hits if hits else float("nan")
    return out


def _fill_tie_bounds(ranks: QueryRanks, ks: tuple[int, ...], names: list[str],
                     indicators: np.ndarray) -> dict[str, tuple[float, float]]:
    """``{name: (lowest, highest)}`` of each percentage that the order of a compact matrix's ties at ``fill`` decides
    (one order, the worst or the best for every undecided query at once, reaches each end)."""
    if ranks.rank_low is None:
        return {}
    _, at_low = _indicators(replace(ranks, rank=ranks.rank_low, clean_rank=ranks.clean_rank_low), ks)
    _, at_high = _indicators(replace(ranks, rank=ranks.rank_high, clean_rank=ranks.clean_rank_high), ks)
    undecided = at_low != at_high
    undecided[:, names.index("false_rate")] = ~ranks.top1_settled
    fewest = (indicators & ~undecided).sum(axis=0, dtype=np.int64)
    low, high = (percentages(names, counts, len(ranks.rank), ks)
                 for counts in (fewest, fewest + undecided.sum(axis=0, dtype=np.int64)))
    bounds = {}
    for prefix in ("", "clean_"):
        recalls = [f"{prefix}recall@{kk}" for kk in ks]
        bounds.update((name, (low[name], high[name])) for name in recalls if low[name] != high[name])
        if any(name in bounds for name in recalls):
            bounds[f"{prefix}r_mean"] = (low[f"{prefix}r_mean"], high[f"{prefix}r_mean"])
    if low["false_rate"] != high["false_rate"]:
        bounds["false_rate"] = (low["false_rate"], high["false_rate"])
    # The attack success rate: in some order a query is a clean hit that stays (10), one the attack flips (11) or no
    # clean hit (00). The lowest rate takes 10 wherever it can, 11 only where nothing else can be; the highest: reverse.
    adversarial_at_fill = (ranks.rank_high - ranks.rank_low) - (ranks.clean_rank_high - ranks.clean_rank_low)
    can_stay = ranks.rank_low == 0
    can_flip = (ranks.clean_rank_low == 0) & ((ranks.rank_low > 0) | (adversarial_at_fill > 0))
    can_miss = ranks.clean_rank_high > 0
    if (can_stay | can_flip).any():
        only_flip, only_stay = can_flip & ~can_stay & ~can_miss, can_stay & ~can_flip & ~can_miss
        hits = int(can_stay.sum() + only_flip.sum())
        lowest = 100.0 * int(only_flip.sum()) / hits if hits else 100.0
        hits = int(can_flip.sum() + only_stay.sum())
        highest = 100.0 * int(can_flip.sum()) / hits if hits else 0.0
        if lowest != highest or can_miss.all():
            bounds["attack_success_rate"] = (lowest, highest)
    return bounds


def embedding_score_blocks(query_embeddings: Array, gallery_embeddings: Array, *,
                           chunk_size: int | None = None) -> Iterator[tuple[int, Array]]:
    """Yield ``(first row, scores)``: the score matrix of embeddings block by block as the metric makes it, so that a
    saved matrix (``rococo-eval run --save-scores``) holds the bits it ranks (BLAS rounds by the product's shape).

    Example:
        >>> queries = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=np.float32)
        >>> [(start, block.tolist()) for start, block in embedding_score_blocks(queries, queries[:2], chunk_size=2)]
        [(0, [[1.0, 0.0], [0.0, 1.0]]), (2, [[1.0, 1.0]])]
    """
    if chunk_size is not None and (not _is_integer(chunk_size) or chunk_size < 1):
        raise ValueError(f"`chunk_size` must be a positive int, got {chunk_size!r}")
    return _embedding_blocks(query_embeddings, gallery_embeddings, chunk_size)[2]


def score_block_rows(num_gallery: int, *, on_gpu: bool = False) -> int:
    """Query rows per block of scores made from embeddings: about 32 MB of scores (16 MB on a GPU), 1 to 4096.

    Example:
        >>> score_block_rows(50010), score_block_rows(10), score_block_rows(50010, on_gpu=True)
        (167, 4096, 83)
    """
    return _rows_per_block(num_gallery, _GPU_BLOCK_BYTES if on_gpu else _SCORE_BLOCK_BYTES)


# --- Validation: every check of the arguments, before anything is kept (errors name the argument)

_NUMPY_FLOATS = (np.float16, np.float32, np.float64, np.longdouble)
_EXACT_IN_FLOAT64 = 2**53


def _as_matrix(values: Array, name: str = "predictions", check_finite: bool = False) -> Array:
    """``values`` as a non-empty 2-D matrix that the ranking compares exactly, or a ``ValueError``: NumPy and torch
    floats as given, ints (up to 2**53) and bools as float64, other floats of 16 bits or less as float32."""
    if _is_torch(values):
        import torch
        matrix = values.detach()
        if matrix.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            pass
        elif matrix.is_floating_point() and matrix.element_size() <= 2:  # float8 formats: float32 holds them exactly
            matrix = matrix.float()
        elif matrix.dtype == torch.bool or not (matrix.is_floating_point() or matrix.is_complex()):
            if matrix.element_size() == 8 and matrix.numel() and int(matrix.abs().max()) > _EXACT_IN_FLOAT64:
                raise ValueError(f"`{name}` holds integers beyond 2**53, which float64 cannot compare exactly: rescale "
                                 "them or pass floats")
            matrix = matrix.double()
        else:
            raise ValueError(f"`{name}` must hold real numbers (float16, bfloat16, float32, float64, ints), "
                             f"got dtype {matrix.dtype}")
    else:
        if isinstance(values, np.ma.MaskedArray):
            raise ValueError(f"`{name}` is a masked array: its mask would be ignored; fill the masked scores "
                             "first, e.g. with a score below every real one")
        try:
            matrix = np.asarray(values)
        except (ValueError, TypeError) as error:
            raise ValueError(f"`{name}` must be a 2-D matrix (queries x gallery) of numbers: {error}") from None
        dtype = matrix.dtype
        if dtype.kind in "iub":
            if dtype.itemsize == 8 and matrix.size and int(np.abs(matrix).max()) > _EXACT_IN_FLOAT64:
                raise ValueError(f"`{name}` holds integers beyond 2**53, which float64 cannot compare exactly: rescale "
                                 "them or pass floats")
            matrix = matrix.astype(np.float64)
        elif dtype.type not in _NUMPY_FLOATS:
            converted = None
            if dtype.kind in "fV" and dtype.names is None and dtype.itemsize <= 2:
                try:  # a float format of at most 16 bits from ml_dtypes (bfloat16, float8_*): float32 holds it exactly
                    converted = matrix.astype(np.float32)
                except (TypeError, ValueError):
                    pass
            if converted is None or not np.array_equal(converted.astype(dtype).view(np.uint8), matrix.view(np.uint8)):
                raise ValueError(f"`{name}` must hold real numbers (float16, bfloat16, float32, float64, long double, "
                                 f"ints), got dtype {dtype}")
            matrix = converted
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"`{name}` must be a non-empty 2-D matrix (queries x gallery), got shape "
                         f"{tuple(matrix.shape)}")
    if check_finite:
        finite = matrix.isfinite() if _is_torch(matrix) else np.isfinite(matrix)
        if not bool(finite.all()):
            row, col = (int(i) for i in (~finite).nonzero()[0]) if _is_torch(matrix) else np.argwhere(~finite)[0]
            raise ValueError(f"`{name}` must be finite: {name}[{row}][{col}] is {float(matrix[row, col])}")
    return matrix


def _embedding_blocks(query_embeddings: Array, gallery_embeddings: Array,
                      chunk_size: int | None) -> tuple[int, int, Iterator[tuple[int, Array]]]:
    """The numbers of queries and gallery items of checked embeddings, and their :func:`embedding_score_blocks`."""
    queries = _as_matrix(query_embeddings, name="query_embeddings", check_finite=True)
    gallery = _as_matrix(gallery_embeddings, name="gallery_embeddings", check_finite=True)
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"`query_embeddings` and `gallery_embeddings` must have the same width, got "
                         f"{queries.shape[1]} and {gallery.shape[1]}")
    rows = chunk_size or score_block_rows(len(gallery), on_gpu=_is_torch(queries) and queries.device.type != "cpu")
    return len(queries), len(gallery), ((start, queries[start:start + rows] @ gallery.T)
                                        for start in range(0, len(queries), rows))


def _adversarial_mask(adversarial: Array, num_gallery: int) -> np.ndarray:
    """The boolean mask of the adversarial items, from a mask or from indices (0/1 ints for each item: refused)."""
    if adversarial is None:
        return np.zeros(num_gallery, dtype=bool)
    values = adversarial.detach().cpu().numpy() if _is_torch(adversarial) else np.asarray(adversarial)
    if values.ndim != 1:
        raise ValueError(f"`adversarial` must be a 1-D mask or list of indices, got shape {values.shape}")
    if values.dtype == bool:
        if len(values) != num_gallery:
            raise ValueError(f"`adversarial` mask must have one entry per gallery item ({num_gallery}), got "
                             f"{len(values)}")
        return values.copy()
    if len(values) and values.dtype.kind not in "iu":
        raise ValueError(f"`adversarial` must be a boolean mask or a list of ints, got dtype {values.dtype}")
    if len(values) == num_gallery and num_gallery > 1 and np.isin(values, (0, 1)).all():
        raise ValueError(f"`adversarial` has one int per gallery item ({num_gallery}), all 0 or 1: it reads as a mask "
                         "and as indices. Pass a boolean mask (e.g. np.asarray(adversarial, dtype=bool)) or the "
                         "adversarial indices (e.g. np.flatnonzero(adversarial))")
    bad = values[(values < 0) | (values >= num_gallery)]
    if len(bad):
        raise ValueError(f"`adversarial` index {int(bad[0])} is out of range for a gallery of {num_gallery}")
    unique, counts = np.unique(values, return_counts=True)
    if (counts > 1).any():  # an index list never repeats; a 0/1 int mask does (items 0 and 1 would be marked)
        raise ValueError(f"`adversarial` index {int(unique[counts > 1][0])} is given {int(counts.max())} times: pass "
                         "a boolean mask (e.g. np.asarray(adversarial, dtype=bool)) or each adversarial index once")
    mask = np.zeros(num_gallery, dtype=bool)
    mask[values.astype(np.int64)] = True
    return mask


def _reference_table(references: Array, num_queries: int, num_gallery: int,
                     adversarial: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The references as a sorted (queries x max refs) int64 table, and the mask of each query's distinct references
    in it (the other entries repeat its first reference)."""
    if references is None:
        raise ValueError("`references` is required: the correct gallery indices of each query")
    if _is_torch(references):
        references = references.detach().cpu().numpy()
    if isinstance(references, np.ndarray) and references.dtype.kind in "iu" and references.shape[1:] == (0,):
        raise ValueError(f"`references` must hold at least one gallery index per query, got shape {references.shape}")
    references = list(references)
    if len(references) != num_queries:
        raise ValueError(f"`references` must have one entry per query ({num_queries}), got {len(references)}")
    rows = [(r,) if _is_integer(r) else r for r in references]
    try:  # fast: every row sized and not empty, and the set of the values' types all ints
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        flat = [value for values in rows for value in values]
        fine = lengths.all() and all(issubclass(kind, (int, np.integer)) and kind is not bool
                                     for kind in set(map(type, flat)))
    except TypeError:
        fine = False
    for row, values in enumerate([] if fine else rows):  # else the first row at fault
        if not hasattr(values, "__len__") or not all(_is_integer(value) for value in values):
            raise ValueError(f"`references[{row}]` must be an int or a list of ints, got {references[row]!r}")
        if not len(values):
            raise ValueError(f"`references[{row}]` is empty: every query needs at least one correct item")
    row_of = np.repeat(np.arange(len(rows)), lengths)
    outside = [position for position, value in enumerate(flat) if not 0 <= value < num_gallery]
    if outside:
        row, value = int(row_of[outside[0]]), int(flat[outside[0]])  # int(): exact, whatever the int type
        if value < 0:
            raise ValueError(f"`references[{row}]` holds a negative index: {references[row]!r}")
        raise ValueError(f"`references[{row}]` holds {value}, out of range for a gallery of {num_gallery}")
    table = np.full((len(rows), int(lengths.max())), -1, dtype=np.int64)
    table[row_of, np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)] = flat
    full_rows = lengths == num_gallery
    if num_gallery > 1 and full_rows.any() and np.isin(table[full_rows], (0, 1)).all():
        raise ValueError(f"`references[{int(np.flatnonzero(full_rows)[0])}]` has one int per gallery item "
                         f"({num_gallery}), all 0 or 1: it reads as a relevance mask, but `references` takes the "
                         "correct gallery indices of each query (e.g. [np.flatnonzero(row).tolist() for row in "
                         "relevance])")
    table.sort(axis=1)
    padding = table < 0
    valid = ~padding
    valid[:, 1:] &= table[:, 1:] != table[:, :-1]
    table = np.where(valid, table, table[np.arange(len(table)), padding.sum(axis=1)][:, None])
    hits_adversarial = adversarial[table] & valid
    if hits_adversarial.any():
        row, col = np.argwhere(hits_adversarial)[0]
        raise ValueError(f"`references[{row}]` points at gallery item {table[row, col]}, which `adversarial` marks "
                         "as adversarial")
    return table, valid


def _top_k_arrays(top_columns: Array, top_scores: Array, fill: float,
                  num_gallery: int) -> tuple[np.ndarray, np.ndarray, np.generic]:
    """A compact score matrix's arguments, checked: int64 columns, finite scores as :func:`_as_matrix` keeps them,
    and ``fill`` in the scores' dtype (which must hold it exactly)."""
    if top_columns is None or top_scores is None:
        raise ValueError("a compact score matrix needs both `top_columns` and `top_scores`")
    if not _is_integer(num_gallery) or num_gallery < 1:
        raise ValueError(f"`num_gallery` must be a positive int (the gallery size of the compact matrix), "
                         f"got {num_gallery!r}")
    try:
        columns = top_columns.detach().cpu().numpy() if _is_torch(top_columns) else np.asarray(top_columns)
    except ValueError:
        raise ValueError("`top_columns` must be a non-empty 2-D matrix of ints (queries x listed candidates), the "
                         "same number per query: its rows have different lengths") from None
    if columns.dtype.kind not in "iu" or columns.ndim != 2 or 0 in columns.shape:
        raise ValueError(f"`top_columns` must be a non-empty 2-D matrix of ints (queries x listed candidates), got "
                         f"{columns.dtype} of shape {columns.shape}")
    if columns.shape[1] > num_gallery:
        raise ValueError(f"`top_columns` lists {columns.shape[1]} candidates per query, more than the gallery size "
                         f"`num_gallery` = {num_gallery}")
    outside = (columns < 0) | (columns >= num_gallery)
    if outside.any():
        row, col = (int(i) for i in np.argwhere(outside)[0])
        raise ValueError(f"`top_columns[{row}][{col}]` is {int(columns[row, col])}, out of range for a gallery of "
                         f"{num_gallery}")
    columns = columns.astype(np.int64)
    ordered = np.sort(columns, axis=1)
    repeated = ordered[:, 1:] == ordered[:, :-1]
    if repeated.any():
        row, col = (int(i) for i in np.argwhere(repeated)[0])
        raise ValueError(f"`top_columns[{row}]` lists column {int(ordered[row, col])} twice: each listed candidate "
                         "has one score")
    if _is_torch(top_scores):
        top_scores = top_scores.detach().cpu()
        top_scores = (top_scores.float() if top_scores.is_floating_point() and top_scores.element_size() <= 2
                      else top_scores).numpy()
    try:
        shape = tuple(top_scores.shape) if hasattr(top_scores, "shape") else np.shape(top_scores)
    except ValueError:
        raise ValueError(f"`top_scores` must be a 2-D matrix of the shape of `top_columns` {columns.shape}: its rows "
                         "have different lengths") from None
    if shape != columns.shape:
        raise ValueError(f"`top_scores` must have the shape of `top_columns` {columns.shape}, got {shape}")
    scores = np.asarray(_as_matrix(top_scores, name="top_scores", check_finite=True))
    value = np.asarray(fill) if fill is not None else None
    if value is None or value.size != 1 or value.dtype.kind not in "fiu" or not np.isfinite(value).all():
        raise ValueError(f"`fill` must be one finite number, the score of every candidate not listed "
                         f"(BLIP: -100), got {fill!r}")
    fill_value = value.reshape(()).astype(scores.dtype)
    if float(fill_value) != float(value.reshape(())):
        raise ValueError(f"`fill` {float(value.reshape(()))!r} is not exactly a {scores.dtype} number, the dtype of "
                         f"`top_scores`: give a fill value that dtype holds")
    return columns, scores, fill_value


def _check_options(k: int | Sequence[int], bootstrap: int, seed: int | None, num_gallery: int) -> tuple[int, ...]:
    """The options of a result, checked; the cut-offs ``k`` as a tuple of ints."""
    if not _is_integer(k) and (isinstance(k, (str, bytes)) or not hasattr(k, "__iter__")):
        raise ValueError(f"`k` must be an int or a sequence of ints, got {k!r}")
    ks = (k,) if _is_integer(k) else tuple(k)
    if not ks:
        raise ValueError("`k` must name at least one cut-off")
    for kk in ks:
        if not _is_integer(kk) or not 1 <= kk <= num_gallery:
            raise ValueError(f"`k` values must be ints from 1 to the gallery size {num_gallery}, got {kk!r}")
    if not _is_integer(bootstrap) or bootstrap < 0:
        raise ValueError(f"`bootstrap` must be a non-negative int, got {bootstrap!r}")
    if seed is not None and (not _is_integer(seed) or seed < 0):  # None: NumPy's fresh entropy
        raise ValueError(f"`seed` must be a non-negative int or None, got {seed!r}")
    return tuple(int(kk) for kk in ks)


def _check_query_index(query_index: Array, num_queries: int, earlier: dict) -> np.ndarray:
    """``query_index`` as int64, checked: one non-negative int per query of a batch, none seen ``earlier``."""
    values = query_index.detach().cpu().numpy() if _is_torch(query_index) else np.asarray(query_index)
    if values.shape != (num_queries,):
        raise ValueError(f"`query_index` must hold one int per query ({num_queries}), got shape {values.shape}")
    if values.dtype.kind not in "iu":
        raise ValueError(f"`query_index` must hold ints, got dtype {values.dtype}")
    if (values < 0).any():
        raise ValueError(f"`query_index` must be non-negative, got {int(values[values < 0][0])}")
    unique, counts = np.unique(values, return_counts=True)
    repeated = unique[counts > 1].tolist() + [index for index in unique.tolist() if index in earlier]
    if repeated:
        raise ValueError(f"`query_index` {min(repeated)} was given twice: add every query once (a sampler that pads "
                         "its shards to equal length, as DistributedSampler does, repeats queries; shard without "
                         "padding instead, e.g. range(rank, num_queries, world_size))")
    return values.astype(np.int64)


def _not_finite(origin: tuple[str, int, int], values: np.ndarray, row: int) -> ValueError:
    """The error for the row ``row`` of a block, ``values``, with a non-finite score, named as the user gave it:
    ``origin`` is the argument, the queries that earlier calls added and the argument's row that starts the block."""
    source, queries_before, block_start = origin
    col = int(np.flatnonzero(~np.isfinite(values))[0])
    row += block_start
    among = f" (query {queries_before + row} of all added)" if queries_before else ""
    if source != "embeddings":  # the argument holds the score
        return ValueError(f"`{source}` must be finite: {source}[{row}][{col}] is {values[col]}{among}")
    return ValueError(f"the scores of `query_embeddings` and `gallery_embeddings` must be finite: the dot product of "
                      f"query_embeddings[{row}] and gallery_embeddings[{col}] is {values[col]}{among}, although both "
                      "are finite (it overflows their dtype: normalise the embeddings or pass them in float64)")


def _is_integer(value: Any) -> bool:
    """Whether ``value`` is an int or a NumPy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_torch(value: Any) -> bool:
    """Whether ``value`` is a torch object (checked without importing torch)."""
    return type(value).__module__.startswith("torch")


# --- Ranking by counting, block by block of score rows: NumPy in threads, torch on the tensor's own device

_RANK_BLOCK_BYTES = 5 << 19  # 2.5 MB of scores (4 bytes each) a block: read once, passed over while in cache
_SCORE_BLOCK_BYTES = 1 << 25  # 32 MB of scores made from embeddings at once (2.5 MB: 1.7-3.9x slower; 128 MB: same)
_GPU_BLOCK_BYTES = 1 << 24  # 16 MB on a GPU: few launches, temporaries under 10% of a RoCOCO-size matrix
_MAX_BLOCK_ROWS = 4096  # so that a narrow gallery still gives several blocks for the threads to share
_NUM_THREADS = max(1, min(8, os.cpu_count() or 1))  # NumPy frees the GIL while it counts
_BITS_IN_BYTE = np.array([bin(byte).count("1") for byte in range(256)], dtype=np.uint8)  # NumPy 1 has no bitwise_count


def _rank_rows(scores: Array, refs: np.ndarray, valid: np.ndarray, adversarial: np.ndarray, ties: str,
               chunk_size: int | None, origin: tuple[str, int, int], top_items: bool = True) -> QueryRanks:
    """Per-query results of the rows of ``scores`` by counting (wrong items above the best correct one), as
    ``tests/helpers/reference_metric.py`` gets them by sorting; a row with a non-finite score is refused."""
    if _is_torch(scores):
        return _rank_rows_torch(scores, refs, valid, adversarial, ties, chunk_size, origin)
    pessimistic = ties == "pessimistic"
    num_queries, num_gallery = scores.shape
    dtype = np.dtype(np.float32) if scores.dtype == np.float16 else scores.dtype  # float16 compares exactly in float32
    queries = np.arange(num_queries)
    ref_scores = scores[queries[:, None], refs].astype(dtype)
    best_position = ref_scores.argmax(axis=1)  # refs are sorted: the first of equal scores is the lowest column
    best = ref_scores[queries, best_position]
    best_index = refs[queries, best_position]
    # pessimistic, the comparison with the best correct score counts the correct items at that score: taken off
    tied_refs = ((ref_scores == best[:, None]) & valid).sum(axis=1) if pessimistic else np.zeros(num_queries, int)
    compare = np.greater_equal if pessimistic else np.greater
    adversarial_bits = np.packbits(adversarial)
    # the top-1 item: at the row's maximum, the item of the largest key (kind's place in the tie order, column reversed)
    reversed_columns = np.arange(num_gallery - 1, -1, -1)
    adversarial_kind, correct_kind = (2, 0) if pessimistic else (0, 2)  # of 3 kinds; 2 comes first
    wrong_keys = np.where(adversarial, adversarial_kind, 1) * num_gallery + reversed_columns
    correct_keys = correct_kind * num_gallery + reversed_columns
    rows = chunk_size or _rows_per_block(num_gallery, _RANK_BLOCK_BYTES)

    def rank_block(start: int) -> tuple[np.ndarray, ...]:
        """A block's rows: finite sum, rank, clean rank, adversarial top-1, and top-1 item and score (or empty)."""
        part = slice(start, start + rows)
        block = np.asarray(scores[part], dtype=dtype)
        finite = np.isfinite(np.einsum("ij->i", block))
        above = np.packbits(compare(block, best[part, None]), axis=1)
        rank = _count_bits(above) - tied_refs[part]
        adversarial_above = _count_bits(above & adversarial_bits)
        clean_rank = rank - adversarial_above
        top1 = adversarial_above > 0
        mixed = np.flatnonzero(top1 & (clean_rank > 0))  # both kinds above: the kind at the top decides
        mixed_rows = block[mixed]
        at_top = np.packbits(mixed_rows >= mixed_rows.max(axis=1, keepdims=True), axis=1)
        top1[mixed] = ((at_top & adversarial_bits).any(axis=1) if pessimistic
                       else ~(at_top & ~adversarial_bits).any(axis=1))
        if not top_items:
            return finite, rank, clean_rank, top1, np.zeros(0, np.int64), np.zeros(0)
        top_index, top_score = best_index[part].copy(), best[part].astype(np.float64)
        beaten = np.flatnonzero(rank > 0)
        beaten_rows = block[beaten]
        top = beaten_rows.max(axis=1)
        row, column = np.divmod(np.flatnonzero(beaten_rows == top[:, None]), num_gallery)  # by row, columns ascending
        if len(row):
            correct = (refs[part][beaten][row] == column[:, None]).any(axis=1)
            key = np.where(correct, correct_keys[column], wrong_keys[column])
            starts = np.flatnonzero(np.diff(row, prepend=-1))
            first = np.maximum.reduceat(key, starts)
            top_index[beaten[row[starts]]] = num_gallery - 1 - first % num_gallery
            top_score[beaten[row[starts]]] = top[row[starts]].astype(np.float64)
        return finite, rank, clean_rank, top1, top_index, top_score

    starts = range(0, num_queries, rows)
    threads = min(_NUM_THREADS, len(starts))  # thread t of n ranks blocks t, t + n, ... (a task per block costs more)
    if threads <= 1:
        blocks = [rank_block(start) for start in starts]
    else:
        with ThreadPoolExecutor(threads) as pool:
            strides = list(pool.map(lambda first: [rank_block(start) for start in starts[first::threads]],
                                    range(threads)))
        blocks = [strides[index % threads][index // threads] for index in range(len(starts))]
    finite, rank, clean_rank, top1, top_index, top_score = (np.concatenate(parts) for parts in zip(*blocks))
    for query in np.flatnonzero(~finite):  # a non-finite score (or finite ones whose sum overflows: checked again)
        values = np.asarray(scores[query], dtype=dtype)
        if not np.isfinite(values).all():
            raise _not_finite(origin, values, int(query))
    top = (top_index, top_score, best_index, best.astype(np.float64)) if top_items else (None, None, None, None)
    return QueryRanks(rank, clean_rank, top1, *top)


def _count_bits(words: np.ndarray) -> np.ndarray:
    """The number of set bits in each row of the uint8 matrix ``words``, as int64."""
    counts = np.bitwise_count(words) if hasattr(np, "bitwise_count") else _BITS_IN_BYTE[words]
    return counts.sum(axis=1, dtype=np.int64)


def _rows_per_block(num_gallery: int, block_bytes: int) -> int:
    """How many query rows make a block of about ``block_bytes`` of scores (4 bytes each), 1 to _MAX_BLOCK_ROWS."""
    return max(1, min(_MAX_BLOCK_ROWS, block_bytes // (4 * num_gallery)))


def _rank_rows_torch(scores: Any, refs: np.ndarray, valid: np.ndarray, adversarial: np.ndarray, ties: str,
                     chunk_size: int | None, origin: tuple[str, int, int]) -> QueryRanks:
    """:func:`_rank_rows` on the tensor's own device; only per-query results are copied back, once."""
    import torch
    pessimistic = ties == "pessimistic"
    adversarial_t, refs_t, valid_t = (torch.as_tensor(a, device=scores.device) for a in (adversarial, refs, valid))
    # the tie order of the top-1 item, highest first: an item's kind, correct items set per row
    wrong_kind = torch.where(adversarial_t, 3 if pessimistic else 1, 2).to(torch.uint8)
    correct_kind = 1 if pessimistic else 3
    on_gpu = scores.device.type != "cpu"
    rows = chunk_size or _rows_per_block(scores.shape[1], _GPU_BLOCK_BYTES if on_gpu else _RANK_BLOCK_BYTES)
    results = []
    for start in range(0, scores.shape[0], rows):
        block = scores[start:start + rows]
        block_refs = refs_t[start:start + rows]
        ref_scores = block.gather(1, block_refs)
        best_position = ref_scores.argmax(dim=1, keepdim=True)  # the first of equal scores: the lowest column
        best = ref_scores.gather(1, best_position)
        above_mask = block >= best if pessimistic else block > best
        above = above_mask.sum(dim=1)
        if pessimistic:
            above -= ((ref_scores == best) & valid_t[start:start + rows]).sum(dim=1)
        clean_rank = above - (above_mask & adversarial_t).sum(dim=1)
        del above_mask  # (block-size temporaries: at most two at a time)
        top_score = block.amax(dim=1, keepdim=True)
        at_top = block == top_score
        kind = at_top * wrong_kind
        kind.scatter_(1, block_refs, at_top.gather(1, block_refs).to(torch.uint8) * correct_kind)
        del at_top
        top_index = kind.argmax(dim=1)  # the first of the highest kind at the top: the lowest column
        results.append((torch.isfinite(block).all(dim=1), above, clean_rank, adversarial_t[top_index], top_index,
                        top_score[:, 0].double(), block_refs.gather(1, best_position)[:, 0], best[:, 0].double()))
    finite, *columns = (torch.cat(column).cpu().numpy() for column in zip(*results))
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise _not_finite(origin, scores[row].double().cpu().numpy(), row)
    return QueryRanks(*(column.astype(dtype) for column, (_, dtype) in zip(columns, _RANK_FIELDS)))


def _with_fill_bounds(ranks: QueryRanks, dense: np.ndarray, fill: np.generic, refs: np.ndarray,
                      adversarial: np.ndarray, unlisted: bool) -> QueryRanks:
    """``ranks`` of rows ``dense`` of a compact matrix, with their bounds over every order of its items at ``fill``."""
    rank_low, rank_high = ranks.rank.copy(), ranks.rank.copy()
    clean_low, clean_high = ranks.clean_rank.copy(), ranks.clean_rank.copy()
    settled = np.ones(len(ranks.rank), dtype=bool)
    if unlisted:
        best = dense[np.arange(len(dense))[:, None], refs].max(axis=1)  # padding repeats a query's first reference
        tied = np.flatnonzero(best == fill)  # its rank lies between the wrong items above and at `fill` (pessimistic)
        rows = dense[tied]
        correct = np.zeros(rows.shape, dtype=bool)
        correct[np.arange(len(tied))[:, None], refs[tied]] = True
        above, at, clean = (rows > fill) & ~correct, (rows == fill) & ~correct, ~adversarial
        rank_low[tied] = above.sum(axis=1)
        rank_high[tied] = rank_low[tied] + at.sum(axis=1)
        clean_low[tied] = (above & clean).sum(axis=1)
        clean_high[tied] = clean_low[tied] + (at & clean).sum(axis=1)
        open_top = np.flatnonzero(dense.max(axis=1) == fill)  # the top-1 item: any item at `fill`
        group = dense[open_top] == fill
        kinds = (group & adversarial).sum(axis=1)
        settled[open_top] = (kinds == 0) | (kinds == group.sum(axis=1))
    return replace(ranks, rank_low=rank_low, rank_high=rank_high, clean_rank_low=clean_low,
                   clean_rank_high=clean_high, top1_settled=settled)


# --- Distributed evaluation: each process's per-query results, merged on process 0

def _merge_shards(shards: Sequence[dict]) -> tuple[QueryRanks, int, int]:
    """The per-query results of every process's shard, checked to come from one gallery, in query order: that of
    ``query_index`` when given (0 to N-1, each once), else process 0's queries as added, then process 1's, ..."""
    first = shards[0]["references"]
    for process, shard in enumerate(shards[1:], start=1):
        other = shard["references"]
        if other["num_gallery"] != first["num_gallery"]:
            raise ValueError(f"every process must score the same gallery: process {process} scored "
                             f"{other['num_gallery']} gallery items, process 0 {first['num_gallery']}")
        marks, marked = other["num_adversarial"], first["num_adversarial"]
        if (marks, other["adversarial_crc32"]) != (marked, first["adversarial_crc32"]):
            raise ValueError(f"every process must pass the same `adversarial`: process {process} marks {marks} gallery "
                             f"items, process 0 {marked}" + (", not the same ones" if marks == marked else ""))
        if other["ties"] != first["ties"]:
            raise ValueError(f"every process must pass the same `ties`: process {process} used {other['ties']!r}, "
                             f"process 0 {first['ties']!r}")
    ranks = [np.concatenate([np.asarray(shard["predictions"][name], dtype=dtype) for shard in shards])
             for name, dtype in _RANK_FIELDS]
    if first["query_index"] is not None:  # (given on every process: `compute` requires it with num_process > 1)
        index = np.concatenate([np.asarray(shard["references"]["query_index"], dtype=np.int64) for shard in shards])
        _check_query_index(index, len(index), {})  # a query added on two processes
        order = np.argsort(index, kind="stable")
        gaps = np.flatnonzero(index[order] != np.arange(len(index)))
        if len(gaps):
            raise ValueError(f"`query_index` must number the queries from 0 to {len(index) - 1}: {gaps[0]} is missing")
        ranks = [values[order] for values in ranks]
    return QueryRanks(*ranks), int(first["num_gallery"]), int(first["num_adversarial"])


def _torch_distributed_group() -> tuple[int, int] | None:
    """``(rank, world size)`` in torch.distributed's default group when one is initialised, else None."""
    if "torch" not in sys.modules:  # a program that has not imported torch has no process group
        return None
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


# --- The evaluate class: defined here where evaluate was imported first (as `evaluate.load` does), else at its first
# use (`__getattr__` below): `import evaluate` costs seconds, which scoring without the class does not pay

_COMPUTE_ARGUMENTS = ("k", "per_query", "bootstrap", "seed")
_SCORE_ARGUMENTS = ("query_embeddings", "gallery_embeddings", "top_columns", "top_scores", "fill", "num_gallery")

if sys.modules.get("evaluate") is not None:  # imported (None: marked unavailable)
    import datasets
    import evaluate

    @evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
    class RococoRecall(evaluate.Metric):
        """The RoCOCO Recall metric: ``compute`` and ``add_batch`` take score matrices directly (no Arrow); with
        ``num_process=n`` only per-query results travel (:meth:`_gather`), through ``torch.distributed`` when its
        default group has ``n`` processes, else through evaluate's cache files (``cache_dir`` seen by every process).

        Besides ``_info`` and ``_compute``, which evaluate documents for a module to define, it replaces ``add_batch``,
        ``add`` and ``compute`` (with their keyword-only parameters), and nothing else: evaluate's own encode every
        input into Arrow and give ``_compute`` Python lists (``format="numpy"`` refuses a row of scores), which
        ``benchmarks/bench_metric_arrow.py`` measured at 150-440x the time and about 12x the matrix in memory (12 GB
        for a RoCOCO matrix; docs/metric.md); a tensor would leave its GPU. These rank the scores first; only the
        per-query shards reach evaluate's own.
        """

        _accumulator: RankAccumulator | None = None  # the per-query ranks of the batches added so far
        _query_index: dict | None = None  # their `query_index` values, in the order added (as a set)

        def _info(self) -> evaluate.MetricInfo:
            int64 = datasets.Value("int64")
            features = datasets.Features({  # of a shard (see _gather)
                "predictions": {name: datasets.Sequence(datasets.Value(dtype)) for name, dtype in _RANK_FIELDS},
                "references": {"query_index": datasets.Sequence(int64), "num_gallery": int64, "num_adversarial": int64,
                               "adversarial_crc32": int64, "ties": datasets.Value("string")}})
            return evaluate.MetricInfo(description=_DESCRIPTION, citation=CITATION,
                                       inputs_description=_KWARGS_DESCRIPTION, features=features,
                                       codebase_urls=["https://github.com/pseulki/rococo"],
                                       reference_urls=["https://arxiv.org/abs/2304.10727"])

        def add_batch(self, *, predictions: Array = None, references: Array = None, adversarial: Array = None,
                      ties: str = "pessimistic", chunk_size: int | None = None, query_embeddings: Array = None,
                      gallery_embeddings: Array = None, query_index: Array = None) -> None:
            """Reduce a block of query rows to per-query ranks, keeping nothing of a refused one."""
            accumulator = self._accumulator
            first = accumulator is None
            if first:
                accumulator = RankAccumulator(adversarial, ties=ties, chunk_size=chunk_size)
            elif ties != accumulator.ties:
                raise ValueError(f"`ties` changed between batches: {accumulator.ties!r} then {ties!r}")
            elif adversarial is not None and not np.array_equal(
                    _adversarial_mask(adversarial, accumulator.num_gallery), accumulator.adversarial):
                raise ValueError("`adversarial` changed between batches: pass the same mask or indices to every batch")
            elif (query_index is None) != (self._query_index is None):
                raise ValueError("`query_index` must be given with every batch or with none")
            inputs = {"predictions": predictions, "query_embeddings": query_embeddings,
                      "gallery_embeddings": gallery_embeddings}
            mode = _input_mode(**inputs)
            rows = "predictions" if mode == "predictions" else "query_embeddings"
            inputs[rows] = _as_matrix(inputs[rows], name=rows)
            index = (None if query_index is None else
                     _check_query_index(query_index, len(inputs[rows]), self._query_index or {}))
            _update(accumulator, mode, references, inputs)
            if first:
                self._accumulator, self._query_index = accumulator, None if index is None else {}
            if index is not None:
                self._query_index.update(dict.fromkeys(index.tolist()))

        def add(self, *, prediction: Array = None, reference: Array = None, query_index: int | None = None,
                **kwargs: Any) -> None:
            """Add one query: ``prediction`` is its row of scores, ``reference`` its correct gallery indices."""
            self.add_batch(predictions=[prediction], references=[reference],
                           query_index=None if query_index is None else [query_index], **kwargs)

        def compute(self, *, predictions: Array = None, references: Array = None, **kwargs: Any) -> dict | None:
            """The result on ``predictions`` or else on the batches added (then dropped), on process 0 (others: None); a
            ``ValueError`` changes nothing, unless the processes had exchanged their results."""
            _, world_size = _torch_distributed_group() or (0, 1)
            if world_size > 1 and self.num_process == 1:
                logger.warning("torch.distributed has %d processes but the metric was loaded with num_process=1: this "
                               "result covers this process's queries only; load it with num_process=world size and "
                               "process_id=rank to get the result over all of them on process 0", world_size)
            inputs = {"predictions": predictions,
                      **{name: kwargs.pop(name) for name in _SCORE_ARGUMENTS if name in kwargs}}
            if all(value is None for value in inputs.values()):  # the batches added
                if self._accumulator is None:
                    raise ValueError("`predictions` is required (or batches added with `add_batch`)")
                unused = sorted(set(kwargs) - set(_COMPUTE_ARGUMENTS))
                if unused:
                    raise ValueError(f"{unused} belong to `add_batch`; `compute()` after batches takes only "
                                     "`k`, `per_query`, `bootstrap` and `seed`")
                return self._compute_batches(**kwargs)
            mode = _input_mode(**inputs)
            inputs = {name: value for name, value in inputs.items() if value is not None}
            if self._accumulator is not None:
                raise ValueError("batches were added with `add_batch`: call `compute()` without `predictions`")
            if mode == "top_k" and (self.num_process > 1 or kwargs.get("query_index") is not None):
                raise ValueError("a compact score matrix (`top_columns`, `top_scores`) is scored in one call, on one "
                                 "process: load the metric with num_process=1 and leave out `query_index`")
            if self.num_process == 1 and kwargs.get("query_index") is None:
                return rococo_recall(references=references, **inputs, **kwargs)
            options = {key: kwargs.pop(key) for key in _COMPUTE_ARGUMENTS if key in kwargs}
            self.add_batch(references=references, **inputs, **kwargs)
            try:
                return self._compute_batches(**options)
            finally:  # after an error too: the metric had no batches before this call
                self._drop_batches()

        def _compute_batches(self, k: int | Sequence[int] = DEFAULT_K, per_query: bool = False, bootstrap: int = 0,
                             seed: int | None = 0) -> dict | None:
            """The result over the batches added, on process 0 (None on the others); the batches are then dropped."""
            _check_options(k, bootstrap, seed, self._accumulator.num_gallery)  # before the processes exchange anything
            if self.num_process > 1 and self._query_index is None:
                raise ValueError("`query_index` is required with num_process > 1: give each batch's query positions "
                                 "(add_batch(..., query_index=...)) so that process 0 orders the queries and sees any "
                                 "added twice (as samplers that pad their shards, like DistributedSampler, do)")
            shards = self._gather()
            if self.num_process > 1:  # exchanged: spent on every process
                self._drop_batches()
            result = None if shards is None else summarize(*_merge_shards(shards), k=k, per_query=per_query,
                                                           bootstrap=bootstrap, seed=seed)
            self._drop_batches()
            return result

        def _drop_batches(self) -> None:
            """Forget the batches added: the metric holds what it held when loaded (the class's defaults)."""
            vars(self).pop("_accumulator", None)
            vars(self).pop("_query_index", None)

        def _gather(self) -> list[dict] | None:
            """This process's shard (its per-query results, their ``query_index`` and the gallery: one Arrow row of
            the metric's features), with every other process's on process 0, in process order (others: None)."""
            accumulator, query_index = self._accumulator, self._query_index
            ranked = accumulator.compute(k=1, per_query=True)
            shard = {"predictions": {name: ranked[name] for name, _ in _RANK_FIELDS}, "references": {
                "query_index": None if query_index is None else np.array([*query_index], np.int64),
                "num_gallery": accumulator.num_gallery, "num_adversarial": ranked["num_adversarial"],
                "adversarial_crc32": zlib.crc32(np.packbits(accumulator.adversarial).tobytes()),
                "ties": accumulator.ties}}
            if self.num_process == 1:
                return [shard]
            rank, world_size = _torch_distributed_group() or (None, None)
            if world_size == self.num_process:
                if rank != self.process_id:
                    raise ValueError(f"`process_id` is {self.process_id} but this process has torch.distributed rank "
                                     f"{rank}: load the metric with process_id=torch.distributed.get_rank()")
                import torch.distributed as dist
                shards = [None] * self.num_process if rank == 0 else None
                dist.gather_object(shard, shards, dst=0)
                return shards
            # evaluate's own mechanism: a rendez-vous, one cache file per process, process 0 reads them all
            super().add_batch(predictions=[shard["predictions"]], references=[shard["references"]])
            return super().compute()

        def _compute(self, predictions: list | None = None, references: list | None = None) -> list[dict]:
            """On process 0, inside evaluate's ``compute``: the shards read back from every process's cache file."""
            return [{"predictions": shard, "references": gallery} for shard, gallery in zip(predictions, references)]

else:

    def __getattr__(name: str) -> Any:
        """``rococo_recall.RococoRecall`` where evaluate was not imported before this module (PEP 562): evaluate is
        imported now, and the class is the one this file defines when run again, evaluate imported (as
        ``evaluate.load`` runs a copy of it); it is kept, so that every later use gets the same class."""
        if name != "RococoRecall":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib.util

        try:
            import evaluate  # noqa: F401  (seconds: it imports transformers' pipelines)
        except ImportError as error:
            raise AttributeError(f"rococo_recall.RococoRecall, the evaluate metric, needs the evaluate package "
                                 f"(pip install evaluate): {error}") from None
        spec = importlib.util.spec_from_file_location(__name__, __file__)
        with_evaluate = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(with_evaluate)
        globals()[name] = with_evaluate.RococoRecall
        return with_evaluate.RococoRecall


__test__ = {"RococoRecall": _KWARGS_DESCRIPTION}  # the class's example runs with the doctests, class defined or not
