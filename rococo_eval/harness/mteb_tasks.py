"""RoCOCO's galleries as MTEB 2.x retrieval tasks, any rococo-eval model as an MTEB encoder, and MTEB's results
turned into rococo-eval's report.

:func:`mteb_tasks` returns one ``Any2AnyRetrieval`` task per gallery of an exported RoCOCO dataset (or a generated
benchmark): image-to-text on the clean gallery and on each text attack's, text-to-image on the clean gallery and on
each image attack's. ``mteb.evaluate(model, tasks=mteb_tasks(FOLDER))`` runs them like any MTEB task.

- **The data** is the dataset's rows, read with ``datasets.load_dataset`` (a local export or a Hub repository) in
  their order (:func:`~rococo_eval.data.dataset.load_queries_and_gallery`); nothing else is fetched. A query's
  relevant items are the clean items of its image (the rows' ``image_index``); an adversarial item has no relevance
  entry, so it is never relevant, as in RoCOCO.
- **The main score** is ``hit_rate_at_1``, COCO's and rococo-eval's Recall@1 as a fraction. MTEB's ``recall_at_1``
  is the share of a query's relevant items found: with five correct captions it cannot pass 0.2.
- **RoCOCO's own numbers** are in the scores too, as percentages under ``rococo_`` names (:data:`SCORE_PREFIX`):
  ``rococo_recall@1``, ``rococo_clean_recall@1``, ``rococo_false_rate``, ``rococo_attack_success_rate``, ... made
  by the metric's own :func:`rococo_recall.summarize` from the ranking MTEB retrieved, so they agree with its hit
  rate query by query. :func:`report_from_mteb` turns them into the report and table of ``rococo-eval run``.
- **Ties.** MTEB (pytrec_eval's rule, kept by MTEB's own metrics) ranks items of equal score by their id, the
  larger first. The ids here sort every adversarial item (``decoy-...``) above every clean one (``clean-...``), so
  a tie between an adversarial item and a correct one counts against the model, as rococo-eval's default
  ``ties="pessimistic"`` does. A tie between a correct and another clean item follows the rows' order (the later
  row first). Without ties at the top, the numbers equal ``rococo_recall``'s under either policy; with them, they
  lie between its ``"pessimistic"`` and ``"optimistic"`` results.
- **Scores.** MTEB scores with the encoder's ``similarity``. :func:`as_mteb_encoder` wraps a rococo-eval model
  (:func:`~rococo_eval.models.adapters.load_model`, or any object with ``encode_images`` and ``encode_texts``) so
  that its rows are made as ``run`` makes them and its scores by the metric's block rule
  (:func:`rococo_recall.embedding_score_blocks`): the same scores as ``run``.

Example::

    import mteb
    from rococo_eval import as_mteb_encoder, load_model, mteb_tasks, report_from_mteb

    tasks = mteb_tasks("rococo-export")                   # 11 tasks on RoCOCO's export
    results = mteb.evaluate(as_mteb_encoder(load_model("open_clip:ViT-B-32/openai")), tasks=tasks)
    report = report_from_mteb(results, out="report")      # report.json, report.md, as `rococo-eval run` writes
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import datasets
import numpy as np
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta

from rococo_eval.catalog import (
    CLEAN,
    IMAGE_TO_TEXT,
    TEXT_ATTACKS,
    TEXT_TO_IMAGE,
    gallery_direction,
    gallery_key,
    select_attacks,
)
from rococo_eval.data.configs import CAPTIONS_CONFIG, IMAGES_CONFIG
from rococo_eval.data.dataset import load_queries_and_gallery
from rococo_eval.models.similarity import DEFAULT_SIMILARITY, check_similarity, score_vectors
from rococo_eval.reporting.report import summary_rows, write_report
from rococo_eval.results import GalleryResult
from rococo_eval.version import __version__
from rococo_recall import DEFAULT_K, QueryRanks, embedding_score_blocks, percentages, summarize

logger = logging.getLogger(__name__)

SCORE_PREFIX = "rococo_"  # RoCOCO's own numbers in an MTEB task's scores: rococo_recall@1, rococo_false_rate, ...
MAIN_SCORE = "hit_rate_at_1"
K_VALUES = (1, 5, 10, 100)  # MTEB's cut-offs; its top 100 per query decide RoCOCO's clean recalls at 1, 5 and 10
CLEAN_ID, ADVERSARIAL_ID = "clean-{:06d}", "decoy-{:06d}"  # "decoy" > "clean": MTEB ranks ties by id, larger first
TASK_NAME = "RoCOCO-{attack}-{short}"
_SHORT = {IMAGE_TO_TEXT: "I2T", TEXT_TO_IMAGE: "T2I"}
_CATEGORY = {IMAGE_TO_TEXT: "i2t", TEXT_TO_IMAGE: "t2i"}
_COUNTS = ("num_queries", "num_gallery", "num_adversarial")
CITATION = r"""@inproceedings{park2024rococo,
  author = {Park, Seulki and Um, Daeho and Yoon, Hajung and Chun, Sanghyuk and Yun, Sangdoo},
  title = {RoCOCO: Robustness Benchmark of MS-COCO to Stress-test Image-Text Matching Models},
  booktitle = {ECCV 2024 Workshop on Synthetic Data for Computer Vision},
  year = {2024},
  eprint = {2304.10727},
  archivePrefix = {arXiv},
}"""


class RococoRetrieval(AbsTaskRetrieval):
    """One RoCOCO gallery as an MTEB retrieval task: its queries, its gallery (originals, then adversarial items)
    and the relevant items of each query, read from the dataset's rows. Made by :func:`rococo_task` (MTEB reads a
    task's metadata from its class, so each gallery gets a subclass of its own).
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
        query_images = np.asarray(queries["image_index"])
        gallery_images = np.asarray(gallery["image_index"])
        adversarial = np.asarray(gallery["is_adversarial"], dtype=bool)
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
    return {f"{SCORE_PREFIX}{name}": float(value) for name, value in numbers.items()}


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
                             f"none correct: too few to tell its clean rank against k={deepest} (raise the task's "
                             "k_values)")
        clean_ranks.append(len(clean) if clean_rank is None else clean_rank)
        top_adversarial.append(bool(ordered) and ordered[0] in adversarial_ids)
    return QueryRanks(np.array(ranks, dtype=np.int64), np.array(clean_ranks, dtype=np.int64),
                      np.array(top_adversarial, dtype=bool), None, None, None, None)


def rococo_task(dataset: str, attack: str, direction: Optional[str] = None, *, revision: Optional[str] = None,
                load_kwargs: Optional[Mapping[str, Any]] = None) -> RococoRetrieval:
    """One gallery of ``dataset`` as an MTEB task.

    Args:
        dataset: what ``datasets.load_dataset`` takes: an exported folder or a Hub repository.
        attack: ``"clean"`` or an attack config of the dataset.
        direction: ``"image_to_text"`` or ``"text_to_image"``; None: the attack's own (required for clean).
        revision: the Hub revision to load (recorded in MTEB's results); for a local folder, None records a hash
            of its files' names and sizes.
        load_kwargs: passed to ``datasets.load_dataset`` (``cache_dir``, ...).
    """
    direction = gallery_direction(attack, direction)
    metadata = task_metadata(attack, direction, str(dataset), revision or _local_revision(dataset))
    task_class = type(metadata.name.replace("-", "_"), (RococoRetrieval,), {
        "metadata": metadata, "source_dataset": str(dataset), "attack": attack, "direction": direction,
        "load_kwargs": dict(load_kwargs or {}, **({"revision": revision} if revision else {}))})
    return task_class()


def task_metadata(attack: str, direction: str, dataset: str, revision: str) -> TaskMetadata:
    """The MTEB metadata of one RoCOCO gallery: its name (``RoCOCO-rand_voca-I2T``), what it measures, the paper,
    the licence and the main score (:data:`MAIN_SCORE`)."""
    clean = attack == CLEAN
    what = ("the clean gallery (no adversarial items)" if clean else
            f"the gallery with the {attack!r} attack's adversarial "
            f"{'captions (one word replaced)' if direction == IMAGE_TO_TEXT else 'images (mixed or patched)'}")
    return TaskMetadata(
        name=TASK_NAME.format(attack=attack, short=_SHORT[direction]),
        description=(f"RoCOCO {direction.replace('_', '-')} retrieval on {what}. Adversarial items are never "
                     "relevant; the main score is hit rate at 1 (Recall@1), and RoCOCO's own numbers (clean R@1, "
                     "false rate, attack success rate) are the rococo_ scores."),
        reference="https://arxiv.org/abs/2304.10727",
        dataset={"path": dataset, "revision": revision},
        type="Any2AnyRetrieval",
        category=_CATEGORY[direction],
        modalities=["image", "text"],
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        main_score=MAIN_SCORE,
        date=("2014-05-01", "2023-04-21"),  # COCO's 2014 images to RoCOCO's paper
        domains=["Encyclopaedic"],
        task_subtypes=["Image Text Retrieval"],
        license="mit",  # RoCOCO's annotation files; the COCO images are CC BY 4.0 (docs/dataset.md)
        annotations_creators="derived",
        dialect=[],
        sample_creation="created",
        bibtex_citation=CITATION,
    )


def mteb_tasks(dataset: str = "rococo-export", attacks: Union[str, Sequence[str]] = "all", *,
               revision: Optional[str] = None, **load_kwargs: Any) -> list[RococoRetrieval]:
    """Every gallery of ``dataset`` as an MTEB task: image-to-text clean and per text attack, text-to-image clean and
    per image attack, for the attacks the dataset holds (its configs) among ``attacks``.

    Args:
        dataset: an exported folder (``python rococo_dataset.py export``, or a benchmark of ``rococo-eval attack``)
            or a Hub repository, as ``datasets.load_dataset`` takes it.
        attacks: ``"all"``, ``"text"``, ``"image"``, or attack names (as ``rococo-eval run --attacks``); the clean
            galleries come with every choice.
        revision, load_kwargs: as for :func:`rococo_task`.
    """
    configs = datasets.get_dataset_config_names(str(dataset), **({"revision": revision} if revision else {}))
    text = tuple(config for config in configs if config in TEXT_ATTACKS)
    image = tuple(config for config in configs if config not in text + (CAPTIONS_CONFIG, IMAGES_CONFIG))
    if not {CAPTIONS_CONFIG, IMAGES_CONFIG} <= set(configs):
        raise ValueError(f"`dataset` {str(dataset)!r} lacks the query configs {CAPTIONS_CONFIG!r} and "
                         f"{IMAGES_CONFIG!r} (its configs: {', '.join(configs)}): export it with them")
    chosen = select_attacks(attacks, text, image)
    galleries = [(CLEAN, IMAGE_TO_TEXT), *((attack, IMAGE_TO_TEXT) for attack in chosen if attack in text),
                 (CLEAN, TEXT_TO_IMAGE), *((attack, TEXT_TO_IMAGE) for attack in chosen if attack in image)]
    return [rococo_task(dataset, attack, direction, revision=revision, load_kwargs=load_kwargs)
            for attack, direction in galleries]


class RococoMtebEncoder(AbsEncoder):
    """A rococo-eval model as an MTEB encoder: rows as ``run`` makes them, scores by the metric's block rule.

    Args:
        model: an object with ``encode_images(list of PIL images)`` and ``encode_texts(list of str)``, as
            :func:`~rococo_eval.models.adapters.load_model` returns or a custom model
            (:func:`~rococo_eval.models.custom.as_image_text_model`).
        name: the model's name in MTEB's results (default: the model's ``name``).
        similarity: how the model scores (``cosine`` or ``dot``; default: the model's own, else cosine).
        batch_size: items per call of the model.
    """

    def __init__(self, model: Any, name: Optional[str] = None, similarity: Optional[str] = None) -> None:
        self.model = model
        self.name = name or getattr(model, "name", None) or type(model).__name__
        self.similarity_name = similarity or getattr(model, "similarity", None) or DEFAULT_SIMILARITY
        check_similarity(self.similarity_name, repr(self.name))
        if self.similarity_name == "csd":
            raise ValueError(f"model {self.name!r} scores by csd, which MTEB's encoders cannot express (a score of "
                             "two pairs of vectors): evaluate it with `rococo-eval run`")
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
            outputs.append(np.asarray(values.detach().float().cpu().numpy() if hasattr(values, "detach") else values,
                                      dtype=np.float32))
        return score_vectors(self.similarity_name, side, np.concatenate(outputs), self.name, f"{side} embeddings")

    def similarity(self, embeddings1, embeddings2):
        """The score matrix by the metric's block rule (:func:`rococo_recall.embedding_score_blocks`), as a tensor."""
        import torch

        blocks = [block for _, block in embedding_score_blocks(np.asarray(embeddings1), np.asarray(embeddings2))]
        return torch.from_numpy(np.concatenate(blocks))

    def similarity_pairwise(self, embeddings1, embeddings2):
        """The score of each pair of rows."""
        import torch

        return torch.from_numpy(np.einsum("ij,ij->i", np.asarray(embeddings1), np.asarray(embeddings2)))


def as_mteb_encoder(model: Any, name: Optional[str] = None, similarity: Optional[str] = None) -> RococoMtebEncoder:
    """Wrap a rococo-eval model (see :class:`RococoMtebEncoder`) for ``mteb.evaluate``."""
    return RococoMtebEncoder(model, name, similarity)


def results_from_mteb(results: Any) -> dict[str, GalleryResult]:
    """rococo-eval's results by gallery key from MTEB's: a ``ModelResult`` (what ``mteb.evaluate`` returns), a list
    of ``TaskResult``, or a results folder (``<folder>/<model>/<revision>/RoCOCO-*.json``, as MTEB's ``ResultCache``
    writes it). Tasks that are not RoCOCO's are skipped.

    Raises:
        ValueError: no RoCOCO task in ``results``, or two results for one gallery (give one model's folder).
    """
    found: dict[str, GalleryResult] = {}
    for name, scores in _task_scores(results):
        attack, short = _parse_task_name(name)
        if attack is None:
            continue
        direction = IMAGE_TO_TEXT if short == "I2T" else TEXT_TO_IMAGE
        key = gallery_key(attack, direction)
        if key in found:
            raise ValueError(f"two results for {name!r} in the MTEB results given: give one model's results")
        metrics = {}
        for full, value in scores.items():
            if full.startswith(SCORE_PREFIX):
                name_ = full[len(SCORE_PREFIX):]
                metrics[name_] = int(value) if name_ in _COUNTS else (math.nan if value is None else float(value))
        if "recall@1" not in metrics or "num_queries" not in metrics:
            raise ValueError(f"MTEB's result of {name!r} has no {SCORE_PREFIX} scores: it was made by another task")
        found[key] = GalleryResult(exact_numbers(metrics, name))
    if not found:
        raise ValueError("the MTEB results given hold no RoCOCO task (RoCOCO-<attack>-I2T or -T2I)")
    return dict(sorted(found.items(), key=lambda item: (item[0].split("/")[0] != CLEAN, item[0])))


def exact_numbers(metrics: Mapping[str, float], where: str = "") -> dict:
    """RoCOCO's numbers with every digit, from the 6 decimals MTEB's results files keep: each percentage is a count
    of queries over ``num_queries`` (the attack success rate, over the clean hits at 1), so the counts are read back
    and the percentages made again by the metric's own :func:`rococo_recall.percentages`.

    Raises:
        ValueError: a number that no count of queries rounds to (the file was not made by these tasks).

    Example:
        >>> exact = exact_numbers({"recall@1": 33.333333, "r_mean": 33.333333, "false_rate": 0.0,
        ...                        "clean_recall@1": 66.666667, "clean_r_mean": 66.666667,
        ...                        "attack_success_rate": 50.0, "num_queries": 3, "num_gallery": 9,
        ...                        "num_adversarial": 3})
        >>> exact["recall@1"], exact["clean_recall@1"]
        (33.333333333333336, 66.66666666666667)
    """
    ks = tuple(int(name.split("@")[1]) for name in metrics if name.startswith("recall@"))
    total = int(metrics["num_queries"])

    def count(name: str, out_of: int) -> int:
        value = metrics[name]
        counted = round(value * out_of / 100) if out_of and not math.isnan(value) else 0
        if out_of and not math.isnan(value) and abs(100.0 * counted / out_of - value) > 1e-6 * max(1.0, abs(value)):
            raise ValueError(f"{where or 'results'}: {name} {value} is no count of {out_of} queries")
        return counted

    names = [*(f"recall@{k}" for k in ks), *(f"clean_recall@{k}" for k in ks), "false_rate"]
    counts = [count(name, total) for name in names]
    clean_hits = count("clean_recall@1", total)
    numbers = percentages(names + ["clean_top1", "attacked"],
                          counts + [clean_hits, count("attack_success_rate", clean_hits)], total, ks)
    return {name: numbers.get(name, value) for name, value in metrics.items()}


def report_from_mteb(results: Any, out=None, *, model_name: Optional[str] = None) -> dict:
    """rococo-eval's report of MTEB's results (:func:`results_from_mteb`): ``{"meta", "results", "summary"}`` as
    ``rococo-eval run`` returns it, written with ``out`` (``report.json``, ``report.md``, ``recall.png``,
    ``model-card.md``) so that the table and the Space's leaderboard read it as they read ``run``'s."""
    gallery_results = results_from_mteb(results)
    meta = {"model": model_name or _model_name(results), "scored_by": "mteb", "ties": "mteb (score, then item id)"}
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_report(gallery_results, Path(out), meta)
    metrics = {key: result.metrics for key, result in gallery_results.items()}
    return {"meta": meta, "results": metrics, "summary": summary_rows(metrics)}


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


def _parse_task_name(name: str) -> tuple[Optional[str], Optional[str]]:
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != "RoCOCO" or parts[2] not in ("I2T", "T2I"):
        return None, None
    return parts[1], parts[2]


def _task_scores(results: Any) -> Iterable[tuple[str, dict]]:
    """``(task name, test scores)`` of each task result in ``results`` (see :func:`results_from_mteb`)."""
    if isinstance(results, (str, Path)):
        folder = Path(results)
        if not folder.is_dir():
            raise ValueError(f"{str(results)!r} is not an MTEB results folder (no such folder)")
        for path in sorted(folder.rglob("RoCOCO-*.json")):
            document = json.loads(path.read_text(encoding="utf-8"))
            yield document["task_name"], _test_scores(document["scores"], path)
        return
    task_results = getattr(results, "task_results", results)
    for task_result in task_results:
        yield task_result.task_name, _test_scores(task_result.scores, task_result.task_name)


def _test_scores(scores: Mapping[str, list], where) -> dict:
    if "test" not in scores or len(scores["test"]) != 1:
        raise ValueError(f"{where}: expected one 'test' result, found splits {sorted(scores)}")
    return dict(scores["test"][0])


def _model_name(results: Any) -> Optional[str]:
    if isinstance(results, (str, Path)):
        names = {path.parent.parent.name for path in Path(results).rglob("RoCOCO-*.json")}
        return names.pop().replace("__", "/") if len(names) == 1 else None
    return getattr(results, "model_name", None)
