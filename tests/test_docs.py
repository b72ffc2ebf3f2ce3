"""The manual (docs/, mkdocs.yml) is tested: it builds with ``mkdocs build --strict``, and every
command and Python example in it runs.

Convention for the fenced code blocks of ``docs/**/*.md``:

* A block tagged ``bash``, ``console`` or ``python`` is an example, and it is run: bash blocks
  by ``bash -e -o pipefail`` (a console block: its ``$ `` lines), Python blocks by the test's
  interpreter in a subprocess. ``fdptm`` and ``python`` resolve to this environment's console
  scripts (its ``bin`` folder first on ``PATH``).
* The blocks of one page run in order, in one temporary directory that is their working
  directory, with ``HOME`` a fresh folder in it, ``FDPTM_WORKSPACE`` its ``fdptm-workspace``
  (the default a reader gets in that directory) and ``PREFECT_API_URL`` the test session's
  Prefect API, so later blocks use what earlier ones made.
* HTML comments right before a block (only blank lines between) qualify it:
  ``<!-- not-run: REASON -->``: the block is not run, and REASON says why (it must);
  ``<!-- exit: N -->``: the block must exit with N (default 0);
  ``<!-- expect: TEXT -->``: TEXT must appear in its output (stdout and stderr); a comment
  ``<!-- expect:`` followed by one TEXT per line and ``-->`` expects each line.
* Every other block (``text`` for outputs and diagrams, ``json``, ``yaml``, ...) is shown,
  not run, and must not look like a command (so no example hides from the test).

Outputs shown on the site are real (pasted from a run); the test checks exit codes and the
``expect`` texts, which are chosen to be stable, never noisy numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUN = {"bash", "console", "python"}
SHOWN = {"text", "json", "yaml", "toml", "html", ""}
TIMEOUT = 600
# How many blocks may be exempt: the exceptions are meant to stay few (each gives its reason).
MAX_NOT_RUN = 12
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<info>[^`]*)$")
COMMENT = re.compile(r"<!--\s*(?P<key>[a-z-]+):(?P<value>.*?)-->", re.S)
# A page that starts its own `fdptm serve` (docs/how-to/serve.md) gets a socket directory of
# its own, apart from the one the other pages' commands are handed to (``release_process``).
OWN_SERVER = "fdptm serve --detach"
# FDPTM_DOCS_SERVE=0: every example in a fresh process, as a reader runs it (slower: about
# 330 s of examples instead of 100 s here), to check that nothing differs when served.
SERVED = os.environ.get("FDPTM_DOCS_SERVE", "1") != "0"
# Pages run side by side (their blocks in order, each page in its own directory): most of an
# example's time is a fresh process importing the stack, which a second core halves.
JOBS = int(os.environ.get("FDPTM_DOCS_JOBS", "2"))
LOOKS_LIKE_A_COMMAND = re.compile(r"^\s*(\$ |fdptm |python3? |pip |prefect |mkdocs )")


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    not_run: str | None = None
    exit: int = 0
    expect: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def script(self) -> str:
        if self.lang != "console":
            return self.code
        commands, continued = [], False
        for line in self.code.splitlines():
            if line.startswith("$ ") or continued:
                text = line[2:] if line.startswith("$ ") and not continued else line
                commands.append(text)
                continued = text.rstrip().endswith("\\")
        return "\n".join(commands) + "\n"


def parse(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, with the comments that qualify them."""
    page = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        lang = opening.group("info").strip().split(" ")[0].lower()
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^[ \t]*{fence}\s*$", lines[j]):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        assert j < len(lines), f"{page}:{i + 1}: unclosed code block"
        block = Block(page, i + 1, lang, "\n".join(body) + "\n")
        _qualify(block, lines[:i])
        blocks.append(block)
        i = j + 1
    return blocks


def _qualify(block: Block, before: list[str]) -> None:
    """Read the HTML comments right above the block (blank lines may separate them)."""
    end = len(before)
    while True:
        while end > 0 and not before[end - 1].strip():
            end -= 1
        if end == 0 or not before[end - 1].rstrip().endswith("-->"):
            return
        start = end - 1
        while start > 0 and "<!--" not in before[start]:
            start -= 1
        comment = COMMENT.fullmatch("\n".join(before[start:end]).strip())
        if comment is None:
            return
        _apply(block, comment.group("key"), comment.group("value"))
        end = start


def _apply(block: Block, key: str, value: str) -> None:
    if key == "not-run":
        block.not_run = value.strip()
    elif key == "exit":
        block.exit = int(value.strip())
    elif key == "expect":
        block.expect += [line.strip() for line in value.strip().splitlines() if line.strip()]
    else:
        raise AssertionError(f"{block.where}: unknown comment {key!r}")


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in parse(page)]


def runnable_pages() -> list[str]:
    return [
        page.relative_to(ROOT).as_posix()
        for page in pages()
        if any(b.lang in RUN and b.not_run is None for b in parse(page))
    ]


def environment(
    directory: Path, api_url: str | None, sockets: Path | None = None
) -> dict[str, str]:
    """A page's environment; ``sockets``: the directory of the ``fdptm serve`` its commands
    are handed to (None: they run in their own processes)."""
    home = directory / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)
    env["FDPTM_WORKSPACE"] = str(directory / "fdptm-workspace")
    env.pop("PYTHONPATH", None)
    # pages run side by side (JOBS): one thread each, rather than each claiming every core
    env.setdefault("FDPTM_THREADS", str(max(1, (os.cpu_count() or 1) // JOBS)))
    if api_url:
        env["PREFECT_API_URL"] = api_url
    env["FDPTM_SERVE"] = "on" if sockets else "off"
    if sockets:
        env["FDPTM_SERVE_DIR"] = str(sockets)
    return env


def run_block(block: Block, directory: Path, env: dict[str, str]) -> tuple[int, str, float]:
    """Run one block in ``directory``: its exit code, its output and how long it took."""
    if block.lang == "python":
        script = directory / f"block_{block.line}.py"
        script.write_text(block.code, encoding="utf-8")
        command = [sys.executable, script.name]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", block.script()]
    start = time.monotonic()
    done = subprocess.run(
        command,
        cwd=directory,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def check(block: Block, code: int, output: str) -> None:
    shown = f"{block.where} ({block.lang}) exited {code}; output:\n{output}"
    assert code == block.exit, shown
    assert "Traceback (most recent call last)" not in output, shown
    for text in block.expect:
        assert text in output, f"{block.where}: {text!r} not in the output:\n{output}"


# --- the convention itself ------------------------------------------------------------------


def test_every_example_is_run_or_says_why_not():
    blocks = all_blocks()
    assert blocks, "no code blocks found under docs/"
    exempt = [b for b in blocks if b.not_run is not None]
    for block in exempt:
        assert block.lang in RUN, f"{block.where}: not-run on a {block.lang!r} block"
        assert len(block.not_run) >= 10, f"{block.where}: not-run needs its reason"
    assert len(exempt) <= MAX_NOT_RUN, [f"{b.where}: {b.not_run}" for b in exempt]
    for block in blocks:
        if block.lang in RUN:
            continue
        assert block.lang in SHOWN, f"{block.where}: tag {block.lang!r} (run: {sorted(RUN)})"
        assert not block.expect and block.exit == 0, f"{block.where}: expect/exit on a shown block"
        commands = [line for line in block.code.splitlines() if LOOKS_LIKE_A_COMMAND.match(line)]
        assert not commands, f"{block.where}: a command in a {block.lang!r} block: {commands}"


def test_the_readme_is_short_and_its_links_into_the_docs_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", readme)
    local = [t for t in targets if not re.match(r"^[a-z]+:", t)]
    assert any(t.startswith("docs/") for t in local)
    for target in local:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_site_builds_strictly(tmp_path):
    """Warnings are errors: a broken link or anchor, a docstring mkdocstrings cannot render,
    a page missing from the nav's files, the CLI reference's hook failing."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cli = (tmp_path / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    # generated from the parser and the request model: a subcommand of `fdptm local`, and a
    # release option whose default comes from ReleaseRequest
    assert "fdptm local randomize" in cli and "--m1-fraction" in cli
    assert "yes (request model)" in cli
    api = (tmp_path / "reference" / "python-api" / "index.html").read_text(encoding="utf-8")
    assert "fdptm.request.ReleaseRequest" in api and "load_release" in api


# --- the examples ---------------------------------------------------------------------------


@dataclass
class Ran:
    block: Block
    code: int
    output: str
    seconds: float


def run_page(
    page: str, directory: Path, api_url: str | None, sockets: Path | None = None
) -> list[Ran]:
    """Run a page's examples in order; stop at the first that fails (later ones use it)."""
    own = sockets is not None and OWN_SERVER in (ROOT / page).read_text(encoding="utf-8")
    if own:
        sockets = directory / "own-sockets"  # the page starts and stops its own server
        sockets.mkdir(mode=0o700)
    env = environment(directory, api_url, sockets)
    ran: list[Ran] = []
    try:
        for block in parse(ROOT / page):
            if block.lang not in RUN or block.not_run is not None:
                continue
            try:
                ran.append(Ran(block, *run_block(block, directory, env)))
            except subprocess.TimeoutExpired as exc:
                ran.append(Ran(block, -1, f"timed out after {exc.timeout} s", exc.timeout))
            try:
                check(block, ran[-1].code, ran[-1].output)
            except AssertionError:
                break
    finally:
        if own:  # a page that failed before its own `fdptm serve --stop` leaves none behind
            subprocess.run(
                ["fdptm", "serve", "--stop"], cwd=directory, env=env, capture_output=True
            )
    return ran


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


HEAVY = re.compile(r"fdptm (demo|release|audit|backfill|compare|ingest|report|local)|^import", re.M)


def cost(page: str) -> int:
    """A rough cost of a page's examples: how many processes that import the whole stack."""
    blocks = [b for b in parse(ROOT / page) if b.lang in RUN and b.not_run is None]
    return sum(len(HEAVY.findall(b.code)) for b in blocks)


@contextmanager
def release_process(directory: Path, api_url: str | None) -> Iterator[Path]:
    """A ``fdptm serve`` for the pages' commands (``docs/how-to/serve.md``): each runs in a
    fork of one warm process instead of a fresh one, which is most of an example's time.
    The code a served command runs is the CLI's, in a process of its own, with the page's
    environment and directory (tests/test_serve.py); fresh processes are what the rest of
    the suite and the README's demo in CI run. Yields its socket directory."""
    sockets = directory / "sockets"
    sockets.mkdir(mode=0o700)
    env = environment(directory, api_url, sockets)
    started = subprocess.run(
        ["fdptm", "serve", "--detach"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield sockets
    finally:
        stopped = subprocess.run(
            ["fdptm", "serve", "--stop"], cwd=directory, env=env, capture_output=True
        )
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@contextmanager
def _no_release_process(directory: Path, api_url: str | None) -> Iterator[None]:
    yield None


@pytest.fixture(scope="module")
def page_runs(prefect_harness, tmp_path_factory) -> dict[str, list[Ran]]:
    from concurrent.futures import ThreadPoolExecutor

    from prefect.settings import PREFECT_API_URL

    api_url = PREFECT_API_URL.value()
    cpu = _children_cpu()
    # the costliest pages first, so that the workers finish together
    pages = sorted(runnable_pages(), key=lambda page: -cost(page))
    start = time.monotonic()
    serving = release_process if SERVED else _no_release_process
    with (
        serving(tmp_path_factory.mktemp("serve"), api_url) as sockets,
        ThreadPoolExecutor(max_workers=JOBS) as pool,
    ):
        futures = {
            page: pool.submit(run_page, page, tmp_path_factory.mktemp("docs"), api_url, sockets)
            for page in pages
        }
        runs = {page: future.result() for page, future in futures.items()}
    print(
        f"\nthe manual's examples: {time.monotonic() - start:.1f} s with {JOBS} workers, "
        f"{_children_cpu() - cpu:.1f} s of CPU in their processes"
    )
    for page in pages:
        for ran in runs[page]:
            print(f"  {ran.block.where:40} {ran.seconds:6.1f} s")
    return runs


@pytest.mark.parametrize("page", runnable_pages())
def test_the_examples_of_a_page_run(page, page_runs):
    runs = page_runs[page]
    for ran in runs:
        check(ran.block, ran.code, ran.output)
    expected = [b for b in parse(ROOT / page) if b.lang in RUN and b.not_run is None]
    assert [r.block.line for r in runs] == [b.line for b in expected]


if __name__ == "__main__":
    # python tests/test_docs.py docs/PAGE.md: run a page's examples and print their output
    # (to paste real output into the page); PREFECT_API_URL from the environment
    import tempfile

    for name in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            page = Path(name).resolve().relative_to(ROOT).as_posix()
            for ran in run_page(page, Path(tmp), os.environ.get("PREFECT_API_URL")):
                print(f"===== {ran.block.where} exit {ran.code} ({ran.seconds:.1f} s)")
                print(ran.output)
                check(ran.block, ran.code, ran.output)
