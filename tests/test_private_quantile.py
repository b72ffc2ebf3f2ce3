"""The private quantile (fdptm.privacy.quantile) and dp-vi's private clipping norm: the
privacy map against OpenDP's, the sampled distribution against the exponential mechanism's
(numpy and OpenDP), the guarantee on neighbouring datasets, the unit norms, the calibration
with the quantile's share, and the released C."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from fdptm.errors import BadInputError
from fdptm.evaluation.synthetic import generate_lda
from fdptm.mechanisms import dp_vi
from fdptm.mechanisms.lda import Corpus
from fdptm.privacy import quantile
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NUMPY_QUANTILE, OPENDP_QUANTILE, NoiseSource

DELTA = 1e-5
VALUES = np.array([1.0, 1.5, 2.2, 2.5, 3.1, 3.3, 4.8, 0.2, 2.9, 2.0])
CANDIDATES = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 5.0])


def probabilities(values: np.ndarray, alpha: float, scale: float) -> np.ndarray:
    """The exponential mechanism's exact output distribution over CANDIDATES."""
    logits = -quantile.scores(values, CANDIDATES, alpha) / scale
    return np.exp(logits - special.logsumexp(logits))


@pytest.mark.parametrize("alpha", [0.5, 0.75, 0.1])
@pytest.mark.parametrize("scale", [0.3, 1.0, 7.5])
def test_rho_is_opendps_privacy_map(alpha, scale):
    m = quantile.opendp_quantile_measurement(CANDIDATES, alpha, scale)
    assert quantile.rho(alpha, scale) == pytest.approx(m.map(1), rel=1e-9)
    assert quantile.pure_epsilon(alpha, scale) ** 2 / 8 == pytest.approx(m.map(1), rel=1e-9)


@pytest.mark.parametrize("alpha,target", [(0.5, 0.003), (0.8, 1e-4), (0.3, 2.0)])
def test_scale_for_meets_the_target_rho_in_opendps_own_map(alpha, target):
    scale = quantile.scale_for(alpha, target)
    assert quantile.opendp_quantile_measurement(CANDIDATES, alpha, scale).map(1) <= target
    assert quantile.rho(alpha, scale * (1 - 1e-6)) > target


@pytest.mark.parametrize("alpha", [0.5, 0.75])
def test_scores_are_opendps_scores_up_to_its_integer_scaling(alpha):
    import opendp.prelude as dp

    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    score = dp.t.make_quantile_score_candidates(
        domain, dp.symmetric_distance(), CANDIDATES.tolist(), alpha=alpha
    )
    theirs = np.asarray(score(VALUES.tolist()), dtype=float)
    ours = quantile.scores(VALUES, CANDIDATES, alpha)
    ratio = theirs[ours > 0] / ours[ours > 0]
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)  # one positive constant
    np.testing.assert_array_equal(theirs == 0, ours == 0)


def test_one_unit_moves_the_output_probabilities_by_at_most_e_to_the_epsilon():
    alpha, scale = 0.5, 1.3
    eps = quantile.pure_epsilon(alpha, scale)
    for removed in range(len(VALUES)):
        p = probabilities(VALUES, alpha, scale)
        q = probabilities(np.delete(VALUES, removed), alpha, scale)
        assert np.max(np.abs(np.log(p / q))) <= eps * (1 + 1e-12)


@pytest.mark.parametrize("secure", [False, True])
def test_both_samplers_draw_from_the_exponential_mechanism(secure):
    """Chi-square goodness of fit against the exact distribution: a false failure has
    probability 1e-4 (OpenDP's draws cannot be seeded; numpy's are)."""
    alpha, scale, draws = 0.5, 2.0, 3000
    source = NoiseSource.create(None) if secure else NoiseSource.create(11)
    rho = quantile.rho(alpha, scale) * (1 + 1e-6)
    out = [source.private_quantile(VALUES, CANDIDATES, alpha, scale, rho) for _ in range(draws)]
    observed = np.array([np.sum(np.asarray(out) == c) for c in CANDIDATES])
    assert observed.sum() == draws  # every output is a candidate
    expected = draws * probabilities(VALUES, alpha, scale)
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    assert source.draws == {(OPENDP_QUANTILE if secure else NUMPY_QUANTILE): draws}


def test_the_quantile_refuses_a_zero_scale_non_finite_values_and_an_unaccounted_cost():
    source = NoiseSource.create(1)
    with pytest.raises(ValueError, match="scale"):
        source.private_quantile(VALUES, CANDIDATES, 0.5, 0.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        source.private_quantile(np.array([1.0, np.nan]), CANDIDATES, 0.5, 1.0, 1.0)
    with pytest.raises(ValueError, match="costs more than rho"):
        source.private_quantile(VALUES, CANDIDATES, 0.5, 1.0, quantile.rho(0.5, 1.0) / 2)


# --- dp-vi's private clipping norm ------------------------------------------------------


def dp_vi_params(epsilon=1.5, *, iterations=20, **options):
    return dp_vi.dp_vi_params(
        epsilon,
        DELTA,
        n_topics=3,
        adjacency=Adjacency.AUTHOR,
        max_docs_per_author=4,
        iterations=iterations,
        **options,
    )


def test_unit_norms_sum_an_authors_counts_over_their_documents_before_the_norm():
    # author 0: docs 0 and 2 share word 1; author 1: doc 1; author 2 has an empty document
    words = np.array([0, 1, 1, 2, 1, 1, 3], dtype=np.int64)
    doc_ptr = np.array([0, 2, 4, 7, 7], dtype=np.int64)
    corpus = Corpus(doc_ptr, words, 4, doc_author=np.array([0, 1, 0, 2]))
    norms = dp_vi.unit_norms(dp_vi.prepare(corpus, Adjacency.AUTHOR))
    # author 0: word 0 once, word 1 three times, word 3 once; author 1: words 1 and 2 once
    np.testing.assert_allclose(norms, [math.sqrt(1 + 9 + 1), math.sqrt(2), 0.0])
    by_doc = dp_vi.unit_norms(dp_vi.prepare(corpus, Adjacency.DOCUMENT))
    np.testing.assert_allclose(by_doc, [math.sqrt(2), math.sqrt(2), math.sqrt(5), 0.0])


@pytest.mark.parametrize("share", [0.05, 0.3])
def test_the_quantile_gets_its_share_of_the_runs_zcdp_and_the_total_meets_epsilon(share):
    p = dp_vi_params(clip="private", clip_share=share)
    z, T = p.noise_multiplier, p.iterations
    assert p.clip_rho / (p.clip_rho + T / (2 * z**2)) == pytest.approx(share, rel=1e-12)
    assert quantile.rho(p.clip_quantile, p.clip_scale) <= p.clip_rho
    event = p.event()
    assert event["type"] == "composed" and event["events"][0]["rho"] == p.clip_rho
    assert p.accountant_epsilon <= 1.5
    smaller = dp_vi.dp_event(z * (1 - 1e-4), 1.0, T, share)
    assert dp_vi.accountant_epsilon(smaller, DELTA, "rdp") > 1.5
    fixed = dp_vi_params()
    assert z > fixed.noise_multiplier  # the quantile's share costs Gaussian noise
    assert p.basic_epsilon >= p.accountant_epsilon
    assert p.basic_epsilon - dp_vi.basic_composition(z, 1.0, T, DELTA)[0] == pytest.approx(
        quantile.pure_epsilon(p.clip_quantile, p.clip_scale)
    )
    d = p.to_dict()
    assert d["clip"] == "private" and d["noise_std"] is None


@pytest.mark.parametrize(
    "change",
    [
        {"clip": "privat"},
        {"clip": "private", "clip_quantile": 1.0},
        {"clip": "private", "clip_quantile": 0.0},
        {"clip": "private", "clip_share": 1.0},
        {"clip": "private", "accountant": "pld"},
    ],
)
def test_unusable_private_clip_options_are_refused(change):
    with pytest.raises(BadInputError):
        dp_vi_params(**change)


def test_training_releases_a_clip_near_the_unit_norms_quantile():
    data = generate_lda(400, 80, 3, doc_length=12, eta=0.05, docs_per_author=2, seed=4)
    norms = dp_vi.unit_norms(dp_vi.prepare(data.corpus, Adjacency.AUTHOR))
    for alpha in (0.5, 0.9):
        p = dp_vi_params(50.0, iterations=3, clip="private", clip_quantile=alpha)
        released: dict = {}
        phi = dp_vi.train_dp_vi(data.corpus, 3, p, NoiseSource.create(2), released=released)
        assert np.allclose(phi.sum(axis=1), 1.0)
        c = released["clip"]
        assert c in dp_vi.CANDIDATES
        # within one grid step (19%) of the empirical quantile, with eps 50 and 200 units
        assert np.quantile(norms, alpha) / 1.2 <= c <= np.quantile(norms, alpha) * 1.2


def test_neighbouring_authors_change_the_quantiles_input_by_one_value():
    """Through the pipeline's own path (SAN's OOV-only documents dropped by ``without_word``,
    then ``prepare``): authors left without documents are no units, so adding the last
    author adds one norm, not one per empty author before it."""
    from collections import Counter

    from fdptm.mechanisms.lda import without_word

    oov = 4
    # author 0 is real; authors 1..50 wrote only OOV tokens
    words = [0, 1, 2] + [oov] * 50
    doc_ptr = list(range(0, 4, 3)) + [3 + i for i in range(1, 51)]
    authors = list(range(51))
    d = Corpus(np.array(doc_ptr), np.array(words), oov + 1, np.array(authors))
    d_plus = Corpus(
        np.array([*doc_ptr, 55]), np.array([*words, 1, 3]), oov + 1, np.array([*authors, 51])
    )

    def norms(corpus):
        data = dp_vi.prepare(without_word(corpus, oov), Adjacency.AUTHOR)
        return Counter(np.round(dp_vi.unit_norms(data), 12).tolist())

    difference = (norms(d_plus) - norms(d)) + (norms(d) - norms(d_plus))
    assert sum(difference.values()) == 1
