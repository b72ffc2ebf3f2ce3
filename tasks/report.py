"""``fdptm report``: a release's HTML report, public like the release itself.

Built from the release (its manifest and topic-word matrix: DP outputs) and from the
dataset's ledger (the budgets of its runs: functions of the requests, never of the data),
nothing else: the guarantee in plain words, the per-stage budgets, the lifetime ledger with a
plot of the epsilon spent after each entry against the cap, the figures that are
post-processing of the release (vocabulary size, topics with signal, top words above the
floor, topic diversity) and each topic's top words with their probabilities. Written to
``<workspace>/reports/<run_id>/`` (``report.html``, ``spend.png``) from the shared templates
(``fdptm.templating``).
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from fdptm.errors import BadInputError
from fdptm.evaluation import metrics, topwords
from fdptm.privacy.adjacency import Adjacency
from fdptm.release import Release, load_release
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger, budget_report
from fdptm.storage.workspace import Workspace
from fdptm.templating import render


def write_report(workspace: Workspace, run_id: str) -> Path:
    """Write the report of published release ``run_id``; returns the HTML file's path."""
    catalog = Catalog(workspace.require())
    rows = catalog.query("SELECT path FROM releases WHERE run_id = ?", [run_id])
    if not rows:
        raise BadInputError(
            f"no published release with run id {run_id!r} in {workspace.root}; list them with "
            "`fdptm budget --dataset NAME`"
        )
    release = load_release(workspace.root / rows[0]["path"])
    ledger = Ledger(catalog)
    dataset = release.manifest["dataset"]
    report = budget_report(ledger, dataset)
    out = workspace.report_dir(run_id)
    out.mkdir(parents=True, exist_ok=True)
    unit = Adjacency(report["cap"]["unit"]) if report["cap"] else ledger.default_unit(dataset)
    plotted = not report["public"] and _spend_plot(ledger, dataset, unit, report, out)
    page = render(
        "release.html.j2",
        manifest=release.manifest,
        guarantee=release.guarantee,
        stages=release.manifest["stages"],
        ledger=report,
        entries=[{**e, "date": str(e["created_at"].date())} for e in report["entries"]],
        spend_plot="spend.png" if plotted else None,
        plot_unit=unit.value,
        utility=utility(release),
        topics=release.manifest["topics"],
        near_uniform_tv=f"{topwords.NEAR_UNIFORM_TV:g}",
    )
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def utility(release: Release) -> list[tuple[str, str]]:
    """The figures that are post-processing of the release alone."""
    phi = release.topic_word
    silent = release.no_signal()
    return [
        ("vocabulary", str(len(release.vocabulary))),
        ("topics with signal", f"{len(silent) - sum(silent)} of {len(silent)}"),
        ("top-10 words above the floor (mean per topic)", f"{topwords.words_above_floor(phi):.1f}"),
        ("topic diversity (top 25)", f"{metrics.topic_diversity(phi):.2f}"),
    ]


def _spend_plot(ledger: Ledger, dataset: str, unit: Adjacency, report: dict, out: Path) -> bool:
    """``spend.png``: epsilon after each active entry at ``unit``; False when the ledger has
    no entry or its total is not defined at that unit."""
    try:
        history = ledger.history(dataset, unit)
    except ValueError:
        return False
    if not history:
        return False
    fig = Figure(figsize=(6, 3), dpi=100)
    ax = fig.subplots()
    steps = range(1, len(history) + 1)
    ax.step(steps, [c.epsilon for _, c in history], where="post", label="spent or reserved")
    if report["cap"]:
        ax.axhline(report["cap"]["epsilon"], color="#c00", linestyle="--", label="cap")
    ax.set_xticks(list(steps), [d for d, _ in history], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel(f"epsilon ({unit.value} level)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "spend.png")
    return True
