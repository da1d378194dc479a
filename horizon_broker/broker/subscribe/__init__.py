"""Subscriptions: a standing query's first result, then its deltas from snapshot to snapshot.

Pure parts: :mod:`.diff` (two answers to change rows by key, and back), :mod:`.coalesce` (message
sizes and coalesced ranges), :mod:`.resume` (resume tokens on snapshot tokens),
:mod:`.snapshot_sql` (the query at a snapshot), :mod:`.choose` (which strategy serves a query,
and why), :mod:`.incremental_sql` (the change-feed queries of the incremental strategies),
:mod:`.messages` (the Subscribe messages). The strategies, over the engine: :mod:`.strategy`
(the exact diff, and the choice made into one), :mod:`.change_feed` and :mod:`.changed_groups`.
The shell:
:mod:`.stream` (one subscription's thread and its relay), :mod:`.handover` (the bounded hand-over
to the call, and the lag past which a subscriber is told to resubscribe), :mod:`.limits`
(per-identity bound, the broker's stop) and :mod:`.recording` (its record in ListQueries).
"""

from .handover import HandOver, SubscriberBehind
from .limits import OpenSubscriptions
from .stream import produce_subscription, relay_subscription, subscription_plan

__all__ = [
    "HandOver",
    "OpenSubscriptions",
    "SubscriberBehind",
    "produce_subscription",
    "relay_subscription",
    "subscription_plan",
]
