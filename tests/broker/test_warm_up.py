"""A broker that started its own Spark reads one row of every table before its callers' first
queries, as itself and past the result cache; a table it cannot read is passed over."""

from __future__ import annotations

from horizon_broker.broker.api.warm_up import warm_up
from tests.broker.conftest import BrokerEnv


def test_a_warm_up_reads_every_table_once_and_passes_over_one_it_cannot_read(
    broker_env: BrokerEnv,
):
    engine = broker_env.broker.engine
    engine.views.clear()
    cached = engine.cache.nbytes
    assert warm_up(engine, ["accounts", "no_such_table", "secret"]) == ["accounts", "secret"]
    built = " ".join(engine.views.names())
    assert "accounts" in built and "secret" in built, built
    assert engine.cache.nbytes == cached, "a warm-up's rows never fill the result cache"


def test_a_warm_up_stops_with_its_broker(broker_env: BrokerEnv):
    engine = broker_env.broker.engine
    engine.views.clear()
    assert warm_up(engine, ["accounts"], stopped=lambda: True) == []
    assert not engine.views.names()
