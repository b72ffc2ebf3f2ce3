"""Contribution bounding: cap each author's documents and each document's tokens.

At most ``max_docs_per_author`` documents per author, those of smallest keyed hash of
(author, document id) under the run's seed (SipHash-2-4, ``fdptm.kernels.siphash``), i.e. a
uniformly random sample that is deterministic given the run seed and depends on the
author's own documents only (when no author is over the cap, nothing is hashed); at most
``max_tokens_per_doc`` tokens per document (its first ones). Both are per-author functions,
so they are stable (FDPTM Appendix F, Lemma F.1) and make author-level sensitivities finite.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fdptm.errors import BadInputError
from fdptm.parallel import cap_numba, stream_map


@dataclass(frozen=True)
class Bounds:
    max_docs_per_author: int = 100
    max_tokens_per_doc: int = 1000

    def __post_init__(self) -> None:
        if self.max_docs_per_author < 1 or self.max_tokens_per_doc < 1:
            raise BadInputError(
                "max_docs_per_author and max_tokens_per_doc must be >= 1, got "
                f"{self.max_docs_per_author} and {self.max_tokens_per_doc}"
            )

    def to_dict(self) -> dict:
        return asdict(self)


def _keys(seed: int, authors: pa.ChunkedArray, docs: pa.ChunkedArray) -> np.ndarray:
    """SipHash-2-4 of "author \x1f document" per row, keyed with the run's seed (128 bits)."""
    text = pc.binary_join_element_wise(authors, docs, "\x1f").combine_chunks()
    text = text.cast(pa.large_string())
    _, offsets, data = text.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int64)[text.offset : text.offset + len(text) + 1]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    key = seed.to_bytes(16, "little", signed=False)
    k0, k1 = (np.uint64(int.from_bytes(key[i : i + 8], "little")) for i in (0, 8))
    from fdptm.kernels import siphash  # numba, imported when it runs (CLI refusals skip it)

    cap_numba()
    return siphash.hash_strings(k0, k1, data, offsets)


RANGE_ROWS = 1 << 20
"""Rows per range of authors over the cap (an author is never split; data-dependent only)."""


def bound_contributions(tokens: pa.Table, bounds: Bounds, seed: int) -> pa.Table:
    """Apply both caps to a (doc_id, author_id, tokens) table; the schema is unchanged.

    The documents of the authors over the cap are ranked per range of those authors
    (``fdptm.parallel.stream_map``: in this process, or on the Dask cluster of
    ``on_cluster``, each range with all its authors' documents), and only their kept row
    numbers come back; the other authors keep every document without being hashed."""
    if tokens.num_rows == 0:
        return tokens
    authors = pc.dictionary_encode(tokens.column("author_id")).combine_chunks()
    codes = authors.indices.to_numpy(zero_copy_only=False)
    sizes = np.bincount(codes)
    if sizes.max() <= bounds.max_docs_per_author:  # every document is kept: nothing to rank
        kept = tokens
    else:
        kept = tokens.take(pa.array(_sample(tokens, codes, sizes, bounds, seed)))
    longest = pc.max(pc.list_value_length(kept.column("tokens"))).as_py() or 0
    if longest <= bounds.max_tokens_per_doc:  # no document is cut: no copy of the tokens
        return kept
    limited = pc.list_slice(kept.column("tokens"), 0, bounds.max_tokens_per_doc)
    return kept.set_column(kept.schema.get_field_index("tokens"), "tokens", limited)


def _sample(
    tokens: pa.Table, codes: np.ndarray, sizes: np.ndarray, bounds: Bounds, seed: int
) -> np.ndarray:
    """Row numbers of each author's ``max_docs_per_author`` documents of smallest key, in
    their original order."""
    over = sizes > bounds.max_docs_per_author
    key = np.frombuffer(seed.to_bytes(16, "little", signed=False), dtype="<u8").copy()
    ranges = _over_cap_ranges(tokens, codes, sizes, over)
    ranked = stream_map(_ranked, ranges, bounds.max_docs_per_author, key)
    return np.sort(np.concatenate([np.flatnonzero(~over[codes]), *ranked]))


def _over_cap_ranges(
    tokens: pa.Table, codes: np.ndarray, sizes: np.ndarray, over: np.ndarray
) -> Iterator[pa.Table]:
    """The rows of the authors over the cap as (row, author, author_id, doc_id) tables of
    whole authors, about RANGE_ROWS rows each (an author bigger than that alone), built one
    at a time."""
    rows = np.flatnonzero(over[codes])
    rows = rows[np.argsort(codes[rows], kind="stable")]  # by author, each in row order
    ends = np.cumsum(sizes[over])  # where each over-cap author's rows end in ``rows``
    start = 0
    while start < len(rows):
        last_fitting = np.searchsorted(ends, start + RANGE_ROWS, side="right") - 1
        stop = int(ends[max(last_fitting, np.searchsorted(ends, start, side="right"))])
        part = rows[start:stop]
        yield pa.table(
            {
                "row": part,
                "author": codes[part],
                "author_id": tokens.column("author_id").take(part),
                "doc_id": tokens.column("doc_id").take(part),
            }
        )
        start = stop


def _ranked(part: pa.Table, cap: int, key: np.ndarray) -> np.ndarray:
    """The rows of ``part`` (whole authors, each author's rows in order) that are among
    their author's ``cap`` of smallest key. The run's seed comes as ``key`` (its 16
    little-endian bytes as uint64[2]): an array, so that on a Dask cluster it travels as
    data, not inside a task's arguments on the scheduler."""
    seed = int.from_bytes(key.astype("<u8").tobytes(), "little")
    keys = _keys(seed, part.column("author_id"), part.column("doc_id"))
    codes = part.column("author").to_numpy()
    order = np.lexsort((keys, codes))
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    rank = np.arange(len(order)) - group_start
    return part.column("row").to_numpy()[order[rank < cap]]
