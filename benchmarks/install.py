"""Install benchmark: the README's installs with uv against the same installs with pip.

    python benchmarks/install.py                 # 2 interleaved rounds
    python benchmarks/install.py --rounds 3

Each arm, in each round: a fresh clone of this checkout, a new virtual environment, and a
HOME of its own with empty caches (pip's and uv's), then the two installs the README's
commands make, timed apart: the checkout (``.``, the demo's command) and then its test
extras (``".[test]"``, the test command's, into the same environment, as ``.ci/run`` runs
them one after the other). ``uv``: ``pip install uv`` and ``uv pip install -p .venv
--compile-bytecode`` (the README's commands; the ``pip install uv`` is in its time);
``pip``: ``pip install`` (which compiles the modules too). Both download from the package
registries, so the figures include the network of the day; the arms alternate, the order
rotating every round. Both installers get this process's environment with only HOME,
``XDG_CACHE_HOME`` and the cache variables replaced, as ``.ci/run`` gives them: the
site-wide pip configuration and ``PIP_*`` settings still reach pip.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import Table, rounds  # noqa: E402

TITLE = "Installing fdptm: uv against pip"
TARGETS = "`.ci/run` (install + tests) <= 12 min on this machine (issue 30)"
CHECKOUT = HERE.parent
STEPS = {
    "uv": [
        [".venv/bin/pip", "install", "-q", "uv"],
        [".venv/bin/uv", "pip", "install", "-q", "-p", ".venv", "--compile-bytecode", "{target}"],
    ],
    "pip": [[".venv/bin/pip", "install", "-q", "{target}"]],
}
CACHE_VARS = {"PIP_CACHE_DIR", "UV_CACHE_DIR", "VIRTUAL_ENV"}
TARGETS_INSTALLED = {"checkout": ".", "test extras": ".[test]"}


def install(arm: str) -> dict[str, float]:
    """Seconds of each of the README's two installs, by ``arm``: the first from empty caches,
    the second with what the first left in them."""
    with tempfile.TemporaryDirectory(prefix="fdptm-install-") as tmp:
        root, home = Path(tmp) / "src", Path(tmp) / "home"
        home.mkdir()
        subprocess.run(["git", "clone", "-q", str(CHECKOUT), str(root)], check=True)
        subprocess.run([sys.executable, "-m", "venv", ".venv"], cwd=root, check=True)
        env = {k: v for k, v in os.environ.items() if k not in CACHE_VARS}
        env |= {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
        times = {}
        for name, target in TARGETS_INSTALLED.items():
            start = time.perf_counter()
            for step in STEPS[arm]:
                argv = [part.replace("{target}", target) for part in step]
                done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
                if done.returncode:
                    sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
            times[name] = time.perf_counter() - start
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", help="results path without suffix (default benchmarks/install)")
    args = parser.parse_args()
    table = Table(
        "install",
        TITLE,
        f"{args.rounds} interleaved rounds (see the module docstring); seconds, median "
        "(min-max). Target: " + TARGETS + "; the installs are part of it.",
        ["installer", "checkout (s)", "then its test extras (s)", "both (s)", "both, to pip"],
    )
    runs = rounds(
        STEPS, args.rounds, install, lambda t: ", ".join(f"{k} {v:.0f} s" for k, v in t.items())
    )
    both = {arm: [sum(t.values()) for t in runs[arm]] for arm in runs}
    for arm, times in runs.items():
        cells = []
        for name in (*TARGETS_INSTALLED, None):
            values = both[arm] if name is None else [t[name] for t in times]
            cells.append(f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})")
        ratio = statistics.median(both[arm]) / statistics.median(both["pip"])
        table.add(arm, *cells, f"{ratio:.2f}")
    print(table.write(args.out))


if __name__ == "__main__":
    main()
