"""What evaluate's documented path would cost the RoCOCO metric: a metric that defines only ``_info`` and
``_compute`` against ``RococoRecall``'s own ``add_batch`` and ``compute``, as ratios measured in one run.

    python benchmarks/bench_metric_arrow.py [--direction image_to_text]
        [--queries N] [--batch 250] [--annotations-dir DIR]

evaluate documents three methods for a module to define (``_info``, ``_compute`` and ``_download_and_prepare``):
every input declared in ``features`` is then encoded into an Arrow cache file by evaluate's ``add_batch``, and read
back for ``_compute``. ``ArrowRecallAt1``, in this script, is that metric for R@1: one row of scores per query
(``Sequence(float32)``) and its correct gallery indices; its ``_compute`` counts a query as a hit when its best
correct item scores above every wrong one (the pessimistic ties of ``rococo_recall``). ``MetricInfo(format="numpy")``
would hand ``_compute`` arrays, but evaluate 0.4.6 refuses it for any feature that is not a single ``Value`` (the
run prints its message), so ``_compute`` gets Python lists, as every evaluate metric with row features does.

The gallery is the official layout of ``--direction`` (image-to-text 5,000 x 50,010, text-to-image 25,010 x 10,000,
float32: 1 GB each), built from the caption counts of the clean annotation file (``--annotations-dir``, else
``$ROCOCO_ANNOTATIONS_DIR``, else the pinned download); ``--queries`` keeps its first N queries (the whole gallery),
so that a quick run fits a shared machine: the documented path needs many times the matrix in memory. Each variant
runs in a fresh child process:

- ``add_batch``: ``--batch`` query rows at a time, then ``compute()``;
- ``compute``: one ``compute(predictions=..., references=...)``;
- ``keep_in_memory``: the documented path again, with evaluate's Arrow cache in memory instead of on disk
  (``evaluate.load``'s option, refused with ``num_process > 1``).

Measured: wall time; extra memory (the child's peak RSS above its RSS once evaluate is imported, the metric loaded
and the matrix built); bytes written (``wchar`` of ``/proc/self/io``: what the child handed to ``write``, evaluate's
cache file nearly all of it). Ratios are arrow / rococo for the same input path. The run fails unless both metrics
give the same R@1.
"""

import argparse
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path

import datasets
import evaluate
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_metric import (  # noqa: E402
    current_rss_bytes, model_like_scores, official_layout, peak_rss_bytes, read_captions_per_image)

# (metric, input path, keep_in_memory): evaluate's documented option that puts its Arrow cache in memory, not on disk
VARIANTS = (("rococo", "add_batch", False), ("arrow", "add_batch", False), ("arrow", "add_batch", True),
            ("rococo", "compute", False), ("arrow", "compute", False), ("arrow", "compute", True))


def arrow_info(metric_format=None):
    """The ``MetricInfo`` of a documented-path R@1 metric: one score row per query and its correct indices."""
    features = datasets.Features({"predictions": datasets.Sequence(datasets.Value("float32")),
                                  "references": datasets.Sequence(datasets.Value("int64"))})
    return evaluate.MetricInfo(description="R@1 through evaluate's Arrow cache", citation="", features=features,
                               format=metric_format)


class ArrowRecallAt1(evaluate.Metric):
    """R@1 the way evaluate documents a metric: ``_info`` and ``_compute``, every input through Arrow."""

    def _info(self):
        return arrow_info()

    def _compute(self, predictions, references):
        hits = 0
        for start in range(0, len(predictions), 256):  # arrays a block of rows at a time
            rows = np.asarray(predictions[start:start + 256], dtype=np.float32)
            correct = np.zeros(rows.shape, dtype=bool)
            for row, refs in enumerate(references[start:start + 256]):
                correct[row, refs] = True
            best_correct = np.where(correct, rows, -np.inf).max(axis=1)
            best_wrong = np.where(correct, -np.inf, rows).max(axis=1)
            hits += int((best_correct > best_wrong).sum())
        return {"recall@1": 100.0 * hits / len(predictions)}


def _bytes_written():
    with open("/proc/self/io") as handle:
        return int(dict(line.split(": ") for line in handle.read().splitlines())["wchar"])


def _child(variant, direction, captions, options, queue):
    kind, path, keep_in_memory = variant
    cache_dir = tempfile.mkdtemp(prefix="bench-metric-arrow-")
    try:
        if kind == "rococo":
            metric = evaluate.load(str(ROOT / "rococo_recall.py"), cache_dir=cache_dir)
        else:
            metric = ArrowRecallAt1(cache_dir=cache_dir, keep_in_memory=keep_in_memory)
        layout = official_layout(direction, captions)
        scores = model_like_scores(layout, num_queries=options.queries)
        inputs = layout.metric_inputs()
        references = inputs["references"][:options.queries]
        extra = {"adversarial": inputs["adversarial"], "k": 1} if kind == "rococo" else {}
        adding = {key: value for key, value in extra.items() if key != "k"}
        before, written = current_rss_bytes(), _bytes_written()
        start = time.perf_counter()
        if path == "add_batch":
            for row in range(0, len(scores), options.batch):
                metric.add_batch(predictions=scores[row:row + options.batch],
                                 references=references[row:row + options.batch], **adding)
            result = metric.compute(**({"k": 1} if kind == "rococo" else {}))
        else:
            result = metric.compute(predictions=scores, references=references, **extra)
        elapsed = time.perf_counter() - start
        queue.put((elapsed, peak_rss_bytes() - before, _bytes_written() - written, result["recall@1"]))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def measure(variant, direction, captions, options):
    """``(seconds, extra bytes, bytes written, R@1)`` of ``variant``, in a fresh process."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(variant, direction, captions, options, queue))
    process.start()
    measured = queue.get()
    process.join()
    return measured


def numpy_format_refusal():
    """evaluate's message when ``_info`` asks for ``format="numpy"`` with a row feature (None if it accepts it)."""
    try:
        arrow_info("numpy")
    except ValueError as error:
        return str(error)
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--direction", default="image_to_text", choices=("image_to_text", "text_to_image"))
    parser.add_argument("--queries", type=int, help="the first N queries of the layout (default all)")
    parser.add_argument("--batch", type=int, default=250, help="query rows per add_batch (default 250)")
    parser.add_argument("--annotations-dir", help="folder of the official annotation files "
                                                  "(default $ROCOCO_ANNOTATIONS_DIR, else the pinned download)")
    options = parser.parse_args(argv)
    if options.queries is not None and options.queries < 1:
        parser.error(f"--queries must be a positive number of queries, got {options.queries}")
    if options.batch < 1:
        parser.error(f"--batch must be a positive number of rows, got {options.batch}")
    captions = read_captions_per_image(options.annotations_dir)
    layout = official_layout(options.direction, captions)
    options.queries = min(options.queries or layout.num_queries, layout.num_queries)
    matrix_bytes = options.queries * layout.num_gallery * 4
    print(f"format='numpy' with a Sequence feature: {numpy_format_refusal() or 'accepted'}")
    print(f"{options.direction}: {options.queries} x {layout.num_gallery} float32 ({matrix_bytes / 2**20:.0f} MB)")
    print("| variant | time (s) | x rococo | extra memory (MB) | x rococo | x matrix | written (MB) | x matrix | R@1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    results = {}
    for variant in VARIANTS:
        elapsed, extra, written, recall = results[variant] = measure(variant, options.direction, captions, options)
        baseline_time, baseline_extra, *_ = results["rococo", variant[1], False]
        name = f"{variant[0]} {variant[1]}" + (", keep_in_memory" if variant[2] else "")
        print(f"| {name} | {elapsed:.3f} | {elapsed / baseline_time:.1f} | {extra / 2**20:.0f} | "
              f"{extra / max(baseline_extra, 1):.1f} | {extra / matrix_bytes:.2f} | {written / 2**20:.1f} | "
              f"{written / matrix_bytes:.2f} | {recall:.2f} |", flush=True)
    recalls = {" ".join(map(str, variant)): measured[3] for variant, measured in results.items()}
    if len(set(recalls.values())) != 1:
        sys.exit(f"the metrics disagree on R@1: {recalls}")


if __name__ == "__main__":
    main()
