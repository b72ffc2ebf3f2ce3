"""Top words of a released topic-word matrix, listed only while they carry signal.

DP mechanisms floor their noisy counts (``max(count + noise, 0) + beta``, or a clip at 0),
so in a released row most words tie at the row's minimum probability, the *floor*. Ranking
such a row and printing its 10 "most probable" words fills the list with words taken from
the tie at the floor in an arbitrary (alphabetical or column) order: a topic with one real
word, or an exactly uniform row, then looks like a real topic. Here a word is listed only
while it is strictly above its row's floor, always with its probability, and a row with no
such word, or one within ``NEAR_UNIFORM_TV`` of the uniform distribution, is flagged "no
signal".

Everything here is post-processing of the released (DP) matrix and its DP vocabulary: it
never reads private data, so its output may be published with the release.
"""

from __future__ import annotations

import numpy as np

# A word is above the floor when p > floor * (1 + FLOOR_RELATIVE_TOLERANCE)
# + FLOOR_ABSOLUTE_TOLERANCE. Words that were floored to the same count get probabilities
# equal up to a few ulps of float rounding (normalisation, dropped columns), far inside
# 1e-9 relative; the absolute term covers a floor of exactly 0 (a clip at 0) next to
# values like 1e-17 left by cancellation. 1e-12 is far below any probability that means
# something (1 / V is 1e-6 for a million words) and below the 1e-9 the release's
# validation already allows on a row's sum.
FLOOR_RELATIVE_TOLERANCE = 1e-9
FLOOR_ABSOLUTE_TOLERANCE = 1e-12

# A row whose total-variation distance to the uniform distribution is below this is "no
# signal". The total-variation distance is the largest amount by which the topic gives any
# set of words more probability than uniform would (max over sets A of p(A) - |A| / V): below
# 0.05, no set of words, its top words included, gets even 5 percentage points more mass
# than the same number of words picked at random would. A topic that is meant to describe
# a theme puts most of its mass on a small part of the vocabulary (distance near 1), and
# pure DP noise floored at 0 leaves about half the words at the floor (distance about 0.55
# when the noise is large next to the smoothing beta), so only rows that are flat up to
# noise small next to beta fall below it (about 0.02 for noise of scale beta / 10).
NEAR_UNIFORM_TV = 0.05


def row_floor(row: np.ndarray) -> float:
    """The row's minimum probability: the level at which floored noisy counts tie."""
    return float(np.min(row))


def above_floor(row: np.ndarray) -> np.ndarray:
    """Mask of the words strictly above the row's floor, beyond float rounding."""
    floor = row_floor(row)
    return row > floor * (1 + FLOOR_RELATIVE_TOLERANCE) + FLOOR_ABSOLUTE_TOLERANCE


def top_words(
    phi: np.ndarray, words: list[str], n: int = 10, keep: np.ndarray | None = None
) -> list[list[tuple[str, float]]]:
    """Per topic, up to ``n`` (word, probability) pairs above the row's floor (or among the
    entries of the mask ``keep``: ``fdptm.evaluation.significance``), most probable first;
    ties among them in column order. Words at the floor are never listed, so a row with
    fewer than ``n`` words above it gets a shorter list (an empty one when uniform)."""
    if phi.shape[1] != len(words):
        raise ValueError(f"phi has {phi.shape[1]} columns but there are {len(words)} words")
    listed = []
    for i, row in enumerate(phi):
        columns = np.flatnonzero(above_floor(row) if keep is None else keep[i])
        order = columns[np.lexsort((columns, -row[columns]))][:n]
        listed.append([(words[j], float(row[j])) for j in order])
    return listed


def no_signal(phi: np.ndarray) -> list[bool]:
    """Per topic: True when no word is above the floor, or the row's total-variation
    distance to uniform is below ``NEAR_UNIFORM_TV`` (rows are probability vectors)."""
    uniform = 1.0 / phi.shape[1]
    return [
        not above_floor(row).any() or 0.5 * float(np.abs(row - uniform).sum()) < NEAR_UNIFORM_TV
        for row in phi
    ]


def words_above_floor(phi: np.ndarray, n: int = 10) -> float:
    """Mean over topics of how many of the top ``n`` words are above the floor (0 to n): how
    much of a "top n" list a release can fill with words that are not noise ties."""
    return float(np.mean([min(n, int(above_floor(row).sum())) for row in phi]))
