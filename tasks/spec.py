"""The parameters of one release run, shared by every stage."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fdptm.mechanisms.guarantee import APPROXIMATE_DP
from fdptm.mechanisms.registry import DEFAULT_MECHANISM, Mechanism, mechanism
from fdptm.mechanisms.set_union import SetUnionParams, set_union_params
from fdptm.privacy.accountant import StageSpec
from fdptm.privacy.adjacency import Adjacency
from fdptm.tasks.bounding import Bounds
from fdptm.tasks.preprocess import PreConfig

STAGE_STREAMS = {"vocabulary": 1, "train": 2, "baseline": 3}


@dataclass(frozen=True)
class RunSpec:
    """Everything a release run needs; plain values so it can cross Prefect task boundaries."""

    run_id: str
    workspace: str
    dataset: str
    epsilon: float
    delta: float
    topics: int
    iterations: int = 100
    mechanism: str = DEFAULT_MECHANISM
    seed: int | None = None
    bounding_seed: int = 0
    set_union_policy: str = "weighted"
    set_union_alpha: float = 3.0
    max_items_per_author: int = 50
    m1_fraction: float = 0.25
    lda_alpha: float = 1.0
    lda_beta: float = 0.01
    m2_options: dict[str, Any] = field(default_factory=dict)
    allow_unproven: bool = False
    baseline: bool = False
    releases_left: int | None = None
    batches: tuple[int, ...] = ()
    bounds: Bounds = field(default_factory=Bounds)
    pre: PreConfig = field(default_factory=PreConfig)

    @property
    def root(self) -> Path:
        return Path(self.workspace)

    @property
    def m2(self) -> Mechanism:
        return mechanism(self.mechanism)

    def stage_specs(self, unit: Adjacency) -> list[StageSpec]:
        """M1 and M2 as the budget planner sees them, on a dataset whose unit is ``unit``."""
        return [
            StageSpec(
                "vocabulary",
                f"dp-set-union/{self.set_union_policy}",
                unit,
                True,
                self.m1_fraction,
                APPROXIMATE_DP,
            ),
            StageSpec(
                "train",
                self.mechanism,
                self.m2.adjacency_for(unit),
                self.m2.uses_delta,
                1.0 - self.m1_fraction,
                self.m2.notion,
            ),
        ]

    def m1_params(self, epsilon: float, delta: float) -> SetUnionParams:
        """M1's (DP set union's) calibrated parameters for its native budget."""
        return set_union_params(
            self.set_union_policy,
            epsilon,
            delta,
            alpha=self.set_union_alpha,
            max_items=self.max_items_per_author,
        )

    def m2_params(self, epsilon: float, delta: float, unit: Adjacency) -> Any:
        """M2's calibrated parameters for its native budget, on a dataset of ``unit``.

        A mechanism that does not use delta gets the run's delta as the delta at which it
        reports its tighter accountant's total (reported only, never charged).
        """
        context = {
            "n_topics": self.topics,
            "adjacency": unit,
            "max_docs_per_author": self.bounds.max_docs_per_author,
            "max_tokens_per_doc": self.bounds.max_tokens_per_doc,
            "iterations": self.iterations,
        }
        used_delta = delta if self.m2.uses_delta else self.delta
        return self.m2.params(epsilon, used_delta, context, self.m2_options)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("bounding_seed")
        d.pop("seed")
        d["seeded"] = self.seed is not None
        return d
