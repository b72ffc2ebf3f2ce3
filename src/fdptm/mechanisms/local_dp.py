"""LP-LDA and OLP-LDA on the server: estimates, reconstruction and training from LDP reports.

hdp-lda-lp-lda-olp-lda.txt, sections V-B to VI-D. Everything here is post-processing of the
reports a device randomised (``fdptm.local``), so it spends nothing: the reports' own local
guarantee (Theorem 4: V log((1 - f/2)/(f/2))-LDP per document, log((1 - f/2)/(f/2)) per word)
is the guarantee of every release made from them. Adjacency ``local``: one device's document
replaced by any other, the report of every other device unchanged. The number of reports M
enters eq. 8 and is visible to the server and in releases: local DP hides what a document
says, not that a device sent a report.

* LP-LDA (section V-B): n_t, the reports with bit t set (step 1); the moment estimate
  N_hat_t = (2 n_t - f M) / (2 (1 - f)) (step 2, eq. 8), unbiased with variance eq. 9
  (Theorem 5); the reconstruction (steps 3-5, ``fdptm.kernels.reconstruct``) flips
  |N_hat_t - n_t| uniformly chosen bits of column t so that it holds N_hat_t ones, rounded
  to an integer in [0, M] (the paper leaves the rounding open; clipping to [0, M] is what a
  count allows); then collapsed Gibbs sampling on the reconstructed documents, each the set
  of its words (the kernels of ``fdptm.kernels.gibbs``).
* OLP-LDA (section VI, Algorithm 2): a model trained on a public prior dataset D0, then per
  mini-batch l of reports: the prior mean mu^l = (mu^(l-1) + eta^(l-1)) / 2 x |D_l| / |D_(l-1)|
  (eq. 21, with mu^0 = eta^0 the word counts of D0), the Bayesian estimate
  eta^l = omega mu^l + (1 - omega) N_hat^l (eq. 19; Theorem 7: variance (1 - omega)^2 of
  eq. 9's), the reconstruction to eta^l, and CGS with the topic-word prior
  beta^l = beta^(l-1) + lambda N^(l-1) (eq. 10, Algorithm 2 line 10: starting from D0's counts
  N^0; eq. 11 and the O-LDA generative model start the sum at N^1, i.e. D_1 with plain beta,
  which would ignore D0's topics) in the conditional of eq. 12; the release is eq. 13,
  (n^l_kt + beta^l_kt) / sum_t (n^l_kt + beta^l_kt). omega and lambda are Algorithm 2's inputs.
  Theorem 6 ties omega to the prior variance sigma^2 of N_t around mu_t; by default (omega
  None) sigma^2 is estimated per batch from the reports by the method of moments
  (``empirical_prior_variance``: an empirical-Bayes choice beyond the paper, and free, since
  it is post-processing of the reports and public data), which gives the omega that
  minimises the summed squared error when the prior's errors are spread like that
  (``benchmarks/local.md``). Algorithm 2's line 13 (mu^l = eta^(l-1)) disagrees with eq. 21;
  eq. 21 is implemented.

Eq. 19 is exact for the Gaussian approximation of Theorem 6 (Lemma 2's normal approximation
of the two binomials), not for eq. 14's likelihood; it is a utility device only, and the
guarantee does not depend on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fdptm.errors import BadInputError
from fdptm.kernels import gibbs
from fdptm.kernels.reconstruct import BLOCK, block_counts, reconstruct
from fdptm.local.flip import Flip
from fdptm.mechanisms.lda import Corpus, init_counts


def moment_estimate(counts: np.ndarray, n_reports: int, flip: Flip) -> np.ndarray:
    """Eq. 8: N_hat_t = (2 n_t - f M) / (2 (1 - f)), unbiased for the true count N_t."""
    f = flip.f
    return (2.0 * counts - f * n_reports) / (2.0 * (1.0 - f))


def moment_variance(true_counts: np.ndarray, n_reports: int, flip: Flip) -> np.ndarray:
    """Eq. 9 as the paper prints it: (2 - f) f M / (4 (1 - f)^2) + (M - N_t) N_t / M.

    The exact variance of eq. 8 given N_t is Var(n_t) / (1 - f)^2 with n_t the sum of two
    independent binomials, B(N_t, 1 - f/2) and B(M - N_t, f/2): that is the first term
    alone. Eq. 9's proof adds a covariance term for the two binomials, which are independent;
    one reading of its second term is the sampling variance of N_t when the documents are
    themselves drawn at random (the paper does not say). ``exact_variance`` is the
    conditional one.
    """
    f = flip.f
    n = np.asarray(true_counts, dtype=np.float64)
    return (2 - f) * f * n_reports / (4 * (1 - f) ** 2) + (n_reports - n) * n / n_reports


def exact_variance(n_reports: int, flip: Flip) -> float:
    """Var(N_hat_t | N_t) = M (f/2)(1 - f/2) / (1 - f)^2: the same for every word."""
    q = flip.half
    return n_reports * q * (1 - q) / (1 - flip.f) ** 2


def bayes_weight_from_variance(n_reports: int, flip: Flip, sigma2: float) -> float:
    """Theorem 6's omega = M f (2 - f) / (M f (2 - f) + 4 sigma^2 (1 - f)^2)."""
    f = flip.f
    a = n_reports * f * (2 - f)
    return a / (a + 4 * sigma2 * (1 - f) ** 2)


def empirical_prior_variance(
    moment: np.ndarray, prior_mean: np.ndarray, n_reports: int, flip: Flip
) -> float:
    """Theorem 6's sigma^2 estimated from the batch: E[(N_hat_t - mu_t)^2] = (N_t - mu_t)^2 +
    Var(N_hat_t | N_t), so the mean over words of (N_hat_t - mu_t)^2 less ``exact_variance``
    estimates the mean squared distance of the prior from the truth (floored at 1, one
    count squared, so that omega stays below 1)."""
    excess = float(np.mean((moment - prior_mean) ** 2)) - exact_variance(n_reports, flip)
    return max(excess, 1.0)


def prior_variance(n_reports: int, flip: Flip, omega: float) -> float:
    """The sigma^2 for which Theorem 6 gives ``omega`` (inverse of the above)."""
    f = flip.f
    return n_reports * f * (2 - f) * (1 - omega) / (4 * omega * (1 - f) ** 2)


def bayes_estimate(
    counts: np.ndarray, n_reports: int, flip: Flip, prior_mean: np.ndarray, omega: float
) -> np.ndarray:
    """Eq. 19: omega mu_t + (1 - omega) (2 n_t - f M) / (2 (1 - f))."""
    if not 0.0 <= omega < 1.0:
        raise BadInputError(f"omega must be in [0, 1), got {omega}")
    return omega * prior_mean + (1.0 - omega) * moment_estimate(counts, n_reports, flip)


def targets(estimates: np.ndarray, n_reports: int) -> np.ndarray:
    """Estimated counts as the column totals of a reconstruction: rounded, within [0, M]."""
    return np.clip(np.rint(estimates), 0, n_reports).astype(np.int64)


def reconstructed(
    reports: np.ndarray, estimates: np.ndarray, seed: int, per_block: np.ndarray | None = None
) -> Corpus:
    """Steps 3-5: the reports with column t holding ``targets(estimates)[t]`` ones, as a
    corpus of documents (each the set of its words); ``per_block``: the reports'
    ``block_counts`` when already computed."""
    target = targets(estimates, len(reports))
    return Corpus(*reconstruct(reports, target, seed, per_block), len(estimates))


@dataclass(frozen=True)
class LocalParams:
    """What LP-LDA and OLP-LDA train with (Algorithm 2's inputs besides f and D0)."""

    topics: int
    iterations: int = 200
    alpha: float = 0.1
    beta: float = 0.01
    correlation: float = 0.5
    omega: float | None = None

    def __post_init__(self) -> None:
        if self.topics < 1 or self.iterations < 1:
            raise BadInputError("topics and iterations must be at least 1")
        if self.alpha <= 0 or self.beta <= 0:
            raise BadInputError("alpha and beta must be positive")
        if not 0.0 <= self.correlation <= 1.0:
            raise BadInputError(f"correlation (lambda) must be in [0, 1], got {self.correlation}")
        if self.omega is not None and not 0.0 <= self.omega < 1.0:
            raise BadInputError(f"omega must be in [0, 1), got {self.omega}")

    def to_dict(self) -> dict:
        return asdict(self)


def _sweeps(
    corpus: Corpus,
    params: LocalParams,
    gen: np.random.Generator,
    beta_wk: np.ndarray | None,
    progress: Callable[[int], None] | None,
) -> np.ndarray:
    """CGS on ``corpus`` (scalar beta, or the prior matrix ``beta_wk``); returns n_wk."""
    if corpus.n_tokens == 0:
        raise BadInputError(
            "the reconstructed reports hold no words: too few reports for this f, or a "
            "vocabulary that matches nothing; collect more reports"
        )
    z, n_dk, n_wk, n_k = init_counts(corpus, params.topics, gen)
    uniforms = np.empty(corpus.n_tokens)
    beta_k = None if beta_wk is None else beta_wk.sum(axis=0)
    for _ in range(params.iterations):
        gen.random(out=uniforms)
        if beta_wk is None:
            gibbs.cgs_sweep(
                corpus.doc_ptr, corpus.words, z, n_dk, n_wk, n_k, params.alpha, params.beta,
                uniforms,
            )  # fmt: skip
        else:
            gibbs.cgs_sweep_prior(
                corpus.doc_ptr, corpus.words, z, n_dk, n_wk, n_k, params.alpha, beta_wk, beta_k,
                uniforms,
            )  # fmt: skip
        if progress:
            progress(1)
    return n_wk


def lp_lda(
    reports: np.ndarray,
    n_words: int,
    flip: Flip,
    params: LocalParams,
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """LP-LDA (section V-B): the topic-word matrix (topics x words) from packed reports."""
    per_block = block_counts(reports, n_words, BLOCK)
    counts = per_block.sum(axis=0)
    corpus = reconstructed(reports, moment_estimate(counts, len(reports), flip), seed, per_block)
    n_wk = _sweeps(corpus, params, np.random.default_rng(seed), None, progress)
    return ((n_wk + params.beta) / (n_wk.sum(axis=0) + n_words * params.beta)).T


@dataclass
class OnlineState:
    """What OLP-LDA carries from one mini-batch to the next (internal, never published).

    ``beta`` is the prior of the next batch (words x topics, eq. 10), ``mu`` and ``eta`` the
    last batch's prior mean and Bayesian estimate (eq. 21), ``n_reports`` that batch's size
    (|D_0| for the prior dataset), ``step`` the batches processed (0 after D0).
    """

    beta: np.ndarray
    mu: np.ndarray
    eta: np.ndarray
    n_reports: int
    step: int

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            np.savez(fh, beta=self.beta, mu=self.mu, eta=self.eta,
                     n_reports=self.n_reports, step=self.step)  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> OnlineState:
        with np.load(path) as data:
            return cls(data["beta"], data["mu"], data["eta"], int(data["n_reports"]),
                       int(data["step"]))  # fmt: skip


def online_start(prior: Corpus, params: LocalParams, seed: int) -> tuple[OnlineState, np.ndarray]:
    """Algorithm 2, server lines 1-3: LDA on the public prior dataset D0 (documents as sets of
    their vocabulary words, as the reports encode them); mu^0 = eta^0 = sum_k N^0_kt; the
    first batch's prior beta + lambda N^0. Returns the state and Phi^0 (topics x words)."""
    n_wk = _sweeps(prior, params, np.random.default_rng(seed), None, None)
    phi0 = ((n_wk + params.beta) / (n_wk.sum(axis=0) + prior.n_words * params.beta)).T
    totals = n_wk.sum(axis=1).astype(np.float64)
    beta = params.beta + params.correlation * n_wk.astype(np.float64)
    return OnlineState(beta, totals, totals.copy(), prior.n_docs, 0), phi0


@dataclass(frozen=True)
class BatchEstimate:
    """One mini-batch's estimates: eq. 21's prior mean, eq. 8's and eq. 19's estimates."""

    prior_mean: np.ndarray
    moment: np.ndarray
    bayes: np.ndarray
    omega: float
    sigma2: float


def online_estimate(
    state: OnlineState, counts: np.ndarray, n_reports: int, flip: Flip, omega: float | None
) -> BatchEstimate:
    """Eq. 21, then eq. 19, for a batch of ``n_reports`` reports with column counts ``counts``;
    ``omega`` None: Theorem 6's omega for the batch's ``empirical_prior_variance``."""
    prior_mean = (state.mu + state.eta) / 2.0 * (n_reports / state.n_reports)
    moment = moment_estimate(counts, n_reports, flip)
    if omega is None:
        sigma2 = empirical_prior_variance(moment, prior_mean, n_reports, flip)
        omega = bayes_weight_from_variance(n_reports, flip, sigma2)
    else:
        sigma2 = prior_variance(n_reports, flip, omega) if omega > 0 else float("inf")
    bayes = omega * prior_mean + (1.0 - omega) * moment
    return BatchEstimate(prior_mean, moment, bayes, omega, sigma2)


def online_step(
    state: OnlineState,
    reports: np.ndarray,
    flip: Flip,
    params: LocalParams,
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> tuple[OnlineState, np.ndarray, BatchEstimate]:
    """Algorithm 2, lines 6-14, for one mini-batch: returns the next state, Phi^l (eq. 13)
    and the batch's estimates."""
    n_words = state.beta.shape[0]
    if len(reports) == 0:
        raise BadInputError("a mini-batch needs at least one report")
    per_block = block_counts(reports, n_words, BLOCK)
    est = online_estimate(state, per_block.sum(axis=0), len(reports), flip, params.omega)
    corpus = reconstructed(reports, est.bayes, seed, per_block)
    n_wk = _sweeps(corpus, params, np.random.default_rng(seed), state.beta, progress)
    weights = n_wk + state.beta
    phi = (weights / weights.sum(axis=0)).T
    following = OnlineState(
        state.beta + params.correlation * n_wk, est.prior_mean, est.bayes, len(reports),
        state.step + 1,
    )  # fmt: skip
    return following, phi, est
