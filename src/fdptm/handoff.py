"""Handing a command to a running release process (``fdptm serve``): the client side.

A fresh fdptm process pays about 12 s of imports before its first stage (Prefect, Great
Expectations for the publish checks, the mechanisms, numba's kernels) and, without a
Prefect server, the start of a temporary API. ``fdptm serve`` (``fdptm.serve``) pays them
once and then forks one child per request: the child is a copy of the warm process that
takes the caller's arguments, environment, working directory, umask and terminal (its
stdin, stdout and stderr, passed as file descriptors) and runs exactly the code a fresh
process would run (``fdptm.cli.main``, or one of the Python API's flow calls). The caller
waits for the child's end and exits with its status; a signal the caller receives
(Ctrl-C, SIGTERM) is passed on to the child, and a caller that dies takes its child with
it (the child is killed as the caller was).

This module is what every ``fdptm`` command and ``fdptm.flows.running.run_flow`` import
before anything heavy, so it uses the standard library only. A server is found by a
socket whose name is a key of what must match between the caller and the server: the
Python interpreter and the installed code, down to the files' modification times (an
upgraded or edited install is never served by the old code; the server also stops once its
files change), and the environment variables read at import time (``PYTHON*``,
``NUMBA_*``). Everything else (``PREFECT_*``, ``FDPTM_*``, ``HOME``, the working
directory) is the caller's in the child.

Trust: the socket lives in a directory only this user can enter (``0700``, checked), and
both ends check the other's uid (``SO_PEERCRED``); the messages are pickles between two
processes of the same user and the same code. ``FDPTM_SERVE=off`` makes a process run
everything itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import pickle
import resource
import signal
import site
import socket
import stat
import struct
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any

SERVE_VAR = "FDPTM_SERVE"
SOCKET_DIR_VAR = "FDPTM_SERVE_DIR"
PACKAGES = ("fdptm",)
_HEADER = struct.Struct("!I")
_CREDENTIALS = struct.Struct("iII")  # struct ucred: pid_t, uid_t, gid_t
LOCAL = object()
"""The answer when the command did not run in a served child (no server, or none started
it): run it here."""
SERVED: set[str] = set()
"""The functions ``call`` may name (``served``); the server runs nothing else."""


def served(function):
    """Mark ``function`` as one ``call`` may run in a served child."""
    SERVED.add(f"{function.__module__}:{function.__qualname__}")
    return function


class HandoffError(RuntimeError):
    """The served child ended without reporting its outcome (killed), or its outcome could
    not be read here."""


def enabled() -> bool:
    """Whether this process hands commands off when a server runs (``FDPTM_SERVE=off``
    turns it off; the server's own children never hand off again)."""
    return os.environ.get(SERVE_VAR, "").strip().lower() not in ("off", "0", "no", "false")


def socket_dir(create: bool = False) -> Path | None:
    """The directory of this user's sockets: ``$FDPTM_SERVE_DIR``, else
    ``$XDG_RUNTIME_DIR/fdptm``, else ``/tmp/fdptm-<uid>``. None when it does not exist (and
    ``create`` is false) or is not this user's alone (owned by us, mode 0700): a socket
    another user could have placed is never used."""
    configured = os.environ.get(SOCKET_DIR_VAR)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if configured:
        path = Path(configured)
    elif runtime and _private(Path(runtime)):  # not another user's (after su or sudo -u)
        path = Path(runtime) / "fdptm"
    else:
        path = Path("/tmp") / f"fdptm-{os.getuid()}"
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                path.mkdir(mode=0o700, parents=True)
        return path if _private(path) else None
    except OSError:
        return None


def _private(path: Path) -> bool:
    """A directory (not a symlink) this user owns, mode 0700."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and stat.S_IMODE(info.st_mode) == 0o700
        and info.st_uid == os.getuid()
    )


def code_fingerprint() -> list:
    """The installed code as a server must match it: every file of fdptm's packages
    (path, size, modification time) and the modification times of the interpreter's
    site-packages directories (a package installed, upgraded or removed there changes its
    directory). Not ``sys.path`` as such: its first entry is the caller's working directory
    under ``python -m``, which says nothing about the code."""
    files: list = []
    for root in _package_dirs():
        for directory, subdirs, names in os.walk(root):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(names):  # modules, and the resources and templates beside them
                info = os.stat(os.path.join(directory, name))
                files.append((directory, name, info.st_size, info.st_mtime_ns))
    paths = sysconfig.get_paths()
    sites = []
    for entry in sorted({paths["purelib"], paths["platlib"], site.getusersitepackages()}):
        with contextlib.suppress(OSError):
            sites.append((entry, os.stat(entry).st_mtime_ns))
    return [files, sites]


def _package_dirs() -> list[str]:
    """The directories of fdptm and of the packages installed under it (``fdptm.flows`` and
    the others live outside ``src/fdptm`` in a checkout)."""
    spec = importlib.util.find_spec("fdptm")
    roots = list(spec.submodule_search_locations or [])
    for sub in ("flows", "tasks", "storage", "deployments"):
        found = importlib.util.find_spec(f"fdptm.{sub}")
        if found is not None and found.submodule_search_locations:
            roots.extend(found.submodule_search_locations)
    return sorted(set(roots))


KEYED_VARIABLES = (
    "PYTHON",
    "NUMBA_",
    "OMP_",
    "OPENBLAS_",
    "MKL_",
    "ARROW_",
    "MPL",
    "FSSPEC_",
    "LANG",
    "LC_",
)
"""Environment read at import time (interpreter, numba, thread pools, locale): a caller whose
values differ from the server's runs its commands itself."""
_FLAGS = (
    "optimize",
    "dev_mode",
    "utf8_mode",
    "isolated",
    "ignore_environment",
    "no_user_site",
    "bytes_warning",
    "hash_randomization",
)
"""The interpreter flags that change what code does (``-P``, which only keeps the working
directory off ``sys.path``, is not among them: the server runs with it)."""
_LIMITS = ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_RSS", "RLIMIT_NOFILE", "RLIMIT_NPROC")


def key() -> str:
    """What a server and a caller must share: interpreter and its flags, code, the
    environment read at import time, and the process's constraints (CPU affinity, cgroup,
    groups, nice value, resource limits), which a forked child inherits from the server
    rather than from the caller."""
    environment = sorted(
        (name, value)
        for name, value in os.environ.items()
        if name.startswith(KEYED_VARIABLES) and name != "PYTHONSTARTUP"
    )
    try:
        cgroup = Path("/proc/self/cgroup").read_text()
    except OSError:
        cgroup = ""
    constraints = [
        sorted(os.sched_getaffinity(0)),
        cgroup,
        os.getgid(),
        sorted(os.getgroups()),
        os.getpriority(os.PRIO_PROCESS, 0),
        [resource.getrlimit(getattr(resource, name)) for name in _LIMITS],
    ]
    identity = [
        os.path.realpath(sys.executable),
        sys.prefix,
        [getattr(sys.flags, flag) for flag in _FLAGS],
        sys.warnoptions,
        sorted(map(str, sys._xoptions.items())),
        code_fingerprint(),
        environment,
        constraints,
    ]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:20]


def socket_path(create: bool = False) -> Path | None:
    """Where the server for this environment listens (None: no private socket directory)."""
    directory = socket_dir(create)
    return None if directory is None else directory / f"{key()}.sock"


# --- messages -------------------------------------------------------------------------------


def send(sock: socket.socket, message: Any, fds: list[int] | None = None) -> None:
    """One length-prefixed pickle, with file descriptors attached when given."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    frame = _HEADER.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [frame[:1]], fds)
        sock.sendall(frame[sent:])
    else:
        sock.sendall(frame)


def receive(sock: socket.socket, fds: int = 0) -> tuple[Any, list[int]]:
    """The next message (EOFError when the other end closed), and the file descriptors that
    came with its first byte (at most ``fds``)."""
    received: list[int] = []
    if fds:
        first, received, _, _ = socket.recv_fds(sock, 1, fds)
        if not first:
            raise EOFError
        head = first + _exactly(sock, _HEADER.size - 1)
    else:
        head = _exactly(sock, _HEADER.size)
    (length,) = _HEADER.unpack(head)
    return pickle.loads(_exactly(sock, length)), received


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise EOFError
        chunks += chunk
    return bytes(chunks)


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size)
    return _CREDENTIALS.unpack(raw)[1]


# --- the caller -----------------------------------------------------------------------------


def connect() -> socket.socket | None:
    """A connection to this environment's server, or None when none is running (or it is
    not ours); never raises."""
    if not enabled() or not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        path = socket_path()
        if path is None or not path.exists():
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
            if peer_uid(sock) != os.getuid():
                sock.close()
                return None
        except OSError:
            sock.close()
            return None
        return sock
    except OSError:
        return None


def run_command(argv: list[str]) -> int | None:
    """Run ``fdptm ARGV`` in the server's warm child: its exit status, or None when it was
    not run there (no server; arguments naming this process's file descriptors, which the
    child does not have; a server that closed before starting it): then the caller runs
    the command itself."""
    if any(_names_descriptor(arg) for arg in argv):
        return None
    outcome = _request({"kind": "cli", "argv": list(argv)})
    return None if outcome is LOCAL else outcome


def call(target: str, *args: Any, **kwargs: Any) -> Any:
    """``module:function(*args, **kwargs)`` in the server's warm child, for the Python API
    (the server refuses targets not marked ``served``): its result, its exception raised
    here, or ``LOCAL`` when it was not run there (no server; a caller that imported
    Prefect, whose in-process settings and run context a served child would not see; a
    server that closed before starting it). The child's log records that reach its root
    logger (Prefect's logging configuration decides which, as in this process) are handled
    by this process's loggers; its warnings and prints go to this process's stderr and
    stdout."""
    if "prefect" in sys.modules:
        return LOCAL
    outcome = _request({"kind": "call", "target": target, "args": args, "kwargs": kwargs})
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


_RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _names_descriptor(arg: str) -> bool:
    return "/dev/fd/" in arg or "/proc/self/fd/" in arg


def _request(request: dict) -> Any:
    """Send the request with this process's context; relay signals to the child while it
    runs; the child's exit status (``cli``) or result (``call``), or ``LOCAL``.

    The signal handlers are in place before the connection is made (a Ctrl-C before the
    child is known is passed on once it is); signals this process ignores (``nohup``, a
    background job) are not relayed and stay ignored in the child."""
    try:
        request.update(cwd=os.getcwd(), env=dict(os.environ), umask=_umask())
    except OSError:  # a deleted working directory: let the command say so itself
        return LOCAL
    fds = [fd for fd in (0, 1, 2) if _is_open(fd)]  # a closed one is /dev/null there
    request["fds"] = fds
    ignored = [s for s in _RELAYED if signal.getsignal(s) is signal.SIG_IGN]
    request["ignored"] = [int(s) for s in ignored]
    relayed: list[int] = []
    child: list[int] = []
    killed: list[int] = []

    def relay(signum: int, _frame: Any) -> None:
        relayed.append(signum)
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child[0], signum)

    before: dict = {}
    if threading.current_thread() is threading.main_thread():
        before = {s: signal.signal(s, relay) for s in _RELAYED if s not in ignored}
    try:
        sock = connect()
        if sock is None:
            return LOCAL
        with sock:
            try:
                _flush()
                send(sock, request, fds)
            except OSError:
                return LOCAL
            outcome = _follow(sock, request, child, relayed, killed)
    finally:
        for signum, handler in before.items():
            if handler is not None:  # None: a handler installed outside Python
                signal.signal(signum, handler)
    if outcome is not LOCAL or not child:
        return outcome
    death = (killed or relayed[-1:] or [None])[0]
    if death is not None and request["kind"] == "cli":  # as the child died, so do we
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(death, signal.SIG_DFL)
        os.kill(os.getpid(), death)
    how = f"by signal {death}" if death is not None else "without an exit status"
    raise HandoffError(
        f"the release process's child (pid {child[0]}) ended {how}; `fdptm recover` "
        "resumes or releases what it had reserved"
    )


def _follow(sock: socket.socket, request: dict, child: list, relayed: list, killed: list):
    """Read the child's messages until its end; ``LOCAL`` when the connection ends
    before the child reported its pid (nothing of the command ran)."""
    while True:
        try:
            message, _ = receive(sock)
        except (EOFError, OSError):
            return LOCAL
        except Exception as exc:  # a result or exception that does not unpickle here
            return HandoffError(f"the served call's outcome could not be read here: {exc}")
        if "pid" in message:
            child.append(message["pid"])
            for signum in relayed:  # what arrived before the child was known
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child[0], signum)
        elif "log" in message:
            record = logging.makeLogRecord(message["log"])
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
        elif "killed" in message:  # from the server, once the child is reaped
            killed.append(message["killed"])
        elif "done" in message:
            _drain(sock)  # the child's exit: its atexit work (Prefect's log flush) done
            return message["done"]


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while sock.recv(65536):
            pass


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _umask() -> int:
    """This process's umask, read without changing it (``os.umask`` would, for a moment,
    for every thread)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    raise OSError("no Umask in /proc/self/status")


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
