"""Column mapping at ingest: nothing is dropped silently, no author-level label without authors.

Real files in every tabular format, a real DuckDB catalog in a temporary workspace.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fdptm.cli import main
from fdptm.errors import BadInputError
from fdptm.storage.catalog import Catalog
from fdptm.tasks.ingest import ingest

SECRET = "SECRETVALUE"


def write_rows(path: Path, rows: list[dict]) -> Path:
    """``rows`` in the format ``path``'s extension names (CSV cells as strings)."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=names)
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        raise ValueError(path.suffix)
    return path


def absent(workspace, dataset: str = "d") -> bool:
    """No dataset ``dataset`` (and no catalog at all when the ingest failed before making
    one)."""
    return not workspace.catalog_path.exists() or Catalog(workspace).dataset(dataset) is None


def stored(workspace, dataset: str = "d") -> list[dict]:
    batches = Catalog(workspace).batches(dataset)
    return [r for b in batches for r in pq.read_table(workspace.root / b["path"]).to_pylist()]


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet", "json"])
def test_mapped_columns_are_read_and_the_rest_is_named_in_warnings(tmp_path, workspace, ext):
    rows = [
        {"post": "p1", "body": "alpha beta", "user": "u1", "when": "2024-01-02T03:04:05Z"},
        {"post": "p2", "body": "gamma delta", "user": "u1", "when": "2024-01-03T00:00:00Z"},
        {"post": "p3", "body": "epsilon zeta", "user": "u2", "when": "2024-01-04T00:00:00Z"},
    ]
    for r in rows:
        r["extra"] = SECRET
    path = write_rows(tmp_path / f"in.{ext}", rows)
    result = ingest(
        path,
        "d",
        workspace,
        text_column="body",
        id_column="post",
        author_column="user",
        time_column="when",
    )
    assert (result.n_rows, result.n_rejected) == (3, 0)
    table = stored(workspace)
    assert [r["doc_id"] for r in table] == ["p1", "p2", "p3"]
    assert [r["author_id"] for r in table] == ["u1", "u1", "u2"]
    assert [r["text"] for r in table] == ["alpha beta", "gamma delta", "epsilon zeta"]
    assert table[0]["ts"].isoformat() == "2024-01-02T03:04:05+00:00"
    assert Catalog(workspace).dataset("d")["unit"] == "author"
    assert Catalog(workspace).batches("d")[0]["has_author_ids"] is True
    (warning,) = result.warnings
    assert "'extra'" in warning and SECRET not in warning


@pytest.mark.parametrize("name", ["author", "user", "User_ID", "sender"])
def test_a_column_named_for_authors_makes_an_author_level_dataset(tmp_path, workspace, name):
    """Issue 27: a file with authors never makes a document-level dataset by omission."""
    rows = [{"text": "alpha beta", name: "alice"}, {"text": "gamma delta", name: "alice"}]
    path = write_rows(tmp_path / "in.jsonl", rows)
    result = ingest(path, "d", workspace)
    assert Catalog(workspace).dataset("d")["unit"] == "author"
    assert {r["author_id"] for r in stored(workspace, "d")} == {"alice"}
    (note,) = result.warnings
    assert f"'{name}' read as the author column" in note and "--unit document" in note
    assert "alice" not in note
    # --unit document says every document is its own unit: the column is then ignored
    result = ingest(path, "docs", workspace, unit="document")
    assert Catalog(workspace).dataset("docs")["unit"] == "document"
    (warning,) = result.warnings
    assert f"'{name}'" in warning and "ignored" in warning and "alice" not in warning
    # explicitly mapped: author level, nothing to say
    result = ingest(path, "people", workspace, author_column=name)
    assert result.warnings == []
    assert Catalog(workspace).dataset("people")["unit"] == "author"


@pytest.mark.parametrize("name", ["writer", "from"])
def test_an_author_like_column_refuses_a_new_dataset_until_the_unit_is_said(
    tmp_path, workspace, name
):
    """``from`` is often a date or an address: never read as the author by its name alone."""
    rows = [{"text": "alpha beta", name: "alice"}, {"text": "gamma", name: "bob"}]
    path = write_rows(tmp_path / "in.jsonl", rows)
    with pytest.raises(BadInputError, match="--unit document") as err:
        ingest(path, "d", workspace)
    assert f"'{name}'" in str(err.value) and "alice" not in str(err.value)
    with pytest.raises(BadInputError, match="no author column") as err:
        ingest(path, "d", workspace, unit="author")
    assert "--author-column" in str(err.value) and "alice" not in str(err.value)
    assert absent(workspace)
    assert ingest(path, "d", workspace, unit="document").n_rows == 2
    assert Catalog(workspace).dataset("d")["unit"] == "document"
    ingest(path, "w", workspace, author_column=name)
    assert Catalog(workspace).dataset("w")["unit"] == "author"


def test_a_top_level_author_field_of_a_json_file_refuses_a_new_dataset(tmp_path, workspace):
    path = tmp_path / "in.json"
    path.write_text('{"text": ["alpha beta", "gamma delta"], "author": "alice"}')
    with pytest.raises(BadInputError, match="--unit document") as err:
        ingest(path, "d", workspace)
    assert "'author'" in str(err.value) and "alice" not in str(err.value)
    assert absent(workspace)


def test_two_columns_named_for_authors_are_refused_until_one_is_chosen(tmp_path, workspace):
    rows = [{"text": "alpha beta", "user": "alice", "sender": "bob"}]
    path = write_rows(tmp_path / "in.jsonl", rows)
    with pytest.raises(BadInputError, match="--author-column") as err:
        ingest(path, "d", workspace)
    assert "'user'" in str(err.value) and "'sender'" in str(err.value)
    assert absent(workspace)
    ingest(path, "d", workspace, author_column="sender")
    assert {r["author_id"] for r in stored(workspace, "d")} == {"bob"}


def test_a_mapped_column_missing_from_the_file_names_the_columns_found(tmp_path, workspace):
    path = write_rows(tmp_path / "in.csv", [{"text": "alpha", "user": "u1", "when": "2024"}])
    with pytest.raises(BadInputError, match="'usr'") as err:
        ingest(path, "d", workspace, author_column="usr")
    message = str(err.value)
    assert "'text'" in message and "'user'" in message and "'when'" in message
    with pytest.raises(BadInputError, match="'body'"):
        ingest(path, "d", workspace, text_column="body")
    with pytest.raises(BadInputError, match="--text-column"):
        ingest(write_rows(tmp_path / "b.jsonl", [{"body": "x"}]), "d", workspace)
    with pytest.raises(BadInputError, match="more than one"):
        ingest(path, "d", workspace, id_column="user", author_column="user")
    assert absent(workspace)


def test_an_author_level_dataset_refuses_a_file_without_authors(tmp_path, workspace):
    ingest(write_rows(tmp_path / "a.jsonl", [{"text": "alpha", "author_id": "u1"}]), "d", workspace)
    plain = write_rows(tmp_path / "b.jsonl", [{"text": "beta"}])
    with pytest.raises(BadInputError, match="author-level"):
        ingest(plain, "d", workspace)
    assert len(Catalog(workspace).batches("d")) == 1


def test_cli_maps_columns_warns_on_stderr_and_prints_internal_counts(tmp_path, capsys):
    ws = ["--workspace", str(tmp_path / "ws")]
    heavy = [{"user": "heavy", "body": f"text number {i}", "note": SECRET} for i in range(103)]
    first = [*heavy, {"user": "u1", "body": "one", "note": SECRET}]
    first.append({"user": "u2", "body": "two", "note": SECRET})
    path = write_rows(tmp_path / "a.jsonl", first)
    args = ["--text-column", "body", "--author-column", "user", *ws]
    assert main(["ingest", str(path), "--dataset", "d", *args]) == 0
    out, err = capsys.readouterr()
    assert "'note'" in err and "warning" in err and SECRET not in err + out
    assert "internal, not DP" in out
    assert "105 documents by 3 distinct authors (3 new)" in out
    assert "dataset 'd' now holds 105 documents by 3 authors" in out
    assert "would drop 3 documents (of 1 author)" in out

    second = [{"user": "heavy", "body": f"more {i}"} for i in range(2)]
    second.append({"user": "u3", "body": "three"})
    path = write_rows(tmp_path / "b.jsonl", second)
    assert main(["ingest", str(path), "--dataset", "d", *args]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "3 documents by 2 distinct authors (1 new)" in out
    assert "now holds 108 documents by 4 authors" in out
    assert "would drop 5 documents (of 1 author)" in out


def test_python_api_returns_the_internal_counts(tmp_path, workspace):
    from fdptm.tasks.bounding import Bounds

    cap = Bounds().max_docs_per_author
    rows = [{"author_id": "a", "text": f"doc {i}"} for i in range(cap + 2)]
    rows += [{"author_id": "b", "text": "other"}]
    result = ingest(write_rows(tmp_path / "a.parquet", rows), "d", workspace)
    s = result.stats
    assert (s.batch_documents, s.batch_authors, s.new_authors) == (cap + 3, 2, 2)
    assert (s.dataset_documents, s.dataset_authors) == (cap + 3, 2)
    assert (s.max_docs_per_author, s.bounding_drops, s.bounded_authors) == (cap, 2, 1)


def test_a_json_field_that_is_not_a_column_is_named_in_a_warning(tmp_path, workspace):
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"text": ["alpha", "beta"], "exported_by": SECRET}))
    result = ingest(path, "d", workspace)
    assert result.n_rows == 2
    (warning,) = result.warnings
    assert "'exported_by'" in warning and SECRET not in warning
