"""A differentially private quantile: the exponential mechanism over public candidates.

What it is. For a dataset x_1..x_n (one value per privacy unit), a level alpha in (0, 1)
and a sorted public list of candidates c_1..c_m, every candidate is scored by

    score(c) = | (1 - alpha) #{i : x_i < c} - alpha #{i : x_i > c} |

(0 at an exact alpha-quantile) and c is released with probability proportional to
exp(-score(c) / scale): Smith (STOC 2011)'s private quantile, as OpenDP's
``make_private_quantile`` implements it (report-noisy-min with Gumbel noise, which samples
exactly the exponential mechanism; McKenna & Sheldon 2020 for the selection). Adding or
removing one unit moves every score by at most max(alpha, 1 - alpha), so the mechanism is
epsilon-DP with epsilon = 2 max(alpha, 1 - alpha) / scale, and as a bounded-range mechanism
rho-zCDP with rho = epsilon^2 / 8 (Cesar & Rogers 2021, Lemma 3.2), which is the privacy
map OpenDP states for its zero-concentrated-divergence output measure (a test checks the two
agree).

Which sampler. A secure ``NoiseSource`` (every release) calls OpenDP's measurement, whose
Gumbel draws come from its own CSPRNG and exact arithmetic; a seeded source (tests) and an
internal one use ``exponential_mechanism`` below with numpy's Gumbel draws: the same
distribution, reproducible (a test compares the two by a chi-square test).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from opendp.mod import Measurement

GEOMETRIC_CANDIDATES = tuple(float(2.0 ** (i / 4)) for i in range(-8, 41))
"""Public candidates for a norm: 2^(i/4) for i = -8..40, i.e. 0.25 to 1024 in steps of 19%."""


def check_alpha(alpha: float) -> float:
    """``alpha`` as a float strictly inside (0, 1); ValueError otherwise."""
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"a quantile level must lie strictly between 0 and 1, got {alpha!r}")
    return alpha


def rho(alpha: float, scale: float) -> float:
    """zCDP rho of the quantile at ``scale`` under add/remove of one value."""
    return (2.0 * max(alpha, 1.0 - alpha) / scale) ** 2 / 8.0


def pure_epsilon(alpha: float, scale: float) -> float:
    """Pure epsilon of the quantile at ``scale`` under add/remove of one value."""
    return 2.0 * max(alpha, 1.0 - alpha) / scale


def scale_for(alpha: float, target_rho: float) -> float:
    """A scale whose rho is at most ``target_rho``, 1e-9 relative above the exact solution:
    OpenDP's privacy map rounds every operation up, so the exact scale can map a few ulps
    above the target (a test checks OpenDP's own map)."""
    return 2.0 * max(alpha, 1.0 - alpha) / math.sqrt(8.0 * target_rho) * (1.0 + 1e-9)


def scores(values: np.ndarray, candidates: np.ndarray, alpha: float) -> np.ndarray:
    """score(c) for every candidate (the module docstring), from two binary searches."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    below = np.searchsorted(ordered, candidates, side="left")
    above = len(ordered) - np.searchsorted(ordered, candidates, side="right")
    return np.abs((1.0 - alpha) * below - alpha * above)


def exponential_mechanism(
    values: np.ndarray,
    candidates: np.ndarray,
    alpha: float,
    scale: float,
    generator: np.random.Generator,
) -> float:
    """The candidate with the smallest score - Gumbel(scale) draw: P(c) ~ exp(-score / scale)."""
    noisy = -scores(values, candidates, alpha) + generator.gumbel(0.0, scale, len(candidates))
    return float(candidates[int(np.argmax(noisy))])


def opendp_quantile_measurement(candidates: np.ndarray, alpha: float, scale: float) -> Measurement:
    """OpenDP's ``make_private_quantile`` (zCDP output measure) for these public inputs."""
    import opendp.domains as dp
    import opendp.measurements as m
    from opendp.measures import zero_concentrated_divergence
    from opendp.metrics import symmetric_distance
    from opendp.mod import enable_features

    enable_features("contrib")  # core modules, not opendp.prelude (noise.opendp_measurement)
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    return m.make_private_quantile(
        domain,
        symmetric_distance(),
        zero_concentrated_divergence(),
        [float(c) for c in candidates],
        alpha,
        scale,
    )
