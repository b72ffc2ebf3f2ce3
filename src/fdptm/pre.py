"""PRE's per-document function (FDPTM paper section 3.5; Algorithm 1 line 2), on its own.

Lower-case, remove URLs and @mentions, strip every non-alphabetic character, tokenize (the
runs of letters), drop stop words and tokens outside 3-15 characters, lemmatize with WordNet
(nltk), and apply the stop-word and length rules once more to the lemmas. It needs only
pyarrow, numpy and nltk, so the local client (``fdptm.local``), which runs PRE on a device
before randomised response, imports it without Prefect, DuckDB or the server;
``fdptm.tasks.preprocess`` runs the same function over a dataset's batches, in parallel
and cached. The module docstring there says why PRE is stable.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fdptm.parallel import each_chunk, workers

_URL = re.compile(r"(?:https?://|www\.)\S+")
_MENTION = re.compile(r"@\w+")
_NON_ALPHA = r"[^a-z]+"
_DOCS_PER_SLICE = 10_000
"""The fewest documents a thread of ``_letter_runs`` gets."""
CHUNK = 100_000
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
    return _letter_runs(pc.list_flatten(docs).slice(0, len(texts)))


def _letter_runs(docs: pa.Array) -> pa.ListArray:
    """Per document, the runs of a-z. Arrow's kernels release the GIL but run on one thread
    per call, so a large chunk is cut into one slice per usable core, the slices done on
    threads and concatenated in order (a per-document function: the same lists on any
    number of threads). At 500,000 documents this was about half of PRE's time."""
    parts = max(1, min(workers(), len(docs) // _DOCS_PER_SLICE))
    edges = np.linspace(0, len(docs), parts + 1).astype(np.int64)
    runs: list[pa.Array | None] = [None] * parts

    def split(i: int) -> None:
        piece = docs.slice(edges[i], edges[i + 1] - edges[i])
        runs[i] = pc.utf8_split_whitespace(pc.replace_substring_regex(piece, _NON_ALPHA, " "))

    each_chunk(split, parts)
    return runs[0] if parts == 1 else pa.concat_arrays(runs)


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


class Lemmas:
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


def preprocess_chunk(texts: pa.Array, cfg: PreConfig, lemmas: Lemmas) -> pa.ListArray:
    stops = pa.array(sorted(lemmas.stops), pa.string())
    raw = _raw_token_lists(texts, cfg)
    raw = _filtered_lists(raw, _keep(pc.list_flatten(raw), cfg, stops), len(texts))
    encoded = pc.dictionary_encode(pc.list_flatten(raw))
    lemma_of = pa.array(lemmas.of(encoded.dictionary.to_pylist()), pa.string())
    lemma = lemma_of.take(encoded.indices)
    return _filtered_lists(
        pa.LargeListArray.from_arrays(raw.offsets, lemma), pc.is_valid(lemma), len(texts)
    ).cast(pa.list_(pa.string()))


def tokenize(texts: list[str] | pa.Array, cfg: PreConfig = PreConfig()) -> pa.ListArray:
    """PRE of each text, in this process, chunk by chunk: a list of tokens per text."""
    array = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
    if len(array) == 0:
        return pa.array([], pa.list_(pa.string()))
    lemmas = Lemmas(cfg)
    return pa.concat_arrays(
        [
            preprocess_chunk(pa.concat_arrays([array.slice(s, CHUNK)]), cfg, lemmas)
            for s in range(0, len(array), CHUNK)
        ]
    )
