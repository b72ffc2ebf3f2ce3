"""`fdptm report` on a real release, the shared templates, and their escaping."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from fdptm.cli import main
from fdptm.storage.catalog import Catalog
from fdptm.tasks.ingest import ingest
from fdptm.templating import render

pytestmark = pytest.mark.usefixtures("prefect_harness")


class Page(HTMLParser):
    """Headings, images, table cells and text of a page, and whether its tags balance."""

    VOID = frozenset({"meta", "img", "br", "hr", "link", "input"})

    def __init__(self, text: str) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.headings: list[str] = []
        self.images: list[str] = []
        self.text: list[str] = []
        self._heading = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)
        self._heading = tag in ("h1", "h2")
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        assert self.stack and self.stack.pop() == tag, f"unbalanced </{tag}>"
        self._heading = False

    def handle_data(self, data):
        if self._heading:
            self.headings.append(data.strip())
        self.text.append(data)


def test_report_of_a_release_with_a_cap(tmp_path, pheme_raw, capsys):
    from fdptm.storage.workspace import Workspace

    workspace = Workspace.resolve(tmp_path / "ws")
    ingest(pheme_raw, "pheme", workspace)
    ws = ["--workspace", str(workspace.root)]
    assert main(["budget", "--dataset", "pheme", "--cap", "20", "1e-4", *ws]) == 0
    args = ["release", "--dataset", "pheme", "--epsilon", "8", "--delta", "1e-5"]
    args += ["--topics", "4", "--iterations", "10", "--no-progress", *ws]
    for _ in range(2):
        assert main(args) == 0
    capsys.readouterr()
    run_id = Catalog(workspace).query("SELECT run_id FROM releases ORDER BY released_at")[1]
    run_id = run_id["run_id"]
    assert main(["report", "--run", run_id, *ws]) == 0
    out = capsys.readouterr().out
    path = workspace.report_dir(run_id) / "report.html"
    assert str(path) in out
    page = Page(path.read_text(encoding="utf-8"))
    assert page.stack == []  # every tag closed
    assert page.headings[0] == f"Release {run_id}"
    assert page.headings[1:] == [
        "The guarantee in plain words",
        "Per-stage budgets",
        "The dataset's budget",
        "What the release learned (DP: computed from the release alone)",
        "Top words",
    ]
    text = " ".join(page.text)
    assert "(8, 1e-05)-DP" in text and "Lifetime cap: epsilon 20" in text
    assert "(16, 2e-05)-DP" in text  # the two published releases, composed
    assert page.images == ["spend.png"]
    assert (path.parent / "spend.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # nothing about how runs went: no remaining budget, no ledger states, no entry dates
    assert "remaining" not in text and "reserved" not in text.replace("a reservation", "")
    released_on = json.loads((workspace.release_dir(run_id) / "manifest.json").read_text())
    dates = [e for e in page.text if re.fullmatch(r"\d{4}-\d{2}-\d{2}", e.strip())]
    assert dates == [] and text.count(released_on["release_date"]) == 1
    assert main(["report", "--run", "nope", *ws]) == 2


def test_templates_escape_everything_from_a_release():
    hostile = "<script>alert(1)</script>"
    topics = [
        {
            "topic": 0,
            "floor": 0.1,
            "no_signal": False,
            "words": [{"word": hostile, "probability": 0.5}],
        }
    ]
    stages = [
        {
            "step": "M2",
            "mechanism": hostile,
            "notion": "approximate-dp",
            "adjacency": "document",
            "epsilon": 1.0,
            "delta": 1e-5,
        }
    ]
    html = render("macros.html.j2")  # the macros file renders to nothing by itself
    assert html.strip() == ""
    env_page = render(
        "audit.html.j2",
        report={
            "run_id": hostile,
            "note": "internal",
            "verdict": "passed",
            "largest_lower_bound": 0.1,
            "confidence": 0.95,
            "confidence_per_bound": 0.99,
            "shadows": 2,
            "mode": "online",
            "documents": 10,
            "suspects": [],
            "normality": {"rejected": 0, "tests": 1, "level": 0.05},
            "bounds": {},
            "attacks": {},
            "word_universe": 5,
        },
        guarantee={"statement": "(1, 1e-05)-DP", "adjacency": "document"},
        claim={"reason": hostile},
        claim_text="1",
        utility=[("vocabulary", "3")],
        stages=stages,
        topics=topics,
        plots={hostile: "roc.png"},
        near_uniform_tv="0.05",
    )
    assert hostile not in env_page and "&lt;script&gt;" in env_page
    assert Page(env_page).stack == []


def test_the_release_page_escapes_words_and_states_no_dp_for_a_seeded_run():
    hostile = "<script>alert(1)</script>"
    page = render(
        "release.html.j2",
        manifest={
            "run_id": "r",
            "release_date": "2026-01-01",
            "model": {"topics": 1, "vocabulary_size": 1},
        },
        dataset=hostile,
        guarantee={
            "statement": "(1, 1e-05)-DP",
            "adjacency": "document",
            "neighbouring_datasets": "n",
            "privacy_unit": "u",
            "not_covered": "c",
            "accountant": "a",
            "notion": "approximate-dp",
            "epsilon": 1.0,
            "delta": 1e-5,
        },
        seeded=True,
        stages=[],
        public=False,
        cap=None,
        releases=[],
        spend_plot=None,
        plot_unit="document",
        utility=[("vocabulary", "1")],
        topics=[
            {
                "topic": 0,
                "floor": 0.1,
                "no_signal": False,
                "words": [{"word": hostile, "probability": 0.9}],
            }
        ],
        near_uniform_tv="0.05",
    )
    assert hostile not in page and page.count("&lt;script&gt;") == 2
    assert "NOT differentially private" in page and "Whatever anyone learns" not in page
    assert Page(page).stack == []
