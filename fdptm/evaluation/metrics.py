"""Utility of a topic-word matrix: UMass coherence and held-out perplexity.

Both read private documents, so their values are internal, non-DP statistics: they go to
internal comparison and audit reports, never into a release.

* UMass coherence, eq. 4 of the FDPTM paper (Mimno et al. 2011): for the M = 10 most
  probable words v_1..v_M of a topic, sum over m > l of log((D(v_m, v_l) + 1) / D(v_l)),
  with D the document frequency and D(., .) the co-document frequency; averaged over
  topics. A top word that occurs in no document (possible for a noisy matrix) has
  D(v_l) = 0 and an undefined term; it is counted as D(v_l) = 1, the smallest frequency a
  word can have, so the score stays finite and such topics still score low. Written out
  rather than taken from gensim because gensim's ``u_mass`` smooths with 1e-12 instead of
  eq. 4's +1 and averages instead of sums.
* Held-out perplexity by document completion (Wallach et al. 2009): each held-out
  document's even-position tokens estimate its topic proportions theta (EM with phi fixed,
  symmetric Dirichlet alpha as smoothing), and the odd-position tokens are scored:
  exp(-sum log(theta_d . phi_w) / number of scored tokens), the formula of Zhao et al.,
  section VII-A. A released matrix may give a word probability exactly 0 (noise clipped
  at 0), which would make the perplexity infinite; every model is therefore scored as the
  mixture (1 - 1e-6) phi + 1e-6 / V, which costs a zero-probability word about
  log(1e6 V) nats instead of infinity and changes nothing measurable for other models.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from fdptm.mechanisms.lda import Corpus

UNIFORM_MIX = 1e-6


def doc_word_matrix(corpus: Corpus, positions: slice = slice(None)) -> sparse.csr_matrix:
    """Documents x words counts of the tokens at ``positions`` within each document."""
    lengths = np.diff(corpus.doc_ptr)
    owner = np.repeat(np.arange(corpus.n_docs), lengths)
    offset = np.arange(corpus.n_tokens) - np.repeat(corpus.doc_ptr[:-1], lengths)
    if positions == slice(None):
        keep = np.ones(corpus.n_tokens, dtype=bool)
    else:
        keep = (offset % positions.step) == positions.start
    return sparse.csr_matrix(
        (np.ones(int(keep.sum())), (owner[keep], corpus.words[keep])),
        shape=(corpus.n_docs, corpus.n_words),
    )


def umass(phi: np.ndarray, corpus: Corpus, top: int = 10) -> float:
    """Mean over topics of eq. 4's UMass coherence of the ``top`` most probable words."""
    present = (doc_word_matrix(corpus) > 0).astype(np.float64).tocsc()
    scores = []
    for row in phi:
        words = np.argsort(-row, kind="stable")[:top]
        sub = present[:, words]
        co = (sub.T @ sub).toarray()
        freq = np.maximum(np.diag(co), 1.0)
        m, l_ = np.tril_indices(len(words), k=-1)
        scores.append(float(np.log((co[m, l_] + 1.0) / freq[l_]).sum()))
    return float(np.mean(scores))


def completion_perplexity(
    phi: np.ndarray, corpus: Corpus, *, alpha: float = 0.1, iterations: int = 50
) -> float:
    """Document-completion perplexity of ``corpus`` (held-out documents) under ``phi``."""
    observed = doc_word_matrix(corpus, slice(0, None, 2)).tocoo()
    scored = doc_word_matrix(corpus, slice(1, None, 2)).tocoo()
    if scored.sum() == 0:
        raise ValueError("no held-out token to score: documents need at least two tokens")
    k = phi.shape[0]
    phi = (1.0 - UNIFORM_MIX) * phi + UNIFORM_MIX / phi.shape[1]
    theta = np.full((corpus.n_docs, k), 1.0 / k)
    d, w, c = observed.row, observed.col, observed.data
    for _ in range(iterations):
        p = theta[d] * phi[:, w].T
        p /= p.sum(axis=1, keepdims=True)
        weighted = c[:, None] * p
        expected = np.column_stack(
            [np.bincount(d, weights=weighted[:, j], minlength=corpus.n_docs) for j in range(k)]
        )
        theta = expected + alpha
        theta /= theta.sum(axis=1, keepdims=True)
    likelihood = (theta[scored.row] * phi[:, scored.col].T).sum(axis=1)
    return float(np.exp(-(scored.data * np.log(likelihood)).sum() / scored.data.sum()))
