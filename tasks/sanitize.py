"""SAN: remove every token not in the released vocabulary (FDPTM Algorithm 1, line 4).

A per-document function of the document and the (public, DP) vocabulary, hence stable.

Removed tokens are not deleted: each becomes the reserved id ``V`` (one past the
vocabulary), a single out-of-vocabulary word that M2 counts, noises and clips like any
other, and whose column is dropped from the released matrix (post-processing). Deleting
them would break HDP-LDA's word-level guarantee: replacing an in-vocabulary token by an
out-of-vocabulary one would reach M2 as a deletion, which changes the document's topic
counts for all its other tokens, and Theorem 3 covers replacement only. With the reserved
id, two corpora that differ in one preprocessed token map to SAN outputs that differ in
one token, of equal lengths. Documents left with no token (a text of stop words only) are
kept, empty: dropping them would make the number of documents depend on the data, and
replace-one mechanisms (spectral LDA) calibrate their noise to that number, which must be
the same for neighbouring datasets.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fdptm.mechanisms.lda import Corpus

SANITIZED_SCHEMA = pa.schema(
    [("doc_id", pa.string()), ("author_id", pa.string()), ("word_ids", pa.list_(pa.int32()))]
)


def sanitize(tokens: pa.Table | pa.RecordBatch, vocabulary: list[str] | pa.Array) -> pa.Table:
    """(doc_id, author_id, word_ids): ids index ``vocabulary``, ``len(vocabulary)`` = OOV.

    Chunk by chunk, as the tokens were read (no copy of the whole token column); the
    release stage calls it on one batch of the bounded tokens at a time."""
    value_set = pa.array(vocabulary, pa.string())
    lists = tokens.column("tokens")
    parts = lists.chunks if isinstance(lists, pa.ChunkedArray) else [lists]
    word_ids = pa.chunked_array([_word_ids(c, value_set) for c in parts], pa.list_(pa.int32()))
    return pa.table(
        {
            "doc_id": tokens.column("doc_id"),
            "author_id": tokens.column("author_id"),
            "word_ids": word_ids,
        },
        schema=SANITIZED_SCHEMA,
    )


def _word_ids(lists: pa.ListArray, value_set: pa.Array) -> pa.ListArray:
    """One chunk of token lists as lists of vocabulary ids (OOV = len(value_set))."""
    ids = pc.index_in(pc.list_flatten(lists), value_set=value_set)
    ids = pc.fill_null(ids, len(value_set)).cast(pa.int32())
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lists) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), ids)


def corpus_of(sanitized: pa.Table, vocabulary_size: int) -> Corpus:
    """Flat arrays for the Gibbs kernels; the corpus has ``vocabulary_size + 1`` words."""
    chunks = sanitized.column("word_ids").chunks
    words = np.concatenate(
        [np.zeros(0, np.int32)]
        + [pc.list_flatten(c).to_numpy(zero_copy_only=False).astype(np.int32) for c in chunks]
    )
    lengths = [pc.fill_null(pc.list_value_length(c), 0).to_numpy() for c in chunks]
    doc_ptr = np.zeros(sum(len(n) for n in lengths) + 1, dtype=np.int64)
    if lengths:
        np.cumsum(np.concatenate(lengths), out=doc_ptr[1:])
    authors = pc.dictionary_encode(sanitized.column("author_id")).combine_chunks()
    doc_author = authors.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    return Corpus(doc_ptr, words, vocabulary_size + 1, doc_author)


def drop_oov(phi: np.ndarray) -> np.ndarray:
    """Topic-word matrix without the reserved OOV column, rows renormalised.

    A topic whose whole mass was on the OOV column becomes uniform (post-processing).
    """
    kept = phi[:, :-1]
    sums = kept.sum(axis=1, keepdims=True)
    uniform = np.full_like(kept, 1.0 / kept.shape[1])
    return np.where(sums > 0, kept / np.where(sums > 0, sums, 1.0), uniform)
