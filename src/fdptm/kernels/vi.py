"""Variational inference for LDA: the per-document E-step and per-unit clipped statistics.

Corpus layout: the documents are compressed to (doc, word, count) triples, document ``d``
owning ``words[doc_ptr[d]:doc_ptr[d + 1]]`` with ``counts`` alongside (distinct words, so a
word's topic responsibilities are computed once per document). Privacy units (authors, or
documents at document level) own the documents ``unit_docs[unit_ptr[u]:unit_ptr[u + 1]]``.
The topic factor ``exp_elog_beta`` is (words x topics) so that one word's k values are
contiguous. The kernels are deterministic: they hold no random state.

Identical documents share one E-step. A document's E-step is a function of its own
(word, count) pairs, the public topics and the public settings alone (and, when warm, of
its own previous gamma, which is the same for identical documents, as they start the same
and follow the same arithmetic), so ``document_slots`` gives the documents of a range of
units one slot per distinct content, and ``clipped_statistics`` runs each slot's E-step
once per call and reuses its result, bit for bit what every copy's own E-step would give.
Short texts repeat: on an audit's half of PHEME (2,483 tweets over its 40-word DP
vocabulary) there are 603 distinct documents. What it changes is the kernel's running
time, which now follows the number of distinct documents rather than of documents; that
time is not released (module ``fdptm.mechanisms.dp_vi``, "Timing").
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_SHRINK = 1.0 - 2.0**-20
"""Factor a unit's grid scale is cut by when its rounded statistic fails the exact norm check."""


@njit(cache=True, nogil=True)
def digamma(x):
    """psi(x) for x > 0: recurrence up to x >= 6, then the asymptotic (Bernoulli) series to
    x^-14; the first omitted term is below 2e-13 at x = 6.

    The recurrence psi(x) = psi(x + 1) - 1/x is summed as one fraction num/den (one
    division instead of up to six: this function dominates the E-step of short documents).
    """
    num = 0.0
    den = 1.0
    while x < 6.0:
        num = num * x + den
        den *= x
        x += 1.0
    shift = -num / den
    f = 1.0 / (x * x)
    tail = f * (
        -1.0 / 12
        + f
        * (
            1.0 / 120
            + f * (-1.0 / 252 + f * (1.0 / 240 + f * (-1.0 / 132 + f * (691.0 / 32760 - f / 12))))
        )
    )
    return shift + math.log(x) - 0.5 / x + tail


@njit(cache=True, nogil=True)
def exp_elog_beta(lam):
    """exp(psi(lambda_wk) - psi(sum_w lambda_wk)) for ``lam`` stored words x topics (every
    entry > 0): the E-step's topic factor, once per iteration. Compiled without the GIL
    (scipy's digamma held it for a tenth of an audit's model threads' time)."""
    n_words, n_topics = lam.shape
    out = np.empty_like(lam)
    for k in range(n_topics):
        total = 0.0
        for w in range(n_words):
            total += lam[w, k]
        base = digamma(total)
        for w in range(n_words):
            out[w, k] = math.exp(digamma(lam[w, k]) - base)
    return out


_FAST = {"contract"}
"""LLVM's one fast-math flag for the E-step: ``contract``, so that a multiply and the add
that follows it run as one fused multiply-add (one rounding instead of two). Not
``reassoc``: it lets LLVM reorder a sum to fit the vector width it picks for the CPU, so
the bits would follow the CPU model (an independent review measured that on four numba
targets, 2026-11-30); every sum here keeps its order. Nor approximate reciprocals, nor
the flags that assume no NaN or infinity. So machines that run the same numba, llvmlite
and libm compute the same bits when their CPUs all have fused multiply-add as numba sees
them (measured alike with numba's targets host, haswell, skylake-avx512 and znver3), or
all lack it; a CPU without it (older or small x86 models, a virtual machine that hides
it, numba compiling for a generic target) rounds each multiply and add apart, and a seeded
release it takes part in has other bits. Privacy does not rest on them: what a unit adds
is checked exactly after the E-step (``clipped_statistics``)."""
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
_VECTOR_TOPICS = 8
"""From this many topics on, ``_theta_weights`` computes its exps as SIMD vectors."""
_EXP_FLOOR = -708.0
"""Below this, ``_theta_weights``'s own exp (from ``_VECTOR_TOPICS`` topics on) is 0:
exp(-708) is about 3e-308, where doubles turn subnormal (slow on x86, and meaningless
beside the E-step's 1e-100 guard), and 2^m could not be built from its exponent bits."""


@njit(cache=True, inline="always", fastmath=_FAST)
def _psi_exponent(x):
    """psi(x) - log(x + 6), the exponent of exp(psi(x)) = (x + 6) exp(...) (``_theta_weights``)."""
    x1 = x + 1.0
    x2 = x + 2.0
    x3 = x + 3.0
    x4 = x + 4.0
    x5 = x + 5.0
    p01 = x * x1
    p23 = x2 * x3
    p45 = x4 * x5
    shift = ((x + x1) * p23 * p45 + (x2 + x3) * p01 * p45 + (x4 + x5) * p01 * p23) / (
        p01 * p23 * p45
    )
    r = 1.0 / (x + 6.0)
    f = r * r
    tail = f * (
        -1.0 / 12
        + f
        * (
            1.0 / 120
            + f * (-1.0 / 252 + f * (1.0 / 240 + f * (-1.0 / 132 + f * (691.0 / 32760 - f / 12))))
        )
    )
    return tail - 0.5 * r - shift


@njit(cache=True, inline="always", fastmath=_FAST)
def _exp_mantissa(t):
    """(m, p) with exp(t) = 2^m p for _EXP_FLOOR <= t <= 0: Cody and Waite's reduction
    u = t - m log 2 with log 2 in two parts (m log2_hi is exact for |m| <= 1021, so u
    carries about one rounding), |u| <= log(2) / 2, and exp(u) by its Taylor polynomial to
    u^13 (remainder below 1e-17 relative). Plain arithmetic, no library call, so a loop
    over the topics compiles to SIMD vectors, which LLVM cannot do with ``math.exp``
    (numba's SVML is not available here). For a NaN or infinite t the result is undefined
    (LLVM's conversion of m to an integer); gamma is always finite here."""
    m = math.floor(t * _INV_LN2 + 0.5)
    u = (t - m * _LN2_HI) - m * _LN2_LO
    p = 1.0 / 6227020800.0
    p = 1.0 / 479001600.0 + u * p
    p = 1.0 / 39916800.0 + u * p
    p = 1.0 / 3628800.0 + u * p
    p = 1.0 / 362880.0 + u * p
    p = 1.0 / 40320.0 + u * p
    p = 1.0 / 5040.0 + u * p
    p = 1.0 / 720.0 + u * p
    p = 1.0 / 120.0 + u * p
    p = 1.0 / 24.0 + u * p
    p = 1.0 / 6.0 + u * p
    p = 0.5 + u * p
    p = 1.0 + u * p
    return m, 1.0 + u * p


@njit(cache=True, inline="always", fastmath=_FAST)
def _theta_weights(gamma, out, powers):
    """out_k = exp(psi(gamma_k)): exp(E[log theta_k]) under Dir(gamma) times the factor
    exp(psi(sum gamma)), common to every topic. ``powers`` (k float64 values) is scratch.

    The E-step needs exp(E[log theta]) only up to that factor: phi_wk =
    eth_k beta_wk / sum_j eth_j beta_wj, and so gamma and the statistics, are the same for
    any positive multiple of eth (up to the 1e-100 guard against an all-zero column), so
    psi(sum gamma), a digamma per round, is not computed (an E-step round of a short
    document about 15% faster).

    psi(gamma_k) is not computed on its own: with y = gamma_k + 6,
    psi(gamma_k) = log y - 1/(2y) + T(y) - sum_{i<6} 1/(gamma_k + i) (``digamma``'s series
    T after a fixed six-step recurrence, its sum as one fraction: no branch; the products
    of six factors overflow above gamma of about 1e51, far above what alpha <= 1e6, which
    ``dp_vi_params`` enforces, plus any int64 token count can reach), so
    exp(psi(gamma_k)) = y exp(T(y) - 1/(2y) - sum): one exp per topic and no log. The
    exponent is at most 0 (the sum exceeds 1/(2y) - T(y)). From ``_VECTOR_TOPICS`` topics
    on, the three loops over the topics (exponent, exp as 2^m p with 2^m built from its
    bits in ``powers``, product) have no branch and no library call, so they run as SIMD
    vectors; below ``_EXP_FLOOR`` (gamma_k under about 0.0014) their weight is 0. With
    fewer topics a vector of four and a remainder gained nothing, so those keep
    ``math.exp`` (whose weights there are tiny, and subnormal for exponents below about
    -708.4 - log(gamma_k + 6)). With ``doc_e_step``'s columns, one iteration's clipped
    statistic took 0.83-0.85x the time of d61b905's kernel at k = 10, 0.69-0.71x at
    k = 20 and the same at k = 5, with the same integer statistic (in one process,
    interleaved: ``benchmarks/e_step.md``, 2026-11-30). Agrees with scipy's digamma to a
    relative 1e-12 (tests).
    """
    if gamma.shape[0] < _VECTOR_TOPICS:
        for k in range(gamma.shape[0]):
            out[k] = (gamma[k] + 6.0) * math.exp(_psi_exponent(gamma[k]))
        return
    bits = powers.view(np.int64)
    for k in range(gamma.shape[0]):
        out[k] = _psi_exponent(gamma[k])
    for k in range(gamma.shape[0]):
        t = out[k]
        m, p = _exp_mantissa(max(t, _EXP_FLOOR))
        bits[k] = (np.int64(m) + 1023) << 52
        out[k] = (gamma[k] + 6.0) * p if t >= _EXP_FLOOR else 0.0
    for k in range(gamma.shape[0]):
        out[k] *= powers[k]


@njit(cache=True, nogil=True, fastmath=_FAST)
def doc_e_step(
    words,
    counts,
    exp_elog_beta,
    alpha,
    max_iterations,
    tolerance,
    gamma,
    eth,
    warm,
    acc,
    powers,
    columns,
    phinorms,
):
    """Coordinate ascent on one document's (gamma, phi) with the topics held fixed.

    phi_wk is proportional to exp(E[log theta_k]) exp(E[log beta_kw]) and
    gamma_k = alpha + sum_w n_w phi_wk (Blei et al. 2003, section 5.2; Hoffman et al. 2010,
    Algorithm 2). phi is never stored: with phinorm_w = sum_k eth_k beta_wk, gamma follows
    from n_w / phinorm_w (Hoffman's implementation); eth is exp(E[log theta]) up to a
    factor common to the topics, which phi does not see (``_theta_weights``). Starts from
    gamma_k = alpha + n / k, or, when ``warm``, from the ``gamma`` passed in (the
    document's gamma at the end of its previous E-step). Stops after ``max_iterations`` or
    when the mean absolute change of gamma is below ``tolerance``. On return ``gamma`` and
    ``eth`` are consistent (eth computed from the final gamma). ``acc``, ``powers`` (k
    values each), ``phinorms`` (at least one value per distinct word of the document) and
    ``columns`` (k rows of at least that many values; from ``_VECTOR_TOPICS`` topics on)
    are the caller's scratch space, so that an E-step allocates nothing; too small a
    scratch is a ValueError (numba checks no bounds).

    Each phinorm_w is summed over the topics in their order, 1e-100 + eth_0 beta_w0 + ...,
    whatever the path: with ``_VECTOR_TOPICS`` topics or more, the document's rows of
    exp(E[log beta]) are first copied as ``columns`` (topic by word), so that each round
    adds topic k's term to every word's sum at once, as SIMD vectors over the words; with
    fewer, word by word. Either way no sum is reordered (``_FAST``), so the bits do not
    depend on the CPU's vector width.
    """
    n_topics = gamma.shape[0]
    n_words = words.shape[0]
    wide = n_topics >= _VECTOR_TOPICS
    if phinorms.shape[0] < n_words or (wide and columns.shape[1] < n_words):
        raise ValueError("doc_e_step: scratch smaller than the document")
    if wide:
        for k in range(n_topics):
            for i in range(n_words):
                columns[k, i] = exp_elog_beta[words[i], k]
    if not warm:
        length = 0.0
        for i in range(n_words):
            length += counts[i]
        for k in range(n_topics):
            gamma[k] = alpha + length / n_topics
    _theta_weights(gamma, eth, powers)
    for _ in range(max_iterations):
        if wide:
            for i in range(n_words):
                phinorms[i] = 1e-100
            for k in range(n_topics):
                weight = eth[k]
                for i in range(n_words):
                    phinorms[i] += weight * columns[k, i]
        else:
            for i in range(n_words):
                beta_w = exp_elog_beta[words[i]]
                norm = 1e-100
                for k in range(n_topics):
                    norm += eth[k] * beta_w[k]
                phinorms[i] = norm
        acc[:] = 0.0
        for i in range(n_words):
            beta_w = exp_elog_beta[words[i]]
            ratio = counts[i] / phinorms[i]
            for k in range(n_topics):
                acc[k] += ratio * beta_w[k]
        change = 0.0
        for k in range(n_topics):
            new = alpha + eth[k] * acc[k]
            change += abs(new - gamma[k])
            gamma[k] = new
        _theta_weights(gamma, eth, powers)
        if change / n_topics < tolerance:
            break


_MIX = np.uint64(0x9E3779B97F4A7C15)
_LEADERS = 8
"""The most distinct contents compared within one hash value; a document beyond them gets
a slot of its own (correct, only not shared), so crafted collisions cost linear time."""


@njit(cache=True, inline="always")
def _mixed(h):
    """splitmix64's finaliser: every input bit reaches every output bit."""
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@njit(cache=True, inline="always")
def _same(doc_ptr, words, counts, a, b):
    """Whether documents a and b have the same (word, count) pairs (each in word order)."""
    lo_a, lo_b = doc_ptr[a], doc_ptr[b]
    n = doc_ptr[a + 1] - lo_a
    if doc_ptr[b + 1] - lo_b != n:
        return False
    for i in range(n):
        if words[lo_a + i] != words[lo_b + i] or counts[lo_a + i] != counts[lo_b + i]:
            return False
    return True


@njit(cache=True, nogil=True)
def document_slots(doc_ptr, words, counts, docs):
    """(slots, n, shared): slots[j] in [0, n) (int32) for document ``docs[j]``, equal
    exactly when two of these documents have the same (word, count) pairs (up to
    ``_LEADERS`` distinct contents per hash value; beyond that a document has a slot of its
    own); the slots [0, shared) hold two documents or more, the others one. Contents are
    grouped by a 64-bit hash and compared in full, so a collision never merges two
    documents."""
    hashes = np.empty(docs.shape[0], dtype=np.uint64)
    for j in range(docs.shape[0]):
        d = docs[j]
        h = np.uint64(doc_ptr[d + 1] - doc_ptr[d])
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            h = _mixed(h ^ (np.uint64(words[i]) * _MIX) ^ np.uint64(counts[i]))
        hashes[j] = h
    return slots_by_hash(hashes, doc_ptr, words, counts, docs)


@njit(cache=True, nogil=True)
def slots_by_hash(hashes, doc_ptr, words, counts, docs):
    """``document_slots`` given each document's hash (a test passes colliding ones)."""
    n_docs = docs.shape[0]
    order = np.argsort(hashes, kind="mergesort")
    slots = np.empty(n_docs, dtype=np.int32)
    leaders = np.empty(_LEADERS, dtype=np.int64)
    n_slots = 0
    start = 0
    while start < n_docs:
        end = start + 1
        while end < n_docs and hashes[order[end]] == hashes[order[start]]:
            end += 1
        n_leaders = 0
        for g in range(start, end):
            j = order[g]
            slot = -1
            for m in range(n_leaders):
                if _same(doc_ptr, words, counts, docs[leaders[m]], docs[j]):
                    slot = slots[leaders[m]]
                    break
            if slot < 0:
                slot = n_slots
                n_slots += 1
                if n_leaders < _LEADERS:
                    leaders[n_leaders] = j
                    n_leaders += 1
            slots[j] = slot
        start = end
    return _shared_first(slots, n_slots)


@njit(cache=True, nogil=True)
def _shared_first(slots, n_slots):
    """(slots, n_slots, shared) with the slots of two documents or more renumbered to
    [0, shared), in their order, and the single ones after them: only the shared slots
    need a kept result (``clipped_statistics``), so its memory follows the repeats."""
    sizes = np.zeros(n_slots, dtype=np.int64)
    for j in range(slots.shape[0]):
        sizes[slots[j]] += 1
    renamed = np.empty(n_slots, dtype=np.int32)
    shared = 0
    for slot in range(n_slots):
        if sizes[slot] > 1:
            renamed[slot] = shared
            shared += 1
    single = shared
    for slot in range(n_slots):
        if sizes[slot] == 1:
            renamed[slot] = single
            single += 1
    for j in range(slots.shape[0]):
        slots[j] = renamed[slots[j]]
    return slots, n_slots, shared


@njit(cache=True, nogil=True)
def _add_doc_stats(words, counts, exp_elog_beta, eth, scratch, touched, n_touched, mark):
    """scratch[w, k] += n_w phi_wk for one document; returns the new number of touched words.

    phi_wk = eth_k beta_wk / phinorm_w sums to 1 over k (up to the 1e-100 guard), so the
    document adds exactly n_w to word w's row: the statistic's l1 norm is the token count.
    """
    n_topics = eth.shape[0]
    for i in range(words.shape[0]):
        w = words[i]
        beta_w = exp_elog_beta[w]
        norm = 1e-100
        for k in range(n_topics):
            norm += eth[k] * beta_w[k]
        ratio = counts[i] / norm
        if not mark[w]:
            mark[w] = True
            touched[n_touched] = w
            n_touched += 1
        for k in range(n_topics):
            scratch[w, k] += ratio * eth[k] * beta_w[k]
    return n_touched


@njit(cache=True, nogil=True)
def clipped_statistics(
    first,
    last,
    unit_ptr,
    unit_docs,
    slots,
    n_slots,
    shared,
    doc_ptr,
    words,
    counts,
    exp_elog_beta,
    alpha,
    max_iterations,
    tolerance,
    included,
    clip,
    per_unit,
    limit,
    stats,
    norms,
    gammas,
    warm,
):
    """stats += sum over the included units u in [first, last) of q_u, the clipped S_u in
    integer units of the grid 1 / ``per_unit``; norms[u - first] = ||S_u||_2 before clipping.

    ``slots`` (with ``n_slots`` and ``shared``: ``document_slots`` of the documents
    ``unit_docs[unit_ptr[first]:unit_ptr[last]]``) gives document ``unit_docs[j]`` the slot
    slots[j - unit_ptr[first]]; each shared slot's E-step runs once per call, for its first
    included document, and every document of the slot uses its result (module docstring);
    a slot of one document runs its E-step where it is met, keeping nothing.

    ``gammas`` (float32) keeps one gamma per slot, or has no rows (nothing kept). When it
    has rows, every E-step's final gamma is stored there, and with ``warm`` the E-step
    starts from the stored one (``doc_e_step``), raised to alpha where float32 rounded it
    below (every exact gamma_k is at least alpha). Warm starts need every unit included
    (ValueError otherwise): then every slot's E-step runs in every call and its gamma is the
    history of its content alone, the same for each of its documents.

    S_u (words x topics) is the sum over the unit's documents of n_dw phi_dwk, the expected
    sufficient statistics of the unit, computed with the fixed (public) ``exp_elog_beta``.
    clip(S, C) = S min(1, C / ||S||_2) (Frobenius norm). The unit adds the integers
    q_u = floor(f S_u) with f = ``per_unit`` min(1, C / ||S_u||_2) (S_u >= 0, so floor
    rounds towards zero), after checking in exact integer arithmetic that
    sum q_u^2 <= ``limit`` (the caller's floor(C per_unit)^2); when it fails (routinely
    when C per_unit is not a whole number, or by float rounding in the norm or in f), f is
    cut by 2^-20 until the check passes. So every unit's term has L2 norm at most
    sqrt(limit) grid units, whatever the rounding, and ``stats`` (int64) sums the terms
    exactly: no rounding of the sum depends on which other units are present, or on the
    order of the sum. Units with ``included[u]`` False are
    skipped entirely (their ``norms`` entry is left as is). ``stats`` is accumulated into,
    not reset.
    """
    n_words, n_topics = exp_elog_beta.shape
    scratch = np.zeros((n_words, n_topics))
    touched = np.empty(n_words, dtype=np.int64)
    mark = np.zeros(n_words, dtype=np.bool_)
    gamma = np.empty(n_topics)
    acc = np.empty(n_topics)
    powers = np.empty(n_topics)
    longest = 0
    for j in range(unit_ptr[first], unit_ptr[last]):
        d = unit_docs[j]
        longest = max(longest, doc_ptr[d + 1] - doc_ptr[d])
    columns = np.empty((n_topics, longest))
    phinorms = np.empty(longest)
    single = np.empty(n_topics)
    eths = np.empty((shared, n_topics))
    done = np.zeros(shared, dtype=np.bool_)
    keep = gammas.shape[0] > 0
    base = unit_ptr[first]
    if keep and warm:
        for u in range(first, last):
            if not included[u]:  # a slot's gamma would depend on which units were in
                raise ValueError("warm starts need every unit included")
    for u in range(first, last):
        if not included[u]:
            continue
        n_touched = 0
        for j in range(unit_ptr[u], unit_ptr[u + 1]):
            d = unit_docs[j]
            lo, hi = doc_ptr[d], doc_ptr[d + 1]
            if hi == lo:
                continue
            doc_words, doc_counts = words[lo:hi], counts[lo:hi]
            slot = slots[j - base]
            eth = eths[slot] if slot < shared else single
            if slot >= shared or not done[slot]:
                if slot < shared:
                    done[slot] = True
                if keep and warm:  # gamma >= alpha exactly; float32 may round below it
                    for k in range(n_topics):
                        gamma[k] = max(np.float64(gammas[slot, k]), alpha)
                doc_e_step(
                    doc_words,
                    doc_counts,
                    exp_elog_beta,
                    alpha,
                    max_iterations,
                    tolerance,
                    gamma,
                    eth,
                    keep and warm,
                    acc,
                    powers,
                    columns,
                    phinorms,
                )
                if keep:
                    for k in range(n_topics):
                        gammas[slot, k] = gamma[k]
            n_touched = _add_doc_stats(
                doc_words, doc_counts, exp_elog_beta, eth, scratch, touched, n_touched, mark
            )
        squared = 0.0
        for t in range(n_touched):
            row = scratch[touched[t]]
            for k in range(n_topics):
                squared += row[k] * row[k]
        norm = math.sqrt(squared)
        if not math.isfinite(norm):  # np.int64 of NaN is INT64_MIN, whose square wraps to 0
            raise ValueError("clipped_statistics: a unit's statistic is not finite")
        norms[u - first] = norm
        scale = per_unit if norm <= clip else per_unit * (clip / norm)
        while _squared_units(scratch, touched, n_touched, scale) > limit:
            scale *= _SHRINK
        for t in range(n_touched):
            w = touched[t]
            for k in range(n_topics):
                stats[w, k] += np.int64(scale * scratch[w, k])
                scratch[w, k] = 0.0
            mark[w] = False


@njit(cache=True, nogil=True, inline="always")
def _squared_units(scratch, touched, n_touched, scale):
    """sum of floor(scale x entry)^2 over the touched rows of ``scratch``, in int64 (exact:
    each term is at most about ``limit``, and so is their sum)."""
    total = np.int64(0)
    for t in range(n_touched):
        row = scratch[touched[t]]
        for k in range(row.shape[0]):
            q = np.int64(scale * row[k])
            total += q * q
    return total
