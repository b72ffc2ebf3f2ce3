"""A pytest plugin for ``python benchmarks/suite.py --per-test``: each test's wall time and
the whole machine's busy CPU seconds while it ran (setup, call and teardown), one JSON line
per test, appended to the file named by ``$FDPTM_PER_TEST_CPU``.

Why the machine's CPU and not the test process's: a test's cost is mostly in the processes
it starts (fdptm commands, served commands, Prefect's servers and workers), which a
process's own counters do not see. In a serial run (``-n0``) the machine's busy CPU during
a test is that test's, its children and servers included, plus whatever else runs
meanwhile: so a process a test left behind, or commands that stopped being handed to the
session's ``fdptm serve``, show as tests that cost far more in the whole run than alone.
"""

from __future__ import annotations

import json
import os
import time

import pytest

OUT_VAR = "FDPTM_PER_TEST_CPU"


def busy_seconds() -> float:
    """The machine's busy CPU seconds since boot (/proc/stat's cpu line: user, nice,
    system, irq, softirq and steal, as ``suite._busy``; guest time is inside user)."""
    with open("/proc/stat") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = busy_seconds(), time.monotonic()
    yield
    record = {
        "test": item.nodeid,
        "cpu": round(busy_seconds() - cpu, 2),
        "wall": round(time.monotonic() - wall, 2),
    }
    with open(os.environ[OUT_VAR], "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
