"""Parquet and JSON artifacts: atomic, private writes and content hashes.

Stages exchange data only through files written here and registered in the catalog with
their producer run and sha256, never through pickled Python objects.

Every write goes to a temporary file (created 0600 in the target's directory), is flushed
to disk, then renamed over the target: a failed write (a full disk, a read-only workspace)
removes the temporary file and leaves the previous version of the target intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fdptm.errors import BadInputError
from fdptm.storage.workspace import FILE_MODE, private_mkdir, storage_errors


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def atomic_write(
    path: Path, write: Callable[[Path], None], check: Callable[[str], None] | None = None
) -> str:
    """Run ``write`` on a private temporary file, fsync it and rename it to ``path``;
    ``check``, given the sha256 of what was written, may refuse it (by raising) before the
    rename.

    Returns the sha256 of what was written. ENOSPC and permission errors become the
    workspace errors of ``storage_errors``, raised after the temporary file is removed.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    created = False
    try:
        with storage_errors(path):
            private_mkdir(path.parent)
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
            created = True
            write(tmp)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            sha = file_sha256(tmp)
            if check is not None:
                check(sha)
            os.replace(tmp, path)
            created = False
    finally:
        if created:
            tmp.unlink(missing_ok=True)
    return sha


def write_parquet(table: pa.Table, path: Path) -> str:
    """Write ``table`` to ``path`` atomically (temp file + rename); return its sha256."""
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def write_parquet_batches(
    batches: Iterable[pa.Table | pa.RecordBatch], schema: pa.Schema, path: Path
) -> tuple[str, int]:
    """Write ``batches`` (each computed as it is needed: only one is held) as one Parquet
    file at ``path``, atomically; return its sha256 and number of rows."""
    rows = 0

    def write(tmp: Path) -> None:
        nonlocal rows
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for batch in batches:
                table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
                writer.write_table(table)
                rows += table.num_rows

    return atomic_write(path, write), rows


def write_json(obj: dict, path: Path) -> str:
    """Write ``obj`` as indented JSON atomically; return its sha256."""

    def write(tmp: Path) -> None:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")

    return atomic_write(path, write)


def intact(path: Path, expected_sha256: str) -> bool:
    """True when ``path`` is a file whose bytes still hash to ``expected_sha256``."""
    try:
        return path.is_file() and file_sha256(path) == expected_sha256
    except OSError:
        return False


def verify(path: Path, expected_sha256: str | None = None) -> None:
    """A clear error unless the registered artifact ``path`` exists and (when given) still
    hashes to ``expected_sha256``."""
    if not path.exists():
        raise BadInputError(f"artifact {path} is missing from the workspace")
    if expected_sha256 is not None and file_sha256(path) != expected_sha256:
        raise BadInputError(
            f"artifact {path} does not match the hash recorded in the catalog: it was changed "
            "or corrupted after it was written; restore it or re-ingest the batch"
        )


def parquet_bytes(data: bytes) -> pa.Table:
    """The Parquet file ``data`` as a table, read on this thread. pyarrow's dataset reader
    (``pq.read_table``) runs on Arrow's thread pools, whose threads can still be alive when a
    short process exits, which then aborts ("terminate called without an active exception",
    apache/arrow#34314): 7 of 80 runs of the manual's ``load_release`` example under load
    did, none of 150 reading this way (2026-11-29)."""
    return pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)


def read_parquet(
    path: Path, expected_sha256: str | None = None, columns: list[str] | None = None
) -> pa.Table:
    """Read a registered artifact (only ``columns`` when given), checking its hash; a
    corrupt file is a clear error."""
    verify(path, expected_sha256)
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise BadInputError(f"artifact {path} is not a readable Parquet file: {exc}") from exc
