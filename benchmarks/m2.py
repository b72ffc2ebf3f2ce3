"""M2 mechanism performance: spectral at scale, DP-VI throughput, noisy CGS, TopicDP.

    pip install -e .
    python benchmarks/m2.py            # writes benchmarks/m2_results.md and m2_results.json

Every mechanism runs through the registry (the calibration a release would do) on one
core (NUMBA_NUM_THREADS=1, OMP/OPENBLAS threads 1), best of REPEATS:
1. ``spectral`` on 100,000 synthetic LDA documents, V = 2,000, k = 10 (target < 60 s).
2. ``dp-vi`` tokens per second per iteration at k = 20 on a synthetic corpus of 2 M tokens
   and on PHEME (target >= 1 M tokens/s/iteration).
3. The Gibbs-based mechanisms (``hdp-lda``, ``zhu``, ``cdp-lda``, ``cdp-lda-plus``) in
   M token-samples/s on PHEME at k = 5 and 20, next to the non-private sampler.
4. ``topicdp`` wall time on PHEME at k = 5 (one model training per sampled neighbour).
"""

from __future__ import annotations

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, pheme_corpus, save  # noqa: E402

TITLE = "M2 mechanism benchmarks"

REPEATS = 3


def _mechanism(name, epsilon, delta, topics, iterations, **options):
    from fdptm.mechanisms.registry import mechanism
    from fdptm.privacy.adjacency import Adjacency

    m = mechanism(name)
    context = {
        "n_topics": topics,
        "adjacency": Adjacency.DOCUMENT,
        "max_docs_per_author": 1,
        "max_tokens_per_doc": 1000,
        "iterations": iterations,
    }
    return m, m.params(epsilon, delta, context, options)


def _best(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def spectral() -> dict:
    from fdptm.evaluation.matching import matched_distance
    from fdptm.evaluation.synthetic import generate_lda
    from fdptm.privacy.noise import NoiseSource

    data = generate_lda(100_000, 2000, 10, seed=0)
    m, params = _mechanism("spectral", 5.0, 1e-5, 10, 1)
    out = {}

    def run():
        out["phi"] = m.train(data.corpus, 10, params, NoiseSource.create(1))

    seconds = _best(run)
    return {
        "documents": data.corpus.n_docs,
        "tokens": int(data.corpus.n_tokens),
        "vocabulary": 2000,
        "k": 10,
        "epsilon": 5.0,
        "seconds": seconds,
        "cosine_to_truth": matched_distance(out["phi"], data.phi).cosine,
    }


def dp_vi() -> list[dict]:
    from fdptm.evaluation.synthetic import generate_lda
    from fdptm.privacy.noise import NoiseSource

    corpora = {
        "synthetic (20,000 docs, 100 tokens, V = 2,000)": generate_lda(
            20_000, 2000, 20, doc_length=100, seed=0
        ).corpus,
        "PHEME clean (5,698 tweets)": pheme_corpus()[1],
    }
    rows = []
    iterations = 10
    for name, corpus in corpora.items():
        m, params = _mechanism("dp-vi", 5.0, 1e-5, 20, iterations)
        seconds = _best(lambda m=m, c=corpus, p=params: m.train(c, 20, p, NoiseSource.create(2)))
        rows.append(
            {
                "corpus": name,
                "tokens": int(corpus.n_tokens),
                "k": 20,
                "iterations": iterations,
                "seconds": seconds,
                "m_tokens_per_s_per_iteration": corpus.n_tokens * iterations / seconds / 1e6,
            }
        )
    return rows


def gibbs() -> list[dict]:
    from fdptm.mechanisms.lda import train_cgs
    from fdptm.privacy.noise import NoiseSource

    corpus = pheme_corpus()[1]
    iterations = 100
    rows = []
    for k in (5, 20):
        row = {"k": k, "tokens": int(corpus.n_tokens), "iterations": iterations}
        seconds = _best(lambda k=k: train_cgs(corpus, k, iterations, NoiseSource.create(0)))
        row["cgs"] = corpus.n_tokens * iterations / seconds / 1e6
        for name in ("hdp-lda", "zhu", "cdp-lda", "cdp-lda-plus"):
            m, params = _mechanism(name, 400.0, 1e-5, k, iterations)
            seconds = _best(lambda m=m, k=k, p=params: m.train(corpus, k, p, NoiseSource.create(1)))
            row[name] = corpus.n_tokens * iterations / seconds / 1e6
        rows.append(row)
    return rows


def topicdp() -> dict:
    from fdptm.privacy.noise import NoiseSource

    corpus = pheme_corpus()[1]
    m, params = _mechanism("topicdp", 5.0, 1e-5, 5, 100)
    seconds = _best(lambda: m.train(corpus, 5, params, NoiseSource.create(3)), repeats=1)
    return {"k": 5, "iterations": 100, "trainings": params.trainings, "seconds": seconds}


def render(r: dict) -> str:
    s = r["spectral"]
    t = r["topicdp"]
    lines = [
        "One core used (NUMBA_NUM_THREADS=1, OMP/OPENBLAS threads 1).",
        "",
        "### spectral: 100,000 synthetic documents, V = 2,000, k = 10 (target < 60 s)",
        "",
        "| documents | tokens | epsilon | seconds (best of 3) | matched cosine to truth |",
        "|---|---|---|---|---|",
        f"| {s['documents']:,} | {s['tokens']:,} | {s['epsilon']:g} | {s['seconds']:.1f} | "
        f"{s['cosine_to_truth']:.3f} |",
        "",
        "### dp-vi at k = 20 (target >= 1 M tokens/s/iteration)",
        "",
        "| corpus | tokens | iterations | seconds | M tokens/s/iteration |",
        "|---|---|---|---|---|",
    ]
    for d in r["dp_vi"]:
        lines.append(
            f"| {d['corpus']} | {d['tokens']:,} | {d['iterations']} | {d['seconds']:.2f} | "
            f"{d['m_tokens_per_s_per_iteration']:.2f} |"
        )
    lines += [
        "",
        "### Gibbs-based mechanisms on PHEME clean (M token-samples/s, 100 iterations)",
        "",
        "| k | non-private CGS | hdp-lda | zhu | cdp-lda | cdp-lda-plus |",
        "|---|---|---|---|---|---|",
    ]
    for g in r["gibbs"]:
        lines.append(
            f"| {g['k']} | {g['cgs']:.1f} | {g['hdp-lda']:.1f} | {g['zhu']:.1f} | "
            f"{g['cdp-lda']:.1f} | {g['cdp-lda-plus']:.1f} |"
        )
    lines += [
        "",
        "### topicdp on PHEME clean, k = 5, 100 CGS iterations per training",
        "",
        "| trainings (gamma = 0.1) | seconds |",
        "|---|---|",
        f"| {t['trainings']} | {t['seconds']:.1f} |",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    results = {
        "machine": at_start(),
        "spectral": spectral(),
        "dp_vi": dp_vi(),
        "gibbs": gibbs(),
        "topicdp": topicdp(),
    }
    print(save("m2_results", TITLE, render(results), results).read_text())


if __name__ == "__main__":
    main()
