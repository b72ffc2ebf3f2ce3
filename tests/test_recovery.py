"""Crash recovery with real ``kill -9``: real ``fdptm release`` processes die at each stage
boundary (``FDPTM_KILL_AT``, see ``fdptm.faults``), then ``fdptm recover`` and
``fdptm release --resume`` must leave a ledger with nothing reserved by a dead run, nothing
spent twice, and nothing lost that was stored.

The processes share the session's Prefect API (``PREFECT_API_URL``) so that no process
waits for a temporary server of its own, and ``fdptm()``'s commands are handed to the
session's ``fdptm serve`` (conftest ``served_env``): each runs in a forked process of its
own, which ``FDPTM_KILL_AT`` kills as it would a fresh one (its caller then dies of the same
signal). The live-run test starts its release as a fresh process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

pytestmark = pytest.mark.usefixtures("prefect_harness")
_SERVED: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _served(served_env):
    _SERVED.update(served_env)


RELEASE = ["--epsilon", "1000", "--delta", "1e-5", "--topics", "2", "--iterations", "5"]
MECHANISM = ["--mechanism", "hdp-lda", "--seed", "3", "--no-progress"]


def fdptm(workspace: Workspace, *args: str, kill_at: str | None = None, served: bool = True):
    """Run ``fdptm`` in a real child process, handed to the session's ``fdptm serve``
    (``served``) or not."""
    env = dict(_SERVED) if served else dict(_SERVED, FDPTM_SERVE="off")
    env.pop("FDPTM_KILL_AT", None)
    if kill_at:
        env["FDPTM_KILL_AT"] = kill_at
    return subprocess.run(
        [sys.executable, "-m", "fdptm.cli", *args, "--workspace", str(workspace.root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def ledger(workspace: Workspace) -> list[dict]:
    return Catalog(workspace).query(
        "SELECT run_id, stage, state, epsilon FROM ledger ORDER BY stage"
    )


def run_status(workspace: Workspace, run_id: str) -> str:
    rows = Catalog(workspace).query("SELECT status FROM runs WHERE run_id = ?", [run_id])
    return rows[0]["status"]


def killed_run(workspace: Workspace, point: str, served: bool = True) -> str:
    """Start a release that dies by SIGKILL at ``point``; its run id."""
    out = fdptm(
        workspace,
        "release",
        "--dataset",
        "small",
        *RELEASE,
        *MECHANISM,
        kill_at=point,
        served=served,
    )
    assert out.returncode == -signal.SIGKILL, (out.returncode, out.stderr[-2000:])
    (row,) = Catalog(workspace).query("SELECT run_id FROM runs WHERE kind = 'release'")
    return row["run_id"]


@pytest.mark.parametrize(
    ("point", "lost"),
    [
        ("during-preprocess", []),
        ("after-preprocess", []),
        ("after-bounding", []),
        ("during-vocabulary", ["vocabulary"]),
        ("after-vocabulary", []),
        ("after-sanitize", []),
        ("during-train", ["train"]),
        ("after-train", []),
        ("during-release", []),
    ],
)
def test_kill_after_the_first_read_spends_and_resume_finishes_without_spending_again(
    small, point, lost
):
    run_id = killed_run(small, point)
    assert run_status(small, run_id) == "running"  # nobody closed it: the process died

    out = fdptm(small, "recover")
    assert out.returncode == 0, out.stderr
    assert run_id in out.stdout and "0 reservation(s) refunded" in out.stdout
    assert run_status(small, run_id) == "failed"
    states = {e["stage"]: e["state"] for e in ledger(small)}
    assert states == {"vocabulary": "spent", "train": "spent"}  # spent at PRE's first read

    out = fdptm(small, "release", "--resume", run_id, "--no-progress")
    assert out.returncode == 0, out.stderr[-2000:]
    assert run_status(small, run_id) == "succeeded"
    assert (small.root / "releases" / run_id / "manifest.json").exists()
    entries = ledger(small)
    assert {e["state"] for e in entries} == {"spent"}  # nothing reserved, nothing refunded
    live = sorted(e["stage"] for e in entries if "/lost-" not in e["stage"])
    assert live == ["train", "vocabulary"]  # one live entry per DP stage: never spent twice
    assert sorted(e["stage"] for e in entries if "/lost-" in e["stage"]) == [
        f"{s}/lost-1" for s in lost
    ]


def test_kill_right_after_the_reservation_refunds_everything(small):
    """A fresh process (not served) killed, and recovered by a fresh one."""
    run_id = killed_run(small, "after-reserve", served=False)
    assert {e["state"] for e in ledger(small)} == {"reserved"}
    out = fdptm(small, "budget", "--dataset", "small", served=False)  # any command recovers
    assert out.returncode == 0, out.stderr
    assert f"run {run_id}" in out.stderr and "2 reservation(s) refunded" in out.stderr
    assert {e["state"] for e in ledger(small)} == {"refunded"}
    assert run_status(small, run_id) == "failed"
    out = fdptm(small, "release", "--resume", run_id)
    assert out.returncode == 2 and "never read private data" in out.stderr


def test_a_live_run_is_never_recovered(small):
    """``recover`` tests the owner's lock, not a clock: a run stopped mid-M2 (alive, holding
    its run) is left alone, and finishes once it continues."""
    from prefect.settings import PREFECT_API_URL

    env = dict(os.environ, PREFECT_API_URL=PREFECT_API_URL.value(), FDPTM_STOP_AT="during-train")
    proc = subprocess.Popen(
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
            str(small.root),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_stopped(proc.pid), "the release never reached M2"
        out = fdptm(small, "recover")
        assert out.returncode == 0 and "no dead run found" in out.stdout
        (row,) = Catalog(small).query("SELECT status FROM runs WHERE kind = 'release'")
        assert row["status"] == "running"
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    (row,) = Catalog(small).query("SELECT status FROM runs WHERE kind = 'release'")
    assert row["status"] == "succeeded"


def _wait_stopped(pid: int) -> bool:
    """Wait until process ``pid`` is stopped (state T); False if it exits first."""
    import time

    while True:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state == "T":
            return True
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)


def test_a_forked_child_does_not_keep_a_dead_owners_run_alive(tmp_path):
    """The owner's lock descriptor is closed in forked children: when the owner dies, its run
    is dead even while a child it forked lives on."""
    from fdptm.storage import recovery

    workspace = Workspace.resolve(tmp_path / "ws").create()
    code = (
        "import os, sys, time\n"
        "from fdptm.storage import recovery\n"
        "from fdptm.storage.workspace import Workspace\n"
        "ws = Workspace.resolve(sys.argv[1])\n"
        "recovery.claim(ws, 'run-x')\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    os.write(1, b'forked\\n')\n"
        "    time.sleep(120)\n"
        "    os._exit(0)\n"
        "os.write(1, f'{child}\\n'.encode())\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code, str(workspace.root)], stdout=subprocess.PIPE, text=True
    )
    # The child writes once os.fork() has returned in it, i.e. after the at-fork hook closed
    # its inherited descriptors; until then it holds the lock like any fork does (the test
    # once killed the owner before a busy machine had scheduled the child). One os.write
    # per line: a pipe keeps each whole, where print's two writes could interleave.
    lines = {owner.stdout.readline().strip(), owner.stdout.readline().strip()}
    assert "forked" in lines, lines
    lines.remove("forked")
    child = int(lines.pop())
    try:
        assert recovery.alive(workspace, "run-x")
        owner.kill()
        owner.wait(timeout=60)
        assert os.path.exists(f"/proc/{child}")  # the forked child still runs
        assert not recovery.alive(workspace, "run-x")
    finally:
        os.kill(child, signal.SIGKILL)
        owner.kill()
