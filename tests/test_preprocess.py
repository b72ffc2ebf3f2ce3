"""PRE: the paper's rules, no downloads, stability (FDPTM Definition F.1), and its cache."""

from __future__ import annotations

import json
import os
import re
import shutil
import string
import warnings
from pathlib import Path

import nltk
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from fdptm import pre
from fdptm.errors import BadInputError
from fdptm.parallel import workers
from fdptm.storage.artifacts import file_sha256
from fdptm.tasks.preprocess import (
    TOKENS_SCHEMA,
    PreConfig,
    preprocess_array,
    preprocess_batch,
    preprocess_texts,
    read_tokens,
    stop_workers,
)
from fdptm.text import _lemmatizer_at, _PackagedWordNet, lemmatizer, stop_words, wordnet_dir

PHEME_RAW = Path(__file__).resolve().parents[2] / "shared" / "data" / "pheme" / "pheme_raw.json"

TWEET = (
    "EXTENDED: Dramatic video of gunfire inside hallways of Parliament Hill. "
    "(The Globe and Mail) http://t.co/SbOu4rAp96 @someone #OttawaShooting"
)


def test_rules_on_a_real_tweet():
    (tokens,) = preprocess_texts([TWEET])
    assert tokens == [
        "extended",
        "dramatic",
        "video",
        "gunfire",
        "inside",
        "hallway",
        "parliament",
        "hill",
        "globe",
        "mail",
        "ottawashooting",
    ]


def test_every_token_obeys_the_rules():
    texts = ["The leaves were falling; children's shoes!!! a an xyzzyxyzzyxyzzyxyzzy 42 ok"]
    (tokens,) = preprocess_texts(texts)
    stops = stop_words()
    assert tokens == ["leaf", "falling", "child", "shoe"]
    assert all(3 <= len(t) <= 15 and t.isalpha() and t.islower() and t not in stops for t in tokens)


def test_no_download_is_attempted(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("nltk.download must never run")

    monkeypatch.setattr(nltk, "download", refuse)
    assert preprocess_texts(["Shootings reported downtown"]) == [
        ["shooting", "reported", "downtown"]
    ]


def test_stop_words_are_nltks_english_list():
    stops = stop_words()
    assert len(stops) == 198
    assert {"the", "and", "don't", "ourselves"} <= stops


def test_wordnet_is_read_from_hard_linked_files(tmp_path, monkeypatch):
    """uv installs hard-link files from its cache, which nltk (>= 3.10.3) refuses to read."""
    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))
    copied, linked_dir = tmp_path / "copied", tmp_path / "linked"
    shutil.copytree(wordnet_dir(), copied)  # links within one file system
    linked_dir.mkdir()
    for path in copied.iterdir():
        if path.is_file():
            os.link(path, linked_dir / path.name)
    linked = _lemmatizer_at(str(linked_dir))
    if Version(nltk.__version__) >= Version("3.10.3"):  # where nltk's own reader refuses
        with warnings.catch_warnings(), pytest.raises(PermissionError, match="multiply-linked"):
            warnings.simplefilter("ignore")
            _PackagedWordNet(str(linked_dir), None)
    assert [linked.lemmatize(w) for w in ("geese", "cats", "shootings")] == [
        "goose",
        "cat",
        "shooting",
    ]
    assert linked.lemmatize("running", "v") == lemmatizer().lemmatize("running", "v") == "run"


words = st.text(alphabet=string.ascii_letters + " .,!'#@-0123456789", max_size=80)


@settings(max_examples=150, deadline=None)
@given(doc=words, others=st.lists(words, max_size=6), position=st.integers(0, 6))
def test_a_documents_tokens_depend_on_it_alone(doc, others, position):
    alone = preprocess_texts([doc])[0]
    corpus = list(others)
    corpus.insert(min(position, len(corpus)), doc)
    assert preprocess_texts(corpus)[min(position, len(others))] == alone


def _per_document(text: str, cfg: PreConfig | None = None) -> list[str]:
    """PRE's rules one document at a time, with nltk's ``RegexpTokenizer``: the reference
    the vectorised implementation must equal."""
    cfg = cfg or PreConfig()
    stops, lemmatize = stop_words(), lemmatizer().lemmatize
    text = text.lower()
    text = re.sub(r"(?:https?://|www\.)\S+", " ", text) if cfg.strip_urls else text
    text = re.sub(r"@\w+", " ", text) if cfg.strip_mentions else text
    text = re.sub(r"[^a-z]+", " ", text)
    out = []
    for token in nltk.tokenize.RegexpTokenizer(r"[a-z]+").tokenize(text):
        if cfg.min_len <= len(token) <= cfg.max_len and token not in stops:
            lemma = lemmatize(token)
            if cfg.min_len <= len(lemma) <= cfg.max_len and lemma not in stops:
                out.append(lemma)
    return out


def test_vectorised_pre_equals_the_per_document_rules_on_real_tweets():
    """Every PHEME raw tweet (URLs, mentions, emoji, accents, newlines) gets exactly the
    tokens of the per-document reference, also under another configuration."""
    texts = json.loads(PHEME_RAW.read_text())["text"]
    assert preprocess_texts(texts) == [_per_document(t) for t in texts]
    cfg = PreConfig(min_len=2, max_len=8, strip_urls=False, strip_mentions=False)
    assert preprocess_texts(texts, cfg) == [_per_document(t, cfg) for t in texts]


@pytest.mark.parametrize("threads", ["1", "2"])
def test_letter_runs_in_slices_on_threads_equal_the_per_document_rules(threads, monkeypatch):
    """The runs of letters cut into slices of 100 PHEME tweets (one per usable core, here 1
    or 2) are done on threads and put back in order: every tweet gets the per-document
    reference's tokens."""
    texts = json.loads(PHEME_RAW.read_text())["text"]
    slices: list[int] = []
    split = pre.each_chunk

    def watched(work, chunks):
        slices.append(chunks)
        split(work, chunks)

    monkeypatch.setenv("FDPTM_THREADS", threads)
    monkeypatch.setattr(pre, "_DOCS_PER_SLICE", 100)
    monkeypatch.setattr(pre, "each_chunk", watched)
    assert preprocess_texts(texts) == [_per_document(t) for t in texts]
    assert set(slices) == {min(workers(), len(texts) // 100)}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_pre_in_worker_processes_equals_pre_in_this_process(monkeypatch):
    """Chunks of 500 PHEME tweets on two worker processes and in this process (one
    thread), under two configurations (the first again after the pool stopped): the same
    tokens in the same order as ``preprocess_texts`` gets (the call it makes), which equal
    the per-document rules on these tweets under both configurations (the test above), and
    the progress counts every text once."""
    texts = pa.array(json.loads(PHEME_RAW.read_text())["text"], pa.string())
    short = PreConfig(min_len=2, max_len=8, strip_urls=False, strip_mentions=False)
    whole = {cfg: preprocess_array(texts, cfg) for cfg in (PreConfig(), short)}
    for cfg in (PreConfig(), short, PreConfig()):
        ticks: list[int] = []
        monkeypatch.setenv("FDPTM_THREADS", "2")
        pooled = preprocess_array(texts, cfg, ticks.append, chunk=500)
        stop_workers()
        monkeypatch.setenv("FDPTM_THREADS", "1")
        alone = preprocess_array(texts, cfg, chunk=500)
        assert pooled.equals(alone) and alone.equals(whole[cfg])
        assert sum(ticks) == len(texts) and len(ticks) == -(-len(texts) // 500)


odd = st.text(
    alphabet=string.ascii_letters + " .,!'#@-:/_\n\t0123456789éÉİıΣσςK\u2028\x85ﬁ", max_size=60
)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(odd, max_size=8))
def test_vectorised_pre_equals_the_per_document_rules_on_odd_text(texts):
    """Newlines, Unicode line separators, Turkish dotted I, Greek sigma, the Kelvin sign and
    ligatures: joining a chunk's texts must not change any document's tokens."""
    texts = [*texts, "www.x.org/@y http://a.b\nhttps://c @d\ne"]
    assert preprocess_texts(texts) == [_per_document(t) for t in texts]


def test_config_changes_the_cache_key():
    assert PreConfig().digest() != PreConfig(min_len=2).digest()


def _cached_tokens(tmp_path, workspace):
    """A real ingested batch and its PRE token cache."""
    from fdptm.storage.catalog import Catalog
    from fdptm.tasks.ingest import ingest

    source = tmp_path / "docs.txt"
    source.write_text("Shootings reported downtown\nThe leaves were falling\nParliament Hill\n")
    ingest(source, "d", workspace, fmt="lines")
    catalog = Catalog(workspace)
    (batch,) = catalog.batches("d")
    first = preprocess_batch(workspace, catalog, batch, "run-1", PreConfig())
    return catalog, batch, first


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other tokens", "missing"])
def test_a_damaged_token_cache_is_recomputed_from_the_batch(tmp_path, workspace, damage):
    catalog, batch, first = _cached_tokens(tmp_path, workspace)
    expected = read_tokens(workspace, [first]).to_pylist()
    path = workspace.root / first["path"]
    if damage == "garbage":
        path.write_bytes(b"not parquet at all")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "other tokens":  # a valid Parquet file that is not what was cached
        table = pa.table({"doc_id": ["x"], "author_id": ["x"], "tokens": [["forged"]], "day": [0]})
        pq.write_table(table.cast(TOKENS_SCHEMA), path)
    else:
        path.unlink()
    again = preprocess_batch(workspace, catalog, batch, "run-2", PreConfig())
    assert read_tokens(workspace, [again]).to_pylist() == expected
    assert again["run_id"] == "run-2" and again["sha256"] == file_sha256(path)


def test_a_damaged_batch_is_still_the_users_problem(tmp_path, workspace):
    catalog, batch, first = _cached_tokens(tmp_path, workspace)
    (workspace.root / first["path"]).write_bytes(b"garbage")
    (workspace.root / batch["path"]).write_bytes(b"garbage")
    with pytest.raises(BadInputError, match="re-ingest the batch"):
        preprocess_batch(workspace, catalog, batch, "run-2", PreConfig())
