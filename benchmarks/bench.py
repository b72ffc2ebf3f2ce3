"""Every benchmark from one command: list them, run one, or run them all.

    python benchmarks/bench.py                              # the list, with what each needs
    python benchmarks/bench.py small_release --rounds 3     # one, with its own options
    python benchmarks/bench.py --all                        # all that need no option
    python benchmarks/bench.py --results /tmp/trial faults  # results written elsewhere

A benchmark is a script ``benchmarks/<name>.py`` built on ``benchmarks/harness.py``; its
first docstring paragraph says what it measures, a module-level ``TARGETS`` string the
targets it is measured against, and ``NEEDS`` what it needs beyond ``pip install -e .`` (an
option, an extra), which keeps it out of ``--all``.
Each runs as its own process, so no benchmark's imports, threads or numba caches reach
another's, and each writes its own results file (``benchmarks/<name>.md`` and ``.json``,
a dated section added above the earlier runs); ``--results DIR`` writes them to ``DIR``
instead (``$FDPTM_BENCH_RESULTS``), for a trial run that leaves the committed results
alone. ``--all`` goes on after a failure and exits 1 if any failed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import RESULTS_VAR  # noqa: E402

NOT_BENCHMARKS = {"bench", "harness"}


@dataclass(frozen=True)
class Benchmark:
    """What ``benchmarks/<name>.py`` declares: its docstring's first paragraph, and its
    module-level ``NEEDS`` and ``TARGETS`` strings (None where it has none)."""

    summary: str
    needs: str | None
    targets: str | None


def _constant(tree: ast.Module, name: str) -> str | None:
    return next(
        (
            node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ),
        None,
    )


def benchmarks() -> dict[str, Benchmark]:
    """Every benchmark by name, read without importing the scripts."""
    out = {}
    for path in sorted(HERE.glob("*.py")):
        if path.stem in NOT_BENCHMARKS:
            continue
        tree = ast.parse(path.read_text())
        summary = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split())
        out[path.stem] = Benchmark(summary, _constant(tree, "NEEDS"), _constant(tree, "TARGETS"))
    return out


def run(name: str, options: list[str]) -> int:
    print(f"[{time.strftime('%H:%M:%S')}] {name} {' '.join(options)}".rstrip(), flush=True)
    begun = time.perf_counter()
    code = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *options]).returncode
    print(f"[{time.strftime('%H:%M:%S')}] {name}: exit {code}, {time.perf_counter() - begun:.0f} s")
    return code


def main(argv: list[str]) -> int:
    known = benchmarks()
    if argv[:1] == ["--results"] and len(argv) > 1:
        Path(argv[1]).mkdir(parents=True, exist_ok=True)
        os.environ[RESULTS_VAR] = str(Path(argv[1]).resolve())
        argv = argv[2:]
    if not argv:
        width = max(map(len, known))
        for name, b in known.items():
            print(f"{name:<{width}}  {b.summary}" + (f" [needs {b.needs}]" if b.needs else ""))
            if b.targets:
                print(f"{'':<{width}}  targets: {b.targets}")
        return 0
    if argv == ["--all"]:
        failed = [n for n, b in known.items() if not b.needs and run(n, []) != 0]
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1 if failed else 0
    name, options = argv[0], argv[1:]
    if name not in known:
        print(
            f"bench.py: error: no benchmark {name!r}; run `python benchmarks/bench.py` for "
            "the list",
            file=sys.stderr,
        )
        return 2
    return run(name, options)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
