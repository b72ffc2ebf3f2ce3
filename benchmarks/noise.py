"""Cost of floating-point-safe noise: OpenDP + CSPRNG (unseeded) against seeded numpy.

    pip install -e .
    python benchmarks/noise.py         # writes benchmarks/noise_results.md

Every measurement runs its variants in one process, ROUNDS rounds, the order rotating
every round (the machine is shared and noisy), and reports the medians and the ratio to
seeded numpy:
1. raw throughput of ``add_laplace`` and ``add_gaussian`` on vectors of 10^5 and 10^6
   (what a release runs: one worker thread per usable core on large vectors), and at 10^5
   also one OpenDP call on one thread;
2. the random generator behind everything that is not additive noise (uniforms): numpy's
   PCG64 against randomgen's ChaCha20 (the secure choice) and AESCounter (for reference);
3. whole trainings on PHEME clean (5,698 tweets, V = 5,942, no vocabulary selection) at
   k = 5 and 20 iterations (the release default): ``dp-vi`` (the default M2) and
   ``hdp-lda``, through the registry with the calibration a release does.
Numba runs on one thread, as in benchmarks/m2.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from harness import at_start, compare, pheme_corpus, save  # noqa: E402
from m2 import _mechanism  # noqa: E402  (sets the single-thread numba environment first)

from fdptm.parallel import workers  # noqa: E402
from fdptm.privacy.noise import (  # noqa: E402
    OPENDP_GAUSSIAN,
    OPENDP_LAPLACE,
    NoiseSource,
    opendp_measurement,
)

ROUNDS = 3
TOPICS = 5
ITERATIONS = 20
SIZES = (100_000, 1_000_000)
TITLE = "Floating-point-safe noise: cost"


def interleaved(variants: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Median seconds of each variant over ROUNDS rounds (``harness.compare``)."""
    return compare(variants, ROUNDS)


def _row(what: str, n: int, t: dict[str, float], secure: str = "secure") -> dict:
    return {"what": what, "n": n, "secure": t[secure], "seeded": t["seeded"]}


def throughput() -> list[dict]:
    rows = []
    values = np.random.default_rng(0).uniform(-1.0, 1.0, max(SIZES))
    for kind, sampler in (("laplace", OPENDP_LAPLACE), ("gaussian", OPENDP_GAUSSIAN)):
        for n in SIZES:
            x = values[:n]

            def add(seed: int | None, kind=kind, x=x) -> np.ndarray:
                source = NoiseSource.create(seed)
                return (source.add_laplace if kind == "laplace" else source.add_gaussian)(x, 1.0)

            variants = {"secure": lambda a=add: a(None), "seeded": lambda a=add: a(1)}
            if n == min(SIZES):
                variants["one thread"] = lambda s=sampler, x=x: opendp_measurement(s, 1.0, x.size)(
                    x
                )
            t = interleaved(variants)
            rows.append(_row(f"{kind}, n = {n:,}, {workers()} threads", n, t))
            if "one thread" in t:
                rows.append(_row(f"{kind}, n = {n:,}, one thread", n, t, "one thread"))
    return rows


def generators() -> list[dict]:
    import randomgen

    n = 10_000_000
    key = int.from_bytes(os.urandom(32), "little")
    pcg = np.random.Generator(np.random.PCG64())
    rows = []
    for name, bits in (
        ("ChaCha20 (the secure choice)", randomgen.ChaCha(key=key, rounds=20)),
        ("AESCounter", randomgen.AESCounter(key=key >> 128)),
    ):
        gen = np.random.Generator(bits)
        t = interleaved({"secure": lambda g=gen: g.random(n), "seeded": lambda: pcg.random(n)})
        rows.append(_row(f"{name} vs PCG64, {n:,} uniforms", n, t))
    return rows


def trainings() -> list[dict]:
    corpus = pheme_corpus()[1]
    rows = []
    for name in ("dp-vi", "hdp-lda"):
        epsilon = 5.0 if name == "dp-vi" else 400.0
        m, params = _mechanism(name, epsilon, 1e-5, TOPICS, ITERATIONS)
        _, warm = _mechanism(name, epsilon, 1e-5, TOPICS, 2)
        m.train(corpus, TOPICS, warm, NoiseSource.create(0))  # numba compilation

        def train(seed: int | None, m=m, params=params) -> np.ndarray:
            return m.train(corpus, TOPICS, params, NoiseSource.create(seed))

        noised = ITERATIONS * corpus.n_words * TOPICS
        if name == "hdp-lda":
            noised += corpus.n_words * TOPICS  # the final release
        t = interleaved({"secure": lambda tr=train: tr(None), "seeded": lambda tr=train: tr(2)})
        what = (
            f"{name}, PHEME, k = {TOPICS}, {ITERATIONS} iterations, V = {corpus.n_words:,} "
            f"({noised:,} noised entries)"
        )
        rows.append(_row(what, noised, t))
    return rows


def _table(rows: list[dict], secure: str, seeded: str, per_second: bool) -> list[str]:
    head = f"| what | {secure} (s) | {seeded} (s) | ratio |"
    rule = "|---|---|---|---|"
    if per_second:
        head += f" {secure} draws/s | {seeded} draws/s |"
        rule += "---|---|"
    lines = [head, rule]
    for r in rows:
        ratio = r["secure"] / r["seeded"]
        line = f"| {r['what']} | {r['secure']:.3g} | {r['seeded']:.3g} | {ratio:,.3g} |"
        if per_second:
            line += f" {r['n'] / r['secure']:,.0f} | {r['n'] / r['seeded']:,.0f} |"
        lines.append(line)
    return lines


def render(raw: list[dict], gens: list[dict], runs: list[dict]) -> str:
    from importlib.metadata import version

    return "\n".join(
        [
            f"opendp {version('opendp')} · randomgen {version('randomgen')}. "
            f"Medians of {ROUNDS} interleaved rounds (the variants alternate, the order "
            "rotating every round) on a shared machine. `add_laplace`/`add_gaussian` noise "
            f"vectors of 2 x 2^12 entries or more on {workers()} worker threads (one per usable "
            "core); 'one thread' is a single OpenDP call on the whole vector. Numba runs on "
            "one thread. 'ratio' is the first time over the second; worker threads only pay "
            "when a core is free.",
            "",
            "### Raw throughput of add_laplace / add_gaussian",
            "",
            *_table(raw, "OpenDP", "seeded numpy", True),
            "",
            "### The generator for everything that is not additive noise",
            "",
            *_table(gens, "CSPRNG", "PCG64", False),
            "",
            "### Whole trainings: the unseeded release path against the seeded test path",
            "",
            *_table(runs, "OpenDP + ChaCha20", "seeded numpy", False),
            "",
        ]
    )


def main() -> None:
    record = {"machine": at_start()}
    record |= {"raw": throughput(), "generators": generators(), "trainings": trainings()}
    body = render(record["raw"], record["generators"], record["trainings"])
    print(save("noise_results", TITLE, body, record).read_text())


if __name__ == "__main__":
    main()
