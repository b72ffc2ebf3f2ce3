"""The test suite's cost: its wall time, how busy the cores were, and the CPU seconds of every
process it starts, by kind (pytest's workers, fdptm commands, served commands, Prefect's API
servers and workers, PostgreSQL, worker pools, ...).

    python benchmarks/suite.py                          # the whole suite, as the README runs it
    python benchmarks/suite.py --python /clone/.venv/bin/python --checkout /clone
    python benchmarks/suite.py -- -k ledger             # pytest options after --
    python benchmarks/suite.py --per-test               # serially, the CPU of each test

Why: the suite runs on every core (pytest-xdist), so once the cores are full its wall time
is its CPU time over the cores, and only less CPU makes it faster. This says where the CPU
goes. The target (issue 30) is for ``.ci/run``, install and tests together; this measures
the tests, the part ``.ci/run`` runs last, with the README's command (``python -m pytest``
from the checkout, its ``addopts``).

How. The run is ``PYTHON -m pytest --durations=15 [OPTIONS]`` in ``CHECKOUT``. While it runs,
/proc is read every quarter second: a process started after the run began is followed when
it is pytest itself, or its parent (the same pid and start time: pids are reused) is
followed, or its environment carries the run's marker (a served command's or a detached
server's parent is gone by the time it is seen); its user and system CPU and its command
line are kept as last read. A process's CPU after its last reading, and a process that
lives less than a quarter second, are missed, so the table also gives the whole machine's
busy CPU in the same interval (/proc/stat): the rows' total over it is how much was seen.
A fork is told from its parent by its parent (same command line): a forked ``fdptm serve``
child is a served command, a forked pytest worker is a test's own fork.

``--per-test`` runs the tests one at a time (``-n0``) with the ``per_test_cpu`` plugin,
and adds the tests and the files that cost the most machine CPU (``per_test_cpu``'s
docstring says why the machine's): the whole suite then takes about 1.5 times as long.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import Table, save  # noqa: E402

TITLE = "The test suite: wall time and CPU by process kind"
TARGETS = "`.ci/run` (install + tests) <= 12 min on this machine (issue 30)"
NEEDS = "the test extra (pip install -e '.[test]') and ../shared, as the suite"
MARKER = "FDPTM_SUITE_RUN"
INTERVAL = 0.25
TICK = os.sysconf("SC_CLK_TCK")
KINDS = (  # (kind, pattern of the command line), the first that matches
    ("temporary Prefect API server (fdptm)", r"-m fdptm\.flows\.api_server"),
    ("Prefect test server (prefect_test_harness)", r"uvicorn .*prefect\.server\.api\.server"),
    ("prefect server start", r"prefect server start"),
    ("Prefect workers and their flow runs", r"prefect worker|prefect\.runner|prefect\.engine"),
    ("prefect CLI (deploy, work-pool)", r"bin/prefect "),
    ("pytest worker (xdist)", r"-c import sys;exec\(eval\(sys\.stdin\.readline\(\)\)\)"),
    ("pytest (the controlling process)", r"-m pytest"),
    ("mkdocs build", r"-m mkdocs"),
    ("Python example of the manual", r"block_\d+\.py"),
    ("worker pools (multiprocessing, loky, Dask)", r"multiprocessing|loky|distributed|dask"),
    ("PostgreSQL", r"postgres"),
    ("S3 server (moto)", r"moto"),
    ("python -c (a test's script)", r"python[\d.]* (-\w+ )*-c "),
    ("shell", r"^(/usr)?(/bin/)?(ba)?sh "),
)


def _fdptm_command(cmdline: str) -> str | None:
    """``fdptm SUBCOMMAND`` for an fdptm command line (script, ``-m fdptm`` or
    ``-m fdptm.cli``), else None."""
    found = re.search(r"(?:bin/fdptm|-m fdptm(?:\.cli)?)\s+(\S+)", cmdline)
    if found is None:
        return None
    word = found.group(1)
    return f"fdptm {word}" if not word.startswith("-") else "fdptm (other)"


def kind(cmdline: str, parent_cmdline: str | None) -> str:
    """The row a process counts under; a fork (its parent has the same command line) is
    named for what forked it."""
    if parent_cmdline == cmdline:
        if _fdptm_command(cmdline) == "fdptm serve":
            return "served fdptm command (a fork of fdptm serve)"
        return f"fork of: {kind(cmdline, None)}"
    command = _fdptm_command(cmdline)
    if command is not None:
        return command
    for name, pattern in KINDS:
        if re.search(pattern, cmdline):
            return name
    return "other"


def _stat(pid: int) -> tuple[int, int, float] | None:
    """(parent pid, start time in clock ticks since boot, CPU seconds) of ``pid`` from
    /proc, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / TICK


def _read(path: str) -> bytes:
    """A /proc file's bytes; empty when the process is gone or not ours to read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace")


def _busy() -> tuple[int, int]:
    """(busy ticks, all ticks) of the whole machine since boot (/proc/stat's cpu line:
    user, nice, system, idle, iowait, irq, softirq, steal; guest time is inside user)."""
    values = [int(v) for v in _read("/proc/stat").split(b"\n", 1)[0].split()[1:9]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


Key = tuple[int, int]
"""A process: its pid and its start time (a pid is reused once its process is gone)."""


@dataclass
class Seen:
    """A followed process: what it runs, its parent, and its CPU seconds as last read."""

    cmd: str
    parent: Key | None
    cpu: float


class Watch:
    """Follows the processes of the run rooted at ``root`` that started at or after
    ``since`` (clock ticks since boot), until ``done`` is set."""

    def __init__(self, root: int, token: str, since: int) -> None:
        found = _stat(root)
        self.root: Key | None = (root, found[1]) if found else None
        self.since = since
        self._marker = f"{MARKER}={token}".encode()
        self.seen: dict[Key, Seen] = {}
        self.done = threading.Event()

    def run(self) -> None:
        """Poll every ``INTERVAL`` seconds until ``done``, then once more."""
        while not self.done.is_set():
            self.poll()
            time.sleep(INTERVAL)
        self.poll()

    def poll(self) -> None:
        """One pass over /proc: new processes of the run are added, known ones get their CPU
        and command line read again (a fork seen before it ran its own program has its
        parent's command line until then)."""
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            got = _stat(int(name))
            if got is None:
                continue
            parent_pid, started, cpu = got
            key = (int(name), started)
            known = self.seen.get(key)
            if known is not None:
                known.cpu = cpu
                known.cmd = _cmdline(key[0]) or known.cmd
                continue
            if started < self.since:
                continue
            up = _stat(parent_pid)
            parent = (parent_pid, up[1]) if up and up[1] <= started else None
            mine = key == self.root or parent in self.seen
            if not mine and self._marker not in _read(f"/proc/{name}/environ").split(b"\0"):
                continue
            self.seen[key] = Seen(_cmdline(key[0]), parent, cpu)

    def by_kind(self) -> dict[str, list[float]]:
        """Per kind: how many processes and their CPU seconds."""
        out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for process in self.seen.values():
            up = self.seen.get(process.parent) if process.parent else None
            row = out[kind(process.cmd, up.cmd if up else None)]
            row[0] += 1
            row[1] += process.cpu
        return out


def _start_ticks() -> int:
    """Now, in /proc's process start-time unit (clock ticks since boot)."""
    uptime = float(_read("/proc/uptime").split()[0])
    return int(uptime * TICK) - 1


def slowest(output: str) -> list[tuple[float, str, str]]:
    """pytest's ``--durations`` lines: (seconds, phase, test)."""
    found = re.findall(r"^([\d.]+)s (setup|call|teardown)\s+(.+)$", output, re.M)
    return [(float(s), phase, test) for s, phase, test in found]


def costliest(tests: list[dict], top: int = 25) -> str:
    """Markdown: the tests, then the test files, that cost the most machine CPU."""
    cpu = sum(t["cpu"] for t in tests)
    lines = [
        f"\n\nEach test's machine CPU in this serial run ({len(tests)} tests, {cpu:,.0f} s "
        f"of CPU in them; `benchmarks/per_test_cpu.py`), the {top} costliest:\n",
        "| CPU s | wall s | test |",
        "|---|---|---|",
    ]
    lines += [
        f"| {t['cpu']:.1f} | {t['wall']:.1f} | `{t['test']}` |"
        for t in sorted(tests, key=lambda t: -t["cpu"])[:top]
    ]
    files, walls = Counter(), Counter()
    for t in tests:
        name = t["test"].split("::")[0]
        files[name] += t["cpu"]
        walls[name] += t["wall"]
    lines += ["", "By file, the costliest:", "", "| CPU s | wall s | file |", "|---|---|---|"]
    lines += [f"| {c:.1f} | {walls[f]:.1f} | `{f}` |" for f, c in files.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the environment's python")
    parser.add_argument("--checkout", default=str(HERE.parent), help="the checkout to test")
    parser.add_argument("--out", help="output stem (default benchmarks/suite)")
    parser.add_argument(
        "--per-test", action="store_true", help="serially, with each test's machine CPU"
    )
    parser.add_argument("pytest_args", nargs="*", help="more pytest options (after --)")
    args = parser.parse_args()
    table = Table(
        "suite",
        TITLE,
        "",
        ["process kind", "processes", "CPU s", "share of the CPU seen"],
    )
    token = uuid.uuid4().hex
    env = os.environ | {MARKER: token}
    command = [args.python, "-m", "pytest", "--durations=15", *args.pytest_args]
    per_test = None
    if args.per_test:  # -n0 last: it wins over an -n among the options
        descriptor, name = tempfile.mkstemp(prefix="fdptm-per-test-", suffix=".jsonl")
        os.close(descriptor)
        per_test = Path(name)
        path = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        env |= {"PYTHONPATH": path, "FDPTM_PER_TEST_CPU": str(per_test)}
        command[3:3] = ["-p", "per_test_cpu"]
        command.append("-n0")
    since = _start_ticks()
    busy0, all0 = _busy()
    begun = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=args.checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    watch = Watch(proc.pid, token, since)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        output = proc.communicate()[0].decode(errors="replace")
        tests = [json.loads(line) for line in per_test.read_text().splitlines()] if per_test else []
    finally:
        if per_test is not None:
            per_test.unlink(missing_ok=True)
    wall = time.monotonic() - begun
    watch.done.set()
    thread.join()
    busy1, all1 = _busy()
    cores = len(os.sched_getaffinity(0))
    machine_cpu = (busy1 - busy0) / TICK
    idle = 1 - (busy1 - busy0) / max(all1 - all0, 1)
    rows = sorted(watch.by_kind().items(), key=lambda item: -item[1][1])
    seen = sum(cpu for _, (_, cpu) in rows)
    for name, (count, cpu) in rows:
        table.add(name, count, round(cpu, 1), f"{cpu / seen:.0%}")
    summary = re.findall(r"^=+ (.*(?:passed|failed|error).*) =+$", output, re.M)
    slow = "\n".join(f"| {s:.1f} | {phase} | `{test}` |" for s, phase, test in slowest(output))
    plugin = " (with `PYTHONPATH=benchmarks` and `FDPTM_PER_TEST_CPU` set)" if per_test else ""
    table.notes = (
        f"Tests run: `{' '.join(['python', *command[1:]])}`{plugin} in {args.checkout} "
        f"(exit {proc.returncode}: {summary[-1] if summary else 'no summary line'}).\n\n"
        f"Wall {wall:.0f} s on {cores} cores; the machine's busy CPU in that time "
        f"{machine_cpu:,.0f} s ({machine_cpu / wall:.2f} cores busy on average, idle "
        f"{idle:.0%}); the rows below saw {seen:,.0f} s of it "
        f"({seen / max(machine_cpu, 1e-9):.0%}): a process's CPU after its last reading (at "
        f"most {INTERVAL} s and a pass over /proc) and processes shorter than that are "
        "missed, and the machine's own processes are not rows."
    )
    md = table.markdown() + (
        "\n\nThe slowest tests (pytest's `--durations`; wall seconds"
        + ("" if per_test else ", under the load of the other workers")
        + "):\n\n| s | phase | test |\n|---|---|---|\n"
        + slow
    )
    record = {"machine": table.started, "columns": table.columns, "rows": table.rows}
    record |= {"wall": wall, "machine_cpu": machine_cpu, "idle": idle, "exit": proc.returncode}
    record["slowest"] = slowest(output)
    if per_test is not None:
        md += costliest(tests)
        record["per_test"] = tests
    path = save("suite", TITLE, md, record, args.out)
    print(output[-3000:])
    print(f"written: {path}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
