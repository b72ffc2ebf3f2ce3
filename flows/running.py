"""Running fdptm's flows from Python without Prefect writing to the terminal.

``environment_defaults`` sets fdptm's Prefect defaults (no telemetry; a generous start-up
timeout for the temporary API server on a busy host); ``route_prefect_logs`` sends
Prefect's logs to its API and to Python's logging instead of the console (``fdptm.api``;
the CLI, which must start fast, silences them by level instead); ``run`` calls a flow
without the flow heartbeat, which only serves a long-lived API's monitor; ``prefetch``
imports a heavy module the flow needs late on a background thread; ``start_api`` starts
Prefect's temporary API server for a CLI command before Prefect is imported (``TemporaryAPI``).
The CLI and ``fdptm.api`` both go through here.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fdptm import handoff
from fdptm.errors import FdptmError
from fdptm.flows import api_server

STARTUP_TIMEOUT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
_DETACHED: list[logging.Handler] = []
_READ_FROM: list[tuple[Any, tuple]] = []
"""Prefect's own global settings context (None: not yet made) and the ``_source`` it was
read from, where fdptm knows them."""


def environment_defaults() -> None:
    """Environment defaults for every fdptm process that runs flows (no telemetry; a
    start-up timeout for the temporary API); the caller's own settings win."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    # Prefect waits 20 s for its temporary API server by default: too short on a busy host
    os.environ.setdefault(STARTUP_TIMEOUT, "120")


def settings_to_be_read() -> None:
    """For a process's entry point (the ``fdptm`` command), before Prefect's import: the
    global settings Prefect's import makes will be read from this environment, and no
    caller's context (a test harness) will replace them before ``run``."""
    if "prefect" not in sys.modules:
        _READ_FROM[:] = [(None, _source())]


def settings_not_read() -> None:
    """Drop ``settings_to_be_read``'s note if no run used it (the command ended first): a
    caller that goes on in this process may make settings of its own before its first run."""
    if _READ_FROM and _READ_FROM[0][0] is None:
        _READ_FROM.clear()


def settings_read() -> None:
    """Prefect's global settings context was just made (its import, or
    ``refresh_global_settings_context``) from this environment."""
    import prefect.context

    _READ_FROM[:] = [(prefect.context.GLOBAL_SETTINGS_CONTEXT, _source())]


def _source() -> tuple:
    """What Prefect reads its settings from, as far as fdptm follows it: the PREFECT_*
    variables (any case), the working directory (where Prefect reads .env and prefect.toml;
    their edits are not followed) and the profiles file's size and modification time."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("PREFECT_")))
    home = Path(os.environ.get("PREFECT_HOME", "~/.prefect")).expanduser()
    profiles = Path(os.environ.get("PREFECT_PROFILES_PATH", home / "profiles.toml")).expanduser()
    try:
        info = profiles.stat()
        changed = (info.st_size, info.st_mtime_ns)
    except OSError:
        changed = None
    try:
        directory = os.getcwd()
    except OSError:  # a deleted working directory
        directory = None
    return env, directory, changed


_READ_AGAIN: list[tuple[Any, tuple, Any]] = []
"""The last settings ``run_settings`` read again: (the context, its source, the settings)."""


def run_settings() -> tuple[Any, Any]:
    """The profile and settings a run uses (before its own two changes), as a fresh process
    in this environment would read them, a caller's own settings context winning:

    - Prefect's own global settings, read from an unchanged ``_source``: as they are;
    - Prefect's own, its source changed since (a PREFECT_* variable a Python caller set
      after Prefect's import): read again, as ``Settings()`` (0.2 s, once per source);
    - any other context (a caller's temporary_settings, a test harness, or settings fdptm
      cannot vouch for): read again as temporary_settings reads them, the context's
      values winning (0.2 s, once per context and source).

    The global settings are never replaced: they are the host process's."""
    import prefect.context
    from prefect.settings import Settings

    context = prefect.context.get_settings_context()
    if _READ_FROM and _READ_FROM[0][0] is None:  # the entry point's promise: Prefect's own
        _READ_FROM[:] = [(prefect.context.GLOBAL_SETTINGS_CONTEXT, _READ_FROM[0][1])]
    source = _source()
    own = bool(_READ_FROM) and context is _READ_FROM[0][0]
    if own and source == _READ_FROM[0][1]:
        return context.profile, context.settings
    if not (_READ_AGAIN and _READ_AGAIN[0][0] is context and _READ_AGAIN[0][1] == source):
        settings = Settings() if own else context.settings.copy_with_update()
        _READ_AGAIN[:] = [(context, source, settings)]
    return context.profile, _READ_AGAIN[0][2]


def prepare_prefect() -> None:
    """``environment_defaults`` and ``route_prefect_logs``: for Python callers."""
    environment_defaults()
    route_prefect_logs()


def route_prefect_logs() -> None:
    """Detach Prefect's console handler from every logger it sits on (its default
    configuration puts it on the root logger and on uvicorn's), and give Prefect's loggers a
    NullHandler so that Python's last-resort handler does not print their warnings either.
    Flow and task run logs still reach Prefect's API handlers (the UI) and propagate to the
    root logger, where the application's own handlers, if any, decide (``prefect.extra``
    and ``prefect._internal`` do not propagate, by Prefect's configuration). Nothing is
    reconfigured, so handlers the application or a test harness installed stay as they are.
    Prefect's engine logs a failed task's exception to the same places: fdptm's exceptions
    name files, rows and parameters, never document text."""
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.logging.handlers import PrefectConsoleHandler

    ensure_logging_setup()  # Prefect configures itself lazily: do it now, then detach
    names = ["", *logging.root.manager.loggerDict]
    for name in names:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if isinstance(h, PrefectConsoleHandler)]:
            logger.removeHandler(handler)
            _DETACHED.append(handler)  # logging holds handlers weakly; a collected one
            # would make Prefect's next incremental setup fail and start over
    for name in ("prefect", "uvicorn", "fastapi"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


def prefetch(module: str) -> None:
    """Import ``module`` on a background thread (a heavy import the run needs only at its
    end, e.g. Great Expectations for the release checks), overlapping the numeric stages,
    which release the GIL. Importing it later in the run waits for this import to finish
    (Python's import lock), so the result is the same; an import that fails here fails
    again there, where it is reported."""

    def load() -> None:
        with contextlib.suppress(Exception):
            importlib.import_module(module)

    threading.Thread(target=load, name=f"import-{module}", daemon=True).start()


class _ClearErrors(logging.Filter):
    """fdptm's own errors carry a message that says what is wrong and what to do: Prefect's
    engine logs them without a traceback (anything else keeps its traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], FdptmError):
            record.exc_info = None
            record.exc_text = None
        return True


_CLEAR_ERRORS = _ClearErrors()


def run(flow: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``flow(*args, **kwargs)`` with Prefect's settings as this process's environment has
    them now (``run_settings``), without the flow heartbeat, against the temporary API
    server ``start_api`` started, if it did and Prefect would otherwise start its own; a
    failed run's fdptm error is logged as its message, without a traceback."""
    from prefect.context import SettingsContext

    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logging.getLogger(name).addFilter(_CLEAR_ERRORS)  # a no-op when already there
    profile, settings = run_settings()
    api = settings.api
    if _API:
        with SettingsContext(profile=profile, settings=settings):  # what the server reads
            url = _API[0].url()
        if url:
            api = api.model_copy(update={"url": url})
    flows = settings.flows.model_copy(update={"heartbeat_frequency": None})
    updated = settings.model_copy(update={"api": api, "flows": flows})
    with SettingsContext(profile=profile, settings=updated):
        return flow(*args, **kwargs)


_API: list[TemporaryAPI | _HeldAPI] = []
_HELD: dict[str, Any] = {}


def run_flow(target: str, *args: Any, api: bool = True, **kwargs: Any) -> Any:
    """The flow named ``target`` (``module:name``) run as ``run`` runs it, for the Python
    API: handed to a running release process (``fdptm serve``) when one serves this
    environment, so that neither Prefect nor the flow is imported here; else run in this
    process. ``api``: use a temporary API server when Prefect's settings name none (not for
    flows whose tasks run on Dask workers, see ``start_api``)."""
    served = handoff.call("fdptm.flows.running:run_named", target, api, args, kwargs)
    if served is not handoff.LOCAL:
        return served
    return run_named(target, api, args, kwargs)


@handoff.served
def run_named(target: str, api: bool, args: tuple, kwargs: dict) -> Any:
    """``run_flow``'s work, in whichever process runs it."""
    environment_defaults()  # before the flow's module imports Prefect, which reads them
    imported = "prefect" in sys.modules
    module, _, name = target.partition(":")
    flow = getattr(importlib.import_module(module), name)
    if not imported and "prefect" in sys.modules:
        settings_read()
    prepare_prefect()
    if api:
        from prefect.context import SettingsContext

        profile, settings = run_settings()
        with SettingsContext(profile=profile, settings=settings):  # what start_api reads
            start_api()
    return run(flow, *args, **kwargs)


def use_served_api(url: str, database: tuple[str, str]) -> None:
    """In a child of ``fdptm serve``: ``start_api`` uses the server's temporary API at
    ``url`` instead of starting one, when this request's Prefect settings would have
    started one on the same database (``prefect_database``)."""
    _HELD.update(url=url, database=database)


def prefect_database() -> tuple[str, str]:
    """Prefect's home and database URL as this process's settings have them: where a
    temporary API server keeps its runs."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    url = settings.server.database.connection_url
    url = url.get_secret_value() if hasattr(url, "get_secret_value") else url
    home = Path(settings.home).expanduser().resolve()  # a relative PREFECT_HOME: cwd's
    sqlite = "sqlite+aiosqlite:///"
    if str(url).startswith(sqlite):
        url = sqlite + str(Path(str(url)[len(sqlite) :]).expanduser().resolve())
    return str(home), str(url)


class _HeldAPI:
    """The temporary API server a parent ``fdptm serve`` holds: used, never stopped here."""

    def __init__(self, url: str) -> None:
        self._url = url

    def url(self) -> str:
        return self._url

    def stop(self) -> None:
        return None


def start_api() -> None:
    """Start Prefect's temporary API server for this process's flow runs now, unless
    ``PREFECT_API_URL`` is set in the environment (then no server is needed). For the CLI:
    call it once a command has passed the checks that may refuse it, so that the server's
    start overlaps the command's own imports; ``run`` then uses it, and it stops when the
    process exits (an ``atexit`` hook: after Prefect's event and log workers, which flush
    at interpreter shutdown before ``atexit`` runs, have sent what they hold). Not for
    flows whose tasks run on a Dask task runner: the settings travel to the workers, and
    this server's loopback URL means nothing on another host."""
    if _API or os.environ.get("PREFECT_API_URL") or not _ephemeral_wanted():
        return
    if _HELD and _HELD["database"] == prefect_database():
        _API.append(_HeldAPI(_HELD["url"]))
        return
    _API.append(TemporaryAPI())
    atexit.register(stop_api)


def _ephemeral_wanted() -> bool:
    """Whether Prefect, already imported (a test harness, a Python caller), would start a
    temporary server: no API URL in its settings (``fdptm.flows.api_server`` says why not
    the ephemeral-enabled setting). True when it is not imported yet: the server's own
    process then decides."""
    if "prefect.settings" not in sys.modules:
        return True
    from prefect.settings import get_current_settings

    return not get_current_settings().api.url


def stop_api() -> None:
    """Stop the server ``start_api`` started (nothing if it did not)."""
    while _API:
        _API.pop().stop()


class TemporaryAPI:
    """Prefect's temporary API server for one CLI process, started before Prefect is imported.

    Without ``PREFECT_API_URL`` Prefect starts a temporary ("ephemeral") API server when the
    first flow run asks for a client: it imports Prefect's whole server package into the
    calling process (4.5 s here) only to run the same server as a child process with
    uvicorn, then waits for that child to answer (about 4 s more), all before the flow's
    first task. This class starts the server's process (``fdptm.flows.api_server``) as soon
    as the CLI command is accepted, so its start overlaps the command's imports, and never
    imports the server package here. The flow then talks to it as to any running server:
    the same database (``PREFECT_HOME``), no UI, Prefect's ephemeral services.

    The child itself reads Prefect's settings first and exits unused when they name an API
    (a profile's ``PREFECT_API_URL``); ``url`` then returns None and the flows use that
    API. It binds its own port and reports it through a pipe; it gets SIGTERM when this
    process exits or dies, even by SIGKILL, so no server outlives its command.
    """

    def __init__(self, detached: bool = False) -> None:
        """``detached`` (for ``fdptm serve``): in a process group of its own, so that a
        Ctrl-C meant for the caller's terminal does not stop it, and with its output
        discarded (a held server outlives many commands; nothing of theirs is logged)."""
        read, write = os.pipe()
        quiet = subprocess.DEVNULL if detached else None
        self._port = os.fdopen(read, "rb", buffering=0)
        try:
            self._process: subprocess.Popen | None = subprocess.Popen(
                # -P: the current directory is not put on the child's sys.path, so a folder
                # named fdptm there cannot hide the installed package (issue 27)
                [
                    sys.executable,
                    "-P",
                    "-m",
                    "fdptm.flows.api_server",
                    str(os.getpid()),
                    str(write),
                ],
                env={**os.environ, **_SERVER_ENV},
                pass_fds=(write,),
                stdout=quiet,
                stderr=quiet,
                process_group=0 if detached else None,
            )
        finally:
            os.close(write)
        self._url: str | None = None

    def url(self) -> str | None:
        """The server's API URL once it answers its health check; None when Prefect's
        settings name an API (the server is not needed). Raises Prefect's own errors (the
        CLI explains both) when the server exits while starting or does not answer within
        ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``."""
        import httpx
        from prefect.settings import get_current_settings

        if self._url or self._process is None:
            return self._url
        if not _ephemeral_wanted():
            self.stop()
            return None
        limit = get_current_settings().server.ephemeral.startup_timeout_seconds
        deadline = time.monotonic() + limit
        port = b""
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                if not port.endswith(b"\n") and select.select([self._port], [], [], 0.05)[0]:
                    port += self._port.read(16) or b""
                status = self._process.poll()
                if status == api_server.NOT_NEEDED:
                    self.stop()
                    return None
                if status is not None:
                    self.stop()
                    raise RuntimeError(f"Ephemeral server process exited with code {status}.")
                if port.endswith(b"\n"):
                    api = f"http://127.0.0.1:{int(port)}/api"
                    with contextlib.suppress(httpx.TransportError):
                        if client.get(f"{api}/health").status_code == 200:
                            self._url = api
                            return api
                    time.sleep(0.05)
        self.stop()
        raise RuntimeError("Timed out while attempting to connect to ephemeral Prefect API server.")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and reap it."""
        process, self._process = self._process, None
        self._url = None
        self._port.close()
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_SERVER_ENV = {
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
}
"""What Prefect sets for its temporary server: no UI, the ephemeral services only."""
