"""The workspace: private modes, a warning for open ones, the secret key, read-only use.

Read-only workspaces are real: a read-only bind mount in a private mount namespace
(``unshare -m``), and a workspace owned by another user, reached by root with the
capabilities that bypass file permissions dropped (``setpriv --bounding-set``), since
plain ``chmod`` does not stop root.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import warnings

import pyarrow as pa
import pytest
from test_artifacts import in_mount_namespace

from fdptm.errors import FdptmError
from fdptm.privacy.adjacency import Adjacency
from fdptm.storage.artifacts import write_parquet
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.ledger import Ledger
from fdptm.storage.workspace import Workspace, WorkspacePermissionWarning


def _modes(root) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        out[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return out


def _populated(workspace: Workspace) -> Catalog:
    """A dataset with a cap and a batch file, like after `fdptm ingest` and `budget --cap`."""
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset("d", "document")
    Ledger(catalog).set_cap("d", 3.0, 1e-5, Adjacency.DOCUMENT)
    rel = "datasets/d/batches/batch=000001/part-0.parquet"
    sha = write_parquet(pa.table({"doc_id": ["1"], "text": ["raw words"]}), workspace.root / rel)
    catalog.execute(
        "INSERT INTO batches VALUES"
        " ('d', 1, 'ingest-x', 'src', 'h', ?, ?, 1, 0, NULL, false, ?, false, NULL, NULL)",
        [rel, sha, now()],
    )
    return catalog


def test_a_new_workspace_is_private(workspace):
    old = os.umask(0o022)
    try:
        _populated(workspace)
        workspace.commitment("ab" * 32)
    finally:
        os.umask(old)
    Catalog(workspace).release_idle()  # the WAL checkpointed away, not mid-listing
    modes = _modes(workspace.root)
    assert {"catalog.duckdb", "catalog.lock", "secret.key"} <= set(modes)
    for name, mode in modes.items():
        is_dir = (workspace.root / name).is_dir()
        assert mode == (0o700 if is_dir else 0o600), (name, oct(mode))


def test_an_open_workspace_is_used_with_one_warning(workspace):
    workspace.root.mkdir(mode=0o755)
    os.chmod(workspace.root, 0o755)  # as a shared or older workspace would be
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _populated(workspace)
        Workspace.resolve(workspace.root).require()
        Catalog(workspace).batches("d")
    ours = [w for w in caught if issubclass(w.category, WorkspacePermissionWarning)]
    assert len(ours) == 1
    message = str(ours[0].message)
    assert "mode 0755" in message and f"chmod -R go-rwx {workspace.root}" in message
    assert stat.S_IMODE(workspace.root.stat().st_mode) == 0o755  # warned, not changed


def test_a_missing_key_is_refused_once_a_release_exists(workspace):
    catalog = _populated(workspace)
    manifest = workspace.release_dir("run-1") / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{}")
    with pytest.raises(FdptmError, match=r"Restore secret\.key from a backup"):
        workspace.commitment("ab" * 32)
    shutil.rmtree(workspace.root / "releases" / "run-1")  # published elsewhere, row remains
    catalog.execute(
        "INSERT INTO releases VALUES ('run-1', 'd', 'releases/run-1', 1, 0, 'document', 'h', ?)",
        [now()],
    )
    with pytest.raises(FdptmError, match=r"Restore secret\.key from a backup"):
        workspace.commitment("ab" * 32)
    assert not (workspace.root / "secret.key").exists()


def test_the_key_is_created_before_the_first_release(workspace):
    _populated(workspace)
    first = workspace.commitment("ab" * 32)
    assert first == workspace.commitment("ab" * 32)
    assert stat.S_IMODE((workspace.root / "secret.key").stat().st_mode) == 0o600


READ_ONLY = r"""
import contextlib, io, json, sys

import pyarrow as pa

from fdptm.cli import main
from fdptm.errors import FdptmError
from fdptm.storage.artifacts import write_parquet
from fdptm.storage.workspace import Workspace

root = sys.argv[1]
out = {}

def cli(*args):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main([*args, "--workspace", root])
        except Exception as exc:
            code, stderr = "untranslated", io.StringIO(f"{type(exc).__name__}: {exc}")
    return [code, stdout.getvalue(), stderr.getvalue()]

def attempt(fn):
    try:
        fn()
        return ["no error"]
    except FdptmError as exc:
        return [type(exc).__name__, exc.exit_code, str(exc)]
    except Exception as exc:
        return ["untranslated", type(exc).__name__, str(exc)]

out["budget"] = cli("budget", "--dataset", "d", "--json")
out["budget_again"] = cli("budget", "--dataset", "d")
out["set_cap"] = cli("budget", "--dataset", "d", "--cap", "5", "1e-5")
workspace = Workspace.resolve(root)
out["create"] = attempt(workspace.create)
out["artifact"] = attempt(
    lambda: write_parquet(pa.table({"a": [1]}), workspace.root / "datasets" / "d" / "x.parquet")
)
print(json.dumps(out))
"""


def _check_read_only(out: dict) -> None:
    code, stdout, stderr = out["budget"]
    assert code == 0, stderr
    assert json.loads(stdout)["cap"]["epsilon"] == 3.0
    assert out["budget_again"][0] == 0, out["budget_again"][2]
    code, _, stderr = out["set_cap"]
    assert code == 2 and "not writable" in stderr, stderr
    for what in ("create", "artifact"):
        name, exit_code, message = out[what]
        assert (name, exit_code) == ("WorkspaceNotWritableError", 2), out[what]
        assert "not writable" in message and "Nothing was changed" in message


def test_a_read_only_mount_serves_reads_and_refuses_writes(workspace, tmp_path):
    _populated(workspace)
    view = tmp_path / "read-only-view"
    view.mkdir()
    src, dst = shlex.quote(str(workspace.root)), shlex.quote(str(view))
    setup = f"mount --bind {src} {dst} && mount -o remount,bind,ro {dst}"
    done = in_mount_namespace(setup, READ_ONLY, str(view))
    assert done.returncode == 0, done.stderr
    _check_read_only(json.loads(done.stdout.strip().splitlines()[-1]))


def test_another_users_workspace_serves_reads_and_refuses_writes(workspace):
    if shutil.which("setpriv") is None:
        pytest.skip("needs util-linux setpriv to drop root's file-permission override")
    _populated(workspace)
    # A team workspace others may read, owned by uid 65534; we stay uid 0 (so the parent
    # directories, root's own, stay reachable) but lose the capabilities that bypass modes.
    subprocess.run(["chmod", "-R", "go+rX", str(workspace.root)], check=True)
    subprocess.run(["chown", "-R", "65534:65534", str(workspace.root)], check=True)
    drop = "-dac_override,-dac_read_search,-fowner,-chown"
    done = subprocess.run(
        ["setpriv", f"--bounding-set={drop}", sys.executable, "-c", READ_ONLY, str(workspace.root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    subprocess.run(["chown", "-R", f"{os.getuid()}:{os.getgid()}", str(workspace.root)])
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    _check_read_only(out)
    assert "fdptm: warning:" in out["budget"][2] and "chmod -R go-rwx" in out["budget"][2]
