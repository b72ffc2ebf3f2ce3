"""The ``audit`` flow: a release's membership-inference audit with its models fanned out.

``tasks.audit.plan_audit`` fixes the budgets, inputs and halves; every model (the target and
each shadow, once through the whole pipeline and once through M2 alone on the released
vocabulary: ``fdptm.audit.attacks``) is an independent ``audit-model`` task that reads the
bounded tokens itself and returns per-document statistics only, so no process holds all
models' document-term matrices; ``conclude`` attacks the target and writes the internal
report. ``workers`` > 1 runs the models on a local process pool; ``dask_address`` on a Dask
cluster (prefect-dask). With one worker the models run one after another in this process.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

from fdptm.audit.shadows import ModelScores
from fdptm.flows.release import release
from fdptm.mechanisms.registry import DEFAULT_MECHANISM
from fdptm.storage.workspace import Workspace
from fdptm.tasks.audit import AuditPlan, AuditSpec, conclude, model_statistics, plan_audit


@task(name="audit-model", cache_policy=NO_CACHE, retries=1)
def model_task(plan: AuditPlan, index: int, m2_only: bool) -> ModelScores:
    return model_statistics(plan, index, m2_only)


def task_runner(workers: int, dask_address: str | None):
    """Dask when an address is given, else local processes, else one thread."""
    if dask_address:
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(address=dask_address)
    if workers > 1:
        return ProcessPoolTaskRunner(max_workers=workers)
    return ThreadPoolTaskRunner(max_workers=1)


@flow(name="audit", log_prints=False)
def audit_flow(spec: AuditSpec) -> dict:
    """Plan, every model as a task on the flow's task runner, conclude; returns the report."""
    plan = plan_audit(spec)
    models = range(len(plan.masks))
    pipeline = [model_task.submit(plan, i, False) for i in models]
    m2_only = [model_task.submit(plan, i, True) for i in models]
    report = conclude(plan, [f.result() for f in pipeline], [f.result() for f in m2_only])
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


def audit(spec: AuditSpec, workers: int = 1, dask_address: str | None = None) -> dict:
    """Run the audit flow with the task runner that ``workers`` and ``dask_address`` ask for."""
    return audit_flow.with_options(task_runner=task_runner(workers, dask_address))(spec)


@flow(name="audited-release", log_prints=False)
def audited_release(
    dataset: str,
    epsilon: float,
    delta: float,
    topics: int,
    iterations: int = 20,
    mechanism: str = DEFAULT_MECHANISM,
    workspace: str | None = None,
    releases_left: int | None = None,
    shadows: int = 16,
    mode: str = "online",
) -> dict:
    """A release, then its audit (an audit failure fails this flow run, exit-code 4 style).

    The release is published (and its budget spent) before the audit runs; a failed audit
    does not withdraw it but marks the run failed and says which stage is suspect, so a
    scheduled audited release alerts loudly.
    """
    outcome = release(
        dataset,
        epsilon,
        delta,
        topics,
        iterations=iterations,
        mechanism=mechanism,
        workspace=workspace,
        releases_left=releases_left,
    )
    spec = AuditSpec(
        run_id=outcome["run_id"],
        workspace=str(Workspace.resolve(workspace).root),
        shadows=shadows,
        mode=mode,
    )
    return {"release": outcome, "audit": audit_flow(spec)}
