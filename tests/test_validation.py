"""Great Expectations checks (``fdptm.tasks.validation``): one batch definition per suite
name, made once per process and reused, with every validation seeing only its own rows."""

from __future__ import annotations

import great_expectations as gx
import pandas as pd
import pytest

from fdptm.tasks import validation
from fdptm.tasks.validation import Check, failed_checks, failing_rows

E = gx.expectations


def _word_checks() -> list[Check]:
    return [
        Check(E.ExpectColumnValuesToBeUnique(column="word"), "duplicate word"),
        Check(E.ExpectColumnValuesToMatchRegex(column="word", regex=r"^[a-z]+$"), "bad word"),
    ]


def test_each_validation_sees_only_its_own_rows_under_a_reused_definition():
    validation.prepare()
    made = validation._batch_definition.cache_info().currsize
    assert made >= len(validation.SUITES)
    first = failing_rows(pd.DataFrame({"word": ["a", "b", "a", "B1"]}), _word_checks(), "ingest")
    assert first == {0: ["duplicate word"], 2: ["duplicate word"], 3: ["bad word"]}
    second = failing_rows(pd.DataFrame({"word": ["c", "d"]}), _word_checks(), "ingest")
    assert second == {}
    third = failing_rows(pd.DataFrame({"word": ["x", "7"]}), _word_checks(), "ingest")
    assert third == {1: ["bad word"]}
    assert validation._batch_definition.cache_info().currsize == made  # none made again
    engine = validation._batch_definition("ingest").data_asset.datasource.get_execution_engine()
    batches = engine.batch_manager
    assert not batches._batch_cache and not batches._batch_data_cache  # no rows kept
    assert batches._active_batch_data_id is None and not engine._metric_cache


def test_table_checks_report_the_failed_ones():
    frame = pd.DataFrame({"row_sum": [1.0, 0.5]})
    checks = [
        Check(E.ExpectTableRowCountToEqual(value=2), "k rows"),
        Check(
            E.ExpectColumnValuesToBeBetween(column="row_sum", min_value=0.99, max_value=1.01),
            "rows sum to 1",
        ),
    ]
    assert failed_checks(frame, checks, "release-matrix") == ["rows sum to 1"]
    assert failed_checks(frame.iloc[:1], checks, "release-matrix") == ["k rows"]


def test_an_unknown_suite_name_is_refused():
    with pytest.raises(ValueError, match="unknown validation suite"):
        failed_checks(pd.DataFrame({"a": [1]}), [], "elsewhere")
