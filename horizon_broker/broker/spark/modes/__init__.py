"""How the broker talks to its Spark: one interface (:class:`SparkMode`), one implementation per
kind of session, and the one place that chooses (:func:`spark_mode`).

- :class:`~horizon_broker.broker.spark.modes.classic.LocalMode`: embedded ``local[*]`` Spark; its files are this
  machine's files, so plain key lookups may be answered from them with pyarrow;
- :class:`~horizon_broker.broker.spark.modes.classic.ClusterMode`: a Spark cluster (``spark://``, YARN, k8s) driven
  from the broker: same job groups and Arrow collection, but the executors read the files;
- :class:`~horizon_broker.broker.spark.modes.connect.ConnectMode`: Spark Connect (``sc://``): no SparkContext, no
  Py4J; cancellation by operation tags, results through Connect's Arrow stream.
"""

from __future__ import annotations

from typing import Any

from horizon_broker.broker.spark.modes.base import SparkMode


def spark_mode(spark: Any) -> SparkMode:
    """The implementation for ``spark`` (a classic or a Spark Connect session)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from horizon_broker.broker.spark.modes.connect import ConnectMode

        return ConnectMode(spark)
    from horizon_broker.broker.spark.modes.classic import ClusterMode, LocalMode

    master = str(spark.sparkContext.master)
    return LocalMode(spark) if master.startswith("local") else ClusterMode(spark)


__all__ = ["SparkMode", "spark_mode"]
