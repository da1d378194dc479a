"""The bottom floor: what every other package shares and nothing here imports from above.

The error hierarchy (:mod:`horizon_broker._core.errors`, mapped to gRPC codes in one place, ``broker/api/status``),
hybrid-clock values and how people read them (:mod:`horizon_broker._core.hlc`), the state store's Redis key
layout (:mod:`horizon_broker._core.keys`) and call helpers (:mod:`horizon_broker._core.redis_calls`), the Spark session factory
(:mod:`horizon_broker._core.spark_session`) and the job commands' shared wrapper (:mod:`horizon_broker._core.commands`).
"""
