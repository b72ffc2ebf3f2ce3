"""The benchmarks' shared harness: interleaving and a results file that keeps its history."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "benchmarks" / "harness.py"


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("bench_harness", HARNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _record(harness, tag: str) -> dict:
    return {"machine": harness.at_start(), "tag": tag}


def test_rounds_rotate_the_order_so_every_arm_goes_first(harness):
    calls = []
    out = harness.rounds(["a", "b", "c"], 3, lambda arm: calls.append(arm) or len(calls))
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert out == {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]}


def test_save_adds_a_dated_section_above_the_earlier_runs(harness, tmp_path):
    stem = tmp_path / "thing"
    harness.save("thing", "A benchmark", "first body", _record(harness, "1"), stem)
    harness.save("thing", "A benchmark", "second body", _record(harness, "2"), stem)
    text = stem.with_suffix(".md").read_text()
    assert text.startswith("# A benchmark\n\n## Run of ")
    assert text.count("## Run of ") == 2 and text.count("# A benchmark") == 1
    assert text.index("second body") < text.index("first body")
    assert "Command: `python " in text and "load average (1 min)" in text
    assert json.loads(stem.with_suffix(".json").read_text())["tag"] == "2"


def test_save_again_replaces_the_newest_section_only(harness, tmp_path):
    stem = tmp_path / "thing"
    harness.save("thing", "A benchmark", "first body", _record(harness, "1"), stem)
    harness.save("thing", "A benchmark", "second body", _record(harness, "2"), stem)
    harness.save("thing", "A benchmark", "second, redone", _record(harness, "2"), stem, again=True)
    text = stem.with_suffix(".md").read_text()
    assert "second body" not in text
    assert text.count("## Run of ") == 2
    assert text.index("second, redone") < text.index("first body")


def test_a_file_written_before_the_harness_keeps_its_figures_one_level_down(harness, tmp_path):
    stem = tmp_path / "old"
    stem.with_suffix(".md").write_text(
        "# Old title\n\nCommand: `old` · 2026-11-01\n\n| a |\n|---|\n| 1.5 |\n\n## Part two\n\n"
        "```\n# not a heading\n```\n"
    )
    harness.save("old", "Old title", "new body", _record(harness, "new"), stem)
    text = stem.with_suffix(".md").read_text()
    assert text.index("new body") < text.index("## Earlier run")
    assert "Command: `old` · 2026-11-01" in text and "| 1.5 |" in text
    assert "\n### Part two\n" in text and "\n# not a heading\n" in text


@pytest.fixture(scope="module")
def bench(harness):
    spec = importlib.util.spec_from_file_location("bench_runner", HARNESS.with_name("bench.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_runner_lists_every_benchmark_with_what_it_measures(bench, capsys):
    scripts = {p.stem for p in HARNESS.parent.glob("*.py")} - {"bench", "harness"}
    known = bench.benchmarks()
    assert set(known) == scripts
    assert all(b.summary for b in known.values())
    assert "small_release" in known and "<= 1.5 s" in known["small_release"].targets
    assert known["m2_time"].needs and not known["small_release"].needs
    assert bench.main([]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in scripts)


def test_the_runner_refuses_an_unknown_benchmark(bench, capsys):
    assert bench.main(["no_such_benchmark"]) == 2
    assert "no benchmark 'no_such_benchmark'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location("bench_suite", HARNESS.parent / "suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_suite_benchmark_names_each_process_by_what_it_runs(suite):
    served = "/v/bin/python3 -P -m fdptm.cli serve"
    assert suite.kind(served, "/v/bin/python3 /v/bin/fdptm serve --detach") == "fdptm serve"
    assert suite.kind(served, served).startswith("served fdptm command")
    assert suite.kind("/v/bin/python3 /v/bin/fdptm release --dataset x", None) == "fdptm release"
    assert suite.kind("/v/bin/python -m fdptm.cli budget --dataset x", "bash") == "fdptm budget"
    api = "/v/bin/python3 -P -m fdptm.flows.api_server 12 5"
    assert suite.kind(api, None).startswith("temporary Prefect API server")
    worker = "/v/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))"
    assert suite.kind(worker, "/v/bin/python -m pytest") == "pytest worker (xdist)"
    assert suite.kind(worker, worker) == "fork of: pytest worker (xdist)"
    helper = "/v/bin/python -c import duckdb, sys; con = duckdb.connect('x'); sys.stdin.readline()"
    assert suite.kind(helper, worker) == "python -c (a test's script)"
    assert suite.kind("/v/bin/python -m pytest --durations=15", None).startswith("pytest (")
    assert suite.kind("/usr/lib/postgresql/15/bin/postgres -D /tmp/x", None) == "PostgreSQL"
    durations = "== slowest ==\n12.50s call     tests/t.py::test_b[x y]\n0.01s setup    t.py::c\n"
    assert suite.slowest(durations) == [
        (12.5, "call", "tests/t.py::test_b[x y]"),
        (0.01, "setup", "t.py::c"),
    ]


def test_the_suite_benchmark_follows_descendants_and_marked_processes(suite):
    """A process tree's child and a process that only carries the run's marker are both
    followed, with the CPU they used: each burns 0.6 CPU seconds, says so and waits, and
    /proc is read while they wait, so no reading can come before the end of the work."""
    burn = (
        "import sys, time\nwhile time.process_time() < 0.6: pass\n"
        "print('burnt', flush=True)\nsys.stdin.readline()"
    )
    tree = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"
    token = "t0ken"
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    since = suite._start_ticks()
    parent = subprocess.Popen([sys.executable, "-c", tree], **pipes)
    watch = suite.Watch(root=parent.pid, token=token, since=since)
    marked = subprocess.Popen(
        [sys.executable, "-c", burn], env={**os.environ, suite.MARKER: token}, **pipes
    )
    stranger = subprocess.Popen([sys.executable, "-c", burn], **pipes)
    procs = (parent, marked, stranger)
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["burnt"] * 3
        watch.poll()
        watch.poll()  # a child listed before its parent is taken on the second pass
    finally:
        for proc in procs:
            proc.communicate("go\n", timeout=60)
    pids = {pid: seen for (pid, _), seen in watch.seen.items()}
    assert parent.pid in pids and marked.pid in pids and stranger.pid not in pids
    (child,) = [s for s in pids.values() if s.parent and s.parent[0] == parent.pid]
    assert child.cpu >= 0.55 and pids[marked.pid].cpu >= 0.55
    rows = watch.by_kind()
    assert rows["python -c (a test's script)"][0] == 3


def test_the_per_test_plugin_counts_the_cpu_of_a_tests_child_processes(suite, tmp_path):
    """A test whose child process burns 1 CPU second, and one whose fixture's teardown does,
    are each charged at least 0.9 s of the machine's CPU (the machine may add more, never
    less; 0.1 s for /proc/stat's ticks); ``costliest`` ranks the tests and their file."""
    burn = "import time\nwhile time.process_time() < 1.0: pass"
    child = f"subprocess.run([sys.executable, '-c', {burn!r}], check=True)"
    (tmp_path / "test_cost.py").write_text(
        "import subprocess, sys\nimport pytest\n\n"
        f"def test_burns():\n    {child}\n\n"
        f"@pytest.fixture\ndef burnt_after():\n    yield\n    {child}\n\n"
        "def test_burns_in_teardown(burnt_after):\n    pass\n"
    )
    out = tmp_path / "cpu.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env |= {"PYTHONPATH": str(HARNESS.parent), "FDPTM_PER_TEST_CPU": str(out)}
    command = [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "per_test_cpu"]
    done = subprocess.run(
        [*command, "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tests = {json.loads(line)["test"]: json.loads(line) for line in out.read_text().splitlines()}
    names = {"test_cost.py::test_burns", "test_cost.py::test_burns_in_teardown"}
    assert set(tests) == names
    assert all(tests[name]["cpu"] >= 0.9 for name in names), tests
    markdown = suite.costliest(list(tests.values()), top=2)
    assert all(f"| `{name}` |" in markdown for name in names)
    assert "| `test_cost.py` |" in markdown
