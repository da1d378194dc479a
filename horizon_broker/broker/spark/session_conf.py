"""The settings the broker starts its own Spark session with."""

from __future__ import annotations

from horizon_broker.broker.config import BrokerConfig


def spark_conf(config: BrokerConfig) -> dict[str, str]:
    """The Spark settings the broker starts its session with: Spark's own guards from
    ``[spark]`` (memory, result size, task attempts, what an OutOfMemoryError ends), then the
    user's ``[spark.conf]`` over them."""
    spark = config.spark
    conf: dict[str, str] = {}
    if not spark.remote:
        result = spark.max_result_size or (
            f"{max(64, 2 * config.limits.max_result_bytes // (1024 * 1024))}m"
        )
        conf.update(
            {
                "spark.driver.memory": spark.driver_memory,
                "spark.memory.fraction": str(spark.memory_fraction),
                "spark.driver.maxResultSize": result,
                "spark.task.maxFailures": str(spark.task_max_failures),
            }
        )
        conf.update(out_of_memory_conf(exit_on_oom=spark.exit_on_oom))
    conf.update(spark.conf_dict)
    return conf


def out_of_memory_conf(*, exit_on_oom: bool) -> dict[str, str]:
    """What an ``OutOfMemoryError`` ends. Off (the default): only the task's query: Spark
    does not treat the error as fatal to its executor (``killOnFatalError.depth`` 0, so local
    mode does not call its exit handler) and the JVM keeps serving; a JVM left unanswering is
    still replaced by the supervisor. On: the JVM exits at the first one and is restarted."""
    if exit_on_oom:
        return {"spark.driver.extraJavaOptions": "-XX:+ExitOnOutOfMemoryError"}
    return {"spark.executor.killOnFatalError.depth": "0"}
