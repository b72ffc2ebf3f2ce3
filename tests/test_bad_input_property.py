"""Bad input never spends (issue 27, item 7): random requests against workspaces with faults.

Hypothesis draws a release request (good and bad values of every option the CLI takes) and
a fault of the workspace (none, missing, a damaged or missing key, an exhausted cap, a
damaged batch file), runs ``fdptm release`` through ``main()`` against a real Prefect API,
a real DuckDB catalog and real Parquet files, and checks the contract:

* the exit code is 0, 2 or 3 (no 1: nothing unexpected), and no traceback is printed;
* the ledger changes only on exit 0, or on a refusal whose message says that budget was
  spent after private data was read (the documented post-read refusals, e.g. a DP
  vocabulary smaller than k after M1).

A second property does the same for ``fdptm ingest`` over damaged input files: exit 0 or 2,
no traceback, and a refused file stores nothing. Examples are drawn from a fixed seed
(``derandomize``), so CI runs the same cases every time.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fdptm.cli import main
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

pytestmark = pytest.mark.usefixtures("prefect_harness")

SPENT_AFTER_READ = "budget is spent"
"""What every post-read refusal says (the stage read private data, so its charge stays)."""

BAD = {
    "dataset": st.sampled_from(["unknown", "../up", "pub", ""]),
    "epsilon": st.one_of(
        st.sampled_from([0.0, -1.0, math.nan, math.inf, 1e-320, 5e-324, 1e308, 1e-300]),
        st.floats(allow_nan=True, allow_infinity=True),
    ),
    "delta": st.one_of(
        st.sampled_from([0.0, 1.0, 2.0, -1e-5, math.nan, 1e-320, 1 - 1e-17]),
        st.floats(allow_nan=True, allow_infinity=True),
    ),
    "topics": st.sampled_from([0, -2, 1001, 10**9, 10**30]),
    "mechanism": st.sampled_from(["nope", "zhu"]),
    "options": st.sampled_from(
        [["--m2-option", "clip=-1"], ["--m2-option", "bogus=1"], ["--m2-option", "clip"]]
    ),
}
"""For each option, values that are wrong (or, for epsilon and delta, anything at all)."""
FAULTS = ["no-workspace", "key-short", "key-dir", "key-empty", "key-missing", "cap"]


@st.composite
def cases(draw) -> tuple[dict, str]:
    """A good request with at most one option broken, against a workspace with at most one
    fault: every refusal path is reached often, and so is a release that runs."""
    request = {
        "dataset": draw(st.sampled_from(["small", "authors"])),
        "epsilon": draw(st.sampled_from([50.0, 200.0, 1000.0])),
        "delta": 1e-5,
        "topics": draw(st.integers(1, 3)),
        "mechanism": draw(st.sampled_from(["hdp-lda", "dp-vi", "topicdp"])),
        "options": [],
    }
    broken = draw(st.sampled_from([None] * 4 + list(BAD)))
    if broken is not None:
        request[broken] = draw(BAD[broken])
    fault = draw(st.sampled_from(["none"] * 6 + FAULTS))
    return request, fault


def _number(x: float | int) -> str:
    return repr(x) if not isinstance(x, float) or math.isfinite(x) else str(x)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Workspace:
    """A workspace with a document-level dataset ``small``, an author-level ``authors``,
    a public ``pub``, and one published release (so a missing key must be refused)."""
    root = tmp_path_factory.mktemp("bad-input")
    ws = root / "ws"
    lines = ["apple banana cherry grape"] * 40 + ["durian elderberry figs lemon"] * 40
    (root / "small.txt").write_text("\n".join(lines))
    rows = [{"text": t, "author_id": f"a{i % 7}"} for i, t in enumerate(lines)]
    (root / "authors.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (root / "pub.txt").write_text("\n".join(lines[:10]))
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with quiet[0], quiet[1]:
        assert (
            main(["ingest", str(root / "small.txt"), "--dataset", "small", "--workspace", str(ws)])
            == 0
        )
        assert (
            main(
                [
                    "ingest",
                    str(root / "authors.jsonl"),
                    "--dataset",
                    "authors",
                    "--workspace",
                    str(ws),
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "ingest",
                    str(root / "pub.txt"),
                    "--dataset",
                    "pub",
                    "--public",
                    "--workspace",
                    str(ws),
                ]
            )
            == 0
        )
        first = ["release", "--dataset", "small", "--epsilon", "1000", "--delta", "1e-5"]
        first += ["--topics", "2", "--mechanism", "hdp-lda", "--iterations", "2", "--no-progress"]
        assert main([*first, "--workspace", str(ws)]) == 0
    workspace = Workspace.resolve(ws)
    Catalog(workspace).release_idle()  # detached before examples copy the directory
    return workspace


def _ledger(ws: Path) -> list[tuple]:
    if not (ws / "catalog.duckdb").exists():
        return []
    rows = Catalog(Workspace.resolve(ws)).query(
        "SELECT entry_id, run_id, stage, epsilon, delta, state FROM ledger ORDER BY entry_id"
    )
    return [tuple(r.values()) for r in rows]


def _fault(ws: Path, fault: str) -> None:
    key = ws / "secret.key"
    if fault == "no-workspace":
        shutil.rmtree(ws)
    elif fault == "key-short":
        key.write_text("abcd")
    elif fault == "key-dir":
        key.unlink()
        key.mkdir()
    elif fault == "key-empty":
        key.write_text("")
    elif fault == "key-missing":
        key.unlink()
    elif fault == "cap":
        with contextlib.redirect_stdout(io.StringIO()):
            for dataset, unit in (("small", "word"), ("authors", "author")):
                cap = ["--cap", "5", "1e-4", "--unit", unit]
                assert main(["budget", "--dataset", dataset, *cap, "--workspace", str(ws)]) == 0


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage errors exit 2
            code = exc.code
    return code, out.getvalue() + err.getvalue()


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
def test_a_release_request_exits_cleanly_and_spends_only_when_it_read(
    template, tmp_path_factory, case
):
    request, fault = case
    ws = tmp_path_factory.mktemp("case") / "ws"
    shutil.copytree(template.root, ws)
    _fault(ws, fault)
    before = _ledger(ws)
    argv = ["release", "--dataset", request["dataset"], "--epsilon", _number(request["epsilon"])]
    argv += ["--delta", _number(request["delta"]), "--topics", _number(request["topics"])]
    argv += ["--mechanism", request["mechanism"], *request["options"], "--iterations", "2"]
    argv += ["--no-progress", "--workspace", str(ws)]
    code, output = _run(argv)
    event(f"exit {code}{' after a spend' if SPENT_AFTER_READ in output else ''}")
    assert code in (0, 2, 3), output
    assert "Traceback" not in output, output
    after = _ledger(ws)
    if code != 0 and SPENT_AFTER_READ not in output:
        assert after == before, output


BAD_FILES = st.sampled_from(
    [
        ("big-int.json", '{"text": ["a b c"], "doc_id": [' + "9" * 5000 + "]}"),
        ("big-int.jsonl", '{"text": "a b c", "doc_id": ' + "9" * 5000 + "}\n"),
        ("nested.json", "[" * 100_000 + "]" * 100_000),
        ("not.json", '{"text": ["a", '),
        ("empty.csv", ""),
        ("blank.txt", "   \n \n"),
        ("latin1.txt", b"caf\xe9 au lait\n".decode("latin-1")),
        ("no-text.jsonl", '{"body": "x"}\n'),
        ("author-like.csv", "text,writer\nalpha beta,w1\n"),
        ("two-authors.csv", "text,user,sender\nalpha,u,s\n"),
        ("dup-ids.jsonl", '{"text": "a", "doc_id": "1"}\n{"text": "b", "doc_id": "1"}\n'),
        ("types.jsonl", '{"text": 5, "doc_id": [1]}\n{"text": null}\n'),
        ("good.csv", "text,user\nalpha beta,u1\ngamma delta,u2\n"),
        ("weird.parquet", "PAR1 not really parquet PAR1"),
    ]
)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=BAD_FILES, existing=st.sampled_from(["small", "authors", "new"]))
def test_an_ingest_of_any_file_exits_cleanly_and_a_refusal_stores_nothing(
    template, tmp_path_factory, case, existing
):
    name, content = case
    root = tmp_path_factory.mktemp("ingest")
    ws = root / "ws"
    shutil.copytree(template.root, ws)
    path = root / name
    if name == "latin1.txt":
        path.write_bytes(content.encode("latin-1"))
    else:
        path.write_text(content)
    catalog = Catalog(Workspace.resolve(ws))
    before = catalog.query("SELECT dataset, seq FROM batches ORDER BY dataset, seq")
    code, output = _run(["ingest", str(path), "--dataset", existing, "--workspace", str(ws)])
    event(f"exit {code}")
    assert code in (0, 2), output
    assert "Traceback" not in output, output
    after = catalog.query("SELECT dataset, seq FROM batches ORDER BY dataset, seq")
    if code == 2:
        assert after == before, output
    else:
        assert len(after) == len(before) + 1
