"""Utility of unseeded production releases against the targets of issue 28 (item 1).

    pip install -e .
    python benchmarks/utility.py            # 10 releases per cell, 100 per pure-noise cell:
                                            # writes utility.md and utility.json
    python benchmarks/utility.py --quick    # 2 releases per cell, 10 per pure-noise cell,
                                            # fewer rows, written to
                                            # $TMPDIR/fdptm-utility-quick.md (not over these)
    python benchmarks/utility.py --render   # re-renders utility.md's newest run from utility.json
    python benchmarks/utility.py --releases 20 --noise-releases 200 --targets 1,4

Claims from production (issue 28, item 1): every DP figure here is from a production release,
``fdptm.flows.release.release(ReleaseRequest(..., seed=None))`` inside one Prefect test
harness for the whole script, on datasets ingested with ``fdptm.tasks.ingest.ingest`` into a
fresh temporary workspace per dataset. Unseeded, the noise comes from OpenDP's
floating-point-safe samplers (OpenSSL's CSPRNG) and every other random draw from ChaCha20
keyed from the OS; the script checks that each manifest's guarantee says ``seeded: false``
and stops if one does not. Seeded releases are for tests only and appear nowhere here.
Each cell (target, epsilon, setting) holds ``--releases`` releases (default 10) and is
reported as median [min, max]. The release is read back from
``<workspace>/releases/<run_id>/`` (topic_word.parquet, vocabulary.parquet, manifest.json)
and scored with ``fdptm.evaluation`` and gensim.

Measures per release: the project's NPMI (``fdptm.evaluation.metrics.npmi``); gensim's
``c_npmi`` of the words the manifest lists per topic (top 10, sliding window 10, over the
training documents' token lists; topics listing fewer than 2 words skipped); topic diversity;
words above the floor; the number of topics the manifest lists as signal (``no_signal:
false``: the words that pass the release's noise test, ``fdptm.evaluation.significance``)
and the mean number of listed words per topic. Held-out likelihood is not measured here.

Targets (issue 28; k = 5 on PHEME, delta = 1e-5):

1. PHEME (``../shared/data/pheme/pheme_clean.json``, 5,698 tweets, document level), no
   public data: epsilon 3, project NPMI >= 0.05 and gensim c_npmi >= 0.0; epsilon 1, project
   NPMI >= -0.10. (Issue 10's eps-3 condition, at least 8 of every topic's top 10 words above
   the floor, is still checked.)
2. PHEME with a random 10% of the documents ingested as a public dataset and the other 90%
   released (``--vocabulary public:pub``, ``--prior pub``), epsilon 1 and 3; issue 10's
   targets are still checked: epsilon 1, NPMI >= 0.03; epsilon 3, NPMI at least that of a
   non-private gensim ``LdaModel`` on the private 90%.
3. A synthetic author-level LDA corpus shaped like a held-out corpus (k = 10, 550 authors,
   one holding 20% of the documents, half of them with one document), epsilon 3: every
   topic a release lists as signal is a planted topic (Hungarian-matched cosine to its true
   topic >= 0.5) and no noise topic is listed; planted topics recovered are counted. (Issue
   10's cosine >= 0.8 with a public prior is still reported.)
4. Pure noise, ``--noise-releases`` each (default 100): (a) 200 documents that PRE empties
   (stop words, punctuation, digits) with the public vocabulary ``wordfreq:en:500`` and
   ``m1 none``; (a') the same documents with the default DP set union (it finds no word and
   the release fills its vocabulary up to k with public words); (b) 200 PHEME tweets with a
   public word list of made-up words none of which occurs in them (``m1 none``). Target:
   zero topics listed as signal over all releases of each.

Reference rows: the FDPTM paper's pipeline (DP set union + ``zhu``, an unproven claim,
``allow_unproven``; a release, so unseeded), non-private collapsed Gibbs sampling
(``train_cgs``) and gensim's ``LdaModel``: these are not releases, so they are seeded, one
seed per repetition (0, 1, ...). Every number here is an internal statistic of the data
(not DP); PHEME is public research data and the synthetic corpora are generated, which is
why they can be committed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import at_start, checkpoint, filled, save, stem  # noqa: E402

PHEME = HERE.parent.parent / "shared" / "data" / "pheme" / "pheme_clean.json"
JSON_OUT = HERE / "utility.json"  # the committed results, which --merge adds to
TITLE = (
    "Utility of unseeded production releases against issue 28's targets "
    "(internal statistics, not DP)"
)

RELEASES = 10  # production releases per cell
NOISE_RELEASES = 100  # per pure-noise cell
QUICK_RELEASES = 2
QUICK_NOISE_RELEASES = 10
DELTA = 1e-5
PHEME_TOPICS = 5
PUBLIC_SHARE = 0.10
CGS_ITERATIONS = 200  # the public prior's own CGS uses 200 sweeps too
GENSIM_PASSES = 20
ZHU_PERCENTILE = 99  # Zhu's max_tokens_per_doc: this percentile of the document lengths
GENSIM_TOP = 10  # gensim c_npmi: top words per topic
GENSIM_WINDOW = 10  # gensim c_npmi: sliding window

# Synthetic author-level corpus (target 3), shaped like a held-out corpus.
SYN_TOPICS = 10
SYN_WORDS = 500
SYN_DOCS = 2000
SYN_AUTHORS = 550
SYN_TOP_SHARE = 0.20  # one author holds 20% of the documents
SYN_SINGLE_SHARE = 0.5  # half the authors have one document
SYN_PUBLIC_DOCS = 200  # public documents (10% as many) by other authors
SYN_DOC_LENGTH = 40
SYN_ETA = 0.05
SYN_EPSILON = 3.0
PLANTED_COSINE = 0.5  # a released topic is a planted one at matched cosine >= this

# Pure noise (target 4).
NOISE_DOCS = 200
NOISE_EPSILON = 3.0
NOISE_TOPICS = 5
NOISE_WORDFREQ = "wordfreq:en:500"
NOISE_MADE_UP_WORDS = 300

# Targets (issue 28).
T1_EPS3_NPMI = 0.05
T1_EPS3_CNPMI = 0.0
T1_EPS1_NPMI = -0.10
T4_SIGNAL = 0
# Issue 10's targets, still checked.
T1_EPS3_ABOVE = 8
T2_EPS1_NPMI = 0.03
T3_COSINE = 0.8


def log(message: str) -> None:
    """Progress with a wall-clock timestamp."""
    print(f"[{datetime.now():%H:%M:%S}] {message}", flush=True)


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class Row:
    """One line of a table: a release (``fields`` of the ReleaseRequest) or a reference."""

    key: str
    label: str
    fields: dict[str, Any] = field(default_factory=dict)
    quick: bool = False  # also run with --quick
    core: bool = False  # run by default; the others only with --all-rows
    kind: str = "release"  # release | reference

    def chosen(self, quick: bool, all_rows: bool) -> bool:
        if ONLY_ROWS and self.key not in ONLY_ROWS:
            return False
        return self.quick if quick else self.core or all_rows


ONLY_ROWS: set[str] = set()
"""``--rows``: the release rows to run (by key; empty: every row the other flags choose)."""
BITERM = {"mechanism": "biterm"}


WIDE_GRID = {"tune_iterations": "20,50,100", "tune_thresholds": "1,2,3"}


def _zhu(max_tokens: int) -> dict[str, Any]:
    return {"mechanism": "zhu", "allow_unproven": True, "max_tokens_per_doc": max_tokens}


def rows_target1(zhu_tokens: int) -> list[Row]:
    return [
        Row("default", "dp-vi (defaults: 100 iterations, threshold 1, m1_fraction 0.5)",
            quick=True, core=True),
        Row("tune", "dp-vi --tune, mean 5 trials, T 20/50/100 x threshold 1/2/3",
            {"tune": True, "m2_options": WIDE_GRID | {"mean_trials": 5.0}}),
        Row("tune-m2", "dp-vi --tune, mean 2 trials, T 20/50/100 x threshold 1/2/3",
            {"tune": True, "m2_options": WIDE_GRID | {"mean_trials": 2.0}}),
        Row("it20", "dp-vi, iterations 20", {"iterations": 20}),
        Row("th2", "dp-vi, threshold 2 (the earlier default)", {"m2_options": {"threshold": 2.0}}),
        Row("clip-private", "dp-vi, clip private (DP median of the units' norms)",
            {"m2_options": {"clip": "private"}}),
        Row("m1f0.1", "dp-vi, m1_fraction 0.1", {"m1_fraction": 0.1}),
        Row("m1f0.25", "dp-vi, m1_fraction 0.25 (the earlier default)", {"m1_fraction": 0.25}),
        Row("zhu", f"FDPTM paper: set union + zhu (unproven), max_tokens_per_doc {zhu_tokens}",
            _zhu(zhu_tokens), quick=True, core=True),
        Row("biterm", "biterm (one noisy biterm statistic, then a biterm model)", BITERM,
            quick=True, core=True),
    ]  # fmt: skip


def rows_target2(zhu_tokens: int) -> list[Row]:
    pub = {"vocabulary": "public:pub"}
    prior = {"prior": "pub"}
    return [
        Row("private-only", "dp-vi defaults, no public data (set-union vocabulary)",
            quick=True, core=True),
        Row("prior", "set-union vocabulary + prior pub", prior),
        Row("pubvocab", "vocabulary public:pub (m1 none), no prior", pub, core=True),
        Row("pubvocab+prior", "vocabulary public:pub (m1 none) + prior pub", pub | prior,
            quick=True, core=True),
        Row("pv500+prior", "vocabulary public:pub, vocabulary_size 500, + prior pub",
            pub | prior | {"vocabulary_size": 500}, core=True),
        Row("pubvocab+prior-th2", "vocabulary public:pub + prior pub, threshold 2",
            pub | prior | {"m2_options": {"threshold": 2.0}}),
        Row("pubvocab+prior+tune",
            "vocabulary public:pub + prior pub, --tune (mean 5, T 20/50/100 x threshold 1/2/3)",
            pub | prior | {"tune": True, "m2_options": WIDE_GRID | {"mean_trials": 5.0}}),
        Row("extend+prior", "vocabulary public:pub, m1 extend + prior pub",
            pub | prior | {"m1": "extend"}),
        Row("bayes+prior", "vocabulary public:pub, m1 bayesian-prior + prior pub",
            pub | prior | {"m1": "bayesian-prior"}),
        Row("bayes500+prior",
            "vocabulary public:pub, m1 bayesian-prior, vocabulary_size 500, + prior pub",
            pub | prior | {"m1": "bayesian-prior", "vocabulary_size": 500}),
        Row("zhu", f"FDPTM paper: set union + zhu (unproven), max_tokens_per_doc {zhu_tokens}",
            _zhu(zhu_tokens)),
        Row("biterm", "biterm, no public data (set-union vocabulary)", BITERM, core=True),
        Row("biterm-pubvocab", "biterm, vocabulary public:pub (m1 none)", pub | BITERM,
            core=True),
    ]  # fmt: skip


def rows_target3(zhu_tokens: int) -> list[Row]:
    pub = {"vocabulary": "public:pub"}
    prior = {"prior": "pub"}
    return [
        Row("private-only", "dp-vi defaults, no public data (set-union vocabulary)",
            quick=True, core=True),
        Row("prior", "set-union vocabulary + prior pub", prior, core=True),
        Row("pubvocab", "vocabulary public:pub (m1 none), no prior", pub, quick=True,
            core=True),
        Row("pubvocab+prior", "vocabulary public:pub (m1 none) + prior pub", pub | prior,
            quick=True, core=True),
        Row("pubvocab+prior-it20", "vocabulary public:pub + prior pub, iterations 20",
            pub | prior | {"iterations": 20}),
        Row("pubvocab+prior-pw5", "vocabulary public:pub + prior pub, prior_weight 5",
            pub | prior | {"m2_options": {"prior_weight": 5.0}}),
        Row("extend+prior", "vocabulary public:pub, m1 extend + prior pub",
            pub | prior | {"m1": "extend"}),
        Row("m1f0.5+prior", "set-union vocabulary, m1_fraction 0.5, + prior pub",
            prior | {"m1_fraction": 0.5}),
        Row("zhu", f"FDPTM paper: set union + zhu (unproven), max_tokens_per_doc {zhu_tokens}",
            _zhu(zhu_tokens), core=True),
        Row("biterm", "biterm, no public data (set-union vocabulary)", BITERM, quick=True,
            core=True),
        Row("biterm-pubvocab", "biterm, vocabulary public:pub (m1 none), no prior",
            pub | BITERM, quick=True, core=True),
        Row("biterm-pubvocab+prior", "biterm, vocabulary public:pub (m1 none) + prior pub",
            pub | prior | BITERM, core=True),
        Row("biterm-pubvocab-r20", "biterm, vocabulary public:pub (m1 none), 20 EM restarts",
            pub | BITERM | {"m2_options": {"restarts": 20}}),
    ]  # fmt: skip


# --------------------------------------------------------------------------- helpers


class Corpora:
    """Token lists -> ``Corpus`` over a given vocabulary (tokens outside it dropped)."""

    @staticmethod
    def build(texts: Sequence[Sequence[str]], vocabulary: Sequence[str]):
        from fdptm.mechanisms.lda import Corpus

        index = {w: i for i, w in enumerate(vocabulary)}
        docs = [[index[w] for w in t if w in index] for t in texts]
        docs = [d for d in docs if d]
        ptr = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum([len(d) for d in docs], out=ptr[1:])
        words = np.fromiter((w for d in docs for w in d), dtype=np.int32, count=int(ptr[-1]))
        return Corpus(ptr, words, len(vocabulary))


class Texts:
    """The training documents' token lists and their gensim ``Dictionary``, built once:
    gensim c_npmi's reference (empty documents dropped)."""

    def __init__(self, texts: Sequence[Sequence[str]]) -> None:
        from gensim.corpora import Dictionary

        self.texts = [list(t) for t in texts if t]
        self.dictionary = Dictionary(self.texts) if self.texts else None


def gensim_npmi(listed: Sequence[Sequence[str]], texts: Texts) -> dict[str, float | None]:
    """gensim's ``c_npmi`` of each topic's listed words (top GENSIM_TOP, window GENSIM_WINDOW)
    over the training documents, averaged over the topics that list at least 2 words; a
    listed word absent from the documents is dropped (as gensim itself would) and counted."""
    from gensim.models import CoherenceModel

    topics = [list(t)[:GENSIM_TOP] for t in listed if len(t) >= 2]
    known = set() if texts.dictionary is None else set(texts.dictionary.token2id)
    unknown = sum(1 for t in topics for w in t if w not in known)
    topics = [[w for w in t if w in known] for t in topics]
    topics = [t for t in topics if len(t) >= 2]
    out: dict[str, float | None] = {
        "c_npmi": None,
        "c_npmi_topics": float(len(topics)),
        "c_npmi_unknown": float(unknown),
    }
    if topics:
        model = CoherenceModel(
            topics=topics,
            texts=texts.texts,
            dictionary=texts.dictionary,
            coherence="c_npmi",
            topn=GENSIM_TOP,
            window_size=GENSIM_WINDOW,
            processes=1,
        )
        out["c_npmi"] = float(np.mean(model.get_coherence_per_topic()))
    return out


def matched_cosines(estimate: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per row of ``estimate``: its cosine to the reference row Hungarian matching
    (``fdptm.evaluation.matching.match_topics``, the pairing ``matched_distance`` uses)
    pairs it with."""
    from fdptm.evaluation.matching import match_topics

    perm = match_topics(estimate, reference)  # estimate[perm[j]] is matched to reference[j]
    matched = estimate[perm]
    norms = np.linalg.norm(matched, axis=1) * np.linalg.norm(reference, axis=1)
    cosines = (matched * reference).sum(axis=1) / np.where(norms > 0, norms, 1.0)
    out = np.empty(len(perm))
    out[perm] = cosines
    return out


def truth_scores(
    phi: np.ndarray,
    words: Sequence[str],
    signal: Sequence[bool],
    truth: tuple[np.ndarray, dict[str, int]],
) -> dict[str, float]:
    """Cosine to the true topics after Hungarian matching (``fdptm.evaluation.matching``),
    over the union of the true and the released vocabulary (a true word the release lacks
    gets probability 0 in it; a released word outside the truth, e.g. a public filler word,
    probability 0 in every true topic); per released topic its matched cosine, from which
    planted topics recovered and signal topics that are (not) planted. Diagnostics: signal
    topics whose best cosine to any true topic is below PLANTED_COSINE too (not a duplicate
    of a planted topic), and signal topics not planted even against the true topics
    restricted to the release's own words (renormalised: vocabulary loss removed)."""
    from fdptm.evaluation.matching import matched_distance

    true_phi, index = truth
    extra = [w for w in words if w not in index]
    where = {w: len(index) + i for i, w in enumerate(extra)}
    columns = np.array([index.get(w, where.get(w, -1)) for w in words], dtype=np.int64)
    width = len(index) + len(extra)
    full = np.zeros((phi.shape[0], width))
    full[:, columns] = phi
    reference = np.zeros((true_phi.shape[0], width))
    reference[:, : len(index)] = true_phi
    planted = matched_cosines(full, reference) >= PLANTED_COSINE
    unit = full / np.linalg.norm(full, axis=1, keepdims=True)
    unit_ref = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    near = (unit @ unit_ref.T).max(axis=1) >= PLANTED_COSINE
    flags = np.asarray(signal, dtype=bool)
    out = {
        "cosine": matched_distance(full, reference).cosine,
        "planted_recovered": float(planted.sum()),
        "signal_planted": float((flags & planted).sum()),
        "signal_not_planted": float((flags & ~planted).sum()),
        "signal_not_near": float((flags & ~near).sum()),
    }
    known = np.array([w in index for w in words])
    if known.any():
        restricted = true_phi[:, columns[known]]
        own = phi[:, known]
        if (restricted.sum(axis=1) > 0).all() and (own.sum(axis=1) > 0).all():
            restricted = restricted / restricted.sum(axis=1, keepdims=True)
            own = own / own.sum(axis=1, keepdims=True)
            out["cosine_on_vocab"] = matched_distance(own, restricted).cosine
            on_vocab = matched_cosines(own, restricted) >= PLANTED_COSINE
            out["signal_not_planted_on_vocab"] = float((flags & ~on_vocab).sum())
    return out


def score(
    phi: np.ndarray,
    words: Sequence[str],
    listed: Sequence[Sequence[str]],
    signal: Sequence[bool],
    reference: Sequence[Sequence[str]],
    texts: Texts,
    truth: tuple[np.ndarray, dict[str, int]] | None = None,
) -> dict[str, float | None]:
    """The measures of one topic-word matrix: ``fdptm.evaluation`` (NPMI, diversity, words
    above the floor), gensim c_npmi of the ``listed`` words, and the ``signal`` topics."""
    from fdptm.evaluation import metrics, topwords

    silent = topwords.no_signal(phi)
    floor_lists = topwords.top_words(phi, list(words), 10)
    per_topic = [0 if s else len(t) for t, s in zip(floor_lists, silent, strict=True)]
    has_text = any(reference)
    out: dict[str, float | None] = {
        "npmi": (
            metrics.npmi(
                phi, Corpora.build(reference, words), list(words), reference_texts=reference
            )
            if has_text
            else None
        ),
        **gensim_npmi(listed, texts),
        "diversity": metrics.topic_diversity(phi),
        "above_floor": topwords.words_above_floor(phi, 10),
        "min_above_floor": float(min(per_topic)),
        "signal_topics": float(sum(signal)),
        "listed_words": float(np.mean([len(t) for t in listed])),
        "vocabulary": float(len(words)),
    }
    if truth is not None:
        out.update(truth_scores(phi, words, signal, truth))
    return out


def floor_listed(phi: np.ndarray, words: Sequence[str]) -> tuple[list[list[str]], list[bool]]:
    """A model's topics listed by the floor rule (each topic's top 10 words above its floor,
    ``topwords.top_words``; none for a no-signal topic, ``topwords.no_signal``) and which
    topics are signal: what ``score`` takes for a model that is not a release."""
    from fdptm.evaluation import topwords

    silent = topwords.no_signal(phi)
    lists = topwords.top_words(phi, list(words), 10)
    listed = [[] if s else [w for w, _ in t] for t, s in zip(lists, silent, strict=True)]
    return listed, [not s for s in silent]


def gensim_topics(
    texts: Sequence[Sequence[str]], k: int, seed: int, vocabulary: set[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """Non-private gensim ``LdaModel`` (k topics, GENSIM_PASSES passes, random_state=seed)."""
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel

    docs = [[w for w in t if vocabulary is None or w in vocabulary] for t in texts]
    docs = [d for d in docs if d]
    dictionary = Dictionary(docs)
    bow = [dictionary.doc2bow(d) for d in docs]
    model = LdaModel(
        bow,
        num_topics=k,
        id2word=dictionary,
        passes=GENSIM_PASSES,
        random_state=seed,
        eval_every=None,
    )
    return model.get_topics(), [dictionary[i] for i in range(len(dictionary))]


def cgs_fit(
    texts: Sequence[Sequence[str]], k: int, seed: int, vocabulary: Sequence[str]
) -> tuple[np.ndarray, list[str]]:
    """Non-private collapsed Gibbs (``train_cgs``, CGS_ITERATIONS sweeps) over ``vocabulary``."""
    from fdptm.mechanisms.lda import train_cgs
    from fdptm.privacy.noise import NoiseSource

    corpus = Corpora.build(texts, vocabulary)
    return train_cgs(corpus, k, CGS_ITERATIONS, NoiseSource.internal(seed, 0)), list(vocabulary)


def vocabulary_of(texts: Sequence[Sequence[str]]) -> list[str]:
    return sorted({w for t in texts for w in t})


def percentile_length(texts: Sequence[Sequence[str]]) -> int:
    return max(1, math.ceil(float(np.percentile([len(t) for t in texts], ZHU_PERCENTILE))))


def write_json_texts(path: Path, texts: Sequence[str]) -> Path:
    path.write_text(json.dumps({"text": list(texts)}))
    return path


def write_csv(path: Path, texts: Sequence[str], authors: Sequence[str], prefix: str) -> Path:
    """CSV with text, author_id and a doc_id."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["doc_id", "text", "author_id"])
        writer.writerows(
            (f"{prefix}-{i}", t, a) for i, (t, a) in enumerate(zip(texts, authors, strict=True))
        )
    return path


class Runner:
    """Releases and scores rows, collecting one record per (target, epsilon, row,
    repetition); with a ``name``, every record is written to the json at once
    (``harness.checkpoint(name, ..., out)``: partial results survive)."""

    def __init__(
        self, header: dict | None = None, name: str | None = None, out: Path | None = None
    ) -> None:
        self.header = header or {}
        self.name, self.out = name, out
        self.records: list[dict] = []
        self.info: dict[str, Any] = {}
        self.start = time.perf_counter()

    def results(self, complete: bool = False) -> dict:
        return {
            **self.header,
            "complete": complete,
            "seconds": time.perf_counter() - self.start,
            "info": self.info,
            "records": [{k: v for k, v in r.items() if k != "words"} for r in self.records],
        }

    def save(self, complete: bool = False) -> dict:
        results = self.results(complete)
        if self.name is not None:
            checkpoint(self.name, results, self.out)
        return results

    def _add(self, record: dict) -> None:
        self.records.append(record)
        self.save()

    def release(
        self,
        target: str,
        row: Row,
        workspace,
        dataset: str,
        *,
        epsilon: float,
        topics: int,
        rep: int,
        reference: Sequence[Sequence[str]],
        texts: Texts,
        truth: tuple[np.ndarray, dict[str, int]] | None = None,
        seed: int | None = None,
    ) -> dict:
        """One unseeded production release; returns its record (``words`` kept for the
        references, not written). ``seed``: a seeded test release instead (the production
        noise distributions from a seeded generator), for the benchmarks that compare
        settings on the same noise (``m1_uniform.py``, ``local.py``); never this one's."""
        import pyarrow.parquet as pq

        from fdptm.flows.release import release
        from fdptm.request import ReleaseRequest

        record: dict[str, Any] = {
            "target": target,
            "epsilon": epsilon,
            "row": row.key,
            "label": row.label,
            "kind": "release",
            "rep": rep,
        }
        start = time.perf_counter()
        try:
            request = ReleaseRequest(
                dataset=dataset,
                epsilon=epsilon,
                delta=DELTA,
                topics=topics,
                seed=seed,  # None, production: OpenDP's samplers and ChaCha20
                workspace=str(workspace.root),
                **({"mechanism": "dp-vi"} | row.fields),  # rows without one are dp-vi's
            )
            outcome = release(request)
        except Exception as exc:  # a failed release is a result: counted, never fatal
            record.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:400])
            if found := re.search(r"DP vocabulary has (\d+) words", str(exc)):
                record["failed_vocabulary"] = int(found.group(1))
            record["seconds"] = time.perf_counter() - start
            log(f"  {target} eps={epsilon:g} {row.key} #{rep}: FAILED {exc}")
            self._add(record)
            return record
        seconds = time.perf_counter() - start
        folder = Path(workspace.root) / "releases" / outcome["run_id"]
        manifest = json.loads((folder / "manifest.json").read_text())
        guarantee = manifest["guarantee"]
        if guarantee.get("seeded") is not (seed is not None):
            raise AssertionError(
                f"release {outcome['run_id']} says seeded={guarantee.get('seeded')!r}, asked "
                f"for with seed {seed!r}: every figure of this benchmark must come from an "
                "unseeded production release"
            )
        table = pq.read_table(folder / "topic_word.parquet").sort_by("topic")
        phi = np.array(table.column("probabilities").to_pylist(), dtype=np.float64)
        vocabulary = pq.read_table(folder / "vocabulary.parquet").sort_by("index")
        words = vocabulary.column("word").to_pylist()
        entries = sorted(manifest["topics"], key=lambda t: t["topic"])
        listed = [[w["word"] for w in t["words"]] for t in entries]
        signal = [not t["no_signal"] for t in entries]
        stages = {s["step"]: s for s in manifest["stages"]}
        m1 = stages.get("M1", {})
        m2 = stages.get("M2", {}).get("parameters") or {}
        record.update(
            ok=True,
            seconds=seconds,
            notion=guarantee["notion"],
            adjacency=guarantee["adjacency"],
            seeded=seed is not None,
            sampler=manifest["noise"]["sampler"],
            other_randomness=manifest["noise"].get("other_randomness"),
            tested=all(t["tested"] for t in entries),
            filler=float(len(m1.get("public_filler") or [])),
            m1_rho=(m1.get("parameters") or {}).get("rho"),
            m2_noise_std=m2.get("noise_std"),
            **score(phi, words, listed, signal, reference, texts, truth),
        )
        record["words"] = words
        self._add(record)
        log(
            f"  {target} eps={epsilon:g} {row.key} #{rep}: V={len(words)} "
            + _fmt(record, "npmi", "npmi")
            + _fmt(record, "c_npmi", "c_npmi")
            + f"signal={record['signal_topics']:.0f} listed={record['listed_words']:.1f} "
            + (
                f"cos={record['cosine']:.3f} planted={record['planted_recovered']:.0f} "
                f"not_planted={record['signal_not_planted']:.0f} "
                if truth
                else ""
            )
            + f"{seconds:.1f}s"
        )
        return record

    def reference(
        self,
        target: str,
        key: str,
        label: str,
        epsilon: float | None,
        seed: int,
        fit: Callable[[], tuple[np.ndarray, Sequence[str]]],
        reference: Sequence[Sequence[str]],
        texts: Texts,
        truth: tuple[np.ndarray, dict[str, int]] | None = None,
    ) -> dict:
        """A non-private (or public-only) model, seeded (not a release), scored like a
        release with its topics listed by the floor rule (``floor_listed``)."""
        start = time.perf_counter()
        phi, words = fit()
        seconds = time.perf_counter() - start
        listed, signal = floor_listed(phi, words)
        record = {
            "target": target,
            "epsilon": epsilon,
            "row": key,
            "label": label,
            "kind": "reference",
            "rep": seed,
            "seed": seed,
            "ok": True,
            "seconds": seconds,
            "notion": "not DP",
            **score(phi, list(words), listed, signal, reference, texts, truth),
        }
        self._add(record)
        log(
            f"  {target} {key} seed={seed}: V={len(words)} "
            + _fmt(record, "npmi", "npmi")
            + _fmt(record, "c_npmi", "c_npmi")
            + (f"cos={record['cosine']:.3f} " if truth else "")
            + f"{seconds:.1f}s"
        )
        return record


def _fmt(record: dict, key: str, name: str) -> str:
    value = record.get(key)
    return f"{name}=-- " if value is None else f"{name}={value:.3f} "


def _preprocess(texts: Sequence[str]) -> list[list[str]]:
    from fdptm.tasks.preprocess import preprocess_texts

    return preprocess_texts(list(texts))


# --------------------------------------------------------------------------- target 1


def target1(
    runner: Runner, raw: list[str], tokens: list[list[str]], n: int, quick: bool, all_rows: bool
) -> None:
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    zhu_tokens = percentile_length(tokens)
    rows = [r for r in rows_target1(zhu_tokens) if r.chosen(quick, all_rows)]
    full_vocab = vocabulary_of(tokens)
    texts = Texts(tokens)
    runner.info["t1"] = {
        "documents": len(raw),
        "zhu_max_tokens_per_doc": zhu_tokens,
        "vocabulary": len(full_vocab),
    }
    with tempfile.TemporaryDirectory(prefix="fdptm-utility-") as tmp:
        workspace = Workspace.resolve(Path(tmp) / "ws")
        ingest(write_json_texts(Path(tmp) / "pheme.json", raw), "pheme", workspace)
        for rep in range(n):
            log(f"target 1, repetition {rep + 1} of {n}")
            for eps in (1.0, 3.0):
                default_words = None
                for row in rows:
                    rec = runner.release(
                        "t1", row, workspace, "pheme",
                        epsilon=eps, topics=PHEME_TOPICS, rep=rep, reference=tokens,
                        texts=texts,
                    )  # fmt: skip
                    if row.key == "default" and rec["ok"]:
                        default_words = rec["words"]
                if default_words is not None:
                    vocab = default_words
                    runner.reference(
                        "t1", "cgs-dpvocab",
                        "non-private CGS on the default release's DP vocabulary",
                        eps, rep, partial(cgs_fit, tokens, PHEME_TOPICS, rep, vocab),
                        tokens, texts,
                    )  # fmt: skip
                    if not quick:
                        runner.reference(
                            "t1", "gensim-dpvocab",
                            "non-private gensim LdaModel on the default release's DP vocabulary",
                            eps, rep,
                            partial(gensim_topics, tokens, PHEME_TOPICS, rep, set(vocab)),
                            tokens, texts,
                        )  # fmt: skip
            runner.reference(
                "t1", "cgs-full", "non-private CGS, full vocabulary", None, rep,
                partial(cgs_fit, tokens, PHEME_TOPICS, rep, full_vocab),
                tokens, texts,
            )  # fmt: skip
            runner.reference(
                "t1", "gensim-full", "non-private gensim LdaModel, full vocabulary", None, rep,
                partial(gensim_topics, tokens, PHEME_TOPICS, rep), tokens, texts,
            )  # fmt: skip


# --------------------------------------------------------------------------- target 2


def target2(
    runner: Runner, raw: list[str], tokens: list[list[str]], n: int, quick: bool, all_rows: bool
) -> None:
    """Per repetition a new random 10% public split (split seed = repetition), one release
    per row and epsilon on it, and the references seeded with the repetition."""
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    info: dict[str, Any] = {"splits": []}
    runner.info["t2"] = info
    for rep in range(n):
        log(f"target 2, repetition {rep + 1} of {n}")
        order = np.random.default_rng(np.random.SeedSequence(rep, spawn_key=(10,))).permutation(
            len(raw)
        )
        n_pub = round(PUBLIC_SHARE * len(raw))
        pub_idx, priv_idx = np.sort(order[:n_pub]), np.sort(order[n_pub:])
        pub_tokens = [tokens[i] for i in pub_idx]
        priv_tokens = [tokens[i] for i in priv_idx]
        texts = Texts(priv_tokens)  # the released (training) documents
        zhu_tokens = percentile_length(priv_tokens)
        rows = [r for r in rows_target2(zhu_tokens) if r.chosen(quick, all_rows)]
        priv_vocab = vocabulary_of(priv_tokens)
        info["splits"].append(
            {"rep": rep, "public": len(pub_idx), "private": len(priv_idx), "zhu": zhu_tokens}
        )
        with tempfile.TemporaryDirectory(prefix="fdptm-utility-") as tmp:
            workspace = Workspace.resolve(Path(tmp) / "ws")
            ingest(
                write_json_texts(Path(tmp) / "pub.json", [raw[i] for i in pub_idx]),
                "pub", workspace, public=True,
            )  # fmt: skip
            ingest(
                write_json_texts(Path(tmp) / "priv.json", [raw[i] for i in priv_idx]),
                "priv", workspace,
            )  # fmt: skip
            public_vocab = None  # 'vocabulary public:pub' without m1: the same at every epsilon
            for eps in (1.0, 3.0):
                for row in rows:
                    rec = runner.release(
                        "t2", row, workspace, "priv",
                        epsilon=eps, topics=PHEME_TOPICS, rep=rep, reference=tokens,
                        texts=texts,
                    )  # fmt: skip
                    if rec["ok"] and row.key == "pubvocab+prior":
                        public_vocab = rec["words"]
        if public_vocab is not None:
            runner.reference(
                "t2", "public-only",
                "CGS on the public 10% alone, over the public vocabulary (reads no private data)",
                None, rep,
                partial(cgs_fit, pub_tokens, PHEME_TOPICS, rep, public_vocab),
                tokens, texts,
            )  # fmt: skip
            runner.reference(
                "t2", "gensim-releasevocab",
                "non-private gensim LdaModel on the private 90%, over the public vocabulary",
                None, rep,
                partial(gensim_topics, priv_tokens, PHEME_TOPICS, rep, set(public_vocab)),
                tokens, texts,
            )  # fmt: skip
            if not quick:
                runner.reference(
                    "t2", "cgs-releasevocab",
                    "non-private CGS on the private 90%, over the public vocabulary",
                    None, rep,
                    partial(cgs_fit, priv_tokens, PHEME_TOPICS, rep, public_vocab),
                    tokens, texts,
                )  # fmt: skip
        runner.reference(
            "t2", "gensim-full", "non-private gensim LdaModel on the private 90%, full "
            "private vocabulary", None, rep,
            partial(gensim_topics, priv_tokens, PHEME_TOPICS, rep), tokens, texts,
        )  # fmt: skip
        if not quick:
            runner.reference(
                "t2", "cgs-full", "non-private CGS on the private 90%, full private vocabulary",
                None, rep,
                partial(cgs_fit, priv_tokens, PHEME_TOPICS, rep, priv_vocab),
                tokens, texts,
            )  # fmt: skip


# --------------------------------------------------------------------------- target 3


def pronounceable_words(n: int, seed: int, spawn: int = 30) -> list[str]:
    """``n`` distinct consonant-vowel strings of 4 to 10 letters that PRE maps to themselves
    (no stop word, no lemma change), in random order."""
    from fdptm.tasks.preprocess import preprocess_texts

    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(spawn,)))
    consonants, vowels = list("bdfgklmnprtvz"), list("aeiou")
    found: list[str] = []
    seen: set[str] = set()
    while len(found) < n:
        batch = []
        while len(batch) < 2 * (n - len(found)):
            syllables = int(rng.integers(2, 6))
            word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables))
            if rng.random() < 0.5:
                word += rng.choice(consonants)
            if 4 <= len(word) <= 10 and word not in seen:
                seen.add(word)
                batch.append(word)
        for word, out in zip(batch, preprocess_texts(batch), strict=True):
            if out == [word] and len(found) < n:
                found.append(word)
    return found


def heavy_tail_authors(n_docs: int, rng: np.random.Generator) -> np.ndarray:
    """Author index per document: author 0 holds SYN_TOP_SHARE of the documents, half the
    authors one document each, the rest at least two, Zipf-distributed (weights 1/rank)."""
    top = round(SYN_TOP_SHARE * n_docs)
    singles = round(SYN_SINGLE_SHARE * SYN_AUTHORS)
    rest = SYN_AUTHORS - 1 - singles
    spare = n_docs - top - singles - 2 * rest
    if spare < 0:
        raise ValueError("too few documents for the author distribution")
    weights = 1.0 / np.arange(1, rest + 1)
    extra = rng.multinomial(spare, weights / weights.sum())
    sizes = np.concatenate([[top], 2 + extra, np.ones(singles, dtype=np.int64)])
    authors = np.repeat(np.arange(SYN_AUTHORS), sizes)
    return rng.permutation(authors)


def target3(runner: Runner, n: int, quick: bool, all_rows: bool) -> None:
    """Per repetition a new synthetic corpus (generator seed 1000 + repetition), one release
    per row on it, and the references seeded with the repetition."""
    from fdptm.evaluation.synthetic import generate_lda
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    info: dict[str, Any] = {"corpora": []}
    runner.info["t3"] = info
    for rep in range(n):
        log(f"target 3, repetition {rep + 1} of {n}")
        data = generate_lda(
            SYN_DOCS + SYN_PUBLIC_DOCS, SYN_WORDS, SYN_TOPICS,
            doc_length=SYN_DOC_LENGTH, eta=SYN_ETA, seed=1000 + rep,
        )  # fmt: skip
        vocab = pronounceable_words(SYN_WORDS, rep)
        ptr, ids = data.corpus.doc_ptr, data.corpus.words
        all_tokens = [[vocab[w] for w in ids[ptr[d] : ptr[d + 1]]] for d in range(len(ptr) - 1)]
        priv_tokens, pub_tokens = all_tokens[:SYN_DOCS], all_tokens[SYN_DOCS:]
        texts = Texts(priv_tokens)
        rng = np.random.default_rng(np.random.SeedSequence(rep, spawn_key=(31,)))
        authors = heavy_tail_authors(SYN_DOCS, rng)
        sizes = np.bincount(authors, minlength=SYN_AUTHORS)
        zhu_tokens = percentile_length(priv_tokens)
        rows = [r for r in rows_target3(zhu_tokens) if r.chosen(quick, all_rows)]
        truth = (data.phi, {w: i for i, w in enumerate(vocab)})
        info["corpora"].append(
            {
                "rep": rep,
                "documents": SYN_DOCS,
                "authors": int((sizes > 0).sum()),
                "tokens": int(sum(map(len, priv_tokens))),
                "largest_author_docs": int(sizes.max()),
                "second_author_docs": int(np.sort(sizes)[-2]),
                "single_doc_authors": int((sizes == 1).sum()),
                "public_documents": SYN_PUBLIC_DOCS,
                "zhu": zhu_tokens,
            }
        )
        with tempfile.TemporaryDirectory(prefix="fdptm-utility-") as tmp:
            workspace = Workspace.resolve(Path(tmp) / "ws")
            ingest(
                write_csv(
                    Path(tmp) / "pub.csv",
                    [" ".join(t) for t in pub_tokens],
                    [f"public-{i}" for i in range(SYN_PUBLIC_DOCS)],
                    "pub",
                ),
                "pub", workspace, public=True,
            )  # fmt: skip
            ingest(
                write_csv(
                    Path(tmp) / "priv.csv",
                    [" ".join(t) for t in priv_tokens],
                    [f"author-{a}" for a in authors],
                    "priv",
                ),
                "priv", workspace,
            )  # fmt: skip
            for row in rows:
                runner.release(
                    "t3", row, workspace, "priv",
                    epsilon=SYN_EPSILON, topics=SYN_TOPICS, rep=rep,
                    reference=all_tokens, texts=texts, truth=truth,
                )  # fmt: skip
        pub_vocab = vocabulary_of(pub_tokens)
        runner.reference(
            "t3", "public-only", "CGS on the public documents alone (reads no private data)",
            SYN_EPSILON, rep,
            partial(cgs_fit, pub_tokens, SYN_TOPICS, rep, pub_vocab),
            all_tokens, texts, truth,
        )  # fmt: skip
        priv_vocab = vocabulary_of(priv_tokens)
        runner.reference(
            "t3", "cgs-full", "non-private CGS on the private documents, full vocabulary",
            SYN_EPSILON, rep,
            partial(cgs_fit, priv_tokens, SYN_TOPICS, rep, priv_vocab),
            all_tokens, texts, truth,
        )  # fmt: skip
        if not quick:
            runner.reference(
                "t3", "gensim-full",
                "non-private gensim LdaModel on the private documents, full vocabulary",
                SYN_EPSILON, rep,
                partial(gensim_topics, priv_tokens, SYN_TOPICS, rep),
                all_tokens, texts, truth,
            )  # fmt: skip


# --------------------------------------------------------------------------- target 4


def empty_documents(n: int) -> list[str]:
    """``n`` documents of stop words (PRE's own list), short tokens, digits and punctuation:
    text that ingest accepts and PRE turns into no token at all."""
    from fdptm.text import stop_words

    rng = np.random.default_rng(np.random.SeedSequence(40))  # the data, not the noise
    stops = sorted(stop_words())
    fillers = ["a", "an", "ok", "x", "42", "2024", "...", "!!", "?", ",", "-", "@", "#", ":)"]
    docs = []
    for _ in range(n):
        size = int(rng.integers(5, 20))
        docs.append(" ".join(rng.choice(stops + fillers, size=size)).capitalize() + ".")
    return docs


def target4(runner: Runner, raw: list[str], tokens: list[list[str]], n: int) -> None:
    """Pure noise: releases on data in which no public word occurs."""
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    empty = empty_documents(NOISE_DOCS)
    empty_tokens = _preprocess(empty)
    if any(empty_tokens):
        raise AssertionError("the 'empty' documents keep tokens after PRE")
    rng = np.random.default_rng(np.random.SeedSequence(41))  # the data, not the noise
    pick = np.sort(rng.choice([i for i, t in enumerate(tokens) if t], NOISE_DOCS, replace=False))
    real, real_tokens = [raw[i] for i in pick], [tokens[i] for i in pick]
    seen = {w for t in tokens for w in t}  # made-up words occur nowhere in PHEME
    made_up = [w for w in pronounceable_words(2 * NOISE_MADE_UP_WORDS, 0, 40) if w not in seen]
    made_up = made_up[:NOISE_MADE_UP_WORDS]
    if {w for t in real_tokens for w in t} & set(made_up):
        raise AssertionError("a made-up word occurs in the documents")
    empty_texts, real_texts = Texts(empty_tokens), Texts(real_tokens)
    with tempfile.TemporaryDirectory(prefix="fdptm-utility-") as tmp:
        words_file = Path(tmp) / "made_up_words.txt"
        words_file.write_text("\n".join(made_up) + "\n")
        cells = [
            (
                Row("empty-wordfreq", f"(a) {NOISE_DOCS} documents empty after PRE, vocabulary "
                    f"{NOISE_WORDFREQ}, m1 none", {"vocabulary": NOISE_WORDFREQ, "m1": "none"}),
                "empty", empty_tokens, empty_texts,
            ),
            (
                Row("empty-setunion", f"(a') {NOISE_DOCS} documents empty after PRE, DP set "
                    "union (defaults: finds no word, filled up to k with public words)"),
                "empty", empty_tokens, empty_texts,
            ),
            (
                Row("made-up", f"(b) {NOISE_DOCS} PHEME tweets, vocabulary: a word list of "
                    f"{len(made_up)} made-up words none of which occurs in them, m1 none",
                    {"vocabulary": str(words_file), "m1": "none"}),
                "real", real_tokens, real_texts,
            ),
            (
                Row("empty-wordfreq-biterm", "(a) as above, biterm",
                    {"vocabulary": NOISE_WORDFREQ, "m1": "none"} | BITERM),
                "empty", empty_tokens, empty_texts,
            ),
            (
                Row("empty-setunion-biterm", "(a') as above, biterm",
                    BITERM),
                "empty", empty_tokens, empty_texts,
            ),
            (
                Row("made-up-biterm", "(b) as above, biterm",
                    {"vocabulary": str(words_file), "m1": "none"} | BITERM),
                "real", real_tokens, real_texts,
            ),
        ]  # fmt: skip
        cells = [c for c in cells if not ONLY_ROWS or c[0].key in ONLY_ROWS]
        runner.info["t4"] = {
            "documents": NOISE_DOCS,
            "empty_tokens_after_pre": int(sum(map(len, empty_tokens))),
            "real_tokens_after_pre": int(sum(map(len, real_tokens))),
            "made_up_words": len(made_up),
            "cells": {row.key: row.label for row, *_ in cells},
        }
        workspace = Workspace.resolve(Path(tmp) / "ws")
        ingest(write_json_texts(Path(tmp) / "empty.json", empty), "empty", workspace)
        ingest(write_json_texts(Path(tmp) / "real.json", real), "real", workspace)
        for rep in range(n):
            if rep % 10 == 0:
                log(f"target 4, repetitions {rep + 1}-{min(rep + 10, n)} of {n}")
            for row, dataset, reference, texts in cells:
                runner.release(
                    "t4", row, workspace, dataset,
                    epsilon=NOISE_EPSILON, topics=NOISE_TOPICS, rep=rep,
                    reference=reference, texts=texts,
                )  # fmt: skip


# --------------------------------------------------------------------------- summary


METRICS = (
    "npmi",
    "c_npmi",
    "c_npmi_topics",
    "c_npmi_unknown",
    "diversity",
    "above_floor",
    "min_above_floor",
    "signal_topics",
    "listed_words",
    "vocabulary",
    "filler",
    "cosine",
    "cosine_on_vocab",
    "planted_recovered",
    "signal_planted",
    "signal_not_planted",
    "signal_not_near",
    "signal_not_planted_on_vocab",
    "seconds",
    "m1_rho",
    "m2_noise_std",
)


def summarise(records: list[dict]) -> dict:
    """Per (target, epsilon, row): runs, successes, errors, the values per metric over the
    successful releases (by repetition) and their (median, min, max)."""
    groups: dict[tuple, dict] = {}
    for r in records:
        eps = "" if r["epsilon"] is None else f"{r['epsilon']:g}"
        g = groups.setdefault(
            (r["target"], eps, r["row"]),
            {
                "target": r["target"],
                "epsilon": eps,
                "row": r["row"],
                "label": r["label"],
                "kind": r["kind"],
                "runs": 0,
                "ok": 0,
                "errors": [],
                "failed_vocabulary": [],
                "notion": set(),
                "tested": set(),
                "samplers": set(),
                "values": {},
                "by_rep": {},
            },
        )
        g["runs"] += 1
        if not r["ok"]:
            g["errors"].append(r["error"])
            if "failed_vocabulary" in r:
                g["failed_vocabulary"].append(r["failed_vocabulary"])
            continue
        g["ok"] += 1
        g["notion"].add(r.get("notion", ""))
        if r["kind"] == "release":
            g["tested"].add(bool(r.get("tested")))
            g["samplers"].add(r.get("sampler", ""))
        for m in METRICS:
            if r.get(m) is not None:
                g["values"].setdefault(m, []).append(float(r[m]))
                g["by_rep"].setdefault(m, {})[r["rep"]] = float(r[m])
    out = {}
    for key, g in groups.items():
        g["notion"] = ", ".join(sorted(g["notion"]))
        g["stats"] = {
            m: (float(np.median(v)), float(min(v)), float(max(v))) for m, v in g["values"].items()
        }
        out["|".join(key)] = g
    return out


def _cell(stats: dict, metric: str, digits: int) -> str:
    if metric not in stats:
        return "-"
    med, lo, hi = stats[metric]
    if lo == hi:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _tested(g: dict) -> str:
    if g["kind"] != "release":
        return "floor rule"
    if g["tested"] == {True}:
        return "yes"
    if g["tested"] == {False}:
        return "no"
    return "mixed" if g["tested"] else "-"


def table(summary: dict, target: str, truth: bool = False, noise: bool = False) -> list[str]:
    columns = ["epsilon", "setting", "notion", "ok", "V"]
    if not noise:
        columns += ["NPMI (project)", "c_npmi (gensim, listed words, window 10)", "topics scored"]
        columns += ["diversity", "above floor (mean)", "min above floor"]
    columns += ["tested", "signal topics", "listed words per topic"]
    if noise:
        columns += ["releases listing a signal topic", "signal topics in all"]
    if truth:
        columns += ["cosine to truth", "cosine on release vocab", "planted recovered"]
        columns += ["signal topics planted", "signal topics not planted"]
        columns += ["of which near no true topic", "not planted on release vocab"]
    columns.append("seconds")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    groups = [g for g in summary.values() if g["target"] == target]
    # releases first within each epsilon, references after; epsilon-free references last
    groups.sort(key=lambda g: (g["epsilon"] == "", g["epsilon"], g["kind"] != "release"))
    for g in groups:
        s = g["stats"]
        cells = [
            g["epsilon"] or "any",
            g["label"] if g["kind"] == "release" else f"*reference:* {g['label']}",
            g["notion"] or "-",
            f"{g['ok']}/{g['runs']}",
            _cell(s, "vocabulary", 0),
        ]
        if not noise:
            cells += [
                _cell(s, "npmi", 3),
                _cell(s, "c_npmi", 3),
                _cell(s, "c_npmi_topics", 0),
                _cell(s, "diversity", 2),
                _cell(s, "above_floor", 1),
                _cell(s, "min_above_floor", 0),
            ]
        cells += [_tested(g), _cell(s, "signal_topics", 0), _cell(s, "listed_words", 1)]
        if noise:
            signal = g["values"].get("signal_topics", [])
            cells += [f"{sum(1 for v in signal if v > 0)}/{g['runs']}", f"{sum(signal):.0f}"]
        if truth:
            cells += [
                _cell(s, "cosine", 3),
                _cell(s, "cosine_on_vocab", 3),
                _cell(s, "planted_recovered", 0),
                _cell(s, "signal_planted", 0),
                _cell(s, "signal_not_planted", 0),
                _cell(s, "signal_not_near", 0),
                _cell(s, "signal_not_planted_on_vocab", 0),
            ]
        cells.append(_cell(s, "seconds", 1))
        lines.append("| " + " | ".join(cells) + " |")
    errors = sorted({e for g in groups for e in g["errors"]})
    if errors:
        lines += ["", "Failures:", ""] + [f"- {e}" for e in errors]
    return lines


def _get(summary: dict, target: str, eps: str, row: str) -> dict | None:
    return summary.get(f"{target}|{eps}|{row}")


def _med(g: dict | None, metric: str) -> float | None:
    if g is None or metric not in g["stats"]:
        return None
    return g["stats"][metric][0]


def _range(g: dict | None, metric: str, digits: int = 3) -> str:
    if g is None:
        return "n/a (not run)"
    if metric not in g["stats"]:
        return "n/a (no successful release)"
    med, lo, hi = g["stats"][metric]
    runs = f"{len(g['values'][metric])}/{g['runs']} releases"
    if g["kind"] != "release":
        runs = f"{len(g['values'][metric])} seeds"
    sign = "+" if metric in ("npmi", "c_npmi") else ""
    return f"{med:{sign}.{digits}f} [{lo:{sign}.{digits}f}, {hi:{sign}.{digits}f}] ({runs})"


def _hits(g: dict | None, metric: str, goal: Callable[[int], float | None]) -> str:
    """On how many releases ``metric`` met ``goal(rep)`` (a failed release never does)."""
    if g is None:
        return ""
    values = g["by_rep"].get(metric, {})
    hits = sum(1 for rep, v in values.items() if (aim := goal(rep)) is not None and v >= aim)
    return f" (met by {hits} of {g['runs']} releases)"


def _best(summary: dict, target: str, eps: str, ok: Callable[[dict], bool]) -> str:
    """The DP rows whose median meets ``ok``, named."""
    met = [
        g["label"]
        for g in summary.values()
        if g["target"] == target
        and g["epsilon"] == eps
        and g["kind"] == "release"
        and g["ok"]
        and ok(g)
    ]
    return "; ".join(met) if met else "none"


def word(flag: bool) -> str:
    return "**met**" if flag else "**missed**"


def _ge(value: float | None, goal: float) -> bool:
    return value is not None and value >= goal


def verdicts(summary: dict) -> dict[str, list[str]]:
    """Met / missed per target (on the median over the releases), with the measured median,
    range and number of releases that met it, and what dominates a miss."""
    out: dict[str, list[str]] = {"t1": [], "t2": [], "t3": [], "t4": []}

    # Target 1.
    full = _get(summary, "t1", "", "cgs-full")
    gensim_full = _get(summary, "t1", "", "gensim-full")
    ceiling = (
        f" For scale, non-private models on the full vocabulary score NPMI "
        f"{_range(full, 'npmi')} (CGS) and {_range(gensim_full, 'npmi')} (gensim)."
    )
    g = _get(summary, "t1", "3", "default")
    cgs = _get(summary, "t1", "3", "cgs-dpvocab")
    if g is not None:
        npmi, c = _med(g, "npmi"), _med(g, "c_npmi")
        met_npmi, met_c = _ge(npmi, T1_EPS3_NPMI), _ge(c, T1_EPS3_CNPMI)
        line = (
            f"epsilon 3, default dp-vi: project NPMI >= {T1_EPS3_NPMI}: {word(met_npmi)}, "
            f"NPMI {_range(g, 'npmi')}"
            + _hits(g, "npmi", lambda _: T1_EPS3_NPMI)
            + f"; gensim c_npmi >= {T1_EPS3_CNPMI}: {word(met_c)}, c_npmi "
            f"{_range(g, 'c_npmi')}"
            + _hits(g, "c_npmi", lambda _: T1_EPS3_CNPMI)
            + f". Signal topics {_range(g, 'signal_topics', 0)}, listed words per topic "
            f"{_range(g, 'listed_words', 1)}, DP vocabulary {_range(g, 'vocabulary', 0)} words."
        )
        if not met_npmi:
            line += _diagnose(g, T1_EPS3_NPMI, cgs) + ceiling
        line += " DP rows whose median meets both: " + _best(
            summary, "t1", "3",
            lambda x: _ge(_med(x, "npmi"), T1_EPS3_NPMI) and _ge(_med(x, "c_npmi"), T1_EPS3_CNPMI),
        )  # fmt: skip
        out["t1"].append(line + ".")
        above = _med(g, "min_above_floor")
        out["t1"].append(
            f"epsilon 3, default dp-vi, issue 10's condition (>= {T1_EPS3_ABOVE} of every "
            f"topic's top 10 above the floor): {word(_ge(above, T1_EPS3_ABOVE))}, fewest "
            f"words above the floor in a topic {_range(g, 'min_above_floor', 0)}"
            + _hits(g, "min_above_floor", lambda _: T1_EPS3_ABOVE)
            + "."
        )
    g = _get(summary, "t1", "1", "default")
    cgs = _get(summary, "t1", "1", "cgs-dpvocab")
    if g is not None:
        npmi = _med(g, "npmi")
        met = _ge(npmi, T1_EPS1_NPMI)
        line = (
            f"epsilon 1, default dp-vi: project NPMI >= {T1_EPS1_NPMI}: {word(met)}, NPMI "
            f"{_range(g, 'npmi')}"
            + _hits(g, "npmi", lambda _: T1_EPS1_NPMI)
            + f"; gensim c_npmi {_range(g, 'c_npmi')}; signal topics "
            f"{_range(g, 'signal_topics', 0)}, listed words per topic "
            f"{_range(g, 'listed_words', 1)}; DP vocabulary {_range(g, 'vocabulary', 0)} words."
        )
        if not met:
            line += _diagnose(g, T1_EPS1_NPMI, cgs)
        line += " DP rows whose median meets it: " + _best(
            summary, "t1", "1", lambda x: _ge(_med(x, "npmi"), T1_EPS1_NPMI)
        )
        out["t1"].append(line + ".")

    # Target 2 (issue 10's targets).
    pub = _get(summary, "t2", "", "public-only")
    g = _get(summary, "t2", "1", "pubvocab+prior")
    if g is not None:
        npmi = _med(g, "npmi")
        met = _ge(npmi, T2_EPS1_NPMI)
        line = (
            f"epsilon 1, vocabulary public:pub + prior pub (issue 10: NPMI >= {T2_EPS1_NPMI}): "
            f"{word(met)}, NPMI {_range(g, 'npmi')}"
            + _hits(g, "npmi", lambda _: T2_EPS1_NPMI)
            + f"; gensim c_npmi {_range(g, 'c_npmi')}; the public topics alone score NPMI "
            f"{_range(pub, 'npmi')}."
        )
        if not met and npmi is not None:
            line += _diagnose_prior(npmi, T2_EPS1_NPMI, pub, None)
        line += " Rows whose median meets it: " + _best(
            summary, "t2", "1", lambda x: _ge(_med(x, "npmi"), T2_EPS1_NPMI)
        )
        out["t2"].append(line + ".")
    g = _get(summary, "t2", "3", "pubvocab+prior")
    gensim_full = _get(summary, "t2", "", "gensim-full")
    gensim_vocab = _get(summary, "t2", "", "gensim-releasevocab")
    goal = _med(gensim_full, "npmi")
    if g is not None and goal is not None:
        npmi = _med(g, "npmi")
        met = _ge(npmi, goal)
        line = (
            "epsilon 3, vocabulary public:pub + prior pub (issue 10: NPMI >= non-private gensim "
            f"on the private 90%, full vocabulary, {_range(gensim_full, 'npmi')}): {word(met)}, "
            f"NPMI {_range(g, 'npmi')}"
            + _hits(g, "npmi", lambda rep: gensim_full["by_rep"]["npmi"].get(rep))
            + " against the same split's gensim model; gensim c_npmi "
            f"{_range(g, 'c_npmi')}; gensim on the release's vocabulary scores NPMI "
            f"{_range(gensim_vocab, 'npmi')}; non-private CGS on the private 90% with its full "
            f"vocabulary {_range(_get(summary, 't2', '', 'cgs-full'), 'npmi')}."
        )
        if not met and npmi is not None:
            line += _diagnose_prior(npmi, goal, pub, gensim_vocab)
        line += " Rows whose median meets it: " + _best(
            summary, "t2", "3", lambda x: _ge(_med(x, "npmi"), goal)
        )
        out["t2"].append(line + ".")

    # Target 3.
    rows = [x for x in summary.values() if x["target"] == "t3" and x["kind"] == "release"]
    met_rows, missed_rows = [], []
    for x in rows:
        values = x["values"].get("signal_not_planted", [])
        bad = sum(1 for v in values if v > 0)
        met = x["ok"] == x["runs"] and bad == 0
        (met_rows if met else missed_rows).append(x["label"])
        vacuous = met and not sum(x["values"].get("signal_topics", []))
        line = (
            f"{x['label']}: {word(met)}"
            + (" (only vacuously: no release lists any topic as signal)" if vacuous else "")
            + f": {bad} of {x['runs']} releases list a topic that is not "
            f"planted ({sum(values):.0f} such topics in all; of them "
            f"{sum(x['values'].get('signal_not_near', [])):.0f} have no true topic within "
            f"cosine {PLANTED_COSINE} at all, and "
            f"{sum(x['values'].get('signal_not_planted_on_vocab', [])):.0f} signal topics are not "
            "planted even against the true topics restricted to the release's own words)"
            + (f", {x['runs'] - x['ok']} releases failed" if x["ok"] < x["runs"] else "")
            + f"; signal topics {_range(x, 'signal_topics', 0)} (planted among them "
            f"{_range(x, 'signal_planted', 0)}); planted topics recovered (cosine >= "
            f"{PLANTED_COSINE}) {_range(x, 'planted_recovered', 0)}; cosine to the true topics "
            f"{_range(x, 'cosine')}"
        )
        if _med(x, "filler"):
            line += f"; public filler words in the vocabulary {_range(x, 'filler', 0)}"
        out["t3"].append(line + ".")
    if rows:
        out["t3"].insert(
            0,
            "Target (every topic listed as signal is planted, no noise topic listed, in every "
            f"release): met by {len(met_rows)} of {len(rows)} DP settings"
            + (f"; missed by: {'; '.join(missed_rows)}" if missed_rows else "")
            + ".",
        )
    g = _get(summary, "t3", f"{SYN_EPSILON:g}", "pubvocab+prior")
    public = _get(summary, "t3", f"{SYN_EPSILON:g}", "public-only")
    if g is not None:
        cos = _med(g, "cosine")
        met = g["ok"] == g["runs"] and _ge(cos, T3_COSINE)
        out["t3"].append(
            f"Issue 10's target on this corpus (every release succeeds, cosine >= {T3_COSINE} "
            f"with a public prior): {word(met)}, {g['ok']}/{g['runs']} succeed, cosine "
            f"{_range(g, 'cosine')}"
            + _hits(g, "cosine", lambda _: T3_COSINE)
            + f"; the public documents alone (CGS) reach {_range(public, 'cosine')}."
        )

    # Target 4.
    for x in [x for x in summary.values() if x["target"] == "t4"]:
        signal = x["values"].get("signal_topics", [])
        listing = sum(1 for v in signal if v > 0)
        met = x["ok"] == x["runs"] and sum(signal) == T4_SIGNAL
        out["t4"].append(
            f"{x['label']}: zero topics listed as signal over {x['runs']} releases: {word(met)}"
            f": {sum(signal):.0f} signal topics in all, {listing} of {x['runs']} releases list "
            "at least one"
            + (f", {x['runs'] - x['ok']} releases failed" if x["ok"] < x["runs"] else "")
            + f"; released vocabulary {_range(x, 'vocabulary', 0)} words"
            + (f" ({_range(x, 'filler', 0)} public filler words)" if _med(x, "filler") else "")
            + "."
        )
    return out


def _diagnose(release: dict, goal: float, same_vocab: dict | None) -> str:
    """What dominates a miss: the DP vocabulary (a non-private model on it misses too) or
    M2's noise (a non-private model on the same vocabulary meets the target)."""
    ref, own = _med(same_vocab, "npmi"), _med(release, "npmi")
    if ref is None or own is None:
        return ""
    parts = [
        " Why: a non-private CGS model on the same DP vocabulary scores NPMI "
        f"{_range(same_vocab, 'npmi')}"
    ]
    if ref < goal:
        parts.append(", so the DP vocabulary (M1's output) alone already rules the target out")
    else:
        parts.append(f", so most of the gap ({ref - own:.3f}) is M2's noise, not the vocabulary")
    noise = _med(release, "m2_noise_std")
    if noise is not None:
        parts.append(
            f"; dp-vi adds Gaussian noise of standard deviation {noise:.1f} to each of the "
            "k x V summed statistics in every iteration, where each tweet's own statistics are "
            "clipped to L2 norm 2"
        )
    return "".join(parts) + "."


def _diagnose_prior(value: float, goal: float, public: dict | None, same_vocab: dict | None) -> str:
    """What dominates a miss with a public prior: the prior's own level, or the private
    model's (non-private gensim on the same vocabulary)."""
    parts = [f" Short by {goal - value:.3f}"]
    pub = _med(public, "npmi")
    if pub is not None:
        parts.append(f"; the public topics alone score {pub:.3f}")
    ref = _med(same_vocab, "npmi")
    if ref is not None:
        parts.append(f"; non-private gensim on the private 90% over the same vocabulary {ref:.3f}")
        if ref < goal:
            parts.append(
                " (below the goal too: the public vocabulary, not the noise, rules it out)"
            )
        else:
            parts.append(" (the noise on the private statistics costs the difference)")
    return "".join(parts) + "."


def _span(values: Sequence[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def headline(summary: dict) -> list[str]:
    """One line per target and cell: the condition, the measured median [min, max] over the
    releases, how many releases met it, and met / missed (judged on the median)."""
    lines = [
        "| target | cell | condition | measured: median [min, max] | releases meeting it | "
        "verdict |",
        "|---|---|---|---|---|---|",
    ]

    def add(target, g, cell, condition, metric, goal, digits=3):
        if g is None:
            return
        med = _med(g, metric)
        met = _ge(med, goal) and g["ok"] == g["runs"]
        hits = sum(1 for v in g["values"].get(metric, []) if v >= goal)
        lines.append(
            f"| {target} | {cell} | {condition} | {_cell(g['stats'], metric, digits)} | "
            f"{hits}/{g['runs']} | {word(met)} |"
        )

    for key, name in (("default", "dp-vi defaults"), ("biterm", "biterm defaults")):
        g3, g1 = _get(summary, "t1", "3", key), _get(summary, "t1", "1", key)
        cell = f"PHEME, eps 3, {name}"
        add("1 (issue 28)", g3, cell, f"NPMI >= {T1_EPS3_NPMI}", "npmi", T1_EPS3_NPMI)
        add(
            "1 (issue 28)", g3, cell, f"gensim c_npmi >= {T1_EPS3_CNPMI}", "c_npmi",
            T1_EPS3_CNPMI,
        )  # fmt: skip
        add(
            "1 (issue 28)", g1, f"PHEME, eps 1, {name}", f"NPMI >= {T1_EPS1_NPMI}", "npmi",
            T1_EPS1_NPMI,
        )  # fmt: skip
    g3 = _get(summary, "t1", "3", "default")
    add(
        "1 (issue 10)",
        g3,
        "PHEME, eps 3, dp-vi defaults",
        f"every topic >= {T1_EPS3_ABOVE} of its top 10 above the floor",
        "min_above_floor",
        T1_EPS3_ABOVE,
        0,
    )
    add(
        "2 (issue 10)",
        _get(summary, "t2", "1", "pubvocab+prior"),
        "PHEME 10% public, eps 1, public:pub + prior",
        f"NPMI >= {T2_EPS1_NPMI}",
        "npmi",
        T2_EPS1_NPMI,
    )
    gensim = _med(_get(summary, "t2", "", "gensim-full"), "npmi")
    if gensim is not None:
        add(
            "2 (issue 10)",
            _get(summary, "t2", "3", "pubvocab+prior"),
            "PHEME 10% public, eps 3, public:pub + prior",
            f"NPMI >= non-private gensim ({gensim:.3f})",
            "npmi",
            gensim,
        )
    for x in [x for x in summary.values() if x["target"] == "t3" and x["kind"] == "release"]:
        values = x["values"].get("signal_not_planted", [])
        clean = sum(1 for v in values if v == 0)
        met = x["ok"] == x["runs"] and clean == x["runs"]
        vacuous = (
            " (vacuous: no topic listed)" if not sum(x["values"].get("signal_topics", [])) else ""
        )
        lines.append(
            f"| 3 (issue 28) | synthetic author level, eps {SYN_EPSILON:g}, {x['label']} | "
            "every signal topic planted, in every release | signal topics not planted "
            f"{_cell(x['stats'], 'signal_not_planted', 0)}; planted recovered "
            f"{_cell(x['stats'], 'planted_recovered', 0)} | {clean}/{x['runs']} | "
            f"{word(met)}{vacuous} |"
        )
    add(
        "3 (issue 10)",
        _get(summary, "t3", f"{SYN_EPSILON:g}", "pubvocab+prior"),
        f"synthetic author level, eps {SYN_EPSILON:g}, public:pub + prior",
        f"cosine to truth >= {T3_COSINE}",
        "cosine",
        T3_COSINE,
    )
    for x in [x for x in summary.values() if x["target"] == "t4"]:
        signal = x["values"].get("signal_topics", [])
        clean = sum(1 for v in signal if v == 0)
        met = x["ok"] == x["runs"] and sum(signal) == T4_SIGNAL
        lines.append(
            f"| 4 (issue 28) | pure noise {x['label'].split(')')[0]}), "
            f"{'biterm' if x['row'].endswith('-biterm') else 'dp-vi'} | zero signal topics over "
            f"all releases | {sum(signal):.0f} signal topics in all | {clean}/{x['runs']} | "
            f"{word(met)} |"
        )
    return lines


def render(results: dict) -> str:
    m = results["machine"]
    summary = summarise(results["records"])
    v = verdicts(summary)
    info = results["info"]
    samplers = sorted({r["sampler"] for r in results["records"] if r.get("sampler")})
    other = sorted({r["other_randomness"] for r in results["records"] if r.get("other_randomness")})
    seeded = sum(1 for r in results["records"] if r["kind"] == "release" and r.get("seeded"))
    releases = [r for r in results["records"] if r["kind"] == "release"]
    unknown = f"{sum(r.get('c_npmi_unknown') or 0 for r in results['records']):.0f}"
    status = (
        ""
        if results.get("complete")
        else " · **partial: the run had not finished when this was written**"
    )
    lines = [
        f"Wall time {results['seconds'] / 60:.1f} min, the {m['cores']} cores shared with other "
        f"jobs{status}.",
        *[
            f"Rows {', '.join(a['rows'])} replaced by: `{a['command']}` · date "
            f"{a['machine']['date']} · {a['machine']['cpu']} · wall time "
            f"{a['seconds'] / 60:.1f} min"
            for a in results.get("additions", [])
        ],
        "",
        "**Every DP figure below is from an unseeded production release**: "
        "`fdptm.flows.release.release(ReleaseRequest(..., seed=None))`, the same code path as "
        "`fdptm release`, in one Prefect test harness, on datasets ingested with "
        "`fdptm.tasks.ingest.ingest` into a fresh workspace per dataset; the release is read "
        "back from `<workspace>/releases/<run_id>/`. Each manifest's guarantee says "
        f"`seeded: false` (checked for all {len(releases)} releases; {seeded} seeded) and "
        f"names its sampler: {'; '.join(samplers) or 'n/a'}; other randomness: "
        f"{'; '.join(other) or 'n/a'}. No seeded (test) release is used anywhere. "
        f"Cells: median [min, max] over the {results['releases']} releases per cell "
        f"({results['noise_releases']} per pure-noise cell) that succeeded; *ok* counts them. "
        "A target is judged on the median and the number of releases that met it is given. "
        "delta = 1e-5.",
        "",
        "Measures. NPMI (project) = `fdptm.evaluation.metrics.npmi`: each topic's top 10 words "
        "above its floor, co-occurrence per document over the whole corpus after PRE (all "
        "5,698 PHEME documents; all private and public documents of the synthetic corpus), a "
        "no-signal topic or one with < 2 words above its floor scoring -1. c_npmi (gensim) = "
        "`gensim.models.CoherenceModel(topics=..., texts=..., dictionary=Dictionary(texts), "
        f"coherence='c_npmi', topn={GENSIM_TOP}, window_size={GENSIM_WINDOW})` with topics = "
        "the words the release's manifest lists per topic (those that pass its noise test; "
        "untested releases, e.g. with a public prior or `--tune`, list the words above the "
        "floor) and texts = the training documents' token lists after PRE (PHEME: all of "
        "them; public split: the private 90%; synthetic: the private documents); topics "
        "listing fewer than 2 words are skipped (*topics scored* counts the rest), so c_npmi "
        "is the mean over the scored topics only; a listed word absent from the texts is "
        f"dropped, as gensim does ({unknown} such words over all releases and references). "
        "Diversity = `metrics.topic_diversity`. Above floor (mean) = "
        "`topwords.words_above_floor(phi, 10)`; min above floor = the fewest of a topic's top "
        "10 above its floor. Tested = the manifest's topics carry the noise test "
        "(`fdptm.evaluation.significance`). Signal topics = topics whose manifest entry has "
        "`no_signal: false`; listed words per topic = the mean over all k topics of the words "
        "the manifest lists (0 for a no-signal topic). V = released vocabulary size. Seconds: "
        "wall time of the `release` call (the Prefect flow, PRE to publish) or of the "
        "reference's training. Held-out likelihood is not measured by this benchmark. "
        "References are non-private (not DP), never released, and seeded (one seed per "
        "repetition, 0 to N-1); their topics are listed by the floor rule "
        "(`topwords.top_words`, `topwords.no_signal`). CGS = `train_cgs`, "
        f"{CGS_ITERATIONS} sweeps, alpha 0.1, beta 0.01, tokens outside the named vocabulary "
        f"dropped; gensim = `LdaModel`, {GENSIM_PASSES} passes, random_state = seed. The zhu "
        "rows (the FDPTM paper's pipeline: DP set union, then Zhu et al.'s noisy CGS) are an "
        "unproven claim (README, 'M2 mechanisms') released unseeded like the others; their "
        f"max_tokens_per_doc is the {ZHU_PERCENTILE}th percentile of the released corpus's "
        "document lengths, itself a non-private statistic.",
        "",
    ]
    lines += [
        "Settings run: the cells issue 28 names plus the public-data and synthetic settings "
        "the docs quote. Issue 10's exploratory settings (`--tune`, iterations 20, threshold "
        "2, private clipping, other M1 choices and shares) are kept in the script but run only "
        "with `--all-rows`: every unseeded release draws OpenDP's exact noise for each "
        "topic-word entry in each iteration, about 15 us a draw here (dp-vi with the prior over "
        "the 1,700-word public vocabulary: 16 s unseeded against 3 s for a seeded test run, "
        "measured on this machine when it was quiet), so the full grid would take hours.",
        "",
        "### Targets at a glance",
        "",
        "Judged on the median over the releases (a failed release counts as missing it); "
        "issue 10's earlier targets are kept and marked as such.",
        "",
        *headline(summary),
        "",
    ]
    t1 = info.get("t1")
    if t1:
        lines += [
            "### Target 1: PHEME, no public data",
            "",
            f"`pheme_clean.json` ({t1['documents']:,} tweets, {t1['vocabulary']:,} words after "
            f"PRE), document level, k = {PHEME_TOPICS}, one workspace, {results['releases']} "
            f"releases per cell. Targets (issue 28): epsilon 3, project NPMI >= {T1_EPS3_NPMI} "
            f"and gensim c_npmi >= {T1_EPS3_CNPMI}; epsilon 1, project NPMI >= {T1_EPS1_NPMI}.",
            "",
            *[f"- {x}" for x in v["t1"]],
            "",
            *table(summary, "t1"),
            "",
        ]
    t2 = info.get("t2")
    if t2 and t2["splits"]:
        sp = t2["splits"][0]
        lines += [
            "### Target 2: public prior (PHEME, 10% public)",
            "",
            f"Per repetition a new random {PUBLIC_SHARE:.0%} of the documents ({sp['public']}) "
            "is ingested as the public dataset `pub` (`public=True`) and the other "
            f"{sp['private']:,} as the private dataset `priv`, released once per setting and "
            "epsilon (so each cell's range covers the split as well as the noise). "
            "`vocabulary public:pub` without `m1` keeps the public list's 2,000 most frequent "
            "words (`m1 none`: M1 reads no private data and M2 gets the whole budget). With a "
            "public prior a release is untested (its entries carry the prior's counts): its "
            "topics list the words above the floor. Issue 28 sets no target of its own here; "
            f"issue 10's are checked: epsilon 1, NPMI >= {T2_EPS1_NPMI}; epsilon 3, NPMI at "
            "least that of a non-private gensim `LdaModel` on the private 90%.",
            "",
            *[f"- {x}" for x in v["t2"]],
            "",
            *table(summary, "t2"),
            "",
        ]
    t3 = info.get("t3")
    if t3 and t3["corpora"]:
        c = t3["corpora"]
        largest = sorted({x["largest_author_docs"] for x in c})
        singles = [x["single_doc_authors"] for x in c]
        lines += [
            "### Target 3: synthetic author-level corpus shaped like a held-out corpus",
            "",
            f"Per repetition, `generate_lda` draws a new corpus of "
            f"{SYN_DOCS + SYN_PUBLIC_DOCS:,} documents (k = {SYN_TOPICS}, V = {SYN_WORDS}, "
            f"eta = {SYN_ETA}, alpha = 0.1, about {SYN_DOC_LENGTH} tokens each) over "
            f"pronounceable 4-10 letter words that PRE keeps unchanged. {SYN_DOCS:,} are private, "
            f"written to a CSV (doc_id, text, author_id) of {SYN_AUTHORS} authors: one holds "
            f"{SYN_TOP_SHARE:.0%} ({', '.join(map(str, largest))} documents; contribution "
            f"bounding keeps 100), {_span(singles)} have one document, the others "
            "at least two (Zipf); author level. The other "
            f"{SYN_PUBLIC_DOCS} documents, by other authors, are the public dataset `pub`. "
            f"epsilon = {SYN_EPSILON:g}. A released topic is *planted* when its "
            f"Hungarian-matched cosine to its true topic (`matching.match_topics`, L1 cost, "
            "over the union of the true and released vocabularies) is >= "
            f"{PLANTED_COSINE}; *planted recovered* counts the true topics so matched. Target "
            "(issue 28): every topic listed as signal is planted and no noise topic is listed, "
            "in every release.",
            "",
            *[f"- {x}" for x in v["t3"]],
            "",
            *table(summary, "t3", truth=True),
            "",
        ]
    t4 = info.get("t4")
    if t4:
        lines += [
            "### Target 4: pure noise",
            "",
            f"k = {NOISE_TOPICS}, epsilon {NOISE_EPSILON:g}, document level, "
            f"{results['noise_releases']} releases per cell, one workspace. (a) and (a'): "
            f"{t4['documents']} documents of PRE's stop words, one- and two-letter tokens, "
            f"digits and punctuation, ingested normally; PRE leaves "
            f"{t4['empty_tokens_after_pre']} tokens. (b): {t4['documents']} random PHEME tweets "
            f"({t4['real_tokens_after_pre']:,} tokens after PRE) released over a word-list file "
            f"of {t4['made_up_words']} made-up pronounceable words, none of which occurs in "
            "PHEME. Target (issue 28): zero topics listed as signal over all releases of each "
            "cell.",
            "",
            *[f"- {x}" for x in v["t4"]],
            "",
            *table(summary, "t4", noise=True),
            "",
        ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def merged(results: dict, rows: list[str]) -> dict:
    """The committed results with the release records of ``rows`` replaced by ``results``'s
    (its references are dropped: the committed run has them), the run named in
    ``additions``."""
    committed = filled(json.loads(JSON_OUT.read_text()))
    kept = [r for r in committed["records"] if r["kind"] != "release" or r["row"] not in rows]
    new = [r for r in results["records"] if r["kind"] == "release"]
    addition = {"command": results["machine"]["command"], "rows": rows}
    addition |= {k: results[k] for k in ("machine", "seconds")}
    for key, value in results["info"].items():
        committed["info"].setdefault(key, value)
    return committed | {
        "records": kept + new,
        "additions": [*committed.get("additions", []), addition],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_RELEASES} releases per cell, {QUICK_NOISE_RELEASES} per pure-noise cell, "
        "fewer rows",
    )
    parser.add_argument("--render", action="store_true", help="re-render utility.md")
    parser.add_argument(
        "--all-rows",
        action="store_true",
        help="also the exploratory settings of issue 10 (--tune, iterations 20, threshold 2, "
        "other m1 choices...): slow, since every production release draws OpenDP noise",
    )
    parser.add_argument(
        "--releases", type=int, help=f"releases per cell (default {RELEASES}; --quick "
        f"{QUICK_RELEASES})"
    )  # fmt: skip
    parser.add_argument(
        "--noise-releases", type=int, help=f"releases per pure-noise cell (default "
        f"{NOISE_RELEASES}; --quick {QUICK_NOISE_RELEASES})"
    )  # fmt: skip
    parser.add_argument(
        "--targets", default="1,2,3,4", help="comma-separated targets to run (default 1,2,3,4)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="write OUT.md and OUT.json (default: benchmarks/utility for a full run, "
        "$TMPDIR/fdptm-utility-quick for --quick, --targets or fewer releases, so they never "
        "overwrite the committed results)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="with --rows: replace those rows' release records in the committed results "
        "(benchmarks/utility.json) by this run's, keep every other record, re-render utility.md",
    )
    parser.add_argument(
        "--rows", default="", help="comma-separated row keys: run only these release rows "
        "(the references still run)"
    )  # fmt: skip
    args = parser.parse_args()
    ONLY_ROWS.update(k.strip() for k in args.rows.split(",") if k.strip())
    if args.merge and not ONLY_ROWS:
        parser.error("--merge needs --rows")
    releases = args.releases or (QUICK_RELEASES if args.quick else RELEASES)
    noise_releases = args.noise_releases or (QUICK_NOISE_RELEASES if args.quick else NOISE_RELEASES)
    targets = {t.strip() for t in args.targets.split(",")}
    partial_run = (
        args.quick
        or targets != {"1", "2", "3", "4"}
        or releases < RELEASES
        or noise_releases < NOISE_RELEASES
        or bool(ONLY_ROWS)
    )
    if args.render:  # the newest run of utility.md again, from its record
        record = json.loads(stem("utility", args.out).with_suffix(".json").read_text())
        md = save("utility", TITLE, render(filled(record)), record, args.out, again=True)
        print(md.read_text())
        return
    out = args.out or (Path(tempfile.gettempdir()) / "fdptm-utility-quick" if partial_run else None)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.testing.utilities import prefect_test_harness

    header = {"machine": at_start(), "releases": releases, "noise_releases": noise_releases}
    runner = Runner(header, "utility", out)
    json_out = stem("utility", out).with_suffix(".json")
    log(f"writing {json_out} as results come in; {releases} releases per cell")
    raw = json.loads(PHEME.read_text())["text"]
    tokens = _preprocess(raw)
    with prefect_test_harness(server_startup_timeout=180):
        if "1" in targets:
            log("target 1: PHEME, no public data")
            target1(runner, raw, tokens, releases, args.quick, args.all_rows)
        if "2" in targets:
            log("target 2: PHEME, 10% public")
            target2(runner, raw, tokens, releases, args.quick, args.all_rows)
        if "3" in targets:
            log("target 3: synthetic author-level corpus")
            target3(runner, releases, args.quick, args.all_rows)
        if "4" in targets:
            log("target 4: pure noise")
            target4(runner, raw, tokens, noise_releases)
    results = runner.save(complete=True)
    if args.merge:  # the committed run with these rows replaced: its section rendered anew
        results, out = merged(results, sorted(ONLY_ROWS)), None
    md = save("utility", TITLE, render(results), results, out, again=args.merge)
    print(md.read_text())
    log(f"wrote {md} and its .json ({results['seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    sys.exit(main())
