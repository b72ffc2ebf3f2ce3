"""M2: LDA by collapsed Gibbs sampling, non-private and HDP-LDA.

HDP-LDA is Algorithm 1 of Zhao et al. ("hdp-lda-lp-lda-olp-lda.txt", section IV-D):
every iteration adds Laplace(2/eps_L) noise to a copy of the topic-word counts and samples
from clipped (at C) sanitized counts. Theorem 3: each iteration is (eps_L + eps_I)-DP with
eps_I = 2 ln(C/beta + 1). Adjacency: word level, replacing one (preprocessed) token by
another (section IV-B2). Sensitivity 2 of the counts under that replacement (one count -1,
one +1) is why the noise scale is 2/eps_L.

After the T iterations the final counts are sanitized once more, with the same
Laplace(2/eps_L) (the Laplace mechanism on counts of sensitivity 2), and the released
topic-word matrix is computed from them (post-processing). By basic composition the whole
run is (T (eps_L + eps_I) + eps_L)-DP. The true counts are never written with noise or
clipping: the paper authors' reference code adds the noise into its counts, which then go
negative and break the sampler; here noise and clipping live on a copy only. Every
sanitized copy is formed by the run's NoiseSource from the true counts (``add_laplace``:
OpenDP's floating-point-safe sampler in production), never as counts + separately drawn
float noise.

The non-private sampler is the internal baseline; its output is not DP and is never
released.
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
    OPEN_FRACTION,
    POSITIVE,
    param,
    validate_params,
)
from fdptm.mechanisms.guarantee import APPROXIMATE_DP, Guarantee
from fdptm.privacy import events
from fdptm.privacy.accountant import check_epsilon
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource

COUNT_SENSITIVITY = 2.0
"""l1 sensitivity of the topic-word counts when one token is replaced (one count -1, one +1)."""


@dataclass(frozen=True)
class Corpus:
    """Documents as flat token arrays: document d owns words[doc_ptr[d]:doc_ptr[d+1]].

    ``doc_author[d]`` is the author code (0..A-1) of document d, for author-level mechanisms;
    word-level ones ignore it.
    """

    doc_ptr: np.ndarray
    words: np.ndarray
    n_words: int
    doc_author: np.ndarray | None = None

    @property
    def n_docs(self) -> int:
        return len(self.doc_ptr) - 1

    @property
    def n_tokens(self) -> int:
        return len(self.words)


def subset(corpus: Corpus, keep: np.ndarray) -> Corpus:
    """The documents where ``keep`` is True, in order."""
    lengths = np.diff(corpus.doc_ptr)
    token_keep = np.repeat(keep, lengths)
    doc_ptr = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(lengths[keep], out=doc_ptr[1:])
    authors = None if corpus.doc_author is None else corpus.doc_author[keep]
    return Corpus(doc_ptr, corpus.words[token_keep], corpus.n_words, authors)


def without_word(corpus: Corpus, word: int) -> Corpus:
    """The corpus with every token of ``word`` removed and ``n_words`` cut to ``word``
    (the OOV id is the last one), documents left empty dropped."""
    keep_token = corpus.words != word
    owner = np.repeat(np.arange(corpus.n_docs), np.diff(corpus.doc_ptr))
    lengths = np.bincount(owner[keep_token], minlength=corpus.n_docs)
    doc_ptr = np.zeros(corpus.n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=doc_ptr[1:])
    trimmed = Corpus(doc_ptr, corpus.words[keep_token], word, corpus.doc_author)
    return subset(trimmed, lengths > 0)


@dataclass(frozen=True)
class HdpLdaParams:
    """HDP-LDA's privacy parameters, derived from its epsilon and iteration count."""

    epsilon: float
    iterations: int
    epsilon_per_iteration: float
    epsilon_laplace: float
    epsilon_inherent: float
    clip: float
    beta: float
    laplace_scale: float
    alpha: float = 1.0
    reporting_delta: float = 1e-5

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def guarantee(self) -> Guarantee:
        """Word-level pure epsilon-DP by basic composition (Theorem 3 over T iterations plus
        the final Laplace release), and the zCDP/RDP total of the same steps at
        ``reporting_delta`` for comparison: every iteration is (eps_L + eps_I)-DP and the
        final release eps_L-DP, and each eps-DP step is (eps^2/2)-zCDP."""
        event = events.composed(
            events.self_composed(events.pure(self.epsilon_per_iteration), self.iterations),
            events.laplace(self.laplace_scale / 2.0),
        )
        tight = events.epsilon_of(event, self.reporting_delta, "rdp")
        return Guarantee(
            notion=APPROXIMATE_DP,
            adjacency=Adjacency.WORD,
            epsilon=hdp_lda_epsilon(self),
            delta=0.0,
            accountant=(
                f"basic composition of {self.iterations} iterations (Theorem 3) and the final "
                f"Laplace release (charged); RDP of the same steps gives epsilon "
                f"{tight:.6g} at delta {self.reporting_delta:g} (reported only)"
            ),
            basic_epsilon=hdp_lda_epsilon(self),
            basic_delta=0.0,
            event=event,
            tight_epsilon=tight,
            tight_delta=self.reporting_delta,
        )


PARAMETER_CONSTRAINTS = {
    "iterations": ITERATIONS,
    "clip": param(POSITIVE, what="the clipping bound C"),
    "inherent_fraction": param(
        OPEN_FRACTION, what="the share of each iteration's epsilon spent by clipping"
    ),
    "alpha": param(POSITIVE, what="the document-topic prior"),
}
"""Every option of ``hdp_lda_params_for_run`` and what it accepts
(``fdptm.mechanisms.constraints``)."""


@validate_params(
    PARAMETER_CONSTRAINTS
    | {"reporting_delta": param(OPEN_FRACTION, what="the delta of the reported RDP total")}
)
def hdp_lda_params(
    epsilon: float,
    iterations: int,
    *,
    clip: float = 1000.0,
    inherent_fraction: float = 0.8,
    alpha: float = 1.0,
    reporting_delta: float = 1e-5,
) -> HdpLdaParams:
    """Split epsilon over T iterations and the final release, and between noise and clipping.

    Per iteration e = eps_L + eps_I with eps_I = inherent_fraction * e; the total
    T e + eps_L = e (T + 1 - inherent_fraction) equals epsilon. eps_I = 2 ln(C/beta + 1),
    the Laplace noise scale is 2/eps_L (Theorem 3). Floating-point rounding is resolved
    conservatively: beta is nudged up until eps_I is not exceeded, eps_L down until the
    total is not. The clipping bound C is a public input (Algorithm 1's "Input"); beta
    follows as C / (exp(eps_I / 2) - 1). The word factor of the sampler then ranges over
    [beta, C + beta], a ratio of exactly exp(eps_I / 2). Choosing C near the size of the
    largest topic-word counts keeps the clipped counts informative, and the larger beta it
    implies makes the sampler robust to the Laplace noise (the paper's section VII-B2 makes
    the same observation). Defaults (C = 1000, 80% of each iteration's epsilon inherent)
    are where HDP-LDA learned distinct topics on PHEME in our measurements; they are public
    constants, never tuned on the data of a run.
    """
    epsilon = check_epsilon(epsilon, "M2 epsilon")
    per_iteration = epsilon / (iterations + 1 - inherent_fraction)
    eps_inherent = inherent_fraction * per_iteration
    eps_laplace = per_iteration - eps_inherent
    beta = clip / math.expm1(eps_inherent / 2.0)
    while 2.0 * math.log(clip / beta + 1.0) > eps_inherent:
        beta = math.nextafter(beta, math.inf)
    while _total(iterations, eps_laplace, clip, beta) > epsilon:
        eps_laplace = math.nextafter(eps_laplace, 0.0)
    return HdpLdaParams(
        epsilon,
        iterations,
        per_iteration,
        eps_laplace,
        eps_inherent,
        clip,
        beta,
        COUNT_SENSITIVITY / eps_laplace,
        alpha,
        reporting_delta,
    )


@validate_params(PARAMETER_CONSTRAINTS)
def hdp_lda_params_for_run(
    epsilon: float,
    delta: float,
    *,
    iterations: int,
    clip: float = 1000.0,
    inherent_fraction: float = 0.8,
    alpha: float = 1.0,
) -> HdpLdaParams:
    """``hdp_lda_params`` in the registry's calling convention (``delta`` is only the delta
    at which the tighter RDP total is reported; HDP-LDA itself is pure epsilon-DP)."""
    return hdp_lda_params(
        epsilon,
        iterations,
        clip=clip,
        inherent_fraction=inherent_fraction,
        alpha=alpha,
        reporting_delta=delta,
    )


def _total(iterations: int, eps_laplace: float, clip: float, beta: float) -> float:
    return iterations * (eps_laplace + 2.0 * math.log(clip / beta + 1.0)) + eps_laplace


def hdp_lda_epsilon(params: HdpLdaParams) -> float:
    """Theorem 3 on ``params``, plus the final release: T (eps_L + 2 ln(C/beta + 1)) + eps_L."""
    return _total(params.iterations, params.epsilon_laplace, params.clip, params.beta)


def _check(corpus: Corpus, n_topics: int) -> None:
    if n_topics < 1:
        raise BadInputError(f"the number of topics must be >= 1, got {n_topics}")
    if corpus.n_tokens == 0:
        raise BadInputError("the corpus has no tokens left to train on")


def init_counts(corpus: Corpus, n_topics: int, gen: np.random.Generator):
    """Uniformly random topic assignments and the counts (z, n_dk, n_wk, n_k) they give."""
    z = gen.integers(0, n_topics, corpus.n_tokens).astype(np.int32)
    n_dk = np.zeros((corpus.n_docs, n_topics), dtype=np.int32)
    n_wk = np.zeros((corpus.n_words, n_topics), dtype=np.int32)
    n_k = np.zeros(n_topics, dtype=np.int64)
    gibbs.initialise(corpus.doc_ptr, corpus.words, z, n_dk, n_wk, n_k)
    return z, n_dk, n_wk, n_k


def train_cgs(
    corpus: Corpus,
    n_topics: int,
    iterations: int,
    noise: NoiseSource,
    *,
    alpha: float = 0.1,
    beta: float = 0.01,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Non-private collapsed Gibbs sampling; returns phi (topics x words). NOT DP."""
    counts = cgs_topic_counts(
        corpus, n_topics, iterations, noise, alpha=alpha, beta=beta, progress=progress
    )
    return (counts + beta) / (counts.sum(axis=1, keepdims=True) + corpus.n_words * beta)


def cgs_topic_counts(
    corpus: Corpus,
    n_topics: int,
    iterations: int,
    noise: NoiseSource,
    *,
    alpha: float = 0.1,
    beta: float = 0.01,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """The topic-word counts n_kw (topics x words) of the last sweep of non-private CGS.

    NOT DP: for non-private baselines, and for public data (a public prior's topics)."""
    _check(corpus, n_topics)
    gen = noise.generator
    z, n_dk, n_wk, n_k = init_counts(corpus, n_topics, gen)
    uniforms = np.empty(corpus.n_tokens)
    for _ in range(iterations):
        gen.random(out=uniforms)
        gibbs.cgs_sweep(corpus.doc_ptr, corpus.words, z, n_dk, n_wk, n_k, alpha, beta, uniforms)
        if progress:
            progress(1)
    return n_wk.T.astype(np.float64)


def train_hdp_lda(
    corpus: Corpus,
    n_topics: int,
    params: HdpLdaParams,
    noise: NoiseSource,
    *,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """HDP-LDA (Algorithm 1) and a final sanitization; returns the DP phi (topics x words).

    A corpus without tokens (an empty partition) still gets every noisy release, so whether
    a release appears never tells an empty input apart."""
    if n_topics < 1:
        raise BadInputError(f"the number of topics must be >= 1, got {n_topics}")
    gen = noise.generator
    z, n_dk, n_wk, _ = init_counts(corpus, n_topics, gen)
    uniforms = np.empty(corpus.n_tokens)
    sanitized = np.empty((corpus.n_words, n_topics))
    weights = np.empty((corpus.n_words, n_topics))
    # the kernel sanitizes as n_wk + eta; handing it 0 + the noisy counts keeps the sum exact
    no_counts = np.zeros_like(n_wk)
    for _ in range(params.iterations):
        noisy = noise.add_laplace(n_wk, params.laplace_scale, COUNT_SENSITIVITY)
        gibbs.hdp_weights(no_counts, noisy, params.clip, params.beta, sanitized, weights)
        gen.random(out=uniforms)
        gibbs.hdp_sweep(
            corpus.doc_ptr, corpus.words, z, n_dk, n_wk, weights, params.alpha, uniforms
        )
        if progress:
            progress(1)
    final = noise.add_laplace(n_wk, params.laplace_scale, COUNT_SENSITIVITY)
    released = np.maximum(final.T, 0.0) + params.beta
    return released / released.sum(axis=1, keepdims=True)


def entry_noise(params: HdpLdaParams, released: dict) -> EntryNoise:
    """Each released entry is beta + max(count + Laplace(b), 0): under no data, 0 with
    probability 1/2 and Exponential(b) otherwise (``fdptm.evaluation.significance``)."""
    return EntryNoise("laplace", params.laplace_scale, params.beta)
