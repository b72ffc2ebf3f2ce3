"""DP set union (M1): thresholds against the papers, the policies' sensitivity, the noise."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fdptm.errors import BadInputError
from fdptm.kernels import set_union as kernels
from fdptm.mechanisms.set_union import (
    POLICIES,
    WEIGHT_GRID,
    AuthorItems,
    analytic_gaussian_sigma,
    author_items,
    gaussian_threshold,
    laplace_threshold,
    released,
    select,
    select_units,
    set_union_params,
    unit_items,
    unit_ranges,
    weighted_threshold,
)
from fdptm.privacy.noise import EXACT_INTEGER_LAPLACE, NoiseSource


def test_weighted_threshold_is_carvalhos_for_one_item():
    # Carvalho et al. / FDPTM sec. 4.4: rho = 1 - ln(2 delta) / eps
    for eps, delta in [(1.0, 1e-5), (3.0, math.exp(-10)), (0.25, 1e-6)]:
        assert weighted_threshold(eps, delta, 1) == pytest.approx(1 - math.log(2 * delta) / eps)


@pytest.mark.parametrize("eps,delta,d0", [(1.0, 1e-5, 50), (0.3, 1e-7, 10), (5.0, 1e-5, 200)])
def test_weighted_threshold_bounds_the_bad_event_by_delta(eps, delta, d0):
    rho = weighted_threshold(eps, delta, d0)
    # one unique word with weight 1, d0 - 1 with weight 0 (module docstring)
    bad = 0.5 * math.exp(-eps * (rho - 1)) + (d0 - 1) * 0.5 * math.exp(-eps * rho)
    assert bad == pytest.approx(delta, rel=1e-9)


def test_laplace_threshold_matches_gopi_formula():
    eps, delta, d0 = 3.0, math.exp(-10), 100
    expected = max(
        1 / t + math.log(1 / (2 * (1 - (1 - delta) ** (1 / t)))) / eps for t in range(1, d0 + 1)
    )
    assert laplace_threshold(eps, delta, d0) == pytest.approx(expected, rel=1e-7)


def test_analytic_gaussian_sigma_is_tight():
    eps, delta = 1.0, 1e-5
    sigma = analytic_gaussian_sigma(eps, delta)

    def achieved(s):
        a, b = 1 / (2 * s), eps * s
        return stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b)

    assert achieved(sigma) == pytest.approx(delta, rel=1e-6)
    assert achieved(sigma * 0.99) > delta  # any smaller sigma breaks (eps, delta)
    # the classical bound sqrt(2 ln(1.25/delta))/eps is looser
    assert sigma < math.sqrt(2 * math.log(1.25 / delta)) / eps


def test_gaussian_threshold_matches_gopi_formula():
    sigma, delta, d0 = 1.3, math.exp(-10), 100
    expected = max(
        1 / math.sqrt(t) + sigma * stats.norm.ppf((1 - delta / 2) ** (1 / t))
        for t in range(1, d0 + 1)
    )
    assert gaussian_threshold(sigma, delta, d0) == pytest.approx(expected, rel=1e-6)


def test_params_cutoffs():
    p = set_union_params("weighted", 2.0, 1e-5, alpha=3.0, max_items=50)
    assert p.gamma == pytest.approx(p.rho + 3.0 / 2.0)
    assert p.noise_scale == 0.5
    g = set_union_params("policy-gaussian", 2.0, 1e-5, alpha=3.0, max_items=50)
    assert g.noise_scale == pytest.approx(analytic_gaussian_sigma(2.0, 0.5e-5))
    assert g.gamma == pytest.approx(g.rho + 3.0 * g.noise_scale)


def _random_table(rng, n_authors, n_items, max_len):
    authors, items = [], []
    for a in range(n_authors):
        k = rng.integers(1, max_len + 1)
        words = rng.choice(n_items, size=k, replace=True, p=_zipf(n_items))
        authors += [a] * k
        items += list(words)
    return author_items(np.array(authors), np.array(items), n_items)


def _zipf(n):
    w = 1 / np.arange(1, n + 1)
    return w / w.sum()


def _run(kernel, table: AuthorItems, order, gamma):
    """The policy's histogram, in units of the budget: the integer greedy (budget
    WEIGHT_GRID units, gamma rounded up to the grid) divided back exactly."""
    if kernel is kernels.weighted_greedy:
        hist = np.zeros(table.n_items, dtype=np.int64)
        units = np.int64(math.ceil(gamma * WEIGHT_GRID))
        kernel(order, table.offsets, table.items, units, np.int64(WEIGHT_GRID), hist)
        return hist / WEIGHT_GRID
    hist = np.zeros(table.n_items)
    kernel(order, table.offsets, table.items, gamma, hist)
    return hist


def _without(table: AuthorItems, author: int) -> AuthorItems:
    keep = np.ones(len(table.items), bool)
    keep[table.offsets[author] : table.offsets[author + 1]] = False
    sizes = np.diff(table.offsets)
    sizes[author] = 0
    offsets = np.zeros_like(table.offsets)
    np.cumsum(sizes, out=offsets[1:])
    return AuthorItems(offsets, table.items[keep], table.counts[keep], table.n_items)


@pytest.mark.parametrize(
    "kernel,norm", [(kernels.weighted_greedy, 1), (kernels.l1_descent, 1), (kernels.l2_descent, 2)]
)
def test_policies_have_sensitivity_one(kernel, norm):
    """Removing any one author moves the final histogram by at most 1 (l1 or l2).

    This is the property the Laplace / Gaussian noise is calibrated to (Gopi et al.,
    Theorems 3.1 / 4.1; the contraction of the sequential update). The integer greedy's
    histograms are multiples of 2^-20, so its norms are exact: no tolerance there.
    """
    rng = np.random.default_rng(7)
    slack = 0.0 if kernel is kernels.weighted_greedy else 1e-9
    worst = 0.0
    for _ in range(300):
        table = _random_table(rng, n_authors=12, n_items=15, max_len=6)
        gamma = rng.uniform(1.05, 4.0)
        order = rng.permutation(table.n_authors)
        full = _run(kernel, table, order, gamma)
        victim = int(rng.integers(table.n_authors))
        reduced = _run(kernel, _without(table, victim), order, gamma)
        worst = max(worst, float(np.linalg.norm(full - reduced, ord=norm)))
        assert np.all(full <= math.ceil(gamma * WEIGHT_GRID) / WEIGHT_GRID + slack)
    assert worst <= 1.0 + slack


def test_greedy_gives_at_most_one_new_word_weight():
    """A word only one author has starts at 0 < gamma - 1, so it absorbs the rest of the
    author's budget: at most one such word gets weight (module docstring of set_union)."""
    table = author_items(np.zeros(6, int), np.arange(6), 6)
    hist = _run(kernels.weighted_greedy, table, np.array([0]), 2.5)
    assert np.count_nonzero(hist) == 1 and hist.sum() == 1.0


def test_l1_descent_is_water_filling():
    table = author_items(np.zeros(3, int), np.arange(3), 3)
    hist = np.array([1.9, 1.5, 0.0])
    kernels.l1_descent(np.array([0]), table.offsets, table.items, 2.0, hist)
    # gaps 0.1, 0.5, 2.0: level L with 0.1 + 2 L = 1 -> L = 0.45
    assert hist == pytest.approx([2.0, 1.95, 0.45])


@pytest.mark.parametrize("policy", ["weighted", "uniform-laplace"])
def test_release_probability_matches_the_laplace_tail(policy):
    """Noise scale check end to end: a word with weight h is released with probability
    P[h + Lap(1/eps) > rho] = exp(-eps (rho - h)) / 2 for h <= rho."""
    eps, delta = 1.0, 1e-3
    params = set_union_params(policy, eps, delta, max_items=1)
    n_authors = math.floor(params.rho)  # each adds 1 to the only word: h = n_authors
    table = author_items(np.arange(n_authors), np.zeros(n_authors, int), 1)
    p = 0.5 * math.exp(-eps * (params.rho - n_authors))
    trials = 4000
    hits = sum(len(select(table, params, NoiseSource.create(1000 + i))) for i in range(trials))
    sd = math.sqrt(trials * p * (1 - p))
    assert abs(hits - trials * p) < 4.5 * sd, (hits, trials * p)


def _discrete_tail(m: np.ndarray, t: float) -> np.ndarray:
    """P[X >= m] for the discrete Laplace of scale t (P(x) proportional to exp(-|x| / t)),
    m >= 1: exp(-m / t) / (1 + exp(-1 / t))."""
    return np.exp(-m / t) / (1.0 + np.exp(-1.0 / t))


@pytest.mark.parametrize("policy", ["weighted", "uniform-laplace"])
@pytest.mark.parametrize(
    ("eps", "delta", "d0"),
    [(1.5, 5e-7, 50), (0.1, 1e-9, 50), (3.0, 1e-5, 1), (20.0, 1e-12, 500), (1e-4, 1e-6, 50)],
)
def test_integer_thresholds_keep_delta_under_the_discrete_noise(policy, eps, delta, d0):
    """The integer policies' worst case, computed from the discrete Laplace's own tail at
    the scales the exact sampler (one ulp above 1/(eps g)) and OpenDP (2^-30 above) use:
    the probability that an author's unique words are released is at most delta, and the
    grid costs little (the continuous tail at the threshold more than 0.9999 of its value
    at the continuous one, the worst case above delta / 2). ``weighted``: one unique word
    at the whole budget (1/g units) and Delta0 - 1 at 0, union bound; ``uniform-laplace``:
    t unique words at floor(1/(g t)) units each, independent, for every t <= Delta0
    (module docstring)."""
    params = set_union_params(policy, eps, delta, max_items=d0)
    grid = params.grid
    threshold = round(params.rho * grid)
    assert threshold == params.rho * grid and params.noise_scale == 1 / eps
    scale = params.noise_scale * grid
    formula = weighted_threshold if policy == "weighted" else laplace_threshold
    assert 0 < eps * (params.rho - formula(eps, delta, d0)) < 1e-4  # tail factor > 0.9999
    worst = 0.0
    for t in (math.nextafter(scale, math.inf), scale * (1 + 2**-30)):
        if policy == "weighted":
            tail = _discrete_tail(threshold - grid + 1.0, t)
            tail += (d0 - 1) * _discrete_tail(threshold + 1.0, t)
        else:
            unique = np.arange(1, d0 + 1)
            each = _discrete_tail(threshold - grid // unique + 1.0, t)
            tail = float(np.max(-np.expm1(unique * np.log1p(-each))))
        worst = max(worst, float(tail))
    assert delta / 2 < worst <= delta


@pytest.mark.parametrize("policy", ["weighted", "uniform-laplace", "policy-laplace"])
def test_a_weight_equal_to_the_threshold_is_not_released(policy):
    """The delta bounds count P[X >= R - w + 1]: a noisy integer equal to R = rho / g must
    stay out and R + 1 get in (the float policies: rho out, the next float in)."""
    params = set_union_params(policy, 1.5, 5e-7)
    if params.grid is None:
        noisy = np.array([params.rho, math.nextafter(params.rho, math.inf)])
        assert released(noisy, params).tolist() == [False, True]
        return
    units = round(params.rho * params.grid)
    assert units == params.rho * params.grid
    noisy = np.array([units - 1, units, units + 1], dtype=np.float64)
    assert released(noisy, params).tolist() == [False, False, True]


def test_thresholds_beyond_exact_integers_are_refused():
    """A threshold of 2^33 or more (2^53 grid units) or an infinite one (a delta whose
    tail underflows) is refused before any data is read, with what to change."""
    for policy, epsilon, delta in (("weighted", 1e-30, 1e-6), ("uniform-laplace", 1.0, 5e-324)):
        with pytest.raises(BadInputError, match="raise M1's epsilon or delta"):
            set_union_params(policy, epsilon, delta)


@pytest.mark.parametrize("policy", ["weighted", "uniform-laplace"])
def test_production_release_probability_is_the_discrete_laplace_tail(policy):
    """Production noise (fdptm's exact sampler) end to end: a word with h whole budgets is
    released with probability P[X >= R - h / g + 1] for the discrete Laplace X of scale
    1/(eps g) (``_discrete_tail``). 4,000 releases; a false failure has probability below
    7e-6 (|z| < 4.5, normal approximation of the binomial)."""
    eps, delta = 1.0, 1e-3
    params = set_union_params(policy, eps, delta, max_items=1)
    n_authors = math.floor(params.rho)
    table = author_items(np.arange(n_authors), np.zeros(n_authors, int), 1)
    threshold = round(params.rho * params.grid)
    scale = math.nextafter(params.noise_scale * params.grid, math.inf)
    p = float(_discrete_tail(np.float64(threshold - n_authors * params.grid + 1), scale))
    trials = 4000
    sources = [NoiseSource.create(None) for _ in range(trials)]
    hits = sum(len(select(table, params, source)) for source in sources)
    assert {k for s in sources for k in s.draws} == {EXACT_INTEGER_LAPLACE}
    sd = math.sqrt(trials * p * (1 - p))
    assert abs(hits - trials * p) < 4.5 * sd, (hits, trials * p)


def test_select_returns_sorted_candidates_only():
    rng = np.random.default_rng(3)
    table = _random_table(rng, n_authors=400, n_items=60, max_len=8)
    for policy in ("weighted", "policy-laplace", "policy-gaussian"):
        params = set_union_params(policy, 3.0, 1e-5, max_items=8)
        chosen = select(table, params, NoiseSource.create(5))
        assert np.all(np.diff(chosen) > 0)
        assert set(chosen) <= set(table.items)
        assert len(chosen) > 0  # frequent words clear the threshold at eps = 3


def test_author_items_groups_distinct_items_with_counts():
    t = author_items(np.array([1, 0, 1, 1, 0]), np.array([2, 2, 2, 0, 1]), 3)
    assert t.offsets.tolist() == [0, 2, 4]
    assert t.items.tolist() == [1, 2, 0, 2]
    assert t.counts.tolist() == [1, 1, 1, 2]


@pytest.mark.parametrize("policy", ["weighted", "policy-laplace"])
def test_laplace_thresholds_cap_delta_where_their_tail_bound_stops(policy):
    """The tail bound behind rho holds for rho >= 1 only: a share of delta above 1/2 is
    capped at 1/2 (rho stays >= 1), and the params state the delta actually used."""
    from fdptm.mechanisms.set_union import MAX_LAPLACE_DELTA, set_union_params

    params = set_union_params(policy, 1.0, 0.9, max_items=1)
    assert params.delta == MAX_LAPLACE_DELTA == 0.5
    assert params.rho >= 1.0
    assert set_union_params(policy, 1.0, 0.3, max_items=1).delta == 0.3


def test_unit_items_equal_a_unique_over_author_and_item_keys():
    """The numba grouping (documents of an author, any order) equals one np.unique over
    (author, item) keys: same items, ascending, same counts; authors without items are
    empty slices; and the per-author reorder keeps ties in item order."""
    from fdptm.mechanisms.set_union import _reorder, unit_items

    rng = np.random.default_rng(4)
    n_docs, n_items = 400, 30
    doc_author = rng.integers(0, 90, n_docs)
    lengths = rng.integers(0, 9, n_docs)
    doc_ptr = np.concatenate([[0], np.cumsum(lengths)])
    items = rng.integers(0, n_items, doc_ptr[-1])
    table = unit_items(doc_author, doc_ptr, items, n_items)
    token_author = np.repeat(doc_author, lengths)
    keys, counts = np.unique(token_author * n_items + items, return_counts=True)
    assert table.n_authors == doc_author.max() + 1
    sizes = np.bincount(keys // n_items, minlength=table.n_authors)
    assert np.array_equal(np.diff(table.offsets), sizes)
    assert np.array_equal(table.items, keys % n_items)
    assert np.array_equal(table.counts, counts)
    primary = -table.counts  # many ties: stable, so ties stay in ascending item order
    cut = _reorder(table, primary, 3)
    for a in range(table.n_authors):
        lo, hi = table.offsets[a], table.offsets[a + 1]
        order = np.lexsort((table.items[lo:hi], primary[lo:hi]))[:3]
        assert np.array_equal(
            cut.items[cut.offsets[a] : cut.offsets[a + 1]], table.items[lo:hi][order]
        )


def test_most_frequent_first_equals_the_reorder_by_the_global_key():
    """The weighted policy's per-author key (built inside the kernel) orders and cuts
    exactly as the int64 key -count x n_items + tiebreak[item] over every pair did."""
    from fdptm.mechanisms.set_union import _most_frequent_first, _reorder, unit_items

    rng = np.random.default_rng(5)
    n_docs, n_items = 500, 40
    doc_author = rng.integers(0, 80, n_docs)
    doc_ptr = np.concatenate([[0], np.cumsum(rng.integers(0, 12, n_docs))])
    table = unit_items(doc_author, doc_ptr, rng.integers(0, n_items, doc_ptr[-1]), n_items)
    tiebreak = rng.permutation(n_items)
    key = -table.counts.astype(np.int64) * n_items + tiebreak[table.items]
    for limit in (None, 1, 4):
        ours, reference = _most_frequent_first(table, tiebreak, limit), _reorder(table, key, limit)
        assert np.array_equal(ours.offsets, reference.offsets)
        assert np.array_equal(ours.items, reference.items)
        assert np.array_equal(ours.counts, reference.counts)


def _documents(seed: int, n_docs: int = 3000, n_authors: int = 700, n_items: int = 120):
    rng = np.random.default_rng(seed)
    doc_author = rng.integers(0, n_authors, n_docs)
    doc_ptr = np.concatenate([[0], np.cumsum(rng.integers(0, 14, n_docs))])
    items = (rng.zipf(1.4, doc_ptr[-1]) % n_items).astype(np.int32)
    return doc_author, doc_ptr, items, n_items


@pytest.mark.parametrize("policy", POLICIES)
def test_ranges_of_authors_select_what_one_grouped_table_selects(policy, monkeypatch):
    """M1's per-author work runs per range of authors (on Dask, one range per task); the
    seeded selection is the same whatever the ranges' sizes, and equals ``select`` on the
    table of all authors grouped at once."""
    from fdptm.mechanisms import set_union

    doc_author, doc_ptr, items, n_items = _documents(8)
    params = set_union_params(policy, 3.0, 1e-5, max_items=6)
    whole = select(unit_items(doc_author, doc_ptr, items, n_items), params, NoiseSource.create(3))
    assert len(whole) > 0
    n_authors = int(doc_author.max()) + 1
    for authors, tokens in ((1 << 16, 1 << 23), (50, 1 << 23), (1 << 16, 300), (1, 1)):
        monkeypatch.setattr(set_union, "RANGE_AUTHORS", authors)
        monkeypatch.setattr(set_union, "RANGE_TOKENS", tokens)
        parts = list(unit_ranges(doc_author, doc_ptr, items, n_items))
        assert np.array_equal(
            np.concatenate([np.diff(p.unit_ptr) for p in parts]),
            np.bincount(doc_author, minlength=n_authors),
        )
        chosen = select_units(parts, n_items, params, NoiseSource.create(3))
        if policy.startswith("policy-") and len(parts) > 1:
            continue  # their random subsets are drawn per range: other (equally random) sets
        assert np.array_equal(chosen, whole), (authors, tokens)


@pytest.mark.parametrize("policy,norm", [("uniform-laplace", 1), ("uniform-gaussian", 2)])
def test_uniform_weights_are_exact_integers_of_norm_at_most_one_per_author(policy, norm):
    """Each author's vector is a multiple of 2^-20 of l1 (l2) norm <= 1, checked in
    integer arithmetic, and the histogram is their exact sum: removing an author removes
    exactly their vector."""
    from fdptm.mechanisms.set_union import uniform_weights

    doc_author, doc_ptr, items, n_items = _documents(9, n_docs=800, n_authors=150)
    table = unit_items(doc_author, doc_ptr, items, n_items)
    tiebreak = np.random.default_rng(1).permutation(n_items)
    total = uniform_weights(table, policy, 5, tiebreak)
    for author in range(0, table.n_authors, 7):
        one = _without(table, author)
        alone = AuthorItems(
            np.array([0, table.offsets[author + 1] - table.offsets[author]]),
            table.items[table.offsets[author] : table.offsets[author + 1]],
            table.counts[table.offsets[author] : table.offsets[author + 1]],
            n_items,
        )
        vector = uniform_weights(alone, policy, 5, tiebreak)
        assert np.array_equal(total - uniform_weights(one, policy, 5, tiebreak), vector)
        size = int(np.count_nonzero(vector))
        assert size == min(5, len(alone.items))
        if norm == 1:
            assert int(vector.sum()) <= WEIGHT_GRID
        else:
            assert sum(int(v) ** 2 for v in vector) <= WEIGHT_GRID**2
            # the largest grid value with that bound: one step more would exceed it
            step = int(vector.max()) + 1
            assert size and size * step**2 > WEIGHT_GRID**2


def test_uniform_thresholds_are_gopis_and_have_no_cutoff():
    eps, delta, d0 = 2.0, 1e-6, 30
    lap = set_union_params("uniform-laplace", eps, delta, max_items=d0)
    continuous = laplace_threshold(eps, delta, d0)  # on the grid: a little higher
    assert continuous < lap.rho < continuous + 3 / WEIGHT_GRID and lap.gamma is None
    assert lap.noise == "laplace" and lap.noise_scale == 1 / eps
    gauss = set_union_params("uniform-gaussian", eps, delta, max_items=d0)
    assert gauss.noise_scale == analytic_gaussian_sigma(eps, delta / 2)
    assert gauss.rho == gaussian_threshold(gauss.noise_scale, delta, d0) and gauss.gamma is None
    from fdptm.errors import BadInputError

    with pytest.raises(BadInputError, match="at most 1048576 items"):
        set_union_params("uniform-laplace", eps, delta, max_items=(1 << 20) + 1)


def test_policy_subsets_are_uniform_and_fresh_per_range():
    """``policy-*`` keeps a uniformly random Delta0-subset: over 2,000 keys each of an
    author's 20 items is kept with probability 4/20 (binomial tolerance, 4.5 sd), and two
    identical authors in two ranges get independent subsets (their own counter blocks)."""
    from fdptm.mechanisms.set_union import UnitRange, truncated

    author = UnitRange(0, np.array([0, 1]), np.array([0, 20]), np.arange(20, dtype=np.int32), 20)
    other = UnitRange(1, author.unit_ptr, author.doc_ptr, author.items, 20)
    tiebreak = np.arange(20)
    kept = np.zeros(20)
    same = 0
    trials = 2000
    for t in range(trials):
        key = np.random.default_rng(t).integers(0, 2**63, 4).astype(np.uint64)
        first = truncated(author, "policy-laplace", 4, tiebreak, key).items
        kept[first] += 1
        same += set(first) == set(truncated(other, "policy-laplace", 4, tiebreak, key).items)
    p = 4 / 20
    assert np.all(np.abs(kept - trials * p) < 4.5 * math.sqrt(trials * p * (1 - p))), kept
    # P[two independent 4-subsets of 20 agree] = 1 / C(20, 4) = 1/4845
    assert same <= 3
