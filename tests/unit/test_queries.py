"""The named statements of ``queries.sql`` agree with the models that read their rows."""

from __future__ import annotations

import dataclasses
import re

from jobserver.store.queries import query
from jobserver.store.records import StepRecord
from jobserver.store.tables import jobs


def _select_list(statement: str) -> list[str]:
    """The items of the statement's last top-level SELECT list."""
    body = statement[statement.rindex("\nSELECT ") + len("\nSELECT "):]
    body = body[:body.index("\nFROM ")]
    items, depth, current = [], 0, ""
    for char in body:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    return items + [current.strip()]


def test_the_claim_returns_the_job_columns_then_the_step_fields_in_record_order() -> None:
    # pgclaim builds records by position: a column added to the model and not to the
    # statement (or the other way round) would shift every value after it.
    items = _select_list(query("claim"))
    job_names = [column.name for column in jobs.c]
    assert items[:len(job_names)] == [f"claimed.{name}" for name in job_names]
    step_items = items[len(job_names):]
    fields = [field.name for field in dataclasses.fields(StepRecord)]
    assert len(step_items) == len(fields)
    for item, field in zip(step_items, fields):
        assert re.search(rf"\b{field}\b", item), (item, field)
