"""prefect.yaml registers its deployments against a real Prefect API (`prefect deploy --all`),
on the process work pool, with parameters the release request model accepts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fdptm.request import LocalReleaseRequest, ReleaseRequest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("prefect_harness")


def _prefect(*args: str) -> subprocess.CompletedProcess:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PWD": str(ROOT)}
    cli = Path(sys.executable).with_name("prefect")
    return subprocess.run(
        [str(cli), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_prefect_deploy_all_registers_every_deployment_on_the_process_pool():
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    created = _prefect("work-pool", "create", "fdptm-process", "--type", "process")
    assert created.returncode == 0, created.stdout + created.stderr
    deployed = _prefect("--no-prompt", "deploy", "--all")
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    declared = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]

    async def read(name: str):
        async with get_client() as client:
            return await client.read_deployment_by_name(name)

    flows = ["release", "release", "audited-release", "backfill", "online-release"]
    for flow_name, spec in zip(flows, declared, strict=True):
        d = run_coro_as_sync(read(f"{flow_name}/{spec['name']}"))
        assert d.work_pool_name == "fdptm-process"
        if flow_name == "online-release":
            assert [s.schedule.interval.total_seconds() for s in d.schedules] == [900]
            local = LocalReleaseRequest.build(**d.parameters["request"])
            assert (local.dataset, local.mechanism, local.prior) == ("reports", "olp-lda", "pub")
            continue
        crons = [s["cron"] for s in spec.get("schedules", [])]
        assert [s.schedule.cron for s in d.schedules] == crons
        request = ReleaseRequest.build(**d.parameters["request"])
        assert (request.dataset, request.epsilon, request.topics) == ("lee", 5.0, 5)
        assert request.window == ("last-week" if spec["name"] == "weekly-window-release" else None)
        if flow_name == "backfill":
            assert d.parameters["by"] == "batch"
        assert d.pull_steps[0]["prefect.deployments.steps.set_working_directory"] == {
            "directory": str(ROOT)
        }
