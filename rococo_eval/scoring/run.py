"""Score a model's galleries as a run does: its embedding cache, its scorer, what it saves beside the report, and
what the report's ``meta`` says of the scoring.

:func:`score_run` is the scoring half of :func:`rococo_eval.evaluation.evaluate_model` (which adds the model, the
source and the report around it): it scores every gallery
(:func:`~rococo_eval.scoring.galleries.score_model`, two stages for a
:class:`~rococo_eval.models.protocol.TwoStageModel`), gathers the validity warnings of every process of a launch, and
gives rank 0 a :class:`ModelScores`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import rococo_eval.validity as validity
from rococo_eval.models.cache import DEFAULT_BATCH_SIZE, EmbeddingCache
from rococo_eval.processes import ONE
from rococo_eval.results import GalleryResult
from rococo_eval.scoring.galleries import check_saving, score_model, scorer_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelScores:
    """What scoring a model gives its report: every gallery's result (by gallery key, official order, with the
    per-query arrays), and the ``meta`` entries of the scoring, in the report's order: the validity ``warnings``
    (when some), a re-ranker's ``rerank`` counts, ``scores_dir`` and ``compact_scores``, ``embeddings_file``."""

    results: dict[str, GalleryResult]
    report_entries: dict[str, Any]


def score_run(model, source, attacks: Sequence[str], cache_dir, *, batch_size: int = DEFAULT_BATCH_SIZE,
              workers: int = 0, rerank_k: Optional[int] = None, save_scores=None, compact_scores: bool = False,
              save_embeddings=None, progress: bool = False, processes=ONE) -> Optional[ModelScores]:
    """Score ``model``'s galleries of ``attacks`` with its embeddings cached in ``cache_dir``'s ``embeddings/``;
    on rank 0 of ``processes``, return them with the report's entries; on the others (their share done), None.

    The options are :func:`~rococo_eval.evaluation.evaluate_model`'s, each checked once before any work
    (:func:`~rococo_eval.scoring.galleries.check_saving`): ``save_embeddings`` here, the others by
    :func:`~rococo_eval.scoring.galleries.score_model`; progress bars are rank 0's only.
    """
    check_saving(model, save_embeddings=save_embeddings)
    with validity.recorded() as warnings:  # a damaged cache file dropped, for the report
        cache = EmbeddingCache(Path(cache_dir) / "embeddings", batch_size=batch_size, workers=workers,
                               progress=progress and processes.is_main)
        scorer = scorer_for(model, cache, k=rerank_k, processes=processes)  # two stages for a model with `match`
        results = score_model(model, source, attacks, cache, scorer=scorer, save_scores=save_scores,
                              processes=processes, compact_scores=compact_scores)
    warnings = list(dict.fromkeys(processes.gathered(warnings)))  # every process's, once: rank 0 writes the report
    if not processes.is_main:
        return None
    entries = {**validity.report_entries(warnings), **scorer.report_entries()}
    if save_scores is not None:
        entries["scores_dir"] = str(save_scores)
        if compact_scores:
            entries["compact_scores"] = True
    if save_embeddings is not None:
        entries["embeddings_file"] = _save_embeddings(model, source, attacks, cache, save_embeddings)
    return ModelScores(results, entries)


def _save_embeddings(model, source, attacks, cache, path) -> str:
    """Write every item set's embeddings (from ``cache``, where scoring put them) into the ``.safetensors`` ``path``;
    return the path as the report names it."""
    from rococo_eval.scoring.embeddingsfile import item_sets, write_embeddings_file

    sets = item_sets(source, attacks)
    write_embeddings_file(path, {name: cache.embeddings(model, items) for name, items in sets.items()},
                          {name: items.fingerprint for name, items in sets.items()}, model.name,
                          model.similarity)
    logger.info("embeddings of %d item sets saved to %s", len(sets), path)
    return str(path)
