"""The exact discrete Laplace and Gaussian samplers (fdptm.privacy.exact) against the exact pmf.

Statistical design: every goodness-of-fit test is a chi-square over bins of expected count
>= 20 at alpha = 1e-4, on seeded keystreams (deterministic) except the comparison with
OpenDP (whose draws cannot be seeded: it fails by chance with probability 1e-4). With
n = 200,000 draws and at most 60 bins, a sampler whose chi-square distance
sum (q - p)^2 / p from the pmf is 1e-3 or more is caught with power >= 0.99
(``test_the_chi_square_design_has_the_stated_power`` computes it from the noncentral
chi-square). No sampling test can see an error of 2^-40 in one coin, or in a path taken
once in 10^11 coins: exactness rests on the argument in fdptm.privacy.exact, and the tests
that can check it deterministically do (the bracket against exp to 120 digits at many
arguments, each continuation path forced and fitted to the pmf).
"""

from __future__ import annotations

import math
import os
import random
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from fdptm.kernels import exact_noise as kernel
from fdptm.privacy import exact

ALPHA = 1e-4
N = 200_000


def gaussian_pmf(sigma: float, support: np.ndarray) -> np.ndarray:
    """Exact discrete Gaussian masses on ``support`` (normalised over +-40 sigma, where the
    rest is below e^-800)."""
    reach = int(40 * sigma) + 10
    ys = np.arange(-reach, reach + 1, dtype=np.float64)
    norm = np.exp(-(ys**2) / (2 * sigma**2)).sum()
    return np.exp(-(support.astype(np.float64) ** 2) / (2 * sigma**2)) / norm


def laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    """Exact discrete Laplace masses: (1 - q) / (1 + q) q^|y|, q = exp(-1 / scale)."""
    q = math.exp(-1.0 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(support.astype(np.float64))


def chi_square_p(draws: np.ndarray, pmf, scale: float) -> float:
    """Chi-square p-value of ``draws`` against ``pmf`` over consecutive integer bins, each
    of expected count >= max(20, n / 50) (>= 20 below scale 1), the tails beyond 12 scales
    folded into the ends."""
    reach = int(12 * scale) + 3
    support = np.arange(-reach, reach + 1)
    expected = pmf(scale, support) * draws.size
    expected[0] += (draws.size - expected.sum()) / 2
    expected[-1] += (draws.size - expected.sum()) / 2
    observed = np.bincount(np.clip(draws + reach, 0, 2 * reach), minlength=support.size)
    target = max(20.0, draws.size / 50) if scale >= 1 else 20.0
    starts, total = [0], 0.0
    for i, e in enumerate(expected):
        if total >= target:
            starts.append(i)
            total = 0.0
        total += e
    if total < target and len(starts) > 1:
        starts.pop()
    exp = np.add.reduceat(expected, starts)
    obs = np.add.reduceat(observed, starts).astype(np.float64)
    assert exp.min() >= 20 and exp.size <= 60
    return stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def test_the_chi_square_design_has_the_stated_power():
    critical = stats.chi2.ppf(1 - ALPHA, 59)
    assert stats.ncx2.sf(critical, 59, N * 1e-3) >= 0.99


@pytest.mark.parametrize("sigma", [0.3, 1.0, 3.0, 10.0, 1234.5, 4.0e6 + 0.25])
def test_discrete_gaussian_matches_the_exact_pmf(sigma):
    draws, _ = exact.draw("gaussian", Fraction(sigma), N, seed=int(sigma * 8))
    if sigma > 1e5:
        # 50 bins of equal normal mass (4,000 expected each): masses from the continuous
        # normal with the continuity correction, off by O(1 / sigma^2) = 6e-14 of a bin's
        # mass (Euler-Maclaurin)
        edges = (stats.norm.ppf(np.linspace(0, 1, 51)[1:-1]) * sigma).round()
        cdf = stats.norm.cdf((np.concatenate([[-np.inf], edges, [np.inf]]) - 0.5) / sigma)
        expected = np.diff(cdf) * N
        observed = np.bincount(np.searchsorted(edges, draws, side="right"), minlength=50)
        assert expected.min() > 20
        assert stats.chisquare(observed, expected * N / expected.sum()).pvalue > ALPHA
    else:
        assert chi_square_p(draws, gaussian_pmf, sigma) > ALPHA


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(3), Fraction(2469, 2), 2.5 * 2**20])
def test_discrete_laplace_matches_the_exact_pmf(scale):
    draws = exact.discrete_laplace(scale, N, seed=7)
    if scale > 1e5:
        # 50 bins of about equal mass, each bin's exact mass from the discrete Laplace's
        # closed-form CDF: P(Y <= y) = q^-y / (1 + q) below 0, 1 - q^(y+1) / (1 + q) from 0
        q = math.exp(-1.0 / scale)
        edges = stats.laplace.ppf(np.linspace(0, 1, 51)[1:-1], scale=scale).round()
        below = np.where(edges < 0, q**-edges / (1 + q), 1 - q ** (edges + 1) / (1 + q))
        expected = np.diff(np.concatenate([[0.0], below, [1.0]])) * N
        observed = np.bincount(np.searchsorted(edges, draws, side="left"), minlength=50)
        assert expected.min() > 20
        assert stats.chisquare(observed, expected).pvalue > ALPHA
    else:
        assert chi_square_p(draws, laplace_pmf, float(scale)) > ALPHA


@pytest.mark.parametrize(("kind", "scale"), [("gaussian", 2.0), ("laplace", 2.0)])
def test_the_tails_have_the_exact_mass(kind, scale):
    """P(|Y| >= 3.5 scale) (Gaussian) or 8 scale (Laplace) from 10^6 draws, by an exact
    two-sided binomial test: a tail twice as heavy or half as heavy fails."""
    n = 1_000_000
    draws, _ = exact.draw(kind, Fraction(scale), n, seed=11)
    cut = int((3.5 if kind == "gaussian" else 8) * scale)
    reach = np.arange(-cut * 20, cut * 20 + 1)
    pmf = (gaussian_pmf if kind == "gaussian" else laplace_pmf)(scale, reach)
    tail = pmf[np.abs(reach) >= cut].sum()
    hits = int((np.abs(draws) >= cut).sum())
    assert n * tail > 20
    assert stats.binomtest(hits, n, tail).pvalue > ALPHA


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_the_exact_fallback_keeps_the_distribution(kind):
    """A bracket 2^31 times wider than production's sends thousands of comparisons to the
    exact rationals (bernoulli_exp_given), and a bracket that decides nothing sends every
    draw through CKS Algorithm 1 in Python (the exact reference, on 10,000 draws); both
    match the pmf."""
    pmf = gaussian_pmf if kind == "gaussian" else laplace_pmf
    draws, stopped = exact.draw(kind, Fraction(3), N, seed=3, margin=2.0**-9)
    assert stopped > 1000
    assert chi_square_p(draws, pmf, 3.0) > ALPHA
    draws, stopped = exact.draw(kind, Fraction(3), 10_000, seed=4, margin=4.0)
    assert stopped > 9_500
    assert chi_square_p(draws, pmf, 3.0) > ALPHA


def test_the_kernel_never_stops_at_production_margin_on_ordinary_scales():
    _, stopped = exact.draw("gaussian", Fraction(10), 300_000, seed=5)
    assert stopped == 0


@pytest.mark.parametrize(
    "x",
    [
        Fraction(0),
        Fraction(1, 7),
        Fraction(1),
        Fraction(355, 113),
        Fraction(4000001, 1000),
        Fraction(70001, 100),
    ],
)
def test_the_floating_point_bracket_contains_exp(x):
    """The kernel's bracket against exp(-x) bounded in exact rationals: a W just below the
    exact value is never rejected, one just above never accepted, one far off decided."""
    lo, hi = exact._exp_bracket(x, 80)
    scaled_lo, scaled_hi = math.floor(lo * 2**53), math.ceil(hi * 2**53)
    for w in range(max(0, scaled_lo - 3), scaled_lo):
        assert kernel.bernoulli_exp(float(x), np.uint64(w << 11), exact.MARGIN) != 0
    for w in range(scaled_hi, min(2**53, scaled_hi + 3)):
        assert kernel.bernoulli_exp(float(x), np.uint64(w << 11), exact.MARGIN) != 1
    if lo > Fraction(1, 2**40):
        below = int(lo * (1 - Fraction(1, 2**20)) * 2**53) - 1
        assert kernel.bernoulli_exp(float(x), np.uint64(below << 11), exact.MARGIN) == 1
    above = min(2**53 - 1, int(hi * (1 + Fraction(1, 2**20)) * 2**53) + 2)
    if Fraction(above, 2**53) > hi:
        assert kernel.bernoulli_exp(float(x), np.uint64(above << 11), exact.MARGIN) == 0


def _exp_decimal(x: Fraction) -> Decimal:
    """exp(-x) to 130 significant digits (the decimal module's exp, correctly rounded)."""
    with localcontext() as context:
        context.prec = 130
        return (-(Decimal(x.numerator) / Decimal(x.denominator))).exp()


def _kernel_is_right(x_float: float, exact_value: Decimal) -> bool:
    """The compiled coin at the three W intervals around exp(-x) never decides wrongly."""
    with localcontext() as context:
        context.prec = 130
        ulp = Decimal(2) ** -53
        w0 = int(exact_value / ulp)
        for w in (w0 - 1, w0, w0 + 1):
            if not 0 <= w < 2**53:
                continue
            decided = kernel.bernoulli_exp(x_float, np.uint64(w << 11), exact.MARGIN)
            if decided == 1 and (w + 1) * ulp > exact_value:
                return False
            if decided == 0 and w * ulp < exact_value:
                return False
    return True


def test_the_bracket_never_decides_wrongly_against_exp_to_130_digits():
    """Deterministic check of the kernel's error analysis at 12,000 arguments: Algorithm 2's
    U / t with t up to 2^62, Algorithm 3's acceptance argument computed as the kernel does
    for sigma from 2^-20 to 2^56, and arguments where exp(-x) is subnormal; at each, the
    W intervals around the exact exp(-x) are never decided on the wrong side."""
    rng = random.Random(1)
    cases = []
    for _ in range(5000):
        t = rng.randint(1, 2 ** rng.randint(1, 62))
        u = rng.randrange(t)
        cases.append((float(u) / float(t), Fraction(u, t)))
    for _ in range(5000):
        sigma = Fraction(2.0 ** rng.uniform(-20, 56))
        t = math.floor(sigma) + 1
        y = rng.randint(0, min(2**53 - 1, rng.choice([4, 60]) * t))
        sigma2 = float(sigma * sigma)
        gap = float(y) - sigma2 / float(t)
        cases.append((gap * gap / (2.0 * sigma2), (y - sigma * sigma / t) ** 2 / (2 * sigma**2)))
    for _ in range(2000):
        x = Fraction(rng.uniform(700, 760))
        cases.append((float(x), x))
    wrong = [x for x, exact_x in cases if not _kernel_is_right(x, _exp_decimal(exact_x))]
    assert wrong == []


@pytest.mark.parametrize("x", [Fraction(1, 3), Fraction(1), Fraction(3001, 7), Fraction(2**39)])
def test_the_rational_bracket_contains_exp(x):
    lo, hi = exact._exp_bracket(x, 200)
    value = _exp_decimal(x)
    with localcontext() as context:
        context.prec = 130
        assert Decimal(lo.numerator) / Decimal(lo.denominator) <= value
        assert value <= Decimal(hi.numerator) / Decimal(hi.denominator)
    assert hi - lo < Fraction(1, 2**190)


def test_a_coin_with_a_huge_argument_ends_at_once():
    """exp(-x) <= 2^-floor(x log2 e) settles a zero head at once, even at x = 2^39 (where
    the bracket's powers would be the whole cost)."""
    bits = exact.Bits(exact.KeyStream(2, label="test"))
    assert exact.bernoulli_exp_given(bits, 0, Fraction(2**39)) is False
    assert exact.bernoulli_exp_given(bits, 0, Fraction(300001, 10)) is False


def test_draws_that_run_out_of_keystream_finish_exactly():
    """Buffers of 3 to 8 words with a reserve of 1: draws stop at every stage of both
    algorithms for want of words and finish in exact rationals, with the exact pmf."""
    stages = {"gaussian": set(), "laplace": set()}
    rng = np.random.default_rng(0)
    for kind in stages:
        for _ in range(3000):
            out = np.zeros(4, dtype=np.int64)
            stops = np.zeros((4, 6), dtype=np.int64)
            words = rng.integers(0, 2**63, int(rng.integers(3, 9)), dtype=np.uint64)
            if kind == "gaussian":
                _, n = kernel.gaussian_block(out, 0, words, 4, 9.0, exact.MARGIN, 1, stops, 0)
            else:
                _, n = kernel.laplace_block(out, 0, words, 3, 1, exact.MARGIN, 1, stops, 0)
            stages[kind].update(stops[:n, 1].tolist())
    common = {kernel.START, kernel.STAGE_D, kernel.STAGE_GEO, kernel.STAGE_SIGN}
    assert stages["laplace"] >= common
    assert stages["gaussian"] >= common | {kernel.STAGE_C}
    for kind, pmf in (("gaussian", gaussian_pmf), ("laplace", laplace_pmf)):
        draws, stopped = exact.draw(kind, Fraction(3), 40_000, seed=12, buffer=6, reserve=1)
        assert stopped > 5_000
        assert chi_square_p(draws, pmf, 3.0) > ALPHA


def test_draws_past_the_int64_guard_finish_exactly():
    """t = 2^61 + 1 and s = 2^58 (scale about 8): every draw's geometric loop would pass
    2^62, so every one stops at the guard and finishes in Python's integers."""
    scale = Fraction(2**61 + 1, 2**58)
    draws, stopped = exact.draw("laplace", scale, 20_000, seed=13)
    assert stopped == 20_000
    assert chi_square_p(draws, laplace_pmf, float(scale)) > ALPHA


def test_the_exact_coin_given_a_head_matches_the_bracket():
    """bernoulli_exp_given decides W < exp(-x) from W's head and further bits: heads whose
    whole interval lies below (above) exp(-x) give True (False) without reading more."""
    bits = exact.Bits(exact.KeyStream(1, label="test"))
    x = Fraction(1, 3)
    p = math.exp(-1 / 3)
    assert exact.bernoulli_exp_given(bits, int(p * 2**53) - 2, x) is True
    assert exact.bernoulli_exp_given(bits, int(p * 2**53) + 2, x) is False
    straddle = math.floor(exact._exp_bracket(x, 60)[0] * 2**53)
    outcomes = {exact.bernoulli_exp_given(bits, straddle, x) for _ in range(200)}
    assert outcomes == {True, False}


@pytest.mark.parametrize(
    ("kind", "scale"), [("gaussian", 3.0), ("gaussian", 1234.5), ("laplace", 3.0)]
)
def test_the_sampler_has_opendps_distribution(kind, scale):
    """Two-sample chi-square between 60,000 OpenDP draws (make_gaussian / make_laplace on
    i64, the reference) and 60,000 of ours, bins pooled to >= 20 expected each."""
    import opendp.domains as dp
    import opendp.measurements as m
    from opendp.metrics import l1_distance, l2_distance
    from opendp.mod import enable_features

    enable_features("contrib")
    n = 60_000
    domain = dp.vector_domain(dp.atom_domain(T="i64"))
    if kind == "gaussian":
        measurement = m.make_gaussian(domain, l2_distance(T="i64"), scale=scale)
    else:
        measurement = m.make_laplace(domain, l1_distance(T="i64"), scale=scale)
    theirs = np.asarray(measurement([0] * n), dtype=np.int64)
    ours, _ = exact.draw(kind, Fraction(scale), n, seed=9)
    edges = np.quantile(np.concatenate([theirs, ours]), np.linspace(0, 1, 41)[1:-1])
    edges = np.unique(edges)
    a = np.bincount(np.searchsorted(edges, theirs, side="right"), minlength=edges.size + 1)
    b = np.bincount(np.searchsorted(edges, ours, side="right"), minlength=edges.size + 1)
    assert stats.chi2_contingency(np.vstack([a, b]))[1] > ALPHA


def test_draws_do_not_depend_on_the_thread_count(monkeypatch):
    size = 3 * exact.BLOCK + 5
    monkeypatch.setenv("FDPTM_THREADS", "1")
    one = exact.discrete_gaussian(7.5, size, seed=21)
    monkeypatch.setenv("FDPTM_THREADS", "2")
    two = exact.discrete_gaussian(7.5, size, seed=21)
    np.testing.assert_array_equal(one, two)


def test_unseeded_draws_come_from_fresh_keys():
    a = exact.discrete_gaussian(1000.0, 64)
    b = exact.discrete_gaussian(1000.0, 64)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: exact.discrete_gaussian(0.0, 3), "scales in"),
        (lambda: exact.discrete_gaussian(2.0**57, 3), r"2\^56"),
        (lambda: exact.discrete_laplace(-1.0, 3), "scales in"),
        (lambda: exact.discrete_laplace(2.0**-70, 3), "scales in"),
        (lambda: exact.discrete_laplace(Fraction(2**63 + 1, 2**20), 3), "below 2"),
    ],
)
def test_scales_out_of_range_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_forked_child_cannot_continue_the_keystream():
    stream = exact.KeyStream(None, label="noise")
    pid = os.fork()
    if pid == 0:
        try:
            stream.fill(np.empty(8, dtype=np.uint64))
        except RuntimeError:
            os._exit(0)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
