"""Release: the DP topic-word matrix, the DP vocabulary and a manifest (Algorithm 1, line 6).

Files are assembled in the run's internal directory, validated with Great Expectations
(vocabulary words unique and well formed, every topic row a probability vector with no NaN,
k rows, the manifest's guarantee equal to the ledger's spends), and only then moved into
``<workspace>/releases/<run_id>/`` and recorded in the ``releases`` table. Nothing that is
not DP goes there: no counts, no input sizes, no seeds, no plain hashes of private inputs
(inputs are identified by keyed commitments, see ``Workspace.commitment``). The manifest's
exact bytes are signed with the publisher's Ed25519 key (``manifest.sig``, beside the public
key ``signer.pub``: ``fdptm.signing``), so an edited guarantee or a rewritten file whose
sha256 was updated in the manifest is refused by ``fdptm.load_release``. The manifest's
``topics`` list each topic's words only while they are strictly above the row's floor, with
their probabilities, and flag topics with no signal (``fdptm.evaluation.topwords``).
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from fdptm import signing
from fdptm.errors import FdptmError
from fdptm.evaluation import significance
from fdptm.evaluation.significance import PairEvidence, WordTest
from fdptm.evaluation.topwords import row_floor
from fdptm.faults import checkpoint
from fdptm.mechanisms.guarantee import combine_notions, describe
from fdptm.privacy.accountant import BudgetPlan, compose
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource
from fdptm.storage.artifacts import write_json, write_parquet
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.ledger import Ledger
from fdptm.storage.objectstore import read
from fdptm.storage.workspace import Workspace
from fdptm.tasks.run import calibration_of
from fdptm.tasks.spec import RunSpec
from fdptm.tasks.stages import released_parameters, run_batches
from fdptm.tasks.validation import Check, failed_checks, failing_rows
from fdptm.version import code_version

TOP_WORDS = 10
SIGNIFICANT_DIGITS = 4
SEEDED = (
    " as calibrated, but this is a TEST RUN with a fixed seed: anyone who knows the seed can "
    "remove the noise, so it is NOT differentially private; never publish it"
)

COVERS = {
    Adjacency.AUTHOR: "any two datasets that differ by one author with all of their documents",
    Adjacency.AUTHOR_REPLACE: "any two datasets of the same number of documents that differ "
    "in the documents of one author (each replaced by another document)",
    Adjacency.DOCUMENT: "any two datasets that differ by one document",
    Adjacency.DOCUMENT_REPLACE: "any two datasets of the same number of documents that differ "
    "in one document, replaced by another document of the same author",
    Adjacency.WORD: "any two datasets whose preprocessed documents differ in one token, "
    "replaced by another token (same documents, same lengths)",
}
PRIVACY_UNIT = {
    Adjacency.AUTHOR: "author",
    Adjacency.AUTHOR_REPLACE: "author (replaced, not removed)",
    Adjacency.DOCUMENT: "document",
    Adjacency.DOCUMENT_REPLACE: "document (replaced, not removed)",
    Adjacency.WORD: "token",
}
NOT_COVERED = {
    Adjacency.AUTHOR: "Authors are protected individually; information shared by many authors "
    "(the topics themselves) is what the release is for.",
    Adjacency.AUTHOR_REPLACE: "The number of documents is not protected (replace-one "
    "adjacency keeps it fixed); what one author wrote is, as long as the author is "
    "replaced by someone else rather than removed.",
    Adjacency.DOCUMENT: "When one person wrote several documents, each document is protected, "
    "the person only by group privacy (k documents: k times epsilon).",
    Adjacency.DOCUMENT_REPLACE: "The number of documents is not protected (replace-one "
    "adjacency keeps it fixed), and a person with several documents only by group privacy.",
    Adjacency.WORD: "Only single preprocessed tokens are protected. Whether a document or an "
    "author is in the dataset is NOT protected at all (that changes the number of tokens and "
    "documents, which word-level adjacency does not cover): membership inference on documents "
    "or authors is not bounded by this guarantee. Replacing all m tokens of a document "
    "costs m times epsilon by group privacy.",
}


def _digits(floor: float, lowest: float | None) -> int:
    """Significant digits for a topic's numbers: ``SIGNIFICANT_DIGITS``, or as many more as it
    takes for its lowest listed probability to read above its floor (17 tell any two floats
    apart), so that no listed word reads as equal to the floor."""
    digits = SIGNIFICANT_DIGITS
    while lowest is not None and f"{lowest:.{digits}g}" == f"{floor:.{digits}g}":
        digits += 1
    return digits


PRESENTED = ("evidence",)
"""Released M2 outputs the manifest carries in its ``presentation`` block instead (a biterm
release's word-list evidence), so that they are stated once."""


def topic_summaries(
    phi: np.ndarray, words: list[str], noise: WordTest | None, n: int = TOP_WORDS
) -> list[dict]:
    """The manifest's ``topics``: per topic its floor (the row's minimum probability), its
    ``no_signal`` flag and up to n words that stand above the noise (``noise``: the test of
    ``fdptm.evaluation.significance``; None: the words above the floor, untested) with their
    probabilities, rounded to ``SIGNIFICANT_DIGITS`` (more where a word is that close to
    the floor). Post-processing of the DP matrix and public parameters.
    """
    summaries = []
    lists, flags = significance.listed(phi, words, noise, n=n)
    for i, (row, listed, flag) in enumerate(zip(phi, lists, flags, strict=True)):
        floor = row_floor(row)
        digits = _digits(floor, listed[-1][1] if listed else None)
        summaries.append(
            {
                "topic": i,
                "no_signal": flag,
                "tested": noise is not None,
                "floor": float(f"{floor:.{digits}g}"),
                "words": [{"word": w, "probability": float(f"{p:.{digits}g}")} for w, p in listed],
            }
        )
    return summaries


VOCABULARY_SOURCES = {
    "set-union": "the private words, selected by DP set union",
    "none": "public vocabulary {source}: its {size} most frequent words (M1 skipped: no "
    "private data read, nothing charged)",
    "bayesian-prior": "public vocabulary {source}: M1 released a DP word distribution over it "
    "and kept its (at most) {size} most probable words (a word absent from it is never "
    "released)",
    "extend": "public vocabulary {source}: its {size} most frequent words, plus the private "
    "words beyond them that DP set union selected",
}


FILLED = (
    "M1's DP vocabulary had {dp} words, fewer than the {k} topics: the release adds the {n} "
    "most frequent public words not among them ({sources}) so that M2 could train k topics. "
    "Post-processing of M1's output and public lists: the guarantee is unchanged, and these "
    "words were not selected from the private data."
)


def vocabulary_stage(spec: RunSpec, calibration, filler: list[dict] | None = None) -> dict:
    """The manifest's M1 entry: the vocabulary's source, M1's budget if it spent any, and the
    public words that filled a DP vocabulary smaller than k (``stages.public_filler``)."""
    source = VOCABULARY_SOURCES[spec.vocabulary_selection].format(
        source=spec.vocabulary, size=spec.vocabulary_size
    )
    if filler:
        sources = sorted({row["source"] for row in filler})
        source += ". " + FILLED.format(
            dp="no" if len(filler) == spec.topics else spec.topics - len(filler),
            k=spec.topics,
            n=len(filler),
            sources=", ".join(sources),
        )
    if calibration.m1 is None:
        return {
            "stage": "vocabulary",
            "step": "M1",
            "mechanism": "none (public vocabulary)",
            "adjacency": "none",
            "epsilon": 0.0,
            "delta": 0.0,
            "contributes_epsilon": 0.0,
            "contributes_delta": 0.0,
            "notion": "public",
            "vocabulary_source": source,
        }
    m1 = calibration.plan.stage("vocabulary")
    return {
        "stage": "vocabulary",
        "step": "M1",
        "mechanism": m1.mechanism,
        "adjacency": m1.adjacency.value,
        "epsilon": m1.epsilon,
        "delta": m1.delta,
        "contributes_epsilon": m1.release_epsilon,
        "contributes_delta": m1.release_delta,
        "notion": m1.notion,
        "parameters": calibration.m1.to_dict(),
        "vocabulary_source": source,
        "public_filler": [row["word"] for row in filler or []],
        "reference": (
            "bayesian-dp-ngrams.txt sec. 3 (Algorithm 1, Corollary 1) with a global l2 bound; "
            "fdptm/mechanisms/bayesian_prior.py"
            if spec.vocabulary_selection == "bayesian-prior"
            else "FDPTM paper sec. 4.2/4.4; Carvalho et al. 2022; Gopi et al. 2020"
        ),
    }


TUNED_ASSUMES = (
    "the run's duration and the catalog's internal timestamps stay with the operator: they "
    "grow with the number of trials, which Papernot & Steinke's bound requires to be secret"
)


def filler_of(spec: RunSpec, workspace: Workspace, catalog: Catalog) -> list[dict] | None:
    """The run's public filler words with their sources (None when M1 gave at least k)."""
    artifact = catalog.artifact(f"run/{spec.run_id}/vocabulary_filler")
    return None if artifact is None else read(workspace, artifact).to_pylist()


def build_manifest(
    spec: RunSpec, words: list[str], phi: np.ndarray, released: dict | None = None
) -> dict:
    """The release's manifest; the guarantee is recomputed from the ledger's spends.

    ``released``: DP parameters M2 released with the matrix (dp-vi's private clipping norm).

    It carries the release date, never a time: a start time (or a run id made of one) next
    to a finishing time would publish the pipeline's run time, which grows with the input.
    """
    workspace = Workspace.resolve(spec.workspace)
    catalog = Catalog(workspace)
    ledger = Ledger(catalog)
    calibration = calibration_of(spec)
    plan = calibration.plan
    with catalog.connect():  # the manifest's catalog reads: one block
        entries = catalog.query(
            "SELECT stage, adjacency, epsilon, delta, state, notion, gamma FROM ledger"
            " WHERE run_id = ? AND stage IN ('vocabulary', 'train')",
            [spec.run_id],
        )
        authors_are_documents = ledger.authors_are_documents(spec.dataset)
        dataset_unit = ledger.default_unit(spec.dataset)
        batches = run_batches(spec)
        partitions = partitions_statement(spec, ledger)
    spent = [e for e in entries if e["state"] == "spent"]
    if len(entries) != len(spec.dp_stages) or sorted(e["stage"] for e in spent) != sorted(
        spec.dp_stages
    ):
        raise FdptmError(f"run {spec.run_id}: every DP stage must have spent before release")
    filler = filler_of(spec, workspace, catalog)  # outside the block: it may fetch
    spends = [(e["epsilon"], e["delta"], Adjacency(e["adjacency"])) for e in spent]
    guarantee = compose(
        spends,
        authors_are_documents=authors_are_documents,
        notions=[(e["notion"], e["gamma"]) for e in spent],
    )
    m2 = plan.stage("train")
    m2_params = calibration.m2
    m2_guarantee = calibration.guarantee
    # with a public prior each entry carries eta + w n^pub, not the public constant the test
    # subtracts: its prior words would pass as signal, so such a release is untested; a
    # biterm release's test reads its noisy pair statistic, which no prior enters
    test = spec.m2.entry_noise(m2_params, released or {})
    noise = test if isinstance(test, PairEvidence) or not spec.prior else None
    return {
        "manifest_version": 2,
        "run_id": spec.run_id,
        "dataset": spec.dataset,
        "release_date": now().date().isoformat(),
        "guarantee": {
            "notion": guarantee.notion,
            "statement": describe(
                guarantee.notion, guarantee.epsilon, guarantee.delta, guarantee.gamma
            )
            + (SEEDED if spec.seed is not None else ""),
            "seeded": spec.seed is not None,
            "epsilon": guarantee.epsilon,
            "delta": guarantee.delta,
            "gamma": guarantee.gamma,
            "adjacency": guarantee.unit.value,
            "neighbouring_datasets": COVERS[guarantee.unit],
            "privacy_unit": PRIVACY_UNIT[guarantee.unit],
            "dataset_unit": dataset_unit.value,
            "accountant": guarantee.accountant,
            "conversions": [
                {
                    "from": c.source.value,
                    "to": c.target.value,
                    "epsilon_in": c.epsilon_in,
                    "delta_in": c.delta_in,
                    "epsilon_out": c.epsilon_out,
                    "delta_out": c.delta_out,
                    "reason": c.reason,
                }
                for c in guarantee.conversions
            ],
            "not_covered": NOT_COVERED[guarantee.unit],
        },
        "budget_policy": plan.policy,
        "stages": [
            vocabulary_stage(spec, calibration, filler),
            {
                "stage": "train",
                "step": "M2",
                "mechanism": m2.mechanism,
                "adjacency": m2.adjacency.value,
                "epsilon": m2.epsilon,
                "delta": m2.delta,
                "contributes_epsilon": m2.release_epsilon,
                "contributes_delta": m2.release_delta,
                "notion": m2_guarantee.notion,
                "public_prior": (
                    None
                    if spec.prior is None
                    else f"public dataset {spec.prior!r}: non-private CGS topics on it, over "
                    "this vocabulary, initialise M2 (dp-vi's first E-step, biterm's first EM "
                    "start) and are added to eta (times prior_weight) in every M-step; no "
                    "privacy cost"
                ),
                "assumes": TUNED_ASSUMES if spec.tune else None,
                "accounting": m2_guarantee.to_dict(),
                "parameters": {
                    **m2_params.to_dict(),
                    "topics": spec.topics,
                    "options": spec.m2_options,
                },
                "released_parameters": {
                    k: v
                    for k, v in (released or {}).items()
                    if not (k in PRESENTED and isinstance(noise, PairEvidence))
                },
                "reference": spec.m2.summary,
            },
        ],
        "noise": NoiseSource.create(spec.seed, sampler=spec.sampler).describe(),
        "preprocessing": asdict(spec.pre),
        "contribution_bounds": spec.bounds.to_dict(),
        "inputs": [
            {"batch": b["seq"], "commitment": workspace.commitment(b["sha256"])} for b in batches
        ],
        "input_commitment": "HMAC-SHA256(workspace secret key, sha256 of the batch file)",
        "partitions": partitions,
        "model": {
            "topics": spec.topics,
            "vocabulary_size": len(words),
            "format": "topic_word.parquet: one row per topic, 'probabilities' is a list of "
            "length vocabulary_size aligned with vocabulary.parquet's 'index'",
        },
        "code_version": code_version(),
        "presentation": significance.presentation(noise, phi.size),
        "topics": topic_summaries(phi, words, noise),
    }


def partitions_statement(spec: RunSpec, ledger: Ledger) -> dict:
    """The partitions the release read (their keys, never their sizes) and how the ledger
    composes it with releases over other partitions (``storage.ledger``)."""
    documents = ledger.default_unit(spec.dataset) == Adjacency.DOCUMENT
    buckets = ledger.author_buckets(spec.dataset)
    if documents:
        composition = (
            "parallel: documents lie in one batch and one day each, so the dataset's "
            "lifetime spend is the most any one batch-day has spent over every release that "
            "read it"
        )
    elif buckets:
        composition = (
            f"parallel at the author level over the dataset's {buckets} author buckets "
            "(declared at creation: a keyed hash of the author id), and at the document "
            "level over batch-day-bucket atoms"
        )
    else:
        composition = (
            "sequential at the author level (an author writes in many batches and days, so "
            "partitions are not disjoint in authors, and the dataset has no author buckets); "
            "parallel at the document level"
        )
    return {
        **spec.scope.to_dict(),  # keys, never sizes; batches are resolved before reserving
        "days": "every document of these batches"
        if spec.since is None
        else "documents timestamped in [since, until), UTC days",
        "composition": composition,
    }


def _validate(words: list[str], phi: np.ndarray, manifest: dict, plan: BudgetPlan) -> None:
    import great_expectations as gx

    e = gx.expectations
    vocab_problems = failing_rows(
        pd.DataFrame({"word": words}),
        [
            Check(e.ExpectColumnValuesToBeUnique(column="word"), "duplicate word"),
            Check(e.ExpectColumnValuesToNotBeNull(column="word"), "null word"),
            Check(e.ExpectColumnValuesToMatchRegex(column="word", regex=r"^[a-z]+$"), "bad word"),
        ],
        "release-vocabulary",
    )
    summary = pd.DataFrame(
        {
            "row_sum": phi.sum(axis=1),
            "row_min": phi.min(axis=1),
            "n_nan": np.isnan(phi).sum(axis=1),
            "width": np.full(phi.shape[0], phi.shape[1]),
        }
    )
    matrix_problems = failed_checks(
        summary,
        [
            Check(e.ExpectTableRowCountToEqual(value=manifest["model"]["topics"]), "k rows"),
            Check(
                e.ExpectColumnValuesToBeBetween(
                    column="row_sum", min_value=1 - 1e-9, max_value=1 + 1e-9
                ),
                "every topic row sums to 1",
            ),
            Check(
                e.ExpectColumnValuesToBeBetween(column="row_min", min_value=0.0),
                "no negative probability",
            ),
            Check(
                e.ExpectColumnValuesToBeBetween(column="n_nan", min_value=0, max_value=0), "no NaN"
            ),
            Check(
                e.ExpectColumnValuesToBeBetween(
                    column="width", min_value=len(words), max_value=len(words)
                ),
                "row width equals the vocabulary size",
            ),
        ],
        "release-matrix",
    )
    problems = [f"vocabulary row {i}: {r}" for i, rs in vocab_problems.items() for r in rs]
    problems += [f"topic-word matrix: {r}" for r in matrix_problems]
    g = manifest["guarantee"]
    notion, _ = combine_notions([(s.notion, 0.0) for s in plan.stages])
    if g["notion"] != notion:
        problems.append(f"manifest notion {g['notion']} differs from the plan's {notion}")
    if not (
        math.isclose(g["epsilon"], plan.epsilon, rel_tol=1e-9)
        and math.isclose(g["delta"], plan.delta, rel_tol=1e-9)
        and g["adjacency"] == plan.unit.value
    ):
        problems.append(
            f"manifest guarantee ({g['epsilon']}, {g['delta']}, {g['adjacency']}) differs from "
            f"the planned budget ({plan.epsilon}, {plan.delta}, {plan.unit.value})"
        )
    if problems:
        raise FdptmError("release validation failed: " + "; ".join(problems))


def publish(spec: RunSpec, vocab: dict, topic_word: dict) -> Path:
    """Assemble, validate and publish the release; returns its directory.

    Idempotent for a resumed run: a release already recorded is returned as it is. The
    signing key is read (or, the first time, created) before anything is written: a key
    that cannot sign fails the stage with nothing published, and ``--resume`` completes it.
    """
    workspace = Workspace.resolve(spec.workspace)
    catalog = Catalog(workspace)
    done = catalog.query("SELECT path FROM releases WHERE run_id = ?", [spec.run_id])
    if done:
        return workspace.root / done[0]["path"]
    key = signing.private_key(workspace)
    plan = calibration_of(spec).plan
    vocab_table = read(workspace, vocab)
    tw_table = read(workspace, topic_word)
    words = vocab_table.column("word").to_pylist()
    phi = np.stack(tw_table.column("probabilities").to_numpy(zero_copy_only=False))
    manifest = build_manifest(spec, words, phi, released_parameters(tw_table))
    _validate(words, phi, manifest, plan)
    staging = workspace.run_dir(spec.run_id) / "release-staging"
    shutil.rmtree(staging, ignore_errors=True)
    files = {
        "topic_word.parquet": write_parquet(tw_table, staging / "topic_word.parquet"),
        "vocabulary.parquet": write_parquet(vocab_table, staging / "vocabulary.parquet"),
    }
    manifest["files"] = {name: {"sha256": sha} for name, sha in files.items()}
    manifest_sha = write_json(manifest, staging / "manifest.json")
    files |= signing.sign(staging, key)
    target = workspace.release_dir(spec.run_id)
    shutil.rmtree(target, ignore_errors=True)  # an earlier attempt of this same run
    os.replace(staging, target)
    day = datetime.fromisoformat(manifest["release_date"]).replace(tzinfo=UTC).timestamp()
    for path in [*target.iterdir(), target]:  # file times say the date, not the run time
        os.utime(path, (day, day))
    checkpoint("during-release")
    try:
        _register(spec, catalog, workspace, target, files, manifest_sha, manifest)
    except BaseException:
        os.replace(target, staging)  # not released: take it out of the public area
        raise
    return target


def _register(
    spec: RunSpec,
    catalog: Catalog,
    workspace: Workspace,
    target: Path,
    files: dict[str, str],
    manifest_sha: str,
    manifest: dict,
) -> None:
    """Record the published files and the release in one transaction (idempotent)."""
    g = manifest["guarantee"]
    with catalog.transaction() as con:
        for name, sha in [*files.items(), ("manifest.json", manifest_sha)]:
            rel = str(target.relative_to(workspace.root) / name)
            catalog.register_artifact(
                f"release/{spec.run_id}/{name}",
                spec.run_id,
                "release",
                rel,
                sha,
                "public",
                con=con,
            )
        catalog.record_release(
            con,
            spec.run_id,
            spec.dataset,
            str(target.relative_to(workspace.root)),
            (g["epsilon"], g["delta"], g["adjacency"]),
            manifest_sha,
        )
