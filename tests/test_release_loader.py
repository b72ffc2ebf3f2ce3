"""fdptm.load_release on a real release: the matrix and vocabulary as published, the
floor-aware top words, gensim interop, a long data frame, and refusal of altered files."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import fdptm
from fdptm.errors import BadInputError
from fdptm.evaluation import metrics, topwords
from fdptm.storage.catalog import Catalog
from fdptm.tasks.ingest import ingest

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture(scope="module")
def released(tmp_path_factory, pheme_raw, prefect_harness):
    from fdptm.cli import main
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(tmp_path_factory.mktemp("loader") / "ws")
    ingest(pheme_raw, "pheme", workspace)
    args = ["release", "--dataset", "pheme", "--epsilon", "20", "--delta", "1e-5"]
    args += ["--topics", "4", "--iterations", "10", "--seed", "5", "--no-progress"]
    assert main([*args, "--workspace", str(workspace.root)]) == 0
    row = Catalog(workspace).query("SELECT run_id, path FROM releases")[0]
    return workspace, row["run_id"], workspace.root / row["path"]


def test_the_release_is_the_published_matrix_and_vocabulary(released):
    _, run_id, path = released
    release = fdptm.load_release(path)
    assert release.run_id == run_id and release.n_topics == 4
    table = pq.read_table(path / "topic_word.parquet")
    phi = np.stack(table.column("probabilities").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(release.topic_word, phi)
    vocab = pq.read_table(path / "vocabulary.parquet").to_pylist()
    assert release.vocabulary == [r["word"] for r in sorted(vocab, key=lambda r: r["index"])]
    manifest = json.loads((path / "manifest.json").read_text())
    assert release.manifest == manifest and release.guarantee == manifest["guarantee"]
    assert release.top_words(5) == topwords.top_words(phi, release.vocabulary, 5)
    assert release.no_signal() == topwords.no_signal(phi)


def test_gensim_interop_scores_what_the_projects_npmi_scores(released):
    from gensim.models import CoherenceModel

    from fdptm.storage.artifacts import read_parquet
    from fdptm.tasks.sanitize import corpus_of

    workspace, run_id, path = released
    release = fdptm.load_release(path)
    words = release.vocabulary
    dictionary, topics = release.to_gensim()
    assert [dictionary.token2id[w] for w in words] == list(range(len(words)))
    assert dictionary.dfs == {} and dictionary.num_docs == 0  # no private statistics
    assert topics == [[w for w, _ in t] for t in release.top_words(10) if len(t) >= 2]
    # a reference corpus: the run's sanitized documents (internal; PHEME is public data)
    row = Catalog(workspace).artifact(f"run/{run_id}/sanitized_tokens")
    corpus = corpus_of(read_parquet(workspace.root / row["path"], row["sha256"]), len(words))
    texts = [t for t in metrics.token_lists(corpus, words) if t]
    window = max(len(t) for t in texts)  # co-occurrence per document, as fdptm's NPMI counts
    model = CoherenceModel(
        topics=topics, texts=texts, dictionary=dictionary, coherence="c_npmi", window_size=window
    )
    assert len(topics) == release.n_topics and not any(release.no_signal())
    ours = metrics.npmi(release.topic_word, corpus, words)
    assert model.get_coherence() == pytest.approx(ours, abs=1e-9)


def test_the_frame_has_one_row_per_topic_and_word(released):
    release = fdptm.load_release(released[2])
    frame = release.to_frame()
    k, v = release.topic_word.shape
    assert len(frame) == k * v and list(frame.columns) == [
        "topic",
        "word",
        "probability",
        "rank",
        "above_floor",
        "listed",
    ]
    for topic, group in frame.groupby("topic"):
        assert sorted(group["rank"]) == list(range(1, v + 1))
        ranked = group.sort_values("rank")
        listed = release.top_words(10)[topic]
        assert list(ranked[ranked["listed"]]["word"])[:10] == [w for w, _ in listed]
        assert not (ranked["listed"] & ~ranked["above_floor"]).any()  # listed: above it
    np.testing.assert_allclose(frame.groupby("topic")["probability"].sum(), 1.0)


def test_altered_or_incomplete_releases_are_refused(released, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(released[2], copy)
    assert fdptm.load_release(copy).run_id == released[1]  # a faithful copy loads
    table = pq.read_table(copy / "vocabulary.parquet")
    pq.write_table(table.slice(1), copy / "vocabulary.parquet")
    with pytest.raises(BadInputError, match="does not match the sha256"):
        fdptm.load_release(copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(BadInputError, match=r"manifest\.json missing"):
        fdptm.load_release(copy)
    with pytest.raises(BadInputError, match="is not a release directory"):
        fdptm.load_release(tmp_path / "nowhere")


def test_columns_follow_the_vocabularys_index_not_its_row_order(released, tmp_path):
    """A vocabulary file whose rows are permuted (its hash recorded again, the signature
    removed: an unsigned release, as older versions published) loads to the same columns:
    words are placed by their ``index``, not by their row."""
    import pyarrow as pa

    from fdptm.storage.artifacts import file_sha256

    copy = tmp_path / "permuted"
    shutil.copytree(released[2], copy)
    table = pq.read_table(copy / "vocabulary.parquet")
    order = np.random.default_rng(0).permutation(table.num_rows)
    pq.write_table(table.take(pa.array(order)), copy / "vocabulary.parquet")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["vocabulary.parquet"]["sha256"] = file_sha256(copy / "vocabulary.parquet")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    for name in ("manifest.sig", "signer.pub"):  # an edited manifest fails its signature
        (copy / name).unlink()
    assert fdptm.load_release(copy).vocabulary == fdptm.load_release(released[2]).vocabulary
