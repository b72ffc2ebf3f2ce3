"""M2 ``biterm`` (``fdptm.mechanisms.biterm``, issue 28 item 5): the pair statistic against a
reference, the per-unit clipping that gives its sensitivity, exact sums, the calibration
against the accountant and the analytic Gaussian, the noise scale against the formula (seeded
and OpenDP), the word-list test on pure noise and on planted topics, and a real release
through the pipeline. Seeded noise except where OpenDP is named: tests, not evidence."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from fdptm.evaluation import significance
from fdptm.evaluation.significance import DEFAULT_ALPHA, PairEvidence
from fdptm.kernels import biterm as kernel
from fdptm.mechanisms import biterm, dp_vi
from fdptm.mechanisms.lda import Corpus
from fdptm.parallel import threads_at_most, workers
from fdptm.privacy.adjacency import Adjacency
from fdptm.privacy.noise import NoiseSource

RELEASES = 100
# At most 1% of pure-noise releases may list a word; P(Binomial(100, 0.01) >= 5) = 0.0034.
MOST_FALSE = int(stats.binom.isf(0.005, RELEASES, DEFAULT_ALPHA))


def _params(epsilon: float = 3.0, n_topics: int = 2, **options) -> biterm.BitermParams:
    return biterm.biterm_params(
        epsilon,
        1e-5,
        n_topics=n_topics,
        adjacency=options.pop("adjacency", Adjacency.DOCUMENT),
        max_docs_per_author=1,
        **options,
    )


def _corpus(docs: list[list[int]], n_words: int, authors: list[int] | None = None) -> Corpus:
    return Corpus(
        np.cumsum([0] + [len(d) for d in docs]).astype(np.int64),
        np.asarray([w for d in docs for w in d], dtype=np.int32),
        n_words,
        None if authors is None else np.asarray(authors, dtype=np.int64),
    )


def _sums(corpus: Corpus, params: biterm.BitermParams) -> np.ndarray:
    unit_ptr, unit_docs = dp_vi.unit_layout(corpus, params.adjacency)
    stats_ = np.zeros(biterm.pair_positions(corpus.n_words), dtype=np.int64)
    kernel.clipped_pair_sums(
        unit_ptr,
        unit_docs,
        corpus.doc_ptr,
        corpus.words.astype(np.int64),
        np.int64(corpus.n_words),
        np.int64(params.window),
        params.clip,
        1.0 / dp_vi.statistic_grid(params.clip),
        dp_vi.unit_bound(params.clip) ** 2,
        stats_,
    )
    return stats_


def _reference_term(docs: list[list[int]], n_words: int, params: biterm.BitermParams) -> dict:
    """One unit's clipped term in grid units, computed the slow, obvious way."""
    counts: dict[tuple[int, int], float] = {}
    for doc in docs:
        for a, b in itertools.combinations(range(len(doc)), 2):
            if b - a < params.window:
                pair = tuple(sorted((doc[a], doc[b])))
                counts[pair] = counts.get(pair, 0.0) + 1.0
    norm = math.sqrt(sum(c * c for c in counts.values()))
    grid = dp_vi.statistic_grid(params.clip)
    scale = (1.0 / grid) * min(1.0, params.clip / norm) if counts else 0.0
    limit = dp_vi.unit_bound(params.clip) ** 2
    while sum(int(scale * c) ** 2 for c in counts.values()) > limit:
        scale *= 1.0 - 2.0**-20
    return {p: int(scale * c) for p, c in counts.items()}


def test_pair_positions_round_trip():
    n = 7
    rows, cols = kernel.pair_rows(n)
    assert len(rows) == biterm.pair_positions(n) == 28
    positions = np.arange(len(rows))
    for i, j, p in zip(rows, cols, positions, strict=True):
        assert kernel.pair_index(i, j, n) == p and i <= j
    back_rows, back_cols = biterm._pairs_of(positions, n)
    assert np.array_equal(back_rows, rows) and np.array_equal(back_cols, cols)


def test_each_unit_adds_its_clipped_pairs_exactly():
    """Per unit: the pairs within the window, clipped to C and floored on the grid, equal a
    direct computation; a unit's squared norm never exceeds the bound in grid units."""
    params = _params(window=3, clip=1.5, adjacency=Adjacency.AUTHOR)
    gen = np.random.default_rng(0)
    for _ in range(20):
        docs = [list(gen.integers(0, 9, gen.integers(0, 12))) for _ in range(gen.integers(1, 4))]
        got = _sums(_corpus(docs, 9, [5] * len(docs)), params)
        expected = np.zeros_like(got)
        for (i, j), q in _reference_term(docs, 9, params).items():
            expected[kernel.pair_index(i, j, 9)] = q
        assert np.array_equal(got, expected)
        assert int(np.sum(got.astype(object) ** 2)) <= dp_vi.unit_bound(params.clip) ** 2


def test_the_statistic_is_the_same_on_one_thread_and_on_ranges_of_units():
    """``clipped_biterms`` counts consecutive ranges of units, one per usable core, into
    vectors of their own and adds them: the same integers as one pass over every unit,
    whether one thread counts one range or every core counts its own (the kernel is
    watched, and still runs, to see the ranges)."""

    gen = np.random.default_rng(3)
    docs = [list(gen.integers(0, 40, gen.integers(0, 14))) for _ in range(3 * 4096 + 17)]
    authors = list(gen.integers(0, 9000, len(docs)))
    corpus = _corpus(docs, 40, authors)
    params = _params(window=5, clip=1.5, adjacency=Adjacency.AUTHOR)
    whole = _sums(corpus, params)
    assert whole.any()
    ranges: list[tuple[int, int]] = []
    counted = biterm.kernel.clipped_pair_sums

    def watched(unit_ptr, *rest):
        ranges.append((int(unit_ptr[0]), int(unit_ptr[-1])))
        counted(unit_ptr, *rest)

    unit_ptr, _ = dp_vi.unit_layout(corpus, params.adjacency)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(biterm.kernel, "clipped_pair_sums", watched)
        patch.setattr(biterm, "_UNITS_PER_RANGE", 1)
        for threads in (1, workers()):
            ranges.clear()
            with threads_at_most(threads):
                assert np.array_equal(biterm.clipped_biterms(corpus, params), whole)
            assert len(ranges) == min(threads, biterm._MAX_RANGES)
            starts, stops = zip(*sorted(ranges), strict=True)  # consecutive, every unit once
            assert starts[0] == 0 and stops[-1] == unit_ptr[-1]
            assert list(starts[1:]) == list(stops[:-1])


def test_adding_an_author_moves_the_sum_by_that_authors_term_alone():
    """The sensitivity argument: neighbours differ by exactly one clipped term (L2 at most
    floor(C / g) grid units), and the sum does not depend on the units' order."""
    params = _params(adjacency=Adjacency.AUTHOR)
    gen = np.random.default_rng(1)
    docs = [list(gen.integers(0, 12, gen.integers(2, 30))) for _ in range(60)]
    authors = list(gen.integers(0, 15, 60))
    without = _sums(_corpus(docs, 12, authors), params)
    added = docs + [list(gen.integers(0, 12, 40)) for _ in range(7)]
    with_author = _sums(_corpus(added, 12, authors + [99] * 7), params)
    term = _sums(_corpus(added[60:], 12, [99] * 7), params)
    assert np.array_equal(with_author - without, term)
    assert int(np.sum(term.astype(object) ** 2)) <= dp_vi.unit_bound(params.clip) ** 2
    order = gen.permutation(60)
    shuffled = _sums(_corpus([docs[i] for i in order], 12, [authors[i] for i in order]), params)
    assert np.array_equal(shuffled, without)


@pytest.mark.parametrize("epsilon", [0.5, 1.5, 3.0])
def test_the_noise_multiplier_meets_epsilon_and_is_nearly_the_exact_gaussians(epsilon):
    """One Gaussian step. Default RDP (zCDP, proved for the discrete Gaussian): its epsilon
    at z is at most the target, and so is the continuous Gaussian's exact (analytic)
    epsilon, which RDP's conversion overstates by 5-15%. PLD (the continuous curve, an
    option): at most the target and within 2% of the analytic epsilon (its pessimistic
    discretisation), with less noise than RDP."""
    rdp, pld = _params(epsilon), _params(epsilon, accountant="pld")
    assert rdp.accountant == "rdp" and rdp.event() == {
        "type": "gaussian",
        "noise_multiplier": rdp.noise_multiplier,
    }
    for params in (rdp, pld):
        assert params.accountant_epsilon <= epsilon and params.basic_epsilon <= epsilon
    assert 0.85 * epsilon <= rdp.basic_epsilon <= 0.95 * epsilon
    assert epsilon * 0.98 <= pld.basic_epsilon
    assert pld.noise_multiplier < rdp.noise_multiplier


@pytest.mark.parametrize("seed", [None, 3])
def test_the_noise_on_every_pair_has_the_stated_sd(seed):
    """Pure noise (a corpus without a pair): B~ has mean 0 and sd z C, seeded (numpy) and
    unseeded (the exact discrete Gaussian). n = P entries: the sample mean is within 5
    standard errors of 0 and the sample variance within 5 of its sd sqrt(2 / (n - 1))."""
    params = _params(1.0, clip=0.37)  # C != 1: the noise must scale with it
    empty = _corpus([[3]], 60)
    noisy = biterm.noisy_biterms(empty, params, NoiseSource.create(seed))
    n, s = noisy.size, params.noise_std
    assert abs(noisy.mean()) < 5 * s / math.sqrt(n)
    assert abs(noisy.var(ddof=1) / s**2 - 1) < 5 * math.sqrt(2 / (n - 1))


def test_no_word_of_pure_noise_biterm_releases_is_listed():
    """No pair of private data anywhere: at most MOST_FALSE of 100 releases list any word
    (the Bonferroni cut-off over all P pairs at alpha 1%), though EM fits topics to the
    noise the threshold keeps."""
    params = _params(3.0, n_topics=5, restarts=1, em_iterations=50)
    words = [f"w{i}" for i in range(100)]
    listing = 0
    for seed in range(RELEASES):
        released: dict = {}
        phi = biterm.train_biterm(
            _corpus([[1]], 100), 5, params, NoiseSource.create(seed), released=released
        )
        assert phi.shape == (5, 100) and np.allclose(phi.sum(axis=1), 1.0)
        test = biterm.entry_noise(params, released)
        assert test.entries == biterm.pair_positions(100) and test.scale == params.noise_std
        _, silent = significance.listed(phi, words, test)
        listing += not all(silent)
    assert listing <= MOST_FALSE


def test_planted_topics_are_found_and_listed():
    """Two planted topics of 5 words over 400 documents of 20 tokens, epsilon 3: each topic
    lists exactly its planted words (seed 0)."""
    gen = np.random.default_rng(0)
    planted = [np.arange(5), np.arange(5, 10)]
    docs = [list(gen.choice(planted[d % 2], 20)) for d in range(400)]
    params = _params(3.0)
    released: dict = {}
    phi = biterm.train_biterm(
        _corpus(docs, 200), 2, params, NoiseSource.create(0), released=released
    )
    lists, silent = significance.listed(
        phi, [f"w{i}" for i in range(200)], biterm.entry_noise(params, released)
    )
    assert not any(silent)
    found = sorted(sorted(int(w[1:]) for w, _ in topic) for topic in lists)
    assert found == [list(range(5)), list(range(5, 10))]


def test_the_evidence_is_the_strongest_significant_pair_per_topic_and_word():
    """Hand-built noisy pairs over 4 words and a hand-built fit: exactly the pairs above the
    cut-off at alpha 1/2 enter, each credited to both its words in its most responsible
    topic, the largest value kept per (topic, word), and pairs the background owns are
    dropped."""
    params = _params(n_topics=2)
    n = 4
    noisy = np.zeros(biterm.pair_positions(n))
    cut = PairEvidence(params.noise_std, len(noisy), (), (), ()).cutoff(biterm.EVIDENCE_ALPHA)
    at = {(i, j): kernel.pair_index(i, j, n) for i in range(n) for j in range(i, n)}
    noisy[at[0, 1]] = cut * 3  # topic 0's pair
    noisy[at[0, 0]] = cut * 2  # topic 0 again: word 0 keeps the larger value
    noisy[at[2, 3]] = cut * 1.5  # topic 1's pair
    noisy[at[1, 2]] = cut * 0.99  # below the cut-off: not kept
    noisy[at[3, 3]] = cut * 5  # the background owns it
    # topic 1 barely holds word 3: the background (weight 1e-6 over 10 pairs) owns (3, 3)
    # but not (2, 3), which topic 1 explains five times better
    phi = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1 - 1e-6, 1e-6]])
    fit = biterm.BitermFit(phi, np.array([0.5, 0.5]), 1e-6, 0.0)
    owners = np.argmax(fit.responsibilities(np.array([2, 3]), np.array([3, 3])), axis=0)
    assert owners.tolist() == [1, 2]  # (2, 3) to topic 1, (3, 3) to the background
    got = biterm.evidence(noisy, fit, params, n)
    found = {(z, w): v for z, w, v in zip(got.topic, got.word, got.value, strict=True)}
    assert found == {(0, 0): cut * 3, (0, 1): cut * 3, (1, 2): cut * 1.5, (1, 3): cut * 1.5}
    assert got.entries == len(noisy) and got.covers == biterm.EVIDENCE_ALPHA


def test_pair_evidence_applies_any_alpha_up_to_a_half():
    test = PairEvidence(2.0, 1000, (0, 0, 1), (3, 4, 5), (20.0, 9.0, 12.0))
    strict, loose = test.mask((2, 6), 0.001), test.mask((2, 6), 0.5)
    assert np.all(loose[strict]) and strict.sum() < loose.sum()
    assert test.cutoff(0.01) == pytest.approx(
        2.0 * significance.SLACK * math.sqrt(2 * math.log(1000 / 0.01))
    )
    with pytest.raises(ValueError, match=r"0\.5"):
        test.mask((2, 6), 0.6)
    assert PairEvidence.from_dict(test.to_dict()) == test


def test_a_vocabulary_with_too_many_pairs_is_refused_before_reading():
    from fdptm.errors import BadInputError

    with pytest.raises(BadInputError, match="smaller vocabulary"):
        biterm.check_vocabulary(_params(), 4000)
    biterm.check_vocabulary(_params(), 3000)


def test_a_biterm_release_states_its_test_once_and_lists_by_it(small, prefect_harness):
    """A real seeded release: the manifest's ``presentation`` carries the pair evidence (and
    ``released_parameters`` does not repeat it), every topic is tested, and
    ``Release.top_words`` lists what the manifest does: the two word groups of ``small``."""
    from fdptm import load_release
    from fdptm.cli import main
    from fdptm.storage.catalog import Catalog

    args = ["release", "--dataset", "small", "--delta", "1e-5", "--topics", "2", "--seed", "1"]
    args += ["--workspace", str(small.root), "--epsilon", "8", "--mechanism", "biterm"]
    words = small.root / "words.txt"
    groups = [["apple", "banana", "cherry", "grape"], ["durian", "elderberry", "fig", "lemon"]]
    words.write_text("\n".join(groups[0] + groups[1]))
    args += ["--vocabulary", str(words), "--m1", "none"]
    assert main(args) == 0
    (run,) = Catalog(small).query("SELECT run_id FROM runs WHERE kind = 'release'")
    release = load_release(small.root / "releases" / run["run_id"])
    block = release.manifest["presentation"]
    assert block["alpha"] == DEFAULT_ALPHA and "evidence" in block
    train = next(s for s in release.manifest["stages"] if s["stage"] == "train")
    assert train["mechanism"] == "biterm" and "evidence" not in train["released_parameters"]
    assert release.guarantee["adjacency"] == "document"
    assert all(t["tested"] for t in release.manifest["topics"])
    shown = [[w["word"] for w in t["words"]] for t in release.manifest["topics"]]
    assert shown == [[w for w, _ in topic] for topic in release.top_words()]
    groups = sorted(sorted(words) for words in shown)
    assert groups == [
        ["apple", "banana", "cherry", "grape"],
        ["durian", "elderberry", "fig", "lemon"],
    ]


def test_an_author_level_biterm_release_with_a_public_prior(tmp_path, prefect_harness):
    """Author ids read: the release is author level; a public prior (another dataset,
    ``--prior``) leaves the pair test in force (every topic tested) and is named in the
    manifest."""
    from fdptm import load_release
    from fdptm.cli import main
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    workspace = Workspace.resolve(tmp_path / "ws")
    groups = ["apple banana cherry grape", "durian elderberry fig lemon"]
    private = ["doc_id,text,author_id"]
    private += [f"d{i},{groups[i % 2]},a{i % 30}" for i in range(120)]
    (tmp_path / "priv.csv").write_text("\n".join(private) + "\n")
    public = ["doc_id,text"] + [f"p{i},{groups[i % 2]}" for i in range(20)]
    (tmp_path / "pub.csv").write_text("\n".join(public) + "\n")
    ingest(tmp_path / "pub.csv", "pub", workspace, public=True)
    ingest(tmp_path / "priv.csv", "priv", workspace)
    args = ["release", "--dataset", "priv", "--delta", "1e-5", "--topics", "2", "--seed", "2"]
    args += ["--workspace", str(workspace.root), "--epsilon", "8", "--prior", "pub"]
    args += ["--vocabulary", "public:pub"]
    assert main(args) == 0
    (run,) = Catalog(workspace).query("SELECT run_id FROM runs WHERE kind = 'release'")
    release = load_release(workspace.root / "releases" / run["run_id"])
    assert release.guarantee["adjacency"] == "author"
    train = next(s for s in release.manifest["stages"] if s["stage"] == "train")
    assert train["mechanism"] == "biterm" and train["public_prior"]
    assert all(t["tested"] for t in release.manifest["topics"])
    assert not all(release.no_signal())


def test_tune_without_a_mechanism_runs_dp_vi_and_biterm_has_no_tuned_form():
    """biterm is the default, but only dp-vi has a tuned form: --tune alone runs dp-vi, and
    --tune with biterm is refused with a message that names the way out."""
    from pydantic import ValidationError

    from fdptm.mechanisms.registry import DEFAULT_MECHANISM
    from fdptm.request import ReleaseRequest

    base = {"dataset": "d", "epsilon": 3.0, "delta": 1e-5, "topics": 5}
    assert DEFAULT_MECHANISM == "biterm"
    assert ReleaseRequest(**base).mechanism == "biterm"
    assert ReleaseRequest(**base, tune=True).mechanism == "dp-vi"
    with pytest.raises(ValidationError, match="--tune selects hyper-parameters of dp-vi"):
        ReleaseRequest(**base, tune=True, mechanism="biterm")


def test_the_parameters_say_when_the_accounting_assumes_the_continuous_gaussian():
    """RDP at sampling rate 1 is proved for the discrete Gaussian (zCDP); PLD and the
    Poisson-subsampled bound are derived for the continuous one, and the manifest's M2
    parameters say so (issue 29's review, item 5)."""
    assert _params().to_dict()["accounting_assumes"] is None
    assert "PLD" in _params(accountant="pld").to_dict()["accounting_assumes"]
    common = {"n_topics": 3, "adjacency": Adjacency.DOCUMENT, "max_docs_per_author": 1}
    plain = dp_vi.dp_vi_params(3.0, 1e-5, iterations=5, **common)
    assert plain.to_dict()["accounting_assumes"] is None
    sampled = dp_vi.dp_vi_params(3.0, 1e-5, iterations=5, sampling_rate=0.5, **common)
    assert "Poisson-subsampled (q = 0.5)" in sampled.to_dict()["accounting_assumes"]


def _reference_em(rows, cols, weights, n_words, params, generator, public_topics=None):
    """The EM as written before it was compiled (numpy over all pairs at once, restarts one
    after another): the reference the fused kernel must reproduce."""
    k, positions = params.n_topics, biterm.pair_positions(n_words)
    best = None
    for restart in range(params.restarts):
        if restart == 0 and public_topics is not None:
            phi = public_topics + params.eta
            phi = phi / phi.sum(axis=1, keepdims=True)
        elif restart == 0:
            phi = biterm.spread_start(rows, cols, weights, n_words, k, params.eta)
        else:
            phi = generator.dirichlet(np.ones(n_words), k)
        theta, background = np.full(k, 1.0 / (k + 1)), 1.0 / (k + 1)
        previous = objective = -math.inf
        for _ in range(params.em_iterations):
            joint = theta[:, None] * phi[:, rows] * phi[:, cols]
            total = joint.sum(axis=0) + background / positions
            objective = float(weights @ np.log(total)) if len(weights) else 0.0
            if objective - previous <= params.tolerance * abs(objective):
                break
            previous = objective
            scaled = joint * (weights / total)
            counts = np.full((k, n_words), params.eta)
            if public_topics is not None:
                counts += params.prior_weight * public_topics
            for z in range(k):
                counts[z] += np.bincount(rows, scaled[z], n_words)
                counts[z] += np.bincount(cols, scaled[z], n_words)
            phi = counts / counts.sum(axis=1, keepdims=True)
            mass = scaled.sum(axis=1)
            rest = float(weights @ ((background / positions) / total)) if len(weights) else 1.0
            whole = mass.sum() + rest
            theta, background = mass / whole, rest / whole
        if best is None or objective > best[3]:
            best = (phi, theta, background, objective)
    return best


def test_em_passes_divide_the_cores_among_the_unfinished_starts(monkeypatch):
    """A pass takes the cores the unfinished starts leave (one each while they outnumber
    the cores, all of them for the last), the cores being ``workers()`` where the fit was
    asked for: an audit's ``threads_at_most(1)`` holds for every pass, and no pool is made."""
    passes = biterm._Passes(10**6, 5, 4)
    seen = [passes.threads()]
    for _ in range(4):
        passes.finish()
        seen.append(passes.threads())
    passes.__exit__(None, None, None)
    assert seen == [1, 1, 1, 2, 4]
    made: list[biterm._Passes] = []

    class Watched(biterm._Passes):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(biterm, "_Passes", Watched)
    monkeypatch.setattr(biterm, "_PAIRS_PER_CHUNK", 500)
    rng = np.random.default_rng(4)
    rows, cols = np.sort(rng.integers(0, 30, (2, 2000)), axis=0)
    params = biterm.biterm_params(
        2.0,
        1e-6,
        n_topics=3,
        adjacency=Adjacency.DOCUMENT,
        max_docs_per_author=1,
        em_iterations=3,
    )
    weights = rng.exponential(1.0, 2000)
    with threads_at_most(1):
        biterm.fit_biterms(rows, cols, weights, 30, params, np.random.default_rng(1))
    biterm.fit_biterms(rows, cols, weights, 30, params, np.random.default_rng(1))
    assert [(p.cores, p._pool is None) for p in made] == [(1, True), (workers(), workers() == 1)]


def test_an_em_pass_is_the_same_bits_on_any_number_of_threads(monkeypatch):
    """The ranges depend on the number of pairs only and are added in range order, so one
    pass on 1, 2, 3 or 8 threads gives the same counts, mass, objective and background
    mass to the last bit (rows unsorted: the kernel's gathering is correct in any order)."""
    monkeypatch.setattr(biterm, "_PAIRS_PER_CHUNK", 300)
    rng = np.random.default_rng(6)
    n_words, k = 40, 5
    rows, cols = np.sort(rng.integers(0, n_words, (2, 3000)), axis=0)
    weights = rng.exponential(1.0, 3000)
    phi_t = np.ascontiguousarray(rng.dirichlet(np.ones(n_words), k).T)
    theta = rng.dirichlet(np.ones(k))
    out = []
    for cores in (1, 2, 3, 8):
        counts, mass = np.full((n_words, k), 0.01), np.zeros(k)
        with biterm._Passes(len(rows), 1, cores) as passes:
            sums = passes.step(rows, cols, weights, phi_t, theta, 1e-4, counts, mass)
        out.append((counts, mass, sums))
    assert len(passes.edges) - 1 == biterm._EM_CHUNKS
    for counts, mass, sums in out[1:]:
        assert np.array_equal(counts, out[0][0]) and np.array_equal(mass, out[0][1])
        assert sums == out[0][2]


@pytest.mark.parametrize(
    ("n_pairs", "prior", "per_chunk"),
    [(3000, False, None), (3000, True, None), (0, False, None), (3000, False, 256)],
)
def test_the_compiled_em_is_the_numpy_em(n_pairs, prior, per_chunk, monkeypatch):
    """The fused EM pass and the restarts on threads give the fit the numpy EM gives (to
    rounding: the objective is summed in another order), leave the generator where it
    left it, and give the same bits on 1 and 2 threads; also with each pass split into
    ranges of pairs (``per_chunk`` pairs at least: 8 ranges here)."""
    if per_chunk is not None:
        monkeypatch.setattr(biterm, "_PAIRS_PER_CHUNK", per_chunk)
        assert biterm._em_chunks(n_pairs) == biterm._EM_CHUNKS
    rng = np.random.default_rng(8)
    n_words = 60
    rows, cols = np.sort(rng.integers(0, n_words, (2, n_pairs)), axis=0)
    weights = rng.exponential(1.0, n_pairs)
    params = biterm.biterm_params(
        2.0, 1e-6, n_topics=4, adjacency=Adjacency.DOCUMENT, max_docs_per_author=1
    )
    public = rng.gamma(1.0, 1.0, (4, n_words)) if prior else None
    reference_generator = np.random.default_rng(3)
    phi, theta, background, objective = _reference_em(
        rows, cols, weights, n_words, params, reference_generator, public
    )
    fits = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("FDPTM_THREADS", threads)
        generator = np.random.default_rng(3)
        fits[threads] = biterm.fit_biterms(
            rows, cols, weights, n_words, params, generator, public_topics=public
        )
        assert generator.bit_generator.state == reference_generator.bit_generator.state
    fit = fits["1"]
    np.testing.assert_allclose(fit.phi, phi, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(fit.theta, theta, rtol=1e-9, atol=1e-15)
    assert fit.background == pytest.approx(background, rel=1e-9)
    assert fit.objective == pytest.approx(objective, rel=1e-12, abs=1e-12)
    np.testing.assert_array_equal(fits["2"].phi, fit.phi)
    assert fits["2"].objective == fit.objective
