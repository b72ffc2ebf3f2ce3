"""Duplicate ids and missing authors at ingest: one author's rows never remove another's."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from test_ingest_columns import absent, stored, write_rows

from fdptm.cli import main
from fdptm.errors import BadInputError
from fdptm.storage.catalog import Catalog
from fdptm.tasks.ingest import ALREADY_STORED, ingest


def test_a_doc_id_shared_by_two_authors_refuses_the_whole_file(tmp_path, capsys):
    rows = [
        {"doc_id": "x1", "author_id": "alice", "text": "ALICE private words"},
        {"doc_id": "x1", "author_id": "mallory", "text": "MALLORY guessed id"},
        {"doc_id": "x2", "author_id": "bob", "text": "BOB words"},
        {"doc_id": "x3", "author_id": "bob", "text": "BOB more words"},
        {"doc_id": "x3", "author_id": "carol", "text": "CAROL words"},
    ]
    path = write_rows(tmp_path / "in.jsonl", rows)
    ws = tmp_path / "ws"
    assert main(["ingest", str(path), "--dataset", "d", "--workspace", str(ws)]) == 2
    out, err = capsys.readouterr()
    assert "2 doc_ids are shared by rows of different authors" in err
    assert "nothing was stored" in err
    for secret in ("ALICE", "MALLORY", "BOB", "CAROL", "alice", "mallory", "carol"):
        assert secret not in out + err
    from fdptm.storage.workspace import Workspace

    assert absent(Workspace.resolve(ws))


def test_a_row_without_author_sharing_an_id_refuses_the_file(tmp_path, workspace):
    rows = [
        {"doc_id": "x1", "author_id": "alice", "text": "alice words"},
        {"doc_id": "x1", "text": "no author, same id"},
    ]
    with pytest.raises(BadInputError, match="1 doc_id is shared"):
        ingest(write_rows(tmp_path / "in.jsonl", rows), "d", workspace)
    assert absent(workspace)


def test_duplicates_of_one_author_take_down_only_that_authors_rows(tmp_path, workspace):
    rows = [
        {"doc_id": "x1", "author_id": "alice", "text": "first copy"},
        {"doc_id": "x2", "author_id": "bob", "text": "bob words"},
        {"doc_id": "x1", "author_id": "alice", "text": "second copy"},
        {"doc_id": "x3", "author_id": "alice", "text": "alice other"},
    ]
    result = ingest(write_rows(tmp_path / "in.csv", rows), "d", workspace)
    assert (result.n_rows, result.n_rejected) == (2, 2)
    rejects = pq.read_table(result.rejects_path).to_pylist()
    assert [(r["row"], r["doc_id"]) for r in rejects] == [(1, "x1"), (3, "x1")]
    assert all("not unique in this file" in r["reason"] for r in rejects)
    assert [(r["doc_id"], r["author_id"]) for r in stored(workspace)] == [
        ("x2", "bob"),
        ("x3", "alice"),
    ]


def test_an_id_stored_under_another_author_refuses_the_whole_file(tmp_path, capsys):
    ws = tmp_path / "ws"
    first = [{"doc_id": "x1", "author_id": "bob", "text": "BOB words"}]
    cli = ["--dataset", "d", "--workspace", str(ws)]
    assert main(["ingest", str(write_rows(tmp_path / "a.jsonl", first)), *cli]) == 0
    capsys.readouterr()
    # mallory's row reuses bob's stored id: rejecting it would let bob's earlier row decide
    # whether mallory's document is in the dataset, so the file is refused, carol included
    rows = [
        {"doc_id": "x2", "author_id": "carol", "text": "CAROL words"},
        {"doc_id": "x1", "author_id": "mallory", "text": "MALLORY guessed id"},
        {"doc_id": "x3", "author_id": "mallory", "text": "MALLORY own document"},
    ]
    assert main(["ingest", str(write_rows(tmp_path / "b.jsonl", rows)), *cli]) == 2
    out, err = capsys.readouterr()
    assert "doc_ids must be unique across authors" in err
    assert "1 doc_id of this file, in row 2, collides with other authors' rows stored" in err
    assert "nothing was stored" in err and "Traceback" not in err
    for secret in ("BOB", "CAROL", "MALLORY", "bob", "carol", "mallory"):
        assert secret not in out + err
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(ws)
    assert len(Catalog(workspace).batches("d")) == 1
    assert [(r["doc_id"], r["author_id"]) for r in stored(workspace)] == [("x1", "bob")]


def test_an_id_stored_under_the_same_author_rejects_only_that_row(tmp_path, workspace):
    first = [{"doc_id": "x1", "author_id": "bob", "text": "b"}]
    ingest(write_rows(tmp_path / "a.jsonl", first), "d", workspace)
    rows = [
        {"doc_id": "x1", "author_id": "bob", "text": "bob ingests his document again"},
        {"doc_id": "x1b", "author_id": "carol", "text": "carol's own document"},
        # a row without an author is rejected for that alone, whoever holds its id
        {"doc_id": "x1c", "author_id": None, "text": "no author"},
    ]
    result = ingest(write_rows(tmp_path / "b.jsonl", rows), "d", workspace)
    assert (result.n_rows, result.n_rejected) == (1, 2)
    assert {e["row"]: e["reason"] for e in result.examples} == {
        1: ALREADY_STORED,
        3: "author_id is missing (required: the dataset is author-level)",
    }
    assert [(r["doc_id"], r["author_id"]) for r in stored(workspace)] == [
        ("x1", "bob"),
        ("x1b", "carol"),
    ]


def test_document_level_a_repeated_doc_id_refuses_the_whole_file(tmp_path, capsys):
    from fdptm.storage.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    victim = [{"doc_id": "VID1", "text": "VICTIM words"}, {"doc_id": "VID2", "text": "OTHER"}]
    cli = ["--workspace", str(ws.root)]
    # alone, the file is stored whole
    path = write_rows(tmp_path / "a.jsonl", victim)
    assert main(["ingest", str(path), "--dataset", "alone", *cli]) == 0
    capsys.readouterr()
    # every row is its own unit: one added row that repeats VID1 must not take the victim's
    # row down with it, so the file is refused whole
    rows = [*victim, {"doc_id": "VID1", "text": "ATTACKER words"}]
    path = write_rows(tmp_path / "b.jsonl", rows)
    assert main(["ingest", str(path), "--dataset", "d", *cli]) == 2
    out, err = capsys.readouterr()
    assert "1 doc_id is repeated, in rows 1, 3" in err and "document-level" in err
    assert "nothing was stored" in err and "Traceback" not in err
    for secret in ("VICTIM", "OTHER", "ATTACKER", "VID1"):
        assert secret not in out + err
    assert absent(ws, "d")
    rows = [{"doc_id": i, "text": f"t{i}"} for i in (1, 2, 1, 2, 3)]
    with pytest.raises(BadInputError, match=r"2 doc_ids are repeated, in rows 1, 2, 3, 4\."):
        ingest(write_rows(tmp_path / "c.csv", rows), "d", ws)
    assert absent(ws, "d")


def test_document_level_an_id_already_stored_is_that_documents_unit(tmp_path, workspace):
    """At document level the unit key is ``document:<doc_id>``: a later row with a stored
    doc_id has the stored row's key, so it is that document again and only it is rejected."""
    ingest(write_rows(tmp_path / "a.jsonl", [{"doc_id": "x1", "text": "first"}]), "d", workspace)
    rows = [{"doc_id": "x1", "text": "again"}, {"doc_id": "x2", "text": "new"}]
    result = ingest(write_rows(tmp_path / "b.jsonl", rows), "d", workspace)
    assert (result.n_rows, result.n_rejected) == (1, 1)
    assert result.examples == [{"row": 1, "doc_id": "x1", "reason": ALREADY_STORED}]
    assert [(r["doc_id"], r["text"]) for r in stored(workspace)] == [("x1", "first"), ("x2", "new")]


@pytest.mark.parametrize("ext", ["jsonl", "csv"])
def test_a_row_without_author_is_rejected_never_merged_into_an_author(tmp_path, workspace, ext):
    rows = [
        {"doc_id": "p1", "author_id": "alice", "text": "alice writes"},
        {"doc_id": "alice", "author_id": None if ext == "jsonl" else "", "text": "nobody"},
        {"doc_id": "p3", "author_id": "  ", "text": "blank author"},
    ]
    result = ingest(write_rows(tmp_path / f"in.{ext}", rows), "d", workspace)
    assert (result.n_rows, result.n_rejected) == (1, 2)
    reasons = {e["row"]: e["reason"] for e in result.examples}
    assert reasons == {
        2: "author_id is missing (required: the dataset is author-level)",
        3: "author_id is missing (required: the dataset is author-level)",
    }
    assert [(r["doc_id"], r["author_id"]) for r in stored(workspace)] == [("p1", "alice")]


def test_document_level_unit_keys_never_equal_a_real_author_id(tmp_path, workspace):
    from fdptm.tasks.ingest import DOCUMENT_UNIT_PREFIX

    ingest(write_rows(tmp_path / "a.jsonl", [{"doc_id": "alice", "text": "x"}]), "docs", workspace)
    (row,) = stored(workspace, "docs")
    assert row["author_id"] == DOCUMENT_UNIT_PREFIX + "alice" != "alice"
    rows = [
        {"author_id": DOCUMENT_UNIT_PREFIX + "alice", "text": "forged key"},
        {"author_id": "alice", "text": "real author"},
    ]
    result = ingest(write_rows(tmp_path / "b.jsonl", rows), "people", workspace)
    assert (result.n_rows, result.n_rejected) == (1, 1)
    assert "reserved" in result.examples[0]["reason"]
    assert [r["author_id"] for r in stored(workspace, "people")] == ["alice"]


def test_a_damaged_stored_batch_refuses_the_next_ingest_and_stores_nothing(tmp_path, workspace):
    """The duplicate check reads stored batches through DuckDB only after their hashes."""
    first = ingest(
        write_rows(tmp_path / "a.jsonl", [{"doc_id": "x1", "text": "one"}]), "d", workspace
    )
    with open(first.batch_path, "r+b") as fh:
        fh.seek(8)
        fh.write(b"\0")
    with pytest.raises(BadInputError, match="does not match the hash recorded"):
        ingest(write_rows(tmp_path / "b.jsonl", [{"doc_id": "x2", "text": "two"}]), "d", workspace)
    assert [b["seq"] for b in Catalog(workspace).batches("d")] == [1]


def test_the_stored_ids_are_checked_against_many_batches(tmp_path, workspace):
    """A re-ingested id is found in whichever earlier batch holds it (the DuckDB semi-join
    over every stored file), and only the file's ids come back."""
    for b in range(5):
        rows = [{"doc_id": f"b{b}-{i}", "text": f"text {b} {i}"} for i in range(50)]
        ingest(write_rows(tmp_path / f"{b}.jsonl", rows), "d", workspace)
    again = [{"doc_id": "b0-3", "text": "x"}, {"doc_id": "b4-49", "text": "y"}]
    again.append({"doc_id": "new", "text": "z"})
    result = ingest(write_rows(tmp_path / "again.jsonl", again), "d", workspace)
    assert (result.n_rows, result.n_rejected) == (1, 2)
    assert {e["doc_id"] for e in result.examples} == {"b0-3", "b4-49"}
    assert all(ALREADY_STORED in e["reason"] for e in result.examples)
    assert (result.stats.dataset_documents, result.stats.dataset_authors) == (251, 251)


def test_a_workspace_path_with_glob_characters_is_read_as_it_is(tmp_path):
    """The stored batches are the files the catalog names, never a glob's matches: with a
    sibling ``ws1`` beside ``ws[1]``, an id stored in ``ws[1]`` under another author still
    refuses the file, and the counts are ``ws[1]``'s own."""
    from fdptm.storage.workspace import Workspace

    other = Workspace.resolve(tmp_path / "ws1")
    ingest(write_rows(tmp_path / "o.jsonl", [{"doc_id": f"o{i}", "text": "x"} for i in range(9)]),
           "d", other)  # fmt: skip
    ws = Workspace.resolve(tmp_path / "ws[1]")
    first = [{"doc_id": "x1", "author_id": "alice", "text": "alice words"}]
    ingest(write_rows(tmp_path / "a.jsonl", first), "d", ws)
    again = [{"doc_id": "x1", "author_id": "mallory", "text": "same id"}]
    with pytest.raises(BadInputError, match="collides with other authors' rows"):
        ingest(write_rows(tmp_path / "b.jsonl", again), "d", ws)
    new = [{"doc_id": "x2", "author_id": "bob", "text": "bob words"}]
    stats = ingest(write_rows(tmp_path / "c.jsonl", new), "d", ws).stats
    assert (stats.dataset_documents, stats.dataset_authors) == (2, 2)
