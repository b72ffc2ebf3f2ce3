"""M2: TopicDP, model-agnostic output perturbation of the topic-word matrix.

TopicDP (Sharma, "TopicDP - ensuring differential privacy for topic mining", MS thesis, IIT
2021; ``topicdp-model-agnostic-output-perturbation.txt``) trains any non-private topic model
f on the corpus and releases f(D) plus noise (section 4.3, Figure 4.1), so it works for any
trainer. The trained model is NOT DP and never leaves this module; only the perturbed,
post-processed matrix does. Three variants (``variant``):

* ``gaussian`` (default; Algorithms 1 and 2): Gaussian noise calibrated to a *sampled*
  sensitivity. Guarantee: (epsilon, delta, gamma)-random DP, never plain DP.
* ``laplace`` (chapter 5 baseline): Laplace noise at the global L1 sensitivity 2m.
  Guarantee: epsilon-DP with delta = 0, a worst-case guarantee (derivation below).
* ``mvg`` (chapter 5 baseline; Chanyaswad, Dytso, Poor & Mittal, CCS 2018): matrix-variate
  Gaussian noise calibrated, as the thesis does ("for a fair comparison, we also use the
  smooth sensitivity in the MVG mechanism", section 5.2), to the sampled sensitivity.
  Guarantee: (epsilon, delta, gamma)-random DP.

Adjacency: the dataset's unit, add/remove one author with all their documents (``author``;
when the corpus has no author codes every document is its own author) or one document
(``document``). The guarantee is stated at that same adjacency; other adjacencies are refused.

Random DP (thesis Definition 4.2.4; Hall, Wasserman & Rinaldo 2012; Rubinstein & Alda, ICML
2017): a mechanism A is (epsilon, delta, gamma)-random DP for a distribution P of
neighbouring pairs if Pr_{(D, D') ~ P}[for all S: Pr[A(D) in S] <= e^eps Pr[A(D') in S] +
delta, and vice versa] >= 1 - gamma, the outer probability also over the sensitivity
sampler's own draws. It is strictly weaker than (epsilon, delta)-DP:

1. a gamma fraction of pairs gets no guarantee at all, and nothing says which: the authors
   whose removal moves the model most (unusual writers, prolific ones) are exactly those the
   sampled sensitivity may fail to cover, so the most exposed people are the least protected;
2. only pairs under P are covered: a neighbour the sampler never proposes (an author unlike
   everyone in the corpus) gets nothing;
3. here P is built from the private corpus (below), so the sampled sensitivity, and with it
   the noise scale, is itself a non-private function of the data (a sampled local
   sensitivity, which leaks in general: Nissim, Raskhodnikova & Smith 2007). Rubinstein &
   Alda's theorem assumes P fixed independently of D, so that A(D) and A(D') add noise of
   the same scale; here the run on D' would calibrate to its own sampled sensitivity. The
   statement below therefore holds with the noise scale taken as fixed at the value the
   run computed, and the noise level (visible in the release) discloses that value;
4. it does not compose like DP: with an (eps1, delta1)-DP stage the pair is at best
   (eps1 + eps2, delta1 + delta2, gamma)-random DP (union bound on the failure event). The
   ledger must keep it apart from DP budgets and the manifest must never call it DP.

Sensitivity sampling (Algorithm 1, section 4.4; Rubinstein & Alda, Algorithm 1, Theorem 4):
rho = exp(W_{-1}(-gamma / (2 sqrt(e))) + 1/2) (Lambert W, lower branch) minimises the
sample size log(1/rho) / (2 (gamma - rho)^2): its stationarity condition is
gamma = rho (1 - 2 ln rho), i.e. w e^w = -gamma / (2 sqrt(e)) with w = ln rho - 1/2, and the
lower branch is the root with rho < gamma. Then h = ceil(log(1/rho) / (2 (gamma - rho)^2))
and k = ceil(h (1 - gamma + rho + sqrt(log(1/rho) / (2h)))) <= h (the thesis omits the
ceiling; Theorem 4.6.1 only needs k >= the bracket). At the minimal h the bracket is 1 up to
rounding, so k = h: the sampled sensitivity is the MAXIMUM of the h sampled distances
(gamma = 0.1: h = k = 285). By the proof of Theorem 4.6.1 (appendix A.1, the DKW
inequality), Pr[||f(D) - f(D')|| <= Delta_(k)] >= (1 - gamma + rho)(1 - rho) >= 1 - gamma.
The thesis calls Delta_(k) a "smooth sensitivity"; it is not Nissim et al.'s smooth
sensitivity (which is itself DP) but a sampled quantile.

The pair distribution P (option ``sampling``). The thesis says "P <- Uniform()", "we use
the uniform distribution for our documents" and that the owner "uniformly samples the
smooth sensitivity of dataset D": underspecified (a uniform distribution over all possible
documents would measure the model on gibberish). Algorithm 1 also builds *substitution*
pairs (D_N replaced by D_{N+1}) although the thesis's adjacency (Definition 2.3.1) is
add/remove one user; both choices below draw add/remove pairs:

* ``corpus`` (default): D is the corpus itself and D' = D minus one unit u drawn uniformly
  from the corpus's units, i.i.d. with replacement. This is Algorithm 1 with P uniform over
  the corpus's units and D_1..D_{N-1} drawn without replacement, at add/remove adjacency.
  The guarantee reads: Pr_u[the release is (eps, delta)-DP for (D, D minus u)] >= 1 - gamma,
  u a uniformly random unit of the corpus, jointly with the sampler's draws: the thesis's
  "at least (1 - gamma) portion of users can be protected" (chapter 1). Pairs
  (D, D plus x) with x outside the corpus are not sampled and not covered. At most h + 1
  trainings; a unit drawn twice is trained once.
* ``bootstrap``: Algorithm 1 literally, with P the empirical distribution of units: each
  sample draws a base B of N - 1 units i.i.d. with replacement and one more unit x, and
  measures f(B plus x) against f(B) (x's documents appended last). The guarantee is relative
  to that resampling distribution, a model of the population that produced the corpus,
  not about the corpus's own neighbours. 2h + 1 trainings.

The function f and topic matching. f is the chosen trainer run with one seed drawn per run
from the run's noise source; the released model and every neighbour use that same seed, so
f is a fixed deterministic function of the dataset and the sampled distances are distances
of that function (a randomised f would add run-to-run variation to them). Topics are
exchangeable and the release puts the rows in uniformly random order, so the sensitivity
that matters is min over row permutations s of ||f(D) - s f(D')||_F: if it is at most
Delta, then pi(f(D) + Z) and pi(f(D') + Z) (pi uniform, Z i.i.d. noise) are
(eps, delta)-indistinguishable, because pi(f(D') + Z) has the law of pi s^-1 (s f(D') + Z)
and pi s^-1 is uniform too. The Hungarian matching on L1 costs (``match_topics``) gives one
such s, hence an upper bound of the minimum. The thesis does not say how topics are aligned;
without alignment label switching would push every distance towards the global bound.

Global sensitivity. Every row of f(D) is a distribution over the V public words (enforced
here before any noise, for every trainer), so for ANY two datasets, neighbours or not:
||f(D) - f(D')||_1 = sum over rows ||p - q||_1 <= sum (||p||_1 + ||q||_1) = 2k, the thesis's
"2m" (m its number of topics, section 5.2; it calls it approximate, but it is an exact upper
bound, attained when every topic's support moves to new words), and
||f(D) - f(D')||_F^2 = sum (||p||^2 + ||q||^2 - 2 p.q) <= 2k. Hence ``laplace`` with scale
2k / eps is eps-DP at every adjacency, and the sampled sensitivity is capped at sqrt(2k)
(when the cap binds, every pair is covered). Where 2m is not valid: if the columns were
chosen from the data (the thesis's experiments keep "top n keywords" per topic: a
data-dependent column set that leaks, and truncated rows that are no longer distributions);
here the columns are the public M1 vocabulary, all V of them. Floating point: rows sum to 1
up to about V ulp, and the noise samplers are floating-point ones (``noise.py``).

Gaussian calibration (option ``calibration``):

* ``analytic`` (default): the whole k x V matrix is one vector query of L2 (Frobenius)
  sensitivity Delta; sigma = z Delta with z the analytic Gaussian mechanism's multiplier
  for (eps, delta) (Balle & Wang 2018, Theorem 8), valid for every eps > 0.
* ``paper``: Algorithm 2 verbatim, eps' = eps / (kV) per entry and
  sigma = Delta sqrt(2 ln(1.25 / delta)) / eps'. Theorem 4.6.2 composes the kV entries
  "sequentially", which would turn delta into kV delta; the output is nevertheless
  (eps, delta)-DP, indeed (eps / (kV), delta)-DP, since the noise on the whole matrix is the
  classical Gaussian mechanism at eps' for the whole-matrix sensitivity Delta, valid for
  eps' < 1 (Dwork & Roth, Theorem A.1; refused otherwise). It is kV times noisier than
  needed (k = 10, V = 6000: 60000 times) and is kept to reproduce the thesis.

MVG (Chanyaswad et al., Theorem 3): MVG_{m,n}(0, Sigma, Psi) noise is (eps, delta)-DP if
||sv(Sigma^-1)||_2 ||sv(Psi^-1)||_2 <= (-beta + sqrt(beta^2 + 8 alpha eps))^2 / (4 alpha^2)
with alpha = (H_r + H_{r,1/2}) g^2 + 2 H_r g s2, beta = 2 (mn)^(1/4) H_r s2 zeta(delta),
zeta(delta) = 2 sqrt(-mn ln delta) - 2 ln delta + mn, r = min(m, n), H the generalised
harmonic numbers, g = sup ||f||_F = sqrt(k) and s2 the (sampled, capped) sensitivity. The
thesis does not say which covariances it used; without a public prior on useful directions
the isotropic choice Sigma = a I_k, Psi = b I_V applies, for which the condition reads
sqrt(kV) / (a b) <= budget: i.i.d. N(0, sqrt(kV) / budget) entries. zeta is taken as in
the authors' reference code (github.com/inspire-group/MVG-Mechansim); should their lemma
mean its square root, ours is larger, which only adds noise. The thesis says MVG "only works
for square matrix outputs"; Theorem 3 has no such restriction.

Release (post-processing, thesis Step 5 "normalized"): rows in uniformly random order,
negative entries clipped to 0, rows renormalised; a row with no positive mass becomes
uniform. The thesis's reading of delta as "the probability of generating any unique
keyword" (section 4.2) and its (1 - delta)(1 - gamma) remark are not part of the guarantee:
delta is the Gaussian mechanism's delta.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from scipy.special import lambertw

from fdptm.errors import BadInputError
from fdptm.evaluation.matching import match_topics
from fdptm.mechanisms.constraints import (
    ITERATIONS,
    MAX_DOCS_PER_AUTHOR,
    N_TOPICS,
    OPEN_FRACTION,
    POSITIVE,
    DatasetUnit,
    Integer,
    OneOf,
    param,
    validate_params,
)
from fdptm.mechanisms.guarantee import APPROXIMATE_DP, RANDOM_DP, Guarantee
from fdptm.mechanisms.lda import Corpus, train_cgs
from fdptm.mechanisms.set_union import analytic_gaussian_sigma
from fdptm.privacy import events
from fdptm.privacy.accountant import check_delta, check_epsilon
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource

VARIANTS = ("gaussian", "laplace", "mvg")
TRAINERS = ("cgs", "gensim")
SAMPLINGS = ("corpus", "bootstrap")
CALIBRATIONS = ("analytic", "paper")
SUPPORTED_ADJACENCY = (Adjacency.AUTHOR, Adjacency.DOCUMENT)
GAMMA = param(
    OPEN_FRACTION,
    what="the random-DP confidence",
    hint="the thesis uses 0.02 to 0.22, 0.1 by default",
)
PARAMETER_CONSTRAINTS = {
    "n_topics": N_TOPICS,
    "adjacency": param(
        DatasetUnit(SUPPORTED_ADJACENCY),
        what="TopicDP is stated for add/remove of one author or one document",
    ),
    "max_docs_per_author": MAX_DOCS_PER_AUTHOR,
    "iterations": ITERATIONS,
    "variant": param(OneOf(VARIANTS), what="the TopicDP variant"),
    "gamma": GAMMA,
    "trainer": param(OneOf(TRAINERS), what="the non-private topic model f"),
    "sampling": param(OneOf(SAMPLINGS), what="how neighbouring pairs are drawn"),
    "calibration": param(OneOf(CALIBRATIONS), what="the Gaussian noise calibration"),
    "alpha": param(POSITIVE, what="the document-topic prior"),
    "beta": param(POSITIVE, what="the topic-word prior"),
    "passes": param(Integer(1), what="gensim's passes over the corpus"),
}
"""Every option of ``topicdp_params`` and what it accepts (``fdptm.mechanisms.constraints``)."""
MAX_SAMPLES = 100_000
_SEED_BOUND = 2**32
_ROUND_UP = 1e-12

Progress = Callable[[int], None] | None


@dataclass(frozen=True)
class SampleSize:
    """Algorithm 1, lines 1-2: the approximation confidence rho, sample size h, order k."""

    gamma: float
    rho: float
    n_samples: int
    order: int


def sample_size(gamma: float) -> SampleSize:
    """rho = exp(W_{-1}(-gamma / (2 sqrt e)) + 1/2), h and k of Theorem 4.6.1.

    h is the smallest integer with h >= log(1/rho) / (2 (gamma - rho)^2); k is the smallest
    integer with k >= h (1 - gamma + rho + sqrt(log(1/rho) / (2h))), the bracket nudged up
    by 1e-12 relative so that rounding can only make k larger (more conservative), and k <= h
    since the bracket is at most 1 for that h.
    """
    gamma = GAMMA.check("gamma", gamma)
    rho = math.exp(float(lambertw(-gamma / (2.0 * math.sqrt(math.e)), k=-1).real) + 0.5)
    log_inv = math.log(1.0 / rho)
    bound = log_inv / (2.0 * (gamma - rho) ** 2)
    if bound > MAX_SAMPLES:
        raise BadInputError(
            f"gamma = {gamma} needs {math.ceil(bound)} sampled neighbours (each trains a "
            f"model); at most {MAX_SAMPLES} are allowed, so choose a larger gamma"
        )
    n_samples = math.ceil(bound)
    bracket = n_samples * (1.0 - gamma + rho + math.sqrt(log_inv / (2.0 * n_samples)))
    order = min(n_samples, math.ceil(bracket * (1.0 + _ROUND_UP)))
    return SampleSize(gamma, rho, n_samples, order)


@dataclass(frozen=True)
class TopicDpParams:
    """The public parameters of one TopicDP run (the noise scale needs V and, for the
    sampled variants, the sampled sensitivity, both known only when training)."""

    variant: str
    epsilon: float
    delta: float
    adjacency: Adjacency
    n_topics: int
    iterations: int
    trainer: str
    alpha: float
    beta: float
    passes: int
    gamma: float
    sampling: str
    calibration: str
    rho: float
    n_samples: int
    order: int
    noise_multiplier: float | None
    laplace_scale: float | None

    @property
    def sampled(self) -> bool:
        """Whether the variant calibrates to a sampled sensitivity (random DP)."""
        return self.variant != "laplace"

    @property
    def trainings(self) -> int:
        """Model trainings of a run, at most: progress reports ``iterations`` per training."""
        if not self.sampled:
            return 1
        return 1 + self.n_samples * (2 if self.sampling == "bootstrap" else 1)

    @property
    def progress_total(self) -> int:
        """Progress steps of a run: ``iterations`` per training."""
        return self.trainings * self.iterations

    @property
    def global_l1(self) -> float:
        """2k: the L1 distance of any two k-row topic-word matrices (module docstring)."""
        return 2.0 * self.n_topics

    @property
    def global_l2(self) -> float:
        """sqrt(2k): the Frobenius distance of any two k-row topic-word matrices."""
        return math.sqrt(2.0 * self.n_topics)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["adjacency"] = self.adjacency.value
        d["trainings"] = self.trainings
        return d

    def guarantee(self) -> Guarantee:
        """Random DP for the sampled variants, pure epsilon-DP for ``laplace``."""
        if not self.sampled:
            return Guarantee(
                notion=APPROXIMATE_DP,
                adjacency=self.adjacency,
                epsilon=self.epsilon,
                delta=0.0,
                accountant=(
                    f"Laplace mechanism, scale {self.laplace_scale:.6g} = 2k/epsilon at the "
                    "global L1 sensitivity 2k of a k-row topic-word matrix (TopicDP thesis "
                    "sec. 5.2); holds for any two datasets"
                ),
                event=events.laplace(self.laplace_scale / self.global_l1),
            )
        return Guarantee(
            notion=RANDOM_DP,
            adjacency=self.adjacency,
            epsilon=self.epsilon,
            delta=self.delta,
            accountant=self._random_dp_account(),
            gamma=self.gamma,
            event=(
                events.gaussian(self.noise_multiplier) if self.noise_multiplier is not None else {}
            ),
        )

    def _random_dp_account(self) -> str:
        if self.variant == "mvg":
            noise = "isotropic MVG mechanism (Chanyaswad et al. 2018, Theorem 3)"
        elif self.calibration == "analytic":
            noise = "analytic Gaussian mechanism (Balle & Wang 2018)"
        else:
            noise = "classical Gaussian mechanism at epsilon/(kV) (TopicDP Algorithm 2)"
        pairs = {
            "corpus": "the corpus and the corpus minus a uniformly random unit",
            "bootstrap": "bootstrap resamples of the corpus's units plus/minus one unit",
        }[self.sampling]
        return (
            f"{noise} at the sensitivity sampled by TopicDP Algorithm 1 (Rubinstein & Alda "
            f"2017): order statistic {self.order} of {self.n_samples} matched Frobenius "
            f"distances of neighbouring pairs drawn as {pairs}; random DP relative to that "
            "data-derived distribution, NOT differential privacy"
        )


@validate_params(PARAMETER_CONSTRAINTS)
def topicdp_params(
    epsilon: float,
    delta: float,
    *,
    n_topics: int,
    adjacency: Adjacency,
    max_docs_per_author: int,
    iterations: int,
    variant: str = "gaussian",
    gamma: float = 0.1,
    trainer: str = "cgs",
    sampling: str = "corpus",
    calibration: str = "analytic",
    alpha: float = 0.1,
    beta: float = 0.01,
    passes: int = 1,
) -> TopicDpParams:
    """Validate the public inputs and derive h, k and the noise multiplier where possible.

    ``delta`` is used by ``gaussian`` and ``mvg`` and must be in (0, 1); ``laplace`` is pure
    and ignores it (the planner passes 0). ``max_docs_per_author`` is accepted for the
    common interface: the corpus arrives already bounded, and neither the global bound nor
    the sampled distances need it. ``iterations`` is the Gibbs sweep count (``cgs``) or
    gensim's per-document E-step cap (``gensim``); ``passes`` is gensim's number of passes
    over the corpus. ``alpha`` and ``beta`` are the symmetric Dirichlet priors on the
    document-topic and topic-word distributions (gensim's ``alpha`` and ``eta``).
    """
    epsilon = check_epsilon(epsilon, "M2 epsilon")
    if variant == "laplace":
        if not isinstance(delta, int | float) or not 0 <= delta < 1:
            raise BadInputError(f"delta must be in [0, 1), got {delta!r}")
        delta = 0.0
    else:
        delta = check_delta(delta, "M2 delta")
    sampled = variant != "laplace"
    size = sample_size(gamma) if sampled else SampleSize(gamma, 0.0, 0, 0)
    multiplier = None
    if variant == "gaussian" and calibration == "analytic":
        multiplier = analytic_gaussian_sigma(epsilon, delta, 1.0)
    return TopicDpParams(
        variant=variant,
        epsilon=epsilon,
        delta=delta,
        adjacency=adjacency,
        n_topics=n_topics,
        iterations=iterations,
        trainer=trainer,
        alpha=alpha,
        beta=beta,
        passes=passes,
        gamma=size.gamma if sampled else 0.0,
        sampling=sampling,
        calibration=calibration,
        rho=size.rho,
        n_samples=size.n_samples,
        order=size.order,
        noise_multiplier=multiplier,
        laplace_scale=None if sampled else 2.0 * n_topics / epsilon,
    )


# Neighbouring datasets ------------------------------------------------------------------


@dataclass(frozen=True)
class Units:
    """The privacy units of a corpus as CSR: unit u owns documents docs[ptr[u]:ptr[u+1]]."""

    ptr: np.ndarray
    docs: np.ndarray

    @property
    def n_units(self) -> int:
        return len(self.ptr) - 1

    def documents(self, units: np.ndarray) -> np.ndarray:
        """The documents of ``units`` (repeats allowed), unit by unit, in corpus order."""
        starts, ends = self.ptr[units], self.ptr[units + 1]
        return self.docs[_ranges(starts, ends - starts)]


def privacy_units(corpus: Corpus, adjacency: Adjacency) -> Units:
    """Authors (author adjacency with author codes) or documents (otherwise)."""
    n_docs = corpus.n_docs
    if adjacency == Adjacency.DOCUMENT or corpus.doc_author is None:
        return Units(np.arange(n_docs + 1, dtype=np.int64), np.arange(n_docs, dtype=np.int64))
    codes = np.asarray(corpus.doc_author)
    _, unit_of_doc = np.unique(codes, return_inverse=True)
    order = np.argsort(unit_of_doc, kind="stable")
    counts = np.bincount(unit_of_doc)
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return Units(ptr, order.astype(np.int64))


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """concatenate(arange(s, s + l) for s, l in zip(starts, lengths)), vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    offsets = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(np.asarray(starts, dtype=np.int64), lengths) + (
        np.arange(total, dtype=np.int64) - offsets
    )


def gather(corpus: Corpus, docs: np.ndarray) -> Corpus:
    """The corpus made of documents ``docs`` in that order (repeats allowed)."""
    docs = np.asarray(docs, dtype=np.int64)
    lengths = np.diff(corpus.doc_ptr)[docs]
    doc_ptr = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=doc_ptr[1:])
    words = corpus.words[_ranges(corpus.doc_ptr[docs], lengths)]
    authors = None if corpus.doc_author is None else np.asarray(corpus.doc_author)[docs]
    return Corpus(doc_ptr, words, corpus.n_words, authors)


def without_unit(corpus: Corpus, units: Units, unit: int) -> Corpus:
    """The corpus minus every document of ``unit``, the other documents in corpus order."""
    keep = np.ones(corpus.n_docs, dtype=bool)
    keep[units.docs[units.ptr[unit] : units.ptr[unit + 1]]] = False
    return gather(corpus, np.flatnonzero(keep))


def bootstrap_pair(corpus: Corpus, units: Units, gen: np.random.Generator) -> tuple[Corpus, Corpus]:
    """(B plus x, B): B is N - 1 units drawn i.i.d. uniformly, x one more (appended last)."""
    drawn = gen.integers(0, units.n_units, units.n_units)
    base = units.documents(drawn[:-1])
    return gather(corpus, np.concatenate([base, units.documents(drawn[-1:])])), gather(corpus, base)


# The underlying (non-private) model --------------------------------------------------------


def fit(
    corpus: Corpus, n_topics: int, params: TopicDpParams, seed: int, progress: Progress
) -> np.ndarray:
    """The trainer's topic-word matrix, every row a distribution over the V words. NOT DP.

    A corpus without tokens gives uniform rows: the CGS estimate with zero counts, and the
    output of "no data" for every trainer.
    """
    if corpus.n_tokens == 0:
        if progress:
            progress(params.iterations)
        return np.full((n_topics, corpus.n_words), 1.0 / corpus.n_words)
    if params.trainer == "cgs":
        source = NoiseSource(np.random.default_rng(seed), seeded=True)
        phi = train_cgs(
            corpus,
            n_topics,
            params.iterations,
            source,
            alpha=params.alpha,
            beta=params.beta,
            progress=progress,
        )
    else:
        phi = _fit_gensim(corpus, n_topics, params, seed)
        if progress:
            progress(params.iterations)
    return as_distributions(phi)


def _fit_gensim(corpus: Corpus, n_topics: int, params: TopicDpParams, seed: int) -> np.ndarray:
    from gensim.models import LdaModel

    model = LdaModel(
        corpus=bag_of_words(corpus),
        num_topics=n_topics,
        id2word={w: str(w) for w in range(corpus.n_words)},
        alpha=params.alpha,
        eta=params.beta,
        passes=params.passes,
        iterations=params.iterations,
        random_state=seed,
        eval_every=None,
    )
    return model.get_topics().astype(np.float64)


def bag_of_words(corpus: Corpus) -> list[list[tuple[int, int]]]:
    """gensim's corpus format: per document, sorted (word id, count) pairs."""
    lengths = np.diff(corpus.doc_ptr)
    doc_of_token = np.repeat(np.arange(corpus.n_docs, dtype=np.int64), lengths)
    keys, counts = np.unique(doc_of_token * corpus.n_words + corpus.words, return_counts=True)
    docs, word_ids = np.divmod(keys, corpus.n_words)
    bounds = np.searchsorted(docs, np.arange(corpus.n_docs + 1))
    ids, cnts = word_ids.tolist(), counts.tolist()
    return [list(zip(ids[a:b], cnts[a:b], strict=True)) for a, b in pairwise(bounds)]


def as_distributions(matrix: np.ndarray) -> np.ndarray:
    """Rows clipped at 0 and renormalised; a row without positive finite mass is uniform.

    Applied to the trainer's output (whose rows should already be distributions) it makes the
    global bounds hold whatever the trainer returns; applied to the noisy matrix it is the
    release's post-processing.
    """
    clipped = np.where(np.isfinite(matrix), np.maximum(matrix, 0.0), 0.0)
    sums = clipped.sum(axis=1, keepdims=True)
    good = np.isfinite(sums) & (sums > 0)
    uniform = 1.0 / matrix.shape[1]
    return np.where(good, clipped / np.where(good, sums, 1.0), uniform)


# Sensitivity sampling (Algorithm 1) --------------------------------------------------------


def matched_frobenius(reference: np.ndarray, other: np.ndarray) -> float:
    """||reference - s other||_F for the Hungarian (L1-cost) topic matching s."""
    return float(np.linalg.norm(other[match_topics(other, reference)] - reference))


def order_statistic(distances: np.ndarray, order: int) -> float:
    """Algorithm 1, lines 10-11: the ``order``-th smallest (1-based) of ``distances``."""
    if not 1 <= order <= len(distances):
        raise ValueError(f"order {order} outside 1..{len(distances)}")
    return float(np.sort(distances)[order - 1])


def sample_distances(
    corpus: Corpus,
    n_topics: int,
    params: TopicDpParams,
    reference: np.ndarray,
    seed: int,
    gen: np.random.Generator,
    progress: Progress = None,
) -> np.ndarray:
    """The h matched Frobenius distances of neighbouring pairs drawn from ``params.sampling``.

    ``reference`` is f(corpus) with ``seed`` (used by ``corpus`` sampling; ``bootstrap``
    trains both sides of every pair).
    """
    units = privacy_units(corpus, params.adjacency)
    if params.sampling == "bootstrap":
        distances = np.empty(params.n_samples)
        for i in range(params.n_samples):
            larger, smaller = bootstrap_pair(corpus, units, gen)
            distances[i] = matched_frobenius(
                fit(larger, n_topics, params, seed, progress),
                fit(smaller, n_topics, params, seed, progress),
            )
        return distances
    drawn = gen.integers(0, units.n_units, params.n_samples)
    known: dict[int, float] = {}
    for u in drawn.tolist():
        if u in known:
            if progress:
                progress(params.iterations)
            continue
        neighbour = fit(without_unit(corpus, units, u), n_topics, params, seed, progress)
        known[u] = matched_frobenius(reference, neighbour)
    return np.array([known[u] for u in drawn.tolist()])


# Noise (Algorithm 2 and the chapter 5 baselines) ------------------------------------------


def mvg_precision_budget(
    m: int, n: int, epsilon: float, delta: float, sensitivity: float, sup_norm: float
) -> float:
    """The right side of Chanyaswad et al.'s Theorem 3 (see the module docstring).

    -beta + sqrt(beta^2 + c) is evaluated as c / (beta + sqrt(beta^2 + c)) to avoid the
    cancellation that large beta (of order mn) would cause.
    """
    i = np.arange(1, min(m, n) + 1, dtype=float)
    h_r, h_half = float(np.sum(1.0 / i)), float(np.sum(1.0 / np.sqrt(i)))
    alpha = (h_r + h_half) * sup_norm**2 + 2.0 * h_r * sup_norm * sensitivity
    log_delta = math.log(delta)
    zeta = 2.0 * math.sqrt(-m * n * log_delta) - 2.0 * log_delta + m * n
    beta = 2.0 * (m * n) ** 0.25 * h_r * sensitivity * zeta
    c = 8.0 * alpha * epsilon
    root = c / (beta + math.sqrt(beta * beta + c))
    return root * root / (4.0 * alpha * alpha)


def check_vocabulary(params: TopicDpParams, n_words: int) -> None:
    """Refuse what cannot be calibrated for V words (public) before any data is read."""
    if n_words < 1:
        raise BadInputError("the vocabulary is empty; there is no topic-word matrix to release")
    if (
        params.variant == "gaussian"
        and params.calibration == "paper"
        and params.epsilon >= params.n_topics * n_words
    ):
        raise BadInputError(
            f"calibration 'paper' spends epsilon/(kV) = {params.epsilon}/"
            f"{params.n_topics * n_words} >= 1 per entry, where the classical Gaussian "
            "mechanism is not proven; use calibration 'analytic'"
        )


def noise_std(params: TopicDpParams, sensitivity: float, n_words: int) -> float:
    """The noise scale per entry: Laplace b = 2k/eps, or the Gaussian/MVG sigma at Delta."""
    check_vocabulary(params, n_words)
    if params.variant == "laplace":
        return float(params.laplace_scale)
    if params.variant == "gaussian":
        if params.calibration == "analytic":
            return params.noise_multiplier * sensitivity
        entries = params.n_topics * n_words
        per_entry = params.epsilon / entries
        return sensitivity * math.sqrt(2.0 * math.log(1.25 / params.delta)) / per_entry
    budget = mvg_precision_budget(
        params.n_topics,
        n_words,
        params.epsilon,
        params.delta,
        sensitivity,
        math.sqrt(params.n_topics),
    )
    return math.sqrt(math.sqrt(params.n_topics * n_words) / budget)


def perturb(
    phi: np.ndarray, params: TopicDpParams, sensitivity: float, noise: NoiseSource
) -> np.ndarray:
    """phi plus i.i.d. noise of the variant's scale (before post-processing)."""
    scale = noise_std(params, sensitivity, phi.shape[1])
    if params.variant == "laplace":
        return noise.add_laplace(phi, scale)
    return noise.add_gaussian(phi, scale)


# The mechanism -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicDpRun:
    """A run's release and its internal diagnostics: the non-private ``model`` f(D), the
    sensitivity the noise was calibrated to (L1 for ``laplace``), the sampled one and its
    distances. Only ``topic_word`` is DP; the rest must never be released."""

    topic_word: np.ndarray
    model: np.ndarray
    sensitivity: float
    sampled_sensitivity: float | None
    distances: np.ndarray | None
    noise_std: float


def run_topicdp(
    corpus: Corpus,
    n_topics: int,
    params: TopicDpParams,
    noise: NoiseSource,
    *,
    progress: Progress = None,
) -> TopicDpRun:
    """Train f once, sample the sensitivity (sampled variants), perturb and post-process."""
    if n_topics != params.n_topics:
        raise BadInputError(f"params are for {params.n_topics} topics, asked for {n_topics}")
    check_vocabulary(params, corpus.n_words)
    gen = noise.generator
    seed = int(gen.integers(0, _SEED_BOUND))
    phi = fit(corpus, n_topics, params, seed, progress)
    sampled = distances = None
    sensitivity = params.global_l1
    if params.sampled and corpus.n_tokens == 0:  # no unit to sample neighbours from
        sensitivity = params.global_l2
    elif params.sampled:
        distances = sample_distances(corpus, n_topics, params, phi, seed, gen, progress)
        sampled = order_statistic(distances, params.order)
        sensitivity = min(sampled, params.global_l2)
    noisy = perturb(phi, params, sensitivity, noise)
    released = as_distributions(noisy[gen.permutation(n_topics)])
    return TopicDpRun(
        released,
        phi,
        sensitivity,
        sampled,
        distances,
        noise_std(params, sensitivity, corpus.n_words),
    )


def train_topicdp(
    corpus: Corpus,
    n_topics: int,
    params: TopicDpParams,
    noise: NoiseSource,
    *,
    progress: Progress = None,
) -> np.ndarray:
    """The released topic-word matrix (k x V, rows are distributions, no NaN).

    ``progress`` receives ``params.iterations`` units per model training (Gibbs sweeps one
    by one), ``params.trainings`` trainings at most.
    """
    return run_topicdp(corpus, n_topics, params, noise, progress=progress).topic_word
