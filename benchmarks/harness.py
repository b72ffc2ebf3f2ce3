"""The benchmarks' shared harness: interleaved arms, medians, the machine, one results table.

A benchmark declares its arms (name -> callable) per row and calls ``compare``; the harness
runs every arm ``rounds`` times with the order rotating each round (the machine is shared
and noisy, so arms meet the same load), keeps the medians, and ``write`` renders one
markdown table with the command, the machine, the date and the load, next to a JSON copy.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

HERE = Path(__file__).resolve().parent
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
)


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(arms: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each arm over ``rounds`` rounds, the order rotating every round."""
    names = list(arms)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(seconds(arms[name]))
    return {name: statistics.median(t) for name, t in times.items()}


def machine() -> dict:
    """CPU, cores, Python, package versions, date and the 1-minute load average."""
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
        "load": os.getloadavg()[0],
    }


@dataclass
class Table:
    """One benchmark's results: its title, command, notes, columns and rows."""

    name: str
    title: str
    command: str
    notes: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    started: dict = field(default_factory=machine)

    def add(self, *cells: object) -> None:
        self.rows.append(list(cells))

    def write(self) -> Path:
        """benchmarks/<name>.md (and .json), with the machine and the load at both ends."""
        end = machine()
        m = self.started
        versions = " · ".join(f"{k} {v}" for k, v in m["versions"].items())
        lines = [
            f"# {self.title}",
            "",
            f"Command: `{self.command}` · {m['date']} · {m['cores']} cores ({m['cpu']}) · "
            f"Python {m['python']} · {versions} · load average (1 min) {m['load']:.2f} at the "
            f"start, {end['load']:.2f} at the end",
            "",
            self.notes.strip(),
            "",
            "| " + " | ".join(self.columns) + " |",
            "|" + "---|" * len(self.columns),
        ]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in self.rows]
        path = HERE / f"{self.name}.md"
        path.write_text("\n".join(lines) + "\n")
        record = {"machine": m, "end": end, "columns": self.columns, "rows": self.rows}
        path.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str) + "\n")
        return path


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
