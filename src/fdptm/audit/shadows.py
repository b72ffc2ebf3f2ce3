"""Models trained on random halves of a run's documents, and their per-document statistics.

The FDPTM paper's LiRA set-up (section 4.4, appendix A): the target model is trained on a
random half of the documents and each of N shadow models on another random half, so every
document is "in" for about half of the shadows. Each model goes through the audited run's
own configuration after contribution bounding: M1 (DP vocabulary) at the run's M1 budget,
SAN, and M2 at the run's M2 budget, with fresh noise. Everything here reads private data
and is not DP.

A release is a vocabulary S and a matrix Phi over it, and each model has its own S. Eq. 3
scores a document by its tokens in S only; then a document's rare words, which enter S
when it is "in", make its score *smaller* (more tokens to explain), and the statistic
mixes two opposite effects. ``score_documents`` therefore reports three statistics: eq. 3
on the tokens in S (the paper's), the number of tokens in S (a function of M1's output
alone), and the log-likelihood of the whole document under the release read as a
distribution over the audit's word universe (sees S and Phi together).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fdptm.audit.statistics import DocumentStatistics, document_statistics
from fdptm.evaluation.comparison import without_word
from fdptm.evaluation.metrics import doc_word_matrix, heldout_loglik_per_token
from fdptm.mechanisms.lda import Corpus
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.sanitize import corpus_of, drop_oov, sanitize

Trainer = Callable[[Corpus, NoiseSource], np.ndarray]
VocabularySelector = Callable[[pa.Table, NoiseSource], list[str]]

OOV_MASS = 1e-6
"""Probability mass the release-level statistic gives to words outside S (as
``fdptm.evaluation.metrics.heldout_loglik_per_token`` mixes in a uniform 1e-6)."""


@dataclass(frozen=True)
class TrainedModel:
    """A model's vocabulary and topic-word matrix (without SAN's OOV column)."""

    words: list[str]
    phi: np.ndarray


@dataclass(frozen=True)
class ModelScores:
    """Every document's attack statistics under one model.

    ``in_vocabulary``: eq. 3's zeta on the document's tokens in S, and theta-hat (the
    Huang et al. baselines). ``kept``: how many of its tokens are in S. ``release_zeta``:
    its log-likelihood under p(w) = (1 - OOV_MASS) sum_z theta_z Phi_{z,w} for w in S and
    OOV_MASS / |U \\ S| for the other words of the universe U, at eq. 3's theta-hat (the
    maximiser is the same: the OOV part does not depend on theta).
    """

    in_vocabulary: DocumentStatistics
    kept: np.ndarray
    release_zeta: np.ndarray
    held_out_loglik_per_token: float = float("nan")


def half_masks(n_docs: int, n_models: int, generator: np.random.Generator) -> np.ndarray:
    """models x documents membership: each model takes a uniformly random half."""
    masks = np.zeros((n_models, n_docs), dtype=bool)
    for m in range(n_models):
        masks[m, generator.permutation(n_docs)[: n_docs // 2]] = True
    return masks


def universe(bounded: pa.Table) -> list[str]:
    """The distinct words of the audited documents, sorted: the universe U."""
    return sorted(pc.unique(pc.list_flatten(bounded.column("tokens").combine_chunks())).to_pylist())


def universe_size(bounded: pa.Table) -> int:
    """|U|, the number of distinct words in the audited documents."""
    return len(universe(bounded))


def train_on(
    bounded: pa.Table,
    members: np.ndarray,
    vocabulary: VocabularySelector,
    train_m2: Trainer,
    noise: NoiseSource,
) -> TrainedModel:
    """The vocabulary selection (M1), SAN and M2 on the documents where ``members`` is True."""
    subset = bounded.filter(pa.array(members))
    words = vocabulary(subset, noise)
    if not words:
        return TrainedModel([], np.zeros((0, 0)))
    corpus = corpus_of(sanitize(subset, words), len(words))
    return TrainedModel(words, drop_oov(train_m2(corpus, noise)))


def complement_loglik_per_token(
    model: TrainedModel, bounded: pa.Table, members: np.ndarray
) -> float:
    """Document-completion log-likelihood per token of the documents outside ``members``
    under ``model`` (their tokens in its vocabulary); NaN when no such document has two
    tokens to split."""
    if not model.words:
        return float("nan")
    rest = bounded.filter(pa.array(~members))
    corpus = without_word(
        corpus_of(sanitize(rest, model.words), len(model.words)), len(model.words)
    )
    if not (np.diff(corpus.doc_ptr) >= 2).any():
        return float("nan")
    return heldout_loglik_per_token(model.phi, corpus)


def score_documents(
    model: TrainedModel, bounded: pa.Table, n_topics: int, universe: int
) -> ModelScores:
    """The statistics of every document of ``bounded`` under ``model`` (see ``ModelScores``).

    A model that released no vocabulary scores eq. 3 as 0 with a uniform theta-hat, and
    every token at OOV_MASS / |U|, as the formula gives with S empty: it carries no
    information, and it scores a document like a model with a tiny vocabulary does.
    """
    size = len(model.words)
    corpus = corpus_of(sanitize(bounded, model.words), size)
    counts = doc_word_matrix(corpus)
    kept = np.asarray(counts[:, :size].sum(axis=1)).ravel()
    dropped = np.asarray(counts[:, size].sum(axis=1)).ravel()
    if not size:
        n = bounded.num_rows
        uniform = DocumentStatistics(np.zeros(n), np.full((n, n_topics), 1.0 / n_topics))
        return ModelScores(uniform, kept, dropped * np.log(OOV_MASS / universe))
    stats = document_statistics(model.phi, counts[:, :size])
    outside = max(universe - size, 1)
    release = stats.zeta + kept * np.log1p(-OOV_MASS) + dropped * np.log(OOV_MASS / outside)
    return ModelScores(stats, kept, release)
