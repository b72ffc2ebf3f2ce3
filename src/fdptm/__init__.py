"""fdptm: fully differentially private topic modeling (FDPTM) as production software.

``fdptm.load_release(path)`` reads a published release (``fdptm.release``) and
``fdptm.DPTopicModel`` trains an M2 mechanism on a count matrix (``fdptm.estimator``), and
``fdptm.Workspace`` does what the CLI does, from Python (``fdptm.api``); all are imported on
first use, so ``import fdptm`` (and the CLI's start-up) stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
_LAZY = {
    "Release": "release",
    "load_release": "release",
    "DPTopicModel": "estimator",
    "Workspace": "api",
    "Dataset": "api",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"fdptm.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'fdptm' has no attribute {name!r}")
