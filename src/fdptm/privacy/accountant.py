"""Budget plans and composition for one FDPTM run.

FDPTM (Algorithm 1, Theorem 4.1 of the FDPTM paper) releases the output of an
(eps1, delta1)-DP vocabulary selection M1 and an (eps2, delta2)-DP topic model M2; by basic
(adaptive) composition the pair is (eps1 + eps2, delta1 + delta2)-DP, provided both
guarantees hold for the same adjacency (section 4.3). When the stages guarantee different
adjacencies, each stage's guarantee is first converted to the weakest of them
(``adjacency.convert``) and the release is stated for that weakest unit.

A user asks for a total (epsilon, delta) *at the release's unit*. ``plan_budget`` splits it
across the stages by a policy (default 25% of epsilon to M1 and 75% to M2, as the FDPTM
paper's section 4.5 advises: coherence saturates in eps1 sooner than in eps2), then turns
each stage's share into the native parameters that stage must run with, inverting the
conversion where a stage's own adjacency is stronger than the release's. ``compose`` goes
the other way and is what the manifest and the ledger report.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from decimal import Decimal

from fdptm.errors import BadInputError
from fdptm.mechanisms.guarantee import APPROXIMATE_DP, RANDOM_DP, combine_notions
from fdptm.privacy.adjacency import Adjacency, Conversion, convert, invert_group_of_two, weakest

BASIC_COMPOSITION = "basic composition (FDPTM Theorem 4.1; Dwork & Roth Theorem 3.16)"


def check_epsilon(epsilon: float, what: str = "epsilon") -> float:
    """Reject epsilon <= 0, NaN and infinity with a message that says what to pass."""
    if not isinstance(epsilon, int | float) or not math.isfinite(epsilon) or epsilon <= 0:
        raise BadInputError(f"{what} must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


def check_delta(delta: float, what: str = "delta") -> float:
    """Reject delta outside the open interval (0, 1)."""
    if not isinstance(delta, int | float) or not math.isfinite(delta) or not 0 < delta < 1:
        raise BadInputError(
            f"{what} must be in the open interval (0, 1), got {delta!r}; "
            "a typical choice is well below 1/number-of-authors, e.g. 1e-5"
        )
    return float(delta)


@dataclass(frozen=True)
class StageBudget:
    """One stage's budget: what it runs with (native) and what it adds to the release."""

    stage: str
    mechanism: str
    adjacency: Adjacency
    epsilon: float
    delta: float
    release_epsilon: float
    release_delta: float
    conversion: str
    notion: str = APPROXIMATE_DP

    def to_dict(self) -> dict:
        d = asdict(self)
        d["adjacency"] = self.adjacency.value
        return d


@dataclass(frozen=True)
class BudgetPlan:
    """The split of a run's total (epsilon, delta) across its stages."""

    epsilon: float
    delta: float
    unit: Adjacency
    stages: list[StageBudget] = field(default_factory=list)
    accountant: str = BASIC_COMPOSITION
    policy: str = ""

    def stage(self, name: str) -> StageBudget:
        for s in self.stages:
            if s.stage == name:
                return s
        raise KeyError(name)


@dataclass(frozen=True)
class StageSpec:
    """What the planner needs to know about a stage's mechanism."""

    stage: str
    mechanism: str
    adjacency: Adjacency
    uses_delta: bool
    epsilon_fraction: float
    notion: str = APPROXIMATE_DP


def plan_budget(
    epsilon: float,
    delta: float,
    specs: list[StageSpec],
    *,
    authors_are_documents: bool,
) -> BudgetPlan:
    """Split (epsilon, delta), stated at the weakest adjacency of ``specs``, across stages.

    epsilon is split by each spec's ``epsilon_fraction`` (they must sum to 1). delta goes to
    the stages that need one (pure epsilon-DP stages get 0), in proportion to their epsilon
    fractions. Each share is then inverted through the conversion from the stage's own
    adjacency to the release's, so that ``compose`` of the native budgets gives back exactly
    (epsilon, delta).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    total_fraction = sum(s.epsilon_fraction for s in specs)
    if not math.isclose(total_fraction, 1.0, rel_tol=1e-9) or any(
        not 0 < s.epsilon_fraction <= 1 for s in specs
    ):
        raise BadInputError(
            "the budget split must give every stage a fraction in (0, 1] "
            f"summing to 1, got {[s.epsilon_fraction for s in specs]}"
        )
    unit = weakest([s.adjacency for s in specs], authors_are_documents=authors_are_documents)
    delta_weight = sum(s.epsilon_fraction for s in specs if s.uses_delta)
    eps_shares = split_exactly(epsilon, [s.epsilon_fraction for s in specs])
    delta_shares = split_exactly(
        delta, [s.epsilon_fraction / delta_weight if s.uses_delta else 0.0 for s in specs]
    )
    stages = []
    for spec, eps_share, delta_share in zip(specs, eps_shares, delta_shares, strict=True):
        forward = convert(
            1.0, 0.0, spec.adjacency, unit, authors_are_documents=authors_are_documents
        )
        if spec.notion == RANDOM_DP and forward.group_size != 1:
            raise BadInputError(
                f"{spec.mechanism} is random DP at {spec.adjacency.value} level and the "
                f"release would be at {unit.value} level; random DP is not converted between "
                "adjacencies. Use a mechanism with plain DP."
            )
        if forward.group_size == 1:
            eps_native, delta_native = eps_share, delta_share
        else:
            eps_native, delta_native = invert_group_of_two(eps_share, delta_share)
            eps_native, delta_native = _within(
                eps_native,
                delta_native,
                eps_share,
                delta_share,
                spec.adjacency,
                unit,
                authors_are_documents,
            )
        stages.append(
            StageBudget(
                stage=spec.stage,
                mechanism=spec.mechanism,
                adjacency=spec.adjacency,
                epsilon=eps_native,
                delta=delta_native,
                release_epsilon=eps_share,
                release_delta=delta_share,
                conversion=forward.reason,
                notion=spec.notion,
            )
        )
    policy = ", ".join(f"{s.stage} {s.epsilon_fraction:.0%} of epsilon" for s in specs)
    return BudgetPlan(epsilon, delta, unit, stages, policy=policy)


def split_exactly(total: float, fractions: list[float]) -> list[float]:
    """Shares of ``total`` by ``fractions`` (0 for a zero fraction) whose exact sum is at
    most ``total``: the last positive share is the remainder, lowered by an ulp until the
    decimal sum fits, so a manifest never states more than was asked (never 1.0000000000000052e-05
    for 1e-05)."""
    shares = [float(exact(total) * exact(f)) if f > 0 else 0.0 for f in fractions]
    last = max((i for i, f in enumerate(fractions) if f > 0), default=None)
    if last is None:
        return shares
    rest = exact(total) - exact_sum(v for i, v in enumerate(shares) if i != last)
    shares[last] = float(rest)
    while exact_sum(shares) > exact(total):
        shares[last] = math.nextafter(shares[last], 0.0)
    return shares


def _within(eps, delta, eps_share, delta_share, source, unit, authors_are_documents):
    """Lower an inverted (eps, delta) by ulps until its forward conversion fits the share."""
    while True:
        c = convert(eps, delta, source, unit, authors_are_documents=authors_are_documents)
        fits_eps = exact(c.epsilon_out) <= exact(eps_share)
        fits_delta = exact(c.delta_out) <= exact(delta_share)
        if fits_eps and fits_delta:
            return eps, delta
        eps = eps if fits_eps else math.nextafter(eps, 0.0)
        delta = delta if fits_delta else math.nextafter(delta, 0.0)


def exact(value: float) -> Decimal:
    """A stored float as the decimal it was written as (its shortest round-trip repr).

    Budgets are typed as decimals (1e-5, 0.25); summing their binary floats drifts (five
    times 1e-5 exceeds the float 5e-5). Sums of these decimals are exact, and differ from
    the binary values the mechanisms run with by under one part in 10^16.
    """
    return Decimal(repr(float(value)))


def exact_sum(values) -> Decimal:
    """The exact decimal sum of ``values`` (see ``exact``)."""
    return sum((exact(v) for v in values), Decimal(0))


@dataclass(frozen=True)
class Composition:
    """A composed guarantee with every conversion that went into it."""

    epsilon: float
    delta: float
    unit: Adjacency
    conversions: list[Conversion]
    accountant: str = BASIC_COMPOSITION
    notion: str = APPROXIMATE_DP
    gamma: float = 0.0


def compose(
    spends: list[tuple[float, float, Adjacency]],
    unit: Adjacency | None = None,
    *,
    authors_are_documents: bool,
    notions: list[tuple[str, float]] | None = None,
) -> Composition:
    """Basic composition of (epsilon, delta, adjacency) spends at ``unit``.

    Sums are exact decimal sums (``exact_sum``), rounded once to the nearest float.

    ``notions`` gives each spend's (notion, gamma) when not all are plain approximate DP;
    the composition's notion is ``combine_notions`` of them. A random-DP spend is never
    converted to another adjacency (group privacy for random DP is not established here).

    ``unit`` defaults to the weakest adjacency among the spends. A spend whose adjacency is
    weaker than ``unit`` cannot be stated there and raises ValueError.
    """
    if unit is None:
        unit = (
            weakest([a for _, _, a in spends], authors_are_documents=authors_are_documents)
            if spends
            else Adjacency.AUTHOR
        )
    notions = notions or [(APPROXIMATE_DP, 0.0)] * len(spends)
    conversions = [
        convert(e, d, a, unit, authors_are_documents=authors_are_documents) for e, d, a in spends
    ]
    for c, (notion, _) in zip(conversions, notions, strict=True):
        if notion == RANDOM_DP and c.group_size != 1:
            raise ValueError(
                f"a random-DP spend at {c.source.value} level cannot be restated at "
                f"{c.target.value} level"
            )
    notion, gamma = combine_notions(notions)
    return Composition(
        epsilon=float(exact_sum(c.epsilon_out for c in conversions)),
        delta=float(exact_sum(c.delta_out for c in conversions)),
        unit=unit,
        conversions=conversions,
        notion=notion,
        gamma=gamma,
    )
