"""The workspace's artifacts on an object store (issue 13, item 5; ``storage.objectstore``),
against a real S3-compatible server (moto's server mode, its own process on localhost) and
real ``fdptm`` processes sharing the session's Prefect API (handed to the session's
``fdptm serve``: conftest ``served``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import S3_CREDENTIALS, SERVE_VARS, free_port, s3_filesystem

import fdptm as fdptm_api
from fdptm.errors import BadInputError
from fdptm.storage import objectstore
from fdptm.storage.artifacts import write_json
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

pytestmark = pytest.mark.usefixtures("prefect_harness", "served")

RELEASE = ["release", "--dataset", "small", "--epsilon", "1000", "--delta", "1e-5"]
RELEASE += ["--topics", "2", "--iterations", "5", "--seed", "3", "--no-progress"]


def fdptm(workspace: Workspace, endpoint: str, *args: str) -> subprocess.CompletedProcess:
    """``fdptm ARGS`` in a child process with the test store's credentials and endpoint.

    botocore tries each request once (``AWS_MAX_ATTEMPTS``): against an endpoint that is
    down, its default retries with back-off only make the test slower, not different."""
    from prefect.settings import PREFECT_API_URL

    env = {
        k: v
        for k, v in os.environ.items()
        if k in SERVE_VARS or not k.startswith(("FDPTM_", "AWS_"))
    }
    env.update(S3_CREDENTIALS, AWS_ENDPOINT_URL=endpoint, PREFECT_API_URL=PREFECT_API_URL.value())
    env.update(AWS_MAX_ATTEMPTS="1", AWS_RETRY_MODE="standard")
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


def test_a_release_is_mirrored_and_a_second_one_runs_from_the_store_alone(
    small, s3_server, bucket, monkeypatch
):
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

    for name, value in {**S3_CREDENTIALS, "AWS_ENDPOINT_URL": s3_server}.items():
        monkeypatch.setenv(name, value)
    (run_id,) = run_ids(small)
    url = f"{bucket}/releases/{run_id}"
    remote = fdptm_api.load_release(url)  # a consumer reads the release from the store
    here = fdptm_api.load_release(small.release_dir(run_id))
    assert remote.path == url and remote.manifest == here.manifest
    assert (remote.topic_word == here.topic_word).all() and remote.vocabulary == here.vocabulary
    fs = s3_filesystem(s3_server)
    copy = f"{bucket.removeprefix('s3://')}/copy"
    for name in ("manifest.json", "topic_word.parquet"):
        fs.pipe_file(f"{copy}/{name}", fs.cat_file(f"{url.removeprefix('s3://')}/{name}"))
    fs.pipe_file(f"{copy}/vocabulary.parquet", b"edited")
    with pytest.raises(BadInputError, match="does not match the sha256") as refused:
        fdptm_api.load_release(f"s3://{copy}")
    assert f"s3://{copy}/vocabulary.parquet" in str(refused.value)

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

    counts = fdptm(small, s3_server, "partitions", "--dataset", "small", "--counts", "--json")
    assert counts.returncode == 0, counts.stderr
    assert [r["documents"] for r in json.loads(counts.stdout)] == [80]  # fetched back
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
    assert "the artifact store's copy of" in done.stderr
    assert "does not match the hash recorded in the catalog" in done.stderr
    # the child inherits PREFECT_LOGGING_LEVEL=WARNING (conftest): Prefect's engine logs the
    # failed task, without a traceback for fdptm's own errors (flows.running._ClearErrors)
    assert "Task run" in done.stderr and "Traceback" not in done.stderr
    (run_id,) = run_ids(small)
    assert spent(small, run_id) == []
    assert not (small.root / batch["path"]).exists()  # the bad copy was not kept


def test_an_unreachable_store_leaves_uploads_pending_and_the_release_goes_on(
    small, s3_server, bucket
):
    """Uploads inside a run are best effort: a store that goes down never stops a stage
    between a mechanism and its output's registration (no double charge); the command
    warns and `fdptm store --sync` uploads later."""
    assert fdptm(small, s3_server, "store", "--set", bucket).returncode == 0
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = fdptm(small, down, *RELEASE)
    assert done.returncode == 0, done.stderr
    assert "fdptm: warning: could not upload" in done.stderr
    assert "fdptm store --sync" in done.stderr
    (run_id,) = run_ids(small)
    pending = [r for r in artifacts(small) if r["stored_in"] is None]
    assert {r["stage"] for r in pending} >= {"preprocess", "vocabulary", "train", "release"}
    assert all((small.root / r["path"]).is_file() for r in pending)
    entries = Catalog(small).query("SELECT stage, state FROM ledger WHERE run_id = ?", [run_id])
    assert not any("lost" in e["stage"] for e in entries)  # nothing ran twice

    synced = fdptm(small, s3_server, "store", "--sync")
    assert synced.returncode == 0, synced.stderr
    assert f"{len(pending)} artifact(s) uploaded" in synced.stdout
    assert all(r["stored_in"] == bucket for r in artifacts(small))
    assert fdptm(small, down, "store", "--sync").returncode == 0  # nothing left to upload


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
    bare = fdptm(small, s3_server, "store", "--set", "key:secret@bucket/ws")
    assert bare.returncode == 2 and "secret" not in bare.stderr
    folder = fdptm(small, s3_server, "store", "--set", f"file://{small.root.parent}/copy")
    assert folder.returncode == 2 and "not supported" in folder.stderr
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
    for name, value in {**S3_CREDENTIALS, "AWS_ENDPOINT_URL": s3_server}.items():
        monkeypatch.setenv(name, value)
    ws = fdptm_api.Workspace(small.root)
    assert ws.store().store is None
    assert ws.set_store(bucket) == 1  # the batch
    assert ws.store() == objectstore.Status(bucket, 1, 1, 1)
    catalog = Catalog(small)
    (row,) = artifacts(small)
    args = [row["name"], row["run_id"], row["stage"], row["path"], "0" * 64, "internal"]
    catalog.register_artifact(*args)  # a new version under the same name: not uploaded
    assert artifacts(small)[0]["stored_in"] is None
    catalog.register_artifact(*args[:4], row["sha256"], "internal", row["n_rows"])
    assert ws.sync_store() == 1
    assert ws.evict()[0] == 1
    assert ws.store() == objectstore.Status(bucket, 1, 1, 0)
    assert ws.sync_store() == 0
    ws.set_store(None)
    assert ws.store() == objectstore.Status(None, 1, 0, 1)


def test_sync_uploads_every_intact_artifact_before_naming_a_lost_one(
    small, s3_server, bucket, monkeypatch
):
    """One pending artifact whose file is gone never holds back the others' uploads; on a
    workspace's own catalog it is named as lost."""
    for name, value in {**S3_CREDENTIALS, "AWS_ENDPOINT_URL": s3_server}.items():
        monkeypatch.setenv(name, value)
    objectstore.set_store(small, bucket)
    catalog = Catalog(small)
    for name in ("a-lost", "b-kept"):
        rel = f"internal/extra/{name}.json"
        sha = write_json({"name": name}, small.root / rel)
        catalog.register_artifact(f"extra/{name}", "none", "test", rel, sha, "internal")
    (small.root / "internal/extra/a-lost.json").unlink()
    with pytest.raises(BadInputError, match=r"a-lost\.json.*uploaded: 1"):
        objectstore.sync(small)
    stored = {r["name"]: r["stored_in"] for r in artifacts(small)}
    assert stored["extra/b-kept"] == bucket and stored["extra/a-lost"] is None
    assert json.loads(stored_copy(s3_server, bucket, "internal/extra/b-kept.json")) == {
        "name": "b-kept"
    }
    assert "a-lost.json" in objectstore.settle(small)
