"""RoCOCO inside the harnesses researchers already run: MTEB 2.x tasks (:mod:`~rococo_eval.harness.mteb_tasks`) and a
torchmetrics metric for training loops (:mod:`~rococo_eval.harness.torchmetrics_metric`). Each reads the same
galleries and scores them with the same metric as ``rococo-eval run`` (docs/harness.md)."""
