"""A release whose reservation fails on a real PostgreSQL catalog (a database error inside
the ledger's write, the connection dropped there, or the reservation block's commit
failing) gives up its run's claim
there and then: the long-lived process that asked for it (the Python API, a scheduler's
worker) holds no advisory lock afterwards, so ``fdptm recover`` on any host can settle the
run, and nothing is left reserved. The failures are real database errors raised by
triggers installed for the test; the release goes through the Python API in this process."""

from __future__ import annotations

import pytest

from fdptm import api
from fdptm.storage import postgres

pytestmark = pytest.mark.usefixtures("prefect_harness")

FAIL = """
CREATE FUNCTION fdptm_test_fail() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
CREATE FUNCTION fdptm_test_drop() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$;
"""
RELEASE = dict(epsilon=100.0, delta=1e-5, topics=2, iterations=5, mechanism="hdp-lda", seed=3)


@pytest.fixture
def dataset(tmp_path, pg_catalog, monkeypatch):
    """Dataset ``small`` in a workspace whose catalog is ``pg_catalog``; releases run in this
    process (no hand-off to a release server)."""
    monkeypatch.setenv("FDPTM_SERVE", "off")
    corpus = tmp_path / "small.txt"
    corpus.write_text("\n".join(["apple banana cherry grape"] * 40 + ["durian figs lemon"] * 40))
    data = api.Workspace(tmp_path / "ws", catalog=pg_catalog).dataset("small")
    data.ingest(corpus)
    with postgres.connect(pg_catalog) as con:
        con.execute(FAIL)
    return data


def _sql(url: str, statement: str) -> list[tuple]:
    with postgres.connect(url) as con:
        cursor = con.execute(statement)
        return cursor.fetchall() if cursor.description else []


def _advisory_locks(url: str) -> int:
    """Advisory locks held on this test's database (by any session)."""
    here = "(SELECT oid FROM pg_database WHERE datname = current_database())"
    query = f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = {here}"
    return _sql(url, query)[0][0]


@pytest.mark.parametrize(
    ("trigger", "error"),
    [
        (
            "CREATE TRIGGER fail BEFORE INSERT ON ledger"
            " FOR EACH ROW EXECUTE FUNCTION fdptm_test_fail()",
            "injected failure",
        ),
        (
            "CREATE TRIGGER fail BEFORE INSERT ON ledger"
            " FOR EACH ROW EXECUTE FUNCTION fdptm_test_drop()",
            "cannot use the PostgreSQL catalog",
        ),
        (
            "CREATE CONSTRAINT TRIGGER fail AFTER INSERT ON runs DEFERRABLE INITIALLY DEFERRED"
            " FOR EACH ROW EXECUTE FUNCTION fdptm_test_fail()",
            "injected failure",
        ),
    ],
    ids=["reserve-fails", "connection-drops", "commit-fails"],
)
def test_a_failed_reservation_holds_no_claim(dataset, pg_catalog, trigger, error):
    _sql(pg_catalog, trigger)
    with pytest.raises(Exception, match=error):
        dataset.release(**RELEASE)
    assert _advisory_locks(pg_catalog) == 0
    assert _sql(pg_catalog, "SELECT count(*) FROM ledger")[0][0] == 0
    running = "SELECT count(*) FROM runs WHERE kind = 'release' AND status = 'running'"
    assert _sql(pg_catalog, running)[0][0] == 0  # the block rolled back: no record left open
    _sql(pg_catalog, "DROP TRIGGER fail ON " + trigger.split(" ON ")[1].split()[0])
    assert dataset.release(**RELEASE).manifest["run_id"]
    assert _advisory_locks(pg_catalog) == 0
