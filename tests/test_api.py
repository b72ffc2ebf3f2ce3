"""fdptm.Workspace: the README's Python example as it is, the typed errors, the ledger, and
no Prefect output on the terminal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fdptm
from fdptm.errors import BadInputError, BudgetRefusedError

README = Path(__file__).resolve().parent.parent / "README.md"
PREFECT_LOGGING = ("PREFECT_LOGGING", "PREFECT_INTERNAL_LOGGING", "PREFECT_SERVER_LOGGING")
"""Prefect's logging settings, which the suite sets as the CLI does (conftest): a process
that stands for a user's own starts without them."""
pytestmark = pytest.mark.usefixtures("prefect_harness")


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- python-example:[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert found, "the README's Python example is missing its marker"
    return found.group(1)


def test_the_readme_example_runs_as_documented(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(readme_example(), "README.md", "exec"), namespace)
    out, err = capfd.readouterr()
    lines = out.splitlines()
    # only the example's own prints: the statement, five topics, what remains; no Prefect
    assert len(lines) == 7, out
    assert lines[0] == "(5, 1e-05)-DP"
    assert lines[-1] == "(5.0, 9e-05)"
    assert "Flow run" not in out + err and "prefect" not in err.lower()
    ws, lee, release = namespace["ws"], namespace["lee"], namespace["release"]
    assert ws.releases() == [release.run_id] and ws.datasets() == ["lee"]
    assert ws.release(release.run_id).manifest == release.manifest
    budget = lee.budget()
    assert budget["cap"]["epsilon"] == 10.0 and [e["stage"] for e in budget["entries"]] == ["train"]


def test_errors_are_the_clis_typed_exceptions_and_spend_nothing(tmp_path, pheme_raw):
    ws = fdptm.Workspace(tmp_path / "ws")
    pheme = ws.dataset("pheme")
    with pytest.raises(BadInputError, match="ingest data first"):
        pheme.budget()
    pheme.ingest(pheme_raw)
    with pytest.raises(BadInputError, match="ingest it first"):
        ws.dataset("absent").budget()
    pheme.set_cap(1.0, 1e-5)
    with pytest.raises(BudgetRefusedError):
        pheme.release(epsilon=2, delta=1e-6, topics=3)
    with pytest.raises(BadInputError, match=r"Input should be greater than or equal to 0\.000001"):
        pheme.release(epsilon=0, delta=1e-6, topics=3)
    with pytest.raises(BadInputError, match="is for dataset 'other'"):
        pheme.release(
            fdptm.request.ReleaseRequest.build(dataset="other", epsilon=1, delta=1e-6, topics=2)
        )
    with pytest.raises(BadInputError, match="leave workspace out"):
        pheme.release(epsilon=1, delta=1e-6, topics=2, workspace=str(tmp_path / "elsewhere"))
    with pytest.raises(BadInputError, match="no published release"):
        ws.release("nope")
    assert pheme.budget()["entries"] == [] and pheme.remaining() == (1.0, 1e-5)
    with pytest.raises(BadInputError):
        ws.dataset("../escape")


def test_run_logs_reach_python_logging_and_name_no_private_data(tmp_path):
    """In a fresh process (the CLI silences Prefect by level in this one): the release's
    run logs reach a handler the application installs, and nothing reaches stdout."""
    import os
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    code = (
        "import logging, sys\n"
        "records = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record): records.append(record.getMessage())\n"
        "logging.basicConfig(level=logging.INFO, handlers=[Keep()])\n"
        "import fdptm\n"
        "from gensim.test.utils import datapath\n"
        f"lee = fdptm.Workspace({str(tmp_path / 'ws')!r}).dataset('lee')\n"
        "lee.ingest(datapath('lee_background.cor'), fmt='lines')\n"
        "r = lee.release(epsilon=5, delta=1e-5, topics=3, iterations=5, seed=1)\n"
        "sys.stderr.write('\\n'.join(records) + '\\nRUN ' + r.run_id)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFECT_LOGGING)}
    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    logs, _, run_id = done.stderr.rpartition("\nRUN ")
    ours = [line for line in logs.splitlines() if run_id in line]
    assert ours == [
        f"run {run_id}: dataset lee, (epsilon 5, delta 1e-05), M2 biterm, DP stages "
        "vocabulary, train",
        f"run {run_id}: vocabulary selected (set-union)",
        f"run {run_id}: M2 trained",
        f"run {run_id}: published",
    ]  # the run, its stages and its public budget: no document, word or private count


def test_prefect_writes_nothing_to_the_terminal_of_a_fresh_process(tmp_path):
    """No logging configured by the application and Prefect's own level: the API's run
    still leaves stdout and stderr empty (Prefect's console handler is detached)."""
    import os
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    code = (
        "import fdptm\n"
        "from gensim.test.utils import datapath\n"
        f"lee = fdptm.Workspace({str(tmp_path / 'ws')!r}).dataset('lee')\n"
        "lee.ingest(datapath('lee_background.cor'), fmt='lines')\n"
        "lee.release(epsilon=5, delta=1e-5, topics=3, iterations=5, seed=1, "
        "vocabulary='wordfreq:en:2000')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFECT_LOGGING)}
    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert [
        line for line in done.stderr.splitlines() if "Flow run" in line or "prefect" in line
    ] == []
