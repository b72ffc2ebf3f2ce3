"""A backfill deployment, served by a local process and run on demand (or on a schedule).

    python -m fdptm.deployments.backfill --dataset news --epsilon 1 --delta 1e-6 \
        --topics 5 --by week --from 2024-01-01 [any `fdptm release` option but the scope]
        [--cron "0 7 * * 1"]

Each run releases every partition of the range that has no release of this request yet
(``fdptm.tasks.backfill``), so a scheduled backfill with an open range (no ``--to``) picks
up each window once it has closed, and re-runs after a failure release only what is
missing. The parameters are the release request and the range, as for ``fdptm backfill``.
"""

from __future__ import annotations

import argparse

from prefect.deployments.runner import RunnerDeployment

from fdptm.deployments.scheduled_release import pinned
from fdptm.flows.backfill import backfill
from fdptm.request import SCOPE_FIELDS, ReleaseRequest, add_arguments, from_arguments
from fdptm.tasks.backfill import BY


def build(
    request: ReleaseRequest,
    by: str,
    first: str | None = None,
    last: str | None = None,
    *,
    cron: str | None = None,
    name: str = "backfill",
) -> RunnerDeployment:
    """The deployment object: the backfill flow with a fixed request and range."""
    return backfill.to_deployment(
        name=name,
        cron=cron,
        parameters={
            "request": pinned(request).model_dump(mode="json"),
            "by": by,
            "first": first,
            "last": last,
        },
        description="FDPTM backfill: one release per partition that has none yet.",
        tags=["fdptm", "backfill", request.dataset],
    )


def from_args(argv: list[str] | None = None) -> RunnerDeployment:
    """The deployment the command line describes."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p, exclude=SCOPE_FIELDS)
    p.add_argument("--by", required=True, choices=BY)
    p.add_argument("--from", dest="first")
    p.add_argument("--to", dest="last")
    p.add_argument("--cron", help="optional schedule")
    p.add_argument("--name", default="backfill", help="deployment name (default 'backfill')")
    a = p.parse_args(argv)
    return build(from_arguments(a), a.by, a.first, a.last, cron=a.cron, name=a.name)


def main(argv: list[str] | None = None) -> None:
    from prefect import serve

    serve(from_args(argv))


if __name__ == "__main__":
    main()
