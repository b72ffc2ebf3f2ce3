"""SAN: word-level neighbours stay word-level neighbours (same lengths, one token differs)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fdptm.tasks.sanitize import corpus_of, drop_oov, sanitize

VOCAB = ["apple", "banana", "cherry"]


def _tokens(docs):
    return pa.table(
        {
            "doc_id": [f"d{i}" for i in range(len(docs))],
            "author_id": [f"d{i}" for i in range(len(docs))],
            "tokens": pa.array(docs, pa.list_(pa.string())),
        }
    )


def test_replacing_a_token_by_an_unreleased_word_is_still_a_replacement():
    docs = [["apple", "banana", "zebra"], ["cherry"], []]
    neighbour = [["apple", "yak", "zebra"], ["cherry"], []]  # banana -> yak (not released)
    a = sanitize(_tokens(docs), VOCAB).column("word_ids").to_pylist()
    b = sanitize(_tokens(neighbour), VOCAB).column("word_ids").to_pylist()
    assert a == [[0, 1, 3], [2], []]  # 3 = the reserved out-of-vocabulary id
    assert [len(x) for x in a] == [len(x) for x in b]
    assert (
        sum(x != y for da, db in zip(a, b, strict=True) for x, y in zip(da, db, strict=True)) == 1
    )


def test_corpus_has_the_oov_word_and_drop_oov_renormalises():
    san = sanitize(_tokens([["apple", "kiwi"], ["cherry", "cherry"]]), VOCAB)
    corpus = corpus_of(san, len(VOCAB))
    assert corpus.n_words == 4 and corpus.words.tolist() == [0, 3, 2, 2]
    phi = np.array([[0.2, 0.2, 0.2, 0.4], [0.1, 0.1, 0.3, 0.5]])
    out = drop_oov(phi)
    assert out.shape == (2, 3) and np.allclose(out.sum(1), 1)
    assert np.allclose(out[0], [1 / 3] * 3)


def test_empty_documents_are_kept_so_the_document_count_is_data_independent():
    """Replace-one mechanisms calibrate to N: a stop-word-only text replaced by a normal one
    must leave N unchanged (spectral LDA's neighbours have equal N)."""
    docs = [["apple"], [], ["cherry"]]
    neighbour = [["apple"], ["banana", "kiwi"], ["cherry"]]
    a = corpus_of(sanitize(_tokens(docs), VOCAB), len(VOCAB))
    b = corpus_of(sanitize(_tokens(neighbour), VOCAB), len(VOCAB))
    assert a.n_docs == b.n_docs == 3
    assert a.doc_ptr.tolist() == [0, 1, 1, 2]
