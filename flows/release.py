"""The ``release`` flow: ingested batches -> PRE -> bounding -> M1 -> SAN -> M2 -> release.

Tasks are thin wrappers over ``fdptm.tasks.stages``; they pass catalogued artifact rows,
never data. I/O-only stages retry on failure; the DP stages never do (a retry would spend
budget again). Runs with Prefect's ephemeral API: no server to start.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from tqdm.auto import tqdm

from fdptm.mechanisms.registry import DEFAULT_MECHANISM
from fdptm.storage.workspace import Workspace
from fdptm.tasks import run as lifecycle
from fdptm.tasks import stages
from fdptm.tasks.bounding import Bounds
from fdptm.tasks.release import publish
from fdptm.tasks.spec import RunSpec

IO_RETRIES = {"retries": 2, "retry_delay_seconds": 1}


@task(name="preprocess", cache_policy=NO_CACHE, **IO_RETRIES)
def preprocess_task(spec: RunSpec, show: bool) -> list[dict]:
    total = stages.documents(spec)
    with tqdm(total=total, desc="PRE documents", unit="doc", disable=not show) as bar:
        return lifecycle.run_stage(spec, "preprocess", stages.preprocess, bar.update)


@task(name="bound-contributions", cache_policy=NO_CACHE, **IO_RETRIES)
def bound_task(spec: RunSpec, tokens: list[dict]) -> dict:
    return lifecycle.run_stage(spec, "bounding", stages.bound, tokens)


@task(name="m1-vocabulary", cache_policy=NO_CACHE)
def vocabulary_task(spec: RunSpec, bounded: dict, epsilon: float, delta: float) -> dict:
    return lifecycle.run_stage(spec, "vocabulary", stages.vocabulary, bounded, epsilon, delta)


@task(name="sanitize", cache_policy=NO_CACHE, **IO_RETRIES)
def sanitize_task(spec: RunSpec, bounded: dict, vocab: dict) -> dict:
    return lifecycle.run_stage(spec, "sanitize", stages.sanitized, bounded, vocab)


@task(name="m2-train", cache_policy=NO_CACHE)
def train_task(
    spec: RunSpec, san: dict, vocab: dict, epsilon: float, delta: float, show: bool
) -> dict:
    desc = f"M2 {spec.mechanism}"
    total = stages.progress_total(spec, epsilon, delta)
    with tqdm(total=total, desc=desc, disable=not show) as bar:
        return lifecycle.run_stage(
            spec, "train", stages.train, san, vocab, epsilon, delta, bar.update
        )


@task(name="baseline-cgs", cache_policy=NO_CACHE)
def baseline_task(spec: RunSpec, san: dict, vocab: dict, show: bool) -> dict:
    with tqdm(total=spec.iterations, desc="baseline (non-private)", disable=not show) as bar:
        return lifecycle.run_stage(spec, "baseline", stages.baseline, san, vocab, bar.update)


@task(name="publish-release", cache_policy=NO_CACHE, **IO_RETRIES)
def publish_task(spec: RunSpec, plan, vocab: dict, topic_word: dict) -> str:
    return str(lifecycle.run_stage(spec, "release", publish, plan, vocab, topic_word))


@dataclass(frozen=True)
class ReleaseOutcome:
    run_id: str
    release_path: str
    epsilon: float
    delta: float
    adjacency: str
    notion: str
    statement: str
    top_words: list[list[str]]


@flow(name="release", log_prints=False)
def release(
    dataset: str,
    epsilon: float,
    delta: float,
    topics: int,
    iterations: int = 100,
    mechanism: str = DEFAULT_MECHANISM,
    seed: int | None = None,
    workspace: str | None = None,
    set_union_policy: str = "weighted",
    m1_fraction: float = 0.25,
    max_docs_per_author: int = 100,
    max_tokens_per_doc: int = 1000,
    baseline: bool = False,
    releases_left: int | None = None,
    m2_options: dict | None = None,
    allow_unproven: bool = False,
    show_progress: bool = False,
) -> dict:
    """Release a DP topic model of ``dataset`` at (epsilon, delta); returns the outcome.

    With ``releases_left`` the run uses at most (what the lifetime cap has left) /
    releases_left, the adaptive budget of a scheduled plan.
    """
    spec = RunSpec(
        run_id=lifecycle.new_run_id(dataset),
        workspace=str(Workspace.resolve(workspace).root),
        dataset=dataset,
        epsilon=epsilon,
        delta=delta,
        topics=topics,
        iterations=iterations,
        mechanism=mechanism,
        seed=seed,
        set_union_policy=set_union_policy,
        m1_fraction=m1_fraction,
        baseline=baseline,
        releases_left=releases_left,
        m2_options=dict(m2_options or {}),
        allow_unproven=allow_unproven,
        bounds=Bounds(max_docs_per_author, max_tokens_per_doc),
    )
    spec, plan = lifecycle.prepare(spec)
    m1, m2 = plan.stage("vocabulary"), plan.stage("train")
    try:
        tokens = preprocess_task(spec, show_progress)
        bounded = bound_task(spec, tokens)
        vocab = vocabulary_task(spec, bounded, m1.epsilon, m1.delta)
        san = sanitize_task(spec, bounded, vocab)
        topic_word = train_task(spec, san, vocab, m2.epsilon, m2.delta, show_progress)
        if spec.baseline:
            baseline_task(spec, san, vocab, show_progress)
        path = publish_task(spec, plan, vocab, topic_word)
    except BaseException as exc:
        lifecycle.finish(spec, exc)
        raise
    lifecycle.finish(spec)
    manifest = json.loads((Path(path) / "manifest.json").read_text())
    g = manifest["guarantee"]
    outcome = ReleaseOutcome(
        spec.run_id,
        path,
        g["epsilon"],
        g["delta"],
        g["adjacency"],
        g["notion"],
        g["statement"],
        manifest["top_words"],
    )
    create_markdown_artifact(
        key=artifact_key(dataset),
        markdown=_summary(outcome, manifest),
        description=f"DP topic model release {spec.run_id}",
    )
    return outcome.__dict__


def artifact_key(dataset: str) -> str:
    """One Prefect artifact history per dataset (keys allow a-z, 0-9 and '-')."""
    return "fdptm-release-" + re.sub(r"[^a-z0-9-]", "-", dataset.lower())


def _summary(outcome: ReleaseOutcome, manifest: dict) -> str:
    g = manifest["guarantee"]
    lines = [
        f"# Release `{outcome.run_id}`",
        "",
        f"**Guarantee:** {g['statement']}, **{g['adjacency']}-level** "
        f"({g['neighbouring_datasets']}); accountant: {g['accountant']}.",
        "",
        f"> {g['not_covered']}",
        "",
        "| stage | mechanism | adjacency | epsilon | delta |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {s['step']} {s['stage']} | {s['mechanism']} | {s['adjacency']} | "
        f"{s['epsilon']:.4g} | {s['delta']:.3g} |"
        for s in manifest["stages"]
    ]
    lines += [
        "",
        f"Vocabulary size: {manifest['model']['vocabulary_size']}",
        "",
        "| topic | top words |",
        "|---|---|",
    ]
    lines += [f"| {i} | {' '.join(ws)} |" for i, ws in enumerate(outcome.top_words)]
    lines += ["", f"Files: `{outcome.release_path}`"]
    return "\n".join(lines)
