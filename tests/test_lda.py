"""M2: HDP-LDA's privacy arithmetic (Theorem 3), noise scale, and the samplers' invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fdptm.errors import BadInputError
from fdptm.kernels import gibbs
from fdptm.mechanisms.lda import (
    Corpus,
    hdp_lda_epsilon,
    hdp_lda_params,
    train_cgs,
    train_hdp_lda,
)
from fdptm.privacy.noise import NoiseSource


@pytest.mark.parametrize("eps,T,frac,clip", [(1.0, 10, 0.5, 5.0), (400.0, 20, 0.8, 1000.0)])
def test_theorem3_total_is_T_iterations_plus_the_final_release(eps, T, frac, clip):
    p = hdp_lda_params(eps, T, clip=clip, inherent_fraction=frac)
    assert p.epsilon_inherent == pytest.approx(2 * math.log(p.clip / p.beta + 1))
    assert p.epsilon_inherent == pytest.approx(frac * (p.epsilon_laplace + p.epsilon_inherent))
    assert T * (p.epsilon_laplace + p.epsilon_inherent) + p.epsilon_laplace == pytest.approx(eps)
    assert hdp_lda_epsilon(p) == pytest.approx(eps)
    assert p.laplace_scale == pytest.approx(2 / p.epsilon_laplace)  # sensitivity 2


def test_rounding_never_overshoots_the_budget():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        eps = float(10 ** rng.uniform(-2, 3))
        T = int(rng.integers(1, 200))
        p = hdp_lda_params(
            eps,
            T,
            clip=float(10 ** rng.uniform(-2, 4)),
            inherent_fraction=float(rng.uniform(0.05, 0.95)),
        )
        assert 2 * math.log(p.clip / p.beta + 1) <= p.epsilon_inherent
        assert hdp_lda_epsilon(p) <= eps


@pytest.mark.parametrize("kw", [{"iterations": 0}, {"clip": 0.0}, {"inherent_fraction": 1.0}])
def test_bad_hdp_parameters(kw):
    args = {"epsilon": 1.0, "iterations": 5} | kw
    eps, T = args.pop("epsilon"), args.pop("iterations")
    with pytest.raises(BadInputError):
        hdp_lda_params(eps, T, **args)


def test_laplace_noise_has_the_stated_scale():
    draws = NoiseSource.create(11).add_laplace(np.zeros(20000), 2 / 0.5)
    assert stats.kstest(draws, stats.laplace(scale=4.0).cdf).pvalue > 1e-3
    assert stats.kstest(draws, stats.laplace(scale=3.6).cdf).pvalue < 1e-3


def _two_topic_corpus(rng, n_docs=200, length=30):
    """Documents use either words 0-9 or words 10-19: two clean topics."""
    docs = [rng.integers(0, 10, length) + 10 * (d % 2) for d in range(n_docs)]
    ptr = np.zeros(n_docs + 1, np.int64)
    ptr[1:] = np.cumsum([len(d) for d in docs])
    return Corpus(ptr, np.concatenate(docs).astype(np.int32), 20)


def _separation(phi):
    """How much of each topic's mass sits in one of the two word groups (1 = perfect)."""
    halves = np.stack([phi[:, :10].sum(1), phi[:, 10:].sum(1)], axis=1)
    return float(halves.max(axis=1).mean())


def test_cgs_recovers_two_clean_topics():
    corpus = _two_topic_corpus(np.random.default_rng(0))
    phi = train_cgs(corpus, 2, 50, NoiseSource.create(0))
    assert phi.shape == (2, 20)
    assert np.allclose(phi.sum(1), 1)
    assert _separation(phi) > 0.95


def test_hdp_lda_learns_at_large_epsilon_and_not_at_small():
    corpus = _two_topic_corpus(np.random.default_rng(0))
    strong = train_hdp_lda(corpus, 2, hdp_lda_params(600.0, 20, clip=200.0), NoiseSource.create(1))
    weak = train_hdp_lda(corpus, 2, hdp_lda_params(0.5, 20, clip=200.0), NoiseSource.create(1))
    assert np.allclose(strong.sum(1), 1) and np.allclose(weak.sum(1), 1)
    assert not np.isnan(strong).any() and (strong > 0).all()
    assert _separation(strong) > 0.9
    assert _separation(weak) < 0.75


def test_hdp_sweep_never_corrupts_the_true_counts():
    """Noise and clipping live on a copy: the counts stay exact non-negative tallies of z."""
    rng = np.random.default_rng(2)
    corpus = _two_topic_corpus(rng, n_docs=50, length=12)
    K = 3
    z = rng.integers(0, K, corpus.n_tokens).astype(np.int32)
    n_dk = np.zeros((corpus.n_docs, K), np.int32)
    n_wk = np.zeros((corpus.n_words, K), np.int32)
    n_k = np.zeros(K, np.int64)
    gibbs.initialise(corpus.doc_ptr, corpus.words, z, n_dk, n_wk, n_k)
    p = hdp_lda_params(5.0, 5, clip=3.0)
    sanitized = np.empty((corpus.n_words, K))
    weights = np.empty((corpus.n_words, K))
    noise = NoiseSource.create(3)
    for _ in range(5):
        noisy = noise.add_laplace(n_wk, p.laplace_scale)
        gibbs.hdp_weights(np.zeros_like(n_wk), noisy, p.clip, p.beta, sanitized, weights)
        np.testing.assert_array_equal(sanitized, noisy)
        # the word factor's numerator is clipped to [beta, C + beta]: ratio exp(eps_I / 2)
        numer = weights * (np.maximum(sanitized, 0).sum(0) + corpus.n_words * p.beta)
        assert numer.min() >= p.beta - 1e-9 and numer.max() <= p.clip + p.beta + 1e-9
        gibbs.hdp_sweep(
            corpus.doc_ptr,
            corpus.words,
            z,
            n_dk,
            n_wk,
            weights,
            1.0,
            noise.generator.random(corpus.n_tokens),
        )
        recount_wk = np.zeros_like(n_wk)
        np.add.at(recount_wk, (corpus.words, z), 1)
        np.testing.assert_array_equal(n_wk, recount_wk)
        assert n_wk.min() >= 0 and n_dk.min() >= 0
        doc_of = np.repeat(np.arange(corpus.n_docs), np.diff(corpus.doc_ptr))
        recount_dk = np.zeros_like(n_dk)
        np.add.at(recount_dk, (doc_of, z), 1)
        np.testing.assert_array_equal(n_dk, recount_dk)


def test_seeded_training_is_reproducible_and_unseeded_is_not():
    corpus = _two_topic_corpus(np.random.default_rng(0), n_docs=40)
    p = hdp_lda_params(50.0, 5)
    a = train_hdp_lda(corpus, 2, p, NoiseSource.create(9))
    b = train_hdp_lda(corpus, 2, p, NoiseSource.create(9))
    c = train_hdp_lda(corpus, 2, p, NoiseSource.create(None))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_an_empty_corpus_is_released_from_noise_alone():
    """An empty partition must not fail after the spend: that would tell it apart."""
    empty = Corpus(np.zeros(1, np.int64), np.zeros(0, np.int32), 3)
    phi = train_hdp_lda(empty, 2, hdp_lda_params(1.0, 2), NoiseSource.create(0))
    assert phi.shape == (2, 3) and np.allclose(phi.sum(axis=1), 1.0)
    with pytest.raises(BadInputError, match="topics"):
        train_hdp_lda(empty, 0, hdp_lda_params(1.0, 2), NoiseSource.create(0))
