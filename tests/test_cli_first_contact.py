"""What a new user meets first (issue 27, item 4): required options marked in --help, a
release's first line before anything heavy, one line per stage, refusals before Prefect,
``fdptm releases``, ``fdptm budget`` at the dataset's own unit, a readable report."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from fdptm.cli import build_parser, main
from fdptm.storage.catalog import Catalog

RELEASE = ["release", "--dataset", "small", "--epsilon", "1000", "--delta", "1e-5"]
RELEASE += ["--topics", "2", "--mechanism", "hdp-lda", "--iterations", "3"]


def test_help_marks_the_required_release_options():
    text = build_parser()._subparsers._group_actions[0].choices["release"].format_help()
    assert text.startswith("usage: fdptm release --dataset NAME --epsilon EPSILON --delta")
    for option in ("--dataset", "--epsilon", "--delta", "--topics"):
        block = text[text.index(f"  {option} ") :].split("\n  --")[0]
        assert "required unless --resume" in " ".join(block.split()), block
    backfill = build_parser()._subparsers._group_actions[0].choices["backfill"]
    required = {a.dest for a in backfill._actions if a.required}
    assert {"dataset", "epsilon", "delta", "topics", "by"} <= required


def test_a_missing_option_is_named_as_required(small, capsys):
    assert (
        main(["release", "--dataset", "small", "--epsilon", "3", "--workspace", str(small.root)])
        == 2
    )
    err = capsys.readouterr().err
    assert "--delta is required" in err and "--topics is required" in err
    assert "Field required" not in err


REFUSALS = {
    "bad value": (["--epsilon", "-1"], None, 2),
    "unknown dataset": (["--dataset", "nope"], None, 2),
    "bad key": ([], "key", 2),
    "too many topics": (["--topics", "5000"], None, 2),
    "tiny epsilon": (["--epsilon", "1e-320"], None, 2),
    "cap": ([], "cap", 3),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refusal_that_needs_no_data_never_imports_prefect_and_spends_nothing(small, case):
    """In a fresh process, as a user runs it: the exit code, a one-line error, and neither
    Prefect nor dp-accounting nor numba imported (seconds of imports: the cap is checked on
    the budget plan, before the noise is calibrated)."""
    extra, fault, code = REFUSALS[case]
    if fault == "key":
        (small.root / "secret.key").write_text("abcd")
    if fault == "cap":
        assert (
            main(
                [
                    "budget",
                    "--dataset",
                    "small",
                    "--cap",
                    "1",
                    "1e-7",
                    "--workspace",
                    str(small.root),
                ]
            )
            == 0
        )
    argv = [*RELEASE, *extra, "--workspace", str(small.root)]
    script = textwrap.dedent(
        f"""
        import sys
        from fdptm.cli import main
        code = main({argv!r})
        heavy = {{m.split(".")[0] for m in sys.modules}} & {{"prefect", "dp_accounting", "numba"}}
        print("EXIT", code, "HEAVY", sorted(heavy))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.stdout.strip().splitlines()[-1] == f"EXIT {code} HEAVY []", (
        done.stdout + done.stderr
    )
    assert done.stderr.startswith("fdptm: error: ") and "Traceback" not in done.stderr
    assert Catalog(small).query("SELECT * FROM ledger") == []


@pytest.fixture(scope="module")
def released(tmp_path_factory, prefect_harness):
    """A workspace with one published release of ``small`` and the CLI's output of it."""
    from fdptm.storage.workspace import Workspace
    from fdptm.tasks.ingest import ingest

    root = tmp_path_factory.mktemp("first-contact")
    workspace = Workspace.resolve(root / "ws")
    path = root / "small.txt"
    path.write_text("\n".join(["apple banana cherry grape"] * 40 + ["durian elderberry figs"] * 40))
    ingest(path, "small", workspace)
    script = textwrap.dedent(
        f"""
        import sys
        from fdptm.cli import main

        class Watch:
            '''stdout that notes whether Prefect was imported when each line was written'''
            def write(self, text):
                shown = f"[prefect={{'prefect' in sys.modules}}] " if text.strip() else ""
                sys.__stdout__.write(shown + text)
                return len(text)
            def flush(self):
                sys.__stdout__.flush()

        sys.stdout = Watch()
        sys.exit(main({[*RELEASE, "--seed", "1", "--workspace", str(workspace.root)]!r}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return workspace, done


def test_the_first_line_says_what_the_release_will_do_before_prefect(released):
    _, done = released
    first, plan = done.stdout.splitlines()[:2]
    assert first.startswith("[prefect=False] release of dataset 'small' (privacy unit: document)")
    assert "epsilon=1000, delta=1e-05, 2 topics" in first
    assert "PRE -> contribution bounding -> M1 set-union -> SAN -> M2 hdp-lda -> publish" in first
    assert plan.startswith("[prefect=False] budget: epsilon=1000")
    assert "vocabulary dp-set-union/weighted" in plan and "train hdp-lda" in plan


def test_every_stage_prints_its_elapsed_time(released):
    _, done = released
    stages = [
        line.split(" done in ")[0].strip()
        for line in done.stderr.splitlines()
        if " done in " in line
    ]
    assert stages == [
        "PRE",
        "contribution bounding",
        "M1 set-union",
        "SAN",
        "M2 hdp-lda",
        "publish",
    ]


def test_releases_lists_what_was_published_as_its_manifest_states_it(released, capsys):
    workspace, _ = released
    assert main(["releases", "--workspace", str(workspace.root)]) == 0
    out = capsys.readouterr().out
    (row,) = Catalog(workspace).query("SELECT run_id, path FROM releases")
    manifest = json.loads((workspace.root / row["path"] / "manifest.json").read_text())
    lines = out.splitlines()
    head = lines.index(next(line for line in lines if line.startswith(row["run_id"])))
    assert f"{manifest['release_date']}  word-level  2 topics" in lines[head]
    assert lines[head].count(":") == 0  # a date, no time of day
    # the manifest's own statement: this seeded test run is said to be NOT DP
    assert lines[head + 1].strip() == manifest["guarantee"]["statement"]
    assert "NOT differentially private" in lines[head + 1]
    assert (
        main(["releases", "--dataset", "small", "--json", "--workspace", str(workspace.root)]) == 0
    )
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["run_id"], listed["topics"], listed["adjacency"]) == (row["run_id"], 2, "word")
    assert listed["guarantee"] == manifest["guarantee"]["statement"]
    assert main(["releases", "--dataset", "other", "--workspace", str(workspace.root)]) == 0
    assert "no published release of dataset 'other'" in capsys.readouterr().out


def test_budget_shows_the_dataset_unit_and_the_others_with_all(released, capsys):
    workspace, _ = released
    assert main(["budget", "--dataset", "small", "--workspace", str(workspace.root)]) == 0
    out = capsys.readouterr().out
    totals = [line for line in out.splitlines() if line.startswith("total at")]
    # document level is the dataset's unit; a word-level spend leaves it undefined, so the
    # word-level total is shown too, each with what it means
    assert [t.split(":")[0] for t in totals] == ["total at document level", "total at word level"]
    assert "for adding or removing one document" in out and "--all" in out
    assert main(["budget", "--dataset", "small", "--all", "--workspace", str(workspace.root)]) == 0
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.startswith("total at")]) == 5


def test_a_cap_that_cannot_count_the_spends_is_refused(released, capsys):
    workspace, _ = released
    args = [
        "budget",
        "--dataset",
        "small",
        "--cap",
        "5000",
        "1e-3",
        "--workspace",
        str(workspace.root),
    ]
    assert main(args) == 2
    assert "cannot count" in capsys.readouterr().err
    assert Catalog(workspace).dataset("small")["cap_epsilon"] is None


def test_the_report_has_no_raw_markdown_and_a_chart_for_one_release(released, capsys):
    workspace, _ = released
    (run_id,) = [r["run_id"] for r in Catalog(workspace).query("SELECT run_id FROM releases")]
    assert (
        main(
            [
                "budget",
                "--dataset",
                "small",
                "--cap",
                "5000",
                "1e-3",
                "--unit",
                "word",
                "--workspace",
                str(workspace.root),
            ]
        )
        == 0
    )
    assert main(["report", "--run", run_id, "--workspace", str(workspace.root)]) == 0
    html = (workspace.root / "reports" / run_id / "report.html").read_text()
    assert "`" not in html and "**" not in html
    import numpy as np
    from PIL import Image

    chart = np.asarray(Image.open(workspace.root / "reports" / run_id / "spend.png").convert("RGB"))
    bar = (chart == np.array([0x4A, 0x7B, 0xB7], dtype=np.uint8)).all(axis=-1)
    assert bar.sum() > 500  # the one release's bar is drawn
    assert main(["report", "--run", "nope", "--workspace", str(workspace.root)]) == 2
    assert "`fdptm releases` lists them" in capsys.readouterr().err
