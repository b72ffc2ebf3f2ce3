"""Running fdptm's flows from Python without Prefect writing to the terminal.

``environment_defaults`` sets fdptm's Prefect defaults (no telemetry; a generous start-up
timeout for the temporary API server on a busy host); ``route_prefect_logs`` sends
Prefect's logs to its API and to Python's logging instead of the console (``fdptm.api``;
the CLI, which must start fast, silences them by level instead); ``run`` calls a flow
without the flow heartbeat, which only serves a long-lived API's monitor; ``prefetch``
imports a heavy module the flow needs late on a background thread. The CLI and
``fdptm.api`` both go through here.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

STARTUP_TIMEOUT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
_DETACHED: list[logging.Handler] = []


def environment_defaults() -> None:
    """Environment defaults for every fdptm process that runs flows (no telemetry; a
    start-up timeout for the temporary API); the caller's own settings win."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    # Prefect waits 20 s for its temporary API server by default: too short on a busy host
    os.environ.setdefault(STARTUP_TIMEOUT, "120")


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


def run(flow: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``flow(*args, **kwargs)`` without the flow heartbeat."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        return flow(*args, **kwargs)
