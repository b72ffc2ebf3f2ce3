"""dp-vi's Poisson sampling rate at scale: M2's time against its utility.

    python benchmarks/dp_vi_sampling.py                 # 500k documents, about 8 min
    python benchmarks/dp_vi_sampling.py --docs 100000 --rates 1,0.25

Question (issue 13): M2 is most of a large release (36-42 s of the 66 s at 500,000
documents), and its cost is proportional to the units each iteration visits. With Poisson
sampling of units at rate q (``--m2-option sampling_rate=q``), an iteration visits about q N
units, and the subsampled Gaussian's amplification lets the same (epsilon, delta) use a
smaller noise multiplier. Does a q < 1 keep the topics at this size?

Corpus: the scale benchmark's synthetic LDA (``benchmarks/scale.py``: 10 topics over 3,000
words, eta 0.05, alpha 0.1, about 16 tokens per document, document-level units), drawn with
``--seed``'s topic matrix. Training: ``fdptm.mechanisms.dp_vi.train_dp_vi`` directly on the
corpus (the release's M2 stage without the pipeline around it), epsilon 3, delta 1e-6, k 10,
the release defaults otherwise, production noise (OpenDP, unseeded); every arm calibrated
by the release's own ``dp_vi_params``. Arms run interleaved, one round per repeat, with the
order rotated each round. Measured: M2's wall time, the noise multiplier z, and the matched
cosine to the true topics (``fdptm.evaluation.matching``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from backfill import code_version  # noqa: E402
from run import machine  # noqa: E402

from fdptm.evaluation.matching import matched_distance  # noqa: E402
from fdptm.evaluation.synthetic import generate_lda  # noqa: E402
from fdptm.mechanisms import dp_vi  # noqa: E402
from fdptm.privacy.adjacency import Adjacency  # noqa: E402
from fdptm.privacy.noise import NoiseSource  # noqa: E402

TOPICS, WORDS, DELTA = 10, 3000, 1e-6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=500_000)
    parser.add_argument("--rates", default="1,0.5,0.25,0.1")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--out", default=str(HERE / "dp_vi_sampling"))
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    phi = np.random.default_rng(args.seed).dirichlet(np.full(WORDS, 0.05), size=TOPICS)
    corpus = generate_lda(args.docs, WORDS, TOPICS, doc_length=16, seed=1, phi=phi).corpus
    runs: dict[str, list[dict]] = {}
    for r in range(args.repeats):
        order = rates[r % len(rates) :] + rates[: r % len(rates)]
        for rate in order:
            params = dp_vi.dp_vi_params(
                args.epsilon,
                DELTA,
                n_topics=TOPICS,
                adjacency=Adjacency.DOCUMENT,
                max_docs_per_author=1,
                iterations=args.iterations,
                sampling_rate=rate,
            )
            start = time.perf_counter()
            estimate = dp_vi.train_dp_vi(corpus, TOPICS, params, NoiseSource.create(None))
            wall = time.perf_counter() - start
            cosine = matched_distance(estimate, phi).cosine
            runs.setdefault(f"{rate:g}", []).append(
                {"wall": wall, "cosine": cosine, "z": params.noise_multiplier}
            )
            print(f"[{time.strftime('%H:%M:%S')}] q={rate:g}: {wall:.1f} s, cosine {cosine:.4f}")
    report = {
        "command": " ".join(["python benchmarks/dp_vi_sampling.py", *sys.argv[1:]]),
        "code": code_version(),
        "machine": machine(),
        "documents": args.docs,
        "epsilon": args.epsilon,
        "iterations": args.iterations,
        "tokens": int(corpus.doc_ptr[-1]),
        "runs": runs,
    }
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(report))
    print(render(report))


def render(r: dict) -> str:
    m = r["machine"]
    full = statistics.median(x["wall"] for x in r["runs"]["1"]) if "1" in r["runs"] else None
    lines = [
        "# dp-vi's sampling rate at scale: M2's time against its utility",
        "",
        f"Command: `{r['command']}` · {m['date']} · {m['cpu']} · {m['cores']} cores · "
        f"Python {m['python']} · code {r['code']}",
        "",
        f"{r['documents']:,} synthetic documents ({r['tokens']:,} tokens; 10 true topics over "
        f"3,000 words), document level, epsilon {r['epsilon']:g}, delta {DELTA:g}, k {TOPICS}, "
        f"{r['iterations']} iterations, release defaults otherwise; production noise; arms "
        "interleaved (see the module docstring).",
        "",
        "| sampling rate q | noise multiplier z | M2 wall (s), median | ratio to q = 1 | "
        "matched cosine, median | runs >= 0.99 | matched cosine to the truth, per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for rate, runs in r["runs"].items():
        wall = statistics.median(x["wall"] for x in runs)
        ratio = f"{wall / full:.2f}" if full else ""
        cos = ", ".join(f"{x['cosine']:.4f}" for x in runs)
        median = statistics.median(x["cosine"] for x in runs)
        good = sum(x["cosine"] >= 0.99 for x in runs)
        lines.append(
            f"| {rate} | {runs[0]['z']:.3f} | {wall:.1f} | {ratio} | {median:.4f} | "
            f"{good} of {len(runs)} | {cos} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
