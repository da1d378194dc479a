"""Which failures of starting a query are tried again, and how many times.

A query is started at most :data:`ATTEMPTS` times, and only before anything was sent (its first
batches are gathered before the header goes out). Three policies, one per kind of failure:

- :attr:`Failure.VIEW_MISSING`: a segment view vanished under the query (another session's
  cleanup, a restarted engine). The view cache forgets it; the retry registers it again.
- :attr:`Failure.UNREADABLE_FILES`: Spark's reader failed on segment files. The segments whose
  files the broker cannot read either leave the timeline, and the retry reads what they
  replaced. When none could be removed (the broker reads the files), or they stay unreadable,
  the query fails with UNAVAILABLE saying so.
- :attr:`Failure.ENGINE`: anything else. Never retried; the supervisor judges whether Spark
  itself was lost (:func:`horizon_broker.broker.spark.supervisor.engine_failure`).

Pure: the engine does the repairs (forget the view, mark the segments) and asks here.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from horizon_broker.broker.spark.failures import UnreadableFiles, ViewMissing

ATTEMPTS = 2
"""Starts of one query: the first, and one more after a repaired failure."""


class Failure(Enum):
    VIEW_MISSING = "a segment view vanished"
    UNREADABLE_FILES = "Spark's reader failed on segment files"
    ENGINE = "any other failure"


def failure_of(error: BaseException) -> Failure:
    """Which policy applies to ``error``."""
    if isinstance(error, ViewMissing):
        return Failure.VIEW_MISSING
    if isinstance(error, UnreadableFiles):
        return Failure.UNREADABLE_FILES
    return Failure.ENGINE


def retries(failure: Failure, attempt: int, removed: Sequence[str]) -> bool:
    """Whether the query starts again after ``failure`` in its ``attempt`` (0 first);
    ``removed``: the segments the repair took off the timeline (unreadable files only)."""
    if attempt + 1 >= ATTEMPTS:
        return False
    if failure is Failure.VIEW_MISSING:
        return True
    if failure is Failure.UNREADABLE_FILES:
        return bool(removed)
    return False
