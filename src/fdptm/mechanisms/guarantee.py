"""What an M2 mechanism guarantees, in the form the ledger and the manifest record.

Every M2 states its notion of privacy, its adjacency and its parameters. Two notions occur:

* ``approximate-dp``: (epsilon, delta)-DP for the stated adjacency (pure DP when delta = 0).
* ``random-dp``: (epsilon, delta, gamma)-random DP (Hall, Wasserman & Rinaldo 2012; TopicDP
  thesis, section 4.1): (epsilon, delta)-DP holds with probability at least 1 - gamma over
  the draw of the dataset and its neighbour. It is strictly weaker than approximate DP and is
  never presented as plain DP.
* ``local-dp``: epsilon-local DP (LP-LDA, Theorem 4): each report was randomised on its
  device, so the guarantee holds against the server too. Only local datasets have it, and
  it never composes with the central notions.
* ``claimed-unproven``: the (epsilon, delta)-DP a paper claims for a mechanism whose proof
  does not hold for the released output. The noisy-CGS baselines (Zhu et al.; CDP-LDA and
  CDP-LDA+) perturb counts that are themselves the output of a data-dependent sampler, so
  the sampled topics leak beyond the noise (Zhao et al., hdp-lda-lp-lda-olp-lda.txt,
  section IV-A); spectral LDA's configurations 3 and 4 assume the tensor power method is
  Lipschitz in its input (dp-spectral-lda.txt, Theorems 6-7), which nothing guarantees.
  They run for comparison and, with an explicit override, for research releases whose
  manifest says the guarantee is unproven; the ledger still charges the claimed budget.

Iterative mechanisms that a tighter accountant (RDP or PLD) bounds also report what basic
composition gives (``basic_epsilon``, ``basic_delta``); those charged by basic composition
report the tighter accountant's figure in ``tight_epsilon`` at ``tight_delta`` (reported,
not charged: their plan gives them no delta). ``event`` is a DpEvent-like
description (the dp-accounting package's vocabulary: gaussian, laplace, self_composed,
poisson_sampled, composed) that lets an audit recompute the totals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fdptm.privacy.adjacency import Adjacency

APPROXIMATE_DP = "approximate-dp"
RANDOM_DP = "random-dp"
CLAIMED_UNPROVEN = "claimed-unproven"
LOCAL_DP = "local-dp"
NOTIONS = (APPROXIMATE_DP, RANDOM_DP, CLAIMED_UNPROVEN, LOCAL_DP)


@dataclass(frozen=True)
class Guarantee:
    """One mechanism run's guarantee: notion, adjacency, (epsilon, delta[, gamma]), how."""

    notion: str
    adjacency: Adjacency
    epsilon: float
    delta: float
    accountant: str
    gamma: float = 0.0
    basic_epsilon: float | None = None
    basic_delta: float | None = None
    event: dict = field(default_factory=dict)
    tight_epsilon: float | None = None
    tight_delta: float | None = None

    def __post_init__(self) -> None:
        if self.notion not in NOTIONS:
            raise ValueError(f"unknown privacy notion {self.notion!r}; one of {NOTIONS}")
        if self.notion != RANDOM_DP and self.gamma != 0.0:
            raise ValueError(f"{self.notion} has no gamma; gamma belongs to random DP")

    def to_dict(self) -> dict:
        return {
            "notion": self.notion,
            "adjacency": self.adjacency.value,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "gamma": self.gamma,
            "accountant": self.accountant,
            "basic_epsilon": self.basic_epsilon,
            "basic_delta": self.basic_delta,
            "tight_epsilon": self.tight_epsilon,
            "tight_delta": self.tight_delta,
            "event": self.event,
        }


def combine_notions(parts: list[tuple[str, float]]) -> tuple[str, float]:
    """The notion of a composition of (notion, gamma) parts, and its gamma.

    Plain approximate DP composes into approximate DP. Any random-DP part makes the whole
    random DP, with gamma the sum of the parts' gammas (union bound over the events in which
    each part's guarantee fails). Any claimed-unproven part makes the whole unproven. Never
    the other way round: a relaxed or unproven part is never reported as plain DP.
    """
    notions = {n for n, _ in parts}
    unknown = notions - set(NOTIONS)
    if unknown:
        raise ValueError(f"unknown privacy notion(s) {sorted(unknown)}")
    gamma = sum(g for n, g in parts if n == RANDOM_DP)
    if LOCAL_DP in notions:
        if notions != {LOCAL_DP}:
            raise ValueError("local-DP spends never compose with central ones")
        return LOCAL_DP, 0.0
    if CLAIMED_UNPROVEN in notions:
        return CLAIMED_UNPROVEN, gamma
    if RANDOM_DP in notions:
        return RANDOM_DP, gamma
    return APPROXIMATE_DP, 0.0


def describe(notion: str, epsilon: float, delta: float, gamma: float = 0.0) -> str:
    """A one-line statement of a guarantee that cannot be mistaken for another notion."""
    if notion == RANDOM_DP:
        return (
            f"({epsilon:.6g}, {delta:.3g}, {gamma:.3g})-random DP: ({epsilon:.6g}, "
            f"{delta:.3g})-DP with probability at least 1 - {gamma:.3g} over neighbours "
            "sampled from this dataset, with a noise scale that itself depends on the data; "
            "NOT plain differential privacy"
        )
    if notion == LOCAL_DP:
        return (
            f"{epsilon:.6g}-local DP per device that sent one report in each batch counted "
            "(each report randomised on its device)"
        )
    if notion == CLAIMED_UNPROVEN:
        return (
            f"UNPROVEN: the paper claims ({epsilon:.6g}, {delta:.3g})-DP, but its proof does "
            "not hold for this mechanism's output; NOT a differential-privacy guarantee"
        )
    return f"({epsilon:.6g}, {delta:.3g})-DP"


def label(notion: str, epsilon: float, delta: float, gamma: float = 0.0) -> str:
    """``describe`` in a few words, for table cells."""
    if notion == RANDOM_DP:
        return f"({epsilon:.4g}, {delta:.2g}, {gamma:.2g})-random DP"
    if notion == LOCAL_DP:
        return f"{epsilon:.4g}-local DP"
    if notion == CLAIMED_UNPROVEN:
        return f"unproven claim of ({epsilon:.4g}, {delta:.2g})-DP"
    return f"({epsilon:.4g}, {delta:.2g})-DP"
