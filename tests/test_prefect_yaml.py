"""prefect.yaml against a real Prefect server (`prefect server start` with its services, in a
temporary PREFECT_HOME):

- `prefect deploy --all` registers every deployment on the process work pool, with
  parameters the release request model accepts;
- the scheduler service creates the flow runs of the scheduled deployments (with Prefect 3.8
  and SQLAlchemy 2.1 its bulk insert failed and no run was ever created);
- a real process worker (`prefect worker start --run-once`) runs the `weekly-release` and
  `backfill` deployments to completion on gensim's Lee corpus. That is issue 27's case: the
  pull step runs each flow in the checkout's root, where a source folder once hid the
  installed package (`No module named 'fdptm.tasks'`). It holds for editable and plain
  installs alike: the flow files are loaded from the checkout, everything they import from
  the installed package.

The module starts its own server rather than using the session's `prefect_harness`: the
harness's server is ephemeral, and an ephemeral Prefect server runs no scheduler."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from conftest import S3_CREDENTIALS, free_port, s3_filesystem, shared_keys

from fdptm.request import LocalReleaseRequest, ReleaseRequest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the prefect and fdptm commands of this interpreter
DECLARED = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
FLOWS = {
    "weekly-release": "release",
    "weekly-window-release": "release",
    "monthly-audited-release": "audited-release",
    "backfill": "backfill",
    "online-release": "online-release",
}
TIMEOUT = 900  # seconds, for anything to happen; a busy 2-core machine can be slow


def _env(home: Path, api: str | None = None, **extra: str) -> dict[str, str]:
    """This environment without its Prefect settings (a developer's API, profile or database
    must not leak in), with its own HOME and PREFECT_HOME, the API URL, and PWD the
    checkout's root (prefect.yaml's pull step captures it at deploy time)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {
        "HOME": str(home),
        "PWD": str(ROOT),
        "PREFECT_HOME": str(home / ".prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": os.environ.get("PREFECT_LOGGING_LEVEL", "WARNING"),
        **extra,
    }
    if api:
        env["PREFECT_API_URL"] = api
    return env


def _run(*args: str, env: dict[str, str], cwd: Path = ROOT) -> str:
    """Run one of this interpreter's commands; its standard output (it must succeed)."""
    done = subprocess.run(
        [str(BIN / args[0]), *args[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _tail(path: Path, lines: int = 80) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _client(api: str):
    from prefect.client.orchestration import SyncPrefectClient

    return SyncPrefectClient(api)


@contextmanager
def _server(root: Path, **settings: str) -> Iterator[tuple[str, Path]]:
    """A real Prefect server in ``root`` (the scheduler's loop every 2 s; ``settings``: more
    of its environment, e.g. its database) with the fdptm-process pool and prefect.yaml's
    deployments (`prefect deploy --all`): its API URL and its log file."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.workers.process import ProcessWorker

    home = root / "home"
    home.mkdir()
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    log = root / "server.log"
    env = _env(
        home,
        PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="2",
        PREFECT_SERVER_LOGGING_LEVEL="INFO",  # the scheduler's "Scheduled N runs." lines
        **settings,
    )
    command = ["server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"]
    with log.open("w") as out:
        server = subprocess.Popen(
            [str(BIN / "prefect"), *command],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert server.poll() is None, f"prefect server start exited:\n{_tail(log)}"
            assert time.monotonic() < deadline, f"the server did not start:\n{_tail(log)}"
            try:
                with urllib.request.urlopen(f"{api}/health", timeout=10) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        # as `prefect work-pool create fdptm-process --type process` does (without the
        # seconds a CLI process takes to start)
        with _client(api) as client:
            client.create_work_pool(
                WorkPoolCreate(
                    name="fdptm-process",
                    type="process",
                    base_job_template=ProcessWorker.get_default_base_job_template(),
                )
            )
        _run("prefect", "--no-prompt", "deploy", "--all", env=_env(home, api))
        yield api, log
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory):
    """``_server`` on its own SQLite database."""
    with _server(tmp_path_factory.mktemp("prefect-server")) as found:
        yield found


def test_prefect_deploy_all_registers_every_deployment_on_the_process_pool(prefect_api):
    api, _ = prefect_api
    assert [spec["name"] for spec in DECLARED] == list(FLOWS)
    with _client(api) as client:
        for spec in DECLARED:
            flow_name = FLOWS[spec["name"]]
            d = client.read_deployment_by_name(f"{flow_name}/{spec['name']}")
            assert d.work_pool_name == "fdptm-process"
            assert d.pull_steps[0]["prefect.deployments.steps.set_working_directory"] == {
                "directory": str(ROOT)
            }
            if flow_name == "online-release":
                assert [s.schedule.interval.total_seconds() for s in d.schedules] == [900]
                local = LocalReleaseRequest.build(**d.parameters["request"])
                assert (local.dataset, local.mechanism, local.prior) == (
                    "reports",
                    "olp-lda",
                    "pub",
                )
                continue
            crons = [s["cron"] for s in spec.get("schedules", [])]
            assert [s.schedule.cron for s in d.schedules] == crons
            request = ReleaseRequest.build(**d.parameters["request"])
            assert (request.dataset, request.epsilon, request.topics) == ("lee", 5.0, 5)
            window = "last-week" if spec["name"] == "weekly-window-release" else None
            assert request.window == window
            if flow_name == "backfill":
                assert d.parameters["by"] == "batch"


def _matches(cron: str, when: dt.datetime) -> bool:
    """``when`` (UTC) is a time of ``cron`` (its fields ``*`` or a number, as prefect.yaml's)."""
    values = [when.minute, when.hour, when.day, when.month, when.isoweekday() % 7]
    return all(f == "*" or int(f) == v for f, v in zip(cron.split(), values, strict=True))


def test_the_scheduler_creates_the_runs_of_the_scheduled_deployments(prefect_api):
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    api, log = prefect_api
    scheduled = {s["name"]: s["schedules"] for s in DECLARED if s.get("schedules")}
    crons = {"weekly-release", "weekly-window-release", "monthly-audited-release"}
    assert crons <= {n for n, s in scheduled.items() if "cron" in s[0]}
    state = FlowRunFilter(
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
    )
    deadline = time.monotonic() + TIMEOUT
    with _client(api) as client:
        ids = {n: client.read_deployment_by_name(f"{FLOWS[n]}/{n}").id for n in FLOWS}
        while True:
            runs = {
                name: [
                    r
                    for r in client.read_flow_runs(
                        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[i])),
                        flow_run_filter=state,
                    )
                    if r.auto_scheduled
                ]
                for name, i in ids.items()
            }
            if all(runs[name] for name in scheduled):
                break
            missing = [name for name in scheduled if not runs[name]]
            assert time.monotonic() < deadline, f"no runs scheduled for {missing}:\n{_tail(log)}"
            time.sleep(1)
    assert not runs["backfill"]  # no schedule
    now = dt.datetime.now(dt.UTC)
    for name, schedules in scheduled.items():
        for run in runs[name]:
            when = run.expected_start_time.astimezone(dt.UTC)
            assert when > now - dt.timedelta(minutes=5), (name, when)
            if "cron" in schedules[0]:
                assert _matches(schedules[0]["cron"], when), (name, when)


def _assert_completed(client, name: str, run_id, worker: subprocess.CompletedProcess) -> None:
    """The flow run completed; or a failure with its logs and the worker's output."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    run = client.read_flow_run(run_id)
    if run.state is None or not run.state.is_completed():
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
        pytest.fail(
            f"{name}: {run.state!r}\n"
            + "\n".join(log.message for log in logs)
            + f"\nworker (exit status {worker.returncode}):\n{worker.stdout[-3000:]}\n"
            + worker.stderr[-6000:]
        )


def test_a_process_worker_runs_the_release_and_backfill_deployments(prefect_api, tmp_path):
    """On the Lee corpus's 300 documents the deployments' own request (dp-vi at epsilon 5)
    gets a DP vocabulary of a handful of words, so the runs take the demo's request (HDP-LDA
    at epsilon 500), which has topics to show; `backfill` keeps its own `by: batch`. Both
    runs go to one worker, which runs them at once."""
    from gensim.test.utils import datapath
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    from fdptm.cli import DEMO

    api, _ = prefect_api
    home = tmp_path / "home"
    home.mkdir()
    ws = tmp_path / "ws"
    env = _env(home, api, FDPTM_WORKSPACE=str(ws))
    ingest = ["ingest", datapath("lee_background.cor"), "--dataset", "lee", "--format", "lines"]
    _run("fdptm", *ingest, "--workspace", str(ws), env=env, cwd=tmp_path)
    request = {"dataset": "lee", **DEMO}
    with _client(api) as client:
        runs = {  # as `prefect deployment run NAME --param request=...` does
            name: client.create_flow_run_from_deployment(
                client.read_deployment_by_name(name).id, parameters={"request": request}
            ).id
            for name in ("release/weekly-release", "backfill/backfill")
        }
    # the worker's own directory is not the checkout's: the pull step moves each run there
    start = ["worker", "start", "--pool", "fdptm-process", "--type", "process", "--run-once"]
    worker = subprocess.run(
        [str(BIN / "prefect"), *start, "--install-policy", "never"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    with _client(api) as client:
        for name, run_id in runs.items():
            _assert_completed(client, name, run_id, worker)
        (nested,) = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[runs["backfill/backfill"]])
            )
        )
        _assert_completed(client, "the backfill's release", nested.id, worker)
    releases = [p for p in (ws / "releases").iterdir() if (p / "manifest.json").exists()]
    assert len(releases) == 2, releases  # the weekly release and the backfill's batch 1


def test_two_workers_on_postgresql_run_a_scheduled_release_and_a_backfill(
    tmp_path, postgres_server, s3_server
):
    """The production deployment of the manual (docs/how-to/production.md): the Prefect
    server on PostgreSQL, the catalog on PostgreSQL, the artifacts on an S3 store, one
    signing key, and two process workers, each in a working directory of its own (a host),
    each taking one of the two runs. Both runs complete; the ledger holds both releases;
    `fdptm verify` from a third directory checks the ledger and both releases' files (from
    the store), and each release verifies against the deployment's public key."""
    from gensim.test.utils import datapath
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
    from prefect.client.schemas.objects import StateType

    from fdptm.cli import DEMO

    catalog, prefect_db = postgres_server.database(), postgres_server.database()
    prefect_url = prefect_db.replace("postgresql://", "postgresql+asyncpg://")
    bucket = f"fdptm-{os.urandom(4).hex()}"
    s3_filesystem(s3_server).mkdir(bucket)
    shared = (
        S3_CREDENTIALS
        | shared_keys(tmp_path)
        | {
            "AWS_ENDPOINT_URL": s3_server,
            "FDPTM_CATALOG": catalog,
        }
    )

    def host(name: str, api: str) -> tuple[Path, dict[str, str]]:
        root = tmp_path / name
        (root / "home").mkdir(parents=True)
        return root, _env(root / "home", api, FDPTM_WORKSPACE=str(root / "ws"), **shared)

    server_root = tmp_path / "prefect-server"
    server_root.mkdir()
    with _server(server_root, PREFECT_API_DATABASE_CONNECTION_URL=prefect_url) as (api, _):
        admin, env = host("admin", api)
        _run("fdptm", "store", "--set", f"s3://{bucket}/fdptm", env=env, cwd=admin)
        lee = ["ingest", datapath("lee_background.cor"), "--dataset", "lee", "--format", "lines"]
        _run("fdptm", *lee, env=env, cwd=admin)
        request = {"dataset": "lee", **DEMO}
        with _client(api) as client:
            runs = {
                name: client.create_flow_run_from_deployment(
                    client.read_deployment_by_name(name).id, parameters={"request": request}
                ).id
                for name in ("release/weekly-release", "backfill/backfill")
            }
        start = ["worker", "start", "--pool", "fdptm-process", "--type", "process"]
        once = [*start, "--run-once", "--limit", "1", "--install-policy", "never"]
        workers = []
        for i in (1, 2):
            root, worker_env = host(f"worker{i}", api)
            workers.append(
                subprocess.Popen(
                    [str(BIN / "prefect"), *once],
                    cwd=root,
                    env=worker_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            if i == 1:  # the first worker has taken one run before the second starts
                _wait_for_a_run_to_start(api, list(runs.values()), workers[0])
        done = []
        for worker in workers:
            out, err = worker.communicate(timeout=TIMEOUT)
            done.append(subprocess.CompletedProcess(worker.args, worker.returncode, out, err))
        both = subprocess.CompletedProcess(
            "two workers",
            max(w.returncode for w in done),
            "\n".join(w.stdout for w in done),
            "\n".join(w.stderr for w in done),
        )
        with _client(api) as client:
            for name, run_id in runs.items():
                _assert_completed(client, name, run_id, both)
            (nested,) = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(
                        any_=[runs["backfill/backfill"]]
                    )
                )
            )
            assert nested.state.type == StateType.COMPLETED
        published = {
            i: [p for p in (tmp_path / f"worker{i}" / "ws" / "releases").glob("*/manifest.json")]
            for i in (1, 2)
        }
        assert sorted(len(found) for found in published.values()) == [1, 1], published
        auditor, env = host("auditor", api)
        verified = _run("fdptm", "verify", "--dataset", "lee", env=env, cwd=auditor)
        assert "releases:  2 checked" in verified and "verdict:   OK" in verified
        public = auditor / "deployment.pub"
        public.write_text(_run("fdptm", "verify", "--public-key", env=env, cwd=auditor))
        for manifest in [*published[1], *published[2]]:
            url = f"s3://{bucket}/fdptm/releases/{manifest.parent.name}"
            out = _run("fdptm", "verify", "--release", url, "--key", str(public), env=env)
            assert "verdict:   OK" in out


def _wait_for_a_run_to_start(api: str, run_ids: list, worker: subprocess.Popen) -> None:
    """Until one of ``run_ids`` has left the Scheduled state (a worker claimed it)."""
    deadline = time.monotonic() + TIMEOUT
    with _client(api) as client:
        while not any(not client.read_flow_run(r).state.is_scheduled() for r in run_ids):
            assert worker.poll() is None, worker.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no worker claimed a run"
            time.sleep(0.5)
