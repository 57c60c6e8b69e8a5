"""Which differences of R@1 are real: paired tests on the same queries, their intervals, and rank bands.

Two models scored on the same queries are compared query by query (a *paired* comparison): each query's outcome
under model A beside its outcome under model B. This module is NumPy only (no SciPy), vectorised so that every pair
of a 200-row board is compared at once.

- An outcome that is a hit or a miss (a gallery's R@1 hit, a ``bool`` array) is compared with the **exact McNemar
  test**: among the *discordant* queries (a hit for one model, a miss for the other), the count where A wins is
  Binomial(discordant, 1/2) if the models are equally good; the two-sided p-value is twice the smaller tail (at most
  1), computed exactly as a regularised incomplete beta function in log space (:func:`mcnemar_p`). Its 95% interval
  of the difference is Newcombe's hybrid score interval for paired proportions (Newcombe 1998, method 10;
  :func:`newcombe_interval`), which stays inside [-1, 1] and does not collapse when few queries are discordant.
- An outcome that is a number (a mean of hits over several galleries, as the board's mean over the four text
  attacks; a per-query drop from clean to attacked) is compared with the **paired z test** on the per-query
  differences, and the normal interval of their mean (:func:`paired_z`): RoCOCO has 5,000 or 25,000 queries per
  gallery, where the normal approximation of a mean of bounded differences is very close.
- A row of a board is compared with every other row; its p-values are **Holm**-corrected across those comparisons
  (:func:`holm`), and its *rank band* (:func:`rank_bands`) runs from 1 + the number of rows significantly better to
  the number of rows not significantly worse (itself counted): rows that the queries cannot tell apart share ranks.

Example:
    >>> better = np.arange(1000) < 700  # a hit on 700 of 1,000 queries
    >>> worse = np.arange(1000) < 600
    >>> found = paired_difference(better, worse)
    >>> found.test, round(found.difference, 2), found.p_value < 1e-20
    ('exact McNemar', 10.0, True)
    >>> [band_text(band) for band in rank_bands([better, worse, better.copy(), None])]
    ['1-2', '3', '1-2', 'n/a']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Optional, Sequence

import numpy as np

ALPHA = 0.05  # a difference is significant when its (Holm-corrected) p-value is below this
CONFIDENCE = 0.95  # the intervals' coverage
MCNEMAR, PAIRED_Z = "exact McNemar", "paired z"
NOT_COMPARABLE = "n/a"  # what a band shows for a row without per-query outcomes
_TINY = 1e-300
_MAX_TERMS = 100_000  # far more than the continued fraction needs: under 100 terms at 25,000 discordant queries


@dataclass(frozen=True)
class PairedDifference:
    """A - B on the same queries, in percentage points, with its interval and two-sided p-value.

    Attributes:
        difference: mean outcome of A minus that of B, times 100 (R@1 points for hits).
        low, high: the :data:`CONFIDENCE` interval of ``difference``.
        p_value: the two-sided p-value of "no difference" (not corrected for other comparisons).
        test: :data:`MCNEMAR` (outcomes that are hits) or :data:`PAIRED_Z` (outcomes that are numbers).
        queries: how many queries were compared.
    """

    difference: float
    low: float
    high: float
    p_value: float
    test: str
    queries: int


def paired_difference(a, b, confidence: float = CONFIDENCE) -> PairedDifference:
    """Compare two models' per-query outcomes on the same queries: ``bool`` arrays (hits) with the exact McNemar
    test and Newcombe's interval, numbers with the paired z test.

    Raises:
        ValueError: ``a`` and ``b`` are not 1-D arrays of the same length, or are empty.

    Example:
        >>> found = paired_difference(np.array([True, True, False, True]), np.array([False, True, False, False]))
        >>> found.difference, round(found.p_value, 6), found.test
        (50.0, 0.5, 'exact McNemar')
        >>> paired_difference(np.array([1.0, 0.5]), np.array([0.5, 0.5])).test
        'paired z'
    """
    a, b = _paired(a, b)
    if a.dtype == bool and b.dtype == bool:
        only_a, only_b = int(np.count_nonzero(a & ~b)), int(np.count_nonzero(~a & b))
        both = int(np.count_nonzero(a & b))
        low, high = newcombe_interval(both, only_a, only_b, a.size - both - only_a - only_b, confidence)
        p_value = float(mcnemar_p(only_a, only_b))
        return PairedDifference(100.0 * (only_a - only_b) / a.size, 100.0 * float(low), 100.0 * float(high),
                                p_value, MCNEMAR, a.size)
    differences = a.astype(np.float64) - b.astype(np.float64)
    mean = float(differences.mean())
    spread = float(differences.std(ddof=1)) if a.size > 1 else 0.0
    p_value, low, high = paired_z(mean, spread, a.size, confidence)
    return PairedDifference(100.0 * mean, 100.0 * float(low), 100.0 * float(high), float(p_value), PAIRED_Z, a.size)


def mcnemar_p(only_a, only_b) -> np.ndarray:
    """The exact McNemar test's two-sided p-value for ``only_a`` queries won by A alone and ``only_b`` by B alone:
    ``min(1, 2 P(X <= min(only_a, only_b)))`` for X ~ Binomial(only_a + only_b, 1/2), elementwise.

    Example:
        >>> mcnemar_p([10, 5, 0], [0, 5, 0]).round(6).tolist()  # 2 / 2**10; a tie; no discordant query
        [0.001953, 1.0, 1.0]
    """
    only_a, only_b = np.broadcast_arrays(np.asarray(only_a, dtype=np.float64), np.asarray(only_b, dtype=np.float64))
    total, fewer = only_a + only_b, np.minimum(only_a, only_b)
    p_value = np.ones(total.shape)
    tail = 2 * fewer < total - 1  # otherwise P(X <= fewer) >= 1/2 and the p-value is 1
    p_value[tail] = np.minimum(1.0, 2.0 * _binomial_half_cdf(fewer[tail], total[tail]))
    return p_value


def newcombe_interval(both, only_a, only_b, neither, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Newcombe's hybrid score interval (1998, method 10) of the difference of two paired proportions, from the
    2x2 table of queries: hit by both, by A only, by B only, by neither; elementwise, as fractions.

    Example:
        >>> low, high = newcombe_interval(36, 12, 2, 0)  # Newcombe's first example: a difference of 0.2
        >>> round(float(low), 4), round(float(high), 4)
        (0.0569, 0.3404)
    """
    both, only_a, only_b, neither = (np.asarray(count, dtype=np.float64) for count in (both, only_a, only_b, neither))
    total = both + only_a + only_b + neither
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    first, second = (both + only_a) / total, (both + only_b) / total
    low_1, high_1 = _wilson(first, total, z)
    low_2, high_2 = _wilson(second, total, z)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    with np.errstate(invalid="ignore", divide="ignore"):
        phi = np.where(margins > 0, (both * neither - only_a * only_b) / np.sqrt(margins), 0.0)
    below = np.sqrt(np.maximum(0.0, (first - low_1) ** 2 - 2 * phi * (first - low_1) * (high_2 - second)
                               + (high_2 - second) ** 2))
    above = np.sqrt(np.maximum(0.0, (high_1 - first) ** 2 - 2 * phi * (high_1 - first) * (second - low_2)
                               + (second - low_2) ** 2))
    return first - second - below, first - second + above


def paired_z(mean, spread, count, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The paired z test of a mean per-query difference ``mean`` (standard deviation ``spread``, over ``count``
    queries): its two-sided p-value and the normal interval of the mean, elementwise. Differences that are all
    equal (``spread`` 0) give p = 1 when they are 0, else p = 0.

    Example:
        >>> p_value, low, high = paired_z(0.1, 0.5, 400)
        >>> round(float(p_value), 5), round(float(low), 3), round(float(high), 3)
        (6e-05, 0.051, 0.149)
    """
    mean, spread, count = np.broadcast_arrays(*(np.asarray(value, dtype=np.float64) for value in (mean, spread, count)))
    error = spread / np.sqrt(count)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(error > 0, np.abs(mean) / np.where(error > 0, error, 1.0), np.where(mean == 0, 0.0, np.inf))
    p_value = np.asarray(_erfc(z / math.sqrt(2)), dtype=np.float64)
    half = NormalDist().inv_cdf((1 + confidence) / 2) * error
    return p_value, mean - half, mean + half


def holm(p_values) -> np.ndarray:
    """Holm's step-down correction of each row's p-values (the last axis; NaN: no comparison, left NaN).

    Example:
        >>> holm([[0.01, 0.04, 0.03], [0.5, np.nan, 0.01]]).round(3).tolist()
        [[0.03, 0.06, 0.06], [0.5, nan, 0.02]]
    """
    p_values = np.atleast_2d(np.asarray(p_values, dtype=np.float64))
    order = np.argsort(p_values, axis=-1, kind="stable")  # NaN sorts last
    ordered = np.take_along_axis(p_values, order, axis=-1)
    tested = np.count_nonzero(~np.isnan(p_values), axis=-1, keepdims=True)
    scaled = ordered * (tested - np.arange(p_values.shape[-1]))
    adjusted = np.minimum(1.0, np.fmax.accumulate(scaled, axis=-1))
    adjusted[np.isnan(ordered)] = np.nan
    corrected = np.empty_like(adjusted)
    np.put_along_axis(corrected, order, adjusted, axis=-1)
    return corrected


def pairwise_p_values(outcomes) -> np.ndarray:
    """The two-sided p-value of every pair of rows of ``outcomes`` (rows x queries): the exact McNemar test for a
    ``bool`` array, the paired z test otherwise; NaN on the diagonal. One matrix product counts every pair.

    Example:
        >>> pairwise_p_values(np.array([[True] * 12, [False] * 12])).round(5).tolist()
        [[nan, 0.00049], [0.00049, nan]]
    """
    outcomes = np.asarray(outcomes)
    values = outcomes.astype(np.float64)
    count = values.shape[1]
    products = values @ values.T  # exact: sums of small whole numbers
    if outcomes.dtype == bool:
        hits = values.sum(axis=1)
        p_values = mcnemar_p(hits[:, None] - products, hits[None, :] - products)
    else:
        sums, squares = values.sum(axis=1), np.einsum("ij,ij->i", values, values)
        mean = (sums[:, None] - sums[None, :]) / count
        total_squares = squares[:, None] + squares[None, :] - 2 * products
        spread = np.sqrt(np.maximum(0.0, total_squares - count * mean**2) / max(count - 1, 1))
        p_values = paired_z(mean, spread, count)[0]
    np.fill_diagonal(p_values, np.nan)
    return p_values


def rank_bands(outcomes: Sequence[Optional[np.ndarray]], alpha: float = ALPHA) -> list[Optional[tuple[int, int]]]:
    """Each row's rank band ``(best, worst)`` among the rows that have outcomes, or None for a row without (None).

    A row's outcomes are its per-query outcomes on the board's sort column, the same queries in the same order for
    every row: hits (``bool``) or numbers (a mean of hits over galleries). Each row is compared with every other
    (:func:`pairwise_p_values`), its p-values Holm-corrected across those comparisons (:func:`holm`); ``best`` is
    1 + the rows with a higher mean and a corrected p-value below ``alpha``, ``worst`` the number of rows (itself
    among them) less the rows with a lower mean and a corrected p-value below ``alpha``.

    Raises:
        ValueError: rows whose outcomes have different lengths (other queries), naming them.

    Example:
        >>> queries = np.arange(2000)
        >>> rank_bands([queries < 1000, (queries >= 50) & (queries < 1060), None, queries < 1300])
        [(2, 3), (2, 3), None, (1, 1)]
    """
    present = [index for index, row in enumerate(outcomes) if row is not None]
    bands: list[Optional[tuple[int, int]]] = [None] * len(outcomes)
    if not present:
        return bands
    lengths = {index: np.asarray(outcomes[index]).shape for index in present}
    if len(set(lengths.values())) > 1 or len(next(iter(lengths.values()))) != 1:
        raise ValueError(f"`outcomes` must be 1-D arrays over the same queries, got shapes by row {lengths}")
    kinds = {np.asarray(outcomes[index]).dtype == bool for index in present}
    stacked = np.stack([np.asarray(outcomes[index], dtype=bool if kinds == {True} else np.float64)
                        for index in present])
    means = stacked.mean(axis=1)
    significant = holm(pairwise_p_values(stacked)) < alpha  # NaN (the diagonal) compares False
    better = np.count_nonzero(significant & (means[None, :] > means[:, None]), axis=1)
    worse = np.count_nonzero(significant & (means[None, :] < means[:, None]), axis=1)
    for position, index in enumerate(present):
        bands[index] = (1 + int(better[position]), len(present) - int(worse[position]))
    return bands


def band_text(band: Optional[tuple[int, int]]) -> str:
    """A band as a board shows it: ``"2"``, ``"1-3"``, or :data:`NOT_COMPARABLE` for None.

    Example:
        >>> band_text((1, 3)), band_text((2, 2)), band_text(None)
        ('1-3', '2', 'n/a')
    """
    if band is None:
        return NOT_COMPARABLE
    return str(band[0]) if band[0] == band[1] else f"{band[0]}-{band[1]}"


def _paired(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 1 or a.shape != b.shape or not a.size:
        raise ValueError(f"`a` and `b` must be per-query outcomes of the same queries (1-D, same length, not empty), "
                         f"got shapes {a.shape} and {b.shape}")
    return a, b


def _wilson(share, total, z) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval of a proportion."""
    scale = 1 + z**2 / total
    centre = (share + z**2 / (2 * total)) / scale
    half = z * np.sqrt(share * (1 - share) / total + z**2 / (4 * total**2)) / scale
    return centre - half, centre + half


_lgamma = np.frompyfunc(math.lgamma, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def _binomial_half_cdf(fewer: np.ndarray, total: np.ndarray) -> np.ndarray:
    """P(X <= fewer) for X ~ Binomial(total, 1/2), where 2 fewer < total - 1: the regularised incomplete beta
    function I_{1/2}(total - fewer, fewer + 1), its prefactor in log space, its continued fraction by Lentz's method
    (Numerical Recipes, 6.4), which converges there."""
    a, b, x = total - fewer, fewer + 1, 0.5
    log_front = (_lgamma(a + b) - _lgamma(a) - _lgamma(b)).astype(np.float64) + (a + b) * math.log(x)
    before, after = np.ones_like(a), 1 - (a + b) * x / (a + 1)
    after = 1 / np.where(np.abs(after) < _TINY, _TINY, after)
    fraction = after.copy()
    for term in range(1, _MAX_TERMS):
        for numerator in (term * (b - term) * x / ((a + 2 * term - 1) * (a + 2 * term)),
                          -(a + term) * (a + b + term) * x / ((a + 2 * term) * (a + 2 * term + 1))):
            after = 1 + numerator * after
            after = 1 / np.where(np.abs(after) < _TINY, _TINY, after)
            before = 1 + numerator / before
            before = np.where(np.abs(before) < _TINY, _TINY, before)
            step = after * before
            fraction *= step
        if np.all(np.abs(step - 1) < 1e-15):
            return np.exp(log_front) * fraction / a
    raise ArithmeticError(f"the binomial tail did not converge in {_MAX_TERMS} terms")
