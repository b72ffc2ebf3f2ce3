"""The catalog on PostgreSQL: one database shared by fdptm processes on several hosts.

``FDPTM_CATALOG=postgresql://user@host:5432/db`` (or ``--catalog``) puts the catalog and the
ledger there instead of the workspace's DuckDB file; the workspace directory keeps the
local copies of artifacts (the artifact store shares them between hosts) and the signing
key. psycopg 3 speaks to it: the catalog's SQL is plain SQL through one small connection
interface (``execute`` with ``?`` parameters, ``fetchone``, ``fetchall``, ``description``),
which psycopg's cursor offers as it is once ``?`` is written ``%s``; SQLAlchemy Core would
mean rewriting every statement as expression objects for no gain over two dialects whose
SQL differs in type names only (``storage.schema``).

Serialisation. The DuckDB catalog serialises every block of catalog work across processes
with a file lock, so a check-then-insert (the ledger's reservation, the next batch number)
is atomic. Here every outermost block is one PostgreSQL transaction that first takes one
transaction-level advisory lock (``pg_advisory_xact_lock``), shared by every host: the same
serial order, across machines, held for one block of catalog work (milliseconds; longer
when the block checks or fetches a file), released by the server at commit, at
rollback, or when the connection dies (a worker killed with SIGKILL holds nothing). A
nested ``transaction()`` is a savepoint, so an exception it raises undoes its own work
only, as in DuckDB.

Passwords do not belong in the URL (it is shown in run parameters and error messages):
libpq reads them from ``PGPASSWORD`` or ``~/.pgpass``, and a URL that carries one is
refused.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from fdptm.errors import BadInputError, CatalogUnavailableError

LOCK_KEY = 0x66_64_70_74_6D  # "fdptm": the one advisory lock every catalog block takes
CONNECT_TIMEOUT_SECONDS = 10
SCHEMES = ("postgresql", "postgres")


def driver() -> Any:
    """psycopg, imported when a PostgreSQL catalog is first used (an optional dependency)."""
    try:
        import psycopg
    except ImportError:
        raise BadInputError(
            "a PostgreSQL catalog needs psycopg: pip install 'fdptm[postgresql]' (or leave "
            "--catalog and $FDPTM_CATALOG unset to use the workspace's DuckDB file)"
        ) from None
    return psycopg


def check_url(url: str) -> str:
    """``url`` if it names a PostgreSQL database without a password, else BadInputError."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise BadInputError(
            f"--catalog / $FDPTM_CATALOG must be a postgresql:// URL (got scheme "
            f"{parts.scheme or 'none'!r}); leave it unset for the workspace's own DuckDB catalog"
        )
    query = {k.lower() for k, _ in parse_qsl(parts.query, keep_blank_values=True)}
    if parts.password is not None or query & {"password", "sslpassword"}:
        raise BadInputError(
            "the catalog URL carries a password; it would be shown in run parameters and "
            "messages. Drop it from the URL and give it to libpq instead (PGPASSWORD, or a "
            "~/.pgpass line host:port:db:user:password, mode 0600)"
        )
    return url


def redacted(url: str) -> str:
    """``url`` without its query string (which may name files or options), for messages."""
    return url.split("?", 1)[0]


@lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """DuckDB-style ``?`` placeholders as psycopg's ``%s``; a literal ``%`` doubled.

    A ``?`` inside a quoted literal is text, not a placeholder.
    """
    out, quoted = [], False
    for ch in sql:
        if ch == "'":
            quoted = not quoted
        if ch == "%":
            out.append("%%")
        elif ch == "?" and not quoted:
            out.append("%s")
        else:
            out.append(ch)
    return "".join(out)


# READ COMMITTED pinned (the lock-then-read design needs each statement to see what the
# previous holder of the lock committed; a database default of REPEATABLE READ would read a
# snapshot taken before the lock was granted); a session idle inside a transaction (a
# stopped process holding the catalog's lock) is ended after 30 minutes (a block that checks
# or fetches large files stays inside it for minutes); keepalives find a
# dead peer within about a minute instead of two hours
SESSION_OPTIONS = (
    "-c default_transaction_isolation=read\\ committed"
    " -c idle_in_transaction_session_timeout=1800000"
    " -c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3"
)


def connect(url: str) -> Any:
    """A new autocommit connection to the catalog at ``url``, with ``SESSION_OPTIONS``."""
    psycopg = driver()
    try:
        raw = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            options=SESSION_OPTIONS,
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
    except psycopg.Error as exc:
        raise unavailable(url, exc) from None
    raw.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    return raw


class Connection:
    """The part of DuckDB's connection interface the catalog uses, on a psycopg connection."""

    def __init__(self, raw: Any):
        self.raw = raw

    def execute(self, sql: str, params: list[Any] | tuple[Any, ...] | None = None) -> Any:
        if not params:  # psycopg sends a query without parameters as it is
            return self.raw.execute(sql)
        return self.raw.execute(translate(sql), list(params))


class Session:
    """This process's connection to one PostgreSQL catalog, and its open block if any.

    Only the thread holding ``lock`` touches the other fields. The connection stays open
    between blocks (a connection costs a TCP and authentication round trip; an idle one
    holds no lock), and is re-opened when the server dropped it.
    """

    def __init__(self, url: str):
        self.url = url
        self.lock = threading.RLock()
        self.raw: Any = None
        self.depth = 0
        self.con: Connection | None = None
        self.block: Any = None
        self.in_transaction = False
        self.rollback_only = False
        self.migrated = False

    def _connect(self) -> Any:
        if self.raw is not None and not self.raw.closed and not self.raw.broken:
            return self.raw
        self.raw = connect(self.url)
        self.migrated = False
        return self.raw

    def open(self) -> Connection:
        """Begin the outermost block: a transaction holding the catalog's advisory lock,
        with the schema brought up to date once per connection."""
        psycopg = driver()

        from fdptm.storage import schema
        from fdptm.storage.catalog import now

        raw = self._connect()
        try:
            self.block = raw.transaction()
            self.block.__enter__()
            raw.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
            con = self.con = Connection(raw)
            if not self.migrated:
                schema.migrate(con, "postgresql", redacted(self.url), now())
                self.migrated = True
            return con
        except psycopg.OperationalError as exc:
            self.discard()
            raise unavailable(self.url, exc) from None
        except BaseException:
            self.close(error=True)
            raise

    def close(self, error: bool = False) -> None:
        """End the outermost block: commit, or roll back after an error."""
        psycopg = driver()

        block, self.block = self.block, None
        self.in_transaction = self.rollback_only = False
        if block is None:
            return
        try:
            if error:
                with suppress(psycopg.Error):
                    block.__exit__(RuntimeError, RuntimeError("rolled back"), None)
            else:
                block.__exit__(None, None, None)
        except psycopg.OperationalError as exc:
            self.discard()
            raise unavailable(self.url, exc) from None

    def discard(self) -> None:
        """Drop the connection (after the server went away); the next block reconnects."""
        raw, self.raw, self.block = self.raw, None, None
        if raw is not None:
            with suppress(Exception):
                raw.close()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested transaction (SAVEPOINT) inside the open block."""
        with self.raw.transaction():
            yield


_HOLDERS: dict[tuple[str, int], Any] = {}


def hold(url: str, key: int) -> bool:
    """Take the session-level advisory lock ``key`` on a connection of its own, unless
    another session holds it: a run's ownership (``storage.recovery``), which the server
    releases when its owner dies, on any host. Its own connection, so that the catalog
    connection being dropped and re-opened (after a database error) never loses it."""
    raw = connect(url)
    if raw.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0]:
        _HOLDERS[url, key] = raw
        return True
    raw.close()
    return False


def unhold(url: str, key: int) -> None:
    raw = _HOLDERS.pop((url, key), None)
    if raw is not None:
        with suppress(Exception):
            raw.close()  # the server releases the lock with the session


def held_elsewhere(url: str, key: int) -> bool:
    """Whether another session holds ``key``: taken and given back at once when free, on
    this process's catalog connection."""
    psycopg = driver()
    session = registry.session(url)
    with session.lock:
        raw = session._connect()
        try:
            if raw.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0]:
                raw.execute("SELECT pg_advisory_unlock(%s)", [key])
                return False
            return True
        except psycopg.OperationalError as exc:
            session.discard()
            raise unavailable(url, exc) from None


def explained(exc: Exception) -> str | None:
    """What to tell the user about a database error of the PostgreSQL catalog (a missing
    privilege, a constraint, a server-side limit), or None for other exceptions."""
    if not type(exc).__module__.startswith("psycopg"):
        return None
    text = re.sub(r"\s+", " ", str(exc)).strip()
    return (
        f"the PostgreSQL catalog refused this command ({type(exc).__name__}: {text}); what it "
        "had not committed was rolled back. A missing privilege means the database role "
        "cannot do what the command needs (an auditor's read-only role can run `fdptm verify` "
        "and `fdptm budget`); `fdptm catalog status` checks the connection."
    )


def unavailable(url: str, exc: Exception) -> CatalogUnavailableError:
    text = re.sub(r"\s+", " ", str(exc)).strip()
    return CatalogUnavailableError(
        f"cannot use the PostgreSQL catalog {redacted(url)} ({text}). Nothing was changed. "
        "Check that the server is running and reachable from this host, the user's "
        "credentials (PGPASSWORD or ~/.pgpass) and that the database exists "
        "(`createdb NAME`); `fdptm catalog status` checks the connection."
    )


class Registry:
    """One session per catalog URL in this process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[str, Session] = {}

    def session(self, url: str) -> Session:
        with self.lock:
            found = self.sessions.get(url)
            if found is None:
                found = self.sessions[url] = Session(url)
            return found


registry = Registry()
_inherited: list[Any] = []


def _after_fork_in_child() -> None:
    """A forked child must not use the parent's connections, nor end them: libpq's goodbye
    on the shared socket would close the parent's session. The child points its copies of
    the sockets at /dev/null, keeps the objects referenced, and starts afresh."""
    global registry
    for raw in [*(s.raw for s in registry.sessions.values()), *_HOLDERS.values()]:
        if raw is not None and not raw.closed:
            with suppress(OSError):
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, raw.fileno())
                os.close(null)
            _inherited.append(raw)
    registry = Registry()
    _HOLDERS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
