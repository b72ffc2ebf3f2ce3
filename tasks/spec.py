"""The parameters of one release run, shared by every stage.

``RunSpec`` is a ``ReleaseRequest`` (the one definition of a release's parameters, in
``fdptm.request``) made concrete for one run: its id, its resolved workspace, the batches
it reads, the keyed-hash seed of contribution bounding and the fixed settings a user does
not choose. Its defaults are the request's, read from the model.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fdptm.mechanisms.guarantee import APPROXIMATE_DP
from fdptm.mechanisms.registry import Mechanism, mechanism, tuned
from fdptm.privacy.accountant import StageSpec
from fdptm.privacy.adjacency import Adjacency
from fdptm.request import ReleaseRequest, default
from fdptm.storage.partitions import Scope, last_closed, parse_buckets
from fdptm.tasks.bounding import Bounds
from fdptm.tasks.preprocess import PreConfig
from fdptm.tasks.vocabulary import M1_MECHANISMS, M1Params, VocabularyMechanism

STAGE_STREAMS = {"vocabulary": 1, "train": 2, "baseline": 3, "prior": 4}


def _days(request: ReleaseRequest) -> dict[str, str | None]:
    """The request's days as ISO dates: ``--since/--until``, or ``--window last-*`` resolved
    against today's UTC date (the calendar, never the data)."""
    if request.window is not None:
        kind = request.window.removeprefix("last-")
        start, end = last_closed(kind, dt.datetime.now(dt.UTC).date())
        return {"since": start.isoformat(), "until": end.isoformat()}
    if request.since is None:
        return {"since": None, "until": None}
    return {"since": request.since.isoformat(), "until": request.until.isoformat()}


@dataclass(frozen=True)
class RunSpec:
    """Everything a release run needs; plain values so it can cross Prefect task boundaries."""

    run_id: str
    workspace: str
    dataset: str
    epsilon: float
    delta: float
    topics: int
    iterations: int = default("iterations")
    mechanism: str = default("mechanism")
    tune: bool = default("tune")
    seed: int | None = default("seed")
    sampler: str = default("sampler")
    bounding_seed: int = 0
    set_union_policy: str = default("set_union_policy")
    set_union_alpha: float = 3.0
    max_items_per_author: int = 50
    m1_fraction: float = default("m1_fraction")
    vocabulary: str | None = default("vocabulary")
    vocabulary_selection: str = "set-union"
    vocabulary_size: int = default("vocabulary_size")
    prior: str | None = default("prior")
    prior_iterations: int = 200
    prior_scale: float = 0.1
    prior_clip: int = 1
    lda_alpha: float = 1.0
    lda_beta: float = 0.01
    m2_options: dict[str, Any] = field(default_factory=dict)
    allow_unproven: bool = default("allow_unproven")
    baseline: bool = default("baseline")
    releases_left: int | None = default("releases_left")
    batches: tuple[int, ...] = ()
    requested_batches: str | None = None
    buckets: tuple[int, ...] | None = None
    request_key: str = ""
    since: str | None = None
    until: str | None = None
    bounds: Bounds = field(
        default_factory=lambda: Bounds(
            default("max_docs_per_author"), default("max_tokens_per_doc")
        )
    )
    pre: PreConfig = field(default_factory=PreConfig)

    @classmethod
    def from_request(cls, request: ReleaseRequest, run_id: str, workspace: str) -> RunSpec:
        """The run of ``request`` with id ``run_id`` in the (resolved) ``workspace``."""
        days = _days(request)
        return cls(
            run_id=run_id,
            workspace=workspace,
            request_key=request.key(**days),
            dataset=request.dataset,
            epsilon=request.epsilon,
            delta=request.delta,
            topics=request.topics,
            iterations=request.iterations,
            mechanism=request.mechanism,
            tune=request.tune,
            seed=request.seed,
            sampler=request.sampler,
            set_union_policy=request.set_union_policy,
            m1_fraction=request.m1_fraction,
            vocabulary=request.vocabulary,
            vocabulary_selection=request.vocabulary_selection,
            vocabulary_size=request.vocabulary_size,
            prior=request.prior,
            m2_options=dict(request.m2_options),
            allow_unproven=request.allow_unproven,
            baseline=request.baseline,
            releases_left=request.releases_left,
            bounds=Bounds(request.max_docs_per_author, request.max_tokens_per_doc),
            requested_batches=request.batches,
            buckets=parse_buckets(request.buckets),
            **days,
        )

    @property
    def root(self) -> Path:
        return Path(self.workspace)

    @property
    def scope(self) -> Scope | None:
        """The partitions the run reads: its batches, and its days [since, until) if any;
        None before its batches are resolved (``tasks.run.scoped``): all of them."""
        if not self.batches:
            return None
        return Scope(
            self.batches,
            None if self.since is None else dt.date.fromisoformat(self.since),
            None if self.until is None else dt.date.fromisoformat(self.until),
            self.buckets,
        )

    @property
    def m2(self) -> Mechanism:
        """The M2 mechanism, in its tuned form with ``tune``."""
        return tuned(self.mechanism) if self.tune else mechanism(self.mechanism)

    @property
    def dp_stages(self) -> tuple[str, ...]:
        """The stages that spend: M2, and M1 unless the vocabulary is public (``m1=none``)."""
        return ("train",) if self.vocabulary_selection == "none" else ("vocabulary", "train")

    def stage_specs(self, unit: Adjacency) -> list[StageSpec]:
        """M1 and M2 as the budget planner sees them, on a dataset whose unit is ``unit``."""
        m2 = StageSpec(
            "train",
            self.m2.name,
            self.m2.adjacency_for(unit),
            self.m2.uses_delta,
            1.0,
            self.m2.notion,
        )
        if self.vocabulary_selection == "none":
            return [m2]
        return [
            StageSpec(
                "vocabulary",
                self.m1_mechanism,
                unit,
                True,
                self.m1_fraction,
                APPROXIMATE_DP,
            ),
            replace(m2, epsilon_fraction=1.0 - self.m1_fraction),
        ]

    @property
    def vocabulary_mechanism(self) -> VocabularyMechanism:
        """The run's M1 mechanism; only for a run with a vocabulary stage."""
        return M1_MECHANISMS[self.vocabulary_selection]

    @property
    def m1_mechanism(self) -> str:
        """M1's ledger name."""
        return self.vocabulary_mechanism.ledger_name(self)

    def m1_params(self, epsilon: float, delta: float) -> M1Params:
        """M1's calibrated parameters for its native budget."""
        return self.vocabulary_mechanism.params(self, epsilon, delta)

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

    @classmethod
    def from_dict(cls, params: dict, **fields: Any) -> RunSpec:
        """The spec ``to_dict`` stored (``runs.params``), with ``fields`` (its seeds) set."""
        params = {k: v for k, v in params.items() if k != "seeded"}
        params.setdefault("sampler", "opendp")  # runs stored before the choice drew OpenDP's
        params["bounds"] = Bounds(**params["bounds"])
        params["pre"] = PreConfig(**params["pre"])
        params["batches"] = tuple(params["batches"])
        if params.get("buckets") is not None:
            params["buckets"] = tuple(params["buckets"])
        return cls(**params, **fields)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("bounding_seed")
        d.pop("seed")
        d["seeded"] = self.seed is not None
        return d
