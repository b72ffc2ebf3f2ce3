"""``fdptm verify --dataset NAME``: check a dataset's ledger and releases against the hash
chain (``storage.chain``), for an auditor.

Four checks, each reported with what it found (``Finding``) and the verdict failing on any:

1. the chain: events numbered 1..n without a gap, each ``prev_hash`` the previous event's
   hash (64 zeros for the first), each hash recomputed from its event;
2. the rows: every ledger entry, the cap and every release row equal to the last image the
   chain holds of them (an edited row, a deleted one, one added outside fdptm);
3. the releases: each published release's manifest has the sha256 its chained row records,
   and its files match the manifest and its signature (``fdptm.release.load_release``; with
   ``key``, by that publisher), fetched from the artifact store where this host has no copy;
4. the spend: the spent and reserved entries fit the lifetime cap (exact arithmetic).

``head`` (``seq:hash``, as an earlier ``verify`` printed it) also checks that the chain
still holds that event unchanged: a chain cut back or rewritten since then fails.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from fdptm.errors import BadInputError, FdptmError
from fdptm.storage import chain
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.storage.objectstore import local
from fdptm.storage.workspace import Workspace


@dataclass
class DatasetVerification:
    """What ``verify_dataset`` found: ``problems`` empty means every check passed."""

    dataset: str
    events: int
    head: str
    releases: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def parse_head(text: str) -> tuple[int, str]:
    """``seq:hash`` as printed by ``fdptm verify``."""
    seq, _, digest = text.partition(":")
    if not seq.isdigit() or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise BadInputError(
            f"--head {text!r} is not SEQ:HASH (a number, a colon and 64 hex digits), as "
            "`fdptm verify --dataset NAME` prints it"
        )
    return int(seq), digest


def verify_dataset(
    workspace: Workspace,
    dataset: str,
    head: tuple[int, str] | None = None,
    *,
    files: bool = True,
    key: str | None = None,
) -> DatasetVerification:
    """Every check of the module docstring on ``dataset`` (``files=False``: the release
    files are not read, only their recorded hashes chained; ``key``: the publisher's
    public key, which every release must be signed by)."""
    catalog = Catalog(workspace)
    with catalog.connect() as con:
        events = chain.events(con, dataset)
        current = chain.images(con, dataset)
    if not events and catalog.dataset(dataset) is None:
        raise BadInputError(f"no dataset named {dataset!r} in the catalog {catalog.where}")
    problems = _chain_problems(dataset, events)
    last = {(e["kind"], e["subject"]): e["body"] for e in events}
    for row_key in sorted(set(last) | set(current)):
        kind, subject = row_key
        if row_key not in current:
            problems.append(f"{kind} {subject!r} is in the chain but not in the catalog: deleted")
        elif row_key not in last:
            problems.append(f"{kind} {subject!r} is in the catalog but not in the chain: added")
        elif current[row_key] != last[row_key]:
            problems.append(f"{kind} {subject!r} differs from its last record in the chain")
    if head is not None:
        seq, digest = head
        held = next((e["hash"] for e in events if e["seq"] == seq), None)
        if held != digest:
            problems.append(
                f"the chain no longer holds event {seq} with hash {digest[:12]}...: it was cut "
                "back or rewritten since that head was taken"
            )
    releases = [r for r in catalog.query("SELECT * FROM releases WHERE dataset = ?", [dataset])]
    for row in releases if files else []:
        problems.extend(_release_problems(workspace, catalog, row, key))
    over = Ledger(catalog).over_cap(dataset)
    if over is not None:
        problems.append(over)
    tip = f"{len(events)}:{events[-1]['hash']}" if events else f"0:{chain.GENESIS}"
    return DatasetVerification(dataset, len(events), tip, len(releases), problems)


def _chain_problems(dataset: str, events: list[dict]) -> list[str]:
    problems, prev = [], chain.GENESIS
    for i, e in enumerate(events, start=1):
        if e["seq"] != i:
            problems.append(f"event {i} is missing from the chain (the next one is {e['seq']})")
            return problems
        if e["prev_hash"] != prev:
            problems.append(f"event {i} does not follow event {i - 1}: an event was changed")
        digest = chain.event_hash(prev, dataset, i, e["kind"], e["subject"], e["body"])
        if e["hash"] != digest:
            problems.append(f"event {i} ({e['kind']} {e['subject']!r}) was changed")
        prev = e["hash"]
    return problems


def _release_problems(
    workspace: Workspace, catalog: Catalog, row: dict, key: str | None
) -> list[str]:
    """The published files of release ``row`` against the manifest hash the chain holds."""
    from fdptm.release import load_release

    run_id, where = row["run_id"], row["path"]
    files = catalog.query(
        "SELECT path, sha256 FROM artifacts WHERE name LIKE ?", [f"release/{run_id}/%"]
    )
    try:
        for f in files:
            local(workspace, f["path"], f["sha256"])
        manifest = workspace.root / where / "manifest.json"
        digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    except (OSError, FdptmError) as exc:
        return [f"release {run_id}: its files cannot be read ({exc})"]
    if digest != row["manifest_sha256"]:
        return [f"release {run_id}: manifest.json differs from the manifest that was published"]
    try:
        load_release(workspace.root / where, key)
    except BadInputError as exc:
        return [f"release {run_id}: {exc}"]
    return []
