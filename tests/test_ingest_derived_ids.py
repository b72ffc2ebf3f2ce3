"""Files without an id column: every row its own document, ids keyed, re-ingest refused.

Real files, a real DuckDB catalog in a temporary workspace, the real CLI.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow.parquet as pq
import pytest
from test_ingest_columns import stored, write_rows

from fdptm.cli import main
from fdptm.errors import BadInputError
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace
from fdptm.tasks.ingest import ingest


def test_document_level_identical_texts_of_different_files_are_all_kept(tmp_path, workspace):
    """One person's "lol" never decides whether another person's "lol" is stored."""
    (tmp_path / "a.json").write_text(json.dumps({"text": ["lol"]}))
    (tmp_path / "b.json").write_text(json.dumps({"text": ["lol", "lol"]}))
    (tmp_path / "c.txt").write_text("lol\n")
    results = [ingest(tmp_path / name, "d", workspace) for name in ("a.json", "b.json", "c.txt")]
    assert [(r.n_rows, r.n_rejected) for r in results] == [(1, 0), (2, 0), (1, 0)]
    rows = stored(workspace)
    assert [r["text"] for r in rows] == ["lol"] * 4
    assert len({r["doc_id"] for r in rows}) == 4


def test_author_level_identical_rows_of_different_files_are_all_kept(tmp_path, workspace):
    first = [{"author_id": "u1", "text": "hi", "ts": "2024-01-01T00:00:00Z"}]
    second = [*first, {"author_id": "u2", "text": "hi", "ts": "2024-01-01T00:00:00Z"}]
    ingest(write_rows(tmp_path / "a.jsonl", first), "d", workspace)
    result = ingest(write_rows(tmp_path / "b.jsonl", second), "d", workspace)
    assert (result.n_rows, result.n_rejected) == (2, 0)
    assert [r["author_id"] for r in stored(workspace)] == ["u1", "u1", "u2"]


@pytest.mark.parametrize("with_ids", [False, True])
def test_the_same_file_again_is_refused_whole(tmp_path, capsys, with_ids):
    rows = [{"text": "alpha"}, {"text": "beta"}]
    if with_ids:
        rows = [{"doc_id": f"x{i}", **r} for i, r in enumerate(rows)]
    path = write_rows(tmp_path / "a.jsonl", rows)
    copy = tmp_path / "renamed.jsonl"
    copy.write_bytes(path.read_bytes())
    ws = Workspace.resolve(tmp_path / "ws")
    cli = ["--dataset", "d", "--workspace", str(ws.root)]
    assert main(["ingest", str(path), *cli]) == 0
    capsys.readouterr()
    for again in (path, copy):
        assert main(["ingest", str(again), *cli]) == 2
        out, err = capsys.readouterr()
        assert "this file was already ingested as batch 1 of dataset 'd'" in err, err
        assert "nothing was stored" in err and "Traceback" not in err
        assert "alpha" not in out + err
    assert len(Catalog(ws).batches("d")) == 1
    # into another dataset it is a first ingest
    assert main(["ingest", str(copy), "--dataset", "e", "--workspace", str(ws.root)]) == 0


def test_derived_ids_are_keyed_and_never_printed(tmp_path, capsys):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"text": ["lol", "   ", "lol"]}))
    ids = {}
    for name in ("ws1", "ws2"):
        ws = Workspace.resolve(tmp_path / name)
        assert main(["ingest", str(path), "--dataset", "d", "--workspace", str(ws.root)]) == 0
        out, _ = capsys.readouterr()
        (rejected,) = pq.read_table(next((ws.root / "datasets/d/rejects").iterdir())).to_pylist()
        assert "row 2: text is empty or whitespace only" in out
        assert rejected["doc_id"] not in out
        ids[name] = [r["doc_id"] for r in stored(ws)] + [rejected["doc_id"]]
    # the same file in two workspaces: different secret keys, unrelated ids
    assert len(set(ids["ws1"])) == 3 and not set(ids["ws1"]) & set(ids["ws2"])
    # not computable from the content: neither the text's hash nor the old unkeyed scheme
    for text, occurrence in (("lol", 0), ("lol", 1), ("   ", 0)):
        digest = hashlib.sha256(f"None\x1fNone\x1f{text}\x1f{occurrence}".encode()).hexdigest()
        assert f"d{digest[:20]}" not in ids["ws1"]
    assert not any(hashlib.sha256(b"lol").hexdigest()[:20] in i for i in ids["ws1"])
    # within one workspace, deterministic: the same file gives the same ids in any dataset
    ws1 = Workspace.resolve(tmp_path / "ws1")
    ingest(path, "e", ws1)
    assert [r["doc_id"] for r in stored(ws1, "e")] == ids["ws1"][:2]


def test_a_rewritten_file_is_a_new_file(tmp_path, workspace):
    """The re-ingest check and the derived ids rest on the sha256 of the bytes parsed: the
    same path with new content is a new file, whose every row is a new document."""
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"text": ["one"]}))
    first = ingest(path, "d", workspace)
    path.write_text(json.dumps({"text": ["one", "two"]}))
    second = ingest(path, "d", workspace)
    assert (first.n_rows, second.n_rows) == (1, 2)
    batches = Catalog(workspace).batches("d")
    assert batches[0]["source_sha256"] != batches[1]["source_sha256"]
    assert batches[1]["source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(BadInputError, match="already ingested as batch 2"):
        ingest(path, "d", workspace)
