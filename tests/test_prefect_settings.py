"""The Prefect settings a flow run by ``flows.running`` sees: read from the caller's
environment as it is when the run starts, also where a ``PREFECT_*`` variable was set after
Prefect's import, and fdptm's defaults (a 120 s start-up timeout for the temporary API, no
telemetry) in force for a Python caller whose import of the flow imports Prefect. Each case
runs in a fresh Python process, since Prefect reads its settings once, at its import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TIMEOUT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"


def _python(code: str, home: Path) -> dict:
    """``code``'s last printed line, read as JSON, from a fresh process with a user's
    environment: no PREFECT_* or FDPTM_* variables, no release process to hand off to."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FDPTM_", "PREFECT_"))}
    env.update(PREFECT_HOME=str(home), FDPTM_SERVE="off")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_variable_set_after_prefects_import_counts(tmp_path):
    seen = _python(
        f"""
import json, os
import prefect
from prefect.settings import get_current_settings
from fdptm.flows import running

os.environ["{TIMEOUT}"] = "123"
os.environ["PREFECT_API_URL"] = "http://127.0.0.1:9/api"
settings = running.run(get_current_settings)
print(json.dumps([settings.server.ephemeral.startup_timeout_seconds, settings.api.url]))
""",
        tmp_path,
    )
    assert seen == [123, "http://127.0.0.1:9/api"]


def test_an_api_named_after_prefects_import_is_used_and_none_started(tmp_path):
    """A Python caller that imported Prefect first and then named its API (in lower case,
    which Prefect reads too): the run uses that API, and fdptm starts no temporary one."""
    seen = _python(
        """
import json, os
import prefect
from fdptm.flows import running

os.environ["prefect_api_url"] = "http://127.0.0.1:9/api"
settings = running.run_named("prefect.settings:get_current_settings", True, (), {})
print(json.dumps([settings.api.url, len(running._API)]))
""",
        tmp_path,
    )
    assert seen == ["http://127.0.0.1:9/api", 0]


def test_a_python_callers_flow_import_gets_fdptms_defaults(tmp_path):
    seen = _python(
        """
import json, sys
from fdptm.flows import running

assert "prefect" not in sys.modules
settings = running.run_named("prefect.settings:get_current_settings", False, (), {})
print(json.dumps([settings.server.ephemeral.startup_timeout_seconds,
                  settings.server.analytics_enabled]))
""",
        tmp_path,
    )
    assert seen == [120, False]


def test_settings_known_to_be_current_are_used_as_they_are(tmp_path):
    """Where Prefect read its settings after an fdptm entry point set its defaults, ``run``
    does not read them again (the shared sub-models are the global ones); after a variable
    changed, they are read again, as a fresh process would read them, for the run alone."""
    seen = _python(
        f"""
import json, os
from fdptm.flows import running

running.environment_defaults()
running.settings_to_be_read()  # as the fdptm command does, before Prefect's import
import prefect.context
from prefect.settings import get_current_settings

def probe():
    settings = get_current_settings()
    same = settings.server is prefect.context.GLOBAL_SETTINGS_CONTEXT.settings.server
    return [settings.server.ephemeral.startup_timeout_seconds, same]

first = running.run(probe)
os.environ["{TIMEOUT}"] = "77"
second = running.run(probe)
kept = prefect.context.GLOBAL_SETTINGS_CONTEXT.settings.server.ephemeral.startup_timeout_seconds
print(json.dumps([first, second, kept]))
""",
        tmp_path,
    )
    assert seen == [[120, True], [77, False], 120]  # the host's global settings left alone


def test_a_harness_that_replaced_the_global_settings_keeps_them(tmp_path):
    """Prefect's test harness also makes its settings the process-global ones (for threads
    and contexts copied before it): a run there keeps its API URL, even where a variable
    changed since the harness read them."""
    seen = _python(
        f"""
import json, os, threading
from fdptm.flows import running

# a Python caller's first flow: its import makes Prefect's own settings
running.run_named("prefect.settings:get_current_settings", False, (), {{}})
import prefect.context
from prefect.context import SettingsContext, get_settings_context
from prefect.settings import get_current_settings

own = get_settings_context()
settings = own.settings.copy_with_update(updates={{"api.url": "http://127.0.0.1:9/api"}})
harness = SettingsContext(profile=own.profile, settings=settings)
os.environ["{TIMEOUT}"] = "77"
out = []
with prefect.context._temporary_global_settings_context(harness):  # what the harness does
    thread = threading.Thread(target=lambda: out.append(running.run(get_current_settings)))
    thread.start()
    thread.join()
print(json.dumps([out[0].api.url, out[0].server.ephemeral.startup_timeout_seconds]))
""",
        tmp_path,
    )
    assert seen == ["http://127.0.0.1:9/api", 120]


def test_a_command_run_in_process_leaves_no_claim_on_later_settings(tmp_path):
    """``fdptm.cli.main()`` as a process's entry notes that Prefect's settings will be read
    from this environment; a command that ends without a flow run drops that note, so a
    harness the caller starts later keeps its settings in every thread."""
    seen = _python(
        f"""
import contextlib, io, json, os, sys, threading
from fdptm import cli
from fdptm.flows import running

sys.argv = ["fdptm", "mechanisms"]
with contextlib.redirect_stdout(io.StringIO()):
    assert cli.main() == 0
import prefect.context
from prefect.context import SettingsContext, get_settings_context
from prefect.settings import get_current_settings

own = get_settings_context()
settings = own.settings.copy_with_update(updates={{"api.url": "http://127.0.0.1:9/api"}})
harness = SettingsContext(profile=own.profile, settings=settings)
os.environ["{TIMEOUT}"] = "77"
out = []
with prefect.context._temporary_global_settings_context(harness):
    thread = threading.Thread(target=lambda: out.append(running.run(get_current_settings)))
    thread.start()
    thread.join()
print(json.dumps(out[0].api.url))
""",
        tmp_path,
    )
    assert seen == "http://127.0.0.1:9/api"
