"""The release run's stages as plain functions over catalogued Parquet artifacts.

Each stage takes the run's ``RunSpec`` and the catalog rows of its input artifacts and
returns the catalog row of its output, so stages exchange files (with producer run and
sha256), never Python objects. The two DP stages charge the ledger with ``charged``:
the stage's reservation (made for the whole run before any stage ran) is spent as soon as
the stage touches private data, and refunded if it fails before that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from fdptm.errors import BadInputError
from fdptm.mechanisms.lda import train_cgs
from fdptm.privacy.noise import NoiseSource
from fdptm.storage.artifacts import read_parquet, write_parquet
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.storage.workspace import Workspace
from fdptm.tasks.bounding import bound_contributions
from fdptm.tasks.preprocess import preprocess_batch, read_tokens
from fdptm.tasks.sanitize import corpus_of, drop_oov, sanitize
from fdptm.tasks.spec import STAGE_STREAMS, RunSpec
from fdptm.tasks.vocabulary import select_vocabulary, vocabulary_table

Progress = Callable[[int], None] | None


def _env(spec: RunSpec) -> tuple[Workspace, Catalog]:
    workspace = Workspace.resolve(spec.workspace)
    return workspace, Catalog(workspace)


def _save(spec: RunSpec, stage: str, name: str, table: pa.Table, visibility: str) -> dict:
    workspace, catalog = _env(spec)
    rel = f"internal/runs/{spec.run_id}/{name}.parquet"
    sha = write_parquet(table, workspace.root / rel)
    key = f"run/{spec.run_id}/{name}"
    catalog.register_artifact(key, spec.run_id, stage, rel, sha, visibility, table.num_rows)
    return catalog.artifact(key)


def load(spec: RunSpec, artifact: dict) -> pa.Table:
    workspace, _ = _env(spec)
    return read_parquet(workspace.root / artifact["path"], artifact["sha256"])


@contextmanager
def charged(spec: RunSpec, stage: str) -> Iterator[Callable[[], None]]:
    """Charge the stage's reservation: spent from the first read of private data on.

    The block calls the yielded ``touch()`` right before it first reads private data;
    ``touch`` records the spend in the ledger *before* returning, so no read can happen
    while the entry is still refundable. A block that fails before ``touch`` refunds.
    """
    _, catalog = _env(spec)
    ledger = Ledger(catalog)
    rows = catalog.query(
        "SELECT entry_id, state FROM ledger WHERE run_id = ? AND stage = ?", [spec.run_id, stage]
    )
    if len(rows) != 1 or rows[0]["state"] != "reserved":
        raise RuntimeError(f"stage {stage} of run {spec.run_id} has no open reservation")
    entry = rows[0]["entry_id"]
    touched = False

    def touch() -> None:
        nonlocal touched
        ledger.spend(entry, "mechanism read private data")
        touched = True

    try:
        yield touch
    except BaseException as exc:
        if touched:
            ledger.spend(entry, f"stage failed after reading private data: {type(exc).__name__}")
        else:
            ledger.refund(entry, f"stage failed before reading private data: {exc}")
        raise
    if not touched:
        ledger.refund(entry, "stage finished without reading private data")
        raise RuntimeError(f"stage {stage} finished without declaring that it read data")


def run_batches(spec: RunSpec) -> list[dict]:
    """The catalog rows of the batches this run was planned on (fixed at ``prepare``).

    Batches ingested while the run is going are not part of it.
    """
    _, catalog = _env(spec)
    rows = {b["seq"]: b for b in catalog.batches(spec.dataset)}
    missing = [seq for seq in spec.batches if seq not in rows]
    if missing or not spec.batches:
        raise BadInputError(f"batches {missing} of dataset {spec.dataset!r} are gone")
    return [rows[seq] for seq in spec.batches]


def documents(spec: RunSpec) -> int:
    """How many documents the run covers (for progress bars; internal only)."""
    return sum(b["n_rows"] for b in run_batches(spec))


def preprocess(spec: RunSpec, progress: Progress = None) -> list[dict]:
    """PRE over the run's batches (cached per batch and PRE configuration)."""
    workspace, catalog = _env(spec)
    batches = run_batches(spec)
    return [
        preprocess_batch(workspace, catalog, b, spec.run_id, spec.pre, progress) for b in batches
    ]


def bound(spec: RunSpec, token_artifacts: list[dict]) -> dict:
    """Contribution bounding of all the dataset's tokens (internal artifact)."""
    workspace, _ = _env(spec)
    tokens = read_tokens(workspace, token_artifacts)
    bounded = bound_contributions(tokens, spec.bounds, spec.bounding_seed)
    return _save(spec, "bounding", "bounded_tokens", bounded, "internal")


def vocabulary(spec: RunSpec, bounded: dict, epsilon: float, delta: float) -> dict:
    """M1: DP set union at (epsilon, delta); the vocabulary is a DP output."""
    params = spec.m1_params(epsilon, delta)
    noise = NoiseSource.create(spec.seed, STAGE_STREAMS["vocabulary"])
    with charged(spec, "vocabulary") as touch:
        touch()
        words = select_vocabulary(load(spec, bounded), params, noise)
    return _save(spec, "vocabulary", "vocabulary", vocabulary_table(words), "public")


def sanitized(spec: RunSpec, bounded: dict, vocab: dict) -> dict:
    """SAN: words outside the DP vocabulary become the OOV id (internal artifact)."""
    words = load(spec, vocab).column("word").to_pylist()
    if not words:
        raise BadInputError(
            "DP vocabulary selection released no word, so there is nothing to train on; "
            "M1's budget is spent. Ingest more data or give M1 more epsilon (--m1-fraction)."
        )
    if len(words) < spec.topics:
        raise BadInputError(
            f"the DP vocabulary has {len(words)} words, fewer than the {spec.topics} topics "
            "asked for; M1's budget is spent and M2 did not run. Ask for fewer topics."
        )
    table = sanitize(load(spec, bounded), words)
    return _save(spec, "sanitize", "sanitized_tokens", table, "internal")


def train(
    spec: RunSpec,
    san: dict,
    vocab: dict,
    epsilon: float,
    delta: float,
    progress: Progress = None,
) -> dict:
    """M2: the run's mechanism at its native (epsilon, delta); the matrix is a DP output."""
    _, catalog = _env(spec)
    n_words = load(spec, vocab).num_rows
    params = spec.m2_params(epsilon, delta, Ledger(catalog).default_unit(spec.dataset))
    noise = NoiseSource.create(spec.seed, STAGE_STREAMS["train"])
    with charged(spec, "train") as touch:
        spec.m2.check_public(params, n_words + 1)  # V (public) and SAN's OOV column
        touch()
        corpus = corpus_of(load(spec, san), n_words)
        phi = spec.m2.train(corpus, spec.topics, params, noise, progress=progress)
    return _save(spec, "train", "topic_word", topic_word_table(drop_oov(phi)), "public")


def progress_total(spec: RunSpec, epsilon: float, delta: float) -> int:
    """How many progress steps M2 will report: its ``progress_total`` or one per iteration."""
    _, catalog = _env(spec)
    params = spec.m2_params(epsilon, delta, Ledger(catalog).default_unit(spec.dataset))
    return getattr(params, "progress_total", spec.iterations)


def baseline(spec: RunSpec, san: dict, vocab: dict, progress: Progress = None) -> dict:
    """Non-private CGS on the same sanitized corpus: an internal baseline, NOT DP."""
    n_words = load(spec, vocab).num_rows
    corpus = corpus_of(load(spec, san), n_words)
    noise = NoiseSource.create(spec.seed, STAGE_STREAMS["baseline"])
    phi = train_cgs(
        corpus,
        spec.topics,
        spec.iterations,
        noise,
        alpha=spec.lda_alpha,
        beta=spec.lda_beta,
        progress=progress,
    )
    table = topic_word_table(drop_oov(phi))
    return _save(spec, "baseline", "baseline_topic_word", table, "internal")


def topic_word_table(phi: np.ndarray) -> pa.Table:
    """k x V as Parquet: one row per topic, ``probabilities`` aligned with the vocabulary."""
    return pa.table(
        {
            "topic": pa.array(np.arange(phi.shape[0]), pa.int32()),
            "probabilities": pa.FixedSizeListArray.from_arrays(
                pa.array(phi.ravel(), pa.float64()), phi.shape[1]
            ),
        }
    )
