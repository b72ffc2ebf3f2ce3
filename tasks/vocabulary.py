"""M1 stage: DP vocabulary selection over the bounded tokens (FDPTM Algorithm 1, line 3).

Every M1 mechanism meets one contract, ``VocabularyMechanism`` (a ``typing.Protocol``):
its ledger name, ``params`` (calibrated for the stage's budget from the run's request,
checked against the mechanism module's declared constraints) and ``select`` (the DP
vocabulary, and for the Bayesian prior its DP distribution). ``M1_MECHANISMS`` maps the
request's ``--m1`` choice to it; ``none`` is no M1 (no private token read, no charge).

Two ways, by the run's vocabulary source:

* No public vocabulary: each author's distinct words (the tokens encoded batch by batch as
  integer codes, ``encode_tokens``, in this process; then per range of authors, numba in
  ``fdptm.mechanisms.set_union.unit_ranges``, locally or on the Dask cluster: memory follows
  the tokens as 4-byte codes and the kept (author, word) pairs) go through DP set union
  (``fdptm.mechanisms.set_union``).
* A public vocabulary (``tasks.public_vocabulary``): each unit's counts of the public words
  go through the Bayesian public-prior mechanism (``fdptm.mechanisms.bayesian_prior``), which
  releases a DP word distribution over the public vocabulary; the release's vocabulary is its
  ``size`` most probable words (post-processing), and the distribution, restricted to them,
  is stored with the run as a word prior for M2 (not used by M2 yet).

Either way only DP outputs leave: the selected words, sorted alphabetically, and for the
Bayesian path the DP distribution; no count or order that depends on the data otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fdptm.mechanisms import bayesian_prior
from fdptm.mechanisms.bayesian_prior import BayesianPriorParams, UnitCounts
from fdptm.mechanisms.set_union import (
    SetUnionParams,
    select_units,
    set_union_params,
    unit_ranges,
)
from fdptm.privacy.noise import NoiseSource
from fdptm.tasks.public_vocabulary import PublicVocabulary

if TYPE_CHECKING:
    from fdptm.tasks.spec import RunSpec


@dataclass(frozen=True)
class EncodedTokens:
    """The bounded tokens as integer codes (internal): document d has author code
    ``doc_author[d]`` and the tokens ``words[word_idx[doc_ptr[d]:doc_ptr[d + 1]]]``, with
    ``words`` in order of first appearance. About 4 bytes per token and 12 per document,
    against the strings' 10 or more per token."""

    doc_ptr: np.ndarray
    word_idx: np.ndarray
    words: pa.Array
    doc_author: np.ndarray


def encode_tokens(batches: Iterable[pa.RecordBatch], authors: pa.ChunkedArray) -> EncodedTokens:
    """Encode the ``tokens`` column of ``batches`` (read one at a time: the string tokens
    of the whole corpus are never held) against a dictionary grown batch by batch, and the
    ``authors`` (one per document, in the same order) as dense codes."""
    words = pa.array([], pa.string())
    lengths, codes = [], []
    for batch in batches:
        lists = batch.column("tokens")
        flat = pc.list_flatten(lists)
        lengths.append(pc.fill_null(pc.list_value_length(lists), 0).to_numpy())
        index = pc.index_in(flat, value_set=words)
        unseen = pc.is_null(index)
        if pc.any(unseen).as_py():
            words = pa.concat_arrays([words, pc.unique(flat.filter(unseen))])
            index = pc.index_in(flat, value_set=words)
        codes.append(index.to_numpy(zero_copy_only=False).astype(np.int32))
    doc_ptr = np.zeros(sum(len(n) for n in lengths) + 1, dtype=np.int64)
    if lengths:
        np.cumsum(np.concatenate(lengths), out=doc_ptr[1:])
    word_idx = np.concatenate(codes) if codes else np.zeros(0, np.int32)
    del codes
    doc_author = pc.dictionary_encode(authors).combine_chunks().indices.to_numpy()
    return EncodedTokens(doc_ptr, word_idx, words, doc_author)


def encode_table(tokens: pa.Table) -> EncodedTokens:
    """``encode_tokens`` of a (doc_id, author_id, tokens) table held in memory."""
    return encode_tokens(tokens.select(["tokens"]).to_batches(), tokens.column("author_id"))


def select_vocabulary(
    tokens: EncodedTokens | pa.Table,
    params: SetUnionParams,
    noise: NoiseSource,
    exclude: frozenset[str] = frozenset(),
) -> list[str]:
    """The DP vocabulary of the encoded tokens (or of a (doc_id, author_id, tokens) table),
    among the words not in ``exclude`` (a public list: dropping its words from every unit
    is a per-unit function)."""
    encoded = tokens if isinstance(tokens, EncodedTokens) else encode_table(tokens)
    doc_ptr, word_idx, dictionary = encoded.doc_ptr, encoded.word_idx, encoded.words
    if exclude:  # drop the public words: per document, the kept tokens' count
        keep = pc.invert(pc.is_in(dictionary, value_set=pa.array(sorted(exclude), pa.string())))
        kept = keep.to_numpy(zero_copy_only=False)[word_idx]
        doc_ptr = np.concatenate([[0], np.cumsum(kept, dtype=np.int64)])[doc_ptr]
        word_idx = word_idx[kept]
    if not len(word_idx):
        return []
    ranges = unit_ranges(encoded.doc_author, doc_ptr, word_idx, len(dictionary))
    selected = select_units(ranges, len(dictionary), params, noise)
    return sorted(dictionary.take(pa.array(selected, pa.int64())).to_pylist())


def unit_counts(tokens: EncodedTokens | pa.Table, words: list[str]) -> UnitCounts:
    """Each unit's (author's) count of every word of ``words``; other tokens are ignored."""
    encoded = tokens if isinstance(tokens, EncodedTokens) else encode_table(tokens)
    public = pc.fill_null(pc.index_in(encoded.words, value_set=pa.array(words, pa.string())), -1)
    index = public.to_numpy(zero_copy_only=False).astype(np.int64)[encoded.word_idx]
    unit = np.repeat(encoded.doc_author, np.diff(encoded.doc_ptr))
    known = index >= 0
    word = index[known]
    pairs, count = np.unique(np.stack([unit[known], word]), axis=1, return_counts=True)
    return UnitCounts(pairs[0], pairs[1], count.astype(np.int64), len(words))


@dataclass(frozen=True)
class PriorSelection:
    """The Bayesian M1's DP outputs: the kept words (sorted) and their prior probabilities."""

    words: list[str]
    prior: np.ndarray
    rho: float


def select_with_public_prior(
    tokens: EncodedTokens,
    public: PublicVocabulary,
    params: BayesianPriorParams,
    size: int,
    noise: NoiseSource,
) -> PriorSelection:
    """The ``size`` most probable public words under the DP distribution theta.

    rho comes from the released vector alone (``empirical_bayes_rho``: post-processing).
    The prior is theta on the kept words, renormalised.
    """
    counts = unit_counts(tokens, public.words).bounded(
        params.clip, params.max_words, noise.generator
    )
    noisy = bayesian_prior.release(counts, params, noise)
    logits = bayesian_prior.prior_logits(public.counts)
    rho = bayesian_prior.empirical_bayes_rho(noisy, logits, params.sigma)
    theta = bayesian_prior.posterior(noisy, logits, rho)
    keep = np.sort(np.argsort(-theta, kind="stable")[:size])
    prior = theta[keep] / theta[keep].sum()
    return PriorSelection([public.words[i] for i in keep], prior, rho)


@dataclass(frozen=True)
class Selection:
    """What M1 releases: the vocabulary (sorted) and, for the Bayesian prior, its DP
    distribution over it."""

    words: list[str]
    prior: PriorSelection | None = None


class M1Params(Protocol):
    """Calibrated parameters of one M1 run: public functions of the request."""

    epsilon: float
    delta: float

    def to_dict(self) -> dict: ...


class VocabularyMechanism(Protocol):
    """An M1 mechanism: DP vocabulary selection at add/remove of one unit (author, or
    document when documents are the units)."""

    name: str

    def ledger_name(self, spec: RunSpec) -> str:
        """The mechanism as the ledger and the manifest name it."""
        ...

    def params(self, spec: RunSpec, epsilon: float, delta: float) -> M1Params:
        """Calibrated for (epsilon, delta); BadInputError before any data is read."""
        ...

    def select(
        self,
        tokens: EncodedTokens,
        public: PublicVocabulary | None,
        params: M1Params,
        size: int,
        noise: NoiseSource,
    ) -> Selection:
        """The DP vocabulary of the bounded ``tokens``."""
        ...


@dataclass(frozen=True)
class SetUnion:
    """DP set union of the private words (``fdptm.mechanisms.set_union``)."""

    name: str = "set-union"

    def ledger_name(self, spec: RunSpec) -> str:
        return f"dp-set-union/{spec.set_union_policy}"

    def params(self, spec: RunSpec, epsilon: float, delta: float) -> SetUnionParams:
        return set_union_params(
            spec.set_union_policy,
            epsilon,
            delta,
            alpha=spec.set_union_alpha,
            max_items=spec.max_items_per_author,
        )

    def select(
        self,
        tokens: EncodedTokens,
        public: PublicVocabulary | None,
        params: SetUnionParams,
        size: int,
        noise: NoiseSource,
    ) -> Selection:
        return Selection(select_vocabulary(tokens, params, noise))


@dataclass(frozen=True)
class Extend(SetUnion):
    """A public list's ``size`` most frequent words plus the private words beyond them that
    DP set union selects (dropping the listed words from every unit is a per-unit map)."""

    name: str = "extend"

    def select(
        self,
        tokens: EncodedTokens,
        public: PublicVocabulary | None,
        params: SetUnionParams,
        size: int,
        noise: NoiseSource,
    ) -> Selection:
        listed = public.most_frequent(size)
        beyond = select_vocabulary(tokens, params, noise, exclude=frozenset(listed))
        return Selection(sorted(set(listed) | set(beyond)))


@dataclass(frozen=True)
class BayesianPrior:
    """The Bayesian public prior over a public vocabulary (``fdptm.mechanisms.bayesian_prior``):
    a unit's count of a word clamped to ``prior_clip`` (C; the paper's choice below a million
    users, section 4.3), at most ``max_items_per_author`` words per unit (W), words weighted
    by eq. 5 with S = ``prior_scale``."""

    name: str = "bayesian-prior"

    def ledger_name(self, spec: RunSpec) -> str:
        return "bayesian-public-prior"

    def params(self, spec: RunSpec, epsilon: float, delta: float) -> BayesianPriorParams:
        return bayesian_prior.calibrate(
            epsilon,
            delta,
            scale=spec.prior_scale,
            clip=spec.prior_clip,
            max_words=spec.max_items_per_author,
        )

    def select(
        self,
        tokens: EncodedTokens,
        public: PublicVocabulary | None,
        params: BayesianPriorParams,
        size: int,
        noise: NoiseSource,
    ) -> Selection:
        chosen = select_with_public_prior(tokens, public, params, size, noise)
        return Selection(chosen.words, chosen)


M1_MECHANISMS: dict[str, VocabularyMechanism] = {
    m.name: m for m in (SetUnion(), Extend(), BayesianPrior())
}
"""The M1 mechanisms by the request's ``m1`` (``none``, no M1, is not one)."""


def choose_words(
    selection: str,
    tokens: EncodedTokens,
    public: PublicVocabulary | None,
    params: M1Params | None,
    size: int,
    noise: NoiseSource,
) -> Selection:
    """The vocabulary of ``selection`` (``RunSpec.vocabulary_selection``): ``none`` reads no
    private token (the public list's ``size`` most frequent words), any other is the M1
    mechanism of that name."""
    if selection == "none":
        return Selection(public.most_frequent(size))
    return M1_MECHANISMS[selection].select(tokens, public, params, size, noise)


def vocabulary_table(words: list[str]) -> pa.Table:
    """The released vocabulary: index (column of topic_word) and word."""
    return pa.table(
        {"index": pa.array(np.arange(len(words)), pa.int32()), "word": pa.array(words, pa.string())}
    )
