"""The query pipeline: follower state -> catalog -> rewrite -> access check -> views -> Spark.

Transport-neutral: the gRPC services turn these results into messages. One query takes one
atomic state of each table (segments, generation, LWM), is bound to it, and runs on the temp views
of exactly those generations (:mod:`~horizon_broker.broker.engine.query_engine`); :mod:`~horizon_broker.broker.engine.prepared`
is the bound query and :mod:`~horizon_broker.broker.engine.execution` the started one. The read controls
(:mod:`~horizon_broker.broker.engine.freshness`, :mod:`~horizon_broker.broker.engine.floor`, :mod:`~horizon_broker.broker.engine.pinning`,
:mod:`~horizon_broker.broker.engine.read_options`), the result cache (:mod:`~horizon_broker.broker.engine.result_cache`), the
catalog built from the follower (:mod:`~horizon_broker.broker.engine.catalog`), Explain's reasons
(:mod:`~horizon_broker.broker.engine.explain`) and the query registry live here too.

May import :mod:`horizon_broker.broker.sql`, :mod:`horizon_broker.broker.spark`, :mod:`horizon_broker.broker.config`, :mod:`horizon_broker.broker.grants`
and the layers below the broker; never :mod:`horizon_broker.broker.api`.
"""

from horizon_broker.broker.engine.execution import FIRST_FLUSH_BYTES, Execution
from horizon_broker.broker.engine.prepared import (
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
from horizon_broker.broker.engine.query_engine import QueryEngine

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
