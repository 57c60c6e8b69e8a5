"""RoCOCO Recall: Recall@K of an image-text matching model on a gallery with adversarial items.

RoCOCO (Park et al. 2023, arXiv:2304.10727) adds altered captions or altered images to the MS-COCO 5K
retrieval gallery and measures whether the model still ranks a true item first. This module is a
Hugging Face ``evaluate`` metric and is self-contained: ``evaluate.load`` copies it alone.

The dense score matrix never goes through Arrow: ``compute`` and ``add_batch`` reduce each block of query
rows to a few numbers per query (rank on the whole gallery, rank on the clean gallery, the top-1 item and the
best correct item with their scores) as soon as they see it, by counting, without sorting the matrix or copying
it. Each block (about 2.5 MB of scores) is read from memory once and passed over while it is in cache: by NumPy,
or, where numba is installed (``pip install rococo-eval[fast]``), by a compiled kernel that counts in one pass per
row and passes over a row again only to find its top-1 item among the items above the truth. Both give identical
results. The environment variable ``ROCOCO_RECALL_KERNEL=numpy`` keeps to NumPy, ``numba`` insists on the kernel;
unset, the kernel ranks matrices of 2**22 scores and more where numba is installed (see ``_kernel``).
"""

# One file, by choice: evaluate 0.4.6 copies helpers beside it (local folder or Space: get_imports and
# _download_additional_modules in evaluate/loading.py) only for unindented `from .helper import x` lines, and such an
# import fails where this file is the top-level module `rococo_recall` (the py-modules install, rococo_eval, the
# tests): "attempted relative import with no known parent package". An indented fallback import is not copied.

import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "CITATION",
    "DEFAULT_K",
    "TIE_POLICIES",
    "QueryRanks",
    "RankAccumulator",
    "embedding_score_blocks",
    "rococo_recall",
    "score_block_rows",
    "summarize",
]

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
RoCOCO Recall scores an image-text matching model on a retrieval gallery that contains adversarial items
(captions with one word replaced, or images mixed with or patched from another image). It reports, in
percent, Recall@K on the whole gallery and on the clean gallery (the same gallery without its adversarial
items), the false rate (how often the top-1 item is adversarial) and the attack success rate (how often a
query that was right at rank 1 on the clean gallery is no longer right once the adversarial items are in).
On score matrices without ties the numbers equal the official RoCOCO ``itm_eval`` to the last digit.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: scores, queries x gallery, higher = more similar. A numpy array, a torch tensor on any
        device (computed there), or nested lists; float16, bfloat16, float32, float64 or long double (ints
        up to 2**53 and ml_dtypes' bfloat16/float8 are converted exactly; anything else is refused). Leave out and give
        `query_embeddings` and `gallery_embeddings` instead to score by dot product, block by block.
    references: for each query, the gallery indices that count as correct: an int or a list of ints
        (5 or 6 captions per image for image-to-text queries).
    adversarial: which gallery items are adversarial, as a boolean mask over the gallery or a list of
        indices. Absent means none.
    k: an int or a sequence of ints, the cut-offs of Recall@K. Default (1, 5, 10).
    ties: "pessimistic" (default: a wrong item with the same score as the best correct one ranks above it,
        so a constant-score model gets no credit) or "optimistic" (it ranks below).
    per_query: add per-query arrays: `rank` and `clean_rank` (int64: wrong items ranked above the query's best
        correct item, on the whole and on the clean gallery; 0 = correct at rank 1), `top1_adversarial` (bool),
        `top_index` and `top_score` (int64, float64: the gallery column and score of the query's top-1 item),
        `best_correct_index` and `best_correct_score` (the same for its best-scoring correct item). Among items of
        exactly equal score the top-1 item is the one the `ties` policy ranks first (pessimistic: an adversarial
        item, then a clean wrong one, then a correct one; optimistic: the reverse), then the lowest column; among
        equal correct items, the lowest column. A query the attack flipped (`clean_rank == 0`, `rank > 0`) was
        beaten by the adversarial item `top_index`, by `top_score - best_correct_score`.
    top_columns, top_scores, fill, num_gallery: a compact score matrix instead of `predictions`, as a re-ranker
        (BLIP) makes it: for each query, the gallery columns of its listed candidates (ints, queries x k, no column
        twice in a row) and their scores (floats, queries x k); every other item of the `num_gallery` scores `fill`
        (BLIP: -100). Ranked exactly as the full matrix. Where a number depends on how the items tied at `fill`
        are ordered (a query whose correct items are all at `fill`, with fewer than K wrong items listed above it),
        the output also holds `<name>_bounds` = (lowest, highest) over every such order; the number itself is the
        `ties` policy's, as on any matrix with ties. Listed items that score exactly `fill` tie with the unlisted
        ones; when every column is listed, nothing is unlisted, and ties at `fill` are ordinary ties.
    query_index: one int per query numbering the queries 0..N-1 (in `add_batch`, on every batch or on none; or
        in `compute` with `predictions`); per-query outputs come in that order, whichever batch or process added
        them. Required when the metric is loaded with `num_process > 1`.
    bootstrap: number of bootstrap resamples of the queries for 95% confidence intervals (0 = none).
    seed: seed of the bootstrap resampling.
    chunk_size: number of query rows processed at a time (default: about 2.5 MB of scores; from embeddings,
        32 MB of scores are made at a time, 16 MB on a GPU).
Returns:
    recall@K (each K), r_mean (their mean), false_rate, clean_recall@K, clean_r_mean, attack_success_rate,
    all in percent; num_queries, num_gallery, num_adversarial; with bootstrap, `<name>_ci` = (low, high)
    for every percentage; with per_query, the arrays above; from a compact matrix, `<name>_bounds` where the
    order of its ties at `fill` decides a number (see `top_columns`).
Examples:
    >>> import evaluate
    >>> rococo = evaluate.load("rococo_recall")  # a checkout; from the Hub: evaluate.load("<org>/rococo_recall")
    >>> scores = [[0.9, 0.1, 0.95],   # query 0: the adversarial item 2 outranks its caption 0
    ...           [0.2, 0.8, 0.1]]    # query 1: its caption 1 is first
    >>> result = rococo.compute(predictions=scores, references=[0, 1], adversarial=[2], k=(1, 2))
    >>> result["clean_recall@1"], result["recall@1"], result["false_rate"], result["attack_success_rate"]
    (100.0, 50.0, 50.0, 50.0)
"""


# --- Public API: rococo_recall, RankAccumulator, the per-query results and their summary, scores of embeddings

TIE_POLICIES = ("pessimistic", "optimistic")
DEFAULT_K = (1, 5, 10)


def rococo_recall(predictions=None, references=None, adversarial=None, k=DEFAULT_K, ties="pessimistic",
                  per_query=False, bootstrap=0, seed=0, chunk_size=None, query_embeddings=None,
                  gallery_embeddings=None, top_columns=None, top_scores=None, fill=None, num_gallery=None):
    """Compute RoCOCO Recall from a score matrix, from embeddings or from a compact (top-k) score matrix (see the
    module's argument description).

    Example:
        >>> out = rococo_recall([[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], references=[0, 1], adversarial=[2], k=(1, 2))
        >>> out["recall@2"], out["r_mean"], out["num_adversarial"]
        (100.0, 75.0, 1)
        >>> compact = rococo_recall(top_columns=[[2, 0], [1, 0]], top_scores=[[0.95, 0.9], [0.8, 0.2]], fill=-100,
        ...                         num_gallery=3, references=[0, 1], adversarial=[2], k=(1, 2))
        >>> compact == out  # query 0's and 1's third items score -100: the same matrix, ranked alike
        True
    """
    accumulator = RankAccumulator(adversarial=adversarial, ties=ties, chunk_size=chunk_size, top_items=per_query)
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
        if gallery_embeddings is not None:
            raise ValueError("give either `predictions` or `query_embeddings` and `gallery_embeddings`, not both")
        accumulator.update(predictions, references)
    elif query_embeddings is not None and gallery_embeddings is not None:
        accumulator.update_embeddings(query_embeddings, gallery_embeddings, references)
    elif top_columns is not None or top_scores is not None:
        accumulator.update_top_k(top_columns, top_scores, references, fill=fill, num_gallery=num_gallery)
    else:
        raise ValueError("`predictions` is required (or both `query_embeddings` and `gallery_embeddings`, or "
                         "`top_columns` and `top_scores`)")
    return accumulator.compute(k=k, per_query=per_query, bootstrap=bootstrap, seed=seed)


class RankAccumulator:
    """Turn blocks of query rows into per-query ranks, keeping nothing of the scores.

    Feed it the rows of a score matrix (or query embeddings) block by block with :meth:`update`, then call
    :meth:`compute`; the result equals :func:`rococo_recall` on the whole matrix. ``top_items=False`` skips what
    only the per-query outputs need (each query's top-1 and best correct item): faster, but then
    ``compute(per_query=True)`` is refused.

    Example:
        >>> acc = RankAccumulator(adversarial=[2])
        >>> acc.update([[0.9, 0.1, 0.95]], references=[0])
        >>> acc.update([[0.2, 0.8, 0.1]], references=[1])
        >>> acc.compute(k=1)["recall@1"]
        50.0
    """

    def __init__(self, adversarial=None, ties="pessimistic", chunk_size=None, top_items=True):
        if ties not in TIE_POLICIES:
            raise ValueError(f"`ties` must be one of {TIE_POLICIES}, got {ties!r}")
        if chunk_size is not None and (not _is_integer(chunk_size) or chunk_size < 1):
            raise ValueError(f"`chunk_size` must be a positive int, got {chunk_size!r}")
        self.ties = ties
        self.chunk_size = chunk_size
        self.top_items = top_items
        self._adversarial_arg = adversarial
        self.adversarial = None
        self.num_gallery = None
        self.num_queries = 0
        self._blocks = []

    def update(self, scores, references):
        """Add the rows of ``scores`` (queries x gallery) and their ``references``.

        Every check runs before anything is kept: after a ``ValueError`` the accumulator is as it was.
        """
        scores = _as_matrix(scores)
        adversarial = self._gallery_mask(scores.shape[1])
        refs, valid = _reference_table(references, scores.shape[0], len(adversarial), adversarial)
        self._check_full_rows()
        block = _rank_rows(scores, refs, valid, adversarial, self.ties, self.chunk_size,
                           _Origin("predictions", self.num_queries), self.top_items)
        self._keep(adversarial, [block])

    def update_embeddings(self, query_embeddings, gallery_embeddings, references):
        """Add queries given as embeddings; scores are their dot products with ``gallery_embeddings``."""
        queries, gallery = _embedding_matrices(query_embeddings, gallery_embeddings)
        adversarial = self._gallery_mask(gallery.shape[0])
        refs, valid = _reference_table(references, queries.shape[0], len(adversarial), adversarial)
        self._check_full_rows()
        blocks = []
        for start, scores in _embedding_score_blocks(queries, gallery, self.chunk_size):
            stop = start + scores.shape[0]
            blocks.append(_rank_rows(scores, refs[start:stop], valid[start:stop], adversarial,
                                     self.ties, None, _Origin("embeddings", self.num_queries, start), self.top_items))
        self._keep(adversarial, blocks)

    def update_top_k(self, top_columns, top_scores, references, fill, num_gallery):
        """Add queries given as a compact score matrix: each query's listed gallery columns and their scores, and
        the ``fill`` score of every other item of the ``num_gallery`` (a re-ranker's output; see ``top_columns``
        in the module's argument description).

        Each block of rows is made whole (``fill`` everywhere, the listed scores in their columns) and ranked as a
        full matrix, so the outputs are those of the full matrix; besides, each query keeps the bounds of its ranks
        over the orders of the items tied at ``fill``.
        """
        columns, scores, fill = _top_k_arrays(top_columns, top_scores, fill, num_gallery)
        adversarial = self._gallery_mask(num_gallery)
        refs, valid = _reference_table(references, len(columns), num_gallery, adversarial)
        if self._blocks and (self._blocks[0].rank_low is None):
            raise ValueError("this accumulator holds full score rows: add compact rows to another one")
        unlisted = columns.shape[1] < num_gallery
        rows = self.chunk_size or score_block_rows(num_gallery)
        blocks = []
        for start in range(0, len(columns), rows):
            part = slice(start, start + rows)
            dense = np.full((len(columns[part]), num_gallery), fill, dtype=scores.dtype)
            np.put_along_axis(dense, columns[part], scores[part], axis=1)
            ranks = _rank_rows(dense, refs[part], valid[part], adversarial, self.ties, None,
                               _Origin("top_scores", self.num_queries, start), self.top_items)
            blocks.append(_with_fill_bounds(ranks, dense, fill, refs[part], valid[part], adversarial, unlisted))
        self._keep(adversarial, blocks)

    def compute(self, k=DEFAULT_K, per_query=False, bootstrap=0, seed=0):
        """Return the metric's outputs for every query added so far."""
        if not self._blocks:
            raise ValueError("no queries were added: pass `predictions` (or embeddings) and `references`")
        if per_query and not self.top_items:
            raise ValueError("`per_query` needs each query's top-1 item: create the RankAccumulator with "
                             "top_items=True")
        return summarize(QueryRanks.concatenate(self._blocks), self.num_gallery, int(self.adversarial.sum()), k=k,
                         per_query=per_query, bootstrap=bootstrap, seed=seed)

    def _check_full_rows(self):
        if self._blocks and self._blocks[0].rank_low is not None:
            raise ValueError("this accumulator holds compact (top-k) rows: add full score rows to another one")

    def _gallery_mask(self, num_gallery):
        """The adversarial mask for a block scoring ``num_gallery`` items; checks only, keeps nothing."""
        if self.num_gallery is None:
            return _adversarial_mask(self._adversarial_arg, num_gallery)
        if num_gallery != self.num_gallery:
            raise ValueError(
                f"every block must score the same gallery: got {num_gallery} gallery items after {self.num_gallery}"
            )
        return self.adversarial

    def _keep(self, adversarial, blocks):
        self.num_gallery, self.adversarial = len(adversarial), adversarial
        self._blocks.extend(blocks)
        self.num_queries += sum(len(block.rank) for block in blocks)


@dataclass(frozen=True)
class QueryRanks:
    """Per-query results of one block of rows: the only thing kept of the scores (see ``per_query``).

    ``rank`` and ``clean_rank``: wrong items above the best correct one, on the whole and on the clean gallery;
    ``top1_adversarial``: whether the top-1 item is adversarial; ``top_index`` and ``top_score``: the top-1 item's
    column and score; ``best_correct_index`` and ``best_correct_score``: those of the best correct item (these
    four are None where they were not asked for: ``RankAccumulator(top_items=False)``).

    From a compact score matrix (``top_columns``) only: ``rank_low``, ``rank_high``, ``clean_rank_low`` and
    ``clean_rank_high``, the lowest and highest ranks over every order of the items tied at the fill score (equal
    to the rank where that order does not matter), and ``top1_settled``, whether every such order gives the same
    answer to ``top1_adversarial``; None for a full matrix.
    """

    rank: np.ndarray
    clean_rank: np.ndarray
    top1_adversarial: np.ndarray
    top_index: np.ndarray
    top_score: np.ndarray
    best_correct_index: np.ndarray
    best_correct_score: np.ndarray
    rank_low: np.ndarray = None
    rank_high: np.ndarray = None
    clean_rank_low: np.ndarray = None
    clean_rank_high: np.ndarray = None
    top1_settled: np.ndarray = None

    @classmethod
    def concatenate(cls, blocks):
        """The results of ``blocks`` (:class:`QueryRanks` of consecutive queries), one after the other.

        Example:
            >>> block = QueryRanks(np.array([3]), np.array([1]), np.array([True]), np.array([7]), np.array([0.9]),
            ...                    np.array([0]), np.array([0.5]))
            >>> QueryRanks.concatenate([block, block]).top_index.tolist()
            [7, 7]
        """
        return cls(*(None if getattr(blocks[0], field.name) is None
                     else np.concatenate([getattr(block, field.name) for block in blocks]) for field in fields(cls)))


# The per-query outputs (the fields of QueryRanks) and their dtypes.
_RANK_FIELDS = (("rank", "int64"), ("clean_rank", "int64"), ("top1_adversarial", "bool"), ("top_index", "int64"),
                ("top_score", "float64"), ("best_correct_index", "int64"), ("best_correct_score", "float64"))


def summarize(ranks, num_gallery, num_adversarial, k=DEFAULT_K, per_query=False, bootstrap=0, seed=0):
    """Turn per-query ranks into the metric's outputs (percentages as the official code computes them).

    Example:
        >>> ranks = QueryRanks(np.array([1, 0]), np.array([0, 0]), np.array([True, False]), np.array([2, 1]),
        ...                    np.array([0.95, 0.8]), np.array([0, 1]), np.array([0.9, 0.8]))
        >>> summarize(ranks, num_gallery=3, num_adversarial=1, k=1)["attack_success_rate"]
        50.0
    """
    ks = _check_k(k, num_gallery)
    _check_bootstrap(bootstrap)
    _check_seed(seed)
    names, indicators = _indicators(ranks, ks)
    num_queries = len(ranks.rank)
    result = _percentages(names, indicators.sum(axis=0, dtype=np.int64), num_queries, ks)
    bounds = _fill_tie_bounds(ranks, ks, names, indicators)
    result.update(num_queries=num_queries, num_gallery=int(num_gallery), num_adversarial=int(num_adversarial))
    if bootstrap:
        rng = np.random.default_rng(seed)
        samples = {key: [] for key in result if not key.startswith("num_") and key not in bounds}
        weights = indicators.astype(np.int64)
        for _ in range(bootstrap):
            counts = np.bincount(rng.integers(0, num_queries, num_queries), minlength=num_queries) @ weights
            for key, value in _percentages(names, counts, num_queries, ks).items():
                if key in samples:
                    samples[key].append(value)
        for key, values in samples.items():
            low, high = np.nanpercentile(np.array(values, dtype=np.float64), [2.5, 97.5])
            result[f"{key}_ci"] = (float(low), float(high))
    result.update((f"{key}_bounds", interval) for key, interval in bounds.items())
    if per_query:
        result.update((name, getattr(ranks, name)) for name, _ in _RANK_FIELDS)
    return result


def _indicators(ranks, ks):
    columns = {}
    for kk in ks:
        columns[f"recall@{kk}"] = ranks.rank < kk
    for kk in ks:
        columns[f"clean_recall@{kk}"] = ranks.clean_rank < kk
    columns["false_rate"] = ranks.top1_adversarial
    columns["clean_top1"] = ranks.clean_rank == 0
    columns["attacked"] = (ranks.clean_rank == 0) & (ranks.rank > 0)
    return list(columns), np.stack(list(columns.values()), axis=1)


def _fill_tie_bounds(ranks, ks, names, indicators):
    """The percentages that the order of a compact matrix's ties at its fill score decides: ``{name: (lowest,
    highest)}`` over every such order (empty for a full matrix, or when no number depends on that order).

    A query's recall at K is undecided when its rank can fall on either side of K; its false-rate entry when its
    top-1 item can be adversarial or not. A mean of recalls is bounded by the means of their bounds (one order, the
    worst or the best for every query at once, reaches each end); the attack success rate, a ratio of two counts
    that one order decides together, by :func:`_success_rate_bounds`.

    Example:
        >>> ranks = QueryRanks(np.array([4, 0]), np.array([4, 0]), np.array([False, False]), None, None, None,
        ...                    None, np.array([0, 0]), np.array([4, 0]), np.array([0, 0]), np.array([4, 0]),
        ...                    np.array([True, True]))
        >>> names, indicators = _indicators(ranks, (1, 5))
        >>> _fill_tie_bounds(ranks, (1, 5), names, indicators)["recall@1"]
        (50.0, 100.0)
    """
    if ranks.rank_low is None:
        return {}
    num_queries = len(ranks.rank)
    low = QueryRanks(ranks.rank_low, ranks.clean_rank_low, ranks.top1_adversarial, None, None, None, None)
    high = QueryRanks(ranks.rank_high, ranks.clean_rank_high, ranks.top1_adversarial, None, None, None, None)
    _, at_low = _indicators(low, ks)
    _, at_high = _indicators(high, ks)
    column = {name: number for number, name in enumerate(names)}
    undecided = at_low != at_high
    undecided[:, column["false_rate"]] = ~ranks.top1_settled
    decided_true = (indicators & ~undecided).sum(axis=0, dtype=np.int64)
    open_count = undecided.sum(axis=0, dtype=np.int64)
    fewest, most = dict(zip(names, decided_true.tolist())), dict(zip(names, (decided_true + open_count).tolist()))
    bounds = {}
    for prefix in ("", "clean_"):
        recalls = [f"{prefix}recall@{kk}" for kk in ks]
        intervals = [(100.0 * fewest[name] / num_queries, 100.0 * most[name] / num_queries) for name in recalls]
        bounds.update((name, interval) for name, interval in zip(recalls, intervals) if interval[0] != interval[1])
        if any(name in bounds for name in recalls):
            bounds[f"{prefix}r_mean"] = tuple(sum(ends) / len(ends) for ends in zip(*intervals))
    if fewest["false_rate"] != most["false_rate"]:
        bounds["false_rate"] = (100.0 * fewest["false_rate"] / num_queries, 100.0 * most["false_rate"] / num_queries)
    success = _success_rate_bounds(ranks)
    if success is not None:
        bounds["attack_success_rate"] = success
    return bounds


def _success_rate_bounds(ranks):
    """The lowest and highest attack success rate over every order of a compact matrix's ties at its fill score,
    or None when every order that defines the rate gives one value (or none defines it).

    Each query is, in some order, a clean hit that stays right (``10``), a clean hit that the attack flipped
    (``11``), or not a clean hit (``00``); the orders of different queries are independent. The lowest rate takes
    ``10`` wherever it can, ``11`` only where nothing else can be, ``00`` otherwise; the highest takes ``11`` wherever
    it can and ``10`` only where nothing else can be. Bounds are also given, even if equal, when some order leaves
    the rate undefined (no clean hit at all) and another does not.
    """
    adversarial_at_fill = (ranks.rank_high - ranks.rank_low) - (ranks.clean_rank_high - ranks.clean_rank_low)
    can_stay = ranks.rank_low == 0
    can_flip = (ranks.clean_rank_low == 0) & ((ranks.rank_low > 0) | (adversarial_at_fill > 0))
    can_miss = ranks.clean_rank_high > 0
    if not (can_stay | can_flip).any():
        return None
    only_flip = can_flip & ~can_stay & ~can_miss
    only_stay = can_stay & ~can_flip & ~can_miss
    hits = int(can_stay.sum() + only_flip.sum())
    lowest = 100.0 * int(only_flip.sum()) / hits if hits else 100.0
    hits = int(can_flip.sum() + only_stay.sum())
    highest = 100.0 * int(can_flip.sum()) / hits if hits else 0.0
    if lowest == highest and not can_miss.all():
        return None
    return (lowest, highest)


def _percentages(names, counts, num_queries, ks):
    count = dict(zip(names, (int(c) for c in counts)))
    out = {}
    for prefix in ("", "clean_"):
        recalls = [100.0 * count[f"{prefix}recall@{kk}"] / num_queries for kk in ks]
        out.update({f"{prefix}recall@{kk}": r for kk, r in zip(ks, recalls)})
        out[f"{prefix}r_mean"] = sum(recalls) / len(recalls)
        if not prefix:
            out["false_rate"] = 100.0 * count["false_rate"] / num_queries
    clean_top1 = count["clean_top1"]
    out["attack_success_rate"] = 100.0 * count["attacked"] / clean_top1 if clean_top1 else float("nan")
    return out


def embedding_score_blocks(query_embeddings, gallery_embeddings, chunk_size=None):
    """Yield ``(first row, scores)``: the score matrix of embeddings, block by block, as the metric makes it.

    The one block rule of a dual encoder's scores. A block's scores are ``queries[rows] @ gallery.T`` for
    :func:`score_block_rows` rows at a time (or ``chunk_size``); BLAS rounds a dot product by the shape of the
    product it is part of, so scores made in other blocks may differ in their last bit. Whoever writes a model's
    score matrix from embeddings (``rococo-eval run --save-scores``) makes it here, so that the file holds the
    bits :func:`rococo_recall` ranks from the embeddings.

    Example:
        >>> queries = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=np.float32)
        >>> [(start, block.tolist()) for start, block in embedding_score_blocks(queries, queries[:2], chunk_size=2)]
        [(0, [[1.0, 0.0], [0.0, 1.0]]), (2, [[1.0, 1.0]])]
    """
    queries, gallery = _embedding_matrices(query_embeddings, gallery_embeddings)
    if chunk_size is not None and (not _is_integer(chunk_size) or chunk_size < 1):
        raise ValueError(f"`chunk_size` must be a positive int, got {chunk_size!r}")
    return _embedding_score_blocks(queries, gallery, chunk_size)


def score_block_rows(num_gallery, on_gpu=False):
    """Query rows per block of scores made from embeddings: about 32 MB of scores (16 MB on a GPU), 1 to 4096.

    Example:
        >>> score_block_rows(50010), score_block_rows(10), score_block_rows(50010, on_gpu=True)
        (167, 4096, 83)
    """
    return _rows_per_block(num_gallery, _GPU_BLOCK_BYTES if on_gpu else _SCORE_BLOCK_BYTES)


def _embedding_score_blocks(queries, gallery, chunk_size):
    """:func:`embedding_score_blocks` on checked matrices (NumPy or torch)."""
    rows = chunk_size or score_block_rows(gallery.shape[0], _is_torch(queries) and queries.device.type != "cpu")
    for start in range(0, queries.shape[0], rows):
        yield start, queries[start:start + rows] @ gallery.T


# --- Validation: every check of the arguments, before anything is kept (errors name the argument)

_NUMPY_FLOATS = (np.float16, np.float32, np.float64, np.longdouble)
_INT64_MAX = np.iinfo(np.int64).max
_EXACT_IN_FLOAT64 = 2**53


def _as_matrix(values, name="predictions", check_finite=False):
    """``values`` as a 2-D matrix of a dtype the ranking compares exactly, or a ``ValueError`` naming ``name``.

    Kept as given: NumPy float16/32/64 and long double; torch float16, bfloat16, float32 and float64.
    Converted exactly: integers and booleans to float64 (integers beyond 2**53 are refused: float64 cannot
    tell them apart), other floats of at most 16 bits (``ml_dtypes.bfloat16``, float8, torch's float8) to
    float32. Anything else is refused.
    """
    if _is_torch(values):
        matrix = _torch_matrix(values.detach(), name)
    else:
        if isinstance(values, np.ma.MaskedArray):
            raise ValueError(f"`{name}` is a masked array: its mask would be ignored; fill the masked scores "
                             "first, e.g. with a score below every real one")
        try:
            matrix = np.asarray(values)
        except (ValueError, TypeError) as error:
            raise ValueError(f"`{name}` must be a 2-D matrix (queries x gallery) of numbers: {error}") from None
        matrix = _numpy_matrix(matrix, name)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"`{name}` must be a non-empty 2-D matrix (queries x gallery), "
                         f"got shape {tuple(matrix.shape)}")
    if check_finite:
        finite = matrix.isfinite() if _is_torch(matrix) else np.isfinite(matrix)
        if not bool(finite.all()):
            row, col = (int(i) for i in (~finite).nonzero()[0]) if _is_torch(matrix) else np.argwhere(~finite)[0]
            raise ValueError(f"`{name}` must be finite: {name}[{row}][{col}] is {float(matrix[row, col])}")
    return matrix


def _numpy_matrix(matrix, name):
    if matrix.dtype.type in _NUMPY_FLOATS:
        return matrix
    if matrix.dtype.kind in "iub":
        if matrix.dtype.itemsize == 8 and matrix.size and int(np.abs(matrix).max()) > _EXACT_IN_FLOAT64:
            raise ValueError(f"`{name}` holds integers beyond 2**53, which float64 cannot compare exactly: "
                             "rescale them or pass floats")
        return matrix.astype(np.float64)
    if matrix.dtype.kind in "fV" and matrix.dtype.names is None and matrix.dtype.itemsize <= 2:
        try:  # a float format of at most 16 bits from ml_dtypes (bfloat16, float8_*): float32 holds it exactly
            converted = matrix.astype(np.float32)
        except (TypeError, ValueError):
            converted = None
        if converted is not None and np.array_equal(converted.astype(matrix.dtype).view(np.uint8),
                                                    matrix.view(np.uint8)):
            return converted
    raise ValueError(f"`{name}` must hold real numbers (float16, bfloat16, float32, float64, long double, ints), "
                     f"got dtype {matrix.dtype}")


def _torch_matrix(tensor, name):
    import torch

    if tensor.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return tensor
    if tensor.is_floating_point() and tensor.element_size() <= 2:  # float8 formats: float32 holds them exactly
        return tensor.float()
    if tensor.dtype == torch.bool or not (tensor.is_floating_point() or tensor.is_complex()):
        if tensor.element_size() == 8 and tensor.numel() and int(tensor.abs().max()) > _EXACT_IN_FLOAT64:
            raise ValueError(f"`{name}` holds integers beyond 2**53, which float64 cannot compare exactly: "
                             "rescale them or pass floats")
        return tensor.double()
    raise ValueError(f"`{name}` must hold real numbers (float16, bfloat16, float32, float64, ints), "
                     f"got dtype {tensor.dtype}")


def _embedding_matrices(query_embeddings, gallery_embeddings):
    """Both embedding matrices, checked: finite, of one width."""
    queries = _as_matrix(query_embeddings, name="query_embeddings", check_finite=True)
    gallery = _as_matrix(gallery_embeddings, name="gallery_embeddings", check_finite=True)
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(
            f"`query_embeddings` and `gallery_embeddings` must have the same width, got "
            f"{queries.shape[1]} and {gallery.shape[1]}"
        )
    return queries, gallery


def _adversarial_mask(adversarial, num_gallery):
    """The boolean mask of the adversarial gallery items, from a mask or from indices.

    An integer array with one entry per gallery item holding only 0s and 1s could be either, so it is refused.
    """
    if adversarial is None:
        return np.zeros(num_gallery, dtype=bool)
    values = adversarial.detach().cpu().numpy() if _is_torch(adversarial) else np.asarray(adversarial)
    if values.ndim != 1:
        raise ValueError(f"`adversarial` must be a 1-D mask or list of indices, got shape {values.shape}")
    if values.dtype == bool:
        if len(values) != num_gallery:
            raise ValueError(
                f"`adversarial` mask must have one entry per gallery item ({num_gallery}), got {len(values)}"
            )
        return values.copy()
    if len(values) and values.dtype.kind not in "iu":
        raise ValueError(f"`adversarial` must be a boolean mask or a list of ints, got dtype {values.dtype}")
    if len(values) == num_gallery and num_gallery > 1 and np.isin(values, (0, 1)).all():
        raise ValueError(
            f"`adversarial` has one int per gallery item ({num_gallery}), all 0 or 1: it reads as a mask and as "
            "indices. Pass a boolean mask (e.g. np.asarray(adversarial, dtype=bool)) or the adversarial indices "
            "(e.g. np.flatnonzero(adversarial))"
        )
    bad = values[(values < 0) | (values >= num_gallery)]
    if len(bad):
        raise ValueError(f"`adversarial` index {int(bad[0])} is out of range for a gallery of {num_gallery}")
    unique, counts = np.unique(values, return_counts=True)
    if (counts > 1).any():  # an index list never repeats; a 0/1 int mask does (items 0 and 1 would be marked)
        raise ValueError(
            f"`adversarial` index {int(unique[counts > 1][0])} is given {int(counts.max())} times: pass a boolean "
            "mask (e.g. np.asarray(adversarial, dtype=bool)) or each adversarial index once"
        )
    mask = np.zeros(num_gallery, dtype=bool)
    mask[values.astype(np.int64)] = True
    return mask


def _reference_table(references, num_queries, num_gallery, adversarial):
    """Pad the references into a (queries x max refs) table; padding repeats a query's first reference."""
    if references is None:
        raise ValueError("`references` is required: the correct gallery indices of each query")
    if _is_torch(references):
        references = references.detach().cpu().numpy()
    if isinstance(references, np.ndarray) and references.ndim in (1, 2) and references.dtype.kind in "iu":
        if len(references) != num_queries:
            raise ValueError(f"`references` must have one entry per query ({num_queries}), got {len(references)}")
        if references.dtype.kind == "u" and references.size and references.max() >= num_gallery:
            row = int(np.argwhere(references.reshape(len(references), -1) >= num_gallery)[0][0])
            value = int(references.reshape(len(references), -1)[row].max())
            raise ValueError(f"`references[{row}]` holds {value}, out of range for a gallery of {num_gallery}")
        table = references.reshape(len(references), -1).astype(np.int64)
        if table.shape[1] == 0:
            raise ValueError(f"`references` must hold at least one gallery index per query, got shape "
                             f"{references.shape}")
        if (table < 0).any():
            row = int(np.argwhere(table < 0)[0][0])
            raise ValueError(f"`references[{row}]` holds a negative index: {references[row]!r}")
    else:
        table = _ragged_table(list(references), num_queries)
    if len(table) != num_queries:
        raise ValueError(f"`references` must have one entry per query ({num_queries}), got {len(table)}")
    full_rows = (table >= 0).sum(axis=1) == num_gallery
    if num_gallery > 1 and full_rows.any() and np.isin(table[full_rows], (0, 1)).all():
        row = int(np.flatnonzero(full_rows)[0])
        raise ValueError(
            f"`references[{row}]` has one int per gallery item ({num_gallery}), all 0 or 1: it reads as a relevance "
            "mask, but `references` takes the correct gallery indices of each query "
            "(e.g. [np.flatnonzero(row).tolist() for row in relevance])"
        )
    table.sort(axis=1)
    padding = table < 0
    valid = ~padding
    valid[:, 1:] &= table[:, 1:] != table[:, :-1]
    if (table >= num_gallery).any():
        row, col = np.argwhere(table >= num_gallery)[0]
        raise ValueError(f"`references[{row}]` holds {table[row, col]}, out of range for a gallery of {num_gallery}")
    first = table[np.arange(len(table)), padding.sum(axis=1)]
    table = np.where(valid, table, first[:, None])
    hits_adversarial = adversarial[table] & valid
    if hits_adversarial.any():
        row, col = np.argwhere(hits_adversarial)[0]
        raise ValueError(
            f"`references[{row}]` points at gallery item {table[row, col]}, which `adversarial` marks as adversarial"
        )
    return table, valid


def _ragged_table(references, num_queries):
    """Pad a list of ints and lists of ints into a (queries x max refs) table, padding with -1."""
    if len(references) != num_queries:
        raise ValueError(f"`references` must have one entry per query ({num_queries}), got {len(references)}")
    rows = [(r,) if _is_integer(r) else r for r in references]
    try:
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    except TypeError:
        row = next(i for i, r in enumerate(rows) if not hasattr(r, "__len__"))
        raise ValueError(f"`references[{row}]` must be an int or a list of ints, got {references[row]!r}") from None
    if (lengths == 0).any():
        row = int(np.flatnonzero(lengths == 0)[0])
        raise ValueError(f"`references[{row}]` is empty: every query needs at least one correct item")
    for row, values in enumerate(rows):
        if not all(_is_integer(value) for value in values):
            raise ValueError(f"`references[{row}]` must be an int or a list of ints, got {references[row]!r}")
    flat = [int(value) for values in rows for value in values]  # exact, whatever mix of int types
    row_of = np.repeat(np.arange(len(rows)), lengths)
    outside = [position for position, value in enumerate(flat) if not 0 <= value <= _INT64_MAX]
    if outside:
        row, value = int(row_of[outside[0]]), flat[outside[0]]
        if value < 0:
            raise ValueError(f"`references[{row}]` holds a negative index: {references[row]!r}")
        raise ValueError(f"`references[{row}]` holds {value}, out of range for any gallery")
    flat = np.array(flat, dtype=np.int64)
    table = np.full((len(rows), int(lengths.max())), -1, dtype=np.int64)
    table[row_of, np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)] = flat
    return table


def _top_k_arrays(top_columns, top_scores, fill, num_gallery):
    """A compact score matrix's arguments, checked: int64 columns, scores as :func:`_as_matrix` keeps them (finite),
    and ``fill`` in the scores' dtype (which must hold it exactly)."""
    if top_columns is None or top_scores is None:
        raise ValueError("a compact score matrix needs both `top_columns` and `top_scores`")
    if not _is_integer(num_gallery) or num_gallery < 1:
        raise ValueError(f"`num_gallery` must be a positive int (the gallery size of the compact matrix), "
                         f"got {num_gallery!r}")
    num_gallery = int(num_gallery)
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
    if scores.shape != columns.shape:
        raise ValueError(f"`top_scores` must have the shape of `top_columns` {columns.shape}, got {scores.shape}")
    value = np.asarray(fill) if fill is not None else None
    if value is None or value.size != 1 or value.dtype.kind not in "fiu" or not np.isfinite(value).all():
        raise ValueError(f"`fill` must be one finite number, the score of every candidate not listed "
                         f"(BLIP: -100), got {fill!r}")
    fill_value = value.reshape(()).astype(scores.dtype)
    if float(fill_value) != float(value.reshape(())):
        raise ValueError(f"`fill` {float(value.reshape(()))!r} is not exactly a {scores.dtype} number, the dtype of "
                         f"`top_scores`: give a fill value that dtype holds")
    return columns, scores, fill_value


def _check_k(k, num_gallery):
    if _is_integer(k):
        ks = (k,)
    elif isinstance(k, (str, bytes)) or not hasattr(k, "__iter__"):
        raise ValueError(f"`k` must be an int or a sequence of ints, got {k!r}")
    else:
        ks = tuple(k)
    if not ks:
        raise ValueError("`k` must name at least one cut-off")
    for kk in ks:
        if not _is_integer(kk) or not 1 <= kk <= num_gallery:
            raise ValueError(f"`k` values must be ints from 1 to the gallery size {num_gallery}, got {kk!r}")
    return tuple(int(kk) for kk in ks)


def _check_bootstrap(bootstrap):
    if not _is_integer(bootstrap) or bootstrap < 0:
        raise ValueError(f"`bootstrap` must be a non-negative int, got {bootstrap!r}")


def _check_seed(seed):
    if seed is not None and (not _is_integer(seed) or seed < 0):  # None: NumPy's fresh entropy
        raise ValueError(f"`seed` must be a non-negative int or None, got {seed!r}")


def _check_query_index(query_index, num_queries, earlier):
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
        raise _repeated_query(min(repeated))
    return values.astype(np.int64)


def _repeated_query(index):
    """The error for a query numbered ``index`` twice."""
    return ValueError(
        f"`query_index` {index} was given twice: add every query once (a sampler that pads its shards to equal "
        "length, as DistributedSampler does, repeats queries; shard without padding instead, e.g. "
        "range(rank, num_queries, world_size))"
    )


@dataclass(frozen=True)
class _Origin:
    """Where a block of score rows came from, so that a non-finite score is named as the user gave it.

    ``source`` is ``"predictions"`` or ``"embeddings"``; ``queries_before`` is the number of queries added
    by earlier calls; ``block_start`` is the row of the argument the block starts at.
    """

    source: str
    queries_before: int
    block_start: int = 0

    def error(self, values, row):
        """The ``ValueError`` for ``values``, the scores of the block's row ``row``, one of them non-finite.

        The row is named as a row of the argument the user passed, and, after earlier batches, also as a
        query among all the queries added.
        """
        col = int(np.flatnonzero(~np.isfinite(values))[0])
        row = self.block_start + row
        among = f" (query {self.queries_before + row} of all added)" if self.queries_before else ""
        if self.source in ("predictions", "top_scores"):  # top_scores are checked before: kept for safety
            return ValueError(f"`{self.source}` must be finite: {self.source}[{row}][{col}] is {values[col]}{among}")
        return ValueError(
            f"the scores of `query_embeddings` and `gallery_embeddings` must be finite: the dot product of "
            f"query_embeddings[{row}] and gallery_embeddings[{col}] is {values[col]}{among}, although both are "
            "finite (it overflows their dtype: normalise the embeddings or pass them in float64)"
        )


def _is_integer(value):
    """Whether ``value`` is an int or a NumPy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_torch(value):
    return type(value).__module__.startswith("torch")


# --- The NumPy ranker: per-query ranks by counting, block by block of score rows, in threads

# Block sizes in bytes of scores, counted at 4 bytes a score whatever the dtype (`chunk_size` sets the rows instead).
# 2.5 MB: a block of score rows is ranked while it is in the CPU's cache (see _rank_block). On the benchmark machine
# blocks of 1.25 MB took 1.3-1.5x as long (per-block overhead), of 10 MB up to 1.4x (out of cache); 5 MB, within
# noise, would need twice the cache for the same number of threads.
_RANK_BLOCK_BYTES = 5 << 19
# 32 MB: scores made from embeddings by one matrix product, then ranked in blocks of _RANK_BLOCK_BYTES by the
# threads. Products of 2.5 MB made scoring RoCOCO from embeddings 1.7-3.9x slower; products of 128 MB, no faster.
_SCORE_BLOCK_BYTES = 1 << 25
_MAX_BLOCK_ROWS = 4096  # so that a narrow gallery still gives several blocks for the threads to share
# Threads that rank blocks at once: one per core, at most 8. Each keeps a block and its temporaries (about 3 MB)
# in cache, so that 8 fill a typical 20-32 MB shared cache (the benchmark machine has 2 cores: not tuned beyond).
_NUM_THREADS = max(1, min(8, os.cpu_count() or 1))
# Up to 8 runs of consecutive gallery items of one kind (RoCOCO's text-to-image and dataset orders have 2), a
# maximum per run finds the best adversarial and clean scores in one pass. Each run costs a little per row: on
# RoCOCO-size blocks (13-65 rows) two plain passes were cheaper from 12-28 runs on.
_MAX_RUNS = 8
# With per_query, a row's top-1 item is found among the items above its best correct one, read one by one, while
# they are at most _MIN_CANDIDATES or 1/_CANDIDATE_SHARE of the gallery; beyond, a row maximum and a packed
# comparison (two passes over the row) cost less (measured on the benchmark's layouts: 64/256 beat 16/1024,
# 256/64 and 1024/16 by 2-25%).
_MIN_CANDIDATES = 64
_CANDIDATE_SHARE = 256


def _rank_rows(scores, refs, valid, adversarial, ties, chunk_size, origin, top_items=True):
    """Per-query results of the rows of ``scores`` by counting, as ``tests/helpers/reference_metric.py`` gets them by sorting.

    A query's rank is the number of wrong items that score above its best correct item (pessimistic: or as high),
    its clean rank the same count without the adversarial items. Its top-1 item is the highest-scoring one; among
    items with the same score, the one the tie policy ranks first (see :class:`_GalleryColumns`). The steps:

    1. Each query's best correct score and item (the lowest column among equals), and (pessimistic) how many of
       its correct items share that score: those are counted as "as high" in step 2 and taken off again.
    2. Each block of ``chunk_size`` rows (default :data:`_RANK_BLOCK_BYTES` of scores) is reduced by
       :func:`_rank_block`, a pure function, to the ranks and to the few items that can be a row's top-1 item
       (without ``top_items``: to the ranks and whether the top-1 item is adversarial); threads map the blocks,
       in order.
    3. A row whose scores are not all finite is refused (its rank would be meaningless).
    4. With ``top_items``, each row's top-1 item: its best correct item, unless items are above that one, and
       then the first of them in the tie order (:func:`_top_items`, once over the items kept of every block).
       Without, the fields of the items are None. (On a torch device, :func:`_rank_rows_torch` always finds
       them.)

    With the compiled kernel (:func:`_kernel`), :func:`_rank_rows_compiled` does steps 2-4 instead, with the same
    results.
    """
    if _is_torch(scores):
        return _rank_rows_torch(scores, refs, valid, adversarial, ties, chunk_size, origin)
    pessimistic = ties == "pessimistic"
    num_queries, num_gallery = scores.shape
    dtype = _numpy_compute_dtype(scores.dtype)
    # 1. the best correct score and item of each query, and its ties among the correct items
    queries = np.arange(num_queries)
    ref_scores = scores[queries[:, None], refs].astype(dtype)
    best_position = ref_scores.argmax(axis=1)  # refs are sorted: the first of equal scores is the lowest column
    best = ref_scores[queries, best_position]
    best_index = refs[queries, best_position]
    tied_refs = ((ref_scores == best[:, None]) & valid).sum(axis=1) if pessimistic else np.zeros(num_queries, np.int64)
    rows = chunk_size or _rows_per_block(num_gallery, _RANK_BLOCK_BYTES)
    kernel = _kernel(dtype, num_queries, num_gallery)
    if kernel is not None:
        return _rank_rows_compiled(kernel, scores, dtype, best, best_index, tied_refs, refs, adversarial, pessimistic,
                                   rows, origin, top_items)
    # 2. block by block, the items above it
    gallery = _GalleryColumns.of(adversarial, pessimistic)

    def block_ranker():
        scratch = gallery.scratch(min(rows, num_queries))

        def rank_block(start):
            part = slice(start, start + rows)
            return _rank_block(scores[part].astype(dtype, copy=False), start, best[part], tied_refs[part],
                               refs[part], gallery, pessimistic, scratch, top_items)
        return rank_block

    blocks = [np.concatenate(parts) for parts in zip(*_map_in_threads(block_ranker, range(0, num_queries, rows)))]
    row_sums, rank, clean_rank, top1, row, column, value = blocks
    # 3. a non-finite score makes its row's sum non-finite (as do finite ones that overflow: checked again here)
    for query in np.flatnonzero(~np.isfinite(row_sums)):
        values = np.asarray(scores[query], dtype=dtype)
        if not np.isfinite(values).all():
            raise origin.error(values, int(query))
    # 4. the top-1 items
    if not top_items:
        return QueryRanks(rank, clean_rank, top1, None, None, None, None)
    top_index, top_score = best_index.copy(), best.astype(np.float64)
    row, column, value = _top_items(row, column, value, refs, gallery)
    top_index[row], top_score[row] = column, value
    return QueryRanks(rank, clean_rank, adversarial[top_index], top_index, top_score, best_index,
                      best.astype(np.float64))


def _with_fill_bounds(ranks, dense, fill, refs, valid, adversarial, unlisted):
    """``ranks`` of the rows ``dense`` of a compact matrix, with the bounds of each query's ranks over every order of
    the items that score ``fill`` (see :class:`QueryRanks`).

    A query's rank depends on that order only when its best correct item scores ``fill``: it then lies between the
    wrong items above ``fill`` and those plus the wrong items at ``fill`` (the pessimistic rank). Its top-1 item
    does only when nothing scores above ``fill``, and whether it is adversarial only when the items at ``fill`` are
    of both kinds. Where the matrix lists every column (``unlisted`` False), nothing depends on that order that does
    not also on a full matrix's.
    """
    rank_low, rank_high = ranks.rank.copy(), ranks.rank.copy()
    clean_low, clean_high = ranks.clean_rank.copy(), ranks.clean_rank.copy()
    settled = np.ones(len(ranks.rank), dtype=bool)
    if unlisted:
        queries = np.arange(len(ranks.rank))
        best = dense[queries[:, None], refs].max(axis=1)  # padding repeats a query's first reference
        tied = np.flatnonzero(best == fill)
        if len(tied):
            rows = dense[tied]
            correct = np.zeros(rows.shape, dtype=bool)
            correct[np.arange(len(tied))[:, None], refs[tied]] = True
            above, at, clean = (rows > fill) & ~correct, (rows == fill) & ~correct, ~adversarial
            rank_low[tied] = above.sum(axis=1)
            rank_high[tied] = rank_low[tied] + at.sum(axis=1)
            clean_low[tied] = (above & clean).sum(axis=1)
            clean_high[tied] = clean_low[tied] + (at & clean).sum(axis=1)
        open_top = np.flatnonzero(dense.max(axis=1) == fill)
        if len(open_top):
            group = dense[open_top] == fill
            kinds = (group & adversarial).sum(axis=1)
            settled[open_top] = (kinds == 0) | (kinds == group.sum(axis=1))
    return replace(ranks, rank_low=rank_low, rank_high=rank_high, clean_rank_low=clean_low,
                   clean_rank_high=clean_high, top1_settled=settled)


def _numpy_compute_dtype(dtype):
    """The dtype a NumPy score matrix is compared in: its own, or float32 for float16 (exact either way)."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _rows_per_block(num_gallery, block_bytes):
    """How many query rows make a block of about ``block_bytes`` of scores (4 bytes each), 1 to _MAX_BLOCK_ROWS."""
    return max(1, min(_MAX_BLOCK_ROWS, block_bytes // (4 * num_gallery)))


@dataclass(frozen=True)
class _GalleryColumns:
    """The gallery's columns in the forms :func:`_rank_block` reads, made once per call of :func:`_rank_rows`.

    ``adversarial`` is the boolean mask; ``adversarial_words`` the mask packed by :meth:`pack` (padding bits clean).
    ``adversarial_runs`` and ``clean_runs`` are the ``(start, stop)`` column ranges of the runs of consecutive
    items of each kind when there are at most :data:`_MAX_RUNS` runs in all, else empty.
    ``wrong_keys`` and ``correct_keys`` order the items of equal score for :func:`_top_items`: each column's key as
    a wrong or as a correct item is its kind's place in the tie order (``ties``: pessimistic, adversarial items
    first, then clean wrong ones, then correct ones; optimistic, the reverse), then its column reversed (the
    lowest column has the largest key).
    """

    adversarial: np.ndarray
    adversarial_words: np.ndarray
    adversarial_runs: tuple
    clean_runs: tuple
    wrong_keys: np.ndarray
    correct_keys: np.ndarray

    @classmethod
    def of(cls, adversarial, pessimistic):
        """The columns of the gallery whose adversarial mask is ``adversarial``, for the tie policy."""
        num_gallery = len(adversarial)
        padded = np.zeros(-(-num_gallery // 64) * 64, dtype=bool)
        padded[:num_gallery] = adversarial
        bounds = np.flatnonzero(np.diff(adversarial.astype(np.int8), prepend=~adversarial[:1])).tolist()
        runs = list(zip(bounds, bounds[1:] + [num_gallery])) if len(bounds) <= _MAX_RUNS else []
        reversed_columns = np.arange(num_gallery - 1, -1, -1)
        adversarial_kind, correct_kind = (2, 0) if pessimistic else (0, 2)  # of 3 kinds; 2 comes first
        return cls(adversarial, np.packbits(padded, bitorder="little").view(np.uint64),
                   tuple(run for run in runs if adversarial[run[0]]),
                   tuple(run for run in runs if not adversarial[run[0]]),
                   np.where(adversarial, adversarial_kind, 1) * num_gallery + reversed_columns,
                   correct_kind * num_gallery + reversed_columns)

    @property
    def num_gallery(self):
        """The number of gallery items."""
        return len(self.adversarial)

    def scratch(self, rows):
        """A buffer for :meth:`pack` of up to ``rows`` rows (one per thread: the comparison is written there)."""
        return np.zeros((rows, 64 * len(self.adversarial_words)), dtype=bool)

    def pack(self, compare, block, threshold, scratch):
        """``compare(block, threshold[:, None])`` (a NumPy comparison), packed 64 items to a uint64 word per row.

        Item ``j`` is bit ``j % 8`` of byte ``j // 8`` of the row's bytes.
        """
        bits = scratch[:len(block)]
        compare(block, threshold[:, None], out=bits[:, :self.num_gallery])
        return np.packbits(bits, axis=1, bitorder="little").view(np.uint64)

    def adversarial_beats_clean(self, block, or_equal, scratch):
        """Whether each row's best adversarial score is above its best clean score (``or_equal``: or equal to it).

        With few runs of items of one kind (RoCOCO's text-to-image and dataset orders: one adversarial run), one
        pass of maxima over the runs gives the two best scores. With many (the interleaved official
        image-to-text order: one run per image), a maximum per run costs more than two passes: the row maximum,
        then a packed comparison that shows which kinds reach it (or equal: an adversarial item reaches it;
        above: no clean item does).
        """
        if self.adversarial_runs:
            best_adversarial = _max_over_runs(block, self.adversarial_runs)
            best_clean = _max_over_runs(block, self.clean_runs)
            return best_adversarial >= best_clean if or_equal else best_adversarial > best_clean
        at_top = self.pack(np.greater_equal, block, block.max(axis=1), scratch)
        if or_equal:
            return (at_top & self.adversarial_words).any(axis=1)
        return ~(at_top & ~self.adversarial_words).any(axis=1)


def _max_over_runs(block, runs):
    """Each row's maximum over the ``(start, stop)`` column ranges ``runs`` of ``block``."""
    (start, stop), *others = runs
    best = block[:, start:stop].max(axis=1)
    for start, stop in others:
        np.maximum(best, block[:, start:stop].max(axis=1), out=best)
    return best


def _map_in_threads(make_function, items):
    """``[function(item) for item in items]``, shared among up to :data:`_NUM_THREADS` threads (NumPy and the
    compiled kernel free the GIL).

    Each thread calls ``make_function()`` once for its own ``function`` (and scratch buffers), then takes items
    ``t, t + n, t + 2n, ...`` (thread ``t`` of ``n``): one task per thread, since handing out a task per item costs
    more than ranking a small block.

    Example:
        >>> _map_in_threads(lambda: lambda item: item * item, range(5))
        [0, 1, 4, 9, 16]
    """
    threads = min(_NUM_THREADS, len(items))
    if threads <= 1:
        function = make_function()
        return [function(item) for item in items]

    def run(first):
        function = make_function()
        return [function(item) for item in items[first::threads]]

    with ThreadPoolExecutor(threads) as pool:
        strides = list(pool.map(run, range(threads)))
    return [strides[index % threads][index // threads] for index in range(len(items))]


def _rank_block(block, start, best, tied_refs, refs, gallery, pessimistic, scratch, top_items):
    """One block of score rows (queries ``start``, ``start + 1``, ...) reduced to counts and candidate items.

    ``best`` is each row's best correct score, ``tied_refs`` the number of its correct items that share it
    (pessimistic; else 0), ``refs`` the rows' reference table. The block is read from memory once, then passed
    over twice while it is in cache: a row sum (non-finite when a score is), and a comparison with ``best``, packed
    to bits, whose counts give both ranks. Returns each row's sum, rank and clean rank; then, without
    ``top_items``, whether its top-1 item is adversarial (:meth:`_GalleryColumns.adversarial_beats_clean`, where
    both an adversarial and a clean wrong item beat the best correct one) and no candidates; with ``top_items``,
    nothing for that (it follows from the top-1 item) and ``(query, column, score)`` of the items that can be a
    row's top-1 item, a row's items together: the items above ``best`` where they are few (the usual case with a
    usable model); where they are many, a row maximum and a packed comparison (two more passes over those rows)
    find the items at the maximum; where those are many too (a constant row), :func:`_top_items` picks the top-1
    item at once. At most :data:`_MIN_CANDIDATES` or 1/:data:`_CANDIDATE_SHARE` of the gallery are kept a row.
    """
    row_sums = np.einsum("ij->i", block)
    above = gallery.pack(np.greater_equal if pessimistic else np.greater, block, best, scratch)  # set: item above
    above_count = _count_bits(above)
    rank = above_count - tied_refs
    adversarial_above = _count_bits(above & gallery.adversarial_words)
    clean_rank = rank - adversarial_above
    if not top_items:
        # Top-1: adversarial when the best adversarial score is above the best clean one (pessimistic: or equal).
        # The truth is clean, so with no adversarial item above it, no; with adversarial items above it and no clean
        # wrong one, yes (the truth is the best clean item); with items of both kinds above it, compare the two.
        top1 = adversarial_above > 0
        if (top1 & (clean_rank > 0)).any():
            top1 &= (clean_rank == 0) | gallery.adversarial_beats_clean(block, pessimistic, scratch)
        nothing = np.zeros(0, dtype=np.int64)
        return [row_sums, rank, clean_rank, top1, nothing, nothing, nothing.astype(block.dtype)]
    limit = max(_MIN_CANDIDATES, gallery.num_gallery // _CANDIDATE_SHARE)
    many = np.flatnonzero(above_count > limit)
    picked = []
    if len(many):  # rows with many items above: keep the items at the row maximum instead
        rows = block[many]
        above[many] = at_top = gallery.pack(np.greater_equal, rows, rows.max(axis=1), scratch)
        tied = np.flatnonzero(_count_bits(at_top) > limit)
        if len(tied):  # so many items at the maximum (a constant row): pick the top-1 item now
            above[many[tied]] = 0
            row, column = _set_bits(at_top[tied])
            row = many[tied[row]]
            picked.append(_top_items(row, column, block[row, column], refs, gallery))
    row, column = _set_bits(above)
    row, column, value = (np.concatenate(values) for values in zip((row, column, block[row, column]), *picked))
    return [row_sums, rank, clean_rank, np.zeros(len(block), dtype=bool), row + start, column, value]


if hasattr(np, "bitwise_count"):  # NumPy >= 2.0

    def _count_bits(words):
        """The number of set bits in each row of the uint64 matrix ``words``, as int64."""
        return np.sum(np.bitwise_count(words), axis=1, dtype=np.int64)

else:  # pragma: no cover - NumPy 1.x (evaluate supports it): a byte table gives the same counts

    def _count_bits(words):
        """The number of set bits in each row of the uint64 matrix ``words``, as int64."""
        return _count_bits_by_table(words)


_BITS_IN_BYTE = np.array([bin(byte).count("1") for byte in range(256)], dtype=np.uint8)


def _count_bits_by_table(words):
    """:func:`_count_bits` for NumPy 1.x, one byte-table lookup per byte.

    Example:
        >>> _count_bits_by_table(np.array([[1, 3], [2**64 - 1, 0]], dtype=np.uint64)).tolist()
        [3, 64]
    """
    return np.sum(_BITS_IN_BYTE[words.view(np.uint8)], axis=1, dtype=np.int64)


def _set_bits(words):
    """``(row, column)`` of every set bit of ``words`` (rows of bits packed by :meth:`_GalleryColumns.pack`), row by
    row and columns ascending. The cost grows with the words that hold a set bit, not with the rows' length.

    Example:
        >>> words = np.packbits(np.eye(2, 128, k=70, dtype=bool), axis=1, bitorder="little").view(np.uint64)
        >>> [values.tolist() for values in _set_bits(words)]
        [[0, 1], [70, 71]]
    """
    flat = np.flatnonzero(words != 0)  # (NumPy finds the set entries of a boolean array fastest)
    bits = np.unpackbits(words.reshape(-1)[flat].view(np.uint8), bitorder="little")  # 64 per word, in item order
    word, bit = np.divmod(np.flatnonzero(bits.view(bool)), 64)
    row, word = np.divmod(flat[word], words.shape[1])
    return row, word * 64 + bit


def _top_items(row, column, value, refs, gallery):
    """Each row's top-1 item among its candidate items: ``(row, column, score)``, one per row that has candidates.

    ``row``, ``column`` and ``value`` give the candidates, in any order of rows but with a row's candidates
    together; ``refs`` is the reference table (indexed by ``row``). The top-1 item is the highest-scoring one;
    among items with exactly that score, the one of the largest key (see :class:`_GalleryColumns`). A row whose
    scores are not finite may get none.
    """
    if not len(row):
        return row, column, value
    first = np.empty(len(row), dtype=bool)  # the first candidate of each row
    first[0] = True
    np.not_equal(row[1:], row[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    row_top = np.maximum.reduceat(value, starts)
    at_top = np.flatnonzero(value == row_top[np.cumsum(first) - 1])
    if len(at_top) == len(starts):  # one item at each row's top (no tie)
        return row[starts], column[at_top], row_top
    row, column, value = row[at_top], column[at_top], value[at_top]
    correct = (refs[row] == column[:, None]).any(axis=1)
    key = np.where(correct, gallery.correct_keys[column], gallery.wrong_keys[column])
    starts = np.flatnonzero(np.diff(row, prepend=-1))
    top_key = np.maximum.reduceat(key, starts)
    return row[starts], gallery.num_gallery - 1 - top_key % gallery.num_gallery, value[starts]


# --- The numba kernel: the same results in one compiled pass per row, where numba is installed

# $ROCOCO_RECALL_KERNEL picks how NumPy score rows are ranked: "numba" compiles one pass per row
# (_rank_block_compiled, with numba: `pip install rococo-eval[fast]`), "numpy" keeps to NumPy (_rank_block). Unset:
# numba where it is installed, for large matrices (below). Both give identical results; read at every call.
_KERNEL_VARIABLE = "ROCOCO_RECALL_KERNEL"
_KERNELS = ("numba", "numpy")
# The compiled kernel, once per dtype it ranks in (None: numba is not installed); see _kernel.
_COMPILED_KERNELS = {}
# Unset, the kernel is loaded for a matrix of at least 2**22 scores (16 MB of float32), which NumPy ranks in a few
# ms: importing numba and loading the kernel from its cache took 0.6-0.8 s per process on the benchmark machine,
# compiling it 1-2 s a dtype once per machine. Once loaded for a dtype, it ranks every matrix of that dtype.
_KERNEL_MIN_SCORES = 1 << 22
# The compiled kernel looks for a row's top-1 item in pieces of this many items, skipping a piece at a vectorised
# check when nothing in it reaches the best item found so far (the few items above the truth are read one by one).
_KERNEL_PIECE = 256


def _kernel(dtype, num_queries, num_gallery):
    """The compiled ranking kernel for score blocks of ``dtype``, or None for the pure NumPy path.

    ``$ROCOCO_RECALL_KERNEL``, read at every call, chooses: ``numpy`` gives None; ``numba`` the kernel (a
    ``ValueError`` without numba); unset, the kernel where numba is installed, for matrices of at least
    :data:`_KERNEL_MIN_SCORES` scores or once this process has loaded it. The kernel ranks float32 and float64
    blocks of galleries under 2**31 items (it counts in int32); others (long double) stay with NumPy. The first
    call for a dtype in a process compiles the kernel or loads it from numba's cache (beside this file, else in
    numba's user cache folder: compiled once per machine and copy of this file).
    """
    choice = os.environ.get(_KERNEL_VARIABLE) or None
    if choice is not None and choice not in _KERNELS:
        raise ValueError(f"${_KERNEL_VARIABLE} must be one of {_KERNELS} or unset, got {choice!r}")
    if choice == "numpy" or dtype not in (np.float32, np.float64) or num_gallery >= 2**31:
        return None
    if choice is None and dtype not in _COMPILED_KERNELS and num_queries * num_gallery < _KERNEL_MIN_SCORES:
        return None
    if dtype not in _COMPILED_KERNELS:
        try:
            _COMPILED_KERNELS[dtype] = _compile_kernel(dtype)
        except Exception as error:  # a broken install (llvmlite's library missing: OSError), a compiler error
            if choice == "numba":
                raise
            logger.warning("the numba kernel cannot be loaded (%s: %s): ranking score rows with NumPy, which gives the "
                           "same results", type(error).__name__, error)
            _COMPILED_KERNELS[dtype] = None
    kernel = _COMPILED_KERNELS[dtype]
    if kernel is None and choice == "numba":
        raise ValueError(f"${_KERNEL_VARIABLE} is 'numba' but numba cannot be imported: install it "
                         "(pip install 'rococo-eval[fast]') or unset the variable")
    return kernel


def _compile_kernel(dtype):
    """:func:`_rank_block_compiled` compiled by numba for blocks of ``dtype``, or None where numba is not installed.

    The signature is given, so that one compilation serves every block of the dtype: read-only arrays (memory-mapped
    files) and writable ones alike.
    """
    try:
        import numba
    except ImportError:
        logger.debug("numba is not installed: ranking score rows with NumPy")
        return None
    types = numba.types

    def array(element, ndim=1, readonly=False):
        return types.Array(numba.from_dtype(np.dtype(element)), ndim, "C", readonly=readonly)

    signature = types.void(array(dtype, 2, readonly=True), array(dtype, readonly=True), array(np.int64, readonly=True),
                           array(np.int64, readonly=True), array(np.int64, 2, readonly=True),
                           array(np.uint8, readonly=True), types.boolean, types.boolean, array(np.int64),
                           array(np.int64), array(bool), array(bool), array(np.int64),
                           array(np.float64))
    try:
        kernel = numba.njit(signature, nogil=True, cache=True)(_rank_block_compiled)
    except RuntimeError as error:  # no folder numba can write its cache to: compile for this process only
        logger.debug("numba cannot cache the ranking kernel (%s): compiling it for this process", error)
        kernel = numba.njit(signature, nogil=True)(_rank_block_compiled)
    logger.debug("ranking %s score rows with the numba kernel", np.dtype(dtype))
    return kernel


def _rank_rows_compiled(kernel, scores, dtype, best, best_index, tied_refs, refs, adversarial, pessimistic, rows,
                        origin, top_items):
    """Steps 2-4 of :func:`_rank_rows` by the compiled ``kernel``: blocks of ``rows`` rows, shared among threads.

    A block is passed as it is when it is C-contiguous in ``dtype`` (a slice of rows of such a matrix or memory map),
    else copied (other dtypes, column slices, transposes).
    """
    num_queries = len(best)
    tied_refs = tied_refs.astype(np.int64, copy=False)
    adversarial_bytes = adversarial.view(np.uint8)
    rank, clean_rank, top_index = (np.empty(num_queries, dtype=np.int64) for _ in range(3))
    finite, top1_adversarial = np.empty(num_queries, dtype=bool), np.empty(num_queries, dtype=bool)
    top_score = np.empty(num_queries, dtype=np.float64)

    def block_ranker():
        def rank_block(start):
            part = slice(start, start + rows)
            kernel(np.ascontiguousarray(scores[part], dtype=dtype), best[part], tied_refs[part], best_index[part],
                   refs[part], adversarial_bytes, pessimistic, top_items, rank[part], clean_rank[part], finite[part],
                   top1_adversarial[part], top_index[part], top_score[part])
        return rank_block

    _map_in_threads(block_ranker, range(0, num_queries, rows))
    if not finite.all():
        query = int(np.argmin(finite))
        raise origin.error(np.asarray(scores[query], dtype=dtype), query)
    if not top_items:
        return QueryRanks(rank, clean_rank, top1_adversarial, None, None, None, None)
    return QueryRanks(rank, clean_rank, top1_adversarial, top_index, top_score, best_index, best.astype(np.float64))


def _rank_block_compiled(block, best, tied_refs, best_index, refs, adversarial, pessimistic, top_items, rank,
                         clean_rank, finite, top1_adversarial, top_index, top_score):
    """What :func:`_rank_block` and :func:`_top_items` find, row by row, written into the last six arrays.

    The source that :func:`_compile_kernel` compiles (in plain Python it would take minutes). An item is above the
    truth where its score is at least the row's best correct score ``best`` (pessimistic) or greater (optimistic:
    a strict comparison, not ``>=`` the next float up, which a CPU that flushes subnormals to zero would read as
    ``>=`` 0); ``adversarial`` is the gallery's mask as bytes. One pass over a row,
    which the compiler vectorises, counts the items above (``rank``, ``clean_rank``) and the non-finite scores
    (``finite``; the caller refuses such a row). Where items are above and the top-1 item matters (with
    ``top_items``; without, only where both adversarial and clean wrong items are above), a second pass, the row
    still in cache, looks for it: a piece of :data:`_KERNEL_PIECE` items is read item by item only where one of them
    reaches the best item found so far (a vectorised count), and that item is replaced by a higher score, or by an
    equal score of an earlier kind in the tie order of :class:`_GalleryColumns` (columns ascend, so an equal score
    of the same kind never comes first). Rows without that pass keep their best correct item as ``top_index`` and
    ``top_score``, which is their top-1 item with ``top_items``; without, only ``top1_adversarial`` is read: an
    adversarial item is first where adversarial items alone are above.
    """
    num_gallery = block.shape[1]
    adversarial_kind, correct_kind = (2, 0) if pessimistic else (0, 2)  # of 3 kinds; 2 comes first at equal score
    for row in range(block.shape[0]):
        scores = block[row]
        truth = best[row]
        # int32 counts use twice the vector lanes of int64 (the caller keeps the gallery under 2**31 items); one loop
        # per comparison, so that each vectorises
        above = adversarial_above = non_finite = np.int32(0)
        if pessimistic:
            for column in range(num_gallery):
                score = scores[column]
                is_above = score >= truth
                above = np.int32(above + is_above)
                adversarial_above = np.int32(adversarial_above + (is_above & adversarial[column]))
                non_finite = np.int32(non_finite + (score - score != 0))  # NaN for NaN and both infinities, else 0
        else:
            for column in range(num_gallery):
                score = scores[column]
                is_above = score > truth
                above = np.int32(above + is_above)
                adversarial_above = np.int32(adversarial_above + (is_above & adversarial[column]))
                non_finite = np.int32(non_finite + (score - score != 0))
        wrong_above = above - tied_refs[row]
        rank[row] = wrong_above
        clean_rank[row] = wrong_above - adversarial_above
        finite[row] = non_finite == 0
        top_column = best_index[row]
        top_value = truth
        top1_adversarial[row] = adversarial_above > 0
        if non_finite == 0 and wrong_above > 0 and (top_items or 0 < adversarial_above < wrong_above):
            top_kind = correct_kind
            for start in range(0, num_gallery, _KERNEL_PIECE):
                stop = min(start + _KERNEL_PIECE, num_gallery)
                reaching = np.int32(0)
                if top_kind == 2:  # the first kind at equal score: only a higher score can come first now
                    for column in range(start, stop):
                        reaching = np.int32(reaching + (scores[column] > top_value))
                else:
                    for column in range(start, stop):
                        reaching = np.int32(reaching + (scores[column] >= top_value))
                if reaching == 0:
                    continue
                for column in range(start, stop):
                    score = scores[column]
                    if score < top_value:
                        continue
                    kind = adversarial_kind if adversarial[column] else 1
                    if kind == 1:
                        for correct in refs[row]:
                            if correct == column:
                                kind = correct_kind
                    if score > top_value or kind > top_kind:
                        top_value, top_column, top_kind = score, column, kind
            top1_adversarial[row] = adversarial[top_column] != 0
        top_index[row] = top_column
        top_score[row] = top_value


# --- The torch path: the same results on the tensor's own device

# 16 MB of scores on a GPU (counted as _rows_per_block counts them), where a block is made and ranked at once: few
# kernel launches, and the block's temporaries stay under 10% of a RoCOCO-size matrix (benchmarks/bench_metric_cuda.py).
_GPU_BLOCK_BYTES = 1 << 24


def _rank_rows_torch(scores, refs, valid, adversarial, ties, chunk_size, origin):
    """The same results on the tensor's own device; only per-query results are copied back, once."""
    import torch

    device = scores.device
    pessimistic = ties == "pessimistic"
    adversarial_t = torch.as_tensor(adversarial, device=device)
    refs_t = torch.as_tensor(refs, device=device)
    valid_t = torch.as_tensor(valid, device=device)
    # the tie order of the top-1 item (see _top_items), highest first: an item's kind, correct items set per row
    wrong_kind = torch.where(adversarial_t, 3 if pessimistic else 1, 2).to(torch.uint8)
    correct_kind = 1 if pessimistic else 3
    block_bytes = _GPU_BLOCK_BYTES if device.type != "cpu" else _RANK_BLOCK_BYTES
    rows = chunk_size or _rows_per_block(scores.shape[1], block_bytes)
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
        raise origin.error(scores[row].double().cpu().numpy(), row)
    return QueryRanks(*(column.astype(dtype) for column, (_, dtype) in zip(columns, _RANK_FIELDS)))


# --- Distributed evaluation: each process's per-query results, merged on process 0


def _shard(accumulator, query_index):
    """What this process sends to process 0: its per-query results and the gallery they were ranked on."""
    import zlib

    ranked = accumulator.compute(k=1, per_query=True)
    return {
        "predictions": {name: ranked[name] for name, _ in _RANK_FIELDS},
        "references": {
            "query_index": None if query_index is None else np.fromiter(query_index, np.int64, len(query_index)),
            "num_gallery": accumulator.num_gallery,
            "num_adversarial": ranked["num_adversarial"],
            "adversarial_crc32": zlib.crc32(np.packbits(accumulator.adversarial).tobytes()),
            "ties": accumulator.ties,
        },
    }


def _shard_features():
    """What one process hands to process 0, as one Arrow row under evaluate's column names: the per-query results
    of its queries, their `query_index` (null when the batches gave none) and the gallery they were ranked on."""
    import datasets

    return datasets.Features({
        "predictions": {name: datasets.Sequence(datasets.Value(dtype)) for name, dtype in _RANK_FIELDS},
        "references": {
            "query_index": datasets.Sequence(datasets.Value("int64")),
            "num_gallery": datasets.Value("int64"),
            "num_adversarial": datasets.Value("int64"),
            "adversarial_crc32": datasets.Value("int64"),
            "ties": datasets.Value("string"),
        },
    })


def _merge_shards(shards):
    """The per-query results of every process's shard, checked to come from one gallery, in query order.

    The order is that of ``query_index`` when the batches gave it (it must number the queries 0 to N-1, each
    once), else process order: process 0's queries in the order they were added, then process 1's, ...
    """
    first = shards[0]["references"]
    for process, shard in enumerate(shards[1:], start=1):
        other = shard["references"]
        if other["num_gallery"] != first["num_gallery"]:
            raise ValueError(f"every process must score the same gallery: process {process} scored "
                             f"{other['num_gallery']} gallery items, process 0 {first['num_gallery']}")
        if (other["num_adversarial"], other["adversarial_crc32"]) != (first["num_adversarial"],
                                                                      first["adversarial_crc32"]):
            same_count = other["num_adversarial"] == first["num_adversarial"]
            raise ValueError(f"every process must pass the same `adversarial`: process {process} marks "
                             f"{other['num_adversarial']} gallery items, process 0 {first['num_adversarial']}"
                             + (", not the same ones" if same_count else ""))
        if other["ties"] != first["ties"]:
            raise ValueError(f"every process must pass the same `ties`: process {process} used {other['ties']!r}, "
                             f"process 0 {first['ties']!r}")
        if (other["query_index"] is None) != (first["query_index"] is None):
            raise ValueError(f"`query_index` must be given on every process or on none: process {process} "
                             f"{'did not give it' if other['query_index'] is None else 'gave it'}, process 0 "
                             f"{'did not' if first['query_index'] is None else 'did'}")
    ranks = [np.concatenate([np.asarray(shard["predictions"][name], dtype=dtype) for shard in shards])
             for name, dtype in _RANK_FIELDS]
    if first["query_index"] is not None:
        index = np.concatenate([np.asarray(shard["references"]["query_index"], dtype=np.int64) for shard in shards])
        order = np.argsort(index, kind="stable")
        index = index[order]
        repeated = index[1:][index[1:] == index[:-1]]
        if len(repeated):  # on two processes (`add_batch` refuses a repeat on one)
            raise _repeated_query(repeated[0])
        gaps = np.flatnonzero(index != np.arange(len(index)))
        if len(gaps):
            raise ValueError(f"`query_index` must number the queries from 0 to {len(index) - 1}: {gaps[0]} is missing")
        ranks = [values[order] for values in ranks]
    return QueryRanks(*ranks), int(first["num_gallery"]), int(first["num_adversarial"])


def _torch_distributed_group():
    """``(rank, world size)`` in torch.distributed's default group when one is initialised, else None."""
    if "torch" not in sys.modules:  # a program that has not imported torch has no process group
        return None
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


# --- The evaluate class: defined when evaluate loads this file, or on first use

_COMPUTE_ARGUMENTS = ("k", "per_query", "bootstrap", "seed")


def _metric_class():
    """The ``evaluate.Metric`` subclass, defined on first use: importing ``evaluate`` costs seconds (it imports
    transformers' pipelines), which a program that only calls :func:`rococo_recall` or :class:`RankAccumulator`
    does not pay. ``evaluate.load`` finds the class in the module's namespace (see the end of this file)."""
    import datasets
    import evaluate

    @evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
    class RococoRecall(evaluate.Metric):
        """The RoCOCO Recall metric; ``compute`` and ``add_batch`` take score matrices directly (no Arrow).

        Loaded with ``num_process=n, process_id=i`` (one per process), each process adds its own queries and calls
        ``compute``: process 0 returns the result over the queries of all the processes, the others ``None``. Only
        per-query results travel: through ``torch.distributed`` when its default group has ``n`` processes, else
        through evaluate's cache files (``cache_dir`` on a file system that every process sees).
        """

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._accumulator = None  # the per-query ranks of the batches added so far (a RankAccumulator)
            self._query_index = None  # their `query_index` values, in the order added (a dict used as a set)

        def _info(self):
            return evaluate.MetricInfo(
                description=_DESCRIPTION,
                citation=CITATION,
                inputs_description=_KWARGS_DESCRIPTION,
                features=datasets.Features({
                    "predictions": datasets.Sequence(datasets.Value("float32")),
                    "references": datasets.Sequence(datasets.Value("int64")),
                }),
                codebase_urls=["https://github.com/pseulki/rococo"],
                reference_urls=["https://arxiv.org/abs/2304.10727"],
            )

        def add_batch(self, *, predictions=None, references=None, adversarial=None, ties="pessimistic",
                      chunk_size=None, query_embeddings=None, gallery_embeddings=None, query_index=None):
            """Reduce a block of query rows to per-query ranks; the rows themselves are not kept.

            ``query_index`` (optional: one int per row, on every batch or on none) numbers the queries from 0;
            ``compute`` then returns the per-query results in that order, whichever batch or process added them.
            Every check runs before anything is kept: after a ``ValueError`` the metric is as it was.
            """
            accumulator = self._accumulator
            first = accumulator is None
            if first:
                accumulator = RankAccumulator(adversarial, ties, chunk_size)
            elif ties != accumulator.ties:
                raise ValueError(f"`ties` changed between batches: {accumulator.ties!r} then {ties!r}")
            elif adversarial is not None and not np.array_equal(
                    _adversarial_mask(adversarial, accumulator.num_gallery), accumulator.adversarial):
                raise ValueError("`adversarial` changed between batches: pass the same mask or indices to every batch")
            elif (query_index is None) != (self._query_index is None):
                raise ValueError("`query_index` must be given with every batch or with none")
            if predictions is not None and (query_embeddings is not None or gallery_embeddings is not None):
                raise ValueError("give either `predictions` or `query_embeddings` and `gallery_embeddings`, not both")
            if predictions is None and (query_embeddings is None or gallery_embeddings is None):
                raise ValueError("`predictions` is required (or both `query_embeddings` and `gallery_embeddings`)")
            index = None
            if query_index is not None:  # its length is checked against the rows before any row is kept
                if predictions is not None:
                    predictions = _as_matrix(predictions)
                    index = _check_query_index(query_index, predictions.shape[0], self._query_index or {})
                else:
                    query_embeddings = _as_matrix(query_embeddings, name="query_embeddings")
                    index = _check_query_index(query_index, query_embeddings.shape[0], self._query_index or {})
            if predictions is not None:
                accumulator.update(predictions, references)
            else:
                accumulator.update_embeddings(query_embeddings, gallery_embeddings, references)
            if first:
                self._accumulator, self._query_index = accumulator, None if index is None else {}
            if index is not None:
                self._query_index.update(dict.fromkeys(index.tolist()))

        def add(self, *, prediction=None, reference=None, query_index=None, **kwargs):
            """Add one query: ``prediction`` is its row of scores, ``reference`` its correct gallery indices."""
            self.add_batch(predictions=[prediction], references=[reference],
                           query_index=None if query_index is None else [query_index], **kwargs)

        def compute(self, *, predictions=None, references=None, **kwargs):
            """Compute the metric on ``predictions`` or, without them, on the batches added so far.

            With ``num_process > 1``, process 0 returns the result over the queries of every process and the
            others ``None``; ``compute(predictions=...)`` then adds this process's queries first. A result starts
            the metric afresh. A ``ValueError`` leaves it as it was, except once the processes have exchanged
            their results (process 0 then checks that they scored the same gallery): the batches are spent.
            """
            _, world_size = _torch_distributed_group() or (0, 1)
            if world_size > 1 and self.num_process == 1:
                logger.warning("torch.distributed has %d processes but the metric was loaded with num_process=1: this "
                               "result covers this process's queries only; load it with num_process=world size and "
                               "process_id=rank to get the result over all of them on process 0", world_size)
            accumulator = self._accumulator
            compact = kwargs.get("top_columns") is not None or kwargs.get("top_scores") is not None
            if predictions is None and kwargs.get("query_embeddings") is None and not compact:
                if accumulator is None:
                    raise ValueError("`predictions` is required (or batches added with `add_batch`)")
                unused = sorted(set(kwargs) - set(_COMPUTE_ARGUMENTS))
                if unused:
                    raise ValueError(f"{unused} belong to `add_batch`; `compute()` after batches takes only "
                                     "`k`, `per_query`, `bootstrap` and `seed`")
                return self._compute_batches(**kwargs)
            if accumulator is not None:
                raise ValueError("batches were added with `add_batch`: call `compute()` without `predictions`")
            if compact and (self.num_process > 1 or kwargs.get("query_index") is not None):
                raise ValueError("a compact score matrix (`top_columns`, `top_scores`) is scored in one call, on one "
                                 "process: load the metric with num_process=1 and leave out `query_index`")
            if self.num_process == 1 and kwargs.get("query_index") is None:
                return rococo_recall(predictions, references, **kwargs)
            options = {key: kwargs.pop(key) for key in _COMPUTE_ARGUMENTS if key in kwargs}
            self.add_batch(predictions=predictions, references=references, **kwargs)
            try:
                return self._compute_batches(**options)
            finally:  # after an error too: the metric had no batches before this call
                self._accumulator = self._query_index = None

        def _compute_batches(self, k=DEFAULT_K, per_query=False, bootstrap=0, seed=0):
            """The result over the batches added (on every process); they are dropped once it is computed."""
            accumulator = self._accumulator
            _check_k(k, accumulator.num_gallery)  # before the processes exchange anything
            if self.num_process > 1 and self._query_index is None:
                raise ValueError(
                    "`query_index` is required with num_process > 1: give each batch's query positions "
                    "(add_batch(..., query_index=...)) so that process 0 puts the queries in order and sees any query "
                    "added twice (samplers that pad their shards, as DistributedSampler does, repeat queries)"
                )
            _check_bootstrap(bootstrap)
            shard = _shard(accumulator, self._query_index)
            if self.num_process == 1:
                shards = [shard]
            else:
                shards = self._gather(shard)
                self._accumulator = self._query_index = None  # exchanged: spent on every process
                if shards is None:
                    return None
            ranks, num_gallery, num_adversarial = _merge_shards(shards)
            result = summarize(ranks, num_gallery, num_adversarial, k=k, per_query=per_query, bootstrap=bootstrap,
                               seed=seed)
            self._accumulator = self._query_index = None
            return result

        def _gather(self, shard):
            """Every process's shard on process 0, in process order; ``None`` on the others."""
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

        def _infer_feature_from_batch(self, batch):
            """evaluate's cache files hold one shard of per-query results per process, never score rows."""
            return _shard_features()

        def _compute(self, predictions=None, references=None):
            """On process 0, inside evaluate's ``compute``: the shards read back from every process's cache file."""
            return [{"predictions": shard, "references": gallery} for shard, gallery in zip(predictions, references)]

    RococoRecall.__qualname__ = "RococoRecall"  # as pickle and repr find it: the module's attribute
    return RococoRecall


def __getattr__(name):
    """``rococo_recall.RococoRecall`` (PEP 562): the metric class, defined when first asked for."""
    if name == "RococoRecall":
        globals()[name] = metric_class = _metric_class()
        return metric_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if "evaluate" in sys.modules:  # `evaluate.load` is importing this file: it looks for the class among its names
    RococoRecall = _metric_class()


# The metric class's example (in its docstring) runs with the module's doctests, whether or not the class is defined.
__test__ = {"RococoRecall": _KWARGS_DESCRIPTION}
