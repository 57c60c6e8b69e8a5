"""The NumPy ranker gives, for every gallery width, layout, dtype, memory layout and tie, what sorting gives (chunk
sizes and random scores by hypothesis: ``test_metric.py``).

Each case is ranked with and without ``per_query``: the outputs agree, and the per-query outputs equal the sorting
reference (``helpers/reference_metric.py``), value and dtype.
"""

import zlib

import numpy as np
import pytest

from helpers.metric_cases import PER_QUERY_DTYPES, random_case
from helpers.reference_metric import sorted_per_query
from rococo_eval.layout import image_to_text_layout, text_to_image_layout
from rococo_recall import rococo_recall as compute


def assert_same(result, expected):
    """Every output of ``expected`` in ``result``, equal (NaN as NaN), arrays of the same dtype."""
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            assert result[key].dtype == value.dtype and np.array_equal(result[key], value), key
        elif value != value:  # attack_success_rate is NaN when no query is right on the clean gallery
            assert result[key] != result[key], key
        else:
            assert result[key] == value, key


def assert_sorts_right(scores, references, adversarial, ties="pessimistic", **options):
    """With and without per_query, the same numbers; the per-query outputs are the sorting reference's."""
    ks = tuple(k for k in (1, 5, 10) if k <= np.shape(scores)[1])
    summary = compute(scores, references, adversarial, k=ks, ties=ties, **options)
    result = compute(scores, references, adversarial, k=ks, ties=ties, per_query=True, **options)
    assert_same(summary, {key: value for key, value in result.items() if key in summary})
    expected = sorted_per_query(np.asarray(scores, dtype=np.float64), references, adversarial, ties)
    for key, dtype in PER_QUERY_DTYPES.items():
        assert result[key].dtype == dtype, key
        np.testing.assert_array_equal(result[key], expected[key], err_msg=key)
    return result


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
@pytest.mark.parametrize("levels", [None, 2, 5, 40])
@pytest.mark.parametrize("num_gallery", [1, 3, 50, 64, 130, 700])
def test_random_scores_with_ties(ties, levels, num_gallery):
    """Integer-valued float32 scores tie within and across kinds; galleries narrower than 64, not multiples of 64,
    and wider than 256."""
    rng = np.random.default_rng(zlib.crc32(repr((ties, levels, num_gallery)).encode()))
    num_adversarial = min(num_gallery - 1, num_gallery // 3 + 1)
    scores, references, adversarial = random_case(rng, 41, num_gallery, num_adversarial,
                                                  max_refs=min(3, num_gallery - num_adversarial), levels=levels)
    assert_sorts_right(scores, references, adversarial, ties)


def test_constant_and_filled_rows():
    """Rows of one score (every item at the top) and BLIP-style rows filled with -100 beyond a re-ranked few."""
    rng = np.random.default_rng(2)
    scores, references, adversarial = random_case(rng, 30, 600, 200)
    scores[:10] = 0.5
    scores[10:20, 16:] = -100.0
    scores[20:, :] = -100.0
    scores[25:, [refs[0] for refs in references[25:]]] = 3.0
    for ties in ("pessimistic", "optimistic"):
        assert_sorts_right(scores, references, adversarial, ties)


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
@pytest.mark.parametrize("layout", ["image_to_text official", "image_to_text dataset", "text_to_image"])
def test_official_layouts(ties, layout):
    """Both official layouts, at a scale of 60 images: interleaved runs of adversarial captions, or one run of
    altered images; model-like scores rounded to make ties, one correct item and one adversarial item lifted."""
    rng = np.random.default_rng(zlib.crc32(layout.encode()))
    captions = rng.choice([5, 6], size=60, p=[0.9, 0.1]).tolist()
    direction, _, order = layout.partition(" ")
    built = (image_to_text_layout(captions, attacked=True, order=order) if direction == "image_to_text"
             else text_to_image_layout(captions))
    inputs = built.metric_inputs()
    scores = rng.standard_normal((built.num_queries, built.num_gallery))
    rows = np.arange(built.num_queries)
    scores[rows, [refs[0] for refs in built.references]] += 2.5
    scores[rows, rng.choice(np.flatnonzero(built.adversarial), built.num_queries)] += 2.5
    scores = np.round(scores * 4).astype(np.float32)
    assert_sorts_right(scores, inputs["references"], built.adversarial, ties)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("column", ["wrong", "correct", "last"])
@pytest.mark.parametrize("per_query", [False, True])
def test_non_finite_rows_are_refused_by_name(value, column, per_query):
    """A ValueError naming the first non-finite row and its first non-finite score."""
    rng = np.random.default_rng(3)
    scores, references, adversarial = random_case(rng, 40, 90, 30, levels=4)
    references[23] = [5]
    adversarial[5] = False
    where = {"wrong": 17, "correct": 5, "last": 89}[column]
    scores[23, where] = value
    scores[31, 2] = np.nan  # a later row: not the one named

    with pytest.raises(ValueError) as caught:
        compute(scores, references, adversarial, per_query=per_query, chunk_size=8)
    assert f"predictions[23][{where}] is {value}" in str(caught.value)


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16", "int32", "longdouble"])
def test_input_dtypes(dtype):
    """float64 is ranked in float64, float16 and bfloat16 in float32 (exactly), ints in float64, long double in long
    double."""
    rng = np.random.default_rng(4)
    scores, references, adversarial = random_case(rng, 30, 150, 50, levels=12)
    if dtype == "bfloat16":
        import ml_dtypes

        given_scores = (scores / 7).astype(ml_dtypes.bfloat16)
    else:
        given_scores = (scores if dtype == "int32" else scores / 7).astype(dtype)
    assert_sorts_right(given_scores, references, adversarial)


def test_non_contiguous_and_read_only_inputs(tmp_path):
    """Column slices, Fortran order, a row slice with an offset and a read-only memory map rank alike."""
    rng = np.random.default_rng(5)
    scores, references, adversarial = random_case(rng, 33, 200, 70, levels=9)
    wide = np.zeros((33, 400), dtype=np.float32)
    wide[:, ::2] = scores
    tall = np.zeros((40, 200), dtype=np.float32)
    tall[7:] = scores
    np.save(tmp_path / "scores.npy", scores)
    mapped = np.load(tmp_path / "scores.npy", mmap_mode="r")
    assert not mapped.flags.writeable
    for given_scores in (wide[:, ::2], np.asfortranarray(scores), tall[7:], mapped, scores.T.copy().T):
        assert_sorts_right(given_scores, references, adversarial, chunk_size=5)


@pytest.mark.parametrize("flush_denormal", [False, True])
def test_optimistic_ties_at_zero_with_subnormals_flushed(flush_denormal):
    """Optimistic: an item above the truth scores more than it, also with subnormals flushed to zero (as torch can
    set), where the next float above 0 reads as 0."""
    import torch

    scores = np.array([[0.0, 0.0, -1.0], [0.5, 0.0, 0.0]], dtype=np.float32)
    torch.set_flush_denormal(flush_denormal)
    try:
        result = compute(scores, [0, 1], [2], k=1, ties="optimistic", per_query=True)
    finally:
        torch.set_flush_denormal(False)
    assert result["rank"].tolist() == [0, 1] and result["recall@1"] == 50.0
