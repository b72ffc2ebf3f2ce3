"""A scheduled (monthly) audited release: the release flow, then its membership audit.

    python -m fdptm.deployments.audited_release --dataset pheme --epsilon 5 --delta 1e-5 \
        --topics 5 [any `fdptm release` option] [--shadows 16] [--cron "0 5 1 * *"]

Served by a local process like the weekly release (``deployments/scheduled_release.py``).
Each run publishes a release through the ledger and then audits it; the audit's report is
internal, and a failed audit fails the flow run.
"""

from __future__ import annotations

from prefect.deployments.runner import RunnerDeployment

from fdptm.deployments.scheduled_release import pinned, release_parser
from fdptm.flows.audit import audited_release
from fdptm.request import ReleaseRequest, from_arguments

MONTHLY = "0 5 1 * *"  # the first of each month, 05:00


def build(
    request: ReleaseRequest,
    *,
    shadows: int = 16,
    cron: str = MONTHLY,
    name: str = "monthly-audited-release",
) -> RunnerDeployment:
    """The deployment object: the audited-release flow on a cron schedule."""
    return audited_release.to_deployment(
        name=name,
        cron=cron,
        parameters={"request": pinned(request).model_dump(mode="json"), "shadows": shadows},
        description="Scheduled FDPTM release followed by its membership-inference audit.",
        tags=["fdptm", "release", "audit", request.dataset],
    )


def from_args(argv: list[str] | None = None) -> RunnerDeployment:
    """The deployment the command line describes."""
    parser = release_parser(__doc__.split("\n\n")[0], MONTHLY, "monthly-audited-release")
    parser.add_argument("--shadows", type=int, default=16)
    a = parser.parse_args(argv)
    return build(from_arguments(a), shadows=a.shadows, cron=a.cron, name=a.name)


def main(argv: list[str] | None = None) -> None:
    from prefect import serve

    serve(from_args(argv))


if __name__ == "__main__":
    main()
