"""A model's RoCOCO galleries: the item sets it embeds, and every gallery scored from those embeddings.

A model embeds four kinds of item sets once (through :class:`~rococo_eval.models.cache.EmbeddingCache`): the
25,010 ground-truth captions, the 25,000 adversarial captions of each text attack, the 5,000 test images and the
5,000 altered images of each image attack. Every gallery is then scored from those embeddings: the clean
embeddings are shared by all ten attacks.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np
from tqdm.auto import tqdm

from rococo_eval.attacks.alterations import AlteredImages
from rococo_eval.catalog import IMAGE_TO_TEXT, TEXT_ATTACKS, galleries, gallery_key
from rococo_eval.layout import gallery_vectors, recall_cutoffs
from rococo_eval.models.cache import EmbeddingCache, ItemSet, LazyImages, embeddings_of_all
from rococo_eval.models.similarity import DEFAULT_SIMILARITY, SCORE_DTYPES, score_blocks, similarity_of
from rococo_eval.processes import ONE
from rococo_eval.results import GalleryResult

logger = logging.getLogger(__name__)


def ground_truth_captions(source) -> ItemSet:
    """The 25,010 ground-truth captions: image-to-text gallery and text-to-image queries."""
    return ItemSet("captions/ground_truth", "text", source.ground_truth_captions())


def adversarial_captions(source, attack: str) -> ItemSet:
    """The 25,000 adversarial captions of text attack ``attack``."""
    return ItemSet(f"captions/{attack}", "text", source.adversarial_captions(attack))


def original_images(source) -> ItemSet:
    """The 5,000 test images: image-to-text queries and text-to-image gallery. Fingerprint: names and sizes."""
    images = LazyImages(source.original_image, source.num_images, source.image_files)
    return ItemSet("images/original", "image", images, _images_fingerprint(source))


def altered_images(source, attack: str, workers: int = 0) -> ItemSet:
    """The 5,000 altered copies of image attack ``attack``, made from the test images when first read, each
    original decoded once (:class:`~rococo_eval.attacks.alterations.AlteredImages`, on ``workers`` threads)."""
    images = AlteredImages(source, attack, workers)
    digest = hashlib.sha256(_images_fingerprint(source).encode())
    for alteration in images.alterations:
        digest.update(repr(alteration).encode())
    return ItemSet(f"images/{attack}", "image", images, digest.hexdigest())


def gallery_layouts(source, attacks) -> dict:
    """The layout (official order) of both clean galleries and each attack's, by gallery key: what a report's
    failure analysis reads beside the results."""
    return {gallery_key(attack, direction): source.gallery(attack, direction, "official")
            for attack, direction in galleries(attacks)}


def check_saving(model=None, *, save_scores=None, compact_scores: bool = False, save_embeddings=None) -> None:
    """The one check of what a run saves beside its report, made before any work by every path that runs a model
    (:func:`score_model`, ``evaluate_model``, ``rococo-eval run`` on each process); with ``model`` None, only what
    needs no model.

    Raises:
        ValueError: ``compact_scores`` without ``save_scores``, or for a dual encoder (whose every score is its own);
            ``save_embeddings`` not a ``.safetensors`` file, without safetensors installed, or for a model scored in
            two stages (an embeddings file holds the first stage only).

    Example:
        >>> check_saving(compact_scores=True)
        Traceback (most recent call last):
        ...
        ValueError: `compact_scores` says how `save_scores` writes the score matrices: give `save_scores` too
    """
    if compact_scores and save_scores is None:
        raise ValueError("`compact_scores` says how `save_scores` writes the score matrices: give `save_scores` too")
    if save_embeddings is not None:
        if not str(save_embeddings).endswith(".safetensors"):
            raise ValueError(f"`save_embeddings` {str(save_embeddings)!r}: give a file ending in .safetensors")
        try:
            import safetensors  # noqa: F401  (checked before the work, not after it)
        except ImportError:
            raise ValueError("`save_embeddings` needs safetensors: pip install safetensors") from None
    if model is None:
        return
    name = getattr(model, "name", type(model).__name__)
    if compact_scores and not hasattr(model, "match"):
        raise ValueError(f"`compact_scores`: {name} is a dual encoder, and every score of its galleries is its own "
                         "(a compact file keeps a re-ranker's top k, the rest at -100): save its full matrices "
                         "(`save_scores` alone) or its embeddings (`save_embeddings`)")
    if save_embeddings is not None and hasattr(model, "match"):
        raise ValueError(f"`save_embeddings`: {name} is scored in two stages (ITC, then its ITM head), and an "
                         "embeddings file holds the first stage only: save its score matrices (`save_scores`) instead")


def score_gallery(layout, queries: np.ndarray, originals: np.ndarray, adversarial: Optional[np.ndarray] = None,
                  similarity: str = DEFAULT_SIMILARITY, **metric_kwargs) -> GalleryResult:
    """Score one gallery from embeddings with the RoCOCO Recall metric, which ranks the scores block by block.

    Args:
        layout: the gallery's :class:`~rococo_eval.layout.GalleryLayout`; its ``gallery_rows`` index the
            concatenation of ``originals`` and ``adversarial``.
        queries: query embeddings in test order.
        originals: embeddings of the clean gallery items (ground-truth captions or test images).
        adversarial: embeddings of the altered items (None for a clean gallery).
        similarity: how the rows are scored (:mod:`rococo_eval.models.similarity`); a cosine model's are made by the
            metric itself (``query_embeddings``), the others' by their own block rule
            (:func:`~rococo_eval.models.similarity.score_blocks`).
        metric_kwargs: passed to :func:`rococo_recall.rococo_recall` (``k``, ``ties``, ...).

    Example:
        >>> from rococo_eval.layout import gallery_layout
        >>> layout = gallery_layout("mix_seed1", "text_to_image", [1, 1])
        >>> eye = np.eye(2, dtype=np.float32)
        >>> result = score_gallery(layout, eye, eye, 0.5 * eye[::-1], k=1)
        >>> result.metrics["recall@1"], result.metrics["false_rate"]
        (100.0, 0.0)
    """
    from rococo_recall import rococo_recall  # the metric (with numpy only): loaded where a gallery is scored

    pool = [originals] if adversarial is None else [originals, adversarial]
    gallery = gallery_vectors(pool, layout.gallery_rows)
    if similarity == DEFAULT_SIMILARITY:
        return GalleryResult.of(rococo_recall(query_embeddings=queries, gallery_embeddings=gallery,
                                              **layout.metric_inputs(), **metric_kwargs), layout)
    return block_metric(_similarity_blocks(similarity, layout, queries, gallery), layout, **metric_kwargs)


def score_embedding_gallery(source, attack: str, direction: str, vectors, similarity: str = DEFAULT_SIMILARITY,
                            **metric_kwargs) -> GalleryResult:
    """One gallery of a dual encoder scored from its item sets' vectors (``vectors["images"]``,
    ``vectors["captions"]`` and, for an attack, ``vectors[attack]``) by its ``similarity``, at the cut-offs the
    gallery allows, with the per-query arrays: what ``run`` and an embeddings file
    (:mod:`rococo_eval.scoring.embeddingsfile`) both give."""
    query_key, original_key = ("images", "captions") if direction == IMAGE_TO_TEXT else ("captions", "images")
    layout = source.gallery(attack, direction, "official")
    return score_gallery(layout, vectors[query_key], vectors[original_key], vectors.get(attack), similarity,
                         k=recall_cutoffs(layout.num_gallery, gallery_key(attack, direction)), per_query=True,
                         **metric_kwargs)


def score_model(model, source, attacks: Sequence[str], cache: EmbeddingCache, reranker=None,
                save_scores=None, processes=ONE, compact_scores: bool = False) -> dict[str, GalleryResult]:
    """Embed what ``attacks`` need (through ``cache``), then score both clean galleries and each attack.

    Args:
        reranker: the :class:`~rococo_eval.scoring.rerank.Reranker` of a model scored in two stages (one with ``match``:
            BLIP, BLIP-2; default: one with k = 256): the embeddings rank each gallery, the model's ITM head
            re-scores each query's top candidates.
        save_scores: a folder: each gallery's full score matrix is also written there, in the official order
            (:mod:`rococo_eval.io.savedscores`), and the metric reads the same blocks that are written.
        compact_scores: with ``save_scores``, a two-stage model's galleries are saved as compact files (each query's
            k re-ranked candidates and their scores; the rest score -100), which the metric ranks as the full
            matrices. A dual encoder's every score is its own, so it has none: refused.
        processes: the :class:`~rococo_eval.processes.Processes` of a launch of several (torchrun, SLURM): each
            embeds its share of every item set (:func:`~rococo_eval.models.cache.embeddings_of_all`) and, for a
            two-stage model, of every gallery's ITM pairs (the ``reranker`` must have the same ``processes``);
            rank 0 scores the galleries. ``cache`` must be a folder they all see.

    Returns:
        ``{"<attack>/<direction>": GalleryResult}`` for every gallery of :func:`galleries`, official order, with
        the per-query arrays that the report's failure analysis reads; on the processes other than rank 0,
        ``{}``. A two-stage model's galleries are ranked from their re-ranked candidates
        (``rococo_recall(top_columns=...)``), so a number that the order of the -100 block decides has its
        ``<name>_bounds``.
    """
    check_saving(model if reranker is None else None, save_scores=save_scores, compact_scores=compact_scores)
    item_sets = {"images": original_images(source), "captions": ground_truth_captions(source)}
    item_sets.update({attack: adversarial_captions(source, attack) if attack in TEXT_ATTACKS
                      else altered_images(source, attack, cache.workers) for attack in attacks})
    vectors = embeddings_of_all(cache, model, item_sets, processes)
    if reranker is None and hasattr(model, "match"):  # BLIP, BLIP-2: always two stages
        from rococo_eval.scoring.rerank import Reranker

        reranker = Reranker(model, cache.root, batch_size=cache.batch_size, workers=cache.workers,
                            progress=cache.progress, processes=processes)
    if reranker is not None and reranker.processes != processes:
        raise ValueError(f"the reranker's processes ({reranker.processes}) are not score_model's ({processes})")
    results = {}
    if not processes.is_main and reranker is None:
        return results  # a dual encoder's work ends with its embeddings
    for attack, direction in tqdm(galleries(attacks), desc="scoring", unit="gallery", disable=not cache.progress,
                                  dynamic_ncols=True):
        query_key, original_key = ("images", "captions") if direction == IMAGE_TO_TEXT else ("captions", "images")
        pool_keys = [original_key] + ([attack] if attack in vectors else [])
        layout = source.gallery(attack, direction, "official")
        key = f"{attack}/{direction}"
        if not processes.is_main:  # this process's share of the gallery's ITM pairs, for rank 0 to score
            from rococo_eval.scoring.rerank import Side

            sides = [Side(item_sets[name].name, item_sets[name].fingerprint, item_sets[name].items, vectors[name])
                     for name in [query_key] + pool_keys]
            reranker.rerank(layout, sides[0], sides[1:])
            continue
        k = recall_cutoffs(layout.num_gallery, key)
        similarity = similarity_of(model)
        if reranker is None and save_scores is None:
            results[key] = score_embedding_gallery(source, attack, direction, vectors, similarity)
        elif reranker is None:
            from rococo_eval.io.savedscores import ScoreMatrixWriter, score_file_name

            blocks = _embedding_blocks(layout, vectors[query_key], [vectors[name] for name in pool_keys], similarity)
            path = Path(save_scores) / score_file_name(attack, direction)
            with ScoreMatrixWriter(path, (layout.num_queries, layout.num_gallery), SCORE_DTYPES[similarity]) as writer:
                results[key] = block_metric(blocks, layout, writer, k=k, per_query=True)
            logger.info("%s: scores saved to %s", key, path)
        else:
            from rococo_eval.scoring.rerank import Side

            sides = {name: Side(item_sets[name].name, item_sets[name].fingerprint, item_sets[name].items,
                                vectors[name]) for name in [query_key] + pool_keys}
            results[key] = _score_reranked(reranker, layout, sides[query_key], [sides[name] for name in pool_keys],
                                           k, save_scores, compact_scores, attack, direction)
        logger.info("%s: R@1 %.2f", key, results[key].metrics["recall@1"])
    if reranker is not None:
        reranker.finish()
    return results


def _score_reranked(reranker, layout, queries, pool, k, save_scores, compact_scores, attack,
                    direction) -> GalleryResult:
    """One gallery of a two-stage model: its re-ranked candidates (saved, compact or whole, when asked), ranked by
    the metric as the full matrix, with the bounds of what the -100 block's order decides."""
    from rococo_recall import rococo_recall  # the metric (with numpy only): loaded where a gallery is scored
    from rococo_eval.io.savedscores import ScoreMatrixWriter, score_file_name, write_top_k
    from rococo_eval.scoring.rerank import FILL, full_blocks

    columns, itc, logits = reranker.rerank(layout, queries, pool)
    top_scores = logits + itc  # the official score of a re-ranked candidate: ITM logit + ITC
    if save_scores is not None:
        if compact_scores:
            path = write_top_k(Path(save_scores) / score_file_name(attack, direction, columns.shape[1]), columns,
                               top_scores, FILL, layout.num_gallery)
        else:
            path = Path(save_scores) / score_file_name(attack, direction)
            with ScoreMatrixWriter(path, (layout.num_queries, layout.num_gallery)) as writer:
                for start, rows in full_blocks(columns, top_scores, layout.num_gallery):
                    writer.write(start, rows)
        logger.info("%s/%s: scores saved to %s", attack, direction, path)
    return GalleryResult.of(rococo_recall(top_columns=columns, top_scores=top_scores, fill=FILL,
                                          num_gallery=layout.num_gallery, **layout.metric_inputs(), k=k,
                                          per_query=True), layout)


def block_metric(blocks, layout, writer=None, ties: str = "pessimistic", **metric_kwargs) -> GalleryResult:
    """The RoCOCO Recall of a gallery given as ``(first row, rows)`` blocks; each block also goes to ``writer``.

    Example:
        >>> from rococo_eval.layout import gallery_layout
        >>> layout = gallery_layout("clean", "text_to_image", [1, 1])
        >>> block_metric([(0, np.eye(2, dtype=np.float32))], layout, k=1).metrics["recall@1"]
        100.0
    """
    from rococo_recall import RankAccumulator  # the metric (with numpy only): loaded where a gallery is scored

    references = layout.metric_inputs()["references"]
    accumulator = RankAccumulator(adversarial=layout.adversarial, ties=ties)
    for start, rows in blocks:
        accumulator.update(rows, references[start:start + len(rows)])
        if writer is not None:
            writer.write(start, rows)
    return GalleryResult.of(accumulator.compute(**metric_kwargs), layout)


def _embedding_blocks(layout, queries: np.ndarray, pool: Sequence[np.ndarray],
                      similarity: str = DEFAULT_SIMILARITY) -> Iterator[tuple[int, np.ndarray]]:
    """A dual encoder's score matrix of one gallery, as ``(first row, rows)`` blocks.

    The blocks are those :func:`score_gallery` ranks (the metric's, :func:`rococo_recall.embedding_score_blocks`, for a
    cosine model), so that a saved matrix holds the bits it ranks.
    """
    yield from _similarity_blocks(similarity, layout, queries, gallery_vectors(pool, layout.gallery_rows))


def _similarity_blocks(similarity: str, layout, queries: np.ndarray, gallery: np.ndarray):
    return score_blocks(similarity, queries, gallery, queries_are_images=layout.direction == IMAGE_TO_TEXT)


def _images_fingerprint(source) -> str:
    digest = hashlib.sha256()
    for name in source.image_files:
        digest.update(f"{name}:{(source.images_dir / name).stat().st_size};".encode())
    return digest.hexdigest()
