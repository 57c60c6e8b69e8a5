"""RoCOCO Recall: Recall@K of an image-text matching model on a gallery with adversarial items.

RoCOCO (Park et al. 2023, arXiv:2304.10727) adds altered captions or altered images to the MS-COCO 5K
retrieval gallery and measures whether the model still ranks a true item first. This module is a
Hugging Face ``evaluate`` metric and is self-contained: ``evaluate.load`` copies it alone.

The dense score matrix never goes through Arrow: ``compute`` and ``add_batch`` reduce each block of query
rows to three numbers per query (rank on the whole gallery, rank on the clean gallery, whether the top-1
item is adversarial) as soon as they see it, reading the matrix once, without sorting it or copying it.
"""

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import datasets
import evaluate
import numpy as np

logger = logging.getLogger(__name__)

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
        device (computed there), or nested lists; float16, bfloat16, float32 or float64. Leave out and give
        `query_embeddings` and `gallery_embeddings` instead to score by dot product, block by block.
    references: for each query, the gallery indices that count as correct: an int or a list of ints
        (5 or 6 captions per image for image-to-text queries).
    adversarial: which gallery items are adversarial, as a boolean mask over the gallery or a list of
        indices. Absent means none.
    k: an int or a sequence of ints, the cut-offs of Recall@K. Default (1, 5, 10).
    ties: "pessimistic" (default: a wrong item with the same score as the best correct one ranks above it,
        so a constant-score model gets no credit) or "optimistic" (it ranks below).
    per_query: add per-query arrays `rank`, `clean_rank` (0 = correct at rank 1) and `top1_adversarial`.
    bootstrap: number of bootstrap resamples of the queries for 95% confidence intervals (0 = none).
    seed: seed of the bootstrap resampling.
    chunk_size: number of query rows processed at a time (default: about 2 MB of scores).
Returns:
    recall@K (each K), r_mean (their mean), false_rate, clean_recall@K, clean_r_mean, attack_success_rate,
    all in percent; num_queries, num_gallery, num_adversarial; with bootstrap, `<name>_ci` = (low, high)
    for every percentage; with per_query, the arrays above.
Examples:
    >>> import evaluate
    >>> rococo = evaluate.load("rococo_recall")  # a checkout; from the Hub: evaluate.load("<org>/rococo_recall")
    >>> scores = [[0.9, 0.1, 0.95],   # query 0: the adversarial item 2 outranks its caption 0
    ...           [0.2, 0.8, 0.1]]    # query 1: its caption 1 is first
    >>> result = rococo.compute(predictions=scores, references=[0, 1], adversarial=[2], k=(1, 2))
    >>> result["clean_recall@1"], result["recall@1"], result["false_rate"], result["attack_success_rate"]
    (100.0, 50.0, 50.0, 50.0)
"""

TIE_POLICIES = ("pessimistic", "optimistic")
DEFAULT_K = (1, 5, 10)
_CHUNK_BYTES = 5 << 19
_GPU_CHUNK_BYTES = 1 << 24
_SCORE_BLOCK_BYTES = 1 << 25  # scores made from embeddings at a time (then ranked in cache-sized chunks)
_NUM_THREADS = max(1, min(8, os.cpu_count() or 1))
_MAX_SLICED_RUNS = 8


@dataclass(frozen=True)
class QueryRanks:
    """Per-query results of one block of rows: the only thing kept of the scores."""

    rank: np.ndarray
    clean_rank: np.ndarray
    top1_adversarial: np.ndarray


class RankAccumulator:
    """Turn blocks of query rows into per-query ranks, keeping nothing of the scores.

    Feed it the rows of a score matrix (or query embeddings) block by block with :meth:`update`, then call
    :meth:`compute`; the result equals :func:`rococo_recall` on the whole matrix.

    Example:
        >>> acc = RankAccumulator(adversarial=[2])
        >>> acc.update([[0.9, 0.1, 0.95]], references=[0])
        >>> acc.update([[0.2, 0.8, 0.1]], references=[1])
        >>> acc.compute(k=1)["recall@1"]
        50.0
    """

    def __init__(self, adversarial=None, ties="pessimistic", chunk_size=None):
        if ties not in TIE_POLICIES:
            raise ValueError(f"`ties` must be one of {TIE_POLICIES}, got {ties!r}")
        if chunk_size is not None and (not _is_int(chunk_size) or chunk_size < 1):
            raise ValueError(f"`chunk_size` must be a positive int, got {chunk_size!r}")
        self.ties = ties
        self.chunk_size = chunk_size
        self._adversarial_arg = adversarial
        self.adversarial = None
        self.num_gallery = None
        self._blocks = []

    def update(self, scores, references):
        """Add the rows of ``scores`` (queries x gallery) and their ``references``."""
        scores = _as_matrix(scores)
        self._bind_gallery(scores.shape[1])
        refs, valid = _reference_table(references, scores.shape[0], self.num_gallery, self.adversarial)
        self._blocks.append(_rank_rows(scores, refs, valid, self.adversarial, self.ties, self.chunk_size))

    def update_embeddings(self, query_embeddings, gallery_embeddings, references):
        """Add queries given as embeddings; scores are their dot products with ``gallery_embeddings``."""
        queries = _as_matrix(query_embeddings, name="query_embeddings", check_finite=True)
        gallery = _as_matrix(gallery_embeddings, name="gallery_embeddings", check_finite=True)
        if queries.shape[1] != gallery.shape[1]:
            raise ValueError(
                f"`query_embeddings` and `gallery_embeddings` must have the same width, got "
                f"{queries.shape[1]} and {gallery.shape[1]}"
            )
        self._bind_gallery(gallery.shape[0])
        refs, valid = _reference_table(references, queries.shape[0], self.num_gallery, self.adversarial)
        on_gpu = _is_torch(queries) and queries.device.type != "cpu"
        rows = self.chunk_size or _default_rows(self.num_gallery, 4, _GPU_CHUNK_BYTES if on_gpu else _SCORE_BLOCK_BYTES)
        for start in range(0, queries.shape[0], rows):
            block = queries[start:start + rows] @ gallery.T
            self._blocks.append(_rank_rows(block, refs[start:start + rows], valid[start:start + rows],
                                           self.adversarial, self.ties, None))

    def compute(self, k=DEFAULT_K, per_query=False, bootstrap=0, seed=0):
        """Return the metric's outputs for every query added so far."""
        if not self._blocks:
            raise ValueError("no queries were added: pass `predictions` (or embeddings) and `references`")
        ranks = QueryRanks(*(np.concatenate([getattr(b, f) for b in self._blocks])
                             for f in ("rank", "clean_rank", "top1_adversarial")))
        return summarize(ranks, self.num_gallery, int(self.adversarial.sum()), k=k, per_query=per_query,
                         bootstrap=bootstrap, seed=seed)

    def _bind_gallery(self, num_gallery):
        if self.num_gallery is None:
            self.num_gallery = num_gallery
            self.adversarial = _adversarial_mask(self._adversarial_arg, num_gallery)
        elif num_gallery != self.num_gallery:
            raise ValueError(
                f"every block must score the same gallery: got {num_gallery} gallery items after {self.num_gallery}"
            )


def rococo_recall(predictions=None, references=None, adversarial=None, k=DEFAULT_K, ties="pessimistic",
                  per_query=False, bootstrap=0, seed=0, chunk_size=None, query_embeddings=None,
                  gallery_embeddings=None):
    """Compute RoCOCO Recall from a score matrix or from embeddings (see the module's argument description).

    Example:
        >>> out = rococo_recall([[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], references=[0, 1], adversarial=[2], k=(1, 2))
        >>> out["recall@2"], out["r_mean"], out["num_adversarial"]
        (100.0, 75.0, 1)
    """
    accumulator = RankAccumulator(adversarial=adversarial, ties=ties, chunk_size=chunk_size)
    if predictions is not None:
        if query_embeddings is not None or gallery_embeddings is not None:
            raise ValueError("give either `predictions` or `query_embeddings` and `gallery_embeddings`, not both")
        accumulator.update(predictions, references)
    elif query_embeddings is not None and gallery_embeddings is not None:
        accumulator.update_embeddings(query_embeddings, gallery_embeddings, references)
    else:
        raise ValueError("`predictions` is required (or both `query_embeddings` and `gallery_embeddings`)")
    return accumulator.compute(k=k, per_query=per_query, bootstrap=bootstrap, seed=seed)


def summarize(ranks, num_gallery, num_adversarial, k=DEFAULT_K, per_query=False, bootstrap=0, seed=0):
    """Turn per-query ranks into the metric's outputs (percentages as the official code computes them).

    Example:
        >>> ranks = QueryRanks(np.array([1, 0]), np.array([0, 0]), np.array([True, False]))
        >>> summarize(ranks, num_gallery=3, num_adversarial=1, k=1)["attack_success_rate"]
        50.0
    """
    ks = _check_k(k, num_gallery)
    if not _is_int(bootstrap) or bootstrap < 0:
        raise ValueError(f"`bootstrap` must be a non-negative int, got {bootstrap!r}")
    names, indicators = _indicators(ranks, ks)
    num_queries = len(ranks.rank)
    result = _percentages(names, indicators.sum(axis=0, dtype=np.int64), num_queries, ks)
    result.update(num_queries=num_queries, num_gallery=int(num_gallery), num_adversarial=int(num_adversarial))
    if bootstrap:
        rng = np.random.default_rng(seed)
        samples = {key: [] for key in result if not key.startswith("num_")}
        weights = indicators.astype(np.int64)
        for _ in range(bootstrap):
            counts = np.bincount(rng.integers(0, num_queries, num_queries), minlength=num_queries) @ weights
            for key, value in _percentages(names, counts, num_queries, ks).items():
                samples[key].append(value)
        for key, values in samples.items():
            low, high = np.nanpercentile(np.array(values, dtype=np.float64), [2.5, 97.5])
            result[f"{key}_ci"] = (float(low), float(high))
    if per_query:
        result.update(rank=ranks.rank, clean_rank=ranks.clean_rank, top1_adversarial=ranks.top1_adversarial)
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


def _rank_rows(scores, refs, valid, adversarial, ties, chunk_size):
    if _is_torch(scores):
        return _rank_rows_torch(scores, refs, valid, adversarial, ties, chunk_size)
    pessimistic = ties == "pessimistic"
    num_queries, num_gallery = scores.shape
    ref_scores = scores[np.arange(num_queries)[:, None], refs]
    best = ref_scores.max(axis=1)
    tied_refs = ((ref_scores == best[:, None]) & valid).sum(axis=1) if pessimistic else 0
    above = np.empty(num_queries, dtype=np.int64)
    adversarial_above = np.zeros(num_queries, dtype=np.int64)
    top_checked = np.zeros(num_queries, dtype=bool)
    compute_dtype = scores.dtype if scores.dtype in (np.float32, np.float64) else np.dtype(np.float32)
    row_sums = np.empty(num_queries, dtype=compute_dtype)
    rows = chunk_size or _default_rows(num_gallery, 4)
    starts = range(0, num_queries, rows)
    width = -(-num_gallery // 64) * 64
    mask = np.zeros(width, dtype=bool)
    mask[:num_gallery] = adversarial
    adversarial_words = np.packbits(mask).view(np.uint64)
    edges = np.flatnonzero(np.diff(np.concatenate([[False], adversarial, [False]]).astype(np.int8)))
    any_adversarial = len(edges) > 0
    sliced = 0 < len(edges) <= 2 * _MAX_SLICED_RUNS
    if sliced:
        adversarial_runs = edges.reshape(-1, 2).tolist()
        bounds = [0, *edges.tolist(), num_gallery]
        clean_runs = [(a, b) for a, b in zip(bounds[::2], bounds[1::2]) if a < b]

    def packed_compare(block, threshold, inclusive, bits):
        bits = bits[:len(block)]
        (np.greater_equal if inclusive else np.greater)(block, threshold[:, None], out=bits[:, :num_gallery])
        return np.packbits(bits, axis=1).view(np.uint64)

    def top_is_adversarial(block, bits):
        """Whether each row's best-scoring item is adversarial (pessimistic: at a tie, yes)."""
        if sliced:  # few runs of adversarial columns: compare the two maxima, read off slices
            best_adversarial = np.max([block[:, a:b].max(axis=1) for a, b in adversarial_runs], axis=0)
            best_clean = np.max([block[:, a:b].max(axis=1) for a, b in clean_runs], axis=0)
            return best_adversarial >= best_clean if pessimistic else best_adversarial > best_clean
        at_top = packed_compare(block, block.max(axis=1), True, bits)
        if pessimistic:
            return (at_top & adversarial_words).any(axis=1)
        return ~(at_top & ~adversarial_words).any(axis=1)

    def work(thread):
        bits = np.zeros((rows, width), dtype=bool)
        for start in starts[thread::_NUM_THREADS]:
            part = slice(start, start + rows)
            block = scores[part]
            if block.dtype != compute_dtype:
                block = block.astype(compute_dtype)
            np.einsum("ij->i", block, out=row_sums[part])
            words = packed_compare(block, best[part], pessimistic, bits)
            np.sum(np.bitwise_count(words), axis=1, out=above[part])
            if not any_adversarial:
                continue
            words &= adversarial_words
            np.sum(np.bitwise_count(words), axis=1, out=adversarial_above[part])
            clean_above = above[part] - adversarial_above[part] - (tied_refs[part] if pessimistic else 0)
            if ((adversarial_above[part] > 0) & (clean_above > 0)).any():
                top_checked[part] = top_is_adversarial(block, bits)

    threads = min(_NUM_THREADS, len(starts))
    if threads == 1:
        work(0)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, range(threads)))
    for row in np.flatnonzero(~np.isfinite(row_sums)):  # a non-finite score, or finite ones summing past the range
        if not np.isfinite(scores[row]).all():
            _raise_not_finite(scores, int(row))
    rank = above - tied_refs
    clean_rank = rank - adversarial_above
    top1 = (adversarial_above > 0) & ((clean_rank == 0) | top_checked)
    return QueryRanks(rank, clean_rank, top1)


def _rank_rows_torch(scores, refs, valid, adversarial, ties, chunk_size):
    """The same counting on the tensor's own device; only per-query results are copied back, once."""
    import torch

    device = scores.device
    adversarial_t = torch.as_tensor(adversarial, device=device)
    refs_t = torch.as_tensor(refs, device=device)
    valid_t = torch.as_tensor(valid, device=device)
    budget = _GPU_CHUNK_BYTES if device.type != "cpu" else _CHUNK_BYTES
    rows = chunk_size or _default_rows(scores.shape[1], 4, budget)  # bool temporaries: size them as float32
    finite, rank, clean_rank, top1 = [], [], [], []
    for start in range(0, scores.shape[0], rows):
        block = scores[start:start + rows]
        finite.append(torch.isfinite(block).all(dim=1))
        ref_scores = block.gather(1, refs_t[start:start + rows])
        best = ref_scores.amax(dim=1, keepdim=True)
        above_mask = block >= best if ties == "pessimistic" else block > best
        above = above_mask.sum(dim=1)
        if ties == "pessimistic":
            above -= ((ref_scores == best) & valid_t[start:start + rows]).sum(dim=1)
        rank.append(above)
        clean_rank.append(above - (above_mask & adversarial_t).sum(dim=1))
        at_top = block == block.amax(dim=1, keepdim=True)
        if ties == "pessimistic":
            top1.append((at_top & adversarial_t).any(dim=1))
        else:
            top1.append(~(at_top & ~adversarial_t).any(dim=1))
    finite = torch.cat(finite)
    if not finite.all():
        _raise_not_finite(scores, int((~finite).nonzero()[0]))
    return QueryRanks(torch.cat(rank).cpu().numpy().astype(np.int64),
                      torch.cat(clean_rank).cpu().numpy().astype(np.int64), torch.cat(top1).cpu().numpy())


def _raise_not_finite(scores, row):
    """Name the first non-finite score of ``row`` (a row known to hold one)."""
    values = scores[row].double().cpu().numpy() if _is_torch(scores) else np.asarray(scores[row], dtype=np.float64)
    col = int(np.flatnonzero(~np.isfinite(values))[0])
    raise ValueError(f"`predictions` must be finite: predictions[{row}][{col}] is {values[col]}")


def _as_matrix(values, name="predictions", check_finite=False):
    if _is_torch(values):
        matrix = values.detach()
    else:
        matrix = np.asarray(values)
        if matrix.dtype.kind not in "fiub":
            raise ValueError(f"`{name}` must hold numbers, got dtype {matrix.dtype}")
        if matrix.dtype.kind != "f":
            matrix = matrix.astype(np.float64)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"`{name}` must be a non-empty 2-D matrix (queries x gallery), got shape {tuple(matrix.shape)}")
    if _is_torch(matrix) and not matrix.is_floating_point():
        matrix = matrix.double()
    if check_finite:
        finite = matrix.isfinite().all() if _is_torch(matrix) else np.isfinite(matrix).all()
        if not bool(finite):
            raise ValueError(f"`{name}` must be finite")
    return matrix


def _adversarial_mask(adversarial, num_gallery):
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
    bad = values[(values < 0) | (values >= num_gallery)]
    if len(bad):
        raise ValueError(f"`adversarial` index {int(bad[0])} is out of range for a gallery of {num_gallery}")
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
        table = references.reshape(len(references), -1).astype(np.int64)
        if (table < 0).any():
            row = int(np.argwhere(table < 0)[0][0])
            raise ValueError(f"`references[{row}]` holds a negative index: {references[row]!r}")
    else:
        table = _ragged_table(list(references), num_queries)
    if len(table) != num_queries:
        raise ValueError(f"`references` must have one entry per query ({num_queries}), got {len(table)}")
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
    rows = [(r,) if _is_int(r) else r for r in references]
    try:
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    except TypeError:
        row = next(i for i, r in enumerate(rows) if not hasattr(r, "__len__"))
        raise ValueError(f"`references[{row}]` must be an int or a list of ints, got {references[row]!r}") from None
    if (lengths == 0).any():
        row = int(np.flatnonzero(lengths == 0)[0])
        raise ValueError(f"`references[{row}]` is empty: every query needs at least one correct item")
    flat = np.array([value for r in rows for value in r])
    row_of = np.repeat(np.arange(len(rows)), lengths)
    if flat.dtype.kind not in "iu":
        row = next(i for i, r in enumerate(rows) if not all(_is_int(v) for v in r))
        raise ValueError(f"`references[{row}]` must be an int or a list of ints, got {references[row]!r}")
    if (flat < 0).any():
        row = int(row_of[np.flatnonzero(flat < 0)[0]])
        raise ValueError(f"`references[{row}]` holds a negative index: {references[row]!r}")
    table = np.full((len(rows), int(lengths.max())), -1, dtype=np.int64)
    table[row_of, np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)] = flat
    return table


def _check_k(k, num_gallery):
    ks = (k,) if _is_int(k) else tuple(k)
    if not ks:
        raise ValueError("`k` must name at least one cut-off")
    for kk in ks:
        if not _is_int(kk) or not 1 <= kk <= num_gallery:
            raise ValueError(f"`k` values must be ints from 1 to the gallery size {num_gallery}, got {kk!r}")
    return tuple(int(kk) for kk in ks)


def _default_rows(num_gallery, itemsize, budget=_CHUNK_BYTES):
    return max(1, min(4096, budget // max(1, num_gallery * itemsize)))


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_torch(value):
    return type(value).__module__.startswith("torch")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class RococoRecall(evaluate.Metric):
    """The RoCOCO Recall metric; ``compute`` and ``add_batch`` take score matrices directly (no Arrow)."""

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
                  chunk_size=None, query_embeddings=None, gallery_embeddings=None):
        """Reduce a block of query rows to per-query ranks; the rows themselves are not kept."""
        accumulator = getattr(self, "_accumulator", None)
        if accumulator is None:
            accumulator = self._accumulator = RankAccumulator(adversarial, ties, chunk_size)
        elif ties != accumulator.ties:
            raise ValueError(f"`ties` changed between batches: {accumulator.ties!r} then {ties!r}")
        elif adversarial is not None and not np.array_equal(
                _adversarial_mask(adversarial, accumulator.num_gallery), accumulator.adversarial):
            raise ValueError("`adversarial` changed between batches: pass the same mask or indices to every batch")
        if predictions is not None:
            accumulator.update(predictions, references)
        else:
            accumulator.update_embeddings(query_embeddings, gallery_embeddings, references)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one query: ``prediction`` is its row of scores, ``reference`` its correct gallery indices."""
        self.add_batch(predictions=[prediction], references=[reference], **kwargs)

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Compute the metric on ``predictions`` or, without them, on the batches added so far."""
        accumulator = getattr(self, "_accumulator", None)
        self._accumulator = None
        if predictions is None and kwargs.get("query_embeddings") is None:
            if accumulator is None:
                raise ValueError("`predictions` is required (or batches added with `add_batch`)")
            unused = sorted(set(kwargs) - {"k", "per_query", "bootstrap", "seed"})
            if unused:
                raise ValueError(f"{unused} belong to `add_batch`; `compute()` after batches takes only "
                                 "`k`, `per_query`, `bootstrap` and `seed`")
            return accumulator.compute(**kwargs)
        if accumulator is not None:
            raise ValueError("batches were added with `add_batch`: call `compute()` without `predictions`")
        return self._compute(predictions=predictions, references=references, **kwargs)

    def _compute(self, predictions=None, references=None, **kwargs):
        return rococo_recall(predictions, references, **kwargs)
