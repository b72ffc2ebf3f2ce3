"""The ledger's hash chain and ``fdptm verify --dataset`` (issue 29, item 3), on both
catalogs: every kind of tampering with the rows or the chain is reported (exit 1), and the
next write to a tampered entry is refused."""

from __future__ import annotations

import pytest

from fdptm.cli import main
from fdptm.privacy.accountant import StageSpec, plan_budget
from fdptm.privacy.adjacency import Adjacency
from fdptm.storage import chain
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.storage.verification import parse_head, verify_dataset
from fdptm.storage.workspace import Workspace

D = Adjacency.DOCUMENT


@pytest.fixture(params=["duckdb", "postgresql"])
def ws(request, tmp_path, monkeypatch) -> Workspace:
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_server").database()
        monkeypatch.setenv("FDPTM_CATALOG", url)
    else:
        monkeypatch.delenv("FDPTM_CATALOG", raising=False)
    return Workspace.resolve(tmp_path / "ws")


def _plan(eps: float):
    specs = [
        StageSpec("vocabulary", "dp-set-union/weighted", D, True, 0.25),
        StageSpec("train", "m2", D, True, 0.75),
    ]
    return plan_budget(eps, 1e-6, specs, authors_are_documents=True)


def _history(ws: Workspace) -> Ledger:
    """A capped dataset with a spent run (r1), a refunded one (r2) and a resumed one whose
    train stage was lost and reserved again (r3)."""
    catalog = Catalog(ws.create())
    catalog.ensure_dataset("d", "document")
    ledger = Ledger(catalog)
    ledger.set_cap("d", 10.0, 1e-4)
    ledger.reserve("d", "r1", _plan(2.0))
    ledger.commit("r1")
    ledger.start_mechanism("r1", "train")
    ids = ledger.reserve("d", "r2", _plan(2.0))
    for entry in ids.values():
        ledger.refund(entry, "failed before reading")
    plan = _plan(2.0)
    ledger.reserve("d", "r3", plan)
    ledger.commit("r3")
    ledger.start_mechanism("r3", "train")
    with catalog.transaction() as con:
        ledger.replace_lost(con, "d", "r3", plan.stages[1], {})
    ledger.commit("r3")
    return ledger


def test_every_change_fdptm_makes_is_chained_and_verifies(ws):
    ledger = _history(ws)
    found = verify_dataset(ws, "d")
    assert found.ok, found.problems
    with ledger.catalog.connect() as con:
        events = chain.events(con, "d")
    kinds = [e["kind"] for e in events]
    assert kinds[:2] == ["dataset", "dataset"] and kinds.count("dataset") == 2  # made, capped
    # r1: 2 reserved, 2 spent, 1 started; r2: 2 reserved, 2 refunded; r3: 2 reserved,
    # 2 spent, 1 started, 1 renamed lost, 1 reserved again, 1 spent
    assert kinds.count("entry") == 5 + 4 + 8
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert found.head == f"{len(events)}:{events[-1]['hash']}"
    assert main(["verify", "--dataset", "d", "--workspace", str(ws.root)]) == 0


TAMPERING = {
    "an entry's epsilon lowered": "UPDATE ledger SET epsilon = 0.5 WHERE run_id = 'r1'"
    " AND stage = 'train'",
    "an entry's state changed": "UPDATE ledger SET state = 'refunded' WHERE run_id = 'r3'"
    " AND stage = 'train/lost-1'",
    "an entry deleted": "DELETE FROM ledger WHERE run_id = 'r1' AND stage = 'vocabulary'",
    "an entry added": "INSERT INTO ledger (entry_id, dataset, run_id, stage, mechanism,"
    " adjacency, epsilon, delta, state, created_at, updated_at) SELECT 'forged', dataset,"
    " 'r9', stage, mechanism, adjacency, epsilon, delta, 'refunded', created_at, updated_at"
    " FROM ledger WHERE run_id = 'r1' AND stage = 'train'",
    "the cap raised": "UPDATE datasets SET cap_epsilon = 100 WHERE name = 'd'",
    "the dataset made public": "UPDATE datasets SET public = TRUE WHERE name = 'd'",
    "author buckets declared": "UPDATE datasets SET author_buckets = 64 WHERE name = 'd'",
    "an event's body edited": "UPDATE ledger_events SET body = replace(body, '\"spent\"',"
    " '\"refunded\"') WHERE seq = 5",
    "an event's hash rewritten": "UPDATE ledger_events SET hash = prev_hash WHERE seq = 6",
    "an event deleted": "DELETE FROM ledger_events WHERE seq = 2",
    "the last event deleted": "DELETE FROM ledger_events WHERE seq = (SELECT max(seq)"
    " FROM ledger_events)",
    "the dataset's row deleted": "DELETE FROM datasets WHERE name = 'd'",
}


@pytest.mark.parametrize("what", list(TAMPERING))
def test_verify_reports_each_kind_of_tampering(ws, capsys, what):
    ledger = _history(ws)
    assert verify_dataset(ws, "d").ok
    ledger.catalog.execute(TAMPERING[what])
    found = verify_dataset(ws, "d")
    assert not found.ok
    assert main(["verify", "--dataset", "d", "--workspace", str(ws.root)]) == 1
    out = capsys.readouterr()
    assert "FAILED" in out.out and "Traceback" not in out.err


def test_the_next_write_to_a_tampered_entry_is_refused_and_changes_nothing(ws):
    ledger = _history(ws)
    ledger.catalog.execute("UPDATE ledger SET epsilon = 0.1 WHERE run_id = 'r1'")
    before = ledger.catalog.query("SELECT count(*) AS n FROM ledger_events")[0]["n"]
    with pytest.raises(chain.LedgerTamperedError, match="changed outside fdptm"):
        ledger.refund_unused("r1", "vocabulary", "post-processing")
    after = ledger.catalog.query("SELECT count(*) AS n FROM ledger_events")[0]["n"]
    assert after == before


def test_a_consistent_rewrite_is_caught_by_the_cap_check_and_by_an_earlier_head(ws):
    """Someone who rewrites the chain with its hashes recomputed (here: the cap lowered
    below the spend, through the chain's own code) passes the chain checks; the spend
    check and the head an auditor kept catch it."""
    ledger = _history(ws)
    head = parse_head(verify_dataset(ws, "d").head)
    with ledger.catalog.transaction() as con, chain.tracked(con, "d", "dataset", ["d"]):
        con.execute("UPDATE datasets SET cap_epsilon = 1.0 WHERE name = 'd'")
    found = verify_dataset(ws, "d", head)
    assert found.problems and "exceeds the lifetime cap" in found.problems[0]
    with ledger.catalog.connect() as con:
        con.execute("DELETE FROM ledger_events WHERE seq >= ?", [head[0]])
        last = chain.events(con, "d")[-1]
        con.execute("UPDATE datasets SET cap_epsilon = 10.0 WHERE name = 'd'")
        chain.append(con, "d", "entry", "forged-tail", '{"x":1}')
    found = verify_dataset(ws, "d", head)
    assert any("no longer holds event" in p for p in found.problems)
    assert last["seq"] == head[0] - 1


def test_a_catalog_from_before_the_chain_adopts_its_rows(tmp_path, monkeypatch):
    """Migration 2 chains the rows an older catalog holds, so it verifies at once."""
    monkeypatch.delenv("FDPTM_CATALOG", raising=False)
    ws = Workspace.resolve(tmp_path / "ws")
    ledger = _history(ws)
    with ledger.catalog.connect() as con:
        con.execute("DROP TABLE ledger_events")
        con.execute("DELETE FROM schema_migrations WHERE version >= 2")
    import fdptm.storage.catalog as catalog_module

    catalog_module._registry = catalog_module._Registry()  # a new process: migrations run
    found = verify_dataset(ws, "d")
    assert found.ok and found.events == 1 + 2 * 3 + 1  # the dataset, its six entries, r3's train
    versions = Catalog(ws).query("SELECT version FROM schema_migrations ORDER BY version")
    assert [r["version"] for r in versions] == [1, 2]


def test_verify_refuses_bad_input_with_exit_2(ws, capsys):
    _history(ws)
    assert main(["verify", "--dataset", "nope", "--workspace", str(ws.root)]) == 2
    assert main(["verify", "--dataset", "d", "--head", "3:xyz", "--workspace", str(ws.root)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_reservation_on_a_tampered_ledger_is_refused_and_reserves_nothing(ws, capsys):
    """The cap check reads the ledger as fdptm left it: an entry lowered outside fdptm
    (which would free budget) stops every later reservation of the dataset."""
    ledger = _history(ws)
    ledger.catalog.execute("UPDATE ledger SET epsilon = 0.1 WHERE run_id = 'r1'")
    before = len(ledger.entries("d"))
    with pytest.raises(chain.LedgerTamperedError, match="cap check cannot be trusted"):
        ledger.reserve("d", "r4", _plan(1.0))
    assert len(ledger.entries("d")) == before
    assert main(["budget", "--dataset", "d", "--workspace", str(ws.root)]) == 0  # reads work


def test_a_deleted_dataset_is_not_made_anew_by_the_next_ingest(ws):
    """Deleting a dataset's row (and with it its cap) and letting the next ingest re-create
    it would start the dataset afresh beside its chain: refused."""
    ledger = _history(ws)
    ledger.catalog.execute("DELETE FROM datasets WHERE name = 'd'")
    with pytest.raises(chain.LedgerTamperedError, match="changed outside fdptm"):
        ledger.catalog.ensure_dataset("d", "document")
    assert ledger.catalog.dataset("d") is None
