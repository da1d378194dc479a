"""The bottom floor: what every other package shares and nothing here imports from above.

The error hierarchy (:mod:`core.errors`, mapped to gRPC codes in one place, ``broker/api/status``),
hybrid-clock values and how people read them (:mod:`core.hlc`), the state store's Redis key
layout (:mod:`core.keys`) and call helpers (:mod:`core.redis_calls`), the Spark session factory
(:mod:`core.spark_session`) and the job commands' shared wrapper (:mod:`core.commands`).
"""
