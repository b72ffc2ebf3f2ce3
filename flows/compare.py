"""The ``compare`` flow: several M2 mechanisms on one dataset at one budget, nothing released.

PRE and contribution bounding as in a release, one DP vocabulary (M1 at ``m1_fraction`` of
epsilon at the dataset's unit), SAN, a random document split into training and held-out
documents, then ``fdptm.evaluation.comparison.compare``. The ledger is not touched: nothing
leaves the workspace's internal area, and the comparison table is itself an internal,
non-DP artifact (it is computed from the private documents) that says so in its first line.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, replace

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from tqdm.auto import tqdm

from fdptm.errors import BadInputError
from fdptm.evaluation.comparison import compare, markdown, split_documents
from fdptm.privacy.accountant import StageSpec, plan_budget
from fdptm.privacy.noise import NoiseSource
from fdptm.request import default
from fdptm.storage import objectstore, recovery
from fdptm.storage.artifacts import write_json
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.storage.workspace import Workspace
from fdptm.tasks import run as lifecycle
from fdptm.tasks import stages
from fdptm.tasks.bounding import Bounds
from fdptm.tasks.sanitize import corpus_of, sanitize
from fdptm.tasks.spec import RunSpec
from fdptm.tasks.vocabulary import select_vocabulary
from fdptm.version import code_version


@task(name="compare-prepare", cache_policy=NO_CACHE)
def prepare_task(spec: RunSpec, holdout: float, show: bool):
    """PRE, bounding, M1 and SAN; returns the training and held-out corpora."""
    tokens = stages.preprocess(spec, spend=False)
    bounded = stages.load(spec, stages.bound(spec, tokens))
    catalog = Catalog(Workspace.resolve(spec.workspace))
    unit = Ledger(catalog).default_unit(spec.dataset)
    plan = plan_budget(
        spec.epsilon,
        spec.delta,
        [
            StageSpec("vocabulary", "set-union", unit, True, spec.m1_fraction),
            StageSpec("m2", "m2", unit, True, 1 - spec.m1_fraction),
        ],
        authors_are_documents=Ledger(catalog).authors_are_documents(spec.dataset),
    )
    m1 = plan.stage("vocabulary")
    params = spec.m1_params(m1.epsilon, m1.delta)
    words = select_vocabulary(bounded, params, NoiseSource.internal(spec.seed, 1))
    if len(words) < spec.topics:
        raise BadInputError(
            f"the DP vocabulary has {len(words)} words, fewer than {spec.topics} topics; "
            "compare at a larger epsilon or with fewer topics"
        )
    corpus = corpus_of(sanitize(bounded, words), len(words))
    train, test = split_documents(corpus, holdout, spec.bounding_seed)
    return train, test, unit


@flow(name="compare", log_prints=False)
def compare_flow(
    dataset: str,
    epsilon: float,
    delta: float,
    topics: int,
    mechanisms: list[str],
    iterations: int = default("iterations"),
    seed: int | None = None,
    workspace: str | None = None,
    m1_fraction: float = default("m1_fraction"),
    holdout: float = 0.1,
    max_docs_per_author: int = default("max_docs_per_author"),
    max_tokens_per_doc: int = default("max_tokens_per_doc"),
    show_progress: bool = False,
) -> dict:
    """Compare ``mechanisms``; returns the table's rows and where the files are."""
    if not mechanisms:
        raise BadInputError("name at least one mechanism to compare (--mechanisms a,b,c)")
    if not 0 < holdout < 1:
        raise BadInputError(f"holdout must be in (0, 1), got {holdout}")
    root = Workspace.resolve(workspace).require()
    catalog = Catalog(root)
    if catalog.dataset(dataset) is None:
        raise BadInputError(f"no dataset named {dataset!r} in {root.root}; ingest it first")
    Ledger(catalog).require_documents(dataset)
    batches = tuple(b["seq"] for b in catalog.batches(dataset))
    spec = RunSpec(
        run_id=lifecycle.new_run_id(dataset).replace(dataset, f"{dataset}-compare", 1),
        workspace=str(root.root),
        dataset=dataset,
        epsilon=epsilon,
        delta=delta,
        topics=topics,
        iterations=iterations,
        seed=seed,
        m1_fraction=m1_fraction,
        bounds=Bounds(max_docs_per_author, max_tokens_per_doc),
        batches=batches,
        bounding_seed=seed if seed is not None else secrets.randbits(64),
    )
    for name in mechanisms:
        lifecycle.validate(replace(spec, mechanism=name, allow_unproven=True))
    recovery.claim(root, spec.run_id)
    catalog.start_run(spec.run_id, dataset, "compare", spec.to_dict(), code_version())
    try:
        train, test, unit = prepare_task(spec, holdout, show_progress)
        with tqdm(total=len(mechanisms), desc="mechanisms", disable=not show_progress) as bar:
            rows, meta = compare(train, test, spec, unit, mechanisms, oov=True, progress=bar.update)
        out = root.run_dir(spec.run_id)
        out.mkdir(parents=True, exist_ok=True)
        table = markdown(rows, meta)
        (out / "comparison.md").write_text(table)
        sha = write_json({"meta": meta, "rows": [asdict(r) for r in rows]}, out / "comparison.json")
        catalog.register_artifact(
            f"run/{spec.run_id}/comparison",
            spec.run_id,
            "compare",
            str((out / "comparison.json").relative_to(root.root)),
            sha,
            "internal",
            len(rows),
        )
        pending = objectstore.settle(root)
    except BaseException as exc:
        catalog.finish_run(spec.run_id, "failed", f"{type(exc).__name__}: {exc}")
        recovery.release_claim(root, spec.run_id)
        raise
    catalog.finish_run(spec.run_id, "succeeded")
    recovery.release_claim(root, spec.run_id)
    return {
        "run_id": spec.run_id,
        "markdown": table,
        "path": str(out / "comparison.md"),
        "store_pending": pending,
        "rows": json.loads(json.dumps([asdict(r) for r in rows])),
    }
