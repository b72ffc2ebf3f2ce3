"""Odd input files: a clear error (exit 2) that says what to do, no traceback, nothing stored,
and no row content in any message."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from test_ingest_columns import absent

from fdptm.cli import main
from fdptm.storage.workspace import Workspace
from fdptm.tasks.ingest import ingest

SECRET = "SECRETROW"
DEEP = 100_000


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("surrogate.jsonl", b'{"text": "fine"}\n{"text": "SECRETROW \\ud800 x"}\n', "row 2"),
        ("surrogate.json", b'{"text": ["fine", "SECRETROW \\udc00"]}', "row 2"),
        ("surrogate_list.json", b'[{"text": "SECRETROW \\ud83d"}]', "lone UTF-16 surrogate"),
        ("surrogate_id.jsonl", b'{"doc_id": "\\udfff", "text": "SECRETROW"}\n', "'doc_id'"),
        ("deep.json", b'{"text": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nested too deeply"),
        ("deep.jsonl", b'{"text": "ok"}\n{"text": ' + b"[" * DEEP + b"]" * DEEP + b"}\n", "line 2"),
        ("empty.jsonl", b"", "is empty"),
        ("empty.json", b"", "is empty"),
        ("empty.csv", b"", "is empty"),
        ("empty.parquet", b"", "is empty"),
        ("empty.txt", b"", "is empty"),
        ("blank.jsonl", b"\n  \n\n", "is empty"),
        ("nothing.json", b"[]", "holds no rows"),
        ("header_only.csv", b"doc_id,text\n", "holds no rows"),
        ("badrow.csv", b"doc_id,text\n1,fine\n2,SECRETROW,more,fields\n", "data row 2"),
        ("quote.csv", b'doc_id,text\n1,fine\n2,"SECRETROW never closed\n', "data row 2"),
        ("latin1.csv", b"doc_id,text\n1,SECRETROW caf\xe9\n", "not valid UTF-8"),
        ("dupcols.csv", b"text,text\nSECRETROW,b\n", "'text' twice"),
    ],
)
def test_odd_files_get_a_clear_error_and_store_nothing(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    ws = Workspace.resolve(tmp_path / "ws")
    assert main(["ingest", str(path), "--dataset", "d", "--workspace", str(ws.root)]) == 2
    out, err = capsys.readouterr()
    assert message in err, err
    assert err.startswith("fdptm: error:") and "Traceback" not in err
    assert SECRET not in out + err
    assert len(err) < 1000
    assert absent(ws)


def test_reasons_name_the_type_of_a_bad_value_never_the_value(tmp_path, workspace):
    rows = [
        {"doc_id": "ok", "text": "fine", "ts": "2024-01-01"},
        {"doc_id": [SECRET], "text": "list as id", "ts": None},
        {"doc_id": "t", "text": {"nested": SECRET}, "ts": None},
        {"doc_id": "u", "text": "bad time", "ts": SECRET},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = ingest(path, "d", workspace)
    assert (result.n_rows, result.n_rejected) == (1, 3)
    reasons = pq.read_table(result.rejects_path).column("reason").to_pylist()
    assert reasons == [
        "doc_id is not a non-empty string or integer (got list)",
        "text is not a string (got dict)",
        "ts is not an ISO 8601 timestamp or epoch seconds",
    ]
    assert SECRET not in json.dumps(result.examples) + json.dumps(result.reasons)


def test_a_literal_quote_in_an_unquoted_csv_field_is_text_not_an_open_quote(tmp_path, workspace):
    path = tmp_path / "in.csv"
    path.write_text('doc_id,text\n1,a 5" tall man\n2,"quoted, with ""inner"" quotes"\n')
    result = ingest(path, "d", workspace)
    assert (result.n_rows, result.n_rejected) == (2, 0)
    texts = pq.read_table(result.batch_path).column("text").to_pylist()
    assert texts == ['a 5" tall man', 'quoted, with "inner" quotes']
