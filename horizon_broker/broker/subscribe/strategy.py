"""How a subscription computes its deltas: a :class:`DeltaStrategy`, chosen per subscription.

The exact one (:class:`ExactDiff`) runs the query at both snapshots and takes the difference by
key; it is right for every query. Cheaper incremental strategies (a table's change feed for
filters and projections, changed groups for aggregates) plug in beside it in :data:`STRATEGIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import pyarrow as pa

from .diff import Delta, diff

Run = Callable[[int], pa.Table]
"""The query's answer at a snapshot (through the engine, with every limit a query has)."""


class DeltaStrategy(Protocol):
    """Holds what it needs of the last snapshot and gives the delta to the next one."""

    name: str

    def start(self, snapshot: int) -> pa.Table:
        """The answer at ``snapshot``, the stream's base."""
        ...

    def advance(self, to: int) -> Delta:
        """The changes from the last snapshot to ``to`` (which becomes the last)."""
        ...


class ExactDiff:
    """Run the query at the new snapshot and diff it with the answer at the last one."""

    name = "exact_diff"

    def __init__(self, run: Run, key: Sequence[str]) -> None:
        self._run = run
        self._key = tuple(key)
        self._answer: pa.Table | None = None

    def start(self, snapshot: int) -> pa.Table:
        self._answer = self._run(snapshot)
        return self._answer

    def advance(self, to: int) -> Delta:
        assert self._answer is not None, "start() first"
        after = self._run(to)
        delta = diff(self._answer, after, self._key)
        self._answer = after
        return delta


STRATEGIES: dict[str, Callable[[Run, Sequence[str]], DeltaStrategy]] = {ExactDiff.name: ExactDiff}


def choose_strategy(run: Run, key: Sequence[str]) -> DeltaStrategy:
    """The strategy for a query: the exact diff (the only one so far)."""
    return STRATEGIES[ExactDiff.name](run, key)
