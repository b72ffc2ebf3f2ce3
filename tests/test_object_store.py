"""Input files on an object store (issue 13, item 5): ``fdptm ingest s3://...`` against a
real S3-compatible server (moto's server mode, its own process on localhost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import S3_CREDENTIALS, free_port, s3_filesystem

from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace
from fdptm.tasks.sources import is_url, shown

ROWS = [{"doc_id": f"d{i}", "text": f"apples and pears number {i}"} for i in range(30)]


@pytest.fixture(scope="module")
def endpoint(s3_server):
    """The test S3 server, with a bucket holding a JSONL file and a Latin-1 file."""
    fs = s3_filesystem(s3_server)
    fs.mkdir("corpus")
    with fs.open("corpus/in/tweets.jsonl", "wb") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in ROWS).encode())
    with fs.open("corpus/in/latin1.txt", "wb") as fh:
        fh.write("caf\xe9 au lait\n".encode("latin-1"))
    return s3_server


def _ingest(args: list[str], tmp_path: Path, endpoint: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FDPTM_", "PREFECT_"))}
    env.update(S3_CREDENTIALS, AWS_ENDPOINT_URL=endpoint, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "fdptm.cli", "ingest", *args, "--workspace", str(tmp_path / "ws")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_an_s3_file_is_ingested_like_the_same_local_file(tmp_path, endpoint):
    done = _ingest(["s3://corpus/in/tweets.jsonl", "--dataset", "d"], tmp_path, endpoint)
    assert done.returncode == 0, done.stderr
    local = tmp_path / "tweets.jsonl"
    local.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    again = _ingest([str(local), "--dataset", "d"], tmp_path, endpoint)
    assert again.returncode == 2  # the same bytes: refused as already ingested
    assert "already ingested as batch 1" in again.stderr
    (batch,) = Catalog(Workspace.resolve(tmp_path / "ws")).batches("d")
    assert batch["source"] == "s3://corpus/in/tweets.jsonl"
    assert batch["n_rows"] == len(ROWS)
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary copy is gone


def test_a_missing_object_is_an_input_error_and_creates_nothing(tmp_path, endpoint):
    done = _ingest(["s3://corpus/in/nothing.jsonl", "--dataset", "d"], tmp_path, endpoint)
    assert done.returncode == 2
    assert "input file s3://corpus/in/nothing.jsonl does not exist" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "ws" / "catalog.duckdb").exists()


def test_an_error_in_the_object_names_the_url_not_the_temporary_copy(tmp_path, endpoint):
    done = _ingest(["s3://corpus/in/latin1.txt", "--dataset", "d"], tmp_path, endpoint)
    assert done.returncode == 2
    assert "s3://corpus/in/latin1.txt is not valid UTF-8" in done.stderr
    assert "fdptm-input-" not in done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_store_that_refuses_the_credentials_is_an_input_error(tmp_path, endpoint):
    port = free_port()  # nothing listens there
    done = _ingest(
        ["s3://corpus/in/tweets.jsonl", "--dataset", "d"], tmp_path, f"http://127.0.0.1:{port}"
    )
    assert done.returncode == 2
    assert "could not read s3://corpus/in/tweets.jsonl" in done.stderr
    assert "Traceback" not in done.stderr


def test_urls_are_recorded_without_credentials():
    assert shown("s3://key:secret@bucket/a/b.jsonl?X-Amz-Signature=abc") == "s3://bucket/a/b.jsonl"
    assert shown("https://user@host.example/f.csv#x") == "https://host.example/f.csv"
    assert is_url("s3://bucket/x.parquet") and is_url("gcs://b/x.csv")
    assert not is_url("/data/x.parquet") and not is_url("file:///data/x.parquet")
    assert not is_url("relative/name.jsonl")
