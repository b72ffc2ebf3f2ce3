"""The ``fdptm`` command line: demo, ingest, release, compare, audit, budget.

Exit codes: 0 ok, 1 unexpected failure, 2 bad input (the message names the problem and
what to do), 3 budget refused by the ledger, 4 an audit found more leakage than claimed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from fdptm.errors import BadInputError, FdptmError
from fdptm.mechanisms.registry import DEFAULT_MECHANISM, MECHANISMS

DEMO = {"epsilon": 500.0, "delta": 1e-5, "topics": 5, "iterations": 20, "mechanism": "hdp-lda"}


def _quiet_prefect() -> None:
    """Keep Prefect's and GX's own logging out of the CLI's output; no telemetry."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")


def _positive_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fdptm", description="Fully differentially private topic modeling (FDPTM)."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def workspace(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--workspace",
            help="workspace directory (default: $FDPTM_WORKSPACE or ./fdptm-workspace)",
        )

    demo = sub.add_parser("demo", help="ingest gensim's Lee corpus and release it end to end")
    workspace(demo)
    demo.add_argument("--seed", type=int, help="fixed seed (tests only: makes noise guessable)")

    ingest = sub.add_parser("ingest", help="append a file to a dataset as a new batch")
    ingest.add_argument("path", help="Parquet, CSV, JSONL, JSON or .txt (one doc per line)")
    ingest.add_argument("--dataset", required=True)
    ingest.add_argument(
        "--format", choices=["parquet", "csv", "jsonl", "json", "lines"], help="override"
    )
    ingest.add_argument(
        "--unit",
        choices=["author", "document"],
        help="privacy unit of a new dataset (default: author if the file has an author_id "
        "column, else document); fixed once the dataset exists",
    )
    ingest.add_argument("--max-text-chars", type=int, default=1_000_000)
    workspace(ingest)

    rel = sub.add_parser("release", help="run the DP release flow on a dataset")
    rel.add_argument("--dataset", required=True)
    rel.add_argument(
        "--epsilon",
        type=_positive_float,
        required=True,
        help="total epsilon of the release, at its (weakest) adjacency",
    )
    rel.add_argument("--delta", type=_positive_float, required=True)
    rel.add_argument("--topics", type=int, required=True)
    rel.add_argument(
        "--mechanism",
        default=DEFAULT_MECHANISM,
        choices=list(MECHANISMS),
        help=f"M2 mechanism (default {DEFAULT_MECHANISM}; README: 'M2 mechanisms')",
    )
    rel.add_argument(
        "--m2-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the M2 mechanism (repeatable); unknown options are refused",
    )
    rel.add_argument(
        "--allow-unproven",
        action="store_true",
        help="release with a mechanism whose DP claim is unproven (zhu, cdp-lda, "
        "cdp-lda-plus, spectral-unproven); the manifest says so",
    )
    rel.add_argument("--iterations", type=int, default=20)
    rel.add_argument("--seed", type=int, help="fixed seed (tests only: makes noise guessable)")
    rel.add_argument(
        "--set-union-policy",
        default="weighted",
        choices=["weighted", "policy-laplace", "policy-gaussian"],
    )
    rel.add_argument(
        "--m1-fraction",
        type=float,
        default=0.25,
        help="share of epsilon for vocabulary selection (default 0.25)",
    )
    rel.add_argument("--max-docs-per-author", type=int, default=100)
    rel.add_argument("--max-tokens-per-doc", type=int, default=1000)
    rel.add_argument(
        "--releases-left",
        type=int,
        help="adaptive budget: use at most (what the cap has left) / N",
    )
    rel.add_argument(
        "--baseline",
        action="store_true",
        help="also train a non-private internal baseline (never released)",
    )
    rel.add_argument("--no-progress", action="store_true")
    workspace(rel)

    cmp = sub.add_parser(
        "compare",
        help="train several M2 mechanisms at one budget and score them (internal, not DP)",
    )
    cmp.add_argument("--dataset", required=True)
    cmp.add_argument("--epsilon", type=_positive_float, required=True)
    cmp.add_argument("--delta", type=_positive_float, required=True)
    cmp.add_argument("--topics", type=int, required=True)
    cmp.add_argument(
        "--mechanisms",
        required=True,
        help=f"comma-separated, from: {','.join(MECHANISMS)}",
    )
    cmp.add_argument("--iterations", type=int, default=100)
    cmp.add_argument("--m1-fraction", type=float, default=0.25)
    cmp.add_argument("--holdout", type=float, default=0.1, help="share of held-out documents")
    cmp.add_argument("--seed", type=int)
    cmp.add_argument("--max-docs-per-author", type=int, default=100)
    cmp.add_argument("--max-tokens-per-doc", type=int, default=1000)
    cmp.add_argument("--no-progress", action="store_true")
    workspace(cmp)

    aud = sub.add_parser(
        "audit",
        help="membership-inference audit of a release (internal, not DP; exit 4 on failure)",
    )
    aud.add_argument("--run", required=True, help="run id of the release to audit")
    aud.add_argument("--shadows", type=int, default=16, help="shadow models (default 16)")
    aud.add_argument("--mode", choices=["online", "offline"], default="online")
    aud.add_argument("--seed", type=int)
    aud.add_argument("--confidence", type=float, default=0.95)
    aud.add_argument(
        "--workers",
        type=int,
        help="models trained at once on this machine (default: one per core)",
    )
    aud.add_argument(
        "--processes",
        action="store_true",
        help="run the models in local processes instead of threads",
    )
    aud.add_argument("--dask-address", help="run the models on this Dask cluster")
    workspace(aud)

    budget = sub.add_parser("budget", help="show (and set) a dataset's privacy budget")
    budget.add_argument("--dataset", required=True)
    budget.add_argument(
        "--cap",
        nargs=2,
        type=_positive_float,
        metavar=("EPSILON", "DELTA"),
        help="set the lifetime cap",
    )
    budget.add_argument(
        "--unit",
        choices=["author", "author-replace", "document", "document-replace", "word"],
        help="adjacency the cap is stated at (default: the dataset's unit)",
    )
    budget.add_argument("--json", action="store_true")
    workspace(budget)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet_prefect()
    try:
        return {
            "demo": cmd_demo,
            "ingest": cmd_ingest,
            "release": cmd_release,
            "compare": cmd_compare,
            "audit": cmd_audit,
            "budget": cmd_budget,
        }[args.command](args)
    except FdptmError as exc:
        print(f"fdptm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fdptm: interrupted", file=sys.stderr)
        return 130


def cmd_ingest(args: argparse.Namespace) -> int:
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    result = ingest(
        args.path,
        args.dataset,
        Workspace.resolve(args.workspace),
        fmt=args.format,
        unit=args.unit,
        max_text_chars=args.max_text_chars,
    )
    _print_ingest(result)
    return 0


def _print_ingest(result) -> None:
    print(
        f"ingested batch {result.seq} of dataset {result.dataset!r}: "
        f"{result.n_rows} rows accepted, {result.n_rejected} rejected"
    )
    if result.n_rejected:
        for reason, count in sorted(result.reasons.items(), key=lambda kv: -kv[1]):
            print(f"  {count:>7} x {reason}")
        for ex in result.examples:
            print(f"  row {ex['row']} (doc_id {ex['doc_id']}): {ex['reason']}")
        print(f"  rejected rows: {result.rejects_path}")


def cmd_release(args: argparse.Namespace) -> int:
    outcome = _release(
        dataset=args.dataset,
        epsilon=args.epsilon,
        delta=args.delta,
        topics=args.topics,
        iterations=args.iterations,
        mechanism=args.mechanism,
        seed=args.seed,
        workspace=args.workspace,
        set_union_policy=args.set_union_policy,
        m1_fraction=args.m1_fraction,
        max_docs_per_author=args.max_docs_per_author,
        max_tokens_per_doc=args.max_tokens_per_doc,
        baseline=args.baseline,
        releases_left=args.releases_left,
        m2_options=_options(args.m2_option),
        allow_unproven=args.allow_unproven,
        show_progress=not args.no_progress,
    )
    _print_release(outcome)
    return 0


def _options(pairs: list[str]) -> dict:
    from fdptm.mechanisms.registry import parse_option

    options = dict(parse_option(p) for p in pairs)
    if len(options) != len(pairs):
        raise BadInputError(f"an M2 option is given twice in {pairs}")
    return options


def _release(**kwargs) -> dict:
    """Run the release flow; no flow heartbeat (it only serves a long-lived API's monitor)."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from fdptm.flows.release import release

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        return release(**kwargs)


def _print_release(outcome: dict) -> None:
    print(f"run id:    {outcome['run_id']}")
    print(f"release:   {outcome['release_path']}")
    print(f"guarantee: {outcome['statement']}, {outcome['adjacency']}-level adjacency")
    for i, words in enumerate(outcome["top_words"]):
        print(f"  topic {i}: {' '.join(words)}")


def cmd_compare(args: argparse.Namespace) -> int:
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from fdptm.flows.compare import compare_flow

    names = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    unknown = [m for m in names if m not in MECHANISMS]
    if unknown:
        raise BadInputError(f"unknown mechanism(s) {unknown}; available: {', '.join(MECHANISMS)}")
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        result = compare_flow(
            dataset=args.dataset,
            epsilon=args.epsilon,
            delta=args.delta,
            topics=args.topics,
            mechanisms=names,
            iterations=args.iterations,
            seed=args.seed,
            workspace=args.workspace,
            m1_fraction=args.m1_fraction,
            holdout=args.holdout,
            max_docs_per_author=args.max_docs_per_author,
            max_tokens_per_doc=args.max_tokens_per_doc,
            show_progress=not args.no_progress,
        )
    print(result["markdown"])
    print(f"written to {result['path']} (internal: not DP, do not publish)")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from fdptm.flows.audit import audit
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.audit import AuditSpec

    spec = AuditSpec(
        run_id=args.run,
        workspace=str(Workspace.resolve(args.workspace).root),
        shadows=args.shadows,
        mode=args.mode,
        seed=args.seed,
        confidence=args.confidence,
    )
    if args.workers is not None and args.workers < 1:
        raise BadInputError(f"--workers must be >= 1, got {args.workers}")
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        report = audit(spec, args.workers, args.dask_address, args.processes)
    claim = report["claims_per_document"]["release"]
    print(f"audit of {report['run_id']}: {report['verdict']} ({report['note']})")
    print(f"claim per document: epsilon={claim['epsilon']} ({claim['reason']})")
    for scope, b in report["bounds"].items():
        print(f"  {scope:<8} claim {b['claim']}  lower bound {b['lower_bound']:.3f}")
    for name, r in report["attacks"].items():
        b = r["epsilon_lower_bound"]
        print(
            f"  {name:<28} [{r['scope']}] AUC {r['auc']:.3f}  "
            f"TPR@0.1% {r['tpr_at_fpr_0.001']:.3f}  TPR@1% {r['tpr_at_fpr_0.01']:.3f}  "
            f"epsilon >= {b['epsilon']:.3f}"
        )
    print(f"report: {report['path']}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gensim.test.utils import datapath

    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    workspace = Workspace.resolve(args.workspace)
    corpus = Path(datapath("lee_background.cor"))
    catalog = Catalog(workspace.create())
    if catalog.batches("lee"):
        print(f"dataset 'lee' already ingested in {workspace.root}; releasing it again")
    else:
        _print_ingest(ingest(corpus, "lee", workspace, fmt="lines"))
    print(
        f"releasing with epsilon={DEMO['epsilon']:g}, delta={DEMO['delta']:g}, "
        f"{DEMO['topics']} topics, {DEMO['iterations']} HDP-LDA iterations"
    )
    outcome = _release(
        dataset="lee", workspace=str(workspace.root), seed=args.seed, show_progress=True, **DEMO
    )
    _print_release(outcome)
    print(
        "The demo uses HDP-LDA: the Lee corpus has only 300 documents, too few for an "
        "author-level mechanism to learn topics at a useful epsilon. HDP-LDA is only "
        "word-level DP and needs a large per-iteration epsilon. Releases of real datasets "
        f"default to {DEFAULT_MECHANISM} (author level): read the README's privacy model "
        "before publishing anything."
    )
    return 0


def cmd_budget(args: argparse.Namespace) -> int:
    from fdptm.privacy.adjacency import Adjacency
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.ledger import Ledger
    from fdptm.storage.workspace import Workspace, check_name

    check_name(args.dataset)
    catalog = Catalog(Workspace.resolve(args.workspace).require())
    if catalog.dataset(args.dataset) is None:
        raise BadInputError(f"no dataset named {args.dataset!r}; ingest it first")
    ledger = Ledger(catalog)
    if args.unit and not args.cap:
        raise BadInputError("--unit states the unit of a cap: pass it together with --cap")
    if args.cap:
        ledger.set_cap(
            args.dataset, args.cap[0], args.cap[1], Adjacency(args.unit) if args.unit else None
        )
    report = budget_report(ledger, args.dataset)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    cap = report["cap"]
    print(f"dataset {args.dataset!r} (privacy unit: {report['dataset_unit']})")
    if cap:
        print(
            f"lifetime cap: epsilon={cap['epsilon']:g}, delta={cap['delta']:g} "
            f"({cap['unit']} level)"
        )
        print(f"lifetime guarantee: {report['lifetime']['statement']}")
        print(
            f"spent or reserved: epsilon={report['lifetime']['epsilon']:.6g}, "
            f"delta={report['lifetime']['delta']:.6g}; remaining: "
            f"epsilon={report['remaining']['epsilon']:.6g}, "
            f"delta={report['remaining']['delta']:.6g}"
        )
    else:
        print("lifetime cap: none set (set one with --cap EPSILON DELTA)")
    for unit, total in report["totals"].items():
        print(
            f"total at {unit} level: "
            + (
                f"epsilon={total['epsilon']:.6g}, delta={total['delta']:.6g}"
                + ("" if total["notion"] == "approximate-dp" else f" ({total['notion']})")
                if total
                else "not defined (some spend is only weaker-level DP)"
            )
        )
    if report["entries"]:
        print(
            f"{'run':<40} {'stage':<11} {'mechanism':<28} {'adjacency':<16} "
            f"{'notion':<16} {'epsilon':>10} {'delta':>10} state"
        )
        for e in report["entries"]:
            print(
                f"{e['run_id']:<40} {e['stage']:<11} {e['mechanism']:<28} "
                f"{e['adjacency']:<16} {e['notion']:<16} {e['epsilon']:>10.4g} "
                f"{e['delta']:>10.3g} {e['state']}"
            )
    return 0


def budget_report(ledger, dataset: str) -> dict:
    """The ledger view of one dataset, as plain data (for --json and the text view)."""
    from fdptm.mechanisms.guarantee import describe
    from fdptm.privacy.adjacency import Adjacency
    from fdptm.storage.ledger import remaining

    cap = ledger.cap(dataset)
    totals = {}
    for unit in Adjacency:
        try:
            c = ledger.lifetime(dataset, unit)
        except ValueError:
            totals[unit.value] = None
        else:
            totals[unit.value] = {
                "epsilon": c.epsilon,
                "delta": c.delta,
                "notion": c.notion,
                "gamma": c.gamma,
            }
    report = {
        "dataset": dataset,
        "dataset_unit": ledger.default_unit(dataset).value,
        "cap": None,
        "totals": totals,
        "entries": [
            {
                k: e[k]
                for k in (
                    "run_id",
                    "stage",
                    "mechanism",
                    "adjacency",
                    "notion",
                    "epsilon",
                    "delta",
                    "gamma",
                    "state",
                    "note",
                    "created_at",
                )
            }
            for e in ledger.entries(dataset)
        ],
    }
    if cap:
        life = ledger.lifetime(dataset, cap.unit)
        eps_left, delta_left = remaining(cap, life)
        report["cap"] = {"epsilon": cap.epsilon, "delta": cap.delta, "unit": cap.unit.value}
        report["lifetime"] = {
            "epsilon": life.epsilon,
            "delta": life.delta,
            "notion": life.notion,
            "gamma": life.gamma,
            "statement": describe(life.notion, life.epsilon, life.delta, life.gamma),
        }
        report["remaining"] = {"epsilon": eps_left, "delta": delta_left}
    return report


if __name__ == "__main__":
    sys.exit(main())
