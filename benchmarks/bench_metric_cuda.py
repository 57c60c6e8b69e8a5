"""The metric on CUDA tensors at RoCOCO scale: same numbers as numpy, computed on the GPU, little extra memory.

    python benchmarks/bench_metric_cuda.py [--annotations-dir DIR]

Needs a CUDA device (the project's tests run on CPUs only; this is the check for the "torch tensors on any
device, computed there" promise), and the clean annotation file, whose caption counts give the layouts: from
``--annotations-dir``, else ``$ROCOCO_ANNOTATIONS_DIR``, else the pinned download (see
:mod:`rococo_eval.data.annotations`). For each direction's official layout and for float32, bfloat16 and float16
scores it builds the matrix on the GPU, runs ``rococo_recall`` on it, and checks that every output and every
per-query rank equals the numpy path on the same values copied to the CPU. It prints the GPU time against one
``amax`` pass over the same tensor (the memory-bandwidth floor), the extra GPU memory against the matrix, and
how much host memory grew during the GPU computation (the matrix must not be copied to the CPU).
"""

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_metric import official_layout, read_captions_per_image  # noqa: E402

import rococo_recall  # noqa: E402


def model_like_scores(layout, dtype, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    scores = torch.randn(layout.num_queries, layout.num_gallery, device="cuda", generator=generator)
    rows = torch.arange(layout.num_queries, device="cuda")
    first_reference = torch.tensor([refs[0] for refs in layout.references], device="cuda")
    scores[rows, first_reference] += 3.5
    adversarial = torch.from_numpy(np.flatnonzero(layout.adversarial)).cuda()
    pick = torch.randint(len(adversarial), (layout.num_queries,), device="cuda", generator=generator)
    scores[rows, adversarial[pick]] += 3.5
    return scores.to(dtype)


def timed(fn, *args, **kwargs):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotations-dir", help="folder of the official annotation files "
                                                  "(default $ROCOCO_ANNOTATIONS_DIR, else the pinned download)")
    options = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("no CUDA device")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| direction | dtype | floor amax (ms) | metric (ms) | x floor | extra GPU memory | host RSS growth | "
          "equals numpy |")
    print("|---|---|---|---|---|---|---|---|")
    failures = 0
    captions = read_captions_per_image(options.annotations_dir)
    for direction in ("image_to_text", "text_to_image"):
        layout = official_layout(direction, captions)
        inputs = layout.metric_inputs()
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            scores = model_like_scores(layout, dtype)
            rococo_recall.rococo_recall(scores[:64], references=inputs["references"][:64],
                                        adversarial=inputs["adversarial"])  # warm-up
            _, floor = timed(scores.amax, dim=1)
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            result, elapsed = timed(rococo_recall.rococo_recall, scores, per_query=True, **inputs)
            rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
            extra = torch.cuda.max_memory_allocated() - base
            matrix = scores.numel() * scores.element_size()
            expected = rococo_recall.rococo_recall(scores.float().cpu().numpy(), per_query=True, **inputs)
            same = all(np.array_equal(result[key], value, equal_nan=True) for key, value in expected.items())
            failures += not same
            print(f"| {direction} | {str(dtype).split('.')[1]} | {1000 * floor:.2f} | {1000 * elapsed:.1f} | "
                  f"{elapsed / floor:.1f} | {extra / 2**20:.0f} MB ({100 * extra / matrix:.1f}%) | "
                  f"{rss_growth:.0f} MB | {same} (R@1 {result['recall@1']:.2f}) |", flush=True)
            del scores
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
