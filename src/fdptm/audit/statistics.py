"""Per-document attack statistics of a topic model: zeta (eq. 3) and the theta-hat baselines.

``zeta`` is the LiRA query statistic of the FDPTM paper (section 3.3, eq. 3): the document's
log-likelihood under Phi at its best topic mixture theta-hat. The same theta-hat feeds the
Huang et al. baselines (section 4 of the paper, ref. [18]): the largest posterior (as a
logit), the standard deviation and the negative entropy of theta-hat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from fdptm.kernels import zeta as kernel


@dataclass(frozen=True)
class DocumentStatistics:
    """zeta and theta-hat of every document under one topic-word matrix."""

    zeta: np.ndarray
    theta: np.ndarray

    def max_posterior_logit(self) -> np.ndarray:
        p = np.clip(self.theta.max(axis=1), 1e-12, 1 - 1e-12)
        return np.log(p) - np.log1p(-p)

    def std(self) -> np.ndarray:
        return self.theta.std(axis=1)

    def negative_entropy(self) -> np.ndarray:
        t = np.clip(self.theta, 1e-300, 1.0)
        return (self.theta * np.log(t)).sum(axis=1)


def document_statistics(
    phi: np.ndarray,
    counts: sparse.csr_matrix,
    *,
    max_iterations: int = 100_000,
    tolerance: float = 1e-6,
) -> DocumentStatistics:
    """zeta(Phi, d) and theta-hat for every row of ``counts`` (documents x Phi's words, e.g.
    ``fdptm.evaluation.metrics.doc_word_matrix``).

    Each zeta is within ``tolerance`` (nats) of the maximum: the kernel stops on the
    duality gap. A word with probability 0 in every topic makes zeta minus infinity, as
    eq. 3 says.
    """
    if phi.shape[1] != counts.shape[1]:
        raise ValueError(f"Phi has {phi.shape[1]} words, the counts {counts.shape[1]}")
    counts = counts.tocsr()
    theta = np.empty((counts.shape[0], phi.shape[0]))
    zeta = np.empty(counts.shape[0])
    kernel.zeta_all(
        counts.indptr.astype(np.int64),
        counts.indices.astype(np.int64),
        counts.data.astype(np.float64),
        np.ascontiguousarray(phi.T, dtype=np.float64),
        max_iterations,
        tolerance,
        theta,
        zeta,
    )
    return DocumentStatistics(zeta, theta)
