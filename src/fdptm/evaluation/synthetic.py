"""Synthetic LDA corpora with known topics, for recovery tests, comparisons and benchmarks.

The generative process of LDA (Blei et al. 2003; dp-spectral-lda.txt appendix B): topics
phi_j ~ Dirichlet(eta) over V words, per document theta_n ~ Dirichlet(alpha), length l_n,
and each token draws a topic from theta_n and a word from that topic. A small ``eta`` gives
sparse, well separated topics ("strong topics"). Sampling is vectorised: topic counts per
document come from one multinomial call, words per topic from one categorical draw each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fdptm.mechanisms.lda import Corpus


@dataclass(frozen=True)
class SyntheticLda:
    """A corpus with the true topic-word matrix ``phi`` (k x V) and Dirichlet ``alpha``."""

    corpus: Corpus
    phi: np.ndarray
    alpha: np.ndarray


def generate_lda(
    n_docs: int,
    n_words: int,
    n_topics: int,
    *,
    doc_length: int = 50,
    alpha: float = 0.1,
    eta: float = 0.05,
    docs_per_author: int = 1,
    seed: int = 0,
    phi: np.ndarray | None = None,
) -> SyntheticLda:
    """Draw an LDA corpus; document lengths are 3 + Poisson(doc_length - 3).

    ``phi`` (k x V) fixes the topics instead of drawing them (chunks of one large corpus
    drawn with different seeds then share the same topics).

    Every document has at least 3 tokens (the third-order moments of spectral LDA need
    that). ``docs_per_author`` consecutive documents share an author id.
    """
    if min(n_docs, n_words, n_topics, docs_per_author) < 1 or doc_length < 3:
        raise ValueError("n_docs, n_words, n_topics, docs_per_author >= 1 and doc_length >= 3")
    rng = np.random.default_rng(seed)
    drawn_phi = rng.dirichlet(np.full(n_words, eta), size=n_topics)
    if phi is None:
        phi = drawn_phi
    elif phi.shape != (n_topics, n_words):
        raise ValueError(f"phi must be {n_topics} x {n_words}, got {phi.shape}")
    alphas = np.full(n_topics, float(alpha))
    theta = rng.dirichlet(alphas, size=n_docs)
    lengths = 3 + rng.poisson(doc_length - 3, size=n_docs)
    counts = rng.multinomial(lengths, theta)
    doc_ptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=doc_ptr[1:])
    words = np.empty(doc_ptr[-1], dtype=np.int32)
    cursor = doc_ptr[:-1].copy()
    for k in range(n_topics):
        per_doc = counts[:, k]
        drawn = rng.choice(n_words, size=int(per_doc.sum()), p=phi[k]).astype(np.int32)
        owners = np.repeat(np.arange(n_docs), per_doc)
        offsets = np.arange(len(owners)) - np.repeat(np.cumsum(per_doc) - per_doc, per_doc)
        words[cursor[owners] + offsets] = drawn
        cursor += per_doc
    doc_author = (np.arange(n_docs) // docs_per_author).astype(np.int32)
    return SyntheticLda(Corpus(doc_ptr, words, n_words, doc_author), phi, alphas)
