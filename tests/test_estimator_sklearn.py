"""fdptm.DPTopicModel as a scikit-learn estimator: scikit-learn's own check suite, clone and
parameters, transform as post-processing of components_, a CountVectorizer pipeline on a
real corpus (gensim's Lee corpus), and the module without scikit-learn installed."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from functools import partial

import numpy as np
import pytest
from scipy import sparse

pytest.importorskip("sklearn", minversion="1.6")

from sklearn.base import clone
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import estimator_checks_generator

import fdptm
from fdptm.errors import BadInputError
from fdptm.estimator import DPTopicModel, DPTopicModelInputError
from fdptm.privacy.adjacency import Adjacency

# Small and seeded: scikit-learn's checks fit dozens of times (a seed makes a run a test,
# NOT DP; the checks need it for their idempotency and invariance checks anyway).
CHECKED = DPTopicModel(
    n_components=2, epsilon=5.0, delta=1e-5, iterations=2, max_doc_update_iter=20, random_state=0
)

FRACTIONS = (
    "fits on fractional floats; fit takes integer counts only (its sensitivity's unit) and "
    "no tag says so; test_what_the_float_fed_checks_check_holds_on_counts tests it on counts"
)
# Every check here fails only because fit refuses the fractions it is fed: the test below
# verifies that cause (a DPTopicModelInputError about fractional values) for each, and the
# marks are strict, so a check that starts passing must be taken off the list.
EXPECTED_FAILURES = dict.fromkeys(
    [
        "check_fit_score_takes_y",
        "check_estimators_overwrite_params",
        "check_dont_overwrite_parameters",
        "check_estimators_fit_returns_self",
        "check_readonly_memmap_input",
        "check_n_features_in_after_fitting",
        "check_estimators_dtypes",
        "check_dtype_object",
        "check_pipeline_consistency",
        "check_estimators_nan_inf",
        "check_estimator_sparse_tag",
        "check_estimator_sparse_array",
        "check_estimator_sparse_matrix",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_transformer_data_not_an_array",
        "check_transformer_general",
        "check_transformer_preserve_dtypes",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_fit2d_1sample",
        "check_fit2d_1feature",
        "check_dict_unchanged",
        "check_fit_idempotent",
        "check_fit_check_is_fitted",
        "check_n_features_in",
        "check_fit2d_predict1d",
    ],
    FRACTIONS,
)


class RefusedFractions(Exception):
    """A check failed because fit refused fractional input (and for no other reason)."""


def _check_name(check) -> str:
    while isinstance(check, partial):
        check = check.func
    return check.__name__


def _check_id(check) -> str:
    keywords = []
    while isinstance(check, partial):
        keywords += [f"{k}={v}" for k, v in check.keywords.items()]
        check = check.func
    return check.__name__ + (f"({', '.join(keywords)})" if keywords else "")


def _refused_fractions(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception it was raised from or during is fit's refusal of
    fractional values."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DPTopicModelInputError) and "fractional values" in str(exc):
            return True
        if "X holds fractional values" in str(exc):  # a check's message quoting ours
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _checks():
    """scikit-learn's checks (its documented generator), each expected failure marked
    strict xfail that only a RefusedFractions satisfies."""
    for estimator, check in estimator_checks_generator(
        CHECKED, expected_failed_checks=EXPECTED_FAILURES
    ):
        name = _check_name(check)
        marks = []
        if name in EXPECTED_FAILURES:
            marks = [
                pytest.mark.xfail(
                    reason=EXPECTED_FAILURES[name], raises=RefusedFractions, strict=True
                )
            ]
        yield pytest.param(estimator, check, marks=marks, id=_check_id(check))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")
@pytest.mark.parametrize("estimator, check", list(_checks()))
def test_scikit_learn_check(estimator, check):
    try:
        check(estimator)
    except Exception as exc:
        if _refused_fractions(exc):
            raise RefusedFractions(str(exc)) from exc
        raise


@pytest.fixture(scope="module")
def counts():
    """Integer counts: two word groups, 60 documents of 10 to 20 tokens."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(60):
        p = (
            np.r_[np.full(6, 0.15), np.full(6, 0.1 / 6)]
            if i % 2
            else np.r_[np.full(6, 0.1 / 6), np.full(6, 0.15)]
        )
        rows.append(rng.multinomial(rng.integers(10, 21), p / p.sum()))
    return np.array(rows)


def model(**kwargs) -> DPTopicModel:
    args = {"n_components": 2, "epsilon": 20.0, "delta": 1e-5, "iterations": 5, "random_state": 3}
    return DPTopicModel(**(args | kwargs))


def test_init_only_stores_and_clone_get_params_set_params_round_trip():
    options = {"clip": 0.5}
    m = DPTopicModel(4, 2.0, 1e-6, mechanism="hdp-lda", options=options, random_state=np.int64(1))
    params = m.get_params()
    assert params["n_components"] == 4 and params["epsilon"] == 2.0 and params["delta"] == 1e-6
    assert params["options"] is options and params["mechanism"] == "hdp-lda"
    twin = clone(m)
    assert twin is not m and twin.get_params().keys() == params.keys()
    assert all(repr(twin.get_params()[k]) == repr(v) for k, v in params.items())
    assert twin.options == options and twin.options is not options  # deep-copied
    assert twin.set_params(n_components=7, epsilon=0.5) is twin
    assert twin.n_components == 7 and m.n_components == 4
    with pytest.raises(ValueError, match="Invalid parameter"):
        twin.set_params(n_topics_typo=3)
    # nothing is checked before fit: a bad value is stored as given, and fit refuses it
    odd = DPTopicModel(n_components=-1, epsilon=float("nan"), delta=7, random_state="x")
    assert odd.n_components == -1 and odd.random_state == "x"
    assert repr(DPTopicModel(epsilon=1.0, delta=1e-5)) == "DPTopicModel(delta=1e-05, epsilon=1.0)"


def test_fit_transform_shapes_and_attributes(counts):
    m = model().fit(counts)
    assert m.components_.shape == (2, 12) and m.n_features_in_ == 12
    np.testing.assert_allclose(m.components_.sum(axis=1), 1.0)
    assert m.guarantee_.adjacency == Adjacency.DOCUMENT and m.seeded_  # seeded: NOT DP
    theta = m.transform(counts)
    assert theta.shape == (60, 2) and np.all(theta > 0)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    np.testing.assert_array_equal(model().fit_transform(counts), theta)
    # the two word groups land in different topics
    assert np.corrcoef(theta[:, 0], np.arange(60) % 2)[0, 1] ** 2 > 0.5
    assert list(m.get_feature_names_out()) == ["dptopicmodel0", "dptopicmodel1"]
    assert m.transform(np.zeros((1, 12))).tolist() == [[0.5, 0.5]]  # no words: uniform


def test_unseeded_fit_is_production_noise(counts):
    m = model(random_state=None).fit(counts)
    assert not m.seeded_ and m.parameters_["iterations"] == 5


def test_transform_reads_only_components(counts):
    """Same components_ give the same transform, whatever the model was trained on, its
    seed or budget; a document's proportions depend on that document alone."""
    m = model().fit(counts)
    other = model(epsilon=1.0, random_state=99, iterations=2).fit(counts[::-1][:30] * 2)
    other.components_ = m.components_.copy()
    new = np.random.default_rng(0).poisson(1.0, size=(25, 12))
    expected = m.transform(new)
    np.testing.assert_array_equal(other.transform(new), expected)
    training = counts.copy()
    fitted = model().fit(training)
    training[:] = 0  # the model keeps no reference to its training data
    np.testing.assert_array_equal(fitted.transform(new), expected)
    np.testing.assert_array_equal(m.transform(new[7:8]), expected[7:8])
    np.testing.assert_array_equal(m.transform(new[::-1]), expected[::-1])
    np.testing.assert_array_equal(m.transform(sparse.csr_matrix(new)), expected)
    tfidf_like = new * 0.5  # transform accepts non-negative weights (no sensitivity there)
    np.testing.assert_allclose(m.transform(tfidf_like).sum(axis=1), 1.0)


def test_transform_is_ldas_e_step_as_gensim_computes_it(counts):
    """An independent implementation: gensim's LdaModel.inference with its topics set to
    components_ (float64) reaches the same proportions."""
    from gensim.models import LdaModel

    m = model(n_components=3, max_doc_update_iter=3000, mean_change_tol=1e-12).fit(counts)
    alpha = 0.3
    ours = m.set_params(doc_topic_prior=alpha).transform(counts)
    lda = LdaModel(
        num_topics=3,
        id2word={i: f"w{i}" for i in range(12)},
        alpha=np.full(3, alpha),
        iterations=3000,
        gamma_threshold=1e-12,
        random_state=0,
        dtype=np.float64,
    )
    lda.expElogbeta = m.components_.copy()
    rows = sparse.csr_matrix(counts)
    bow = [list(zip(r.indices.tolist(), r.data.tolist(), strict=True)) for r in rows]
    gamma, _ = lda.inference(bow)
    np.testing.assert_allclose(ours, gamma / gamma.sum(axis=1, keepdims=True), atol=1e-8)


def test_what_the_float_fed_checks_check_holds_on_counts(counts, tmp_path):
    """The properties of the scikit-learn checks that feed fractions, on integer counts."""
    X = counts
    m = model()
    assert m.fit(X) is m
    fitted_dict = dict(m.__dict__)
    theta = m.transform(X)
    assert m.__dict__.keys() == fitted_dict.keys()  # transform changes nothing
    np.testing.assert_array_equal(model().fit(X).fit(X).transform(X), theta)  # idempotent
    assert model().get_params() == m.get_params()  # fit overwrote no parameter
    # dense of any numeric dtype, F order, sparse containers, read-only memmaps: one model
    memmap = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=X.dtype, shape=X.shape)
    memmap[:] = X
    memmap.flush()
    readonly = np.load(tmp_path / "x.npy", mmap_mode="r")
    for variant in [
        X.astype(np.float32),
        X.astype(np.int32),
        X.astype(object),
        np.asfortranarray(X),
        X.tolist(),
        sparse.csr_matrix(X),
        sparse.csc_array(X),
        sparse.coo_matrix(X),
        readonly,
    ]:
        np.testing.assert_array_equal(model().fit(variant).components_, m.components_)
        np.testing.assert_array_equal(m.transform(variant), theta)
    pickled = pickle.loads(pickle.dumps(m))
    np.testing.assert_array_equal(pickled.transform(X), theta)
    pipe = make_pipeline(model())
    np.testing.assert_array_equal(pipe.fit(X).transform(X), theta)
    with pytest.raises(ValueError, match="X has 11 features, but DPTopicModel is expecting 12"):
        m.transform(X[:, :11])
    with pytest.raises(ValueError, match="Reshape your data"):
        m.transform(X[0])
    for bad in (np.nan, np.inf):
        broken = X.astype(float)
        broken[0, 0] = bad
        with pytest.raises(ValueError, match="NaN or infinity"):
            m.transform(broken)
        with pytest.raises(ValueError, match="NaN or infinity"):
            model().fit(broken)
    with pytest.raises(ValueError, match="Negative values"):
        m.transform(-X)
    with pytest.raises(TypeError, match=r"argument must be .* string.* number"):
        model().fit(np.array([[{"a": 1}, 2]], dtype=object))
    one = model(n_components=1).fit(X[:1])
    assert one.transform(X).tolist() == [[1.0]] * 60
    assert model().fit(X[:, :1]).components_.shape == (2, 1)


def test_a_refused_fit_changes_nothing_and_refusals_are_value_errors(counts):
    from sklearn.exceptions import NotFittedError

    m = model()
    with pytest.raises(NotFittedError):
        m.transform(counts)
    with pytest.raises(NotFittedError):
        m.get_feature_names_out()
    cases = [
        ({"epsilon": None}, "epsilon and delta are required"),
        ({"random_state": np.random.RandomState(0)}, "random_state must be None"),
        ({"random_state": -1}, "random_state must be None"),
        ({"doc_topic_prior": 0.0}, "doc_topic_prior"),
        ({"max_doc_update_iter": 0}, "max_doc_update_iter"),
        ({"mean_change_tol": -1.0}, "mean_change_tol"),
        ({"options": ["clip"]}, "options must be a dict"),
        ({"options": {"nope": 1}}, "has no option"),
        ({"n_components": 0}, "n_components"),
    ]
    for kwargs, message in cases:
        refused = model(**kwargs)
        with pytest.raises(DPTopicModelInputError, match=message) as info:
            refused.fit(counts)
        assert isinstance(info.value, ValueError) and isinstance(info.value, BadInputError)
        assert not [k for k in vars(refused) if k.endswith("_")]  # nothing set
    with pytest.raises(ValueError, match="fractional values"):
        model().fit(counts + 0.5)
    fitted = model().fit(counts)
    before = fitted.components_
    with pytest.raises(ValueError):
        fitted.set_params(epsilon=-1.0).fit(counts)
    assert fitted.components_ is before  # the earlier fit survives a refused one


def test_deprecated_aliases_warn_and_mean_the_same(counts):
    expected = model().fit(counts).components_
    with pytest.warns(DeprecationWarning, match="n_topics is deprecated"):
        by_alias = DPTopicModel(
            n_topics=2, epsilon=20.0, delta=1e-5, iterations=5, random_state=3
        ).fit(counts)
    np.testing.assert_array_equal(by_alias.components_, expected)
    with pytest.warns(DeprecationWarning, match="seed is deprecated"):
        seeded = DPTopicModel(2, 20.0, 1e-5, iterations=5, seed=3).fit(counts)
    np.testing.assert_array_equal(seeded.components_, expected)
    assert seeded.seeded_
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        model(n_components=3, n_topics=2).fit(counts)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        model(random_state=1, seed=2).fit(counts)


@pytest.fixture(scope="module")
def lee():
    """gensim's Lee background corpus (300 news articles) and a PUBLIC vocabulary:
    wordfreq's most frequent English words, never words learned from the corpus."""
    from gensim.test.utils import datapath
    from wordfreq import top_n_list

    with open(datapath("lee_background.cor"), encoding="utf-8") as fh:
        texts = fh.read().splitlines()
    words = [
        w
        for w in top_n_list("en", 3000)
        if w.isalpha() and len(w) >= 3 and w not in ENGLISH_STOP_WORDS
    ]
    return texts, words


def test_a_pipeline_from_texts_to_topics_on_the_lee_corpus(lee):
    texts, words = lee
    pipe = make_pipeline(
        CountVectorizer(vocabulary=words),
        DPTopicModel(n_components=5, epsilon=10.0, delta=1e-5, iterations=10, random_state=0),
    )
    authors = np.arange(len(texts)) // 3  # three articles per author, as an example
    pipe.fit(texts, dptopicmodel__authors=authors)
    topics = pipe[-1]
    assert topics.components_.shape == (5, len(words))
    assert topics.guarantee_.adjacency == Adjacency.AUTHOR
    theta = pipe.transform(texts[:20])
    assert theta.shape == (20, 5)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    topics.set_output(transform="pandas")  # CountVectorizer has no set_output
    frame = pipe.transform(texts[:3])
    assert list(frame.columns) == [f"dptopicmodel{i}" for i in range(5)]
    grid = clone(pipe).set_params(dptopicmodel__n_components=3, dptopicmodel__epsilon=2.0)
    assert grid[-1].n_components == 3 and not hasattr(grid[-1], "components_")


def test_the_module_works_without_scikit_learn(counts):
    """In a fresh interpreter where ``import sklearn`` fails: the module imports, fit and
    transform give what they give here, and the fallback base keeps the parameter contract."""
    code = textwrap.dedent(
        """
        import json, sys
        sys.modules["sklearn"] = None  # any import of scikit-learn now raises ImportError
        import numpy as np
        from fdptm import estimator
        assert not estimator.HAS_SKLEARN
        X = np.array(json.loads(sys.stdin.read()))
        m = estimator.DPTopicModel(2, 20.0, 1e-5, iterations=5, random_state=3)
        twin = type(m)(**m.get_params())
        assert twin.get_params() == m.get_params() and twin.set_params(epsilon=20.0) is twin
        try:
            m.transform(X)
        except ValueError as exc:
            assert "not fitted" in str(exc)
        theta = m.fit_transform(X)
        try:
            m.transform(X[:, :5])
        except ValueError as exc:
            assert "X has 5 features" in str(exc)
        print(json.dumps({
            "components": m.components_.tolist(), "theta": theta.tolist(),
            "n_features_in": m.n_features_in_, "repr": repr(m),
            "names": m.get_feature_names_out().tolist(),
            "mro": [c.__name__ for c in type(m).__mro__],
        }))
        """
    )
    import json

    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(counts.tolist()),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    here = model().fit(counts)
    np.testing.assert_array_equal(np.array(out["components"]), here.components_)
    np.testing.assert_array_equal(np.array(out["theta"]), here.transform(counts))
    assert out["n_features_in"] == 12 and out["names"] == ["dptopicmodel0", "dptopicmodel1"]
    assert "BaseEstimator" not in out["mro"] and "_Params" in out["mro"]
    assert out["repr"] == " ".join(repr(here).split())  # scikit-learn's wraps long lines


def test_the_lazy_export_is_this_class():
    assert fdptm.DPTopicModel is DPTopicModel


def test_data_frames_give_feature_names_and_their_columns_are_checked(counts):
    import pandas as pd

    columns = [f"w{i}" for i in range(12)]
    frame = pd.DataFrame(counts, columns=columns)
    m = model().fit(frame)
    assert list(m.feature_names_in_) == columns
    np.testing.assert_array_equal(m.transform(frame), model().fit(counts).transform(counts))
    with pytest.raises(ValueError, match="feature names should match"):
        m.transform(frame.rename(columns={"w0": "other"}))
