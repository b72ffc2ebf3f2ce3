"""Local DP end to end on a real workspace: report datasets (ingest --local-reports), the
ledger's collection entries, LP-LDA and OLP-LDA flows on a real Prefect API, their
manifests, the online deployment, and the CLI's refusals (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fdptm.errors import BadInputError, BudgetRefusedError
from fdptm.local import Flip, KeyStream, LocalVocabulary, randomize, write_reports
from fdptm.privacy.adjacency import Adjacency
from fdptm.release import load_release
from fdptm.request import LocalReleaseRequest
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger, budget_report
from fdptm.storage.workspace import Workspace
from fdptm.tasks.ingest import ingest
from fdptm.tasks.local_reports import build_vocabulary, ingest_reports

pytestmark = pytest.mark.usefixtures("prefect_harness")
FLIP = Flip.from_f(0.1)


@pytest.fixture(scope="module")
def collected(tmp_path_factory, pheme_raw):
    """A workspace with PHEME's first 300 tweets as public data and 3 report batches of 400
    tweets each, randomised over the public data's 300 most frequent words."""
    root = tmp_path_factory.mktemp("local")
    texts = [t.replace("\n", " ") for t in json.loads(pheme_raw.read_text())["text"]]
    workspace = Workspace.resolve(root / "ws")
    (root / "pub.txt").write_text("\n".join(texts[:300]) + "\n")
    ingest(root / "pub.txt", "pub", workspace, public=True)
    vocab = build_vocabulary("public:pub", workspace, 300)
    vocab.save(root / "vocab.json")
    files = []
    for b in range(3):
        docs = texts[300 + 400 * b : 700 + 400 * b]
        files.append(
            write_reports(
                root / f"r{b}.parquet",
                randomize(docs, vocab, FLIP, KeyStream(b)),
                vocab,
                FLIP,
                seeded=True,
            )
        )
    return root, workspace, vocab, files


def _fresh(collected, tmp_path, n: int = 3) -> Workspace:
    """A copy of the collected workspace's public data plus ``n`` report batches."""
    root, _, vocab, files = collected
    workspace = Workspace.resolve(tmp_path / "ws")
    ingest(root / "pub.txt", "pub", workspace, public=True)
    assert build_vocabulary("public:pub", workspace, 300).fingerprint == vocab.fingerprint
    for path in files[:n]:
        _ingest(path, workspace, vocab)
    return workspace


def _ingest(path, workspace, vocab, flip=FLIP, dataset="rep"):
    """The test reports were drawn from a seeded keystream (reproducible), so they are
    ingested with allow_seeded; releases from them say they are a test run."""
    return ingest_reports(path, dataset, workspace, vocabulary=vocab, flip=flip, allow_seeded=True)


def _request(workspace: Workspace, **fields) -> LocalReleaseRequest:
    base = {"dataset": "rep", "topics": 3, "iterations": 15, "seed": 7}
    return LocalReleaseRequest.build(**{**base, "workspace": str(workspace.root), **fields})


def test_ingest_records_the_collections_local_guarantee_once_per_batch(collected, tmp_path):
    workspace = _fresh(collected, tmp_path)
    catalog = Catalog(workspace)
    entries = Ledger(catalog).entries("rep")
    per_doc = 300 * FLIP.word_epsilon
    assert [(e["stage"], e["adjacency"], e["state"]) for e in entries] == [
        ("collection", "local", "spent")
    ] * 3
    assert all(e["epsilon"] == pytest.approx(per_doc) and e["delta"] == 0 for e in entries)
    assert json.loads(entries[0]["accounting"])["word_epsilon"] == FLIP.word_epsilon
    assert {e["notion"] for e in entries} == {"local-dp"}
    life = Ledger(catalog).lifetime("rep", Adjacency.LOCAL)  # a device may report in each batch
    assert life.epsilon == pytest.approx(3 * per_doc) and life.delta == 0
    report = budget_report(Ledger(catalog), "rep")
    assert list(report["totals"]) == ["local"] and report["dataset_unit"] == "local"
    assert "local" not in budget_report(Ledger(catalog), "pub")["totals"]


def test_reports_with_another_vocabulary_or_f_are_refused(collected, tmp_path):
    _, _, vocab, files = collected
    workspace = _fresh(collected, tmp_path, n=1)
    other = LocalVocabulary(vocab.words[:-1], vocab.source)
    with pytest.raises(BadInputError, match="vocabulary"):
        _ingest(files[1], workspace, other)
    with pytest.raises(BadInputError, match="f ="):
        _ingest(files[1], workspace, vocab, Flip.from_f(0.2))
    with pytest.raises(BadInputError, match="no valid report"):  # a new dataset, wrong f
        _ingest(files[1], workspace, vocab, Flip.from_f(0.2), "rep2")
    with pytest.raises(BadInputError, match="not built in this workspace"):
        _ingest(files[1], workspace, other, dataset="rep3")
    with pytest.raises(BadInputError, match="already ingested"):
        _ingest(files[0], workspace, vocab)
    with pytest.raises(BadInputError, match="seeded keystream"):  # reports of a test run
        ingest_reports(files[1], "rep", workspace, vocabulary=vocab, flip=FLIP)
    catalog = Catalog(workspace)
    assert len(catalog.batches("rep")) == 1 and catalog.dataset("rep2") is None
    assert len(Ledger(catalog).entries("rep")) == 1  # nothing recorded for the refusals
    with pytest.raises(BadInputError, match="holds documents"):
        _ingest(files[1], workspace, vocab, dataset="pub")
    with pytest.raises(BadInputError, match="never documents"):
        ingest(collected[0] / "pub.txt", "rep", workspace)


def test_a_cap_at_local_level_refuses_the_batch_that_would_exceed_it(collected, tmp_path):
    _, _, vocab, files = collected
    workspace = _fresh(collected, tmp_path, n=1)
    ledger = Ledger(Catalog(workspace))
    with pytest.raises(BadInputError, match="stated at local level"):
        ledger.set_cap("rep", 1e4, 1e-5, Adjacency.DOCUMENT)
    with pytest.raises(BadInputError, match="holds documents"):
        ledger.set_cap("pub", 1e4, 1e-5, Adjacency.LOCAL)
    per_doc = 300 * FLIP.word_epsilon
    ledger.set_cap("rep", 2.5 * per_doc, 1e-5)
    _ingest(files[1], workspace, vocab)
    with pytest.raises(BudgetRefusedError):
        _ingest(files[2], workspace, vocab)
    assert len(Catalog(workspace).batches("rep")) == 2


def test_lp_lda_release_states_the_per_document_guarantee_first(collected, tmp_path):
    from fdptm.flows.local_release import local_release

    workspace = _fresh(collected, tmp_path)
    outcome = local_release(_request(workspace))
    release = load_release(outcome["release_path"])
    g = release.guarantee
    keys = list(g)
    assert keys.index("per_document") < keys.index("per_device") < keys.index("per_word_presence")
    per_doc = 300 * FLIP.word_epsilon
    assert g["per_document"]["epsilon"] == pytest.approx(per_doc) == g["epsilon"]
    assert g["per_device"] == {"epsilon": pytest.approx(3 * per_doc), "delta": 0.0, "batches": 3}
    assert g["per_word_presence"]["epsilon"] == pytest.approx(FLIP.word_epsilon)
    assert g["per_token_replacement"]["epsilon"] == pytest.approx(2 * FLIP.word_epsilon)
    assert g["statement"].startswith(f"{per_doc:.6g}-local DP per document")
    assert g["seeded"] and "TEST RUN" in g["statement"]
    assert release.manifest["vocabulary"]["kind"].startswith("a dataset ingested with --public")
    assert g["adjacency"] == "local" and g["spent_by_this_release"]["epsilon"] == 0
    assert len(g["collection_entries"]) == 3
    assert release.topic_word.shape == (3, 300)
    np.testing.assert_allclose(release.topic_word.sum(axis=1), 1.0)
    assert release.manifest["n_reports"] == 1200 and release.manifest["batches"] == [1, 2, 3]
    assert release.manifest["mechanism"]["name"] == "lp-lda"
    assert len(Ledger(Catalog(workspace)).entries("rep")) == 3  # the release charged nothing
    from fdptm.tasks.report import write_report

    page = write_report(workspace, outcome["run_id"]).read_text()
    assert f"{per_doc:.6g}-local DP per document" in page and "randomized-response" in page
    again = local_release(_request(workspace, batches="2"))
    assert load_release(again["release_path"]).manifest["n_reports"] == 400


def test_streaming_over_three_batches_publishes_three_releases_and_charges_nothing(
    collected, tmp_path
):
    from fdptm.flows.local_release import online_release

    _, _, vocab, files = collected
    workspace = _fresh(collected, tmp_path, n=2)
    request = _request(workspace, mechanism="olp-lda", prior="pub")
    first = online_release(request)
    assert [o["batches"] for o in first] == [[1], [1, 2]]  # a release depends on all before
    _ingest(files[2], workspace, vocab)  # a batch lands
    second = online_release(request)
    assert [o["batches"] for o in second] == [[1, 2, 3]]
    assert online_release(request) == []  # nothing new
    catalog = Catalog(workspace)
    releases = catalog.query("SELECT * FROM releases WHERE dataset = 'rep' ORDER BY released_at")
    assert len(releases) == 3 and {r["adjacency"] for r in releases} == {"local"}
    entries = Ledger(catalog).entries("rep")
    assert [e["stage"] for e in entries] == ["collection"] * 3
    manifests = [load_release(o["release_path"]).manifest for o in first + second]
    assert [m["mechanism"]["step"] for m in manifests] == [1, 2, 3]
    assert [m["mechanism"]["new_batch"] for m in manifests] == [1, 2, 3]
    assert [m["guarantee"]["per_device"]["batches"] for m in manifests] == [1, 2, 3]
    model = catalog.query("SELECT last_batch, prior FROM online_models")[0]
    assert model == {"last_batch": 3, "prior": "pub"}
    with pytest.raises(BadInputError, match="started with other"):
        online_release(request.replace(omega=0.25))
    with pytest.raises(BadInputError, match="private"):
        online_release(request.replace(prior="rep", model="other"))


def test_central_mechanisms_refuse_a_report_dataset(collected, tmp_path):
    from fdptm.request import ReleaseRequest
    from fdptm.tasks.run import preflight

    workspace = _fresh(collected, tmp_path, n=1)
    request = ReleaseRequest.build(
        dataset="rep", epsilon=1.0, delta=1e-5, topics=3, workspace=str(workspace.root)
    )
    with pytest.raises(BadInputError, match="local-DP reports"):
        preflight(request)


def test_vocabulary_from_private_data_or_a_release_is_refused(collected, tmp_path):
    root = collected[0]
    private = Workspace.resolve(tmp_path / "ws")
    ingest(root / "pub.txt", "secret", private)
    with pytest.raises(BadInputError, match="private"):
        build_vocabulary("public:secret", private, 100)
    release = tmp_path / "releases" / "run-1"
    release.mkdir(parents=True)
    (release / "manifest.json").write_text("{}")
    (release / "words.txt").write_text("apple\n")
    with pytest.raises(BadInputError, match="part of a release"):
        build_vocabulary(str(release / "words.txt"), private, 100, declare_public=True)
    words = tmp_path / "words.txt"
    words.write_text("police\nhostage\n")
    with pytest.raises(BadInputError, match="--declare-public"):
        build_vocabulary(str(words), private, 100)
    vocab = build_vocabulary(str(words), private, 100, declare_public=True)
    assert vocab.words == ("hostage", "police")


def test_online_deployment_carries_the_local_request(collected, tmp_path):
    from fdptm.deployments.online_release import from_args

    d = from_args(["--dataset", "rep", "--topics", "4", "--prior", "pub", "--interval", "60",
                   "--workspace", str(tmp_path / "ws")])  # fmt: skip
    request = LocalReleaseRequest.build(**d.parameters["request"])
    assert (request.mechanism, request.topics, request.prior) == ("olp-lda", 4, "pub")
    assert d.schedules[0].schedule.interval.total_seconds() == 60


def test_cli_randomize_ingest_and_refusals_exit_2(collected, tmp_path, capsys):
    """The device command in a process of its own; the server commands through the CLI's
    ``main`` in this process (the same code, without an interpreter start each)."""
    from fdptm.cli import main

    root = collected[0]
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"text": "Police in Ferguson"}\n{"text": "Sydney siege hostages"}\n')

    def fdptm(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--workspace", str(tmp_path / "ws")])
        out = capsys.readouterr()
        return code, out.out, out.err

    assert fdptm("ingest", str(root / "pub.txt"), "--dataset", "pub", "--public")[0] == 0
    built = fdptm("local", "vocabulary", "public:pub", str(tmp_path / "v.json"), "--size", "300")
    assert built[0] == 0, built[2]
    assert LocalVocabulary.load(tmp_path / "v.json").fingerprint == collected[2].fingerprint
    out = tmp_path / "r.parquet"
    done = subprocess.run(
        [sys.executable, "-m", "fdptm.cli", "local", "randomize", "--vocabulary",
         str(tmp_path / "v.json"), "--flip", "0.1", str(docs), str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "per document" in done.stdout and "Ferguson" not in done.stdout + done.stderr
    vocab = str(tmp_path / "v.json")
    code, stdout, stderr = fdptm("ingest", str(out), "--dataset", "rep", "--local-reports",
                                 "--vocabulary", vocab, "--flip", "0.1")  # fmt: skip
    assert code == 0, stderr
    assert "local DP per document" in stdout
    code, _, stderr = fdptm("ingest", str(out), "--dataset", "rep2", "--local-reports",
                            "--vocabulary", vocab, "--flip", "0.3")  # fmt: skip
    assert code == 2 and "not the declared" in stderr and "Traceback" not in stderr
    plain = tmp_path / "plain.txt"
    plain.write_text("police\n")
    code = main(["local", "randomize", "--vocabulary", str(plain), "--flip", "0.1", str(docs),
                 str(tmp_path / "x.parquet")])  # fmt: skip
    assert code == 2 and "public vocabulary" in capsys.readouterr().err
    code, _, stderr = fdptm("release", "--dataset", "rep", "--epsilon", "1", "--delta", "1e-5",
                            "--topics", "3")  # fmt: skip
    assert code == 2 and "fdptm local release" in stderr
