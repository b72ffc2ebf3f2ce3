"""The workspace: one directory holding the catalog and every artifact.

Layout (internal artifacts are computed on private data and are not DP; only ``releases/``
holds DP outputs meant to leave the organisation):

    <workspace>/catalog.duckdb                  catalog and privacy ledger
    <workspace>/catalog.lock                    the catalog's cross-process lock
    <workspace>/secret.key                      key of the manifests' input commitments
    <workspace>/datasets/<name>/batches/        ingested rows (internal, raw text)
    <workspace>/datasets/<name>/rejects/        rows refused at ingest (internal, raw text)
    <workspace>/datasets/<name>/tokens/         PRE output per batch (internal)
    <workspace>/internal/runs/<run_id>/         bounded tokens, baselines (internal)
    <workspace>/releases/<run_id>/              topic_word, vocabulary, manifest (public)
    <workspace>/reports/<run_id>/               release report: the release and the ledger's
                                                budgets only (public)

The workspace holds raw text, so it is private to its owner: directories fdptm creates are
0700 and files 0600. An existing workspace that group or others can read or write is used
as it is (a team may share one on purpose), with a warning once per process.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import re
import secrets
import shutil
import stat
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from fdptm.errors import (
    BadInputError,
    DiskFullError,
    FdptmError,
    WorkspaceNotWritableError,
)

DEFAULT_WORKSPACE = "fdptm-workspace"
ENV_VAR = "FDPTM_WORKSPACE"
CATALOG_ENV_VAR = "FDPTM_CATALOG"
SECRET_ENV_VAR = "FDPTM_SECRET_KEY"
SECRET_FINGERPRINT = "secret_key_fingerprint"
MOVED_MARKER = "catalog.moved"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

DIR_MODE = 0o700
FILE_MODE = 0o600
_SUBDIRS = ("datasets", "internal/runs", "releases")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)

_warned: set[Path] = set()
_warned_lock = threading.Lock()


class WorkspacePermissionWarning(UserWarning):
    """The workspace (raw text, ledger, key) is open to group or others."""


def check_name(name: str, what: str = "dataset name") -> str:
    """Dataset names become directory names: letters, digits, '_', '.', '-' only."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadInputError(
            f"invalid {what} {name!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


def storage_error(exc: OSError, path: Path) -> FdptmError | None:
    """The clear error for a failed write of ``path``, or None when it is not a known cause.

    ENOSPC and quotas become ``DiskFullError``; permission and read-only file systems become
    ``WorkspaceNotWritableError``. Callers write to a temporary file and rename, so the
    message can promise that the previous version of ``path`` is intact.
    """
    reason = exc.strerror or str(exc)
    if exc.errno in _NO_SPACE:
        return DiskFullError(
            f"no space left to write {path} ({reason}; {free_space(path)} free on that "
            "device): free disk space (or raise the quota) and run the command again. Nothing "
            "stored was lost: the previous version of the file, if any, is intact and the "
            "partial file was removed."
        )
    if exc.errno in NOT_WRITABLE_ERRNOS:
        return not_writable(path, reason)
    return None


@contextmanager
def storage_errors(path: Path) -> Iterator[None]:
    """Raise ``storage_error``'s clear error for an OSError in the block (others as they are)."""
    try:
        yield
    except OSError as exc:
        error = storage_error(exc, path)
        if error is None:
            raise
        raise error from exc


def not_writable(path: Path, reason: str) -> WorkspaceNotWritableError:
    """The error for a command that must write ``path`` in a workspace it cannot write."""
    return WorkspaceNotWritableError(
        f"cannot write {path} ({reason}): the workspace is not writable by this user (a "
        "read-only file system, or another owner). Nothing was changed. Commands that only "
        "read (`fdptm budget` without --cap) work on a read-only workspace; run this one as "
        "the workspace's owner, or on a writable copy of the workspace."
    )


def free_space(path: Path) -> str:
    """Free space on the device holding ``path`` (or its nearest existing parent), for messages."""
    for parent in (path, *path.parents):
        if parent.exists():
            free = shutil.disk_usage(parent).free
            return f"{free / 1e6:.1f} MB" if free >= 1e5 else f"{free} bytes"
    return "unknown"


def private_mkdir(path: Path) -> None:
    """Create ``path`` and its missing parents, each 0700 (whatever the umask)."""
    missing = []
    for parent in (path, *path.parents):
        if parent.is_dir():
            break
        missing.append(parent)
    for directory in reversed(missing):
        with storage_errors(directory):
            try:
                os.mkdir(directory, DIR_MODE)
            except FileExistsError:
                continue
        os.chmod(directory, DIR_MODE)


def warn_if_exposed(root: Path) -> None:
    """Warn once per process per workspace when group or others may read or write it."""
    try:
        mode = stat.S_IMODE(root.stat().st_mode)
    except OSError:
        return
    if not mode & 0o077:
        return
    with _warned_lock:
        if root in _warned:
            return
        _warned.add(root)
    warnings.warn(
        f"the workspace {root} is open to group or others (mode {mode:04o}) and holds raw "
        f"text, the privacy ledger and secret.key; make it private with "
        f"`chmod -R go-rwx {root}`",
        WorkspacePermissionWarning,
        stacklevel=2,
    )


def create_private(path: Path, data: bytes) -> None:
    """Write ``data`` in full to a private temporary file (0600, fsynced), then link it into
    place as ``path`` unless it exists: a concurrent creator wins, and a reader never sees a
    partial key (``secret.key``, ``signing.key``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    created = False
    try:
        with storage_errors(path):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            created = True
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            with suppress(FileExistsError):
                os.link(tmp, path)
    finally:
        if created:
            tmp.unlink(missing_ok=True)


def catalog_from_environment() -> str | None:
    """$FDPTM_CATALOG (a postgresql:// URL, checked), or None: the workspace's DuckDB file.

    The environment carries the catalog to every process of a run (the CLI's ``--catalog``
    sets it, a Prefect worker gets it from its job variables), as $FDPTM_WORKSPACE carries
    the workspace."""
    url = os.environ.get(CATALOG_ENV_VAR) or None
    if url is None:
        return None
    from fdptm.storage.postgres import check_url

    return check_url(url)


@dataclass(frozen=True)
class Workspace:
    """Paths inside one workspace directory, and where its catalog lives: ``catalog``
    None for the workspace's own ``catalog.duckdb``, or a PostgreSQL URL shared by the
    workspaces of several hosts (``storage.postgres``)."""

    root: Path
    catalog: str | None = field(default_factory=catalog_from_environment)

    @classmethod
    def resolve(cls, path: str | os.PathLike | None = None) -> Workspace:
        """``path``, else $FDPTM_WORKSPACE, else ./fdptm-workspace (absolute)."""
        chosen = path or os.environ.get(ENV_VAR) or DEFAULT_WORKSPACE
        return cls(Path(chosen).expanduser().resolve())

    def create(self) -> Workspace:
        """Create the workspace (0700) for a command that writes to it.

        An existing workspace keeps its modes (with a warning when it is open to others);
        one this user cannot write to is refused here, before anything is read or computed.
        """
        if self.root.exists() and not self.root.is_dir():
            raise BadInputError(f"workspace path {self.root} exists and is not a directory")
        if self.root.is_dir():
            warn_if_exposed(self.root)
            if not os.access(self.root, os.W_OK):
                read_only = os.statvfs(self.root).f_flag & os.ST_RDONLY
                raise not_writable(
                    self.root, os.strerror(errno.EROFS if read_only else errno.EACCES)
                )
        for sub in _SUBDIRS:
            private_mkdir(self.root / sub)
        return self

    def require(self) -> Workspace:
        """The workspace must exist already (for commands that read from it). With a
        PostgreSQL catalog the datasets live there: a host's workspace directory (its
        local copies of artifacts) is created on first use."""
        if self.catalog is not None:
            return self.create()
        self.check_not_moved()
        if not self.catalog_path.exists():
            raise BadInputError(
                f"no fdptm workspace at {self.root} (no catalog.duckdb there); ingest data "
                f"first with `fdptm ingest PATH --dataset NAME --workspace {self.root}`, or "
                f"point --workspace / ${ENV_VAR} at an existing workspace"
            )
        warn_if_exposed(self.root)
        return self

    def check_not_moved(self) -> None:
        """Refuse the DuckDB catalog of a workspace whose catalog ``fdptm catalog migrate``
        moved to PostgreSQL: a new file there would start a second ledger."""
        moved = self.root / MOVED_MARKER
        if moved.exists():
            raise BadInputError(
                f"the catalog of workspace {self.root} was moved to "
                f"{moved.read_text().strip()} (`fdptm catalog migrate`); give that URL with "
                f"--catalog or ${CATALOG_ENV_VAR}. Nothing was changed."
            )

    def holds_data(self) -> bool:
        """True when anything was ingested, released or keyed here (beyond empty folders)."""
        return (self.root / "secret.key").exists() or any(
            any(p.is_file() for p in (self.root / sub).rglob("*"))
            for sub in ("datasets", "releases")
        )

    def has_releases(self) -> bool:
        """Whether a release was ever published: files under releases/ or catalog rows."""
        releases = self.root / "releases"
        if releases.is_dir() and any(releases.iterdir()):
            return True
        if not self.has_catalog:
            return False
        from fdptm.storage.catalog import Catalog

        return bool(Catalog(self).query("SELECT 1 FROM releases LIMIT 1"))

    def _buckets_spent(self) -> bool:
        """Whether the ledger holds an entry of a dataset with author buckets."""
        if not self.has_catalog:
            return False
        from fdptm.storage.catalog import Catalog

        return bool(
            Catalog(self).query(
                "SELECT 1 FROM ledger l JOIN datasets d ON l.dataset = d.name"
                " WHERE d.author_buckets IS NOT NULL LIMIT 1"
            )
        )

    def commitment(self, sha256: str) -> str:
        """HMAC-SHA256 of an input's sha256 under the workspace's secret key.

        A plain hash of private input is a deterministic function of the data: published,
        it tells neighbouring datasets apart with certainty. The keyed commitment lets the
        organisation (which holds ``secret.key``) match a manifest to its inputs while the
        public cannot evaluate it on a guessed dataset.
        """
        return hmac.new(self._secret_key(), sha256.encode(), "sha256").hexdigest()

    def bucket_key(self) -> bytes:
        """The key of the author buckets (``storage.partitions.buckets_of``), derived from
        the secret key: which authors share a bucket is not computable without it."""
        return hmac.new(self._secret_key(), b"fdptm author buckets", "sha256").digest()

    def check_key(self) -> None:
        """Refuse (exit 2) a workspace whose ``secret.key`` cannot serve this run, before
        anything is read or reserved: a key that is not a 32-byte hex file, or a missing
        key where releases or author buckets depend on it. A missing key of a workspace
        with neither is fine: it is created when first needed. A PostgreSQL catalog takes
        its key from ``$FDPTM_SECRET_KEY`` (``_shared_key``)."""
        if self.catalog is not None:
            self._shared_key()
            return
        key_path = self.root / "secret.key"
        if key_path.exists() or key_path.is_symlink():
            try:
                self._read_key(key_path)
            except BadInputError as exc:
                raise BadInputError(f"{exc}. Nothing was read, reserved or spent") from None
        elif self.has_releases() or self._buckets_spent():
            raise BadInputError(
                f"{key_path} is missing, but this workspace has published releases whose "
                "manifests commit to their inputs under that key, or spends over author "
                "buckets that key assigned: a new key would make the commitments "
                "unverifiable and reshuffle the buckets under the ledger. Restore "
                "secret.key from a backup (0600, owner only); nothing was changed"
            )

    def _secret_key(self) -> bytes:
        """The 32-byte key, created (0600, atomically) only before the first release.

        A key missing from a workspace with releases is refused (``check_key``): a new one
        would make the earlier manifests' commitments unverifiable, so it must come back
        from a backup.
        """
        if self.catalog is not None:
            return self._shared_key()
        key_path = self.root / "secret.key"
        self.check_key()
        if not key_path.exists():
            self._create_key(key_path)
        return self._read_key(key_path)

    def _shared_key(self) -> bytes:
        """The secret key of the hosts that share a PostgreSQL catalog: the file
        ``$FDPTM_SECRET_KEY`` names, the same on every host, never made here (a host with a
        key of its own would commit and bucket differently from the others) and never
        stored in the database (whose readers, auditors among them, must not hold it). The
        catalog keeps a one-way fingerprint of it (``settings``), set by the first host that
        uses one, so a host with another key is refused."""
        from fdptm.storage.catalog import Catalog, now

        chosen = os.environ.get(SECRET_ENV_VAR)
        if not chosen:
            raise BadInputError(
                f"a PostgreSQL catalog is shared by several hosts, and so is its secret key "
                f"(of the manifests' input commitments and the author buckets): set "
                f"${SECRET_ENV_VAR} to its file on every host, mode 0600: the workspace's "
                "secret.key when you moved one (`fdptm catalog migrate`), or a new one made with "
                "`(umask 077; python -c 'import secrets; print(secrets.token_hex(32))' > "
                "secret.key)`. Nothing was read, reserved or spent"
            )
        key = self._read_key(Path(chosen).expanduser())
        fingerprint = hashlib.sha256(b"fdptm secret key fingerprint\n" + key).hexdigest()
        with Catalog(self).transaction() as con:
            found = con.execute(
                "SELECT value FROM settings WHERE key = ?", [SECRET_FINGERPRINT]
            ).fetchone()
            if found is None:
                con.execute(
                    "INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?)",
                    [SECRET_FINGERPRINT, fingerprint, now()],
                )
            elif found[0] != fingerprint:
                raise BadInputError(
                    f"${SECRET_ENV_VAR} ({chosen}) is not the secret key this catalog's hosts "
                    "use (its fingerprint differs): give every host the same file. Nothing "
                    "was read, reserved or spent"
                )
        return key

    @staticmethod
    def _read_key(key_path: Path) -> bytes:
        try:
            key = bytes.fromhex(key_path.read_text(encoding="ascii").strip())
        except (ValueError, OSError):
            key = b""
        if len(key) != 32:
            raise BadInputError(
                f"{key_path} is not a readable file holding a 32-byte key in hex; restore it "
                "from a backup (commitments in earlier manifests and author buckets depend on "
                "it) or, if nothing was published and no bucketed dataset spent yet, delete "
                "it"
            )
        return key

    @staticmethod
    def _create_key(key_path: Path) -> None:
        create_private(key_path, secrets.token_hex(32).encode("ascii"))

    @property
    def has_catalog(self) -> bool:
        """Whether the workspace's catalog exists: always for a PostgreSQL catalog (its
        database is made by its administrator), else when ``catalog.duckdb`` does."""
        return self.catalog is not None or self.catalog_path.exists()

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog.duckdb"

    @property
    def lock_path(self) -> Path:
        return self.root / "catalog.lock"

    def run_dir(self, run_id: str) -> Path:
        return self.root / "internal" / "runs" / run_id

    def release_dir(self, run_id: str) -> Path:
        return self.root / "releases" / run_id

    def report_dir(self, run_id: str) -> Path:
        return self.root / "reports" / run_id
