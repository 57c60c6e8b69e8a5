"""How often the order rules decide and refuse, and whether they are ever wrong, on RoCOCO's real caption counts.

    python benchmarks/measure_order_rule.py [--runs 200] [--annotations-dir DIR]

An attacked image-to-text matrix has the same shape in the official and the dataset order, and
:func:`rococo_eval.detection.decide_order` reads the order off the scores only when they clearly show
it, and refuses a stated order that they are significantly against (``OrderDecision.contradicted``). This script
feeds it, ``--runs`` seeds per case, and counts the runs decided, decided wrongly, and those in which each order
would be refused if stated (the true one: a wrongful refusal; the other: a rightful one):

- model-like scores in each order: ground truth +d over unit Gaussian noise, the image's own adversarial
  captions +0.8 d (also with every adversarial caption boosted), for several d, with the R@1 such a model gets;
- scores without a signal: random, image-blind (one score per caption), image-blind with an adversarial bias,
  and constant scores.

Only the entries ``decide_order`` reads are drawn, so a run costs milliseconds instead of a 1 GB matrix.
The figures of ``rococo_eval.detection`` and docs/performance.md come from ``--runs 200``.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rococo_eval.data.annotations import read_annotation_file  # noqa: E402
from rococo_eval.detection import decide_order  # noqa: E402
from rococo_eval.layout import image_to_text_layout  # noqa: E402


class DrawnScores:
    """A (queries x gallery) matrix whose entries are drawn when read, by ``row(query, columns)``."""

    def __init__(self, shape, row):
        self.shape, self.ndim, self.row = shape, 2, row

    def __getitem__(self, index):
        rows, columns = index
        return np.stack([self.row(int(query), cols) for query, cols in zip(rows[:, 0], columns)])


def own_adversarial(layout, captions, query):
    """The gallery positions of the adversarial captions made from ``query``'s own captions."""
    if layout.order == "official":
        return np.arange(layout.references[query][-1] + 1, layout.references[query][-1] + 6)
    return sum(captions) + 5 * query + np.arange(5)


def model_like(layout, captions, d, seed, adversarial_bias=0.0):
    rng = np.random.default_rng(seed)

    def row(query, columns):
        values = rng.standard_normal(columns.shape).astype(np.float32)
        values += d * np.isin(columns, layout.references[query])
        values += 0.8 * d * np.isin(columns, own_adversarial(layout, captions, query))
        return values + adversarial_bias * layout.adversarial[columns]

    return DrawnScores((layout.num_queries, layout.num_gallery), row)


def recall_at_1(layout, captions, d, rows=200, seed=0):
    """The R@1 of the model-like scores with lift ``d``, from ``rows`` full rows."""
    rng = np.random.default_rng(seed)
    hits = 0
    for query in np.linspace(0, layout.num_queries - 1, rows).astype(int):
        row = rng.standard_normal(layout.num_gallery)
        row[list(layout.references[query])] += d
        row[own_adversarial(layout, captions, query)] += 0.8 * d
        hits += row[list(layout.references[query])].max() >= row.max()
    return 100 * hits / rows


def without_signal(kind, layout, seed):
    shape = (layout.num_queries, layout.num_gallery)
    if kind == "random":
        return DrawnScores(shape, lambda query, cols: np.random.default_rng([seed, query]).standard_normal(
            layout.num_gallery).astype(np.float32)[cols])
    column = np.random.default_rng(seed).standard_normal(layout.num_gallery).astype(np.float32)
    if kind == "image-blind, adversarial +1":
        column[layout.adversarial] += 1.0
    return DrawnScores(shape, lambda query, cols: column[cols])


def tally(make, captions, truth, runs):
    """(decided, wrong, true order refused, other order refused) over ``runs`` seeds: ``truth`` is the order the
    scores are laid out in (without a signal, every decision is wrong whatever it says)."""
    decided = wrong = true_refused = other_refused = 0
    for seed in range(runs):
        decision = decide_order(make(seed), captions)
        decided += bool(decision.order)
        wrong += bool(decision.order) and decision.order != truth
        true_refused += decision.contradicted == truth
        other_refused += bool(decision.contradicted) and decision.contradicted != truth
    return decided, wrong, true_refused, other_refused


def cells(counts, runs):
    decided, wrong, true_refused, other_refused = counts
    return f"{decided}/{runs} | {wrong} | {true_refused} | {other_refused}/{runs}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="seeds per case (default 200)")
    parser.add_argument("--annotations-dir", help="default $ROCOCO_ANNOTATIONS_DIR, else the pinned download")
    options = parser.parse_args(argv)
    captions = [len(record["caption"]) for record in read_annotation_file("clean", options.annotations_dir)]
    layouts = {order: image_to_text_layout(captions, attacked=True, order=order) for order in ("official", "dataset")}
    started = time.perf_counter()
    print("| scores | order | decided | wrong | true order refused | other order refused |")
    print("|---|---|---|---|---|---|")
    for order, layout in layouts.items():
        for d in (1.0, 1.25, 1.5, 1.75, 2.0, 3.0):
            counts = tally(lambda seed: model_like(layout, captions, d, seed), captions, order, options.runs)
            print(f"| model-like, d = {d} (R@1 ~{recall_at_1(layout, captions, d):.1f}%) | {order} | "
                  f"{cells(counts, options.runs)} |")
        for bias in (1.0, 2.0):
            counts = tally(lambda seed: model_like(layout, captions, 2.0, seed, bias), captions, order, options.runs)
            print(f"| model-like, d = 2, every adversarial caption +{bias} | {order} | {cells(counts, options.runs)} |")
    for kind in ("random", "image-blind", "image-blind, adversarial +1"):  # laid out in the dataset order
        decided, _, true_refused, other_refused = tally(lambda seed: without_signal(kind, layouts["dataset"], seed),
                                                        captions, "dataset", options.runs)
        print(f"| {kind} | dataset | {cells((decided, decided, true_refused, other_refused), options.runs)} |")
    constant = decide_order(np.zeros((layouts["official"].num_queries, layouts["official"].num_gallery), np.float16),
                            captions)
    refused = int(bool(constant.contradicted))
    print(f"| constant | - | {cells((int(bool(constant.order)),) * 2 + (refused, refused), 1)} |")
    print(f"\n{time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
