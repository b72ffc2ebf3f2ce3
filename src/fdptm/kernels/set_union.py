"""Sequential update policies of DP set union, compiled with numba.

Each policy visits authors in a fixed (data-independent, seeded) order and lets each author
add weight to the histogram ``H`` over candidate items. What makes the histogram's
sensitivity 1 (in l1 for the Laplace policies, in l2 for the Gaussian one) is that every
author's total contribution is bounded by 1 in that norm and that items stop receiving
weight at the cut-off ``gamma`` (Gopi et al. 2020, section 3; Carvalho et al. 2022).

Authors are given as CSR slices: author ``a`` owns ``items[offsets[a]:offsets[a + 1]]``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def weighted_greedy(order, offsets, items, gamma, budget, hist):
    """Carvalho et al.: fill each author's items, in the author's own order, up to gamma.

    ``items`` of an author are pre-sorted by the author's own count (most frequent first).
    The author spends an l1 budget of ``budget``, topping items up to the cut-off in that
    order. In exact integer arithmetic (int64 ``hist``, ``gamma`` and ``budget``: weights
    in grid units, ``fdptm.mechanisms.set_union``): every step is a min, a difference or
    a sum of integers, so the update is exactly the one the contraction argument is about,
    with no rounding.
    """
    for a in order:
        left = budget
        for j in range(offsets[a], offsets[a + 1]):
            u = items[j]
            gap = gamma - hist[u]
            if gap <= 0:
                continue
            add = gap if gap < left else left
            hist[u] += add
            left -= add
            if left <= 0:
                break


@njit(cache=True, nogil=True)
def l1_descent(order, offsets, items, gamma, hist):
    """Gopi et al. policy Laplace: l1-descent with a budget of 1 (supplement, Algorithm 4).

    Water-filling: every item of the author still below gamma rises by the same amount
    ``L``, capped at its gap ``g_u = gamma - H[u]``, with ``sum_u min(g_u, L) = min(1,
    sum_u g_u)``; the smallest gaps saturate first. (Filling the smallest gaps *fully* one
    after the other is the greedy policy of the supplement's section E, which is not
    private: do not confuse the two.)
    """
    for a in order:
        start = offsets[a]
        n = offsets[a + 1] - start
        if n == 0:
            continue
        gaps = np.empty(n)
        for j in range(n):
            gaps[j] = gamma - hist[items[start + j]]
        ordered = np.sort(gaps)
        budget = 1.0
        level = 0.0
        for j in range(n):
            g = ordered[j]
            if g <= level:
                continue
            need = (g - level) * (n - j)
            if need <= budget:
                budget -= need
                level = g
            else:
                level += budget / (n - j)
                break
        for j in range(n):
            if gaps[j] > 0.0:
                hist[items[start + j]] += gaps[j] if gaps[j] < level else level


@njit(cache=True, nogil=True)
def l2_descent(order, offsets, items, gamma, hist):
    """Gopi et al. policy Gaussian: move toward the cut-off by at most 1 in l2 norm.

    With gap vector ``g_u = max(gamma - H[u], 0)`` over the author's items, the author adds
    ``g`` when ``||g||_2 <= 1`` and ``g / ||g||_2`` otherwise.
    """
    for a in order:
        start = offsets[a]
        stop = offsets[a + 1]
        norm2 = 0.0
        for j in range(start, stop):
            gap = gamma - hist[items[j]]
            if gap > 0.0:
                norm2 += gap * gap
        if norm2 == 0.0:
            continue
        scale = 1.0
        if norm2 > 1.0:
            scale = 1.0 / np.sqrt(norm2)
        for j in range(start, stop):
            u = items[j]
            gap = gamma - hist[u]
            if gap > 0.0:
                hist[u] += gap * scale


@njit(cache=True)
def _cut(offsets, limit):
    """Each author's kept size (``limit`` < 0: all) and the output offsets."""
    n = offsets.shape[0] - 1
    sizes = np.empty(n, dtype=np.int64)
    for a in range(n):
        size = offsets[a + 1] - offsets[a]
        sizes[a] = size if limit < 0 else min(size, limit)
    out_offsets = np.zeros(n + 1, dtype=np.int64)
    out_offsets[1:] = np.cumsum(sizes)
    return sizes, out_offsets


@njit(cache=True, parallel=True)
def reorder(offsets, items, counts, primary, limit):
    """Each author's items sorted by ``primary`` (stable) and cut to ``limit`` (-1: all).

    Returns new (offsets, items, counts); each author's slice depends on its own entries
    only, so the result does not depend on the number of threads."""
    sizes, out_offsets = _cut(offsets, limit)
    out_items = np.empty(out_offsets[-1], dtype=items.dtype)
    out_counts = np.empty(out_offsets[-1], dtype=counts.dtype)
    for a in prange(sizes.shape[0]):
        lo = offsets[a]
        order = np.argsort(primary[lo : offsets[a + 1]], kind="mergesort")
        at = out_offsets[a]
        for r in range(sizes[a]):
            out_items[at + r] = items[lo + order[r]]
            out_counts[at + r] = counts[lo + order[r]]
    return out_offsets, out_items, out_counts


@njit(cache=True, parallel=True)
def reorder_by_count(offsets, items, counts, tiebreak, limit):
    """``reorder`` with primary = (-count, tiebreak[item]) lexicographically: most frequent
    first, ties by ``tiebreak`` (a permutation of the items). The key is built per author
    (-count x n_items + tiebreak[item], in int64), never for every pair at once."""
    n_items = tiebreak.shape[0]
    sizes, out_offsets = _cut(offsets, limit)
    out_items = np.empty(out_offsets[-1], dtype=items.dtype)
    out_counts = np.empty(out_offsets[-1], dtype=counts.dtype)
    for a in prange(sizes.shape[0]):
        lo, hi = offsets[a], offsets[a + 1]
        key = np.empty(hi - lo, dtype=np.int64)
        for j in range(hi - lo):
            key[j] = -np.int64(counts[lo + j]) * n_items + tiebreak[items[lo + j]]
        order = np.argsort(key, kind="mergesort")
        at = out_offsets[a]
        for r in range(sizes[a]):
            out_items[at + r] = items[lo + order[r]]
            out_counts[at + r] = counts[lo + order[r]]
    return out_offsets, out_items, out_counts
