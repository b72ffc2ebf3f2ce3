"""The ledger: reserve/spend/refund, lifetime caps with units, and no overspend under races."""

from __future__ import annotations

import math
import multiprocessing as mp

import pytest

from fdptm.errors import BudgetRefusedError
from fdptm.privacy.accountant import StageSpec, plan_budget
from fdptm.privacy.adjacency import Adjacency
from fdptm.storage.catalog import Catalog, now
from fdptm.storage.ledger import Ledger
from fdptm.storage.workspace import Workspace

D, W = Adjacency.DOCUMENT, Adjacency.WORD


def _dataset(workspace: Workspace, name: str = "d") -> Ledger:
    catalog = Catalog(workspace.create())
    catalog.ensure_dataset(name, "document")
    catalog.execute(
        "INSERT INTO batches VALUES"
        " (?, 1, 'ingest-x', 'src', 'h', 'p', 'h', 1, 0, NULL, false, ?, false, NULL, NULL)",
        [name, now()],
    )
    return Ledger(catalog)


def _plan(eps, delta=1e-5, m2=D):
    specs = [
        StageSpec("vocabulary", "dp-set-union/weighted", D, True, 0.25),
        StageSpec("train", "m2", m2, m2 != W, 0.75),
    ]
    return plan_budget(eps, delta, specs, authors_are_documents=True)


def test_reserve_spend_refund_states(workspace):
    ledger = _dataset(workspace)
    ids = ledger.reserve("d", "run1", _plan(2.0))
    assert {e["state"] for e in ledger.entries("d")} == {"reserved"}
    ledger.spend(ids["vocabulary"])
    ledger.refund(ids["train"], "failed before reading data")
    states = {e["stage"]: e["state"] for e in ledger.entries("d")}
    assert states == {"vocabulary": "spent", "train": "refunded"}
    with pytest.raises(ValueError, match="cannot become refunded"):
        ledger.refund(ids["vocabulary"], "too late: it read private data")
    life = ledger.lifetime("d", D)
    assert life.epsilon == pytest.approx(0.5)  # only the spent quarter counts


def test_cap_refuses_before_anything_is_reserved(workspace):
    ledger = _dataset(workspace)
    ledger.set_cap("d", 3.0, 1e-4)
    ledger.reserve("d", "run1", _plan(2.0))
    with pytest.raises(
        BudgetRefusedError, match=r"has only epsilon=1, delta=0.00009 remaining"
    ) as err:
        ledger.reserve("d", "run2", _plan(2.0))
    assert err.value.exit_code == 3
    assert len(ledger.entries("d")) == 2
    ledger.reserve("d", "run3", _plan(1.0))  # exactly what remains is allowed
    assert ledger.lifetime("d", D).epsilon == pytest.approx(3.0)


def test_delta_is_capped_too(workspace):
    ledger = _dataset(workspace)
    ledger.set_cap("d", 100.0, 1.5e-5)
    ledger.reserve("d", "run1", _plan(1.0, 1e-5))
    with pytest.raises(BudgetRefusedError, match="delta"):
        ledger.reserve("d", "run2", _plan(1.0, 1e-5))


def test_word_level_runs_cannot_be_charged_to_a_document_level_cap(workspace):
    ledger = _dataset(workspace)
    ledger.set_cap("d", 1000.0, 1e-4)
    with pytest.raises(BudgetRefusedError, match="gives no document-level bound"):
        ledger.reserve("d", "run1", _plan(10.0, m2=W))
    ledger.set_cap("d", 1000.0, 1e-4, W)
    ledger.reserve("d", "run1", _plan(10.0, m2=W))
    assert ledger.lifetime("d", W).epsilon == pytest.approx(10.0)
    with pytest.raises(ValueError):
        ledger.lifetime("d", D)


def test_lifetime_converts_document_spends_to_word_level(workspace):
    ledger = _dataset(workspace)
    ledger.reserve("d", "run1", _plan(2.0))  # document-level run: 0.5 + 1.5
    life = ledger.lifetime("d", W)
    assert life.epsilon == pytest.approx(4.0)  # group of two on each stage
    expected_delta = sum((1 + math.exp(e["epsilon"])) * e["delta"] for e in ledger.entries("d"))
    assert life.delta == pytest.approx(expected_delta)


def _race(root: str, barrier, results) -> None:
    ledger = Ledger(Catalog(Workspace.resolve(root)))
    barrier.wait()
    try:
        ledger.reserve("d", f"run-{mp.current_process().pid}", _plan(2.0))
        results.put("ok")
    except BudgetRefusedError:
        results.put("refused")


@pytest.mark.parametrize("backend", ["duckdb", "postgresql"])
def test_two_processes_at_once_never_overspend(workspace, backend, request, monkeypatch):
    if backend == "postgresql":  # the processes share the catalog through $FDPTM_CATALOG
        url = request.getfixturevalue("postgres_server").database()
        monkeypatch.setenv("FDPTM_CATALOG", url)
        workspace = Workspace.resolve(workspace.root)
    ledger = _dataset(workspace)
    ledger.set_cap("d", 3.0, 1e-4)  # room for one run of epsilon 2, not two
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [
        ctx.Process(target=_race, args=(str(workspace.root), barrier, results)) for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    outcomes = sorted(results.get(timeout=5) for _ in procs)
    assert outcomes == ["ok", "refused", "refused", "refused"]
    assert ledger.lifetime("d", D).epsilon == pytest.approx(2.0)


@pytest.mark.parametrize("damage", ["empty", "short", "directory", "not hex"])
def test_a_damaged_secret_key_is_refused_as_bad_input(workspace, damage):
    """Exit 2 before anything is read (``Workspace.check_key``), whatever the damage."""
    from fdptm.errors import BadInputError

    workspace.create()
    first = workspace.commitment("ab" * 32)
    assert first == workspace.commitment("ab" * 32) and len(first) == 64
    key = workspace.root / "secret.key"
    if damage == "directory":
        key.unlink()
        key.mkdir()
    else:
        key.write_text({"empty": "", "short": "abcd", "not hex": "zz" * 32}[damage])
    with pytest.raises(BadInputError, match="not a readable file holding a 32-byte key"):
        workspace.check_key()
    with pytest.raises(BadInputError, match="not a readable file holding a 32-byte key"):
        workspace.commitment("ab" * 32)


def test_exact_budget_arithmetic_fits_five_releases_into_their_cap(workspace):
    """(10, 5e-5) holds exactly five runs of (2, 1e-5); the sixth is refused with a message
    whose figures agree (float sums refused the fifth, saying 2 was needed and 2 remained)."""
    ledger = _dataset(workspace)
    ledger.set_cap("d", 10.0, 5e-5)
    for i in range(5):
        ledger.reserve("d", f"run{i}", _plan(2.0, 1e-5))
    life = ledger.lifetime("d", D)
    assert (life.epsilon, life.delta) == (10.0, 5e-5)
    with pytest.raises(BudgetRefusedError) as err:
        ledger.reserve("d", "run5", _plan(2.0, 1e-5))
    message = str(err.value)
    assert "needs epsilon=2, delta=0.00001" in message
    assert "has only epsilon=0, delta=0 remaining" in message


@pytest.mark.parametrize("delta", [1e-5, 3e-7, 1e-9, 0.1])
@pytest.mark.parametrize("m2", [D, W])
def test_stated_totals_never_exceed_what_was_asked(delta, m2):
    """Shares and group-of-two inversions are rounded down: composing the plan's native
    budgets back never gives more than the request (was 1.0000000000000052e-05)."""
    from fdptm.privacy.accountant import compose, exact, exact_sum

    for eps in (0.3, 1.0, 2.7, 3.0, 10.0 / 3.0):
        plan = _plan(eps, delta, m2)
        spends = [(s.epsilon, s.delta, s.adjacency) for s in plan.stages]
        total = compose(spends, plan.unit, authors_are_documents=True)
        exact_eps = exact_sum(c.epsilon_out for c in total.conversions)
        exact_delta = exact_sum(c.delta_out for c in total.conversions)
        assert exact_eps <= exact(eps) and exact_delta <= exact(delta)
        assert total.epsilon <= eps and total.delta <= delta
        assert total.epsilon == pytest.approx(eps, rel=1e-12)
        assert total.delta == pytest.approx(delta, rel=1e-12)


def test_a_mechanism_starts_once_per_charge_and_a_started_stage_is_never_refunded(workspace):
    from fdptm.errors import FdptmError

    ledger = _dataset(workspace)
    ledger.reserve("d", "run1", _plan(2.0))
    ledger.commit("run1")
    ledger.start_mechanism("run1", "vocabulary")
    with pytest.raises(FdptmError, match="never runs twice on one charge"):
        ledger.start_mechanism("run1", "vocabulary")  # a retry of M1 on the same charge
    ledger.refund_unused("run1", "vocabulary", "must not happen: M1 ran")
    ledger.refund_unused("run1", "train", "post-processing: M2 never started")
    states = {e["stage"]: e["state"] for e in ledger.entries("d")}
    assert states == {"vocabulary": "spent", "train": "refunded"}


def test_commit_refuses_a_run_whose_reservation_is_gone(workspace):
    from fdptm.errors import FdptmError

    ledger = _dataset(workspace)
    ids = ledger.reserve("d", "run1", _plan(2.0))
    ledger.refund(ids["train"], "closed as dead by mistake")
    with pytest.raises(FdptmError, match="must not read private data"):
        ledger.commit("run1")


def test_releases_left_plans_always_fit_their_cap(workspace):
    """n shares of what remains are rounded down, never to nearest: the last release of a
    plan fits (rounding to nearest refused it about one time in three)."""
    from fdptm.tasks import run as lifecycle
    from fdptm.tasks.spec import RunSpec

    ledger = _dataset(workspace)
    ledger.set_cap("d", 4.0, 3e-5)
    for n in (3, 2, 1):
        spec = RunSpec(
            run_id=f"r{n}",
            workspace=str(workspace.root),
            dataset="d",
            epsilon=100.0,
            delta=0.5,
            topics=3,
            mechanism="topicdp-laplace",
            m1_fraction=0.33,
            releases_left=n,
        )
        spec = lifecycle.share_remaining(spec, ledger, D)
        calibration = lifecycle.calibrate(spec, D)
        ledger.reserve("d", f"r{n}", calibration.plan, calibration.accounting())
    life = ledger.lifetime("d", D)
    assert life.epsilon <= 4.0 and life.epsilon == pytest.approx(4.0, rel=1e-12)


def test_a_lost_attempt_never_changes_the_next_releases_share(tmp_path):
    """Review item 2 (issue 29): two ledgers with the same requests, one of whose runs lost
    its train stage and reserved it again, give the next ``--releases-left`` run the same
    share; the lost charge still counts against the cap."""
    from fdptm.tasks import run as lifecycle
    from fdptm.tasks.spec import RunSpec

    def spec(run_id: str, ws: Workspace) -> RunSpec:
        return RunSpec(
            run_id=run_id,
            workspace=str(ws.root),
            dataset="d",
            epsilon=100.0,
            delta=0.5,
            topics=3,
            mechanism="topicdp-laplace",
            releases_left=3,
        )

    shares = []
    for crashed in (False, True):
        ws = Workspace(tmp_path / f"ws{crashed}")
        ledger = _dataset(ws)
        ledger.set_cap("d", 6.0, 3e-5)
        first = lifecycle.share_remaining(spec("r1", ws), ledger, D)
        calibration = lifecycle.calibrate(first, D)
        ledger.reserve("d", "r1", calibration.plan, calibration.accounting())
        ledger.commit("r1")
        if crashed:
            (train,) = [s for s in calibration.plan.stages if s.stage == "train"]
            with ledger.catalog.transaction() as con:
                ledger.replace_lost(con, "d", "r1", train, calibration.accounting())
        shares.append(lifecycle.share_remaining(spec("r2", ws), ledger, D))
        lost = ledger.lifetime("d", D).epsilon
        assert lost == pytest.approx(first.epsilon + (train.epsilon if crashed else 0.0))
    assert shares[0].epsilon == shares[1].epsilon == pytest.approx((6.0 - 2.0) / 3)
    assert shares[0].delta == shares[1].delta


def test_a_random_dp_spend_against_a_cap_at_another_unit_is_refused_not_a_crash(workspace):
    from fdptm.mechanisms.guarantee import RANDOM_DP

    ledger = _dataset(workspace)
    ledger.set_cap("d", 100.0, 1e-3, W)
    specs = [
        StageSpec("vocabulary", "dp-set-union/weighted", D, True, 0.25),
        StageSpec("train", "topicdp", D, True, 0.75, RANDOM_DP),
    ]
    plan = plan_budget(2.0, 1e-5, specs, authors_are_documents=True)
    with pytest.raises(BudgetRefusedError, match="State the cap at the dataset's own unit"):
        ledger.reserve("d", "run1", plan, {"train": {"gamma": 0.1}})


def _request(workspace: Workspace, **options):
    from fdptm.request import ReleaseRequest

    return ReleaseRequest(
        dataset="d", epsilon=3, delta=1e-6, topics=5, workspace=str(workspace.root), **options
    )


def _counted_checks(monkeypatch) -> list[int]:
    """The number of cap checks ``Ledger.check`` makes from now on (each one runs)."""
    calls: list[int] = []
    check = Ledger.check

    def counted(self, *args, **kwargs):
        calls.append(1)
        return check(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "check", counted)
    return calls


@pytest.mark.parametrize(
    "options",
    [{}, {"vocabulary": "wordfreq:en:5000", "m1": "none"}, {"mechanism": "topicdp"}],
    ids=["dp-vi", "dp-vi, public vocabulary", "topicdp (random-DP)"],
)
def test_preflight_checks_the_cap_once(workspace, monkeypatch, options):
    """Each check reads the dataset's whole hash chain (``benchmarks/preflight.md``): a plan
    without a random-DP stage is checked before calibration, and again after it only if
    calibration changed the charges, which it does not; a random-DP plan only after it."""
    from fdptm.storage.ledger import charges
    from fdptm.tasks import run

    _dataset(workspace)
    request = _request(workspace, **options)
    _, spec, _, unit = run._checked(request)
    calibration = run.calibrate(spec, unit)
    before = charges(run.budget_plan(spec, unit).stages, {})
    after = charges(calibration.plan.stages, calibration.accounting())
    assert (before == after) == ("mechanism" not in options)
    calls = _counted_checks(monkeypatch)
    run.preflight(request)
    assert len(calls) == 1


@pytest.mark.parametrize("options", [{}, {"mechanism": "topicdp"}], ids=["dp-vi", "topicdp"])
def test_preflight_refuses_a_release_the_cap_cannot_cover(workspace, options):
    """Before calibration for dp-vi (nothing calibrated: ``_calibrated``'s cache stays
    empty), after it for a random-DP mechanism; either way before Prefect starts, with
    nothing reserved."""
    from fdptm.tasks import run

    ledger = _dataset(workspace)
    ledger.set_cap("d", 2.0, 1e-4)
    run._calibrated.cache_clear()
    with pytest.raises(BudgetRefusedError, match=r"remaining"):
        run.preflight(_request(workspace, **options))
    assert run._calibrated.cache_info().currsize == (1 if options else 0)
    assert ledger.entries("d") == []


def test_charges_differ_when_what_the_cap_counts_differs():
    """``preflight`` checks again after calibration when the charges differ: a stage's
    share, adjacency or calibrated gamma (a random-DP stage's) changes them, its name and
    mechanism do not."""
    from dataclasses import replace

    from fdptm.storage.ledger import charges

    stages = _plan(2.0).stages
    assert charges(stages, {}) == charges(
        [replace(s, mechanism="other") for s in stages], {"train": {"accountant": "x"}}
    )
    assert charges(stages, {}) != charges(stages, {"train": {"gamma": 1e-9}})
    assert charges(stages, {}) != charges([replace(stages[0], epsilon=0.4), stages[1]], {})
    assert charges(stages, {}) != charges([stages[0], replace(stages[1], adjacency=W)], {})
