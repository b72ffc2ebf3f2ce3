"""Render the release report and the audit report of the demo corpus in a browser, to PNG.

    pip install -e ".[bench]"
    python benchmarks/report_pages.py     # writes report_release.png, report_audit.png and
                                          # report_pages.md next to this file

What it does: in a temporary workspace, gensim's Lee corpus (the demo's) is ingested, a
lifetime cap set, and two releases made with the demo's settings (HDP-LDA at epsilon 500,
seeded: TEST runs, not DP); ``fdptm report`` writes the second release's report and
``fdptm audit`` (4 shadows) its audit report. Each page is opened from disk (a file:// URL,
its images, spend.png and the ROC plots, loaded by the browser from beside it) and
screenshot in full, 1280 CSS pixels wide (at most MAX_HEIGHT tall). The script checks, in
the page, that every ``<img>`` was loaded by the browser (``complete`` and a
``naturalWidth`` above 0), and, from the HTML alone, that every ``src`` names a file on
disk; and that the screenshot is not blank.

The browser is Qt WebEngine, which is Chromium (its version is printed by the script and
written to report_pages.md: Chromium 140.0.7339.225 in Qt WebEngine 6.11.2 when this was
written), from the PyPI wheels PyQt6 and PyQt6-WebEngine, which ship the engine and its
QtWebEngineProcess: no browser is downloaded at run time. It runs headless on Qt's
``offscreen`` platform with the GPU off (software rendering) and Chromium's sandbox off
(needed when run as root); a QWebEngineView is shown offscreen, loads the page, is grown
to the page's height once its load event has fired, and is grabbed once the renderer has
the new size and two grabs in a row agree. Qt may print that it cannot create an OpenGL
context and that D-Bus is not reachable: both are harmless here, the pixels come from the
software path.
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

from harness import at_start, save, stem  # noqa: E402

DEMO = {"epsilon": 500.0, "delta": 1e-5, "topics": 5, "iterations": 20, "mechanism": "hdp-lda"}
WIDTH, HEIGHT = 1280, 1600  # the viewport, CSS pixels; the page is then grown to its height
MAX_HEIGHT = 6000  # a taller page is cut there (said in the table)
TIMEOUT_MS = 60_000  # for the page to load, or a script to answer
NEEDS = 'pip install -e ".[bench]" (PyQt6, PyQt6-WebEngine)'

# Headless Chromium inside Qt: no display, no GPU, no sandbox (root). Set before Qt loads.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QTWEBENGINE_CHROMIUM_FLAGS", "--disable-gpu --no-sandbox")
os.environ.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")

# In the page: every <img> (as the browser resolved and loaded it), and the page's size.
PROBE = """JSON.stringify({
  title: document.title,
  height: Math.max(document.body.scrollHeight, document.documentElement.scrollHeight),
  images: Array.from(document.images).map(i => ({
    src: i.getAttribute("src"), complete: i.complete, width: i.naturalWidth})),
})"""


class Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


class Browser:
    """One offscreen QWebEngineView, reused for every page (Qt allows one app a process)."""

    def __init__(self) -> None:
        from PyQt6 import QtWebEngineCore
        from PyQt6.QtCore import QCoreApplication, Qt
        from PyQt6.QtWebEngineWidgets import QWebEngineView
        from PyQt6.QtWidgets import QApplication

        QCoreApplication.setAttribute(Qt.ApplicationAttribute.AA_UseSoftwareOpenGL)
        self.app = QApplication.instance() or QApplication(["report_pages"])
        self.view = QWebEngineView()
        self.view.resize(WIDTH, HEIGHT)
        self.view.show()
        self.engine = (
            f"Qt WebEngine {QtWebEngineCore.qWebEngineVersion()} "
            f"(Chromium {QtWebEngineCore.qWebEngineChromiumVersion()}, security patches of "
            f"{QtWebEngineCore.qWebEngineChromiumSecurityPatchVersion()}) through PyQt6-WebEngine "
            f"{QtWebEngineCore.PYQT_WEBENGINE_VERSION_STR}"
        )
        self.user_agent = self.view.page().profile().httpUserAgent()

    def _wait(self, start, what: str):
        """Run ``start(done)`` and the event loop until ``done(value)`` is called."""
        from PyQt6.QtCore import QEventLoop, QTimer

        loop, box = QEventLoop(), {}

        def done(value=None):
            box.setdefault("value", value)
            loop.quit()

        QTimer.singleShot(TIMEOUT_MS, loop.quit)
        start(done)
        if "value" not in box:
            loop.exec()
        if "value" not in box:
            raise SystemExit(f"browser: no answer in {TIMEOUT_MS} ms to {what}")
        return box["value"]

    def _pause(self, ms: int) -> None:
        from PyQt6.QtCore import QTimer

        self._wait(lambda done: QTimer.singleShot(ms, done), "a pause")

    def _js(self, script: str):
        return self._wait(lambda done: self.view.page().runJavaScript(script, 0, done), script)

    def _frame(self):
        """A grab once the renderer has the view's size and two grabs in a row agree.

        After a resize, Chromium lays out at the new size a little later and paints a frame
        or so after that: a grab taken at once shows the old viewport with blank below it.
        """
        height = self.view.height()
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while self._js("window.innerHeight") != height:
            if time.monotonic() > deadline:
                raise SystemExit(f"browser: the viewport did not reach {height} px")
            self._pause(100)
        last = None
        while True:
            self._pause(250)
            frame = self.view.grab().toImage()
            if last is not None and frame == last:
                return frame
            if time.monotonic() > deadline:
                raise SystemExit("browser: the page did not settle")
            last = frame

    def load(self, page: Path) -> dict:
        import json

        from PyQt6.QtCore import QUrl

        view = self.view
        view.resize(WIDTH, HEIGHT)

        def start(done):
            view.loadFinished.connect(done)
            view.load(QUrl.fromLocalFile(str(page.resolve())))

        try:
            ok = self._wait(start, f"loading {page}")
        finally:
            view.loadFinished.disconnect()
        if not ok:
            raise SystemExit(f"browser: {page} did not load")
        probe = json.loads(self._js(PROBE))
        view.resize(WIDTH, min(max(probe["height"], HEIGHT), MAX_HEIGHT))
        return probe

    def grab(self, out: Path):
        """Save the view as PNG; its pixels as a grey numpy array."""
        import numpy as np
        from PyQt6.QtGui import QImage

        image = self._frame()
        if not image.save(str(out)):
            raise SystemExit(f"could not write {out}")
        grey = image.convertToFormat(QImage.Format.Format_Grayscale8)
        raw = np.frombuffer(grey.constBits().asstring(grey.sizeInBytes()), np.uint8)
        return raw.reshape(grey.height(), grey.bytesPerLine())[:, : grey.width()]

    def close(self) -> None:
        """Delete the view (and its page) before the profile goes, as Qt asks."""
        from PyQt6.QtCore import QCoreApplication, QEvent

        self.view.close()
        self.view.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
        self.app.processEvents()


_browser: Browser | None = None


def screenshot(page: Path, out: Path) -> dict:
    """The page as the browser draws it, as PNG; what it loaded and how much it drew."""
    global _browser
    if _browser is None:
        _browser = Browser()
    parser = Images()
    parser.feed(page.read_text(encoding="utf-8"))
    missing = [src for src in parser.sources if not (page.parent / src).is_file()]
    probe = _browser.load(page)
    pixels = _browser.grab(out)
    return {
        "page": page.name,
        "png": out.name,
        "title": probe["title"],
        "height": probe["height"],
        "size": f"{pixels.shape[1]}x{pixels.shape[0]}",
        "cut": probe["height"] > MAX_HEIGHT,
        "images": len(parser.sources),
        "missing_images": missing,  # from the HTML: no such file beside the page
        "unloaded_images": [  # in the browser: not loaded, or loaded with no width
            i["src"] for i in probe["images"] if not (i["complete"] and i["width"] > 0)
        ],
        "browser_images": len(probe["images"]),
        "inked_fraction": float((pixels < 200).mean()),
        "grey_std": float(pixels.std()),
    }


def main() -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from gensim.test.utils import datapath

    import fdptm

    start = time.perf_counter()
    started = at_start()
    where = stem("report_pages")  # the screenshots go beside the results file
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
            screenshot(report, where.parent / "report_release.png"),
            screenshot(Path(audit["path"]), where.parent / "report_audit.png"),
        ]
        engine, agent = _browser.engine, _browser.user_agent
        _browser.close()
    for shot in shots:
        if (
            shot["missing_images"]
            or shot["unloaded_images"]
            or shot["browser_images"] != shot["images"]
            or shot["inked_fraction"] < 0.01
            or shot["grey_std"] < 5
        ):
            raise SystemExit(f"rendering check failed: {shot}")
    lines = [
        f"Run time {time.perf_counter() - start:.0f} s. Browser: {engine}, headless (Qt's "
        "offscreen platform, software rendering), from the "
        f"PyPI wheels PyQt6 and PyQt6-WebEngine; user agent `{agent}`. Each page is opened "
        f"from disk and screenshot in full at {WIDTH} CSS pixels wide (cut at {MAX_HEIGHT}). "
        "Images: `<img>` tags in the HTML; missing: their files not on disk; unloaded: not "
        "loaded by the browser (`complete` false or `naturalWidth` 0). Demo corpus (Lee), "
        "HDP-LDA at epsilon 500, seeded: test runs, not DP.",
        "",
        "| page | title | screenshot | page height (px) | PNG size | images | missing | "
        "unloaded | inked fraction |",
        "|---|---|---|---|---|---|---|---|---|",
        *[
            f"| {s['page']} | {s['title']} | [{s['png']}]({s['png']}) | {s['height']}"
            f"{' (cut)' if s['cut'] else ''} | {s['size']} | {s['images']} | "
            f"{len(s['missing_images'])} | {len(s['unloaded_images'])} | "
            f"{s['inked_fraction']:.3f} |"
            for s in shots
        ],
        "",
    ]
    record = {"machine": started, "shots": shots}
    title = "The release and audit reports, rendered in a browser"
    print(save("report_pages", title, "\n".join(lines), record).read_text())


if __name__ == "__main__":
    main()
