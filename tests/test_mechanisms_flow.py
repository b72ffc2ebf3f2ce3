"""Every M2 mechanism through the real release flow: manifest, ledger, refusals, compare."""

from __future__ import annotations

import json

import pytest

from fdptm.cli import main
from fdptm.mechanisms.registry import MECHANISMS
from fdptm.storage.catalog import Catalog
from fdptm.tasks.ingest import ingest

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture(scope="module")
def pheme_ws(tmp_path_factory, pheme_raw, prefect_harness):
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(tmp_path_factory.mktemp("mechs") / "ws")
    ingest(pheme_raw, "pheme", workspace)
    return workspace


def _release(workspace, mechanism, *extra, epsilon="40"):
    return main(
        [
            "release",
            "--dataset",
            "pheme",
            "--epsilon",
            epsilon,
            "--delta",
            "1e-5",
            "--topics",
            "5",
            "--iterations",
            "10",
            "--mechanism",
            mechanism,
            "--seed",
            "3",
            "--no-progress",
            "--workspace",
            str(workspace.root),
            *extra,
        ]
    )


def _ledger_size(workspace) -> int:
    return Catalog(workspace).query("SELECT count(*) AS n FROM ledger")[0]["n"]


def _last_manifest(workspace) -> dict:
    row = Catalog(workspace).query("SELECT path FROM releases ORDER BY released_at DESC LIMIT 1")
    return json.loads((workspace.root / row[0]["path"] / "manifest.json").read_text())


@pytest.mark.parametrize(
    "mechanism,extra,message",
    [
        ("zhu", [], "pass --allow-unproven"),
        ("cdp-lda-plus", [], "pass --allow-unproven"),
        ("hdp-lda", ["--m2-option", "nope=1"], "has no option(s) ['nope']"),
        ("hdp-lda", ["--m2-option", "clip=-3"], "clipping bound C must be"),
        ("hdp-lda", ["--m2-option", "clip"], "a mechanism option is key=value"),
    ],
)
def test_invalid_mechanism_parameters_exit_2_and_spend_nothing(
    pheme_ws, capsys, mechanism, extra, message
):
    before = _ledger_size(pheme_ws)
    assert _release(pheme_ws, mechanism, *extra) == 2
    assert message in capsys.readouterr().err
    assert _ledger_size(pheme_ws) == before


def test_unproven_mechanism_released_only_with_override_and_labelled(pheme_ws, capsys):
    assert _release(pheme_ws, "zhu", "--allow-unproven") == 0
    out = capsys.readouterr().out
    assert "UNPROVEN" in out and "NOT a differential-privacy guarantee" in out
    manifest = _last_manifest(pheme_ws)
    g = manifest["guarantee"]
    assert g["notion"] == "claimed-unproven" and g["adjacency"] == "document"
    m2 = manifest["stages"][1]
    assert m2["mechanism"] == "zhu" and m2["notion"] == "claimed-unproven"
    assert m2["accounting"]["event"]["type"] == "laplace"
    entry = Catalog(pheme_ws).query(
        "SELECT notion, accounting FROM ledger WHERE stage = 'train' ORDER BY created_at DESC"
    )[0]
    assert entry["notion"] == "claimed-unproven"
    assert json.loads(entry["accounting"])["epsilon"] == pytest.approx(m2["epsilon"])


def test_hdp_lda_manifest_reports_basic_and_tighter_totals(pheme_ws):
    assert _release(pheme_ws, "hdp-lda") == 0
    m2 = _last_manifest(pheme_ws)["stages"][1]
    acc = m2["accounting"]
    assert acc["basic_epsilon"] == pytest.approx(m2["epsilon"])
    assert "RDP of the same steps" in acc["accountant"]
    assert acc["event"]["events"][0]["count"] == 10


def test_compare_is_internal_and_spends_nothing(pheme_ws, capsys):
    before = _ledger_size(pheme_ws)
    rc = main(
        [
            "compare",
            "--dataset",
            "pheme",
            "--epsilon",
            "10",
            "--delta",
            "1e-5",
            "--topics",
            "4",
            "--iterations",
            "10",
            "--mechanisms",
            "hdp-lda,cdp-lda",
            "--seed",
            "2",
            "--no-progress",
            "--workspace",
            str(pheme_ws.root),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "NOT differentially private" in out
    assert "| hdp-lda | (7.5, 0)-DP | word |" in out
    assert "| cdp-lda | unproven claim of (7.5, 0)-DP | word |" in out
    assert _ledger_size(pheme_ws) == before
    catalog = Catalog(pheme_ws)
    run = catalog.query("SELECT run_id, status FROM runs WHERE kind = 'compare'")[0]
    assert run["status"] == "succeeded"
    art = catalog.query("SELECT visibility, path FROM artifacts WHERE stage = 'compare'")[0]
    assert art["visibility"] == "internal" and "/releases/" not in art["path"]
    table = json.loads((pheme_ws.root / art["path"]).read_text())
    assert [r["mechanism"] for r in table["rows"]][1:] == ["hdp-lda", "cdp-lda"]
    assert (
        main(
            [
                "compare",
                "--dataset",
                "pheme",
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--topics",
                "4",
                "--mechanisms",
                "bogus",
                "--workspace",
                str(pheme_ws.root),
            ]
        )
        == 2
    )


def test_every_registered_mechanism_is_documented_in_the_cli():
    from fdptm.cli import build_parser

    help_text = build_parser().format_help()
    assert "compare" in help_text
    assert set(MECHANISMS) >= {
        "hdp-lda",
        "zhu",
        "cdp-lda",
        "cdp-lda-plus",
        "spectral",
        "topicdp",
        "dp-vi",
    }
