"""Score a toy model with the RoCOCO Recall metric, as a user would: `python examples/quickstart.py`."""

import json
from pathlib import Path

import evaluate
import numpy as np

from rococo_eval.layout import image_to_text_layout

metric = evaluate.load(str(Path(__file__).resolve().parents[1] / "rococo_recall.py"))
# 4 images, one with 6 captions, 5 altered each; the gallery in the official order (each image's captions, then its 5)
layout = image_to_text_layout([5, 6, 5, 5], attacked=True, order="official")
rng = np.random.default_rng(0)
scores = rng.standard_normal((layout.num_queries, layout.num_gallery)).astype(np.float32)
for query, refs in enumerate(layout.references):
    scores[query, refs[0]] += 2.0  # the model likes one of its own captions
print(json.dumps(metric.compute(predictions=scores, k=(1, 5, 10), **layout.metric_inputs()), indent=2))
