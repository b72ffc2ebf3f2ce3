"""`fdptm gc`: internal artifacts of finished runs go, what a resume or an audit needs stays,
and releases and the ledger are never touched (real flows, a real killed process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fdptm.cli import main
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

pytestmark = pytest.mark.usefixtures("prefect_harness")
RELEASE = ["--dataset", "small", "--epsilon", "1000", "--delta", "1e-5", "--topics", "2"]
RELEASE += ["--iterations", "5", "--mechanism", "hdp-lda", "--seed", "3", "--no-progress"]


def _files(workspace: Workspace, run_id: str) -> set[str]:
    folder = workspace.root / "internal" / "runs" / run_id
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def _state(workspace: Workspace) -> tuple:
    catalog = Catalog(workspace)
    ledger = catalog.query("SELECT entry_id, state, epsilon FROM ledger ORDER BY entry_id")
    releases = catalog.query("SELECT run_id, manifest_sha256 FROM releases ORDER BY run_id")
    return ledger, releases


def test_gc_keeps_a_releases_audit_inputs_until_asked(small, capsys):
    root = ["--workspace", str(small.root)]
    assert main(["release", *RELEASE, *root]) == 0
    (run_id,) = [r["run_id"] for r in Catalog(small).query("SELECT run_id FROM releases")]
    before = _state(small)
    published = {p.name for p in small.release_dir(run_id).iterdir()}
    assert len(_files(small, run_id)) > 2
    capsys.readouterr()
    assert main(["gc", *root]) == 0
    assert "1 run(s) collected" in capsys.readouterr().out
    assert _files(small, run_id) == {"bounded_tokens.parquet", "sanitized_tokens.parquet"}
    assert _state(small) == before
    assert {p.name for p in small.release_dir(run_id).iterdir()} == published
    assert main(["gc", *root]) == 0
    assert "0 run(s) collected" in capsys.readouterr().out  # idempotent
    assert main(["gc", "--audit-inputs", *root]) == 0
    assert _files(small, run_id) == set()
    assert main(["audit", "--run", run_id, "--shadows", "2", *root]) == 2
    assert "removed by `fdptm gc --audit-inputs`" in capsys.readouterr().err
    assert _state(small) == before


def test_gc_keeps_what_a_resume_needs(small):
    from prefect.settings import PREFECT_API_URL

    env = dict(os.environ, PREFECT_API_URL=PREFECT_API_URL.value(), FDPTM_KILL_AT="after-bounding")
    cli = [sys.executable, "-m", "fdptm.cli"]
    root = ["--workspace", str(small.root)]
    killed = subprocess.run(
        [*cli, "release", *RELEASE, *root], env=env, capture_output=True, text=True, timeout=600
    )
    assert killed.returncode == -9
    (run_id,) = [
        r["run_id"] for r in Catalog(small).query("SELECT run_id FROM runs WHERE kind = 'release'")
    ]
    stored = _files(small, run_id)
    assert "bounded_tokens.parquet" in stored
    assert main(["gc", *root]) == 0  # closes the dead run (failed, spent): kept for --resume
    assert _files(small, run_id) == stored
    assert main(["release", "--resume", run_id, "--no-progress", *root]) == 0
    assert Catalog(small).query("SELECT run_id FROM releases") == [{"run_id": run_id}]
