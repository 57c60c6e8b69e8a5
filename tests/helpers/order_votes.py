"""Attacked image-to-text score matrices whose sampled queries vote for each order in planted numbers.

:func:`rococo_eval.detection.decide_order` samples up to 512 evenly spaced query rows; a sampled row votes for the
order whose ground truth holds its higher best score. :func:`plant_votes` writes a 1 at the ground truth of one
order or the other in exactly the rows needed (the rest stays as it is: zeros, a tie that votes for nothing), and
checks the counts with ``decide_order`` itself.
"""

import numpy as np

from rococo_eval.detection import ORDER_SAMPLE_ROWS, decide_order
from rococo_eval.layout import image_to_text_layout


def plant_votes(scores, captions_per_image, official, dataset):
    """Make ``official`` sampled queries of ``scores`` (zeros, an array or a writable memory map of an attacked
    image-to-text gallery) favour their official-order ground truth, and the next ``dataset`` their dataset-order
    one; return ``scores``."""
    layouts = {order: image_to_text_layout(captions_per_image, attacked=True, order=order)
               for order in ("official", "dataset")}
    queries = scores.shape[0]
    sampled = np.unique(np.linspace(0, queries - 1, min(queries, ORDER_SAMPLE_ROWS)).round().astype(np.int64))
    informative = [int(query) for query in sampled
                   if not set(layouts["official"].references[query]) & set(layouts["dataset"].references[query])]
    votes = ["official"] * official + ["dataset"] * dataset
    assert len(votes) <= len(informative), (len(votes), len(informative))
    for query, order in zip(informative, votes):
        scores[query, list(layouts[order].references[query])] = 1.0
    decision = decide_order(scores, captions_per_image)
    assert (decision.official, decision.dataset) == (official, dataset), decision
    return scores
