"""Backfill: one release per partition in a range, each at its own budget, idempotently.

``plan_backfill`` lists the partitions of a range (every batch, or every calendar window
of a kind between two days) and what each needs:

* ``done``: a successful release of the same request over the partition exists (its
  ``ReleaseRequest.key``); it is skipped, so a backfill run twice releases nothing twice.
* ``resume``: a release of it failed or died after spending (an interrupted backfill);
  it is resumed (``fdptm release --resume``): stored stages are reused and only a DP stage
  that started and stored nothing is charged again.
* ``failed``: a release of it spent and cannot go on (its M2 was refunded because M2
  refused the DP vocabulary's size, or a DP output it stored is damaged): it is not tried
  again with the same request, which would spend again and most likely fail again; release
  it by hand.
* ``new``: a new release.

The range comes from the operator and the calendar, never from the data: a time range
needs ``first`` (the earliest timestamp is private), ends by default with the last window
that closed before today, and a window that has not closed yet is never released. Every
partition's request is validated before the first one runs, so a bad option stops the
backfill before anything is spent. With parallel composition (``storage.ledger``) the
releases of disjoint windows of a document-level dataset cost the most any one window
spent, not their sum.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Literal

from fdptm.errors import BadInputError
from fdptm.request import SCOPE_FIELDS, ReleaseRequest
from fdptm.storage import recovery
from fdptm.storage.catalog import Catalog
from fdptm.storage.partitions import WINDOWS, window_bounds, windows_between
from fdptm.storage.workspace import Workspace
from fdptm.tasks import run as lifecycle
from fdptm.tasks.spec import RunSpec

BY = (*WINDOWS, "batch")


@dataclass(frozen=True)
class Partition:
    """One partition of a backfill: its label, its release request and what it needs."""

    label: str
    request: ReleaseRequest
    state: Literal["done", "resume", "new", "failed"]
    run_id: str | None = None

    def left_alone(self) -> dict:
        """The outcome of a partition a backfill does not run: skipped (released before) or
        not-retried (spent and cannot go on)."""
        status = {"done": "skipped", "failed": "not-retried"}[self.state]
        return {"partition": self.label, "status": status, "run_id": self.run_id}


def nothing_to_run(partitions: list[Partition]) -> bool:
    """Whether every partition is released or not retried (a no-op: no flow needs to start)."""
    return all(p.state in ("done", "failed") for p in partitions)


def plan_backfill(
    request: ReleaseRequest,
    by: str,
    first: str | None = None,
    last: str | None = None,
    today: dt.date | None = None,
) -> list[Partition]:
    """The partitions of the range, in order, each with its state (module docstring).

    ``first`` and ``last`` are batch numbers (``by="batch"``) or ISO days (a window holding
    a day of [first, last] is in range). Raises BadInputError for a bad range or request.
    """
    if by not in BY:
        raise BadInputError(f"--by must be one of {BY}, got {by!r}")
    given = [f for f in SCOPE_FIELDS if getattr(request, f) is not None]
    if given:
        raise BadInputError(
            f"a backfill chooses each release's partitions itself; drop --{given[0]} "
            "(use --from and --to for the range)"
        )
    workspace = Workspace.resolve(request.workspace).require()
    catalog = Catalog(workspace)
    if catalog.dataset(request.dataset) is None:
        raise BadInputError(f"no dataset named {request.dataset!r}; ingest it first")
    workspace.check_key()  # before any partition reads or reserves
    today = today or dt.datetime.now(dt.UTC).date()
    if by == "batch":
        scopes = _batches(catalog, request.dataset, first, last)
    else:
        scopes = _windows(by, first, last, today)
    recovery.recover(workspace, request.dataset)
    partitions = []
    for i, (label, fields) in enumerate(scopes):
        scoped = request.replace(**fields)
        spec = RunSpec.from_request(scoped, "", str(workspace.root))
        lifecycle.validate(spec)
        if i == 0:  # the public vocabulary and prior are the same for every partition
            lifecycle.check_public_inputs(spec, workspace)
        partitions.append(_state(catalog, label, scoped))
    return partitions


def _batches(
    catalog: Catalog, dataset: str, first: str | None, last: str | None
) -> list[tuple[str, dict]]:
    seqs = [b["seq"] for b in catalog.batches(dataset)]
    low = _number(first, "--from", 1)
    high = _number(last, "--to", max(seqs, default=0))
    return [(f"batch {s}", {"batches": str(s)}) for s in seqs if low <= s <= high]


def _number(text: str | None, flag: str, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise BadInputError(f"{flag} {text!r}: with --by batch, give a batch number") from None


def _windows(
    by: str, first: str | None, last: str | None, today: dt.date
) -> list[tuple[str, dict]]:
    if first is None:
        raise BadInputError(
            f"--by {by} needs --from YYYY-MM-DD: the first window must come from you, not "
            "from the data (its earliest timestamp is private)"
        )
    start, end = _day(first, "--from"), _day(last, "--to") if last else today
    if end < start:
        raise BadInputError(f"--to {end} is before --from {start}")
    closed, _ = window_bounds(by, today)  # windows ending on or before this have closed
    return [
        (f"{s}..{u}", {"since": s, "until": u})
        for s, u in windows_between(by, start, end)
        if u <= closed
    ]


def _day(text: str, flag: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise BadInputError(f"{flag} {text!r}: give a UTC day as YYYY-MM-DD") from None


def _state(catalog: Catalog, label: str, request: ReleaseRequest) -> Partition:
    """Whether ``request`` was released, can be resumed, or is new (module docstring)."""
    key = RunSpec.from_request(request, "", "").request_key
    runs = [  # the JSON is read here: both catalogs' SQL has its own JSON functions
        r
        for r in catalog.query(
            "SELECT r.run_id, r.status, r.params, rel.run_id IS NOT NULL AS released,"
            " (SELECT count(*) FROM ledger l WHERE l.run_id = r.run_id AND l.state = 'spent')"
            " AS spent FROM runs r LEFT JOIN releases rel USING (run_id)"
            " WHERE r.kind = 'release' AND r.dataset = ? ORDER BY r.started_at",
            [request.dataset],
        )
        if json.loads(r["params"]).get("request_key") == key
    ]
    if done := [r for r in runs if r["released"]]:
        return Partition(label, request, "done", done[0]["run_id"])
    if failed := [r for r in runs if r["status"] == "failed" and r["spent"]]:
        try:
            lifecycle.resumable(catalog.workspace, failed[-1]["run_id"])
        except BadInputError:  # spent, and cannot go on (M2 refunded, or a DP output damaged)
            return Partition(label, request, "failed", failed[-1]["run_id"])
        return Partition(label, request, "resume", failed[-1]["run_id"])
    return Partition(label, request, "new")
