"""How a subscription computes its deltas: a :class:`DeltaStrategy`, chosen per subscription.

The exact one (:class:`ExactDiff`) runs the query at both snapshots and takes the difference by
key; it is right for every query. The incremental ones read the table's change feed between the
two snapshots: :class:`~.change_feed.ChangeFeed` for filters and projections,
:class:`~.changed_groups.ChangedGroups` for GROUP BY aggregates. :mod:`.choose` picks the
cheapest one that is exact for the query; every one of them gives the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from horizon_broker._core.errors import InvalidArgument

from .change_feed import ChangeFeed
from .changed_groups import ChangedGroups
from .choose import CHANGE_FEED, CHANGED_GROUPS, EXACT_DIFF, Choice, TableFacts, choose
from .diff import Delta, diff
from .group_totals import GroupTotals, totals_of

Run = Callable[[int], pa.Table]
"""The query's answer at a snapshot (through the engine, with every limit a query has)."""
Query = Callable[[str], pa.Table]
"""Any SQL's answer, run through the engine as the subscriber's query (grants, budgets, admission)."""


@dataclass(frozen=True, slots=True)
class Reads:
    """What a strategy may read: the subscription's query and the engine."""

    sql: str
    tables: tuple[str, ...]
    """The upsert tables the query reads (for ``VERSION AS OF``)."""
    key: tuple[str, ...]
    """The result's key (:func:`.stream.result_key`; empty: the whole row)."""
    run: Run
    query: Query


class DeltaStrategy(Protocol):
    """Holds what it needs of the last snapshot and gives the delta to the next one."""

    name: str

    def start(self, snapshot: int) -> pa.Table:
        """The answer at ``snapshot``, the stream's base."""
        ...

    def resume(self, snapshot: int) -> None:
        """Go on from ``snapshot``, whose answer the subscriber already holds."""
        ...

    def advance(self, to: int) -> Delta:
        """The changes from the last snapshot to ``to`` (which becomes the last)."""
        ...


class ExactDiff:
    """Run the query at the new snapshot and diff it with the answer at the last one."""

    name = EXACT_DIFF

    def __init__(self, reads: Reads) -> None:
        self._run = reads.run
        self._key = reads.key
        self._answer: pa.Table | None = None

    def start(self, snapshot: int) -> pa.Table:
        self._answer = self._run(snapshot)
        return self._answer

    def resume(self, snapshot: int) -> None:
        self.start(snapshot)

    def advance(self, to: int) -> Delta:
        assert self._answer is not None, "start() first"
        after = self._run(to)
        delta = diff(self._answer, after, self._key)
        self._answer = after
        return delta


def table_facts(descriptor: Any) -> TableFacts:
    """A table descriptor's part the chooser reads."""
    return TableFacts(descriptor.name, tuple(descriptor.primary_key), bool(descriptor.upsert))


def _fits_key(choice: Choice, key: Sequence[str]) -> str | None:
    """Why the stream's key does not suit ``choice`` (None: it does)."""
    if choice.strategy == CHANGE_FEED and [k.lower() for k in key] != [
        k.lower() for k in choice.primary_key
    ]:
        return f"the result's key ({', '.join(key) or 'the whole row'}) is not the primary key"
    return None


def make_strategy(choice: Choice, reads: Reads, forced: bool = False) -> DeltaStrategy:
    """The strategy ``choice`` names, over ``reads`` (the exact diff when the result's key does
    not suit it; INVALID_ARGUMENT when the request forced it)."""
    misfit = _fits_key(choice, reads.key)
    if misfit is not None:
        if forced:
            raise InvalidArgument(f"strategy {choice.strategy} cannot serve this query: {misfit}")
        return ExactDiff(reads)
    if choice.strategy == CHANGE_FEED:
        return ChangeFeed(choice, reads)
    if choice.strategy == CHANGED_GROUPS:
        totals = totals_of(reads.sql, choice)
        return (
            ChangedGroups(choice, reads) if totals is None else GroupTotals(choice, reads, totals)
        )
    return ExactDiff(reads)


def by_default(choice: Choice, sql: str) -> Choice:
    """What an unforced subscription uses, given what suits the query (``choice``): an
    incremental strategy whose cost follows the commits, not the table (the change feed, changed
    groups kept as totals), else the exact diff. Measured by ``bench.subscribe`` (the
    Subscriptions guide's figures): re-running costs what the table and the answer cost, the
    feed what the window holds."""
    if choice.strategy == CHANGED_GROUPS and totals_of(sql, choice) is None:
        return Choice(
            EXACT_DIFF,
            f"changed_groups suits the query ({choice.reason}), but with min, max, avg or HAVING "
            "it re-runs the query for the touched groups, which costs about a whole re-run; "
            "SubscribeRequest.strategy = 'changed_groups' uses it",
        )
    return choice


def choose_strategy(reads: Reads, descriptors: Sequence[Any], forced: str = "") -> DeltaStrategy:
    """The strategy for the subscription's query over the tables ``descriptors`` describe:
    ``forced`` (a name), else :func:`by_default` of what suits it."""
    choice = choose(reads.sql, [table_facts(d) for d in descriptors], forced)
    unforced = choice if forced else by_default(choice, reads.sql)
    return make_strategy(unforced, reads, forced=bool(forced))


def explain_choice(sql: str, descriptors: Sequence[Any]) -> Choice:
    """The strategy Subscribe would use for ``sql`` unforced, and why (ExplainQuery's answer);
    no strategy when the query reads no upsert table at a snapshot."""
    if not descriptors:
        return Choice("", "Subscribe refuses this query: it reads no upsert table at a snapshot")
    return by_default(choose(sql, [table_facts(d) for d in descriptors]), sql)
