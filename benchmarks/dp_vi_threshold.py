"""Default ``threshold`` of the M2 mechanism ``dp-vi``: 1, 1.5 or 2 noise standard deviations?

    .venv/bin/python benchmarks/dp_vi_threshold.py          # dp_vi_threshold_results.md / .json
    .venv/bin/python benchmarks/dp_vi_threshold.py --quick  # smoke test (epsilon 3, 2 seeds)

dp-vi sets every entry of its averaged noisy statistic that is below ``threshold`` times
the entry's noise standard deviation to 0 (``fdptm.mechanisms.dp_vi``). The release default
is 2 (``benchmarks/dp_vi_grid.py`` chose it over 3 and 5). A lower threshold keeps more of
the real signal and lets more pure noise through: a pure-noise entry passes 2 sd with
probability 2.3%, 1.5 sd with 6.7%, 1 sd with 15.9%. One earlier measurement suggested
threshold 1 was better at total epsilon 3 on PHEME (NPMI +0.067 vs -0.017); this script
measures it on fresh seeds, paired.

Method. The release pipeline of ``dp_vi_grid`` (its ``replicate``: PRE, each tweet its own
unit, contribution bounding, a fixed 10% held out, M1 = DP set union and M2 = dp-vi with
the release's own budget split and calibration, SAN, training with
``NoiseSource.internal(seed, stream)``) with the CURRENT library defaults, read from the
library (``fdptm.request.default`` and the registry's dp-vi options: T = 100, C = 2,
kappa = 0.6, eta = 0.01, alpha = 0.1, RDP, m1_fraction 0.5; dp-vi does not train on SAN's
OOV token, as the registry's ``trains_on_oov`` says), changing only ``threshold``.

- PHEME (``pheme_clean.json``, document level, k = 5, delta = 1e-5): total epsilon 1, 3, 10
  x threshold 1, 1.5, 2 on the fresh seeds 300-307 (never used by earlier benchmarks).
  Seed s is one replicate of the whole pipeline: M1's noise is stream 1 of s, M2's stream
  2 of s, and the threshold is post-processing inside M2, so for one seed every threshold
  sees the same DP vocabulary and the same noise draws. The comparison is therefore
  PAIRED: the per-seed difference NPMI(threshold) - NPMI(threshold 2), its median, the
  number of seeds where it is positive, and a two-sided sign test
  (``scipy.stats.binomtest`` on the non-zero differences; with 8 seeds the smallest
  possible p is 2/256 = 0.008, and 7 of 8 gives 0.07). Metrics as in ``dp_vi_grid``
  (``fdptm.evaluation``): gensim NPMI of each topic's top-10 words above its floor against
  all 5,698 preprocessed tweets, the fewest top-10 words above the floor in a topic,
  no-signal topics, topic diversity (top 25), held-out document-completion log-likelihood
  per token (comparable within one seed, whose vocabulary every threshold shares, so
  only its paired difference is reported).
- Non-private references on the same DP vocabularies (CGS and gensim's LdaModel,
  ``dp_vi_grid.reference_models``) on seeds 300-302, for scale.
- The synthetic LDA corpora of ``dp_vi_grid.SYNTHETIC`` (k = 5, one document per unit,
  same pipeline): matched cosine to the true topics (higher is better) for the same
  thresholds at total epsilon 1, 3, 10 on seeds 300-303, with the paired difference.

Run from a git worktree, the editable install of the main checkout would otherwise supply
``fdptm.tasks`` (and flows, storage): the script puts its own checkout first, so the code
measured is the code next to it (the report names its commit).

Everything here reads the documents: the tables are internal, non-DP statistics (PHEME is
public research data).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # one thread a worker, before numpy and numba load (see dp_vi_grid)
    from harness import one_thread

    one_thread()

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(HERE))

import fdptm  # noqa: E402

if Path(fdptm.__file__).resolve().parent == ROOT / "fdptm":
    # fdptm.tasks / flows / storage live beside fdptm/ (pyproject's package-dir); an
    # editable install maps them to its own checkout, so look in this one first.
    fdptm.__path__.append(str(ROOT))

import numpy as np  # noqa: E402
from dp_vi_grid import (  # noqa: E402
    SYNTHETIC,
    Evaluator,
    Run,
    _m,
    load,
    options,
    run_line,
    summary,
)
from harness import stem  # noqa: E402
from scipy.stats import binomtest  # noqa: E402

TITLE = "dp-vi threshold: 1, 1.5 or 2 noise standard deviations (paired seeds)"
EPSILONS = (1.0, 3.0, 10.0)
THRESHOLDS = (1.0, 1.5, 2.0)
BASELINE = 2.0
SEEDS = (300, 301, 302, 303, 304, 305, 306, 307)
REFERENCE_SEEDS = (300, 301, 302)
SYNTHETIC_SEEDS = (300, 301, 302, 303)
PHEME = "pheme"


def current_defaults() -> dict[str, Any]:
    """The release's defaults for dp-vi, read from the library (not ``dp_vi_grid.DEFAULTS``,
    which records the defaults before that benchmark)."""
    import fdptm.tasks
    from fdptm.mechanisms.registry import mechanism
    from fdptm.request import default

    for module in (fdptm, fdptm.tasks):  # the code measured is this checkout's
        if not Path(module.__file__).resolve().is_relative_to(ROOT):
            raise SystemExit(f"{module.__name__} imported from {module.__file__}, not {ROOT}")
    m = mechanism("dp-vi")
    options = m.options()
    cfg = {k: options[k] for k in ("clip", "threshold", "step_decay", "eta", "alpha")}
    cfg["accountant"] = options["accountant"]
    cfg["iterations"] = default("iterations")
    cfg["m1_fraction"] = default("m1_fraction")
    if m.trains_on_oov:
        raise SystemExit("dp-vi trains on the OOV token again: use replicate(oov=True)")
    return cfg


KIND = "dp-vi, OOV dropped"
"""``dp_vi_grid._job``'s kind for a replicate that trains dp-vi without SAN's OOV token,
which is what a release does now (``Mechanism.train`` with ``trains_on_oov=False``; same
noise stream, same topic-word matrix up to float rounding)."""


def npmi_of(run: dict) -> float:
    """A replicate's NPMI; a refused release (vocabulary < k) scores -1, as in ``summary``."""
    return -1.0 if "failed" in run else float(run["npmi"])


def paired(runs: list[dict], base: list[dict], key: str) -> dict[str, Any]:
    """Per-seed differences run - base of ``key`` (same seeds, in order) and a sign test."""
    if key == "npmi":
        diffs = [npmi_of(a) - npmi_of(b) for a, b in zip(runs, base, strict=True)]
    else:
        diffs = [
            float(a[key]) - float(b[key])
            for a, b in zip(runs, base, strict=True)
            if key in a and key in b and np.isfinite(a[key]) and np.isfinite(b[key])
        ]
    if not diffs:
        return {"n": 0}
    pos = sum(d > 0 for d in diffs)
    neg = sum(d < 0 for d in diffs)
    p = binomtest(pos, pos + neg, 0.5).pvalue if pos + neg else 1.0
    return {
        "n": len(diffs),
        "diffs": diffs,
        "median": float(np.median(diffs)),
        "min": min(diffs),
        "max": max(diffs),
        "positive": pos,
        "negative": neg,
        "sign_p": float(p),
    }


def compared(
    runs: dict, base: Any, keys: tuple[str, ...], arm: str, versus: str = "vs_baseline", **fields
) -> list[dict[str, Any]]:
    """A row per arm of ``runs`` (arm -> its replicates, seed by seed): ``fields``, the arm
    (as ``arm``), its replicates and their ``summary``, and, for an arm other than ``base``,
    the ``paired`` differences of ``keys`` to ``base``'s replicates (as ``versus``)."""
    rows = []
    for a, replicates in runs.items():
        row = {**fields, arm: a, "runs": replicates, "summary": summary(replicates)}
        if a != base:
            row[versus] = {k: paired(replicates, runs[base], k) for k in keys}
        rows.append(row)
    return rows


def earlier_summary(run: Run) -> str | None:
    """The hand-written summary of the results a full run replaces (kept across re-runs)."""
    path = stem(run.name, run.out).with_suffix(".json")
    if run.args.quick or not path.exists():
        return None
    return json.loads(path.read_text()).get("summary_text")


def main() -> None:
    ap = options(__doc__, "epsilon 3, 2 seeds, one corpus")
    ap.add_argument("--seeds", type=int, default=len(SEEDS), help="PHEME seeds (from 300)")
    run = Run(ap, "dp_vi_threshold", TITLE, render)
    args, log = run.args, run.log
    cfg0 = current_defaults()
    epsilons = (3.0,) if args.quick else EPSILONS
    seeds = SEEDS[: 2 if args.quick else args.seeds]
    ref_seeds = REFERENCE_SEEDS[:1] if args.quick else REFERENCE_SEEDS
    syn_seeds = SYNTHETIC_SEEDS[:1] if args.quick else SYNTHETIC_SEEDS
    corpora = list(SYNTHETIC)[:1] if args.quick else list(SYNTHETIC)
    cfgs = {t: {**cfg0, "threshold": t} for t in THRESHOLDS}
    load(corpora)
    log(f"data ready; defaults {cfg0}")
    ev = Evaluator(args.workers)  # forks after the data is loaded: workers share it

    # PHEME: every (epsilon, threshold, seed) in one batch so both workers stay busy
    jobs = [(PHEME, KIND, "dp", e, cfgs[t], s) for e in epsilons for t in THRESHOLDS for s in seeds]
    jobs += [(PHEME, "reference", "dp", e, cfg0, s) for e in epsilons for s in ref_seeds]
    ev.run(jobs)
    log(f"PHEME done ({len(jobs)} jobs)")
    pheme = []
    for e in epsilons:
        runs = {t: ev.configs(PHEME, "dp", e, [cfgs[t]], seeds, KIND)[0] for t in THRESHOLDS}
        pheme += compared(runs, BASELINE, ("npmi", "loglik"), "threshold", epsilon=e)
    references = []
    for e in epsilons:
        res = ev.configs(PHEME, "dp", e, [cfg0], ref_seeds, "reference")[0]
        for model in ("cgs", "gensim"):
            s = summary([r.get(model, r) for r in res])
            references.append({"epsilon": e, "model": model, "summary": s})

    # synthetic LDA: matched cosine to the truth
    jobs = [
        (c, KIND, "dp", e, cfgs[t], s)
        for c in corpora
        for e in epsilons
        for t in THRESHOLDS
        for s in syn_seeds
    ]
    ev.run(jobs)
    log(f"synthetic done ({len(jobs)} jobs)")
    synthetic = []
    for c in corpora:
        for e in epsilons:
            runs = {t: ev.configs(c, "dp", e, [cfgs[t]], syn_seeds, KIND)[0] for t in THRESHOLDS}
            synthetic += compared(runs, BASELINE, ("cosine",), "threshold", corpus=c, epsilon=e)

    if ev.pool:
        ev.pool.shutdown()
    result = {
        "defaults": cfg0,
        "thresholds": list(THRESHOLDS),
        "baseline": BASELINE,
        "epsilons": list(epsilons),
        "seeds": {"pheme": list(seeds), "reference": list(ref_seeds), "synthetic": list(syn_seeds)},
        "summary_text": earlier_summary(run),
        "pheme": pheme,
        "references": references,
        "synthetic": synthetic,
    }
    run.save(result)


# ---------------------------------------------------------------------------------------
# report


def _pair(p: dict | None, fmt: str) -> str:
    if not p or not p.get("n"):
        return "-"
    return (
        f"{format(p['median'], fmt)} [{format(p['min'], fmt)}, {format(p['max'], fmt)}]; "
        f"{p['positive']}/{p['n']} > 0, p = {p['sign_p']:.3g}"
    )


def summary_text(r: dict[str, Any]) -> list[str]:
    """The record's hand-written summary, its headings from ### (older ones started at ##)."""
    text = (r.get("summary_text") or "").rstrip()
    levels = [len(h) for h in re.findall(r"^(#+) ", text, flags=re.M)]
    shift = "#" * max(0, 3 - min(levels, default=3))
    return [re.sub(r"^#", shift + "#", text, flags=re.M), ""] if text else []


def npmi_cell(run: dict[str, Any]) -> str:
    """A replicate's NPMI, and the configuration a tuned one chose; 'refused' for a refusal."""
    if "failed" in run:
        return "refused"
    chosen = run.get("chosen")
    return f"{run['npmi']:+.3f}" + (
        f" (T={chosen['iterations']}, thr={chosen['threshold']:g})" if chosen else ""
    )


def per_seed(r: dict[str, Any], arm: str, arms: list, labels: list[str]) -> list[str]:
    """PHEME's NPMI per (epsilon, seed): a column per ``arms`` value of the rows' ``arm``."""
    lines = [
        "",
        "#### PHEME NPMI per seed",
        "",
        "| total eps | seed | V | " + " | ".join(labels) + " |",
        "|---|---|---|" + "---|" * len(arms),
    ]
    for e in r["epsilons"]:
        rows = {row[arm]: row["runs"] for row in r["pheme"] if row["epsilon"] == e}
        for i, seed in enumerate(r["seeds"]["pheme"]):
            v = rows[arms[0]][i].get("vocabulary", "-")
            cells = [npmi_cell(rows[a][i]) for a in arms]
            lines.append(f"| {e:g} | {seed} | {v} | " + " | ".join(cells) + " |")
    return lines


def synthetic_table(
    r: dict[str, Any], arm: str, base: str, last: tuple[str, Callable[[dict], str]]
) -> list[str]:
    """The synthetic corpora's section: per corpus, epsilon and the rows' ``arm`` the matched
    cosine, its paired difference to ``base``, NPMI, the weakest topic and ``last``'s column."""
    lines = [
        "",
        "### Synthetic LDA (dp_vi_grid.SYNTHETIC; k = 5, one document per unit, same pipeline)",
        "",
        "Matched cosine to the true topics (estimate embedded in the full vocabulary, words M1 "
        f"did not select at 0; higher is better); seeds {r['seeds']['synthetic']}.",
        "",
        f"| corpus | total eps | {arm} | V | cosine to truth | paired vs {base}: cosine | NPMI | "
        f"fewest top-10 above floor | {last[0]} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["synthetic"]:
        s, vs = row["summary"], row.get("vs_baseline", row.get("vs_untuned", {}))
        name = row[arm] if isinstance(row[arm], str) else format(row[arm], "g")
        lines.append(
            f"| {row['corpus']} | {row['epsilon']:g} | {name} | "
            f"{_m(s, 'vocabulary', '.0f')} | {_m(s, 'cosine', '.3f')} | "
            f"{_pair(vs.get('cosine'), '+.3f')} | {_m(s, 'npmi', '+.3f')} | "
            f"{_m(s, 'min_above_floor', '.0f')} | {last[1](row)} |"
        )
    return lines


def render(r: dict[str, Any]) -> str:
    seeds = r["seeds"]
    d = r["defaults"]
    lines = [
        run_line(r),
        "",
        "Internal, non-DP statistics computed from the documents (PHEME is public research "
        "data). Method: module docstring of `benchmarks/dp_vi_threshold.py`. Release "
        f"pipeline (M1, SAN, M2) with the current defaults (T = {d['iterations']}, "
        f"C = {d['clip']:g}, kappa = {d['step_decay']:g}, eta = {d['eta']:g}, "
        f"alpha = {d['alpha']:g}, {d['accountant'].upper()}, m1_fraction "
        f"{d['m1_fraction']:g}, dp-vi without the OOV token), only the threshold changed. "
        "Cells: median [min, max] over seeds. 'paired vs 2': per-seed difference "
        "(threshold - threshold 2; same seed = same DP vocabulary and noise stream), "
        "median [min, max], seeds where it is positive, two-sided sign-test p "
        "(scipy.stats.binomtest). PHEME: k = 5, delta = 1e-5, document level; seeds "
        f"{seeds['pheme']}.",
        "",
        *summary_text(r),
        "### PHEME",
        "",
        "| total eps | threshold | V | z | NPMI | paired vs 2: NPMI | fewest top-10 above "
        "floor in a topic | no-signal topics | diversity | paired vs 2: held-out LL/token |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["pheme"]:
        s, vs = row["summary"], row.get("vs_baseline", {})
        name = f"**{row['threshold']:g}** (current)" if row["threshold"] == r["baseline"] else ""
        lines.append(
            f"| {row['epsilon']:g} | {name or format(row['threshold'], 'g')} | "
            f"{_m(s, 'vocabulary', '.0f')} | {_m(s, 'noise_multiplier', '.3g')} | "
            f"{_m(s, 'npmi', '+.3f')} | {_pair(vs.get('npmi'), '+.3f')} | "
            f"{_m(s, 'min_above_floor', '.0f')} | {_m(s, 'no_signal', '.0f')} | "
            f"{_m(s, 'diversity', '.2f')} | {_pair(vs.get('loglik'), '+.4f')} |"
        )
    lines += ["", "Paired NPMI, threshold 1 - threshold 1.5 (same seeds):", ""]
    for e in r["epsilons"]:
        rows = {row["threshold"]: row["runs"] for row in r["pheme"] if row["epsilon"] == e}
        if 1.0 in rows and 1.5 in rows:
            diff = paired(rows[1.0], rows[1.5], "npmi")
            lines.append(f"- total epsilon {e:g}: {_pair(diff, '+.3f')}")
    lines += [
        "",
        f"Non-private references on the same DP vocabularies (seeds {seeds['reference']}), "
        "for scale:",
        "",
        "| total eps | model, NOT private | V | NPMI | fewest top-10 above floor | diversity |",
        "|---|---|---|---|---|---|",
    ]
    for ref in r["references"]:
        s = ref["summary"]
        lines.append(
            f"| {ref['epsilon']:g} | {ref['model']} | {_m(s, 'vocabulary', '.0f')} | "
            f"{_m(s, 'npmi', '+.3f')} | {_m(s, 'min_above_floor', '.0f')} | "
            f"{_m(s, 'diversity', '.2f')} |"
        )
    ts = r["thresholds"]
    lines += per_seed(r, "threshold", ts, [f"threshold {t:g}" for t in ts])
    no_signal = ("no-signal topics", lambda row: _m(row["summary"], "no_signal", ".0f"))
    lines += synthetic_table(r, "threshold", "2", no_signal)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
