"""The CLI's temporary Prefect API server (``flows.running.TemporaryAPI``): started by the
CLI itself once a command is accepted, never importing Prefect's server package into the
CLI's process, unused where a Prefect profile names an API, and never outliving its
command, even one killed by SIGKILL. Real ``fdptm`` processes and real servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fdptm.storage.catalog import Catalog

RELEASE = ["release", "--dataset", "small", "--epsilon", "1000", "--delta", "1e-5"]
RELEASE += ["--topics", "2", "--iterations", "5", "--mechanism", "hdp-lda", "--seed", "3"]
RELEASE += ["--no-progress"]


def _env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell: no ``PREFECT_API_URL``, its own ``PREFECT_HOME``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FDPTM_", "PREFECT_"))}
    return {**env, "PREFECT_HOME": str(home), **extra}


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_release_runs_on_the_clis_own_server_without_importing_prefects_server(small, tmp_path):
    code = (
        "import sys; from fdptm.cli import main; rc = main(sys.argv[1:]); "
        "print('RESULT', rc, 'prefect.server.api.server' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *RELEASE, "--workspace", str(small.root)],
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.stdout.splitlines()[-1] == "RESULT 0 False", out.stderr[-3000:]
    (run,) = Catalog(small).query("SELECT status FROM runs WHERE kind = 'release'")
    assert run["status"] == "succeeded"
    assert (tmp_path / "home" / "prefect.db").exists()  # the flow run went to Prefect's database


def test_the_server_dies_with_a_killed_release(small, tmp_path):
    """SIGKILL runs no atexit hook: the server still goes, by the parent-death signal."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fdptm.cli", *RELEASE, "--workspace", str(small.root)],
        env=_env(tmp_path / "home", FDPTM_STOP_AT="during-train"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        while not Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].startswith(" T"):
            assert proc.poll() is None and time.monotonic() < deadline, "never reached M2"
            time.sleep(0.1)
        servers = [
            pid
            for pid in _children(proc.pid)
            if b"fdptm.flows.api_server" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert len(servers) == 1
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 60
    while _alive(servers[0]):
        assert time.monotonic() < deadline, "the temporary server outlived its command"
        time.sleep(0.1)


@pytest.mark.usefixtures("prefect_harness")
def test_no_server_where_a_prefect_profile_names_an_api(small, tmp_path):
    """A profile's PREFECT_API_URL (not in the environment): the server's process reads
    Prefect's settings and exits unused, so nothing touches this PREFECT_HOME's database,
    and the release runs on the profile's API."""
    from prefect.settings import PREFECT_API_URL

    home = tmp_path / "home"
    home.mkdir()
    (home / "profiles.toml").write_text(
        f'active = "team"\n\n[profiles.team]\nPREFECT_API_URL = "{PREFECT_API_URL.value()}"\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "fdptm.cli", *RELEASE, "--workspace", str(small.root)],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert not (home / "prefect.db").exists()
    (run,) = Catalog(small).query("SELECT status FROM runs WHERE kind = 'release'")
    assert run["status"] == "succeeded"


def test_the_api_server_gets_uvloop_and_httptools():
    """fdptm depends on both so that uvicorn, on which ``fdptm.flows.api_server`` runs
    Prefect's API server with its automatic choice of loop and HTTP parser, picks them
    (benchmarks/small_release.md). The server's own options leave both choices to uvicorn,
    and uvicorn's choice here is uvloop and httptools."""
    import uvicorn

    from fdptm.flows import api_server

    server = uvicorn.Config(api_server.APP, **api_server.OPTIONS, log_config=None)
    assert (server.loop, server.http) == ("auto", "auto")

    async def app(scope, receive, send) -> None:
        return None

    config = uvicorn.Config(app, log_level="error", log_config=None)
    config.load()
    assert config.http_protocol_class.__name__ == "HttpToolsProtocol"
    assert config.get_loop_factory().__module__ == "uvloop"
