"""The artifact store: a copy of the workspace's artifacts on an object store (issue 13, item 5).

``fdptm store --set s3://bucket/prefix`` (any fsspec URL whose driver is installed) names a
workspace's store. The setting lives in the catalog (``settings``): the workspace's own
DuckDB file, which stays local with its lock and ``secret.key``, or a PostgreSQL catalog,
where every host that shares it reads the same store. The store mirrors the workspace's
layout:
``<store>/datasets/...`` and ``<store>/internal/...`` are internal (raw text and tokens),
``<store>/releases/...`` are the public releases. fdptm sets no ACL: the bucket must be
private to the organisation, as the workspace directory is.

**Writes are local first.** An artifact is written atomically to the workspace
(``storage.artifacts``), registered in the catalog, then uploaded to ``<store>/<its path>``
(an S3 PUT is atomic: a reader sees the old object or the new one). The catalog records
which store holds each artifact (``artifacts.stored_in``; a new registration resets it), so
a registered artifact whose upload failed is *pending*, not lost. Uploads inside a run are
best effort (``try_sync``): a store that is down never stops a stage between a DP
mechanism and the registration of its output, so no mechanism runs twice on one charge.
At a command's end ``settle`` uploads everything pending and says so when the store cannot
take it (a warning); ``fdptm store --sync`` uploads it later.

**Reads go through ``local``.** A registered file missing from the workspace (removed by
``fdptm store --evict`` to free the disk, or lost with it) is fetched from the store into a
private temporary file, checked against the catalog's sha256, and renamed into place; a
copy that does not match is refused, never used.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa

from fdptm.errors import BadInputError, FdptmError
from fdptm.storage.artifacts import atomic_write, intact, read_parquet
from fdptm.storage.workspace import Workspace, storage_error

SETTING = "artifact_store"
_CONFIG_HELP = (
    "check the URL, the store's credentials and endpoint (for S3: AWS_ACCESS_KEY_ID, "
    "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL) and that the bucket exists"
)


class StoreUnavailableError(FdptmError):
    """An upload to (or a fetch from, or a delete on) the artifact store failed; local work
    is intact."""


class StoreCopyError(BadInputError):
    """The store has no copy of an artifact, or one that does not match its hash."""


class StorePendingWarning(UserWarning):
    """Artifacts are registered and intact in the workspace but not in the store yet."""


def filesystem(url: str, what: str):
    """fsspec's filesystem for ``url`` and the path inside it; a clear error when the
    scheme's driver is not installed (``what`` names the use, for the message)."""
    import fsspec

    scheme = urlsplit(url).scheme
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        extra = " (pip install 'fdptm[s3]')" if scheme in ("s3", "s3a") else ""
        raise BadInputError(
            f"cannot use {scheme}:// {what}: fsspec has no installed driver for {scheme!r}{extra}"
        ) from exc


def check_url(url: str) -> str:
    """``url`` as a store URL (no trailing '/'); refused when it is not a URL or carries a
    credential (user information or a query), which the catalog would then hold."""
    parts = urlsplit(url)
    if "@" in url or parts.query or parts.fragment:
        raise BadInputError(
            "the artifact store URL carries user information or a query: give credentials "
            "through the driver's configuration (for S3: AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE), never in the URL the catalog records"
        )
    if "://" not in url or not parts.scheme or not parts.netloc or parts.scheme == "file":
        raise BadInputError(
            "the artifact store is not an object store URL: name a bucket and prefix, such "
            "as s3://bucket/fdptm (a local or mounted directory is not supported: fdptm "
            "could not keep its copies private and atomic there)"
        )
    filesystem(url, "artifact stores")
    return url.rstrip("/")


@dataclass(frozen=True)
class ArtifactStore:
    """One store URL; artifacts live at ``<url>/<path in the workspace>``."""

    url: str

    def _remote(self, rel: str):
        fs, root = filesystem(self.url, "artifact stores")
        return fs, f"{root.rstrip('/')}/{rel}"

    def put(self, path: Path, rel: str) -> None:
        """Upload the local file ``path`` as ``rel``."""
        try:
            fs, remote = self._remote(rel)
            fs.put_file(str(path), remote)
        except Exception as exc:  # the driver's own errors: network, credentials, bucket
            raise StoreUnavailableError(
                f"could not upload {rel} to the artifact store {self.url} "
                f"({type(exc).__name__}): {_CONFIG_HELP}. The artifact is intact and "
                "registered in the workspace; run `fdptm store --sync` once the store is "
                "reachable"
            ) from exc

    def fetch(self, rel: str, path: Path, sha256: str) -> None:
        """Copy ``rel`` to ``path`` (0600, atomically) after checking it hashes to ``sha256``."""

        def download(tmp: Path) -> None:
            try:
                fs, remote = self._remote(rel)
                fs.get_file(remote, str(tmp))
            except FileNotFoundError:
                raise StoreCopyError(
                    f"artifact {rel} is missing from the workspace and from the artifact "
                    f"store {self.url}; restore it from a backup"
                ) from None
            except Exception as exc:
                if isinstance(exc, OSError) and storage_error(exc, path) is not None:
                    raise  # a full disk or a read-only workspace: atomic_write says so
                raise StoreUnavailableError(
                    f"could not fetch {rel} from the artifact store {self.url} "
                    f"({type(exc).__name__}): {_CONFIG_HELP}"
                ) from exc

        def check(sha: str) -> None:
            if sha != sha256:
                raise StoreCopyError(
                    f"the artifact store's copy of {rel} does not match the hash recorded "
                    "in the catalog: it was changed after the upload; restore the object "
                    "from a backup of the store"
                )

        atomic_write(path, download, check)

    def delete(self, rels: Iterable[str]) -> None:
        """Remove the objects ``rels`` (an absent one is not an error)."""
        rels = list(rels)
        if not rels:
            return
        try:
            fs, _ = self._remote("")
            remotes = [self._remote(rel)[1] for rel in rels]
            present = [r for r in remotes if fs.exists(r)]
            if present:
                fs.rm(present)
        except Exception as exc:
            raise StoreUnavailableError(
                f"could not delete {len(rels)} objects from the artifact store {self.url} "
                f"({type(exc).__name__}): {_CONFIG_HELP}. Nothing was removed from the "
                "catalog; run the command again once the store is reachable"
            ) from exc

    def probe(self) -> None:
        """Write, read back and delete a small object: the store is usable before it is
        recorded (bad credentials or a missing bucket are refused up front)."""
        rel = f".fdptm-probe-{secrets.token_hex(8)}"
        body = secrets.token_bytes(16)
        try:
            fs, remote = self._remote(rel)
            fs.pipe_file(remote, body)
            back = fs.cat_file(remote)
            fs.rm_file(remote)
        except BadInputError:
            raise
        except Exception as exc:
            raise BadInputError(
                f"the artifact store {self.url} cannot be used ({type(exc).__name__}): "
                f"{_CONFIG_HELP}; nothing was changed"
            ) from exc
        if back != body:
            raise BadInputError(
                f"the artifact store {self.url} returned other bytes than were written; "
                "nothing was changed"
            )


def of(workspace: Workspace) -> ArtifactStore | None:
    """The workspace's store, or None when its artifacts live only in the workspace."""
    from fdptm.storage.catalog import Catalog

    rows = Catalog(workspace).query("SELECT value FROM settings WHERE key = ?", [SETTING])
    return ArtifactStore(rows[0]["value"]) if rows else None


def local(workspace: Workspace, rel: str, sha256: str) -> Path:
    """The workspace path of the registered artifact ``rel``, fetched from the store first
    when the workspace has no copy (a workspace without a store: the path as it is, and the
    caller's ``verify`` says it is missing)."""
    path = workspace.root / rel
    if not path.exists() and (store := of(workspace)) is not None:
        store.fetch(rel, path, sha256)
    return path


def intact_copy(workspace: Workspace, row: dict) -> bool:
    """Whether the registered artifact ``row`` has an intact copy in the workspace, fetched
    from the store when the local one is missing or damaged (False when no good copy exists
    anywhere; an unreachable store is an error, not a missing copy)."""
    path = workspace.root / row["path"]
    if intact(path, row["sha256"]):
        return True
    store = of(workspace)
    if store is None:
        return False
    try:
        store.fetch(row["path"], path, row["sha256"])
    except StoreCopyError:
        return False
    return True


def read(workspace: Workspace, row: dict, columns: list[str] | None = None) -> pa.Table:
    """The table of a registered artifact (``row``: a catalog row, with its ``path`` and
    ``sha256``; only ``columns`` when given), fetched first when need be, hash checked."""
    return read_parquet(local(workspace, row["path"], row["sha256"]), row["sha256"], columns)


def sync(workspace: Workspace, names: Iterable[str] | None = None) -> int:
    """Upload the registered artifacts (all, or ``names``) the store does not hold yet; how
    many were uploaded. Each is checked against its hash before it leaves the workspace.

    Every pending artifact with an intact copy here is uploaded before any problem is
    raised, so one bad file never holds back the others. A pending artifact this workspace
    has no file for is an error on a workspace's own DuckDB catalog (it was lost). On a
    shared (PostgreSQL) catalog it is another host's, which uploads it itself (at its
    command's end, or its ``fdptm store --sync``): skipped unless ``names`` asks for it. A
    copy here that does not match its hash is always an error.
    """
    from fdptm.storage.catalog import Catalog

    store = of(workspace)
    if store is None:
        return 0
    catalog = Catalog(workspace)
    sql = "SELECT name, path, sha256 FROM artifacts WHERE stored_in IS DISTINCT FROM ?"
    params: list = [store.url]
    if names is not None:
        names = list(names)
        if not names:
            return 0
        sql += f" AND name IN ({', '.join('?' * len(names))})"
        params.extend(names)
    bad: list[str] = []
    uploaded = 0
    for row in catalog.query(sql + " ORDER BY name", params):
        path = workspace.root / row["path"]
        if not intact(path, row["sha256"]):
            elsewhere = names is None and catalog.dialect != "duckdb" and not path.exists()
            if not elsewhere:
                bad.append(row["path"])
            continue
        store.put(path, row["path"])
        catalog.execute(
            "UPDATE artifacts SET stored_in = ? WHERE name = ? AND sha256 = ?",
            [store.url, row["name"], row["sha256"]],
        )
        uploaded += 1
    if bad:
        raise BadInputError(
            f"cannot upload {', '.join(bad)} to the artifact store {store.url}: the "
            "workspace's copy is missing or does not match the catalog's hash (every other "
            f"pending artifact was uploaded: {uploaded}); restore it from a backup"
        )
    return uploaded


def try_sync(workspace: Workspace, names: Iterable[str] | None = None) -> None:
    """``sync``, best effort: what the store cannot take now stays pending (inside a run,
    between a mechanism and its next stage, a store that is down must not stop the run)."""
    with contextlib.suppress(StoreUnavailableError):
        sync(workspace, names)


def settle(workspace: Workspace) -> str | None:
    """At a command's end: upload everything pending; when the store cannot take it, the
    warning for the user (the artifacts are registered and intact in the workspace), else
    None. Commands print it; the Python API raises it as a ``StorePendingWarning``."""
    try:
        sync(workspace)
    except (StoreUnavailableError, BadInputError) as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Status:
    """What ``fdptm store`` shows: the store and its artifacts' state."""

    store: str | None
    artifacts: int
    uploaded: int
    local: int


def status(workspace: Workspace) -> Status:
    """The store, how many registered artifacts it holds and how many have a local copy."""
    from fdptm.storage.catalog import Catalog

    store = of(workspace)
    rows = Catalog(workspace).query("SELECT path, stored_in FROM artifacts")
    url = None if store is None else store.url
    return Status(
        url,
        len(rows),
        sum(1 for r in rows if url is not None and r["stored_in"] == url),
        sum(1 for r in rows if (workspace.root / r["path"]).exists()),
    )


def _fetch_all(workspace: Workspace) -> None:
    """A local copy of every registered artifact (from the current store where evicted):
    what a change of store needs before the old one stops being read."""
    from fdptm.storage.catalog import Catalog

    for row in Catalog(workspace).query("SELECT path, sha256 FROM artifacts ORDER BY name"):
        local(workspace, row["path"], row["sha256"])


def set_store(workspace: Workspace, url: str) -> int:
    """Make ``url`` the workspace's store (after probing it) and upload every artifact to
    it; how many were uploaded. Artifacts evicted from the workspace come back from the
    previous store first."""
    from fdptm.storage.catalog import Catalog, now

    store = ArtifactStore(check_url(url))
    store.probe()
    _fetch_all(workspace)
    Catalog(workspace).execute(
        "INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?) ON CONFLICT (key)"
        " DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        [SETTING, store.url, now()],
    )
    return sync(workspace)


def unset_store(workspace: Workspace) -> None:
    """Keep the artifacts in the workspace only: every evicted one is fetched back first.
    The store's objects are left where they are (the organisation's to keep or remove)."""
    from fdptm.storage.catalog import Catalog

    _fetch_all(workspace)
    with Catalog(workspace).transaction() as con:
        con.execute("DELETE FROM settings WHERE key = ?", [SETTING])
        con.execute("UPDATE artifacts SET stored_in = NULL")


def evict(workspace: Workspace) -> tuple[int, int]:
    """Remove the workspace's copies of internal artifacts the store holds (releases stay);
    (files removed, bytes freed). Refused while a run is going: it may be reading them."""
    from fdptm.storage import recovery
    from fdptm.storage.catalog import Catalog

    store = of(workspace)
    if store is None:
        raise BadInputError(
            "this workspace has no artifact store, so its artifacts have no other copy: set "
            "one first with `fdptm store --set s3://bucket/prefix`"
        )
    recovery.recover(workspace)
    catalog = Catalog(workspace)
    if catalog.query("SELECT 1 FROM runs WHERE status = 'running' LIMIT 1"):
        raise BadInputError(
            "a run is going in this workspace and may be reading its artifacts: evict once "
            "it has finished; nothing was removed"
        )
    rows = catalog.query(
        "SELECT path FROM artifacts WHERE visibility = 'internal' AND stored_in = ?",
        [store.url],
    )
    files, freed = 0, 0
    for row in rows:
        path = workspace.root / row["path"]
        if path.is_file():
            freed += path.stat().st_size
            path.unlink()
            files += 1
    return files, freed
