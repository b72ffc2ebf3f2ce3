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

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("GIT_OPTIONAL_LOCKS", "0")  # `git status` in machine() writes nothing

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(HERE))

import fdptm  # noqa: E402

if Path(fdptm.__file__).resolve().parent == ROOT / "fdptm":
    # fdptm.tasks / flows / storage live beside fdptm/ (pyproject's package-dir); an
    # editable install maps them to its own checkout, so look in this one first.
    fdptm.__path__.append(str(ROOT))

import dp_vi_grid as grid  # noqa: E402
import numpy as np  # noqa: E402
from dp_vi_grid import (  # noqa: E402
    SYNTHETIC,
    Evaluator,
    load_pheme,
    load_synthetic,
    summary,
)
from scipy.stats import binomtest  # noqa: E402

OUT = HERE / "dp_vi_threshold"
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


def machine() -> dict[str, str]:
    def sh(cmd: str) -> str:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()

    out = grid.machine()
    out["date_local"] = sh("date")
    out["commit"] = sh(f"git -C {ROOT} rev-parse --short HEAD")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="epsilon 3, 2 seeds, one corpus")
    ap.add_argument("--seeds", type=int, default=len(SEEDS), help="PHEME seeds (from 300)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default=str(OUT), help="output stem (+ _results.md / .json)")
    ap.add_argument("--render", action="store_true", help="re-render the .md from the .json")
    args = ap.parse_args()
    out_md, out_json = Path(args.out + "_results.md"), Path(args.out + "_results.json")
    if args.render:
        out_md.write_text(render(json.loads(out_json.read_text())))
        return
    started = time.perf_counter()
    at_start = machine()
    cfg0 = current_defaults()
    epsilons = (3.0,) if args.quick else EPSILONS
    seeds = SEEDS[: 2 if args.quick else args.seeds]
    ref_seeds = REFERENCE_SEEDS[:1] if args.quick else REFERENCE_SEEDS
    syn_seeds = SYNTHETIC_SEEDS[:1] if args.quick else SYNTHETIC_SEEDS
    corpora = list(SYNTHETIC)[:1] if args.quick else list(SYNTHETIC)
    cfgs = {t: {**cfg0, "threshold": t} for t in THRESHOLDS}

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f}s] {msg}", flush=True)

    grid._DATA[PHEME] = load_pheme()
    for c in corpora:
        grid._DATA[c] = load_synthetic(c)
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
        for t in THRESHOLDS:
            row = {
                "epsilon": e,
                "threshold": t,
                "runs": runs[t],
                "summary": summary(runs[t]),
            }
            if t != BASELINE:
                row["vs_baseline"] = {
                    k: paired(runs[t], runs[BASELINE], k) for k in ("npmi", "loglik")
                }
            pheme.append(row)
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
            for t in THRESHOLDS:
                row = {
                    "corpus": c,
                    "epsilon": e,
                    "threshold": t,
                    "runs": runs[t],
                    "summary": summary(runs[t]),
                }
                if t != BASELINE:
                    row["vs_baseline"] = {"cosine": paired(runs[t], runs[BASELINE], "cosine")}
                synthetic.append(row)

    command = "python benchmarks/dp_vi_threshold.py" + (" --quick" if args.quick else "")
    if not args.quick and args.seeds != len(SEEDS):
        command += f" --seeds {args.seeds}"
    result = {
        "command": command,
        "machine": {**machine(), **{k: at_start[k] for k in ("code", "commit", "date")}},
        "date_local_start": at_start["date_local"],
        "load_at_start": at_start["load"],
        "seconds": time.perf_counter() - started,
        "workers": args.workers,
        "defaults": cfg0,
        "thresholds": list(THRESHOLDS),
        "baseline": BASELINE,
        "epsilons": list(epsilons),
        "seeds": {"pheme": list(seeds), "reference": list(ref_seeds), "synthetic": list(syn_seeds)},
        "summary_text": None,
        "pheme": pheme,
        "references": references,
        "synthetic": synthetic,
    }
    if out_json.exists() and not args.quick:  # keep a hand-written summary across re-runs
        result["summary_text"] = json.loads(out_json.read_text()).get("summary_text")
    out_json.write_text(json.dumps(result, indent=1, default=str))
    out_md.write_text(render(result))
    log(f"wrote {out_md} and {out_json}")
    if ev.pool:
        ev.pool.shutdown()


# ---------------------------------------------------------------------------------------
# report


def _m(s: dict, key: str, fmt: str) -> str:
    if key not in s:
        return "-"
    v = s[key]
    med = format(v["median"], fmt)
    if v["min"] == v["max"]:
        return med
    return f"{med} [{format(v['min'], fmt)}, {format(v['max'], fmt)}]"


def _pair(p: dict | None, fmt: str) -> str:
    if not p or not p.get("n"):
        return "-"
    return (
        f"{format(p['median'], fmt)} [{format(p['min'], fmt)}, {format(p['max'], fmt)}]; "
        f"{p['positive']}/{p['n']} > 0, p = {p['sign_p']:.3g}"
    )


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    seeds = r["seeds"]
    d = r["defaults"]
    lines = [
        "# dp-vi threshold: 1, 1.5 or 2 noise standard deviations (paired seeds)",
        "",
        f"Command: `{r['command']}` (from the repository root, with `.venv/bin/python`) · "
        f"date {m['date_local']} · {m['cpu']} · {m['cores']} cores, shared "
        f"({r['workers']} worker processes; load average at the start {r['load_at_start']}, "
        f"at the end {m['load']}) · Python {m['python']} · run time "
        f"{r['seconds'] / 60:.1f} min · code {m['code']}",
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
    ]
    if r.get("summary_text"):
        lines += [r["summary_text"].rstrip(), ""]
    lines += [
        "## PHEME",
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
    lines += ["", "### PHEME NPMI per seed", ""]
    ts = r["thresholds"]
    lines += [
        "| total eps | seed | V | " + " | ".join(f"threshold {t:g}" for t in ts) + " |",
        "|---|---|---|" + "---|" * len(ts),
    ]
    for e in r["epsilons"]:
        rows = {row["threshold"]: row["runs"] for row in r["pheme"] if row["epsilon"] == e}
        for i, seed in enumerate(seeds["pheme"]):
            v = rows[ts[0]][i].get("vocabulary", "-")
            cells = [
                "refused" if "failed" in rows[t][i] else f"{rows[t][i]['npmi']:+.3f}" for t in ts
            ]
            lines.append(f"| {e:g} | {seed} | {v} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Synthetic LDA (dp_vi_grid.SYNTHETIC; k = 5, one document per unit, same pipeline)",
        "",
        "Matched cosine to the true topics (estimate embedded in the full vocabulary, words M1 "
        f"did not select at 0; higher is better); seeds {seeds['synthetic']}.",
        "",
        "| corpus | total eps | threshold | V | cosine to truth | paired vs 2: cosine | "
        "NPMI | fewest top-10 above floor | no-signal topics |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["synthetic"]:
        s, vs = row["summary"], row.get("vs_baseline", {})
        lines.append(
            f"| {row['corpus']} | {row['epsilon']:g} | {row['threshold']:g} | "
            f"{_m(s, 'vocabulary', '.0f')} | {_m(s, 'cosine', '.3f')} | "
            f"{_pair(vs.get('cosine'), '+.3f')} | {_m(s, 'npmi', '+.3f')} | "
            f"{_m(s, 'min_above_floor', '.0f')} | {_m(s, 'no_signal', '.0f')} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
