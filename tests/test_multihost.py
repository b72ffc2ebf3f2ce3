"""Several hosts, one ledger (issue 29, items 1-2): real ``fdptm`` processes, each in a
working directory of its own (a host's workspace, holding none of the others' files), share
a real PostgreSQL catalog and a real S3-compatible artifact store.

- N + 2 releases at once against a cap of N never overspend: N are published, 2 refused;
- a release killed with SIGKILL after its reservation leaves nothing reserved once another
  host runs ``fdptm recover``; one killed mid-M2 is closed as failed there, its budget spent,
  and resumed to the end from a third host;
- a live run (stopped, not dead) on one host is never closed by ``recover`` on another;
- ``fdptm catalog migrate`` moves a DuckDB workspace into PostgreSQL with every row, its
  secret key and a chain that verifies, and the old catalog is refused afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from conftest import S3_CREDENTIALS, SERVE_VARS, s3_filesystem
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fdptm import signing
from fdptm.privacy.adjacency import Adjacency
from fdptm.storage import chain
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.storage.transfer import TABLES
from fdptm.storage.workspace import Workspace

pytestmark = pytest.mark.usefixtures("prefect_harness")

EPSILON = 100.0
RELEASE = ["--epsilon", str(EPSILON), "--delta", "1e-5", "--topics", "2", "--iterations", "5"]
MECHANISM = ["--mechanism", "hdp-lda", "--no-progress"]
LINES = ["apple banana cherry grape"] * 40 + ["durian elderberry figs lemon"] * 40


@pytest.fixture
def hosts(tmp_path, pg_catalog, s3_server, served):
    """``fdptm`` on "host" ``i``: a function running a command in ``tmp_path/host<i>``
    (its own workspace) against the shared catalog, store and Prefect API, handed to the
    session's ``fdptm serve`` (``FDPTM_SERVE="off"`` for a fresh process). Host 0 ingested
    dataset ``small`` and set the artifact store, so the others hold none of its files."""
    from prefect.settings import PREFECT_API_URL

    bucket = f"fdptm-{os.urandom(4).hex()}"
    s3_filesystem(s3_server).mkdir(bucket)
    base = {k: v for k, v in os.environ.items() if k in SERVE_VARS or not k.startswith("FDPTM_")}
    base |= S3_CREDENTIALS | {
        "AWS_ENDPOINT_URL": s3_server,
        "FDPTM_CATALOG": pg_catalog,
        "FDPTM_SECRET_KEY": os.environ["FDPTM_SECRET_KEY"],
        "FDPTM_SIGNING_KEY": os.environ["FDPTM_SIGNING_KEY"],
        "PREFECT_API_URL": PREFECT_API_URL.value(),
    }

    def start(i: int, *args: str, **env: str) -> subprocess.Popen:
        root = tmp_path / f"host{i}"
        root.mkdir(exist_ok=True)
        return subprocess.Popen(
            [sys.executable, "-m", "fdptm.cli", *args, "--workspace", str(root / "ws")],
            cwd=root,
            env=base | env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(i: int, *args: str, **env: str) -> subprocess.CompletedProcess:
        proc = start(i, *args, **env)
        out, err = proc.communicate(timeout=900)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    corpus = tmp_path / "small.txt"
    corpus.write_text("\n".join(LINES))
    assert run(0, "store", "--set", f"s3://{bucket}/fdptm").returncode == 0
    done = run(0, "ingest", str(corpus), "--dataset", "small")
    assert done.returncode == 0, done.stderr
    run.start = start
    return run


def _ledger(url: str) -> Ledger:
    return Ledger(Catalog(Workspace(Path("/nonexistent"), catalog=url)))


def test_n_plus_two_releases_from_separate_hosts_never_overspend(hosts, pg_catalog):
    n = 2
    cap = hosts(
        0, "budget", "--dataset", "small", "--cap", str(n * EPSILON), "1e-3", "--unit", "word"
    )
    assert cap.returncode == 0, cap.stderr
    procs = [
        hosts.start(i, "release", "--dataset", "small", *RELEASE, *MECHANISM)
        for i in range(1, n + 3)
    ]
    outcomes = [(p.wait(timeout=900), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in outcomes)
    assert codes == [0] * n + [3] * 2, [err[-1500:] for _, err in outcomes]
    ledger = _ledger(pg_catalog)
    assert ledger.lifetime("small", Adjacency.WORD).epsilon <= n * EPSILON
    assert {e["state"] for e in ledger.entries("small")} == {"spent"}
    verified = hosts(n + 3, "verify", "--dataset", "small")  # a host with no release files
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"releases:  {n} checked" in verified.stdout
    public = hosts(n + 3, "verify", "--public-key").stdout
    assert hosts(n + 3, "verify", "--dataset", "small", "--key", public_hex(public)).returncode == 0
    other = Ed25519PrivateKey.generate().public_key()
    wrong = hosts(n + 3, "verify", "--dataset", "small", "--key", signing.hex_of(other))
    assert wrong.returncode == 1 and "FAILED" in wrong.stdout


def public_hex(pem: str) -> str:
    return signing.hex_of(signing.public_key(pem.encode()))


def _run_id(url: str) -> str:
    rows = Catalog(Workspace(Path("/nonexistent"), catalog=url)).query(
        "SELECT run_id FROM runs WHERE kind = 'release' ORDER BY started_at DESC LIMIT 1"
    )
    return rows[0]["run_id"]


def test_a_host_uploads_its_own_artifacts_past_another_hosts_pending_ones(
    tmp_path, pg_catalog, s3_server, monkeypatch
):
    """On a shared catalog, an artifact another host registered and has not uploaded yet
    (its file is on that host) neither stops nor warns a command's end on this host, which
    uploads its own; the other host's own sync uploads it, and asking for it by name here is
    an error."""
    from fdptm.errors import BadInputError
    from fdptm.storage import objectstore
    from fdptm.storage.artifacts import write_json

    for name, value in {**S3_CREDENTIALS, "AWS_ENDPOINT_URL": s3_server}.items():
        monkeypatch.setenv(name, value)
    bucket = f"fdptm-{os.urandom(4).hex()}"
    s3_filesystem(s3_server).mkdir(bucket)
    one, two = (Workspace.resolve(tmp_path / f"host{i}" / "ws").create() for i in (1, 2))
    objectstore.set_store(one, f"s3://{bucket}/fdptm")
    for workspace, name in ((one, "a-first"), (two, "b-second")):  # one's sorts first
        rel = f"internal/extra/{name}.json"
        sha = write_json({"name": name}, workspace.root / rel)
        Catalog(workspace).register_artifact(f"extra/{name}", "none", "test", rel, sha, "internal")
    assert objectstore.settle(two) is None
    stored = {r["name"]: r["stored_in"] for r in Catalog(two).query("SELECT * FROM artifacts")}
    assert stored == {"extra/a-first": None, "extra/b-second": f"s3://{bucket}/fdptm"}
    with pytest.raises(BadInputError, match=r"a-first\.json"):
        objectstore.sync(two, ["extra/a-first"])
    assert objectstore.sync(one) == 1
    assert s3_filesystem(s3_server).exists(f"{bucket}/fdptm/internal/extra/a-first.json")


def test_a_killed_worker_leaves_nothing_reserved_after_recover_on_another_host(hosts, pg_catalog):
    killed = hosts(
        1, "release", "--dataset", "small", *RELEASE, *MECHANISM, FDPTM_KILL_AT="after-reserve"
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    ledger = _ledger(pg_catalog)
    assert {e["state"] for e in ledger.entries("small")} == {"reserved"}
    out = hosts(2, "recover")
    assert out.returncode == 0, out.stderr
    assert "2 reservation(s) refunded" in out.stdout
    assert {e["state"] for e in ledger.entries("small")} == {"refunded"}

    killed = hosts(
        1, "release", "--dataset", "small", *RELEASE, *MECHANISM, FDPTM_KILL_AT="during-train"
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    run_id = _run_id(pg_catalog)
    out = hosts(2, "recover")
    assert out.returncode == 0 and run_id in out.stdout, out.stderr
    live = [e for e in ledger.entries("small") if e["run_id"] == run_id]
    assert {e["state"] for e in live} == {"spent"}  # it read data: spent, never refunded
    resumed = hosts(3, "release", "--resume", run_id, "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    entries = [e for e in ledger.entries("small") if e["run_id"] == run_id]
    assert sorted(e["stage"] for e in entries) == ["train", "train/lost-1", "vocabulary"]
    assert not [e for e in ledger.entries("small") if e["state"] == "reserved"]
    assert hosts(4, "verify", "--dataset", "small").returncode == 0


def test_a_live_run_on_one_host_is_never_recovered_from_another(hosts, pg_catalog):
    proc = hosts.start(
        1,
        "release",
        "--dataset",
        "small",
        *RELEASE,
        *MECHANISM,
        FDPTM_STOP_AT="during-train",
        FDPTM_SERVE="off",  # _stopped watches this very process
    )
    try:
        deadline = time.monotonic() + 600
        while not _stopped(proc.pid):
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "the release never reached M2"
            time.sleep(0.2)
        out = hosts(2, "recover")
        assert out.returncode == 0 and "no dead run found" in out.stdout, out.stdout
        rows = Catalog(Workspace(Path("/nonexistent"), catalog=pg_catalog)).query(
            "SELECT status FROM runs WHERE kind = 'release'"
        )
        assert [r["status"] for r in rows] == ["running"]
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-2000:]


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] == "T"


def test_catalog_migrate_moves_a_duckdb_workspace_whole(
    tmp_path, postgres_server, capsys, monkeypatch
):
    from fdptm.cli import main

    monkeypatch.delenv("FDPTM_CATALOG", raising=False)
    ws = Workspace.resolve(tmp_path / "ws")
    corpus = tmp_path / "small.txt"
    corpus.write_text("\n".join(LINES))
    root = ["--workspace", str(ws.root)]
    assert main(["ingest", str(corpus), "--dataset", "small", *root]) == 0
    cap = ["--cap", "1000", "1e-3", "--unit", "word"]  # hdp-lda's M2 is word-level
    assert main(["budget", "--dataset", "small", *cap, *root]) == 0
    assert main(["release", "--dataset", "small", *RELEASE, *MECHANISM, "--seed", "3", *root]) == 0
    commitment = ws.commitment("ab" * 32)
    Catalog(ws).release_idle()  # read the file as a later process would
    with duckdb.connect(str(ws.catalog_path), read_only=True) as con:
        before = {t: _images(con, t) for t in TABLES}
    url = postgres_server.database()
    capsys.readouterr()

    assert main(["catalog", "migrate", "--to", url, *root]) == 0
    assert "every row was read back and compared" in capsys.readouterr().out
    monkeypatch.setenv("FDPTM_SECRET_KEY", str(ws.root / "secret.key"))  # as on every host
    moved = Workspace(ws.root, catalog=url)
    with Catalog(moved).connect() as con:
        after = {t: _images(con, t) for t in TABLES}
    assert after == before
    assert moved.commitment("ab" * 32) == commitment  # the same key, from its file
    with Catalog(moved).connect() as con:  # the catalog holds its fingerprint, not the key
        values = [v for (v,) in con.execute("SELECT value FROM settings").fetchall()]
    assert (ws.root / "secret.key").read_text().strip() not in values
    assert main(["verify", "--dataset", "small", *root, "--catalog", url]) == 0
    assert "releases:  1 checked" in capsys.readouterr().out

    assert main(["budget", "--dataset", "small", *root]) == 2  # the old file is not used
    assert f"was moved to {url}" in capsys.readouterr().err
    assert not ws.catalog_path.exists() and (ws.root / "catalog.duckdb.moved").exists()
    again = Workspace.resolve(tmp_path / "ws2")
    assert main(["ingest", str(corpus), "--dataset", "other", "--workspace", str(again.root)]) == 0
    capsys.readouterr()
    assert main(["catalog", "migrate", "--to", url, "--workspace", str(again.root)]) == 2
    assert "already holds datasets" in capsys.readouterr().err
    assert again.catalog_path.exists()


def _images(con, table: str) -> list[str]:
    cursor = con.execute(f"SELECT * FROM {table}")
    names = [c[0] for c in cursor.description]
    return sorted(chain.image(dict(zip(names, r, strict=True))) for r in cursor.fetchall())


def test_a_catalog_url_with_a_password_is_refused(tmp_path, capsys):
    from fdptm.cli import main

    for url in (
        "postgresql://fdptm:secret@db.example:5432/fdptm",
        "postgresql://fdptm@db.example:5432/fdptm?password=secret",
    ):
        args = ["budget", "--dataset", "d", "--catalog", url, "--workspace", str(tmp_path)]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "carries a password" in err and "secret" not in err


def test_an_unreachable_catalog_is_a_clear_error(tmp_path, capsys):
    from conftest import free_port

    from fdptm.cli import main

    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    args = ["budget", "--dataset", "d", "--catalog", url, "--workspace", str(tmp_path / "ws")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "cannot use the PostgreSQL catalog" in err and "Traceback" not in err


def test_every_host_of_a_postgresql_catalog_needs_the_shared_keys(
    tmp_path, pg_catalog, monkeypatch, capsys
):
    """Without $FDPTM_SECRET_KEY, with another secret key than the catalog's first host,
    or without $FDPTM_SIGNING_KEY, a release is refused (exit 2) before anything is
    reserved."""
    from conftest import shared_keys

    from fdptm.cli import main

    corpus = tmp_path / "small.txt"
    corpus.write_text("\n".join(LINES))
    root = ["--workspace", str(tmp_path / "ws")]
    assert main(["ingest", str(corpus), "--dataset", "small", *root]) == 0
    release = ["release", "--dataset", "small", *RELEASE, *MECHANISM, *root]
    other = shared_keys(tmp_path)
    for unset, value, message in (
        ("FDPTM_SECRET_KEY", None, "set $FDPTM_SECRET_KEY to its file on every host"),
        ("FDPTM_SECRET_KEY", other["FDPTM_SECRET_KEY"], "its fingerprint differs"),
        ("FDPTM_SIGNING_KEY", None, "signed with one key"),
    ):
        with monkeypatch.context() as env:
            if value is None:
                env.delenv(unset)
            else:
                env.setenv(unset, value)
            capsys.readouterr()
            assert main(release) == 2
            assert message in capsys.readouterr().err
    assert _ledger(pg_catalog).entries("small") == []
