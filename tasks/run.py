"""A release run's lifecycle: validate, plan and reserve; record stages; settle the ledger.

``prepare`` does everything that can fail on bad input *before* any budget is reserved,
then plans the budget and reserves all of it in one ledger transaction (refused with exit
code 3 if the lifetime cap would be exceeded). ``finish`` refunds whatever reservation a
failed run never used.

Adaptive budget for scheduled releases (DESIGN.md section 3): with ``releases_left = n``
a run asks the ledger what the lifetime cap has left and uses at most 1/n of it (and never
more than it asked for), so a plan of n more releases fits under the cap. The share is
computed before the reservation, and the reservation checks the cap again atomically, so
a concurrent run can make this one refused, never overspend.
"""

from __future__ import annotations

import math
import secrets
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from fdptm.errors import BadInputError, BudgetRefusedError
from fdptm.mechanisms.guarantee import CLAIMED_UNPROVEN, Guarantee
from fdptm.mechanisms.registry import mechanism
from fdptm.mechanisms.set_union import POLICIES
from fdptm.privacy.accountant import BudgetPlan, check_delta, check_epsilon, plan_budget
from fdptm.privacy.adjacency import Adjacency, weakest
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger, remaining
from fdptm.storage.workspace import Workspace, check_name
from fdptm.tasks.spec import RunSpec
from fdptm.version import code_version

T = TypeVar("T")


def new_run_id(dataset: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{dataset}-{stamp}-{uuid.uuid4().hex[:6]}"


def validate(spec: RunSpec) -> None:
    """Every check on the request that needs no private data; raises BadInputError."""
    check_name(spec.dataset)
    check_epsilon(spec.epsilon)
    check_delta(spec.delta)
    m2 = mechanism(spec.mechanism)
    if m2.notion == CLAIMED_UNPROVEN and not spec.allow_unproven:
        raise BadInputError(
            f"{spec.mechanism!r} claims DP in its paper, but the claim does not hold for its "
            "output (README, 'M2 mechanisms'). "
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
    if spec.seed is not None and not (isinstance(spec.seed, int) and 0 <= spec.seed < 2**63):
        raise BadInputError(f"seed must be an integer in [0, 2**63), got {spec.seed!r}")


def prepare(spec: RunSpec) -> tuple[RunSpec, BudgetPlan]:
    """Validate, plan and reserve; returns the spec (with its bounding seed) and the plan."""
    validate(spec)
    workspace = Workspace.resolve(spec.workspace).require()
    catalog = Catalog(workspace)
    if catalog.dataset(spec.dataset) is None:
        known = [r["name"] for r in catalog.query("SELECT name FROM datasets ORDER BY name")]
        raise BadInputError(
            f"no dataset named {spec.dataset!r} in {workspace.root}; known: {known or 'none'}. "
            "Ingest it first with `fdptm ingest PATH --dataset NAME`"
        )
    batches = tuple(b["seq"] for b in catalog.batches(spec.dataset))
    if not batches:
        raise BadInputError(f"dataset {spec.dataset!r} has no batches; ingest data first")
    ledger = Ledger(catalog)
    docs_are_units = ledger.authors_are_documents(spec.dataset)
    m1_adjacency = Adjacency.DOCUMENT if docs_are_units else Adjacency.AUTHOR
    specs = spec.stage_specs(m1_adjacency)
    if spec.releases_left is not None:
        unit = weakest([s.adjacency for s in specs], authors_are_documents=docs_are_units)
        spec = share_remaining(spec, ledger, unit)
    plan = plan_budget(
        spec.epsilon,
        spec.delta,
        specs,
        authors_are_documents=docs_are_units,
    )
    guarantee = check_parameters(spec, plan, ledger.default_unit(spec.dataset))
    bounding_seed = spec.seed if spec.seed is not None else secrets.randbits(64)
    spec = replace(spec, bounding_seed=bounding_seed, batches=batches)
    catalog.start_run(spec.run_id, spec.dataset, "release", spec.to_dict(), code_version())
    try:
        ledger.reserve(spec.dataset, spec.run_id, plan, {"train": guarantee.to_dict()})
    except BaseException as exc:
        catalog.finish_run(spec.run_id, "refused", str(exc))
        raise
    return spec, plan


def check_parameters(spec: RunSpec, plan: BudgetPlan, unit: Adjacency) -> Guarantee:
    """Calibrate M1 and M2 on the plan (BadInputError on bad parameters, before any budget
    is reserved) and check M2's stated guarantee fits its share; returns that guarantee."""
    m1 = plan.stage("vocabulary")
    spec.m1_params(m1.epsilon, m1.delta)
    m2 = plan.stage("train")
    guarantee = spec.m2.guarantee(spec.m2_params(m2.epsilon, m2.delta, unit))
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
    return guarantee


def share_remaining(spec: RunSpec, ledger: Ledger, unit: Adjacency) -> RunSpec:
    """``spec`` with (epsilon, delta) lowered to what remains / releases_left, if less."""
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
    eps_left, delta_left = remaining(cap, ledger.lifetime(spec.dataset, cap.unit))
    if eps_left <= 0 or delta_left <= 0:
        raise BudgetRefusedError(
            f"the lifetime cap of dataset {spec.dataset!r} is used up (remaining "
            f"epsilon={eps_left:.6g}, delta={delta_left:.6g}); no further release fits"
        )
    n = spec.releases_left
    return replace(
        spec, epsilon=min(spec.epsilon, eps_left / n), delta=min(spec.delta, delta_left / n)
    )


def run_stage(spec: RunSpec, stage: str, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """Run one stage function and record it in ``stage_runs``."""
    catalog = Catalog(Workspace.resolve(spec.workspace))
    catalog.start_stage(spec.run_id, stage)
    try:
        out = fn(spec, *args, **kw)
    except BaseException as exc:
        catalog.finish_stage(spec.run_id, stage, "failed", f"{type(exc).__name__}: {exc}")
        raise
    catalog.finish_stage(spec.run_id, stage, "succeeded")
    return out


def finish(spec: RunSpec, error: BaseException | None = None) -> None:
    """Close the run; refund reservations of stages that never ran."""
    catalog = Catalog(Workspace.resolve(spec.workspace))
    ledger = Ledger(catalog)
    for row in catalog.query(
        "SELECT entry_id FROM ledger WHERE run_id = ? AND state = 'reserved'", [spec.run_id]
    ):
        ledger.refund(row["entry_id"], "stage never ran: the run failed before it")
    if error is None:
        catalog.finish_run(spec.run_id, "succeeded")
    else:
        catalog.finish_run(spec.run_id, "failed", f"{type(error).__name__}: {error}")
