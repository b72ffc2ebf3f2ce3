"""Train several M2 mechanisms on one corpus at one budget and score them side by side.

Internal and NOT differentially private: the scores (coherence, perplexity, distances to a
non-private model) are computed from the private documents, so the table is an internal
artifact for choosing a mechanism, never a release. Each mechanism gets the M2 share that a
release at the same total (epsilon, delta) would give it (``plan_budget`` with the
mechanism's own adjacency and notion), so the rows are comparable. The reference is the
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
from fdptm.evaluation.metrics import completion_perplexity, umass
from fdptm.mechanisms.guarantee import label
from fdptm.mechanisms.lda import Corpus, train_cgs
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
    umass: float
    perplexity: float
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


def subset(corpus: Corpus, keep: np.ndarray) -> Corpus:
    """The documents where ``keep`` is True, in order."""
    lengths = np.diff(corpus.doc_ptr)
    token_keep = np.repeat(keep, lengths)
    doc_ptr = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(lengths[keep], out=doc_ptr[1:])
    authors = None if corpus.doc_author is None else corpus.doc_author[keep]
    return Corpus(doc_ptr, corpus.words[token_keep], corpus.n_words, authors)


def without_word(corpus: Corpus, word: int) -> Corpus:
    """The corpus with every token of ``word`` removed and ``n_words`` cut to ``word``
    (the OOV id is the last one), documents left empty dropped."""
    keep_token = corpus.words != word
    owner = np.repeat(np.arange(corpus.n_docs), np.diff(corpus.doc_ptr))
    lengths = np.bincount(owner[keep_token], minlength=corpus.n_docs)
    doc_ptr = np.zeros(corpus.n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=doc_ptr[1:])
    trimmed = Corpus(doc_ptr, corpus.words[keep_token], word, corpus.doc_author)
    return subset(trimmed, lengths > 0)


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
    """Score ``mechanisms`` trained on ``train``; perplexity on ``test``.

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
        name, guarantee, adjacency, eps, delta, nan, nan, nan, nan, nan, None, None, nan
    )


def _failed(row: ComparisonRow, error: str, seconds: float) -> ComparisonRow:
    return ComparisonRow(**{**asdict(row), "error": error, "seconds": seconds})


def _score(row, phi, reference, train, test, truth, seconds) -> ComparisonRow:
    dist = matched_distance(phi, reference)
    fields = asdict(row)
    fields.update(
        umass=umass(phi, train),
        perplexity=completion_perplexity(phi, test),
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
    """The comparison as a markdown table, led by the not-DP note."""
    truth = any(r.truth_l1 is not None for r in rows)
    head = (
        "| mechanism | guarantee (M2) | adjacency | M2 epsilon | UMass | perplexity | "
        "L1 | RMSE | Kendall tau | " + ("L1 to truth | cosine to truth | " if truth else "")
    ) + "seconds |"
    lines = [
        f"> {meta['note']}",
        "",
        f"epsilon={meta['epsilon']:g}, delta={meta['delta']:g} ({meta['budget']}), "
        f"{meta['topics']} topics, {meta['iterations']} iterations, unit {meta['unit']}, "
        f"{meta['train_documents']} training / {meta['test_documents']} held-out documents",
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
            f"{r.umass:.2f}",
            f"{r.perplexity:.1f}",
            f"{r.l1:.3f}",
            f"{r.rmse:.2e}",
            f"{r.kendall_tau:.3f}",
        ]
        if truth:
            cells += [f"{r.truth_l1:.3f}", f"{r.truth_cosine:.3f}"]
        cells.append(f"{r.seconds:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
