"""The audit's HTML report and its log-log ROC plots (internal: computed on private data).

One self-contained directory per audit: ``audit.json`` (the numbers), ``roc-<attack>.png``
(ROC on log-log axes, as the FDPTM paper plots them, with the chance diagonal) and
``report.html`` (the release's guarantee and per-stage budgets, the utility measures, every
attack's AUC, TPR at 0.1% and 1% FPR and epsilon lower bound against the claim, the plots,
and each topic's words above its floor with their probabilities, or "no signal"). The report
says on top that it is not DP and must not be published. Every string from the release
(words included) is HTML-escaped.
"""

from __future__ import annotations

import html
from pathlib import Path

from matplotlib.figure import Figure

from fdptm.audit.lira import Roc
from fdptm.evaluation.topwords import NEAR_UNIFORM_TV

# Utility measures shown when the audit's utility block has them (a value, not None):
# (key, header, format). UMass, perplexities and the distance to the non-private model are
# always there.
OPTIONAL_UTILITY = [
    ("npmi", "NPMI (gensim)", ".3f"),
    ("topic_diversity", "topic diversity", ".3f"),
    ("words_above_floor", "top words above the floor (mean per topic)", ".2f"),
    ("heldout_loglik_per_token", "held-out log-likelihood per token", ".3f"),
]


def roc_plot(curve: Roc, title: str, path: Path) -> None:
    """A log-log ROC curve with the chance line, written as PNG."""
    fig = Figure(figsize=(4, 4), dpi=100)
    ax = fig.subplots()
    floor = 1e-4
    ax.plot([max(f, floor) for f in curve.fpr], [max(t, floor) for t in curve.tpr], label="attack")
    ax.plot([floor, 1], [floor, 1], linestyle="--", color="grey", label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1)
    ax.set_ylim(floor, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(report: dict, manifest: dict, plots: dict[str, str], path: Path) -> None:
    """``report.html`` next to the plots (referenced by file name)."""
    g = manifest["guarantee"]
    claim = report["claims_per_document"]["release"]
    stages = _table(
        ["step", "mechanism", "notion", "adjacency", "epsilon", "delta"],
        [
            [
                s["step"],
                s["mechanism"],
                s.get("notion", ""),
                s["adjacency"],
                f"{s['epsilon']:.4g}",
                f"{s['delta']:.3g}",
            ]
            for s in manifest["stages"]
        ],
    )
    topics = _table(
        ["topic", "floor", "top words (probability)"],
        [
            [
                str(t["topic"]),
                str(t["floor"]),
                "no signal"
                if t["no_signal"]
                else ", ".join(f"{w['word']} {w['probability']}" for w in t["words"]),
            ]
            for t in manifest["topics"]
        ],
    )
    attacks = _table(
        ["attack", "tests", "AUC", "TPR at 0.1% FPR", "TPR at 1% FPR", "epsilon lower bound"],
        [
            [
                name,
                r["scope"],
                f"{r['auc']:.3f}",
                f"{r['tpr_at_fpr_0.001']:.4f}",
                f"{r['tpr_at_fpr_0.01']:.4f}",
                f"{r['epsilon_lower_bound']['epsilon']:.3f}",
            ]
            for name, r in report["attacks"].items()
        ],
    )
    u = report["utility"]
    columns = [
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
    utility = _table([h for h, _ in columns], [[v for _, v in columns]])
    images = "".join(
        f'<figure><img src="{html.escape(file)}" alt="ROC {html.escape(name)}">'
        f"<figcaption>{html.escape(name)}</figcaption></figure>"
        for name, file in plots.items()
    )
    claim_text = (
        f"{claim['epsilon']:.4g}" if claim["epsilon"] is not None else "no per-document claim"
    )
    bounds = _table(
        ["tests", "claim per document", "largest lower bound", "exceeded"],
        [
            [
                scope,
                "none" if b["claim"] is None else f"{b['claim']:.4g}",
                f"{b['lower_bound']:.3f}",
                "YES" if b["exceeded"] else "no",
            ]
            for scope, b in report["bounds"].items()
        ],
    )
    suspects = f" Suspect: {', '.join(report['suspects'])}." if report["suspects"] else ""
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Audit of {html.escape(report["run_id"])}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2em .5em}}
.warn{{background:#fee;padding:.5em;border:1px solid #c00}}figure{{display:inline-block}}
</style></head><body>
<p class="warn">{html.escape(report["note"])}</p>
<h1>Audit of {html.escape(report["run_id"])}: {html.escape(report["verdict"])}</h1>
<p>Release guarantee: {html.escape(g["statement"])}, {html.escape(g["adjacency"])} level.
Claim per document: {html.escape(claim_text)} ({html.escape(claim["reason"])}).
Largest empirical lower bound: {report["largest_lower_bound"]:.3f}
({report["confidence"]:.0%} confidence for all bounds together, each at
{report["confidence_per_bound"]:.4%}; {report["shadows"]} shadow models, {report["mode"]} LiRA,
{report["documents"]} documents). The bounds count the documents of one target model as
independent trials, the usual one-run reading of an audit: treat a failure as strong
evidence, not as a proof.{html.escape(suspects)}</p>
<p>Normality of the shadow release likelihoods (appendix D): {report["normality"]["rejected"]} of
{report["normality"]["tests"]} Shapiro-Wilk tests reject at FDR
{report["normality"]["level"]:g} (Benjamini-Hochberg).</p>
<h2>Utility (on the run's documents)</h2>{utility}
<p>In-sample: the release on the documents it was trained on. Held-out: the audit's target
model (the same configuration on a random half) on the other half.</p>
<h2>Stages</h2>{stages}
<h2>Lower bounds against claims</h2>{bounds}
<h2>Attacks</h2>
<p>Pipeline models run M1, SAN and M2 on their half. LiRA runs on three statistics of
each document under each of them: the release likelihood (the document under Phi on the
model's vocabulary S, with probability 1e-6 spread over the words outside S among the
{report["word_universe"]} words of the audited documents; sees S and Phi), "-eq3" (the
paper's eq. 3 on the document's tokens in S) and "-vocabulary" (the number of its tokens
in S; sees M1's output only, so it tests M1 alone). The Huang et al. baselines threshold
the target's theta-hat globally. "m2-" attacks use models that all keep the release's own
vocabulary, so only M2 sees the half: they test
M2 alone.</p>{attacks}
<h2>ROC curves</h2>{images}
<h2>Top words (from the release)</h2>
<p>Post-processing of the released matrix. A topic's words are listed only while strictly
above its floor (the row's lowest probability, where the words whose noisy counts were
floored tie), with their probabilities. "no signal": no word above the floor, or
total-variation distance to uniform below {NEAR_UNIFORM_TV:g}.</p>{topics}
</body></html>
"""
    path.write_text(page, encoding="utf-8")
