"""Shared cases of the metric's tests: random inputs, the expected outputs by sorting, and refused inputs."""

import math

import numpy as np
import pytest

from helpers.reference_metric import sorted_per_query


def random_case(rng, num_queries, num_gallery, num_adversarial, max_refs=3, levels=None):
    """A random score matrix with references avoiding the adversarial items; `levels` makes ties."""
    if levels:
        scores = rng.integers(0, levels, (num_queries, num_gallery)).astype(np.float32)
    else:
        scores = rng.standard_normal((num_queries, num_gallery)).astype(np.float32)
    adversarial = np.zeros(num_gallery, dtype=bool)
    adversarial[rng.choice(num_gallery, num_adversarial, replace=False)] = True
    clean = np.flatnonzero(~adversarial)
    references = [rng.choice(clean, rng.integers(1, max_refs + 1), replace=False).tolist()
                  for _ in range(num_queries)]
    return scores, references, adversarial


def embedding_case(seed=8):
    """Query and gallery embeddings with references and an adversarial mask, and their score matrix."""
    rng = np.random.default_rng(seed)
    queries = rng.standard_normal((33, 16)).astype(np.float32)
    gallery = rng.standard_normal((45, 16)).astype(np.float32)
    _, references, adversarial = random_case(rng, 33, 45, 15)
    return queries, gallery, references, adversarial, queries @ gallery.T


def expected_outputs(scores, references, adversarial, ties, ks):
    """The metric's summary outputs for ``ks`` and its per-query outputs (a dict), from the sorting reference."""
    per_query = sorted_per_query(scores, references, adversarial, ties)
    rank, clean_rank, top1 = per_query["rank"], per_query["clean_rank"], per_query["top1_adversarial"]
    out = {}
    for prefix, r in (("", rank), ("clean_", clean_rank)):
        recalls = [100.0 * np.sum(r < k) / len(r) for k in ks]
        out.update({f"{prefix}recall@{k}": v for k, v in zip(ks, recalls)})
        out[f"{prefix}r_mean"] = sum(recalls) / len(recalls)
    out["false_rate"] = 100.0 * top1.sum() / len(top1)
    clean_top1 = clean_rank == 0
    out["attack_success_rate"] = (100.0 * np.sum(clean_top1 & (rank > 0)) / clean_top1.sum()
                                  if clean_top1.any() else math.nan)
    return out, per_query


# The per-query outputs (per_query=True) and their dtypes.
PER_QUERY_DTYPES = {"rank": np.int64, "clean_rank": np.int64, "top1_adversarial": bool, "top_index": np.int64,
                    "top_score": np.float64, "best_correct_index": np.int64, "best_correct_score": np.float64}
PER_QUERY_KEYS = tuple(PER_QUERY_DTYPES)


def assert_per_query_equal(result, expected):
    """Every per-query output of ``result`` equals ``expected`` (a dict of arrays), value and dtype."""
    assert set(expected) == set(PER_QUERY_DTYPES)
    for key, dtype in PER_QUERY_DTYPES.items():
        assert result[key].dtype == dtype, key
        np.testing.assert_array_equal(result[key], expected[key], err_msg=key)


def assert_same(result, expected):
    for key, value in expected.items():
        if math.isnan(value):
            assert math.isnan(result[key]), key
        else:
            assert result[key] == pytest.approx(value, abs=1e-12), key


# Inputs the metric refuses, and what it says (the README's metric card lists them).
BAD_INPUTS = [
    (dict(predictions=[1.0, 2.0]), "`predictions` must be a non-empty 2-D matrix.*shape \\(2,\\)"),
    (dict(predictions=[[0.1, float("nan")], [0.2, 0.3]]), "`predictions` must be finite: predictions\\[0\\]\\[1\\] is nan"),
    (dict(predictions=[[0.1, 0.5], [0.2, -float("inf")]]), "predictions\\[1\\]\\[1\\] is -inf"),
    (dict(references=[0]), "`references` must have one entry per query \\(2\\), got 1"),
    (dict(references=[0, []]), "`references\\[1\\]` is empty"),
    (dict(references=[0, 5]), "`references\\[1\\]` holds 5, out of range for a gallery of 3"),
    (dict(references=[0, -1]), "`references\\[1\\]` holds a negative index"),
    (dict(references=[0, "a"]), "`references\\[1\\]` must be an int or a list of ints, got 'a'"),
    (dict(references=[0, 2], adversarial=[2]), "`references\\[1\\]` points at gallery item 2.*adversarial"),
    (dict(adversarial=[True, False]), "`adversarial` mask must have one entry per gallery item \\(3\\), got 2"),
    (dict(adversarial=[7]), "`adversarial` index 7 is out of range for a gallery of 3"),
    (dict(ties="random"), "`ties` must be one of \\('pessimistic', 'optimistic'\\), got 'random'"),
    (dict(k=0), "`k` values must be ints from 1 to the gallery size 3, got 0"),
    (dict(k=(1, 4)), "`k` values must be ints from 1 to the gallery size 3, got 4"),
    (dict(chunk_size=0), "`chunk_size` must be a positive int, got 0"),
    (dict(bootstrap=-1), "`bootstrap` must be a non-negative int, got -1"),
    (dict(references=np.zeros((2, 0), dtype=int)), "`references` must hold at least one gallery index per query, "
                                                   "got shape \\(2, 0\\)"),
    (dict(references=np.array([[1, 0, 0], [0, 1, 0]])), "`references\\[0\\]` has one int per gallery item \\(3\\), "
                                                         "all 0 or 1: it reads as a relevance mask"),
    (dict(references=[[1, 0, 0], 1]), "`references\\[0\\]` has one int per gallery item \\(3\\), all 0 or 1"),
    (dict(adversarial=[0, 0, 1]), "`adversarial` has one int per gallery item \\(3\\), all 0 or 1: it reads as a "
                                  "mask and as indices. Pass a boolean mask"),
    (dict(adversarial=[0.0, 2.0]), "`adversarial` must be a boolean mask or a list of ints, got dtype float64"),
    (dict(predictions=[[0.9, 0.1], [0.2]]), "`predictions` must be a 2-D matrix \\(queries x gallery\\) of numbers"),
    (dict(predictions=[["a", "b", "c"], ["d", "e", "f"]]), "`predictions` must hold real numbers .*got dtype <U1"),
    (dict(predictions=np.array([[1 + 1j, 0, 0], [0, 1, 0]])), "`predictions` must hold real numbers .*complex128"),
    (dict(predictions=np.array([[2**60, 2**60 + 1, 0], [0, 1, 0]])), "`predictions` holds integers beyond 2\\*\\*53"),
    (dict(k=True), "`k` must be an int or a sequence of ints, got True"),
    (dict(k=1.0), "`k` must be an int or a sequence of ints, got 1.0"),
    (dict(k="1"), "`k` must be an int or a sequence of ints, got '1'"),
    (dict(references=np.array([0, 2**63], dtype=np.uint64)), "`references\\[1\\]` holds 9223372036854775808, out of range "
                                                             "for a gallery of 3"),
    (dict(references=np.array([[0], [2**64 - 1]], dtype=np.uint64)), "`references\\[1\\]` holds 18446744073709551615, out "
                                                                   "of range"),
    (dict(references=[0, [1, np.uint64(2**63)]]), "`references\\[1\\]` holds 9223372036854775808, out of range"),
    (dict(references=[0, [1, 2.0]]), "`references\\[1\\]` must be an int or a list of ints, got \\[1, 2.0\\]"),
    (dict(bootstrap=2, seed=-1), "`seed` must be a non-negative int or None, got -1"),
    (dict(bootstrap=2, seed=1.5), "`seed` must be a non-negative int or None, got 1.5"),
]


def outputs(result):
    """The metric's outputs in one dict: a ``GalleryResult``'s numbers and per-query arrays, or a metric's dict."""
    return {**result.metrics, **result.per_query} if hasattr(result, "metrics") else result


def assert_same_results(results, expected):
    """Each gallery's outputs (GalleryResults or the metric's dicts) are equal, name by name."""
    assert set(results) == set(expected)
    for key, output in expected.items():
        assert set(outputs(results[key])) == set(outputs(output)), key
        for name, value in outputs(output).items():
            np.testing.assert_array_equal(outputs(results[key])[name], value, err_msg=f"{key} {name}")
