"""The release run's stages as plain functions over catalogued Parquet artifacts.

Each stage takes the run's ``RunSpec`` and the catalog rows of its input artifacts and
returns the catalog row of its output, so stages exchange files (with producer run and
sha256), never Python objects. Parameters come from the calibration stored with the run
(``fdptm.tasks.run.calibration_of``). The run's budget is spent before PRE first reads the
ingested rows (``begin_private_reads``). A DP stage marks its spent entry as used right
before its mechanism runs, and refuses an entry already used: a mechanism never runs twice
on one charge, whatever retries or re-runs happen around it.

Every stage first looks for its own output of an earlier attempt of the same run (a run
resumed with ``fdptm release --resume``): a stored output whose hash matches is reused, so
a DP stage whose output exists never runs twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fdptm.errors import BadInputError, FdptmError
from fdptm.faults import checkpoint
from fdptm.mechanisms.lda import cgs_topic_counts, train_cgs
from fdptm.parallel import on_cluster, stream_map
from fdptm.privacy.noise import NoiseSource
from fdptm.storage.artifacts import (
    file_sha256,
    verify,
    write_parquet,
    write_parquet_batches,
)
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.storage.objectstore import intact_copy, local, read, try_sync
from fdptm.storage.objectstore import of as store_of
from fdptm.storage.partitions import buckets_of
from fdptm.storage.workspace import Workspace
from fdptm.tasks import public_vocabulary as public_vocabulary_source
from fdptm.tasks.bounding import bound_contributions
from fdptm.tasks.preprocess import preprocess_batch, read_tokens, stop_workers
from fdptm.tasks.public_vocabulary import PublicVocabulary
from fdptm.tasks.run import begin_private_reads, calibration_of
from fdptm.tasks.sanitize import SANITIZED_SCHEMA, corpus_of, drop_oov, sanitize
from fdptm.tasks.spec import STAGE_STREAMS, RunSpec
from fdptm.tasks.vocabulary import EncodedTokens, encode_tokens, vocabulary_table

RELEASED_KEY = "fdptm.released"
_ENCODE_BATCH = 1 << 18

Progress = Callable[[int], None] | None


def _env(spec: RunSpec) -> tuple[Workspace, Catalog]:
    workspace = Workspace.resolve(spec.workspace)
    return workspace, Catalog(workspace)


def _save(spec: RunSpec, stage: str, name: str, table: pa.Table, visibility: str) -> dict:
    workspace, _ = _env(spec)
    rel = f"internal/runs/{spec.run_id}/{name}.parquet"
    sha = write_parquet(table, workspace.root / rel)
    return _register(spec, stage, name, sha, visibility, table.num_rows)


def _register(spec: RunSpec, stage: str, name: str, sha: str, visibility: str, rows: int) -> dict:
    """Record the run's artifact ``name`` (written to its path), upload it when the
    workspace has an artifact store, and return its catalog row. The record, the row and
    the store setting are one catalog block; an upload is never made inside one."""
    workspace, catalog = _env(spec)
    key = f"run/{spec.run_id}/{name}"
    rel = f"internal/runs/{spec.run_id}/{name}.parquet"
    with catalog.connect():
        catalog.register_artifact(key, spec.run_id, stage, rel, sha, visibility, rows)
        row, has_store = catalog.artifact(key), store_of(workspace) is not None
    if not has_store:
        return row
    try_sync(workspace, [key])
    return catalog.artifact(key)


def load(spec: RunSpec, artifact: dict, columns: list[str] | None = None) -> pa.Table:
    """An artifact of the run (only ``columns`` when given), its hash checked."""
    workspace, _ = _env(spec)
    return read(workspace, artifact, columns)


def encoded_tokens(spec: RunSpec, artifact: dict) -> EncodedTokens:
    """A (doc_id, author_id, tokens) artifact as integer codes, its hash checked first: the
    tokens are read a few hundred thousand documents at a time (``encode_tokens``), the
    doc ids not at all."""
    workspace, _ = _env(spec)
    path = local(workspace, artifact["path"], artifact["sha256"])
    verify(path, artifact["sha256"])
    file = pq.ParquetFile(path)
    authors = file.read(columns=["author_id"]).column("author_id")
    return encode_tokens(file.iter_batches(batch_size=_ENCODE_BATCH, columns=["tokens"]), authors)


def stored(spec: RunSpec, name: str, *, dp_output: bool = False) -> dict | None:
    """This run's artifact ``name`` from an earlier attempt, if its file is intact (fetched
    from the artifact store when the workspace has no copy, and uploaded there when an
    earlier upload failed).

    A damaged internal artifact is recomputed (None). A damaged DP output is an error: the
    mechanism must never run twice on one charge.
    """
    workspace, catalog = _env(spec)
    key = f"run/{spec.run_id}/{name}"
    with catalog.connect():
        row, has_store = catalog.artifact(key), store_of(workspace) is not None
    if row is None:
        return None
    if intact_copy(workspace, row):
        if has_store:
            try_sync(workspace, [key])
        return row
    path = workspace.root / row["path"]
    if dp_output:
        raise FdptmError(
            f"{path} (the DP output of run {spec.run_id}) is missing or damaged; its budget "
            "is spent and the mechanism cannot run again on it. Restore the file from a "
            "backup, or start a new release."
        )
    return None


def start_mechanism(spec: RunSpec, stage: str) -> None:
    """A DP stage runs only under a spent entry of its run that no earlier attempt used."""
    _, catalog = _env(spec)
    Ledger(catalog).start_mechanism(spec.run_id, stage)


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


def read_batches(spec: RunSpec) -> list[dict]:
    """The run's batches that can hold documents of its days: all of them without days;
    with days, those whose days (recorded at ingest) meet [since, until). Skipping the
    others reads exactly the same documents, faster: the run's scope, its ledger entries
    and its manifest still name every batch (a choice of batches by their content would
    itself depend on the data)."""
    bounds = spec.scope.day_range() if spec.since is not None else None
    if bounds is None:
        return run_batches(spec)
    return [
        b
        for b in run_batches(spec)
        if b["first_day"] is None or (b["first_day"] < bounds[1] and b["last_day"] >= bounds[0])
    ]


def operator_counts(spec: RunSpec) -> dict[str, int]:
    """Documents and authors the run read and what contribution bounding dropped.

    For the operator only (internal, NOT DP): printed by the CLI, never released.
    """
    read = documents(spec)
    bounded = stored(spec, "bounded_tokens")
    if bounded is None:
        return {"documents": read}
    authors = load(spec, bounded).column("author_id")
    return {
        "documents": read,
        "kept": bounded["n_rows"],
        "dropped": read - bounded["n_rows"],
        "authors": len(authors.unique()),
    }


def documents(spec: RunSpec) -> int:
    """How many documents the run preprocesses (for progress bars; internal only)."""
    return sum(b["n_rows"] for b in read_batches(spec))


def preprocess(
    spec: RunSpec,
    progress: Progress = None,
    *,
    spend: bool = True,
    dask_address: str | None = None,
) -> list[dict]:
    """PRE over the run's batches (cached per batch and PRE configuration); with
    ``dask_address`` on that Dask cluster's workers (``preprocess_array``).

    The first read of private data: the run's reservation is spent right before it, after a
    check that the batch files are intact (their hashes, which do not depend on what the
    rows say once ingest accepted them). Every batch of the run's scope is checked, not only
    those ``read_batches`` opens: which ones a day-scoped run opens depends on their day
    spans, a fact about the documents, so a damaged batch outside the days must stop the
    run unspent as well (issue 29, review item 3).
    """
    workspace, catalog = _env(spec)
    for b in run_batches(spec):  # integrity (not content): a damaged batch stops the run unspent
        path = local(workspace, b["path"], b["sha256"])
        if not path.exists() or file_sha256(path) != b["sha256"]:
            raise BadInputError(
                f"batch {b['seq']} of dataset {spec.dataset!r} ({path}) does not match the "
                "hash recorded in the catalog: it was changed or corrupted after ingest. "
                "Restore it from a backup; the run stopped before reading it."
            )
    if spec.vocabulary is not None:  # public data, stored with the run before the spend
        public_vocabulary(spec)
    if spend:  # an internal, uncharged run (``fdptm compare``) has nothing to spend
        begin_private_reads(spec)
    try:
        with on_cluster(dask_address):
            return [
                preprocess_batch(workspace, catalog, b, spec.run_id, spec.pre, progress)
                for b in read_batches(spec)
            ]
    finally:
        stop_workers(dask_address)


def scoped_tokens(spec: RunSpec, token_artifacts: list[dict]) -> pa.Table:
    """The run's documents: its batches' tokens, only the days of its scope when it has
    days and only the authors of its buckets when it has buckets (``storage.partitions``),
    without the day column."""
    workspace, catalog = _env(spec)
    tokens = read_tokens(workspace, token_artifacts)
    inside = spec.scope.in_days(tokens.column("day")) if spec.since is not None else None
    if inside is not None:
        tokens = tokens.filter(inside)
    if spec.buckets is not None:
        n = catalog.dataset(spec.dataset)["author_buckets"]
        bucket = buckets_of(workspace.bucket_key(), tokens.column("author_id"), n)
        tokens = tokens.filter(pc.is_in(bucket, value_set=pa.array(spec.buckets, pa.int32())))
    return tokens.drop_columns(["day"])


def bound(spec: RunSpec, token_artifacts: list[dict], *, dask_address: str | None = None) -> dict:
    """Contribution bounding of the run's documents (internal artifact), inside its scope:
    a document outside it never affects what the run keeps (``storage.ledger``, "Parallel
    composition"). With ``dask_address`` the authors over the cap are ranked on that Dask
    cluster's workers (``bound_contributions``)."""
    if done := stored(spec, "bounded_tokens"):
        return done
    tokens = scoped_tokens(spec, token_artifacts)
    with on_cluster(dask_address):
        bounded = bound_contributions(tokens, spec.bounds, spec.bounding_seed)
    return _save(spec, "bounding", "bounded_tokens", bounded, "internal")


def vocabulary(spec: RunSpec, bounded: dict, *, dask_address: str | None = None) -> dict:
    """The release's vocabulary by ``spec.vocabulary_selection``, a DP output or public.
    With ``dask_address`` DP set union's per-author work runs on that Dask cluster's
    workers (``fdptm.mechanisms.set_union.select_units``).

    ``set-union``: DP set union of the private words. With a public vocabulary (read first:
    public data): ``none``, its most frequent words, no private data read and no charge;
    ``extend``, those words plus the private words beyond them that DP set union selects;
    ``bayesian-prior``, the most probable words of the Bayesian public prior's DP
    distribution (kept as ``word_prior``, a DP output).
    """
    if done := stored(spec, "vocabulary", dp_output=True):
        return done
    public = None if spec.vocabulary is None else public_vocabulary(spec)
    if spec.vocabulary_selection == "none":
        words = public.most_frequent(spec.vocabulary_size)
        return _save(spec, "vocabulary", "vocabulary", vocabulary_table(words), "public")
    params = calibration_of(spec).m1
    noise = NoiseSource.create(spec.seed, STAGE_STREAMS["vocabulary"], spec.sampler)
    start_mechanism(spec, "vocabulary")
    checkpoint("during-vocabulary")
    with on_cluster(dask_address):
        chosen = spec.vocabulary_mechanism.select(
            encoded_tokens(spec, bounded), public, params, spec.vocabulary_size, noise
        )
    if chosen.prior is not None:
        prior = pa.table({"word": chosen.prior.words, "probability": chosen.prior.prior})
        _save(spec, "vocabulary", "word_prior", prior, "internal")
    words = chosen.words
    _, catalog = _env(spec)
    if len(words) < spec.topics:  # saved first: the vocabulary never appears without it
        filler = public_filler(spec, public, words)
        _save(spec, "vocabulary", "vocabulary_filler", filler, "public")
        words = sorted([*words, *filler.column("word").to_pylist()])
    else:  # an earlier attempt that died before saving its vocabulary may have left one
        catalog.execute(
            "DELETE FROM artifacts WHERE name = ?", [f"run/{spec.run_id}/vocabulary_filler"]
        )
    return _save(spec, "vocabulary", "vocabulary", vocabulary_table(words), "public")


FILLER_SOURCE = "wordfreq:en"
"""Where the words come from that make up a DP vocabulary smaller than k (after the run's
own public vocabulary, if it has one)."""


def public_filler(spec: RunSpec, public: PublicVocabulary | None, words: list[str]) -> pa.Table:
    """The public words that bring a DP vocabulary of fewer than k words up to k (issue 28:
    no budget lost to a predictable failure), with their source.

    M1 has spent when its vocabulary comes out smaller than the k topics asked for; failing
    the run there would waste that spend, and M2 cannot fit k topics on fewer than k words.
    So the run continues on the DP words plus the k - |DP| most frequent public words not
    among them: from the run's public vocabulary (``--vocabulary``) first, then from
    ``FILLER_SOURCE``. Which words and how many are functions of M1's DP output and of public
    lists only (post-processing). M2's noise is calibrated from public parameters and, where
    a mechanism reads it (topicdp's paper and MVG calibrations, tuning's score bound), from
    this public V, so the guarantee is unchanged; the manifest lists the filler words apart
    from the DP ones. k is at most ``fdptm.request.MAX_TOPICS`` (1,000), fewer than the
    English list holds after PRE, so the lists always suffice.
    """
    workspace, _ = _env(spec)
    taken = set(words)
    needed = spec.topics - len(words)
    rows: list[tuple[str, str]] = []
    for word, source in _public_words(public, workspace, spec.pre):
        if len(rows) == needed:
            break
        if word not in taken:
            taken.add(word)
            rows.append((word, source))
    if len(rows) < needed:
        raise FdptmError(
            f"the public word lists gave {len(rows)} of the {needed} words needed to bring the "
            f"DP vocabulary up to {spec.topics} topics"
        )
    return pa.table({"word": [w for w, _ in rows], "source": [s for _, s in rows]})


def _public_words(
    public: PublicVocabulary | None, workspace: Workspace, pre
) -> Iterator[tuple[str, str]]:
    """(word, source) from the run's public vocabulary, then from ``FILLER_SOURCE`` (loaded
    only if reached), each most frequent first."""
    if public is not None:
        yield from ((word, public.source) for word in public.ranked())
    fallback = public_vocabulary_source.load(FILLER_SOURCE, workspace, pre)
    yield from ((word, FILLER_SOURCE) for word in fallback.ranked())


def public_vocabulary(spec: RunSpec) -> PublicVocabulary:
    """The run's public vocabulary, resolved once and stored with the run (a resumed run
    uses the same words even if the public dataset has grown since)."""
    if done := stored(spec, "public_vocabulary"):
        table = load(spec, done)
        return PublicVocabulary(
            spec.vocabulary,
            table.column("word").to_pylist(),
            table.column("count").to_numpy(),
        )
    workspace, _ = _env(spec)
    public = public_vocabulary_source.load(spec.vocabulary, workspace, spec.pre)
    _save(
        spec,
        "vocabulary",
        "public_vocabulary",
        pa.table({"word": public.words, "count": public.counts}),
        "internal",
    )
    return public


def sanitized(
    spec: RunSpec, bounded: dict, vocab: dict, *, dask_address: str | None = None
) -> dict:
    """SAN: words outside the DP vocabulary become the OOV id (internal artifact); with
    ``dask_address`` each batch of bounded tokens is sanitized on that Dask cluster's
    workers (``fdptm.parallel.stream_map``), written here in order.

    """
    words = load(spec, vocab).column("word").to_pylist()
    if done := stored(spec, "sanitized_tokens"):
        return done
    workspace, _ = _env(spec)
    path = local(workspace, bounded["path"], bounded["sha256"])
    verify(path, bounded["sha256"])
    batches = pq.ParquetFile(path).iter_batches(batch_size=_ENCODE_BATCH)
    rel = f"internal/runs/{spec.run_id}/sanitized_tokens.parquet"
    value_set = pa.array(words, pa.string())
    with on_cluster(dask_address):
        sha, rows = write_parquet_batches(
            stream_map(sanitize, batches, value_set), SANITIZED_SCHEMA, workspace.root / rel
        )
    return _register(spec, "sanitize", "sanitized_tokens", sha, "internal", rows)


def train(
    spec: RunSpec,
    san: dict,
    vocab: dict,
    progress: Progress = None,
    *,
    dask_address: str | None = None,
) -> dict:
    """M2: the run's mechanism at its calibrated budget; the matrix is a DP output.

    With ``dask_address`` the mechanism's ``fdptm.parallel.Placed`` work runs on that Dask
    cluster (``dp-vi``: each worker holds some units' word counts and returns their clipped
    statistic; the noise is added here); the result is the same as on local threads."""
    if done := stored(spec, "topic_word", dp_output=True):
        return done
    n_words = load(spec, vocab).num_rows
    params = calibration_of(spec).m2
    noise = NoiseSource.create(spec.seed, STAGE_STREAMS["train"], spec.sampler)
    try:
        spec.m2.check_public(params, n_words + 1)  # V (public) and SAN's OOV column
    except BadInputError as exc:  # decided by the DP vocabulary's size: post-processing
        _, catalog = _env(spec)
        Ledger(catalog).refund_unused(
            spec.run_id, "train", f"refunded: M2 refused the DP vocabulary's size: {exc}"
        )
        raise
    extra = {} if spec.prior is None else {"public_topics": prior_topics(spec, load(spec, vocab))}
    released: dict = {}
    if spec.m2.releases_parameters:
        extra["released"] = released
    start_mechanism(spec, "train")
    corpus = corpus_of(load(spec, san, ["author_id", "word_ids"]), n_words)
    with on_cluster(dask_address):
        phi = spec.m2.train(corpus, spec.topics, params, noise, progress=progress, **extra)
    table = topic_word_table(drop_oov(phi), released)
    return _save(spec, "train", "topic_word", table, "public")


def prior_topics(spec: RunSpec, vocab: pa.Table) -> np.ndarray:
    """k x (V + 1) topic-word counts of non-private CGS on the public prior dataset over the
    release's vocabulary and SAN's OOV column (public data and a DP vocabulary only)."""
    workspace, _ = _env(spec)
    tokens = public_vocabulary_source.public_tokens(spec.prior, workspace, spec.pre)
    noise = NoiseSource.internal(spec.seed, STAGE_STREAMS["prior"])
    return prior_counts(spec, tokens, vocab.column("word").to_pylist(), noise)


def prior_counts(
    spec: RunSpec, tokens: pa.Table, words: list[str], noise: NoiseSource
) -> np.ndarray:
    """``prior_topics`` on already loaded public ``tokens`` over ``words`` (and OOV)."""
    corpus = corpus_of(sanitize(tokens, words), len(words))
    return cgs_topic_counts(corpus, spec.topics, spec.prior_iterations, noise)


def progress_total(spec: RunSpec) -> int:
    """How many progress steps M2 will report: its ``progress_total`` or one per iteration."""
    return getattr(calibration_of(spec).m2, "progress_total", spec.iterations)


def baseline(spec: RunSpec, san: dict, vocab: dict, progress: Progress = None) -> dict:
    """Non-private CGS on the same sanitized corpus: an internal baseline, NOT DP."""
    if done := stored(spec, "baseline_topic_word"):
        return done
    n_words = load(spec, vocab).num_rows
    corpus = corpus_of(load(spec, san, ["author_id", "word_ids"]), n_words)
    noise = NoiseSource.create(spec.seed, STAGE_STREAMS["baseline"], spec.sampler)
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


def topic_word_table(phi: np.ndarray, released: dict | None = None) -> pa.Table:
    """k x V as Parquet: one row per topic, ``probabilities`` aligned with the vocabulary.

    ``released``: DP parameters the mechanism released with the matrix (dp-vi's private
    clipping norm), kept as JSON in the schema metadata under RELEASED_KEY.
    """
    table = pa.table(
        {
            "topic": pa.array(np.arange(phi.shape[0]), pa.int32()),
            "probabilities": pa.FixedSizeListArray.from_arrays(
                pa.array(phi.ravel(), pa.float64()), phi.shape[1]
            ),
        }
    )
    if not released:
        return table
    return table.replace_schema_metadata({RELEASED_KEY: json.dumps(released, sort_keys=True)})


def released_parameters(table: pa.Table) -> dict:
    """The DP parameters ``topic_word_table`` stored with the matrix ({} when none)."""
    raw = (table.schema.metadata or {}).get(RELEASED_KEY.encode())
    return {} if raw is None else json.loads(raw)
