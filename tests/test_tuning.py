"""--tune (fdptm.mechanisms.tuning): the calibration against Papernot & Steinke's Theorem 2,
every configuration's rho, the geometric number of trials, the split, the score's
sensitivity, the selection, and a tuned release through the real flow."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from fdptm.errors import BadInputError
from fdptm.evaluation.synthetic import generate_lda
from fdptm.mechanisms import tuning
from fdptm.mechanisms.lda import Corpus, subset
from fdptm.privacy import events
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource

DELTA = 1e-5


def params(epsilon=1.5, **options):
    return tuning.tuned_dp_vi_params(
        epsilon,
        DELTA,
        n_topics=3,
        adjacency=Adjacency.AUTHOR,
        max_docs_per_author=4,
        **options,
    )


def theorem_2_epsilon(rho: float, mean: float, delta: float) -> float:
    """Papernot & Steinke, Theorem 2 with eta = 1 (geometric, gamma = 1 / mean) on a
    rho-zCDP trial, converted to (epsilon, delta) by Canonne, Kamath & Steinke 2020,
    Proposition 12; written from the paper, independently of dp-accounting."""
    orders = np.concatenate([np.linspace(1.01, 10, 400), np.geomspace(10, 1e4, 400)])
    c = 2 * np.min((1 - 1 / orders) * orders * rho + math.log(mean) / orders)
    rdp = orders * rho + math.log(mean) / (orders - 1) + c
    eps = rdp + np.log1p(-1 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    return float(eps.min())


@pytest.mark.parametrize("epsilon,mean", [(1.5, 5.0), (0.5, 10.0), (3.0, 2.0)])
def test_trial_rho_is_the_largest_rho_whose_repetition_meets_epsilon(epsilon, mean):
    rho = tuning.trial_rho(epsilon, DELTA, mean)

    def eps(r):
        return events.epsilon_of(events.repeat_and_select(events.zcdp(r), mean, 1.0), DELTA)

    assert eps(rho) <= epsilon < eps(rho * (1 + 1e-6))
    # the paper's bound, computed independently, agrees with dp-accounting's within 2%
    assert theorem_2_epsilon(rho, mean, DELTA) == pytest.approx(epsilon, rel=0.02)


def test_every_configuration_and_the_score_use_at_most_the_trials_rho():
    p = params(
        tune_iterations="10,40", tune_thresholds="1,3", tune_clips="2,private", mean_trials=5.0
    )
    assert len(p.configs) == 8
    assert {(c.iterations, c.threshold, c.clip) for c in p.configs} == {
        (t, thr, c) for t in (10, 40) for thr in (1.0, 3.0) for c in (2.0, None)
    }
    for c in p.configs:
        used = c.iterations / (2 * c.noise_multiplier**2) + c.clip_rho
        assert used <= p.trial_rho * (1 + 1e-9)
        assert used >= p.trial_rho * (1 - 1e-5)  # calibrated tightly, not just below
        assert c.sampling_rate == 1.0 and c.accountant == "rdp"
    assert 1 / (2 * p.score_noise_multiplier**2) == pytest.approx(p.trial_rho, rel=1e-12)
    g = p.guarantee()
    assert g.epsilon == p.accountant_epsilon <= 1.5 and g.adjacency == Adjacency.AUTHOR
    event = json.loads(json.dumps(g.event))
    assert events.epsilon_of(event, DELTA) == pytest.approx(g.epsilon, rel=1e-12)
    assert event["type"] == "repeat_and_select" and event["shape"] == 1.0
    # the price of tuning: one trial alone would have cost about half as much
    assert p.single_trial_epsilon < 0.6 * p.accountant_epsilon
    json.dumps(p.to_dict())


@pytest.mark.parametrize(
    "change",
    [
        {"tune_iterations": "a,b"},
        {"tune_iterations": "10,10"},
        {"tune_iterations": ""},
        {"tune_thresholds": "-1"},
        {"tune_clips": "2,median"},
        {"tune_clips": "0"},
        {"mean_trials": 0.5},
        {"holdout": 1.0},
        {"holdout": 0.0},
    ],
)
def test_unusable_tuning_options_are_refused(change):
    with pytest.raises(BadInputError):
        params(**change)


def test_the_number_of_trials_is_geometric_with_the_stated_mean():
    rng = np.random.default_rng(5)
    draws = np.array([tuning.number_of_trials(5.0, rng) for _ in range(20000)])
    assert draws.min() >= 1
    sd = math.sqrt(1 - 0.2) / 0.2 / math.sqrt(len(draws))
    assert abs(draws.mean() - 5.0) < 4 * sd
    assert stats.binomtest(int(np.sum(draws == 1)), len(draws), 0.2).pvalue > 1e-4


def test_the_split_holds_out_whole_units_and_renumbers_the_training_authors():
    data = generate_lda(900, 60, 3, doc_length=10, docs_per_author=3, seed=2)
    p = params(holdout=0.3)
    train, test, test_units = tuning.split_units(data.corpus, p, np.random.default_rng(1))
    held = set(test_units.tolist())
    assert train.n_docs + test.n_docs == data.corpus.n_docs
    assert train.n_docs == np.sum(~np.isin(data.corpus.doc_author, list(held)))
    assert stats.binomtest(len(held), 300, 0.3).pvalue > 1e-4
    assert sorted(set(train.doc_author.tolist())) == list(range(300 - len(held)))
    for author in held:  # every document of a held-out author is held out
        assert np.sum(test_units == author) == np.sum(data.corpus.doc_author == author)


def test_one_held_out_unit_moves_the_score_total_by_at_most_b():
    data = generate_lda(120, 40, 3, doc_length=15, docs_per_author=2, seed=3)
    units = data.corpus.doc_author
    phi = np.random.default_rng(0).dirichlet(np.full(40, 0.05), 3)
    total = tuning.heldout_total(phi, data.corpus, units, 0.1)
    bound = tuning.score_bound(40)
    for u in np.unique(units):
        keep = units != u
        without = tuning.heldout_total(phi, subset(data.corpus, keep), units[keep], 0.1)
        assert abs(total - without) <= bound + 1e-9
    good = tuning.heldout_total(data.phi, data.corpus, units, 0.1)
    uniform = tuning.heldout_total(np.full((3, 40), 1 / 40), data.corpus, units, 0.1)
    assert good > uniform == pytest.approx(0.0, abs=1e-9)


def test_selection_releases_the_better_configuration_and_its_parameters():
    """A threshold no noisy entry can clear leaves only eta (a uniform release); at
    epsilon 200 the sharp configuration's held-out score wins whenever it is tried, and with
    a mean of 30 trials it is tried (fixed seed)."""
    data = generate_lda(800, 60, 3, doc_length=20, eta=0.05, docs_per_author=2, seed=4)
    p = params(200.0, tune_iterations="10", tune_thresholds="1,1e9", mean_trials=30.0)
    released: dict = {}
    phi = tuning.train_tuned_dp_vi(data.corpus, 3, p, NoiseSource.create(6), released=released)
    assert released == {"iterations": 10, "threshold": 1.0, "clip": 2.0}
    assert np.allclose(phi.sum(axis=1), 1.0) and phi.max() > 5 / 60


def test_a_corpus_without_author_ids_splits_documents():
    corpus = Corpus(np.array([0, 2, 4, 6]), np.array([0, 1, 1, 2, 2, 0]), 3)
    p = params(holdout=0.5)
    train, test, units = tuning.split_units(corpus, p, np.random.default_rng(0))
    assert train.n_docs + test.n_docs == 3 and len(units) == test.n_docs


def test_an_empty_training_split_releases_noise_instead_of_failing():
    """With every unit held out (holdout near 1, two units) the trials train on nothing;
    a refusal after the spend would depend on the number of units."""
    corpus = Corpus(np.array([0, 3, 6]), np.array([0, 1, 2, 2, 1, 0]), 3, np.array([0, 1]))
    p = params(5.0, tune_iterations="3", holdout=0.999, mean_trials=2.0)
    train, _, _ = tuning.split_units(corpus, p, np.random.default_rng(0))
    assert train.n_docs == 0
    released: dict = {}
    phi = tuning.train_tuned_dp_vi(corpus, 3, p, NoiseSource.create(0), released=released)
    assert np.allclose(phi.sum(axis=1), 1.0) and set(released) == {
        "iterations",
        "threshold",
        "clip",
    }
