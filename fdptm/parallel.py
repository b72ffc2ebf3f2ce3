"""Threads for the numeric kernels: how many, and a deterministic map over fixed chunks.

Work is split into chunks whose number and boundaries never depend on the thread count,
each chunk writes its own output, and the caller combines the outputs in chunk order, so a
result is bit-identical on one thread or many. The kernels release the GIL (numba
``nogil``, OpenDP's FFI), so the threads run on separate cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fdptm.errors import BadInputError

THREADS_VAR = "FDPTM_THREADS"
"""Environment variable capping the worker threads (default: every usable core)."""


def workers() -> int:
    """The cores this process may run on (its affinity mask where the OS has one), capped
    by $FDPTM_THREADS when set."""
    if hasattr(os, "sched_getaffinity"):
        cores = max(1, len(os.sched_getaffinity(0)))
    else:
        cores = max(1, os.cpu_count() or 1)
    cap = os.environ.get(THREADS_VAR, "").strip()
    if cap:
        if not cap.isdigit() or int(cap) < 1:
            raise BadInputError(
                f"${THREADS_VAR} must be a whole number >= 1 (the most worker threads to "
                f"use), got {cap!r}; set it to e.g. 2, or unset it to use every core"
            )
        cores = min(cores, int(cap))
    return cores


def cap_numba() -> None:
    """Run this thread's numba ``parallel`` kernels on at most ``workers()`` threads (their
    results never depend on the count; this keeps ``$FDPTM_THREADS`` true for them too)."""
    import numba

    numba.set_num_threads(min(workers(), numba.config.NUMBA_NUM_THREADS))


def each_chunk(work: Callable[[int], None], chunks: int) -> None:
    """``work(c)`` for c = 0 .. chunks - 1 on up to ``workers()`` threads (in order on one)."""
    threads = min(workers(), chunks)
    if threads <= 1:
        for c in range(chunks):
            work(c)
        return
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(chunks)))
