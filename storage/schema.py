"""The catalog's schema as versioned migrations, one list for DuckDB and PostgreSQL.

Each migration is applied once, in order, inside the transaction that opens a writable
catalog, and recorded in ``schema_migrations`` (version, name, applied_at): a catalog says
which migrations made it, ``fdptm catalog status`` prints them, and a catalog written by a
newer fdptm (a version this code does not know) is refused rather than written to.

Alembic would need SQLAlchemy models of every table, and the catalog speaks plain SQL
through one small connection interface; so migrations are this list. The SQL is written
once with two type names that differ between the dialects: ``{double}`` (DuckDB's DOUBLE,
PostgreSQL's DOUBLE PRECISION: both IEEE binary64, so a budget stored as a float reads back
bit for bit) and ``{json}`` (DuckDB's JSON, text in PostgreSQL: the code parses JSON
itself, and text keeps the bytes the hash chain covers). Migration 1 is the schema of
catalogs created before migrations were recorded: every statement in it is idempotent
(``IF NOT EXISTS``), so it applies to those catalogs as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fdptm.errors import CatalogDamagedError
from fdptm.storage import chain

DIALECTS = {
    "duckdb": {"double": "DOUBLE", "json": "JSON"},
    "postgresql": {"double": "DOUBLE PRECISION", "json": "TEXT"},
}

_V1 = """
CREATE TABLE IF NOT EXISTS datasets (
    name VARCHAR PRIMARY KEY,
    unit VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    cap_epsilon {double},
    cap_delta {double},
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
    params {json},
    code_version VARCHAR NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ,
    error VARCHAR
);
ALTER TABLE datasets ADD COLUMN IF NOT EXISTS public BOOLEAN DEFAULT FALSE;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS owner VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS calibration {json};
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
    epsilon {double} NOT NULL,
    delta {double} NOT NULL,
    state VARCHAR NOT NULL,
    note VARCHAR,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
ALTER TABLE ledger ADD COLUMN IF NOT EXISTS notion VARCHAR DEFAULT 'approximate-dp';
ALTER TABLE ledger ADD COLUMN IF NOT EXISTS gamma {double} DEFAULT 0.0;
ALTER TABLE ledger ADD COLUMN IF NOT EXISTS accounting {json};
ALTER TABLE ledger ADD COLUMN IF NOT EXISTS started_at TIMESTAMPTZ;
ALTER TABLE ledger ADD COLUMN IF NOT EXISTS scope {json};
ALTER TABLE batches ADD COLUMN IF NOT EXISTS timed BOOLEAN DEFAULT FALSE;
ALTER TABLE datasets ADD COLUMN IF NOT EXISTS author_buckets INTEGER;
ALTER TABLE batches ADD COLUMN IF NOT EXISTS first_day INTEGER;
ALTER TABLE batches ADD COLUMN IF NOT EXISTS last_day INTEGER;
CREATE TABLE IF NOT EXISTS releases (
    run_id VARCHAR PRIMARY KEY,
    dataset VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    epsilon {double} NOT NULL,
    delta {double} NOT NULL,
    adjacency VARCHAR NOT NULL,
    manifest_sha256 VARCHAR NOT NULL,
    released_at TIMESTAMPTZ NOT NULL
);
ALTER TABLE artifacts ADD COLUMN IF NOT EXISTS stored_in VARCHAR;
CREATE TABLE IF NOT EXISTS settings (
    key VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS local_collections (
    dataset VARCHAR PRIMARY KEY,
    vocabulary_fingerprint VARCHAR NOT NULL,
    vocabulary {json} NOT NULL,
    flip_numerator BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS local_vocabularies (
    fingerprint VARCHAR PRIMARY KEY,
    source VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS online_models (
    dataset VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    prior VARCHAR NOT NULL,
    params {json} NOT NULL,
    state_path VARCHAR NOT NULL,
    state_sha256 VARCHAR NOT NULL,
    last_batch INTEGER NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (dataset, name)
);
CREATE TABLE IF NOT EXISTS audit_results (
    run_id VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    attack VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    shadows INTEGER NOT NULL,
    confidence {double} NOT NULL,
    auc {double} NOT NULL,
    tpr_at_fpr_0_001 {double} NOT NULL,
    tpr_at_fpr_0_01 {double} NOT NULL,
    epsilon_lower_bound {double} NOT NULL,
    claim_epsilon {double},
    verdict VARCHAR NOT NULL,
    audited_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, mode, attack)
);
"""

_V2 = """
CREATE TABLE IF NOT EXISTS ledger_events (
    dataset VARCHAR NOT NULL,
    seq BIGINT NOT NULL,
    kind VARCHAR NOT NULL,
    subject VARCHAR NOT NULL,
    body VARCHAR NOT NULL,
    prev_hash VARCHAR NOT NULL,
    hash VARCHAR NOT NULL,
    PRIMARY KEY (dataset, seq)
);
"""


@dataclass(frozen=True)
class Migration:
    """One step of the schema: ``sql`` in the dialect-neutral form above, then ``after``
    (a data step on the same connection) if any."""

    version: int
    name: str
    sql: str
    after: Callable[[Any], None] | None = None

    def render(self, dialect: str) -> list[str]:
        """The statements of this step in ``dialect``."""
        text = self.sql.format(**DIALECTS[dialect])
        return [s.strip() for s in text.split(";") if s.strip()]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the catalog before versioned migrations", _V1),
    Migration(2, "the ledger's hash chain (issue 29)", _V2, chain.adopt),
)
LATEST = MIGRATIONS[-1].version

_BOOKKEEPING = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name VARCHAR NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL
)"""


def applied(con: Any) -> int:
    """The highest migration ``con``'s catalog has (0 for a catalog without the table).
    Reads only: a role that may only read the catalog (an auditor's) gets its answer."""
    (tables,) = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'"
    ).fetchone()
    if not tables:
        return 0
    (version,) = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(version)


def migrate(con: Any, dialect: str, where: str, now: Any) -> list[int]:
    """Apply every migration newer than the catalog's, in order, on ``con`` (the caller's
    transaction); the versions applied. A catalog newer than this code is refused."""
    have = applied(con)
    if have > LATEST:
        raise CatalogDamagedError(
            f"the catalog {where} has schema version {have}, written by a newer fdptm than "
            f"this one (which knows versions up to {LATEST}); nothing was changed. Upgrade "
            "fdptm on this host (`pip install -U fdptm`) to use it."
        )
    if have == LATEST:
        return []
    con.execute(_BOOKKEEPING)
    done = []
    for step in MIGRATIONS:
        if step.version <= have:
            continue
        for statement in step.render(dialect):
            con.execute(statement)
        if step.after is not None:
            step.after(con)
        con.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            [step.version, step.name, now],
        )
        done.append(step.version)
    return done
