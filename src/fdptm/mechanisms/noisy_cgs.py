"""M2 baselines that add Laplace noise to the counts of collapsed Gibbs sampling.

Three mechanisms from the literature, implemented as specified so they can be compared with
the sound ones; none of them has a valid proof for its released output (see below), so
their guarantee is recorded as ``claimed-unproven``, never as DP:

* ``zhu`` (Zhu et al. 2016, the M2 the FDPTM paper evaluated, section 4.4 and Table 5:
  epsilon-DP at document level): T - 1 plain CGS sweeps, then one Laplace draw on the
  topic-word counts n_wk and the document-topic counts n_dk; the last sweep samples from
  the noisy counts and the released topic-word matrix is computed from the noisy topic-word
  counts of that last iteration. The noise scale is the L1 sensitivity of n_wk when one
  privacy unit is added or removed with the other tokens' topics held fixed: at most
  ``max_tokens_per_doc`` tokens for a document, times ``max_docs_per_author`` for an author.
* ``cdp-lda`` (Zhao et al., hdp-lda-lp-lda-olp-lda.txt section VII-A, ref. [40]): Laplace
  noise on n_wk and n_dk at the first iteration; the noise stays in the counts the sampler
  reads for all T sweeps and in the released counts. Word level (one token replaced).
* ``cdp-lda-plus`` (same section): fresh Laplace noise on n_wk and n_dk in every iteration
  and once more for the released counts, T + 1 perturbations at epsilon / (T + 1) each.
  Word level.

The word-level L1 sensitivity of n_wk is 2 (one count -1, another +1), so the scale is
2 / epsilon per perturbation; the paper states Lap(1/epsilon), which understates the
sensitivity of a replacement by a factor 2. n_dk gets noise of the same scale as the paper
prescribes (it only steers the sampler; it is never released). The noise is the discrete
Laplace of that scale on the grid 2^-20 (``laplace_noise``), which stays exact when added to
the changing integer counts; each perturbation is still pure (sensitivity / scale)-DP for
the counts it is added to, and the PLD figure reported next to a claim treats it as the
continuous Laplace, from which it differs by a relative O(2^-20 / scale).

Why the claims do not hold (Zhao et al., section IV-A, "no protection on the sampled
topics"): the counts that get noised are the state of a sampler whose every earlier sweep
read the raw data, so neighbouring datasets do not lead to counts that differ in one unit's
tokens only: every topic assignment may differ. The Laplace noise covers the change of the
unit's own tokens, not the change of the chain. HDP-LDA bounds exactly that inherent loss by
clipping, which is why it, and not these, is offered as DP.

The conditional of the noisy sweeps is the collapsed Gibbs conditional at the noisy counts,
each factor floored at 0 (``gibbs.noisy_sweep``); the FDPTM authors' reference code min-max
normalises it instead, which gives one topic probability exactly 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fdptm.errors import BadInputError
from fdptm.evaluation.significance import EntryNoise
from fdptm.kernels import gibbs
from fdptm.mechanisms.constraints import (
    ITERATIONS,
    MAX_DOCS_PER_AUTHOR,
    MAX_TOKENS_PER_DOC,
    POSITIVE,
    DatasetUnit,
    OneOf,
    param,
    validate_params,
)
from fdptm.mechanisms.guarantee import CLAIMED_UNPROVEN, Guarantee
from fdptm.mechanisms.lda import Corpus, init_counts
from fdptm.privacy import events
from fdptm.privacy.accountant import check_delta, check_epsilon
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import GRID_EXPONENT, NoiseSource

VARIANTS = ("zhu", "cdp-lda", "cdp-lda-plus")
PARAMETER_CONSTRAINTS = {
    "variant": param(OneOf(VARIANTS), what="the noisy-CGS variant"),
    "adjacency": param(
        DatasetUnit((Adjacency.AUTHOR, Adjacency.DOCUMENT)),
        what="the dataset's unit; zhu is stated for author or document units",
    ),
    "iterations": ITERATIONS,
    "max_docs_per_author": MAX_DOCS_PER_AUTHOR,
    "max_tokens_per_doc": MAX_TOKENS_PER_DOC,
    "alpha": param(POSITIVE, what="the document-topic prior"),
    "beta": param(POSITIVE, what="the topic-word prior"),
}
"""Every option of ``noisy_cgs_params`` and what it accepts (``fdptm.mechanisms.constraints``)."""
REFERENCES = {
    "zhu": "Zhu et al. 2016 (FDPTM paper sec. 4.4, Table 5); unproven: Zhao et al. sec. IV-A",
    "cdp-lda": "Zhao et al., section VII-A (CDP-LDA, ref. [40]); unproven: section IV-A",
    "cdp-lda-plus": "Zhao et al., section VII-A (CDP-LDA+); unproven: section IV-A",
}


@dataclass(frozen=True)
class NoisyCgsParams:
    """The claimed budget of a noisy-CGS baseline and the Laplace scale it implies."""

    variant: str
    epsilon: float
    iterations: int
    adjacency: Adjacency
    sensitivity: float
    perturbations: int
    epsilon_per_perturbation: float
    laplace_scale: float
    alpha: float
    beta: float
    reporting_delta: float

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["adjacency"] = self.adjacency.value
        return d

    def guarantee(self) -> Guarantee:
        step = events.laplace(self.laplace_scale / self.sensitivity)
        event = step if self.perturbations == 1 else events.self_composed(step, self.perturbations)
        tight = (
            min(self.epsilon, events.epsilon_of(event, self.reporting_delta))
            if self.perturbations > 1
            else None
        )
        return Guarantee(
            notion=CLAIMED_UNPROVEN,
            adjacency=self.adjacency,
            epsilon=self.epsilon,
            delta=0.0,
            accountant=(
                f"claimed by the paper: {self.perturbations} Laplace perturbation(s) of "
                f"sensitivity {self.sensitivity:g} at epsilon "
                f"{self.epsilon_per_perturbation:.6g} each, basic composition"
                + (
                    f"; PLD of the same steps: epsilon {tight:.6g} at delta "
                    f"{self.reporting_delta:g}"
                    if tight is not None
                    else ""
                )
            ),
            basic_epsilon=self.epsilon if tight is not None else None,
            basic_delta=0.0 if tight is not None else None,
            event=event,
            tight_epsilon=tight,
            tight_delta=self.reporting_delta if tight is not None else None,
        )


@validate_params(PARAMETER_CONSTRAINTS)
def noisy_cgs_params(
    epsilon: float,
    delta: float,
    *,
    variant: str,
    adjacency: Adjacency,
    iterations: int,
    max_docs_per_author: int = 1,
    max_tokens_per_doc: int = 1000,
    alpha: float = 1.0,
    beta: float = 0.01,
) -> NoisyCgsParams:
    """The claimed epsilon split over the variant's perturbations, and its Laplace scale.

    ``delta`` is not used by the mechanisms (they claim pure epsilon-DP); it is the delta at
    which the tighter PLD total of ``cdp-lda-plus`` is reported. ``adjacency`` is the
    dataset's unit for ``zhu`` (author or document); the CDP-LDA variants are word level.
    """
    epsilon = check_epsilon(epsilon, "M2 epsilon")
    delta = check_delta(delta, "reporting delta")
    if variant == "zhu":
        per_doc = max_tokens_per_doc
        sensitivity = float(per_doc * (max_docs_per_author if adjacency == Adjacency.AUTHOR else 1))
    else:
        adjacency = Adjacency.WORD
        sensitivity = 2.0
    perturbations = iterations + 1 if variant == "cdp-lda-plus" else 1
    per_step = epsilon / perturbations
    scale = sensitivity / per_step
    while perturbations * (sensitivity / scale) > epsilon:
        scale = math.nextafter(scale, math.inf)
    return NoisyCgsParams(
        variant,
        epsilon,
        iterations,
        adjacency,
        sensitivity,
        perturbations,
        sensitivity / scale,
        scale,
        float(alpha),
        float(beta),
        delta,
    )


def train_noisy_cgs(
    corpus: Corpus,
    n_topics: int,
    params: NoisyCgsParams,
    noise: NoiseSource,
    *,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Run the variant's T sweeps; returns phi (topics x words) from the noisy counts."""
    if n_topics < 1:
        raise BadInputError(f"the number of topics must be >= 1, got {n_topics}")
    gen = noise.generator
    z, n_dk, n_wk, n_k = init_counts(corpus, n_topics, gen)
    uniforms = np.empty(corpus.n_tokens)
    shapes = ((corpus.n_docs, n_topics), (corpus.n_words, n_topics))

    def draw() -> tuple[np.ndarray, np.ndarray]:
        return tuple(laplace_noise(params, noise, shape) for shape in shapes)

    eta_dk = eta_wk = None
    last = params.iterations - 1
    for t in range(params.iterations):
        if _perturbs(params.variant, t, last):
            eta_dk, eta_wk = draw()
        gen.random(out=uniforms)
        if eta_wk is None:
            gibbs.cgs_sweep(
                corpus.doc_ptr,
                corpus.words,
                z,
                n_dk,
                n_wk,
                n_k,
                params.alpha,
                params.beta,
                uniforms,
            )
        else:
            gibbs.noisy_sweep(
                corpus.doc_ptr,
                corpus.words,
                z,
                n_dk,
                n_wk,
                n_k,
                eta_dk,
                eta_wk,
                params.alpha,
                params.beta,
                uniforms,
            )
        if progress:
            progress(1)
    if params.variant == "cdp-lda-plus":
        eta_wk = laplace_noise(params, noise, shapes[1])
    released = np.maximum(n_wk + eta_wk, 0.0).T + params.beta
    return released / released.sum(axis=1, keepdims=True)


def laplace_noise(params: NoisyCgsParams, noise: NoiseSource, shape: tuple[int, int]):
    """One perturbation: i.i.d. Laplace(sensitivity / epsilon_per_perturbation) per cell.

    The noise stays in counts that the sweeps keep changing, so it is drawn on the grid
    2^GRID_EXPONENT (``NoiseSource.grid_laplace``: OpenDP's discrete Laplace in production):
    every noisy count the sampler reads and the release is computed from is then an exact
    sum of an integer count and the draw, never a rounded float sum.
    """
    return noise.grid_laplace(params.laplace_scale, shape)


def _perturbs(variant: str, t: int, last: int) -> bool:
    """Whether iteration ``t`` draws fresh noise: every one, the first, or the last."""
    return {"cdp-lda-plus": True, "cdp-lda": t == 0, "zhu": t == last}[variant]


def entry_noise(params: NoisyCgsParams, released: dict) -> EntryNoise | None:
    """Each released entry is beta + max(count + Laplace(b), 0): under no data, 0 with
    probability 1/2 and Exponential(b) otherwise (``fdptm.evaluation.significance``). The
    draws are a discrete Laplace on the grid 2^GRID_EXPONENT, whose tail the test's slack
    covers only for b >= 40 grid steps: a smaller scale is untested (None)."""
    if params.laplace_scale < 40 * 2.0**GRID_EXPONENT:
        return None
    return EntryNoise("laplace", params.laplace_scale, params.beta)
