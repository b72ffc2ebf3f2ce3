"""The report file a device (or ``fdptm local randomize``) sends: one LDP report per row.

Parquet with three columns: ``report`` (binary, ceil(V/8) bytes, bit t of the vector is bit
t % 8 of byte t // 8), ``vocabulary`` (the fingerprint of the vocabulary it was encoded over)
and ``flip`` (the realised f). Every report names its own vocabulary and f, so reports from
devices with another vocabulary or f can be told apart row by row (``check``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fdptm.errors import BadInputError
from fdptm.local.flip import Flip
from fdptm.local.randomizer import SAMPLER, n_bytes
from fdptm.local.vocabulary import LocalVocabulary

FORMAT = "fdptm-local-reports/1"
_FINGERPRINT = re.compile(r"[0-9a-f]{32}")
COLUMNS = ("report", "vocabulary", "flip")


def table(
    reports: np.ndarray, vocabulary: LocalVocabulary, flip: Flip, seeded: bool = False
) -> pa.Table:
    """Reports (n x ceil(V/8) uint8) as the report table; its metadata names the sampler and
    whether the keystream was seeded (a test run: such reports are not private)."""
    width = n_bytes(vocabulary.size)
    if reports.ndim != 2 or reports.shape[1] != width:
        raise ValueError(f"reports must be n x {width} bytes, got {reports.shape}")
    flat = np.ascontiguousarray(reports, dtype=np.uint8).reshape(-1)
    column = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(reports), [None, pa.py_buffer(flat)]
    ).cast(pa.binary())
    n = len(reports)
    return pa.table(
        {
            "report": column,
            "vocabulary": pa.array([vocabulary.fingerprint] * n, pa.string()),
            "flip": pa.array(np.full(n, flip.f), pa.float64()),
        },
        metadata={"format": FORMAT, "sampler": SAMPLER, "seeded": json.dumps(seeded)},
    )


def write(
    path: str | Path,
    reports: np.ndarray,
    vocabulary: LocalVocabulary,
    flip: Flip,
    seeded: bool = False,
) -> Path:
    """Write the report file (Parquet, zstd: noisy bits do not compress much); ``seeded``
    marks reports drawn from ``KeyStream(seed=...)`` (tests only)."""
    target = Path(path)
    pq.write_table(table(reports, vocabulary, flip, seeded), target, compression="zstd")
    return target


@dataclass(frozen=True)
class Checked:
    """The reports that match the declared vocabulary and f, and why the others do not."""

    reports: np.ndarray
    rows: np.ndarray
    reasons: dict[int, str]


def check(
    reports: pa.Table,
    vocabulary: LocalVocabulary,
    flip: Flip,
    source: str,
    allow_seeded: bool = False,
) -> Checked:
    """Split a report table into valid reports and rejected rows (row number -> reason).

    A report is valid when it names the declared vocabulary's fingerprint and the declared
    f, has ceil(V/8) bytes, and sets no bit beyond the vocabulary's V words. A file without
    the three columns, from another sampler, or marked seeded (unless ``allow_seeded``, for
    tests) is refused whole.
    """
    missing = [c for c in COLUMNS if c not in reports.column_names]
    if missing:
        raise BadInputError(
            f"{source} is not a report file: column(s) {', '.join(missing)} missing (a report "
            "file has report, vocabulary and flip; write one with `fdptm local randomize`)"
        )
    meta = {k.decode(): v.decode() for k, v in (reports.schema.metadata or {}).items()}
    if meta.get("sampler") != SAMPLER:
        raise BadInputError(
            f"{source} was not written by this randomiser (its sampler is not fdptm's exact "
            "Bernoulli sampler): write reports with `fdptm local randomize` or fdptm.local"
        )
    if meta.get("seeded") != "false" and not allow_seeded:
        raise BadInputError(
            f"{source} holds reports drawn from a seeded keystream: anyone who knows the seed "
            "can remove their noise, so they are not private and are never ingested"
        )
    width = n_bytes(vocabulary.size)
    report = reports.column("report").combine_chunks()
    if not pa.types.is_binary(report.type) and not pa.types.is_fixed_size_binary(report.type):
        raise BadInputError(f"{source}: column report must be binary, not {report.type}")
    report = report.cast(pa.binary())
    lengths = pc.fill_null(pc.binary_length(report), -1).to_numpy(zero_copy_only=False)
    names = pc.fill_null(reports.column("vocabulary").cast(pa.string()), "").to_numpy(
        zero_copy_only=False
    )
    flips = pc.fill_null(reports.column("flip").cast(pa.float64()), np.nan).to_numpy(
        zero_copy_only=False
    )
    reasons: dict[int, str] = {}
    for row in np.flatnonzero(names != vocabulary.fingerprint):
        named = names[row] if _FINGERPRINT.fullmatch(names[row]) else "(not a fingerprint)"
        reasons[int(row)] = (
            f"encoded over vocabulary {named}, not the declared {vocabulary.fingerprint}"
        )
    for row in np.flatnonzero(flips != flip.f):
        reasons.setdefault(int(row), f"randomised with f = {flips[row]}, not the declared {flip.f}")
    for row in np.flatnonzero(lengths != width):
        reasons.setdefault(
            int(row),
            f"{max(lengths[row], 0)} bytes, but a report over {vocabulary.size} words has {width}",
        )
    sized = np.flatnonzero(lengths == width)
    data = as_matrix(report.take(pa.array(sized)), width)
    spare = 8 * width - vocabulary.size
    if spare:
        high = np.uint8((0xFF << (8 - spare)) & 0xFF)
        for i in np.flatnonzero(data[:, -1] & high):
            reasons.setdefault(
                int(sized[i]), f"sets bits beyond the vocabulary's {vocabulary.size} words"
            )
    good = np.setdiff1d(np.arange(reports.num_rows), np.fromiter(reasons, int, len(reasons)))
    keep = np.isin(sized, good)
    return Checked(np.ascontiguousarray(data[keep]), good, reasons)


def as_matrix(column: pa.Array, width: int) -> np.ndarray:
    """Binary values all ``width`` long as an n x width uint8 array."""
    if len(column) == 0:
        return np.zeros((0, width), dtype=np.uint8)
    fixed = column.cast(pa.binary(width))
    data = np.frombuffer(fixed.buffers()[1], dtype=np.uint8)
    start = fixed.offset * width
    return data[start : start + len(column) * width].reshape(len(column), width)
