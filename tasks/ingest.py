"""Ingest: read a file, map and type its columns, validate its rows, append the good ones.

Each ingest appends one batch to a named dataset. A document has a text, a ``doc_id``, an
author and a time, read from the columns ``text``, ``doc_id``, ``author_id`` and ``ts``
unless mapped to others (``text_column``, ``id_column``, ``author_column``, ``time_column``;
``--text-column`` and so on in the CLI). A mapped column the file lacks is an error, and
every other column is ignored with a warning that names it (names only, never values):
nothing is dropped silently.

**Derived ids.** Without an id column, row r's ``doc_id`` is a keyed hash of (the file's
sha256, r) (``derive_ids``: HMAC-SHA256 under the workspace's ``secret.key``, through
``Workspace.commitment``, which creates the key if the workspace has none yet and refuses
if a workspace with releases has lost it). No content goes into an id, so every row of such
a file is its own document: identical texts, in one file or in several, from one person or
from many, never share an id, and no row can be rejected because of another row's content.
Without the key an id cannot be computed, even from a guessed file; the CLI does not print
derived ids (they mean nothing to the operator) and names rejected rows by row number.

**A file is ingested into a dataset once.** The sha256 of the bytes parsed is recorded per
batch (``batches.source_sha256``); a file whose sha256 a batch of the dataset already has is
refused whole ("this file was already ingested as batch N of dataset D"; exit 2, nothing
stored), with or without an id column. Trade-off: without an id column the file's sha256 is
all that ties rows to earlier ingests, so a file that repeats an earlier file's rows but
differs in any byte (rows added, reordered, re-exported) is not detected: its rows are
stored again as new documents. Give files ids to catch that, row by row (below).

**Privacy unit.** Declared when the dataset is created (``unit``; by default ``author`` when
the file has an author column, present or mapped, else ``document``) and never changed. An
author-level dataset needs an author column in every file and rejects a row whose author is
missing: such a row is never merged into some other unit. A document-level dataset refuses
files with an author column; there each document's unit key (its ``author_id``) is
``DOCUMENT_UNIT_PREFIX + doc_id``, a namespace that real author ids may not use (a row of an
author-level dataset whose author id starts with it is rejected), so no per-document key can
equal a real author's id.

**Ingest removes rows only within one unit.** A row is rejected for its own content or
because of rows with its own unit key; wherever rejecting a row would let another unit's
row decide it, the whole file is refused instead (exit 2, nothing stored; the message gives
how many ids and which row numbers, never content or ids):

- author level, within the file: rows sharing a doc_id and an author are all rejected (which
  copy is meant is unknown); a doc_id shared by rows of different authors, or by a row
  without a valid author, refuses the file;
- document level, within the file: every row is its own unit, so a doc_id that more than one
  row carries refuses the file;
- against the dataset: a row whose doc_id is already stored under its own unit key is a
  re-ingest of that unit's document and is rejected, and the stored row is never touched. At
  author level that is the same author; a doc_id stored under another author refuses the
  file (doc ids must be unique across authors). At document level the unit key is
  ``DOCUMENT_UNIT_PREFIX + doc_id``, so a stored doc_id is always that same document's. A
  row without a valid author is rejected for its author and compared with nothing stored.

The stored side is read by DuckDB (``_owners``: a semi-join of the stored batches' Parquet
files, as an Arrow dataset of exactly those files, with the file's doc ids, after each
file's hash is checked), so the check's memory
follows the file, not the dataset, and its time the bytes of the stored id columns.

Adjacency is therefore defined on the ingested rows: in every stored batch, whether a row
was kept depends only on its own content and on rows with its own unit key. A conflict
between units is never settled by dropping a row: it refuses the whole file, which stops the
ingest for the operator to fix the ids instead of shaping the dataset silently.

**Atomic.** What is stored (the files' sha256s, and the doc ids with their unit keys) is
checked against a snapshot of the dataset's batches (outside the lock, since reading them
takes time), then again inside the ``Catalog.transaction()`` that inserts the batch, which
holds the catalog's cross-process lock, against every batch committed since the snapshot.
Batches are append-only, so together the two check against exactly what the insert commits
on top of, and every refusal above holds for ingests that run at once. The dataset row,
which fixes the unit, is created in that same transaction. Two ingests of one file at once
store it once, and a failed or refused ingest leaves no batch and no dataset behind (its
run is recorded as failed).

Rows that fail validation (typing; Great Expectations: non-empty text within the length
limit, an id, unique in the file (author level), not already in the dataset) are written to
a rejects file (internal: it holds raw text) with their row number and reason, and counted.
Messages and reasons carry row numbers, the ids the file gave, column names and reasons,
never row content. A file with no valid row stores no batch (its rejects file is kept for
the operator) and is an error.

The counts an ingest reports (``IngestStats``) are internal: computed on private data, not
DP, never part of a release.
"""

from __future__ import annotations

import hmac
import re
import reprlib
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fdptm.errors import BadInputError
from fdptm.storage import recovery
from fdptm.storage.artifacts import verify, write_parquet
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.objectstore import local, settle
from fdptm.storage.partitions import days
from fdptm.storage.workspace import Workspace, check_name
from fdptm.tasks import readers
from fdptm.tasks.bounding import Bounds
from fdptm.tasks.sources import local_input
from fdptm.tasks.validation import Check, failing_rows

MAX_TEXT_CHARS = 1_000_000
BATCH_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("text", pa.string()),
        ("author_id", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
_STORED_SCHEMA = pa.schema([("doc_id", pa.string()), ("author_id", pa.string())])
"""The columns of the stored batches that the checks against the dataset read."""
DOCUMENT_UNIT_PREFIX = "document:"
MISSING_AUTHOR = "author_id is missing (required: the dataset is author-level)"
RESERVED_AUTHOR = (
    f"author_id starts with {DOCUMENT_UNIT_PREFIX!r}, which is reserved for the unit keys of "
    "document-level datasets"
)
MISSING_TS = "ts is missing (required: the file has a time column, so every row is dated)"
NOT_UNIQUE = "doc_id is not unique in this file (repeated by one author: every copy rejected)"
ALREADY_STORED = "doc_id is already in the dataset (ingested before)"
DERIVED_ID_PREFIX = "d"
_DERIVED_ID_HEX = 32
_AUTHOR_LIKE = re.compile(
    r"author|user|sender|writer|poster|owner|creator|account|handle|speaker|person|member|"
    r"patient|participant|respondent|customer|client|^from$|^uid$"
)
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 200, 200
_SHOWN_ROWS = 10
_TYPED_AS_MISSING = {"text is missing": "text is not", "doc_id is missing": "doc_id is not"}


@dataclass(frozen=True)
class IngestStats:
    """Counts for the operator after an ingest. Internal, not DP: never part of a release.

    ``bounding_drops`` is how many documents contribution bounding would drop from the whole
    dataset at the default bound (``Bounds().max_docs_per_author``), of ``bounded_authors``
    authors over it.
    """

    unit: str
    batch_documents: int
    batch_authors: int
    new_authors: int
    dataset_documents: int
    dataset_authors: int
    max_docs_per_author: int
    bounding_drops: int
    bounded_authors: int


@dataclass
class IngestResult:
    """What one ingest did: the batch, how many rows it kept and why it refused others.

    ``warnings`` name the input columns that were ignored (names only); ``stats`` are the
    internal counts of ``IngestStats``; ``ids_derived``: the file had no id column, so the
    doc ids are keyed hashes (``derive_ids``) that mean nothing to the operator.
    """

    dataset: str
    seq: int
    run_id: str
    n_rows: int
    n_rejected: int
    reasons: dict[str, int]
    batch_path: Path
    rejects_path: Path | None
    examples: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stats: IngestStats | None = None
    ids_derived: bool = False


def derive_ids(workspace: Workspace, source_sha256: str, n: int) -> list[str]:
    """The ids of the ``n`` rows of a file without an id column: a keyed hash of (the file's
    sha256, the row number), so every row of a file is its own document.

    Keyed with the workspace's secret key through ``Workspace.commitment``: the file's key is
    HMAC-SHA256(secret key, ``"<sha256>:doc_ids"``) (one read of ``secret.key`` per file; the
    suffix keeps it apart from the commitments that manifests publish), and row r's id is
    ``DERIVED_ID_PREFIX`` + HMAC-SHA256(file key, r), truncated to 128 bits. Nothing about a
    row's content goes into its id, and without the key no id can be computed from a guessed
    file.
    """
    file_key = bytes.fromhex(workspace.commitment(f"{source_sha256}:doc_ids"))
    return [
        DERIVED_ID_PREFIX
        + hmac.new(file_key, str(row).encode(), "sha256").hexdigest()[:_DERIVED_ID_HEX]
        for row in range(1, n + 1)
    ]


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _as_str_id(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value).strip()
    return text or None


def _author(value: Any) -> tuple[str | None, str | None]:
    """(author id, problem) of one row of an author-level dataset."""
    if _blank(value):
        return None, MISSING_AUTHOR
    author = _as_str_id(value)
    if author is None:
        return None, f"author_id is not a string or integer (got {type(value).__name__})"
    if author.startswith(DOCUMENT_UNIT_PREFIX):
        return None, RESERVED_AUTHOR
    return author, None


def _parse_ts(value: Any) -> tuple[datetime | None, bool]:
    """(timestamp, ok): None is ok (no time); strings are ISO 8601; numbers are epoch s."""
    if value is None or value == "":
        return None, True
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)), True
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC), True
        except (OverflowError, OSError, ValueError):
            return None, False
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None, False
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)), True
    return None, False


def normalise(
    columns: dict[str, list[Any]], by_author: bool, derived_ids: list[str] | None = None
) -> tuple[dict[str, list[Any]], list[str | None]]:
    """Typed columns plus, per row, the typing problem (None when the row types fine).

    ``by_author``: the dataset is author-level, so every row needs its author; otherwise
    each row's unit key is ``DOCUMENT_UNIT_PREFIX + doc_id``. ``derived_ids`` (one per row,
    from ``derive_ids``) are the ids when ``columns`` has no ``doc_id``. Problems name the
    type of a bad value, never the value.
    """
    n = len(columns["text"])
    texts = columns["text"]
    problems: list[str | None] = [None] * n
    raw_authors = columns.get("author_id", [None] * n)
    timed = "ts" in columns
    raw_ts = columns.get("ts", [None] * n)
    ts, authors = [], []
    for i in range(n):
        if texts[i] is not None and not isinstance(texts[i], str):
            problems[i] = f"text is not a string (got {type(texts[i]).__name__})"
        parsed, ok = _parse_ts(raw_ts[i])
        ts.append(parsed)
        if not ok and problems[i] is None:
            problems[i] = "ts is not an ISO 8601 timestamp or epoch seconds"
        author, problem = _author(raw_authors[i]) if by_author else (None, None)
        if problems[i] is None:
            problems[i] = problem
        authors.append(author)
    if "doc_id" in columns:
        doc_ids = [_as_str_id(v) for v in columns["doc_id"]]
        for i, (raw, typed) in enumerate(zip(columns["doc_id"], doc_ids, strict=True)):
            if not _blank(raw) and typed is None and problems[i] is None:
                problems[i] = (
                    f"doc_id is not a non-empty string or integer (got {type(raw).__name__})"
                )
    else:
        if derived_ids is None or len(derived_ids) != n:
            raise ValueError("a file without an id column needs derived_ids, one per row")
        doc_ids = list(derived_ids)
    if timed:  # a row's own problems first: a dateless row is only reported as such
        for i in range(n):
            if ts[i] is None and problems[i] is None and _blank(raw_ts[i]):
                problems[i] = MISSING_TS
    if not by_author:
        authors = [None if d is None else DOCUMENT_UNIT_PREFIX + d for d in doc_ids]
    text_values = [t if isinstance(t, str) else None for t in texts]
    return {"doc_id": doc_ids, "text": text_values, "author_id": authors, "ts": ts}, problems


def _ids_shared_across_authors(doc_ids: list[str | None], authors: list[str | None]):
    """doc_id -> rows, for every doc_id that rows of different authors (or a row without a
    valid author, which counts as an author of its own) carry."""
    owners: dict[str, set[Any]] = {}
    rows: dict[str, list[int]] = {}
    for i, (doc_id, author) in enumerate(zip(doc_ids, authors, strict=True)):
        if doc_id is None:
            continue
        owners.setdefault(doc_id, set()).add(author if author is not None else (None, i))
        rows.setdefault(doc_id, []).append(i)
    return {d: rows[d] for d, who in owners.items() if len(who) > 1}


def _repeated_ids(doc_ids: list[str | None]) -> dict[str, list[int]]:
    """doc_id -> rows, for every doc_id that more than one row of the file carries."""
    rows: dict[str, list[int]] = {}
    for i, doc_id in enumerate(doc_ids):
        if doc_id is not None:
            rows.setdefault(doc_id, []).append(i)
    return {d: r for d, r in rows.items() if len(r) > 1}


def _rows_shown(ids: dict[str, list[int]]) -> str:
    """ "row 3" or "rows 1, 3": the (1-based) numbers of ``ids``' rows, at most
    ``_SHOWN_ROWS`` of them."""
    where = sorted(i + 1 for r in ids.values() for i in r)
    shown = ", ".join(map(str, where[:_SHOWN_ROWS])) + (", ..." if len(where) > _SHOWN_ROWS else "")
    return f"row{'s' if len(where) > 1 else ''} {shown}"


_GIVE_IDS = (
    "Give every document its own doc_id (or map --id-column to a column unique per "
    "document) and ingest again"
)


def _shared_ids_error(source: Path, shared: dict[str, list[int]]) -> BadInputError:
    """The refusal of a file in which rows of different authors share doc ids: how many
    ids and which row numbers, never row content."""
    k = len(shared)
    return BadInputError(
        f"{source.name}: {k} doc_id{'s are' if k != 1 else ' is'} shared by rows of "
        f"different authors (or by a row without a valid author), in "
        f"{_rows_shown(shared)}. Rejecting them would let one author's row remove another "
        f"author's document, so the whole file is refused and nothing was stored. {_GIVE_IDS}"
    )


def _repeated_ids_error(source: Path, repeated: dict[str, list[int]]) -> BadInputError:
    """The refusal of a file of a document-level dataset that repeats doc ids: each row is
    its own unit there, so no copy may be rejected because of another."""
    k = len(repeated)
    return BadInputError(
        f"{source.name}: {k} doc_id{'s are' if k != 1 else ' is'} repeated, in "
        f"{_rows_shown(repeated)}. The dataset is document-level, so every row is its own "
        "unit: rejecting the copies would let one document remove another, so the whole file "
        f"is refused and nothing was stored. {_GIVE_IDS}"
    )


def _collision_error(source: Path, dataset: str, collide: dict[str, list[int]]) -> BadInputError:
    """The refusal of a file whose doc ids are stored under other authors."""
    k = len(collide)
    return BadInputError(
        f"{source.name}: doc_ids must be unique across authors, but {k} doc_id"
        f"{'s' if k != 1 else ''} of this file, in {_rows_shown(collide)}, "
        f"{'collide' if k != 1 else 'collides'} with other authors' rows stored in dataset "
        f"{dataset!r}. Rejecting those rows would let one author's stored document remove "
        "another author's, so the whole file is refused and nothing was stored (the stored "
        f"rows are untouched). {_GIVE_IDS}"
    )


def _refuse_same_file(
    source: Path, dataset: str, source_sha256: str, batches: list[tuple[int, str]]
) -> None:
    """Refuse a file whose bytes were already ingested into ``dataset``: ``batches`` are
    (seq, source_sha256) of its batches."""
    for seq, sha in batches:
        if sha == source_sha256:
            raise BadInputError(
                f"{source.name}: this file was already ingested as batch {seq} of dataset "
                f"{dataset!r} (the same bytes), so it is refused whole and nothing was stored. "
                "To add documents, ingest a file that holds only the new ones"
            )


def _file_reasons(frame, problems: list[str | None], max_chars: int) -> dict[int, list[str]]:
    """Row -> reasons from typing and from the checks on the file alone (Great
    Expectations); a value of the wrong type, typed as missing, keeps its typing problem
    only."""
    reasons_per_row = {i: [p] for i, p in enumerate(problems) if p is not None}
    for i, reasons in failing_rows(frame, _file_checks(max_chars), "ingest").items():
        problem = problems[i] or ""
        for reason in reasons:
            typed_as_missing = reason in _TYPED_AS_MISSING
            if not (typed_as_missing and problem.startswith(_TYPED_AS_MISSING[reason])):
                reasons_per_row.setdefault(i, []).append(reason)
    return reasons_per_row


def _file_checks(max_chars: int) -> list[Check]:
    import great_expectations as gx

    e = gx.expectations
    return [
        Check(e.ExpectColumnValuesToNotBeNull(column="text"), "text is missing"),
        Check(
            e.ExpectColumnValuesToMatchRegex(column="text", regex=r"\S"),
            "text is empty or whitespace only",
        ),
        Check(
            e.ExpectColumnValueLengthsToBeBetween(column="text", max_value=max_chars),
            f"text is longer than {max_chars} characters",
        ),
        Check(e.ExpectColumnValuesToNotBeNull(column="doc_id"), "doc_id is missing"),
        Check(e.ExpectColumnValuesToBeUnique(column="doc_id"), NOT_UNIQUE),
    ]


def _dataset_checks(known: set[str]) -> list[Check]:
    import great_expectations as gx

    return [
        Check(
            gx.expectations.ExpectColumnValuesToNotBeInSet(
                column="doc_id", value_set=sorted(known)
            ),
            ALREADY_STORED,
        )
    ]


def _ignored_warnings(rows: readers.Rows) -> list[str]:
    """One warning per input column (or JSON field) that no field reads: names only."""
    out = []
    for column in rows.ignored:
        if "author_id" not in rows.mapping and _AUTHOR_LIKE.search(column.lower()):
            out.append(
                f"column {readers.quote(column)} is ignored; if it identifies each document's "
                f"author, map it with --author-column {readers.quote(column)} (author_column= "
                "in Python): without an author column every document is its own author"
            )
        else:
            out.append(
                f"column {readers.quote(column)} is ignored: no field is read from it (map it "
                "with --text-column, --id-column, --author-column or --time-column if it holds "
                "one of them)"
            )
    out.extend(
        f"field {readers.quote(name)} is ignored: it is not a list with one entry per document"
        for name in rows.not_columns
    )
    return out


def _declare_unit(
    existing: str | None, requested: str | None, rows: readers.Rows, dataset: str, name: str
) -> str:
    """The dataset's unit, refusing every combination that would mislabel it."""
    has_authors = "author_id" in rows.mapping
    if existing == "local":
        raise BadInputError(
            f"dataset {dataset!r} holds local-DP reports, never documents: ingest report files "
            "with --local-reports, or documents into another dataset"
        )
    if existing is not None and requested is not None and requested != existing:
        raise BadInputError(
            f"dataset {dataset!r} was created with privacy unit {existing!r}; a "
            f"dataset's unit never changes. Ingest into a new dataset for unit {requested!r}"
        )
    if existing is None and requested is None and not has_authors:
        found = [*rows.ignored, *rows.not_columns]
        candidates = [c for c in found if _AUTHOR_LIKE.search(c.lower())]
        if candidates:
            raise BadInputError(
                f"{name} has no column 'author_id', but {readers.names(candidates)} may name "
                "each document's author. A new dataset's privacy unit is fixed for ever: map "
                "the author column with --author-column NAME (author_column= in Python) for "
                "an author-level dataset, or pass --unit document to declare every document "
                "its own unit. Nothing was stored"
            )
    unit = existing or requested or ("author" if has_authors else "document")
    if unit == "author" and not has_authors:
        candidates = [c for c in rows.ignored if _AUTHOR_LIKE.search(c.lower())]
        hint = f" (ignored now: {readers.names(candidates)})" if candidates else ""
        claim = f"dataset {dataset!r} is author-level" if existing else "--unit author"
        raise BadInputError(
            f"{claim}, but {name} has no author column: no column 'author_id' and none mapped"
            f"{hint}. Map the column that identifies each document's author with "
            "--author-column NAME (author_column= in Python); a dataset without authors can "
            "only be document-level"
        )
    if unit == "document" and has_authors:
        raise BadInputError(
            f"dataset {dataset!r} is document-level (every document its own author), but "
            f"{name} has an author column ({readers.quote(rows.mapping['author_id'])}). Ingest "
            "it into an author-level dataset (--unit author when the dataset is created), or "
            "drop the column"
        )
    return unit


def _declare_public(existing: bool | None, public: bool, dataset: str) -> None:
    """Refuse a batch whose visibility differs from its dataset's, fixed at creation.

    A public dataset is never charged by the ledger and may feed any release as its
    vocabulary or prior, so private rows must never enter one; and a private dataset can
    never become public, which would stop charging for data that was read as private.
    """
    if existing is None or existing == public:
        return
    if existing:
        raise BadInputError(
            f"dataset {dataset!r} is public (declared with --public when it was created); a "
            "batch added to it must be declared public too. If this file is public, pass "
            "--public; if it is private, ingest it into another dataset"
        )
    raise BadInputError(
        f"dataset {dataset!r} is private; a dataset never becomes public (the ledger has "
        "charged its releases). Ingest public data into a new dataset with --public"
    )


def ingest(
    path: str | Path,
    dataset: str,
    workspace: Workspace,
    *,
    fmt: str | None = None,
    unit: str | None = None,
    public: bool = False,
    max_text_chars: int = MAX_TEXT_CHARS,
    text_column: str | None = None,
    id_column: str | None = None,
    author_column: str | None = None,
    time_column: str | None = None,
    author_buckets: int | None = None,
) -> IngestResult:
    """Validate ``path`` (a local path, or an fsspec URL such as ``s3://bucket/file.jsonl``:
    ``tasks.sources``) and append its good rows to ``dataset`` as a new batch.

    The ``*_column`` arguments name the input column of each field; left None, a field is
    read from the column named ``text``, ``doc_id``, ``author_id`` or ``ts`` if the file has
    it. A named column must exist. ``public`` declares the dataset public (not private:
    never charged, usable as any release's vocabulary or prior); it is fixed when the
    dataset is created and every later batch must say the same. ``author_buckets`` N
    partitions an author-level dataset into N author-disjoint buckets (a keyed hash of the
    author id, ``storage.partitions``), declared when the dataset is created: releases over
    disjoint buckets then compose in parallel at the author level.
    """
    check_name(dataset)
    if unit not in (None, "author", "document"):
        raise BadInputError(f"unit must be 'author' or 'document', got {unit!r}")
    workspace.check_key()  # ids are derived and buckets assigned under it: check it first
    existing = _existing_dataset(workspace, dataset)
    with local_input(path) as (source, origin):
        may_have_authors = unit != "document" and (existing is None or existing["unit"] == "author")
        mapping = readers.ColumnMap(
            text_column, id_column, author_column, time_column, infer_author=may_have_authors
        )
        rows = readers.read_rows(source, fmt, mapping)
        declared = _declare_unit(existing and existing["unit"], unit, rows, dataset, source.name)
        workspace.create()
        catalog = Catalog(workspace)
        _declare_public(existing and bool(existing["public"]), public, dataset)
        _declare_buckets(existing, author_buckets, declared, dataset)
        run_id = f"ingest-{uuid.uuid4().hex[:12]}"
        params = {"source": origin, "columns": rows.mapping}
        with recovery.recorded_run(workspace, catalog, run_id, dataset, "ingest", params):
            result = _ingest(
                source,
                origin,
                rows,
                dataset,
                declared,
                unit,
                public,
                workspace,
                catalog,
                run_id,
                max_text_chars,
                author_buckets,
            )
        inferred = rows.mapping.get("author_id")
        if author_column is None and inferred not in (None, "author_id"):
            result.warnings.insert(
                0,
                f"column {readers.quote(inferred)} read as the author column (by its name): "
                f"dataset {dataset!r} is author-level. If it does not identify authors, map "
                "the right column with --author-column NAME, or pass --unit document",
            )
        return result


def _existing_dataset(workspace: Workspace, dataset: str) -> dict | None:
    """The catalog row of ``dataset``, or None (also when the workspace is new)."""
    if not workspace.has_catalog:
        return None
    return Catalog(workspace).dataset(dataset)


def _day_span(table: pa.Table) -> tuple[int | None, int | None]:
    """The batch's first and last UTC day (None without times). Internal: it lets a run
    over other days skip reading the batch (the result is the same, the run faster); no
    scope, ledger entry or manifest depends on it."""
    day = days(table.column("ts"))
    return pc.min(day).as_py(), pc.max(day).as_py()


def _declare_buckets(existing: dict | None, buckets: int | None, unit: str, dataset: str) -> None:
    """Author buckets are declared when an author-level dataset is created, never later
    (partitions must not change under releases already made over them)."""
    if existing is not None:
        if buckets is not None and buckets != existing["author_buckets"]:
            raise BadInputError(
                f"dataset {dataset!r} exists with "
                f"{existing['author_buckets'] or 'no'} author buckets; they are declared "
                "when a dataset is created and never change: drop --author-buckets"
            )
        return
    if buckets is None:
        return
    if unit != "author":
        raise BadInputError(
            "--author-buckets partitions authors; this dataset is document-level, where "
            "batches and days already partition the documents"
        )
    if isinstance(buckets, bool) or not isinstance(buckets, int) or not 2 <= buckets <= 4096:
        raise BadInputError(f"--author-buckets must be an integer in [2, 4096], got {buckets!r}")


def _refuse_untimed_after_timed(con, dataset: str, timed: bool, name: str) -> None:
    """Once a dataset has timestamped batches, every later batch must be timestamped: a
    window (``--since``, ``--window``) would silently leave its documents out."""
    if timed:
        return
    first = con.execute(
        "SELECT min(seq) FROM batches WHERE dataset = ? AND timed", [dataset]
    ).fetchone()[0]
    if first is not None:
        raise BadInputError(
            f"{name} has no time column, but dataset {dataset!r} has timestamped documents "
            f"since batch {first}: every later batch needs one, or its documents would fall "
            "outside every time window. Map the file's time column with --time-column NAME "
            "(ISO 8601 or epoch seconds), or ingest it into another dataset"
        )


def _ingest(
    source: Path,
    origin: str,
    rows: readers.Rows,
    dataset: str,
    declared: str,
    requested: str | None,
    public: bool,
    workspace: Workspace,
    catalog: Catalog,
    run_id: str,
    max_text_chars: int,
    author_buckets: int | None,
) -> IngestResult:
    import pandas as pd

    source_sha = rows.sha256
    # what is stored is checked against a snapshot outside the lock, then inside the
    # transaction against every batch committed since: batches are append-only, so the two
    # together check against exactly what the insert commits on top of
    snapshot = catalog.batches(dataset)
    _refuse_same_file(
        source, dataset, source_sha, [(b["seq"], b["source_sha256"]) for b in snapshot]
    )
    derived = "doc_id" not in rows.columns
    ids = derive_ids(workspace, source_sha, len(rows.columns["text"])) if derived else None
    typed, problems = normalise(rows.columns, by_author=declared == "author", derived_ids=ids)
    n = len(problems)
    if declared == "author":
        shared = _ids_shared_across_authors(typed["doc_id"], typed["author_id"])
        if shared:
            raise _shared_ids_error(source, shared)
    else:
        repeated = _repeated_ids(typed["doc_id"])
        if repeated:
            raise _repeated_ids_error(source, repeated)
    frame = pd.DataFrame({"doc_id": typed["doc_id"], "text": typed["text"]})
    reasons_per_row = _file_reasons(frame, problems, max_text_chars)
    known = {(b["seq"], b["sha256"]) for b in snapshot}
    paths = _verified(workspace, [(b["seq"], b["path"], b["sha256"]) for b in snapshot])
    owners = _owners(paths, typed["doc_id"])
    _check_stored(source, dataset, frame, typed, owners, reasons_per_row)
    with catalog.transaction() as con:
        # again: another ingest may have created the dataset, or stored batches, since
        row = con.execute(
            "SELECT unit, public, author_buckets FROM datasets WHERE name = ?", [dataset]
        ).fetchone()
        _declare_unit(row and row[0], requested, rows, dataset, source.name)
        _declare_public(row and bool(row[1]), public, dataset)
        _declare_buckets(row and {"author_buckets": row[2]}, author_buckets, declared, dataset)
        _refuse_untimed_after_timed(con, dataset, "ts" in rows.mapping, source.name)
        now_stored = con.execute(
            "SELECT seq, path, sha256, source_sha256 FROM batches WHERE dataset = ? ORDER BY seq",
            [dataset],
        ).fetchall()
        committed_since = [b for b in now_stored if (b[0], b[2]) not in known]
        _refuse_same_file(source, dataset, source_sha, [(b[0], b[3]) for b in committed_since])
        if committed_since:
            since = _verified(workspace, committed_since)
            _check_stored(
                source, dataset, frame, typed, _owners(since, typed["doc_id"]), reasons_per_row
            )
            paths += since
        rejected = sorted(reasons_per_row)
        accepted = [i for i in range(n) if i not in reasons_per_row]
        counts = Counter(r for i in rejected for r in reasons_per_row[i])
        rejects_rel = _write_rejects(
            workspace, dataset, run_id, rejected, typed, rows, reasons_per_row
        )
        if not accepted:
            raise BadInputError(
                f"no valid row in {source}: all {n} rows were rejected "
                f"({_summary(counts)}); see {workspace.root / rejects_rel}"
            )
        catalog.create_dataset(con, dataset, declared, public, author_buckets)
        table = pa.table(
            {
                k: pa.array([typed[k][i] for i in accepted], BATCH_SCHEMA.field(k).type)
                for k in BATCH_SCHEMA.names
            },
            schema=BATCH_SCHEMA,
        )
        seq = con.execute(
            "SELECT coalesce(max(seq), 0) + 1 FROM batches WHERE dataset = ?", [dataset]
        ).fetchone()[0]
        rel = f"datasets/{dataset}/batches/batch={seq:06d}/part-0.parquet"
        sha = write_parquet(table, workspace.root / rel)
        con.execute(
            "INSERT INTO batches (dataset, seq, run_id, source, source_sha256, path, sha256,"
            " n_rows, n_rejected, rejects_path, has_author_ids, created_at, timed, first_day,"
            " last_day) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                dataset,
                seq,
                run_id,
                origin,
                source_sha,
                rel,
                sha,
                len(accepted),
                len(rejected),
                rejects_rel,
                "author_id" in rows.mapping,
                now(),
                "ts" in rows.mapping,
                *_day_span(table),
            ],
        )
        catalog.register_artifact(
            f"batch/{dataset}/{seq}", run_id, "ingest", rel, sha, "internal", len(accepted), con
        )
    pending = settle(workspace)
    return IngestResult(
        dataset,
        seq,
        run_id,
        len(accepted),
        len(rejected),
        dict(counts),
        workspace.root / rel,
        workspace.root / rejects_rel if rejects_rel else None,
        [
            {"row": i + 1, "doc_id": typed["doc_id"][i], "reason": "; ".join(reasons_per_row[i])}
            for i in rejected[:_SHOWN_ROWS]
        ],
        [*_ignored_warnings(rows), *([pending] if pending else [])],
        _stats(declared, paths, [typed["author_id"][i] for i in accepted]),
        derived,
    )


def _verified(workspace: Workspace, batches: list[tuple]) -> list[str]:
    """The paths of ``batches`` (seq, path, sha256, ...), each checked against its hash
    (fetched from the artifact store first when the workspace has no copy)."""
    paths = []
    for _, rel, sha, *_ in batches:
        path = local(workspace, rel, sha)
        verify(path, sha)
        paths.append(str(path))
    return paths


def _query(sql: str, paths: list[str], tables: dict[str, pa.Table], params: list) -> list[tuple]:
    """Run ``sql`` on a private in-memory DuckDB with the stored batches ``paths`` as the
    table ``stored`` and ``tables`` registered; an unreadable stored batch is a clear error.

    ``stored`` is an Arrow dataset of exactly these files (DuckDB's ``read_parquet`` would
    read each path as a glob pattern, and a workspace path may contain ``[``, ``?`` or
    ``*``); DuckDB scans it with projection pushdown, so only the columns named are read
    and the joins stream."""
    import duckdb
    import pyarrow.dataset as ds

    con = duckdb.connect(":memory:")
    try:
        con.register("stored", ds.dataset(paths, format="parquet", schema=_STORED_SCHEMA))
        for name, table in tables.items():
            con.register(name, table)
        return con.execute(sql, params).fetchall()
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        raise BadInputError(
            f"a stored batch could not be read ({type(exc).__name__}); restore the "
            "workspace's batch files or re-ingest them into a new dataset"
        ) from exc
    finally:
        con.close()


def _owners(paths: list[str], doc_ids: list[str | None]) -> dict[str, set[str]]:
    """doc id -> the unit keys it is stored under in ``paths``, for the file's doc ids only.

    A semi-join in DuckDB: memory follows the file, not the dataset (the stored ids are
    streamed past a hash table of the file's ids)."""
    if not paths:
        return {}
    file_ids = pa.table({"doc_id": pa.array(doc_ids, pa.string())})
    rows = _query(
        "SELECT doc_id, list(DISTINCT author_id) FROM stored "
        "WHERE doc_id IN (SELECT doc_id FROM file_ids) GROUP BY doc_id",
        paths,
        {"file_ids": file_ids},
        [],
    )
    return {doc_id: set(units) for doc_id, units in rows}


def _check_stored(
    source: Path,
    dataset: str,
    frame,
    typed: dict[str, list[Any]],
    owners: dict[str, set[str]],
    reasons_per_row: dict[int, list[str]],
) -> None:
    """Compare the file's doc ids with stored ones (``owners``: doc id -> unit keys).

    A row whose doc_id is stored under its own unit key (the same author; at document level
    the key is the doc_id itself) is a re-ingest of that unit's document: rejected, with Great
    Expectations. One whose doc_id is stored under another author refuses the whole file,
    so that no stored row can remove another author's row. A row without a valid unit key is
    rejected for that already and compared with nothing.
    """
    same: set[str] = set()
    collide: dict[str, list[int]] = {}
    for i, (doc_id, unit) in enumerate(zip(typed["doc_id"], typed["author_id"], strict=True)):
        if doc_id is None or unit is None or doc_id not in owners:
            continue
        if owners[doc_id] == {unit}:
            same.add(doc_id)
        else:
            collide.setdefault(doc_id, []).append(i)
    if collide:
        raise _collision_error(source, dataset, collide)
    if same:
        _reject_stored(frame, same, reasons_per_row)


def _reject_stored(frame, stored_ids: set[str], reasons_per_row: dict[int, list[str]]) -> None:
    """Flag, with Great Expectations, the rows whose doc_id is among ``stored_ids``.

    GX gets only stored ids that occur in this file: the same outcome, but GX re-serialises
    its value set about 128 times per validation (50 s for 200,000 ids).
    """
    checks = _dataset_checks(stored_ids)
    for i, reasons in failing_rows(frame[["doc_id"]], checks, "ingest").items():
        reasons_per_row.setdefault(i, []).extend(reasons)


def _stats(unit: str, paths: list[str], added: list[str]) -> IngestStats:
    """Documents and authors of the dataset with the batch ``added`` (its unit keys), and
    what contribution bounding at the default cap would drop; aggregated in DuckDB."""
    cap = Bounds().max_docs_per_author
    batch = pa.table({"author_id": pa.array(added, pa.string())})
    (row,) = _query(
        """
        WITH s AS (SELECT author_id, count(*) AS n FROM stored GROUP BY author_id),
        b AS (SELECT author_id, count(*) AS n FROM batch GROUP BY author_id),
        t AS (
            SELECT coalesce(s.n, 0) + coalesce(b.n, 0) AS n, b.n AS in_batch, s.n AS before
            FROM s FULL OUTER JOIN b ON s.author_id = b.author_id
        )
        SELECT
            coalesce(sum(n), 0),
            count(*),
            count(in_batch),
            count(*) FILTER (WHERE in_batch IS NOT NULL AND before IS NULL),
            coalesce(sum(greatest(n - ?, 0)), 0),
            count(*) FILTER (WHERE n > ?)
        FROM t
        """,
        paths,
        {"batch": batch},
        [cap, cap],
    )
    documents, authors, batch_authors, new_authors, drops, bounded = (int(v) for v in row)
    return IngestStats(
        unit=unit,
        batch_documents=len(added),
        batch_authors=batch_authors,
        new_authors=new_authors,
        dataset_documents=documents,
        dataset_authors=authors,
        max_docs_per_author=cap,
        bounding_drops=drops,
        bounded_authors=bounded,
    )


def _write_rejects(
    workspace: Workspace,
    dataset: str,
    run_id: str,
    rejected: list[int],
    typed: dict[str, list[Any]],
    rows: readers.Rows,
    reasons_per_row: dict[int, list[str]],
) -> str | None:
    """The rejects file (internal: it holds the raw text); its path in the workspace."""
    if not rejected:
        return None
    rel = f"datasets/{dataset}/rejects/{run_id}.parquet"
    write_parquet(
        pa.table(
            {
                "row": pa.array([i + 1 for i in rejected], pa.int64()),
                "doc_id": pa.array([typed["doc_id"][i] for i in rejected], pa.string()),
                "reason": pa.array(["; ".join(reasons_per_row[i]) for i in rejected]),
                "text": pa.array([_preview(rows.columns["text"][i]) for i in rejected]),
            }
        ),
        workspace.root / rel,
    )
    return rel


def _preview(value: Any) -> str | None:
    """The rejected value as text (internal rejects file only; never printed), bounded in
    depth and length so that deeply nested input cannot exhaust the stack."""
    if value is None:
        return None
    return value if isinstance(value, str) else _REPR.repr(value)


def _summary(counts: Counter) -> str:
    return ", ".join(f"{c} x {r}" for r, c in counts.most_common())
