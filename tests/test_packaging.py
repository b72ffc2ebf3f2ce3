"""The wheel ships every source package, and CI runs exactly the README's test command."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_source_package_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for name, src in cfg["package-dir"].items():
        for init in (ROOT / src).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / src)
            found.add(".".join([name, *rel.parts]))
    assert found <= listed, f"packages missing from pyproject: {sorted(found - listed)}"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line.strip() for line in ci.splitlines() if "pytest" in line)
    assert command in readme


def test_flows_import_where_the_os_has_no_affinity_masks():
    """macOS and Windows have no os.sched_getaffinity: importing the flows must not need it
    (task runners are built when a run asks for one)."""
    import subprocess
    import sys

    code = (
        "import os; del os.sched_getaffinity\n"
        "import fdptm.flows.audit as a, fdptm.flows.release, fdptm.api\n"
        "print(type(a.task_runner()).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ThreadPoolTaskRunner"


def test_no_package_module_prints_except_the_cli():
    """Output is the CLI's job (``fdptm/cli.py`` and its local commands, ``cli_local.py``);
    everything else logs or returns (issue 11)."""
    import ast

    offenders = []
    for src in ("fdptm", "flows", "tasks", "storage", "deployments"):
        for path in (ROOT / src).rglob("*.py"):
            if path.name in ("cli.py", "cli_local.py") and path.parent.name == "fdptm":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno}"
                for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"
            ]
    assert offenders == []


def test_the_registry_imports_no_mechanism_until_one_is_used():
    """The CLI refuses bad requests in about two seconds because listing the mechanisms
    imports none of them (numba and the kernels take about 1.7 s); using one loads only it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from fdptm.mechanisms.registry import MECHANISMS, mechanism\n"
        "assert 'numba' not in sys.modules, 'numba'\n"
        "loaded = {m for m in sys.modules if m.startswith('fdptm.mechanisms.')}\n"
        "assert loaded <= {'fdptm.mechanisms.registry', 'fdptm.mechanisms.guarantee'}, loaded\n"
        "mechanism('dp-vi').options()\n"
        "assert 'fdptm.mechanisms.dp_vi' in sys.modules\n"
        "assert 'fdptm.mechanisms.spectral' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
