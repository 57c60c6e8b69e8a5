"""The RoCOCO Recall metric against slow references, on random, tied, streamed and official inputs."""

import zlib

import evaluate
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rococo_recall
from helpers import REPO_ROOT
from helpers.metric_cases import (BAD_INPUTS, PER_QUERY_KEYS, assert_per_query_equal, assert_same, embedding_case,
                          expected_outputs, random_case)
from helpers.reference_metric import official_itm_eval
from rococo_eval.layout import image_to_text_layout, text_to_image_layout
from rococo_recall import RankAccumulator, rococo_recall as compute

METRIC_PATH = str(REPO_ROOT / "rococo_recall.py")


@pytest.fixture(scope="module")
def metric():
    return evaluate.load(METRIC_PATH)


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
@pytest.mark.parametrize("levels", [None, 3, 12])
@pytest.mark.parametrize("chunk_size", [None, 1, 7, 64])
def test_matches_sorting_reference(ties, levels, chunk_size):
    rng = np.random.default_rng(zlib.crc32(repr((ties, levels, chunk_size)).encode()))
    scores, references, adversarial = random_case(rng, 53, 97, 30, levels=levels)
    ks = (1, 5, 10)
    result = compute(scores, references, adversarial, k=ks, ties=ties, chunk_size=chunk_size, per_query=True)
    expected, per_query = expected_outputs(scores, references, adversarial, ties, ks)
    assert_same(result, expected)
    assert_per_query_equal(result, per_query)
    assert_same(compute(scores, references, adversarial, k=ks, ties=ties, chunk_size=chunk_size), expected)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_matches_sorting_reference_hypothesis(data):
    num_queries = data.draw(st.integers(1, 10))
    num_gallery = data.draw(st.integers(1, 300))  # across the packed bits' byte boundaries
    adversarial = np.array(data.draw(st.lists(st.booleans(), min_size=num_gallery, max_size=num_gallery)))
    clean = np.flatnonzero(~adversarial)
    if len(clean) == 0:
        adversarial[0] = False
        clean = np.array([0])
    values = st.floats(-3, 3, allow_nan=False, width=32) | st.sampled_from([0.0, -0.0, 1.0, 2.0, -1.0])
    scores = np.array(data.draw(st.lists(st.lists(values, min_size=num_gallery, max_size=num_gallery),
                                         min_size=num_queries, max_size=num_queries)), dtype=np.float32)
    references = [data.draw(st.lists(st.sampled_from(clean.tolist()), min_size=1, max_size=4))
                  for _ in range(num_queries)]
    assume(not any(len(r) == num_gallery > 1 and set(r) <= {0, 1} for r in references))  # refused: see below
    ties = data.draw(st.sampled_from(["pessimistic", "optimistic"]))
    ks = tuple(sorted(set(data.draw(st.lists(st.integers(1, num_gallery), min_size=1, max_size=3)))))
    chunk_size = data.draw(st.sampled_from([None, 1, 2, 4, 5]))
    result = compute(scores, references, adversarial, k=ks, ties=ties, chunk_size=chunk_size, per_query=True)
    expected, per_query = expected_outputs(scores, references, adversarial, ties, ks)
    assert_same(result, expected)
    assert_per_query_equal(result, per_query)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_numpy_dtypes_and_lists_agree(dtype):
    rng = np.random.default_rng(4)
    scores, references, adversarial = random_case(rng, 30, 50, 10, levels=9)
    expected = compute(scores.astype(np.float64), references, adversarial, per_query=True)
    for given_scores in (scores.astype(dtype), scores.astype(dtype).tolist()):
        result = compute(given_scores, references, np.flatnonzero(adversarial).tolist(), per_query=True)
        np.testing.assert_array_equal(result["rank"], expected["rank"])
        assert result["r_mean"] == expected["r_mean"]


def test_constant_scores_get_no_credit_when_pessimistic():
    scores = np.zeros((4, 10), dtype=np.float32)
    references = [[0, 1], 2, 3, [4]]
    pessimistic = compute(scores, references, adversarial=[9])
    optimistic = compute(scores, references, adversarial=[9], ties="optimistic")
    assert pessimistic["recall@1"] == 0.0 and pessimistic["false_rate"] == 100.0
    assert optimistic["recall@1"] == 100.0 and optimistic["false_rate"] == 0.0


def test_blip_style_filled_scores():
    """BLIP re-ranks the top candidates and fills the rest with -100: big blocks of ties are normal input."""
    rng = np.random.default_rng(5)
    scores, references, adversarial = random_case(rng, 20, 300, 100)
    scores[:, 16:] = -100.0
    for ties in ("pessimistic", "optimistic"):
        expected, _ = expected_outputs(scores, references, adversarial, ties, (1, 5, 10))
        assert_same(compute(scores, references, adversarial, ties=ties), expected)


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
@pytest.mark.parametrize("runs", [2, 9, 40])
def test_top_item_ties_between_kinds_at_the_top(ties, runs):
    """A query's top-1 item, ties between kinds at the top included, is the reference's item, with and without
    per_query, whatever the number of runs of items of one kind."""
    rng = np.random.default_rng(runs)
    num_gallery = 120
    adversarial = np.arange(num_gallery) * runs // num_gallery % 2 == 1  # `runs` runs, clean first
    scores = rng.integers(0, 40, (60, num_gallery)).astype(np.float32)  # 40 levels: ties at the top
    clean = np.flatnonzero(~adversarial)
    references = [rng.choice(clean, rng.integers(1, 4), replace=False).tolist() for _ in range(60)]
    result = compute(scores, references, adversarial, ties=ties, chunk_size=7, per_query=True)
    _, per_query = expected_outputs(scores, references, adversarial, ties, (1,))
    assert_per_query_equal(result, per_query)
    top1 = per_query["top1_adversarial"]
    at_top = scores == scores.max(axis=1, keepdims=True)
    assert 0 < top1.sum() < len(top1)
    assert ((at_top & adversarial).any(axis=1) & (at_top & ~adversarial).any(axis=1)).any()  # a tie of both kinds
    # without per_query, the top-1 check agrees
    assert compute(scores, references, adversarial, ties=ties, chunk_size=7)["false_rate"] == 100 * top1.sum() / 60


@pytest.mark.parametrize("ties, top_index", [("pessimistic", [3, 4, 4, 0]), ("optimistic", [0, 1, 2, 0])])
def test_top_item_by_hand(ties, top_index):
    """Ties at the top go by the policy: pessimistic, adversarial, then clean wrong, then correct; optimistic the
    reverse; then the lowest column."""
    scores = [[0.9, 0.1, 0.9, 0.9, 0.2],    # correct 0, clean wrong 2, adversarial 3 tie at the top
              [0.1, 0.7, 0.7, 0.3, 0.7],    # correct 1 and 2 (lowest: 1) tie with adversarial 4 at the top
              [0.5, 0.2, 0.8, 0.1, 0.8],    # wrong 2 (clean) and 4 (adversarial) above the correct 0
              [0.6, 0.2, 0.3, 0.4, 0.5]]    # the correct item 0 is first
    references = [0, [1, 2], 0, [0, 1]]
    result = compute(scores, references, adversarial=[3, 4], ties=ties, k=1, per_query=True)
    assert result["top_index"].tolist() == top_index
    assert result["best_correct_index"].tolist() == [0, 1, 0, 0]
    assert result["top_score"].tolist() == [0.9, 0.7, 0.8, 0.6]
    assert result["best_correct_score"].tolist() == [0.9, 0.7, 0.5, 0.6]
    assert result["top1_adversarial"].tolist() == [ties == "pessimistic"] * 3 + [False]
    assert result["rank"].tolist() == ([2, 1, 2, 0] if ties == "pessimistic" else [0, 0, 2, 0])


def test_flipped_queries_are_won_by_an_adversarial_item():
    """What the failure analysis reads: for a query right on the clean gallery and wrong on the whole one, the top
    item is adversarial and `top_score - best_correct_score` is how far it won by."""
    rng = np.random.default_rng(16)
    scores, references, adversarial = random_case(rng, 200, 60, 20)
    rows = np.arange(len(scores))
    scores[rows, [refs[0] for refs in references]] += 2.5  # most queries right on the clean gallery ...
    scores[rows[::2], rng.choice(np.flatnonzero(adversarial), 100)] += 3.0  # ... and half attacked
    result = compute(scores, references, adversarial, k=1, per_query=True)
    flipped = (result["clean_rank"] == 0) & (result["rank"] > 0)
    assert flipped.sum() > 10
    assert adversarial[result["top_index"][flipped]].all()
    assert (result["top_score"] > result["best_correct_score"])[flipped].all()
    np.testing.assert_array_equal(result["top1_adversarial"], adversarial[result["top_index"]])
    correct_first = result["rank"] == 0
    np.testing.assert_array_equal(result["top_index"][correct_first], result["best_correct_index"][correct_first])
    np.testing.assert_array_equal(result["top_score"], scores[rows, result["top_index"]])
    np.testing.assert_array_equal(result["top_score"], scores.max(axis=1))
    np.testing.assert_array_equal(result["best_correct_score"], scores[rows, result["best_correct_index"]])


@pytest.mark.parametrize("chunk_rows", [1, 6, 25])
def test_add_batch_and_accumulator_equal_whole_matrix(metric, chunk_rows):
    rng = np.random.default_rng(6)
    scores, references, adversarial = random_case(rng, 50, 80, 25, levels=5)
    whole = metric.compute(predictions=scores, references=references, adversarial=adversarial, per_query=True)
    accumulator = RankAccumulator(adversarial=adversarial)
    for start in range(0, 50, chunk_rows):
        metric.add_batch(predictions=scores[start:start + chunk_rows], references=references[start:start + chunk_rows],
                         adversarial=adversarial)
        accumulator.update(scores[start:start + chunk_rows], references[start:start + chunk_rows])
    for streamed in (metric.compute(per_query=True), accumulator.compute(per_query=True)):
        for key, value in whole.items():
            np.testing.assert_array_equal(streamed[key], value)
    assert not any(isinstance(v, np.ndarray) and v.ndim == 2 for v in vars(accumulator).values())


def test_accumulator_without_top_items_refuses_per_query():
    accumulator = RankAccumulator(adversarial=[2], top_items=False)
    accumulator.update([[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], references=[0, 1])
    assert accumulator.compute(k=1)["false_rate"] == 50.0
    with pytest.raises(ValueError, match="`per_query` needs each query's top-1 item"):
        accumulator.compute(per_query=True)


def test_add_one_query_at_a_time(metric):
    rng = np.random.default_rng(7)
    scores, references, adversarial = random_case(rng, 5, 12, 4)
    for row, refs in zip(scores, references):
        metric.add(prediction=row, reference=refs, adversarial=adversarial)
    assert metric.compute() == metric.compute(predictions=scores, references=references, adversarial=adversarial)


def test_embeddings_equal_scores():
    queries, gallery, references, adversarial, scores = embedding_case()
    expected = compute(scores, references, adversarial, per_query=True)
    result = compute(query_embeddings=queries, gallery_embeddings=gallery, references=references,
                     adversarial=adversarial, chunk_size=4, per_query=True)
    for key in PER_QUERY_KEYS:  # products of 4 rows may round a score's last bits unlike those of 33 rows
        np.testing.assert_allclose(result[key], expected[key], rtol=1e-5, atol=0, err_msg=key)
        if not key.endswith("score"):
            np.testing.assert_array_equal(result[key], expected[key], err_msg=key)
    assert result["r_mean"] == expected["r_mean"]
    # the same products as the metric makes them, 4 rows at a time (BLAS rounds by shape, differently by CPU): equal
    blocks = np.concatenate([queries[start:start + 4] @ gallery.T for start in range(0, len(queries), 4)])
    np.testing.assert_equal(result, compute(blocks, references, adversarial, per_query=True))


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    rng = np.random.default_rng(9)
    scores, references, adversarial = random_case(rng, 200, 30, 10)
    first = compute(scores, references, adversarial, bootstrap=200, seed=1)
    again = compute(scores, references, adversarial, bootstrap=200, seed=1)
    other = compute(scores, references, adversarial, bootstrap=200, seed=2)
    assert first == again and first["recall@5_ci"] != other["recall@5_ci"]
    for key in ("recall@1", "recall@10", "clean_recall@5", "false_rate", "attack_success_rate"):
        low, high = first[f"{key}_ci"]
        assert low <= first[key] <= high and low < high
    fresh = compute(scores, references, adversarial, bootstrap=50, seed=None)  # NumPy's fresh entropy, as before
    assert fresh["recall@1"] == first["recall@1"] and "recall@1_ci" in fresh


def test_evaluate_load_and_card(metric):
    assert "arXiv:2304.10727" in metric.description or "2304.10727" in metric.citation
    assert "pessimistic" in metric.inputs_description and "percent" in metric.inputs_description
    result = metric.compute(predictions=[[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], references=[0, 1], adversarial=[2],
                            k=1)
    assert result["recall@1"] == 50.0 and result["num_gallery"] == 3


@pytest.mark.parametrize("overrides, message", BAD_INPUTS)
def test_bad_input_is_refused_by_name(metric, overrides, message):
    kwargs = dict(predictions=[[0.9, 0.1, 0.5], [0.2, 0.8, 0.1]], references=[0, 1], k=1)
    kwargs.update(overrides)
    with pytest.raises(ValueError, match=message):
        metric.compute(**kwargs)


def test_batches_must_agree_on_the_gallery(metric):
    metric.add_batch(predictions=[[0.5, 0.1, 0.2]], references=[0], adversarial=[2], ties="optimistic")
    with pytest.raises(ValueError, match="`adversarial` changed between batches"):
        metric.add_batch(predictions=[[0.5, 0.1, 0.2]], references=[0], adversarial=[1], ties="optimistic")
    with pytest.raises(ValueError, match="`ties` changed between batches"):
        metric.add_batch(predictions=[[0.5, 0.1, 0.2]], references=[0], adversarial=[2])
    with pytest.raises(ValueError, match="every block must score the same gallery: got 2 gallery items after 3"):
        metric.add_batch(predictions=[[0.5, 0.1]], references=[0], ties="optimistic")
    assert metric.compute(k=1)["num_queries"] == 1


def test_compute_after_batches_refuses_batch_arguments(metric):
    metric.add_batch(predictions=[[0.5, 0.1]], references=[0])
    with pytest.raises(ValueError, match="belong to `add_batch`"):
        metric.compute(adversarial=[1])
    assert metric.compute(k=1)["num_queries"] == 1  # the refused call kept the batch
    with pytest.raises(ValueError, match="`predictions` is required"):
        metric.compute()


@pytest.mark.slow
def test_official_image_to_text_layouts_match_itm_eval(captions_per_image):
    """Every text attack's official gallery (50,010 captions incl. the 6-caption images) and the clean one. The
    official loop (an argsort of the whole gallery per query) scores every image with 6 captions and every fifth
    other image: the gallery's every column, at a fifth of the loop's time."""
    rng = np.random.default_rng(10)
    rows = np.flatnonzero((np.asarray(captions_per_image) == 6) | (np.arange(len(captions_per_image)) % 5 == 0))
    for attacked in (False, True):
        layout = image_to_text_layout(captions_per_image, attacked=attacked, order="official")
        assert layout.num_gallery == (50_010 if attacked else 25_010)
        scores = rng.standard_normal((len(rows), layout.num_gallery)).astype(np.float32)
        inputs = layout.metric_inputs()
        inputs["references"] = [inputs["references"][row] for row in rows]
        planted = rng.random(len(rows)) < 0.6
        for query in np.flatnonzero(planted):
            scores[query, inputs["references"][query][rng.integers(len(inputs["references"][query]))]] += 4.5
        result = compute(scores, **inputs)
        expected = official_itm_eval(scores, inputs["references"], layout.adversarial)
        for key, value in expected.items():
            assert result[key] == value, key
        assert 20 < result["recall@1"] < 80


@pytest.mark.slow
def test_official_text_to_image_layout_matches_itm_eval(captions_per_image):
    """25,010 caption queries against 5,000 originals and their 5,000 altered copies; the official loop scores every
    fifth caption (the gallery's every column, at a fifth of the loop's time)."""
    rng = np.random.default_rng(11)
    layout = text_to_image_layout(captions_per_image)
    assert (layout.num_queries, layout.num_gallery) == (25_010, 10_000)
    rows = np.arange(0, layout.num_queries, 5)
    scores = rng.standard_normal((len(rows), layout.num_gallery)).astype(np.float32)
    inputs = layout.metric_inputs()
    inputs["references"] = [inputs["references"][row] for row in rows]
    own = np.array([r[0] for r in inputs["references"]])
    scores[np.arange(len(own)), own] += 3.0
    scores[np.arange(len(own)), own + 5000] += 3.0
    result = compute(scores, **inputs)
    expected = official_itm_eval(scores, inputs["references"], layout.adversarial)
    for key, value in expected.items():
        assert result[key] == value, key
    assert 20 < result["false_rate"] < 80


def test_metric_module_is_self_contained():
    source = (REPO_ROOT / "rococo_recall.py").read_text()
    top_level_imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    allowed = {"__future__", "logging", "os", "sys", "zlib", "concurrent", "dataclasses", "typing", "numpy"}
    assert all(line.split()[1].split(".")[0] in allowed
               for line in top_level_imports)  # datasets and evaluate: imported for the metric class only
    assert rococo_recall.__doc__


def _exact_ranks(scores, references, adversarial, ties="pessimistic"):
    """Ranks computed on each score's position among the distinct values (an exact sort in the input dtype)."""
    _, levels = np.unique(scores, return_inverse=True)
    as_levels = levels.reshape(scores.shape).astype(np.float64)
    return compute(as_levels, references, adversarial, k=1, ties=ties, per_query=True)


def test_long_double_scores_are_compared_in_long_double():
    """Values one long-double ulp apart must not collapse into a float32 tie (ranks went negative)."""
    base = np.longdouble(0.9)
    ulp = np.spacing(base)
    scores = np.array([[base, base + ulp, 0.1, base + 2 * ulp],
                       [0.2, base, base - ulp, 0.3]], dtype=np.longdouble)
    references, adversarial = [0, 1], [3]
    for ties in ("pessimistic", "optimistic"):
        result = compute(scores, references, adversarial, k=1, ties=ties, per_query=True)
        expected = _exact_ranks(scores, references, adversarial, ties)
        assert (result["rank"] >= 0).all()
        np.testing.assert_array_equal(result["rank"], expected["rank"])
        np.testing.assert_array_equal(result["top1_adversarial"], expected["top1_adversarial"])
    assert compute(scores, references, adversarial, k=1, per_query=True)["rank"].tolist() == [2, 0]


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_ml_dtypes_floats_are_converted_exactly(name):
    import ml_dtypes  # NumPy's bfloat16 and float8 formats; installed by the test extra (a missing one fails)

    rng = np.random.default_rng(12)
    scores, references, adversarial = random_case(rng, 20, 40, 12)
    narrow = scores.astype(getattr(ml_dtypes, name))
    wide = narrow.astype(np.float64)
    assert np.unique(wide).size < wide.size  # the narrow format makes ties: the case is not trivial
    for ties in ("pessimistic", "optimistic"):
        result = compute(narrow, references, adversarial, ties=ties, per_query=True)
        expected = compute(wide, references, adversarial, ties=ties, per_query=True)
        for key, value in expected.items():
            np.testing.assert_array_equal(result[key], value)


def test_large_integer_scores_are_exact_or_refused():
    small = np.array([[2**53, 2**53 - 1, 7], [1, 2, 3]], dtype=np.int64)
    assert compute(small, [0, 2], k=1, per_query=True)["rank"].tolist() == [0, 0]
    big = np.array([[2**60, 2**60 + 1, 0], [0, 1, 0]], dtype=np.int64)  # in float64 these two would tie
    with pytest.raises(ValueError, match="`predictions` holds integers beyond 2\\*\\*53"):
        compute(big, [0, 2])


def test_integer_mask_of_indices_one_per_gallery_item_is_ambiguous():
    scores = np.array([[0.9, 0.1, 0.95, 0.2], [0.2, 0.8, 0.1, 0.3]])
    with pytest.raises(ValueError, match="`adversarial` has one int per gallery item \\(4\\), all 0 or 1"):
        compute(scores, [0, 1], adversarial=[0, 0, 1, 1])
    as_mask = compute(scores, [0, 1], adversarial=np.array([0, 0, 1, 1], dtype=bool), k=1)
    as_indices = compute(scores, [0, 1], adversarial=[2, 3], k=1)
    assert as_mask == as_indices and as_mask["recall@1"] == 50.0 and as_mask["num_adversarial"] == 2


def test_non_finite_scores_are_named_in_the_argument_and_among_all_queries():
    rng = np.random.default_rng(13)
    scores, references, adversarial = random_case(rng, 50, 20, 5)
    scores[37, 11] = np.nan
    with pytest.raises(ValueError, match=r"predictions\[37\]\[11\] is nan"):
        compute(scores, references, adversarial, chunk_size=8)
    accumulator = RankAccumulator(adversarial)
    accumulator.update(scores[:30], references[:30])
    with pytest.raises(ValueError, match=r"predictions\[7\]\[11\] is nan \(query 37 of all added\)"):
        accumulator.update(scores[30:], references[30:])


def test_overflowing_embeddings_are_named_as_embeddings():
    queries = np.ones((40, 2), dtype=np.float32)
    gallery = np.ones((6, 2), dtype=np.float32)
    queries[33] = 3e38
    with pytest.raises(ValueError, match=r"`query_embeddings` and `gallery_embeddings` must be finite: the dot "
                                         r"product of query_embeddings\[33\] and gallery_embeddings\[0\] is inf"):
        with np.errstate(over="ignore"):
            compute(query_embeddings=queries, gallery_embeddings=gallery, references=[1] * 40, chunk_size=8)
    gallery[4, 1] = np.inf
    with pytest.raises(ValueError, match=r"`gallery_embeddings` must be finite: gallery_embeddings\[4\]\[1\] is inf"):
        compute(query_embeddings=queries, gallery_embeddings=gallery, references=[1] * 40)


def test_accumulator_is_unchanged_by_a_refused_block():
    rng = np.random.default_rng(14)
    scores, references, adversarial = random_case(rng, 12, 30, 8)
    accumulator = RankAccumulator(adversarial)
    bad_blocks = [
        (scores[:4], references[:3]),                              # wrong number of references
        (np.where(np.eye(4, 30, dtype=bool), np.nan, scores[:4]), references[:4]),  # non-finite
        (scores[:4, :29], references[:4]),                        # first block binds nothing when refused
    ]
    for block, refs in bad_blocks:
        with pytest.raises(ValueError):
            accumulator.update(block, refs)
    assert accumulator.num_gallery is None and accumulator.num_queries == 0
    accumulator.update(scores[:6], references[:6])
    with pytest.raises(ValueError, match="every block must score the same gallery"):
        accumulator.update(scores[6:, :29], references[6:])
    with_inf = scores[6:].copy()
    with_inf[1, 3] = np.inf
    with pytest.raises(ValueError, match="predictions\\[1\\]\\[3\\] is inf \\(query 7 of all added\\)"):
        accumulator.update(with_inf, references[6:])
    accumulator.update(scores[6:], references[6:])
    expected = compute(scores, references, adversarial, per_query=True)
    for key, value in accumulator.compute(per_query=True).items():
        np.testing.assert_array_equal(value, expected[key])


def test_numpy_1_bit_count_fallback_agrees(monkeypatch):
    """NumPy 1.x has no ``np.bitwise_count``: the byte-table count must give the same ranks."""
    rng = np.random.default_rng(15)
    scores, references, adversarial = random_case(rng, 40, 200, 60, levels=7)
    expected = compute(scores, references, adversarial, per_query=True, chunk_size=3)
    monkeypatch.delattr(np, "bitwise_count", raising=False)
    result = compute(scores, references, adversarial, per_query=True, chunk_size=3)
    for key, value in expected.items():
        np.testing.assert_array_equal(result[key], value)


def test_adversarial_indices_given_twice_are_refused():
    """A 0/1 int mask shorter or longer than the gallery is not caught by the length rule: repeats give it away."""
    scores = np.array([[0.9, 0.1, 0.95, 0.2, 0.3], [0.2, 0.8, 0.1, 0.3, 0.4]])
    with pytest.raises(ValueError, match="`adversarial` index 0 is given 2 times: pass a boolean mask"):
        compute(scores, [2, 3], adversarial=[0, 0, 1, 1])


def test_masked_arrays_are_refused():
    scores = np.ma.masked_array([[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], mask=[[0, 0, 1], [0, 0, 0]])
    with pytest.raises(ValueError, match="`predictions` is a masked array: its mask would be ignored"):
        compute(scores, [0, 1])


@pytest.mark.parametrize("references", [np.zeros(0, dtype=int), np.zeros((0, 5), dtype=int)])
def test_empty_reference_arrays_are_named(references):
    with pytest.raises(ValueError, match="`references` must have one entry per query \\(2\\), got 0"):
        compute([[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], references)
