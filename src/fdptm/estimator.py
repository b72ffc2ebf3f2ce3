"""``fdptm.DPTopicModel``: an M2 mechanism on a documents x words count matrix, no workspace.

For callers who already hold their documents as counts (scikit-learn's ``CountVectorizer``
output, a gensim bag of words turned into a matrix): ``fit(X)`` trains the chosen M2
mechanism of the registry on X with (epsilon, delta) and exposes ``components_`` (k x V,
rows sum to 1, as scikit-learn's ``LatentDirichletAllocation`` after normalisation) and
``guarantee_``. It runs no Prefect flow, no ledger and no M1: the whole budget is M2's.

What the caller must provide, because the guarantee rests on it:

* **A public vocabulary.** The columns of X are treated as public. A vocabulary learned
  from the private documents (``CountVectorizer().fit(private_texts)``) is itself a
  non-private release of which words occur; fix it first from public data
  (``CountVectorizer(vocabulary=public_words)``, or a list like ``wordfreq``'s), or use
  ``fdptm release``, whose M1 selects the vocabulary privately.
* **Contribution bounding.** One row is one document. With ``authors`` (one id per row) the
  privacy unit is the author, else the document. The mechanisms' sensitivities assume at
  most ``max_tokens_per_doc`` tokens per document and ``max_docs_per_author`` documents per
  author (the release's defaults); ``fit`` refuses input that exceeds them instead of
  truncating it, since which tokens to keep is the caller's decision.

The guarantee is the mechanism's own at its adjacency (``fdptm.mechanisms.registry``): a
word-level mechanism such as ``hdp-lda`` states word-level DP whatever ``authors`` says.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse

from fdptm.errors import BadInputError
from fdptm.mechanisms.constraints import (
    ITERATIONS,
    MAX_DOCS_PER_AUTHOR,
    MAX_TOKENS_PER_DOC,
    N_TOPICS,
)
from fdptm.mechanisms.guarantee import CLAIMED_UNPROVEN, Guarantee
from fdptm.mechanisms.lda import Corpus
from fdptm.mechanisms.registry import mechanism
from fdptm.privacy.accountant import check_delta, check_epsilon
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.sanitize import drop_oov


class DPTopicModel:
    """A differentially private topic model with scikit-learn's fit / ``components_``."""

    def __init__(
        self,
        n_topics: int,
        epsilon: float,
        delta: float,
        *,
        mechanism: str = "dp-vi",
        iterations: int = 100,
        max_docs_per_author: int = 100,
        max_tokens_per_doc: int = 1000,
        allow_unproven: bool = False,
        seed: int | None = None,
        **options: Any,
    ) -> None:
        self.n_topics = n_topics
        self.epsilon = epsilon
        self.delta = delta
        self.mechanism = mechanism
        self.iterations = iterations
        self.max_docs_per_author = max_docs_per_author
        self.max_tokens_per_doc = max_tokens_per_doc
        self.allow_unproven = allow_unproven
        self.seed = seed
        self.options = options

    def fit(self, X: Any, y: None = None, *, authors: Any = None) -> DPTopicModel:
        """Train on the count matrix ``X`` (documents x words); ``authors``: one id per row.

        Sets ``components_`` (k x V), ``guarantee_``, ``parameters_`` (the calibrated
        mechanism's parameters) and ``seeded_``: with a ``seed`` the noise is reproducible by
        anyone who knows it, so the model is a test, NOT differentially private.
        BadInputError for unusable parameters or input; nothing is drawn before every check
        has passed. ``y`` is ignored (scikit-learn's signature).
        """
        m = mechanism(self.mechanism)
        if m.notion == CLAIMED_UNPROVEN and not self.allow_unproven:
            raise BadInputError(
                f"{self.mechanism!r} claims DP in its paper, but the claim does not hold "
                "(README, 'M2 mechanisms'); pass allow_unproven=True to train it anyway"
            )
        N_TOPICS.check("n_topics", self.n_topics)
        ITERATIONS.check("iterations", self.iterations)
        MAX_DOCS_PER_AUTHOR.check("max_docs_per_author", self.max_docs_per_author)
        MAX_TOKENS_PER_DOC.check("max_tokens_per_doc", self.max_tokens_per_doc)
        counts = _counts(X)
        units = self._units(counts, authors)
        unit = Adjacency.DOCUMENT if authors is None else Adjacency.AUTHOR
        context = {
            "n_topics": self.n_topics,
            "adjacency": unit,  # the dataset's unit, as a release passes it
            "max_docs_per_author": 1 if authors is None else self.max_docs_per_author,
            "max_tokens_per_doc": self.max_tokens_per_doc,
            "iterations": self.iterations,
        }
        params = m.params(
            check_epsilon(self.epsilon), check_delta(self.delta), context, self.options
        )
        m.check_public(params, counts.shape[1] + 1)
        corpus = _corpus(counts, units)
        phi = m.train(corpus, self.n_topics, params, NoiseSource.create(self.seed))
        self.components_ = drop_oov(phi)
        self.guarantee_: Guarantee = m.guarantee(params)
        self.parameters_ = params.to_dict()
        self.seeded_ = self.seed is not None  # reproducible noise: a test, NOT DP
        return self

    def _units(self, counts: sparse.csr_matrix, authors: Any) -> np.ndarray | None:
        """Author codes per row (None at document level), after the bounds are checked."""
        lengths = np.asarray(counts.sum(axis=1)).ravel()
        longest = int(lengths.max()) if len(lengths) else 0
        if longest > self.max_tokens_per_doc:
            raise BadInputError(
                f"a document has {longest} tokens, more than max_tokens_per_doc = "
                f"{self.max_tokens_per_doc}: bound each document's tokens before fit (the "
                "guarantee assumes it), or raise max_tokens_per_doc"
            )
        if authors is None:
            return None
        ids = np.asarray(authors)
        if ids.ndim != 1 or len(ids) != counts.shape[0]:
            raise BadInputError(
                f"authors must hold one id per row of X ({counts.shape[0]}), got shape {ids.shape}"
            )
        _, codes, per_author = np.unique(ids, return_inverse=True, return_counts=True)
        if per_author.max() > self.max_docs_per_author:
            raise BadInputError(
                f"an author has {int(per_author.max())} documents, more than "
                f"max_docs_per_author = {self.max_docs_per_author}: keep at most that many per "
                "author before fit (the guarantee assumes it), or raise max_docs_per_author"
            )
        return codes.astype(np.int64)


def _counts(X: Any) -> sparse.csr_matrix:
    """X as a CSR matrix of non-negative integer counts; BadInputError otherwise."""
    try:
        matrix = sparse.csr_matrix(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"X must be a 2-D documents x words count matrix: {exc}") from None
    if matrix.shape[0] < 1 or matrix.shape[1] < 1:
        raise BadInputError(f"X must have at least one document and one word, got {matrix.shape}")
    data = matrix.data
    if not np.all(np.isfinite(data)) or np.any(data < 0) or np.any(data != np.round(data)):
        raise BadInputError("X must hold non-negative integer counts (no NaN, no fractions)")
    matrix.eliminate_zeros()
    return matrix


def _corpus(counts: sparse.csr_matrix, authors: np.ndarray | None) -> Corpus:
    """Tokens of ``counts`` (column ids in document order), with one extra, empty column
    for the OOV id that the mechanisms' contract reserves as the last."""
    words = np.repeat(counts.indices.astype(np.int64), counts.data.astype(np.int64))
    doc_ptr = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts.sum(axis=1)).ravel().astype(np.int64), out=doc_ptr[1:])
    return Corpus(doc_ptr, words, counts.shape[1] + 1, authors)
