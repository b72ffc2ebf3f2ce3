"""The device side of LP-LDA (section V-A): PRE, the binary vector, randomised response.

Step 1: the document's tokens (after PRE, ``fdptm.pre``) become a V-bit vector over the
public vocabulary, bit t set when word t occurs (repetitions and words outside the
vocabulary leave no trace). Step 2: every bit is kept with probability 1 - f and replaced by
a fair coin with probability f, i.e. XORed with an independent Bernoulli(f/2) bit.

The Bernoulli(f/2) bits are exact: f/2 = c / 2^24 (``fdptm.local.flip``), and each mask bit
is ``U < c`` for a uniform 24-bit integer U, decided by comparing U's bits with c's from the
most significant one down and stopping at the first difference. Sixty-four mask bits are
decided at once on the bits of 64-bit words (one keystream word per compared bit position
for all 64 lanes), so a lane needs about 2 keystream bits and a word of 64 lanes about 7.3
keystream words whatever c is (the largest of 64 geometric stopping times), at most 24. No
floating point enters the draw, and the number of words a report consumes depends only on
the keystream, never on the document.

The keystream is ChaCha20 (OpenSSL, through ``cryptography``) keyed with 256 bits of
``os.urandom``: a report's noise must be unpredictable, or the server could strip it.
``KeyStream(seed=...)`` exists for tests only, and its reports are not private.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from fdptm.local.flip import FLIP_BITS, Flip
from fdptm.local.vocabulary import LocalVocabulary
from fdptm.pre import tokenize
from fdptm.privacy.keystream import KEYSTREAM_WORDS, KeyStream

SAMPLER = (
    "exact Bernoulli(numerator / 2^24) per bit, by comparing a uniform 24-bit integer with "
    "the numerator bit by bit on 64 lanes, from a ChaCha20 keystream (OpenSSL, via "
    "cryptography) keyed with 256 bits of os.urandom"
)


def n_bytes(n_words: int) -> int:
    """Bytes of one report: bit t is bit t % 8 of byte t // 8 (little-endian bit order)."""
    return (n_words + 7) // 8


@njit(cache=True, nogil=True)
def _set_bits(offsets, ids, out):
    """out[d] |= bit ids[i] for the ids of document d (negative ids are out of vocabulary)."""
    one = np.uint64(1)
    for d in range(out.shape[0]):
        for i in range(offsets[d], offsets[d + 1]):
            t = ids[i]
            if t >= 0:
                out[d, t >> 6] |= one << np.uint64(t & 63)


@njit(cache=True, nogil=True)
def _flip_rows(bits, numerator, n_bits, last_mask, stream, row):
    """XOR rows ``row``.. of ``bits`` with exact Bernoulli(numerator / 2^n_bits) masks, drawing
    keystream words from ``stream``; returns the first row not done (a row is started only
    when the stream left covers its worst case, n_bits words per 64 bits)."""
    n_rows, width = bits.shape
    worst = width * n_bits
    pos = 0
    zero = np.uint64(0)
    while row < n_rows and stream.shape[0] - pos >= worst:
        for w in range(width):
            undecided = ~zero
            mask = zero
            for i in range(n_bits - 1, -1, -1):
                r = stream[pos]
                pos += 1
                if (numerator >> i) & 1:
                    mask |= undecided & ~r
                    undecided &= r
                else:
                    undecided &= ~r
                if undecided == zero:
                    break
            if w == width - 1:
                mask &= last_mask
            bits[row, w] ^= mask
        row += 1
    return row


def _last_mask(n_words: int) -> np.uint64:
    used = n_words % 64
    return np.uint64((1 << used) - 1) if used else ~np.uint64(0)


def encode(tokens: pa.ListArray, vocabulary: LocalVocabulary) -> np.ndarray:
    """Step 1: one row of ceil(V/64) uint64 words per document, bit t set when word t occurs."""
    flat = pc.list_flatten(tokens)
    ids = pc.index_in(flat, value_set=pa.array(vocabulary.words, pa.string()))
    ids = pc.fill_null(ids, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = tokens.offsets.to_numpy().astype(np.int64)
    offsets = offsets - offsets[0]
    bits = np.zeros((len(tokens), (vocabulary.size + 63) // 64), dtype=np.uint64)
    _set_bits(offsets, ids, bits)
    return bits


def flip_bits(bits: np.ndarray, n_words: int, flip: Flip, keystream: KeyStream) -> np.ndarray:
    """Step 2 in place: XOR each row's first ``n_words`` bits with Bernoulli(f/2) bits."""
    stream = np.empty(KEYSTREAM_WORDS, dtype=np.uint64)
    if bits.shape[1] * FLIP_BITS > KEYSTREAM_WORDS:
        raise ValueError("a report wider than the keystream buffer")
    row = 0
    while row < bits.shape[0]:
        keystream.fill(stream)
        row = _flip_rows(bits, flip.numerator, FLIP_BITS, _last_mask(n_words), stream, row)
    return bits


def as_bytes(bits: np.ndarray, n_words: int) -> np.ndarray:
    """uint64 rows as report bytes (little-endian bit order), ``n_bytes(n_words)`` per row."""
    raw = bits.astype("<u8", copy=False).view(np.uint8).reshape(bits.shape[0], -1)
    return raw[:, : n_bytes(n_words)]


def randomize_tokens(
    tokens: pa.ListArray,
    vocabulary: LocalVocabulary,
    flip: Flip,
    keystream: KeyStream | None = None,
) -> np.ndarray:
    """Reports (n x ceil(V/8) bytes) of documents already through PRE."""
    bits = encode(tokens, vocabulary)
    flip_bits(bits, vocabulary.size, flip, keystream or KeyStream())
    return as_bytes(bits, vocabulary.size)


def randomize(
    texts: list[str] | pa.Array,
    vocabulary: LocalVocabulary,
    flip: Flip,
    keystream: KeyStream | None = None,
) -> np.ndarray:
    """Reports of raw texts: PRE with the vocabulary's configuration, then steps 1 and 2."""
    return randomize_tokens(tokenize(texts, vocabulary.pre), vocabulary, flip, keystream)
