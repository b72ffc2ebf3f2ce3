"""``--tune``: private hyper-parameter selection for dp-vi by random repetition.

What it does. Papernot & Steinke, "Hyperparameter tuning with Renyi differential privacy"
(ICLR 2022, arXiv:2110.03620), section 3 and Theorem 2: run a randomised base mechanism Q a
random number K of times, K ~ TNB(eta, gamma) (eta = 1: geometric, P(K = k) = gamma (1 -
gamma)^(k - 1), mean 1 / gamma), and release only the output with the best score. If Q is
(lambda, eps_lambda)-RDP at every order, the whole is RDP with, for all lambda, lambda-hat > 1,

    eps'_lambda <= eps_lambda + (1 + eta) (1 - 1/lambda-hat) eps_lambda-hat
                   + (1 + eta) log(1 / gamma) / lambda-hat + log E[K] / (lambda - 1),

which dp-accounting computes for ``RepeatAndSelectDpEvent(event, mean, shape)`` (its
``_compute_rdp_repeat_and_select`` is this theorem; for shape 1 it uses gamma = 1 / mean,
the parameter ``number_of_trials`` samples with). K must stay secret: neither it nor the
losing trials nor their scores are released or logged (the progress bar ticks once, at the
end). The run's duration grows with K (it is about the sum of the trials' iterations), so
the guarantee assumes the run's timing stays with the operator, as every duration of a
release run must (the manifest carries a date, never a time, and says so for tuned runs).
This is the n-gram paper's Theorem 2 idea (report-noisy-min over a grid,
``bayesian-dp-ngrams.txt`` section 3) with a tighter, RDP-native accounting, which lets the
trials' own budget be composed with everything else in the ledger.

Base mechanism Q (one trial), on a split made once per run: every privacy unit is held out
independently with probability ``holdout`` (a coin from the run's NoiseSource, independent
of the data). Q draws a configuration uniformly from the public grid (``tune_iterations`` x
``tune_thresholds`` x ``tune_clips``), trains dp-vi with it on the other units, and scores
the model on the held-out units: each held-out unit u gets l_u, the document-completion
log-likelihood per scored token of its documents (``fdptm.evaluation.metrics``, theta from
the even positions, the odd ones scored), and the score is

    sum over held-out u of clip(l_u + log V, -b, b) + N(0, (z_s b)^2),  b = max(log V, 1)

(centring at -log V, the uniform model, halves the sensitivity that clipping to [-2 log V,
0] would need; a constant shift per unit does not change which trial wins, since every trial
scores the same units). The highest score wins. Privacy, for neighbours D and D' = D + {u}:
fix the split s (every unit's coin, u's included). Given s the trials are independent copies
of a mechanism Q_s, and Q_s is (lambda, lambda rho)-RDP: if s trains on u, the score is a
post-processing of the model and of held-out data without u, so Q_s's RDP is the training's;
if s holds u out, the model does not depend on u and the score is a Gaussian mechanism of
sensitivity b, (lambda, lambda / (2 z_s^2))-RDP. Theorem 2 applies to the repetition of
Q_s for every s. The released output is the mixture over s of those repetitions; the other
units' coins have the same i.i.d. law under D and D' (the code indexes them by unit codes,
which may shift with the data, but i.i.d. coins have the same joint law in any order), and
exp((lambda - 1) D_lambda) is jointly convex, so the mixture's RDP is at most the largest
over s. Every configuration is
calibrated so that its training is rho-zCDP for one common rho (its T Gaussian rounds plus,
with ``clip=private``, the quantile: T / (2 z^2) + rho_q <= rho; dp-vi's calibration at the
epsilon that rho gives), and z_s = 1 / sqrt(2 rho), so Q is (lambda, lambda rho)-RDP at every
order for every configuration: the event of one trial is zCDP(rho). rho is the largest value
for which RepeatAndSelect(zCDP(rho), mean_trials, 1) meets M2's epsilon at its delta (RDP
accountant, bisection).

Adjacency: dp-vi's, add/remove one unit (author or document). The released model is
trained on about (1 - holdout) of the units. The manifest states the chosen configuration
(a DP output: the winning trial's, part of what Papernot & Steinke's theorem releases) and,
for comparison, what one untuned trial would have cost (``single_trial_epsilon``).

Measured (``benchmarks/tune_results.md``, PHEME and synthetic corpora, 8 paired seeds): at
total epsilon 1, 3 and 10 the tuned release did NOT beat the untuned defaults; at 3 and 10 it
lost on every seed (NPMI -0.07 to -0.09; held-out likelihood, the selection's own criterion,
worse on 8 of 8), because each trial gets a quarter to a half of the untuned zCDP budget and
the untuned defaults are already among the grid's best points. The defaults here (mean 2
trials, T 50/100 x threshold 1/2) are the cheapest arm that did no worse than the others:
about the run time of an untuned release, and the least held-out likelihood lost. ``--tune``
is for corpora unlike those, where the defaults may be far off.

What it does not tune. The M1/M2 budget split: M1 (DP set union) is (epsilon, delta)-DP with
a delta that is not an RDP curve, so it cannot be a part of an RDP-accounted trial; tuning
it would need the approximate-DP version of the theorem (Papernot & Steinke, Theorem 3.5 /
Liu & Talwar 2019), which costs a multiple of epsilon. Poisson subsampling (q < 1) is not
offered either: its RDP curve is not of the zCDP form that makes the configurations'
curves comparable.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fdptm.errors import BadInputError
from fdptm.evaluation.metrics import completion_logliks
from fdptm.mechanisms import dp_vi
from fdptm.mechanisms.constraints import (
    NON_NEGATIVE,
    OPEN_FRACTION,
    Integer,
    ListOf,
    OneOf,
    Real,
    param,
    validate_params,
)
from fdptm.mechanisms.dp_vi import PRIVATE_CLIP, DpViParams
from fdptm.mechanisms.guarantee import APPROXIMATE_DP, Guarantee
from fdptm.mechanisms.lda import Corpus, subset
from fdptm.privacy import events
from fdptm.privacy.accountant import check_delta, check_epsilon
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.events import ACCOUNTANTS
from fdptm.privacy.noise import NoiseSource

_DP_VI = {
    name: p.default
    for name, p in inspect.signature(dp_vi.dp_vi_params).parameters.items()
    if p.default is not p.empty
}
"""dp-vi's option defaults, the one source of the trials' defaults."""

PARAMETER_CONSTRAINTS = {
    **{
        name: dp_vi.PARAMETER_CONSTRAINTS[name]
        for name in (
            "n_topics",
            "adjacency",
            "max_docs_per_author",
            "clip_quantile",
            "clip_share",
            "eta",
            "alpha",
            "local_iterations",
            "local_tolerance",
            "warm_start",
            "step_decay",
            "step_offset",
            "prior_weight",
        )
    },
    "tune_iterations": param(ListOf((Integer(1),)), what="the grid of dp-vi iterations"),
    "tune_thresholds": param(ListOf((NON_NEGATIVE,)), what="the grid of dp-vi thresholds"),
    "tune_clips": param(
        ListOf((dp_vi.CLIP_RANGE, OneOf((PRIVATE_CLIP,)))),
        what="the grid of dp-vi clipping norms",
    ),
    "mean_trials": param(
        Real(1.0, closed="left"), what="the mean of the geometric number of trials"
    ),
    "holdout": param(OPEN_FRACTION, what="the probability a unit is held out for scoring"),
}
"""Every option of ``tuned_dp_vi_params`` and what it accepts: dp-vi's declarations for
the options every trial shares (``fdptm.mechanisms.constraints``)."""

SHAPE = 1.0
"""Geometric K (Papernot & Steinke's eta = 1)."""
_RHO_PRECISION = 1e-9


@dataclass(frozen=True)
class TunedParams:
    """The calibrated grid of one tuned dp-vi run: public functions of the request."""

    epsilon: float
    delta: float
    adjacency: Adjacency
    n_topics: int
    mean_trials: float
    holdout: float
    trial_rho: float
    configs: tuple[DpViParams, ...]
    accountant_epsilon: float
    single_trial_epsilon: float
    progress_total: int = 1

    @property
    def score_noise_multiplier(self) -> float:
        """z_s: the held-out score's Gaussian is (lambda, lambda rho)-RDP, like a trial."""
        return 1.0 / math.sqrt(2.0 * self.trial_rho)

    def event(self) -> dict:
        """RepeatAndSelect(zCDP(rho), mean_trials, shape 1)."""
        return events.repeat_and_select(events.zcdp(self.trial_rho), self.mean_trials, SHAPE)

    def to_dict(self) -> dict:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "adjacency": self.adjacency.value,
            "selection": "Papernot & Steinke 2022, Theorem 2: geometric number of trials, "
            "the best held-out score released",
            "mean_trials": self.mean_trials,
            "holdout": self.holdout,
            "trial_rho": self.trial_rho,
            "score_noise_multiplier": self.score_noise_multiplier,
            "single_trial_epsilon": self.single_trial_epsilon,
            "accountant_epsilon": self.accountant_epsilon,
            "grid": [
                {
                    "iterations": c.iterations,
                    "threshold": c.threshold,
                    "clip": PRIVATE_CLIP if c.clip is None else c.clip,
                    "noise_multiplier": c.noise_multiplier,
                }
                for c in self.configs
            ],
            "event": self.event(),
        }

    def guarantee(self) -> Guarantee:
        return Guarantee(
            notion=APPROXIMATE_DP,
            adjacency=self.adjacency,
            epsilon=self.accountant_epsilon,
            delta=self.delta,
            accountant=ACCOUNTANTS["rdp"] + ", repeat-and-select (Papernot & Steinke 2022)",
            event=self.event(),
        )


@validate_params(PARAMETER_CONSTRAINTS)
def tuned_dp_vi_params(
    epsilon: float,
    delta: float,
    *,
    n_topics: int,
    adjacency: Adjacency,
    max_docs_per_author: int,
    tune_iterations: str | int = "50,100",
    tune_thresholds: str | float = "1,2",
    tune_clips: str | float = 2.0,
    mean_trials: float = 2.0,
    holdout: float = 0.2,
    clip_quantile: float = _DP_VI["clip_quantile"],
    clip_share: float = _DP_VI["clip_share"],
    eta: float = _DP_VI["eta"],
    alpha: float = _DP_VI["alpha"],
    local_iterations: int = _DP_VI["local_iterations"],
    local_tolerance: float = _DP_VI["local_tolerance"],
    warm_start: float = _DP_VI["warm_start"],
    step_decay: float = _DP_VI["step_decay"],
    step_offset: float = _DP_VI["step_offset"],
    prior_weight: float = _DP_VI["prior_weight"],
) -> TunedParams:
    """Validate the grid, find the trials' common rho for (epsilon, delta), calibrate every
    configuration to it. Grids are comma-separated (``--m2-option tune_clips=2,private``);
    the other options pass to every trial's dp-vi, with dp-vi's own defaults.
    """
    epsilon = check_epsilon(epsilon, "M2 epsilon")
    delta = check_delta(delta, "M2 delta")
    grid = [(t, thr, c) for t in tune_iterations for thr in tune_thresholds for c in tune_clips]
    rho = trial_rho(epsilon, delta, mean_trials)
    trial_epsilon = events.epsilon_of(events.zcdp(rho), delta, "rdp")
    configs = tuple(
        dp_vi.dp_vi_params(
            trial_epsilon,
            delta,
            n_topics=n_topics,
            adjacency=adjacency,
            max_docs_per_author=max_docs_per_author,
            iterations=t,
            threshold=thr,
            clip=c,
            clip_quantile=clip_quantile,
            clip_share=clip_share,
            eta=eta,
            alpha=alpha,
            local_iterations=local_iterations,
            local_tolerance=local_tolerance,
            warm_start=warm_start,
            step_decay=step_decay,
            step_offset=step_offset,
            prior_weight=prior_weight,
        )
        for t, thr, c in grid
    )
    for c in configs:  # every trial's training is rho-zCDP (its RDP curve is lambda rho')
        used = c.iterations / (2.0 * c.noise_multiplier**2) + c.clip_rho
        if used > rho:
            raise RuntimeError(f"calibration failed: a configuration uses rho {used} > {rho}")
    event = events.repeat_and_select(events.zcdp(rho), float(mean_trials), SHAPE)
    achieved = events.epsilon_of(event, delta, "rdp")
    if not achieved <= epsilon:
        raise RuntimeError(f"calibration failed: epsilon {achieved} > target {epsilon}")
    return TunedParams(
        epsilon=epsilon,
        delta=delta,
        adjacency=adjacency,
        n_topics=n_topics,
        mean_trials=float(mean_trials),
        holdout=float(holdout),
        trial_rho=rho,
        configs=configs,
        accountant_epsilon=achieved,
        single_trial_epsilon=trial_epsilon,
    )


def trial_rho(epsilon: float, delta: float, mean_trials: float) -> float:
    """The largest rho (to a relative 1e-9) with RepeatAndSelect(zCDP(rho)) <= epsilon."""

    def eps(rho: float) -> float:
        event = events.repeat_and_select(events.zcdp(rho), mean_trials, SHAPE)
        return events.epsilon_of(event, delta, "rdp")

    lo = 1e-3
    while eps(lo) > epsilon:
        lo /= 4.0
        if lo < 1e-14:
            raise BadInputError(
                f"epsilon {epsilon} at delta {delta} is too small to tune over {mean_trials} "
                "trials; raise epsilon, or lower mean_trials, or release without --tune"
            )
    hi = lo * 4.0
    while eps(hi) <= epsilon:
        lo, hi = hi, hi * 4.0
    while hi / lo > 1.0 + _RHO_PRECISION:
        mid = math.sqrt(lo * hi)
        if eps(mid) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


def train_tuned_dp_vi(
    corpus: Corpus,
    n_topics: int,
    params: TunedParams,
    noise: NoiseSource,
    *,
    progress: Callable[[int], None] | None = None,
    public_topics: np.ndarray | None = None,
    released: dict | None = None,
) -> np.ndarray:
    """The winning trial's topic-word matrix (module docstring); ``released`` gets its
    configuration (and its private clipping norm). K and the scores stay inside."""
    train, test, test_units = split_units(corpus, params, noise.generator)
    trials = number_of_trials(params.mean_trials, noise.generator)
    best: tuple[float, np.ndarray, DpViParams, dict] | None = None
    for _ in range(trials):
        config = params.configs[int(noise.generator.integers(len(params.configs)))]
        info: dict = {}
        phi = dp_vi.train_dp_vi(
            train, n_topics, config, noise, public_topics=public_topics, released=info
        )
        score = heldout_score(phi, test, test_units, config, params, noise)
        if best is None or score > best[0]:
            best = (score, phi, config, info)
    _, phi, config, info = best
    if released is not None:
        released.update(
            {
                "iterations": config.iterations,
                "threshold": config.threshold,
                "clip": info.get("clip", config.clip),
            }
        )
    if progress:
        progress(1)
    return phi


def number_of_trials(mean: float, generator: np.random.Generator) -> int:
    """K ~ Geometric(1 / mean) on {1, 2, ...}: TNB(eta = 1, gamma = 1 / mean), mean ``mean``."""
    return int(generator.geometric(1.0 / mean))


def split_units(
    corpus: Corpus, params: TunedParams, generator: np.random.Generator
) -> tuple[Corpus, Corpus, np.ndarray]:
    """(training corpus with dense author codes, held-out corpus, its documents' units):
    every unit is held out independently with probability ``params.holdout``."""
    units = unit_codes(corpus, params.adjacency)
    n_units = int(units.max()) + 1 if len(units) else 0
    held = generator.random(n_units) < params.holdout
    train = _dense_units(subset(corpus, ~held[units]))
    return train, subset(corpus, held[units]), units[held[units]]


def unit_codes(corpus: Corpus, adjacency: Adjacency) -> np.ndarray:
    """Each document's privacy unit: its author at author level (when there are author
    ids), else the document itself."""
    if adjacency == Adjacency.DOCUMENT or corpus.doc_author is None:
        return np.arange(corpus.n_docs, dtype=np.int64)
    return np.asarray(corpus.doc_author, dtype=np.int64)


def _dense_units(corpus: Corpus) -> Corpus:
    """``corpus`` with its author codes renumbered 0..A-1 (no empty units)."""
    if corpus.doc_author is None:
        return corpus
    _, dense = np.unique(corpus.doc_author, return_inverse=True)
    return Corpus(corpus.doc_ptr, corpus.words, corpus.n_words, dense.astype(np.int64))


def heldout_score(
    phi: np.ndarray,
    test: Corpus,
    test_units: np.ndarray,
    config: DpViParams,
    params: TunedParams,
    noise: NoiseSource,
) -> float:
    """``heldout_total`` plus N(0, (z_s b)^2): the trial's private score."""
    total = heldout_total(phi, test, test_units, config.alpha)
    sigma = params.score_noise_multiplier * score_bound(phi.shape[1])
    return float(noise.add_gaussian(np.array([total]), sigma)[0])


def score_bound(n_words: int) -> float:
    """b = max(log V, 1): the most one held-out unit moves the score's total."""
    return max(math.log(n_words), 1.0)


def heldout_total(phi: np.ndarray, test: Corpus, test_units: np.ndarray, alpha: float) -> float:
    """sum over held-out units of clip(l_u + log V, -b, b); units without a scored token
    count 0. NOT private on its own."""
    if test.n_docs == 0:
        return 0.0
    loglik, scored = completion_logliks(phi, test, alpha=alpha)
    codes, owner = np.unique(test_units, return_inverse=True)
    unit_ll = np.bincount(owner, weights=loglik, minlength=len(codes))
    unit_n = np.bincount(owner, weights=scored, minlength=len(codes))
    has = unit_n > 0
    centred = unit_ll[has] / unit_n[has] + math.log(phi.shape[1])
    bound = score_bound(phi.shape[1])
    return math.fsum(np.clip(centred, -bound, bound))  # correctly rounded: order-free
