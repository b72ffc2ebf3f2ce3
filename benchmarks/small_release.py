"""Fixed cost: a 100-document release, with Prefect's temporary API and with a running one.

    python benchmarks/small_release.py                  # writes benchmarks/small_release.md
    python benchmarks/small_release.py --baseline-python /path/to/other/venv/bin/python

The targets (issue 30): a 100-document release in at most 5 s wall as a fresh process
(ephemeral Prefect API) and in at most 1.5 s handed to a running release process
(``fdptm serve``). Issue 13's were 7 s and 4 s (the ``server`` arm).

Setup. The first 100 tweets of ../shared/data/pheme/pheme_raw.json are ingested into a
temporary workspace (document level). One release is run first and not timed (it fills the
PRE cache and the workspace's PRE'd word-list cache, as any earlier release would have).
Release: ``fdptm release --dataset small --epsilon 3 --delta 1e-6 --mechanism dp-vi
--topics 5 --iterations 20 --vocabulary wordfreq:en:5000 --m1 none --vocabulary-size 1000
--no-progress`` as its own process (no seed: production noise). A private vocabulary is not
used because M1 at epsilon 3 finds too few words in 100 tweets to train on.

Arms, interleaved (the order rotates every round) so that the shared machine's load falls
on all of them alike: ``ephemeral`` (no ``PREFECT_API_URL``: the process starts and stops
Prefect's temporary API server itself), ``server`` (``PREFECT_API_URL`` of a ``prefect
server start`` begun once before the rounds) and ``served`` (``fdptm serve --detach`` begun
once before the rounds, with the ``ephemeral`` arm's environment: the command is handed to
it and runs in a fork of its warm process). ``--history N`` first makes the workspace a used
one: N releases of the same command (handed to a ``fdptm serve`` of this checkout) before
it is copied for the arms, so its catalog holds N releases' rows, as a dataset with a
schedule's past does. With ``--baseline-python`` every arm also runs
another checkout's interpreter (an install of the code before the change, with its own
``fdptm serve``) on a copy of the same workspace, and the table gives each arm's ratio to
it. ``--kinds served`` times only the served arms (both servers are started either way).
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

TITLE = "Fixed cost: a 100-document release"
TARGETS = "a 100-document release in <= 5 s cold, <= 1.5 s handed to `fdptm serve` (issue 30)"
RELEASE = [
    "release",
    "--dataset",
    "small",
    "--epsilon",
    "3",
    "--delta",
    "1e-6",
    "--mechanism",
    "dp-vi",
    "--topics",
    "5",
    "--iterations",
    "20",
    "--vocabulary",
    "wordfreq:en:5000",
    "--m1",
    "none",
    "--vocabulary-size",
    "1000",
    "--no-progress",
]


KINDS = ("ephemeral", "server", "served")


def _release(python: str, env: dict) -> float:
    begun = time.perf_counter()
    fdptm(*RELEASE, env=env, python=python)
    return time.perf_counter() - begun


def _server(python: str, home: Path, port: int) -> tuple[subprocess.Popen, str]:
    env = clean_env(home, home)
    proc = subprocess.Popen(
        [python, "-m", "prefect", "server", "start", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = f"http://127.0.0.1:{port}/api"
    import httpx

    for _ in range(600):
        try:
            if httpx.get(f"{api}/health", timeout=1).status_code == 200:
                return proc, api
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("prefect server did not start in 120 s")


def history(base: Path, tmp: Path, n: int) -> None:
    """``n`` releases in ``base``, handed to a ``fdptm serve`` of this checkout."""
    sockets = tmp / "sockets-history"
    sockets.mkdir(mode=0o700)
    env = clean_env(base, tmp / "home-history") | {
        "FDPTM_SERVE": "on",
        "FDPTM_SERVE_DIR": str(sockets),
    }
    fdptm("serve", "--detach", env=env)
    try:
        for _ in range(n):
            fdptm(*RELEASE, env=env)
    finally:
        fdptm("serve", "--stop", env=env, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-python", help="another checkout's interpreter to compare")
    parser.add_argument("--out", help="output stem (default benchmarks/small_release)")
    parser.add_argument(
        "--history", type=int, default=0, help="releases made in the workspace before timing"
    )
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=KINDS,
        default=list(KINDS),
        help="the arms to time (default all); served needs fdptm serve in every python",
    )
    args = parser.parse_args()
    started = at_start()
    pythons = {"new": sys.executable}
    if args.baseline_python:
        pythons["baseline"] = args.baseline_python
    with tempfile.TemporaryDirectory(prefix="fdptm-small-") as tmp:
        tmp = Path(tmp)
        corpus = first_tweets(tmp / "small.jsonl")
        base = tmp / "base"
        fdptm("ingest", str(corpus), "--dataset", "small", env=clean_env(base, tmp / "home-ingest"))
        if args.history:
            history(base, tmp, args.history)
        servers, arms, stops = [], {}, []
        try:
            for i, (name, python) in enumerate(pythons.items()):
                workspace = tmp / f"ws-{name}"
                shutil.copytree(base, workspace)
                proc, api = _server(python, tmp / f"home-server-{name}", 4310 + i)
                servers.append(proc)
                env = clean_env(workspace, tmp / f"home-{name}")
                _release(python, env)  # warm caches
                arms[f"{name} ephemeral"] = (python, env)
                arms[f"{name} server"] = (python, env | {"PREFECT_API_URL": api})
                if "served" in args.kinds:  # handed to `fdptm serve` (the baseline must have it)
                    sockets = tmp / f"sockets-{name}"
                    sockets.mkdir(mode=0o700)
                    served = env | {"FDPTM_SERVE": "on", "FDPTM_SERVE_DIR": str(sockets)}
                    fdptm("serve", "--detach", env=served, python=python)
                    stops.append((python, served))
                    arms[f"{name} served"] = (python, served)
            timed = [name for name in arms if name.split()[-1] in args.kinds]
            walls = rounds(timed, args.rounds, lambda name: _release(*arms[name]))
        finally:
            for proc in servers:
                proc.terminate()
                proc.wait(timeout=30)
            for python, env in stops:
                fdptm("serve", "--stop", env=env, python=python, check=False)
    report = {"machine": started, "rounds": args.rounds, "history": args.history, "walls": walls}
    print(save("small_release", TITLE, render(report), report, args.out).read_text())


def render(r: dict) -> str:
    lines = [
        "Release: `fdptm " + " ".join(RELEASE) + "` on the first 100 PHEME tweets, a fresh "
        f"process each time; {r['rounds']} interleaved rounds (see the module docstring). "
        "Targets (issue 30): at most 5 s cold (`ephemeral`: a fresh process and Prefect's "
        "temporary API), at most 1.5 s handed to a running release process (`served`: "
        "`fdptm serve --detach` started once before the rounds, holding its own temporary "
        "API); `server` is a fresh process with a running Prefect server."
        + (
            f" The workspace held {r['history']} earlier releases of the same command."
            if r.get("history")
            else ""
        ),
        "",
        "| arm | median wall (s) | min (s) | max (s) | ratio to baseline (medians) |",
        "|---|---|---|---|---|",
    ]
    walls = r["walls"]
    for name, values in walls.items():
        other = walls.get(name.replace("new", "baseline")) if name.startswith("new") else None
        ratio = f"{statistics.median(values) / statistics.median(other):.2f}" if other else ""
        lines.append(
            f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | "
            f"{max(values):.2f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
