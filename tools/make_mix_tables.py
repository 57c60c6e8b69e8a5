"""Regenerate ``rococo_eval/data/mix_tables.npz``: who is mixed with whom in RoCOCO's image attacks.

The official ``mix_images.py`` (of ``OFFICIAL_REPOSITORY`` at ``OFFICIAL_COMMIT``, see
:mod:`rococo_eval.data.annotations`) picks partners and patch boxes from PyTorch's and NumPy's global random
streams. This script replays those streams twice and refuses to write the tables unless both replays agree:

- ``replay_with_dataloader`` drives a real ``torch.utils.data.DataLoader`` exactly as the official script
  does (``torch.manual_seed(seed)``, ``np.random.seed(seed)``, batch size 64, ``shuffle=True``, 4 workers);
- ``replay_manual`` rebuilds the same stream from scratch on NumPy's MT19937 bit generator.

Order of the draws (torch 2.13, ``torch/utils/data``), all on torch's default CPU generator unless said:

1. ``_BaseDataLoaderIter.__init__`` (dataloader.py:690-694) draws the workers' base seed:
   ``torch.empty((), dtype=torch.int64).random_()``, one 64-bit draw. ``iter(BatchSampler)`` on line 689
   only creates a generator object; its body has not run yet.
2. The first index request (``_MultiProcessingDataLoaderIter._reset`` priming ``_try_put_index`` at
   dataloader.py:1231/1276/1539, or the first ``__next__`` with 0 workers) starts ``BatchSampler.__iter__``
   (sampler.py:333), hence ``RandomSampler.__iter__`` (sampler.py:160-183): one more 64-bit draw seeds a
   private ``torch.Generator`` that yields ``torch.randperm(5000)``; the default generator is not used again.
3. Per batch, in the main process: ``torch.randperm(len(batch))``; for ``patch`` then
   ``np.random.randint(384)`` for the box's row centre (``cx``, tensor dim 2), then for its column centre
   (``cy``, dim 3).

Worker processes reseed their own copies of the generators; they never touch the main process's stream.

Usage: ``python tools/make_mix_tables.py [--out PATH] [--num-workers N]``
"""

import argparse
import logging
from pathlib import Path

import numpy as np

from rococo_eval.attacks.images import BATCH_SIZE, IMAGE_SIZE, LAM
from rococo_eval.catalog import IMAGE_ATTACK_METHODS, SEEDS
from rococo_eval.data.annotations import NUM_IMAGES, OFFICIAL_COMMIT, OFFICIAL_REPOSITORY

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "rococo_eval" / "data" / "mix_tables.npz"
NOTE = (
    "Replays the random stream of the official RoCOCO mix_images.py "
    f"({OFFICIAL_REPOSITORY.removeprefix('https://')}, {OFFICIAL_COMMIT[:7]}): "
    "torch.manual_seed(seed); np.random.seed(seed); DataLoader(5000 images, batch_size=64, shuffle=True, "
    "num_workers=4); per batch torch.randperm(batch) and, for patch, np.random.randint(384) for the row "
    "centre, then the column centre. partner[k]: test index whose pixels go into the altered copy of image k. "
    "box[k]: (row0, row1, col0, col1) in 384x384 pixels, lam 0.9. order: test indices in the order the "
    "DataLoader yields them (batch b = order[64b:64b+64])."
)

logger = logging.getLogger(__name__)


def rand_bbox(rng, lam=LAM, size=IMAGE_SIZE):
    """The official ``rand_bbox`` for a square image, as ``(row0, row1, col0, col1)``.

    Its ``bbx1:bbx2`` indexes tensor dim 2 (rows) and ``bby1:bby2`` dim 3 (columns).
    """
    cut = int(size * np.sqrt(1.0 - lam))
    cx = rng.randint(size)
    cy = rng.randint(size)
    rows = np.clip([cx - cut // 2, cx + cut // 2], 0, size)
    cols = np.clip([cy - cut // 2, cy + cut // 2], 0, size)
    return (*rows.tolist(), *cols.tolist())


def _assemble(batches, perms, boxes):
    """Per-image arrays from per-batch indices, permutations and boxes."""
    order = np.concatenate(batches)
    partner = np.empty(NUM_IMAGES, dtype=np.int16)
    box = np.empty((NUM_IMAGES, 4), dtype=np.int16)
    for batch, perm, batch_box in zip(batches, perms, boxes or [None] * len(batches)):
        partner[batch] = batch[perm]
        if batch_box is not None:
            box[batch] = batch_box
    tables = {"order": order.astype(np.int16), "partner": partner}
    if boxes:
        tables["box"] = box
    return tables


def replay_with_dataloader(seed, method, num_workers=4):
    """Replay with a real torch DataLoader over the indices 0..4999; restores the global RNG states."""
    import torch

    batches, perms, boxes = [], [], []
    numpy_state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            torch.manual_seed(seed)
            np.random.seed(seed)
            loader = torch.utils.data.DataLoader(
                range(NUM_IMAGES), batch_size=BATCH_SIZE, shuffle=True, num_workers=num_workers
            )
            for batch in loader:
                perms.append(torch.randperm(batch.size(0)).numpy())
                batches.append(batch.numpy())
                if method == "patch":
                    boxes.append(rand_bbox(np.random))
        finally:
            np.random.set_state(numpy_state)
    return _assemble(batches, perms, boxes)


class TorchCPUStream:
    """torch's CPU generator (``at::mt19937``) rebuilt on NumPy's MT19937 bit generator.

    torch seeds MT19937 with the standard ``init_genrand`` of the seed's low 32 bits; ``random_()`` on int64
    takes two 32-bit outputs ``(hi << 32 | lo) % 2**63``; ``randperm(n)`` (n < 2**32 / 20) swaps
    ``r[i]`` with ``r[i + u % (n - i)]`` for i = 0..n-2, one 32-bit output ``u`` each.
    """

    def __init__(self, seed):
        key = [seed & 0xFFFFFFFF]
        for j in range(1, 624):
            previous = key[-1]
            key.append((1812433253 * (previous ^ (previous >> 30)) + j) & 0xFFFFFFFF)
        self._bits = np.random.MT19937()
        self._bits.state = {
            "bit_generator": "MT19937",
            "state": {"key": np.array(key, dtype=np.uint32), "pos": 624},
        }

    def random_int64(self):
        hi, lo = (int(v) for v in self._bits.random_raw(2))
        return ((hi << 32) | lo) % (1 << 63)

    def randperm(self, n):
        perm = np.arange(n)
        for i, u in enumerate(self._bits.random_raw(n - 1).tolist()):
            j = i + u % (n - i)
            perm[i], perm[j] = perm[j], perm[i]
        return perm


def replay_manual(seed, method):
    """Replay the official stream without torch: the draws listed in this module's docstring."""
    default = TorchCPUStream(seed)
    default.random_int64()  # the DataLoader iterator's base seed for its workers
    order = TorchCPUStream(default.random_int64()).randperm(NUM_IMAGES)  # RandomSampler's own generator
    numpy_rng = np.random.RandomState(seed)
    batches, perms, boxes = [], [], []
    for start in range(0, NUM_IMAGES, BATCH_SIZE):
        batches.append(order[start : start + BATCH_SIZE])
        perms.append(default.randperm(len(batches[-1])))
        if method == "patch":
            boxes.append(rand_bbox(numpy_rng))
    return _assemble(batches, perms, boxes)


def build_tables(replay=replay_manual):
    """All tables as ``{"<method>_seed<seed>_<name>": array}``."""
    return {
        f"{method}_seed{seed}_{name}": array
        for seed in SEEDS
        for method in IMAGE_ATTACK_METHODS
        for name, array in replay(seed, method).items()
    }


def _assert_equal(expected, actual):
    if expected.keys() != actual.keys():
        raise AssertionError(f"replays disagree on keys: {sorted(expected)} vs {sorted(actual)}")
    for key in expected:
        if not np.array_equal(expected[key], actual[key]):
            raise AssertionError(f"replays disagree on {key}")


def main(argv=None):
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--num-workers", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    tables = build_tables()
    _assert_equal(tables, build_tables(lambda s, m: replay_with_dataloader(s, m, args.num_workers)))
    logger.info("torch DataLoader replay (torch %s) and manual replay agree", torch.__version__)
    np.savez_compressed(
        args.out,
        torch_version=np.array(torch.__version__),
        note=np.array(NOTE),
        lam=np.array(LAM),
        **tables,
    )
    logger.info("wrote %s (%d bytes)", args.out, args.out.stat().st_size)


if __name__ == "__main__":
    main()
