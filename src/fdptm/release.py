"""A published release as Python objects: ``fdptm.load_release(path) -> Release``.

A release directory (``<workspace>/releases/<run_id>/``, or a copy of it anywhere) holds
three files: ``topic_word.parquet`` (one row per topic, its probabilities over the
vocabulary's columns), ``vocabulary.parquet`` (column index and word) and ``manifest.json``
(the guarantee, per-stage budgets, parameters and the sha256 of both Parquet files).
``load_release`` reads them, checks both files against the manifest's hashes (a copied or
edited file is refused, not silently used), and returns a ``Release``.

Everything a ``Release`` offers is post-processing of the DP outputs: the topic-word matrix
and the vocabulary. What a release cannot give: document-topic distributions, term
frequencies and document lengths are functions of the private documents and are not
released, so tools that need them (pyLDAvis's ``prepare``, perplexity on the training
documents, gensim's ``LdaModel`` state) cannot be fed faithfully; coherence against a
*public* reference corpus (gensim's ``CoherenceModel(topics=..., texts=...)``) can.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq

from fdptm.errors import BadInputError
from fdptm.evaluation import topwords
from fdptm.storage.artifacts import file_sha256
from fdptm.storage.objectstore import filesystem
from fdptm.tasks.sources import is_url, shown

if TYPE_CHECKING:
    import pandas as pd
    from gensim.corpora import Dictionary

FILES = ("topic_word.parquet", "vocabulary.parquet", "manifest.json")


@dataclass(frozen=True)
class Release:
    """One release: the k x V matrix, its vocabulary and its manifest."""

    path: Path | str  # a directory, or the URL it was loaded from
    topic_word: np.ndarray
    vocabulary: list[str]
    manifest: dict

    @property
    def run_id(self) -> str:
        return self.manifest["run_id"]

    @property
    def guarantee(self) -> dict:
        """The manifest's guarantee: notion, (epsilon, delta[, gamma]), adjacency, statement."""
        return self.manifest["guarantee"]

    @property
    def n_topics(self) -> int:
        return self.topic_word.shape[0]

    def top_words(self, n: int = 10) -> list[list[tuple[str, float]]]:
        """Per topic, up to ``n`` (word, probability) pairs strictly above the row's floor
        (``fdptm.evaluation.topwords.top_words``): a topic without signal lists nothing."""
        return topwords.top_words(self.topic_word, self.vocabulary, n)

    def no_signal(self) -> list[bool]:
        """Per topic, whether it carries no signal (no word above the floor, or within
        total-variation distance ``topwords.NEAR_UNIFORM_TV`` of uniform)."""
        return topwords.no_signal(self.topic_word)

    def to_gensim(self, n: int = 10) -> tuple[Dictionary, list[list[str]]]:
        """A gensim ``Dictionary`` whose ids are this release's columns, and per topic its
        top ``n`` words above the floor, the form ``CoherenceModel(topics=...)`` takes
        (topics with fewer than two such words are left out: coherence needs pairs).

        The dictionary carries no document frequencies: those are private.
        """
        from gensim.corpora import Dictionary

        dictionary = Dictionary()
        dictionary.token2id = {word: i for i, word in enumerate(self.vocabulary)}
        dictionary.id2token = dict(enumerate(self.vocabulary))
        topics = [[w for w, _ in words] for words in self.top_words(n)]
        return dictionary, [t for t in topics if len(t) >= 2]

    def to_frame(self) -> pd.DataFrame:
        """One row per (topic, word): topic, word, probability, rank within the topic
        (1 = most probable; ties in column order) and whether it is above the row's floor."""
        import pandas as pd

        k, v = self.topic_word.shape
        order = np.argsort(-self.topic_word, axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(1, v + 1)[None, :].repeat(k, 0), axis=1)
        above = np.stack([topwords.above_floor(row) for row in self.topic_word])
        return pd.DataFrame(
            {
                "topic": np.repeat(np.arange(k), v),
                "word": np.tile(np.asarray(self.vocabulary, dtype=object), k),
                "probability": self.topic_word.ravel(),
                "rank": rank.ravel(),
                "above_floor": above.ravel(),
            }
        )


def load_release(path: str | Path) -> Release:
    """The release in directory ``path``, or at an fsspec URL (``s3://bucket/prefix/
    releases/<run_id>``: its copy in a workspace's artifact store); BadInputError when a file
    is missing, does not match the manifest's sha256, or the matrix and vocabulary disagree."""
    if is_url(path):
        return _load_url(str(path))
    root = Path(path)
    missing = [name for name in FILES if not (root / name).is_file()]
    if missing:
        raise BadInputError(
            f"{root} is not a release directory: {', '.join(missing)} missing (a release has "
            f"{', '.join(FILES)}; releases live in <workspace>/releases/<run_id>/)"
        )
    try:
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        hashes = {name: entry["sha256"] for name, entry in manifest["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadInputError(f"{root / 'manifest.json'} is not a release manifest: {exc}") from None
    for name in FILES[:2]:
        if hashes.get(name) != file_sha256(root / name):
            raise BadInputError(
                f"{root / name} does not match the sha256 its manifest records: the file was "
                "changed or replaced after the release; restore it from the published copy"
            )
    try:
        table = pq.read_table(root / "topic_word.parquet")
        phi = np.stack(table.column("probabilities").to_numpy(zero_copy_only=False))
        vocab = pq.read_table(root / "vocabulary.parquet")
        index = vocab.column("index").to_numpy()
    except (ValueError, KeyError, OSError) as exc:
        raise BadInputError(f"{root}: the release files cannot be read: {exc}") from None
    order = np.argsort(index, kind="stable")
    if not np.array_equal(index[order], np.arange(len(index))):
        raise BadInputError(f"{root}: the vocabulary's index is not 0..V-1")
    listed = vocab.column("word").to_pylist()
    words = [listed[i] for i in order]
    if phi.ndim != 2 or phi.shape[1] != len(words):
        raise BadInputError(
            f"{root}: the topic-word matrix has shape {phi.shape} but the vocabulary has "
            f"{len(words)} words"
        )
    return Release(root, phi, words, manifest)


def _load_url(url: str) -> Release:
    """``load_release`` of a release directory on an object store: its three files are
    copied to a private temporary directory, loaded and checked there, and removed."""
    fs, remote = filesystem(url, "releases")
    with tempfile.TemporaryDirectory(prefix="fdptm-release-") as folder:
        for name in FILES:
            try:
                fs.get_file(f"{remote.rstrip('/')}/{name}", f"{folder}/{name}")
            except FileNotFoundError:
                raise BadInputError(
                    f"{shown(url)} is not a release directory: {name} missing (a release has "
                    f"{', '.join(FILES)})"
                ) from None
            except Exception as exc:  # the driver's own errors: network, credentials
                raise BadInputError(
                    f"could not read {shown(url)}/{name} ({type(exc).__name__}): check the "
                    "URL and the store's credentials and endpoint"
                ) from exc
        try:
            release = load_release(folder)
        except BadInputError as exc:
            raise BadInputError(str(exc).replace(folder, shown(url))) from None
    return replace(release, path=shown(url))
