"""The M2 mechanisms a run can use (``--mechanism NAME``) and how each is called.

Every mechanism is one module that provides an ``Implementation``:
``params(epsilon, delta, *, ...)``, whose keyword parameters are checked against the
module's declared ``PARAMETER_CONSTRAINTS`` (``fdptm.mechanisms.constraints``: a
``BadInputError`` before any private data is read), calibrates the noise and returns ``M2Params``
(``to_dict()`` and ``guarantee()``); ``train(corpus, n_topics, params, noise, *, progress)``
returns the DP topic-word matrix; an optional ``public_check(params, n_words)`` refuses what
the public vocabulary size rules out. The registry adds what the pipeline needs to plan a
run: the notion of privacy, the adjacency the guarantee holds for on a dataset of a given
unit, and whether the mechanism uses delta. Each entry names a loader, a function that
imports its module and returns its ``Implementation``: the modules (numba kernels
included) take about 1.7 s to import, so ``fdptm release --epsilon 0`` and every other
refusal stay fast by importing only the mechanism a run uses. Mechanism options
(``--m2-option key=value``) are the keyword parameters of ``params`` that the pipeline does
not fill in itself; unknown options are refused.

Adding a mechanism: write its module (the declared constraints, ``params``, ``train``, their
docstrings stating the adjacency and the guarantee with the paper's section), a loader below,
and one
``Mechanism(...)`` line in ``MECHANISMS`` (the manual: docs/how-to/add-a-mechanism.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from fdptm.errors import BadInputError
from fdptm.mechanisms.guarantee import (
    APPROXIMATE_DP,
    CLAIMED_UNPROVEN,
    RANDOM_DP,
    Guarantee,
)
from fdptm.privacy.adjacency import Adjacency

if TYPE_CHECKING:
    from fdptm.evaluation.significance import WordTest


class M2Params(Protocol):
    """Calibrated parameters of one M2 run: public functions of the request."""

    def to_dict(self) -> dict: ...

    def guarantee(self) -> Guarantee: ...


class ParamsFunction(Protocol):
    """``params(epsilon, delta, *, ...)``: validate, calibrate, return ``M2Params``."""

    def __call__(self, epsilon: float, delta: float, **kwargs: Any) -> M2Params: ...


class Trainer(Protocol):
    """``train(corpus, n_topics, params, noise, *, progress, ...)``: the k x V DP matrix."""

    def __call__(
        self, corpus: Any, n_topics: int, params: Any, noise: Any, **kwargs: Any
    ) -> Any: ...


@dataclass(frozen=True)
class Implementation:
    """What a mechanism module provides (module docstring)."""

    params: ParamsFunction
    train: Trainer
    public_check: Callable[[Any, int], None] | None = None
    entry_noise: Callable[[Any, dict], WordTest | None] | None = None
    """The public law of each released entry's noise, given the calibrated parameters and
    the parameters M2 released (``fdptm.evaluation.significance``); None: no such model."""


DEFAULT_MECHANISM = "biterm"
"""Chosen from unseeded production releases (benchmarks/utility.md: PHEME at epsilon 1 and
3, document level; a synthetic author-level corpus with a heavy tail), where it beat dp-vi in
every cell; docs/reference/mechanisms.md, "Choosing the default M2"."""
TUNED_DEFAULT = "dp-vi"
"""The mechanism ``--tune`` uses when none is named (the only one with a tuned form)."""
DATASET_UNITS = (Adjacency.AUTHOR, Adjacency.DOCUMENT)
CONTEXT = ("n_topics", "adjacency", "max_docs_per_author", "max_tokens_per_doc", "iterations")


def _same_unit(unit: Adjacency) -> Adjacency:
    return unit


def _word(unit: Adjacency) -> Adjacency:
    return Adjacency.WORD


def _replace(unit: Adjacency) -> Adjacency:
    return Adjacency.AUTHOR_REPLACE if unit == Adjacency.AUTHOR else Adjacency.DOCUMENT_REPLACE


@dataclass(frozen=True)
class Mechanism:
    """One M2 mechanism: what it guarantees, and where its params and trainer live."""

    name: str
    summary: str
    notion: str
    uses_delta: bool
    adjacency_for: Callable[[Adjacency], Adjacency]
    load: Callable[[], Implementation]
    fixed: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    trains_on_oov: bool = True

    @property
    def implementation(self) -> Implementation:
        """The module's functions, imported on first use."""
        return self.load()

    def options(self) -> dict[str, Any]:
        """The user-settable options and their defaults."""
        sig = inspect.signature(self.implementation.params)
        return {
            n: self.defaults.get(n, p.default)
            for n, p in sig.parameters.items()
            if p.kind == p.KEYWORD_ONLY and n not in CONTEXT and n not in self.fixed
        }

    def describe(self) -> dict[str, Any]:
        """What ``fdptm mechanisms`` lists: the guarantee's notion and adjacency on author
        and document datasets, and every option with its default and its declaration."""
        from fdptm.mechanisms.constraints import declared

        constraints = declared(self.implementation.params)
        return {
            "name": self.name,
            "summary": self.summary,
            "notion": self.notion,
            "uses_delta": self.uses_delta,
            "adjacency": {u.value: self.adjacency_for(u).value for u in DATASET_UNITS},
            "options": [
                {
                    "name": name,
                    "default": default,
                    "what": constraints[name].what,
                    "accepts": constraints[name].describe(),
                    "hint": constraints[name].hint,
                }
                for name, default in self.options().items()
            ],
        }

    def params(
        self, epsilon: float, delta: float, context: dict[str, Any], options: dict[str, Any]
    ) -> Any:
        """Validated, calibrated parameters; BadInputError names any unknown option."""
        accepted = self.options()
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise BadInputError(
                f"mechanism {self.name!r} has no option(s) {unknown}; its options are "
                + (", ".join(f"{k} (default {v!r})" for k, v in accepted.items()) or "none")
            )
        fn = self.implementation.params
        wanted = inspect.signature(fn).parameters
        kwargs = {k: v for k, v in context.items() if k in wanted}
        return fn(epsilon, delta, **kwargs, **self.fixed, **{**self.defaults, **options})

    def check_public(self, params: Any, n_words: int) -> None:
        """Refuse what the (public) vocabulary size rules out, before private data is read."""
        check = self.implementation.public_check
        if check is not None:
            check(params, n_words)

    def entry_noise(self, params: Any, released: dict) -> WordTest | None:
        """The law of a released entry's noise (None when the mechanism has no model of it:
        its word lists are then untested, ``fdptm.evaluation.significance``)."""
        model = self.implementation.entry_noise
        return None if model is None else model(params, released)

    def train(self, corpus: Any, n_topics: int, params: Any, noise: Any, **kwargs: Any) -> Any:
        """The topic-word matrix over ``corpus``'s columns, SAN's OOV id (the last) included.

        A mechanism that does not train on the OOV token (``trains_on_oov``) gets the corpus
        without it (and a public prior without its column) and returns a zero OOV column.
        """
        fn = self.implementation.train
        if self.trains_on_oov:
            return fn(corpus, n_topics, params, noise, **kwargs)
        import numpy as np

        from fdptm.mechanisms.lda import without_word

        oov = corpus.n_words - 1
        if kwargs.get("public_topics") is not None:
            kwargs["public_topics"] = np.asarray(kwargs["public_topics"])[:, :oov]
        phi = fn(without_word(corpus, oov), n_topics, params, noise, **kwargs)
        return np.hstack([phi, np.zeros((phi.shape[0], 1))])

    @property
    def takes_public_prior(self) -> bool:
        """Whether the trainer accepts ``public_topics`` (a public prior's topic counts)."""
        return "public_topics" in inspect.signature(self.implementation.train).parameters

    @property
    def releases_parameters(self) -> bool:
        """Whether the trainer releases DP parameters of its own (``released``: dp-vi's
        private clipping norm), which the manifest reports."""
        return "released" in inspect.signature(self.implementation.train).parameters

    def guarantee(self, params: Any) -> Guarantee:
        g = params.guarantee()
        if g.notion != self.notion:
            raise AssertionError(f"{self.name} states {g.notion}, registered as {self.notion}")
        return g


@cache
def _hdp_lda() -> Implementation:
    from fdptm.mechanisms import lda

    return Implementation(
        lda.hdp_lda_params_for_run, lda.train_hdp_lda, entry_noise=lda.entry_noise
    )


@cache
def _noisy_cgs() -> Implementation:
    from fdptm.mechanisms import noisy_cgs

    return Implementation(
        noisy_cgs.noisy_cgs_params, noisy_cgs.train_noisy_cgs, entry_noise=noisy_cgs.entry_noise
    )


@cache
def _spectral() -> Implementation:
    from fdptm.mechanisms import spectral

    return Implementation(
        spectral.spectral_params, spectral.train_spectral, spectral.check_vocabulary
    )


@cache
def _topicdp() -> Implementation:
    from fdptm.mechanisms import topicdp

    return Implementation(topicdp.topicdp_params, topicdp.train_topicdp, topicdp.check_vocabulary)


@cache
def _dp_vi() -> Implementation:
    from fdptm.mechanisms import dp_vi

    return Implementation(dp_vi.dp_vi_params, dp_vi.train_dp_vi, entry_noise=dp_vi.entry_noise)


@cache
def _biterm() -> Implementation:
    from fdptm.mechanisms import biterm

    return Implementation(
        biterm.biterm_params,
        biterm.train_biterm,
        biterm.check_vocabulary,
        entry_noise=biterm.entry_noise,
    )


@cache
def _tuned_dp_vi() -> Implementation:
    from fdptm.mechanisms import tuning

    return Implementation(tuning.tuned_dp_vi_params, tuning.train_tuned_dp_vi)


MECHANISMS: dict[str, Mechanism] = {
    m.name: m
    for m in [
        Mechanism(
            "hdp-lda",
            "CGS with Laplace noise and clipping every iteration (Zhao et al. Alg. 1)",
            APPROXIMATE_DP,
            False,
            _word,
            _hdp_lda,
        ),
        Mechanism(
            "zhu",
            "CGS, Laplace noise on the counts in the last iteration (Zhu et al. 2016)",
            CLAIMED_UNPROVEN,
            False,
            _same_unit,
            _noisy_cgs,
            {"variant": "zhu"},
        ),
        Mechanism(
            "cdp-lda",
            "CGS, Laplace noise on the counts at the first iteration (CDP-LDA)",
            CLAIMED_UNPROVEN,
            False,
            _word,
            _noisy_cgs,
            {"variant": "cdp-lda"},
        ),
        Mechanism(
            "cdp-lda-plus",
            "CGS, Laplace noise on the counts in every iteration (CDP-LDA+)",
            CLAIMED_UNPROVEN,
            False,
            _word,
            _noisy_cgs,
            {"variant": "cdp-lda-plus"},
        ),
        Mechanism(
            "spectral",
            "DP spectral LDA: moments, whitening, tensor power method (DeCarolis et al.)",
            APPROXIMATE_DP,
            True,
            _replace,
            _spectral,
            {"claimed_unproven": False},
        ),
        Mechanism(
            "spectral-unproven",
            "DP spectral LDA configurations 3-4, whose proof does not hold (config=3 or 4)",
            CLAIMED_UNPROVEN,
            True,
            _replace,
            _spectral,
            {"claimed_unproven": True},
            {"config": 3},
        ),
        Mechanism(
            "topicdp",
            "output perturbation with sampled sensitivity, Gaussian (TopicDP Alg. 1-2)",
            RANDOM_DP,
            True,
            _same_unit,
            _topicdp,
            {"variant": "gaussian"},
        ),
        Mechanism(
            "topicdp-laplace",
            "output perturbation with Laplace noise at global sensitivity (TopicDP ch. 5)",
            APPROXIMATE_DP,
            False,
            _same_unit,
            _topicdp,
            {"variant": "laplace"},
        ),
        Mechanism(
            "topicdp-mvg",
            "output perturbation with the matrix-variate Gaussian mechanism (TopicDP ch. 5)",
            RANDOM_DP,
            True,
            _same_unit,
            _topicdp,
            {"variant": "mvg"},
        ),
        Mechanism(
            "dp-vi",
            "variational LDA, per-author clipped statistics + Gaussian noise, RDP/PLD",
            APPROXIMATE_DP,
            True,
            _same_unit,
            _dp_vi,
            trains_on_oov=False,
        ),
        Mechanism(
            "biterm",
            "one noisy biterm statistic (per-unit clipped, Gaussian), then a biterm model",
            APPROXIMATE_DP,
            True,
            _same_unit,
            _biterm,
            trains_on_oov=False,
        ),
    ]
}


TUNED: dict[str, Mechanism] = {
    "dp-vi": Mechanism(
        "dp-vi+tune",
        "dp-vi with private hyper-parameter selection (Papernot & Steinke 2022, Theorem 2)",
        APPROXIMATE_DP,
        True,
        _same_unit,
        _tuned_dp_vi,
        trains_on_oov=False,
    )
}
"""The mechanisms ``--tune`` can wrap, as the tuned mechanism a run then uses."""


def tuned(name: str) -> Mechanism:
    """The tuned form of mechanism ``name``; BadInputError when it has none."""
    try:
        return TUNED[name]
    except KeyError:
        raise BadInputError(
            f"--tune selects hyper-parameters of {', '.join(TUNED)} only, not {name!r}; "
            "drop --tune or use --mechanism dp-vi"
        ) from None


def mechanism(name: str) -> Mechanism:
    """The registered mechanism ``name``; BadInputError lists the available ones."""
    try:
        return MECHANISMS[name]
    except KeyError:
        raise BadInputError(
            f"unknown M2 mechanism {name!r}; available: {', '.join(MECHANISMS)}"
        ) from None


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` with the value read as bool, int, float or string, in that order."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise BadInputError(f"a mechanism option is key=value, got {text!r}")
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return key, lowered == "true"
    for cast in (int, float):
        try:
            return key, cast(raw)
        except ValueError:
            pass
    return key, raw
