"""LP-LDA's server side over packed reports, compiled with numba (section V-B, steps 1, 3-5).

Reports are an M x ceil(V/8) uint8 array; bit t of report m is bit t % 8 of byte t // 8.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _low_bit(b):
    """The index of the lowest set bit of ``b`` (> 0) and ``b`` without it."""
    low = b & -b
    bit = 0
    while (low >> bit) != 1:
        bit += 1
    return bit, b ^ low


@njit(cache=True, nogil=True)
def column_counts(reports, n_words):
    """Step 1: n_t, the number of reports with bit t set, for t < n_words."""
    counts = np.zeros(n_words, dtype=np.int64)
    for m in range(reports.shape[0]):
        for j in range(reports.shape[1]):
            b = np.int64(reports[m, j])
            while b:
                bit, b = _low_bit(b)
                counts[8 * j + bit] += 1
    return counts


@njit(cache=True, nogil=True)
def reconstruct(reports, targets, counts, seed):
    """Steps 3-5: a dataset whose column t has exactly ``targets[t]`` ones, as documents.

    Column t with targets[t] <= counts[t] keeps a uniformly random targets[t] of its
    counts[t] ones (step 4, delta_t < 0: |delta_t| random ones set to 0); a column with
    targets[t] > counts[t] keeps all its ones and sets a uniformly random
    targets[t] - counts[t] of its zeros (delta_t > 0). Both are Knuth's selection sampling
    (Algorithm S) over the reports in order, which draws an exactly uniform subset of the
    exact size. Returns (doc_ptr, words): report m's words are words[doc_ptr[m]:doc_ptr[m+1]].
    Post-processing of the reports; the randomness is numba's generator seeded with ``seed``.
    """
    np.random.seed(seed)
    n_rows = reports.shape[0]
    n_words = targets.shape[0]
    need = np.empty(n_words, dtype=np.int64)
    left = np.empty(n_words, dtype=np.int64)
    grow = np.zeros(n_words, dtype=np.bool_)
    n_grow = 0
    for t in range(n_words):
        if targets[t] > counts[t]:
            grow[t] = True
            n_grow += 1
            need[t] = targets[t] - counts[t]
            left[t] = n_rows - counts[t]
        else:
            need[t] = targets[t]
            left[t] = counts[t]
    growing = np.empty(n_grow, dtype=np.int64)
    g = 0
    for t in range(n_words):
        if grow[t]:
            growing[g] = t
            g += 1
    doc_ptr = np.zeros(n_rows + 1, dtype=np.int64)
    words = np.empty(targets.sum(), dtype=np.int32)
    pos = 0
    for m in range(n_rows):
        for j in range(reports.shape[1]):
            b = np.int64(reports[m, j])
            while b:
                bit, b = _low_bit(b)
                t = 8 * j + bit
                if grow[t]:
                    words[pos] = t
                    pos += 1
                else:
                    if np.random.random() * left[t] < need[t]:
                        words[pos] = t
                        pos += 1
                        need[t] -= 1
                    left[t] -= 1
        for g in range(n_grow):
            t = growing[g]
            if (reports[m, t >> 3] >> (t & 7)) & 1 == 0:
                if np.random.random() * left[t] < need[t]:
                    words[pos] = t
                    pos += 1
                    need[t] -= 1
                left[t] -= 1
        doc_ptr[m + 1] = pos
    return doc_ptr, words
