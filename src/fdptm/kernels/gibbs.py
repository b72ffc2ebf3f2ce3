"""Collapsed Gibbs sampling sweeps for LDA over flat token arrays, compiled with numba.

Corpus layout: document ``d`` owns tokens ``words[doc_ptr[d]:doc_ptr[d + 1]]``; ``z`` holds
one topic per token. Counts: ``n_dk`` (documents x topics), ``n_wk`` (words x topics, so a
word's topic counts are contiguous), ``n_k`` (tokens per topic). Randomness arrives as one
uniform per token per sweep, drawn by the caller from the run's generator, so the kernels
hold no random state of their own.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _draw(p, total, u):
    """Index of the first cumulative weight above ``u * total`` (inverse-CDF sampling)."""
    target = u * total
    k = 0
    last = p.shape[0] - 1
    while k < last and p[k] <= target:
        k += 1
    return k


@njit(cache=True, nogil=True)
def initialise(doc_ptr, words, z, n_dk, n_wk, n_k):
    """Counts from the topic assignments ``z``."""
    for d in range(doc_ptr.shape[0] - 1):
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            k = z[i]
            n_dk[d, k] += 1
            n_wk[words[i], k] += 1
            n_k[k] += 1


@njit(cache=True, nogil=True)
def cgs_sweep(doc_ptr, words, z, n_dk, n_wk, n_k, alpha, beta, uniforms):
    """One sweep of standard (non-private) collapsed Gibbs sampling for LDA.

    p(z_i = k | rest) is proportional to
    (n_wk[w, k] + beta) / (n_k[k] + V beta) * (n_dk[d, k] + alpha), all counts excluding
    token i (Griffiths & Steyvers 2004).
    """
    n_topics = n_k.shape[0]
    vbeta = n_wk.shape[0] * beta
    inv = np.empty(n_topics)
    for k in range(n_topics):
        inv[k] = 1.0 / (n_k[k] + vbeta)
    p = np.empty(n_topics)
    for d in range(doc_ptr.shape[0] - 1):
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            w = words[i]
            old = z[i]
            n_dk[d, old] -= 1
            n_wk[w, old] -= 1
            n_k[old] -= 1
            inv[old] = 1.0 / (n_k[old] + vbeta)
            total = 0.0
            for k in range(n_topics):
                total += (n_wk[w, k] + beta) * inv[k] * (n_dk[d, k] + alpha)
                p[k] = total
            new = _draw(p, total, uniforms[i])
            z[i] = new
            n_dk[d, new] += 1
            n_wk[w, new] += 1
            n_k[new] += 1
            inv[new] = 1.0 / (n_k[new] + vbeta)


@njit(cache=True, nogil=True)
def hdp_weights(n_wk, eta, clip, beta, sanitized, weights):
    """Sanitize the topic-word counts and build the clipped word factor of one iteration.

    ``sanitized = n_wk + eta`` (HDP-LDA Algorithm 1, line 11, on a copy: the true counts are
    left alone). ``weights[w, k] = (min(max(s, 0), C) + beta) / (sum_w max(s, 0) + V beta)``:
    line 14-15, the clipped count in the numerator and the sanitized topic total in the
    denominator (Appendix D uses the sanitized counts there). Flooring at 0 is
    post-processing of the sanitized counts and keeps the distribution valid.
    """
    n_words, n_topics = n_wk.shape
    colsum = np.zeros(n_topics)
    for w in range(n_words):
        for k in range(n_topics):
            s = n_wk[w, k] + eta[w, k]
            sanitized[w, k] = s
            if s > 0.0:
                colsum[k] += s
    for k in range(n_topics):
        colsum[k] = 1.0 / (colsum[k] + n_words * beta)
    for w in range(n_words):
        for k in range(n_topics):
            s = sanitized[w, k]
            if s < 0.0:
                s = 0.0
            elif s > clip:
                s = clip
            weights[w, k] = (s + beta) * colsum[k]


@njit(cache=True, nogil=True)
def hdp_sweep(doc_ptr, words, z, n_dk, n_wk, weights, alpha, uniforms):
    """One HDP-LDA sweep: sample every token from the iteration's fixed sanitized weights.

    p(z_i = k) is proportional to weights[w, k] * (n_dk[d, k] + alpha), the document term
    excluding token i. The word factor stays fixed for the whole sweep: it is a function of
    this iteration's sanitized counts only, which is what the proof of Theorem 3
    (Appendix D, eq. 30) needs for the loss on the related words to vanish. The true counts
    ``n_wk`` are updated (line 17) and only ever feed the next iteration's sanitization.
    """
    n_topics = n_dk.shape[1]
    p = np.empty(n_topics)
    for d in range(doc_ptr.shape[0] - 1):
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            w = words[i]
            old = z[i]
            n_dk[d, old] -= 1
            total = 0.0
            for k in range(n_topics):
                total += weights[w, k] * (n_dk[d, k] + alpha)
                p[k] = total
            new = _draw(p, total, uniforms[i])
            z[i] = new
            n_dk[d, new] += 1
            n_wk[w, old] -= 1
            n_wk[w, new] += 1


@njit(cache=True, nogil=True)
def noisy_sweep(doc_ptr, words, z, n_dk, n_wk, n_k, eta_dk, eta_wk, alpha, beta, uniforms):
    """One CGS sweep whose conditional reads Laplace-perturbed counts (Zhu; CDP-LDA/+).

    p(z_i = k) is proportional to
    (max(n_wk + eta_wk, 0) + beta) / (sum_w max(n_wk + eta_wk, 0) + V beta)
    * (max(n_dk + eta_dk, 0) + alpha), counts excluding token i, which is the collapsed
    conditional of Griffiths & Steyvers evaluated at the noisy counts. Negative noisy counts
    are floored at 0 factor by factor, so every topic keeps a positive probability
    (beta, alpha > 0). Min-max normalising the conditional instead, as the FDPTM authors'
    reference code does, sets the least likely topic's probability to exactly 0, which
    neither the sampler nor the privacy argument allows. ``n_k`` tracks the true topic totals
    and the noisy totals are kept in step with it as tokens move.
    """
    n_words, n_topics = n_wk.shape
    vbeta = n_words * beta
    noisy_total = np.zeros(n_topics)
    for w in range(n_words):
        for k in range(n_topics):
            s = n_wk[w, k] + eta_wk[w, k]
            if s > 0.0:
                noisy_total[k] += s
    p = np.empty(n_topics)
    for d in range(doc_ptr.shape[0] - 1):
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            w = words[i]
            old = z[i]
            _move(n_wk, eta_wk, noisy_total, w, old, -1)
            n_dk[d, old] -= 1
            n_k[old] -= 1
            total = 0.0
            for k in range(n_topics):
                sw = n_wk[w, k] + eta_wk[w, k]
                sd = n_dk[d, k] + eta_dk[d, k]
                total += (max(sw, 0.0) + beta) / (noisy_total[k] + vbeta) * (max(sd, 0.0) + alpha)
                p[k] = total
            new = _draw(p, total, uniforms[i])
            z[i] = new
            n_dk[d, new] += 1
            n_k[new] += 1
            _move(n_wk, eta_wk, noisy_total, w, new, 1)


@njit(cache=True, inline="always")
def _move(n_wk, eta_wk, noisy_total, w, k, step):
    """Change n_wk[w, k] by ``step`` and keep the floored noisy topic total in step."""
    before = n_wk[w, k] + eta_wk[w, k]
    n_wk[w, k] += step
    after = before + step
    noisy_total[k] += max(after, 0.0) - max(before, 0.0)


@njit(cache=True, nogil=True)
def cgs_sweep_prior(doc_ptr, words, z, n_dk, n_wk, n_k, alpha, beta_wk, beta_k, uniforms):
    """One CGS sweep with a topic-word prior matrix (O-LDA, hdp-lda-lp-lda-olp-lda.txt eq. 12).

    p(z_i = k | rest) is proportional to
    (n_wk[w, k] + beta_wk[w, k]) / (n_k[k] + beta_k[k]) * (n_dk[d, k] + alpha), counts
    excluding token i, with ``beta_k[k] = sum_w beta_wk[w, k]``. With every beta_wk equal to
    beta this is ``cgs_sweep``.
    """
    n_topics = n_k.shape[0]
    inv = np.empty(n_topics)
    for k in range(n_topics):
        inv[k] = 1.0 / (n_k[k] + beta_k[k])
    p = np.empty(n_topics)
    for d in range(doc_ptr.shape[0] - 1):
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            w = words[i]
            old = z[i]
            n_dk[d, old] -= 1
            n_wk[w, old] -= 1
            n_k[old] -= 1
            inv[old] = 1.0 / (n_k[old] + beta_k[old])
            total = 0.0
            for k in range(n_topics):
                total += (n_wk[w, k] + beta_wk[w, k]) * inv[k] * (n_dk[d, k] + alpha)
                p[k] = total
            new = _draw(p, total, uniforms[i])
            z[i] = new
            n_dk[d, new] += 1
            n_wk[w, new] += 1
            n_k[new] += 1
            inv[new] = 1.0 / (n_k[new] + beta_k[new])
