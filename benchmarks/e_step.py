"""dp-vi's clipped statistic (an iteration's E-steps) against another checkout's, in one process.

    python benchmarks/e_step.py --baseline ../other-checkout               # k 5, 10 and 20
    python benchmarks/e_step.py --baseline ../old --docs 100000 --topics 10 --rounds 12

Both kernels, ``fdptm.kernels.vi.clipped_statistics`` of this checkout and the one at
``BASELINE/src/fdptm/kernels/vi.py`` (loaded from its file: the kernel module imports numpy
and numba only), run in this process on the scale benchmark's synthetic corpus
(``harness.scale_corpus`` with k topics: 3,000 words, about 16 tokens per document, one
document per unit; every unit included, one thread), against two topic matrices: exp(E[log
beta]) of a random lambda, as in dp-vi's first iterations, where many E-steps run to their
cap of 20 rounds, and of a lambda near the true topics, as in its late ones. Calls
alternate, the order rotating every round; the table gives each arm's median, the median of
the per-round ratios, and whether the two integer statistics are equal. Timings of M2 in
fresh processes (``m2_time.py``) spread by 30% on this shared machine; one process with
interleaved calls compares the kernels to a few percent.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import Table, baseline_kernel, one_thread, rounds, scale_corpus  # noqa: E402

TITLE = "dp-vi's clipped statistic against another checkout's kernel"
NEEDS = "--baseline, another checkout's directory"
CLIP = 2.0


def case(docs: int, topics: int):
    """The corpus as dp-vi's kernel takes it, its document slots, and the two matrices."""
    import numpy as np

    from fdptm.kernels import vi
    from fdptm.mechanisms import dp_vi
    from fdptm.privacy.adjacency import Adjacency

    corpus, phi = scale_corpus(docs, seed=topics, topics=topics)
    rng = np.random.default_rng(topics)
    data = dp_vi.prepare(corpus, Adjacency.DOCUMENT)
    slots = vi.document_slots(data.doc_ptr, data.words, data.counts, data.unit_docs)
    noise = rng.gamma(100, 0.01, (3000, topics))
    betas = {
        "random lambda": vi.exp_elog_beta(noise),
        "lambda near the topics": vi.exp_elog_beta(noise + phi.T * docs * 16 / topics / 2),
    }
    return data, slots, betas


def statistic(kernel, data, slots, beta):
    """One call of ``kernel.clipped_statistics`` over every unit: the integer statistic."""
    import numpy as np

    from fdptm.mechanisms import dp_vi

    stats = np.zeros(beta.shape, dtype=np.int64)
    kernel.clipped_statistics(
        0,
        data.n_units,
        data.unit_ptr,
        data.unit_docs,
        *slots,
        data.doc_ptr,
        data.words,
        data.counts,
        beta,
        0.1,
        20,
        1e-3,
        np.ones(data.n_units, dtype=np.bool_),
        CLIP,
        1.0 / dp_vi.statistic_grid(CLIP),
        dp_vi.unit_bound(CLIP) ** 2,
        stats,
        np.zeros(data.n_units),
        np.empty((0, beta.shape[1]), dtype=np.float32),
        False,
    )
    return stats


def timed(kernels: dict, data, slots, beta, arm: str) -> float:
    """Seconds of one call of ``arm``'s kernel."""
    begun = time.perf_counter()
    statistic(kernels[arm], data, slots, beta)
    return time.perf_counter() - begun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="the other checkout's directory")
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--topics", default="5,10,20", help="comma-separated values of k")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", help="output stem (default benchmarks/e_step)")
    args = parser.parse_args()
    one_thread()
    import numpy as np

    from fdptm.kernels import vi

    checkout = Path(args.baseline).resolve()
    kernels = {"this": vi, "baseline": baseline_kernel(checkout, "vi")}
    table = Table(
        "e_step",
        TITLE,
        f"{args.docs:,} synthetic documents, one thread, {args.rounds} interleaved rounds per "
        f"row (see the module docstring). Baseline: {checkout}.",
        ["k", "topic matrix", "this (s)", "baseline (s)", "ratio, median of rounds", "same"],
    )
    for topics in (int(k) for k in args.topics.split(",")):
        data, slots, betas = case(args.docs, topics)
        for name, beta in betas.items():
            results = {arm: statistic(kernel, data, slots, beta) for arm, kernel in kernels.items()}

            times = rounds(kernels, args.rounds, partial(timed, kernels, data, slots, beta))
            ratios = [a / b for a, b in zip(times["this"], times["baseline"], strict=True)]
            table.add(
                topics,
                name,
                statistics.median(times["this"]),
                statistics.median(times["baseline"]),
                statistics.median(ratios),
                "yes" if np.array_equal(results["this"], results["baseline"]) else "no",
            )
    print(table.write(args.out).read_text())


if __name__ == "__main__":
    main()
