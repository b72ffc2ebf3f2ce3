"""The code version recorded in manifests and runs."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

from fdptm import __version__


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=5
    ).stdout.strip()


@cache
def code_version() -> str:
    """``<package version>+g<commit>[.dirty]`` in a git checkout, the package version otherwise."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = _git(root, "rev-parse", "--short=12", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+g{commit}{'.dirty' if dirty else ''}"
