"""The Horizon broker: follows the state store, rewrites and runs queries on Spark, serves gRPC.

Along the query path, each room importing only the rooms after it:

- :mod:`horizon_broker.broker.api`: the gRPC server and its services, messages, the status mapping,
  authentication, admission, the event-loop offload (who is calling, how answers travel);
- :mod:`horizon_broker.broker.engine`: prepare -> plan -> run: the query engine, the catalog it builds from the
  follower, the read controls (snapshot waits, floor, pins), the result cache, the query registry;
- :mod:`horizon_broker.broker.sql` (pure): parse once, check, rewrite; every analysis of the SQL is a pass;
- :mod:`horizon_broker.broker.spark`: the Spark session kinds, the executor, the segment views and their scan
  layout, direct reads of segment files, failures by type, the session supervisor.

Beside them, used by all: :mod:`horizon_broker.broker.config` (the one typed configuration) and
:mod:`horizon_broker.broker.grants` (what an identity may read); :mod:`horizon_broker.broker.flight` is the second door (Arrow
Flight SQL) on the same engine. The order, an import-linter contract in ``pyproject.toml``: sql <
grants < config < observe < spark < direct_lookup < engine, explain_key < api, flight, console.
The client, its rendering and the ``horizon`` command live above the broker, at the top of
:mod:`horizon_broker`.
"""
