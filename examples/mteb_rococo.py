"""RoCOCO in MTEB: every gallery of an exported dataset as an MTEB task, run by ``mteb.evaluate``, and MTEB's
results turned into the report ``rococo-eval run`` writes.

    python examples/mteb_rococo.py --dataset rococo-export --out mteb-report     # `rococo_dataset.py export`
    python examples/mteb_rococo.py --dataset my-benchmark --out mteb-report      # made by `rococo-eval attack`
    python examples/mteb_rococo.py --dataset rococo-export --model mteb/baseline-random-encoder

Any MTEB encoder runs the tasks (``--model``: ``mteb.get_model(NAME)``); by default ``as_mteb_encoder`` wraps a
rococo-eval model, the tiny stand-in of ``custom_model.py``, so that its scores are the ones ``run`` ranks. The main
score is ``hit_rate_at_1`` (Recall@1); RoCOCO's own numbers are the ``rococo_`` scores.
"""

import argparse
import json

import mteb

from custom_model import TinyColourModel
from rococo_eval import as_mteb_encoder, mteb_tasks, report_from_mteb


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="an exported RoCOCO folder, a benchmark, or a Hub repository")
    parser.add_argument("--results", default="mteb-results", help="MTEB's results folder")
    parser.add_argument("--out", default="mteb-report", help="the report folder")
    parser.add_argument("--model", help="an MTEB model name (default: the tiny stand-in, as a rococo-eval model)")
    args = parser.parse_args(argv)

    tasks = mteb_tasks(args.dataset)  # image-to-text and text-to-image, clean and attacked
    model = mteb.get_model(args.model) if args.model else as_mteb_encoder(TinyColourModel())
    results = mteb.evaluate(model, tasks=tasks, cache=mteb.ResultCache(args.results),
                            overwrite_strategy="always", show_progress_bar=False)  # MTEB's cache ignores the dataset
    for result in results.task_results:
        scores = result.scores["test"][0]
        print(f"{result.task_name:28} R@1 {100 * scores['hit_rate_at_1']:6.2f}  "
              f"false rate {scores['rococo_false_rate']:6.2f}")
    report = report_from_mteb(args.results, out=args.out)  # or `rococo-eval from-mteb mteb-results`
    print(json.dumps([{"gallery": str(row.key), "R@1": row.values["recall@1"]} for row in report.summary]))


if __name__ == "__main__":
    main()
