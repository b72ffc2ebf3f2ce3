"""Local DP, device and estimators (hdp-lda-lp-lda-olp-lda.txt sections V-VI): the flip
probabilities, Theorem 4's epsilons, eq. 8/9 and eq. 19/Theorem 7 by simulation, the
reconstruction, report checks, and the client's import footprint. Statistical checks use
fixed seeds and tolerances from the binomial (or chi-square) distribution."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from fdptm.errors import BadInputError
from fdptm.kernels.reconstruct import column_counts, reconstruct
from fdptm.local import Flip, KeyStream, LocalVocabulary, randomize
from fdptm.local.flip import ONE
from fdptm.local.randomizer import _flip_rows, as_bytes, encode, flip_bits
from fdptm.local.reports import check, table
from fdptm.mechanisms.local_dp import (
    bayes_estimate,
    bayes_weight_from_variance,
    exact_variance,
    moment_estimate,
    moment_variance,
    prior_variance,
    targets,
)

Z = 5.0  # two-sided tolerance in standard deviations: a false alarm below 1e-6 per check


def _vocabulary(n: int) -> LocalVocabulary:
    return LocalVocabulary(tuple(f"w{i:05d}" for i in range(n)), "test list")


def _true_bits(n_docs: int, n_words: int, seed: int) -> np.ndarray:
    """Packed (uint8, little bit order) random documents, word t present w.p. ~ t / 2V."""
    rng = np.random.default_rng(seed)
    dense = rng.random((n_docs, n_words)) < np.linspace(0.01, 0.5, n_words)
    return np.packbits(dense, axis=1, bitorder="little")


def _randomised(true: np.ndarray, n_words: int, flip: Flip, seed: int) -> np.ndarray:
    bits = np.zeros((true.shape[0], (n_words + 63) // 64), dtype=np.uint64)
    bits.view(np.uint8)[:, : true.shape[1]] = true
    flip_bits(bits, n_words, flip, KeyStream(seed))
    return np.ascontiguousarray(as_bytes(bits, n_words))


def _unpack(packed: np.ndarray, n_words: int) -> np.ndarray:
    return np.unpackbits(packed, axis=1, bitorder="little")[:, :n_words].astype(bool)


def test_theorem_4_epsilons_of_the_realised_flip():
    flip = Flip.from_f(0.25)
    q = flip.numerator / ONE
    assert flip.f == 2 * q and abs(flip.f - 0.25) <= 2 / ONE
    assert flip.word_epsilon == pytest.approx(math.log((1 - q) / q), rel=1e-15)
    assert flip.document_epsilon(1000) == pytest.approx(1000 * flip.word_epsilon, rel=1e-15)
    g = flip.to_dict(1000)
    assert list(g)[:3] == ["document_epsilon", "word_epsilon", "token_replacement_epsilon"]
    assert flip.word_epsilon >= math.log((1 - q) / q)  # stated figures bound the exact ones
    assert g["token_replacement_epsilon"] >= 2 * flip.word_epsilon
    assert Flip.from_word_epsilon(3.0).word_epsilon == pytest.approx(3.0, abs=1e-5)
    for bad in (0.0, 1.0, -0.1, 1.5, float("nan"), True):
        with pytest.raises(BadInputError):
            Flip.from_f(bad)


@pytest.mark.parametrize("f", [0.05, 0.538, 0.9])
def test_flip_probabilities_match_f_over_2(f):
    """P(report bit = 1 | bit = 1) = 1 - f/2 and P(1 | 0) = f/2, per bit position too."""
    flip = Flip.from_f(f)
    n_docs, n_words = 4000, 130  # 130: a last word with spare bits
    true = _true_bits(n_docs, n_words, seed=1)
    out = _unpack(_randomised(true, n_words, flip, seed=2), n_words)
    inp = _unpack(true, n_words)
    q = flip.half
    for given, p in ((True, 1 - q), (False, q)):
        n = int((inp == given).sum())
        ones = int(out[inp == given].sum())
        assert abs(ones - n * p) <= Z * math.sqrt(n * p * (1 - p))
    flipped = (out != inp).sum(axis=0)  # each position flips w.p. q, independently of the others
    assert np.all(np.abs(flipped - n_docs * q) <= Z * math.sqrt(n_docs * q * (1 - q)))
    assert stats.chisquare(flipped).pvalue > 1e-6


def test_spare_bits_stay_zero_and_the_sampler_is_exact_at_few_bits():
    """Bits beyond V are never set; with 3 bits the sampler draws exactly 3/8 and 5/8."""
    flip = Flip.from_f(0.5)
    out = _randomised(np.zeros((500, 9), np.uint8), 70, flip, seed=3)
    assert out.shape == (500, 9) and not np.any(out[:, -1] & 0b11000000)
    for numerator in (3, 5):
        bits = np.zeros((20_000, 1), dtype=np.uint64)
        stream = KeyStream(4).fill(np.empty(1 << 20, dtype=np.uint64))
        assert _flip_rows(bits, numerator, 3, ~np.uint64(0), stream, 0) == 20_000
        n, ones = 64 * 20_000, int(np.unpackbits(bits.view(np.uint8)).sum())
        p = numerator / 8
        assert abs(ones - n * p) <= Z * math.sqrt(n * p * (1 - p))


def test_encode_sets_one_bit_per_distinct_vocabulary_word():
    vocab = LocalVocabulary(("alpha", "beta", "gamma"), "test")
    tokens = pa.array([["beta", "beta", "zeta"], [], ["gamma", "alpha"]], pa.list_(pa.string()))
    bits = encode(tokens, vocab)
    assert bits[:, 0].tolist() == [0b010, 0, 0b101]


def test_eq_8_unbiased_and_its_variance_by_simulation():
    """Given the documents, N_hat's mean is N and its variance M (f/2)(1-f/2)/(1-f)^2: eq. 9's
    first term. Eq. 9's second term, (M - N) N / M, is the documents' own sampling variance
    (zero here, documents fixed), so eq. 9 as printed bounds the measured variance."""
    n_docs, n_words, runs = 400, 12, 400
    flip = Flip.from_f(0.3)
    true = _true_bits(n_docs, n_words, seed=5)
    truth = _unpack(true, n_words).sum(axis=0)
    counts = [column_counts(_randomised(true, n_words, flip, s), n_words) for s in range(runs)]
    est = np.array([moment_estimate(c, n_docs, flip) for c in counts])
    var = exact_variance(n_docs, flip)
    assert np.all(np.abs(est.mean(axis=0) - truth) <= Z * math.sqrt(var / runs))
    lo, hi = stats.chi2.ppf([1e-7, 1 - 1e-7], runs - 1) / (runs - 1)
    ratio = est.var(axis=0, ddof=1) / var
    assert np.all((ratio > lo) & (ratio < hi))
    assert np.all(est.var(axis=0, ddof=1) <= moment_variance(truth, n_docs, flip) * hi)


def test_eq_19_and_theorem_7_variance_reduction():
    """B = omega mu + (1 - omega) N_hat; over the same randomisations its variance is
    (1 - omega)^2 that of N_hat (Theorem 7), and Theorem 6's omega inverts prior_variance."""
    n_docs, n_words, runs = 300, 10, 300
    flip = Flip.from_f(0.4)
    true = _true_bits(n_docs, n_words, seed=6)
    prior = np.full(n_words, 50.0)
    counts = [column_counts(_randomised(true, n_words, flip, s), n_words) for s in range(runs)]
    moment = np.array([moment_estimate(c, n_docs, flip) for c in counts])
    for omega in (0.25, 0.5, 0.75):
        bayes = np.array([bayes_estimate(c, n_docs, flip, prior, omega) for c in counts])
        np.testing.assert_allclose(bayes, omega * prior + (1 - omega) * moment, rtol=1e-12)
        np.testing.assert_allclose(
            bayes.var(axis=0), (1 - omega) ** 2 * moment.var(axis=0), rtol=1e-9
        )
        sigma2 = prior_variance(n_docs, flip, omega)
        assert bayes_weight_from_variance(n_docs, flip, sigma2) == pytest.approx(omega)
    with pytest.raises(BadInputError):
        bayes_estimate(counts[0], n_docs, flip, prior, 1.0)


@pytest.mark.parametrize("block", [1 << 16, 257])
def test_reconstruction_hits_every_target_with_uniform_choices(block):
    """One block, and 12 blocks whose shares of each column are hypergeometric draws."""
    n_docs, n_words = 3000, 40
    reports = _true_bits(n_docs, n_words, seed=7)
    counts = column_counts(reports, n_words)
    dense = _unpack(reports, n_words)
    assert counts.tolist() == dense.sum(axis=0).tolist()
    want = counts.copy()
    want[::2] = counts[::2] // 3  # shrink even columns, grow odd ones
    want[1::2] = np.minimum(counts[1::2] + 200, n_docs)
    kept = np.zeros((n_docs, n_words), dtype=int)
    runs = 40
    for seed in range(runs):
        doc_ptr, words = reconstruct(reports, want, seed, block=block)
        assert np.bincount(words, minlength=n_words).tolist() == want.tolist()
        rows = np.repeat(np.arange(n_docs), np.diff(doc_ptr))
        got = np.zeros((n_docs, n_words), dtype=bool)
        got[rows, words] = True
        assert got.sum() == len(words)  # no word twice in a document
        shrink, grow = np.arange(0, n_words, 2), np.arange(1, n_words, 2)
        assert not np.any(got[:, shrink] & ~dense[:, shrink])  # only ones were removed
        assert np.all(got[:, grow][dense[:, grow]])  # grown columns keep every one
        kept += got
    for t in range(0, n_words, 2):  # each one kept w.p. want/count, whichever it is
        p = want[t] / counts[t]
        freq = kept[dense[:, t], t]
        assert np.all(np.abs(freq - runs * p) <= Z * math.sqrt(runs * p * (1 - p)) + 1e-9)
    assert targets(np.array([-3.4, 2.5, 3.5, 1e9]), 100).tolist() == [0, 2, 4, 100]


def test_counts_and_reconstruction_do_not_depend_on_the_thread_count():
    import numba

    from fdptm.kernels.reconstruct import block_counts

    reports = _true_bits(5000, 70, seed=11)
    want = column_counts(reports, 70) // 2 + 40
    results = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        try:
            results.append(
                (block_counts(reports, 70, 300), reconstruct(reports, want, 3, None, 300))
            )
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    (c1, (p1, w1)), (c2, (p2, w2)) = results
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(w1, w2)


def test_a_report_with_another_vocabulary_or_f_is_refused_with_its_reason():
    vocab, flip = _vocabulary(20), Flip.from_f(0.2)
    other = _vocabulary(21)
    good = randomize(["w00001 w00003"] * 3, vocab, flip, KeyStream(1))
    mixed = pa.concat_tables(
        [
            table(good, vocab, flip),
            table(good[:1], vocab, Flip.from_f(0.3)),
            table(randomize(["w00001"], other, flip, KeyStream(2)), other, flip).cast(
                table(good, vocab, flip).schema
            ),
        ]
    )
    bad_bits = good[:1].copy()
    bad_bits[0, -1] |= 0b10000000  # bit 23 of a 20-word vocabulary
    mixed = pa.concat_tables([mixed, table(bad_bits, vocab, flip)])
    checked = check(mixed, vocab, flip, "reports.parquet")
    assert checked.rows.tolist() == [0, 1, 2]
    assert set(checked.reasons) == {3, 4, 5}
    assert "not the declared 0.2" in checked.reasons[3]
    assert "not the declared " + vocab.fingerprint in checked.reasons[4]
    assert "beyond the vocabulary's 20 words" in checked.reasons[5]
    np.testing.assert_array_equal(checked.reports, good)
    with pytest.raises(BadInputError, match="not a report file"):
        check(mixed.drop_columns(["flip"]), vocab, flip, "reports.parquet")
    seeded = table(good, vocab, flip, seeded=True)
    with pytest.raises(BadInputError, match="seeded keystream"):
        check(seeded, vocab, flip, "reports.parquet")
    assert len(check(seeded, vocab, flip, "reports.parquet", allow_seeded=True).rows) == 3
    with pytest.raises(BadInputError, match="not written by this randomiser"):
        check(seeded.replace_schema_metadata({}), vocab, flip, "reports.parquet")
    named = table(good[:1], vocab, flip).set_column(
        1, "vocabulary", pa.array(["<b>some text</b>"], pa.string())
    )
    assert "(not a fingerprint)" in check(named, vocab, flip, "r").reasons[0]


def test_a_vocabulary_must_be_a_public_vocabulary_document(tmp_path):
    plain = tmp_path / "words.txt"
    plain.write_text("apple\nbanana\n")
    with pytest.raises(BadInputError, match="fdptm local vocabulary"):
        LocalVocabulary.load(plain)
    saved = _vocabulary(5).save(tmp_path / "v.json")
    assert LocalVocabulary.load(saved).fingerprint == _vocabulary(5).fingerprint
    saved.write_text(saved.read_text().replace("w00004", "w00009"))
    with pytest.raises(BadInputError, match="fingerprint"):
        LocalVocabulary.load(saved)


def test_the_client_imports_without_the_servers_dependencies(tmp_path):
    """fdptm.local (PRE, encoding, randomised response, report files) runs with Prefect,
    DuckDB, Dask and the server's packages made unimportable."""
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        top = name.split('.')[0]
        if top in ('prefect', 'duckdb', 'dask', 'distributed', 'great_expectations') or \\
                name.startswith(('fdptm.storage', 'fdptm.tasks', 'fdptm.flows', 'fdptm.cli')):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
from fdptm.local import Flip, LocalVocabulary, randomize, write_reports
vocab = LocalVocabulary(('children', 'mouse', 'study'), 'test')
reports = randomize(["Children's mice were studied"], vocab, Flip.from_f(0.01))
write_reports({str(tmp_path / "r.parquet")!r}, reports, vocab, Flip.from_f(0.01))
print(reports.shape)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(1, 1)"


def test_empirical_bayes_omega_is_theorem_6s_for_the_estimated_prior_variance():
    """By default OLP-LDA's omega is Theorem 6's for sigma^2 = the mean squared distance of
    the prior from the truth, estimated from the reports (unbiased: tolerance from the
    variance of a mean of squared normal errors)."""
    from fdptm.mechanisms.local_dp import (
        OnlineState,
        empirical_prior_variance,
        online_estimate,
    )

    n_docs, n_words, runs = 2000, 200, 30
    flip = Flip.from_f(0.1)
    true = _true_bits(n_docs, n_words, seed=8)
    truth = column_counts(true, n_words).astype(float)
    prior = truth + np.random.default_rng(9).choice([-30.0, 30.0], n_words)
    state = OnlineState(np.ones((n_words, 2)), prior, prior, n_docs, 1)
    found = []
    for s in range(runs):
        counts = column_counts(_randomised(true, n_words, flip, 100 + s), n_words)
        moment = moment_estimate(counts, n_docs, flip)
        sigma2 = empirical_prior_variance(moment, prior, n_docs, flip)
        est = online_estimate(state, counts, n_docs, flip, None)
        assert est.sigma2 == sigma2
        assert est.omega == pytest.approx(bayes_weight_from_variance(n_docs, flip, sigma2))
        np.testing.assert_allclose(est.bayes, est.omega * prior + (1 - est.omega) * moment)
        found.append(sigma2)
    v = exact_variance(n_docs, flip)
    sd = math.sqrt((2 * v**2 + 4 * 900 * v) / n_words)  # of one estimate
    assert abs(np.mean(found) - 900) <= Z * sd / math.sqrt(runs)


def test_the_word_epsilon_is_never_below_the_exact_log_ratio():
    """Issue 29's review: the float quotient and libm's log put the stated per-word epsilon
    below the exact one for some f near 1 (a ratio near 1). Every numerator near the top of
    the range, and a spread of others: the stated value is at least log((2^24 - n) / n)
    computed to 120 digits, and within 2 ulps of it."""
    from decimal import Context, Decimal

    from fdptm.local.flip import ONE, Flip

    exact = Context(prec=120)
    numerators = list(range(ONE // 2 - 3000, ONE // 2)) + list(range(1, ONE // 2, 9973))
    for n in numerators:
        stated = Flip(n).word_epsilon
        truth = exact.divide(Decimal(ONE - n), Decimal(n)).ln(exact)
        assert Decimal(stated) >= truth, n
        assert stated <= math.nextafter(math.nextafter(float(truth), math.inf), math.inf), n
