"""``fdptm.DPTopicModel``: an M2 mechanism on a documents x words count matrix, no workspace.

For callers who already hold their documents as counts (scikit-learn's ``CountVectorizer``
output, a gensim bag of words turned into a matrix): ``fit(X)`` trains the chosen M2
mechanism of the registry on X with (epsilon, delta) and exposes ``components_`` (k x V,
rows sum to 1, as scikit-learn's ``LatentDirichletAllocation`` after normalisation) and
``guarantee_``. It runs no Prefect flow, no ledger and no M1: the whole budget is M2's.
``transform(X)`` infers document-topic proportions from ``components_`` alone.

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

scikit-learn is an optional extra (``fdptm[sklearn]``). When scikit-learn >= 1.6 is
importable, ``DPTopicModel`` is a ``BaseEstimator`` and ``TransformerMixin`` (``clone``,
pipelines, grid search, ``set_output``, estimator tags, metadata routing of ``authors``,
``feature_names_in_``); without it, the small ``_Params`` base below gives the same
``get_params``/``set_params``/``fit_transform`` contract, so the module imports and ``fit``
and ``transform`` work unchanged. Both bases read the parameters from ``__init__``'s
signature, so one class body serves both. Older scikit-learn (no ``validate_data``, no
``__sklearn_tags__``) is treated as absent: its ``clone`` still works through
``get_params``.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import sparse
from scipy.special import psi

from fdptm.errors import BadInputError
from fdptm.mechanisms.constraints import (
    ITERATIONS,
    MAX_DOCS_PER_AUTHOR,
    MAX_TOKENS_PER_DOC,
    N_TOPICS,
    Integer,
    param,
)
from fdptm.mechanisms.guarantee import CLAIMED_UNPROVEN, Guarantee
from fdptm.mechanisms.lda import Corpus
from fdptm.mechanisms.registry import mechanism
from fdptm.privacy.accountant import check_delta, check_epsilon
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.sanitize import drop_oov

N_COMPONENTS = 10  # n_components' default (scikit-learn's LatentDirichletAllocation's)
MAX_DOC_UPDATE_ITER = param(Integer(1), what="E-step iterations per document in transform")
# Elements of the (non-zeros x topics) temporaries that transform holds at once; documents
# are processed in blocks below it (each document's result is independent of its block).
_BLOCK_ELEMENTS = 1 << 22


class DPTopicModelInputError(BadInputError, ValueError):
    """What ``DPTopicModel`` raises for unusable parameters or input: a ``BadInputError``
    (the project's "bad input, nothing spent", exit code 2) that is also the
    ``ValueError`` scikit-learn's tools (pipelines, grid search, ``check_estimator``)
    expect of an estimator that refuses its input."""


class _NotNumbersError(DPTopicModelInputError, TypeError):
    """X holds objects that are not numbers (a TypeError, as numpy raises for them)."""


class _Params:
    """The parameter contract of scikit-learn's ``BaseEstimator``, for when scikit-learn
    is not installed: parameters are exactly ``__init__``'s named arguments, stored
    unchanged under the same names, so ``type(m)(**m.get_params())`` is a fresh copy."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        params = inspect.signature(cls.__init__).parameters.values()
        return sorted(p.name for p in params if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The estimator's parameters (``deep`` is accepted for scikit-learn's signature:
        there are no nested estimators)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> _Params:
        """Set parameters by name (no validation: ``fit`` validates); returns self."""
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"Invalid parameter {name!r} for estimator {type(self).__name__}. "
                    f"Valid parameters are: {valid!r}."
                )
            setattr(self, name, value)
        return self

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names of the k output columns of ``transform``: ``dptopicmodel0`` ... (as
        scikit-learn's ``ClassNamePrefixFeaturesOutMixin`` names them)."""
        _check_fitted(self)
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(self._n_features_out)], dtype=object)

    def __repr__(self) -> str:
        defaults = {
            p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()
        }
        changed = [
            f"{name}={value!r}"
            for name, value in self.get_params().items()
            if repr(value) != repr(defaults.get(name))
        ]
        return f"{type(self).__name__}({', '.join(changed)})"


try:  # scikit-learn >= 1.6: its own base classes, tags and input bookkeeping
    from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted, validate_data

    _BASES: tuple[type, ...] = (ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator)
    HAS_SKLEARN = True
except ImportError:  # not installed, or older than 1.6

    class NotFittedError(ValueError, AttributeError):  # type: ignore[no-redef]
        """``transform`` before ``fit`` (scikit-learn's ``NotFittedError``, stand-in)."""

    _BASES = (_Params,)
    HAS_SKLEARN = False


class DPTopicModel(*_BASES):  # type: ignore[misc]
    """A differentially private topic model, as a scikit-learn transformer.

    ``fit`` trains one M2 mechanism of the registry on a documents x words count matrix
    with the whole (epsilon, delta); ``components_`` is the DP topic-word matrix.
    ``transform`` gives document-topic proportions for new documents from
    ``components_`` alone. ``__init__`` only stores its arguments; ``fit`` validates them.

    Args:
        n_components: The number of topics k (scikit-learn's name, as in
            ``LatentDirichletAllocation``).
        epsilon: The privacy budget's epsilon, all of it for M2. None (the default) is
            refused by ``fit``: a budget is never implicit.
        delta: The budget's delta, in (0, 1); None is refused by ``fit``.
        mechanism: An M2 mechanism of ``fdptm.mechanisms.registry`` (``fdptm mechanisms``
            lists them).
        iterations: Iterations of the mechanism (part of its calibration).
        max_docs_per_author: The contribution bound on documents per author that the
            sensitivity assumes; ``fit`` refuses an author above it.
        max_tokens_per_doc: The bound on tokens per document; ``fit`` refuses a longer one.
        allow_unproven: Train a mechanism whose paper's DP claim does not hold
            (``claimed-unproven``).
        options: The mechanism's own options (its ``--m2-option``s), e.g.
            ``{"clip": 0.5}``; None for none.
        doc_topic_prior: The Dirichlet prior alpha on document-topic proportions that
            ``transform`` uses; None means 1 / n_components. Post-processing only: it does
            not touch the guarantee.
        max_doc_update_iter: Most E-step iterations per document in ``transform``.
        mean_change_tol: A document's E-step stops once its variational parameters change
            by less than this on average (per document, so a document's result never
            depends on the others).
        random_state: None (production): the noise comes from exact samplers fed by a CSPRNG
            (fdptm's and OpenDP's, ChaCha20). An int seeds numpy instead, for tests: anyone
            who knows the seed can remove the noise, so a seeded model is a test, NOT
            differentially private (``seeded_`` says so). A numpy ``RandomState`` or
            ``Generator`` is refused.
        n_topics: Deprecated alias of ``n_components`` (DeprecationWarning at ``fit``).
        seed: Deprecated alias of ``random_state`` (DeprecationWarning at ``fit``).

    Attributes:
        components_ (ndarray): The DP topic-word matrix, k x ``n_features_in_``; rows sum
            to 1.
        guarantee_ (Guarantee): The mechanism's guarantee: notion, (epsilon, delta),
            adjacency, accountant.
        parameters_ (dict): The calibrated mechanism's parameters.
        seeded_ (bool): True when ``random_state`` was set: reproducible noise, NOT DP.
        n_features_in_ (int): The number of columns (words) of X at ``fit``.
        feature_names_in_ (ndarray): The column names when X was a data frame with string
            column names (only with scikit-learn installed).
    """

    def __init__(
        self,
        n_components: int = N_COMPONENTS,
        epsilon: float | None = None,
        delta: float | None = None,
        *,
        mechanism: str = "dp-vi",
        iterations: int = 100,
        max_docs_per_author: int = 100,
        max_tokens_per_doc: int = 1000,
        allow_unproven: bool = False,
        options: dict[str, Any] | None = None,
        doc_topic_prior: float | None = None,
        max_doc_update_iter: int = 100,
        mean_change_tol: float = 1e-3,
        random_state: int | None = None,
        n_topics: int | None = None,
        seed: int | None = None,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.mechanism = mechanism
        self.iterations = iterations
        self.max_docs_per_author = max_docs_per_author
        self.max_tokens_per_doc = max_tokens_per_doc
        self.allow_unproven = allow_unproven
        self.options = options
        self.doc_topic_prior = doc_topic_prior
        self.max_doc_update_iter = max_doc_update_iter
        self.mean_change_tol = mean_change_tol
        self.random_state = random_state
        self.n_topics = n_topics
        self.seed = seed

    def fit(self, X: Any, y: None = None, *, authors: Any = None) -> DPTopicModel:
        """Train on the count matrix ``X`` (documents x words); ``authors``: one id per row.

        Sets ``components_`` (k x V), ``guarantee_``, ``parameters_``, ``n_features_in_``
        and ``seeded_``: with a ``random_state`` the noise is reproducible by anyone who
        knows it, so the model is a test, NOT differentially private.
        ``DPTopicModelInputError`` (a ``BadInputError`` and a ``ValueError``) for unusable
        parameters or input: nothing is drawn, and no attribute changes, before every
        check has passed. ``y`` is ignored (scikit-learn's signature).
        """
        try:
            m, k, seed, params, counts, units = self._validated(X, authors)
            self._check_columns(X, counts, reset=True)  # the last check: it sets n_features_in_
            phi = m.train(_corpus(counts, units), k, params, NoiseSource.create(seed))
        except DPTopicModelInputError:
            raise
        except BadInputError as exc:
            raise DPTopicModelInputError(str(exc)) from None
        self.components_ = drop_oov(phi)
        self.guarantee_: Guarantee = m.guarantee(params)
        self.parameters_ = params.to_dict()
        self.seeded_ = seed is not None  # reproducible noise: a test, NOT DP
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Document-topic proportions of the documents in ``X``, shape (n_docs, k), rows
        summing to 1.

        Post-processing of the DP output ``components_`` only: it never reads the training
        data, so its result depends on ``X``, ``components_`` and the transform parameters
        and on nothing else. It runs LDA's variational E-step with the topics fixed to
        ``components_`` (Blei et al. 2003; scikit-learn's ``LatentDirichletAllocation``
        does the same with its own topics): per document, gamma_k = alpha + sum_w n_w
        phi_kw exp(E[log theta_k]) / sum_j phi_jw exp(E[log theta_j]), from a uniform
        start, until its mean change is below ``mean_change_tol`` or
        ``max_doc_update_iter`` iterations; the result is gamma normalised. A document
        without counts gets the uniform 1 / k.

        ``X`` needs the columns of ``fit`` and non-negative finite values (weights such as
        tf-idf are accepted here: transform has no sensitivity to bound). The output is a
        function of ``X``: for new public documents it may be published; for the private
        training documents (``fit_transform``) it describes them and is NOT DP.
        """
        _check_fitted(self)
        try:
            counts = _as_counts(X, integer=False)
            alpha, max_iter, tol = self._transform_params()
        except DPTopicModelInputError:
            raise
        except BadInputError as exc:
            raise DPTopicModelInputError(str(exc)) from None
        self._check_columns(X, counts, reset=False)
        return _doc_topics(counts, self.components_, alpha, max_iter, tol)

    def fit_transform(self, X: Any, y: None = None, *, authors: Any = None) -> np.ndarray:
        """``fit(X, authors=authors).transform(X)``: the topic proportions of the TRAINING
        documents. They are computed from the private documents themselves, so they are
        NOT differentially private (only ``components_`` is): keep them internal."""
        return self.fit(X, y, authors=authors).transform(X)

    def __sklearn_is_fitted__(self) -> bool:
        """Fitted once ``components_`` exists (what ``check_is_fitted`` asks)."""
        return hasattr(self, "components_")

    def __sklearn_tags__(self) -> Any:
        """Sparse input accepted; X must be non-negative (counts). That X must also hold
        integers has no tag: scikit-learn's checks that feed fractions fail (see
        ``tests/test_estimator_sklearn.py``)."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        return tags

    @property
    def _n_features_out(self) -> int:
        """Output columns of ``transform``: one per topic (for ``get_feature_names_out``)."""
        return self.components_.shape[0]

    def _validated(self, X: Any, authors: Any) -> tuple:
        """Every check of ``fit``, in order, before anything is drawn or set: the
        mechanism and its parameters, the transform parameters, X, the bounds, the
        vocabulary size. Returns (mechanism, k, seed, params, counts, author codes)."""
        m = mechanism(self.mechanism)
        if m.notion == CLAIMED_UNPROVEN and not self.allow_unproven:
            raise BadInputError(
                f"{self.mechanism!r} claims DP in its paper, but the claim does not hold "
                "(`fdptm mechanisms`; docs/reference/mechanisms.md); pass allow_unproven=True "
                "to train it anyway"
            )
        k = N_TOPICS.check("n_components", self._n_components())
        seed = self._seed()
        iterations = ITERATIONS.check("iterations", self.iterations)
        docs_per_author = MAX_DOCS_PER_AUTHOR.check("max_docs_per_author", self.max_docs_per_author)
        MAX_TOKENS_PER_DOC.check("max_tokens_per_doc", self.max_tokens_per_doc)
        if self.epsilon is None or self.delta is None:
            raise BadInputError(
                "epsilon and delta are required: the privacy budget is never a default "
                "(e.g. DPTopicModel(n_components=10, epsilon=3.0, delta=1e-5))"
            )
        epsilon, delta = check_epsilon(self.epsilon), check_delta(self.delta)
        options = {} if self.options is None else self.options
        if not isinstance(options, Mapping):
            raise BadInputError(
                f"options must be a dict of the mechanism's options, got {options!r}"
            )
        self._transform_params()
        counts = _as_counts(X, integer=True)
        units = self._units(counts, authors)
        context = {
            "n_topics": k,
            "adjacency": Adjacency.DOCUMENT if units is None else Adjacency.AUTHOR,
            "max_docs_per_author": 1 if units is None else docs_per_author,
            "max_tokens_per_doc": self.max_tokens_per_doc,
            "iterations": iterations,
        }
        options = dict(options)
        if "window" in m.options() and "window" not in options:
            # a count matrix has no word order: pair every two tokens of a document
            options["window"] = max(2, self.max_tokens_per_doc)
        params = m.params(epsilon, delta, context, options)
        m.check_public(params, counts.shape[1] + 1)
        return m, k, seed, params, counts, units

    def _n_components(self) -> Any:
        """``n_components``, or the deprecated ``n_topics`` when that is set."""
        if self.n_topics is None:
            return self.n_components
        warnings.warn(
            "DPTopicModel's n_topics is deprecated: pass n_components (scikit-learn's name "
            "for the number of topics); n_topics will be removed",
            DeprecationWarning,
            stacklevel=4,
        )
        if self.n_components not in (N_COMPONENTS, self.n_topics):
            raise BadInputError(
                f"n_topics={self.n_topics!r} and n_components={self.n_components!r} disagree: "
                "pass n_components only"
            )
        return self.n_topics

    def _seed(self) -> int | None:
        """The test seed (``random_state``, or the deprecated ``seed``), or None: noise
        from the CSPRNG. Only None or a non-negative int: a numpy generator cannot be
        turned into either, and silently ignoring it would hide that the model is seeded."""
        seed = self.random_state
        if self.seed is not None:
            warnings.warn(
                "DPTopicModel's seed is deprecated: pass random_state (scikit-learn's name); "
                "seed will be removed",
                DeprecationWarning,
                stacklevel=4,
            )
            if seed is not None and seed != self.seed:
                raise BadInputError(
                    f"seed={self.seed!r} and random_state={seed!r} disagree: pass random_state only"
                )
            seed = self.seed
        if seed is not None and not Integer(0).accepts(seed):
            raise BadInputError(
                f"random_state must be None (production: noise from a CSPRNG) or an integer "
                f">= 0 (a test seed: the model is then NOT DP), got {seed!r}"
            )
        return None if seed is None else int(seed)

    def _transform_params(self) -> tuple[float, int, float]:
        """(alpha, max_doc_update_iter, mean_change_tol), checked."""
        k = N_TOPICS.check("n_components", self._n_components_quiet())
        alpha = 1.0 / k if self.doc_topic_prior is None else self.doc_topic_prior
        if not (_real(alpha) and alpha > 0):
            raise BadInputError(
                f"doc_topic_prior must be None (1 / n_components) or a finite number > 0, "
                f"got {self.doc_topic_prior!r}"
            )
        max_iter = MAX_DOC_UPDATE_ITER.check("max_doc_update_iter", self.max_doc_update_iter)
        tol = self.mean_change_tol
        if not (_real(tol) and tol >= 0):
            raise BadInputError(f"mean_change_tol must be a finite number >= 0, got {tol!r}")
        return float(alpha), max_iter, float(tol)

    def _n_components_quiet(self) -> Any:
        """The number of topics for transform: that of ``components_`` once fitted."""
        if hasattr(self, "components_"):
            return self.components_.shape[0]
        return self.n_components if self.n_topics is None else self.n_topics

    def _check_columns(self, X: Any, counts: sparse.csr_matrix, *, reset: bool) -> None:
        """Record (``reset``) or check the number of columns, and with scikit-learn the
        column names of a data frame, as scikit-learn's ``validate_data`` does."""
        if HAS_SKLEARN:
            validate_data(self, X, reset=reset, skip_check_array=True)
            return
        if reset:
            self.n_features_in_ = counts.shape[1]
        elif counts.shape[1] != self.n_features_in_:
            raise DPTopicModelInputError(
                f"X has {counts.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )

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


def _real(value: Any) -> bool:
    """A finite real number (not a bool)."""
    return (
        isinstance(value, int | float | np.integer | np.floating)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _check_fitted(model: Any) -> None:
    """``NotFittedError`` (a ValueError and an AttributeError) before ``fit``."""
    if HAS_SKLEARN:
        check_is_fitted(model)
    elif not hasattr(model, "components_"):
        raise NotFittedError(
            f"This {type(model).__name__} instance is not fitted yet: call fit first"
        )


def _as_counts(X: Any, *, integer: bool) -> sparse.csr_matrix:
    """X as a new CSR matrix of float64 (the caller's data is never modified): 2-D, at
    least one row and one column, finite, non-negative and, when ``integer``, whole
    numbers (counts); DPTopicModelInputError otherwise. The messages carry the phrases
    scikit-learn's checks look for ("Reshape your data", "0 feature(s)", "NaN",
    "Negative values in data", "Complex data not supported")."""
    what = "X must hold non-negative integer counts" if integer else "X must be non-negative"
    if sparse.issparse(X):
        matrix = sparse.csr_matrix(X)
    else:
        try:
            array = np.asarray(X)
        except (TypeError, ValueError) as exc:
            raise DPTopicModelInputError(
                f"X must be a 2-D documents x words matrix: {exc}"
            ) from None
        if array.ndim != 2:
            raise DPTopicModelInputError(
                f"X must be a 2-D documents x words matrix, got {array.ndim}-D: Reshape your "
                "data (one row per document; X.reshape(1, -1) for a single document)"
            )
        matrix = array
    if np.iscomplexobj(matrix):
        raise DPTopicModelInputError(f"Complex data not supported: {what}")
    try:
        matrix = sparse.csr_matrix(matrix.astype(np.float64, copy=True))
    except (TypeError, ValueError) as exc:
        error = _NotNumbersError if isinstance(exc, TypeError) else DPTopicModelInputError
        raise error(f"{what}, numbers only: {exc}") from None
    n_docs, n_words = matrix.shape
    if n_docs < 1 or n_words < 1:
        counted = "0 sample(s)" if n_docs < 1 else "0 feature(s)"
        raise DPTopicModelInputError(
            f"X has {counted} (shape={matrix.shape}) while a minimum of 1 is required: X must "
            "have at least one document (row) and one word (column)"
        )
    matrix.sum_duplicates()
    data = matrix.data
    if not np.all(np.isfinite(data)):
        raise DPTopicModelInputError(f"X contains NaN or infinity: {what} (no NaN, no inf)")
    if np.any(data < 0):
        raise DPTopicModelInputError(f"Negative values in data passed as X: {what}")
    if integer and np.any(data != np.round(data)):
        raise DPTopicModelInputError(
            f"X holds fractional values: {what} (no fractions; each entry is how often a word "
            "occurs in a document, which the mechanisms' sensitivity is stated for)"
        )
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


def _corpus(counts: sparse.csr_matrix, authors: np.ndarray | None) -> Corpus:
    """Tokens of ``counts`` (column ids in document order), with one extra, empty column
    for the OOV id that the mechanisms' contract reserves as the last."""
    words = np.repeat(counts.indices.astype(np.int64), counts.data.astype(np.int64))
    doc_ptr = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts.sum(axis=1)).ravel().astype(np.int64), out=doc_ptr[1:])
    return Corpus(doc_ptr, words, counts.shape[1] + 1, authors)


def _doc_topics(
    counts: sparse.csr_matrix, phi: np.ndarray, alpha: float, max_iter: int, tol: float
) -> np.ndarray:
    """theta (n_docs x k) of each row of ``counts`` given the fixed topics ``phi``
    (``DPTopicModel.transform``), in blocks of documents that bound the temporaries."""
    n_docs, k = counts.shape[0], phi.shape[0]
    phi_t = np.ascontiguousarray(phi.T, dtype=np.float64)
    theta = np.empty((n_docs, k))
    per_block = max(1, _BLOCK_ELEMENTS // k)
    start = 0
    while start < n_docs:
        stop = int(np.searchsorted(counts.indptr, counts.indptr[start] + per_block, "right")) - 1
        stop = min(max(stop, start + 1), n_docs)
        theta[start:stop] = _block_doc_topics(counts[start:stop], phi_t, alpha, max_iter, tol)
        start = stop
    return theta


def _block_doc_topics(
    counts: sparse.csr_matrix, phi_t: np.ndarray, alpha: float, max_iter: int, tol: float
) -> np.ndarray:
    """The E-step for one block. Every quantity of a row is computed from that row alone
    and a row stops updating at its own convergence, so no document's result depends on
    which other documents share its block or its call."""
    n, k = counts.shape[0], phi_t.shape[1]
    rows = np.repeat(np.arange(n), np.diff(counts.indptr))
    word_topic = phi_t[counts.indices]  # (non-zeros x k): phi_kw of each entry's word
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    gamma = np.full((n, k), alpha) + lengths[:, None] / k
    active = np.ones(n, dtype=bool)
    for _ in range(max_iter):
        exp_elog = np.exp(psi(gamma) - psi(gamma.sum(axis=1, keepdims=True)))
        norm = (exp_elog[rows] * word_topic).sum(axis=1)
        weight = np.divide(counts.data, norm, out=np.zeros_like(norm), where=norm > 0)
        scaled = sparse.csr_matrix((weight, counts.indices, counts.indptr), shape=counts.shape)
        new = alpha + exp_elog * (scaled @ phi_t)
        change = np.abs(new - gamma).mean(axis=1)
        gamma = np.where(active[:, None], new, gamma)
        active &= change >= tol
        if not active.any():
            break
    return gamma / gamma.sum(axis=1, keepdims=True)
