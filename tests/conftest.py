"""Shared fixtures: a Prefect test harness for the session, PHEME paths, workspaces."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Set
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from prefect_api import API_FILE_VAR, STARTUP, SharedHarness, shared_url, using

if TYPE_CHECKING:
    from distributed import LocalCluster

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
# fdptm commands the tests start run in their own processes, never handed to a `fdptm serve`
# the developer may have running (tests/test_serve.py starts its own and turns this on)
os.environ["FDPTM_SERVE"] = "off"
# Prefect's INFO chatter (task and flow states) out of the test output; warnings still show.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
# Prefect's temporary API servers (the harness's, and the CLI's in subprocess tests) wait 20 s
# to start by default; a busy CI machine can need more.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", str(STARTUP))
# A Prefect home of the session's own, not the developer's: the database of the temporary
# API servers of CLI subprocesses. The xdist workers inherit the controlling process's, so
# their servers share one database (Prefect's migration lock is per process: two servers
# starting on it at once, before it is migrated, could race).
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="fdptm-tests-prefect-"))

# Import prefect.main (which sets up Prefect's console log handler) now, while sys.stderr is
# pytest's session-wide capture stream: set up first inside a test that uses capsys, the handler
# would keep that test's stream, which pytest closes when the test ends.
import prefect.main  # noqa: F401

from fdptm.cli import _quiet_prefect

# The process-wide defaults the CLI sets (once, with setdefault) in its process, set for the
# whole session: the tests' in-process commands would otherwise set them in whichever test
# runs one first (``environment_kept``).
_quiet_prefect()

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
PHEME_RAW = SHARED / "data" / "pheme" / "pheme_raw.json"
PHEME_CLEAN = SHARED / "data" / "pheme" / "pheme_clean.json"


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the addopts of pyproject.toml): one worker more than this process may use
    cores. A test often waits on its child processes and servers (fdptm commands, Prefect,
    PostgreSQL, S3), and a third worker on 2 cores fills those waits: the whole suite took
    916 s with 3 workers and 1,035 s with 4 on one 2-core machine (2026-11-28, one after the
    other; 2 workers took 1,242 s on the code of a day before). With 3 the cores are busy 99%
    of the run (``benchmarks/suite.md``): a fourth only adds contention."""
    return len(os.sched_getaffinity(0)) + 1


def _changed(before: dict[str, str], ignored: Set[str] = frozenset()) -> list[str]:
    """The variables whose value in ``os.environ`` differs from ``before`` (set, changed or
    removed since)."""
    names = (before.keys() | os.environ.keys()) - ignored
    return sorted(k for k in names if before.get(k) != os.environ.get(k))


def _restore_environ(before: dict[str, str], ignored: Set[str] = frozenset()) -> None:
    """The variables that changed since ``before`` as they were, but ``ignored`` (one at a
    time: the others stay in place for a thread that reads the environment meanwhile)."""
    for name in _changed(before, ignored):
        if name in before:
            os.environ[name] = before[name]
        else:
            os.environ.pop(name, None)


NOT_KEPT = {
    "PYTEST_CURRENT_TEST",  # pytest's own, set for each test
    "KMP_DUPLICATE_LIB_OK",  # set once by the first import of scikit-learn, joblib or
    "KMP_INIT_AT_FORK",  # threadpoolctl
}
"""Variables a test may leave changed: set by pytest, or once per process by a library's
import (the first test that imports it sets them, for good)."""


@pytest.fixture(autouse=True)
def environment_kept():
    """Every test leaves ``os.environ`` as it found it (monkeypatch's changes are undone
    before this check). A variable left behind reaches every later child process of the
    session, and one that keys ``fdptm serve`` (``fdptm.handoff.key``: thread counts,
    ``PYTHONHASHSEED`` and others) silently stops the session's commands from being handed
    to its server, so they pay a fresh process's imports: Dask's nanny left four such
    variables, and a worker's served tests ran fresh after its first Dask test
    (benchmarks/suite.md)."""
    before = dict(os.environ)
    yield
    changed = _changed(before, NOT_KEPT)
    if changed:
        _restore_environ(before, NOT_KEPT)
        pytest.fail(f"the test changed os.environ and did not restore it: {changed}")


@contextmanager
def local_cluster(**options) -> Iterator[LocalCluster]:
    """A real ``distributed.LocalCluster``, with this process's environment kept: with
    worker processes, its nanny sets their variables in the process that spawns them and
    leaves them there (distributed's ``WorkerProcess.start``), for the workers to inherit:
    ``distributed.nanny.pre-spawn-environ`` (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
    ``OPENBLAS_NUM_THREADS`` at 1, ``MALLOC_TRIM_THRESHOLD_``) and ``PYTHONHASHSEED``; and
    it marks the process as its children's parent (``__DASK_PARENT_PID``)."""
    from distributed import LocalCluster

    before = dict(os.environ)
    try:
        with LocalCluster(**options) as cluster:
            _restore_environ(before)  # the workers have been spawned
            yield cluster
    finally:
        _restore_environ(before)  # a worker the nanny restarted set them again


_HARNESS = pytest.StashKey[SharedHarness]()


def pytest_configure(config):
    """In pytest-xdist's controlling process: start the session's one Prefect test API
    (``prefect_api``) for the workers it is about to start. A session without workers
    starts its own harness when a test needs it, never an outer session's API."""
    if hasattr(config, "workerinput"):
        return
    if not config.getoption("numprocesses", None) or config.getoption("dist", "no") == "no":
        os.environ.pop(API_FILE_VAR, None)
        return
    harness = SharedHarness(Path(tempfile.mkdtemp(prefix="fdptm-tests-api-")) / "api")
    os.environ[API_FILE_VAR] = str(harness.file)  # before the thread reads the environment
    harness.start()
    config.stash[_HARNESS] = harness


def pytest_unconfigure(config):
    harness = config.stash.get(_HARNESS, None)
    if harness is not None:
        harness.stop()
        shutil.rmtree(harness.file.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def prefect_harness():
    """A real, temporary Prefect API for flow runs (prefect_test_harness): in a parallel
    session the one the controlling process started for all its workers, else this
    process's own."""
    if os.environ.get(API_FILE_VAR):
        with using(shared_url(Path(os.environ[API_FILE_VAR]))):
            yield
        return
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=STARTUP):
        yield


@pytest.fixture(scope="session")
def served_env(prefect_harness, tmp_path_factory):
    """An environment whose ``fdptm`` commands are handed to a ``fdptm serve`` of this
    session (one per test process), against the session's Prefect API: for tests that run
    many CLI commands in child processes, each of which would otherwise pay a fresh
    process's imports. A served command is the CLI's code in a process of its own, killed
    and recovered like any (tests/test_serve.py); tests of what a fresh process does keep
    the default (``FDPTM_SERVE=off``)."""
    from prefect.settings import PREFECT_API_URL

    sockets = tmp_path_factory.mktemp("serve-sockets")
    sockets.chmod(0o700)
    env = dict(
        os.environ,
        PREFECT_API_URL=PREFECT_API_URL.value(),
        FDPTM_SERVE="on",
        FDPTM_SERVE_DIR=str(sockets),
    )
    command = [sys.executable, "-P", "-m", "fdptm.cli", "serve"]
    started = subprocess.run(
        [*command, "--detach"], env=env, capture_output=True, text=True, timeout=600
    )
    assert started.returncode == 0, started.stdout + started.stderr
    yield env
    subprocess.run([*command, "--stop"], env=env, capture_output=True, timeout=600)


SERVE_VARS = ("FDPTM_SERVE", "FDPTM_SERVE_DIR")


@pytest.fixture
def served(served_env, monkeypatch):
    """This test's ``fdptm`` child processes (which inherit ``os.environ``, or keep
    ``SERVE_VARS`` of an environment they build) are handed to the session's server
    (``served_env``); a command that must start fresh sets ``FDPTM_SERVE=off``."""
    from fdptm.handoff import socket_path
    from fdptm.serve import holder

    for name in SERVE_VARS:
        monkeypatch.setenv(name, served_env[name])
    path = socket_path()
    assert holder() is not None and path is not None and path.exists(), (
        "no fdptm serve runs for this process's environment: the session's server stopped, "
        "or something changed what keys it (fdptm.handoff.key), and the commands would run "
        "in fresh processes"
    )


@pytest.fixture
def workspace(tmp_path):
    from fdptm.storage.workspace import Workspace

    return Workspace.resolve(tmp_path / "ws")


@pytest.fixture
def small(tmp_path):
    """A workspace whose dataset ``small`` holds 80 one-line documents over two word groups
    (document level): enough for a quick seeded release."""
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    workspace = Workspace.resolve(tmp_path / "ws")
    path = tmp_path / "small.txt"
    lines = ["apple banana cherry grape"] * 40 + ["durian elderberry figs lemon"] * 40
    path.write_text("\n".join(lines))
    ingest(path, "small", workspace)
    return workspace


S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    """A TCP port nothing listens on (at the time of the call)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible server on localhost (moto's server mode, its own process): its
    endpoint URL. Tests create their own buckets (credentials ``S3_CREDENTIALS``)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url, timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("moto's server did not start")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server (Debian's package) for this test process
    (``postgres_server.PostgresServer``)."""
    from postgres_server import PostgresServer

    server = PostgresServer(free_port()).start()
    yield server
    server.stop()


@pytest.fixture
def pg_catalog(postgres_server, monkeypatch, tmp_path_factory) -> str:
    """A new empty PostgreSQL database as the catalog of every workspace in this test
    ($FDPTM_CATALOG, inherited by the processes the test starts), with the keys its hosts
    share ($FDPTM_SECRET_KEY, $FDPTM_SIGNING_KEY): its URL."""
    for name, value in shared_keys(tmp_path_factory.mktemp("keys")).items():
        monkeypatch.setenv(name, value)
    url = postgres_server.database()
    monkeypatch.setenv("FDPTM_CATALOG", url)
    return url


def shared_keys(folder: Path) -> dict[str, str]:
    """A secret key and a signing key in ``folder`` (0600), as the environment variables
    that give them to every host of a PostgreSQL catalog."""
    import secrets as random

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    secret, signing = folder / "secret.key", folder / "signing.pem"
    secret.write_text(random.token_hex(32))
    signing.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    for path in (secret, signing):
        path.chmod(0o600)
    return {"FDPTM_SECRET_KEY": str(secret), "FDPTM_SIGNING_KEY": str(signing)}


def s3_filesystem(endpoint: str):
    """An s3fs filesystem on the test server, for tests to put and inspect objects."""
    import s3fs

    return s3fs.S3FileSystem(
        key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint}
    )


@pytest.fixture(scope="session")
def pheme_raw() -> Path:
    if not PHEME_RAW.exists():
        pytest.fail(f"PHEME data missing at {PHEME_RAW}: ../shared must sit beside the repo")
    return PHEME_RAW


TIMED_MONDAY = "2024-01-01"


@pytest.fixture(scope="session")
def timed_pheme(tmp_path_factory, pheme_raw) -> list[Path]:
    """PHEME's real tweets with timestamps, as two JSONL files (two batches).

    PHEME has no times: tweet i is dated day i mod 70 from Monday 2024-01-01 (ten weeks),
    hour i mod 24 UTC; the first half of the tweets is the first file.
    """
    import datetime as dt
    import json

    root = tmp_path_factory.mktemp("timed-pheme")
    texts = json.loads(pheme_raw.read_text())["text"]
    monday = dt.date.fromisoformat(TIMED_MONDAY)
    half = len(texts) // 2
    paths = []
    for part, rows in enumerate((range(half), range(half, len(texts)))):
        path = root / f"part{part}.jsonl"
        path.write_text(
            "".join(
                json.dumps(
                    {
                        "doc_id": f"t{i}",
                        "text": texts[i],
                        "ts": f"{monday + dt.timedelta(days=i % 70)}T{i % 24:02d}:00:00Z",
                    }
                )
                + "\n"
                for i in rows
            )
        )
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def timed_ws(tmp_path_factory, timed_pheme, prefect_harness):
    """A workspace per test module holding ``timed_pheme`` as dataset ``pheme`` (2 batches)."""
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    workspace = Workspace.resolve(tmp_path_factory.mktemp("timed") / "ws")
    for path in timed_pheme:
        ingest(path, "pheme", workspace)
    return workspace
