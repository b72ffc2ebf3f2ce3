"""M2 ``spectral``: differentially private spectral LDA (DeCarolis et al., dp-spectral-lda.txt).

The algorithm (section 4, Figure 1; Anandkumar et al. 2012/2014). From the document-word
counts estimate the LDA moments M2 and M3 without bias (Lemma 21, ``spectral_moments``);
take the top-k eigenpairs (U, S) of M2 and the whitening W = U S^(-1/2), so that
W^T M2 W = I; whiten the third moment, T = M3(W, W, W) (k x k x k); decompose T by the
robust tensor power method with deflation (Anandkumar et al. 2014, Algorithm 1: L random
restarts of N power iterations, the best restart refined by N more, then deflation); and
un-whiten: mu_i is proportional to (W^T)^+ v_i = U S^(1/2) v_i. The released topic-word
matrix is mu post-processed: each topic oriented so that its mass is positive, negative
entries clipped to 0, rows renormalised, a row without positive mass made uniform.
alpha0 = sum_i alpha_i is a public input (Lemma 3); it is not estimated.

Adjacency and what is protected. Two corpora are neighbours when one document is replaced
by another (section 3, Definition 1): the number of documents N is the same for both and is
NOT protected; it enters the noise scales (the moments are averages, so every sensitivity
is proportional to 1/N) and is treated as public. For a dataset whose privacy unit is the
document (``Adjacency.DOCUMENT``) a run is (epsilon, delta)-DP at ``document-replace``.
For author datasets (``Adjacency.AUTHOR``, at most m = ``max_docs_per_author`` documents per
author, enforced by the pipeline's contribution bounding and checked here) every step runs
at (epsilon', delta') = ``invert_group_privacy(epsilon, delta, m)``; replacing one author's
documents by as many others is at most m document replacements, so group privacy gives
(epsilon, delta)-DP at ``author-replace``. Documents with fewer than 3 tokens contribute
nothing to the third moment (fewer than 2: nothing to the second; none: nothing at all) but
count in N (see ``spectral_moments``).

Sensitivities (all l2 over every entry, replace-one-document, see ``spectral_moments``):
Delta_2 = sqrt(2)(1 + 2a)/N for M2_hat and Delta_3 = sqrt(2)(1 + 6|b| + 3c)/N for M3_hat
(Theorem 4, appendices H.1-H.2, proved again in l2 and with the B-terms counted three
times). Every per-document moment is a probability vector/matrix/tensor, so these hold for
ANY corpus: no bound on document length is needed.

Gaussian mechanism (Proposition 18): noise N(0, (Delta tau)^2) per entry with
tau = sqrt(2 ln(1.25/delta_i))/epsilon_i, which is a valid calibration only for
epsilon_i < 1 (Dwork & Roth, Theorem A.1). With ``gaussian_calibration="paper"`` (default)
that tau is used for steps with epsilon_i < 1 and the analytic Gaussian mechanism (Balle &
Wang 2018, Theorem 8; the paper's reference [4]) for steps with epsilon_i >= 1;
``"analytic"`` uses the analytic calibration for every step (never more noise).

Configurations (section 6). Each is a cut of Figure 1's graph: everything downstream of
the noisy edges is post-processing, and the noisy releases compose by basic composition
(Proposition 19). The budget (epsilon', delta') is split over the steps by public
fractions (``_plan``); epsilon and delta are split alike.

* Config 1 (e3, e4, e8; default): M2_hat + E2 and M3_hat + E3 with E2, E3 i.i.d.
  N(0, sigma^2) over all V^2 resp. V^3 entries, sigma_j = Delta_j tau_j; global
  sensitivities, so it is (epsilon', delta')-DP for every corpus with no failure
  probability. The paper perturbs M2 twice (e4 for W and e8 for W^+); both are functions
  of M2 alone, so one noisy M2 serves both (the same cut, less noise for the same budget).
  W and W^+ come from its top-k eigenpairs; the noisy E2 is symmetrised (post-processing).
  The V^3 tensor is never formed: only (M3_hat + E3)(W, W, W) is used, and given W =
  U diag(s) (a function of the noisy M2 alone; U orthonormal, s = S^(-1/2)) E3(U, U, U) is
  i.i.d. N(0, sigma_3^2) on its k^3 entries, so the Gaussian mechanism is applied to the
  true M3_hat(U, U, U) and entry (a, b, c) is then scaled by s_a s_b s_c. The output has the
  same distribution as post-processing the paper's (M2 + E2, M3 + E3), hence the same
  guarantee.
* Config 2 (e6, e8): noise on the whitened tensor, whose sensitivity is local. As printed
  it is not DP: (i) Theorem 5's proof (eq. 60) replaces M3(W,W,W) - M3(W',W',W') by
  M3(W-W', W-W', W-W'), dropping the terms linear in W - W', which dominate; (ii) Lemma 28
  assumes the neighbour's whitening spans the same subspace (W' = W A D^-1/2 A^T), but the
  eigenvectors of M2 rotate by up to ||E||/(eigen-gap) and flip sign, so T = M3(W, W, W) is
  not even continuous in the data; (iii) W^+ from a separately noised M2 is in a different
  eigenbasis than the W that whitened T. Sound version implemented here: first release
  M2_hat + E2 (e8, global sensitivity) and take its top-k eigenvectors U~ (public). Whiten
  with the NOISELESS M2 compressed onto that public subspace, K = U~^T M2_hat U~ (k x k),
  W* = U~ K^(-1/2), T* = M3_hat(W*, W*, W*) = M3~(R, R, R) with M3~ = M3_hat(U~, U~, U~) and
  R = K^(-1/2). U~ has orthonormal columns, so lambda_min(K) and ||M3~||_F have global
  sensitivities Delta_2 and Delta_3 (Weyl; projection is a contraction). For neighbours,
  with m <= lambda_min(K) - Delta_2 <= lambda_min(K') and n >= ||M3~||_F,
  ||T* - T*'||_F <= ||M3~ - M3~'||_F ||R'||^3 + ||M3~||_F ||R - R'|| (||R||^2 + ||R|| ||R'||
  + ||R'||^2) <= Delta_3 m^-3/2 + 3 n Delta_2 / (2 m^5/2), using ||K - K'|| <= Delta_2 and
  ||A^-1/2 - B^-1/2|| <= ||A - B|| / (sqrt(a b)(sqrt a + sqrt b)) for A >= aI, B >= bI
  (A^-1/2 - B^-1/2 = A^-1/2 (B^1/2 - A^1/2) B^-1/2, and X = A^1/2 - B^1/2 solves
  A - B = A^1/2 X + X B^1/2: at a unit eigenvector x of X for the eigenvalue +-||X||,
  |x^T (A - B) x| = ||X|| x^T (A^1/2 + B^1/2) x >= ||X|| (sqrt a + sqrt b); the multilinear
  map obeys ||X(A, B, C)||_F <= ||X||_F ||A|| ||B|| ||C||). Procedure 1 releases a lower bound of
  lambda_min(K) and an upper bound of ||M3~||_F by the Laplace mechanism (pure DP), each
  wrong with probability at most its delta (Lemma 8); if the margin m is not positive the
  mechanism outputs uniform topics (a function of the released bound only). W^+ = U~ S~^1/2
  from the released M2 shares T*'s basis. Total: the four steps' epsilons and deltas.
* Configs 3 (e7, e8) and 4 (e9): noise on the tensor power method's output (v_i) or on the
  final mu, calibrated to Theorems 6 and 7. Those bounds assume that the power method's
  output is a Lipschitz function of T with constant ~ sqrt(k)/gamma_s, which no result gives
  for an arbitrary corpus (random restarts, argmax selection and deflation make the output
  discontinuous; Wang & Lu 2017 bound the error to a nearby orthogonal tensor, not the
  change between neighbours), and Lemma 9's sensitivity 2/N for the tensor eigen-gap
  gamma_s has no valid proof (Weyl's inequality does not apply to tensor "eigenvalues",
  and T's own sensitivity is Delta_T, not 1/N). They are implemented as specified, for
  comparison, and their guarantee is ``claimed-unproven``, never DP; they only run with
  ``claimed_unproven=True``. Noise per section 6.3/6.4: std
  k^2 / (N gamma~ sigma~_k^1.5) tau on v (config 3) and k^2 sqrt(sigma_1) / (N gamma~
  sigma~_k^1.5) tau on mu (config 4), O-constants 1. Procedure 1 releases sigma~_k (and, in
  config 4, an upper bound of sigma_1(M2), which the paper plugs in unprotected) with
  Laplace noise at their global sensitivity Delta_2, and gamma~_s with Laplace noise at
  Delta_T / 2 with Delta_T = k^1.5 / (N sigma~_k^1.5) (Theorem 5's order), the bound a
  Weyl-type argument would give, instead of the paper's 2/N. alpha is not released, so
  its noise (same scale) is not drawn.

Defaults (public constants chosen on synthetic ``generate_lda`` corpora, never on a run's
data): config 1, the only configuration calibrated to global sensitivities (no failure
probability, never a uniform fallback) and the most accurate one on synthetic data at every
epsilon tried (config 2's sound local bound is ~30x config 1's whitened M3 noise at
N = 20000, V = 200, mostly the margin Procedure 1 must leave below lambda_min(K));
``m2_fraction`` 0.5 (within noise of the best split, 0.5-0.65, for epsilon 1-30);
``procedure_fraction`` 0.1; ``alpha0`` 1; ``restarts`` 50 and ``power_iterations`` 100
(Anandkumar et al. need L = poly(k) log(1/eta) and N = O(log k + log log(lambda/eps));
at k <= 50 both cost milliseconds).

Procedure 1 as printed adds Lap(1/(N epsilon_1)) to sigma_k although Lemma 9 states
sensitivity 2/N (the sensitivity of sigma_k is that of M2 in spectral norm, at most
Delta_2); here every Laplace release has scale Delta / epsilon_1 and the high-probability
bound is shifted by (Delta / epsilon_1) ln(1 / (2 delta_1)), so that
P[bound is wrong] = delta_1 exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

from fdptm.errors import BadInputError
from fdptm.mechanisms.constraints import (
    MAX_DOCS_PER_AUTHOR,
    N_TOPICS,
    OPEN_FRACTION,
    POSITIVE,
    Boolean,
    DatasetUnit,
    Integer,
    OneOf,
    param,
    validate_params,
)
from fdptm.mechanisms.guarantee import APPROXIMATE_DP, CLAIMED_UNPROVEN, Guarantee
from fdptm.mechanisms.lda import Corpus
from fdptm.mechanisms.set_union import analytic_gaussian_sigma
from fdptm.mechanisms.spectral_moments import (
    DocumentMoments,
    multilinear,
    sensitivity_m2,
    sensitivity_m3,
    symmetrize,
)
from fdptm.privacy import events
from fdptm.privacy.accountant import check_delta, check_epsilon
from fdptm.privacy.adjacency import Adjacency, group_privacy, invert_group_privacy
from fdptm.privacy.noise import NoiseSource

CONFIGS = (1, 2, 3, 4)
UNPROVEN_CONFIGS = (3, 4)
CALIBRATIONS = ("paper", "analytic")
SUPPORTED_ADJACENCY = {
    Adjacency.DOCUMENT: Adjacency.DOCUMENT_REPLACE,
    Adjacency.AUTHOR: Adjacency.AUTHOR_REPLACE,
}
MAX_DENSE_VOCABULARY = 20_000

PARAMETER_CONSTRAINTS = {
    "n_topics": N_TOPICS,
    "adjacency": param(
        DatasetUnit(tuple(SUPPORTED_ADJACENCY)),
        what="spectral LDA's guarantee is then at document-replace or author-replace",
    ),
    "max_docs_per_author": MAX_DOCS_PER_AUTHOR,
    "iterations": param(Integer(0), what="the pipeline's CGS setting, ignored"),
    "config": param(OneOf(CONFIGS), what="DeCarolis et al.'s noise configuration"),
    "alpha0": param(POSITIVE, what="the Dirichlet concentration sum"),
    "procedure_fraction": param(OPEN_FRACTION, what="Procedure 1's share of the budget"),
    "m2_fraction": param(OPEN_FRACTION, what="the noisy second moment's share of the rest"),
    "power_iterations": param(Integer(1), what="N of the tensor power method"),
    "restarts": param(Integer(1), what="L of the tensor power method"),
    "gaussian_calibration": param(OneOf(CALIBRATIONS), what="the Gaussian noise calibration"),
    "claimed_unproven": param(Boolean(), what="run configurations 3-4"),
}
"""Every option of ``spectral_params`` and what it accepts (``fdptm.mechanisms.constraints``)."""
_DENSE_EIGH_MAX = 300
_ROUND_DOWN = 1.0 - 1e-12
_NOISE_BLOCK = 512

Progress = Callable[[int], None] | None


@dataclass(frozen=True)
class StepBudget:
    """One noisy release of a run: its share of the budget and its noise multiplier.

    ``multiplier`` is noise scale / sensitivity: tau for a Gaussian step, 1/epsilon for a
    Laplace step (Procedure 1), so the scale of a run on N documents is multiplier x the
    sensitivity at N.
    """

    name: str
    mechanism: str
    epsilon: float
    delta: float
    multiplier: float
    calibration: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SpectralParams:
    """Everything privacy-relevant about a spectral run; all public functions of the inputs."""

    epsilon: float
    delta: float
    adjacency: Adjacency
    group_size: int
    document_epsilon: float
    document_delta: float
    n_topics: int
    config: int
    alpha0: float
    procedure_fraction: float
    m2_fraction: float
    power_iterations: int
    restarts: int
    gaussian_calibration: str
    claimed_unproven: bool
    steps: tuple[StepBudget, ...]

    def step(self, name: str) -> StepBudget:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def composed(self) -> tuple[float, float]:
        """(epsilon, delta) at the guarantee's adjacency: basic composition, then group."""
        eps = math.fsum(s.epsilon for s in self.steps)
        delta = math.fsum(s.delta for s in self.steps)
        return group_privacy(eps, delta, self.group_size)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["adjacency"] = self.adjacency.value
        d["steps"] = [s.to_dict() for s in self.steps]
        return d

    def guarantee(self) -> Guarantee:
        eps, delta = self.composed()
        steps = ", ".join(
            f"{s.name} ({s.mechanism}, {s.calibration}, eps {s.epsilon:.6g}, delta {s.delta:.3g})"
            for s in self.steps
        )
        accountant = (
            f"basic composition (dp-spectral-lda.txt Prop. 19) of config {self.config}'s "
            f"steps: {steps}"
        )
        if self.config != 1:
            accountant += (
                "; Procedure 1 / Lemma 8: each Laplace bound's delta is the probability "
                "that the bound is wrong"
            )
        if self.group_size > 1:
            accountant += (
                f"; group privacy over m = {self.group_size} documents per author (Dwork & "
                f"Roth Thm 2.2): per-document ({self.document_epsilon:.6g}, "
                f"{self.document_delta:.3g}) -> author-replace"
            )
        event = {}
        if self.config == 1 and self.group_size == 1:
            event = events.composed(
                events.gaussian(self.step("m2").multiplier),
                events.gaussian(self.step("m3").multiplier),
            )
        notion = CLAIMED_UNPROVEN if self.claimed_unproven else APPROXIMATE_DP
        return Guarantee(notion, self.adjacency, eps, delta, accountant, event=event)


def gaussian_multiplier(epsilon: float, delta: float, calibration: str) -> tuple[float, str]:
    """tau = sigma / Delta of an (epsilon, delta)-DP Gaussian mechanism, and its name.

    ``paper``: Proposition 18's sqrt(2 ln(1.25/delta))/epsilon (nudged up: Theorem A.1 of
    Dwork & Roth needs c^2 > 2 ln(1.25/delta)) when epsilon < 1, where it is valid; the
    analytic Gaussian mechanism otherwise. ``analytic``: always the analytic one.
    """
    if calibration == "paper" and epsilon < 1.0:
        tau = math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
        return math.nextafter(tau, math.inf), "classical Gaussian (Prop. 18)"
    return analytic_gaussian_sigma(epsilon, delta, 1.0), "analytic Gaussian (Balle & Wang)"


def _fractions(config: int, procedure: float, m2: float) -> list[tuple[str, str, float]]:
    """(step, mechanism, share of the budget) per configuration."""
    rest = 1.0 - procedure
    if config == 1:
        return [("m2", "gaussian", m2), ("m3", "gaussian", 1.0 - m2)]
    if config == 2:
        return [
            ("m2", "gaussian", rest * m2),
            ("sigma_k", "laplace", procedure / 2.0),
            ("m3_norm", "laplace", procedure / 2.0),
            ("tensor", "gaussian", rest * (1.0 - m2)),
        ]
    if config == 3:
        return [
            ("m2", "gaussian", rest * m2),
            ("sigma_k", "laplace", procedure / 2.0),
            ("gap", "laplace", procedure / 2.0),
            ("decomposition", "gaussian", rest * (1.0 - m2)),
        ]
    return [
        ("sigma_k", "laplace", procedure / 3.0),
        ("sigma_1", "laplace", procedure / 3.0),
        ("gap", "laplace", procedure / 3.0),
        ("output", "gaussian", rest),
    ]


def _plan(
    config: int, epsilon: float, delta: float, procedure: float, m2: float, calibration: str
) -> tuple[StepBudget, ...]:
    """Split (epsilon, delta) over the steps, each share rounded down so the sum never exceeds."""
    steps = []
    for name, mechanism, share in _fractions(config, procedure, m2):
        eps = epsilon * share * _ROUND_DOWN
        dlt = delta * share * _ROUND_DOWN
        if mechanism == "gaussian":
            multiplier, calibration_name = gaussian_multiplier(eps, dlt, calibration)
        else:
            multiplier, calibration_name = 1.0 / eps, "Laplace (Procedure 1)"
        steps.append(StepBudget(name, mechanism, eps, dlt, multiplier, calibration_name))
    return tuple(steps)


@validate_params(PARAMETER_CONSTRAINTS)
def spectral_params(
    epsilon: float,
    delta: float,
    *,
    n_topics: int,
    adjacency: Adjacency,
    max_docs_per_author: int,
    iterations: int = 0,
    config: int = 1,
    alpha0: float = 1.0,
    procedure_fraction: float = 0.1,
    m2_fraction: float = 0.5,
    power_iterations: int = 100,
    restarts: int = 50,
    gaussian_calibration: str = "paper",
    claimed_unproven: bool = False,
) -> SpectralParams:
    """Validate the public inputs and split (epsilon, delta) over the configuration's steps.

    ``iterations`` (the pipeline's CGS setting) is accepted and ignored. ``config`` 1 or 2
    gives (epsilon, delta)-DP; 3 and 4 only run with ``claimed_unproven=True`` (see the
    module docstring). ``alpha0``: public Dirichlet concentration sum (default 1, i.e.
    alpha_i = 1/k, gensim's symmetric default). ``procedure_fraction``: share of the budget
    for Procedure 1's Laplace bounds (configs 2-4). ``m2_fraction``: share of the rest for
    the noisy M2 (configs 1-3). ``power_iterations`` and ``restarts``: N and L of the tensor
    power method. The noise scales themselves depend on N and are computed in
    ``train_spectral``; the guarantee depends only on these parameters.
    """
    epsilon = check_epsilon(epsilon, "M2 epsilon")
    delta = check_delta(delta, "M2 delta")
    if config in UNPROVEN_CONFIGS and not claimed_unproven:
        raise BadInputError(
            f"config {config} calibrates noise to the tensor power method's sensitivity "
            "(Theorems 6-7, Lemma 9), which is not bounded for every corpus: it is not DP. "
            "Use config 1 or 2, or --mechanism spectral-unproven (with --allow-unproven, "
            "or in fdptm compare)"
        )
    if config not in UNPROVEN_CONFIGS and claimed_unproven:
        raise BadInputError(
            f"config {config} is proven DP and runs without claimed_unproven; with "
            "claimed_unproven pass config=3 or config=4"
        )
    group = max_docs_per_author if adjacency == Adjacency.AUTHOR else 1
    doc_eps, doc_delta = invert_group_privacy(epsilon, delta, group)
    steps = _plan(config, doc_eps, doc_delta, procedure_fraction, m2_fraction, gaussian_calibration)
    return SpectralParams(
        epsilon=epsilon,
        delta=delta,
        adjacency=SUPPORTED_ADJACENCY[adjacency],
        group_size=group,
        document_epsilon=doc_eps,
        document_delta=doc_delta,
        n_topics=n_topics,
        config=config,
        alpha0=alpha0,
        procedure_fraction=procedure_fraction,
        m2_fraction=m2_fraction,
        power_iterations=power_iterations,
        restarts=restarts,
        gaussian_calibration=gaussian_calibration,
        claimed_unproven=claimed_unproven,
        steps=steps,
    )


def noise_scales(params: SpectralParams, n_docs: int) -> dict[str, float]:
    """Noise scales of the steps whose sensitivity is global, for a corpus of N documents.

    Gaussian std for ``m2``/``m3``, Laplace scale for Procedure 1's ``sigma_k``,
    ``sigma_1`` and ``m3_norm``. Local-sensitivity steps (``tensor``, ``gap``,
    ``decomposition``, ``output``) scale with a privately released bound and are not listed.
    """
    sens = {
        "m2": sensitivity_m2(n_docs, params.alpha0),
        "m3": sensitivity_m3(n_docs, params.alpha0),
        "sigma_k": sensitivity_m2(n_docs, params.alpha0),
        "sigma_1": sensitivity_m2(n_docs, params.alpha0),
        "m3_norm": sensitivity_m3(n_docs, params.alpha0),
    }
    return {s.name: s.multiplier * sens[s.name] for s in params.steps if s.name in sens}


def whitened_tensor_sensitivity(
    margin: float, norm_bound: float, delta_m2: float, delta_m3: float
) -> float:
    """Config 2's bound on ||T* - T*'||_F: Delta_3 m^-3/2 + 3 n Delta_2 / (2 m^5/2).

    ``margin`` m must be a lower bound of lambda_min(K) - Delta_2 (so of lambda_min of both
    K and the neighbour's K'), ``norm_bound`` n an upper bound of ||M3_hat(U~, U~, U~)||_F.
    """
    return delta_m3 * margin**-1.5 + 1.5 * norm_bound * delta_m2 * margin**-2.5


def release_m2(moments: DocumentMoments, params: SpectralParams, noise: NoiseSource) -> np.ndarray:
    """M2_hat + (E + E^T)/2, E i.i.d. N(0, sigma^2), sigma = Delta_2 tau (edges e4/e8).

    (E + E^T)/2 is symmetric with independent entries on and above the diagonal: N(0,
    sigma^2) on it, N(0, sigma^2 / 2) off it. So the NoiseSource adds exactly that to the
    true diagonal and to the true upper triangle (blocks of rows, to bound memory), and the
    triangle is mirrored: the same output distribution as symmetrising the Gaussian
    mechanism on all V^2 entries (post-processing), with every released entry formed by the
    safe sampler.
    """
    sigma = noise_scales(params, moments.n_docs)["m2"]
    m2 = moments.m2_dense()
    n = moments.n_words
    diagonal = noise.add_gaussian(np.diag(m2), sigma)
    for start in range(0, n, _NOISE_BLOCK):
        stop = min(start + _NOISE_BLOCK, n)
        rows = m2[start:stop]
        above = np.arange(n)[None, :] > np.arange(start, stop)[:, None]
        rows[above] = noise.add_gaussian(rows[above], sigma / math.sqrt(2.0))
        m2[stop:, start:stop] = rows[:, stop:].T
        square = m2[start:stop, start:stop]
        lower = np.tril_indices(stop - start, -1)
        square[lower] = square.T[lower]
    np.fill_diagonal(m2, diagonal)
    return m2


def noisy_whitened_m3(
    projected: np.ndarray, sigma: float, scales: np.ndarray, noise: NoiseSource
) -> np.ndarray:
    """(M3_hat + E3)(W, W, W) from ``projected`` = M3_hat(U, U, U), for W = U diag(scales).

    E3 i.i.d. N(0, sigma^2) on V^3 and U orthonormal make E3(U, U, U) i.i.d. N(0, sigma^2)
    on the k^3 entries, so the NoiseSource adds that to the true projection; multiplying
    entry (a, b, c) by scales_a scales_b scales_c (post-processing) gives the whitened
    tensor, whose noise has std sigma scales_a scales_b scales_c, independently.
    """
    noisy = noise.add_gaussian(projected, sigma)
    return noisy * scales[:, None, None] * scales[None, :, None] * scales[None, None, :]


def laplace_lower_bound(
    value: float, sensitivity: float, step: StepBudget, noise: NoiseSource
) -> float:
    """value + Lap(Delta/eps) - (Delta/eps) ln(1/(2 delta)): below value w.p. >= 1 - delta."""
    scale = sensitivity * step.multiplier
    released = float(noise.add_laplace(value, scale))
    return released - scale * max(math.log(1.0 / (2.0 * step.delta)), 0.0)


def laplace_upper_bound(
    value: float, sensitivity: float, step: StepBudget, noise: NoiseSource
) -> float:
    """value + Lap(Delta/eps) + (Delta/eps) ln(1/(2 delta)): above value w.p. >= 1 - delta."""
    scale = sensitivity * step.multiplier
    released = float(noise.add_laplace(value, scale))
    return released + scale * max(math.log(1.0 / (2.0 * step.delta)), 0.0)


def top_eigenpairs(
    matrix: np.ndarray | LinearOperator, k: int, generator: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The k algebraically largest eigenvalues (descending) and eigenvectors of a symmetric
    matrix; each eigenvector's sign fixed so that its largest-magnitude entry is positive.

    Dense ``eigh`` for small matrices (and for a dense matrix on which Lanczos does not
    converge), Lanczos (``eigsh``) otherwise, started from a vector of the run's generator.
    """
    n = matrix.shape[0]
    dense = isinstance(matrix, np.ndarray)
    if dense and n <= _DENSE_EIGH_MAX:
        vals, vecs = np.linalg.eigh(matrix)
    else:
        try:
            vals, vecs = eigsh(matrix, k=k, which="LA", v0=generator.standard_normal(n))
        except ArpackNoConvergence:
            if not dense:
                raise
            vals, vecs = np.linalg.eigh(matrix)
    vals, vecs = vals[-k:], vecs[:, -k:]
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], vecs[:, order]
    pivots = np.abs(vecs).argmax(axis=0)
    signs = np.where(vecs[pivots, np.arange(k)] < 0, -1.0, 1.0)
    return vals, vecs * signs


def _positive(vals: np.ndarray) -> np.ndarray:
    """Eigenvalues floored at 1e-9 of the largest magnitude, so S^-1/2 exists."""
    floor = max(float(np.abs(vals).max()), np.finfo(float).tiny) * 1e-9
    return np.maximum(vals, floor)


def tensor_power_method(
    tensor: np.ndarray,
    n_components: int,
    *,
    restarts: int,
    iterations: int,
    generator: np.random.Generator,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Robust tensor power method with deflation (Anandkumar et al. 2014, Algorithm 1).

    For each component: ``restarts`` starting vectors uniform on the sphere, ``iterations``
    power updates theta <- T(I, theta, theta) / ||.|| (all restarts at once), the restart
    with the largest T(theta, theta, theta) refined by ``iterations`` more updates;
    lambda = T(theta, theta, theta); deflate T <- T - lambda theta^(x)3. Returns the
    lambdas and the eigenvectors as columns.
    """
    t = tensor.copy()
    k = t.shape[0]
    lambdas = np.empty(n_components)
    vectors = np.empty((k, n_components))

    def update(theta: np.ndarray) -> np.ndarray:
        pairs = (theta[:, None, :] * theta[None, :, :]).reshape(k * k, -1)
        out = t.reshape(k, k * k) @ pairs
        norms = np.linalg.norm(out, axis=0)
        return np.where(norms > 0, out / np.where(norms > 0, norms, 1.0), theta)

    def value(theta: np.ndarray) -> np.ndarray:
        pairs = (theta[:, None, :] * theta[None, :, :]).reshape(k * k, -1)
        return np.einsum("al,al->l", theta, t.reshape(k, k * k) @ pairs)

    for j in range(n_components):
        theta = generator.standard_normal((k, restarts))
        theta /= np.linalg.norm(theta, axis=0)
        for _ in range(iterations):
            theta = update(theta)
        best = theta[:, [int(np.argmax(value(theta)))]]
        for _ in range(iterations):
            best = update(best)
        lam = float(value(best)[0])
        vec = best[:, 0]
        lambdas[j], vectors[:, j] = lam, vec
        t -= lam * np.einsum("a,b,c->abc", vec, vec, vec)
        if progress:
            progress(1)
    return lambdas, vectors


def _eigengap(lambdas: np.ndarray) -> float:
    """gamma_s = min_i (lambda_(i) - lambda_(i+1)) / 4, sorted descending, lambda_(k+1) = 0."""
    ordered = np.append(np.sort(lambdas)[::-1], 0.0)
    return float(np.min(ordered[:-1] - ordered[1:]) / 4.0)


def _inverse_sqrt(matrix: np.ndarray, floor: float) -> np.ndarray:
    """K^(-1/2) of a symmetric k x k matrix, eigenvalues floored at ``floor`` > 0."""
    vals, vecs = np.linalg.eigh(matrix)
    return (vecs / np.sqrt(np.maximum(vals, floor))) @ vecs.T


def _exact_eigenpairs(
    moments: DocumentMoments, k: int, generator: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenpairs of the noiseless M2_hat (dense when small, Lanczos otherwise)."""
    if moments.n_words <= _DENSE_EIGH_MAX:
        return top_eigenpairs(moments.m2_dense(), k, generator)
    return top_eigenpairs(moments.m2_operator(), k, generator)


def _config1(
    moments: DocumentMoments, k: int, params: SpectralParams, noise: NoiseSource, progress: Progress
) -> np.ndarray:
    """Noisy M2 and M3 (global sensitivity); the rest is post-processing."""
    vals, vecs = top_eigenpairs(release_m2(moments, params, noise), k, noise.generator)
    scales = 1.0 / np.sqrt(_positive(vals))
    sigma3 = noise_scales(params, moments.n_docs)["m3"]
    tensor = noisy_whitened_m3(moments.m3_project(vecs), sigma3, scales, noise)
    _, components = _decompose(tensor, k, params, noise, progress)
    return (vecs / scales) @ components


def _decompose(
    tensor: np.ndarray, k: int, params: SpectralParams, noise: NoiseSource, progress: Progress
) -> tuple[np.ndarray, np.ndarray]:
    """The tensor power method on the symmetrised whitened tensor, with the run's settings."""
    return tensor_power_method(
        symmetrize(tensor),
        k,
        restarts=params.restarts,
        iterations=params.power_iterations,
        generator=noise.generator,
        progress=progress,
    )


def _config2(
    moments: DocumentMoments, k: int, params: SpectralParams, noise: NoiseSource, progress: Progress
) -> np.ndarray | None:
    """Noisy M2 (e8); whitened tensor in the released subspace with Procedure 1 (e6)."""
    n = moments.n_docs
    vals, basis = top_eigenpairs(release_m2(moments, params, noise), k, noise.generator)
    compressed = moments.m2_project(basis)
    m3_basis = moments.m3_project(basis)
    d2, d3 = sensitivity_m2(n, params.alpha0), sensitivity_m3(n, params.alpha0)
    low = laplace_lower_bound(
        float(np.linalg.eigvalsh(compressed)[0]), d2, params.step("sigma_k"), noise
    )
    high = max(
        laplace_upper_bound(float(np.linalg.norm(m3_basis)), d3, params.step("m3_norm"), noise), 0.0
    )
    margin = low - d2
    if margin <= 0:
        return None
    local = whitened_tensor_sensitivity(margin, high, d2, d3)
    tensor = multilinear(m3_basis, _inverse_sqrt(compressed, margin))
    tensor = noise.add_gaussian(tensor, local * params.step("tensor").multiplier)
    _, components = _decompose(tensor, k, params, noise, progress)
    return (basis * np.sqrt(_positive(vals))) @ components


def _noiseless_decomposition(
    moments: DocumentMoments, k: int, params: SpectralParams, noise: NoiseSource, progress: Progress
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Eigenpairs of M2_hat and the power method on M3_hat(W, W, W) (configs 3, 4)."""
    vals, vecs = _exact_eigenpairs(moments, k, noise.generator)
    tensor = moments.m3_project(vecs / np.sqrt(_positive(vals)))
    lambdas, components = _decompose(tensor, k, params, noise, progress)
    return vals, vecs, lambdas, components


def _procedure1_gap(
    vals: np.ndarray,
    lambdas: np.ndarray,
    n: int,
    k: int,
    params: SpectralParams,
    noise: NoiseSource,
) -> tuple[float, float]:
    """Procedure 1 for configs 3/4: lower bounds of sigma_k(M2) and of gamma_s."""
    d2 = sensitivity_m2(n, params.alpha0)
    sigma_low = laplace_lower_bound(float(vals[-1]), d2, params.step("sigma_k"), noise)
    if sigma_low <= 0:
        return sigma_low, 0.0
    delta_t = k**1.5 / (n * sigma_low**1.5)
    return sigma_low, laplace_lower_bound(
        _eigengap(lambdas), delta_t / 2.0, params.step("gap"), noise
    )


def _config3(
    moments: DocumentMoments, k: int, params: SpectralParams, noise: NoiseSource, progress: Progress
) -> np.ndarray | None:
    """Noisy M2 for W^+ (e8) and noise on the power method's eigenvectors (e7). UNPROVEN."""
    n = moments.n_docs
    vals_dp, basis = top_eigenpairs(release_m2(moments, params, noise), k, noise.generator)
    vals, _, lambdas, components = _noiseless_decomposition(moments, k, params, noise, progress)
    sigma_low, gap_low = _procedure1_gap(vals, lambdas, n, k, params, noise)
    if sigma_low <= 0 or gap_low <= 0:
        return None
    std = k**2 / (n * gap_low * sigma_low**1.5) * params.step("decomposition").multiplier
    components = noise.add_gaussian(components, std)
    return (basis * np.sqrt(_positive(vals_dp))) @ components


def _config4(
    moments: DocumentMoments, k: int, params: SpectralParams, noise: NoiseSource, progress: Progress
) -> np.ndarray | None:
    """Noise on the final mu (e9) only. UNPROVEN."""
    n = moments.n_docs
    vals, vecs, lambdas, components = _noiseless_decomposition(moments, k, params, noise, progress)
    sigma_low, gap_low = _procedure1_gap(vals, lambdas, n, k, params, noise)
    d2 = sensitivity_m2(n, params.alpha0)
    sigma_high = laplace_upper_bound(float(vals[0]), d2, params.step("sigma_1"), noise)
    if sigma_low <= 0 or gap_low <= 0 or sigma_high <= 0:
        return None
    mu = (params.alpha0 + 2.0) / 2.0 * (vecs * np.sqrt(_positive(vals))) @ (components * lambdas)
    std = k**2 * math.sqrt(sigma_high) / (n * gap_low * sigma_low**1.5)
    return noise.add_gaussian(mu, std * params.step("output").multiplier)


_RUNNERS = {1: _config1, 2: _config2, 3: _config3, 4: _config4}


def topic_word(topics: np.ndarray | None, n_topics: int, n_words: int) -> np.ndarray:
    """Post-process V x k topic columns into a k x V topic-word matrix (rows sum to 1).

    Each topic is oriented so its entries sum to a non-negative number, negatives clipped
    to 0, non-finite entries set to 0, rows normalised; a row without positive mass (and
    every row when ``topics`` is None, the output of a failed Procedure 1) is uniform.
    """
    if topics is None:
        return np.full((n_topics, n_words), 1.0 / n_words)
    phi = np.where(np.isfinite(topics.T), topics.T, 0.0)
    phi = np.where(phi.sum(axis=1, keepdims=True) < 0, -phi, phi)
    phi = np.maximum(phi, 0.0)
    mass = phi.sum(axis=1, keepdims=True)
    return np.where(mass > 0, phi / np.where(mass > 0, mass, 1.0), 1.0 / n_words)


def _check_corpus(corpus: Corpus, n_topics: int) -> None:
    """Refuse corpora no estimate can be computed on (sizes are public under replace-one)."""
    if corpus.n_tokens == 0:
        raise BadInputError("the corpus has no tokens left to train on")
    if corpus.n_docs < 3:
        raise BadInputError(
            f"spectral LDA needs at least 3 documents (third-order moments), got {corpus.n_docs}"
        )


def check_vocabulary(params: SpectralParams, n_words: int) -> None:
    """Refuse a vocabulary size (public) the configuration cannot handle, before any read."""
    if params.config != 4 and n_words > MAX_DENSE_VOCABULARY:
        raise BadInputError(
            f"config {params.config} adds noise to the dense V x V second moment; a "
            f"vocabulary of {n_words} words exceeds {MAX_DENSE_VOCABULARY}: select a "
            "smaller vocabulary"
        )
    if params.n_topics >= n_words:
        raise BadInputError(
            f"spectral LDA needs fewer topics ({params.n_topics}) than words ({n_words})"
        )


def _check_fit(corpus: Corpus, n_topics: int, params: SpectralParams) -> None:
    """Refuse a corpus the parameters were not made for, before any noise is drawn."""
    if n_topics != params.n_topics:
        raise BadInputError(f"params are for {params.n_topics} topics, asked for {n_topics}")
    _check_corpus(corpus, n_topics)
    check_vocabulary(params, corpus.n_words)
    if params.group_size > 1 and corpus.doc_author is not None:
        most = int(np.bincount(corpus.doc_author).max())
        if most > params.group_size:
            raise BadInputError(
                f"an author has {most} documents but the guarantee assumes at most "
                f"{params.group_size}: apply contribution bounding (max_docs_per_author) first"
            )


def train_spectral(
    corpus: Corpus,
    n_topics: int,
    params: SpectralParams,
    noise: NoiseSource,
    *,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """DP spectral LDA (configuration ``params.config``); returns phi (topics x words).

    ``progress(1)`` is called once per topic extracted by the tensor power method.
    """
    _check_fit(corpus, n_topics, params)
    moments = DocumentMoments.from_tokens(
        corpus.doc_ptr, corpus.words, corpus.n_words, params.alpha0
    )
    topics = _RUNNERS[params.config](moments, n_topics, params, noise, progress)
    return topic_word(topics, n_topics, corpus.n_words)


def train_spectral_nonprivate(
    corpus: Corpus,
    n_topics: int,
    noise: NoiseSource,
    *,
    alpha0: float = 1.0,
    restarts: int = 50,
    power_iterations: int = 100,
) -> np.ndarray:
    """The same estimator without noise; returns phi (topics x words). NOT DP."""
    _check_corpus(corpus, n_topics)
    moments = DocumentMoments.from_tokens(corpus.doc_ptr, corpus.words, corpus.n_words, alpha0)
    vals, vecs = _exact_eigenpairs(moments, n_topics, noise.generator)
    scales = 1.0 / np.sqrt(_positive(vals))
    _, components = tensor_power_method(
        symmetrize(moments.m3_project(vecs * scales)),
        n_topics,
        restarts=restarts,
        iterations=power_iterations,
        generator=noise.generator,
    )
    return topic_word((vecs / scales) @ components, n_topics, corpus.n_words)
