"""dp-vi's warm starts: M2's time and its topics with and without them.

    python benchmarks/dp_vi_warm.py                   # 500k documents, 4 paired seeds, ~6 min
    python benchmarks/dp_vi_warm.py --docs 100000 --seeds 2 --warm 1,0.5,0

Question (issue 13): M2 is most of a large release, and most of M2 is the E-step's rounds
of coordinate ascent. Starting each document's E-step from its gamma of the previous
iteration (``--m2-option warm_start=W``: iterations t >= ceil(W T) start warm; W = 1 is
never, the code before) should need fewer rounds once lambda moves little. Does it cost
topics?

Part 1, at scale. The scale benchmark's corpus (``benchmarks/scale.py``: synthetic LDA, 10
topics over 3,000 words, eta 0.05, alpha 0.1, about 16 tokens per document, document-level
units; ``--docs`` documents). ``fdptm.mechanisms.dp_vi.train_dp_vi`` on it (M2 without the
pipeline around it), epsilon 3, delta 1e-6, k 10, T 20, the release defaults otherwise.
Paired: for each seed every arm gets the same seeded NoiseSource (the same initial lambda
and the same noise draws, so the arms differ only by the warm start); arms run
interleaved, their order rotated per seed. Measured: M2's wall time and the matched cosine
to the true topics (``fdptm.evaluation.matching``).

Part 2, PHEME through the release pipeline. ``benchmarks/dp_vi_threshold.py``'s
replicate (``dp_vi_grid.replicate``: PRE, each tweet its own unit, a fixed 10% held out,
M1 = DP set union and M2 = dp-vi with the release's budget split and calibration, the
release's defaults read from the library: T = 100, k = 5, delta 1e-5) at total epsilon
``--pheme-epsilons`` on the seeds 300.. (``--pheme-seeds``), changing only ``warm_start``.
Seed s fixes M1's and M2's noise streams, so the arms see the same DP vocabulary and the
same noise draws: the per-seed difference of gensim NPMI and of the held-out
log-likelihood per token (warm minus cold), with a sign test, as in that benchmark. In
this process, one replicate at a time on one numba thread (as that benchmark's workers).

Threads. Parts 1 and 3 run on numba's default, every core, as a release does. The
committed run of 2026-11-25 most likely ran part 1 on one thread (dp_vi_grid's import set
``NUMBA_NUM_THREADS=1`` for the whole process, which later crashed this script), so its
seconds are not comparable with a new run's; its ratios between arms are.

Part 3, the optimiser alone. The dp-vi recovery test's corpus (1,200 documents, 300
authors, 4 sharp topics, author level) without noise (z = 0) for ``--recovery-seeds``
seeds: the matched cosine each arm reaches, where the cold run is above 0.999.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, rounds, save, scale_corpus, train_dp_vi  # noqa: E402

from fdptm.evaluation.matching import matched_distance  # noqa: E402
from fdptm.evaluation.synthetic import generate_lda  # noqa: E402
from fdptm.mechanisms import dp_vi  # noqa: E402
from fdptm.privacy.adjacency import Adjacency  # noqa: E402
from fdptm.privacy.noise import NoiseSource  # noqa: E402

ITERATIONS = 20
TITLE = "dp-vi's warm starts: M2's time and its topics"


def at_scale(args: argparse.Namespace, arms: list[float]) -> dict[str, list[dict]]:
    """Paired arms: seed s gives every arm the same initial lambda and noise draws."""
    corpus, phi = scale_corpus(args.docs)
    warm = {f"{w:g}": w for w in arms}
    seeds = {name: iter(range(args.seeds)) for name in warm}

    def run(name: str) -> dict:
        seed = next(seeds[name])
        trained = train_dp_vi(corpus, phi, args.epsilon, seed=100 + seed, warm_start=warm[name])
        return {"seed": seed} | trained

    return rounds(warm, args.seeds, run, lambda x: f"{x['wall']:.1f} s, cosine {x['cosine']:.4f}")


def pheme(seeds: int, epsilons: list[float], arms: list[float]) -> list[dict]:
    import dp_vi_grid as grid
    import numba
    from dp_vi_grid import Evaluator, load_pheme, summary
    from dp_vi_threshold import KIND, PHEME, SEEDS, current_defaults, paired

    grid._DATA[PHEME] = load_pheme()
    ev = Evaluator(1)
    cfg0 = current_defaults()
    cfgs = {w: {**cfg0, "warm_start": w} for w in arms}
    rows = []
    threads = numba.get_num_threads()  # one replicate on one thread, as dp_vi_grid's workers
    numba.set_num_threads(1)  # run it (set here: numba reads its environment once, at import)
    for e in epsilons:
        runs = {w: ev.configs(PHEME, "dp", e, [cfgs[w]], SEEDS[:seeds], KIND)[0] for w in arms}
        for w in arms:
            row = {"epsilon": e, "warm_start": w, "summary": summary(runs[w]), "runs": runs[w]}
            if w != arms[0]:
                row["vs_first"] = {k: paired(runs[w], runs[arms[0]], k) for k in ("npmi", "loglik")}
            rows.append(row)
            print(f"[{time.strftime('%H:%M:%S')}] PHEME epsilon {e:g} warm_start={w:g}", flush=True)
    numba.set_num_threads(threads)
    return rows


def recovery(seeds: int, arms: list[float]) -> dict[str, list[float]]:
    syn = generate_lda(1200, 300, 4, doc_length=40, eta=0.01, docs_per_author=4, seed=0)
    out: dict[str, list[float]] = {}
    for warm in arms:
        p = dp_vi.dp_vi_params(
            1000.0,
            1e-5,
            n_topics=4,
            adjacency=Adjacency.AUTHOR,
            max_docs_per_author=4,
            iterations=ITERATIONS,
            warm_start=warm,
        )
        exact = dataclasses.replace(p, noise_multiplier=0.0)
        out[f"{warm:g}"] = [
            matched_distance(
                dp_vi.train_dp_vi(syn.corpus, 4, exact, NoiseSource.create(s)), syn.phi
            ).cosine
            for s in range(seeds)
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=500_000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--warm", default="1,0.5")
    parser.add_argument("--recovery-seeds", type=int, default=8)
    parser.add_argument("--recovery-warm", default="1,0.5,0.25,0")
    parser.add_argument("--pheme-seeds", type=int, default=8)
    parser.add_argument("--pheme-epsilons", default="1,3,10")
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--out", help="output stem (default benchmarks/dp_vi_warm)")
    args = parser.parse_args()
    report = {
        "machine": at_start(),
        "documents": args.docs,
        "epsilon": args.epsilon,
        "pheme": pheme(
            args.pheme_seeds,
            [float(e) for e in args.pheme_epsilons.split(",")],
            [float(w) for w in args.warm.split(",")],
        ),
        "recovery": recovery(
            args.recovery_seeds, [float(w) for w in args.recovery_warm.split(",")]
        ),
        "runs": at_scale(args, [float(w) for w in args.warm.split(",")]),
    }
    print(save("dp_vi_warm", TITLE, render(report), report, args.out).read_text())


def render(r: dict) -> str:
    from dp_vi_threshold import _m, _pair  # the threshold benchmark's paired-seed cells

    cold = r["runs"].get("1")
    lines = [
        f"## At scale: {r['documents']:,} synthetic documents, epsilon {r['epsilon']:g}",
        "",
        "Document level, delta 1e-6, k 10, 20 iterations, release defaults otherwise; each "
        "seed's arms share their initial lambda and noise draws (see the module docstring).",
        "",
        "| warm_start | M2 wall (s), median | ratio to warm_start = 1, median of paired | "
        "matched cosine to the truth, per seed |",
        "|---|---|---|---|",
    ]
    for warm, runs in r["runs"].items():
        wall = statistics.median(x["wall"] for x in runs)
        ratio = ""
        if cold:
            paired = [x["wall"] / c["wall"] for x, c in zip(runs, cold, strict=True)]
            ratio = f"{statistics.median(paired):.2f}"
        cos = ", ".join(f"{x['cosine']:.4f}" for x in runs)
        lines.append(f"| {warm} | {wall:.1f} | {ratio} | {cos} |")
    lines += [
        "",
        "## PHEME through the release pipeline (document level, k 5, T 100)",
        "",
        "Per seed, the arms share the DP vocabulary and the noise draws; the last columns are "
        f"the paired difference to warm_start = {next(iter(r['runs']))} (median [min, max]; "
        "seeds above 0; sign test).",
        "",
        "| total epsilon | warm_start | NPMI, median [min, max] | words above floor, median | "
        "M2 seconds, median | NPMI difference | held-out log-lik. difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in r["pheme"]:
        s, vs = row["summary"], row.get("vs_first", {})
        lines.append(
            f"| {row['epsilon']:g} | {row['warm_start']:g} | {_m(s, 'npmi', '.3f')} | "
            f"{s['above_floor']['median']:g} | {s['seconds']['median']:.1f} | "
            f"{_pair(vs.get('npmi'), '+.3f')} | {_pair(vs.get('loglik'), '+.3f')} |"
        )
    lines += [
        "",
        "## The optimiser alone: the recovery test's corpus without noise",
        "",
        "| warm_start | matched cosine to the truth, per seed | lowest |",
        "|---|---|---|",
    ]
    for warm, cosines in r["recovery"].items():
        lines.append(f"| {warm} | {', '.join(f'{c:.4f}' for c in cosines)} | {min(cosines):.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
