"""The board's order and its rank bands: which rows compare, and which of their differences are real.

The board sorts by the mean R@1 over the four text attacks (image-to-text), :data:`TEXT_MEAN`. Only numbers that
mean the same are sorted together: the rows with that mean first, best first; then the rows whose only text-attack
number is a single attack that its source does not name (:data:`TEXT_UNNAMED`: the paper's and the official log's
published numbers), best first, apart; then the rest, in the order they came.

A row's ``rank`` is a band (:func:`rococo_eval.reporting.significance.rank_bands`) among the rows that carry their
per-query outcomes (:data:`OUTCOMES`: ``{gallery key: R@1 hits, a bool array by query}``) for every text attack: each
query's outcome is its share of the four galleries it is right in, and a row's best rank is 1 + the rows
significantly better on the mean (paired z test, Holm-corrected across that row's comparisons). Rows without
per-query outcomes (the published rows, submissions made before they were kept) are not compared:
:data:`~rococo_eval.reporting.significance.NOT_COMPARABLE`.

Example:
    >>> queries = np.arange(1000)
    >>> hits = {f"{attack}/image_to_text": queries < 500 for attack in TEXT_ATTACKS}
    >>> rows = [{"model": "published", TEXT_MEAN: None, TEXT_UNNAMED: 48.4, OUTCOMES: None},
    ...         {"model": "a", TEXT_MEAN: 50.1, TEXT_UNNAMED: None,
    ...          OUTCOMES: {key: (queries >= 1) & (queries < 502) for key in hits}},
    ...         {"model": "b", TEXT_MEAN: 50.0, TEXT_UNNAMED: None, OUTCOMES: hits}]
    >>> [(row["model"], row[RANK]) for row in rank_rows(rows)]  # a and b: 2 queries apart, tied
    [('a', '1-2'), ('b', '1-2'), ('published', 'n/a')]
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

from rococo_eval.catalog import TEXT_ATTACKS, gallery_key
from rococo_eval.reporting.significance import band_text, rank_bands

TEXT_MEAN = "text attacks R@1 (i2t, mean)"  # the board's sort column
TEXT_UNNAMED = "text attack, unnamed R@1 (i2t)"  # a published number of a text attack its source does not name
RANK = "rank"
OUTCOMES = "outcomes"  # a row's per-query R@1 hits by gallery key, or None
SORT_COLUMNS = (TEXT_MEAN, TEXT_UNNAMED)  # each sorts its own rows, in this order; rows with neither come last
BANDED = {TEXT_MEAN: tuple(gallery_key(attack, "image_to_text") for attack in TEXT_ATTACKS)}  # its galleries


def rank_rows(rows: Sequence[Mapping]) -> list[dict]:
    """The board's ``rows`` in its order, each with its :data:`RANK` band (text), as the module says.

    Raises:
        ValueError: rows whose per-query outcomes of a text attack have different lengths (other queries).
    """
    groups: list[list[dict]] = [[] for _ in range(len(SORT_COLUMNS) + 1)]
    for row in rows:
        place = next((number for number, column in enumerate(SORT_COLUMNS) if row.get(column) is not None),
                     len(SORT_COLUMNS))
        groups[place].append(dict(row))
    ordered = []
    for column, group in zip(SORT_COLUMNS + (None,), groups):
        if column is not None:
            group.sort(key=lambda row: -float(row[column]))
        banded = column in BANDED
        bands = rank_bands([_outcome(row, BANDED[column]) for row in group]) if banded else [None] * len(group)
        ordered += [{**row, RANK: band_text(band)} for row, band in zip(group, bands)]
    return ordered


def _outcome(row: Mapping, galleries: Sequence[str]) -> Optional[np.ndarray]:
    """Each query's share of ``galleries`` that ``row`` gets right at rank 1; None without every gallery's hits."""
    outcomes = row.get(OUTCOMES) or {}
    if any(outcomes.get(key) is None for key in galleries):
        return None
    return np.mean([np.asarray(outcomes[key], dtype=bool) for key in galleries], axis=0)
