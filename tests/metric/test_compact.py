"""Compact score matrices (issue 23, item 3): each query's listed candidates and their scores, the rest at ``fill``.

A re-ranker (BLIP) scores only each query's top k candidates and fills the rest with -100. The metric takes that
output as it is (``top_columns``, ``top_scores``, ``fill``, ``num_gallery``) and must give what it gives on the full
matrix; where a number depends on how the items tied at ``fill`` are ordered, it must say so with bounds, which are
checked here against many explicit orders of those ties.
"""

import itertools

import numpy as np
import pytest

import rococo_recall
from rococo_recall import RankAccumulator

FILL = -100.0


def random_compact(rng, num_queries, num_gallery, k, max_refs=1, adversarial_share=0.3, at_fill=0.0, below=0.0):
    """A random compact matrix with distinct listed scores, some listed exactly at ``fill`` or below it, random
    references (never adversarial) and adversarial items."""
    adversarial = rng.random(num_gallery) < adversarial_share
    adversarial[rng.integers(num_gallery)] = False
    clean = np.flatnonzero(~adversarial)
    columns = np.stack([rng.permutation(num_gallery)[:k] for _ in range(num_queries)])
    scores = rng.uniform(-1, 1, size=(num_queries, k))
    scores[rng.random(scores.shape) < at_fill] = FILL
    scores[rng.random(scores.shape) < below] = -150.0
    references = [rng.choice(clean, size=int(rng.integers(1, max_refs + 1)), replace=False).tolist()
                  for _ in range(num_queries)]
    return columns, scores, references, adversarial


def dense_of(columns, scores, num_gallery, fill=FILL):
    dense = np.full((len(columns), num_gallery), fill, dtype=np.asarray(scores).dtype)
    np.put_along_axis(dense, np.asarray(columns), np.asarray(scores), axis=1)
    return dense


def without_bounds(result):
    return {name: value for name, value in result.items() if not name.endswith("_bounds")}


def assert_equal_outputs(left, right):
    assert left.keys() == right.keys()
    for name, value in left.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, right[name], err_msg=name)
        elif isinstance(value, float) and np.isnan(value):
            assert np.isnan(right[name]), name
        else:
            assert value == right[name], name


CASES = [  # queries, gallery, listed, references per query, share at fill, share below fill
    (40, 30, 3, 1, 0.0, 0.0),
    (40, 30, 12, 5, 0.1, 0.0),
    (25, 12, 12, 2, 0.2, 0.1),  # every column listed: nothing is unlisted
    (30, 50, 1, 3, 0.0, 0.2),
    (30, 20, 6, 1, 0.3, 0.3),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
def test_compact_matrix_ranks_as_its_full_matrix(case, ties):
    """Every output, per-query arrays included, equals the metric's on the full matrix (fill everywhere else)."""
    num_queries, num_gallery, k, max_refs, at_fill, below = case
    rng = np.random.default_rng(num_gallery * k)
    columns, scores, references, adversarial = random_compact(rng, num_queries, num_gallery, k, max_refs,
                                                              at_fill=at_fill, below=below)
    cutoffs = tuple(n for n in (1, 2, 5, 10) if n <= num_gallery)
    full = rococo_recall.rococo_recall(dense_of(columns, scores, num_gallery), references, adversarial, k=cutoffs,
                                       ties=ties, per_query=True)
    compact = rococo_recall.rococo_recall(top_columns=columns, top_scores=scores, fill=FILL, num_gallery=num_gallery,
                                          references=references, adversarial=adversarial, k=cutoffs, ties=ties,
                                          per_query=True, chunk_size=7)
    assert_equal_outputs(without_bounds(compact), full)
    if k == num_gallery:
        assert compact.keys() == full.keys()  # nothing unlisted: no order of ties at fill to bound


def tie_orders(dense, fill, rng, count):
    """Full matrices without ties at ``fill``: the items at ``fill`` in ``count`` random orders, between the items
    above and below it (the two tie policies, which the test adds, are the two ends)."""
    at = dense == fill
    for _ in range(count):
        broken = dense.astype(np.float64).copy()
        broken[at] += rng.permutation(at.sum()) * 1e-9 + 1e-9
        yield broken


@pytest.mark.parametrize("case", [case for case in CASES if case[2] < case[1]])
def test_bounds_hold_every_order_of_the_fill_ties_and_are_reached(case):
    """A number without bounds is the same under every order of the ties at ``fill``; one with bounds lies within
    them under every order, and the two tie policies (each of which is one such order) reach the recall bounds."""
    num_queries, num_gallery, k, max_refs, at_fill, below = case
    rng = np.random.default_rng(k + 7)
    columns, scores, references, adversarial = random_compact(rng, num_queries, num_gallery, k, max_refs,
                                                              at_fill=at_fill, below=below)
    cutoffs = tuple(n for n in (1, 2, 5, 10) if n <= num_gallery)
    inputs = dict(references=references, adversarial=adversarial, k=cutoffs)
    compact = rococo_recall.rococo_recall(top_columns=columns, top_scores=scores, fill=FILL, num_gallery=num_gallery,
                                          **inputs)
    bounded = [name for name in compact if name.endswith("_bounds")]
    assert "recall@1_bounds" not in compact or "r_mean_bounds" in compact
    dense = dense_of(columns, scores, num_gallery)
    outcomes = [rococo_recall.rococo_recall(broken, **inputs) for broken in tie_orders(dense, FILL, rng, 200)]
    outcomes += [rococo_recall.rococo_recall(dense, ties=ties, **inputs) for ties in ("pessimistic", "optimistic")]
    for name, value in compact.items():
        if name.endswith("_bounds") or name.startswith("num_"):
            continue
        seen = [outcome[name] for outcome in outcomes if not np.isnan(outcome[name])]
        if f"{name}_bounds" in compact:
            low, high = compact[f"{name}_bounds"]
            assert all(low - 1e-9 <= v <= high + 1e-9 for v in seen), (name, low, high, min(seen), max(seen))
            assert min(seen) < max(seen) or name == "attack_success_rate", name
        else:
            assert all(v == pytest.approx(value) for v in seen), (name, value, set(seen))
    for name in bounded:
        if "recall@" in name:
            base = name.removesuffix("_bounds")
            assert compact[name] == (outcomes[-2][base], outcomes[-1][base]), name
    assert "recall@10_bounds" in bounded  # every case lists fewer than 10: some query is undecided at 10


def test_blip_shaped_output_bounds_only_the_clean_numbers_when_few_clean_items_are_listed():
    """k = 256 wrong items above the fill decide R@1/5/10 for every query; a clean rank is undecided when fewer
    than K clean items are listed and the correct one is not: the clean R@K is bounded, R@K is not."""
    num_gallery, k = 600, 256
    adversarial = np.zeros(num_gallery, dtype=bool)
    adversarial[300:] = True  # items 300-599 are adversarial
    columns = np.stack([np.arange(300, 556), np.r_[np.arange(300, 552), 0, 1, 2, 3],
                        np.r_[np.arange(300, 555), 5]])  # query 0: all adversarial; 1: four clean; 2: its own
    scores = np.tile(np.linspace(1, 0.5, k), (3, 1))
    result = rococo_recall.rococo_recall(top_columns=columns, top_scores=scores, fill=FILL, num_gallery=num_gallery,
                                         references=[10, 11, 5], adversarial=adversarial, per_query=True)
    assert result["recall@10"] == 0 and "recall@10_bounds" not in result and "false_rate_bounds" not in result
    # clean ranks: query 0 in [0, 299], query 1 in [4, 299], query 2 exactly 0 (its item is listed)
    assert result["clean_rank"].tolist() == [299, 299, 0]
    assert result["clean_recall@1_bounds"] == (100 / 3, 200 / 3)
    assert result["clean_recall@5_bounds"] == result["clean_recall@10_bounds"] == (100 / 3, 100.0)
    assert result["clean_recall@1"] == 100 / 3  # the pessimistic order's, one end of the bounds
    # query 2 is flipped; query 0 may be a clean hit (then flipped too) or not: 100 either way, so no bounds
    assert result["attack_success_rate"] == 100.0 and "attack_success_rate_bounds" not in result


@pytest.mark.parametrize("listed, scores, adversarial, expected, bounds", [
    # query 0 may be a clean hit, never flipped (no adversarial item above its correct one); query 1 stays right
    ([[3], [0]], [[-150.0], [1.0]], [3], 0.0, None),
    # query 0: an adversarial and a clean item tie with its correct one at -100: flipped, right, or no clean hit
    ([[1], [0]], [[-150.0], [1.0]], [3], 0.0, (0.0, 50.0)),
    # query 0 is flipped whenever it is a clean hit; query 1 is not a clean hit (clean item 2 above its correct 0)
    ([[3, 2], [2, 1]], [[1.0, -150.0], [1.0, 0.5]], [3], float("nan"), (100.0, 100.0)),
])
def test_attack_success_rate_bounds_are_those_of_every_order(listed, scores, adversarial, expected, bounds):
    """The bounds of the attack success rate, a ratio of two counts that one order decides together, are its exact
    lowest and highest; when every order that defines it agrees, there are none (the last case: the rate is 100 or,
    when query 0 is no clean hit either, undefined, so the bounds say so)."""
    result = rococo_recall.rococo_recall(top_columns=listed, top_scores=scores, fill=FILL, num_gallery=4,
                                         references=[0, 0], adversarial=adversarial, k=1)
    assert result["attack_success_rate"] == expected or (np.isnan(expected) and np.isnan(result["attack_success_rate"]))
    assert result.get("attack_success_rate_bounds") == bounds


def test_compact_input_through_evaluate_load():
    import evaluate

    metric = evaluate.load("rococo_recall")
    result = metric.compute(top_columns=[[2, 0], [1, 0]], top_scores=[[0.95, 0.9], [0.8, 0.2]], fill=-100,
                            num_gallery=3, references=[0, 1], adversarial=[2], k=(1, 2))
    assert (result["recall@1"], result["false_rate"]) == (50.0, 50.0)
    with pytest.raises(ValueError, match="one call, on one process"):
        metric.compute(top_columns=[[0]], top_scores=[[1.0]], fill=-100, num_gallery=3, references=[0],
                       query_index=[0])


@pytest.mark.parametrize("arguments, message", [
    (dict(top_columns=[[0, 0]], top_scores=[[1.0, 0.5]]), r"`top_columns\[0\]` lists column 0 twice"),
    (dict(top_columns=[[0, 3]], top_scores=[[1.0, 0.5]]), r"`top_columns\[0\]\[1\]` is 3, out of range"),
    (dict(top_columns=[[0, 1]], top_scores=[[1.0]]), r"`top_scores` must have the shape of `top_columns` \(1, 2\)"),
    (dict(top_columns=[[0.5, 1]], top_scores=[[1.0, 0.5]]), r"`top_columns` must be a non-empty 2-D matrix of ints"),
    (dict(top_columns=[[0, 1]], top_scores=[[1.0, np.nan]]), r"`top_scores` must be finite: top_scores\[0\]\[1\]"),
    (dict(top_columns=[[0, 1]], top_scores=[[1.0, 0.5]], fill=None), r"`fill` must be one finite number"),
    (dict(top_columns=[[0, 1]], top_scores=np.array([[1.0, 0.5]], dtype=np.float16), fill=-100.1),
     r"`fill` -100.1 is not exactly a float16 number"),
    (dict(top_columns=[[0, 1]], top_scores=[[1.0, 0.5]], num_gallery=0), r"`num_gallery` must be a positive int"),
    (dict(top_columns=[[0, 1, 2, 0]], top_scores=[[1.0, 0.5, 0.2, 0.1]]), r"lists 4 candidates per query, more than"),
    (dict(top_columns=[[0, 1]]), r"needs both `top_columns` and `top_scores`"),
    (dict(top_columns=[[0, 1]], top_scores=[[1.0, 0.5]], predictions=[[1.0, 0.5, 0.0]]), r"not several"),
    (dict(top_columns=[[0, 1]], top_scores=[[1.0, 0.5]], gallery_embeddings=[[1.0]]), r"not several"),
    (dict(predictions=[[1.0, 0.5, 0.0]], top_columns=None), r"`fill` and `num_gallery` describe a compact"),
    (dict(top_columns=[[0, 1], [0]], top_scores=[[1.0, 0.5], [1.0]]), r"`top_columns` .* its rows have different"),
    (dict(top_columns=[[0, 1], [0, 2]], top_scores=[[1.0, 0.5], [1.0]]), r"`top_scores` .* its rows have different"),
])
def test_bad_compact_input_is_refused_by_name(arguments, message):
    arguments = {"fill": -100.0, "num_gallery": 3, "references": [0], **arguments}
    with pytest.raises(ValueError, match=message):
        rococo_recall.rococo_recall(**arguments)


def test_an_accumulator_holds_one_kind_of_rows():
    accumulator = RankAccumulator()
    accumulator.update_top_k([[0]], [[1.0]], [0], fill=-100.0, num_gallery=3)
    with pytest.raises(ValueError, match="holds compact"):
        accumulator.update([[1.0, 0.0, 0.0]], [0])
    accumulator.update_top_k([[1]], [[1.0]], [1], fill=-100.0, num_gallery=3)
    assert accumulator.compute(k=1)["recall@1"] == 100.0
    dense = RankAccumulator()
    dense.update([[1.0, 0.0, 0.0]], [0])
    with pytest.raises(ValueError, match="holds full score rows"):
        dense.update_top_k([[0]], [[1.0]], [0], fill=-100.0, num_gallery=3)


def test_bootstrap_leaves_out_intervals_of_bounded_numbers():
    result = rococo_recall.rococo_recall(top_columns=[[1], [0]], top_scores=[[1.0], [1.0]], fill=FILL, num_gallery=4,
                                         references=[0, 0], k=(1, 2), bootstrap=20)
    assert "recall@2_bounds" in result and "recall@2_ci" not in result and "recall@1_ci" in result


def every_outcome(row, references, adversarial):
    """(rank, clean rank, top-1 adversarial) of one full row under every order of its items at ``FILL``."""
    tied = np.flatnonzero(row == FILL).tolist()
    outcomes = set()
    for order in itertools.permutations(tied):
        place = {column: (row[column], 0) for column in range(len(row))}
        place.update((column, (FILL, -position)) for position, column in enumerate(order))
        ranked = sorted(range(len(row)), key=place.__getitem__, reverse=True)
        first = next(position for position, column in enumerate(ranked) if column in references)
        above = ranked[:first]
        outcomes.add((len(above), sum(not adversarial[column] for column in above), bool(adversarial[ranked[0]])))
    return outcomes


def exact_ranges(outcomes_per_query, ks):
    """Each percentage's lowest and highest value over every combination of the queries' orders (None: undefined
    in all), and whether some combination leaves it undefined."""
    values = {}
    for combination in itertools.product(*map(sorted, outcomes_per_query)):
        count = len(combination)
        recalls = [100 * sum(rank < kk for rank, _, _ in combination) / count for kk in ks]
        cleans = [100 * sum(clean < kk for _, clean, _ in combination) / count for kk in ks]
        hits = sum(clean == 0 for _, clean, _ in combination)
        flipped = sum(clean == 0 and rank > 0 for rank, clean, _ in combination)
        row = {**{f"recall@{kk}": v for kk, v in zip(ks, recalls)},
               **{f"clean_recall@{kk}": v for kk, v in zip(ks, cleans)},
               "r_mean": sum(recalls) / len(ks), "clean_r_mean": sum(cleans) / len(ks),
               "false_rate": 100 * sum(top for _, _, top in combination) / count,
               "attack_success_rate": 100 * flipped / hits if hits else float("nan")}
        for name, value in row.items():
            values.setdefault(name, []).append(value)
    ranges = {}
    for name, seen in values.items():
        defined = [value for value in seen if not np.isnan(value)]
        ranges[name] = ((min(defined), max(defined)) if defined else None, len(defined) < len(seen))
    return ranges


def test_bounds_are_exact_over_every_order_of_every_query():
    """Exhaustively, on small random compact matrices (listed scores distinct, some at and below the fill): a
    percentage has bounds exactly when some order of the ties at the fill changes it (or leaves a rate undefined
    that another order defines), and they are its lowest and highest over every order of every query."""
    rng = np.random.default_rng(5)
    checked = {False: 0, True: 0}
    for _ in range(300):
        num_gallery, num_queries = int(rng.integers(3, 7)), int(rng.integers(1, 4))
        k = int(rng.integers(1, num_gallery))  # some column unlisted
        adversarial = rng.random(num_gallery) < 0.4
        adversarial[rng.integers(num_gallery)] = False
        clean = np.flatnonzero(~adversarial)
        columns = np.stack([rng.permutation(num_gallery)[:k] for _ in range(num_queries)])
        scores = rng.permutation(num_queries * k).reshape(num_queries, k) - 5.0
        scores[rng.random(scores.shape) < 0.25] = FILL
        below = rng.random(scores.shape) < 0.15
        scores[below] = -150.0 - np.arange(below.sum())
        references = [rng.choice(clean, size=int(rng.integers(1, min(3, len(clean)) + 1)), replace=False).tolist()
                      for _ in range(num_queries)]
        ks = tuple(n for n in (1, 2, 3) if n <= num_gallery)
        result = rococo_recall.rococo_recall(top_columns=columns, top_scores=scores, fill=FILL,
                                             num_gallery=num_gallery, references=references,
                                             adversarial=adversarial, k=ks)
        dense = dense_of(columns, scores, num_gallery)
        outcomes = [every_outcome(dense[q], set(references[q]), adversarial) for q in range(num_queries)]
        for name, (span, can_be_undefined) in exact_ranges(outcomes, ks).items():
            expected = None if span is None or (span[0] == span[1] and not can_be_undefined) else span
            got = result.get(f"{name}_bounds")
            assert (got is None) == (expected is None), (name, got, expected)
            if got is not None:
                assert got == pytest.approx(expected), (name, got, expected)
                checked[name == "attack_success_rate"] += 1
    assert checked[False] > 100 and checked[True] > 30  # bounded recalls and rates, and attack success rates
