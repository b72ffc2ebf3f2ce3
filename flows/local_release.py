"""Releases from LDP reports: LP-LDA (one model) and OLP-LDA (an online model per batch).

``local_release`` trains LP-LDA (hdp-lda-lp-lda-olp-lda.txt section V-B) on the chosen report
batches of a local dataset and publishes one release. ``online_release`` runs OLP-LDA
(section VI, Algorithm 2): the first time, it trains the online model's start on the public
prior dataset D0; then it takes every report batch ingested since the model's last one, in
order, and publishes one release per batch (``Phi^l``, eq. 13), which depends on that batch
and, through the model's state, on every batch before it (its manifest says so). The
model's state between batches (``OnlineState``) is an internal artifact, recorded with the
last batch it took in ``online_models``; the deployment ``online-release`` runs this flow
on a schedule so that each batch is released soon after it lands.

Neither flow reads anything private beyond the reports, and neither touches the ledger:
the collection's local guarantee was recorded once, at ingest, and every release is
post-processing of the reports (``tasks.local_release``).
"""

from __future__ import annotations

import json
import secrets
import uuid

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from fdptm.errors import BadInputError, FdptmError
from fdptm.request import LocalReleaseRequest
from fdptm.storage import recovery
from fdptm.storage.workspace import Workspace


def _params(request: LocalReleaseRequest):
    from fdptm.mechanisms.local_dp import LocalParams

    return LocalParams(
        topics=request.topics,
        iterations=request.iterations,
        alpha=request.alpha,
        beta=request.beta,
        correlation=request.correlation,
        omega=request.omega,
    )


def _chosen_batches(catalog, request: LocalReleaseRequest) -> list[int]:
    from fdptm.storage.partitions import parse_batches

    stored = [b["seq"] for b in catalog.batches(request.dataset)]
    wanted = parse_batches(request.batches)
    if wanted is None:
        return stored
    missing = sorted(set(wanted) - set(stored))
    if missing:
        raise BadInputError(
            f"dataset {request.dataset!r} has no batch {', '.join(map(str, missing))}; "
            f"its batches are {', '.join(map(str, stored))}"
        )
    return list(wanted)


@flow(name="local-release", log_prints=False, retries=0, persist_result=False)
def local_release(request: LocalReleaseRequest) -> dict:
    """LP-LDA on the chosen batches of a local dataset, published as one release."""
    import numpy as np

    from fdptm.mechanisms.local_dp import lp_lda
    from fdptm.storage.catalog import Catalog
    from fdptm.tasks.local_release import PAPER, publish_local
    from fdptm.tasks.local_reports import local_collection, read_reports

    if request.mechanism != "lp-lda":
        raise BadInputError("local_release trains lp-lda; olp-lda runs in online_release")
    workspace = Workspace.resolve(request.workspace).require()
    catalog = Catalog(workspace)
    collection = local_collection(catalog, request.dataset)
    seqs = _chosen_batches(catalog, request)
    params = _params(request)
    run_id = f"local-{uuid.uuid4().hex[:12]}"
    with recovery.recorded_run(
        workspace, catalog, run_id, request.dataset, "local-release", request.model_dump()
    ):
        reports = np.concatenate(read_reports(workspace, catalog, request.dataset, seqs))
        seed = request.seed if request.seed is not None else secrets.randbits(63)
        phi = lp_lda(reports, collection.vocabulary.size, collection.flip, params, seed)
        mechanism = {
            "name": "lp-lda",
            "paper": f"{PAPER} section V (Algorithm LP-LDA; eq. 8, reconstruction steps 3-5)",
            "parameters": params.to_dict(),
        }
        target, manifest = publish_local(
            workspace, catalog, run_id, collection, phi, seqs, mechanism, len(reports)
        )
    return _outcome(run_id, target, manifest)


def _outcome(run_id: str, target, manifest: dict) -> dict:
    g = manifest["guarantee"]
    return {
        "run_id": run_id,
        "release_path": str(target),
        "statement": g["statement"],
        "adjacency": g["adjacency"],
        "batches": manifest["batches"],
        "topics": manifest["topics"],
    }


@task(name="online-batch", cache_policy=NO_CACHE, retries=0)
def online_batch(request: LocalReleaseRequest, seq: int, seed: int) -> dict:
    """Algorithm 2, lines 6-14, for report batch ``seq``: update the model, store its state,
    publish Phi^l and move the model's last batch to ``seq`` in the release's own
    transaction (refused when another run took the batch meanwhile): a run killed at any
    point leaves either both or neither, and the batch is taken again next time."""
    from fdptm.mechanisms.local_dp import OnlineState, online_step
    from fdptm.storage.artifacts import file_sha256
    from fdptm.storage.catalog import Catalog, now
    from fdptm.tasks.local_release import PAPER, publish_local
    from fdptm.tasks.local_reports import local_collection, read_reports

    workspace = Workspace.resolve(request.workspace).require()
    catalog = Catalog(workspace)
    collection = local_collection(catalog, request.dataset)
    row = _model_row(catalog, request)
    if file_sha256(workspace.root / row["state_path"]) != row["state_sha256"]:
        raise FdptmError(f"online model {request.model!r}: its state file was changed or damaged")
    state = OnlineState.load(workspace.root / row["state_path"])
    run_id = f"online-{uuid.uuid4().hex[:12]}"
    with recovery.recorded_run(
        workspace, catalog, run_id, request.dataset, "online-release", request.model_dump()
    ):
        (reports,) = read_reports(workspace, catalog, request.dataset, [seq])
        params = _params(request)
        following, phi, est = online_step(state, reports, collection.flip, params, seed)
        rel = f"internal/online/{request.dataset}/{request.model}/state-{seq:06d}.npz"
        following.save(workspace.root / rel)
        mechanism = {
            "name": "olp-lda",
            "paper": f"{PAPER} section VI (Algorithm 2; eqs. 10, 12, 13, 19, 21)",
            "parameters": params.to_dict(),
            "prior_dataset": request.prior,
            "model": request.model,
            "step": following.step,
            "omega": est.omega,
            "implied_prior_variance": est.sigma2,
            "new_batch": seq,
        }
        upto = [b["seq"] for b in catalog.batches(request.dataset) if b["seq"] <= seq]
        state_sha = file_sha256(workspace.root / rel)

        def advance(con) -> None:
            """The model takes batch ``seq``, unless another run took a batch meanwhile."""
            last = con.execute(
                "SELECT last_batch FROM online_models WHERE dataset = ? AND name = ?",
                [request.dataset, request.model],
            ).fetchone()[0]
            if last != row["last_batch"]:
                raise FdptmError(
                    f"online model {request.model!r} took batch {last} in another run meanwhile"
                )
            con.execute(
                "UPDATE online_models SET state_path = ?, state_sha256 = ?, last_batch = ?,"
                " updated_at = ? WHERE dataset = ? AND name = ?",
                [rel, state_sha, seq, now(), request.dataset, request.model],
            )

        target, manifest = publish_local(
            workspace, catalog, run_id, collection, phi, upto, mechanism, len(reports), advance
        )
    return _outcome(run_id, target, manifest)


def _model_row(catalog, request: LocalReleaseRequest) -> dict:
    rows = catalog.query(
        "SELECT * FROM online_models WHERE dataset = ? AND name = ?",
        [request.dataset, request.model],
    )
    return rows[0]


def _start_model(workspace: Workspace, catalog, request: LocalReleaseRequest, seed: int) -> None:
    """Algorithm 2, server lines 1-3, once per model: LDA on D0 over the devices' vocabulary.

    D0's documents go through the same PRE and the same binary encoding as a device's
    (``fdptm.local.randomizer.encode``, without the flips), so its counts mu^0 count
    documents, like the reports'."""
    from fdptm.kernels.reconstruct import BLOCK, block_counts, reconstruct
    from fdptm.local.randomizer import as_bytes, encode
    from fdptm.mechanisms.lda import Corpus
    from fdptm.mechanisms.local_dp import online_start
    from fdptm.storage.artifacts import file_sha256
    from fdptm.storage.catalog import now
    from fdptm.tasks.local_reports import local_collection
    from fdptm.tasks.public_vocabulary import public_tokens

    collection = local_collection(catalog, request.dataset)
    vocabulary = collection.vocabulary
    tokens = public_tokens(request.prior, workspace, vocabulary.pre).column("tokens")
    bits = as_bytes(encode(tokens.combine_chunks(), vocabulary), vocabulary.size)
    bits = bits.copy()  # C-contiguous for the kernels
    per_block = block_counts(bits, vocabulary.size, BLOCK)
    counts = per_block.sum(axis=0)  # no flips: every column keeps its ones
    prior = Corpus(*reconstruct(bits, counts, 0, per_block), vocabulary.size)
    state, _ = online_start(prior, _params(request), seed)
    rel = f"internal/online/{request.dataset}/{request.model}/state-000000.npz"
    state.save(workspace.root / rel)
    with catalog.transaction() as con:
        con.execute(
            "INSERT INTO online_models VALUES (?, ?, ?, ?, ?, ?, 0, ?) ON CONFLICT DO NOTHING",
            [request.dataset, request.model, request.prior, json.dumps(_model_params(request)),
             rel, file_sha256(workspace.root / rel), now()],
        )  # fmt: skip


def _model_params(request: LocalReleaseRequest) -> dict:
    """What fixes an online model: a later run must ask for the same."""
    keep = ("topics", "iterations", "alpha", "beta", "prior", "correlation", "omega")
    return {k: getattr(request, k) for k in keep}


@flow(name="online-release", log_prints=False, retries=0, persist_result=False)
def online_release(request: LocalReleaseRequest) -> list[dict]:
    """OLP-LDA: one release per report batch the online model has not taken yet, in order."""
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.ledger import Ledger
    from fdptm.tasks.local_reports import local_collection

    if request.mechanism != "olp-lda":
        raise BadInputError("online_release runs olp-lda; lp-lda runs in local_release")
    log = get_run_logger()
    workspace = Workspace.resolve(request.workspace).require()
    catalog = Catalog(workspace)
    local_collection(catalog, request.dataset)
    Ledger(catalog).require_public(request.prior, "OLP-LDA's prior dataset D0")
    seed = request.seed if request.seed is not None else secrets.randbits(62)
    rows = catalog.query(
        "SELECT * FROM online_models WHERE dataset = ? AND name = ?",
        [request.dataset, request.model],
    )
    if not rows:
        _start_model(workspace, catalog, request, seed)
    else:
        fixed = json.loads(rows[0]["params"])
        asked = _model_params(request)
        if fixed != asked:
            changed = sorted(k for k in asked if fixed.get(k) != asked[k])
            raise BadInputError(
                f"online model {request.model!r} of {request.dataset!r} was started with other "
                f"{', '.join(changed)} ({', '.join(f'{k}={fixed.get(k)}' for k in changed)}); "
                "ask for the same, or start another model with --model NAME"
            )
    last = _model_row(catalog, request)["last_batch"]
    pending = [b["seq"] for b in catalog.batches(request.dataset) if b["seq"] > last]
    log.info("online model %s: %d new batch(es)", request.model, len(pending))
    return [online_batch(request, seq, seed + seq) for seq in pending]
