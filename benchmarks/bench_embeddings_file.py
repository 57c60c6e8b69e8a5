"""Peak memory and time of the Space scoring a full-size RoCOCO embeddings file (every item set, 512 dimensions).

    python benchmarks/bench_embeddings_file.py [--dimension 512] [--keep DIR]

RoCOCO's real annotation files ($ROCOCO_ANNOTATIONS_DIR) and 5,000 generated test images (tiny JPEGs with COCO's
file names: the item sets' fingerprints need image files) make the benchmark. The file holds random unit vectors
for the 160,010 items: 5,000 test images, 30,000 altered images, 25,010 captions and 100,000 adversarial
captions. It is scored in a child process by ``rococo_eval.space.logic.evaluate_files`` (all 12 galleries, with the
failure analysis), which prints its peak resident memory (``VmHWM``: ``ru_maxrss`` would also count the parent's
memory at the fork) and its time; the file's size is printed beside them.
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
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, time

def peak_mb():  # this process's own peak resident memory: VmHWM starts afresh at exec, ru_maxrss does not
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024

from rococo_eval.data.facts import GalleryFacts
from rococo_eval.data.source import RococoSource
from rococo_eval.space.logic import evaluate_files
facts = GalleryFacts.of(RococoSource(images_dir=sys.argv[2]))
started = time.perf_counter()
evaluation = evaluate_files([sys.argv[1]], facts=facts)
print(json.dumps({"seconds": time.perf_counter() - started, "galleries": len(evaluation.results),
                  "peak_mb": peak_mb()}))
"""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dimension", type=int, default=512)
    parser.add_argument("--keep", help="a folder to keep the images and the file in (default: a temporary one)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from rococo_eval.catalog import ATTACKS
    from rococo_eval.data.source import RococoSource
    from rococo_eval.scoring.embeddingsfile import item_sets, write_embeddings_file

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp())
    source = RococoSource()
    images = folder / "coco"
    (images / "val2014").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in source.image_files:
        if not (images / name).exists():
            Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).save(images / name, quality=90)
    source = RococoSource(images_dir=images)
    started = time.perf_counter()
    sets = item_sets(source, ATTACKS)
    vectors = {}
    for name, items in sets.items():
        rows = rng.standard_normal((len(items), args.dimension)).astype(np.float32)
        vectors[name] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    path = write_embeddings_file(folder / "full.safetensors", vectors, {n: s.fingerprint for n, s in sets.items()},
                                 "random")
    rows = sum(len(rows) for rows in vectors.values())
    print(f"{rows:,} vectors of {args.dimension} dimensions in {len(vectors)} item sets: {path.stat().st_size / 1e6:.0f} "
          f"MB (float32), written in {time.perf_counter() - started:.0f} s")
    del vectors
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(images)], capture_output=True, text=True,
                          env=environment, check=True)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"Space scoring the file: {measured['galleries']} galleries in {measured['seconds']:.0f} s, peak resident "
          f"memory {measured['peak_mb']:.0f} MB ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
