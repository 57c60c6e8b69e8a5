"""RoCOCO's galleries as MTEB 2.x retrieval tasks, any rococo-eval model as an MTEB encoder, and MTEB's results
turned into rococo-eval's report.

:func:`mteb_tasks` returns one ``Any2AnyRetrieval`` task per gallery of an exported RoCOCO dataset (or a generated
benchmark): image-to-text on the clean gallery and on each text attack's, text-to-image on the clean gallery and on
each image attack's. ``mteb.evaluate(model, tasks=mteb_tasks(FOLDER))`` runs them like any MTEB task.

- **The metadata** is that of RoCOCO's tasks in MTEB's own form (:mod:`~rococo_eval.harness.mteb_upstream`, the
  files of a pull request to MTEB, docs/mteb.md) but for the data; their descriptive statistics are kept there too.
- **The data** is the dataset's rows, read with ``datasets.load_dataset`` (a local export or a Hub repository) in
  their order (:func:`~rococo_eval.data.dataset.load_queries_and_gallery`); nothing else is fetched. A query's
  relevant items are the clean items of its image (the rows' ``image_index``); an adversarial item has no relevance
  entry, so it is never relevant, as in RoCOCO.
- **The main score** is ``hit_rate_at_1``, COCO's and rococo-eval's Recall@1 as a fraction, which MTEB rounds to 5
  decimals (``rococo_recall@1`` holds every digit). MTEB's ``recall_at_1`` is the share of a query's relevant items
  found: with five correct captions it cannot pass 0.2.
- **MTEB's cache** keys results by the model's name and revision and the task's name, not by the dataset: with its
  default ``overwrite_strategy="only-missing"`` a second dataset (or a retrained model of the same name) would get
  the first one's results back. Pass ``overwrite_strategy="always"``, or one ``ResultCache`` folder per dataset.
- **RoCOCO's own numbers** are in the scores too, as percentages under ``rococo_`` names (:data:`SCORE_PREFIX`):
  ``rococo_recall@1``, ``rococo_clean_recall@1``, ``rococo_false_rate``, ``rococo_attack_success_rate``, ... made
  by the metric's own :func:`rococo_recall.summarize` from the ranking MTEB retrieved, so they agree with its hit
  rate query by query. :func:`~rococo_eval.harness.mteb_results.report_from_mteb` turns them into the report and
  table of ``rococo-eval run``.
- **Ties.** MTEB (pytrec_eval's rule, kept by MTEB's own metrics) ranks items of equal score by their id, the
  larger first. The ids here sort every adversarial item (``decoy-...``) above every clean one (``clean-...``), so
  a tie between an adversarial item and a correct one counts against the model, as rococo-eval's default
  ``ties="pessimistic"`` does. A tie between a correct and another clean item follows the rows' order (the later
  row first), where ``ties="pessimistic"`` puts the wrong one first: ``rococo_tied_queries`` counts those queries
  (:func:`tied_queries`). Where there are none, the numbers equal ``rococo_recall``'s pessimistic ones; otherwise the
  recalls lie between its ``"pessimistic"`` and ``"optimistic"`` results.
- **Scores.** MTEB scores with the encoder's ``similarity``. :func:`as_mteb_encoder` wraps a rococo-eval model
  (:func:`~rococo_eval.models.adapters.load_model`, or any object with ``encode_images`` and ``encode_texts``) so
  that its rows are made from its outputs as ``run`` makes them (unit rows for cosine) and its scores by the
  metric's block rule (:func:`rococo_recall.embedding_score_blocks`): ``run``'s scores for the same embeddings.

Example::

    import mteb
    from rococo_eval import as_mteb_encoder, load_model, mteb_tasks, report_from_mteb

    tasks = mteb_tasks("rococo-export")                   # 12 tasks on RoCOCO's export
    results = mteb.evaluate(as_mteb_encoder(load_model("open_clip:ViT-B-32/openai")), tasks=tasks,
                            overwrite_strategy="always")
    report = report_from_mteb(results, out="report")      # report.json, report.md, as `rococo-eval run` writes
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import datasets
import numpy as np
from pydantic import Field

try:
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata
    from mteb.models.abs_encoder import AbsEncoder
    from mteb.models.model_meta import ModelMeta
except ImportError as error:
    raise ImportError(f"{error.name or 'mteb'} is not installed: RoCOCO's MTEB tasks need the 'mteb' extra (pip "
                      "install '.[mteb]' in a checkout, 'rococo-eval[mteb]' once published)") from error

from rococo_eval.catalog import (
    CLEAN,
    IMAGE_TO_TEXT,
    SEEDS,
    TEXT_ATTACKS,
    TEXT_TO_IMAGE,
    direction_text,
    gallery_direction,
    gallery_key,
    select_attacks,
)
from rococo_eval.data.configs import CAPTIONS_CONFIG, IMAGES_CONFIG
from rococo_eval.data.dataset import load_queries_and_gallery
from rococo_eval.harness.mteb_results import SCORE_PREFIX, TIED_QUERIES, task_name
from rococo_eval.harness.mteb_upstream import STATISTICS_FOLDER, UPSTREAM_TASKS
from rococo_eval.models.similarity import finite_rows, similarity_named, similarity_of
from rococo_eval.version import __version__
from rococo_recall import DEFAULT_K, QueryRanks, embedding_score_blocks, summarize

logger = logging.getLogger(__name__)

MAIN_SCORE = "hit_rate_at_1"
MTEB_SIMILARITIES = ("cosine", "dot")  # the similarity_fn_name values that MTEB scores by
K_VALUES = (1, 5, 10, 100)  # MTEB's cut-offs; its top 100 per query decide RoCOCO's clean recalls at 1, 5 and 10
CLEAN_ID, ADVERSARIAL_ID = "clean-{:06d}", "decoy-{:06d}"  # "decoy" > "clean": MTEB ranks ties by id, larger first


class RococoRetrieval(AbsTaskRetrieval):
    """One RoCOCO gallery as an MTEB retrieval task: its queries, its gallery (originals, then adversarial items)
    and the relevant items of each query, read from the dataset's rows. Made by :func:`rococo_task` (MTEB reads a
    task's metadata from its class, so each gallery gets a subclass of its own, with the metadata of its upstream
    task: :func:`task_metadata`).
    """

    k_values = K_VALUES
    source_dataset: str
    attack: str
    direction: str
    load_kwargs: dict

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.adversarial_ids: frozenset[str] = frozenset()
        self.counts: dict[str, int] = {}

    @property
    def gallery_key(self) -> str:
        """The gallery's name in rococo-eval's reports (``rand_voca/image_to_text``)."""
        return gallery_key(self.attack, self.direction)

    def load_data(self, num_proc: Optional[int] = None, **kwargs: Any) -> None:
        """Read the queries and the gallery from the dataset, in its rows' order, as MTEB's corpus, queries and
        relevance judgements."""
        if self.data_loaded:
            return
        from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData

        queries, gallery = load_queries_and_gallery(self.source_dataset, self.attack, self.direction,
                                                    **self.load_kwargs)
        query_column, gallery_column = ("image", "caption") if self.direction == IMAGE_TO_TEXT else ("caption", "image")
        query_images = np.asarray(queries["image_index"][:])  # whole columns: a column iterated formats each row
        gallery_images = np.asarray(gallery["image_index"][:])
        adversarial = np.asarray(gallery["is_adversarial"][:], dtype=bool)
        gallery_ids = [(ADVERSARIAL_ID if is_adversarial else CLEAN_ID).format(row)
                       for row, is_adversarial in enumerate(adversarial)]
        query_ids = [f"query-{row:06d}" for row in range(len(queries))]
        correct = {}
        for row in np.flatnonzero(~adversarial):
            correct.setdefault(int(gallery_images[row]), []).append(gallery_ids[row])
        relevant = {query_id: {item: 1 for item in correct.get(int(image), ())}
                    for query_id, image in zip(query_ids, query_images)}
        missing = [query_id for query_id, items in relevant.items() if not items]
        if missing:
            raise ValueError(f"{self.metadata.name}: query {missing[0]!r} has no correct item in the gallery of "
                             f"{self.source_dataset!r} ({len(missing)} such queries): not a RoCOCO export")
        self.adversarial_ids = frozenset(item for item, is_adversarial in zip(gallery_ids, adversarial)
                                         if is_adversarial)
        self.counts = {"num_queries": len(queries), "num_gallery": len(gallery),
                       "num_adversarial": int(adversarial.sum())}
        modality = {"image": "image", "caption": "text"}
        self.dataset = {"default": {"test": RetrievalSplitData(
            queries=_content(queries, query_column, modality[query_column], query_ids),
            corpus=_content(gallery, gallery_column, modality[gallery_column], gallery_ids),
            relevant_docs=relevant, top_ranked=None)}}
        self.data_loaded = True

    def task_specific_scores(self, scores: dict, qrels: dict, results: dict, hf_split: str,
                             hf_subset: str) -> dict[str, float]:
        """RoCOCO's numbers (:data:`SCORE_PREFIX`) from the ranking MTEB retrieved (:func:`rococo_scores`)."""
        return rococo_scores(qrels, results, self.adversarial_ids, self.counts)


def rococo_scores(qrels: Mapping[str, Mapping[str, int]], results: Mapping[str, Mapping[str, float]],
                  adversarial_ids: Iterable[str], counts: Mapping[str, int],
                  k: Sequence[int] = DEFAULT_K) -> dict[str, float]:
    """RoCOCO's numbers of one gallery from MTEB's retrieved items: each query's rank among the whole gallery and among
    its clean items, in MTEB's order (score, then id, larger first), summarised by the metric's own
    :func:`rococo_recall.summarize`; percentages and counts, named with :data:`SCORE_PREFIX`.

    Raises:
        ValueError: a query whose retrieved items decide neither its correct item's clean rank nor that it lies beyond
            the largest ``k`` (too few clean items among them): MTEB's cut-off is too small for this gallery.

    Example:
        >>> qrels = {"q0": {"clean-000000": 1}, "q1": {"clean-000001": 1}}
        >>> results = {"q0": {"decoy-000002": 0.9, "clean-000000": 0.8, "clean-000001": 0.1},
        ...            "q1": {"clean-000001": 0.7, "decoy-000002": 0.7, "clean-000000": 0.2}}
        >>> scores = rococo_scores(qrels, results, {"decoy-000002"}, {"num_queries": 2, "num_gallery": 3,
        ...                        "num_adversarial": 1}, k=1)
        >>> scores["rococo_recall@1"], scores["rococo_clean_recall@1"], scores["rococo_attack_success_rate"]
        (0.0, 100.0, 100.0)
    """
    ks = (k,) if isinstance(k, int) else tuple(k)
    numbers = summarize(query_ranks(qrels, results, adversarial_ids, max(ks)), counts["num_gallery"],
                        counts["num_adversarial"], k=ks)
    numbers[TIED_QUERIES] = tied_queries(qrels, results, adversarial_ids)
    return {f"{SCORE_PREFIX}{name}": float(value) for name, value in numbers.items()}


def tied_queries(qrels: Mapping[str, Mapping[str, int]], results: Mapping[str, Mapping[str, float]],
                 adversarial_ids: Iterable[str]) -> int:
    """The queries whose first correct item ties with a wrong clean item among those retrieved: MTEB orders them by
    id, where ``run``'s pessimistic policy puts the wrong one first (an adversarial item is put first by both).

    Example:
        >>> tied_queries({"q": {"clean-000001": 1}}, {"q": {"clean-000001": 0.5, "clean-000000": 0.5}}, set())
        1
    """
    adversarial_ids = frozenset(adversarial_ids)
    count = 0
    for query_id, relevant in qrels.items():
        retrieved = results.get(query_id, {})
        correct = [score for item, score in retrieved.items() if relevant.get(item, 0) > 0]
        if correct and any(score == max(correct) for item, score in retrieved.items()
                           if relevant.get(item, 0) <= 0 and item not in adversarial_ids):
            count += 1
    return count


def query_ranks(qrels: Mapping[str, Mapping[str, int]], results: Mapping[str, Mapping[str, float]],
                adversarial_ids: Iterable[str], deepest: int) -> QueryRanks:
    """Each query's rank (of its first correct item) in the whole gallery and among its clean items, and whether its
    top item is adversarial, in MTEB's order (score, then id, larger first), queries in ``qrels``' order. A rank
    beyond the retrieved items is their number (at least ``deepest``, the largest cut-off asked).

    Raises:
        ValueError: a query whose retrieved items hold fewer than ``deepest`` clean items and none correct, so that its
            clean rank is unknown.
    """
    adversarial_ids = frozenset(adversarial_ids)
    ranks, clean_ranks, top_adversarial = [], [], []
    for query_id, relevant in qrels.items():
        ordered = [item for item, _ in sorted(results.get(query_id, {}).items(), key=lambda pair: (pair[1], pair[0]),
                                              reverse=True)]
        correct = {item for item, grade in relevant.items() if grade > 0}
        clean = [item for item in ordered if item not in adversarial_ids]
        ranks.append(next((rank for rank, item in enumerate(ordered) if item in correct), len(ordered)))
        clean_rank = next((rank for rank, item in enumerate(clean) if item in correct), None)
        if clean_rank is None and len(clean) < deepest:
            raise ValueError(f"query {query_id!r}: MTEB retrieved {len(ordered)} items and {len(clean)} clean ones, "
                             f"none correct: too few to tell its clean rank against k={deepest} (more than "
                             f"{len(ordered) - len(clean)} adversarial items above every clean one)")
        clean_ranks.append(len(clean) if clean_rank is None else clean_rank)
        top_adversarial.append(bool(ordered) and ordered[0] in adversarial_ids)
    return QueryRanks(rank=np.array(ranks, dtype=np.int64), clean_rank=np.array(clean_ranks, dtype=np.int64),
                      top1_adversarial=np.array(top_adversarial, dtype=bool), top_index=None, top_score=None,
                      best_correct_index=None, best_correct_score=None)


def rococo_task(dataset: str, attack: str, direction: Optional[str] = None, *, revision: Optional[str] = None,
                load_kwargs: Optional[Mapping[str, Any]] = None) -> RococoRetrieval:
    """One gallery of ``dataset`` as an MTEB task.

    Args:
        dataset: what ``datasets.load_dataset`` takes: an exported folder or a Hub repository.
        attack: ``"clean"`` or an attack config of the dataset.
        direction: ``"image_to_text"`` or ``"text_to_image"``; None: the attack's own (required for clean).
        revision: the Hub revision to load (recorded in MTEB's results); for a local folder, None records a hash
            of its files' names and sizes.
        load_kwargs: passed to ``datasets.load_dataset`` (``cache_dir``, ...); the rows are read when MTEB runs the
            task.

    Example:
        >>> task = rococo_task("rococo-export", "rand_voca")
        >>> task.metadata.name, task.metadata.main_score, task.gallery_key
        ('RoCOCORandVocaI2TRetrieval', 'hit_rate_at_1', 'rand_voca/image_to_text')
    """
    return _task(dataset, attack, gallery_direction(attack, direction), revision, revision or _local_revision(dataset),
                 load_kwargs)


def _task(dataset, attack: str, direction: str, revision: Optional[str], recorded: str,
          load_kwargs: Optional[Mapping[str, Any]]) -> RococoRetrieval:
    """:func:`rococo_task` with the revision that MTEB's results record (``recorded``) made by the caller."""
    metadata = task_metadata(attack, direction, str(dataset), recorded)
    task_class = type(metadata.name, (RococoRetrieval,), {
        "metadata": metadata, "source_dataset": str(dataset), "attack": attack, "direction": direction,
        "load_kwargs": dict(load_kwargs or {}, **({"revision": revision} if revision else {}))})
    return task_class()


def task_metadata(attack: str, direction: str, dataset: str, revision: str) -> TaskMetadata:
    """The MTEB metadata of one RoCOCO gallery, the upstream task's (:mod:`~rococo_eval.harness.mteb_upstream`) with
    ``dataset`` and ``revision`` in place of its Hub repository: its name (``RoCOCORandVocaI2TRetrieval``,
    :func:`~rococo_eval.harness.mteb_results.task_name`), what it measures, the paper, the licence and the main score
    (:data:`MAIN_SCORE`). A gallery RoCOCO does not hold (a generated benchmark's seed 7) takes the metadata of its
    method's first upstream task, with its own name (``RoCOCOMixSeed7T2IRetrieval``) and description.
    Its descriptive statistics are read from (and written to) the upstream folder."""
    name = task_name(attack, direction)
    fields = {"dataset": {"path": dataset, "revision": revision}}
    if name not in UPSTREAM_TASKS:
        fields.update(name=name, description=_description(attack, direction))
    return RococoTaskMetadata(**{**dict(_upstream_task(name, attack, direction).metadata), **fields})


class RococoTaskMetadata(TaskMetadata):
    """MTEB's metadata, with the descriptive statistics kept in ``statistics_folder`` (the upstream folder,
    :data:`~rococo_eval.harness.mteb_upstream.STATISTICS_FOLDER`) rather than in the installed ``mteb`` package, so
    that ``calculate_descriptive_statistics()`` writes them there."""

    statistics_folder: Path = Field(default=STATISTICS_FOLDER, exclude=True)

    @property
    def descriptive_stat_path(self) -> Path:
        return Path(self.statistics_folder) / f"{self.name}.json"


def _upstream_task(name: str, attack: str, direction: str) -> type[AbsTaskRetrieval]:
    """The upstream class of the gallery named ``name``; for a seed RoCOCO lacks (``mix_seed7``), its method's first
    seed's."""
    first_seed = task_name(f"{attack.split('_seed')[0]}_seed{SEEDS[0]}", direction)
    return UPSTREAM_TASKS.get(name) or UPSTREAM_TASKS[first_seed]


def _description(attack: str, direction: str) -> str:
    """What a gallery without an upstream task measures."""
    what = (f"the gallery with the {attack!r} attack's adversarial "
            f"{'captions (one word replaced)' if direction == IMAGE_TO_TEXT else 'images (mixed or patched)'}")
    return (f"RoCOCO {direction_text(direction)} retrieval on {what}. Adversarial items are never relevant; the main "
            "score is hit rate at 1 (Recall@1), and RoCOCO's own numbers (clean R@1, false rate, attack success "
            "rate) are the rococo_ scores.")


def mteb_tasks(dataset: str = "rococo-export", attacks: Union[str, Sequence[str]] = "all", *,
               revision: Optional[str] = None,
               load_kwargs: Optional[Mapping[str, Any]] = None) -> list[RococoRetrieval]:
    """Every gallery of ``dataset`` as an MTEB task: image-to-text clean and per text attack, text-to-image clean and
    per image attack, for the attacks the dataset holds (its configs) among ``attacks``.

    Args:
        dataset: an exported folder (``python rococo_dataset.py export``, or a benchmark of ``rococo-eval attack``)
            or a Hub repository, as ``datasets.load_dataset`` takes it.
        attacks: ``"all"``, ``"text"``, ``"image"``, or attack names (as ``rococo-eval run --attacks``); the clean
            galleries come with every choice.
        revision, load_kwargs: as for :func:`rococo_task`.
    """
    configs = datasets.get_dataset_config_names(str(dataset), **({"revision": revision} if revision else {}),
                                                **{key: value for key, value in (load_kwargs or {}).items()
                                                   if key == "cache_dir"})
    text = tuple(config for config in configs if config in TEXT_ATTACKS)
    image = tuple(config for config in configs if config not in text + (CAPTIONS_CONFIG, IMAGES_CONFIG))
    if not {CAPTIONS_CONFIG, IMAGES_CONFIG} <= set(configs):
        raise ValueError(f"`dataset` {str(dataset)!r} lacks the query configs {CAPTIONS_CONFIG!r} and "
                         f"{IMAGES_CONFIG!r} (its configs: {', '.join(configs)}): export it with them")
    chosen = select_attacks(attacks, text, image)
    galleries = [(CLEAN, IMAGE_TO_TEXT), *((attack, IMAGE_TO_TEXT) for attack in chosen if attack in text),
                 (CLEAN, TEXT_TO_IMAGE), *((attack, TEXT_TO_IMAGE) for attack in chosen if attack in image)]
    recorded = revision or _local_revision(dataset)  # the folder's files listed once for every task
    return [_task(dataset, attack, direction, revision, recorded, load_kwargs) for attack, direction in galleries]


class RococoMtebEncoder(AbsEncoder):
    """A rococo-eval model as an MTEB encoder: rows as ``run`` makes them, scores by the metric's block rule.

    Args:
        model: an object with ``encode_images(list of PIL images)`` and ``encode_texts(list of str)``, as
            :func:`~rococo_eval.models.adapters.load_model` returns or a custom model
            (:func:`~rococo_eval.models.custom.as_image_text_model`).
        name: the model's name in MTEB's results (default: the model's ``name``).
        similarity: how the model scores (``cosine`` or ``dot``; default: the model's own, else cosine).

    MTEB gives the model its items in batches of ``encode_kwargs["batch_size"]`` (32 by default) and strips the
    captions' surrounding spaces; a torch model may round its embeddings by batch in the last bits.
    """

    def __init__(self, model: Any, *, name: Optional[str] = None, similarity: Optional[str] = None) -> None:
        self.model = model
        self.name = name or getattr(model, "name", None) or type(model).__name__
        self.scored_by = similarity_named(similarity, repr(self.name)) if similarity else similarity_of(model)
        self.similarity_name = self.scored_by.name  # MTEB's name of it
        if self.similarity_name not in MTEB_SIMILARITIES:
            raise ValueError(f"model {self.name!r} scores by {self.similarity_name}, which MTEB's encoders cannot "
                             "express (a score of two pairs of vectors): evaluate it with `rococo-eval run`")
        self.mteb_model_meta = ModelMeta(
            loader=None, name=f"rococo-eval/{self.name}", revision=__version__, release_date=None, languages=None,
            n_parameters=None, memory_usage_mb=None, max_tokens=None, embed_dim=None, license=None,
            open_weights=None, public_training_code=None, public_training_data=None, framework=[],
            similarity_fn_name=self.similarity_name, use_instructions=False, training_datasets=None,
            modalities=["image", "text"])

    def encode(self, inputs, *, task_metadata: TaskMetadata, hf_split: str, hf_subset: str, prompt_type=None,
               **kwargs: Any) -> np.ndarray:
        """The rows of a batch stream of images or captions, made as ``run`` makes them."""
        side = "image" if "image" in inputs.dataset.features else "text"
        outputs = []
        for batch in inputs:
            values = self.model.encode_images(list(batch["image"])) if side == "image" else \
                self.model.encode_texts(list(batch["text"]))
            outputs.append(finite_rows(values, self.name, "encode_images" if side == "image" else "encode_texts"))
        return self.scored_by.rows(side, np.concatenate(outputs), self.name, f"{side} embeddings")

    def similarity(self, embeddings1, embeddings2):
        """The score matrix by the metric's block rule (:func:`rococo_recall.embedding_score_blocks`), as a tensor;
        each block is written into the matrix as it comes (RoCOCO's 5,000 x 50,000 chunk is 1 GB: held once)."""
        import torch

        queries, gallery = np.asarray(embeddings1), np.asarray(embeddings2)
        scores = None
        for start, block in embedding_score_blocks(queries, gallery):
            if scores is None:
                scores = np.empty((len(queries), block.shape[1]), dtype=block.dtype)
            scores[start:start + len(block)] = block
        return torch.from_numpy(scores)

    def similarity_pairwise(self, embeddings1, embeddings2):
        """The score of each pair of rows."""
        import torch

        return torch.from_numpy(np.einsum("ij,ij->i", np.asarray(embeddings1), np.asarray(embeddings2)))


def as_mteb_encoder(model: Any, *, name: Optional[str] = None, similarity: Optional[str] = None) -> RococoMtebEncoder:
    """Wrap a rococo-eval model (see :class:`RococoMtebEncoder`) for ``mteb.evaluate``."""
    return RococoMtebEncoder(model, name=name, similarity=similarity)


# --- helpers

def _content(rows: datasets.Dataset, column: str, modality: str, ids: list[str]) -> datasets.Dataset:
    """``rows``' ``column`` as MTEB's ``id`` and modality columns (``image`` or ``text``)."""
    content = rows.select_columns([column])
    if column != modality:
        content = content.rename_column(column, modality)
    return content.add_column("id", ids)


def _local_revision(dataset) -> str:
    """A local folder's files (names and sizes) hashed, so that MTEB's results tell two exports apart; ``main`` for a
    Hub repository."""
    folder = Path(str(dataset))
    if not folder.is_dir():
        return "main"
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(f"{path.relative_to(folder)}\0{path.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]
