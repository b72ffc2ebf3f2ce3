"""DP set union's policies side by side on real releases: what the uniform policies (the
ones whose per-author weights reduce to one vector on a Dask cluster) cost in utility.

    pip install -e .
    python benchmarks/m1_uniform.py                 # 3 seeds: writes m1_uniform.md and .json
    python benchmarks/m1_uniform.py --seeds 1 --out /tmp/m1   # a quicker look

Each row is a real release on PHEME (``../shared/data/pheme/pheme_clean.json``, 5,698 tweets,
document level, k = 5, delta = 1e-5) through ``benchmarks/utility.py``'s ``Runner`` (the
release flow inside one Prefect test harness, the release read back and scored with
``fdptm.evaluation``): the default request (``dp-vi``, M1 DP set union at m1_fraction 0.5)
with ``set_union_policy`` set to each policy, at epsilon 1 and 3, seeds 0, 1, 2 (seeded,
``Runner.release(..., seed=s)``: TEST runs with the production noise distributions).
Scores are the utility benchmark's: NPMI against the corpus, words above the row's floor,
vocabulary size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, save  # noqa: E402
from utility import (  # noqa: E402
    DELTA,
    PHEME,
    PHEME_TOPICS,
    Row,
    Runner,
    Texts,
    _preprocess,
    write_json_texts,
)

TITLE = "DP set union's policies on PHEME releases (k = 5, dp-vi defaults)"
POLICIES = ("weighted", "policy-gaussian", "uniform-laplace", "uniform-gaussian")
EPSILONS = (1.0, 3.0)


def run(seeds: int) -> dict:
    from prefect.testing.utilities import prefect_test_harness

    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    started = at_start()
    raw = json.loads(PHEME.read_text())["text"]
    tokens = _preprocess(raw)
    texts = Texts(tokens)
    runner = Runner()
    start = time.perf_counter()
    harness = prefect_test_harness(server_startup_timeout=180)
    with harness, tempfile.TemporaryDirectory(prefix="fdptm-m1-") as tmp:
        workspace = Workspace.resolve(Path(tmp) / "ws")
        ingest(write_json_texts(Path(tmp) / "pheme.json", raw), "pheme", workspace)
        for seed in range(seeds):
            for eps in EPSILONS:
                for policy in POLICIES:
                    row = Row(policy, policy, {"set_union_policy": policy})
                    runner.release(
                        "m1", row, workspace, "pheme",
                        epsilon=eps, topics=PHEME_TOPICS, rep=seed, reference=tokens,
                        texts=texts, seed=seed,
                    )  # fmt: skip
    for record in runner.records:
        record.pop("words", None)
    return {
        "machine": started,
        "delta": DELTA,
        "minutes": (time.perf_counter() - start) / 60,
        "records": runner.records,
    }


def render(result: dict) -> str:
    lines = [
        f"Run time {result['minutes']:.1f} min. Medians over seeds (min-max in brackets); "
        "delta = 1e-5; M1 gets half the budget (the default m1_fraction 0.5). `failed` "
        "counts releases whose DP vocabulary was smaller than k (M2 refunded).",
        "",
        "| epsilon | policy | releases | failed | vocabulary | NPMI | words above floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for eps in EPSILONS:
        for policy in POLICIES:
            recs = [r for r in result["records"] if r["epsilon"] == eps and r["row"] == policy]
            ok = [r for r in recs if r["ok"]]

            def cell(key: str, digits: int, ok: list = ok) -> str:
                if not ok:
                    return "-"
                values = [r[key] for r in ok]
                return (
                    f"{statistics.median(values):.{digits}f} "
                    f"[{min(values):.{digits}f}, {max(values):.{digits}f}]"
                )

            lines.append(
                f"| {eps:g} | {policy} | {len(recs)} | {len(recs) - len(ok)} | "
                f"{cell('vocabulary', 0)} | {cell('npmi', 3)} | {cell('above_floor', 1)} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", help="output stem (default benchmarks/m1_uniform)")
    args = parser.parse_args()
    result = run(args.seeds)
    print(save("m1_uniform", TITLE, render(result), result, args.out).read_text())


if __name__ == "__main__":
    main()
