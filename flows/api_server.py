"""The process of the temporary Prefect API server a CLI command starts
(``fdptm.flows.running.TemporaryAPI``): ``python -m fdptm.flows.api_server PARENT_PID FD``.

It decides, binds and serves, in that order:

1. It asks Linux to send it SIGTERM when the CLI's process dies (``PR_SET_PDEATHSIG``;
   the CLI spawns it from its main thread, whose exit is what the signal follows) and
   exits at once if that process is already gone.
2. It reads Prefect's settings (environment, profile, ``prefect.toml``) as the CLI's own
   flow runs will: if they name an API, no temporary server is wanted, and it exits with
   ``NOT_NEEDED`` before touching Prefect's database. Prefect itself starts a temporary
   server whenever no API URL is set (Prefect 3.8's ``get_client`` tests the setting
   ``PREFECT_SERVER_EPHEMERAL_ENABLED`` as an object, which is always true), so this
   follows Prefect's behaviour, not that setting.
3. It binds a free port on 127.0.0.1 itself and writes the number to ``FD`` (a pipe the
   CLI reads), then runs Prefect's server app on that very socket with uvicorn, as
   Prefect's ``SubprocessASGIServer`` does (``create_app`` as a factory, lifespan on,
   errors-only logs; the CLI sets Prefect's ``PREFECT__SERVER_EPHEMERAL`` and UI-off
   variables in its environment), with uvicorn's automatic loop and HTTP parser: uvloop
   and httptools, which fdptm depends on for this (a served release with them took
   0.84-0.91x the time of the code before without them in three runs,
   ``benchmarks/small_release.md``). No port is probed and released first, so no other
   process can take it in between, and a server that fails to start (a database of
   another Prefect version, say) exits with ``STARTUP_FAILED`` once, without retries.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys

NOT_NEEDED = 64
"""Exit status: Prefect's settings name an API, so no temporary server is wanted."""
STARTUP_FAILED = 3
"""Exit status: the server did not start (uvicorn's own status for that)."""
APP = "prefect.server.api.server:create_app"
OPTIONS = {"factory": True, "log_level": "error", "lifespan": "on"}
"""uvicorn's options: the rest are its defaults, its automatic loop and HTTP parser among
them (uvloop and httptools, installed with fdptm)."""


def main(argv: list[str]) -> int:
    parent, fd = int(argv[0]), int(argv[1])
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the CLI died before the signal was armed
        return 0
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:
        return NOT_NEEDED
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    os.write(fd, f"{sock.getsockname()[1]}\n".encode())
    os.close(fd)
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(APP, **OPTIONS))
    server.run(sockets=[sock])
    return 0 if server.started else STARTUP_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
