"""An audit of a deliberately broken mechanism fails with exit code 4 and names the stage.

The broken M2 (``broken_mechanism.py``) runs non-private collapsed Gibbs sampling and claims
epsilon-DP. The run gives M1 99% of epsilon = 10, so the claim left for M2 is 0.1 per
document. The audit's M2-alone attack (models that keep the release's vocabulary) bounds
M2's epsilon from below at 95% confidence for all seven attacks together: on these seeds at
0.31, through the second inequality of the bound, (1 - FPR_hi) / (1 - TPR_lo) = 0.153 /
0.112 (the members are rarely left unflagged). The same configuration with a sound M2
(dp-vi at the same budget) passes, so the failure is the mechanism's and not the audit's.
"""

from __future__ import annotations

import json

import pytest
from broken_mechanism import BROKEN

from fdptm.cli import main
from fdptm.mechanisms.registry import MECHANISMS
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace
from fdptm.tasks.ingest import ingest

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _audit(workspace: Workspace, mechanism: str, capsys) -> tuple[int, str, str]:
    ws = ["--workspace", str(workspace.root)]
    args = ["--dataset", "pheme", "--epsilon", "10", "--delta", "1e-5", "--topics", "5"]
    release = [*args, "--m1-fraction", "0.99", "--mechanism", mechanism, "--iterations", "50"]
    assert main(["release", *release, "--seed", "2", "--no-progress", *ws]) == 0
    capsys.readouterr()
    run_id = Catalog(workspace).query(
        "SELECT r.run_id FROM releases r JOIN runs USING (run_id) WHERE params LIKE ?",
        [f'%"mechanism": "{mechanism}"%'],
    )[0]["run_id"]
    code = main(["audit", "--run", run_id, "--shadows", "16", "--seed", "1", *ws])
    return code, run_id, capsys.readouterr().err


def test_audit_of_a_mechanism_without_noise_fails_with_exit_4(
    tmp_path, pheme_raw, capsys, monkeypatch
):
    monkeypatch.setitem(MECHANISMS, BROKEN.name, BROKEN)
    workspace = Workspace.resolve(tmp_path / "ws")
    ingest(pheme_raw, "pheme", workspace)
    code, run_id, err = _audit(workspace, BROKEN.name, capsys)
    assert code == 4
    assert "FAILED" in err and "Suspect: M2" in err and BROKEN.name in err
    report = json.loads(
        (workspace.root / "internal" / "audits" / f"{run_id}-online" / "audit.json").read_text()
    )
    m2 = report["bounds"]["M2"]
    assert m2["claim"] == pytest.approx(0.1) and m2["lower_bound"] > m2["claim"]
    assert report["verdict"] == "failed" and report["suspects"] == ["M2"]
    verdicts = Catalog(workspace).query(
        "SELECT DISTINCT verdict FROM audit_results WHERE run_id = ?", [run_id]
    )
    assert verdicts == [{"verdict": "failed"}]  # a failed audit is recorded before it raises
    assert not (workspace.root / "releases" / run_id / "audit.json").exists()

    code, _, err = _audit(workspace, "dp-vi", capsys)
    assert code == 0, err
