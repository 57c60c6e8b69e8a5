"""Time and peak memory of the RoCOCO Recall metric at RoCOCO scale, as ratios against baselines of the same run.

    python benchmarks/bench_metric.py [--directions image_to_text text_to_image]
        [--argsort-rows 200] [--methods floor metric ...] [--repeat 1]
        [--annotations-dir DIR] [--previous OLD/rococo_recall.py]

For each direction it builds the official layout from the caption counts of the clean annotation file (5,000 x
50,010 image-to-text; 25,010 x 10,000 text-to-image; float32), read from ``--annotations-dir``, else
``$ROCOCO_ANNOTATIONS_DIR``, else the pinned download (see :mod:`rococo_eval.data.annotations`), with model-like
scores (one correct item lifted above noise, so that R@1 is about that of CLIP) and measures, each in a fresh
child process so that peak memory is its own:

- floor: one ``np.max`` pass over the matrix (the memory-bandwidth floor);
- metric: ``evaluate.load("rococo_recall.py").compute(...)``;
- metric_per_query: the same with ``per_query=True`` (adds each query's rank, top-1 item and best correct item);
- previous, previous_per_query: the same two with ``--previous``, the metric file of another version (for example
  ``git show 8f57c84:rococo_recall.py``, saved as ``rococo_recall.py`` in a folder of its own: the version whose
  numba kernel ranked in one compiled pass per row), on its default path;
- argsort loop: the official per-row ``np.argsort`` loop, timed on ``--argsort-rows`` rows and scaled;
- torchmetrics: ``RetrievalHitRate(top_k=1)`` on the largest slice of queries it can hold in the memory given
  by ``--torchmetrics-gb`` (it needs flat per-pair tensors: preds, target and an int64 index), scaled.

Peak memory is the child's peak RSS above the RSS it had once the matrix was built (the extra memory). The metric
is timed on its second ``compute`` on the matrix: the first, whose time is in the note, also pays what a first call
pays (a previous version's numba kernel: importing numba, compiling the kernel where numba's cache does not hold it).
"""

import argparse
import json
import multiprocessing
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rococo_eval.data.annotations import read_annotation_file  # noqa: E402
from rococo_eval.layout import image_to_text_layout, text_to_image_layout  # noqa: E402

METHODS = ("floor", "metric", "metric_per_query", "previous", "previous_per_query", "argsort", "torchmetrics")


def read_captions_per_image(annotations_dir=None):
    """The number of ground-truth captions of each test image, from the clean annotation file.

    ``annotations_dir``: a folder holding the official files; None uses ``$ROCOCO_ANNOTATIONS_DIR``, else the
    pinned download.
    """
    return [len(record["caption"]) for record in read_annotation_file("clean", annotations_dir)]


def official_layout(direction, captions):
    """The attacked gallery of ``direction`` in the official order, for images with ``captions`` captions each."""
    build = image_to_text_layout if direction == "image_to_text" else text_to_image_layout
    return build(captions, attacked=True, order="official")


def model_like_scores(layout, seed=0, num_queries=None):
    """Scores of ``layout``'s first ``num_queries`` queries (default all): noise, the first correct item and one
    random adversarial item lifted."""
    num_queries = layout.num_queries if num_queries is None else num_queries
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((num_queries, layout.num_gallery), dtype=np.float32)
    rows = np.arange(num_queries)
    first_reference = np.array([refs[0] for refs in layout.references[:num_queries]])
    scores[rows, first_reference] += 3.5
    adversarial = np.flatnonzero(layout.adversarial)
    if len(adversarial):
        scores[rows, adversarial[rng.integers(len(adversarial), size=num_queries)]] += 3.5
    return scores


def peak_rss_bytes():
    """This process's peak resident memory so far, in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes():
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def _child(task, direction, captions, options, queue):
    layout = official_layout(direction, captions)
    scores = model_like_scores(layout)
    inputs = layout.metric_inputs()
    before = current_rss_bytes()
    start = time.perf_counter()
    note = ""
    if task == "floor":
        scores.max(axis=1)
    elif task.startswith(("metric", "previous")):
        import evaluate

        metric = evaluate.load(str(options.previous if task.startswith("previous") else ROOT / "rococo_recall.py"))
        per_query = task.endswith("per_query")
        start = time.perf_counter()
        metric.compute(predictions=scores, **inputs, per_query=per_query)
        first_call = time.perf_counter() - start
        before = current_rss_bytes()
        start = time.perf_counter()
        result = metric.compute(predictions=scores, **inputs, per_query=per_query)
        note = (f"R@1 {result['recall@1']:.2f}, clean R@1 {result['clean_recall@1']:.2f}; "
                f"first call {first_call:.3f} s")
    elif task == "argsort":
        rows = min(options.argsort_rows, layout.num_queries)
        for index in range(rows):
            inds = np.argsort(scores[index])[::-1]
            min(np.where(inds == i)[0][0] for i in inputs["references"][index])
        note = f"{rows} rows, scaled x{layout.num_queries / rows:.1f}"
        elapsed = (time.perf_counter() - start) * layout.num_queries / rows
        queue.put((elapsed, peak_rss_bytes() - before, note))
        return
    elif task == "torchmetrics":
        import torch
        from torchmetrics.retrieval import RetrievalHitRate

        # preds float32 + target bool + indexes int64 = 13 bytes per (query, item) pair, plus the metric's copies
        rows = max(1, min(layout.num_queries, int(options.torchmetrics_gb * 2**30 / (13 * 3 * layout.num_gallery))))
        target = np.zeros((rows, layout.num_gallery), dtype=bool)
        for index in range(rows):
            target[index, inputs["references"][index]] = True
        indexes = torch.arange(rows).repeat_interleave(layout.num_gallery)
        before = current_rss_bytes()
        start = time.perf_counter()
        hit_rate = RetrievalHitRate(top_k=1)
        hit_rate.update(torch.from_numpy(scores[:rows]).reshape(-1), torch.from_numpy(target).reshape(-1), indexes)
        value = float(hit_rate.compute())
        elapsed = (time.perf_counter() - start) * layout.num_queries / rows
        note = f"{rows} of {layout.num_queries} queries, scaled; hit rate@1 {100 * value:.2f}"
        queue.put((elapsed, peak_rss_bytes() - before, note))
        return
    queue.put((time.perf_counter() - start, peak_rss_bytes() - before, note))


def measure(task, direction, captions, options):
    """``(seconds, extra bytes, note)`` of ``task``, each run in a fresh process; the fastest of ``--repeat`` runs."""
    context = multiprocessing.get_context("spawn")
    runs = []
    for _ in range(options.repeat):
        queue = context.Queue()
        process = context.Process(target=_child, args=(task, direction, captions, options, queue))
        process.start()
        runs.append(queue.get())
        process.join()
    return min(runs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--directions", nargs="+", default=["image_to_text", "text_to_image"])
    parser.add_argument("--argsort-rows", type=int, default=200)
    parser.add_argument("--torchmetrics-gb", type=float, default=6.0)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS,
                        help="what to measure (floor is always measured: the ratios need it)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each method; the fastest counts")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--previous", type=Path, help="rococo_recall.py of another version, for `previous`")
    parser.add_argument("--annotations-dir", help="folder of the official annotation files "
                                                  "(default $ROCOCO_ANNOTATIONS_DIR, else the pinned download)")
    options = parser.parse_args(argv)
    if not options.previous:
        options.methods = [task for task in options.methods if not task.startswith("previous")]
    elif options.previous.name != "rococo_recall.py":
        parser.error("--previous must be a file named rococo_recall.py (evaluate names the metric after its file)")
    captions = read_captions_per_image(options.annotations_dir)
    rows = []
    print("| direction | matrix | method | time (s) | x floor | argsort / metric | extra memory (MB) | "
          "extra / matrix | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for direction in options.directions:
        layout = official_layout(direction, captions)
        matrix_bytes = layout.num_queries * layout.num_gallery * 4
        tasks = ["floor"] + [task for task in options.methods if task != "floor"]
        results = {task: measure(task, direction, captions, options) for task in tasks}
        floor, metric = results["floor"][0], results.get("metric", results["floor"])[0]
        for task, (elapsed, extra, note) in results.items():
            rows.append(dict(direction=direction, method=task, seconds=elapsed, extra_bytes=extra, note=note))
            print(f"| {direction} | {layout.num_queries} x {layout.num_gallery} | {task} | {elapsed:.3f} | "
                  f"{elapsed / floor:.2f} | {elapsed / metric:.1f} | {extra / 2**20:.0f} | "
                  f"{100 * extra / matrix_bytes:.1f}% | {note} |", flush=True)
    if options.json:
        options.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
