"""Ingest: every format, derived ids, validation with reasons, nothing lost, clear errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fdptm.errors import BadInputError
from fdptm.storage.catalog import Catalog
from fdptm.tasks.ingest import DOCUMENT_UNIT_PREFIX, NOT_UNIQUE, ingest


def _rows(workspace, dataset="d"):
    catalog = Catalog(workspace)
    return [pq.read_table(workspace.root / b["path"]) for b in catalog.batches(dataset)]


def test_pheme_json(workspace, pheme_raw):
    result = ingest(pheme_raw, "pheme", workspace)
    assert (result.n_rows, result.n_rejected, result.seq) == (5802, 0, 1)
    (table,) = _rows(workspace, "pheme")
    assert table.column_names == ["doc_id", "text", "author_id", "ts"]
    ids = table.column("doc_id").to_pylist()
    assert len(set(ids)) == 5802
    # each document its own unit, keyed in a namespace no real author id may use
    assert table.column("author_id").to_pylist() == [DOCUMENT_UNIT_PREFIX + i for i in ids]
    batch = Catalog(workspace).batches("pheme")[0]
    assert batch["has_author_ids"] is False and len(batch["sha256"]) == 64
    assert Catalog(workspace).dataset("pheme")["unit"] == "document"


def test_reingesting_the_same_file_is_caught(workspace, pheme_raw):
    ingest(pheme_raw, "pheme", workspace)
    with pytest.raises(BadInputError, match="already ingested as batch 1 of dataset 'pheme'"):
        ingest(pheme_raw, "pheme", workspace)
    assert len(Catalog(workspace).batches("pheme")) == 1


def test_derived_ids_are_keyed_per_workspace_and_distinguish_repeats(tmp_path, workspace):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"text": ["same words here", "same words here", "other"]}))
    ingest(path, "d", workspace)
    ids = _rows(workspace)[0].column("doc_id").to_pylist()
    assert len(set(ids)) == 3
    ingest(path, "e", workspace)
    assert _rows(workspace, "e")[0].column("doc_id").to_pylist() == ids
    from fdptm.storage.workspace import Workspace

    other = Workspace.resolve(tmp_path / "ws2")
    ingest(path, "d", other)
    assert not set(_rows(other)[0].column("doc_id").to_pylist()) & set(ids)


def test_all_formats(tmp_path, workspace):
    rows = [
        {
            "doc_id": "x1",
            "text": "alpha beta gamma",
            "author_id": "u1",
            "ts": "2024-01-02T03:04:05Z",
        },
        {"doc_id": "x2", "text": "delta epsilon", "author_id": "u2", "ts": "2024-02-01"},
    ]
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "r.csv").write_text(
        "doc_id,text,author_id,ts\n"
        + "\n".join(f'{r["doc_id"]}c,"{r["text"]}",{r["author_id"]},{r["ts"]}' for r in rows)
        + "\n"
    )
    pq.write_table(
        pa.table({"doc_id": ["p1", "p2"], "text": ["one two three", "four five six"]}),
        tmp_path / "r.parquet",
    )
    (tmp_path / "r.json").write_text(json.dumps([{"text": "listed object", "author_id": 7}]))
    (tmp_path / "r.txt").write_text("first line doc\nsecond line doc\n")
    # files with authors go to an author-level dataset, files without to a document-level
    # one; the untimed batch first (once a dataset has times, every later batch needs them)
    counts = [
        ingest(tmp_path / f"r.{ext}", dataset, workspace).n_rows
        for ext, dataset in (
            ("json", "d"),
            ("jsonl", "d"),
            ("csv", "d"),
            ("parquet", "plain"),
            ("txt", "plain"),
        )
    ]
    assert counts == [1, 2, 2, 2, 2]
    tables = _rows(workspace)
    assert tables[1].column("ts").to_pylist()[0].isoformat() == "2024-01-02T03:04:05+00:00"
    assert tables[1].column("author_id").to_pylist() == ["u1", "u2"]
    assert tables[0].column("author_id").to_pylist() == ["7"]
    assert Catalog(workspace).batches("d")[0]["has_author_ids"] is True
    assert [b["timed"] for b in Catalog(workspace).batches("d")] == [False, True, True]
    plain = _rows(workspace, "plain")
    assert plain[0].column("doc_id").to_pylist() == ["p1", "p2"]
    assert Catalog(workspace).batches("plain")[0]["has_author_ids"] is False


def test_bad_rows_are_reported_with_reasons_not_dropped(tmp_path, workspace):
    rows = [
        {"doc_id": "ok", "text": "fine text", "ts": "2024-01-01"},
        {"doc_id": "a", "text": "duplicate id"},
        {"doc_id": "a", "text": "duplicate id again"},
        {"doc_id": "b", "text": "   "},
        {"doc_id": "c", "text": 42},
        {"doc_id": "d", "text": "bad time", "ts": "yesterday"},
        {"doc_id": "e", "text": "x" * 101},
        {"doc_id": None, "text": "no id"},
        {"doc_id": "f", "text": None},
    ]
    # one author's: a repeated id is rejected only within one author (at document level
    # every row is its own unit, and a repeated id refuses the whole file)
    path = tmp_path / "bad.jsonl"
    path.write_text(
        "\n".join(json.dumps({"ts": "2024-01-01", **r, "author_id": "u1"}) for r in rows)
    )
    result = ingest(path, "d", workspace, max_text_chars=100)
    assert (result.n_rows, result.n_rejected) == (1, 8)
    rejects = pq.read_table(result.rejects_path).to_pylist()
    reasons = {r["row"]: r["reason"] for r in rejects}
    assert reasons == {
        2: NOT_UNIQUE,
        3: NOT_UNIQUE,
        4: "text is empty or whitespace only",
        5: "text is not a string (got int)",
        6: "ts is not an ISO 8601 timestamp or epoch seconds",
        7: "text is longer than 100 characters",
        8: "doc_id is missing",
        9: "text is missing",
    }
    assert sum(result.reasons.values()) == 8
    (table,) = _rows(workspace)
    assert table.column("doc_id").to_pylist() == ["ok"]


def test_a_file_with_no_valid_row_stores_nothing(tmp_path, workspace):
    path = tmp_path / "empty_texts.json"
    path.write_text(json.dumps({"text": ["", "  "]}))
    with pytest.raises(BadInputError, match="no valid row"):
        ingest(path, "d", workspace)
    assert Catalog(workspace).batches("d") == []


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("latin1.txt", "caf\xe9 au lait".encode("latin-1"), "not valid UTF-8"),
        ("empty.json", b'{"text": []}', "holds no rows"),
        ("broken.parquet", b"PAR1 not really parquet", "not a readable Parquet"),
        ("nokey.json", b'{"body": ["x"]}', "expected"),
        ("data.xml", b"<x/>", "cannot tell the format"),
        ("bad.jsonl", b'{"text": "ok"}\n{oops\n', "line 2 is not valid JSON"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path, workspace, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(BadInputError, match=message):
        ingest(path, "d", workspace)


def test_missing_file_and_bad_dataset_name(tmp_path, workspace):
    with pytest.raises(BadInputError, match="does not exist"):
        ingest(tmp_path / "nope.json", "d", workspace)
    with pytest.raises(BadInputError, match="invalid dataset name"):
        ingest(tmp_path / "nope.json", "../etc", workspace)


def test_privacy_unit_is_declared_not_inferred_from_rows(tmp_path, workspace):
    with_ids = tmp_path / "a.jsonl"
    with_ids.write_text(
        json.dumps({"text": "some text here", "author_id": "u1"})
        + "\n"
        + json.dumps({"text": "an author-less row", "author_id": None})
        + "\n"
    )
    plain = tmp_path / "b.json"
    plain.write_text(json.dumps({"text": ["more text here"]}))
    ingest(plain, "docs", workspace)
    assert Catalog(workspace).dataset("docs")["unit"] == "document"
    with pytest.raises(BadInputError, match=r"document-level .* has an author column"):
        ingest(with_ids, "docs", workspace)
    with pytest.raises(BadInputError, match="unit never changes"):
        ingest(plain, "docs", workspace, unit="author")
    # an author_id column makes a new dataset author-level, whatever its rows hold; a row
    # without an author is rejected there, never made an author of its own
    result = ingest(with_ids, "people", workspace)
    assert Catalog(workspace).dataset("people")["unit"] == "author"
    assert (result.n_rows, result.n_rejected) == (1, 1)
    # no author column: no author-level dataset, and a refused ingest creates no dataset
    with pytest.raises(BadInputError, match="no author column"):
        ingest(plain, "declared", workspace, unit="author")
    assert Catalog(workspace).dataset("declared") is None
