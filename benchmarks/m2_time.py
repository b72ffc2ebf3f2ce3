"""dp-vi's M2 time against another checkout's, interleaved: did a change cost time?

    python benchmarks/m2_time.py --baseline /path/to/other/checkout      # 200k docs, 3 rounds
    python benchmarks/m2_time.py --baseline ../old --docs 500000 --rounds 2 --out /tmp/m2

Each arm trains ``fdptm.mechanisms.dp_vi.train_dp_vi`` (M2 without the pipeline) in a
fresh process on the scale benchmark's synthetic corpus (``benchmarks/scale.py``: 10
topics over 3,000 words, about 16 tokens per document, document-level units), epsilon 3,
delta 1e-6, k 10, T 20, the defaults otherwise, production noise (OpenDP, unseeded). The
baseline arm runs the same interpreter with the other checkout first on ``PYTHONPATH``, so
its ``fdptm`` package (M2, its kernels and the noise) is the other checkout's; the process
reports which file it imported. One untimed warm-up per arm fills numba's cache. Arms
alternate, the order rotated every round, so the shared machine's load falls on both.
Measured: M2's wall time and the matched cosine to the true topics.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, rounds, save  # noqa: E402

TITLE = "dp-vi's M2 time against another checkout"
NEEDS = "--baseline, another checkout's directory"

TRAIN = """
import json, sys, time
import numpy as np
import fdptm.mechanisms.dp_vi as dp_vi
from fdptm.evaluation.matching import matched_distance
from fdptm.evaluation.synthetic import generate_lda
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource
n = int(sys.argv[1])
phi = np.random.default_rng(0).dirichlet(np.full(3000, 0.05), size=10)
corpus = generate_lda(n, 3000, 10, doc_length=16, seed=1, phi=phi).corpus
p = dp_vi.dp_vi_params(3.0, 1e-6, n_topics=10, adjacency=Adjacency.DOCUMENT,
                       max_docs_per_author=1, iterations=20)
start = time.perf_counter()
phi_hat = dp_vi.train_dp_vi(corpus, 10, p, NoiseSource.create(None))
wall = time.perf_counter() - start
print(json.dumps({"file": dp_vi.__file__, "wall": wall,
                  "cosine": matched_distance(phi_hat, phi).cosine}))
"""


def run_arm(docs: int, pythonpath: str | None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, "-c", TRAIN, str(docs)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="the other checkout's directory")
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="output stem (default benchmarks/m2_time)")
    args = parser.parse_args()
    started = at_start()
    arms = {"this": None, "baseline": str(Path(args.baseline).resolve())}
    files = {name: run_arm(2000, path)["file"] for name, path in arms.items()}  # warm-up
    if files["this"] == files["baseline"]:
        raise SystemExit(f"both arms import {files['this']}: check --baseline")
    runs = rounds(
        arms,
        args.rounds,
        lambda name: run_arm(args.docs, arms[name]),
        lambda run: f"{run['wall']:.1f} s",
    )
    report = {
        "machine": started,
        "documents": args.docs,
        "baseline_commit": subprocess.run(
            ["git", "-C", arms["baseline"], "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "files": files,
        "runs": runs,
    }
    print(save("m2_time", TITLE, render(report), report, args.out).read_text())


def render(r: dict) -> str:
    base = statistics.median(x["wall"] for x in r["runs"]["baseline"])
    lines = [
        f"{r['documents']:,} synthetic documents, epsilon 3, k 10, T 20, production noise; "
        "arms interleaved in fresh processes (see the module docstring). Baseline: "
        f"commit {r.get('baseline_commit') or 'unknown'}.",
        "",
        "| arm | M2 wall (s), per round | median | ratio to baseline | matched cosine |",
        "|---|---|---|---|---|",
    ]
    for name, runs in r["runs"].items():
        walls = [x["wall"] for x in runs]
        med = statistics.median(walls)
        cos = ", ".join(f"{x['cosine']:.3f}" for x in runs)
        lines.append(
            f"| {name} ({r['files'][name]}) | {', '.join(f'{w:.1f}' for w in walls)} | "
            f"{med:.1f} | {med / base:.2f} | {cos} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
