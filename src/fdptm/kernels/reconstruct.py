"""LP-LDA's server side over packed reports, compiled with numba (section V-B, steps 1, 3-5).

Reports are an M x ceil(V/8) uint8 array; bit t of report m is bit t % 8 of byte t // 8. The
reports are cut into fixed blocks of ``BLOCK`` rows; blocks run in parallel (numba
``prange``) and the results do not depend on the number of threads: counts are integer
sums, and each block's random choices come from its own seed and its own share of each
column's target, drawn before the blocks run.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

BLOCK = 1 << 16
"""Reports per block."""


@njit(cache=True, inline="always")
def _low_bit(b):
    """The index of the lowest set bit of ``b`` (> 0) and ``b`` without it."""
    low = b & -b
    bit = 0
    while (low >> bit) != 1:
        bit += 1
    return bit, b ^ low


@njit(cache=True, nogil=True, parallel=True)
def block_counts(reports, n_words, block):
    """Step 1 per block: out[b, t] = the reports of block b with bit t set. A histogram of
    byte values per byte position, then 8 bits per value: the cost is per byte, not per set
    bit, so dense reports (small epsilon) cost no more than sparse ones."""
    n_rows, width = reports.shape
    n_blocks = (n_rows + block - 1) // block
    out = np.zeros((n_blocks, n_words), dtype=np.int64)
    for b in prange(n_blocks):
        hist = np.zeros((width, 256), dtype=np.int64)
        for m in range(b * block, min(n_rows, (b + 1) * block)):
            for j in range(width):
                hist[j, reports[m, j]] += 1
        for j in range(width):
            for v in range(1, 256):
                c = hist[j, v]
                if c:
                    rest = v
                    while rest:
                        bit, rest = _low_bit(rest)
                        t = 8 * j + bit
                        if t < n_words:
                            out[b, t] += c
    return out


def column_counts(reports: np.ndarray, n_words: int) -> np.ndarray:
    """Step 1: n_t, the number of reports with bit t set, for t < n_words."""
    return block_counts(reports, n_words, BLOCK).sum(axis=0)


def _bit_table() -> tuple[np.ndarray, np.ndarray]:
    """For every byte value, how many bits it sets and which (lowest first)."""
    ones = np.zeros((256, 8), dtype=np.int64)
    count = np.zeros(256, dtype=np.int64)
    for v in range(256):
        bits = [b for b in range(8) if (v >> b) & 1]
        ones[v, : len(bits)] = bits
        count[v] = len(bits)
    return count, ones


_COUNT, _ONES = _bit_table()


@njit(cache=True, inline="always")
def _uniform(state):
    """SplitMix64 (Steele, Lea & Flood 2014): the next state and a uniform in [0, 1) with 53
    random bits. Post-processing randomness only: it needs to be well spread, not secret."""
    state = state + np.uint64(0x9E3779B97F4A7C15)
    z = state
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return state, np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, inline="always")
def _choose(state, want, remain, t):
    """One step of selection sampling in column t: choose this item with probability
    want[t] / remain[t], and count it off."""
    state, u = _uniform(state)
    chosen = u * remain[t] < want[t]
    if chosen:
        want[t] -= 1
    remain[t] -= 1
    return state, chosen


@njit(cache=True, nogil=True, parallel=True)
def _select(reports, grow, growing, need, left, seeds, block, starts, doc_ptr, words, count, ones):
    """Knuth's selection sampling (Algorithm S) per column within each block: a shrinking
    column keeps need[b, t] of its left[b, t] ones in block b, a growing one keeps every one
    and sets need[b, t] of its left[b, t] zeros."""
    n_rows = reports.shape[0]
    for b in prange(len(seeds)):
        state = np.uint64(seeds[b])
        want = need[b].copy()
        remain = left[b].copy()
        pos = starts[b]
        for m in range(b * block, min(n_rows, (b + 1) * block)):
            for j in range(reports.shape[1]):
                byte = reports[m, j]
                for k in range(count[byte]):
                    t = 8 * j + ones[byte, k]
                    if grow[t]:
                        words[pos] = t
                        pos += 1
                    else:
                        state, chosen = _choose(state, want, remain, t)
                        if chosen:
                            words[pos] = t
                            pos += 1
            for g in range(growing.shape[0]):
                t = growing[g]
                if (reports[m, t >> 3] >> (t & 7)) & 1 == 0:
                    state, chosen = _choose(state, want, remain, t)
                    if chosen:
                        words[pos] = t
                        pos += 1
            doc_ptr[m + 1] = pos


def _shares(need: np.ndarray, per_block: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Split each column's ``need`` over the blocks as a uniform sample would: block by block,
    a hypergeometric draw of the need left among the items left (multivariate
    hypergeometric), so that selecting within blocks is a uniform subset of the column."""
    shares = np.zeros_like(per_block)
    left_need = need.copy()
    left_items = per_block.sum(axis=0)
    for b in range(per_block.shape[0]):
        good = per_block[b]
        if b == per_block.shape[0] - 1:
            shares[b] = left_need
            break
        shares[b] = rng.hypergeometric(good, left_items - good, left_need)
        left_need -= shares[b]
        left_items -= good
    return shares


def reconstruct(
    reports: np.ndarray,
    targets: np.ndarray,
    seed: int,
    per_block: np.ndarray | None = None,
    block: int = BLOCK,
) -> tuple[np.ndarray, np.ndarray]:
    """Steps 3-5: a dataset whose column t has exactly ``targets[t]`` ones, as documents.

    Column t with targets[t] <= n_t keeps a uniformly random targets[t] of its n_t ones
    (step 4, delta_t < 0: |delta_t| random ones set to 0); a column with targets[t] > n_t
    keeps all its ones and sets a uniformly random targets[t] - n_t of its zeros
    (delta_t > 0). Each column's choice is split over the blocks by a multivariate
    hypergeometric draw and made within each block by selection sampling, which together
    draw a uniform subset of the exact size (each block's choices from SplitMix64 seeded
    from ``seed``). Returns (doc_ptr, words): report m's
    words are words[doc_ptr[m]:doc_ptr[m+1]]. Post-processing of the reports; the
    randomness comes from ``seed``. ``per_block``: ``block_counts`` (over blocks of ``block``
    rows) when already computed.
    """
    n_rows, n_words = reports.shape[0], len(targets)
    if per_block is None:
        per_block = block_counts(reports, n_words, block)
    counts = per_block.sum(axis=0)
    grow = targets > counts
    rows = np.minimum(block, n_rows - block * np.arange(per_block.shape[0]))
    items = np.where(grow, rows[:, None] - per_block, per_block)  # zeros where growing
    need = np.where(grow, targets - counts, targets)
    rng = np.random.default_rng(seed)
    shares = _shares(need, items, rng)
    tokens = np.where(grow, per_block + shares, shares).sum(axis=1)
    starts = np.concatenate([[0], np.cumsum(tokens)]).astype(np.int64)
    doc_ptr = np.zeros(n_rows + 1, dtype=np.int64)
    words = np.empty(int(starts[-1]), dtype=np.int32)
    seeds = rng.integers(0, 2**63 - 1, per_block.shape[0], dtype=np.uint64)
    _select(reports, grow, np.flatnonzero(grow), shares, items, seeds, block, starts,
            doc_ptr, words, _COUNT, _ONES)  # fmt: skip
    return doc_ptr, words
