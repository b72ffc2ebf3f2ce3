"""Is ``--tune`` (private hyper-parameter selection for dp-vi) worth its budget?

    .venv/bin/python benchmarks/tune.py            # writes tune_results.md / .json
    .venv/bin/python benchmarks/tune.py --quick    # smoke test (epsilon 3, 2 seeds)
    .venv/bin/python benchmarks/tune.py --render   # re-render the .md from the .json

``--tune`` (``fdptm.mechanisms.tuning``) replaces M2 = dp-vi by Papernot & Steinke's random
repetition: a geometric number of trials with mean ``mean_trials`` (default 5), each trial
a dp-vi configuration drawn uniformly from a public grid (default ``tune_iterations``
20,50,100 x ``tune_thresholds`` 1,2,3 x ``tune_clips`` 2), trained on ~80% of the units and
scored on the other ~20% by a noisy clipped held-out likelihood; only the best trial is
released. Every trial then gets about a quarter (mean 5) or 40% (mean 2) of the zCDP rho an
untuned run gets at the same M2 epsilon. The question: at total epsilon 1, 3 and 10, do
the tuned topics beat the untuned defaults (dp-vi threshold 1, T = 100, C = 2, m1_fraction
0.5), and which ``mean_trials`` and grid are worth it?

Method. The release pipeline of ``dp_vi_grid`` (PRE, each tweet its own unit, contribution
bounding, a fixed 10% held out, M1 = DP set union and M2 at the release's own budget split
and calibration, ``fdptm.tasks.run.calibrate``, SAN, M2 without SAN's OOV token, noise
``NoiseSource.internal(seed, stream)``) with the CURRENT library defaults
(``dp_vi_threshold.current_defaults``). Arms (``ARMS``):

- untuned: ``dp_vi_grid.replicate(..., oov=False)`` through ``dp_vi_grid._job`` with the
  defaults, exactly the rows of ``dp_vi_threshold.py`` at threshold 1;
- tuned: the same ``RunSpec`` (``dp_vi_grid.run_spec``) with ``tune=True`` and the arm's
  ``m2_options``, so ``spec.m2`` is the registry's ``tuned("dp-vi")`` and ``calibrate``
  plans and calibrates it unchanged; trained with ``Mechanism.train(..., released=...)``
  (which drops the OOV column as a release does); ``released`` gives the chosen
  configuration. Arms: mean_trials 5 and 2 on the default grid, and mean_trials 2 on a
  narrower grid (T 50,100 x threshold 1,2), added to answer the grid question: the earlier
  benchmarks found T in 20..100 flat and threshold 3 worse than 1 or 2.

Pairing: seed s is one replicate; M1's noise is stream 1 of s and M2's stream 2 of s, and
M1's share (m1_fraction 0.5) is the same in every arm (the script checks that M1's
calibrated parameters are equal), so for one seed every arm sees the same DP vocabulary.
Differences are per seed (arm - untuned): median [min, max], seeds with a positive
difference, two-sided sign test (``scipy.stats.binomtest`` via ``dp_vi_threshold.paired``;
with 8 seeds 7/8 gives p = 0.07, 8/8 p = 0.008).

- PHEME (``pheme_clean.json``, document level, k = 5, delta = 1e-5) at total epsilon 1, 3,
  10 on the fresh seeds 500-507: NPMI (gensim, top-10 above floor, against all 5,698
  preprocessed tweets), the fewest top-10 words above floor in a topic, no-signal topics,
  diversity (top 25), held-out document-completion LL per token (comparable within a
  seed), the chosen configurations (counts).
- The synthetic LDA corpora ``dp_vi_grid.SYNTHETIC`` at the same epsilons on seeds
  500-503: matched cosine to the true topics.
- Wall time: each replicate's M2 training time (for the tuned arms: split, every trial and
  its score), the only part of a release that differs between arms (M1 and SAN are the
  same), with the numba kernels compiled once before the workers fork (a warm-up
  replicate on seed 0, not measured); the jobs are queued interleaved (seed by seed,
  every arm in turn) on the same worker pool, so background load hits every arm alike;
  plus each arm's calibration time, cold (``calibrate``'s memo cleared), in the main
  process.

Run from a git worktree, the editable install of the main checkout would otherwise supply
``fdptm.tasks``: the script puts its own checkout first and stops if ``fdptm`` or
``fdptm.tasks`` (or the benchmark modules it reuses) come from elsewhere.

Everything here reads the documents: the tables are internal, non-DP statistics (PHEME is
public research data).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # one thread a worker, before numpy and numba load (see dp_vi_grid)
    from harness import one_thread

    one_thread()

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import dp_vi_grid as grid  # noqa: E402
import dp_vi_threshold as thr  # noqa: E402  (it puts this checkout's fdptm first)
import numpy as np  # noqa: E402
from dp_vi_grid import SYNTHETIC, _m, load, run_spec  # noqa: E402
from dp_vi_threshold import (  # noqa: E402
    KIND,
    _pair,
    compared,
    current_defaults,
    earlier_summary,
    paired,
    per_seed,
    summary_text,
    synthetic_table,
)

TITLE = "`--tune` (private hyper-parameter selection for dp-vi) vs the untuned defaults"
EPSILONS = (1.0, 3.0, 10.0)
SEEDS = tuple(range(500, 508))
SYNTHETIC_SEEDS = (500, 501, 502, 503)
WARMUP_SEED = 0
PHEME = "pheme"
UNTUNED = "untuned"
NARROW = {"tune_iterations": "50,100", "tune_thresholds": "1,2"}
ARMS: dict[str, dict[str, Any] | None] = {
    UNTUNED: None,
    "tune, mean 5": {"mean_trials": 5.0},
    "tune, mean 2": {"mean_trials": 2.0},
    "tune, mean 2, narrow grid": {"mean_trials": 2.0, **NARROW},
}
"""Arm name -> ``m2_options`` of the tuned run (None: the untuned defaults)."""
EXTRA_ARMS = ("tune, mean 2, narrow grid",)


def check_checkout() -> None:
    """Stop unless the library, its task code and the reused benchmarks are this checkout's."""
    import fdptm.mechanisms.tuning
    import fdptm.tasks
    import fdptm.tasks.run

    modules = (fdptm, fdptm.tasks, fdptm.tasks.run, fdptm.mechanisms.tuning, grid, thr)
    for module in modules:
        if not Path(module.__file__).resolve().is_relative_to(ROOT):
            raise SystemExit(f"{module.__name__} imported from {module.__file__}, not {ROOT}")


def spec_of(epsilon: float, cfg: dict[str, Any], options: dict[str, Any] | None) -> Any:
    """The release's ``RunSpec`` for an arm: ``dp_vi_grid.run_spec`` (untuned), or the same
    with ``tune=True`` and the tuned mechanism's options."""
    spec = run_spec(epsilon, cfg)
    return spec if options is None else replace(spec, tune=True, m2_options=dict(options))


def calibrated(epsilon: float, cfg: dict[str, Any], options: dict[str, Any] | None) -> Any:
    from fdptm.privacy.adjacency import Adjacency
    from fdptm.tasks.run import calibrate

    return calibrate(spec_of(epsilon, cfg, options), Adjacency.DOCUMENT)


def replicate_tuned(
    data: grid.Dataset, epsilon: float, cfg: dict[str, Any], options: dict[str, Any], seed: int
) -> dict[str, Any]:
    """One tuned release (M1, SAN, tuned dp-vi) and its metrics, as ``grid.replicate``."""
    from fdptm.privacy.noise import NoiseSource
    from fdptm.tasks.sanitize import drop_oov

    spec = spec_of(epsilon, cfg, options)
    cal = calibrated(epsilon, cfg, options)
    words = grid.vocabulary(data, "dp", cal.m1, seed)
    base = {
        "seed": seed,
        "m2_epsilon": cal.plan.stage("train").epsilon,
        "trial_epsilon": cal.m2.single_trial_epsilon,
    }
    if len(words) < grid.TOPICS:
        return {**base, "vocabulary": len(words), "failed": f"DP vocabulary of {len(words)} words"}
    train, test = grid.corpora(data, words)
    released: dict[str, Any] = {}
    started = time.perf_counter()
    phi = spec.m2.train(
        train, grid.TOPICS, cal.m2, NoiseSource.internal(seed, 2), released=released
    )
    seconds = time.perf_counter() - started
    out = grid.score(drop_oov(phi), data, words, train, test)
    return {**base, **out, "seconds": seconds, "chosen": released}


def _job(job: tuple[str, str, float, dict[str, Any], int]) -> dict[str, Any]:
    name, arm, epsilon, cfg, seed = job
    options = ARMS[arm]
    if options is None:
        return grid._job((name, KIND, "dp", epsilon, cfg, seed))
    return replicate_tuned(grid._DATA[name], epsilon, cfg, options, seed)


def run_jobs(pool: ProcessPoolExecutor | None, jobs: list[tuple]) -> dict[tuple, dict]:
    """Results keyed by (dataset, arm, epsilon, seed), in the order given (interleaved)."""
    results = list(pool.map(_job, jobs, chunksize=1)) if pool else [_job(j) for j in jobs]
    return {(j[0], j[1], j[2], j[4]): r for j, r in zip(jobs, results, strict=True)}


def chosen_counts(runs: list[dict[str, Any]]) -> dict[str, int]:
    """How often each configuration won (``T=.. thr=.. C=..``), most frequent first."""
    counts = Counter(
        f"T={r['chosen']['iterations']} thr={r['chosen']['threshold']:g} C={r['chosen']['clip']:g}"
        for r in runs
        if "chosen" in r
    )
    return dict(counts.most_common())


def marginal_counts(runs: list[dict[str, Any]], key: str) -> dict[str, int]:
    counts = Counter(format(r["chosen"][key], "g") for r in runs if "chosen" in r)
    return dict(sorted(counts.items(), key=lambda kv: float(kv[0])))


def timing(runs: list[dict[str, Any]], base: list[dict[str, Any]]) -> dict[str, Any]:
    """Median M2 seconds, and the per-seed ratio to the untuned run's seconds."""
    secs = [r["seconds"] for r in runs if "seconds" in r]
    ratios = [
        a["seconds"] / b["seconds"]
        for a, b in zip(runs, base, strict=True)
        if "seconds" in a and "seconds" in b
    ]
    out: dict[str, Any] = {"seconds": secs, "ratios": ratios}
    if secs:
        out["median_seconds"] = statistics.median(secs)
    if ratios:
        out["ratio"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    return out


def budget(epsilon: float, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Per arm: M2 epsilon, the zCDP rho of one trial (an untuned run's for the untuned
    arm), its ratio to the untuned rho, the noise multipliers by T; and the cold
    calibration time (median of 3, ``calibrate``'s memo cleared)."""
    from fdptm.tasks import run

    rows = []
    base_rho = None
    for arm, options in ARMS.items():
        times = []
        for _ in range(3):
            run._calibrated.cache_clear()
            started = time.perf_counter()
            cal = calibrated(epsilon, cfg, options)
            times.append(time.perf_counter() - started)
        m2 = cal.m2
        if options is None:
            rho = m2.iterations / (2.0 * m2.noise_multiplier**2)  # dp-vi's T Gaussian rounds
            base_rho = rho
            z = {m2.iterations: m2.noise_multiplier}
            trial_eps = cal.plan.stage("train").epsilon
        else:
            rho = m2.trial_rho
            z = {c.iterations: c.noise_multiplier for c in m2.configs}
            trial_eps = m2.single_trial_epsilon
        rows.append(
            {
                "epsilon": epsilon,
                "arm": arm,
                "m2_epsilon": cal.plan.stage("train").epsilon,
                "trial_epsilon": trial_eps,
                "rho": rho,
                "rho_vs_untuned": rho / base_rho,
                "noise_multiplier": {str(t): v for t, v in sorted(z.items())},
                "grid_size": 1 if options is None else len(m2.configs),
                "calibration_seconds": statistics.median(times),
                "m1": repr(cal.m1),
            }
        )
    if len({r["m1"] for r in rows}) != 1:
        raise SystemExit(f"M1 differs between arms at epsilon {epsilon}: not paired")
    return rows


def main() -> None:
    ap = grid.options(__doc__, "epsilon 3, 2 seeds, one corpus")
    ap.add_argument("--seeds", type=int, default=len(SEEDS), help="PHEME seeds (from 500)")
    run = grid.Run(ap, "tune", TITLE, render)
    args, log = run.args, run.log
    check_checkout()
    cfg = current_defaults()
    epsilons = (3.0,) if args.quick else EPSILONS
    seeds = SEEDS[: 2 if args.quick else args.seeds]
    syn_seeds = SYNTHETIC_SEEDS[:1] if args.quick else SYNTHETIC_SEEDS
    corpora = list(SYNTHETIC)[:1] if args.quick else list(SYNTHETIC)
    arms = list(ARMS)
    budgets = [row for e in epsilons for row in budget(e, cfg)]
    log(f"calibrated {len(budgets)} (epsilon, arm) pairs, cold")
    load(corpora)
    log(f"data ready; defaults {cfg}")
    for arm in (UNTUNED, "tune, mean 2"):  # JIT-compile the kernels once, before the fork,
        _job((PHEME, arm, 10.0, cfg, WARMUP_SEED))  # so no arm's timing pays for it
    log("kernels compiled")
    pool = ProcessPoolExecutor(args.workers) if args.workers > 1 else None  # after the data

    # interleaved: for every (epsilon, seed) each arm in turn, so load hits them alike
    jobs = [(PHEME, a, e, cfg, s) for e in epsilons for s in seeds for a in arms]
    res = run_jobs(pool, jobs)
    log(f"PHEME done ({len(jobs)} jobs)")
    pheme = []
    for e in epsilons:
        runs = {a: [res[(PHEME, a, e, s)] for s in seeds] for a in arms}
        for row in compared(runs, UNTUNED, ("npmi", "loglik"), "arm", "vs_untuned", epsilon=e):
            row["timing"] = timing(row["runs"], runs[UNTUNED])
            if row["arm"] != UNTUNED:
                row["chosen"] = chosen_counts(row["runs"])
                row["chosen_iterations"] = marginal_counts(row["runs"], "iterations")
                row["chosen_threshold"] = marginal_counts(row["runs"], "threshold")
            pheme.append(row)

    jobs = [(c, a, e, cfg, s) for c in corpora for e in epsilons for s in syn_seeds for a in arms]
    res = run_jobs(pool, jobs)
    log(f"synthetic done ({len(jobs)} jobs)")
    synthetic = []
    for c in corpora:
        for e in epsilons:
            runs = {a: [res[(c, a, e, s)] for s in syn_seeds] for a in arms}
            rows = compared(runs, UNTUNED, ("cosine",), "arm", "vs_untuned", corpus=c, epsilon=e)
            for row in rows:
                row["timing"] = timing(row["runs"], runs[UNTUNED])
                if row["arm"] != UNTUNED:
                    row["chosen"] = chosen_counts(row["runs"])
                synthetic.append(row)
    if pool:
        pool.shutdown()

    result = {
        "defaults": cfg,
        "arms": ARMS,
        "extra_arms": list(EXTRA_ARMS),
        "epsilons": list(epsilons),
        "seeds": {"pheme": list(seeds), "synthetic": list(syn_seeds)},
        "summary_text": earlier_summary(run),
        "budget": budgets,
        "pheme": pheme,
        "synthetic": synthetic,
    }
    run.save(result)


# ---------------------------------------------------------------------------------------
# report


def _counts(c: dict[str, int] | None) -> str:
    return ", ".join(f"{k}: {v}" for k, v in c.items()) if c else "-"


def render(r: dict[str, Any]) -> str:
    seeds = r["seeds"]
    d = r["defaults"]
    arms = list(r["arms"])
    lines = [
        grid.run_line(r),
        "",
        "Internal, non-DP statistics computed from the documents (PHEME is public research "
        "data). Method: module docstring of `benchmarks/tune.py`. Release pipeline (M1, SAN, "
        f"M2) with the current defaults (untuned dp-vi: T = {d['iterations']}, C = "
        f"{d['clip']:g}, threshold {d['threshold']:g}, kappa = {d['step_decay']:g}, eta = "
        f"{d['eta']:g}, alpha = {d['alpha']:g}, {d['accountant'].upper()}; m1_fraction "
        f"{d['m1_fraction']:g} in every arm; dp-vi without the OOV token). Tuned arms: "
        + "; ".join(f"{a}: `{o}`" for a, o in r["arms"].items() if o is not None)
        + " (default grid: T 20,50,100 x threshold 1,2,3 x C 2; holdout 0.2). "
        + (
            f"The arm(s) {', '.join(r['extra_arms'])} go beyond the brief (a narrower grid). "
            if r.get("extra_arms")
            else ""
        )
        + "Cells: median [min, max] over seeds. 'paired vs untuned': per-seed difference "
        "(arm - untuned; same seed = same DP vocabulary), median [min, max], seeds where it is "
        "positive, two-sided sign-test p (scipy.stats.binomtest). PHEME: k = 5, delta = 1e-5, "
        f"document level; seeds {seeds['pheme']}.",
        "",
    ]
    lines += [
        *summary_text(r),
        "### Budget: what one trial gets",
        "",
        "| total eps | arm | M2 eps | eps of one trial alone | zCDP rho per trial | rho vs "
        "untuned | z by T | calibration s (cold) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in r["budget"]:
        z = ", ".join(f"T={t}: {v:.3g}" for t, v in b["noise_multiplier"].items())
        lines.append(
            f"| {b['epsilon']:g} | {b['arm']} | {b['m2_epsilon']:.3g} | "
            f"{b['trial_epsilon']:.3g} | {b['rho']:.3g} | {b['rho_vs_untuned']:.2f} | {z} | "
            f"{b['calibration_seconds']:.2f} |"
        )
    lines += [
        "",
        "### PHEME",
        "",
        "| total eps | arm | V | NPMI | paired vs untuned: NPMI | fewest top-10 above floor "
        "in a topic | no-signal topics | diversity | held-out LL/token | paired vs untuned: "
        "held-out LL |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["pheme"]:
        s, vs = row["summary"], row.get("vs_untuned", {})
        name = f"**{row['arm']}**" if row["arm"] == UNTUNED else row["arm"]
        lines.append(
            f"| {row['epsilon']:g} | {name} | {_m(s, 'vocabulary', '.0f')} | "
            f"{_m(s, 'npmi', '+.3f')} | {_pair(vs.get('npmi'), '+.3f')} | "
            f"{_m(s, 'min_above_floor', '.0f')} | {_m(s, 'no_signal', '.0f')} | "
            f"{_m(s, 'diversity', '.2f')} | {_m(s, 'loglik', '.3f')} | "
            f"{_pair(vs.get('loglik'), '+.4f')} |"
        )
    lines += ["", "Tuned arms against each other (paired NPMI, same seeds):", ""]
    for e in r["epsilons"]:
        rows = {row["arm"]: row["runs"] for row in r["pheme"] if row["epsilon"] == e}
        for a, b in (
            ("tune, mean 2", "tune, mean 5"),
            ("tune, mean 2, narrow grid", "tune, mean 2"),
        ):
            if a in rows and b in rows:
                lines.append(
                    f"- total epsilon {e:g}, {a} - {b}: "
                    f"{_pair(paired(rows[a], rows[b], 'npmi'), '+.3f')}"
                )
    lines += [
        "",
        "#### Configurations chosen (the `released` configuration; counts over seeds)",
        "",
        "| total eps | arm | configuration: count | T | threshold |",
        "|---|---|---|---|---|",
    ]
    for row in r["pheme"]:
        if row["arm"] != UNTUNED:
            lines.append(
                f"| {row['epsilon']:g} | {row['arm']} | {_counts(row['chosen'])} | "
                f"{_counts(row['chosen_iterations'])} | {_counts(row['chosen_threshold'])} |"
            )
    lines += per_seed(r, "arm", arms, arms)
    chosen = ("chosen", lambda row: _counts(row.get("chosen")))
    lines += synthetic_table(r, "arm", "untuned", chosen)
    lines += [
        "",
        "### Wall time of M2 per release (interleaved in this run)",
        "",
        "M2 training seconds (tuned: split, every trial, scores), median over seeds, and the "
        "per-seed ratio to the untuned run of the same seed: median [min, max]. The number "
        "of trials is random (geometric), so the ratio varies by seed. Calibration (cold) is "
        "in the budget table; M1 and SAN are the same in every arm.",
        "",
        "| data | total eps | " + " | ".join(arms) + " |",
        "|---|---|" + "---|" * len(arms),
    ]
    for label, rows_all in (("PHEME", r["pheme"]), ("synthetic", r["synthetic"])):
        keys = sorted({(row.get("corpus", "PHEME"), row["epsilon"]) for row in rows_all})
        for corpus, e in keys:
            cells = []
            for a in arms:
                row = next(
                    x
                    for x in rows_all
                    if x["arm"] == a and x["epsilon"] == e and x.get("corpus", "PHEME") == corpus
                )
                t = row["timing"]
                cell = f"{t.get('median_seconds', float('nan')):.2f} s"
                if a != UNTUNED and "ratio" in t:
                    q = t["ratio"]
                    cell += f", x{q['median']:.2f} [{q['min']:.2f}, {q['max']:.2f}]"
                cells.append(cell)
            name = "PHEME" if label == "PHEME" else corpus.split(" (")[0]
            lines.append(f"| {name} | {e:g} | " + " | ".join(cells) + " |")
    pooled = {
        a: [
            q
            for row in r["pheme"] + r["synthetic"]
            if row["arm"] == a
            for q in row["timing"].get("ratios", [])
        ]
        for a in arms
        if a != UNTUNED
    }
    lines += ["", "Pooled over all replicates (PHEME and synthetic), ratio tuned / untuned:", ""]
    for a, qs in pooled.items():
        if qs:
            lines.append(
                f"- {a}: median x{statistics.median(qs):.2f}, mean x{np.mean(qs):.2f} "
                f"[{min(qs):.2f}, {max(qs):.2f}] over {len(qs)} paired replicates"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
