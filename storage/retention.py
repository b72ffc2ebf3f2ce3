"""Retention: remove internal artifacts of finished runs that nothing needs any more.

A release run stores its stages' outputs under ``internal/runs/<run_id>/`` so that a failed
run can resume and a released one can be audited (about 0.5 MB per release on PHEME);
nothing removed them. ``collect`` removes, after closing dead runs (``storage.recovery``):

* every internal artifact of a run that can never resume or be audited: a compare run, a
  release refused or failed with nothing spent;
* of a published release, everything but the audit's inputs (the bounded and sanitized
  tokens); those too once the release has been audited, or with ``audit_inputs=True``
  (the release then cannot be audited: ``fdptm audit`` says so).

With an artifact store (``storage.objectstore``), the store's copies go too, in one delete
before the catalog rows: a store that cannot be reached leaves the catalog as it was (a
delete that fails part-way leaves rows of artifacts the next call collects). Copies in an
earlier store (``fdptm store --set`` to another URL) are left to the organisation.

It never touches a failed run that spent (``fdptm release --resume`` needs its outputs), a
running one, a release's published files, the ledger, the batches or the token caches.
The catalog rows go in one transaction before the files, so a crash in between leaves
files no row points at (removed by the next ``collect``), never a row without its file.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from fdptm.storage import objectstore, recovery
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

AUDIT_INPUTS = ("bounded_tokens", "sanitized_tokens")


@dataclass(frozen=True)
class Collected:
    """What ``collect`` removed of one run."""

    run_id: str
    artifacts: tuple[str, ...]
    bytes: int


def collect(
    workspace: Workspace, dataset: str | None = None, *, audit_inputs: bool = False
) -> list[Collected]:
    """Remove what nothing needs (module docstring); what was removed, per run."""
    recovery.recover(workspace, dataset)
    catalog = Catalog(workspace)
    store = objectstore.of(workspace)
    root = workspace.root / "internal" / "runs"
    plans: list[tuple[str, tuple[str, ...], list[str]]] = []
    paths: list[str] = []
    with catalog.transaction() as con:
        runs = con.execute(
            "SELECT r.run_id, r.kind,"
            " EXISTS (SELECT 1 FROM releases rel WHERE rel.run_id = r.run_id) AS released,"
            " EXISTS (SELECT 1 FROM audit_results a WHERE a.run_id = r.run_id) AS audited,"
            " EXISTS (SELECT 1 FROM ledger l WHERE l.run_id = r.run_id AND l.state = 'spent')"
            " AS spent FROM runs r WHERE r.status <> 'running' AND r.kind <> 'ingest'"
            + (" AND r.dataset = ?" if dataset else "")
            + " ORDER BY r.started_at",
            [dataset] if dataset else [],
        ).fetchall()
        for run_id, kind, released, audited, spent in runs:
            if kind == "release" and spent and not released:
                continue  # a failed run that spent: --resume needs its outputs
            keep = AUDIT_INPUTS if released and not (audited or audit_inputs) else ()
            prefix = f"run/{run_id}/"
            rows = [
                (n, path)
                for (n, path) in con.execute(
                    "SELECT name, path FROM artifacts WHERE name LIKE ?", [prefix + "%"]
                ).fetchall()
                if n.removeprefix(prefix) not in keep
            ]
            plans.append((run_id, keep, [n for n, _ in rows]))
            paths += [path for _, path in rows]
        if store is not None:  # by path, uploaded or pending (an upload may have landed)
            store.delete(paths)
        for _, _, names in plans:
            for name in names:
                con.execute("DELETE FROM artifacts WHERE name = ?", [name])
    out = []
    for run_id, keep, names in plans:
        folder = root / run_id
        files = (
            [p for p in folder.iterdir() if p.name.removesuffix(".parquet") not in keep]
            if folder.is_dir()
            else []
        )
        size = sum(p.stat().st_size for p in files if p.is_file())
        for p in files:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        if names or files:
            out.append(Collected(run_id, tuple(sorted(names)), size))
    return out
