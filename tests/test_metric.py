"""The RoCOCO Recall metric against slow references, on random, tied, streamed and official inputs."""

import math

import evaluate
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rococo_recall
from conftest import REPO_ROOT
from reference_metric import official_itm_eval, sorted_ranks
from rococo_eval.layout import image_to_text_layout, text_to_image_layout
from rococo_recall import RankAccumulator, rococo_recall as compute

METRIC_PATH = str(REPO_ROOT / "rococo_recall.py")


@pytest.fixture(scope="module")
def metric():
    return evaluate.load(METRIC_PATH)


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


def expected_outputs(scores, references, adversarial, ties, ks):
    rank, clean_rank, top1 = sorted_ranks(scores, references, adversarial, ties)
    out = {}
    for prefix, r in (("", rank), ("clean_", clean_rank)):
        recalls = [100.0 * np.sum(r < k) / len(r) for k in ks]
        out.update({f"{prefix}recall@{k}": v for k, v in zip(ks, recalls)})
        out[f"{prefix}r_mean"] = sum(recalls) / len(recalls)
    out["false_rate"] = 100.0 * top1.sum() / len(top1)
    clean_top1 = clean_rank == 0
    out["attack_success_rate"] = (100.0 * np.sum(clean_top1 & (rank > 0)) / clean_top1.sum()
                                  if clean_top1.any() else math.nan)
    return out, (rank, clean_rank, top1)


def assert_same(result, expected):
    for key, value in expected.items():
        if math.isnan(value):
            assert math.isnan(result[key]), key
        else:
            assert result[key] == pytest.approx(value, abs=1e-12), key


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
@pytest.mark.parametrize("levels", [None, 3, 12])
@pytest.mark.parametrize("chunk_size", [None, 1, 7, 64])
def test_matches_sorting_reference(ties, levels, chunk_size):
    rng = np.random.default_rng(hash((ties, levels, chunk_size)) % 2**32)
    scores, references, adversarial = random_case(rng, 53, 97, 30, levels=levels)
    ks = (1, 5, 10)
    result = compute(scores, references, adversarial, k=ks, ties=ties, chunk_size=chunk_size, per_query=True)
    expected, (rank, clean_rank, top1) = expected_outputs(scores, references, adversarial, ties, ks)
    assert_same(result, expected)
    np.testing.assert_array_equal(result["rank"], rank)
    np.testing.assert_array_equal(result["clean_rank"], clean_rank)
    np.testing.assert_array_equal(result["top1_adversarial"], top1)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_matches_sorting_reference_hypothesis(data):
    num_queries = data.draw(st.integers(1, 12))
    num_gallery = data.draw(st.integers(1, 40))
    adversarial = np.array(data.draw(st.lists(st.booleans(), min_size=num_gallery, max_size=num_gallery)))
    clean = np.flatnonzero(~adversarial)
    if len(clean) == 0:
        adversarial[0] = False
        clean = np.array([0])
    values = st.floats(-3, 3, allow_nan=False, width=32) | st.sampled_from([0.0, 1.0, -1.0])
    scores = np.array(data.draw(st.lists(st.lists(values, min_size=num_gallery, max_size=num_gallery),
                                         min_size=num_queries, max_size=num_queries)), dtype=np.float32)
    references = [data.draw(st.lists(st.sampled_from(clean.tolist()), min_size=1, max_size=4))
                  for _ in range(num_queries)]
    ties = data.draw(st.sampled_from(["pessimistic", "optimistic"]))
    ks = tuple(sorted(set(data.draw(st.lists(st.integers(1, num_gallery), min_size=1, max_size=3)))))
    chunk_size = data.draw(st.sampled_from([None, 1, 2, 5]))
    result = compute(scores, references, adversarial, k=ks, ties=ties, chunk_size=chunk_size, per_query=True)
    expected, (rank, clean_rank, top1) = expected_outputs(scores, references, adversarial, ties, ks)
    assert_same(result, expected)
    np.testing.assert_array_equal(result["rank"], rank)
    np.testing.assert_array_equal(result["top1_adversarial"], top1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
def test_torch_inputs_match_numpy(dtype, ties):
    rng = np.random.default_rng(3)
    scores, references, adversarial = random_case(rng, 40, 70, 20, levels=40)
    tensor = torch.from_numpy(scores).to(dtype)
    exact = tensor.to(torch.float64).numpy()
    result = compute(tensor, references, torch.from_numpy(adversarial), ties=ties, chunk_size=9, per_query=True)
    expected = compute(exact, references, adversarial, ties=ties, per_query=True)
    for key in ("recall@1", "recall@10", "false_rate", "clean_recall@5", "attack_success_rate"):
        np.testing.assert_equal(result[key], expected[key])
    np.testing.assert_array_equal(result["rank"], expected["rank"])
    np.testing.assert_array_equal(result["top1_adversarial"], expected["top1_adversarial"])


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


def test_add_one_query_at_a_time(metric):
    rng = np.random.default_rng(7)
    scores, references, adversarial = random_case(rng, 5, 12, 4)
    for row, refs in zip(scores, references):
        metric.add(prediction=row, reference=refs, adversarial=adversarial)
    assert metric.compute() == metric.compute(predictions=scores, references=references, adversarial=adversarial)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_embeddings_equal_scores(backend):
    rng = np.random.default_rng(8)
    queries = rng.standard_normal((33, 16)).astype(np.float32)
    gallery = rng.standard_normal((45, 16)).astype(np.float32)
    _, references, adversarial = random_case(rng, 33, 45, 15)
    expected = compute(queries @ gallery.T, references, adversarial, per_query=True)
    if backend == "torch":
        queries, gallery = torch.from_numpy(queries), torch.from_numpy(gallery)
    result = compute(query_embeddings=queries, gallery_embeddings=gallery, references=references,
                     adversarial=adversarial, chunk_size=4, per_query=True)
    np.testing.assert_array_equal(result["rank"], expected["rank"])
    assert result["r_mean"] == expected["r_mean"]


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


def test_evaluate_load_and_card(metric):
    assert "arXiv:2304.10727" in metric.description or "2304.10727" in metric.citation
    assert "pessimistic" in metric.inputs_description and "percent" in metric.inputs_description
    result = metric.compute(predictions=[[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], references=[0, 1], adversarial=[2],
                            k=1)
    assert result["recall@1"] == 50.0 and result["num_gallery"] == 3


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
]


@pytest.mark.parametrize("overrides, message", BAD_INPUTS)
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_bad_input_is_refused_by_name(metric, overrides, message, backend):
    kwargs = dict(predictions=[[0.9, 0.1, 0.5], [0.2, 0.8, 0.1]], references=[0, 1], k=1)
    kwargs.update(overrides)
    if backend == "torch":
        kwargs["predictions"] = torch.tensor(kwargs["predictions"])
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
    with pytest.raises(ValueError, match="`predictions` is required"):
        metric.compute()


@pytest.mark.slow
def test_official_image_to_text_layouts_match_itm_eval(captions_per_image):
    """Every text attack's official gallery (50,010 captions incl. the 6-caption images) and the clean one."""
    rng = np.random.default_rng(10)
    for attacked in (False, True):
        layout = image_to_text_layout(captions_per_image, attacked=attacked)
        assert layout.num_gallery == (50_010 if attacked else 25_010)
        scores = rng.standard_normal((layout.num_queries, layout.num_gallery)).astype(np.float32)
        inputs = layout.metric_inputs()
        planted = rng.random(layout.num_queries) < 0.6
        for query in np.flatnonzero(planted):
            scores[query, inputs["references"][query][rng.integers(len(inputs["references"][query]))]] += 4.5
        result = compute(scores, **inputs)
        expected = official_itm_eval(scores, inputs["references"], layout.adversarial)
        for key, value in expected.items():
            assert result[key] == value, key
        assert 20 < result["recall@1"] < 80


@pytest.mark.slow
def test_official_text_to_image_layout_matches_itm_eval(captions_per_image):
    """25,010 caption queries against 5,000 originals and their 5,000 altered copies."""
    rng = np.random.default_rng(11)
    layout = text_to_image_layout(captions_per_image)
    assert (layout.num_queries, layout.num_gallery) == (25_010, 10_000)
    scores = rng.standard_normal((layout.num_queries, layout.num_gallery)).astype(np.float32)
    inputs = layout.metric_inputs()
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
    assert all(line.split()[1].split(".")[0] in {"logging", "os", "concurrent", "dataclasses", "datasets",
                                                  "evaluate", "numpy"} for line in top_level_imports)
    assert rococo_recall.__doc__
