"""Evaluate a model on RoCOCO (or a generated benchmark) from Python: what ``rococo-eval run`` does, for any model.

:func:`evaluate_model` takes one of this package's models (:func:`rococo_eval.models.adapters.load_model`) or any
object with ``encode_images`` and ``encode_texts`` (:mod:`rococo_eval.models.custom`), and gives it the
command's whole path: the embedding cache (resumable), the altered images, every gallery scored
(:func:`rococo_eval.scoring.run.score_run`, two stages for a model with ``match``), and the report with its
failure analysis (:func:`rococo_eval.reporting.report.write_report`). ``rococo-eval run`` calls it for each model.

Example (``examples/custom_model.py`` runs a whole one)::

    import rococo_eval

    class MyModel:
        def encode_images(self, images): ...   # list of PIL images -> array (images, dim)
        def encode_texts(self, texts): ...     # list of str -> array (texts, dim)

    report = rococo_eval.evaluate_model(MyModel(), images_dir="/data/coco", out="my-report")
    report.summary   # one row per gallery: clean and attacked R@1, R@5, R@10, false rate, ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

from rococo_eval.data.source import open_source
from rococo_eval.io.download import default_cache_dir
from rococo_eval.models.cache import DEFAULT_BATCH_SIZE
from rococo_eval.models.custom import as_image_text_model
from rococo_eval.processes import ONE
from rococo_eval.reporting.report import write_report
from rococo_eval.results import Report
from rococo_eval.scoring.run import score_run
from rococo_eval.scoring.rerank import DEFAULT_CANDIDATES


def evaluate_model(model, source=None, *, attacks: Union[str, Sequence[str]] = "all", images_dir=None,
                   benchmark=None, annotations_dir=None, out=None, cache_dir=None,
                   batch_size: int = DEFAULT_BATCH_SIZE, workers: int = 0, rerank_k: int = DEFAULT_CANDIDATES,
                   save_scores=None, compact_scores: bool = False, save_embeddings=None,
                   name: Optional[str] = None, progress: bool = False, processes=ONE,
                   meta: Optional[dict] = None) -> Optional[Report]:
    """Embed, score every gallery and (with ``out``) write the report of ``model``; return the report.

    Args:
        model: a model of this package, or any object with ``encode_images`` and ``encode_texts`` and the
            optional hooks of :mod:`rococo_eval.models.custom` (scored as its ``similarity`` says:
            cosine by default).
        source: the benchmark (a :class:`~rococo_eval.data.source.Source`); default: RoCOCO with the COCO
            test images in ``images_dir``, or the generated benchmark folder ``benchmark``.
        attacks: ``"all"``, ``"text"``, ``"image"``, or attack names (a list, or one comma-separated string).
        annotations_dir: the official annotation files (default ``$ROCOCO_ANNOTATIONS_DIR``, else the pinned
            download).
        out: the report folder (``report.json``, ``report.md``, charts, per-query export); None writes nothing.
        cache_dir: the cache (default ``$ROCOCO_CACHE_DIR`` or ``~/.cache/rococo-eval``); embeddings go to its
            ``embeddings/``.
        batch_size, workers: items per forward pass; threads loading images ahead of the model.
        rerank_k: candidates re-scored per query by a two-stage model's ITM head.
        save_scores: a folder for each gallery's score matrix (official order), or None.
        compact_scores: with ``save_scores``, a two-stage model's galleries are saved as compact files (its re-ranked
            candidates only, 20 to 100 times smaller; :mod:`rococo_eval.io.savedscores`); refused for a dual
            encoder.
        save_embeddings: a ``.safetensors`` file for every item set's embeddings
            (:mod:`rococo_eval.scoring.embeddingsfile`, for ``rococo-eval score`` and the Space), or None.
        name: the report's name for a custom model (default: its ``name``, else its class name).
        progress: progress bars (rank 0's only, in a launch of several).
        processes: the :class:`~rococo_eval.processes.Processes` of a launch of several (see
            :func:`~rococo_eval.scoring.galleries.score_model`); the others return None.
        meta: more entries for the report's ``meta``.

    Returns:
        the :class:`~rococo_eval.results.Report`: its ``meta``, every gallery's ``results`` (with the per-query
        arrays) and its ``summary`` rows (``report.json`` adds the failure analysis).

    Raises:
        ValueError: an unknown attack, no images for RoCOCO, or a model output that is not finite 2-D rows.
        TypeError: ``model`` lacks ``encode_images`` or ``encode_texts``.
    """
    cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    if source is None:  # the model is taken in first, refused before the source is opened (a download, a folder)
        model = as_image_text_model(model, name)
        source = open_source(annotations_dir, images_dir=images_dir, cache_dir=cache_dir, benchmark=benchmark,
                             needs_images=True)
    report = score_run(model, source, attacks, cache_dir, name=name, batch_size=batch_size, workers=workers,
                       rerank_k=rerank_k, save_scores=save_scores, compact_scores=compact_scores,
                       save_embeddings=save_embeddings, progress=progress, processes=processes, meta=meta)
    if report is not None and out is not None:  # None: a process other than rank 0 of a launch, its share done
        write_report(report, Path(out))
    return report

