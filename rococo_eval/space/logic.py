"""What the Space does, without the page: detect layouts, score uploads, write outputs, list flipped queries, explore
the attacks, compare with published numbers.

Every function takes and returns plain values (rows, captions, images, dataclasses), so each is tested on its own;
:mod:`rococo_eval.space.views` turns them into HTML and tables, :mod:`rococo_eval.space.handlers` calls them for the
page. Each request carries its own data: nothing a user uploads or gets back is kept beyond the request.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

import rococo_eval.validity as validity
from rococo_eval.catalog import IMAGE_TO_TEXT
from rococo_eval.data.facts import NO_SOURCE, GalleryFacts
from rococo_eval.layout import caption_offsets
from rococo_eval.reporting import analysis, report
from rococo_eval.results import GalleryKey, GalleryResult, GalleryResults, Report, build_report
from rococo_eval.scoring.consistency import report_entries
from rococo_eval.scoring.embeddingsfile import is_embeddings_file, score_embeddings_file
from rococo_eval.scoring.plan import (
    PlanError,
    PlanPolicy,
    ScoreRequest,
    ScoringOptions,
    detect_file_layout,
    disagreements_of,
    plan_each,
    report_meta,
    score_each,
)
from rococo_recall import DEFAULT_K

logger = logging.getLogger(__name__)

IMAGES_DIR_ENV = "ROCOCO_IMAGES_DIR"
BENCHMARK_DIR_ENV = "ROCOCO_BENCHMARK_DIR"  # a folder made by `rococo-eval attack`, served instead of RoCOCO
LAYOUT_HEADERS = ["file", "attack", "direction", "order", "note"]
# what the page's override of a stated order that the scores contradict is called (evaluate_files' trust_given_order)
TRUST_ORDER_LABEL = "Score a stated order that the scores contradict"
MAX_BOOTSTRAP = 1000
FLIPPED_PAGE_SIZE = 10
ALL_GALLERIES = "all"
WORD_HEADERS = ["attack", "grouped by", "word", "images", "successes", "success rate (%)"]
IMAGE_ATTACK_HEADERS = ["group", "galleries", "clean-correct queries", "flipped", "success rate (%)",
                        "won by own altered image"]
_PRECISION_OF_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp32"}
_IMAGE_ATTACK_KEYS = ("group", "galleries", "clean_correct", "flipped", "success_rate", "own_image_wins")
_COMPARE_KEYS = ("model", "attack", "direction", "clean_recall@1", "recall@1", "recall@5", "recall@10",
                 "r_mean", "false_rate", "source")


@dataclass
class Failures:
    """What the failure analysis of one evaluation keeps: the results of the standard galleries scored (with their
    per-query arrays and layouts), and their by-word and by-method tables
    (:func:`rococo_eval.reporting.analysis.vulnerability`). Flipped queries are listed from these on demand
    (:func:`flipped_view`)."""

    results: GalleryResults
    by_word: dict
    image_attacks: list

    def __post_init__(self):
        self.results = GalleryResults(self.results)  # keys given as text are read as GalleryKeys

    def attacked(self) -> list[GalleryKey]:
        """The keys of the galleries with adversarial items, in evaluation order."""
        return [key for key, result in self.results.items() if result.layout.num_adversarial]


@dataclass
class Evaluation:
    """What one evaluation request produced.

    Attributes:
        report: the evaluation's report (:func:`~rococo_eval.results.build_report`): each gallery's result by key (a
            standard gallery's has its layout, a custom layout's has none), and what it records of the files and
            settings in ``meta`` (:func:`rococo_eval.scoring.plan.report_meta`).
        rows: the summary rows the page shows and the leaderboard takes, as dicts, each with its ``file``.
        message: what the page says of the evaluation.
        failures: what the page's failure analysis reads (None when no standard gallery was scored).
        analysis: the report's failure analysis (:func:`rococo_eval.reporting.analysis.analyse`), made once.
    """

    report: Report
    rows: list[dict]
    message: str
    failures: Failures | None = None
    analysis: dict | None = None

    @property
    def results(self) -> GalleryResults:
        """Each gallery's result by key (the report's)."""
        return self.report.results

    @property
    def meta(self) -> dict:
        """What the report records (the report's ``meta``)."""
        return self.report.meta


@dataclass
class FlippedView:
    """One page of flipped queries and the tables beside it (:func:`flipped_view`).

    Attributes:
        rows: the page's flipped queries (:func:`rococo_eval.reporting.analysis.flipped_queries` rows), shown by
            :func:`rococo_eval.space.views.flipped_html`; None before any attacked gallery is evaluated (no page).
        note: what the page shows, and of how many.
        csv: every flipped query of the filter, as CSV text.
        words: the by-word rows (:data:`WORD_HEADERS`).
        image_attacks: the by-method and by-seed rows (:data:`IMAGE_ATTACK_HEADERS`).
        words_note: what the by-word table shows, or why it is empty (:func:`words_note`).
    """

    rows: list | None
    note: str
    csv: str
    words: list
    image_attacks: list
    words_note: str = ""


@dataclass
class Exploration:
    """One test image of the Explore tab (:func:`explore`).

    Attributes:
        ground_truth: its ground-truth captions.
        altered: each text attack's captions made from them, by attack (shown by
            :func:`rococo_eval.space.views.caption_table_html`).
        images: ``(PIL image, label)`` pairs: the original, then each image attack's altered copy (empty when
            the images are not available).
        note: which image it is, and why its images are missing when they are.
    """

    ground_truth: list
    altered: dict
    images: list
    note: str


def facts_and_problem(images_dir: str | os.PathLike | None = None,
                      benchmark: str | os.PathLike | None = None) -> tuple[GalleryFacts, str]:
    """Open the RoCOCO annotations (and images, when ``images_dir`` or ``$ROCOCO_IMAGES_DIR`` is set), or the
    benchmark folder ``benchmark`` (default ``$ROCOCO_BENCHMARK_DIR``) made by ``rococo-eval attack``: the Space's
    start.

    Returns ``(facts, problem)``: the opened source's :class:`~rococo_eval.data.facts.GalleryFacts` (everything the
    page asks of it), or :data:`~rococo_eval.data.facts.NO_SOURCE`, and what went wrong, for the page.
    """
    from rococo_eval.data.source import ImageFolderError, open_source

    images_dir = images_dir or os.environ.get(IMAGES_DIR_ENV) or None
    benchmark = benchmark or os.environ.get(BENCHMARK_DIR_ENV) or None
    try:
        return GalleryFacts.of(open_source(images_dir=images_dir, benchmark=benchmark)), ""
    except ImageFolderError as error:
        logger.warning("images unavailable: %s", error)
        problem = f"images unavailable: {error}"
    except (OSError, ValueError) as error:
        logger.warning("RoCOCO annotations unavailable: %s", error)
        return NO_SOURCE, str(error)
    try:
        return GalleryFacts.of(open_source(benchmark=benchmark)), problem
    except (OSError, ValueError) as error:
        return NO_SOURCE, str(error)


def detect_layouts(paths: Sequence[str] | None, facts: GalleryFacts = NO_SOURCE) -> list[list[str]]:
    """One layout row (``LAYOUT_HEADERS``) per uploaded file: detected, or blank with why; an embeddings file's row
    says what it is (:func:`embeddings_note`, whether the set's images are at hand).

    ``facts`` are what the Space's image-text set says of its galleries (its caption counts and the attacks a file
    may be of; :class:`~rococo_eval.data.facts.GalleryFacts`). The shape and name come from the header; the order
    of an attacked image-to-text gallery comes from the scores when they clearly show it
    (:func:`rococo_eval.detection.decide_order`), else it stays blank and the note asks for it.
    """
    rows = []
    for path in paths or []:
        name = Path(path).name
        if is_embeddings_file(path):
            rows.append([name, "", "", "", embeddings_note(name, facts)])
            continue
        try:
            _, choice = detect_file_layout(ScoreRequest(path, name), facts, custom=True)
            rows.append([name, choice.attack, choice.direction, choice.order, choice.note])
        except ValueError as error:
            rows.append([name, "", "", "", str(error)])
    return rows


def choose_order(paths: Sequence[str] | None, layouts, attack: str, order: str,
                 facts: GalleryFacts = NO_SOURCE) -> list[list[str]]:
    """The layout table (rows ``LAYOUT_HEADERS``) with ``order`` chosen for the image-to-text gallery of the text
    attack ``attack``: its row is detected again with that order, so that its note says what the scores show of it
    (and no longer asks for an order); a problem becomes the note. The other rows are kept as they are.

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> path = Path(tempfile.mkdtemp()) / "m_danger.npy"
        >>> np.save(path, np.zeros((3, 31), dtype=np.float32))
        >>> table = [["m_danger.npy", "danger", "image_to_text", "", "…: choose the order, …"]]
        >>> row = choose_order([str(path)], table, "danger", "dataset", GalleryFacts([5, 6, 5]))[0]
        >>> row[3], row[4].split(";")[0]
        ('dataset', 'danger image-to-text gallery in the dataset order (shape (3, 31)')
        >>> row[4].split(";")[1]
        ' attack named in the file name, direction read from the shape, order given)'
    """
    by_name = {Path(path).name: path for path in paths or []}
    rows = [(cells + [""] * len(LAYOUT_HEADERS))[:len(LAYOUT_HEADERS)] for cells in
            (["" if cell is None else str(cell) for cell in row] for row in _table_values(layouts))]
    for row in rows:
        if row[1] != attack or row[2] not in ("", IMAGE_TO_TEXT) or row[0] not in by_name:
            continue
        try:
            _, choice = detect_file_layout(ScoreRequest(by_name[row[0]], row[0], attack, IMAGE_TO_TEXT, order),
                                           facts, custom=True)
            row[1:] = [choice.attack, choice.direction, choice.order, choice.note]
        except ValueError as error:
            row[2:] = [IMAGE_TO_TEXT, order, str(error)]
    return rows


def evaluate_files(paths: Sequence[str] | None, layouts=None, references: str | None = None,
                   adversarial: str | None = None, *, facts: GalleryFacts = NO_SOURCE, ties: str = "pessimistic",
                   bootstrap: int = 0, trust_given_order: bool = False) -> Evaluation:
    """Score every uploaded file that can be scored on its layout; the message names every other file and its problem
    (one bad file does not hide the others' results), and one ``ValueError`` lists them all when none can be scored.

    ``layouts`` are rows ``[file, attack, direction, order, ...]``; a file without a row, or blank cells,
    gets the detected layout. The files go through the one planner and scorer of :mod:`rococo_eval.scoring.plan`
    (as ``rococo-eval score`` does), with custom layouts allowed: ``references`` and ``adversarial`` are files for
    custom layouts whose score file does not carry its own; ``facts`` are what the Space's image-text set says of
    its galleries (:class:`~rococo_eval.data.facts.GalleryFacts`: its caption counts, the attacks a file may be of,
    its captions and images when at hand). The metric's per-query arrays of the standard galleries go to the failure
    analysis (``Evaluation.failures``, its by-word tables from the set's captions).

    An order stated in the table (or in a file's name) that the file's scores clearly contradict is refused with the
    evidence, unless ``trust_given_order`` (the page's :data:`TRUST_ORDER_LABEL`). Files whose clean numbers
    disagree (:mod:`rococo_eval.scoring.consistency`) are scored, and the message and the report's ``meta`` say so
    (as they say every validity warning, :mod:`rococo_eval.validity`, in ``meta["warnings"]``);
    their rows never reach the leaderboard (:meth:`rococo_eval.board.leaderboard.Leaderboard.submit` refuses them).
    The message says how long reading and scoring the files took. Rows of a re-ranker's files carry
    ``reranked: True``, so that the leaderboard does not compare their clean parts.
    """
    if not paths:
        raise ValueError("upload at least one score file (.npy, .npz or .safetensors)")
    started = time.perf_counter()
    options = ScoringOptions(ties, bootstrap, max_bootstrap=MAX_BOOTSTRAP)
    if any(is_embeddings_file(path) for path in paths):
        return evaluate_embeddings_file(paths, facts, options)
    names = [Path(path).name for path in paths]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"several uploads are named {', '.join(repeated)}: rename them so each has its own layout")
    chosen = _layout_rows(layouts, names)
    requests = [ScoreRequest(path, name, *(chosen.get(name, []) + ["", "", ""])[:3])
                for path, name in zip(paths, names)]
    with validity.recorded() as warnings:
        plans, problems = plan_each(requests, facts,
                                    PlanPolicy(custom=True, references=references, adversarial=adversarial,
                                               ask_order=_ask_order_in_table, read_off_level=logging.INFO,
                                               trust_given_order=trust_given_order, fix_order=_fix_order_in_table))
        scored, refused = score_each(plans, options)
        problems += refused
        if not scored:
            raise PlanError(problems)
        plans = [planned for planned in plans if planned.key in scored]
        disagreements = disagreements_of(plans, scored)
    seconds = time.perf_counter() - started
    meta = {**report_meta(plans, options), **report_entries(disagreements), **validity.report_entries(warnings)}
    evaluated = build_report(scored, meta, facts.source)
    files = {planned.key: planned.request.name for planned in plans}
    rows = [{**row.to_dict(), "file": files.get(row.key, ""),
             **({"reranked": True} if row.key in scored and scored[row.key].reranked else {})}
            for row in evaluated.summary]
    message = _scored_message(plans, warnings, bool(disagreements), problems,
                              f"in {seconds:.2f} s, ties {ties}, bootstrap {bootstrap}")
    return Evaluation(evaluated, rows, message, *_failures(evaluated.results, facts))


def _scored_message(plans, warnings: Sequence[str], disagree: bool, problems: Sequence[str], how: str) -> str:
    """What the page says of an evaluation of score files: each file scored (``how``: the time and the settings) and
    how its layout was read, the validity warnings (:mod:`rococo_eval.validity`: files that disagree, whether they
    ``disagree``, a check that could not run, an order scored against its scores), and the files not scored with
    why."""
    lines = [f"- `{planned.request.name}` ({planned.info.shape[0]} x {planned.info.shape[1]}, {planned.info.dtype}"
             + (f", compact: top {planned.info.candidates} per query" if planned.info.is_compact else "") + "):"
             f" {planned.choice.note}" + _cutoffs_note(planned.cutoffs, planned.info.shape[1]) for planned in plans]
    message = f"Scored {len(plans)} file(s) {how}:\n" + "\n".join(lines)
    if warnings:
        message += ("\n\nWarnings about these numbers (the report records them too):\n"
                    + "\n".join(f"- {warning}" for warning in warnings))
    if disagree:
        message += ("\n\nThe files disagree, so they are not one model's files saved alike: the leaderboard refuses "
                    "them.")
    if problems:
        message += f"\n\nNot scored ({len(problems)}):\n" + "\n".join(f"- {problem}" for problem in problems)
    return message


def evaluate_embeddings_file(paths: Sequence[str], facts: GalleryFacts, options: ScoringOptions) -> Evaluation:
    """Score an uploaded embeddings file (:mod:`rococo_eval.scoring.embeddingsfile`): every gallery it covers, as
    ``run`` scores them. It needs the benchmark's images, whose fingerprint the file's must match."""
    if not facts.has_images:
        raise ValueError("this Space has no images, so it cannot check an embeddings file's fingerprints: it scores "
                         f"embeddings files when {IMAGES_DIR_ENV} (or {BENCHMARK_DIR_ENV}) names the images")
    started = time.perf_counter()
    name = Path(paths[0]).name
    scored, meta, metadata = score_embeddings_file(paths, facts.source, options, name)
    evaluated = build_report(scored, meta, facts.source)
    rows = [{**row.to_dict(), "file": name} for row in evaluated.summary]
    message = (f"Scored the embeddings file `{name}` ({metadata.get('model')}, dimension {metadata.get('dimension')}): "
               f"{len(scored)} galleries in {time.perf_counter() - started:.2f} s, ties {options.ties}, "
               f"bootstrap {options.bootstrap}.")
    return Evaluation(evaluated, rows, message, *_failures(evaluated.results, facts))


def _failures(results: GalleryResults, facts: GalleryFacts) -> tuple[Failures | None, dict | None]:
    """The failure analysis of the standard galleries among ``results``, made once for the page and the report."""
    standard = results.analysable()
    if not standard:
        return None, None
    found = analysis.analyse(standard, facts)
    return Failures(standard, found["by_word"], found["image_attacks"]), found


def _ask_order_in_table(choice, request) -> str:
    """How the Space asks for an order the file does not show: in its list under the layout table."""
    return "choose it from its order list under the layout table"


def _fix_order_in_table(choice, request) -> str:
    """How the Space says to fix a stated order that the scores contradict: the other order, or the override."""
    return (f"choose {choice.order_decision.favoured} from its order list under the layout table, or tick "
            f"“{TRUST_ORDER_LABEL}” to score it in the {choice.order} order all the same")


def _cutoffs_note(cutoffs, num_gallery: int) -> str:
    """What the page says of a gallery too small for every default Recall@K.

    Example:
        >>> _cutoffs_note((1, 5), 6)
        ' Scored at R@1 and R@5 only: the gallery has 6 items.'
    """
    if tuple(cutoffs) == DEFAULT_K:
        return ""
    return f" Scored at {' and '.join(f'R@{k}' for k in cutoffs)} only: the gallery has {num_gallery} items."


def write_outputs(evaluation: Evaluation, folder: Path) -> tuple[Path, Path]:
    """Write the report of one evaluation into ``folder``: the same ``report.json`` (and ``recall.png``) as
    ``rococo-eval score`` writes for the same files (:func:`rococo_eval.reporting.report.write_report`; its model
    card names the evaluation's source)."""
    paths = report.write_report(evaluation.report, folder, analysis=evaluation.analysis)
    return paths["json"], paths["chart"]


def flipped_view(failures: Failures | None, facts: GalleryFacts = NO_SOURCE, gallery: str = ALL_GALLERIES,
                 page: int = 1, min_count: int = analysis.DEFAULT_MIN_COUNT,
                 page_size: int = FLIPPED_PAGE_SIZE) -> FlippedView:
    """One page of the queries the attacks flipped, with the by-word and by-method tables.

    Args:
        failures: the evaluation's :class:`Failures` (None: nothing evaluated yet).
        facts: the Space's image-text set: the captions the rows quote (:data:`~rococo_eval.data.facts.NO_SOURCE`:
            indices only).
        gallery: ``"all"`` or one attacked gallery's key (``"rand_voca/image_to_text"``): the filter of the
            page, of the CSV and of the by-word table.
        page: 1-based page of ``page_size`` flipped queries; each gallery's are in margin order, galleries in
            evaluation order.
        min_count: the fewest clean-correct images a word needs to enter the by-word table.

    Returns:
        a :class:`FlippedView`: the page's rows (with their captions when ``facts`` has them), a note saying what
        is shown, every flipped query of the filter as CSV, the by-word rows (:data:`WORD_HEADERS`) and the
        by-method rows (:data:`IMAGE_ATTACK_HEADERS`).

    Raises:
        ValueError: ``gallery`` is not among the choices, ``page`` is out of range, or ``min_count`` < 1.

    Example:
        >>> import numpy as np
        >>> from rococo_eval.layout import gallery_layout
        >>> layout = gallery_layout("mix_seed1", "text_to_image", [1, 1])
        >>> per_query = {"rank": np.array([1, 0]), "clean_rank": np.array([0, 0]), "top_index": np.array([2, 1]),
        ...              "top_score": np.array([0.75, 0.8]), "best_correct_index": np.array([0, 1]),
        ...              "best_correct_score": np.array([0.5, 0.8])}
        >>> key = "mix_seed1/text_to_image"
        >>> view = flipped_view(Failures({key: GalleryResult({}, per_query, layout)}, {}, []))
        >>> [(row["attack"], row["direction"], row["query"], row["margin"]) for row in view.rows]
        [('mix_seed1', 'text_to_image', 0, 0.25)]
        >>> view.note
        '1 flipped queries (mix_seed1/text_to_image: 1); page 1 of 1, rows 1–1, largest margin first.'
        >>> view.csv.splitlines()[1][:36]
        'mix_seed1,text_to_image,0,0.25,0.75,'
    """
    if failures is None or not failures.attacked():
        empty = "Evaluate score files of attacked galleries first: their flipped queries show here."
        return FlippedView(None, empty, analysis.flipped_csv([]), [], [], words_note(None, min_count))
    choices = [ALL_GALLERIES] + failures.attacked()
    if gallery not in choices:
        raise ValueError(f"`gallery` must be one of {', '.join(choices)}, got {gallery!r}")
    keys = failures.attacked() if gallery == ALL_GALLERIES else [GalleryKey.parse(gallery)]
    results = failures.results
    rows = [row for key in keys for row in analysis.flipped_queries(results[key].per_query, results[key].layout,
                                                                    key.attack, facts)]
    pages = max(1, -(-len(rows) // page_size))
    if isinstance(page, bool) or not isinstance(page, int) or not 1 <= page <= pages:
        raise ValueError(f"`page` must be a whole number from 1 to {pages}, got {page!r}")
    shown = rows[(page - 1) * page_size:page * page_size]
    counts = ", ".join(f"{key}: {int(analysis.flipped_mask(results[key].per_query).sum())}" for key in keys)
    note = (f"{len(rows)} flipped queries ({counts}); page {page} of {pages}, rows {(page - 1) * page_size + 1}–"
            f"{(page - 1) * page_size + len(shown)}, largest margin first." if rows else
            f"No query was flipped ({counts}).")
    attacks = {key.attack for key in keys}
    words = [[attack, kind, row["word"], row["images"], row["successes"], row["success_rate"]]
             for attack, table in failures.by_word.items() if attack in attacks
             for kind in ("replaced", "replacement") for row in analysis.most_damaging(table[kind], min_count)]
    methods = [[row[name] for name in _IMAGE_ATTACK_KEYS] for row in failures.image_attacks]
    by_word = {attack: tables for attack, tables in failures.by_word.items() if attack in attacks}
    return FlippedView(shown, note, analysis.flipped_csv(rows), words, methods, words_note(by_word, min_count))


def words_note(by_word: dict | None, min_count: int = analysis.DEFAULT_MIN_COUNT) -> str:
    """What the by-word table shows (``by_word``: each text attack's tables, as
    :func:`rococo_eval.reporting.analysis.vulnerability` makes them), or why it is empty.

    Example:
        >>> tables = {"danger": {"replaced": [{"word": "dog", "images": 12, "successes": 3, "success_rate": 25.0}],
        ...                      "replacement": []}}
        >>> words_note(tables, 20)
        'No word has 20 clean-correct images yet: the most is 12 (dog). Lower the fewest images a word needs (above) \
to list words with fewer; rates over few images vary a lot.'
        >>> words_note({}, 20)
        'By word: no text attack (image-to-text) is among the galleries shown; words are what text attacks replace.'
    """
    if by_word is None:
        return "Evaluate score files of text attacks first: the words they replaced show here."
    if not by_word:
        return ("By word: no text attack (image-to-text) is among the galleries shown; words are what text attacks "
                "replace.")
    counted = [(row["images"], row["word"]) for tables in by_word.values() for kind in ("replaced", "replacement")
               for row in tables.get(kind, [])]
    if not counted:
        return "No word was replaced in an image that the model got right on the clean gallery."
    most, word = max(counted, key=lambda item: (item[0], [-ord(char) for char in item[1]]))
    if most < min_count:
        return (f"No word has {min_count} clean-correct images yet: the most is {most} ({word}). Lower the fewest "
                "images a word needs (above) to list words with fewer; rates over few images vary a lot.")
    return (f"Words replaced in at least {min_count} clean-correct images, highest success rate first (up to 15 per "
            "attack and grouping).")



def embeddings_note(name: str, facts: GalleryFacts = NO_SOURCE) -> str:
    """What the layout table says of an uploaded embeddings file (:mod:`rococo_eval.scoring.embeddingsfile`): what it
    is, and that scoring it needs the images (which the set of ``facts`` may lack).

    Example:
        >>> note = embeddings_note("clip.safetensors")  # no annotations: no images
        >>> note.startswith("clip.safetensors: an embeddings file"), note.endswith("where the images are")
        (True, True)
    """
    note = (f"{name}: an embeddings file (a model's vectors of the images and captions, as `rococo-eval run "
            "--save-embeddings` writes), not a score matrix: Evaluate scores every gallery it covers from it, after "
            "checking its fingerprints against this Space's images")
    if not facts.has_images:
        note += (f"; this Space has no images ({IMAGES_DIR_ENV} is not set), so it cannot score it: score it with "
                 "`rococo-eval score FILE` where the images are")
    return note


def upload_precision(paths: Sequence[str] | None, rows: Sequence[dict]) -> str | None:
    """The leaderboard precision that the score files of ``rows`` (by their ``file``) were saved in: ``fp16`` for
    float16, ``bf16`` for bfloat16, ``fp32`` for float32 and float64; None when they differ or none is a score matrix
    (an embeddings file).

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> path = Path(tempfile.mkdtemp()) / "clip_clean.npy"
        >>> np.save(path, np.zeros((2, 3), dtype=np.float16))
        >>> upload_precision([str(path)], [{"file": "clip_clean.npy"}])
        'fp16'
    """
    from rococo_eval.io.scorefiles import read_header

    by_name = {Path(path).name: path for path in paths or []}
    names = {row.get("file") for row in rows} & set(by_name)
    try:
        dtypes = {read_header(by_name[name]).dtype for name in names if not is_embeddings_file(by_name[name])}
    except ValueError:
        return None
    precisions = {_PRECISION_OF_DTYPE.get(dtype) for dtype in dtypes}
    return precisions.pop() if len(precisions) == 1 else None


def compare_rows(user_rows: Sequence[dict] | None) -> list[dict]:
    """The published reference results, then this session's own rows (named ``"your upload"``, or their ``model``),
    on the columns they share."""
    mine = [{**row, "model": row.get("model") or "your upload",
             "source": f"this session: {row.get('file') or 'mean over seeds'}"} for row in user_rows or []]
    def shown(key):
        return key == "seeds" or re.sub(r"_(ci|range|bounds)$", "", key) in _COMPARE_KEYS

    return [{key: value for key, value in row.items() if shown(key)} for row in report.REFERENCE_RESULTS + mine]


def explore(facts: GalleryFacts, index: int) -> Exploration:
    """The captions of test image ``index`` of the set of ``facts``, each text attack's made from them, and its images
    when available.

    Raises:
        ValueError: the set is not at hand (:data:`~rococo_eval.data.facts.NO_SOURCE`: no annotations), or ``index``
            is not one of its images.

    Example:
        >>> class Source:
        ...     captions_per_image, adversarial_per_image, image_files = [2, 1], 1, ["a.jpg", "b.jpg"]
        ...     text_attacks, image_attacks, images_dir = ["danger"], [], None
        ...     def ground_truth_captions(self):
        ...         return ["A dog runs.", "A dog sits.", "A cat."]
        ...     def adversarial_captions(self, attack):
        ...         return ["A weapon runs.", "A gun."]
        >>> exploration = explore(GalleryFacts.of(Source()), 0)
        >>> exploration.ground_truth, exploration.altered, exploration.images
        (['A dog runs.', 'A dog sits.'], {'danger': ['A weapon runs.']}, [])
        >>> exploration.note[:22]
        'Image 0: `a.jpg`. The '
    """
    if not facts.has_annotations:
        raise ValueError("the RoCOCO annotation files are not available here (see the note at the top)")
    if not 0 <= index < facts.num_images:
        raise ValueError(f"`index` must be an image index from 0 to {facts.num_images - 1}, got {index!r}")
    source, per_image = facts.source, facts.adversarial_per_image
    offsets = caption_offsets(facts.captions_per_image)
    ground_truth = source.ground_truth_captions()[offsets[index]:offsets[index + 1]]
    altered = {attack: source.adversarial_captions(attack)[per_image * index:per_image * (index + 1)]
               for attack in facts.text_attacks}
    images, note = [], f"Image {index}: `{source.image_files[index]}`."
    if not facts.has_images:
        note += (f" The COCO images are not available here: set ${IMAGES_DIR_ENV} to a COCO root holding "
                 "`val2014/` to see the original beside its altered copies.")
        return Exploration(ground_truth, altered, images, note)
    try:
        images.append((source.original_image(index), "original"))
        images += [(source.altered_image(index, attack), attack)
                   for attack in source.image_attacks]
    except (OSError, ValueError) as error:
        images, note = [], note + f" Cannot show its images: {error}"
    return Exploration(ground_truth, altered, images, note)


def _table_values(layouts) -> list:
    """The rows of a layout table as the page or the API gives it (rows, a DataFrame, or ``{"data": rows}``)."""
    if layouts is None:
        return []
    if isinstance(layouts, pd.DataFrame):
        return layouts.values.tolist()
    if isinstance(layouts, dict):
        return list(layouts.get("data") or [])
    return list(layouts)


def _layout_rows(layouts, names) -> dict[str, list[str]]:
    """The user's layout rows by file name; rows for files not uploaded are an error."""
    if layouts is None or isinstance(layouts, pd.DataFrame) and layouts.empty:
        return {}
    rows = layouts.values.tolist() if isinstance(layouts, pd.DataFrame) else layouts
    chosen = {}
    for row in rows:
        cells = ["" if cell is None else str(cell).strip() for cell in row]
        if not any(cells):
            continue
        if cells[0] not in names:
            raise ValueError(f"the layout table names {cells[0]!r}, which is not among the uploads "
                             f"({', '.join(names)})")
        chosen[cells[0]] = cells[1:4]
    return chosen
