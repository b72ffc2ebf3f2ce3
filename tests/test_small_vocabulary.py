"""A DP vocabulary smaller than k (issue 28, item 4): the run releases on the DP words plus
public filler words, spends M2 as planned, and the manifest says which words are filler.

Through the real CLI, flows, DuckDB ledger and Parquet artifacts, with real nltk PRE of the
wordfreq list; seeded (these are tests, not evidence)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from fdptm.cli import main
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace
from fdptm.tasks import public_vocabulary
from fdptm.tasks.ingest import ingest
from fdptm.tasks.preprocess import PreConfig
from fdptm.tasks.stages import FILLER_SOURCE

pytestmark = pytest.mark.usefixtures("prefect_harness")
TOPICS = 12


@pytest.fixture
def released(small):
    """The ``small`` fixture's 80 documents hold 8 distinct words: k = 12 is more than any
    DP vocabulary of them can be."""
    args = ["release", "--dataset", "small", "--epsilon", "20", "--delta", "1e-5"]
    args += ["--topics", str(TOPICS), "--seed", "3", "--workspace", str(small.root)]
    assert main(args) == 0
    catalog = Catalog(small)
    (run,) = catalog.query("SELECT run_id FROM runs WHERE kind = 'release'")
    return small, catalog, run["run_id"]


def test_a_vocabulary_smaller_than_k_is_filled_with_public_words(released):
    workspace, catalog, run_id = released
    out = workspace.root / "releases" / run_id
    manifest = json.loads((out / "manifest.json").read_text())
    words = pq.read_table(out / "vocabulary.parquet").column("word").to_pylist()
    (m1,) = [s for s in manifest["stages"] if s["stage"] == "vocabulary"]
    filler = m1["public_filler"]
    dp = sorted(set(words) - set(filler))
    assert len(words) == TOPICS and set(filler) <= set(words)
    assert set(dp) <= {"apple", "banana", "cherry", "grape", "durian", "elderberry", "fig", "lemon"}
    assert f"had {len(dp) or 'no'} words, fewer than the {TOPICS} topics" in m1["vocabulary_source"]
    assert FILLER_SOURCE in m1["vocabulary_source"]
    english = public_vocabulary.load(FILLER_SOURCE, workspace, PreConfig()).ranked()
    assert filler == [w for w in english if w not in dp][: TOPICS - len(dp)]
    assert manifest["model"] == {**manifest["model"], "topics": TOPICS}
    states = {
        r["stage"]: r["state"]
        for r in catalog.query("SELECT stage, state FROM ledger WHERE run_id = ?", [run_id])
    }
    assert states == {"vocabulary": "spent", "train": "spent"}


def test_the_run_public_vocabulary_fills_first(tmp_path):
    """With ``--vocabulary`` (a word list; M1 ``extend`` keeps its most frequent word and
    adds the DP words), the filler comes from the list before the English one, most
    frequent first."""
    workspace = Workspace.resolve(tmp_path / "ws")
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(["apple banana cherry grape"] * 40))
    ingest(corpus, "c", workspace)
    listing = tmp_path / "words.txt"
    listing.write_text("zebra 5\nyacht 9\nxylophone 1\n")
    args = ["release", "--dataset", "c", "--epsilon", "20", "--delta", "1e-5", "--topics", "9"]
    args += ["--vocabulary", str(listing), "--m1", "extend", "--vocabulary-size", "1"]
    args += ["--seed", "3", "--workspace", str(workspace.root)]
    assert main(args) == 0
    (run,) = Catalog(workspace).query("SELECT run_id FROM runs WHERE kind = 'release'")
    out = workspace.root / "releases" / run["run_id"]
    manifest = json.loads((out / "manifest.json").read_text())
    (m1,) = [s for s in manifest["stages"] if s["stage"] == "vocabulary"]
    words = pq.read_table(out / "vocabulary.parquet").column("word").to_pylist()
    filler = m1["public_filler"]
    assert "yacht" in words and "yacht" not in filler  # the list's own top word, not filler
    assert filler[:2] == ["zebra", "xylophone"] and len(words) == 9
    dp = set(words) - set(filler) - {"yacht"}
    english = public_vocabulary.load(FILLER_SOURCE, workspace, PreConfig()).ranked()
    rest = [w for w in english if w not in dp | {"yacht", "zebra", "xylophone"}]
    assert filler[2:] == rest[: 9 - 3 - len(dp)]
