"""A scheduled (weekly) release deployment, served by a local process.

    python -m fdptm.deployments.scheduled_release --dataset pheme --epsilon 5 \
        --delta 1e-5 --topics 5 [any `fdptm release` option] [--cron "0 6 * * 1"]

``serve`` registers the deployment ``release/weekly-release`` with the Prefect API and runs
its scheduled flow runs in this process until interrupted; no work pool or cloud is needed.
The deployment's one parameter is the release request (``fdptm.request.ReleaseRequest``),
built from the same options as ``fdptm release``, so a schedule cannot drift from the CLI.
Every run goes through the ledger like a CLI run: if the dataset's lifetime cap cannot
cover the run, the run fails with BudgetRefusedError before any stage touches data. With
``--releases-left N`` each run instead scales down to (what the cap has left) / N.
"""

from __future__ import annotations

import argparse

from prefect.deployments.runner import RunnerDeployment

from fdptm.flows.release import release
from fdptm.request import ReleaseRequest, add_arguments, from_arguments
from fdptm.storage.workspace import Workspace

WEEKLY = "0 6 * * 1"  # Mondays 06:00


def build(
    request: ReleaseRequest, *, cron: str = WEEKLY, name: str = "weekly-release"
) -> RunnerDeployment:
    """The deployment object: the release flow on a cron schedule with a fixed request."""
    return release.to_deployment(
        name=name,
        cron=cron,
        parameters={"request": pinned(request).model_dump(mode="json")},
        description="Scheduled FDPTM release; the ledger refuses runs beyond the lifetime cap.",
        tags=["fdptm", "release", request.dataset],
    )


def pinned(request: ReleaseRequest) -> ReleaseRequest:
    """The request with its workspace resolved now: a scheduled run must not depend on the
    working directory or environment of the process that happens to serve it."""
    return request.replace(workspace=str(Workspace.resolve(request.workspace).root))


def release_parser(description: str, cron: str, name: str) -> argparse.ArgumentParser:
    """The options of a scheduled release: the request's, plus the schedule's."""
    p = argparse.ArgumentParser(description=description)
    add_arguments(p)
    p.add_argument("--cron", default=cron, help=f"schedule (default {cron!r})")
    p.add_argument("--name", default=name, help=f"deployment name (default {name!r})")
    return p


def from_args(argv: list[str] | None = None) -> RunnerDeployment:
    """The deployment the command line describes."""
    parser = release_parser(__doc__.split("\n\n")[0], WEEKLY, "weekly-release")
    args = parser.parse_args(argv)
    return build(from_arguments(args), cron=args.cron, name=args.name)


def main(argv: list[str] | None = None) -> None:
    from prefect import serve

    serve(from_args(argv))


if __name__ == "__main__":
    main()
