"""Empirical LDA moments for spectral LDA, computed from sparse document-word counts.

The estimators are those of dp-spectral-lda.txt, Lemma 21 (appendix C), with the typos
corrected that its own unbiasedness proof (Lemma 22) and Anandkumar et al. (2014, Theorem
3.5) settle:

* per document n with counts c_n and length l_n (eqs. 2-4): M1^n = c_n / l_n,
  M2^n = (c_n c_n^T - diag(c_n)) / (l_n (l_n - 1)), and M3^n the analogous count of
  ordered triples of distinct token positions divided by l_n (l_n - 1) (l_n - 2). Each is a
  probability vector / matrix / tensor (Proposition 27): non-negative, entries sum to 1.
* M2 = (1/N) sum_n M2^n - a / (N (N - 1)) sum_{n != m} M1^n (x) M1^m, a = alpha0/(alpha0+1).
* M3 = (1/N) sum_n M3^n + B1 + B2 + B3 + b-term, with
  B1 = b / (N (N - 1)) sum_{n != m} M2^n (x) M1^m (the M1 factor in mode 3; B2 and B3 put
  it in modes 2 and 1), b = -alpha0/(alpha0+2), and the b-term
  c / (N (N - 1) (N - 2)) sum over distinct n, m, p of M1^n (x) M1^m (x) M1^p,
  c = 2 alpha0^2 / ((alpha0+1)(alpha0+2)).
  Lemma 21 as printed omits the n != m restriction in B1 and the distinct-triple sum and
  its normalisation in the b-term (both are what the proof of Lemma 22 uses), defines B3
  as a copy of B2 ([B1]_kij = [B1]_ikj for a symmetric M2), writes -1/(alpha0+2) instead of
  -alpha0/(alpha0+2) in Lemma 3, and multiplies M3 by d = alpha0(alpha0+1)(alpha0+2)/2,
  which contradicts E[M3_hat] = M3 (Lemma 22); d only rescales the tensor (and would
  rescale its sensitivity with it), so it is left out.

Documents too short for an order (l_n < 1, 2, 3 for M1, M2, M3) contribute zero to that
order's per-document sum but still count in N: the adjacency is replace-one-document with N
fixed, and dropping them would make N depend on the data. They bias the estimate (the
order-r raw moment is scaled by the share of documents with at least r tokens), never the
sensitivity.

Nothing here forms a V x V x V tensor or a dense per-document outer product: the second
moment is one sparse product C^T diag(w) C; the third moment is only ever needed projected,
M3(W, W, W) for a V x k matrix W, and is computed from the projected counts C W, with the
diagonal corrections of eq. (4) expressed through sums over words of rows of W.

Sensitivities (replace one document, N fixed; Frobenius = l2 norm over all entries):
Delta_2 = sqrt(2) (1 + 2a) / N and Delta_3 = sqrt(2) (1 + 6|b| + 3c) / N; see
``sensitivity_m2`` and ``sensitivity_m3``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

_CHUNK = 8192


def coefficients(alpha0: float) -> tuple[float, float, float]:
    """(a, b, c) of Lemma 21: alpha0/(alpha0+1), -alpha0/(alpha0+2), 2 alpha0^2/((..)(..))."""
    a = alpha0 / (alpha0 + 1.0)
    b = -alpha0 / (alpha0 + 2.0)
    c = 2.0 * alpha0**2 / ((alpha0 + 1.0) * (alpha0 + 2.0))
    return a, b, c


def sensitivity_m2(n_docs: int, alpha0: float) -> float:
    """l2 (Frobenius) sensitivity of M2_hat under replace-one-document: sqrt(2)(1 + 2a)/N.

    Appendix H.1 with l2 instead of l1 norms. Replacing document N changes M2_hat by
    (M2^N - M2^N')/N - (a/N)(u p^T + p u^T), u = M1^N - M1^N', p = mean of the other
    documents' M1^m. M2^N, M2^N' are non-negative with entries summing to at most 1, so
    their Frobenius norms are at most 1 and, having a non-negative inner product,
    ||M2^N - M2^N'||_F <= sqrt(2); likewise ||u||_2 <= sqrt(2), and ||p||_2 <= ||p||_1 <= 1.
    The paper's l1 bound (2 + 4a)/N is larger by sqrt(2).
    """
    a, _, _ = coefficients(alpha0)
    return math.sqrt(2.0) * (1.0 + 2.0 * a) / n_docs


def sensitivity_m3(n_docs: int, alpha0: float) -> float:
    """l2 (Frobenius) sensitivity of M3_hat under replace-one-document.

    sqrt(2)(1 + 6|b| + 3c)/N, the argument of appendix H.2 in l2 norms: sqrt(2)/N for the
    mean of the M3^n; for EACH of B1, B2, B3 the change is
    (|b|/N) [(M2^N - M2^N') (x) p1 + P2 (x) (M1^N - M1^N')] with p1, P2 means of the other
    documents' M1^m, M2^n, at most 2 sqrt(2)|b|/N; for the b-term the replaced document sits
    in one of three modes, each term (c/N) u (x) P12 with ||P12||_F <= 1, at most
    3 sqrt(2) c/N. The paper's Delta_3 counts the B-terms once instead of three times.
    """
    _, b, c = coefficients(alpha0)
    return math.sqrt(2.0) * (1.0 + 6.0 * abs(b) + 3.0 * c) / n_docs


def _inverse_falling(lengths: np.ndarray, order: int) -> np.ndarray:
    """1 / (l (l-1) ... (l-order+1)) where l >= order, else 0."""
    out = np.zeros_like(lengths)
    ok = lengths >= order
    fall = np.ones(int(ok.sum()))
    for j in range(order):
        fall *= lengths[ok] - j
    out[ok] = 1.0 / fall
    return out


def _khatri_rao(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row-wise Kronecker product: row n is kron(x_n, y_n)."""
    return (x[:, :, None] * y[:, None, :]).reshape(x.shape[0], -1)


def weighted_cubes(y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """sum_n weights_n y_n (x) y_n (x) y_n for the rows y_n of y, in chunks of rows."""
    k = y.shape[1]
    out = np.zeros((k, k * k))
    for start in range(0, y.shape[0], _CHUNK):
        block = y[start : start + _CHUNK]
        out += (block * weights[start : start + _CHUNK, None]).T @ _khatri_rao(block, block)
    return out.reshape(k, k, k)


def pair_placements(w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """sum_i of w_i (x) w_i (x) h_i with the h factor in mode 3, 2 and 1 (three terms)."""
    k = w.shape[1]
    x = (_khatri_rao(w, w).T @ h).reshape(k, k, k)
    return single_placements(x)


def single_placements(x: np.ndarray) -> np.ndarray:
    """x_abc + x_acb + x_bca: a tensor symmetric in modes (1, 2) with its mode 3 moved."""
    return x + x.transpose(0, 2, 1) + x.transpose(2, 0, 1)


@dataclass(frozen=True)
class DocumentMoments:
    """The sparse counts of a corpus and the per-document weights of the estimators."""

    counts: sp.csr_matrix
    lengths: np.ndarray
    alpha0: float

    @classmethod
    def from_tokens(
        cls, doc_ptr: np.ndarray, words: np.ndarray, n_words: int, alpha0: float
    ) -> DocumentMoments:
        """Counts from flat token arrays (document d owns words[doc_ptr[d]:doc_ptr[d+1]]).

        The arrays are copied: scipy sorts and merges the indices of a CSR matrix in place,
        which would reorder and overwrite the caller's tokens.
        """
        n_docs = len(doc_ptr) - 1
        counts = sp.csr_matrix(
            (np.ones(len(words)), np.array(words, dtype=np.int64), np.array(doc_ptr, np.int64)),
            shape=(n_docs, n_words),
        )
        counts.sum_duplicates()
        lengths = np.asarray(counts.sum(axis=1)).ravel()
        return cls(counts, lengths, float(alpha0))

    @property
    def n_docs(self) -> int:
        return self.counts.shape[0]

    @property
    def n_words(self) -> int:
        return self.counts.shape[1]

    def _inv_length(self) -> np.ndarray:
        return _inverse_falling(self.lengths, 1)

    def _first_moment_sum(self) -> np.ndarray:
        """s1 = sum_n M1^n (a V-vector)."""
        return self.counts.T @ self._inv_length()

    def _second_parts(self) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
        """M2_hat = C^T diag(beta) C - diag(C^T beta_diag) - gamma s1 s1^T.

        beta folds the (1/N) sum of M2^n and the +a/(N(N-1)) sum_n M1^n M1^n^T correction;
        beta_diag is the diag(c_n) part of M2^n.
        """
        n = self.n_docs
        a, _, _ = coefficients(self.alpha0)
        w2 = _inverse_falling(self.lengths, 2) / n
        gamma = a / (n * (n - 1.0))
        beta = w2 + gamma * self._inv_length() ** 2
        return beta, self.counts.T @ w2, gamma, self._first_moment_sum()

    def m2_dense(self) -> np.ndarray:
        """M2_hat as a dense V x V array (one sparse product; no per-document outer products)."""
        beta, diag, gamma, s1 = self._second_parts()
        weighted = sp.csr_matrix(self.counts.multiply(beta[:, None]))
        m2 = (self.counts.T.tocsr() @ weighted).toarray()
        m2[np.diag_indices_from(m2)] -= diag
        m2 -= gamma * np.outer(s1, s1)
        return m2

    def m2_operator(self) -> LinearOperator:
        """M2_hat as a symmetric linear operator (for a truncated eigensolver)."""
        beta, diag, gamma, s1 = self._second_parts()
        counts = self.counts
        counts_t = counts.T.tocsr()

        def matmat(x: np.ndarray) -> np.ndarray:
            x = x.reshape(self.n_words, -1)
            out = counts_t @ (beta[:, None] * (counts @ x))
            return out - diag[:, None] * x - gamma * np.outer(s1, s1 @ x)

        shape = (self.n_words, self.n_words)
        return LinearOperator(shape, matvec=matmat, matmat=matmat, dtype=np.float64)

    def m2_project(self, w: np.ndarray) -> np.ndarray:
        """W^T M2_hat W (k x k) from the projected counts C W."""
        beta, diag, gamma, s1 = self._second_parts()
        y = self.counts @ w
        s = w.T @ s1
        return y.T @ (beta[:, None] * y) - (w.T * diag) @ w - gamma * np.outer(s, s)

    def m3_project(self, w: np.ndarray) -> np.ndarray:
        """M3_hat(W, W, W) (k x k x k) without forming the V x V x V tensor.

        With y_n = W^T c_n, z_n = y_n / l_n = W^T M1^n and w_i the i-th row of W:
        sum_{i,j} c_i c_j w_i (x) w_i (x) w_j = Q_n (x) y_n with Q_n = sum_i c_i w_i w_i^T,
        so every diagonal correction of eq. (4) is a weighted sum over words of rows of W
        and of H = C^T diag(weights) Y.
        """
        n = float(self.n_docs)
        _, b, c = coefficients(self.alpha0)
        counts = self.counts
        y = counts @ w
        inv_l = self._inv_length()
        z = y * inv_l[:, None]
        sz = z.sum(axis=0)
        # (1/N) sum_n M3^n(W, W, W), eq. (4)
        w3 = _inverse_falling(self.lengths, 3) / n
        g3 = counts.T @ w3
        k = w.shape[1]
        diag3 = ((w * g3[:, None]).T @ _khatri_rao(w, w)).reshape(k, k, k)
        tensor = weighted_cubes(y, w3) + 2.0 * diag3
        tensor -= pair_placements(w, counts.T @ (w3[:, None] * y))
        # B1 + B2 + B3: b/(N(N-1)) sum_{n != m} M2^n (x) M1^m, M1 in each of the three modes
        w2 = _inverse_falling(self.lengths, 2)
        m2_sum = y.T @ (w2[:, None] * y) - (w.T * (counts.T @ w2)) @ w
        w21 = w2 * inv_l
        own = weighted_cubes(y, w21)
        own -= (_khatri_rao(w, w).T @ (counts.T @ (w21[:, None] * y))).reshape(k, k, k)
        cross = np.einsum("ab,c->abc", m2_sum, sz) - own
        tensor += b / (n * (n - 1.0)) * single_placements(cross)
        # b-term: c/(N(N-1)(N-2)) sum over distinct triples of z_n (x) z_m (x) z_p
        pairs = np.einsum("ab,c->abc", z.T @ z, sz)
        distinct = np.einsum("a,b,c->abc", sz, sz, sz) - single_placements(pairs)
        distinct += 2.0 * weighted_cubes(z, np.ones(self.n_docs))
        tensor += c / (n * (n - 1.0) * (n - 2.0)) * distinct
        return tensor


def multilinear(t: np.ndarray, a: np.ndarray) -> np.ndarray:
    """T(A, A, A): the k x k x k tensor t multiplied by a (k x j) in every mode."""
    return np.einsum("abc,ai,bj,ck->ijk", t, a, a, a, optimize=True)


def symmetrize(t: np.ndarray) -> np.ndarray:
    """The mean of a 3-way tensor over the six permutations of its modes."""
    perms = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
    return sum(t.transpose(p) for p in perms) / 6.0
