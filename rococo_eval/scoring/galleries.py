"""A model's RoCOCO galleries: the item sets it embeds, and every gallery scored from those embeddings.

A model embeds four kinds of item sets once (through :class:`~rococo_eval.models.cache.EmbeddingCache`): the
25,010 ground-truth captions, the 25,000 adversarial captions of each text attack, the 5,000 test images and the
5,000 altered images of each image attack. Every gallery is then scored from those embeddings: the clean
embeddings are shared by all ten attacks.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

import numpy as np
from tqdm.auto import tqdm

from rococo_eval.attacks.alterations import AlteredImages
from rococo_eval.catalog import IMAGE_TO_TEXT, TEXT_ATTACKS, galleries, gallery_key
from rococo_eval.layout import gallery_vectors, recall_cutoffs
from rococo_eval.models.cache import EmbeddingCache, ItemSet, LazyImages, embeddings_of_all
from rococo_eval.models.protocol import TwoStageModel
from rococo_eval.models.similarity import COSINE, Similarity
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


def check_saving(model=None, *, save_scores=None, compact_scores: bool = False, save_embeddings=None) -> None:
    """The one check of what a run saves beside its report, each option checked once before any work on every path
    that runs a model (:func:`score_model` its ``save_scores`` and ``compact_scores``,
    :func:`~rococo_eval.scoring.run.score_run` its ``save_embeddings``), and by ``rococo-eval run`` before it loads
    one, with ``model`` None: only what needs no model.

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
    name, two_stage = model.name, isinstance(model, TwoStageModel)
    if compact_scores and not two_stage:
        raise ValueError(f"`compact_scores`: {name} is a dual encoder, and every score of its galleries is its own "
                         "(a compact file keeps a re-ranker's top k, the rest at -100): save its full matrices "
                         "(`save_scores` alone) or its embeddings (`save_embeddings`)")
    if save_embeddings is not None and two_stage:
        raise ValueError(f"`save_embeddings`: {name} is scored in two stages (ITC, then its ITM head), and an "
                         "embeddings file holds the first stage only: save its score matrices (`save_scores`) instead")


def score_gallery(layout, queries: np.ndarray, originals: np.ndarray, adversarial: Optional[np.ndarray] = None,
                  similarity: Similarity = COSINE, **metric_kwargs) -> GalleryResult:
    """Score one gallery from embeddings with the RoCOCO Recall metric, which ranks the scores block by block.

    Args:
        layout: the gallery's :class:`~rococo_eval.layout.GalleryLayout`; its ``gallery_rows`` index the
            concatenation of ``originals`` and ``adversarial``.
        queries: query embeddings in test order.
        originals: embeddings of the clean gallery items (ground-truth captions or test images).
        adversarial: embeddings of the altered items (None for a clean gallery).
        similarity: how the rows are scored (a :class:`~rococo_eval.models.similarity.Similarity`); a cosine model's
            are scored by the metric itself (``query_embeddings``), the others' by their own block rule
            (:meth:`~rococo_eval.models.similarity.Similarity.blocks`).
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
    if similarity.metric_scores_rows:
        return GalleryResult.of(rococo_recall(query_embeddings=queries, gallery_embeddings=gallery,
                                              **layout.metric_inputs(), **metric_kwargs), layout)
    return block_metric(_similarity_blocks(similarity, layout, queries, gallery), layout, **metric_kwargs)


def score_embedding_gallery(source, attack: str, direction: str, vectors, similarity: Similarity = COSINE,
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


@dataclass(frozen=True)
class ModelGallery:
    """One gallery of a model being scored: its layout (official order), the names of its query and pool item sets,
    and every item set with its embeddings (``item_sets`` and ``vectors``, by those names)."""

    source: object
    attack: str
    direction: str
    layout: object
    queries: str
    pool: tuple[str, ...]
    item_sets: Mapping[str, ItemSet]
    vectors: Mapping[str, np.ndarray]

    @property
    def key(self) -> str:
        """The gallery's key in the results (``"<attack>/<direction>"``)."""
        return gallery_key(self.attack, self.direction)

    def sides(self):
        """The reranker's :class:`~rococo_eval.scoring.rerank.Side` of the queries, and those of the pool."""
        from rococo_eval.scoring.rerank import Side

        sides = [Side(self.item_sets[name].name, self.item_sets[name].fingerprint, self.item_sets[name].items,
                      self.vectors[name]) for name in (self.queries, *self.pool)]
        return sides[0], sides[1:]


class DualEncoderScorer:
    """How a dual encoder's galleries are scored: from its embeddings, by its
    :class:`~rococo_eval.models.similarity.Similarity`; only rank 0 of a launch scores (the others only embed)."""

    on_every_process = False

    def __init__(self, model):
        self.model, self.similarity = model, model.similarity

    def check(self, save_scores=None, compact_scores: bool = False, processes=ONE) -> None:
        """:func:`check_saving` for this model (a dual encoder has no compact scores)."""
        check_saving(self.model, save_scores=save_scores, compact_scores=compact_scores)

    def score(self, gallery: ModelGallery, save_scores=None, compact_scores: bool = False) -> GalleryResult:
        """One gallery, its score matrix also saved (in blocks, as the metric ranks them) under ``save_scores``."""
        if save_scores is None:
            return score_embedding_gallery(gallery.source, gallery.attack, gallery.direction, gallery.vectors,
                                           self.similarity)
        from rococo_eval.io.savedscores import ScoreMatrixWriter, score_file_name

        layout = gallery.layout
        blocks = _embedding_blocks(layout, gallery.vectors[gallery.queries],
                                   [gallery.vectors[name] for name in gallery.pool], self.similarity)
        path = Path(save_scores) / score_file_name(gallery.attack, gallery.direction)
        with ScoreMatrixWriter(path, (layout.num_queries, layout.num_gallery), self.similarity.score_dtype) as writer:
            result = block_metric(blocks, layout, writer, k=recall_cutoffs(layout.num_gallery, gallery.key),
                                  per_query=True)
        logger.info("%s: scores saved to %s", gallery.key, path)
        return result

    def share(self, gallery: ModelGallery) -> None:
        """A process other than rank 0 has no share of a dual encoder's scoring."""

    def finish(self) -> None:
        """Nothing is held between galleries."""

    def report_entries(self) -> dict:
        """What the report's ``meta`` says of the scoring: nothing beyond the model's similarity."""
        return {}


class RerankScorer:
    """How a two-stage model's galleries are scored (:class:`~rococo_eval.models.protocol.TwoStageModel`: BLIP,
    BLIP-2): ranked by its ITC scores, each query's top candidates re-scored by its ITM head
    (:class:`~rococo_eval.scoring.rerank.Reranker`, whose ``processes`` share the ITM pairs)."""

    on_every_process = True

    def __init__(self, reranker):
        self.reranker = reranker

    def check(self, save_scores=None, compact_scores: bool = False, processes=ONE) -> None:
        """:func:`check_saving` (compact scores are a re-ranker's), and the reranker's processes are the run's."""
        check_saving(save_scores=save_scores, compact_scores=compact_scores)
        if self.reranker.processes != processes:
            raise ValueError(f"the reranker's processes ({self.reranker.processes}) are not score_model's "
                             f"({processes})")

    def score(self, gallery: ModelGallery, save_scores=None, compact_scores: bool = False) -> GalleryResult:
        """One gallery: its re-ranked candidates (saved, compact or whole, when asked), ranked by the metric as the
        full matrix, with the bounds of what the -100 block's order decides."""
        from rococo_recall import rococo_recall  # the metric (with numpy only): loaded where a gallery is scored
        from rococo_eval.io.savedscores import ScoreMatrixWriter, score_file_name, write_top_k
        from rococo_eval.scoring.rerank import FILL, full_blocks

        layout, attack, direction = gallery.layout, gallery.attack, gallery.direction
        columns, itc, logits = self.reranker.rerank(layout, *gallery.sides())
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
                                              num_gallery=layout.num_gallery, **layout.metric_inputs(),
                                              k=recall_cutoffs(layout.num_gallery, gallery.key), per_query=True),
                                layout)

    def share(self, gallery: ModelGallery) -> None:
        """This process's share of the gallery's ITM pairs, for rank 0 to score."""
        self.reranker.rerank(gallery.layout, *gallery.sides())

    def finish(self) -> None:
        self.reranker.finish()

    def report_entries(self) -> dict:
        """The report's ``rerank`` entry: k, and the ITM pairs computed and reused."""
        reranker = self.reranker
        logger.info("ITM pairs: %d computed, %d reused from the cache", reranker.computed, reranker.reused)
        return {"rerank": {"k": reranker.k, "itm_pairs_computed": reranker.computed,
                           "itm_pairs_reused": reranker.reused}}


def scorer_for(model, cache: EmbeddingCache, k: Optional[int] = None, processes=ONE):
    """The one choice of how ``model``'s galleries are scored: a :class:`RerankScorer` for a
    :class:`~rococo_eval.models.protocol.TwoStageModel` (its ITM pairs kept beside ``cache``'s embeddings, ``k``
    candidates per query, default 256), else a :class:`DualEncoderScorer`."""
    if not isinstance(model, TwoStageModel):
        return DualEncoderScorer(model)
    from rococo_eval.scoring.rerank import DEFAULT_CANDIDATES, Reranker

    return RerankScorer(Reranker(model, cache.root, k=DEFAULT_CANDIDATES if k is None else k,
                                 batch_size=cache.batch_size, workers=cache.workers, progress=cache.progress,
                                 processes=processes))


def score_model(model, source, attacks: Sequence[str], cache: EmbeddingCache, scorer=None,
                save_scores=None, processes=ONE, compact_scores: bool = False) -> dict[str, GalleryResult]:
    """Embed what ``attacks`` need (through ``cache``), then score both clean galleries and each attack.

    Args:
        model: an :class:`~rococo_eval.models.protocol.ImageTextModel` (``load_model``'s, or
            :func:`~rococo_eval.models.custom.as_image_text_model`'s).
        scorer: how its galleries are scored (default: :func:`scorer_for` the model): a :class:`DualEncoderScorer`,
            or a :class:`RerankScorer` whose embeddings rank each gallery and whose ITM head re-scores each query's
            top candidates.
        save_scores: a folder: each gallery's full score matrix is also written there, in the official order
            (:mod:`rococo_eval.io.savedscores`), and the metric reads the same blocks that are written.
        compact_scores: with ``save_scores``, a two-stage model's galleries are saved as compact files (each query's
            k re-ranked candidates and their scores; the rest score -100), which the metric ranks as the full
            matrices. A dual encoder's every score is its own, so it has none: refused.
        processes: the :class:`~rococo_eval.processes.Processes` of a launch of several (torchrun, SLURM): each
            embeds its share of every item set (:func:`~rococo_eval.models.cache.embeddings_of_all`) and, for a
            two-stage model, of every gallery's ITM pairs (the ``scorer``'s reranker must have the same
            ``processes``); rank 0 scores the galleries. ``cache`` must be a folder they all see.

    Returns:
        ``{"<attack>/<direction>": GalleryResult}`` for every gallery of :func:`galleries`, official order, with
        the per-query arrays that the report's failure analysis reads; on the processes other than rank 0,
        ``{}``. A two-stage model's galleries are ranked from their re-ranked candidates
        (``rococo_recall(top_columns=...)``), so a number that the order of the -100 block decides has its
        ``<name>_bounds``.
    """
    scorer = scorer or scorer_for(model, cache, processes=processes)
    scorer.check(save_scores=save_scores, compact_scores=compact_scores, processes=processes)
    item_sets = {"images": original_images(source), "captions": ground_truth_captions(source)}
    item_sets.update({attack: adversarial_captions(source, attack) if attack in TEXT_ATTACKS
                      else altered_images(source, attack, cache.workers) for attack in attacks})
    vectors = embeddings_of_all(cache, model, item_sets, processes)
    results = {}
    if not (processes.is_main or scorer.on_every_process):
        return results  # a dual encoder's work ends with its embeddings
    for attack, direction in tqdm(galleries(attacks), desc="scoring", unit="gallery", disable=not cache.progress,
                                  dynamic_ncols=True):
        query_key, original_key = ("images", "captions") if direction == IMAGE_TO_TEXT else ("captions", "images")
        gallery = ModelGallery(source, attack, direction, source.gallery(attack, direction, "official"), query_key,
                               (original_key,) + ((attack,) if attack in vectors else ()), item_sets, vectors)
        if not processes.is_main:
            scorer.share(gallery)
            continue
        results[gallery.key] = scorer.score(gallery, save_scores, compact_scores)
        logger.info("%s: R@1 %.2f", gallery.key, results[gallery.key].metrics["recall@1"])
    scorer.finish()
    return results


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
                      similarity: Similarity = COSINE) -> Iterator[tuple[int, np.ndarray]]:
    """A dual encoder's score matrix of one gallery, as ``(first row, rows)`` blocks.

    The blocks are those :func:`score_gallery` ranks (the metric's, :func:`rococo_recall.embedding_score_blocks`, for a
    cosine model), so that a saved matrix holds the bits it ranks.
    """
    yield from _similarity_blocks(similarity, layout, queries, gallery_vectors(pool, layout.gallery_rows))


def _similarity_blocks(similarity: Similarity, layout, queries: np.ndarray, gallery: np.ndarray):
    return similarity.blocks(queries, gallery, queries_are_images=layout.direction == IMAGE_TO_TEXT)


def _images_fingerprint(source) -> str:
    digest = hashlib.sha256()
    for name in source.image_files:
        digest.update(f"{name}:{(source.images_dir / name).stat().st_size};".encode())
    return digest.hexdigest()
