"""The DuckDB catalog: datasets, batches, runs, stage runs, artifacts, ledger, releases, and
the numbers of the latest audit of each release and mode (internal, like the audit).

Every access goes through ``Catalog.connect()``, which holds an exclusive ``fcntl`` lock on
``catalog.lock`` and a process-wide thread lock for the life of one short connection. That
serialises all readers and writers across threads and processes, so a check-then-insert in
one ``connect()`` block (the ledger's reservation) is atomic, and a crash between blocks
leaves every table in a committed state.
"""

from __future__ import annotations

import fcntl
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import duckdb

from fdptm.errors import BadInputError
from fdptm.storage.workspace import Workspace

SCHEMA = """
CREATE TABLE IF NOT EXISTS datasets (
    name VARCHAR PRIMARY KEY,
    unit VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    cap_epsilon DOUBLE,
    cap_delta DOUBLE,
    cap_unit VARCHAR
);
CREATE TABLE IF NOT EXISTS batches (
    dataset VARCHAR NOT NULL,
    seq INTEGER NOT NULL,
    run_id VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    source_sha256 VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    sha256 VARCHAR NOT NULL,
    n_rows BIGINT NOT NULL,
    n_rejected BIGINT NOT NULL,
    rejects_path VARCHAR,
    has_author_ids BOOLEAN NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (dataset, seq)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    dataset VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    params JSON,
    code_version VARCHAR NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ,
    error VARCHAR
);
CREATE TABLE IF NOT EXISTS stage_runs (
    run_id VARCHAR NOT NULL,
    stage VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ,
    error VARCHAR,
    PRIMARY KEY (run_id, stage)
);
CREATE TABLE IF NOT EXISTS artifacts (
    name VARCHAR PRIMARY KEY,
    run_id VARCHAR NOT NULL,
    stage VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    sha256 VARCHAR NOT NULL,
    visibility VARCHAR NOT NULL,
    n_rows BIGINT,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
    entry_id VARCHAR PRIMARY KEY,
    dataset VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    stage VARCHAR NOT NULL,
    mechanism VARCHAR NOT NULL,
    adjacency VARCHAR NOT NULL,
    epsilon DOUBLE NOT NULL,
    delta DOUBLE NOT NULL,
    state VARCHAR NOT NULL,
    note VARCHAR,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
ALTER TABLE ledger ADD COLUMN IF NOT EXISTS notion VARCHAR DEFAULT 'approximate-dp';
ALTER TABLE ledger ADD COLUMN IF NOT EXISTS gamma DOUBLE DEFAULT 0.0;
ALTER TABLE ledger ADD COLUMN IF NOT EXISTS accounting JSON;
CREATE TABLE IF NOT EXISTS releases (
    run_id VARCHAR PRIMARY KEY,
    dataset VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    epsilon DOUBLE NOT NULL,
    delta DOUBLE NOT NULL,
    adjacency VARCHAR NOT NULL,
    manifest_sha256 VARCHAR NOT NULL,
    released_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_results (
    run_id VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    attack VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    shadows INTEGER NOT NULL,
    confidence DOUBLE NOT NULL,
    auc DOUBLE NOT NULL,
    tpr_at_fpr_0_001 DOUBLE NOT NULL,
    tpr_at_fpr_0_01 DOUBLE NOT NULL,
    epsilon_lower_bound DOUBLE NOT NULL,
    claim_epsilon DOUBLE,
    verdict VARCHAR NOT NULL,
    audited_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, mode, attack)
);
"""

_THREAD_LOCK = threading.RLock()


def now() -> datetime:
    return datetime.now(UTC)


def _open(path) -> duckdb.DuckDBPyConnection:
    """Open the catalog; an unreadable file is a clear error, never a silent re-creation."""
    try:
        return duckdb.connect(str(path))
    except (duckdb.IOException, duckdb.SerializationException, duckdb.InternalException) as exc:
        raise BadInputError(
            f"cannot open the catalog {path}: {exc}. It is damaged or was written by another "
            "DuckDB version; nothing was changed. Restore it from a backup, or open it with the "
            "DuckDB version that wrote it and EXPORT DATABASE."
        ) from exc


class Catalog:
    """Serialised access to ``catalog.duckdb`` in one workspace."""

    def __init__(self, workspace: Workspace):
        self.workspace = workspace

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One locked connection; commits when the block exits normally."""
        with _THREAD_LOCK, open(self.workspace.lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                con = _open(self.workspace.catalog_path)
                try:
                    con.execute(SCHEMA)
                    yield con
                finally:
                    con.close()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A locked connection inside BEGIN/COMMIT, rolled back on any exception."""
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def query(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts."""
        with self.connect() as con:
            cur = con.execute(sql, params or [])
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def execute(self, sql: str, params: list[Any] | None = None) -> None:
        with self.connect() as con:
            con.execute(sql, params or [])

    # ---- datasets and batches -------------------------------------------------------

    def ensure_dataset(self, name: str, unit: str) -> str:
        """Create ``name`` with privacy unit ``unit`` unless it exists; its (existing) unit."""
        with self.transaction() as con:
            con.execute(
                "INSERT INTO datasets (name, unit, created_at) VALUES (?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                [name, unit, now()],
            )
            return con.execute("SELECT unit FROM datasets WHERE name = ?", [name]).fetchone()[0]

    def dataset(self, name: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM datasets WHERE name = ?", [name])
        return rows[0] if rows else None

    def batches(self, dataset: str) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM batches WHERE dataset = ? ORDER BY seq", [dataset])

    # ---- runs and stages --------------------------------------------------------------

    def start_run(self, run_id: str, dataset: str, kind: str, params: dict, version: str) -> None:
        self.execute(
            "INSERT INTO runs (run_id, dataset, kind, status, params, code_version, started_at)"
            " VALUES (?, ?, ?, 'running', ?, ?, ?)",
            [run_id, dataset, kind, json.dumps(params, default=str), version, now()],
        )

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> None:
        self.execute(
            "UPDATE runs SET status = ?, finished_at = ?, error = ? WHERE run_id = ?",
            [status, now(), error, run_id],
        )

    def start_stage(self, run_id: str, stage: str) -> None:
        self.execute(
            "INSERT OR REPLACE INTO stage_runs (run_id, stage, status, started_at)"
            " VALUES (?, ?, 'running', ?)",
            [run_id, stage, now()],
        )

    def finish_stage(self, run_id: str, stage: str, status: str, error: str | None = None) -> None:
        self.execute(
            "UPDATE stage_runs SET status = ?, finished_at = ?, error = ?"
            " WHERE run_id = ? AND stage = ?",
            [status, now(), error, run_id, stage],
        )

    # ---- artifacts --------------------------------------------------------------------

    def register_artifact(
        self,
        name: str,
        run_id: str,
        stage: str,
        path: str,
        sha256: str,
        visibility: str,
        n_rows: int | None = None,
        con: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        """Record an artifact with its producer run and content hash.

        ``con``: an open connection (inside a transaction) to join; else one of its own.
        """
        if visibility not in ("internal", "public"):
            raise ValueError(f"visibility must be 'internal' or 'public', got {visibility!r}")
        sql = "INSERT OR REPLACE INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        params = [name, run_id, stage, path, sha256, visibility, n_rows, now()]
        if con is not None:
            con.execute(sql, params)
        else:
            self.execute(sql, params)

    def record_audit(self, report: dict) -> None:
        """One row per attack of an audit report, replacing the previous audit's rows."""
        run_id, mode = report["run_id"], report["mode"]
        at = now()
        with self.transaction() as con:
            con.execute("DELETE FROM audit_results WHERE run_id = ? AND mode = ?", [run_id, mode])
            for name, r in report["attacks"].items():
                con.execute(
                    "INSERT INTO audit_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        run_id,
                        mode,
                        name,
                        r["scope"],
                        report["shadows"],
                        report["confidence"],
                        r["auc"],
                        r["tpr_at_fpr_0.001"],
                        r["tpr_at_fpr_0.01"],
                        r["epsilon_lower_bound"]["epsilon"],
                        report["bounds"][r["scope"]]["claim"],
                        report["verdict"],
                        at,
                    ],
                )

    def artifact(self, name: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM artifacts WHERE name = ?", [name])
        return rows[0] if rows else None
