"""The ledger's hash chain: a tamper-evident record of every change to what the privacy
accounting rests on (issue 29, item 3).

Three kinds of catalog rows decide what a dataset has spent and published: its ledger
entries (``entry``, by entry id), its own row (``dataset``, by name: its unit, whether it is
public, its author buckets and its lifetime cap, which decide how the entries are counted)
and its published releases (``release``, by run id, with the manifest's sha256). Every
change fdptm makes to one of them appends an event to ``ledger_events``, in the same
transaction: the row's image after the change (the columns above, as canonical JSON),
numbered per dataset and chained: ``hash = sha256(prev_hash "\\n" canonical event)``, the
first event's ``prev_hash`` 64 zeros.

So the current rows must equal the last image the chain holds of each, and:

- an edited row differs from its last image (``fdptm verify --dataset`` reports it; the
  next change fdptm makes to it is refused, ``guard``, and so is every reservation of the
  dataset, ``check_dataset``);
- a deleted row has an image and no row; an inserted row has a row and no image;
- an edited or deleted event breaks the chain at that point (its hash, or the next one's
  ``prev_hash``, no longer match), and the numbering shows a gap;
- a release's files are checked against the manifest hash its event recorded.

What the chain cannot see alone: someone who rewrites the whole chain consistently (every
hash after the edit recomputed) or cuts its tail together with the rows it covers. Against
that, keep the head an auditor saw: ``fdptm verify --dataset NAME`` prints it
(``seq:hash``), and ``--head seq:hash`` later checks that the chain still holds that event
unchanged. Rows that existed before the chain (catalogs from before schema version 2) are
adopted as they were at the migration.

The chain, like the ledger, is internal: its hashes cover timestamps and lost attempts, facts
about how runs went, so they are never published.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from fdptm.errors import FdptmError

GENESIS = "0" * 64
# what of a dataset's row the ledger's totals depend on (its creation date aside)
_DATASET = (
    "SELECT name, unit, public, author_buckets, cap_epsilon, cap_delta, cap_unit FROM datasets"
    " WHERE name = ?"
)
_ROWS = {
    "entry": "SELECT * FROM ledger WHERE entry_id = ?",
    "dataset": _DATASET,
    "release": "SELECT * FROM releases WHERE run_id = ?",
}
_ALL = {
    "entry": ("SELECT * FROM ledger WHERE dataset = ? ORDER BY created_at, entry_id", "entry_id"),
    "dataset": (_DATASET, "name"),
    "release": ("SELECT * FROM releases WHERE dataset = ? ORDER BY released_at, run_id", "run_id"),
}


class LedgerTamperedError(FdptmError):
    """A ledger row differs from the last image its hash chain holds: it was changed outside
    fdptm. Nothing was changed by the command that found it."""


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    return value


def canonical(value: Any) -> str:
    """The one JSON text of ``value`` (sorted keys, no spaces, floats as their shortest
    repr), so both catalog dialects hash the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def image(row: dict[str, Any] | None) -> str | None:
    """The canonical image of a catalog row (None for no row)."""
    if row is None:
        return None
    return canonical({k: _value(v) for k, v in row.items()})


def event_hash(prev_hash: str, dataset: str, seq: int, kind: str, subject: str, body: str) -> str:
    event = canonical(
        {"dataset": dataset, "seq": seq, "kind": kind, "subject": subject, "body": body}
    )
    return hashlib.sha256(f"{prev_hash}\n{event}".encode()).hexdigest()


def _rows(con: Any, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cursor = con.execute(sql, params)
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def _current(con: Any, kind: str, subject: str) -> str | None:
    found = _rows(con, _ROWS[kind], [subject])
    return image(found[0]) if found else None


def _last(con: Any, dataset: str, kind: str, subject: str) -> str | None:
    row = con.execute(
        "SELECT body FROM ledger_events WHERE dataset = ? AND kind = ? AND subject = ?"
        " ORDER BY seq DESC LIMIT 1",
        [dataset, kind, subject],
    ).fetchone()
    return None if row is None else row[0]


def append(con: Any, dataset: str, kind: str, subject: str, body: str) -> None:
    """Add one event to ``dataset``'s chain (inside the caller's transaction, which holds
    the catalog's lock, so the numbering has no race)."""
    row = con.execute(
        "SELECT seq, hash FROM ledger_events WHERE dataset = ? ORDER BY seq DESC LIMIT 1",
        [dataset],
    ).fetchone()
    seq, prev = (1, GENESIS) if row is None else (row[0] + 1, row[1])
    digest = event_hash(prev, dataset, seq, kind, subject, body)
    con.execute(
        "INSERT INTO ledger_events (dataset, seq, kind, subject, body, prev_hash, hash)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [dataset, seq, kind, subject, body, prev, digest],
    )


def guard(con: Any, dataset: str, kind: str, subjects: list[str]) -> None:
    """Refuse to change rows that differ from their last image in the chain."""
    for subject in subjects:
        if _current(con, kind, subject) != _last(con, dataset, kind, subject):
            raise LedgerTamperedError(
                f"the {kind} {subject!r} of dataset {dataset!r} in the catalog differs from "
                "its record in the ledger's hash chain: it was changed outside fdptm. Nothing "
                f"was changed. `fdptm verify --dataset {dataset}` lists every difference; "
                "restore the catalog from a backup."
            )


def check_dataset(con: Any, dataset: str) -> None:
    """Refuse (``LedgerTamperedError``) when any chained row of ``dataset`` differs from its
    last image in the chain: the cap check of a reservation must read the ledger as fdptm
    left it, not one with an entry lowered, deleted or added outside it. Two queries."""
    last = {
        (kind, subject): body
        for kind, subject, body in con.execute(
            "SELECT e.kind, e.subject, e.body FROM ledger_events e JOIN (SELECT kind, subject,"
            " max(seq) AS seq FROM ledger_events WHERE dataset = ? GROUP BY kind, subject) m"
            " ON e.kind = m.kind AND e.subject = m.subject AND e.seq = m.seq"
            " WHERE e.dataset = ?",
            [dataset, dataset],
        ).fetchall()
    }
    current = images(con, dataset)
    changed = sorted(k for k in set(last) | set(current) if last.get(k) != current.get(k))
    if changed:
        kind, subject = changed[0]
        raise LedgerTamperedError(
            f"the {kind} {subject!r} of dataset {dataset!r} in the catalog differs from its "
            f"record in the ledger's hash chain ({len(changed)} row(s) differ): the catalog "
            "was changed outside fdptm, so its cap check cannot be trusted. Nothing was "
            f"reserved. `fdptm verify --dataset {dataset}` lists every difference; restore the "
            "catalog from a backup."
        )


def record(con: Any, dataset: str, kind: str, subjects: list[str]) -> None:
    """Append the new image of each row in ``subjects`` that changed."""
    for subject in subjects:
        now = _current(con, kind, subject)
        if now is not None and now != _last(con, dataset, kind, subject):
            append(con, dataset, kind, subject, now)


@contextmanager
def tracked(con: Any, dataset: str, kind: str, subjects: list[str]) -> Iterator[None]:
    """Check ``subjects`` against the chain, let the caller change them, record them."""
    guard(con, dataset, kind, subjects)
    yield
    record(con, dataset, kind, subjects)


def adopt(con: Any) -> None:
    """Chain every row that exists now (schema migration 2: a catalog from before the
    chain starts it with its rows as they are)."""
    for (dataset,) in con.execute("SELECT name FROM datasets ORDER BY name").fetchall():
        for kind, (sql, key) in _ALL.items():
            record(con, dataset, kind, [r[key] for r in _rows(con, sql, [dataset])])


def images(con: Any, dataset: str) -> dict[tuple[str, str], str]:
    """The current image of every chained row of ``dataset``, by (kind, subject)."""
    found = {}
    for kind, (sql, key) in _ALL.items():
        for row in _rows(con, sql, [dataset]):
            found[kind, row[key]] = image(row)
    return found


def events(con: Any, dataset: str) -> list[dict[str, Any]]:
    return _rows(con, "SELECT * FROM ledger_events WHERE dataset = ? ORDER BY seq", [dataset])
