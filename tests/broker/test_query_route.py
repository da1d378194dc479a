"""Where each answer came from, as its metadata says: the route is decided once per preparation
and the metadata follows what happened on it. A key lookup of a new shape and one of a known
shape are both answered from the segment files (the second without any call into Spark),
anything else names the Spark mode, and a repeated answer the result cache."""

from __future__ import annotations

from horizon_broker.broker.engine.direct import DIRECT_ROUTE
from horizon_broker.broker.engine.query_cache import CACHE_ROUTE

# A select list of this file's own: its shape is new to the broker when the test starts.
LOOKUP = "SELECT balance AS route_probe, owner FROM accounts VERSION AS OF 1000 WHERE id = {}"


def test_the_metadata_names_the_route_each_answer_took(broker_env, client):
    engine = broker_env.broker.engine
    without_spark = engine.direct.answers_without_spark
    new_shape = client.execute(LOOKUP.format(7))
    assert new_shape.metadata.execution == DIRECT_ROUTE
    assert engine.direct.answers_without_spark == without_spark, "Spark analysed the new shape"
    known_shape = client.execute(LOOKUP.format(8))
    assert known_shape.metadata.execution == DIRECT_ROUTE
    assert engine.direct.answers_without_spark == without_spark + 1
    assert known_shape.table.column_names == new_shape.table.column_names
    aggregate = client.execute("SELECT count(*) AS route_probe FROM accounts")
    assert aggregate.metadata.execution == engine.executor.mode.describe()
    again = client.execute(LOOKUP.format(8))
    assert again.metadata.execution == CACHE_ROUTE
    assert again.table.equals(known_shape.table)
