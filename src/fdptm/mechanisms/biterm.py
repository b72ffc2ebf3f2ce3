"""M2 ``biterm``: one noisy biterm statistic, then a biterm topic model fitted to it.

Why (issue 28, item 5: "M2 statistics of lower dimension ... one-shot statistics instead of
T noisy rounds where that wins"). dp-vi adds Gaussian noise to its k x V statistic in each
of T rounds; on PHEME at epsilon 3 its topics score an NPMI near 0 while a non-private
Gibbs sampler on the same DP vocabulary scores about +0.07, and dp-vi *without* noise
scores about 0 there too (``benchmarks/dp_vi_grid_results.md``): variational LDA on short
texts, not only the noise, is what limits it. The biterm topic model (Yan, Guo, Lan & Cheng,
"A biterm topic model for short texts", WWW 2013) is built for short texts: it models the
corpus-wide multiset of word pairs that co-occur in a document, which is one statistic of
V (V + 1) / 2 entries that can be released once, and everything after it is
post-processing. On a 170-word vocabulary that is 14,535 entries noised once, where dp-vi
noises 850 entries 100 times.

The mechanism (adjacency: add or remove one privacy unit, an author with all their
documents at author level or one document at document level, the units of
``dp_vi.unit_layout``):

1. Per unit u, b_u counts every unordered pair {w_a, w_b} of token positions a < b of one of
   u's documents with b - a < ``window`` (``fdptm.kernels.biterm``; a short text's window
   covers it whole). b_u depends on u's documents alone.
2. b_u is clipped to L2 norm C (``clip``): clip(b_u) = b_u min(1, C / ||b_u||_2), rounded
   towards zero onto the integer grid g = ``dp_vi.statistic_grid(C)`` with its L2 norm
   checked in exact integer arithmetic (dp-vi's "Exact sums"), and summed exactly in int64:
   B = sum_u clip(b_u). Adding or removing a unit moves B by that unit's term, of L2 norm
   at most floor(C / g) grid units, for ANY corpus (no bound on document length or on
   documents per author is needed: one author's 7,000 documents weigh no more than one
   tweet's author, which is the per-author weighting issue 28 asks for).
3. The Gaussian mechanism, once: B~ = B + N(0, (z C)^2) on every entry (the exact discrete
   Gaussian of scale z C / g on the integer sum in production, then times g:
   ``NoiseSource.add_integer_gaussian``). z
   is the smallest noise multiplier for which the chosen accountant of ``dp-accounting``
   gives epsilon <= the target at delta for one Gaussian step under add-or-remove-one
   (``dp_vi.calibrate_noise_multiplier`` with T = 1, q = 1). ``rdp`` (default) converts the
   step's Renyi curve, rho = 1 / (2 z^2)-zCDP, to (epsilon, delta); the discrete Gaussian
   at sensitivity floor(C / g) and scale z C / g is exactly that zCDP (Canonne, Kamath &
   Steinke 2020, Theorem 4), so the default guarantee is proved for the sampler that runs.
   ``pld`` is the continuous Gaussian's privacy curve (about 7% less noise at epsilon 0.5-5);
   that the discrete Gaussian's curve is as good is not proved here, so it is an option,
   stated in the manifest's accountant. basic_epsilon is the analytic Gaussian's epsilon
   (Balle & Wang 2018, Theorem 8) for the continuous Gaussian, reported for comparison.
   So the run is (epsilon, delta)-DP at the dataset's unit (author or document), add/remove.

Post-processing of B~ alone (no further privacy cost):

4. Soft threshold: n_p = B~_p - t s for entries with B~_p > t s (s = z C, t = ``threshold``),
   others dropped: the noise's negative values and most of its positive mass go.
5. The biterm model by EM (Yan et al. 2013 fit it by Gibbs sampling; EM maximises the same
   likelihood and takes fractional counts): P(pair {i, j}) = theta_0 / P + sum_z theta_z
   phi_zi phi_zj, with a background component theta_0 uniform over the P pair positions
   that absorbs the noise the threshold kept (measured: without it NPMI on PHEME fell with
   the vocabulary size from +0.21 at V = 170 to -0.15 at V = 600; with it both were about
   +0.17, nearly flat in t; seeded prototype runs, 3 per cell). M-step: phi_z proportional
   to eta + the responsibilities of the pairs containing each word (both ends), theta by
   their mass. ``restarts`` starts of at most ``em_iterations`` steps, stopping when the
   objective improves by less than ``tolerance`` relatively: the first from k words with
   the most distinct pair profiles (``spread_start``), or from a public prior's topics
   when the run has one (dp-vi's public prior: its counts, times ``prior_weight``, are also
   added to eta in every M-step), the others Dirichlet(1) rows from the run's generator;
   the start with the best objective is released: rows of phi, which sum to 1.

Word lists (``fdptm.evaluation.significance.PairEvidence``). Each entry of B~ is tested:
H0 for pair p is that no unit's data reaches it, so B~_p is the discrete Gaussian alone,
s-sub-Gaussian (an entry that private data reaches but whose clipped terms all round to 0
is null too: its exact sum is 0), and p is significant when B~_p > s (1 + 1e-3)
sqrt(2 ln(P / alpha)): by the union bound over the P entries, the chance that any null pair
is significant is at most alpha. A significant pair is assigned to its most responsible
topic (none when the background component is); a word is listed in topic z only when it
belongs to a significant pair assigned to z, so with probability at least 1 - alpha every
listed word is in a pair that private data reached, and on data that reaches no pair nothing
is listed with probability at least 1 - alpha. The evidence (per topic and word, the largest
B~ of such pairs, kept for pairs above the cut-off at alpha = ``EVIDENCE_ALPHA`` = 1/2) is a
DP output, released in the manifest's ``presentation``; any alpha up to 1/2 can be applied to
it, with the family-wise guarantee for an alpha fixed before the evidence is read (choosing
alpha after looking at the values voids it).

Public refusals. P = V (V + 1) / 2 entries are noised and the EM runs over those above the
cut: a vocabulary with more than ``MAX_PAIRS`` pair positions is refused before any data is
read (``check_vocabulary``). SAN's OOV token is not trained on (``trains_on_oov``), as for
dp-vi.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from fdptm.errors import BadInputError
from fdptm.evaluation.significance import PairEvidence
from fdptm.kernels import biterm as kernel
from fdptm.mechanisms.constraints import (
    MAX_DOCS_PER_AUTHOR,
    N_TOPICS,
    NON_NEGATIVE,
    POSITIVE,
    DatasetUnit,
    Integer,
    OneOf,
    param,
    validate_params,
)
from fdptm.mechanisms.dp_vi import (
    CLIP_RANGE,
    SUPPORTED_ADJACENCY,
    basic_composition,
    calibrated,
    check_corpus,
    continuous_accounting,
    gaussian_guarantee,
    statistic_grid,
    unit_bound,
    unit_layout,
)
from fdptm.mechanisms.guarantee import Guarantee
from fdptm.mechanisms.lda import Corpus
from fdptm.parallel import each_chunk, workers
from fdptm.privacy import events
from fdptm.privacy.accountant import check_delta, check_epsilon
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.events import ACCOUNTANTS
from fdptm.privacy.noise import NoiseSource

MAX_PAIRS = 5_000_000
"""The most pair positions V (V + 1) / 2 a run noises (a vocabulary of 3,161 words)."""
EVIDENCE_ALPHA = 0.5
"""The evidence released for the word lists covers every family-wise error up to this."""

PARAMETER_CONSTRAINTS = {
    "n_topics": N_TOPICS,
    "adjacency": param(
        DatasetUnit(SUPPORTED_ADJACENCY),
        what="biterm guarantees add/remove adjacency at author or document level",
    ),
    "max_docs_per_author": MAX_DOCS_PER_AUTHOR,
    "clip": param(CLIP_RANGE, what="the per-unit L2 bound C on the biterm counts"),
    "window": param(Integer(2), what="pairs are tokens fewer than this many positions apart"),
    "eta": param(POSITIVE, what="the topic-word prior of the fitted model"),
    "threshold": param(
        NON_NEGATIVE,
        what="the soft threshold, in noise standard deviations",
        hint="0 keeps every positive entry",
    ),
    "em_iterations": param(Integer(1), what="EM steps per restart (post-processing)"),
    "restarts": param(
        Integer(1),
        what="starts of EM (the first from distinct pair profiles or a public prior, the "
        "others random); the best is released",
    ),
    "tolerance": param(NON_NEGATIVE, what="EM stops when the objective gains less (relative)"),
    "accountant": param(OneOf(tuple(sorted(ACCOUNTANTS))), what="the privacy accountant"),
    "prior_weight": param(POSITIVE, what="weight of a public prior's topic counts"),
}
"""Every option of ``biterm_params`` and what it accepts (``fdptm.mechanisms.constraints``)."""


@dataclass(frozen=True)
class BitermParams:
    """Privacy and model parameters of one biterm run; all are public functions of the inputs."""

    epsilon: float
    delta: float
    adjacency: Adjacency
    n_topics: int
    clip: float
    window: int
    noise_multiplier: float
    accountant: str
    accountant_epsilon: float
    basic_epsilon: float
    basic_delta: float
    eta: float
    threshold: float
    em_iterations: int
    restarts: int
    tolerance: float
    prior_weight: float = 1.0

    @property
    def progress_total(self) -> int:
        """M2's progress steps: one per EM restart (the noise is drawn once, before them)."""
        return self.restarts

    @property
    def noise_std(self) -> float:
        """s = z C: the standard deviation of the noise on every entry of B~."""
        return self.noise_multiplier * self.clip

    def event(self) -> dict:
        return events.gaussian(self.noise_multiplier)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["adjacency"] = self.adjacency.value
        d["noise_std"] = self.noise_std
        d["statistic_grid"] = statistic_grid(self.clip)
        d["event"] = self.event()
        d["accounting_assumes"] = continuous_accounting(self.accountant, 1.0)
        return d

    def guarantee(self) -> Guarantee:
        """(accountant epsilon, delta)-DP at the adjacency: one Gaussian mechanism."""
        return gaussian_guarantee(self)


@validate_params(PARAMETER_CONSTRAINTS)
def biterm_params(
    epsilon: float,
    delta: float,
    *,
    n_topics: int,
    adjacency: Adjacency,
    max_docs_per_author: int,
    clip: float = 1.0,
    window: int = 15,
    eta: float = 0.01,
    threshold: float = 1.0,
    em_iterations: int = 300,
    restarts: int = 5,
    tolerance: float = 1e-7,
    accountant: str = "rdp",
    prior_weight: float = 1.0,
) -> BitermParams:
    """Validate the public inputs and calibrate z so that one Gaussian step is
    (epsilon, delta)-DP (module docstring, step 3).

    ``max_docs_per_author`` is accepted for the common interface and not needed: the
    per-unit clipping bounds the sensitivity by C. C = 1 by default: every unit whose
    biterm counts have norm >= 1 (every unit with a pair) is scaled to norm exactly C, and
    signal and noise both scale with C, so C only matters for units below it.
    """
    epsilon = check_epsilon(epsilon, "M2 epsilon")
    delta = check_delta(delta, "M2 delta")
    z, achieved = calibrated(epsilon, delta, 1.0, 1, accountant)
    basic_eps, basic_delta = basic_composition(z, 1.0, 1, delta)
    return BitermParams(
        epsilon=epsilon,
        delta=delta,
        adjacency=adjacency,
        n_topics=n_topics,
        clip=float(clip),
        window=int(window),
        noise_multiplier=z,
        accountant=accountant,
        accountant_epsilon=achieved,
        basic_epsilon=basic_eps,
        basic_delta=basic_delta,
        eta=float(eta),
        threshold=float(threshold),
        em_iterations=int(em_iterations),
        restarts=int(restarts),
        tolerance=float(tolerance),
        prior_weight=float(prior_weight),
    )


def pair_positions(n_words: int) -> int:
    """P = V (V + 1) / 2: the entries of the biterm statistic."""
    return n_words * (n_words + 1) // 2


def check_vocabulary(params: BitermParams, n_words: int) -> None:
    """Refuse a (public) vocabulary size the run cannot noise in reasonable time, before any
    private data is read. ``n_words`` counts SAN's OOV token, which biterm does not train
    on."""
    words = n_words - 1
    if pair_positions(words) > MAX_PAIRS:
        raise BadInputError(
            f"biterm noises every one of the V (V + 1) / 2 word pairs; {words} words give "
            f"{pair_positions(words):,}, more than {MAX_PAIRS:,}: choose a smaller vocabulary "
            "(--vocabulary-size, or a DP vocabulary), or --mechanism dp-vi"
        )


_EM_CHUNKS = 8
"""The most ranges of pairs one EM pass is split into, each accumulating into counts of
its own (V x k float64 each)."""
_PAIRS_PER_CHUNK = 1 << 16
"""The fewest pairs an EM range gets (about 2 ms of work): below that, the hand-off to a
thread and the extra counts cost more than they save."""
_MAX_RANGES = 8
"""The most unit ranges ``clipped_biterms`` counts at once, each into a vector of its own
(up to ``MAX_PAIRS`` int64 values, 40 MB)."""
_UNITS_PER_RANGE = 4096
"""The fewest units a range gets: below that, a second vector costs more than it saves."""


def clipped_biterms(corpus: Corpus, params: BitermParams) -> np.ndarray:
    """B (module docstring, steps 1-2): the exact sum of the units' clipped pair counts in
    integer units of ``statistic_grid(C)``, one entry per pair position.

    The units are counted in consecutive ranges, one per usable core (up to
    ``_MAX_RANGES``; ``kernel.clipped_pair_sums`` releases the GIL), each into its own
    int64 vector, and the vectors added: every unit's term is the same integers whichever
    range counts it, and integer sums do not depend on their order, so B is the same bits
    on any number of threads (at 500,000 synthetic documents the counting was about 4 s on
    one thread, ``benchmarks/scale.md``).

    NOT private on its own: this is the statistic before the noise (``fdptm plan`` also
    runs it on its synthetic, public corpora)."""
    check_corpus(corpus)
    unit_ptr, unit_docs = unit_layout(corpus, params.adjacency)
    doc_ptr = np.ascontiguousarray(corpus.doc_ptr, dtype=np.int64)
    words = np.ascontiguousarray(corpus.words, dtype=np.int64)
    grid = statistic_grid(params.clip)
    bound = unit_bound(params.clip)
    n_units = unit_ptr.shape[0] - 1
    ranges = max(1, min(workers(), _MAX_RANGES, n_units // _UNITS_PER_RANGE))
    edges = np.linspace(0, n_units, ranges + 1).astype(np.int64)
    partials = [np.zeros(pair_positions(corpus.n_words), dtype=np.int64) for _ in range(ranges)]

    def count(r: int) -> None:
        kernel.clipped_pair_sums(
            unit_ptr[edges[r] : edges[r + 1] + 1],
            unit_docs,
            doc_ptr,
            words,
            np.int64(corpus.n_words),
            np.int64(params.window),
            params.clip,
            1.0 / grid,
            bound**2,
            partials[r],
        )

    each_chunk(count, ranges)
    stats = partials[0]
    for partial in partials[1:]:
        stats += partial
    return stats


def noisy_biterms(corpus: Corpus, params: BitermParams, noise: NoiseSource) -> np.ndarray:
    """B~ (module docstring, steps 1-3): the released statistic, one entry per pair
    position (``kernel.pair_index`` order), as float64."""
    stats = clipped_biterms(corpus, params)
    grid = statistic_grid(params.clip)
    scale = params.noise_multiplier * params.clip / grid  # z C in grid units
    return noise.add_integer_gaussian(stats, scale, unit_bound(params.clip)) * grid


@dataclass(frozen=True)
class BitermFit:
    """The fitted biterm model: topics (k x V rows summing to 1), topic weights, the
    background weight, and the objective it reached."""

    phi: np.ndarray
    theta: np.ndarray
    background: float
    objective: float

    def responsibilities(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(k + 1) x pairs: P(topic | pair), the background last."""
        positions = pair_positions(self.phi.shape[1])
        joint = self.theta[:, None] * self.phi[:, rows] * self.phi[:, cols]
        both = np.vstack([joint, np.full((1, len(rows)), self.background / positions)])
        return both / both.sum(axis=0, keepdims=True)


def fit_biterms(
    rows: np.ndarray,
    cols: np.ndarray,
    weights: np.ndarray,
    n_words: int,
    params: BitermParams,
    generator: np.random.Generator,
    progress: Callable[[int], None] | None = None,
    public_topics: np.ndarray | None = None,
) -> BitermFit:
    """EM for the biterm model with a uniform background component on weighted pairs
    (module docstring, step 5); the best of ``params.restarts`` starts: the first from a
    public prior's topics when there is one, else ``spread_start``, the others random.

    The starts are drawn first, in order, then fitted on one thread per usable core (each
    fit is independent and deterministic, ``kernels.biterm.em_pass`` releases the GIL), so
    the result does not depend on the thread count; ties go to the earliest start. Each
    pass is split into ranges of pairs (``_Passes``) that run on the cores the unfinished
    starts leave free: on one thread while there are as many starts as cores, on all of
    them for the last one, which used to run alone on one core."""
    starts = []
    for restart in range(params.restarts):
        if restart == 0 and public_topics is not None:
            phi = public_topics + params.eta
            starts.append(phi / phi.sum(axis=1, keepdims=True))
        elif restart == 0:
            starts.append(spread_start(rows, cols, weights, n_words, params.n_topics, params.eta))
        else:
            starts.append(generator.dirichlet(np.ones(n_words), params.n_topics))
    rows, cols = rows.astype(np.int64), cols.astype(np.int64)
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    prior = None if public_topics is None else params.prior_weight * public_topics.T
    best: BitermFit | None = None
    with _Passes(rows.size, len(starts), workers()) as passes:

        def fit(phi: np.ndarray) -> BitermFit:
            try:
                return _fit_from(rows, cols, weights, n_words, params, phi, prior, passes)
            finally:
                passes.finish()

        with ThreadPoolExecutor(max(1, min(passes.cores, len(starts)))) as pool:
            for fitted in pool.map(fit, starts):
                if best is None or fitted.objective > best.objective:
                    best = fitted
                if progress:
                    progress(1)
    assert best is not None
    return best


class _Passes:
    """The EM passes of one ``fit_biterms``: each over the pairs cut into ranges that
    depend on the number of pairs only (``_em_chunks``), on the ``cores`` the caller may use
    (``workers()`` in its context, so an audit's ``threads_at_most`` share holds) divided
    among the starts not yet fitted. The ranges run on threads of this object's own, shut
    down with it, so no pool outlives the fit."""

    def __init__(self, n_pairs: int, starts: int, cores: int) -> None:
        self.edges = np.linspace(0, n_pairs, _em_chunks(n_pairs) + 1).astype(np.int64)
        self.cores = max(1, cores)
        self.unfinished = starts
        self._lock = threading.Lock()
        split = self.cores > 1 and len(self.edges) > 2
        self._pool = ThreadPoolExecutor(self.cores, "fdptm-em") if split else None

    def __enter__(self) -> _Passes:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def finish(self) -> None:
        """One start is fitted: the others may take its cores."""
        with self._lock:
            self.unfinished -= 1

    def threads(self) -> int:
        """The cores divided among the unfinished starts (at least 1)."""
        return max(1, self.cores // max(1, self.unfinished))

    def step(
        self,
        rows: np.ndarray,
        cols: np.ndarray,
        weights: np.ndarray,
        phi_t: np.ndarray,
        theta: np.ndarray,
        background: float,
        counts_t: np.ndarray,
        mass: np.ndarray,
    ) -> tuple[float, float]:
        """``kernel.em_pass`` over every range, each into counts of its own, on ``threads()``
        threads (thread i takes ranges i, i + threads, ...), then added into ``counts_t``
        and ``mass``, and the objectives and background masses summed, in range order: the
        same bits on any number of threads. Returns (objective, rest) as ``em_pass`` does."""
        edges = self.edges
        ranges = len(edges) - 1
        if ranges == 1:
            return kernel.em_pass(rows, cols, weights, phi_t, theta, background, counts_t, mass)
        parts = [(np.zeros_like(counts_t), np.zeros_like(mass)) for _ in range(ranges)]
        sums = [(0.0, 0.0)] * ranges
        threads = 1 if self._pool is None else min(self.threads(), ranges)

        def run(first: int) -> None:
            for r in range(first, ranges, threads):
                lo, hi = edges[r], edges[r + 1]
                sums[r] = kernel.em_pass(
                    rows[lo:hi], cols[lo:hi], weights[lo:hi], phi_t, theta, background, *parts[r]
                )

        if threads == 1:
            run(0)
        else:
            list(self._pool.map(run, range(threads)))
        objective = rest = 0.0
        for (part_counts, part_mass), (part_objective, part_rest) in zip(parts, sums, strict=True):
            counts_t += part_counts
            mass += part_mass
            objective += part_objective
            rest += part_rest
        return objective, rest


def _fit_from(
    rows: np.ndarray,
    cols: np.ndarray,
    weights: np.ndarray,
    n_words: int,
    params: BitermParams,
    phi: np.ndarray,
    prior: np.ndarray | None,
    passes: _Passes,
) -> BitermFit:
    """At most ``params.em_iterations`` EM steps from ``phi`` (topics x words), stopping when
    the objective gains less than ``params.tolerance`` relative."""
    k, positions = params.n_topics, pair_positions(n_words)
    phi_t = np.ascontiguousarray(phi.T)
    theta = np.full(k, 1.0 / (k + 1))
    background = 1.0 / (k + 1)
    previous = -math.inf
    objective = -math.inf
    for _ in range(params.em_iterations):
        counts_t = np.full((n_words, k), params.eta)
        if prior is not None:
            counts_t += prior
        mass = np.zeros(k)
        objective, rest = passes.step(
            rows, cols, weights, phi_t, theta, background / positions, counts_t, mass
        )
        if not rows.size:  # no pair above the cut: everything is background
            rest = 1.0
        if objective - previous <= params.tolerance * abs(objective):
            break
        previous = objective
        phi_t = counts_t / counts_t.sum(axis=0, keepdims=True)
        whole = mass.sum() + rest
        theta, background = mass / whole, rest / whole
    return BitermFit(np.ascontiguousarray(phi_t.T), theta, background, objective)


def _em_chunks(n_pairs: int) -> int:
    """How many ranges an EM pass over ``n_pairs`` pairs is split into: a function of the
    number of pairs alone, never of the cores, so the sums are the same on any of them."""
    return max(1, min(_EM_CHUNKS, n_pairs // _PAIRS_PER_CHUNK))


def spread_start(
    rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, n_words: int, k: int, eta: float
) -> np.ndarray:
    """k starting topics from k words whose pair profiles differ most (post-processing of
    the thresholded statistic): the first is the word with the most pair mass, each next
    one maximises its mass times (1 - its largest cosine to the words already chosen); a
    topic starts as its word's profile (the pair mass it shares with every word) plus eta.
    Random starts can split one true topic in two and merge two others; a start from
    distinct profiles avoids most of that."""
    profiles = np.zeros((n_words, n_words))
    np.add.at(profiles, (rows, cols), weights)
    np.add.at(profiles, (cols, rows), weights * (rows != cols))
    mass = profiles.sum(axis=1)
    norms = np.linalg.norm(profiles, axis=1)
    unit = profiles / np.where(norms > 0, norms, 1.0)[:, None]
    closest = np.zeros(n_words)
    chosen: list[int] = []
    for _ in range(k):
        score = mass * (1.0 - closest)
        score[chosen] = -np.inf
        word = int(np.argmax(score))
        chosen.append(word)
        closest = np.maximum(closest, unit @ unit[word])
    start = profiles[chosen] + eta
    return start / start.sum(axis=1, keepdims=True)


def evidence(noisy: np.ndarray, fit: BitermFit, params: BitermParams, n_words: int) -> PairEvidence:
    """The word lists' evidence (module docstring, "Word lists"): for each pair above the
    cut-off at ``EVIDENCE_ALPHA``, its value credited to both words in its most
    responsible topic (none when the background is), the largest per (topic, word)."""
    test = PairEvidence(params.noise_std, len(noisy), (), (), (), EVIDENCE_ALPHA)
    strong = np.flatnonzero(noisy > test.cutoff(EVIDENCE_ALPHA))
    rows, cols = _pairs_of(strong, n_words)
    owner = np.argmax(fit.responsibilities(rows, cols), axis=0)
    keep = owner < params.n_topics
    best: dict[tuple[int, int], float] = {}
    for z, i, j, value in zip(
        owner[keep], rows[keep], cols[keep], noisy[strong][keep], strict=True
    ):
        for w in {int(i), int(j)}:
            key = (int(z), w)
            best[key] = max(best.get(key, -math.inf), float(value))
    ordered = sorted(best.items())
    return PairEvidence(
        params.noise_std,
        len(noisy),
        tuple(z for (z, _), _ in ordered),
        tuple(w for (_, w), _ in ordered),
        tuple(v for _, v in ordered),
        EVIDENCE_ALPHA,
    )


def _pairs_of(positions: np.ndarray, n_words: int) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) of pair positions: row i is the largest with i V - i (i - 1) / 2 <= p."""
    starts = np.arange(n_words) * n_words - (np.arange(n_words) * (np.arange(n_words) - 1)) // 2
    rows = np.searchsorted(starts, positions, side="right") - 1
    return rows, positions - starts[rows] + rows


def train_biterm(
    corpus: Corpus,
    n_topics: int,
    params: BitermParams,
    noise: NoiseSource,
    *,
    progress: Callable[[int], None] | None = None,
    public_topics: np.ndarray | None = None,
    released: dict | None = None,
) -> np.ndarray:
    """B~ once, then the biterm model fitted to it; returns the DP topic-word matrix
    (topics x words). The word lists' evidence is written to ``released["evidence"]``.

    ``public_topics``: k x V topic-word counts learned non-privately from a public dataset
    over the release's vocabulary (dp-vi's public prior): EM's first start is those topics
    and every M-step adds ``prior_weight`` times them to eta. Public data and a DP output
    only; the word lists are still tested on B~ alone (the prior moves only which topic a
    significant pair is assigned to)."""
    if n_topics != params.n_topics:
        raise BadInputError(
            f"the parameters were calibrated for {params.n_topics} topics, not {n_topics}; "
            "compute them again with biterm_params(n_topics=...)"
        )
    check_vocabulary(params, corpus.n_words + 1)
    if public_topics is not None:
        public_topics = np.asarray(public_topics, dtype=np.float64)
        if public_topics.shape != (n_topics, corpus.n_words) or not np.all(public_topics >= 0):
            raise BadInputError(
                f"public_topics must be {n_topics} x {corpus.n_words} counts >= 0, got shape "
                f"{public_topics.shape}"
            )
    noisy = noisy_biterms(corpus, params, noise)
    cut = params.threshold * params.noise_std
    kept = np.flatnonzero(noisy > cut)
    rows, cols = _pairs_of(kept, corpus.n_words)
    fit = fit_biterms(
        rows,
        cols,
        noisy[kept] - cut,
        corpus.n_words,
        params,
        noise.generator,
        progress,
        public_topics,
    )
    if released is not None:
        released["evidence"] = evidence(noisy, fit, params, corpus.n_words).to_dict()
    return fit.phi


def entry_noise(params: BitermParams, released: dict) -> PairEvidence | None:
    """The word lists' test: the evidence the run released (None before training)."""
    block = released.get("evidence")
    return None if block is None else PairEvidence.from_dict(block)
