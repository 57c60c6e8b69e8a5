"""Score a model's galleries as a run does, into its report: its embedding cache, its scorer, what it saves beside
the report, and the report's ``meta``.

:func:`score_run` is the scoring half of :func:`rococo_eval.evaluation.evaluate_model` (which opens the source
around it and writes the report): it takes the model in (:func:`~rococo_eval.models.custom.as_image_text_model`),
selects the attacks, scores every gallery (:func:`~rococo_eval.scoring.galleries.score_model`, two stages for a
:class:`~rococo_eval.models.protocol.TwoStageModel`), gathers the validity warnings of every process of a launch, and
gives rank 0 the :class:`~rococo_eval.results.Report` (:func:`~rococo_eval.results.build_report`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence, Union

import rococo_eval.validity as validity
from rococo_eval.catalog import select_attacks
from rococo_eval.models.cache import DEFAULT_BATCH_SIZE, EmbeddingCache
from rococo_eval.models.custom import as_image_text_model
from rococo_eval.processes import ONE
from rococo_eval.results import Report, build_report
from rococo_eval.scoring.galleries import check_saving, score_model, scorer_for

logger = logging.getLogger(__name__)


def score_run(model, source, attacks: Union[str, Sequence[str]], cache_dir, *, name: Optional[str] = None,
              batch_size: int = DEFAULT_BATCH_SIZE, workers: int = 0, rerank_k: Optional[int] = None,
              save_scores=None, compact_scores: bool = False, save_embeddings=None, progress: bool = False,
              processes=ONE, meta: Optional[dict] = None) -> Optional[Report]:
    """Score ``model``'s galleries of ``attacks`` (of ``source``'s) with its embeddings cached in ``cache_dir``'s
    ``embeddings/``; on rank 0 of ``processes``, return their report; on the others (their share done), None.

    The arguments are :func:`~rococo_eval.evaluation.evaluate_model`'s, each checked once before any work
    (:func:`~rococo_eval.scoring.galleries.check_saving`): ``save_embeddings`` here, the other saving options by
    :func:`~rococo_eval.scoring.galleries.score_model`; progress bars are rank 0's only. The report's ``meta``: the
    model (name, fingerprint, similarity, precision, device kind), the attacks and the images folder, then ``meta``,
    then the scoring's entries: the validity ``warnings`` (when some), a re-ranker's ``rerank`` counts,
    ``scores_dir`` and ``compact_scores``, ``embeddings_file``.
    """
    model = as_image_text_model(model, name)
    attacks = select_attacks(attacks, source.text_attacks, source.image_attacks)
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
    device = model.device  # its kind: "cuda", whichever GPU a process of a launch took
    entries = {"model": model.name, "model_fingerprint": model.fingerprint, "similarity": model.similarity.name,
               "precision": model.precision, "device": str(device).split(":")[0] if device is not None else None,
               "attacks": list(attacks), "images_dir": str(source.images_dir), **(meta or {}),
               **validity.report_entries(warnings), **scorer.report_entries()}
    if save_scores is not None:
        entries["scores_dir"] = str(save_scores)
        if compact_scores:
            entries["compact_scores"] = True
    if save_embeddings is not None:
        entries["embeddings_file"] = _save_embeddings(model, source, attacks, cache, save_embeddings)
    return build_report(results, entries, source)


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
