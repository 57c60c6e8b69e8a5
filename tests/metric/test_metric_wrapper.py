"""The evaluate wrapper keeps its state through errors: a refused call leaves the metric exactly as it was."""

import pickle
import re
import types
from pathlib import Path

import datasets
import evaluate
import numpy as np
import pytest

from helpers import REPO_ROOT
from rococo_recall import rococo_recall

METRIC_PATH = str(REPO_ROOT / "rococo_recall.py")
K = (1, 3)


@pytest.fixture
def metric():
    return evaluate.load(METRIC_PATH)


def case(seed, num_queries=9, num_gallery=8):
    """Scores with ties, one or two references per query among items 0-5; items 6 and 7 are adversarial."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, (num_queries, num_gallery)).astype(np.float32)
    references = [rng.choice(6, rng.integers(1, 3), replace=False).tolist() for _ in range(num_queries)]
    return scores, references, [6, 7]


def expected(scores, references, adversarial, **options):
    return rococo_recall(scores, references, adversarial, k=K, per_query=True, **options)


def state(metric):
    """Everything the metric holds (its bound methods aside), each attribute as bytes: equal bytes, equal state."""
    return {key: pickle.dumps(value) for key, value in vars(metric).items() if not isinstance(value, types.MethodType)}


def test_compute_error_after_batches_keeps_them(metric):
    scores, references, adversarial = case(1)
    metric.add_batch(predictions=scores[:4], references=references[:4], adversarial=adversarial)
    metric.add_batch(predictions=scores[4:], references=references[4:])
    for bad in (dict(k=0), dict(k=(1, 9)), dict(bootstrap=-1), dict(adversarial=[1]), dict(ties="optimistic")):
        with pytest.raises(ValueError):
            metric.compute(**bad)
    with pytest.raises(ValueError, match="batches were added with `add_batch`"):
        metric.compute(predictions=scores, references=references)
    np.testing.assert_equal(metric.compute(k=K, per_query=True), expected(scores, references, adversarial))
    with pytest.raises(ValueError, match="`predictions` is required"):  # a result starts the metric afresh
        metric.compute(k=K)


BAD_FIRST_BATCHES = [  # each replaces an argument of a first batch for another evaluation (see below)
    (dict(references=[0, 1]), "`references` must have one entry per query \\(3\\), got 2"),
    (dict(references=[[0], [1], [2]], adversarial=[1]), "`references\\[1\\]` points at gallery item 1"),
    (dict(predictions=[[0.5] * 6, [float("nan")] * 6, [0.1] * 6]), "predictions\\[1\\]\\[0\\] is nan"),
    (dict(predictions=[0.5] * 6), "`predictions` must be a non-empty 2-D matrix"),
    (dict(adversarial=[6]), "`adversarial` index 6 is out of range for a gallery of 6"),
    (dict(adversarial=[True, False]), "`adversarial` mask must have one entry per gallery item \\(6\\), got 2"),
    (dict(ties="random"), "`ties` must be one of"),
    (dict(chunk_size=0), "`chunk_size` must be a positive int"),
    (dict(query_index=[0, 1]), "`query_index` must hold one int per query \\(3\\)"),
]


@pytest.mark.parametrize("bad, message", BAD_FIRST_BATCHES)
def test_bad_first_batch_leaves_the_metric_usable(metric, bad, message):
    """Nothing of a refused first batch stays: not its gallery size, `adversarial`, `ties` nor `query_index`."""
    scores, references, adversarial = case(2)
    other_evaluation = dict(predictions=scores[:3, :6], references=references[:3], ties="optimistic")
    with pytest.raises(ValueError, match=message):
        metric.add_batch(**{**other_evaluation, **bad})
    metric.add_batch(predictions=scores[:3], references=references[:3], adversarial=adversarial)
    metric.add_batch(predictions=scores[3:], references=references[3:], adversarial=adversarial)
    np.testing.assert_equal(metric.compute(k=K, per_query=True), expected(scores, references, adversarial))


BAD_LATER_BATCHES = [
    (dict(predictions=np.zeros((6, 7), np.float32)),
     "every block must score the same gallery: got 7 gallery items after 8"),
    (dict(ties="optimistic"), "`ties` changed between batches: 'pessimistic' then 'optimistic'"),
    (dict(adversarial=[5, 6]), "`adversarial` changed between batches"),
    (dict(adversarial=[6, 8]), "`adversarial` index 8 is out of range"),
    (dict(references=[0] * 5), "`references` must have one entry per query \\(6\\), got 5"),
    (dict(references=[[0]] * 5 + [[1, 7]]), "`references\\[5\\]` points at gallery item 7"),
    (dict(predictions=np.full((6, 8), np.inf, np.float32)), "`predictions` must be finite"),
    (dict(query_index=range(6)), "`query_index` must be given with every batch or with none"),
]


@pytest.mark.parametrize("bad, message", BAD_LATER_BATCHES)
def test_bad_later_batch_leaves_the_metric_usable(metric, bad, message):
    scores, references, adversarial = case(3)
    metric.add_batch(predictions=scores[:3], references=references[:3], adversarial=adversarial)
    later = dict(predictions=scores[3:], references=references[3:], adversarial=adversarial)
    with pytest.raises(ValueError, match=message):
        metric.add_batch(**{**later, **bad})
    metric.add_batch(**later)
    np.testing.assert_equal(metric.compute(k=K, per_query=True), expected(scores, references, adversarial))


@pytest.mark.filterwarnings("ignore:overflow encountered in matmul:RuntimeWarning")
def test_embedding_batch_refused_midway_keeps_nothing(metric):
    """The batch's third query overflows float32, in its second block of two rows: the first block is not kept."""
    rng = np.random.default_rng(4)
    queries = rng.standard_normal((7, 5)).astype(np.float32)
    gallery = rng.standard_normal((8, 5)).astype(np.float32)
    _, references, adversarial = case(4, num_queries=7)
    metric.add_batch(query_embeddings=queries[:2], gallery_embeddings=gallery, references=references[:2],
                     adversarial=adversarial, chunk_size=2)
    overflowing = queries[2:].copy()
    overflowing[2] = 1e30
    with pytest.raises(ValueError, match="must be finite"):
        metric.add_batch(query_embeddings=overflowing, gallery_embeddings=gallery * 1e10, references=references[2:])
    metric.add_batch(query_embeddings=queries[2:], gallery_embeddings=gallery, references=references[2:])
    # the metric's products, block by block (a product's rounding can depend on its shape: BLAS kernels differ)
    scores = np.concatenate([queries[start:min(start + 2, stop)] @ gallery.T
                             for first, stop in ((0, 2), (2, 7)) for start in range(first, stop, 2)])
    np.testing.assert_equal(metric.compute(k=K, per_query=True), expected(scores, references, adversarial))


def test_query_index_orders_the_per_query_results(metric):
    scores, references, adversarial = case(5)
    order = np.random.default_rng(5).permutation(9)
    for part in (order[:4], order[4:]):
        metric.add_batch(predictions=scores[part], references=[references[i] for i in part], adversarial=adversarial,
                         query_index=part)
    np.testing.assert_equal(metric.compute(k=K, per_query=True, bootstrap=20, seed=3),
                            expected(scores, references, adversarial, bootstrap=20, seed=3))
    for index in range(8, -1, -1):
        metric.add(prediction=scores[index], reference=references[index], adversarial=adversarial, query_index=index)
    np.testing.assert_equal(metric.compute(k=K, per_query=True), expected(scores, references, adversarial))
    reversed_rows = metric.compute(predictions=scores[::-1], references=references[::-1], adversarial=adversarial,
                                   k=K, per_query=True, query_index=range(8, -1, -1))
    np.testing.assert_equal(reversed_rows, expected(scores, references, adversarial))


@pytest.mark.parametrize("query_index, message", [
    ([0, 1, 2, 3, 4, 5, 6, 7, 7], "`query_index` 7 was given twice: add every query once"),
    ([0, 1, 2], "`query_index` must hold one int per query \\(9\\), got shape \\(3,\\)"),
    ([0.0] * 9, "`query_index` must hold ints, got dtype float64"),
    ([True] * 9, "`query_index` must hold ints, got dtype bool"),
    ([-1, 0, 1, 2, 3, 4, 5, 6, 7], "`query_index` must be non-negative, got -1"),
    ([0, 1, 2, 3, 4, 5, 6, 7, 9], "`query_index` must number the queries from 0 to 8: 8 is missing"),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], "from 0 to 8: 0 is missing"),
])
def test_bad_query_index_is_refused_by_name(metric, query_index, message):
    scores, references, adversarial = case(6)
    with pytest.raises(ValueError, match=message):
        metric.compute(predictions=scores, references=references, adversarial=adversarial, k=K, query_index=query_index)
    np.testing.assert_equal(metric.compute(predictions=scores, references=references, adversarial=adversarial, k=K,
                                           per_query=True), expected(scores, references, adversarial))


def test_repeated_or_missing_queries_keep_the_batches(metric):
    scores, references, adversarial = case(7)
    metric.add_batch(predictions=scores[:4], references=references[:4], adversarial=adversarial, query_index=range(4))
    with pytest.raises(ValueError, match="`query_index` 3 was given twice"):
        metric.add_batch(predictions=scores[3:], references=references[3:], query_index=range(3, 9))
    metric.add_batch(predictions=scores[5:], references=references[5:], query_index=range(5, 9))
    with pytest.raises(ValueError, match="`query_index` must number the queries from 0 to 7: 4 is missing"):
        metric.compute(k=K)
    metric.add(prediction=scores[4], reference=references[4], query_index=4)
    np.testing.assert_equal(metric.compute(k=K, per_query=True), expected(scores, references, adversarial))


REFUSED_CALLS = [  # (add one batch first, method, arguments replacing those of a correct batch)
    (False, "add_batch", dict(references=[0, 1])),
    (False, "add_batch", dict(adversarial=[6, 9])),
    (False, "add_batch", dict(predictions=[[1.0, float("nan")] + [0.0] * 6] * 3)),
    (False, "add_batch", dict(predictions=None)),
    (False, "add", dict(prediction=[0.5] * 8, reference=6)),
    (False, "compute", dict(k=0)),
    (False, "compute", dict(bootstrap=-1)),
    (False, "compute", dict(query_index=[0, 0, 1])),
    (True, "add_batch", dict(predictions=np.zeros((3, 5)))),
    (True, "add_batch", dict(ties="optimistic")),
    (True, "add_batch", dict(adversarial=[7])),
    (True, "add_batch", dict(references=[0, 1, 7])),
    (True, "add_batch", dict(query_index=[0, 1, 2])),
    (True, "compute", dict(k=1)),
    (True, "compute", dict(predictions=None, references=None, adversarial=None, k=0)),
    (True, "compute", dict(predictions=None, references=None, adversarial=None, bootstrap=-1)),
    (True, "compute", dict(predictions=None, references=None, adversarial=[6])),
]


@pytest.mark.parametrize("num_process", [1, 2])
@pytest.mark.parametrize("batch_first, method, arguments", REFUSED_CALLS)
def test_a_refused_call_changes_nothing(tmp_path, batch_first, method, arguments, num_process):
    """With `num_process=2` each call here is refused before process 0 is asked for anything."""
    metric = evaluate.load(METRIC_PATH, num_process=num_process, process_id=num_process - 1, cache_dir=str(tmp_path),
                           timeout=2)
    scores, references, adversarial = case(8, num_queries=3)
    correct = dict(predictions=scores, references=references, adversarial=adversarial)
    if batch_first:
        metric.add_batch(**correct)
    before = state(metric)
    call = {**correct, **arguments}
    if method == "add":
        call = {key: value for key, value in call.items() if key not in ("predictions", "references")}
    call = {key: value for key, value in call.items() if value is not None}
    with pytest.raises(ValueError):
        getattr(metric, method)(**call)
    assert state(metric) == before
    assert not list(tmp_path.rglob("*.arrow"))



@pytest.mark.parametrize("inputs, message", [
    ({"gallery_embeddings": np.eye(2)}, "`predictions` is required (or both `query_embeddings` and "
                                        "`gallery_embeddings`, or `top_columns` and `top_scores`)"),
    ({"predictions": np.eye(2), "query_embeddings": np.eye(2)}, "give one of `predictions`, `query_embeddings` and "
                                                                "`gallery_embeddings`, or `top_columns` and "
                                                                "`top_scores`, not several: got predictions, "
                                                                "query_embeddings"),
])
def test_add_batch_compute_and_the_function_tell_the_inputs_apart_alike(metric, inputs, message):
    """Issue 42: `compute` told its inputs apart by tests of its own (`gallery_embeddings` alone was taken for a call
    on the batches added); now `add_batch`, `compute` and `rococo_recall` take the one path of `_input_mode`."""
    for call in (metric.add_batch, metric.compute, rococo_recall):
        with pytest.raises(ValueError, match=re.escape(message)):
            call(references=[0, 1], **inputs)
    query_index = {"query_index": [1, 0]}  # compute's path through add_batch
    for options in ({}, query_index):
        result = metric.compute(query_embeddings=np.eye(2), gallery_embeddings=np.eye(2)[::-1], references=[1, 0],
                                k=1, **options)
        assert result["recall@1"] == 100.0

def test_the_metric_class_is_defined_in_either_import_order():
    """`import evaluate` costs seconds (it imports transformers' pipelines): scoring without the class skips it. Issue 42:
    the class existed only where evaluate was imported before the module; now it is defined in either order (the
    first use of `rococo_recall.RococoRecall` imports evaluate), one class however it is reached, and `evaluate.load`
    works whichever was imported first. Without evaluate, the module scores and says what the class needs."""
    import subprocess
    import sys

    module_first = """if True:
        import pickle, sys
        import rococo_recall
        result = rococo_recall.rococo_recall([[0.9, 0.1, 0.95], [0.2, 0.8, 0.1]], [0, 1], adversarial=[2], k=1)
        print(result["recall@1"], sorted({"evaluate", "datasets"} & set(sys.modules)))
        import evaluate
        metric_class = rococo_recall.RococoRecall
        assert issubclass(metric_class, evaluate.Metric) and pickle.loads(pickle.dumps(metric_class)) is metric_class
        assert rococo_recall.RococoRecall is metric_class and metric_class.__module__ == "rococo_recall"
        print(metric_class().compute(predictions=[[0.9, 0.1]], references=[1], k=1)["recall@1"])
        loaded = evaluate.load(sys.argv[1])
        print(type(loaded).__name__, loaded.compute(predictions=[[0.9, 0.1, 0.95]], references=[0], k=1)["recall@1"])
    """
    evaluate_first = """if True:
        import pickle, sys
        import evaluate
        import rococo_recall
        metric_class = rococo_recall.RococoRecall
        assert issubclass(metric_class, evaluate.Metric) and pickle.loads(pickle.dumps(metric_class)) is metric_class
        assert "RococoRecall" in vars(rococo_recall)  # at module level, where evaluate.load looks for it
        print(metric_class().compute(predictions=[[0.9, 0.1]], references=[1], k=1)["recall@1"])
    """
    without_evaluate = """if True:
        import sys
        sys.modules["evaluate"] = None  # as where evaluate is not installed
        import rococo_recall
        print(rococo_recall.rococo_recall([[0.9, 0.1]], [1], k=1)["recall@1"], hasattr(rococo_recall, "RococoRecall"))
        try:
            rococo_recall.RococoRecall
        except AttributeError as error:
            print(error)
    """
    root = Path(METRIC_PATH).parent
    answers = [subprocess.run([sys.executable, "-c", code, METRIC_PATH], cwd=root, capture_output=True, text=True,
                              check=True, env={**__import__("os").environ, "PYTHONPATH": str(root)}).stdout
               for code in (module_first, evaluate_first, without_evaluate)]
    assert answers[0].split("\n")[:3] == ["50.0 []", "0.0", "RococoRecall 0.0"]
    assert answers[1].split("\n")[0] == "0.0"
    assert answers[2].split("\n")[:2] == ["0.0 False", "rococo_recall.RococoRecall, the evaluate metric, needs the "
                                           "evaluate package (pip install evaluate): import of evaluate halted; None "
                                           "in sys.modules"]


def test_the_class_replaces_evaluates_documented_hooks_and_its_three_input_methods_only():
    """Issue 42 asked that the class override only what evaluate documents for a module to define (`_info`,
    `_compute`, `_download_and_prepare`). It also replaces `add_batch`, `add` and `compute`, because evaluate's own
    encode every score into an Arrow cache file (benchmarks/bench_metric_arrow.py and docs/metric.md give the cost):
    nothing else of evaluate's, and those three keep evaluate's keyword-only parameters."""
    import inspect

    from rococo_recall import RococoRecall

    replaced = {name for name in vars(RococoRecall) if not name.startswith("__")
                and hasattr(evaluate.EvaluationModule, name)}
    assert replaced == {"_info", "_compute", "add_batch", "add", "compute"}
    for name in ("add_batch", "add", "compute"):
        ours = inspect.signature(getattr(RococoRecall, name)).parameters
        theirs = inspect.signature(getattr(evaluate.EvaluationModule, name)).parameters
        assert set(ours) >= set(theirs) - {"kwargs"}, name
        assert {parameter.kind for key, parameter in ours.items() if key != "self"} <= {
            inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD}, name


class ScoreRows(evaluate.Metric):
    """A metric in evaluate's documented form (``_info`` and ``_compute`` only), one row of scores per query: what
    its ``_compute`` receives and which keyword arguments reach it."""

    def _info(self):
        rows = datasets.Features({"predictions": datasets.Sequence(datasets.Value("float32")),
                                  "references": datasets.Value("int64")})
        return evaluate.MetricInfo(description="", citation="", features=rows)

    def _compute(self, predictions=None, references=None, **kwargs):
        row = None if predictions is None else type(predictions[0]).__name__
        return {"rows": type(predictions).__name__, "row": row, "kwargs": sorted(kwargs)}


class ReferencesOnly(ScoreRows):
    """The same with the scores left out of ``features``: given as keyword arguments instead."""

    def _info(self):
        return evaluate.MetricInfo(description="", citation="",
                                   features=datasets.Features({"references": datasets.Value("int64")}))


def test_evaluate_still_offers_no_documented_way_to_keep_a_matrix_out_of_arrow(tmp_path):
    """The reasons docs/metric.md gives for replacing `add_batch` and `compute`, checked on the installed evaluate:
    should one stop holding, the replacement can be looked at again."""
    with pytest.raises(ValueError, match="all features should be a `datasets.Value` feature"):
        evaluate.MetricInfo(description="", citation="", features=ScoreRows()._info().features, format="numpy")
    metric = ScoreRows(cache_dir=str(tmp_path))
    metric.add_batch(predictions=np.eye(2, dtype=np.float32), references=[0, 1])
    assert [path.suffix for path in tmp_path.rglob("*.arrow")] == [".arrow"]  # the scores, on disk
    assert metric.compute() == {"rows": "list", "row": "list", "kwargs": []}  # read back as Python lists
    unfeatured = ReferencesOnly(cache_dir=str(tmp_path))  # scores that are not a feature: `predictions` is dropped
    assert unfeatured.compute(predictions=[[1.0]], references=[0]) == {"rows": "NoneType", "row": None, "kwargs": []}
    assert unfeatured.compute(scores=[[1.0]], references=[0])["kwargs"] == ["scores"]  # another name reaches it
    with pytest.raises(ValueError, match="Bad inputs for evaluation module: \\['scores'\\]"):
        unfeatured.add_batch(references=[0], scores=[[1.0]])  # but cannot stream
    with pytest.raises(ValueError, match="keep_in_memory' is not possible in distributed setting"):
        ScoreRows(keep_in_memory=True, num_process=2, process_id=0, cache_dir=str(tmp_path))
