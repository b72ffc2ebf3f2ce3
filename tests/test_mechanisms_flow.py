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


def _release(workspace, mechanism, *extra, epsilon="40", dataset="pheme", topics="5"):
    return main(
        [
            "release",
            "--dataset",
            dataset,
            "--epsilon",
            epsilon,
            "--delta",
            "1e-5",
            "--topics",
            topics,
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
        (
            "hdp-lda",
            ["--m2-option", "clip=-3"],
            "clip (the clipping bound C) must be a finite number > 0, got -3",
        ),
        ("hdp-lda", ["--m2-option", "clip"], "a mechanism option is key=value"),
        ("dp-vi", ["--m2-option", "clip=-1"], "clip (the per-unit L2 bound C, or 'private')"),
        ("dp-vi", ["--m2-option", "clip=median"], "clip (the per-unit L2 bound C, or 'private')"),
        (
            "dp-vi",
            ["--m2-option", "clip=private", "--m2-option", "accountant=pld"],
            "clip=private composes a zCDP quantile",
        ),
        ("dp-vi", ["--m2-option", "sampling_rate=1.5"], "sampling_rate"),
        ("spectral", ["--m2-option", "config=5"], "config"),
        ("spectral", ["--m2-option", "config=3"], "--mechanism spectral-unproven"),
        ("topicdp", ["--m2-option", "gamma=2"], "gamma"),
        (
            "topicdp-mvg",
            ["--m2-option", "trainer=magic"],
            "must be one of 'cgs', 'gensim', got 'magic'",
        ),
        (
            "zhu",
            ["--allow-unproven", "--m2-option", "alpha=0"],
            "alpha (the document-topic prior) must be a finite number > 0, got 0",
        ),
        ("cdp-lda", ["--allow-unproven", "--m2-option", "iterations=3"], "has no option"),
        (
            "topicdp-laplace",
            ["--m2-option", "alpha=-1"],
            "alpha (the document-topic prior) must be",
        ),
        ("spectral-unproven", ["--allow-unproven", "--m2-option", "config=1"], "config"),
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


def test_dp_vi_with_a_private_clip_releases_the_chosen_norm(pheme_ws):
    import pyarrow.parquet as pq

    from fdptm.mechanisms.dp_vi import CANDIDATES

    assert _release(pheme_ws, "dp-vi", "--m2-option", "clip=private") == 0
    manifest = _last_manifest(pheme_ws)
    m2 = manifest["stages"][1]
    assert m2["parameters"]["clip"] == "private" and m2["parameters"]["noise_std"] is None
    chosen = m2["released_parameters"]["clip"]
    assert chosen in CANDIDATES
    assert m2["accounting"]["event"]["events"][0]["type"] == "zcdp"
    assert m2["accounting"]["epsilon"] <= m2["epsilon"]
    row = Catalog(pheme_ws).query("SELECT path FROM releases ORDER BY released_at DESC LIMIT 1")
    table = pq.read_table(pheme_ws.root / row[0]["path"] / "topic_word.parquet")
    assert json.loads(table.schema.metadata[b"fdptm.released"]) == {"clip": chosen}


def test_a_tuned_release_states_the_selection_and_its_price(pheme_ws):
    grid = ["--m2-option", "tune_iterations=5,10", "--m2-option", "mean_trials=2"]
    assert _release(pheme_ws, "dp-vi", "--tune", *grid) == 0
    m2 = _last_manifest(pheme_ws)["stages"][1]
    assert m2["mechanism"] == "dp-vi+tune"
    assert m2["accounting"]["event"]["type"] == "repeat_and_select"
    assert m2["accounting"]["epsilon"] <= m2["epsilon"]
    chosen = m2["released_parameters"]
    assert set(chosen) == {"iterations", "threshold", "clip"}  # never K, never a score
    assert chosen["iterations"] in (5, 10) and chosen["threshold"] in (1.0, 2.0)
    assert "duration" in m2["assumes"]
    grid_rows = m2["parameters"]["grid"]
    assert len(grid_rows) == 4  # 2 iterations x the default thresholds 1, 2 x C = 2
    assert m2["parameters"]["single_trial_epsilon"] < m2["epsilon"]
    entry = Catalog(pheme_ws).query(
        "SELECT mechanism FROM ledger WHERE stage = 'train' ORDER BY created_at DESC"
    )[0]
    assert entry["mechanism"] == "dp-vi+tune"


def test_tune_is_refused_for_a_mechanism_without_a_tuned_form(pheme_ws, capsys):
    before = _ledger_size(pheme_ws)
    assert _release(pheme_ws, "hdp-lda", "--tune") == 2
    assert "--tune selects hyper-parameters of dp-vi only" in capsys.readouterr().err
    assert _ledger_size(pheme_ws) == before


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
    assert "| hdp-lda | (5, 0)-DP | word |" in out
    assert "| cdp-lda | unproven claim of (5, 0)-DP | word |" in out
    assert "| NPMI | diversity | above floor | held-out LL/token | UMass |" in out
    assert _ledger_size(pheme_ws) == before
    catalog = Catalog(pheme_ws)
    run = catalog.query("SELECT run_id, status FROM runs WHERE kind = 'compare'")[0]
    assert run["status"] == "succeeded"
    art = catalog.query("SELECT visibility, path FROM artifacts WHERE stage = 'compare'")[0]
    assert art["visibility"] == "internal" and "/releases/" not in art["path"]
    table = json.loads((pheme_ws.root / art["path"]).read_text())
    assert [r["mechanism"] for r in table["rows"]][1:] == ["hdp-lda", "cdp-lda"]
    for r in table["rows"]:
        assert -1 <= r["npmi"] <= 1 and 0 <= r["topic_diversity"] <= 1
        assert 0 <= r["words_above_floor"] <= 10 and r["heldout_loglik_per_token"] < 0
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


@pytest.mark.parametrize(
    "mechanism,extra,notion,adjacency,release_unit",
    [
        ("dp-vi", [], "approximate-dp", "document", "document"),
        ("spectral", [], "approximate-dp", "document-replace", "document-replace"),
        ("topicdp-laplace", [], "approximate-dp", "document", "document"),
        ("topicdp", ["--m2-option", "gamma=0.3"], "random-dp", "document", "document"),
        ("topicdp-mvg", ["--m2-option", "gamma=0.3"], "random-dp", "document", "document"),
        ("cdp-lda", ["--allow-unproven"], "claimed-unproven", "word", "word"),
        ("cdp-lda-plus", ["--allow-unproven"], "claimed-unproven", "word", "word"),
        (
            "spectral-unproven",
            ["--allow-unproven", "--m2-option", "config=4"],
            "claimed-unproven",
            "document-replace",
            "document-replace",
        ),
    ],
)
def test_each_mechanism_releases_with_its_stated_guarantee(
    pheme_ws, capsys, mechanism, extra, notion, adjacency, release_unit
):
    assert _release(pheme_ws, mechanism, *extra, epsilon="20") == 0
    out = capsys.readouterr().out
    manifest = _last_manifest(pheme_ws)
    g = manifest["guarantee"]
    m1, m2 = manifest["stages"]
    assert (m2["mechanism"], m2["notion"], m2["adjacency"]) == (mechanism, notion, adjacency)
    assert (g["notion"], g["adjacency"]) == (notion, release_unit)
    assert g["epsilon"] == pytest.approx(20.0) and g["delta"] == pytest.approx(1e-5)
    assert m2["accounting"]["epsilon"] <= m2["epsilon"] * (1 + 1e-12)
    assert m2["accounting"]["delta"] <= m2["delta"] * (1 + 1e-12) + 1e-300
    if release_unit == "document-replace":  # M1's add/remove guarantee converted: group of 2
        assert m1["epsilon"] == pytest.approx(m1["contributes_epsilon"] / 2)
    if notion == "random-dp":
        assert g["gamma"] == pytest.approx(0.3) and "NOT plain differential privacy" in out
    if notion == "approximate-dp":
        assert g["statement"].startswith("(20, 1e-05)-DP as calibrated, but this is a TEST RUN")
        assert g["seeded"] is True  # the tests seed their runs: never a publishable release
    if mechanism == "cdp-lda-plus":  # charged by basic composition, PLD total reported
        acc = m2["accounting"]
        assert acc["basic_epsilon"] == pytest.approx(m2["epsilon"])
        assert acc["tight_epsilon"] <= acc["basic_epsilon"]


def test_author_datasets_spectral_by_group_privacy_and_dp_vi_per_author(tmp_path, pheme_raw):
    from fdptm.storage.workspace import Workspace

    texts = json.loads(pheme_raw.read_text())["text"][:3000]
    rows = [{"author_id": f"a{i // 3}", "text": t} for i, t in enumerate(texts)]
    path = tmp_path / "authors.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    workspace = Workspace.resolve(tmp_path / "ws")
    ingest(path, "authored", workspace)
    bound = ("--max-docs-per-author", "3")
    rc = _release(workspace, "spectral", *bound, epsilon="30", dataset="authored", topics="4")
    assert rc == 0
    manifest = _last_manifest(workspace)
    g = manifest["guarantee"]
    m2 = manifest["stages"][1]
    assert (g["adjacency"], m2["adjacency"]) == ("author-replace", "author-replace")
    assert (
        "group privacy" in m2["accounting"]["accountant"] and "3" in m2["accounting"]["accountant"]
    )
    assert g["epsilon"] == pytest.approx(30.0)
    rc = _release(workspace, "dp-vi", *bound, epsilon="10", dataset="authored", topics="4")
    assert rc == 0
    manifest = _last_manifest(workspace)
    assert manifest["guarantee"]["adjacency"] == "author"  # dp-vi clips per author
    assert manifest["stages"][1]["accounting"]["adjacency"] == "author"


def test_every_registered_mechanism_loads_and_lists_its_options():
    for name, m in MECHANISMS.items():
        options = m.options()
        assert not set(options) & {"n_topics", "adjacency", "iterations"}, name
        impl = m.implementation
        assert callable(impl.params) and callable(impl.train), name


def test_a_refusal_on_the_public_vocabulary_size_refunds_m2(pheme_ws, capsys):
    """TopicDP's paper calibration needs epsilon / (k V) < 1; V is public (the DP vocabulary),
    so the refusal comes before M2 reads data and M2's reservation is refunded."""
    assert _release(pheme_ws, "topicdp", "--m2-option", "calibration=paper", epsilon="1e6") == 2
    assert "calibration 'paper'" in capsys.readouterr().err
    run = Catalog(pheme_ws).query(
        "SELECT run_id FROM runs WHERE kind = 'release' ORDER BY started_at DESC LIMIT 1"
    )[0]["run_id"]
    states = {
        e["stage"]: e["state"]
        for e in Catalog(pheme_ws).query("SELECT * FROM ledger WHERE run_id = ?", [run])
    }
    assert states == {"vocabulary": "spent", "train": "refunded"}
