"""Utility of a released topic model, measured on the run's own documents (internal, not DP).

The FDPTM paper's utility audit (section 4.4; DESIGN.md "utility" and "audit"), with the
measures that a release without signal cannot win as the headline
(``fdptm.evaluation.metrics`` says why and how each is computed):

* ``npmi``: gensim's NPMI of each topic's top 10 words above its floor, co-occurrence per
  document of the run's sanitized documents;
* ``topic_diversity``: distinct above-floor words among the topics' top 25, over 25 k;
* ``words_above_floor``: how many of each topic's top 10 words are above its floor;
* ``heldout_loglik_per_token``: document-completion log-likelihood per token on documents
  the model never saw. The released matrix was trained on all of the run's documents, so
  it has none; this is the audit's target model (the release's configuration, M1 and M2
  at the run's budgets with fresh noise, on a random half of the documents) scored on the
  other half (``fdptm.audit.shadows.complement_loglik_per_token``), so it measures the
  configuration, not the released matrix. ``perplexity_held_out`` is exp(-it);
* ``umass``: eq. 4 of the paper (top 10 words, smoothing 1), kept for comparison with it;
* ``perplexity_in_sample``: document-completion perplexity of the released matrix on the
  documents it was trained on (in-sample, hence optimistic);
* L1 / RMSE / Kendall tau against a non-private collapsed Gibbs model trained on the same
  sanitized documents, after Hungarian topic matching, and that model's NPMI, topic
  diversity, words above floor and UMass (``non_private_*``) side by side.
"""

from __future__ import annotations

import math

import numpy as np

from fdptm.evaluation.comparison import without_word
from fdptm.evaluation.matching import matched_distance
from fdptm.evaluation.metrics import TOP, completion_perplexity, npmi, topic_diversity, umass
from fdptm.evaluation.topwords import words_above_floor
from fdptm.mechanisms.lda import Corpus, train_cgs
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.sanitize import drop_oov


def utility(
    phi: np.ndarray,
    words: list[str],
    sanitized: Corpus,
    *,
    heldout_loglik_per_token: float,
    iterations: int,
    seed: int | None,
) -> dict:
    """The utility block of an audit.

    ``sanitized`` carries SAN's OOV id as its last word; ``heldout_loglik_per_token`` is
    the target model's on the half it never saw (NaN when there is none to score).
    """
    corpus = without_word(sanitized, sanitized.n_words - 1)
    reference = drop_oov(
        train_cgs(sanitized, phi.shape[0], iterations, NoiseSource.internal(seed, 90))
    )
    distance = matched_distance(phi, reference)
    return {
        "vocabulary_size": len(words),
        "npmi": npmi(phi, sanitized, words, TOP),
        "topic_diversity": topic_diversity(phi),
        "words_above_floor": words_above_floor(phi, TOP),
        "heldout_loglik_per_token": heldout_loglik_per_token,
        "umass": umass(phi, corpus, TOP),
        "perplexity_in_sample": completion_perplexity(phi, corpus),
        "perplexity_held_out": math.exp(-heldout_loglik_per_token),
        "against_non_private": distance.to_dict(),
        "non_private_npmi": npmi(reference, sanitized, words, TOP),
        "non_private_topic_diversity": topic_diversity(reference),
        "non_private_words_above_floor": words_above_floor(reference, TOP),
        "non_private_umass": umass(reference, corpus, TOP),
    }
