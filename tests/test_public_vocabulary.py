"""Public vocabularies (public dataset, word list, wordfreq) and the Bayesian public-prior M1
in a real release: free public reads before the spend, private reads only after it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from fdptm.errors import BadInputError
from fdptm.request import ReleaseRequest
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.tasks import public_vocabulary
from fdptm.tasks.ingest import ingest
from fdptm.tasks.preprocess import PreConfig

TOPICS = ["apple banana cherry grape melon", "engine piston gearbox clutch brake"]


@pytest.fixture
def datasets(workspace, tmp_path):
    public = tmp_path / "public.txt"
    public.write_text("\n".join(TOPICS * 10 + ["zebra giraffe"]))
    ingest(public, "pub", workspace, public=True)
    private = tmp_path / "private.txt"
    private.write_text("\n".join(TOPICS * 100 + ["kettle banana"] * 100 + ["secretword lonely"]))
    ingest(private, "priv", workspace)
    return workspace


def test_sources_go_through_pre_and_are_checked(workspace, tmp_path, datasets):
    pre = PreConfig()
    pub = public_vocabulary.load("public:pub", datasets, pre)
    assert "apple" in pub.words and "zebra" in pub.words and "secretword" not in pub.words
    assert pub.counts[pub.words.index("apple")] == 10
    listed = tmp_path / "words.txt"
    listed.write_text("# a comment\nApples 5\napple 2\nthe 100\nEngines\n")
    words = public_vocabulary.load(str(listed), workspace, pre)
    assert dict(zip(words.words, words.counts, strict=True)) == {"apple": 7.0, "engine": 1.0}
    english = public_vocabulary.load("wordfreq:en:2000", workspace, pre)
    assert 1000 < len(english.words) < 2000 and "people" in english.words
    assert "the" not in english.words  # a stop word: PRE drops it from lists as from documents
    with pytest.raises(BadInputError, match="is private: it cannot be used as public input"):
        public_vocabulary.load("public:priv", datasets, pre)
    with pytest.raises(BadInputError, match="no such file"):
        public_vocabulary.load(str(tmp_path / "missing.txt"), workspace, pre)
    bad = tmp_path / "bad.txt"
    bad.write_text("apple -3\n")
    with pytest.raises(BadInputError, match="line 1: the count must be a number > 0"):
        public_vocabulary.load(str(bad), workspace, pre)
    with pytest.raises(BadInputError, match="wordfreq:LANG"):
        ReleaseRequest.build(
            dataset="priv", epsilon=1, delta=1e-5, topics=2, vocabulary="wordfreq:en:x"
        )


def test_the_processed_wordfreq_list_is_kept_in_the_workspace(datasets, tmp_path):
    """Derived once and reused (the same words and counts), derived again from a damaged
    file, and never written where there is no workspace."""
    from fdptm.storage.workspace import Workspace

    pre = PreConfig()
    first = public_vocabulary.load("wordfreq:en:2000", datasets, pre)
    (kept,) = (datasets.root / "internal" / "cache" / "wordfreq").glob("en-2000-*.parquet")
    again = public_vocabulary.load("wordfreq:en:2000", datasets, pre)
    assert again.words == first.words and np.array_equal(again.counts, first.counts)
    kept.write_bytes(b"not parquet")
    damaged = public_vocabulary.load("wordfreq:en:2000", datasets, pre)
    assert damaged.words == first.words and pq.read_table(kept).num_rows == len(first.words)
    nowhere = Workspace.resolve(tmp_path / "no-workspace")
    assert public_vocabulary.load("wordfreq:en:2000", nowhere, pre).words == first.words
    assert not nowhere.root.exists()


def test_m1_modes_need_a_public_vocabulary_and_set_union_ignores_one():
    base = dict(dataset="d", epsilon=3.0, delta=1e-5, topics=2)
    with pytest.raises(BadInputError, match="--m1 none selects within a public vocabulary"):
        ReleaseRequest.build(**base, m1="none")
    with pytest.raises(BadInputError, match="use --m1 extend"):
        ReleaseRequest.build(**base, m1="set-union", vocabulary="wordfreq:en")
    assert ReleaseRequest.build(**base).vocabulary_selection == "set-union"
    assert ReleaseRequest.build(**base, vocabulary="wordfreq:en").vocabulary_selection == "none"


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("m1", ["none", "extend"])
def test_public_vocabulary_without_m1_or_extended_by_set_union(datasets, m1):
    """none: the public list's most frequent words, M1 never charged and M2 gets the whole
    budget; extend: those words plus private words beyond them (DP set union, charged)."""
    from fdptm.flows.release import release

    out = release(
        ReleaseRequest(
            dataset="priv", epsilon=40.0, delta=1e-5, topics=2, iterations=10,
            vocabulary="public:pub", m1=m1, vocabulary_size=6,
            workspace=str(datasets.root), seed=2,
        )
    )  # fmt: skip
    path = datasets.root / "releases" / out["run_id"]
    manifest = json.loads((path / "manifest.json").read_text())
    words = set(pq.read_table(path / "vocabulary.parquet").column("word").to_pylist())
    public = public_vocabulary.load("public:pub", datasets, PreConfig())
    listed = set(public.most_frequent(6))
    entries = Ledger(Catalog(datasets)).entries("priv")
    if m1 == "none":
        assert words == listed
        assert [(e["stage"], e["state"]) for e in entries] == [("train", "spent")]
        assert entries[0]["epsilon"] == pytest.approx(40.0)
        assert manifest["stages"][0]["epsilon"] == 0.0
        assert "nothing charged" in manifest["stages"][0]["vocabulary_source"]
    else:
        assert listed <= words and "kettle" not in public.words
        assert "kettle" in words  # 100 private documents hold it: set union adds it
        assert sorted(e["stage"] for e in entries) == ["train", "vocabulary"]
    assert manifest["guarantee"]["epsilon"] == pytest.approx(40.0)


def test_a_prior_must_be_public_and_the_mechanism_must_take_one(datasets):
    from fdptm.tasks.run import preflight

    base = dict(dataset="priv", epsilon=3.0, delta=1e-5, topics=2, workspace=str(datasets.root))
    with pytest.raises(BadInputError, match="is private: it cannot be used as public input"):
        preflight(ReleaseRequest(**base, prior="priv"))
    with pytest.raises(BadInputError, match="cannot use a public prior; use dp-vi"):
        preflight(ReleaseRequest(**base, prior="pub", mechanism="hdp-lda"))
    with pytest.raises(BadInputError, match="no dataset named 'nope'"):
        preflight(ReleaseRequest(**base, prior="nope"))
    with pytest.raises(BadInputError, match="M1 would spend its share for nothing"):
        preflight(ReleaseRequest(**base, vocabulary="public:pub", m1="bayesian-prior"))
    assert Ledger(Catalog(datasets)).entries("priv") == []


@pytest.mark.usefixtures("prefect_harness")
def test_release_with_a_public_vocabulary(datasets):
    from fdptm.flows.release import release

    out = release(
        ReleaseRequest(
            dataset="priv",
            epsilon=3.0,
            delta=1e-5,
            topics=2,
            iterations=20,
            vocabulary="public:pub",
            m1="bayesian-prior",
            vocabulary_size=8,
            prior="pub",
            workspace=str(datasets.root),
            seed=5,
        )
    )
    path = datasets.root / "releases" / out["run_id"]
    manifest = json.loads((path / "manifest.json").read_text())
    m1 = manifest["stages"][0]
    assert m1["mechanism"] == "bayesian-public-prior"
    assert m1["vocabulary_source"].startswith("public vocabulary public:pub")
    assert m1["parameters"]["sensitivity"] == pytest.approx(
        np.sqrt(m1["parameters"]["max_words"]) * m1["parameters"]["per_word"]
    )
    words = pq.read_table(path / "vocabulary.parquet").column("word").to_pylist()
    public = public_vocabulary.load("public:pub", datasets, PreConfig()).words
    assert len(words) == 8 and set(words) <= set(public)
    assert "secretword" not in words  # never in the public list, so never released
    assert "public dataset 'pub'" in manifest["stages"][1]["public_prior"]
    fruit = {"apple", "banana", "cherry", "grape", "melon"}
    tops = [{w["word"] for w in t["words"][:3]} for t in manifest["topics"]]
    assert any(top <= fruit for top in tops) and any(not top & fruit for top in tops)
    entries = Ledger(Catalog(datasets)).entries("priv")
    assert sorted(e["stage"] for e in entries if e["state"] == "spent") == ["train", "vocabulary"]
    assert Ledger(Catalog(datasets)).entries("pub") == []


@pytest.mark.usefixtures("prefect_harness")
def test_the_public_path_reads_no_private_row_before_the_spend(datasets):
    """Killed right after the reservation (a real SIGKILL), the run has read and preprocessed
    the public dataset for its vocabulary, but nothing derived from the private rows exists
    and nothing is spent yet: private rows are first read after the ledger spends."""
    from prefect.settings import PREFECT_API_URL

    env = dict(os.environ, PREFECT_API_URL=PREFECT_API_URL.value(), FDPTM_KILL_AT="after-reserve")
    done = subprocess.run(
        [
            sys.executable, "-m", "fdptm.cli", "release", "--dataset", "priv", "--epsilon", "3",
            "--delta", "1e-5", "--topics", "2", "--vocabulary", "public:pub",
            "--workspace", str(datasets.root),
        ],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    artifacts = [a["name"] for a in Catalog(datasets).query("SELECT name FROM artifacts")]
    assert any(a.startswith("tokens/pub/") for a in artifacts)
    assert not any(a.startswith("tokens/priv/") for a in artifacts)
    states = {e["state"] for e in Ledger(Catalog(datasets)).entries("priv")}
    assert states == {"reserved"}
