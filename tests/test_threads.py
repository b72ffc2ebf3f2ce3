"""Results do not depend on the number of threads (issue 13): a seeded release on one
thread and on two writes the same release files, byte for byte."""

from __future__ import annotations

import os

import pytest

import fdptm

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
@pytest.mark.parametrize("mechanism", ["dp-vi", "hdp-lda"])
def test_a_seeded_release_is_the_same_on_one_thread_and_on_two(
    tmp_path, pheme_raw, monkeypatch, mechanism
):
    from fdptm.parallel import workers

    files = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("FDPTM_THREADS", threads)
        assert workers() == int(threads)
        dataset = fdptm.Workspace(tmp_path / f"ws{threads}").dataset("pheme")
        dataset.ingest(pheme_raw)
        epsilon = 300 if mechanism == "hdp-lda" else 3  # HDP-LDA's word-level inherent loss
        release = dataset.release(
            epsilon=epsilon, delta=1e-6, topics=5, iterations=5, mechanism=mechanism, seed=7
        )
        root = tmp_path / f"ws{threads}" / "releases" / release.run_id
        files[threads] = {
            name: (root / name).read_bytes()
            for name in ("topic_word.parquet", "vocabulary.parquet")
        }
    assert files["1"] == files["2"]


def test_a_bad_thread_cap_is_an_input_error_and_spends_nothing(tmp_path, pheme_raw, monkeypatch):
    from fdptm.errors import BadInputError

    dataset = fdptm.Workspace(tmp_path / "ws").dataset("pheme")
    dataset.ingest(pheme_raw)
    for bad in ("abc", "0", "-2"):
        monkeypatch.setenv("FDPTM_THREADS", bad)
        with pytest.raises(BadInputError, match="FDPTM_THREADS must be a whole number"):
            dataset.release(epsilon=3, delta=1e-6, topics=5, iterations=5)
    assert dataset.budget()["totals"]["document"]["epsilon"] == 0
