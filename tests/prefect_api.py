"""One Prefect test API (``prefect_test_harness``) for a whole parallel session.

Each pytest-xdist worker used to start its own harness: a server process that migrates a
new SQLite database (about 12 s of CPU) and then costs about 0.6 s of CPU per 30 s idle,
three of them for the suite's three workers (110 s of CPU together, ``benchmarks/suite.md``).
The controlling process now starts one on a thread of its own, so the workers' start-up is
not held up, and writes its URL to a file the workers wait for (``API_FILE_VAR``); the workers'
flow runs all go to it, as the runs of many workers go to one Prefect server in
production. Nothing in the tests reads runs, logs or artifacts it did not make itself.
Without xdist (``-n0``) the session starts its own harness, as before."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

API_FILE_VAR = "FDPTM_TESTS_PREFECT_API"
"""The environment variable (set by the controlling process, inherited by its workers) that
names the file holding ``url URL`` once the shared API answers, or ``error WHAT``."""
STARTUP = 180
"""Seconds the harness's server may take to start, and a worker waits for it on top of
that: a busy 2-core machine can be slow (``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``
is set to the same in conftest)."""


class SharedHarness:
    """``prefect_test_harness`` on a thread of the controlling process, from ``start`` until
    ``stop``; its outcome written to ``file``."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prefect test API", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=STARTUP)

    def _run(self) -> None:
        try:
            from prefect.settings import PREFECT_API_URL
            from prefect.testing.utilities import prefect_test_harness

            with prefect_test_harness(server_startup_timeout=STARTUP):
                _publish(self.file, f"url {PREFECT_API_URL.value()}")
                self._done.wait()
        except Exception as exc:  # the workers report it where a test needs the API
            _publish(self.file, f"error {type(exc).__name__}: {exc}")


def _publish(file: Path, line: str) -> None:
    """Write ``line`` to ``file`` at once (a reader never sees half of it)."""
    partial = file.with_name(file.name + ".partial")
    partial.write_text(line, encoding="utf-8")
    partial.replace(file)


def shared_url(file: Path) -> str:
    """The shared API's URL once it answers its health check; a RuntimeError saying why not
    (the harness failed, or nothing within ``2 * STARTUP`` seconds)."""
    deadline = time.monotonic() + 2 * STARTUP
    while not file.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the session's Prefect test API did not start ({file})")
        time.sleep(0.1)
    kind, _, value = file.read_text(encoding="utf-8").partition(" ")
    if kind != "url":
        raise RuntimeError(f"the session's Prefect test API failed to start: {value}")
    with urllib.request.urlopen(f"{value}/health", timeout=30) as response:
        if response.status != 200:
            raise RuntimeError(f"the session's Prefect test API answers {response.status}")
    return value


@contextmanager
def using(url: str) -> Iterator[None]:
    """This process's flow runs against the API at ``url``, with the settings context that
    ``prefect_test_harness`` sets up for its own server (also as the process-wide context,
    for contexts copied before); on exit the run logs and events still queued are sent, as
    the harness does before it stops its server."""
    import prefect.context
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with (
        temporary_settings(updates={PREFECT_API_URL: url}),
        prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()),
    ):
        try:
            yield
        finally:
            with suppress(RuntimeError):  # no flow run logged anything: never started
                APILogWorker.instance().drain()
            EventsWorker.drain_all()
