"""M1's integer encoding of the bounded tokens, batch by batch (``encode_tokens``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fdptm.mechanisms.set_union import set_union_params
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.vocabulary import encode_table, encode_tokens, select_vocabulary


def _tokens(seed: int = 0, n_docs: int = 700) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = [f"w{i}é" for i in range(60)] + ["", "ß", "a b"]
    lists = [
        [words[j] for j in rng.integers(0, len(words), rng.integers(0, 9))] for _ in range(n_docs)
    ]
    return pa.table(
        {
            "doc_id": pa.array([f"d{i}" for i in range(n_docs)], pa.string()),
            "author_id": pa.array([f"a{i}" for i in rng.integers(0, 150, n_docs)], pa.string()),
            "tokens": pa.array(lists, pa.list_(pa.string())),
        }
    )


def test_batches_encode_as_one_dictionary_encoding_of_the_whole_corpus(tmp_path):
    """Read from Parquet in batches of 37 documents: the same codes, dictionary (first
    appearance) and author codes as Arrow's dictionary encoding of everything at once."""
    table = _tokens()
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=100)
    file = pq.ParquetFile(path)
    encoded = encode_tokens(
        file.iter_batches(batch_size=37, columns=["tokens"]), table.column("author_id")
    )
    flat = pc.dictionary_encode(pc.list_flatten(table.column("tokens"))).combine_chunks()
    assert encoded.words.equals(flat.dictionary)
    assert np.array_equal(encoded.word_idx, flat.indices.to_numpy())
    lengths = pc.list_value_length(table.column("tokens")).to_numpy()
    assert np.array_equal(encoded.doc_ptr, np.concatenate([[0], np.cumsum(lengths)]))
    authors = pc.dictionary_encode(table.column("author_id")).combine_chunks().indices
    assert np.array_equal(encoded.doc_author, authors.to_numpy())
    assert encoded.word_idx.dtype == np.int32


def test_the_dp_vocabulary_does_not_depend_on_the_batch_size(tmp_path):
    table = _tokens(1, 3000)
    params = set_union_params("weighted", 3.0, 1e-5, max_items=20)
    whole = select_vocabulary(encode_table(table), params, NoiseSource.create(9, 1))
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=500)
    batches = pq.ParquetFile(path).iter_batches(batch_size=211, columns=["tokens"])
    streamed = encode_tokens(batches, table.column("author_id"))
    assert select_vocabulary(streamed, params, NoiseSource.create(9, 1)) == whole
    assert whole  # the test is not vacuous


def test_an_empty_corpus_encodes_to_nothing():
    table = _tokens(2, 0)
    encoded = encode_table(table)
    assert len(encoded.word_idx) == 0 and list(encoded.doc_ptr) == [0]
    assert len(encoded.words) == 0
