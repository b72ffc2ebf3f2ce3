"""M1 with a public prior: the Bayesian mechanism of ``papers/bayesian-dp-ngrams.txt`` (section 3).

What it releases. A differentially private word distribution theta over a *public*
vocabulary (a public dataset's words, a word list, or a shipped word-frequency list), which
combines public counts alpha (the prior) with the private counts c (the likelihood) in the
softmax space (eqs. 1, 2 and 4):

    h = rho * (r + eta) + (1 - rho) * mu_p,    theta = softmax(h),
    mu_p = log(alpha + 1) (centred),  r = w * log(c + 1),  w_i = min(1, S N_i / C) (eq. 5),
    eta ~ N(0, sigma^2 I),

where N_i is the number of privacy units that use word i and each unit's count of a word is
clamped to C (Algorithm 1, line 2). That is the paper's posterior sample N(mu_ps, sigma_ps I)
with sigma_ps = rho * sigma (Theorem 1). The release's vocabulary is then the most probable
words of theta (post-processing), and theta is stored with the run as a word prior for M2
(which does not use it yet).

Adjacency: add or remove one privacy unit (a document, or an author with all their
documents) together with all its words: ``document`` or ``author``, whichever the dataset's
unit is. Guarantee: (epsilon, delta)-DP by the analytic Gaussian mechanism (Balle & Wang
2018, Theorem 8) on the global l2 sensitivity below; the paper's classical bound
sqrt(2 ln(1.25/delta)) / epsilon needs epsilon < 1, the analytic one holds for every epsilon
and is smaller.

Where the paper's proof does not hold, and what is done instead
---------------------------------------------------------------

1. *The sensitivity is local, not global.* Theorem 1 and Corollary 1 calibrate sigma to
   max over the users of the dataset at hand of ||f(D) - f(D_-n)||_2: computed "by brute
   force" (Algorithm 1; section 4.3 says the experiments used it) or by Claim 1, whose bound
   L_i = (1 - 1/V)/N_i + sum_j 1/(V N_j) uses the dataset's own N. Both are functions of
   the private data, so the noise scale itself leaks (Nissim, Raskhodnikova & Smith 2007):
   that is not DP. Kept here only as ``brute_force_sensitivity``, labelled
   ``claimed-unproven``, for the paper's comparison.
2. *Centring before weighting makes even a global bound grow with the corpus.* The paper
   weights the centred vector, w * (log(c + 1) - m) with m the mean log count; removing a
   user who is one of the N <= C/S users of a word changes w_i by S/C, which multiplies
   x_hat_i, and |x_hat_i| can be as large as m, which grows with the data without bound.
   Here the weights apply to log(c + 1) itself. Centring is a shift by a constant vector,
   which softmax ignores, so nothing is lost by leaving it out.
3. *The global bound* (this module's ``per_word_bound``, from eq. 5's clipping, Corollary 1's
   decomposition and Lemma 1's idea of bounding a log difference by the other users' minimum
   counts). Remove a unit that holds d in [1, C] of word i, of which there are N >= 1 users
   and c in [N, C N] counts; the other N - 1 users hold at least one each, so
   c - d >= N - 1. Then
       w(N) log(c + 1) - w(N - 1) log(c - d + 1)
         = (w(N) - w(N - 1)) log(c + 1) + w(N - 1) log((c + 1) / (c - d + 1))
        <= (w(N) - w(N - 1)) log(C N + 1) + w(N - 1) log(1 + C / N) =: b(N),
   both terms non-negative. Words the unit does not hold do not change (no centring), so
   ||Delta r||_2 <= sqrt(W) max_N b(N) with W the unit's number of distinct words, which
   contribution bounding caps (a uniformly random subset of at most W words per unit, drawn
   independently per unit, so that neighbouring datasets' subsets of the shared units can
   be paired identically and differ only in the added unit). For N > C/S + 1,
   b(N) = log(1 + C/N) decreases, so the maximum is over 1 <= N <= ceil(C/S) + 1,
   computed exactly. Adding a unit is removal from the larger
   dataset, so the bound holds for add/remove adjacency.
4. *Hyper-parameter search (Algorithm 2, Theorem 2, Claim 2).* Claim 2 bounds the score's
   sensitivity with ||c||_2 and C_1, the largest count in the validation set (both private),
   and its gradient drops the log-sum-exp term (d q / d r_i = rho (n theta_i - c_i), not
   rho c_i (1 - theta_i)). The sound version here selects rho *after* the Gaussian release:
   theta(rho) is post-processing of r + eta for every rho, so only the validation units are
   read by the selection; each validation unit's score is its mean clipped log loss
   min(L, -log theta_i) over its words, in [0, L], so the summed score has sensitivity L
   and report-noisy-min with Laplace(2 L / epsilon) noise is epsilon-DP (Theorem 2 with a
   global sensitivity), with respect to validation units disjoint from the units the
   Gaussian step reads. ``select_rho`` is used by ``benchmarks/bayesian_kl.py`` (a seeded
   random split, both steps charged by basic composition); the pipeline does not call it
   yet. The pipeline uses ``empirical_bayes_rho``: rho from the released vector alone (a
   moment estimate of the prior's spread against the known noise variance), free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fdptm.errors import BadInputError
from fdptm.mechanisms.constraints import POSITIVE, Integer, param, validate_params
from fdptm.mechanisms.set_union import analytic_gaussian_sigma
from fdptm.privacy.noise import NoiseSource

#: Largest ceil(C/S) + 1 searched for max_N b(N) (beyond it the bound only decreases).
_MAX_SEARCH = 10_000_000


@dataclass(frozen=True)
class BayesianPriorParams:
    """Calibration of one Bayesian public-prior release (public functions of the request).

    ``sigma`` is the standard deviation of eta, the noise on r (the paper's sigma_ps is
    rho * sigma); ``sensitivity`` is the global l2 sensitivity of r.
    """

    epsilon: float
    delta: float
    scale: float  # S of eq. 5
    clip: int  # C: the most a unit can add to one word's count
    max_words: int  # W: the most distinct words a unit can hold
    per_word: float
    sensitivity: float
    sigma: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def weights(users_per_word: np.ndarray, scale: float, clip: int) -> np.ndarray:
    """Eq. 5: w_i = min(1, S N_i / C)."""
    return np.minimum(1.0, scale * np.asarray(users_per_word, dtype=float) / clip)


def per_word_bound(scale: float, clip: int) -> float:
    """max over N >= 1 of b(N), the most one unit moves one coordinate of r (docstring, 3)."""
    if not (scale > 0 and math.isfinite(scale)) or clip < 1:
        raise BadInputError(f"S must be > 0 and C >= 1, got S={scale!r}, C={clip!r}")
    top = math.ceil(clip / scale) + 1
    if top > _MAX_SEARCH:
        raise BadInputError(f"S={scale!r} is too small for C={clip!r}: S must be >= C * 1e-7")
    n = np.arange(1, top + 1, dtype=float)
    w_now = weights(n, scale, clip)
    w_before = weights(n - 1, scale, clip)
    bound = (w_now - w_before) * np.log1p(clip * n) + w_before * np.log1p(clip / n)
    return float(bound.max())


PARAMETER_CONSTRAINTS = {
    "scale": param(POSITIVE, what="S of eq. 5"),
    "clip": param(Integer(1), what="C, the most a unit adds to one word's count"),
    "max_words": param(Integer(1), what="W, the distinct words kept per unit"),
}
"""What ``calibrate`` accepts (``fdptm.mechanisms.constraints``)."""


@validate_params(PARAMETER_CONSTRAINTS)
def calibrate(
    epsilon: float, delta: float, *, scale: float, clip: int, max_words: int
) -> BayesianPriorParams:
    """Noise for (epsilon, delta)-DP at add/remove-one-unit adjacency (analytic Gaussian)."""
    per_word = per_word_bound(scale, clip)
    sensitivity = math.sqrt(max_words) * per_word
    sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)
    return BayesianPriorParams(epsilon, delta, scale, clip, max_words, per_word, sensitivity, sigma)


@dataclass(frozen=True)
class UnitCounts:
    """Sparse per-unit word counts over a vocabulary of ``n_words``: one entry per (unit, word)."""

    unit: np.ndarray  # int64, unit index of each entry
    word: np.ndarray  # int64, word index of each entry
    count: np.ndarray  # int64 >= 1
    n_words: int

    def bounded(self, clip: int, max_words: int, generator: np.random.Generator) -> UnitCounts:
        """Counts clamped to C and each unit cut to a uniformly random W of its words.

        Each unit's subset is an independent uniform draw (i.i.d. keys, ranked within the
        unit), so the sensitivity analysis holds. Refuses entries the bound does not cover:
        counts below 1 or a (unit, word) pair listed twice.
        """
        if len(self.count) and self.count.min() < 1:
            raise ValueError("unit counts must be >= 1 (a unit that holds a word holds it once)")
        if len(np.unique(np.stack([self.unit, self.word]), axis=1)[0]) != len(self.unit):
            raise ValueError("each (unit, word) pair must appear once")
        key = generator.random(len(self.unit))
        order = np.lexsort((key, self.unit))
        unit = self.unit[order]
        starts = np.flatnonzero(np.r_[True, unit[1:] != unit[:-1]]) if len(unit) else unit
        rank = np.arange(len(unit)) - np.repeat(starts, np.diff(np.r_[starts, len(unit)]))
        keep = order[rank < max_words]
        keep.sort()
        return UnitCounts(
            self.unit[keep], self.word[keep], np.minimum(self.count[keep], clip), self.n_words
        )

    def totals(self) -> tuple[np.ndarray, np.ndarray]:
        """(c, N): total count of each word and the number of units that use it."""
        c = np.bincount(self.word, weights=self.count, minlength=self.n_words)
        n = np.bincount(self.word, minlength=self.n_words)
        return c, n.astype(float)

    def select(self, mask: np.ndarray) -> UnitCounts:
        """The entries of the units where ``mask[unit]`` is true."""
        keep = mask[self.unit]
        return UnitCounts(self.unit[keep], self.word[keep], self.count[keep], self.n_words)


def weighted_log_counts(counts: UnitCounts, scale: float, clip: int) -> np.ndarray:
    """r = w * log(c + 1): the private vector the Gaussian mechanism noises (uncentred)."""
    c, n = counts.totals()
    return weights(n, scale, clip) * np.log1p(c)


def prior_logits(public_counts: np.ndarray) -> np.ndarray:
    """mu_p = log(alpha + 1), centred (eq. 1)."""
    logs = np.log1p(np.asarray(public_counts, dtype=float))
    return logs - logs.mean()


def release(counts: UnitCounts, params: BayesianPriorParams, noise: NoiseSource) -> np.ndarray:
    """The DP vector r + eta (counts already bounded to ``params``' C and W)."""
    return noise.add_gaussian(weighted_log_counts(counts, params.scale, params.clip), params.sigma)


def posterior(noisy: np.ndarray, prior: np.ndarray, rho: float) -> np.ndarray:
    """theta = softmax(rho (r + eta) + (1 - rho) mu_p): eq. 4 applied to the posterior sample."""
    if not 0.0 <= rho <= 1.0:
        raise BadInputError(f"rho must be in [0, 1], got {rho!r}")
    h = rho * noisy + (1.0 - rho) * prior
    from scipy.special import logsumexp  # imported when it runs (CLI refusals skip it)

    return np.exp(h - logsumexp(h))


def empirical_bayes_rho(noisy: np.ndarray, prior: np.ndarray, sigma: float) -> float:
    """rho = tau^2 / (tau^2 + sigma^2), tau^2 the spread of (r + eta) - mu_p beyond the noise.

    A moment estimate in the model r_i = mu_p,i + b + N(0, tau^2), r + eta = r + N(0, sigma^2):
    the posterior mean of r is then rho (r + eta) + (1 - rho)(mu_p + b), and softmax ignores b.
    The sample variance of V Gaussian noise draws has a standard error of about
    sigma^2 sqrt(2 / V), so tau^2 is counted only beyond two of them: when the noise dominates
    (sigma^2 much larger than tau^2) the estimate would otherwise trust the noise
    (benchmarks/bayesian_kl_results.md). Reads only the released vector and public data:
    post-processing, free.
    """
    diff = noisy - prior
    margin = 2.0 * sigma**2 * math.sqrt(2.0 / len(diff))
    tau2 = max(0.0, float(np.var(diff)) - sigma**2 - margin)
    return tau2 / (tau2 + sigma**2)


def clipped_losses(counts: UnitCounts, theta: np.ndarray, cap: float) -> float:
    """Sum over units of each unit's mean of min(cap, -log theta_w) over its word counts."""
    loss = np.minimum(cap, -np.log(np.maximum(theta, np.finfo(float).tiny)))
    per_entry = counts.count * loss[counts.word]
    n_units = int(counts.unit.max()) + 1 if len(counts.unit) else 0
    sums = np.bincount(counts.unit, weights=per_entry, minlength=n_units)
    sizes = np.bincount(counts.unit, weights=counts.count, minlength=n_units)
    used = sizes > 0
    return float((sums[used] / sizes[used]).sum())


@dataclass(frozen=True)
class Selection:
    """What report-noisy-min chose, and its guarantee (its noisy scores are not released)."""

    rho: float
    candidates: tuple[float, ...]
    epsilon: float
    loss_cap: float
    laplace_scale: float


def select_rho(
    noisy: np.ndarray,
    prior: np.ndarray,
    validation: UnitCounts,
    candidates: tuple[float, ...],
    epsilon: float,
    noise: NoiseSource,
    loss_cap: float | None = None,
) -> Selection:
    """Report-noisy-min over ``candidates`` of the validation units' clipped loss (docstring, 4).

    epsilon-DP with respect to the validation units: each unit's score term is in [0, L],
    so every candidate's score moves by at most L when a unit is added or removed, and
    argmin(score + Laplace(2 L / epsilon)) is epsilon-DP (the paper's Theorem 2; Dwork &
    Roth, Claim 3.9 for the factor 2 without monotonicity). ``noisy`` is already DP.
    """
    if not candidates:
        raise BadInputError("rho selection needs at least one candidate")
    cap = loss_cap if loss_cap is not None else math.log(len(prior)) + 4.0
    scores = np.array(
        [clipped_losses(validation, posterior(noisy, prior, rho), cap) for rho in candidates]
    )
    scale = 2.0 * cap / epsilon
    chosen = int(np.argmin(noise.add_laplace(scores, scale)))
    return Selection(float(candidates[chosen]), tuple(candidates), epsilon, cap, scale)


def brute_force_sensitivity(counts: UnitCounts, scale: float, clip: int) -> float:
    """``claimed-unproven``: Algorithm 1's brute-force sensitivity of the paper's own f.

    max over the dataset's units n of ||w * x_hat - w_-n * x_hat_-n||_2, with x_hat centred
    *before* weighting (eqs. 2, 3, 5). It is a function of the private data (a local
    sensitivity), so noise calibrated to it is not DP (module docstring, 1). For the paper's
    comparison only.
    """
    c, n = counts.totals()
    y = np.log1p(c)
    w = weights(n, scale, clip)
    m = y.mean()
    base = w * (y - m)
    order = np.argsort(counts.unit, kind="stable")
    unit, word, cnt = counts.unit[order], counts.word[order], counts.count[order]
    y_minus = np.log1p(c[word] - cnt)
    w_minus = weights(n[word] - 1, scale, clip)
    n_units = int(unit.max()) + 1 if len(unit) else 0
    dm = np.bincount(unit, weights=(y[word] - y_minus), minlength=n_units) / len(y)  # m - m_-n
    m_minus = m - dm[unit]
    touched = base[word] - w_minus * (y_minus - m_minus)
    sq_touched = np.bincount(unit, weights=touched**2, minlength=n_units)
    w2_touched = np.bincount(unit, weights=w[word] ** 2, minlength=n_units)
    sq_rest = dm**2 * (float((w**2).sum()) - w2_touched)
    return float(np.sqrt(sq_touched + sq_rest).max()) if n_units else 0.0
