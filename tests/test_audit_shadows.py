"""Shadow models on random halves and LiRA on a planted member: found when in, not when out."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from fdptm.audit.lira import online_scores
from fdptm.audit.shadows import (
    OOV_MASS,
    TrainedModel,
    half_masks,
    score_documents,
    train_on,
    universe_size,
)
from fdptm.evaluation.synthetic import generate_lda
from fdptm.mechanisms.lda import train_cgs
from fdptm.mechanisms.set_union import set_union_params
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.vocabulary import select_vocabulary

OUTLIER = ["zebra", "yak", "quokka", "okapi", "tapir", "dugong", "axolotl", "narwhal"]
COPIES = 3


def _table() -> pa.Table:
    data = generate_lda(200, 60, 3, doc_length=20, eta=0.1, seed=4)
    c = data.corpus
    docs = [[f"w{w}" for w in c.words[c.doc_ptr[d] : c.doc_ptr[d + 1]]] for d in range(c.n_docs)]
    docs += [OUTLIER * 2] * COPIES  # one outlying document, written by three authors
    n = len(docs)
    return pa.table(
        {
            "doc_id": [f"d{i}" for i in range(n)],
            "author_id": [f"a{i}" for i in range(n)],
            "tokens": pa.array(docs, pa.list_(pa.string())),
        }
    )


def _model(table, members, seed):
    m1 = set_union_params("weighted", 50.0, 1e-5)

    def cgs(corpus, noise):
        return train_cgs(corpus, 3, 30, noise, alpha=0.5, beta=0.01)

    def vocabulary(subset, noise):
        return select_vocabulary(subset, m1, noise)

    return train_on(table, members, vocabulary, cgs, NoiseSource.create(seed))


def _zeta(model, table):
    return score_documents(model, table, 3, universe_size(table)).release_zeta


def test_lira_detects_a_planted_outlier_in_the_target_and_not_when_absent():
    table = _table()
    n = table.num_rows
    outlier = np.arange(n - COPIES, n)
    masks = half_masks(n, 16, np.random.default_rng(0))
    masks[:, outlier] = (np.arange(16) % 2 == 0)[:, None]  # the copies are in or out together
    shadow = np.stack([_zeta(_model(table, m, 10 + i), table) for i, m in enumerate(masks)])
    target_mask = half_masks(n, 1, np.random.default_rng(1))[0]
    scores = {}
    for present in (True, False):
        target_mask[outlier] = present
        target = _zeta(_model(table, target_mask, 99), table)
        scores[present] = online_scores(shadow, masks, target)[outlier[0]]
    assert scores[True] > 0 > scores[False]


def test_every_model_takes_half_of_the_documents():
    masks = half_masks(101, 8, np.random.default_rng(3))
    assert (masks.sum(axis=1) == 50).all()
    assert len({tuple(np.flatnonzero(m)) for m in masks}) == 8  # independent draws


def test_statistics_split_a_document_between_the_vocabulary_and_the_rest_of_the_universe():
    table = pa.table(
        {
            "doc_id": ["d0", "d1"],
            "author_id": ["a0", "a1"],
            "tokens": pa.array([["a", "b", "a", "x"], ["y", "z"]], pa.list_(pa.string())),
        }
    )
    phi = np.array([[0.5, 0.5], [0.9, 0.1]])
    scores = score_documents(TrainedModel(["a", "b"], phi), table, 2, universe_size(table))
    assert universe_size(table) == 5 and list(scores.kept) == [3, 0]
    # eq. 3 on "a b a": theta-hat puts everything on topic 0 (log .5 each) or mixes; the
    # optimum of 2 log(.5t + .9(1-t)) + log(.5t + .1(1-t)) over t in [0, 1]
    t = np.linspace(0, 1, 100_001)
    best = (2 * np.log(0.5 * t + 0.9 * (1 - t)) + np.log(0.5 * t + 0.1 * (1 - t))).max()
    assert scores.in_vocabulary.zeta[0] == pytest.approx(best, abs=1e-6)
    outside = np.log(OOV_MASS / 3)  # x, y, z share the mass outside the vocabulary
    assert scores.release_zeta[0] == pytest.approx(best + 3 * np.log1p(-OOV_MASS) + outside)
    assert scores.release_zeta[1] == pytest.approx(2 * outside)
    empty = score_documents(TrainedModel([], np.zeros((0, 0))), table, 2, 5)
    assert np.allclose(empty.release_zeta, [4 * np.log(OOV_MASS / 5), 2 * np.log(OOV_MASS / 5)])
