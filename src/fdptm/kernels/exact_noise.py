"""Compiled fast path of the exact discrete Laplace and Gaussian samplers (``fdptm.privacy.exact``).

The algorithms are Canonne, Kamath and Steinke's (The Discrete Gaussian for Differential
Privacy, NeurIPS 2020, section 5): Algorithm 2 (discrete Laplace of scale t/s) and
Algorithm 3 (discrete Gaussian, rejection from the discrete Laplace of scale
floor(sigma) + 1). Every Bernoulli(exp(-x)) they need is decided as [W < exp(-x)] for a
uniform W in [0, 1) whose first 53 bits are the top of one keystream word: with
w = word >> 11, W lies in [w 2^-53, (w + 1) 2^-53). The kernel computes exp(-x) in floating
point and a bracket [lo, hi] that contains the exact value (``bernoulli_exp``); when W's
interval lies wholly below lo or wholly above hi the comparison is decided exactly. When
it does not (probability about 2 margin (1 + x) exp(-x) + 2^-53 per comparison, below
10^-11 at the default margin), the draw stops at that comparison and its state (stage, U,
V, Y and w) is handed to exact rational arithmetic in Python, which reads further bits of
W and finishes the draw (``fdptm.privacy.exact.laplace_from`` and ``gaussian_from``). A draw
also stops, at the stage where it is, when its keystream buffer runs out or an integer
would leave int64.

Only the bits of the keystream decide anything; the data never enters these kernels, and
the number of words a draw consumes depends only on those bits and the public scale.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

DONE, START, STAGE_D, STAGE_GEO, STAGE_SIGN, STAGE_C = 0, 1, 2, 3, 4, 5
"""Stages of a draw: finished, before drawing U, at D ~ Bernoulli(exp(-U/t)), at the next
A ~ Bernoulli(exp(-1)) of the geometric loop, at the sign bit, at the Gaussian's
acceptance C ~ Bernoulli(exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)))."""
NO_WORD = -1
"""State word of a stop that has not drawn the comparison's word yet."""
RESERVE = 64
"""A draw starts only when at least this many words remain in its buffer (production's
``reserve``; a longer draw stops where it runs out and finishes in Python)."""
LIMIT = 1 << 62
"""U + t V, |Y| and every parameter stay below this (exact in int64); a draw about to
pass it stops and finishes in Python's integers."""
EXACT_FLOAT = 1 << 53
"""|Y| below this converts to f64 exactly (the Gaussian's acceptance argument)."""
_ULP = 2.0**-53
_TINY = 2.0**-1022
"""Absolute slack of the bracket: exp(-x) computed below 2^-1022 (subnormal, or 0 past
x = 745) may have lost its relative accuracy, never more than 2^-1074 absolutely."""


@njit(cache=True, nogil=True, inline="always")
def bernoulli_exp(x, word, margin):
    """1 if W < exp(-x), 0 if W >= exp(-x), -1 if the bracket cannot tell.

    ``x`` >= 0 is the computed argument, within 8 (1 + x) 2^-53 of the exact one: U / t
    (Algorithm 2's coin) is float(U) / float(t), three roundings when t > 2^53, so within
    3 x 2^-53 relative; the Gaussian's argument is ``gaussian_block``'s docstring. The
    computed exp(-x) is within one ulp of exp of the computed argument (the platform libm's
    documented bound; glibc's exp is correctly rounded in practice), so the exact value lies
    within relative 2^-50 (1 + x) + 2^-52 of it, which margin (1 + x) with margin >= 2^-40
    covers 500 times over, plus _TINY absolutely (the review measured the worst case at
    5 x 10^-4 of the margin).
    w 2^-53 and (w + 1) 2^-53 are exact doubles (w < 2^53), so both comparisons are exact.
    """
    w = float(word >> np.uint64(11))
    p = math.exp(-x)
    slack = margin * (1.0 + x)
    if (w + 1.0) * _ULP <= p * (1.0 - slack) - _TINY:
        return 1
    if w * _ULP >= p * (1.0 + slack) + _TINY:
        return 0
    return -1


@njit(cache=True, nogil=True)
def _laplace(t, s, mask, words, pos, margin):
    """One CKS Algorithm 2 draw of scale t/s from ``words[pos:]``.

    Returns (stage, value, u, v, word, pos): stage DONE with the value, or the stage at
    which the draw stopped with its state (u, v) and the undecided comparison's word
    (NO_WORD if that word was not drawn yet).
    """
    n = words.shape[0]
    tf = float(t)
    while True:
        while True:
            if pos == n:
                return START, 0, 0, 0, NO_WORD, pos
            u = np.int64(words[pos] & mask)
            pos += 1
            if u < t:
                break
        if pos == n:
            return STAGE_D, 0, u, 0, NO_WORD, pos
        word = words[pos]
        pos += 1
        d = bernoulli_exp(float(u) / tf, word, margin)
        if d < 0:
            return STAGE_D, 0, u, 0, np.int64(word >> np.uint64(11)), pos
        if d == 0:
            continue
        v = 0
        while True:
            if pos == n or v >= (LIMIT - u) // t - 1:
                return STAGE_GEO, 0, u, v, NO_WORD, pos
            word = words[pos]
            pos += 1
            a = bernoulli_exp(1.0, word, margin)
            if a < 0:
                return STAGE_GEO, 0, u, v, np.int64(word >> np.uint64(11)), pos
            if a == 0:
                break
            v += 1
        if pos == n:
            return STAGE_SIGN, 0, u, v, NO_WORD, pos
        negative = words[pos] >> np.uint64(63)
        pos += 1
        y = (u + t * v) // s
        if negative == 1 and y == 0:
            continue
        return DONE, -y if negative == 1 else y, u, v, NO_WORD, pos


@njit(cache=True, nogil=True)
def laplace_block(out, start, words, t, s, margin, reserve, stops, n_stops):
    """Discrete Laplace draws of scale t/s into ``out[start:]`` until fewer than ``reserve``
    words remain (a draw is started only with that many; RESERVE in production).

    Returns (next index, stops recorded). A stopped draw leaves 0 in ``out`` and a row
    (index, stage, u, v, y, word) in ``stops`` for ``fdptm.privacy.exact`` to finish.
    """
    mask = _mask(t)
    pos = 0
    i = start
    while i < out.shape[0]:
        if words.shape[0] - pos < reserve:
            return i, n_stops
        stage, y, u, v, word, pos = _laplace(t, s, mask, words, pos, margin)
        if stage == DONE:
            out[i] = y
        else:
            out[i] = 0
            _record(stops, n_stops, i, stage, u, v, 0, word)
            n_stops += 1
        i += 1
    return i, n_stops


@njit(cache=True, nogil=True)
def gaussian_block(out, start, words, t, sigma2, margin, reserve, stops, n_stops):
    """Discrete Gaussian draws (CKS Algorithm 3, t = floor(sigma) + 1) into ``out[start:]``.

    The acceptance argument (|Y| < 2^53, so float(|Y|) is exact; t rounds once when above
    2^53, within the bound below) (|Y| - sigma2 / t)^2 / (2 sigma2) is computed from sigma2 (the
    exact sigma^2 rounded once) in four more roundings: its absolute error is at most
    2^-53 (3 |Y - sigma^2/t| / sigma + 5 x) <= 8 (1 + x) 2^-53, because sigma^2 / t <= sigma
    (the cancellation in |Y| - sigma^2/t costs at most 3 ulps of sigma^2 / t) and
    |Y - sigma^2/t| / sigma = sqrt(2 x). Same return and stops as ``laplace_block``.
    """
    mask = _mask(t)
    center = sigma2 / float(t)
    twice = 2.0 * sigma2
    n = words.shape[0]
    pos = 0
    i = start
    while i < out.shape[0]:
        if n - pos < reserve:
            return i, n_stops
        while True:
            stage, y, u, v, word, pos = _laplace(t, 1, mask, words, pos, margin)
            if stage != DONE:
                break
            if pos == n or abs(y) >= EXACT_FLOAT:
                stage, word = STAGE_C, NO_WORD
                break
            word = words[pos]
            pos += 1
            gap = float(abs(y)) - center
            c = bernoulli_exp(gap * gap / twice, word, margin)
            if c == 1:
                break
            if c < 0:
                stage, word = STAGE_C, np.int64(word >> np.uint64(11))
                break
        if stage == DONE:
            out[i] = y
        else:
            out[i] = 0
            _record(stops, n_stops, i, stage, u, v, y, word)
            n_stops += 1
        i += 1
    return i, n_stops


@njit(cache=True, nogil=True, inline="always")
def _record(stops, row, index, stage, u, v, y, word):
    stops[row, 0] = index
    stops[row, 1] = stage
    stops[row, 2] = u
    stops[row, 3] = v
    stops[row, 4] = y
    stops[row, 5] = word


@njit(cache=True, nogil=True, inline="always")
def _mask(t):
    """2^L - 1 for L the bit length of t - 1: U is drawn uniform on [0, t) by rejection
    from L-bit values (each accepted with probability t / 2^L > 1/2)."""
    mask = 0
    while mask < t - 1:
        mask = 2 * mask + 1
    return np.uint64(mask)
