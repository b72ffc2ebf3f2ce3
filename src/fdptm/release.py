"""A published release as Python objects: ``fdptm.load_release(path) -> Release``.

A release directory (``<workspace>/releases/<run_id>/``, or a copy of it anywhere) holds
three files: ``topic_word.parquet`` (one row per topic, its probabilities over the
vocabulary's columns), ``vocabulary.parquet`` (column index and word) and ``manifest.json``
(the guarantee, per-stage budgets, parameters and the sha256 of both Parquet files), and,
since releases are signed, ``manifest.sig`` and ``signer.pub`` (``fdptm.signing``).
``load_release`` reads them, checks the manifest's signature (and, given ``key=``, that the
publisher's key made it) and both files against the manifest's hashes (a copied or edited
file is refused, not silently used), and returns a ``Release``.

Everything a ``Release`` offers is post-processing of the DP outputs: the topic-word matrix
and the vocabulary. What a release cannot give: document-topic distributions, term
frequencies and document lengths are functions of the private documents and are not
released, so tools that need them (pyLDAvis's ``prepare``, perplexity on the training
documents, gensim's ``LdaModel`` state) cannot be fed faithfully; coherence against a
*public* reference corpus (gensim's ``CoherenceModel(topics=..., texts=...)``) can.

A ``Release`` also answers gensim's ``LdaModel`` questions with gensim's signatures
(``show_topics``, ``show_topic``, ``get_topics``) and is saved and loaded in gensim's style
(``release.save(path)``, ``Release.load(path)``). One difference is deliberate: a topic
lists only its words that stand above the noise (a test whose family-wise error over the
k x V entries is at most 1%, from the noise law the manifest states:
``fdptm.evaluation.significance``), and a ``no_signal`` topic lists none, where gensim would
rank noise as words.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from fdptm import signing
from fdptm.errors import BadInputError
from fdptm.evaluation import significance, topwords
from fdptm.evaluation.significance import WordTest
from fdptm.storage.artifacts import parquet_bytes
from fdptm.storage.objectstore import filesystem
from fdptm.tasks.sources import is_url, shown

if TYPE_CHECKING:
    import pandas as pd
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from gensim.corpora import Dictionary

# every release's files; a signed release also has signing.SIGNATURE_FILES
FILES = ("topic_word.parquet", "vocabulary.parquet", "manifest.json")
NO_SIGNAL = "(no signal)"  # show_topics' formatted text for a topic with no signal

logger = logging.getLogger(__name__)


@dataclass(frozen=True, repr=False)
class Release:
    """One release: the k x V matrix, its vocabulary and its manifest.

    ``load_release`` also keeps the files' bytes as it checked them (``_files``: the three
    of ``FILES`` and a signed release's ``manifest.sig`` and ``signer.pub``), so ``save``
    writes exactly what was published, whatever happened to the source since; and
    ``signer``, the hex of the public key whose signature it checked (None: unsigned, or a
    ``Release`` built by hand).
    """

    path: Path | str  # a directory, or the URL it was loaded from
    topic_word: np.ndarray
    vocabulary: list[str]
    manifest: dict
    _files: dict[str, bytes] = field(default_factory=dict, compare=False)
    signer: str | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        """Run id, k x V and the guarantee in one line; never the matrix or the manifest."""
        g = self.manifest.get("guarantee") or {}
        k, v = self.topic_word.shape
        budget = f"epsilon={_number(g.get('epsilon'))}, delta={_number(g.get('delta'))}"
        if g.get("gamma"):
            budget += f", gamma={_number(g['gamma'])}"
        test = ", SEEDED TEST RUN: NOT DP" if g.get("seeded") else ""
        return (
            f"Release({self.manifest.get('run_id')!r}, {k} topics x {v} words, "
            f"{g.get('notion')} {budget}, adjacency={g.get('adjacency')}{test})"
        )

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

    @property
    def noise(self) -> WordTest | None:
        """The public law of an entry's noise the manifest states (its ``presentation``), by
        which words are tested; None for a mechanism without one (or an older manifest)."""
        return significance.noise_of(self.manifest.get("presentation") or {})

    def top_words(
        self, n: int = 10, alpha: float = significance.DEFAULT_ALPHA
    ) -> list[list[tuple[str, float]]]:
        """Per topic, up to ``n`` (word, probability) pairs that stand above the noise at
        family-wise error ``alpha`` (``fdptm.evaluation.significance``; words above the
        row's floor when the mechanism has no noise model): a topic without signal lists
        nothing."""
        return significance.listed(self.topic_word, self.vocabulary, self.noise, alpha, n)[0]

    def no_signal(self, alpha: float = significance.DEFAULT_ALPHA) -> list[bool]:
        """Per topic, whether no word stands above the noise (``top_words``)."""
        return significance.listed(self.topic_word, self.vocabulary, self.noise, alpha)[1]

    def show_topics(
        self, num_topics: int = -1, num_words: int = 10, log: bool = False, formatted: bool = True
    ) -> list[tuple[int, str]] | list[tuple[int, list[tuple[str, float]]]]:
        """gensim's ``LdaModel.show_topics``: per topic, ``(topic_id, '0.123*"word" + ...')``
        when ``formatted``, else ``(topic_id, [(word, probability), ...])``, most probable
        first. ``num_topics`` < 0 (the default) or >= k: every topic; else the first
        ``num_topics`` (gensim picks a subset by its alpha, which a release does not have).
        ``log`` also logs each line at INFO, as gensim does.

        Unlike gensim, only words above the row's noise floor are listed (up to
        ``num_words``), and a ``no_signal`` topic is shown as ``"(no signal)"`` (formatted)
        or ``[]``: its "top words" would be DP noise ties in column order, not a topic.
        """
        k = self.n_topics
        chosen = range(k) if num_topics < 0 or num_topics >= k else range(num_topics)
        listed = self.top_words(num_words)
        shown_topics: list = []
        for i in chosen:
            words = listed[i]
            text = " + ".join(f'{p:.3f}*"{w}"' for w, p in words) or NO_SIGNAL
            shown_topics.append((i, text if formatted else words))
            if log:
                logger.info("topic #%i: %s", i, text)
        return shown_topics

    def show_topic(self, topicid: int, topn: int = 10) -> list[tuple[str, float]]:
        """gensim's ``LdaModel.show_topic``: up to ``topn`` (word, probability) pairs of
        topic ``topicid``, most probable first; only words above the row's noise floor, and
        ``[]`` for a ``no_signal`` topic (see ``show_topics``)."""
        if not isinstance(topicid, int | np.integer) or not 0 <= topicid < self.n_topics:
            raise IndexError(f"topicid must be an int in 0..{self.n_topics - 1}, got {topicid!r}")
        return self.top_words(topn)[topicid]

    def get_topics(self) -> np.ndarray:
        """gensim's ``LdaModel.get_topics``: the k x V topic-word matrix (a copy), every
        word's probability, floor included: it is the released DP output itself."""
        return self.topic_word.copy()

    def save(self, path: str | Path) -> None:
        """Write this release as a new directory ``path`` holding its files exactly as
        published (byte for byte, its signature too, so the manifest's sha256 and signature
        still match and ``load_release(path)`` accepts the copy), as gensim's ``save`` pairs
        with ``load``.

        ``path`` must not exist or be an empty directory: files are written to a sibling
        staging directory, loaded back and compared with this release, and only then
        renamed to ``path``, so ``path`` never holds half a release. File times are set to
        the release date, as in the workspace (never the time of the copy's run).
        BadInputError for a URL, an occupied ``path``, or a ``Release`` whose matrix,
        vocabulary or manifest differ from its published files (e.g. one built with
        ``dataclasses.replace``): that would not be the published release.
        """
        if is_url(path):
            raise BadInputError(
                f"save writes a local directory, got {shown(str(path))}: save it locally, "
                "then copy the directory to the store (fdptm store, or fsspec's put)"
            )
        target = Path(path)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise BadInputError(
                f"{target} already exists and is not an empty directory: save writes a new "
                "release directory; choose another path or remove it first"
            )
        files = self._files or self._read_files()
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.parent / f".{target.name}.{uuid.uuid4().hex}.partial"
        staging.mkdir()
        try:
            for name, data in files.items():
                with open(staging / name, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            copy = load_release(staging)
            if not (
                np.array_equal(copy.topic_word, self.topic_word)
                and copy.vocabulary == self.vocabulary
                and copy.manifest == self.manifest
            ):
                raise BadInputError(
                    "this Release's matrix, vocabulary or manifest differ from its published "
                    "files (was it changed with dataclasses.replace?): save writes published "
                    "releases only; save the one load_release returned"
                )
            _date_files(staging, self.manifest.get("release_date"))
            if target.exists():
                target.rmdir()  # empty (checked above); replacing a directory is not portable
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    @classmethod
    def load(cls, path: str | Path, key: str | os.PathLike | bytes | None = None) -> Release:
        """gensim's ``load`` classmethod: ``load_release(path, key)`` (a directory or an
        fsspec URL; the signature and every file checked)."""
        return load_release(path, key)

    def _read_files(self) -> dict[str, bytes]:
        """The files at ``path``, for a Release built by hand rather than loaded (``save``
        then checks them against this object)."""
        root = Path(self.path)
        if is_url(self.path) or not all((root / n).is_file() for n in FILES):
            raise BadInputError(
                f"this Release holds no published files and {self.path} is not a local "
                "release directory: load it with load_release, then save that"
            )
        names = [*FILES, *(n for n in signing.SIGNATURE_FILES if (root / n).is_file())]
        return {name: (root / name).read_bytes() for name in names}

    def to_gensim(self, n: int = 10) -> tuple[Dictionary, list[list[str]]]:
        """A gensim ``Dictionary`` whose ids are this release's columns, and per topic its
        top ``n`` listed words (``top_words``), the form ``CoherenceModel(topics=...)`` takes
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
        (1 = most probable; ties in column order), whether it is above the row's floor, and
        whether it stands above the noise (``listed``: every entry the test at alpha 1%
        passes, of which ``top_words`` lists the first n; above the floor where the release
        is untested)."""
        import pandas as pd

        k, v = self.topic_word.shape
        order = np.argsort(-self.topic_word, axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(1, v + 1)[None, :].repeat(k, 0), axis=1)
        above = np.stack([topwords.above_floor(row) for row in self.topic_word])
        noise = self.noise
        listed = above if noise is None else significance.significant(self.topic_word, noise)
        return pd.DataFrame(
            {
                "topic": np.repeat(np.arange(k), v),
                "word": np.tile(np.asarray(self.vocabulary, dtype=object), k),
                "probability": self.topic_word.ravel(),
                "rank": rank.ravel(),
                "above_floor": above.ravel(),
                "listed": listed.ravel(),
            }
        )


def load_release(path: str | Path, key: str | os.PathLike | bytes | None = None) -> Release:
    """The release in directory ``path``, or at an fsspec URL (``s3://bucket/prefix/
    releases/<run_id>``: its copy in a workspace's artifact store).

    A signed release's ``manifest.sig`` is always checked against its ``signer.pub``
    (integrity). ``key``, the publisher's Ed25519 public key obtained out of band (a path to
    a key file, PEM or 64 hex digits, or raw bytes; ``fdptm verify --public-key`` prints
    it), must also be the signer (authenticity), and an unsigned release is then refused.

    BadInputError when a file is missing or unreadable, or ``key`` is not a public key;
    ``fdptm.signing.VerificationError`` (a BadInputError) when the signature is missing,
    bad or by another key, or a file does not match the manifest's sha256.

    Each file is read once: the bytes that are checked are the bytes that are parsed (and
    that ``Release.save`` writes)."""
    pinned = None if key is None else signing.public_key(key)
    if is_url(path):
        return _load_url(str(path), pinned)
    return _load_dir(Path(path), pinned)


def _load_dir(root: Path, key: Ed25519PublicKey | None) -> Release:
    """``load_release`` of the release directory ``root``, its signature checked (against
    ``key`` when given)."""
    missing = [name for name in FILES if not (root / name).is_file()]
    if missing:
        raise BadInputError(
            f"{root} is not a release directory: {', '.join(missing)} missing (a release has "
            f"{', '.join(FILES)}; releases live in <workspace>/releases/<run_id>/)"
        )
    names = [*FILES, *(n for n in signing.SIGNATURE_FILES if (root / n).exists())]
    try:
        files = {name: (root / name).read_bytes() for name in names}
    except OSError as exc:
        raise BadInputError(f"{root}: the release files cannot be read: {exc}") from None
    signer = signing.check(files, key, str(root))
    try:
        manifest = json.loads(files["manifest.json"].decode("utf-8"))
        hashes = {name: entry["sha256"] for name, entry in manifest["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadInputError(f"{root / 'manifest.json'} is not a release manifest: {exc}") from None
    for name in FILES[:2]:
        if hashes.get(name) != hashlib.sha256(files[name]).hexdigest():
            raise signing.VerificationError(
                f"{root / name} does not match the sha256 its manifest records: the file was "
                "changed or replaced after the release; restore it from the published copy"
            )
    try:
        table = parquet_bytes(files["topic_word.parquet"])
        phi = np.stack(table.column("probabilities").to_numpy(zero_copy_only=False))
        vocab = parquet_bytes(files["vocabulary.parquet"])
        index = vocab.column("index").to_numpy()
        listed = vocab.column("word").to_pylist()
    except (pa.ArrowException, ValueError, KeyError, OSError) as exc:
        raise BadInputError(f"{root}: the release files cannot be read: {exc}") from None
    order = np.argsort(index, kind="stable")
    if not np.array_equal(index[order], np.arange(len(index))):
        raise BadInputError(f"{root}: the vocabulary's index is not 0..V-1")
    words = [listed[i] for i in order]
    if phi.ndim != 2 or phi.shape[1] != len(words):
        raise BadInputError(
            f"{root}: the topic-word matrix has shape {phi.shape} but the vocabulary has "
            f"{len(words)} words"
        )
    return Release(
        root, phi, words, manifest, files, None if signer is None else signing.hex_of(signer)
    )


def _number(value: object) -> str:
    """A budget figure for ``Release.__repr__``: 6 significant digits, or as it is."""
    return f"{value:.6g}" if isinstance(value, int | float) else str(value)


def _date_files(folder: Path, release_date: str | None) -> None:
    """Set the times of ``folder`` and its files to the release date, as a published
    release has them (file times must say the date, not when anything ran)."""
    if not release_date:
        return
    try:
        day = datetime.fromisoformat(release_date).replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError):
        return
    for item in [*folder.iterdir(), folder]:
        os.utime(item, (day, day))


def _load_url(url: str, key: Ed25519PublicKey | None) -> Release:
    """``load_release`` of a release directory on an object store: its files (the three of
    every release, and the signature files where the store has them) are copied to a private
    temporary directory, loaded and checked there (against ``key`` when given), and removed."""
    fs, remote = filesystem(url, "releases")
    with tempfile.TemporaryDirectory(prefix="fdptm-release-") as folder:
        for name in (*FILES, *signing.SIGNATURE_FILES):
            try:
                fs.get_file(f"{remote.rstrip('/')}/{name}", f"{folder}/{name}")
            except FileNotFoundError:
                if name in signing.SIGNATURE_FILES:  # unsigned, or half signed: checked below
                    Path(folder, name).unlink(missing_ok=True)  # no empty file left behind
                    continue
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
            release = _load_dir(Path(folder), key)
        except BadInputError as exc:
            raise type(exc)(str(exc).replace(folder, shown(url))) from None
    return replace(release, path=shown(url))
