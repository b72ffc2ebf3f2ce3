"""The DuckDB catalog: datasets, batches, runs, stage runs, artifacts, ledger, releases, and
the numbers of the latest audit of each release and mode (internal, like the audit).

Concurrency. Several processes use one workspace at once (a release running for minutes,
``fdptm budget`` beside it, two ingests), and DuckDB lets only one process hold the file
open read-write. Every access therefore goes through ``Catalog.connect()``, which holds an
``fcntl`` lock on ``catalog.lock`` (exclusive; shared on a read-only workspace) and a
per-file thread lock for exactly as long as the catalog file is open. All readers and
writers are serialised across threads and processes, so a check-then-insert in one
``connect()``/``transaction()`` block (the ledger's reservation) is atomic, and a crash
between blocks leaves every table in a committed state.

Cost per call. Creating a DuckDB database instance costs about 15 ms and the schema DDL a
few more, while attaching a file to an existing instance costs about 2 ms. So each process
keeps, per catalog file, one in-memory DuckDB instance; an outermost block takes the lock
and ATTACHes the file, and after its end (see Linger) DETACHes it (DuckDB checkpoints and
closes the file) and releases the lock. The DDL runs once per process per file (per inode; a
file this process creates always gets it). Blocks nest: an inner ``connect()`` or
``transaction()`` in the same thread joins the outer one (and its lock) instead of
deadlocking on its own lock, so a burst of calls inside one ``transaction()`` pays one
attach and one commit. On 2026-11-22 this made a read call about 5 times cheaper than an
open per call (26 ms to 5 ms; under 1 ms inside a block), a write call about twice (its
commit's fsync and the checkpoint remain): ``benchmarks/catalog_results.md``, where the
file's storage format (``STORAGE_VERSION``) took another quarter off since.

Linger. After an outermost block the file stays attached, and the lock held, for
``LINGER_SECONDS`` (50 ms): a block of this process that starts within that time goes on
with the attachment (if the path is still the same file), and otherwise a thread of this
process detaches the file and releases the lock (``_Lingerer``). A run of reused blocks
keeps the file at most ``MAX_HOLD_SECONDS`` (0.5 s) from its attach: the first block to end
after that releases the lock at once. A release's blocks mostly come a few ms apart, so this
saves most of its attaches and checkpoints: a 100-document release attaches the file 5
times, not 47. What it costs: another process usually waits for the lock at most about 0.5 s
longer than the blocks themselves take (``flock`` is not fair, and the thread needs the GIL:
a computation that holds it, such as a numba kernel compiled without ``nogil``, right after
a block delays the release until it ends); a process suspended as a whole (Ctrl-Z, SIGSTOP)
within 50 ms of a block holds the catalog until it resumes, as one suspended inside a block
always did. Lingering also ends on ``release_idle`` (waiting for a block another thread
runs), which runs at a normal exit, which ``fdptm.faults`` calls before it stops the process
and which code that reads, copies or renames the file itself calls first; and, without
waiting, before a fork. A process that dies (SIGKILL, ``os._exit`` without its exit
handlers) leaves its commits in the WAL, which the next attach replays, as a crash inside a
block always did. While the file lingers its WAL holds the blocks' commits (DuckDB syncs the
WAL at each commit); a writable session makes a new WAL private (0600) and syncs its
directory entry before lingering, and detaches at once if it cannot.

Faults. A damaged catalog (truncated, garbage, unreadable blocks), whether DuckDB notices
at open, in the DDL or at a later query, is a ``CatalogDamagedError`` saying nothing was
changed and how to restore it; it is never re-created, and a missing catalog in a
workspace that holds data is refused the same way (a new one would forget the spent
budget). A workspace this user cannot write is opened read-only: reads work, writes are a
``WorkspaceNotWritableError``. A write that hits a full disk is rolled back and is a
``DiskFullError``.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import json
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import duckdb

from fdptm.errors import (
    CatalogBusyError,
    CatalogDamagedError,
    DiskFullError,
    FdptmError,
    WorkspaceNotWritableError,
)
from fdptm.storage import chain, postgres, schema
from fdptm.storage.workspace import (
    FILE_MODE,
    MOVED_MARKER,
    NOT_WRITABLE_ERRNOS,
    Workspace,
    free_space,
    warn_if_exposed,
)

BUSY_TIMEOUT_SECONDS = 10.0
STORAGE_VERSION = "v1.2.0"
"""The catalog file's storage format: DuckDB 1.2's, not the 1.0 format DuckDB writes unless
told, whose metadata is slower to load at ATTACH and to write back at the checkpoint. Every
outermost block attaches and detaches the file, so this is most of a block's cost: a read
call took 0.71-0.72x the time and a write call 0.73-0.78x (3.2-4.3 ms against 4.4-6.1, and
9.4-10.1 ms against 12.9-13.0; two runs, DuckDB 1.5.6, 2026-11-29,
``benchmarks/catalog_results.md``). A catalog in the 1.0 format is
converted by the first block that writes to it (DuckDB's own upgrade, at that block's
checkpoint; a schema migration is such a write); blocks that only read leave it as it is. A
catalog already in a newer format (written by a later fdptm, or by hand) is attached in its
own format: DuckDB refuses to lower a file's format. Every DuckDB that fdptm allows
(>= 1.4) reads both; DuckDB 1.1 and older (a shell for looking inside, say) cannot open a
converted catalog."""
DISABLED_COMPRESSION = "fsst,dictionary,dict_fsst"
"""DuckDB's string compressions, which the catalog's instances never use (``dict_fsst`` is
the one DuckDB picks in the storage formats after 1.2, which a catalog a later fdptm wrote
keeps). At every checkpoint (each detach after a block that wrote) DuckDB rewrites the
changed tables' row groups and analyses their string columns for these methods.
Registering an artifact (a path and a hash) in a catalog of 200 past runs took 12.0 ms a
call against 30.8 ms with them; a read of the ``datasets`` table took the same time (DuckDB
1.5.6, 2026-11-29 22:22, ``benchmarks/catalog_results.md``): a detach holds ``catalog.lock``
that much less. A whole release did not measurably change. A file written with them is
still read as it is: the setting only chooses how new row groups are stored."""
MAX_INSTANCES = 4
LINGER_SECONDS = 0.05
"""How long the catalog file stays attached (and ``catalog.lock`` held) after an outermost
block ends, for the next block of this process to reuse (``_Session.close``). A release
runs 47 blocks, most of them under 10 ms apart (2026-11-29, a 100-document release:
42 of its 46 gaps were under 10 ms, two were 17 and 44 ms, and two, around training, 0.1
and 0.4 s); attaching and detaching for each one was about two thirds of its catalog time
(py-spy of served releases: 0.87 of 1.31 s profiled)."""
MAX_HOLD_SECONDS = 0.5
"""The longest a run of reused blocks keeps the file attached: a block that ends later than
this after the attach releases the lock at once, so that blocks a few ms apart (with an
upload or a computation between them) never hold the catalog for long."""
_ALIAS = "fdptm_catalog"
_NEWER_FORMAT_TEXT = "storage version of an existing database cannot be lowered"
_NOT_WRITABLE_TEXT = ("Permission denied", "Read-only file system")
_NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded")


def now() -> datetime:
    return datetime.now(UTC)


def _damaged(path: Path, exc: Exception) -> CatalogDamagedError:
    return CatalogDamagedError(
        f"the catalog {path} is damaged and cannot be read (DuckDB: {exc}). Nothing was "
        "changed, and fdptm will not re-create it (a new catalog would forget the privacy "
        "ledger). Restore catalog.duckdb from a backup, with catalog.duckdb.wal if the backup "
        "has one (if it has none, delete a catalog.duckdb.wal left beside it: DuckDB would "
        "replay it onto the restored file); if it was written by another DuckDB version, "
        "EXPORT DATABASE with that version and IMPORT DATABASE with this one."
    )


def _translate(exc: duckdb.Error, workspace: Workspace) -> FdptmError | None:
    """The workspace error a DuckDB error stands for, or None for a plain SQL error."""
    path, text = workspace.catalog_path, str(exc)
    if any(t in text for t in _NO_SPACE_TEXT):
        return DiskFullError(
            f"no space left to write the catalog {path} (DuckDB: {exc}; {free_space(path)} "
            "free on that device): the change was rolled back and nothing stored was lost. "
            "Free disk space (or raise the quota) and run the command again."
        )
    if isinstance(exc, duckdb.InvalidInputException) and "read-only mode" in text:
        return WorkspaceNotWritableError(
            f"this command must write to the catalog {path}, but the workspace "
            f"{workspace.root} is not writable by this user (a read-only file system, or "
            "another owner), so the catalog was opened read-only. Nothing was changed. Run "
            "the command as the workspace's owner, or on a writable copy; `fdptm budget` "
            "without --cap works on a read-only workspace."
        )
    if isinstance(exc, duckdb.IOException):
        if "Could not set lock" in text:
            return CatalogBusyError(
                f"the catalog {path} is held open by another program (not an fdptm command: "
                "those wait for catalog.lock), for example a DuckDB shell. Nothing was "
                f"changed. Close it and run the command again (DuckDB: {exc})."
            )
        if any(t in text for t in _NOT_WRITABLE_TEXT):
            return WorkspaceNotWritableError(
                f"cannot write the catalog {path} (DuckDB: {exc}): the workspace is not "
                "writable by this user. Nothing was changed. Run the command as the "
                "workspace's owner, or on a writable copy."
            )
        return _damaged(path, exc)
    damaged_types = (duckdb.SerializationException, duckdb.InternalException, duckdb.FatalException)
    if isinstance(exc, damaged_types) or "Corrupt database file" in text:
        return _damaged(path, exc)
    return None


def _raise_translated(exc: duckdb.Error, workspace: Workspace) -> NoReturn:
    """Raise the workspace error ``exc`` stands for, else ``exc`` itself."""
    error = _translate(exc, workspace)
    if error is None:
        raise exc
    raise error from exc


class _Session:
    """This process's access to one catalog file: its DuckDB instance and, inside an
    outermost block, the lock and the attached file.

    Only the thread holding ``lock`` touches the other fields.
    """

    def __init__(self, key: str, workspace: Workspace):
        self.key = key
        self.workspace = workspace
        self.path = workspace.catalog_path
        self.wal = self.path.with_name(self.path.name + ".wal")
        self.lock = threading.RLock()
        self.db: duckdb.DuckDBPyConnection | None = None
        self.fd: int | None = None
        self.depth = 0
        self.in_transaction = False
        self.rollback_only = False
        self.schema_of: tuple[int, int] | None = None
        self.attached: tuple[int, int] | None = None
        self.writable = False
        self.attached_at = 0.0
        self.wal_synced: int | None = None
        self.broken = False
        self.lingering = False
        self.until = 0.0

    def open(self) -> None:
        """Take the lock, then attach the file (read-only when we cannot write to it); or,
        lingering from the last block, go on with the file attached already, if it is
        still the workspace's catalog."""
        if self.lingering:
            self.lingering = False
            try:
                current = self._still_current()
            except BaseException:
                self.release(discard=True)
                raise
            if current:
                return
            self.release()
        root = self.workspace.root
        if not root.is_dir():
            self.workspace.require()
        writable = os.access(root, os.W_OK) and (
            not self.path.exists() or os.access(self.path, os.W_OK)
        )
        self.fd, writable = self._lock_file(writable)
        try:
            if self.fd is not None:
                fcntl.flock(self.fd, fcntl.LOCK_EX if writable else fcntl.LOCK_SH)
            self._attach(writable)
        except BaseException:
            self.close(discard=True)
            raise
        warn_if_exposed(root)

    def _lock_file(self, writable: bool) -> tuple[int | None, bool]:
        """The lock file's descriptor (None if we cannot have one) and whether we write.

        Read-only when it cannot be opened for writing: flock works on a read-only
        descriptor. Without a lock file we may open (missing and not creatable here, or
        private to its owner), DuckDB's own file lock still keeps a read-only open from
        overlapping a writer: a conflict is retried, then reported as busy.
        """
        lock_path = self.workspace.lock_path
        if writable:
            try:
                return os.open(lock_path, os.O_RDWR | os.O_CREAT, FILE_MODE), True
            except OSError as exc:
                if exc.errno not in NOT_WRITABLE_ERRNOS:
                    raise
        try:
            return os.open(lock_path, os.O_RDONLY), False
        except OSError as exc:
            if exc.errno != errno.ENOENT and exc.errno not in NOT_WRITABLE_ERRNOS:
                raise
            return None, False

    def _attach(self, writable: bool) -> None:
        """Attach the file under the lock; run the DDL once per process per file.

        A file is known by its device and inode, and one created by this very attach
        always gets the DDL (a deleted catalog's inode number may be reused).
        """
        self.workspace.check_not_moved()
        created = not self.path.exists()
        if created:
            if not writable:
                self.workspace.require()
            if self.workspace.holds_data():
                raise CatalogDamagedError(
                    f"the catalog {self.path} is missing, but the workspace holds ingested "
                    "data, releases or secret.key: a new catalog would start an empty privacy "
                    "ledger and forget the budget already spent. Nothing was changed. Restore "
                    "catalog.duckdb from a backup, or start over in a new workspace."
                )
        if self.db is None:
            self.db = duckdb.connect(":memory:")
            self.db.execute(f"SET disabled_compression_methods = '{DISABLED_COMPRESSION}'")
        _registry.used(self)
        quoted = str(self.path).replace("'", "''")
        deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
        storage = f" (STORAGE_VERSION '{STORAGE_VERSION}')"
        while True:
            options = storage if writable else " (READ_ONLY)"
            try:
                self.db.execute(f"ATTACH '{quoted}' AS {_ALIAS}{options}")
                break
            except duckdb.Error as exc:
                error = _translate(exc, self.workspace)
                if storage and _NEWER_FORMAT_TEXT in str(exc):
                    storage = ""  # a newer format than ours: DuckDB keeps it, and so do we
                elif isinstance(error, CatalogBusyError) and time.monotonic() < deadline:
                    time.sleep(0.05)
                elif isinstance(error, WorkspaceNotWritableError) and writable:
                    writable = False
                else:
                    _raise_translated(exc, self.workspace)
        try:
            self.db.execute(f"USE {_ALIAS}")
            if created:
                os.chmod(self.path, FILE_MODE)
            info = os.stat(self.path)
            self.attached = (info.st_dev, info.st_ino)
            self.writable, self.attached_at, self.wal_synced = writable, time.monotonic(), None
            if writable and (created or self.schema_of != self.attached):
                self.db.execute("BEGIN TRANSACTION")
                schema.migrate(self.db, "duckdb", str(self.path), now())
                self.db.execute("COMMIT")
                self.schema_of = self.attached
        except duckdb.Error as exc:
            _raise_translated(exc, self.workspace)

    def _still_current(self) -> bool:
        """The attached file is still the workspace's catalog (not moved, replaced or
        deleted since the last block), so a lingering attachment may be reused."""
        try:
            info = os.stat(self.path)
            moved = (self.workspace.root / MOVED_MARKER).exists()
        except OSError:
            return False
        return self.db is not None and self.attached == (info.st_dev, info.st_ino) and not moved

    def close(self, discard: bool = False) -> None:
        """End an outermost block: linger (keep the file attached and the lock held for
        ``LINGER_SECONDS``, for this process's next block), or release the lock at once:
        after an error (closing the instance), a run of blocks longer than
        ``MAX_HOLD_SECONDS``, or without a lock of ours."""
        discard = discard or self.broken
        self.in_transaction, self.rollback_only, self.broken = False, False, False
        try:
            if (
                discard
                or self.db is None
                or self.fd is None
                or time.monotonic() - self.attached_at > MAX_HOLD_SECONDS
                or not self._secure_wal()
            ):
                self.release(discard)
                return
            self.lingering = True
            self.until = time.monotonic() + LINGER_SECONDS
            if not _lingerer.wake(self):
                self.release()
        except BaseException:
            self.release(discard=True)
            raise

    def _secure_wal(self) -> bool:
        """While the file lingers the blocks' commits are in its WAL (DuckDB syncs the file
        at each commit): make a new WAL private (DuckDB creates it with the umask's mode)
        and sync its directory entry, so that a power loss keeps it. False if that failed:
        the caller detaches now (the checkpoint empties the WAL) instead of lingering."""
        if not self.writable:
            return True
        try:
            info = os.stat(self.wal)
        except FileNotFoundError:
            return True  # nothing written since the last checkpoint
        except OSError:
            return False
        if info.st_ino == self.wal_synced and stat.S_IMODE(info.st_mode) == FILE_MODE:
            return True
        try:
            os.chmod(self.wal, FILE_MODE)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            _LOG.warning("could not secure the catalog's WAL (%s): detaching now", exc)
            return False
        self.wal_synced = info.st_ino
        return True

    def release(self, discard: bool = False) -> None:
        """Detach the file (DuckDB checkpoints it), then release the lock.

        ``discard`` (after an error) closes the whole instance instead, so no state of a
        failed block survives; the next block starts a fresh one.
        """
        db, fd = self.db, self.fd
        self.fd, self.attached, self.lingering = None, None, False
        self.in_transaction, self.rollback_only, self.broken = False, False, False
        try:
            if db is not None and not discard:
                try:
                    db.execute("USE memory")
                    db.execute(f"DETACH {_ALIAS}")
                except duckdb.Error:
                    discard = True
            if db is not None and discard:
                self.drop_instance()
        finally:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                finally:
                    os.close(fd)

    def drop_instance(self) -> None:
        """Close the DuckDB instance (the file is detached already, or was never attached).

        Everything committed is in the file or its WAL already: a failing close (a
        checkpoint on a full disk) loses nothing, and the next attach replays the WAL.
        """
        db, self.db = self.db, None
        _registry.forget(self)
        if db is not None:
            with suppress(duckdb.Error):
                db.close()


class _Registry:
    """The process's sessions, one per catalog file (by real path).

    An idle DuckDB instance takes about 3 MB, so only the ``MAX_INSTANCES`` most recently
    used sessions keep theirs (a process that goes through many workspaces, like the test
    suite, would otherwise grow without bound); an evicted one is re-created when needed.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[str, _Session] = {}
        self.recent: OrderedDict[str, None] = OrderedDict()

    def session(self, key: str, workspace: Workspace) -> _Session:
        with self.lock:
            found = self.sessions.get(key)
            if found is None:
                found = self.sessions[key] = _Session(key, workspace)
            return found

    def used(self, session: _Session) -> None:
        """Mark ``session``'s instance as the most recent; drop the oldest idle ones."""
        with self.lock:
            self.recent[session.key] = None
            self.recent.move_to_end(session.key)
            surplus = max(len(self.recent) - MAX_INSTANCES, 0)
            oldest = [self.sessions[k] for k in self.recent if k != session.key][:surplus]
        for other in oldest:
            if other.lock.acquire(blocking=False):
                try:
                    if other.depth == 0:
                        try:
                            if other.lingering:
                                other.release()
                        except Exception as exc:  # not this block's business
                            _LOG.warning("could not release an idle catalog lock: %s", exc)
                        other.drop_instance()
                finally:
                    other.lock.release()

    def forget(self, session: _Session) -> None:
        with self.lock:
            self.recent.pop(session.key, None)


class _Lingerer:
    """The thread that ends lingering attachments (``_Session.close``) once they are
    ``LINGER_SECONDS`` old: one per process, started at the first linger.

    It never waits for a session's lock: a session in use will linger again when its
    block ends. Lock order: a session's lock, then ``cond``; the thread takes a session's
    lock only without holding ``cond``. It needs the GIL: a C call that holds the GIL for
    long in another thread delays it.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.pending: set[_Session] = set()
        self.thread: threading.Thread | None = None

    def wake(self, session: _Session) -> bool:
        """Have ``session`` released when its time is up; False if no thread can be
        started (at interpreter shutdown): the caller releases it itself."""
        with self.cond:
            if self.thread is None or not self.thread.is_alive():
                thread = threading.Thread(target=self._run, name="fdptm-catalog-linger")
                thread.daemon = True
                try:
                    thread.start()
                except RuntimeError:
                    return False
                self.thread = thread
            self.pending.add(session)
            self.cond.notify()
            return True

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.pending:
                    self.cond.wait()
                wait = min(s.until for s in self.pending) - time.monotonic()
                if wait > 0:
                    self.cond.wait(wait)
                    continue
                due = [s for s in self.pending if s.until <= time.monotonic()]
                self.pending.difference_update(due)
            for session in due:
                try:
                    end_lingering(session, only_expired=True)
                except Exception as exc:  # the thread must go on for the other sessions
                    _LOG.warning("could not release the catalog lock of %s: %s", session.key, exc)


def end_lingering(session: _Session, only_expired: bool = False, wait: float = 0.0) -> None:
    """Release ``session`` if it lingers (``only_expired``: and its time is up; a session
    reused since lingers again, later). Skipped while a block of it runs in another thread
    for longer than ``wait`` seconds, or in this one."""
    if session.lock.acquire(timeout=wait) if wait > 0 else session.lock.acquire(blocking=False):
        try:
            expired = not only_expired or session.until <= time.monotonic()
            if session.lingering and session.depth == 0 and expired:
                session.release()
        finally:
            session.lock.release()


def release_idle() -> None:
    """Detach every lingering catalog of this process and release its lock now, waiting
    (up to ``BUSY_TIMEOUT_SECONDS`` a session) for a block or a detach another thread
    runs: at a normal exit (an exit while the lingerer thread is inside DuckDB's detach
    aborts the process: "terminate called without an active exception", seen in a test),
    before a process stops itself (``fdptm.faults``) and before code reads or copies a
    catalog file directly. Other processes' lingers are theirs: a program that reads the
    file directly takes ``catalog.lock`` first, as fdptm's own processes do."""
    _end_all(wait=BUSY_TIMEOUT_SECONDS)


def _end_all(wait: float) -> None:
    """``end_lingering`` for every session, waiting up to ``wait`` seconds for each."""
    with _registry.lock:
        sessions = list(_registry.sessions.values())
    for session in sessions:
        end_lingering(session, wait=wait)


def _before_fork() -> None:
    """Nothing lingers across a fork (without waiting: a block running in another thread
    is the caller's own doing, as before lingering)."""
    with suppress(Exception):
        _end_all(wait=0.0)


_registry = _Registry()
_lingerer = _Lingerer()
_LOG = logging.getLogger(__name__)
atexit.register(release_idle)


def _after_fork_in_child() -> None:
    """A forked child starts with no session and must not touch the parent's.

    DuckDB instances do not survive a fork (their threads are gone). The child closes its
    copies of lock files held mid-block (without unlocking, which would release the
    parent's lock), makes its copies of the instances immortal (one more reference, never
    dropped) and forgets both in the sessions it copied: detaching or destroying a copy,
    when the block the fork happened in ends in the child or at the child's exit, would
    checkpoint a stale copy of the database into the parent's file and delete the
    parent's WAL.
    """
    global _registry, _lingerer
    for session in _registry.sessions.values():
        if session.fd is not None:
            with suppress(OSError):
                os.close(session.fd)
        if session.db is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(session.db))
        # a block the fork happened in ends in the child with nothing to detach or unlock
        session.fd = session.db = session.attached = None
        session.lingering = False
    _registry = _Registry()
    _lingerer = _Lingerer()  # the parent's thread is not here, and its lock may be held


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


class Catalog:
    """Serialised access to one workspace's catalog: its ``catalog.duckdb``, or the
    PostgreSQL database its ``catalog`` URL names (``storage.postgres``), behind one
    interface: ``connect``, ``transaction``, ``query``, ``execute``."""

    def __init__(self, workspace: Workspace):
        self.workspace = workspace
        self.url = workspace.catalog
        self._key = self.url or os.path.realpath(workspace.catalog_path)

    @property
    def dialect(self) -> str:
        return "duckdb" if self.url is None else "postgresql"

    @property
    def where(self) -> str:
        """The catalog's location, for messages (a URL without its query string)."""
        return str(self.workspace.catalog_path) if self.url is None else postgres.redacted(self.url)

    def _session(self) -> _Session:
        return _registry.session(self._key, self.workspace)

    def release_idle(self) -> None:
        """Detach this catalog's file and release its lock now if they linger after a
        block (``LINGER_SECONDS``): before the file is renamed or read directly."""
        if self.url is None:
            end_lingering(self._session(), wait=BUSY_TIMEOUT_SECONDS)

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The locked connection; a nested call in the same thread joins the outer block.

        Outside a transaction every statement commits on its own (on PostgreSQL, the block
        commits at its end, and a database error rolls the block back). DuckDB errors that
        mean the workspace is damaged, read-only or full become the matching
        ``FdptmError``.
        """
        if self.url is not None:
            with self._postgres_block() as con:
                yield con
            return
        session = self._session()
        with session.lock:
            if session.depth == 0:
                session.open()
            session.depth += 1
            broken = False
            try:
                yield session.db
            except duckdb.Error as exc:
                broken = True
                _raise_translated(exc, self.workspace)
            finally:
                session.depth -= 1
                if session.depth == 0:
                    session.close(discard=broken)

    @contextmanager
    def _postgres_block(self) -> Iterator[postgres.Connection]:
        psycopg = postgres.driver()

        session = postgres.registry.session(self.url)
        with session.lock:
            con = session.open() if session.depth == 0 else session.con
            session.depth += 1
            failed = False
            try:
                yield con
            except psycopg.OperationalError as exc:
                failed = True
                session.discard()
                raise postgres.unavailable(self.url, exc) from None
            except psycopg.Error:
                failed = True
                raise
            finally:
                session.depth -= 1
                if session.depth == 0:
                    session.close(error=failed)

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A locked connection inside BEGIN/COMMIT, rolled back on any exception.

        Nested in another transaction of the same thread, it joins it: the outermost one
        commits. DuckDB has no savepoints, so an exception that leaves a nested transaction
        rolls back the whole one, even if the outer block catches it: its end then raises
        instead of committing half of the nested work. On PostgreSQL a transaction inside
        a plain ``connect`` block is a savepoint of the block's transaction.
        """
        with self.connect() as con:
            session = (
                postgres.registry.session(self.url) if self.url is not None else self._session()
            )
            if session.in_transaction:
                try:
                    yield con
                except BaseException:
                    session.rollback_only = True
                    raise
                return
            session.in_transaction, session.rollback_only = True, False
            try:
                if self.url is not None:
                    with session.savepoint():
                        yield con
                        self._check_nested(session)
                else:
                    yield from self._duckdb_transaction(con, session)
            finally:
                session.in_transaction = session.rollback_only = False

    @staticmethod
    def _check_nested(session: _Session | postgres.Session) -> None:
        if session.rollback_only:
            raise RuntimeError(
                "a nested catalog transaction failed and its exception was caught inside "
                "the outer one; the whole transaction was rolled back"
            )

    def _duckdb_transaction(
        self, con: duckdb.DuckDBPyConnection, session: _Session
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        try:
            con.execute("BEGIN TRANSACTION")
            yield con
        except BaseException:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                session.broken = True  # the block's end discards the instance, not lingers
            raise
        if session.rollback_only:
            con.execute("ROLLBACK")
            self._check_nested(session)
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
            self.create_dataset(con, name, unit)
            return con.execute("SELECT unit FROM datasets WHERE name = ?", [name]).fetchone()[0]

    @staticmethod
    def create_dataset(
        con: duckdb.DuckDBPyConnection,
        name: str,
        unit: str,
        public: bool = False,
        author_buckets: int | None = None,
    ) -> None:
        """Create dataset ``name`` unless it exists, in the caller's transaction, and chain its
        row: its unit, whether it is public and its author buckets decide how the ledger
        counts (``storage.chain``)."""
        with chain.tracked(con, name, "dataset", [name]):  # a deleted row is not made anew
            con.execute(
                "INSERT INTO datasets (name, unit, created_at, public, author_buckets)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [name, unit, now(), public, author_buckets],
            )

    def dataset(self, name: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM datasets WHERE name = ?", [name])
        return rows[0] if rows else None

    def datasets(self) -> dict[str, dict[str, Any]]:
        """Every dataset's row by name, read without bound parameters: the first statement
        that binds one makes DuckDB import pandas (about a second), which the CLI's first
        line and its refusals must not wait for."""
        return {r["name"]: r for r in self.query("SELECT * FROM datasets")}

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
            "INSERT INTO stage_runs (run_id, stage, status, started_at)"
            " VALUES (?, ?, 'running', ?) ON CONFLICT (run_id, stage) DO UPDATE SET"
            " status = excluded.status, started_at = excluded.started_at, finished_at = NULL,"
            " error = NULL",
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
        """Record an artifact with its producer run and content hash (not yet in the
        artifact store: ``storage.objectstore.sync`` uploads it and sets ``stored_in``).

        ``con``: an open connection (inside a transaction) to join; else one of its own.
        """
        if visibility not in ("internal", "public"):
            raise ValueError(f"visibility must be 'internal' or 'public', got {visibility!r}")
        sql = (
            "INSERT INTO artifacts (name, run_id, stage, path, sha256, visibility, n_rows,"
            " created_at, stored_in) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (name)"
            " DO UPDATE SET run_id = excluded.run_id, stage = excluded.stage,"
            " path = excluded.path, sha256 = excluded.sha256, visibility = excluded.visibility,"
            " n_rows = excluded.n_rows, created_at = excluded.created_at, stored_in = NULL"
        )
        params = [name, run_id, stage, path, sha256, visibility, n_rows, now()]
        if con is not None:
            con.execute(sql, params)
        else:
            self.execute(sql, params)

    @staticmethod
    def record_release(
        con: duckdb.DuckDBPyConnection,
        run_id: str,
        dataset: str,
        path: str,
        guarantee: tuple[float, float, str],
        manifest_sha256: str,
    ) -> None:
        """Record a published release (replacing the row of a run published again) with its
        manifest's sha256, in the caller's transaction, and chain it (``storage.chain``):
        ``fdptm verify`` checks the files against it. ``guarantee``: (epsilon, delta,
        adjacency) as the manifest states them."""
        epsilon, delta, adjacency = guarantee
        with chain.tracked(con, dataset, "release", [run_id]):
            con.execute(
                "INSERT INTO releases (run_id, dataset, path, epsilon, delta, adjacency,"
                " manifest_sha256, released_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (run_id) DO UPDATE SET dataset = excluded.dataset,"
                " path = excluded.path, epsilon = excluded.epsilon, delta = excluded.delta,"
                " adjacency = excluded.adjacency, manifest_sha256 = excluded.manifest_sha256,"
                " released_at = excluded.released_at",
                [run_id, dataset, path, epsilon, delta, adjacency, manifest_sha256, now()],
            )

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
