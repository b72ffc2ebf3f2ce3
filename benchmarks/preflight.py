"""A release's checks before Prefect starts (``tasks.run.preflight``) on a dataset with history.

    python benchmarks/preflight.py --history 150 --baseline-python /path/to/other/venv/bin/python

Each cap check reads every chained ledger row of the dataset and compares it with its last
image in the hash chain (``storage.chain.check_dataset``), so its cost grows with the
releases the dataset has made. Setup: the first 100 PHEME tweets ingested, then ``--history``
releases of ``benchmarks/small_release.py``'s command (handed to a ``fdptm serve``). Each arm
is a fresh process of its interpreter that runs ``preflight`` for the same request once
untimed, then ``--calls`` times; the rounds alternate the arms, and the table gives the
median over rounds of each process's median call.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, clean_env, fdptm, first_tweets, rounds, save  # noqa: E402
from small_release import RELEASE, history  # noqa: E402

TITLE = "A release's checks before Prefect starts, on a dataset with history"
TARGETS = "none of its own: part of the 100-document release (issue 30)"
NEEDS = "--history N (releases made first; 150 take about 4 min)"
SCRIPT = """
import statistics, sys, time
from fdptm.request import ReleaseRequest
from fdptm.tasks import run
request = ReleaseRequest(dataset="small", epsilon=3, delta=1e-6, mechanism="dp-vi", topics=5,
    iterations=20, vocabulary="wordfreq:en:5000", m1="none", vocabulary_size=1000)
run.preflight(request)
times = []
for _ in range(int(sys.argv[1])):
    start = time.perf_counter()
    run.preflight(request)
    times.append(time.perf_counter() - start)
print(statistics.median(times) * 1e3)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--history", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--baseline-python", help="another checkout's interpreter to compare")
    parser.add_argument("--out", help="output stem (default benchmarks/preflight)")
    args = parser.parse_args()
    started = at_start()
    pythons = {"new": sys.executable}
    if args.baseline_python:
        pythons["baseline"] = args.baseline_python
    with tempfile.TemporaryDirectory(prefix="fdptm-preflight-") as tmp:
        tmp = Path(tmp)
        workspace = tmp / "ws"
        corpus = first_tweets(tmp / "small.jsonl")
        fdptm("ingest", str(corpus), "--dataset", "small", env=clean_env(workspace, tmp / "home"))
        history(workspace, tmp, args.history)
        env = clean_env(workspace, tmp / "home")

        def one(name: str) -> float:
            done = subprocess.run(
                [pythons[name], "-c", SCRIPT, str(args.calls)],
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                check=True,
            )
            return float(done.stdout.split()[-1])

        times = rounds(pythons, args.rounds, one, lambda ms: f"{ms:.1f} ms")
    report = {"machine": started, "history": args.history, "calls": args.calls, "ms": times}
    print(save("preflight", TITLE, render(report), report, args.out).read_text())


def render(r: dict) -> str:
    lines = [
        f"`preflight` of `fdptm {' '.join(RELEASE)}` on the first 100 PHEME tweets after "
        f"{r['history']} releases of it, in ms: median over the rounds of each process's "
        f"median of {r['calls']} calls (range over the rounds).",
        "",
        "| arm | ms per preflight | ratio to baseline |",
        "|---|---|---|",
    ]
    ms = r["ms"]
    for name, values in ms.items():
        ratio = (
            f"{statistics.median(values) / statistics.median(ms['baseline']):.2f}"
            if name != "baseline" and "baseline" in ms
            else ""
        )
        lines.append(
            f"| {name} | {statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f}) "
            f"| {ratio} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
