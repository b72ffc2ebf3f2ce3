"""A scheduled (weekly) release deployment, served by a local process.

    python -m fdptm.deployments.scheduled_release --dataset pheme --epsilon 5 \
        --delta 1e-5 --topics 5 [--mechanism dp-vi] [--cron "0 6 * * 1"] [--workspace DIR]

``serve`` registers the deployment ``release/weekly-release`` with the Prefect API and runs
its scheduled flow runs in this process until interrupted; no work pool or cloud is needed.
Every run goes through the ledger like a CLI run: if the dataset's lifetime cap cannot
cover the run, the run fails with BudgetRefusedError before any stage touches data. With
``--releases-left N`` each run instead scales down to (what the cap has left) / N.
"""

from __future__ import annotations

import argparse

from prefect.deployments.runner import RunnerDeployment

from fdptm.flows.release import release
from fdptm.mechanisms.registry import DEFAULT_MECHANISM, MECHANISMS

WEEKLY = "0 6 * * 1"  # Mondays 06:00


def build(
    dataset: str,
    epsilon: float,
    delta: float,
    topics: int,
    *,
    iterations: int = 20,
    mechanism: str = DEFAULT_MECHANISM,
    workspace: str | None = None,
    releases_left: int | None = None,
    cron: str = WEEKLY,
    name: str = "weekly-release",
) -> RunnerDeployment:
    """The deployment object: the release flow on a cron schedule with fixed parameters."""
    return release.to_deployment(
        name=name,
        cron=cron,
        parameters={
            "dataset": dataset,
            "epsilon": epsilon,
            "delta": delta,
            "topics": topics,
            "iterations": iterations,
            "mechanism": mechanism,
            "workspace": workspace,
            "releases_left": releases_left,
        },
        description="Scheduled FDPTM release; the ledger refuses runs beyond the lifetime cap.",
        tags=["fdptm", "release", dataset],
    )


def release_parser(description: str, cron: str, name: str) -> argparse.ArgumentParser:
    """The command-line options of a scheduled release (shared with the audited release)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dataset", required=True)
    p.add_argument("--epsilon", type=float, required=True)
    p.add_argument("--delta", type=float, required=True)
    p.add_argument("--topics", type=int, required=True)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--mechanism", default=DEFAULT_MECHANISM, choices=list(MECHANISMS))
    p.add_argument("--workspace")
    p.add_argument("--releases-left", type=int, help="share what the cap has left over N runs")
    p.add_argument("--cron", default=cron)
    p.add_argument("--name", default=name)
    return p


def release_arguments(a: argparse.Namespace) -> dict:
    """The parsed options as ``build`` keyword arguments."""
    return {
        k: getattr(a, k)
        for k in (
            "dataset",
            "epsilon",
            "delta",
            "topics",
            "iterations",
            "mechanism",
            "workspace",
            "releases_left",
            "cron",
            "name",
        )
    }


def from_args(argv: list[str] | None = None) -> RunnerDeployment:
    """The deployment the command line describes."""
    parser = release_parser(__doc__.split("\n\n")[0], WEEKLY, "weekly-release")
    return build(**release_arguments(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    from prefect import serve

    serve(from_args(argv))


if __name__ == "__main__":
    main()
