"""The workspace's artifacts on an object store (issue 13, item 5; ``storage.objectstore``),
against a real S3-compatible server (moto's server mode, its own process on localhost) and
real ``fdptm`` processes sharing the session's Prefect API.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys

import pytest
from conftest import S3_CREDENTIALS, free_port, s3_filesystem

from fdptm.storage import objectstore
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

pytestmark = pytest.mark.usefixtures("prefect_harness")

RELEASE = ["release", "--dataset", "small", "--epsilon", "1000", "--delta", "1e-5"]
RELEASE += ["--topics", "2", "--iterations", "5", "--seed", "3", "--no-progress"]


def fdptm(workspace: Workspace, endpoint: str, *args: str) -> subprocess.CompletedProcess:
    """``fdptm ARGS`` in a child process with the test store's credentials and endpoint."""
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FDPTM_", "AWS_"))}
    env.update(S3_CREDENTIALS, AWS_ENDPOINT_URL=endpoint, PREFECT_API_URL=PREFECT_API_URL.value())
    return subprocess.run(
        [sys.executable, "-m", "fdptm.cli", *args, "--workspace", str(workspace.root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def bucket(s3_server, request) -> str:
    """A fresh bucket for one test; its URL with a prefix."""
    name = "art-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:12]
    s3_filesystem(s3_server).mkdir(name)
    return f"s3://{name}/team/ws"


def artifacts(workspace: Workspace) -> list[dict]:
    return Catalog(workspace).query("SELECT * FROM artifacts ORDER BY name")


def spent(workspace: Workspace, run_id: str) -> list[dict]:
    return Catalog(workspace).query(
        "SELECT stage, state FROM ledger WHERE run_id = ? AND state = 'spent'", [run_id]
    )


def run_ids(workspace: Workspace) -> list[str]:
    rows = Catalog(workspace).query(
        "SELECT run_id FROM runs WHERE kind = 'release' ORDER BY started_at"
    )
    return [r["run_id"] for r in rows]


def stored_copy(endpoint: str, bucket: str, rel: str) -> bytes:
    return s3_filesystem(endpoint).cat_file(f"{bucket.removeprefix('s3://')}/{rel}")


def test_a_release_is_mirrored_and_a_second_one_runs_from_the_store_alone(small, s3_server, bucket):
    done = fdptm(small, s3_server, "store", "--set", bucket)
    assert done.returncode == 0, done.stderr
    assert "1 artifact(s) uploaded" in done.stdout  # the batch ingested before the store
    first = fdptm(small, s3_server, *RELEASE)
    assert first.returncode == 0, first.stderr
    rows = artifacts(small)
    assert {r["stage"] for r in rows} >= {"ingest", "preprocess", "bounding", "train", "release"}
    for row in rows:  # every artifact is in the store, byte for byte
        assert row["stored_in"] == bucket, row["name"]
        copy = stored_copy(s3_server, bucket, row["path"])
        assert hashlib.sha256(copy).hexdigest() == row["sha256"], row["name"]

    shutil.rmtree(small.root / "datasets")  # the disk that held the private data is gone
    shutil.rmtree(small.root / "internal")
    second = fdptm(small, s3_server, *RELEASE)
    assert second.returncode == 0, second.stderr
    one, two = (small.release_dir(r) / "topic_word.parquet" for r in run_ids(small))
    assert one.read_bytes() == two.read_bytes()  # the same seeded release, from the store
    (batch,) = Catalog(small).batches("small")
    assert (small.root / batch["path"]).is_file()  # fetched back, hash checked

    shown = fdptm(small, s3_server, "store")
    assert f"store: {bucket}" in shown.stdout
    assert "0 not uploaded" in shown.stdout


def test_evict_frees_the_disk_and_every_reader_fetches_back(small, s3_server, bucket):
    assert fdptm(small, s3_server, "store", "--set", bucket).returncode == 0
    assert fdptm(small, s3_server, *RELEASE).returncode == 0
    done = fdptm(small, s3_server, "store", "--evict")
    assert done.returncode == 0, done.stderr
    internal = [r for r in artifacts(small) if r["visibility"] == "internal"]
    assert internal and not any((small.root / r["path"]).exists() for r in internal)
    (run_id,) = run_ids(small)
    assert (small.release_dir(run_id) / "manifest.json").is_file()  # releases stay

    counts = fdptm(small, s3_server, "partitions", "--dataset", "small", "--counts")
    assert counts.returncode == 0, counts.stderr
    assert "80" in counts.stdout  # the batch, fetched from the store
    again = fdptm(small, s3_server, *RELEASE)
    assert again.returncode == 0, again.stderr


def test_a_store_copy_that_does_not_match_is_refused_before_anything_is_spent(
    small, s3_server, bucket
):
    assert fdptm(small, s3_server, "store", "--set", bucket).returncode == 0
    assert fdptm(small, s3_server, "store", "--evict").returncode == 0
    (batch,) = Catalog(small).batches("small")
    key = f"{bucket.removeprefix('s3://')}/{batch['path']}"
    s3_filesystem(s3_server).pipe_file(key, b"not the batch")
    done = fdptm(small, s3_server, *RELEASE)
    assert done.returncode == 2
    assert "does not match the hash recorded in the catalog" in done.stderr
    assert "Traceback" not in done.stderr
    (run_id,) = run_ids(small)
    assert spent(small, run_id) == []
    assert not (small.root / batch["path"]).exists()  # the bad copy was not kept


def test_an_unreachable_store_fails_the_run_resumably_and_spends_once(small, s3_server, bucket):
    assert fdptm(small, s3_server, "store", "--set", bucket).returncode == 0
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    failed = fdptm(small, down, *RELEASE)
    assert failed.returncode == 1
    assert "could not upload" in failed.stderr and "fdptm store --sync" in failed.stderr
    assert "Traceback" not in failed.stderr
    (run_id,) = run_ids(small)
    pending = [r for r in artifacts(small) if r["stored_in"] is None]
    assert pending  # registered in the workspace, waiting for the store
    assert all((small.root / r["path"]).is_file() for r in pending)
    before = spent(small, run_id)

    resumed = fdptm(small, s3_server, "release", "--resume", run_id, "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert all(r["stored_in"] == bucket for r in artifacts(small))
    after = spent(small, run_id)
    assert len(after) == len({r["stage"] for r in after})  # no stage spent twice
    assert {r["stage"] for r in before} <= {r["stage"] for r in after}


def test_an_evicted_batch_behind_an_unreachable_store_spends_nothing(small, s3_server, bucket):
    assert fdptm(small, s3_server, "store", "--set", bucket).returncode == 0
    assert fdptm(small, s3_server, "store", "--evict").returncode == 0
    failed = fdptm(small, f"http://127.0.0.1:{free_port()}", *RELEASE)
    assert failed.returncode == 1
    assert "could not fetch" in failed.stderr
    (run_id,) = run_ids(small)
    assert spent(small, run_id) == []


def test_a_store_that_cannot_be_used_is_refused_and_nothing_changes(small, s3_server):
    missing = fdptm(small, s3_server, "store", "--set", "s3://no-such-bucket/ws")
    assert missing.returncode == 2
    assert "cannot be used" in missing.stderr and "nothing was changed" in missing.stderr
    secret = fdptm(small, s3_server, "store", "--set", "s3://key:secret@bucket/ws")
    assert secret.returncode == 2
    assert "secret" not in secret.stderr
    assert Catalog(small).query("SELECT * FROM settings") == []
    evict = fdptm(small, s3_server, "store", "--evict")
    assert evict.returncode == 2 and "no artifact store" in evict.stderr


def test_gc_removes_the_store_copies_of_what_it_collects(small, s3_server, bucket):
    assert fdptm(small, s3_server, "store", "--set", bucket).returncode == 0
    assert fdptm(small, s3_server, *RELEASE).returncode == 0
    before = {r["name"]: r["path"] for r in artifacts(small)}
    assert fdptm(small, s3_server, "gc").returncode == 0
    kept = {r["name"] for r in artifacts(small)}
    removed = set(before) - kept
    assert removed
    fs = s3_filesystem(s3_server)
    root = bucket.removeprefix("s3://")
    for name in removed:
        assert not fs.exists(f"{root}/{before[name]}"), name
    for name in kept:
        assert fs.exists(f"{root}/{before[name]}"), name


def test_unset_brings_every_artifact_back_first(small, s3_server, bucket):
    assert fdptm(small, s3_server, "store", "--set", bucket).returncode == 0
    assert fdptm(small, s3_server, "store", "--evict").returncode == 0
    done = fdptm(small, s3_server, "store", "--unset")
    assert done.returncode == 0, done.stderr
    assert all((small.root / r["path"]).is_file() for r in artifacts(small))
    assert all(r["stored_in"] is None for r in artifacts(small))
    assert "store: none" in done.stdout


def test_the_python_api_sets_shows_evicts_and_unsets(small, s3_server, bucket, monkeypatch):
    import fdptm

    for name, value in {**S3_CREDENTIALS, "AWS_ENDPOINT_URL": s3_server}.items():
        monkeypatch.setenv(name, value)
    ws = fdptm.Workspace(small.root)
    assert ws.store().store is None
    assert ws.set_store(bucket) == 1  # the batch
    assert ws.store() == objectstore.Status(bucket, 1, 1, 1)
    assert ws.evict()[0] == 1
    assert ws.store() == objectstore.Status(bucket, 1, 1, 0)
    assert ws.sync_store() == 0
    ws.set_store(None)
    assert ws.store() == objectstore.Status(None, 1, 0, 1)
