"""``fdptm catalog ...``: where a workspace's catalog and ledger live, and moving them.

* ``fdptm catalog status``: the catalog in use (the workspace's DuckDB file, or the
  PostgreSQL database of ``--catalog`` / ``$FDPTM_CATALOG``), its schema migrations, its
  datasets; it brings the schema up to date (``storage.schema``).
* ``fdptm catalog migrate --to postgresql://...``: move the workspace's DuckDB catalog into
  a new PostgreSQL catalog, every row checked (``storage.transfer``).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from fdptm.storage.workspace import Workspace


def add_parser(sub, workspace) -> None:
    cat = sub.add_parser(
        "catalog", help="where the catalog and ledger live: status, move to PostgreSQL"
    )
    cmds = cat.add_subparsers(dest="catalog_command", required=True)
    status = cmds.add_parser("status", help="the catalog in use, its schema version, datasets")
    workspace(status)
    move = cmds.add_parser(
        "migrate",
        help="move the workspace's DuckDB catalog into a new PostgreSQL catalog",
        description="Copies every row (checked row by row, each dataset's hash chain "
        "verified on the copy) and the workspace's secret key in one transaction; then the "
        "workspace refuses to open its old DuckDB file.",
    )
    move.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="postgresql://user@host:port/database (a new, empty database; the password "
        "in PGPASSWORD or ~/.pgpass)",
    )
    workspace(move)


def cmd_catalog(args: argparse.Namespace) -> int:
    return {"status": _status, "migrate": _migrate}[args.catalog_command](args)


def _status(args: argparse.Namespace) -> int:
    from fdptm.storage.catalog import Catalog

    catalog = Catalog(Workspace.resolve(args.workspace).require())
    rows = catalog.query("SELECT version, name, applied_at FROM schema_migrations ORDER BY 1")
    print(f"catalog: {catalog.where} ({catalog.dialect})")
    for r in rows:
        print(f"  schema {r['version']}: {r['name']} (applied {r['applied_at']:%Y-%m-%d %H:%M})")
    names = sorted(catalog.datasets())
    print(f"datasets: {', '.join(names) if names else 'none'}")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from fdptm.storage.transfer import migrate

    workspace = replace(Workspace.resolve(args.workspace), catalog=None)
    moved = migrate(workspace, args.to)
    total = sum(moved.rows.values())
    print(f"moved the catalog of {workspace.root} to {moved.url}: {total} rows")
    for table, n in moved.rows.items():
        if n:
            print(f"  {table}: {n}")
    key = workspace.root / "secret.key"
    print(
        f"every row was read back and compared, and each dataset's ledger verified. From now "
        f"on give --catalog {moved.url} (or set FDPTM_CATALOG) to use this workspace; its "
        "old file is catalog.duckdb.moved. Every host of this catalog needs the same secret "
        + (
            f"key: copy {key} to each (mode 0600) and set FDPTM_SECRET_KEY to it."
            if key.exists()
            else "key: make one with `(umask 077; python -c 'import secrets; "
            "print(secrets.token_hex(32))' > secret.key)`, copy it to each host and set "
            "FDPTM_SECRET_KEY to it."
        )
    )
    return 0
