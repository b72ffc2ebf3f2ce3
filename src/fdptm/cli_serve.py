"""``fdptm serve``: its options and its output (the server itself is ``fdptm.serve``)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys


def add_parser(sub) -> None:
    serve = sub.add_parser(
        "serve",
        help="keep a warm release process that this environment's fdptm commands and "
        "Python API calls are handed to (until Ctrl-C or SIGTERM)",
    )
    what = serve.add_mutually_exclusive_group()
    what.add_argument("--status", action="store_true", help="say whether one is running")
    what.add_argument("--stop", action="store_true", help="stop the running one")
    what.add_argument(
        "--detach", action="store_true", help="run it in the background; return once it is ready"
    )


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve in the foreground, or start one in the background, or report or stop it."""
    from fdptm import serve

    serve.check_directory()
    running = serve.holder()
    if args.status or args.stop:
        if running is None:
            print("no release process serves this environment")
            return 0 if args.stop else 1
        pid, served = running
        if args.stop:
            os.kill(pid, signal.SIGTERM)
            print(f"stopping the release process (pid {pid})")
            return 0
        print(f"a release process serves this environment: pid {pid}, {served} command(s) run")
        return 0
    if args.detach:
        if running is not None:
            print(f"a release process serves this environment: pid {running[0]}")
            return 0
        pid, log = serve.detach()
        print(f"a release process serves this environment: pid {pid} (log: {log})")
        return 0
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("fdptm serve: %(message)s"))
    serve.LOG.addHandler(handler)
    serve.LOG.propagate = False
    serve.serve_forever()
    return 0
