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
the release defaults otherwise, production noise (unseeded); every arm calibrated
by the release's own ``dp_vi_params``. Arms run interleaved, one round per repeat, with the
order rotated each round. Measured: M2's wall time, the noise multiplier z, and the matched
cosine to the true topics (``fdptm.evaluation.matching``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, rounds, save, scale_corpus, train_dp_vi  # noqa: E402

TITLE = "dp-vi's sampling rate at scale: M2's time against its utility"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=500_000)
    parser.add_argument("--rates", default="1,0.5,0.25,0.1")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--out", help="output stem (default benchmarks/dp_vi_sampling)")
    args = parser.parse_args()
    started = at_start()
    rates = {f"{float(r):g}": float(r) for r in args.rates.split(",")}
    corpus, phi = scale_corpus(args.docs, args.seed)
    runs = rounds(
        rates,
        args.repeats,
        lambda q: train_dp_vi(
            corpus, phi, args.epsilon, iterations=args.iterations, sampling_rate=rates[q]
        ),
        lambda run: f"{run['wall']:.1f} s, cosine {run['cosine']:.4f}",
    )
    report = {
        "machine": started,
        "documents": args.docs,
        "epsilon": args.epsilon,
        "iterations": args.iterations,
        "tokens": int(corpus.doc_ptr[-1]),
        "runs": runs,
    }
    print(save("dp_vi_sampling", TITLE, render(report), report, args.out).read_text())


def render(r: dict) -> str:
    full = statistics.median(x["wall"] for x in r["runs"]["1"]) if "1" in r["runs"] else None
    lines = [
        f"{r['documents']:,} synthetic documents ({r['tokens']:,} tokens; 10 true topics over "
        f"3,000 words), document level, epsilon {r['epsilon']:g}, delta 1e-6, k 10, "
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
