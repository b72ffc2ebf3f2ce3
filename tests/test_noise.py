"""The noise sources: OpenDP + CSPRNG when unseeded, reproducible numpy when seeded.

OpenDP's draws cannot be seeded, so every statistical test here has a significance level
of ALPHA = 1e-6 and a tolerance derived from the distribution (never tuned on outcomes):
a correct sampler fails one of them about once in a million runs.
"""

from __future__ import annotations

import math
from importlib.metadata import version

import numpy as np
import pytest
import randomgen
from scipy import stats

from fdptm.evaluation.synthetic import generate_lda
from fdptm.mechanisms.dp_vi import statistic_grid, unit_bound
from fdptm.mechanisms.lda import COUNT_SENSITIVITY
from fdptm.mechanisms.registry import MECHANISMS, mechanism
from fdptm.mechanisms.set_union import author_items, select, set_union_params
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import (
    EXACT_GRID_LAPLACE,
    EXACT_INTEGER_GAUSSIAN,
    EXACT_INTEGER_LAPLACE,
    GRID_EXPONENT,
    NUMPY_GAUSSIAN,
    NUMPY_LAPLACE,
    OPENDP_GAUSSIAN,
    OPENDP_GRID_LAPLACE,
    OPENDP_INTEGER_GAUSSIAN,
    OPENDP_INTEGER_LAPLACE,
    OPENDP_LAPLACE,
    OPENDP_QUANTILE,
    OPENDP_ROUNDED_GAUSSIAN,
    OPENDP_ROUNDED_LAPLACE,
    ROUNDING_EXPONENT,
    SAFE_SAMPLERS,
    NoiseSource,
    opendp_measurement,
    rounded_scale,
)

ALPHA = 1e-6
N_DRAWS = 50_000


# --- the secure path's distributions ----------------------------------------------------


def test_opendp_laplace_has_the_stated_scale():
    """Residuals y - x of OpenDP's Laplace on non-zero inputs against scipy's Laplace(b).

    A 15% larger scale moves the CDF by 0.026 somewhere (at x = 1.07 b), more than the
    rejection bound (sqrt(ln(2 / ALPHA) / (2 n)) = 0.012 at n = 50,000, the DKW bound)
    plus 8 standard deviations of the empirical CDF there, so the wrong scale is rejected
    except with negligible probability.
    """
    noise = NoiseSource.create(None)
    b = 2.5
    x = np.random.default_rng(0).uniform(-100, 100, N_DRAWS)
    residual = noise.add_laplace(x, b) - x
    assert stats.kstest(residual, stats.laplace(scale=b).cdf).pvalue > ALPHA
    assert stats.kstest(residual, stats.laplace(scale=1.15 * b).cdf).pvalue < ALPHA
    assert noise.draws == {OPENDP_LAPLACE: N_DRAWS}


def test_opendp_gaussian_has_the_stated_sigma():
    """As above for N(0, sigma^2): 15% off moves the CDF by 0.034 at x = 1.07 sigma (13
    standard deviations beyond the rejection bound)."""
    noise = NoiseSource.create(None)
    sigma = 0.7
    x = np.random.default_rng(1).uniform(-10, 10, (N_DRAWS // 50, 50))
    residual = (noise.add_gaussian(x, sigma) - x).ravel()
    assert stats.kstest(residual, stats.norm(scale=sigma).cdf).pvalue > ALPHA
    assert stats.kstest(residual, stats.norm(scale=1.15 * sigma).cdf).pvalue < ALPHA
    assert noise.draws == {OPENDP_GAUSSIAN: N_DRAWS}


@pytest.mark.parametrize("sampler", ["exact", "opendp"])
def test_grid_laplace_lies_on_its_grid_with_the_stated_scale(sampler):
    """The discrete Laplace on 2^-20 (OpenDP's, or fdptm's exact one): every draw is an exact
    multiple of the grid, so an integer count plus a draw is an exact f64 sum (what the
    count-based baselines rely on), and at a scale of 3 (3 million grid steps) it is
    Laplace(3) to within the KS bound."""
    noise = NoiseSource.create(None, sampler=sampler)
    draws = noise.grid_laplace(3.0, (N_DRAWS,))
    steps = draws * 2.0**-GRID_EXPONENT
    assert np.array_equal(steps, np.round(steps))
    counts = np.random.default_rng(2).integers(0, 2**31, N_DRAWS)
    exact = counts * 2**-GRID_EXPONENT + steps.astype(np.int64)  # integers below 2^52
    assert np.array_equal((counts + draws) * 2.0**-GRID_EXPONENT, exact)
    assert stats.kstest(draws, stats.laplace(scale=3.0).cdf).pvalue > ALPHA
    used = EXACT_GRID_LAPLACE if sampler == "exact" else OPENDP_GRID_LAPLACE
    assert noise.draws == {used: N_DRAWS}


def test_opendp_measurements_do_not_round_the_input():
    """The exact samplers' privacy maps equal the mechanisms' at the true sensitivity: OpenDP
    rounds no input (granularity 2^-1074), so the sensitivity our accountants use holds for
    what OpenDP actually noises; the released value is the exact sum rounded once."""
    assert opendp_measurement(OPENDP_LAPLACE, 4.0, 10).map(2.0) == 0.5
    assert opendp_measurement(OPENDP_GAUSSIAN, 2.0, 10).map(1.0) == 1.0 / 8.0
    # the grid sampler's map charges rounding that zeros never incur: it is only ever fed 0
    assert opendp_measurement(OPENDP_GRID_LAPLACE, 4.0, 10).map(2.0) > 0.5
    tiny = opendp_measurement(OPENDP_GAUSSIAN, 2.0**-1070, 64)(np.zeros(64))
    grid_steps = np.array(tiny) / 2.0**-1074  # draws in units of the smallest subnormal
    assert np.array_equal(grid_steps, np.round(grid_steps)) and np.abs(grid_steps).max() > 1


@pytest.mark.parametrize(
    ("sampler", "scale", "sensitivity", "size"),
    [
        (OPENDP_ROUNDED_GAUSSIAN, 0.7, 1.0, 10),
        (OPENDP_ROUNDED_GAUSSIAN, 3.0, 0.01, 1_000_000),
        (OPENDP_ROUNDED_LAPLACE, 2.5, 2.0, 10),
        (OPENDP_ROUNDED_LAPLACE, 2.5, 2.0, 1_000_000),
    ],
)
def test_rounded_scale_keeps_the_stated_loss(sampler, scale, sensitivity, size):
    """OpenDP's own privacy map of the rounded sampler at the enlarged scale is at most the
    loss the mechanism accounted for (rho = s^2 / (2 sigma^2), or epsilon = s / b); at the
    unenlarged scale it is more (the rounding is charged), and the enlargement is the
    rounding's reach over the sensitivity (under 10^-6 even at a million entries)."""
    gaussian = sampler == OPENDP_ROUNDED_GAUSSIAN
    promised = sensitivity**2 / (2 * scale**2) if gaussian else sensitivity / scale
    enlarged = rounded_scale(sampler, scale, sensitivity, size)
    assert opendp_measurement(sampler, enlarged, size).map(sensitivity) <= promised
    assert opendp_measurement(sampler, scale, size).map(sensitivity) > promised
    reach = 2.0**ROUNDING_EXPONENT * (math.sqrt(size) if gaussian else size)
    assert enlarged / scale == pytest.approx(1 + reach / sensitivity, rel=1e-8)
    assert enlarged / scale < 1 + 1e-6


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_rounded_samplers_lie_on_their_grid_with_the_stated_scale(kind):
    """Given the sensitivity, a secure source draws from the rounded sampler: inputs on the
    grid 2^ROUNDING_EXPONENT come back on it (an exact sum on the grid), and the residuals
    have the stated scale (KS at ALPHA, as for the exact samplers above; the enlargement is
    far below what the test can see)."""
    noise = NoiseSource.create(None)
    grid = 2.0**ROUNDING_EXPONENT
    x = np.random.default_rng(3).integers(-1000, 1000, N_DRAWS) * grid * 7
    if kind == "laplace":
        y, law = noise.add_laplace(x, 2.5, 2.0), stats.laplace(scale=2.5)
        sampler = OPENDP_ROUNDED_LAPLACE
    else:
        y, law = noise.add_gaussian(x, 0.7, 1.0), stats.norm(scale=0.7)
        sampler = OPENDP_ROUNDED_GAUSSIAN
    steps = y / grid
    assert np.array_equal(steps, np.round(steps))
    assert stats.kstest(y - x, law.cdf).pvalue > ALPHA
    assert noise.draws == {sampler: N_DRAWS}
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="sensitivity"):
            noise.add_gaussian(x[:3], 0.7, bad)
    (call,) = noise.rounded
    assert_rounded_call_keeps_its_promise(call)


@pytest.mark.parametrize("sampler", ["exact", "opendp"])
def test_integer_gaussian_adds_integers_of_the_stated_scale_to_exact_sums(sampler):
    """The integer sampler (dp-vi's statistic): input integers come back as integers, the
    residuals are Gaussian at the stated scale (KS at ALPHA against N(0, 4000^2): at the
    integers the discrete Gaussian's CDF and the normal's differ by about half the pmf,
    below 5e-5 at scale 4,000, far under the KS critical value at N_DRAWS, about 0.012; at
    scale 40 that gap, 0.005, failed correct runs: 1 in 400 simulated with rounded normal
    draws, and one CI run on 2026-11-30), OpenDP's map
    at the stated sensitivity keeps the promised rho, and OpenDP's integer measurement
    returns exact integers even beyond 2^53 (the sum is exact before the conversion to
    f64). Float input is refused (it would not be an exact sum). The same for fdptm's exact
    sampler, whose scale is used exactly (tests/test_exact_noise.py checks its pmf)."""
    noise = NoiseSource.create(None, sampler=sampler)
    x = np.random.default_rng(4).integers(-(10**6), 10**6, N_DRAWS)
    y = noise.add_integer_gaussian(x, 4000.0, 30)
    assert y.dtype == np.float64 and np.array_equal(y, np.round(y))
    assert stats.kstest(y - x, stats.norm(scale=4000.0).cdf).pvalue > ALPHA
    used = EXACT_INTEGER_GAUSSIAN if sampler == "exact" else OPENDP_INTEGER_GAUSSIAN
    assert noise.draws == {used: N_DRAWS}
    (call,) = noise.rounded
    assert (call["sensitivity"], call["scale"], call["size"]) == (30, 4000.0, N_DRAWS)
    assert_rounded_call_keeps_its_promise(call)
    odd = 2**60 + 1  # not a float64
    big = opendp_measurement(OPENDP_INTEGER_GAUSSIAN, 1.0, 0)(np.full(4, odd, dtype=np.int64))
    assert all(isinstance(v, int) and abs(v - odd) < 100 for v in big)
    with pytest.raises(TypeError, match="int64"):
        noise.add_integer_gaussian(np.ones(3), 1.0, 1)
    seeded = NoiseSource.create(5).add_integer_gaussian(np.zeros(N_DRAWS, np.int64), 2.0, 1)
    assert stats.kstest(seeded, stats.norm(scale=2.0).cdf).pvalue > ALPHA


@pytest.mark.parametrize("sampler", ["exact", "opendp"])
def test_integer_laplace_adds_integers_of_the_stated_scale_to_exact_sums(sampler):
    """The integer Laplace (DP set union's histograms): integers come back as integers,
    the residuals are Laplace at the stated scale (KS at ALPHA; the discrete Laplace of
    scale 4,000 is within about 1/16,000 of Laplace(4000) in CDF at the integers, far below
    the KS critical value at N_DRAWS, about 0.012), the promised epsilon holds (OpenDP's map, or
    the exact sampler's scale one ulp up), and float input is refused."""
    noise = NoiseSource.create(None, sampler=sampler)
    x = np.random.default_rng(5).integers(-(10**6), 10**6, N_DRAWS)
    y = noise.add_integer_laplace(x, 4000.0, 3)
    assert y.dtype == np.float64 and np.array_equal(y, np.round(y))
    assert stats.kstest(y - x, stats.laplace(scale=4000.0).cdf).pvalue > ALPHA
    used = EXACT_INTEGER_LAPLACE if sampler == "exact" else OPENDP_INTEGER_LAPLACE
    assert noise.draws == {used: N_DRAWS}
    (call,) = noise.rounded
    assert (call["sensitivity"], call["scale"], call["size"]) == (3, 4000.0, N_DRAWS)
    assert_rounded_call_keeps_its_promise(call)
    with pytest.raises(TypeError, match="int64"):
        noise.add_integer_laplace(np.ones(3), 1.0, 1)
    seeded = NoiseSource.create(5).add_integer_laplace(np.zeros(N_DRAWS, np.int64), 2.0, 1)
    assert stats.kstest(seeded, stats.laplace(scale=2.0).cdf).pvalue > ALPHA


def assert_rounded_call_keeps_its_promise(call: dict) -> None:
    """OpenDP's map of the measurement a rounded draw actually used, at the stated
    sensitivity, is at most the loss promised at the scale asked for; fdptm's exact sampler
    draws at exactly the scale asked for (its rho is CKS Theorem 14's at that scale)."""
    s, scale = call["sensitivity"], call["scale"]
    if call["sampler"] in (EXACT_INTEGER_GAUSSIAN, EXACT_INTEGER_LAPLACE):
        assert call["used"] == math.nextafter(scale, math.inf)
        return
    gaussian = call["sampler"] in (OPENDP_ROUNDED_GAUSSIAN, OPENDP_INTEGER_GAUSSIAN)
    promised = s**2 / (2 * scale**2) if gaussian else s / scale
    measurement = opendp_measurement(call["sampler"], call["used"], call["size"])
    assert measurement.map(s) <= promised


def test_large_vectors_keep_their_order_across_worker_chunks():
    noise = NoiseSource.create(None)
    x = np.arange(200_000, dtype=np.float64).reshape(400, 500) * 1000.0
    y = noise.add_laplace(x, 1e-3)  # P(|Laplace(1e-3)| > 1) = e^-1000
    assert y.shape == x.shape and np.abs(y - x).max() < 1.0


def test_secure_source_refuses_what_would_release_true_values():
    noise = NoiseSource.create(None)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            noise.add_gaussian(np.ones(3), bad)
    for source in (noise, NoiseSource.create(1)):
        with pytest.raises(ValueError, match="finite"):
            source.add_laplace(np.array([1.0, math.nan]), 1.0)
        with pytest.raises(ValueError, match="finite"):
            source.add_laplace(np.array([math.inf]), 1.0)
    np.testing.assert_array_equal(NoiseSource.create(1).add_gaussian(np.ones(3), 0.0), 1.0)
    with pytest.raises(ValueError, match="cannot be secure"):
        NoiseSource(np.random.default_rng(0), seeded=True, secure=True)


# --- which source is which ---------------------------------------------------------------


def test_unseeded_source_is_opendp_and_chacha():
    a, b = NoiseSource.create(None), NoiseSource.create(None, 5)
    for source in (a, b):
        assert source.secure and not source.seeded
        bits = source.generator.bit_generator
        assert isinstance(bits, randomgen.ChaCha) and bits.state["state"]["rounds"] == 20
    assert not np.array_equal(a.generator.random(8), b.generator.random(8))
    d = a.describe()
    assert a.sampler == "exact"  # the default, after the review of fdptm.privacy.exact
    assert d["floating_point_safe"] is True
    assert d["sampler"] == f"fdptm exact samplers and OpenDP {version('opendp')}, unseeded"
    assert OPENDP_LAPLACE in d["laplace"] and OPENDP_GAUSSIAN in d["gaussian"]
    assert EXACT_INTEGER_GAUSSIAN in d["integer_gaussian"]
    assert EXACT_INTEGER_LAPLACE in d["integer_laplace"]
    assert "ChaCha20" in d["noise_randomness"] and "OpenSSL" in d["noise_randomness"]
    reference = NoiseSource.create(None, sampler="opendp").describe()
    assert reference["sampler"].startswith(f"OpenDP {version('opendp')} ")
    assert OPENDP_INTEGER_GAUSSIAN in reference["integer_gaussian"]
    assert OPENDP_INTEGER_LAPLACE in reference["integer_laplace"]
    assert "ChaCha (20 rounds)" in d["other_randomness"] and "os.urandom" in d["other_randomness"]


def test_seeded_source_is_numpy_and_reproducible():
    def run(source):
        return (
            source.add_laplace(np.arange(6.0), 2.0),
            source.add_gaussian(np.ones((2, 3)), 0.5),
            source.grid_laplace(1.0, 4),
            source.generator.random(3),
        )

    first, again = run(NoiseSource.create(7, 3)), run(NoiseSource.create(7, 3))
    other = run(NoiseSource.create(7, 4))
    internal = run(NoiseSource.internal(7, 3))
    for a, b, c, d in zip(first, again, other, internal, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, d)
        assert not np.array_equal(a, c)
    seeded = NoiseSource.create(7)
    seeded.add_laplace(np.zeros(3), 1.0)
    seeded.add_gaussian(np.zeros(2), 1.0)
    assert seeded.draws == {NUMPY_LAPLACE: 3, NUMPY_GAUSSIAN: 2}
    d = seeded.describe()
    assert d["sampler"] == "numpy seeded (tests only)" and d["floating_point_safe"] is False
    assert d["seeding"].startswith("fixed seed")


def test_internal_unseeded_source_is_fast_numpy_and_says_so():
    source = NoiseSource.internal(None)
    assert not source.secure and not source.seeded
    assert isinstance(source.generator.bit_generator, np.random.PCG64)
    source.add_laplace(np.zeros(4), 1.0)
    assert source.draws == {NUMPY_LAPLACE: 4}
    assert source.describe()["sampler"] == "numpy (internal, never released)"


# --- every mechanism's release goes through the safe sampler when unseeded ----------------

V, K, T, D = 25, 3, 3, 60


@pytest.fixture(scope="module")
def corpus():
    return generate_lda(D, V, K, doc_length=15, seed=1).corpus


def _expected(name: str, options: dict) -> dict[str, tuple[int, int]]:
    """Per sampler, the (least, most) number of entries the mechanism must noise.

    Ranges where Procedure 1 of spectral configs 2-4 may stop early (a data-dependent
    failure whose release is the uniform matrix)."""
    triangle, counts = V * (V + 1) // 2, (D + V) * K
    config = options.get("config")
    return {
        "hdp-lda": {OPENDP_ROUNDED_LAPLACE: ((T + 1) * V * K,) * 2},
        # the corpus's last word plays SAN's OOV id, which dp-vi leaves out (not noised)
        "dp-vi": {OPENDP_INTEGER_GAUSSIAN: (T * (V - 1) * K,) * 2},
        # once, every pair of the V - 1 words biterm trains on (SAN's OOV id left out)
        "biterm": {OPENDP_INTEGER_GAUSSIAN: ((V - 1) * V // 2,) * 2},
        "zhu": {OPENDP_GRID_LAPLACE: (counts,) * 2},
        "cdp-lda": {OPENDP_GRID_LAPLACE: (counts,) * 2},
        "cdp-lda-plus": {OPENDP_GRID_LAPLACE: (T * counts + V * K,) * 2},
        "spectral": {OPENDP_GAUSSIAN: (triangle + K**3,) * 2}
        if config is None
        else {OPENDP_GAUSSIAN: (triangle, triangle + K**3), OPENDP_LAPLACE: (2, 2)},
        "spectral-unproven": {OPENDP_GAUSSIAN: (triangle, triangle + K * K), OPENDP_LAPLACE: (1, 2)}
        if config in (None, 3)
        else {OPENDP_GAUSSIAN: (0, V * K), OPENDP_LAPLACE: (2, 3)},
        "topicdp": {OPENDP_GAUSSIAN: (K * V,) * 2},
        "topicdp-laplace": {OPENDP_LAPLACE: (K * V,) * 2},
        "topicdp-mvg": {OPENDP_GAUSSIAN: (K * V,) * 2},
    }[name]


CASES = [(name, {}) for name in MECHANISMS] + [
    ("spectral", {"config": 2}),
    ("spectral-unproven", {"config": 4}),
]


EXACT = {OPENDP_INTEGER_GAUSSIAN: EXACT_INTEGER_GAUSSIAN, OPENDP_GRID_LAPLACE: EXACT_GRID_LAPLACE}


@pytest.mark.parametrize("sampler", ["exact", "opendp"])
@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{n}{o}" for n, o in CASES])
def test_every_mechanism_releases_through_opendp_when_unseeded(corpus, name, options, sampler):
    m = mechanism(name)
    context = {
        "n_topics": K,
        "adjacency": Adjacency.DOCUMENT,
        "max_docs_per_author": 1,
        "max_tokens_per_doc": 1000,
        "iterations": T,
    }
    if name.startswith("topicdp"):
        options = {"gamma": 0.5}  # fewer sampled neighbours: the noise path is the same
    epsilon = 300.0 if name == "hdp-lda" else 2.0  # HDP-LDA's inherent loss per iteration
    params = m.params(epsilon, 1e-5, context, options)
    noise = NoiseSource.create(None, sampler=sampler)
    phi = m.train(corpus, K, params, noise)
    assert phi.shape == (K, V) and np.allclose(phi.sum(axis=1), 1.0)
    assert set(noise.draws) <= set(SAFE_SAMPLERS)
    expected = _expected(name, options)
    if sampler == "exact":
        expected = {EXACT.get(s, s): bounds for s, bounds in expected.items()}
    assert set(noise.draws) <= set(expected)
    for sampler, (least, most) in expected.items():
        assert least <= noise.draws.get(sampler, 0) <= most, (sampler, noise.draws)
    # the rounded draws state the mechanism's own sensitivity and scale, and keep the loss
    stated = {
        "hdp-lda": lambda: (COUNT_SENSITIVITY, params.laplace_scale),
        "dp-vi": lambda: (
            unit_bound(params.clip),
            params.noise_std / statistic_grid(params.clip),
        ),
        "biterm": lambda: (
            unit_bound(params.clip),
            params.noise_std / statistic_grid(params.clip),
        ),
    }
    assert bool(noise.rounded) == (name in stated)
    for call in noise.rounded:
        assert (call["sensitivity"], call["scale"]) == stated[name]()
        assert_rounded_call_keeps_its_promise(call)
        if name in ("dp-vi", "biterm"):  # at most the noise multiplier's loss, whatever the grid
            assert call["sensitivity"] / call["scale"] <= 1.0 / params.noise_multiplier


@pytest.mark.parametrize(
    ("policy", "source"),
    [
        ("weighted", "exact"),
        ("weighted", "opendp"),
        ("uniform-laplace", "exact"),
        ("uniform-laplace", "opendp"),
        ("policy-laplace", "exact"),
        ("policy-gaussian", "exact"),
    ],
)
def test_dp_set_union_noises_every_candidate_through_a_safe_sampler(policy, source):
    """Authors with fewer words than Delta0 (max_items): every item is a candidate. The
    integer policies noise their integer histogram with the exact discrete Laplace
    (fdptm's, or OpenDP's on i64) at 1/(eps g) grid units for sensitivity 1/g units; the
    others OpenDP's float samplers."""
    rng = np.random.default_rng(3)
    authors = np.repeat(np.arange(300), 4)
    items = rng.integers(0, 80, authors.size)
    table = author_items(authors, items, 80)
    noise = NoiseSource.create(None, sampler=source)
    params = set_union_params(policy, 1.0, 1e-6, max_items=10)
    select(table, params, noise)
    sampler = {
        "policy-gaussian": OPENDP_GAUSSIAN,
        "policy-laplace": OPENDP_LAPLACE,
    }.get(policy, EXACT_INTEGER_LAPLACE if source == "exact" else OPENDP_INTEGER_LAPLACE)
    assert noise.draws == {sampler: len(np.unique(items))}
    for call in noise.rounded:
        assert (call["sensitivity"], call["scale"]) == (params.grid, params.grid / 1.0)
        assert_rounded_call_keeps_its_promise(call)
    assert bool(noise.rounded) == (params.grid is not None)


def test_private_clip_and_tuning_release_through_safe_samplers_when_unseeded(corpus):
    """dp-vi's private clip draws OpenDP's quantile once; a tuned run's trials draw only
    exact Gaussians (fdptm's integer one for statistics, the default sampler; OpenDP's on
    floats for scores) and the quantile."""
    from fdptm.mechanisms.registry import tuned

    context = {
        "n_topics": K,
        "adjacency": Adjacency.DOCUMENT,
        "max_docs_per_author": 1,
        "max_tokens_per_doc": 1000,
        "iterations": T,
    }
    noise = NoiseSource.create(None)
    m = mechanism("dp-vi")
    m.train(corpus, K, m.params(2.0, 1e-5, context, {"clip": "private"}), noise)
    assert noise.draws == {OPENDP_QUANTILE: 1, EXACT_INTEGER_GAUSSIAN: T * (V - 1) * K}
    noise = NoiseSource.create(None)
    options = {"tune_iterations": "2", "tune_clips": "private", "mean_trials": 2.0}
    t = tuned("dp-vi")
    phi = t.train(corpus, K, t.params(2.0, 1e-5, context, options), noise)
    assert np.allclose(phi.sum(axis=1), 1.0)
    trials = noise.draws[OPENDP_QUANTILE]
    assert set(noise.draws) == {OPENDP_QUANTILE, EXACT_INTEGER_GAUSSIAN, OPENDP_GAUSSIAN}
    assert noise.draws[EXACT_INTEGER_GAUSSIAN] == trials * 2 * (V - 1) * K  # statistics
    assert noise.draws[OPENDP_GAUSSIAN] == trials  # scores


def test_the_opendp_samplers_import_none_of_opendps_extras():
    """``opendp.prelude`` imports OpenDP's extras (scikit-learn, polars, ...) when they are
    installed; during a release that import deadlocked against the background import of
    Great Expectations (both import narwhals: a dp-vi release with scikit-learn installed
    failed in M2). The samplers build their measurements from OpenDP's core modules."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from fdptm.privacy import noise, quantile\n"
        "for s in (noise.OPENDP_GAUSSIAN, noise.OPENDP_INTEGER_GAUSSIAN, noise.OPENDP_LAPLACE):\n"
        "    noise.opendp_measurement(s, 2.0, 3)\n"
        "import numpy as np\n"
        "quantile.opendp_quantile_measurement(np.array([0.0, 1.0]), 0.5, 1.0)\n"
        "extras = ('opendp.extras', 'sklearn', 'polars')\n"
        "extras = [m for m in sys.modules if m.startswith(extras)]\n"
        "assert not extras, extras\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
