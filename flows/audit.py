"""The ``audit`` flow: a release's membership-inference audit with its models fanned out.

``tasks.audit.plan_audit`` fixes the budgets, inputs and halves; every model (the target and
each shadow, once through the whole pipeline and once through M2 alone on the released
vocabulary: ``fdptm.audit.attacks``) is an independent ``audit-models`` task that reads the
bounded tokens itself and returns per-document statistics only, so no process holds all
models' document-term matrices; ``conclude`` attacks the target and writes the internal
report. The models run on local threads by default (one per core; ``task_runner`` says
why), on a local process pool with ``processes``, or on a Dask cluster with
``dask_address`` (prefect-dask).
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

from fdptm.audit.shadows import ModelScores
from fdptm.flows.release import release
from fdptm.parallel import threads_at_most
from fdptm.parallel import workers as usable_cores
from fdptm.request import ReleaseRequest
from fdptm.storage.workspace import Workspace
from fdptm.tasks.audit import AuditPlan, AuditSpec, conclude, model_statistics, plan_audit


@task(name="audit-models", cache_policy=NO_CACHE, retries=1)
def model_task(
    plan: AuditPlan, index: int, threads: int | None = None
) -> tuple[ModelScores, ModelScores]:
    """The two models of half ``index``, their kernels on at most ``threads`` threads (None:
    every core the process may use)."""
    if threads is None:
        return model_statistics(plan, index)
    with threads_at_most(threads):
        return model_statistics(plan, index)


def task_runner(workers: int | None = None, dask_address: str | None = None, processes=False):
    """Dask when an address is given, else ``workers`` local processes or threads.

    Threads are the default: every kernel a model spends its time in is numba-compiled
    with ``nogil``, so threads use all cores without the cost of processes (each imports
    the whole stack and holds its own copy: benchmarks/audit_results.md measures both).
    ``workers`` defaults to the number of cores this process may run on (its affinity
    mask where the OS has one). Built when a run asks for it, never at import.
    """
    if dask_address:
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(address=dask_address)
    workers = workers or usable_cores()
    if processes:
        return ProcessPoolTaskRunner(max_workers=workers)
    return ThreadPoolTaskRunner(max_workers=workers)


@flow(name="audit", log_prints=False, task_runner=ThreadPoolTaskRunner())
def audit_flow(spec: AuditSpec, model_threads: int | None = None) -> dict:
    """Plan, every model as a task on the flow's task runner (its kernels on at most
    ``model_threads`` threads), conclude; returns the report."""
    log = get_run_logger()
    plan = plan_audit(spec)
    log.info("audit of %s: %d models (%s)", spec.run_id, 2 * len(plan.masks), spec.mode)
    futures = [model_task.submit(plan, i, model_threads) for i in range(len(plan.masks))]
    pairs = [f.result() for f in futures]
    report = conclude(plan, [p for p, _ in pairs], [m for _, m in pairs])
    log.info("audit of %s: %s", spec.run_id, report["verdict"])
    lines = [
        f"# Audit of `{spec.run_id}`: {report['verdict']}",
        "",
        f"> {report['note']}",
        "",
        "| attack | tests | AUC | TPR at 0.1% FPR | TPR at 1% FPR | epsilon lower bound |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in report["attacks"].items():
        lines.append(
            f"| {name} | {r['scope']} | {r['auc']:.3f} | {r['tpr_at_fpr_0.001']:.3f} | "
            f"{r['tpr_at_fpr_0.01']:.3f} | {r['epsilon_lower_bound']['epsilon']:.3f} |"
        )
    create_markdown_artifact(
        key="fdptm-audit", markdown="\n".join(lines), description=f"audit of {spec.run_id}"
    )
    return report


def audit(
    spec: AuditSpec,
    workers: int | None = None,
    dask_address: str | None = None,
    processes: bool = False,
) -> dict:
    """Run the audit flow on the task runner that the arguments ask for (``task_runner``).

    Locally the cores are shared out between the models that run at once: with one model
    per core, each runs its kernels on one thread. Two models on two cores each splitting
    their iterations over both cores again took 1.7x the time per model pair when dp-vi
    cut its statistic into 32 ranges (every range a GIL round trip), and 1.0-1.15x with
    its ranges per thread (four measurements on PHEME halves, 2026-11-29). A Dask worker
    decides for itself."""
    runner = task_runner(workers, dask_address, processes)
    share = None if dask_address else max(1, usable_cores() // (workers or usable_cores()))
    return audit_flow.with_options(task_runner=runner)(spec, share)


@flow(name="audited-release", log_prints=False, retries=0, persist_result=False)
def audited_release(request: ReleaseRequest, shadows: int = 16, mode: str = "online") -> dict:
    """A release, then its audit (an audit failure fails this flow run, exit-code 4 style).

    The release is published (and its budget spent) before the audit runs; a failed audit
    does not withdraw it but marks the run failed and says which stage is suspect, so a
    scheduled audited release alerts loudly.
    """
    outcome = release(request)
    spec = AuditSpec(
        run_id=outcome["run_id"],
        workspace=str(Workspace.resolve(request.workspace).root),
        shadows=shadows,
        mode=mode,
    )
    return {"release": outcome, "audit": audit(spec)}
