"""fdptm.Release as an object: a short repr, gensim-style show_topics / show_topic /
get_topics that never rank noise ties as words, and save / Release.load round trips that
keep the published bytes (so the manifest's sha256 still verify), on a real release."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import re
from datetime import UTC, datetime

import numpy as np
import pytest

import fdptm
from fdptm.errors import BadInputError
from fdptm.evaluation import topwords
from fdptm.release import FILES, NO_SIGNAL, Release, load_release

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture(scope="module")
def released(tmp_path_factory, prefect_harness):
    """A real seeded release (a test run, NOT DP) of 80 one-line documents over two word
    groups, 4 topics, through the CLI: its run id and directory."""
    from fdptm.cli import main
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    root = tmp_path_factory.mktemp("release-object")
    workspace = Workspace.resolve(root / "ws")
    text = root / "small.txt"
    text.write_text(
        "\n".join(["apple banana cherry grape"] * 40 + ["durian elderberry figs lemon"] * 40)
    )
    ingest(text, "small", workspace)
    args = ["release", "--dataset", "small", "--epsilon", "20", "--delta", "1e-5"]
    args += ["--topics", "4", "--iterations", "10", "--seed", "5", "--no-progress"]
    args += ["--mechanism", "dp-vi"]  # its word lists follow the matrix (edited below)
    assert main([*args, "--workspace", str(workspace.root)]) == 0
    row = Catalog(workspace).query("SELECT run_id, path FROM releases")[0]
    return row["run_id"], workspace.root / row["path"]


def test_repr_is_one_short_line_without_the_matrix_or_the_manifest(released):
    run_id, path = released
    release = fdptm.load_release(path)
    text = repr(release)
    assert text == str(release) and "\n" not in text and len(text) <= 200
    assert text.startswith(f"Release({run_id!r}, 4 topics x {len(release.vocabulary)} words, ")
    g = release.guarantee
    assert f"{g['notion']} epsilon={g['epsilon']:.6g}, delta={g['delta']:.6g}" in text
    assert f"adjacency={g['adjacency']}" in text
    assert "SEEDED TEST RUN: NOT DP" in text  # --seed: the repr says it is not DP
    assert "array" not in text and g["statement"] not in text and "sha256" not in text
    assert not any(word in text for word in release.vocabulary)


def test_show_topics_mirror_gensims_signatures_and_shapes(released, caplog):
    from gensim.models import LdaModel

    for name in ("show_topics", "show_topic", "get_topics"):
        ours = list(inspect.signature(getattr(Release, name)).parameters)
        assert ours == list(inspect.signature(getattr(LdaModel, name)).parameters), name
    release = fdptm.load_release(released[1])
    listed = release.top_words(10)
    formatted = release.show_topics()
    assert [i for i, _ in formatted] == list(range(release.n_topics))
    for (_, line), words in zip(formatted, listed, strict=True):
        if not words:  # a topic with no word above the noise
            assert line == NO_SIGNAL
            continue
        # gensim's own expression for (word, probability) pairs (LdaModel.show_topics)
        assert line == " + ".join('%.3f*"%s"' % (v, k) for k, v in words)  # noqa: UP031
        assert re.fullmatch(r'\d\.\d{3}\*"\w+"( \+ \d\.\d{3}\*"\w+")*', line)
    plain = release.show_topics(formatted=False)
    assert plain == list(enumerate(listed))
    assert all(isinstance(w, str) and isinstance(p, float) for _, ws in plain for w, p in ws)
    assert [t for t, _ in release.show_topics(num_topics=2)] == [0, 1]
    assert [t for t, _ in release.show_topics(num_topics=99)] == [0, 1, 2, 3]
    assert all(len(ws) <= 1 for _, ws in release.show_topics(num_words=1, formatted=False))
    for i in range(release.n_topics):
        assert release.show_topic(i) == listed[i]
        assert release.show_topic(i, topn=2) == listed[i][:2]
    with pytest.raises(IndexError):
        release.show_topic(release.n_topics)
    with caplog.at_level(logging.INFO, logger="fdptm.release"):
        release.show_topics(log=True)
    assert [r.getMessage() for r in caplog.records] == [f"topic #{i}: {t}" for i, t in formatted]


def test_the_listed_words_are_the_manifests(released):
    """What show_topic lists is what the manifest published: the words above the floor
    and the no_signal flags of its ``topics`` entry."""
    release = fdptm.load_release(released[1])
    for entry in release.manifest["topics"]:
        i = entry["topic"]
        words = [w for w, _ in release.show_topic(i, topn=len(entry["words"]) or 1)]
        assert words == ([] if entry["no_signal"] else [w["word"] for w in entry["words"]])
        assert release.no_signal()[i] == entry["no_signal"]


def test_no_signal_topics_are_shown_as_such_and_get_topics_is_everything(released):
    """Rows replaced on the real release's matrix: a uniform row (no word above the floor)
    and a near-uniform one (one word a hair above it: top_words lists it, but the row is
    within NEAR_UNIFORM_TV of uniform) are no signal; gensim would show ten words of each."""
    release = fdptm.load_release(released[1])
    phi = release.topic_word.copy()
    v = phi.shape[1]
    phi[0] = 1.0 / v
    phi[1] = 1.0 / v
    phi[1, 3] += 0.01
    phi[1] /= phi[1].sum()
    edited = dataclasses.replace(release, topic_word=phi)
    assert edited.no_signal()[:2] == [True, True] and topwords.top_words(phi, release.vocabulary)[1]
    assert edited.show_topics()[:2] == [(0, NO_SIGNAL), (1, NO_SIGNAL)]
    assert edited.show_topics(formatted=False)[:2] == [(0, []), (1, [])]
    assert edited.show_topic(0) == [] and edited.show_topic(1) == []
    assert edited.show_topic(2) == release.show_topic(2)  # untouched rows as before
    topics = edited.get_topics()
    np.testing.assert_array_equal(topics, phi)  # the whole released matrix, floor included
    topics[:] = 0
    assert edited.topic_word[0, 0] == 1.0 / v  # a copy


def test_save_writes_the_published_bytes_and_load_reads_them_back(released, tmp_path):
    _, path = released
    release = Release.load(path)
    copy = tmp_path / "copies" / "one"
    assert release.save(copy) is None  # as gensim's save
    for name in FILES:
        assert (copy / name).read_bytes() == (path / name).read_bytes(), name
    files = release.manifest["files"]
    for name in FILES[:2]:
        assert hashlib.sha256((copy / name).read_bytes()).hexdigest() == files[name]["sha256"]
    back = Release.load(copy)
    assert back.path == copy and back.manifest == release.manifest
    assert back.vocabulary == release.vocabulary
    np.testing.assert_array_equal(back.topic_word, release.topic_word)
    day = datetime.fromisoformat(release.manifest["release_date"]).replace(tzinfo=UTC)
    assert all((copy / n).stat().st_mtime == day.timestamp() for n in FILES)
    assert sorted(p.name for p in copy.parent.iterdir()) == ["one"]  # no staging left
    empty = tmp_path / "empty"
    empty.mkdir()
    back.save(empty)  # an empty directory may be the target
    assert fdptm.load_release(empty).run_id == release.run_id


def test_save_writes_what_load_checked_even_if_the_source_changes(released, tmp_path):
    import shutil

    source = tmp_path / "source"
    shutil.copytree(released[1], source)
    release = load_release(source)
    (source / "vocabulary.parquet").write_bytes(b"not parquet")  # changed after the load
    release.save(tmp_path / "saved")
    for name in FILES:
        assert (tmp_path / "saved" / name).read_bytes() == (released[1] / name).read_bytes()


def test_save_refuses_what_is_not_a_published_release(released, tmp_path):
    release = load_release(released[1])
    with pytest.raises(BadInputError, match="not an empty directory"):
        release.save(released[1])
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("keep me")
    with pytest.raises(BadInputError, match="not an empty directory"):
        release.save(occupied)
    assert (occupied / "notes.txt").read_text() == "keep me"
    edited = dataclasses.replace(release, topic_word=release.topic_word[::-1].copy())
    with pytest.raises(BadInputError, match="differ from its published files"):
        edited.save(tmp_path / "edited")
    assert not (tmp_path / "edited").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["occupied"]  # staging removed
    with pytest.raises(BadInputError, match="save writes a local directory"):
        release.save("s3://bucket/releases/x")
    by_hand = Release(released[1], release.topic_word, release.vocabulary, release.manifest)
    by_hand.save(tmp_path / "by-hand")  # no bytes kept: read from its directory, checked
    assert load_release(tmp_path / "by-hand").run_id == release.run_id


def test_a_release_loaded_from_a_url_saves_to_a_local_copy(released, tmp_path):
    """fsspec's in-memory filesystem as the store: load_release reads the URL, and save
    writes the bytes it checked (the temporary download is gone by then)."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for name in FILES:
        fs.pipe_file(f"/store/releases/r/{name}", (released[1] / name).read_bytes())
    try:
        release = fdptm.load_release("memory://store/releases/r")
        assert release.path == "memory://store/releases/r"
        release.save(tmp_path / "local")
        for name in FILES:
            assert (tmp_path / "local" / name).read_bytes() == (released[1] / name).read_bytes()
        assert Release.load(tmp_path / "local").run_id == release.run_id
    finally:
        fs.rm("/store", recursive=True)
