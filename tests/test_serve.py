"""``fdptm serve``: a real server process, real CLI and Python processes handing off to it.

The server runs with its own socket directory and Prefect home, and starts (and holds) its
own temporary Prefect API, as it does for a user with no Prefect server. What a served
command does is checked from outside, as a user sees it: exit statuses, output, files, the
server's own count of the commands it ran (printed when it stops), and, for the Python API,
that the caller never imported Prefect.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from fdptm import handoff

# callers as `python -m` puts their working directory first on sys.path; the server with -P
FDPTM = [sys.executable, "-m", "fdptm.cli"]
LINES = ["apple banana cherry grape"] * 40 + ["durian elderberry figs lemon"] * 40
RELEASE = [
    "release",
    "--dataset",
    "small",
    "--epsilon",
    "50",
    "--delta",
    "1e-5",
    "--mechanism",
    "dp-vi",
    "--topics",
    "2",
    "--iterations",
    "5",
    "--m1",
    "none",
    "--vocabulary",
    "words.txt",
    "--no-progress",
]
STARTUP = 600  # seconds: a failure guard for a busy machine, not a measured expectation


class Served:
    """A running ``fdptm serve`` and the environment its callers share."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        sockets = root / "sockets"
        sockets.mkdir(mode=0o700)
        self.env.update(
            FDPTM_SERVE="on",
            FDPTM_SERVE_DIR=str(sockets),
            FDPTM_WORKSPACE=str(root / "ws"),
            PREFECT_HOME=str(root / "prefect"),
        )
        self.env.pop("PYTHONPATH", None)
        self.log = root / "serve.log"
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "fdptm.cli", "serve"],
            cwd=root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )
        deadline = time.monotonic() + STARTUP
        while "ready in" not in self.log.read_text():
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.2)

    def run(self, *args: str, env: dict | None = None, **options) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*FDPTM, *args],
            cwd=self.root,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=STARTUP,
            **options,
        )

    def python(self, script: str, *flags: str) -> subprocess.CompletedProcess:
        """A Python caller that runs ``script`` in this server's environment."""
        return subprocess.run(
            [sys.executable, *flags, "-c", script],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=STARTUP,
        )

    def count(self) -> int:
        """How many commands the server has run (``fdptm serve --status``)."""
        status = self.run("serve", "--status")
        assert status.returncode == 0, status.stdout + status.stderr
        return int(status.stdout.split(", ")[1].split()[0])

    def stop(self) -> str:
        """Stop it (SIGTERM) and return what it printed."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=STARTUP)
        return self.log.read_text()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    (root / "small.txt").write_text("\n".join(LINES) + "\n")
    words = sorted({w for line in LINES for w in line.split()})
    (root / "words.txt").write_text("\n".join(words) + "\n")
    server = Served(root)
    yield server
    if server.process.poll() is None:
        server.stop()


@pytest.fixture(scope="module")
def handed(served):
    """Commands run through the server, in order; then its log once stopped."""
    before = served.count()
    runs = {
        "ingest": served.run("ingest", "small.txt", "--dataset", "small", "--format", "lines"),
        "release": served.run(*RELEASE),
        "budget": served.run("budget", "--dataset", "small", "--json"),
        "bad": served.run("release", "--dataset", "small", "--epsilon", "-1", "--delta", "1e-5"),
        "usage": served.run("release", "--no-such-option"),
    }
    runs["served"] = served.count() - before
    return runs


def test_a_served_release_is_the_release_a_fresh_process_makes(handed, served):
    assert handed["ingest"].returncode == 0, handed["ingest"].stderr
    done = handed["release"]
    assert done.returncode == 0, done.stderr
    assert "guarantee: (50, 1e-05)-DP, document-level adjacency" in done.stdout
    run_id = next(
        line.split()[-1] for line in done.stdout.splitlines() if line.startswith("run id")
    )
    manifest = json.loads((served.root / "ws" / "releases" / run_id / "manifest.json").read_text())
    assert [s["mechanism"] for s in manifest["stages"] if s["step"] == "M2"] == ["dp-vi"]
    assert manifest["model"]["topics"] == 2
    budget = json.loads(handed["budget"].stdout)
    assert budget["totals"][budget["dataset_unit"]]["epsilon"] == pytest.approx(50)


def test_every_command_was_handed_over(handed):
    assert handed["served"] == 5


def test_the_fdptm_script_hands_over_without_importing_the_command_line(served, handed):
    """The installed ``fdptm`` script (``fdptm.__main__``) hands a command over before it
    imports ``fdptm.cli`` (its parser, the request model and pydantic: about 0.2 s)."""
    script = (
        "import sys\n"
        "from fdptm.__main__ import main\n"
        "sys.argv = ['fdptm', 'budget', '--dataset', 'small', '--json']\n"
        "status = main()\n"
        "heavy = ('fdptm.cli', 'fdptm.request', 'pydantic')\n"
        "print('imported:', [m for m in heavy if m in sys.modules], file=sys.stderr)\n"
        "sys.exit(status)\n"
    )
    before = served.count()
    done = served.python(script)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dataset"] == "small"
    assert "imported: []" in done.stderr
    assert served.count() == before + 1


@pytest.mark.parametrize("enabled", [True, False])
def test_the_servers_version_check_is_the_one_prefects_clients_look_up(prefect_harness, enabled):
    """``fdptm serve`` checks its temporary API's version once so that its children skip
    the check: it must be remembered under the keys Prefect's HTTP and events clients look
    up, leave no thread and no current event loop behind, and not run when the settings turn
    Prefect's check off."""
    from prefect.settings import PREFECT_API_URL

    script = """
import asyncio
import sys
import threading
import prefect
from prefect._internal import version_checking
from prefect.client.orchestration import get_client
from prefect.events.clients import PrefectEventsClient
from fdptm.serve import _check_version

url = sys.argv[1]
assert not version_checking._API_VERSION_CHECK_CACHE
client = get_client(sync_client=True)
keys = {
    (str(client.api_url), client.client_version()),
    (PrefectEventsClient(api_url=url)._api_url, prefect.__version__),
}
for _ in range(3):  # the check gives up after 5 s: a busy machine may need another
    _check_version(url)
    missing = keys - version_checking._API_VERSION_CHECK_CACHE
    if not missing or sys.argv[2] == "False":
        break
print("missing:", len(missing))
print("threads:", threading.active_count())
asyncio.get_event_loop()  # no loop left set (and closed) for the children
print("event loop: as in a fresh process")
"""
    url = PREFECT_API_URL.value()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED"] = str(enabled).lower()
    done = subprocess.run(
        [sys.executable, "-c", script, url, str(enabled)],
        env={**env, "PREFECT_API_URL": url},
        capture_output=True,
        text=True,
        timeout=STARTUP,
    )
    assert done.returncode == 0, done.stderr
    assert f"missing: {0 if enabled else 2}" in done.stdout, done.stdout
    assert "threads: 1" in done.stdout, done.stdout  # the server forks with none running
    assert "event loop: as in a fresh process" in done.stdout, done.stdout


def test_exit_statuses_and_errors_reach_the_caller(handed):
    bad = handed["bad"]
    assert bad.returncode == 2
    assert "epsilon" in bad.stderr and "Traceback" not in bad.stderr
    usage = handed["usage"]
    assert usage.returncode == 2 and "unrecognized arguments: --no-such-option" in usage.stderr


def test_only_callers_of_the_same_environment_are_served(served, handed):
    """Another import-time environment, or FDPTM_SERVE=off, runs the command itself: the
    server's count does not move."""
    before = served.count()
    for env in ({**served.env, "NUMBA_OPT": "2"}, {**served.env, "FDPTM_SERVE": "off"}):
        done = served.run("budget", "--dataset", "small", "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["dataset"] == "small"
    assert served.count() == before


def test_the_python_api_hands_its_flows_over_and_gets_errors_back(served, handed):
    script = """
import sys
import fdptm
from fdptm import handoff
from fdptm.errors import BadInputError

small = fdptm.Workspace("ws").dataset("small")
release = small.release(epsilon=50, delta=1e-5, mechanism="dp-vi", topics=2, iterations=5,
                        m1="none", vocabulary="words.txt")
print("topics", release.topic_word.shape[0])
print("prefect imported here:", "prefect" in sys.modules)
try:
    handoff.call("os:getcwd")
except BadInputError as exc:
    print("refused:", exc)
"""
    before = served.count()
    done = served.python(script, "-P")
    assert done.returncode == 0, done.stderr
    assert "topics 2" in done.stdout
    assert "prefect imported here: False" in done.stdout
    assert "refused: os:getcwd is not served by fdptm serve" in done.stdout
    assert served.count() - before == 2  # the release and the refused call


@contextmanager
def catalog_held(served: Served):
    """The workspace's catalog lock, held: a command waits for it, as for another writer."""
    with (served.root / "ws" / "catalog.lock").open("rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def test_a_served_call_s_log_records_reach_the_caller_s_loggers(caplog):
    """The child's ``_Forward`` handler and the caller's ``handoff._request``, over a real
    Unix socket pair: a record logged in the child is handled by the caller's logger."""
    from fdptm.serve import _Forward, _Outbox

    caller, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def serve_one() -> None:
        _, fds = handoff.receive(child, fds=3)
        for fd in fds:
            os.close(fd)
        outbox = _Outbox(child)
        outbox.send({"pid": os.getpid() + 10**6})  # no such process: nothing to signal
        record = logging.LogRecord(
            "fdptm.progress", logging.WARNING, __file__, 1, "M2 %s", ("done",), None
        )
        _Forward(outbox).handle(record)
        outbox.send({"done": 7})
        child.close()

    thread = threading.Thread(target=serve_one)
    thread.start()
    handoff.send(caller, {"kind": "call"}, [0, 1, 2])
    with caplog.at_level(logging.INFO, logger="fdptm.progress"):
        assert handoff._follow(caller, {"kind": "call"}, [], [], []) == 7
    thread.join()
    caller.close()
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("fdptm.progress", logging.WARNING, "M2 done")
    ]


@contextmanager
def blocked_budget(served: Served, prefix: tuple[str, ...] = ()):
    """``fdptm budget`` handed over and waiting for the catalog, which the test holds: the
    caller's process and its served child (once it has taken the caller's context)."""
    with catalog_held(served):
        caller = subprocess.Popen(
            [*prefix, *FDPTM, "budget", "--dataset", "small"],
            cwd=served.root,
            env=served.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_interactive_signals,
        )
        yield caller, _wait_for_adoption(served)


def _interactive_signals() -> None:
    """The caller's Ctrl-C as in a terminal, however the suite was started: a suite run as
    a background job (``.ci/run &``) ignores SIGINT, every process it starts inherits that,
    and a caller that ignores SIGINT rightly neither relays it nor dies of it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_reaches_the_served_command(served, handed):
    """SIGINT to the caller interrupts the child, which exits 130 (``interrupted``), and
    the caller with it."""
    with blocked_budget(served) as (caller, _):
        caller.send_signal(signal.SIGINT)
        _, err = caller.communicate(timeout=STARTUP)
    assert caller.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err


def test_a_caller_killed_takes_its_served_command_with_it(served, handed):
    with blocked_budget(served) as (caller, child):
        caller.kill()
        caller.communicate(timeout=STARTUP)
        deadline = time.monotonic() + STARTUP
        while _alive(child):
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_a_signal_the_caller_ignores_stays_ignored(served, handed):
    """``nohup fdptm ...``: SIGHUP ignored by the caller is neither passed on nor fatal to
    the served command, which finishes once the catalog is free."""
    with blocked_budget(served, ("nohup",)) as (caller, _):
        caller.send_signal(signal.SIGHUP)
    out, err = caller.communicate(timeout=STARTUP)
    assert caller.returncode == 0, err
    assert "small" in out


def test_concurrent_callers_are_served_side_by_side(served, handed):
    results: list[subprocess.CompletedProcess] = []

    def budget() -> None:
        results.append(served.run("budget", "--dataset", "small", "--json"))

    threads = [threading.Thread(target=budget) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr for r in results]


def test_a_served_command_killed_by_a_signal_kills_its_caller_alike(served, handed):
    """A release that dies by SIGKILL (``FDPTM_KILL_AT``, fdptm.faults) in the served child:
    the caller dies of SIGKILL too, as it would have unserved; the run is then recovered."""
    killed = served.run(*RELEASE, env={**served.env, "FDPTM_KILL_AT": "after-preprocess"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    recovered = served.run("recover")
    assert recovered.returncode == 0, recovered.stderr
    assert "marked failed" in recovered.stdout + recovered.stderr


def test_one_server_per_environment_and_stop(served, handed):
    second = served.run("serve")
    assert second.returncode == 2
    assert f"already serves this environment (pid {served.process.pid})" in second.stderr
    status = served.run("serve", "--status")
    assert status.returncode == 0 and f"pid {served.process.pid}," in status.stdout
    stopped = served.run("serve", "--stop")
    assert stopped.returncode == 0
    served.process.wait(timeout=STARTUP)
    assert "stopped after" in served.log.read_text()
    assert not list((served.root / "sockets").glob("*.sock"))
    assert served.run("serve", "--status").returncode == 1


def test_detach_returns_once_the_server_is_ready(served, handed):
    """After the module's server stopped: ``--detach`` starts one in the background and
    returns when it accepts commands; the next command is served at once; a second
    ``--detach`` finds it running."""
    started = served.run("serve", "--detach")
    try:
        assert started.returncode == 0, started.stderr
        assert served.count() == 0
        budget = served.run("budget", "--dataset", "small", "--json")
        assert budget.returncode == 0 and json.loads(budget.stdout)["dataset"] == "small"
        assert served.count() == 1
        again = served.run("serve", "--detach")
        assert again.returncode == 0 and "serves this environment" in again.stdout
    finally:
        assert served.run("serve", "--stop").returncode == 0
    deadline = time.monotonic() + STARTUP
    while served.run("serve", "--status").returncode != 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_socket_directory_others_can_enter_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "open"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    env = {**os.environ, "FDPTM_SERVE_DIR": str(shared), "FDPTM_SERVE": "on"}
    done = subprocess.run(
        [*FDPTM, "serve", "--status"], env=env, capture_output=True, text=True, timeout=STARTUP
    )
    assert done.returncode == 2
    assert "only you can enter" in done.stderr and "Traceback" not in done.stderr
    monkeypatch.setenv("FDPTM_SERVE_DIR", str(shared))
    assert handoff.socket_dir() is None and handoff.connect() is None


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()]


def _wait_for_adoption(served: Served) -> int:
    """The served child once it has taken its caller's context (its working directory)."""
    deadline = time.monotonic() + STARTUP
    while True:
        child = _wait_for_child_of(served.process.pid)
        try:
            if Path(f"/proc/{child}/cwd").resolve() == served.root.resolve():
                return child
        except OSError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _wait_for_child_of(pid: int) -> int:
    deadline = time.monotonic() + STARTUP
    while True:
        # the held API server is a child too: a served command is a child that is not it
        kids = [k for k in _children(pid) if "api_server" not in _cmdline(k)]
        if kids:
            return kids[0]
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except FileNotFoundError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


LOGGING_FOLLOWS = """
import json, logging, os, pathlib, sys
from prefect.logging import configuration
from fdptm import serve
from fdptm.cli import _quiet_prefect

def level():
    return logging.getLogger("prefect").level


def console():
    return logging._handlers["console"].level  # Prefect's console handler, by its name

_quiet_prefect()
serve._refresh_prefect()  # as the server at its start
levels = [level()]
os.environ["PREFECT_LOGGING_LEVEL"] = "DEBUG"  # a command of another environment
serve._refresh_prefect()
levels.append(level())
os.environ["PREFECT_LOGGING_LEVEL"] = "CRITICAL"
serve._refresh_prefect()
levels.append(level())
text = pathlib.Path(configuration.DEFAULT_LOGGING_SETTINGS_PATH).read_text()
own = text.replace('"${PREFECT_LOGGING_LEVEL}"', "WARNING")
assert own != text
pathlib.Path(sys.argv[1], "logging.yml").write_text(own)  # a logging file written since
serve._refresh_prefect()
levels.append(level())
os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] = "ERROR"  # not a settings field
serve._refresh_prefect()
levels.append(console())
print(json.dumps(levels))
"""


def test_a_served_commands_prefect_logging_follows_its_settings_and_logging_file(tmp_path):
    """A command whose Prefect settings, ``PREFECT_LOGGING_*`` variables or logging file
    differ from those the server configured its logging from gets its own configuration,
    as a fresh process would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    done = subprocess.run(
        [sys.executable, "-c", LOGGING_FOLLOWS, str(tmp_path)],
        env=env | {"PREFECT_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    levels = json.loads(done.stdout)
    assert levels == [
        logging.CRITICAL,
        logging.DEBUG,
        logging.CRITICAL,
        logging.WARNING,
        logging.ERROR,
    ]
