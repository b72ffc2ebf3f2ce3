"""``fdptm report``: a release's HTML report, public like the release itself.

Built from the release (its manifest and topic-word matrix: DP outputs) and from the
budgets of the dataset's published releases, nothing else: the guarantee in plain words,
the per-stage budgets, the cap and the epsilon the published releases spent, cumulatively
(with a plot against the cap), the figures that are post-processing of the release
(vocabulary size, topics with signal, top words above the floor, topic diversity) and each
topic's top words with their probabilities (recomputed from the hash-checked matrix). The
ledger's other entries stay internal (``fdptm budget``): a charge without a release, a lost
attempt or a reservation tells how a run went, and the entries' times how long it took,
which grows with the data; for the same reason the report shows no remaining budget. Written to
``<workspace>/reports/<run_id>/`` (``report.html``, ``spend.png``) from the shared templates
(``fdptm.templating``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from fdptm.errors import BadInputError
from fdptm.evaluation import metrics, topwords
from fdptm.mechanisms.guarantee import describe
from fdptm.privacy.adjacency import Adjacency
from fdptm.release import Release, load_release
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.storage.workspace import Workspace
from fdptm.tasks.release import topic_summaries
from fdptm.templating import render


def write_report(workspace: Workspace, run_id: str) -> Path:
    """Write the report of published release ``run_id``; returns the HTML file's path."""
    catalog = Catalog(workspace.require())
    rows = catalog.query(
        "SELECT r.path, runs.dataset FROM releases r JOIN runs USING (run_id) WHERE run_id = ?",
        [run_id],
    )
    if not rows:
        raise BadInputError(
            f"no published release with run id {run_id!r} in {workspace.root}; `fdptm "
            "releases` lists them"
        )
    release = load_release(workspace.root / rows[0]["path"])
    dataset = rows[0]["dataset"]  # the catalog's, not the (unhashed) manifest's
    ledger = Ledger(catalog)
    published = [
        r["run_id"]
        for r in catalog.query(
            "SELECT r.run_id FROM releases r JOIN runs USING (run_id) WHERE runs.dataset = ?"
            " ORDER BY r.released_at",
            [dataset],
        )
    ]
    cap = ledger.cap(dataset)
    unit = cap.unit if cap else ledger.default_unit(dataset)
    out = workspace.report_dir(run_id)
    out.mkdir(parents=True, exist_ok=True)
    public = ledger.is_public(dataset)
    history = [] if public else _history(ledger, dataset, unit, published)
    if history:
        _spend_plot(history, cap.epsilon if cap else None, unit, out / "spend.png")
    page = render(
        "release.html.j2",
        manifest=release.manifest,
        dataset=dataset,
        guarantee=release.guarantee,
        seeded=bool(release.guarantee.get("seeded")),
        stages=release.manifest["stages"],
        public=public,
        cap=cap,
        releases=[
            {"run_id": r, "epsilon": c.epsilon, "delta": c.delta, "statement": c.statement}
            for r, c in zip(published, history, strict=False)
        ],
        spend_plot="spend.png" if history else None,
        plot_unit=unit.value,
        utility=utility(release),
        topics=topic_summaries(release.topic_word, release.vocabulary, release.noise),
        near_uniform_tv=f"{topwords.NEAR_UNIFORM_TV:g}",
    )
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


@dataclass(frozen=True)
class Spent:
    epsilon: float
    delta: float
    statement: str


def _history(ledger: Ledger, dataset: str, unit: Adjacency, runs: list[str]) -> list[Spent]:
    """Cumulative spend of the published releases at ``unit``; [] where it is undefined."""
    try:
        steps = ledger.history(dataset, unit, runs)
    except ValueError:
        return []
    return [
        Spent(c.epsilon, c.delta, describe(c.notion, c.epsilon, c.delta, c.gamma)) for c in steps
    ]


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


def _spend_plot(history: list[Spent], cap: float | None, unit: Adjacency, path: Path) -> None:
    """Epsilon spent by the dataset's published releases, cumulatively, against the cap: one
    bar per release (a step line draws nothing for a single release)."""
    fig = Figure(figsize=(6, 3), dpi=100)
    ax = fig.subplots()
    steps = list(range(1, len(history) + 1))
    spent = [h.epsilon for h in history]
    ax.bar(steps, spent, width=0.6, color="#4a7bb7", label="spent after each release")
    for x, y in zip(steps, spent, strict=True):
        ax.annotate(f"{y:.3g}", (x, y), ha="center", va="bottom", fontsize=8)
    top = max(spent)
    if cap is not None:
        ax.axhline(cap, color="#c00", linestyle="--", label=f"cap ({cap:g})")
        top = max(top, cap)
    ax.set_xticks(steps)
    ax.set_xlim(0.4, len(history) + 0.6)
    ax.set_xlabel("release (in order of publication)")
    ax.set_ylabel(f"epsilon ({unit.value} level)")
    ax.set_ylim(0, top * 1.15)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
