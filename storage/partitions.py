"""Partitions of a dataset and the scope of a release over them.

A dataset is partitioned by ingestion batch and, for batches whose file had a time column,
by UTC day: its atoms are (batch, day), or (batch, None) for a batch without times. Every
document lies in exactly one atom, fixed by its own record (the batch it was ingested in,
its timestamp), so the atoms are disjoint in documents. A time window (a day, a week
starting on Monday, a month) is a union of days, so a release over any windows and batches
reads a union of the same atoms, and the ledger can compose spends atom by atom
(``storage.ledger``, "Parallel composition").

A ``Scope`` is what a run reads: a set of batches and, optionally, the days ``[since,
until)``. It is chosen by the operator from public facts (the batches ingested, the
calendar), never from the data: which atoms hold documents is private, so a scope covers
every atom of its batches and days whether it holds documents or not. Days are counted
from 1970-01-01 in UTC (a timestamp's day is its microseconds since the epoch divided by
86,400,000,000, rounded down).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from fdptm.errors import BadInputError

if TYPE_CHECKING:
    from fdptm.storage.workspace import Workspace

EPOCH = dt.date(1970, 1, 1)
MICROS_PER_DAY = 86_400_000_000
WINDOWS = ("day", "week", "month")
_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")


def day_number(day: dt.date) -> int:
    """Days since 1970-01-01."""
    return (day - EPOCH).days


def day_of(number: int) -> dt.date:
    return EPOCH + dt.timedelta(days=number)


def days(ts: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The UTC day number of each timestamp (null where the timestamp is null)."""
    micros = pc.cast(ts.cast(pa.timestamp("us", tz="UTC")), pa.int64())
    return pc.floor(pc.divide(pc.cast(micros, pa.float64()), float(MICROS_PER_DAY))).cast(
        pa.int32()
    )


def parse_batches(text: str | None) -> tuple[int, ...] | None:
    """``"3..5"`` (inclusive) or ``"1,3,7"`` as sorted batch numbers; None for all."""
    return _numbers(
        text,
        1,
        "a range (3..5) or a comma-separated list (1,3,7) of batch numbers >= 1 "
        "(`fdptm partitions --dataset NAME` lists them)",
        "batches",
    )


def parse_buckets(text: str | None) -> tuple[int, ...] | None:
    """``"0..3"`` (inclusive) or ``"1,5"`` as sorted author buckets (from 0); None for all."""
    return _numbers(
        text, 0, "a range (0..3) or a comma-separated list (1,5) of author buckets >= 0", "buckets"
    )


def _numbers(text: str | None, low: int, what: str, name: str) -> tuple[int, ...] | None:
    """``LOW..HIGH`` or ``a,b,c`` as sorted distinct integers >= ``low``; None for None."""
    if text is None:
        return None
    if match := _RANGE.match(text):
        first, last = int(match[1]), int(match[2])
        if first < low or last < first:
            raise BadInputError(f"{name} {text!r}: a range is LOW..HIGH with {low} <= LOW <= HIGH")
        return tuple(range(first, last + 1))
    try:
        found = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        found = []
    if not found or found[0] < low:
        raise BadInputError(f"{name} {text!r}: give {what}")
    return tuple(found)


def buckets_of(key: bytes, authors: pa.Array, n: int) -> pa.Array:
    """Each author id's bucket in [0, n): HMAC-SHA256(key, id) as an integer, mod n. A
    function of the author alone, so the buckets are disjoint in authors."""
    import hashlib
    import hmac

    ids = (
        pc.dictionary_encode(authors).combine_chunks()
        if isinstance(authors, pa.ChunkedArray)
        else pc.dictionary_encode(authors)
    )
    per_id = [
        int.from_bytes(hmac.new(key, a.encode(), hashlib.sha256).digest()[:8], "big") % n
        for a in ids.dictionary.to_pylist()
    ]
    return pa.array(per_id, pa.int32()).take(ids.indices)


def window_bounds(window: str, day: dt.date) -> tuple[dt.date, dt.date]:
    """The ``window`` (day, week from Monday, month) that holds ``day``: [start, end)."""
    if window == "day":
        return day, day + dt.timedelta(days=1)
    if window == "week":
        start = day - dt.timedelta(days=day.weekday())
        return start, start + dt.timedelta(days=7)
    if window == "month":
        start = day.replace(day=1)
        return start, (start + dt.timedelta(days=32)).replace(day=1)
    raise BadInputError(f"unknown window {window!r}; one of {WINDOWS}")


def last_closed(window: str, today: dt.date) -> tuple[dt.date, dt.date]:
    """The newest window of kind ``window`` that ended before ``today`` (by the calendar,
    never by the data)."""
    start, _ = window_bounds(window, today)
    return window_bounds(window, start - dt.timedelta(days=1))


def windows_between(window: str, first: dt.date, last: dt.date) -> list[tuple[dt.date, dt.date]]:
    """Every ``window`` that holds a day of [first, last], in order."""
    out = []
    start, end = window_bounds(window, first)
    while start <= last:
        out.append((start, end))
        start, end = window_bounds(window, end)
    return out


@dataclass(frozen=True)
class Scope:
    """The atoms a run reads: ``batches``, and only days in [since, until) when given, and
    only the authors of ``buckets`` when given (datasets with author buckets).

    Without days the scope covers every atom of its batches, untimed ones included; with
    days, only the timed atoms in range.
    """

    batches: tuple[int, ...]
    since: dt.date | None = None
    until: dt.date | None = None
    buckets: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if (self.since is None) != (self.until is None):
            raise ValueError("a scope's days need both since and until")
        if self.since is not None and not self.since < self.until:
            raise BadInputError(f"since {self.since} must be before until {self.until}")

    @property
    def windowed(self) -> bool:
        return self.since is not None

    def to_dict(self) -> dict:
        return {
            "batches": list(self.batches),
            "since": None if self.since is None else self.since.isoformat(),
            "until": None if self.until is None else self.until.isoformat(),
            "buckets": None if self.buckets is None else list(self.buckets),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Scope:
        return cls(
            tuple(d["batches"]),
            None if d.get("since") is None else dt.date.fromisoformat(d["since"]),
            None if d.get("until") is None else dt.date.fromisoformat(d["until"]),
            None if d.get("buckets") is None else tuple(d["buckets"]),
        )

    def covers_bucket(self, bucket: int) -> bool:
        return self.buckets is None or bucket in self.buckets

    def day_range(self) -> tuple[int, int] | None:
        """[first, end) as day numbers, or None for every day and untimed rows."""
        if self.since is None:
            return None
        return day_number(self.since), day_number(self.until)

    def in_days(self, day: pa.Array) -> pa.Array | None:
        """Which rows (by their day) lie in the scope's days; None when it has no days.
        Untimed rows (null day) lie in no day range."""
        bounds = self.day_range()
        if bounds is None:
            return None
        inside = pc.and_(pc.greater_equal(day, bounds[0]), pc.less(day, bounds[1]))
        return pc.fill_null(inside, False)


def listing(batches: list[dict]) -> list[dict]:
    """The dataset's batches as the operator made them (number, source file, whether it
    is timestamped, when it was ingested): facts about ingestion, not about the data, from
    which scopes may be chosen."""
    return [
        {
            "batch": b["seq"],
            "source": Path(b["source"]).name,
            "timed": bool(b["timed"]),
            "ingested_at": b["created_at"].isoformat(),
        }
        for b in batches
    ]


def counts(workspace: Workspace, batches: list[dict], by: str = "day") -> list[dict]:
    """Documents per (batch, window) of ``by`` (day, week, month), only the windows that
    hold documents. Internal counts of private data, for the operator's eyes: which
    windows hold documents is itself private, so a scope chosen from these counts (and
    published in its manifest) can reveal them."""
    import numpy as np

    from fdptm.storage import objectstore

    out = []
    for b in batches:
        ts = objectstore.read(workspace, b, ["ts"]).column("ts")
        if not b["timed"]:
            out.append({"batch": b["seq"], "since": None, "until": None, "documents": len(ts)})
            continue
        per_window: dict[tuple[dt.date, dt.date], int] = {}
        numbers, n = np.unique(days(ts).to_numpy(zero_copy_only=False), return_counts=True)
        for number, k in zip(numbers, n, strict=True):
            key = window_bounds(by, day_of(int(number)))
            per_window[key] = per_window.get(key, 0) + int(k)
        out += [
            {"batch": b["seq"], "since": s.isoformat(), "until": u.isoformat(), "documents": k}
            for (s, u), k in sorted(per_window.items())
        ]
    return out
