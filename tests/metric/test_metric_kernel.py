"""The compiled ranking kernel (numba) gives exactly what the pure NumPy path gives, and what sorting gives.

Each case runs twice, ``$ROCOCO_RECALL_KERNEL`` set to ``numba`` and to ``numpy``, each run checked to have taken
its path, and every output must be equal, value and dtype; the per-query outputs must also equal the sorting
reference, so that both paths cannot drift together.
"""

import sys
import zlib

import evaluate
import numba  # installed by the test extra: a missing one fails here instead of skipping the kernel
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rococo_recall
from helpers import REPO_ROOT
from helpers.metric_cases import PER_QUERY_DTYPES, embedding_case, random_case
from helpers.reference_metric import sorted_per_query
from rococo_eval.layout import image_to_text_layout, text_to_image_layout
from rococo_recall import RankAccumulator, rococo_recall as compute

METRIC_PATH = str(REPO_ROOT / "rococo_recall.py")
VARIABLE = "ROCOCO_RECALL_KERNEL"
# each value of the variable, and a function that only its path calls
PATHS = {"numba": "_rank_rows_compiled", "numpy": "_rank_block"}


def on_both_paths(function):
    """``function()`` with the kernel and with NumPy: ``{"numba": ..., "numpy": ...}``, each path checked to run."""
    results = {}
    for kernel, path_function in PATHS.items():
        calls = []
        original = getattr(rococo_recall, path_function)

        def counted(*args, original=original, calls=calls):
            calls.append(1)
            return original(*args)

        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(VARIABLE, kernel)
            patch.setattr(rococo_recall, path_function, counted)
            results[kernel] = function()
        assert calls, f"{kernel}: {path_function} was not called"
    return results


def assert_identical(results):
    """The two paths' outputs are equal: the same keys, every value equal, arrays of the same dtype."""
    kernel, numpy_path = results["numba"], results["numpy"]
    assert kernel.keys() == numpy_path.keys()
    for key, value in numpy_path.items():
        if isinstance(value, np.ndarray):
            assert kernel[key].dtype == value.dtype, key
            assert np.array_equal(kernel[key], value), key
        elif value != value:  # attack_success_rate is NaN when no query is right on the clean gallery
            assert kernel[key] != kernel[key], key
        else:
            assert kernel[key] == value, key


def assert_both_paths_sort_right(scores, references, adversarial, ties="pessimistic", **options):
    """Both paths agree, with and without per_query, and their per-query outputs are the sorting reference's."""
    ks = tuple(k for k in (1, 5, 10) if k <= np.shape(scores)[1])
    for per_query in (False, True):
        results = on_both_paths(lambda: compute(scores, references, adversarial, k=ks, ties=ties,
                                                per_query=per_query, **options))
        assert_identical(results)
    expected = sorted_per_query(np.asarray(scores, dtype=np.float64), references, adversarial, ties)
    for key, dtype in PER_QUERY_DTYPES.items():
        assert results["numba"][key].dtype == dtype, key
        np.testing.assert_array_equal(results["numba"][key], expected[key], err_msg=key)


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
@pytest.mark.parametrize("levels", [None, 2, 5, 40])
@pytest.mark.parametrize("num_gallery", [1, 3, 50, 64, 130, 700])
def test_random_scores_with_ties(ties, levels, num_gallery):
    """Integer-valued float32 scores tie within and across kinds; galleries narrower than 64, not multiples of 64,
    and over several of the kernel's pieces of 256 items."""
    rng = np.random.default_rng(zlib.crc32(repr((ties, levels, num_gallery)).encode()))
    num_adversarial = min(num_gallery - 1, num_gallery // 3 + 1)
    scores, references, adversarial = random_case(rng, 41, num_gallery, num_adversarial,
                                                  max_refs=min(3, num_gallery - num_adversarial), levels=levels)
    assert_both_paths_sort_right(scores, references, adversarial, ties)


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 64, 1000])
def test_chunk_sizes(chunk_size):
    rng = np.random.default_rng(1)
    scores, references, adversarial = random_case(rng, 70, 333, 100, levels=6)
    for ties in ("pessimistic", "optimistic"):
        assert_both_paths_sort_right(scores, references, adversarial, ties, chunk_size=chunk_size)


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_matches_numpy_path_and_sorting_hypothesis(data):
    num_queries = data.draw(st.integers(1, 10))
    num_gallery = data.draw(st.integers(1, 300))
    adversarial = np.array(data.draw(st.lists(st.booleans(), min_size=num_gallery, max_size=num_gallery)))
    adversarial[data.draw(st.integers(0, num_gallery - 1))] = False
    clean = np.flatnonzero(~adversarial)
    values = st.sampled_from([0.0, -0.0, 1.0, 2.0, -1.0]) | st.floats(-2, 2, allow_nan=False, width=32)
    rows = st.lists(values, min_size=num_gallery, max_size=num_gallery)
    scores = np.array(data.draw(st.lists(rows, min_size=num_queries, max_size=num_queries)), dtype=np.float32)
    references = [data.draw(st.lists(st.sampled_from(clean.tolist()), min_size=1, max_size=4))
                  for _ in range(num_queries)]
    assume(not any(len(r) == num_gallery > 1 and set(r) <= {0, 1} for r in references))  # refused as a mask
    ties = data.draw(st.sampled_from(["pessimistic", "optimistic"]))
    chunk_size = data.draw(st.sampled_from([None, 1, 4]))
    assert_both_paths_sort_right(scores, references, adversarial, ties, chunk_size=chunk_size)


def test_constant_and_filled_rows():
    """Rows of one score (every item at the top) and BLIP-style rows filled with -100 beyond a re-ranked few."""
    rng = np.random.default_rng(2)
    scores, references, adversarial = random_case(rng, 30, 600, 200)
    scores[:10] = 0.5
    scores[10:20, 16:] = -100.0
    scores[20:, :] = -100.0
    scores[25:, [refs[0] for refs in references[25:]]] = 3.0
    for ties in ("pessimistic", "optimistic"):
        assert_both_paths_sort_right(scores, references, adversarial, ties)


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
    assert_both_paths_sort_right(scores, inputs["references"], built.adversarial, ties)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("column", ["wrong", "correct", "last"])
@pytest.mark.parametrize("per_query", [False, True])
def test_non_finite_rows_are_refused_alike(value, column, per_query):
    """The same ValueError from both paths, naming the first non-finite row and its first non-finite score."""
    rng = np.random.default_rng(3)
    scores, references, adversarial = random_case(rng, 40, 90, 30, levels=4)
    references[23] = [5]
    adversarial[5] = False
    where = {"wrong": 17, "correct": 5, "last": 89}[column]
    scores[23, where] = value
    scores[31, 2] = np.nan  # a later row: not the one named

    def refused():
        with pytest.raises(ValueError) as caught:
            compute(scores, references, adversarial, per_query=per_query, chunk_size=8)
        return {"message": str(caught.value)}

    results = on_both_paths(refused)
    assert results["numba"] == results["numpy"]
    assert f"predictions[23][{where}] is {value}" in results["numba"]["message"]


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16", "int32", "longdouble"])
def test_input_dtypes(dtype):
    """float64 is ranked in float64, float16 and bfloat16 in float32 (exactly), ints in float64; long double stays
    with NumPy on either setting (the kernel does not take it)."""
    rng = np.random.default_rng(4)
    scores, references, adversarial = random_case(rng, 30, 150, 50, levels=12)
    if dtype == "bfloat16":
        import ml_dtypes

        given_scores = (scores / 7).astype(ml_dtypes.bfloat16)
    else:
        given_scores = (scores if dtype == "int32" else scores / 7).astype(dtype)
    if dtype == "longdouble":
        for kernel in PATHS:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv(VARIABLE, kernel)
                assert rococo_recall._kernel(np.dtype(np.longdouble), 30, 150) is None
        return
    assert_both_paths_sort_right(given_scores, references, adversarial)


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
        assert_both_paths_sort_right(given_scores, references, adversarial, chunk_size=5)


def test_embeddings_path():
    queries, gallery, references, adversarial, _ = embedding_case()
    for chunk_size in (None, 4):
        for per_query in (False, True):
            assert_identical(on_both_paths(lambda: compute(
                query_embeddings=queries, gallery_embeddings=gallery, references=references, adversarial=adversarial,
                chunk_size=chunk_size, per_query=per_query)))


def test_overflowing_embeddings_are_refused_alike():
    queries = np.ones((40, 2), dtype=np.float32)
    gallery = np.ones((6, 2), dtype=np.float32)
    queries[33] = 3e38

    def refused():
        with pytest.raises(ValueError) as caught, np.errstate(over="ignore"):
            compute(query_embeddings=queries, gallery_embeddings=gallery, references=[1] * 40, chunk_size=8)
        return str(caught.value)

    results = on_both_paths(refused)
    assert results["numba"] == results["numpy"]
    assert "query_embeddings[33] and gallery_embeddings[0] is inf" in results["numba"]


def test_accumulator_and_evaluate_metric():
    """Batches through RankAccumulator and through the metric as evaluate loads it (a copy of the file)."""
    rng = np.random.default_rng(6)
    scores, references, adversarial = random_case(rng, 45, 120, 40, levels=6)

    def accumulated():
        accumulator = RankAccumulator(adversarial=adversarial, chunk_size=4)
        for start in range(0, 45, 10):
            accumulator.update(scores[start:start + 10], references[start:start + 10])
        return accumulator.compute(per_query=True)

    assert_identical(on_both_paths(accumulated))
    metric = evaluate.load(METRIC_PATH)
    loaded = sys.modules[type(metric).__module__]  # the copy evaluate imported: its own kernel switch
    results = {}
    for kernel, path_function in PATHS.items():
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(VARIABLE, kernel)
            calls = []
            original = getattr(loaded, path_function)
            patch.setattr(loaded, path_function, lambda *args: calls.append(1) or original(*args))
            results[kernel] = metric.compute(predictions=scores, references=references, adversarial=adversarial,
                                             per_query=True)
            assert calls, kernel
    assert_identical(results)


def test_the_variable_picks_the_path(monkeypatch):
    """Unset: the kernel for matrices of 2**22 scores and more, then for every matrix; `numba` and `numpy` force."""
    monkeypatch.setattr(rococo_recall, "_COMPILED_KERNELS", {})
    monkeypatch.delenv(VARIABLE, raising=False)
    float32 = np.dtype(np.float32)
    assert rococo_recall._kernel(float32, 2, 3) is None
    assert rococo_recall._kernel(np.dtype(np.float64), 4096, 1024) is not None
    assert rococo_recall._kernel(float32, 2, 3) is None  # loaded for float64 only
    assert rococo_recall._kernel(float32, 4096, 1024) is not None
    assert rococo_recall._kernel(float32, 2, 3) is not None  # loaded: used for every matrix
    monkeypatch.setenv(VARIABLE, "numpy")
    assert rococo_recall._kernel(float32, 4096, 1024) is None
    monkeypatch.setenv(VARIABLE, "numba")
    monkeypatch.setattr(rococo_recall, "_COMPILED_KERNELS", {})
    assert rococo_recall._kernel(float32, 2, 3) is not None
    assert rococo_recall._kernel(float32, 2, 2**31) is None  # int32 counts: NumPy ranks such galleries
    monkeypatch.setenv(VARIABLE, "fast")
    with pytest.raises(ValueError, match=r"\$ROCOCO_RECALL_KERNEL must be one of \('numba', 'numpy'\) or unset, "
                                         "got 'fast'"):
        compute([[0.9, 0.1]], [0])


def test_without_numba_the_numpy_path_runs(monkeypatch):
    """numba absent: unset, NumPy ranks every matrix; `numba` is refused with what to do."""
    monkeypatch.setattr(rococo_recall, "_COMPILED_KERNELS", {})
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delenv(VARIABLE, raising=False)
    assert rococo_recall._kernel(np.dtype(np.float32), 4096, 1024) is None
    assert compute([[0.9, 0.1, 0.95]], [0], [2], k=1)["false_rate"] == 100.0
    monkeypatch.setenv(VARIABLE, "numba")
    with pytest.raises(ValueError, match=r"\$ROCOCO_RECALL_KERNEL is 'numba' but numba cannot be imported: install"):
        compute([[0.9, 0.1, 0.95]], [0], [2], k=1)


def test_without_a_cache_folder_the_kernel_is_compiled_for_the_process(monkeypatch):
    """numba refuses `cache=True` where it can write no cache folder: the kernel is then compiled uncached."""
    refused = []
    compile_uncached = numba.njit

    def njit(*args, cache=False, **options):
        if cache:
            refused.append(1)
            raise RuntimeError("cannot cache function '_rank_block_compiled': no locator available for file")
        return compile_uncached(*args, **options)

    monkeypatch.setattr(rococo_recall, "_COMPILED_KERNELS", {})
    monkeypatch.setattr(numba, "njit", njit)
    monkeypatch.setenv(VARIABLE, "numba")
    rng = np.random.default_rng(7)
    scores, references, adversarial = random_case(rng, 12, 70, 20, levels=4)
    result = compute(scores, references, adversarial, per_query=True)
    assert refused and rococo_recall._COMPILED_KERNELS[np.dtype(np.float32)] is not None
    monkeypatch.setenv(VARIABLE, "numpy")
    assert_identical({"numba": result, "numpy": compute(scores, references, adversarial, per_query=True)})


def test_a_broken_numba_leaves_the_numpy_path(monkeypatch, caplog):
    """numba that fails to import for another reason than absence (llvmlite's library missing: OSError): unset, NumPy
    ranks with a warning; `numba` is refused with the error."""
    import builtins

    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "numba":
            raise OSError("Could not find/load shared object file: llvmlite.so")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(rococo_recall, "_COMPILED_KERNELS", {})
    monkeypatch.setattr(builtins, "__import__", broken)
    monkeypatch.delenv(VARIABLE, raising=False)
    scores = np.zeros((1024, 4096), dtype=np.float32)  # large enough to load the kernel
    scores[:, 0] = 1.0
    with caplog.at_level("WARNING", logger="rococo_recall"):
        assert compute(scores, [0] * 1024, k=1)["recall@1"] == 100.0
    assert "the numba kernel cannot be loaded (OSError: Could not find/load shared object" in caplog.text
    monkeypatch.setattr(rococo_recall, "_COMPILED_KERNELS", {})
    monkeypatch.setenv(VARIABLE, "numba")
    with pytest.raises(OSError, match="llvmlite.so"):
        compute(scores, [0] * 1024, k=1)


@pytest.mark.parametrize("flush_denormal", [False, True])
def test_optimistic_ties_at_zero_with_subnormals_flushed(flush_denormal):
    """Optimistic: an item above the truth scores more than it. With subnormals flushed to zero (as torch can set),
    the next float above 0 reads as 0, so a `>=` that threshold would count the truth's own ties as above it."""
    import torch

    scores = np.array([[0.0, 0.0, -1.0], [0.5, 0.0, 0.0]], dtype=np.float32)
    torch.set_flush_denormal(flush_denormal)
    try:
        results = on_both_paths(lambda: compute(scores, [0, 1], [2], k=1, ties="optimistic", per_query=True))
    finally:
        torch.set_flush_denormal(False)
    assert_identical(results)
    assert results["numba"]["rank"].tolist() == [0, 1] and results["numba"]["recall@1"] == 50.0
