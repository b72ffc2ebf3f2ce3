"""The privacy ledger: reservations, spends and refunds, per stage, run and dataset.

Protocol (DESIGN.md section 3, "Spend protocol"):

1. Before any stage runs, ``reserve`` inserts one ``reserved`` entry per stage of the run's
   budget plan, in one transaction that first checks the dataset's lifetime cap. A run that
   would exceed the cap is refused (``BudgetRefusedError``, exit code 3) and nothing is
   inserted. Because the check and the inserts share one serialised catalog connection,
   two runs at once can never overspend: the second sees the first's reservation.
2. A stage that has started reading private data calls ``spend``: from then on its budget
   is gone, whether or not the run later succeeds.
3. A stage that failed before reading private data (or never ran) calls ``refund``.

Reserved entries count against the cap exactly like spent ones, so a crash at any point
leaves the ledger conservative and consistent: an entry left ``reserved`` by a crashed run
stays charged. The cap is a privacy filter (Rogers et al. 2016): the composed spend never
exceeds it, even when a run's parameters depend on earlier private outputs.

Entries are stored in each mechanism's own adjacency. Totals are composed at a chosen unit
with ``fdptm.privacy.accountant.compose``, converting explicitly (and refusing entries that
are weaker than the unit: a word-level spend has no author-level bound).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from fdptm.errors import BadInputError, BudgetRefusedError
from fdptm.privacy.accountant import BudgetPlan, Composition, check_delta, check_epsilon, compose
from fdptm.privacy.adjacency import Adjacency, converts_to
from fdptm.storage.catalog import Catalog, now

ACTIVE = ("reserved", "spent")


@dataclass(frozen=True)
class Cap:
    """A dataset's lifetime cap, stated at one adjacency."""

    epsilon: float
    delta: float
    unit: Adjacency


def _spends(rows: list[dict[str, Any]]) -> list[tuple[float, float, Adjacency]]:
    return [(r["epsilon"], r["delta"], Adjacency(r["adjacency"])) for r in rows]


def _notions(rows: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return [(r["notion"], r["gamma"]) for r in rows]


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
        with self.catalog.transaction() as con:
            if not con.execute("SELECT 1 FROM datasets WHERE name = ?", [dataset]).fetchone():
                raise BadInputError(f"no dataset named {dataset!r}; ingest it first")
            con.execute(
                "UPDATE datasets SET cap_epsilon = ?, cap_delta = ?, cap_unit = ? WHERE name = ?",
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

    def lifetime(self, dataset: str, unit: Adjacency) -> Composition:
        """Composition of every reserved or spent entry of ``dataset`` at ``unit``."""
        rows = [r for r in self.entries(dataset) if r["state"] in ACTIVE]
        return compose(
            _spends(rows),
            unit,
            authors_are_documents=self.authors_are_documents(dataset),
            notions=_notions(rows),
        )

    def reserve(
        self,
        dataset: str,
        run_id: str,
        plan: BudgetPlan,
        accounting: dict[str, dict] | None = None,
    ) -> dict[str, str]:
        """Atomically check the cap and reserve every stage of ``plan``; entry id per stage.

        ``accounting`` maps a stage to its mechanism's guarantee record (notion, gamma,
        accountant, DpEvent-like event), stored with the entry so that an audit can
        recompute the stage's spend.
        """
        accounting = accounting or {}
        authors_are_documents = self.authors_are_documents(dataset)
        new = [(s.epsilon, s.delta, s.adjacency) for s in plan.stages]
        new_notions = [
            (s.notion, accounting.get(s.stage, {}).get("gamma", 0.0)) for s in plan.stages
        ]
        ids = {s.stage: uuid.uuid4().hex for s in plan.stages}
        with self.catalog.transaction() as con:
            row = con.execute(
                "SELECT cap_epsilon, cap_delta, cap_unit FROM datasets WHERE name = ?", [dataset]
            ).fetchone()
            if row is None:
                raise BadInputError(f"no dataset named {dataset!r}; ingest it first")
            if row[0] is not None:
                cap = Cap(row[0], row[1], Adjacency(row[2]))
                active = con.execute(
                    "SELECT epsilon, delta, adjacency, notion, gamma FROM ledger"
                    " WHERE dataset = ? AND state IN ('reserved', 'spent')",
                    [dataset],
                ).fetchall()
                spent = [(e, d, Adjacency(a)) for e, d, a, _, _ in active]
                notions = [(n, g) for *_, n, g in active] + new_notions
                _check_cap(cap, spent, new, authors_are_documents, notions)
            ts = now()
            for s, (notion, gamma) in zip(plan.stages, new_notions, strict=True):
                record = accounting.get(s.stage)
                con.execute(
                    "INSERT INTO ledger (entry_id, dataset, run_id, stage, mechanism, adjacency,"
                    " epsilon, delta, state, note, created_at, updated_at, notion, gamma,"
                    " accounting) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'reserved', NULL, ?, ?, ?, ?, ?)",
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
                    ],
                )
        return ids

    def spend(self, entry_id: str, note: str | None = None) -> None:
        """The mechanism has read private data: the reservation is spent for good."""
        self._transition(entry_id, ("reserved", "spent"), "spent", note)

    def refund(self, entry_id: str, note: str) -> None:
        """The stage failed before reading private data: release its reservation."""
        self._transition(entry_id, ("reserved",), "refunded", note)

    def _transition(self, entry_id: str, allowed: tuple[str, ...], state: str, note) -> None:
        with self.catalog.transaction() as con:
            row = con.execute("SELECT state FROM ledger WHERE entry_id = ?", [entry_id]).fetchone()
            if row is None:
                raise KeyError(f"no ledger entry {entry_id}")
            if row[0] not in allowed:
                raise ValueError(f"ledger entry {entry_id} is {row[0]}, cannot become {state}")
            con.execute(
                "UPDATE ledger SET state = ?, note = coalesce(?, note), updated_at = ?"
                " WHERE entry_id = ?",
                [state, note, now(), entry_id],
            )


def _check_cap(
    cap: Cap,
    spent: list[tuple[float, float, Adjacency]],
    new: list[tuple[float, float, Adjacency]],
    authors_are_documents: bool,
    notions: list[tuple[str, float]],
) -> None:
    weaker = [
        a
        for _, _, a in new
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
    before = compose(spent, cap.unit, authors_are_documents=authors_are_documents)
    after = compose(
        spent + new, cap.unit, authors_are_documents=authors_are_documents, notions=notions
    )
    over_eps = after.epsilon > cap.epsilon
    over_delta = after.delta > cap.delta
    if over_eps or over_delta:
        need = compose(new, cap.unit, authors_are_documents=authors_are_documents)
        raise BudgetRefusedError(
            f"refused: this run needs epsilon={need.epsilon:.6g}, delta={need.delta:.6g} "
            f"({cap.unit.value} level) but the dataset's lifetime cap of "
            f"epsilon={cap.epsilon:.6g}, delta={cap.delta:.6g} has only "
            f"epsilon={max(cap.epsilon - before.epsilon, 0.0):.6g}, "
            f"delta={max(cap.delta - before.delta, 0.0):.6g} remaining "
            f"(spent or reserved: epsilon={before.epsilon:.6g}, delta={before.delta:.6g}). "
            "Ask for less budget, or raise the cap with `fdptm budget --cap` if your policy "
            "allows it."
        )


def remaining(cap: Cap, lifetime: Composition) -> tuple[float, float]:
    """What the cap still allows, floored at 0."""
    return max(cap.epsilon - lifetime.epsilon, 0.0), max(cap.delta - lifetime.delta, 0.0)
