"""Key lookups answered straight from local segment files with pyarrow, without a Spark job.

A plain lookup of a few keys (:mod:`horizon_broker.broker.sql.passes.find_key_lookup` says which
queries are plain) costs a Spark job's fixed cost for a few rows; read here, it costs the row
groups that may hold the keys. :mod:`~horizon_broker.broker.direct_lookup.direct_read` answers a
lookup; :mod:`~horizon_broker.broker.direct_lookup.file_sets` holds a table generation's footers,
:mod:`~horizon_broker.broker.direct_lookup.row_groups` prunes row groups by their statistics,
:mod:`~horizon_broker.broker.direct_lookup.key_sets` and
:mod:`~horizon_broker.broker.direct_lookup.row_group_cache` keep what lookups come back to,
:mod:`~horizon_broker.broker.direct_lookup.file_rows` reads one file's rows,
:mod:`~horizon_broker.broker.direct_lookup.file_warming` reads new files ahead of the first lookup,
and :mod:`~horizon_broker.broker.direct_lookup.reading` checks the broker can read a file at all.

Sits above :mod:`horizon_broker.broker.spark`, whose failure types it raises (an unreadable file
is one, whichever engine found it): may import that, :mod:`horizon_broker.broker.sql`,
:mod:`horizon_broker.broker.config` and the layers below the broker; never
:mod:`horizon_broker.broker.engine` or the doors.
"""
