"""`fdptm report` on a real release, the shared templates, and their escaping."""

from __future__ import annotations

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
        "The dataset's lifetime ledger",
        "What the release learned (DP: computed from the release alone)",
        "Top words",
    ]
    text = " ".join(page.text)
    assert "(8, 1e-05)-DP" in text and "Lifetime cap: epsilon 20" in text
    assert "remaining: epsilon 4" in text  # 20 - 8 - 8
    assert page.images == ["spend.png"]
    assert (path.parent / "spend.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dates = [e for e in page.text if e.startswith("20") and len(e) == 10]
    assert len(dates) == 4  # one per ledger entry: a day, never a time
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
