"""OLP-LDA as a deployment: each new batch of LDP reports released soon after it lands.

    python -m fdptm.deployments.online_release --dataset reports --topics 5 --prior pub \
        [any `fdptm local release` option] [--interval 900]

``serve`` registers ``online-release/online-release`` with the Prefect API and runs it in
this process every ``--interval`` seconds until interrupted. Each run takes every report
batch ingested (``fdptm ingest --local-reports``) since the online model's last one, in
order, and publishes one release per batch (``fdptm.flows.local_release.online_release``);
a run with no new batch publishes nothing. The one parameter is the local release request
(``fdptm.request.LocalReleaseRequest``, the fields of ``fdptm local release``) with
``mechanism`` olp-lda. Nothing is charged: the reports' local guarantee was recorded when
they were ingested.
"""

from __future__ import annotations

import argparse

from prefect.deployments.runner import RunnerDeployment

from fdptm.flows.local_release import online_release
from fdptm.request import LocalReleaseRequest, add_arguments, from_arguments
from fdptm.storage.workspace import Workspace

EVERY = 900  # seconds between runs: a batch waits at most this long for its release


def build(
    request: LocalReleaseRequest, *, interval: int = EVERY, name: str = "online-release"
) -> RunnerDeployment:
    """The deployment: the online flow every ``interval`` seconds with a fixed request."""
    pinned = request.replace(
        mechanism="olp-lda", workspace=str(Workspace.resolve(request.workspace).root)
    )
    return online_release.to_deployment(
        name=name,
        interval=interval,
        parameters={"request": pinned.model_dump(mode="json")},
        description="OLP-LDA: one release per new batch of local-DP reports; spends nothing.",
        tags=["fdptm", "local", request.dataset],
    )


def from_args(argv: list[str] | None = None) -> RunnerDeployment:
    """The deployment the command line describes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, model=LocalReleaseRequest, exclude=("mechanism", "batches"))
    parser.add_argument("--interval", type=int, default=EVERY, help=f"seconds (default {EVERY})")
    parser.add_argument("--name", default="online-release", help="deployment name")
    args = parser.parse_args(argv)
    request = from_arguments(args, LocalReleaseRequest, mechanism="olp-lda")
    return build(request, interval=args.interval, name=args.name)


def main(argv: list[str] | None = None) -> None:
    from prefect import serve

    serve(from_args(argv))


if __name__ == "__main__":
    main()
