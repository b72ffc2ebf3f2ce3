"""Train several M2 mechanisms on one corpus at one budget and score them side by side.

Internal and NOT differentially private: the scores (coherence, likelihood, distances to a
non-private model) are computed from the private documents, so the table is an internal
artifact for choosing a mechanism, never a release. Each mechanism gets the M2 share that a
release at the same total (epsilon, delta) would give it (``plan_budget`` with the
mechanism's own adjacency and notion), so the rows are comparable.

The headline scores are the ones a matrix without signal cannot win
(``fdptm.evaluation.metrics``): NPMI of the top 10 words above each row's floor on the
training documents, topic diversity of the top 25, how many of the top 10 are above the
floor, and the document-completion log-likelihood per token of the held-out documents
(``split_documents``: a random share of the documents never trained on). UMass (eq. 4 of
the FDPTM paper, on the training documents) follows as a column. All mechanisms share one
vocabulary, so the likelihoods are comparable within a table. The reference is the
non-private collapsed Gibbs sampler on the same training corpus (or, for synthetic data,
also the true topics); topics are matched with the Hungarian algorithm before L1, RMSE and
Kendall tau are taken.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import asdict, dataclass, replace

import numpy as np

from fdptm.evaluation.matching import matched_distance
from fdptm.evaluation.metrics import (
    TOP,
    heldout_loglik_per_token,
    npmi,
    topic_diversity,
    umass,
)
from fdptm.evaluation.topwords import words_above_floor
from fdptm.mechanisms.guarantee import label
from fdptm.mechanisms.lda import Corpus, subset, train_cgs, without_word
from fdptm.privacy.accountant import StageSpec, plan_budget
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.sanitize import drop_oov
from fdptm.tasks.spec import RunSpec

NOTE = (
    "Internal comparison, NOT differentially private: every score below is computed from "
    "the private documents. Nothing here is a release; do not publish it."
)


@dataclass(frozen=True)
class ComparisonRow:
    """One mechanism's scores (``error`` set when training failed)."""

    mechanism: str
    guarantee: str
    adjacency: str
    m2_epsilon: float
    m2_delta: float
    npmi: float
    topic_diversity: float
    words_above_floor: float
    heldout_loglik_per_token: float
    umass: float
    l1: float
    rmse: float
    kendall_tau: float
    truth_l1: float | None
    truth_cosine: float | None
    seconds: float
    error: str | None = None


def split_documents(corpus: Corpus, holdout: float, seed: int) -> tuple[Corpus, Corpus]:
    """A random ``holdout`` share of the documents as the test set, the rest to train on."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(99,)))
    test = rng.random(corpus.n_docs) < holdout
    return subset(corpus, ~test), subset(corpus, test)


def compare(
    train: Corpus,
    test: Corpus,
    spec: RunSpec,
    unit: Adjacency,
    mechanisms: list[str],
    *,
    oov: bool,
    truth: np.ndarray | None = None,
    with_m1: bool = True,
    progress=None,
) -> tuple[list[ComparisonRow], dict]:
    """Score ``mechanisms`` trained on ``train``; coherence on ``train``, held-out
    log-likelihood on ``test``.

    ``oov`` says the corpora carry SAN's OOV id as their last word (dropped from every
    matrix before scoring). ``with_m1`` plans the budget as a release with vocabulary
    selection would (M2 gets its share); without it M2 gets the whole budget.
    """
    specs = {name: _spec(spec, name) for name in mechanisms}
    budgets = {}
    for name, s in specs.items():
        stage_specs = s.stage_specs(unit)
        if not with_m1:
            stage_specs = [_whole(stage_specs[1])]
        plan = plan_budget(
            s.epsilon,
            s.delta,
            stage_specs,
            authors_are_documents=unit == Adjacency.DOCUMENT,
        )
        m2 = plan.stage("train")
        budgets[name] = (m2, s.m2_params(m2.epsilon, m2.delta, unit))
    scored_test = without_word(test, test.n_words - 1) if oov else test
    started = time.perf_counter()
    reference = _drop(
        train_cgs(
            train,
            spec.topics,
            spec.iterations,
            NoiseSource.internal(spec.seed, 50),
            alpha=spec.lda_alpha,
            beta=spec.lda_beta,
        ),
        oov,
    )
    baseline_seconds = time.perf_counter() - started
    rows = [_row("non-private CGS (reference)", "NOT private", "-", 0.0, 0.0)]
    rows[0] = _score(rows[0], reference, reference, train, scored_test, truth, baseline_seconds)
    for i, name in enumerate(mechanisms):
        m2, params = budgets[name]
        g = specs[name].m2.guarantee(params)
        row = _row(
            name,
            label(g.notion, g.epsilon, g.delta, g.gamma),
            g.adjacency.value,
            m2.epsilon,
            m2.delta,
        )
        started = time.perf_counter()
        try:
            phi = specs[name].m2.train(
                train, spec.topics, params, NoiseSource.internal(spec.seed, 60 + i)
            )
        except Exception as exc:  # a failing mechanism is a row, not a failed comparison
            err = f"{type(exc).__name__}: {exc}"
            rows.append(_failed(row, err, time.perf_counter() - started))
            traceback.print_exc()
            continue
        seconds = time.perf_counter() - started
        rows.append(_score(row, _drop(phi, oov), reference, train, scored_test, truth, seconds))
        if progress:
            progress(1)
    meta = {
        "note": NOTE,
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "topics": spec.topics,
        "iterations": spec.iterations,
        "unit": unit.value,
        "vocabulary_size": train.n_words - 1 if oov else train.n_words,
        "train_documents": train.n_docs,
        "test_documents": test.n_docs,
        "budget": "M2 share of a release at (epsilon, delta)"
        if with_m1
        else "whole (epsilon, delta) to M2",
    }
    return rows, meta


def _spec(spec: RunSpec, name: str) -> RunSpec:
    return replace(spec, mechanism=name, allow_unproven=True)


def _whole(stage: StageSpec) -> StageSpec:
    return replace(stage, epsilon_fraction=1.0)


def _drop(phi: np.ndarray, oov: bool) -> np.ndarray:
    return drop_oov(phi) if oov else phi


def _row(name, guarantee, adjacency, eps, delta) -> ComparisonRow:
    nan = math.nan
    return ComparisonRow(
        name,
        guarantee,
        adjacency,
        eps,
        delta,
        npmi=nan,
        topic_diversity=nan,
        words_above_floor=nan,
        heldout_loglik_per_token=nan,
        umass=nan,
        l1=nan,
        rmse=nan,
        kendall_tau=nan,
        truth_l1=None,
        truth_cosine=None,
        seconds=nan,
    )


def _failed(row: ComparisonRow, error: str, seconds: float) -> ComparisonRow:
    return ComparisonRow(**{**asdict(row), "error": error, "seconds": seconds})


def _score(row, phi, reference, train, test, truth, seconds) -> ComparisonRow:
    dist = matched_distance(phi, reference)
    fields = asdict(row)
    labels = [str(j) for j in range(phi.shape[1])]  # NPMI only needs word identities
    fields.update(
        npmi=npmi(phi, train, labels, TOP),
        topic_diversity=topic_diversity(phi),
        words_above_floor=words_above_floor(phi, TOP),
        heldout_loglik_per_token=heldout_loglik_per_token(phi, test),
        umass=umass(phi, train, TOP),
        l1=dist.l1,
        rmse=dist.rmse,
        kendall_tau=dist.kendall_tau,
        seconds=seconds,
    )
    if truth is not None:
        to_truth = matched_distance(phi, truth)
        fields.update(truth_l1=to_truth.l1, truth_cosine=to_truth.cosine)
    return ComparisonRow(**fields)


def markdown(rows: list[ComparisonRow], meta: dict) -> str:
    """The comparison as a markdown table, led by the not-DP note and a legend (RMSE is in
    the JSON only, to keep the table narrow)."""
    truth = any(r.truth_l1 is not None for r in rows)
    head = (
        "| mechanism | guarantee (M2) | adjacency | M2 epsilon | NPMI | diversity | "
        "above floor | held-out LL/token | UMass | L1 | Kendall tau | "
        + ("L1 to truth | cosine to truth | " if truth else "")
    ) + "seconds |"
    lines = [
        f"> {meta['note']}",
        "",
        f"epsilon={meta['epsilon']:g}, delta={meta['delta']:g} ({meta['budget']}), "
        f"{meta['topics']} topics, {meta['iterations']} iterations, unit {meta['unit']}, "
        f"{meta['vocabulary_size']} words, "
        f"{meta['train_documents']} training / {meta['test_documents']} held-out documents",
        "",
        "Higher is better in the first four score columns. NPMI (-1 to 1): gensim's, of "
        "the top 10 words above each topic's floor, on the training documents (a topic "
        "with fewer than 2 such words, or within 0.05 of uniform, scores -1). Diversity "
        "(0 to 1): distinct above-floor words among the topics' top 25. Above floor: how "
        "many of a topic's top 10 words are above its floor (of 10). Held-out LL/token: "
        "document-completion log-likelihood per token of the held-out documents, in nats "
        f"(a uniform matrix scores {-math.log(meta['vocabulary_size']):.2f}). UMass: eq. 4 "
        "of the FDPTM paper, for comparison with the paper only (it rewards small "
        "vocabularies). L1 and Kendall tau: against the non-private model after topic "
        "matching.",
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {r.mechanism} | {r.guarantee} | {r.adjacency} | failed: {r.error} |")
            continue
        cells = [
            r.mechanism,
            r.guarantee,
            r.adjacency,
            f"{r.m2_epsilon:.4g}",
            f"{r.npmi:.3f}",
            f"{r.topic_diversity:.2f}",
            f"{r.words_above_floor:.1f}",
            f"{r.heldout_loglik_per_token:.3f}",
            f"{r.umass:.1f}",
            f"{r.l1:.3f}",
            f"{r.kendall_tau:.3f}",
        ]
        if truth:
            cells += [f"{r.truth_l1:.3f}", f"{r.truth_cosine:.3f}"]
        cells.append(f"{r.seconds:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
