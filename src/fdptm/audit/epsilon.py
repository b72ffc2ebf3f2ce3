"""An empirical lower bound on epsilon from a membership attack's true and false positives.

If a mechanism is (epsilon, delta)-DP for the unit the attack tests, every test that tells
"member" from "non-member" satisfies TPR <= e^eps FPR + delta and 1 - FPR <= e^eps (1 - TPR)
+ delta (Kairouz et al. 2015; the hypothesis-testing view of DP). So

    eps >= max( ln((TPR - delta) / FPR), ln((1 - FPR - delta) / (1 - TPR)) ).

TPR and FPR are estimated from finitely many documents, so the bound uses one-sided
Clopper-Pearson limits (exact binomial intervals): the lower limit of TPR and the upper limit
of FPR, each at level alpha / 2, so that with probability at least 1 - alpha (the stated
confidence, union bound over the two) the true rates are on the conservative side and the
bound holds. The threshold must be chosen on other documents than the ones counted here
(the audit splits documents into threshold-selection and evaluation halves), or the
selection itself inflates the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import beta


def clopper_pearson_lower(successes: int, trials: int, alpha: float) -> float:
    """One-sided lower 1 - alpha limit of a binomial proportion (0 when no success)."""
    _check(successes, trials, alpha)
    if successes == 0:
        return 0.0
    return float(beta.ppf(alpha, successes, trials - successes + 1))


def clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    """One-sided upper 1 - alpha limit of a binomial proportion (1 when all succeed)."""
    _check(successes, trials, alpha)
    if successes == trials:
        return 1.0
    return float(beta.ppf(1 - alpha, successes + 1, trials - successes))


def _check(successes: int, trials: int, alpha: float) -> None:
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


@dataclass(frozen=True)
class EpsilonBound:
    """The bound and the rates it was computed from."""

    epsilon: float
    confidence: float
    delta: float
    tpr: float
    fpr: float
    tpr_low: float
    fpr_high: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _epsilon(tpr_low, fpr_high, delta: float):
    """max(0, log((TPR_lo - delta) / FPR_hi), log((1 - FPR_hi - delta) / (1 - TPR_lo))),
    elementwise: the two inequalities an (epsilon, delta)-DP test must satisfy."""
    tpr_low, fpr_high = np.asarray(tpr_low, float), np.asarray(fpr_high, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.where(
            (tpr_low - delta > 0) & (fpr_high > 0), np.log((tpr_low - delta) / fpr_high), 0.0
        )
        second = np.where(
            (1 - fpr_high - delta > 0) & (tpr_low < 1),
            np.log((1 - fpr_high - delta) / (1 - tpr_low)),
            0.0,
        )
    return np.maximum(0.0, np.maximum(first, second))


def epsilon_lower_bounds(
    true_positives: np.ndarray,
    positives: int,
    false_positives: np.ndarray,
    negatives: int,
    *,
    delta: float,
    confidence: float = 0.95,
) -> np.ndarray:
    """``epsilon_lower_bound(...).epsilon`` for arrays of counts (one per threshold)."""
    alpha = (1 - confidence) / 2
    tp, fp = np.asarray(true_positives), np.asarray(false_positives)
    with np.errstate(invalid="ignore"):
        tpr_low = np.where(tp > 0, beta.ppf(alpha, tp, positives - tp + 1), 0.0)
        fpr_high = np.where(fp < negatives, beta.ppf(1 - alpha, fp + 1, negatives - fp), 1.0)
    return _epsilon(tpr_low, fpr_high, delta)


def epsilon_lower_bound(
    true_positives: int,
    positives: int,
    false_positives: int,
    negatives: int,
    *,
    delta: float,
    confidence: float = 0.95,
) -> EpsilonBound:
    """The empirical epsilon lower bound, holding with probability ``confidence`` (0 if the
    attack shows nothing)."""
    alpha = (1 - confidence) / 2
    tpr_low = clopper_pearson_lower(true_positives, positives, alpha)
    fpr_high = clopper_pearson_upper(false_positives, negatives, alpha)
    return EpsilonBound(
        epsilon=float(_epsilon(tpr_low, fpr_high, delta)),
        confidence=confidence,
        delta=delta,
        tpr=true_positives / positives,
        fpr=false_positives / negatives,
        tpr_low=tpr_low,
        fpr_high=fpr_high,
    )
