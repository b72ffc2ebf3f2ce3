"""Releases scoped to partitions through the real flow: they read only their batches and
days, the manifest names the partitions (never their sizes), and the ledger composes
releases over disjoint weeks in parallel.

The corpus is PHEME's real tweets with assigned timestamps over ten weeks, in two batches
(the ``timed_pheme`` fixture). The vocabulary is public (wordfreq), so M2 spends the whole
budget and each release has one ledger entry.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow.parquet as pq
import pytest

from fdptm.cli import main
from fdptm.storage.catalog import Catalog
from fdptm.storage.partitions import day_number, days
from fdptm.tasks.ingest import ingest

pytestmark = pytest.mark.usefixtures("prefect_harness")
MONDAY = dt.date(2024, 1, 1)


def _release(workspace, *extra: str, epsilon: str = "2") -> int:
    return main(
        [
            "release",
            "--dataset",
            "pheme",
            "--epsilon",
            epsilon,
            "--delta",
            "1e-6",
            "--topics",
            "3",
            "--iterations",
            "5",
            "--seed",
            "3",
            "--vocabulary",
            "wordfreq:en:3000",
            "--no-progress",
            "--workspace",
            str(workspace.root),
            *extra,
        ]
    )


def _last(workspace) -> tuple[dict, dict]:
    catalog = Catalog(workspace)
    run = catalog.query("SELECT run_id, path FROM releases ORDER BY released_at DESC LIMIT 1")[0]
    manifest = json.loads((workspace.root / run["path"] / "manifest.json").read_text())
    bounded = catalog.artifact(f"run/{run['run_id']}/bounded_tokens")
    return manifest, bounded


def _in_days(workspace, batches, first: dt.date, end: dt.date) -> int:
    n = 0
    for b in Catalog(workspace).batches("pheme"):
        if b["seq"] in batches:
            d = days(pq.read_table(workspace.root / b["path"], columns=["ts"]).column("ts"))
            n += sum(day_number(first) <= x < day_number(end) for x in d.to_pylist())
    return n


def test_week_releases_read_their_days_and_compose_in_parallel(timed_ws, capsys):
    week = [MONDAY + dt.timedelta(weeks=2), MONDAY + dt.timedelta(weeks=3)]
    assert _release(timed_ws, "--since", str(week[0]), "--until", str(week[1])) == 0
    manifest, bounded = _last(timed_ws)
    assert bounded["n_rows"] == _in_days(timed_ws, (1, 2), *week)
    partitions = manifest["partitions"]
    assert {k: partitions[k] for k in ("batches", "since", "until")} == {
        "batches": [1, 2],
        "since": "2024-01-15",
        "until": "2024-01-22",
    }
    assert "parallel" in partitions["composition"]
    assert not any("documents" in k or "rows" in k for k in partitions)
    scopes = [json.loads(e["scope"]) for e in Catalog(timed_ws).query("SELECT scope FROM ledger")]
    assert scopes == [
        {"batches": [1, 2], "since": "2024-01-15", "until": "2024-01-22", "buckets": None}
    ]

    nxt = [week[1], week[1] + dt.timedelta(weeks=1)]
    assert _release(timed_ws, "--since", str(nxt[0]), "--until", str(nxt[1])) == 0
    capsys.readouterr()
    assert main(["budget", "--dataset", "pheme", "--json", "--workspace", str(timed_ws.root)]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert totals["document"]["epsilon"] == 2.0  # two disjoint weeks: not 4


def test_batches_and_releases_left_are_scoped(timed_ws, capsys):
    assert _release(timed_ws, "--batches", "2") == 0
    _, bounded = _last(timed_ws)
    assert bounded["n_rows"] == Catalog(timed_ws).batches("pheme")[1]["n_rows"]
    root = str(timed_ws.root)
    assert main(["budget", "--dataset", "pheme", "--cap", "6", "1e-4", "--workspace", root]) == 0
    # week 8 lies in batch 2 (which the release above read at 2) and batch 1 (untouched):
    # what remains for it is 6 - 2, shared by --releases-left 2
    week = [MONDAY + dt.timedelta(weeks=8), MONDAY + dt.timedelta(weeks=9)]
    assert (
        _release(
            timed_ws,
            "--since",
            str(week[0]),
            "--until",
            str(week[1]),
            "--releases-left",
            "2",
            epsilon="100",
        )
        == 0
    )
    manifest, _ = _last(timed_ws)
    assert manifest["guarantee"]["epsilon"] == pytest.approx(2.0)
    assert (
        main(
            [
                "release",
                "--dataset",
                "pheme",
                "--epsilon",
                "1",
                "--delta",
                "1e-6",
                "--topics",
                "3",
                "--batches",
                "9",
                "--workspace",
                root,
            ]
        )
        == 2
    )
    assert "has no batch 9" in capsys.readouterr().err


def test_releases_over_disjoint_author_buckets_compose_in_parallel(
    tmp_path, pheme_raw, timed_ws, capsys
):
    from fdptm.storage.partitions import buckets_of
    from fdptm.storage.workspace import Workspace

    texts = json.loads(pheme_raw.read_text())["text"][:1200]
    path = tmp_path / "authors.jsonl"
    path.write_text(
        "".join(
            json.dumps({"doc_id": f"d{i}", "text": t, "author_id": f"a{i % 80}"}) + "\n"
            for i, t in enumerate(texts)
        )
    )
    workspace = Workspace.resolve(tmp_path / "ws")
    ingest(path, "people", workspace, author_buckets=4)
    authors = pq.read_table(workspace.root / Catalog(workspace).batches("people")[0]["path"])
    bucket = buckets_of(workspace.bucket_key(), authors.column("author_id"), 4).to_pylist()
    root = ["--workspace", str(workspace.root)]
    args = ["release", "--dataset", "people", "--epsilon", "2", "--delta", "1e-6", "--topics"]
    args += ["3", "--iterations", "5", "--seed", "3", "--vocabulary", "wordfreq:en:3000"]
    for chosen in ((0, 1), (2, 3)):
        assert main([*args, "--buckets", f"{chosen[0]}..{chosen[1]}", *root]) == 0
        manifest, bounded = _last(workspace)
        assert bounded["n_rows"] == sum(k in chosen for k in bucket)
        assert manifest["partitions"]["buckets"] == list(chosen)
        assert "author buckets" in manifest["partitions"]["composition"]
    capsys.readouterr()
    assert main(["budget", "--dataset", "people", "--json", *root]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert (totals["author"]["epsilon"], totals["author"]["composition"]) == (2.0, "parallel")
    assert main([*args, "--buckets", "4", *root]) == 2  # buckets are 0..3
    assert "has author buckets 0..3" in capsys.readouterr().err
    timed = ["--workspace", str(timed_ws.root)]
    assert main([*args[:2], "pheme", *args[3:], "--buckets", "0", *timed]) == 2
    assert "has none" in capsys.readouterr().err
