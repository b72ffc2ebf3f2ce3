"""Local DP (LP-LDA and OLP-LDA, hdp-lda-lp-lda-olp-lda.txt sections V and VI): the device's
speed, the server's speed next to non-private CGS, utility on PHEME, and Theorem 7's
variance reduction measured.

    pip install -e .
    python benchmarks/local.py            # all four parts: writes local.md and local.json
    python benchmarks/local.py --quick    # smaller, 1 seed/repetition, written to
                                          # $TMPDIR/fdptm-local-quick.md (not over these)
    python benchmarks/local.py --parts 1,4 --out /tmp/x   # some parts only
    python benchmarks/local.py --render   # re-renders local.md from local.json
    python benchmarks/local.py --parts 3 --update   # reruns part 3 into local.md/.json

NUMBA_NUM_THREADS is set to 1 before numba is imported, and pyarrow's CPU pool to 1 thread:
every timing here is of one core (process CPU time is reported beside the wall time).

1. Device: PHEME tweets (``../shared/data/pheme/pheme_raw.json``) through PRE
   (``fdptm.pre.tokenize``), cycled to 1,000,000 documents, encoded (step 1,
   ``fdptm.local.randomizer.encode``) over the 5,000 most frequent words of the public
   ``wordfreq:en:20000`` list (``build_vocabulary``, what ``fdptm local vocabulary
   wordfreq:en:20000 vocab.json --size 5000`` writes) and flipped (step 2, ``flip_bits``) at
   per-word epsilon 1, 3 and 5. Target: steps 1 + 2 under 10 s on one core.
2. Server: ``lp_lda`` on those reports next to non-private ``train_cgs`` on the true documents
   as sets of their vocabulary words, the same iterations, interleaved, 3 rounds.
   Target: LP-LDA within 2x.
3. Utility on PHEME, k = 5: a random 10% public (vocabulary = its most frequent words, D0),
   the other 90% randomised; LP-LDA, OLP-LDA (3 mini-batches), non-private CGS and the
   central dp-vi release (epsilon 3) scored with ``benchmarks/utility.py``'s ``score``.
4. Eq. 8's variance and Theorem 7's reduction (eq. 19), measured over repeated
   randomisations of one fixed dataset.
"""

from __future__ import annotations

import os

os.environ["NUMBA_NUM_THREADS"] = "1"  # before anything imports numba
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

pa.set_cpu_count(1)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, checkpoint, filled, save, stem  # noqa: E402
from utility import (  # noqa: E402
    DELTA,
    Row,
    Runner,
    Texts,
    floor_listed,
    score,
    write_json_texts,
)

TITLE = "Local DP: LP-LDA and OLP-LDA (device speed, server speed, utility, Theorem 7)"

RAW = HERE.parent.parent / "shared" / "data" / "pheme" / "pheme_raw.json"
WORDFREQ = "wordfreq:en:20000"
DEVICE_VOCABULARY = 5000
DEVICE_DOCS = 1_000_000
WORD_EPSILONS = (1.0, 3.0, 5.0)
TOPICS = 5
ITERATIONS = 200  # LocalParams' default; the non-private CGS runs the same
PUBLIC_SHARE = 0.10
LOCAL_VOCABULARY = 1000  # the paper's 1,000 most frequent words (section VII-A)
BATCHES = 3
CENTRAL_EPSILON = 3.0
OMEGAS = (0.25, 0.5, 0.75)
FIXED_OMEGA = 0.5
DEVICE_TARGET_S = 10.0
SERVER_TARGET_RATIO = 2.0


# --------------------------------------------------------------------------- helpers


def _now() -> float:
    return time.perf_counter()


def _cpu() -> float:
    return time.process_time()


def _med(values: list[float]) -> float:
    return float(statistics.median(values))


def _spread(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{_med(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def _tokens_of(tokens: pa.ListArray) -> int:
    return len(tokens.values)


def _cycled(tokens: pa.ListArray, n: int) -> pa.ListArray:
    """``tokens`` repeated until ``n`` documents (one contiguous ListArray)."""
    reps = -(-n // len(tokens))
    return pa.concat_arrays([tokens] * reps).slice(0, n)


def _binary_corpus(tokens: pa.ListArray, vocabulary):
    """The documents as sets of their vocabulary words (what a report encodes, before the
    flips), as a Corpus: each document's set bits in increasing order, which is what
    ``flows/local_release.py`` builds for D0 (a reconstruction to the true counts). Built
    here with numpy, not with the code under test's ``reconstruct``."""
    from fdptm.local.randomizer import as_bytes, encode
    from fdptm.mechanisms.lda import Corpus

    n_words = vocabulary.size
    bits = as_bytes(encode(tokens, vocabulary), n_words).copy()
    lengths, words = [], []
    for start in range(0, len(bits), 1 << 15):
        dense = np.unpackbits(bits[start : start + (1 << 15)], axis=1, count=n_words,
                              bitorder="little")  # fmt: skip
        lengths.append(dense.sum(axis=1, dtype=np.int64))
        words.append(np.nonzero(dense)[1].astype(np.int32))  # row-major: sorted per row
    doc_ptr = np.zeros(len(bits) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(lengths), out=doc_ptr[1:])
    flat = np.concatenate(words)
    counts = np.bincount(flat, minlength=n_words).astype(np.int64)
    return Corpus(doc_ptr, flat, n_words), bits, counts


def _reports(tokens: pa.ListArray, vocabulary, flip, seed: int) -> np.ndarray:
    """Seeded (test-only keystream) reports, C-contiguous uint8 rows."""
    from fdptm.local.randomizer import KeyStream, as_bytes, encode, flip_bits

    bits = encode(tokens, vocabulary)
    flip_bits(bits, vocabulary.size, flip, KeyStream(seed=seed))
    return as_bytes(bits, vocabulary.size).copy()


def _guarantee(flip, n_words: int) -> dict:
    g = flip.to_dict(n_words)
    return {
        "document_epsilon": g["document_epsilon"],
        "word_epsilon": g["word_epsilon"],
        "flip": g["flip"],
        "text": f"{n_words} x {g['word_epsilon']:.4g} = {g['document_epsilon']:.4g}-LDP per "
        "document (Theorem 4)",
        "word_text": f"{g['word_epsilon']:.4g}-LDP per word",
    }


def expected_keystream_words(bits: int = 24) -> float:
    """E[keystream words per 64 lanes] of the exact sampler: sum over positions i of
    P(some lane undecided after i words) = sum_i 1 - (1 - 2^-i)^64, capped at ``bits``."""
    return float(sum(1.0 - (1.0 - 2.0**-i) ** 64 for i in range(bits)))


COUNTING = ("column_counts", "block_counts")


class Timers:
    """Wall time and calls of wrapped functions (to break one ``lp_lda`` call down)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.tokens = 0

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            start = _now()
            out = fn(*args, **kwargs)
            self.seconds[name] += _now() - start
            self.calls[name] += 1
            if name == "reconstruct":
                self.tokens = int(out[1].size)
            return out

        return timed


@contextlib.contextmanager
def instrumented(timers: Timers):
    """``fdptm.mechanisms.local_dp``'s counting (``column_counts`` or ``block_counts``,
    whichever it imports), ``reconstruct`` and ``_sweeps`` wrapped with timers for the
    duration (module globals in this process only; nothing is edited)."""
    from fdptm.mechanisms import local_dp

    names = [n for n in (*COUNTING, "reconstruct", "_sweeps") if hasattr(local_dp, n)]
    saved = {n: getattr(local_dp, n) for n in names}
    try:
        for n in names:
            setattr(local_dp, n, timers.wrap(n, saved[n]))
        yield
    finally:
        for n, fn in saved.items():
            setattr(local_dp, n, fn)


# --------------------------------------------------------------------------- part 1


def part1(raw: list[str], quick: bool, repeats: int, result: dict) -> dict:
    """Device speed: PRE, encode (step 1), flip (step 2) on 1M PHEME-length documents."""
    from fdptm.local import Flip, KeyStream, randomize_tokens
    from fdptm.local.randomizer import KEYSTREAM_WORDS, as_bytes, encode, flip_bits
    from fdptm.pre import tokenize
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.local_reports import build_vocabulary

    n_docs = DEVICE_DOCS
    out: dict[str, Any] = {"documents": n_docs, "word_epsilons": list(WORD_EPSILONS)}
    # PRE: cold (nltk's WordNet loads on the first call), warm on PHEME, and on cycled texts.
    start, cpu = _now(), _cpu()
    pheme_tokens = tokenize(raw)
    out["pre_pheme_cold"] = {"seconds": _now() - start, "cpu": _cpu() - cpu}
    with tempfile.TemporaryDirectory(prefix="fdptm-local-") as tmp:
        start = _now()
        vocab = build_vocabulary(WORDFREQ, Workspace.resolve(Path(tmp) / "ws"), DEVICE_VOCABULARY)
        out["vocabulary_seconds"] = _now() - start
    out["vocabulary"] = {"source": WORDFREQ, "size": vocab.size, "kept": DEVICE_VOCABULARY}

    start, cpu = _now(), _cpu()
    pheme_tokens = tokenize(raw)
    out["pre_pheme_warm"] = {"seconds": _now() - start, "cpu": _cpu() - cpu}
    pre_docs = 200_000 if quick else n_docs
    cycled_raw = (raw * (-(-pre_docs // len(raw))))[:pre_docs]
    start, cpu = _now(), _cpu()
    tokenize(cycled_raw)
    seconds, cpu_s = _now() - start, _cpu() - cpu
    del cycled_raw
    out["pre_cycled"] = {
        "documents": pre_docs,
        "seconds": seconds,
        "cpu": cpu_s,
        "per_million": seconds * 1e6 / pre_docs,
    }
    out["pre_pheme_per_million"] = out["pre_pheme_warm"]["seconds"] * 1e6 / len(raw)
    out["pheme_documents"] = len(raw)
    out["pheme_tokens_per_doc"] = _tokens_of(pheme_tokens) / len(raw)
    print(
        f"part 1: PRE {out['pre_cycled']['per_million']:.1f} s per 1M "
        f"({pre_docs:,} cycled), cold PHEME {out['pre_pheme_cold']['seconds']:.1f} s",
        flush=True,
    )

    tokens = _cycled(pheme_tokens, n_docs)
    # Warm-up: numba compiles (or loads its cache) on the first call; excluded.
    start = _now()
    warm = encode(tokens.slice(0, 100), vocab)
    flip_bits(warm, vocab.size, Flip.from_word_epsilon(3.0), KeyStream(seed=0))
    randomize_tokens(tokens.slice(0, 100), vocab, Flip.from_word_epsilon(3.0))
    out["warmup_seconds"] = _now() - start
    bits = encode(tokens, vocab)
    in_vocab = int(np.bitwise_count(bits).sum()) if hasattr(np, "bitwise_count") else None
    if in_vocab is None:
        in_vocab = int(np.unpackbits(as_bytes(bits, vocab.size), axis=1).sum())
    out["vocabulary_words_per_doc"] = in_vocab / n_docs
    out["tokens_per_doc"] = _tokens_of(tokens) / n_docs
    del bits

    # ChaCha20 keystream alone, for the share of the flip it explains.
    buffer = np.empty(KEYSTREAM_WORDS, dtype=np.uint64)
    stream = KeyStream(seed=1)
    start = _now()
    for _ in range(20):
        stream.fill(buffer)
    keystream_rate = 20 * buffer.nbytes / (_now() - start)
    width = (vocab.size + 63) // 64
    expected_words = n_docs * width * expected_keystream_words()
    out["keystream"] = {
        "bytes_per_second": keystream_rate,
        "words_per_64_bits": expected_keystream_words(),
        "expected_words": expected_words,
        "expected_seconds": expected_words * 8 / keystream_rate,
    }
    del buffer

    runs = []
    last_bits: dict[float, np.ndarray] = {}
    for rep in range(repeats):
        order = WORD_EPSILONS[rep % 3 :] + WORD_EPSILONS[: rep % 3]
        for eps in order:
            flip = Flip.from_word_epsilon(eps)
            last_bits.pop(eps, None)
            start, cpu = _now(), _cpu()
            bits = encode(tokens, vocab)
            t1, c1 = _now(), _cpu()
            flip_bits(bits, vocab.size, flip, KeyStream(seed=100 * rep + int(eps)))
            t2, c2 = _now(), _cpu()
            reports = as_bytes(bits, vocab.size).copy()
            t3 = _now()
            del bits
            start_p, cpu_p = _now(), _cpu()
            randomize_tokens(tokens, vocab, flip)  # production: os.urandom-keyed ChaCha20
            t4, c4 = _now(), _cpu()
            runs.append(
                {
                    "repeat": rep,
                    "word_epsilon": eps,
                    "encode": t1 - start,
                    "encode_cpu": c1 - cpu,
                    "flip": t2 - t1,
                    "flip_cpu": c2 - c1,
                    "steps": t2 - start,
                    "steps_cpu": c2 - cpu,
                    "pack": t3 - t2,
                    "randomize_tokens": t4 - start_p,
                    "randomize_tokens_cpu": c4 - cpu_p,
                    "report_bits_per_doc": None,
                }
            )
            if rep == repeats - 1:
                runs[-1]["report_bits_per_doc"] = float(
                    np.unpackbits(reports[:10_000], axis=1).sum() / 10_000
                )
                last_bits[eps] = reports
            print(
                f"  eps={eps:g} rep={rep}: encode {t1 - start:.2f} s, flip {t2 - t1:.2f} s, "
                f"steps 1+2 {t2 - start:.2f} s (cpu {c2 - cpu:.2f}), randomize_tokens "
                f"{t4 - start_p:.2f} s",
                flush=True,
            )
            del reports
    out["runs"] = runs
    out["loadavg"] = list(os.getloadavg())
    out["guarantees"] = {str(e): _guarantee(Flip.from_word_epsilon(e), vocab.size) for e in
                         WORD_EPSILONS}  # fmt: skip
    result["part1"] = out
    return {"tokens": tokens, "vocab": vocab, "reports": last_bits}


# --------------------------------------------------------------------------- part 2


def part2(device: dict, n_reports: int, repeats: int, iterations: int, result: dict) -> None:
    """LP-LDA on the device's reports next to non-private CGS on the true documents."""
    from fdptm.local import Flip
    from fdptm.mechanisms.lda import train_cgs
    from fdptm.mechanisms.local_dp import LocalParams, lp_lda
    from fdptm.privacy.noise import NoiseSource

    vocab = device["vocab"]
    tokens = device["tokens"].slice(0, n_reports)
    start = _now()
    truth, _, _ = _binary_corpus(tokens, vocab)
    build = _now() - start
    reports = {e: np.ascontiguousarray(r[:n_reports]) for e, r in device["reports"].items()}
    device["reports"].clear()
    params = LocalParams(topics=TOPICS, iterations=iterations)
    out: dict[str, Any] = {
        "reports": n_reports,
        "vocabulary": vocab.size,
        "iterations": iterations,
        "true_tokens": int(truth.n_tokens),
        "true_corpus_seconds": build,
        "rounds": [],
    }
    jobs = ["cgs", *[f"lp{e:g}" for e in WORD_EPSILONS]]
    # Warm-up (compile or cache load) on a slice; excluded.
    small = {e: np.ascontiguousarray(r[:2000]) for e, r in reports.items()}
    for e, r in small.items():
        lp_lda(r, vocab.size, Flip.from_word_epsilon(e), LocalParams(TOPICS, 2), 0)
    for rnd in range(repeats):
        order = jobs[rnd % len(jobs) :] + jobs[: rnd % len(jobs)]
        row: dict[str, Any] = {"round": rnd, "order": order}
        for job in order:
            if job == "cgs":
                start, cpu = _now(), _cpu()
                train_cgs(truth, TOPICS, iterations, NoiseSource.create(rnd), alpha=params.alpha,
                          beta=params.beta)  # fmt: skip
                row["cgs"] = {"seconds": _now() - start, "cpu": _cpu() - cpu,
                              "tokens": int(truth.n_tokens)}  # fmt: skip
                print(f"  round {rnd}: non-private CGS {row['cgs']['seconds']:.1f} s", flush=True)
                continue
            eps = float(job[2:])
            flip = Flip.from_word_epsilon(eps)
            timers = Timers()
            with instrumented(timers):
                start, cpu = _now(), _cpu()
                lp_lda(reports[eps], vocab.size, flip, params, rnd)
                seconds, cpu_s = _now() - start, _cpu() - cpu
            counting = sum(timers.seconds[n] for n in COUNTING)
            calls = sum(timers.calls[n] for n in COUNTING)
            row[job] = {
                "word_epsilon": eps,
                "seconds": seconds,
                "cpu": cpu_s,
                "counting": counting,
                "counting_calls": calls,
                "counting_functions": [n for n in COUNTING if timers.calls[n]],
                "reconstruction": timers.seconds["reconstruct"],
                "cgs": timers.seconds["_sweeps"],
                "other": seconds - counting - timers.seconds["reconstruct"]
                - timers.seconds["_sweeps"],
                "tokens": timers.tokens,
            }  # fmt: skip
            print(
                f"  round {rnd}: LP-LDA eps={eps:g} {seconds:.1f} s (counting "
                f"{counting:.1f} in {calls} calls, "
                f"reconstruction {timers.seconds['reconstruct']:.1f}, CGS "
                f"{timers.seconds['_sweeps']:.1f}; {timers.tokens:,} tokens)",
                flush=True,
            )
        for e in WORD_EPSILONS:
            lp = row[f"lp{e:g}"]
            lp["ratio"] = lp["seconds"] / row["cgs"]["seconds"]
            lp["cgs_ratio"] = lp["cgs"] / row["cgs"]["seconds"]
        out["rounds"].append(row)
        out["loadavg"] = list(os.getloadavg())
        result["part2"] = out
    reports.clear()
    result["part2"] = out


# --------------------------------------------------------------------------- part 3


def _split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``benchmarks/utility.py``'s target-2 split: a random 10% public, the rest private."""
    order = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(10,))).permutation(n)
    n_pub = round(PUBLIC_SHARE * n)
    return np.sort(order[:n_pub]), np.sort(order[n_pub:])


def setup_split(raw: list[str], seed: int, tmp: Path, *, private_dataset: bool = True) -> dict:
    """Ingest the split into a fresh workspace; the device vocabulary from the public part
    (``build_vocabulary('public:pub', ...)``, as ``fdptm local vocabulary public:pub``)."""
    from fdptm.pre import tokenize
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest
    from fdptm.tasks.local_reports import build_vocabulary

    pub_idx, priv_idx = _split(len(raw), seed)
    workspace = Workspace.resolve(tmp / "ws")
    ingest(write_json_texts(tmp / "pub.json", [raw[i] for i in pub_idx]), "pub", workspace,
           public=True)  # fmt: skip
    if private_dataset:
        ingest(write_json_texts(tmp / "priv.json", [raw[i] for i in priv_idx]), "priv", workspace)
    vocab = build_vocabulary("public:pub", workspace, LOCAL_VOCABULARY)
    pub_tokens = tokenize([raw[i] for i in pub_idx], vocab.pre)
    priv_tokens = tokenize([raw[i] for i in priv_idx], vocab.pre)
    return {
        "workspace": workspace,
        "vocab": vocab,
        "pub_tokens": pub_tokens,
        "priv_tokens": priv_tokens,
        "n_pub": len(pub_idx),
        "n_priv": len(priv_idx),
    }


def _scored(phi: np.ndarray, words, reference, texts, truth=None) -> dict:
    """``utility.score`` with the topics listed by the floor rule (these are not releases)."""
    listed, signal = floor_listed(phi, words)
    scores = score(phi, list(words), listed, signal, reference, texts, truth)
    return {k: None if v is None else float(v) for k, v in scores.items()}


def _record(
    out: dict, seed: int, row: str, phi, seconds: float, words, reference, texts, truth=None,
    **extra,
):  # fmt: skip
    """Score one topic-word matrix (``truth``: the non-private CGS model to compare with) and
    append its record to part 3's records."""
    rec = {"seed": seed, "row": row, "seconds": seconds, **extra,
           **_scored(phi, words, reference, texts, truth)}  # fmt: skip
    out["records"].append(rec)
    print(
        f"  seed={seed} {row}"
        + (f" eps={extra['word_epsilon']:g}" if "word_epsilon" in extra else "")
        + (f" batch={extra['batch']}" if "batch" in extra else "")
        + f": npmi={rec['npmi']:.3f} above={rec['above_floor']:.1f} "
        f"div={rec['diversity']:.2f} {seconds:.1f}s",
        flush=True,
    )
    return rec


def part3(raw: list[str], seeds: list[int], iterations: int, dpvi: bool, result: dict) -> None:
    """Utility of LP-LDA / OLP-LDA on PHEME next to non-private CGS and central dp-vi."""
    from fdptm.local import Flip
    from fdptm.mechanisms.lda import train_cgs
    from fdptm.mechanisms.local_dp import LocalParams, lp_lda, online_start, online_step
    from fdptm.privacy.noise import NoiseSource

    params = LocalParams(topics=TOPICS, iterations=iterations)
    # OLP-LDA with the library's defaults, and with the paper-style fixed omega 0.5 when the
    # default is something else (an omega estimated per batch).
    variants = [("olp-lda", params)]
    if params.omega != FIXED_OMEGA:
        variants.append((f"olp-lda-w{FIXED_OMEGA:g}", replace(params, omega=FIXED_OMEGA)))
    out: dict[str, Any] = {
        "records": [],
        "splits": [],
        "params": params.to_dict(),
        "variants": [name for name, _ in variants],
    }
    result["part3"] = out
    runner = Runner()
    with contextlib.ExitStack() as stack:
        if dpvi:
            from prefect.testing.utilities import prefect_test_harness

            stack.enter_context(prefect_test_harness(server_startup_timeout=180))
        for seed in seeds:
            with tempfile.TemporaryDirectory(prefix="fdptm-local-") as tmp:
                data = setup_split(raw, seed, Path(tmp))
                vocab, V = data["vocab"], data["vocab"].size
                words = list(vocab.words)
                reference = data["priv_tokens"].to_pylist()
                texts = Texts(reference)  # gensim c_npmi's reference: the private 90%
                truth, _, _ = _binary_corpus(data["priv_tokens"], vocab)
                prior, _, _ = _binary_corpus(data["pub_tokens"], vocab)
                out["splits"].append(
                    {
                        "seed": seed,
                        "public": data["n_pub"],
                        "private": data["n_priv"],
                        "vocabulary": V,
                        "true_tokens": int(truth.n_tokens),
                        "prior_tokens": int(prior.n_tokens),
                        "private_docs_without_vocabulary_word": int(
                            (np.diff(truth.doc_ptr) == 0).sum()
                        ),
                    }
                )

                start = _now()
                phi = train_cgs(truth, TOPICS, iterations, NoiseSource.create(seed),
                                alpha=params.alpha, beta=params.beta)  # fmt: skip
                took = _now() - start
                _record(out, seed, "cgs", phi, took, words, reference, texts,
                        tokens=int(truth.n_tokens))  # fmt: skip
                cgs = (phi, {w: i for i, w in enumerate(words)})
                start = _now()
                phi = train_cgs(truth, TOPICS, iterations, NoiseSource.create(seed + 100),
                                alpha=params.alpha, beta=params.beta)  # fmt: skip
                took = _now() - start
                _record(out, seed, "cgs2", phi, took, words, reference, texts, cgs,
                        tokens=int(truth.n_tokens))  # fmt: skip
                start = _now()
                state0, phi0 = online_start(prior, params, seed)
                took = _now() - start
                _record(out, seed, "public", phi0, took, words, reference, texts, cgs,
                        tokens=prior.n_tokens)  # fmt: skip
                for eps in WORD_EPSILONS:
                    flip = Flip.from_word_epsilon(eps)
                    g = _guarantee(flip, V)
                    reports = _reports(data["priv_tokens"], vocab, flip, 1000 * seed + int(eps))
                    timers = Timers()
                    with instrumented(timers):
                        start = _now()
                        phi = lp_lda(reports, V, flip, params, seed)
                    took = _now() - start
                    _record(
                        out, seed, "lp-lda", phi, took, words, reference, texts, cgs,
                        word_epsilon=eps, tokens=timers.tokens,
                        document_epsilon=g["document_epsilon"],
                        realised_word_epsilon=g["word_epsilon"],
                    )  # fmt: skip
                    for name, variant in variants:
                        state = state0
                        batches = np.array_split(reports, BATCHES)
                        for batch, part in enumerate(batches, start=1):
                            timers = Timers()
                            with instrumented(timers):
                                start = _now()
                                state, phi, est = online_step(
                                    state, np.ascontiguousarray(part), flip, variant, seed + batch
                                )
                            took = _now() - start
                            _record(
                                out, seed, name, phi, took, words, reference, texts, cgs,
                                word_epsilon=eps, batch=batch, batch_reports=len(part),
                                tokens=timers.tokens, omega=est.omega, sigma2=est.sigma2,
                                document_epsilon=g["document_epsilon"],
                                realised_word_epsilon=g["word_epsilon"],
                            )  # fmt: skip
                if dpvi:
                    row = Row(
                        "dp-vi",
                        f"central dp-vi, vocabulary public:pub (size {LOCAL_VOCABULARY}) + prior "
                        "pub",
                        {"vocabulary": "public:pub", "prior": "pub",
                         "vocabulary_size": LOCAL_VOCABULARY},
                    )  # fmt: skip
                    rec = runner.release(
                        "local", row, data["workspace"], "priv", epsilon=CENTRAL_EPSILON,
                        topics=TOPICS, rep=seed, reference=reference, texts=texts, truth=cgs,
                        seed=seed,
                    )  # fmt: skip
                    rec = dict(rec)
                    released = rec.pop("words", None)
                    rec["same_vocabulary"] = released is not None and list(released) == words
                    rec["row"] = "dp-vi"
                    rec["seed"] = seed
                    out["records"].append(rec)
            result["part3"] = out


# --------------------------------------------------------------------------- part 4


def part4(raw: list[str], draws: int, result: dict) -> None:
    """Eq. 8's variance and Theorem 7 (eq. 19 with a fixed prior mean), over ``draws``
    seeded randomisations of one fixed dataset (the private 90% of split 0)."""
    from fdptm.kernels.reconstruct import column_counts
    from fdptm.local import Flip
    from fdptm.mechanisms import local_dp
    from fdptm.mechanisms.local_dp import (
        bayes_estimate,
        exact_variance,
        moment_estimate,
        moment_variance,
        targets,
    )

    with tempfile.TemporaryDirectory(prefix="fdptm-local-") as tmp:
        data = setup_split(raw, 0, Path(tmp), private_dataset=False)
    vocab, V = data["vocab"], data["vocab"].size
    _, true_bits, N = _binary_corpus(data["priv_tokens"], vocab)
    _, _, pub_counts = _binary_corpus(data["pub_tokens"], vocab)
    M = int(true_bits.shape[0])
    N = N.astype(np.float64)
    # OLP-LDA's first prior mean for a batch of all M reports: eq. 21 with mu^0 = eta^0 the
    # public counts, mu = N^0 x M / |D0|.
    mu = pub_counts.astype(np.float64) * M / data["n_pub"]
    from fdptm.local.randomizer import KeyStream, as_bytes, flip_bits

    words64 = np.zeros((M, (V + 63) // 64), dtype=np.uint64)
    words64.view(np.uint8)[:, : true_bits.shape[1]] = true_bits
    out: dict[str, Any] = {
        "reports": M,
        "vocabulary": V,
        "draws": draws,
        "true_tokens": float(N.sum()),
        "prior_tokens": float(mu.sum()),
        "prior_sq_error": float(((mu - N) ** 2).sum()),
        "by_epsilon": [],
    }
    for eps in WORD_EPSILONS:
        flip = Flip.from_word_epsilon(eps)
        counts = np.empty((draws, V), dtype=np.int64)
        start = _now()
        for r in range(draws):
            bits = words64.copy()
            flip_bits(bits, V, flip, KeyStream(seed=10_000 * int(eps) + r))
            counts[r] = column_counts(as_bytes(bits, V).copy(), V)
        moment = moment_estimate(counts, M, flip)
        var = moment.var(axis=0, ddof=1)
        exact = exact_variance(M, flip)
        eq9 = moment_variance(N, M, flip)
        bias = moment.mean(axis=0) - N
        sampling = (M - N) * N / M
        mse_moment = ((moment - N) ** 2).mean(axis=0)
        clipped_moment = targets(moment, M)
        mse_moment_t = ((clipped_moment - N) ** 2).mean(axis=0)
        entry: dict[str, Any] = {
            "word_epsilon": eps,
            "realised_word_epsilon": flip.word_epsilon,
            "f": flip.f,
            "seconds": _now() - start,
            "exact_variance": exact,
            "empirical_variance_mean": float(var.mean()),
            "ratio_exact_mean": float((var / exact).mean()),
            "ratio_exact_p5": float(np.percentile(var / exact, 5)),
            "ratio_exact_p95": float(np.percentile(var / exact, 95)),
            "ratio_eq9_mean": float((var / eq9).mean()),
            "ratio_eq9_min": float((var / eq9).min()),
            "sampling_term_mean": float(sampling.mean()),
            "sampling_term_max": float(sampling.max()),
            "bias_z_rms": float(np.sqrt(np.mean(bias**2 / (var / draws)))),
            "mse_moment": float(mse_moment.sum()),
            "mse_moment_targets": float(mse_moment_t.sum()),
            "optimal_omega": float(var.sum() / (var.sum() + ((mu - N) ** 2).sum())),
            "omegas": [],
        }
        for omega in OMEGAS:
            bayes = bayes_estimate(counts, M, flip, mu, omega)
            bvar = bayes.var(axis=0, ddof=1)
            ratio = bvar / var
            bbias2 = (bayes.mean(axis=0) - N) ** 2
            mse = ((bayes - N) ** 2).mean(axis=0)
            mse_t = ((targets(bayes, M) - N) ** 2).mean(axis=0)
            entry["omegas"].append(
                {
                    "omega": omega,
                    "theory": (1 - omega) ** 2,
                    "ratio_median": float(np.median(ratio)),
                    "ratio_min": float(ratio.min()),
                    "ratio_max": float(ratio.max()),
                    "variance_sum": float(bvar.sum()),
                    "bias2_sum": float(bbias2.sum()),
                    "mse_sum": float(mse.sum()),
                    "mse_ratio": float(mse.sum() / mse_moment.sum()),
                    "words_better": float((mse < mse_moment).mean()),
                    "mse_targets_ratio": float(mse_t.sum() / mse_moment_t.sum()),
                }
            )
        if hasattr(local_dp, "empirical_prior_variance"):
            # The library's default omega (OLP-LDA with omega None): Theorem 6's omega for
            # sigma^2 estimated from each draw's own reports.
            sigma2 = np.array([local_dp.empirical_prior_variance(m, mu, M, flip)
                               for m in moment])  # fmt: skip
            weights = np.array([local_dp.bayes_weight_from_variance(M, flip, x) for x in sigma2])
            bayes = weights[:, None] * mu + (1 - weights[:, None]) * moment
            mse = ((bayes - N) ** 2).mean(axis=0)
            mse_t = ((targets(bayes, M) - N) ** 2).mean(axis=0)
            entry["estimated"] = {
                "omega_median": float(np.median(weights)),
                "omega_min": float(weights.min()),
                "omega_max": float(weights.max()),
                "floored": float((sigma2 <= 1.0).mean()),
                "variance_ratio": float(bayes.var(axis=0, ddof=1).sum() / var.sum()),
                "bias2_sum": float(((bayes.mean(axis=0) - N) ** 2).sum()),
                "mse_sum": float(mse.sum()),
                "mse_ratio": float(mse.sum() / mse_moment.sum()),
                "words_better": float((mse < mse_moment).mean()),
                "mse_targets_ratio": float(mse_t.sum() / mse_moment_t.sum()),
            }
        out["by_epsilon"].append(entry)
        print(
            f"part 4 eps={eps:g}: var/exact {entry['ratio_exact_mean']:.3f}, var/eq9 "
            f"{entry['ratio_eq9_mean']:.3f}, "
            + ", ".join(
                f"omega {o['omega']}: var ratio {o['ratio_median']:.4f} mse ratio "
                f"{o['mse_ratio']:.3f}"
                for o in entry["omegas"]
            ),
            flush=True,
        )
        result["part4"] = out


# --------------------------------------------------------------------------- render


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def render_part1(p: dict) -> list[str]:
    runs = p["runs"]
    reps = len({r["repeat"] for r in runs})

    def cells(key: str) -> list[str]:
        return [_spread([r[key] for r in runs if r["word_epsilon"] == e]) for e in WORD_EPSILONS]

    pre = p["pre_cycled"]
    ks = p["keystream"]
    steps = {e: _med([r["steps"] for r in runs if r["word_epsilon"] == e]) for e in WORD_EPSILONS}
    worst = max(max(r["steps"] for r in runs if r["word_epsilon"] == e) for e in WORD_EPSILONS)
    flip_med = _med([r["flip"] for r in runs])
    bits = {
        e: next(
            (r["report_bits_per_doc"] for r in runs
             if r["word_epsilon"] == e and r["report_bits_per_doc"] is not None),
            None,
        )
        for e in WORD_EPSILONS
    }  # fmt: skip
    g = p["guarantees"]
    lines = [
        "### 1. Device: randomising 1,000,000 documents over 5,000 public words (one core)",
        "",
        f"Documents: the {p['pheme_documents']:,} PHEME tweets of `pheme_raw.json` after PRE "
        f"(`fdptm.pre.tokenize`, {p['pheme_tokens_per_doc']:.2f} tokens per tweet), cycled to "
        f"{p['documents']:,} token lists. Vocabulary: the {p['vocabulary']['size']:,} most "
        f"frequent words of `{p['vocabulary']['source']}` after PRE (`build_vocabulary`, what "
        "`fdptm local vocabulary wordfreq:en:20000 vocab.json --size 5000` writes); "
        f"{p['vocabulary_words_per_doc']:.2f} of a tweet's words are in it. "
        "NUMBA_NUM_THREADS=1 and `pyarrow.set_cpu_count(1)`; the `cpu` rows (process CPU "
        "time) never exceed the wall time, so the work is on one core, and where the wall time "
        "is longer the process was waiting for the shared CPU (other jobs ran on this 2-core "
        "machine). numba's compile or cache load is excluded (a warm-up "
        f"call on 100 documents first, {p['warmup_seconds']:.1f} s). Cells: seconds for all "
        f"1M documents, median [min, max] of {reps} repetition(s), the epsilons interleaved "
        "(rotated order per repetition). encode = step 1 (`encode`: pyarrow `index_in` + the "
        "bit-setting kernel); flip = step 2 (`flip_bits`, exact Bernoulli(f/2) from a seeded "
        "ChaCha20 keystream, the same cipher and cost as the production one); "
        "`randomize_tokens` = both steps through the public call with the production "
        "(os.urandom-keyed) keystream (it returns the `as_bytes` view, no copy).",
        "",
        "| | per-word epsilon 1 | 3 | 5 |",
        "|---|---|---|---|",
        "| guarantee per document (V x per-word) | "
        + " | ".join(f"{g[str(e)]['document_epsilon']:.0f}-LDP" for e in WORD_EPSILONS)
        + " |",
        "| f (realised) | " + " | ".join(f"{g[str(e)]['flip']:.4f}" for e in WORD_EPSILONS) + " |",
        "| report bits set per document | "
        + " | ".join("-" if bits[e] is None else f"{bits[e]:.0f}" for e in WORD_EPSILONS)
        + " |",
        "| encode (step 1), s | " + " | ".join(cells("encode")) + " |",
        "| encode cpu, s | " + " | ".join(cells("encode_cpu")) + " |",
        "| flip (step 2), s | " + " | ".join(cells("flip")) + " |",
        "| flip cpu, s | " + " | ".join(cells("flip_cpu")) + " |",
        "| **steps 1 + 2**, s | " + " | ".join(cells("steps")) + " |",
        "| steps 1 + 2 cpu, s | " + " | ".join(cells("steps_cpu")) + " |",
        "| copy to report bytes (`as_bytes(...).copy()`), s | " + " | ".join(cells("pack")) + " |",
        "| `randomize_tokens` (production keystream), s | "
        + " | ".join(cells("randomize_tokens"))
        + " |",
        "",
        f"PRE (not part of the 10 s target; it runs once per document on the device): "
        f"{pre['per_million']:.1f} s per 1M documents, measured on {pre['documents']:,} cycled "
        f"PHEME texts (cpu {pre['cpu']:.1f} s for those); on the {p['pheme_documents']:,} "
        f"PHEME texts alone {p['pre_pheme_warm']['seconds']:.2f} s warm (= "
        f"{p['pre_pheme_per_million']:.1f} s per 1M extrapolated) and "
        f"{p['pre_pheme_cold']['seconds']:.1f} s on the first call (nltk/WordNet loading). "
        "Cycled texts repeat PHEME's distinct words, so the lemmatizer (one lookup per "
        "distinct word, cached) is undercounted next to 1M distinct tweets; the per-text "
        "regular expressions and Arrow kernels are fully counted.",
        "",
        f"Keystream: ChaCha20 alone runs at {ks['bytes_per_second'] / 1e9:.2f} GB/s here; the "
        f"exact sampler draws on average {ks['words_per_64_bits']:.2f} keystream words per 64 "
        f"report bits (the largest of 64 geometric stopping times, at most 24), so about "
        f"{ks['expected_words'] * 8 / 1e9:.1f} GB of keystream for 1M reports, "
        f"{ks['expected_seconds']:.1f} s of the flip's {flip_med:.1f} s; the rest is the "
        "bit-comparison kernel.",
        "",
        f"Target (steps 1 + 2 under {DEVICE_TARGET_S:.0f} s on one core): "
        + _verdict(worst < DEVICE_TARGET_S)
        + f" at every epsilon (medians {', '.join(f'{steps[e]:.1f}' for e in WORD_EPSILONS)} s "
        f"at 1 / 3 / 5; slowest single run {worst:.1f} s). With PRE added "
        f"({pre['per_million']:.1f} s) the device would need about "
        f"{max(steps.values()) + pre['per_million']:.0f} s per 1M documents.",
        "",
    ]
    return lines


def render_part2(p: dict) -> list[str]:
    rounds = p["rounds"]
    if not rounds:
        return []
    cgs = [r["cgs"]["seconds"] for r in rounds]
    load = p.get("loadavg")
    first = rounds[0][f"lp{WORD_EPSILONS[0]:g}"]
    funcs = first.get("counting_functions", ["column_counts"])
    calls = first["counting_calls"]
    lines = [
        "### 2. Server: LP-LDA next to non-private CGS",
        "",
        f"{p['reports']:,} reports from part 1 (V = {p['vocabulary']:,}, the last repetition's "
        f"reports at each epsilon), `lp_lda` with `LocalParams(topics={TOPICS}, "
        f"iterations={p['iterations']})` (alpha 0.1, beta 0.01); the non-private baseline is "
        f"`train_cgs` with the same k, iterations, alpha and beta on the true documents as "
        f"sets of their vocabulary words ({p['true_tokens']:,} tokens: what the reports "
        "encode, without the flips). Interleaved: each round runs the four jobs in a rotated "
        "order, and each LP-LDA time is divided by the CGS time of its own round; "
        f"{len(rounds)} round(s), median [min, max]. One thread for both "
        "(NUMBA_NUM_THREADS=1: kernels with numba `prange` blocks run them one after "
        "another; the CGS sweeps are sequential anyway). The breakdown wraps "
        f"`fdptm.mechanisms.local_dp`'s `{'`, `'.join(funcs)}` (counting), `reconstruct` and "
        "`_sweeps` (initialisation + the sweeps) with timers for one `lp_lda` call each. "
        "LP-LDA's token count is the reconstruction's (the column totals are eq. 8's "
        "estimates rounded and clipped to [0, M]; clipping the negative estimates of rare "
        "words at 0 is what raises it above the true count)."
        + (f" Load average (1 min) after the part: {load[0]:.2f}." if load else ""),
        "",
        "| | tokens | counting, s (calls) | reconstruction, s | CGS, s | total, s | "
        "ratio to non-private CGS | CGS part's ratio |",
        "|---|---|---|---|---|---|---|---|",
        f"| non-private CGS | {p['true_tokens']:,} | - | - | {_spread(cgs, 1)} | "
        f"{_spread(cgs, 1)} | 1 | 1 |",
    ]
    verdicts = []
    for e in WORD_EPSILONS:
        lp = [r[f"lp{e:g}"] for r in rounds]
        ratio = [x["ratio"] for x in lp]
        lines.append(
            f"| LP-LDA, per-word epsilon {e:g} | {_med([x['tokens'] for x in lp]):,.0f} | "
            f"{_spread([x['counting'] for x in lp], 1)} ({lp[0]['counting_calls']}) | "
            f"{_spread([x['reconstruction'] for x in lp], 1)} | "
            f"{_spread([x['cgs'] for x in lp], 1)} | {_spread([x['seconds'] for x in lp], 1)} "
            f"| **{_spread(ratio)}** | {_spread([x['cgs_ratio'] for x in lp])} |"
        )
        pooled = _med([x["seconds"] for x in lp]) / _med(cgs)
        verdicts.append(
            f"epsilon {e:g}: {_med(ratio):.2f}x (ratio of the medians {pooled:.2f}x), "
            + _verdict(_med(ratio) <= SERVER_TARGET_RATIO)
        )
    lines += [
        "",
        f"Target (LP-LDA within {SERVER_TARGET_RATIO:g}x of non-private CGS, median ratio): "
        + "; ".join(verdicts)
        + ". The ratio depends on the iterations and on epsilon: the reconstruction costs a "
        "fixed amount per set report bit (a report holds its document's words plus about "
        "f/2 x V noise bits, the part-1 table's 'report bits set'), the sweeps a cost per "
        "token and iteration."
        + (
            f" Counting is `{'`, `'.join(funcs)}`"
            + (
                f", called {calls} times per `lp_lda` (it counts the columns again inside "
                "`reconstructed`)."
                if calls > 1
                else ", called once per `lp_lda`."
            )
            if funcs
            else ""
        ),
        "",
    ]
    return lines


def _cell(recs: list[dict], key: str, digits: int) -> str:
    values = [r[key] for r in recs if key in r and r.get("ok", True)]
    return _spread(values, digits) if values else "-"


def render_part3(p: dict) -> list[str]:
    recs = p["records"]
    if not recs:
        return []
    sp = p["splits"]
    seeds = sorted({r["seed"] for r in recs})
    V = sp[0]["vocabulary"]
    variants = p.get("variants", ["olp-lda"])
    omega = p["params"]["omega"]
    omega_label = (
        " (omega from the batch's estimated sigma^2, the default)"
        if omega is None
        else f" (omega {omega:g})"
    )
    lines = [
        "### 3. Utility on PHEME (k = 5)",
        "",
        f"Per seed ({', '.join(map(str, seeds))}): `benchmarks/utility.py`'s target-2 split "
        f"of the {sp[0]['public'] + sp[0]['private']:,} raw tweets, a random 10% "
        f"({sp[0]['public']}) ingested as the public dataset `pub` and the other "
        f"{sp[0]['private']:,} as the private `priv`, in a fresh workspace. Vocabulary: the "
        f"{V:,} most frequent words of `pub` after PRE (`build_vocabulary('public:pub', ..., "
        f"{V})`, i.e. `fdptm local vocabulary public:pub vocab.json --size {V}`; the public 10% "
        "has about 1,800 distinct words, about 730 of them seen twice or more, so the last "
        "words are ties broken alphabetically). The private 90% go through the device's PRE "
        "and are randomised with a seeded keystream (test-only; the same distribution as "
        "production); LP-LDA (`lp_lda`) and OLP-LDA (`online_start` on D0 = the public 10% "
        f"encoded over the vocabulary, then `online_step` on {BATCHES} mini-batches of the "
        "same reports in document order, seeds as `flows/local_release.py`) train "
        f"`LocalParams` {p['params']}. Non-private CGS: `train_cgs` on the private 90% as "
        "sets of their vocabulary words, same iterations (not DP). Public only: OLP-LDA's "
        "Phi^0, CGS on D0 alone (reads no private data). dp-vi: a real central release "
        "through `utility.Runner` (`vocabulary public:pub`, `vocabulary_size "
        f"{LOCAL_VOCABULARY}`, `prior pub`, m1 none, seeded test run), epsilon "
        f"{CENTRAL_EPSILON:g}, delta {DELTA:g}. Scores: `utility.score`: NPMI "
        "(`fdptm.evaluation.metrics.npmi`, gensim c_npmi of each topic's top 10 words above "
        "its floor) with the private 90% after PRE as reference texts; words above the floor "
        "(mean over topics of the top 10) and the weakest topic's count; topic diversity "
        "(top 25); cosine to non-private CGS = `utility.score`'s matched cosine "
        "(`matching.matched_distance`, Hungarian matching of the topics) to the same seed's "
        "non-private CGS model (the first row), which says how close a release comes to what "
        "the private data would give without noise (the second CGS row, another sampler seed, "
        "is the level two non-private runs reach). Median [min, max] over the seeds.",
        "",
        "The per-document figure is the protection of a tweet; the per-word figure only that "
        f"of one word's presence. At V = {V:,} a per-word epsilon of 1 to 5 is a per-document "
        f"epsilon of {V:,} to {5 * V:,}, which protects a whole tweet not at all in any "
        "useful sense; dp-vi's (3, 1e-5) is about the whole tweet.",
        "",
        "| row | guarantee per document | per word | NPMI | cosine to non-private CGS | "
        "words above floor | weakest topic | diversity | tokens trained on | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def row(label, chosen, doc_g, word_g):
        tokens = [r["tokens"] for r in chosen if "tokens" in r]
        lines.append(
            f"| {label} | {doc_g} | {word_g} | {_cell(chosen, 'npmi', 3)} | "
            f"{_cell(chosen, 'cosine', 3)} | {_cell(chosen, 'above_floor', 1)} | "
            f"{_cell(chosen, 'min_above_floor', 0)} | "
            f"{_cell(chosen, 'diversity', 2)} | "
            f"{_spread(tokens, 0) if tokens else '-'} | {_cell(chosen, 'seconds', 1)} |"
        )

    row("non-private CGS, private 90% (the cosine's reference)",
        [r for r in recs if r["row"] == "cgs"],
        "none (not DP)", "none")  # fmt: skip
    row("non-private CGS, private 90%, another seed", [r for r in recs if r["row"] == "cgs2"],
        "none (not DP)", "none")  # fmt: skip
    row("public 10% only (OLP-LDA's Phi^0)", [r for r in recs if r["row"] == "public"],
        "reads no private data", "-")  # fmt: skip
    dp = [r for r in recs if r["row"] == "dp-vi"]
    if dp:
        ok = [r for r in dp if r.get("ok")]
        row(f"central dp-vi, epsilon {CENTRAL_EPSILON:g} ({len(ok)}/{len(dp)} ok)", dp,
            f"({CENTRAL_EPSILON:g}, {DELTA:g})-DP, document level (central)",
            "implied by the document's")  # fmt: skip
    for eps in WORD_EPSILONS:
        lp = [r for r in recs if r["row"] == "lp-lda" and r["word_epsilon"] == eps]
        olp = [r for r in recs if r["row"] == "olp-lda" and r["word_epsilon"] == eps and
               r["batch"] == BATCHES]  # fmt: skip
        if not lp:
            continue
        de, we = lp[0]["document_epsilon"], lp[0]["realised_word_epsilon"]
        doc_g = f"{V:,} x {we:.4g} = {de:,.0f}-LDP"
        row(f"LP-LDA, per-word epsilon {eps:g}", lp, doc_g, f"{we:.4g}-LDP")
        row(f"OLP-LDA after batch {BATCHES}, per-word epsilon {eps:g}{omega_label}", olp, doc_g,
            f"{we:.4g}-LDP")  # fmt: skip
        for name in variants[1:]:
            fixed = [r for r in recs if r["row"] == name and r["word_epsilon"] == eps and
                     r["batch"] == BATCHES]  # fmt: skip
            row(f"OLP-LDA after batch {BATCHES}, per-word epsilon {eps:g}, omega fixed at "
                f"{name.removeprefix('olp-lda-w')}", fixed, doc_g, f"{we:.4g}-LDP")  # fmt: skip
    lines += [
        "",
        "OLP-LDA after each mini-batch (each release Phi^l is published; lambda = "
        f"{p['params']['correlation']}; omega and sigma^2 as the batch's `BatchEstimate` "
        "reports them: with omega given, sigma^2 is the prior variance Theorem 6 ties to it; "
        "with omega None, sigma^2 is estimated from the batch and omega follows):",
        "",
        "| OLP-LDA | per-word epsilon | batch | reports in batch | NPMI | cosine to non-private "
        "CGS | diversity | tokens trained on | omega | sigma^2 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in variants:
        label = "defaults" if name == "olp-lda" else f"omega {name.removeprefix('olp-lda-w')}"
        for eps in WORD_EPSILONS:
            for b in range(1, BATCHES + 1):
                chosen = [r for r in recs if r["row"] == name and r["word_epsilon"] == eps and
                          r["batch"] == b]  # fmt: skip
                if not chosen:
                    continue
                lines.append(
                    f"| {label} | {eps:g} | {b} | "
                    f"{_spread([r['batch_reports'] for r in chosen], 0)} | "
                    f"{_cell(chosen, 'npmi', 3)} | {_cell(chosen, 'cosine', 3)} | "
                    f"{_cell(chosen, 'diversity', 2)} | "
                    f"{_spread([r['tokens'] for r in chosen], 0)} | "
                    f"{_spread([r['omega'] for r in chosen], 3)} | "
                    f"{_spread([r['sigma2'] for r in chosen], 0)} |"
                )
    true_tokens = [s["true_tokens"] for s in sp]
    lines += [
        "",
        f"True private tokens (documents as word sets over the vocabulary): "
        f"{_spread(true_tokens, 0)}; D0: {_spread([s['prior_tokens'] for s in sp], 0)} tokens. "
        f"{_spread([s['private_docs_without_vocabulary_word'] for s in sp], 0)} private tweets "
        "hold no vocabulary word.",
    ]
    if dp:
        same = [r.get("same_vocabulary") for r in dp if r.get("ok")]
        lines.append(
            f"dp-vi released the same {LOCAL_VOCABULARY:,} words as the devices' vocabulary "
            f"in {sum(bool(s) for s in same)} of {len(same)} release(s)."
        )
        failed = [r for r in dp if not r.get("ok")]
        for r in failed:
            lines.append(f"dp-vi seed {r['seed']} failed: {r.get('error')}")
    lines.append("")
    return lines


def render_part4(p: dict) -> list[str]:
    if not p.get("by_epsilon"):
        return []
    lines = [
        "### 4. Eq. 8's variance and Theorem 7, measured",
        "",
        f"One fixed dataset: the private 90% of seed 0's split ({p['reports']:,} tweets) "
        f"encoded over that split's {p['vocabulary']:,}-word public vocabulary "
        f"({p['true_tokens']:,.0f} set bits, the true counts N_t). It is randomised "
        f"{p['draws']} times (seeded keystreams), and per word the {p['draws']} estimates are "
        "compared with N_t. The documents are fixed, so what is measured is the variance "
        "given N_t: the flips' variance only. Prior mean for eq. 19: the public 10%'s counts "
        f"scaled to M (mu_t = N^0_t M / |D0|, OLP-LDA's eq. 21 for a first batch of all M "
        f"reports), fixed across draws; sum over words of (mu_t - N_t)^2 = "
        f"{p['prior_sq_error']:,.0f}.",
        "",
        "Eq. 8 (moment estimate). exact = `exact_variance` = M (f/2)(1 - f/2) / (1 - f)^2; "
        "eq. 9 as printed = `moment_variance` = exact + (M - N_t) N_t / M. Ratios are the "
        "per-word empirical variance (ddof 1) over the formula, mean over words [5th, 95th "
        f"percentile]; with {p['draws']} draws a ratio's own sampling sd is about "
        f"{math.sqrt(2 / (p['draws'] - 1)):.2f}. Bias z (RMS) = the root mean square over words of "
        "(mean estimate - N_t) / its standard error: about 1 for an unbiased estimator.",
        "",
        "| per-word epsilon | f | exact variance | empirical / exact | empirical / eq. 9 "
        "(mean, min) | (M - N)N/M term (mean, max) | bias z (RMS) |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in p["by_epsilon"]:
        lines.append(
            f"| {e['word_epsilon']:g} | {e['f']:.4f} | {e['exact_variance']:,.1f} | "
            f"{e['ratio_exact_mean']:.3f} [{e['ratio_exact_p5']:.2f}, "
            f"{e['ratio_exact_p95']:.2f}] | {e['ratio_eq9_mean']:.3f}, {e['ratio_eq9_min']:.3f} "
            f"| {e['sampling_term_mean']:.2f}, {e['sampling_term_max']:.1f} | "
            f"{e['bias_z_rms']:.2f} |"
        )
    lines += [
        "",
        "Theorem 7 (eq. 19, B = omega mu + (1 - omega) N_hat). Variance ratio = per-word "
        "Var(B) / Var(N_hat), median [min, max] over words. With mu fixed B is an affine "
        "function of N_hat in every draw, so this ratio is (1 - omega)^2 identically (the "
        "measurement checks the implementation, not the theorem). What Theorem 7 leaves out "
        "is the bias omega (mu_t - N_t): MSE = variance + bias^2, summed over words; MSE ratio "
        "= sum MSE(B) / sum MSE(N_hat); words better = share of words whose MSE falls. "
        "'targets' = the same ratio after rounding and clipping to [0, M] (`targets`, the "
        "column totals the reconstruction actually uses). omega* = the single omega that "
        "minimises the summed MSE here, sum Var / (sum Var + sum (mu - N)^2).",
        "",
        "| per-word epsilon | omega | (1 - omega)^2 | variance ratio | sum bias^2 / sum MSE "
        "| MSE ratio | words better | MSE ratio, targets | omega* |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in p["by_epsilon"]:
        for o in e["omegas"]:
            lines.append(
                f"| {e['word_epsilon']:g} | {o['omega']} | {o['theory']:.4f} | "
                f"{o['ratio_median']:.4f} [{o['ratio_min']:.4f}, {o['ratio_max']:.4f}] | "
                f"{o['bias2_sum'] / o['mse_sum']:.3f} | {o['mse_ratio']:.3f} | "
                f"{o['words_better']:.0%} | {o['mse_targets_ratio']:.3f} | "
                f"{e['optimal_omega']:.3f} |"
            )
        est = e.get("estimated")
        if est:
            lines.append(
                f"| {e['word_epsilon']:g} | estimated per draw: {est['omega_median']:.3f} "
                f"[{est['omega_min']:.3f}, {est['omega_max']:.4f}]"
                + (
                    f", sigma^2 at its floor of 1 in {est['floored']:.0%} of draws"
                    if est.get("floored")
                    else ""
                )
                + " | - | "
                f"{est['variance_ratio']:.4f} (summed) | "
                f"{est['bias2_sum'] / est['mse_sum']:.3f} | {est['mse_ratio']:.3f} | "
                f"{est['words_better']:.0%} | {est['mse_targets_ratio']:.3f} | "
                f"{e['optimal_omega']:.3f} |"
            )
    if any(e.get("estimated") for e in p["by_epsilon"]):
        lines += [
            "",
            "'estimated per draw' = OLP-LDA's default omega (`LocalParams(omega=None)`): "
            "Theorem 6's omega (`bayes_weight_from_variance`) for the sigma^2 that "
            "`empirical_prior_variance` estimates from each draw's own moment estimates; its "
            "variance ratio is sum Var(B) / sum Var(N_hat), the omega now varying with the "
            "draw.",
        ]
    lines.append("")
    return lines


def _runs(result: dict) -> list[dict]:
    """The runs that wrote this result (a later ``--update`` run replaces some parts)."""
    if "runs" in result:
        return result["runs"]
    return [
        {
            "command": result["command"],
            "code": result["code"],
            "date": result["machine"]["date"],
            "parts": "1,2,3,4",
            "minutes": result.get("minutes", 0.0),
        }
    ]


def _median_of(recs: list[dict], key: str) -> float | None:
    values = [r[key] for r in recs if key in r and r.get("ok", True)]
    return _med(values) if values else None


def render_summary(result: dict) -> list[str]:
    """One line per part, from the numbers below (details in each part)."""
    lines = ["### Summary", ""]
    p1 = result.get("part1")
    if p1:
        runs = p1["runs"]
        worst = max(r["steps"] for r in runs)
        meds = [_med([r["steps"] for r in runs if r["word_epsilon"] == e]) for e in WORD_EPSILONS]
        lines.append(
            f"- Device, 1M documents over 5,000 words, one core: steps 1 + 2 take "
            f"{min(meds):.1f} to {max(meds):.1f} s (medians over per-word epsilon 1 / 3 / 5; "
            f"slowest run {worst:.1f} s): target under {DEVICE_TARGET_S:.0f} s "
            + _verdict(worst < DEVICE_TARGET_S)
            + f". PRE adds {p1['pre_cycled']['per_million']:.1f} s per 1M."
        )
    p2 = result.get("part2")
    if p2 and p2.get("rounds"):
        ratios = {e: _med([r[f"lp{e:g}"]["ratio"] for r in p2["rounds"]]) for e in WORD_EPSILONS}
        lines.append(
            f"- Server, {p2['reports']:,} reports, {p2['iterations']} iterations: LP-LDA takes "
            + ", ".join(f"{ratios[e]:.2f}x" for e in WORD_EPSILONS)
            + " the time of non-private CGS at per-word epsilon "
            + " / ".join(f"{e:g}" for e in WORD_EPSILONS)
            + f": target within {SERVER_TARGET_RATIO:g}x "
            + _verdict(all(v <= SERVER_TARGET_RATIO for v in ratios.values()))
            + "."
        )
    p3 = result.get("part3")
    if p3 and p3.get("records"):
        recs = p3["records"]
        V = p3["splits"][0]["vocabulary"]

        def pick(row: str, eps: float | None = None) -> list[dict]:
            return [
                r
                for r in recs
                if r["row"] == row
                and (eps is None or r.get("word_epsilon") == eps)
                and r.get("batch", BATCHES) == BATCHES
            ]

        def both(chosen: list[dict]) -> str:
            npmi, cos = _median_of(chosen, "npmi"), _median_of(chosen, "cosine")
            if npmi is None:
                return "-"
            return f"NPMI {npmi:.3f}" + (f", cosine {cos:.2f}" if cos is not None else "")

        parts = [
            f"per-word {e:g} ({V * e:,.0f}-LDP per document): LP-LDA {both(pick('lp-lda', e))}, "
            f"OLP-LDA {both(pick('olp-lda', e))}"
            for e in WORD_EPSILONS
        ]
        dp = pick("dp-vi")
        line = (
            "- Utility on PHEME (k = 5, medians of "
            f"{len({r['seed'] for r in recs})} seeds; cosine = matched cosine to the "
            "non-private CGS model): " + "; ".join(parts)
        )
        if dp:
            line += (
                f"; central dp-vi at ({CENTRAL_EPSILON:g}, {DELTA:g})-DP per document {both(dp)}"
            )
        line += (
            f"; non-private CGS NPMI {_median_of(pick('cgs'), 'npmi'):.3f} (a second "
            f"non-private run: {both(pick('cgs2'))}; public 10% alone: {both(pick('public'))})."
        )
        cgs_npmi = _median_of(pick("cgs"), "npmi")
        pub_npmi = _median_of(pick("public"), "npmi")
        if cgs_npmi is not None and pub_npmi is not None and cgs_npmi < pub_npmi:
            line += (
                " NPMI ranks the non-private model below the public-only one here (as in "
                "`utility.md`), so read it with the cosine."
            )
        lines.append(line)
    p4 = result.get("part4")
    if p4 and p4.get("by_epsilon"):
        by = p4["by_epsilon"]
        half = {e["word_epsilon"]: next(o for o in e["omegas"] if o["omega"] == 0.5) for e in by}
        line = (
            "- Eq. 8's empirical variance / `exact_variance`: "
            + ", ".join(f"{e['ratio_exact_mean']:.3f}" for e in by)
            + "; / eq. 9 as printed: "
            + ", ".join(f"{e['ratio_eq9_mean']:.3f}" for e in by)
            + " (per-word epsilon "
            + " / ".join(f"{e['word_epsilon']:g}" for e in by)
            + "). Theorem 7's variance ratio is (1 - omega)^2 exactly (prior mean fixed), but "
            "its MSE at omega 0.5 is "
            + ", ".join(f"{half[e['word_epsilon']]['mse_ratio']:.2f}x" for e in by)
            + " that of eq. 8 (the bias omega (mu - N) dominates when the flips are few)"
        )
        if all(e.get("estimated") for e in by):
            line += (
                "; the default estimated omega lands at "
                + ", ".join(
                    f"{e['estimated']['omega_median']:.2f} (omega* {e['optimal_omega']:.2f})"
                    for e in by
                )
                + " with MSE "
                + ", ".join(f"{e['estimated']['mse_ratio']:.2f}x" for e in by)
            )
        lines.append(line + ".")
    lines.append("")
    return lines if len(lines) > 3 else []


def render(result: dict) -> str:
    m = result["machine"]
    runs = _runs(result)
    lines = [
        f"{m['cores']} cores shared with other jobs · numba {result['numba']} with "
        f"NUMBA_NUM_THREADS={result['numba_threads']}, pyarrow CPU pool "
        f"{result['pyarrow_threads']} thread",
        "",
    ]
    for run in runs:
        lines.append(
            f"- Command: `{run['command']}` (parts {run['parts']}) · date {run['date']} · code "
            f"{run['code']} · run time {run['minutes']:.1f} min"
        )
    lines += [
        "",
        "Paper: `hdp-lda-lp-lda-olp-lda.txt` sections V (LP-LDA) and VI (OLP-LDA). Every "
        "report here comes from a seeded keystream (`KeyStream(seed=...)`, test-only, not "
        "private; the same ChaCha20 cost and the same Bernoulli(f/2) distribution as the "
        "os.urandom-keyed production keystream). PHEME is public research data; every number "
        "is an internal statistic, not DP.",
        "",
    ]
    lines += render_summary(result)
    for key, fn in (("part1", render_part1), ("part2", render_part2), ("part3", render_part3),
                    ("part4", render_part4)):  # fmt: skip
        if key in result:
            lines += fn(result[key])
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller and 1 seed/repetition")
    parser.add_argument("--parts", default="1,2,3,4", help="comma-separated parts to run")
    parser.add_argument("--reports", type=int, help="part 2's reports (default 1,000,000)")
    parser.add_argument("--render", action="store_true", help="re-render the .md from the .json")
    parser.add_argument("--out", type=Path, help="write OUT.md and OUT.json")
    parser.add_argument(
        "--update",
        action="store_true",
        help="replace only the parts run in the existing OUT.json (default benchmarks/local), "
        "keeping the others and listing both runs",
    )
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",")}
    partial_run = args.quick or parts != {"1", "2", "3", "4"} or args.reports is not None
    if args.render:  # the newest run of local.md again, from its record
        record = json.loads(stem("local", args.out).with_suffix(".json").read_text())
        md = save("local", TITLE, render(filled(record)), record, args.out, again=True)
        print(md.read_text())
        return
    quick = Path(tempfile.gettempdir()) / "fdptm-local-quick"
    out = args.out or (quick if partial_run and not args.update else None)
    earlier = stem("local", out).with_suffix(".json")
    import numba

    started = at_start()
    result: dict[str, Any] = {}
    if args.update and earlier.exists():  # its other parts, in a new section of local.md
        result = json.loads(earlier.read_text())
        result["runs"] = _runs(result)
        result.pop("end", None)
    result.update(
        machine=started,
        numba=numba.__version__,
        numba_threads=numba.config.NUMBA_NUM_THREADS,
        pyarrow_threads=pa.cpu_count(),
    )
    run = {
        "command": started["command"],
        "code": started["code"],
        "date": started["date"],
        "parts": ",".join(sorted(parts)),
        "minutes": 0.0,
    }
    result.setdefault("runs", []).append(run)
    start = _now()

    def save_part() -> None:  # the record so far: a later part's crash loses nothing
        run["minutes"] = (_now() - start) / 60
        checkpoint("local", result, out)

    raw = json.loads(RAW.read_text())["text"]
    repeats = 1 if args.quick else 3
    seeds = [0] if args.quick else [0, 1, 2]
    if "1" in parts or "2" in parts:
        device = part1(raw, args.quick, repeats, result)
        save_part()
        if "2" in parts:
            n_reports = args.reports or (100_000 if args.quick else DEVICE_DOCS)
            part2(device, n_reports, repeats, 50 if args.quick else ITERATIONS, result)
            save_part()
        del device
    if "3" in parts:
        print("part 3: utility on PHEME", flush=True)
        part3(raw, seeds, ITERATIONS, True, result)
        save_part()
    if "4" in parts:
        part4(raw, 50 if args.quick else 200, result)
        save_part()
    run["minutes"] = (_now() - start) / 60
    print(save("local", TITLE, render(result), result, out).read_text())


if __name__ == "__main__":
    main()
