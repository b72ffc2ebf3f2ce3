"""Audit building blocks: the zeta statistic against scipy, and the epsilon lower bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from fdptm.audit.epsilon import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
)
from fdptm.audit.statistics import document_statistics
from fdptm.evaluation.metrics import doc_word_matrix
from fdptm.mechanisms.lda import Corpus


def _random_case(seed: int, n_docs: int = 40, n_words: int = 30, k: int = 4):
    rng = np.random.default_rng(seed)
    phi = rng.dirichlet(np.full(n_words, 0.3), size=k)
    lengths = rng.integers(1, 25, n_docs)
    words = rng.integers(0, n_words, lengths.sum()).astype(np.int32)
    ptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    return phi, Corpus(ptr, words, n_words)


def _scipy_zeta(phi: np.ndarray, words: np.ndarray, counts: np.ndarray) -> float:
    k = phi.shape[0]
    sub = phi[:, words]
    result = minimize(
        lambda t: -(counts * np.log(np.maximum(t @ sub, 1e-300))).sum(),
        np.full(k, 1.0 / k),
        method="SLSQP",
        bounds=[(0.0, 1.0)] * k,
        constraints=[{"type": "eq", "fun": lambda t: t.sum() - 1.0}],
        options={"ftol": 1e-12, "maxiter": 1000},
    )
    return -result.fun


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_zeta_reaches_scipys_optimum(seed):
    phi, corpus = _random_case(seed)
    counts = doc_word_matrix(corpus).tocsr()
    stats = document_statistics(phi, counts)
    for d in range(corpus.n_docs):
        row = counts[d]
        w, c = row.indices, row.data
        reference = _scipy_zeta(phi, w, c)
        # within the kernel's duality-gap tolerance of the optimum, which scipy cannot beat
        assert stats.zeta[d] >= reference - 1e-6
        # and a value some feasible theta attains: the one returned
        attained = (c * np.log(stats.theta[d] @ phi[:, w])).sum()
        assert stats.zeta[d] == pytest.approx(attained, abs=1e-9)
    assert np.allclose(stats.theta.sum(axis=1), 1.0) and (stats.theta >= 0).all()


def test_theta_baselines_are_the_formulas():
    phi, corpus = _random_case(3, n_docs=5)
    stats = document_statistics(phi, doc_word_matrix(corpus))
    t = stats.theta
    p = t.max(axis=1)
    assert np.allclose(stats.max_posterior_logit(), np.log(p / (1 - p)))
    assert np.allclose(stats.std(), t.std(axis=1))
    assert np.allclose(stats.negative_entropy(), (t * np.log(np.clip(t, 1e-300, 1))).sum(1))


def test_clopper_pearson_closed_forms():
    # no success in n trials: upper limit 1 - alpha^(1/n); all successes: lower alpha^(1/n)
    assert clopper_pearson_upper(0, 10, 0.05) == pytest.approx(1 - 0.05 ** (1 / 10))
    assert clopper_pearson_lower(10, 10, 0.05) == pytest.approx(0.05 ** (1 / 10))
    assert clopper_pearson_lower(0, 10, 0.05) == 0.0
    assert clopper_pearson_upper(10, 10, 0.05) == 1.0
    # a known tabulated value: 1 success in 20, one-sided 97.5% upper limit 0.2487
    assert clopper_pearson_upper(1, 20, 0.025) == pytest.approx(0.2487, abs=1e-4)


def test_epsilon_lower_bound_by_hand():
    # 100/100 members caught, 0/100 non-members flagged, delta = 0, 95%: each limit at 2.5%
    bound = epsilon_lower_bound(100, 100, 0, 100, delta=0.0, confidence=0.95)
    tpr_low = 0.025 ** (1 / 100)
    fpr_high = 1 - 0.025 ** (1 / 100)
    assert bound.epsilon == pytest.approx(math.log(tpr_low / fpr_high))
    # an attack no better than chance gives no bound
    assert epsilon_lower_bound(50, 100, 50, 100, delta=1e-5).epsilon == 0.0
    # delta is subtracted: with delta >= TPR the first inequality says nothing
    assert epsilon_lower_bound(1, 100, 0, 100, delta=0.5).epsilon == 0.0
