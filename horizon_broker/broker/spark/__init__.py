"""Everything that touches Spark: the kinds of session (:mod:`~horizon_broker.broker.spark.modes`), the
executor (job groups, cancel, streaming Arrow), the segment views and the scan layout that splits
a table's files between them, failures classified by type (:mod:`~horizon_broker.broker.spark.failures`), and the supervisor that replaces a dead session.

May import :mod:`horizon_broker.broker.sql` (its models), :mod:`horizon_broker.broker.config` and the layers below the broker;
never :mod:`horizon_broker.broker.direct_lookup` (which reads files without Spark and sits above it), :mod:`horizon_broker.broker.engine` or :mod:`horizon_broker.broker.api`.
"""
