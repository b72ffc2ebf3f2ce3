"""The Bayesian public-prior M1 (bayesian-dp-ngrams.txt, section 3): bound, noise, selection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fdptm.errors import BadInputError
from fdptm.mechanisms import bayesian_prior as bp
from fdptm.mechanisms.set_union import analytic_gaussian_sigma
from fdptm.privacy.noise import NoiseSource


def random_counts(rng: np.random.Generator, units: int, words: int, clip: int, hot: int = 0):
    """Units with random words and counts in [1, clip]; ``hot`` units all share word 0."""
    unit, word, count = [], [], []
    for u in range(units):
        size = int(rng.integers(1, min(words, 6) + 1))
        chosen = rng.choice(words, size=size, replace=False)
        if u < hot and 0 not in chosen:
            chosen[0] = 0
        unit += [u] * size
        word += chosen.tolist()
        count += rng.integers(1, clip + 1, size=size).tolist()
    return bp.UnitCounts(np.array(unit), np.array(word), np.array(count), words)


def without(counts: bp.UnitCounts, unit: int) -> bp.UnitCounts:
    return counts.select(np.arange(counts.unit.max() + 1) != unit)


@pytest.mark.parametrize(("scale", "clip"), [(0.01, 1), (0.1, 1), (0.5, 3), (1.0, 1), (5.0, 10)])
def test_global_bound_holds_for_every_unit_of_random_and_adversarial_datasets(scale, clip):
    """||r(D) - r(D - n)||_2 <= sqrt(W) max_N b(N) for every removable unit n."""
    rng = np.random.default_rng(7)
    bound = bp.per_word_bound(scale, clip)
    worst = 0.0
    for trial in range(40):
        # word 0 is shared by about C/S units (where b(N) peaks), with counts at C
        hot = min(60, math.ceil(clip / scale) + int(rng.integers(-1, 2)))
        counts = random_counts(rng, hot + 20, 12, clip, hot=max(hot, 1))
        if trial % 2:
            counts = bp.UnitCounts(counts.unit, counts.word, np.full_like(counts.count, clip), 12)
        r = bp.weighted_log_counts(counts, scale, clip)
        for n in np.unique(counts.unit):
            held = int((counts.unit == n).sum())
            change = np.linalg.norm(r - bp.weighted_log_counts(without(counts, n), scale, clip))
            assert change <= math.sqrt(held) * bound * (1 + 1e-12)
            worst = max(worst, change / (math.sqrt(held) * bound))
    assert worst > 0.5  # the bound is not vacuous on these datasets


def test_per_word_bound_formula():
    """S >= C: every word has weight 1 from one user on, so the bound is log(1 + C)."""
    assert bp.per_word_bound(1.0, 1) == pytest.approx(math.log(2))
    assert bp.per_word_bound(20.0, 10) == pytest.approx(math.log(11))
    # small S: about S (the w(N-1) log(1 + C/N) term) plus (S/C) log(C N + 1) at N = C/S
    assert bp.per_word_bound(0.01, 1) == pytest.approx(0.056, abs=1e-3)
    with pytest.raises(BadInputError):
        bp.per_word_bound(1e-9, 10)


def test_noise_scale_is_the_analytic_gaussian_of_the_global_bound_and_beats_theorem_1():
    params = bp.calibrate(0.5, 1e-5, scale=0.1, clip=1, max_words=20)
    assert params.sensitivity == pytest.approx(math.sqrt(20) * bp.per_word_bound(0.1, 1))
    assert params.sigma == analytic_gaussian_sigma(0.5, 1e-5, params.sensitivity)
    classical = math.sqrt(2 * math.log(1.25 / 1e-5)) * params.sensitivity / 0.5  # Theorem 1
    assert params.sigma <= classical


def test_released_noise_has_the_calibrated_spread():
    """(release - r) / sigma over 20,000 coordinates is N(0, 1): a chi-square test at 1e-3."""
    rng = np.random.default_rng(3)
    counts = random_counts(rng, 300, 20_000, 1)
    params = bp.calibrate(1.0, 1e-5, scale=0.1, clip=1, max_words=6)
    noisy = bp.release(counts, params, NoiseSource.create(11, 4))
    z = (noisy - bp.weighted_log_counts(counts, 0.1, 1)) / params.sigma
    n = len(z)
    chi2 = float((z**2).sum())
    assert stats.chi2.ppf(1e-3, n) < chi2 < stats.chi2.isf(1e-3, n)
    assert abs(z.mean()) < stats.norm.isf(1e-3 / 2) / math.sqrt(n)


def test_unseeded_release_goes_through_opendp():
    rng = np.random.default_rng(1)
    counts = random_counts(rng, 30, 50, 1)
    source = NoiseSource.create(None)
    bp.release(counts, bp.calibrate(1.0, 1e-5, scale=0.1, clip=1, max_words=6), source)
    assert source.secure and sum(source.draws.values()) == 50
    assert all(name.startswith("opendp") for name in source.draws)


def test_bounding_clamps_counts_and_keeps_at_most_w_words_per_unit():
    rng = np.random.default_rng(5)
    counts = random_counts(rng, 200, 40, 9)
    bounded = counts.bounded(2, 3, np.random.default_rng(0))
    assert bounded.count.max() <= 2
    assert np.bincount(bounded.unit).max() <= 3
    kept = set(zip(bounded.unit.tolist(), bounded.word.tolist(), strict=True))
    assert kept <= set(zip(counts.unit.tolist(), counts.word.tolist(), strict=True))


def test_posterior_is_a_distribution_and_rho_moves_it_between_prior_and_data():
    public = np.array([100.0, 10.0, 1.0, 0.0])
    prior = bp.prior_logits(public)
    data = np.log1p(np.array([0.0, 5.0, 50.0, 500.0]))
    assert bp.posterior(data, prior, 0.0) == pytest.approx(np.exp(prior) / np.exp(prior).sum())
    assert np.argmax(bp.posterior(data, prior, 1.0)) == 3
    assert bp.posterior(data, prior, 0.5).sum() == pytest.approx(1.0)
    with pytest.raises(BadInputError):
        bp.posterior(data, prior, 1.5)


def test_empirical_bayes_rho_trusts_data_only_beyond_the_noise():
    rng = np.random.default_rng(2)
    prior = rng.normal(size=5000)
    sigma = 1.0
    same = prior + rng.normal(scale=sigma, size=5000)  # no signal beyond the noise
    assert bp.empirical_bayes_rho(same, prior, sigma) < 0.1
    far = prior + rng.normal(scale=5.0, size=5000) + rng.normal(scale=sigma, size=5000)
    assert bp.empirical_bayes_rho(far, prior, sigma) == pytest.approx(25 / 26, abs=0.03)
    # pure noise: rho > 0 only when the sample variance exceeds its mean by two standard
    # errors, about 2.3% of seeds (without the margin: half); 400 seeds, binomial sd 0.75%
    loud = [
        bp.empirical_bayes_rho(prior[:300] + g.normal(scale=7.0, size=300), prior[:300], 7.0)
        for g in (np.random.default_rng(s) for s in range(400))
    ]
    assert np.mean(np.array(loud) > 0) < 0.023 + 4 * 0.0075


def test_selection_score_sensitivity_is_the_loss_cap_and_the_noise_is_2l_over_epsilon():
    """Removing any validation unit moves every candidate's score by at most L."""
    rng = np.random.default_rng(9)
    validation = random_counts(rng, 80, 30, 3)
    prior = rng.normal(size=30)
    noisy = rng.normal(size=30) * 2
    cap = 3.0
    for rho in (0.0, 0.3, 1.0):
        theta = bp.posterior(noisy, prior, rho)
        full = bp.clipped_losses(validation, theta, cap)
        for n in range(80):
            change = full - bp.clipped_losses(without(validation, n), theta, cap)
            assert -1e-9 <= change <= cap * (1 + 1e-12)
    chosen = bp.select_rho(noisy, prior, validation, (0.0, 0.5, 1.0), 0.5, NoiseSource.create(1))
    assert chosen.laplace_scale == pytest.approx(2 * chosen.loss_cap / 0.5)
    assert chosen.rho in (0.0, 0.5, 1.0)


def test_report_noisy_min_output_probabilities_obey_epsilon_on_neighbours():
    """P[k | D] <= e^eps P[k | D'] for the selection's real scores on neighbours built to be
    worst case: without the removed unit the two candidates tie; the unit's loss is ~0 under
    one and the cap L under the other. 400,000 Laplace draws, tolerance 4 binomial standard
    errors. The negative control (an 8x smaller noise scale) must fail the same check, so the
    check has the power to catch a noise scale that is too small."""
    prior = np.log(np.array([0.97, 0.01, 0.01, 0.01]))  # theta at rho = 0
    noisy = np.log(np.array([0.01, 0.01, 0.01, 0.97]))  # theta at rho = 1
    rhos, cap, eps = (0.0, 1.0), 3.0, 1.0
    units = np.arange(21)
    words = np.r_[np.zeros(10, int), np.full(10, 3), 0]  # unit 20 is the removed one
    with_unit = bp.UnitCounts(units, words, np.ones(21, int), 4)
    neighbour = without(with_unit, 20)
    rng = np.random.default_rng(0)

    def frequencies(counts: bp.UnitCounts, scale: float) -> np.ndarray:
        scores = [bp.clipped_losses(counts, bp.posterior(noisy, prior, r), cap) for r in rhos]
        draws = rng.laplace(0, scale, (400_000, 2))
        return np.bincount(np.argmin(scores + draws, axis=1), minlength=2) / len(draws)

    def within(scale: float) -> bool:
        p, q = frequencies(with_unit, scale), frequencies(neighbour, scale)
        tolerance = 4 * np.sqrt(np.maximum(p, q) / 400_000)
        return bool(
            np.all(p <= math.exp(eps) * q + tolerance)
            and np.all(q <= math.exp(eps) * p + tolerance)
        )

    assert within(2 * cap / eps)
    assert not within(cap / (4 * eps))


def test_brute_force_sensitivity_matches_recomputing_the_papers_f():
    """Algorithm 1's brute force (claimed-unproven) equals a direct recomputation."""
    rng = np.random.default_rng(8)
    counts = random_counts(rng, 25, 15, 3)
    scale, clip = 0.2, 3

    def f(cs: bp.UnitCounts) -> np.ndarray:
        c, n = cs.totals()
        x_hat = np.log1p(c) - np.log1p(c).mean()
        return bp.weights(n, scale, clip) * x_hat

    direct = max(np.linalg.norm(f(counts) - f(without(counts, n))) for n in range(25))
    assert bp.brute_force_sensitivity(counts, scale, clip) == pytest.approx(direct)


def test_the_bound_holds_after_truncation_to_w_words_with_a_word_at_its_peak():
    """Units with up to 30 words cut to W = 5, one word shared by about C/S units: removing
    any unit of the bounded data moves r by at most sqrt(W) max_N b(N)."""
    rng = np.random.default_rng(12)
    scale, clip, w = 0.05, 2, 5
    unit, word, count = [], [], []
    for u in range(60):
        chosen = rng.choice(40, size=int(rng.integers(1, 31)), replace=False)
        chosen = np.unique(np.r_[0, chosen])  # word 0 is held by every unit: N = 60
        unit += [u] * len(chosen)
        word += chosen.tolist()
        count += rng.integers(1, 6, len(chosen)).tolist()
    raw = bp.UnitCounts(np.array(unit), np.array(word), np.array(count), 40)
    bounded = raw.bounded(clip, w, np.random.default_rng(0))
    r = bp.weighted_log_counts(bounded, scale, clip)
    limit = math.sqrt(w) * bp.per_word_bound(scale, clip)
    worst = max(
        np.linalg.norm(r - bp.weighted_log_counts(without(bounded, n), scale, clip))
        for n in range(60)
    )
    assert worst <= limit
    with pytest.raises(ValueError, match="must be >= 1"):
        bp.UnitCounts(np.array([0]), np.array([1]), np.array([0]), 3).bounded(1, 1, rng)
    with pytest.raises(ValueError, match="must appear once"):
        bp.UnitCounts(np.array([0, 0]), np.array([1, 1]), np.array([1, 1]), 3).bounded(1, 1, rng)


def test_unit_counts_count_each_units_words_of_the_vocabulary_only():
    import pyarrow as pa

    from fdptm.tasks.vocabulary import unit_counts

    tokens = pa.table(
        {
            "doc_id": ["d1", "d2", "d3"],
            "author_id": ["a", "a", "b"],
            "tokens": [["x", "y", "x"], ["z", "q"], ["y", "q", "q"]],
        }
    )
    counts = unit_counts(tokens, ["x", "y", "z"])
    rows = (counts.unit.tolist(), counts.word.tolist(), counts.count.tolist())
    got = sorted(zip(*rows, strict=True))
    assert got == [(0, 0, 2), (0, 1, 1), (0, 2, 1), (1, 1, 1)]
    assert counts.n_words == 3
