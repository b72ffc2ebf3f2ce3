"""PRE: stable preprocessing (FDPTM paper section 3.5; Algorithm 1 line 2).

Per document: lower-case, remove URLs and @mentions (identifiers, not words), strip every
non-alphabetic character, tokenize (the runs of letters, as nltk's ``RegexpTokenizer``
finds them), drop stop words (nltk's English list), drop tokens shorter than 3 or longer
than 15 characters, lemmatize with WordNet (nltk), and apply the stop-word and length rules
once more to the lemmas so every output token obeys them.

Stable (FDPTM Appendix F, Definition F.1 / Lemma F.1): a document's tokens are a function of
that document's text alone (no corpus statistics), so composing PRE with a DP mechanism
keeps the mechanism's guarantee. The work is vectorised over chunks of documents (Python's
``str.lower`` and ``re`` once per chunk, Arrow compute for the rest) and each distinct token
is lemmatized once per call, which changes nothing but the speed: the output is the same
per-document function.

Output per batch (internal, not DP): ``doc_id``, ``author_id``, ``tokens`` (list of
strings), cached in the catalog by batch content hash and PRE configuration.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Callable

import pyarrow as pa

from fdptm.parallel import cluster_address, stream_map, workers
from fdptm.pre import CHUNK, Lemmas, PreConfig, preprocess_chunk
from fdptm.storage.artifacts import write_parquet
from fdptm.storage.catalog import Catalog
from fdptm.storage.objectstore import intact_copy, read, try_sync
from fdptm.storage.partitions import days
from fdptm.storage.workspace import Workspace


def preprocess_array(
    texts: pa.Array | pa.ChunkedArray,
    cfg: PreConfig = PreConfig(),
    progress: Callable[[int], None] | None = None,
    chunk: int = CHUNK,
) -> pa.ListArray:
    """PRE on each text independently, as Arrow: a list of tokens per text (null texts
    give no tokens). Vectorised: no Python loop per document or token, only per distinct
    token (its lemma, once per process).

    The texts are cut into chunks of ``chunk`` documents. With at least ``_POOL_CHUNKS``
    chunks and more than one usable core (``fdptm.parallel.workers``) they run on a pool
    of that many worker processes (loky's reusable executor: fresh interpreters, so none
    of this process's threads or locks is inherited, and unlike multiprocessing's spawn it
    never re-runs the caller's main script), and the results are concatenated in chunk
    order. On a Dask cluster (``fdptm.parallel.on_cluster``: ``--dask-address``) the
    chunks run on its workers instead (``stream_map``; the texts travel to them). PRE is
    a per-document function, so the output is the same on any number of processes or
    workers."""
    texts = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    chunks = [
        pa.concat_arrays([texts.slice(s, chunk)])  # compact: a slice pickles its buffers
        for s in range(0, len(texts), chunk)
    ]
    processes = min(workers(), len(chunks))
    if cluster_address() is not None:
        results = stream_map(_worker_chunk, chunks, cfg)
    elif processes > 1 and len(chunks) >= _POOL_CHUNKS:
        from loky import get_reusable_executor

        pool = get_reusable_executor(
            processes, timeout=60, initializer=_start_worker, initargs=(cfg,)
        )
        _POOL["executor"] = pool
        results = pool.map(_worker_chunk, chunks, [cfg] * len(chunks))
    else:
        lemmas = Lemmas(cfg)
        results = (preprocess_chunk(c, cfg, lemmas) for c in chunks)
    parts = []
    for part in results:
        parts.append(part)
        if progress:
            progress(len(part))
    if not parts:
        return pa.array([], pa.list_(pa.string()))
    return pa.concat_arrays(parts)


_POOL_CHUNKS = 10
"""Fewer chunks than this run in this process: a pool's start (2-3 s of imports and WordNet
per worker, measured) costs more than it saves below about a million documents."""
_WORKER: dict[PreConfig, Lemmas] = {}
"""The lemma caches of a PRE worker process (a pool's or a Dask worker's), one per
configuration."""


def stop_workers(dask_address: str | None = None) -> None:
    """Stop PRE's worker processes, if any run (their memory is not held through the
    stages that follow; ``stages.preprocess`` calls this after its last batch), and make
    the Dask workers at ``dask_address`` drop their lemma caches, which hold the distinct
    tokens of the texts they preprocessed (a worker outlives the run). A cluster that
    cannot be reached any more holds nothing of this run to drop."""
    pool = _POOL.pop("executor", None)
    if pool is not None:
        pool.shutdown(wait=True)
    if dask_address is not None:
        from distributed import Client

        with (
            contextlib.suppress(OSError, TimeoutError),
            Client(dask_address, timeout="10s", set_as_default=False) as client,
        ):
            client.run(_forget_lemmas)


def _forget_lemmas() -> None:
    _WORKER.clear()


_POOL: dict = {}
"""The loky executor PRE started in this process, until ``stop_workers``."""


def _start_worker(cfg: PreConfig) -> Lemmas:
    """This worker process's lemma cache for ``cfg``, made on first use (once: a Dask
    worker's threads wait for the first to finish)."""
    with _WORKER_LOCK:
        if cfg not in _WORKER:
            _WORKER[cfg] = Lemmas(cfg)
        return _WORKER[cfg]


_WORKER_LOCK = threading.Lock()


def _worker_chunk(texts: pa.Array, cfg: PreConfig) -> pa.ListArray:
    return preprocess_chunk(texts, cfg, _start_worker(cfg))


def preprocess_texts(
    texts: list[str],
    cfg: PreConfig = PreConfig(),
    progress: Callable[[int], None] | None = None,
) -> list[list[str]]:
    """``preprocess_array`` on a list of strings, as lists."""
    return preprocess_array(pa.array(texts, pa.string()), cfg, progress).to_pylist()


_CANARY = (
    "The quick brown foxes were running past the geese; naïve café owners watched.",
    "@someone read https://example.org/x?y=1 — it's the 2nd time, isn't it?",
    "Children's mice: wolves, leaves, analyses and criteria were studied loudly!!",
    "ÉCOLE élèves STRASSE straße ﬁnance ＦＵＬＬＷＩＤＴＨ Ωmega",
)


def canary() -> str:
    """sha256 of PRE's tokens of a few fixed public texts (URLs, mentions, plurals,
    non-ASCII letters): equal on two machines whose PRE agrees (the same nltk, WordNet data
    and pyarrow kernels), which ``fdptm.parallel.check_cluster`` requires of Dask workers
    before PRE runs there."""
    tokens = preprocess_array(pa.array(_CANARY, pa.string()), PreConfig()).to_pylist()
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()


TOKENS_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("author_id", pa.string()),
        ("tokens", pa.list_(pa.string())),
        ("day", pa.int32()),
    ]
)
"""A batch's tokens per document, with the document's UTC day (``storage.partitions``; null
for a batch without times), so a run scoped to days reads only its atoms."""
_TOKENS_VERSION = "v2"


def preprocess_batch(
    workspace: Workspace,
    catalog: Catalog,
    batch: dict,
    run_id: str,
    cfg: PreConfig,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Tokens of one batch, from the cache when this batch and config were done before.

    The cache is derived data: a cached file that is missing, corrupt or no longer matches
    the hash in the catalog is recomputed from the batch, which is the source of truth
    (only a damaged batch is an error). Returns the catalog row of the token artifact
    (path relative to the workspace, hash).
    """
    name = (
        f"tokens/{batch['dataset']}/{batch['seq']}/{batch['sha256'][:16]}/"
        f"{_TOKENS_VERSION}-{cfg.digest()}"
    )
    cached = catalog.artifact(name)
    if cached is not None and intact_copy(workspace, cached):
        if progress:
            progress(batch["n_rows"])
        try_sync(workspace, [name])
        return cached
    rows = read(workspace, batch)
    tokens = preprocess_array(rows.column("text"), cfg, progress)
    table = pa.table(
        {
            "doc_id": rows.column("doc_id"),
            "author_id": rows.column("author_id"),
            "tokens": tokens,
            "day": days(rows.column("ts")),
        },
        schema=TOKENS_SCHEMA,
    )
    rel = (
        f"datasets/{batch['dataset']}/tokens/batch={batch['seq']:06d}/"
        f"pre-{_TOKENS_VERSION}-{cfg.digest()}.parquet"
    )
    sha = write_parquet(table, workspace.root / rel)
    with catalog.transaction() as con:
        catalog.register_artifact(
            name, run_id, "preprocess", rel, sha, "internal", table.num_rows, con=con
        )
    try_sync(workspace, [name])
    return catalog.artifact(name)


def read_tokens(workspace: Workspace, artifacts: list[dict]) -> pa.Table:
    """Concatenate token artifacts (checked against their hashes)."""
    tables = [read(workspace, a) for a in artifacts]
    return pa.concat_tables(tables) if tables else TOKENS_SCHEMA.empty_table()
