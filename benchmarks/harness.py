"""The benchmarks' shared harness: interleaved arms, fresh processes, the machine, one results file.

Every benchmark builds on these pieces instead of its own copy of them:

* ``rounds``/``compare``: run every arm ``n`` times with the order rotating each round (the
  machine is shared and noisy, so the arms meet the same load), a progress line per round;
* ``clean_env``/``fdptm``/``first_tweets``/``measure``: a ``fdptm`` command as a fresh
  process (outside the checkout, with no inherited ``FDPTM_``/``PREFECT_`` settings) on a
  small real corpus, and the CPU and memory of its process tree;
* ``pheme_corpus``/``scale_corpus``/``train_dp_vi``: PHEME's clean tweets as a ``Corpus``,
  the scale benchmark's synthetic corpus, and an M2-alone ``dp-vi`` training on it;
* ``machine``/``code_version``/``at_start``: the CPU, cores, package versions, load, the
  code measured and the command; ``one_thread`` for scripts whose workers run on one core;
* ``Table``/``save``/``checkpoint``: the results as ``benchmarks/<name>.md`` (and the run's
  record as ``.json``; ``stem`` says where, ``$FDPTM_BENCH_RESULTS`` moves a trial run
  elsewhere). The markdown keeps its history: a run adds a dated section under the title,
  above the earlier runs and the notes written about them, so nothing measured is lost;
  ``filled`` completes a record written before the harness for a re-render.

``benchmarks/bench.py`` lists the benchmarks and runs one or all of them.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TypeVar

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "data"
PHEME_RAW = SHARED / "pheme" / "pheme_raw.json"
PACKAGES = (
    "numba",
    "numpy",
    "scipy",
    "opendp",
    "cryptography",
    "prefect",
    "duckdb",
    "gensim",
    "tomotopy",
    "dp-accounting",
    "uvicorn",
    "uvloop",
    "httptools",
)
RESULTS_VAR = "FDPTM_BENCH_RESULTS"  # a folder for the results instead of benchmarks/
T = TypeVar("T")


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rounds(
    arms: Iterable[str],
    n: int,
    run: Callable[[str], T],
    show: Callable[[T], str] = lambda value: f"{value:.2f} s",
) -> dict[str, list[T]]:
    """``run(arm)`` for every arm in ``n`` rounds, the order rotating every round."""
    names = list(arms)
    out: dict[str, list[T]] = {name: [] for name in names}
    for r in range(n):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            out[name].append(run(name))
        print(
            f"[{time.strftime('%H:%M:%S')}] round {r + 1}/{n}: "
            + ", ".join(f"{name} {show(out[name][-1])}" for name in names),
            flush=True,
        )
    return out


def compare(arms: dict[str, Callable[[], object]], n: int) -> dict[str, float]:
    """Median seconds of each arm over ``n`` interleaved rounds."""
    times = rounds(arms, n, lambda name: seconds(arms[name]))
    return {name: statistics.median(t) for name, t in times.items()}


def clean_env(
    workspace: Path | None = None, home: Path | None = None, **values: str
) -> dict[str, str]:
    """This process's environment without ``FDPTM_``/``PREFECT_`` settings, plus ``values``.

    ``workspace`` and ``home`` set ``FDPTM_WORKSPACE`` and ``PREFECT_HOME``, so a benchmark's
    processes never touch the user's workspace or Prefect profile.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FDPTM_", "PREFECT_"))}
    if workspace is not None:
        env["FDPTM_WORKSPACE"] = str(workspace)
    if home is not None:
        env["PREFECT_HOME"] = str(home)
    return env | values


def fdptm(
    *argv: str, env: dict[str, str], python: str = sys.executable, check: bool = True
) -> subprocess.CompletedProcess:
    """``fdptm argv`` as a fresh process, run from the temporary directory: the ``fdptm``
    script installed beside ``python`` (what a user runs: it hands a command to a running
    ``fdptm serve`` before importing the command line), else ``python -m fdptm.cli`` (which
    every version has).

    Not from the checkout: there ``-m`` would import the checkout's ``fdptm`` whatever
    ``python`` is, and a baseline interpreter must import its own.
    """
    done = subprocess.run(
        [*fdptm_argv(python), *argv],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"fdptm {argv[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done


def fdptm_argv(python: str = sys.executable) -> list[str]:
    """How ``fdptm`` runs with ``python``'s installation (``fdptm``'s docstring)."""
    script = Path(python).parent / "fdptm"
    return [str(script)] if script.exists() else [python, "-m", "fdptm.cli"]


def first_tweets(path: Path, n: int = 100) -> Path:
    """The first ``n`` PHEME tweets as a JSON-lines corpus at ``path`` (document level)."""
    texts = json.loads(PHEME_RAW.read_text())["text"][:n]
    path.write_text(
        "".join(json.dumps({"doc_id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    return path


def _tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def _tree_usage(root: int) -> tuple[float, float]:
    """(CPU seconds, resident MiB) of ``root``'s process tree: user + system of the live
    processes plus what their reaped children used."""
    ticks = pages = 0
    for pid in _tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        pages += int(fields[21])
    return ticks / os.sysconf("SC_CLK_TCK"), pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@dataclass
class Measured:
    """A command's wall time, its process tree's samples (epoch time, CPU s, RSS MiB), stdout."""

    wall: float
    samples: list[tuple[float, float, float]]
    stdout: str

    @property
    def peak_mib(self) -> float:
        return max((rss for _, _, rss in self.samples), default=0.0)

    @property
    def cpu(self) -> float:
        return self.samples[-1][1] if self.samples else float("nan")


def measure(
    command: list[str], env: dict[str, str], root: int | None = None, interval: float = 0.1
) -> Measured:
    """Run ``command`` to its end, sampling a process tree's CPU and memory every ``interval``.

    The tree is the command's own, or ``root``'s (a server the command hands its work to:
    then the peak includes the idle server, an upper bound of the work's own).
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        begun = time.perf_counter()  # output to files: a full pipe would stall the command
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=err, text=True)
        samples = []
        while proc.poll() is None:
            samples.append((time.time(), *_tree_usage(root or proc.pid)))
            time.sleep(interval)
        wall = time.perf_counter() - begun
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command[:3])} failed ({proc.returncode}): {err.read()[-2000:]}"
            )
        return Measured(wall, samples, out.read())


def code_version() -> str:
    """The checkout's commit, and which tracked files differed from it (the code measured)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            env=os.environ | {"GIT_OPTIONAL_LOCKS": "0"},
        ).stdout.strip()

    dirty = git("diff", "--name-only", "HEAD").split()
    return git("rev-parse", "--short", "HEAD") + (
        f" with uncommitted changes to {', '.join(dirty)}" if dirty else ""
    )


def machine() -> dict:
    """CPU, cores, Python, package versions, the code, the date and the 1-minute load."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )

    def installed(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "not installed"

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "os": platform.platform(),
        "versions": {p: installed(p) for p in PACKAGES},
        "code": code_version(),
        "load": os.getloadavg()[0],
    }


def command() -> str:
    """The command that is running, as typed from the checkout's root."""
    script = Path(sys.argv[0]).name
    return " ".join([f"python benchmarks/{script}", *sys.argv[1:]])


def header(started: dict, ended: dict) -> str:
    """The line under a run's heading: command, date, machine, code, load."""
    m = started
    load = f"load average (1 min) {m['load']:.2f} at the start, {ended['load']:.2f} at the end"
    versions = " · ".join(f"{k} {v}" for k, v in m["versions"].items())
    return (
        f"Command: `{m['command']}` · {m['date']} · {m['cores']} cores ({m['cpu']}) · "
        f"Python {m['python']} · code {m['code']} · {versions} · {load}"
    )


def at_start() -> dict:
    """The machine and the command at the start of a run (the record's ``machine``)."""
    return machine() | {"command": command()}


def stem(name: str, out: str | Path | None = None) -> Path:
    """Where ``save(name, ..., out)`` writes (without the suffix): ``out``, else
    ``<$FDPTM_BENCH_RESULTS or benchmarks/>/<name>``; a ``--render`` reads the record there."""
    if out is not None:
        return Path(out)
    return Path(os.environ.get(RESULTS_VAR) or HERE) / name


def checkpoint(name: str, record: dict, out: str | Path | None = None) -> None:
    """Write ``<out>.json`` alone: a long run's record so far, which a crash does not lose
    (written beside it and renamed over it, so a crash mid-write keeps the previous one)."""
    path = stem(name, out).with_suffix(".json")
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(record, indent=1, default=str) + "\n")
    os.replace(partial, path)


def filled(record: dict, start_load: object = None, end_load: object = None) -> dict:
    """``record`` with the ``machine`` (and ``end``) keys ``save``'s header reads, for a
    record written before the harness (a ``--render`` of it): what its machine lacks comes
    from its top level (``command``, ``code``) or is marked unknown; the loads at the start
    and the end are ``start_load`` and ``end_load`` (a number or /proc/loadavg's text; nan
    when the record has none). A harness record is returned as it is."""
    m = record["machine"]
    if "versions" in m and "command" in m:
        return record

    def load(value: object) -> float:
        try:
            return float(str(value).split()[0])
        except (ValueError, IndexError):
            return math.nan

    unknown = {"date": "?", "cpu": "?", "cores": "?", "python": "?"}
    unknown["versions"] = {"package versions": "not recorded"}
    told = {"code": record.get("code", "not recorded")}
    told["command"] = record.get("command", "not recorded")
    record["machine"] = unknown | told | m | {"load": load(start_load)}
    record.setdefault("end", {"load": load(end_load)})
    return record


def one_thread() -> None:
    """Numba, OpenMP and BLAS on one thread per process, unless the environment says
    otherwise, and numba's fork-safe threading layer (GNU OpenMP dies in a forked worker).
    For a benchmark run as a script, before anything imports numpy or numba: numba refuses
    a thread count changed once its threads have started."""
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("NUMBA_THREADING_LAYER", "forksafe")


def save(
    name: str,
    title: str,
    body: str,
    record: dict,
    out: str | Path | None = None,
    again: bool = False,
) -> Path:
    """Write a run: ``<out>.json`` is ``record``; ``<out>.md`` gains a dated section.

    ``out`` defaults to ``benchmarks/<name>`` (``$FDPTM_BENCH_RESULTS/<name>`` when set: a
    trial run that leaves the committed results alone). The section (``## Run of <date>
    (<cpu>)``, the header line, then ``body``, whose own headings start at ``###``) goes
    under the file's title and above the runs before it, which stay as they were with the
    notes written about them; a file whose first section has no heading gets one (``##
    Earlier run``, its headings one level down) so the two are not read as one. ``again``
    replaces the newest section instead (the same run's record rendered anew).
    """
    where = stem(name, out)
    m = record["machine"]
    ended = record.setdefault("end", machine())
    section = "\n".join(
        [f"## Run of {m['date']} ({m['cpu']})", "", header(m, ended), "", body.strip(), ""]
    )
    md = where.with_suffix(".md")
    earlier = ""
    if md.exists():
        text = md.read_text()
        first, _, rest = text.partition("\n")
        earlier = rest.strip() if first.startswith("# ") else text.strip()
        if again and earlier.startswith("## Run of "):
            earlier = earlier.partition("\n## ")[2]
            earlier = "## " + earlier if earlier else ""
        if earlier and not earlier.startswith("## "):
            earlier = "## Earlier run\n\n" + _demoted(earlier)
    md.write_text(f"# {title}\n\n{section}" + (f"\n{earlier}\n" if earlier else ""))
    checkpoint(name, record, out)
    return md


def _demoted(markdown: str) -> str:
    """Every heading of ``markdown`` one level down (outside code blocks)."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        fenced ^= line.startswith("```")
        lines.append("#" + line if not fenced and line.startswith("#") else line)
    return "\n".join(lines)


@dataclass
class Table:
    """One run's results as a table: its title, notes, columns and rows."""

    name: str
    title: str
    notes: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    started: dict = field(default_factory=at_start)

    def add(self, *cells: object) -> None:
        self.rows.append(list(cells))

    def markdown(self) -> str:
        lines = [
            self.notes.strip(),
            "",
            "| " + " | ".join(self.columns) + " |",
            "|" + "---|" * len(self.columns),
        ]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines)

    def write(self, out: str | Path | None = None) -> Path:
        """The run as a section of ``benchmarks/<name>.md`` (see ``save``)."""
        record = {"machine": self.started, "columns": self.columns, "rows": self.rows}
        return save(self.name, self.title, self.markdown(), record, out)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def baseline_kernel(checkout: Path, name: str):
    """Another checkout's ``src/fdptm/kernels/<name>.py`` as a module of its own
    (``baseline_<name>``), for benchmarks that time both checkouts' kernels in one process:
    a kernel module imports numpy, numba and math only."""
    import importlib.util

    path = Path(checkout) / "src" / "fdptm" / "kernels" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"baseline_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # numba's cache finds its functions' module by name
    spec.loader.exec_module(module)
    return module


def scale_corpus(docs: int, seed: int = 0, topics: int = 10) -> tuple:
    """The scale benchmark's synthetic corpus (``benchmarks/scale.py``) and its true topics.

    ``topics`` (10 there) topics over 3,000 words (eta 0.05, alpha 0.1), about 16 tokens
    per document, one document per unit; ``seed`` draws the topics.
    """
    import numpy as np

    from fdptm.evaluation.synthetic import generate_lda

    phi = np.random.default_rng(seed).dirichlet(np.full(3000, 0.05), size=topics)
    return generate_lda(docs, 3000, topics, doc_length=16, seed=1, phi=phi).corpus, phi


def train_dp_vi(corpus, phi, epsilon: float, seed: int | None = None, **options) -> dict:
    """M2 alone (``train_dp_vi``, document level, delta 1e-6, k 10, T 20 unless ``options``).

    Returns the wall seconds, the matched cosine to ``phi`` and the noise multiplier; ``seed``
    None is production noise.
    """
    from fdptm.evaluation.matching import matched_distance
    from fdptm.mechanisms import dp_vi
    from fdptm.privacy.adjacency import Adjacency
    from fdptm.privacy.noise import NoiseSource

    params = dp_vi.dp_vi_params(
        epsilon,
        1e-6,
        n_topics=phi.shape[0],
        adjacency=Adjacency.DOCUMENT,
        max_docs_per_author=1,
        **{"iterations": 20} | options,
    )
    begun = time.perf_counter()
    estimate = dp_vi.train_dp_vi(corpus, phi.shape[0], params, NoiseSource.create(seed))
    wall = time.perf_counter() - begun
    cosine = matched_distance(estimate, phi).cosine
    return {"wall": wall, "cosine": cosine, "z": params.noise_multiplier}


def pheme_corpus() -> tuple:
    """PHEME's clean tweets (the paper's preprocessing) as token lists and as a ``Corpus``
    over every word in them; empty tweets dropped."""
    import numpy as np

    from fdptm.mechanisms.lda import Corpus

    texts = json.loads((SHARED / "pheme" / "pheme_clean.json").read_text())["text"]
    docs = [d for d in (t.split() for t in texts) if d]
    vocab = {w: i for i, w in enumerate(sorted({w for d in docs for w in d}))}
    words = np.array([vocab[w] for d in docs for w in d], dtype=np.int32)
    ptr = np.zeros(len(docs) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(d) for d in docs])
    return docs, Corpus(ptr, words, len(vocab))
