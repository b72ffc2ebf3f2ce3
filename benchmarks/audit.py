"""Audit performance and the FDPTM paper's PHEME reproduction (issue 4).

    pip install -e .
    python benchmarks/audit.py          # writes benchmarks/audit_results.{md,json}, audit_roc.png
    python benchmarks/audit.py --only performance --baseline-python OTHER/.venv/bin/python

All parts run on ../shared/data/pheme/pheme_clean.json (the paper's preprocessing, 5,698
tweets), ingested into a temporary workspace with document-level units, at k = 5 topics
and 64 shadow models (the paper uses 128):

1. performance: ``fdptm audit --run ID --shadows 64`` on an unseeded release of the
   default M2 (the request model's, epsilon 5, the CLI's defaults) and on one of dp-vi
   (with its default iterations: issue 30's case, when dp-vi was the default), in a fresh
   interpreter as a user runs it, and handed to a running ``fdptm serve``, in interleaved
   rounds (``--rounds``; with ``--baseline-python``, the same arms of another checkout's
   installation in the same rounds): wall time and the peak resident memory of the whole
   process tree (sampled every 50 ms); then the default release's audit once on one worker
   and once on a process pool.
2. non-private LDA with the full vocabulary (the paper's section 3 set-up): every model is
   non-private collapsed Gibbs sampling on its half with the corpus's whole vocabulary;
   online LiRA on zeta (eq. 3) against the three Huang et al. baselines.
3. FDPTM LiRA while varying epsilon1 in {1, 5, 10} at epsilon2 = 5, and epsilon2 at
   epsilon1 = 5 (the paper's Figure 6): a release per pair through ``fdptm release`` with the
   paper's M2 (Zhu et al., ``zhu``) and with ours (``dp-vi``), each audited through the audit
   flow; ROC curves in audit_roc.png.
4. UMass coherence (eq. 4) of a non-private M2 on the DP vocabulary as epsilon1 grows
   (Figure 4) and the vocabulary size (Figure 9), 3 seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import (  # noqa: E402
    at_start,
    clean_env,
    fdptm,
    fdptm_argv,
    measure,
    rounds,
    save,
    stem,
)

TITLE = "Audit benchmark and PHEME reproduction"
TARGETS = (
    "`fdptm audit --shadows 64` of the default release on PHEME in < 30 s, < 1.5 GB (issue 30)"
)

PHEME = HERE.parent.parent / "shared" / "data" / "pheme" / "pheme_clean.json"
SHADOWS = 64
TOPICS = 5
DELTA = 1e-5
PAIRS = [(1, 5), (5, 5), (10, 5), (5, 1), (5, 10)]
M2S = ("zhu", "dp-vi")
EPSILON1 = [0.5, 1, 2, 3, 5, 8, 10, 15, 20]
SEEDS = (0, 1, 2)
CGS_ITERATIONS = 200
PARTS = ("performance", "non-private", "fdptm", "coherence")


def _workspace(root: Path):
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    workspace = Workspace.resolve(root)
    ingest(PHEME, "pheme", workspace, unit="document")
    return workspace


def _release(
    workspace,
    eps1: float,
    eps2: float,
    mechanism: str,
    seed: int | None = 0,
    iterations: int = 20,
) -> str:
    from fdptm.flows.release import release
    from fdptm.request import ReleaseRequest

    outcome = release(
        ReleaseRequest(
            dataset="pheme",
            epsilon=eps1 + eps2,
            delta=DELTA,
            topics=TOPICS,
            iterations=iterations,
            mechanism=mechanism,
            seed=seed,
            workspace=str(workspace.root),
            m1_fraction=eps1 / (eps1 + eps2),
            allow_unproven=mechanism == "zhu",
        )
    )
    return outcome["run_id"]


def _bounded(workspace, run_id: str):
    from fdptm.storage.artifacts import read_parquet
    from fdptm.storage.catalog import Catalog

    row = Catalog(workspace).artifact(f"run/{run_id}/bounded_tokens")
    return read_parquet(workspace.root / row["path"], row["sha256"])


def performance(workspace, n_rounds: int, baseline: str | None) -> list[dict]:
    """``fdptm audit --shadows 64`` on every core, in a fresh process ("threads") and handed
    to a running ``fdptm serve`` ("served"), of an unseeded release of the default M2 and
    of dp-vi, ``n_rounds`` interleaved rounds (with the ``baseline`` interpreter's arms
    too, when given); then the default release's audit once on one worker and once on a
    process pool."""
    from fdptm.request import default

    mechanisms = list(dict.fromkeys([default("mechanism"), "dp-vi"]))
    iterations = default("iterations")
    runs_of = {
        m: _release(workspace, 1.25, 3.75, m, seed=None, iterations=iterations) for m in mechanisms
    }
    home = workspace.root.parent / "prefect-home"
    pythons = {"": sys.executable} | ({"baseline ": baseline} if baseline else {})
    cores = str(len(os.sched_getaffinity(0)))

    def audit(python: str, mechanism: str, *extra: str, shadows: int = SHADOWS) -> list[str]:
        argv = ["audit", "--run", runs_of[mechanism], "--shadows", str(shadows), *extra]
        return [*fdptm_argv(python), *argv, "--workspace", str(workspace.root)]

    for python in pythons.values():  # untimed: creates the Prefect database, once per machine
        measure(audit(python, mechanisms[0], shadows=2), clean_env(home=home))
    servers = {label: _Server(python, home) for label, python in pythons.items()}
    try:

        def run(arm: str):
            label = "baseline " if arm.startswith("baseline ") else ""
            mechanism, kind = arm.removeprefix(label).split()
            argv = audit(pythons[label], mechanism, "--workers", cores)
            if kind == "served":
                server = servers[label]
                return measure(argv, server.env, root=server.pid, interval=0.05)
            return measure(argv, clean_env(home=home), interval=0.05)

        arms = [
            f"{label}{mechanism} {kind}"
            for mechanism in mechanisms
            for label in pythons
            for kind in ("threads", "served")
        ]
        runs = rounds(arms, n_rounds, run, lambda m: f"{m.wall:.1f} s")
    finally:
        for server in servers.values():
            server.stop()
    rows = [_row(arm, int(cores), measured, runs) for arm, measured in runs.items()]
    for workers, runner in ((1, "threads"), (int(cores), "processes")):
        extra = ["--workers", str(workers)] + (["--processes"] if runner == "processes" else [])
        argv = audit(sys.executable, mechanisms[0], *extra)
        measured = measure(argv, clean_env(home=home), interval=0.05)
        rows.append(_row(f"{mechanisms[0]} {runner}", workers, [measured], runs))
        print(f"audit, {workers} {runner}: {measured.wall:.1f} s", flush=True)
    return [
        r
        | {
            "run": runs_of[r["mechanism"]],
            "default": mechanisms[0],
            "iterations": iterations if r["mechanism"] == "dp-vi" else None,
        }
        for r in rows
    ]


def _row(arm: str, workers: int, runs: list, every: dict) -> dict:
    """One table row: the arm's median wall, its range, its peak RSS and, for this code's
    arms, the ratio to the baseline's median in the same rounds."""
    walls = [m.wall for m in runs]
    row = {
        "arm": arm,
        "workers": workers,
        "mechanism": arm.removeprefix("baseline ").split()[0],
        "runner": arm.removeprefix("baseline ").split()[-1],
        "seconds": statistics.median(walls),
        "min": min(walls),
        "max": max(walls),
        "n": len(walls),
        "peak_rss_mb": max(m.peak_mib for m in runs) * 2**20 / 1e6,
    }
    other = every.get(f"baseline {arm}")
    if other and not arm.startswith("baseline") and len(runs) == len(other):
        row["ratio_to_baseline"] = row["seconds"] / statistics.median(m.wall for m in other)
    return row


class _Server:
    """A ``fdptm serve --detach`` of ``python``'s installation, with its own socket folder
    (docs/how-to/serve.md): the imports and the temporary API are the server's."""

    def __init__(self, python: str, home: Path) -> None:
        self.python = python
        sockets = tempfile.mkdtemp(prefix="fdptm-sockets-")
        self.env = clean_env(home=home, FDPTM_SERVE="on", FDPTM_SERVE_DIR=sockets)
        started = fdptm("serve", "--detach", env=self.env, python=python)
        self.pid = int(started.stdout.split("pid ")[1].split()[0])

    def stop(self) -> None:
        fdptm("serve", "--stop", env=self.env, python=self.python, check=False)


def non_private(workspace) -> list[dict]:
    """Section 3, and what the DP vocabulary alone does: online LiRA vs Huang et al. on
    non-private collapsed Gibbs models, with the full vocabulary (beta = 0.01, ours, and
    beta = 1/k, scikit-learn's default topic-word prior, which the paper used) and with each
    model's own DP vocabulary at epsilon1 (M1 private, M2 not)."""

    from fdptm.audit.attacks import attacks
    from fdptm.audit.lira import roc
    from fdptm.audit.shadows import half_masks, score_documents, train_on, universe
    from fdptm.mechanisms.lda import train_cgs
    from fdptm.mechanisms.set_union import set_union_params
    from fdptm.privacy.noise import NoiseSource
    from fdptm.tasks.audit import ROC_GRID
    from fdptm.tasks.vocabulary import select_vocabulary

    bounded = _bounded(workspace, _release(workspace, 1.25, 3.75, "dp-vi", seed=1))
    full = universe(bounded)
    size = len(full)
    masks = half_masks(bounded.num_rows, SHADOWS + 1, np.random.default_rng(7))

    def setting(label: str, vocabulary, beta: float) -> dict:
        def train(corpus, noise):
            return train_cgs(corpus, TOPICS, CGS_ITERATIONS, noise, alpha=1 / TOPICS, beta=beta)

        start = time.perf_counter()
        models, sizes = [], []
        for index in range(SHADOWS + 1):
            noise = NoiseSource.create(3, index)
            trained = train_on(bounded, masks[index], vocabulary, train, noise)
            sizes.append(len(trained.words))
            models.append(score_documents(trained, bounded, TOPICS, size))
        seconds = time.perf_counter() - start
        found = attacks("online", masks, models, models)
        row = {"setting": label, "beta": beta, "seconds": seconds, "attacks": {}}
        row["vocabulary"] = float(np.mean(sizes))
        for name in ("lira-online", "lira-online-eq3", "huang-max-posterior", "huang-std"):
            curve = roc(found[name].scores, masks[0])
            row["attacks"][name] = {
                "auc": curve.auc(),
                "tpr_at_fpr_0.001": curve.tpr_at(0.001),
                "tpr_at_fpr_0.01": curve.tpr_at(0.01),
                "roc": {"fpr": ROC_GRID.tolist(), "tpr": [curve.tpr_at(f) for f in ROC_GRID]},
            }
        print(
            f"{label}: LiRA TPR {row['attacks']['lira-online-eq3']['tpr_at_fpr_0.001']:.4f} "
            "at 0.1% FPR",
            flush=True,
        )
        return row

    rows = [
        setting("full vocabulary", lambda table, noise: full, 0.01),
        setting("full vocabulary", lambda table, noise: full, 1 / TOPICS),
    ]
    for eps1 in (1, 5, 10):
        params = set_union_params("weighted", eps1, DELTA)
        rows.append(
            setting(
                f"DP vocabulary, epsilon1 = {eps1}",
                lambda table, noise, params=params: select_vocabulary(table, params, noise),
                0.01,
            )
        )
    for row in rows:
        row["documents"], row["universe"] = bounded.num_rows, size
    return rows


def fdptm_runs(workspace) -> list[dict]:
    """Figure 6: the audit of a release per (epsilon1, epsilon2) pair and M2."""
    from fdptm.flows.audit import audit_flow
    from fdptm.tasks.audit import AuditFailedError, AuditSpec

    rows = []
    for mechanism in M2S:
        for eps1, eps2 in PAIRS:
            run_id = _release(workspace, eps1, eps2, mechanism)
            spec = AuditSpec(run_id, str(workspace.root), shadows=SHADOWS, seed=11)
            try:
                report = audit_flow(spec)
            except AuditFailedError as failure:
                report = json.loads(
                    (
                        workspace.root / "internal" / "audits" / f"{run_id}-online" / "audit.json"
                    ).read_text()
                )
                report["failure"] = str(failure)
            attack = report["attacks"]
            rows.append(
                {
                    "mechanism": mechanism,
                    "epsilon1": eps1,
                    "epsilon2": eps2,
                    "vocabulary": report["utility"]["vocabulary_size"],
                    "attacks": {
                        name: {
                            k: a[k] for k in ("auc", "tpr_at_fpr_0.001", "tpr_at_fpr_0.01", "roc")
                        }
                        for name, a in attack.items()
                    },
                    "bounds": report["bounds"],
                    "verdict": report["verdict"],
                    "umass": report["utility"]["umass"],
                    "run": run_id,
                }
            )
            print(f"{mechanism} eps1={eps1} eps2={eps2}: {report['verdict']}", flush=True)
    return rows


def coherence(workspace) -> list[dict]:
    """Figures 4 and 9: a non-private M2 on the DP vocabulary as epsilon1 grows."""
    from fdptm.audit.shadows import universe
    from fdptm.evaluation.comparison import without_word
    from fdptm.evaluation.metrics import umass
    from fdptm.mechanisms.lda import train_cgs
    from fdptm.mechanisms.set_union import set_union_params
    from fdptm.privacy.noise import NoiseSource
    from fdptm.tasks.sanitize import corpus_of, drop_oov, sanitize
    from fdptm.tasks.vocabulary import select_vocabulary

    bounded = _bounded(workspace, _release(workspace, 1.25, 3.75, "dp-vi", seed=2))

    def one(words: list[str], seed: int) -> float:
        sanitized = corpus_of(sanitize(bounded, words), len(words))
        noise = NoiseSource.create(seed, 5)
        phi = drop_oov(train_cgs(sanitized, TOPICS, CGS_ITERATIONS, noise, alpha=1.0 / TOPICS))
        return umass(phi, without_word(sanitized, len(words)))

    full = universe(bounded)
    rows = [
        {
            "epsilon1": None,
            "vocabulary": [len(full)] * len(SEEDS),
            "umass": [one(full, seed) for seed in SEEDS],
        }
    ]
    for eps1 in EPSILON1:
        params = set_union_params("weighted", eps1, DELTA)
        sizes, scores = [], []
        for seed in SEEDS:
            words = select_vocabulary(bounded, params, NoiseSource.create(seed, 1))
            sizes.append(len(words))
            scores.append(one(words, seed))
        rows.append({"epsilon1": eps1, "vocabulary": sizes, "umass": scores})
        print(f"eps1={eps1}: vocabulary {np.mean(sizes):.0f}, UMass {np.mean(scores):.2f}")
    return rows


def _roc_figure(non_private_rows: list[dict], runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 1 + len(M2S), figsize=(5 * (1 + len(M2S)), 4.5))
    grid = np.logspace(-4, 0, 200)
    for row in non_private_rows:
        r = row["attacks"]["lira-online"]["roc"]
        axes[0].loglog(r["fpr"], r["tpr"], label=f"LiRA: {row['setting']}, beta {row['beta']:g}")
    if non_private_rows:
        r = non_private_rows[0]["attacks"]["huang-max-posterior"]["roc"]
        axes[0].loglog(r["fpr"], r["tpr"], label="Huang max posterior: full vocabulary")
        axes[0].set_title("non-private M2")
    for ax, mechanism in zip(axes[1:], M2S, strict=True):
        for row in (r for r in runs if r["mechanism"] == mechanism):
            r = row["attacks"]["lira-online"]["roc"]
            ax.loglog(r["fpr"], r["tpr"], label=f"eps1={row['epsilon1']}, eps2={row['epsilon2']}")
        ax.set_title(f"FDPTM, M2 = {mechanism}")
    for ax in axes:
        ax.loglog(grid, grid, "k:", linewidth=0.8)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_xlim(1e-4, 1)
        ax.set_ylim(1e-4, 1)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _markdown(results: dict, parts: list[str]) -> str:
    """The parts measured in this run (the record holds the latest of every part)."""
    lines = [
        "PHEME `pheme_clean.json` (the paper's preprocessing), document-level units, k = 5,",
        f"{SHADOWS} shadow models. Attack results are internal (computed on the documents).",
        "",
    ]
    if "performance" in parts:
        performance = results["performance"]
        iterations = next(r["iterations"] for r in performance if r["iterations"])
        lines += [
            "### Performance: `fdptm audit --shadows 64` end to end (target < 30 s, < 1.5 GB)",
            "",
            f"An unseeded release at epsilon 5 of the default M2 "
            f"({performance[0]['default']}, the request model's) and one of dp-vi"
            f" with its default {iterations} iterations",
            "(issue 30's case, when dp-vi was the default); the audit's shadows train with",
            "the release's own settings. The audit",
            "trains 65 pipeline models and 65 M2-alone models, scores every document under",
            "each and attacks; wall time of the command in a fresh interpreter (Prefect's",
            "temporary server included, its database created beforehand by an untimed audit)",
            "or handed to a running `fdptm serve` (served: the peak RSS is then the server's",
            "whole tree), and peak RSS summed over its process tree. Arms interleaved in",
            "rounds; the baseline arms are another checkout's installation (`--baseline-python`).",
            "",
            "| arm | workers | runs | median wall (s) | min-max (s) | ratio to baseline | "
            "peak RSS (MB) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in performance:
            ratio = r.get("ratio_to_baseline")
            lines.append(
                f"| {r['arm']} | {r['workers']} | {r['n']} | {r['seconds']:.1f} | "
                f"{r['min']:.1f}-{r['max']:.1f} | {'-' if ratio is None else f'{ratio:.2f}'} | "
                f"{r['peak_rss_mb']:.0f} |"
            )
        lines.append("")
    if "non-private" in parts:
        rows = results["non-private"]
        lines += [
            "### Non-private LDA (paper section 3), and the DP vocabulary alone",
            "",
            f"{rows[0]['documents']} documents, {rows[0]['universe']} distinct words. Every",
            f"model is non-private collapsed Gibbs sampling ({CGS_ITERATIONS} sweeps, alpha =",
            "1/k) on its half, with the full vocabulary or with its own DP vocabulary",
            "(weighted DP set union at epsilon1). LiRA: online, on eq. 3's zeta (eq3) and on",
            "the release likelihood (release); Huang et al.: global threshold on theta-hat.",
            "The paper (128 shadows, scikit-learn's LDA): LiRA 12.8% at 0.1% FPR, the",
            "baselines about 0.19%.",
            "",
            "| setting | beta | vocabulary | LiRA eq3 AUC | eq3 TPR@0.1% | eq3 TPR@1% "
            "| release TPR@0.1% | Huang max-post. TPR@0.1% | Huang std TPR@0.1% |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            a = row["attacks"]
            eq3 = a["lira-online-eq3"]
            lines.append(
                f"| {row['setting']} | {row['beta']:g} | {row['vocabulary']:.0f} | "
                f"{eq3['auc']:.3f} | {eq3['tpr_at_fpr_0.001']:.2%} | "
                f"{eq3['tpr_at_fpr_0.01']:.2%} | {a['lira-online']['tpr_at_fpr_0.001']:.2%} | "
                f"{a['huang-max-posterior']['tpr_at_fpr_0.001']:.2%} | "
                f"{a['huang-std']['tpr_at_fpr_0.001']:.2%} |"
            )
        lines.append("")
    if "fdptm" in parts:
        lines += [
            "### FDPTM: LiRA as epsilon1 and epsilon2 vary (paper Figure 6)",
            "",
            "One release per row (`fdptm release --m1-fraction eps1/(eps1+eps2)`), audited",
            "with `fdptm audit --shadows 64`. lira-online: the release likelihood;",
            "eq3: the paper's statistic on in-vocabulary tokens; m2: M2 alone on the",
            "release's vocabulary. Bounds: Clopper-Pearson on the evaluation half, 95% for",
            "all bounds of an audit together (Bonferroni).",
            "",
            "| M2 | eps1 | eps2 | vocabulary | AUC | TPR@0.1% | TPR@1% | eq3 AUC | m2 AUC "
            "| bound (release / M1 / M2) | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in results["fdptm"]:
            a = row["attacks"]
            main, eq3, m2 = a["lira-online"], a["lira-online-eq3"], a["m2-lira-online"]
            b = row["bounds"]
            lines.append(
                f"| {row['mechanism']} | {row['epsilon1']} | {row['epsilon2']} | "
                f"{row['vocabulary']} | {main['auc']:.3f} | {main['tpr_at_fpr_0.001']:.2%} | "
                f"{main['tpr_at_fpr_0.01']:.2%} | {eq3['auc']:.3f} | {m2['auc']:.3f} | "
                f"{b['release']['lower_bound']:.2f} / {b['M1']['lower_bound']:.2f} / "
                f"{b['M2']['lower_bound']:.2f} | {row['verdict']} |"
            )
        lines += ["", "ROC curves (log-log): `audit_roc.png`.", ""]
    if "coherence" in parts:
        lines += [
            "### Coherence and vocabulary size as epsilon1 grows (Figures 4 and 9)",
            "",
            f"Weighted DP set union (alpha = 3, delta = {DELTA:g}) at epsilon1, then",
            f"non-private collapsed Gibbs sampling ({CGS_ITERATIONS} sweeps) on the sanitized",
            f"corpus; UMass (eq. 4, top 10) on it; mean (min-max) over seeds {SEEDS}.",
            "",
            "| epsilon1 | vocabulary | UMass |",
            "|---|---|---|",
        ]
        for row in results["coherence"]:
            v, u = row["vocabulary"], row["umass"]
            label = "full (no M1)" if row["epsilon1"] is None else f"{row['epsilon1']:g}"
            lines.append(
                f"| {label} | {np.mean(v):.0f} ({min(v)}-{max(v)}) | "
                f"{np.mean(u):.2f} ({min(u):.2f} to {max(u):.2f}) |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=PARTS, action="append")
    parser.add_argument("--rounds", type=int, default=3, help="performance: interleaved rounds")
    parser.add_argument("--baseline-python", help="performance: another checkout's interpreter")
    args = parser.parse_args()
    parts = args.only or list(PARTS)
    out = stem("audit_results").with_suffix(".json")  # --only merges into the last record
    results: dict = json.loads(out.read_text()) if args.only and out.exists() else {}
    results["machine"] = at_start()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = _workspace(Path(tmp) / "ws")
        if "performance" in parts:
            results["performance"] = performance(workspace, args.rounds, args.baseline_python)
        if "non-private" in parts:
            results["non-private"] = non_private(workspace)
        if "fdptm" in parts:
            results["fdptm"] = fdptm_runs(workspace)
        if "coherence" in parts:
            results["coherence"] = coherence(workspace)
    if {"non-private", "fdptm"} & set(parts):
        _roc_figure(
            results.get("non-private", []), results.get("fdptm", []), out.with_name("audit_roc.png")
        )
    body = _markdown(results, parts)
    print(save("audit_results", TITLE, body, results).read_text())


if __name__ == "__main__":
    main()
