"""Publishing releases made from LDP reports (LP-LDA and OLP-LDA): files, manifest, catalog.

A local release has the files of every release (``topic_word.parquet``, ``vocabulary.parquet``,
``manifest.json``; ``fdptm.load_release`` reads it) and spends nothing: the manifest's
guarantee is the collection's local guarantee (Theorem 4), the per-document figure first and
stated as the document's protection, the per-word figure after it and stated as one word's.
The ledger is not touched; the manifest names the collection entries it rests on.

What else the manifest shows is a function of the reports alone: the number of reports
(local DP hides what a document says, not that its device reported), the public vocabulary,
and the training parameters. The reconstruction's seed stays internal.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from fdptm import signing
from fdptm.evaluation import significance
from fdptm.local.randomizer import SAMPLER
from fdptm.mechanisms.guarantee import LOCAL_DP
from fdptm.privacy.accountant import exact_sum
from fdptm.privacy.adjacency import Adjacency
from fdptm.storage.artifacts import write_json, write_parquet
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.workspace import Workspace
from fdptm.tasks.local_reports import VOCABULARY_KINDS, LocalCollection, vocabulary_kind
from fdptm.tasks.release import topic_summaries
from fdptm.tasks.stages import topic_word_table
from fdptm.version import code_version

PAPER = "hdp-lda-lp-lda-olp-lda.txt"


def local_guarantee(collection: LocalCollection, catalog: Catalog, seqs: list[int]) -> dict:
    """The manifest's guarantee for a release that depends on batches ``seqs``.

    Per document first (one report: Theorem 4's V x the per-bit epsilon), then per device
    (a device may send one report in every batch the release depends on, so the batches'
    epsilons add up), then the presence of one word (one bit) and the replacement of one
    token by another (two bits)."""
    g = collection.guarantee
    v = g["vocabulary_size"]
    doc, word, token = g["document_epsilon"], g["word_epsilon"], g["token_replacement_epsilon"]
    device = float(exact_sum([doc] * len(seqs)))
    batches = {b["seq"]: b["run_id"] for b in catalog.batches(collection.dataset)}
    runs = [batches[q] for q in seqs]
    params = catalog.query(
        f"SELECT params FROM runs WHERE run_id IN ({', '.join('?' * len(runs))})", runs
    )
    seeded = any(json.loads(p["params"]).get("seeded") for p in params)
    test_run = (
        ". TEST RUN: reports drawn from a seeded keystream, which anyone with the seed can "
        "undo; NOT private, never publish it"
        if seeded
        else ""
    )
    return {
        "notion": LOCAL_DP,
        "statement": (
            f"{doc:.6g}-local DP per document: each device randomised its whole document "
            f"(V = {v} bits, each {word:.6g}-LDP) before sending it (Theorem 4); "
            f"{device:.6g}-local DP for a device that sent a report in each of the "
            f"{len(seqs)} batch(es) this release depends on; {word:.6g}-local DP for the "
            f"presence of any one word ({token:.6g} for replacing one token by another). "
            "Holds against the server too; this release is post-processing of the reports "
            f"and spent nothing more{test_run}"
        ),
        "per_document": {"epsilon": doc, "delta": 0.0},
        "per_device": {"epsilon": device, "delta": 0.0, "batches": len(seqs)},
        "per_word_presence": {"epsilon": word, "delta": 0.0},
        "per_token_replacement": {"epsilon": token, "delta": 0.0},
        "epsilon": doc,
        "delta": 0.0,
        "gamma": 0.0,
        "seeded": seeded,
        "sampler": SAMPLER,
        "adjacency": Adjacency.LOCAL.value,
        "neighbouring_datasets": "any two collections that differ in one device's document "
        "(its report randomised from the one or the other), every other report the same",
        "privacy_unit": "one document (one report); a device that sent several reports has "
        "the sum of their epsilons (per_device)",
        "dataset_unit": Adjacency.LOCAL.value,
        "flip": {
            "f": g["flip"],
            "numerator": g["flip_numerator"],
            "denominator": g["flip_denominator"],
        },
        "accountant": "Theorem 4: each of the V bits is log((1 - f/2)/(f/2))-LDP, composed "
        "sequentially over the V bits of a document and over the batches of a device; "
        "releases are post-processing",
        "not_covered": "Not covered: whether a device took part (the number of reports is public).",
        "spent_by_this_release": {"epsilon": 0.0, "delta": 0.0},
        "collection_entries": [f"{run}/collection" for run in runs],
    }


def _stages(collection: LocalCollection, name: str) -> list[dict]:
    """The manifest's per-stage table: the devices' randomised response, then the server's
    training, which is post-processing and adds nothing."""
    g = collection.guarantee
    return [
        {
            "stage": "collection",
            "step": "device",
            "mechanism": "randomized-response",
            "notion": LOCAL_DP,
            "adjacency": Adjacency.LOCAL.value,
            "epsilon": g["document_epsilon"],
            "delta": 0.0,
            "per_word_epsilon": g["word_epsilon"],
        },
        {
            "stage": "train",
            "step": "server",
            "mechanism": name,
            "notion": "post-processing",
            "adjacency": Adjacency.LOCAL.value,
            "epsilon": 0.0,
            "delta": 0.0,
        },
    ]


def publish_local(
    workspace: Workspace,
    catalog: Catalog,
    run_id: str,
    collection: LocalCollection,
    phi: np.ndarray,
    seqs: list[int],
    mechanism: dict,
    n_reports: int,
    also: Callable[[Any], None] | None = None,
) -> tuple:
    """Write, then register, a local release; returns (directory, manifest). ``also(con)``
    runs in the registering transaction (the online model's move to the next batch), so a
    release and what it advances are recorded together or not at all; if registering fails,
    the files leave the public area."""
    key = signing.private_key(workspace)  # before anything is written
    words = list(collection.vocabulary.words)
    manifest = {
        "manifest_version": 2,
        "run_id": run_id,
        "dataset": collection.dataset,
        "release_date": now().date().isoformat(),
        "guarantee": local_guarantee(collection, catalog, seqs),
        "mechanism": mechanism,
        "stages": _stages(collection, mechanism["name"]),
        "batches": seqs,
        "n_reports": n_reports,
        "vocabulary": {
            "source": collection.vocabulary.source,
            "kind": VOCABULARY_KINDS[vocabulary_kind(catalog, collection.vocabulary.fingerprint)],
            "fingerprint": collection.vocabulary.fingerprint,
            "size": len(words),
        },
        "model": {
            "topics": phi.shape[0],
            "vocabulary_size": len(words),
            "format": "topic_word.parquet: one row per topic, 'probabilities' is a list of "
            "length vocabulary_size aligned with vocabulary.parquet's 'index'",
        },
        "code_version": code_version(),
        "presentation": significance.presentation(None, phi.size),
        "topics": topic_summaries(phi, words, None),
    }
    staging = workspace.run_dir(run_id) / "release-staging"
    shutil.rmtree(staging, ignore_errors=True)
    vocab = pa.table(
        {"index": pa.array(np.arange(len(words)), pa.int32()), "word": pa.array(words, pa.string())}
    )
    files = {
        "topic_word.parquet": write_parquet(topic_word_table(phi), staging / "topic_word.parquet"),
        "vocabulary.parquet": write_parquet(vocab, staging / "vocabulary.parquet"),
    }
    manifest["files"] = {name: {"sha256": sha} for name, sha in files.items()}
    manifest_sha = write_json(manifest, staging / "manifest.json")
    files |= signing.sign(staging, key)
    target = workspace.release_dir(run_id)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    day = datetime.fromisoformat(manifest["release_date"]).replace(tzinfo=UTC).timestamp()
    for path in [*target.iterdir(), target]:
        os.utime(path, (day, day))
    try:
        with catalog.transaction() as con:
            if also is not None:
                also(con)
            for name, sha in [*files.items(), ("manifest.json", manifest_sha)]:
                rel = str(target.relative_to(workspace.root) / name)
                catalog.register_artifact(
                    f"release/{run_id}/{name}", run_id, "release", rel, sha, "public", con=con
                )
            catalog.record_release(
                con,
                run_id,
                collection.dataset,
                str(target.relative_to(workspace.root)),
                (manifest["guarantee"]["epsilon"], 0.0, Adjacency.LOCAL.value),
                manifest_sha,
            )
    except BaseException:
        os.replace(target, staging)  # not released: out of the public area
        raise
    return target, manifest
