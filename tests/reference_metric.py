"""Slow, obviously correct references for the metric's tests: a total order by sorting, and the official loop."""

import numpy as np


def sorted_ranks(scores, references, adversarial, ties="pessimistic"):
    """Per-query (rank, clean_rank, top1_adversarial) by sorting each row with an explicit tie order.

    Pessimistic: at equal score, adversarial items come first, then other wrong items, then correct ones.
    Optimistic: the reverse.
    """
    scores = np.asarray(scores, dtype=np.float64)
    adversarial = np.asarray(adversarial, dtype=bool)
    ranks, clean_ranks, top1 = [], [], []
    for row, refs in zip(scores, references):
        refs = {refs} if isinstance(refs, (int, np.integer)) else set(int(r) for r in refs)
        correct = np.zeros(len(row), dtype=bool)
        correct[list(refs)] = True
        kind = np.where(correct, 2, np.where(adversarial, 0, 1))
        if ties == "optimistic":
            kind = 2 - kind
        order = np.lexsort((kind, -row))
        ranks.append(int(np.flatnonzero(correct[order])[0]))
        top1.append(bool(adversarial[order[0]]))
        clean = order[~adversarial[order]]
        clean_ranks.append(int(np.flatnonzero(correct[clean])[0]))
    return np.array(ranks), np.array(clean_ranks), np.array(top1)


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
