"""The release on a Dask cluster (issue 13, item 4): PRE's chunks, bounding's ranking of
the authors over the cap, M1's ranges of authors and SAN's batches are mapped over the
workers of a real two-process ``LocalCluster``, and ``dp-vi`` keeps each range of units on
a worker and adds the returned clipped sums in range order, so a seeded release equals the
local one byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import local_cluster
from distributed.diagnostics.plugin import SchedulerPlugin

import fdptm
from fdptm.evaluation.synthetic import generate_lda
from fdptm.mechanisms import dp_vi
from fdptm.parallel import Placed, on_cluster
from fdptm.privacy.adjacency import Adjacency


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as c:
        yield c.scheduler_address


def _params(n_topics: int = 4):
    return dp_vi.dp_vi_params(
        3.0,
        1e-5,
        n_topics=n_topics,
        adjacency=Adjacency.AUTHOR,
        max_docs_per_author=10,
        iterations=3,
    )


def test_a_range_of_units_as_its_own_corpus_gives_the_same_partial_sum():
    syn = generate_lda(400, 60, 4, doc_length=12, docs_per_author=3, seed=2)
    data = dp_vi.prepare(syn.corpus, Adjacency.AUTHOR)
    beta = dp_vi.exp_elog_beta(np.random.default_rng(1).gamma(1.0, 1.0, (60, 4)) + 0.01)
    included = np.random.default_rng(3).random(data.n_units) < 0.7
    p = _params()
    edges = np.array([0, 17, 17, 60, data.n_units])
    views = dp_vi.unit_shards(data, edges, own=False)
    copies = dp_vi.unit_shards(data, edges, own=True)
    args = (beta, included, p.alpha, p.local_iterations, p.local_tolerance, p.clip)
    for view, copy in zip(views, copies, strict=True):
        assert copy.data.n_units == copy.stop - copy.start
        a, b = dp_vi.shard_statistic(view, *args), dp_vi.shard_statistic(copy, *args)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    whole, norms = dp_vi.clipped_statistics(data, beta, p, included)
    parts = [dp_vi.shard_statistic(v, *args) for v in views]
    assert np.array_equal(whole, sum(s for s, _ in parts))
    assert np.array_equal(norms, np.concatenate([n for _, n in parts]))


def test_placed_chunks_map_on_the_cluster_in_chunk_order(cluster):
    with on_cluster(cluster), Placed([np.arange(3) + 10 * c for c in range(5)]) as placed:
        assert placed.n == 5
        first = placed.map(np.dot, np.ones(3))
        second = placed.map(np.dot, np.full(3, 2.0))
    assert first == [3.0, 33.0, 63.0, 93.0, 123.0]
    assert second == [2 * v for v in first]


def _count_calls(chunk: np.ndarray, state: int | None, step: float) -> tuple[float, int]:
    calls = 1 if state is None else state + 1
    return float(chunk.sum()) * step + calls, calls


def test_placed_states_stay_with_their_chunks_between_maps(cluster):
    """map_stateful gives each chunk its own state from its previous call, on the cluster
    as here; only the results come back."""
    chunks = [np.arange(3) + 10 * c for c in range(4)]
    results = {}
    for arm, address in (("local", None), ("dask", cluster)):
        with on_cluster(address), Placed(chunks) as placed:
            results[arm] = [placed.map_stateful(_count_calls, step) for step in (1.0, 0.0, 2.0)]
    assert results["local"] == results["dask"]
    assert results["dask"][1] == [2.0] * 4 and results["dask"][2] == [9.0, 69.0, 129.0, 189.0]


def test_warm_statistics_on_the_cluster_equal_the_local_ones(cluster):
    syn = generate_lda(500, 80, 4, doc_length=10, docs_per_author=2, seed=6)
    data = dp_vi.prepare(syn.corpus, Adjacency.AUTHOR)
    betas = [
        dp_vi.exp_elog_beta(np.random.default_rng(s).gamma(1.0, 1.0, (80, 4)) + 0.01)
        for s in (8, 9, 10)
    ]
    included = np.ones(data.n_units, dtype=bool)
    sums = {}
    for arm, address in (("local", None), ("dask", cluster)):
        with on_cluster(address), dp_vi.placed_shards(data, (80, 4)) as placed:
            sums[arm] = [
                dp_vi.clipped_statistics(data, b, _params(), included, placed, warm=True)[0]
                for b in betas
            ]
    for a, b in zip(sums["local"], sums["dask"], strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("k", [4, 10])
def test_the_statistic_on_the_cluster_equals_the_local_one(cluster, k):
    """k = 10: the E-step's vectorised exps and column sums (``fdptm.kernels.vi``)."""
    syn = generate_lda(600, 80, k, doc_length=10, docs_per_author=2, seed=4)
    data = dp_vi.prepare(syn.corpus, Adjacency.AUTHOR)
    beta = dp_vi.exp_elog_beta(np.random.default_rng(5).gamma(1.0, 1.0, (80, k)) + 0.01)
    included = np.ones(data.n_units, dtype=bool)
    local = dp_vi.clipped_statistics(data, beta, _params(k), included)
    with on_cluster(cluster):
        remote = dp_vi.clipped_statistics(data, beta, _params(k), included)
    assert np.array_equal(local[0], remote[0]) and np.array_equal(local[1], remote[1])


@pytest.mark.usefixtures("prefect_harness")
def test_a_seeded_dp_vi_release_on_two_dask_workers_equals_the_local_one(
    tmp_path, pheme_raw, cluster
):
    from distributed import Client

    def prefixes() -> dict[str, int]:
        with Client(cluster, set_as_default=False) as client:
            return client.run_on_scheduler(
                lambda dask_scheduler: {
                    name: sum(p.state_counts.values())
                    for name, p in dask_scheduler.task_prefixes.items()
                }
            )

    import json

    texts = json.loads(pheme_raw.read_text())["text"]
    authored = tmp_path / "authored.jsonl"  # PHEME's tweets under 1,500 made-up authors
    authored.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "text": t, "user": f"u{i % 1500}"}) + "\n"
            for i, t in enumerate(texts)
        )
    )
    before = prefixes()
    files = {}
    for arm, address in (("local", None), ("dask", cluster)):
        dataset = fdptm.Workspace(tmp_path / arm).dataset("pheme")
        dataset.ingest(authored, author_column="user", id_column="id")
        release = dataset.release(
            epsilon=3,
            delta=1e-6,
            topics=5,
            iterations=5,
            seed=7,
            mechanism="dp-vi",
            max_docs_per_author=2,  # authors over the cap: bounding ranks on the workers
            dask_address=address,
        )
        root = tmp_path / arm / "releases" / release.run_id
        files[arm] = {
            name: (root / name).read_bytes()
            for name in ("topic_word.parquet", "vocabulary.parquet")
        }
    assert files["local"] == files["dask"]
    after = prefixes()
    # PRE, bounding, M1 (DP set union's ranges of authors), SAN and M2 ran there
    for name in ("worker_chunk", "ranked", "truncated", "sanitize", "shard_statistic"):
        assert after.get(name, 0) > before.get(name, 0), name


@pytest.mark.parametrize("policy", ["weighted", "uniform-gaussian"])
def test_set_union_over_ranges_on_the_cluster_equals_the_local_one(cluster, policy, monkeypatch):
    from fdptm.mechanisms import set_union
    from fdptm.privacy.noise import NoiseSource

    rng = np.random.default_rng(12)
    doc_author = rng.integers(0, 900, 4000)
    doc_ptr = np.concatenate([[0], np.cumsum(rng.integers(0, 14, 4000))])
    items = (rng.zipf(1.4, doc_ptr[-1]) % 200).astype(np.int32)
    monkeypatch.setattr(set_union, "RANGE_AUTHORS", 100)  # nine ranges
    params = set_union.set_union_params(policy, 2.0, 1e-6, max_items=7)
    chosen = {}
    for arm, address in (("local", None), ("dask", cluster)):
        with on_cluster(address):
            parts = set_union.unit_ranges(doc_author, doc_ptr, items, 200)
            chosen[arm] = set_union.select_units(parts, 200, params, NoiseSource.create(4))
    assert len(chosen["local"]) > 0 and np.array_equal(chosen["local"], chosen["dask"])


def test_bounding_on_the_cluster_equals_the_local_one(cluster, monkeypatch):
    import pyarrow as pa

    from fdptm.tasks import bounding

    rng = np.random.default_rng(13)
    authors = [f"a{a}" for a in rng.zipf(1.5, 3000) % 60]
    table = pa.table(
        {
            "doc_id": [f"d{i}" for i in range(3000)],
            "author_id": authors,
            "tokens": pa.array([["w"] * (i % 5) for i in range(3000)], pa.list_(pa.string())),
        }
    )
    monkeypatch.setattr(bounding, "RANGE_ROWS", 200)
    caps = bounding.Bounds(max_docs_per_author=4, max_tokens_per_doc=2)
    local = bounding.bound_contributions(table, caps, 99)
    with on_cluster(cluster):
        remote = bounding.bound_contributions(table, caps, 99)
    assert local.num_rows < table.num_rows and local.equals(remote)


class _TaskSpecs(SchedulerPlugin):
    """A scheduler plugin that keeps the repr of every task's specification it sees."""

    name = "fdptm-task-specs"

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        task = self.scheduler.tasks.get(key)
        spec = None if task is None else task.run_spec
        if spec is not None:  # the function's name and every argument as the scheduler holds it
            self.seen.append(
                f"{spec!r} {getattr(spec, 'args', '')!r} {getattr(spec, 'kwargs', '')!r}"
            )


def test_the_subsample_key_and_the_bounding_seed_never_enter_a_task_spec(cluster):
    """The secrets the workers need (DP set union's ChaCha key for ``policy-*``, the
    bounding seed) travel as scattered data, so the scheduler's task specifications (and
    a failed task's log line) never hold them."""
    import pyarrow as pa
    from distributed import Client

    from fdptm.mechanisms import set_union
    from fdptm.privacy.noise import NoiseSource
    from fdptm.tasks import bounding

    with Client(cluster, set_as_default=False) as client:
        client.register_plugin(_TaskSpecs())
    rng = np.random.default_rng(14)
    doc_author = rng.integers(0, 300, 1500)
    doc_ptr = np.concatenate([[0], np.cumsum(rng.integers(1, 14, 1500))])
    items = (rng.zipf(1.4, doc_ptr[-1]) % 100).astype(np.int32)
    params = set_union.set_union_params("policy-gaussian", 2.0, 1e-6, max_items=3)
    generator = NoiseSource.create(5).generator  # the draws select_units makes first
    generator.permutation(100)
    words = np.frombuffer(generator.bytes(32), dtype="<u8")
    seed = 2**62 + 987_654_321
    table = pa.table(
        {
            "doc_id": [f"d{i}" for i in range(400)],
            "author_id": [f"a{i % 7}" for i in range(400)],
            "tokens": pa.array([["w"]] * 400, pa.list_(pa.string())),
        }
    )
    with on_cluster(cluster):
        parts = set_union.unit_ranges(doc_author, doc_ptr, items, 100)
        set_union.select_units(parts, 100, params, NoiseSource.create(5))
        bounding.bound_contributions(table, bounding.Bounds(max_docs_per_author=3), seed)
    with Client(cluster, set_as_default=False) as client:
        seen = client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.plugins[_TaskSpecs.name].seen
        )
        client.unregister_scheduler_plugin(_TaskSpecs.name)
    assert any("truncated" in s for s in seen) and any("ranked" in s for s in seen)
    secrets = [str(int.from_bytes(words.tobytes(), "little")), str(seed)]
    secrets += [str(int(w)) for w in words]
    secrets += [str(int(w)) for w in np.frombuffer(seed.to_bytes(16, "little"), "<u8")]
    secrets = [s for s in secrets if len(s) >= 6]  # the seed's upper word is 0
    assert not [s for s in seen for secret in secrets if secret in s]


def test_a_stream_maps_in_order_on_the_cluster_reading_items_as_results_return(cluster):
    from fdptm.parallel import stream_map

    pulled = []

    def items():
        for c in range(7):
            pulled.append(c)
            yield np.arange(3) + 10 * c

    with on_cluster(cluster):
        stream = stream_map(np.dot, items(), np.full(3, 2.0))
        first = next(stream)
        assert len(pulled) == 4  # two per worker thread in flight: 2 workers x 1 thread
        remote = [first, *stream]
    local = list(stream_map(np.dot, (np.arange(3) + 10 * c for c in range(7)), np.full(3, 2.0)))
    assert remote == local == [2.0 * (30 * c + 3) for c in range(7)]


def test_a_large_item_travels_outside_the_task_graph(cluster, recwarn):
    """distributed warns with the graph's size when a task carries more than 10 MB: an
    item inside the graph would print the size of private data (and a failed task would
    log its content). Items are scattered instead."""
    import pyarrow as pa

    from fdptm.parallel import stream_map

    big = pa.array(np.zeros(2_000_000))  # 16 MB
    with on_cluster(cluster):
        assert list(stream_map(len, [big, big])) == [2_000_000, 2_000_000]
    assert not [w for w in recwarn if "large graph" in str(w.message)]


def test_an_unreachable_cluster_is_refused_before_any_budget_is_spent(tmp_path, pheme_raw):
    from fdptm.errors import BadInputError

    dataset = fdptm.Workspace(tmp_path / "ws").dataset("pheme")
    dataset.ingest(pheme_raw)
    with pytest.raises(BadInputError, match="no Dask scheduler answers at"):
        dataset.release(epsilon=3, delta=1e-6, topics=5, dask_address="tcp://127.0.0.1:9")
    assert dataset.budget()["totals"]["document"]["epsilon"] == 0


def test_a_scheduler_without_workers_is_refused():
    from fdptm.errors import BadInputError
    from fdptm.parallel import check_cluster

    with (
        local_cluster(n_workers=0, processes=False, dashboard_address=None) as empty,
        pytest.raises(BadInputError, match="has no worker"),
    ):
        check_cluster(empty.scheduler_address)


def test_a_cluster_of_this_code_passes_the_check(cluster):
    from fdptm.parallel import check_cluster

    check_cluster(cluster)
    check_cluster(None)


def test_workers_that_preprocess_differently_are_refused(cluster, monkeypatch):
    """The workers' PRE must give this process's tokens on the canary texts; here this
    process's canary changes (as another nltk or WordNet would change its tokens)."""
    from fdptm.errors import BadInputError
    from fdptm.parallel import check_cluster
    from fdptm.tasks import preprocess

    monkeypatch.setattr(preprocess, "_CANARY", ("other texts tokenise to other tokens",))
    with pytest.raises(BadInputError, match="preprocess text differently"):
        check_cluster(cluster)
