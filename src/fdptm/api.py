"""The Python API: what the CLI does, as objects (``fdptm.Workspace``).

    ws = fdptm.Workspace("fdptm-workspace")
    pheme = ws.dataset("pheme")
    pheme.ingest("pheme.json")
    release = pheme.release(epsilon=3, delta=1e-5, topics=5)   # a fdptm.Release
    pheme.remaining()                                          # what the lifetime cap has left

Every call goes through the same code as the corresponding command: the release request
model (``fdptm.request.ReleaseRequest``: same fields, defaults and validation), the
pre-flight checks before anything is reserved, the release flow, the ledger. Errors are the
CLI's typed exceptions instead of exit codes: ``BadInputError`` (exit 2: nothing was spent),
``BudgetRefusedError`` (3), ``AuditFailedError`` (4). Prefect writes nothing to the
terminal: its run logs go to its API (the UI) and to Python's ``logging`` under ``prefect``,
where the application chooses whether to show them (``fdptm.flows.running``).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from fdptm.errors import BadInputError
from fdptm.planning import Prediction
from fdptm.release import Release, load_release
from fdptm.request import ReleaseRequest
from fdptm.storage import workspace as storage
from fdptm.storage.objectstore import StorePendingWarning


def _use_catalog(url: str) -> None:
    from fdptm.storage.postgres import check_url, redacted

    url = check_url(url)
    current = os.environ.get(storage.CATALOG_ENV_VAR)
    if current and current != url:
        raise BadInputError(
            f"this process already uses the catalog {redacted(current)}; one process works "
            f"with one catalog (flows resolve it from ${storage.CATALOG_ENV_VAR}): use "
            f"another process for {redacted(url)}"
        )
    os.environ[storage.CATALOG_ENV_VAR] = url


class Workspace:
    """A workspace directory: its datasets, releases, audits (created on first write).

    ``catalog``: a PostgreSQL URL (``postgresql://user@host:port/db``) holding the catalog
    and ledger that several hosts share, as ``fdptm --catalog`` takes; default
    ``$FDPTM_CATALOG``, else the workspace's own DuckDB file. Every flow and task of this
    process resolves its catalog from ``$FDPTM_CATALOG``, so giving one sets it for the
    process, and a second, different one in the same process is refused.
    """

    def __init__(self, path: str | Path | None = None, *, catalog: str | None = None) -> None:
        if catalog is not None:
            _use_catalog(catalog)
        self._workspace = storage.Workspace.resolve(path)

    @property
    def path(self) -> Path:
        return self._workspace.root

    def __repr__(self) -> str:
        return f"fdptm.Workspace({str(self.path)!r})"

    def dataset(self, name: str) -> Dataset:
        """The dataset ``name`` (it exists once something was ingested into it)."""
        storage.check_name(name)
        return Dataset(self, name)

    def datasets(self) -> list[str]:
        """The names of the ingested datasets."""
        rows = self._catalog().query("SELECT name FROM datasets ORDER BY name")
        return [r["name"] for r in rows]

    def releases(self) -> list[str]:
        """Run ids of the published releases, oldest first."""
        rows = self._catalog().query("SELECT run_id FROM releases ORDER BY released_at")
        return [r["run_id"] for r in rows]

    def release(self, run_id: str, key: str | os.PathLike | bytes | None = None) -> Release:
        """The published release of run ``run_id``, its signature checked (against the
        public ``key`` too when given: ``fdptm.load_release``)."""
        rows = self._catalog().query("SELECT path FROM releases WHERE run_id = ?", [run_id])
        if not rows:
            raise BadInputError(f"no published release with run id {run_id!r} in {self.path}")
        return load_release(self.path / rows[0]["path"], key)

    def public_key(self) -> str:
        """``fdptm verify --public-key``: the public key releases are signed with (PEM, the
        text of a release's ``signer.pub``), to give auditors out of band; the workspace's
        key is created if no release made it yet (``$FDPTM_SIGNING_KEY`` overrides it)."""
        from fdptm import signing

        return signing.public_pem(self._workspace)

    def report(self, run_id: str) -> Path:
        """``fdptm report``: the release's HTML report (public); returns its path."""
        from fdptm.tasks.report import write_report

        return write_report(self._workspace, run_id)

    def audit(
        self,
        run_id: str,
        *,
        shadows: int = 16,
        mode: str = "online",
        confidence: float = 0.95,
        workers: int | None = None,
        seed: int | None = None,
    ) -> dict:
        """``fdptm audit``: the internal report (NOT DP; never publish it). Raises
        ``AuditFailedError`` when a bound exceeds its claim."""
        from fdptm.flows import running
        from fdptm.tasks.audit import AuditSpec

        if workers is not None and workers < 1:
            raise BadInputError(f"workers must be >= 1, got {workers}")
        spec = AuditSpec(run_id, str(self.path), shadows, mode, seed, confidence)
        return running.run_flow("fdptm.flows.audit:audit", spec, workers, None, False)

    def store(self):
        """``fdptm store``: the artifact store (``storage.objectstore.Status``: its URL or
        None, the artifacts, how many it holds and how many have a local copy)."""
        from fdptm.storage import objectstore

        return objectstore.status(self._workspace.require())

    def set_store(self, url: str | None) -> int:
        """``fdptm store --set URL`` (``None``: ``--unset``); how many artifacts were uploaded."""
        from fdptm.storage import objectstore

        workspace = self._workspace.require()
        if url is None:
            objectstore.unset_store(workspace)
            return 0
        return objectstore.set_store(workspace, url)

    def sync_store(self) -> int:
        """``fdptm store --sync``: upload what a failed upload left pending; how many."""
        from fdptm.storage import objectstore

        return objectstore.sync(self._workspace.require())

    def evict(self) -> tuple[int, int]:
        """``fdptm store --evict``: (local copies removed, bytes freed)."""
        from fdptm.storage import objectstore

        return objectstore.evict(self._workspace.require())

    def _catalog(self):
        from fdptm.storage.catalog import Catalog

        return Catalog(self._workspace.require())


class Dataset:
    """One dataset of a workspace: ingest into it, release it, read its ledger."""

    def __init__(self, workspace: Workspace, name: str) -> None:
        self.workspace = workspace
        self.name = name

    def __repr__(self) -> str:
        return f"{self.workspace!r}.dataset({self.name!r})"

    def ingest(self, path: str | Path, **options: Any):
        """``fdptm ingest``: append ``path``'s valid rows as a new batch; ``options`` are
        ``fmt``, ``unit``, ``public``, ``max_text_chars`` and the ``*_column`` names.
        Returns the batch's ``IngestResult`` (its counts are internal, not DP)."""
        import inspect

        from fdptm.tasks.ingest import ingest

        accepted = [
            n for n, p in inspect.signature(ingest).parameters.items() if p.kind == p.KEYWORD_ONLY
        ]
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise BadInputError(f"ingest has no option(s) {unknown}; its options are {accepted}")
        return ingest(path, self.name, self.workspace._workspace, **options)

    def release(
        self,
        request: ReleaseRequest | None = None,
        /,
        *,
        dask_address: str | None = None,
        **fields: Any,
    ) -> Release:
        """``fdptm release``: a request, or its fields (``epsilon``, ``delta``, ``topics``,
        ...; docs/reference/cli.md), for this dataset in this workspace, with ``dp-vi``'s
        statistics on the Dask cluster at ``dask_address`` if given. Returns the published
        ``Release``."""
        from fdptm.flows import running
        from fdptm.parallel import check_cluster
        from fdptm.tasks import run as lifecycle

        request = self._request(request, fields)
        lifecycle.preflight(request)
        check_cluster(dask_address)
        outcome = running.run_flow("fdptm.flows.release:release", request, False, dask_address)
        if outcome["store_pending"]:
            warnings.warn(outcome["store_pending"], StorePendingWarning, stacklevel=2)
        return load_release(outcome["release_path"])

    def plan(self, request: ReleaseRequest | None = None, /, **fields: Any) -> Prediction:
        """``fdptm plan``: the prediction for a release request, or its fields (with
        ``units`` and ``tokens_per_unit``), on this dataset; nothing is read or spent. A
        lifetime cap that would refuse the release now does not stop a plan (``fdptm plan``
        notes it)."""
        from fdptm.tasks import run as lifecycle

        prediction, _ = lifecycle.plan(self._request(request, fields))
        return prediction

    def backfill(
        self,
        request: ReleaseRequest | None = None,
        /,
        *,
        by: str,
        first: str | None = None,
        last: str | None = None,
        dask_address: str | None = None,
        **fields: Any,
    ) -> list[dict]:
        """``fdptm backfill``: one release per partition of the range (``by`` batch, day,
        week or month; ``first``/``last`` batch numbers or ISO days) that has none of this
        request yet. Returns each partition's outcome (released, resumed, skipped, failed);
        when every partition is released already, without starting Prefect."""
        from fdptm.flows import running
        from fdptm.tasks.backfill import nothing_to_run, plan_backfill

        request = self._request(request, fields)
        planned = plan_backfill(request, by, first, last)  # refusals before Prefect starts
        if nothing_to_run(planned):  # a no-op: no flow, so no Prefect
            return [p.left_alone() for p in planned]
        outcome = running.run_flow(
            "fdptm.flows.backfill:run_backfill",
            request,
            by,
            first,
            last,
            dask_address,
            api=dask_address is None,  # Dask workers would get this host's loopback URL
        )
        return outcome["partitions"]

    def partitions(self, counts: bool = False, by: str = "day") -> list[dict]:
        """``fdptm partitions --json``: the batches (number, source, timed, ingest time);
        with ``counts`` the documents per batch and ``by`` window instead: internal counts
        of private data, never to publish or to choose a release's scope from."""
        from fdptm.storage import partitions

        batches = self._existing().batches(self.name)
        if counts:
            return partitions.counts(self.workspace._workspace, batches, by)
        return partitions.listing(batches)

    def _request(self, request: ReleaseRequest | None, fields: dict[str, Any]) -> ReleaseRequest:
        """``request`` (or one built from ``fields``) for this dataset in this workspace."""
        if request is None:
            request = ReleaseRequest.build(dataset=self.name, **fields)
        elif fields:
            request = request.replace(**fields)
        if request.dataset != self.name:
            raise BadInputError(
                f"the request is for dataset {request.dataset!r}, not {self.name!r}; use "
                f"workspace.dataset({request.dataset!r}).release(...)"
            )
        if request.workspace is not None and (
            storage.Workspace.resolve(request.workspace).root != self.workspace.path
        ):
            raise BadInputError(
                f"the request names workspace {request.workspace!r}, not {self.workspace.path}; "
                "leave workspace out of a request made through a Workspace"
            )
        return request.replace(workspace=str(self.workspace.path))

    def compare(
        self, epsilon: float, delta: float, topics: int, mechanisms: list[str], **options: Any
    ) -> dict:
        """``fdptm compare``: an internal comparison table (NOT DP; spends nothing);
        ``options`` as the compare flow takes them (``iterations``, ``seed``, ...)."""
        from fdptm.flows import running

        return running.run_flow(
            "fdptm.flows.compare:compare_flow",
            dataset=self.name,
            epsilon=epsilon,
            delta=delta,
            topics=topics,
            mechanisms=list(mechanisms),
            workspace=str(self.workspace.path),
            **options,
        )

    def budget(self) -> dict:
        """``fdptm budget --json``: cap, lifetime totals per unit, what remains, entries."""
        from fdptm.storage.ledger import Ledger, budget_report

        return budget_report(Ledger(self._existing()), self.name)

    def remaining(self) -> tuple[float, float] | None:
        """(epsilon, delta) the lifetime cap has left, or None without a cap."""
        left = self.budget().get("remaining")
        return None if left is None else (left["epsilon"], left["delta"])

    def set_cap(self, epsilon: float, delta: float, unit: str | None = None) -> None:
        """``fdptm budget --cap``: the dataset's lifetime cap (at ``unit``, default its own)."""
        from fdptm.privacy.adjacency import Adjacency
        from fdptm.storage.ledger import Ledger

        try:
            adjacency = None if unit is None else Adjacency(unit)
        except ValueError:
            raise BadInputError(
                f"unknown unit {unit!r}; one of {[a.value for a in Adjacency]}"
            ) from None
        Ledger(self._existing()).set_cap(self.name, epsilon, delta, adjacency)

    def _existing(self):
        catalog = self.workspace._catalog()
        if catalog.dataset(self.name) is None:
            raise BadInputError(f"no dataset named {self.name!r}; ingest it first")
        return catalog
