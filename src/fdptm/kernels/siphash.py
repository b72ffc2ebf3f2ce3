"""SipHash-2-4 (Aumasson and Bernstein 2012), a keyed pseudorandom function, compiled with
numba over Arrow's string layout (one UTF-8 buffer and its offsets).

Contribution bounding uses it to order each author's documents by a keyed hash, a uniformly
random order that is fixed given the key and depends on the author's own documents only.
It replaces a Python ``hashlib.blake2b`` call per document (two microseconds each) by a
vectorised pass. Checked against the reference implementation's test vectors.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_C0 = np.uint64(0x736F6D6570736575)
_C1 = np.uint64(0x646F72616E646F6D)
_C2 = np.uint64(0x6C7967656E657261)
_C3 = np.uint64(0x7465646279746573)


@njit(cache=True, inline="always")
def _rotl(x, b):
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@njit(cache=True, inline="always")
def _rounds(v0, v1, v2, v3, n):
    for _ in range(n):
        v0 += v1
        v1 = _rotl(v1, 13)
        v1 ^= v0
        v0 = _rotl(v0, 32)
        v2 += v3
        v3 = _rotl(v3, 16)
        v3 ^= v2
        v0 += v3
        v3 = _rotl(v3, 21)
        v3 ^= v0
        v2 += v1
        v1 = _rotl(v1, 17)
        v1 ^= v2
        v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@njit(cache=True)
def siphash24(k0, k1, data, lo, hi):
    """SipHash-2-4 of ``data[lo:hi]`` (uint8) under the key (k0, k1) (little-endian halves)."""
    v0, v1, v2, v3 = k0 ^ _C0, k1 ^ _C1, k0 ^ _C2, k1 ^ _C3
    n = hi - lo
    end = lo + (n // 8) * 8
    for i in range(lo, end, 8):
        m = np.uint64(0)
        for j in range(8):
            m |= np.uint64(data[i + j]) << np.uint64(8 * j)
        v3 ^= m
        v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, 2)
        v0 ^= m
    m = np.uint64(n & 0xFF) << np.uint64(56)
    for j in range(hi - end):
        m |= np.uint64(data[end + j]) << np.uint64(8 * j)
    v3 ^= m
    v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, 2)
    v0 ^= m
    v2 ^= np.uint64(0xFF)
    v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, 4)
    return v0 ^ v1 ^ v2 ^ v3


@njit(cache=True, parallel=True)
def hash_strings(k0, k1, data, offsets):
    """SipHash-2-4 of every string ``data[offsets[i]:offsets[i + 1]]``; one value per
    string, whatever the number of threads."""
    out = np.empty(offsets.shape[0] - 1, dtype=np.uint64)
    for i in prange(out.shape[0]):
        out[i] = siphash24(k0, k1, data, offsets[i], offsets[i + 1])
    return out
