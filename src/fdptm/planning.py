"""``fdptm plan``: what a release would give, predicted before anything is spent (issue 28,
item 3).

Inputs, all public: the release request and its calibration (M1's threshold and noise, M2's
noise, the word-list test's cut-off: ``fdptm.evaluation.significance``), the number of the
dataset's privacy units as the user states it (``--units``: a public figure, such as a
published or rounded count, never one read off the data), the tokens a unit holds after PRE
(``--tokens-per-unit``, stated too) and a public word distribution standing in for the
private one: the run's ``--vocabulary`` list, else ``FALLBACK_WORDS`` (wordfreq's English
list after the run's PRE). Nothing here reads the private dataset: a plan spends nothing.

The model, deliberately simple so that its assumptions can be stated and checked:

* Synthetic corpora: N units of L tokens, each unit on one of k topics (uniformly); a
  unit's tokens come from its topic with probability ``TOPICAL``, else from the public
  distribution p. A topic is a Zipf(1) distribution over ``TOPIC_WORDS`` words drawn at
  random among the public list's ``TOPIC_POOL`` most frequent, so its strongest word holds
  ``TOP_SHARE`` = ``TOPICAL`` / H(``TOPIC_WORDS``) (about 9.6%) of a unit's tokens.
* M1 is simulated, not approximated: ``REPEATS`` such corpora go through the run's own M1
  mechanism with its calibrated parameters (DP set union's policy, threshold and noise, or
  the Bayesian prior, or the public list itself), with throw-away noise. The vocabulary's
  prediction is the median size and the range over them. Synthetic public data: nothing
  private is read, and the simulation's noise protects nothing.
* M2: a unit's n tokens after SAN (L times the share of the simulated tokens that the
  simulated vocabulary keeps), on one topic, make dp-vi a statistic of L2 norm about
  sqrt(n) (one token per distinct word) clipped to C (a private clip is taken at sqrt(n),
  the quantile it aims at), so a topic's N / k units give its strongest word an expected
  count of (N / k) L ``TOP_SHARE`` min(1, C / sqrt(n)); the Gibbs mechanisms (hdp-lda, the
  noisy-CGS baselines) count tokens unclipped: (N / k) L ``TOP_SHARE``. Topics are
  predicted to stand above the noise when that count exceeds the cut-off of the release's
  word-list test (the same test), and the vocabulary has a word.
* biterm tests pairs, not topic-word entries, and its statistic is simulated too: on each
  synthetic corpus, after SAN to that corpus's simulated vocabulary, the exact clipped pair
  sum B is computed by the mechanism's own kernel (each unit one document: an author whose
  tokens are spread over several documents has fewer pairs, so this leans optimistic), and
  the median over the corpora of its largest entry is judged against the pair test's
  cut-off over the V (V + 1) / 2 pairs. The largest pair can be two frequent background
  words, which the release would list too; a public prior does not change the test.
* Mechanisms without a noise model (spectral, topicdp, dp-vi with --tune) get the
  vocabulary's prediction only.

``TOPICAL``, the topics' shape and the one-topic-per-unit assumption are the model's own;
``benchmarks/plan.md`` measures how often the verdict agrees with real releases.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from fdptm.errors import BadInputError
from fdptm.evaluation.significance import DEFAULT_ALPHA, EntryNoise

FALLBACK_WORDS = "wordfreq:en"
TOPICAL = 0.5
"""The share of a unit's tokens that come from its topic (the model's assumption)."""
TOPIC_WORDS = 100
TOPIC_POOL = 5_000
TOP_SHARE = TOPICAL / sum(1.0 / r for r in range(1, TOPIC_WORDS + 1))
"""The share of a unit's tokens its topic's strongest word holds."""
REPEATS = 10
"""Synthetic corpora M1 is simulated on."""
MAX_SIMULATED_TOKENS = 50_000_000
"""The largest synthetic corpus a plan simulates (about 1 GB of working memory)."""
SIGNAL, NO_SIGNAL, UNKNOWN = "signal", "no signal", "unknown"
PAIRS_MECHANISM = "biterm"
"""The mechanism whose word lists are tested on its noisy pair statistic (``_top_pair``)."""


@dataclass(frozen=True)
class Prediction:
    """A plan: the vocabulary M1 is expected to release, and whether M2's topics are
    expected to stand above the noise, with what would change that."""

    units: int
    tokens_per_unit: int
    words_from: str
    vocabulary_expected: float
    vocabulary_range: tuple[int, int]
    probability_filled: float
    """P(the DP vocabulary has fewer than k words, so public words fill it up to k)."""
    noise: dict | None
    cutoff: float | None
    expected_top_count: float | None
    verdict: str
    advice: list[str] = field(default_factory=list)
    strongest: str = "word"
    """What the test judges: a topic's strongest word, or (biterm) its strongest pair."""

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """One line: the vocabulary, the strongest word against the cut-off, the verdict."""
        text = f"vocabulary about {self.vocabulary_expected:.0f} words"
        if self.verdict == UNKNOWN:
            return text + "; topics unknown (no public noise model)"
        return (
            f"{text}; a topic's strongest {self.strongest} about "
            f"{self.expected_top_count:.3g} against the noise cut-off {self.cutoff:.3g}: "
            f"{self.verdict}"
        )

    def lines(self) -> list[str]:
        """What ``fdptm plan`` prints."""
        low, high = self.vocabulary_range
        out = [
            f"assumed (stated, public): {self.units} privacy units of about "
            f"{self.tokens_per_unit} tokens, words distributed as {self.words_from}",
            f"vocabulary: about {self.vocabulary_expected:.0f} words ({low} to {high} over "
            f"{REPEATS} simulations of M1)",
        ]
        if self.probability_filled > 0:
            out.append(
                f"  fewer than k words in {self.probability_filled:.0%} of the simulations: the "
                "run then fills the vocabulary up to k with public words"
            )
        if self.verdict == UNKNOWN:
            out.append("topics: unknown (this mechanism has no public model of its noise)")
            return out
        out.append(
            f"topics: a topic's strongest {self.strongest} expected at a count of about "
            f"{self.expected_top_count:.3g}, against the noise cut-off {self.cutoff:.3g} "
            f"({self.noise['law']} noise of scale {self.noise['scale']:.3g} per entry)"
        )
        out.append(f"prediction: {self.verdict}")
        out.extend(f"  to change it: {a}" for a in self.advice)
        return out


def simulated_vocabularies(
    request, spec, calibration, public, repeats: int = REPEATS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``repeats`` x V: which of ``public``'s words the run's M1 releases on each of
    ``repeats`` synthetic corpora of ``request.units`` units of ``request.tokens_per_unit``
    tokens (module docstring); per corpus the share of its tokens the vocabulary keeps; and,
    for biterm, per corpus its strongest clipped pair count (``_strongest_pair``; 0
    otherwise). Seeded by ``request.seed`` when set (tests)."""
    import pyarrow as pa

    from fdptm.privacy.noise import NoiseSource
    from fdptm.tasks.vocabulary import EncodedTokens

    if request.units * request.tokens_per_unit > MAX_SIMULATED_TOKENS:
        raise BadInputError(
            f"a plan simulates corpora of --units x --tokens-per-unit tokens in memory, at most "
            f"{MAX_SIMULATED_TOKENS:,}; got {request.units * request.tokens_per_unit:,}. State "
            "fewer units (a plan of fewer units predicts a smaller vocabulary and weaker "
            "topics: a lower bound)"
        )
    n_words = len(public.words)
    chosen = np.zeros((repeats, n_words), dtype=bool)
    kept = np.zeros(repeats)
    strongest = np.zeros(repeats)
    p = public.counts / public.counts.sum()
    gen = np.random.default_rng(request.seed)
    units, length = request.units, request.tokens_per_unit
    words = pa.array(public.words, pa.string())
    doc_ptr = np.arange(units + 1, dtype=np.int64) * length
    for r in range(repeats):
        word_idx = _synthetic_tokens(gen, p, request.topics, units, length)
        if spec.vocabulary_selection == "none":
            chosen[r] = np.isin(public.words, public.most_frequent(spec.vocabulary_size))
        else:
            tokens = EncodedTokens(doc_ptr, word_idx, words, np.arange(units, dtype=np.int64))
            noise = NoiseSource.internal(None if request.seed is None else request.seed + r)
            selection = spec.vocabulary_mechanism.select(
                tokens, public, calibration.m1, spec.vocabulary_size, noise
            )
            chosen[r] = np.isin(public.words, selection.words)
        kept[r] = float(np.mean(chosen[r][word_idx]))
        if request.mechanism == PAIRS_MECHANISM:
            strongest[r] = _strongest_pair(word_idx, chosen[r], units, calibration.m2)
    return chosen, kept, strongest


def _strongest_pair(word_idx: np.ndarray, chosen: np.ndarray, units: int, params) -> float:
    """biterm's largest entry of B, the exact clipped pair sum, on one synthetic corpus
    after SAN to the simulated vocabulary (each unit one document)."""
    from fdptm.mechanisms.biterm import clipped_biterms
    from fdptm.mechanisms.dp_vi import statistic_grid
    from fdptm.mechanisms.lda import Corpus

    ids = np.cumsum(chosen) - 1
    keep = chosen[word_idx]
    unit_of = np.repeat(np.arange(units), word_idx.size // units)
    doc_ptr = np.zeros(units + 1, dtype=np.int64)
    np.cumsum(np.bincount(unit_of[keep], minlength=units), out=doc_ptr[1:])
    vocabulary = int(chosen.sum())
    if vocabulary == 0:
        return 0.0
    corpus = Corpus(doc_ptr, ids[word_idx[keep]].astype(np.int64), vocabulary)
    return float(clipped_biterms(corpus, params).max()) * statistic_grid(params.clip)


def _synthetic_tokens(gen, p: np.ndarray, k: int, units: int, length: int) -> np.ndarray:
    """The word ids of one synthetic corpus (module docstring), unit after unit."""
    pool = np.argsort(-p, kind="stable")[:TOPIC_POOL]
    size = min(TOPIC_WORDS, pool.size)
    zipf = 1.0 / np.arange(1, size + 1)
    topics = np.stack([gen.choice(pool, size, replace=False) for _ in range(k)])  # k x size
    unit_topic = gen.integers(k, size=units)
    background = gen.choice(p.size, size=(units, length), p=p).astype(np.int32)
    own = topics[unit_topic[:, None], gen.choice(size, size=(units, length), p=zipf / zipf.sum())]
    from_topic = gen.random((units, length)) < TOPICAL
    return np.where(from_topic, own, background).astype(np.int32).ravel()


def predict(
    request,
    calibration,
    chosen: np.ndarray,
    kept: np.ndarray,
    words_from: str,
    strongest: np.ndarray | None = None,
):
    """The plan of ``request`` (with ``units`` and ``tokens_per_unit``) calibrated as
    ``calibration``, from M1's simulated vocabularies ``chosen``, the shares ``kept`` of
    the simulated tokens they keep and (biterm) their ``strongest`` clipped pair counts
    (``simulated_vocabularies``)."""
    from fdptm.mechanisms.registry import mechanism

    sizes = chosen.sum(axis=1)
    expected = float(np.median(sizes))
    filled = float(np.mean(sizes < request.topics))
    common = (
        request.units,
        request.tokens_per_unit,
        words_from,
        expected,
        (int(sizes.min()), int(sizes.max())),
        filled,
    )
    tokens = request.tokens_per_unit * float(np.median(kept))
    words = max(round(expected), request.topics)
    if request.mechanism == PAIRS_MECHANISM:  # tested on its pairs, with or without a prior
        noise = EntryNoise("gaussian", calibration.m2.noise_std, 0.0)
        cutoff = noise.cutoff(words * (words + 1) // 2, DEFAULT_ALPHA)
        top = float(np.median(strongest)) if strongest is not None else 0.0
        verdict = SIGNAL if top > cutoff and expected >= 1 else NO_SIGNAL
        advice = [] if verdict == SIGNAL else _advice(request, top, cutoff)
        return Prediction(*common, noise.to_dict(), cutoff, top, verdict, advice, "pair")
    untested = request.tune or request.prior is not None  # as the release's manifest says
    noise = None if untested else _noise(mechanism(request.mechanism), calibration, tokens)
    if noise is None:
        return Prediction(*common, None, None, None, UNKNOWN)
    cutoff = noise.cutoff(request.topics * words, DEFAULT_ALPHA)
    top = request.units / request.topics * request.tokens_per_unit * TOP_SHARE
    if noise.law == "gaussian" and tokens > 0:  # dp-vi's clip
        top *= min(1.0, _clip(calibration.m2, tokens) / math.sqrt(tokens))
    verdict = SIGNAL if top > cutoff and expected >= 1 else NO_SIGNAL
    advice = [] if verdict == SIGNAL else _advice(request, top, cutoff)
    return Prediction(*common, noise.to_dict(), cutoff, top, verdict, advice)


def _noise(m2, calibration, tokens: float) -> EntryNoise | None:
    """The release's noise model, a private clip taken at the norm it aims at."""
    return m2.entry_noise(calibration.m2, {"clip": _clip(calibration.m2, tokens)})


def _clip(params, tokens: float) -> float:
    """dp-vi's clip: the calibrated one, or sqrt(n) for a private one (see the module
    docstring); mechanisms without one never reach here with the Gaussian law."""
    clip = getattr(params, "clip", None)
    return float(clip) if clip is not None else math.sqrt(max(tokens, 1.0))


def _advice(request, top: float, cutoff: float) -> list[str]:
    """What would bring a topic's top word above the cut-off, from the model's scaling."""
    ratio = cutoff / top if top > 0 else math.inf
    advice = []
    if math.isfinite(ratio) and request.topics > 1 and request.topics / ratio >= 1:
        advice.append(
            f"--topics {max(1, math.floor(request.topics / ratio))} (signal grows as 1/k)"
        )
    if math.isfinite(ratio):
        advice.append(
            f"about {ratio:.2g} times the units or the epsilon (the noise's scale falls about "
            "as 1/epsilon, the signal grows with the units)"
        )
    if request.vocabulary is None:
        advice.append(
            "a public vocabulary (--vocabulary wordfreq:en:2000 --m1 none): M2 gets the "
            "whole budget"
        )
    return advice
