"""Models trained on random halves of a run's documents, and their per-document statistics.

The FDPTM paper's LiRA set-up (section 4.4, appendix A): the target model is trained on a
random half of the documents and each of N shadow models on another random half, so every
document is "in" for about half of the shadows. Each model goes through the audited run's
own configuration after contribution bounding: M1 (DP vocabulary) at the run's M1 budget,
SAN, and M2 at the run's M2 budget, with fresh noise. A document is scored under a model
as SAN makes it for that model (its words outside the model's vocabulary dropped), by
``zeta`` and theta-hat. Everything here reads private data and is not DP.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from fdptm.audit.statistics import DocumentStatistics, document_statistics
from fdptm.evaluation.metrics import doc_word_matrix
from fdptm.mechanisms.lda import Corpus
from fdptm.mechanisms.set_union import SetUnionParams
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.sanitize import corpus_of, drop_oov, sanitize
from fdptm.tasks.vocabulary import select_vocabulary

Trainer = Callable[[Corpus, NoiseSource], np.ndarray]


@dataclass(frozen=True)
class TrainedModel:
    """A model's DP vocabulary and topic-word matrix (without SAN's OOV column)."""

    words: list[str]
    phi: np.ndarray


def half_masks(n_docs: int, n_models: int, generator: np.random.Generator) -> np.ndarray:
    """models x documents membership: each model takes a uniformly random half."""
    masks = np.zeros((n_models, n_docs), dtype=bool)
    for m in range(n_models):
        masks[m, generator.permutation(n_docs)[: n_docs // 2]] = True
    return masks


def train_on(
    bounded: pa.Table,
    members: np.ndarray,
    m1: SetUnionParams,
    train_m2: Trainer,
    noise: NoiseSource,
) -> TrainedModel:
    """M1, SAN and M2 on the documents where ``members`` is True."""
    subset = bounded.filter(pa.array(members))
    words = select_vocabulary(subset, m1, noise)
    if not words:
        return TrainedModel([], np.zeros((0, 0)))
    corpus = corpus_of(sanitize(subset, words), len(words))
    return TrainedModel(words, drop_oov(train_m2(corpus, noise)))


def score_documents(model: TrainedModel, bounded: pa.Table, n_topics: int) -> DocumentStatistics:
    """zeta and theta-hat of every document of ``bounded`` under ``model``.

    Documents are sanitized against the model's vocabulary and their OOV tokens dropped
    (the model gives them no probability). A model that released no vocabulary scores
    every document 0 with a uniform theta-hat: it carries no information about anyone.
    """
    if not model.words:
        n = bounded.num_rows
        return DocumentStatistics(np.zeros(n), np.full((n, n_topics), 1.0 / n_topics))
    corpus = corpus_of(sanitize(bounded, model.words), len(model.words))
    in_vocabulary = doc_word_matrix(corpus)[:, : len(model.words)]  # the OOV column dropped
    return document_statistics(model.phi, in_vocabulary)
