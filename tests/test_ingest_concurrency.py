"""Concurrent ingests: the checks against what is stored and the insert are one transaction.

Two real ``fdptm ingest`` processes started at once, several times over: of the same file
(with ids, and without, so ids are derived), and of two files sharing ids (of the same
authors, and of other authors). The commands are handed to the session's ``fdptm serve``
(conftest ``served``): each runs in a process of its own, forked from the warm server at
once, so the two race closer together than two fresh processes paying their imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest

from fdptm.errors import BadInputError
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace
from fdptm.tasks.ingest import ingest

ROWS = 2000
REPETITIONS = 2


def _start(path, workspace_root):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fdptm.cli",
            "ingest",
            str(path),
            "--dataset",
            "d",
            "--workspace",
            str(workspace_root),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _scenario(name, tmp_path, repetition):
    """(first file, second file, the loser's message) of two ingests started at once."""
    ids = [f"r{repetition}-{i}" for i in range(ROWS)]
    rows = [{"doc_id": d, "author_id": f"a{i % 50}", "text": f"w{i}"} for i, d in enumerate(ids)]
    first = _write(tmp_path / "a.jsonl", rows)
    if name == "same file":
        return first, first, "this file was already ingested as batch 1 of dataset 'd'"
    if name == "same file, ids derived":
        first = _write(
            tmp_path / "plain.jsonl", [{"text": f"w{repetition} {i}"} for i in range(ROWS)]
        )
        return first, first, "this file was already ingested as batch 1 of dataset 'd'"
    if name == "same ids, same authors":
        # another file with the same authors' same documents: a re-ingest, row by row
        return first, _write(tmp_path / "b.jsonl", rows[::-1]), "already in the dataset"
    assert name == "same ids, other authors"
    other = [{**r, "author_id": f"b{i % 50}"} for i, r in enumerate(rows)]
    return first, _write(tmp_path / "b.jsonl", other), "doc_ids must be unique across authors"


SCENARIOS = [
    "same file",
    "same file, ids derived",
    "same ids, same authors",
    "same ids, other authors",
]


@pytest.mark.usefixtures("served")
@pytest.mark.parametrize("repetition", range(REPETITIONS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_two_ingests_at_once_store_every_document_once(tmp_path, scenario, repetition):
    """Started at once, both take their snapshot before either commits, so the loser is
    refused by the re-check inside the insert transaction (or, started late, by the first
    check): the outcome is the same either way."""
    first, second, refusal = _scenario(scenario, tmp_path, repetition)
    workspace = Workspace.resolve(tmp_path / "ws")
    procs = [_start(first, workspace.root), _start(second, workspace.root)]
    outputs = [p.communicate(timeout=300) for p in procs]
    outcomes = [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]
    codes = sorted(rc for rc, _, _ in outcomes)
    assert codes == [0, 2], outcomes
    (_, _, loser_err) = next(o for o in outcomes if o[0] == 2)
    assert refusal in loser_err and "Traceback" not in loser_err, loser_err
    (winner_out,) = [out for rc, out, _ in outcomes if rc == 0]
    assert f"{ROWS} rows accepted, 0 rejected" in winner_out
    catalog = Catalog(workspace)
    (batch,) = catalog.batches("d")
    assert batch["n_rows"] == ROWS
    table = pq.read_table(workspace.root / batch["path"])
    ids = Counter(table.column("doc_id").to_pylist())
    assert len(ids) == ROWS and set(ids.values()) == {1}
    if scenario == "same ids, other authors":
        # one file's authors only: neither file lost a row to the other
        prefixes = {a[0] for a in table.column("author_id").to_pylist()}
        assert prefixes in ({"a"}, {"b"})
    runs = Counter(r["status"] for r in catalog.query("SELECT status FROM runs"))
    assert runs == {"succeeded": 1, "failed": 1}


def test_a_failed_ingest_creates_no_dataset_and_fixes_no_unit(tmp_path, workspace):
    authored = tmp_path / "a.jsonl"
    authored.write_text(json.dumps({"author_id": "u1", "text": "   "}) + "\n")
    with pytest.raises(BadInputError, match="no valid row"):
        ingest(authored, "d", workspace)
    assert Catalog(workspace).dataset("d") is None
    plain = tmp_path / "b.json"
    plain.write_text(json.dumps({"text": ["fine words"]}))
    ingest(plain, "d", workspace)
    assert Catalog(workspace).dataset("d")["unit"] == "document"
