"""The scheduled release deployment: a weekly cron with the dataset and budget parameters."""

from __future__ import annotations

import pytest

from fdptm.deployments.scheduled_release import WEEKLY, build, from_args
from fdptm.mechanisms.registry import DEFAULT_MECHANISM
from fdptm.request import ReleaseRequest


def test_weekly_deployment_carries_schedule_and_the_whole_request():
    request = ReleaseRequest(
        dataset="pheme", epsilon=400.0, delta=1e-5, topics=5, workspace="/srv/ws"
    )
    dep = build(request)
    assert dep.name == "weekly-release"
    assert dep.flow_name == "release"
    (schedule,) = dep.schedules
    assert schedule.schedule.cron == WEEKLY
    assert dep.parameters == {"request": request.model_dump(mode="json")}
    assert ReleaseRequest(**dep.parameters["request"]) == request


def test_command_line_passes_every_parameter():
    dep = from_args(
        [
            "--dataset",
            "pheme",
            "--epsilon",
            "400",
            "--delta",
            "1e-5",
            "--topics",
            "5",
            "--releases-left",
            "12",
            "--cron",
            "0 0 1 * *",
            "--name",
            "monthly",
        ]
    )
    assert dep.name == "monthly"
    assert dep.schedules[0].schedule.cron == "0 0 1 * *"
    request = dep.parameters["request"]
    assert request["releases_left"] == 12 and request["epsilon"] == 400.0


def test_audited_release_deployment_is_monthly_with_its_audit_parameters():
    from fdptm.deployments.audited_release import MONTHLY
    from fdptm.deployments.audited_release import from_args as audited_from_args

    args = ["--dataset", "pheme", "--epsilon", "5", "--delta", "1e-5", "--topics", "5"]
    dep = audited_from_args([*args, "--shadows", "32"])
    assert dep.name == "monthly-audited-release" and dep.flow_name == "audited-release"
    assert dep.schedules[0].schedule.cron == MONTHLY
    assert (
        dep.parameters["shadows"] == 32
        and dep.parameters["request"]["mechanism"] == DEFAULT_MECHANISM
    )


def test_backfill_deployment_carries_the_request_and_the_range():
    from fdptm.deployments.backfill import from_args as backfill_from_args

    args = ["--dataset", "news", "--epsilon", "1", "--delta", "1e-6", "--topics", "5"]
    dep = backfill_from_args([*args, "--by", "week", "--from", "2024-01-01"])
    assert dep.name == "backfill" and dep.flow_name == "backfill" and not dep.schedules
    assert {k: dep.parameters[k] for k in ("by", "first", "last")} == {
        "by": "week",
        "first": "2024-01-01",
        "last": None,
    }
    assert ReleaseRequest(**dep.parameters["request"]).window is None
    with pytest.raises(SystemExit):  # the backfill chooses the partitions: no --since
        backfill_from_args([*args, "--by", "week", "--since", "2024-01-01"])
