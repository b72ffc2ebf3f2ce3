"""Adjacency conversions, budget plans and composition: the ledger's arithmetic."""

from __future__ import annotations

import math

import pytest

from fdptm.errors import BadInputError
from fdptm.mechanisms.guarantee import (
    APPROXIMATE_DP,
    CLAIMED_UNPROVEN,
    RANDOM_DP,
    combine_notions,
    describe,
)
from fdptm.privacy.accountant import StageSpec, check_delta, check_epsilon, compose, plan_budget
from fdptm.privacy.adjacency import (
    Adjacency,
    convert,
    group_of_two,
    group_privacy,
    invert_group_of_two,
    invert_group_privacy,
    weakest,
)

A, D, W = Adjacency.AUTHOR, Adjacency.DOCUMENT, Adjacency.WORD


def test_group_of_two_is_the_group_privacy_formula():
    eps, delta = group_of_two(0.7, 1e-6)
    assert eps == pytest.approx(1.4)
    assert delta == pytest.approx((1 + math.exp(0.7)) * 1e-6)


@pytest.mark.parametrize("eps,delta", [(0.1, 1e-9), (1.0, 1e-5), (8.0, 1e-3)])
def test_invert_group_of_two_round_trips(eps, delta):
    assert group_of_two(*invert_group_of_two(eps, delta)) == pytest.approx((eps, delta))


def test_author_to_word_doubles_epsilon():
    c = convert(1.0, 1e-5, A, W)
    assert (c.epsilon_out, c.group_size) == (2.0, 2)
    assert c.delta_out == pytest.approx((1 + math.e) * 1e-5)


def test_author_is_document_when_every_document_is_its_own_author():
    same = convert(1.0, 1e-5, A, D, authors_are_documents=True)
    assert (same.epsilon_out, same.delta_out, same.group_size) == (1.0, 1e-5, 1)
    assert convert(1.0, 1e-5, A, D, authors_are_documents=False).epsilon_out == 2.0


def test_weaker_to_stronger_is_refused():
    with pytest.raises(ValueError, match="cannot convert a word-level"):
        convert(1.0, 0.0, W, A)


def test_weakest():
    assert weakest([A, W, D]) == W
    assert weakest([A, D]) == D


SPECS = [
    StageSpec("vocabulary", "dp-set-union/weighted", D, True, 0.25),
    StageSpec("train", "hdp-lda", W, False, 0.75),
]


def test_plan_splits_25_75_and_inverts_the_conversion():
    plan = plan_budget(4.0, 1e-5, SPECS, authors_are_documents=True)
    m1, m2 = plan.stage("vocabulary"), plan.stage("train")
    assert plan.unit == W
    assert (m1.release_epsilon, m2.release_epsilon) == (1.0, 3.0)
    assert m1.epsilon == pytest.approx(0.5)  # document add/remove -> word replace doubles it
    assert m1.delta == pytest.approx(1e-5 / (1 + math.exp(0.5)))
    assert (m2.epsilon, m2.delta) == (3.0, 0.0)  # HDP-LDA is pure epsilon-DP


@pytest.mark.parametrize("authors_are_documents", [True, False])
@pytest.mark.parametrize("eps,delta", [(0.5, 1e-7), (4.0, 1e-5), (500.0, 1e-5)])
def test_composing_the_plan_gives_back_the_request(eps, delta, authors_are_documents):
    specs = [StageSpec("vocabulary", "dp-set-union/weighted", A, True, 0.25), SPECS[1]]
    plan = plan_budget(eps, delta, specs, authors_are_documents=authors_are_documents)
    got = compose(
        [(s.epsilon, s.delta, s.adjacency) for s in plan.stages],
        authors_are_documents=authors_are_documents,
    )
    assert got.unit == W
    assert got.epsilon == pytest.approx(eps, rel=1e-12)
    assert got.delta == pytest.approx(delta, rel=1e-12)


def test_basic_composition_sums_same_unit_spends():
    got = compose([(1.0, 1e-6, D), (2.5, 2e-6, D), (0.5, 0.0, D)], authors_are_documents=True)
    assert (got.epsilon, got.delta, got.unit) == (4.0, pytest.approx(3e-6), D)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1"])
def test_bad_epsilon(bad):
    with pytest.raises(BadInputError, match="epsilon must be a finite number > 0"):
        check_epsilon(bad)


@pytest.mark.parametrize("bad", [0, 1, -1e-5, 1.5, float("nan")])
def test_bad_delta(bad):
    with pytest.raises(BadInputError, match=r"open interval \(0, 1\)"):
        check_delta(bad)


def test_bad_split():
    bad = [SPECS[0], StageSpec("train", "hdp-lda", W, False, 0.5)]
    with pytest.raises(BadInputError, match="summing to 1"):
        plan_budget(1.0, 1e-5, bad, authors_are_documents=True)


def test_conversions_do_not_overflow_at_huge_epsilon():
    eps, delta = group_of_two(800.0, 1e-5)
    assert eps == 1600.0 and delta == math.inf  # a vacuous delta, stated as such
    step_eps, step_delta = invert_group_of_two(3000.0, 1e-5)
    assert step_eps == 1500.0 and 0.0 <= step_delta < 1e-300
    plan = plan_budget(6000.0, 1e-5, SPECS, authors_are_documents=True)
    assert plan.stage("vocabulary").epsilon == pytest.approx(750.0)


AR, DR = Adjacency.AUTHOR_REPLACE, Adjacency.DOCUMENT_REPLACE


@pytest.mark.parametrize(
    "notions,docs,expected",
    [
        ([A, DR], False, DR),  # author add/remove -> replace one document: group of two
        ([A, AR], False, AR),
        ([D, AR], False, DR),  # neither implies the other; both imply document-replace
        ([DR, W], False, W),
        ([D, DR], True, DR),
        ([A, AR], True, DR),  # without author ids the author notions are the document ones
    ],
)
def test_weakest_common_notion_over_replace_adjacencies(notions, docs, expected):
    assert weakest(notions, authors_are_documents=docs) == expected


def test_conversions_are_free_for_special_cases_and_refused_upwards():
    assert convert(1.0, 1e-6, DR, W).epsilon_out == 1.0  # a token change replaces a document
    assert convert(1.0, 1e-6, AR, DR).epsilon_out == 1.0
    two = convert(1.0, 1e-6, D, DR)
    assert (two.epsilon_out, two.delta_out) == pytest.approx((2.0, 1e-6 * (1 + math.e)))
    for source, target in [(DR, D), (AR, A), (AR, D), (W, DR)]:
        with pytest.raises(ValueError, match="cannot convert"):
            convert(1.0, 1e-6, source, target)


@pytest.mark.parametrize("eps,delta,k", [(0.3, 1e-6, 1), (0.5, 1e-5, 2), (0.1, 1e-7, 10)])
def test_group_privacy_sums_the_delta_series(eps, delta, k):
    got = group_privacy(eps, delta, k)
    series = delta * sum(math.exp(i * eps) for i in range(k))
    assert got == pytest.approx((k * eps, series), rel=1e-12)
    if k == 2:
        assert got == pytest.approx(group_of_two(eps, delta))
    assert invert_group_privacy(*got, k) == pytest.approx((eps, delta), rel=1e-12)


def test_notions_are_never_silently_mixed():
    assert combine_notions([(APPROXIMATE_DP, 0.0)] * 2) == (APPROXIMATE_DP, 0.0)
    assert combine_notions([(APPROXIMATE_DP, 0.0), (RANDOM_DP, 0.05)]) == (RANDOM_DP, 0.05)
    assert combine_notions([(RANDOM_DP, 0.05), (RANDOM_DP, 0.01)]) == (
        RANDOM_DP,
        pytest.approx(0.06),
    )
    assert combine_notions([(RANDOM_DP, 0.05), (CLAIMED_UNPROVEN, 0.0)])[0] == CLAIMED_UNPROVEN
    got = compose(
        [(1.0, 1e-6, D), (2.0, 1e-6, D)],
        authors_are_documents=True,
        notions=[(APPROXIMATE_DP, 0.0), (RANDOM_DP, 0.01)],
    )
    assert (got.notion, got.gamma, got.epsilon) == (RANDOM_DP, 0.01, 3.0)
    assert "NOT plain differential privacy" in describe(RANDOM_DP, 3.0, 2e-6, 0.01)
    with pytest.raises(ValueError, match="random-DP spend"):
        compose(
            [(1.0, 1e-6, D)],
            W,
            authors_are_documents=True,
            notions=[(RANDOM_DP, 0.01)],
        )
    with pytest.raises(BadInputError, match="random DP is not converted"):
        plan_budget(
            2.0,
            1e-5,
            [
                StageSpec("vocabulary", "su", D, True, 0.25),
                StageSpec("train", "x", A, True, 0.75, RANDOM_DP),
            ],
            authors_are_documents=False,
        )
