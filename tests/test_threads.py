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


def test_a_thread_share_caps_the_kernels_of_its_context_only(monkeypatch):
    """``threads_at_most`` (an audit's models, one per core) caps ``workers()`` and so
    dp-vi's ranges within its block, in its own context only, and restores the cap after."""
    import contextvars
    import threading

    from fdptm.mechanisms.dp_vi import local_chunks
    from fdptm.parallel import each_chunk, threads_at_most, workers

    monkeypatch.setenv("FDPTM_THREADS", "4")
    cores = workers()
    with threads_at_most(1):
        assert workers() == 1
        assert local_chunks((100, 5)) == 1
        ran_in = []
        each_chunk(lambda c: ran_in.append(threading.current_thread()), 3)
        assert ran_in == [threading.current_thread()] * 3
        assert contextvars.Context().run(workers) == cores  # another context: no cap
        with threads_at_most(8):
            assert workers() == cores  # never above the cores or $FDPTM_THREADS
    assert workers() == cores
    assert local_chunks((100, 5)) == (1 if cores == 1 else min(32, 2 * cores))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_models_side_by_side_each_run_their_share_of_threads():
    """Two model threads, each within ``threads_at_most(2)``: four chunks run at once (each
    thread its own pool), not two (one pool of the share's size, queued on by both)."""
    import threading

    from fdptm.parallel import each_chunk, threads_at_most

    together = threading.Barrier(4, timeout=20)

    def model() -> None:
        with threads_at_most(2):
            each_chunk(lambda c: together.wait(), 2)

    threads = [threading.Thread(target=model) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not together.broken
