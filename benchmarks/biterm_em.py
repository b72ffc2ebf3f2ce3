"""biterm's EM (M2's post-processing) against another checkout's EM kernel, in one process.

    python benchmarks/biterm_em.py --baseline ../other-checkout
    python benchmarks/biterm_em.py --baseline ../old --docs 500000 --rounds 3

The statistic is the default release's at 500,000 documents of the scale benchmark's
synthetic corpus (``harness.scale_corpus``: 3,000 words, about 16 tokens per document, one
document per unit), noised once with a seeded source at M2's share of the default release
(epsilon 1.5, delta 5e-7) and cut at the soft threshold: about a million pairs. Two rows:

* one pass (``kernels.biterm.em_pass``, one thread, k = 10, random topics): this
  checkout's kernel against ``BASELINE/src/fdptm/kernels/biterm.py`` (loaded from its
  file: the kernel module imports numpy, numba and math only);
* the fit (``fit_biterms``: 5 starts on every core, the default's 300 steps at most):
  this checkout's, against the same function with the baseline's kernel and every pass in
  one range (``_PAIRS_PER_CHUNK`` above the number of pairs), which is the baseline's
  schedule: starts on one thread each, the last alone.

Calls alternate, the order rotating every round; the table gives each arm's median, the
median of the per-round ratios, and the two arms' objectives (the same fit up to the order
of the sums). Fresh-process releases (``scale.py``) spread by 20-30% on this shared machine
and, unseeded, their fits take different numbers of steps; this compares the EM alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import Table, baseline_kernel, rounds, scale_corpus  # noqa: E402

TITLE = "biterm's EM against another checkout's kernel and schedule"
NEEDS = "--baseline, another checkout's directory"


def pairs(docs: int):
    """The thresholded statistic's pairs, weights, vocabulary size and the M2 parameters."""
    import numpy as np

    from fdptm.mechanisms import biterm
    from fdptm.privacy.adjacency import Adjacency
    from fdptm.privacy.noise import NoiseSource

    corpus, _ = scale_corpus(docs)
    params = biterm.biterm_params(
        1.5, 5e-7, n_topics=10, adjacency=Adjacency.DOCUMENT, max_docs_per_author=1
    )
    noisy = biterm.noisy_biterms(corpus, params, NoiseSource.create(5))
    cut = params.threshold * params.noise_std
    kept = np.flatnonzero(noisy > cut)
    rows, cols = biterm._pairs_of(kept, corpus.n_words)
    return rows.astype(np.int64), cols.astype(np.int64), noisy[kept] - cut, corpus.n_words, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="the other checkout's directory")
    parser.add_argument("--docs", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="output stem (default benchmarks/biterm_em)")
    args = parser.parse_args()
    import numpy as np

    from fdptm.kernels import biterm as kernel
    from fdptm.mechanisms import biterm

    checkout = Path(args.baseline).resolve()
    kernels = {"this": kernel, "baseline": baseline_kernel(checkout, "biterm")}
    rows, cols, weights, n_words, params = pairs(args.docs)
    k = params.n_topics
    table = Table(
        "biterm_em",
        TITLE,
        f"{args.docs:,} synthetic documents, {len(rows):,} pairs above the cut, V = {n_words:,},"
        f" k = {k}; {args.rounds} interleaved rounds per row (see the module docstring). "
        f"Baseline: {checkout}.",
        ["what", "this (s)", "baseline (s)", "ratio, median of rounds", "objectives"],
    )
    rng = np.random.default_rng(1)
    phi_t = np.ascontiguousarray(rng.dirichlet(np.ones(n_words), k).T)
    theta = np.full(k, 1.0 / (k + 1))
    background = 1.0 / (k + 1) / biterm.pair_positions(n_words)

    def one_pass(arm: str) -> float:
        counts, mass = np.full((n_words, k), params.eta), np.zeros(k)
        begun = time.perf_counter()
        kernels[arm].em_pass(rows, cols, weights, phi_t, theta, background, counts, mass)
        return time.perf_counter() - begun

    for arm in kernels:  # compile (or load) both first
        one_pass(arm)
    times = rounds(kernels, args.rounds * 4, one_pass)
    table.add("one pass, one thread", *_summary(times), "")

    fits: dict[str, float] = {}
    ranges = biterm._PAIRS_PER_CHUNK

    def fit(arm: str) -> float:
        biterm._PAIRS_PER_CHUNK = ranges if arm == "this" else len(rows) + 1
        biterm.kernel = kernels[arm]
        begun = time.perf_counter()
        fitted = biterm.fit_biterms(rows, cols, weights, n_words, params, np.random.default_rng(2))
        seconds = time.perf_counter() - begun
        biterm.kernel, biterm._PAIRS_PER_CHUNK = kernel, ranges
        fits[arm] = fitted.objective
        return seconds

    times = rounds(kernels, args.rounds, fit)
    same = f"{fits['this']:.10g} and {fits['baseline']:.10g}"
    table.add("fit: 5 starts, every core", *_summary(times), same)
    print(table.write(args.out).read_text())


def _summary(times: dict[str, list[float]]) -> tuple[float, float, float]:
    ratios = [a / b for a, b in zip(times["this"], times["baseline"], strict=True)]
    return (
        statistics.median(times["this"]),
        statistics.median(times["baseline"]),
        statistics.median(ratios),
    )


if __name__ == "__main__":
    main()
