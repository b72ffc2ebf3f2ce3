"""The catalog: one DuckDB instance per process, nested blocks, and damaged catalogs.

Everything runs on real DuckDB files in temporary workspaces; the blocks that deadlocked
before (a nested ``connect()`` in the same thread) run in a child process with a timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

from fdptm.cli import main
from fdptm.errors import BadInputError, CatalogBusyError, CatalogDamagedError
from fdptm.privacy.adjacency import Adjacency
from fdptm.storage import catalog as catalog_module
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.ledger import Ledger
from fdptm.storage.workspace import Workspace


def _tables(catalog: Catalog) -> set[str]:
    return {r["table_name"] for r in catalog.query("SELECT table_name FROM duckdb_tables()")}


def _used(workspace: Workspace) -> Catalog:
    """A catalog with a dataset, a cap and 5000 (refunded) ledger rows of it: several MB
    of blocks, which `fdptm budget` reads in full."""
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset("d", "document")
    Ledger(catalog).set_cap("d", 10.0, 1e-5)
    catalog.execute(
        "INSERT INTO ledger (entry_id, dataset, run_id, stage, mechanism, adjacency, epsilon,"
        " delta, state, note, created_at, updated_at) SELECT 'e' || i, 'd', 'run-' || i,"
        " 'train', 'm2', 'document', 1.0, 0.0, 'refunded', sha256(i::VARCHAR), ?, ?"
        " FROM range(5000) t(i)",
        [now(), now()],
    )
    catalog.release_idle()  # closed, as an earlier process leaves it
    return catalog


def test_the_schema_ddl_runs_once_per_process_per_file(workspace):
    catalog = Catalog(workspace.create())
    assert "audit_results" in _tables(catalog)
    catalog.execute("DROP TABLE audit_results")
    # Each call used to re-run the DDL, which re-created the table at the next open.
    assert "audit_results" not in _tables(catalog)
    assert "audit_results" not in _tables(Catalog(Workspace.resolve(workspace.root)))
    workspace.catalog_path.unlink()  # a new file (new inode) gets the schema again
    assert "audit_results" in _tables(catalog)


def _storage_version(path) -> str:
    """The storage format DuckDB reports for the catalog file at ``path``."""
    catalog_module.release_idle()  # this process's last block detached, as after a command
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"ATTACH '{path}' AS probe (READ_ONLY)")
        (tags,) = con.execute(
            "SELECT tags FROM duckdb_databases() WHERE database_name = 'probe'"
        ).fetchone()
        return tags["storage_version"]
    finally:
        con.close()


def test_the_catalog_is_written_in_duckdb_1_2s_storage_format(workspace):
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset("d", "document")
    assert catalog_module.STORAGE_VERSION == "v1.2.0"
    assert _storage_version(workspace.catalog_path) == "v1.2.0+"


@pytest.mark.parametrize("newer", [False, True], ids=["1.2 format", "1.4 format"])
def test_the_catalogs_strings_are_stored_without_string_compression(workspace, newer):
    """Those analyses were most of a checkpoint's cost (``DISABLED_COMPRESSION``): the
    strings a release writes, paths with long shared prefixes and hashes, are stored
    without FSST or dictionary compression, also in a catalog a later fdptm left in a
    newer format (whose strings DuckDB would store as DICT_FSST). With DuckDB's defaults
    these rows get Dictionary and FSST (1.2 format) or DICT_FSST (1.4 format)."""
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset("d", "document")
    catalog.release_idle()
    if newer:  # as in test_a_catalog_in_a_newer_format_is_used_in_its_own
        con = duckdb.connect(":memory:")
        con.execute(f"ATTACH '{workspace.catalog_path}' AS c (STORAGE_VERSION 'v1.4.0')")
        con.execute("CREATE TABLE c.newer (a INTEGER)")
        con.close()
    with catalog.transaction() as con:
        for i in range(300):
            catalog.register_artifact(
                f"datasets/d/batch-{i:04d}.parquet",
                f"run-{i % 7}",
                "ingest",
                f"{workspace.root}/internal/datasets/d/batch-{i:04d}.parquet",
                hashlib.sha256(str(i).encode()).hexdigest(),
                "internal",
                con=con,
            )
    assert _storage_version(workspace.catalog_path) == ("v1.4.0+" if newer else "v1.2.0+")
    with duckdb.connect(str(workspace.catalog_path), read_only=True) as con:
        used = {
            r[0]
            for r in con.execute(
                "SELECT DISTINCT compression FROM pragma_storage_info('artifacts')"
                " WHERE segment_type = 'VARCHAR'"
            ).fetchall()
        }
    assert used and not used & {"FSST", "Dictionary", "DICT_FSST"}, used


def test_a_catalog_in_duckdb_1_0s_format_is_converted_with_its_rows(workspace):
    """A catalog written before (DuckDB's default format, 1.0) is read as it is, and keeps
    every row and its ledger through the conversion at the first block that writes to it."""
    workspace.create()
    catalog = Catalog(workspace)
    catalog.ensure_dataset("d", "document")
    Ledger(catalog).set_cap("d", 10.0, 1e-5)
    rows = catalog.query("SELECT * FROM datasets ORDER BY name")
    catalog.release_idle()
    legacy = workspace.catalog_path.with_name("legacy.duckdb")
    con = duckdb.connect(str(legacy))  # DuckDB's default format
    con.execute(f"ATTACH '{workspace.catalog_path}' AS current (READ_ONLY)")
    con.execute("COPY FROM DATABASE current TO legacy")
    con.close()
    assert _storage_version(legacy) == "v1.0.0+"
    os.replace(legacy, workspace.catalog_path)
    fresh = Catalog(Workspace.resolve(workspace.root))
    assert fresh.query("SELECT * FROM datasets ORDER BY name") == rows
    assert Ledger(fresh).cap("d") is not None
    assert _storage_version(workspace.catalog_path) == "v1.0.0+"  # reads leave it as it is
    fresh.ensure_dataset("e", "author")
    assert _storage_version(workspace.catalog_path) == "v1.2.0+"
    assert [r["name"] for r in fresh.query("SELECT name FROM datasets ORDER BY name")] == [
        "d",
        "e",
    ]
    assert Ledger(fresh).cap("d") is not None


def test_a_catalog_in_a_newer_format_is_used_in_its_own(workspace):
    """DuckDB refuses to lower a file's format: a catalog a later fdptm wrote in a newer
    one is read and written in that format."""
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset("d", "document")
    catalog.release_idle()
    con = duckdb.connect(":memory:")
    con.execute(f"ATTACH '{workspace.catalog_path}' AS c (STORAGE_VERSION 'v1.4.0')")
    con.execute("CREATE TABLE c.newer (a INTEGER)")  # a write: the checkpoint converts it
    con.close()
    assert _storage_version(workspace.catalog_path) == "v1.4.0+"
    assert [r["name"] for r in catalog.query("SELECT name FROM datasets")] == ["d"]
    catalog.ensure_dataset("e", "author")
    assert len(catalog.query("SELECT name FROM datasets")) == 2
    assert _storage_version(workspace.catalog_path) == "v1.4.0+"


def _lock_is_free(workspace: Workspace) -> bool:
    """Another process can take ``catalog.lock`` and open the file right now."""
    probe = textwrap.dedent(
        f"""
        import fcntl, duckdb
        with open({str(workspace.lock_path)!r}, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            duckdb.connect({str(workspace.catalog_path)!r}).execute("SELECT 1").close()
        print("free")
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return done.stdout.strip() == "free"


@pytest.fixture
def slow_linger(monkeypatch):
    """Lingers that end only on ``release_idle``: what a test asserts about a lingering
    session then does not depend on how fast the machine is."""
    monkeypatch.setattr(catalog_module, "LINGER_SECONDS", 3600.0)
    monkeypatch.setattr(catalog_module, "MAX_HOLD_SECONDS", 3600.0)
    yield
    catalog_module.release_idle()


def test_one_duckdb_instance_per_process_and_blocks_in_a_row_attach_once(workspace, slow_linger):
    catalog = Catalog(workspace.create())
    with catalog.connect() as first:
        pass
    session = catalog._session()
    attached, since = session.attached, session.attached_at
    assert session.lingering and attached is not None
    with Catalog(Workspace.resolve(workspace.root)).connect() as second:
        pass
    assert first is second and session.lingering
    assert session.attached == attached and session.attached_at == since  # not attached again
    catalog.release_idle()
    assert not session.lingering and session.attached is None and session.fd is None
    assert _lock_is_free(workspace)


def test_a_lingering_catalog_is_released_on_its_own(workspace, slow_linger):
    """No call ends the linger here: once its time is up, the process's thread detaches
    the file and releases the lock (polled for up to 60 s under the session's lock: the
    bound is the thread's, not this wait)."""
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset("d", "document")
    session = catalog._session()
    assert session.lingering and session.fd is not None
    with session.lock:
        session.until = time.monotonic()  # its time is up
    catalog_module._lingerer.wake(session)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with session.lock:
            if session.fd is None:
                break
        time.sleep(0.01)
    assert session.fd is None and not session.lingering
    assert _lock_is_free(workspace)
    assert catalog.dataset("d")["unit"] == "document"  # attached again


def test_a_replaced_catalog_is_attached_again_not_reused(workspace, tmp_path, slow_linger):
    """A lingering attachment is reused only while the path is the same file."""
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset("d", "document")
    catalog.release_idle()
    spare = tmp_path / "spare.duckdb"
    shutil.copy(workspace.catalog_path, spare)
    catalog.ensure_dataset("e", "author")  # lingers with d and e
    os.replace(spare, workspace.catalog_path)  # only d
    assert [r["name"] for r in catalog.query("SELECT name FROM datasets")] == ["d"]


NESTED = """
import json, sys
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

catalog = Catalog(Workspace.resolve(sys.argv[1]).create())
catalog.ensure_dataset("d", "document")
out = {}
with catalog.transaction() as outer:
    catalog.start_run("r1", "d", "release", {}, "v")
    with Catalog(Workspace.resolve(sys.argv[1])).connect() as inner:
        out["same_connection"] = inner is outer
    with catalog.transaction():
        catalog.start_stage("r1", "train")
    out["inside"] = len(catalog.query("SELECT * FROM runs"))
try:
    with catalog.transaction():
        catalog.start_run("r2", "d", "release", {}, "v")
        with catalog.transaction():
            catalog.start_stage("r2", "train")
            raise KeyError("boom")
except KeyError:
    pass
try:
    with catalog.transaction():
        catalog.start_run("r3", "d", "release", {}, "v")
        try:
            with catalog.transaction():
                catalog.start_stage("r3", "train")
                raise KeyError("caught inside")
        except KeyError:
            pass
except RuntimeError as exc:
    out["caught_nested"] = str(exc)
out["runs"] = sorted(r["run_id"] for r in catalog.query("SELECT run_id FROM runs"))
out["stages"] = sorted(r["run_id"] for r in catalog.query("SELECT run_id FROM stage_runs"))
print(json.dumps(out))
"""


def test_nested_blocks_join_the_outer_one(workspace):
    try:
        done = subprocess.run(
            [sys.executable, "-c", NESTED, str(workspace.root)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a nested connect() in the same thread deadlocked on the catalog lock")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["same_connection"] is True and out["inside"] == 1
    assert out["runs"] == ["r1"] and out["stages"] == ["r1"]  # r2, r3 rolled back whole
    assert "rolled back" in out["caught_nested"]


DUCKDB_HEADER, DUCKDB_BLOCK = 3 * 4096, 262_144  # DuckDB's file layout (storage version 64+)


def _block_damage_seen_only_at_query(path) -> bytes:
    """The file with one data block garbled (its checksum left as it was), such that DuckDB
    still opens it but a full scan of the ledger fails: which block holds the ledger's
    rows depends on how the checkpoint laid the file out, so each block is tried."""
    data = path.read_bytes()
    probe = path.with_name("probe.duckdb")
    try:
        for start in range(DUCKDB_HEADER, len(data), DUCKDB_BLOCK):
            damaged = bytearray(data)
            damaged[start + 8 : start + 4096] = os.urandom(4088)
            probe.write_bytes(damaged)
            try:
                con = duckdb.connect(str(probe), read_only=True)
            except duckdb.Error:
                continue
            try:
                con.execute("SELECT * FROM ledger").fetchall()
            except duckdb.Error:
                return bytes(damaged)
            finally:
                con.close()
    finally:
        probe.unlink(missing_ok=True)
    pytest.fail("no damaged block of this catalog opens and then fails at a query")


@pytest.mark.parametrize("damage", ["a block, seen at query", "truncated", "garbage", "empty"])
def test_a_damaged_catalog_is_a_clear_error_and_is_left_alone(workspace, capsys, damage):
    _used(workspace)
    path = workspace.catalog_path
    size = path.stat().st_size
    if damage == "garbage":
        path.write_bytes(os.urandom(size))
    elif damage == "empty":
        path.write_bytes(b"")
    elif "query" in damage:
        path.write_bytes(_block_damage_seen_only_at_query(path))
    else:
        with open(path, "r+b") as fh:
            fh.truncate(size // 3)
    before = path.read_bytes()

    with pytest.raises(CatalogDamagedError) as err:
        Catalog(workspace).query("SELECT * FROM ledger")
    assert isinstance(err.value, BadInputError) and err.value.exit_code == 2
    message = str(err.value)
    assert "is damaged" in message and "Nothing was changed" in message
    assert "Restore catalog.duckdb" in message and "backup" in message
    with pytest.raises(CatalogDamagedError):  # writers are refused the same way
        Ledger(Catalog(workspace)).set_cap("d", 5.0, 1e-5, Adjacency.DOCUMENT)

    assert main(["budget", "--dataset", "d", "--workspace", str(workspace.root)]) == 2
    err = capsys.readouterr().err
    assert "is damaged" in err and "Traceback" not in err
    assert path.read_bytes() == before  # never repaired, re-created or written
    assert not path.with_name("catalog.duckdb.wal").exists()


def test_a_missing_catalog_is_not_recreated_when_the_workspace_holds_data(workspace):
    _used(workspace)
    batch = workspace.root / "datasets" / "d" / "batches" / "batch=000001" / "part-0.parquet"
    batch.parent.mkdir(parents=True)
    batch.write_bytes(b"rows")
    workspace.catalog_path.unlink()
    with pytest.raises(CatalogDamagedError, match=r"is missing.*forget the budget"):
        Catalog(workspace).query("SELECT 1")
    assert not workspace.catalog_path.exists()


def test_a_catalog_held_open_by_another_program_is_reported_busy(workspace, monkeypatch):
    _used(workspace)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; con = duckdb.connect(sys.argv[1]); print('held', flush=True);"
            " sys.stdin.readline()",
            str(workspace.catalog_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(catalog_module, "BUSY_TIMEOUT_SECONDS", 0.3)
        with pytest.raises(CatalogBusyError, match="held open by another program") as err:
            Catalog(workspace).query("SELECT 1")
        assert err.value.exit_code == 2
    finally:
        holder.communicate("done\n", timeout=30)
    assert Catalog(workspace).dataset("d")["unit"] == "document"


def test_a_restored_copy_is_read_with_its_wal(workspace, tmp_path):
    catalog = _used(workspace)
    copy = tmp_path / "copy"
    shutil.copytree(workspace.root, copy)
    assert Catalog(Workspace.resolve(copy)).dataset("d")["cap_epsilon"] == 10.0
    assert catalog.query("SELECT count(*) AS n FROM ledger")[0]["n"] == 5000


def test_a_run_of_blocks_longer_than_the_hold_limit_releases_at_its_end(
    workspace, slow_linger, monkeypatch
):
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset("d", "document")
    session = catalog._session()
    assert session.lingering
    monkeypatch.setattr(catalog_module, "MAX_HOLD_SECONDS", 0.0)
    catalog.ensure_dataset("e", "author")  # reuses the attachment, then lets it go
    assert not session.lingering and session.fd is None
    assert _lock_is_free(workspace)


FORKED = """
import os, sys
from fdptm.storage import catalog as catalog_module
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

catalog_module.LINGER_SECONDS = catalog_module.MAX_HOLD_SECONDS = 3600.0  # until the fork
catalog = Catalog(Workspace.resolve(sys.argv[1]).create())
catalog.ensure_dataset("a", "document")
session = catalog._session()
lingered = session.lingering
pid = os.fork()  # lingering: released first
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
released = not session.lingering and session.fd is None
with catalog.connect():
    catalog.ensure_dataset("b", "document")
    pid = os.fork()  # inside a block: the child's copy of the instance is never used
    if pid == 0:
        catalog_module.MAX_HOLD_SECONDS = 0.0  # the block's end would detach at once
    else:
        os.waitpid(pid, 0)
if pid == 0:
    sys.exit(0)  # a normal exit, after the block ended in the child too
catalog.ensure_dataset("c", "document")
print(lingered, released, flush=True)
os._exit(0)  # no detach: the commits are in the WAL only
"""


def test_a_fork_leaves_the_parents_catalog_whole(workspace):
    """A child forked while the file lingers, or inside a block that then ends in the child
    too, exiting normally, neither deletes the parent's WAL nor writes into its file: every
    commit of the parent, the last one only in the WAL, is read back by a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(workspace.root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
    names = Catalog(Workspace.resolve(workspace.root)).query("SELECT name FROM datasets")
    assert sorted(r["name"] for r in names) == ["a", "b", "c"]
