"""PRE: stable preprocessing (FDPTM paper section 3.5; Algorithm 1 line 2).

Per document: lower-case, remove URLs and @mentions (identifiers, not words), strip every
non-alphabetic character, tokenize (nltk ``RegexpTokenizer``), drop stop words (nltk's
English list), drop tokens shorter than 3 or longer than 15 characters, lemmatize with
WordNet (nltk), and apply the stop-word and length rules once more to the lemmas so every
output token obeys them.

Stable (FDPTM Appendix F, Definition F.1 / Lemma F.1): a document's tokens are a function of
that document's text alone (no corpus statistics), so composing PRE with a DP mechanism
keeps the mechanism's guarantee. Each distinct token is lemmatized once per call, which
changes nothing but the speed.

Output per batch (internal, not DP): ``doc_id``, ``author_id``, ``tokens`` (list of
strings), cached in the catalog by batch content hash and PRE configuration.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

import pyarrow as pa
from nltk.tokenize import RegexpTokenizer

from fdptm.storage.artifacts import intact, read_parquet, write_parquet
from fdptm.storage.catalog import Catalog
from fdptm.storage.partitions import days
from fdptm.storage.workspace import Workspace
from fdptm.text import lemmatizer, stop_words

_URL = re.compile(r"(?:https?://|www\.)\S+")
_MENTION = re.compile(r"@\w+")
_NON_ALPHA = re.compile(r"[^a-z]+")
_TOKENIZER = RegexpTokenizer(r"[a-z]+")
_CHUNK = 2000


@dataclass(frozen=True)
class PreConfig:
    """PRE's rules; its digest keys the token cache."""

    min_len: int = 3
    max_len: int = 15
    strip_urls: bool = True
    strip_mentions: bool = True

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def _raw_tokens(text: str, cfg: PreConfig, stops: frozenset[str]) -> list[str]:
    text = text.lower()
    if cfg.strip_urls:
        text = _URL.sub(" ", text)
    if cfg.strip_mentions:
        text = _MENTION.sub(" ", text)
    text = _NON_ALPHA.sub(" ", text)
    return [
        t
        for t in _TOKENIZER.tokenize(text)
        if cfg.min_len <= len(t) <= cfg.max_len and t not in stops
    ]


def preprocess_texts(
    texts: list[str],
    cfg: PreConfig = PreConfig(),
    progress: Callable[[int], None] | None = None,
) -> list[list[str]]:
    """PRE on each text independently; distinct tokens are lemmatized once."""
    stops = stop_words()
    raw = []
    for start in range(0, len(texts), _CHUNK):
        raw.extend(_raw_tokens(t, cfg, stops) for t in texts[start : start + _CHUNK])
        if progress:
            progress(len(texts[start : start + _CHUNK]))
    lemmatize = lemmatizer().lemmatize
    lemmas: dict[str, str | None] = {}
    for tokens in raw:
        for t in tokens:
            if t not in lemmas:
                lemma = lemmatize(t)
                ok = cfg.min_len <= len(lemma) <= cfg.max_len and lemma not in stops
                lemmas[t] = lemma if ok else None
    return [[lem for t in tokens if (lem := lemmas[t]) is not None] for tokens in raw]


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
    if cached is not None and intact(workspace.root / cached["path"], cached["sha256"]):
        if progress:
            progress(batch["n_rows"])
        return cached
    rows = read_parquet(workspace.root / batch["path"], batch["sha256"])
    tokens = preprocess_texts(rows.column("text").to_pylist(), cfg, progress)
    table = pa.table(
        {
            "doc_id": rows.column("doc_id"),
            "author_id": rows.column("author_id"),
            "tokens": pa.array(tokens, pa.list_(pa.string())),
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
        return catalog.artifact(name)


def read_tokens(workspace: Workspace, artifacts: list[dict]) -> pa.Table:
    """Concatenate token artifacts (checked against their hashes)."""
    tables = [read_parquet(workspace.root / a["path"], a["sha256"]) for a in artifacts]
    return pa.concat_tables(tables) if tables else TOKENS_SCHEMA.empty_table()
