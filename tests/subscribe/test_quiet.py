"""The quiet-window rule (pure): a subscription runs no query for a window in which the timeline
shows that no version began or ended, and runs one whenever a file may hold such a version."""

from __future__ import annotations

import pytest

from horizon_broker.broker.sql.feed_files import FileValidity
from horizon_broker.broker.subscribe.quiet import quiet_files

OLD_OPEN = FileValidity("a.parquet", max_valid_from=500, max_valid_until=None, open=True)
OLD_CLOSED = FileValidity("b.parquet", max_valid_from=400, max_valid_until=900, open=False)


def test_files_whose_versions_all_began_and_ended_before_the_window_are_quiet() -> None:
    assert quiet_files([OLD_OPEN, OLD_CLOSED], 1000)


@pytest.mark.parametrize(
    ("file", "why"),
    [
        (FileValidity("c.parquet", 1500, None, True), "a version begins after the start"),
        (FileValidity("d.parquet", 400, 1200, False), "a version ends after the start"),
        (FileValidity("e.parquet", None, None, True), "nothing known of its validFrom"),
        (FileValidity("f.parquet", 400, None, False), "closed rows, validUntil unknown"),
    ],
)
def test_a_file_that_may_hold_a_change_after_the_start_is_not_quiet(
    file: FileValidity, why: str
) -> None:
    assert not quiet_files([OLD_OPEN, OLD_CLOSED, file], 1000), why


def test_no_files_known_is_not_quiet() -> None:
    """No file listed (none, or names Spark spells otherwise) tells nothing: the query runs."""
    assert not quiet_files([], 1000)
