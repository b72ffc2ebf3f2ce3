"""LDP report datasets: the public vocabulary devices encode over, and ingesting reports.

``build_vocabulary`` is the server side of ``fdptm local vocabulary``: the N most frequent
words of a public source (``tasks.public_vocabulary``: ``public:DATASET`` passes the
ledger's public gate, ``wordfreq:LANG``, or a word-list file only with ``declare_public``,
the operator's word that it is public, which fdptm cannot verify and manifests say so),
after PRE, as the document devices load (``fdptm.local.vocabulary``). A file inside a
release directory is refused: a release's vocabulary was selected from private data. Each
vocabulary built is recorded in the catalog (``local_vocabularies``: fingerprint, source,
kind), and a local dataset can only be created over a recorded fingerprint: that, not the
device's format check, is the gate against a vocabulary made from private text.

``ingest_reports`` (``fdptm ingest --local-reports``) appends a report file (``fdptm.local.
reports``) to a local dataset as a new batch. The dataset is created with the vocabulary
and f it is declared with, and every later batch must declare the same. Each report is
checked on its own (``reports.check``: its vocabulary fingerprint, its f, its length and its
spare bits); a report that fails is rejected with its reason, written to the batch's rejects
file, and never stored; a file with no valid report stores nothing. In the same transaction
as the batch, the ledger records the collection's local guarantee once
(``Ledger.record_collection``): V log((1 - f/2)/(f/2)) per document, log((1 - f/2)/(f/2))
per word (Theorem 4). Releases from the reports spend nothing more.

A dataset of reports holds no text: central mechanisms cannot read it, and LP-LDA and OLP-LDA
read nothing else (``local_collection`` is the gate).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fdptm.errors import BadInputError
from fdptm.local.flip import Flip
from fdptm.local.reports import as_matrix, check
from fdptm.local.vocabulary import LocalVocabulary
from fdptm.pre import PreConfig
from fdptm.privacy.adjacency import Adjacency
from fdptm.storage import recovery
from fdptm.storage.artifacts import parquet_bytes, write_parquet
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.ledger import Ledger
from fdptm.storage.objectstore import read, settle
from fdptm.storage.workspace import Workspace, check_name

DEFAULT_VOCABULARY_SIZE = 5000
_SHOWN = 10


VOCABULARY_KINDS = {
    "public": "a dataset ingested with --public",
    "wordfreq": "the wordfreq package's public word-frequency list",
    "declared": "a word list the operator declared public (not verified by fdptm)",
}


def build_vocabulary(
    source: str,
    workspace: Workspace,
    size: int = DEFAULT_VOCABULARY_SIZE,
    declare_public: bool = False,
) -> LocalVocabulary:
    """The ``size`` most frequent words of the public ``source``, after PRE, recorded in the
    catalog as a vocabulary local datasets may use."""
    from fdptm.tasks.public_vocabulary import load

    if size < 1:
        raise BadInputError(f"--size must be at least 1, got {size}")
    kind = source.partition(":")[0] if source.startswith(("public:", "wordfreq:")) else "declared"
    if kind == "declared" and not declare_public:
        raise BadInputError(
            f"{source} is a word list: fdptm cannot tell whether it was made from private text. "
            "If it is public, say so with --declare-public (manifests will say the operator "
            "declared it); else build the vocabulary from public:DATASET or wordfreq:LANG:N"
        )
    path = Path(source).expanduser()
    if kind == "declared":
        for folder in path.resolve().parents:
            if (folder / "manifest.json").is_file():
                raise BadInputError(
                    f"{source} is part of a release ({folder}): a release's vocabulary was "
                    "selected from private data and would leak it to every device; build the "
                    "vocabulary from public data (public:DATASET, wordfreq:en:N, a public list)"
                )
    cfg = PreConfig()
    public = load(source, workspace, cfg)
    vocabulary = LocalVocabulary(tuple(public.most_frequent(size)), source, cfg)
    workspace.create()
    Catalog(workspace).execute(
        "INSERT INTO local_vocabularies VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [vocabulary.fingerprint, source, kind, now()],
    )
    return vocabulary


def vocabulary_kind(catalog: Catalog, fingerprint: str) -> str | None:
    """How the recorded vocabulary ``fingerprint`` was built (``VOCABULARY_KINDS``), or None."""
    rows = catalog.query("SELECT kind FROM local_vocabularies WHERE fingerprint = ?", [fingerprint])
    return rows[0]["kind"] if rows else None


@dataclass(frozen=True)
class LocalCollection:
    """A local dataset's declared vocabulary and f (fixed when it was created)."""

    dataset: str
    vocabulary: LocalVocabulary
    flip: Flip

    @property
    def guarantee(self) -> dict:
        return self.flip.to_dict(self.vocabulary.size)


def local_collection(catalog: Catalog, dataset: str) -> LocalCollection:
    """The collection behind a local dataset; BadInputError for any other dataset."""
    row = catalog.dataset(dataset)
    if row is None:
        raise BadInputError(f"no dataset named {dataset!r}; ingest reports with --local-reports")
    if row["unit"] != Adjacency.LOCAL.value:
        raise BadInputError(
            f"dataset {dataset!r} holds documents, not local reports: LP-LDA and OLP-LDA train "
            "on reports ingested with `fdptm ingest --local-reports`; release this dataset "
            "with a central mechanism (fdptm release)"
        )
    found = catalog.query("SELECT * FROM local_collections WHERE dataset = ?", [dataset])[0]
    doc = json.loads(found["vocabulary"])
    vocabulary = LocalVocabulary(tuple(doc["words"]), doc["source"], PreConfig(**doc["pre"]))
    return LocalCollection(dataset, vocabulary, Flip(int(found["flip_numerator"])))


def read_reports(workspace: Workspace, catalog: Catalog, dataset: str, seqs: list[int]) -> list:
    """The packed reports (n x ceil(V/8) uint8) of each batch ``seqs``, hash-checked."""
    batches = {b["seq"]: b for b in catalog.batches(dataset)}
    out = []
    for seq in seqs:
        column = read(workspace, batches[seq]).column("report").combine_chunks()
        out.append(as_matrix(column, column.type.byte_width))
    return out


@dataclass
class ReportIngest:
    """What one report ingest stored and refused (rejected rows: number and reason)."""

    dataset: str
    seq: int
    run_id: str
    n_reports: int
    n_rejected: int
    examples: list[dict]
    rejects_path: Path | None
    guarantee: dict


def ingest_reports(
    path: str | Path,
    dataset: str,
    workspace: Workspace,
    *,
    vocabulary: LocalVocabulary,
    flip: Flip,
    allow_seeded: bool = False,
) -> ReportIngest:
    """Append the valid reports of ``path`` to the local ``dataset`` (module docstring).
    ``allow_seeded`` accepts reports from a seeded keystream (tests only); releases that
    read them say they are not private."""
    check_name(dataset)
    source = Path(path)
    if not source.is_file():
        raise BadInputError(f"report file {source} does not exist")
    data = source.read_bytes()
    try:
        table = parquet_bytes(data)
    except (pa.ArrowException, OSError) as exc:
        raise BadInputError(
            f"{source} is not a Parquet report file ({type(exc).__name__}); write reports "
            "with `fdptm local randomize`"
        ) from None
    checked = check(table, vocabulary, flip, source.name, allow_seeded)
    seeded = (table.schema.metadata or {}).get(b"seeded") == b"true"
    source_sha = hashlib.sha256(data).hexdigest()
    workspace.create()
    catalog = Catalog(workspace)
    run_id = f"ingest-{uuid.uuid4().hex[:12]}"
    params = {"source": str(source), "local_reports": True, "seeded": seeded}
    with recovery.recorded_run(workspace, catalog, run_id, dataset, "ingest", params):
        result = _store(workspace, catalog, run_id, source, source_sha, dataset, vocabulary,
                        flip, checked)  # fmt: skip
    settle(workspace)
    return result


def _declare(con, dataset: str, vocabulary: LocalVocabulary, flip: Flip) -> None:
    """Create the local dataset, or check that this batch declares its vocabulary and f."""
    row = con.execute("SELECT unit FROM datasets WHERE name = ?", [dataset]).fetchone()
    if row is None:
        known = con.execute(
            "SELECT 1 FROM local_vocabularies WHERE fingerprint = ?", [vocabulary.fingerprint]
        ).fetchone()
        if known is None:
            raise BadInputError(
                f"vocabulary {vocabulary.fingerprint} was not built in this workspace from a "
                "public source: run `fdptm local vocabulary SOURCE OUTPUT` here (the same "
                "source and size give the same fingerprint) before collecting over it"
            )
        Catalog.create_dataset(con, dataset, Adjacency.LOCAL.value)
        con.execute(
            "INSERT INTO local_collections VALUES (?, ?, ?, ?, ?)",
            [dataset, vocabulary.fingerprint, json.dumps(vocabulary.to_dict()), flip.numerator,
             now()],
        )  # fmt: skip
        return
    if row[0] != Adjacency.LOCAL.value:
        raise BadInputError(
            f"dataset {dataset!r} holds documents ({row[0]} level); local reports go into a "
            "dataset of their own: pick a new name"
        )
    fingerprint, numerator = con.execute(
        "SELECT vocabulary_fingerprint, flip_numerator FROM local_collections WHERE dataset = ?",
        [dataset],
    ).fetchone()
    if fingerprint != vocabulary.fingerprint:
        raise BadInputError(
            f"dataset {dataset!r} collects reports over vocabulary {fingerprint}, not the "
            f"declared {vocabulary.fingerprint}: declare the dataset's vocabulary, or ingest "
            "these reports into a new dataset"
        )
    if numerator != flip.numerator:
        raise BadInputError(
            f"dataset {dataset!r} collects reports with f = {Flip(numerator).f}, not the "
            f"declared {flip.f}: declare the dataset's f, or use a new dataset"
        )


def _store(workspace, catalog, run_id, source, source_sha, dataset, vocabulary, flip, checked):
    reasons = checked.reasons
    with catalog.transaction() as con:
        _declare(con, dataset, vocabulary, flip)
        seen = con.execute(
            "SELECT seq FROM batches WHERE dataset = ? AND source_sha256 = ?", [dataset, source_sha]
        ).fetchone()
        if seen:
            raise BadInputError(
                f"{source.name} was already ingested as batch {seen[0]} of dataset {dataset!r}; "
                "nothing stored"
            )
        seq = con.execute(
            "SELECT coalesce(max(seq), 0) + 1 FROM batches WHERE dataset = ?", [dataset]
        ).fetchone()[0]
        base = f"datasets/{dataset}/batches/batch={seq:06d}"
        rejects_rel = _write_rejects(workspace, f"{base}-rejects.parquet", reasons)
        if len(checked.reports) == 0:
            raise BadInputError(
                f"no valid report in {source.name}: all {len(reasons)} were rejected (first: "
                f"{_first(reasons)}); see {workspace.root / rejects_rel}"
            )
        width = checked.reports.shape[1]
        column = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(width), len(checked.reports), [None, pa.py_buffer(checked.reports)]
        )
        rel = f"{base}/reports.parquet"
        sha = write_parquet(pa.table({"report": column}), workspace.root / rel)
        con.execute(
            "INSERT INTO batches (dataset, seq, run_id, source, source_sha256, path, sha256,"
            " n_rows, n_rejected, rejects_path, has_author_ids, created_at, timed)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, FALSE, ?, FALSE)",
            [dataset, seq, run_id, str(source), source_sha, rel, sha, len(checked.reports),
             len(reasons), rejects_rel, now()],
        )  # fmt: skip
        catalog.register_artifact(
            f"batch/{dataset}/{seq}", run_id, "ingest", rel, sha, "internal",
            len(checked.reports), con,
        )  # fmt: skip
        guarantee = flip.to_dict(vocabulary.size)
        Ledger(catalog).record_collection(
            con, dataset, run_id, seq, guarantee["document_epsilon"], guarantee
        )
    examples = [{"row": r + 1, "reason": reasons[r]} for r in sorted(reasons)[:_SHOWN]]
    return ReportIngest(
        dataset, seq, run_id, len(checked.reports), len(reasons), examples,
        workspace.root / rejects_rel if rejects_rel else None, guarantee,
    )  # fmt: skip


def _first(reasons: dict[int, str]) -> str:
    row = min(reasons)
    return f"row {row + 1}: {reasons[row]}"


def _write_rejects(workspace: Workspace, rel: str, reasons: dict[int, str]) -> str | None:
    """Rejected rows (1-based number and reason); None when every report was valid."""
    if not reasons:
        return None
    rows = sorted(reasons)
    table = pa.table(
        {"row": pa.array([r + 1 for r in rows], pa.int64()), "reason": [reasons[r] for r in rows]}
    )
    write_parquet(table, workspace.root / rel)
    return rel
