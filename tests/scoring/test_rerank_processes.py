"""rococo_eval.scoring.rerank across processes, in one Python process: each "process" is a thread with its own
Reranker on one cache folder, meeting at a real ``threading.Barrier`` where torch.distributed's would be. (The
real launches, torchrun with gloo, are in ``tests/test_cli_distributed.py``.)"""

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest

from rococo_eval.layout import gallery_layout
from rococo_eval.processes import Processes
from rococo_eval.scoring.rerank import PairStore, Reranker, Side

CAPTIONS_PER_IMAGE = [2, 3, 2, 2, 1, 2, 2, 3, 2, 1]


@dataclass(frozen=True)
class ThreadRanks(Processes):
    meeting: threading.Barrier = None

    def barrier(self) -> None:
        self.meeting.wait(timeout=60)


class Toy:
    """ITC: dot products; ITM: a fixed function of the pair; records every pair it matches."""

    name, fingerprint = "toy", "0" * 64

    def __init__(self):
        self.matched = []

    def itc_scores(self, images, texts):
        return images @ texts.T

    def tokenize(self, texts):
        return np.array([[int(text)] for text in texts])

    def image_features(self, images):
        return np.array(images)

    def match(self, features, positions, tokens):
        images = features[positions]
        self.matched += list(zip(images.tolist(), tokens[:, 0].tolist()))
        return ((images * 31 + tokens[:, 0] * 7) % 11).astype(np.float32) / 3


def sides():
    rng = np.random.default_rng(0)
    images = Side("images/toy", "a" * 16, list(range(10)), rng.normal(size=(10, 4)).astype(np.float32))
    count = sum(CAPTIONS_PER_IMAGE)
    captions = Side("captions/toy", "b" * 16, [str(index) for index in range(count)],
                    rng.normal(size=(count, 4)).astype(np.float32))
    return images, captions


def score_both(reranker):
    images, captions = sides()
    i2t = reranker.scores(gallery_layout("clean", "image_to_text", CAPTIONS_PER_IMAGE), images, [captions])
    t2i = reranker.scores(gallery_layout("clean", "text_to_image", CAPTIONS_PER_IMAGE), captions, [images])
    reranker.finish()
    return i2t, t2i


@pytest.mark.parametrize("world", [2, 3, 7])
def test_any_number_of_processes_gives_the_scores_of_one_each_pair_computed_once(tmp_path, world):
    alone = Toy()
    expected = score_both(Reranker(alone, tmp_path / "one", k=4, batch_size=2))
    meeting = threading.Barrier(world)
    models = [Toy() for _ in range(world)]
    rerankers = [Reranker(models[rank], tmp_path / "shared", k=4, batch_size=2,
                          processes=ThreadRanks(rank, world, rank, "threads", meeting)) for rank in range(world)]
    with ThreadPoolExecutor(world) as pool:
        results = list(pool.map(score_both, rerankers))
    for i2t, t2i in results:  # every process holds the gallery's scores, bit for bit those of one process
        assert np.array_equal(i2t, expected[0]) and np.array_equal(t2i, expected[1])
    matched = [pair for model in models for pair in model.matched]
    assert sorted(matched) == sorted(alone.matched) and len(set(matched)) == len(matched)
    assert sum(1 for model in models if model.matched) >= 2  # the work was shared
    assert all(reranker.computed == len(alone.matched) for reranker in rerankers)
    shards = sorted(path.name for path in (tmp_path / "shared").rglob("pairs-*.npz"))
    assert len(shards) == 1 and "-rank" not in shards[0]  # rank 0 merged the processes' shards


def test_a_larger_k_computes_only_the_pairs_the_store_lacks(tmp_path):
    first, second = Toy(), Toy()
    score_both(Reranker(first, tmp_path, k=2, batch_size=2))
    larger = Reranker(second, tmp_path, k=4, batch_size=2)
    score_both(larger)
    assert not set(first.matched) & set(second.matched) and larger.computed == len(second.matched) > 0
    fresh = Toy()
    score_both(Reranker(fresh, tmp_path / "fresh", k=4, batch_size=2))
    assert sorted(first.matched + second.matched) == sorted(fresh.matched)


def test_compacting_never_deletes_what_it_wrote_beside_a_torn_shard(tmp_path):
    manifest = {"images": "a", "captions": "b"}
    writer = PairStore(tmp_path, manifest, num_captions=10, shard_suffix="-rank1")
    writer.add(np.array([0, 1]), np.array([3, 4]), np.array([0.5, -1.0], dtype=np.float32))
    (tmp_path / "pairs-000001.npz").write_bytes(b"torn")  # another process's shard, cut short
    store = PairStore(tmp_path, manifest, num_captions=10, shard_suffix="-rank0")
    store.compact()
    found, values = PairStore(tmp_path, manifest, num_captions=10).lookup(np.array([0, 1]), np.array([3, 4]))
    assert found.all() and values.tolist() == [0.5, -1.0]
