"""The paired tests, intervals, Holm's correction and rank bands, each against a slow, obviously-correct version."""

import math
from fractions import Fraction

import numpy as np
import pytest

from rococo_eval.reporting.significance import (
    MCNEMAR,
    PAIRED_Z,
    holm,
    mcnemar_p,
    newcombe_interval,
    paired_difference,
    pairwise_p_values,
    rank_bands,
)


def exact_mcnemar(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar by summing the binomial terms as fractions."""
    total, fewer = only_a + only_b, min(only_a, only_b)
    tail = Fraction(sum(math.comb(total, j) for j in range(fewer + 1)), 2**total)
    return float(min(Fraction(1), 2 * tail))


def log_space_mcnemar(only_a: int, only_b: int) -> float:
    """The same for counts too large for fractions: each term in log space, summed with fsum."""
    total, fewer = only_a + only_b, min(only_a, only_b)
    terms = [math.exp(math.lgamma(total + 1) - math.lgamma(j + 1) - math.lgamma(total - j + 1) - total * math.log(2))
             for j in range(fewer + 1)]
    return min(1.0, 2 * math.fsum(terms))


def test_mcnemar_is_the_exact_binomial_tail():
    pairs = [(a, b) for a in range(0, 61) for b in range(0, 61)]
    found = mcnemar_p([a for a, _ in pairs], [b for _, b in pairs])
    expected = [exact_mcnemar(a, b) for a, b in pairs]
    np.testing.assert_allclose(found, expected, rtol=1e-11, atol=0)


@pytest.mark.parametrize("only_a, only_b", [(1200, 1300), (1200, 1400), (12000, 12600), (3, 24997), (7000, 7001)])
def test_mcnemar_stays_exact_at_rococos_sizes(only_a, only_b):
    """Up to 25,000 discordant queries (a text-to-image gallery): p-values from 1 down to far below Holm's
    thresholds, each within a relative 1e-9 of the log-space sum."""
    assert mcnemar_p(only_a, only_b) == pytest.approx(log_space_mcnemar(only_a, only_b), rel=1e-9, abs=1e-300)


def test_the_paired_interval_covers_the_difference_95_times_in_100():
    """Newcombe's interval, on 4,000 simulated tables of 300 queries with a known difference of 0.05."""
    rng = np.random.default_rng(7)
    cells = rng.multinomial(300, [0.55, 0.10, 0.05, 0.30], size=4000)  # both, A only, B only, neither
    low, high = newcombe_interval(*cells.T)
    covered = np.mean((low <= 0.05) & (0.05 <= high))
    assert 0.935 < covered < 0.965
    estimate = (cells[:, 1] - cells[:, 2]) / 300
    assert np.all((low <= estimate) & (estimate <= high) & (low >= -1) & (high <= 1))


def test_holm_is_the_step_down_of_a_loop():
    rng = np.random.default_rng(3)
    p_values = rng.uniform(0, 0.1, size=(20, 9)) ** 2
    p_values[rng.uniform(size=p_values.shape) < 0.2] = np.nan
    expected = np.full_like(p_values, np.nan)
    for row, values in enumerate(p_values):
        tested = np.flatnonzero(~np.isnan(values))
        running = 0.0
        for step, index in enumerate(sorted(tested, key=lambda i: values[i])):
            running = max(running, min(1.0, (len(tested) - step) * values[index]))
            expected[row, index] = running
    np.testing.assert_allclose(holm(p_values), expected, equal_nan=True)


@pytest.mark.parametrize("dtype", [bool, np.float64])
def test_every_pair_at_once_is_each_pair_alone(dtype):
    rng = np.random.default_rng(11)
    rates = rng.uniform(0.3, 0.7, size=8)
    hits = rng.uniform(size=(8, 4, 500)) < rates[:, None, None]
    outcomes = hits[:, 0] if dtype is bool else hits.mean(axis=1)  # a gallery's hits, or a mean over four
    found = pairwise_p_values(outcomes)
    for i in range(8):
        for j in range(8):
            if i != j:
                alone = paired_difference(outcomes[i], outcomes[j])
                assert alone.test == (MCNEMAR if dtype is bool else PAIRED_Z)
                assert found[i, j] == pytest.approx(alone.p_value, rel=1e-9, abs=1e-300)
    assert np.isnan(np.diag(found)).all()


def planted_rows(queries=5000, seed=5):
    """Four models' hits on the same queries: A and B 3 points apart (A wins 250 queries alone, B 100: p about
    1e-15), B and C 0.2 points apart (C wins 60 alone, B 50: p about 0.4), D without per-query outcomes."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(queries)
    b = np.zeros(queries, dtype=bool)
    b[order[:3000]] = True
    a = b.copy()
    a[order[3000:3250]] = True  # won by A alone
    a[order[:100]] = False  # won by B alone
    c = b.copy()
    c[order[3250:3310]] = True
    c[order[100:150]] = False
    return {"A": a, "B": b, "C": c, "D": None}


def test_planted_differences_are_found_and_ties_are_not():
    rows = planted_rows()
    real = paired_difference(rows["A"], rows["B"])
    assert real.difference == pytest.approx(3.0) and real.p_value < 1e-10 and 0 < real.low < 3.0 < real.high
    tie = paired_difference(rows["C"], rows["B"])
    assert tie.difference == pytest.approx(0.2) and tie.p_value > 0.3 and tie.low < 0 < tie.high
    assert rank_bands(list(rows.values())) == [(1, 1), (2, 3), (2, 3), None]


def test_a_band_of_a_mean_column_uses_the_paired_z_test():
    rows = planted_rows()
    shares = {name: None if hits is None else np.stack([hits, hits, np.roll(hits, 1), hits]).mean(axis=0)
              for name, hits in rows.items()}
    assert paired_difference(shares["A"], shares["B"]).test == PAIRED_Z
    assert rank_bands(list(shares.values())) == [(1, 1), (2, 3), (2, 3), None]


def test_rows_of_other_queries_are_refused_by_shape():
    with pytest.raises(ValueError, match=r"same queries, got shapes by row \{0: \(5,\), 2: \(6,\)\}"):
        rank_bands([np.ones(5, dtype=bool), None, np.ones(6, dtype=bool)])
    with pytest.raises(ValueError, match="`a` and `b` must be per-query outcomes"):
        paired_difference(np.ones(3, dtype=bool), np.ones(4, dtype=bool))
