"""The release flow end to end with real Prefect runs, DuckDB, Parquet and nltk."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from fdptm.cli import main
from fdptm.evaluation.topwords import no_signal, top_words
from fdptm.storage.catalog import Catalog
from fdptm.tasks.ingest import ingest

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture(scope="module")
def released(tmp_path_factory, pheme_raw, prefect_harness):
    from fdptm.flows.release import release
    from fdptm.request import ReleaseRequest
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(tmp_path_factory.mktemp("flow") / "ws")
    ingest(pheme_raw, "pheme", workspace)
    out = release(
        ReleaseRequest(
            dataset="pheme",
            epsilon=400.0,
            delta=1e-5,
            topics=5,
            iterations=10,
            mechanism="hdp-lda",
            workspace=str(workspace.root),
            seed=4,
        )
    )
    return workspace, out


def test_release_files_and_guarantee(released):
    workspace, out = released
    path = workspace.root / "releases" / out["run_id"]
    assert sorted(p.name for p in path.iterdir()) == [
        "manifest.json",
        "manifest.sig",
        "signer.pub",
        "topic_word.parquet",
        "vocabulary.parquet",
    ]
    manifest = json.loads((path / "manifest.json").read_text())
    g = manifest["guarantee"]
    assert (g["epsilon"], g["delta"]) == (pytest.approx(400.0), pytest.approx(1e-5))
    assert g["adjacency"] == "word" and g["privacy_unit"] == "token"
    assert g["dataset_unit"] == "document"
    assert [
        c["group_size"] if "group_size" in c else c["epsilon_out"] / c["epsilon_in"]
        for c in g["conversions"]
    ] == [2.0, 1.0]
    m1, m2 = manifest["stages"]
    assert (m1["adjacency"], m2["adjacency"]) == ("document", "word")
    assert m1["epsilon"] == pytest.approx(100.0) and m2["epsilon"] == pytest.approx(200.0)
    assert m2["parameters"]["laplace_scale"] == pytest.approx(
        2 / m2["parameters"]["epsilon_laplace"]
    )
    assert manifest["noise"]["seeding"].startswith("fixed seed")
    assert all(len(i["commitment"]) == 64 for i in manifest["inputs"])
    vocab = pq.read_table(path / "vocabulary.parquet")
    assert manifest["model"]["vocabulary_size"] == vocab.num_rows > 100
    phi = np.stack(
        pq.read_table(path / "topic_word.parquet")
        .column("probabilities")
        .to_numpy(zero_copy_only=False)
    )
    assert phi.shape == (5, vocab.num_rows)
    assert np.allclose(phi.sum(1), 1) and not np.isnan(phi).any()
    # each topic's words: only those strictly above its floor, with their probabilities
    words = vocab.column("word").to_pylist()
    assert manifest["manifest_version"] == 2 and len(manifest["topics"]) == 5
    for t, row, listed, flag in zip(
        manifest["topics"], phi, top_words(phi, words), no_signal(phi), strict=True
    ):
        assert t["no_signal"] is flag and t["floor"] == pytest.approx(row.min(), rel=1e-3)
        assert [w["word"] for w in t["words"]] == [w for w, _ in listed]
        assert all(w["probability"] > t["floor"] for w in t["words"])
        assert all(row[words.index(w["word"])] > row.min() for w in t["words"])
        assert [w["probability"] for w in t["words"]] == pytest.approx(
            [p for _, p in listed], rel=1e-3
        )
    assert not all(t["no_signal"] for t in manifest["topics"])
    text = (path / "manifest.json").read_text()
    batch = Catalog(workspace).batches("pheme")[0]
    assert batch["sha256"] not in text  # private inputs appear only as keyed commitments
    assert "seed" not in manifest["stages"][0]["parameters"]


def test_ledger_and_catalog_after_release(released):
    workspace, out = released
    catalog = Catalog(workspace)
    entries = catalog.query(
        "SELECT stage, state, epsilon FROM ledger WHERE run_id = ?", [out["run_id"]]
    )
    assert {e["stage"]: e["state"] for e in entries} == {"vocabulary": "spent", "train": "spent"}
    stages = catalog.query("SELECT stage, status FROM stage_runs WHERE run_id = ?", [out["run_id"]])
    assert {s["stage"] for s in stages} == {
        "preprocess",
        "bounding",
        "vocabulary",
        "sanitize",
        "train",
        "release",
    }
    assert {s["status"] for s in stages} == {"succeeded"}
    run = catalog.query("SELECT status FROM runs WHERE run_id = ?", [out["run_id"]])[0]
    assert run["status"] == "succeeded"
    arts = catalog.query("SELECT name, visibility, path, sha256 FROM artifacts")
    for a in arts:
        in_release = a["path"].startswith("releases/")
        assert in_release == (a["visibility"] == "public" and a["name"].startswith("release/"))
    assert catalog.query("SELECT count(*) AS n FROM releases")[0]["n"] == 1


def test_vocabulary_words_come_from_the_preprocessed_corpus(released):
    workspace, out = released
    catalog = Catalog(workspace)
    (tok,) = [a for a in catalog.query("SELECT * FROM artifacts") if a["stage"] == "preprocess"]
    seen = {
        t
        for doc in pq.read_table(workspace.root / tok["path"]).column("tokens").to_pylist()
        for t in doc
    }
    words = pq.read_table(workspace.root / "releases" / out["run_id"] / "vocabulary.parquet")
    assert set(words.column("word").to_pylist()) <= seen


def test_cli_exit_codes_and_refusal(released, capsys):
    workspace, _ = released
    ws = ["--workspace", str(workspace.root)]
    catalog = Catalog(workspace)
    before = catalog.query("SELECT count(*) AS n FROM ledger")[0]["n"]
    args = ["release", "--dataset", "pheme", "--delta", "1e-5", "--topics", "5", *ws]
    assert main([*args, "--epsilon", "0"]) == 2
    assert "--epsilon: Input should be greater than or equal to 0.000001" in capsys.readouterr().err
    assert main([*args, "--epsilon", "nan"]) == 2
    assert (
        main(
            [
                "release",
                "--dataset",
                "nope",
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--topics",
                "5",
                *ws,
            ]
        )
        == 2
    )
    assert "no dataset named 'nope'" in capsys.readouterr().err
    assert main([*args, "--epsilon", "1", "--workspace", str(workspace.root / "missing")]) == 2
    assert (
        main(["budget", "--dataset", "pheme", "--cap", "500", "1e-4", "--unit", "word", *ws]) == 0
    )
    capsys.readouterr()
    assert main([*args, "--epsilon", "200", "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert re.search(r"has only epsilon=100, delta=0\.0000(9|8999)\d* remaining", err)
    assert catalog.query("SELECT count(*) AS n FROM ledger")[0]["n"] == before
    assert main(["budget", "--dataset", "pheme", "--json", *ws]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["remaining"]["epsilon"] == pytest.approx(100.0)
    assert report["totals"]["document"] is None and report["totals"]["word"]["epsilon"] == 400


def test_demo(tmp_path, capsys):
    assert main(["demo", "--workspace", str(tmp_path / "demo"), "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "guarantee: (500, 1e-05)-DP as calibrated, but this is a TEST RUN" in out
    assert out.rstrip().count("word-level adjacency") == 1
    assert out.count("  topic ") == 5
    # each topic: its words above the floor with their probabilities, or "no signal"
    listed = re.findall(r"^  topic \d+: (.*)$", out, re.MULTILINE)
    word = r"[a-z]+ \d\.?\d*(e-\d+)?"
    assert len(listed) == 5
    assert all(t == "no signal" or re.fullmatch(rf"{word}(, {word})*", t) for t in listed)


def test_prefect_artifact_summarises_the_release(released):
    """The release's summary is an artifact under the dataset's key (the Prefect API is
    shared by the session's workers, whose releases of a dataset of the same name add
    versions under that key too, so the test finds this release's among them)."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    from fdptm.flows.release import artifact_key

    _, out = released
    assert artifact_key("My_Data.v2") == "fdptm-release-my-data-v2"
    key = ArtifactFilter(key=ArtifactFilterKey(any_=[artifact_key("pheme")]))
    with get_client(sync_client=True) as client:
        versions = client.read_artifacts(
            artifact_filter=key, sort=ArtifactSort.CREATED_DESC, limit=200
        )
    (artifact,) = [a for a in versions if out["run_id"] in a.data]
    assert "**word-level**" in artifact.data
    for t in out["topics"]:
        cell = (
            "*no signal*"
            if t["no_signal"]
            else ", ".join(f"{w['word']} {w['probability']}" for w in t["words"])
        )
        assert f"| {t['topic']} | {t['floor']} | {cell} |" in artifact.data


def test_releases_left_shares_what_the_cap_has_left(tmp_path, capsys):
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(tmp_path / "ws")
    path = tmp_path / "small.txt"
    path.write_text("\n".join(["apple banana cherry"] * 40 + ["durian elderberry figs"] * 40))
    ingest(path, "small", workspace)
    ws = ["--workspace", str(workspace.root), "--no-progress"]
    run = [
        "release",
        "--dataset",
        "small",
        "--epsilon",
        "1000",
        "--delta",
        "1e-5",
        "--topics",
        "2",
        "--iterations",
        "5",
        "--mechanism",
        "hdp-lda",
        *ws,
    ]
    assert (
        main(
            [
                "budget",
                "--dataset",
                "small",
                "--cap",
                "300",
                "1e-4",
                "--unit",
                "word",
                "--workspace",
                str(workspace.root),
            ]
        )
        == 0
    )
    assert main([*run, "--releases-left", "2"]) == 0
    printed = capsys.readouterr()
    assert "guarantee: (150, 1e-05)-DP" in printed.out
    assert (  # for the operator, on stderr, never in the release
        "internal, not DP (never publish): the run read 80 documents of 80 authors; "
        "contribution bounding dropped 0 of them" in printed.err
    )
    assert main([*run, "--releases-left", "1"]) == 0
    assert "guarantee: (150, 1e-05)-DP" in capsys.readouterr().out
    assert main([*run, "--releases-left", "1"]) == 3
    assert "used up" in capsys.readouterr().err
    assert main([*run, "--releases-left", "0"]) == 2
    capsys.readouterr()
    assert main(["budget", "--dataset", "small", "--json", "--workspace", str(workspace.root)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["lifetime"]["epsilon"] == pytest.approx(300.0)
    assert report["remaining"]["epsilon"] == pytest.approx(0.0, abs=1e-9)


def test_a_corrupted_batch_fails_the_run_before_any_budget_is_spent(tmp_path, capsys):
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(tmp_path / "ws")
    path = tmp_path / "small.txt"
    path.write_text("\n".join(["apple banana cherry"] * 40))
    ingest(path, "small", workspace)
    (batch,) = Catalog(workspace).batches("small")
    stored = workspace.root / batch["path"]
    stored.write_bytes(stored.read_bytes()[:-10] + b"0123456789")
    rc = main(
        [
            "release",
            "--dataset",
            "small",
            "--epsilon",
            "100",
            "--delta",
            "1e-5",
            "--topics",
            "2",
            "--workspace",
            str(workspace.root),
            "--no-progress",
        ]
    )
    assert rc == 2
    assert "does not match the hash recorded in the catalog" in capsys.readouterr().err
    states = {e["state"] for e in Catalog(workspace).query("SELECT state FROM ledger")}
    assert states == {"refunded"}


def test_a_bad_request_and_a_refused_budget_stop_before_prefect_starts(released):
    """Validation, calibration and the cap check run before the flow: a refusal needs
    neither Prefect nor Great Expectations (it took 33-126 s behind Prefect's server)."""
    import subprocess
    import sys

    workspace, _ = released
    code = (
        "import sys; from fdptm.cli import main; "
        "rc = main(sys.argv[1:]); "
        "print(rc, 'prefect' in sys.modules, 'great_expectations' in sys.modules)"
    )
    base = ["release", "--dataset", "pheme", "--delta", "1e-5", "--topics", "5"]
    base += ["--workspace", str(workspace.root)]
    for extra, rc in (
        (["--epsilon", "0"], 2),
        (["--epsilon", "1", "--m1-fraction", "1.5"], 2),
        (["--epsilon", "1", "--mechanism", "zhu"], 2),
        (["--epsilon", "100000"], 3),
    ):
        out = subprocess.run(
            [sys.executable, "-c", code, *base, *extra], capture_output=True, text=True
        )
        assert out.stdout.splitlines()[-1].split() == [str(rc), "False", "False"], out.stderr


def test_run_ids_are_random_and_the_manifest_carries_only_the_date(released):
    from datetime import UTC, datetime

    workspace, out = released
    assert re.fullmatch(r"pheme-[0-9a-f]{16}", out["run_id"])
    manifest = json.loads(
        (workspace.root / "releases" / out["run_id"] / "manifest.json").read_text()
    )
    assert "released_at" not in manifest
    assert manifest["release_date"] == datetime.now(UTC).date().isoformat()
    assert not re.search(r"\d{2}:\d{2}", json.dumps(manifest))  # no time of day anywhere
    midnight = datetime.fromisoformat(manifest["release_date"]).replace(tzinfo=UTC).timestamp()
    release = workspace.root / "releases" / out["run_id"]
    assert {p.stat().st_mtime for p in [release, *release.iterdir()]} == {midnight}
