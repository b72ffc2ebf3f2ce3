"""M1: DP vocabulary selection as DP set union (FDPTM paper, sections 4.2 and 4.4).

Each author i contributes the set W_i of distinct words in their (contribution-bounded)
documents; the mechanism releases a subset of the union such that adding or removing one
author changes the output distribution by at most (epsilon, delta). Adjacency: add/remove
one author ("author" when author ids are given, "document" when every document is its own
author). Only the selected words leave this module, sorted alphabetically; the histogram,
the noisy weights and the counts never do.

Three policies (FDPTM paper refs [7] and [13]):

* ``weighted`` (Carvalho, Wang & Gondara, AAAI 2022, the DPSU the FDPTM paper uses in
  section 4.4): each author's words, ordered by the author's own counts, are filled up to
  the cut-off Gamma = rho + alpha/epsilon with an l1 budget of 1 (the order depends on the
  author's data only, which keeps the update l1-contractive); Laplace(1/epsilon) noise;
  release the words whose noisy weight exceeds rho.
  Threshold. Carvalho et al. use rho = 1 - ln(2 delta)/epsilon and noise the words with
  positive weight. That support can differ between neighbours by words the added author
  does not even hold (an author's budget running out at a different word: a cascade), and
  their number is not bounded, so that rho does not give delta in general. Here every
  candidate word (the union of the authors' Delta0-truncated sets, weight 0 included) is
  noised, so the candidates of two neighbours differ only by the words unique to the added
  author: at most Delta0 of them, of which at most one has positive weight (it starts at 0
  and Gamma > 1 exceeds the author's budget), that weight being at most 1. A union bound
  gives P[one of them is released] <= exp(-eps rho) (e^eps + Delta0 - 1) / 2, so
  rho = ln((e^eps + Delta0 - 1) / (2 delta)) / epsilon, which is Carvalho's rho when
  Delta0 = 1. The epsilon part is Laplace(1/eps) on an l1-sensitivity-1 histogram over the
  shared candidates (Gopi et al., Theorem B.1 decomposition).
* ``policy-laplace`` (Gopi et al., ICML 2020, "Policy Laplace", supplement Theorem 3.1):
  a uniformly random subset of at most Delta0 distinct words per author, l1-descent
  (water-filling) update, Laplace(1/epsilon) noise, threshold rho_Lap, Gamma = rho +
  alpha/epsilon.
* ``policy-gaussian`` (Gopi et al., "Policy Gaussian", supplement Theorem 4.1): a random
  subset of at most Delta0 words, l2-descent update, Gaussian noise sigma calibrated by the
  analytic Gaussian mechanism (Balle & Wang 2018) for (epsilon, delta/2), threshold
  rho_Gauss spending the other delta/2, Gamma = rho + alpha sigma.

For the two policies of Gopi et al. every candidate word has positive weight, so noising
all candidates is the same as noising the support, as in their algorithm.

alpha = 3 by default (Carvalho et al.; FDPTM section 4.4). Authors are visited in a
uniformly random order, which does not depend on the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr, ndtr, ndtri

from fdptm.kernels import set_union as kernels
from fdptm.kernels.distinct import distinct_per_unit
from fdptm.mechanisms.constraints import POSITIVE, Integer, OneOf, param, validate_params
from fdptm.parallel import cap_numba
from fdptm.privacy.noise import NoiseSource

POLICIES = ("weighted", "policy-laplace", "policy-gaussian")
MAX_LAPLACE_DELTA = 0.5
PARAMETER_CONSTRAINTS = {
    "policy": param(OneOf(POLICIES), what="the set-union policy"),
    "alpha": param(POSITIVE, what="the cut-off's margin above the threshold"),
    "max_items": param(Integer(1), what="Delta0, the distinct words kept per author"),
}
"""What ``set_union_params`` accepts (``fdptm.mechanisms.constraints``)."""


@dataclass(frozen=True)
class SetUnionParams:
    """Thresholds and noise of one set-union run (all public functions of eps, delta)."""

    policy: str
    epsilon: float
    delta: float
    alpha: float
    max_items: int
    rho: float
    gamma: float
    noise: str
    noise_scale: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def weighted_threshold(epsilon: float, delta: float, max_items: int) -> float:
    """rho = ln((e^eps + Delta0 - 1) / (2 delta)) / eps (see the module docstring).

    Computed as 1 + (log1p((Delta0 - 1) e^-eps) - ln(2 delta)) / eps to stay finite for
    large epsilon; equals Carvalho et al.'s 1 - ln(2 delta)/eps when Delta0 = 1.
    """
    return 1.0 + (math.log1p((max_items - 1) * math.exp(-epsilon)) - math.log(2.0 * delta)) / (
        epsilon
    )


def laplace_threshold(epsilon: float, delta: float, max_items: int) -> float:
    """rho_Lap = max_{1<=t<=Delta0} 1/t + ln(1 / (2 (1 - (1 - delta)^(1/t)))) / epsilon."""
    t = np.arange(1, max_items + 1, dtype=float)
    tail = -np.expm1(np.log1p(-delta) / t)
    return float(np.max(1.0 / t + np.log(1.0 / (2.0 * tail)) / epsilon))


def gaussian_threshold(sigma: float, delta: float, max_items: int) -> float:
    """rho_Gauss = max_{1<=t<=Delta0} 1/sqrt(t) + sigma * PhiInv((1 - delta/2)^(1/t))."""
    t = np.arange(1, max_items + 1, dtype=float)
    tail = -np.expm1(np.log1p(-delta / 2.0) / t)
    return float(np.max(1.0 / np.sqrt(t) + sigma * -ndtri(tail)))  # Phi^-1(1 - tail)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma with which the Gaussian mechanism is (epsilon, delta)-DP.

    Balle & Wang (ICML 2018), Theorem 8: N(0, sigma^2) noise on an l2-sensitivity-Delta
    query is (eps, delta)-DP iff
    Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta)
    <= delta. The left side decreases in sigma; solve for equality with Brent's method.
    (scipy.special's normal functions are the ones scipy.stats.norm calls.)
    """
    from scipy import optimize

    def excess(sigma: float) -> float:
        a = sensitivity / (2.0 * sigma)
        b = epsilon * sigma / sensitivity
        return float(ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b)) - delta)

    hi = 1.0
    while excess(hi) > 0:
        hi *= 2.0
    lo = hi / 2.0
    while excess(lo) <= 0 and lo > 1e-12:
        lo /= 2.0
    sigma = float(optimize.brentq(excess, lo, hi, xtol=1e-14, rtol=1e-12))
    while excess(sigma) > 0:  # round the root up: never a sigma that misses delta
        sigma *= 1 + 1e-12
    return sigma


@validate_params(PARAMETER_CONSTRAINTS)
def set_union_params(
    policy: str, epsilon: float, delta: float, *, alpha: float = 3.0, max_items: int = 50
) -> SetUnionParams:
    """Cut-off, threshold and noise for ``policy`` at (epsilon, delta).

    The Laplace policies' thresholds rest on the tail bound P[Lap(1/eps) > x] =
    exp(-eps x) / 2, which holds for x >= 0 only: the proofs (Gopi et al. Theorem 3.1, and
    the union bound above) need rho >= 1, i.e. delta <= 1/2 for one candidate. A larger
    share of delta is capped at 1/2 (``MAX_LAPLACE_DELTA``): the mechanism uses, and its
    params state, less delta than it was given, never an unproven threshold.
    """
    if policy in ("weighted", "policy-laplace"):
        delta = min(delta, MAX_LAPLACE_DELTA)
        threshold = weighted_threshold if policy == "weighted" else laplace_threshold
        rho = threshold(epsilon, delta, max_items)
        return SetUnionParams(
            policy,
            epsilon,
            delta,
            alpha,
            max_items,
            rho,
            rho + alpha / epsilon,
            "laplace",
            1.0 / epsilon,
        )
    sigma = analytic_gaussian_sigma(epsilon, delta / 2.0)
    rho = gaussian_threshold(sigma, delta, max_items)
    return SetUnionParams(
        policy, epsilon, delta, alpha, max_items, rho, rho + alpha * sigma, "gaussian", sigma
    )


@dataclass(frozen=True)
class AuthorItems:
    """Each author's distinct candidate items as CSR slices, with the author's own counts."""

    offsets: np.ndarray
    items: np.ndarray
    counts: np.ndarray
    n_items: int

    @property
    def n_authors(self) -> int:
        return len(self.offsets) - 1


def author_items(author_idx: np.ndarray, item_idx: np.ndarray, n_items: int) -> AuthorItems:
    """Group (author, item) occurrences into distinct items per author with their counts."""
    n = len(author_idx)
    return unit_items(author_idx, np.arange(n + 1, dtype=np.int64), item_idx, n_items)


def unit_items(
    doc_author: np.ndarray, doc_ptr: np.ndarray, item_idx: np.ndarray, n_items: int
) -> AuthorItems:
    """Each author's distinct items (ascending) and counts, from documents: document d has
    author ``doc_author[d]`` and items ``item_idx[doc_ptr[d]:doc_ptr[d + 1]]``. Authors are
    0 .. max(doc_author); numba over authors (``fdptm.kernels.distinct``), so memory follows
    the distinct (author, item) pairs, not the occurrences."""
    doc_author = np.asarray(doc_author, dtype=np.int64)
    n_authors = int(doc_author.max()) + 1 if len(doc_author) else 0
    unit_docs = np.argsort(doc_author, kind="stable")
    unit_ptr = np.zeros(n_authors + 1, dtype=np.int64)
    np.cumsum(np.bincount(doc_author, minlength=n_authors), out=unit_ptr[1:])
    offsets, items, counts = distinct_per_unit(unit_ptr, unit_docs, doc_ptr, item_idx)
    return AuthorItems(offsets, items, counts, n_items)


def _reorder(table: AuthorItems, primary: np.ndarray, limit: int | None) -> AuthorItems:
    """Sort each author's items by ``primary`` (ascending, ties in the current order) and
    keep the first ``limit`` (numba, per author: no sort over every pair)."""
    cap_numba()
    offsets, items, counts = kernels.reorder(
        table.offsets, table.items, table.counts, np.ascontiguousarray(primary), _limit(limit)
    )
    return AuthorItems(offsets, items, counts, table.n_items)


def _most_frequent_first(table: AuthorItems, tiebreak: np.ndarray, limit: int | None):
    """Each author's items by descending count, ties by ``tiebreak[item]``, cut to
    ``limit``: ``_reorder`` with that key, built per author inside the kernel."""
    cap_numba()
    offsets, items, counts = kernels.reorder_by_count(
        table.offsets, table.items, table.counts, tiebreak.astype(np.int64), _limit(limit)
    )
    return AuthorItems(offsets, items, counts, table.n_items)


def _limit(limit: int | None) -> int:
    return -1 if limit is None else int(limit)


def select(table: AuthorItems, params: SetUnionParams, noise: NoiseSource) -> np.ndarray:
    """Run the policy and return the indices of the released items, sorted ascending.

    Every candidate (an item of some author's truncated set) gets noise, weight 0 included.

    Randomness: the visiting order of authors, tie-breaks and the Delta0 subsample come from
    ``noise`` as well, so a run is reproducible exactly when its noise source is seeded.
    """
    gen = noise.generator
    tiebreak = gen.permutation(table.n_items)
    if params.policy == "weighted":
        # most frequent first; ties broken by a random (data-independent) order of items
        ordered = _most_frequent_first(table, tiebreak, params.max_items)
        kernel = kernels.weighted_greedy
    else:
        ordered = _reorder(table, gen.random(len(table.items)), params.max_items)
        kernel = kernels.l1_descent if params.policy == "policy-laplace" else kernels.l2_descent
    hist = np.zeros(table.n_items)
    order = gen.permutation(table.n_authors)
    kernel(order, ordered.offsets, ordered.items, params.gamma, hist)
    candidates = np.flatnonzero(np.bincount(ordered.items, minlength=table.n_items))
    if params.noise == "laplace":
        noisy = noise.add_laplace(hist[candidates], params.noise_scale)
    else:
        noisy = noise.add_gaussian(hist[candidates], params.noise_scale)
    return candidates[noisy > params.rho]
