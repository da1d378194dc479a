"""The query pipeline: follower state -> catalog -> rewrite -> access check -> views -> Spark.

Transport-neutral: the gRPC servicer turns these results into messages. One query takes one atomic
view of each table (segments, generation, LWM), rewrites against it, and runs on the temp views of
exactly those generations (:mod:`broker.engine.query_engine`); :mod:`broker.engine.prepared` is
the bound query and :mod:`broker.engine.execution` the started one.
"""

from broker.engine.execution import FIRST_FLUSH_BYTES, Execution
from broker.engine.prepared import (
    SNAPSHOT_CHANGES,
    SNAPSHOT_LWM,
    SNAPSHOT_NONE,
    SNAPSHOT_PIN,
    SNAPSHOT_TIMESTAMP,
    SNAPSHOT_VERSION,
    Prepared,
    TableReadInfo,
    snapshot_reason,
    snapshot_source,
)
from broker.engine.query_engine import QueryEngine

__all__ = [
    "FIRST_FLUSH_BYTES",
    "SNAPSHOT_CHANGES",
    "SNAPSHOT_LWM",
    "SNAPSHOT_NONE",
    "SNAPSHOT_PIN",
    "SNAPSHOT_TIMESTAMP",
    "SNAPSHOT_VERSION",
    "Execution",
    "Prepared",
    "QueryEngine",
    "TableReadInfo",
    "snapshot_reason",
    "snapshot_source",
]
