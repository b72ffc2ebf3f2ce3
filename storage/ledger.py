"""The privacy ledger: reservations, spends and refunds, per stage, run and dataset.

Protocol (DESIGN.md section 3, "Spend protocol"):

1. Before any stage runs, ``reserve`` inserts one ``reserved`` entry per stage of the run's
   budget plan, in one transaction that first checks the dataset's lifetime cap. A run that
   would exceed the cap is refused (``BudgetRefusedError``, exit code 3) and nothing is
   inserted. Because the check and the inserts share one serialised catalog connection,
   two runs at once can never overspend: the second sees the first's reservation.
2. When the run first reads private data (PRE opens the ingested rows), ``commit`` turns
   every reservation of the run into a spend, in one transaction, before the read. From
   then on the whole budget is gone, whether or not the run later succeeds: a refund that
   depended on how the run went after reading (a failure inside PRE, bounding or a
   mechanism, a crash, a timeout) would itself be a non-DP function of the data, visible to
   the next run through the ledger (``--releases-left``).
3. A run that failed (or died) before reading anything is refunded (``refund``). The only
   refund after the first read is of a stage whose decision not to run is a function of
   DP outputs alone (post-processing), e.g. M2 when the DP vocabulary is smaller than k
   (``refund_unused``).
4. A resumed run whose DP stage had started but stored nothing reserves that stage again
   (``replace_lost``): the lost attempt stays charged.

Reserved entries count against the cap exactly like spent ones, so a crash at any point
leaves the ledger conservative and consistent: an entry left ``reserved`` by a crashed run
stays charged. The cap is a privacy filter (Rogers et al. 2016): the composed spend never
exceeds it, even when a run's parameters depend on earlier private outputs.

Arithmetic is exact: totals are summed as decimals of each stored float's shortest repr
(``fdptm.privacy.accountant.compose``), so a cap of (10, 5e-5) holds exactly five runs of
(2, 1e-5), and a refusal message's "needs" and "remaining" come from the same numbers.

Public datasets (declared with ``fdptm ingest --public`` when they are created, never
afterwards) are not private data: the ledger never charges them (``reserve``, ``check`` and
``set_cap`` refuse them) and ``require_public`` is the one gate through which a release reads
a dataset free of charge, as its vocabulary or prior. A private dataset never passes it.

Entries are stored in each mechanism's own adjacency. Totals are composed at a chosen unit
with ``fdptm.privacy.accountant.compose``, converting explicitly (and refusing entries that
are weaker than the unit: a word-level spend has no author-level bound).

Parallel composition. Every entry records its run's scope (``storage.partitions.Scope``:
the batches and days it read; an entry from before scopes were recorded reads everything).
At a unit whose neighbours differ inside one atom, the total is the maximum over atoms of
the sequential composition of the entries whose scope covers that atom:

    Let D and D' differ by one unit x (add/remove at the total's unit), and let x lie in
    atom a. A run j reads only D restricted to its scope S_j, and applies contribution
    bounding and every mechanism to that restriction. If a is not in S_j, run j reads the
    same data on D and D' and its output distribution is the same, whatever earlier
    outputs chose its parameters; if a is in S_j, run j is (eps_j, delta_j)-DP in x. By
    adaptive sequential composition over the runs whose scope covers a, the whole ledger
    is (sum over those eps_j, sum over those delta_j)-DP for this pair; the worst pair is
    the worst atom. Atoms are taken from the scopes alone (every atom a scope covers,
    with or without documents), so the total depends on no private fact.

This needs x to lie in one atom, for every neighbour the unit allows:

- a document (document-level datasets, and the document level of author datasets): it
  has one batch and one timestamp, so one atom (ingest refuses a doc id seen in an
  earlier batch). Contribution bounding runs inside each run's scope, so adding a
  document can only evict documents a run covering its atom reads.
- an author of an author-level dataset writes in many batches and weeks: those atoms are
  not disjoint in authors, so the author level composes sequentially (every entry counts),
  unless the dataset was created with author buckets (``fdptm ingest --author-buckets N``):
  an author's bucket is a keyed hash of the author id alone, so every author lies in one
  bucket, and at the author level the atoms are the buckets (a run without ``--buckets``
  covers them all). Bounding and every mechanism run inside the run's buckets, so adding
  an author changes only what runs covering its bucket read.
- replace notions (``*-replace``) let a replacement move x from one atom to another, and a
  replace-DP run whose scope holds only one side sees an addition or a removal, which
  replace-one DP does not bound: a release with a replace-level stage may not be scoped
  (``tasks.run.validate``), and totals at replace units compose sequentially. Word-level
  spends are never stated at the document level.

Outside this argument, as before scopes: a scoped run preprocesses whole batches (those
that can hold its days), so a failure in that step can depend on documents (and authors)
outside its days and buckets; and its manifest commits to whole batch files (keyed HMACs).
An empty partition is released from noise by every mechanism a scope allows, never refused
after the spend. The author buckets' key cannot be replaced once a bucketed dataset has
spent (``storage.workspace``). Random-DP notions are
combined over every entry, whatever their scopes (conservative).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from fdptm.errors import BadInputError, BudgetRefusedError, FdptmError
from fdptm.mechanisms.guarantee import LOCAL_DP
from fdptm.privacy.accountant import (
    BudgetPlan,
    Composition,
    StageBudget,
    check_delta,
    check_epsilon,
    compose,
    exact,
    exact_sum,
)
from fdptm.privacy.adjacency import Adjacency, converts_to
from fdptm.storage import chain
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.partitions import Scope

ACTIVE = ("reserved", "spent")


@dataclass(frozen=True)
class Cap:
    """A dataset's lifetime cap, stated at one adjacency."""

    epsilon: float
    delta: float
    unit: Adjacency


PUBLIC_NOT_CHARGED = (
    "dataset {dataset!r} is public: the ledger never charges it, so it has no budget and no DP "
    "release of its own (one would protect nothing). Use it in a release of a private dataset "
    "as --vocabulary public:{dataset} or --prior {dataset}"
)


def _spends(rows: list[dict[str, Any]]) -> list[tuple[float, float, Adjacency]]:
    return [(r["epsilon"], r["delta"], Adjacency(r["adjacency"])) for r in rows]


def _notions(rows: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return [(r["notion"], r["gamma"]) for r in rows]


def _scopes(rows: list[dict[str, Any]]) -> list[Scope | None]:
    return [None if r.get("scope") is None else Scope.from_dict(_json(r["scope"])) for r in rows]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def parallel_at(
    unit: Adjacency, *, authors_are_documents: bool, buckets: int | None = None
) -> bool:
    """Whether totals at ``unit`` may compose in parallel over atoms (module docstring):
    add/remove of a document, which is the author level too when authors are documents;
    add/remove of an author when the dataset has author buckets. Never at ``local``: a
    device may send a report in every batch, so local spends compose sequentially."""
    return unit == Adjacency.DOCUMENT or (
        unit == Adjacency.AUTHOR and (authors_are_documents or bool(buckets))
    )


def _bucket_representatives(scopes: list[Scope | None], within: Scope | None, n: int) -> list[int]:
    """One bucket of each set of buckets that every scope covers alike: each named bucket
    and one bucket no scope names (if any), inside ``within``'s buckets when it has any."""
    named = {k for s in [*scopes, within] if s is not None and s.buckets for k in s.buckets}
    unnamed = next((k for k in range(n) if k not in named), None)
    candidates = sorted(named | ({unnamed} if unnamed is not None else set()))
    return [k for k in candidates if k < n and (within is None or within.covers_bucket(k))]


def most_spent_atom(
    spends: list[tuple[Decimal, Decimal]], scopes: list[Scope | None], within: Scope | None = None
) -> tuple[Decimal, Decimal]:
    """The most (epsilon, delta) that any atom has spent, each maximised over atoms, where
    spend i covers the atoms of ``scopes[i]`` (None: every atom); only atoms of ``within``
    when given. Exact (decimal sums), and never listing atoms: batches named by the same
    scopes form one group, and each group's days are swept once (spends are >= 0, so the
    maximum is the group's whole-batch spends plus the most its day windows pile up)."""
    named = sorted({b for s in [*scopes, within] if s is not None for b in s.batches})
    members = [None if s is None else frozenset(s.batches) for s in scopes]
    allowed = None if within is None else frozenset(within.batches)
    groups: dict[frozenset[int], None] = {}
    for batch in [*named, None]:  # None: any batch no scope names
        if allowed is not None and batch not in allowed:
            continue
        groups[frozenset(i for i, m in enumerate(members) if m is None or batch in m)] = None
    first, end = within.day_range() if within is not None and within.windowed else (None, None)
    best = [Decimal(0), Decimal(0)]
    for covering in groups:
        base = [Decimal(0), Decimal(0)]
        steps: dict[int, list[Decimal]] = {}
        for i in covering:
            days = None if scopes[i] is None else scopes[i].day_range()
            if days is None:
                base = [base[0] + spends[i][0], base[1] + spends[i][1]]
                continue
            low = days[0] if first is None else max(days[0], first)
            high = days[1] if end is None else min(days[1], end)
            if low >= high:
                continue
            for day, sign in ((low, 1), (high, -1)):
                step = steps.setdefault(day, [Decimal(0), Decimal(0)])
                step[0] += sign * spends[i][0]
                step[1] += sign * spends[i][1]
        running, peak = [Decimal(0), Decimal(0)], [Decimal(0), Decimal(0)]
        for day in sorted(steps):
            running = [running[0] + steps[day][0], running[1] + steps[day][1]]
            peak = [max(peak[0], running[0]), max(peak[1], running[1])]
        best = [max(best[0], base[0] + peak[0]), max(best[1], base[1] + peak[1])]
    return best[0], best[1]


def compose_over_atoms(
    rows: list[dict[str, Any]],
    unit: Adjacency,
    *,
    authors_are_documents: bool,
    extra: list[tuple[float, float, Adjacency, str, float, Scope | None]] = (),
    within: Scope | None = None,
    buckets: int | None = None,
) -> Composition:
    """The ledger's total at ``unit`` of ``rows`` (and ``extra`` spends), composed in
    parallel over atoms where ``parallel_at`` allows it, else sequentially; ``within``
    limits the maximum to the atoms of one scope (what a run over it has left).

    Raises ValueError when an entry cannot be stated at ``unit``.
    """
    whole, eps, delta = _atom_totals(
        rows,
        unit,
        authors_are_documents=authors_are_documents,
        extra=extra,
        within=within,
        buckets=buckets,
    )
    if not parallel_at(unit, authors_are_documents=authors_are_documents, buckets=buckets):
        return whole
    return replace(
        whole, epsilon=float(eps), delta=float(delta), accountant=f"{whole.accountant}; {PARALLEL}"
    )


def _atom_totals(
    rows: list[dict[str, Any]],
    unit: Adjacency,
    *,
    authors_are_documents: bool,
    extra: list[tuple[float, float, Adjacency, str, float, Scope | None]] = (),
    within: Scope | None = None,
    buckets: int | None = None,
) -> tuple[Composition, Decimal, Decimal]:
    """The sequential composition of everything, and the exact (epsilon, delta) total
    ``compose_over_atoms`` states (the maximum over atoms, or the sequential sum). With
    ``buckets`` (the dataset's author buckets) an author lies in one bucket: at the author
    level the atoms are the buckets; at the document level, (batch, day, bucket)."""
    spends = _spends(rows) + [(e, d, a) for e, d, a, *_ in extra]
    notions = _notions(rows) + [(n, g) for *_, n, g, _ in extra]
    scopes = _scopes(rows) + [s for *_, s in extra]
    whole = compose(spends, unit, authors_are_documents=authors_are_documents, notions=notions)
    if not parallel_at(unit, authors_are_documents=authors_are_documents, buckets=buckets):
        return (
            whole,
            exact_sum(c.epsilon_out for c in whole.conversions),
            exact_sum(c.delta_out for c in whole.conversions),
        )
    spent = [(exact(c.epsilon_out), exact(c.delta_out)) for c in whole.conversions]
    if not buckets:
        return whole, *most_spent_atom(spent, scopes, within)
    best = [Decimal(0), Decimal(0)]
    for k in _bucket_representatives(scopes, within, buckets):
        inside = [i for i, s in enumerate(scopes) if s is None or s.covers_bucket(k)]
        if unit == Adjacency.AUTHOR and not authors_are_documents:  # an author: one bucket
            total = (
                sum((spent[i][0] for i in inside), Decimal(0)),
                sum((spent[i][1] for i in inside), Decimal(0)),
            )
        else:
            total = most_spent_atom([spent[i] for i in inside], [scopes[i] for i in inside], within)
        best = [max(best[0], total[0]), max(best[1], total[1])]
    return whole, best[0], best[1]


PARALLEL = "parallel composition over the partitions (the most any one atom has spent)"


def _new_notions(stages, accounting: dict[str, dict]) -> list[tuple[str, float]]:
    return [(s.notion, accounting.get(s.stage, {}).get("gamma", 0.0)) for s in stages]


def charges(stages, accounting: dict[str, dict]) -> list[tuple]:
    """What a cap check counts of a plan's stages: each one's (epsilon, delta, adjacency,
    notion, gamma). Two plans with the same charges pass or fail alike a check of the same
    dataset and scope on the same catalog (``Ledger.check``)."""
    return [
        (s.epsilon, s.delta, s.adjacency, notion, gamma)
        for s, (notion, gamma) in zip(stages, _new_notions(stages, accounting), strict=True)
    ]


class Ledger:
    """Budget bookkeeping on top of the catalog's ``ledger`` and ``datasets`` tables."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog

    def default_unit(self, dataset: str) -> Adjacency:
        """The dataset's declared privacy unit (author or document), fixed at creation.

        Declared, never inferred from the rows: whether some row carries an author id is a
        function of the data, and a unit that one author's rows could flip would itself
        tell neighbouring datasets apart.
        """
        row = self.catalog.dataset(dataset)
        if row is None:
            raise BadInputError(f"no dataset named {dataset!r}; ingest it first")
        return Adjacency(row["unit"])

    def is_public(self, dataset: str) -> bool:
        """True for a dataset declared public at creation (``fdptm ingest --public``)."""
        row = self.catalog.dataset(dataset)
        if row is None:
            raise BadInputError(f"no dataset named {dataset!r}; ingest it first")
        return bool(row["public"])

    def require_public(self, dataset: str, use: str) -> None:
        """Refuse to read ``dataset`` free of charge (as ``use``) unless it was declared public."""
        if not self.is_public(dataset):
            raise BadInputError(
                f"dataset {dataset!r} is private: it cannot be used as {use}, which is read "
                "without charging the ledger. Only a dataset ingested with --public can; a "
                "private dataset never becomes public"
            )

    def require_documents(self, dataset: str) -> None:
        """Refuse a dataset of local-DP reports where documents are needed (central runs)."""
        if self.default_unit(dataset) == Adjacency.LOCAL:
            raise BadInputError(
                f"dataset {dataset!r} holds local-DP reports, not documents: central mechanisms "
                "and their audits cannot read it. Release it with `fdptm local release "
                f"--dataset {dataset} --mechanism lp-lda|olp-lda` (free post-processing of the "
                "reports)"
            )

    def author_buckets(self, dataset: str) -> int | None:
        """The number of author buckets declared when the dataset was created, or None."""
        row = self.catalog.dataset(dataset)
        return None if row is None else row.get("author_buckets")

    def authors_are_documents(self, dataset: str) -> bool:
        """True for document-unit datasets, where every document is its own author."""
        return self.default_unit(dataset) == Adjacency.DOCUMENT

    def set_cap(
        self, dataset: str, epsilon: float, delta: float, unit: Adjacency | None = None
    ) -> Cap:
        """Set (or replace) the lifetime cap; ``unit`` defaults to the dataset's unit."""
        epsilon = check_epsilon(epsilon, "cap epsilon")
        delta = check_delta(delta, "cap delta")
        unit = unit or self.default_unit(dataset)
        if self.default_unit(dataset) == Adjacency.LOCAL and unit != Adjacency.LOCAL:
            raise BadInputError(
                f"dataset {dataset!r} holds local-DP reports: its cap is stated at local level "
                "(drop --unit, or give --unit local)"
            )
        if self.default_unit(dataset) != Adjacency.LOCAL and unit == Adjacency.LOCAL:
            raise BadInputError(
                f"a cap at local level is for a dataset of local-DP reports; {dataset!r} holds "
                "documents: state its cap at author, document or word level"
            )
        try:
            self.lifetime(dataset, unit)
        except ValueError as exc:
            raise BadInputError(
                f"dataset {dataset!r} has spent budget that a cap at {unit.value} level cannot "
                f"count ({exc}); state the cap at the weakest level spent so far (`fdptm budget "
                f"--dataset {dataset} --all` shows the levels with a total). The cap is unchanged"
            ) from None
        with self.catalog.transaction() as con:
            row = con.execute("SELECT public FROM datasets WHERE name = ?", [dataset]).fetchone()
            if row is None:
                raise BadInputError(f"no dataset named {dataset!r}; ingest it first")
            if row[0]:
                raise BadInputError(PUBLIC_NOT_CHARGED.format(dataset=dataset))
            with chain.tracked(con, dataset, "dataset", [dataset]):
                con.execute(
                    "UPDATE datasets SET cap_epsilon = ?, cap_delta = ?, cap_unit = ?"
                    " WHERE name = ?",
                    [epsilon, delta, unit.value, dataset],
                )
        return Cap(epsilon, delta, unit)

    def cap(self, dataset: str) -> Cap | None:
        row = self.catalog.dataset(dataset)
        if row is None or row["cap_epsilon"] is None:
            return None
        return Cap(row["cap_epsilon"], row["cap_delta"], Adjacency(row["cap_unit"]))

    def entries(self, dataset: str) -> list[dict[str, Any]]:
        return self.catalog.query(
            "SELECT * FROM ledger WHERE dataset = ? ORDER BY created_at, stage", [dataset]
        )

    def history(self, dataset: str, unit: Adjacency, runs: list[str]) -> list[Composition]:
        """The composition at ``unit`` of the spent entries of ``runs`` (in that order)
        after each run: what a public report may show. Entries of other runs (reserved, or
        spent by a run that never published), lost attempts of a resumed run (facts that
        depend on how runs went) and the entries' times are left out."""
        rows = [
            r for r in self.entries(dataset) if r["state"] == "spent" and "/lost-" not in r["stage"]
        ]
        authors = self.authors_are_documents(dataset)
        return [
            compose_over_atoms(
                [r for r in rows if r["run_id"] in runs[:i]],
                unit,
                authors_are_documents=authors,
                buckets=self.author_buckets(dataset),
            )
            for i in range(1, len(runs) + 1)
        ]

    def lifetime(self, dataset: str, unit: Adjacency, within: Scope | None = None) -> Composition:
        """Composition of every reserved or spent entry of ``dataset`` at ``unit``, in
        parallel over atoms where the unit allows (module docstring); ``within``: the most
        any atom of that scope has spent."""
        rows = [r for r in self.entries(dataset) if r["state"] in ACTIVE]
        return compose_over_atoms(
            rows,
            unit,
            authors_are_documents=self.authors_are_documents(dataset),
            within=within,
            buckets=self.author_buckets(dataset),
        )

    def planned(
        self, dataset: str, unit: Adjacency, within: Scope | None = None
    ) -> tuple[Decimal, Decimal]:
        """``lifetime``'s (epsilon, delta) as exact decimals, without the lost attempts of
        resumed runs: each run once, at the budget it asked for, a function of the requests
        alone.

        ``--releases-left`` divides what the cap has left by this count, not by the live
        spend. A lost attempt (a mechanism started, stored nothing, and the resumed run
        reserved the stage again) says how a run went; if it lowered the next release's
        share, that manifest's epsilon would tell whether a run crashed (issue 29, review
        item 2). The lost charge still counts against the cap in every reservation, so a
        plan it no longer fits is refused (exit 3), never overspent.
        """
        rows = [
            r for r in self.entries(dataset) if r["state"] in ACTIVE and "/lost-" not in r["stage"]
        ]
        _, eps, delta = _atom_totals(
            rows,
            unit,
            authors_are_documents=self.authors_are_documents(dataset),
            within=within,
            buckets=self.author_buckets(dataset),
        )
        return eps, delta

    def over_cap(self, dataset: str) -> str | None:
        """How the spent and reserved entries exceed the lifetime cap (exact arithmetic, as
        at a reservation), or None when they fit or there is no cap: ``fdptm verify``'s
        check that the ledger as it stands respects its cap."""
        cap = self.cap(dataset)
        if cap is None:
            return None
        rows = [r for r in self.entries(dataset) if r["state"] in ACTIVE]
        try:
            _, eps, delta = _atom_totals(
                rows,
                cap.unit,
                authors_are_documents=self.authors_are_documents(dataset),
                buckets=self.author_buckets(dataset),
            )
        except ValueError as exc:
            return f"the entries cannot be stated at the cap's {cap.unit.value} level ({exc})"
        if eps <= exact(cap.epsilon) and delta <= exact(cap.delta):
            return None
        return (
            f"spent or reserved epsilon={_show(eps)}, delta={_show(delta)} exceeds the lifetime "
            f"cap of epsilon={cap.epsilon!r}, delta={cap.delta!r} ({cap.unit.value} level)"
        )

    def reserve(
        self,
        dataset: str,
        run_id: str,
        plan: BudgetPlan,
        accounting: dict[str, dict] | None = None,
        scope: Scope | None = None,
    ) -> dict[str, str]:
        """Atomically check the cap and reserve every stage of ``plan``; entry id per stage.

        ``accounting`` maps a stage to its mechanism's guarantee record (notion, gamma,
        accountant, DpEvent-like event), stored with the entry so that an audit can
        recompute the stage's spend. ``scope``: the partitions the run reads (None: all
        of them, now and later).
        """
        accounting = accounting or {}
        ids = {s.stage: uuid.uuid4().hex for s in plan.stages}
        with self.catalog.transaction() as con:
            self._check(con, dataset, plan.stages, accounting, scope)
            self._insert(con, dataset, run_id, plan.stages, accounting, ids, scope)
        return ids

    def check(
        self,
        dataset: str,
        plan: BudgetPlan,
        accounting: dict[str, dict] | None = None,
        scope: Scope | None = None,
    ) -> None:
        """Refuse (``BudgetRefusedError``) a plan the cap cannot cover, reserving nothing.

        The early check a command makes before it starts anything; ``reserve`` checks again
        atomically.
        """
        with self.catalog.transaction() as con:
            self._check(con, dataset, plan.stages, accounting or {}, scope)

    def _check(
        self, con, dataset: str, stages, accounting: dict[str, dict], scope: Scope | None
    ) -> None:
        row = con.execute(
            "SELECT cap_epsilon, cap_delta, cap_unit, unit, public, author_buckets FROM datasets"
            " WHERE name = ?",
            [dataset],
        ).fetchone()
        if row is None:
            raise BadInputError(f"no dataset named {dataset!r}; ingest it first")
        if row[4]:
            raise BadInputError(PUBLIC_NOT_CHARGED.format(dataset=dataset))
        chain.check_dataset(con, dataset)
        if row[0] is None:
            return
        cap = Cap(row[0], row[1], Adjacency(row[2]))
        cursor = con.execute(
            "SELECT epsilon, delta, adjacency, notion, gamma, scope FROM ledger"
            " WHERE dataset = ? AND state IN ('reserved', 'spent')",
            [dataset],
        )
        names = [c[0] for c in cursor.description]
        active = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
        new = [(*charge, scope) for charge in charges(stages, accounting)]
        _check_cap(cap, active, new, row[3] == Adjacency.DOCUMENT.value, scope, row[5])

    def _insert(self, con, dataset, run_id, stages, accounting, ids, scope) -> None:
        ts = now()
        for s, (notion, gamma) in zip(stages, _new_notions(stages, accounting), strict=True):
            record = accounting.get(s.stage)
            con.execute(
                "INSERT INTO ledger (entry_id, dataset, run_id, stage, mechanism, adjacency,"
                " epsilon, delta, state, note, created_at, updated_at, notion, gamma,"
                " accounting, scope)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'reserved', NULL, ?, ?, ?, ?, ?, ?)",
                [
                    ids[s.stage],
                    dataset,
                    run_id,
                    s.stage,
                    s.mechanism,
                    s.adjacency.value,
                    s.epsilon,
                    s.delta,
                    ts,
                    ts,
                    notion,
                    gamma,
                    None if record is None else json.dumps(record),
                    None if scope is None else json.dumps(scope.to_dict()),
                ],
            )
        chain.record(con, dataset, "entry", [ids[s.stage] for s in stages])

    def record_collection(
        self, con, dataset: str, run_id: str, seq: int, epsilon: float, accounting: dict
    ) -> None:
        """Record the local guarantee of the reports of batch ``seq`` (LP-LDA, Theorem 4),
        once, as spent: the devices randomised them before the server saw them, so the
        spend happened at collection, whatever the server does later. Releases from these
        reports are post-processing and record nothing. Called inside the ingest's
        transaction ``con``; the scope is the batch. Local entries compose sequentially (a
        device may report in every batch), and a cap at ``local`` refuses the batch
        (``BudgetRefusedError``, nothing stored) when the sum would exceed it: a function of
        f, V and the number of batches only."""
        chain.check_dataset(con, dataset)
        cap = self.cap(dataset)
        if cap is not None:
            active = [r for r in self.entries(dataset) if r["state"] in ACTIVE]
            new = [(epsilon, 0.0, Adjacency.LOCAL, LOCAL_DP, 0.0, Scope((seq,)))]
            _check_cap(cap, active, new, False, Scope((seq,)), None)
        ts = now()
        con.execute(
            "INSERT INTO ledger (entry_id, dataset, run_id, stage, mechanism, adjacency,"
            " epsilon, delta, state, note, created_at, updated_at, notion, gamma, accounting,"
            " scope) VALUES (?, ?, ?, 'collection', 'randomized-response', ?, ?, 0.0, 'spent',"
            " ?, ?, ?, ?, 0.0, ?, ?)",
            [
                f"{run_id}/collection",
                dataset,
                run_id,
                Adjacency.LOCAL.value,
                check_epsilon(epsilon, "local epsilon"),
                "local DP at collection: V x the per-word epsilon per report (Theorem 4)",
                ts,
                ts,
                LOCAL_DP,
                json.dumps(accounting),
                json.dumps(Scope((seq,)).to_dict()),
            ],
        )
        chain.record(con, dataset, "entry", [f"{run_id}/collection"])

    def spend(self, entry_id: str, note: str | None = None) -> None:
        """The mechanism has read private data: the reservation is spent for good."""
        self._transition(entry_id, ("reserved", "spent"), "spent", note)

    def refund(self, entry_id: str, note: str) -> None:
        """The run failed before reading private data: release its reservation."""
        self._transition(entry_id, ("reserved",), "refunded", note)

    def _transition(self, entry_id: str, allowed: tuple[str, ...], state: str, note) -> None:
        with self.catalog.transaction() as con:
            row = con.execute(
                "SELECT state, dataset FROM ledger WHERE entry_id = ?", [entry_id]
            ).fetchone()
            if row is None:
                raise KeyError(f"no ledger entry {entry_id}")
            if row[0] not in allowed:
                raise ValueError(f"ledger entry {entry_id} is {row[0]}, cannot become {state}")
            with chain.tracked(con, row[1], "entry", [entry_id]):
                con.execute(
                    "UPDATE ledger SET state = ?, note = coalesce(?, note), updated_at = ?"
                    " WHERE entry_id = ?",
                    [state, note, now(), entry_id],
                )

    def commit(self, run_id: str, stages: tuple[str, ...] = ("vocabulary", "train")) -> None:
        """The run is about to read private data: every reservation it holds is spent.

        Refuses (before any read) unless each of ``stages`` then has a spent entry: a run
        whose reservation was refunded meanwhile (wrongly closed as dead) must not read.
        """
        with self.catalog.transaction() as con, tracked_run(con, run_id):
            con.execute(
                "UPDATE ledger SET state = 'spent', updated_at = ?,"
                " note = 'spent: the run read private data'"
                " WHERE run_id = ? AND state = 'reserved'",
                [now(), run_id],
            )
            spent = {
                stage
                for (stage,) in con.execute(
                    "SELECT stage FROM ledger WHERE run_id = ? AND state = 'spent'", [run_id]
                ).fetchall()
            }
        missing = [s for s in stages if s not in spent]
        if missing:
            raise FdptmError(
                f"run {run_id} holds no spent budget for {', '.join(missing)}; it must not "
                "read private data. Start a new release."
            )

    def start_mechanism(self, run_id: str, stage: str) -> None:
        """Mark the stage's spent entry as used by its mechanism, once, atomically.

        A mechanism runs at most once per charge: a second start under the same entry (a
        retry, a re-entered stage) is refused, and ``--resume`` treats a started entry
        without a stored output as spent and lost.
        """
        with self.catalog.transaction() as con, tracked_run(con, run_id, stage):
            row = con.execute(
                "UPDATE ledger SET started_at = ? WHERE run_id = ? AND stage = ?"
                " AND state = 'spent' AND started_at IS NULL RETURNING entry_id",
                [now(), run_id, stage],
            ).fetchone()
        if row is None:
            raise FdptmError(
                f"stage {stage} of run {run_id} has no spent ledger entry that its mechanism "
                "has not used yet; a DP mechanism never runs twice on one charge. If the run "
                "failed, `fdptm release --resume` reserves the stage again."
            )

    def refund_unused(self, run_id: str, stage: str, note: str) -> None:
        """Refund a spent stage that will never run, decided from DP outputs alone."""
        with self.catalog.transaction() as con, tracked_run(con, run_id, stage):
            con.execute(
                "UPDATE ledger SET state = 'refunded', note = ?, updated_at = ?"
                " WHERE run_id = ? AND stage = ? AND state IN ('reserved', 'spent')"
                " AND started_at IS NULL",
                [note, now(), run_id, stage],
            )

    def replace_lost(
        self, con, dataset: str, run_id: str, stage: StageBudget, accounting: dict[str, dict]
    ) -> str:
        """Reserve ``stage`` of a resumed run again; its lost attempt stays spent.

        Runs on ``con``, the caller's transaction (with the run's status update). The lost
        entry is renamed ``<stage>/lost-<n>`` so the run has one live entry per stage; the
        new one is ``reserved`` until the resumed run's first read commits it, so a resume
        that dies before reading anything is refunded. Checked against the cap first.
        """
        entry = uuid.uuid4().hex
        row = con.execute(
            "SELECT scope FROM ledger WHERE run_id = ? AND stage = ?", [run_id, stage.stage]
        ).fetchone()
        scope = None if row is None or row[0] is None else Scope.from_dict(_json(row[0]))
        self._check(con, dataset, [stage], accounting, scope)
        lost = con.execute(
            "SELECT count(*) FROM ledger WHERE run_id = ? AND stage LIKE ?",
            [run_id, f"{stage.stage}/lost-%"],
        ).fetchone()[0]
        with tracked_run(con, run_id, stage.stage):
            con.execute(
                "UPDATE ledger SET stage = ?, note = ?, updated_at = ?"
                " WHERE run_id = ? AND stage = ?",
                [
                    f"{stage.stage}/lost-{lost + 1}",
                    "spent and lost: the mechanism started and stored nothing",
                    now(),
                    run_id,
                    stage.stage,
                ],
            )
        self._insert(con, dataset, run_id, [stage], accounting, {stage.stage: entry}, scope)
        return entry


@contextmanager
def tracked_run(con, run_id: str, stage: str | None = None) -> Iterator[None]:
    """``chain.tracked`` over the ledger entries of ``run_id`` (of one ``stage``, if given):
    checked against the hash chain before the caller changes them, recorded after."""
    sql = "SELECT dataset, entry_id FROM ledger WHERE run_id = ?"
    params = [run_id]
    if stage is not None:
        sql += " AND stage = ?"
        params.append(stage)
    rows = con.execute(sql, params).fetchall()
    by_dataset: dict[str, list[str]] = {}
    for dataset, entry_id in rows:
        by_dataset.setdefault(dataset, []).append(entry_id)
    with ExitStack() as stack:
        for dataset, ids in by_dataset.items():
            stack.enter_context(chain.tracked(con, dataset, "entry", ids))
        yield


def _check_cap(
    cap: Cap,
    active: list[dict[str, Any]],
    new: list[tuple[float, float, Adjacency, str, float, Scope | None]],
    authors_are_documents: bool,
    scope: Scope | None,
    buckets: int | None,
) -> None:
    """Refuse ``new`` spends (all over ``scope``) unless every atom stays within the cap."""
    weaker = [
        a
        for _, _, a, *_ in new
        if not converts_to(a, cap.unit, authors_are_documents=authors_are_documents)
    ]
    if weaker:
        raise BudgetRefusedError(
            f"this run has a {weaker[0].value}-level stage ({weaker[0].relation}), but the "
            f"dataset's lifetime cap is stated at {cap.unit.value} level: a "
            f"{weaker[0].value}-level guarantee gives no {cap.unit.value}-level bound. Use a "
            f"mechanism that is {cap.unit.value}-level, or restate the cap with "
            f"`fdptm budget --dataset NAME --cap EPS DELTA --unit {weaker[0].value}`"
        )
    try:
        compose_over_atoms(
            active,
            cap.unit,
            authors_are_documents=authors_are_documents,
            extra=new,
            buckets=buckets,
        )
    except ValueError as exc:  # a random-DP spend cannot be converted to the cap's unit
        raise BudgetRefusedError(
            f"refused: {exc}, so the lifetime cap (stated at {cap.unit.value} level) cannot "
            "account for it. State the cap at the dataset's own unit with `fdptm budget "
            "--dataset NAME --cap EPS DELTA`, or use a mechanism with plain DP."
        ) from exc
    _, spent_eps, spent_delta = _atom_totals(
        active,
        cap.unit,
        authors_are_documents=authors_are_documents,
        within=scope,
        buckets=buckets,
    )
    need = compose(
        [(e, d, a) for e, d, a, *_ in new],
        cap.unit,
        authors_are_documents=authors_are_documents,
    )
    need_eps = exact_sum(c.epsilon_out for c in need.conversions)
    need_delta = exact_sum(c.delta_out for c in need.conversions)
    left_eps = max(exact(cap.epsilon) - spent_eps, Decimal(0))
    left_delta = max(exact(cap.delta) - spent_delta, Decimal(0))
    if need_eps > left_eps or need_delta > left_delta:
        short = " and ".join(
            f"{name} (needs {_show(n)}, {_show(left)} remain)"
            for name, n, left in (
                ("epsilon", need_eps, left_eps),
                ("delta", need_delta, left_delta),
            )
            if n > left
        )
        raise BudgetRefusedError(
            f"refused: this run needs epsilon={_show(need_eps)}, delta={_show(need_delta)} "
            f"({cap.unit.value} level) but the dataset's lifetime cap of "
            f"epsilon={cap.epsilon!r}, delta={cap.delta!r} has only "
            f"epsilon={_show(left_eps)}, delta={_show(left_delta)} remaining "
            f"(spent or reserved: epsilon={_show(spent_eps)}, delta={_show(spent_delta)}); "
            f"short on {short}. "
            "Ask for less budget, or raise the cap with `fdptm budget --cap` if your policy "
            "allows it."
        )


def _show(value) -> str:
    """A decimal amount in full (no rounding that could make 'needs' look like 'remains')."""
    if value == value.to_integral_value() and abs(value) < 10**16:
        return str(int(value))
    return format(value.normalize(), "g")


def remaining(cap: Cap, lifetime: Composition) -> tuple[float, float]:
    """What the cap still allows, floored at 0 (exact decimal difference, then a float)."""
    return (
        float(max(exact(cap.epsilon) - exact(lifetime.epsilon), 0)),
        float(max(exact(cap.delta) - exact(lifetime.delta), 0)),
    )


def budget_report(ledger: Ledger, dataset: str) -> dict:
    """The ledger view of one dataset, as plain data (``fdptm budget``, its --json, and
    ``fdptm.api.Dataset.budget``)."""
    from fdptm.mechanisms.guarantee import describe

    cap = ledger.cap(dataset)
    local = ledger.default_unit(dataset) == Adjacency.LOCAL
    totals = {}
    for unit in Adjacency:
        if (unit == Adjacency.LOCAL) != local:  # local and central spends never mix
            continue
        try:
            c = ledger.lifetime(dataset, unit)
        except ValueError:
            totals[unit.value] = None
        else:
            totals[unit.value] = {
                "epsilon": c.epsilon,
                "delta": c.delta,
                "notion": c.notion,
                "gamma": c.gamma,
                "composition": "parallel" if PARALLEL in c.accountant else "sequential",
            }
    report = {
        "dataset": dataset,
        "dataset_unit": ledger.default_unit(dataset).value,
        "public": ledger.is_public(dataset),
        "cap": None,
        "totals": totals,
        "entries": [
            {
                k: e[k]
                for k in (
                    "run_id",
                    "stage",
                    "mechanism",
                    "adjacency",
                    "notion",
                    "epsilon",
                    "delta",
                    "gamma",
                    "state",
                    "note",
                    "created_at",
                )
            }
            for e in ledger.entries(dataset)
        ],
    }
    if cap:
        report["cap"] = {"epsilon": cap.epsilon, "delta": cap.delta, "unit": cap.unit.value}
        try:
            life = ledger.lifetime(dataset, cap.unit)
        except ValueError as exc:  # a cap set before set_cap refused uncountable spends
            report["lifetime"] = {
                "epsilon": None,
                "delta": None,
                "notion": None,
                "gamma": None,
                "statement": f"not defined at the cap's level ({exc})",
            }
            report["remaining"] = {"epsilon": 0.0, "delta": 0.0}
            return report
        eps_left, delta_left = remaining(cap, life)
        report["lifetime"] = {
            "epsilon": life.epsilon,
            "delta": life.delta,
            "notion": life.notion,
            "gamma": life.gamma,
            "statement": describe(life.notion, life.epsilon, life.delta, life.gamma),
        }
        report["remaining"] = {"epsilon": eps_left, "delta": delta_left}
    return report
