"""fdptm: fully differentially private topic modeling (FDPTM) as production software.

``fdptm.load_release(path)`` reads a published release (``fdptm.release``); it is imported
on first use, so ``import fdptm`` (and the CLI's start-up) stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Release", "load_release"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fdptm import release

        return getattr(release, name)
    raise AttributeError(f"module 'fdptm' has no attribute {name!r}")
