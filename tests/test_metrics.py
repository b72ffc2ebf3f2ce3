"""The headline utility measures (NPMI, topic diversity, held-out likelihood) on real gensim:
they rank planted topics above noise, and a matrix without signal cannot score well."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gensim.corpora import Dictionary
from gensim.models.coherencemodel import CoherenceModel

from fdptm.evaluation.comparison import split_documents, without_word
from fdptm.evaluation.metrics import (
    completion_perplexity,
    heldout_loglik_per_token,
    npmi,
    topic_diversity,
    umass,
)
from fdptm.evaluation.synthetic import generate_lda
from fdptm.mechanisms.lda import Corpus, train_cgs
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.sanitize import drop_oov

K, V = 4, 200


@pytest.fixture(scope="module")
def planted():
    return generate_lda(600, V, K, doc_length=30, eta=0.05, seed=3)


@pytest.fixture(scope="module")
def words():
    return [f"w{j}" for j in range(V)]


def test_npmi_of_planted_topics_beats_a_random_matrix(planted, words):
    noise = np.random.default_rng(0).dirichlet(np.ones(V), size=K)
    assert npmi(planted.phi, planted.corpus, words) > npmi(noise, planted.corpus, words) + 0.3


def test_a_topic_without_signal_never_raises_npmi(planted, words):
    real = npmi(planted.phi, planted.corpus, words)
    flat = np.full((1, V), 1.0 / V)
    one_word = np.full((1, V), 0.5 / (V - 1))
    one_word[0, 7] = 0.5
    # all ten top words above the floor, but within total-variation distance 0.05 of flat
    nearly_flat = 0.97 * flat + 0.03 * planted.phi[:1]
    for empty in (flat, one_word, nearly_flat):
        # as an extra topic, and in place of a real one
        assert npmi(np.vstack([planted.phi, empty]), planted.corpus, words) < real
        assert npmi(np.vstack([planted.phi[1:], empty]), planted.corpus, words) < real
        assert npmi(empty, planted.corpus, words) == -1.0


def test_a_top_word_missing_from_the_reference_scores_minus_one_per_pair():
    words = ["apple", "pear", "plum", "kiwi"]
    reference = [["apple", "pear"], ["apple", "pear", "plum"], ["plum"], ["plum", "pear"]]
    phi = np.array([[0.4, 0.3, 0.0, 0.2]]) / 0.9  # apple, pear and kiwi above the floor 0
    unused = Corpus(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), len(words))
    known = CoherenceModel(
        topics=[["apple", "pear"]],
        texts=reference,
        dictionary=Dictionary(reference),
        coherence="c_npmi",
        window_size=3,
        topn=2,
        processes=1,
    ).get_coherence()
    # kiwi never occurs: of the 3 pairs, the two with kiwi score -1
    got = npmi(phi, unused, words, reference_texts=reference)
    assert got == pytest.approx((known - 2) / 3)
    assert known > -1


def test_npmi_does_not_depend_on_the_rest_of_the_vocabulary(planted, words):
    """A topic's NPMI is the same when SAN turned every other word into the OOV token:
    co-occurrence is per document and documents left with only OOV tokens still count."""
    topic = planted.phi[:1]
    kept = np.argsort(-topic[0])[:11]  # the 11th is the small row's floor
    remap = np.full(V, len(kept))
    remap[kept] = np.arange(len(kept))
    small = Corpus(planted.corpus.doc_ptr, remap[planted.corpus.words], len(kept) + 1)
    small_phi = topic[:, kept] / topic[:, kept].sum()
    full = npmi(topic, planted.corpus, words)
    assert npmi(small_phi, small, [words[j] for j in kept]) == pytest.approx(full)


def test_a_tiny_vocabulary_flatters_umass_but_not_the_headline_measures(planted, words):
    """The failure a small epsilon_1 causes: M1 keeps only the 5 most frequent words. A
    model on them beats the full-vocabulary model's UMass, and loses on NPMI and
    diversity."""
    kept = np.argsort(-np.bincount(planted.corpus.words, minlength=V))[:5]
    remap = np.full(V, len(kept), dtype=np.int32)  # every other word becomes SAN's OOV id
    remap[kept] = np.arange(len(kept))
    small = Corpus(planted.corpus.doc_ptr, remap[planted.corpus.words], len(kept) + 1)
    full = train_cgs(planted.corpus, K, 100, NoiseSource.internal(0, 1))
    tiny = drop_oov(train_cgs(small, K, 100, NoiseSource.internal(0, 1)))
    assert umass(tiny, without_word(small, len(kept))) > umass(full, planted.corpus)
    assert npmi(tiny, small, [words[j] for j in kept]) < npmi(full, planted.corpus, words) - 0.2
    assert topic_diversity(tiny) < 0.1 < 0.5 < topic_diversity(full)


def _block_topics(k: int, top: int = 25) -> np.ndarray:
    phi = np.zeros((k, k * top))
    for j in range(k):
        phi[j, j * top : (j + 1) * top] = np.linspace(2.0, 1.0, top)
    return phi / phi.sum(axis=1, keepdims=True)


def test_topic_diversity_is_one_for_disjoint_topics_and_one_over_k_for_identical_ones():
    disjoint = _block_topics(K)
    assert topic_diversity(disjoint) == pytest.approx(1.0)
    identical = np.tile(disjoint[:1], (K, 1))
    assert topic_diversity(identical) == pytest.approx(1.0 / K)
    # floor ties are not words: one real word per topic, all different, is not diverse
    single = np.full((K, 100), 0.5 / 99)
    single[np.arange(K), np.arange(K)] = 0.5
    assert topic_diversity(single) == pytest.approx(1 / 25)
    assert topic_diversity(np.full((K, 100), 0.01)) == 0.0
    nearly_flat = 0.97 * np.full((K, K * 25), 1 / (K * 25)) + 0.03 * disjoint
    assert topic_diversity(nearly_flat) == 0.0


def test_held_out_likelihood_of_the_true_topics_beats_a_uniform_matrix(planted):
    _, test = split_documents(planted.corpus, 0.2, 1)
    uniform = np.full((K, V), 1.0 / V)
    true = heldout_loglik_per_token(planted.phi, test)
    assert heldout_loglik_per_token(uniform, test) == pytest.approx(-math.log(V))
    assert true > -math.log(V) + 1.0
    assert completion_perplexity(planted.phi, test) == pytest.approx(math.exp(-true))
