"""What an OutOfMemoryError in the broker's Spark ends. By default only the query whose task ran
out of heap: Spark does not treat the error as fatal to its executor and the JVM does not exit
at it, so the other queries go on. ``[spark] exit_on_oom`` goes back to ending the JVM (the
supervisor restarts it). Where the error strikes is a race (one of Spark's own threads may get
it and stop the context), so that measurement is ``bench/out_of_memory.py``, not a test here;
the tests below use a real ``OutOfMemoryError`` that fills no heap."""

from __future__ import annotations

from horizon_broker._core.errors import ResourceExhausted
from horizon_broker.broker.api.server import spark_conf
from horizon_broker.broker.config import config_from_mapping
from horizon_broker.broker.spark.failures import OutOfMemory, classify
from horizon_broker.broker.spark.supervisor import SparkSupervisor, engine_failure
from tests.waiting import eventually

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


def _jvm_out_of_memory_error(spark) -> Exception:  # type: ignore[no-untyped-def]
    """A real ``java.lang.OutOfMemoryError`` from the JVM, through Py4J, that fills no heap: an
    array longer than the VM allows is refused at once."""
    jvm = spark.sparkContext._jvm
    try:
        jvm.java.util.Arrays.copyOf(bytearray(b"a"), 2**31 - 1)
    except Exception as error:
        return error
    raise AssertionError("the JVM allocated an array of 2 GiB")


def test_an_out_of_memory_error_is_resource_exhausted_saying_the_others_go_on(spark):
    error = classify(_jvm_out_of_memory_error(spark))
    assert isinstance(error, OutOfMemory) and isinstance(error, ResourceExhausted)
    assert "other queries go on" in str(error)


def test_after_an_out_of_memory_error_the_supervisor_probes_with_a_job(spark):
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup(None))
    supervisor = SparkSupervisor(spark, create=None, probe_interval_s=3600.0).start()
    try:
        failure = engine_failure(
            _jvm_out_of_memory_error(spark), supervisor, session_replaced=False
        )
        assert isinstance(failure, OutOfMemory)  # the query's own error, not "engine lost"
        eventually(
            lambda: set(tracker.getJobIdsForGroup(None)) != jobs_before,
            "a probe job after the OutOfMemoryError",
        )
        assert supervisor.up
    finally:
        supervisor.stop()
