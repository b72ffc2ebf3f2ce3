"""A release's catalog overhead on PostgreSQL against DuckDB (issue 29).

    python benchmarks/catalog_backends.py     # writes benchmarks/catalog_backends.md

One release of gensim's Lee corpus (300 documents, `fdptm release`'s demo request:
hdp-lda, epsilon 500), unseeded, on each catalog: the workspace's DuckDB file, and a
PostgreSQL database on a local server (Debian's package, started here as the tests start it,
on loopback: the network cost of a remote database is not in these figures). Each release
runs in a fresh process with the same Prefect server; the arms alternate, ROUNDS times.
Measured inside the process: the wall time of the release command, and the time spent inside
outermost catalog blocks (``Catalog.connect``, which every catalog call goes through: the
lock, the statements, the commit), with the number of blocks. The table gives medians and
the ratio PostgreSQL / DuckDB, both measured in one run on this machine.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from harness import at_start, fdptm, rounds, save  # noqa: E402

ROUNDS = 5
NEEDS = "PostgreSQL 15's server binaries (Debian's postgresql-15)"
REQUEST = ["--epsilon", "500", "--delta", "1e-5", "--topics", "5", "--iterations", "20"]


def one(workspace: str) -> dict:
    """Run one release here, timing the outermost catalog blocks (the child's job)."""
    from fdptm.cli import main
    from fdptm.storage import catalog as catalog_module

    spent = {"seconds": 0.0, "blocks": 0}
    depth = {"n": 0}
    original = catalog_module.Catalog.connect

    @contextmanager
    def timed(self):
        depth["n"] += 1
        start = time.perf_counter()
        try:
            with original(self) as con:
                yield con
        finally:
            depth["n"] -= 1
            if depth["n"] == 0:
                spent["seconds"] += time.perf_counter() - start
                spent["blocks"] += 1

    catalog_module.Catalog.connect = timed
    args = ["release", "--dataset", "lee", *REQUEST, "--mechanism", "hdp-lda", "--no-progress"]
    start = time.perf_counter()
    code = main([*args, "--workspace", workspace])
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"the release failed with exit code {code}")
    return {"wall": wall, **spent}


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import free_port, shared_keys
    from gensim.test.utils import datapath
    from postgres_server import PostgresServer
    from small_release import _server  # the same Prefect server as that benchmark's

    started = at_start()
    root = Path(tempfile.mkdtemp(prefix="fdptm-bench-catalog-"))
    keys = shared_keys(root)  # both arms sign with one key; PostgreSQL's hosts need both
    pg = PostgresServer(free_port()).start()
    server, api = _server(sys.executable, root, free_port())
    try:
        arms = {"duckdb": None, "postgresql": pg.database()}
        workspaces = {}
        for arm, url in arms.items():
            env = _env(api, url, keys)
            workspaces[arm] = str(root / arm)
            fdptm(
                *["ingest", datapath("lee_background.cor"), "--dataset", "lee"],
                *["--format", "lines", "--workspace", workspaces[arm]],
                env=env,
            )

        def release(arm: str) -> dict:
            done = subprocess.run(
                [sys.executable, __file__, "--one", workspaces[arm]],
                env=_env(api, arms[arm], keys),
                capture_output=True,
                text=True,
                check=True,
            )
            return json.loads(done.stdout.strip().splitlines()[-1])

        results = rounds(arms, ROUNDS, release, lambda r: f"{r['wall']:.2f} s")
    finally:
        server.terminate()
        server.wait(timeout=60)
        pg.stop()
    _write(started, results)


def _env(api: str, url: str | None, keys: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FDPTM_")} | keys
    env["PREFECT_API_URL"] = api
    if url is not None:
        env["FDPTM_CATALOG"] = url
    return env


def _write(started: dict, results: dict[str, list[dict]]) -> None:
    med = {
        arm: {k: statistics.median(r[k] for r in rows) for k in ("wall", "seconds", "blocks")}
        for arm, rows in results.items()
    }
    duck, pg = med["duckdb"], med["postgresql"]
    lines = [
        f"{ROUNDS} rounds, arms interleaved, each release a fresh process (unseeded, demo "
        "request on Lee); PostgreSQL 15 on loopback.",
        "",
        "| catalog | release wall (s) | time in catalog blocks (s) | blocks | per block (ms) |",
        "|---|---|---|---|---|",
    ]
    for arm, m in med.items():
        per = 1000 * m["seconds"] / m["blocks"]
        lines.append(
            f"| {arm} | {m['wall']:.2f} | {m['seconds']:.3f} | {m['blocks']:.0f} | {per:.2f} |"
        )
    lines += [
        "",
        "Ratio PostgreSQL / DuckDB: time in catalog blocks "
        f"{pg['seconds'] / duck['seconds']:.2f}x, "
        f"release wall {pg['wall'] / duck['wall']:.2f}x; the catalog's share of the release: "
        f"{100 * duck['seconds'] / duck['wall']:.1f}% on DuckDB, "
        f"{100 * pg['seconds'] / pg['wall']:.1f}% on PostgreSQL.",
        "",
        "Rounds (wall s, catalog s):",
        "",
    ]
    for arm, rows in results.items():
        shown = ", ".join(f"({r['wall']:.2f}, {r['seconds']:.3f})" for r in rows)
        lines.append(f"- {arm}: {shown}")
    title = "A release's catalog overhead: PostgreSQL against DuckDB"
    record = {"machine": started, "results": results}
    print(save("catalog_backends", title, "\n".join(lines), record).read_text())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2])))
    else:
        main()
