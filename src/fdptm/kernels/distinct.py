"""Distinct words per unit with their counts, compiled with numba, in parallel over units.

A unit (a document, or an author with all their documents) owns the documents
``unit_docs[unit_ptr[u]:unit_ptr[u + 1]]``; document ``d`` owns the tokens
``words[doc_ptr[d]:doc_ptr[d + 1]]``. The output is in CSR form: unit ``u``'s distinct words,
ascending, in ``items[offsets[u]:offsets[u + 1]]`` with their counts alongside. Memory
follows the number of distinct (unit, word) pairs, and each unit's output depends on its own
tokens only, so the result is the same whatever the number of threads. This replaces a
sort of one int64 key per token (``np.unique``), which held three copies of the corpus.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from fdptm.parallel import cap_numba


@njit(cache=True, inline="always")
def _gathered(u, unit_ptr, unit_docs, doc_ptr, words):
    """The tokens of unit ``u``, sorted."""
    total = 0
    for j in range(unit_ptr[u], unit_ptr[u + 1]):
        d = unit_docs[j]
        total += doc_ptr[d + 1] - doc_ptr[d]
    buf = np.empty(total, dtype=words.dtype)
    at = 0
    for j in range(unit_ptr[u], unit_ptr[u + 1]):
        d = unit_docs[j]
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            buf[at] = words[i]
            at += 1
    buf.sort()
    return buf


@njit(cache=True, parallel=True)
def _sizes(unit_ptr, unit_docs, doc_ptr, words):
    n = unit_ptr.shape[0] - 1
    sizes = np.zeros(n, dtype=np.int64)
    for u in prange(n):
        buf = _gathered(u, unit_ptr, unit_docs, doc_ptr, words)
        runs = 0
        for i in range(buf.shape[0]):
            if i == 0 or buf[i] != buf[i - 1]:
                runs += 1
        sizes[u] = runs
    return sizes


@njit(cache=True, parallel=True)
def _fill(unit_ptr, unit_docs, doc_ptr, words, offsets, items, counts):
    for u in prange(unit_ptr.shape[0] - 1):
        buf = _gathered(u, unit_ptr, unit_docs, doc_ptr, words)
        at = offsets[u] - 1
        for i in range(buf.shape[0]):
            if i == 0 or buf[i] != buf[i - 1]:
                at += 1
                items[at] = buf[i]
                counts[at] = 0
            counts[at] += 1


def distinct_per_unit(
    unit_ptr: np.ndarray, unit_docs: np.ndarray, doc_ptr: np.ndarray, words: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, items, counts): each unit's distinct words, ascending, and their counts."""
    unit_ptr = np.ascontiguousarray(unit_ptr, dtype=np.int64)
    unit_docs = np.ascontiguousarray(unit_docs, dtype=np.int64)
    doc_ptr = np.ascontiguousarray(doc_ptr, dtype=np.int64)
    words = np.ascontiguousarray(words, dtype=np.int32)
    cap_numba()
    sizes = _sizes(unit_ptr, unit_docs, doc_ptr, words)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    items = np.empty(offsets[-1], dtype=np.int32)
    counts = np.empty(offsets[-1], dtype=np.int32)
    _fill(unit_ptr, unit_docs, doc_ptr, words, offsets, items, counts)
    return offsets, items, counts
