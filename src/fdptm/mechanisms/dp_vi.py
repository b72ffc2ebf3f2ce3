"""M2 ``dp-vi``: differentially private variational inference for LDA, author level.

What it is. Private variational inference in the spirit of Park, Foulds, Chaudhuri & Welling,
"Private topic modeling" (arXiv:1609.04120, 2016), the DP-VI baseline that
``dp-spectral-lda.txt`` compares against (section 7, Figures 2 and 4, reference [17]): the
expected sufficient statistics of variational LDA are perturbed with Gaussian noise in every
iteration, the iterations are composed by a moments (Renyi) accountant, and subsampling
amplifies privacy. Variational LDA (Blei et al. 2003, section 5; Hoffman, Blei & Bach 2010,
"Online learning for LDA", Algorithm 2) keeps a global variational parameter lambda (k x V)
of q(beta). Every iteration t = 0..T-1:

1. Poisson sampling of the privacy units: each unit (author) is included independently with
   probability q (``sampling_rate``; q = 1 uses every unit), drawn from the run's
   NoiseSource.
2. E-step on every document of a sampled unit with exp(E[log beta]) =
   exp(psi(lambda) - psi(lambda.sum(1))) computed once from the previous, already public,
   lambda: coordinate ascent on (gamma_d, phi_d) (``fdptm.kernels.vi.doc_e_step``) for at
   most ``local_iterations`` rounds, stopping early when gamma_d moves by less than
   ``local_tolerance`` on average (Hoffman's stopping rule). Optionally (``warm_start``
   < 1, with q = 1), late iterations start a document's coordinate ascent from its own
   gamma_d at the end of the previous iteration instead of alpha + n_d / k ("Warm starts"
   below).
3. Per unit a: S_a[k, w] = sum over a's documents d of n_dw phi_dwk, clipped in L2
   (Frobenius) norm to C (``clip``): clip(S_a) = S_a min(1, C / ||S_a||_2).
4. The Gaussian mechanism: S~_t = sum_a clip(S_a) + N(0, (z C)^2) on each of the k V
   entries, the whole matrix in one call of the NoiseSource. In production the sum is
   exact and so is the noise ("Exact sums" below): each unit's clip(S_a) is rounded towards
   zero to integers of a grid g of about C 2^-20, checked in integer arithmetic to have L2
   norm at most floor(C / g) units, summed in int64, and OpenDP's discrete Gaussian of
   scale z C / g is added to the integer sum before it is scaled back by g.
5. M-step, stochastic VI (Hoffman et al. 2010, Algorithm 2): with rho_t = (tau + t)^-kappa
   (``step_offset`` tau, ``step_decay`` kappa), the running estimate of the full-corpus
   statistic is A_t = (1 - rho_t) A_{t-1} + rho_t S~_t / q, and lambda_t = eta + A_t with
   every entry of A_t below ``threshold`` times its noise standard deviation set to 0.
   This is Hoffman's update lambda <- (1 - rho) lambda + rho (eta + S~ / q) with the
   flooring moved out of the recursion: the noise of successive iterations averages out
   (its standard deviation in A_t is sd_t, with sd_t^2 = (1 - rho_t)^2 sd_{t-1}^2 +
   (rho_t z C / q)^2, tracked exactly), and only then are entries that are not clearly
   above the noise discarded. Flooring each S~_t at 0 instead (the obvious fix for
   negative noisy counts) adds about 0.4 z C to every one of the k V entries, a floor that
   swamps sparse topics. With tau = 1, rho_0 = 1 and the random initial lambda is
   forgotten after the first E-step; with kappa = 0 the update is batch variational EM.

Public prior (optional; the OLP-LDA paper's public D0, hdp-lda-lp-lda-olp-lda.txt section VI,
and the n-gram paper's public prior both use public data this way). Given k x V topic-word
counts n^pub learned non-privately from a *public* dataset over the release's vocabulary,
the first E-step uses exp(E[log beta]) of lambda_0 = eta + n^pub (instead of a random
draw), so the private statistics are computed against the public topics, and every M-step
uses eta + w n^pub in place of eta (``prior_weight`` w; w = 1 treats the public documents
like private ones: the posterior of LDA on public + private data, up to the private side's
clipping and noise). Public data and DP outputs only: no privacy cost.

Private clipping norm (``clip="private"``; issue 10 asked for a DP quantile instead of a fixed
constant, as in Andrew, Thakkar, McMahan & Ramaswamy 2021, "Differentially private learning
with adaptive clipping", who clip at a private quantile of the update norms). Before the
first iteration C is set to the DP ``clip_quantile``-quantile of r_u = ||n_u||_2, the L2
norm of unit u's word counts over the vocabulary (``unit_norms``), over a public geometric
grid of candidates 0.25..1024 (``fdptm.privacy.quantile``: the exponential mechanism, OpenDP's
``make_private_quantile`` in production). r_u is the largest ||S_u|| any lambda can give
(column w of S_u sums to n_uw over the topics), it does not depend on lambda, so it is
measured once; clipping at its median bounds the sensitivity by the chosen C exactly as a
fixed C does, since C is then a public (DP) constant for the T Gaussian rounds. One value
per unit, so the quantile's add/remove guarantee is at the run's adjacency. Cost: the
quantile is rho_q-zCDP with rho_q = ``clip_share`` / (1 - clip_share) x T / (2 z^2), i.e.
``clip_share`` (default 5%) of the run's zCDP rho; the event is Composed(zCDP(rho_q),
SelfComposed(Gaussian(z), T)) and z is calibrated on it (about 2.6% more noise at 5%). Only
the RDP accountant composes a zCDP step, so ``clip="private"`` requires ``accountant=rdp``.
The chosen C is released in the manifest (``released_parameters``).

SAN's out-of-vocabulary token is not trained on (the registry's ``trains_on_oov``): it exists
for word-level mechanisms, which must keep document lengths; dp-vi's add/remove-unit
guarantee does not need it, and kept it took most of a short document's clipping budget and
pulled topics towards itself (benchmarks/dp_vi_grid_results.md). Dropping a document's OOV
tokens is a function of that document and the DP vocabulary alone.

All of step 5 is post-processing of the released S~_0..S~_t. The released topic-word matrix
is lambda_T with each row normalised (the posterior mean of beta), strictly positive since
lambda >= eta > 0.

Adjacency and sensitivity. ``author``: add or remove one author with all their documents
(units = ``corpus.doc_author``; every document is its own author when the corpus has no
author ids). ``document``: add or remove one document; every document is its own unit and
is clipped by itself. phi_dw sums to 1 over the topics, so the column sums of S_a are the
author's word counts and ||S_a||_1 = the number of the author's tokens. Without clipping
the L1 sensitivity of sum_a S_a (and its L2 sensitivity, as ||x||_2 <= ||x||_1 with
equality for an author whose tokens are one word in one topic) under add/remove of one
author is the largest author's token count: at most max_docs_per_author x
max_tokens_per_doc after contribution bounding, and unbounded without it. With clipping,
for neighbours D' = D + {a}, sum_{b in D'} clip(S_b) - sum_{b in D} clip(S_b) = clip(S_a):
every other unit's S_b depends only on b's own documents and on the public lambda (an
E-step never looks at another document), so its term is unchanged. Hence the L2
sensitivity is sup ||clip(S_a)||_2 = C, attained by any author with ||S_a|| >= C, for ANY
corpus: no assumption on document lengths or on the number of documents per author. It is
the clipping of each author's summed statistic, not of each document's, that gives author
level: clipping documents to C would leave an author with m documents a sensitivity of m C.
After dividing by C each iteration is the Gaussian mechanism with noise multiplier z on a
sensitivity-1 sum, and with Poisson sampling of units the Poisson-subsampled Gaussian
mechanism (sampling over the same unit as the adjacency).

Warm starts (``warm_start``, off by default). Hoffman et al. (2010) start every E-step
from a fixed gamma; with ``warm_start`` = w < 1 and q = 1, document d's E-step at iteration
t >= ceil(w T) starts from its final gamma_d of iteration t - 1 (kept as float32 with its
range of units, fixed for the run, on the thread's shard or on the Dask worker that holds
the range; identical documents of a range have the same gamma and keep one). Late
iterations move lambda little, so the ascent starts near its fixed point and stops sooner:
on a synthetic corpus of 100,000 documents of about 16 tokens (k = 10, epsilon 3, T = 20)
the mean number of E-step rounds per document and iteration fell from 12.5 to 9.5 with
w = 0.5 (counted with an instrumented copy of the kernel), and at 500,000 documents M2 took
0.79x the time on four paired seeds (``benchmarks/dp_vi_warm.md``). It is not free: a
document's coordinate ascent has local optima, and a warm start keeps it in the previous
iteration's basin where a cold start re-chooses. From t = 1 that holds documents to the
first, nearly random topics (without noise, on the recovery test's corpus, 8 seeds:
matched cosine 0.90-0.998, against 0.9991-0.9998 cold); from T / 2 the optimiser alone
does as well as cold (0.9988-0.9998), but on PHEME through the release pipeline (T = 100,
8 paired seeds) NPMI was lower on 7 of 8 seeds at epsilon 10 and on 5 of 8 at epsilon 3
(median -0.010 and -0.014), and two of the four 500,000-document seeds ended further from
the true topics (0.92 against 0.94, 0.88 against 0.90). So the default is w = 1 (every
E-step cold); w = 0.5 trades that small loss for about a fifth of M2's time.
Privacy is the same either way: gamma_d of iteration t - 1 is a function of d's own tokens
and of lambda_0..lambda_{t-2}, so S_u at iteration t is still a function of unit u's own
documents and of the public lambdas, which is all the sensitivity argument above and the
adaptive composition below use (the clip still bounds every unit's term by C). With
Poisson sampling (q < 1) the E-steps always start cold: a kept gamma would depend on which
earlier iterations included the unit, a secret of the sampling that the subsampled
Gaussian's analysis assumes each step draws afresh, so a warm start there would need an
analysis of its own.

Exact sums. A floating-point sum of N clipped terms is not a sum with sensitivity C: the
rounding of every later addition depends on whether one more unit was added before it, and
over N additions to an entry of size up to N C those differences can reach about N^2 2^-53 C
per entry (Casacuberta, Shoemate, Vadhan & Wagaman, "Widespread underestimation of
sensitivity in differentially private libraries", CCS 2022), which at millions of units is
no longer small against C; and a clipped norm computed in floating point can itself exceed C
by a few units in the last place. So each unit's term is rounded towards zero to integers of
the grid g = ``statistic_grid(C)`` (a power of two with C / g in [2^20, 2^21); the
manifest's ``statistic_grid``), its squared L2 norm is checked in exact integer arithmetic
against floor(C / g)^2 (``unit_bound``), its factor is cut by 2^-20 until it passes
(routinely once or twice when C / g is not a whole number, since the clip aims at C / g;
float rounding can need it too), and the terms are summed in int64, exactly and in any order
(the sums over ranges of units and over Dask workers give the same integers). Adding or
removing a unit moves the integer sum by exactly that unit's term, of L2 norm at most
floor(C / g) <= C / g. The exact discrete Gaussian on the integers at scale z C / g
(fdptm.privacy.exact, drawn one ulp above the float scale; or OpenDP's with ``--sampler
opendp``, its privacy map checked) is added to that exact sum, at a loss of at most floor(C
/ g)^2 / (2 (z C / g)^2) <= 1 / (2 z^2), and the noisy integers are converted to floating
point and multiplied by g only afterwards (post-processing). The discrete Gaussian is 1 / (2
z^2)-zCDP at that sensitivity (Canonne, Kamath & Steinke 2020), the curve the RDP accountant
composes when q = 1. The Poisson-subsampled RDP bound and the PLD accountant are derived for
the continuous Gaussian; the discrete one at a scale of at least 1e-3 x 2^20 grid units is
that distribution to within terms that decay like exp(-2 pi^2 sigma^2) in sigma grid units
(same paper), the approximation the rounded floating-point sampler this replaced relied on
as well. Rounding towards zero, and the cuts, lose at most a few g <= C 2^-20 per entry: a
few thousandths of the noise's standard deviation z C at the smallest z (1e-3), a few
millionths at z = 1. An entry of the int64 sum grows by less than 2^21 per unit, so it
cannot overflow below 2^42 (four trillion) units.

Composition. The E-step of iteration t is a function of the unit's own data and of
lambda_0..lambda_{t-1} only, and those are functions of the earlier noisy statistics and
of the data-independent initialisation, so a run is the adaptive composition of T
Poisson-subsampled Gaussian mechanisms: DpEvent SelfComposed(PoissonSampled(q, Gaussian(z)), T), or
SelfComposed(Gaussian(z), T) when q = 1. z is the smallest noise multiplier (to a relative
1e-6 for RDP, 1e-3 for PLD) for which the chosen accountant of the ``dp-accounting`` package,
with its add-or-remove-one neighbouring relation, gives epsilon <= the target at the target
delta; the accountant's epsilon at the final z is recomputed, checked and reported.
``rdp`` (default): dp_accounting.rdp.RdpAccountant (Mironov 2017; Mironov, Talwar & Zhang
2019 for the sampled Gaussian; orders 1.1..1024), a valid upper bound computed in
milliseconds, the standard "moments accountant" Park et al. use. ``pld``:
dp_accounting.pld.PLDAccountant, pessimistic discretisation 1e-4, also a valid upper bound
and 5-10% tighter in epsilon in our measurements, at a calibration cost of about a second
(``calibrated``: a coarse search, then the fine discretisation's check; tens of seconds
at a large epsilon). For
comparison the guarantee also carries basic composition: each iteration's Gaussian
mechanism at (eps_t, delta_t) by the analytic Gaussian mechanism (Balle & Wang 2018,
Theorem 8), amplified by Poisson subsampling to (log(1 + q (e^eps_t - 1)), q delta_t)
(Balle, Barthe & Gaboardi 2018, Theorem 8) when q < 1, delta_t = min(delta / (q T), 1/2),
summed over the T iterations.

Where the statistic is computed. Step 3's sum runs over ranges of units, each summed into
its own integer matrix, and the partial sums are added (``clipped_statistics``). The ranges
run on local threads (``local_chunks``: one per thread or two, from the thread count), or,
inside ``fdptm.parallel.on_cluster`` (``fdptm release --dask-address``), on a Dask cluster
(``statistic_chunks``: a function of the public k x V shape only): each range is scattered
once to a worker as its own corpus (``VariationalCorpus.units``), each iteration sends
exp(E[log beta]) and the inclusion mask, and the workers return their ranges' clipped sums.
The noise is drawn and added in the release process, once per iteration. Every unit's term
is the same kernel's arithmetic on the unit's own documents wherever it runs, and the
integer sum is exact in any grouping, so the released matrix is bit-identical for any
cut, thread count or cluster whose machines run the same numba, llvmlite and libm and whose
CPUs all have fused multiply-add or all lack it (the kernel fuses where it can:
``fdptm.kernels.vi._FAST``).

Timing. Within a range, documents with the same (word, count) pairs share one E-step
(``fdptm.kernels.vi``: an E-step is a function of the document's own content and public
values, so every copy's result is the same bit for bit); the unit's clipping and sum are
per unit as above. M2's running time, like that of every stage, follows the data (the
number of documents, their lengths, and now how many of them repeat, a sharper signal
than the counts alone); it is not part of
the release, whose manifest and files carry its date and never a time
(``tasks.release``), and the operator who sees the run's wall time holds the data anyway.

Defaults (public constants, never fitted to a run's data; measured on PHEME at document
level and on synthetic author-level corpora, 6 seeds). C = 2: once every unit is clipped,
signal and noise both scale with C, so the private result depends on eta / C and z only,
and a C at or below the typical ||S_a|| is the robust choice (a tweet of 9 distinct tokens
on one topic has ||S_a|| = 3; longer documents and authors with several have more).
Private runs were flat in C on the synthetic corpora and best for C in [1, 3] on PHEME
(C = 10 lost clearly there); without noise a larger C helps (clipping reweights authors),
so C = 2 is the compromise. eta = 0.01: under noise 0.01 beat 0.001, and without noise
larger values (0.05) flattened sparse topics relative to the clipped statistics. alpha =
0.1: sparse document-topic mixtures, as for short texts. local_iterations = 20 with
tolerance 1e-3 (gensim's stopping rule; the cap bounds an iteration's cost). kappa = 0.6,
tau = 1: in Hoffman's range (0.5, 1] with rho_0 = 1; 0.6 and 0.9 both clearly beat batch
EM (kappa = 0) at epsilon 1-10, 0.6 as good or better. threshold = 1: about 16% of
pure-noise entries survive (2.3% at 2, 0.1% at 3), but real words of sparse topics survive
too, and without OOV training that wins: on PHEME with six fresh seeds mean NPMI over
epsilon 1, 3 and 10 went from -0.31 at 3 to -0.10 at 2 (with m1_fraction 0.5;
``benchmarks/dp_vi_grid_results.md``), and on eight further paired seeds 1 beat 2 on every
seed at epsilon 3 (+0.10 NPMI) and on 7 of 8 at 10 (+0.05), lost on every seed at epsilon 1
(-0.05), kept more words above the floor and a better held-out likelihood at all three, and
raised the synthetic corpora's matched cosine in 8 of 9 cells
(``benchmarks/dp_vi_threshold_results.md``). At epsilon <= 1 ``threshold=2`` (or ``--tune``)
scores better NPMI. Iterations between
20 and 100, C, eta and the accountant moved NPMI by less than the seeds did. q = 1:
subsampling pays only with many iterations over many units; callers set it with
``sampling_rate``.

Where the papers are ambiguous or wrong. dp-spectral-lda.txt (Appendix J, "K. Evaluation")
states that each entry of the k x d statistic has sensitivity at most d/N and noises each
entry with that scale: that is neither a global bound (one document moves an entry by up
to its length, whatever N is) nor an L2 bound over the k d entries, and it is stated for
replace-one-document adjacency. As we read Park et al., their sensitivity concerns one
document's effect on the minibatch-averaged statistics (document level) and rests on the
normalisation of each document's word counts, not on a bound enforced for every input.
Neither gives author level.
Here the sensitivity comes from explicit per-unit L2 clipping, which holds for every
corpus; authors with many or long documents are down-weighted (a bias, the price of a
data-independent bound).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import dp_accounting
import numpy as np

from fdptm.errors import BadInputError
from fdptm.evaluation.significance import EntryNoise
from fdptm.kernels import vi
from fdptm.kernels.distinct import distinct_per_unit
from fdptm.mechanisms.constraints import (
    ITERATIONS,
    MAX_DOCS_PER_AUTHOR,
    N_TOPICS,
    NON_NEGATIVE,
    OPEN_FRACTION,
    POSITIVE,
    DatasetUnit,
    Integer,
    OneOf,
    Real,
    param,
    validate_params,
)
from fdptm.mechanisms.guarantee import APPROXIMATE_DP, Guarantee
from fdptm.mechanisms.lda import Corpus
from fdptm.parallel import Placed, cluster_address, workers
from fdptm.privacy import events, quantile
from fdptm.privacy.accountant import check_delta, check_epsilon
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.events import ACCOUNTANTS
from fdptm.privacy.noise import NoiseSource

SUPPORTED_ADJACENCY = (Adjacency.AUTHOR, Adjacency.DOCUMENT)
PRIVATE_CLIP = "private"

CLIP_RANGE = Real(1e-12, 1e12, closed="both")
"""Fixed clipping norms C accepted: the exact sum's grid is about C 2^-20 (``statistic_grid``),
and its reciprocal and the noisy values times it must stay far from f64's limits."""
PARAMETER_CONSTRAINTS = {
    "n_topics": N_TOPICS,
    "adjacency": param(
        DatasetUnit(SUPPORTED_ADJACENCY),
        what="dp-vi guarantees add/remove adjacency at author or document level",
    ),
    "max_docs_per_author": MAX_DOCS_PER_AUTHOR,
    "iterations": ITERATIONS,
    "clip": param(
        CLIP_RANGE,
        OneOf((PRIVATE_CLIP,)),
        what=f"the per-unit L2 bound C, or {PRIVATE_CLIP!r}",
        hint="C is summed exactly on a grid of about C 2^-20",
    ),
    "clip_quantile": param(
        OPEN_FRACTION,
        what="the quantile of the units' norms clip=private chooses",
        hint="0.5 clips at the median unit's word-count norm",
    ),
    "clip_share": param(
        OPEN_FRACTION, what="the private clipping norm's share of M2's zCDP budget"
    ),
    "sampling_rate": param(
        Real(0.0, 1.0, closed="right"),
        what="Poisson sampling probability of a unit",
        hint="1 uses every unit in every iteration",
    ),
    "eta": param(POSITIVE, what="the topic-word prior"),
    "alpha": param(
        Real(0.0, 1e6, closed="right"),
        what="the document-topic prior",
        hint="at most 1e6 (the E-step's digamma is exact to gamma of about 1e50)",
    ),
    "local_iterations": param(Integer(1), what="E-step rounds per document"),
    "local_tolerance": param(
        NON_NEGATIVE,
        what="the E-step's stopping tolerance",
        hint="0 always runs local_iterations rounds",
    ),
    "warm_start": param(
        Real(0.0, 1.0, closed="both"),
        what="the share of the iterations whose E-steps start cold",
        hint="later ones start from each document's previous gamma; 1 never does",
    ),
    "step_decay": param(
        Real(0.0, 1.0, closed="both"),
        what="kappa of rho_t = (offset + t)^-kappa",
        hint="0 is batch variational EM",
    ),
    "step_offset": param(
        Real(1.0, closed="left"),
        what="tau of rho_t = (tau + t)^-kappa",
        hint=">= 1 keeps every step size in (0, 1]",
    ),
    "threshold": param(
        NON_NEGATIVE,
        what="in noise standard deviations",
        hint="0 keeps every positive entry",
    ),
    "accountant": param(OneOf(tuple(sorted(ACCOUNTANTS))), what="the privacy accountant"),
    "prior_weight": param(POSITIVE, what="weight of a public prior's topic counts"),
}
"""Every option of ``dp_vi_params`` and what it accepts (``fdptm.mechanisms.constraints``)."""
CANDIDATES = np.asarray(quantile.GEOMETRIC_CANDIDATES)
_RELATIVE_PRECISION = {"rdp": 1e-6, "pld": 1e-3}
GRID_BITS = 20
"""The clipped statistic is summed exactly on a grid of about C 2^-GRID_BITS
(``statistic_grid``)."""
_MIN_NOISE_MULTIPLIER = 1e-3
_MAX_NOISE_MULTIPLIER = 1e7


@dataclass(frozen=True)
class DpViParams:
    """Privacy and model parameters of one dp-vi run; all are public functions of the inputs."""

    epsilon: float
    delta: float
    adjacency: Adjacency
    n_topics: int
    iterations: int
    clip: float | None
    sampling_rate: float
    noise_multiplier: float
    accountant: str
    accountant_epsilon: float
    basic_epsilon: float
    basic_delta: float
    eta: float
    alpha: float
    local_iterations: int
    local_tolerance: float
    warm_start: float
    step_decay: float
    step_offset: float
    threshold: float
    prior_weight: float = 1.0
    clip_quantile: float | None = None
    clip_share: float = 0.0
    clip_scale: float = 0.0

    @property
    def noise_std(self) -> float:
        """Standard deviation of the Gaussian noise on every entry of the statistic: z C."""
        if self.clip is None:
            raise ValueError("the clipping norm is chosen privately at training time")
        return self.noise_multiplier * self.clip

    @property
    def first_warm(self) -> int | None:
        """The first iteration whose E-steps start warm: ceil(warm_start x T), at least 1;
        None when none does (warm_start = 1, or Poisson sampling: module docstring, "Warm
        starts")."""
        first = max(1, math.ceil(self.warm_start * self.iterations - 1e-9))  # 0.28 x 25: 7
        if self.sampling_rate < 1.0 or first >= self.iterations:
            return None
        return first

    @property
    def clip_rho(self) -> float:
        """zCDP rho of the private clipping norm's quantile (0 with a fixed C)."""
        return clip_rho(self.noise_multiplier, self.iterations, self.clip_share)

    def event(self) -> dict:
        """The run's DpEvent: [the quantile's zCDP, then] T rounds of the Gaussian."""
        return dp_event(self.noise_multiplier, self.sampling_rate, self.iterations, self.clip_share)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["adjacency"] = self.adjacency.value
        d["noise_std"] = None if self.clip is None else self.noise_std
        d["statistic_grid"] = None if self.clip is None else statistic_grid(self.clip)
        if self.clip is None:
            d["clip"] = "private"
            d["clip_rho"] = self.clip_rho
            d["clip_epsilon"] = quantile.pure_epsilon(self.clip_quantile, self.clip_scale)
            d["clip_candidates"] = [CANDIDATES[0], CANDIDATES[-1], len(CANDIDATES)]
        d["event"] = self.event()
        d["accounting_assumes"] = continuous_accounting(self.accountant, self.sampling_rate)
        return d

    def guarantee(self) -> Guarantee:
        """(accountant epsilon, delta)-DP at the adjacency, with basic composition and event."""
        return gaussian_guarantee(self)


def clip_rho(noise_multiplier: float, iterations: int, clip_share: float) -> float:
    """rho of the clipping quantile: clip_share of the zCDP rho of the whole run.

    T unsampled rounds of the Gaussian with multiplier z are T / (2 z^2)-zCDP; the quantile
    gets rho_q with rho_q / (rho_q + T / (2 z^2)) = clip_share. Tying rho_q to z keeps the
    whole event a function of z, so one calibration fixes both. With Poisson sampling
    (q < 1) the rounds cost less than T / (2 z^2), so the quantile's real share is larger
    than clip_share; the accounting composes the actual events either way.
    """
    if clip_share == 0.0:
        return 0.0
    return clip_share / (1.0 - clip_share) * iterations / (2.0 * noise_multiplier**2)


def dp_event(
    noise_multiplier: float, sampling_rate: float, iterations: int, clip_share: float = 0.0
) -> dict:
    """T adaptive rounds of the (Poisson-subsampled, when q < 1) Gaussian mechanism, after
    the private clipping norm's quantile (a zCDP step) when ``clip_share`` > 0."""
    step = events.gaussian(noise_multiplier)
    if sampling_rate < 1.0:
        step = events.poisson_sampled(step, sampling_rate)
    rounds = events.self_composed(step, iterations)
    if clip_share == 0.0:
        return rounds
    rho_q = clip_rho(noise_multiplier, iterations, clip_share)
    return events.composed(events.zcdp(rho_q), rounds)


def accountant_epsilon(
    event: dict, delta: float, accountant: str, interval: float = events.PLD_INTERVAL
) -> float:
    """epsilon at ``delta`` of ``event`` under the add-or-remove-one relation (``interval``:
    the PLD accountant's discretisation)."""
    return events.epsilon_of(event, delta, accountant, interval)


def calibrate_noise_multiplier(
    epsilon: float,
    delta: float,
    sampling_rate: float,
    iterations: int,
    accountant: str,
    *,
    start: float = 1.0,
    step: float = 2.0,
    precision: float | None = None,
    clip_share: float = 0.0,
    interval: float = events.PLD_INTERVAL,
) -> float:
    """Smallest z (to a relative ``precision``, by default the accountant's) with
    epsilon(z) <= ``epsilon``.

    Bisection (geometric) on a bracket [lo, hi] with eps(lo) > target >= eps(hi) found by
    doubling from ``start`` (the last value doubled is then lo), or by dividing it by
    ``step`` (squared after each division that still meets the target, up to 2: a
    ``start`` known to be close needs one or two evaluations); returns hi, so the result
    always meets the target (hi only ever moves to values where that was checked).
    epsilon(z) is non-increasing. ``interval``: the PLD accountant's discretisation.
    """
    if not (start > 0.0 and step > 1.0) or (precision is not None and not precision > 0.0):
        raise ValueError(
            f"start and precision must exceed 0 and step 1, got {start}, {precision}, {step}"
        )
    precision = _RELATIVE_PRECISION[accountant] if precision is None else precision

    def eps(z: float) -> float:
        event = dp_event(z, sampling_rate, iterations, clip_share)
        return accountant_epsilon(event, delta, accountant, interval)

    hi, missed = start, None
    while eps(hi) > epsilon:
        missed, hi = hi, hi * 2.0
        if hi > _MAX_NOISE_MULTIPLIER:
            raise BadInputError(
                f"no noise multiplier up to {_MAX_NOISE_MULTIPLIER:g} reaches epsilon {epsilon} "
                f"at delta {delta} over {iterations} iterations; raise epsilon or delta, or "
                "use fewer iterations or a smaller sampling_rate"
            )
    if missed is not None:
        lo = missed
    else:
        lo = hi / step
        while eps(lo) <= epsilon:
            if lo <= _MIN_NOISE_MULTIPLIER:
                return lo  # the target is so loose that negligible noise already meets it
            step = min(step * step, 2.0)
            hi, lo = lo, lo / step
    while hi / lo > 1.0 + precision:
        mid = math.sqrt(lo * hi)
        if eps(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi


_COARSE_PLD_INTERVAL = 1e-3
"""The PLD discretisation of ``calibrated``'s first search: ten times ``events.PLD_INTERVAL``
and 2-7 times cheaper per evaluation (measured by review, 2026-11-30); its z is then
checked, and refined where needed, at the fine interval."""
_COARSE_PLD_PRECISION = 1e-5
"""The relative precision of that first search, a hundredth of the fine search's: its z
then sits so close to the coarse optimum that the fine search's first step (dividing by
1 + its precision) usually lands below the fine optimum, and the fine search ends there
(90 of 96 cases over epsilon 0.3-30, q 0.01-1, T 1-1000, in the review's grid)."""


@functools.lru_cache(maxsize=256)
def calibrated(
    epsilon: float,
    delta: float,
    sampling_rate: float,
    iterations: int,
    accountant: str,
    clip_share: float = 0.0,
) -> tuple[float, float]:
    """(z, the accountant's epsilon at z) for ``dp_event`` under ``accountant`` (``pld``,
    the tighter bound, has no private-clip form: ``_check_clip`` refuses it); the epsilon
    recomputed and checked against the target.

    The PLD search runs first at ``_COARSE_PLD_INTERVAL``, then at the fine interval from
    its z, dividing by 1 + the precision first: the fine search's first two evaluations
    (the coarse z meets the target, and the z just below it does not) usually end it, with
    the fine search's precision (at T = 100 here: 3.6 s to 0.6 s; 6.8 s to 0.8 s with
    q = 0.5, where the RDP search this one used to start from took 4.5 s of them; a large
    epsilon, whose PLD is wide, still takes tens of seconds).
    Whatever the coarse search gives, the z returned is one the fine accountant was checked
    at. A pure function of public parameters, kept for the process (``lru_cache``):
    releases and plans with the same parameters calibrate once."""
    if accountant == "pld":
        # a start near the answer (small z are the dearest to evaluate): RDP without
        # sampling, which needs at least as much noise, takes milliseconds; where even it
        # finds no z (a tiny epsilon that only sampling reaches), sampled RDP, as before
        try:
            start = calibrate_noise_multiplier(
                epsilon, delta, 1.0, iterations, "rdp", precision=0.01
            )
        except BadInputError:
            start = calibrate_noise_multiplier(
                epsilon, delta, sampling_rate, iterations, "rdp", precision=0.01
            )
        args = (epsilon, delta, sampling_rate, iterations, "pld")
        z = calibrate_noise_multiplier(
            *args,
            start=start,
            precision=_COARSE_PLD_PRECISION,
            interval=_COARSE_PLD_INTERVAL,
        )
        z = calibrate_noise_multiplier(*args, start=z, step=1.0 + _RELATIVE_PRECISION["pld"])
    else:
        z = calibrate_noise_multiplier(
            epsilon, delta, sampling_rate, iterations, accountant, clip_share=clip_share
        )
    event = dp_event(z, sampling_rate, iterations, clip_share)
    achieved = accountant_epsilon(event, delta, accountant)
    if not achieved <= epsilon:
        raise RuntimeError(f"calibration failed: epsilon {achieved} > target {epsilon}")
    return z, achieved


class CalibratedGaussian(Protocol):
    """What ``gaussian_guarantee`` reads: the fields dp-vi's and biterm's parameters share."""

    adjacency: Adjacency
    delta: float
    accountant: str
    accountant_epsilon: float
    basic_epsilon: float
    basic_delta: float

    def event(self) -> dict: ...


def continuous_accounting(accountant: str, sampling_rate: float) -> str | None:
    """What the manifest must say when the accounting is not proved for the sampler that
    runs (issue 29's review, item 5): RDP at q = 1 composes the discrete Gaussian's own
    zCDP (Canonne, Kamath & Steinke 2020); the PLD accountant and the Poisson-subsampled RDP
    bound are derived for the continuous Gaussian. None when nothing is assumed."""
    reasons = []
    if accountant == "pld":
        reasons.append("the PLD accountant")
    if sampling_rate < 1.0:
        reasons.append(f"the Poisson-subsampled (q = {sampling_rate:g}) RDP bound")
    if not reasons:
        return None
    return (
        f"{' and '.join(reasons)} are derived for the continuous Gaussian; the noise drawn is "
        "the discrete Gaussian (the sampler is the noise block's), whose privacy curve there "
        "is not proved here (its zCDP, "
        "which RDP composes at sampling rate 1, is); use accountant=rdp and sampling_rate=1 "
        "for a guarantee proved for the sampler that runs"
    )


def gaussian_guarantee(params: CalibratedGaussian) -> Guarantee:
    """(accountant epsilon, delta)-DP at the adjacency, with basic composition and the
    event, of a run calibrated by ``calibrated`` (dp-vi's, biterm's parameters)."""
    return Guarantee(
        notion=APPROXIMATE_DP,
        adjacency=params.adjacency,
        epsilon=params.accountant_epsilon,
        delta=params.delta,
        accountant=ACCOUNTANTS[params.accountant],
        basic_epsilon=params.basic_epsilon,
        basic_delta=params.basic_delta,
        event=params.event(),
    )


def basic_composition(
    noise_multiplier: float,
    sampling_rate: float,
    iterations: int,
    delta: float,
    clip_epsilon: float = 0.0,
) -> tuple[float, float]:
    """(epsilon, delta) of T rounds by basic composition of per-round (eps_t, delta_t), plus
    the pure ``clip_epsilon`` of a private clipping norm's quantile.

    delta_t = min(delta / (q T), 1/2); eps_t is the analytic Gaussian mechanism's epsilon at
    delta_t (Balle & Wang 2018). When q < 1 each round is amplified by Poisson subsampling
    to (log(1 + q (e^eps_t - 1)), q delta_t) (Balle, Barthe & Gaboardi 2018), computed as
    eps_t + log(1 - (1 - q)(1 - e^-eps_t)) so that it cannot overflow.
    """
    delta_t = min(delta / (sampling_rate * iterations), 0.5)
    eps_t = float(dp_accounting.get_epsilon_gaussian(noise_multiplier, delta_t))
    if sampling_rate < 1.0:
        eps_t += math.log1p((1.0 - sampling_rate) * math.expm1(-eps_t))
        delta_t *= sampling_rate
    return iterations * eps_t + clip_epsilon, iterations * delta_t


@validate_params(PARAMETER_CONSTRAINTS)
def dp_vi_params(
    epsilon: float,
    delta: float,
    *,
    n_topics: int,
    adjacency: Adjacency,
    max_docs_per_author: int,
    iterations: int,
    clip: float | str = 2.0,
    clip_quantile: float = 0.5,
    clip_share: float = 0.05,
    sampling_rate: float = 1.0,
    eta: float = 0.01,
    alpha: float = 0.1,
    local_iterations: int = 20,
    local_tolerance: float = 1e-3,
    warm_start: float = 1.0,
    step_decay: float = 0.6,
    step_offset: float = 1.0,
    threshold: float = 1.0,
    accountant: str = "rdp",
    prior_weight: float = 1.0,
) -> DpViParams:
    """Validate the public inputs and calibrate the noise so the run is (epsilon, delta)-DP.

    ``max_docs_per_author`` is accepted for the common interface and not needed: the
    per-unit clipping bounds the sensitivity by C whatever the number of documents.
    ``clip`` is C, or ``"private"``: C is then the DP ``clip_quantile``-quantile of the
    units' word-count norms at training time, on ``clip_share`` of the run's zCDP budget
    (module docstring, "Private clipping norm").
    """
    epsilon = check_epsilon(epsilon, "M2 epsilon")
    delta = check_delta(delta, "M2 delta")
    private_clip = _check_clip(clip, accountant)
    share = clip_share if private_clip else 0.0
    z, achieved = calibrated(epsilon, delta, sampling_rate, iterations, accountant, share)
    scale = 0.0
    if private_clip:
        scale = quantile.scale_for(clip_quantile, clip_rho(z, iterations, share))
    basic_eps, basic_delta = basic_composition(
        z,
        sampling_rate,
        iterations,
        delta,
        quantile.pure_epsilon(clip_quantile, scale) if private_clip else 0.0,
    )
    return DpViParams(
        epsilon=epsilon,
        delta=delta,
        adjacency=adjacency,
        n_topics=n_topics,
        iterations=iterations,
        clip=None if private_clip else float(clip),
        sampling_rate=float(sampling_rate),
        noise_multiplier=z,
        accountant=accountant,
        accountant_epsilon=achieved,
        basic_epsilon=basic_eps,
        basic_delta=basic_delta,
        eta=float(eta),
        alpha=float(alpha),
        local_iterations=int(local_iterations),
        local_tolerance=float(local_tolerance),
        warm_start=float(warm_start),
        step_decay=float(step_decay),
        step_offset=float(step_offset),
        threshold=float(threshold),
        prior_weight=float(prior_weight),
        clip_quantile=float(clip_quantile) if private_clip else None,
        clip_share=float(share),
        clip_scale=scale,
    )


def _check_clip(clip: float | str, accountant: str) -> bool:
    """Whether C is chosen privately; BadInputError when the accountant cannot compose it."""
    if clip != PRIVATE_CLIP:
        return False
    if accountant != "rdp":
        raise BadInputError(
            "clip=private composes a zCDP quantile, which only the 'rdp' accountant can "
            "account for; use accountant=rdp or a fixed clip"
        )
    return True


@dataclass(frozen=True)
class VariationalCorpus:
    """A corpus as (doc, word, count) triples, with its documents grouped by privacy unit.

    Document d owns ``words[doc_ptr[d]:doc_ptr[d + 1]]`` (distinct, ascending) and their
    ``counts``; unit u owns the documents ``unit_docs[unit_ptr[u]:unit_ptr[u + 1]]``.
    """

    doc_ptr: np.ndarray
    words: np.ndarray
    counts: np.ndarray
    unit_ptr: np.ndarray
    unit_docs: np.ndarray
    n_words: int

    @property
    def n_units(self) -> int:
        return len(self.unit_ptr) - 1

    def units(self, start: int, stop: int) -> VariationalCorpus:
        """Units [start, stop) as a corpus of their own: their documents renumbered in unit
        order, with the same words and counts (what one Dask worker holds)."""
        docs = self.unit_docs[self.unit_ptr[start] : self.unit_ptr[stop]]
        lengths = self.doc_ptr[docs + 1] - self.doc_ptr[docs]
        doc_ptr = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=doc_ptr[1:])
        take = np.repeat(self.doc_ptr[docs] - doc_ptr[:-1], lengths) + np.arange(doc_ptr[-1])
        return VariationalCorpus(
            doc_ptr,
            self.words[take],
            self.counts[take],
            self.unit_ptr[start : stop + 1] - self.unit_ptr[start],
            np.arange(len(docs), dtype=np.int64),
            self.n_words,
        )


def prepare(corpus: Corpus, adjacency: Adjacency) -> VariationalCorpus:
    """Compress the tokens to triples (``fdptm.kernels.distinct``: memory follows the
    distinct (document, word) pairs) and group documents by privacy unit.

    Units are the authors at author level (every document its own author when the corpus
    has no author ids) and the documents at document level. Authors are renumbered densely,
    so a unit is an author with at least one document here: an author whose documents
    were all dropped upstream (SAN's OOV-only documents) is no unit, whatever its code, and
    adding or removing one author adds or removes at most one unit (which the private
    clipping norm's quantile relies on).
    """
    check_corpus(corpus)
    every = np.arange(corpus.n_docs + 1, dtype=np.int64)
    doc_ptr, words, counts = distinct_per_unit(every, every[:-1], corpus.doc_ptr, corpus.words)
    unit_ptr, unit_docs = unit_layout(corpus, adjacency)
    return VariationalCorpus(doc_ptr, words, counts, unit_ptr, unit_docs, corpus.n_words)


def unit_layout(corpus: Corpus, adjacency: Adjacency) -> tuple[np.ndarray, np.ndarray]:
    """(unit_ptr, unit_docs): unit u owns the documents unit_docs[unit_ptr[u]:unit_ptr[u + 1]]
    (``prepare``: authors renumbered densely at author level, else one unit per document)."""
    n_docs = corpus.n_docs
    if adjacency == Adjacency.DOCUMENT or corpus.doc_author is None:
        return np.arange(n_docs + 1, dtype=np.int64), np.arange(n_docs, dtype=np.int64)
    codes, authors = np.unique(np.asarray(corpus.doc_author), return_inverse=True)
    unit_docs = np.argsort(authors, kind="stable").astype(np.int64)
    unit_ptr = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum(np.bincount(authors, minlength=len(codes)), out=unit_ptr[1:])
    return unit_ptr, unit_docs


def check_corpus(corpus: Corpus) -> None:
    """Reject corpora the kernels cannot index safely. A corpus without tokens is not
    refused: it trains to noise around eta, as every corpus does, so whether a release fails
    never depends on the data (the budget is spent when M2 starts)."""
    if corpus.n_tokens and (corpus.words.min() < 0 or corpus.words.max() >= corpus.n_words):
        raise BadInputError(f"word ids must lie in [0, {corpus.n_words}); the corpus is corrupt")
    if corpus.doc_author is not None and (
        len(corpus.doc_author) != corpus.n_docs or (corpus.n_docs and np.min(corpus.doc_author) < 0)
    ):
        raise BadInputError(
            "doc_author must hold one author code >= 0 per document; the corpus is corrupt"
        )


def unit_norms(data: VariationalCorpus) -> np.ndarray:
    """||n_u||_2 of every unit's word counts (summed over its documents): the largest
    ||S_u||_2 any lambda can give, since S_u's column w sums to n_uw over the topics.

    NOT private on its own: the input of the private quantile.
    """
    unit_of_doc = np.empty(len(data.doc_ptr) - 1, dtype=np.int64)
    unit_of_doc[data.unit_docs] = np.repeat(np.arange(data.n_units), np.diff(data.unit_ptr))
    token_unit = np.repeat(unit_of_doc, np.diff(data.doc_ptr))
    keys, inverse = np.unique(token_unit * data.n_words + data.words, return_inverse=True)
    per_word = np.bincount(inverse, weights=data.counts, minlength=len(keys))
    return np.sqrt(np.bincount(keys // data.n_words, weights=per_word**2, minlength=data.n_units))


def private_clip(data: VariationalCorpus, params: DpViParams, noise: NoiseSource) -> float:
    """C = the DP ``clip_quantile``-quantile of ``unit_norms`` over the public CANDIDATES.

    One value per privacy unit, so adding or removing a unit adds or removes one value:
    the quantile's add/remove guarantee (rho = ``params.clip_rho``) is at the run's
    adjacency.
    """
    return noise.private_quantile(
        unit_norms(data), CANDIDATES, params.clip_quantile, params.clip_scale, params.clip_rho
    )


def exp_elog_beta(lam: np.ndarray) -> np.ndarray:
    """exp(E[log beta]) under q(beta_k) = Dir(lambda_k), for ``lam`` stored words x topics."""
    return vi.exp_elog_beta(np.ascontiguousarray(lam, dtype=np.float64))


def sample_units(generator: np.random.Generator, n_units: int, rate: float) -> np.ndarray:
    """Poisson sampling: unit u is included independently with probability ``rate``."""
    if rate >= 1.0:
        return np.ones(n_units, dtype=np.bool_)
    return generator.random(n_units) < rate


@dataclass(frozen=True)
class UnitShard:
    """The units [start, stop) of a corpus, for ``shard_statistic``: ``data`` is the whole
    corpus (``offset`` 0; local threads share it) or only these units (``offset`` = start;
    ``VariationalCorpus.units``, what a Dask worker holds). ``slots`` gives the shard's
    documents, in unit order, one slot per distinct content (``vi.document_slots``: each
    slot's E-step runs once per iteration; the first ``shared`` slots hold repeats)."""

    data: VariationalCorpus
    start: int
    stop: int
    offset: int
    slots: np.ndarray
    n_slots: int
    shared: int


def unit_shards(data: VariationalCorpus, edges: np.ndarray, own: bool) -> list[UnitShard]:
    """One shard per range [edges[c], edges[c + 1]); ``own``: each with its own copy of its
    units (to be scattered to a cluster) instead of views of ``data``."""
    shards = []
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        held, offset = (data.units(a, b), a) if own else (data, 0)
        docs = held.unit_docs[held.unit_ptr[a - offset] : held.unit_ptr[b - offset]]
        slots = vi.document_slots(held.doc_ptr, held.words, held.counts, docs)
        shards.append(UnitShard(held, a, b, offset, *slots))
    return shards


def shard_statistic(
    shard: UnitShard,
    beta: np.ndarray,
    included: np.ndarray,
    alpha: float,
    local_iterations: int,
    local_tolerance: float,
    clip: float,
    gammas: np.ndarray | None = None,
    warm: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(sum over the shard's included units of clip(S_u, C) in integer grid units, as
    ``clipped_statistics``; ||S_u||_2 of its units).

    ``gammas``: one float32 row per slot of the shard (``UnitShard.slots``), where the
    E-steps' final gammas are kept (and, with ``warm``, start from); None keeps nothing.
    The same kernel over the same units in the same order whether the shard is a view of
    the corpus or its own copy, so the partial sum is bit-identical either way."""
    data, lo = shard.data, shard.start - shard.offset
    partial = np.zeros(beta.shape, dtype=np.int64)
    norms = np.zeros(shard.stop - shard.start)
    if gammas is None:
        gammas = np.empty((0, beta.shape[1]), dtype=np.float32)
    vi.clipped_statistics(
        lo,
        lo + shard.stop - shard.start,
        data.unit_ptr,
        data.unit_docs,
        shard.slots,
        shard.n_slots,
        shard.shared,
        data.doc_ptr,
        data.words,
        data.counts,
        beta,
        alpha,
        local_iterations,
        local_tolerance,
        included[shard.offset : shard.offset + data.n_units],
        clip,
        1.0 / statistic_grid(clip),
        unit_bound(clip) ** 2,
        partial,
        norms,
        gammas,
        warm,
    )
    return partial, norms


def warm_shard_statistic(
    shard: UnitShard, gammas: np.ndarray | None, beta: np.ndarray, *args: object
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """``shard_statistic`` with the shard's gammas (one per slot) kept between iterations
    (``Placed.map_stateful``): the first call starts cold and creates them, every later
    call starts each slot's E-step from its gamma of the previous iteration."""
    warm = gammas is not None
    if gammas is None:
        gammas = np.zeros((shard.n_slots, beta.shape[1]), dtype=np.float32)
    return shard_statistic(shard, beta, *args, gammas=gammas, warm=warm), gammas


@functools.lru_cache(maxsize=256)
def statistic_grid(clip: float) -> float:
    """The grid g of the exact sum: the power of two with C / g in [2^GRID_BITS,
    2^(GRID_BITS + 1)) (a public function of C; C within ``CLIP_RANGE``). Each unit adds
    its clipped term in whole grid units, rounded towards zero, with L2 norm at most
    ``unit_bound(C)`` units. Cached: every chunk of every iteration asks (the range check
    alone was a tenth of an audit's time holding the GIL)."""
    if not CLIP_RANGE.accepts(clip):
        raise ValueError(f"the clipping norm {clip!r} is outside {CLIP_RANGE.describe()}")
    _, exponent = math.frexp(clip)  # clip = m 2^exponent, 1/2 <= m < 1
    return math.ldexp(1.0, exponent - GRID_BITS - 1)


@functools.lru_cache(maxsize=256)
def unit_bound(clip: float) -> int:
    """floor(C / g): the largest L2 norm, in grid units, of one unit's term of the exact sum
    (the kernel checks each term against its square), and so the integer sum's L2
    sensitivity, which the noise is calibrated to."""
    return math.floor(clip / statistic_grid(clip))


def placed_shards(data: VariationalCorpus, shape: tuple[int, int]) -> Placed:
    """The corpus cut into unit ranges, placed where the statistics run (``fdptm.parallel``):
    on a Dask cluster ``statistic_chunks(shape)`` ranges, each copied to a worker; here
    ``local_chunks(shape)`` ranges on the threads. The integer sum is exact, so the result
    is the same for any cut."""
    own = cluster_address() is not None
    chunks = statistic_chunks(shape) if own else local_chunks(shape)
    edges = np.linspace(0, data.n_units, chunks + 1).astype(np.int64)
    return Placed(unit_shards(data, edges, own=own))


def local_chunks(shape: tuple[int, int]) -> int:
    """Ranges for this process's threads: one when it has one, else two per thread (a
    little balancing when one core is slowed) within ``statistic_chunks``' memory bound.
    Every range is a kernel call that takes the GIL back when it returns; at 32 ranges an
    iteration of a small corpus (an audit's PHEME halves: about 3 ms) spent more time
    queueing for the GIL than computing (benchmarks/audit_results.md)."""
    threads = workers()
    return 1 if threads == 1 else min(statistic_chunks(shape), 2 * threads)


def clipped_statistics(
    data: VariationalCorpus,
    beta: np.ndarray,
    params: DpViParams,
    included: np.ndarray,
    placed: Placed | None = None,
    warm: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """sum over included units of clip(S_u, C) (words x topics) in integer units of
    ``statistic_grid(C)`` (int64: each unit's term rounded towards zero and checked to have
    L2 norm at most floor(C / g) units, the terms summed exactly), and every ||S_u||_2.

    NOT private on its own: this is the statistic before the Gaussian noise.

    The units are cut into ranges (``placed``, or placed here: ``placed_shards``), each
    summed into its own matrix on the worker threads or the Dask workers, and the partial
    sums are added here: integers, so the result does not depend on the cut or on the
    number of threads or workers. ``warm``: ``placed`` keeps every slot's gamma from one call to
    the next and each E-step starts from it (``warm_shard_statistic``).
    """
    if warm and not included.all():
        raise ValueError(
            "warm starts need every unit in every iteration: a kept gamma would depend on "
            "the secret sampling history (module docstring, 'Warm starts')"
        )
    own = placed is None
    if own:
        placed = placed_shards(data, beta.shape)
    try:
        results = (placed.map_stateful if warm else placed.map)(
            warm_shard_statistic if warm else shard_statistic,
            beta,
            included,
            params.alpha,
            params.local_iterations,
            params.local_tolerance,
            params.clip,
        )
    finally:
        if own:
            placed.close()
    stats = results[0][0]
    for partial, _ in results[1:]:
        stats += partial
    return stats, np.concatenate([norms for _, norms in results])


def statistic_chunks(shape: tuple[int, int]) -> int:
    """How many unit ranges ``clipped_statistics`` sums separately on a Dask cluster (and
    the most on local threads): 32, fewer when 32 partial words x topics matrices would
    pass 256 MB. A function of the (public) matrix shape only."""
    return int(max(1, min(32, (256 << 20) // (8 * shape[0] * shape[1]))))


def noisy_statistics(
    data: VariationalCorpus,
    beta: np.ndarray,
    params: DpViParams,
    noise: NoiseSource,
    placed: Placed | None = None,
    warm: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """One iteration's private release: Poisson-sample units, clip, sum exactly, add the
    discrete Gaussian of standard deviation about z C (scale z C / g in grid units g).

    Returns the noisy statistic (words x topics) and the inclusion mask (which is not
    released; it is returned for tests of the sampling). ``warm``: as in
    ``clipped_statistics``.
    """
    included = sample_units(noise.generator, data.n_units, params.sampling_rate)
    stats, _ = clipped_statistics(data, beta, params, included, placed, warm)
    grid = statistic_grid(params.clip)
    scale = params.noise_multiplier * params.clip / grid  # z C in grid units (g: a power of 2)
    noisy = noise.add_integer_gaussian(stats, scale, unit_bound(params.clip))
    return noisy * grid, included


def step_size(params: DpViParams, t: int) -> float:
    """rho_t = (tau + t)^-kappa for the 0-based iteration t; rho_0 = 1 when tau = 1."""
    return (params.step_offset + t) ** -params.step_decay


def topic_parameters(
    average: np.ndarray, noise_sd: float, params: DpViParams, eta: np.ndarray | float
) -> np.ndarray:
    """lambda = eta + the averaged statistic, entries below threshold x its noise sd set to 0.

    ``eta`` is the scalar prior, or eta + w n^pub (words x topics) with a public prior.
    """
    return eta + np.where(average > params.threshold * noise_sd, average, 0.0)


def train_dp_vi(
    corpus: Corpus,
    n_topics: int,
    params: DpViParams,
    noise: NoiseSource,
    *,
    progress: Callable[[int], None] | None = None,
    public_topics: np.ndarray | None = None,
    released: dict | None = None,
) -> np.ndarray:
    """T iterations of private VI; returns the DP topic-word matrix (topics x words).

    lambda starts from Gamma(100, 1/100) draws (Hoffman et al.'s initialisation, data
    independent), or from eta + ``public_topics`` (k x V counts learned from public data
    over the same columns: the module docstring's public prior). The iterations follow the
    module docstring; every row of the result is lambda_k / sum(lambda_k): strictly positive
    (lambda >= eta > 0) and summing to 1. With ``clip="private"`` the DP clipping norm is
    chosen first and written to ``released["clip"]`` (a DP output, for the manifest).
    """
    if n_topics != params.n_topics:
        raise BadInputError(
            f"the parameters were calibrated for {params.n_topics} topics, not {n_topics}; "
            "compute them again with dp_vi_params(n_topics=...)"
        )
    data = prepare(corpus, params.adjacency)
    if params.clip is None:
        chosen = private_clip(data, params, noise)
        params = replace(params, clip=chosen)
        if released is not None:
            released["clip"] = chosen
    if public_topics is None:
        eta: np.ndarray | float = params.eta
        lam = noise.generator.gamma(100.0, 1.0 / 100.0, (corpus.n_words, n_topics))
    else:
        counts = np.asarray(public_topics, dtype=np.float64)
        if counts.shape != (n_topics, corpus.n_words) or not np.all(counts >= 0):
            raise BadInputError(
                f"public_topics must be {n_topics} x {corpus.n_words} counts >= 0, got shape "
                f"{counts.shape}"
            )
        eta = params.eta + params.prior_weight * counts.T
        lam = params.eta + counts.T
    average = np.zeros_like(lam)
    noise_var = 0.0
    first_warm = params.first_warm
    with placed_shards(data, lam.shape) as placed:
        for t in range(params.iterations):
            keep = first_warm is not None and t >= first_warm - 1  # the gammas to start from
            noisy, _ = noisy_statistics(data, exp_elog_beta(lam), params, noise, placed, keep)
            noise_var = _average_in(average, noise_var, noisy, step_size(params, t), params)
            lam = topic_parameters(average, math.sqrt(noise_var), params, eta)
            if progress:
                progress(1)
    phi = lam.T
    return phi / phi.sum(axis=1, keepdims=True)


def released_noise_sd(params: DpViParams, clip: float) -> float:
    """The standard deviation of the noise in each entry of A_T, the averaged statistic the
    release is made of: sd_t^2 = (1 - rho_t)^2 sd_{t-1}^2 + (rho_t z C / q)^2 over the T
    iterations (module docstring, step 5), from public parameters and the clip used."""
    std = params.noise_multiplier * clip / params.sampling_rate
    variance = 0.0
    for t in range(params.iterations):
        variance = _next_variance(variance, step_size(params, t), std)
    return math.sqrt(variance)


def entry_noise(params: DpViParams, released: dict) -> EntryNoise:
    """Each released entry is eta (plus a public prior's weighted counts, which only raise
    it) + A_kw, A_kw's noise Gaussian with ``released_noise_sd`` (the discrete Gaussian in
    production), entries below threshold x that sd set to 0 (``topic_parameters``)."""
    clip = params.clip if params.clip is not None else released["clip"]
    return EntryNoise("gaussian", released_noise_sd(params, clip), params.eta)


def _average_in(
    average: np.ndarray, noise_var: float, noisy: np.ndarray, rho: float, params: DpViParams
) -> float:
    """A <- (1 - rho) A + rho S~ / q in place; returns the noise variance of the new A."""
    average *= 1.0 - rho
    average += (rho / params.sampling_rate) * noisy
    return _next_variance(noise_var, rho, params.noise_std / params.sampling_rate)


def _next_variance(variance: float, rho: float, std: float) -> float:
    """The noise variance of A <- (1 - rho) A + rho S~ / q, S~'s noise of sd ``std`` x q."""
    return (1.0 - rho) ** 2 * variance + (rho * std) ** 2
