"""The one Spark-touching piece of the SQL layer: the session's function list, read once."""

from __future__ import annotations

from typing import Any

from horizon_broker.broker.sql.functions import FunctionPolicy


def function_policy_from_spark(spark: Any) -> FunctionPolicy:
    """A :class:`FunctionPolicy` of every function the session has (built-ins and temporary
    functions registered so far), minus the deny-list. Call it once at start-up: listing the
    functions takes a round trip to the JVM."""
    names = [row[0] for row in spark.sql("SHOW FUNCTIONS").collect()]
    return FunctionPolicy.from_names(names)
