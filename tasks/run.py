"""A release run's lifecycle: preflight, plan, calibrate and reserve; record stages; settle.

``preflight`` runs every check that needs no private data, checks the budget plan against
the lifetime cap and calibrates the noise, *before* Prefect starts (a bad request is refused
in about a second, and nothing is reserved). ``prepare`` repeats the checks inside the flow,
takes ownership of the run (``storage.recovery``), stores the calibration with the run and
reserves the whole budget in one ledger transaction (refused with exit code 3 if the cap
would be exceeded). ``begin_private_reads`` turns the reservation into a spend right before
PRE first reads the ingested rows. ``finish`` closes the run; it refunds only a run that
never read private data.

Calibration happens once per run: ``calibrate`` is memoised within a process (preflight and
the flow share it), and its result is stored in ``runs.calibration`` and read back by every
stage, the manifest and ``--resume``.

Adaptive budget for scheduled releases (DESIGN.md section 3): with ``releases_left = n``
a run asks the ledger what the lifetime cap has left and uses at most 1/n of it (and never
more than it asked for), so a plan of n more releases fits under the cap. The share is
computed before the reservation, and the reservation checks the cap again atomically, so
a concurrent run can make this one refused, never overspend.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import lru_cache
from typing import Any, TypeVar

import pyarrow as pa

from fdptm import planning, signing
from fdptm.codec import decode, encode
from fdptm.errors import BadInputError, BudgetRefusedError, FdptmError, WorkspaceError
from fdptm.faults import checkpoint
from fdptm.mechanisms.guarantee import CLAIMED_UNPROVEN, RANDOM_DP, Guarantee
from fdptm.mechanisms.registry import mechanism
from fdptm.mechanisms.set_union import POLICIES
from fdptm.parallel import workers
from fdptm.planning import Prediction
from fdptm.privacy.accountant import (
    BudgetPlan,
    check_delta,
    check_epsilon,
    exact,
    plan_budget,
)
from fdptm.privacy.adjacency import Adjacency, weakest
from fdptm.request import ReleaseRequest
from fdptm.storage import recovery
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import PUBLIC_NOT_CHARGED, Ledger, charges
from fdptm.storage.objectstore import intact_copy
from fdptm.storage.partitions import parse_batches
from fdptm.storage.workspace import Workspace, check_name
from fdptm.tasks import public_vocabulary
from fdptm.tasks.spec import RunSpec
from fdptm.tasks.vocabulary import M1Params
from fdptm.version import code_version

T = TypeVar("T")


def new_run_id(dataset: str) -> str:
    """``<dataset>-<16 random hex digits>``: no clock in it (a start time next to a release
    date would publish the pipeline's run time, a non-DP function of the input size)."""
    return f"{dataset}-{secrets.token_hex(8)}"


def validate(spec: RunSpec) -> None:
    """Every check on the request that needs no private data; raises BadInputError."""
    check_name(spec.dataset)
    workers()  # a bad $FDPTM_THREADS is an input error before anything is reserved
    check_epsilon(spec.epsilon)
    check_delta(spec.delta)
    m2 = mechanism(spec.mechanism)
    if m2.notion == CLAIMED_UNPROVEN and not spec.allow_unproven:
        raise BadInputError(
            f"{spec.mechanism!r} claims DP in its paper, but the claim does not hold for its "
            "output (`fdptm mechanisms`; docs/reference/mechanisms.md). "
            "Compare it internally with `fdptm compare`, or pass --allow-unproven to release "
            "it with a manifest that says the guarantee is unproven."
        )
    if not isinstance(spec.m2_options, dict):
        raise BadInputError(f"m2_options must be a mapping, got {spec.m2_options!r}")
    if spec.set_union_policy not in POLICIES:
        raise BadInputError(f"unknown set-union policy {spec.set_union_policy!r}: {POLICIES}")
    if spec.releases_left is not None and (
        not isinstance(spec.releases_left, int) or spec.releases_left < 1
    ):
        raise BadInputError(f"releases_left must be an integer >= 1, got {spec.releases_left!r}")
    for name in ("topics", "iterations", "max_items_per_author"):
        value = getattr(spec, name)
        if not isinstance(value, int) or value < 1:
            raise BadInputError(f"{name} must be an integer >= 1, got {value!r}")
    if not 0 < spec.m1_fraction < 1:
        raise BadInputError(f"m1_fraction must be in (0, 1), got {spec.m1_fraction}")
    for name in ("lda_alpha", "lda_beta", "set_union_alpha"):
        value = getattr(spec, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise BadInputError(f"{name} must be a finite number > 0, got {value!r}")
    if spec.requested_batches is not None or spec.since is not None or spec.buckets:
        replaced = {spec.m2.adjacency_for(u) for u in (Adjacency.AUTHOR, Adjacency.DOCUMENT)}
        if replaced & {Adjacency.AUTHOR_REPLACE, Adjacency.DOCUMENT_REPLACE}:
            raise BadInputError(
                f"{spec.mechanism!r} is DP under replace-one adjacency, and a replacement may "
                "move a document to another batch or day: a release of some partitions would "
                "see it as an addition or a removal, which replace-one DP does not bound. "
                "Release the whole dataset (no --batches, --since, --window or --buckets), or "
                "use an add/remove mechanism such as dp-vi"
            )
    if spec.seed is not None and not (isinstance(spec.seed, int) and 0 <= spec.seed < 2**63):
        raise BadInputError(f"seed must be an integer in [0, 2**63), got {spec.seed!r}")


@dataclass(frozen=True)
class Calibration:
    """A run's budget plan and calibrated mechanisms, computed once and stored with it.

    ``epsilon`` and ``delta`` are what the run was granted (less than asked under
    ``releases_left``); ``unit`` is the dataset's privacy unit.
    """

    epsilon: float
    delta: float
    unit: Adjacency
    plan: BudgetPlan
    m1: M1Params | None
    m2: Any
    guarantee: Guarantee
    bounding_seed: int
    seed: int | None

    def accounting(self) -> dict[str, dict]:
        return {"train": self.guarantee.to_dict()}


def budget_plan(spec: RunSpec, unit: Adjacency) -> BudgetPlan:
    """The run's split of its budget across M1 and M2, on a dataset of ``unit``: public
    arithmetic, no mechanism calibrated (``calibrate`` calibrates for this plan)."""
    docs_are_units = unit == Adjacency.DOCUMENT
    m1_adjacency = Adjacency.DOCUMENT if docs_are_units else Adjacency.AUTHOR
    return plan_budget(
        spec.epsilon,
        spec.delta,
        spec.stage_specs(m1_adjacency),
        authors_are_documents=docs_are_units,
    )


@lru_cache(maxsize=32)
def _calibrated(key: str, unit: str) -> tuple[BudgetPlan, M1Params | None, Any, Guarantee]:
    spec = decode(json.loads(key))
    unit = Adjacency(unit)
    plan = budget_plan(spec, unit)
    if "vocabulary" in spec.dp_stages:
        m1 = plan.stage("vocabulary")
        m1_params = spec.m1_params(m1.epsilon, m1.delta)
    else:
        m1_params = None
    m2 = plan.stage("train")
    m2_params = spec.m2_params(m2.epsilon, m2.delta, unit)
    guarantee = spec.m2.guarantee(m2_params)
    if (
        guarantee.adjacency != m2.adjacency
        or guarantee.epsilon > m2.epsilon
        or guarantee.delta > m2.delta
    ):
        raise AssertionError(
            f"{spec.mechanism} states ({guarantee.epsilon}, {guarantee.delta}) at "
            f"{guarantee.adjacency.value}, its share is ({m2.epsilon}, {m2.delta}) at "
            f"{m2.adjacency.value}"
        )
    return plan, m1_params, m2_params, guarantee


def calibrate(spec: RunSpec, unit: Adjacency) -> Calibration:
    """Plan the budget and calibrate M1 and M2 for ``spec`` on a dataset of ``unit``.

    Raises BadInputError on parameters a mechanism refuses, before anything is reserved.
    Memoised on everything the result depends on, so a process calibrates a run once.
    """
    public = replace(
        spec,
        run_id="",
        workspace="",
        bounding_seed=0,
        seed=None,
        batches=(),
        requested_batches=None,
        request_key="",
        since=None,
        until=None,
        buckets=None,
    )
    try:
        plan, m1, m2, guarantee = _calibrated(
            json.dumps(encode(public), sort_keys=True), unit.value
        )
    except (ValueError, OverflowError, ZeroDivisionError) as exc:
        raise BadInputError(
            f"the noise of this request cannot be calibrated ({type(exc).__name__}: {exc}); "
            "the budget is out of the range the mechanisms support: ask for a smaller epsilon "
            "or a larger delta"
        ) from exc
    for stage, params in (("vocabulary", m1), ("train", m2)):
        if params is not None:
            check_noise(stage, params.to_dict())
    for stage in plan.stages:
        if (stage.delta == 0 and stage.release_delta > 0) or stage.epsilon <= 0:
            raise BadInputError(
                f"the {stage.stage} stage's share of this budget underflows to "
                f"({stage.epsilon!r}, {stage.delta!r}) after conversion to its own adjacency; "
                "ask for a smaller epsilon or a larger delta"
            )
    return Calibration(
        spec.epsilon, spec.delta, unit, plan, m1, m2, guarantee, spec.bounding_seed, spec.seed
    )


NOISE_FIELDS = frozenset(
    {"noise_scale", "laplace_scale", "noise_multiplier", "noise_std", "multiplier", "sigma"}
)
"""The names under which calibrated parameters carry a noise scale (``to_dict``)."""


def check_noise(stage: str, params: dict, path: str = "") -> None:
    """Refuse a calibration whose numbers the samplers cannot use, before anything is
    reserved: every number finite, every noise scale > 0. A tiny epsilon (1e-320, say)
    passes the request's checks but divides into an infinite scale, which a sampler would
    refuse only after the stage had read private data and its budget was spent."""
    for key, value in params.items():
        name = f"{path}{key}"
        if isinstance(value, dict):
            check_noise(stage, value, f"{name}.")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    check_noise(stage, item, f"{name}[{i}].")
        elif isinstance(value, float | int) and not isinstance(value, bool):
            positive = key not in NOISE_FIELDS or value > 0
            if not (math.isfinite(value) and positive):
                raise BadInputError(
                    f"the {stage} stage's noise cannot be calibrated for this budget: its "
                    f"{name} would be {value!r}. The epsilon or delta is outside the range "
                    "the samplers support; ask for a larger epsilon or a "
                    "delta further from 0 and 1. Nothing was reserved or spent"
                )


def check_keys(workspace: Workspace) -> None:
    """The workspace's secret key and the key releases are signed with can serve the run:
    refused (exit 2) before anything is reserved, so a bad signing key never fails a run
    after its spend."""
    workspace.check_key()
    signing.private_key(workspace)


def _dataset_context(catalog: Catalog, dataset: str) -> tuple[Ledger, list[dict]]:
    workspace = catalog.workspace
    if catalog.dataset(dataset) is None:
        known = [r["name"] for r in catalog.query("SELECT name FROM datasets ORDER BY name")]
        raise BadInputError(
            f"no dataset named {dataset!r} in {workspace.root}; known: {known or 'none'}. "
            "Ingest it first with `fdptm ingest PATH --dataset NAME`"
        )
    ledger = Ledger(catalog)
    if ledger.is_public(dataset):
        raise BadInputError(PUBLIC_NOT_CHARGED.format(dataset=dataset))
    ledger.require_documents(dataset)
    batches = catalog.batches(dataset)
    if not batches:
        raise BadInputError(f"dataset {dataset!r} has no batches; ingest data first")
    return ledger, batches


def _scoped_in(catalog: Catalog, spec: RunSpec) -> tuple[Ledger, RunSpec, Adjacency]:
    """The dataset's ledger, ``spec`` cut to its batches and the dataset's privacy unit, read
    in one catalog block (one attach instead of eight: a small release's fixed cost)."""
    with catalog.connect():
        ledger, batches = _dataset_context(catalog, spec.dataset)
        spec = scoped(spec, batches, ledger.author_buckets(spec.dataset))
        return ledger, spec, ledger.default_unit(spec.dataset)


def scoped(spec: RunSpec, batches: list[dict], author_buckets: int | None) -> RunSpec:
    """``spec`` with the batches it reads: those it asks for (every batch ingested so far by
    default), and of those only the timestamped ones when it reads days; its author buckets
    checked against the dataset's. Which batches exist, which had a time column and how
    many buckets were declared are the operator's facts, not the data's."""
    known = {b["seq"]: b for b in batches}
    wanted = parse_batches(spec.requested_batches) or tuple(known)
    missing = [seq for seq in wanted if seq not in known]
    if missing:
        raise BadInputError(
            f"dataset {spec.dataset!r} has no batch {', '.join(map(str, missing))}; it has "
            f"batches {min(known)}..{max(known)} (`fdptm partitions --dataset "
            f"{spec.dataset}` lists them)"
        )
    if spec.since is not None:
        wanted = tuple(seq for seq in wanted if known[seq]["timed"])
        if not wanted:
            raise BadInputError(
                f"--since/--until/--window read documents by their timestamps, and no batch "
                f"of dataset {spec.dataset!r} in range was ingested with a time column "
                "(ingest with --time-column NAME, or drop the days)"
            )
    if spec.buckets is not None:
        n = author_buckets
        if not n:
            raise BadInputError(
                f"--buckets reads some author buckets, and dataset {spec.dataset!r} has none "
                "(they are declared when an author-level dataset is created, with "
                "--author-buckets N)"
            )
        if spec.buckets[-1] >= n:
            raise BadInputError(
                f"dataset {spec.dataset!r} has author buckets 0..{n - 1}; --buckets names "
                f"{spec.buckets[-1]}"
            )
    return replace(spec, batches=wanted)


def check_public_inputs(spec: RunSpec, workspace: Workspace) -> None:
    """Load the run's public vocabulary and prior once before anything is reserved, so that
    a missing, private or empty source is refused (exit 2) before the run spends."""
    if spec.vocabulary is not None:
        public = public_vocabulary.load(spec.vocabulary, workspace, spec.pre)
        kept = min(len(public.words), spec.vocabulary_size)
        if spec.vocabulary_selection == "none" and kept < spec.topics:
            raise BadInputError(
                f"the public vocabulary {spec.vocabulary!r} gives {kept} words, fewer than the "
                f"{spec.topics} topics asked for; use a larger vocabulary or fewer --topics"
            )
        if spec.vocabulary_selection == "bayesian-prior" and kept == len(public.words):
            raise BadInputError(
                f"--m1 bayesian-prior would keep every word of the public vocabulary "
                f"{spec.vocabulary!r} ({len(public.words)} words, --vocabulary-size "
                f"{spec.vocabulary_size}), so M1 would spend its share for nothing: use --m1 "
                "none (the whole budget to M2) or a --vocabulary-size below the list's size"
            )
    if spec.prior is not None:
        if not spec.m2.takes_public_prior:
            raise BadInputError(
                f"--prior: M2 {spec.mechanism!r} cannot use a public prior; use dp-vi"
            )
        public_vocabulary.load(f"public:{spec.prior}", workspace, spec.pre)


def _shared(spec: RunSpec, ledger: Ledger, unit: Adjacency) -> RunSpec:
    """``spec`` with its budget cut to its share of what remains under ``releases_left``
    (``unit``: the dataset's privacy unit)."""
    if spec.releases_left is None:
        return spec
    docs_are_units = unit == Adjacency.DOCUMENT
    m1_adjacency = Adjacency.DOCUMENT if docs_are_units else Adjacency.AUTHOR
    release_unit = weakest(
        [s.adjacency for s in spec.stage_specs(m1_adjacency)],
        authors_are_documents=docs_are_units,
    )
    with ledger.catalog.connect():
        return share_remaining(spec, ledger, release_unit)


def _require_figures(request: ReleaseRequest) -> None:
    """A prediction's stated figures, checked before anything is calibrated."""
    if request.units is None or request.tokens_per_unit is None:
        raise BadInputError(
            "a prediction needs --units N and --tokens-per-unit L: the number of the dataset's "
            "privacy units and the tokens one holds after PRE, as public figures you state "
            "(a published or rounded count, not one read off the data)"
        )


def _checked(request: ReleaseRequest) -> tuple[Workspace, RunSpec, Ledger, Adjacency]:
    """The checks of ``request`` that need no private data (the workspace key, the dataset,
    its batches, the public inputs), its spec cut to its share of the cap, and the
    dataset's privacy unit."""
    workspace = Workspace.resolve(request.workspace).require()
    spec = RunSpec.from_request(request, "", str(workspace.root))
    validate(spec)
    check_keys(workspace)
    ledger, spec, unit = _scoped_in(Catalog(workspace), spec)
    check_public_inputs(spec, workspace)
    return workspace, _shared(spec, ledger, unit), ledger, unit


def preflight(request: ReleaseRequest) -> tuple[Calibration, Prediction | None]:
    """Every check of ``request`` that needs no private data, and the cap, before Prefect;
    the calibration, and the prediction when the request states the figures it needs.

    Reserves nothing; ``prepare`` checks the cap again atomically when it reserves. The
    cap is checked once: before calibration unless a stage is random-DP (its ledger entry
    needs the calibrated gamma), after it otherwise, and after it as well if calibration
    changed what the ledger would charge. So a spend another process reserves while this
    one calibrates is refused at the reservation, inside the flow (exit 3 all the same).
    """
    if request.require_signal:
        _require_figures(request)
    workspace, spec, ledger, unit = _checked(request)
    plan = budget_plan(spec, unit)
    checked = None
    if all(stage.notion != RANDOM_DP for stage in plan.stages):
        # The ledger charges the plan's shares; only a random-DP stage adds its calibrated
        # gamma. So the cap is checked here, before calibration imports dp-accounting and
        # the kernels (seconds), and checked again below only if calibration changed what
        # the ledger would charge: each check reads every chained ledger row of the dataset
        # (``storage.chain.check_dataset``), so preflight after 150 releases took 36 ms
        # against 56 ms with two checks (``benchmarks/preflight.md``).
        ledger.check(spec.dataset, plan, {}, spec.scope)
        checked = charges(plan.stages, {})
    calibration = calibrate(spec, unit)
    accounting = calibration.accounting()
    if charges(calibration.plan.stages, accounting) != checked:
        ledger.check(spec.dataset, calibration.plan, accounting, spec.scope)
    return calibration, predicted(request, spec, calibration, workspace)


def plan(request: ReleaseRequest) -> tuple[Prediction, str | None]:
    """``fdptm plan``: the prediction for ``request`` (``fdptm.planning``) from its
    calibration and public words, and the lifetime cap's refusal if it would refuse it now
    (None otherwise). Reads no private data and reserves nothing."""
    _require_figures(request)
    workspace, spec, ledger, unit = _checked(request)
    calibration = calibrate(spec, unit)
    try:
        ledger.check(spec.dataset, calibration.plan, calibration.accounting(), spec.scope)
    except BudgetRefusedError as exc:
        return prediction_of(request, spec, calibration, workspace), str(exc)
    return prediction_of(request, spec, calibration, workspace), None


def prediction_of(
    request: ReleaseRequest, spec: RunSpec, calibration: Calibration, workspace: Workspace
) -> Prediction:
    """``fdptm.planning.predict`` on the run's public word list (its --vocabulary, else
    ``planning.FALLBACK_WORDS``), after the run's PRE."""
    source = request.vocabulary or planning.FALLBACK_WORDS
    words = public_vocabulary.load(source, workspace, spec.pre)
    chosen, kept, strongest = planning.simulated_vocabularies(request, spec, calibration, words)
    return planning.predict(request, calibration, chosen, kept, source, strongest)


def predicted(
    request: ReleaseRequest, spec: RunSpec, calibration: Calibration, workspace: Workspace
) -> Prediction | None:
    """The prediction when the request states ``units`` and ``tokens_per_unit`` (None
    otherwise); with ``require_signal``, a BadInputError (exit 2, nothing reserved) unless it
    predicts topics above the noise."""
    if request.units is None and request.tokens_per_unit is None and not request.require_signal:
        return None
    prediction = prediction_of(request, spec, calibration, workspace)
    if request.require_signal and prediction.verdict != planning.SIGNAL:
        advice = "; ".join(prediction.advice) or "see `fdptm plan`"
        raise BadInputError(
            f"--require-signal: the prediction is '{prediction.verdict}' ("
            f"{prediction.summary()}); nothing was reserved or spent. To change it: {advice}"
        )
    return prediction


def prepare(request: ReleaseRequest) -> tuple[RunSpec, Calibration]:
    """Validate, own, plan, calibrate and reserve a new run of ``request``."""
    workspace = Workspace.resolve(request.workspace).require()
    catalog = Catalog(workspace)
    spec = RunSpec.from_request(request, new_run_id(request.dataset), str(workspace.root))
    validate(spec)
    check_keys(workspace)
    ledger, spec, unit = _scoped_in(catalog, spec)
    check_public_inputs(spec, workspace)
    bounding_seed = spec.seed if spec.seed is not None else secrets.randbits(64)
    spec = replace(spec, bounding_seed=bounding_seed)
    recovery.recover(workspace, spec.dataset)  # dead runs' reservations (schedules, API)
    spec = _shared(spec, ledger, unit)
    calibration = calibrate(spec, unit)
    if request.require_signal:  # a scheduled run has no preflight; the CLI's already printed it
        predicted(request, spec, calibration, workspace)
    code = code_version()  # git, outside the catalog's lock
    owner = recovery.claim(workspace, spec.run_id)
    try:  # any failure, the block's commit included: the claim goes, and recovery settles it
        with catalog.connect():  # the run's record and its reservation: one catalog block
            catalog.start_run(spec.run_id, spec.dataset, "release", spec.to_dict(), code)
            catalog.execute(
                "UPDATE runs SET owner = ?, calibration = ? WHERE run_id = ?",
                [owner, json.dumps(encode(calibration)), spec.run_id],
            )
            try:
                accounting = calibration.accounting()
                ledger.reserve(spec.dataset, spec.run_id, calibration.plan, accounting, spec.scope)
            except FdptmError as exc:
                # refused (budget, scope): recorded with the run, in its block; after a
                # failing catalog (WorkspaceError) or database error, nothing more is written:
                # PostgreSQL rolls the block back, and recovery closes a DuckDB run record
                if not isinstance(exc, WorkspaceError):
                    catalog.finish_run(spec.run_id, "refused", str(exc))
                raise
    except BaseException:
        recovery.release_claim(workspace, spec.run_id)
        raise
    return spec, calibration


@lru_cache(maxsize=64)
def _stored_calibration(workspace: str, run_id: str) -> Calibration:
    rows = Catalog(Workspace.resolve(workspace)).query(
        "SELECT calibration FROM runs WHERE run_id = ?", [run_id]
    )
    if not rows or rows[0]["calibration"] is None:
        raise BadInputError(f"run {run_id} has no stored calibration")
    return decode(json.loads(rows[0]["calibration"]))


def calibration_of(spec: RunSpec) -> Calibration:
    """The calibration stored with ``spec``'s run (read once per process)."""
    return _stored_calibration(spec.workspace, spec.run_id)


def spec_of(workspace: Workspace, run_id: str) -> RunSpec:
    """A stored run's ``RunSpec``, seeds included (from its internal calibration record)."""
    rows = Catalog(workspace).query("SELECT params FROM runs WHERE run_id = ?", [run_id])
    calibration = _stored_calibration(str(workspace.root), run_id)
    return RunSpec.from_dict(
        json.loads(rows[0]["params"]),
        seed=calibration.seed,
        bounding_seed=calibration.bounding_seed,
    )


def resumable(workspace: Workspace, run_id: str) -> tuple[RunSpec, Calibration, list[str]]:
    """A failed release's spec, calibration and lost DP stages; BadInputError otherwise.

    A DP stage is lost when its mechanism started under the stage's current ledger entry
    (``started_at``: it may have read private data and drawn noise) and stored no output:
    it must not run again on the same charge.
    """
    catalog = Catalog(workspace)
    rows = catalog.query("SELECT kind, status FROM runs WHERE run_id = ?", [run_id])
    if not rows or rows[0]["kind"] != "release":
        raise BadInputError(f"no release run {run_id!r} in {workspace.root}")
    status = rows[0]["status"]
    if status == "succeeded":
        raise BadInputError(f"run {run_id} already succeeded; its release is published")
    if status == "running":
        raise BadInputError(f"run {run_id} is still running in a live process")
    if status != "failed":
        raise BadInputError(f"run {run_id} was {status}; start a new release instead")
    entries = {
        r["stage"]: r
        for r in catalog.query(
            "SELECT stage, state, started_at FROM ledger WHERE run_id = ?"
            " AND stage IN ('vocabulary', 'train')",
            [run_id],
        )
    }
    spec = spec_of(workspace, run_id)
    if entries.get(spec.dp_stages[0], {}).get("state") not in ("spent", "reserved"):
        raise BadInputError(
            f"run {run_id} never read private data (its reservation was refunded): nothing "
            "to resume; start a new release with the same parameters"
        )
    if entries.get("train", {}).get("state") not in ("spent", "reserved"):
        raise BadInputError(
            f"run {run_id} cannot be resumed: its M2 entry was refunded (M2 refused the DP "
            "vocabulary's size, or an earlier resume died before it read anything); start "
            "a new release"
        )
    outputs = {"vocabulary": "vocabulary", "train": "topic_word"}
    for name in (*(outputs[stage] for stage in spec.dp_stages), "vocabulary_filler"):
        artifact = catalog.artifact(f"run/{run_id}/{name}")
        if artifact is not None and not intact_copy(workspace, artifact):
            raise BadInputError(
                f"run {run_id} cannot be resumed: {workspace.root / artifact['path']} (one of "
                "its DP outputs) is missing or damaged, and its mechanism must not run again "
                "on the same charge. Restore the file from a backup, or start a new release"
            )
    lost = [
        stage
        for stage in spec.dp_stages
        if entries[stage]["started_at"] is not None
        and catalog.artifact(f"run/{run_id}/{outputs[stage]}") is None
    ]
    return spec, calibration_of(spec), lost


def preflight_resume(workspace: Workspace, run_id: str) -> list[str]:
    """The checks of ``--resume`` before Prefect starts; the lost stages to re-reserve."""
    check_keys(workspace)
    recovery.recover(workspace)
    spec, calibration, lost = resumable(workspace, run_id)
    if lost:
        plan = replace(calibration.plan, stages=[calibration.plan.stage(s) for s in lost])
        Ledger(Catalog(workspace)).check(spec.dataset, plan, calibration.accounting(), spec.scope)
    return lost


def prepare_resume(workspace: Workspace, run_id: str) -> tuple[RunSpec, Calibration, list[str]]:
    """Own failed run ``run_id`` again and reserve its lost DP stages anew.

    Stored outputs are reused by the stages; a lost stage's earlier entry stays spent and
    a new one is reserved (refused with exit code 3 if the cap cannot cover it).
    """
    check_keys(workspace)
    recovery.recover(workspace)
    owner = recovery.claim(workspace, run_id)
    try:
        spec, calibration, lost = resumable(workspace, run_id)
        catalog = Catalog(workspace)
        ledger = Ledger(catalog)
        with catalog.transaction() as con:
            for stage in lost:
                ledger.replace_lost(
                    con,
                    spec.dataset,
                    run_id,
                    calibration.plan.stage(stage),
                    calibration.accounting(),
                )
            con.execute(
                "UPDATE runs SET status = 'running', owner = ?, finished_at = NULL, error = NULL"
                " WHERE run_id = ?",
                [owner, run_id],
            )
    except BaseException:
        recovery.release_claim(workspace, run_id)
        raise
    return spec, calibration, lost


def begin_private_reads(spec: RunSpec) -> None:
    """The run is about to read ingested rows: spend its whole reservation first."""
    Ledger(Catalog(Workspace.resolve(spec.workspace))).commit(spec.run_id, spec.dp_stages)


def share_remaining(spec: RunSpec, ledger: Ledger, unit: Adjacency) -> RunSpec:
    """``spec`` with (epsilon, delta) lowered to what remains / releases_left, if less.

    What remains is the cap less what the runs asked for (``Ledger.planned``), never less
    their lost attempts: a crash must not reach the next release's epsilon."""
    cap = ledger.cap(spec.dataset)
    if cap is None:
        raise BadInputError(
            "releases_left shares what remains of a lifetime cap, and this dataset has none; "
            "set one with `fdptm budget --dataset NAME --cap EPSILON DELTA`"
        )
    if cap.unit != unit:
        raise BadInputError(
            f"this run's release is {unit.value}-level but the cap is stated at "
            f"{cap.unit.value} level; releases_left needs the cap at the release's unit"
        )
    spent_eps, spent_delta = ledger.planned(spec.dataset, cap.unit, within=spec.scope)
    eps_left = exact(cap.epsilon) - spent_eps
    delta_left = exact(cap.delta) - spent_delta
    if eps_left <= 0 or delta_left <= 0:
        raise BudgetRefusedError(
            f"the lifetime cap of dataset {spec.dataset!r} is used up (remaining "
            f"epsilon={float(max(eps_left, 0))!r}, delta={float(max(delta_left, 0))!r}); "
            "no further release fits"
        )
    n = spec.releases_left
    return replace(
        spec,
        epsilon=min(spec.epsilon, _at_most(eps_left / n)),
        delta=min(spec.delta, _at_most(delta_left / n)),
    )


def _at_most(value: Decimal) -> float:
    """The largest float whose exact decimal does not exceed ``value`` (so a plan of n
    shares of what remains always fits: rounding to nearest could overshoot by an ulp)."""
    out = float(value)
    while exact(out) > value:
        out = math.nextafter(out, 0.0)
    return out


def run_stage(spec: RunSpec, stage: str, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """Run one stage function and record it in ``stage_runs``.

    Stages exchange files, so the memory a stage's tables held is free when it returns:
    Arrow's pool is asked to give it back to the operating system, so that the next stage
    does not start above the previous one's peak."""
    catalog = Catalog(Workspace.resolve(spec.workspace))
    catalog.start_stage(spec.run_id, stage)
    try:
        out = fn(spec, *args, **kw)
    except BaseException as exc:
        catalog.finish_stage(spec.run_id, stage, "failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        pa.default_memory_pool().release_unused()
    catalog.finish_stage(spec.run_id, stage, "succeeded")
    checkpoint(f"after-{stage}")
    return out


def finish(spec: RunSpec, error: BaseException | None = None) -> None:
    """Close the run and give up its ownership.

    Entries still ``reserved`` belong to a run that failed before it read private data
    and are refunded; spent entries stay spent (see ``storage.ledger``).
    """
    workspace = Workspace.resolve(spec.workspace)
    catalog = Catalog(workspace)
    ledger = Ledger(catalog)
    with catalog.connect():
        for row in catalog.query(
            "SELECT entry_id FROM ledger WHERE run_id = ? AND state = 'reserved'", [spec.run_id]
        ):
            ledger.refund(row["entry_id"], "refunded: the run failed before it read private data")
        if error is None:
            catalog.finish_run(spec.run_id, "succeeded")
        else:
            catalog.finish_run(spec.run_id, "failed", f"{type(error).__name__}: {error}")
    recovery.release_claim(workspace, spec.run_id)
