"""Distributed evaluation with real processes: process 0 returns the result over every process, the others None.

Two spawned worker processes each load the metric with `num_process=2` and their own `process_id`; the
results travel through evaluate's cache files (a shared `cache_dir`) or through a torch.distributed gloo group.
"""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta

import evaluate
import numpy as np
import pytest

from helpers import REPO_ROOT
from rococo_recall import rococo_recall

METRIC_PATH = str(REPO_ROOT / "rococo_recall.py")
K = (1, 5)
WAIT_S = 60  # the most a test waits for its two processes; each process gives up after 30 s


@pytest.fixture(scope="module")
def processes():
    """Two worker processes, started from scratch ("spawn") and shared by the tests of this module."""
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def evaluate_on_process(process_id, cache_dir, batches=(), compute=None, torch_store=None, rank=None):
    """One of two processes: load the metric, add ``batches``, return ``compute(**compute)``.

    With ``torch_store``, it first joins a two-process gloo group (as ``rank``, default ``process_id``).
    """
    if torch_store is not None:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{torch_store}", world_size=2,
                                rank=process_id if rank is None else rank, timeout=timedelta(seconds=30))
    try:
        metric = evaluate.load(METRIC_PATH, num_process=2, process_id=process_id, cache_dir=str(cache_dir),
                               experiment_id="test-distributed", timeout=30)
        for batch in batches:
            metric.add_batch(**batch)
        return metric.compute(**(compute or {}))
    finally:
        if torch_store is not None:
            dist.barrier()  # neither process leaves the group while the other one still uses it
            dist.destroy_process_group()


def compute_alone_in_a_group(process_id, torch_store, predictions, references):
    """A process of a two-process gloo group that loads the metric with the default num_process=1.

    Returns its result and the warnings logged while it computed.
    """
    import logging.handlers

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{torch_store}", world_size=2, rank=process_id,
                            timeout=timedelta(seconds=30))
    handler = logging.handlers.BufferingHandler(capacity=100)
    logging.getLogger().addHandler(handler)
    try:
        result = evaluate.load(METRIC_PATH).compute(predictions=predictions, references=references, k=K)
        return result, [record.getMessage() for record in handler.buffer if record.levelno >= logging.WARNING]
    finally:
        logging.getLogger().removeHandler(handler)
        dist.barrier()
        dist.destroy_process_group()


def run_both(processes, tmp_path, mechanism, arguments):
    """Run ``evaluate_on_process`` on both processes with ``arguments[i]``; return their two futures."""
    for process_id, kwargs in enumerate(arguments):
        if mechanism == "torch":  # each its own cache_dir: only torch.distributed can join them
            kwargs.update(cache_dir=tmp_path / f"cache-{process_id}", torch_store=tmp_path / "store")
        else:
            kwargs.update(cache_dir=tmp_path / "cache")
    futures = [processes.submit(evaluate_on_process, process_id, **kwargs)
               for process_id, kwargs in enumerate(arguments)]
    for future in futures:
        future.exception(timeout=WAIT_S)
    return futures


def case(seed=0, num_queries=41, num_gallery=30):
    """Scores with ties, 10 adversarial items, 1 to 3 references per query (never the first clean item)."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 40, (num_queries, num_gallery)).astype(np.float32)
    adversarial = np.zeros(num_gallery, dtype=bool)
    adversarial[rng.choice(num_gallery, 10, replace=False)] = True
    clean = np.flatnonzero(~adversarial)
    references = [rng.choice(clean[1:], rng.integers(1, 4), replace=False).tolist() for _ in range(num_queries)]
    return scores, references, adversarial


def other_adversarial():
    """As many adversarial items as in `case()`, but one moved onto the first clean item."""
    adversarial = case()[2].copy()
    spare, moved = np.flatnonzero(~adversarial)[0], np.flatnonzero(adversarial)[0]
    adversarial[[spare, moved]] = True, False
    return adversarial


def batches_of(scores, references, adversarial, rows, size=7):
    """The batches of one process holding ``rows`` of the matrix, each with its `query_index`."""
    return [dict(predictions=scores[part], references=[references[i] for i in part], adversarial=adversarial,
                 query_index=part)
            for part in (rows[start:start + size] for start in range(0, len(rows), size))]


OPTIONS = dict(k=K, per_query=True, bootstrap=30, seed=2)


@pytest.mark.parametrize("mechanism", ["evaluate", "torch"])
@pytest.mark.parametrize("split", ["contiguous", "interleaved", "compute"])
def test_process_zero_gets_the_result_of_one_process(processes, tmp_path, mechanism, split):
    if mechanism == "torch":
        import torch.distributed  # noqa: F401  (installed by `make test`; a missing one must fail)
    scores, references, adversarial = case()
    if split == "interleaved":  # as a sampler without padding deals them: query i on process i % 2
        halves = [np.arange(0, 41, 2), np.arange(1, 41, 2)]
    else:
        halves = [np.arange(0, 20), np.arange(20, 41)]
    if split == "compute":  # compute(predictions=...) adds this process's queries, then joins the others
        arguments = [dict(compute=dict(predictions=scores[rows], references=[references[i] for i in rows],
                                       adversarial=adversarial, query_index=rows, **OPTIONS)) for rows in halves]
    else:
        arguments = [dict(batches=batches_of(scores, references, adversarial, rows), compute=OPTIONS)
                     for rows in halves]
    first, second = run_both(processes, tmp_path, mechanism, arguments)
    np.testing.assert_equal(first.result(), rococo_recall(scores, references, adversarial, **OPTIONS))
    assert second.result() is None
    assert not list(tmp_path.rglob("*.arrow"))  # evaluate's cache files are removed (or never written)
    if mechanism == "torch":
        assert not list(tmp_path.rglob("*.lock"))


MISMATCHES = [  # what process 1 does differently, and what process 0 says
    (dict(adversarial=other_adversarial()),
     "every process must pass the same `adversarial`: process 1 marks 10 gallery items, process 0 10, not the same"),
    (dict(adversarial=None), "every process must pass the same `adversarial`: process 1 marks 0 gallery items"),
    (dict(predictions=np.zeros((21, 31), np.float32), adversarial=np.flatnonzero(case()[2])),
     "every process must score the same gallery: process 1 scored 31 gallery items, process 0 30"),
    (dict(ties="optimistic"), "every process must pass the same `ties`: process 1 used 'optimistic'"),
    (dict(query_index=np.arange(19, 40)), "`query_index` 19 was given twice"),
    (dict(query_index=np.arange(21, 42)), "`query_index` must number the queries from 0 to 40: 20 is missing"),
]


@pytest.mark.parametrize("mechanism", ["evaluate", "torch"])
@pytest.mark.parametrize("change, message", MISMATCHES)
def test_processes_that_disagree_are_refused_on_process_zero(processes, tmp_path, mechanism, change, message):
    if mechanism == "torch":
        import torch.distributed  # noqa: F401  (installed by `make test`; a missing one must fail)
    scores, references, adversarial = case()
    given = [dict(predictions=scores[rows], references=[references[i] for i in rows], adversarial=adversarial,
                  query_index=rows, **OPTIONS)
             for rows in (np.arange(0, 20), np.arange(20, 41))]
    given[1].update(change)
    first, second = run_both(processes, tmp_path, mechanism, [dict(compute=kwargs) for kwargs in given])
    with pytest.raises(ValueError, match=message):
        first.result()
    assert second.result() is None


@pytest.mark.parametrize("mechanism", ["evaluate", "torch"])
def test_query_index_is_required_with_several_processes(processes, tmp_path, mechanism):
    """Without positions, padded shards would count queries twice and interleaved ones would come out of order."""
    if mechanism == "torch":
        import torch.distributed  # noqa: F401  (installed by `make test`; a missing one must fail)
    scores, references, adversarial = case()
    arguments = [dict(compute=dict(predictions=scores[rows], references=[references[i] for i in rows],
                                   adversarial=adversarial, k=K))
                 for rows in (np.arange(0, 21), np.arange(20, 41))]  # query 20 on both: a padded shard
    for future in run_both(processes, tmp_path, mechanism, arguments):
        with pytest.raises(ValueError, match="`query_index` is required with num_process > 1"):
            future.result()


def test_one_process_metric_in_a_torch_group_warns(processes, tmp_path):
    import torch.distributed  # noqa: F401  (installed by `make test`; a missing one must fail)
    scores, references, _ = case()
    futures = [processes.submit(compute_alone_in_a_group, process_id, tmp_path / "store", scores[rows],
                                [references[i] for i in rows])
               for process_id, rows in enumerate((np.arange(0, 20), np.arange(20, 41)))]
    for future, num_queries in zip(futures, (20, 21)):
        result, warnings = future.result(timeout=WAIT_S)
        assert result["num_queries"] == num_queries
        assert any("torch.distributed has 2 processes but the metric was loaded with num_process=1" in message
                   for message in warnings)


def test_a_torch_rank_other_than_process_id_is_refused(processes, tmp_path):
    import torch.distributed  # noqa: F401  (installed by `make test`; a missing one must fail)
    scores, references, adversarial = case()
    arguments = [dict(rank=1 - process_id, compute=dict(predictions=scores, references=references,
                                                        adversarial=adversarial, query_index=np.arange(41), k=K))
                 for process_id in range(2)]
    futures = run_both(processes, tmp_path, "torch", arguments)
    for process_id, future in enumerate(futures):
        with pytest.raises(ValueError, match=f"`process_id` is {process_id} but this process has torch.distributed "
                                             f"rank {1 - process_id}"):
            future.result()
