"""The public vocabulary a device encodes its document over (LP-LDA, section V-A, step 1).

The vocabulary is sent to every device and fixes the length V of every report, so it must
not depend on anyone's private text: a vocabulary chosen from the private documents would
itself leak them, outside any local guarantee. ``fdptm local vocabulary`` builds the
document from a public source (``tasks.local_reports.build_vocabulary``: a dataset ingested
with ``--public``, a ``wordfreq`` list, or a word-list file the operator declares public; a
release's own vocabulary, chosen from private data, is refused) and records its fingerprint
in the catalog, and the server creates a local dataset only over a recorded fingerprint:
that is the gate. Here, on the device, only the document's form is checked: anything that
is not such a document (a plain word list, a release's ``vocabulary.parquet``) or whose
words no longer match its fingerprint is refused with the command to run instead.

The document records the words (sorted, after PRE), the PRE configuration the device must
apply, and the source; its fingerprint (sha256 of the words and the PRE configuration) is
written into every report, so the server can refuse reports over another vocabulary.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from fdptm.errors import BadInputError
from fdptm.pre import PreConfig

FORMAT = "fdptm-local-vocabulary/1"


@dataclass(frozen=True)
class LocalVocabulary:
    """Sorted unique words, the PRE configuration that produced them, and their source."""

    words: tuple[str, ...]
    source: str
    pre: PreConfig = PreConfig()

    def __post_init__(self) -> None:
        if not self.words:
            raise BadInputError("a local vocabulary needs at least one word")
        if list(self.words) != sorted(set(self.words)):
            raise BadInputError("a local vocabulary's words must be sorted and unique")

    @property
    def size(self) -> int:
        return len(self.words)

    @property
    def fingerprint(self) -> str:
        """sha256 (hex, 32 characters) of the words and the PRE configuration."""
        body = json.dumps({"words": list(self.words), "pre": self.pre.digest()})
        return hashlib.sha256(body.encode()).hexdigest()[:32]

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "source": self.source,
            "pre": self.pre.__dict__,
            "fingerprint": self.fingerprint,
            "words": list(self.words),
        }

    def save(self, path: str | Path) -> Path:
        target = Path(path)
        target.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        return target

    @classmethod
    def load(cls, path: str | Path) -> LocalVocabulary:
        """The vocabulary document at ``path``; BadInputError for anything else."""
        where = Path(path)
        how = (
            "build one from public data with `fdptm local vocabulary SOURCE OUTPUT` "
            "(SOURCE: public:DATASET, wordfreq:en:5000 or a public word-list file)"
        )
        try:
            doc = json.loads(where.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BadInputError(f"{where}: no such vocabulary file; {how}") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise BadInputError(
                f"{where} is not a local vocabulary document ({type(exc).__name__}); a device "
                f"only encodes over a public vocabulary: {how}"
            ) from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise BadInputError(
                f"{where} is not a local vocabulary document (no format {FORMAT!r}); a device "
                f"only encodes over a public vocabulary: {how}"
            )
        try:
            vocab = cls(tuple(doc["words"]), str(doc["source"]), PreConfig(**doc["pre"]))
        except (KeyError, TypeError) as exc:
            raise BadInputError(f"{where}: the vocabulary document is incomplete ({exc})") from None
        if doc.get("fingerprint") != vocab.fingerprint:
            raise BadInputError(
                f"{where}: the words or PRE settings were changed after the vocabulary was built "
                f"(its fingerprint does not match); {how}"
            )
        return vocab
