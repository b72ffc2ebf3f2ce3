"""fdptm.DPTopicModel on plain count matrices: no Prefect, no workspace."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

import fdptm
from fdptm.errors import BadInputError
from fdptm.evaluation.matching import matched_distance
from fdptm.evaluation.synthetic import generate_lda
from fdptm.privacy.adjacency import Adjacency


@pytest.fixture(scope="module")
def counts():
    data = generate_lda(600, 50, 3, doc_length=30, eta=0.05, docs_per_author=2, seed=3)
    c = data.corpus
    rows = np.repeat(np.arange(c.n_docs), np.diff(c.doc_ptr))
    matrix = sparse.coo_matrix(
        (np.ones(len(c.words)), (rows, c.words)), shape=(c.n_docs, c.n_words)
    ).tocsr()
    return matrix, c.doc_author, data.phi


def test_fit_gives_stochastic_components_and_the_mechanisms_guarantee(counts):
    X, _, truth = counts
    model = fdptm.DPTopicModel(3, 50.0, 1e-5, iterations=20, random_state=1).fit(X)
    assert model.components_.shape == (3, 50)
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)
    g = model.guarantee_
    assert g.adjacency == Adjacency.DOCUMENT and g.epsilon <= 50.0 and g.delta == 1e-5
    assert model.parameters_["iterations"] == 20
    cosine = matched_distance(model.components_, truth).cosine
    assert cosine > 0.8  # epsilon 50 on 600 documents: the topics are found
    dense = fdptm.DPTopicModel(3, 50.0, 1e-5, iterations=20, random_state=1).fit(X.toarray())
    np.testing.assert_array_equal(dense.components_, model.components_)


@pytest.mark.parametrize(
    "mechanism,unit,expected",
    [
        ("spectral", None, Adjacency.DOCUMENT_REPLACE),
        ("spectral", "authors", Adjacency.AUTHOR_REPLACE),
        ("topicdp-laplace", "authors", Adjacency.AUTHOR),
    ],
)
def test_every_mechanism_gets_the_units_adjacency_as_a_release_passes_it(
    counts, mechanism, unit, expected
):
    X, authors, _ = counts
    model = fdptm.DPTopicModel(3, 5.0, 1e-5, mechanism=mechanism, iterations=5, random_state=3)
    model.fit(X, authors=authors if unit else None)
    assert model.guarantee_.adjacency == expected and model.seeded_


def test_authors_make_it_author_level_and_word_level_mechanisms_say_so(counts):
    X, authors, _ = counts
    model = fdptm.DPTopicModel(3, 5.0, 1e-5, iterations=5, random_state=2).fit(X, authors=authors)
    assert model.guarantee_.adjacency == Adjacency.AUTHOR
    hdp = fdptm.DPTopicModel(3, 300.0, 1e-5, mechanism="hdp-lda", iterations=3, random_state=2)
    assert hdp.fit(X, authors=authors).guarantee_.adjacency == Adjacency.WORD


@pytest.mark.parametrize(
    "X,kwargs,message",
    [
        (np.array([[1, -1]]), {}, "non-negative integer counts"),
        (np.array([[1.5, 0]]), {}, "non-negative integer counts"),
        (np.array([[np.nan, 1]]), {}, "non-negative integer counts"),
        (np.zeros((0, 3)), {}, "at least one document"),
        (np.array([[2000, 1]]), {}, "more than max_tokens_per_doc = 1000"),
        (np.ones((3, 4)), {"authors": ["a", "a", "a"], "max_docs_per_author": 2}, "an author"),
        (np.ones((3, 4)), {"authors": ["a", "b"]}, "one id per row"),
        (np.ones((3, 4)), {"mechanism": "zhu"}, "allow_unproven=True"),
        (np.ones((3, 4)), {"mechanism": "nope"}, "unknown M2 mechanism"),
        (np.ones((3, 4)), {"options": {"nope": 1}}, "has no option"),
        (np.ones((3, 4)), {"epsilon": 0.0}, "epsilon"),
    ],
)
def test_input_that_breaks_the_assumptions_is_refused(X, kwargs, message):
    authors = kwargs.pop("authors", None)
    args = {"n_components": 2, "epsilon": 1.0, "delta": 1e-5, "random_state": 0} | kwargs
    with pytest.raises(BadInputError, match=message):
        fdptm.DPTopicModel(**args).fit(X, authors=authors)
