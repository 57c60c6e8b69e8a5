"""The cost of checking the embedding cache's files as they are read (their digest, dtype, shape and finite values),
against reading the same files unchecked, in one run.

    python benchmarks/bench_cache_checks.py [--dimension 512] [--repeat 5]

The files are RoCOCO's item sets at ``--dimension``: 5,000 test images, 25,010 ground-truth captions, 4 x 25,000
adversarial captions and 6 x 5,000 altered images (160,010 rows), written as the cache writes finished files
(:func:`rococo_eval.models.cache._save_rows`). Each round reads every file checked
(:func:`rococo_eval.models.cache._read_rows`) and unchecked (``np.load``), alternating; the times are medians of the
rounds, after a warm-up read (the files are in the page cache, as a rerun finds them).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rococo_eval.models.cache import _read_rows, _save_rows  # noqa: E402

ITEM_SETS = [5_000, 25_010] + [25_000] * 4 + [5_000] * 6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dimension", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for number, rows in enumerate(ITEM_SETS):
            vectors = rng.normal(size=(rows, args.dimension)).astype(np.float32)
            paths.append((_save_rows(Path(folder) / f"set{number}", "embeddings", vectors), rows))
        size = sum(path.stat().st_size for path, _ in paths)
        for path, rows in paths:  # warm-up: the page cache
            _read_rows(path, rows)
        checked, unchecked = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            for path, rows in paths:
                _read_rows(path, rows)
            checked.append(time.perf_counter() - started)
            started = time.perf_counter()
            for path, _ in paths:
                np.load(path)
            unchecked.append(time.perf_counter() - started)
    checked, unchecked = statistics.median(checked), statistics.median(unchecked)
    print(f"{sum(ITEM_SETS):,} embeddings of {args.dimension} dimensions in {len(ITEM_SETS)} files "
          f"({size / 2**20:.0f} MB), median of {args.repeat} rounds:")
    print(f"| read | seconds | ratio |\n|---|---|---|\n| unchecked (np.load) | {unchecked:.2f} | 1 |\n"
          f"| checked (digest, dtype, shape, finite values) | {checked:.2f} | {checked / unchecked:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
