"""Utility of a topic-word matrix: NPMI, topic diversity, words above the floor, held-out
likelihood, and UMass.

Every measure here that reads documents reads private ones, so its values are internal,
non-DP statistics: they go to internal comparison and audit reports, never into a release.

Why these are the headline measures and UMass is only a column: UMass (eq. 4) sums
log((D(v_m, v_l) + 1) / D(v_l)) over the top words, and every term is largest when the
words are few and frequent, so a model on a handful of common words outscores one on
the full vocabulary: UMass rewards exactly the failure a small epsilon_1 causes. On
PHEME (``pheme_clean.json``, k = 5, non-private collapsed Gibbs sampling, 200
iterations), a model on the 5 most frequent words scores UMass -38.8 against -116.6 on
all 5,942 words, but NPMI -0.26 against 0.11, topic diversity 0.04 against 0.74, and 2.8
of its top 10 words above the floor against 10. The headline measures cannot be raised
that way:

* NPMI (gensim's ``c_npmi``, Bouma 2009; Lau et al. 2014; Roeder et al. 2015) of each
  topic's top ``TOP`` words, averaged over topics. Only words strictly above their row's
  floor count as top words (``fdptm.evaluation.topwords``): DP mechanisms floor noisy
  counts, so most of a released row ties at its minimum and a "top 10" padded with those
  ties is not 10 words the topic chose. Choices, each made so that a release without
  signal cannot score well:

  - a topic with fewer than 2 words above the floor has no word pair, so its NPMI is
    undefined; it scores -1, NPMI's minimum (the value of words that never co-occur).
    Scoring it 0 ("independent") would flatter it: the top words of a random matrix
    score below 0 (gensim scores a pair that never co-occurs
    log(1e-12 / (p(x) p(y))) / -log(1e-12), between -1 and about -0.5 for words of
    ordinary frequency), so a release of empty topics would beat a noisy one. With -1,
    a topic without signal never raises the mean.
  - the same holds for every topic ``fdptm.evaluation.topwords.no_signal`` flags, which
    includes a row within total-variation distance 0.05 of uniform even when its words
    are all above the floor: the top words of a nearly flat row are the corpus's most
    frequent words (whatever count survived the noise), whose chance co-occurrence
    scores near 0. In ``fdptm compare`` on a synthetic LDA corpus (1,000 documents,
    V = 300, k = 5, 30 iterations, epsilon 5), hdp-lda's rows were all at
    distance 0.002 from uniform (held-out likelihood equal to the uniform matrix's) and
    scored NPMI -0.06, above topicdp-laplace's -0.60, whose rows at least carry noise
    around the data; scored -1, such a release no longer beats anything.
  - a top word that never occurs in the reference documents has no probability to
    normalise by; gensim would silently drop it, which would score a topic on its known
    words only. Each pair with such a word scores -1 instead.
  - co-occurrence is counted per document (gensim's sliding window set to the longest
    document), the same unit as UMass's D(., .), and a document counts even when none of
    its words is in the vocabulary (SAN's OOV tokens stay in it as a token that is no
    word). A pair's score then depends only on the pair and the documents, not on which
    other words the DP vocabulary kept: with gensim's default 10-token window over
    sanitised text, a smaller vocabulary would make each window span more text (and
    dropping the documents left empty would shrink the number of documents), both of
    which move NPMI with the vocabulary size.
  - the reference documents are the ones passed in (the training documents in
    ``fdptm compare``, the run's documents in the audit); ``reference_texts`` replaces
    them, e.g. with a full clean corpus in a benchmark.

* Topic diversity (Dieng et al. 2020, "Topic modeling in embedding spaces", TACL):
  the number of distinct words among every topic's top ``DIVERSITY_TOP`` (25) words,
  divided by 25 k. Only words above the floor count as distinct words (none of a "no
  signal" topic's, as for NPMI), and the denominator stays Dieng's 25 k: a slot a topic
  cannot fill with a word above its floor counts as a repeat. Dividing by the number of
  above-floor words instead would give a release with one real word per topic
  (different in each) the perfect score 1. 1 when the topics' top 25 are disjoint, 1/k
  when all topics are the same. Noise scores high too (random top words rarely repeat),
  so diversity says something only next to NPMI.

* Words above the floor (``fdptm.evaluation.topwords.words_above_floor``, used from
  there): the mean over topics of how many of the top 10 words are above the floor; 10
  for a model whose top 10 are all real words, 0 for a flat matrix.

* Held-out log-likelihood per token by document completion (Wallach et al. 2009,
  "Evaluation methods for topic models"): each held-out document's tokens are split in
  two parts; the first part estimates the document's topic proportions
  theta with the topic-word matrix fixed (EM, a symmetric Dirichlet alpha as smoothing),
  and the second part is scored: sum log(theta_d . phi_w) / number of scored tokens, in
  nats. The parts are the even and the odd token positions rather than the first and
  second halves (under LDA's bag of words either split is a valid completion split; the
  interleaved one does not give the estimate a different stretch of a long document
  than the scored one). Perplexity is exp(-log-likelihood per token), the formula of
  Zhao et al., section VII-A. A released matrix may give a word probability exactly 0
  (noise clipped at 0), which would make the likelihood -infinity; every model is
  therefore scored as the mixture (1 - 1e-6) phi + 1e-6 / V, which costs a
  zero-probability word about log(1e6 V) nats instead of infinity and changes nothing
  measurable for other models. Only tokens in the model's vocabulary are scored, so the
  value compares models on the same vocabulary (one ``fdptm compare`` table), not
  releases with different vocabularies: a uniform model scores -ln V.

* UMass coherence, eq. 4 of the FDPTM paper (Mimno et al. 2011), kept as a column for
  comparison with the paper: for the M = 10 most probable words v_1..v_M of a topic
  (floor ties included, as the paper ranks them), sum over m > l of
  log((D(v_m, v_l) + 1) / D(v_l)), with D the document frequency and D(., .) the
  co-document frequency; averaged over topics. A top word that occurs in no document
  (possible for a noisy matrix) has D(v_l) = 0 and an undefined term; it is counted as
  D(v_l) = 1, the smallest frequency a word can have, so the score stays finite and
  such topics still score low. Written out rather than taken from gensim because
  gensim's ``u_mass`` smooths with 1e-12 instead of eq. 4's +1 and averages instead of
  sums.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from gensim.corpora import Dictionary
from gensim.models.coherencemodel import CoherenceModel
from scipy import sparse

from fdptm.evaluation.topwords import no_signal, top_words
from fdptm.mechanisms.lda import Corpus

TOP = 10
"""Top words per topic for NPMI, UMass and words above the floor (the FDPTM paper's M)."""
DIVERSITY_TOP = 25
"""Top words per topic for topic diversity (Dieng et al. 2020)."""
UNIFORM_MIX = 1e-6
NO_WORD = ""
"""The token an id outside the vocabulary (SAN's OOV id) becomes in NPMI's reference
documents: PRE never produces an empty token, so it is no vocabulary word."""


def doc_word_matrix(corpus: Corpus, positions: slice = slice(None)) -> sparse.csr_matrix:
    """Documents x words counts of the tokens at ``positions`` within each document."""
    lengths = np.diff(corpus.doc_ptr)
    owner = np.repeat(np.arange(corpus.n_docs), lengths)
    offset = np.arange(corpus.n_tokens) - np.repeat(corpus.doc_ptr[:-1], lengths)
    if positions == slice(None):
        keep = np.ones(corpus.n_tokens, dtype=bool)
    else:
        keep = (offset % positions.step) == positions.start
    return sparse.csr_matrix(
        (np.ones(int(keep.sum())), (owner[keep], corpus.words[keep])),
        shape=(corpus.n_docs, corpus.n_words),
    )


def token_lists(corpus: Corpus, words: Sequence[str]) -> list[list[str]]:
    """The documents as token lists; ids outside ``words`` (SAN's OOV id) become NO_WORD."""
    tokens = np.array([*words, NO_WORD], dtype=object)
    ids = np.minimum(corpus.words, len(words))
    return [
        tokens[ids[corpus.doc_ptr[d] : corpus.doc_ptr[d + 1]]].tolist()
        for d in range(corpus.n_docs)
    ]


def npmi(
    phi: np.ndarray,
    corpus: Corpus,
    words: Sequence[str],
    top: int = TOP,
    reference_texts: Sequence[Sequence[str]] | None = None,
) -> float:
    """Mean over topics of gensim's NPMI of each topic's top ``top`` words above its floor,
    co-occurrence counted per document of ``corpus`` (or of ``reference_texts``); a "no
    signal" topic or one with fewer than 2 such words, and a pair with a word absent from
    the reference, score -1 (module docstring)."""
    if reference_texts is None:
        reference = token_lists(corpus, words)
    else:
        reference = [list(t) for t in reference_texts]
    reference = [t for t in reference if t]
    if not reference:
        raise ValueError("NPMI needs at least one non-empty reference document")
    dictionary = Dictionary(reference)
    topics = [
        [] if silent else [w for w, _ in listed]
        for listed, silent in zip(top_words(phi, list(words), top), no_signal(phi), strict=True)
    ]
    scores = np.full(len(topics), -1.0)
    known = {i: [w for w in t if w in dictionary.token2id] for i, t in enumerate(topics)}
    scorable = [i for i, t in known.items() if len(t) >= 2]
    if scorable:
        model = CoherenceModel(
            topics=[known[i] for i in scorable],
            texts=reference,
            dictionary=dictionary,
            coherence="c_npmi",
            window_size=max(len(t) for t in reference),
            topn=top,
            processes=1,
        )
        for i, value in zip(scorable, model.get_coherence_per_topic(), strict=True):
            pairs = _pairs(len(topics[i]))
            with_known = _pairs(len(known[i]))
            scores[i] = (value * with_known - (pairs - with_known)) / pairs
    return float(scores.mean())


def _pairs(n: int) -> int:
    return n * (n - 1) // 2


def topic_diversity(phi: np.ndarray, top: int = DIVERSITY_TOP) -> float:
    """Distinct above-floor words among the topics' top ``top`` words (none from a "no
    signal" topic), over ``top`` x k (Dieng et al. 2020; module docstring): 1 for
    disjoint topics, 1/k for identical ones."""
    columns = [str(j) for j in range(phi.shape[1])]
    listed = top_words(phi, columns, top)
    distinct = {
        w
        for words, silent in zip(listed, no_signal(phi), strict=True)
        if not silent
        for w, _ in words
    }
    return len(distinct) / (top * phi.shape[0])


def heldout_loglik_per_token(
    phi: np.ndarray, corpus: Corpus, *, alpha: float = 0.1, iterations: int = 50
) -> float:
    """Document-completion log-likelihood per scored token (nats) of ``corpus`` (held-out
    documents) under ``phi``: theta from the even positions, the odd ones scored."""
    loglik, scored = completion_logliks(phi, corpus, alpha=alpha, iterations=iterations)
    if scored.sum() == 0:
        raise ValueError("no held-out token to score: documents need at least two tokens")
    return float(loglik.sum() / scored.sum())


def completion_logliks(
    phi: np.ndarray, corpus: Corpus, *, alpha: float = 0.1, iterations: int = 50
) -> tuple[np.ndarray, np.ndarray]:
    """Per document: the document-completion log-likelihood of its odd-position tokens
    given theta fitted (EM, ``iterations`` rounds) to its even-position ones, and how many
    tokens were scored. ``phi`` is mixed with UNIFORM_MIX of the uniform distribution, so
    every scored token's log-likelihood is at least log(UNIFORM_MIX / V)."""
    observed = doc_word_matrix(corpus, slice(0, None, 2)).tocoo()
    scored = doc_word_matrix(corpus, slice(1, None, 2)).tocoo()
    k = phi.shape[0]
    phi = (1.0 - UNIFORM_MIX) * phi + UNIFORM_MIX / phi.shape[1]
    theta = np.full((corpus.n_docs, k), 1.0 / k)
    d, w, c = observed.row, observed.col, observed.data
    for _ in range(iterations):
        p = theta[d] * phi[:, w].T
        p /= p.sum(axis=1, keepdims=True)
        weighted = c[:, None] * p
        expected = np.column_stack(
            [np.bincount(d, weights=weighted[:, j], minlength=corpus.n_docs) for j in range(k)]
        )
        theta = expected + alpha
        theta /= theta.sum(axis=1, keepdims=True)
    likelihood = (theta[scored.row] * phi[:, scored.col].T).sum(axis=1)
    loglik = np.bincount(
        scored.row, weights=scored.data * np.log(likelihood), minlength=corpus.n_docs
    )
    return loglik, np.bincount(scored.row, weights=scored.data, minlength=corpus.n_docs)


def completion_perplexity(
    phi: np.ndarray, corpus: Corpus, *, alpha: float = 0.1, iterations: int = 50
) -> float:
    """Document-completion perplexity, exp(-``heldout_loglik_per_token``)."""
    return math.exp(-heldout_loglik_per_token(phi, corpus, alpha=alpha, iterations=iterations))


def umass(phi: np.ndarray, corpus: Corpus, top: int = TOP) -> float:
    """Mean over topics of eq. 4's UMass coherence of the ``top`` most probable words."""
    present = (doc_word_matrix(corpus) > 0).astype(np.float64).tocsc()
    scores = []
    for row in phi:
        words = np.argsort(-row, kind="stable")[:top]
        sub = present[:, words]
        co = (sub.T @ sub).toarray()
        freq = np.maximum(np.diag(co), 1.0)
        m, l_ = np.tril_indices(len(words), k=-1)
        scores.append(float(np.log((co[m, l_] + 1.0) / freq[l_]).sum()))
    return float(np.mean(scores))
