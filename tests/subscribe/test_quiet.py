"""The quiet-window rule (pure): a subscription runs no query for a window in which the timeline
shows that no version began or ended, and runs one whenever a file may hold such a version; a
window not quiet only because of a commit the LWM has not reached yet waits for the LWM to
reach it, so one query covers both."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from horizon_broker.broker.sql.feed_files import FileValidity
from horizon_broker.broker.subscribe.quiet import pending_commit, quiet_files
from horizon_broker.broker.subscribe.stream import wait_for_commit

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


# -- a commit whose files the timeline shows before the LWM reaches it --------------------------

COMMIT = 1500
IN_FLIGHT = FileValidity("g.parquet", max_valid_from=COMMIT, max_valid_until=None, open=True)
CLOSED_BY_IT = FileValidity("h.parquet", max_valid_from=400, max_valid_until=COMMIT, open=False)


def test_a_window_not_quiet_only_because_of_a_commit_above_its_end_names_that_commit() -> None:
    assert pending_commit([OLD_OPEN, OLD_CLOSED, IN_FLIGHT, CLOSED_BY_IT], 1000, 1200) == COMMIT


@pytest.mark.parametrize(
    ("file", "why"),
    [
        (FileValidity("c.parquet", 1100, None, True), "a version begins inside the window"),
        (FileValidity("d.parquet", 400, 1100, False), "a version ends inside the window"),
        (FileValidity("e.parquet", None, None, True), "nothing known of its validFrom"),
        (FileValidity("f.parquet", 400, None, False), "closed rows, validUntil unknown"),
    ],
)
def test_a_file_that_may_change_the_window_itself_means_no_wait(
    file: FileValidity, why: str
) -> None:
    assert pending_commit([IN_FLIGHT, file], 1000, 1200) is None, why


def test_a_quiet_window_or_no_files_known_names_no_commit() -> None:
    assert pending_commit([OLD_OPEN, OLD_CLOSED], 1000, 1200) is None
    assert pending_commit([], 1000, 1200) is None


def _segment(file: FileValidity) -> SimpleNamespace:
    return SimpleNamespace(
        location=(f"/t/{file.name}",),
        open_files=(f"/t/{file.name}",) if file.open else (),
        max_valid_from=file.max_valid_from,
        max_valid_until=file.max_valid_until,
    )


class CommitLanding:
    """A follower's part a subscription waits on (its table view, LWM and wake-ups), over one
    table whose LWM reaches ``lands_at`` at the first wait (None: never moves)."""

    def __init__(self, files: list[FileValidity], lwm: int, lands_at: int | None) -> None:
        self.segments = [_segment(f) for f in files]
        self.current, self.lands_at, self.waits = lwm, lands_at, 0

    def view(self, table: str) -> SimpleNamespace:
        return SimpleNamespace(visible_segments=self.segments)

    def lwm(self, table: str) -> int:
        return self.current

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        self.waits += 1
        if self.lands_at is not None:
            self.current = self.lands_at
        return bool(predicate(self))


def test_a_window_below_a_commit_in_flight_is_queried_up_to_it_once_the_lwm_reaches_it() -> None:
    follower = CommitLanding([OLD_OPEN, IN_FLIGHT, CLOSED_BY_IT], lwm=1200, lands_at=1600)
    assert wait_for_commit(follower, ["t"], (1000, 1200), lambda: False) == 1600
    assert follower.waits == 1


def test_a_window_with_a_change_of_its_own_is_queried_at_once() -> None:
    inside = FileValidity("c.parquet", 1100, None, True)
    follower = CommitLanding([IN_FLIGHT, inside], lwm=1200, lands_at=1600)
    assert wait_for_commit(follower, ["t"], (1000, 1200), lambda: False) == 1200
    assert follower.waits == 0


def test_a_commit_the_lwm_does_not_reach_in_time_leaves_the_window_as_it_was() -> None:
    follower = CommitLanding([IN_FLIGHT], lwm=1200, lands_at=None)
    assert wait_for_commit(follower, ["t"], (1000, 1200), lambda: False, patience_s=0.01) == 1200


def test_a_subscription_ended_while_waiting_for_a_commit_stops() -> None:
    follower = CommitLanding([IN_FLIGHT], lwm=1200, lands_at=None)
    assert wait_for_commit(follower, ["t"], (1000, 1200), lambda: True) is None
