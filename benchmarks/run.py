"""fdptm benchmarks: sampler throughput, DP set union at scale, end-to-end release.

    pip install -e ".[bench]"      # tomotopy, benchmark-only
    python benchmarks/run.py       # writes benchmarks/results.md and results.json

Measures, in one run on one machine:
1. CGS throughput (token-samples per second = tokens x iterations / seconds) on
   ../shared/data/pheme/pheme_clean.json at k = 5 and k = 20: fdptm's non-private CGS,
   fdptm's HDP-LDA (noise and clipping included) and tomotopy's LDAModel, all on one core,
   same corpus, same k, same iterations; best of 3 repetitions.
2. M1 (DP set union, weighted policy) on a synthetic corpus of 1,000,000 authors.
3. End-to-end `fdptm ingest` + `fdptm release` on PHEME raw (5,802 tweets) as separate
   processes, Prefect's ephemeral API included: wall time, and peak RSS of the release's
   process tree (the CLI process plus Prefect's temporary API server), sampled with `ps`.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import PHEME_RAW, at_start, clean_env, fdptm, measure, pheme_corpus, save

HERE = Path(__file__).resolve().parent
ITERATIONS = 200
REPEATS = 3
NEEDS = 'pip install -e ".[bench]" (tomotopy)'


def _best(fn) -> float:
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def throughput() -> list[dict]:
    import tomotopy as tp

    from fdptm.mechanisms.lda import hdp_lda_params, train_cgs, train_hdp_lda
    from fdptm.privacy.noise import NoiseSource

    docs, corpus = pheme_corpus()
    rows = []
    for k in (5, 20):
        train_cgs(corpus, k, 2, NoiseSource.create(0))  # compile outside the timing
        train_hdp_lda(corpus, k, hdp_lda_params(10.0, 2), NoiseSource.create(0))
        cgs = _best(lambda k=k: train_cgs(corpus, k, ITERATIONS, NoiseSource.create(1)))
        params = hdp_lda_params(400.0, ITERATIONS)
        hdp = _best(lambda k=k, p=params: train_hdp_lda(corpus, k, p, NoiseSource.create(1)))

        def tomotopy_run(k=k):
            model = tp.LDAModel(k=k, seed=1)
            for d in docs:
                model.add_doc(d)
            model.train(0, workers=1, parallel=tp.ParallelScheme.NONE)
            t = time.perf_counter()
            model.train(ITERATIONS, workers=1, parallel=tp.ParallelScheme.NONE)
            return time.perf_counter() - t

        tomo = min(tomotopy_run() for _ in range(REPEATS))
        n = corpus.n_tokens * ITERATIONS
        rows.append(
            {
                "k": k,
                "tokens": corpus.n_tokens,
                "vocabulary": corpus.n_words,
                "iterations": ITERATIONS,
                "cgs_msps": n / cgs / 1e6,
                "hdp_lda_msps": n / hdp / 1e6,
                "tomotopy_msps": n / tomo / 1e6,
            }
        )
    return rows


def set_union_scale(n_authors: int = 1_000_000, n_words: int = 50_000) -> dict:
    from fdptm.mechanisms.set_union import author_items, select, set_union_params
    from fdptm.privacy.noise import NoiseSource

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 20, n_authors)
    zipf = 1 / np.arange(1, n_words + 1)
    words = rng.choice(n_words, size=int(lengths.sum()), p=zipf / zipf.sum())
    authors = np.repeat(np.arange(n_authors), lengths)
    t = time.perf_counter()
    table = author_items(authors, words, n_words)
    chosen = select(table, set_union_params("weighted", 1.0, 1e-6), NoiseSource.create(1))
    seconds = time.perf_counter() - t
    return {
        "authors": n_authors,
        "occurrences": int(lengths.sum()),
        "candidate_words": n_words,
        "released_words": len(chosen),
        "seconds": seconds,
    }


def end_to_end() -> dict:
    exe = Path(sys.executable).with_name("fdptm")
    release = [
        "release",
        "--dataset",
        "pheme",
        "--epsilon",
        "400",
        "--delta",
        "1e-5",
        "--topics",
        "5",
        "--iterations",
        "20",
        "--mechanism",
        "hdp-lda",
        "--no-progress",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ws = ["--workspace", str(Path(tmp) / "ws")]
        fdptm("ingest", str(PHEME_RAW), "--dataset", "pheme", *ws, env=clean_env())
        runs = [measure([str(exe), *release, *ws], clean_env()) for _ in range(REPEATS)]
    return {
        "release_wall_seconds_best": min(r.wall for r in runs),
        "release_wall_seconds_all": [r.wall for r in runs],
        "peak_rss_mib": max(r.peak_mib for r in runs),
    }


def main() -> None:
    results = {
        "machine": at_start(),
        "throughput": throughput(),
        "set_union": set_union_scale(),
        "end_to_end": end_to_end(),
    }
    print(save("results", "fdptm benchmark results", render(results), results).read_text())


def render(r: dict) -> str:
    lines = [
        f"### Gibbs sampling throughput on PHEME clean (one core, {ITERATIONS} iterations, "
        f"best of {REPEATS})",
        "",
        "M token-samples/s; ratio = fdptm HDP-LDA / tomotopy LDAModel (target >= 0.8 at k = 5, "
        ">= 0.5 at k = 20).",
        "",
        "| k | tokens | V | fdptm CGS (non-private) | fdptm HDP-LDA | tomotopy LDAModel | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in r["throughput"]:
        lines.append(
            f"| {t['k']} | {t['tokens']:,} | {t['vocabulary']:,} | {t['cgs_msps']:.1f} | "
            f"{t['hdp_lda_msps']:.1f} | {t['tomotopy_msps']:.1f} | "
            f"{t['hdp_lda_msps'] / t['tomotopy_msps']:.2f} |"
        )
    s = r["set_union"]
    e = r["end_to_end"]
    lines += [
        "",
        "### M1: DP set union (weighted) at scale",
        "",
        "| authors | word occurrences | candidate words | released | seconds |",
        "|---|---|---|---|---|",
        f"| {s['authors']:,} | {s['occurrences']:,} | {s['candidate_words']:,} | "
        f"{s['released_words']:,} | {s['seconds']:.2f} |",
        "",
        "### End to end: `fdptm release` on PHEME raw (5,802 tweets; PRE cached after the first)",
        "",
        "`fdptm release --dataset pheme --epsilon 400 --delta 1e-5 --topics 5 --iterations 20 "
        "--mechanism hdp-lda`,"
        " a fresh process each time, Prefect's ephemeral API included (target < 20 s).",
        "",
        "| best wall (s) | all runs (s) | peak RSS of the process tree (MiB) |",
        "|---|---|---|",
        f"| {e['release_wall_seconds_best']:.1f} | "
        f"{', '.join(f'{w:.1f}' for w in e['release_wall_seconds_all'])} | "
        f"{e['peak_rss_mib']:.0f} |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
