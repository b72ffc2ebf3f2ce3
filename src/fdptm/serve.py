"""``fdptm serve``: a long-lived release process that fdptm commands are handed to.

The process imports once what every release needs (Prefect's engine and its logging
configuration, Great Expectations for the publish checks with its data sources made, the
mechanisms, OpenDP, dp-accounting, nltk's WordNet reader and numba's compiled kernels from
their cache) and, unless ``PREFECT_API_URL`` names a server,
starts Prefect's temporary API server (``fdptm.flows.running.TemporaryAPI``) and keeps it
up. It then listens on this environment's socket (``fdptm.handoff``) and forks one child
per request. The fork is the isolation: each command runs in its own process, as a fresh
one would, with the caller's arguments, environment (Prefect's settings are re-read from
it: ``prefect.context.refresh_global_settings_context``), working directory, umask and
terminal; a command that crashes or is killed takes nothing else with it, and no state
passes from one command to the next. Requests run side by side, as separate processes
would; the catalog's own lock orders their writes.

What is not held: the catalog. A DuckDB connection cannot cross a fork, and one held open
here would lock other processes out of the workspace, so each command opens its
workspace's catalog as a fresh process does (milliseconds). numba's parallel kernels are
loaded but never run here, so no threading layer is started before a fork.

Privacy: a served command runs the same code with the same inputs; nothing about a request
is kept in this process (the children hold it and exit). The server logs only its own
start, stop and the count of commands; never arguments, paths or data. The temporary API
server it holds stores flow runs in Prefect's database as a command's own would, and its
output is discarded.

Fork safety: the server forks with the native threads its libraries start at import
(OpenBLAS's pool, pyarrow's jemalloc background thread), which register fork handlers; no
Python thread runs, and numba's threading layer is not started (``_load_kernels``).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib
import io
import logging
import os
import pkgutil
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from fdptm import handoff
from fdptm.errors import BadInputError

PACKAGES = ("fdptm", "fdptm.flows", "fdptm.tasks", "fdptm.storage", "fdptm.deployments")
"""fdptm's packages: every module of them is imported by the server."""
WARM = (
    "great_expectations",
    "opendp.prelude",
    "dp_accounting",
    "prefect.flow_engine",
    "prefect.task_engine",
    "fastapi",
    "graphviz",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "pyarrow.csv",
    "pyarrow.json",
)
"""What a release imports besides fdptm's modules (found by listing the modules a served
release still imported)."""

CHECK_EVERY = 5.0
"""Seconds between the server's checks of its code (an upgrade stops it) and API server."""


class Server:
    """The listening process: its lock, its socket, its held API server and children."""

    def __init__(self) -> None:
        directory = handoff.socket_dir(create=True)
        if directory is None:
            raise BadInputError(
                "fdptm serve needs a socket directory only you can enter: "
                f"${handoff.SOCKET_DIR_VAR}, $XDG_RUNTIME_DIR/fdptm or /tmp/fdptm-{os.getuid()} "
                "exists but is another user's or not mode 0700; remove it or set "
                f"${handoff.SOCKET_DIR_VAR} to a new directory"
            )
        self.key = handoff.key()
        self.fingerprint = handoff.code_fingerprint()
        self.path = directory / f"{self.key}.sock"
        self._lock = _take_lock(directory / f"{self.key}.lock")
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # we hold the lock: a socket here is a dead server's
        self._listener: socket.socket | None = None
        self._api = None
        self._children: dict[int, socket.socket] = {}
        self._stopping = False
        self.served = 0

    def warm(self) -> float:
        """Import what a release needs and load the kernels; seconds it took."""
        from fdptm.cli import _quiet_prefect

        start = time.monotonic()
        _quiet_prefect()
        for module in (*_modules(), *WARM):
            importlib.import_module(module)
        from fdptm import text
        from fdptm.tasks import validation

        text.lemmatizer()
        text.stop_words()
        validation.prepare()
        _load_kernels()
        _refresh_prefect()
        self._start_api()
        return time.monotonic() - start

    def _start_api(self) -> None:
        """Prefect's temporary API server, held for the children whose settings name no
        API and the same database as this process's."""
        from fdptm.flows import running

        if os.environ.get("PREFECT_API_URL") or not running._ephemeral_wanted():
            return
        api = running.TemporaryAPI(detached=True)
        try:
            url = api.url()
        except RuntimeError as exc:  # commands then start their own, as fresh processes do
            _say(f"Prefect's temporary API server did not start ({exc}); commands start their own")
            self._api = None
            return
        self._api = (api, url, running.prefect_database()) if url else None
        if url:
            _check_version(url)

    def listen(self) -> None:
        """Bind and listen under a temporary name, then rename: the socket appears at its
        path only when it accepts connections."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        staging = self.path.with_suffix(".binding")
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
        listener.bind(str(staging))
        os.chmod(staging, 0o600)
        listener.listen(64)
        os.replace(staging, self.path)
        self._listener = listener

    def loop(self) -> None:
        """Accept and fork until SIGTERM, SIGINT or a change of the installed code; then
        wait for the running children and stop the API server."""
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._stop)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        checked = time.monotonic()
        while not self._stopping:
            ready, _, _ = select.select([self._listener, wake_read], [], [], CHECK_EVERY)
            if wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 512)
            if self._listener in ready and not self._stopping:
                self._accept()
            self._reap()
            if time.monotonic() - checked >= CHECK_EVERY:
                checked = time.monotonic()
                self._check()
        self._shut(wake_read)

    def _stop(self, signum: int, _frame: Any) -> None:
        if self._stopping:  # a second signal: stop the running commands too
            for pid in list(self._children):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        self._stopping = True

    def _check(self) -> None:
        if handoff.code_fingerprint() != self.fingerprint:
            _say("the installed code changed: stopping (start `fdptm serve` again)")
            self._stopping = True
        elif self._api is not None and self._api[0]._process.poll() is not None:
            _say("Prefect's temporary API server exited: starting another")
            self._start_api()

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except BlockingIOError:
            return
        if handoff.peer_uid(conn) != os.getuid():
            conn.close()
            return
        try:
            pid = os.fork()
        except OSError as exc:  # the caller's connection closes: it runs the command itself
            _say(f"cannot fork ({exc.strerror}): a command ran in its own process")
            conn.close()
            return
        if pid == 0:
            code = 1
            try:
                code = self._child(conn)
            finally:
                _exit_child(code)
        # our copy stays open until the child is reaped: a child killed by a signal is
        # reported to its caller, which then dies of the same signal (``_reap``)
        self._children[pid] = conn
        self.served += 1
        os.pwrite(self._lock, f"{os.getpid()} {self.served}\n".encode(), 0)

    def _reap(self, block: bool = False) -> None:
        """Reap the children that ended (all of them with ``block``); tell the caller of
        one that a signal killed which signal it was, and close our end."""
        for pid in list(self._children):
            try:
                done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            conn = self._children.pop(pid)
            if os.WIFSIGNALED(status):
                with contextlib.suppress(OSError):
                    conn.settimeout(1)
                    handoff.send(conn, {"killed": os.WTERMSIG(status)})
            conn.close()

    def _shut(self, wake_read: int) -> None:
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if self._children:
            _say(f"waiting for {len(self._children)} running command(s) to finish")
        self._reap(block=True)
        if self._api is not None:
            self._api[0].stop()
        signal.set_wakeup_fd(-1)
        os.close(wake_read)
        _say(f"stopped after {self.served} command(s)")

    def _child(self, conn: socket.socket) -> int:
        """In the forked child: take the caller's context, run its request, report."""
        self._listener.close()
        os.close(self._lock)
        for other in self._children.values():  # the other commands' connections
            other.close()
        os.setsid()  # signals meant for the server (its terminal's Ctrl-C) do not reach us
        signal.set_wakeup_fd(-1)
        # a Ctrl-C the caller passes on waits until the command runs (``_interruptible``):
        # raised anywhere else, it would end this child without telling the caller
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)
        # the connection stays open until this process ends (a duplicate nobody closes):
        # the caller's end sees it close only after our exit work, Prefect's flush included
        os.dup(conn.fileno())
        conn.settimeout(30)
        request, fds = handoff.receive(conn, fds=3)
        conn.settimeout(None)
        outbox = _Outbox(conn)
        for signum in request["ignored"]:  # nohup, a background job: ignored as there
            signal.signal(signum, signal.SIG_IGN)
        if signal.SIGINT not in request["ignored"]:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            _adopt(request, fds)
        except OSError as exc:
            from fdptm.cli import _error

            _error(f"cannot take the caller's context ({exc})")
            outbox.send({"done": 2})
            return 2
        outbox.send({"pid": os.getpid()})  # from here on, the caller's signals reach us
        threading.Thread(target=_die_with_caller, args=(conn,), daemon=True).start()
        try:
            if request["kind"] == "cli":
                code = _run_cli(request["argv"], self._api)
                outbox.send({"done": code})
                return code
            outbox.send({"done": _portable(_run_call(request, self._api, outbox))})
            return 0
        except BaseException:  # ours, not the command's: the caller's stderr says what
            traceback.print_exc()
            return 1


def _check_version(url: str) -> None:
    """Prefect's check that the temporary API this process holds at ``url`` speaks its
    version, done here once.

    Prefect's clients check once per process (a request, and an SSL context built from
    certifi's bundle even for plain HTTP: about 0.1 s of a served release, most of it in
    the child's events thread) and remember the URLs that passed; the children forked later
    inherit that memory. Only the held API is checked: it runs this very installation's
    Prefect, and lives exactly as long as this process; a server named by
    ``PREFECT_API_URL`` may be upgraded meanwhile, so children check it themselves. The
    events client and the HTTP client remember the URL in two forms (the HTTP client's has
    httpx's trailing slash), so each client checks here, unless the settings turn the check
    off. The check is only a saving: whatever fails is not remembered (a child then checks
    itself, as a fresh process does). It leaves no thread behind (the fork needs none
    running) and no current event loop (a fresh process has none set either).
    """
    import asyncio

    from prefect._internal.version_checking import check_server_version
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    if not get_current_settings().client.server_version_check_enabled:
        return
    loop = asyncio.new_event_loop()
    try:
        with contextlib.suppress(Exception):
            loop.run_until_complete(check_server_version(url, LOG, raise_on_error=False))
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
    with (
        contextlib.suppress(Exception),
        temporary_settings(updates={PREFECT_API_URL: url}),
        get_client(sync_client=True) as client,
    ):
        client.raise_for_api_version_mismatch_once()


def _portable(value: Any) -> Any:
    """``value`` if it survives pickling (the caller unpickles it), else a RuntimeError
    that names it."""
    try:
        handoff.pickle.loads(handoff.pickle.dumps(value))
    except Exception:
        return RuntimeError(f"{type(value).__name__}: {value}")
    return value


def _modules() -> list[str]:
    """Every module of fdptm's packages."""
    names = []
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names.extend(m.name for m in pkgutil.walk_packages(path, f"{package}."))
    return names


def _take_lock(path: Path) -> int:
    """The server's lock (one server per environment), its pid written in it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = (os.read(fd, 64).decode(errors="replace").split() or ["unknown"])[0]
        os.close(fd)
        raise BadInputError(
            f"a release process already serves this environment (pid {holder}); "
            "`fdptm serve --stop` stops it"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def holder() -> tuple[int, int] | None:
    """The pid of the server for this environment and how many commands it has run, or
    None when none runs."""
    path = handoff.socket_path()
    if path is None:
        return None
    try:
        fd = os.open(path.with_suffix(".lock"), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            fields = os.read(fd, 64).decode(errors="replace").split()
            numbers = [int(f) for f in fields if f.isdigit()]
            return (numbers[0], numbers[1] if len(numbers) > 1 else 0) if numbers else None
        return None  # nobody holds it
    finally:
        os.close(fd)


def _load_kernels() -> None:
    """Load the compiled kernels of fdptm's modules from numba's cache, for every
    signature cached on this machine, without running any. The parallel ones are left to
    load on first use: loading one starts numba's threading layer, which a fork must not
    copy. The cache index is numba's internal API: when it changes, say so and go on (the
    kernels then load in each command, as in a fresh process)."""
    from numba.core.registry import CPUDispatcher

    for name, module in list(sys.modules.items()):
        if not name.startswith("fdptm.") or module is None:
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, CPUDispatcher) or value.targetoptions.get("parallel"):
                continue
            try:
                machine = value.targetctx.codegen().magic_tuple()
                cached = value._cache._cache_file._load_index()
            except AttributeError:
                _say("numba's cache changed its layout: kernels load in each command")
                return
            for entry in cached:
                if entry[1] == machine:
                    value.compile(entry[0])


class _Outbox:
    """Messages to the caller, from any thread (log records arrive from Prefect's)."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, message: dict) -> None:
        with self._lock:
            handoff.send(self._conn, message)


class _Forward(logging.Handler):
    """The child's log records, sent to the caller's loggers (``handoff.call``)."""

    def __init__(self, outbox: _Outbox) -> None:
        super().__init__()
        self._outbox = outbox

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = dict(record.__dict__)
            fields["msg"] = record.getMessage()
            fields["args"] = None
            if record.exc_info:
                fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
            fields["exc_info"] = None
            self._outbox.send({"log": fields})
        except Exception:
            self.handleError(record)


def _adopt(request: dict, fds: list[int]) -> None:
    """Become the caller: its stdio, environment, working directory and umask."""
    for target, fd in zip(request["fds"], fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    for missing in {0, 1, 2} - set(request["fds"]):
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, missing)
        os.close(null)
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = sys.__stdin__ = open(0, encoding=encoding, closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        open(1, "wb", buffering=0, closefd=False),  # noqa: SIM115
        encoding=encoding,
        errors=errors,
        line_buffering=os.isatty(1),
        write_through=not os.isatty(1),
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False),  # noqa: SIM115
        encoding=encoding,
        errors="backslashreplace",
        line_buffering=True,
    )
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[handoff.SERVE_VAR] = "off"  # a child never hands off again
    time.tzset()
    tempfile.tempdir = None  # $TMPDIR is the caller's (temporary files of its data)
    _reload_fsspec()
    os.chdir(request["cwd"])
    os.umask(request["umask"])


def _reload_fsspec() -> None:
    """fsspec's configuration (read at import from ``$FSSPEC_*`` and the config directory
    under ``$HOME``), read again from the caller's environment."""
    config = sys.modules.get("fsspec.config")
    if config is None:
        return
    config.conf.clear()
    directory = os.environ.get("FSSPEC_CONFIG_DIR", os.path.expanduser("~/.config/fsspec"))
    config.set_conf_files(directory, config.conf)
    config.set_conf_env(config.conf)


_LOGGING_FROM: list[tuple] = []
"""What this process's Prefect logging was last configured from (``_logging_source``)."""


def _refresh_prefect() -> None:
    """Prefect's settings and logging as a fresh process in this environment has them.

    The logging configuration is made again only when what it is made from
    (``_logging_source``: Prefect's settings and ``PREFECT_*`` variables, its logging file,
    stderr's being a terminal, the colour variables) differs from what the server made it
    from at its start: a command in the server's own environment inherits it with the fork
    (about 0.1 s of a command's CPU, 2026-11-29)."""
    from prefect.context import refresh_global_settings_context
    from prefect.logging import configuration
    from prefect.settings import get_current_settings

    from fdptm.flows import running

    refresh_global_settings_context()
    running.settings_read()
    source = _logging_source(get_current_settings())
    if [source] == _LOGGING_FROM:
        return
    configuration.PROCESS_LOGGING_CONFIG.clear()
    configuration.setup_logging()  # now, from those settings: not later, from a task thread
    _LOGGING_FROM[:] = [source]


def _logging_source(settings: Any) -> tuple:
    """What Prefect's logging configuration is made from in this process: its settings, its
    ``PREFECT_LOGGING_*`` variables (Prefect reads them beside its settings), its logging
    file's size and modification time (the file replaces Prefect's default when it exists),
    and what its console handler decides colours by (a terminal on stderr, the colour
    variables)."""
    try:
        info = Path(settings.logging.config_path).stat()
        stamp = (info.st_size, info.st_mtime_ns)
    except OSError:
        stamp = None
    variables = tuple(
        sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("PREFECT_"))
    )
    console = (os.isatty(2), *(os.environ.get(k) for k in _COLOUR_VARIABLES))
    return settings, variables, stamp, console


_COLOUR_VARIABLES = ("NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM")


def _use_held_api(api) -> None:
    """Let ``running.start_api`` use the server's temporary API when this request's
    Prefect settings would have started one on the same database."""
    from fdptm.flows import running

    if api is not None:
        running.use_served_api(api[1], api[2])


@contextlib.contextmanager
def _interruptible():
    """SIGINT delivered (as KeyboardInterrupt) only inside this block: the command's."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _run_cli(argv: list[str], api) -> int:
    """``fdptm ARGV`` as the ``fdptm`` script runs it; its exit status, as ``sys.exit``
    makes one (None is 0; anything else not an int is printed and is 1)."""
    from fdptm import cli

    sys.argv = ["fdptm", *argv]
    cli._quiet_prefect()
    _refresh_prefect()
    _use_held_api(api)
    try:
        with _interruptible():
            code = cli.main(argv)
    except KeyboardInterrupt:  # before the command's own handler was reached
        cli._error("interrupted")
        return 130
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    if code is None or isinstance(code, int):
        return code or 0
    sys.stderr.write(f"{code}\n")  # what the interpreter writes for SystemExit("...")
    return 1


def _run_call(request: dict, api, outbox: _Outbox) -> Any:
    """A ``served`` function of the Python API; its result or its exception."""
    from fdptm.flows import running

    running.environment_defaults()
    _refresh_prefect()
    _use_held_api(api)
    logging.getLogger().addHandler(_Forward(outbox))  # after Prefect's configuration
    try:
        if request["target"] not in handoff.SERVED:
            raise BadInputError(f"{request['target']} is not served by fdptm serve")
        module, _, name = request["target"].partition(":")
        function = importlib.import_module(module)
        for part in name.split("."):
            function = getattr(function, part)
        with _interruptible():
            return function(*request["args"], **request["kwargs"])
    except BaseException as exc:  # raised in the caller, as if the call had run there
        return exc


def _die_with_caller(conn: socket.socket) -> None:
    """The caller sends nothing after its request: when its end closes before ours, it
    died, and so does this child (as an unserved command dies with its process)."""
    with contextlib.suppress(OSError):
        conn.recv(1)
    os.kill(os.getpid(), signal.SIGKILL)


def _exit_child(code: int) -> None:
    """End as a process does at the Python level (non-daemon threads joined, then the
    ``atexit`` work, Prefect's log and event flush among it), then ``os._exit``: the C++
    destructors of threads the server's libraries hold would abort in a forked copy. A
    Ctrl-C passed on now ends the exit work at once (the default action of SIGINT)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        os._exit(code if isinstance(code, int) else 1)


LOG = logging.getLogger("fdptm.serve")
"""The server's own account (start, stop, the count of commands; never a request's
content): ``fdptm serve`` shows it on stderr (``fdptm.cli_serve``)."""


def _say(message: str) -> None:
    LOG.warning(message)


def check_directory() -> None:
    """Refuse (BadInputError) when this user has no private socket directory."""
    if handoff.socket_dir(create=True) is None:
        Server()  # raises the socket directory's error


def serve_forever() -> None:
    """Warm up, listen and serve until stopped (``fdptm serve``)."""
    server = Server()
    seconds = server.warm()
    server.listen()
    _say(f"ready in {seconds:.1f} s (pid {os.getpid()}): this environment's commands run here")
    server.loop()


DETACH_TIMEOUT = 600.0
"""Seconds ``--detach`` waits for the server to accept commands (a failure guard: it is
ready in about 20 s here)."""


def detach() -> tuple[int, Path]:
    """Start ``fdptm serve`` in its own session, its output in a log beside its socket;
    return its pid and log once it accepts commands, or raise saying why it did not."""
    path = handoff.socket_path(create=True)
    log = path.with_suffix(".log")
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", "fdptm.cli", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    deadline = time.monotonic() + DETACH_TIMEOUT
    while True:
        code = process.poll()
        if code is not None:
            raise BadInputError(f"fdptm serve exited ({code}) before it was ready; see {log}")
        owner = holder()
        if owner is not None and owner[0] == process.pid and path.exists():
            return process.pid, log
        if time.monotonic() > deadline:
            process.terminate()
            raise BadInputError(
                f"fdptm serve was not ready after {DETACH_TIMEOUT:.0f} s and was stopped; see {log}"
            )
        time.sleep(0.1)
