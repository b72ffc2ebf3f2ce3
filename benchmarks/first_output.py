"""Time to a release's first line and to a refusal, each a fresh ``fdptm`` process.

    python benchmarks/first_output.py            # writes benchmarks/first_output.{json,md}

Issue 27's targets: a release's first line (what it will do: dataset, unit, budget, stages)
within 1 s of start, and every refusal that needs no data within 1 s, before Prefect is
imported (tests/test_cli_first_contact.py checks the "before Prefect" part).

Setup: the first 100 PHEME tweets ingested into a temporary workspace (document level),
plus a copy of it with a damaged ``secret.key`` and a copy whose lifetime cap is spent. Arms,
interleaved (the order rotates every round, so the shared machine's load falls on all of them
alike), each the wall time from ``Popen`` to the first line on stdout (the release) or to the
process's exit (the refusals):

* ``first line``: ``fdptm release --dataset small --epsilon 3 --delta 1e-6 --topics 5``, killed
  once its first line is read (before anything is reserved);
* ``bad value``: ``--epsilon -1``; ``unknown dataset``; ``bad key`` (a short ``secret.key``);
  ``too many topics`` (``--topics 5000``); ``cap`` (the cap has nothing left: refused by the
  ledger on the budget plan, before any noise is calibrated).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, clean_env, fdptm, first_tweets, rounds, save  # noqa: E402

TITLE = "Time to a release's first line and to a refusal"
TARGETS = "a release's first line, and every refusal that needs no data, within 1 s (issue 27)"
RELEASE = ["release", "--dataset", "small", "--epsilon", "3", "--delta", "1e-6", "--topics", "5"]
ARMS = {
    "first line": ([], "ws"),
    "bad value": (["--epsilon", "-1"], "ws"),
    "unknown dataset": (["--dataset", "nope"], "ws"),
    "bad key": ([], "ws-bad-key"),
    "too many topics": (["--topics", "5000"], "ws"),
    "cap": ([], "ws-capped"),
}


def _time(argv: list[str], env: dict, first_line: bool) -> float:
    """Seconds to the first stdout line (then the process is killed), or to the exit."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fdptm.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if first_line:
        line = proc.stdout.readline()
        wall = time.perf_counter() - start
        proc.kill()
        proc.communicate()
        if not line.startswith("release of dataset"):
            raise RuntimeError(f"unexpected first line: {line!r}")
        return wall
    _, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode not in (2, 3) or "fdptm: error:" not in err:
        raise RuntimeError(f"expected a refusal, got exit {proc.returncode}: {err[-1000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", help="output stem (default benchmarks/first_output)")
    args = parser.parse_args()
    started = at_start()
    with tempfile.TemporaryDirectory(prefix="fdptm-first-") as tmp:
        tmp = Path(tmp)
        corpus = first_tweets(tmp / "small.jsonl")
        envs = {ws: clean_env(tmp / ws, tmp / "home") for ws in ("ws", "ws-bad-key", "ws-capped")}
        fdptm("ingest", str(corpus), "--dataset", "small", env=envs["ws"])
        shutil.copytree(tmp / "ws", tmp / "ws-bad-key")
        (tmp / "ws-bad-key" / "secret.key").write_text("abcd")
        shutil.copytree(tmp / "ws", tmp / "ws-capped")
        fdptm("budget", "--dataset", "small", "--cap", "1", "1e-7", env=envs["ws-capped"])

        def arm(name: str) -> float:
            extra, ws = ARMS[name]
            return _time([*RELEASE, *extra], envs[ws], name == "first line")

        walls = rounds(ARMS, args.rounds, arm)
    report = {"machine": started, "rounds": args.rounds, "walls": walls}
    print(save("first_output", TITLE, render(report), report, args.out).read_text())


def render(r: dict) -> str:
    lines = [
        f"Each a fresh `fdptm` process, {r['rounds']} interleaved rounds (module docstring). "
        "Target (issue 27): 1 s for the first line and for every refusal that needs no data.",
        "",
        "| arm | median (s) | min (s) | max (s) | within 1 s (median) |",
        "|---|---|---|---|---|",
    ]
    for name, values in r["walls"].items():
        median = statistics.median(values)
        lines.append(
            f"| {name} | {median:.2f} | {min(values):.2f} | {max(values):.2f} | "
            f"{'yes' if median <= 1.0 else 'no'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
