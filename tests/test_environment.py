"""The real dependencies every integration test relies on actually work."""

import redis


def test_shared_redis_server_answers_on_loopback(redis_client: redis.Redis) -> None:
    redis_client.set("horizon:probe", "1")
    assert redis_client.get("horizon:probe") == b"1"


def test_shared_spark_session_runs_sql(spark) -> None:  # type: ignore[no-untyped-def]
    assert spark.sql("SELECT 1 + 1 AS two").collect()[0]["two"] == 2
