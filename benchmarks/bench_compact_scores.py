"""Size, time and peak memory of scoring a BLIP-shaped RoCOCO gallery from a compact file against its full matrix.

    python benchmarks/bench_compact_scores.py [--k 256] [--galleries rand_voca/image_to_text,mix_seed1/text_to_image]

For each gallery (RoCOCO's real layouts, from $ROCOCO_ANNOTATIONS_DIR) a random re-ranker's output is made: each
query's k candidates (its first correct item among them for 80% of the queries) with random scores, the rest at
-100. It is written twice, as the compact file ``run --save-scores --compact-scores`` writes and as the full
float32 matrix ``run --save-scores`` writes, and each is scored in a child process through the one path of
``rococo-eval score`` and the Space (``plan_score_files``, ``score_planned``), which prints its time and peak
resident memory (``VmHWM``: ``ru_maxrss`` would also count the parent's memory at the fork). The full matrix is the
baseline of the ratios; the results must be equal, bounds aside (a full matrix cannot tell its fill from a score).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, time

def peak_mb():  # this process's own peak resident memory: VmHWM starts afresh at exec, ru_maxrss does not
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024

from rococo_eval.data.source import RococoSource
from rococo_eval.scoring.plan import ScoreRequest, plan_score_files, score_planned
counts = RococoSource().captions_per_image
started = time.perf_counter()
[planned] = plan_score_files([ScoreRequest(sys.argv[1])], counts)
result = score_planned([planned])[planned.key]
print(json.dumps({"seconds": time.perf_counter() - started, "peak_mb": peak_mb(), "result": result.metrics}))
"""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=256, help="candidates per query (BLIP's k_test: 256)")
    parser.add_argument("--galleries", default="rand_voca/image_to_text,mix_seed1/text_to_image")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from rococo_eval.data.source import RococoSource
    from rococo_eval.io.savedscores import ScoreMatrixWriter, score_file_name, write_top_k
    from rococo_eval.layout import gallery_layout
    from rococo_eval.scoring.rerank import FILL, full_blocks

    folder = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    counts = RococoSource().captions_per_image
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    for key in args.galleries.split(","):
        attack, direction = key.split("/")
        layout = gallery_layout(attack, direction, counts, "official")
        started = time.perf_counter()
        columns = np.empty((layout.num_queries, args.k), dtype=np.int64)
        for query in range(layout.num_queries):
            columns[query] = rng.choice(layout.num_gallery, size=args.k, replace=False)
            correct = int(np.atleast_1d(layout.references[query])[0])
            if rng.random() < 0.8 and correct not in columns[query]:
                columns[query, rng.integers(args.k)] = correct
        scores = rng.normal(size=columns.shape).astype(np.float32)
        compact = write_top_k(folder / score_file_name(attack, direction, args.k), columns, scores, FILL,
                              layout.num_gallery)
        full = folder / score_file_name(attack, direction)
        with ScoreMatrixWriter(full, (layout.num_queries, layout.num_gallery)) as writer:
            for start, rows in full_blocks(columns, scores, layout.num_gallery):
                writer.write(start, rows)
        print(f"{key}: {layout.num_queries:,} x {layout.num_gallery:,}, top {args.k}; files made in "
              f"{time.perf_counter() - started:.0f} s")
        measured = {}
        for name, path in (("full", full), ("compact", compact)):
            done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                                  env=environment, check=True)
            measured[name] = json.loads(done.stdout.strip().splitlines()[-1])
            measured[name]["mb"] = path.stat().st_size / 2**20
            path.unlink()
        same = {name: value for name, value in measured["compact"]["result"].items() if not name.endswith("_bounds")}
        if same != measured["full"]["result"]:
            raise SystemExit(f"{key}: the compact file's results differ from the full matrix's")
        bounded = sorted(name for name in measured["compact"]["result"] if name.endswith("_bounds"))
        for name in ("full", "compact"):
            row = measured[name]
            print(f"  {name:8s} {row['mb']:8.1f} MB  {row['seconds']:6.1f} s  peak {row['peak_mb']:6.0f} MB")
        print(f"  compact / full: size {measured['compact']['mb'] / measured['full']['mb']:.4f}, time "
              f"{measured['compact']['seconds'] / measured['full']['seconds']:.2f}, peak memory "
              f"{measured['compact']['peak_mb'] / measured['full']['peak_mb']:.2f}; equal results; bounded: "
              f"{', '.join(bounded) or 'none'}")
    print(f"({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
