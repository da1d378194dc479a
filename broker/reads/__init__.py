"""Read controls: which moment a query reads, and answers kept for a moment that cannot change.

- :mod:`broker.reads.options`: what a call asks for (``min_snapshot`` token, ``max_staleness``,
  ``pin_id``, cache bypass);
- :mod:`broker.reads.freshness`: the snapshot a query must read at least, the staleness bound, and
  waiting for a table's LWM to reach a snapshot (read-your-writes, monotonic reads);
- :mod:`broker.reads.floor`: the highest snapshot served per table, kept in the state store so a
  restarted broker never serves an older one;
- :mod:`broker.reads.pinning`: reading every table at a snapshot pin's snapshot;
- :mod:`broker.reads.cache`: the snapshot-keyed result cache.
"""
