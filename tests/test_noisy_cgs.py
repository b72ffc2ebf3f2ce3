"""Zhu, CDP-LDA and CDP-LDA+: noise scale, claimed guarantee, parameters, recovery."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fdptm.errors import BadInputError
from fdptm.evaluation.matching import matched_distance
from fdptm.evaluation.synthetic import generate_lda
from fdptm.kernels import gibbs
from fdptm.mechanisms.guarantee import CLAIMED_UNPROVEN
from fdptm.mechanisms.noisy_cgs import (
    VARIANTS,
    laplace_noise,
    noisy_cgs_params,
    train_noisy_cgs,
)
from fdptm.privacy import events
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource

A, D, W = Adjacency.AUTHOR, Adjacency.DOCUMENT, Adjacency.WORD


@pytest.mark.parametrize(
    "variant,unit,expected_scale",
    [
        ("zhu", D, 40 / 2.0),  # one perturbation, sensitivity max_tokens_per_doc = 40
        ("zhu", A, 3 * 40 / 2.0),  # an author: max_docs_per_author x max_tokens_per_doc
        ("cdp-lda", D, 2 / 2.0),  # word level, sensitivity 2
        ("cdp-lda-plus", D, 2 / (2.0 / 11)),  # T + 1 = 11 perturbations
    ],
)
def test_laplace_scale_matches_sensitivity_over_epsilon(variant, unit, expected_scale):
    p = noisy_cgs_params(
        2.0,
        1e-5,
        variant=variant,
        adjacency=unit,
        iterations=10,
        max_docs_per_author=3,
        max_tokens_per_doc=40,
    )
    assert p.laplace_scale == pytest.approx(expected_scale, rel=1e-12)
    assert p.perturbations * p.sensitivity / p.laplace_scale <= 2.0
    draws = laplace_noise(p, NoiseSource.create(3), (400, 50)).ravel()
    assert stats.kstest(draws, stats.laplace(scale=expected_scale).cdf).pvalue > 1e-3
    # mean |x| is the scale's MLE, with standard error scale / sqrt(n): within 5 SE
    assert abs(np.abs(draws).mean() / expected_scale - 1) < 5 / math.sqrt(draws.size)


def test_claimed_guarantee_and_adjacency_match_the_papers():
    zhu = noisy_cgs_params(3.0, 1e-5, variant="zhu", adjacency=D, iterations=5).guarantee()
    assert (zhu.notion, zhu.adjacency, zhu.epsilon, zhu.delta) == (CLAIMED_UNPROVEN, D, 3.0, 0.0)
    cdp = noisy_cgs_params(3.0, 1e-5, variant="cdp-lda", adjacency=A, iterations=5).guarantee()
    assert (cdp.adjacency, cdp.epsilon) == (W, 3.0)  # CDP-LDA is word level whatever the unit
    plus = noisy_cgs_params(3.0, 1e-5, variant="cdp-lda-plus", adjacency=D, iterations=50)
    g = plus.guarantee()
    assert g.basic_epsilon == pytest.approx(3.0)
    tight = events.epsilon_of(g.event, 1e-5)
    assert tight <= g.basic_epsilon  # PLD of 51 Laplace steps beats their sum
    assert f"{tight:.6g}" in g.accountant
    assert g.event == events.self_composed(events.laplace(plus.laplace_scale / 2.0), 51)


@pytest.mark.parametrize(
    "kw",
    [
        {"variant": "gibbs"},
        {"variant": "zhu", "adjacency": W},
        {"iterations": 0},
        {"max_tokens_per_doc": 0},
        {"alpha": -1.0},
        {"beta": math.nan},
    ],
)
def test_invalid_parameters_are_refused(kw):
    args = {"variant": "cdp-lda", "adjacency": D, "iterations": 5, **kw}
    with pytest.raises(BadInputError):
        noisy_cgs_params(1.0, 1e-5, **args)
    with pytest.raises(BadInputError):
        noisy_cgs_params(0.0, 1e-5, variant="zhu", adjacency=D, iterations=5)


def test_noisy_conditional_keeps_every_topic_possible():
    """Strongly negative noise on one topic must not zero its probability (no min-max)."""
    doc_ptr = np.array([0, 200], dtype=np.int64)
    words = np.zeros(200, dtype=np.int32)
    z = np.arange(200, dtype=np.int32) % 2
    n_dk = np.array([[100, 100]], dtype=np.int32)
    n_wk = np.array([[100, 100]], dtype=np.int32)
    n_k = np.array([100, 100], dtype=np.int64)
    eta_wk = np.array([[0.0, -1e6]])
    eta_dk = np.zeros((1, 2))
    uniforms = np.random.default_rng(0).random(200)
    gibbs.noisy_sweep(doc_ptr, words, z, n_dk, n_wk, n_k, eta_dk, eta_wk, 1.0, 1.0, uniforms)
    # topic 1's word factor is beta / (0 + beta) = 1, topic 0's (n + 1)/(n + 1) = 1 too:
    # both topics keep probability, so both are still sampled
    assert 0 < (z == 1).sum() < 200
    assert n_wk.sum() == 200 and n_dk.sum() == 200 and n_k.sum() == 200


@pytest.mark.parametrize("variant", VARIANTS)
def test_recovers_strong_topics_at_large_epsilon_only(variant):
    data = generate_lda(1500, 200, 4, doc_length=40, eta=0.05, seed=11)

    def cosine(eps: float) -> float:
        p = noisy_cgs_params(
            eps, 1e-5, variant=variant, adjacency=D, iterations=40, max_tokens_per_doc=60
        )
        phi = train_noisy_cgs(data.corpus, 4, p, NoiseSource.create(5))
        assert phi.shape == (4, 200) and np.allclose(phi.sum(1), 1) and (phi >= 0).all()
        return matched_distance(phi, data.phi).cosine

    # Non-private CGS reaches cosine > 0.99 here; 0.9 leaves room for sampling noise while a
    # model that missed a topic scores at most ~0.75 (one of four topics near-orthogonal).
    assert cosine(1e5) > 0.9
    # At epsilon 1e-3 the Laplace scale is >= 2000 per cell against counts of ~15,000
    # tokens per topic spread over 200 words: the released rows are noise.
    assert cosine(1e-3) < 0.6
