"""M2 ``spectral``: moment estimators, sensitivities, noise, privacy arithmetic and recovery."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

from fdptm.errors import BadInputError
from fdptm.evaluation.matching import matched_distance
from fdptm.evaluation.synthetic import generate_lda
from fdptm.mechanisms.guarantee import APPROXIMATE_DP, CLAIMED_UNPROVEN
from fdptm.mechanisms.lda import Corpus
from fdptm.mechanisms.set_union import analytic_gaussian_sigma
from fdptm.mechanisms.spectral import (
    MAX_DENSE_VOCABULARY,
    StepBudget,
    gaussian_multiplier,
    laplace_lower_bound,
    laplace_upper_bound,
    noise_scales,
    noisy_whitened_m3,
    release_m2,
    spectral_params,
    tensor_power_method,
    topic_word,
    train_spectral,
    train_spectral_nonprivate,
    whitened_tensor_sensitivity,
)
from fdptm.mechanisms.spectral_moments import (
    DocumentMoments,
    coefficients,
    multilinear,
    sensitivity_m2,
    sensitivity_m3,
    single_placements,
)
from fdptm.privacy.adjacency import Adjacency, group_privacy, invert_group_privacy
from fdptm.privacy.noise import NoiseSource

DOC = Adjacency.DOCUMENT


def _params(epsilon=1.0, delta=1e-6, **kw):
    base = {"n_topics": 3, "adjacency": DOC, "max_docs_per_author": 1}
    return spectral_params(epsilon, delta, **(base | kw))


def _corpus(docs, n_words, authors=None):
    ptr = np.zeros(len(docs) + 1, np.int64)
    ptr[1:] = np.cumsum([len(d) for d in docs])
    words = np.concatenate([np.asarray(d, np.int32) for d in docs]).astype(np.int32)
    author = None if authors is None else np.asarray(authors, np.int32)
    return Corpus(ptr, words, n_words, author)


def _moments(docs, n_words, alpha0):
    c = _corpus(docs, n_words)
    return DocumentMoments.from_tokens(c.doc_ptr, c.words, n_words, alpha0)


# --- the estimators -------------------------------------------------------------------------


def test_population_moments_are_the_lda_decompositions():
    """Lemma 3 with b = -alpha0/(alpha0+2) (Lemma 21; Lemma 3's -1/(alpha0+2) is a typo)."""
    rng = np.random.default_rng(0)
    V, alpha = 6, np.array([0.05, 0.3, 0.8])
    a0 = alpha.sum()
    mu = rng.dirichlet(np.ones(V), size=3).T
    t2 = (np.outer(alpha, alpha) + np.diag(alpha)) / (a0 * (a0 + 1))
    diag3 = np.zeros((3, 3, 3))
    diag3[np.arange(3), np.arange(3), np.arange(3)] = alpha
    t3 = np.einsum("a,b,c->abc", alpha, alpha, alpha)
    t3 += single_placements(np.einsum("ab,c->abc", np.diag(alpha), alpha)) + 2 * diag3
    t3 /= a0 * (a0 + 1) * (a0 + 2)
    m1 = mu @ alpha / a0
    e2, e3 = mu @ t2 @ mu.T, multilinear(t3, mu.T)
    a, b, c = coefficients(a0)
    m2 = e2 - a * np.outer(m1, m1)
    m3 = e3 + b * single_placements(np.einsum("ab,c->abc", e2, m1))
    m3 += c * np.einsum("a,b,c->abc", m1, m1, m1)
    w2 = alpha / (a0 * (a0 + 1))
    w3 = 2 * alpha / (a0 * (a0 + 1) * (a0 + 2))
    assert np.allclose(m2, (mu * w2) @ mu.T, atol=1e-15)
    assert np.allclose(m3, np.einsum("i,ai,bi,ci->abc", w3, mu, mu, mu), atol=1e-15)


def _brute_force(docs, V, a0):
    """Dense M2, M3 straight from the per-document definitions (ordered distinct positions)."""
    N = len(docs)
    a, b, c = coefficients(a0)

    def per_doc(d, order):
        t = np.zeros((V,) * order)
        for pos in itertools.permutations(range(len(d)), order):
            t[tuple(np.asarray(d)[list(pos)])] += 1
        return t / t.sum() if len(d) >= order else t

    m1 = [per_doc(d, 1) for d in docs]
    p2 = [per_doc(d, 2) for d in docs]
    p3 = [per_doc(d, 3) for d in docs]
    pairs = [(n, m) for n in range(N) for m in range(N) if n != m]
    m2 = sum(p2) / N - a / (N * (N - 1)) * sum(np.outer(m1[n], m1[m]) for n, m in pairs)
    b1 = sum(np.einsum("ab,c->abc", p2[n], m1[m]) for n, m in pairs) * b / (N * (N - 1))
    triples = itertools.permutations(range(N), 3)
    bt = sum(np.einsum("a,b,c->abc", m1[n], m1[m], m1[p]) for n, m, p in triples)
    m3 = sum(p3) / N + single_placements(b1) + c * bt / (N * (N - 1) * (N - 2))
    return m2, m3


def test_estimators_match_the_per_document_definitions():
    rng = np.random.default_rng(1)
    V, a0 = 5, 0.7
    docs = [rng.integers(0, V, n) for n in (0, 1, 2, 3, 5, 6, 4, 2, 7)]
    m2, m3 = _brute_force(docs, V, a0)
    mom = _moments(docs, V, a0)
    w = rng.normal(size=(V, 3))
    assert np.allclose(mom.m2_dense(), m2, atol=1e-15)
    assert np.allclose(mom.m2_operator().matmat(w), m2 @ w, atol=1e-15)
    assert np.allclose(mom.m2_project(w), w.T @ m2 @ w, atol=1e-15)
    assert np.allclose(mom.m3_project(w), multilinear(m3, w), atol=1e-14)
    assert np.allclose(mom.m3_project(np.eye(V)), m3, atol=1e-15)


def test_the_corpus_is_not_modified():
    corpus = generate_lda(50, 20, 2, seed=0).corpus
    words, ptr = corpus.words.copy(), corpus.doc_ptr.copy()
    train_spectral(corpus, 2, _params(5.0, n_topics=2), NoiseSource.create(0))
    assert np.array_equal(corpus.words, words) and np.array_equal(corpus.doc_ptr, ptr)


# --- sensitivities against brute-force neighbours -------------------------------------------


def _random_doc(rng, V):
    kind = rng.integers(4)
    if kind == 0:
        return np.full(int(rng.integers(1, 40)), rng.integers(V))  # one word repeated
    if kind == 1:
        return rng.integers(0, V, int(rng.integers(0, 3)))  # too short for M3 (or M2)
    return rng.integers(0, V, int(rng.integers(3, 40)))


@pytest.mark.parametrize("a0", [0.1, 1.0, 10.0])
def test_moment_sensitivities_bound_every_replacement(a0):
    rng = np.random.default_rng(2)
    V = 5
    for _ in range(40):
        docs = [_random_doc(rng, V) for _ in range(int(rng.integers(3, 9)))]
        other = list(docs)
        other[int(rng.integers(len(docs)))] = _random_doc(rng, V)
        A, B = _moments(docs, V, a0), _moments(other, V, a0)
        n = len(docs)
        assert np.linalg.norm(A.m2_dense() - B.m2_dense()) <= sensitivity_m2(n, a0)
        eye = np.eye(V)
        assert np.linalg.norm(A.m3_project(eye) - B.m3_project(eye)) <= sensitivity_m3(n, a0)


def test_the_moment_sensitivities_are_attained_within_a_small_factor():
    """All documents one repeated word, one replaced by another word: >= 1/2 of the bound."""
    V, a0, N = 4, 0.1, 50
    docs = [np.zeros(30, int)] * N
    A, B = _moments(docs, V, a0), _moments([*docs[:-1], np.ones(30, int)], V, a0)
    assert np.linalg.norm(A.m2_dense() - B.m2_dense()) >= 0.5 * sensitivity_m2(N, a0)
    eye = np.eye(V)
    change3 = np.linalg.norm(A.m3_project(eye) - B.m3_project(eye))
    assert change3 >= 0.5 * sensitivity_m3(N, a0)


def test_config2_local_sensitivity_bounds_the_whitened_tensor():
    """||T*(D) - T*(D')|| <= Delta_3 m^-3/2 + 3 n Delta_2 / (2 m^5/2), and the two
    statistics Procedure 1 releases move by at most Delta_2 and Delta_3."""
    rng = np.random.default_rng(3)
    synth = generate_lda(400, 6, 2, seed=3)
    c = synth.corpus
    docs = [c.words[c.doc_ptr[d] : c.doc_ptr[d + 1]] for d in range(c.n_docs)]
    a0, n = 0.2, len(docs)
    base = _moments(docs, 6, a0)
    basis = np.linalg.eigh(base.m2_dense())[1][:, -2:]
    d2, d3 = sensitivity_m2(n, a0), sensitivity_m3(n, a0)

    def whitened(mom):
        k = mom.m2_project(basis)
        vals, vecs = np.linalg.eigh(k)
        m3 = mom.m3_project(basis)
        return vals[0], np.linalg.norm(m3), multilinear(m3, (vecs / np.sqrt(vals)) @ vecs.T)

    lam, norm, tensor = whitened(base)
    margin = lam - d2
    assert margin > 0
    bound = whitened_tensor_sensitivity(margin, norm, d2, d3)
    worst = 0.0
    for _ in range(60):
        other = list(docs)
        other[int(rng.integers(n))] = _random_doc(rng, 6)
        lam2, norm2, tensor2 = whitened(_moments(other, 6, a0))
        assert abs(lam - lam2) <= d2 and abs(norm - norm2) <= d3
        worst = max(worst, np.linalg.norm(tensor - tensor2))
    assert 0 < worst <= bound


def test_the_whitening_term_of_the_config2_bound_is_needed():
    """A neighbour that moves M2 but not M3 (a 2-token document replaces a 20-token one)
    changes T* by more than Delta_3 m^-3/2, the bound left when the terms linear in the
    change of the whitening are dropped (as in the paper's eq. 60); the full bound holds."""
    V, a0, N = 2, 0.001, 1000
    docs = [np.zeros(20, int)] * 900 + [np.ones(20, int)] * 100
    basis = np.eye(V)[:, :1]
    d2, d3 = sensitivity_m2(N, a0), sensitivity_m3(N, a0)

    def whitened(mom):
        k, m3 = mom.m2_project(basis), mom.m3_project(basis)
        return float(k[0, 0]), float(np.linalg.norm(m3)), m3 * k[0, 0] ** -1.5

    lam, norm, tensor = whitened(_moments(docs, V, a0))
    _, _, other = whitened(_moments([*docs[:-1], np.array([0, 0])], V, a0))
    change, margin = np.linalg.norm(tensor - other), lam - d2
    assert d3 * margin**-1.5 < change <= whitened_tensor_sensitivity(margin, norm, d2, d3)


# --- noise ----------------------------------------------------------------------------------


def _chi_square_two_sided(z: np.ndarray) -> float:
    """p-value of sum z^2 against chi^2 with len(z) degrees of freedom, two-sided."""
    s, df = float(np.sum(z**2)), z.size
    return 2 * min(stats.chi2.cdf(s, df), stats.chi2.sf(s, df))


def test_m2_release_adds_symmetric_noise_of_the_stated_scale():
    synth = generate_lda(300, 120, 3, seed=4)
    c = synth.corpus
    p = _params(0.5)
    mom = DocumentMoments.from_tokens(c.doc_ptr, c.words, c.n_words, p.alpha0)
    step = p.step("m2")
    tau = math.sqrt(2 * math.log(1.25 / step.delta)) / step.epsilon  # eps_m2 < 1: Prop. 18
    sigma = noise_scales(p, c.n_docs)["m2"]
    assert sigma == pytest.approx(sensitivity_m2(c.n_docs, p.alpha0) * tau, rel=1e-12)
    residual = release_m2(mom, p, NoiseSource.create(5)) - mom.m2_dense()
    assert np.allclose(residual, residual.T, atol=1e-15)
    upper = np.triu_indices(120, 1)
    z = np.concatenate([np.diag(residual) / sigma, residual[upper] / (sigma / math.sqrt(2))])
    assert _chi_square_two_sided(z) > 1e-3
    # 7260 entries: a scale 5% off moves sum z^2 by ~6 standard deviations
    assert _chi_square_two_sided(z / 1.05) < 1e-3


def test_projected_m3_noise_has_the_law_of_whitened_iid_noise():
    """E(W, W, W) for i.i.d. E on V^3 and W = U diag(s): brute force on a small V agrees."""
    rng = np.random.default_rng(6)
    V, k, sigma = 7, 3, 0.3
    u = np.linalg.qr(rng.normal(size=(V, k)))[0]
    s = np.array([1.0, 2.0, 0.5])
    direct = np.stack([multilinear(rng.normal(0, sigma, (V, V, V)), u * s) for _ in range(400)])
    noise = NoiseSource.create(7)
    zeros = np.zeros((k, k, k))
    drawn = np.stack([noisy_whitened_m3(zeros, sigma, s, noise) for _ in range(400)])
    scale = sigma * np.einsum("a,b,c->abc", s, s, s)
    for sample in (direct, drawn):
        assert _chi_square_two_sided((sample / scale).ravel()) > 1e-3
    assert stats.ks_2samp((direct / scale).ravel(), (drawn / scale).ravel()).pvalue > 1e-3


def test_laplace_bounds_fail_with_probability_delta():
    noise = NoiseSource.create(8)
    step = StepBudget("sigma_k", "laplace", 0.5, 0.05, 2.0, "Laplace (Procedure 1)")
    trials = 20000
    lows = np.array([laplace_lower_bound(1.0, 0.1, step, noise) for _ in range(trials)])
    highs = np.array([laplace_upper_bound(1.0, 0.1, step, noise) for _ in range(trials)])
    se = math.sqrt(trials * 0.05 * 0.95)
    for failures in ((lows > 1.0).sum(), (highs < 1.0).sum()):
        assert abs(failures - trials * 0.05) < 4 * se


def test_gaussian_calibration():
    tau, name = gaussian_multiplier(0.5, 1e-5, "paper")
    assert tau == pytest.approx(math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5, rel=1e-12)
    assert "classical" in name
    tau, name = gaussian_multiplier(3.0, 1e-5, "paper")
    assert tau == analytic_gaussian_sigma(3.0, 1e-5) and "analytic" in name
    for eps in (0.1, 0.5, 0.9):
        analytic, _ = gaussian_multiplier(eps, 1e-6, "analytic")
        classical, _ = gaussian_multiplier(eps, 1e-6, "paper")
        assert analytic < classical
        a, b = 1 / (2 * analytic), eps * analytic  # Balle & Wang Theorem 8 at sensitivity 1
        assert stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b) <= 1e-6


# --- parameters and guarantee ---------------------------------------------------------------


@pytest.mark.parametrize("config", [1, 2])
def test_document_guarantee_is_the_requested_budget(config):
    p = _params(2.0, 1e-6, config=config)
    g = p.guarantee()
    assert g.notion == APPROXIMATE_DP and g.adjacency == Adjacency.DOCUMENT_REPLACE
    assert g.epsilon <= 2.0 and g.epsilon == pytest.approx(2.0, rel=1e-9)
    assert g.delta <= 1e-6 and g.delta == pytest.approx(1e-6, rel=1e-9)
    assert p.group_size == 1
    if config == 1:
        assert [e["noise_multiplier"] for e in g.event["events"]] == [
            p.step("m2").multiplier,
            p.step("m3").multiplier,
        ]
    else:
        assert {s.mechanism for s in p.steps} == {"gaussian", "laplace"}
    json.dumps(p.to_dict())
    json.dumps(g.to_dict())


def test_author_guarantee_is_group_privacy_over_m_documents():
    eps, delta, m = 3.0, 1e-6, 4
    p = _params(eps, delta, adjacency=Adjacency.AUTHOR, max_docs_per_author=m)
    doc_eps, doc_delta = invert_group_privacy(eps, delta, m)
    assert math.fsum(s.epsilon for s in p.steps) == pytest.approx(doc_eps, rel=1e-9)
    assert math.fsum(s.delta for s in p.steps) == pytest.approx(doc_delta, rel=1e-9)
    assert math.fsum(s.epsilon for s in p.steps) <= doc_eps
    g = p.guarantee()
    assert g.adjacency == Adjacency.AUTHOR_REPLACE and g.notion == APPROXIMATE_DP
    assert (g.epsilon, g.delta) == pytest.approx(group_privacy(doc_eps, doc_delta, m), rel=1e-9)
    assert g.epsilon <= eps and g.delta <= delta
    assert "group privacy" in g.accountant and "m = 4" in g.accountant
    assert g.event == {}
    document_level = _params(eps, delta)
    assert p.step("m3").multiplier > document_level.step("m3").multiplier


@pytest.mark.parametrize("config", [3, 4])
def test_configs_3_and_4_are_only_claimed(config):
    g = _params(config=config, claimed_unproven=True).guarantee()
    assert g.notion == CLAIMED_UNPROVEN


@pytest.mark.parametrize(
    "kw",
    [
        {"config": 5},
        {"config": 0},
        {"config": True},
        {"config": 3},
        {"config": 4},
        {"config": 1, "claimed_unproven": True},
        {"epsilon": 0.0},
        {"epsilon": -1.0},
        {"epsilon": float("nan")},
        {"epsilon": float("inf")},
        {"delta": 0.0},
        {"delta": 1.0},
        {"adjacency": Adjacency.WORD},
        {"adjacency": Adjacency.DOCUMENT_REPLACE},
        {"adjacency": Adjacency.AUTHOR_REPLACE},
        {"n_topics": 0},
        {"max_docs_per_author": 0},
        {"alpha0": 0.0},
        {"alpha0": float("nan")},
        {"procedure_fraction": 0.0},
        {"procedure_fraction": 1.0},
        {"m2_fraction": 1.5},
        {"power_iterations": 0},
        {"restarts": 0},
        {"gaussian_calibration": "smooth"},
    ],
)
def test_bad_parameters_are_refused(kw):
    with pytest.raises(BadInputError):
        _params(**kw)


def test_unusable_corpora_are_refused():
    p = _params(1.0, n_topics=2)
    noise = NoiseSource.create(0)
    cases = [
        _corpus([[], [], []], 5),
        _corpus([[0, 1, 2], [1, 2, 3]], 5),
        _corpus([[0, 1, 2]] * 5, 2),
        _corpus([[0, 1, 2]] * 5, MAX_DENSE_VOCABULARY + 1),
    ]
    for corpus in cases:
        with pytest.raises(BadInputError):
            train_spectral(corpus, 2, p, noise)
    with pytest.raises(BadInputError):
        train_spectral(_corpus([[0, 1, 2]] * 5, 5), 3, p, noise)
    author = _params(1.0, n_topics=2, adjacency=Adjacency.AUTHOR, max_docs_per_author=2)
    with pytest.raises(BadInputError):
        train_spectral(_corpus([[0, 1, 2]] * 5, 5, [0, 0, 0, 1, 2]), 2, author, noise)
    phi = train_spectral(_corpus([[0, 1, 2]] * 5, 5, [0, 0, 1, 1, 2]), 2, author, noise)
    assert phi.shape == (2, 5)


# --- algorithmic pieces ---------------------------------------------------------------------


def test_tensor_power_method_recovers_an_orthogonal_decomposition():
    rng = np.random.default_rng(9)
    k = 5
    v = np.linalg.qr(rng.normal(size=(k, k)))[0]
    lam = np.array([3.0, 2.5, 2.0, 1.5, 1.0])
    t = np.einsum("i,ai,bi,ci->abc", lam, v, v, v)
    found, vecs = tensor_power_method(t, k, restarts=20, iterations=50, generator=rng)
    order = np.argsort(found)[::-1]
    assert np.allclose(found[order], lam, atol=1e-8)
    assert np.allclose(np.abs(vecs[:, order].T @ v), np.eye(k), atol=1e-6)


def test_topic_word_post_processing():
    topics = np.array([[0.5, -0.2, 0.0, np.nan], [0.5, -0.8, 0.0, 1.0], [-0.1, 0.0, 0.0, 1.0]])
    phi = topic_word(topics, 4, 3)
    assert np.allclose(phi[0], [0.5, 0.5, 0.0])  # -0.1 clipped
    assert np.allclose(phi[1], [0.2, 0.8, 0.0])  # negative mass: flipped
    assert np.allclose(phi[2], 1 / 3)  # no mass: uniform
    assert np.allclose(phi[3], [0.0, 0.5, 0.5])  # NaN dropped
    assert np.allclose(topic_word(None, 2, 4), 0.25)


# --- recovery on synthetic LDA data (the paper's Figure 2 setting, scaled down) -------------

V, K, A0 = 40, 4, 0.4  # generate_lda's alpha = 0.1 per topic: alpha0 = 0.4, public


@pytest.fixture(scope="module")
def lda_small():
    return generate_lda(2_000, V, K, seed=7)


@pytest.fixture(scope="module")
def lda_large():
    return generate_lda(20_000, V, K, seed=7)


def _dp_error(synth, epsilon, seeds=(0, 1, 2), **kw):
    p = _params(epsilon, n_topics=K, alpha0=A0, **kw)
    runs = [
        matched_distance(train_spectral(synth.corpus, K, p, NoiseSource.create(s)), synth.phi)
        for s in seeds
    ]
    return float(np.mean([r.l1 for r in runs])), float(np.mean([r.cosine for r in runs]))


def _noise_to_signal(synth, epsilon):
    """(spectral norm of the M2 noise, max std of the whitened M3 noise) / sigma_k(M2)."""
    c = synth.corpus
    mom = DocumentMoments.from_tokens(c.doc_ptr, c.words, V, A0)
    sigma_k = np.linalg.eigvalsh(mom.m2_dense())[-K]
    scales = noise_scales(_params(epsilon, n_topics=K, alpha0=A0), c.n_docs)
    return scales["m2"] * math.sqrt(2 * V) / sigma_k, scales["m3"] * sigma_k**-1.5


def test_error_falls_as_epsilon_grows(lda_large):
    """Noise std is proportional to 1/epsilon; a tenfold epsilon must at least halve the error
    until it reaches the non-private estimator's."""
    errors = [_dp_error(lda_large, eps)[0] for eps in (1.0, 10.0, 100.0)]
    assert errors[1] < 0.5 * errors[0] and errors[2] < 0.5 * errors[1]


def test_error_falls_as_the_corpus_grows(lda_small, lda_large):
    """Sensitivities are proportional to 1/N: ten times the documents, at least half the error."""
    assert _dp_error(lda_large, 10.0)[0] < 0.5 * _dp_error(lda_small, 10.0)[0]


@pytest.mark.parametrize("config, epsilon", [(1, 1e3), (2, 1e4)])
def test_recovery_at_large_epsilon(lda_large, config, epsilon):
    """At epsilon = 1000 config 1's noises are below 0.2% of the signal (M2 noise against
    sigma_k, whitened M3 noise against the tensor's eigenvalues, which are >= 1). Config 2's
    local bound is up to ~30x larger (module docstring), so it gets epsilon = 10^4 for the
    same margin. The DP estimate is then within the non-private estimator's own error: L1 at
    most twice it, cosine within 0.01 of it."""
    m2_ratio, m3_ratio = _noise_to_signal(lda_large, 1e3)
    assert m2_ratio < 0.002 and m3_ratio < 0.002
    exact = matched_distance(
        train_spectral_nonprivate(lda_large.corpus, K, NoiseSource.create(0), alpha0=A0),
        lda_large.phi,
    )
    assert exact.cosine > 0.99
    l1, cosine = _dp_error(lda_large, epsilon, config=config)
    assert l1 <= 2 * exact.l1 and cosine >= exact.cosine - 0.01


@pytest.mark.parametrize("config", [1, 2])
def test_no_recovery_at_tiny_epsilon(lda_large, config):
    """At epsilon = 0.01 the M2 noise is ten times sigma_k: the whitening is noise (config
    1), and config 2's private margin is not positive, so it releases flat topics."""
    assert _noise_to_signal(lda_large, 0.01)[0] > 10
    l1, cosine = _dp_error(lda_large, 0.01, config=config)
    assert l1 > 1.0 and cosine < 0.6


def _asymmetric_lda(n_docs, n_words, alpha, seed):
    """LDA with a non-symmetric prior (distinct tensor eigenvalues, so gamma_s > 0)."""
    rng = np.random.default_rng(seed)
    phi = rng.dirichlet(np.full(n_words, 0.05), size=len(alpha))
    theta = rng.dirichlet(alpha, size=n_docs)
    counts = [rng.multinomial(50, p) for p in theta @ phi]
    return _corpus([np.repeat(np.arange(n_words), c) for c in counts], n_words), phi


@pytest.mark.parametrize("config", [3, 4])
def test_unproven_configs_run_as_specified(config):
    alpha = np.array([0.05, 0.2, 0.6])
    corpus, phi = _asymmetric_lda(5_000, 20, alpha, seed=10)
    for eps, recovers in ((1e6, True), (1.0, False)):
        p = _params(eps, n_topics=3, alpha0=alpha.sum(), config=config, claimed_unproven=True)
        out = train_spectral(corpus, 3, p, NoiseSource.create(0))
        assert np.allclose(out.sum(axis=1), 1) and (out >= 0).all()
        if recovers:
            assert matched_distance(out, phi).cosine > 0.95
        else:  # Procedure 1's lower bounds are not positive: uniform topics
            assert np.allclose(out, 1 / 20)


@pytest.mark.parametrize("config", [1, 2])
def test_outputs_are_topic_word_matrices_at_any_epsilon(lda_small, config):
    for eps in (0.01, 1.0, 100.0):
        phi = train_spectral(
            lda_small.corpus, K, _params(eps, n_topics=K, config=config), NoiseSource.create(3)
        )
        assert phi.shape == (K, V) and np.isfinite(phi).all() and (phi >= 0).all()
        assert np.allclose(phi.sum(axis=1), 1)
