"""Slow, obviously correct references for the metric's tests: a total order by sorting, and the official loop."""

import numpy as np


def sorted_per_query(scores, references, adversarial, ties="pessimistic"):
    """The metric's per-query outputs by sorting each row in an explicit total order, as a dict of arrays.

    Order: score descending; at equal score, pessimistic: adversarial items, then other wrong items, then correct
    ones (optimistic: the reverse); then the lowest column. The top-1 item is the first of the order, the best
    correct item the first correct one.
    """
    scores = np.asarray(scores, dtype=np.float64)
    adversarial = np.asarray(adversarial, dtype=bool)
    out = {name: [] for name in ("rank", "clean_rank", "top1_adversarial", "top_index", "top_score",
                                 "best_correct_index", "best_correct_score")}
    for row, refs in zip(scores, references):
        refs = {refs} if isinstance(refs, (int, np.integer)) else set(int(r) for r in refs)
        correct = np.zeros(len(row), dtype=bool)
        correct[list(refs)] = True
        kind = np.where(correct, 2, np.where(adversarial, 0, 1))
        if ties == "optimistic":
            kind = 2 - kind
        order = np.lexsort((np.arange(len(row)), kind, -row))
        rank = int(np.flatnonzero(correct[order])[0])
        clean = order[~adversarial[order]]
        out["rank"].append(rank)
        out["clean_rank"].append(int(np.flatnonzero(correct[clean])[0]))
        out["top1_adversarial"].append(bool(adversarial[order[0]]))
        out["top_index"].append(int(order[0]))
        out["top_score"].append(row[order[0]])
        best_correct = min(refs, key=lambda column: (-row[column], column))
        out["best_correct_index"].append(best_correct)
        out["best_correct_score"].append(row[best_correct])
    return {name: np.array(values) for name, values in out.items()}


def official_itm_eval(scores, references, adversarial):
    """RoCOCO's official scoring loop (argsort per row), returning the official numbers in percent."""
    adversarial = np.flatnonzero(adversarial)
    adversarial_set = set(adversarial.tolist())
    ranks = np.zeros(scores.shape[0])
    false = 0
    for index, score in enumerate(scores):
        inds = np.argsort(score)[::-1]
        rank = 1e20
        for i in references[index]:
            tmp = np.where(inds == i)[0][0]
            if tmp < rank:
                rank = tmp
        ranks[index] = rank
        if int(inds[0]) in adversarial_set:
            false += 1
    r1 = 100.0 * len(np.where(ranks < 1)[0]) / len(ranks)
    r5 = 100.0 * len(np.where(ranks < 5)[0]) / len(ranks)
    r10 = 100.0 * len(np.where(ranks < 10)[0]) / len(ranks)
    return {"recall@1": r1, "recall@5": r5, "recall@10": r10, "r_mean": (r1 + r5 + r10) / 3,
            "false_rate": 100.0 * false / len(ranks)}
