"""A deliberately broken M2 for the audit's failure test: the noise is off, yet it claims
epsilon-DP. It is registered only inside the test that audits it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fdptm.mechanisms.guarantee import APPROXIMATE_DP, Guarantee
from fdptm.mechanisms.lda import Corpus, train_cgs
from fdptm.mechanisms.registry import Implementation, Mechanism
from fdptm.privacy import events
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource


@dataclass(frozen=True)
class BrokenParams:
    epsilon: float
    adjacency: Adjacency
    iterations: int

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "iterations": self.iterations, "noise": "off"}

    def guarantee(self) -> Guarantee:
        return Guarantee(
            notion=APPROXIMATE_DP,
            adjacency=self.adjacency,
            epsilon=self.epsilon,
            delta=0.0,
            accountant="none: a Laplace step is claimed but never drawn",
            event=events.laplace(1.0 / self.epsilon),
        )


def broken_params(
    epsilon: float, delta: float, *, adjacency: Adjacency, iterations: int
) -> BrokenParams:
    return BrokenParams(epsilon, adjacency, iterations)


def train_broken(
    corpus: Corpus,
    n_topics: int,
    params: BrokenParams,
    noise: NoiseSource,
    *,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Non-private collapsed Gibbs sampling, released as if it were DP."""
    return train_cgs(corpus, n_topics, params.iterations, noise, progress=progress)


BROKEN = Mechanism(
    "broken-no-noise",
    "non-private CGS claiming epsilon-DP (test only)",
    APPROXIMATE_DP,
    False,
    lambda unit: unit,
    lambda: Implementation(broken_params, train_broken),
)
