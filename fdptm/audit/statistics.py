"""Per-document attack statistics of a topic model: zeta (eq. 3) and the theta-hat baselines.

``zeta`` is the LiRA query statistic of the FDPTM paper (section 3.3, eq. 3): the document's
log-likelihood under Phi at its best topic mixture theta-hat. The same theta-hat feeds the
Huang et al. baselines (section 4 of the paper, ref. [18]): the largest posterior (as a
logit), the standard deviation and the negative entropy of theta-hat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fdptm.kernels import zeta as kernel
from fdptm.mechanisms.lda import Corpus


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


def bag_of_words(corpus: Corpus) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (doc_ptr, word_ids, counts) of each document's distinct words."""
    lengths = np.diff(corpus.doc_ptr)
    owner = np.repeat(np.arange(corpus.n_docs, dtype=np.int64), lengths)
    keys = owner * corpus.n_words + corpus.words
    unique, counts = np.unique(keys, return_counts=True)
    docs, words = np.divmod(unique, corpus.n_words)
    ptr = np.searchsorted(docs, np.arange(corpus.n_docs + 1)).astype(np.int64)
    return ptr, words.astype(np.int64), counts.astype(np.float64)


def document_statistics(
    phi: np.ndarray,
    corpus: Corpus,
    *,
    max_iterations: int = 100_000,
    tolerance: float = 1e-6,
) -> DocumentStatistics:
    """zeta(Phi, d) and theta-hat for every document of ``corpus`` (words index Phi's columns).

    Each zeta is within ``tolerance`` (nats) of the maximum: the kernel stops on the
    duality gap. A word with probability 0 in every topic makes zeta minus infinity, as
    eq. 3 says.
    """
    if phi.shape[1] != corpus.n_words:
        raise ValueError(f"Phi has {phi.shape[1]} words, the corpus {corpus.n_words}")
    ptr, words, counts = bag_of_words(corpus)
    theta = np.empty((corpus.n_docs, phi.shape[0]))
    zeta = np.empty(corpus.n_docs)
    kernel.zeta_all(
        ptr,
        words,
        counts,
        np.ascontiguousarray(phi.T, dtype=np.float64),
        max_iterations,
        tolerance,
        theta,
        zeta,
    )
    return DocumentStatistics(zeta, theta)
