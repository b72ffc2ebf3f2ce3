"""M2 dp-vi: E-step kernel, per-unit clipping (sensitivity C), noise scale, Poisson sampling,
accounting (calibration, basic composition, event dict), validation and recovery."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest
from scipy import special, stats

from fdptm.errors import BadInputError
from fdptm.evaluation.matching import matched_distance
from fdptm.evaluation.synthetic import generate_lda
from fdptm.kernels import vi
from fdptm.mechanisms import dp_vi
from fdptm.mechanisms.guarantee import APPROXIMATE_DP
from fdptm.mechanisms.lda import Corpus, subset
from fdptm.parallel import Placed
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource

DELTA = 1e-5


def params(epsilon=1.0, *, adjacency=Adjacency.AUTHOR, iterations=10, n_topics=4, **options):
    return dp_vi.dp_vi_params(
        epsilon,
        DELTA,
        n_topics=n_topics,
        adjacency=adjacency,
        max_docs_per_author=4,
        iterations=iterations,
        **options,
    )


@pytest.fixture(scope="module")
def small():
    """60 authors with 4 documents each: strong topics, so authors' statistics differ."""
    return generate_lda(240, 120, 4, doc_length=30, eta=0.02, docs_per_author=4, seed=7)


def values(stats_units: np.ndarray, p: dp_vi.DpViParams) -> np.ndarray:
    """A clipped statistic in grid units (int64) as values."""
    return stats_units * dp_vi.statistic_grid(p.clip)


def unit_bound(p: dp_vi.DpViParams) -> int:
    """floor(C / g): the largest L2 norm of a unit's term, in grid units."""
    return dp_vi.unit_bound(p.clip)


def int_norm_squared(x: np.ndarray) -> int:
    """||x||_2^2 of an integer array, exactly (Python integers)."""
    return sum(int(v) * int(v) for v in x.ravel())


def replace_warm(p: dp_vi.DpViParams, warm_start: float = 0.5) -> dp_vi.DpViParams:
    return dataclasses.replace(p, warm_start=warm_start)


def random_beta(n_words: int, n_topics: int, seed: int) -> np.ndarray:
    lam = np.random.default_rng(seed).gamma(1.0, 1.0, (n_words, n_topics)) + 0.01
    return dp_vi.exp_elog_beta(lam)


# --- the variational kernel -------------------------------------------------------------


def scratch(n_topics: int, n_words: int) -> tuple[np.ndarray, ...]:
    """``doc_e_step``'s scratch arrays: acc, powers, columns, phinorms."""
    return (
        np.empty(n_topics),
        np.empty(n_topics),
        np.empty((n_topics, n_words)),
        np.empty(n_words),
    )


def test_digamma_matches_scipy():
    x = np.concatenate([np.geomspace(1e-4, 1e4, 400), np.linspace(0.5, 12, 200)])
    ours = np.array([vi.digamma(v) for v in x])
    np.testing.assert_allclose(ours, special.digamma(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_topics", [5, 10, 24])
def test_theta_weights_match_scipy_from_tiny_to_int64_sized_gammas(n_topics):
    """The fused exp(psi(gamma_k)) (one exp per topic, no log): exp(E[log theta_k]) times
    exp(psi(sum gamma)). With fewer than 8 topics the exps are math.exp's, from 8 on the
    kernel's own vectorised exp; both agree with scipy to a relative 1e-12, and the own exp
    gives 0 where the exponent is below -708 (exp(psi) under about 2e-307; gamma 1/720: psi
    about -720.6), where math.exp's results turn subnormal."""
    rng = np.random.default_rng(4)
    edge = [1e-3, 1 / 720, 1 / 690, 0.1, 5.9, 6.0, 6.1, 1e5, 1e9, 9e18]
    values = np.concatenate([np.geomspace(2e-3, 1e3, 40), edge, rng.gamma(0.5, 4.0, 2000)])
    values = np.concatenate([values, np.full(-len(values) % n_topics, 1.0)])
    psi = special.digamma(values)
    assert not np.any((psi > -712) & (psi < -700))  # away from the floor's edge
    tiny = psi < -706
    assert tiny[values == 1 / 720].all() and np.exp(psi[values == 1 / 720]) > 0
    ours = np.empty_like(values)
    for start in range(0, len(values), n_topics):
        part = slice(start, start + n_topics)
        vi._theta_weights(values[part], ours[part], np.empty(n_topics))
    np.testing.assert_allclose(ours[~tiny], np.exp(psi[~tiny]), rtol=1e-12, atol=0)
    if n_topics >= vi._VECTOR_TOPICS:
        assert np.all(ours[tiny] == 0)
    else:
        assert np.all(ours[tiny] < 1e-300)


@pytest.mark.parametrize("k", [5, 10])
def test_e_step_reaches_the_fixed_point_of_the_coordinate_updates(k):
    """With math.exp's weights (k = 5) and the kernel's vectorised ones (k = 10)."""
    rng = np.random.default_rng(3)
    beta = random_beta(50, k, seed=1)
    words = np.sort(rng.choice(50, 12, replace=False)).astype(np.int64)
    counts = rng.integers(1, 4, 12).astype(np.float64)
    gamma, eth = np.empty(k), np.empty(k)
    vi.doc_e_step(words, counts, beta, 0.1, 500, 1e-12, gamma, eth, False, *scratch(k, 12))
    phi = eth[None, :] * beta[words]
    phi /= phi.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(gamma, 0.1 + counts @ phi, rtol=1e-8)
    elog = special.digamma(gamma) - special.digamma(gamma.sum())  # eth up to a common factor
    np.testing.assert_allclose(eth / eth.sum(), np.exp(elog) / np.exp(elog).sum(), rtol=1e-10)


@pytest.mark.parametrize("k", [5, 10])
def test_an_e_step_on_no_word_or_one_word_and_on_too_small_a_scratch(k):
    """No word: gamma stays alpha. One word: every token goes to the topics in proportion
    to eth_k beta_wk, the fixed point. Scratch smaller than the document: a ValueError,
    not a write past its end (numba checks no bounds)."""
    beta = random_beta(20, k, seed=5)
    gamma, eth = np.empty(k), np.empty(k)
    empty = np.empty(0, dtype=np.int64)
    vi.doc_e_step(empty, np.empty(0), beta, 0.1, 50, 1e-12, gamma, eth, False, *scratch(k, 0))
    assert np.array_equal(gamma, np.full(k, 0.1))
    one = np.array([7], dtype=np.int64)
    vi.doc_e_step(one, np.array([3.0]), beta, 0.1, 500, 1e-12, gamma, eth, False, *scratch(k, 1))
    phi = eth * beta[7] / (eth * beta[7]).sum()
    np.testing.assert_allclose(gamma, 0.1 + 3.0 * phi, rtol=1e-8)
    words = np.arange(4, dtype=np.int64)
    acc, powers, columns, phinorms = scratch(k, 4)
    small = [(acc, powers, columns, phinorms[:3])]
    if k >= vi._VECTOR_TOPICS:
        small.append((acc, powers, columns[:, :3], phinorms))
    for args in small:
        with pytest.raises(ValueError, match="scratch smaller than the document"):
            vi.doc_e_step(words, np.ones(4), beta, 0.1, 5, 1e-3, gamma, eth, False, *args)


@pytest.mark.parametrize("k", [4, 10])
def test_a_warm_e_step_from_the_fixed_point_stays_there_and_matches_a_cold_one(k):
    """A warm start (the document's previous gamma) from the fixed point a cold start
    reached stops after one round without moving (k = 10: the kernel's own exps and the
    column sums). At k = 4 a warm start from a random gamma also reaches the cold one's
    fixed point; at k = 10 this document's ascent has other fixed points, which a random
    start can reach."""
    rng = np.random.default_rng(8)
    beta = random_beta(40, k, seed=3)
    words = np.sort(rng.choice(40, 9, replace=False)).astype(np.int64)
    counts = rng.integers(1, 3, 9).astype(np.float64)
    cold, eth = np.empty(k), np.empty(k)
    vi.doc_e_step(words, counts, beta, 0.1, 500, 1e-12, cold, eth, False, *scratch(k, 9))
    warm = cold.copy()
    vi.doc_e_step(words, counts, beta, 0.1, 1, 1e-12, warm, np.empty(k), True, *scratch(k, 9))
    np.testing.assert_allclose(warm, cold, rtol=1e-9)
    if k == 4:
        start = rng.gamma(1.0, 3.0, k) + 0.1
        vi.doc_e_step(words, counts, beta, 0.1, 500, 1e-12, start, eth, True, *scratch(k, 9))
        np.testing.assert_allclose(start, cold, rtol=1e-6)


def test_warm_starts_begin_at_the_stated_iteration_and_never_with_sampling():
    """first_warm is a function of the public fields alone (calibrated once, then varied)."""
    p = params(iterations=20)
    assert p.first_warm is None  # off by default

    def first(**fields):
        return dataclasses.replace(p, **fields).first_warm

    assert first(warm_start=0.5) == 10
    assert first(iterations=5, warm_start=0.5) == 3
    assert first(warm_start=0.0) == 1
    assert first(iterations=1, warm_start=0.0) is None
    assert first(warm_start=0.5, sampling_rate=0.5) is None
    assert first(iterations=25, warm_start=0.28) == 7  # not 8 by rounding
    assert params(iterations=2, warm_start=0.5).to_dict()["warm_start"] == 0.5


@pytest.mark.parametrize(
    ("q", "expected"), [(1.0, [False, False, True, True, True, True]), (0.5, [False] * 6)]
)
def test_training_keeps_gammas_from_the_iteration_before_the_first_warm_one(
    small, monkeypatch, q, expected
):
    """train_dp_vi asks for kept gammas from iteration first_warm - 1 (their first, cold,
    round) on, and never with Poisson sampling; the statistic refuses warm starts under a
    partial inclusion mask."""
    flags = []
    real = dp_vi.noisy_statistics

    def spy(data, beta, p, noise, placed=None, warm=False):
        flags.append(warm)
        return real(data, beta, p, noise, placed, warm)

    monkeypatch.setattr(dp_vi, "noisy_statistics", spy)
    # only the control flow is under test: q is set after a q = 1 calibration (cheaper)
    p = dataclasses.replace(params(iterations=6, warm_start=0.5), sampling_rate=q)
    dp_vi.train_dp_vi(small.corpus, 4, p, NoiseSource.create(2))
    assert flags == expected
    data = dp_vi.prepare(small.corpus, Adjacency.AUTHOR)
    with pytest.raises(ValueError, match="every unit"):
        dp_vi.clipped_statistics(
            data, random_beta(120, 4, 1), params(), ~only(3, data.n_units), warm=True
        )


def test_with_warm_starts_removing_an_author_still_moves_the_sum_by_their_clipped_term(small):
    """Three iterations with kept gammas, on D and on D without author a (removed from the
    corpus, so the units are renumbered and the fixed ranges cut elsewhere): the last
    iteration's sums differ by a's own warm clipped term alone (every other author's kept
    gammas, and so their terms, are the same in both runs): exactly, in the integer sum,
    and that term's norm is at most floor(C / g) grid units."""
    p = params(clip=3.0)
    betas = [random_beta(120, 4, 6), random_beta(120, 4, 7), random_beta(120, 4, 8)]

    def last_sum(corpus: Corpus) -> np.ndarray:
        data = dp_vi.prepare(corpus, Adjacency.AUTHOR)
        everyone = np.ones(data.n_units, dtype=bool)
        with dp_vi.placed_shards(data, betas[0].shape) as placed:
            for beta in betas:
                out, _ = dp_vi.clipped_statistics(data, beta, p, everyone, placed, warm=True)
        return out

    c = small.corpus
    full = last_sum(c)
    data = dp_vi.prepare(c, Adjacency.AUTHOR)
    cold_full, _ = dp_vi.clipped_statistics(data, betas[2], p, np.ones(data.n_units, bool))
    assert not np.allclose(full, cold_full, rtol=1e-6)  # the warm start was used
    for a in (0, 17, 59):
        alone = last_sum(subset(c, c.doc_author == a))
        assert 0 < int_norm_squared(alone) <= unit_bound(p) ** 2
        assert np.array_equal(full - last_sum(subset(c, c.doc_author != a)), alone)


def test_unclipped_statistics_give_each_word_its_token_count(small):
    """phi sums to 1 over topics, so ||S||_1 per word is the word's count (no clipping)."""
    data = dp_vi.prepare(small.corpus, Adjacency.AUTHOR)
    p = params(clip=1024.0)  # above every author's norm (at most its 120 tokens)
    included = np.ones(data.n_units, dtype=bool)
    stats_, norms = dp_vi.clipped_statistics(data, random_beta(120, 4, 0), p, included)
    assert stats_.dtype == np.int64 and norms.max() < p.clip
    counts = np.bincount(small.corpus.words, minlength=120)
    # each of a word's (author, topic) terms is rounded down by less than one grid unit
    shortfall = counts - values(stats_, p).sum(axis=1)
    bound = data.n_units * 4 * dp_vi.statistic_grid(p.clip)
    assert np.all(shortfall >= 0) and np.all(shortfall < bound)
    assert np.all(norms > 0)


# --- clipping and sensitivity -----------------------------------------------------------


def only(unit: int, n_units: int) -> np.ndarray:
    mask = np.zeros(n_units, dtype=bool)
    mask[unit] = True
    return mask


def test_prepare_compresses_each_document_to_its_distinct_words_and_counts(small):
    """The numba triples equal one np.unique over (document, word) keys."""
    c = small.corpus
    data = dp_vi.prepare(c, Adjacency.DOCUMENT)
    doc = np.repeat(np.arange(c.n_docs), np.diff(c.doc_ptr))
    keys, counts = np.unique(doc * c.n_words + c.words, return_counts=True)
    assert np.array_equal(data.words, keys % c.n_words)
    assert np.array_equal(data.counts, counts)
    assert np.array_equal(np.diff(data.doc_ptr), np.bincount(keys // c.n_words, minlength=c.n_docs))


@pytest.mark.parametrize("k", [4, 10])
def test_statistics_and_training_do_not_depend_on_the_thread_count(small, monkeypatch, k):
    """The chunked statistic equals the one-unit-at-a-time sum exactly (integers), and is
    the same on one thread and on two; so is a seeded training (issue 13: results must not
    depend on the number of workers)."""
    from fdptm.parallel import workers

    data = dp_vi.prepare(small.corpus, Adjacency.AUTHOR)
    p = params(clip=3.0, n_topics=k)
    beta = random_beta(120, k, 0)
    included = np.random.default_rng(5).random(data.n_units) < 0.7
    outputs = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("FDPTM_THREADS", threads)
        assert workers() == min(int(threads), len(os.sched_getaffinity(0)))
        stats_, norms = dp_vi.clipped_statistics(data, beta, p, included)
        phi = dp_vi.train_dp_vi(small.corpus, k, p, NoiseSource.create(11))
        warm = dp_vi.train_dp_vi(small.corpus, k, replace_warm(p), NoiseSource.create(11))
        outputs[threads] = (stats_, norms, phi, warm)
    for a, b in zip(outputs["1"], outputs["2"], strict=True):
        assert np.array_equal(a, b)
    one_by_one = sum(
        dp_vi.clipped_statistics(data, beta, p, only(u, data.n_units) & included)[0]
        for u in range(data.n_units)
    )
    assert np.array_equal(outputs["1"][0], one_by_one)  # an exact sum, in any order


@pytest.mark.parametrize("k", [4, 10])
def test_each_authors_clipped_statistic_has_norm_at_most_C(small, k):
    data = dp_vi.prepare(small.corpus, Adjacency.AUTHOR)
    assert data.n_units == 60
    p = params(clip=3.0, n_topics=k)
    beta = random_beta(120, k, 2)
    clipped_any = False
    for a in range(data.n_units):
        s_a, norms = dp_vi.clipped_statistics(data, beta, p, only(a, data.n_units))
        assert int_norm_squared(s_a) <= unit_bound(p) ** 2  # exact, in integers
        norm = np.linalg.norm(values(s_a, p))
        assert norm <= p.clip
        # rounding each of at most V k entries down by < g loses < g sqrt(V k) in norm
        slack = dp_vi.statistic_grid(p.clip) * math.sqrt(s_a.size)
        assert min(norms[a], p.clip) - slack <= norm
        clipped_any |= norms[a] > p.clip
    assert clipped_any  # the bound was exercised, not vacuous


@pytest.mark.parametrize("k", [4, 10])
def test_a_statistic_that_is_not_finite_is_refused_not_added(small, k):
    """np.int64 of NaN is INT64_MIN, whose square wraps to 0 in the exact norm check: a NaN
    in an E-step (a NaN topic factor here) must stop the kernel, never reach the sum."""
    data = dp_vi.prepare(small.corpus, Adjacency.AUTHOR)
    beta = random_beta(120, k, 2)
    beta[:, 1] = np.nan
    with pytest.raises(ValueError, match="not finite"):
        dp_vi.clipped_statistics(data, beta, params(clip=3.0, n_topics=k), only(0, data.n_units))


def test_a_clip_that_is_no_whole_number_of_grid_units_still_bounds_every_term(small):
    """At C = 0.1, C / g is not a whole number, so a term clipped at C / g and floored entry
    by entry can exceed floor(C / g): with one topic S_u is the unit's word counts, and for
    counts (1, 1) the floored clipped term does exceed it, so the kernel's exact check must
    cut it (this test fails without that loop); on the small corpus every author's term
    stays within the bound too."""
    p = params(clip=0.1, n_topics=1)
    grid, bound = dp_vi.statistic_grid(p.clip), unit_bound(p)
    assert p.clip / grid != bound
    naive = np.floor(np.array([1.0, 1.0]) * (p.clip / math.sqrt(2.0)) / grid).astype(np.int64)
    assert int_norm_squared(naive) > bound**2  # what a plain floor would add
    two_words = Corpus(np.array([0, 2]), np.array([0, 1]), 2, np.array([0]))
    data = dp_vi.prepare(two_words, Adjacency.AUTHOR)
    term, norms = dp_vi.clipped_statistics(data, random_beta(2, 1, 0), p, np.ones(1, bool))
    assert norms[0] == pytest.approx(math.sqrt(2.0))
    assert int_norm_squared(term) <= bound**2
    assert np.all(naive - term.ravel() <= 2)  # cut by a few units, not more
    data = dp_vi.prepare(small.corpus, Adjacency.AUTHOR)
    beta = random_beta(120, 4, 3)
    wide = params(clip=0.1)
    for a in range(data.n_units):
        s_a, _ = dp_vi.clipped_statistics(data, beta, wide, only(a, data.n_units))
        assert int_norm_squared(s_a) <= unit_bound(wide) ** 2


def test_removing_an_author_moves_the_clipped_sum_by_at_most_C(small):
    """Brute force over all 60 authors: the integer sums differ by exactly a's term, whose
    norm is at most floor(C / g) grid units (about C, by less than the rounding, when the
    author's statistic exceeds C); the other authors' terms do not change."""
    data = dp_vi.prepare(small.corpus, Adjacency.AUTHOR)
    p = params(clip=3.0)
    beta = random_beta(120, 4, 4)
    everyone = np.ones(data.n_units, dtype=bool)
    full, norms = dp_vi.clipped_statistics(data, beta, p, everyone)
    for a in range(data.n_units):
        without = everyone.copy()
        without[a] = False
        rest, _ = dp_vi.clipped_statistics(data, beta, p, without)
        alone, _ = dp_vi.clipped_statistics(data, beta, p, only(a, data.n_units))
        assert np.array_equal(full - rest, alone)
        assert int_norm_squared(full - rest) <= unit_bound(p) ** 2
        change = np.linalg.norm(values(full - rest, p))
        slack = dp_vi.statistic_grid(p.clip) * math.sqrt(full.size)
        assert min(norms[a], p.clip) - slack <= change <= p.clip


def test_document_level_clipping_does_not_bound_an_author(small):
    """Why the author's summed statistic is clipped: with per-document units an author with
    4 documents moves the sum by more than C."""
    data = dp_vi.prepare(small.corpus, Adjacency.DOCUMENT)
    assert data.n_units == small.corpus.n_docs
    p = params(clip=1.0, adjacency=Adjacency.DOCUMENT)
    beta = random_beta(120, 4, 5)
    everyone = np.ones(data.n_units, dtype=bool)
    full, _ = dp_vi.clipped_statistics(data, beta, p, everyone)
    without = everyone.copy()
    without[:4] = False  # author 0's documents
    rest, _ = dp_vi.clipped_statistics(data, beta, p, without)
    assert np.linalg.norm(values(full - rest, p)) > 1.5 * p.clip


def test_without_author_ids_every_document_is_its_own_author(small):
    c = small.corpus
    data = dp_vi.prepare(Corpus(c.doc_ptr, c.words, c.n_words), Adjacency.AUTHOR)
    assert data.n_units == c.n_docs


# --- noise and sampling -----------------------------------------------------------------


def test_added_noise_is_gaussian_with_std_z_times_C(small):
    """noisy - (clipped non-private sum) over 16 draws of k x V entries: sum of squares /
    (z C)^2 is chi-square with 16 k V = 7680 degrees of freedom (relative sd 1.6%); a 5%
    larger sigma (10% in variance, about 6 sd) is rejected."""
    data = dp_vi.prepare(small.corpus, Adjacency.AUTHOR)
    p = params(epsilon=2.0, clip=3.0)
    noise = NoiseSource.create(2024)
    residuals = []
    for seed in range(16):
        beta = random_beta(120, 4, 10 + seed)
        noisy, included = dp_vi.noisy_statistics(data, beta, p, noise)
        assert included.all()  # q = 1
        clean, _ = dp_vi.clipped_statistics(data, beta, p, included)
        residuals.append(noisy - values(clean, p))
    r = np.concatenate(residuals).ravel()
    dof = r.size

    def p_two_sided(sigma):
        cdf = stats.chi2.cdf(np.sum(r**2) / sigma**2, dof)
        return 2 * min(cdf, 1 - cdf)

    assert p_two_sided(p.noise_std) > 1e-3
    assert p_two_sided(1.05 * p.noise_std) < 1e-3
    assert abs(r.mean()) < 4 * p.noise_std / math.sqrt(dof)


def test_poisson_sampling_includes_each_author_independently_with_probability_q():
    syn = generate_lda(4000, 50, 3, doc_length=5, docs_per_author=2, seed=1)
    data = dp_vi.prepare(syn.corpus, Adjacency.AUTHOR)
    p = params(epsilon=2.0, sampling_rate=0.3, n_topics=3)
    noise = NoiseSource.create(5)
    beta = random_beta(50, 3, 0)
    masks = []
    for _ in range(3):
        noisy, included = dp_vi.noisy_statistics(data, beta, p, noise)
        masks.append(included)
        test = stats.binomtest(int(included.sum()), data.n_units, 0.3)
        assert test.pvalue > 1e-3
        clean, _ = dp_vi.clipped_statistics(data, beta, p, included)  # the mask that was used
        chi = np.sum((noisy - values(clean, p)) ** 2) / p.noise_std**2
        assert stats.chi2.sf(chi, noisy.size) > 1e-3
    both = np.logical_and(masks[0], masks[1]).sum()  # independent across iterations: q^2
    assert stats.binomtest(int(both), data.n_units, 0.09).pvalue > 1e-3


# --- accounting -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "eps,q,T", [(1.0, 1.0, 10), (3.0, 0.1, 200), (0.5, 0.02, 1000), (8.0, 1.0, 1)]
)
def test_rdp_calibration_is_tight_and_never_exceeds_the_target(eps, q, T):
    p = params(eps, sampling_rate=q, iterations=T)
    assert p.accountant_epsilon <= eps
    smaller = dp_vi.dp_event(p.noise_multiplier * (1 - 1e-4), q, T)
    assert dp_vi.accountant_epsilon(smaller, DELTA, "rdp") > eps
    assert p.noise_std == pytest.approx(p.noise_multiplier * p.clip)


def test_pld_calibration_meets_the_target_with_less_noise_than_rdp():
    rdp_params = params(2.0, sampling_rate=0.2, iterations=50)
    pld_params = params(2.0, sampling_rate=0.2, iterations=50, accountant="pld")
    assert pld_params.accountant_epsilon <= 2.0
    assert pld_params.noise_multiplier < rdp_params.noise_multiplier
    smaller = dp_vi.dp_event(pld_params.noise_multiplier * 0.99, 0.2, 50)
    assert dp_vi.accountant_epsilon(smaller, DELTA, "pld") > 2.0


@pytest.mark.parametrize("eps,q,T", [(2.0, 0.2, 50), (3.0, 1.0, 100), (0.3, 0.5, 1000)])
def test_the_coarse_then_fine_pld_search_has_the_fine_searchs_precision(eps, q, T):
    """``calibrated`` searches PLD first at a coarse discretisation; its z is checked at the
    fine one (the accountant's default, at which the release states its epsilon), and one
    z a relative 1e-3 below it (the PLD search's precision) exceeds the target there. At
    (0.3, 0.5, 1000) the fine accountant allows 1% less noise than the coarse one, so the
    fine search has to move."""
    dp_vi.calibrated.cache_clear()
    z, achieved = dp_vi.calibrated(eps, DELTA, q, T, "pld")
    fine = dp_vi.accountant_epsilon(dp_vi.dp_event(z, q, T), DELTA, "pld")
    assert achieved == fine <= eps
    below = dp_vi.dp_event(z / (1 + 1e-3), q, T)
    assert dp_vi.accountant_epsilon(below, DELTA, "pld") > eps
    start = dp_vi.calibrate_noise_multiplier(eps, DELTA, 1.0, T, "rdp", precision=0.01)
    coarse = dp_vi.calibrate_noise_multiplier(
        eps, DELTA, q, T, "pld", start=start, precision=1e-5, interval=1e-3
    )
    assert z <= coarse
    if T == 1000:
        assert z < coarse * (1 - 5e-3)
    # a process calibrates the same public parameters once
    assert dp_vi.calibrated(eps, DELTA, q, T, "pld") == (z, achieved)
    assert dp_vi.calibrated.cache_info().hits == 1


def test_a_pld_calibration_that_only_sampling_reaches_is_not_refused():
    """The PLD search starts from unsampled RDP's z; where that finds none below the
    largest noise multiplier, it starts from sampled RDP's, as it did before."""
    z, achieved = dp_vi.calibrated(3e-5, DELTA, 0.001, 20_000, "pld")
    assert achieved <= 3e-5 and z < dp_vi._MAX_NOISE_MULTIPLIER


def test_a_search_that_starts_above_its_answer_in_small_steps_still_reaches_it(monkeypatch):
    """From a start 8 times the answer, dividing by 1.001 and squaring the step after each
    division that still meets the target (up to 2): the bracket is found in a dozen steps
    (about 2,000 at a fixed 1.001), and the answer is the one a search from afar gives."""
    far = dp_vi.calibrate_noise_multiplier(3.0, DELTA, 1.0, 20, "rdp")
    calls = []
    counted = dp_vi.accountant_epsilon
    monkeypatch.setattr(
        dp_vi, "accountant_epsilon", lambda *args: calls.append(args) or counted(*args)
    )
    near = dp_vi.calibrate_noise_multiplier(3.0, DELTA, 1.0, 20, "rdp", start=far * 8, step=1.001)
    assert near == pytest.approx(far, rel=2e-6)
    assert len(calls) < 40
    assert counted(dp_vi.dp_event(near, 1.0, 20), DELTA, "rdp") <= 3.0
    for bad in ({"step": 1.0}, {"start": 0.0}, {"precision": 0.0}):
        with pytest.raises(ValueError, match="must exceed"):
            dp_vi.calibrate_noise_multiplier(3.0, DELTA, 1.0, 20, "rdp", **bad)


@pytest.mark.parametrize("eps,q,T", [(1.0, 1.0, 10), (3.0, 0.1, 200), (0.5, 0.02, 1000)])
def test_basic_composition_is_never_tighter_than_the_accountant(eps, q, T):
    p = params(eps, sampling_rate=q, iterations=T)
    assert p.basic_epsilon >= p.accountant_epsilon
    assert p.basic_delta <= DELTA * (1 + 1e-12)


def test_basic_composition_of_one_gaussian_is_the_analytic_gaussian():
    eps, delta = dp_vi.basic_composition(2.0, 1.0, 1, DELTA)
    assert delta == DELTA
    # Balle & Wang's condition holds with equality at (eps, delta) for sigma = 2
    a, b = 1 / (2 * 2.0), eps * 2.0
    lhs = stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b)
    assert lhs == pytest.approx(DELTA, rel=1e-6)


def test_subsampled_basic_composition_applies_amplification():
    eps_full, _ = dp_vi.basic_composition(1.0, 1.0, 1, 0.1)  # delta_t = delta / (q T)
    eps_sub, delta_sub = dp_vi.basic_composition(1.0, 0.1, 1, 0.01)
    assert eps_sub == pytest.approx(math.log1p(0.1 * math.expm1(eps_full)), rel=1e-9)
    assert delta_sub == pytest.approx(0.01)


@pytest.mark.parametrize("q", [1.0, 0.05])
def test_the_event_dict_recomputes_the_same_epsilon(q):
    p = params(1.5, sampling_rate=q, iterations=30)
    g = p.guarantee()
    event = json.loads(json.dumps(g.event))
    assert dp_vi.accountant_epsilon(event, g.delta, "rdp") == pytest.approx(g.epsilon, rel=1e-12)
    assert g.event["type"] == "self_composed" and g.event["count"] == 30
    inner = g.event["event"]
    assert inner["type"] == ("gaussian" if q == 1.0 else "poisson_sampled")
    json.dumps(p.to_dict())


@pytest.mark.parametrize("adjacency", [Adjacency.AUTHOR, Adjacency.DOCUMENT])
def test_guarantee_states_the_adjacency_and_both_accountings(adjacency):
    g = params(1.0, adjacency=adjacency).guarantee()
    assert g.adjacency == adjacency
    assert g.notion == APPROXIMATE_DP
    assert g.epsilon <= 1.0 and g.delta == DELTA
    assert "RdpAccountant" in g.accountant
    assert g.basic_epsilon >= g.epsilon and g.basic_delta <= DELTA * (1 + 1e-12)


# --- validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"epsilon": 0.0},
        {"epsilon": -1.0},
        {"epsilon": float("nan")},
        {"delta": 0.0},
        {"delta": 1.0},
        {"clip": 0.0},
        {"clip": -2.0},
        {"clip": float("inf")},
        {"clip": 1e-306},  # its grid's reciprocal would overflow: refused, not a wrong sum
        {"clip": 1e300},
        {"warm_start": 1.5},
        {"sampling_rate": 0.0},
        {"sampling_rate": 1.5},
        {"adjacency": Adjacency.WORD},
        {"adjacency": Adjacency.DOCUMENT_REPLACE},
        {"adjacency": Adjacency.AUTHOR_REPLACE},
        {"adjacency": "author"},
        {"accountant": "moments"},
        {"iterations": 0},
        {"n_topics": 0},
        {"max_docs_per_author": 0},
        {"local_iterations": 0},
        {"local_tolerance": -1e-3},
        {"eta": 0.0},
        {"alpha": -0.1},
        {"step_decay": 1.5},
        {"step_offset": 0.5},
        {"threshold": -1.0},
    ],
)
def test_bad_parameters_are_rejected_before_any_data_is_read(change):
    args = {
        "epsilon": 1.0,
        "delta": DELTA,
        "n_topics": 4,
        "adjacency": Adjacency.AUTHOR,
        "max_docs_per_author": 4,
        "iterations": 5,
    } | change
    eps, delta = args.pop("epsilon"), args.pop("delta")
    with pytest.raises(BadInputError):
        dp_vi.dp_vi_params(eps, delta, **args)


@pytest.mark.parametrize("clip", [2.0, "private"])
def test_a_corpus_without_tokens_trains_to_noise_and_is_not_refused(clip):
    """A refusal after the spend would depend on the data (every token OOV, or an empty
    training split under --tune); the release is noise around eta instead."""
    p = params(3.0, iterations=3, clip=clip)
    for n_docs in (0, 3):
        empty = Corpus(np.zeros(n_docs + 1, dtype=np.int64), np.zeros(0, dtype=np.int32), 10)
        released: dict = {}
        phi = dp_vi.train_dp_vi(empty, 4, p, NoiseSource.create(0), released=released)
        assert phi.shape == (4, 10) and np.allclose(phi.sum(axis=1), 1.0)
        assert (clip == "private") == ("clip" in released)


def test_unusable_corpora_are_rejected(small):
    p = params()
    c = small.corpus
    corrupt = Corpus(c.doc_ptr, c.words, 5, c.doc_author)
    with pytest.raises(BadInputError):
        dp_vi.train_dp_vi(corrupt, 4, p, NoiseSource.create(0))
    with pytest.raises(BadInputError):
        dp_vi.train_dp_vi(c, 5, p, NoiseSource.create(0))


# --- training ---------------------------------------------------------------------------


@pytest.mark.parametrize("q", [1.0, 0.3])
def test_training_returns_a_stochastic_matrix_and_reports_progress(small, q):
    p = params(1.0, iterations=6, sampling_rate=q)
    ticks = []
    phi = dp_vi.train_dp_vi(small.corpus, 4, p, NoiseSource.create(1), progress=ticks.append)
    assert phi.shape == (4, small.corpus.n_words)
    assert np.all(np.isfinite(phi)) and np.all(phi > 0)
    np.testing.assert_allclose(phi.sum(axis=1), 1.0, rtol=1e-12)
    assert ticks == [1] * 6


@pytest.mark.filterwarnings("ignore:Mean of empty slice")  # uniform rows have no Kendall tau
def test_recovers_strong_topics_at_large_epsilon_and_not_at_tiny_epsilon():
    """300 authors, 4 sharp topics. The reference is the same code with z = 0 (no noise) and
    the same seed. At epsilon 1000 (z ~ 0.11, noise sd ~ 0.22 per entry against a topic's
    top entries of tens of clipped counts) the private run must stay within 0.01 cosine of
    it. At epsilon 0.05 (z ~ 290: noise sd ~ 580 per entry, more than any entry's signal)
    it must fall below the midpoint between the reference and the uniform matrix, which is
    what carries no information."""
    syn = generate_lda(1200, 300, 4, doc_length=40, eta=0.01, docs_per_author=4, seed=0)
    uniform = matched_distance(np.full((4, 300), 1 / 300), syn.phi).cosine
    large, tiny = params(1000.0, iterations=20), params(0.05, iterations=20)
    exact = dataclasses.replace(large, noise_multiplier=0.0)
    for seed in range(3):
        reference = matched_distance(
            dp_vi.train_dp_vi(syn.corpus, 4, exact, NoiseSource.create(seed)), syn.phi
        ).cosine
        assert reference > 0.99  # the test corpus is one VI recovers
        private = dp_vi.train_dp_vi(syn.corpus, 4, large, NoiseSource.create(seed))
        assert matched_distance(private, syn.phi).cosine >= reference - 0.01
        noisy = dp_vi.train_dp_vi(syn.corpus, 4, tiny, NoiseSource.create(seed))
        assert matched_distance(noisy, syn.phi).cosine < (reference + uniform) / 2


def test_a_public_prior_alone_decides_when_no_private_entry_clears_the_threshold(small):
    """With a threshold no noisy entry can clear, lambda = eta + w n^pub: the release is the
    public topics, smoothed by eta, whatever the private data (post-processing only)."""
    rng = np.random.default_rng(1)
    public = rng.integers(0, 50, (4, 120)).astype(float)
    p = params(3.0, iterations=3, threshold=1e9, prior_weight=2.0)
    phi = dp_vi.train_dp_vi(small.corpus, 4, p, NoiseSource.create(2, 1), public_topics=public)
    expected = p.eta + 2.0 * public
    assert phi == pytest.approx(expected / expected.sum(axis=1, keepdims=True))


def test_public_topics_initialise_the_first_e_step_and_are_checked(small):
    """With a public prior nothing is drawn for the initial lambda: two runs with the same
    prior and noise stream agree; a prior of the wrong shape or sign is refused."""
    public = np.random.default_rng(3).integers(0, 50, (4, 120)).astype(float)
    p = params(3.0, iterations=3)
    a = dp_vi.train_dp_vi(small.corpus, 4, p, NoiseSource.create(4, 1), public_topics=public)
    b = dp_vi.train_dp_vi(small.corpus, 4, p, NoiseSource.create(4, 1), public_topics=public)
    assert np.array_equal(a, b)
    with pytest.raises(BadInputError, match="public_topics must be 4 x"):
        dp_vi.train_dp_vi(small.corpus, 4, p, NoiseSource.create(4, 1), public_topics=public[:3])
    with pytest.raises(BadInputError, match="public_topics must be 4 x"):
        dp_vi.train_dp_vi(small.corpus, 4, p, NoiseSource.create(4, 1), public_topics=-public)
    with pytest.raises(BadInputError, match="prior_weight"):
        params(3.0, iterations=3, prior_weight=0)


def test_alpha_above_a_million_is_refused_before_anything_runs():
    """The fused digamma of the E-step is exact only to gamma of about 1e50."""
    with pytest.raises(BadInputError, match="alpha"):
        dp_vi.dp_vi_params(
            3.0,
            1e-5,
            n_topics=4,
            adjacency=Adjacency.AUTHOR,
            max_docs_per_author=5,
            iterations=3,
            alpha=1e62,
        )


# --- identical documents share one E-step -------------------------------------------------


def repetitive_corpus(n_docs: int = 300, n_authors: int = 40, seed: int = 11) -> Corpus:
    """Short documents over 4 words, so most repeat (within and across authors)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 4, n_docs)
    doc_ptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=doc_ptr[1:])
    words = rng.integers(0, 4, doc_ptr[-1])
    return Corpus(doc_ptr, words, 4, rng.integers(0, n_authors, n_docs))


def contents(data: dp_vi.VariationalCorpus, docs: np.ndarray) -> list[tuple]:
    spans = [slice(data.doc_ptr[d], data.doc_ptr[d + 1]) for d in docs]
    return [(tuple(data.words[s]), tuple(data.counts[s])) for s in spans]


def test_document_slots_are_equal_exactly_for_identical_documents():
    data = dp_vi.prepare(repetitive_corpus(), Adjacency.AUTHOR)
    docs = data.unit_docs
    slots, n_slots, shared = vi.document_slots(data.doc_ptr, data.words, data.counts, docs)
    seen = contents(data, docs)
    assert n_slots == len(set(seen)) < len(docs) / 3
    for i in range(len(docs)):
        for j in range(len(docs)):
            assert (slots[i] == slots[j]) == (seen[i] == seen[j])
    sizes = np.bincount(slots, minlength=n_slots)
    assert (sizes[:shared] > 1).all() and (sizes[shared:] == 1).all() and 0 < shared < n_slots


def test_colliding_hashes_never_merge_different_documents():
    """Every document given the same hash: contents are compared in full, identical ones
    among the first 8 distinct contents share a slot, and a document past them gets one of
    its own (never another content's)."""
    data = dp_vi.prepare(repetitive_corpus(), Adjacency.AUTHOR)
    docs = data.unit_docs
    hashes = np.zeros(len(docs), dtype=np.uint64)
    slots, n_slots, _ = vi.slots_by_hash(hashes, data.doc_ptr, data.words, data.counts, docs)
    seen = contents(data, docs)
    assert sorted(set(slots.tolist())) == list(range(n_slots))
    for i in range(len(docs)):
        for j in range(len(docs)):
            if slots[i] == slots[j]:
                assert seen[i] == seen[j]
    leaders = list(dict.fromkeys(seen))[: vi._LEADERS]
    for content in leaders:
        assert len({slots[i] for i in range(len(docs)) if seen[i] == content}) == 1
    assert n_slots > len(leaders)  # the contents past the first eight are not shared


@pytest.mark.parametrize(
    ("warm", "sampled"),
    [(False, False), (True, False), (False, True)],
    ids=["cold", "warm", "sampled"],
)
def test_a_shared_e_step_gives_every_unit_the_term_of_its_own(warm, sampled):
    """One range holding every author with its documents' slots, against the same range
    with a slot per document (nothing shared, nothing kept) and against one range per
    author: the same integer sums and norms, bit for bit, cold (with every unit, and with a
    sampled half) and over three warm iterations (which need every unit: the kernel refuses
    a partial mask)."""
    data = dp_vi.prepare(repetitive_corpus(), Adjacency.AUTHOR)
    p = params(clip=0.5)
    rng = np.random.default_rng(5)
    masks = [rng.random(data.n_units) < (0.5 if sampled else 1.1) for _ in range(3)]
    betas = [random_beta(4, 4, s) for s in (21, 22, 23)]
    n_docs = len(data.unit_docs)
    unshared = dp_vi.UnitShard(
        data, 0, data.n_units, 0, np.arange(n_docs, dtype=np.int32), n_docs, 0
    )

    def run(shards: list[dp_vi.UnitShard]) -> tuple[np.ndarray, np.ndarray]:
        with Placed(shards) as placed:
            for beta, mask in zip(betas, masks, strict=True):
                out = dp_vi.clipped_statistics(data, beta, p, mask, placed, warm=warm)
        return out

    whole = dp_vi.unit_shards(data, np.array([0, data.n_units]), own=False)
    assert whole[0].n_slots < n_docs / 3 and 0 < whole[0].shared < whole[0].n_slots
    shared = run(whole)
    for other in ([unshared], dp_vi.unit_shards(data, np.arange(data.n_units + 1), own=False)):
        out = run(other)
        assert np.array_equal(shared[0], out[0]) and np.array_equal(shared[1], out[1])
    assert shared[0].any()


def test_exp_elog_beta_matches_scipy():
    lam = np.random.default_rng(8).gamma(0.5, 3.0, (50, 6)) + 0.01
    lam[0, 0], lam[1, 1] = 1e-3, 1e9
    expected = np.exp(special.digamma(lam) - special.digamma(lam.sum(axis=0)))
    np.testing.assert_allclose(dp_vi.exp_elog_beta(lam), expected, rtol=1e-11, atol=0)


def test_the_kernel_refuses_warm_starts_on_a_partial_mask():
    """Below the wrapper's own check: a kept gamma per slot would depend on which units
    were in."""
    data = dp_vi.prepare(repetitive_corpus(), Adjacency.AUTHOR)
    [shard] = dp_vi.unit_shards(data, np.array([0, data.n_units]), own=False)
    included = np.ones(data.n_units, dtype=bool)
    included[3] = False
    gammas = np.zeros((shard.n_slots, 4), dtype=np.float32)
    p = params(clip=0.5)
    with pytest.raises(ValueError, match="every unit"):
        dp_vi.shard_statistic(
            shard, random_beta(4, 4, 1), included, p.alpha, 5, 1e-3, p.clip, gammas, True
        )
