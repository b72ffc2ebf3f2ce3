"""The M2 comparison behind the README's choice of default mechanism.

    pip install -e .
    python benchmarks/compare.py            # writes benchmarks/compare.md and compare.json
    python benchmarks/compare.py --render   # re-renders compare.md from compare.json

Two corpora, every registered mechanism, epsilon in {1, 3, 5, 10} (delta = 1e-5), k = 5,
100 iterations for the iterative mechanisms, REPEATS seeds each (mean and standard deviation):

1. PHEME raw (../shared/data/pheme, 5,802 tweets, one author per tweet) through
   ``fdptm compare``'s flow: PRE, M1 at the release's default share of epsilon
   (``m1_fraction``), SAN, 10% held-out documents; each M2
   gets the share a release at (epsilon, 1e-5) would give it. Reference: non-private CGS.
2. A synthetic LDA corpus with known topics (2,000 documents, V = 500, k = 5, 40 tokens on
   average, eta = 0.05): no M1 (the vocabulary is public), the whole budget to M2, scored
   also against the true topics.

The tables are internal, non-DP statistics of the data they were computed on (PHEME is
public research data, which is why they can be committed here).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import PHEME_RAW, at_start, filled, save, stem  # noqa: E402

EPSILONS = (1.0, 3.0, 5.0, 10.0)
DELTA = 1e-5
TOPICS = 5
ITERATIONS = 100
REPEATS = 3
METRICS = (
    "npmi",
    "topic_diversity",
    "words_above_floor",
    "heldout_loglik_per_token",
    "umass",
    "l1",
    "kendall_tau",
    "truth_cosine",
    "seconds",
)


def _mechanisms() -> list[str]:
    from fdptm.mechanisms.registry import MECHANISMS

    return list(MECHANISMS)


def pheme() -> dict:
    from fdptm.flows.compare import compare_flow
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    runs: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Workspace.resolve(Path(tmp) / "ws")
        ingest(PHEME_RAW, "pheme", workspace)
        for eps in EPSILONS:
            for seed in range(REPEATS):
                out = compare_flow(
                    dataset="pheme",
                    epsilon=eps,
                    delta=DELTA,
                    topics=TOPICS,
                    mechanisms=_mechanisms(),
                    iterations=ITERATIONS,
                    seed=seed,
                    workspace=str(workspace.root),
                )
                runs.setdefault(str(eps), []).append(out["rows"])
                print(f"PHEME epsilon={eps} seed={seed}", flush=True)
    return runs


def synthetic() -> dict:
    from fdptm.evaluation.comparison import compare, split_documents
    from fdptm.evaluation.synthetic import generate_lda
    from fdptm.privacy.adjacency import Adjacency
    from fdptm.tasks.spec import RunSpec

    data = generate_lda(2000, 500, TOPICS, doc_length=40, eta=0.05, seed=7)
    train, test = split_documents(data.corpus, 0.1, 7)
    runs: dict = {}
    for eps in EPSILONS:
        for seed in range(REPEATS):
            spec = RunSpec(
                run_id="synthetic",
                workspace=tempfile.gettempdir(),
                dataset="synthetic",
                epsilon=eps,
                delta=DELTA,
                topics=TOPICS,
                iterations=ITERATIONS,
                seed=seed,
            )
            rows, _ = compare(
                train,
                test,
                spec,
                Adjacency.DOCUMENT,
                _mechanisms(),
                oov=False,
                truth=data.phi,
                with_m1=False,
            )
            runs.setdefault(str(eps), []).append([asdict(r) for r in rows])
            print(f"synthetic epsilon={eps} seed={seed}", flush=True)
    return runs


def summarise(runs: dict) -> dict:
    """Mean and sd per (epsilon, mechanism, metric) over the repeats."""
    out: dict = {}
    for eps, repeats in runs.items():
        by_mech: dict = {}
        for rows in repeats:
            for r in rows:
                entry = by_mech.setdefault(
                    r["mechanism"],
                    {
                        "guarantee": r["guarantee"],
                        "adjacency": r["adjacency"],
                        "errors": [],
                        "values": {},
                    },
                )
                if r["error"]:
                    entry["errors"].append(r["error"])
                    continue
                for m in METRICS:
                    if r.get(m) is not None:
                        entry["values"].setdefault(m, []).append(r[m])
        out[eps] = {
            mech: {
                "guarantee": e["guarantee"],
                "adjacency": e["adjacency"],
                "errors": e["errors"],
                **{
                    m: (float(np.mean(v)), float(np.std(v))) if v else None
                    for m, v in e["values"].items()
                },
            }
            for mech, e in by_mech.items()
        }
    return out


def _cell(value, digits: int) -> str:
    if value is None:
        return "-"
    mean, sd = value
    if math.isnan(mean):
        return "nan"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def render(summary: dict, title: str, truth: bool) -> list[str]:
    lines = [f"### {title}", ""]
    for eps, mechs in summary.items():
        lines += [
            f"### epsilon = {float(eps):g}, delta = {DELTA:g}",
            "",
            "| mechanism | guarantee (M2) | adjacency | NPMI | diversity | above floor | "
            "held-out LL/token | UMass | L1 vs non-private | Kendall tau | "
            + ("cosine to truth | " if truth else "")
            + "seconds |",
            "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if truth else "") + "---|",
        ]
        for name, e in mechs.items():
            if e["errors"]:
                lines.append(f"| {name} | {e['guarantee']} | failed: {e['errors'][0]} |")
                continue
            cells = [
                name,
                e["guarantee"],
                e["adjacency"],
                _cell(e.get("npmi"), 3),
                _cell(e.get("topic_diversity"), 2),
                _cell(e.get("words_above_floor"), 1),
                _cell(e.get("heldout_loglik_per_token"), 3),
                _cell(e.get("umass"), 1),
                _cell(e.get("l1"), 3),
                _cell(e.get("kendall_tau"), 3),
            ]
            if truth:
                cells.append(_cell(e.get("truth_cosine"), 3))
            cells.append(_cell(e.get("seconds"), 2))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def main() -> None:
    """Run the comparison, or with ``--render`` only re-render compare.json."""
    from fdptm.request import default

    again = "--render" in sys.argv[1:]
    if again:
        results = filled(json.loads(stem("compare").with_suffix(".json").read_text()))
    else:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
        results = {"machine": at_start(), "synthetic": synthetic(), "pheme": pheme()}
    lines = [
        f"k = {TOPICS}, {ITERATIONS} iterations, mean ± sd over {REPEATS} seeds. Higher is "
        "better in the first four score columns (`fdptm.evaluation.metrics`). NPMI: "
        "gensim's, of the top 10 words above each topic's floor, co-occurrence per training "
        "document (a topic with fewer than 2 such words, or within 0.05 of uniform, scores "
        "-1). Diversity: distinct above-floor words among the topics' top 25, over 25 k. "
        "Above floor: how many of a topic's top 10 words are above its floor. Held-out "
        "LL/token: document-completion log-likelihood per token of the held-out documents, "
        "in nats. UMass: eq. 4 of the FDPTM paper, top 10 words, on the training "
        "documents, for comparison with the paper only (it rewards small vocabularies). L1 "
        "and Kendall tau: against the non-private CGS model on the same documents after "
        "Hungarian matching. 'unproven claim' rows are not DP (README, 'M2 mechanisms'). On "
        f"PHEME, M1 selects the vocabulary at {default('m1_fraction'):.0%} of epsilon, so "
        "the vocabulary (and with it the log-likelihood of a uniform model, -ln V) changes "
        "with epsilon: compare rows within one epsilon, not across.",
        "",
    ]
    lines += render(summarise(results["synthetic"]), "Synthetic LDA with known topics", True)
    lines += render(summarise(results["pheme"]), "PHEME (5,802 tweets)", False)
    title = "M2 comparison (internal statistics, not DP)"
    print(save("compare", title, "\n".join(lines), results, again=again).read_text())


if __name__ == "__main__":
    main()
