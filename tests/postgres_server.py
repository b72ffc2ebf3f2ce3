"""A real PostgreSQL server for the tests: Debian's ``postgresql`` package, started in a
temporary directory on a free loopback port, one per test process.

The server runs as the ``postgres`` system user when the tests run as root (initdb refuses
root), with trust authentication on loopback only. Each test gets a database of its own.
Without the package installed the PostgreSQL tests are skipped, unless
``FDPTM_REQUIRE_POSTGRES=1`` (set by ``.ci/run``, which installs the package) makes that a
failure.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=os.path.getmtime)
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


class PostgresServer:
    """One temporary cluster: ``start``, ``database`` (a new empty one), ``stop``."""

    def __init__(self, port: int):
        bindir = _bindir()
        if bindir is None:
            message = "PostgreSQL is not installed (Debian: apt-get install postgresql)"
            if os.environ.get("FDPTM_REQUIRE_POSTGRES") == "1":
                pytest.fail(message)
            pytest.skip(message)
        self.bindir = bindir
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="fdptm-pg-"))
        self.data = self.root / "data"
        self.user = "postgres" if os.geteuid() == 0 else None

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> PostgresServer:
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres", "-E", "UTF8")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
        log = str(self.root / "server.log")  # not our pipe: pg_ctl's server would hold it open
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "-t", "120", "start"
        )
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new empty database's URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
