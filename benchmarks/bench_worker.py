"""The board's worker beside ``rococo-eval run`` (issue 44): what claiming a request, downloading the model at its
commit and committing the result record add to the same evaluation.

    python benchmarks/bench_worker.py [--attacks rand_voca] [--repeat 1] [--annotations-dir DIR]
        [--nproc-per-node N]

A tiny random transformers CLIP (``tests/helpers/tiny_models.py``) is served by a fake Hub on 127.0.0.1
(``tests/helpers/fake_hub.py``, which speaks the endpoints huggingface_hub uses) with the requests and results repos.
RoCOCO's galleries are laid out from the official annotations (``--annotations-dir``, default
``$ROCOCO_ANNOTATIONS_DIR``) over 5,000 tiny generated JPEGs (as the tests' ``coco_root``), for ``--attacks``.

Each round, with an empty embedding cache for both: ``run`` evaluates the model's folder (the baseline); the worker
claims a request of the same model (``create_commit`` with ``parent_commit``), evaluates it
(:meth:`rococo_eval.board.worker.Worker.evaluate`: the checks of the repository at the commit,
``snapshot_download(revision=commit)``, the pickle and config checks with the sha256 of every weight file, the same
evaluation, the record), commits the record and ends the request. Both read the images on the calling thread
(``--workers 0``, the worker's default). Printed: the median seconds of each step over
``--repeat`` rounds, and the worker's total over ``run``'s. With ``--nproc-per-node N`` > 1 both evaluate in N
processes on torch.distributed (gloo, on the CPU, as everything here): ``run`` under ``python -m torch.distributed.run
--standalone --nproc-per-node N``, the worker through its own launch of the same
(:func:`rococo_eval.board.worker_run.launched_record`).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ["HF_HUB_OFFLINE"] = "0"

from helpers.fake_hub import FakeHub  # noqa: E402
from helpers.tiny_models import make_tiny_hf_clip  # noqa: E402

from rococo_eval.board.hub_records import HubRecords  # noqa: E402
from rococo_eval.board.requests import DONE, RequestQueue, request_bytes, request_path  # noqa: E402
from rococo_eval.board.records import record_path  # noqa: E402
from rococo_eval.board.worker import Worker  # noqa: E402
from rococo_eval.cli import main as rococo_eval  # noqa: E402
from rococo_eval.data.annotations import read_annotation_file  # noqa: E402
from rococo_eval.data.source import RococoSource  # noqa: E402

REQUESTS, RESULTS, MODEL = "bench/requests", "bench/board", "bench/tiny-clip"


def tiny_coco(root: Path, annotations_dir) -> Path:
    """5,000 tiny JPEGs named as RoCOCO's test images (the tests' ``coco_root``)."""
    (root / "val2014").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for record in read_annotation_file("clean", annotations_dir):
        height, width = rng.integers(20, 48, 2)
        small = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
        Image.fromarray(small).resize((int(width), int(height)), Image.Resampling.BILINEAR).save(root / record["image"])
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attacks", default="rand_voca")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--annotations-dir", default=os.environ.get("ROCOCO_ANNOTATIONS_DIR"))
    parser.add_argument("--nproc-per-node", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-worker-"))
    coco = tiny_coco(work / "coco", args.annotations_dir)
    model_dir = Path(make_tiny_hf_clip(work, 0).removeprefix("hf:"))
    hub = FakeHub()
    hub.put_model(MODEL, {path.relative_to(model_dir).as_posix(): path.read_bytes()
                          for path in model_dir.rglob("*") if path.is_file()})
    hub.files[REQUESTS], hub.files[RESULTS] = {}, {}
    source = RococoSource(args.annotations_dir, images_dir=coco)
    steps: dict[str, list[float]] = {name: [] for name in ("run", "claim", "download + evaluate", "commit record",
                                                           "end request", "worker total")}
    for round_ in range(args.repeat):
        started = time.perf_counter()
        run = ["run", "--model", f"hf:{model_dir}", "--images-dir", str(coco), "--attacks", args.attacks,
               "--annotations-dir", str(args.annotations_dir), "--device", "cpu", "--workers", "0",
               "--cache-dir", str(work / f"run-cache{round_}"), "--out", str(work / f"run{round_}"), "-q"]
        if args.nproc_per_node > 1:
            subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc-per-node={args.nproc_per_node}", "-m", "rococo_eval", *run], check=True,
                           stdout=subprocess.DEVNULL)
        else:
            assert rococo_eval(run) == 0
        steps["run"].append(time.perf_counter() - started)
        queue = RequestQueue(REQUESTS, endpoint=hub.url)
        checked = queue.submit(f"hf:{MODEL}") if round_ == 0 else checked  # later rounds: the same request again
        hub.files[REQUESTS][request_path(checked)] = request_bytes(checked)
        results = HubRecords(RESULTS, work / f"worker{round_}" / "results", endpoint=hub.url)
        worker = Worker(queue, results, source, work / f"worker{round_}", attacks=args.attacks, device="cpu",
                        processes=args.nproc_per_node,
                        source_options={"annotations_dir": args.annotations_dir, "images_dir": str(coco)})
        marks = [time.perf_counter()]
        request = queue.claim(worker.name)
        marks.append(time.perf_counter())
        record = worker.evaluate(request)
        marks.append(time.perf_counter())
        results.add_to_outbox(record)
        assert results.commit_outbox()
        marks.append(time.perf_counter())
        queue.finish(request, DONE, result=record_path(record))
        marks.append(time.perf_counter())
        for name, (begin, end) in zip(("claim", "download + evaluate", "commit record", "end request"),
                                      zip(marks, marks[1:])):
            steps[name].append(end - begin)
        steps["worker total"].append(marks[-1] - marks[0])
    hub.close()
    median = {name: statistics.median(times) for name, times in steps.items()}
    print(f"tiny CLIP on RoCOCO's galleries of {args.attacks} (5,000 tiny images), {args.nproc_per_node} "
          f"process(es), {args.repeat} round(s), medians:")
    for name, seconds in median.items():
        print(f"  {name:<20} {seconds:8.2f} s")
    print(f"worker total / run: {median['worker total'] / median['run']:.2f}; the worker's own steps (claim, "
          f"commit, end) {median['claim'] + median['commit record'] + median['end request']:.2f} s")


if __name__ == "__main__":
    main()
