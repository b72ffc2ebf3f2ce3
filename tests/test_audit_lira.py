"""LiRA scores and ROC summaries on statistics with planted membership."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fdptm.audit.lira import normality_check, offline_scores, online_scores, roc


def _shadows(seed: int, shift: float, n_docs: int = 400, n_shadows: int = 32):
    """zeta of every document in every shadow: N(base_d, 1), plus ``shift`` when d is in."""
    rng = np.random.default_rng(seed)
    base = rng.normal(-50, 10, n_docs)  # per-document hardness, as zeta has
    shadow_in = rng.random((n_shadows, n_docs)) < 0.5
    shadow = base + rng.normal(0, 1, (n_shadows, n_docs)) + shift * shadow_in
    members = rng.random(n_docs) < 0.5
    target = base + rng.normal(0, 1, n_docs) + shift * members
    return shadow, shadow_in, target, members


@pytest.mark.parametrize("scores", [online_scores, offline_scores])
def test_lira_finds_planted_members_and_nothing_when_there_is_nothing(scores):
    shadow, shadow_in, target, members = _shadows(0, shift=3.0)
    strong = roc(scores(shadow, shadow_in, target), members)
    # a shift of 3 sd separates the Gaussians: AUC of N(3,1) vs N(0,1) is Phi(3/sqrt 2)
    assert strong.auc() > 0.95 and strong.tpr_at(0.01) > 0.5
    shadow, shadow_in, target, members = _shadows(1, shift=0.0)
    null = roc(scores(shadow, shadow_in, target), members)
    # no signal: AUC = 0.5 with standard error about sqrt((n+ + n- + 1) / (12 n+ n-)) ~ 0.029
    assert abs(null.auc() - 0.5) < 4 * math.sqrt(401 / (12 * 200 * 200))


def test_per_document_hardness_is_what_lira_corrects():
    """A global threshold on zeta is swamped by per-document hardness; LiRA is not."""
    shadow, shadow_in, target, members = _shadows(2, shift=1.5)
    assert roc(target, members).auc() < 0.6
    assert roc(online_scores(shadow, shadow_in, target), members).auc() > 0.8


def test_roc_by_hand():
    curve = roc(np.array([0.9, 0.8, 0.8, 0.1]), np.array([True, False, True, False]))
    assert curve.tpr.tolist() == [0.0, 0.5, 1.0, 1.0]
    assert curve.fpr.tolist() == [0.0, 0.0, 0.5, 1.0]
    assert curve.auc() == pytest.approx(0.875)
    assert curve.tpr_at(0.0) == 0.5 and curve.tpr_at(0.5) == 1.0


def test_a_document_no_shadow_saw_gets_no_score():
    shadow = np.zeros((4, 2))
    shadow_in = np.array([[True, False]] * 4)  # document 0 always in, document 1 always out
    scores = online_scores(shadow, shadow_in, np.zeros(2))
    assert np.isnan(scores).all()
    assert np.isnan(offline_scores(shadow, shadow_in, np.zeros(2))[0])


def test_normality_check_counts_rejections_with_fdr_control():
    rng = np.random.default_rng(5)
    shadow_in = rng.random((40, 50)) < 0.5
    gaussian = rng.normal(size=(40, 50))
    check = normality_check(gaussian, shadow_in)
    assert check.tests == 100
    # all nulls true: BH keeps the family-wise chance of any rejection at most 5%
    assert check.rejected == 0
    skewed = rng.exponential(size=(40, 50)) ** 3
    assert normality_check(skewed, shadow_in).rejected > 50


def test_normality_check_tests_each_sample_as_on_its_own():
    """The vectorised tests (one call per sample size) count what one Shapiro-Wilk test per
    sample counts, with constant samples and samples under 3 values left out."""
    from scipy.stats import false_discovery_control, shapiro

    rng = np.random.default_rng(9)
    shadow_in = rng.random((12, 300)) < rng.uniform(0.05, 0.95, 300)
    shadow = np.where(rng.random(300) < 0.3, rng.exponential(size=(12, 300)) ** 2, 0.0)
    shadow += rng.normal(size=(12, 300)) * (rng.random(300) < 0.9)
    p_values = []
    for side in (shadow_in, ~shadow_in):
        for d in range(300):
            values = shadow[side[:, d], d]
            if len(values) >= 3 and np.ptp(values) > 0:
                p_values.append(shapiro(values).pvalue)
    expected = int((false_discovery_control(np.array(p_values), method="bh") <= 0.05).sum())
    check = normality_check(shadow, shadow_in)
    assert (check.tests, check.rejected) == (len(p_values), expected)
    assert 0 < expected < len(p_values) and len(p_values) < 600
