"""Running fdptm's flows from Python without Prefect writing to the terminal.

``environment_defaults`` sets fdptm's Prefect defaults (no telemetry; a generous start-up
timeout for the temporary API server on a busy host); ``route_prefect_logs`` sends
Prefect's logs to its API and to Python's logging instead of the console (``fdptm.api``;
the CLI, which must start fast, silences them by level instead); ``run`` calls a flow
without the flow heartbeat, which only serves a long-lived API's monitor. The CLI and
``fdptm.api`` both go through here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
_ROUTED = False


def logging_config() -> Path:
    """fdptm's Prefect logging configuration (package data)."""
    from importlib.resources import files

    return Path(str(files("fdptm") / "resources" / "prefect_logging.yml"))


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
    """Prefect logs to its API and to Python's logging, never to the console (once per
    process; ``PREFECT_LOGGING_SETTINGS_PATH`` set by the caller is respected)."""
    global _ROUTED
    if _ROUTED:
        return
    os.environ.setdefault("PREFECT_LOGGING_SETTINGS_PATH", str(logging_config()))
    import prefect  # noqa: F401  (its import configures logging from the setting above)
    from prefect.logging.configuration import setup_logging
    from prefect.logging.handlers import PrefectConsoleHandler
    from prefect.settings import PREFECT_LOGGING_SETTINGS_PATH, temporary_settings

    path = Path(os.environ["PREFECT_LOGGING_SETTINGS_PATH"])
    with temporary_settings(updates={PREFECT_LOGGING_SETTINGS_PATH: path}):
        setup_logging(incremental=False)  # in case Prefect was imported before us
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)]:
        root.removeHandler(handler)  # Prefect's default config puts its console on root
    _ROUTED = True


def run(flow: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``flow(*args, **kwargs)`` without the flow heartbeat."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        return flow(*args, **kwargs)
