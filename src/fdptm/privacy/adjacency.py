"""Adjacency notions and the conversions between them.

A guarantee is only meaningful together with the adjacency it holds for (FDPTM paper,
section 4.1). The notions used here, from strongest to weakest unit:

* ``author``: add or remove one author with all of their documents.
* ``author-replace``: replace the documents of one author by as many other documents (the
  number of documents unchanged). DP spectral LDA on an author-level dataset guarantees
  this, by group privacy over the author's at most m documents.
* ``document``: add or remove one document (the author notion when every document has
  its own author, as for PHEME, FDPTM paper section 4.4).
* ``document-replace``: replace one document by another document of the same author, the
  number of documents unchanged (the adjacency of DP spectral LDA, dp-spectral-lda.txt
  section 2, where every document is its own author). Keeping the author is what makes
  the conversions from author notions valid: a document moved to another author changes
  two authors.
* ``word``: replace one preprocessed token (a PRE output) of one document by another
  token (HDP-LDA paper, section IV-B2). Raw-text edits that add or remove PRE tokens (a
  stop word becoming a word, say) are not word-level neighbours.
* ``local``: local DP (LP-LDA, section V): one device's document replaced by any other,
  every other device's report unchanged; the guarantee holds against the server itself.
  It is kept apart from the central notions: a local dataset has only local entries, and
  no conversion to or from ``local`` is offered.

Conversions go from a stronger notion to a weaker one only, and are of two kinds:

* free, when the weaker relation is a special case of the stronger one: a word
  replacement is a document replacement, a document replacement is a replacement of its
  author's documents (the author keeps the same number of documents);
* group privacy with a group of two (Dwork & Roth, Theorem 2.2 generalised to
  (epsilon, delta)), when the weaker change is two steps of the stronger relation:
  ``(2 eps, (1 + e^eps) delta)``. Replacing anything of one author is removing the author
  and adding the changed author back; replacing or editing one document is removing it
  and adding the changed one.

When every document is its own author (no author ids), author and document notions
coincide (and so do their replace variants). Add/remove notions never follow from replace
notions (replace-one keeps the number of documents fixed, so it bounds nothing about a
dataset of another size), and nothing follows from a weaker notion: ``convert`` refuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class Adjacency(StrEnum):
    """The unit a DP guarantee protects; order of members is strongest first."""

    AUTHOR = "author"
    AUTHOR_REPLACE = "author-replace"
    DOCUMENT = "document"
    DOCUMENT_REPLACE = "document-replace"
    WORD = "word"
    LOCAL = "local"

    @property
    def rank(self) -> int:
        """0 for the strongest unit (author), larger for weaker units."""
        return list(Adjacency).index(self)

    @property
    def relation(self) -> str:
        """The neighbouring relation in words, for manifests and reports."""
        return {
            Adjacency.AUTHOR: "add/remove one author with all their documents",
            Adjacency.AUTHOR_REPLACE: "replace one author's documents by as many others",
            Adjacency.DOCUMENT: "add/remove one document",
            Adjacency.DOCUMENT_REPLACE: "replace one document by another of the same author",
            Adjacency.WORD: "replace one preprocessed token of one document by another",
            Adjacency.LOCAL: "replace one device's document by any other (local DP: each "
            "report is randomised on the device, before the server sees it)",
        }[self]


_A, _AR, _D, _DR, _W = list(Adjacency)[:5]
_FREE = {(_AR, _DR), (_AR, _W), (_DR, _W)}
_GROUP_OF_TWO = {(_A, _AR), (_A, _D), (_A, _DR), (_A, _W), (_D, _DR), (_D, _W)}
_SAME_WITHOUT_AUTHORS = {frozenset({_A, _D}), frozenset({_AR, _DR})}


def _step(source: Adjacency, target: Adjacency, authors_are_documents: bool) -> int | None:
    """1 when ``target`` follows from ``source`` for free, 2 by a group of two, else None."""
    if source == target or (
        authors_are_documents and frozenset({source, target}) in _SAME_WITHOUT_AUTHORS
    ):
        return 1
    if (source, target) in _FREE:
        return 1
    if (source, target) in _GROUP_OF_TWO:
        return 2
    if authors_are_documents and source == _D and target == _AR:
        return 2
    return None


def converts_to(source: Adjacency, target: Adjacency, *, authors_are_documents: bool) -> bool:
    """Whether a ``source``-level guarantee implies a ``target``-level one."""
    return _step(source, target, authors_are_documents) is not None


def weakest(notions: list[Adjacency], *, authors_are_documents: bool = False) -> Adjacency:
    """The strongest notion every one of ``notions`` converts to: a composed release's unit.

    For add/remove notions and word this is the weakest of them; mixing an add/remove notion
    with a replace notion gives the replace notion of the smaller unit. When authors are
    documents the document names are used.
    """
    if not notions:
        raise ValueError("weakest() needs at least one adjacency")
    for candidate in sorted(Adjacency, key=lambda a: a.rank):
        if all(
            converts_to(n, candidate, authors_are_documents=authors_are_documents) for n in notions
        ):
            if authors_are_documents:
                return {_A: _D, _AR: _DR}.get(candidate, candidate)
            return candidate
    raise AssertionError("every notion converts to word level")


@dataclass(frozen=True)
class Conversion:
    """One documented conversion of an (epsilon, delta) guarantee between adjacencies."""

    source: Adjacency
    target: Adjacency
    epsilon_in: float
    delta_in: float
    epsilon_out: float
    delta_out: float
    group_size: int
    reason: str


def convert(
    epsilon: float,
    delta: float,
    source: Adjacency,
    target: Adjacency,
    *,
    authors_are_documents: bool = False,
) -> Conversion:
    """Convert an (epsilon, delta) guarantee for ``source`` adjacency into one for ``target``.

    ``authors_are_documents`` says every document has its own author (no author ids were
    given), so author- and document-level adjacency are the same relation.
    """
    step = _step(source, target, authors_are_documents)
    if step == 1:
        reason = (
            "same relation"
            if source == target or authors_are_documents
            else f"'{target.relation}' is a special case of '{source.relation}'"
        )
        return Conversion(source, target, epsilon, delta, epsilon, delta, 1, reason)
    if step is None:
        raise ValueError(
            f"cannot convert a {source.value}-level guarantee into a {target.value}-level one: "
            f"'{source.relation}' does not bound '{target.relation}'"
        )
    eps_out, delta_out = group_of_two(epsilon, delta)
    return Conversion(
        source,
        target,
        epsilon,
        delta,
        eps_out,
        delta_out,
        2,
        f"group privacy, group of 2: '{target.relation}' is two steps of '{source.relation}'",
    )


def _log1p_exp(x: float) -> float:
    """ln(1 + e^x) without overflow."""
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def group_of_two(epsilon: float, delta: float) -> tuple[float, float]:
    """(eps, delta) for one step -> (2 eps, (1 + e^eps) delta) for two steps.

    Computed in log space; a delta beyond float range is infinite (a vacuous guarantee).
    """
    if delta == 0:
        return 2.0 * epsilon, 0.0
    log_delta = math.log(delta) + _log1p_exp(epsilon)
    return 2.0 * epsilon, math.exp(log_delta) if log_delta < 709.0 else math.inf


def invert_group_of_two(epsilon: float, delta: float) -> tuple[float, float]:
    """The one-step (eps, delta) whose group-of-two conversion is exactly (epsilon, delta)."""
    eps_step = epsilon / 2.0
    if delta == 0:
        return eps_step, 0.0
    return eps_step, math.exp(math.log(delta) - _log1p_exp(eps_step))


def group_privacy(epsilon: float, delta: float, size: int) -> tuple[float, float]:
    """(eps, delta) for one step -> (k eps, delta (e^{k eps} - 1) / (e^eps - 1)) for k steps.

    Group privacy for approximate DP (Dwork & Roth, Theorem 2.2 with the delta terms summed:
    delta (1 + e^eps + ... + e^{(k-1) eps})); k = 2 gives ``group_of_two``.
    """
    if size < 1:
        raise ValueError(f"a group has at least one member, got {size}")
    if delta == 0:
        return size * epsilon, 0.0
    log_sum = math.log(size) if epsilon == 0 else _log_geometric(epsilon, size)
    log_delta = math.log(delta) + log_sum
    return size * epsilon, math.exp(log_delta) if log_delta < 709.0 else math.inf


def invert_group_privacy(epsilon: float, delta: float, size: int) -> tuple[float, float]:
    """The one-step (eps, delta) whose ``group_privacy`` over ``size`` is (epsilon, delta)."""
    eps_step = epsilon / size
    if delta == 0:
        return eps_step, 0.0
    return eps_step, math.exp(math.log(delta) - _log_geometric(eps_step, size))


def _log_geometric(epsilon: float, size: int) -> float:
    """ln(1 + e^eps + ... + e^{(k-1) eps}) = ln((e^{k eps} - 1) / (e^eps - 1)), stably."""
    return (
        size * epsilon
        + math.log(-math.expm1(-size * epsilon))
        - (epsilon + math.log(-math.expm1(-epsilon)))
    )
