"""Two reports on the same queries, compared query by query: which differences of R@1 are real.

``rococo-eval compare REPORT_A REPORT_B`` reads both reports' per-query outcomes (``per_query.parquet``, which
``run`` and ``score`` write for RoCOCO's standard galleries: :func:`~rococo_eval.reporting.analysis.read_outcomes`)
and, for every gallery both hold:

- both R@1 and their paired difference A - B, with its 95% interval and p-value (the exact McNemar test and
  Newcombe's interval: :mod:`rococo_eval.reporting.significance`);
- for an attacked gallery, both robustness drops (clean R@1 - R@1) and their difference: each query's drop is
  1 (right without the adversarial items, wrong with them), 0, or -1 (never: adding items cannot make a wrong query
  right), and the two models' per-query drops are compared with the paired z test.

``differs`` says whether a difference is significant after Holm's correction across the galleries compared (one
family for R@1, one for the drops); the intervals and p-values are each gallery's own.

Reports of different galleries (a gallery key with other shapes: another benchmark, other annotations) or of
different query sets are refused, naming the gallery and both shapes; so is a report without per-query outcomes.

Example:
    >>> hits = np.arange(400) < 300
    >>> outcomes = {"clean/image_to_text": {"hit": hits, "clean_hit": hits}}
    >>> [row] = compare_outcomes(outcomes, {"clean/image_to_text": {"hit": hits & (np.arange(400) < 200),
    ...                                                           "clean_hit": hits}})
    >>> row.recall_a, row.recall_b, round(row.recall.difference, 2), row.drop is None
    (75.0, 50.0, 25.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from rococo_eval.catalog import CLEAN
from rococo_eval.reporting.analysis import read_outcomes
from rococo_eval.reporting.report import direction_text, percent_text
from rococo_eval.reporting.significance import ALPHA, PairedDifference, holm, paired_difference
from rococo_eval.results import GalleryKey, Report

_SHAPE = ("num_queries", "num_gallery", "num_adversarial")


@dataclass(frozen=True)
class GalleryComparison:
    """One gallery of two reports: both R@1, their paired difference, and (attacked galleries) both drops and theirs.

    ``recall_differs`` and ``drop_differs``: significant after Holm's correction across the galleries compared.
    """

    gallery: str
    recall_a: float
    recall_b: float
    recall: PairedDifference
    recall_differs: bool
    drop_a: Optional[float] = None
    drop_b: Optional[float] = None
    drop: Optional[PairedDifference] = None
    drop_differs: Optional[bool] = None


def report_outcomes(folder, report: Report, name: str = "REPORT") -> dict[str, dict[str, np.ndarray]]:
    """``{gallery key: {"hit": R@1 hits, "clean_hit": clean R@1 hits}}`` (``bool`` arrays, by query) of the report
    in ``folder`` (its ``report.json`` read as ``report``: :func:`rococo_eval.reporting.table.read_reports`), read
    from its per-query file (:func:`~rococo_eval.reporting.analysis.read_outcomes`).

    Raises:
        ValueError: the report has no per-query outcomes, or they cannot be read (``name`` names the report).
    """
    analysis = report.analysis or {}
    file = analysis.get("per_query_file")
    if not file:
        raise ValueError(f"{name} {str(folder)!r} holds no per-query outcomes (per_query.parquet): `run` and `score` "
                         "write them for RoCOCO's standard galleries; write the report again with this version")
    try:
        return read_outcomes(Path(folder) / file)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"{name} {str(folder)!r}: cannot read its per-query outcomes {file}: {error}") from None


def check_comparable(report_a: Report, report_b: Report, outcomes_a: Mapping, outcomes_b: Mapping,
                     names=("REPORT_A", "REPORT_B")) -> list[str]:
    """The galleries both reports hold per-query outcomes of, in A's order.

    Raises:
        ValueError: no gallery in common, or a common gallery of other shapes or other queries, naming it.

    Example:
        >>> a = Report.from_json({"results": {"clean/image_to_text": {"num_queries": 2, "num_gallery": 10}}})
        >>> b = Report.from_json({"results": {"clean/image_to_text": {"num_queries": 3, "num_gallery": 15}}})
        >>> hits = {"clean/image_to_text": {"hit": np.ones(2, bool)}}
        >>> check_comparable(a, b, hits, hits)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: REPORT_A and REPORT_B are of different galleries or query sets: clean/image_to_text has 2 ... in REPORT_B
    """
    common = [key for key in outcomes_a if key in outcomes_b]
    if not common:
        raise ValueError(f"{names[0]} and {names[1]} share no gallery with per-query outcomes: {names[0]} holds "
                         f"{', '.join(outcomes_a) or 'none'}, {names[1]} holds {', '.join(outcomes_b) or 'none'}")
    for key in common:
        shapes = [tuple(report.results[key].metrics.get(field, 0) if key in report.results else 0
                        for field in _SHAPE) for report in (report_a, report_b)]
        lengths = [len(outcomes[key]["hit"]) for outcomes in (outcomes_a, outcomes_b)]
        if shapes[0] != shapes[1] or lengths[0] != lengths[1]:
            (queries_a, gallery_a, adversarial_a), (queries_b, gallery_b, adversarial_b) = shapes
            raise ValueError(f"{names[0]} and {names[1]} are of different galleries or query sets: {key} has "
                             f"{queries_a} queries x {gallery_a} gallery items ({adversarial_a} adversarial) in "
                             f"{names[0]} and {queries_b} x {gallery_b} ({adversarial_b} adversarial) in {names[1]}"
                             + (f"; per-query outcomes of {lengths[0]} and {lengths[1]} queries"
                                if lengths[0] != lengths[1] else ""))
    return common


def compare_outcomes(outcomes_a: Mapping, outcomes_b: Mapping, alpha: float = ALPHA) -> list[GalleryComparison]:
    """Compare two models' per-query outcomes (:func:`report_outcomes`) on every gallery both hold, in A's order
    (the shapes are checked by :func:`check_comparable`)."""
    common = [key for key in outcomes_a if key in outcomes_b]
    recalls = [paired_difference(outcomes_a[key]["hit"], outcomes_b[key]["hit"]) for key in common]
    attacked = [key for key in common if GalleryKey.parse(key).attack != CLEAN]
    drops = {key: paired_difference(_drop(outcomes_a[key]), _drop(outcomes_b[key])) for key in attacked}
    recall_differs = _differs([found.p_value for found in recalls], alpha)
    drop_differs = dict(zip(drops, _differs([found.p_value for found in drops.values()], alpha)))
    rows = []
    for key, found, differs in zip(common, recalls, recall_differs):
        drop = drops.get(key)
        rows.append(GalleryComparison(
            key, _percent(outcomes_a[key]["hit"]), _percent(outcomes_b[key]["hit"]), found, differs,
            *((100.0 * float(_drop(outcomes_a[key]).mean()), 100.0 * float(_drop(outcomes_b[key]).mean()), drop,
               drop_differs[key]) if drop is not None else ())))
    return rows


def comparison_text(rows, name_a: str, name_b: str) -> str:
    """The comparison as a plain-text table for terminals, then what its columns mean.

    Example:
        >>> hits = np.arange(400) < 300
        >>> rows = compare_outcomes({"clean/image_to_text": {"hit": hits, "clean_hit": hits}},
        ...                         {"clean/image_to_text": {"hit": np.arange(400) < 200, "clean_hit": hits}})
        >>> print(comparison_text(rows, "a", "b").splitlines()[2])
        clean (image-to-text)  75.00  50.00  25.00 [20.69, 29.15]  < 0.0001      yes
    """
    headers = ["gallery", "A R@1", "B R@1", "A - B [95% CI]", "p", "differs", "A drop", "B drop",
               "drop A - B [95% CI]", "p (drop)", "drop differs"]
    cells = []
    for row in rows:
        gallery = GalleryKey.parse(row.gallery)
        cells.append([f"{gallery.attack} ({direction_text(gallery.direction)})", percent_text(row.recall_a),
                      percent_text(row.recall_b), _interval_text(row.recall), p_text(row.recall.p_value),
                      _yes(row.recall_differs)]
                     + ([percent_text(row.drop_a), percent_text(row.drop_b), _interval_text(row.drop),
                         p_text(row.drop.p_value), _yes(row.drop_differs)] if row.drop is not None else [""] * 5))
    drops = any(row.drop is not None for row in rows)
    if not drops:
        headers, cells = headers[:6], [line[:6] for line in cells]
    widths = [max(len(text) for text in column) for column in zip(headers, *cells)]

    def line(values):
        return "  ".join(value.ljust(width) if index == 0 else value.rjust(width)
                         for index, (value, width) in enumerate(zip(values, widths))).rstrip()

    legend = [f"- A: {name_a}; B: {name_b}. Numbers are percentages (0 to 100), with 2 decimals; differences are "
              "A - B in percentage points, on the same queries.",
              "- A - B: paired difference of R@1; [95% CI]: Newcombe's interval for paired proportions; p: exact "
              "McNemar test on the queries one model gets right and the other wrong (two-sided).",
              "- drop: clean R@1 - R@1 (what the adversarial items cost); drop A - B: the mean of the per-query "
              "differences of drops, with the paired z test's interval and p." if drops else "",
              f"- differs: p below {ALPHA:g} after Holm's correction across the galleries compared ({len(rows)}; "
              "R@1 and drops each one family)."]
    return "\n".join([line(headers), "  ".join("-" * width for width in widths)] + [line(values) for values in cells]
                     + [""] + [entry for entry in legend if entry]) + "\n"


def p_text(p_value: float) -> str:
    """A p-value as a table shows it: four decimals, ``< 0.0001`` below that.

    Example:
        >>> p_text(0.04321), p_text(1e-12)
        ('0.0432', '< 0.0001')
    """
    return "< 0.0001" if p_value < 1e-4 else f"{p_value:.4f}"


def _drop(outcome: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each query's robustness drop: clean hit minus hit, 1, 0 or -1, as numbers (compared by the paired z test)."""
    return outcome["clean_hit"].astype(np.float64) - outcome["hit"].astype(np.float64)


def _percent(hits: np.ndarray) -> float:
    return 100.0 * float(np.mean(hits))


def _differs(p_values, alpha: float) -> list[bool]:
    return [bool(p < alpha) for p in holm(p_values)[0]] if p_values else []


def _interval_text(found: PairedDifference) -> str:
    return f"{percent_text(found.difference)} [{percent_text(found.low)}, {percent_text(found.high)}]"


def _yes(differs: bool) -> str:
    return "yes" if differs else "no"
