"""The split-threshold epsilon bound and the claim it is compared with."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fdptm.audit.bound import claim_per_document, split_bound
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
