"""Scale: `fdptm release --topics 10` (dp-vi, or ``--mechanism``) against the number of documents.

    python benchmarks/scale.py                        # 5k, 50k, 500k; writes benchmarks/scale.md
    python benchmarks/scale.py --sizes 10000000 --out /tmp/scale10m
    python benchmarks/scale.py --sizes 500000 --mechanism biterm   # the default M2

The product issue's targets (issue 13): 10,000,000 documents of about 16 tokens in under 15
minutes wall and 8 GB peak memory on a 2-core machine; 500,000 in under 40 s with the data
stages at CPU/wall >= 1.7; a table of cost per stage against N with the slope per document.

Corpus. A synthetic LDA corpus (10 topics over real English words, eta 0.05, alpha 0.1;
``fdptm.evaluation.synthetic.generate_lda`` with one topic matrix for every chunk, document
length 3 + Poisson(13), so about 16 tokens after PRE): the words are the most frequent
PRE-stable words of the public list ``wordfreq:en:5000`` (``--words``, default 3,000), so a
document's tokens are exactly its drawn words. It is written as Parquet files of at most
``--docs-per-file`` documents (``doc_id``, ``text``; no author column: document-level
adjacency, each document its own privacy unit), each ingested as one batch with
``fdptm ingest`` (timed, not part of the release).

Release. ``fdptm release --dataset scale --epsilon 3 --delta 1e-6 --mechanism dp-vi
--topics 10 --iterations 20 --no-progress`` as its own process, Prefect's ephemeral API
included: M1 is DP set union over the private words (the default), no seed (the production
noise). While it runs the benchmark samples the process tree (the CLI, Prefect's API server
and any worker process) at 5 Hz from /proc: resident memory summed over the tree (peak
reported) and CPU seconds (user + system of the live processes plus what their reaped
children used). Each stage's wall time comes from the catalog's ``stage_runs``; its CPU is
the tree's CPU between the stage's start and end (interpolated between samples), so
``CPU/wall`` near 2 means both cores were busy in that stage, and its peak memory the
largest tree RSS sampled inside it.

Slope. Per stage, the least-squares line through (N, seconds) over the sizes run: seconds
per 1,000,000 documents, and the intercept (a fixed cost).

Against another checkout (``--baseline-python PATH``, the ``python`` of its own install)
and over ``--rounds N``: the corpus is generated and ingested once per size, into a
workspace that each release then gets a fresh copy of, and the arms alternate in rotating
order (``harness.rounds``); the table gives each arm's median, its range, and the median
of the per-round ratios. The size's row in the main table is this code's median release
(the lower middle one for an even number of rounds).

    python benchmarks/scale.py --sizes 500000 --mechanism biterm --rounds 3 \
        --baseline-python /path/to/other/.venv/bin/python
"""

from __future__ import annotations

import argparse
import bisect
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, checkpoint, clean_env, fdptm_argv, measure, rounds, save  # noqa: E402

DATASET = "scale"
TOPICS = 10


def release_argv(mechanism: str) -> list[str]:
    """The release timed: dp-vi with 20 iterations (the issue's case), or another M2 with
    its own defaults (``--mechanism``, e.g. the default M2, biterm)."""
    iterations = ["--iterations", "20"] if mechanism == "dp-vi" else []
    return [
        "release",
        "--dataset",
        DATASET,
        "--epsilon",
        "3",
        "--delta",
        "1e-6",
        "--mechanism",
        mechanism,
        "--topics",
        str(TOPICS),
        *iterations,
        "--no-progress",
    ]


TITLE = "Scale: `fdptm release --topics 10` against N (dp-vi unless a run names its M2)"
TARGETS = "500,000 documents in <= 40 s; 10,000,000 in <= 10 min and <= 8 GB (issue 30)"


def words(n: int) -> list[str]:
    """The ``n`` most frequent PRE-stable words of wordfreq's English list."""
    from fdptm.tasks.preprocess import PreConfig, preprocess_texts
    from fdptm.tasks.public_vocabulary import _wordfreq_counts

    counts = _wordfreq_counts("en:5000", PreConfig())
    ranked = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    stable = [w for w, t in zip(ranked, preprocess_texts(ranked), strict=True) if t == [w]]
    if len(stable) < n:
        raise SystemExit(f"only {len(stable)} PRE-stable words, --words {n} asked")
    return stable[:n]


def write_corpus(directory: Path, n_docs: int, n_words: int, per_file: int) -> dict:
    """Parquet files of synthetic documents; returns the corpus's shape."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from fdptm.evaluation.synthetic import generate_lda

    vocab = pa.array(words(n_words))
    phi = np.random.default_rng(0).dirichlet(np.full(n_words, 0.05), size=TOPICS)
    tokens, files = 0, 0
    for start in range(0, n_docs, per_file):
        n = min(per_file, n_docs - start)
        lda = generate_lda(n, n_words, TOPICS, doc_length=16, seed=1 + files, phi=phi)
        ptr, ids = lda.corpus.doc_ptr, lda.corpus.words
        texts = pc.binary_join(
            pa.ListArray.from_arrays(pa.array(ptr.astype(np.int32)), vocab.take(ids)), " "
        )
        doc_ids = pc.binary_join_element_wise(
            "d", pa.array(np.arange(start, start + n)).cast(pa.string()), ""
        )
        pq.write_table(
            pa.table({"doc_id": doc_ids, "text": texts}), directory / f"part{files:04d}.parquet"
        )
        tokens += int(ptr[-1])
        files += 1
    return {"documents": n_docs, "tokens": tokens, "files": files, "words": n_words}


def _cpu_at(samples: list[tuple[float, float]], t: float) -> float:
    times = [s[0] for s in samples]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return samples[0][1]
    if i >= len(samples):
        return samples[-1][1]
    (t0, c0, _), (t1, c1, _) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0)


def stages(root: Path, samples: list) -> dict:
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace

    rows = Catalog(Workspace.resolve(root)).query(
        "SELECT s.stage, epoch(s.started_at) AS s, epoch(s.finished_at) AS f FROM stage_runs s "
        "JOIN runs r USING (run_id) WHERE r.kind = 'release' ORDER BY s.started_at"
    )
    out = {}
    for r in rows:
        wall = r["f"] - r["s"]
        cpu = _cpu_at(samples, r["f"]) - _cpu_at(samples, r["s"])
        inside = [m for t, _, m in samples if r["s"] <= t <= r["f"]]
        out[r["stage"]] = {"wall": wall, "cpu": cpu, "peak_mib": max(inside, default=None)}
    return out


def one_size(n_docs: int, args: argparse.Namespace, arms: dict[str, list[str]]) -> dict:
    """Generate and ingest ``n_docs`` documents once, then time the release of every arm
    (``fdptm`` commands) in ``args.rounds`` interleaved rounds, each on a fresh copy of the
    ingested workspace."""
    with tempfile.TemporaryDirectory(prefix="fdptm-scale-") as tmp:
        tmp = Path(tmp)
        (tmp / "corpus").mkdir()
        t = time.perf_counter()
        shape = write_corpus(tmp / "corpus", n_docs, args.words, args.docs_per_file)
        shape["generate_seconds"] = time.perf_counter() - t
        ingested = tmp / "ingested"
        env = clean_env(ingested)  # Prefect's home as the user's: its database exists
        t = time.perf_counter()
        for f in sorted((tmp / "corpus").glob("*.parquet")):
            subprocess.run(
                [*arms["new"], "ingest", str(f), "--dataset", DATASET],
                env=env,
                check=True,
                capture_output=True,
            )
            f.unlink()
        ingest = time.perf_counter() - t
        print(f"[{time.strftime('%H:%M:%S')}] N={n_docs:,}: ingested in {ingest:.1f} s", flush=True)

        def release(arm: str) -> dict:
            workspace = tmp / "ws"
            shutil.rmtree(workspace, ignore_errors=True)
            shutil.copytree(ingested, workspace)
            run = measure(
                [*arms[arm], *release_argv(args.mechanism)], clean_env(workspace), interval=0.2
            )
            return {
                "release_wall": run.wall,
                "release_cpu": run.cpu,
                "peak_mib": run.peak_mib,
                "stages": stages(workspace, run.samples),
            }

        runs = rounds(arms, args.rounds, release, lambda r: f"{r['release_wall']:.1f} s")
        new = sorted(runs["new"], key=lambda r: r["release_wall"])[(len(runs["new"]) - 1) // 2]
        print(
            f"[{time.strftime('%H:%M:%S')}] N={n_docs:,}: release {new['release_wall']:.1f} s "
            f"wall (median), {new['release_cpu']:.1f} s CPU, peak {new['peak_mib']:.0f} MiB",
            flush=True,
        )
        return {
            "documents": n_docs,
            "corpus": shape,
            "ingest_seconds": ingest,
            **new,
            "runs": runs,
        }


def slopes(results: list[dict]) -> dict:
    """Per stage: seconds per million documents and intercept, least squares over sizes."""
    if len(results) < 2:
        return {}
    out = {}
    names = sorted({s for r in results for s in r["stages"]} | {"release"})
    n = np.array([r["documents"] for r in results], dtype=float)
    for name in names:
        y = np.array(
            [
                r["release_wall"] if name == "release" else r["stages"].get(name, {}).get("wall", 0)
                for r in results
            ]
        )
        slope, intercept = np.polyfit(n, y, 1)
        out[name] = {"seconds_per_million": slope * 1e6, "intercept": intercept}
    return out


def render(r: dict) -> str:
    lines = [
        "Release: `fdptm "
        + " ".join(release_argv(r.get("mechanism", "dp-vi")))
        + "` (production noise, no seed). Corpus: "
        f"synthetic LDA over {r['words']:,} real words, about 16 tokens per document, "
        f"Parquet files of at most {r['docs_per_file']:,} documents, one batch each. "
        "CPU is the release's process tree (CLI, Prefect's API server, workers); "
        "peak memory is the tree's summed RSS. See the module docstring for the method.",
        "",
        "| N | release wall (s) | CPU (s) | CPU/wall | peak RSS (MiB) | ingest (s) | "
        + " | ".join(f"{s}: wall (s), CPU/wall, peak (MiB)" for s in r["stage_names"])
        + " |",
        "|---" * (6 + len(r["stage_names"])) + "|",
    ]
    for x in r["results"]:
        cells = []
        for s in r["stage_names"]:
            st = x["stages"].get(s)
            ratio = "" if st is None else f"{st['cpu'] / max(st['wall'], 1e-9):.2f}"
            peak = "" if st is None or st.get("peak_mib") is None else f", {st['peak_mib']:,.0f}"
            cells.append("" if st is None else f"{st['wall']:.1f}, {ratio}{peak}")
        lines.append(
            f"| {x['documents']:,} | {x['release_wall']:.1f} | {x['release_cpu']:.1f} | "
            f"{x['release_cpu'] / x['release_wall']:.2f} | {x['peak_mib']:,.0f} | "
            f"{x['ingest_seconds']:.1f} | " + " | ".join(cells) + " |"
        )
    if r["slopes"]:
        lines += [
            "",
            "## Slope per stage (least squares over the sizes above)",
            "",
            "| stage | seconds per 1M documents | fixed (s) |",
            "|---|---|---|",
        ]
        for name, s in r["slopes"].items():
            lines.append(f"| {name} | {s['seconds_per_million']:.2f} | {s['intercept']:.2f} |")
    compared = [
        x
        for x in r["results"]
        if len(x.get("runs", {}).get("new", [])) > 1 or len(x.get("runs", {})) > 1
    ]
    if compared:
        lines += [
            "",
            "### Interleaved rounds",
            "",
            f"Baseline: `{r['machine'].get('baseline', 'none')}` (its own install).",
            "",
            "| N | arm | rounds | median wall (s) | min (s) | max (s) | median train (s) | "
            "median ratio to baseline |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for x in compared:
            runs = x["runs"]
            for arm, got in runs.items():
                walls = [g["release_wall"] for g in got]
                trains = [g["stages"].get("train", {}).get("wall", float("nan")) for g in got]
                ratio = ""
                if arm != "baseline" and "baseline" in runs:
                    base = [g["release_wall"] for g in runs["baseline"]]
                    ratios = [a / b for a, b in zip(walls, base, strict=True)]
                    ratio = f"{statistics.median(ratios):.2f}"
                lines.append(
                    f"| {x['documents']:,} | {arm} | {len(got)} | {statistics.median(walls):.1f} | "
                    f"{min(walls):.1f} | {max(walls):.1f} | {statistics.median(trains):.1f} | "
                    f"{ratio} |"
                )
    for f in r.get("failed", []):
        lines += ["", f"N = {f['documents']:,} failed: `{f['error'][-300:]}`"]
    if r.get("note"):
        lines += ["", r["note"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="5000,50000,500000")
    parser.add_argument("--words", type=int, default=3000)
    parser.add_argument("--docs-per-file", type=int, default=1_000_000)
    parser.add_argument("--out", help="output stem (default benchmarks/scale)")
    parser.add_argument("--note", default="")
    parser.add_argument("--mechanism", default="dp-vi", help="the M2 released (default dp-vi)")
    parser.add_argument("--rounds", type=int, default=1, help="releases per arm, interleaved")
    parser.add_argument(
        "--baseline-python", help="the python of another checkout's install: a second arm"
    )
    args = parser.parse_args()
    started = at_start()
    arms = {"new": fdptm_argv()}
    if args.baseline_python:
        arms["baseline"] = fdptm_argv(args.baseline_python)
        started["baseline"] = args.baseline_python
    results, failed = [], []
    for n in args.sizes.split(","):
        try:
            results.append(one_size(int(n), args, arms))
        except RuntimeError as exc:  # e.g. out of memory: report it, keep the other sizes
            print(f"N={int(n):,}: {exc}", flush=True)
            failed.append({"documents": int(n), "error": str(exc)[-1500:]})
        report = {
            "machine": started,
            "words": args.words,
            "docs_per_file": args.docs_per_file,
            "mechanism": args.mechanism,
            "results": results,
            "failed": failed,
            "stage_names": list(dict.fromkeys(s for x in results for s in x["stages"])),
            "slopes": slopes(results),
            "note": args.note,
        }
        checkpoint("scale", report, args.out)  # after every size: a later crash loses nothing
    print(save("scale", TITLE, render(report), report, args.out).read_text())


if __name__ == "__main__":
    main()
