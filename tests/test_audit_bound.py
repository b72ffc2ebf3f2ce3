"""The split-threshold epsilon bound and the claim it is compared with."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fdptm.audit.attacks import verdict
from fdptm.audit.bound import DocumentClaim, claim_per_document, split_bound
from fdptm.audit.epsilon import epsilon_lower_bound, epsilon_lower_bounds
from fdptm.privacy.adjacency import Adjacency


def test_perfect_attack_bound_comes_from_the_evaluation_half_only():
    members = np.r_[np.ones(200, bool), np.zeros(200, bool)]
    scores = members.astype(float)
    result = split_bound(scores, members, delta=0.0, seed=1)
    rng = np.random.default_rng(1)
    selection = np.zeros(400, bool)
    selection[rng.permutation(400)[:200]] = True
    ev = members[~selection]
    expected = epsilon_lower_bound(int(ev.sum()), int(ev.sum()), 0, int((~ev).sum()), delta=0.0)
    assert result.bound.epsilon == pytest.approx(expected.epsilon)
    assert result.threshold == 1.0


def test_a_useless_attack_bounds_nothing():
    rng = np.random.default_rng(2)
    members = rng.random(2000) < 0.5
    scores = rng.normal(size=2000)  # independent of membership
    # the true epsilon of an attack on nothing is 0, and the bound exceeds the truth with
    # probability at most 1 - confidence = 5% over the data (0 of 100 null draws did)
    assert split_bound(scores, members, delta=1e-5, seed=3).bound.epsilon == 0.0


@pytest.mark.parametrize(
    "unit,docs,expected",
    [
        (Adjacency.DOCUMENT, True, (1.0, 1e-6)),
        (Adjacency.AUTHOR, True, (1.0, 1e-6)),
        (Adjacency.AUTHOR, False, (2.0, 1e-6 * (1 + math.e))),
        (Adjacency.WORD, True, (3.0, 1e-6 * (1 + math.e + math.e**2))),
        (Adjacency.DOCUMENT_REPLACE, True, (None, None)),
    ],
)
def test_claim_per_document(unit, docs, expected):
    claim = claim_per_document(1.0, 1e-6, unit, authors_are_documents=docs, max_tokens_per_doc=3)
    if expected[0] is None:
        assert claim.epsilon is None and "says nothing" in claim.reason
    else:
        assert (claim.epsilon, claim.delta) == pytest.approx(expected)


def test_vectorised_bounds_equal_the_scalar_ones_including_the_edges():
    rng = np.random.default_rng(5)
    tp = np.r_[0, 40, rng.integers(0, 41, 50)]
    fp = np.r_[0, 60, rng.integers(0, 61, 50)]
    vector = epsilon_lower_bounds(tp, 40, fp, 60, delta=1e-3, confidence=0.9)
    scalar = [
        epsilon_lower_bound(int(t), 40, int(f), 60, delta=1e-3, confidence=0.9).epsilon
        for t, f in zip(tp, fp, strict=True)
    ]
    assert vector == pytest.approx(scalar, abs=1e-12)


def _results(release: float, m1: float, m2: float) -> dict:
    def attack(scope, eps):
        return {"scope": scope, "epsilon_lower_bound": {"epsilon": eps}}

    return {
        "lira": attack("release", release),
        "huang": attack("release", 0.0),
        "lira-vocabulary": attack("M1", m1),
        "m2-lira": attack("M2", m2),
    }


@pytest.mark.parametrize(
    ("bounds", "verdict_", "suspects"),
    [
        ((0.5, 0.2, 0.6), "passed", []),
        ((0.5, 0.3, 0.6), "failed", ["M1"]),  # over M1's share, though under the total
        ((0.5, 0.2, 0.8), "failed", ["M2"]),
        ((1.1, 0.2, 0.6), "failed", ["undetermined"]),  # neither stage over its own share
        ((1.1, 0.3, 0.8), "failed", ["M1", "M2"]),
    ],
)
def test_verdict_names_the_stage_whose_own_test_failed(bounds, verdict_, suspects):
    claims = {
        "release": DocumentClaim(1.0, 1e-5, "total"),
        "M1": DocumentClaim(0.25, 5e-6, "M1 share"),
        "M2": DocumentClaim(0.75, 5e-6, "M2 share"),
    }
    outcome = verdict(_results(*bounds), claims)
    assert outcome["verdict"] == verdict_ and outcome["suspects"] == suspects
    assert outcome["largest_lower_bound"] == max(bounds)
    assert outcome["bounds"]["M1"] == {
        "claim": 0.25,
        "lower_bound": bounds[1],
        "exceeded": bounds[1] > 0.25,
    }


def test_a_scope_without_a_per_document_claim_never_fails():
    claims = {
        "release": DocumentClaim(None, None, "replace-one"),
        "M1": DocumentClaim(0.25, 5e-6, "M1 share"),
        "M2": DocumentClaim(None, None, "replace-one"),
    }
    assert verdict(_results(9.0, 0.1, 9.0), claims)["verdict"] == "passed"


def _reference_split(scores, members, delta, confidence, seed):
    """The threshold search written out: every threshold, scalar bounds, smallest on ties."""
    rng = np.random.default_rng(seed)
    selection = np.zeros(len(scores), dtype=bool)
    selection[rng.permutation(len(scores))[: len(scores) // 2]] = True
    s, m = scores[selection], members[selection]
    best, best_value = None, -1.0
    for threshold in np.unique(s):  # ascending: keeps the smallest of tied thresholds
        flagged = s >= threshold
        value = epsilon_lower_bound(
            int((flagged & m).sum()),
            int(m.sum()),
            int((flagged & ~m).sum()),
            int((~m).sum()),
            delta=delta,
            confidence=confidence,
        ).epsilon
        if value > best_value:
            best, best_value = threshold, value
    return best


@pytest.mark.parametrize("seed", range(20))
def test_threshold_search_equals_the_written_out_loop_on_tied_discrete_scores(seed):
    rng = np.random.default_rng(seed)
    members = rng.random(300) < 0.5
    scores = rng.integers(0, 6, 300) + members * rng.integers(0, 2, 300)  # few values, ties
    scores = scores.astype(float)
    found = split_bound(scores, members, delta=1e-5, confidence=0.9, seed=seed)
    assert found.threshold == _reference_split(scores, members, 1e-5, 0.9, seed)


def test_nan_scores_are_refused():
    scores = np.array([0.1, np.nan, 0.3, 0.4])
    with pytest.raises(ValueError, match="NaN"):
        split_bound(scores, np.array([True, False, True, False]), delta=0.0)
