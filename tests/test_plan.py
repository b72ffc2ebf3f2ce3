"""``fdptm plan`` and ``--require-signal`` (issue 28, item 3): the prediction reads nothing
of the dataset (equal on neighbouring datasets, a property test), a refusal by
``--require-signal`` spends nothing, and the prediction follows its public inputs. Real CLI,
DuckDB ledger, nltk PRE of the wordfreq list; seeded simulations (tests, not evidence)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fdptm.cli import main
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace
from fdptm.tasks.ingest import ingest

PLAN = ["plan", "--epsilon", "3", "--delta", "1e-5", "--topics", "5", "--seed", "7"]
PLAN += ["--units", "500", "--tokens-per-unit", "12", "--json"]
WORDS = ["apple", "banana", "cherry", "grape", "durian", "lemon", "melon", "peach", "plum"]


def _plan(workspace: Workspace, dataset: str, capsys, *extra: str) -> dict:
    args = [*PLAN, "--dataset", dataset, "--workspace", str(workspace.root), *extra]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    docs=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join),
        min_size=2,
        max_size=12,
    ),
    dropped=st.integers(min_value=0),
)
def test_the_prediction_is_the_same_on_neighbouring_datasets(
    tmp_path_factory, capsys, docs, dropped
):
    """D and D' = D without one document (document level): the same prediction, because
    nothing of either is read."""
    root = tmp_path_factory.mktemp("plan")
    workspace = Workspace.resolve(root / "ws")
    neighbour = [d for i, d in enumerate(docs) if i != dropped % len(docs)]
    for name, lines in (("d", docs), ("dprime", neighbour)):
        path = root / f"{name}.txt"
        path.write_text("\n".join(lines))
        ingest(path, name, workspace)
    first = _plan(workspace, "d", capsys)
    assert first == _plan(workspace, "dprime", capsys)
    assert Catalog(workspace).query("SELECT * FROM ledger") == []


def test_the_prediction_follows_its_public_inputs(small, capsys):
    few = _plan(small, "small", capsys, "--units", "50")
    many = _plan(small, "small", capsys, "--units", "20000")
    assert few["verdict"] == "no signal" and few["advice"]
    assert many["verdict"] == "signal" and not many["advice"]
    assert many["vocabulary_expected"] > few["vocabulary_expected"]
    assert few["probability_filled"] == 1.0
    listed = _plan(
        small, "small", capsys, "--vocabulary", "wordfreq:en:300", "--vocabulary-size", "120"
    )
    assert listed["vocabulary_range"] == [120, 120]  # a public vocabulary: exactly its size
    assert many["noise"]["law"] == "gaussian" and many["cutoff"] > 0
    tuned = _plan(small, "small", capsys, "--tune")
    assert tuned["verdict"] == "unknown" and tuned["cutoff"] is None


def test_require_signal_refuses_before_spending(small, capsys):
    base = ["release", "--dataset", "small", "--epsilon", "3", "--delta", "1e-5"]
    base += ["--topics", "5", "--workspace", str(small.root), "--require-signal"]
    assert main(base) == 2
    assert "--units N and --tokens-per-unit L" in capsys.readouterr().err
    assert main([*base, "--units", "50", "--tokens-per-unit", "12", "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert "the prediction is 'no signal'" in err and "nothing was reserved or spent" in err
    assert Catalog(small).query("SELECT * FROM ledger") == []


@pytest.mark.usefixtures("prefect_harness")
def test_a_release_shows_its_prediction_and_its_key_ignores_it(small, capsys):
    """The prediction's fields never change what is released: two requests that differ in
    them have one key (a backfill's partitions stay released)."""
    from fdptm.request import ReleaseRequest

    base = {"dataset": "small", "epsilon": 3, "delta": 1e-5, "topics": 2}
    plain = ReleaseRequest(**base).key(None, None)
    assert plain == ReleaseRequest(**base, units=5, tokens_per_unit=3).key(None, None)
    args = ["release", "--dataset", "small", "--epsilon", "30", "--delta", "1e-5", "--topics"]
    args += ["2", "--iterations", "5", "--seed", "1", "--workspace", str(small.root)]
    assert main([*args, "--units", "80", "--tokens-per-unit", "4"]) == 0
    out = capsys.readouterr().out
    assert "prediction (80 units of 4 tokens, stated): vocabulary about" in out


def test_a_biterm_plan_judges_the_strongest_pair_against_the_pair_test(small, capsys):
    """biterm (the default) is tested on its V (V + 1) / 2 noisy pairs: the plan's cut-off
    is that test's at the expected vocabulary, its count grows with the units, and a public
    prior leaves it tested; dp-vi's plan judges a word over k x V entries instead."""
    from fdptm.evaluation.significance import DEFAULT_ALPHA, EntryNoise

    few = _plan(small, "small", capsys, "--units", "50")
    many = _plan(small, "small", capsys, "--units", "20000")
    assert few["strongest"] == many["strongest"] == "pair"
    assert few["verdict"] == "no signal" and many["verdict"] == "signal"
    assert many["expected_top_count"] > few["expected_top_count"]
    words = max(round(many["vocabulary_expected"]), 5)
    pairs = words * (words + 1) // 2
    noise = EntryNoise("gaussian", many["noise"]["scale"], 0.0)
    assert many["cutoff"] == pytest.approx(noise.cutoff(pairs, DEFAULT_ALPHA))
    dp_vi = _plan(small, "small", capsys, "--units", "20000", "--mechanism", "dp-vi")
    assert dp_vi["strongest"] == "word"
