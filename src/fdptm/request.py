"""The one definition of a release's parameters: ``ReleaseRequest``.

The CLI (``fdptm release``), the Prefect flows (``release``, ``audited-release``), the
deployments and Python callers all describe a release with this model, so its fields, their
defaults and their limits live here and nowhere else. A Pydantic model is Prefect's own
convention for flow parameters: a deployment stores it as JSON and Prefect validates it
when a scheduled run starts.

``add_arguments`` turns the fields into ``argparse`` options (defaults shown in ``--help``)
and ``from_arguments`` reads them back, so the command line cannot drift from the model.
Every check here needs no data; checks against the workspace (the dataset exists, the
lifetime cap) are in ``fdptm.tasks.run.preflight``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import types
import typing
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from fdptm.errors import BadInputError
from fdptm.mechanisms.registry import (
    DEFAULT_MECHANISM,
    MECHANISMS,
    TUNED,
    TUNED_DEFAULT,
    parse_option,
)

SetUnionPolicy = Literal[
    "weighted", "policy-laplace", "policy-gaussian", "uniform-laplace", "uniform-gaussian"
]
VocabularySelection = Literal["set-union", "none", "bayesian-prior", "extend"]
LastWindow = Literal["last-day", "last-week", "last-month"]
MAX_TOPICS = 1000
"""The most topics a release may ask for: a public bound checked before anything is spent
(a k x V release of more topics than this is noise at any budget the mechanisms support,
and k = 10^9 would otherwise pass the checks, spend M1 and fail on the vocabulary)."""
MIN_EPSILON = 1e-6
"""The least epsilon a release may ask for. Below it every mechanism's noise swamps any
signal by orders of magnitude, and some calibrations computed at training time (topicdp's
MVG and paper calibrations) underflow to a zero or infinite scale only after the data was
read (ZeroDivisionError at epsilon 1e-200): refused up front, nothing spent."""
SCOPE_FIELDS = ("batches", "since", "until", "window", "buckets")
PREDICTION_FIELDS = ("units", "tokens_per_unit", "require_signal")
"""The fields that feed the prediction only: they never change what a release publishes,
so they are not part of its key (a backfill's partitions stay released when they change)."""
"""The fields that choose a release's partitions (a backfill chooses them itself)."""


class _Request(BaseModel):
    """A request model: frozen, no unknown fields, validated into a ``BadInputError``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def build(cls, **fields: Any) -> Any:
        """Validate ``fields`` into a request; a ``BadInputError`` that names every problem."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise BadInputError(describe(exc)) from None

    def replace(self, **fields: Any) -> Any:
        """A validated copy with ``fields`` changed."""
        return self.build(**{**self.model_dump(), **fields})


class ReleaseRequest(_Request):
    """What a user asks for in one release (docs/reference/cli.md: ``fdptm release``)."""

    dataset: str = Field(description="name of the ingested dataset to release")
    epsilon: float = Field(
        ge=MIN_EPSILON,
        allow_inf_nan=False,
        description="total epsilon of the release, at its (weakest) adjacency",
    )
    delta: float = Field(gt=0, lt=1, description="total delta, in (0, 1); e.g. 1e-5")
    topics: int = Field(ge=1, le=MAX_TOPICS, description="number of topics k")
    mechanism: str = Field(
        DEFAULT_MECHANISM, description="M2 mechanism (`fdptm mechanisms` lists them)"
    )
    m2_options: dict[str, bool | int | float | str] = Field(
        default_factory=dict,
        description="options of the M2 mechanism, KEY=VALUE; unknown options are refused",
    )
    allow_unproven: bool = Field(
        False,
        strict=True,
        description="release with a mechanism whose DP claim is unproven (zhu, cdp-lda, "
        "cdp-lda-plus, spectral-unproven); the manifest says so",
    )
    iterations: int = Field(100, ge=1, description="iterations of M2 (with --tune: unused)")
    tune: bool = Field(
        False,
        strict=True,
        description="choose dp-vi's iterations, threshold and clipping privately on held-out "
        "units (Papernot & Steinke's random repetition, inside M2's budget; measured worse than "
        "the defaults on PHEME at epsilon 1-10); the grid is --m2-option "
        "tune_iterations=50,100 tune_thresholds=1,2 tune_clips=2, mean_trials=2; dp-vi only: "
        "without --mechanism, --tune runs dp-vi",
    )
    set_union_policy: SetUnionPolicy = Field("weighted", description="M1 (DP set union) policy")
    vocabulary: str | None = Field(
        None,
        description="public vocabulary: public:DATASET (ingested with --public), "
        "wordfreq:LANG[:N] or a word-list file; --m1 says how M1 uses it (default: no "
        "public vocabulary, DP set union over the private words)",
    )
    prior: str | None = Field(
        None,
        description="public dataset (ingested with --public) whose non-private topics "
        "initialise and regularise M2 (biterm, dp-vi), free of charge",
    )
    m1: VocabularySelection | None = Field(
        None,
        description="M1, vocabulary selection: set-union (DP set union of the private words; "
        "the default without --vocabulary); with --vocabulary: none (its --vocabulary-size "
        "most frequent words, M1 skipped, M2 gets the whole budget; the default), "
        "bayesian-prior (a DP word distribution over it) or extend (it, plus private words "
        "beyond it by DP set union)",
    )
    vocabulary_size: int = Field(
        2000,
        ge=1,
        description="with --vocabulary: words kept, the most probable under M1's DP distribution",
    )
    m1_fraction: float = Field(
        0.5, gt=0, lt=1, description="share of epsilon for M1, vocabulary selection"
    )
    max_docs_per_author: int = Field(
        100, ge=1, description="contribution bound: documents kept per author"
    )
    max_tokens_per_doc: int = Field(
        1000, ge=1, description="contribution bound: tokens kept per document"
    )
    releases_left: int | None = Field(
        None, ge=1, description="adaptive budget: use at most (what the cap has left) / N"
    )
    batches: str | None = Field(
        None,
        description="read only these ingestion batches: a range 3..5 or a list 1,3,7 "
        "(`fdptm partitions` lists them; default: every batch ingested so far)",
    )
    since: dt.date | None = Field(
        None,
        description="read only documents timestamped on or after this UTC day (YYYY-MM-DD; "
        "with --until)",
    )
    until: dt.date | None = Field(
        None, description="read only documents timestamped before this UTC day (with --since)"
    )
    buckets: str | None = Field(
        None,
        description="read only the authors of these author buckets: a range 0..3 or a list "
        "1,5 (datasets ingested with --author-buckets; disjoint buckets compose in parallel "
        "at the author level)",
    )
    window: LastWindow | None = Field(
        None,
        description="read only the newest calendar window that has ended when the run starts "
        "(last-week: Monday to Sunday, UTC), as a schedule does",
    )
    baseline: bool = Field(
        False,
        strict=True,
        description="also train a non-private internal baseline (never released)",
    )
    seed: int | None = Field(
        None, ge=0, lt=2**63, description="fixed seed (tests only: makes the noise guessable)"
    )
    sampler: Literal["exact", "opendp"] = Field(
        "exact",
        description="who draws the integer noise of dp-vi and biterm and the grid noise of "
        "zhu and cdp-lda: `exact` (fdptm's compiled exact sampler, about 100 times faster per "
        "core) or `opendp` (OpenDP's, the reference, at a scale 2^-30 larger); the same "
        "distributions otherwise, and the rest of the noise is OpenDP's",
    )
    units: int | None = Field(
        None,
        ge=1,
        description="for the prediction (`fdptm plan`, --require-signal): how many privacy "
        "units the dataset holds, a public figure you state (not one read off the data)",
    )
    tokens_per_unit: int | None = Field(
        None,
        ge=1,
        description="for the prediction: the tokens a privacy unit holds after PRE, stated",
    )
    require_signal: bool = Field(
        False,
        strict=True,
        description="refuse, before anything is spent, a release whose prediction (`fdptm "
        "plan`; needs --units and --tokens-per-unit) is that no topic stands above the noise",
    )
    workspace: str | None = Field(
        None, description="workspace directory (default: $FDPTM_WORKSPACE or ./fdptm-workspace)"
    )

    @field_validator(
        "epsilon",
        "delta",
        "topics",
        "iterations",
        "m1_fraction",
        "vocabulary_size",
        "max_docs_per_author",
        "max_tokens_per_doc",
        "releases_left",
        "seed",
        mode="before",
    )
    @classmethod
    def _not_a_bool(cls, value: Any) -> Any:
        """``True`` is not a number of topics (Pydantic's lax mode would read it as 1)."""
        if isinstance(value, bool):
            raise ValueError("must be a number, not true/false")
        return value

    @field_validator("epsilon", "delta")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("mechanism")
    @classmethod
    def _known_mechanism(cls, value: str) -> str:
        if value not in MECHANISMS:
            raise ValueError(f"unknown mechanism {value!r}; available: {', '.join(MECHANISMS)}")
        return value

    @field_validator("vocabulary")
    @classmethod
    def _vocabulary_source(cls, value: str | None) -> str | None:
        from fdptm.errors import BadInputError as Refused
        from fdptm.tasks.public_vocabulary import check_source

        if value is None:
            return value
        try:
            return check_source(value)
        except Refused as exc:
            raise ValueError(str(exc)) from None

    @field_validator("batches", "buckets")
    @classmethod
    def _partition_numbers(cls, value: str | None, info: Any) -> str | None:
        from fdptm.storage.partitions import parse_batches, parse_buckets

        try:
            (parse_batches if info.field_name == "batches" else parse_buckets)(value)
        except BadInputError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _one_time_range(self) -> ReleaseRequest:
        if (self.since is None) != (self.until is None):
            raise ValueError("--since and --until go together: a window is [since, until)")
        if self.since is not None and not self.since < self.until:
            raise ValueError(f"--since {self.since} must be before --until {self.until}")
        if self.window is not None and self.since is not None:
            raise ValueError("--window and --since/--until both choose the days: give one")
        return self

    @model_validator(mode="before")
    @classmethod
    def _tune_without_a_mechanism_is_dp_vi(cls, data: Any) -> Any:
        """--tune selects dp-vi's hyper-parameters: with no --mechanism it runs dp-vi, not
        the default mechanism (which has nothing to tune)."""
        if isinstance(data, dict) and data.get("tune") is True and data.get("mechanism") is None:
            return {**data, "mechanism": TUNED_DEFAULT}
        return data

    @model_validator(mode="after")
    def _tune_has_a_tuned_form(self) -> ReleaseRequest:
        if self.tune and self.mechanism not in TUNED:
            raise ValueError(
                f"--tune selects hyper-parameters of {', '.join(TUNED)} only, not "
                f"{self.mechanism!r}"
            )
        return self

    @model_validator(mode="after")
    def _m1_fits_the_vocabulary(self) -> ReleaseRequest:
        if self.vocabulary is None and self.m1 not in (None, "set-union"):
            raise ValueError(
                f"--m1 {self.m1} selects within a public vocabulary: give --vocabulary"
            )
        if self.vocabulary is not None and self.m1 == "set-union":
            raise ValueError(
                "--m1 set-union ignores --vocabulary; use --m1 extend to add private words to it"
            )
        return self

    @property
    def vocabulary_selection(self) -> str:
        """``m1`` with its default filled in: none with a public vocabulary, else set-union."""
        return self.m1 or ("set-union" if self.vocabulary is None else "none")

    def key(self, since: str | None, until: str | None) -> str:
        """A digest of what this request releases with its days resolved to [since,
        until): equal for two runs of one release, whatever the workspace path it was
        given as, or whichever sampler draws its noise (the same distribution): ``fdptm
        backfill`` skips a partition whose key has a release."""
        import hashlib
        import json

        fields = self.model_dump(
            mode="json", exclude={"workspace", "window", "sampler", *PREDICTION_FIELDS}
        )
        fields.update(since=since, until=until)
        if fields["buckets"] is None:  # keys recorded before buckets existed stay valid
            del fields["buckets"]
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class LocalReleaseRequest(_Request):
    """A release from LDP reports (``fdptm local release``; hdp-lda-lp-lda-olp-lda.txt
    sections V-VI): it spends nothing, so it has no epsilon or delta of its own."""

    dataset: str = Field(description="name of the local dataset (ingested with --local-reports)")
    topics: int = Field(ge=1, le=MAX_TOPICS, description="number of topics k")
    mechanism: Literal["lp-lda", "olp-lda"] = Field(
        "lp-lda",
        description="lp-lda: one model from the chosen batches (section V); olp-lda: an online "
        "model updated with each new batch, one release per batch (section VI, Algorithm 2)",
    )
    iterations: int = Field(200, ge=1, description="Gibbs sweeps per model (per batch for olp-lda)")
    alpha: float = Field(0.1, gt=0, description="document-topic prior alpha")
    beta: float = Field(0.01, gt=0, description="topic-word prior beta")
    prior: str | None = Field(
        None,
        description="olp-lda: the public prior dataset D0 (ingested with --public), whose "
        "non-private model starts the online one",
    )
    correlation: float = Field(
        0.5,
        ge=0,
        le=1,
        description="olp-lda: lambda, the weight of the last model in the next "
        "batch's prior (eq. 10)",
    )
    omega: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="olp-lda: omega, the weight of the prior mean in the Bayesian estimate "
        "(eq. 19; 0 gives eq. 8's moment estimate); default: per batch, Theorem 6's omega for "
        "a prior variance estimated from the reports (empirical Bayes, free)",
    )
    model: str = Field(
        "default", description="olp-lda: name of the online model (several can follow one dataset)"
    )
    batches: str | None = Field(
        None,
        description="lp-lda: train on these report batches only, a range 3..5 or a list 1,3,7 "
        "(default: every batch)",
    )
    seed: int | None = Field(
        None,
        ge=0,
        lt=2**63,
        description="seed of the reconstruction and sampling "
        "(post-processing of the reports: it does not weaken the local guarantee)",
    )
    workspace: str | None = Field(
        None, description="workspace directory (default: $FDPTM_WORKSPACE or ./fdptm-workspace)"
    )

    @field_validator("topics", "iterations", "seed", mode="before")
    @classmethod
    def _not_a_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number, not true/false")
        return value

    @field_validator("batches")
    @classmethod
    def _batch_numbers(cls, value: str | None) -> str | None:
        from fdptm.storage.partitions import parse_batches

        try:
            parse_batches(value)
        except BadInputError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _online_needs_a_prior(self) -> LocalReleaseRequest:
        if self.mechanism == "olp-lda" and self.prior is None:
            raise ValueError("olp-lda starts from a public prior dataset D0: give --prior DATASET")
        if self.mechanism == "olp-lda" and self.batches is not None:
            raise ValueError("olp-lda takes every new batch in order; --batches is for lp-lda")
        return self


def default(name: str) -> Any:
    """The default of request field ``name``: the one place a release default lives."""
    return ReleaseRequest.model_fields[name].get_default(call_default_factory=True)


def describe(exc: ValidationError) -> str:
    """One line per invalid field, in the CLI's spelling (``--max-docs-per-author``)."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "request"
        flag = "--" + where.replace("_", "-") if err["loc"] else where
        if err["type"] == "missing":
            lines.append(f"{flag} is required")
            continue
        given = f" (got {err['input']!r})" if "input" in err else ""
        lines.append(f"{flag}: {err['msg']}{given}")
    return "invalid release request: " + "; ".join(lines)


def _base_type(annotation: Any) -> Any:
    """``int | None`` -> int; other annotations as they are."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _number(cast: type) -> Any:
    def parse(text: str) -> Any:
        try:
            return cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None

    parse.__name__ = cast.__name__
    return parse


def add_arguments(
    parser: argparse.ArgumentParser,
    *,
    exclude: tuple[str, ...] = (),
    required: bool = True,
    unless: str | None = None,
    model: type[_Request] = ReleaseRequest,
) -> None:
    """Add one option per field of ``model`` (but ``exclude``) to ``parser``.

    The options have no defaults of their own (an option not given is None and the model
    fills in its default, shown in ``--help``), so the command line cannot drift from the
    model, and a caller can tell which options were given. ``required=False`` leaves even
    the fields without a default optional for argparse (``fdptm release --resume`` needs
    none of them); the model still requires them, and ``--help`` says "required unless
    ``unless``".
    """
    for name, info in model.model_fields.items():
        if name in exclude:
            continue
        flag = "--" + name.replace("_", "-")
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        if info.is_required():
            shown = " (required)" if required or unless is None else f" (required unless {unless})"
        else:
            shown = "" if default in (None, {}, False) else f" (default {default})"
        help_text = f"{info.description}{shown}"
        kind = _base_type(info.annotation)
        if name == "m2_options":
            parser.add_argument("--m2-option", action="append", metavar="KEY=VALUE", help=help_text)
        elif kind is bool:
            parser.add_argument(flag, action="store_true", default=None, help=help_text)
        elif typing.get_origin(kind) is Literal:
            parser.add_argument(flag, choices=list(typing.get_args(kind)), help=help_text)
        elif name == "mechanism":
            parser.add_argument(flag, choices=list(MECHANISMS), help=help_text)
        elif kind in (int, float):
            parser.add_argument(
                flag, type=_number(kind), required=required and info.is_required(), help=help_text
            )
        else:
            parser.add_argument(flag, required=required and info.is_required(), help=help_text)


def given(args: argparse.Namespace) -> list[str]:
    """The release options given on the command line (``--workspace`` aside)."""
    return sorted(
        "--" + name.replace("_", "-")
        for name in ReleaseRequest.model_fields
        if name != "workspace"
        and getattr(args, "m2_option" if name == "m2_options" else name, None) is not None
    )


def from_arguments(
    args: argparse.Namespace, model: type[_Request] = ReleaseRequest, **overrides: Any
) -> Any:
    """The ``model`` request an ``add_arguments`` parser read; ``overrides`` win."""
    fields: dict[str, Any] = {}
    for name in model.model_fields:
        if name == "m2_options":
            if getattr(args, "m2_option", None):
                pairs = args.m2_option
                options = dict(parse_option(p) for p in pairs)
                if len(options) != len(pairs):
                    raise BadInputError(f"an M2 option is given twice in {pairs}")
                fields[name] = options
        elif getattr(args, name, None) is not None:
            fields[name] = getattr(args, name)
    return model.build(**{**fields, **overrides})
