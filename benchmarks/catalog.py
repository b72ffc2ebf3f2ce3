"""Catalog benchmark: the cost of one catalog call, before and after the per-process session.

    python benchmarks/catalog.py     # writes benchmarks/catalog_results.md

Before: every call opened ``catalog.duckdb`` (a new DuckDB instance), re-ran the schema DDL
and closed it, under the ``catalog.lock`` flock; ``before()`` below reproduces that code
path exactly. After: ``Catalog`` keeps one in-memory DuckDB instance per process and file,
ATTACHes the file under the lock for an outermost block and DETACHes it after (since the
evening of 2026-11-29 50 ms after, unless another block of the process reuses it: the
'lingering' rows; the 'attach + detach per call' rows end each call's linger at once), with
the DDL run once per process. Every timed batch of calls ends with ``release_idle``, so a
variant pays its own last detach and checkpoint, not the next variant. Measured per call, on
a real workspace in a temporary directory, interleaved: every round runs each variant's
calls back to back, in a rotated order, and the table gives the median over rounds of the
mean time per call (and the range). Also: the first call of a fresh process (instance
creation and DDL included), and two processes calling at once (the lock is held for less
time, so both finish sooner).

The storage format (2026-11-29): ``Catalog`` writes the file in DuckDB 1.2's format
(``fdptm.storage.catalog.STORAGE_VERSION``); the "1.0 format" rows are the same calls on a
workspace created and used in DuckDB 1.0's format, the one DuckDB writes unless told and the
catalog's before that day (``legacy_format`` below).
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from fdptm.storage import catalog as catalog_module
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.schema import MIGRATIONS
from fdptm.storage.workspace import Workspace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, rounds, save  # noqa: E402

ROUNDS = 15
CALLS = 20
FRESH = 5
PARALLEL_CALLS = 100
HISTORY = 200
"""Past runs in the 'used' workspaces: 1,200 stage rows and 1,200 artifact rows."""
ARTIFACT = (
    "INSERT INTO artifacts (name, run_id, stage, path, sha256, visibility, n_rows, created_at)"
    " VALUES (?, ?, 'train', ?, ?, 'internal', 1, ?)"
)
_STAGES = (
    "(VALUES ('preprocess'), ('bound'), ('vocabulary'), ('sanitize'), ('train'), ('publish')) v(s)"
)
READ = "SELECT * FROM datasets WHERE name = ?"
WRITE = (
    "INSERT OR REPLACE INTO stage_runs (run_id, stage, status, started_at)"
    " VALUES (?, ?, 'running', ?)"
)
_OLD_THREAD_LOCK = threading.RLock()
SCHEMA = ";\n".join(MIGRATIONS[0].render("duckdb"))  # the DDL every call used to run


@contextmanager
def before(workspace: Workspace) -> Iterator[duckdb.DuckDBPyConnection]:
    """The catalog connection as it was: open, DDL, use, close, all under the flock."""
    with _OLD_THREAD_LOCK, open(workspace.lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            con = duckdb.connect(str(workspace.catalog_path))
            try:
                con.execute(SCHEMA)
                yield con
            finally:
                con.close()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def legacy_format() -> Iterator[None]:
    """Catalog blocks as before 2026-11-29: the file attached in DuckDB 1.0's storage format."""
    current = catalog_module.STORAGE_VERSION
    catalog_module.STORAGE_VERSION = "v1.0.0"
    try:
        yield
    finally:
        catalog_module.STORAGE_VERSION = current


@contextmanager
def string_compression() -> Iterator[None]:
    """Catalog instances as before 2026-11-29 (night): DuckDB's FSST and dictionary
    compression of strings on. An instance keeps the setting it was made with, so a
    workspace first used inside this block keeps it for the whole benchmark, as long as its
    instance is not closed: the benchmark uses ``MAX_INSTANCES`` workspaces (a fifth would
    close the least recently used instance, and a new one would have today's setting)."""
    current = catalog_module.DISABLED_COMPRESSION
    catalog_module.DISABLED_COMPRESSION = ""
    try:
        yield
    finally:
        catalog_module.DISABLED_COMPRESSION = current


def _setup(root: Path, history: int = 0) -> Workspace:
    """A workspace with a few datasets and ledger-sized tables, like a used one; with
    ``history``, also that many past runs' six stage rows and six artifact rows (a release
    writes six and about ten)."""
    workspace = Workspace.resolve(root).create()
    catalog = Catalog(workspace)
    with catalog.transaction() as con:
        for i in range(20):
            catalog.ensure_dataset(f"d{i}", "author")
            con.execute(WRITE, [f"run-{i}", "train", now()])
        con.execute(
            "INSERT INTO stage_runs SELECT md5(r::VARCHAR), s, 'succeeded', ?, ?, NULL FROM"
            f" range(?) t(r), {_STAGES}",
            [now(), now(), history],
        )
        con.execute(
            "INSERT INTO artifacts (name, run_id, stage, path, sha256, visibility, n_rows,"
            " created_at) SELECT 'internal/runs/' || md5(r::VARCHAR) || '/' || s || '.parquet',"
            " md5(r::VARCHAR), s, '/srv/fdptm/internal/runs/' || md5(r::VARCHAR) || '/' || s"
            " || '.parquet', sha256(r::VARCHAR || s), 'internal', r, ? FROM range(?) t(r),"
            f" {_STAGES}",
            [now(), history],
        )
    catalog.release_idle()
    return workspace


def _variants(
    workspace: Workspace, legacy: Workspace, used: Workspace, compressed: Workspace
) -> dict[str, dict[str, Callable[[], None]]]:
    catalog = Catalog(workspace)
    legacy_catalog = Catalog(legacy)
    floor = duckdb.connect(":memory:")
    floor.execute(SCHEMA)

    def old(sql: str, params: Callable[[], list]) -> Callable[[], None]:
        def call() -> None:
            with before(legacy) as con:
                con.execute(sql, params()).fetchall()

        return call

    def new(sql: str, params: Callable[[], list]) -> Callable[[], None]:
        run = catalog.query if sql == READ else catalog.execute

        def call() -> None:
            run(sql, params())
            catalog.release_idle()

        return call

    def lingering(sql: str, params: Callable[[], list]) -> Callable[[], None]:
        run = catalog.query if sql == READ else catalog.execute

        def call() -> None:
            run(sql, params())

        return call

    def in_legacy_format(sql: str, params: Callable[[], list]) -> Callable[[], None]:
        run = legacy_catalog.query if sql == READ else legacy_catalog.execute

        def call() -> None:
            with legacy_format():
                run(sql, params())
                legacy_catalog.release_idle()

        return call

    def per_call(where: Workspace) -> Callable[[str, Callable[[], list]], Callable[[], None]]:
        other = Catalog(where)

        def variant(sql: str, params: Callable[[], list]) -> Callable[[], None]:
            run = other.query if sql == READ else other.execute

            def call() -> None:
                run(sql, params())
                other.release_idle()

            return call

        return variant

    def held(sql: str, params: Callable[[], list]) -> Callable[[], None]:
        def calls() -> None:
            with catalog.transaction():
                for _ in range(CALLS):
                    new(sql, params)()

        return calls

    def raw(sql: str, params: Callable[[], list]) -> Callable[[], None]:
        return lambda: floor.execute(sql, params()).fetchall()

    read_params = lambda: ["d7"]  # noqa: E731
    write_params = lambda: ["bench", "train", now()]  # noqa: E731
    made = itertools.count()

    def artifact_params() -> list:
        run = f"bench-{next(made)}"
        path = f"internal/runs/{run}/train.parquet"
        return [path, run, f"/srv/fdptm/{path}", hashlib.sha256(run.encode()).hexdigest(), now()]

    variants = {}
    for op, sql, params in (("read", READ, read_params), ("write", WRITE, write_params)):
        used_args = (sql, params) if op == "read" else (ARTIFACT, artifact_params)
        note = "" if op == "read" else ": an artifact"
        variants[op] = {
            "before: open + DDL + close per call": old(sql, params),
            "after: attach + detach per call": new(sql, params),
            "after: calls back to back, the file lingering between them": lingering(sql, params),
            "after, the file in DuckDB 1.0's format": in_legacy_format(sql, params),
            f"after, {HISTORY} past runs' rows{note}": per_call(used)(*used_args),
            f"after, {HISTORY} past runs' rows{note}, strings compressed (FSST, dictionary)": (
                per_call(compressed)(*used_args)
            ),
            f"after: {CALLS} calls inside one held block": held(sql, params),
            "floor: an open in-memory connection, no lock": raw(sql, params),
        }
    return variants


def _per_call(op_variants: dict[str, Callable[[], None]]) -> dict[str, list[float]]:
    """Milliseconds per call of each variant, one value per round, rounds interleaved."""

    def one(name: str) -> float:
        fn = op_variants[name]
        start = time.perf_counter()
        if "held block" in name:
            fn()
        else:
            for _ in range(CALLS):
                fn()
        catalog_module.release_idle()  # the batch's last detach, if it lingers, is its own
        return (time.perf_counter() - start) / CALLS * 1e3

    return rounds(op_variants, ROUNDS, one, lambda ms: f"{ms:.2f} ms")


FIRST_CALL = """
import sys, time
from fdptm.storage.workspace import Workspace
from fdptm.storage.catalog import Catalog
sys.path.insert(0, {here!r})
from catalog import before
workspace = Workspace.resolve({root!r})
start = time.perf_counter()
if sys.argv[1] == "before":
    with before(workspace) as con:
        con.execute("SELECT * FROM datasets WHERE name = 'd7'").fetchall()
else:
    Catalog(workspace).query("SELECT * FROM datasets WHERE name = 'd7'")
print((time.perf_counter() - start) * 1e3)
"""

PARALLEL = """
import sys, time
from fdptm.storage.workspace import Workspace
from fdptm.storage.catalog import Catalog
sys.path.insert(0, {here!r})
from catalog import before
workspace = Workspace.resolve({root!r})
catalog = Catalog(workspace)
worst = 0.0
print("ready", flush=True)
sys.stdin.readline()
start = time.perf_counter()
for _ in range({calls}):
    t = time.perf_counter()
    if sys.argv[1] == "before":
        with before(workspace) as con:
            con.execute("SELECT * FROM datasets WHERE name = 'd7'").fetchall()
    else:
        catalog.query("SELECT * FROM datasets WHERE name = 'd7'")
    worst = max(worst, time.perf_counter() - t)
print((time.perf_counter() - start) * 1e3, worst * 1e3)
"""


def _first_calls(root: Path, legacy: Path) -> dict[str, list[float]]:
    """``before`` on ``legacy`` (the 1.0 format it used), ``after`` on ``root``."""
    codes = {
        variant: FIRST_CALL.format(here=str(HERE), root=str(where))
        for variant, where in (("before", legacy), ("after", root))
    }
    out: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(FRESH):
        for variant in out:
            done = subprocess.run(
                [sys.executable, "-c", codes[variant], variant],
                capture_output=True,
                text=True,
                check=True,
            )
            out[variant].append(float(done.stdout.split()[-1]))
    return out


def _parallel(root: Path, legacy: Path) -> dict[str, list[tuple[float, float]]]:
    """Two processes each making PARALLEL_CALLS reads at the same time: wall and worst call."""
    codes = {
        variant: PARALLEL.format(here=str(HERE), root=str(where), calls=PARALLEL_CALLS)
        for variant, where in (("before", legacy), ("after", root))
    }
    out: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    for _ in range(3):
        for variant in out:
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", codes[variant], variant],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for _ in range(2)
            ]
            for p in procs:
                assert p.stdout.readline().strip() == "ready"
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            results = [tuple(map(float, p.communicate()[0].split())) for p in procs]
            out[variant].append((max(r[0] for r in results), max(r[1] for r in results)))
    return out


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    started = at_start()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = _setup(Path(tmp) / "ws")
        with legacy_format():
            legacy = _setup(Path(tmp) / "ws-1.0")
        used = _setup(Path(tmp) / "ws-used", HISTORY)
        with string_compression():
            compressed = _setup(Path(tmp) / "ws-compressed", HISTORY)
        variants = _variants(workspace, legacy, used, compressed)
        per_call = {op: _per_call(v) for op, v in variants.items()}
        (kept,) = Catalog(compressed).query(
            "SELECT current_setting('disabled_compression_methods') AS methods"
        )
        if kept["methods"]:  # its instance was made anew: the arm measured today's setting
            raise RuntimeError("the 'strings compressed' workspace lost its instance")
        catalog_module.release_idle()  # this process holds neither file while others time
        first = _first_calls(workspace.root, legacy.root)
        parallel = _parallel(workspace.root, legacy.root)
    lines = [
        f"Milliseconds per call: median over {ROUNDS} interleaved rounds of the mean of "
        f"{CALLS} back-to-back calls (range in brackets). Read: `{READ}`. Write: one "
        "`INSERT OR REPLACE` into `stage_runs` (what `start_stage` does), which commits "
        "(WAL fsync) and, when the file is detached, checkpoints. Each batch of calls ends "
        "with `release_idle` inside its timing (its last detach counted).",
        "",
        "| call | variant | ms per call |",
        "|---|---|---|",
    ]
    for op, times in per_call.items():
        lines += [f"| {op} | {name} | {_fmt(values)} |" for name, values in times.items()]
    lines += [
        "",
        f"First call in a fresh process (DuckDB instance creation and DDL included), "
        f"{FRESH} processes each, ms:",
        "",
        "| variant | ms |",
        "|---|---|",
        f"| before | {_fmt(first['before'])} |",
        f"| after | {_fmt(first['after'])} |",
        "",
        f"Two processes each making {PARALLEL_CALLS} reads at the same time (3 runs): wall "
        "time until both are done, and the slowest single call (waiting for the other "
        "process included), ms:",
        "",
        "| variant | wall | slowest call |",
        "|---|---|---|",
    ]
    for variant, runs in parallel.items():
        lines.append(f"| {variant} | {_fmt([w for w, _ in runs])} | {_fmt([s for _, s in runs])} |")
    lines += [
        "",
        "Since 2026-11-29 (evening) the file lingers: it stays attached, and the lock held, "
        "for 50 ms after a block, for the process's next block, and a run of such blocks "
        "holds it at most 0.5 s (`storage/catalog.py`, 'Linger'); the 'back to back' rows. "
        "An earlier session kept this out because a process stopped as a whole (Ctrl-Z, "
        "or the SIGSTOP of `fdptm.faults` at a stage boundary) would hold the lock while "
        "stopped. What changed: `fdptm.faults` releases the catalog before it stops the "
        "process, and the hold is capped; a Ctrl-Z within 50 ms of a block still holds the "
        "lock until the process resumes, as a Ctrl-Z inside a block always did. What it "
        "buys: a 100-document release attaches the file 5 times instead of 47, and a "
        "release handed to `fdptm serve`, with this and two smaller changes to `fdptm "
        "serve`, took 0.71x and 0.81x the time of the code before in two runs "
        "(`benchmarks/small_release.md`).",
        "",
        "Since 2026-11-29 (night) the catalog's DuckDB instances store strings without "
        "FSST and dictionary compression (`DISABLED_COMPRESSION` in `storage/catalog.py`): "
        "the 'strings compressed' rows are the calls as before, on a workspace whose "
        "instance has both on, beside the same calls on a workspace with the same rows and "
        f"the setting of today ('{HISTORY} past runs'; their write registers an artifact, "
        "a release's most frequent write, with a path and a hash). A checkpoint rewrites a "
        "changed table's row group and analyses its string columns for both methods; each "
        "of these calls pays one checkpoint.",
    ]
    record = {"machine": started, "per_call": per_call, "first": first, "parallel": parallel}
    title = "Catalog benchmark: cost of one catalog call"
    print(save("catalog_results", title, "\n".join(lines), record).read_text())


if __name__ == "__main__":
    main()
