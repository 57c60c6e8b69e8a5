"""rococo_eval.harness.torchmetrics_metric: RococoRecallMetric scores the embeddings a training loop gives it as `run`
scores the same model: in shuffled batches, in a real 2-process gloo group (DistributedSampler's padded shards),
epoch after epoch, and from a real Lightning Trainer (examples/lightning_validation.py); bad inputs are refused by
name.

Every test runs on the generated benchmark (``conftest.benchmark``: 12 images, every attack, seeds 1 and 7), with the
stand-in model of ``examples/custom_model.py``; each item set is embedded in one call, as ``run`` embeds it (one
batch of at most 256), so that the two paths score the same bits.
"""

import json
import multiprocessing
import os
import platform
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta

import datasets
import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

import rococo_eval
from helpers import REPO_ROOT
from rococo_eval.data.source import BenchmarkSource
from rococo_eval.harness.torchmetrics_metric import RococoRecallMetric
from rococo_eval.models.similarity import similarity_named
from rococo_eval.scoring.embeddingsfile import item_set_of_rows, score_embeddings

EXAMPLES = REPO_ROOT / "examples"
WAIT_S = 60  # the most a test waits for its two processes; each gives up on the group after 30 s


def example(name):
    """A module of examples/, imported as a user running it from there would."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.fixture(scope="module")
def source(benchmark):
    return BenchmarkSource(benchmark)


@pytest.fixture(scope="module")
def splits(benchmark, source, hf_cache):
    """``{(config, split): dataset}`` of every item set: the clean query splits and each attack's adversarial one."""
    keys = [("images", "test"), ("captions", "test")]
    keys += [(attack, "adversarial") for attack in source.text_attacks + source.image_attacks]
    return {key: datasets.load_dataset(str(benchmark), key[0], split=key[1], cache_dir=hf_cache) for key in keys}


def embed(model, splits):
    """``{(config, split): rows}``: each split embedded by ``model`` in one call."""
    return {key: model.encode_images(split["image"]) if "image" in split.column_names else
            model.encode_texts(split["caption"]) for key, split in splits.items()}


@pytest.fixture(scope="module")
def rows(splits):
    return embed(example("custom_model").TinyColourModel(), splits)


@pytest.fixture(scope="module")
def run_report(benchmark, tmp_path_factory):
    """What ``evaluate_model`` (``run``'s path) reports for the stand-in model, as ``report.json`` holds it."""
    model = example("custom_model").TinyColourModel()
    return rococo_eval.evaluate_model(model, benchmark=benchmark, cache_dir=tmp_path_factory.mktemp("cache")).to_dict()


def batches(rows, seed, size=5):
    """Every row of ``rows`` in shuffled batches of ``size``, the item sets interleaved: ``(embeddings, indexes,
    (config, split))``."""
    rng = np.random.default_rng(seed)
    parts = [(vectors[order[start:start + size]], order[start:start + size], key)
             for key, vectors in rows.items()
             for order in [rng.permutation(len(vectors))] for start in range(0, len(vectors), size)]
    return [parts[i] for i in rng.permutation(len(parts))]


def fed(metric, parts):
    for embeddings, indexes, key in parts:
        metric.update(torch.from_numpy(embeddings), torch.from_numpy(indexes), key)
    return metric


def scored_directly(rows, source, similarity="cosine"):
    """``score_embeddings``'s results for ``rows`` (``{(config, split): output}``), made into rows as ``run`` does."""
    vectors = {}
    for key, output in rows.items():
        name = item_set_of_rows(source, *key)
        side = "image" if name.startswith("images/") else "text"
        vectors[name] = similarity_named(similarity).rows(side, output, "m")
    attacks = [attack for attack in source.text_attacks + source.image_attacks
               if f"captions/{attack}" in vectors or f"images/{attack}" in vectors]
    return {key: result.metrics for key, result in score_embeddings(vectors, source, attacks, similarity).items()}


def test_it_equals_run_and_score_embeddings_in_shuffled_batches(source, rows, run_report):
    parts = batches(rows, seed=0)
    parts += parts[:3]  # rows given twice, as a DistributedSampler pads: kept once
    report = fed(RococoRecallMetric(source), parts).compute()
    np.testing.assert_equal([report["results"], report["summary"]], [run_report["results"], run_report["summary"]])
    np.testing.assert_equal(report["results"], scored_directly(rows, source))
    assert len(report["results"]) == 10
    assert report["meta"] == {"rococo_eval": rococo_eval.__version__, "python": platform.python_version(),
                              "similarity": "cosine", "attacks": run_report["meta"]["attacks"]}


def test_galleries_without_rows_are_left_out(source, rows, run_report):
    """Item sets given as a split's name or an attack's original split; attacks whose item set got no rows are not
    scored, as in an embeddings file of some attacks."""
    metric = RococoRecallMetric(source)
    metric.update(torch.from_numpy(rows["images", "test"]), torch.arange(12), "images/original")
    metric.update(torch.from_numpy(rows["captions", "test"]), torch.arange(59), ("rand_voca", "original"))
    metric.update(torch.from_numpy(rows["mix_seed7", "adversarial"]), torch.arange(12), ("mix_seed7", "adversarial"))
    report = metric.compute()
    assert list(report["results"]) == ["clean/image_to_text", "clean/text_to_image", "mix_seed7/text_to_image"]
    np.testing.assert_equal(report["results"], {key: run_report["results"][key] for key in report["results"]})
    assert report["meta"]["attacks"] == ["mix_seed7"]


def test_reset_then_epochs_give_their_own_results(source, rows, splits):
    metric = fed(RococoRecallMetric(source), batches(rows, seed=1))
    first = metric.compute()
    metric.reset()
    with pytest.warns(UserWarning, match="called before the ``update`` method"), \
            pytest.raises(ValueError, match="`update` got no rows of 'images/original'"):
        metric.compute()
    np.testing.assert_equal(fed(metric, batches(rows, seed=2)).compute(), first)
    metric.reset()
    other = embed(example("custom_model").TinyColourModel(seed=1), splits)
    second = fed(metric, batches(other, seed=3)).compute()
    np.testing.assert_equal(second["results"], scored_directly(other, source))
    assert second["results"]["clean/image_to_text"] != first["results"]["clean/image_to_text"]


@pytest.mark.parametrize("similarity", ["dot", "csd"])
def test_the_other_similarities_are_scored_as_run_scores_them(source, similarity):
    """``dot`` rows as they are, ``csd`` pairs (means, log_sigmas) as one row each (mean, then sum(exp(sigma)))."""
    generator = torch.Generator().manual_seed(0)
    sizes = {("images", "test"): 12, ("captions", "test"): 59, ("danger", "adversarial"): 48}
    rows = {key: torch.randn(size, 8, generator=generator) for key, size in sizes.items()}
    if similarity == "csd":
        rows = {key: (means, 0.1 * torch.randn(means.shape, generator=generator)) for key, means in rows.items()}
    metric = RococoRecallMetric(source, similarity=similarity)
    for key, output in rows.items():
        order = torch.randperm(sizes[key], generator=generator)
        parts = tuple(part[order] for part in output) if similarity == "csd" else output[order]
        metric.update(parts, order, key)
    report = metric.compute()
    np.testing.assert_equal(report["results"], scored_directly(rows, source, similarity))  # NaN: no clean hit
    assert len(report["results"]) == 3


def test_flatten_gives_the_summary_numbers_by_name(source, rows):
    metric = fed(RococoRecallMetric(source), batches(rows, seed=4))
    report = metric.compute()
    flat = metric.flatten(report, metrics=["recall@1", "false_rate"])
    mix = next(row for row in report["summary"] if row["attack"] == "mix")
    assert flat["rococo/mix/text_to_image/recall@1"] == mix["recall@1"]
    assert flat["rococo/clean/image_to_text/recall@1"] == report["results"]["clean/image_to_text"]["recall@1"]
    assert len(flat) == 2 * len(report["summary"]) and all(isinstance(value, float) for value in flat.values())
    everything = metric.flatten(prefix="val")
    assert "val/danger/image_to_text/num_adversarial" in everything and not any("seeds" in key for key in everything)



def test_it_says_which_numbers_are_better_when_lower(source, rows):
    """Issue 42: `higher_is_better` was True, though a lower false rate and attack success rate are better. It is now
    torchmetrics' None (no one direction), and `higher_is_better_for` gives each number's: every number `flatten`
    logs is a recall or mean (higher), a rate (lower) or a count (neither)."""
    metric = fed(RococoRecallMetric(source), batches(rows, seed=4))
    directions = {key: RococoRecallMetric.higher_is_better_for(key) for key in metric.flatten(prefix="val")}
    names = {key.rsplit("/", 1)[1]: direction for key, direction in directions.items()}
    assert metric.higher_is_better is None
    assert {name for name, direction in names.items() if direction is False} == {"false_rate", "attack_success_rate"}
    assert {name for name, direction in names.items() if direction is None} == {
        "num_queries", "num_gallery", "num_adversarial"}
    assert {name for name, direction in names.items() if direction} == {
        "recall@1", "recall@5", "recall@10", "r_mean", "clean_recall@1", "clean_recall@5", "clean_recall@10",
        "clean_r_mean"}

# --- a real 2-process gloo group ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def processes():
    """Two worker processes, started from scratch ("spawn"), shared by the tests of this module."""
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def compute_in_a_group(rank, store, benchmark, parts):
    """One of two processes of a gloo group: its metric updated with ``parts``, then computed over both."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", world_size=2, rank=rank,
                            timeout=timedelta(seconds=30))
    try:
        return fed(RococoRecallMetric(BenchmarkSource(benchmark)), parts).compute()
    finally:
        dist.barrier()  # neither process leaves the group while the other one still uses it
        dist.destroy_process_group()


def shards(rows, rank, seed=5, size=5):
    """Process ``rank``'s batches of the rows a real DistributedSampler (shuffled, padded by repeating rows) deals
    it. ``captions/danger`` goes to process 1 only and ``images/patch_seed7`` to process 0 only (each process holds
    no rows of one item set); ``captions/same_concept`` to none."""
    parts = []
    for key, vectors in rows.items():
        if key == ("same_concept", "adversarial") or key == ("danger", "adversarial") and rank == 0 \
                or key == ("patch_seed7", "adversarial") and rank == 1:
            continue
        alone = key in (("danger", "adversarial"), ("patch_seed7", "adversarial"))
        sampler = DistributedSampler(range(len(vectors)), num_replicas=1 if alone else 2, rank=0 if alone else rank,
                                     shuffle=True, seed=seed)
        indexes = np.array(list(sampler))
        parts += [(vectors[indexes[start:start + size]], indexes[start:start + size], key)
                  for start in range(0, len(indexes), size)]
    return parts


def test_two_gloo_processes_give_the_result_of_one(processes, benchmark, source, rows, run_report, tmp_path):
    dealt = [shards(rows, rank) for rank in range(2)]
    assert sum(len(indexes) for _, indexes, key in dealt[0] + dealt[1] if key == ("captions", "test")) == 60  # 59 + 1
    futures = [processes.submit(compute_in_a_group, rank, tmp_path / "store", benchmark, dealt[rank])
               for rank in range(2)]
    first, second = (future.result(timeout=WAIT_S) for future in futures)
    kept = {key: vectors for key, vectors in rows.items() if key != ("same_concept", "adversarial")}
    alone = fed(RococoRecallMetric(source), batches(kept, seed=6)).compute()
    np.testing.assert_equal([first, second], [alone, alone])
    assert "same_concept/image_to_text" not in first["results"] and len(first["results"]) == 9
    np.testing.assert_equal(first["results"], {key: run_report["results"][key] for key in first["results"]})


# --- bad inputs --------------------------------------------------------------------------------------------------

IMAGES = torch.randn(12, 4, generator=torch.Generator().manual_seed(0))
UPDATES = [  # update's arguments, and what it says
    ((IMAGES, torch.arange(12), "captions/upside_down"),
     r"`item_set` must be one of this metric's item sets \(images/original, .*got 'captions/upside_down'"),
    ((IMAGES, torch.arange(12), ("rand_voca", "test")), r"`item_set` .*got \('rand_voca', 'test'\)"),
    ((IMAGES[0], torch.arange(4), "images/original"),
     r"`embeddings` for 'images/original' must be a 2-D float tensor \(rows, dimension\), got torch.float32 of "
     r"shape \(4,\)"),
    ((torch.ones(12, 4, dtype=torch.int64), torch.arange(12), "images/original"), "got torch.int64 of shape"),
    ((IMAGES.where(torch.arange(4) != 2, torch.nan), torch.arange(12), "images/original"),
     "`embeddings` for 'images/original' holds non-finite values"),
    ((IMAGES, torch.arange(12.0), "images/original"),
     r"`indexes` for 'images/original' must be a 1-D tensor of ints .* got torch.float32"),
    ((IMAGES, torch.arange(11), "images/original"), "`indexes` for 'images/original' has 11 entries for 12 rows"),
    ((IMAGES, torch.arange(1, 13), "images/original"),
     r"`indexes` for 'images/original' holds 12, outside its 12 rows \(0 to 11\)"),
    ((IMAGES[:2], [-1, 0], ("mix_seed1", "adversarial")), "`indexes` for 'images/mix_seed1' holds -1"),
]


@pytest.mark.parametrize("arguments, message", UPDATES)
def test_a_bad_update_is_refused_by_name(source, arguments, message):
    with pytest.raises(ValueError, match=message):
        RococoRecallMetric(source).update(*arguments)


def held_rows(metric):
    """How many rows of each item set the metric holds."""
    return {name: sum(len(part) for part in getattr(metric, f"embeddings__{name.replace('/', '__')}"))
            for name in metric.item_sets}


def hostile_updates():
    """``(what is wrong, embeddings, indexes, the argument named)``: values that are no rows of floats or no ints,
    which torch itself turns into a TypeError, RuntimeError, NotImplementedError or a bare overflow."""
    rows, indexes = torch.ones(3, 4), torch.arange(3)
    for what, value in [("a string", "abc"), ("None", None), ("a dict", {"a": 1}), ("a ragged list", [[1.0], []]),
                        ("an object array", np.array([[1.0, None]], dtype=object)),
                        ("a list of ints beyond int64", [[2**70, 1]]),
                        ("a sparse COO tensor", torch.eye(3).to_sparse()),
                        ("a tensor on the meta device", torch.ones(3, 4, device="meta")),
                        ("a nested tensor", torch.nested.nested_tensor([torch.ones(4), torch.ones(2), torch.ones(4)]))]:
        yield f"embeddings: {what}", value, indexes, "`embeddings`"
    for what, value in [("a string", "abc"), ("None", None), ("a dict", {"a": 1}), ("a ragged list", [[0], [1, 2], []]),
                        ("an object array", np.array([0, 1, None], dtype=object)), ("strings", ["0", "1", "2"]),
                        ("a sparse COO tensor", torch.arange(3).to_sparse()),
                        ("a tensor on the meta device", torch.arange(3, device="meta")),
                        ("a nested tensor", torch.nested.nested_tensor([torch.arange(2), torch.arange(1)])),
                        ("ints beyond int64", [0, 1, 2**64]), ("2**63", [0, 1, 2**63]),
                        ("uint64 beyond int64", np.array([0, 1, 2**63], dtype=np.uint64)),
                        ("a uint64 tensor beyond int64", torch.tensor([0, 1, 2**63], dtype=torch.uint64)),
                        ("3 rows, 2 indexes", torch.arange(2))]:
        yield f"indexes: {what}", rows, value, "`indexes`"


@pytest.mark.parametrize("embeddings, indexes, argument",
                         [case[1:] for case in hostile_updates()], ids=[case[0] for case in hostile_updates()])
def test_a_hostile_update_is_a_value_error_naming_the_argument_and_changes_nothing(source, embeddings, indexes,
                                                                                   argument):
    metric = RococoRecallMetric(source)
    metric.update(torch.ones(2, 4), [0, 1], "images/original")
    before = held_rows(metric)
    with pytest.raises(ValueError, match=f"^{argument} for 'images/original' "):
        metric.update(embeddings, indexes, "images/original")
    assert held_rows(metric) == before


@pytest.mark.parametrize("indexes", [np.array([2, 0], dtype=np.uint64), torch.tensor([2, 0], dtype=torch.uint64),
                                     torch.tensor([2, 0], dtype=torch.int32), [2, 0], (2, 0)])
def test_indexes_of_any_int_type_are_taken(source, indexes):
    metric = RococoRecallMetric(source)
    metric.update(np.ones((2, 4), dtype=np.float16), indexes, "images/original")
    assert getattr(metric, "indexes__images__original")[0].tolist() == [2, 0]


def test_a_refused_batch_leaves_the_numbers_as_they_were(source, rows, run_report):
    """A caller that catches the refusal and goes on gets ``run``'s numbers: the refused rows were not kept."""
    metric = RococoRecallMetric(source)
    with pytest.raises(ValueError, match="`indexes` for 'captions/ground_truth' has 2 entries for 3 rows"):
        metric.update(torch.from_numpy(rows["captions", "test"][[5, 9, 0]]), [1, 2], ("captions", "test"))
    report = fed(metric, batches(rows, seed=6)).compute()
    np.testing.assert_equal(report["results"], run_report["results"])


def test_an_unselected_attack_a_width_and_a_csd_pair_are_refused_by_name(source):
    metric = RococoRecallMetric(source, attacks="text")
    with pytest.raises(ValueError, match=r"with ATTACK one of same_concept, diff_concept, rand_voca, danger; got "
                                         r"\('mix_seed1', 'adversarial'\)"):
        metric.update(IMAGES, torch.arange(12), ("mix_seed1", "adversarial"))
    metric.update(IMAGES, torch.arange(12), ("images", "test"))
    with pytest.raises(ValueError, match=r"`embeddings` for 'captions/ground_truth' has width 3, but this metric "
                                         r"holds rows of width 4 \(of 'images/original'\)"):
        metric.update(torch.ones(2, 3), [0, 1], ("captions", "test"))
    with pytest.raises(ValueError, match="must be a pair \\(means, log_sigmas\\) for the csd similarity, got Tensor"):
        RococoRecallMetric(source, similarity="csd").update(IMAGES, torch.arange(12), "images/original")
    with pytest.raises(ValueError, match="`similarity` of RococoRecallMetric must be one of"):
        RococoRecallMetric(source, similarity="euclidean")


COMPUTES = [  # the test images' rows given (and whose embeddings come with them), and what compute says
    (dict(captions=False), r"`update` got no rows of 'captions/ground_truth' \(the split \('captions', 'test'\)\): "
                           "every gallery needs"),
    (dict(images=[i for i in range(12) if i != 5]),
     r"'images/original' lacks row 5 \(11 of its 12 rows were given\): give `update` every row of its split"),
    (dict(images=[*range(12), 3], embedded=[*range(12), 4]),
     "'images/original': row 3 was given twice with different embeddings"),
]


@pytest.mark.parametrize("given, message", COMPUTES)
def test_missing_or_clashing_rows_are_refused_at_compute(source, rows, given, message):
    metric = RococoRecallMetric(source)
    images = given.get("images", list(range(12)))
    embedded = given.get("embedded", images)
    metric.update(torch.from_numpy(rows["images", "test"][embedded]), torch.tensor(images), ("images", "test"))
    if given.get("captions", True):
        metric.update(torch.from_numpy(rows["captions", "test"]), torch.arange(59), ("captions", "test"))
    with pytest.raises(ValueError, match=message):
        metric.compute()


# --- the Lightning example ---------------------------------------------------------------------------------------


def test_the_lightning_example_logs_what_run_reports_for_its_model(benchmark, tmp_path):
    """``examples/lightning_validation.py`` in a real Trainer: what it logs after training equals ``evaluate_model``'s
    report for the trained weights (as float32: Lightning logs a float so)."""
    environment = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "hf"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLES / "lightning_validation.py"), "--benchmark", str(benchmark),
                           "--save-weights", str(tmp_path / "weights.pt")], capture_output=True, text=True,
                          env=environment, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    logged = json.loads(done.stdout)
    module = example("lightning_validation")
    model = module.TinyRetriever(str(benchmark))
    model.load_state_dict(torch.load(tmp_path / "weights.pt"))
    report = rococo_eval.evaluate_model(model, benchmark=benchmark, cache_dir=tmp_path / "cache",
                                        batch_size=module.BATCH_SIZE)
    expected = {f"rococo/{row.key}/{name}": float(np.float32(row.values[name]))
                for row in report.summary for name in ("recall@1", "clean_recall@1", "false_rate")}
    assert logged == expected and len(logged) == 3 * 12  # 10 galleries and 2 seed means
