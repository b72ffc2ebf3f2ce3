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

* ``uniform-laplace`` and ``uniform-gaussian`` (Gopi et al., section 3, the "Weighted
  Laplace" and "Weighted Gaussian" baselines they improve on, after Korolova et al. 2009
  and Wilson et al. 2020): no cut-off and no sequential update; each author spreads a
  weight of norm 1 evenly over their kept items, 1/s each (l1) or 1/sqrt(s) each (l2) for
  s kept items, here rounded down to multiples of 2^-20 so the norm bound holds exactly and
  the histogram is an exact int64 sum. The kept items are the author's Delta0 most frequent
  (random ties), a per-author function, where Gopi et al. take a random subset; either way
  an author's contribution depends on their own data and public randomness only. Privacy
  is the policies' argument without the cut-off: on the items two neighbours share, the
  histograms differ by one author's vector (l1 or l2 norm <= 1: Laplace(1/eps), or the
  analytic Gaussian at (eps, delta/2)); the added author's t <= Delta0 items that no other
  author holds each carry at most 1/t (l1) or 1/sqrt(t) (l2), since t <= s, so rho_Lap and
  rho_Gauss bound the probability that any of them is released by delta (Gopi et al.,
  Theorems 3.1 and 4.1 use the same bound). Their weights are independent across authors,
  so on a Dask cluster they reduce to one vocabulary-length vector per range of authors.
  An author's weight is not steered to the words that still need it, as the sequential
  policies do, so an author with many words spreads it thinner; on PHEME's short tweets
  ``uniform-gaussian`` selects about as many words as ``weighted`` and ``uniform-laplace``
  far fewer (benchmarks/m1_uniform.md).

For the two policies of Gopi et al. and the uniform ones every candidate word has positive
weight, so noising all candidates is the same as noising the support, as in their algorithm.

Exact arithmetic (``weighted`` and ``uniform-laplace``, ``INTEGER_POLICIES``). The
histogram is int64 in units of g = 1/WEIGHT_GRID (2^-20): an author's budget is 1/g units,
the cut-off Gamma is rounded up to the grid (any Gamma >= 1 keeps the one-new-word
argument), and the greedy update runs on integers, so each step is exact and the
contraction argument (l1 sensitivity 1, i.e. 1/g units, on the shared candidates) holds
for the histogram computed, not for an idealised one that floating point approximates.
The noise is the discrete Laplace of scale t >= b/g on those integers (b = 1/epsilon;
``NoiseSource.add_integer_laplace``: fdptm's exact sampler one ulp above b/g, or OpenDP's
on i64 2^-30 above), epsilon-DP at l1 sensitivity 1/g (the pmf ratio at distance d is
exp(d / t) at most). A candidate is released when its noisy integer exceeds R units.
The delta part: for m >= 1, P[X >= m] = exp(-m / t) / (1 + exp(-1 / t)) < exp(-(m - 1) / t)
/ 2, so a word of w <= 1/g units is released with probability P[X >= R - w + 1] <
exp(-eps_t (R g - w g)) / 2 with eps_t = 1 / (t g) > eps (1 - 2^-29) (OpenDP's scale, b/g
(1 + 2^-30) rounded to f64, may be an ulp above that product): the continuous tail the
bounds above use, at eps_t. So R is the threshold formula's rho evaluated at
eps (1 - 2^-29) (which holds for every eps_t above it, the formula decreasing in epsilon),
at delta (1 - DELTA_SLACK), rounded up to the grid, plus one unit. The unit covers the
formula's floating-point error (a few ulps of rho) while rho < 2^30; above that eps rho is
at most ln(Delta0) + 746 (rho that large needs a tiny epsilon), so the error moves the tail by
a factor below 1 + 2^-40, which DELTA_SLACK (2^-20) covers. ``uniform-laplace``'s bound is
the product over the added author's t unique items, each carrying at most 1/t of the
budget (floor(1/(g s)) units, s >= t), with per-item probability 1 - (1 - delta)^(1/t),
which delta (1 - DELTA_SLACK) only lowers. R is an integer below 2^53, exact in f64, and
the noisy integers reach f64 by a monotone rounding (exact below 2^53), so a noisy value
exceeds R exactly when its integer does (``released``): no rounding enters the released
set.

alpha = 3 by default (Carvalho et al.; FDPTM section 4.4). Authors are visited in a
uniformly random order, which does not depend on the data.

Where it runs: the per-author work (distinct words, the Delta0 truncation, the uniform
weights) is mapped over fixed ranges of consecutive authors (``unit_ranges``), in this
process or on the Dask cluster of ``fdptm.parallel.on_cluster``; the sequential visit, the
noise and the threshold run in the calling process. The ranges depend on the data only, so
a seeded selection is the same wherever the ranges ran.

numba's kernels and scipy.special are imported where they run: importing them costs about
0.4 s, which every CLI refusal (made before any of this runs) would otherwise wait for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import randomgen

from fdptm.errors import BadInputError
from fdptm.mechanisms.constraints import POSITIVE, Integer, OneOf, param, validate_params
from fdptm.parallel import cap_numba, stream_map
from fdptm.privacy.noise import NoiseSource

UNIFORM_POLICIES = ("uniform-laplace", "uniform-gaussian")
POLICIES = ("weighted", "policy-laplace", "policy-gaussian", *UNIFORM_POLICIES)
INTEGER_POLICIES = ("weighted", "uniform-laplace")
"""The policies whose histogram is exact integers of 1/WEIGHT_GRID and whose noise is the
discrete Laplace on those integers (module docstring, "Exact arithmetic")."""
WEIGHT_GRID = 1 << 20
"""Weights of the integer policies (and ``uniform-gaussian``'s) are multiples of
1/WEIGHT_GRID, summed as integers."""
DELTA_SLACK = 2.0**-20
"""The integer policies' threshold is computed for delta (1 - DELTA_SLACK), a margin for
the floating-point error of the threshold formula (module docstring, "Exact arithmetic")."""
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
    gamma: float | None
    """The cut-off of the sequential policies (None for the uniform ones: no cut-off)."""
    noise: str
    noise_scale: float
    grid: int | None = None
    """Integer policies: weights, rho and gamma are multiples of 1/grid, the histogram is
    exact integers of 1/grid and the noise the discrete Laplace of scale noise_scale x grid
    on them (None: floating point)."""

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
    with np.errstate(divide="ignore"):  # a tail that underflows to 0: rho = inf, refused
        return float(np.max(1.0 / t - (math.log(2.0) + np.log(tail)) / epsilon))


def gaussian_threshold(sigma: float, delta: float, max_items: int) -> float:
    """rho_Gauss = max_{1<=t<=Delta0} 1/sqrt(t) + sigma * PhiInv((1 - delta/2)^(1/t))."""
    t = np.arange(1, max_items + 1, dtype=float)
    tail = -np.expm1(np.log1p(-delta / 2.0) / t)
    from scipy.special import ndtri

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
    from scipy.special import log_ndtr, ndtr

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
    uniform = policy in UNIFORM_POLICIES
    if uniform and max_items > WEIGHT_GRID:
        raise BadInputError(
            f"the uniform policies keep at most {WEIGHT_GRID} items per author (each kept "
            f"item must get a positive weight on their grid), got {max_items}"
        )
    if policy in ("weighted", "policy-laplace", "uniform-laplace"):
        delta = min(delta, MAX_LAPLACE_DELTA)
        threshold = weighted_threshold if policy == "weighted" else laplace_threshold
        if policy not in INTEGER_POLICIES:
            rho = threshold(epsilon, delta, max_items)
            gamma = rho + alpha / epsilon
            return SetUnionParams(
                policy, epsilon, delta, alpha, max_items, rho, gamma, "laplace", 1.0 / epsilon
            )
        tail_epsilon = epsilon * (1.0 - 2.0**-29)
        rho = _on_grid(threshold(tail_epsilon, delta * (1.0 - DELTA_SLACK), max_items))
        rho += 1.0 / WEIGHT_GRID
        gamma = None if uniform else _on_grid(rho + alpha / epsilon)
        return SetUnionParams(
            policy,
            epsilon,
            delta,
            alpha,
            max_items,
            rho,
            gamma,
            "laplace",
            1.0 / epsilon,
            WEIGHT_GRID,
        )
    sigma = analytic_gaussian_sigma(epsilon, delta / 2.0)
    rho = gaussian_threshold(sigma, delta, max_items)
    gamma = None if uniform else rho + alpha * sigma
    return SetUnionParams(policy, epsilon, delta, alpha, max_items, rho, gamma, "gaussian", sigma)


def _on_grid(value: float) -> float:
    """``value`` rounded up to a multiple of 1/WEIGHT_GRID (exact: a power-of-two scaling,
    an integer ceiling, and a quotient below 2^53 in grid units)."""
    if not math.isfinite(value) or value * WEIGHT_GRID >= 2**53:
        raise BadInputError(
            f"DP set union's threshold {value:.3g} is too large for exact integer weights; "
            "raise M1's epsilon or delta"
        )
    return math.ceil(value * WEIGHT_GRID) / WEIGHT_GRID


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
    the distinct (author, item) pairs, not the occurrences: the ``unit_ranges`` grouped
    and joined."""
    ranges = unit_ranges(doc_author, doc_ptr, item_idx, n_items)
    return _concat([r.grouped() for r in ranges], n_items)


RANGE_AUTHORS = 1 << 16
RANGE_TOKENS = 1 << 23
"""A range of authors closes at this many authors or once it holds this many tokens (an
author is never split). The ranges depend on the data only, never on the workers."""


@dataclass(frozen=True)
class UnitRange:
    """Range ``index`` of consecutive authors, with their documents' items: author ``a``
    of the range owns documents ``unit_ptr[a]:unit_ptr[a + 1]``, document ``d`` the items
    ``items[doc_ptr[d]:doc_ptr[d + 1]]``. The unit of M1's per-author work (``select_units``)."""

    index: int
    unit_ptr: np.ndarray
    doc_ptr: np.ndarray
    items: np.ndarray
    n_items: int

    def grouped(self) -> AuthorItems:
        """The range's authors' distinct items with their counts."""
        from fdptm.kernels.distinct import distinct_per_unit

        docs = np.arange(len(self.doc_ptr) - 1, dtype=np.int64)
        offsets, items, counts = distinct_per_unit(self.unit_ptr, docs, self.doc_ptr, self.items)
        return AuthorItems(offsets, items, counts, self.n_items)


def unit_ranges(
    doc_author: np.ndarray, doc_ptr: np.ndarray, item_idx: np.ndarray, n_items: int
) -> Iterator[UnitRange]:
    """The authors 0 .. max(doc_author) cut into consecutive ``UnitRange`` s, built one at
    a time (each holds a copy of its own documents' items only)."""
    doc_author = np.asarray(doc_author, dtype=np.int64)
    doc_ptr = np.asarray(doc_ptr, dtype=np.int64)
    n_authors = int(doc_author.max()) + 1 if len(doc_author) else 0
    lengths = np.diff(doc_ptr)
    unit_docs = np.argsort(doc_author, kind="stable")
    unit_ptr = np.zeros(n_authors + 1, dtype=np.int64)
    np.cumsum(np.bincount(doc_author, minlength=n_authors), out=unit_ptr[1:])
    tokens = np.zeros(n_authors + 1, dtype=np.int64)
    np.cumsum(np.bincount(doc_author, weights=lengths, minlength=n_authors), out=tokens[1:])
    start, index = 0, 0
    while start < n_authors:
        stop = int(np.searchsorted(tokens, tokens[start] + RANGE_TOKENS, side="right")) - 1
        stop = min(max(stop, start + 1), start + RANGE_AUTHORS, n_authors)
        docs = unit_docs[unit_ptr[start] : unit_ptr[stop]]
        sizes = lengths[docs]
        ptr = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
        at = np.repeat(doc_ptr[docs] - ptr[:-1], sizes) + np.arange(ptr[-1])
        items = np.ascontiguousarray(item_idx[at], dtype=np.int32)
        yield UnitRange(index, unit_ptr[start : stop + 1] - unit_ptr[start], ptr, items, n_items)
        start, index = stop, index + 1


def _reorder(table: AuthorItems, primary: np.ndarray, limit: int | None) -> AuthorItems:
    """Sort each author's items by ``primary`` (ascending, ties in the current order) and
    keep the first ``limit`` (numba, per author: no sort over every pair)."""
    from fdptm.kernels import set_union as kernels

    cap_numba()
    offsets, items, counts = kernels.reorder(
        table.offsets, table.items, table.counts, np.ascontiguousarray(primary), _limit(limit)
    )
    return AuthorItems(offsets, items, counts, table.n_items)


def _most_frequent_first(table: AuthorItems, tiebreak: np.ndarray, limit: int | None):
    """Each author's items by descending count, ties by ``tiebreak[item]``, cut to
    ``limit``: ``_reorder`` with that key, built per author inside the kernel."""
    from fdptm.kernels import set_union as kernels

    cap_numba()
    offsets, items, counts = kernels.reorder_by_count(
        table.offsets, table.items, table.counts, tiebreak.astype(np.int64), _limit(limit)
    )
    return AuthorItems(offsets, items, counts, table.n_items)


def _limit(limit: int | None) -> int:
    return -1 if limit is None else int(limit)


_NO_KEY = np.zeros(4, dtype=np.uint64)
"""The key ``truncated`` gets where the policy draws nothing (most frequent first)."""


def truncated(
    part: UnitRange | AuthorItems,
    policy: str,
    limit: int,
    tiebreak: np.ndarray,
    key: np.ndarray = _NO_KEY,
) -> AuthorItems:
    """Each author's (at most) ``limit`` items of ``part`` that the policy lets contribute.

    ``weighted``, ``uniform-*``: the most frequent first, ties by ``tiebreak[item]``, a
    function of the author's own items given the public-to-the-mechanism ``tiebreak``.
    ``policy-*``: a uniformly random subset, from ChaCha20 under the 256-bit ``key``
    (uint64[4]) with a counter block of its own per range, so every author's draws are
    fresh uniforms; which of the range's draws an author gets depends on the authors
    before it in the range, which is harmless only because ``key`` is secret. It is an
    array so that ``stream_map`` sends it to the workers as data, never inside a task's
    arguments on the scheduler."""
    index = part.index if isinstance(part, UnitRange) else 0
    table = part.grouped() if isinstance(part, UnitRange) else part
    if policy.startswith("policy-"):
        chacha = randomgen.ChaCha(key=key, counter=index << 64, rounds=20)
        return _reorder(table, np.random.Generator(chacha).random(len(table.items)), limit)
    return _most_frequent_first(table, tiebreak, limit)


def uniform_weights(
    part: UnitRange | AuthorItems, policy: str, limit: int, tiebreak: np.ndarray
) -> np.ndarray:
    """The histogram of the uniform policies over ``part``'s authors, in units of
    1/WEIGHT_GRID (int64): each of an author's s kept items gets floor(GRID / s)
    (``uniform-laplace``: l1 norm <= 1) or floor(GRID / sqrt(s)) (``uniform-gaussian``:
    l2 norm <= 1), rounded down so the norm bound is exact. The float64 bincount is exact
    (every partial sum is an integer of at most n_authors x 2^20, below 2^53 for fewer
    than 2^33 authors; a range of ``unit_ranges`` has at most 2^16)."""
    kept = truncated(part, policy, limit, tiebreak)
    sizes = np.diff(kept.offsets)
    distinct, inverse = np.unique(sizes, return_inverse=True)
    grid = WEIGHT_GRID
    if policy == "uniform-laplace":
        per_size = [grid // int(s) if s else 0 for s in distinct]
    else:
        per_size = [math.isqrt(grid * grid // int(s)) if s else 0 for s in distinct]
    weight = np.asarray(per_size, dtype=np.float64)[inverse]
    hist = np.bincount(kept.items, weights=np.repeat(weight, sizes), minlength=kept.n_items)
    return hist.astype(np.int64)


def select(table: AuthorItems, params: SetUnionParams, noise: NoiseSource) -> np.ndarray:
    """``select_units`` on authors already grouped into ``table`` (one range)."""
    return select_units([table], table.n_items, params, noise)


def select_units(
    parts: Iterable[UnitRange | AuthorItems],
    n_items: int,
    params: SetUnionParams,
    noise: NoiseSource,
) -> np.ndarray:
    """Run the policy over the authors of ``parts`` (consecutive ranges, in order) and
    return the indices of the released items, sorted ascending.

    The per-author work (distinct items, the Delta0 truncation, and for the uniform policies
    the weights) is ``fdptm.parallel.stream_map`` ped over the ranges: in this process, or
    on the Dask cluster of ``on_cluster``. The sequential policies then visit the authors
    here (their update depends on the histogram so far: Gopi et al. section 3, Carvalho et
    al.); the uniform ones are a sum of independent per-author vectors, reduced exactly in
    int64, so only one vocabulary-length vector per range comes back. The noise and the
    threshold are applied here, once. The result does not depend on where the ranges ran.

    Every candidate (an item of some author's truncated set) gets noise, weight 0 included.
    Randomness: the tie-breaks, the visiting order and the Delta0 subsamples come from
    ``noise``, so a run is reproducible exactly when its noise source is seeded.
    """
    from fdptm.kernels import set_union as kernels

    gen = noise.generator
    tiebreak = gen.permutation(n_items)
    policy = params.policy
    if policy in UNIFORM_POLICIES:
        total = np.zeros(n_items, dtype=np.int64)
        for part in stream_map(uniform_weights, parts, policy, params.max_items, tiebreak):
            total += part
        candidates = np.flatnonzero(total)
        values = total[candidates]
    else:
        key = _NO_KEY
        if policy.startswith("policy-"):
            key = np.frombuffer(gen.bytes(32), dtype="<u8").astype(np.uint64)
        ordered = _concat(
            list(stream_map(truncated, parts, policy, params.max_items, tiebreak, key)), n_items
        )
        order = gen.permutation(ordered.n_authors)
        kernel = {
            "weighted": kernels.weighted_greedy,
            "policy-laplace": kernels.l1_descent,
            "policy-gaussian": kernels.l2_descent,
        }[policy]
        if params.grid is None:
            hist = np.zeros(n_items)
            kernel(order, ordered.offsets, ordered.items, params.gamma, hist)
        else:
            hist = np.zeros(n_items, dtype=np.int64)
            gamma = np.int64(round(params.gamma * params.grid))
            kernel(order, ordered.offsets, ordered.items, gamma, np.int64(params.grid), hist)
        candidates = np.flatnonzero(np.bincount(ordered.items, minlength=n_items))
        values = hist[candidates]
    if params.grid is not None:
        scale = params.noise_scale * params.grid
        noisy = noise.add_integer_laplace(values, scale, params.grid)
    else:
        values = values / WEIGHT_GRID if policy in UNIFORM_POLICIES else values
        if params.noise == "laplace":
            noisy = noise.add_laplace(values, params.noise_scale)
        else:
            noisy = noise.add_gaussian(values, params.noise_scale)
    return candidates[released(noisy, params)]


def released(noisy: np.ndarray, params: SetUnionParams) -> np.ndarray:
    """Which noisy weights are released: those strictly above rho, in grid units R = rho / g
    for the integer policies (an integer equal to R is not: the delta bound counts
    P[X >= R - w + 1]), else in floating point."""
    if params.grid is None:
        return noisy > params.rho
    return noisy > round(params.rho * params.grid)


def _concat(parts: list[AuthorItems], n_items: int) -> AuthorItems:
    """Consecutive ranges' tables as one (offsets rebased)."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        empty = np.zeros(0, np.int32)
        return AuthorItems(np.zeros(1, np.int64), empty, empty, n_items)
    shifts = np.cumsum([0] + [len(p.items) for p in parts[:-1]])
    offsets = np.concatenate(
        [np.zeros(1, np.int64)] + [p.offsets[1:] + s for p, s in zip(parts, shifts, strict=True)]
    )
    items = np.concatenate([p.items for p in parts])
    counts = np.concatenate([p.counts for p in parts])
    return AuthorItems(offsets, items, counts, n_items)
