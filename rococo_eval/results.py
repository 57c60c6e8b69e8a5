"""One gallery's result: the metric's numbers, its per-query arrays and the gallery's layout, typed.

Every scorer returns a :class:`GalleryResult` per gallery (score files: :mod:`rococo_eval.scoring.plan`; embeddings:
:mod:`rococo_eval.scoring.embeddingsfile`; models: :mod:`rococo_eval.scoring.galleries`), keyed by
:func:`~rococo_eval.catalog.gallery_key`, and every consumer reads its parts by name: the report and the failure
analysis (:mod:`rococo_eval.reporting`), the Space and the command.

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
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from rococo_eval.layout import GalleryLayout
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
