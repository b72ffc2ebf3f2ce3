"""Public datasets: declared at creation, never charged, never a private dataset's disguise."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fdptm.errors import BadInputError
from fdptm.privacy.accountant import plan_budget
from fdptm.storage.catalog import Catalog
from fdptm.storage.ledger import Ledger
from fdptm.tasks.ingest import ingest
from fdptm.tasks.spec import RunSpec


@pytest.fixture
def texts(tmp_path):
    def write(name: str, lines: list[str]):
        path = tmp_path / name
        path.write_text("\n".join(lines))
        return path

    return write


def _plan(ledger: Ledger, dataset: str):
    spec = RunSpec(run_id="r", workspace="", dataset=dataset, epsilon=1.0, delta=1e-5, topics=2)
    unit = ledger.default_unit(dataset)
    return plan_budget(1.0, 1e-5, spec.stage_specs(unit), authors_are_documents=True)


def test_a_public_dataset_is_never_charged(workspace, texts):
    ingest(texts("pub.txt", ["apple pie", "banana split"]), "pub", workspace, public=True)
    ledger = Ledger(Catalog(workspace))
    assert ledger.is_public("pub")
    ledger.require_public("pub", "a vocabulary")
    plan = _plan(ledger, "pub")
    for attempt in (
        lambda: ledger.reserve("pub", "r", plan),
        lambda: ledger.check("pub", plan),
        lambda: ledger.set_cap("pub", 1.0, 1e-5),
    ):
        with pytest.raises(BadInputError, match="is public: the ledger never charges it"):
            attempt()
    assert ledger.entries("pub") == []
    assert Catalog(workspace).dataset("pub")["cap_epsilon"] is None


def test_a_private_dataset_never_passes_as_public(workspace, texts):
    ingest(texts("priv.txt", ["secret words", "more secrets"]), "priv", workspace)
    ledger = Ledger(Catalog(workspace))
    assert not ledger.is_public("priv")
    with pytest.raises(BadInputError, match="is private: it cannot be used as a prior"):
        ledger.require_public("priv", "a prior")


def test_visibility_is_fixed_at_creation_in_both_directions(workspace, texts):
    ingest(texts("a.txt", ["apple pie"]), "pub", workspace, public=True)
    ingest(texts("b.txt", ["secret words"]), "priv", workspace)
    with pytest.raises(BadInputError, match="must be declared public too"):
        ingest(texts("c.txt", ["private row"]), "pub", workspace)
    with pytest.raises(BadInputError, match="a dataset never becomes public"):
        ingest(texts("d.txt", ["public row"]), "priv", workspace, public=True)
    catalog = Catalog(workspace)
    assert [len(catalog.batches(d)) for d in ("pub", "priv")] == [1, 1]
    assert catalog.dataset("pub")["public"] and not catalog.dataset("priv")["public"]
    ingest(texts("e.txt", ["cherry tart"]), "pub", workspace, public=True)
    assert len(catalog.batches("pub")) == 2


def _cli(workspace, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FDPTM_", "PREFECT_"))}
    env["PREFECT_HOME"] = str(workspace.root.parent / "prefect-home")
    return subprocess.run(
        [sys.executable, "-m", "fdptm.cli", *args, "--workspace", str(workspace.root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_cli_ingest_public_budget_and_release_refusal(workspace, texts):
    path = texts("pub.txt", ["apple banana cherry", "durian elderberry figs"] * 5)
    assert _cli(workspace, "ingest", str(path), "--dataset", "pub", "--public").returncode == 0
    budget = _cli(workspace, "budget", "--dataset", "pub", "--json")
    assert budget.returncode == 0 and json.loads(budget.stdout)["public"] is True
    assert (
        "is public: the ledger never charges it"
        in _cli(workspace, "budget", "--dataset", "pub").stdout
    )
    release = _cli(
        workspace, "release", "--dataset", "pub", "--epsilon", "1", "--delta", "1e-5",
        "--topics", "2",
    )  # fmt: skip
    assert release.returncode == 2, release.stderr
    assert "is public: the ledger never charges it" in release.stderr
    assert "Traceback" not in release.stderr
    assert Ledger(Catalog(workspace)).entries("pub") == []
