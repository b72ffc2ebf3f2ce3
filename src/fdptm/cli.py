"""The ``fdptm`` command line: demo, ingest, release, backfill, compare, audit, report,
recover, gc, partitions, mechanisms, budget, verify, catalog, local.

Every command that takes ``--workspace`` also takes ``--catalog URL``: the PostgreSQL
catalog shared by several hosts (``storage.postgres``), as ``$FDPTM_CATALOG`` does.

Exit codes: 0 ok, 1 unexpected failure, 2 bad input or an environment problem the message
says how to fix (a full disk, a read-only workspace, Prefect's API not starting in time),
3 budget refused by the ledger, 4 an audit found more leakage than claimed.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fdptm import cli_catalog, cli_local, cli_serve, cli_verify
from fdptm.errors import BadInputError, FdptmError
from fdptm.flows import running
from fdptm.flows.running import STARTUP_TIMEOUT
from fdptm.mechanisms.registry import DEFAULT_MECHANISM, MECHANISMS
from fdptm.request import SCOPE_FIELDS, ReleaseRequest, add_arguments, from_arguments, given
from fdptm.request import default as release_default

DEMO = {"epsilon": 500.0, "delta": 1e-5, "topics": 5, "iterations": 20, "mechanism": "hdp-lda"}
_SHOW_WARNING = warnings.showwarning


def _quiet_prefect() -> None:
    """Keep Prefect's and GX's own logging out of the CLI's output; no telemetry."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_INTERNAL_LOGGING_LEVEL", "CRITICAL")
    running.environment_defaults()


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
        help="privacy unit of a new dataset (default: author if the file has an author "
        "column, present or mapped, else document); fixed once the dataset exists",
    )
    ingest.add_argument(
        "--author-buckets",
        type=int,
        metavar="N",
        help="a new author-level dataset's N author-disjoint partitions (a keyed hash of the "
        "author id): releases over disjoint --buckets compose in parallel at the author level",
    )
    ingest.add_argument(
        "--public",
        action="store_true",
        help="declare the dataset public (e.g. published text): never charged by the ledger, "
        "usable as any release's --vocabulary public:NAME or --prior NAME. Fixed when the "
        "dataset is created; every batch of a public dataset must pass it",
    )
    ingest.add_argument("--max-text-chars", type=int, default=1_000_000)
    ingest.add_argument(
        "--local-reports",
        action="store_true",
        help="the file holds LDP reports (fdptm local randomize), not documents: append them "
        "to a local dataset, rejecting reports over another --vocabulary or --flip",
    )
    ingest.add_argument("--vocabulary", help="with --local-reports: the vocabulary document")
    ingest.add_argument("--flip", type=float, help="with --local-reports: the collection's f")
    for field, option, default in (
        ("text", "--text-column", "text"),
        ("id", "--id-column", "doc_id"),
        ("author", "--author-column", "author_id"),
        ("time", "--time-column", "ts"),
    ):
        ingest.add_argument(
            option,
            metavar="NAME",
            help=f"input column of the document's {field} (default: {default}, if present); "
            "must exist when given",
        )
    workspace(ingest)

    cli_local.add_parser(sub, workspace)
    cli_verify.add_parser(sub, workspace)
    cli_catalog.add_parser(sub, workspace)

    rel = sub.add_parser(
        "release",
        help="run the DP release flow on a dataset",
        usage="fdptm release --dataset NAME --epsilon EPSILON --delta DELTA --topics K "
        "[options]\n       fdptm release --resume RUN_ID [--workspace DIR]",
        description="Release a DP topic model. Every option is a field of the release "
        "request model (fdptm.request.ReleaseRequest), shared with the flows, the "
        "deployments and the Python API.",
    )
    add_arguments(rel, required=False, unless="--resume")
    rel.add_argument(
        "--resume",
        metavar="RUN_ID",
        help="continue a failed release from its last stored stage without spending again "
        "(the other release options are taken from the run)",
    )
    rel.add_argument("--no-progress", action="store_true")
    rel.add_argument(
        "--dask-address",
        help="run dp-vi's per-iteration statistics on this Dask scheduler's workers (the "
        "noise is added here; the same seeded release as without it)",
    )

    plan = sub.add_parser(
        "plan",
        help="predict, before anything is spent, the vocabulary a release would get and "
        "whether its topics would stand above the noise",
        description="The options of `fdptm release`, and --units and --tokens-per-unit "
        "(public figures you state). Nothing is read from the dataset and nothing is spent.",
    )
    add_arguments(plan)
    plan.add_argument("--json", action="store_true", help="the prediction as JSON")

    back = sub.add_parser(
        "backfill",
        help="release every partition (batch or calendar window) of a range that has no "
        "release of this request yet, each at its own budget",
        description="One release per partition; a re-run releases only what is missing and "
        "resumes an interrupted release. The release options are those of `fdptm release`.",
    )
    add_arguments(back, exclude=SCOPE_FIELDS)
    back.add_argument("--by", required=True, choices=["day", "week", "month", "batch"])
    back.add_argument(
        "--from",
        dest="first",
        help="first batch number, or first UTC day YYYY-MM-DD (required for windows)",
    )
    back.add_argument(
        "--to",
        dest="last",
        help="last batch number or day (default: the last batch, or the last closed window)",
    )
    back.add_argument("--dask-address", help="fan the releases out on this Dask scheduler")

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
    cmp.add_argument("--iterations", type=int, default=release_default("iterations"))
    cmp.add_argument("--m1-fraction", type=float, default=release_default("m1_fraction"))
    cmp.add_argument("--holdout", type=float, default=0.1, help="share of held-out documents")
    cmp.add_argument("--seed", type=int)
    cmp.add_argument(
        "--max-docs-per-author", type=int, default=release_default("max_docs_per_author")
    )
    cmp.add_argument(
        "--max-tokens-per-doc", type=int, default=release_default("max_tokens_per_doc")
    )
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

    rep = sub.add_parser(
        "report",
        help="a release's HTML report (public: the release and the ledger's budgets only)",
    )
    rep.add_argument("--run", required=True, help="run id of the release")
    workspace(rep)

    rec = sub.add_parser(
        "recover",
        help="close runs whose process died: refund what they never read, keep what they spent",
    )
    rec.add_argument("--dataset", help="only this dataset's runs")
    workspace(rec)

    gc = sub.add_parser(
        "gc",
        help="remove internal artifacts of finished runs that no resume or audit needs",
    )
    gc.add_argument("--dataset", help="only this dataset's runs")
    gc.add_argument(
        "--audit-inputs",
        action="store_true",
        help="also the audit inputs of releases not audited yet (they can then never be)",
    )
    workspace(gc)

    store = sub.add_parser(
        "store",
        help="show (and set) the object store holding a copy of the workspace's artifacts",
    )
    action = store.add_mutually_exclusive_group()
    action.add_argument(
        "--set",
        metavar="URL",
        help="keep a copy of every artifact at URL (s3://bucket/prefix; a private bucket)",
    )
    action.add_argument(
        "--unset", action="store_true", help="keep the artifacts in the workspace only"
    )
    action.add_argument(
        "--sync", action="store_true", help="upload the artifacts whose upload failed"
    )
    action.add_argument(
        "--evict",
        action="store_true",
        help="remove the workspace's copies of internal artifacts the store holds",
    )
    workspace(store)

    parts = sub.add_parser(
        "partitions",
        help="a dataset's batches (and with --counts its documents per window: internal)",
    )
    parts.add_argument("--dataset", required=True)
    parts.add_argument(
        "--counts",
        action="store_true",
        help="also the documents per batch and window (private: never choose a scope from them)",
    )
    parts.add_argument("--by", choices=["day", "week", "month"], default="day")
    parts.add_argument("--json", action="store_true")
    workspace(parts)

    mech = sub.add_parser(
        "mechanisms", help="list the M2 mechanisms, their guarantees and their options"
    )
    mech.add_argument("--json", action="store_true")

    rels = sub.add_parser(
        "releases", help="list the published releases (run id, date, guarantee, topics)"
    )
    rels.add_argument("--dataset", help="only this dataset's releases")
    rels.add_argument("--json", action="store_true")
    workspace(rels)

    cli_serve.add_parser(sub)
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
    budget.add_argument(
        "--all",
        action="store_true",
        help="also the totals at the other adjacencies (the dataset's own unit by default)",
    )
    budget.add_argument("--json", action="store_true")
    workspace(budget)
    _add_catalog_option(parser)
    return parser


def _add_catalog_option(parser: argparse.ArgumentParser) -> None:
    """``--catalog`` on every (sub)command that has ``--workspace``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_catalog_option(child)
    if any("--workspace" in a.option_strings for a in parser._actions):
        parser.add_argument(
            "--catalog",
            metavar="URL",
            help="the catalog and ledger in PostgreSQL (postgresql://user@host:port/db, "
            "shared by several hosts; default: $FDPTM_CATALOG, else the workspace's "
            "catalog.duckdb)",
        )


def main(argv: list[str] | None = None) -> int:
    """The ``fdptm`` command. Run as a process (no ``argv``), it hands the command to a
    running ``fdptm serve`` of this environment when there is one (``fdptm.__main__``, the
    script's own entry, does so before importing this module)."""
    if argv is None:
        from fdptm.__main__ import hand_off

        served = hand_off(sys.argv[1:])
        if served is not None:
            return served
        return run_process(sys.argv[1:])
    return _run(argv)


def run_process(argv: list[str]) -> int:
    """``fdptm ARGV`` as this process's own command (no server took it)."""
    _quiet_prefect()
    running.settings_to_be_read()  # a process of its own: Prefect is read later, here
    return _run(argv)


def _run(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        with _catalog_of(args):
            return _dispatch(args)
    finally:
        running.settings_not_read()  # a caller that goes on (tests) makes its own


@contextmanager
def _catalog_of(args: argparse.Namespace) -> Iterator[None]:
    """``--catalog`` as $FDPTM_CATALOG while the command runs (every flow and task of it
    resolves workspaces from the environment), as it was afterwards."""
    url = getattr(args, "catalog", None)
    if not url:
        yield
        return
    from fdptm.storage.workspace import CATALOG_ENV_VAR

    before = os.environ.get(CATALOG_ENV_VAR)
    os.environ[CATALOG_ENV_VAR] = url
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CATALOG_ENV_VAR, None)
        else:
            os.environ[CATALOG_ENV_VAR] = before


def _dispatch(args: argparse.Namespace) -> int:
    _quiet_prefect()
    warnings.showwarning = _show_warning
    try:
        _recover_quietly(args)
        return {
            "demo": cmd_demo,
            "ingest": cmd_ingest,
            "release": cmd_release,
            "plan": cmd_plan,
            "compare": cmd_compare,
            "audit": cmd_audit,
            "report": cmd_report,
            "recover": cmd_recover,
            "budget": cmd_budget,
            "releases": cmd_releases,
            "mechanisms": cmd_mechanisms,
            "backfill": cmd_backfill,
            "partitions": cmd_partitions,
            "gc": cmd_gc,
            "store": cmd_store,
            "local": cli_local.cmd_local,
            "verify": cli_verify.cmd_verify,
            "catalog": cli_catalog.cmd_catalog,
            "serve": cli_serve.cmd_serve,
        }[args.command](args)
    except FdptmError as exc:
        _error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        # the reader went away (`fdptm budget | head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        message = _environment_problem(exc)
        if message is None:
            raise
        _error(message)
        return 2


def _environment_problem(exc: Exception) -> str | None:
    """What to do about a failure of the machine rather than of fdptm, or None."""
    import httpx

    from fdptm.storage.postgres import explained

    if (database := explained(exc)) is not None:
        return database

    if isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRORS:
        return (
            f"{_ENVIRONMENT_ERRORS[exc.errno]}: {exc.strerror} ({exc.filename}). Nothing stored "
            "was lost: every file is written to a temporary name and renamed."
        )
    if isinstance(exc, RuntimeError) and "Ephemeral server process exited" in str(exc):
        from fdptm.flows.api_server import STARTUP_FAILED

        if f"code {STARTUP_FAILED}." in str(exc):
            return (
                "Prefect's temporary API server failed to start (its log is above); nothing "
                "was reserved or spent. When the log names Prefect's database, it was "
                "written by another Prefect version: point PREFECT_HOME at an empty "
                "directory, or run `prefect server start` and export PREFECT_API_URL"
            )
        return (
            f"the process of Prefect's temporary API server failed ({exc}); its error is "
            "above. Nothing was reserved or spent. Check that fdptm is installed in this "
            "Python (`python -c 'import fdptm.flows.api_server'`), or run `prefect server "
            "start` and export PREFECT_API_URL"
        )
    if isinstance(exc, RuntimeError) and "ephemeral Prefect API server" in str(exc):
        return (
            "Prefect's temporary API server did not start within "
            f"{os.environ.get(STARTUP_TIMEOUT)} s (a busy machine?); nothing was reserved or "
            f"spent. Raise the limit with {STARTUP_TIMEOUT}=300, or start a server once with "
            "`prefect server start` and export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    if isinstance(exc, httpx.TransportError):
        return (
            f"lost the connection to Prefect's API ({type(exc).__name__}: {exc}). Nothing "
            "stored was lost. `fdptm budget --dataset NAME` shows the run: if it completed, "
            "its release is in releases/RUN_ID; if it failed after reading data its budget "
            "stays spent and `fdptm release --resume RUN_ID` continues it"
        )
    return None


_ENVIRONMENT_ERRORS = {
    errno.ENOSPC: "the disk is full; free space and run the command again",
    errno.EDQUOT: "the disk quota is exhausted; free space and run the command again",
    errno.EROFS: "the workspace is on a read-only file system; use a writable --workspace",
    errno.EACCES: "permission denied; check the workspace's owner and mode",
}


def _show_warning(message, category, *args, **kwargs) -> None:
    """fdptm's own warnings (an exposed workspace) in the CLI's style; others as usual."""
    from fdptm.storage.workspace import WorkspacePermissionWarning

    if issubclass(category, WorkspacePermissionWarning):
        print(f"fdptm: warning: {message}", file=sys.stderr)
    else:
        _SHOW_WARNING(message, category, *args, **kwargs)


def _error(message: str) -> None:
    print(f"fdptm: error: {message}", file=sys.stderr)


def _recover_quietly(args: argparse.Namespace) -> None:
    """Before a command that writes to a workspace, close runs whose process died."""
    if args.command in ("recover", "demo") or not hasattr(args, "workspace"):
        return
    from fdptm.storage.recovery import recover
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(args.workspace)
    if not workspace.has_catalog or not os.access(workspace.root, os.W_OK):
        return
    for r in recover(workspace):
        print(
            f"fdptm: run {r.run_id} ({r.kind}, dataset {r.dataset!r}) had died; marked "
            f"failed: {r.refunded} reservation(s) refunded, {r.spent} spent entr(y/ies) kept"
            + (f"; `fdptm release --resume {r.run_id}` continues it" if r.spent else ""),
            file=sys.stderr,
        )


def cmd_ingest(args: argparse.Namespace) -> int:
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    if args.local_reports:
        return cli_local.ingest_reports(args)
    if args.vocabulary is not None or args.flip is not None:
        raise BadInputError("--vocabulary and --flip describe report files: add --local-reports")

    result = ingest(
        args.path,
        args.dataset,
        Workspace.resolve(args.workspace),
        fmt=args.format,
        unit=args.unit,
        public=args.public,
        max_text_chars=args.max_text_chars,
        text_column=args.text_column,
        id_column=args.id_column,
        author_column=args.author_column,
        time_column=args.time_column,
        author_buckets=args.author_buckets,
    )
    _print_ingest(result)
    return 0


def _print_ingest(result) -> None:
    """The outcome on stdout, warnings (ignored columns, by name) on stderr, and the
    operator's counts, marked internal: they are computed on private data, not DP.

    Rejected rows are named by row number, and by doc_id only when the file gave the ids:
    derived ids are keyed hashes that tell the operator nothing."""
    for warning in result.warnings:
        print(f"fdptm: warning: {warning}", file=sys.stderr)
    print(
        f"ingested batch {result.seq} of dataset {result.dataset!r}: "
        f"{result.n_rows} rows accepted, {result.n_rejected} rejected"
    )
    if result.n_rejected:
        for reason, count in sorted(result.reasons.items(), key=lambda kv: -kv[1]):
            print(f"  {count:>7} x {reason}")
        for ex in result.examples:
            named = "" if result.ids_derived else f" (doc_id {ex['doc_id']!r})"
            print(f"  row {ex['row']}{named}: {ex['reason']}")
        print(f"  rejected rows: {result.rejects_path}")
    s = result.stats
    if s is None:
        return

    def n(count: int, noun: str) -> str:
        return f"{count} {noun}{'' if count == 1 else 's'}"

    internal = "internal, not DP (never publish):"
    if s.unit == "author":
        print(
            f"{internal} this batch added {n(s.batch_documents, 'document')} by "
            f"{s.batch_authors} distinct {'author' if s.batch_authors == 1 else 'authors'} "
            f"({s.new_authors} new)"
        )
        print(
            f"{internal} dataset {result.dataset!r} now holds "
            f"{n(s.dataset_documents, 'document')} by {n(s.dataset_authors, 'author')}"
        )
        print(
            f"{internal} contribution bounding at the default max_docs_per_author="
            f"{s.max_docs_per_author} would drop {n(s.bounding_drops, 'document')} "
            f"(of {n(s.bounded_authors, 'author')})"
        )
    else:
        print(
            f"{internal} this batch added {n(s.batch_documents, 'document')}; dataset "
            f"{result.dataset!r} now holds {n(s.dataset_documents, 'document')} (document "
            "level: each its own unit, so contribution bounding drops none)"
        )


def cmd_release(args: argparse.Namespace) -> int:
    show = not args.no_progress
    request = None if args.resume else from_arguments(args)
    if request is not None:
        _announce(request)  # before the heavy imports below
    from fdptm.parallel import check_cluster
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks import run as lifecycle

    if args.resume:
        extra = given(args)
        if extra:
            raise BadInputError(f"--resume takes the run's own parameters; drop {', '.join(extra)}")
        workspace = Workspace.resolve(args.workspace).require()
        lost = lifecycle.preflight_resume(workspace, args.resume)
        check_cluster(args.dask_address)
        running.start_api()
        for stage in lost:
            print(
                f"stage {stage} of run {args.resume} read private data and stored nothing: "
                "its budget is spent and lost; it is reserved again",
                file=sys.stderr,
            )
        _show_stages(show)
        outcome = _flow("resume_release", args.resume, str(workspace.root), show, args.dask_address)
    else:
        if request.seed is not None:
            print(
                "fdptm: warning: --seed makes the noise reproducible by anyone who knows the "
                "seed; this release is a test run, NOT differentially private (its manifest "
                "says so)",
                file=sys.stderr,
            )
        calibration, prediction = lifecycle.preflight(request)
        _print_plan(calibration)
        if prediction is not None:
            print(
                f"prediction ({prediction.units} units of {prediction.tokens_per_unit} tokens, "
                f"stated): {prediction.summary()}",
                flush=True,
            )
        check_cluster(args.dask_address)
        running.start_api()
        _show_stages(show)
        outcome = _flow("release", request, show, args.dask_address)
    _print_release(outcome)
    return 0


def _announce(request: ReleaseRequest) -> None:
    """The release's first line, from the request and the catalog alone (no mechanism, no
    Prefect imported: well within a second), after the refusals that need nothing more: a
    missing workspace, an unknown or public dataset, an unusable workspace key."""
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace, check_name

    check_name(request.dataset)
    workspace = Workspace.resolve(request.workspace).require()
    row = Catalog(workspace).datasets().get(request.dataset)
    if row is None:
        raise BadInputError(
            f"no dataset named {request.dataset!r} in {workspace.root}; `fdptm ingest PATH "
            "--dataset NAME` creates one"
        )
    if row["public"]:
        from fdptm.storage.ledger import PUBLIC_NOT_CHARGED

        raise BadInputError(PUBLIC_NOT_CHARGED.format(dataset=request.dataset))
    workspace.check_key()
    m1 = request.vocabulary_selection
    stages = [
        "PRE",
        "contribution bounding",
        f"M1 {m1}" if m1 != "none" else f"public vocabulary {request.vocabulary}",
        "SAN",
        f"M2 {request.mechanism}",
        "publish",
    ]
    print(
        f"release of dataset {request.dataset!r} (privacy unit: {row['unit']}): "
        f"epsilon={request.epsilon:g}, delta={request.delta:g}, {request.topics} topics; "
        f"stages: {' -> '.join(stages)}",
        flush=True,
    )


def cmd_plan(args: argparse.Namespace) -> int:
    """``fdptm plan``: the prediction of ``fdptm.planning`` for a release request."""
    from fdptm.tasks import run as lifecycle

    request = from_arguments(args)
    prediction, refusal = lifecycle.plan(request)
    if args.json:
        print(json.dumps({**prediction.to_dict(), "cap_refuses": refusal}, indent=2))
        return 0
    print(
        f"plan of a release of dataset {request.dataset!r}: epsilon={request.epsilon:g}, "
        f"delta={request.delta:g}, {request.topics} topics, M2 {request.mechanism} "
        "(nothing is read from the dataset, nothing is spent)"
    )
    for line in prediction.lines():
        print(line)
    if refusal:
        print(f"note: the lifetime cap refuses this release now: {refusal}")
    return 0


def _print_plan(calibration) -> None:
    """The budget granted (less than asked under --releases-left) and each DP stage's share
    as calibrated, before anything is reserved."""
    plan = calibration.plan
    shares = "; ".join(
        f"{s.stage} {s.mechanism}: epsilon={s.epsilon:.4g}, delta={s.delta:.3g} "
        f"({s.adjacency.value} level)"
        for s in plan.stages
    )
    print(
        f"budget: epsilon={plan.epsilon:.6g}, delta={plan.delta:.3g} at {plan.unit.value} "
        f"level ({plan.accountant}); {shares}",
        flush=True,
    )


def _show_stages(show: bool) -> None:
    """Print each finished stage and its elapsed time (``fdptm.flows.release.PROGRESS``) on
    the stderr of the moment (a caller may have replaced it since the last command)."""
    import logging

    class _Stderr(logging.StreamHandler):
        def emit(self, record: logging.LogRecord) -> None:
            self.stream = sys.stderr
            super().emit(record)

    logger = logging.getLogger("fdptm.progress")
    logger.propagate = False
    logger.setLevel(logging.INFO if show else logging.WARNING)
    if not logger.handlers:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("  %(message)s"))
        logger.addHandler(handler)
    if show:
        print("  starting the release flow (Prefect) ...", file=sys.stderr, flush=True)


def _flow(name: str, *args) -> dict:
    """Run a release flow (``fdptm.flows.running.run``: no flow heartbeat)."""
    from fdptm.flows import release

    return running.run(getattr(release, name), *args)


def _print_release(outcome: dict) -> None:
    counts = outcome.get("internal") or {}
    if "dropped" in counts:
        print(
            f"internal, not DP (never publish): the run read {counts['documents']} documents "
            f"of {counts['authors']} authors; contribution bounding dropped "
            f"{counts['dropped']} of them",
            file=sys.stderr,
        )
    print(f"run id:    {outcome['run_id']}")
    print(f"release:   {outcome['release_path']}")
    print(f"guarantee: {outcome['statement']}, {outcome['adjacency']}-level adjacency")
    cli_local.print_topics(outcome["topics"])
    _store_pending(outcome)


def cmd_backfill(args: argparse.Namespace) -> int:
    from fdptm.tasks.backfill import nothing_to_run, plan_backfill

    request = from_arguments(args)
    planned = plan_backfill(request, args.by, args.first, args.last)  # refusals before Prefect
    if not planned:
        print(f"no closed {args.by} in range: nothing to release")
        return 0
    if nothing_to_run(planned):  # a no-op: no flow, so no Prefect
        results = [p.left_alone() for p in planned]
    else:
        from fdptm.flows.backfill import run_backfill

        if args.dask_address is None:  # Dask workers would get this host's loopback URL
            running.start_api()
        scope = (args.by, args.first, args.last)
        results = running.run(run_backfill, request, *scope, args.dask_address)["partitions"]
    code = 0
    for r in results:
        if r["status"] == "failed":
            print(f"{r['partition']}: failed (exit {r['exit_code']}): {r['error']}")
            code = code or r["exit_code"]
        elif r["status"] == "not-retried":
            print(
                f"{r['partition']}: not-retried {r['run_id']} (it spent and cannot go on; "
                f"`fdptm release --resume {r['run_id']}` says why)"
            )
            code = code or 2
        elif r["status"] == "skipped":
            print(
                f"{r['partition']}: skipped {r['run_id']}, "
                f"{_released_guarantee(request, r['run_id'])} (released before)"
            )
        else:
            print(f"{r['partition']}: {r['status']} {r['run_id']}, {r['guarantee']}")
    return code


def _released_guarantee(request: ReleaseRequest, run_id: str) -> str:
    """A published release's guarantee as its manifest states it."""
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(request.workspace)
    rows = Catalog(workspace).query("SELECT path FROM releases WHERE run_id = ?", [run_id])
    guarantee = (_manifest(workspace.root / rows[0]["path"]) if rows else {}).get("guarantee")
    if not guarantee:
        return "guarantee not recorded"
    return f"{guarantee['statement']}, {guarantee['adjacency']}-level adjacency"


def cmd_compare(args: argparse.Namespace) -> int:
    from fdptm.flows.compare import compare_flow

    names = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    unknown = [m for m in names if m not in MECHANISMS]
    if unknown:
        raise BadInputError(f"unknown mechanism(s) {unknown}; available: {', '.join(MECHANISMS)}")
    running.start_api()
    result = running.run(
        compare_flow,
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
    _store_pending(result)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
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
    if args.dask_address is None:  # Dask workers would get this host's loopback URL
        running.start_api()
    report = running.run(audit, spec, args.workers, args.dask_address, args.processes)
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
    _store_pending(report)
    return 0


def _store_pending(outcome: dict) -> None:
    """The warning of a command whose uploads the artifact store could not take."""
    if outcome.get("store_pending"):
        print(f"fdptm: warning: {outcome['store_pending']}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.report import write_report

    path = write_report(Workspace.resolve(args.workspace), args.run)
    print(f"report: {path} (public: built from the release and the ledger's budgets only)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gensim.test.utils import datapath

    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    workspace = Workspace.resolve(args.workspace)
    running.start_api()
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
    request = ReleaseRequest.build(
        dataset="lee", workspace=str(workspace.root), seed=args.seed, **DEMO
    )
    _show_stages(True)
    outcome = _flow("release", request, True)
    _print_release(outcome)
    print(
        "The demo uses HDP-LDA: the Lee corpus has only 300 documents, too few for an "
        "author-level mechanism to learn topics at a useful epsilon. HDP-LDA is only "
        "word-level DP and needs a large per-iteration epsilon. Releases of real datasets "
        f"default to {DEFAULT_MECHANISM} (author level): read the manual's privacy model "
        "before publishing anything."
    )
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    from fdptm.storage.recovery import recover
    from fdptm.storage.workspace import Workspace, check_name

    if args.dataset:
        check_name(args.dataset)
    done = recover(Workspace.resolve(args.workspace).require(), args.dataset)
    if not done:
        print("no dead run found: nothing to recover")
    for r in done:
        print(
            f"{r.run_id} ({r.kind}, dataset {r.dataset!r}): marked failed; "
            f"{r.refunded} reservation(s) refunded (never read private data), "
            f"{r.spent} spent entr(y/ies) kept"
            + (f"; resume with `fdptm release --resume {r.run_id}`" if r.spent else "")
        )
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from fdptm.storage.retention import collect
    from fdptm.storage.workspace import Workspace

    done = collect(
        Workspace.resolve(args.workspace).require(), args.dataset, audit_inputs=args.audit_inputs
    )
    for c in done:
        print(f"{c.run_id}: removed {len(c.artifacts)} artifact(s), {c.bytes / 1e6:.2f} MB")
    total = sum(c.bytes for c in done) / 1e6
    print(f"{len(done)} run(s) collected, {total:.2f} MB freed; releases and the ledger untouched")
    return 0


def cmd_store(args: argparse.Namespace) -> int:
    from fdptm.storage import objectstore
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(args.workspace).require()
    if args.set:
        uploaded = objectstore.set_store(workspace, args.set)
        print(f"artifact store set; {uploaded} artifact(s) uploaded")
    elif args.unset:
        objectstore.unset_store(workspace)
        print("artifact store unset: every artifact is in the workspace; the store's objects stay")
    elif args.sync:
        print(f"{objectstore.sync(workspace)} artifact(s) uploaded")
    elif args.evict:
        files, freed = objectstore.evict(workspace)
        print(f"{files} local cop(ies) removed, {freed / 1e6:.2f} MB freed; releases untouched")
    s = objectstore.status(workspace)
    print(f"store: {s.store or 'none (artifacts live in the workspace only)'}")
    pending = f", {s.artifacts - s.uploaded} not uploaded" if s.store else ""
    print(f"artifacts: {s.artifacts}, {s.local} with a local copy{pending}")
    return 0


def cmd_partitions(args: argparse.Namespace) -> int:
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.partitions import counts, listing
    from fdptm.storage.workspace import Workspace, check_name

    check_name(args.dataset)
    workspace = Workspace.resolve(args.workspace).require()
    catalog = Catalog(workspace)
    if catalog.dataset(args.dataset) is None:
        raise BadInputError(f"no dataset named {args.dataset!r}; ingest it first")
    batches = catalog.batches(args.dataset)
    rows = counts(workspace, batches, args.by) if args.counts else listing(batches)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not args.counts:
        print(f"dataset {args.dataset!r}: its batches")
        print(f"{'batch':>5}  {'timed':<5}  {'ingested at':<32}  source")
        for r in rows:
            print(
                f"{r['batch']:>5}  {'yes' if r['timed'] else 'no':<5}  {r['ingested_at']:<32}  "
                f"{r['source']}"
            )
        return 0
    print(
        f"dataset {args.dataset!r}: documents per batch and {args.by}. Internal counts of "
        "private data: never publish them, and never choose a release's scope from them "
        "(which windows hold documents is itself private)"
    )
    print(f"{'batch':>5}  {'since':<10}  {'until':<10}  documents")
    for r in rows:
        since = r["since"] or "(no times)"
        print(f"{r['batch']:>5}  {since:<10}  {r['until'] or '':<10}  {r['documents']}")
    return 0


def cmd_mechanisms(args: argparse.Namespace) -> int:
    from fdptm.mechanisms.registry import TUNED

    listed = [m.describe() for m in [*MECHANISMS.values(), *TUNED.values()]]
    if args.json:
        print(json.dumps(listed, indent=2, default=str))
        return 0
    for m in listed:
        default = " (default)" if m["name"] == DEFAULT_MECHANISM else ""
        tuned = " (--tune)" if m["name"] in {t.name for t in TUNED.values()} else ""
        print(f"{m['name']}{default}{tuned}: {m['summary']}")
        units = ", ".join(f"{got} on {unit} datasets" for unit, got in m["adjacency"].items())
        delta = "epsilon and delta" if m["uses_delta"] else "epsilon only"
        print(f"  {m['notion']}, {units}; spends {delta}")
        for o in m["options"]:
            hint = f" ({o['hint']})" if o["hint"] else ""
            print(f"  --m2-option {o['name']}={o['default']}: {o['what']}; {o['accepts']}{hint}")
    return 0


UNIT_MEANING = {
    "author": "for adding or removing one author with all their documents",
    "author-replace": "for replacing one author's documents by another author's (up to 2x "
    "the add/remove figure)",
    "document": "for adding or removing one document",
    "document-replace": "for replacing one document by another (up to 2x the add/remove figure)",
    "word": "for replacing one token of one document (word level: the weakest)",
    "local": "per device, for everything one device reported (local DP)",
}
"""What a ledger total at each adjacency means, in one line (``fdptm budget``)."""


def cmd_releases(args: argparse.Namespace) -> int:
    """The published releases, each as its manifest states it: the guarantee's own statement
    (a seeded test run, random DP or an unproven claim says so) and the release date (no
    time of day: a finish time depends on the data's size)."""
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.workspace import Workspace, check_name

    workspace = Workspace.resolve(args.workspace).require()
    where, params = "", []
    if args.dataset:
        check_name(args.dataset)
        where, params = " WHERE dataset = ?", [args.dataset]
    rows = Catalog(workspace).query(
        f"SELECT run_id, dataset, path FROM releases{where} ORDER BY released_at", params
    )
    listed = []
    for r in rows:
        manifest = _manifest(workspace.root / r["path"])
        guarantee = manifest.get("guarantee") or {}
        topics = manifest.get("topics")
        listed.append(
            {
                "run_id": r["run_id"],
                "dataset": r["dataset"],
                "release_date": manifest.get("release_date"),
                "guarantee": guarantee.get("statement"),
                "adjacency": guarantee.get("adjacency"),
                "topics": None if topics is None else len(topics),
                "topics_with_signal": None
                if topics is None
                else sum(not t.get("no_signal") for t in topics),
                "path": str(workspace.root / r["path"]),
            }
        )
    if args.json:
        print(json.dumps(listed, indent=2))
        return 0
    if not listed:
        scope = f" of dataset {args.dataset!r}" if args.dataset else ""
        print(f"no published release{scope} in {workspace.root}")
        return 0
    for r in listed:
        if r["guarantee"] is None:
            print(f"{r['run_id']}: manifest missing or unreadable ({r['path']})")
            continue
        print(
            f"{r['run_id']}  {r['release_date']}  {r['adjacency']}-level  {r['topics']} topics "
            f"({r['topics_with_signal']} with signal)\n  {r['guarantee']}"
        )
    print("`fdptm report --run RUN_ID` writes a release's HTML report")
    return 0


def _manifest(release: Path) -> dict:
    """A release's manifest, or {} when it cannot be read."""
    try:
        manifest = json.loads((release / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def cmd_budget(args: argparse.Namespace) -> int:
    from fdptm.privacy.adjacency import Adjacency
    from fdptm.storage.catalog import Catalog
    from fdptm.storage.ledger import Ledger, budget_report
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
    if report["public"]:
        print(
            f"dataset {args.dataset!r} is public: the ledger never charges it (use it as "
            f"--vocabulary public:{args.dataset} or --prior {args.dataset})"
        )
        return 0
    print(f"dataset {args.dataset!r} (privacy unit: {report['dataset_unit']})")
    if cap:
        print(
            f"lifetime cap: epsilon={cap['epsilon']:g}, delta={cap['delta']:g} "
            f"({cap['unit']} level)"
        )
        print(f"lifetime guarantee: {report['lifetime']['statement']}")
        if report["lifetime"]["epsilon"] is None:
            print(
                "remaining: nothing (the cap cannot count what was spent: set it again at the "
                "weakest level spent, with --cap EPSILON DELTA --unit UNIT)"
            )
        else:
            print(
                f"spent or reserved: epsilon={report['lifetime']['epsilon']:.6g}, "
                f"delta={report['lifetime']['delta']:.6g}; remaining: "
                f"epsilon={report['remaining']['epsilon']:.6g}, "
                f"delta={report['remaining']['delta']:.6g}"
            )
    else:
        print("lifetime cap: none set (set one with --cap EPSILON DELTA)")
    own = report["dataset_unit"]
    own_defined = report["totals"].get(own) is not None
    for unit, total in report["totals"].items():
        # by default the dataset's own unit, and where that is not defined (a weaker-level
        # spend), the levels where a total is
        if unit != own and not args.all and (own_defined or total is None):
            continue
        print(
            f"total at {unit} level: "
            + (
                f"epsilon={total['epsilon']:.6g}, delta={total['delta']:.6g}"
                + ("" if total["notion"] == "approximate-dp" else f" ({total['notion']})")
                + (
                    ", the most any partition has spent (parallel composition)"
                    if total["composition"] == "parallel"
                    else ""
                )
                if total
                else "not defined (some spend is only weaker-level DP)"
            )
        )
        print(f"  {UNIT_MEANING[unit]}")
    if not args.all and len(report["totals"]) > 1:
        print("(--all shows the totals at the other adjacencies)")
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


if __name__ == "__main__":
    sys.exit(main())
