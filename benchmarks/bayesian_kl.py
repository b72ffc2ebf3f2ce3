"""KL-divergence vs epsilon of the Bayesian public-prior mechanism and the paper's baselines.

    pip install -e .
    python benchmarks/bayesian_kl.py           # writes benchmarks/bayesian_kl_results.{md,json}
    python benchmarks/bayesian_kl.py --quick   # a short run (2 seeds, 200,000 synthetic
                                               # users), printed only unless --out is given

Reproduces the comparison of ``papers/bayesian-dp-ngrams.txt`` (Figure 1, section 4.4:
"KL-divergence from the private distribution vs epsilon"; abstract: "up to 85% reduction in
KL-divergence compared to previously known mechanisms at epsilon equals 0.1") with the
*sound* global sensitivity of ``fdptm.mechanisms.bayesian_prior``, next to the paper's
brute-force (local, claimed-unproven) variant and its two Laplace baselines (section 4.2).

Metric: KL(p || theta), p the normalised, unclamped counts of all private units over the
public vocabulary V, theta the mechanism's distribution over V; delta = 1e-5. Each cell is
the median over seeds, with the range. Two datasets:

1. PHEME (``../shared/data/pheme/pheme_clean.json``, one tweet = one privacy unit): per seed a
   random 10% of the tweets is public (its counts are alpha, its words are V), the rest private.
2. Synthetic: 1,000,000 private users, Zipf-Mandelbrot words (exponent 1.1 over 80,000 word
   types, about 12 tokens a user); the public distribution is the private one times
   exp(N(0, 1)) per word, renormalised, and the public counts come from 50,000 separate
   users drawn from it; V = the words those public users used (about 44,000).

Noise comes from ``NoiseSource.internal`` (numpy): this is a utility benchmark, nothing is
released. Everything below that is "chosen on this data" (best fixed S, the smoothing weight
of the Laplace baselines) is chosen non-privately, with knowledge of p, and says so.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, save  # noqa: E402

from fdptm.mechanisms import bayesian_prior as bp  # noqa: E402
from fdptm.privacy.noise import NoiseSource  # noqa: E402

TITLE = "Bayesian public-prior mechanism: KL-divergence vs epsilon"
PHEME = HERE.parent.parent / "shared" / "data" / "pheme" / "pheme_clean.json"

DELTA = 1e-5
EPSILONS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
S_GRID = (0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
CLIP = 1  # C: the paper uses 1 below 1M users (section 4.3); see the synthetic note
RHO_CANDIDATES = tuple(float(x) for x in np.round(np.linspace(0.0, 1.0, 21), 2))
LAMBDAS = (1e-5, 1e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99)
VALIDATION = 0.10  # share of private units for report-noisy-min (section 4.3)
COUNT_SHARE = 0.2  # share of epsilon the sound modified Laplace spends on a DP total count
W_PERCENTILE = 95  # W from the public units: a function of public data only

SEEDS_FULL = (0, 1, 2, 3, 4)
SEEDS_QUICK = (0, 1)
SYNTH_USERS_FULL = 1_000_000
SYNTH_USERS_QUICK = 200_000
SYNTH_PUBLIC_USERS = 50_000
SYNTH_TYPES = 80_000
SYNTH_EXPONENT = 1.1
SYNTH_SHIFT = 2.7
SYNTH_PERTURB = 1.0
SYNTH_MEAN_TOKENS = 11  # tokens per user: 1 + Poisson(11)


# --------------------------------------------------------------------------- data


@dataclass
class Dataset:
    name: str
    counts: bp.UnitCounts  # private units, raw (unclamped) counts over V
    n_units: int
    alpha: np.ndarray  # public counts over V
    w_distinct: int  # W for the Bayesian mechanism: distinct words kept per unit
    w_tokens: int  # W for the Laplace baselines: counts a unit contributes overall
    info: dict

    def private_distribution(self) -> np.ndarray:
        c = np.bincount(self.counts.word, weights=self.counts.count, minlength=len(self.alpha))
        return c / c.sum()


def _unit_counts(unit: np.ndarray, word: np.ndarray, n_words: int) -> bp.UnitCounts:
    """One entry per (unit, word) with its count, from token-level (unit, word) arrays."""
    key = unit.astype(np.int64) * n_words + word
    keys, counts = np.unique(key, return_counts=True)
    return bp.UnitCounts(keys // n_words, keys % n_words, counts.astype(np.int64), n_words)


def _w_from_public(pub_unit: np.ndarray, pub_word: np.ndarray) -> tuple[int, int]:
    """(W distinct, W tokens): the W_PERCENTILE-th percentile over the public units (>= 1)."""
    tokens = np.bincount(pub_unit)
    pairs = np.unique(pub_unit.astype(np.int64) * (int(pub_word.max()) + 1) + pub_word)
    distinct = np.bincount(pairs // (int(pub_word.max()) + 1), minlength=len(tokens))
    used = tokens > 0
    w_d = max(1, int(np.ceil(np.percentile(distinct[used], W_PERCENTILE))))
    w_t = max(1, int(np.ceil(np.percentile(tokens[used], W_PERCENTILE))))
    return w_d, w_t


def pheme(seed: int, docs: list[list[str]]) -> Dataset:
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(101,)))
    order = rng.permutation(len(docs))
    n_pub = round(0.1 * len(docs))
    public = [docs[i] for i in order[:n_pub]]
    private = [docs[i] for i in order[n_pub:]]
    vocab = {w: i for i, w in enumerate(sorted({w for d in public for w in d}))}
    n_words = len(vocab)
    alpha = np.zeros(n_words)
    pub_unit, pub_word = [], []
    for u, d in enumerate(public):
        for w in d:
            alpha[vocab[w]] += 1
            pub_unit.append(u)
            pub_word.append(vocab[w])
    unit, word = [], []
    total = 0
    for u, d in enumerate(private):
        total += len(d)
        for w in d:
            if w in vocab:
                unit.append(u)
                word.append(vocab[w])
    counts = _unit_counts(np.array(unit), np.array(word), n_words)
    w_d, w_t = _w_from_public(np.array(pub_unit), np.array(pub_word))
    info = {
        "public_units": len(public),
        "private_units": len(private),
        "V": n_words,
        "private_tokens": total,
        "private_tokens_in_V": len(unit),
        "coverage": len(unit) / total,
        "public_tokens": int(alpha.sum()),
    }
    return Dataset("pheme", counts, len(private), alpha, w_d, w_t, info)


def synthetic(users: int) -> Dataset:
    rng = np.random.default_rng(2024)
    ranks = np.arange(1, SYNTH_TYPES + 1)
    p = (ranks + SYNTH_SHIFT) ** -SYNTH_EXPONENT
    p /= p.sum()
    q = p * np.exp(SYNTH_PERTURB * rng.standard_normal(SYNTH_TYPES))
    q /= q.sum()
    pub_len = 1 + rng.poisson(SYNTH_MEAN_TOKENS, SYNTH_PUBLIC_USERS)
    pub_tok = rng.choice(SYNTH_TYPES, size=int(pub_len.sum()), p=q)
    pub_unit_tok = np.repeat(np.arange(SYNTH_PUBLIC_USERS), pub_len)
    types = np.unique(pub_tok)  # V: the public words, sorted
    index = np.full(SYNTH_TYPES, -1, dtype=np.int64)
    index[types] = np.arange(len(types))
    n_words = len(types)
    alpha = np.bincount(index[pub_tok], minlength=n_words).astype(float)
    w_d, w_t = _w_from_public(pub_unit_tok, index[pub_tok])
    lens = 1 + rng.poisson(SYNTH_MEAN_TOKENS, users)
    tok = rng.choice(SYNTH_TYPES, size=int(lens.sum()), p=p)
    unit = np.repeat(np.arange(users), lens)
    mapped = index[tok]
    inside = mapped >= 0
    counts = _unit_counts(unit[inside], mapped[inside], n_words)
    info = {
        "public_units": SYNTH_PUBLIC_USERS,
        "private_units": users,
        "V": n_words,
        "word_types": SYNTH_TYPES,
        "private_tokens": int(lens.sum()),
        "private_tokens_in_V": int(inside.sum()),
        "coverage": float(inside.mean()),
        "public_tokens": int(alpha.sum()),
        "generator": (
            f"p_k ~ (k + {SYNTH_SHIFT})^-{SYNTH_EXPONENT} over {SYNTH_TYPES:,} types; public "
            f"q ~ p exp({SYNTH_PERTURB} z), z ~ N(0, 1); 1 + Poisson({SYNTH_MEAN_TOKENS}) "
            "tokens a user; seed 2024"
        ),
    }
    return Dataset("synthetic", counts, users, alpha, w_d, w_t, info)


# --------------------------------------------------------------------------- helpers


def kl(p: np.ndarray, theta: np.ndarray) -> float:
    """KL(p || theta) in nats; infinite when theta is 0 where p > 0."""
    m = p > 0
    t = theta[m]
    if np.any(t <= 0):
        return math.inf
    return float(np.sum(p[m] * (np.log(p[m]) - np.log(t))))


def bound_total(counts: bp.UnitCounts, total: int, generator: np.random.Generator):
    """Each unit keeps at most ``total`` counts overall (its entries in random order).

    Returns (kept counts per entry, entries' units, entries' words): a function of the unit
    alone, so one unit moves the kept counts by at most ``total`` in l1.
    """
    key = generator.random(len(counts.unit))
    order = np.lexsort((key, counts.unit))
    unit, word, cnt = counts.unit[order], counts.word[order], counts.count[order]
    csum = np.cumsum(cnt)
    before = csum - cnt
    starts = np.flatnonzero(np.r_[True, unit[1:] != unit[:-1]])
    before = before - np.repeat(before[starts], np.diff(np.r_[starts, len(unit)]))
    kept = np.clip(total - before, 0, cnt)
    return kept.astype(float), unit, word


def threshold(noisy: np.ndarray) -> np.ndarray | None:
    """max(x, 0), normalised; None when everything is <= 0."""
    x = np.maximum(noisy, 0.0)
    s = x.sum()
    return x / s if s > 0 else None


def smooth_oracle(theta: np.ndarray, base: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """min over LAMBDAS of KL(p || (1 - l) theta + l base): post-processing, l chosen with p."""
    return min((kl(p, (1 - lam) * theta + lam * base), lam) for lam in LAMBDAS)


def paper_logits(c: np.ndarray, n: np.ndarray, scale: float) -> np.ndarray:
    """The paper's f: w * (log(c + 1) - mean), centring before weighting (eqs. 2, 5)."""
    y = np.log1p(c)
    return bp.weights(n, scale, CLIP) * (y - y.mean())


# --------------------------------------------------------------------------- one seed


def prepare(ds: Dataset, seed: int) -> dict:
    """Contribution bounding and everything that depends on the data only (not on epsilon)."""
    n_words = len(ds.alpha)
    gen = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
    bounded = ds.counts.bounded(CLIP, ds.w_distinct, gen)
    c_b, n_b = bounded.totals()
    kept, kept_unit, kept_word = bound_total(ds.counts, ds.w_tokens, gen)
    t0 = time.perf_counter()
    gamma = {s: bp.brute_force_sensitivity(bounded, s, CLIP) for s in S_GRID}
    bf_seconds = time.perf_counter() - t0
    # Baseline 2 literally: sum_n w_n (c~^n - alpha~) + alpha~, w_n = |c^n| / |c|.
    alpha_tilde = ds.alpha / ds.alpha.sum()
    total = float(kept.sum())
    per_unit = np.bincount(kept_unit, weights=kept, minlength=ds.n_units)
    w_n = per_unit / total
    c_tilde = kept / np.maximum(per_unit[kept_unit], 1.0)  # each unit's normalised counts
    summed = np.bincount(kept_word, weights=w_n[kept_unit] * c_tilde, minlength=n_words)
    f_paper = summed - alpha_tilde * w_n[per_unit > 0].sum() + alpha_tilde
    c_lap = np.bincount(kept_word, weights=kept, minlength=n_words)
    cancel = float(np.abs(f_paper - c_lap / total).max())
    return {
        "bounded": bounded,
        "c_b": c_b,
        "n_b": n_b,
        "paper": {s: paper_logits(c_b, n_b, s) for s in S_GRID},
        "gamma": gamma,
        "bf_seconds": bf_seconds,
        "c_lap": c_lap,
        "total": total,
        "f_paper": f_paper,
        "cancel": cancel,
        "kept_units_cut": int(
            (
                np.bincount(kept_unit, weights=kept)
                < np.bincount(ds.counts.unit, weights=ds.counts.count)
            ).sum()
        ),
        "bounded_units_cut": int(
            (
                np.bincount(bounded.unit, minlength=ds.n_units)
                < np.bincount(ds.counts.unit, minlength=ds.n_units)
            ).sum()
        ),
    }


def run_seed(ds: Dataset, prep: dict, seed: int, select: bool = True) -> tuple[dict, dict]:
    """KL of every mechanism at every epsilon for one seed: ({key: {eps: kl}}, extras)."""
    p = ds.private_distribution()
    n_words = len(ds.alpha)
    prior = bp.prior_logits(ds.alpha)
    prior_log = np.log(ds.alpha)  # alpha >= 1 on V (V = the public words): no +1 needed
    alpha_tilde = ds.alpha / ds.alpha.sum()
    uniform = np.full(n_words, 1.0 / n_words)
    out: dict[str, dict] = {}
    extra: dict[str, dict] = {}

    def put(key: str, eps: float, value: float, **more) -> None:
        out.setdefault(key, {})[eps] = value
        if more:
            extra.setdefault(key, {})[eps] = more

    bounded, c_lap, total, f_paper = prep["bounded"], prep["c_lap"], prep["total"], prep["f_paper"]
    w_t = ds.w_tokens
    # Validation split for report-noisy-min: a random 10% of the private units.
    split = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(11,)))
    valid = split.random(ds.n_units) < VALIDATION
    if select:
        train = bounded.select(~valid)
        validation = ds.counts.select(valid)
    noise = NoiseSource.internal(seed, stream=1)
    gen = noise.generator

    for eps in EPSILONS:  # references (epsilon-free)
        put("public_raw", eps, kl(p, alpha_tilde))
        put("public_add1", eps, kl(p, bp.posterior(prior, prior, 0.0)))
        put("transform_only", eps, kl(p, bp.posterior(np.log1p(prep["c_b"]), prior, 1.0)))

    for eps in EPSILONS:
        for s in S_GRID:
            # 1 (i). Sound Bayesian, empirical-Bayes rho (free), all private units, eps.
            params = bp.calibrate(eps, DELTA, scale=s, clip=CLIP, max_words=ds.w_distinct)
            noisy = bp.release(bounded, params, noise)
            rho = bp.empirical_bayes_rho(noisy, prior, params.sigma)
            theta = bp.posterior(noisy, prior, rho)
            put(f"sound_eb/{s}", eps, kl(p, theta), rho=rho, sigma=params.sigma)
            # The same release with the prior log(alpha) instead of eq. 1's log(alpha + 1).
            rho_log = bp.empirical_bayes_rho(noisy, prior_log, params.sigma)
            theta = bp.posterior(noisy, prior_log, rho_log)
            put(f"sound_eb_logalpha/{s}", eps, kl(p, theta), rho=rho_log)
            # 1 (ii). Sound Bayesian, rho by report-noisy-min: release at 2 eps / 3 on the
            # training units, selection at eps / 3 on the validation units (section 4.3).
            if select:
                params2 = bp.calibrate(
                    2 * eps / 3, DELTA, scale=s, clip=CLIP, max_words=ds.w_distinct
                )
                noisy2 = bp.release(train, params2, noise)
                chosen = bp.select_rho(noisy2, prior, validation, RHO_CANDIDATES, eps / 3, noise)
                theta = bp.posterior(noisy2, prior, chosen.rho)
                put(f"sound_sel/{s}", eps, kl(p, theta), rho=chosen.rho, sigma=params2.sigma)
            # 2. Brute force (claimed-unproven, not DP): the paper's centred-then-weighted f,
            # classical sigma on its local sensitivity, same rho rule as 1 (i).
            gamma = prep["gamma"][s]
            sigma_bf = gamma * math.sqrt(2 * math.log(1.25 / DELTA)) / eps
            noisy_bf = prep["paper"][s] + gen.normal(0.0, sigma_bf, n_words)
            rho_bf = bp.empirical_bayes_rho(noisy_bf, prior, sigma_bf)
            theta = bp.posterior(noisy_bf, prior, rho_bf)
            put(f"bf_eb/{s}", eps, kl(p, theta), rho=rho_bf, sigma=sigma_bf)

        # 3. Baseline 1: Laplace(W / eps) on counts, each unit <= W counts overall.
        theta = threshold(noise.add_laplace(c_lap, w_t / eps))
        fallback = theta is None
        theta = uniform if fallback else theta
        put("lap1_raw", eps, kl(p, theta), fallback=fallback, zero_mass=float(p[theta == 0].sum()))
        best, lam = smooth_oracle(theta, uniform, p)
        put("lap1_smooth", eps, best, lam=lam)
        best, lam = smooth_oracle(theta, alpha_tilde, p)
        put("lap1_public", eps, best, lam=lam)

        # 4. Baseline 2 as the paper describes it: l1 sensitivity 2 W / |c| (|c| is private).
        theta = threshold(noise.add_laplace(f_paper, 2 * w_t / (total * eps)))
        fallback = theta is None
        theta = alpha_tilde if fallback else theta
        put(
            "lap2paper_raw",
            eps,
            kl(p, theta),
            fallback=fallback,
            zero_mass=float(p[theta == 0].sum()),
        )
        best, lam = smooth_oracle(theta, alpha_tilde, p)
        put("lap2paper_smooth", eps, best, lam=lam)

        # 4'. Sound baseline 2: a DP lower bound L on |c| at COUNT_SHARE * eps with
        # P[L > |c|] = delta, then Laplace(2 W / (L eps_2)): (eps, delta)-DP.
        eps1, eps2 = COUNT_SHARE * eps, (1 - COUNT_SHARE) * eps
        b = w_t / eps1
        lower = float(noise.add_laplace(np.array([total]), b)[0]) - b * math.log(1 / (2 * DELTA))
        theta = None
        if lower > w_t:
            theta = threshold(noise.add_laplace(f_paper, 2 * w_t / (lower * eps2)))
        fallback = theta is None
        theta = alpha_tilde if fallback else theta
        put(
            "lap2sound_raw",
            eps,
            kl(p, theta),
            fallback=fallback,
            lower=lower,
            zero_mass=float(p[theta == 0].sum()),
        )
        best, lam = smooth_oracle(theta, alpha_tilde, p)
        put("lap2sound_smooth", eps, best, lam=lam)
    return out, extra


# --------------------------------------------------------------------------- aggregation


def _median(values: list[float]) -> float:
    return float(np.median(np.array(values, dtype=float)))


def best_scale(kls: dict, family: str) -> float:
    """The S of ``family`` minimising sum over epsilon of log(median KL): chosen on this data."""

    def score(s: float) -> float:
        return sum(math.log(max(_median(kls[f"{family}/{s}"][e]), 1e-12)) for e in EPSILONS)

    return min(S_GRID, key=score)


def paper_w(ds: Dataset) -> Dataset:
    """The same data with the paper's W = |U| / 1000 (section 4.3) for every mechanism."""
    w = max(1, round(ds.n_units / 1000))
    return replace(ds, w_distinct=w, w_tokens=w)


def run_dataset(make, seeds: tuple[int, ...], fixed: bool, select: bool = True) -> dict:
    """All seeds of one dataset; ``fixed``: one dataset and one bounding for every seed;
    ``select``: also run the report-noisy-min variant."""
    t0 = time.perf_counter()
    kls: dict[str, dict] = {}
    extras: dict[str, dict] = {}
    infos, gammas = [], []
    ds = prep = None
    for seed in seeds:
        if ds is None or not fixed:
            ds = make(seed)
            prep = prepare(ds, seed)
            infos.append(
                {
                    **ds.info,
                    "W_distinct": ds.w_distinct,
                    "W_tokens": ds.w_tokens,
                    "bounded_total": prep["total"],
                    "alpha_cancel": prep["cancel"],
                    "units_cut_W_distinct": prep["bounded_units_cut"],
                    "units_cut_W_tokens": prep["kept_units_cut"],
                    "brute_force_seconds": prep["bf_seconds"],
                }
            )
            gammas.append(prep["gamma"])
        out, extra = run_seed(ds, prep, seed, select)
        for key, by_eps in out.items():
            for eps, value in by_eps.items():
                kls.setdefault(key, {}).setdefault(eps, []).append(value)
        for key, by_eps in extra.items():
            for eps, value in by_eps.items():
                extras.setdefault(key, {}).setdefault(eps, []).append(value)
        print(
            f"  {make.__name__ if hasattr(make, '__name__') else 'dataset'} seed {seed}: "
            f"{time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    families = ("sound_eb", "sound_sel", "sound_eb_logalpha", "bf_eb")
    families = tuple(f for f in families if f"{f}/{S_GRID[0]}" in kls)
    best = {f: best_scale(kls, f) for f in families}
    oracle = {}
    for f in families:
        oracle[f] = {
            e: min(S_GRID, key=lambda s, f=f, e=e: _median(kls[f"{f}/{s}"][e])) for e in EPSILONS
        }
        kls[f"{f}/oracle"] = {e: kls[f"{f}/{oracle[f][e]}"][e] for e in EPSILONS}
    w_d = infos[0]["W_distinct"]
    calib = {}
    for s in S_GRID:
        calib[s] = {}
        for eps in EPSILONS:
            full = bp.calibrate(eps, DELTA, scale=s, clip=CLIP, max_words=w_d)
            calib[s][eps] = {
                "per_word": full.per_word,
                "sensitivity": full.sensitivity,
                "sigma": full.sigma,
                "sigma_2eps_3": bp.calibrate(
                    2 * eps / 3, DELTA, scale=s, clip=CLIP, max_words=w_d
                ).sigma,
            }
    return {
        "infos": infos,
        "kl": kls,
        "extra": extras,
        "gamma": gammas,
        "best_S": best,
        "oracle_S": oracle,
        "calibration": calib,
        "seconds": time.perf_counter() - t0,
    }


# --------------------------------------------------------------------------- rendering


def fmt(x: float) -> str:
    if math.isinf(x):
        return "∞"
    return f"{x:.3g}" if x >= 1e-3 else f"{x:.1e}"


def cell(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    med = _median(values)
    if lo == hi:
        return fmt(med)
    return f"{fmt(med)} ({fmt(lo)}–{fmt(hi)})"


def rows(res: dict) -> list[tuple[str, str]]:
    b = {"sound_sel": None, **res["best_S"]}
    every = [
        (
            f"**Sound Bayesian**, rho by empirical Bayes (free), S = {b['sound_eb']}*",
            f"sound_eb/{b['sound_eb']}",
        ),
        ("**Sound Bayesian**, rho by empirical Bayes, best S for each eps‡", "sound_eb/oracle"),
        (
            f"**Sound Bayesian**, rho by report-noisy-min (eps/3) + release (2 eps/3), "
            f"S = {b['sound_sel']}*",
            f"sound_sel/{b['sound_sel']}",
        ),
        (
            f"Sound Bayesian, empirical-Bayes rho, prior log(alpha) instead of log(alpha + 1), "
            f"S = {b['sound_eb_logalpha']}*",
            f"sound_eb_logalpha/{b['sound_eb_logalpha']}",
        ),
        (
            f"Brute force (paper, *claimed-unproven, not DP*), empirical-Bayes rho, "
            f"S = {b['bf_eb']}*",
            f"bf_eb/{b['bf_eb']}",
        ),
        ("Brute force (*claimed-unproven, not DP*), best S for each eps‡", "bf_eb/oracle"),
        ("Baseline 1: Laplace(W/eps) on counts, threshold, normalise (DP)", "lap1_raw"),
        ("Baseline 1 + mix with uniform, oracle lambda† (DP)", "lap1_smooth"),
        (
            "Baseline 1 + mix with public alpha~, oracle lambda† (DP; not in the paper)",
            "lap1_public",
        ),
        (
            "Baseline 2: modified Laplace, paper's l1 sensitivity 2W/\\|c\\| (*not DP*: "
            "\\|c\\| is private)",
            "lap2paper_raw",
        ),
        (
            "Baseline 2 (paper's sensitivity) + mix with public alpha~, oracle lambda† (*not DP*)",
            "lap2paper_smooth",
        ),
        ("Baseline 2 sound: \\|c\\| replaced by a DP lower bound (eps/5) (DP)", "lap2sound_raw"),
        ("Baseline 2 sound + mix with public alpha~, oracle lambda† (DP)", "lap2sound_smooth"),
        ("Reference: public only, alpha~ = alpha/\\|alpha\\| (eps = 0)", "public_raw"),
        (
            "Reference: public only, (alpha+1)/\\|alpha+1\\| = posterior at rho = 0 (eps = 0)",
            "public_add1",
        ),
        (
            "Reference: no noise, softmax(log(c + 1)) of the C/W-bounded counts (not private)",
            "transform_only",
        ),
    ]
    return [(label, key) for label, key in every if key in res["kl"]]


def table(res: dict) -> list[str]:
    head = "| mechanism | " + " | ".join(f"eps = {e:g}" for e in EPSILONS) + " |"
    lines = [head, "|---" * (len(EPSILONS) + 1) + "|"]
    for label, key in rows(res):
        cells = []
        for e in EPSILONS:
            text = cell(res["kl"][key][e])
            if key.endswith("/oracle"):
                text += f" [S = {res['oracle_S'][key.split('/')[0]][e]:g}]"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(
        "| Reference: the private distribution itself (not private) | "
        + " | ".join("0" for _ in EPSILONS)
        + " |"
    )
    return lines


def grid_table(res: dict, family: str) -> list[str]:
    lines = [
        "| S | " + " | ".join(f"eps = {e:g}" for e in EPSILONS) + " |",
        "|---" * (len(EPSILONS) + 1) + "|",
    ]
    for s in S_GRID:
        meds = [fmt(_median(res["kl"][f"{family}/{s}"][e])) for e in EPSILONS]
        mark = "*" if s == res["best_S"][family] else ""
        lines.append(f"| {s:g}{mark} | " + " | ".join(meds) + " |")
    return lines


DP_BASELINES = ("lap1_smooth", "lap1_public", "lap2sound_smooth")
PAPER_BASELINES = ("lap1_smooth", "lap2paper_smooth", "lap2sound_smooth")


def reductions(res: dict) -> dict:
    """1 - median KL / baseline's median KL, per epsilon (positive: the mechanism is better)."""
    med = {key: {e: _median(res["kl"][key][e]) for e in EPSILONS} for _, key in rows(res)}
    refs = {
        "laplace": {e: med["lap1_smooth"][e] for e in EPSILONS},
        "paper_baselines": {e: min(med[k][e] for k in PAPER_BASELINES) for e in EPSILONS},
        "dp_baselines": {e: min(med[k][e] for k in DP_BASELINES) for e in EPSILONS},
        "public_only": {e: med["public_raw"][e] for e in EPSILONS},
    }
    b = res["best_S"]
    out = {"baselines": refs}
    for name, key in (
        ("sound_eb", f"sound_eb/{b['sound_eb']}"),
        ("sound_eb_oracle", "sound_eb/oracle"),
        ("sound_sel", f"sound_sel/{b.get('sound_sel')}"),
        ("bf_eb", f"bf_eb/{b['bf_eb']}"),
        ("bf_eb_oracle", "bf_eb/oracle"),
        ("public_only", "public_raw"),
    ):
        if key not in med:
            continue
        out[name] = {
            e: {"kl": med[key][e], **{f"vs_{r}": 1 - med[key][e] / v[e] for r, v in refs.items()}}
            for e in EPSILONS
        }
    out["sound_over_bf"] = {
        e: med[f"sound_eb/{b['sound_eb']}"][e] / med[f"bf_eb/{b['bf_eb']}"][e] for e in EPSILONS
    }
    out["sound_over_bf_oracle"] = {
        e: med["sound_eb/oracle"][e] / med["bf_eb/oracle"][e] for e in EPSILONS
    }
    return out


def pct(x: float) -> str:
    return f"{100 * x:+.0f}%"


def _ranged(infos: list[dict], key: str, digits: int = 0) -> str:
    vals = [i[key] for i in infos]
    f = (lambda v: f"{v:,.{digits}f}") if digits else (lambda v: f"{v:,}")
    lo, hi = min(vals), max(vals)
    return f(lo) if lo == hi else f"{f(lo)}–{f(hi)}"


def section(name: str, res: dict) -> list[str]:
    infos = res["infos"]
    i0 = infos[0]
    b = res["best_S"]
    s_eb = b["sound_eb"]
    med_rho = {
        k: {e: _median([x["rho"] for x in res["extra"][f"{k}/{b[k]}"][e]]) for e in EPSILONS}
        for k in ("sound_eb", "sound_sel", "bf_eb")
    }
    med_lam = {
        k: {e: _median([x["lam"] for x in res["extra"][k][e]]) for e in EPSILONS}
        for k in ("lap1_smooth", "lap2sound_smooth")
    }
    lines = []
    if name == "pheme":
        lines += [
            "### PHEME (one tweet = one privacy unit)",
            "",
            f"Per seed a random 10% of the {i0['public_units'] + i0['private_units']:,} tweets "
            f"is public ({_ranged(infos, 'public_tokens')} tokens; their counts are alpha, their "
            f"words are V: |V| = {_ranged(infos, 'V')}), the other "
            f"{i0['private_units']:,} are private ({_ranged(infos, 'private_tokens')} tokens). "
            f"**The public vocabulary covers {100 * min(i['coverage'] for i in infos):.1f}–"
            f"{100 * max(i['coverage'] for i in infos):.1f}% of the private tokens**; the rest "
            "is outside V and ignored by every mechanism and by p.",
        ]
    else:
        lines += [
            "### Synthetic, 1M-user scale"
            if i0["private_units"] >= 10**6
            else f"### Synthetic ({i0['private_units']:,} users, quick run)",
            "",
            f"{i0['private_units']:,} private users, {i0['private_tokens']:,} tokens; "
            f"{i0['generator']}. Public: {i0['public_units']:,} separate users "
            f"({i0['public_tokens']:,} tokens) from q; |V| = {i0['V']:,} (the words they used, "
            f"out of {i0['word_types']:,}). **The public vocabulary covers "
            f"{100 * i0['coverage']:.1f}% of the private tokens.** One dataset and one "
            "contribution bounding for all seeds; seeds vary the noise and the validation split.",
        ]
    lines += [
        "",
        f"C = {CLIP} (section 4.3), W = {_ranged(infos, 'W_distinct')} distinct words a unit "
        f"for the Bayesian mechanisms and W = {_ranged(infos, 'W_tokens')} counts overall a unit "
        f"for the Laplace baselines, both the {W_PERCENTILE}th percentile over the *public* "
        f"units (units cut: {_ranged(infos, 'units_cut_W_distinct')} and "
        f"{_ranged(infos, 'units_cut_W_tokens')} of {i0['private_units']:,}). delta = "
        f"{DELTA:g}. KL(p || theta) in nats, median over {len(res['kl']['public_raw'][0.1])} "
        "seeds (min–max).",
        "",
        *table(res),
        "",
        "\\* S chosen **on this data, non-privately** (with p): the S of the grid "
        f"{list(S_GRID)} with the smallest sum over epsilon of log(median KL), one S for all "
        "epsilon. A DP release must fix S beforehand (or pay for choosing it); the grids below "
        "show what a wrong S costs. † lambda in "
        f"{list(LAMBDAS)} chosen per run with p: post-processing, but an oracle choice that "
        "favours the baselines. ∞: the thresholded output puts zero mass on words that carry "
        "private mass (median share of p on them at eps = 0.1: "
        f"{_median([x['zero_mass'] for x in res['extra']['lap1_raw'][0.1]]):.2f} for baseline 1, "
        f"{_median([x['zero_mass'] for x in res['extra']['lap2sound_raw'][0.1]]):.2f} for sound "
        "baseline 2).",
        "",
        f"Calibration at S = {s_eb}, C = {CLIP}, W = {i0['W_distinct']}: global per-word bound "
        f"max_N b(N) = {res['calibration'][s_eb][0.1]['per_word']:.4g}, l2 sensitivity "
        f"{res['calibration'][s_eb][0.1]['sensitivity']:.4g}; brute-force (local) sensitivity "
        "of the paper's f at the brute-force row's S = "
        f"{b['bf_eb']}: {_median([g[b['bf_eb']] for g in res['gamma']]):.4g}.",
        "",
        "| eps | " + " | ".join(f"{e:g}" for e in EPSILONS) + " |",
        "|---" * (len(EPSILONS) + 1) + "|",
        "| sigma, sound (analytic Gaussian) | "
        + " | ".join(f"{res['calibration'][s_eb][e]['sigma']:.3g}" for e in EPSILONS)
        + " |",
        "| sigma, sound at 2 eps/3 (noisy-min row, its S) | "
        + " | ".join(
            f"{res['calibration'][b['sound_sel']][e]['sigma_2eps_3']:.3g}" for e in EPSILONS
        )
        + " |",
        "| sigma, brute force (classical, local) | "
        + " | ".join(
            fmt(_median([x["sigma"] for x in res["extra"][f"bf_eb/{b['bf_eb']}"][e]]))
            for e in EPSILONS
        )
        + " |",
        "| median rho, sound, empirical Bayes | "
        + " | ".join(f"{med_rho['sound_eb'][e]:.3g}" for e in EPSILONS)
        + " |",
        "| median rho, sound, report-noisy-min | "
        + " | ".join(f"{med_rho['sound_sel'][e]:.3g}" for e in EPSILONS)
        + " |",
        "| median rho, brute force, empirical Bayes | "
        + " | ".join(f"{med_rho['bf_eb'][e]:.3g}" for e in EPSILONS)
        + " |",
        "| median lambda†, baseline 1 + uniform | "
        + " | ".join(f"{med_lam['lap1_smooth'][e]:g}" for e in EPSILONS)
        + " |",
        "| median lambda†, sound baseline 2 + public | "
        + " | ".join(f"{med_lam['lap2sound_smooth'][e]:g}" for e in EPSILONS)
        + " |",
        "",
        "Median KL of the sound Bayesian mechanism (empirical-Bayes rho) for every S of the grid:",
        "",
        *grid_table(res, "sound_eb"),
        "",
        "Median KL of the brute-force variant (claimed-unproven) for every S of the grid:",
        "",
        *grid_table(res, "bf_eb"),
        "",
    ]
    return lines


def variant_section(title: str, res: dict) -> list[str]:
    """The same data with the paper's W = |U| / 1000 (no report-noisy-min run)."""
    i0 = res["infos"][0]
    return [
        f"#### {title} with the paper's W = \\|U\\|/1000 = {i0['W_distinct']} (section 4.3)",
        "",
        f"Same data, seeds and mechanisms, but W = {i0['W_distinct']} for every mechanism "
        f"(distinct words for the Bayesian ones, counts overall for the Laplace ones; units "
        f"cut: {_ranged(res['infos'], 'units_cut_W_distinct')} and "
        f"{_ranged(res['infos'], 'units_cut_W_tokens')}), as the paper's section 4.3 sets it "
        '("we also limit the total number of counts for each user to \\|U\\|/1000"). The '
        "Laplace noise grows like W, the sound Gaussian noise like sqrt(W), the brute-force "
        "(local) noise hardly at all. Footnotes as above; the report-noisy-min row is not run.",
        "",
        *table(res),
        "",
    ]


def _pair(x: dict) -> str:
    return f"{fmt(x['kl'])} ({pct(x['vs_laplace'])} / {pct(x['vs_paper_baselines'])})"


SETTINGS = (
    ("synthetic", "synthetic, W = public 95th pct."),
    ("synthetic_paper_w", "synthetic, paper's W = \\|U\\|/1000"),
    ("pheme", "PHEME, W = public 95th pct."),
    ("pheme_paper_w", "PHEME, paper's W = \\|U\\|/1000"),
)


def verdict(res: dict) -> list[str]:
    e = 0.1
    reds = {name: reductions(res[name]) for name, _ in SETTINGS if name in res}
    span = [reds[n]["sound_eb_oracle"][e]["vs_paper_baselines"] for n in reds]
    span_l = [reds[n]["sound_eb_oracle"][e]["vs_laplace"] for n in reds]
    cost = [reds[n]["sound_over_bf_oracle"][x] for n in reds for x in EPSILONS]
    out = [
        "**Summary.** At eps = 0.1 the sound Bayesian mechanism, even with S chosen with "
        "knowledge of p, changes KL by "
        f"{pct(min(span))} to {pct(max(span))} against the best of the paper's baselines "
        f"and by {pct(min(span_l))} to {pct(max(span_l))} against the standard Laplace "
        "baseline across the four settings below: **the paper's 'up to 85% reduction' does "
        + (
            "hold in at least one setting"
            if max(span) >= 0.85
            else "hold only against standard Laplace"
            if max(span_l) >= 0.85
            else "not hold"
        )
        + " with the sound bound.** Its KL is "
        f"{min(cost):.2f}x to {max(cost):.2f}x that of the paper's brute-force variant "
        "(claimed-unproven, not DP) over the eps grid.",
        "",
        "Median KL at eps = 0.1; in brackets the KL reduction 1 - KL / KL_ref against "
        "baseline 1 (standard Laplace, + uniform mix) / against the best of the paper's "
        "baselines (baseline 1, baseline 2 with the paper's or the sound sensitivity, each "
        "with its best mix); positive = lower KL than the reference.",
        "",
        "| setting | baseline 1 (Laplace) | best paper baseline | public only | sound, fixed S* "
        "| sound, best S‡ | sound, noisy-min rho | brute force, best S‡ (not DP) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, label in SETTINGS:
        if name not in reds:
            continue
        red = reds[name]
        base = red["baselines"]
        sel = _pair(red["sound_sel"][e]) if "sound_sel" in red else "not run"
        out.append(
            f"| {label} | {fmt(base['laplace'][e])} | {fmt(base['paper_baselines'][e])} | "
            f"{_pair(red['public_only'][e])} | {_pair(red['sound_eb'][e])} | "
            f"{_pair(red['sound_eb_oracle'][e])} | {sel} | {_pair(red['bf_eb_oracle'][e])} |"
        )
    out += [
        "",
        "Sound KL / brute-force KL (best S for each, per eps "
        + ", ".join(f"{x:g}" for x in EPSILONS)
        + "), i.e. what the sound bound costs against the paper's unproven one:",
        "",
    ]
    for name, label in SETTINGS:
        if name in reds:
            ratios = ", ".join(f"{reds[name]['sound_over_bf_oracle'][x]:.2f}" for x in EPSILONS)
            out.append(f"- {label}: {ratios}")
    hits = [
        label
        for name, label in SETTINGS
        if name in reds and reds[name]["sound_eb_oracle"][e]["vs_paper_baselines"] >= 0.85
    ]
    hits_laplace = [
        label
        for name, label in SETTINGS
        if name in reds and reds[name]["sound_eb_oracle"][e]["vs_laplace"] >= 0.85
    ]
    hits_bf = [
        label
        for name, label in SETTINGS
        if name in reds and reds[name]["bf_eb_oracle"][e]["vs_paper_baselines"] >= 0.85
    ]
    hits_bf_laplace = [
        label
        for name, label in SETTINGS
        if name in reds and reds[name]["bf_eb_oracle"][e]["vs_laplace"] >= 0.85
    ]
    out += [
        "",
        "85% at eps = 0.1 (sound, best S) against the best of the paper's baselines: "
        + (", ".join(hits) if hits else "**in no setting**")
        + "; against baseline 1 (Laplace) alone: "
        + (", ".join(hits_laplace) if hits_laplace else "**in no setting**")
        + ". The brute-force variant (not DP) reaches it against the best of the paper's "
        "baselines in "
        + (", ".join(hits_bf) if hits_bf else "no setting")
        + ", against baseline 1 alone in "
        + (", ".join(hits_bf_laplace) if hits_bf_laplace else "no setting")
        + ". Against the raw thresholded baselines (infinite KL) every full-support "
        "mechanism 'reduces' KL by 100%, which says nothing.",
    ]
    return out


def discussion(res: dict) -> list[str]:
    """Where the differences come from, with this run's numbers."""
    e = 0.1
    syn, syn_w, ph = res["synthetic"], res["synthetic_paper_w"], res["pheme"]
    red = {n: reductions(res[n]) for n, _ in SETTINGS if n in res}

    def med(r: dict, key: str, eps: float = e) -> float:
        return _median(r["kl"][key][eps])

    laplace_wins = [
        x for x in EPSILONS if med(syn, "lap1_smooth", x) < med(syn, "sound_eb/oracle", x)
    ]
    s_syn = syn["best_S"]["sound_eb"]
    w_syn = syn["infos"][0]["W_distinct"]
    wt_syn = syn["infos"][0]["W_tokens"]
    w_paper = syn_w["infos"][0]["W_tokens"]
    sigma = syn["calibration"][s_syn][e]["sigma"]
    gamma = _median([g[s_syn] for g in syn["gamma"]])
    return [
        "### Discussion",
        "",
        "- **Where the Bayesian side beats Laplace, the public data alone does nearly as "
        "well.** At eps = 0.1 the public distribution alone (no private data, eps = 0) is "
        + ", ".join(
            f"{pct(red[n]['public_only'][e]['vs_laplace'])} ({label})"
            for n, label in SETTINGS
            if n in red
        )
        + " against baseline 1. Baseline 2, as the paper writes it, cannot use the public "
        "data (alpha~ cancels), so only an extra mix with alpha~ (rows '+ mix with public') "
        "gives the Laplace side the same advantage.",
        "- **Laplace improves with the corpus size, the sound mechanism does not.** Laplace noise "
        f"is additive on counts (scale W/eps = {wt_syn / e:g} at eps = 0.1 with W = {wt_syn}), "
        "so its relative error falls as the corpus grows; the Gaussian noise of the Bayesian "
        "mechanism is on log counts and its sigma depends only on (eps, delta, S, C, W), not "
        f"on the data size: sigma = {sigma:.3g} at eps = 0.1 (S = {s_syn}, W = {w_syn}), a "
        f"multiplicative error of e^{sigma:.3g} on every count, so the empirical-Bayes rho is "
        f"close to 0 (median {_median([x['rho'] for x in syn['extra'][f'sound_eb/{s_syn}'][e]]):.3g}) "  # noqa: E501
        "and the output is essentially the public prior. On the synthetic corpus, baseline 1 "
        "(+ uniform mix) has a lower KL than the sound mechanism at its best S at eps = "
        + (", ".join(f"{x:g}" for x in laplace_wins) if laplace_wins else "no eps")
        + ".",
        "- **The brute-force variant's advantage is its local sensitivity.** Its gamma, "
        f"computed on the 1M-user data, is {gamma:.3g} at S = {s_syn} against the sound "
        f"bound's {syn['calibration'][s_syn][e]['sensitivity']:.3g}, and it shrinks as the "
        "data grows; calibrating to it is what the paper's Theorem 1 / Algorithm 1 do, and "
        "it is not differential privacy (the noise scale is a function of the private data).",
        f"- **The paper's W = |U|/1000 favours the Bayesian side.** With W = {w_paper:,} on "
        f"the synthetic corpus the Laplace scale is {w_paper / e:,.0f} at eps = 0.1 (baseline "
        f"1: KL {fmt(med(syn_w, 'lap1_smooth'))} instead of {fmt(med(syn, 'lap1_smooth'))}); "
        "the sound Gaussian grows with sqrt(W), the brute-force noise barely at all (no unit "
        "holds more than a few dozen words).",
        "- **The prior log(alpha + 1) of eq. 1 costs on small public data.** V is the public "
        "vocabulary, so alpha >= 1 and the +1 only flattens the prior: on PHEME "
        f"(alpha + 1)/|alpha + 1| has KL {fmt(med(ph, 'public_add1'))} against "
        f"{fmt(med(ph, 'public_raw'))} for alpha/|alpha|, and the sound mechanism with the "
        f"prior log(alpha) gets {fmt(med(ph, 'sound_eb_logalpha/' + str(ph['best_S']['sound_eb_logalpha'])))} "  # noqa: E501
        f"at eps = 0.1 instead of {fmt(med(ph, 'sound_eb/' + str(ph['best_S']['sound_eb'])))}.",
        "- **rho selection at small eps is fragile.** Report-noisy-min at eps/3 has Laplace "
        "scale 2L/(eps/3) (L = log|V| + 4), while the candidates' score differences grow only "
        "with the number of validation units, so on PHEME (about 500) it picks almost at "
        "random, and a large "
        "rho on a very noisy release is catastrophic (max KL over seeds at eps = 0.1: "
        f"{fmt(max(ph['kl']['sound_sel/' + str(ph['best_S']['sound_sel'])][e]))}). The "
        "empirical-Bayes rho overshoots when sigma^2 is much larger than the signal's spread "
        "(the variance it subtracts sigma^2 from has a relative error of about sqrt(2/|V|)): "
        "see the large-S rows at small eps in the PHEME grid.",
        "",
    ]


# --------------------------------------------------------------------------- main


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, float):
        return float(f"{x:.6g}")
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, 200,000 synthetic users")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="path prefix for .md and .json (default: "
        "benchmarks/bayesian_kl_results for a full run, none for --quick)",
    )
    args = parser.parse_args()
    seeds = SEEDS_QUICK if args.quick else SEEDS_FULL
    users = SYNTH_USERS_QUICK if args.quick else SYNTH_USERS_FULL
    started = at_start()
    t0 = time.perf_counter()
    docs = [d.split() for d in json.loads(PHEME.read_text())["text"]]
    docs = [d for d in docs if d]
    res = {"pheme": run_dataset(lambda seed: pheme(seed, docs), seeds, fixed=False)}
    res["pheme_paper_w"] = run_dataset(
        lambda seed: paper_w(pheme(seed, docs)), seeds, fixed=False, select=False
    )
    synth = synthetic(users)
    res["synthetic"] = run_dataset(lambda seed: synth, seeds, fixed=True)
    synth_paper = paper_w(synth)
    res["synthetic_paper_w"] = run_dataset(
        lambda seed: synth_paper, seeds, fixed=True, select=False
    )
    runtime = time.perf_counter() - t0
    md = [
        f"Run time {runtime:.0f} s (PHEME {res['pheme']['seconds']:.0f} s + "
        f"{res['pheme_paper_w']['seconds']:.0f} s, synthetic "
        f"{res['synthetic']['seconds']:.0f} s + {res['synthetic_paper_w']['seconds']:.0f} s "
        "after generation)",
        "",
        "Reproduces Figure 1 / section 4.4 of `papers/bayesian-dp-ngrams.txt` (KL-divergence "
        'from the private distribution vs epsilon) and checks its claim of "up to 85% '
        "reduction in KL-divergence compared to previously known mechanisms at epsilon equals "
        '0.1" (abstract; the conclusion says "compared to the Laplace mechanism"), with the '
        "sound global bound of `fdptm/mechanisms/bayesian_prior.py`. Metric: KL(p || theta), "
        "p = the normalised, unclamped private counts over V. delta = 1e-5 throughout; "
        "numpy noise (`NoiseSource.internal`), nothing here is a release.",
        "",
        "Mechanisms. *Sound Bayesian*: `bp.calibrate` (analytic Gaussian on the global bound "
        "sqrt(W) max_N b(N)) + `bp.release` + `bp.posterior`; rho by `empirical_bayes_rho` "
        "(post-processing, free) or by `select_rho` (report-noisy-min, clipped log loss, on a "
        "random 10% validation split of the private units at eps/3, the release on the other "
        "90% at 2 eps/3, as in section 4.3; basic composition). *Brute force*: the paper's "
        "f = w * (log(c+1) - mean) (centring before weighting), sigma = gamma sqrt(2 "
        "ln(1.25/delta))/eps with gamma = `brute_force_sensitivity` (Algorithm 1, local: "
        "**claimed-unproven, not DP**), same bounded counts and the same empirical-Bayes rho. "
        "*Baseline 1*: each unit contributes at most W counts overall, Laplace(W/eps) on the "
        "counts, threshold at 0, normalise (an all-zero result would fall back to uniform; "
        "fallbacks: "
        f"{sum(x['fallback'] for r in res.values() for v in r['extra']['lap1_raw'].values() for x in v)}"  # noqa: E501
        "). *Baseline 2* (section 4.2): max(sum_n w_n (c~^n - alpha~) + e + alpha~, 0) with "
        "w_n = |c^n|/|c|, implemented literally. Since sum_n w_n c~^n = c/|c| and sum_n w_n = "
        "1, **alpha~ cancels exactly** (checked: max deviation "
        f"{max(i['alpha_cancel'] for r in res.values() for i in r['infos']):.1e}): the "
        "output is max(c/|c| + e, 0), i.e. baseline 1 with Laplace(2W/eps) on the counts; the "
        "public data enters only through V. Its l1 sensitivity is 2W/|c| (one unit moves "
        "c/|c| by at most 2W/|c| in l1), which depends on the private total |c|: a local "
        "sensitivity, **not DP** as the paper states it. *Sound baseline 2*: eps/5 buys a DP "
        "count |c| + Lap(5W/eps), lowered by (5W/eps) ln(1/(2 delta)) so that it exceeds |c| "
        "with probability delta only, and the Laplace on c/|c| uses that lower bound with the "
        "other 4 eps/5: (eps, delta)-DP (fallback to alpha~ when the bound is <= W: "
        f"{sum(x['fallback'] for r in res.values() for v in r['extra']['lap2sound_raw'].values() for x in v)}"  # noqa: E501
        " times). The thresholded Laplace outputs have zeros, so their KL is infinite; the "
        "'+ mix' rows are (1 - lambda) theta + lambda u with u uniform (baseline 1) or "
        "alpha~ (baseline 2).",
        "",
        "### Verdict",
        "",
        *verdict(res),
        "",
        *discussion(res),
    ]
    md += section("synthetic", res["synthetic"])
    md += variant_section("Synthetic", res["synthetic_paper_w"])
    md += section("pheme", res["pheme"])
    md += variant_section("PHEME", res["pheme_paper_w"])
    text = "\n".join(md)
    if args.quick and args.out is None:  # a short run, printed only
        print(text)
        return
    payload = {
        "machine": started,
        "runtime_seconds": runtime,
        "delta": DELTA,
        "epsilons": EPSILONS,
        "S_grid": S_GRID,
        "C": CLIP,
        "rho_candidates": RHO_CANDIDATES,
        "lambdas": LAMBDAS,
        "seeds": seeds,
        "datasets": res,
        "reductions": {n: reductions(r) for n, r in res.items()},
    }
    md = save("bayesian_kl_results", TITLE, text, _jsonable(payload), args.out)
    print(md.read_text())


if __name__ == "__main__":
    main()
