"""``fdptm local ...``: the local-DP commands (LP-LDA / OLP-LDA, hdp-lda-lp-lda-olp-lda.txt
sections V-VI), and what ``fdptm ingest --local-reports`` prints.

* ``fdptm local vocabulary SOURCE OUTPUT``: the public vocabulary document devices encode over.
* ``fdptm local randomize --vocabulary FILE --flip F INPUT OUTPUT``: the device side in batch:
  PRE, bit vector, randomised response; the output holds reports only, never text.
* ``fdptm local release``: LP-LDA (one release) or OLP-LDA (one release per new batch); the
  options are the fields of ``fdptm.request.LocalReleaseRequest``.
"""

from __future__ import annotations

import argparse
import sys

from fdptm.request import LocalReleaseRequest, add_arguments, from_arguments


def add_parser(sub, workspace) -> None:
    local = sub.add_parser("local", help="local DP: vocabulary, device randomiser, LP/OLP-LDA")
    cmds = local.add_subparsers(dest="local_command", required=True)
    vocab = cmds.add_parser(
        "vocabulary", help="build the public vocabulary document devices encode over"
    )
    vocab.add_argument(
        "source", help="public:DATASET (ingested with --public), wordfreq:LANG[:N] or a word list"
    )
    vocab.add_argument("output", help="the vocabulary document to write (JSON)")
    vocab.add_argument("--size", type=int, default=5000, help="words kept (default 5000)")
    vocab.add_argument(
        "--declare-public",
        action="store_true",
        help="SOURCE is a word-list file you declare public (fdptm cannot verify it; "
        "manifests say so)",
    )
    workspace(vocab)
    rand = cmds.add_parser(
        "randomize", help="randomise documents into LDP reports (the device side, in batch)"
    )
    rand.add_argument("input", help="documents: Parquet, CSV, JSONL, JSON or .txt")
    rand.add_argument("output", help="the report file to write (Parquet)")
    rand.add_argument("--vocabulary", required=True, help="vocabulary document (local vocabulary)")
    rand.add_argument(
        "--flip", required=True, type=float, help="f in (0, 1): per-word epsilon log((2-f)/f)"
    )
    rand.add_argument("--text-column", metavar="NAME", help="input column of the text")
    rel = cmds.add_parser(
        "release",
        help="LP-LDA or OLP-LDA releases from a dataset of reports (spend nothing)",
        description="Every option is a field of fdptm.request.LocalReleaseRequest.",
    )
    add_arguments(rel, model=LocalReleaseRequest)


def cmd_local(args: argparse.Namespace) -> int:
    return {"vocabulary": _vocabulary, "randomize": _randomize, "release": _release}[
        args.local_command
    ](args)


def _vocabulary(args: argparse.Namespace) -> int:
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.local_reports import build_vocabulary

    vocabulary = build_vocabulary(
        args.source, Workspace.resolve(args.workspace), args.size, args.declare_public
    )
    vocabulary.save(args.output)
    print(f"vocabulary: {vocabulary.size} words from {args.source} -> {args.output}")
    print(f"fingerprint: {vocabulary.fingerprint}")
    return 0


def _randomize(args: argparse.Namespace) -> int:
    from pathlib import Path

    import pyarrow as pa

    from fdptm.local import Flip, LocalVocabulary, randomize, write_reports
    from fdptm.tasks.readers import ColumnMap, read_rows

    vocabulary = LocalVocabulary.load(args.vocabulary)
    flip = Flip.from_f(args.flip)
    rows = read_rows(Path(args.input), None, ColumnMap(text=args.text_column))
    texts = pa.array([t if isinstance(t, str) else "" for t in rows.columns["text"]], pa.string())
    reports = randomize(texts, vocabulary, flip)
    write_reports(args.output, reports, vocabulary, flip)
    g = flip.to_dict(vocabulary.size)
    print(f"reports:   {len(reports)} -> {args.output}")
    print(
        f"guarantee: {g['document_epsilon']:.6g}-local DP per document (V = {vocabulary.size} "
        f"bits); {g['word_epsilon']:.6g}-local DP per word (f = {flip.f:.8g})"
    )
    return 0


def _release(args: argparse.Namespace) -> int:
    from fdptm.flows import running
    from fdptm.flows.local_release import local_release, online_release

    request = from_arguments(args, LocalReleaseRequest)
    running.start_api()
    if request.mechanism == "lp-lda":
        outcomes = [running.run(local_release, request)]
    else:
        outcomes = running.run(online_release, request)
        if not outcomes:
            print(f"online model {request.model!r}: no new batch to release", file=sys.stderr)
    for outcome in outcomes:
        print_outcome(outcome)
    return 0


def print_outcome(outcome: dict) -> None:
    print(f"run id:    {outcome['run_id']}")
    print(f"release:   {outcome['release_path']} (depends on batches {outcome['batches']})")
    print(f"guarantee: {outcome['statement']}")
    print_topics(outcome["topics"])


def print_topics(topics: list[dict]) -> None:
    """A release's listed words per topic (both release commands print them): those that
    stand above the noise, or, for a mechanism without a noise model, above the floor."""
    if all(t.get("tested") for t in topics):
        print(
            "top words (only those that stand above the noise, family-wise error 1%; with "
            "probabilities):"
        )
    else:
        print("top words (untested: those above their topic's floor, with probabilities):")
    for t in topics:
        words = ", ".join(f"{w['word']} {w['probability']}" for w in t["words"])
        print(f"  topic {t['topic']}: {'no signal' if t['no_signal'] else words}")


def ingest_reports(args: argparse.Namespace) -> int:
    """``fdptm ingest --local-reports``: append a report file to a local dataset."""
    from fdptm.errors import BadInputError
    from fdptm.local import Flip, LocalVocabulary
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.local_reports import ingest_reports as ingest

    if args.vocabulary is None or args.flip is None:
        raise BadInputError(
            "--local-reports needs the collection's --vocabulary FILE and --flip F: reports "
            "over another vocabulary or f are rejected"
        )
    result = ingest(
        args.path,
        args.dataset,
        Workspace.resolve(args.workspace),
        vocabulary=LocalVocabulary.load(args.vocabulary),
        flip=Flip.from_f(args.flip),
    )
    g = result.guarantee
    print(f"dataset {result.dataset}: batch {result.seq} stored {result.n_reports} reports")
    if result.n_rejected:
        print(f"rejected {result.n_rejected} report(s); see {result.rejects_path}")
        for e in result.examples:
            print(f"  row {e['row']}: {e['reason']}")
    print(
        f"local guarantee (recorded once in the ledger): {g['document_epsilon']:.6g}-local DP "
        f"per document (V = {g['vocabulary_size']} bits), {g['word_epsilon']:.6g} per word"
    )
    return 0
