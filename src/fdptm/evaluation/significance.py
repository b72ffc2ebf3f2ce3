"""Which released words stand above the noise: a one-sided test per topic-word entry, with
the family-wise error over all k x V entries controlled (issue 28, item 2).

Why. A word strictly above its row's floor (``fdptm.evaluation.topwords``) is not floored;
it need not stand above the noise. On a release of pure noise (no data) dp-vi leaves about
16% of its entries above the floor, so every topic "has" hundreds of words, and a release
whose M2 noise swamps the signal lists random words as topics. The noise's law and scale
are public (the manifest's M2 parameters), so a word can be listed only when its value is
more than noise alone would plausibly give.

The test. Every mechanism with a model here (``EntryNoise``, from ``Mechanism.entry_noise``)
releases, per entry, lambda_kw = floor + X_kw with a public constant ``floor`` (dp-vi's eta,
the Gibbs mechanisms' beta) and X_kw = signal + noise, floored at 0, rows normalised. From
the released row alone, R_k = floor / min_w phi_kw is at most sum_w lambda_kw (min_w
lambda_kw >= floor), with equality when some entry of the row was floored, so
X^_kw = phi_kw R_k - floor <= X_kw: the recovered count never overstates an entry.
H0 for entry (k, w): no private data contributes to it, so X_kw is noise (floored). A word is
listed when X^_kw > t, with t such that P(noise > t) <= alpha / (k V) for each entry;
by the union bound (Bonferroni, which needs no independence and holds when the set of null
entries depends on the data), the probability that any null entry of the release is listed
is at most alpha. ``alpha`` defaults to ``DEFAULT_ALPHA``.

* Gaussian noise of standard deviation s (dp-vi: the sd of the averaged statistic after T
  iterations, ``dp_vi.released_noise_sd``): the sub-Gaussian tail P(N > t) <=
  exp(-t^2 / (2 s^2)), which also holds for OpenDP's discrete Gaussian of scale s (Canonne,
  Kamath & Steinke 2020, section 2: its moment generating function is at most the
  continuous Gaussian's, so it is s-sub-Gaussian), gives
  t = s sqrt(2 ln(k V / alpha)), a little above the normal quantile (5.08 s against 4.57 s
  at k V = 20,000 and alpha = 0.05). dp-vi's thresholding (entries below threshold x s set
  to 0) only lowers X.
* Laplace noise of scale b, floored at 0 (hdp-lda, cdp-lda, cdp-lda-plus, zhu):
  P(max(L, 0) > t) = exp(-t / b) / 2, so t = b ln(k V / (2 alpha)). For zhu and cdp-lda
  the sampler has read the released draw (its entries are not Laplace given the counts),
  but each draw's marginal law is Laplace, which is all the union bound uses.

``SLACK`` enlarges the scale by a relative 1e-3, which covers what the production samplers
add to the calibrated scales: the integer Gaussian's 2^-30; hdp-lda's rounded Laplace,
2^-41 k (V + 1) relative (``fdptm.privacy.noise.rounded_scale``), below 1e-3 up to
``MAX_ENTRIES`` entries (a larger release is untested); and the noisy-CGS baselines'
discrete Laplace on the grid g = 2^-20, whose tail e^(-t/b) / (1 + e^(-g/b)) exceeds the
continuous one's by a relative g / (2 b) or less, which the slack covers for b >= 40 g
(smaller scales are untested: ``noisy_cgs.entry_noise``).

A topic with no listed word is ``no_signal``. A mechanism without a model (spectral and
topicdp: their released matrix is a nonlinear function of the noise whose scale depends on
the data; ``dp-vi`` with ``--tune``: the released trial was selected) has no test: its
topics are listed by the floor rule and marked untested, never as "significant".

Everything here reads the released matrix and public parameters only: post-processing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from fdptm.evaluation import topwords

DEFAULT_ALPHA = 0.01
"""The family-wise error of a release's word lists: the probability that a release lists
any word whose entry no private data reached is at most 1%."""

SLACK = 1.0 + 1e-3
"""Relative margin on the noise scale (module docstring)."""
MAX_ENTRIES = 2_000_000_000
"""The most k x V entries ``SLACK`` covers (hdp-lda's rounded Laplace, module docstring)."""


@dataclass(frozen=True)
class EntryNoise:
    """The public law of one entry's noise in the released statistic's count scale."""

    law: Literal["gaussian", "laplace"]
    scale: float
    """The Gaussian's standard deviation, or the Laplace scale b."""
    floor: float
    """The public constant every entry of the statistic carries (dp-vi's eta, beta)."""

    def cutoff(self, entries: int, alpha: float) -> float:
        """The count a word must exceed so that, over ``entries`` null entries, the chance
        that any exceeds it is at most ``alpha`` (module docstring)."""
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        if entries > MAX_ENTRIES:
            raise ValueError(f"{entries} entries: SLACK covers at most {MAX_ENTRIES}")
        scale = self.scale * SLACK
        if self.law == "gaussian":
            return scale * math.sqrt(2.0 * math.log(entries / alpha))
        return scale * max(math.log(entries / (2.0 * alpha)), 0.0)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PairEvidence:
    """The word-list test of a biterm release (``fdptm.mechanisms.biterm``, "Word lists"):
    each of ``entries`` noisy pair counts carries Gaussian noise of standard deviation
    ``scale``; a pair is significant above ``cutoff`` (the union bound over the entries,
    as for ``EntryNoise``), and (``topic[i]``, ``word[i]``) has ``value[i]``, the largest
    noisy count of the significant pairs holding that word that the fitted model assigns to
    that topic (kept for values above the cut-off at alpha = ``covers``). A word is listed in
    a topic when its value passes the cut-off at the caller's alpha (at most ``covers``,
    fixed before the values are read: choosing alpha after looking voids the family-wise
    guarantee)."""

    scale: float
    entries: int
    topic: tuple[int, ...]
    word: tuple[int, ...]
    value: tuple[float, ...]
    covers: float = 0.5
    """The largest alpha the evidence supports: pairs below its cut-off were not kept."""

    def cutoff(self, alpha: float) -> float:
        """The value a pair must exceed so that the chance any null pair does is <= alpha."""
        return EntryNoise("gaussian", self.scale, 0.0).cutoff(self.entries, alpha)

    def mask(self, shape: tuple[int, int], alpha: float) -> np.ndarray:
        """k x V: the (topic, word) entries listed at family-wise error ``alpha``."""
        if not alpha <= self.covers:
            raise ValueError(
                f"this release's evidence covers alpha up to {self.covers}, not {alpha}: its "
                "pairs below that cut-off were not released"
            )
        out = np.zeros(shape, dtype=bool)
        value = np.asarray(self.value, dtype=np.float64)
        passed = value > self.cutoff(alpha)
        topic = np.asarray(self.topic, dtype=np.int64)
        word = np.asarray(self.word, dtype=np.int64)
        out[topic[passed], word[passed]] = True
        return out

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, block: dict) -> PairEvidence:
        return cls(
            float(block["scale"]),
            int(block["entries"]),
            tuple(int(z) for z in block["topic"]),
            tuple(int(w) for w in block["word"]),
            tuple(float(v) for v in block["value"]),
            float(block.get("covers", 0.5)),
        )


WordTest = EntryNoise | PairEvidence
"""What a release's word lists are tested by: per-entry noise, or a biterm's pair evidence."""


def recovered_counts(phi: np.ndarray, floor: float) -> np.ndarray:
    """X^_kw = floor (phi_kw / min_w phi_kw - 1): each entry's count above the floor, never
    more than the statistic's (module docstring)."""
    phi = np.asarray(phi, dtype=np.float64)
    return floor * (phi / phi.min(axis=1, keepdims=True) - 1.0)


def significant(phi: np.ndarray, noise: WordTest, alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """Mask of the listed entries of ``phi``: above ``noise.cutoff`` over all its k x V
    entries, or, for a biterm release, those its pair evidence supports."""
    if isinstance(noise, PairEvidence):
        return noise.mask(phi.shape, alpha)
    return recovered_counts(phi, noise.floor) > noise.cutoff(phi.size, alpha)


def presentation(noise: WordTest | None, entries: int, alpha: float = DEFAULT_ALPHA) -> dict:
    """The manifest's ``presentation`` block: the test its word lists passed, or why none."""
    if isinstance(noise, PairEvidence):
        return {
            "test": "one-sided, per word pair of the noisy biterm statistic, family-wise error "
            "over all its pairs at most alpha (Bonferroni); a word is listed in the topic its "
            "significant pairs are assigned to; fdptm/mechanisms/biterm.py",
            "alpha": alpha,
            "entries": noise.entries,
            "cutoff": noise.cutoff(alpha),
            "evidence": noise.to_dict(),
        }
    if noise is None or entries > MAX_ENTRIES:
        return {
            "test": None,
            "why": "no public model of this release's per-entry noise (its mechanism has "
            "none, a public prior raises its entries, or it is larger than the test covers): "
            "topics list the words above their row's floor and are untested",
        }
    return {
        "test": "one-sided, per entry, family-wise error over all k x V entries at most alpha "
        "(Bonferroni); fdptm/evaluation/significance.py",
        "alpha": alpha,
        "entries": entries,
        "noise": noise.to_dict(),
        "cutoff": noise.cutoff(entries, alpha),
    }


def noise_of(block: dict) -> WordTest | None:
    """The test a manifest's ``presentation`` block states (None: untested)."""
    if block.get("test") is None:
        return None
    if "evidence" in block:
        return PairEvidence.from_dict(block["evidence"])
    return EntryNoise(**block["noise"])


def listed(
    phi: np.ndarray,
    words: list[str],
    noise: WordTest | None,
    alpha: float = DEFAULT_ALPHA,
    n: int = 10,
) -> tuple[list[list[tuple[str, float]]], list[bool]]:
    """Per topic, up to ``n`` (word, probability) pairs to list, most probable first (ties
    in column order), and whether the topic is ``no_signal``: the words ``significant``
    under ``noise``, and no_signal when there is none; with no model (None), the floor rule
    of ``fdptm.evaluation.topwords`` (untested)."""
    if noise is None or (isinstance(noise, EntryNoise) and phi.size > MAX_ENTRIES):
        silent = topwords.no_signal(phi)
        lists = topwords.top_words(phi, words, n)
        return [[] if flag else topic for topic, flag in zip(lists, silent, strict=True)], silent
    lists = topwords.top_words(phi, words, n, significant(phi, noise, alpha))
    return lists, [not words_of_topic for words_of_topic in lists]
