"""Ingest against the size of the dataset: time and peak memory of each file's ingest.

    python benchmarks/ingest_scale.py                    # writes benchmarks/ingest_scale.md
    python benchmarks/ingest_scale.py --baseline-python /path/to/other/venv/bin/python

The product issue (issue 13, item 1): ingest's duplicate check against the stored batches
must be an anti-join in DuckDB, not a Python dict of every earlier id, so that one file's
ingest costs the same whatever the dataset already holds.

Corpus. ``--files`` Parquet files of ``--docs`` documents each (``doc_id`` unique across
files, ``text`` 16 words drawn from 12; no author column: document level, every document
its own unit, so every stored id is a unit key the check must look up). Each file is
ingested with ``fdptm ingest FILE --dataset s --workspace W`` as its own process; the
benchmark records its wall time and its peak resident memory (``/usr/bin/time -f %M``).

Arms, interleaved file by file so that the shared machine's load falls on both alike: this
checkout's interpreter, and with ``--baseline-python`` another checkout's (an editable
install of the code before the change) on its own workspace. Each process runs in the
temporary folder, so no interpreter imports the checkout it was started from. The table
gives each file's time and memory, and the slope of time against the number of documents
already stored.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, code_version, save  # noqa: E402

TITLE = "Ingest against the size of the dataset"

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
]


def write_files(folder: Path, files: int, docs: int) -> list[Path]:
    """``files`` Parquet files of ``docs`` documents with ids unique across files."""
    rng = np.random.default_rng(0)
    words = np.array(WORDS)
    paths = []
    for f in range(files):
        text = [" ".join(row) for row in rng.choice(words, (docs, 16))]
        path = folder / f"{f:03d}.parquet"
        pq.write_table(pa.table({"doc_id": [f"f{f}-{i}" for i in range(docs)], "text": text}), path)
        paths.append(path)
    return paths


def ingest(python: str, path: Path, workspace: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one ``fdptm ingest`` process."""
    cmd = ["/usr/bin/time", "-f", "%M", python, "-m", "fdptm.cli", "ingest", str(path)]
    cmd += ["--dataset", "s", "--workspace", str(workspace)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=workspace.parent)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({python}): {done.stderr[-2000:]}")
    return wall, int(done.stderr.strip().splitlines()[-1]) / 1024


def checkout_of(python: str) -> str:
    """The commit of the checkout whose ``fdptm`` the interpreter ``python`` imports."""
    where = subprocess.run(
        [python, "-c", "import fdptm, pathlib; print(pathlib.Path(fdptm.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",  # not this checkout: python -c would import its fdptm first
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return f"{commit} ({where})"


def slope(stored: list[int], seconds: list[float]) -> float:
    """Least-squares seconds per 1,000,000 documents already stored."""
    return float(np.polyfit(np.asarray(stored) / 1e6, seconds, 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=12)
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--baseline-python", help="another checkout's interpreter, interleaved")
    ap.add_argument("--out", help="output stem (default benchmarks/ingest_scale)")
    args = ap.parse_args()
    started = at_start()
    arms = {"this": sys.executable}
    if args.baseline_python:
        arms["baseline"] = args.baseline_python
    versions = {"this": code_version()}
    if args.baseline_python:
        versions["baseline"] = checkout_of(args.baseline_python)
    rows = []
    with tempfile.TemporaryDirectory(dir=HERE.parent.parent) as tmp:
        folder = Path(tmp)
        paths = write_files(folder, args.files, args.docs)
        for f, path in enumerate(paths):
            row = {"file": f + 1, "stored_before": f * args.docs}
            for arm, python in arms.items():
                row[arm] = ingest(python, path, folder / f"ws-{arm}")
            rows.append(row)
            print(row, flush=True)
    stored = [r["stored_before"] for r in rows]
    result = {
        "machine": started,
        "files": args.files,
        "docs": args.docs,
        "versions": versions,
        "rows": rows,
        "slope_s_per_million_stored": {a: slope(stored, [r[a][0] for r in rows]) for a in arms},
    }
    print(save("ingest_scale", TITLE, render(result), result, args.out).read_text())


def render(r: dict) -> str:
    arms = list(r["versions"])
    lines = [
        f"{r['files']} files of {r['docs']:,} documents (document level), interleaved file "
        "by file. Method: module docstring of `benchmarks/ingest_scale.py`.",
        "",
        "Code: " + ", ".join(f"{a} = {v}" for a, v in r["versions"].items()),
        "",
        "| file | documents stored before | "
        + " | ".join(f"{a}: wall s | {a}: peak MiB" for a in arms)
        + " |",
        "|---|---|" + "---|---|" * len(arms),
    ]
    for row in r["rows"]:
        cells = " | ".join(f"{row[a][0]:.1f} | {row[a][1]:.0f}" for a in arms)
        lines.append(f"| {row['file']} | {row['stored_before']:,} | {cells} |")
    lines += [
        "",
        "Slope of one file's ingest time against the documents already stored: "
        + ", ".join(
            f"{a} {v:.2f} s per million" for a, v in r["slope_s_per_million_stored"].items()
        )
        + ".",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
