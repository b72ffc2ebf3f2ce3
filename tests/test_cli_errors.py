"""Environment failures give a clear message and exit 2, never a traceback, and lose nothing:
a closed pipe, Prefect's temporary API not starting in time, Prefect's API dying under a
running release. Real ``fdptm`` processes throughout."""

from __future__ import annotations

import os
import subprocess
import sys

from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

RELEASE = ["--epsilon", "1000", "--delta", "1e-5", "--topics", "2", "--iterations", "5"]
MECHANISM = ["--mechanism", "hdp-lda", "--seed", "3", "--no-progress"]


def _env(home, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: no fault injection, no test log levels, and no
    shared API (each process starts its own temporary Prefect server, as the CLI does, with
    its database in ``home``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FDPTM_", "PREFECT_"))}
    env["PREFECT_HOME"] = str(home)
    return {**env, **extra}


def release(workspace: Workspace, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``fdptm release`` on the small dataset in a real process with ``env``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "fdptm.cli",
            "release",
            "--dataset",
            "small",
            *RELEASE,
            *MECHANISM,
            "--workspace",
            str(workspace.root),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def test_budget_into_a_closed_pipe_ends_quietly(small):
    with Catalog(small).transaction() as con:  # more output than a pipe buffer holds
        con.executemany(
            "INSERT INTO ledger (entry_id, dataset, run_id, stage, mechanism, adjacency, epsilon,"
            " delta, state, created_at, updated_at) VALUES (?, 'small', ?, 'train', 'm',"
            " 'document', 0.001, 0, 'spent', now(), now())",
            [[f"e{i}", f"run{i}"] for i in range(3000)],
        )
    out = subprocess.run(
        f"{sys.executable} -m fdptm.cli budget --dataset small --workspace {small.root} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        env=_env(small.root.parent / "prefect-home"),
        timeout=300,
    )
    assert out.stdout.startswith("dataset 'small'")
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr


def test_prefect_not_starting_in_time_is_a_clear_error_and_reserves_nothing(small):
    out = release(
        small,
        _env(
            small.root.parent / "prefect-home", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="0"
        ),
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert "did not start within 0 s" in out.stderr and "Traceback" not in out.stderr
    assert "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in out.stderr
    assert Catalog(small).query("SELECT * FROM ledger") == []


def test_prefect_api_dying_under_a_release_loses_nothing(small):
    """The temporary server is killed (SIGKILL) while M2 runs. The stages keep going (they
    exchange files, not Prefect results): the release is published and its run succeeded;
    only Prefect's own bookkeeping fails, and the command says so without a traceback."""
    out = release(
        small,
        _env(
            small.root.parent / "prefect-home",
            FDPTM_KILL_SERVER_AT="during-train",
            PREFECT_CLIENT_MAX_RETRIES="1",
        ),
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "lost the connection to Prefect's API" in out.stderr
    catalog = Catalog(small)
    (run,) = catalog.query("SELECT run_id, status FROM runs WHERE kind = 'release'")
    assert run["status"] == "succeeded"
    assert (small.root / "releases" / run["run_id"] / "manifest.json").exists()
    assert {e["state"] for e in catalog.query("SELECT state FROM ledger")} == {"spent"}
