"""What an OutOfMemoryError in the broker's Spark ends. By default only the query whose task ran
out of heap: Spark does not treat the error as fatal to its executor and the JVM does not exit
at it, so the other queries go on. ``[spark] exit_on_oom`` goes back to ending the JVM (the
supervisor restarts it). Where the error strikes is a race (one of Spark's own threads may get
it and stop the context), so the measurement is ``bench/out_of_memory.py``, not a test here."""

from __future__ import annotations

from broker.api.server import spark_conf
from broker.config import config_from_mapping

_EXIT_FLAG = "-XX:+ExitOnOutOfMemoryError"
_DEPTH = "spark.executor.killOnFatalError.depth"


def test_by_default_an_out_of_memory_task_fails_its_query_and_not_the_jvm():
    conf = spark_conf(config_from_mapping({}))
    assert conf[_DEPTH] == "0"
    assert _EXIT_FLAG not in conf.get("spark.driver.extraJavaOptions", "")


def test_exit_on_oom_makes_the_jvm_exit_at_any_out_of_memory_error():
    conf = spark_conf(config_from_mapping({"spark": {"exit_on_oom": True}}))
    assert _EXIT_FLAG in conf["spark.driver.extraJavaOptions"]
    assert _DEPTH not in conf


def test_a_spark_connect_session_gets_no_jvm_settings():
    conf = spark_conf(config_from_mapping({"spark": {"remote": "sc://127.0.0.1:15002"}}))
    assert _DEPTH not in conf and "spark.driver.extraJavaOptions" not in conf
