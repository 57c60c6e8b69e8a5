"""rococo-eval: the RoCOCO robustness benchmark for image-text matching, on Hugging Face tools.

The package holds the pieces under the top-level faces (``rococo_recall.py``, ``rococo_dataset.py``, ``app.py``
and the ``rococo-eval`` command), in layers that each import only from the layers below them (checked by the
import-linter contracts in ``pyproject.toml``), bottom to top:

- :mod:`~rococo_eval.catalog`, :mod:`~rococo_eval.layout`, :mod:`~rococo_eval.detection`: what a gallery is (the
  attack names in one grammar, gallery layouts, and a layout read back from a score matrix);
- :mod:`rococo_eval.io`: atomic files, downloads, score files read and saved;
- :mod:`rococo_eval.models`: model adapters (open_clip, transformers, BLIP/BLIP-2) and the embedding cache;
- :mod:`rococo_eval.attacks`: image alterations, caption attacks, Embedding-Influence, the lexicon;
- :mod:`rococo_eval.data`: the annotation files, the data source, the dataset's configs and export, benchmark
  folders;
- :mod:`rococo_eval.scoring`: a model's galleries, two-stage re-ranking, and the one planner of score files;
- :mod:`rococo_eval.reporting`: the failure analysis and the report (one schema);
- :mod:`rococo_eval.harness`: RoCOCO inside MTEB and torchmetrics (Lightning);
- :mod:`rococo_eval.cli` and :mod:`rococo_eval.space`: the command, and the Space's logic, views, handlers and
  leaderboard.

The names in ``__all__`` are the public API, imported from here on first use (so that ``import rococo_eval``
stays cheap and loads no model library).

Example:
    >>> import rococo_eval
    >>> rococo_eval.gallery_layout("rand_voca", "image_to_text", [5, 6], order="official").num_gallery
    21
"""

import importlib

from rococo_eval.version import __version__

# public name -> the module that defines it
_PUBLIC = {
    "ATTACKS": "rococo_eval.catalog",
    "IMAGE_ATTACKS": "rococo_eval.catalog",
    "TEXT_ATTACKS": "rococo_eval.catalog",
    "attack_direction": "rococo_eval.catalog",
    "gallery_key": "rococo_eval.catalog",
    "GalleryLayout": "rococo_eval.layout",
    "gallery_layout": "rococo_eval.layout",
    "choose_layout": "rococo_eval.detection",
    "read_scores": "rococo_eval.io.scorefiles",
    "Source": "rococo_eval.data.source",
    "RococoSource": "rococo_eval.data.source",
    "BenchmarkSource": "rococo_eval.data.source",
    "open_source": "rococo_eval.data.source",
    "load_queries_and_gallery": "rococo_eval.data.dataset",
    "metric_inputs_for": "rococo_eval.data.dataset",
    "export_dataset": "rococo_eval.data.export",
    "make_benchmark": "rococo_eval.data.benchmark",
    "load_model": "rococo_eval.models.adapters",
    "EmbeddingCache": "rococo_eval.models.cache",
    "attack_captions": "rococo_eval.attacks.captions",
    "score_model": "rococo_eval.scoring.galleries",
    "Reranker": "rococo_eval.scoring.rerank",
    "ScoreRequest": "rococo_eval.scoring.plan",
    "plan_score_files": "rococo_eval.scoring.plan",
    "score_planned": "rococo_eval.scoring.plan",
    "analyse": "rococo_eval.reporting.analysis",
    "summary_rows": "rococo_eval.reporting.report",
    "GalleryKey": "rococo_eval.results",
    "GalleryResults": "rococo_eval.results",
    "SummaryRow": "rococo_eval.results",
    "Report": "rococo_eval.results",
    "build_report": "rococo_eval.results",
    "ImageTextModel": "rococo_eval.models.protocol",
    "TwoStageModel": "rococo_eval.models.protocol",
    "scorer_for": "rococo_eval.scoring.galleries",
    "RerankScorer": "rococo_eval.scoring.galleries",
    "write_report": "rococo_eval.reporting.report",
    "evaluate_model": "rococo_eval.evaluation",
    "write_embeddings_from_rows": "rococo_eval.scoring.embeddingsfile",
    "as_image_text_model": "rococo_eval.models.custom",
    "RococoRecallMetric": "rococo_eval.harness.torchmetrics_metric",
    "mteb_tasks": "rococo_eval.harness.mteb_tasks",
    "as_mteb_encoder": "rococo_eval.harness.mteb_tasks",
    "report_from_mteb": "rococo_eval.harness.mteb_results",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name):
    """The public API (PEP 562): each name is imported from its module when first asked for."""
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
