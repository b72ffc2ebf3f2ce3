"""Artifact writes: private modes, and a full disk that loses nothing (a real small tmpfs).

The disk-full test mounts a 4 MB tmpfs in a private mount namespace (``unshare -m``, as
root; the mount disappears with the process), fills it, and runs the real writers there.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from fdptm.storage.artifacts import file_sha256, write_json, write_parquet


def in_mount_namespace(setup: str, code: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python inside a private mount namespace after ``setup``."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux unshare to mount a private file system")
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", "mount -t tmpfs x /mnt"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount in a private namespace here: {probe.stderr.strip()}")
    return subprocess.run(
        [
            *("unshare", "-m", "--propagation", "private", "--", "sh", "-c"),
            f'{setup} && exec "$@"',
            *("sh", sys.executable, "-c", code, *args),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


DISK_FULL = r"""
import json, os, sys
from pathlib import Path

import pyarrow as pa

from fdptm.errors import FdptmError
from fdptm.storage.artifacts import file_sha256, write_json, write_parquet
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

mount = Path(sys.argv[1])
root = mount / "ws"
workspace = Workspace.resolve(root).create()
catalog = Catalog(workspace)
catalog.ensure_dataset("d", "document")
parquet = root / "datasets" / "d" / "tokens" / "t.parquet"
report = root / "internal" / "runs" / "r" / "report.json"
old = {"parquet": write_parquet(pa.table({"a": [1, 2, 3]}), parquet),
       "json": write_json({"version": 1}, report)}

with open(mount / "filler", "wb") as fh:
    try:
        while True:
            fh.write(os.urandom(1 << 16))
            fh.flush()
    except OSError:
        pass

def attempt(fn):
    try:
        fn()
        return ["no error"]
    except FdptmError as exc:
        return [type(exc).__name__, exc.exit_code, str(exc)]
    except Exception as exc:
        return ["untranslated", type(exc).__name__, str(exc)]

big = pa.table({"t": [os.urandom(256).hex() for _ in range(8000)]})
out = {
    "parquet": attempt(lambda: write_parquet(big, parquet)),
    "json": attempt(lambda: write_json({"rows": ["x" * 1000] * 3000}, report)),
    "catalog": attempt(lambda: catalog.execute(
        "INSERT INTO runs (run_id, dataset, kind, status, params, code_version, started_at)"
        " VALUES ('r1', 'd', 'x', 'running', ?, 'v', now())",
        [json.dumps({"pad": os.urandom(400_000).hex()})],
    )),
}
out["intact"] = {"parquet": file_sha256(parquet) == old["parquet"],
                 "json": file_sha256(report) == old["json"]}
out["leftovers"] = sorted(str(p.relative_to(root)) for p in root.rglob("*tmp*"))
os.remove(mount / "filler")
out["after"] = {"datasets": [r["name"] for r in catalog.query("SELECT name FROM datasets")],
                "runs": catalog.query("SELECT count(*) AS n FROM runs")[0]["n"]}
catalog.execute(
    "INSERT INTO runs (run_id, dataset, kind, status, params, code_version, started_at)"
    " VALUES ('r2', 'd', 'x', 'running', '{}', 'v', now())"
)
out["written_after"] = catalog.query("SELECT count(*) AS n FROM runs")[0]["n"]
print(json.dumps(out))
"""


def test_a_full_disk_keeps_the_previous_files_and_says_so(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    setup = f"mount -t tmpfs -o size=4m tmpfs {shlex.quote(str(mount))}"
    done = in_mount_namespace(setup, DISK_FULL, str(mount))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for what in ("parquet", "json", "catalog"):
        name, code, message = out[what]
        assert (name, code) == ("DiskFullError", 2), out[what]
        assert "no space left" in message and "nothing stored was lost" in message.lower()
    assert "t.parquet" in out["parquet"][2] and "report.json" in out["json"][2]
    assert "catalog.duckdb" in out["catalog"][2] and "rolled back" in out["catalog"][2]
    assert out["intact"] == {"parquet": True, "json": True}
    assert out["leftovers"] == []  # every temporary file was removed
    assert out["after"] == {"datasets": ["d"], "runs": 0}  # the failed insert left no trace
    assert out["written_after"] == 1  # once space is freed, the catalog takes writes again


def test_writes_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        table_sha = write_parquet(pa.table({"a": [1]}), tmp_path / "new" / "deep" / "t.parquet")
        write_json({"a": 1}, tmp_path / "new" / "m.json")
    finally:
        os.umask(old)
    assert file_sha256(tmp_path / "new" / "deep" / "t.parquet") == table_sha
    for path in (tmp_path / "new" / "deep" / "t.parquet", tmp_path / "new" / "m.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for path in (tmp_path / "new", tmp_path / "new" / "deep"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_a_rewrite_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.json"
    first = write_json({"v": 1}, path)
    second = write_json({"v": 2}, path)
    assert first != second == file_sha256(path)
    assert json.loads(path.read_text()) == {"v": 2}
    assert [p.name for p in Path(tmp_path).iterdir()] == ["a.json"]
