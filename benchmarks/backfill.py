"""Backfill of weekly windows: wall time on one process and on a two-worker Dask LocalCluster.

    python benchmarks/backfill.py      # writes benchmarks/backfill.md and backfill.json
    python benchmarks/backfill.py --weeks 4 --docs-per-week 2000 --out /tmp/smoke  # a smoke run

The product issue's target: "a backfill of 52 weekly windows of a synthetic timestamped
corpus (about 10,000 documents a week), wall time locally and on a two-worker Dask
LocalCluster". ``--weeks`` (default 52) and ``--docs-per-week`` (default 10,000) size it.

Corpus. One synthetic LDA corpus (``fdptm.evaluation.synthetic.generate_lda``: 10 topics,
eta 0.05, alpha 0.1, document length 3 + Poisson(12), seed 0) over a vocabulary of real
English words: the 1,000 most frequent words of the public list ``wordfreq:en:5000`` after
fdptm's own PRE, kept only when PRE maps the word to itself (so a document's tokens are
exactly its drawn words). Each word id becomes its word, each document a line of text; its
``ts`` is uniform inside its week (weeks start on Monday 2024-01-01, UTC). Week w is
written as one JSONL file (``doc_id``, ``text``, ``ts``; no author column, so the dataset
is document-level) and ingested as one batch (``fdptm.Workspace(...).dataset("news")
.ingest``) into a temporary workspace; ingest time is reported on its own.

Arms. The ingested workspace is copied (``shutil.copytree``) once per arm, so every arm
starts from the same catalog and batches with empty token caches. Each arm is one
``Dataset.backfill(by="week", first=2024-01-01, last=<last Sunday>, epsilon=1,
delta=1e-6, topics=10, iterations=20, vocabulary="wordfreq:en:5000")``: dp-vi (the default
mechanism), M1 skipped (public vocabulary, its 2,000 most frequent words), no seed (real
noise). ``local``: the flow's default sequential runner (one partition after another).
``dask``: ``distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True)``
and ``dask_address=cluster.scheduler_address`` (prefect-dask fans one partition task out
per worker). Everything runs inside ``prefect_test_harness`` (a temporary Prefect API);
``PREFECT_API_URL`` is exported before the cluster starts so the worker processes report
to the same API. The arms run one after another (``--arms``, default local, dask, local
again on a third fresh copy, to show the drift of a shared, noisy host). After the first
local arm and after the dask arm the same backfill is run again on that workspace: it must
release nothing (every partition skipped), and its wall time is the cost of a no-op.

Checks per arm: every week released (a failed partition is reported with its error), the
number of published releases in the catalog, and the ledger's document-level lifetime
total (``Dataset.budget()["totals"]["document"]["epsilon"]``), which parallel composition
makes 1.0 (the most any week spent), not the number of weeks. Also reported: per-release
wall time (the catalog's ``runs.started_at``/``finished_at``), the time per stage summed
over the arm's releases (``stage_runs``), the benchmark process's peak RSS and each Dask
worker's peak RSS (``resource.getrusage`` in the worker, through ``Client.run``), and the
load of the shared machine during each arm (``LoadSampler``). ``--previous JSON`` appends the
arms of this invocation to an earlier one's (same corpus: it is deterministic), e.g. a
``local-again`` arm after a ``local,dask`` run. A ``reading`` key added to the .json by hand
after the run is rendered as the last section.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# Before Prefect is imported anywhere, and inherited by the Dask worker processes.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

from harness import at_start, save  # noqa: E402

from fdptm.request import default  # noqa: E402
from fdptm.storage.catalog import release_idle  # noqa: E402

TITLE = "Backfill of weekly windows: local vs a two-worker Dask LocalCluster"
TARGETS = "52 weekly windows of 10,000 documents in <= 300 s on 2 cores (issue 30)"
MONDAY = dt.date(2024, 1, 1)
DATASET = "news"
VOCAB_SOURCE = "wordfreq:en:5000"
SYNTHETIC_WORDS = 1000
FIELDS = {
    "epsilon": 1.0,
    "delta": 1e-6,
    "topics": 10,
    "iterations": 20,
    "vocabulary": VOCAB_SOURCE,
}


def vocabulary() -> list[str]:
    """Real English words that are in the release's public vocabulary and PRE-stable."""
    from fdptm.tasks.preprocess import PreConfig, preprocess_texts
    from fdptm.tasks.public_vocabulary import _wordfreq_counts

    counts = _wordfreq_counts(VOCAB_SOURCE.partition(":")[2], PreConfig())
    ranked = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    ranked = ranked[:SYNTHETIC_WORDS]  # well inside the 2,000 the release keeps
    stable = [w for w, t in zip(ranked, preprocess_texts(ranked), strict=True) if t == [w]]
    return stable


def write_corpus(directory: Path, weeks: int, per_week: int) -> tuple[list[Path], dict]:
    """One JSONL file per week; returns the files and the corpus's shape."""
    import numpy as np

    from fdptm.evaluation.synthetic import generate_lda

    words = np.array(vocabulary(), dtype=object)
    n = weeks * per_week
    lda = generate_lda(n, len(words), FIELDS["topics"], doc_length=15, seed=0)
    ptr, ids = lda.corpus.doc_ptr, lda.corpus.words
    rng = np.random.default_rng(1)
    seconds = rng.integers(0, 7 * 86400, size=n)
    files = []
    for w in range(weeks):
        start = dt.datetime.combine(MONDAY + dt.timedelta(weeks=w), dt.time(), dt.UTC)
        path = directory / f"week{w + 1:02d}.jsonl"
        with path.open("w") as out:
            for i in range(w * per_week, (w + 1) * per_week):
                ts = start + dt.timedelta(seconds=int(seconds[i]))
                text = " ".join(words[ids[ptr[i] : ptr[i + 1]]])
                row = {"doc_id": f"w{w + 1:02d}-{i:07d}", "text": text, "ts": ts.isoformat()}
                out.write(json.dumps(row) + "\n")
        files.append(path)
    shape = {
        "documents": n,
        "tokens": int(ptr[-1]),
        "mean_tokens_per_doc": float(ptr[-1] / n),
        "synthetic_vocabulary": len(words),
        "jsonl_mib": sum(f.stat().st_size for f in files) / 2**20,
    }
    return files, shape


class LoadSampler(threading.Thread):
    """Every ``interval`` s during an arm: the 1-minute load average, and whether a pytest
    process (someone else's test run on this shared machine) is running."""

    def __init__(self, interval: float = 15.0) -> None:
        super().__init__(daemon=True)
        self.interval, self.samples, self.stop = interval, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((os.getloadavg()[0], _pytest_running()))
            self.stop.wait(self.interval)

    def summary(self) -> dict:
        n = len(self.samples)
        return {
            "samples": n,
            "mean_load1": sum(x for x, _ in self.samples) / n if n else None,
            "pytest_share": sum(p for _, p in self.samples) / n if n else None,
        }


def _pytest_running() -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"pytest" in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _worker_peak_rss_mib() -> float:
    import resource as r

    return r.getrusage(r.RUSAGE_SELF).ru_maxrss / 1024


def catalog_stats(root: Path, dataset) -> dict:
    """Published releases, per-release wall times and per-stage totals, from the catalog."""
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace

    catalog = Catalog(Workspace.resolve(root))
    runs = catalog.query(
        "SELECT r.run_id, r.status, epoch(r.finished_at) - epoch(r.started_at) AS seconds,"
        " rel.run_id IS NOT NULL AS released FROM runs r LEFT JOIN releases rel USING (run_id)"
        " WHERE r.kind = 'release' ORDER BY r.started_at"
    )
    stages = catalog.query(
        "SELECT s.stage, sum(epoch(s.finished_at) - epoch(s.started_at)) AS seconds"
        " FROM stage_runs s JOIN runs r USING (run_id) WHERE r.kind = 'release'"
        " GROUP BY s.stage ORDER BY seconds DESC"
    )
    span = catalog.query(
        "SELECT epoch(max(finished_at)) - epoch(min(started_at)) AS seconds FROM runs"
        " WHERE kind = 'release'"
    )
    durations = [r["seconds"] for r in runs if r["seconds"] is not None]
    intervals = catalog.query(
        "SELECT epoch(started_at) AS s, epoch(finished_at) AS f FROM runs"
        " WHERE kind = 'release' AND finished_at IS NOT NULL"
    )
    events = sorted([(i["s"], 1) for i in intervals] + [(i["f"], -1) for i in intervals])
    running = concurrent = 0
    for _, step in events:
        running += step
        concurrent = max(concurrent, running)
    half = len(durations) // 2
    t0 = min((i["s"] for i in intervals), default=0.0)
    timeline = sorted([round(i["s"] - t0, 1), round(i["f"] - i["s"], 1)] for i in intervals)
    budget = dataset.budget()
    return {
        "release_runs": len(runs),
        "release_runs_by_status": {
            s: sum(r["status"] == s for r in runs) for s in sorted({r["status"] for r in runs})
        },
        "published_releases": sum(bool(r["released"]) for r in runs),
        "release_seconds_median": statistics.median(durations) if durations else None,
        "release_seconds_min": min(durations, default=None),
        "release_seconds_max": max(durations, default=None),
        "release_seconds_sum": sum(durations),
        "release_seconds_median_first_half": statistics.median(durations[:half]) if half else None,
        "release_seconds_median_second_half": statistics.median(durations[half:]) if half else None,
        "max_concurrent_releases": concurrent,
        "release_timeline": timeline,  # [start offset (s), wall time (s)] per release
        "first_to_last_release_seconds": span[0]["seconds"] if span else None,
        "stage_seconds": {s["stage"]: s["seconds"] for s in stages},
        "document_epsilon_total": budget["totals"]["document"]["epsilon"],
        "document_delta_total": budget["totals"]["document"]["delta"],
    }


def backfill(dataset, last: str, dask_address: str | None = None) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    outcomes = dataset.backfill(
        by="week", first=MONDAY.isoformat(), last=last, dask_address=dask_address, **FIELDS
    )
    return time.perf_counter() - start, outcomes


def summarise(outcomes: list[dict]) -> dict:
    statuses = {}
    for o in outcomes:
        statuses[o["status"]] = statuses.get(o["status"], 0) + 1
    failures = [
        {k: o.get(k) for k in ("partition", "exit_code", "error")}
        for o in outcomes
        if o["status"] == "failed"
    ]
    return {"partitions": len(outcomes), "statuses": statuses, "failures": failures}


def run_arm(name: str, root: Path, last: str, weeks: int) -> dict:
    import fdptm

    dataset = fdptm.Workspace(root).dataset(DATASET)
    print(f"[{time.strftime('%H:%M:%S')}] arm {name}: start", flush=True)
    result: dict = {"arm": name}
    sampler = LoadSampler()
    if name.startswith("dask"):
        from distributed import Client, LocalCluster

        t = time.perf_counter()
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
        result["cluster_start_seconds"] = time.perf_counter() - t
        try:
            with Client(cluster) as client:
                sampler.start()
                seconds, outcomes = backfill(dataset, last, cluster.scheduler_address)
                sampler.stop.set()
                result["worker_peak_rss_mib"] = sorted(client.run(_worker_peak_rss_mib).values())
        finally:
            cluster.close()
    else:
        sampler.start()
        seconds, outcomes = backfill(dataset, last)
        sampler.stop.set()
    result["load"] = sampler.summary()
    result.update(
        wall_seconds=seconds,
        releases_per_minute=summarise(outcomes)["statuses"].get("released", 0) / seconds * 60,
        outcome=summarise(outcomes),
        catalog=catalog_stats(root, dataset),
        process_peak_rss_mib=peak_rss_mib(),
    )
    print(
        f"[{time.strftime('%H:%M:%S')}] arm {name}: {seconds:.1f} s, "
        f"{result['outcome']['statuses']}, document epsilon "
        f"{result['catalog']['document_epsilon_total']}",
        flush=True,
    )
    for f in result["outcome"]["failures"]:
        print(f"  FAILED {f}", flush=True)
    if result["outcome"]["statuses"].get("released", 0) != weeks:
        print(f"  arm {name}: {weeks} weeks expected released", flush=True)
    return result


def noop(name: str, root: Path, last: str) -> dict:
    """The same backfill again on an arm's workspace: must release nothing."""
    import fdptm

    dataset = fdptm.Workspace(root).dataset(DATASET)
    seconds, outcomes = backfill(dataset, last)
    result = {
        "arm": name,
        "wall_seconds": seconds,
        "outcome": summarise(outcomes),
        "document_epsilon_total": dataset.budget()["totals"]["document"]["epsilon"],
    }
    print(
        f"[{time.strftime('%H:%M:%S')}] re-run on {name}: {seconds:.1f} s, "
        f"{result['outcome']['statuses']}",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weeks", type=int, default=52)
    parser.add_argument("--docs-per-week", type=int, default=10_000)
    parser.add_argument("--arms", default="local,dask,local-again")
    parser.add_argument("--out", help="output stem (default benchmarks/backfill)")
    parser.add_argument("--note", default="", help="a paragraph added to the .md as is")
    parser.add_argument(
        "--previous",
        help="the .json of an earlier invocation with the same --weeks/--docs-per-week: its "
        "arms come first in the table (e.g. --arms local-again after a local,dask run)",
    )
    args = parser.parse_args()
    arms = args.arms.split(",")
    last = (MONDAY + dt.timedelta(weeks=args.weeks, days=-1)).isoformat()
    from prefect.testing.utilities import prefect_test_harness

    import fdptm

    begin = time.perf_counter()
    results: dict = {
        "machine": at_start(),  # now: the product modules are imported from this tree
        "weeks": args.weeks,
        "docs_per_week": args.docs_per_week,
        "range": [MONDAY.isoformat(), last],
        "fields": FIELDS,
        "defaults": {"mechanism": default("mechanism"), "sampler": default("sampler")},
    }
    with tempfile.TemporaryDirectory(prefix="fdptm-backfill-") as tmp:
        tmp = Path(tmp)
        (tmp / "corpus").mkdir()
        t = time.perf_counter()
        files, shape = write_corpus(tmp / "corpus", args.weeks, args.docs_per_week)
        results["corpus"] = {**shape, "generate_seconds": time.perf_counter() - t}
        print(f"[{time.strftime('%H:%M:%S')}] corpus: {shape}", flush=True)

        base = tmp / "base"
        dataset = fdptm.Workspace(base).dataset(DATASET)
        t = time.perf_counter()
        for f in files:
            dataset.ingest(f)
        ingest_seconds = time.perf_counter() - t
        weekly = dataset.partitions(counts=True, by="week")
        results["ingest"] = {
            "seconds": ingest_seconds,
            "batches": len(files),
            "documents_per_second": shape["documents"] / ingest_seconds,
            "week_partitions": len({p["since"] for p in weekly}),
            "atoms_batch_week": len(weekly),
        }
        print(f"[{time.strftime('%H:%M:%S')}] ingest: {ingest_seconds:.1f} s", flush=True)
        for f in files:
            f.unlink()
        release_idle()  # the catalog detached before the arms copy the workspace

        with prefect_test_harness(server_startup_timeout=180):
            from prefect.settings import PREFECT_API_URL

            os.environ["PREFECT_API_URL"] = PREFECT_API_URL.value()
            results["arms"], results["reruns"], results["crashed"] = [], [], []
            for i, arm in enumerate(arms):
                root = tmp / f"arm{i}-{arm}"
                shutil.copytree(base, root)
                try:
                    results["arms"].append(run_arm(arm, root, last, args.weeks))
                except Exception as exc:  # an arm that crashes is reported, the rest go on
                    print(f"arm {arm} crashed: {exc!r}", flush=True)
                    results["crashed"].append(
                        {"arm": arm, "error": f"{type(exc).__name__}: {exc}"[:2000]}
                    )
                    continue
                if arm in ("local", "dask"):
                    results["reruns"].append(noop(arm, root, last))
                shutil.rmtree(root / "internal" / "runs", ignore_errors=True)  # disk
    results["run_seconds"] = time.perf_counter() - begin
    for a in results["arms"]:
        a["invocation"] = 1 if not args.previous else 2
    if args.previous:
        prev = json.loads(Path(args.previous).read_text())
        if (prev["weeks"], prev["docs_per_week"]) != (args.weeks, args.docs_per_week):
            raise SystemExit("--previous was run with other --weeks/--docs-per-week")
        for a in prev["arms"]:
            a.setdefault("invocation", 1)
        results["previous"] = {k: prev[k] for k in ("run_seconds", "ingest", "machine")}
        results["previous"]["machine"].setdefault("command", prev.get("command", "unknown"))
        results["previous"]["machine"].setdefault("code", prev.get("code", "unknown"))
        results["previous"]["note"] = prev.get("note", "")
        results["arms"] = prev["arms"] + results["arms"]
        results["reruns"] = prev["reruns"] + results["reruns"]
        results["crashed"] = prev.get("crashed", []) + results["crashed"]
    results["note"] = args.note
    print(save("backfill", TITLE, render(results), results, args.out).read_text())


def render(r: dict) -> str:
    c, ing = r["corpus"], r["ingest"]
    local = next((a for a in r["arms"] if a["arm"] == "local"), None)
    again = next((a for a in r["arms"] if a["arm"] == "local-again"), None)
    runs = [*([r["previous"]] if "previous" in r else []), r]
    lines = []
    if "previous" in r:
        m = r["previous"]["machine"]
        lines += [
            f"The first arms are an earlier invocation's: `{m['command']}` · {m['date']} · "
            f"{m['cpu']} · code {m['code']} · run time {r['previous']['run_seconds'] / 60:.0f} "
            "min (corpus generation and ingest included).",
            "",
        ]
    lines += [
        f"Run time {r['run_seconds'] / 60:.0f} min (corpus generation and ingest included).",
        "",
        "Target (product issue): 52 weekly windows of about 10,000 documents each, wall time "
        "locally and on a two-worker Dask LocalCluster.",
        "",
    ]
    for run in runs:
        if run.get("note"):
            lines += [run["note"], ""]
    lines += [
        f"Corpus: {r['weeks']} weeks x {r['docs_per_week']:,} documents "
        f"({c['documents']:,} documents, {c['tokens']:,} tokens, "
        f"{c['mean_tokens_per_doc']:.1f} tokens per document, {c['synthetic_vocabulary']} "
        f"distinct words), one JSONL batch per week, range {r['range'][0]}..{r['range'][1]} "
        f"({ing['week_partitions']} week windows, {ing['atoms_batch_week']} (batch, week) "
        f"atoms). Generated in {c['generate_seconds']:.0f} s; ingest of the {ing['batches']} "
        "batches "
        + " and ".join(
            f"{run['ingest']['seconds']:.1f} s ({run['ingest']['documents_per_second']:,.0f} "
            "documents/s)"
            for run in runs
        )
        + (" (invocations 1 and 2)" if len(runs) > 1 else "")
        + ", once per invocation, before the arms, not part of any arm's time.",
        "",
        "Each release: "
        + ", ".join(f"{k} {v}" for k, v in r["fields"].items())
        + (
            " ({mechanism}, the default M2; M1 skipped; unseeded: real noise from the "
            "{sampler} sampler). The arms ran one after another, in the order of the table, "
            "each on its own fresh copy of the ingested workspace (empty token caches)."
        ).format(**r.get("defaults", {"mechanism": "dp-vi", "sampler": "opendp"})),
        "",
        "| arm | invocation | partitions released | failed | wall time (s) | releases/min | "
        "ratio to local"
        + (" | ratio to local-again" if again else "")
        + " | releases at once (max) | median release (s) | sum of release times (s) | "
        "document-level epsilon after | mean load (1 min) | pytest running |",
        "|---|---|---|---|---|---|---|" + ("---|" if again else "") + "---|---|---|---|---|---|",
    ]
    for a in r["arms"]:
        s, cat = a["outcome"]["statuses"], a["catalog"]
        ratios = [a["wall_seconds"] / ref["wall_seconds"] for ref in (local, again) if ref]
        load = a.get("load")
        lines.append(
            f"| {a['arm']} | {a.get('invocation', 1)} | {s.get('released', 0)} of "
            f"{a['outcome']['partitions']} | {s.get('failed', 0)} | {a['wall_seconds']:.1f} | "
            f"{a['releases_per_minute']:.2f} | "
            + " | ".join(f"{x:.2f}" for x in ratios)
            + f" | {cat['max_concurrent_releases']} | {cat['release_seconds_median']:.1f} | "
            f"{cat['release_seconds_sum']:.0f} | {cat['document_epsilon_total']:g} | "
            + (
                f"{load['mean_load1']:.1f} | {load['pytest_share']:.0%} of the arm |"
                if load and load["samples"]
                else "not sampled | see the note |"
            )
        )
    for crash in r.get("crashed", []):
        lines.append(f"| {crash['arm']} | | crashed: {crash['error'][:300]} |")
    lines += [
        "",
        "Wall time: the `Dataset.backfill` call (planning, every release, Prefect's "
        "bookkeeping); a Dask cluster's start-up is outside it"
        + "".join(
            f" ({a['cluster_start_seconds']:.1f} s for {a['arm']})"
            for a in r["arms"]
            if "cluster_start_seconds" in a
        )
        + ". Ratio: the arm's wall time over the local (or local-again) arm's (below 1 is "
        "faster). Mean load: "
        "the 1-minute load average sampled every 15 s during the arm (2 cores: about 2 is "
        "the arm alone); pytest running: the share of those samples in which a pytest "
        "process (another test run on this shared machine) was running. Releases "
        "at once: the most release runs whose [started_at, finished_at] overlap, from the "
        "catalog. Median release and sum of release times: each release run's own wall "
        "time (`runs.started_at` to `finished_at`); where two run at once their sum exceeds "
        "the arm's wall time.",
        "",
    ]
    lines += ["### Ledger", ""]
    for a in r["arms"]:
        cat = a["catalog"]
        total = cat["document_epsilon_total"]
        parallel = abs(total - r["fields"]["epsilon"]) < 1e-9
        lines.append(
            f"- {a['arm']}: {cat['published_releases']} published releases "
            f"({cat['release_runs']} release runs: {cat['release_runs_by_status']}); "
            f"lifetime document-level total epsilon {total:g}, delta "
            f"{cat['document_delta_total']:g} ("
            + ("parallel composition: the most any week spent" if parallel else "NOT 1: check")
            + f"; sequential composition would give "
            f"{cat['published_releases'] * r['fields']['epsilon']:g})."
        )
    for a in r["arms"]:
        for f in a["outcome"]["failures"]:
            lines.append(
                f"- FAILED in {a['arm']}: {f['partition']} exit {f['exit_code']}: {f['error']}"
            )
    lines += [
        "",
        "### Idempotent re-run",
        "",
        "The same backfill again (sequential runner) on an arm's workspace right after it:",
        "",
        "| workspace | partitions | released | skipped | wall time (s) | document epsilon after |",
        "|---|---|---|---|---|---|",
    ]
    for n in r["reruns"]:
        s = n["outcome"]["statuses"]
        lines.append(
            f"| {n['arm']} | {n['outcome']['partitions']} | {s.get('released', 0)} | "
            f"{s.get('skipped', 0)} | {n['wall_seconds']:.1f} | {n['document_epsilon_total']:g} |"
        )
    lines += [
        "",
        "### Where the time goes",
        "",
        "Seconds per stage, summed over the arm's releases (`stage_runs`), and the spread of "
        "single releases:",
        "",
        "| | " + " | ".join(a["arm"] for a in r["arms"]) + " |",
        "|---|" + "---|" * len(r["arms"]),
    ]
    stages = {s for a in r["arms"] for s in a["catalog"]["stage_seconds"]}
    for stage in sorted(
        stages, key=lambda s: -max(a["catalog"]["stage_seconds"].get(s) or 0 for a in r["arms"])
    ):
        lines.append(
            f"| stage {stage} | "
            + " | ".join(f"{a['catalog']['stage_seconds'].get(stage) or 0:.1f}" for a in r["arms"])
            + " |"
        )
    for key, label in (
        ("release_seconds_min", "fastest release"),
        ("release_seconds_median_first_half", "median release, first half of the weeks"),
        ("release_seconds_median_second_half", "median release, second half of the weeks"),
        ("release_seconds_max", "slowest release"),
    ):
        lines.append(
            f"| {label} | "
            + " | ".join(
                "" if a["catalog"][key] is None else f"{a['catalog'][key]:.1f}" for a in r["arms"]
            )
            + " |"
        )
    lines += ["", "Peak RSS:", ""]
    for a in r["arms"]:
        extra = (
            f"; Dask workers {', '.join(f'{x:.0f}' for x in a['worker_peak_rss_mib'])} MiB"
            if "worker_peak_rss_mib" in a
            else ""
        )
        lines.append(
            f"- after {a['arm']}: benchmark process {a['process_peak_rss_mib']:.0f} MiB "
            f"(its peak so far){extra}"
        )
    if r.get("reading"):  # written by hand after the run, from the figures above
        lines += ["", "### Reading", "", r["reading"]]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
