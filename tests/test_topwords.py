"""Top words only above the floor, "no signal" topics, and how the manifest and the audit
report present them (post-processing of a released matrix: no private data involved)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fdptm.audit.report import write_html
from fdptm.evaluation.topwords import (
    NEAR_UNIFORM_TV,
    no_signal,
    row_floor,
    top_words,
    words_above_floor,
)
from fdptm.tasks.release import topic_summaries

WORDS = [f"w{j:02d}" for j in range(20)]


def _row(values: list[float]) -> np.ndarray:
    row = np.asarray(values, dtype=float)
    return row / row.sum()


def test_a_uniform_row_is_no_signal_and_lists_no_words():
    phi = np.full((1, 20), 1 / 20)
    assert row_floor(phi[0]) == pytest.approx(1 / 20)
    assert top_words(phi, WORDS) == [[]]
    assert no_signal(phi) == [True]
    assert words_above_floor(phi) == 0.0


def test_one_word_above_the_floor_is_the_only_word_listed():
    phi = _row([1.0] * 7 + [30.0] + [1.0] * 12)[None, :]  # 19 words tie at the floor
    assert top_words(phi, WORDS) == [[("w07", pytest.approx(30 / 49))]]
    assert no_signal(phi) == [False]
    assert words_above_floor(phi) == 1.0


def test_ties_above_the_floor_go_in_column_order_and_floor_ties_never_show():
    # the vocabulary is in reverse alphabetical order: the order is by column, not by word
    words = [f"z{25 - j:02d}" for j in range(20)]
    phi = _row([1, 5, 3, 5, 1, 5, 3, 1, 1, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])[None, :]
    listed = [w for w, _ in top_words(phi, words)[0]]
    assert listed == [words[9], words[1], words[3], words[5], words[2], words[6]]
    assert [w for w, _ in top_words(phi, words, n=3)[0]] == listed[:3]
    # the same columns with the vocabulary sorted: the order depends on columns, not words
    alphabetical = sorted(words)
    assert top_words(phi, alphabetical) == [
        [(alphabetical[j], phi[0, j]) for j in (9, 1, 3, 5, 2, 6)]
    ]
    assert words_above_floor(phi, n=3) == 3.0 and words_above_floor(phi) == 6.0


def test_no_floored_word_is_ever_listed():
    """Property: over random floored rows (max(count + noise, 0) + beta, normalised, with the
    floor's copies a few ulps apart as float rounding leaves them), the list is exactly the
    words whose noisy count was above 0, by decreasing probability then column, up to n."""
    gen = np.random.default_rng(20240611)
    lengths = []
    for _ in range(500):
        v = int(gen.integers(2, 60))
        counts = gen.poisson(gen.uniform(0, 3), v) * (gen.random(v) < gen.uniform(0, 0.5))
        noisy = np.maximum(counts + gen.laplace(0, gen.uniform(0.1, 3), v), 0.0)
        noisy[gen.integers(v)] = 0.0  # at least one word is floored
        floored = noisy == 0.0
        row = (noisy + 0.01) / (noisy + 0.01).sum()
        row[floored] *= 1 + gen.integers(-3, 4, floored.sum()) * np.finfo(float).eps
        n = int(gen.integers(1, 15))
        (listed,) = top_words(row[None, :], [f"w{j}" for j in range(v)], n)
        expected = sorted(np.flatnonzero(~floored), key=lambda j: (-row[j], j))[:n]
        assert listed == [(f"w{j}", row[j]) for j in expected]
        assert words_above_floor(row[None, :], n) == len(expected)
        if not listed:
            assert no_signal(row[None, :]) == [True]
        lengths.append(len(listed))
    # some rows had nothing but floor ties, and some filled their list
    assert 0 in lengths and max(lengths) >= 10


def test_near_uniform_rows_are_no_signal():
    v = 200
    uniform = np.full(v, 1 / v)

    def tilted(tv: float) -> np.ndarray:
        """Uniform with ``tv`` of its mass moved from the second half to the first half."""
        row = uniform.copy()
        row[: v // 2] += tv / (v // 2)
        row[v // 2 :] -= tv / (v // 2)
        return row

    phi = np.stack([tilted(NEAR_UNIFORM_TV * 0.9), tilted(NEAR_UNIFORM_TV * 1.1)])
    # the near-uniform row has 100 words above its floor, and is still no signal
    assert [len(ws) for ws in top_words(phi, [f"w{j}" for j in range(v)])] == [10, 10]
    assert no_signal(phi) == [True, False]


def test_manifest_topics_list_probabilities_and_flag_no_signal():
    near_floor = _row([1.0] * 18 + [1.0 + 1e-6, 50.0])
    phi = np.stack([np.full(20, 1 / 20), near_floor])
    phi[0, 3] *= 1 + 1e-12  # float rounding at the floor: still no word above it
    topics = topic_summaries(phi, WORDS, None)  # no noise model: the floor rule
    assert json.loads(json.dumps(topics)) == topics
    assert topics[0] == {
        "topic": 0,
        "no_signal": True,
        "tested": False,
        "floor": 0.05,
        "words": [],
    }
    second = topics[1]
    assert second["no_signal"] is False
    assert [w["word"] for w in second["words"]] == ["w19", "w18"]
    assert second["words"][0]["probability"] == pytest.approx(near_floor[19], rel=1e-3)
    # w18 is 1e-6 (relatively) above the floor: printed with the digits that show it
    assert second["words"][1]["probability"] > second["floor"]
    assert second["floor"] == pytest.approx(row_floor(near_floor), rel=1e-6)


def test_audit_report_shows_probabilities_no_signal_and_escapes_words(tmp_path):
    words = [*WORDS[:19], "<script>x</script>"]
    phi = np.stack([np.full(20, 1 / 20), _row([1.0] * 19 + [40.0])])
    manifest = {
        "guarantee": {"statement": "(1, 1e-05)-DP", "adjacency": "author"},
        "stages": [
            {"step": "M1", "mechanism": "m", "adjacency": "author", "epsilon": 1, "delta": 0}
        ],
        "topics": topic_summaries(phi, words, None),
    }
    utility = {
        "vocabulary_size": 20,
        "umass": -1.5,
        "npmi": 0.1,
        "topic_diversity": 0.75,
        "words_above_floor": 4.5,
        "heldout_loglik_per_token": -6.25,
        "perplexity_in_sample": 100.0,
        "perplexity_held_out": 120.0,
        "against_non_private": {"l1": 0.5, "rmse": 0.01, "kendall_tau": 0.2},
        "non_private_umass": -1.0,
    }
    report = {
        "note": "internal",
        "run_id": "r-1",
        "verdict": "passed",
        "claims_per_document": {"release": {"epsilon": 1.0, "reason": "author level"}},
        "attacks": {},
        "bounds": {},
        "suspects": [],
        "largest_lower_bound": 0.0,
        "confidence": 0.95,
        "confidence_per_bound": 0.95,
        "shadows": 2,
        "mode": "online",
        "documents": 40,
        "word_universe": 30,
        "normality": {"rejected": 0, "tests": 1, "level": 0.05},
        "utility": utility,
    }
    path = tmp_path / "report.html"
    write_html(report, manifest, {}, path)
    page = path.read_text()
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    p = manifest["topics"][1]["words"][0]["probability"]
    assert f"&lt;script&gt;x&lt;/script&gt; {p}" in page
    untested = '<td>0</td><td>0.05</td><td>(untested) <span class="nosignal">no signal</span></td>'
    assert untested in page  # no noise model in this manifest: the floor rule, marked
    for shown in ["-1.50", "0.100", "0.750", "4.50", "-6.250"]:
        assert f"<td>{shown}</td>" in page
    assert "topic diversity" in page and "held-out log-likelihood per token" in page
    # the optional measures are left out when the utility block lacks them
    for key in ["npmi", "topic_diversity", "words_above_floor", "heldout_loglik_per_token"]:
        del utility[key]
    write_html(report, manifest, {}, path)
    assert "topic diversity" not in path.read_text()
