"""Great Expectations checks for ingested rows and for releases.

One ephemeral GX context per process (nothing written to disk, analytics off), and in it one
pandas data source and batch definition per suite name, made on first use and then reused
with each new DataFrame: making them was about half of a release's two validations (GX
re-serialises its project configuration for every data source it adds; py-spy of a served
release, 2026-11-29), and ``fdptm serve`` makes them once for every command it forks
(``prepare``). ``failing_rows`` runs a suite on a DataFrame and maps every unexpected row
index to the reasons it failed, so ingest can report each bad row with why;
``failed_checks`` lists the failed table-level expectations, for release validation.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from functools import cache
from typing import Any

import pandas as pd

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

SUITES = ("ingest", "release-vocabulary", "release-matrix")
"""The names fdptm validates under (``prepare`` makes their batch definitions)."""

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Check:
    """One expectation and the reason reported for a row (or table) that fails it."""

    expectation: Any
    reason: str


@cache
def _context():
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    for name in [n for n in logging.root.manager.loggerDict if n.startswith("great_expectations")]:
        logging.getLogger(name).setLevel(logging.WARNING)  # GX sets INFO on its own loggers
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


@cache
def _batch_definition(name: str):
    """The whole-DataFrame batch definition of suite ``name`` (one data source each)."""
    source = _context().data_sources.add_or_update_pandas(f"fdptm-{name}")
    return source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")


def _forget(definition) -> None:
    """Drop what GX keeps of a validation in the data source's execution engine: the
    batch with its DataFrame (a new batch manager) and the metrics computed from the rows
    (an empty cache of the same kind). The rows are private text, and the next validation
    under this name must not find them."""
    from great_expectations.core.batch_manager import BatchManager

    engine = definition.data_asset.datasource.get_execution_engine()
    engine._batch_manager = BatchManager(execution_engine=engine)  # GX 1.x: no public reset
    engine._metric_cache = type(engine._metric_cache)()


def prepare(names: tuple[str, ...] = SUITES) -> None:
    """Make the GX context and the batch definitions of ``names`` now, not at first use."""
    with _LOCK:
        for name in names:
            _batch_definition(name)


def _validate(frame: pd.DataFrame, checks: list[Check], name: str) -> list[tuple[Check, Any]]:
    """Each check with its GX result on ``frame`` (one validation at a time per process:
    the cached definitions are shared, and GX does not promise thread safety). ``name`` is
    one of ``SUITES``."""
    import great_expectations as gx

    if name not in SUITES:
        raise ValueError(f"unknown validation suite {name!r}: add it to SUITES")

    with _LOCK:
        definition = _batch_definition(name)  # makes GX's context, which the suite needs
        suite = gx.ExpectationSuite(name=f"fdptm-{name}")
        for check in checks:
            suite.add_expectation(check.expectation)
        try:
            batch = definition.get_batch(batch_parameters={"dataframe": frame})
            result = batch.validate(suite, result_format={"result_format": "COMPLETE"})
        finally:
            _forget(definition)
    return list(zip(checks, result.results, strict=True))


def failing_rows(frame: pd.DataFrame, checks: list[Check], name: str) -> dict[int, list[str]]:
    """Row position -> reasons, for every row some row-level expectation flags."""
    if frame.empty:
        return {}
    failures: dict[int, list[str]] = {}
    for check, outcome in _validate(frame.reset_index(drop=True), checks, name):
        if outcome.success:
            continue
        indices = outcome.result.get("unexpected_index_list")
        if indices is None:
            raise RuntimeError(
                f"expectation {outcome.expectation_config.type} failed without row indices: "
                f"{outcome.exception_info}"
            )
        for i in indices:
            failures.setdefault(int(i), []).append(check.reason)
    return failures


def failed_checks(frame: pd.DataFrame, checks: list[Check], name: str) -> list[str]:
    """Reasons of every expectation that fails on ``frame`` (table-level use)."""
    return [
        check.reason for check, outcome in _validate(frame, checks, name) if not outcome.success
    ]
