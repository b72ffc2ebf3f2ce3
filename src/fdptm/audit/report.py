"""The audit's HTML report and its log-log ROC plots (internal: computed on private data).

One self-contained directory per audit: ``audit.json`` (the numbers), ``roc-<attack>.png``
(ROC on log-log axes, as the FDPTM paper plots them, with the chance diagonal) and
``report.html`` (the release's guarantee and per-stage budgets, the utility measures, every
attack's AUC, TPR at 0.1% and 1% FPR and epsilon lower bound against the claim, the plots,
and each topic's listed words with their probabilities, or "no signal": the manifest's own
lists, ``fdptm.evaluation.significance``), rendered
from the shared templates (``fdptm.templating``: ``audit.html.j2``). The report says on top
that it is not DP and must not be published. Every string from the release (words
included) is HTML-escaped by the templates' autoescaping.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

from fdptm.audit.lira import Roc
from fdptm.evaluation.topwords import NEAR_UNIFORM_TV
from fdptm.templating import render

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")

# Utility measures shown when the audit's utility block has them (a value, not None):
# (key, header, format). UMass, perplexities and the distance to the non-private model are
# always there.
OPTIONAL_UTILITY = [
    ("npmi", "NPMI (gensim)", ".3f"),
    ("topic_diversity", "topic diversity", ".3f"),
    ("words_above_floor", "top words above the floor (mean per topic)", ".2f"),
    ("heldout_loglik_per_token", "held-out log-likelihood per token", ".3f"),
]


def roc_plots(curves: dict[Path, tuple[Roc, str]]) -> None:
    """Each log-log ROC curve (with its title) written as PNG to its path, with the chance
    line. One figure is laid out once and redrawn per curve, its decades labelled in plain
    text (10⁻⁴ .. 10⁰) and without minor ticks: a figure per plot, with mathtext labels
    and 64 minor ticks drawn each time, took about 0.4 s a plot, the largest part of an
    audit's conclusion (now about a quarter of that)."""
    fig = Figure(figsize=(4, 4), dpi=100)
    ax = fig.subplots()
    floor = 1e-4
    (line,) = ax.plot([floor, 1], [floor, 1], label="attack")
    ax.plot([floor, 1], [floor, 1], linestyle="--", color="grey", label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1)
    ax.set_ylim(floor, 1)
    decades = range(-4, 1)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(FixedLocator([10.0**e for e in decades]))
        axis.set_major_formatter(
            FixedFormatter([f"10{str(e).translate(_SUPERSCRIPT)}" for e in decades])
        )
        axis.set_minor_locator(NullLocator())
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    title = ax.set_title("ROC", fontsize=9)  # a line of title for the layout; set per plot
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    for path, (curve, name) in curves.items():
        line.set_data(np.maximum(curve.fpr, floor), np.maximum(curve.tpr, floor))
        title.set_text(name)
        fig.savefig(path)


def write_html(report: dict, manifest: dict, plots: dict[str, str], path: Path) -> None:
    """``report.html`` next to the plots (referenced by file name), from ``audit.html.j2``."""
    claim = report["claims_per_document"]["release"]
    u = report["utility"]
    utility = [
        ("vocabulary", str(u["vocabulary_size"])),
        ("UMass (eq. 4)", f"{u['umass']:.2f}"),
        *[
            (header, f"{u[key]:{spec}}")
            for key, header, spec in OPTIONAL_UTILITY
            if u.get(key) is not None
        ],
        ("perplexity (in-sample)", f"{u['perplexity_in_sample']:.1f}"),
        ("perplexity (held-out)", f"{u['perplexity_held_out']:.1f}"),
        ("L1 to non-private", f"{u['against_non_private']['l1']:.3f}"),
        ("RMSE", f"{u['against_non_private']['rmse']:.2e}"),
        ("Kendall tau", f"{u['against_non_private']['kendall_tau']:.3f}"),
        ("non-private UMass", f"{u['non_private_umass']:.2f}"),
    ]
    page = render(
        "audit.html.j2",
        report=report,
        guarantee=manifest["guarantee"],
        claim=claim,
        claim_text=(
            f"{claim['epsilon']:.4g}" if claim["epsilon"] is not None else "no per-document claim"
        ),
        utility=utility,
        stages=manifest["stages"],
        topics=manifest["topics"],
        plots=plots,
        near_uniform_tv=f"{NEAR_UNIFORM_TV:g}",
    )
    path.write_text(page, encoding="utf-8")
