"""Topic matching (Hungarian algorithm) and distances between matched topic-word matrices.

Topics are exchangeable: before comparing a model with a reference (the non-private model,
or the true topics of synthetic data), each estimated topic is paired with one reference
topic by ``scipy.optimize.linear_sum_assignment`` on the L1 distances between rows, the
matching the FDPTM paper's utility audit and the TopicDP thesis (section 5.2) use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from scipy.stats import kendalltau


def match_topics(estimate: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``perm`` such that ``estimate[perm[j]]`` is matched to ``reference[j]`` (min total L1)."""
    if estimate.shape != reference.shape:
        raise ValueError(f"shapes differ: {estimate.shape} vs {reference.shape}")
    cost = cdist(reference, estimate, "cityblock")
    rows, cols = linear_sum_assignment(cost)
    perm = np.empty(len(rows), dtype=np.int64)
    perm[rows] = cols
    return perm


@dataclass(frozen=True)
class MatchedDistance:
    """Mean per-topic distances after matching; ``cosine`` is the mean matched similarity."""

    l1: float
    rmse: float
    kendall_tau: float
    cosine: float
    frobenius: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def matched_distance(estimate: np.ndarray, reference: np.ndarray) -> MatchedDistance:
    """L1, RMSE, Kendall tau, cosine similarity and Frobenius norm after Hungarian matching."""
    matched = estimate[match_topics(estimate, reference)]
    diff = matched - reference
    taus = [_tau(a, b) for a, b in zip(matched, reference, strict=True)]
    norms = np.linalg.norm(matched, axis=1) * np.linalg.norm(reference, axis=1)
    return MatchedDistance(
        l1=float(np.abs(diff).sum(axis=1).mean()),
        rmse=float(np.sqrt((diff**2).mean())),
        kendall_tau=float(np.mean(taus)),
        cosine=float(((matched * reference).sum(axis=1) / norms).mean()),
        frobenius=float(np.linalg.norm(diff)),
    )


def _tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall tau of two rows; 0 (no agreement) when either row is constant, where the
    ranking, and so tau, is undefined (a noisy topic flattened to uniform, say)."""
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    return float(kendalltau(a, b).statistic)
