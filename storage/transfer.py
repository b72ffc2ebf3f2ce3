"""``fdptm catalog migrate``: move a workspace's DuckDB catalog into PostgreSQL, whole.

The DuckDB catalog is first brought to the latest schema (``storage.schema``), then every
row of every table is copied into the PostgreSQL catalog in one transaction under the
catalog's lock. Before the commit, each table is read back and compared with the source row
by row (the canonical images of ``storage.chain``), and each dataset's hash chain is
verified on the copy: a difference rolls everything back and changes nothing. After the
commit, still under the DuckDB file's lock, ``catalog.moved`` names the new catalog: from
then on a command that opens this workspace without ``--catalog`` is refused with that URL
instead of starting a second ledger beside the moved one; then the DuckDB file is renamed
``catalog.duckdb.moved``. The workspace's ``secret.key`` stays a file: the hosts of a
PostgreSQL catalog take it from ``$FDPTM_SECRET_KEY`` (``storage.workspace``).

The target must be a new catalog (no datasets, no settings): merging two ledgers has no
single right answer. A workspace with a run in progress is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from fdptm.errors import BadInputError
from fdptm.storage import chain
from fdptm.storage.catalog import Catalog
from fdptm.storage.postgres import check_url, redacted
from fdptm.storage.schema import LATEST
from fdptm.storage.workspace import MOVED_MARKER, Workspace

TABLES = (
    "datasets",
    "batches",
    "runs",
    "stage_runs",
    "artifacts",
    "ledger",
    "ledger_events",
    "releases",
    "settings",
    "local_collections",
    "local_vocabularies",
    "online_models",
    "audit_results",
)


@dataclass(frozen=True)
class Moved:
    """What ``migrate`` copied: rows per table."""

    url: str
    rows: dict[str, int]


def _rows(con, table: str) -> tuple[list[str], list[tuple]]:
    cursor = con.execute(f"SELECT * FROM {table}")
    return [c[0] for c in cursor.description], cursor.fetchall()


def _images(names: list[str], rows: list[tuple]) -> list[str]:
    return sorted(chain.image(dict(zip(names, r, strict=True))) for r in rows)


def migrate(workspace: Workspace, url: str) -> Moved:
    """Copy ``workspace``'s DuckDB catalog into the PostgreSQL catalog at ``url``."""
    url = check_url(url)
    source = Catalog(replace(workspace, catalog=None))
    if not workspace.catalog_path.exists():
        raise BadInputError(f"no DuckDB catalog to move at {workspace.catalog_path}")
    target = Catalog(replace(workspace, catalog=url))
    copied: dict[str, int] = {}
    with source.connect():  # the DuckDB lock, held until the marker is written
        with source.transaction() as src, target.transaction() as dst:
            _refuse_unless_idle(src, dst, url)
            for table in TABLES:
                names, rows = _rows(src, table)
                if rows:
                    marks = ", ".join(["%s"] * len(names))
                    dst.raw.cursor().executemany(
                        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})", rows
                    )
                got_names, got = _rows(dst, table)
                if _images(names, rows) != _images(got_names, got):
                    raise BadInputError(
                        f"copying table {table} into {redacted(url)} did not give the same "
                        "rows back; nothing was changed (the copy was rolled back)"
                    )
                copied[table] = len(rows)
            _check_chains(replace(workspace, catalog=url))  # on the copy, before it commits
        marker = workspace.root / MOVED_MARKER  # from here on no process opens the old file
        marker.write_text(redacted(url) + "\n")
        os.chmod(marker, 0o600)
    source.release_idle()  # detached and checkpointed before the files are renamed
    for name in ("catalog.duckdb", "catalog.duckdb.wal"):
        old = workspace.root / name
        if old.exists():
            old.rename(old.with_name(name.replace("catalog.duckdb", "catalog.duckdb.moved")))
    return Moved(redacted(url), copied)


def _refuse_unless_idle(src, dst, url: str) -> None:
    """A run in progress would go on writing to the old catalog; a target with datasets or
    settings is another ledger."""
    if src.execute("SELECT count(*) FROM runs WHERE status = 'running'").fetchone()[0]:
        raise BadInputError(
            "a run of this workspace is in progress (or died: `fdptm recover` closes it): "
            "move the catalog when none is. Nothing was changed."
        )
    if (
        dst.execute("SELECT count(*) FROM datasets").fetchone()[0]
        or dst.execute("SELECT count(*) FROM settings").fetchone()[0]
    ):
        raise BadInputError(
            f"the catalog {redacted(url)} already holds datasets or settings; `fdptm catalog "
            "migrate` moves a workspace into a new, empty catalog (create one with `createdb "
            "NAME`). Nothing was changed."
        )


def _check_chains(workspace: Workspace) -> None:
    """Every dataset's rows verify against its hash chain on the copy (schema version
    ``LATEST``; the release files are not read here)."""
    from fdptm.storage.verification import verify_dataset

    for name in Catalog(workspace).datasets():
        broken = verify_dataset(workspace, name, files=False).problems
        if broken:
            raise BadInputError(
                f"after the copy, dataset {name!r} does not verify on the new catalog (schema "
                f"version {LATEST}): {broken[0]}. Nothing was changed (the copy was rolled back)."
            )
