"""Fault injection for the crash-recovery tests: a real ``kill -9`` at a named point.

``checkpoint(name)`` sends SIGKILL to this very process when the environment variable
``FDPTM_KILL_AT`` equals ``name``. The recovery tests and ``benchmarks/faults.py`` start real
``fdptm release`` processes with it set, so the process dies exactly at a stage boundary
(``after-<stage>``) or inside a stage (``during-<stage>``), the way an out-of-memory kill or
a lost machine would stop it: no exception handler, ``finally`` block or atexit hook runs.
``FDPTM_KILL_SERVER_AT`` kills (SIGKILL) the Prefect API server this process started (its
temporary server, a child process: Prefect's uvicorn or ``fdptm.flows.api_server``) and
lets the process go on, as when the server dies under a running release.

``FDPTM_STOP_AT`` instead stops the process there (SIGSTOP): it stays alive, holding its
run, until it gets SIGCONT, which lets a test look at a live run deterministically.
Unset (always, in production), a checkpoint is a few dictionary operations.

``NAME#N`` in either variable acts at the N-th time this process reaches checkpoint NAME
(``after-bounding#3``: inside the third release of a backfill).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

ENV = "FDPTM_KILL_AT"
STOP_ENV = "FDPTM_STOP_AT"
SERVER_ENV = "FDPTM_KILL_SERVER_AT"


_HITS: dict[str, int] = {}


def checkpoint(name: str) -> None:
    """Die by SIGKILL (or stop) here if ``$FDPTM_KILL_AT`` (``$FDPTM_STOP_AT``) names it."""
    _HITS[name] = _HITS.get(name, 0) + 1
    if os.environ.get(ENV) in (name, f"{name}#{_HITS[name]}"):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(SERVER_ENV) == name:
        del os.environ[SERVER_ENV]
        for pid in _children(os.getpid()):
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"uvicorn" in command or b"fdptm.flows.api_server" in command:
                os.kill(pid, signal.SIGKILL)
    if os.environ.get(STOP_ENV) in (name, f"{name}#{_HITS[name]}"):
        del os.environ[STOP_ENV]  # once: a checkpoint in a loop must not stop it again
        from fdptm.storage.catalog import release_idle

        release_idle()  # a stop between blocks, as the test means, not in a linger after one
        os.kill(os.getpid(), signal.SIGSTOP)


def _children(pid: int) -> list[int]:
    """Child process ids of ``pid`` (Linux ``/proc``)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out
