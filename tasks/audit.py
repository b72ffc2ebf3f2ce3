"""The membership-inference audit of a release run (FDPTM paper, sections 3 and 4.4).

``plan_audit``, ``model_statistics`` and ``conclude`` re-run the audited release's
configuration (its bounded tokens, M1 and M2 at the run's own budgets, fresh noise) on a
target half and on ``shadows`` random halves of its documents, once through the whole
pipeline and once through M2 alone on the release's vocabulary, score every document under
every model (``fdptm.audit.shadows.ModelScores``), and run the attacks of
``fdptm.audit.attacks`` on the target. For each attack they report AUC, TPR at FPR 0.1% and
1%, and the empirical epsilon lower bound (threshold chosen on half of the documents,
Clopper-Pearson on the other half), against the claim of the part of the release it tests
(the release, M1 or M2) restated for one document. The bounds hold together at the stated
confidence (Bonferroni over the attacks). A bound above its claim fails the audit (exit
code 4). ``flows/audit.py`` runs the models as tasks.

Releases that used public data are audited as they ran: the pipeline models select their
vocabulary from the run's stored public vocabulary by the run's ``--m1`` mode (with ``none``
there is no M1, no M1 claim and no vocabulary attack, and the pipeline models are the M2
models), and a ``--prior`` is learned again, non-privately, on each model's vocabulary.

Nothing here is DP and nothing is released: the audit reads private data and its results
are internal artifacts (``internal/audits/<run_id>-<mode>/``); the ledger is not charged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fdptm.audit.attacks import attacks, verdict
from fdptm.audit.bound import DocumentClaim, claim_per_document, split_bound
from fdptm.audit.lira import normality_check, roc
from fdptm.audit.report import roc_plots, write_html
from fdptm.audit.shadows import (
    ModelScores,
    complement_loglik_per_token,
    half_masks,
    score_documents,
    train_on,
    universe_size,
)
from fdptm.audit.utility import utility
from fdptm.errors import BadInputError, FdptmError
from fdptm.privacy.accountant import plan_budget
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource
from fdptm.storage.artifacts import read_parquet, write_json
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.storage.objectstore import local, read, settle
from fdptm.storage.workspace import Workspace
from fdptm.tasks.public_vocabulary import PublicVocabulary, public_tokens
from fdptm.tasks.sanitize import corpus_of
from fdptm.tasks.spec import RunSpec
from fdptm.tasks.stages import prior_counts, public_vocabulary
from fdptm.tasks.vocabulary import M1Params, choose_words, encode_table

MODES = ("online", "offline")
LEGACY_OPTIONS = {"hdp_clip": "clip", "inherent_fraction": "inherent_fraction"}
FPRS = (0.001, 0.01)
ROC_GRID = np.logspace(-4, 0, 41)
"""FPRs at which the JSON report samples each ROC curve (the plots show it in full)."""


class AuditFailedError(FdptmError):
    """An attack's empirical epsilon lower bound exceeds the release's claim."""

    exit_code = 4


@dataclass(frozen=True)
class AuditSpec:
    run_id: str
    workspace: str
    shadows: int = 16
    mode: str = "online"
    seed: int | None = None
    confidence: float = 0.95


def release_spec(catalog: Catalog, run_id: str) -> RunSpec:
    """The audited run's parameters, as its ``runs`` row recorded them."""
    rows = catalog.query("SELECT * FROM runs WHERE run_id = ?", [run_id])
    released = catalog.query("SELECT 1 FROM releases WHERE run_id = ?", [run_id])
    if rows and rows[0]["kind"] in ("local-release", "online-release"):
        raise BadInputError(
            f"{run_id} is a release from local-DP reports: the membership audit replays a "
            "central mechanism on documents, which a report dataset does not hold"
        )
    if not rows or rows[0]["kind"] != "release" or not released:
        raise BadInputError(
            f"no published release with run id {run_id!r}; list releases with "
            "`fdptm budget --dataset NAME` (its entries name their runs)"
        )
    params = json.loads(rows[0]["params"])
    options = params.setdefault("m2_options", {})
    for old, new in LEGACY_OPTIONS.items():  # runs recorded before the M2 registry
        if old in params:
            options[new] = params.pop(old)
    return RunSpec.from_dict(params)


def _attack_summary(
    scores: np.ndarray, members: np.ndarray, delta: float, confidence: float, seed: int | None
):
    curve = roc(scores, members)
    seed = 0 if seed is None else seed
    bound = split_bound(scores, members, delta=delta, confidence=confidence, seed=seed)
    return {
        "auc": curve.auc(),
        **{f"tpr_at_fpr_{f:g}": curve.tpr_at(f) for f in FPRS},
        "epsilon_lower_bound": bound.to_dict(),
        "roc": {"fpr": ROC_GRID.tolist(), "tpr": [curve.tpr_at(f) for f in ROC_GRID]},
    }


@dataclass(frozen=True)
class AuditPlan:
    """What every model of an audit needs: picklable, so models can run in other processes."""

    spec: AuditSpec
    run: RunSpec
    m1: M1Params | None
    m2: Any
    bounded_path: str
    bounded_sha256: str
    masks: np.ndarray
    universe: int
    vocabulary: tuple[str, ...]
    manifest: dict
    claims: dict[str, DocumentClaim]
    public: PublicVocabulary | None
    prior_tokens: pa.Table | None

    @property
    def has_m1(self) -> bool:
        """Whether the run had an M1 stage (not with a public vocabulary and ``--m1 none``)."""
        return self.m1 is not None


def plan_audit(spec: AuditSpec) -> AuditPlan:
    """Validate the request and fix the run's budgets, inputs, claims and the models' halves."""
    if spec.mode not in MODES:
        raise BadInputError(f"unknown audit mode {spec.mode!r}; one of {MODES}")
    if not isinstance(spec.shadows, int) or spec.shadows < 2:
        raise BadInputError(f"an audit needs at least 2 shadow models, got {spec.shadows!r}")
    if not 0 < spec.confidence < 1:
        raise BadInputError(f"the confidence must be in (0, 1), got {spec.confidence!r}")
    workspace = Workspace.resolve(spec.workspace).require()
    catalog = Catalog(workspace)
    run = replace(release_spec(catalog, spec.run_id), workspace=str(workspace.root))
    ledger = Ledger(catalog)
    unit = ledger.default_unit(run.dataset)
    docs_are_units = ledger.authors_are_documents(run.dataset)
    budget = plan_budget(
        run.epsilon, run.delta, run.stage_specs(unit), authors_are_documents=docs_are_units
    )
    m2 = budget.stage("train")
    m1 = budget.stage("vocabulary") if "vocabulary" in run.dp_stages else None
    bounded_row = catalog.artifact(f"run/{spec.run_id}/bounded_tokens")
    if bounded_row is None or catalog.artifact(f"run/{spec.run_id}/sanitized_tokens") is None:
        raise BadInputError(
            f"run {spec.run_id}'s internal inputs (its bounded and sanitized tokens) were "
            "removed by `fdptm gc --audit-inputs`, or the run stored none: it can no longer "
            "be audited"
        )
    n_docs = bounded_row["n_rows"]
    if n_docs < 20:
        raise BadInputError(f"the run has {n_docs} documents; an audit needs at least 20")
    release = workspace.release_dir(spec.run_id)
    manifest = json.loads((release / "manifest.json").read_text(encoding="utf-8"))
    g = manifest["guarantee"]

    def per_document(epsilon, delta, adjacency, gamma=0.0) -> DocumentClaim:
        claim = claim_per_document(
            epsilon,
            delta + gamma,
            Adjacency(adjacency),
            authors_are_documents=docs_are_units,
            max_tokens_per_doc=run.bounds.max_tokens_per_doc,
        )
        if not gamma:
            return claim
        note = f"; random DP: its gamma {gamma:.3g} added to delta, a heuristic comparison"
        return replace(claim, reason=claim.reason + note)

    bounded_path = local(workspace, bounded_row["path"], bounded_row["sha256"])
    gen = NoiseSource.internal(spec.seed, 70).generator
    m2_params = run.m2_params(m2.epsilon, m2.delta, unit)
    claims = {
        "release": per_document(g["epsilon"], g["delta"], g["adjacency"], g.get("gamma", 0.0)),
        "M2": per_document(m2.epsilon, m2.delta, m2.adjacency, run.m2.guarantee(m2_params).gamma),
    }
    if m1 is not None:
        claims["M1"] = per_document(m1.epsilon, m1.delta, m1.adjacency)
    return AuditPlan(
        spec,
        run,
        None if m1 is None else run.m1_params(m1.epsilon, m1.delta),
        m2_params,
        str(bounded_path),
        bounded_row["sha256"],
        half_masks(n_docs, spec.shadows + 1, gen),
        universe_size(read_parquet(bounded_path, bounded_row["sha256"])),
        tuple(pq.read_table(release / "vocabulary.parquet").column("word").to_pylist()),
        manifest,
        claims,
        None if run.vocabulary is None else public_vocabulary(run),
        None if run.prior is None else public_tokens(run.prior, workspace, run.pre),
    )


def model_statistics(plan: AuditPlan, index: int) -> tuple[ModelScores, ModelScores]:
    """Train the two models of half ``index`` (0 is the target's) and score every document
    under each: one through the pipeline (its own M1, from the run's public vocabulary as
    the run used it), one through M2 alone on the audited release's vocabulary (public), so
    that only M2 sees the half. Without M1 (``--m1 none``) the two are the same model. A
    ``--prior`` is learned again on each model's vocabulary, as the run did on its own."""
    bounded = read_parquet(Path(plan.bounded_path), plan.bounded_sha256)
    members = plan.masks[index]
    run = plan.run

    def own_vocabulary(table, noise):
        encoded = encode_table(table)
        return choose_words(
            run.vocabulary_selection, encoded, plan.public, plan.m1, run.vocabulary_size, noise
        ).words

    def trainer(words):
        extra = {}
        if plan.prior_tokens is not None and words:
            noise = NoiseSource.internal(plan.spec.seed, 100 + 2 * len(plan.masks) + index)
            extra["public_topics"] = prior_counts(run, plan.prior_tokens, words, noise)
        return lambda corpus, noise: run.m2.train(corpus, run.topics, plan.m2, noise, **extra)

    def scores(model):
        return score_documents(model, bounded, run.topics, plan.universe)

    def fixed(words):
        return lambda table, noise: words

    noise = NoiseSource.internal(plan.spec.seed, 100 + index)
    words = own_vocabulary(bounded.filter(pa.array(members)), noise)
    model = train_on(bounded, members, fixed(words), trainer(words), noise)
    pipeline = scores(model)
    if index == 0:  # the configuration's held-out utility, on the half the target never saw
        pipeline = replace(
            pipeline,
            held_out_loglik_per_token=complement_loglik_per_token(model, bounded, members),
        )
    if not plan.has_m1:
        return pipeline, pipeline
    released = list(plan.vocabulary)
    noise = NoiseSource.internal(plan.spec.seed, 100 + len(plan.masks) + index)
    return pipeline, scores(train_on(bounded, members, fixed(released), trainer(released), noise))


def release_utility(
    plan: AuditPlan, workspace: Workspace, catalog: Catalog, heldout_loglik_per_token: float
) -> dict:
    """The utility block of the released matrix on the run's sanitized documents, with the
    target model's held-out log-likelihood per token (the release itself has no held-out
    documents; ``fdptm.audit.utility``)."""
    spec, words = plan.spec, list(plan.vocabulary)
    release = workspace.release_dir(spec.run_id)
    phi = np.stack(
        pq.read_table(release / "topic_word.parquet")
        .column("probabilities")
        .to_numpy(zero_copy_only=False)
    )
    row = catalog.artifact(f"run/{spec.run_id}/sanitized_tokens")
    sanitized = corpus_of(read(workspace, row), len(words))
    return utility(
        phi,
        words,
        sanitized,
        heldout_loglik_per_token=heldout_loglik_per_token,
        iterations=plan.run.iterations,
        seed=spec.seed,
    )


def _failure(plan: AuditPlan, outcome: dict, out: Path) -> str:
    run = plan.run
    names = {
        "release": f"the release ({plan.claims['release'].reason})",
        "M1": f"M1 ({run.m1_mechanism}) alone",
        "M2": f"M2 ({run.m2.name}) alone, on the released vocabulary",
    }
    found = "; ".join(
        f"{names[scope]}: epsilon >= {b['lower_bound']:.4g} per document against a claim of "
        f"{b['claim']:.4g}"
        for scope, b in outcome["bounds"].items()
        if b["exceeded"]
    )
    suspects = ", ".join(outcome["suspects"]).replace(
        "undetermined",
        "undetermined (M1 or M2 leaks beyond its own test, or the budgets were added up wrongly)",
    )
    return (
        f"audit of {plan.spec.run_id} FAILED with {plan.spec.confidence:.0%} confidence: "
        f"{found}. Suspect: {suspects}. Report: {out / 'report.html'}"
    )


def conclude(plan: AuditPlan, pipeline: list[ModelScores], m2_only: list[ModelScores]) -> dict:
    """Attack the target with every model's statistics; write the report; fail loudly."""
    spec, run = plan.spec, plan.run
    workspace = Workspace.resolve(spec.workspace)
    catalog = Catalog(workspace)
    target_mask = plan.masks[0]
    manifest = plan.manifest
    g = manifest["guarantee"]
    found = attacks(spec.mode, plan.masks, pipeline, m2_only, with_m1=plan.has_m1)
    per_bound = 1 - (1 - spec.confidence) / len(found)  # Bonferroni: all bounds hold at once
    results = {}
    for name, attack in found.items():
        claim = plan.claims[attack.scope]
        delta = claim.delta if claim.delta is not None else g["delta"]
        results[name] = {
            "scope": attack.scope,
            **_attack_summary(attack.scores, target_mask, delta, per_bound, spec.seed),
        }
    outcome = verdict(results, plan.claims)
    shadow = np.stack([s.release_zeta for s in pipeline[1:]])
    report = {
        "note": "Internal audit, NOT differentially private: computed from the private "
        "documents by training models on them. Never publish it.",
        "run_id": spec.run_id,
        "dataset": run.dataset,
        "mode": spec.mode,
        "shadows": spec.shadows,
        "confidence": spec.confidence,
        "confidence_per_bound": per_bound,
        "documents": plan.masks.shape[1],
        "word_universe": plan.universe,
        "release_guarantee": {k: g[k] for k in ("notion", "epsilon", "delta", "adjacency")},
        "claims_per_document": {k: c.to_dict() for k, c in plan.claims.items()},
        "attacks": results,
        "normality": normality_check(shadow, plan.masks[1:]).to_dict(),
        "utility": release_utility(plan, workspace, catalog, pipeline[0].held_out_loglik_per_token),
        **outcome,
    }
    out = workspace.root / "internal" / "audits" / f"{spec.run_id}-{spec.mode}"
    sha = write_json(report, out / "audit.json")
    plots = {name: f"roc-{name}.png" for name in found}
    roc_plots(
        {
            out / plots[name]: (roc(attack.scores, target_mask), f"{name} ({spec.run_id})")
            for name, attack in found.items()
        }
    )
    write_html(report, manifest, plots, out / "report.html")
    catalog.register_artifact(
        f"audit/{spec.run_id}/{spec.mode}",
        spec.run_id,
        "audit",
        str((out / "audit.json").relative_to(workspace.root)),
        sha,
        "internal",
        len(results),
    )
    catalog.record_audit(report)
    pending = settle(workspace)
    if outcome["verdict"] == "failed":
        raise AuditFailedError(_failure(plan, outcome, out))
    report["path"] = str(out / "report.html")
    report["store_pending"] = pending
    return report
