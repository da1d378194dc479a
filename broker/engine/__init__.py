"""The query pipeline: follower state -> catalog -> rewrite -> access check -> views -> Spark.

Transport-neutral: the gRPC services turn these results into messages. One query takes one
atomic state of each table (segments, generation, LWM), is bound to it, and runs on the temp views
of exactly those generations (:mod:`~broker.engine.query_engine`); :mod:`~broker.engine.prepared`
is the bound query and :mod:`~broker.engine.execution` the started one. The read controls
(:mod:`~broker.engine.freshness`, :mod:`~broker.engine.floor`, :mod:`~broker.engine.pinning`,
:mod:`~broker.engine.read_options`), the result cache (:mod:`~broker.engine.result_cache`), the
catalog built from the follower (:mod:`~broker.engine.catalog`), Explain's reasons
(:mod:`~broker.engine.explain`) and the query registry live here too.

May import :mod:`broker.sql`, :mod:`broker.spark`, :mod:`broker.config`, :mod:`broker.grants`
and the floors below the broker; never :mod:`broker.api`.
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
