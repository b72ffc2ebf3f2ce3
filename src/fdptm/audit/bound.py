"""From attack scores to an empirical epsilon lower bound, and the claim it is checked against.

The threshold of an attack is chosen on one half of the documents (the one that gives the
largest point estimate of the bound there) and the bound is computed with Clopper-Pearson
limits on the other half only, so choosing the threshold does not inflate it (issue 4,
"correct for choosing the threshold on the same data").

The attack tests one document: member or not. The release's claim is converted to that unit
(``claim_per_document``): a document-level claim, or an author-level one when every
document is its own author, is the claim itself; an author-level claim with several
documents per author covers removing one document by group privacy over two steps (remove
the author, add them back without it); a word-level claim covers a document only by group
privacy over its tokens (replace every token: ``max_tokens_per_doc`` steps), as the issue
prescribes, although word-level adjacency never covers a change of length. Replace-one
claims (spectral LDA) say nothing about adding or removing a document: no bound to compare.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fdptm.audit.epsilon import EpsilonBound, epsilon_lower_bound, epsilon_lower_bounds
from fdptm.privacy.adjacency import Adjacency, group_privacy


@dataclass(frozen=True)
class SplitBound:
    """The bound on the evaluation half at the threshold chosen on the selection half."""

    threshold: float
    bound: EpsilonBound

    def to_dict(self) -> dict:
        return {"threshold": self.threshold, **self.bound.to_dict()}


def _counts(scores: np.ndarray, members: np.ndarray, threshold: float) -> tuple[int, int]:
    flagged = scores >= threshold
    return int((flagged & members).sum()), int((flagged & ~members).sum())


def split_bound(
    scores: np.ndarray,
    members: np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    seed: int = 0,
) -> SplitBound:
    """Choose the threshold on a random half, bound epsilon on the other half.

    The threshold is the one with the largest bound on the selection half (the smallest
    such threshold when several tie); documents scoring at least it are flagged.
    """
    if np.isnan(scores).any():
        raise ValueError("scores must not be NaN; score a document the attack cannot judge -inf")
    rng = np.random.default_rng(seed)
    selection = np.zeros(len(scores), dtype=bool)
    selection[rng.permutation(len(scores))[: len(scores) // 2]] = True
    evaluation = ~selection
    sel_s, sel_m = scores[selection], members[selection]
    ev_s, ev_m = scores[evaluation], members[evaluation]
    if not (sel_m.any() and (~sel_m).any() and ev_m.any() and (~ev_m).any()):
        raise ValueError("both halves need members and non-members")
    order = np.argsort(-sel_s, kind="stable")
    ordered, flags = sel_s[order], sel_m[order]
    last = np.r_[np.flatnonzero(ordered[1:] != ordered[:-1]), len(ordered) - 1]
    values = epsilon_lower_bounds(
        np.cumsum(flags)[last],
        int(sel_m.sum()),
        np.cumsum(~flags)[last],
        int((~sel_m).sum()),
        delta=delta,
        confidence=confidence,
    )
    smallest_best = len(values) - 1 - int(np.argmax(values[::-1]))  # ties: flag the most
    best = float(ordered[last][smallest_best])
    tp, fp = _counts(ev_s, ev_m, best)
    bound = epsilon_lower_bound(
        tp, int(ev_m.sum()), fp, int((~ev_m).sum()), delta=delta, confidence=confidence
    )
    return SplitBound(best, bound)


@dataclass(frozen=True)
class DocumentClaim:
    """The release's claim restated for adding or removing one document, and how."""

    epsilon: float | None
    delta: float | None
    reason: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def claim_per_document(
    epsilon: float,
    delta: float,
    unit: Adjacency,
    *,
    authors_are_documents: bool,
    max_tokens_per_doc: int,
) -> DocumentClaim:
    """The (epsilon, delta) the release claims against a one-document membership test."""
    if unit == Adjacency.DOCUMENT or (unit == Adjacency.AUTHOR and authors_are_documents):
        return DocumentClaim(epsilon, delta, "the claim itself: a document is the unit")
    if unit == Adjacency.AUTHOR:
        eps, dlt = group_privacy(epsilon, delta, 2)
        return DocumentClaim(eps, dlt, "group privacy over 2 author steps")
    if unit == Adjacency.WORD:
        eps, dlt = group_privacy(epsilon, delta, max_tokens_per_doc)
        return DocumentClaim(
            eps,
            dlt,
            f"group privacy over the document's at most {max_tokens_per_doc} tokens "
            "(word-level adjacency does not cover a change of length at all)",
        )
    return DocumentClaim(
        None, None, f"a {unit.value} claim says nothing about adding or removing a document"
    )
