"""The backfill flow: one release per partition of a range (``fdptm.tasks.backfill``).

Each partition that needs a release is one task, which runs the ``release`` flow (or
``resume-release`` for an interrupted one) as a nested flow run, so Prefect's UI shows one
release per partition under the backfill. The tasks run one after another by default (a
release already uses every core); ``dask_address`` fans them out on a Dask cluster
(prefect-dask). Every release reserves its budget through the ledger atomically, so
partitions released at once can never overspend the cap. A partition that fails (a
refused budget, a damaged DP output, or anything unexpected) is reported and the others
go on; one whose release spent and cannot go on is reported as ``not-retried``.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from fdptm.errors import FdptmError
from fdptm.request import ReleaseRequest
from fdptm.tasks.backfill import Partition, plan_backfill


@task(name="release-partition", cache_policy=NO_CACHE, retries=0)
def partition_task(partition: Partition) -> dict:
    """Release (or resume) one partition; its outcome, never an exception for a refusal.

    The flows are imported here, not at module level: a Dask worker gets this function by
    value (cloudpickle), and a module-level flow would travel by value too, without the
    module globals its annotations name (``ReleaseRequest``); imported in the worker, they
    are the module's own."""
    from fdptm.flows.release import release, resume_release

    try:
        if partition.state == "resume":
            outcome = resume_release(partition.run_id, partition.request.workspace)
        else:
            outcome = release(partition.request)
    except FdptmError as exc:
        return {
            "partition": partition.label,
            "status": "failed",
            "exit_code": exc.exit_code,
            "error": str(exc),
        }
    except Exception as exc:  # reported for this partition; its message stays in the run's
        # catalog record and logs (a foreign message might quote data, or not unpickle)
        return {
            "partition": partition.label,
            "status": "failed",
            "exit_code": 1,
            "error": f"unexpected {type(exc).__name__}; the run's catalog record and Prefect "
            "logs have the details",
        }
    return {
        "partition": partition.label,
        "status": "resumed" if partition.state == "resume" else "released",
        "run_id": outcome["run_id"],
        "guarantee": f"{outcome['statement']}, {outcome['adjacency']}-level adjacency",
    }


@flow(name="backfill", log_prints=False, retries=0, persist_result=False)
def backfill(
    request: ReleaseRequest, by: str, first: str | None = None, last: str | None = None
) -> dict:
    """Release every partition of the range that has no release of ``request`` yet."""
    log = get_run_logger()
    partitions = plan_backfill(request, by, first, last)
    pending = [p for p in partitions if p.state in ("new", "resume")]
    log.info(
        "backfill of %s by %s: %d partition(s), %d already released, %d not retried",
        request.dataset,
        by,
        len(partitions),
        sum(p.state == "done" for p in partitions),
        sum(p.state == "failed" for p in partitions),
    )
    futures = [partition_task.submit(p) for p in pending]
    outcomes = {o["partition"]: o for o in (f.result() for f in futures)}
    results = [outcomes[p.label] if p.label in outcomes else p.left_alone() for p in partitions]
    for r in results:
        log.info("partition %s: %s", r["partition"], r["status"])
    return {"dataset": request.dataset, "by": by, "partitions": results}


def run_backfill(
    request: ReleaseRequest,
    by: str,
    first: str | None = None,
    last: str | None = None,
    dask_address: str | None = None,
) -> dict:
    """The backfill flow on one thread, or fanned out on the Dask cluster at ``dask_address``."""
    if dask_address:
        from prefect_dask import DaskTaskRunner

        runner = DaskTaskRunner(address=dask_address)
    else:
        runner = ThreadPoolTaskRunner(max_workers=1)
    return backfill.with_options(task_runner=runner)(request, by, first, last)
