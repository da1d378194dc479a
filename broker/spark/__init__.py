"""Everything that touches Spark: the kinds of session (:mod:`~broker.spark.modes`), the
executor (job groups, cancel, streaming Arrow), the segment views and the scan layout that splits
a table's files between them, direct reads of segment files with pyarrow, failures classified by
type (:mod:`~broker.spark.failures`), and the supervisor that replaces a dead session.

May import :mod:`broker.sql` (its models), :mod:`broker.config` and the floors below the broker;
never :mod:`broker.engine` or :mod:`broker.api`.
"""
