"""Backfill through the real CLI, flows and ledger, on PHEME's tweets with assigned times
over ten weeks (the ``timed_pheme`` fixture): eight weekly windows are released, a re-run
releases none, the ledger composes them in parallel, and a backfill killed mid-way
(``kill -9`` inside its third release of five weeks, after it spent and bounded) releases
exactly the missing windows when run again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import local_cluster

from fdptm.cli import main
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace
from fdptm.tasks.ingest import ingest

pytestmark = pytest.mark.usefixtures("prefect_harness")
RANGE = ["--by", "week", "--from", "2024-01-01", "--to", "2024-02-25"]  # 8 Monday weeks


def _request(epsilon: str) -> list[str]:
    return [
        "--dataset",
        "pheme",
        "--epsilon",
        epsilon,
        "--delta",
        "1e-6",
        "--topics",
        "3",
        "--iterations",
        "3",
        "--vocabulary",
        "wordfreq:en:2000",
        "--seed",
        "5",
    ]


def _released(workspace: Workspace, epsilon: float) -> list[str]:
    rows = Catalog(workspace).query(
        "SELECT json_extract_string(r.params, '$.since') AS since FROM releases rel"
        " JOIN runs r USING (run_id)"
        " WHERE CAST(json_extract(r.params, '$.epsilon') AS DOUBLE) = ? ORDER BY since",
        [epsilon],
    )
    return [r["since"] for r in rows]


def test_backfill_releases_each_week_once_and_composes_in_parallel(timed_ws, capsys):
    root = ["--workspace", str(timed_ws.root)]
    assert main(["backfill", *_request("1"), *RANGE, *root]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and all(" released " in line for line in lines)
    assert all("-DP" in line and "document-level adjacency" in line for line in lines)
    weeks = _released(timed_ws, 1.0)
    assert weeks == [
        "2024-01-01",
        "2024-01-08",
        "2024-01-15",
        "2024-01-22",
        "2024-01-29",
        "2024-02-05",
        "2024-02-12",
        "2024-02-19",
    ]
    assert main(["backfill", *_request("1"), *RANGE, *root]) == 0
    again = capsys.readouterr().out.splitlines()
    assert len(again) == 8 and all(": skipped " in line for line in again)
    assert all("-DP" in line and "adjacency (released before)" in line for line in again)
    assert all("TEST RUN" in line for line in again)  # seeded: the manifest's own statement
    assert _released(timed_ws, 1.0) == weeks
    # the same no-op in a fresh process, as a schedule runs it: no flow, so neither Prefect
    # nor the noise's imports (dp-accounting, numba)
    argv = ["backfill", *_request("1"), *RANGE, *root]
    script = (
        "import sys\nfrom fdptm.cli import main\n"
        f"code = main({argv!r})\n"
        'heavy = {m.split(".")[0] for m in sys.modules} & {"prefect", "dp_accounting", "numba"}\n'
        'print("EXIT", code, "HEAVY", sorted(heavy))\n'
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "EXIT 0 HEAVY []", done.stdout + done.stderr
    assert lines[:-1] == again
    assert main(["budget", "--dataset", "pheme", "--json", *root]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert totals["document"]["epsilon"] == 1.0  # eight disjoint weeks at epsilon 1 each
    assert totals["document"]["composition"] == "parallel"
    assert main(["budget", "--dataset", "pheme", *root]) == 0
    assert "the most any partition has spent" in capsys.readouterr().out


@pytest.mark.usefixtures("served")  # its commands are handed to a server
def test_a_killed_backfill_releases_exactly_the_missing_weeks_when_run_again(timed_ws):
    from prefect.settings import PREFECT_API_URL

    five = ["--by", "week", "--from", "2024-01-01", "--to", "2024-01-29"]  # 5 Monday weeks
    args = [sys.executable, "-m", "fdptm.cli", "backfill", *_request("2"), *five]
    args += ["--workspace", str(timed_ws.root)]
    env = dict(os.environ, PREFECT_API_URL=PREFECT_API_URL.value())
    killed = subprocess.run(
        args,
        env={**env, "FDPTM_KILL_AT": "after-bounding#3"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert len(_released(timed_ws, 2.0)) == 2
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    statuses = [line.split(": ")[1].split()[0] for line in again.stdout.splitlines()]
    assert statuses == ["skipped"] * 2 + ["resumed"] + ["released"] * 2
    assert len(_released(timed_ws, 2.0)) == 5


def test_the_python_api_lists_partitions_and_backfills_batches(timed_ws):
    import fdptm

    pheme = fdptm.Workspace(timed_ws.root).dataset("pheme")
    assert [b["batch"] for b in pheme.partitions()] == [1, 2]
    weeks = pheme.partitions(counts=True, by="week")
    assert {(w["batch"], w["since"]) for w in weeks} >= {(1, "2024-01-01"), (2, "2024-03-04")}
    assert sum(w["documents"] for w in weeks) == sum(
        b["n_rows"] for b in Catalog(timed_ws).batches("pheme")
    )
    fields = {"epsilon": 3, "delta": 1e-6, "topics": 3, "iterations": 3, "seed": 5}
    fields["vocabulary"] = "wordfreq:en:2000"
    first = pheme.backfill(by="batch", **fields)
    assert [(p["partition"], p["status"]) for p in first] == [
        ("batch 1", "released"),
        ("batch 2", "released"),
    ]
    again = pheme.backfill(by="batch", **fields)
    assert [p["status"] for p in again] == ["skipped", "skipped"]
    assert [p["run_id"] for p in again] == [p["run_id"] for p in first]


@pytest.mark.usefixtures("served")  # its commands are handed to a server
def test_a_partition_that_spent_and_cannot_go_on_is_not_retried(tmp_path, capsys):
    """A release killed (``kill -9``) after M1 spent, whose DP vocabulary is then damaged on
    disk: resuming it would run M1 again on the same charge, so the backfill reports it
    ``not-retried`` and spends nothing."""
    from prefect.settings import PREFECT_API_URL

    workspace = Workspace.resolve(tmp_path / "ws")
    path = tmp_path / "few.txt"
    path.write_text("\n".join(["apple banana cherry"] * 30))
    ingest(path, "few", workspace)
    args = ["backfill", "--dataset", "few", "--by", "batch", "--epsilon", "1", "--delta"]
    args += ["1e-6", "--topics", "3", "--seed", "1", "--workspace", str(workspace.root)]
    env = dict(os.environ, PREFECT_API_URL=PREFECT_API_URL.value())
    killed = subprocess.run(
        [sys.executable, "-m", "fdptm.cli", *args],
        env={**env, "FDPTM_KILL_AT": "after-vocabulary"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    catalog = Catalog(workspace)
    (vocab,) = catalog.query("SELECT path FROM artifacts WHERE name LIKE 'run/%/vocabulary'")
    (workspace.root / vocab["path"]).write_bytes(b"damaged")
    spent = catalog.query("SELECT count(*) AS n FROM ledger WHERE state = 'spent'")
    assert main(args) == 2
    out = capsys.readouterr().out
    assert "batch 1: not-retried" in out and "cannot go on" in out, out
    assert catalog.query("SELECT count(*) AS n FROM ledger WHERE state = 'spent'") == spent


def test_a_backfill_fans_out_on_a_dask_cluster(tmp_path, monkeypatch):
    """Two batches released by the workers of a real Dask LocalCluster (processes)."""
    from prefect.settings import PREFECT_API_URL

    from fdptm.flows.backfill import run_backfill
    from fdptm.request import ReleaseRequest

    workspace = Workspace.resolve(tmp_path / "ws")
    for part in (0, 1):
        path = tmp_path / f"part{part}.txt"
        words = ["apple banana cherry grape", "durian elderberry figs lemon"]
        path.write_text("\n".join([words[part]] * 40 + [words[1 - part]] * 20))
        ingest(path, "small", workspace)
    request = ReleaseRequest(
        dataset="small", epsilon=1000, delta=1e-5, topics=2, iterations=5,
        mechanism="hdp-lda", seed=3, workspace=str(workspace.root),
    )  # fmt: skip
    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())  # the workers inherit it
    with local_cluster(n_workers=2, threads_per_worker=1, processes=True) as cluster:
        result = run_backfill(request, "batch", dask_address=cluster.scheduler_address)
    assert [(p["partition"], p["status"]) for p in result["partitions"]] == [
        ("batch 1", "released"),
        ("batch 2", "released"),
    ]
    assert len(Catalog(workspace).query("SELECT run_id FROM releases")) == 2
