"""Exact noise: fdptm's compiled sampler against OpenDP's, on one core and in a training.

    pip install -e .
    python benchmarks/exact_noise.py      # writes benchmarks/exact_noise.md (and .json)

Rows 1-2 per scale: draws per second on one core (FDPTM_THREADS=1) of
``fdptm.privacy.exact`` and of OpenDP's ``make_gaussian``/``make_laplace`` on i64 (the
reference), interleaved over ROUNDS rounds; the target is >= 2M draws/s/core and >= 40x
OpenDP. Then the two samplers inside a whole unseeded dp-vi training on PHEME (k = 10,
20 iterations, every core), the noise a release pays for.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CALLER_THREADS = os.environ.get("FDPTM_THREADS")
os.environ["FDPTM_THREADS"] = "1"  # the draw rows: one core, whatever the caller set
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from harness import Table, compare, pheme_corpus  # noqa: E402

ROUNDS = 5
TARGETS = ">= 2,000,000 draws/s/core and >= 40x OpenDP's sampler (issue 30)"
OURS = 2_000_000
THEIRS = 40_000
SCALES = [
    ("gaussian", 10.0, "dp-vi at a small statistic"),
    ("gaussian", 1234.5, ""),
    ("gaussian", 4.0e6, "dp-vi's grid units (z C / 2^-20)"),
    ("laplace", 3.0, ""),
    ("laplace", 2.5 * 2**20, "grid Laplace 2.5 on 2^-20 (zhu, cdp-lda)"),
]


def opendp_sampler(kind: str, scale: float):
    import opendp.domains as dp
    import opendp.measurements as m
    from opendp.metrics import l1_distance, l2_distance
    from opendp.mod import enable_features

    enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T="i64"))
    if kind == "gaussian":
        return m.make_gaussian(domain, l2_distance(T="i64"), scale=scale)
    return m.make_laplace(domain, l1_distance(T="i64"), scale=scale)


def one_core(table: Table) -> None:
    from fdptm.privacy import exact

    exact.discrete_gaussian(3.0, 10)
    exact.discrete_laplace(3.0, 10)
    for kind, scale, note in SCALES:
        ours = getattr(exact, f"discrete_{kind}")
        theirs = opendp_sampler(kind, scale)
        zeros = [0] * THEIRS
        arms = {
            "fdptm": lambda f=ours, s=scale: f(s, OURS),
            "opendp": lambda f=theirs, z=zeros: f(z),
        }
        t = compare(arms, ROUNDS)
        rate, reference = OURS / t["fdptm"], THEIRS / t["opendp"]
        what = f"{kind}, scale {scale:g}" + (f" ({note})" if note else "")
        table.add(what, "1 core", round(rate), round(reference), rate / reference)


def training(table: Table) -> None:
    if CALLER_THREADS is None:
        os.environ.pop("FDPTM_THREADS")
    else:
        os.environ["FDPTM_THREADS"] = CALLER_THREADS
    from m2 import _mechanism

    from fdptm.privacy.noise import NoiseSource

    corpus = pheme_corpus()[1]
    m, params = _mechanism("dp-vi", 5.0, 1e-5, 10, 20)
    _, warm = _mechanism("dp-vi", 5.0, 1e-5, 10, 2)
    m.train(corpus, 10, warm, NoiseSource.create(None, sampler="exact"))
    arms = {
        sampler: lambda s=sampler: m.train(corpus, 10, params, NoiseSource.create(None, sampler=s))
        for sampler in ("exact", "opendp")
    }
    t = compare(arms, 3)
    noised = 20 * corpus.n_words * 10
    what = f"dp-vi training, PHEME, k = 10, 20 iterations ({noised:,} noised entries), s"
    table.add(
        what,
        f"{len(os.sched_getaffinity(0))} cores",
        t["exact"],
        t["opendp"],
        t["opendp"] / t["exact"],
    )


def main() -> None:
    table = Table(
        name="exact_noise",
        title="Exact noise: fdptm's sampler against OpenDP's",
        notes=(
            f"Medians of {ROUNDS} interleaved rounds (3 for the training). Draw rows: draws "
            f"per second, {OURS:,} draws of fdptm.privacy.exact against {THEIRS:,} of "
            "OpenDP's sampler on i64 (make_gaussian / make_laplace), both on one thread, both "
            "unseeded (ChaCha20 keystream; OpenSSL RAND_bytes). Training row: seconds of an "
            "unseeded dp-vi training through NoiseSource with sampler exact against opendp; "
            "'ratio' is OpenDP's time over fdptm's (draws: fdptm's rate over OpenDP's). "
            "Targets: >= 2,000,000 draws/s/core and >= 40x OpenDP."
        ),
        columns=["what", "threads", "fdptm", "OpenDP", "ratio"],
    )
    one_core(table)
    training(table)
    print(table.write().read_text())


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
