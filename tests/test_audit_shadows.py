"""Shadow models on random halves and LiRA on a planted member: found when in, not when out."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fdptm.audit.lira import online_scores
from fdptm.audit.shadows import half_masks, score_documents, train_on
from fdptm.evaluation.synthetic import generate_lda
from fdptm.mechanisms.lda import train_cgs
from fdptm.mechanisms.set_union import set_union_params
from fdptm.privacy.noise import NoiseSource

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

    return train_on(table, members, m1, cgs, NoiseSource.create(seed))


def test_lira_detects_a_planted_outlier_in_the_target_and_not_when_absent():
    table = _table()
    n = table.num_rows
    outlier = np.arange(n - COPIES, n)
    masks = half_masks(n, 16, np.random.default_rng(0))
    masks[:, outlier] = (np.arange(16) % 2 == 0)[:, None]  # the copies are in or out together
    shadow = np.stack(
        [score_documents(_model(table, m, 10 + i), table, 3).zeta for i, m in enumerate(masks)]
    )
    target_mask = half_masks(n, 1, np.random.default_rng(1))[0]
    scores = {}
    for present in (True, False):
        target_mask[outlier] = present
        target = score_documents(_model(table, target_mask, 99), table, 3).zeta
        scores[present] = online_scores(shadow, masks, target)[outlier[0]]
    assert scores[True] > 0 > scores[False]


def test_every_model_takes_half_of_the_documents():
    masks = half_masks(101, 8, np.random.default_rng(3))
    assert (masks.sum(axis=1) == 50).all()
    assert len({tuple(np.flatnonzero(m)) for m in masks}) == 8  # independent draws
