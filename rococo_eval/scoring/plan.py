"""Score files to results, in one path: plan every file's gallery, then score them all.

``rococo-eval score`` and the Space both take score files (``.npy``, ``.npz``, ``.safetensors``) and what their
user said of each file's layout, and both go through here:

1. :func:`plan_score_files` reads each file's header (a full matrix, or a re-ranker's compact one:
   :mod:`rococo_eval.io.scorefiles`), completes its layout (:func:`rococo_eval.detection
   .choose_layout`: attack, direction and order from what was given, the file name, the shape and, for the
   order of an attacked image-to-text gallery, the scores), and refuses what cannot be scored exactly: every
   file's problem is listed in one :class:`PlanError`, before any file is scored.
   A stated order (given, or in the file name) that the scores are significantly against
   (:attr:`rococo_eval.detection.OrderDecision.contradicted`) is refused with the evidence, unless the caller trusts
   the given order (``trust_given_order``: then it is scored with a validity warning, :mod:`rococo_eval.validity`).
2. :func:`score_planned` scores each planned file with the metric, at the cut-offs its gallery allows, with the
   per-query arrays the failure analysis reads.
3. :func:`disagreements_of` says which files give different clean numbers for one direction
   (:mod:`rococo_eval.scoring.consistency`), and which a re-ranker's files could not be compared: validity
   warnings both.
4. :func:`report_meta` is what the report (:func:`rococo_eval.reporting.report.write_report`) records of the files
   and of the :class:`ScoringOptions`.

``rococo-eval run --save-scores`` writes files this path reads back to the same bits (the one block rule of
:func:`rococo_recall.embedding_score_blocks`).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> folder = Path(tempfile.mkdtemp())
    >>> scores = np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float32)  # 3 captions (2 of image 0), 2 images
    >>> np.save(folder / "clean_text_to_image.npy", scores)
    >>> [planned] = plan_score_files([ScoreRequest(folder / "clean_text_to_image.npy")], GalleryFacts([2, 1]))
    >>> planned.key, planned.layout.num_gallery, planned.cutoffs
    ('clean/text_to_image', 2, (1,))
    >>> score_planned([planned])["clean/text_to_image"].metrics["recall@1"]
    100.0
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from rococo_eval.catalog import gallery_key
from rococo_eval.data.facts import GalleryFacts
from rococo_eval.detection import CUSTOM, LayoutChoice, choose_layout
from rococo_eval.io import scorefiles
from rococo_eval.layout import ADVERSARIAL_PER_IMAGE, GalleryLayout, gallery_layout, recall_cutoffs
from rococo_eval.results import GalleryResult
from rococo_eval.scoring.consistency import Disagreement, disagreements, has_fill_block, not_compared
from rococo_eval.validity import warn
from rococo_recall import TIE_POLICIES

logger = logging.getLogger(__name__)
ORDER_OVERRIDDEN = "all the same, as asked"  # how a layout note says that the order the scores show was overridden


class PlanError(ValueError):
    """Score files that cannot be scored: ``problems`` holds one line per problem, each naming its file."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class ScoringOptions:
    """How score files are ranked, checked once for every path that scores them.

    Attributes:
        ties: the metric's tie policy, ``"pessimistic"`` (its default) or ``"optimistic"``.
        bootstrap: resamples for 95% confidence intervals (0: none), at most ``max_bootstrap`` when it is set.
        max_bootstrap: the most resamples a caller allows (the Space caps the work of one request).

    Example:
        >>> ScoringOptions(bootstrap=-1)
        Traceback (most recent call last):
        ...
        ValueError: `bootstrap` must be a non-negative int, got -1
    """

    ties: str = TIE_POLICIES[0]
    bootstrap: int = 0
    max_bootstrap: Optional[int] = None

    def __post_init__(self):
        if self.ties not in TIE_POLICIES:
            raise ValueError(f"`ties` must be one of {', '.join(TIE_POLICIES)}, got {self.ties!r}")
        if not isinstance(self.bootstrap, int) or isinstance(self.bootstrap, bool) or self.bootstrap < 0:
            raise ValueError(f"`bootstrap` must be a non-negative int, got {self.bootstrap!r}")
        if self.max_bootstrap is not None and self.bootstrap > self.max_bootstrap:
            raise ValueError(f"`bootstrap` must be an int from 0 to {self.max_bootstrap}, got {self.bootstrap!r}")

    @property
    def is_default(self) -> bool:
        """Whether these are the metric's defaults (pessimistic ties, no bootstrap)."""
        return self.ties == TIE_POLICIES[0] and self.bootstrap == 0

    def report_entries(self) -> dict:
        """What a report's ``meta`` records of these options: ``settings``, when they are not the defaults.

        Example:
            >>> ScoringOptions().report_entries(), ScoringOptions(bootstrap=10).report_entries()
            ({}, {'settings': {'ties': 'pessimistic', 'bootstrap': 10}})
        """
        return {} if self.is_default else {"settings": {"ties": self.ties, "bootstrap": self.bootstrap}}


@dataclass(frozen=True)
class ScoreRequest:
    """One score file and what its user said of its layout (``""``: detect it).

    Attributes:
        path: the file.
        name: how messages and the report name it (default: ``path`` as given; the Space: the upload's name).
        attack, direction, order: the layout given, each part optional.
    """

    path: Path
    name: str = ""
    attack: str = ""
    direction: str = ""
    order: str = ""

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))
        object.__setattr__(self, "name", self.name or str(self.path))


@dataclass(frozen=True)
class PlannedFile:
    """A score file with its gallery settled: what :func:`score_planned` needs, checked.

    Attributes:
        key: the gallery's key (:func:`rococo_eval.catalog.gallery_key`); a custom layout's attack is the file's
            stem.
        request: the file and what was given of its layout.
        info: the file's header (shape, dtype, array name).
        choice: the layout, and how it was decided (its ``note``).
        layout: the standard gallery's layout; None for a custom layout.
        inputs: the metric's ``references`` and ``adversarial``.
        cutoffs: the Recall@K cut-offs the gallery allows.
    """

    key: str
    request: ScoreRequest
    info: scorefiles.ScoreFileInfo
    choice: LayoutChoice
    layout: Optional[GalleryLayout]
    inputs: dict = field(repr=False)
    cutoffs: tuple

    @property
    def is_standard(self) -> bool:
        return self.layout is not None


def _give_the_order(choice: LayoutChoice, request: ScoreRequest) -> str:
    return "give its order: official or dataset"


def _give_or_trust(choice: LayoutChoice, request: ScoreRequest) -> str:
    return (f"give the {choice.order_decision.favoured} order, or pass `trust_given_order=True` to score it in the "
            f"{choice.order} order all the same")


@dataclass(frozen=True)
class PlanPolicy:
    """How a front end plans its files (:func:`plan_score_files`, :func:`plan_each`).

    Attributes:
        custom: whether custom layouts are allowed: their references (and adversarial items) come from the score
            file (an ``.npz`` or ``.safetensors`` with ``references`` / ``adversarial`` arrays) or from the
            ``references`` / ``adversarial`` files. ``rococo-eval score`` refuses them (a RoCOCO report has no
            place for them); the Space scores them.
        references, adversarial: those files, or None.
        ask_order: what to tell the user when the order of an attacked image-to-text gallery is neither given nor
            clear from the scores (the command asks for a spec, the Space for a cell of its table).
        read_off_level: the log level of a note on a layout read off the file rather than given (the command warns;
            the Space, where detection is the usual path, shows the notes on the page instead).
        trust_given_order: score an attacked image-to-text gallery in the order stated (given, or in the file name)
            even when its scores are significantly against it
            (:attr:`rococo_eval.detection.OrderDecision.contradicted`); its note keeps the evidence, and a validity
            warning says it. False (the default) refuses such a file with the evidence.
        fix_order: what to tell the user when a stated order is refused: how to give the other one, or to trust it
            (the command names its spec and ``--trust-order``, the Space its layout table and checkbox).
    """

    custom: bool = False
    references: Optional[str] = None
    adversarial: Optional[str] = None
    ask_order: Callable[[LayoutChoice, ScoreRequest], str] = _give_the_order
    read_off_level: int = logging.WARNING
    trust_given_order: bool = False
    fix_order: Callable[[LayoutChoice, ScoreRequest], str] = _give_or_trust


def plan_score_files(requests: Sequence[ScoreRequest], facts: GalleryFacts,
                     policy: PlanPolicy = PlanPolicy()) -> list[PlannedFile]:
    """Settle every file's gallery before any is scored; raise one :class:`PlanError` listing every problem.

    Args:
        requests: the files, each with what was given of its layout.
        facts: what the image-text set says of its galleries (:meth:`GalleryFacts.of` a source; :data:`NO_SOURCE`
            when no annotations are at hand, then only custom layouts can be planned).
        policy: how the front end plans (:class:`PlanPolicy`: custom layouts allowed or not, what to tell the user
            about an order, whether a stated order is trusted against its scores).

    Returns:
        one :class:`PlannedFile` per request, in request order.
    """
    plans, problems = plan_each(requests, facts, policy)
    if problems:
        raise PlanError(problems)
    return plans


def plan_each(requests: Sequence[ScoreRequest], facts: GalleryFacts,
              policy: PlanPolicy = PlanPolicy()) -> tuple[list[PlannedFile], list[str]]:
    """:func:`plan_score_files` without refusing: the files that can be planned, and one line per problem of the
    others (each naming its file), so that one bad file does not hide the others (the Space scores what it can).
    A gallery given by two files is a problem of the second."""
    plans, problems = [], []
    for request in requests:
        try:
            plans.append(_plan_one(request, facts, policy))
        except ValueError as error:
            problems.append(_with_name(request.name, error))
    first, kept = {}, []
    for planned in plans:
        if planned.key in first:
            problems.append(f"{planned.request.name}: gallery {planned.key} was already given by "
                            f"{first[planned.key].request.name}")
            continue
        first[planned.key] = planned
        kept.append(planned)
    for planned in kept:
        request, choice = planned.request, planned.choice
        decision = choice.order_decision
        given = any((request.attack, request.direction, request.order))
        disputed = decision is not None and (decision.order not in ("", request.order)
                                             or decision.contradicted == choice.order)
        read_off_the_file = not given or disputed  # or the scores dispute the given order
        logger.log(policy.read_off_level if read_off_the_file else logging.INFO, "%s: %s", request.name, choice.note)
    return kept, problems


def score_planned(plans: Sequence[PlannedFile],
                  options: ScoringOptions = ScoringOptions()) -> dict[str, GalleryResult]:
    """Score each planned file with the metric: ``{key: GalleryResult}``, per-query arrays included.

    A file whose scores the metric refuses (a NaN, references out of range) is named in one :class:`PlanError`
    with every other such file.
    """
    results, problems = score_each(plans, options)
    if problems:
        raise PlanError(problems)
    return results


def score_each(plans: Sequence[PlannedFile],
               options: ScoringOptions = ScoringOptions()) -> tuple[dict[str, GalleryResult], list[str]]:
    """:func:`score_planned` without refusing: the results of the files the metric scores, and one line per file it
    refuses. No score matrix outlives its file's turn: a refused file's memory map is closed before the next."""
    from rococo_recall import rococo_recall  # the metric (with numpy only): loaded where a gallery is scored

    results, problems = {}, []
    for planned in plans:
        started = time.perf_counter()
        scores = given = None
        try:
            scores = scorefiles.read_scores(planned.request.path, planned.info.key)
            given = scores.metric_arguments() if planned.info.is_compact else {"predictions": scores}
            outputs = rococo_recall(**given, **planned.inputs, k=planned.cutoffs, ties=options.ties,
                                    bootstrap=options.bootstrap, per_query=True)
            reranked = planned.info.is_compact or has_fill_block(scores)
            results[planned.key] = GalleryResult.of(outputs, planned.layout, reranked=reranked)
        except ValueError as error:
            problems.append(_with_name(planned.request.name, error))
            continue
        finally:
            del scores, given  # the memory map: referenced by nothing once this file is done
        logger.info("scored %s %s as %s in %.2f s", planned.request.name, planned.info.shape, planned.key,
                    time.perf_counter() - started)
    return results, problems


def disagreements_of(plans: Sequence[PlannedFile], results: Mapping[str, GalleryResult]) -> list[Disagreement]:
    """The directions whose files give different clean numbers (:func:`rococo_eval.scoring.consistency.disagreements`),
    each file named as its request names it, with its dtype; a re-ranker's files (:attr:`GalleryResult.reranked`)
    and custom layouts (their own references: no clean gallery to agree with) are not compared. Each disagreement is
    a validity warning (:func:`rococo_eval.validity.warn`), and so are a re-ranker's files left out of a
    comparison with other files of their direction (the check did not run for them).

    Example:
        >>> disagreements_of([], {})
        []
    """
    scored = [planned for planned in plans if planned.key in results and planned.is_standard]
    found = disagreements({planned.key: results[planned.key] for planned in scored},
                          {planned.key: planned.request.name for planned in scored},
                          dtypes={planned.key: planned.info.dtype for planned in scored},
                          reranked={key for key, result in results.items() if result.reranked})
    for disagreement in found:
        warn("the files disagree: %s", disagreement.message)
    unchecked = not_compared({planned.key: planned.request.name for planned in scored},
                             reranked={key for key, result in results.items() if result.reranked})
    if unchecked:
        warn("%s", unchecked)
    return found


def report_meta(plans: Sequence[PlannedFile], options: ScoringOptions = ScoringOptions()) -> dict:
    """What a report records of the files scored (and of ``options``, when they are not the defaults).

    Example:
        >>> report_meta([], ScoringOptions(ties="optimistic"))
        {'files': {}, 'settings': {'ties': 'optimistic', 'bootstrap': 0}}
    """
    meta = {"files": {planned.key: {"path": planned.request.name, "order": planned.choice.order,
                                    "note": planned.choice.note,
                                    **({"candidates": planned.info.candidates} if planned.info.is_compact else {})}
                      for planned in plans}}
    return {**meta, **options.report_entries()}


def detect_file_layout(request: ScoreRequest, facts: GalleryFacts, *,
                       custom: bool = False) -> tuple[scorefiles.ScoreFileInfo, LayoutChoice]:
    """A score file's header and its layout, completed from what was given (the first step of
    :func:`plan_score_files`, and what the Space's Detect button shows): a file that carries its own layout arrays
    is a custom layout when ``custom`` layouts are allowed."""
    info = scorefiles.read_header(request.path)
    attack = request.attack or (CUSTOM if info.layout_keys and custom else "")
    choice = choose_layout(info.shape, facts.captions_per_image, request.path.name, attack, request.direction,
                           request.order, scores=functools.partial(scorefiles.read_scores, request.path, info.key),
                           adversarial_per_image=facts.adversarial_per_image, attacks=facts.attacks)
    return info, choice


def _plan_one(request: ScoreRequest, facts: GalleryFacts, policy: PlanPolicy) -> PlannedFile:
    info, choice = detect_file_layout(request, facts, custom=policy.custom)
    if choice.attack == CUSTOM and not policy.custom:
        raise ValueError("custom layouts have no place in a RoCOCO report; score them with rococo_recall directly")
    if not choice.order:
        raise ValueError(f"{choice.note}; {policy.ask_order(choice, request)}")
    if choice.order_decision is not None and choice.order_decision.contradicted == choice.order:
        if not policy.trust_given_order:
            raise ValueError(_contradicted(choice, request, policy.fix_order))
        choice = dataclasses.replace(choice, note=f"{choice.note}; scored in the {choice.order} order "
                                                  f"{ORDER_OVERRIDDEN}")
        warn("%s: scored in the %s order %s, although %s: %s", request.name, choice.order, ORDER_OVERRIDDEN,
             choice.order_decision.contradiction, choice.order_decision.evidence)
    if choice.attack != CUSTOM:
        layout = _standard_layout(choice.attack, choice.direction, choice.order, facts.captions_per_image,
                                  facts.adversarial_per_image)
        key = gallery_key(choice.attack, choice.direction)
        return PlannedFile(key, request, info, choice, layout, layout.metric_inputs(),
                           recall_cutoffs(layout.num_gallery, key))
    inside = scorefiles.read_layout_arrays(request.path)
    references, adversarial = policy.references, policy.adversarial
    if "references" not in inside and references is None:
        raise ValueError("a custom layout needs references: upload a references file, or put a `references` "
                         "array in an .npz or .safetensors score file")
    inputs = {"references": inside["references"] if "references" in inside else scorefiles.read_references(references),
              "adversarial": inside.get("adversarial")}
    if inputs["adversarial"] is None and adversarial is not None:
        inputs["adversarial"] = scorefiles.read_adversarial(adversarial)
    key = gallery_key(re.sub(r"[/\s]+", "_", Path(request.name).stem), choice.direction)
    return PlannedFile(key, request, info, choice, None, inputs, recall_cutoffs(info.shape[1], key))


def _contradicted(choice: LayoutChoice, request: ScoreRequest,
                  fix_order: Callable[[LayoutChoice, ScoreRequest], str]) -> str:
    """Why a stated order is refused: the scores are significantly against it, and the counts that show it."""
    stated = "given" if request.order else "stated in the file name"
    decision = choice.order_decision
    return (f"{choice.attack} image-to-text gallery: the {choice.order} order is {stated}, but "
            f"{decision.contradiction}: {decision.evidence}. Scored in the {choice.order} order, each query's "
            f"ground truth would be other captions than those its scores pick out; {fix_order(choice, request)}")


@functools.lru_cache(maxsize=8)
def _standard_layout(attack, direction, order, captions_per_image, adversarial_per_image=ADVERSARIAL_PER_IMAGE):
    """Layouts are read-only and shared by all requests; each is built for its own attack (and checked)."""
    return gallery_layout(attack, direction, list(captions_per_image), order,
                          adversarial_per_image=adversarial_per_image)


def _with_name(name: str, error: Exception) -> str:
    """``error``'s message, starting with the file's ``name`` once (score file errors start with its base name).

    Example:
        >>> _with_name("runs/a.npy", ValueError("a.npy: cannot read the file"))
        'runs/a.npy: cannot read the file'
    """
    text = str(error)
    for prefix in (f"{name}:", f"{Path(name).name}:"):
        if text.startswith(prefix):
            text = text[len(prefix):].lstrip()
            break
    return f"{name}: {text}"
