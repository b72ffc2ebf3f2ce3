"""`fdptm audit` on a real release: internal report, nothing in the release area, no spend."""

from __future__ import annotations

import json
import math

import pytest

from fdptm.cli import main
from fdptm.storage.catalog import Catalog
from fdptm.tasks.ingest import ingest

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_audit_of_a_dp_vi_release(tmp_path, pheme_raw, capsys):
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(tmp_path / "ws")
    ingest(pheme_raw, "pheme", workspace)
    ws = ["--workspace", str(workspace.root)]
    args = ["--dataset", "pheme", "--epsilon", "5", "--delta", "1e-5", "--topics", "5"]
    assert main(["release", *args, "--iterations", "10", "--seed", "2", "--no-progress", *ws]) == 0
    capsys.readouterr()
    catalog = Catalog(workspace)
    run_id = catalog.query("SELECT run_id FROM releases")[0]["run_id"]
    release_files = sorted(p.name for p in (workspace.root / "releases" / run_id).iterdir())
    ledger_before = catalog.query("SELECT count(*) AS n FROM ledger")[0]["n"]
    audit = ["audit", "--run", run_id, "--shadows", "4", "--seed", "1", *ws]
    assert main(audit) == 0
    out = capsys.readouterr().out
    assert "NOT differentially private" in out and "lira-online" in out
    report_row = catalog.query("SELECT path, visibility FROM artifacts WHERE stage = 'audit'")[0]
    assert report_row["visibility"] == "internal" and report_row["path"].startswith("internal/")
    report = json.loads((workspace.root / report_row["path"]).read_text())
    audit_dir = (workspace.root / report_row["path"]).parent
    page = (audit_dir / "report.html").read_text()
    assert "NOT differentially private" in page and run_id in page
    assert (audit_dir / "roc-lira-online.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'src="roc-lira-online.png"' in page
    assert report["verdict"] == "passed" and report["shadows"] == 4
    u = report["utility"]
    assert u["vocabulary_size"] > 10 and -1 <= u["npmi"] <= 1 and u["umass"] < 0
    assert 0 < u["topic_diversity"] <= 1 and 0 <= u["words_above_floor"] <= 10
    assert 0 <= u["against_non_private"]["l1"] <= 2 and u["perplexity_in_sample"] > 1
    # the target model on the half it never saw
    assert -math.inf < u["heldout_loglik_per_token"] < 0
    assert u["perplexity_held_out"] == pytest.approx(math.exp(-u["heldout_loglik_per_token"]))
    # the non-private model on the same documents, side by side
    assert -1 <= u["non_private_npmi"] <= 1 and 0 < u["non_private_topic_diversity"] <= 1
    assert 0 <= u["non_private_words_above_floor"] <= 10
    # the release's claim and each stage's share of the default split (25% / 75%)
    claims = {k: c["epsilon"] for k, c in report["claims_per_document"].items()}
    assert claims == pytest.approx({"release": 5.0, "M1": 2.5, "M2": 2.5})
    assert report["suspects"] == [] and not any(b["exceeded"] for b in report["bounds"].values())
    assert set(report["attacks"]) == {
        "lira-online",
        "lira-online-eq3",
        "lira-online-vocabulary",
        "huang-max-posterior",
        "huang-std",
        "huang-negative-entropy",
        "m2-lira-online",
    }
    # the audit writes nothing into the release area and charges nothing
    assert sorted(p.name for p in (workspace.root / "releases" / run_id).iterdir()) == (
        release_files
    )
    assert catalog.query("SELECT count(*) AS n FROM ledger")[0]["n"] == ledger_before
    # the same numbers in the catalog, one row per attack
    rows = catalog.query("SELECT * FROM audit_results WHERE run_id = ? ORDER BY attack", [run_id])
    assert {r["attack"]: r["auc"] for r in rows} == pytest.approx(
        {name: a["auc"] for name, a in report["attacks"].items()}
    )
    assert {r["scope"] for r in rows} == {"release", "M1", "M2"}
    assert all(r["verdict"] == "passed" and r["shadows"] == 4 for r in rows)
    # three threads give the same numbers as the default runner (the kernels share no
    # state), and a re-audit replaces the catalog rows instead of adding to them
    assert main([*audit, "--workers", "3"]) == 0
    capsys.readouterr()
    again = json.loads((workspace.root / report_row["path"]).read_text())
    assert again["attacks"] == report["attacks"]
    count = catalog.query("SELECT count(*) AS n FROM audit_results WHERE run_id = ?", [run_id])
    assert count[0]["n"] == len(report["attacks"])
    # the models fanned out on two local processes give the same kind of report
    assert main([*audit[:-2], "--mode", "offline", "--workers", "2", "--processes", *ws]) == 0
    assert "lira-offline" in capsys.readouterr().out
    assert main(["audit", "--run", "nope", *ws]) == 2
    assert "no published release" in capsys.readouterr().err
    assert main(["audit", "--run", run_id, "--shadows", "1", *ws]) == 2


def test_audited_release_flow_releases_then_audits(tmp_path, pheme_raw):
    from fdptm.flows.audit import audited_release
    from fdptm.request import ReleaseRequest
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(tmp_path / "ws")
    ingest(pheme_raw, "pheme", workspace)
    request = ReleaseRequest(
        dataset="pheme",
        epsilon=5.0,
        delta=1e-5,
        topics=5,
        iterations=5,
        workspace=str(workspace.root),
    )
    out = audited_release(request, shadows=2)
    assert out["audit"]["run_id"] == out["release"]["run_id"]
    assert out["audit"]["verdict"] == "passed"  # a failed audit raises instead
    assert (workspace.root / "releases" / out["release"]["run_id"] / "manifest.json").exists()


@pytest.mark.parametrize(
    "public_args,claims,has_vocabulary_attack",
    [
        (
            ["--vocabulary", "public:open", "--m1", "none", "--prior", "open"],
            {"release", "M2"},
            False,
        ),
        (
            ["--vocabulary", "public:open", "--m1", "bayesian-prior", "--vocabulary-size", "200"],
            {"release", "M1", "M2"},
            True,
        ),
    ],
)
def test_audit_of_a_release_that_used_public_data(
    tmp_path, pheme_raw, capsys, public_args, claims, has_vocabulary_attack
):
    """The shadows use the run's stored public vocabulary as the run did (M1 skipped, or the
    Bayesian prior over it) and learn the public prior again on their own vocabulary."""
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(tmp_path / "ws")
    ingest(pheme_raw, "pheme", workspace)
    ingest(pheme_raw, "open", workspace, public=True)
    ws = ["--workspace", str(workspace.root)]
    args = ["--dataset", "pheme", "--epsilon", "3", "--delta", "1e-5", "--topics", "4"]
    release = ["release", *args, "--iterations", "5", "--seed", "2", "--no-progress"]
    assert main([*release, *public_args, *ws]) == 0
    capsys.readouterr()
    catalog = Catalog(workspace)
    run_id = catalog.query("SELECT run_id FROM releases")[0]["run_id"]
    assert main(["audit", "--run", run_id, "--shadows", "3", "--seed", "1", *ws]) == 0
    row = catalog.query("SELECT path FROM artifacts WHERE stage = 'audit'")[0]
    report = json.loads((workspace.root / row["path"]).read_text())
    assert set(report["claims_per_document"]) == claims == set(report["bounds"])
    assert ("lira-online-vocabulary" in report["attacks"]) == has_vocabulary_attack
    assert report["verdict"] == "passed"
    if "M1" not in claims:  # M2 gets the whole budget
        assert report["claims_per_document"]["M2"]["epsilon"] == pytest.approx(3.0)
