"""DpEvent-like descriptions of mechanisms and the tighter accountants that read them.

A mechanism's ``event`` is a JSON-able dict in the vocabulary of Google's dp-accounting
package (``type`` one of gaussian, laplace, zcdp, poisson_sampled, self_composed, composed),
stored in the ledger and the manifest so that an audit can recompute the totals with
``epsilon_of``. Each mechanism states its event for its own adjacency's add/remove (or
replace) relation; the accountant only composes.

Accountants: PLD (privacy loss distributions, exact up to discretisation, pessimistic
rounding) for Laplace and Gaussian steps; RDP for zCDP steps. A pure epsilon-DP step that is
neither (HDP-LDA's iteration, whose privacy loss is partly the sampler's own) enters as
``zcdp`` with rho = epsilon^2 / 2, which every epsilon-DP mechanism satisfies (Bun & Steinke
2016, Proposition 3.3).
"""

from __future__ import annotations

import logging

import dp_accounting
from dp_accounting import pld, rdp


def gaussian(noise_multiplier: float) -> dict:
    return {"type": "gaussian", "noise_multiplier": noise_multiplier}


def laplace(noise_multiplier: float) -> dict:
    """Laplace noise of scale ``noise_multiplier`` x (L1 sensitivity)."""
    return {"type": "laplace", "noise_multiplier": noise_multiplier}


def pure(epsilon: float) -> dict:
    """A generic epsilon-DP step, as the zCDP it implies."""
    return {"type": "zcdp", "rho": epsilon**2 / 2.0, "from_pure_epsilon": epsilon}


def zcdp(rho: float) -> dict:
    """A rho-zCDP step (Bun & Steinke 2016)."""
    return {"type": "zcdp", "rho": rho}


def repeat_and_select(event: dict, mean: float, shape: float) -> dict:
    """Run ``event`` a random number of times (truncated negative binomial of ``shape`` and
    ``mean``; 1 = geometric) and release only the best run (Papernot & Steinke 2022)."""
    return {"type": "repeat_and_select", "mean": mean, "shape": shape, "event": event}


def self_composed(event: dict, count: int) -> dict:
    return {"type": "self_composed", "count": count, "event": event}


def composed(*events: dict) -> dict:
    return {"type": "composed", "events": list(events)}


def poisson_sampled(event: dict, probability: float) -> dict:
    return {"type": "poisson_sampled", "sampling_probability": probability, "event": event}


def to_dp_event(event: dict) -> dp_accounting.DpEvent:
    """The dp-accounting object for a description; unknown types raise ValueError."""
    kind = event["type"]
    if kind == "gaussian":
        return dp_accounting.GaussianDpEvent(event["noise_multiplier"])
    if kind == "laplace":
        return dp_accounting.LaplaceDpEvent(event["noise_multiplier"])
    if kind == "zcdp":
        return dp_accounting.ZCDpEvent(event["rho"])
    if kind == "self_composed":
        return dp_accounting.SelfComposedDpEvent(to_dp_event(event["event"]), event["count"])
    if kind == "composed":
        return dp_accounting.ComposedDpEvent([to_dp_event(e) for e in event["events"]])
    if kind == "repeat_and_select":
        return dp_accounting.dp_event.RepeatAndSelectDpEvent(
            to_dp_event(event["event"]), event["mean"], event["shape"]
        )
    if kind == "poisson_sampled":
        return dp_accounting.PoissonSampledDpEvent(
            event["sampling_probability"], to_dp_event(event["event"])
        )
    raise ValueError(f"unknown event type {kind!r}")


def _kinds(event: dict) -> set[str]:
    inner = [event["event"]] if "event" in event else event.get("events", [])
    return {event["type"]}.union(*(_kinds(e) for e in inner))


def accountant_for(event: dict) -> str:
    """ "pld" unless the event has zCDP steps or a repeat-and-select, which only the RDP
    accountant composes."""
    return "rdp" if {"zcdp", "repeat_and_select"} & _kinds(event) else "pld"


PLD_INTERVAL = 1e-4
"""The PLD accountant's value discretisation interval (dp-accounting's default): the
pessimistic discretisation makes its epsilon an upper bound at any interval, tighter as the
interval shrinks and dearer (a T = 100 composition 2-7 times dearer at 1e-4 than at
1e-3)."""


def epsilon_of(
    event: dict, delta: float, accountant: str | None = None, interval: float = PLD_INTERVAL
) -> float:
    """The epsilon at ``delta`` of the composed ``event`` under the PLD (discretised at
    ``interval``) or RDP accountant.

    The RDP accountant drops (with an absl warning, silenced here) fractional orders whose
    series does not converge; the minimum over the remaining orders is still a valid bound.
    """
    accountant = accountant or accountant_for(event)
    if accountant == "pld":
        acc = pld.PLDAccountant(value_discretization_interval=interval)
    elif accountant == "rdp":
        acc = rdp.RdpAccountant()
    else:
        raise ValueError(f"unknown accountant {accountant!r}: 'pld' or 'rdp'")
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        acc.compose(to_dp_event(event))
        return float(acc.get_epsilon(delta))
    finally:
        absl.setLevel(level)


ACCOUNTANTS = {
    "rdp": "dp_accounting RdpAccountant (Renyi DP, add-or-remove-one)",
    "pld": "dp_accounting PLDAccountant (privacy loss distributions, pessimistic, "
    "add-or-remove-one)",
}
