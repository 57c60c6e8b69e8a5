"""Results, typed: one gallery's numbers, per-query arrays and layout; the galleries of an evaluation; its report.

Every scorer returns a :class:`GalleryResult` per gallery (score files: :mod:`rococo_eval.scoring.plan`; embeddings:
:mod:`rococo_eval.scoring.embeddingsfile`; models: :mod:`rococo_eval.scoring.galleries`), keyed by its
:class:`GalleryKey` (or its text), and every consumer reads its parts by name: the report and the failure analysis
(:mod:`rococo_eval.reporting`), the Space and the command. :func:`build_report` makes the one :class:`Report` of an
evaluation from its :class:`GalleryResults`: its ``meta``, the results and one :class:`SummaryRow` per gallery and per
image method's mean over seeds. Every front end makes one (``evaluate_model``, ``score``, the Space, ``from-mteb``;
the torchmetrics metric returns its :meth:`Report.to_dict`), and :meth:`Report.to_json` is ``report.json``.

Example:
    >>> from rococo_recall import rococo_recall
    >>> from rococo_eval.layout import gallery_layout
    >>> layout = gallery_layout("mix_seed1", "text_to_image", [1, 1])
    >>> outputs = rococo_recall([[0.9, 0.1, 0.95, 0.0], [0.2, 0.8, 0.1, 0.3]], k=1, per_query=True,
    ...                         **layout.metric_inputs())
    >>> result = GalleryResult.of(outputs, layout)
    >>> result.metrics["recall@1"], result.per_query["rank"].tolist(), result.is_standard
    (50.0, [1, 0], True)
"""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional

import numpy as np

from rococo_eval.catalog import (
    CLEAN,
    DIRECTIONS,
    IMAGE_ATTACK_METHODS,
    TEXT_ATTACKS,
    TEXT_TO_IMAGE,
    gallery_key,
    parse_image_attack,
)
from rococo_eval.jsontext import json_text
from rococo_eval.layout import GalleryLayout
from rococo_eval.version import __version__
from rococo_recall import PER_QUERY_KEYS  # the metric's per-query outputs, in its order

DECIMALS = 2  # every percentage shown (tables, report.md, the terminal, the Space, messages) has this many decimals
NOT_DEFINED = "n/a"  # what a table shows for a number that is not defined


def percent_text(value) -> str:
    """A percentage as every table and message shows it: :data:`DECIMALS` decimals, ``n/a`` for NaN (not defined).

    Example:
        >>> percent_text(25), percent_text(26.525), percent_text(float("nan"))
        ('25.00', '26.52', 'n/a')
    """
    value = float(value)
    return NOT_DEFINED if math.isnan(value) else f"{value:.{DECIMALS}f}"


@dataclass(frozen=True)
class GalleryResult:
    """The RoCOCO Recall of one gallery.

    Attributes:
        metrics: the metric's scalar outputs in its order (percentages, counts, ``<name>_ci`` and ``<name>_bounds``
            pairs): what ``report.json``'s ``results`` holds.
        per_query: the metric's per-query arrays (:data:`PER_QUERY_KEYS`) by name; empty when they were not asked.
        layout: the gallery's layout, in the order the scores were given; None for a custom layout (a score file's
            own references), which has no failure analysis.
        reranked: whether the scores are a re-ranker's (each query's top candidates re-scored, every other item at
            one fill score), as a score file shows it: an attacked gallery's clean part is then ranked over other
            candidates than its clean gallery (:mod:`rococo_eval.scoring.consistency`).
    """

    metrics: dict[str, Any]
    per_query: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    layout: Optional[GalleryLayout] = field(default=None, repr=False)
    reranked: bool = False

    @classmethod
    def of(cls, outputs: Mapping[str, Any], layout: Optional[GalleryLayout] = None, *,
           reranked: bool = False) -> GalleryResult:
        """Type the metric's ``outputs`` (one dict of numbers and, with ``per_query=True``, arrays)."""
        metrics = {key: value for key, value in outputs.items() if key not in PER_QUERY_KEYS}
        arrays = {key: np.asarray(value) for key, value in outputs.items() if key in PER_QUERY_KEYS}
        return cls(metrics, arrays, layout, reranked)

    @property
    def is_standard(self) -> bool:
        """Whether the gallery has a known layout (a standard gallery of the source), hence a failure analysis."""
        return self.layout is not None

    @property
    def analysable(self) -> bool:
        """Whether the failure analysis can read it: a known layout and the per-query arrays."""
        return self.layout is not None and bool(self.per_query)


class GalleryKey(str):
    """The key of one gallery's results: ``GalleryKey(attack, direction)``, whose text is ``"<attack>/<direction>"``
    (:func:`~rococo_eval.catalog.gallery_key`), so that it is the key of ``report.json`` and equal to it.

    Example:
        >>> key = GalleryKey("rand_voca", "image_to_text")
        >>> str(key), key.attack, key.direction, key == "rand_voca/image_to_text"
        ('rand_voca/image_to_text', 'rand_voca', 'image_to_text', True)
        >>> GalleryKey.parse("mix_seed1/text_to_image").attack
        'mix_seed1'
    """

    attack: str
    direction: str

    def __new__(cls, attack: str, direction: str) -> GalleryKey:
        key = super().__new__(cls, gallery_key(attack, direction))
        key.attack, key.direction = attack, direction
        return key

    def __getnewargs__(self) -> tuple[str, str]:
        return self.attack, self.direction

    @classmethod
    def parse(cls, text: str) -> GalleryKey:
        """The key written as ``text`` (``"<attack>/<direction>"``); a :class:`GalleryKey` is returned as it is.

        Raises:
            ValueError: ``text`` is not one attack and one direction joined by ``/``.
        """
        if isinstance(text, GalleryKey):
            return text
        parts = text.split("/") if isinstance(text, str) else []
        if len(parts) != 2:
            raise ValueError(f"a gallery key must be '<attack>/<direction>', got {text!r}")
        return cls(*parts)


class GalleryResults(Mapping[GalleryKey, GalleryResult]):
    """The :class:`GalleryResult` of each gallery of one evaluation, by :class:`GalleryKey`, in the order scored.

    Keys may be given as text (``"clean/image_to_text"``): each is read as a :class:`GalleryKey`, and text finds
    them too.

    Example:
        >>> results = GalleryResults({"clean/image_to_text": GalleryResult({"recall@1": 50.0})})
        >>> [key.direction for key in results], results.metrics()
        (['image_to_text'], {'clean/image_to_text': {'recall@1': 50.0}})
    """

    def __init__(self, results: Mapping[str, GalleryResult] = ()):
        self._results = {GalleryKey.parse(key): result for key, result in dict(results).items()}

    def __getitem__(self, key: str) -> GalleryResult:
        return self._results[key]

    def __iter__(self) -> Iterator[GalleryKey]:
        return iter(self._results)

    def __len__(self) -> int:
        return len(self._results)

    def __repr__(self) -> str:
        return f"GalleryResults({self._results!r})"

    def metrics(self) -> dict[GalleryKey, dict[str, Any]]:
        """The metric's scalar outputs of each gallery: ``report.json``'s ``results``."""
        return {key: result.metrics for key, result in self._results.items()}

    def analysable(self) -> GalleryResults:
        """The results the failure analysis can read (:attr:`GalleryResult.analysable`)."""
        return GalleryResults({key: result for key, result in self._results.items() if result.analysable})


@dataclass(frozen=True)
class SummaryRow:
    """One row of a report's summary: a gallery's numbers, or the mean over the seeds of an image method.

    Attributes:
        attack: the gallery's attack (``clean``, an attack, a custom name), or the image method of a seed mean.
        direction: the direction the gallery is scored in (None in a table of rows that name none).
        values: the row's numbers by name, in the metric's order: ``clean_recall@K``, ``recall@K``, ``r_mean``,
            ``false_rate``, ``attack_success_rate``, the counts, ``<name>_ci`` and ``<name>_bounds`` pairs, a seed
            mean's ``<name>_range``; and what a table adds beside them (``file``, ``model``, ``source``).
        seeds: the seeds a mean row is the mean over; None for a gallery's own row.

    Example:
        >>> row = SummaryRow("mix", "text_to_image", {"recall@1": 21.0}, seeds=(1, 10))
        >>> row.is_seed_mean, str(row.key), row.to_dict()
        (True, 'mix/text_to_image', {'attack': 'mix', 'direction': 'text_to_image', 'seeds': (1, 10), 'recall@1': 21.0})
    """

    attack: str
    direction: Optional[str]
    values: dict[str, Any] = field(default_factory=dict)
    seeds: Optional[tuple[int, ...]] = None

    @property
    def is_seed_mean(self) -> bool:
        """Whether the row is an image method's mean over seeds, not a gallery's own numbers."""
        return self.seeds is not None

    @property
    def key(self) -> GalleryKey:
        """The row's gallery key (a seed mean's is its method's: ``mix/text_to_image``)."""
        return GalleryKey(self.attack, self.direction)

    def get(self, name: str, default=None):
        """The row's value named ``name`` (``attack``, ``direction``, ``seeds``, a number), or ``default``: what
        :meth:`to_dict` holds under ``name``.

        Example:
            >>> row = SummaryRow("danger", None, {"recall@1": 40.0})
            >>> row.get("attack"), row.get("recall@1"), row.get("direction", "none"), row.get("seeds")
            ('danger', 40.0, 'none', None)
        """
        if name in self.values:
            return self.values[name]
        if name == "attack":
            return self.attack
        if name in ("direction", "seeds"):  # to_dict leaves them out when None
            value = self.direction if name == "direction" else self.seeds
            return default if value is None else value
        return default

    def to_dict(self) -> dict[str, Any]:
        """The row as ``report.json``'s ``summary`` holds it: ``attack``, ``direction``, a mean's ``seeds``, the
        values."""
        head = {"attack": self.attack, **({} if self.direction is None else {"direction": self.direction})}
        return {**head, **({} if self.seeds is None else {"seeds": self.seeds}), **self.values}

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> SummaryRow:
        """The row that :meth:`to_dict` (or a table of published numbers) wrote as ``row``; a row is kept as it is."""
        if isinstance(row, SummaryRow):
            return row
        seeds = row.get("seeds")
        values = {name: value for name, value in row.items() if name not in ("attack", "direction", "seeds")}
        return cls(row.get("attack"), row.get("direction"), values, None if seeds is None else tuple(seeds))


@dataclass(frozen=True)
class Report:
    """The report of one evaluation, made by :func:`build_report` alone.

    Attributes:
        meta: what the report records: this package's version, Python's, and the caller's entries (the model, or the
            score files; the settings; the validity warnings in ``warnings``).
        results: every gallery's :class:`GalleryResult`, per-query arrays included when the scorer kept them.
        summary: the :class:`SummaryRow` of each gallery (the paper's order), then each image method's mean.
        source: the benchmark the results are of (its captions and images for the failure analysis, its name for the
            model card); None for files scored on their own.
        analysis: the failure analysis as ``report.json`` holds it (:func:`rococo_eval.reporting.report.write_report`
            adds it), or None.
    """

    meta: dict[str, Any]
    results: GalleryResults
    summary: list[SummaryRow]
    source: Any = field(default=None, repr=False, compare=False)
    analysis: Optional[dict] = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """``{"meta", "results", "summary"}`` (and ``analysis``), the report as ``report.json`` holds it."""
        document = {"meta": self.meta, "results": self.results.metrics(),
                    "summary": [row.to_dict() for row in self.summary]}
        return document if self.analysis is None else {**document, "analysis": self.analysis}

    def to_json(self) -> str:
        """The text of ``report.json`` (:func:`~rococo_eval.jsontext.json_text`)."""
        return json_text(self.to_dict())

    def with_analysis(self, analysis: dict) -> Report:
        """This report with the failure analysis ``analysis`` (as ``report.json`` holds it)."""
        return build_report(self.results, self.meta, self.source, summary=self.summary, analysis=analysis)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Report:
        """The report that ``report.json`` holds as ``document`` (the numbers only: no per-query arrays)."""
        results = GalleryResults({key: GalleryResult(dict(metrics))
                                  for key, metrics in (document.get("results") or {}).items()})
        summary = [SummaryRow.from_dict(row) for row in document.get("summary") or []]
        return build_report(results, document.get("meta") or {}, summary=summary, analysis=document.get("analysis"))


def build_report(results: Mapping[str, GalleryResult], meta: Mapping[str, Any], source=None, *,
                 summary: Optional[list[SummaryRow]] = None, analysis: Optional[dict] = None) -> Report:
    """The :class:`Report` of ``results``: the only way one is made.

    ``meta`` gets this package's version and Python's first (a ``meta`` read back from a report keeps its own);
    the summary is :func:`summary_of` the results, unless ``summary`` gives the rows a report file holds.

    Example:
        >>> report = build_report({"clean/image_to_text": GalleryResult({"recall@1": 50.0})}, {"model": "toy"})
        >>> list(report.meta)[-1], report.summary[0].attack, report.to_dict()["results"]
        ('model', 'clean', {'clean/image_to_text': {'recall@1': 50.0}})
    """
    results = results if isinstance(results, GalleryResults) else GalleryResults(results)
    meta = {"rococo_eval": __version__, "python": platform.python_version(), **meta}
    rows = summary_of(results) if summary is None else list(summary)
    return Report(meta, results, rows, source, analysis)


def summary_of(results: GalleryResults) -> list[SummaryRow]:
    """One row per gallery, standard galleries in the paper's order, then the mean over seeds per image method.

    Each row holds the metric's scalar outputs under their own names: ``clean_recall@1`` (the gallery's R@1 without
    its adversarial items, which equals the clean gallery's R@1), ``recall@K``, ``r_mean``, ``false_rate``,
    ``attack_success_rate``, ``<name>_ci`` when the metric computed intervals, and the counts. Per-query arrays are
    left out.

    For ``mix`` and ``patch``, when at least two seeds are present (RoCOCO's 1, 10 and 100, or a generated
    benchmark's own), a row of the method with its ``seeds`` holds the mean of each percentage over those
    seeds, as the paper reports; with three seeds or more, ``<name>_range`` holds the lowest and highest seed's
    value (the spread is given as the min–max range: with three seeds a standard deviation says little).
    Intervals are not averaged. Image attacks are ordered by method, then seed.

    Example:
        >>> results = GalleryResults({GalleryKey(f"mix_seed{s}", "text_to_image"):
        ...                           GalleryResult({"recall@1": r, "clean_recall@1": 30.0})
        ...                           for s, r in [(1, 19.0), (10, 20.0), (100, 24.0)]})
        >>> mean = summary_of(results)[-1]
        >>> mean.attack, mean.seeds, mean.values["recall@1"], mean.values["recall@1_range"]
        ('mix', (1, 10, 100), 21.0, (19.0, 24.0))
    """
    rows = [SummaryRow(key.attack, key.direction, {name: _plain(value) for name, value in result.metrics.items()
                                                   if _is_reported(name, value)})
            for key, result in results.items()]
    rows.sort(key=_row_order)
    for method in IMAGE_ATTACK_METHODS:
        seed_rows = [row for row in rows if row.direction == TEXT_TO_IMAGE
                     and (parse_image_attack(row.attack) or ("",))[0] == method]
        if len(seed_rows) >= 2:
            last = rows.index(seed_rows[-1])
            rows.insert(last + 1, _seed_mean(method, seed_rows))
    return rows


def _is_reported(name: str, value) -> bool:
    if name.endswith(("_ci", "_bounds")):
        return True
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _plain(value):
    if isinstance(value, (tuple, list, np.ndarray)):
        return tuple(float(v) for v in value)
    return value.item() if isinstance(value, np.generic) else value


def _row_order(row: SummaryRow):
    """Direction, then clean, the text attacks, the image attacks by method and seed, then anything else."""
    image_attack = parse_image_attack(row.attack)
    if row.attack == CLEAN:
        place = (0,)
    elif row.attack in TEXT_ATTACKS:
        place = (1, TEXT_ATTACKS.index(row.attack))
    elif image_attack:
        place = (2, IMAGE_ATTACK_METHODS.index(image_attack[0]), image_attack[1])
    else:
        place = (3,)
    return (DIRECTIONS.index(row.direction) if row.direction in DIRECTIONS else len(DIRECTIONS),) + place


def _seed_mean(method: str, seed_rows: list[SummaryRow]) -> SummaryRow:
    seeds = tuple(parse_image_attack(row.attack)[1] for row in seed_rows)
    mean = {}
    names = [name for name in seed_rows[0].values if not name.endswith(("_ci", "_bounds"))
             and all(name in other.values for other in seed_rows)]
    for name in names:
        values = [float(other.values[name]) if other.values[name] is not None else math.nan for other in seed_rows]
        mean[name] = seed_rows[0].values[name] if name.startswith("num_") else float(np.mean(values))
        if len(seed_rows) >= 3 and not name.startswith("num_"):
            mean[f"{name}_range"] = (min(values), max(values))
        if any(f"{name}_bounds" in other.values for other in seed_rows):  # a mean is bounded by the means of the bounds
            ends = [other.values.get(f"{name}_bounds") or (value, value) for other, value in zip(seed_rows, values)]
            mean[f"{name}_bounds"] = tuple(float(np.mean(side)) for side in zip(*ends))
    return SummaryRow(method, TEXT_TO_IMAGE, mean, seeds)
