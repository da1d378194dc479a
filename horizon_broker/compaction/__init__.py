"""Compaction: merging a table's small segments under segment locks, and reclaiming history.

:mod:`horizon_broker.compaction.plan` decides what to merge (pure); :mod:`horizon_broker.compaction.run` runs a compaction on
Spark under :mod:`locks` and publishes it; :mod:`horizon_broker.compaction.collect` withdraws and deletes the
segments compactions replaced once their grace period is over.
"""
