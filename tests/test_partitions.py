"""Partitions and parallel composition: scopes, the ledger's total per atom, the cap check,
timestamped ingest and ``fdptm partitions``."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from fdptm.cli import main
from fdptm.errors import BadInputError, BudgetRefusedError
from fdptm.privacy.accountant import StageSpec, plan_budget
from fdptm.privacy.adjacency import Adjacency
from fdptm.request import ReleaseRequest
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import PARALLEL, Ledger, most_spent_atom
from fdptm.storage.partitions import (
    Scope,
    day_of,
    days,
    last_closed,
    parse_batches,
    window_bounds,
    windows_between,
)
from fdptm.tasks.ingest import MISSING_TS, ingest
from fdptm.tasks.spec import RunSpec

A, D = Adjacency.AUTHOR, Adjacency.DOCUMENT
MONDAY = dt.date(2024, 1, 1)


def _ledger(workspace, unit: str = "document") -> Ledger:
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset("d", unit)
    return Ledger(catalog)


def _plan(eps: float, unit: Adjacency = D):
    specs = [StageSpec("train", "m2", unit, True, 1.0)]
    return plan_budget(eps, 1e-6, specs, authors_are_documents=unit == D)


def _week(i: int, batches=(1,)) -> Scope:
    start = MONDAY + dt.timedelta(weeks=i)
    return Scope(tuple(batches), start, start + dt.timedelta(days=7))


def test_a_release_over_batches_1_to_3_after_releases_over_each_is_charged_once_more(
    workspace,
):
    ledger = _ledger(workspace)
    for seq in (1, 2, 3):
        ledger.reserve("d", f"r{seq}", _plan(1.0), scope=Scope((seq,)))
    life = ledger.lifetime("d", D)
    assert (life.epsilon, life.delta) == (1.0, 1e-6)
    assert PARALLEL in life.accountant
    ledger.reserve("d", "all", _plan(1.0), scope=Scope((1, 2, 3)))
    assert ledger.lifetime("d", D).epsilon == 2.0
    assert ledger.lifetime("d", D, within=Scope((4,))).epsilon == 0.0  # a later batch
    ledger.reserve("d", "again-2", _plan(0.5), scope=Scope((2,)))
    assert ledger.lifetime("d", D).epsilon == 2.5
    assert ledger.lifetime("d", D, within=Scope((1,))).epsilon == 2.0


def test_author_level_never_composes_in_parallel(workspace):
    ledger = _ledger(workspace, "author")
    for seq in (1, 2, 3):
        ledger.reserve("d", f"r{seq}", _plan(1.0, A), scope=Scope((seq,)))
    author = ledger.lifetime("d", A)
    assert author.epsilon == 3.0 and PARALLEL not in author.accountant
    # one document lies in one batch, so the document level of the same spends is parallel
    document = ledger.lifetime("d", D)
    assert PARALLEL in document.accountant
    assert document.epsilon == pytest.approx(max(c.epsilon_out for c in document.conversions))


def test_replace_and_word_levels_compose_sequentially(workspace):
    ledger = _ledger(workspace)
    for seq in (1, 2):
        ledger.reserve("d", f"r{seq}", _plan(1.0), scope=Scope((seq,)))
    replace = ledger.lifetime("d", Adjacency.DOCUMENT_REPLACE)
    assert PARALLEL not in replace.accountant
    assert replace.epsilon == pytest.approx(sum(c.epsilon_out for c in replace.conversions))


def test_weekly_releases_then_a_month_compose_per_day(workspace):
    ledger = _ledger(workspace)
    for i in range(8):
        ledger.reserve("d", f"w{i}", _plan(1.0), scope=_week(i))
    assert ledger.lifetime("d", D).epsilon == 1.0
    january = Scope((1,), dt.date(2024, 1, 1), dt.date(2024, 2, 1))  # weeks 0-4 (5 Jan 29)
    ledger.reserve("d", "jan", _plan(1.0), scope=january)
    assert ledger.lifetime("d", D).epsilon == 2.0
    assert ledger.lifetime("d", D, within=_week(6)).epsilon == 1.0
    assert ledger.lifetime("d", D, within=_week(4)).epsilon == 2.0  # Jan 29 - Feb 4
    # a release without days covers the batch's every day, and its untimed rows
    ledger.reserve("d", "batch", _plan(0.25), scope=Scope((1,)))
    assert ledger.lifetime("d", D).epsilon == 2.25
    assert ledger.lifetime("d", D, within=_week(7)).epsilon == 1.25


def test_an_entry_without_a_scope_covers_every_partition(workspace):
    ledger = _ledger(workspace)
    ledger.reserve("d", "old", _plan(1.0))  # recorded before scopes existed
    ledger.reserve("d", "new", _plan(1.0), scope=Scope((7,)))
    assert ledger.lifetime("d", D).epsilon == 2.0
    assert ledger.lifetime("d", D, within=Scope((8,))).epsilon == 1.0


def test_the_cap_holds_per_atom(workspace):
    ledger = _ledger(workspace)
    ledger.set_cap("d", 2.0, 1e-4)
    for i in range(8):  # sequentially these would be 12: only disjoint weeks make them fit
        ledger.reserve("d", f"w{i}", _plan(1.5), scope=_week(i))
    january = Scope((1,), dt.date(2024, 1, 1), dt.date(2024, 2, 1))
    with pytest.raises(BudgetRefusedError, match=r"has only epsilon=0.5, delta=0.000099 remain"):
        ledger.reserve("d", "jan", _plan(1.0), scope=january)
    ledger.reserve("d", "jan-small", _plan(0.5), scope=january)
    ledger.reserve("d", "batch-2", _plan(2.0), scope=Scope((2,)))  # untouched partitions
    with pytest.raises(BudgetRefusedError):
        ledger.reserve("d", "all", _plan(0.001), scope=Scope((1, 2)))
    assert ledger.lifetime("d", D).epsilon == 2.0


def test_the_most_spent_atom_matches_brute_force_over_atoms():
    """Random scopes against a brute force over every atom (batch 1-5, one batch no scope
    names, 40 days and the untimed rows), with and without ``within``."""
    rng = np.random.default_rng(7)

    def scope():
        batches = tuple(sorted({int(b) for b in rng.integers(1, 5, rng.integers(1, 4))}))
        if rng.random() < 0.3:
            return None if rng.random() < 0.3 else Scope(batches)
        low = int(rng.integers(0, 35))
        return Scope(batches, day_of(low), day_of(low + int(rng.integers(1, 10))))

    def covers(s, batch, day):
        if s is None:
            return True
        if batch not in s.batches:
            return False
        return s.day_range() is None or (
            day is not None and s.day_range()[0] <= day < s.day_range()[1]
        )

    atoms = [(b, d) for b in range(1, 6) for d in [*range(-2, 42), None]]
    for _ in range(300):
        scopes = [scope() for _ in range(int(rng.integers(0, 7)))]
        spends = [
            (Decimal(int(rng.integers(1, 9))), Decimal(int(rng.integers(0, 3)))) for _ in scopes
        ]
        within = scope() if rng.random() < 0.5 else None
        inside = [a for a in atoms if within is None or covers(within, *a)]
        expected = [
            max(
                [
                    sum((spends[i][k] for i, s in enumerate(scopes) if covers(s, *a)), Decimal(0))
                    for a in inside
                ]
                or [Decimal(0)]
            )
            for k in (0, 1)
        ]
        assert list(most_spent_atom(spends, scopes, within)) == expected, (scopes, within)


def test_windows_follow_the_calendar():
    assert window_bounds("week", dt.date(2024, 1, 3)) == (MONDAY, dt.date(2024, 1, 8))
    assert window_bounds("week", dt.date(2024, 1, 7)) == (MONDAY, dt.date(2024, 1, 8))
    assert window_bounds("month", dt.date(2024, 2, 29)) == (
        dt.date(2024, 2, 1),
        dt.date(2024, 3, 1),
    )
    assert last_closed("week", dt.date(2024, 1, 10)) == (MONDAY, dt.date(2024, 1, 8))
    assert last_closed("week", MONDAY) == (dt.date(2023, 12, 25), MONDAY)
    assert last_closed("month", dt.date(2024, 1, 1)) == (dt.date(2023, 12, 1), MONDAY)
    assert last_closed("day", dt.date(2024, 1, 1)) == (dt.date(2023, 12, 31), MONDAY)
    weeks = windows_between("week", dt.date(2024, 1, 3), dt.date(2024, 1, 15))
    assert [w[0].day for w in weeks] == [1, 8, 15]
    assert parse_batches("3..5") == (3, 4, 5) and parse_batches("7,1,3") == (1, 3, 7)
    for bad in ("5..3", "0..2", "a", ""):
        with pytest.raises(BadInputError):
            parse_batches(bad)


def test_days_are_utc_days_since_the_epoch():
    ts = pa.array(
        [
            dt.datetime(1970, 1, 1, 23, 59, tzinfo=dt.UTC),
            dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
            dt.datetime(1969, 12, 31, 12, tzinfo=dt.UTC),
            None,
        ],
        pa.timestamp("us", tz="UTC"),
    )
    assert days(ts).to_pylist() == [0, 19_723, -1, None]


def test_a_request_window_resolves_to_the_last_closed_calendar_window():
    request = ReleaseRequest(dataset="d", epsilon=1, delta=1e-6, topics=2, window="last-week")
    spec = RunSpec.from_request(request, "r", "/w")
    since, until = dt.date.fromisoformat(spec.since), dt.date.fromisoformat(spec.until)
    today = dt.datetime.now(dt.UTC).date()
    assert since.weekday() == 0 and until - since == dt.timedelta(days=7)
    assert until <= today < until + dt.timedelta(days=7)
    for bad in (
        {"since": "2024-01-01"},
        {"since": "2024-02-01", "until": "2024-01-01"},
        {"window": "last-week", "since": "2024-01-01", "until": "2024-02-01"},
        {"batches": "2..1"},
    ):
        with pytest.raises(BadInputError):
            ReleaseRequest.build(dataset="d", epsilon=1, delta=1e-6, topics=2, **bad)


def _timed(path, start: dt.date, n: int, prefix: str, per_day: int = 3) -> None:
    rows = [
        {
            "doc_id": f"{prefix}{i}",
            "text": f"word{i % 7} text{i % 5} common",
            "ts": (start + dt.timedelta(days=i // per_day)).isoformat() + "T12:00:00Z",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_batch_without_times_after_timed_ones_is_refused_and_nothing_is_stored(
    tmp_path, workspace, capsys
):
    (tmp_path / "plain.jsonl").write_text(json.dumps({"doc_id": "p", "text": "no time"}) + "\n")
    _timed(tmp_path / "timed.jsonl", MONDAY, 6, "t")
    ingest(tmp_path / "plain.jsonl", "d", workspace)  # untimed first: allowed
    ingest(tmp_path / "timed.jsonl", "d", workspace)
    (tmp_path / "late.jsonl").write_text(json.dumps({"doc_id": "q", "text": "no time"}) + "\n")
    root = str(workspace.root)
    assert (
        main(["ingest", str(tmp_path / "late.jsonl"), "--dataset", "d", "--workspace", root]) == 2
    )
    assert "has timestamped documents since batch 2" in capsys.readouterr().err
    assert [b["timed"] for b in Catalog(workspace).batches("d")] == [False, True]


def test_a_dateless_row_in_a_timed_file_is_rejected_for_it(tmp_path, workspace):
    rows = [
        {"doc_id": "a", "text": "dated", "ts": "2024-01-01"},
        {"doc_id": "b", "text": "x", "ts": None},
    ]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = ingest(tmp_path / "f.jsonl", "d", workspace)
    assert (result.n_rows, result.n_rejected) == (1, 1)
    assert result.examples[0]["reason"] == MISSING_TS


def test_partitions_lists_documents_per_batch_and_window(tmp_path, workspace, capsys):
    _timed(tmp_path / "a.jsonl", MONDAY, 30, "a")  # 10 days from Monday Jan 1
    _timed(tmp_path / "b.jsonl", dt.date(2024, 1, 15), 9, "b")
    ingest(tmp_path / "a.jsonl", "d", workspace)
    ingest(tmp_path / "b.jsonl", "d", workspace)
    root = str(workspace.root)
    assert main(["partitions", "--dataset", "d", "--json", "--workspace", root]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["batch"], r["source"], r["timed"]) for r in listed] == [
        (1, "a.jsonl", True),
        (2, "b.jsonl", True),
    ]
    assert not any("documents" in r for r in listed)  # no count without --counts
    weekly = ["partitions", "--dataset", "d", "--counts", "--by", "week", "--json"]
    assert main([*weekly, "--workspace", root]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == [
        {"batch": 1, "since": "2024-01-01", "until": "2024-01-08", "documents": 21},
        {"batch": 1, "since": "2024-01-08", "until": "2024-01-15", "documents": 9},
        {"batch": 2, "since": "2024-01-15", "until": "2024-01-22", "documents": 9},
    ]
    assert main(["partitions", "--dataset", "d", "--counts", "--workspace", root]) == 0
    assert "never choose a release's scope from them" in capsys.readouterr().out


def test_a_run_over_days_skips_reading_batches_without_those_days_but_scopes_them_all(
    tmp_path, workspace
):
    from fdptm.tasks import stages

    _timed(tmp_path / "jan.jsonl", MONDAY, 9, "j")  # Jan 1-3
    _timed(tmp_path / "mar.jsonl", dt.date(2024, 3, 4), 9, "m")  # Mar 4-6
    for name in ("jan", "mar"):
        ingest(tmp_path / f"{name}.jsonl", "d", workspace)
    assert [(b["first_day"], b["last_day"]) for b in Catalog(workspace).batches("d")] == [
        (19_723, 19_725),
        (19_786, 19_788),
    ]
    spec = RunSpec(
        "r",
        str(workspace.root),
        "d",
        1.0,
        1e-6,
        2,
        batches=(1, 2),
        since="2024-03-04",
        until="2024-03-11",
    )
    assert [b["seq"] for b in stages.read_batches(spec)] == [2]
    assert spec.scope.batches == (1, 2)
    whole = RunSpec("r", str(workspace.root), "d", 1.0, 1e-6, 2, batches=(1, 2))
    assert [b["seq"] for b in stages.read_batches(whole)] == [1, 2]


def test_a_damaged_batch_outside_a_runs_days_stops_the_run_unspent(tmp_path, workspace, capsys):
    """Review item 3 (issue 29): which batches a day-scoped run opens depends on their day
    spans (a fact about the documents), so every batch of the scope is hash-checked before
    the spend, including one the run would not open."""
    _timed(tmp_path / "jan.jsonl", MONDAY, 9, "j")  # Jan 1-3: outside the run's days
    _timed(tmp_path / "mar.jsonl", dt.date(2024, 3, 4), 9, "m")
    for name in ("jan", "mar"):
        ingest(tmp_path / f"{name}.jsonl", "d", workspace)
    jan = Catalog(workspace).batches("d")[0]
    stored = workspace.root / jan["path"]
    stored.write_bytes(stored.read_bytes()[:-10] + b"0123456789")
    args = ["release", "--dataset", "d", "--epsilon", "5", "--delta", "1e-5", "--topics", "2"]
    days = ["--since", "2024-03-04", "--until", "2024-03-11", "--mechanism", "dp-vi"]
    rc = main([*args, *days, "--workspace", str(workspace.root), "--no-progress"])
    assert rc == 2
    assert "batch 1 of dataset 'd'" in capsys.readouterr().err
    states = {e["state"] for e in Catalog(workspace).query("SELECT state FROM ledger")}
    assert states == {"refunded"}


def test_a_record_file_whose_time_key_only_some_objects_have_is_refused(tmp_path, workspace):
    rows = [{"doc_id": "a", "text": "one"}, {"doc_id": "b", "text": "two", "ts": "2024-01-02"}]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BadInputError, match="1 of 2 objects lack the time key"):
        ingest(tmp_path / "f.jsonl", "d", workspace)
    assert Catalog(workspace.create()).batches("d") == []


def test_a_replace_level_mechanism_cannot_be_scoped():
    from fdptm.tasks.run import validate

    base = {"dataset": "d", "epsilon": 1, "delta": 1e-6, "topics": 2, "mechanism": "spectral"}
    validate(RunSpec.from_request(ReleaseRequest(**base), "r", "/w"))  # whole dataset: fine
    for scope in ({"batches": "1"}, {"since": "2024-01-01", "until": "2024-01-08"}):
        spec = RunSpec.from_request(ReleaseRequest(**base, **scope), "r", "/w")
        with pytest.raises(BadInputError, match="replace-one adjacency"):
            validate(spec)


def _bucketed(workspace, n: int = 4) -> Ledger:
    catalog = Catalog(workspace.create())
    with catalog.transaction() as con:
        catalog.create_dataset(con, "d", "author", author_buckets=n)
    return Ledger(catalog)


def test_author_buckets_compose_in_parallel_at_the_author_level(workspace):
    ledger = _bucketed(workspace)
    ledger.reserve("d", "low", _plan(1.0, A), scope=Scope((1,), buckets=(0, 1)))
    ledger.reserve("d", "high", _plan(1.0, A), scope=Scope((1, 2), buckets=(2, 3)))
    author = ledger.lifetime("d", A)
    assert author.epsilon == 1.0 and PARALLEL in author.accountant
    ledger.reserve("d", "week", _plan(1.0, A), scope=_week(0, (1, 2)))  # every bucket
    assert ledger.lifetime("d", A).epsilon == 2.0
    ledger.reserve("d", "again", _plan(0.5, A), scope=Scope((2,), buckets=(3,)))
    assert ledger.lifetime("d", A).epsilon == 2.5
    assert ledger.lifetime("d", A, within=Scope((1,), buckets=(0,))).epsilon == 2.0
    ledger.set_cap("d", 3.0, 1e-4, A)
    with pytest.raises(BudgetRefusedError):
        ledger.reserve("d", "over", _plan(1.0, A), scope=Scope((1,), buckets=(3,)))
    ledger.reserve("d", "fits", _plan(1.0, A), scope=Scope((1,), buckets=(0, 1)))


def test_author_buckets_are_declared_when_an_author_dataset_is_created(tmp_path, workspace):
    rows = [{"doc_id": f"x{i}", "text": "some words", "author_id": f"a{i}"} for i in range(4)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "d.txt").write_text("plain line\nanother line\n")
    with pytest.raises(BadInputError, match="this dataset is document-level"):
        ingest(tmp_path / "d.txt", "docs", workspace, author_buckets=4)
    with pytest.raises(BadInputError, match=r"in \[2, 4096\]"):
        ingest(tmp_path / "a.jsonl", "authors", workspace, author_buckets=1)
    ingest(tmp_path / "a.jsonl", "authors", workspace, author_buckets=4)
    assert Catalog(workspace).dataset("authors")["author_buckets"] == 4
    rows2 = [{"doc_id": "y", "text": "more words", "author_id": "a9"}]
    (tmp_path / "b.jsonl").write_text(json.dumps(rows2[0]) + "\n")
    with pytest.raises(BadInputError, match="declared when a dataset is created"):
        ingest(tmp_path / "b.jsonl", "authors", workspace, author_buckets=8)
    ingest(tmp_path / "b.jsonl", "authors", workspace)  # later batches need not repeat it


def test_buckets_are_a_keyed_hash_of_the_author_alone():
    from fdptm.storage.partitions import buckets_of, parse_buckets

    authors = pa.array(["a", "b", "a", "c", "d"] * 3)
    first = buckets_of(b"k" * 32, authors, 8).to_pylist()
    assert first == buckets_of(b"k" * 32, authors, 8).to_pylist()
    assert first[0] == first[2] and all(0 <= k < 8 for k in first)
    other = buckets_of(b"j" * 32, pa.array([f"u{i}" for i in range(200)]), 8).to_pylist()
    assert len(set(other)) == 8  # a key spreads 200 authors over every bucket
    assert parse_buckets("0..3") == (0, 1, 2, 3) and parse_buckets("5,1") == (1, 5)


@pytest.mark.parametrize("name", ["hdp-lda", "zhu", "cdp-lda", "topicdp-laplace", "dp-vi"])
def test_an_empty_partition_is_released_not_refused_after_the_spend(name):
    """A scoped run may find no document (an empty week or bucket): failing after the spend
    would tell that apart, so every mechanism a scope allows releases from noise."""
    from fdptm.mechanisms.lda import Corpus
    from fdptm.mechanisms.registry import MECHANISMS
    from fdptm.privacy.noise import NoiseSource

    context = {"n_topics": 3, "adjacency": D, "max_docs_per_author": 1, "iterations": 3}
    context["max_tokens_per_doc"] = 50
    mechanism = MECHANISMS[name]
    params = mechanism.params(2.0, 1e-5, context, {})
    for docs in (0, 2):
        empty = Corpus(np.zeros(docs + 1, np.int64), np.zeros(0, np.int32), 6)
        phi = np.asarray(mechanism.train(empty, 3, params, NoiseSource.create(1)))
        assert phi.shape == (3, 6) and np.allclose(phi.sum(axis=1), 1.0)


def test_the_bucket_key_is_never_replaced_once_a_bucketed_dataset_spent(workspace):
    from fdptm.errors import FdptmError

    ledger = _bucketed(workspace)
    key = workspace.bucket_key()
    ledger.reserve("d", "r", _plan(1.0, A), scope=Scope((1,), buckets=(0,)))
    assert workspace.bucket_key() == key
    (workspace.root / "secret.key").unlink()
    with pytest.raises(FdptmError, match="reshuffle the buckets"):
        workspace.bucket_key()
