"""The ``release`` flow: ingested batches -> PRE -> bounding -> M1 -> SAN -> M2 -> release.

Tasks are thin wrappers over ``fdptm.tasks.stages``; they pass catalogued artifact rows,
never data. I/O-only stages retry on failure; the DP stages never do (a retry would spend
budget again), whatever ``PREFECT_TASKS_DEFAULT_RETRIES`` says, and the ledger refuses a
second start of a mechanism on one charge anyway. Flow results are not persisted (the
outcome carries internal operator counts). Runs with Prefect's ephemeral API: no server to
start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from tqdm.auto import tqdm

from fdptm.evaluation.topwords import NEAR_UNIFORM_TV
from fdptm.faults import checkpoint
from fdptm.flows import running
from fdptm.parallel import check_cluster
from fdptm.request import ReleaseRequest
from fdptm.storage import objectstore
from fdptm.storage.workspace import Workspace
from fdptm.tasks import run as lifecycle
from fdptm.tasks import stages
from fdptm.tasks.release import publish
from fdptm.tasks.spec import RunSpec

IO_RETRIES = {"retries": 2, "retry_delay_seconds": 1}


@task(name="preprocess", cache_policy=NO_CACHE, **IO_RETRIES)
def preprocess_task(spec: RunSpec, show: bool, dask_address: str | None = None) -> list[dict]:
    total = stages.documents(spec)
    with tqdm(total=total, desc="PRE documents", unit="doc", disable=not show) as bar:

        def step(n: int) -> None:
            bar.update(n)
            checkpoint("during-preprocess")

        return lifecycle.run_stage(
            spec, "preprocess", stages.preprocess, step, dask_address=dask_address
        )


@task(name="bound-contributions", cache_policy=NO_CACHE, **IO_RETRIES)
def bound_task(spec: RunSpec, tokens: list[dict], dask_address: str | None = None) -> dict:
    return lifecycle.run_stage(spec, "bounding", stages.bound, tokens, dask_address=dask_address)


@task(name="m1-vocabulary", cache_policy=NO_CACHE, retries=0)
def vocabulary_task(spec: RunSpec, bounded: dict, dask_address: str | None = None) -> dict:
    return lifecycle.run_stage(
        spec, "vocabulary", stages.vocabulary, bounded, dask_address=dask_address
    )


@task(name="sanitize", cache_policy=NO_CACHE, **IO_RETRIES)
def sanitize_task(
    spec: RunSpec, bounded: dict, vocab: dict, dask_address: str | None = None
) -> dict:
    return lifecycle.run_stage(
        spec, "sanitize", stages.sanitized, bounded, vocab, dask_address=dask_address
    )


@task(name="m2-train", cache_policy=NO_CACHE, retries=0)
def train_task(
    spec: RunSpec, san: dict, vocab: dict, show: bool, dask_address: str | None = None
) -> dict:
    total = stages.progress_total(spec)
    with tqdm(total=total, desc=f"M2 {spec.mechanism}", disable=not show) as bar:

        def step(n: int) -> None:
            bar.update(n)
            checkpoint("during-train")

        return lifecycle.run_stage(
            spec, "train", stages.train, san, vocab, step, dask_address=dask_address
        )


@task(name="baseline-cgs", cache_policy=NO_CACHE)
def baseline_task(spec: RunSpec, san: dict, vocab: dict, show: bool) -> dict:
    with tqdm(total=spec.iterations, desc="baseline (non-private)", disable=not show) as bar:
        return lifecycle.run_stage(spec, "baseline", stages.baseline, san, vocab, bar.update)


@task(name="publish-release", cache_policy=NO_CACHE, **IO_RETRIES)
def publish_task(spec: RunSpec, vocab: dict, topic_word: dict) -> str:
    return str(lifecycle.run_stage(spec, "release", publish, vocab, topic_word))


@dataclass(frozen=True)
class ReleaseOutcome:
    """What a release run returns. ``topics`` is the manifest's: per topic, ``no_signal``,
    ``tested``, ``floor`` and ``words`` ({word, probability}: the words that stand above the
    noise, or above the floor where the release is untested). ``internal``
    holds operator counts (not DP, never in the release): documents read, authors, documents
    dropped by contribution bounding."""

    run_id: str
    release_path: str
    epsilon: float
    delta: float
    adjacency: str
    notion: str
    statement: str
    topics: list[dict]
    internal: dict[str, int]
    store_pending: str | None = None  # uploads the artifact store could not take


def _pipeline(spec: RunSpec, show_progress: bool, dask_address: str | None = None) -> dict:
    """PRE -> bounding -> M1 -> SAN -> M2 (-> baseline) -> publish, then the outcome.

    ``dask_address``: PRE's chunks, bounding's ranking of the authors over the cap, M1's
    per-author work (ranges of authors), SAN's batches and M2's data-parallel work
    (``dp-vi``'s statistics) run on that Dask cluster's workers; reading the tokens, M1's
    encoding and sequential pass, the noise and publishing run in this process.

    The run logs (Prefect's run logger: the UI, and Python's logging) name the run, its
    stages and its public budget, never a document, a word or a count of private data.
    """
    log = get_run_logger()
    log.info(
        "run %s: dataset %s, (epsilon %g, delta %g), M2 %s, DP stages %s",
        spec.run_id,
        spec.dataset,
        spec.epsilon,
        spec.delta,
        spec.m2.name,
        ", ".join(spec.dp_stages),
    )
    m1 = f"M1 {spec.vocabulary_selection}"
    try:
        with _stage("PRE"):
            tokens = preprocess_task(spec, show_progress, dask_address)
        with _stage("contribution bounding"):
            bounded = bound_task(spec, tokens, dask_address)
        with _stage(m1 if "vocabulary" in spec.dp_stages else "public vocabulary"):
            vocab = vocabulary_task(spec, bounded, dask_address)
        log.info("run %s: vocabulary selected (%s)", spec.run_id, spec.vocabulary_selection)
        with _stage("SAN"):
            san = sanitize_task(spec, bounded, vocab, dask_address)
        running.prefetch("great_expectations")  # the publish checks' import, during M2
        with _stage(f"M2 {spec.mechanism}"):
            topic_word = train_task(spec, san, vocab, show_progress, dask_address)
        log.info("run %s: M2 trained", spec.run_id)
        if spec.baseline:
            with _stage("non-private baseline (internal)"):
                baseline_task(spec, san, vocab, show_progress)
        with _stage("publish"):
            path = publish_task(spec, vocab, topic_word)
    except BaseException as exc:
        log.error("run %s failed: %s", spec.run_id, type(exc).__name__)
        lifecycle.finish(spec, exc)
        raise
    lifecycle.finish(spec)
    log.info("run %s: published", spec.run_id)
    pending = objectstore.settle(Workspace.resolve(spec.workspace))
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
        manifest["topics"],
        stages.operator_counts(spec),
        pending,
    )
    try:
        create_markdown_artifact(
            key=artifact_key(spec.dataset),
            markdown=_summary(outcome, manifest),
            description=f"DP topic model release {spec.run_id}",
        )
    except httpx.TransportError as exc:  # the release is published; only the summary is lost
        get_run_logger().warning(
            "release %s is published, but Prefect's API could not be reached to store its "
            "summary artifact (%s)",
            spec.run_id,
            exc,
        )
    return outcome.__dict__


PROGRESS = logging.getLogger("fdptm.progress")
"""One record per finished stage with its elapsed time, for the operator's terminal (the
CLI shows them; Prefect's API handlers are not on this logger). Run times are internal:
they depend on the data's size, so they never enter a release."""


@contextlib.contextmanager
def _stage(name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    PROGRESS.info("%-32s done in %6.1f s", name, time.perf_counter() - start)


@flow(name="release", log_prints=False, retries=0, persist_result=False)
def release(
    request: ReleaseRequest, show_progress: bool = False, dask_address: str | None = None
) -> dict:
    """Release a DP topic model as ``request`` describes; returns the outcome.

    With ``request.releases_left`` the run uses at most (what the lifetime cap has left) /
    releases_left, the adaptive budget of a scheduled plan.
    """
    check_cluster(dask_address)  # before the reservation: a bad cluster spends nothing
    spec, _ = lifecycle.prepare(request)
    checkpoint("after-reserve")
    return _pipeline(spec, show_progress, dask_address)


@flow(name="resume-release", log_prints=False, retries=0, persist_result=False)
def resume_release(
    run_id: str,
    workspace: str | None = None,
    show_progress: bool = False,
    dask_address: str | None = None,
) -> dict:
    """Continue failed release ``run_id`` from its last stored stage, spending nothing again
    (a lost DP stage is reserved anew; see ``fdptm.tasks.run.prepare_resume``)."""
    check_cluster(dask_address)
    spec, _, _ = lifecycle.prepare_resume(Workspace.resolve(workspace).require(), run_id)
    return _pipeline(spec, show_progress, dask_address)


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
        "Top words: only the words that stand above the noise (a test per entry from the "
        "noise law the manifest states, with a chance of at most 1% that any listed word "
        "of the release is noise), with their probabilities. *Untested* (a release without "
        "a public noise model): the words above the topic's floor. *No signal*: no word "
        f"listed (untested: none above the floor, or within {NEAR_UNIFORM_TV:g} of uniform "
        "in total variation).",
        "",
        "| topic | floor | top words (probability) |",
        "|---|---|---|",
    ]
    lines += [f"| {t['topic']} | {t['floor']} | {_words_cell(t)} |" for t in outcome.topics]
    lines += ["", f"Files: `{outcome.release_path}`"]
    return "\n".join(lines)


def _words_cell(topic: dict) -> str:
    """A topic's words with probabilities, or *no signal*."""
    mark = "" if topic.get("tested") else "*untested* "
    if topic["no_signal"]:
        return mark + "*no signal*"
    return mark + ", ".join(f"{w['word']} {w['probability']}" for w in topic["words"])
