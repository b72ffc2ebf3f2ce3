"""Who owns a run, and what happens to runs whose process died.

A run is owned by the process that holds an exclusive ``fcntl`` lock on its
``internal/runs/<run_id>/owner.lock`` for as long as it works on the run. The kernel drops
the lock when the process dies, however it dies (``kill -9``, an out-of-memory kill, a lost
machine's reboot), so "the lock is free" is exactly "no live process works on this run",
with no heartbeat interval to tune and no clock to trust. ``runs.owner`` records the pid and
host for messages only. With a PostgreSQL catalog, shared by hosts whose workspace
directories differ, the lock is a session-level advisory lock on the owner's catalog
connection instead: the server drops it when that connection ends, however the process or
its host died, so ``fdptm recover`` on any host sees the run as dead.

``recover`` finds runs marked ``running`` whose lock is free and marks them ``failed``. Their
ledger entries follow the spend protocol (``storage.ledger``): entries still ``reserved``
belong to a run that never read private data and are refunded; ``spent`` entries stay
spent. ``fdptm release --resume RUN_ID`` can then continue a failed release from its last
stored stage. Every command that opens a workspace for writing runs ``recover`` first.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from fdptm.errors import BadInputError
from fdptm.storage import postgres
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.ledger import tracked_run
from fdptm.storage.workspace import Workspace

_HELD: dict[tuple[str, str], int] = {}


def _forget_in_child() -> None:
    """A forked child inherits the owner locks' descriptors, and with them the locks: it
    would keep a dead parent's run looking alive. Close them in the child (a PostgreSQL
    lock belongs to the parent's connection, which the child never uses). The hook runs in
    the child before ``os.fork()`` returns there, so a parent that dies before its child was
    first scheduled leaves the run looking alive only until the child runs."""
    for fd in _HELD.values():
        if fd >= 0:
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _lock_path(workspace: Workspace, run_id: str):
    return workspace.run_dir(run_id) / "owner.lock"


def claim(workspace: Workspace, run_id: str) -> str:
    """Take ownership of ``run_id`` for this process; the ``runs.owner`` text to record.

    Raises ``BadInputError`` when another live process owns it.
    """
    key = _key(workspace, run_id)
    if key in _HELD:
        return _owner()
    if workspace.catalog is not None:
        if not postgres.hold(workspace.catalog, _lock_id(run_id)):
            raise BadInputError(_IN_PROGRESS.format(run_id=run_id))
        _HELD[key] = -1
        return _owner()
    path = _lock_path(workspace, run_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise BadInputError(_IN_PROGRESS.format(run_id=run_id)) from None
    _HELD[key] = fd
    return _owner()


def release_claim(workspace: Workspace, run_id: str) -> None:
    """Give up ownership (the run finished, failed or was handed on)."""
    fd = _HELD.pop(_key(workspace, run_id), None)
    if fd is None:
        return
    if workspace.catalog is not None:
        postgres.unhold(workspace.catalog, _lock_id(run_id))
    else:
        os.close(fd)


def _key(workspace: Workspace, run_id: str) -> tuple[str, str]:
    return (workspace.catalog or str(workspace.root), run_id)


def _lock_id(run_id: str) -> int:
    """The run's PostgreSQL advisory lock: 63 bits of its id's sha256 (``storage.postgres``
    holds the catalog's own lock under another key)."""
    return int.from_bytes(hashlib.sha256(f"fdptm run {run_id}".encode()).digest()[:8], "big") >> 1


_IN_PROGRESS = "run {run_id} is in progress in another live process; wait for it to finish"


@contextmanager
def recorded_run(
    workspace: Workspace, catalog: Catalog, run_id: str, dataset: str, kind: str, params: dict
) -> Iterator[None]:
    """Own ``run_id`` (a live run is never closed as dead) and record it in the catalog as
    started, then as succeeded, or as failed with the exception's type and message."""
    from fdptm import __version__

    claim(workspace, run_id)
    try:
        catalog.start_run(run_id, dataset, kind, params, __version__)
        try:
            yield
        except BaseException as exc:
            catalog.finish_run(run_id, "failed", f"{type(exc).__name__}: {exc}")
            raise
        catalog.finish_run(run_id, "succeeded")
    finally:
        release_claim(workspace, run_id)


def alive(workspace: Workspace, run_id: str) -> bool:
    """True if some live process (this one included, on any host for a PostgreSQL
    catalog) owns ``run_id``."""
    if _key(workspace, run_id) in _HELD:
        return True
    if workspace.catalog is not None:
        return postgres.held_elsewhere(workspace.catalog, _lock_id(run_id))
    path = _lock_path(workspace, run_id)
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _owner() -> str:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname()})


@dataclass(frozen=True)
class Recovered:
    """One dead run that ``recover`` closed."""

    run_id: str
    dataset: str
    kind: str
    refunded: int
    spent: int


def recover(workspace: Workspace, dataset: str | None = None) -> list[Recovered]:
    """Mark dead ``running`` runs failed and refund what they never read; what was done.

    The liveness test and the updates happen inside one catalog transaction, which
    serialises this with a resume claiming the same run.
    """
    catalog = Catalog(workspace)
    done = []
    with catalog.transaction() as con:
        rows = con.execute(
            "SELECT run_id, dataset, kind FROM runs WHERE status = 'running'"
            + (" AND dataset = ?" if dataset else ""),
            [dataset] if dataset else [],
        ).fetchall()
        for run_id, ds, kind in rows:
            if alive(workspace, run_id):
                continue
            ts = now()
            with tracked_run(con, run_id):
                refunded, spent = _close_entries(con, run_id, ts)
            con.execute(
                "UPDATE runs SET status = 'failed', finished_at = ?, error = ? WHERE run_id = ?",
                [ts, "the process running it died (closed by fdptm recover)", run_id],
            )
            con.execute(
                "UPDATE stage_runs SET status = 'failed', finished_at = ?,"
                " error = 'the process running it died' WHERE run_id = ? AND status = 'running'",
                [ts, run_id],
            )
            done.append(Recovered(run_id, ds, kind, refunded, spent))
    return done


def _close_entries(con, run_id: str, ts) -> tuple[int, int]:
    """The ledger side of closing dead ``run_id``: refund what it never read; (refunded,
    spent) counts."""
    legacy = con.execute(
        "SELECT owner IS NULL AND EXISTS (SELECT 1 FROM stage_runs s"
        " WHERE s.run_id = r.run_id) FROM runs r WHERE run_id = ?",
        [run_id],
    ).fetchone()[0]
    if legacy:  # an older version's run read data while its entries were reserved
        con.execute(
            "UPDATE ledger SET state = 'spent', updated_at = ?,"
            " note = 'spent: a run of an earlier version died after it started'"
            " WHERE run_id = ? AND state = 'reserved'",
            [ts, run_id],
        )
    refunded = con.execute(
        "UPDATE ledger SET state = 'refunded', updated_at = ?,"
        " note = 'refunded: the run died before it read private data'"
        " WHERE run_id = ? AND state = 'reserved' RETURNING entry_id",
        [ts, run_id],
    ).fetchall()
    spent = con.execute(
        "SELECT count(*) FROM ledger WHERE run_id = ? AND state = 'spent'", [run_id]
    ).fetchone()[0]
    return len(refunded), spent
