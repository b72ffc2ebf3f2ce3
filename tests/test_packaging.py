"""The wheel ships every source package, and CI runs exactly the README's test command."""

from __future__ import annotations

import itertools
import shlex
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


def _readme_bash_lines() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    lines, on = [], False
    for line in readme.splitlines():
        if line.strip() in ("```bash", "```"):
            on = line.strip() == "```bash"
        elif on:
            lines.append(line.strip())
    return lines


def test_ci_runs_the_readme_commands_as_written():
    """.ci/run takes both commands from the README's bash blocks (so they cannot drift), and
    the demo's is a plain install, as a new user runs it (an editable one hides layout bugs)."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'readme_command "fdptm demo"' in ci and 'readme_command "pytest"' in ci
    lines = _readme_bash_lines()
    installs = [line for line in lines if "pip install" in line]
    (demo,) = [line for line in installs if "fdptm demo" in line]
    (tests,) = [line for line in installs if "pytest" in line]
    for line, target in ((demo, "."), (tests, ".[test]")):
        (arguments,) = [
            step[3:] for step in _steps(line) if step[:3] == [".venv/bin/uv", "pip", "install"]
        ]
        assert target in arguments and not {"-e", "--editable"} & set(arguments)
        # into the new environment (not an activated one), compiled as pip would
        assert ("-p", ".venv") in itertools.pairwise(arguments)
        assert "--compile-bytecode" in arguments


def _steps(line: str) -> list[list[str]]:
    """The commands of a shell line joined by ``&&``, each as its arguments."""
    steps, step = [], []
    for word in shlex.split(line):
        if word == "&&":
            steps.append(step)
            step = []
        else:
            step.append(word)
    return [*steps, step]


def test_no_source_folder_in_the_root_can_hide_the_installed_package():
    """Run from the checkout's root (sys.path[0] is the current directory), every fdptm
    module resolves to the installed package, flows and tasks included (issue 27)."""
    import subprocess
    import sys

    assert not (ROOT / "fdptm").exists()
    code = (
        "import importlib.util as u\n"
        "for m in ('fdptm.flows.api_server', 'fdptm.tasks.run', 'fdptm.storage.ledger',"
        " 'fdptm.deployments.backfill'):\n"
        "    assert u.find_spec(m) is not None, m\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


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


def test_the_fdptm_script_and_python_m_fdptm_enter_through_the_hand_off():
    """The installed ``fdptm`` script and ``python -m fdptm`` start in ``fdptm.__main__``,
    which hands a command to a running ``fdptm serve`` before importing the command line
    (tests/test_serve.py); both then run the command line as ``fdptm.cli`` does."""
    import subprocess
    import sys
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="fdptm")
    assert script.value == "fdptm.__main__:main"
    for command in ([sys.executable, "-m", "fdptm"], [str(Path(sys.executable).parent / "fdptm")]):
        done = subprocess.run(
            [*command, "mechanisms", "--json"], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert '"dp-vi"' in done.stdout


def test_no_package_module_prints_except_the_cli():
    """Output is the CLI's job (``fdptm/cli.py``, its command modules ``cli_*.py``: local,
    verify, catalog, serve; and the script's entry ``fdptm/__main__.py``); everything else
    logs or returns (issue 11)."""
    import ast

    offenders = []
    for src in ("src/fdptm", "flows", "tasks", "storage", "deployments"):
        for path in (ROOT / src).rglob("*.py"):
            cli = path.name.startswith("cli") or path.name == "__main__.py"
            if cli and path.parent.name == "fdptm":
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
