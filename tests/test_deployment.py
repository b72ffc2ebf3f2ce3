"""The scheduled release deployment: a weekly cron with the dataset and budget parameters."""

from __future__ import annotations

from fdptm.deployments.scheduled_release import WEEKLY, build, from_args


def test_weekly_deployment_carries_schedule_and_parameters():
    dep = build("pheme", 400.0, 1e-5, 5, workspace="/srv/ws")
    assert dep.name == "weekly-release"
    assert dep.flow_name == "release"
    (schedule,) = dep.schedules
    assert schedule.schedule.cron == WEEKLY
    assert dep.parameters == {
        "dataset": "pheme",
        "epsilon": 400.0,
        "delta": 1e-5,
        "topics": 5,
        "iterations": 20,
        "mechanism": "dp-vi",
        "workspace": "/srv/ws",
        "releases_left": None,
    }


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
    assert dep.parameters["releases_left"] == 12 and dep.parameters["epsilon"] == 400.0


def test_audited_release_deployment_is_monthly_with_its_audit_parameters():
    from fdptm.deployments.audited_release import MONTHLY
    from fdptm.deployments.audited_release import from_args as audited_from_args

    args = ["--dataset", "pheme", "--epsilon", "5", "--delta", "1e-5", "--topics", "5"]
    dep = audited_from_args([*args, "--shadows", "32"])
    assert dep.name == "monthly-audited-release" and dep.flow_name == "audited-release"
    assert dep.schedules[0].schedule.cron == MONTHLY
    assert dep.parameters["shadows"] == 32 and dep.parameters["mechanism"] == "dp-vi"
