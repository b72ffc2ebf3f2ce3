"""Fault injection: real ``kill -9`` of ``fdptm release`` at every stage boundary, concurrent
ingests and releases, and what ``fdptm recover`` / ``--resume`` leave in the ledger.

    python benchmarks/faults.py [--repeats 2]

Each kill starts a real ``fdptm release`` process (hdp-lda, word level, on a small corpus)
with ``FDPTM_KILL_AT`` set (``fdptm.faults``), so it dies by SIGKILL exactly at that point;
then ``fdptm recover`` and ``fdptm release --resume`` run as real processes. After each
scenario the ledger is checked: no entry ``reserved`` by a dead run, one live spent entry per
DP stage (nothing spent twice), every stored DP output reused (nothing lost), and a lost DP
stage (killed while running) charged twice: once lost, once re-run. The concurrency part
starts two ingests of one file at once, and two releases at once under a cap that fits only
one. Results go to ``benchmarks/faults_results.md``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, save  # noqa: E402

POINTS = [
    "after-reserve",
    "during-preprocess",
    "after-preprocess",
    "after-bounding",
    "during-vocabulary",
    "after-vocabulary",
    "after-sanitize",
    "during-train",
    "after-train",
    "during-release",
    "after-release",
]
RELEASE = ["--epsilon", "1000", "--delta", "1e-5", "--topics", "2", "--iterations", "5"]
MECHANISM = ["--mechanism", "hdp-lda", "--no-progress"]
CLI = [sys.executable, "-m", "fdptm.cli"]


def fdptm(ws: Path, *args: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("FDPTM_KILL_AT", None)
    if kill_at:
        env["FDPTM_KILL_AT"] = kill_at
    return subprocess.run(
        [*CLI, *args, "--workspace", str(ws)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def corpus(directory: Path) -> Path:
    path = directory / "small.txt"
    lines = ["apple banana cherry grape"] * 40 + ["durian elderberry figs lemon"] * 40
    path.write_text("\n".join(lines))
    return path


def ledger(ws: Path) -> list[dict]:
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace

    return Catalog(Workspace.resolve(ws)).query("SELECT * FROM ledger")


def kill_scenario(directory: Path, point: str) -> dict:
    ws = directory / "ws"
    assert fdptm(ws, "ingest", str(corpus(directory)), "--dataset", "small").returncode == 0
    killed = fdptm(ws, "release", "--dataset", "small", *RELEASE, *MECHANISM, kill_at=point)
    before = {e["stage"]: e["state"] for e in ledger(ws)}
    recovered = fdptm(ws, "recover")
    after_recover = ledger(ws)
    run_id = after_recover[0]["run_id"]
    reserved_after_recover = sum(e["state"] == "reserved" for e in after_recover)
    resumed = fdptm(ws, "release", "--resume", run_id, "--no-progress")
    final = ledger(ws)
    live = sorted(e["stage"] for e in final if "/lost-" not in e["stage"] and e["state"] == "spent")
    lost = sorted(e["stage"] for e in final if "/lost-" in e["stage"])
    published = (ws / "releases" / run_id / "manifest.json").exists()
    refunded = sum(e["state"] == "refunded" for e in final)
    expect_refund = point == "after-reserve"
    ok = (
        killed.returncode == -signal.SIGKILL
        and recovered.returncode == 0
        and reserved_after_recover == 0
        and (
            (expect_refund and refunded == 2 and resumed.returncode == 2)
            or (
                not expect_refund
                and resumed.returncode == 0
                and published
                and live == ["train", "vocabulary"]
            )
        )
    )
    return {
        "point": point,
        "killed": killed.returncode == -signal.SIGKILL,
        "ledger at kill": ", ".join(f"{k} {v}" for k, v in sorted(before.items())),
        "reserved after recover": reserved_after_recover,
        "resume exit": resumed.returncode,
        "live spent": len(live),
        "lost (charged again)": ", ".join(lost) or "-",
        "refunded": refunded,
        "published": published,
        "ok": ok,
    }


def concurrent_ingests(directory: Path) -> dict:
    ws = directory / "ws"
    path = corpus(directory)
    procs = [
        subprocess.Popen(
            [*CLI, "ingest", str(path), "--dataset", "small", "--workspace", str(ws)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    codes = sorted(p.wait(timeout=900) for p in procs)
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace

    catalog = Catalog(Workspace.resolve(ws))
    rows = sum(b["n_rows"] for b in catalog.batches("small")) if catalog.dataset("small") else 0
    return {"exit codes": codes, "rows stored": rows, "ok": rows == 80 and 0 in codes}


def concurrent_releases(directory: Path) -> dict:
    ws = directory / "ws"
    assert fdptm(ws, "ingest", str(corpus(directory)), "--dataset", "small").returncode == 0
    cap = ["budget", "--dataset", "small", "--cap", "1500", "1e-4", "--unit", "word"]
    assert fdptm(ws, *cap).returncode == 0
    procs = [
        subprocess.Popen(
            [*CLI, "release", "--dataset", "small", *RELEASE, *MECHANISM, "--workspace", str(ws)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    codes = sorted(p.wait(timeout=900) for p in procs)
    from fdptm.privacy.adjacency import Adjacency
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.ledger import Ledger
    from fdptm.storage.workspace import Workspace

    life = Ledger(Catalog(Workspace.resolve(ws))).lifetime("small", Adjacency.WORD)
    return {
        "exit codes": codes,
        "word-level epsilon spent": round(life.epsilon, 9),
        "ok": codes == [0, 3] and round(life.epsilon, 9) == 1000,
    }


def table(rows: list[dict]) -> list[str]:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    started = at_start()
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    with prefect_test_harness(server_startup_timeout=180):
        os.environ["PREFECT_API_URL"] = PREFECT_API_URL.value()
        kills, ingests, releases = [], [], []
        for _ in range(args.repeats):
            for point in POINTS:
                with tempfile.TemporaryDirectory() as d:
                    kills.append(kill_scenario(Path(d), point))
                    print(kills[-1], flush=True)
            with tempfile.TemporaryDirectory() as d:
                ingests.append(concurrent_ingests(Path(d)))
            with tempfile.TemporaryDirectory() as d:
                releases.append(concurrent_releases(Path(d)))
    lines = [
        f"### {len(kills)} kills (SIGKILL at the named point), then `fdptm recover` and "
        "`fdptm release --resume`",
        "",
        *table(kills),
        "",
        f"All scenarios as expected: {all(k['ok'] for k in kills)}.",
        "",
        "### Two `fdptm ingest` of one file at once (80 rows)",
        "",
        *table(ingests),
        "",
        "### Two `fdptm release` at once under a cap that fits one",
        "",
        *table(releases),
        "",
    ]
    record = {"machine": started, "kills": kills, "ingests": ingests, "releases": releases}
    title = "Fault injection: kills, concurrency, recovery"
    print(save("faults_results", title, "\n".join(lines), record).read_text())


if __name__ == "__main__":
    main()
