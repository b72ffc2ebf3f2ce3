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
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fdptm.parallel import cluster_address, stream_map, workers
from fdptm.storage.artifacts import write_parquet
from fdptm.storage.catalog import Catalog
from fdptm.storage.objectstore import intact_copy, read, try_sync
from fdptm.storage.partitions import days
from fdptm.storage.workspace import Workspace

_URL = re.compile(r"(?:https?://|www\.)\S+")
_MENTION = re.compile(r"@\w+")
_NON_ALPHA = r"[^a-z]+"
_CHUNK = 100_000
"""Documents per PRE chunk: one joined string of this many documents is lower-cased and
cleaned at a time, so memory per chunk stays in the tens of MB."""


@dataclass(frozen=True)
class PreConfig:
    """PRE's rules; its digest keys the token cache."""

    min_len: int = 3
    max_len: int = 15
    strip_urls: bool = True
    strip_mentions: bool = True

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def _joined(texts: pa.Array) -> str:
    """The texts as one string, joined by newlines, each newline inside a text made a space
    (null texts are empty)."""
    if len(texts) == 0:
        return ""
    flat = pc.replace_substring(pc.fill_null(texts, ""), "\n", " ").cast(pa.large_string())
    lists = pa.LargeListArray.from_arrays(pa.array([0, len(flat)], pa.int64()), flat)
    return pc.binary_join(lists, pa.scalar("\n", pa.large_string()))[0].as_py()


def _raw_token_lists(texts: pa.Array, cfg: PreConfig) -> pa.ListArray:
    """Per text: lower-case, blank URLs and @mentions, then the runs of letters a-z.

    Python's ``str.lower`` and ``re`` run once over the chunk's texts joined by newlines,
    not once per document. Joining changes nothing: a newline inside a text was made a
    space, which every pattern treats alike (whitespace, not a word character, not a
    letter), so no match crosses from one document into the next, and ``str.lower`` maps
    character by character (its one context rule, the Greek final sigma, yields a non-ASCII
    letter either way, which the letter filter removes). The runs of a-z are what nltk's
    ``RegexpTokenizer("[a-z]+")`` finds; splitting at every other character (Arrow, RE2) is
    the same tokenisation, checked against nltk in tests/test_preprocess.py.
    """
    text = _joined(texts).lower()
    if cfg.strip_urls:
        text = _URL.sub(" ", text)
    if cfg.strip_mentions:
        text = _MENTION.sub(" ", text)
    docs = pc.split_pattern(pa.array([text], pa.large_string()), "\n")
    docs = pc.list_flatten(docs).slice(0, len(texts))
    letters = pc.replace_substring_regex(docs, _NON_ALPHA, " ")
    return pc.utf8_split_whitespace(letters)


def _keep(tokens: pa.Array, cfg: PreConfig, stops: pa.Array) -> pa.Array:
    """Tokens within the length rules and not stop words (a boolean mask)."""
    lengths = pc.utf8_length(tokens)
    return pc.and_(
        pc.and_(pc.greater_equal(lengths, cfg.min_len), pc.less_equal(lengths, cfg.max_len)),
        pc.invert(pc.is_in(tokens, value_set=stops)),
    )


def _filtered_lists(lists: pa.ListArray, mask: pa.Array, n_docs: int) -> pa.ListArray:
    """``lists`` keeping the flattened values where ``mask`` is true."""
    parents = pc.list_parent_indices(lists).filter(mask).to_numpy()
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.bincount(parents, minlength=n_docs), out=offsets[1:])
    values = pc.list_flatten(lists).filter(mask)
    return pa.LargeListArray.from_arrays(pa.array(offsets), values.cast(pa.string()))


class _Lemmas:
    """WordNet lemmas of distinct tokens, each looked up once; None where the lemma breaks
    the stop-word or length rules. nltk (``fdptm.text``, about 1 s of imports, scipy.stats
    among them) is imported here, when PRE runs, not by a release whose PRE is cached."""

    def __init__(self, cfg: PreConfig) -> None:
        from fdptm.text import lemmatizer, stop_words

        self.cfg, self.stops, self.known = cfg, stop_words(), {}
        self.lemmatize = lemmatizer().lemmatize

    def of(self, words: list[str]) -> list[str | None]:
        out = []
        for w in words:
            if w not in self.known:
                lemma = self.lemmatize(w)
                ok = self.cfg.min_len <= len(lemma) <= self.cfg.max_len and lemma not in self.stops
                self.known[w] = lemma if ok else None
            out.append(self.known[w])
        return out


def _preprocess_chunk(texts: pa.Array, cfg: PreConfig, lemmas: _Lemmas) -> pa.ListArray:
    stops = pa.array(sorted(lemmas.stops), pa.string())
    raw = _raw_token_lists(texts, cfg)
    raw = _filtered_lists(raw, _keep(pc.list_flatten(raw), cfg, stops), len(texts))
    encoded = pc.dictionary_encode(pc.list_flatten(raw))
    lemma_of = pa.array(lemmas.of(encoded.dictionary.to_pylist()), pa.string())
    lemma = lemma_of.take(encoded.indices)
    return _filtered_lists(
        pa.LargeListArray.from_arrays(raw.offsets, lemma), pc.is_valid(lemma), len(texts)
    ).cast(pa.list_(pa.string()))


def preprocess_array(
    texts: pa.Array | pa.ChunkedArray,
    cfg: PreConfig = PreConfig(),
    progress: Callable[[int], None] | None = None,
    chunk: int = _CHUNK,
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
        lemmas = _Lemmas(cfg)
        results = (_preprocess_chunk(c, cfg, lemmas) for c in chunks)
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
_WORKER: dict[PreConfig, _Lemmas] = {}
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


def _start_worker(cfg: PreConfig) -> _Lemmas:
    """This worker process's lemma cache for ``cfg``, made on first use (once: a Dask
    worker's threads wait for the first to finish)."""
    with _WORKER_LOCK:
        if cfg not in _WORKER:
            _WORKER[cfg] = _Lemmas(cfg)
        return _WORKER[cfg]


_WORKER_LOCK = threading.Lock()


def _worker_chunk(texts: pa.Array, cfg: PreConfig) -> pa.ListArray:
    return _preprocess_chunk(texts, cfg, _start_worker(cfg))


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
