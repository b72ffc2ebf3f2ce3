"""Utility of a released topic model, measured on the run's own documents (internal, not DP).

The FDPTM paper's utility audit (section 4.4; DESIGN.md "audit"): UMass coherence (eq. 4,
top 10 words, smoothing 1; ``fdptm.evaluation.metrics.umass``) and gensim's NPMI coherence
(``c_npmi`` over document co-occurrence) of the released topics, the vocabulary size,
document-completion perplexity on the run's documents (in-sample: the release was trained
on them), and L1 / RMSE / Kendall tau against a non-private collapsed Gibbs model trained on
the same sanitized documents, after Hungarian topic matching.
"""

from __future__ import annotations

import numpy as np
from gensim.corpora import Dictionary
from gensim.models.coherencemodel import CoherenceModel

from fdptm.evaluation.comparison import without_word
from fdptm.evaluation.matching import matched_distance
from fdptm.evaluation.metrics import completion_perplexity, umass
from fdptm.mechanisms.lda import Corpus, train_cgs
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.sanitize import drop_oov

TOP = 10


def npmi(phi: np.ndarray, corpus: Corpus, words: list[str], top: int = TOP) -> float:
    """gensim's NPMI coherence of the top words of each topic, averaged over topics."""
    texts = [
        [words[w] for w in corpus.words[corpus.doc_ptr[d] : corpus.doc_ptr[d + 1]]]
        for d in range(corpus.n_docs)
    ]
    texts = [t for t in texts if t]
    topics = [[words[j] for j in np.argsort(-row, kind="stable")[:top]] for row in phi]
    model = CoherenceModel(
        topics=topics,
        texts=texts,
        dictionary=Dictionary(texts),
        coherence="c_npmi",
        topn=top,
        processes=1,
    )
    return float(model.get_coherence())


def utility(
    phi: np.ndarray,
    words: list[str],
    sanitized: Corpus,
    *,
    iterations: int,
    seed: int | None,
) -> dict:
    """The utility block of an audit; ``sanitized`` carries SAN's OOV id as its last word."""
    corpus = without_word(sanitized, sanitized.n_words - 1)
    reference = drop_oov(
        train_cgs(sanitized, phi.shape[0], iterations, NoiseSource.internal(seed, 90))
    )
    distance = matched_distance(phi, reference)
    return {
        "vocabulary_size": len(words),
        "umass": umass(phi, corpus, TOP),
        "npmi": npmi(phi, corpus, words),
        "perplexity_in_sample": completion_perplexity(phi, corpus),
        "against_non_private": distance.to_dict(),
        "non_private_umass": umass(reference, corpus, TOP),
    }
