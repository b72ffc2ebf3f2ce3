"""Public vocabularies: the words (and public counts) a release may use free of charge.

A release's ``--vocabulary SOURCE`` names public data, which the ledger never charges:

* ``public:DATASET``: a dataset ingested with ``--public`` (``Ledger.require_public`` is the
  gate: a private dataset is refused). Its words and counts are its documents' tokens after
  the run's own PRE.
* ``wordfreq:LANG`` or ``wordfreq:LANG:N``: the N (default 20,000) most frequent words of
  language LANG in the ``wordfreq`` package's public word-frequency lists (shipped inside
  the package: no download at run time), with frequencies as counts.
* a path to a UTF-8 word-list file: one word per line, optionally followed by whitespace
  and a count (1 when absent); ``#`` starts a comment line.

Words from a list go through the same PRE as the documents (lower case, the character
filter, stop words, the lemmatizer), so that "Running" in a list matches "run" in a
document; words that PRE drops are dropped, and counts of words that PRE merges are added.
Nothing here reads the private dataset: the vocabulary is fixed before the run spends.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from fdptm.errors import BadInputError, FdptmError
from fdptm.storage.artifacts import read_parquet, write_parquet
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.storage.workspace import Workspace
from fdptm.tasks.preprocess import PreConfig, preprocess_batch, preprocess_texts, read_tokens

WORDFREQ_DEFAULT_SIZE = 20_000
#: wordfreq frequencies are proportions; scaled to counts of a corpus of this many tokens
WORDFREQ_TOKENS = 1e9


@dataclass(frozen=True)
class PublicVocabulary:
    """Words (sorted) with their public counts, and where they came from."""

    source: str
    words: list[str]
    counts: np.ndarray

    def most_frequent(self, n: int) -> list[str]:
        """The n words with the largest public counts (ties alphabetical), sorted."""
        return sorted(self.ranked()[:n])

    def ranked(self) -> list[str]:
        """Every word, the largest public count first (ties alphabetical)."""
        order = np.lexsort((np.arange(len(self.words)), -self.counts))
        return [self.words[i] for i in order]


def check_source(source: str) -> str:
    """Syntax check of a ``--vocabulary`` value (no data needed); returns it."""
    kind, _, rest = source.partition(":")
    if kind == "public" and not rest:
        raise BadInputError("--vocabulary public:DATASET needs a dataset name after 'public:'")
    if kind == "wordfreq":
        parts = rest.split(":")
        if not parts[0] or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
            raise BadInputError(
                f"--vocabulary {source!r}: write wordfreq:LANG or wordfreq:LANG:N, "
                "e.g. wordfreq:en:20000"
            )
    return source


def load(source: str, workspace: Workspace, pre: PreConfig) -> PublicVocabulary:
    """The public vocabulary ``source`` names, after the run's PRE (module docstring)."""
    kind, _, rest = check_source(source).partition(":")
    if kind == "public":
        counts = _dataset_counts(rest, workspace, pre)
    elif kind == "wordfreq":
        counts = _stored_wordfreq_counts(rest, pre, workspace)
    else:
        counts = _file_counts(Path(source).expanduser(), pre)
    if not counts:
        raise BadInputError(
            f"the public vocabulary {source!r} has no word left after preprocessing"
        )
    words = sorted(counts)
    return PublicVocabulary(source, words, np.array([counts[w] for w in words], dtype=float))


def public_tokens(dataset: str, workspace: Workspace, pre: PreConfig) -> pa.Table:
    """The (doc_id, author_id, tokens) table of a *public* dataset after PRE (cached per
    batch); a private or unknown dataset is refused."""
    catalog = Catalog(workspace)
    if catalog.dataset(dataset) is None:
        raise BadInputError(
            f"no dataset named {dataset!r}; ingest public data with "
            "`fdptm ingest PATH --dataset NAME --public`"
        )
    Ledger(catalog).require_public(dataset, "public input (a vocabulary or a prior)")
    artifacts = [
        preprocess_batch(workspace, catalog, batch, f"public-{dataset}", pre)
        for batch in catalog.batches(dataset)
    ]
    return read_tokens(workspace, artifacts)


def _dataset_counts(dataset: str, workspace: Workspace, pre: PreConfig) -> Counter[str]:
    tokens = public_tokens(dataset, workspace, pre).column("tokens").to_pylist()
    return Counter(t for doc in tokens for t in doc)


def _stored_wordfreq_counts(spec: str, pre: PreConfig, workspace: Workspace) -> Counter[str]:
    """``_wordfreq_counts``, kept in the workspace (``internal/cache/wordfreq``, keyed by the
    list, wordfreq's version and PRE's configuration): public data, derived once, so that a
    scheduled release does not lemmatize the list (and load WordNet) every time. A cache
    file that cannot be read is derived again; one that cannot be written is skipped."""
    from importlib.metadata import version

    key = f"{spec.replace(':', '-')}-{version('wordfreq')}-{pre.digest()}"
    path = workspace.root / "internal" / "cache" / "wordfreq" / f"{key}.parquet"
    try:
        table = read_parquet(path)
        words, counts = table["word"].to_pylist(), table["count"].to_pylist()
        return Counter(dict(zip(words, counts, strict=True)))
    except (BadInputError, OSError, KeyError, ValueError, pa.ArrowException):
        derived = _wordfreq_counts(spec, pre)
    if not workspace.has_catalog:  # never create a workspace here
        return derived
    words = sorted(derived)
    with contextlib.suppress(OSError, FdptmError):  # a cache only: the release goes on
        write_parquet(pa.table({"word": words, "count": [derived[w] for w in words]}), path)
    return derived


@cache
def _wordfreq_counts(spec: str, pre: PreConfig) -> Counter[str]:
    """The installed word list through PRE, once per process (a release's checks, plan and
    vocabulary stage all read it; do not mutate the result)."""
    import wordfreq

    lang, _, size = spec.partition(":")
    n = int(size) if size else WORDFREQ_DEFAULT_SIZE
    try:
        listed = wordfreq.top_n_list(lang, n)
    except LookupError as exc:
        raise BadInputError(f"wordfreq has no word list for language {lang!r}: {exc}") from None
    if not listed:
        raise BadInputError(f"wordfreq has no word list for language {lang!r}")
    return _through_pre(
        [(w, wordfreq.word_frequency(w, lang) * WORDFREQ_TOKENS) for w in listed], pre
    )


def _file_counts(path: Path, pre: PreConfig) -> Counter[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise BadInputError(
            f"--vocabulary {path}: no such file (a vocabulary is public:DATASET, "
            "wordfreq:LANG[:N] or a word-list file)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"--vocabulary {path}: cannot read it as UTF-8 text ({exc})") from None
    entries = []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 2:
            raise BadInputError(
                f"{path}, line {number}: expected 'WORD' or 'WORD COUNT', got {len(fields)} fields"
            )
        try:
            count = float(fields[1]) if len(fields) == 2 else 1.0
        except ValueError:
            count = -1.0
        if not (count > 0 and np.isfinite(count)):
            raise BadInputError(f"{path}, line {number}: the count must be a number > 0")
        entries.append((fields[0], count))
    return _through_pre(entries, pre)


def _through_pre(entries: list[tuple[str, float]], pre: PreConfig) -> Counter[str]:
    """Each listed word through PRE; the counts of the tokens it yields are added up."""
    tokens = preprocess_texts([w for w, _ in entries], pre)
    counts: Counter[str] = Counter()
    for (_, count), toks in zip(entries, tokens, strict=True):
        for t in toks:
            counts[t] += count
    return counts
