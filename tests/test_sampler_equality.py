"""Production and seeded noise sources draw from the same distributions (issue 28, item 1).

A release draws its noise from ``NoiseSource.create(None)`` (OpenDP's samplers, and a numpy
Generator over ChaCha20 for everything else); tests and the README's seeded figures use
``NoiseSource.create(seed)`` (numpy's samplers over PCG64). The seeded runs stand in for
releases only if every pair of samplers agrees in distribution, so each test here draws a
production sample (unseeded: it cannot be fixed) and a reference sample from a seeded source
(fixed seed) through the same ``NoiseSource`` call the mechanisms make, and compares the two.

The checks (``assert_same_law``), both two-sample statistics of the production sample
(n draws) against the fixed reference sample (m draws), m >= 5 n:

* KS: D = sup |F_prod - F_ref|, the two-sample Kolmogorov-Smirnov distance
  (``scipy.stats.ks_2samp``). It fails when D > d_ref + sqrt(ln(2 / a) / (2 n)), where
  d_ref = sup |F_ref - F| is the fixed reference sample's distance to the law F that the
  seeded sampler implements. If production draws from F, D <= sup |F_prod - F| + d_ref, so by
  the Dvoretzky-Kiefer-Wolfowitz inequality (Massart's constant) the check fails with
  probability at most a, for THIS reference sample: no asymptotics, and no averaging over
  reference samples that the seed rules out.
* scale: the Mann-Whitney statistic of the draws' distances from the centre c (0 for noise):
  S = U / (n m), the mean over production draws y of h(|y - c|), h the reference sample's
  mid-rank empirical CDF of |x - c|. Given the reference sample, S is a mean of n i.i.d.
  values in [0, 1] whose mean mu and variance v under F are computed exactly; the check
  fails when |S - mu| > t, with t from Bernstein's inequality,
  P(|S - mu| >= t) <= 2 exp(-n t^2 / (2 v + 2 t / 3)) = a.
  A production scale r times the reference's moves S by about ln(r) times the integral of
  g^2, g the density of ln|X - c| (exactly r / (1 + r) - 1/2 = 0.0122 for Laplace noise and
  (2 / pi) atan(r) - 1/2 = 0.0155 for Gaussian noise at r = 1.05, against t = 0.0067 and a
  standard deviation of S of 0.0014 at n = 40,000): that is what gives the power below.

False failures. Each test splits TEST_ALPHA = 1e-4 evenly over its checks (Bonferroni), so a
correct production sampler fails a test with probability at most 1e-4, and the whole file
(17 tests) with probability at most 1.7e-3, whatever the seeds. Both bounds use the law F of
the seeded sampler; what the two sides are designed to differ by (OpenDP's discrete noise on
the grids 2^-1074, 2^-40, 2^-20 and the integers at the scales used here, its scales enlarged
by at most 1 + 2^-30 or 1 + 2^-40 n / sensitivity) moves a CDF by less than LAW_SLACK = 1e-6,
which both thresholds allow for.

Power against a 5% scale difference (production scale 1.05 or 1 / 1.05 times the seeded
one), each check at its share of TEST_ALPHA. "scale" is a normal approximation of S under
the alternative, with its mean and variance computed exactly given each test's own
reference sample (the worse of the two directions); "KS" and the generator rows are
simulated with numpy stand-ins for production (100 simulated tests per direction for the
noise, 400 for the quantile, 40 per generator case); neither the script nor its output is
part of the repository (the integer Laplace, M1's, was added later and not simulated: at
its scale, 2^20 / 1.5 grid units, it is the Laplace's law to within LAW_SLACK, so the
Laplace row stands for it):

========================================  =========  =========  =============  ======  =========
test                                      n (prod)   m (seed)   scale check    KS      the test
========================================  =========  =========  =============  ======  =========
Laplace, Laplace with sensitivity, grid   40,000     400,000    0.9999         ~0.1    0.9999
Gaussian, with sensitivity, integer       40,000     400,000    1 - 1e-9       ~0.7    1 - 1e-9
private quantile                          20,000     200,000    0.985          0.6-0.9 0.97
generator: uniforms                       500,000    2,500,000  40/40          40/40   40/40
generator: gamma, normal, integers        200,000    1,000,000  40/40          40/40   40/40
generator: Poisson sampling              20,000     100,000    9/40           40/40   40/40
generator: permutations                   20,000     100,000    40/40          40/40   40/40
========================================  =========  =========  =============  ======  =========

For the generator a "5% change" is: uniforms shrunk or stretched by 5% (the inclusion rate
of Poisson sampling 5% off), gamma and normal draws spread 5% more or less around their
mean, 5% of the integers forced to 0, 5% of the permutations with item 0 moved first.

The private quantile is the slowest: OpenDP's draws cost about 0.3 ms each even with the
measurement built once, and 5% on the exponential mechanism's scale is a small change of
its output, so 20,000 draws detect it with power 0.98 and a 10% change with power
>= 0.9999. (It chooses dp-vi's clipping norm only with ``clip="private"``, off by default.)

Cost on one idle core: about 1-2 s for each OpenDP noise test (the exact Gaussian is the
slowest, about 3.5 x 10^3 times numpy's cost per draw), about 7-9 s for the quantile, under
1 s for each generator test but the 500,000 uniforms (about 2 s).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from scipy import stats

from fdptm.mechanisms.dp_vi import sample_units, statistic_grid, unit_bound
from fdptm.mechanisms.set_union import WEIGHT_GRID
from fdptm.privacy import quantile
from fdptm.privacy.noise import (
    EXACT_GRID_LAPLACE,
    EXACT_INTEGER_GAUSSIAN,
    EXACT_INTEGER_LAPLACE,
    NUMPY_GAUSSIAN,
    NUMPY_GRID_LAPLACE,
    NUMPY_LAPLACE,
    NUMPY_QUANTILE,
    OPENDP_GAUSSIAN,
    OPENDP_GRID_LAPLACE,
    OPENDP_INTEGER_GAUSSIAN,
    OPENDP_INTEGER_LAPLACE,
    OPENDP_LAPLACE,
    OPENDP_ROUNDED_GAUSSIAN,
    OPENDP_ROUNDED_LAPLACE,
    NoiseSource,
)

TEST_ALPHA = 1e-4
"""Largest probability that a test fails when production and seeded laws are equal."""
LAW_SLACK = 1e-6
"""Largest CDF difference between the two sides' laws by design (module docstring)."""


# --- the checks ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Law:
    """The seeded sampler's law: a continuous scipy distribution, or finitely many values."""

    continuous: Any = None
    support: np.ndarray | None = None
    pmf: np.ndarray | None = None
    centre: float = 0.0

    def ecdf_distance(self, sample: np.ndarray) -> float:
        """sup |F_sample - F| (exact: at the sample's points, or over the support)."""
        if self.continuous is not None:
            return float(stats.kstest(sample, self.continuous.cdf).statistic)
        ecdf = np.searchsorted(np.sort(sample), self.support, side="right") / len(sample)
        return float(np.abs(ecdf - np.cumsum(self.pmf)).max())

    def folded_moments(self, ref_distances: np.ndarray) -> tuple[float, float]:
        """Mean and variance of h(|Y - c|) for Y ~ F, h the mid-rank ECDF of the sorted
        ``ref_distances`` (exact for a finite law; for a continuous one ties have
        probability 0, and h = k / m between the k-th and (k+1)-th reference distance)."""
        m = len(ref_distances)
        if self.continuous is not None:
            law, c = self.continuous, self.centre
            g = law.cdf(c + ref_distances) - law.cdf(c - ref_distances)
            mass = np.diff(np.concatenate([[0.0], g, [1.0]]))
            level = np.arange(m + 1) / m
        else:
            distances = np.abs(self.support - self.centre)
            level = mid_rank_ecdf(ref_distances, distances)
            mass = self.pmf
        mean = float(np.sum(mass * level))
        return mean, float(max(np.sum(mass * level**2) - mean**2, 0.0))


def mid_rank_ecdf(sorted_ref: np.ndarray, points: np.ndarray) -> np.ndarray:
    """(#{ref < p} + #{ref = p} / 2) / m at every point p."""
    left = np.searchsorted(sorted_ref, points, side="left")
    right = np.searchsorted(sorted_ref, points, side="right")
    return (left + right) / (2.0 * len(sorted_ref))


def bernstein_threshold(n: int, variance: float, alpha: float) -> float:
    """t with 2 exp(-n t^2 / (2 v + 2 t / 3)) = alpha, for a mean of n values in [0, 1]."""
    log_term = math.log(2.0 / alpha)
    b = 2.0 * log_term / 3.0
    return (b + math.sqrt(b * b + 8.0 * n * log_term * variance)) / (2.0 * n)


def ks_check(prod: np.ndarray, ref: np.ndarray, law: Law, alpha: float) -> str | None:
    """None if the KS distance is within its DKW bound, else a description of the failure."""
    found = stats.ks_2samp(prod, ref)
    bound = law.ecdf_distance(ref) + math.sqrt(math.log(2.0 / alpha) / (2 * len(prod)))
    if found.statistic <= bound + LAW_SLACK:
        return None
    return f"KS distance {found.statistic:.5f} > {bound:.5f} (scipy p = {found.pvalue:.2g})"


def scale_check(prod: np.ndarray, ref: np.ndarray, law: Law, alpha: float) -> str | None:
    """None if the Mann-Whitney statistic of |x - c| is within its Bernstein bound."""
    ref_dist = np.sort(np.abs(ref - law.centre))
    prod_dist = np.abs(prod - law.centre)
    s = float(mid_rank_ecdf(ref_dist, prod_dist).mean())
    mean, variance = law.folded_moments(ref_dist)
    t = bernstein_threshold(len(prod), variance, alpha) + 4 * LAW_SLACK
    if abs(s - mean) <= t:
        return None
    ratio = prod_dist.mean() / ref_dist.mean()
    pvalue = stats.mannwhitneyu(prod_dist, ref_dist).pvalue
    return (
        f"scale: U / nm = {s:.5f}, expected {mean:.5f} +- {t:.5f} (mean |x - c| ratio "
        f"{ratio:.4f}, scipy Mann-Whitney p = {pvalue:.2g})"
    )


def assert_same_law(pairs: list[tuple[np.ndarray, np.ndarray, Law, bool]]) -> None:
    """KS (and, where the flag says so, scale) checks of (production, reference, law)
    pairs, TEST_ALPHA split evenly over all of them."""
    checks = sum(1 + int(scaled) for *_, scaled in pairs)
    alpha = TEST_ALPHA / checks
    failures = []
    for prod, ref, law, scaled in pairs:
        assert len(ref) >= 5 * len(prod)
        failures.append(ks_check(prod, ref, law, alpha))
        if scaled:
            failures.append(scale_check(prod, ref, law, alpha))
    assert not any(failures), "; ".join(f for f in failures if f)


# --- additive noise -----------------------------------------------------------------------

N_NOISE = 40_000
M_NOISE = 400_000
M1_SCALE = 2.0 / 3.0  # DP set union's Laplace(1 / epsilon) at M1's epsilon 1.5 (PHEME, eps 3)
SIGMA = 0.7
CLIP = 2.0  # dp-vi's default C; its integer statistic is noised at z C / g in grid units g
DP_VI_SCALE = 28.898781223087017 * CLIP / statistic_grid(CLIP)  # z of PHEME at eps 3, T 100
GRID_SCALE = 2.0
M1_UNITS_SCALE = M1_SCALE * WEIGHT_GRID  # M1's integer policies: 1/eps in grid units


def floats(size: int, seed: int) -> np.ndarray:
    """Inputs that are not on any coarse grid (OpenDP adds noise to the exact input)."""
    return np.random.default_rng(seed).uniform(-50.0, 50.0, size)


def integers(size: int, seed: int) -> np.ndarray:
    """Integer sums of the size dp-vi's statistic reaches (counts x 2^20)."""
    return np.random.default_rng(seed).integers(0, 2**40, size)


@dataclass(frozen=True)
class NoiseCase:
    draw: Callable[[NoiseSource, int], np.ndarray]
    """The noise a source adds (output minus input) to ``size`` inputs."""
    law: Law
    samplers: tuple[str, str]
    """What ``NoiseSource.draws`` records: (production, seeded)."""
    sampler: str = "opendp"
    """The production source's sampler (``NoiseSource.create(None, sampler=...)``)."""


def _added(method: str, inputs: Callable, *args: float) -> Callable:
    def draw(source: NoiseSource, size: int) -> np.ndarray:
        x = inputs(size, size)
        return getattr(source, method)(x, *args) - x

    return draw


NOISE_CASES = {
    "laplace": NoiseCase(
        _added("add_laplace", floats, M1_SCALE),
        Law(stats.laplace(scale=M1_SCALE)),
        (OPENDP_LAPLACE, NUMPY_LAPLACE),
    ),
    "laplace-with-sensitivity": NoiseCase(
        _added("add_laplace", floats, 2.5, 1.0),
        Law(stats.laplace(scale=2.5)),
        (OPENDP_ROUNDED_LAPLACE, NUMPY_LAPLACE),
    ),
    "gaussian": NoiseCase(
        _added("add_gaussian", floats, SIGMA),
        Law(stats.norm(scale=SIGMA)),
        (OPENDP_GAUSSIAN, NUMPY_GAUSSIAN),
    ),
    "gaussian-with-sensitivity": NoiseCase(
        _added("add_gaussian", floats, SIGMA, 1.0),
        Law(stats.norm(scale=SIGMA)),
        (OPENDP_ROUNDED_GAUSSIAN, NUMPY_GAUSSIAN),
    ),
    "integer-gaussian": NoiseCase(
        _added("add_integer_gaussian", integers, DP_VI_SCALE, unit_bound(CLIP)),
        Law(stats.norm(scale=DP_VI_SCALE)),
        (OPENDP_INTEGER_GAUSSIAN, NUMPY_GAUSSIAN),
    ),
    "grid-laplace": NoiseCase(
        lambda source, size: source.grid_laplace(GRID_SCALE, size),
        Law(stats.laplace(scale=GRID_SCALE)),
        (OPENDP_GRID_LAPLACE, NUMPY_GRID_LAPLACE),
    ),
    "integer-gaussian-exact": NoiseCase(
        _added("add_integer_gaussian", integers, DP_VI_SCALE, unit_bound(CLIP)),
        Law(stats.norm(scale=DP_VI_SCALE)),
        (EXACT_INTEGER_GAUSSIAN, NUMPY_GAUSSIAN),
        "exact",
    ),
    "grid-laplace-exact": NoiseCase(
        lambda source, size: source.grid_laplace(GRID_SCALE, size),
        Law(stats.laplace(scale=GRID_SCALE)),
        (EXACT_GRID_LAPLACE, NUMPY_GRID_LAPLACE),
        "exact",
    ),
    "integer-laplace": NoiseCase(
        _added("add_integer_laplace", integers, M1_UNITS_SCALE, WEIGHT_GRID),
        Law(stats.laplace(scale=M1_UNITS_SCALE)),
        (OPENDP_INTEGER_LAPLACE, NUMPY_LAPLACE),
    ),
    "integer-laplace-exact": NoiseCase(
        _added("add_integer_laplace", integers, M1_UNITS_SCALE, WEIGHT_GRID),
        Law(stats.laplace(scale=M1_UNITS_SCALE)),
        (EXACT_INTEGER_LAPLACE, NUMPY_LAPLACE),
        "exact",
    ),
}


@pytest.mark.parametrize("name", list(NOISE_CASES))
def test_opendp_noise_has_the_seeded_noise_distribution(name):
    """OpenDP's sampler or fdptm's exact one (production) against numpy's (seeded, seed fixed
    per case): KS and scale checks of the noise added; power and false-failure bound in the
    module docstring."""
    case = NOISE_CASES[name]
    production = NoiseSource.create(None, sampler=case.sampler)
    seeded = NoiseSource.create(2800 + list(NOISE_CASES).index(name))
    prod = case.draw(production, N_NOISE)
    ref = case.draw(seeded, M_NOISE)
    assert production.draws == {case.samplers[0]: N_NOISE}
    assert seeded.draws == {case.samplers[1]: M_NOISE}
    assert_same_law([(prod, ref, case.law, True)])


# --- the private quantile (dp-vi's clip="private") ----------------------------------------

N_QUANTILE = 20_000
M_QUANTILE = 200_000
Q_VALUES = np.arange(30.0)
Q_CANDIDATES = np.arange(31.0) - 0.5  # scores |j - 14|: two candidates per score but 0
Q_ALPHA, Q_SCALE = 0.5, 0.5  # dp-vi's default quantile; P(score s) ~ exp(-2 s)
Q_SEED = 2811


def quantile_law() -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's score and exact probability under the exponential mechanism."""
    scores = quantile.scores(Q_VALUES, Q_CANDIDATES, Q_ALPHA)
    weights = np.exp(-(scores - scores.min()) / Q_SCALE)
    return scores, weights / weights.sum()


def seeded_quantiles(size: int) -> np.ndarray:
    """``size`` draws of ``NoiseSource.create(Q_SEED).private_quantile``, vectorised: the
    same Gumbel draws in the same order as successive calls (checked on a prefix)."""
    rho = quantile.rho(Q_ALPHA, Q_SCALE)
    one_by_one = NoiseSource.create(Q_SEED)
    prefix = [
        one_by_one.private_quantile(Q_VALUES, Q_CANDIDATES, Q_ALPHA, Q_SCALE, rho)
        for _ in range(200)
    ]
    assert one_by_one.draws == {NUMPY_QUANTILE: 200}
    gen = NoiseSource.create(Q_SEED).generator
    scores = quantile.scores(Q_VALUES, Q_CANDIDATES, Q_ALPHA)
    out = np.empty(size)
    for start in range(0, size, 50_000):
        stop = min(size, start + 50_000)
        gumbel = gen.gumbel(0.0, Q_SCALE, (stop - start, len(Q_CANDIDATES)))
        out[start:stop] = Q_CANDIDATES[np.argmax(-scores + gumbel, axis=1)]
    np.testing.assert_array_equal(out[:200], prefix)
    return out


def test_opendp_private_quantile_has_the_seeded_distribution(monkeypatch):
    """OpenDP's ``make_private_quantile`` (production) against numpy's Gumbel exponential
    mechanism (seeded): KS over the candidates, and the scale check on the chosen
    candidate's score (the exponential mechanism's scale spreads the output over scores).

    A secure ``private_quantile`` builds its measurement with ``opendp_quantile_measurement``
    on every call (about 40 ms), so the production sample comes from that measurement built
    once, after checking that ``private_quantile`` builds exactly it and returns its output."""
    built = []
    measure = quantile.opendp_quantile_measurement

    def spy(candidates, alpha, scale):
        built.append((list(candidates), alpha, scale))
        return measure(candidates, alpha, scale)

    monkeypatch.setattr(quantile, "opendp_quantile_measurement", spy)
    production = NoiseSource.create(None)
    rho = quantile.rho(Q_ALPHA, Q_SCALE)
    first = production.private_quantile(Q_VALUES, Q_CANDIDATES, Q_ALPHA, Q_SCALE, rho)
    assert built == [(list(Q_CANDIDATES), Q_ALPHA, Q_SCALE)] and first in Q_CANDIDATES
    measurement = measure(Q_CANDIDATES, Q_ALPHA, Q_SCALE)
    values = Q_VALUES.tolist()
    prod = np.array([measurement(values) for _ in range(N_QUANTILE)], dtype=np.float64)
    ref = seeded_quantiles(M_QUANTILE)

    scores, pmf = quantile_law()
    by_candidate = Law(support=Q_CANDIDATES, pmf=pmf)
    levels = np.unique(scores)
    by_score = Law(support=levels, pmf=np.array([pmf[scores == s].sum() for s in levels]))
    score_of = dict(zip(Q_CANDIDATES, scores, strict=True))
    prod_scores = np.array([score_of[c] for c in prod])
    ref_scores = np.array([score_of[c] for c in ref])
    assert_same_law([(prod, ref, by_candidate, False), (prod_scores, ref_scores, by_score, True)])


# --- the generator: ChaCha20 (production) against PCG64 (seeded) --------------------------


def mahonian(n: int) -> np.ndarray:
    """P(a uniformly random permutation of n items has k inversions), k = 0 .. n(n-1)/2."""
    counts = np.ones(1)
    for i in range(1, n + 1):
        counts = np.convolve(counts, np.ones(i))
    return counts / counts.sum()


def uniform_law(k: int) -> Law:
    return Law(support=np.arange(float(k)), pmf=np.full(k, 1.0 / k), centre=(k - 1) / 2)


PERMUTED = 10
BINOMIAL_UNITS, BINOMIAL_RATE = 40, 0.3


def _uniforms(gen: np.random.Generator, size: int) -> list[np.ndarray]:
    out = np.empty(size)  # Gibbs sweeps draw their uniforms this way (lda, noisy_cgs)
    gen.random(out=out)
    return [out]


def _poisson_sampled(gen: np.random.Generator, size: int) -> list[np.ndarray]:
    """Units dp-vi's Poisson sampling includes per call (Binomial(units, rate))."""
    return [
        np.array(
            [sample_units(gen, BINOMIAL_UNITS, BINOMIAL_RATE).sum() for _ in range(size)],
            dtype=np.float64,
        )
    ]


def _permutations(gen: np.random.Generator, size: int) -> list[np.ndarray]:
    """Where item 0 lands, and the inversions, of ``size`` permutations (set union's
    visiting order and tie-breaks)."""
    perms = np.array([gen.permutation(PERMUTED) for _ in range(size)])
    upper = np.triu_indices(PERMUTED, 1)
    inversions = (perms[:, upper[0]] > perms[:, upper[1]]).sum(axis=1)
    return [np.argmax(perms == 0, axis=1).astype(np.float64), inversions.astype(np.float64)]


@dataclass(frozen=True)
class GeneratorCase:
    draw: Callable[[np.random.Generator, int], list[np.ndarray]]
    laws: list[tuple[Law, bool]]
    """One (law, scale check?) per statistic ``draw`` returns."""
    n: int
    m: int


GENERATOR_CASES = {
    "uniforms": GeneratorCase(
        _uniforms, [(Law(stats.uniform(), centre=0.5), True)], 500_000, 2_500_000
    ),
    "gamma-initialisation": GeneratorCase(  # dp-vi's initial lambda
        lambda gen, size: [gen.gamma(100.0, 1.0 / 100.0, size)],
        [(Law(stats.gamma(100.0, scale=0.01), centre=1.0), True)],
        200_000,
        1_000_000,
    ),
    "standard-normal": GeneratorCase(  # spectral's starting vectors
        lambda gen, size: [gen.standard_normal(size)],
        [(Law(stats.norm()), True)],
        200_000,
        1_000_000,
    ),
    "integers": GeneratorCase(  # Gibbs samplers' initial topics, topicdp's resampling
        lambda gen, size: [gen.integers(0, 5, size).astype(np.float64)],
        [(uniform_law(5), True)],
        200_000,
        1_000_000,
    ),
    "poisson-sampling": GeneratorCase(
        _poisson_sampled,
        [
            (
                Law(
                    support=np.arange(BINOMIAL_UNITS + 1.0),
                    pmf=stats.binom(BINOMIAL_UNITS, BINOMIAL_RATE).pmf(
                        np.arange(BINOMIAL_UNITS + 1)
                    ),
                    centre=BINOMIAL_UNITS * BINOMIAL_RATE,
                ),
                True,
            )
        ],
        20_000,
        100_000,
    ),
    "permutations": GeneratorCase(
        _permutations,
        [
            (uniform_law(PERMUTED), True),
            (
                Law(
                    support=np.arange(PERMUTED * (PERMUTED - 1) // 2 + 1.0),
                    pmf=mahonian(PERMUTED),
                    centre=PERMUTED * (PERMUTED - 1) / 4,
                ),
                True,
            ),
        ],
        20_000,
        100_000,
    ),
}


@pytest.mark.parametrize("name", list(GENERATOR_CASES))
def test_chacha_generator_has_the_seeded_generators_distribution(name):
    """``create(None).generator`` (numpy over ChaCha20) against ``create(seed).generator``
    (numpy over PCG64), for each way the mechanisms use it."""
    case = GENERATOR_CASES[name]
    production = NoiseSource.create(None)
    seeded = NoiseSource.create(2900 + list(GENERATOR_CASES).index(name))
    assert production.secure and not production.seeded and seeded.seeded
    prod = case.draw(production.generator, case.n)
    ref = case.draw(seeded.generator, case.m)
    assert_same_law(
        [(p, r, law, scaled) for p, r, (law, scaled) in zip(prod, ref, case.laws, strict=True)]
    )
