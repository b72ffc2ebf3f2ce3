"""Noise sources for the mechanisms: floating-point-safe noise from a CSPRNG, or seeded numpy.

A mechanism never draws noise and adds it itself: it hands the true values to
``add_laplace`` or ``add_gaussian`` and gets the noisy values back, so that the source
decides how the sum x + noise is formed. There are three kinds of source.

* ``NoiseSource.create(None)`` (production, every release): exact noise on the integers
  and the 2^-20 grid from fdptm's compiled sampler (``fdptm.privacy.exact``; OpenDP's with
  sampler "opendp"), and additive noise on floats from OpenDP's samplers
  (``opendp.measurements.make_laplace`` and ``make_gaussian`` on a vector of f64 with the
  default, finest granularity). OpenDP treats every float input as the exact
  rational it is, adds discrete Laplace or discrete Gaussian noise on the grid 2^-1074 (of
  which every f64 is a multiple, so the input is not rounded and the sensitivity is
  unchanged) in exact arithmetic, and rounds the exact sum once to the nearest f64. The
  released value is therefore never float(x) + float(noise), the construction Mironov's
  floating-point attack (CCS 2012) exploits: the values a floating-point sampler plus a
  rounded addition can produce have gaps whose positions depend on x, so one released
  value can rule out a neighbouring dataset.
  OpenDP's randomness comes from OpenSSL's RAND_bytes (a CSPRNG seeded by the operating
  system). The other random choices of a run that a privacy argument relies on (Poisson
  subsampling of units, DP set union's orders and subsamples, the Gibbs samplers'
  uniforms, random restarts) come from ``generator``: a numpy Generator over
  randomgen's ChaCha (20 rounds, the stream cipher of Linux's /dev/urandom) keyed with 256
  bits from ``os.urandom``, whose output cannot be predicted from earlier output.
* ``NoiseSource.create(seed)`` (tests only): numpy's PCG64 seeded from ``seed`` and its
  floating-point samplers, reproducible; anyone who knows the seed can subtract the noise,
  and the samplers are open to the floating-point attack. The manifest says which of the
  two produced a release, never the seed.
* ``NoiseSource.internal(seed)``: the same fast numpy samplers for models that are never
  released (audit shadow models, the internal comparison), from OS entropy when no seed
  is given.

The OpenDP samplers cost about 10^3 (Laplace) to 3.5 x 10^3 (Gaussian) times numpy's per
draw on one thread (benchmarks/noise_results.md), so large vectors are split into chunks
noised on one thread per usable core: the chunks are independent OpenDP measurements whose
noise is i.i.d. per entry, exactly the distribution of one call on the whole vector (the
FFI call releases the GIL).

A mechanism that states the sensitivity it calibrated for (``add_gaussian(values, sigma,
sensitivity)``: hdp-lda) gets OpenDP's samplers on the grid 2^ROUNDING_EXPONENT
instead, about 4 times cheaper: inputs are rounded to the grid, which OpenDP's map charges
as extra sensitivity, and ``rounded_scale`` enlarges the scale by exactly that much and
checks the map, so the loss stays the one the mechanism's accountant assumed.

``add_integer_gaussian`` is for a mechanism that sums its units' terms exactly as integers
(dp-vi: each unit's clipped statistic rounded towards zero on a grid, checked in integer
arithmetic, summed in int64): the exact discrete Gaussian on the integers (fdptm's, or
OpenDP's on i64) adds the noise to the exact integer sum, so neither the sum nor the noisy
value depends on floating-point rounding (a float sum of many units can round differently
when one unit is added, by more than the clip in the worst case; Casacuberta et al., CCS
2022).

``grid_laplace`` is for the count-based baselines whose noise must stay in counts that the
sampler keeps changing after the draw (zhu, cdp-lda, cdp-lda-plus): its draws are the
discrete Laplace on the grid 2^-20 (fdptm's, or OpenDP's with input 0, so nothing is
rounded), and any integer count below 2^32 plus such a draw below 2^32 is exact in f64, so
the noisy counts the sampler reads and releases are exact sums, never rounded ones.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from importlib.metadata import version
from typing import TYPE_CHECKING

import numpy as np
import randomgen

from fdptm.parallel import workers
from fdptm.privacy import quantile

if TYPE_CHECKING:
    from opendp.mod import Measurement

GRID_EXPONENT = -20
"""``grid_laplace`` draws are multiples of 2^GRID_EXPONENT; integers below
2^(53 + GRID_EXPONENT - 1) plus such a draw are exact in f64."""

ROUNDING_EXPONENT = -40
"""Granularity 2^ROUNDING_EXPONENT of the rounded samplers (``add_laplace``/``add_gaussian``
given the sensitivity). OpenDP's exact samplers work on integers of the scale divided by
the granularity: at the default 2^-1074 these are 1,000-bit integers; at 2^-40 they fit a
machine word and a draw is about 4 times cheaper (benchmarks/noise_results.md)."""
OPENDP_LAPLACE = "opendp.measurements.make_laplace(f64 vector, exact)"
OPENDP_GAUSSIAN = "opendp.measurements.make_gaussian(f64 vector, exact)"
OPENDP_GRID_LAPLACE = f"opendp.measurements.make_laplace(f64 vector, k = {GRID_EXPONENT})"
OPENDP_QUANTILE = "opendp.measurements.make_private_quantile(f64 vector, zCDP)"
OPENDP_ROUNDED_LAPLACE = (
    f"opendp.measurements.make_laplace(f64 vector, k = {ROUNDING_EXPONENT}), scale covering "
    "the rounding"
)
OPENDP_ROUNDED_GAUSSIAN = (
    f"opendp.measurements.make_gaussian(f64 vector, k = {ROUNDING_EXPONENT}), scale covering "
    "the rounding"
)
OPENDP_INTEGER_GAUSSIAN = (
    "opendp.measurements.make_gaussian(i64 vector, exact discrete Gaussian), scale enlarged "
    "by 2^-30 to cover OpenDP's rounding of its map"
)
OPENDP_INTEGER_LAPLACE = (
    "opendp.measurements.make_laplace(i64 vector, exact discrete Laplace), scale enlarged "
    "by 2^-30 to cover OpenDP's rounding of its map"
)
EXACT_INTEGER_LAPLACE = (
    "fdptm.privacy.exact.discrete_laplace(i64, exact: CKS Algorithm 2, bracketed coins)"
)
EXACT_INTEGER_GAUSSIAN = (
    "fdptm.privacy.exact.discrete_gaussian(i64, exact: CKS Algorithm 3, bracketed coins)"
)
EXACT_GRID_LAPLACE = (
    f"fdptm.privacy.exact.discrete_laplace on the grid 2^{GRID_EXPONENT} (exact: CKS "
    "Algorithm 2, bracketed coins)"
)
SAMPLERS = ("exact", "opendp")
"""Who draws the integer and grid noise (``add_integer_gaussian``, ``add_integer_laplace``,
``grid_laplace``):
fdptm's compiled exact sampler (``fdptm.privacy.exact``) or OpenDP's, the reference. The
noise on floats (2^-1074 and 2^ROUNDING_EXPONENT grids) and the quantile are OpenDP's
either way."""
NUMPY_QUANTILE = "numpy.random.Generator.gumbel (exponential mechanism)"
NUMPY_LAPLACE = "numpy.random.Generator.laplace"
NUMPY_GAUSSIAN = "numpy.random.Generator.normal"
NUMPY_GRID_LAPLACE = f"numpy.random.Generator.laplace rounded to 2^{GRID_EXPONENT}"
SAFE_SAMPLERS = (
    OPENDP_LAPLACE,
    OPENDP_GAUSSIAN,
    OPENDP_GRID_LAPLACE,
    OPENDP_QUANTILE,
    OPENDP_ROUNDED_LAPLACE,
    OPENDP_ROUNDED_GAUSSIAN,
    OPENDP_INTEGER_GAUSSIAN,
    EXACT_INTEGER_GAUSSIAN,
    EXACT_GRID_LAPLACE,
    OPENDP_INTEGER_LAPLACE,
    EXACT_INTEGER_LAPLACE,
)
CSPRNG = "randomgen.ChaCha (20 rounds) keyed with 256 bits from os.urandom"
RANDOMNESS = "ChaCha20 keystream (OpenSSL via cryptography) keyed with 256 bits of os.urandom"
"""The random bits of fdptm's exact samplers (``fdptm.privacy.keystream``)."""

_INTEGER = {
    "gaussian": (
        EXACT_INTEGER_GAUSSIAN,
        OPENDP_INTEGER_GAUSSIAN,
        NUMPY_GAUSSIAN,
        "Gaussian sigma",
        lambda sensitivity, scale: sensitivity**2 / (2.0 * scale**2),
    ),
    "laplace": (
        EXACT_INTEGER_LAPLACE,
        OPENDP_INTEGER_LAPLACE,
        NUMPY_LAPLACE,
        "Laplace scale",
        lambda sensitivity, scale: sensitivity / scale,
    ),
}
"""Per kind of integer noise: fdptm's exact sampler, OpenDP's, numpy's, what its scale is
called, and the loss at (sensitivity, scale): rho (zCDP) or epsilon."""

_CHUNK = 1 << 12
"""Vectors are split for the worker threads only into chunks of at least this many entries
(below it the thread start-up costs more than it saves)."""


def csprng_generator() -> np.random.Generator:
    """A numpy Generator over ChaCha20 keyed with 256 bits of ``os.urandom``."""
    key = int.from_bytes(os.urandom(32), "little")
    return np.random.Generator(randomgen.ChaCha(key=key, rounds=20))


def _check_scale(name: str, scale: float, secure: bool) -> float:
    """A finite scale, > 0 for a secure source (0 would release the true values), >= 0 for
    numpy (0 adds nothing: tests compare against noiseless runs)."""
    scale = float(scale)
    if not math.isfinite(scale) or scale < 0 or (secure and scale == 0):
        bound = "> 0" if secure else ">= 0"
        raise ValueError(f"the {name} must be a finite number {bound}, got {scale!r}")
    return scale


def _as_finite(values: np.ndarray | float) -> np.ndarray:
    """``values`` as float64; refuses NaN and infinities, which OpenDP would not check."""
    array = np.asarray(values, dtype=np.float64)
    if not np.isfinite(array).all():
        raise ValueError("noise can only be added to finite values; got NaN or infinity")
    return array


@lru_cache(maxsize=64)
def opendp_measurement(sampler: str, scale: float, size: int) -> Measurement:
    """The OpenDP measurement behind ``sampler`` (one of SAFE_SAMPLERS) on ``size`` f64s.

    Laplace and Gaussian use OpenDP's default granularity, the finest (2^-1074: no input is
    rounded, so the privacy map is exactly that of the mechanism at the true sensitivity);
    the grid Laplace uses 2^GRID_EXPONENT, for which OpenDP needs the vector's length (its
    map charges the rounding of inputs; ``grid_laplace`` only ever passes zeros, which lie
    on every grid); the rounded samplers use 2^ROUNDING_EXPONENT and their scale comes from
    ``rounded_scale``. Built once per (sampler, scale, size) in a process (an iterative
    mechanism noises vectors of one size at one scale every iteration); a measurement is
    immutable, so threads share it.
    """
    # the core modules, not opendp.prelude: the prelude imports OpenDP's extras (scikit-learn,
    # polars, ...) when installed, which deadlocked against the release's background import
    # of Great Expectations (both import narwhals); the samplers need none of them
    import opendp.domains as dp
    import opendp.measurements as m
    from opendp.metrics import l1_distance, l2_distance
    from opendp.mod import enable_features

    enable_features("contrib")
    if sampler == OPENDP_INTEGER_GAUSSIAN:
        integers = dp.vector_domain(dp.atom_domain(T="i64"))
        return m.make_gaussian(integers, l2_distance(T="i64"), scale=scale)
    if sampler == OPENDP_INTEGER_LAPLACE:
        integers = dp.vector_domain(dp.atom_domain(T="i64"))
        return m.make_laplace(integers, l1_distance(T="i64"), scale=scale)
    unsized = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    if sampler == OPENDP_GAUSSIAN:
        return m.make_gaussian(unsized, l2_distance(T=float), scale=scale)
    if sampler == OPENDP_LAPLACE:
        return m.make_laplace(unsized, l1_distance(T=float), scale=scale)
    sized = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=size)
    if sampler == OPENDP_GRID_LAPLACE:
        return m.make_laplace(sized, l1_distance(T=float), scale=scale, k=GRID_EXPONENT)
    if sampler == OPENDP_ROUNDED_LAPLACE:
        return m.make_laplace(sized, l1_distance(T=float), scale=scale, k=ROUNDING_EXPONENT)
    if sampler == OPENDP_ROUNDED_GAUSSIAN:
        return m.make_gaussian(sized, l2_distance(T=float), scale=scale, k=ROUNDING_EXPONENT)
    raise ValueError(f"unknown OpenDP sampler {sampler!r}; one of {SAFE_SAMPLERS}")


def rounded_scale(sampler: str, scale: float, sensitivity: float, size: int) -> float:
    """The scale at which ``sampler`` (a rounded one) on ``size`` entries costs no more than
    the unrounded mechanism at ``scale`` for ``sensitivity``, checked with OpenDP's map.

    Rounding each input to the grid g = 2^ROUNDING_EXPONENT moves it by at most g/2, so two
    neighbouring inputs end up at most sensitivity + g sqrt(size) apart in l2 (Gaussian), or
    sensitivity + g size in l1 (Laplace); OpenDP's privacy map charges exactly that. Scaling
    the noise by the same factor keeps rho = sensitivity^2 / (2 scale^2) (Gaussian, zCDP)
    or epsilon = sensitivity / scale (Laplace), the loss the mechanism's accountant assumed.
    The factor is 1 + 2^-40 sqrt(size) / sensitivity (Gaussian) or 1 + 2^-40 size /
    sensitivity (Laplace), plus 2^-30 for the floating-point rounding of OpenDP's map: about
    1 + 10^-9 for a million entries at sensitivity 1, nil for utility.
    """
    gaussian = sampler == OPENDP_ROUNDED_GAUSSIAN
    grid = 2.0**ROUNDING_EXPONENT
    slack = grid * (math.sqrt(size) if gaussian else size)
    enlarged = scale * (sensitivity + slack) / sensitivity * (1.0 + 2.0**-30)
    promised = sensitivity**2 / (2.0 * scale**2) if gaussian else sensitivity / scale
    if opendp_measurement(sampler, enlarged, size).map(sensitivity) > promised:
        raise ValueError(
            f"OpenDP maps {sampler} at scale {enlarged} above the promised loss {promised}"
        )
    return enlarged


def _opendp_apply(sampler: str, scale: float, flat: np.ndarray) -> np.ndarray:
    """``flat`` through ``sampler``, in chunks on one thread per usable core when large."""
    if flat.size == 0:
        return flat.copy()
    parts = min(workers(), max(1, flat.size // _CHUNK))
    if parts == 1:
        noisy = [opendp_measurement(sampler, scale, flat.size)(flat)]
    else:
        with ThreadPoolExecutor(parts) as pool:
            noisy = list(
                pool.map(
                    lambda c: opendp_measurement(sampler, scale, c.size)(c),
                    np.array_split(flat, parts),
                )
            )
    return np.concatenate([np.asarray(n, dtype=np.float64) for n in noisy])


@dataclass
class NoiseSource:
    """A run's random source, its additive-noise samplers and a description for the manifest.

    ``secure`` sources (unseeded ``create``) noise through OpenDP and draw everything else
    from a ChaCha20 ``generator``; the others use numpy. ``draws`` counts the entries each
    sampler has noised, so tests can check which sampler a mechanism went through, and
    ``rounded`` records what every rounded draw was calibrated with.
    """

    generator: np.random.Generator
    seeded: bool
    secure: bool = False
    sampler: str = "opendp"
    """For a secure source, who draws the integer and grid noise (one of SAMPLERS)."""
    draws: dict[str, int] = field(default_factory=dict)
    rounded: list[dict] = field(default_factory=list)
    """One entry per rounded draw: sampler, the scale asked for, the scale used, the stated
    sensitivity and the size (so tests can check each against OpenDP's map)."""

    def __post_init__(self) -> None:
        if self.seeded and self.secure:
            raise ValueError("a seeded noise source is reproducible, so it cannot be secure")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown noise sampler {self.sampler!r}; one of {SAMPLERS}")

    @classmethod
    def create(cls, seed: int | None, stream: int = 0, sampler: str | None = None) -> NoiseSource:
        """The source for anything that may be released.

        Without a seed: exact noise from ``sampler`` (one of SAMPLERS, the release request's
        default when None; OpenDP for the rest) and a ChaCha20 generator (production). With
        one: stream ``stream`` of ``seed`` in numpy (tests only); stages use different
        streams so that their draws are independent.
        """
        if seed is None:
            if sampler is None:
                from fdptm.request import default

                sampler = default("sampler")
            return cls(csprng_generator(), seeded=False, secure=True, sampler=sampler)
        return cls(np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream,))), True)

    @classmethod
    def internal(cls, seed: int | None, stream: int = 0) -> NoiseSource:
        """Fast numpy noise for models that are never released (audit shadows, comparisons).

        With a seed it is exactly ``create(seed, stream)``; without one PCG64 is seeded from
        OS entropy. Never use it for a release.
        """
        if seed is None:
            return cls(np.random.default_rng(), seeded=False)
        return cls.create(seed, stream)

    def add_laplace(
        self, values: np.ndarray | float, scale: float, sensitivity: float | None = None
    ) -> np.ndarray:
        """``values`` plus i.i.d. Laplace(0, scale) noise on every entry, same shape.

        Given the l1 ``sensitivity`` the caller calibrated ``scale`` for, a secure source
        uses the faster rounded sampler at the scale ``rounded_scale`` gives (the same
        epsilon); without it, the exact one.
        """
        return self._add(OPENDP_LAPLACE, values, scale, sensitivity)

    def add_gaussian(
        self, values: np.ndarray | float, sigma: float, sensitivity: float | None = None
    ) -> np.ndarray:
        """``values`` plus i.i.d. N(0, sigma^2) noise on every entry, same shape.

        Given the l2 ``sensitivity`` the caller calibrated ``sigma`` for, a secure source
        uses the faster rounded sampler at the sigma ``rounded_scale`` gives (the same rho);
        without it, the exact one.
        """
        return self._add(OPENDP_GAUSSIAN, values, sigma, sensitivity)

    def _add(
        self, sampler: str, values: np.ndarray | float, scale: float, sensitivity: float | None
    ) -> np.ndarray:
        laplace = sampler == OPENDP_LAPLACE
        scale = _check_scale("Laplace scale" if laplace else "Gaussian sigma", scale, self.secure)
        array = _as_finite(values)
        if self.secure:
            if sensitivity is not None and array.size:
                sensitivity = _check_scale("sensitivity", sensitivity, True)
                sampler = OPENDP_ROUNDED_LAPLACE if laplace else OPENDP_ROUNDED_GAUSSIAN
                used = rounded_scale(sampler, scale, sensitivity, array.size)
                self.rounded.append(
                    {
                        "sampler": sampler,
                        "scale": scale,
                        "used": used,
                        "sensitivity": sensitivity,
                        "size": array.size,
                    }
                )
                scale = used
            noisy = _opendp_apply(sampler, scale, array.ravel())
            return self._count(sampler, noisy.reshape(array.shape))
        if laplace:
            return self._count(
                NUMPY_LAPLACE, array + self.generator.laplace(0.0, scale, array.shape)
            )
        return self._count(NUMPY_GAUSSIAN, array + self.generator.normal(0.0, scale, array.shape))

    def add_integer_gaussian(
        self, values: np.ndarray, scale: float, sensitivity: int
    ) -> np.ndarray:
        """int64 ``values`` plus i.i.d. discrete Gaussian noise of scale ``scale`` (about
        N(0, scale^2), on the integers), as float64, for a caller whose ``values`` move by
        at most the integer ``sensitivity`` in L2 between neighbours: rho =
        sensitivity^2 / (2 scale^2).

        Secure: the exact discrete Gaussian on the integers, from ``fdptm.privacy.exact`` at
        one ulp above ``scale`` (sampler "exact", for the scales it takes: 2^-20 to 2^56) or
        OpenDP's on i64 at ``scale`` (1 + 2^-30), its map checked against rho (it rounds its
        own arithmetic up); the noisy integers are exact, and only then converted to f64
        (post-processing), so no floating-point addition ever meets the noise. Numpy:
        continuous N(0, scale^2) added in floating point.
        """
        return self._add_integer("gaussian", values, scale, sensitivity)

    def add_integer_laplace(self, values: np.ndarray, scale: float, sensitivity: int) -> np.ndarray:
        """int64 ``values`` plus i.i.d. discrete Laplace noise of scale ``scale`` (P(y)
        proportional to exp(-|y| / scale), on the integers), as float64, for a caller whose
        ``values`` move by at most the integer ``sensitivity`` in L1 between neighbours:
        epsilon = sensitivity / scale (CKS Definition 28; the ratio of the pmf at y and
        y + d is at most exp(|d| / scale)). DP set union's integer histograms (M1).

        Secure: from ``fdptm.privacy.exact`` at one ulp above ``scale`` (sampler "exact",
        for the scales it takes: 2^-20 to 2^56 with the exact fraction's numerator and
        denominator below 2^62, ``exact.supports``), or OpenDP's on i64 at ``scale`` (1 +
        2^-30), its map checked against epsilon; the noisy integers are exact, and only then
        converted to f64 (exactly, below 2^53). Numpy: continuous Laplace(0, scale) added
        in floating point.
        """
        return self._add_integer("laplace", values, scale, sensitivity)

    def _add_integer(
        self, kind: str, values: np.ndarray, scale: float, sensitivity: int
    ) -> np.ndarray:
        """``add_integer_gaussian`` or ``add_integer_laplace`` (``kind``): the same steps,
        with the kind's samplers and loss (``_INTEGER``)."""
        exact_sampler, opendp_sampler, numpy_sampler, what, loss = _INTEGER[kind]
        scale = _check_scale(what, scale, self.secure)
        array = np.asarray(values)
        if array.dtype != np.int64:
            raise TypeError(f"add_integer_{kind} needs int64 values, got {array.dtype}")
        if not self.secure:
            draw = self.generator.normal if kind == "gaussian" else self.generator.laplace
            return self._count(numpy_sampler, array + draw(0.0, scale, array.shape))
        from fdptm.privacy import exact  # numba: not on the paths that refuse before a run

        used = math.nextafter(scale, math.inf)
        if self.sampler == "exact" and exact.supports(kind, Fraction(used)):
            noise = exact.draw(kind, Fraction(used), array.size)[0].reshape(array.shape)
            return self._exact_sum(exact_sampler, array, noise, scale, used, sensitivity)
        used = scale * (1.0 + 2.0**-30)
        if array.size:
            promised = loss(sensitivity, scale)
            if opendp_measurement(opendp_sampler, used, 0).map(sensitivity) > promised:
                raise ValueError(f"OpenDP maps the integer {kind} above its loss {promised}")
            self.rounded.append(
                {
                    "sampler": opendp_sampler,
                    "scale": scale,
                    "used": used,
                    "sensitivity": sensitivity,
                    "size": array.size,
                }
            )
        noisy = _opendp_apply(opendp_sampler, used, array.ravel())
        return self._count(opendp_sampler, noisy.astype(np.float64).reshape(array.shape))

    def _exact_sum(
        self,
        sampler: str,
        values: np.ndarray,
        noise: np.ndarray,
        scale: float,
        used: float,
        sensitivity: int,
    ) -> np.ndarray:
        """int64 ``values`` + ``noise`` exactly, as f64.

        The exact sampler draws at the exact rational of ``used``, one ulp above ``scale``:
        the caller's float scale (z C / g, or M1's Laplace scale in grid units) may have
        rounded below the exact value its accountant assumed, by at most half an ulp, so the
        loss is at most the promised one without a further enlargement: rho =
        sensitivity^2 / (2 scale^2) for the discrete Gaussian (CKS Theorem 14), epsilon =
        sensitivity / scale for the discrete Laplace.
        Every draw is below 2^62 in size (``fdptm.privacy.exact.LIMIT``), so values below
        2^62 in size (a sum of clipped units on a grid is far below) sum exactly in int64."""
        if values.size:
            if not -(2**62) < int(values.min()) <= int(values.max()) < 2**62:
                raise OverflowError("integer sums of 2^62 or more cannot be noised exactly")
            self.rounded.append(
                {
                    "sampler": sampler,
                    "scale": scale,
                    "used": used,
                    "sensitivity": sensitivity,
                    "size": values.size,
                }
            )
        return self._count(sampler, (values + noise).astype(np.float64))

    def grid_laplace(self, scale: float, shape: int | tuple[int, ...]) -> np.ndarray:
        """Laplace(0, scale) draws on the grid 2^GRID_EXPONENT, for noise kept in counts.

        Secure: the discrete Laplace of scale scale / 2^GRID_EXPONENT on the integers times
        2^GRID_EXPONENT, from ``fdptm.privacy.exact`` (sampler "exact", for the scales it
        takes: up to 2^36) or OpenDP's of that granularity (the same distribution). Numpy:
        continuous draws rounded to the grid. Either way an integer below 2^32 plus a draw is
        exact in f64 (with draws below 2^32 in size, i.e. scales below about 2^26).
        """
        scale = _check_scale("Laplace scale", scale, self.secure)
        zeros = np.zeros(shape)
        from fdptm.privacy import exact

        units_scale = Fraction(scale) * 2**-GRID_EXPONENT
        if self.secure and self.sampler == "exact" and exact.supports("laplace", units_scale):
            units = exact.discrete_laplace(units_scale, zeros.size)
            draws = units.astype(np.float64) * 2.0**GRID_EXPONENT
            return self._count(EXACT_GRID_LAPLACE, draws.reshape(zeros.shape))
        if self.secure:
            noisy = _opendp_apply(OPENDP_GRID_LAPLACE, scale, zeros.ravel())
            return self._count(OPENDP_GRID_LAPLACE, noisy.reshape(zeros.shape))
        unit = 2.0**GRID_EXPONENT
        draws = np.round(self.generator.laplace(0.0, scale, zeros.shape) / unit) * unit
        return self._count(NUMPY_GRID_LAPLACE, draws)

    def private_quantile(
        self,
        values: np.ndarray,
        candidates: np.ndarray,
        alpha: float,
        scale: float,
        rho: float,
    ) -> float:
        """A candidate near the ``alpha``-quantile of ``values`` (one per privacy unit), by
        the exponential mechanism of ``fdptm.privacy.quantile`` at ``scale``; ``rho`` is
        what the caller accounted for it, which both samplers check before drawing.

        Secure: OpenDP's ``make_private_quantile``. Numpy: Gumbel draws from ``generator``.
        """
        scale = _check_scale("quantile scale", scale, True)
        array = _as_finite(values).ravel()
        if quantile.rho(alpha, scale) > rho:
            raise ValueError(f"the quantile at scale {scale} costs more than rho {rho}")
        if self.secure:
            measurement = quantile.opendp_quantile_measurement(candidates, alpha, scale)
            if measurement.map(1) > rho:
                raise ValueError(f"OpenDP maps the quantile above rho {rho}")
            self._count(OPENDP_QUANTILE, np.ones(1))
            return float(measurement(array.tolist()))
        self._count(NUMPY_QUANTILE, np.ones(1))
        return quantile.exponential_mechanism(array, candidates, alpha, scale, self.generator)

    def _count(self, sampler: str, noisy: np.ndarray) -> np.ndarray:
        self.draws[sampler] = self.draws.get(sampler, 0) + noisy.size
        return noisy

    def describe(self) -> dict:
        """The manifest's ``noise`` block: which samplers and which random generators."""
        if self.secure:
            opendp = version("opendp")
            described = {
                "sampler": f"OpenDP {opendp} floating-point-safe samplers, unseeded",
                "floating_point_safe": True,
                "laplace": (
                    f"{OPENDP_LAPLACE}: discrete Laplace on the grid 2^-1074 added to the "
                    "exact input, the sum rounded once to f64"
                ),
                "gaussian": (
                    f"{OPENDP_GAUSSIAN}: discrete Gaussian on the grid 2^-1074 added to the "
                    "exact input, the sum rounded once to f64"
                ),
                "rounded": (
                    f"{OPENDP_ROUNDED_LAPLACE} and {OPENDP_ROUNDED_GAUSSIAN}, where the "
                    f"mechanism states its sensitivity (hdp-lda): inputs rounded to the "
                    f"grid 2^{ROUNDING_EXPONENT}, discrete noise on that grid added exactly, "
                    "the scale enlarged by (sensitivity + the rounding's reach) / sensitivity "
                    "so that OpenDP's privacy map is the mechanism's stated loss"
                ),
                "integer_gaussian": (
                    f"{OPENDP_INTEGER_GAUSSIAN}: exact discrete Gaussian added to integer "
                    "sums, converted to f64 afterwards (dp-vi's statistic)"
                ),
                "integer_laplace": (
                    f"{OPENDP_INTEGER_LAPLACE}: exact discrete Laplace added to integer "
                    "histograms, converted to f64 afterwards (DP set union's weighted and "
                    "uniform-laplace policies)"
                ),
                "grid_laplace": (
                    f"{OPENDP_GRID_LAPLACE}: discrete Laplace on the grid 2^{GRID_EXPONENT}, "
                    "added exactly to integer counts (zhu, cdp-lda, cdp-lda-plus)"
                ),
                "quantile": f"{OPENDP_QUANTILE}: the exponential mechanism by Gumbel report-"
                "noisy-min (dp-vi's private clipping norm)",
                "noise_randomness": f"OpenSSL RAND_bytes inside OpenDP {opendp} (a CSPRNG)",
                "other_randomness": (
                    f"numpy.random.Generator over {CSPRNG} (randomgen {version('randomgen')}, "
                    "a CSPRNG)"
                ),
                "seeding": "no seed: OS entropy (production)",
            }
            if self.sampler == "exact":
                described.update(
                    sampler=f"fdptm exact samplers and OpenDP {opendp}, unseeded",
                    integer_gaussian=f"{EXACT_INTEGER_GAUSSIAN}: exact discrete Gaussian "
                    "added to integer sums, converted to f64 afterwards (dp-vi, biterm); "
                    f"{OPENDP_INTEGER_GAUSSIAN} for a scale outside [2^-20, 2^56]",
                    integer_laplace=f"{EXACT_INTEGER_LAPLACE}: exact discrete Laplace added "
                    "to integer histograms, converted to f64 afterwards (DP set union's "
                    f"weighted and uniform-laplace policies); {OPENDP_INTEGER_LAPLACE} for a "
                    "scale the compiled sampler does not take (outside [2^-20, 2^56], or an "
                    "exact fraction with a numerator or denominator of 2^62 or more)",
                    grid_laplace=f"{EXACT_GRID_LAPLACE}: added exactly to integer counts "
                    f"(zhu, cdp-lda, cdp-lda-plus); {OPENDP_GRID_LAPLACE} for a scale above "
                    "2^36",
                    noise_randomness=f"{RANDOMNESS} (fdptm's samplers); OpenSSL "
                    f"RAND_bytes inside OpenDP {opendp} (the rest); both CSPRNGs",
                )
            return described
        kind = "numpy seeded (tests only)" if self.seeded else "numpy (internal, never released)"
        return {
            "sampler": kind,
            "floating_point_safe": False,
            "laplace": f"{NUMPY_LAPLACE} (inverse CDF), added in floating point",
            "gaussian": f"{NUMPY_GAUSSIAN} (ziggurat), added in floating point",
            "integer_laplace": f"{NUMPY_LAPLACE} (inverse CDF), added in floating point",
            "grid_laplace": NUMPY_GRID_LAPLACE,
            "quantile": NUMPY_QUANTILE,
            "noise_randomness": "numpy PCG64 (not a CSPRNG)",
            "other_randomness": "numpy PCG64 (not a CSPRNG)",
            "seeding": "fixed seed (reproducible; anyone who knows it can remove the noise; "
            "not for production releases)"
            if self.seeded
            else "OS entropy",
        }
