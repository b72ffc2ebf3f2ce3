"""Render the release report and the audit report of the demo corpus to PNG screenshots.

    pip install -e ".[bench]"
    python benchmarks/report_pages.py     # writes report_release.png, report_audit.png and
                                          # report_pages.md next to this file

What it does: in a temporary workspace, gensim's Lee corpus (the demo's) is ingested, a
lifetime cap set, and two releases made with the demo's settings (HDP-LDA at epsilon 500,
seeded: TEST runs, not DP); ``fdptm report`` writes the second release's report and
``fdptm audit`` (4 shadows) its audit report. Each page's first screen is rendered to PNG
with its images (spend.png, the ROC plots) resolved from disk, and the script checks that
every ``<img>`` of the page was found and that the rendering is not blank.

The renderer is WeasyPrint (an HTML and CSS layout engine, the page laid out to PDF) and
pypdfium2 (PDFium, the PDF renderer of Chromium) for the pixels: not a browser. No browser
binary could be installed here (Playwright and pyppeteer download Chromium from a CDN, and
this machine reaches only the package registries), so this checks what a layout engine
makes of the pages, not a browser's rendering.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import machine  # noqa: E402

DEMO = {"epsilon": 500.0, "delta": 1e-5, "topics": 5, "iterations": 20, "mechanism": "hdp-lda"}


class Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


def screenshot(page: Path, out: Path) -> dict:
    """The page's first screen as PNG; what it found and how much it drew."""
    import numpy as np
    import pypdfium2
    import weasyprint

    parser = Images()
    parser.feed(page.read_text(encoding="utf-8"))
    missing = [src for src in parser.sources if not (page.parent / src).is_file()]
    pdf = pypdfium2.PdfDocument(weasyprint.HTML(filename=str(page)).write_pdf())
    image = pdf[0].render(scale=1.5).to_pil()
    image.save(out)
    pixels = np.asarray(image.convert("L"))
    return {
        "page": page.name,
        "png": out.name,
        "pages_in_pdf": len(pdf),
        "images": len(parser.sources),
        "missing_images": missing,
        "inked_fraction": float((pixels < 200).mean()),
    }


def main() -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from gensim.test.utils import datapath

    import fdptm

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        ws = fdptm.Workspace(Path(tmp) / "ws")
        lee = ws.dataset("lee")
        lee.ingest(datapath("lee_background.cor"), fmt="lines")
        lee.set_cap(1500.0, 1e-4, unit="word")  # HDP-LDA is word-level DP
        for seed in (1, 2):
            release = lee.release(seed=seed, **DEMO)
        report = ws.report(release.run_id)
        audit = ws.audit(release.run_id, shadows=4, seed=1)
        shots = [
            screenshot(report, HERE / "report_release.png"),
            screenshot(Path(audit["path"]), HERE / "report_audit.png"),
        ]
    for shot in shots:
        if shot["missing_images"] or shot["inked_fraction"] < 0.01:
            raise SystemExit(f"rendering check failed: {shot}")
    m = machine()
    lines = [
        "# The release and audit reports, rendered",
        "",
        f"Command: `python benchmarks/report_pages.py` · date {m['date']} · {m['cpu']} · "
        f"{m['cores']} cores · Python {m['python']} · run time "
        f"{time.perf_counter() - start:.0f} s",
        "",
        "Renderer: WeasyPrint (HTML/CSS layout to PDF) and pypdfium2 (PDFium) to PNG: a layout "
        "engine, not a browser; no browser binary can be installed on this machine (module "
        "docstring). Demo corpus (Lee), HDP-LDA at epsilon 500, seeded: test runs, not DP.",
        "",
        "| page | screenshot | PDF pages | images | missing | inked fraction |",
        "|---|---|---|---|---|---|",
        *[
            f"| {s['page']} | [{s['png']}]({s['png']}) | {s['pages_in_pdf']} | {s['images']} | "
            f"{len(s['missing_images'])} | {s['inked_fraction']:.3f} |"
            for s in shots
        ],
        "",
    ]
    (HERE / "report_pages.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
