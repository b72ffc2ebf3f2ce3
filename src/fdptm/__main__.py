"""The ``fdptm`` script and ``python -m fdptm``: a command is handed to a running
``fdptm serve`` of this environment (``fdptm.handoff``) before the command line is imported.

The command line's own imports (its parser, the release request model and pydantic) take
about 0.2 s, a tenth of a served release; a handed-over command needs none of them here,
because the server's warm child parses and runs it (issue 30, item 2: a release handed to a
running release process in 1.5 s). Only when no server takes the command does this process
import ``fdptm.cli`` and run it itself.
"""

from __future__ import annotations

import sys


def hand_off(argv: list[str]) -> int | None:
    """The exit status of ``fdptm ARGV`` run by a release process, or None to run it here
    (no server, ``serve`` itself, or help, which is this process's to print)."""
    from fdptm import handoff

    if not argv or argv[0] in ("serve", "-h", "--help"):
        return None
    try:
        return handoff.run_command(argv)
    except handoff.HandoffError as exc:
        print(f"fdptm: error: {exc}", file=sys.stderr)
        return 1


def main() -> int:
    """``fdptm`` with this process's arguments: handed off, or run here."""
    served = hand_off(sys.argv[1:])
    if served is not None:
        return served
    from fdptm.cli import run_process

    return run_process(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
